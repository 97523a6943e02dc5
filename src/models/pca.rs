//! `pca` and `pca_loadings`: principal components from the merged
//! covariance (or correlation) matrix, in one federated round.
//!
//! ```sql
//! SELECT * FROM pca('usarrests', 'murder, assault, urbanpop, rape', 'scale=true');
//! SELECT * FROM pca_loadings('usarrests', 'murder, assault, urbanpop, rape', 'scale=true');
//! ```
//!
//! Each site releases `centered_moments(x1, ..., xp)`: n, p means and the
//! p × p centred cross products, whatever its rows. The coordinator forms
//! the covariance matrix (the correlation matrix with `scale=true`, R's
//! `prcomp(scale. = TRUE)`; with `center=false` the cross products about
//! zero, as `prcomp(center = FALSE)`) and takes its eigen-decomposition:
//! `sdev` is the square root of each eigenvalue, R's `prcomp()$sdev`.
//! Signs: each component's largest-magnitude loading is positive (R's signs
//! are arbitrary; compare up to sign). Rows with a NULL in a listed column
//! are dropped; a notice says how many. Scores are not returned: they would
//! be rows.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use fedsql_udfs::centered_moments;
use futures::FutureExt;
use nalgebra::{DMatrix, SymmetricEigen};

use super::source::{ModelSource, numeric_columns, string_arguments};
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::table_function::arguments::{argument_error, column_list};
use crate::table_function::deferred::{Rounds, deferred_table};
use crate::table_function::options::Options;
use crate::table_function::rounds::query;

const USAGE: &str = "pca('table or SELECT query', 'x1, x2, ...' [, 'scale=false, center=true'])";

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PcaOutput {
    /// One row per component: `component, sdev, proportion, cumulative`.
    Components,
    /// One row per variable: `variable, PC1, PC2, ...`.
    Loadings,
}

/// The table functions `pca` and `pca_loadings`.
#[derive(Debug)]
pub(crate) struct PcaFunction {
    pub output: PcaOutput,
}

/// Everything that defines an analysis.
#[derive(Debug, Clone)]
pub(crate) struct PcaSpec {
    pub source: ModelSource,
    pub columns: Vec<String>,
    pub scale: bool,
    pub center: bool,
}

impl PcaSpec {
    /// Parses `pca(source, columns [, options])`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        if !(2..=3).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "takes 2 or 3 arguments; usage: {USAGE}"
            )));
        }
        let mut spec = PcaSpec {
            source: ModelSource::parse(&args[0]),
            columns: column_list(&args[1])?,
            scale: false,
            center: true,
        };
        let options = Options::parse("pca", args.get(2).map(String::as_str), &["scale", "center"])?;
        for option in &options {
            match option.key.as_str() {
                "scale" => spec.scale = option.boolean()?,
                _ => spec.center = option.boolean()?,
            }
        }
        Ok(spec)
    }
}

impl PcaFunction {
    fn name(&self) -> &'static str {
        match self.output {
            PcaOutput::Components => "pca",
            PcaOutput::Loadings => "pca_loadings",
        }
    }
}

impl TableFunctionImpl for PcaFunction {
    fn call_with_args(
        &self,
        args: TableFunctionArgs,
    ) -> datafusion::error::Result<Arc<dyn TableProvider>> {
        let name = self.name();
        let strings = string_arguments(name, USAGE, args.exprs(), 2)?;
        let spec = PcaSpec::parse(&strings).map_err(|e| argument_error(name, e))?;
        let label = format!(
            "{name}('{}', '{}')",
            spec.source.given,
            spec.columns.join(", ")
        );
        let output = self.output;
        let schema = match output {
            PcaOutput::Components => components_schema(),
            PcaOutput::Loadings => loadings_schema(spec.columns.len()),
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
                    ctx.notice(format!(
                        "pca: {} rows used, {} dropped (a NULL in a listed column)",
                        fit.n, fit.rows_dropped
                    ));
                    match output {
                        PcaOutput::Components => fit.components(),
                        PcaOutput::Loadings => fit.loadings(),
                    }
                }
                .boxed()
            },
        ))
    }
}

/// The columns of `pca`.
pub(crate) fn components_schema() -> SchemaRef {
    let f = |n: &str| Field::new(n, DataType::Float64, false);
    Arc::new(Schema::new(vec![
        Field::new("component", DataType::Int64, false),
        f("sdev"),
        f("proportion"),
        f("cumulative"),
    ]))
}

/// The columns of `pca_loadings` for p variables.
pub(crate) fn loadings_schema(p: usize) -> SchemaRef {
    let mut fields = vec![Field::new("variable", DataType::Utf8, false)];
    fields.extend((1..=p).map(|j| Field::new(format!("PC{j}"), DataType::Float64, false)));
    Arc::new(Schema::new(fields))
}

/// A principal component analysis.
#[derive(Debug, Clone)]
pub(crate) struct PcaFit {
    pub variables: Vec<String>,
    /// Standard deviations of the components, decreasing.
    pub sdev: Vec<f64>,
    /// Loadings: column j is component j (unit length, sign convention applied).
    pub rotation: DMatrix<f64>,
    pub n: i64,
    pub rows_dropped: i64,
}

impl PcaFit {
    fn components(&self) -> Result<RecordBatch> {
        let variances: Vec<f64> = self.sdev.iter().map(|s| s * s).collect();
        let total: f64 = variances.iter().sum();
        let mut running = 0.0;
        let cumulative: Vec<f64> = variances
            .iter()
            .map(|v| {
                running += v;
                running / total
            })
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(1..=self.sdev.len() as i64)),
            Arc::new(Float64Array::from(self.sdev.clone())),
            Arc::new(Float64Array::from_iter_values(
                variances.iter().map(|v| v / total),
            )),
            Arc::new(Float64Array::from(cumulative)),
        ];
        Ok(RecordBatch::try_new(components_schema(), columns)?)
    }

    fn loadings(&self) -> Result<RecordBatch> {
        let p = self.variables.len();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from(self.variables.clone()))];
        for j in 0..p {
            columns.push(Arc::new(Float64Array::from_iter_values(
                (0..p).map(|i| self.rotation[(i, j)]),
            )));
        }
        Ok(RecordBatch::try_new(loadings_schema(p), columns)?)
    }
}

/// Runs the one round and decodes it.
pub(crate) async fn fit(ctx: &FedContext, spec: &PcaSpec) -> Result<PcaFit> {
    let schema = spec.source.schema(ctx).await?;
    let arguments = numeric_columns(&schema, &spec.columns)?;
    let sql = format!(
        "SELECT count(*) AS total, centered_moments({}) AS m FROM {}",
        arguments.join(", "),
        spec.source.from
    );
    let batches = query(ctx, &sql).await?;
    let batch = batches
        .first()
        .ok_or_else(|| FedError::Internal("the pca round returned nothing".into()))?;
    let total = batch.column(0).as_primitive::<Int64Type>().value(0);
    let moments = batch.column(1).as_struct();
    let (_, state) = centered_moments::read(moments, 0)?;
    let n = state.n as i64;
    if n < 2 {
        return Err(FedError::InvalidArgument(format!(
            "pca needs at least 2 complete rows; the source '{}' has {n} (of {total} rows, the others have a NULL in a listed column)",
            spec.source.given
        )));
    }
    let p = spec.columns.len();
    let mut cross = DMatrix::from_fn(p, p, |i, j| state.m2[[i, j]]);
    if !spec.center {
        for i in 0..p {
            for j in 0..p {
                cross[(i, j)] += state.n as f64 * state.mean[i] * state.mean[j];
            }
        }
    }
    let mut matrix = cross / (n as f64 - 1.0);
    if spec.scale {
        let sd: Vec<f64> = (0..p).map(|i| matrix[(i, i)].sqrt()).collect();
        if let Some(i) = sd.iter().position(|s| s.is_nan() || *s <= 0.0) {
            return Err(FedError::InvalidArgument(format!(
                "pca: column `{}` is constant over the rows used, so it cannot be scaled to unit variance (scale=true); leave it out or use scale=false",
                spec.columns[i]
            )));
        }
        matrix = DMatrix::from_fn(p, p, |i, j| {
            if i == j {
                1.0
            } else {
                matrix[(i, j)] / (sd[i] * sd[j])
            }
        });
    }
    let eigen = SymmetricEigen::new(matrix);
    let mut order: Vec<usize> = (0..p).collect();
    order.sort_by(|&a, &b| eigen.eigenvalues[b].total_cmp(&eigen.eigenvalues[a]));
    let sdev = order
        .iter()
        .map(|&j| eigen.eigenvalues[j].max(0.0).sqrt())
        .collect();
    let rotation = DMatrix::from_fn(p, p, |i, c| {
        let column = eigen.eigenvectors.column(order[c]);
        let largest = column
            .iter()
            .copied()
            .max_by(|a, b| a.abs().total_cmp(&b.abs()))
            .unwrap_or(1.0);
        column[i] * largest.signum()
    });
    Ok(PcaFit {
        variables: spec.columns.clone(),
        sdev,
        rotation,
        n,
        rows_dropped: total - n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let args = |o: &str| vec!["t".to_string(), "a, b".to_string(), o.to_string()];
        assert!(PcaSpec::parse(&args("scale=true")).unwrap().scale);
        assert!(!PcaSpec::parse(&args("center=false")).unwrap().center);
        assert!(PcaSpec::parse(&args("scale=maybe")).is_err());
        assert!(PcaSpec::parse(&args("rank=2")).is_err());
        assert!(PcaSpec::parse(&["t".into(), "a, a".into()]).is_err());
    }
}
