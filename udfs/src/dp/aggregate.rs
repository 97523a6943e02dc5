//! The five DP aggregates as one `AggregateUDFImpl` parameterized by
//! [`Kind`]: they share the clamping, the quantization grid and the
//! integer state, and differ only in which sums they keep.
//!
//! | call | state (Int64, merged by addition) | result |
//! |---|---|---|
//! | `dp_count(x)`, `dp_count(*)` | count | BIGINT |
//! | `dp_sum(x, lower, upper)` | Σ q(clamp(x)) | BIGINT for integers, else DOUBLE |
//! | `dp_avg(x, lower, upper)` | count, Σ q(c) with c = clamp(x) − mid | DOUBLE |
//! | `dp_var(x, lower, upper)` | count, Σ q(c), Σ q(c²) | DOUBLE (sample variance) |
//! | `dp_histogram(x, lower, upper, bins)` | `bins` counts (out of range clamped into the end bins) | list of BIGINT, as `histogram` |
//!
//! Each takes an optional last `epsilon`. `dp_avg` gives ε/2 to its count
//! and ε/2 to its sum; `dp_var` ε/3 to each of its three sums.
//!
//! `secure_dp_count`, `secure_dp_sum` and `secure_dp_avg` are the same
//! accumulators *masked*: their state columns are the same integers as
//! `UInt64` (two's complement, added mod 2^64), which the sites mask like
//! a secure sum's, and each site adds only a share of the noise (see
//! [`super::sampler::laplace_share`]) before masking.
//!
//! Why this file is over 600 lines: it holds the DP aggregates' one generic aggregate and accumulator, which read together
//! (the style's one aggregate, one file); its tests are in the same file.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;

use super::{ColumnNoise, LEVELS, MASKED_LEVELS};
use crate::histogram::{Bins, Slot};
use crate::quantizer::cast_to;

/// Which DP aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Count,
    Sum,
    Avg,
    Var,
    Histogram,
}

impl Kind {
    /// The kind of a function name, if it is a DP aggregate.
    pub fn of(name: &str) -> Option<Self> {
        Some(match name.to_ascii_lowercase().as_str() {
            "dp_count" => Kind::Count,
            "dp_sum" => Kind::Sum,
            "dp_avg" => Kind::Avg,
            "dp_var" => Kind::Var,
            "dp_histogram" => Kind::Histogram,
            _ => return None,
        })
    }

    /// The SQL name of the masked variant (`secure_dp_…`), for the kinds
    /// that have one.
    pub fn masked_name(&self) -> Option<&'static str> {
        Some(match self {
            Kind::Count => "secure_dp_count",
            Kind::Sum => "secure_dp_sum",
            Kind::Avg => "secure_dp_avg",
            Kind::Var | Kind::Histogram => return None,
        })
    }

    /// The kind and whether it is the masked variant, of a function name.
    pub fn parse(name: &str) -> Option<(Self, bool)> {
        if let Some(kind) = Self::of(name) {
            return Some((kind, false));
        }
        let lower = name.to_ascii_lowercase();
        let kind = Self::of(lower.strip_prefix("secure_")?)?;
        (kind.masked_name() == Some(lower.as_str())).then_some((kind, true))
    }

    /// The SQL name.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Count => "dp_count",
            Kind::Sum => "dp_sum",
            Kind::Avg => "dp_avg",
            Kind::Var => "dp_var",
            Kind::Histogram => "dp_histogram",
        }
    }

    /// The number of arguments without the optional epsilon.
    pub fn base_args(&self) -> usize {
        match self {
            Kind::Count => 1,
            Kind::Sum | Kind::Avg | Kind::Var => 3,
            Kind::Histogram => 4,
        }
    }

    fn usage(&self) -> &'static str {
        match self {
            Kind::Count => "dp_count(*) or dp_count(x), with an optional last epsilon",
            Kind::Sum => "dp_sum(x, lower, upper[, epsilon]), e.g. dp_sum(visits, 0, 20)",
            Kind::Avg => "dp_avg(x, lower, upper[, epsilon]), e.g. dp_avg(systolic, 80, 200)",
            Kind::Var => "dp_var(x, lower, upper[, epsilon]), e.g. dp_var(bmi, 15, 45)",
            Kind::Histogram => {
                "dp_histogram(x, lower, upper, bins[, epsilon]), e.g. dp_histogram(bmi, 15, 45, 6)"
            }
        }
    }

    fn state_names(&self) -> &'static [&'static str] {
        match self {
            Kind::Count => &["count"],
            Kind::Sum => &["sum"],
            Kind::Avg => &["count", "sum"],
            Kind::Var => &["count", "sum", "sum_squares"],
            Kind::Histogram => &["counts"],
        }
    }
}

/// The constant arguments of one call: bounds and bins, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub kind: Kind,
    pub lower: f64,
    pub upper: f64,
    /// `dp_sum` of integers with integer bounds within ±2^20: grid step 1.
    pub integer: bool,
    pub bins: Option<Bins>,
    /// The grid's levels of a non-integer sum: [`LEVELS`], or
    /// [`MASKED_LEVELS`] under the masks (where the noise's cost is
    /// proportional to them).
    pub levels: u64,
}

impl Params {
    /// The parameters and the epsilon (if given) from the arguments after x.
    pub fn from_literals(kind: Kind, literals: &[ScalarValue]) -> Result<(Self, Option<f64>)> {
        let name = kind.name();
        let extra = kind.base_args() - 1;
        if literals.len() != extra && literals.len() != extra + 1 {
            return plan_err!("{name}: usage {}", kind.usage());
        }
        let number = |what: &str, v: &ScalarValue| -> Result<f64> {
            let f = match v {
                ScalarValue::Int64(Some(i)) => *i as f64,
                ScalarValue::Int32(Some(i)) => *i as f64,
                ScalarValue::Float64(Some(f)) => *f,
                ScalarValue::Float32(Some(f)) => *f as f64,
                other => return plan_err!("{name}: {what} must be a number, got {other}"),
            };
            if !f.is_finite() {
                return plan_err!("{name}: {what} must be finite, got {f}");
            }
            Ok(f)
        };
        let epsilon = literals
            .get(extra)
            .map(|e| {
                let e = number("epsilon", e)?;
                if e <= 0.0 {
                    return plan_err!("{name}: epsilon must be positive, got {e}");
                }
                Ok(e)
            })
            .transpose()?;
        let mut params = Params {
            kind,
            lower: 0.0,
            upper: 0.0,
            integer: false,
            bins: None,
            levels: LEVELS,
        };
        if kind == Kind::Count {
            return Ok((params, epsilon));
        }
        let (lower, upper) = (
            number("lower", &literals[0])?,
            number("upper", &literals[1])?,
        );
        if lower >= upper {
            return plan_err!(
                "{name}: lower bound {lower} is not below upper bound {upper}; give lower < upper"
            );
        }
        params.lower = lower;
        params.upper = upper;
        // Whole-number bounds are those of a call typed BIGINT (see
        // `coerce_types`): its result stays BIGINT only on the exact grid.
        let whole = matches!(literals[0], ScalarValue::Int64(_))
            && matches!(literals[1], ScalarValue::Int64(_));
        if kind == Kind::Sum && whole && params.magnitude() > LEVELS as f64 {
            return plan_err!(
                "{name}: whole-number bounds [{lower}, {upper}] reach beyond ±{LEVELS} (2^20), where a BIGINT sum is no longer exact; give bounds within ±{LEVELS}, or sum a DOUBLE, e.g. {name}(CAST(x AS DOUBLE), {lower}, {upper})"
            );
        }
        params.integer = kind == Kind::Sum && whole;
        params.check_grid()?;
        if kind == Kind::Histogram {
            let bins = match &literals[2] {
                ScalarValue::Int64(Some(b)) => *b,
                other => return plan_err!("{name}: bins must be a whole number, got {other}"),
            };
            params.bins = Some(Bins::new(lower, upper, bins)?);
        }
        Ok((params, epsilon))
    }

    /// Refuses bounds whose grid a float cannot hold: a midpoint or half
    /// range that overflows, or a grid step (at the plain or the masked
    /// levels) that is not a normal number — a subnormal or zero step
    /// makes a row weigh more than the noise's sensitivity, or ±∞ (the
    /// fifteenth outside attack read a count's parity from it).
    fn check_grid(&self) -> Result<()> {
        let name = self.kind.name();
        let (lower, upper) = (self.lower, self.upper);
        if matches!(self.kind, Kind::Count | Kind::Histogram) || self.integer {
            return Ok(());
        }
        // Only dp_avg and dp_var center on the midpoint (a sum's grid
        // steps by its largest magnitude).
        if self.kind != Kind::Sum && (!self.mid().is_finite() || !self.half_range().is_finite()) {
            return plan_err!(
                "{name}: bounds [{lower}, {upper}] are too far apart for a float midpoint; give narrower bounds"
            );
        }
        for levels in [LEVELS, MASKED_LEVELS] {
            let (s1, s2) = Self {
                levels,
                ..self.clone()
            }
            .steps();
            let fine = s1.is_normal() && (self.kind != Kind::Var || s2.is_normal());
            if !fine {
                return plan_err!(
                    "{name}: bounds [{lower}, {upper}] are too narrow or too wide for the grid of {levels} levels its noise is sized for (a step of {s1:e}); give bounds of a larger magnitude, or scale x"
                );
            }
        }
        Ok(())
    }

    /// The same parameters on the grid of the masked variant.
    pub fn masked(mut self) -> Self {
        self.levels = MASKED_LEVELS;
        self
    }

    /// The largest magnitude of a clamped value.
    fn magnitude(&self) -> f64 {
        self.lower.abs().max(self.upper.abs())
    }

    /// The midpoint of the bounds (what `dp_avg` and `dp_var` center on).
    pub fn mid(&self) -> f64 {
        (self.lower + self.upper) / 2.0
    }

    fn half_range(&self) -> f64 {
        (self.upper - self.lower) / 2.0
    }

    /// The grid steps of the sums (in state order after any count).
    fn steps(&self) -> (f64, f64) {
        match self.kind {
            Kind::Sum if self.integer => (1.0, 1.0),
            Kind::Sum => (self.magnitude() / self.levels as f64, 0.0),
            Kind::Avg | Kind::Var => {
                let h = self.half_range();
                (h / self.levels as f64, h * h / self.levels as f64)
            }
            Kind::Count | Kind::Histogram => (1.0, 1.0),
        }
    }

    /// The noise of each state column for a total of `epsilon`.
    pub fn noise(&self, epsilon: f64) -> Result<Vec<ColumnNoise>> {
        let (s1, s2) = self.steps();
        Ok(match self.kind {
            Kind::Count => vec![ColumnNoise::new("count", epsilon, 1, 1.0)?],
            Kind::Sum => {
                let sensitivity = if self.integer {
                    self.magnitude() as u64
                } else {
                    self.levels
                };
                vec![ColumnNoise::new(
                    "sum of clamped values",
                    epsilon,
                    sensitivity,
                    s1,
                )?]
            }
            Kind::Avg => vec![
                ColumnNoise::new("count", epsilon / 2.0, 1, 1.0)?,
                ColumnNoise::new("sum of centered values", epsilon / 2.0, self.levels, s1)?,
            ],
            Kind::Var => vec![
                ColumnNoise::new("count", epsilon / 3.0, 1, 1.0)?,
                ColumnNoise::new("sum of centered values", epsilon / 3.0, self.levels, s1)?,
                ColumnNoise::new(
                    "sum of squared centered values",
                    epsilon / 3.0,
                    self.levels,
                    s2,
                )?,
            ],
            Kind::Histogram => vec![ColumnNoise {
                elements: self.bins.as_ref().map(Bins::len),
                ..ColumnNoise::new("bin counts", epsilon, 1, 1.0)?
            }],
        })
    }
}

/// The UDAF of one kind.
pub fn udaf(kind: Kind) -> AggregateUDF {
    AggregateUDF::from(DpAggregate {
        kind,
        masked: false,
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

/// The masked (`secure_dp_…`) UDAF of one kind that has one.
pub fn masked_udaf(kind: Kind) -> Option<AggregateUDF> {
    kind.masked_name()?;
    Some(AggregateUDF::from(DpAggregate {
        kind,
        masked: true,
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct DpAggregate {
    kind: Kind,
    /// The `secure_dp_…` variant: `UInt64` state the sites mask.
    masked: bool,
    signature: Signature,
}

impl DpAggregate {
    fn call_name(&self) -> &'static str {
        match self.masked {
            true => self.kind.masked_name().unwrap_or(self.kind.name()),
            false => self.kind.name(),
        }
    }

    fn state_type(&self) -> DataType {
        match (self.kind, self.masked) {
            (Kind::Histogram, _) => counts_type(),
            (_, true) => DataType::UInt64,
            (_, false) => DataType::Int64,
        }
    }
}

impl AggregateUDFImpl for DpAggregate {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        self.call_name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let (name, base) = (self.call_name(), self.kind.base_args());
        if arg_types.len() != base && arg_types.len() != base + 1 {
            return plan_err!(
                "{name} takes {base} or {} arguments: {}",
                base + 1,
                self.kind.usage()
            );
        }
        let numeric = |what: &str, t: &DataType| {
            if t.is_numeric() || t.is_null() {
                Ok(())
            } else {
                plan_err!(
                    "{name}: {what} is {t}, but it must be numeric; usage: {}",
                    self.kind.usage()
                )
            }
        };
        let mut out = Vec::with_capacity(arg_types.len());
        match self.kind {
            Kind::Count => out.push(arg_types[0].clone()),
            Kind::Sum | Kind::Avg | Kind::Var | Kind::Histogram => {
                numeric("x", &arg_types[0])?;
                numeric("lower", &arg_types[1])?;
                numeric("upper", &arg_types[2])?;
                let integer = self.kind == Kind::Sum
                    && arg_types[..3].iter().all(|t| t.is_integer() || t.is_null())
                    && arg_types[0].is_integer();
                let t = if integer {
                    DataType::Int64
                } else {
                    DataType::Float64
                };
                out.extend([t.clone(), t.clone(), t]);
                if self.kind == Kind::Histogram {
                    if !arg_types[3].is_integer() {
                        return plan_err!(
                            "{name}: bins is {}, but it must be a whole number; usage: {}",
                            arg_types[3],
                            self.kind.usage()
                        );
                    }
                    out.push(DataType::Int64);
                }
            }
        }
        if arg_types.len() == base + 1 {
            numeric("epsilon", &arg_types[base])?;
            out.push(DataType::Float64);
        }
        Ok(out)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::Count => DataType::Int64,
            Kind::Sum if arg_types.first() == Some(&DataType::Int64) => DataType::Int64,
            Kind::Sum | Kind::Avg | Kind::Var => DataType::Float64,
            Kind::Histogram => counts_type(),
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(self
            .kind
            .state_names()
            .iter()
            .map(|n| {
                Arc::new(Field::new(
                    format_state_name(args.name, n),
                    self.state_type(),
                    true,
                ))
            })
            .collect())
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let name = self.call_name();
        let literals = args.exprs[1..]
            .iter()
            .map(|e| match e.downcast_ref::<Literal>() {
                Some(l) if !l.value().is_null() => Ok(l.value().clone()),
                _ => plan_err!(
                    "{name}: argument `{e}` is not a constant; bounds, bins and epsilon must be the same at every client"
                ),
            })
            .collect::<Result<Vec<_>>>()?;
        let (mut params, _) = Params::from_literals(self.kind, &literals)?;
        if self.masked {
            params = params.masked();
        }
        let sums = match &params.bins {
            Some(bins) => vec![0; bins.len()],
            None => vec![0; self.kind.state_names().len()],
        };
        Ok(Box::new(DpAccumulator {
            params,
            sums,
            masked: self.masked,
        }))
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        ScalarValue::try_from(data_type)
    }
}

fn counts_type() -> DataType {
    DataType::new_list(DataType::Int64, true)
}

/// A one-row list of Int64 values.
pub(crate) fn int_list(values: Vec<i64>) -> Arc<ListArray> {
    let len = values.len() as i32;
    Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Int64, true)),
        OffsetBuffer::new(vec![0, len].into()),
        Arc::new(Int64Array::from(values)),
        None,
    ))
}

/// Exact integer sums; noise is added by the site (see the module docs).
#[derive(Debug)]
struct DpAccumulator {
    params: Params,
    /// The state columns in order, or the bin counts.
    sums: Vec<i64>,
    /// State as `UInt64` (the same bits), for masking.
    masked: bool,
}

/// `round_half_even(v / step)`.
fn grid(v: f64, step: f64) -> i64 {
    (v / step).round_ties_even() as i64
}

impl Accumulator for DpAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let x = &values[0];
        let p = &self.params;
        let (s1, s2) = p.steps();
        let s = &mut self.sums;
        match p.kind {
            Kind::Count => s[0] += (x.len() - x.null_count()) as i64,
            Kind::Sum if p.integer => {
                let (lo, hi) = (p.lower as i64, p.upper as i64);
                for v in cast_to::<Int64Type>(x.as_ref(), &DataType::Int64)?
                    .iter()
                    .flatten()
                {
                    s[0] = s[0].wrapping_add(v.clamp(lo, hi));
                }
            }
            kind => {
                let xs = cast_to::<Float64Type>(x.as_ref(), &DataType::Float64)?;
                for v in xs.iter().flatten().filter(|v| !v.is_nan()) {
                    let v = v.clamp(p.lower, p.upper);
                    // No row weighs more than the noise's sensitivity
                    // (`levels`), whatever the float rounding of the
                    // midpoint or the step.
                    let most = p.levels as i64;
                    match kind {
                        Kind::Sum => s[0] = s[0].wrapping_add(grid(v, s1).clamp(-most, most)),
                        Kind::Avg | Kind::Var => {
                            let c = v - p.mid();
                            s[0] += 1;
                            s[1] = s[1].wrapping_add(grid(c, s1).clamp(-most, most));
                            if kind == Kind::Var {
                                s[2] = s[2].wrapping_add(grid(c * c, s2).clamp(0, most));
                            }
                        }
                        Kind::Histogram => {
                            let bins = p.bins.as_ref().expect("a histogram has bins");
                            let i = match bins.locate(v) {
                                Slot::Bin(i) => i,
                                Slot::Below => 0,
                                Slot::Above => bins.len() - 1,
                                Slot::Missing => continue,
                            };
                            s[i] += 1;
                        }
                        Kind::Count => unreachable!("counted above"),
                    }
                }
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        if self.params.kind == Kind::Histogram {
            let lists = states[0].as_list::<i32>();
            for row in 0..lists.len() {
                if lists.is_null(row) {
                    continue;
                }
                let values = lists.value(row);
                let values = values.as_primitive::<Int64Type>();
                if values.len() != self.sums.len() {
                    return exec_err!(
                        "dp_histogram state of {} counts, expected {}",
                        values.len(),
                        self.sums.len()
                    );
                }
                for (total, v) in self.sums.iter_mut().zip(values.values()) {
                    *total = total.wrapping_add(*v);
                }
            }
            return Ok(());
        }
        for (total, column) in self.sums.iter_mut().zip(states) {
            if self.masked {
                // Masked states add up mod 2^64: the masks cancel only in
                // the wrapping sum, read back as two's complement.
                for v in column.as_primitive::<UInt64Type>().iter().flatten() {
                    *total = total.wrapping_add(v as i64);
                }
                continue;
            }
            for v in column.as_primitive::<Int64Type>().iter().flatten() {
                *total = total.wrapping_add(v);
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(match self.params.kind {
            Kind::Histogram => vec![ScalarValue::List(int_list(self.sums.clone()))],
            _ if self.masked => self
                .sums
                .iter()
                .map(|v| ScalarValue::UInt64(Some(*v as u64)))
                .collect(),
            _ => self
                .sums
                .iter()
                .map(|v| ScalarValue::Int64(Some(*v)))
                .collect(),
        })
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let p = &self.params;
        let (s1, s2) = p.steps();
        let s = &self.sums;
        Ok(match p.kind {
            Kind::Count => ScalarValue::Int64(Some(s[0])),
            Kind::Sum if p.integer => ScalarValue::Int64(Some(s[0])),
            Kind::Sum => ScalarValue::Float64(Some(s[0] as f64 * s1)),
            Kind::Avg => {
                let n = s[0] as f64;
                ScalarValue::Float64(
                    (n > 0.0).then(|| (p.mid() + s[1] as f64 * s1 / n).clamp(p.lower, p.upper)),
                )
            }
            Kind::Var => {
                let n = s[0] as f64;
                ScalarValue::Float64((n > 1.0).then(|| {
                    let (sum, squares) = (s[1] as f64 * s1, s[2] as f64 * s2);
                    let var = (squares - sum * sum / n) / (n - 1.0);
                    let most = (p.upper - p.lower).powi(2) / 2.0;
                    var.clamp(0.0, most)
                }))
            }
            Kind::Histogram => ScalarValue::List(int_list(s.clone())),
        })
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * self.sums.len()
    }
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
