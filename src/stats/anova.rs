//! `anova(source, formula)`: the sequential (type I) analysis of variance
//! table of a linear model, as R's `anova(lm(formula))`.
//!
//! ```sql
//! SELECT * FROM anova('clinic', 'systolic ~ age + bmi + region + smoker');
//! SELECT * FROM anova('warpbreaks', 'breaks ~ wool * tension');
//! ```
//!
//! The same round as `lm`: one federated `centered_moments(y, x1, ..., xk)`
//! over the formula's design columns (after one GROUP BY round for the
//! levels of its factors). The decoder sweeps the merged cross-product
//! matrix column by column in term order: the drop in the residual sum of
//! squares as each design column enters is its sequential sum of squares
//! (R's "effects"), summed per term. A column whose part not explained by
//! the earlier ones has a relative squared norm below 1e-10 is aliased and
//! adds no degree of freedom (as `lm`'s aliasing rule). Terms are taken in
//! R's order: by degree (main effects, then two-way interactions, ...), and
//! as written within a degree.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::comoments::CoMoments;
use fedsql_udfs::distribution::f_sf;
use futures::FutureExt;
use ndarray::Array2;

use super::round_values::{empty_source, one_row};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{Formula, Response, design_columns, missing_column, quote_ident};
use crate::models::source::{ModelSource, learn_levels, string_arguments};
use crate::table_function::arguments::{argument_error, invalid_argument};
use crate::table_function::deferred::{Rounds, deferred_table};

const USAGE: &str = "anova('table or SELECT query', 'y ~ a + b + a:b')";

/// Relative squared norm under which a design column is aliased.
const ALIASED: f64 = 1e-10;

/// The table function `anova`.
#[derive(Debug)]
pub(crate) struct AnovaFunction;

impl TableFunctionImpl for AnovaFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let strings = string_arguments("anova", USAGE, args.exprs(), 2)?;
        if strings.len() != 2 {
            return Err(invalid_argument(
                "anova",
                format!("anova takes 2 arguments; usage: {USAGE}"),
            ));
        }
        let mut formula = Formula::parse(&strings[1]).map_err(|e| argument_error("anova", e))?;
        if formula.offset.is_some() || !matches!(formula.response, Response::Column(_)) {
            return Err(invalid_argument(
                "anova",
                format!("offset() and cbind() belong to glm formulas; usage: {USAGE}"),
            ));
        }
        // R's terms(): by degree, stable within a degree.
        formula.terms.sort_by_key(|t| t.variables.len());
        let source = ModelSource::parse(&strings[0]);
        let label = format!("anova('{}', '{}')", source.given, strings[1]);
        Ok(deferred_table(
            label,
            schema(),
            Rounds::Independent,
            None,
            move |ctx, _| {
                let (source, formula) = (source.clone(), formula.clone());
                async move { run(&ctx, &source, &formula).await?.to_batch() }.boxed()
            },
        ))
    }
}

/// The columns of `anova`: one row per term, then `Residuals`.
pub(crate) fn schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("df", DataType::Int64, false),
        f("sumsq"),
        f("meansq"),
        f("statistic"),
        f("p_value"),
    ]))
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnovaRow {
    pub term: String,
    pub df: i64,
    pub sumsq: f64,
}

/// The table: the terms' rows, then the residuals'.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnovaTable {
    pub terms: Vec<AnovaRow>,
    pub residuals: AnovaRow,
}

impl AnovaTable {
    /// The result batch, with mean squares, F statistics and p-values.
    pub(crate) fn to_batch(&self) -> Result<RecordBatch> {
        let res = &self.residuals;
        let res_meansq = res.sumsq / res.df as f64;
        let mut term = Vec::new();
        let mut df = Vec::new();
        let mut sumsq = Vec::new();
        let mut meansq = Vec::new();
        let mut statistic = Vec::new();
        let mut p_value = Vec::new();
        for row in &self.terms {
            let ms = row.sumsq / row.df as f64;
            let f = (res.df > 0).then(|| ms / res_meansq);
            let p = f.map(|f| f_sf(f, row.df as f64, res.df as f64));
            term.push(row.term.clone());
            df.push(row.df);
            sumsq.push(Some(row.sumsq));
            meansq.push(Some(ms));
            statistic.push(f);
            p_value.push(p);
        }
        term.push(res.term.clone());
        df.push(res.df);
        sumsq.push(Some(res.sumsq));
        meansq.push((res.df > 0).then_some(res_meansq));
        statistic.push(None);
        p_value.push(None);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(term)),
            Arc::new(Int64Array::from(df)),
            Arc::new(Float64Array::from(sumsq)),
            Arc::new(Float64Array::from(meansq)),
            Arc::new(Float64Array::from(statistic)),
            Arc::new(Float64Array::from(p_value)),
        ];
        Ok(RecordBatch::try_new(schema(), columns)?)
    }
}

/// Levels, one round of co-moments, and the sequential sums of squares.
pub(crate) async fn run(
    ctx: &FedContext,
    source: &ModelSource,
    formula: &Formula,
) -> Result<AnovaTable> {
    let schema = source.schema(ctx).await?;
    let Response::Column(y) = &formula.response else {
        return Err(FedError::InvalidArgument(
            "anova takes one response column".into(),
        ));
    };
    let y_type = schema
        .field_with_name(y)
        .map_err(|_| missing_column(y, &schema))?
        .data_type();
    if !y_type.is_numeric() {
        return Err(FedError::InvalidArgument(format!(
            "anova: the response `{y}` is {y_type}; it must be numeric"
        )));
    }
    let factors = formula.factors(&schema)?;
    let levels = learn_levels(ctx, source, formula, &factors).await?;
    let design = design_columns(formula, &schema, &levels)?;
    let mut arguments = vec![format!("CAST({} AS DOUBLE)", quote_ident(y))];
    arguments.extend(design.iter().map(|c| c.sql.clone()));
    let sql = format!(
        "SELECT count(*) AS total, centered_moments({}) AS m FROM {}",
        arguments.join(", "),
        source.from
    );
    let batch = one_row(ctx, &sql).await?;
    if batch.column(0).as_primitive::<Int64Type>().value(0) == 0 {
        return Err(empty_source("anova", &source.given));
    }
    let (_, state) = fedsql_udfs::centered_moments::read(batch.column(1).as_struct(), 0)?;
    if state.n == 0 {
        return Err(FedError::InvalidArgument(format!(
            "anova: no rows left: every row of '{}' has a NULL in a column the formula uses",
            source.given
        )));
    }
    // Which term each design column belongs to, in order.
    let mut owners = Vec::new();
    for (t, term) in formula.terms.iter().enumerate() {
        let prefix_count = design
            .iter()
            .filter(|c| column_of_term(&c.name, term))
            .count();
        owners.extend(std::iter::repeat_n(t, prefix_count));
    }
    if owners.len() != design.len() {
        return Err(FedError::Internal(
            "anova could not match design columns to terms".into(),
        ));
    }
    let (effects, rss, rank) = sequential_sums(&state, formula.intercept);
    let mut terms: Vec<AnovaRow> = formula
        .terms
        .iter()
        .map(|t| AnovaRow {
            term: t.to_string(),
            df: 0,
            sumsq: 0.0,
        })
        .collect();
    for (owner, effect) in owners.iter().zip(&effects) {
        if let Some(ss) = effect {
            terms[*owner].df += 1;
            terms[*owner].sumsq += ss;
        }
    }
    // A term every column of which is aliased has no row (as in R).
    terms.retain(|t| t.df > 0);
    let df_residual = state.n as i64 - rank as i64 - i64::from(formula.intercept);
    Ok(AnovaTable {
        terms,
        residuals: AnovaRow {
            term: "Residuals".into(),
            df: df_residual,
            sumsq: rss,
        },
    })
}

/// Whether design column `name` is one of `term`'s: its `:`-separated parts
/// are the term's variables (each as it is, or with a level `[...]`).
fn column_of_term(name: &str, term: &crate::formula::Term) -> bool {
    let parts: Vec<&str> = split_parts(name);
    parts.len() == term.variables.len()
        && parts.iter().zip(&term.variables).all(|(part, v)| {
            let v = v.to_string();
            *part == v || (part.starts_with(&v) && part[v.len()..].starts_with('['))
        })
}

/// `x:C(g)[T.a:b]` → [`x`, `C(g)[T.a:b]`]: splits at `:` outside brackets.
fn split_parts(name: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in name.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ':' if depth == 0 => {
                parts.push(&name[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&name[start..]);
    parts
}

/// Sequential sums of squares of the design columns (None: aliased), the
/// residual sum of squares and the rank of the design (without the
/// intercept), from the co-moments of (y, x1, ..., xk): centered cross
/// products with an intercept, raw ones without.
pub(crate) fn sequential_sums(
    state: &CoMoments,
    intercept: bool,
) -> (Vec<Option<f64>>, f64, usize) {
    let p = state.p();
    let n = state.n as f64;
    let mut a: Array2<f64> = state.m2.clone();
    if !intercept {
        for i in 0..p {
            for j in 0..p {
                a[[i, j]] += n * state.mean[i] * state.mean[j];
            }
        }
    }
    let original: Vec<f64> = (0..p).map(|i| a[[i, i]]).collect();
    let mut effects = Vec::with_capacity(p - 1);
    let mut rank = 0;
    // Column 0 is y; sweep the design columns 1..p in order.
    for j in 1..p {
        let pivot = a[[j, j]];
        let independent = pivot > 0.0 && pivot > ALIASED * original[j];
        if !independent {
            effects.push(None);
            continue;
        }
        rank += 1;
        effects.push(Some(a[[0, j]] * a[[0, j]] / pivot));
        let column: Vec<f64> = (0..p).map(|r| a[[r, j]]).collect();
        for r in 0..p {
            for c in 0..p {
                a[[r, c]] -= column[r] * column[c] / pivot;
            }
        }
    }
    (effects, a[[0, 0]].max(0.0), rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_columns_belong_to_their_terms() {
        let term = |s: &str| Formula::parse(&format!("y ~ {s}")).unwrap().terms[0].clone();
        assert!(column_of_term("age", &term("age")));
        assert!(!column_of_term("age:sex[T.M]", &term("age")));
        assert!(column_of_term("age:sex[T.M]", &term("age:sex")));
        assert!(column_of_term("region[T.north]", &term("region")));
        assert!(column_of_term("C(g)[T.a:b]", &term("C(g)")));
        assert!(!column_of_term("ages", &term("age")));
    }

    #[test]
    fn sums_of_squares_add_up_to_the_total() {
        // y = x1 + noise-free part of x2; x3 = x1 (aliased).
        let rows: Vec<[f64; 4]> = (0..12)
            .map(|i| {
                let x1 = i as f64;
                let x2 = ((i * 7) % 5) as f64;
                [2.0 * x1 + 0.5 * x2 + ((i * 3) % 4) as f64, x1, x2, x1]
            })
            .collect();
        let columns: Vec<datafusion::arrow::array::ArrayRef> = (0..4)
            .map(|j| {
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r[j]).collect::<Vec<_>>(),
                )) as datafusion::arrow::array::ArrayRef
            })
            .collect();
        let mut state = CoMoments::new(4);
        state.update(&columns).unwrap();
        let (effects, rss, rank) = sequential_sums(&state, true);
        assert_eq!(rank, 2);
        assert!(effects[2].is_none());
        let total = state.m2[[0, 0]];
        let explained: f64 = effects.iter().flatten().sum();
        assert!((explained + rss - total).abs() < 1e-9 * total);
    }
}
