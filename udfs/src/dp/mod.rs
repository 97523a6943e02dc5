//! Differentially private aggregates: `dp_count`, `dp_sum`, `dp_avg`,
//! `dp_var` and `dp_histogram`, and what a site needs to release their
//! state under pure ε-differential privacy.
//!
//! The accumulators themselves are exact: their state is a few integers
//! (quantized sums of clamped values, counts), merged by addition. The
//! noise is *not* added by the accumulator — DataFusion calls `state()`
//! once per partition and again when a site reduces its partitions, so an
//! accumulator cannot know which call releases. Instead [`release_of`]
//! describes, for one call, the noise each of its state columns needs
//! (mechanism, ε, sensitivity in integer units, scale), and the site adds
//! it exactly once to every state row it releases ([`add_noise`]), with
//! the exact discrete Laplace sampler of [`sampler`].
//!
//! Quantization: a value is clamped to `[lower, upper]` at the client,
//! then put on a grid of step `M / 2^20` (M the largest magnitude the
//! clamped value or its square can have), rounded half to even; an integer
//! `dp_sum` with integer bounds within ±2^20 keeps step 1 (exact). So one
//! row changes a state column by at most its sensitivity `Δ` grid units,
//! and discrete Laplace noise of scale `Δ/ε` makes the column ε-DP.
//!
//! Under the masks (`secure_dp_count`, `secure_dp_sum`, `secure_dp_avg`),
//! the same state is masked as a secure sum's, and each site adds only a
//! *share* of that noise ([`add_share`]): with the secure session's
//! threshold t, each share is the difference of two Pólya NB(1/t, q)
//! samples, so the unmasked total over s ≥ t sites carries discrete
//! Laplace noise of the full scale plus independent noise of s/t − 1
//! times its variance — never less than the target, and no party sees a
//! site's state with less noise than the masked total's.

pub mod aggregate;
pub mod planner;
pub mod sampler;

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, ListArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;
use rand_core::{CryptoRng, RngCore};

pub use aggregate::{Kind, Params};

use crate::function_doc::{FunctionDoc, FunctionFamily};
use sampler::{Scale, discrete_laplace, laplace_share};

/// Grid levels: the largest magnitude of a quantized value.
pub const LEVELS: u64 = 1 << 20;

/// The largest noise scale, in grid units, of a masked call's column: a
/// site's share costs about 46 · scale uniform draws (two Pólya urns of
/// [`sampler::urn_steps`], fixed so that their time tells nothing), so a
/// tiny ε with wide bounds would keep every site busy for hours (found by
/// an outside attack). 2^22 is about half a second of draws per word.
pub const MAX_MASKED_SCALE: f64 = (1u64 << 22) as f64;

/// Grid levels of the masked variants' non-integer sums: a site's noise
/// share costs O(levels / ε) uniform draws (see [`sampler::polya`]), so
/// their grid is coarser; a value is still within 2^-17 of its bound's
/// magnitude.
pub const MASKED_LEVELS: u64 = 1 << 16;

/// Denominator of the rational ε a sampler uses: ε is rounded *down* to a
/// multiple of 2^-20, so the noise is never smaller than ε asks.
const EPSILON_DENOMINATOR: f64 = (1u64 << 20) as f64;

/// The noise of one state column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnNoise {
    /// What the column holds, e.g. "count", "sum of clamped values".
    pub what: &'static str,
    /// The ε this column spends.
    pub epsilon: f64,
    /// How much one row may change it, in grid units.
    pub sensitivity: u64,
    /// The value of one grid unit.
    pub step: f64,
    /// The discrete Laplace scale, in grid units.
    pub scale: Scale,
    /// For a list column (the histogram), its length.
    pub elements: Option<usize>,
}

impl ColumnNoise {
    fn new(what: &'static str, epsilon: f64, sensitivity: u64, step: f64) -> Result<Self> {
        let den = (epsilon * EPSILON_DENOMINATOR).floor();
        if !(den >= 1.0 && den < 2f64.powi(62)) {
            return plan_err!(
                "epsilon {epsilon} is out of range: give 2^-20 ≤ ε (a split ε too), a finite number"
            );
        }
        let num = sensitivity as u128 * EPSILON_DENOMINATOR as u128;
        let num = u64::try_from(num).map_err(|_| {
            datafusion::error::DataFusionError::Plan("sensitivity too large".into())
        })?;
        Ok(Self {
            what,
            epsilon,
            sensitivity,
            step,
            scale: Scale {
                num,
                den: den as u64,
            },
            elements: None,
        })
    }

    /// The standard deviation of this column's noise, in value units, for
    /// the sum of `clients` independent releases.
    pub fn std_dev(&self, clients: usize) -> f64 {
        self.std_dev_over(clients as f64)
    }

    /// The same for `draws` full draws (fractional for shares).
    pub fn std_dev_over(&self, draws: f64) -> f64 {
        self.step * (draws * self.scale.variance()).sqrt()
    }

    /// The variance of one release's noise, in grid units.
    pub fn variance(&self) -> f64 {
        self.scale.variance()
    }
}

/// How one DP aggregate call is released: its ε and the noise of each of
/// its state columns, in state order.
#[derive(Debug, Clone, PartialEq)]
pub struct DpRelease {
    pub function: String,
    pub epsilon: f64,
    pub params: Params,
    pub columns: Vec<ColumnNoise>,
    /// A `secure_dp_…` call: each site adds a share of the noise, under
    /// the masks ([`add_share`]).
    pub under_masks: bool,
}

impl DpRelease {
    /// "discrete Laplace" — the only mechanism.
    pub fn mechanism(&self) -> &'static str {
        if self.under_masks {
            "discrete Laplace (pure ε-DP), added in shares under the masks"
        } else {
            "discrete Laplace (pure ε-DP)"
        }
    }

    /// How many full draws of each column's noise a total over `clients`
    /// sites carries: one per site for `dp_…`; s/t for `secure_dp_…` over
    /// s sites whose shares were cut for a threshold t (`shares`).
    pub fn noise_draws(&self, clients: usize, shares: Option<usize>) -> f64 {
        match (self.under_masks, shares) {
            (true, Some(t)) if t > 0 => clients as f64 / t as f64,
            _ => clients as f64,
        }
    }

    /// The standard deviation of the noise in this call's *result*, over
    /// `draws` full draws of each column's noise ([`DpRelease::noise_draws`]);
    /// `count` is the (noisy) number of values for `dp_avg` and `dp_var`
    /// (delta method, at the result `value`).
    pub fn result_std_dev(&self, draws: f64, count: f64, value: f64) -> f64 {
        let sd = |i: usize| self.columns[i].std_dev_over(draws);
        match self.params.kind {
            Kind::Count | Kind::Sum | Kind::Histogram => sd(0),
            Kind::Avg => {
                let n = count.max(1.0);
                let mid = self.params.mid();
                ((sd(1) / n).powi(2) + ((value - mid) * sd(0) / n).powi(2)).sqrt()
            }
            Kind::Var => {
                // var = (S2 − S1²/n)/(n − 1): the S2 and n terms dominate
                // (S1 enters squared, near 0 for centered values).
                let n = (count - 1.0).max(1.0);
                ((sd(2) / n).powi(2) + (value * sd(0) / n).powi(2)).sqrt()
            }
        }
    }
}

/// How a call of `function` with (physical, constant-folded) `args` is
/// released; `None` when it is not a DP aggregate. Fails on bounds or an ε
/// that are not constants, or are out of range — before any client runs,
/// when the coordinator plans a round, and again at every site.
pub fn release_of(function: &str, args: &[Arc<dyn PhysicalExpr>]) -> Result<Option<DpRelease>> {
    let Some((kind, under_masks)) = Kind::parse(function) else {
        return Ok(None);
    };
    let literals = args
        .iter()
        .skip(1)
        .map(|a| match a.downcast_ref::<Literal>() {
            Some(l) if !l.value().is_null() => Ok(l.value().clone()),
            Some(_) => plan_err!("{function}: its bounds, bins and epsilon must not be NULL"),
            None => plan_err!(
                "{function}: argument `{a}` is not a constant; bounds, bins and epsilon must be the same at every client, so give constants"
            ),
        })
        .collect::<Result<Vec<_>>>()?;
    let (mut params, epsilon) = Params::from_literals(kind, &literals)?;
    if under_masks {
        params = params.masked();
    }
    let Some(epsilon) = epsilon else {
        return plan_err!(
            "{function} has no epsilon: the coordinator writes the session's fedsql.dp_epsilon into the call; give it as the last argument"
        );
    };
    let columns = params.noise(epsilon)?;
    if under_masks && let Some(c) = columns.iter().find(|c| c.scale.value() > MAX_MASKED_SCALE) {
        let name = kind.masked_name().unwrap_or(kind.name());
        return plan_err!(
            "{name}: ε = {epsilon} with these bounds asks for noise of scale {:.3e} grid units in its {}, more than the {MAX_MASKED_SCALE:.3e} a site samples under the masks; give a larger ε or narrower bounds, or use {} (noise at each site)",
            c.scale.value(),
            c.what,
            kind.name()
        );
    }
    Ok(Some(DpRelease {
        function: match under_masks {
            true => kind.masked_name().unwrap_or(kind.name()),
            false => kind.name(),
        }
        .to_string(),
        epsilon,
        params,
        columns,
        under_masks,
    }))
}

/// `column` (an Int64 state column, or a list of Int64 for the histogram)
/// with independent discrete Laplace noise of `noise`'s scale added to
/// every value of every row.
pub fn add_noise<R: RngCore + CryptoRng + ?Sized>(
    column: &ArrayRef,
    noise: &ColumnNoise,
    rng: &mut R,
) -> Result<ArrayRef> {
    let mut noisy = |v: i64| v.saturating_add(discrete_laplace(rng, noise.scale));
    match column.data_type() {
        DataType::Int64 => {
            let values = column.as_primitive::<Int64Type>();
            let out: Int64Array = values.iter().map(|v| Some(noisy(v.unwrap_or(0)))).collect();
            Ok(Arc::new(out))
        }
        DataType::List(field) if field.data_type() == &DataType::Int64 => {
            let lists = column.as_list::<i32>();
            let inner = lists.values().as_primitive::<Int64Type>();
            let out: Int64Array = inner.iter().map(|v| Some(noisy(v.unwrap_or(0)))).collect();
            Ok(Arc::new(ListArray::new(
                Arc::clone(field),
                lists.offsets().clone(),
                Arc::new(out),
                None,
            )))
        }
        other => exec_err!("a DP state column of type {other}, expected BIGINT or a list of them"),
    }
}

/// `column` (a `UInt64` state column of a `secure_dp_…` call, two's
/// complement) with one site's share of `noise` added to every value: the
/// difference of two Pólya samples that, summed over `threshold` sites,
/// make discrete Laplace noise of `noise`'s scale (see
/// [`sampler::laplace_share`]). The site masks the column afterwards.
pub fn add_share<R: RngCore + CryptoRng + ?Sized>(
    column: &ArrayRef,
    noise: &ColumnNoise,
    threshold: usize,
    rng: &mut R,
) -> Result<ArrayRef> {
    use datafusion::arrow::array::UInt64Array;
    use datafusion::arrow::datatypes::UInt64Type;
    if threshold == 0 {
        return exec_err!("a noise share for a threshold of 0 sites");
    }
    let DataType::UInt64 = column.data_type() else {
        return exec_err!(
            "a masked DP state column of type {}, expected BIGINT UNSIGNED",
            column.data_type()
        );
    };
    let values = column.as_primitive::<UInt64Type>();
    let out: UInt64Array = values
        .iter()
        .map(|v| {
            let share = laplace_share(rng, noise.scale, threshold as u64);
            Some(v.unwrap_or(0).wrapping_add(share as u64))
        })
        .collect();
    Ok(Arc::new(out))
}

/// The state of a call over no rows (all zeros): what a site releases,
/// with noise, for a declared key it does not hold.
pub fn zero_state(noise: &ColumnNoise, rows: usize) -> ArrayRef {
    match noise.elements {
        None => Arc::new(Int64Array::from(vec![0i64; rows])),
        Some(k) => {
            let values = ScalarValue::List(aggregate::int_list(vec![0; k]));
            values
                .to_array_of_size(rows)
                .expect("a list scalar makes an array")
        }
    }
}

/// Every DP aggregate function.
pub fn all() -> Vec<datafusion::logical_expr::AggregateUDF> {
    [
        Kind::Count,
        Kind::Sum,
        Kind::Avg,
        Kind::Var,
        Kind::Histogram,
    ]
    .into_iter()
    .map(aggregate::udaf)
    .chain(
        [Kind::Count, Kind::Sum, Kind::Avg]
            .into_iter()
            .filter_map(aggregate::masked_udaf),
    )
    .collect()
}

/// The documentation of `dp_count`.
pub const COUNT_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Dp,
    description: "A differentially private count of rows (`dp_count(*)`) or of non-NULL values.",
    syntax: "dp_count(* | x [, epsilon])",
    arguments: &[
        ("x", "any column or expression, or `*` for rows"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "BIGINT (unbiased; a noisy count may be negative)",
    releases: "its count with discrete Laplace noise of scale 1/ε, after debiting ε from its budget.",
    example: "SELECT dp_count(*) AS n FROM clinic",
};

/// The documentation of `dp_sum`.
pub const SUM_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Dp,
    description: "A differentially private sum of the values clamped to [lower, upper].",
    syntax: "dp_sum(x, lower, upper [, epsilon])",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constant bounds, lower < upper"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "BIGINT for integers, else DOUBLE (unbiased)",
    releases: "the sum of its clamped values on a grid, with discrete Laplace noise of scale max(|lower|, |upper|)/ε, after debiting ε from its budget.",
    example: "SELECT dp_sum(visits, 0, 10) AS visits FROM clinic",
};

/// The documentation of `dp_avg`.
pub const AVG_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Dp,
    description: "A differentially private mean of the values clamped to [lower, upper].",
    syntax: "dp_avg(x, lower, upper [, epsilon])",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constant bounds, lower < upper"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "DOUBLE, clamped into [lower, upper]",
    releases: "its count (ε/2) and the sum of (x − midpoint) (ε/2), each with discrete Laplace noise, after debiting ε from its budget.",
    example: "SELECT dp_avg(systolic, 80, 200) AS mean_sbp FROM clinic",
};

/// The documentation of `dp_var`.
pub const VAR_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Dp,
    description: "A differentially private sample variance of the values clamped to [lower, upper].",
    syntax: "dp_var(x, lower, upper [, epsilon])",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constant bounds, lower < upper"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "DOUBLE, at least 0",
    releases: "its count, Σ (x − midpoint) and Σ (x − midpoint)² (ε/3 each), each with discrete Laplace noise, after debiting ε from its budget.",
    example: "SELECT dp_var(systolic, 80, 200) AS var_sbp FROM clinic",
};

/// The documentation of `dp_histogram`.
pub const HISTOGRAM_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Dp,
    description: "A differentially private histogram: counts in `bins` equal-width bins over [lower, upper], values outside clamped into the end bins; the layout of `histogram`.",
    syntax: "dp_histogram(x, lower, upper, bins [, epsilon])",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constant bounds, lower < upper"),
        ("bins", "a constant number of bins, 1 to 10000"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "a list of `bins` counts (`list<int64>`)",
    releases: "its `bins` counts, each with discrete Laplace noise of scale 1/ε (one row changes one bin), after debiting ε from its budget.",
    example: "SELECT dp_histogram(bmi, 15, 45, 6) AS bmi_bins FROM clinic",
};

/// The documentation of `secure_dp_count`.
pub const SECURE_COUNT_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "A differentially private count of rows (`secure_dp_count(*)`) or of non-NULL values, merged as a masked sum: each site adds a share of the noise before masking, so the total carries the noise of `dp_count` once, not once per site.",
    syntax: "secure_dp_count(* | x [, epsilon])",
    arguments: &[
        ("x", "any column or expression, or `*` for rows"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "BIGINT (unbiased; a noisy count may be negative)",
    releases: "its count plus a Pólya share of discrete Laplace noise of scale 1/ε (cut into the session's share count d, the threshold t or with peers t − c: any t sites' shares, less c colluders', make the full noise), masked; after debiting ε from its budget.",
    example: "SELECT secure_dp_count(*) AS n FROM clinic",
};

/// The documentation of `secure_dp_sum`.
pub const SECURE_SUM_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "A differentially private sum of the values clamped to [lower, upper], merged as a masked sum with the noise added in shares under the masks (the total carries the noise of `dp_sum` once).",
    syntax: "secure_dp_sum(x, lower, upper [, epsilon])",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constant bounds, lower < upper"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "BIGINT for integers, else DOUBLE (unbiased)",
    releases: "the sum of its clamped values on a grid plus a Pólya share of discrete Laplace noise of scale max(|lower|, |upper|)/ε, masked; after debiting ε from its budget.",
    example: "SELECT secure_dp_sum(visits, 0, 10) AS visits FROM clinic",
};

/// The documentation of `secure_dp_avg`.
pub const SECURE_AVG_DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Secure,
    description: "A differentially private mean of the values clamped to [lower, upper]: the count and the sum of (x − midpoint), each with its noise added in shares under the masks.",
    syntax: "secure_dp_avg(x, lower, upper [, epsilon])",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constant bounds, lower < upper"),
        (
            "epsilon",
            "optional constant ε (default: the session's `fedsql.dp_epsilon`, 1)",
        ),
    ],
    options: &[],
    returns: "DOUBLE, clamped into [lower, upper]",
    releases: "its count (ε/2) and the sum of (x − midpoint) (ε/2), each plus a Pólya share of discrete Laplace noise, masked; after debiting ε from its budget.",
    example: "SELECT secure_dp_avg(systolic, 80, 200) AS mean_sbp FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_is_sensitivity_over_epsilon_rounded_up() {
        let c = ColumnNoise::new("count", 0.5, 1, 1.0).unwrap();
        assert_eq!(c.scale.value(), 2.0);
        let c = ColumnNoise::new("sum", 1.0 / 3.0, 7, 1.0).unwrap();
        assert!(c.scale.value() >= 21.0 && c.scale.value() < 21.0001);
        assert!(ColumnNoise::new("x", 0.0, 1, 1.0).is_err());
        assert!(ColumnNoise::new("x", f64::NAN, 1, 1.0).is_err());
    }

    #[test]
    fn noise_is_added_to_every_value_of_a_list() {
        use rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let noise = ColumnNoise {
            elements: Some(3),
            ..ColumnNoise::new("bins", 1.0, 1, 1.0).unwrap()
        };
        let zeros = zero_state(&noise, 2);
        let noisy = add_noise(&zeros, &noise, &mut rng).unwrap();
        let list = noisy.as_list::<i32>();
        assert_eq!(list.len(), 2);
        assert_eq!(list.value(1).len(), 3);
    }
}
