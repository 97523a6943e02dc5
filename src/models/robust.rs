//! Robust standard errors for `lm` and `glm` (`'se=HC0'` … `'se=HC3'`,
//! `'se=cluster'`, `'cluster=col'`), equal to R's `sandwich::vcovHC` and
//! `sandwich::vcovCL` with their defaults.
//!
//! The covariance is the sandwich B M B with B = (X'WX)⁻¹ (the fit's
//! working weights) and the meat M a sum over rows, so it is exactly
//! federable: one `sandwich_step` round at the estimate returns X'WX and
//! Σ ωᵢ xᵢxᵢ' (HC0, HC1); HC2 and HC3 need the leverages
//! hᵢ = wᵢ xᵢ'(X'WX)⁻¹xᵢ, so a second round sends (X'WX)⁻¹ as a literal,
//! as the IRLS rounds send coefficients. Cluster-robust errors group the
//! round by the cluster (`_client`, the site, by default): each cluster
//! releases its score Σ sᵢxᵢ, held to the site's k like any group, and the
//! meat is Σ_g u_g u_g' times G/(G − 1) — and, for `lm` (vcovCL's HC1),
//! (n − 1)/(n − k). HC1 is HC0 times n/(n − k).

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Float64Type;
use fedsql_udfs::family::{Family, Link};
use fedsql_udfs::linalg::inverse_spd;
use fedsql_udfs::sandwich_step::{SandwichConfig, SandwichSums};
use nalgebra::{DMatrix, DVector};

use crate::coordinator::client_column::CLIENT_COLUMN;
use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::formula::quote_ident;
use crate::models::source::ModelSource;
use crate::table_function::options::Options;

/// Which covariance of the estimates a fit reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Covariance {
    /// The model-based one (R's `vcov()`).
    #[default]
    Classical,
    /// `sandwich::vcovHC(type = "HC<n>")`.
    Hc(u8),
    /// `sandwich::vcovCL` clustered by a column (`None`: by site).
    Cluster(Option<String>),
}

impl Covariance {
    /// Reads `se=` and `cluster=` from a fit's options.
    pub(crate) fn from_options(options: &Options) -> Result<Self> {
        let cluster = options.get("cluster").map(|o| o.value.clone());
        let se = options.get("se");
        let kind = match se {
            None if cluster.is_some() => return Ok(Covariance::Cluster(cluster)),
            None => return Ok(Covariance::Classical),
            Some(o) => o.choice(&["classical", "const", "hc0", "hc1", "hc2", "hc3", "cluster"])?,
        };
        let covariance = match kind {
            "classical" | "const" => Covariance::Classical,
            "cluster" => return Ok(Covariance::Cluster(cluster)),
            hc => Covariance::Hc(hc[2..].parse().expect("hc0..hc3")),
        };
        if cluster.is_some() {
            return Err(FedError::InvalidArgument(
                "option cluster= goes with se=cluster (or alone)".into(),
            ));
        }
        Ok(covariance)
    }

    /// How R computes it, for the notice.
    pub(crate) fn described(&self, lm: bool) -> String {
        match self {
            Covariance::Classical => "model-based (R's vcov)".into(),
            Covariance::Hc(t) => format!("robust, sandwich::vcovHC(type = \"HC{t}\")"),
            Covariance::Cluster(c) => format!(
                "cluster-robust by {}, sandwich::vcovCL (type \"{}\", G/(G - 1) adjusted)",
                c.as_deref()
                    .map_or("site (_client)".to_string(), |c| format!("`{c}`")),
                if lm { "HC1" } else { "HC0" }
            ),
        }
    }
}

/// What the sandwich of a fit needs: the rows, the model and the estimate.
pub(crate) struct SandwichInput<'a> {
    /// The rows.
    pub source: &'a ModelSource,
    pub family: Family,
    pub link: Link,
    /// SQL of y, trials, offset and prior weight (as `irls_step` takes them).
    pub leading: Vec<String>,
    /// SQL of the estimated (non-aliased) design columns.
    pub columns: Vec<String>,
    /// The estimate on those columns.
    pub beta: Vec<f64>,
    /// Where R's working weights were taken (`None`: its `mustart`).
    pub beta_w: Option<Vec<f64>>,
    /// Rows the fit used.
    pub nobs: f64,
    /// An `lm` (vcovCL's default type is then HC1).
    pub lm: bool,
}

impl SandwichInput<'_> {
    fn config(&self, bread: Option<(Vec<f64>, u8)>) -> SandwichConfig {
        let (bread, power) = match bread {
            Some((b, p)) => (Some(b), p),
            None => (None, 0),
        };
        SandwichConfig {
            family: self.family,
            link: self.link,
            beta: self.beta.clone(),
            beta_w: self.beta_w.clone(),
            bread,
            power,
        }
    }

    fn sql(&self, config: &SandwichConfig, cluster: Option<&str>) -> String {
        let mut arguments = self.leading.clone();
        arguments.extend(self.columns.iter().cloned());
        let call = format!(
            "sandwich_step('{}', {})",
            config.encode(),
            arguments.join(", ")
        );
        match cluster {
            None => format!("SELECT {call} AS sums FROM {}", self.source.from),
            Some(c) => format!(
                "SELECT {call} AS sums FROM {} WHERE {c} IS NOT NULL GROUP BY {c}",
                self.source.from
            ),
        }
    }
}

/// The sums of each row of a round's result.
async fn sums(ctx: &FedContext, sql: &str, k: usize) -> Result<Vec<SandwichSums>> {
    let batches = crate::table_function::rounds::query(ctx, sql).await?;
    let mut out = Vec::new();
    for batch in &batches {
        let lists = batch.column(0).as_list::<i32>();
        for row in 0..batch.num_rows() {
            let values = lists.value(row);
            out.push(SandwichSums::from_slice(
                values.as_primitive::<Float64Type>().values(),
                k,
            ));
        }
    }
    Ok(out)
}

/// R's Pearson statistic of the fit (working weights at `beta_w` times
/// squared working residuals at the estimate), whose ratio to the residual
/// degrees of freedom is `summary.glm`'s dispersion.
pub(crate) async fn working_pearson(ctx: &FedContext, input: &SandwichInput<'_>) -> Result<f64> {
    let k = input.columns.len();
    Ok(one(
        sums(ctx, &input.sql(&input.config(None), None), k).await?,
        k,
    )
    .pearson)
}

/// The robust covariance of the estimate (on the estimated columns).
pub(crate) async fn covariance(
    ctx: &FedContext,
    input: &SandwichInput<'_>,
    kind: &Covariance,
) -> Result<DMatrix<f64>> {
    let k = input.columns.len();
    let n = input.nobs;
    let matrix = |v: &[f64]| DMatrix::from_row_slice(k, k, v);
    let bread_of = |s: &SandwichSums| {
        inverse_spd(&matrix(&s.xtwx)).ok_or_else(|| {
            FedError::InvalidArgument(
                "robust standard errors: X'WX at the estimate is singular".into(),
            )
        })
    };
    let (bread, meat) = match kind {
        Covariance::Classical => {
            return Err(FedError::Internal("no sandwich for se=classical".into()));
        }
        Covariance::Hc(t) => {
            let first = one(
                sums(ctx, &input.sql(&input.config(None), None), k).await?,
                k,
            );
            let bread = bread_of(&first)?;
            let meat = if *t >= 2 {
                let literal: Vec<f64> = bread.transpose().iter().copied().collect();
                let config = input.config(Some((literal, t - 1)));
                one(sums(ctx, &input.sql(&config, None), k).await?, k).meat
            } else {
                first.meat.clone()
            };
            let scale = if *t == 1 { n / (n - k as f64) } else { 1.0 };
            (bread, matrix(&meat) * scale)
        }
        Covariance::Cluster(column) => {
            let column = column.as_deref().unwrap_or(CLIENT_COLUMN);
            let schema = input.source.schema(ctx).await?;
            if schema.field_with_name(column).is_err() {
                return Err(FedError::InvalidArgument(if column == CLIENT_COLUMN {
                    format!(
                        "se=cluster clusters by site (`{CLIENT_COLUMN}`), which the source '{}' does not have: name a cluster column with 'cluster=col'",
                        input.source.given
                    )
                } else {
                    format!(
                        "the cluster column `{column}` is not a column of '{}'",
                        input.source.given
                    )
                }));
            }
            let groups = sums(
                ctx,
                &input.sql(&input.config(None), Some(&quote_ident(column))),
                k,
            )
            .await?;
            let used: f64 = groups.iter().map(|g| g.n).sum();
            if used != n {
                return Err(FedError::InvalidArgument(format!(
                    "the cluster column `{column}` is NULL in {} of the {n} rows the fit used: give every row a cluster",
                    n - used
                )));
            }
            let g = groups.len() as f64;
            if g < 2.0 {
                return Err(FedError::InvalidArgument(format!(
                    "cluster-robust errors need at least 2 clusters; `{column}` has {g}"
                )));
            }
            let mut xtwx = vec![0.0; k * k];
            let mut meat = DMatrix::zeros(k, k);
            for group in &groups {
                xtwx.iter_mut().zip(&group.xtwx).for_each(|(a, b)| *a += b);
                let u = DVector::from_column_slice(&group.score);
                meat += &u * u.transpose();
            }
            let total = SandwichSums {
                xtwx,
                ..SandwichSums::new(k)
            };
            let mut scale = g / (g - 1.0);
            if input.lm {
                scale *= (n - 1.0) / (n - k as f64);
            }
            (bread_of(&total)?, meat * scale)
        }
    };
    Ok(&bread * meat * &bread)
}

/// The one row of an ungrouped round.
fn one(mut rows: Vec<SandwichSums>, k: usize) -> SandwichSums {
    rows.pop().unwrap_or_else(|| SandwichSums::new(k))
}

/// A kept-columns covariance spread back over every term (`None` for
/// aliased ones); `slots[j]` is term j's position among the kept columns.
pub(crate) fn spread(matrix: &DMatrix<f64>, slots: &[Option<usize>]) -> Vec<Vec<Option<f64>>> {
    slots
        .iter()
        .map(|a| slots.iter().map(|b| Some(matrix[((*a)?, (*b)?)])).collect())
        .collect()
}
