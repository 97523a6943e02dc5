//! Integer columns a fit reads only as doubles, cast once when they are
//! kept.
//!
//! A fit's step aggregate (`irls_step`, `sgd_gradient`, …) takes its
//! response as a double, so DataFusion reads an integer response (a 0/1
//! outcome, a count) through a cast to `Float64`: in every round, over
//! every kept row, 80 MB read and written per 10M rows. A site that keeps
//! the rows of a fit casts such a column once, as it keeps it, and its
//! rounds read the doubles with the cast taken out of their expressions:
//! the same values reach the aggregates, so every sum has the same bits.
//!
//! A column is kept as doubles only when every expression of the round
//! reads it through that cast, only when every aggregate is one whose
//! arguments are all it reads ([`shares_constants`]) and nothing groups the
//! rows, and only from a 64-bit integer, so the kept rows take no more
//! memory. A later round over the same rows that reads such a column in
//! any other way cannot use them ([`Doubles::rewrite`] says so), and the
//! site reads its rows again.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_plan::aggregates::AggregateExec;

use crate::error::Result;

/// Whether a round over kept rows may share the literal arguments of
/// aggregate `name` between batches (the catalogue's `shares_constants`:
/// fedsql's step aggregates, which read a literal only through
/// `constant_argument::literal_value`), or it reads none (`count`).
pub(crate) fn shares_constants(name: &str) -> bool {
    fedsql_udfs::catalogue::aggregate(name).is_some_and(|a| a.shares_constants)
}

/// The columns of a fit's kept rows held as `Float64` in place of the
/// 64-bit integers of the scan (ascending; none for most fits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Doubles(Vec<usize>);

/// A partial aggregate's expressions, rewritten to read kept rows.
pub(super) struct OverKept {
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    pub schema: SchemaRef,
}

impl OverKept {
    /// `partial`'s own expressions, over rows kept as the scan gave them.
    pub(super) fn plain(partial: &AggregateExec) -> Self {
        Self {
            aggregates: partial.aggr_expr().to_vec(),
            filters: partial.filter_expr().to_vec(),
            schema: partial.input().schema(),
        }
    }
}

/// How an aggregate's expressions read the columns of its input.
#[derive(Default)]
struct Reads {
    /// Columns read through a cast to `Float64`.
    as_doubles: BTreeSet<usize>,
    /// Columns read in any other way.
    otherwise: BTreeSet<usize>,
}

impl Reads {
    fn of(partial: &AggregateExec) -> Self {
        let mut reads = Self::default();
        for aggregate in partial.aggr_expr() {
            for arg in aggregate.expressions() {
                reads.visit(&arg);
            }
        }
        for filter in partial.filter_expr().iter().flatten() {
            reads.visit(filter);
        }
        reads
    }

    fn visit(&mut self, expr: &Arc<dyn PhysicalExpr>) {
        if let Some(column) = cast_column(expr) {
            self.as_doubles.insert(column.index());
        } else if let Some(column) = expr.downcast_ref::<Column>() {
            self.otherwise.insert(column.index());
        } else {
            for child in expr.children() {
                self.visit(child);
            }
        }
    }
}

/// An integer column as the doubles Arrow's cast to `Float64` gives (the
/// nearest double, nulls kept), in one loop the compiler vectorizes
/// (Arrow's numeric cast goes value by value through a fallible
/// conversion).
fn as_doubles(column: &ArrayRef) -> Result<ArrayRef> {
    let doubles: Float64Array = match column.data_type() {
        DataType::Int64 => column.as_primitive::<Int64Type>().unary(|v| v as f64),
        DataType::UInt64 => column.as_primitive::<UInt64Type>().unary(|v| v as f64),
        _ => return Ok(cast(column, &DataType::Float64)?),
    };
    Ok(Arc::new(doubles))
}

/// The column `expr` casts to `Float64`, when it is such a cast.
fn cast_column(expr: &Arc<dyn PhysicalExpr>) -> Option<&Column> {
    let cast = expr.downcast_ref::<CastExpr>()?;
    (cast.cast_type() == &DataType::Float64)
        .then(|| cast.expr().downcast_ref::<Column>())
        .flatten()
}

/// Whether the aggregate's rows may be kept with columns as doubles: no
/// groups, and only aggregates that read nothing but their arguments.
fn may_fold(partial: &AggregateExec) -> bool {
    partial.group_expr().is_empty()
        && partial.aggr_expr().iter().all(|a| {
            shares_constants(a.fun().name()) && a.order_bys().is_empty() && !a.is_distinct()
        })
}

impl Doubles {
    /// The 64-bit integer columns `partial` reads only as doubles.
    pub(super) fn of(partial: &AggregateExec) -> Self {
        if !may_fold(partial) {
            return Self::default();
        }
        let reads = Reads::of(partial);
        let schema = partial.input().schema();
        Self(
            reads
                .as_doubles
                .difference(&reads.otherwise)
                .copied()
                .filter(|&i| {
                    matches!(
                        schema.fields().get(i).map(|f| f.data_type()),
                        Some(DataType::Int64 | DataType::UInt64)
                    )
                })
                .collect(),
        )
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The kept rows' schema: `input` with these columns as `Float64`.
    fn schema(&self, input: &Schema) -> SchemaRef {
        let fields: Vec<Field> = input
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match self.0.contains(&i) {
                true => f.as_ref().clone().with_data_type(DataType::Float64),
                false => f.as_ref().clone(),
            })
            .collect();
        Arc::new(Schema::new_with_metadata(fields, input.metadata().clone()))
    }

    /// The scan's `batches` as they are kept: these columns cast, once.
    pub(super) fn keep(
        &self,
        batches: Vec<RecordBatch>,
        input: &Schema,
    ) -> Result<Vec<RecordBatch>> {
        if self.is_empty() {
            return Ok(batches);
        }
        let schema = self.schema(input);
        batches
            .into_iter()
            .map(|batch| {
                let mut columns = batch.columns().to_vec();
                for &i in &self.0 {
                    columns[i] = as_doubles(&columns[i])?;
                }
                Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
            })
            .collect()
    }

    /// `partial`'s aggregates and filters over the kept rows, each cast of
    /// these columns to `Float64` taken out; `None` when `partial` reads
    /// one of them otherwise (its rows must then be read again).
    pub(super) fn rewrite(&self, partial: &AggregateExec) -> Option<OverKept> {
        if self.is_empty() {
            return Some(OverKept::plain(partial));
        }
        let reads = Reads::of(partial);
        if !may_fold(partial) || self.0.iter().any(|i| reads.otherwise.contains(i)) {
            return None;
        }
        let uncast = |expr: &Arc<dyn PhysicalExpr>| -> Option<Arc<dyn PhysicalExpr>> {
            let rewritten = Arc::clone(expr).transform_up(|e| {
                Ok(
                    match cast_column(&e).filter(|c| self.0.contains(&c.index())) {
                        Some(column) => Transformed::yes(Arc::new(column.clone()) as _),
                        None => Transformed::no(e),
                    },
                )
            });
            rewritten.ok().map(|t| t.data)
        };
        let aggregates = partial
            .aggr_expr()
            .iter()
            .map(|a| {
                let args = a.expressions().iter().map(uncast).collect::<Option<_>>()?;
                a.with_new_expressions(args, Vec::new()).map(Arc::new)
            })
            .collect::<Option<_>>()?;
        let filters = partial
            .filter_expr()
            .iter()
            .map(|f| match f {
                None => Some(None),
                Some(filter) => uncast(filter).map(Some),
            })
            .collect::<Option<_>>()?;
        Some(OverKept {
            aggregates,
            filters,
            schema: self.schema(&partial.input().schema()),
        })
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, UInt64Array};
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::protocol::rebind::tests::{aggregate, partial};
    use crate::site::engine::SiteEngine;
    use crate::site::engine::in_order;
    use crate::site::engine::kept_rows::KeptRows;

    const STEP: &str = "SELECT irls_step('family=binomial;beta=0.5,-0.1', y, 1.0, 0.0, 1.0, 1.0, x), count(*) FROM t";
    /// A round that also reads the response as it is, in a filter.
    const RAW: &str = "SELECT irls_step('family=binomial;beta=0.5,-0.1', y, 1.0, 0.0, 1.0, 1.0, x), count(*) FILTER (WHERE y > 0) FROM t";

    /// Table `t(x, y)` of 20,000 rows in three batches, with a 0/1
    /// response `y` of type `Int64` (`integer`) or `Float64`.
    fn context(integer: bool) -> SessionContext {
        let y_type = if integer {
            DataType::Int64
        } else {
            DataType::Float64
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Float64, false),
            Field::new("y", y_type, false),
        ]));
        let mut first = 0;
        let batches = [8192u32, 8192, 3616]
            .iter()
            .map(|&rows| {
                let ids = first..first + rows;
                first += rows;
                let x = Float64Array::from_iter_values(
                    ids.clone().map(|i| f64::from((i * 37) % 101) / 50.0 - 1.0),
                );
                let y = ids.map(|i| i64::from((i * 13) % 7 < 3));
                let y: ArrayRef = match integer {
                    true => Arc::new(Int64Array::from_iter_values(y)),
                    false => Arc::new(Float64Array::from_iter_values(y.map(|v| v as f64))),
                };
                RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(x), y]).unwrap()
            })
            .collect();
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        fedsql_udfs::register_all(&ctx);
        let table = MemTable::try_new(schema, vec![batches]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        ctx
    }

    /// The states of the rounds `sqls` of one fit, each over the rows the
    /// site keeps (read in the first round, or again when a round cannot
    /// use them), and the types the kept rows' columns have at the end.
    async fn rounds(ctx: &SessionContext, sqls: &[&str]) -> (Vec<Vec<RecordBatch>>, Vec<DataType>) {
        let kept = KeptRows::default();
        let mut states = Vec::new();
        for sql in sqls {
            let plan = aggregate(ctx, sql).await;
            let over_kept = kept
                .partial_over_kept(
                    partial(ctx, &plan).await,
                    &plan,
                    7,
                    "t".into(),
                    (&SiteEngine::new(), &[]),
                    ctx.task_ctx(),
                )
                .await
                .unwrap();
            let state = in_order::one_state_per_group(over_kept).unwrap();
            states.push(collect(state, ctx.task_ctx()).await.unwrap());
        }
        let types = kept.kept.lock().unwrap()[0].batches[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        (states, types)
    }

    #[tokio::test]
    async fn an_integer_response_is_kept_as_doubles_with_the_same_bits() {
        let integer = context(true);
        let plan = partial(&integer, &aggregate(&integer, STEP).await).await;
        assert_eq!(Doubles::of(&plan), Doubles(vec![1]));
        // The step reads no cast once the response is kept as doubles.
        let over = Doubles::of(&plan).rewrite(&plan).unwrap();
        let casts = over
            .aggregates
            .iter()
            .flat_map(|a| a.expressions())
            .filter(|e| e.downcast_ref::<CastExpr>().is_some())
            .count();
        assert_eq!(casts, 0);

        let (states, types) = rounds(&integer, &[STEP, STEP, STEP]).await;
        assert_eq!(types, [DataType::Float64, DataType::Float64]);
        // The same bits as the same rows with a response stored as doubles.
        let (expected, double_types) = rounds(&context(false), &[STEP, STEP, STEP]).await;
        assert_eq!(double_types, types);
        assert_eq!(states, expected);
    }

    #[tokio::test]
    async fn a_column_read_otherwise_is_kept_as_it_is() {
        let ctx = context(true);
        for sql in [
            RAW,
            "SELECT irls_step('family=binomial;beta=0.5,-0.1', y, 1.0, 0.0, 1.0, 1.0, x), sum(y) FROM t",
            "SELECT irls_step('family=binomial;beta=0.5,-0.1', y, 1.0, 0.0, 1.0, 1.0, x), count(*) FROM t GROUP BY x > 0",
        ] {
            let plan = partial(&ctx, &aggregate(&ctx, sql).await).await;
            assert!(Doubles::of(&plan).is_empty(), "{sql}");
            let (_, types) = rounds(&ctx, &[sql]).await;
            assert_eq!(types, [DataType::Float64, DataType::Int64], "{sql}");
        }
    }

    #[tokio::test]
    async fn a_later_round_that_reads_the_integers_reads_the_rows_again() {
        let ctx = context(true);
        let (states, types) = rounds(&ctx, &[STEP, RAW]).await;
        assert_eq!(types, [DataType::Float64, DataType::Int64]);
        let (alone, _) = rounds(&ctx, &[RAW]).await;
        assert_eq!(states[1], alone[0]);
        // The filter counted the rows whose response is 1, not all of them.
        let (all, _) = rounds(&ctx, &[STEP]).await;
        assert_ne!(states[1], all[0]);
    }

    /// The doubles kept for an integer column are Arrow's cast's, to the
    /// bit: values past 2⁵³ (which round), the extremes, and nulls.
    #[test]
    fn integers_become_the_doubles_arrows_cast_gives() {
        let signed: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(0),
            Some(-1),
            Some((1 << 53) + 1),
            None,
            Some(i64::MIN),
            Some(i64::MAX),
        ]));
        let unsigned: ArrayRef = Arc::new(UInt64Array::from(vec![
            Some(7),
            None,
            Some((1 << 53) + 3),
            Some(u64::MAX),
        ]));
        for column in [signed, unsigned] {
            let (ours, arrows) = (
                as_doubles(&column).unwrap(),
                cast(&column, &DataType::Float64).unwrap(),
            );
            let bits = |a: &ArrayRef| {
                a.as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                    .iter()
                    .map(|v| v.map(f64::to_bits))
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&ours), bits(&arrows), "{}", column.data_type());
        }
    }
}
