//! `kmeans` and `kmeans_summary`: federated Lloyd's k-means.
//!
//! ```sql
//! SELECT * FROM kmeans('usarrests', 'murder, assault, urbanpop, rape', NULL,
//!                      'centers=4 100 60 15; 10 180 65 22; 12 280 70 30, iter_max=50');
//! SELECT * FROM kmeans('iris', 'sepal_length, petal_length', 3, 'nstart=5, seed=7');
//! SELECT * FROM kmeans_summary('iris', 'sepal_length, petal_length', 3, 'nstart=5, seed=7');
//! ```
//!
//! Round 0 releases `centered_moments(x1, ..., xp)` (n, means, centred
//! cross products: the total sum of squares, and the means and standard
//! deviations for `scale=true`). Each Lloyd round is one `kmeans_step`
//! aggregate whose only shared input is the current centres: every site
//! assigns its rows to the nearest centre and releases, per centre, the
//! count, the sum of its rows and their within sum of squares, and how many
//! of its rows changed cluster — k × (p + 2) + 1 numbers. The coordinator
//! moves each centre to the mean of its rows, and stops when no row changed
//! cluster (R's `kmeans(algorithm = "Lloyd")` rule) or after `iter_max`
//! rounds.
//!
//! Starting centres are never data rows: either given (`centers=`), or
//! drawn uniformly, with a seeded generator, inside the box of each
//! column's 1% and 99% quantiles from the merged t-digests
//! (`approx_percentile_cont`, one round). With `nstart` > 1 the draws are
//! repeated and the start with the smallest total within sum of squares
//! is kept. A cluster that becomes empty is refused (R would return NaN
//! centres).
//!
//! Output: `kmeans` has one row per cluster, `cluster, size, withinss, x1,
//! ..., xp` (the centre); `kmeans_summary` one row, `n, rows_dropped,
//! totss, tot_withinss, betweenss, iterations, converged` (a companion
//! table rather than repeated columns, as `glm_stats` is for `glm`).

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, RecordBatch,
};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Expr;
use fedsql_udfs::centered_moments;
use fedsql_udfs::kmeans_step::{KmeansConfig, KmeansSums};
use futures::FutureExt;
use rand::{Rng, SeedableRng};

use super::source::{ModelSource, numeric_columns};
use super::step_rounds::StepRounds;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::table_function::arguments::{argument_error, column_list};
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::query;

const USAGE: &str = "kmeans('table or SELECT query', 'x1, x2, ...', k [, 'centers=1 2; 3 4, iter_max=10, nstart=1, seed=0, scale=false'])";

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KmeansOutput {
    Clusters,
    Summary,
}

/// The table functions `kmeans` and `kmeans_summary`.
#[derive(Debug)]
pub(crate) struct KmeansFunction {
    pub output: KmeansOutput,
}

/// Everything that defines a clustering.
#[derive(Debug, Clone)]
pub(crate) struct KmeansSpec {
    pub source: ModelSource,
    pub columns: Vec<String>,
    pub k: usize,
    pub centers: Option<Vec<Vec<f64>>>,
    pub iter_max: usize,
    pub nstart: usize,
    pub seed: u64,
    pub scale: bool,
}

impl KmeansSpec {
    /// Parses the arguments; `k` is `None` when given as NULL.
    pub(crate) fn parse(
        source: &str,
        columns: &str,
        k: Option<i64>,
        options: Option<&str>,
    ) -> Result<Self> {
        let columns = column_list(columns)?;
        let mut spec = KmeansSpec {
            source: ModelSource::parse(source),
            k: 0,
            centers: None,
            iter_max: 10,
            nstart: 1,
            seed: 0,
            scale: false,
            columns,
        };
        let options = Options::parse(
            "kmeans",
            options,
            &["centers", "iter_max", "nstart", "seed", "scale"],
        )?;
        for option in &options {
            match option.key.as_str() {
                "centers" => spec.centers = Some(parse_centers(&option.value, spec.columns.len())?),
                "iter_max" => spec.iter_max = option.unsigned()? as usize,
                "nstart" => spec.nstart = option.unsigned()? as usize,
                "seed" => spec.seed = option.unsigned()?,
                _ => spec.scale = option.boolean()?,
            }
        }
        if spec.iter_max == 0 || spec.nstart == 0 {
            return Err(FedError::InvalidArgument(
                "kmeans: iter_max and nstart must be at least 1".into(),
            ));
        }
        spec.k = match (&spec.centers, k) {
            (Some(c), None) => c.len(),
            (Some(c), Some(k)) if k as usize == c.len() => c.len(),
            (Some(c), Some(k)) => {
                return Err(FedError::InvalidArgument(format!(
                    "kmeans: k = {k} but {} centres are given; pass NULL as k with centers=",
                    c.len()
                )));
            }
            (None, Some(k)) if k >= 1 => k as usize,
            (None, Some(k)) => {
                return Err(FedError::InvalidArgument(format!(
                    "kmeans: k must be at least 1, got {k}"
                )));
            }
            (None, None) => {
                return Err(FedError::InvalidArgument(
                    "kmeans: give k, or the starting centres with centers=".into(),
                ));
            }
        };
        if spec.centers.is_some() && spec.nstart > 1 {
            return Err(FedError::InvalidArgument(
                "kmeans: nstart draws random starts; it cannot be combined with centers=".into(),
            ));
        }
        Ok(spec)
    }
}

/// `'50 25 130; 70 30 140'`: centres row by row, values in column order.
fn parse_centers(text: &str, p: usize) -> Result<Vec<Vec<f64>>> {
    let centers: Vec<Vec<f64>> = text
        .split(';')
        .map(|row| {
            row.split_whitespace()
                .map(|v| {
                    v.parse::<f64>().map_err(|_| {
                        FedError::InvalidArgument(format!("kmeans: centers: `{v}` is not a number"))
                    })
                })
                .collect::<Result<Vec<f64>>>()
        })
        .collect::<Result<_>>()?;
    if let Some(bad) = centers.iter().find(|c| c.len() != p) {
        return Err(FedError::InvalidArgument(format!(
            "kmeans: centers: each centre needs {p} values (one per column), got {}",
            bad.len()
        )));
    }
    Ok(centers)
}

/// The arguments as given: string literals, and k as an integer or NULL.
fn arguments(args: &[Expr]) -> Result<(String, String, Option<i64>, Option<String>)> {
    let string = |e: &Expr| match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)),
            _,
        ) => Ok(s.clone()),
        other => Err(FedError::InvalidArgument(format!(
            "expected a string literal, got {other}; usage: {USAGE}"
        ))),
    };
    if !(3..=4).contains(&args.len()) {
        return Err(FedError::InvalidArgument(format!(
            "takes 3 or 4 arguments; usage: {USAGE}"
        )));
    }
    let k = match &args[2] {
        Expr::Literal(v, _) if v.is_null() => None,
        Expr::Literal(v, _) => Some(
            v.cast_to(&DataType::Int64)
                .ok()
                .and_then(|v| match v {
                    ScalarValue::Int64(k) => k,
                    _ => None,
                })
                .ok_or_else(|| {
                    FedError::InvalidArgument(format!(
                        "k must be a whole number or NULL; usage: {USAGE}"
                    ))
                })?,
        ),
        other => {
            return Err(FedError::InvalidArgument(format!(
                "k must be a literal number or NULL, got {other}"
            )));
        }
    };
    let options = args.get(3).map(string).transpose()?;
    Ok((string(&args[0])?, string(&args[1])?, k, options))
}

impl KmeansFunction {
    fn name(&self) -> &'static str {
        match self.output {
            KmeansOutput::Clusters => "kmeans",
            KmeansOutput::Summary => "kmeans_summary",
        }
    }
}

impl TableFunctionImpl for KmeansFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = self.name();
        let (source, columns, k, options) =
            arguments(args.exprs()).map_err(|e| argument_error(name, e))?;
        let spec = KmeansSpec::parse(&source, &columns, k, options.as_deref())
            .map_err(|e| argument_error(name, e))?;
        let label = format!("{name}('{}', k = {})", spec.source.given, spec.k);
        let output = self.output;
        let schema = match output {
            KmeansOutput::Clusters => clusters_schema(&spec.columns),
            KmeansOutput::Summary => summary_schema(),
        };
        Ok(deferred_table(
            label,
            schema,
            Rounds::Iterative,
            None,
            move |ctx, _| {
                let spec = spec.clone();
                async move {
                    let fit = fit(&ctx, &spec).await?;
                    if !fit.converged {
                        ctx.notice(format!(
                            "Warning: kmeans did not converge in {} iterations (raise iter_max)",
                            spec.iter_max
                        ));
                    }
                    match output {
                        KmeansOutput::Clusters => fit.clusters(&spec.columns),
                        KmeansOutput::Summary => fit.summary(),
                    }
                }
                .boxed()
            },
        ))
    }
}

/// The columns of `kmeans`.
pub(crate) fn clusters_schema(columns: &[String]) -> SchemaRef {
    let mut fields = vec![
        Field::new("cluster", DataType::Int64, false),
        Field::new("size", DataType::Int64, false),
        Field::new("withinss", DataType::Float64, false),
    ];
    fields.extend(
        columns
            .iter()
            .map(|c| Field::new(c, DataType::Float64, false)),
    );
    Arc::new(Schema::new(fields))
}

/// The columns of `kmeans_summary`.
pub(crate) fn summary_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, false);
    let i = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        i("n"),
        i("rows_dropped"),
        f("totss"),
        f("tot_withinss"),
        f("betweenss"),
        i("iterations"),
        Field::new("converged", DataType::Boolean, false),
    ]))
}

/// A clustering.
#[derive(Debug, Clone)]
pub(crate) struct KmeansFit {
    pub centers: Vec<Vec<f64>>,
    pub size: Vec<f64>,
    pub withinss: Vec<f64>,
    pub n: i64,
    pub rows_dropped: i64,
    pub totss: f64,
    pub iterations: usize,
    pub converged: bool,
}

impl KmeansFit {
    fn tot_withinss(&self) -> f64 {
        self.withinss.iter().sum()
    }

    fn clusters(&self, columns: &[String]) -> Result<RecordBatch> {
        let k = self.centers.len();
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(1..=k as i64)),
            Arc::new(Int64Array::from_iter_values(
                self.size.iter().map(|s| *s as i64),
            )),
            Arc::new(Float64Array::from(self.withinss.clone())),
        ];
        for c in 0..columns.len() {
            arrays.push(Arc::new(Float64Array::from_iter_values(
                self.centers.iter().map(|centre| centre[c]),
            )));
        }
        Ok(RecordBatch::try_new(clusters_schema(columns), arrays)?)
    }

    fn summary(&self) -> Result<RecordBatch> {
        let float = |v: f64| Arc::new(Float64Array::from(vec![v])) as ArrayRef;
        let int = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
        let columns: Vec<ArrayRef> = vec![
            int(self.n),
            int(self.rows_dropped),
            float(self.totss),
            float(self.tot_withinss()),
            float(self.totss - self.tot_withinss()),
            int(self.iterations as i64),
            Arc::new(BooleanArray::from(vec![self.converged])),
        ];
        Ok(RecordBatch::try_new(summary_schema(), columns)?)
    }
}

/// One Lloyd round (the first planned from its SQL, the later ones
/// rebinding its centers): the merged sums.
async fn round(
    rounds: &mut StepRounds<'_>,
    spec: &KmeansSpec,
    arguments: &[String],
    config: &KmeansConfig,
) -> Result<KmeansSums> {
    let text = config.encode();
    let sql = || {
        format!(
            "SELECT kmeans_step('{text}', {}) AS sums FROM {}",
            arguments.join(", "),
            spec.source.from
        )
    };
    let batches = rounds.run(&text, sql).await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("a kmeans round returned nothing".into()))?;
    let sums = batch.column(0).as_list::<i32>().value(0);
    Ok(KmeansSums::from_slice(
        sums.as_primitive::<Float64Type>().values(),
        config.centers.len(),
    ))
}

/// Lloyd's iterations from `start`.
async fn lloyd(
    ctx: &FedContext,
    spec: &KmeansSpec,
    arguments: &[String],
    start: Vec<Vec<f64>>,
) -> Result<(Vec<Vec<f64>>, KmeansSums, usize, bool)> {
    let mut centers = start;
    let mut previous: Option<Vec<Vec<f64>>> = None;
    let mut rounds = StepRounds::new(ctx);
    for iteration in 1..=spec.iter_max {
        let config = KmeansConfig {
            centers: centers.clone(),
            previous: previous.clone(),
            measure: None,
        };
        let sums = round(&mut rounds, spec, arguments, &config).await?;
        if previous.is_some() && sums.changed == 0.0 {
            return Ok((centers, sums, iteration, true));
        }
        if let Some(empty) = sums.count.iter().position(|c| *c == 0.0) {
            return Err(FedError::InvalidArgument(format!(
                "kmeans: cluster {} became empty in iteration {iteration}; try other starting centres",
                empty + 1
            )));
        }
        let moved: Vec<Vec<f64>> = sums
            .sum
            .iter()
            .zip(&sums.count)
            .map(|(s, n)| s.iter().map(|v| v / n).collect())
            .collect();
        if iteration == spec.iter_max {
            // Stopped before converging: R reports the last assignment,
            // measured around the moved centres.
            let config = KmeansConfig {
                centers: centers.clone(),
                previous: None,
                measure: Some(moved.clone()),
            };
            let measured = round(&mut rounds, spec, arguments, &config).await?;
            return Ok((moved, measured, iteration, false));
        }
        previous = Some(std::mem::replace(&mut centers, moved));
    }
    unreachable!("iter_max >= 1")
}

/// Runs the clustering.
pub(crate) async fn fit(ctx: &FedContext, spec: &KmeansSpec) -> Result<KmeansFit> {
    let schema = spec.source.schema(ctx).await?;
    let raw = numeric_columns(&schema, &spec.columns)?;
    let sql = format!(
        "SELECT count(*) AS total, centered_moments({}) AS m FROM {}",
        raw.join(", "),
        spec.source.from
    );
    let batches = query(ctx, &sql).await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("the kmeans round returned nothing".into()))?;
    let total = batch.column(0).as_primitive::<Int64Type>().value(0);
    let (_, moments) = centered_moments::read(batch.column(1).as_struct(), 0)?;
    let n = moments.n as i64;
    if spec.k as i64 > n {
        return Err(FedError::InvalidArgument(format!(
            "kmeans: k = {} is more than the {n} complete rows of '{}'",
            spec.k, spec.source.given
        )));
    }
    let p = spec.columns.len();
    // With scale=true the columns are standardized at the sites with the
    // merged means and standard deviations (shared values).
    let (arguments, totss) = if spec.scale {
        let mut scaled = Vec::new();
        for (j, column) in raw.iter().enumerate() {
            let sd = (moments.m2[[j, j]] / (n as f64 - 1.0)).sqrt();
            if sd.is_nan() || sd <= 0.0 {
                return Err(FedError::InvalidArgument(format!(
                    "kmeans: column `{}` is constant, so it cannot be scaled (scale=true)",
                    spec.columns[j]
                )));
            }
            scaled.push(format!("(({column} - {:?}) / {sd:?})", moments.mean[j]));
        }
        (scaled, (n as f64 - 1.0) * p as f64)
    } else {
        (raw.clone(), (0..p).map(|j| moments.m2[[j, j]]).sum())
    };

    let starts: Vec<Vec<Vec<f64>>> = match &spec.centers {
        Some(c) => vec![c.clone()],
        None => random_starts(ctx, spec, &arguments).await?,
    };
    let mut best: Option<KmeansFit> = None;
    let mut first_error = None;
    for start in starts {
        match lloyd(ctx, spec, &arguments, start).await {
            Ok((centers, sums, iterations, converged)) => {
                let fit = KmeansFit {
                    centers,
                    size: sums.count.clone(),
                    withinss: sums.withinss.clone(),
                    n,
                    rows_dropped: total - n,
                    totss,
                    iterations,
                    converged,
                };
                if best
                    .as_ref()
                    .is_none_or(|b| fit.tot_withinss() < b.tot_withinss())
                {
                    best = Some(fit);
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    best.ok_or_else(|| first_error.expect("at least one start"))
}

/// `nstart` sets of k centres drawn uniformly inside each column's merged
/// t-digest 1%–99% quantiles (never data rows, and no extremes).
async fn random_starts(
    ctx: &FedContext,
    spec: &KmeansSpec,
    arguments: &[String],
) -> Result<Vec<Vec<Vec<f64>>>> {
    let complete = arguments
        .iter()
        .map(|a| format!("{a} IS NOT NULL"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let quantiles: Vec<String> = arguments
        .iter()
        .flat_map(|a| {
            [
                format!("approx_percentile_cont({a}, 0.01)"),
                format!("approx_percentile_cont({a}, 0.99)"),
            ]
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {} WHERE {complete}",
        quantiles.join(", "),
        spec.source.from
    );
    let batches = query(ctx, &sql).await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("the quantile round returned nothing".into()))?;
    let value = |i: usize| -> f64 {
        datafusion::arrow::compute::cast(batch.column(i), &DataType::Float64)
            .map(|c| c.as_primitive::<Float64Type>().value(0))
            .unwrap_or(f64::NAN)
    };
    let bounds: Vec<(f64, f64)> = (0..arguments.len())
        .map(|j| (value(2 * j), value(2 * j + 1)))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    Ok((0..spec.nstart)
        .map(|_| {
            (0..spec.k)
                .map(|_| {
                    bounds
                        .iter()
                        .map(|&(lo, hi)| {
                            if hi > lo {
                                rng.random_range(lo..hi)
                            } else {
                                lo
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centres_are_rows_of_numbers_in_column_order() {
        let spec =
            KmeansSpec::parse("t", "a, b", None, Some("centers=1 2; 3 4.5, iter_max=20")).unwrap();
        assert_eq!(spec.k, 2);
        assert_eq!(spec.centers.unwrap()[1], [3.0, 4.5]);
        assert_eq!(spec.iter_max, 20);
        assert!(KmeansSpec::parse("t", "a, b", None, Some("centers=1 2 3")).is_err());
        assert!(KmeansSpec::parse("t", "a, b", Some(3), Some("centers=1 2; 3 4")).is_err());
        assert!(KmeansSpec::parse("t", "a, b", None, None).is_err());
        assert!(KmeansSpec::parse("t", "a, b", Some(0), None).is_err());
    }
}
