//! `chisq_test` and `crosstab`: Pearson's chi-square test of independence of
//! two columns, as R's `chisq.test(table(a, b))`, and the table of counts it
//! is computed from.
//!
//! ```sql
//! SELECT * FROM chisq_test('clinic', 'smoker', 'event');                  -- Yates for 2 × 2
//! SELECT * FROM chisq_test('clinic', 'smoker', 'event', 'correct=false');
//! SELECT * FROM crosstab('clinic', 'region', 'sex');
//! ```
//!
//! One round: `count(*)` grouped by the two columns (rows with a NULL in
//! either left out, as `table()` leaves out NA) — one count per cell and
//! client. `crosstab` returns it in long format, `a, b, n` (columns named
//! after the two columns, their levels as text), every cell of the full
//! grid (zero counts included), with the margins as rows whose `a` or `b`
//! is NULL and the grand total with both NULL; rows are in R's order (levels
//! sorted, each row's margin after its cells, the column margins last).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use fedsql_udfs::distribution::chi_squared_sf;
use futures::FutureExt;

use super::round_values::{count_at, empty_source};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::{missing_column, quote_ident};
use crate::models::source::{ModelSource, string_arguments};
use crate::table_function::arguments::{argument_error, invalid_argument};
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::query;

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ChisqOutput {
    /// `chisq_test`: the test.
    Test,
    /// `crosstab`: the counts.
    Crosstab,
}

/// The table functions `chisq_test` and `crosstab`.
#[derive(Debug)]
pub(crate) struct ChisqFunction {
    pub output: ChisqOutput,
}

impl ChisqFunction {
    fn name(&self) -> &'static str {
        match self.output {
            ChisqOutput::Test => "chisq_test",
            ChisqOutput::Crosstab => "crosstab",
        }
    }

    fn usage(&self) -> &'static str {
        match self.output {
            ChisqOutput::Test => {
                "chisq_test('table or SELECT query', 'row_column', 'column_column' [, 'correct=true'])"
            }
            ChisqOutput::Crosstab => "crosstab('table or SELECT query', 'a', 'b')",
        }
    }
}

impl TableFunctionImpl for ChisqFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let (name, usage) = (self.name(), self.usage());
        let strings = string_arguments(name, usage, args.exprs(), 3)?;
        let max = if self.output == ChisqOutput::Test {
            4
        } else {
            3
        };
        if strings.len() > max {
            return Err(invalid_argument(
                name,
                format!("{name} takes at most {max} arguments; usage: {usage}"),
            ));
        }
        let options = Options::parse(name, strings.get(3).map(String::as_str), &["correct"])
            .map_err(|e| argument_error(name, e))?;
        let correct = match options.get("correct") {
            Some(o) => o.boolean().map_err(|e| argument_error(name, e))?,
            None => true,
        };
        let source = ModelSource::parse(&strings[0]);
        let (a, b) = (strings[1].trim().to_string(), strings[2].trim().to_string());
        if a == b {
            return Err(invalid_argument(
                name,
                format!("the two columns are both `{a}`; give two different columns"),
            ));
        }
        let label = format!("{name}('{}', '{a}', '{b}')", source.given);
        match self.output {
            ChisqOutput::Test => Ok(deferred_table(
                label,
                test_schema(),
                Rounds::Independent,
                None,
                move |ctx, _| {
                    let (source, a, b) = (source.clone(), a.clone(), b.clone());
                    async move {
                        let table = CrossTable::count(&ctx, "chisq_test", &source, &a, &b).await?;
                        let test = table.chisq_test(correct)?;
                        if test.small_expected {
                            ctx.notice("Warning: Chi-squared approximation may be incorrect (an expected count is below 5)",
                            );
                        }
                        test.to_batch()
                    }
                    .boxed()
                },
            )),
            ChisqOutput::Crosstab => {
                if a == "n" || b == "n" {
                    return Err(invalid_argument(
                        "crosstab",
                        "a column named `n` would clash with the count column `n`; rename it in a query source, e.g. 'SELECT n AS n_ FROM t'",
                    ));
                }
                let schema = crosstab_schema(&a, &b);
                Ok(deferred_table(
                    label,
                    Arc::clone(&schema),
                    Rounds::Independent,
                    None,
                    move |ctx, _| {
                        let (source, a, b, schema) =
                            (source.clone(), a.clone(), b.clone(), Arc::clone(&schema));
                        async move {
                            let table =
                                CrossTable::count(&ctx, "crosstab", &source, &a, &b).await?;
                            table.to_batch(schema)
                        }
                        .boxed()
                    },
                ))
            }
        }
    }
}

/// The columns of `chisq_test`.
pub(crate) fn test_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("statistic", DataType::Float64, true),
        Field::new("parameter", DataType::Float64, true),
        Field::new("p_value", DataType::Float64, true),
        Field::new("method", DataType::Utf8, false),
    ]))
}

/// The columns of `crosstab('...', a, b)`: `a, b, n`.
pub(crate) fn crosstab_schema(a: &str, b: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(a, DataType::Utf8, true),
        Field::new(b, DataType::Utf8, true),
        Field::new("n", DataType::Int64, false),
    ]))
}

/// A two-way table of counts over sorted levels.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CrossTable {
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    /// `counts[i][j]`: rows with level i of a and level j of b.
    pub counts: Vec<Vec<i64>>,
}

/// A chi-square test's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChisqResult {
    pub statistic: f64,
    pub df: f64,
    pub p_value: f64,
    pub method: String,
    /// Some expected count is below 5 (R's warning).
    pub small_expected: bool,
}

impl ChisqResult {
    fn to_batch(&self) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(vec![self.statistic])),
            Arc::new(Float64Array::from(vec![self.df])),
            Arc::new(Float64Array::from(vec![self.p_value])),
            Arc::new(StringArray::from(vec![self.method.clone()])),
        ];
        Ok(RecordBatch::try_new(test_schema(), columns)?)
    }
}

impl CrossTable {
    /// The counts of (a, b), in one federated GROUP BY.
    pub(crate) async fn count(
        ctx: &FedContext,
        function: &str,
        source: &ModelSource,
        a: &str,
        b: &str,
    ) -> Result<Self> {
        let schema = source.schema(ctx).await?;
        for c in [a, b] {
            schema
                .field_with_name(c)
                .map_err(|_| missing_column(c, &schema))?;
        }
        let (qa, qb) = (quote_ident(a), quote_ident(b));
        let sql = format!(
            "SELECT {qa} AS a, {qb} AS b, count(*) AS n, grouping({qa}) AS ga FROM {} \
             GROUP BY GROUPING SETS (({qa}, {qb}), ())",
            source.from
        );
        let batches = query(ctx, &sql).await?;
        let mut cells: Vec<(ScalarValue, ScalarValue, i64)> = Vec::new();
        let mut total = 0;
        for batch in &batches {
            for row in 0..batch.num_rows() {
                let n = count_at(batch, "n", row)?;
                if count_at(batch, "ga", row)? == 1 {
                    total += n;
                    continue;
                }
                let va = ScalarValue::try_from_array(batch.column(0), row)?;
                let vb = ScalarValue::try_from_array(batch.column(1), row)?;
                if !va.is_null() && !vb.is_null() {
                    cells.push((va, vb, n));
                }
            }
        }
        if total == 0 {
            return Err(empty_source(function, &source.given));
        }
        if cells.is_empty() {
            return Err(FedError::InvalidArgument(format!(
                "{function}: no row of '{}' has both `{a}` and `{b}` (every row has a NULL in one of them)",
                source.given
            )));
        }
        let levels = |pick: fn(&(ScalarValue, ScalarValue, i64)) -> &ScalarValue| {
            let mut values: Vec<ScalarValue> = cells.iter().map(|c| pick(c).clone()).collect();
            values.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
            values.dedup();
            values
        };
        let (row_levels, column_levels) = (levels(|c| &c.0), levels(|c| &c.1));
        let mut counts = vec![vec![0; column_levels.len()]; row_levels.len()];
        for (va, vb, n) in &cells {
            let i = row_levels.iter().position(|l| l == va).expect("a level");
            let j = column_levels.iter().position(|l| l == vb).expect("a level");
            counts[i][j] += n;
        }
        Ok(Self {
            rows: row_levels.iter().map(level_text).collect(),
            columns: column_levels.iter().map(level_text).collect(),
            counts,
        })
    }

    /// R's `chisq.test(x, correct = correct)` of a table with at least 2 × 2 levels.
    pub(crate) fn chisq_test(&self, correct: bool) -> Result<ChisqResult> {
        let (r, c) = (self.rows.len(), self.columns.len());
        if r < 2 || c < 2 {
            return Err(FedError::InvalidArgument(format!(
                "chisq_test: the table is {r} × {c}; a test of independence needs at least two levels of each column in the rows used"
            )));
        }
        let row_sums: Vec<f64> = self
            .counts
            .iter()
            .map(|r| r.iter().sum::<i64>() as f64)
            .collect();
        let col_sums: Vec<f64> = (0..c)
            .map(|j| self.counts.iter().map(|r| r[j]).sum::<i64>() as f64)
            .collect();
        let n: f64 = row_sums.iter().sum();
        let expected = |i: usize, j: usize| row_sums[i] * col_sums[j] / n;
        let mut method = "Pearson's Chi-squared test".to_string();
        let mut yates = 0.0;
        if correct && r == 2 && c == 2 {
            yates = (0..2)
                .flat_map(|i| (0..2).map(move |j| (i, j)))
                .map(|(i, j)| (self.counts[i][j] as f64 - expected(i, j)).abs())
                .fold(0.5, f64::min);
            if yates > 0.0 {
                method.push_str(" with Yates' continuity correction");
            }
        }
        let mut statistic = 0.0;
        let mut small_expected = false;
        for i in 0..r {
            for j in 0..c {
                let e = expected(i, j);
                small_expected |= e < 5.0;
                let d = (self.counts[i][j] as f64 - e).abs() - yates;
                statistic += d * d / e;
            }
        }
        let df = ((r - 1) * (c - 1)) as f64;
        let p_value = chi_squared_sf(statistic, df);
        Ok(ChisqResult {
            statistic,
            df,
            p_value,
            method,
            small_expected,
        })
    }

    /// Long format with margins (see the module docs).
    pub(crate) fn to_batch(&self, schema: SchemaRef) -> Result<RecordBatch> {
        let mut a: Vec<Option<String>> = Vec::new();
        let mut b: Vec<Option<String>> = Vec::new();
        let mut n: Vec<i64> = Vec::new();
        for (i, level) in self.rows.iter().enumerate() {
            for (j, column) in self.columns.iter().enumerate() {
                a.push(Some(level.clone()));
                b.push(Some(column.clone()));
                n.push(self.counts[i][j]);
            }
            a.push(Some(level.clone()));
            b.push(None);
            n.push(self.counts[i].iter().sum());
        }
        for (j, column) in self.columns.iter().enumerate() {
            a.push(None);
            b.push(Some(column.clone()));
            n.push(self.counts.iter().map(|r| r[j]).sum());
        }
        a.push(None);
        b.push(None);
        n.push(self.counts.iter().flatten().sum());
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(a)),
            Arc::new(StringArray::from(b)),
            Arc::new(Int64Array::from(n)),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// A level as text, as R prints it (`TRUE`/`FALSE` for booleans).
fn level_text(level: &ScalarValue) -> String {
    match level {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.clone(),
        ScalarValue::Boolean(Some(b)) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(counts: Vec<Vec<i64>>) -> CrossTable {
        CrossTable {
            rows: (0..counts.len()).map(|i| format!("r{i}")).collect(),
            columns: (0..counts[0].len()).map(|j| format!("c{j}")).collect(),
            counts,
        }
    }

    #[test]
    fn yates_only_for_two_by_two() {
        // R: m <- matrix(c(12, 5, 7, 9), 2); chisq.test(m); chisq.test(m, correct = FALSE)
        let t = table(vec![vec![12, 7], vec![5, 9]]);
        let with = t.chisq_test(true).unwrap();
        assert!(with.method.ends_with("with Yates' continuity correction"));
        assert!((with.statistic - 1.455_996_378_814_684).abs() < 1e-12);
        assert!((with.p_value - 0.227_568_214_575_810).abs() < 1e-12);
        let without = t.chisq_test(false).unwrap();
        assert_eq!(without.method, "Pearson's Chi-squared test");
        assert!((without.statistic - 2.430_575_519_681_557).abs() < 1e-12);
        assert!((without.p_value - 0.118_989_205_532_145).abs() < 1e-12);
        let three = table(vec![vec![12, 7, 3], vec![5, 9, 8]]);
        assert_eq!(three.chisq_test(true).unwrap().df, 2.0);
    }

    #[test]
    fn refuses_a_single_level() {
        let err = table(vec![vec![3, 4]]).chisq_test(true).unwrap_err();
        assert!(err.to_string().contains("1 × 2"), "{err}");
    }
}
