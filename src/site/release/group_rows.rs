//! What each group of a site's state covers, counted in the same pass as
//! the aggregates: under a disclosure policy the site adds one `count` of
//! the rows of each group to its partial aggregate, and wraps every
//! aggregate so that it also counts its own inputs (see
//! [`crate::site::release::guarded`]). The policy checks the counts, and the site
//! drops them before the state leaves: they never cross the wire.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};

use crate::error::{FedError, Result};
use crate::site::release::guarded::{Counted, Guarded, MODE_WIDTH, Modes, Tally};
use fedsql_udfs::catalogue;

/// The name of the row count the site adds.
const ROWS: &str = "__fedsql_group_rows";

/// Where the counts sit in a counted state: the columns to check and drop.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CountColumns {
    /// Columns counting an aggregate's non-NULL (non-zero) inputs.
    pub inputs: Vec<usize>,
    /// Those of `inputs` that count the rows whose input does not count
    /// ([`Tally::Missing`]): the values that count are the group's rows
    /// less these.
    pub missing: Vec<usize>,
    /// The column of the rows each group covers: the last, or the query's
    /// own `count(*)` when it has one.
    pub rows: usize,
    /// Whether `rows` is the query's own `count(*)`, which stays.
    pub rows_asked: bool,
    /// The first of the [`MODE_WIDTH`] columns of each numeric input of
    /// an adding aggregate whose values must not all but 1 to k-1 share
    /// one value (see [`Modes`]).
    pub modes: Vec<usize>,
    /// State columns whose cells the policy holds to k: (the column's
    /// name, the aggregate's name, its number of arguments).
    pub cells: Vec<(String, String, usize)>,
}

impl CountColumns {
    /// Every count column the site added, ascending: the ones it drops.
    pub fn all(&self) -> Vec<usize> {
        let mut all = self.inputs.clone();
        all.extend(self.modes.iter().flat_map(|&at| at..at + MODE_WIDTH));
        if !self.rows_asked {
            all.push(self.rows);
        }
        all.sort_unstable();
        all
    }
}

/// The counts of one state, taken out of it.
#[derive(Debug, Default)]
pub struct StateCounts {
    /// The rows each state row covers.
    pub rows: Vec<i64>,
    /// For every state row and guarded input, the values that count.
    pub inputs: Vec<i64>,
    /// For every state row and numeric input of an adding aggregate, the
    /// values that differ from a value at least k of them share
    /// ([`Modes::odd`]).
    pub odd: Vec<i64>,
}

/// `partial` with every aggregate counting its inputs and one more
/// aggregate, the rows of each group, last; and where those counts are.
/// The policy asks of each input count only whether it is 0 or at least
/// `k`, so an input's count may stop at `k`.
pub(crate) fn counted(partial: AggregateExec, k: u64) -> Result<(AggregateExec, CountColumns)> {
    let enough = i64::try_from(k.max(1)).unwrap_or(i64::MAX);
    let schema = partial.input_schema();
    let mut state_width = 0;
    for expr in partial.aggr_expr() {
        state_width += expr.state_fields()?.len();
    }
    // The group keys (and, for grouping sets, the grouping id) come first.
    let mut at = ExecutionPlan::schema(&partial).fields().len() - state_width;
    let mut columns = CountColumns::default();
    let mut aggregates = Vec::with_capacity(partial.aggr_expr().len() + 1);
    let grouped = !partial.group_expr().is_true_no_grouping();
    for (expr, filter) in partial.aggr_expr().iter().zip(partial.filter_expr()) {
        let fields = expr.state_fields()?;
        let width = fields.len();
        let name = expr.fun().name().to_ascii_lowercase();
        if let ([field], true) = (
            fields.as_slice(),
            catalogue::aggregate(&name).is_some_and(|a| a.cells.is_some()),
        ) {
            columns
                .cells
                .push((field.name().clone(), name, expr.expressions().len()));
        }
        // A grouped pass gives a groups accumulator to every aggregate that
        // has one, and wraps the others' plain accumulators per group.
        let tally = if grouped && expr.groups_accumulator_supported() {
            Tally::Missing
        } else {
            Tally::Counting
        };
        if filter.is_none() && !columns.rows_asked && counts_rows(expr) {
            columns.rows = at;
            columns.rows_asked = true;
        }
        let (guarded, counts, modes) = guard(expr, filter.is_some(), (tally, enough), &schema)?;
        let inputs = at + width..at + width + counts;
        if tally == Tally::Missing {
            columns.missing.extend(inputs.clone());
        }
        columns.inputs.extend(inputs);
        at += width + counts;
        columns
            .modes
            .extend((0..modes).map(|m| at + m * MODE_WIDTH));
        at += modes * MODE_WIDTH;
        aggregates.push(guarded);
    }
    let mut filters = partial.filter_expr().to_vec();
    if !columns.rows_asked {
        columns.rows = at;
        let one = Arc::new(Literal::new(ScalarValue::Int64(Some(1))));
        let count = AggregateExprBuilder::new(count_udaf(), vec![one])
            .schema(Arc::clone(&schema))
            .alias(ROWS)
            .build()?;
        aggregates.push(Arc::new(count));
        filters.push(None);
    }
    let counted = AggregateExec::try_new(
        AggregateMode::Partial,
        partial.group_expr().clone(),
        aggregates,
        filters,
        Arc::clone(partial.input()),
        schema,
    )?;
    Ok((counted, columns))
}

/// Whether `expr` is a `count(*)` (a plain count of a non-NULL constant):
/// its state is the rows of each group, the count the policy needs.
fn counts_rows(expr: &AggregateFunctionExpr) -> bool {
    let constant = |arg: &Arc<dyn datafusion::physical_plan::PhysicalExpr>| {
        arg.downcast_ref::<Literal>()
            .is_some_and(|value| !value.value().is_null())
    };
    expr.fun().name() == "count"
        && !expr.is_distinct()
        && matches!(expr.expressions().as_slice(), [arg] if constant(arg))
}

/// One aggregate wrapped to count its inputs, how many counts it adds to
/// the state, and of how many inputs it adds [`Modes`]. A constant
/// argument counts the group's rows, which the row count checks already,
/// unless a FILTER picks some of them (`count(*) FILTER (WHERE id = 17)`).
fn guard(
    expr: &Arc<AggregateFunctionExpr>,
    filtered: bool,
    (tally, enough): (Tally, i64),
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> Result<(Arc<AggregateFunctionExpr>, usize, usize)> {
    let name = expr.fun().name().to_ascii_lowercase();
    let Some(facts) = catalogue::aggregate(&name) else {
        return Err(FedError::refused(
            format!("aggregate `{name}` is not in the catalogue of functions a site runs"),
            None,
        ));
    };
    // DP state: the noise protects it (see `site::release::dp`).
    if facts.is_dp() {
        return Ok((Arc::clone(expr), 0, 0));
    }
    let counted = if facts.adds_inputs {
        Counted::NonZero
    } else {
        Counted::NonNull
    };
    let args = expr.expressions();
    let inputs: Vec<(usize, Counted)> = args
        .iter()
        .enumerate()
        .filter(|(_, arg)| filtered || arg.downcast_ref::<Literal>().is_none())
        .map(|(i, _)| (i, counted))
        .collect();
    if inputs.is_empty() {
        return Ok((Arc::clone(expr), 0, 0));
    }
    // The numeric inputs of an adding aggregate, not constant: an analyst
    // may make all their values but one a value other than zero.
    let mut modes = Vec::new();
    if facts.adds_inputs {
        for (i, arg) in args.iter().enumerate() {
            if arg.downcast_ref::<Literal>().is_none() && arg.data_type(schema)?.is_numeric() {
                modes.push(i);
            }
        }
    }
    let width = inputs.len();
    let modes_width = modes.len();
    let udf = AggregateUDF::new_from_impl(Guarded::new(
        Arc::new(expr.fun().clone()),
        inputs,
        tally,
        enough,
        modes,
    ));
    let mut builder = AggregateExprBuilder::new(Arc::new(udf), args)
        .schema(Arc::clone(schema))
        .alias(expr.name())
        .order_by(expr.order_bys().to_vec())
        .with_distinct(expr.is_distinct())
        .with_ignore_nulls(expr.ignore_nulls())
        .with_reversed(expr.is_reversed());
    if let Some(display) = expr.human_display() {
        builder = builder.human_display(display);
    }
    Ok((Arc::new(builder.build()?), width, modes_width))
}

/// The state batches without their count columns, and the counts.
pub(crate) fn split_off(
    batches: &[RecordBatch],
    columns: &CountColumns,
    k: u64,
) -> Result<(Vec<RecordBatch>, StateCounts)> {
    let k = i64::try_from(k).unwrap_or(i64::MAX);
    let mut counts = StateCounts::default();
    let mut states = Vec::with_capacity(batches.len());
    let count_column = |batch: &RecordBatch, i: usize| {
        batch
            .columns()
            .get(i)
            .and_then(|c| c.as_primitive_opt::<Int64Type>())
            .cloned()
            .ok_or_else(|| FedError::Internal("a counted state without its counts".into()))
    };
    let drop = columns.all();
    for batch in batches {
        let rows = count_column(batch, columns.rows)?;
        counts.rows.extend(rows.iter().map(|n| n.unwrap_or(0)));
        for &i in &columns.inputs {
            let tallies = count_column(batch, i)?;
            let tallies = tallies.iter().map(|n| n.unwrap_or(0));
            if columns.missing.contains(&i) {
                let rows = rows.iter().map(|n| n.unwrap_or(0));
                for (rows, missing) in rows.zip(tallies) {
                    if missing > rows {
                        return Err(FedError::Internal(
                            "a state with more rows missing an input than rows".into(),
                        ));
                    }
                    counts.inputs.push(rows - missing);
                }
            } else {
                counts.inputs.extend(tallies);
            }
        }
        for &at in &columns.modes {
            let mode_columns: Vec<_> = (at..at + MODE_WIDTH)
                .map(|i| count_column(batch, i))
                .collect::<Result<_>>()?;
            for row in 0..batch.num_rows() {
                let modes =
                    Modes::from_columns(std::array::from_fn(|c| mode_columns[c].value(row)));
                counts.odd.push(modes.odd(k));
            }
        }
        let keep: Vec<usize> = (0..batch.num_columns())
            .filter(|i| !drop.contains(i))
            .collect();
        states.push(batch.project(&keep)?);
    }
    Ok((states, counts))
}
