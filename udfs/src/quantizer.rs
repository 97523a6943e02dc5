//! How one value of a secure aggregate becomes an integer: the
//! [`Quantizer`] of `secure_sum` and friends (see [`crate::secure_quantized`]
//! for the scheme and its error bound), and the checks of the bounds and
//! value types it is built from.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};

use crate::secure_quantized::LEVELS;

/// How the values of one component map to integers `q`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Quantizer {
    /// Integers with `upper − lower < 2^32`: `q = clip(v) − lower`.
    ExactInt { lower: i64, upper: i64 },
    /// Integers with a wider range: 32-bit quantization, mapped back exactly.
    ScaledInt { lower: i64, upper: i64 },
    /// Floats: 32-bit quantization.
    Float { lower: f64, upper: f64 },
}

impl Quantizer {
    /// The quantizer for bounds given as scalars of the value's type.
    pub fn new(function: &str, lower: &ScalarValue, upper: &ScalarValue) -> Result<Self> {
        if lower.is_null() || upper.is_null() {
            return plan_err!(
                "{function}: the bounds must not be NULL (got lower {lower}, upper {upper}); give two constants with lower < upper"
            );
        }
        let as_int = |s: &ScalarValue| match s {
            ScalarValue::Int32(Some(v)) => Some(*v as i64),
            ScalarValue::Int64(Some(v)) => Some(*v),
            _ => None,
        };
        let as_float = |s: &ScalarValue| match s {
            ScalarValue::Float32(Some(v)) => Some(*v as f64),
            ScalarValue::Float64(Some(v)) => Some(*v),
            _ => None,
        };
        if let (Some(lo), Some(hi)) = (as_int(lower), as_int(upper)) {
            if lo >= hi {
                return plan_err!(
                    "{function}: lower bound {lo} is not below upper bound {hi}; give lower < upper"
                );
            }
            let range = hi as i128 - lo as i128;
            return Ok(if range < 1i128 << 32 {
                Quantizer::ExactInt {
                    lower: lo,
                    upper: hi,
                }
            } else {
                Quantizer::ScaledInt {
                    lower: lo,
                    upper: hi,
                }
            });
        }
        if let (Some(lo), Some(hi)) = (as_float(lower), as_float(upper)) {
            if !lo.is_finite() || !hi.is_finite() || !(hi - lo).is_finite() {
                return plan_err!(
                    "{function}: the bounds must be finite numbers with a finite range (got {lo} and {hi})"
                );
            }
            if lo >= hi {
                return plan_err!(
                    "{function}: lower bound {lo} is not below upper bound {hi}; give lower < upper"
                );
            }
            // A step below the normal floats loses the precision that
            // keeps every value's level within [0, 2^32 − 1] and its
            // total exact to one step.
            if !((hi - lo) / LEVELS as f64).is_normal() {
                return plan_err!(
                    "{function}: bounds {lo} and {hi} are too close together for 2^32 steps; give bounds further apart (or scale the value)"
                );
            }
            return Ok(Quantizer::Float {
                lower: lo,
                upper: hi,
            });
        }
        plan_err!(
            "{function}: bounds {lower} and {upper} are not of the value's type (INT, BIGINT, REAL or DOUBLE)"
        )
    }

    /// Adds the quantized non-NULL values of `values` (of the value's
    /// type) to `sum` and their number to `count`.
    pub fn add(&self, values: &dyn Array, sum: &mut u64, count: &mut u64) -> Result<()> {
        match *self {
            Quantizer::ExactInt { lower, upper } => {
                let values = cast_to::<Int64Type>(values, &DataType::Int64)?;
                let (mut s, mut n) = (0u64, 0u64);
                for v in values.iter().flatten() {
                    s = s.wrapping_add((v.clamp(lower, upper) as i128 - lower as i128) as u64);
                    n += 1;
                }
                *sum = sum.wrapping_add(s);
                *count += n;
            }
            Quantizer::ScaledInt { lower, upper } => {
                let range = (upper as i128 - lower as i128) as f64;
                let values = cast_to::<Int64Type>(values, &DataType::Int64)?;
                let (mut s, mut n) = (0u64, 0u64);
                for v in values.iter().flatten() {
                    let offset = (v.clamp(lower, upper) as i128 - lower as i128) as f64;
                    s = s.wrapping_add(quantize(offset, range));
                    n += 1;
                }
                *sum = sum.wrapping_add(s);
                *count += n;
            }
            Quantizer::Float { lower, upper } => {
                let range = upper - lower;
                let values = cast_to::<Float64Type>(values, &DataType::Float64)?;
                let (mut s, mut n) = (0u64, 0u64);
                for v in values.iter().flatten().filter(|v| !v.is_nan()) {
                    s = s.wrapping_add(quantize(v.clamp(lower, upper) - lower, range));
                    n += 1;
                }
                *sum = sum.wrapping_add(s);
                *count += n;
            }
        }
        Ok(())
    }

    /// The sum of `count` integer values whose quantized sum is `sum`.
    fn int_total(&self, sum: u64, count: u64) -> i128 {
        match *self {
            Quantizer::ExactInt { lower, .. } => lower as i128 * count as i128 + sum as i128,
            Quantizer::ScaledInt { lower, upper } => {
                // Σq · range / (2^32 − 1), rounded to nearest, in exact
                // integer arithmetic (Σq < 2^64 and range < 2^64).
                let range = (upper as i128 - lower as i128) as u128;
                let levels = LEVELS as u128;
                let rounded = (sum as u128 * range + levels / 2) / levels;
                lower as i128 * count as i128 + rounded as i128
            }
            Quantizer::Float { lower, upper } => self.float_total(sum, count, lower, upper) as i128,
        }
    }

    fn float_total(&self, sum: u64, count: u64, lower: f64, upper: f64) -> f64 {
        lower * count as f64 + sum as f64 * ((upper - lower) / LEVELS as f64)
    }

    /// The sum of `count` values whose quantized sum is `sum`, as a scalar
    /// of `data_type` (the value's type); NULL when no value contributed.
    pub fn decode(&self, sum: u64, count: u64, data_type: &DataType) -> Result<ScalarValue> {
        if count == 0 {
            return ScalarValue::try_from(data_type);
        }
        if let Quantizer::Float { lower, upper } = *self {
            let total = self.float_total(sum, count, lower, upper);
            return Ok(match data_type {
                DataType::Float32 => ScalarValue::Float32(Some(total as f32)),
                _ => ScalarValue::Float64(Some(total)),
            });
        }
        let total = self.int_total(sum, count);
        match data_type {
            DataType::Int32 => match i32::try_from(total) {
                Ok(v) => Ok(ScalarValue::Int32(Some(v))),
                Err(_) => {
                    exec_err!("secure sum {total} does not fit INT; cast the value to BIGINT")
                }
            },
            _ => match i64::try_from(total) {
                Ok(v) => Ok(ScalarValue::Int64(Some(v))),
                Err(_) => exec_err!("secure sum {total} does not fit BIGINT"),
            },
        }
    }

    /// The sum as a DOUBLE (for averages); `None` when no value contributed.
    pub fn decode_f64(&self, sum: u64, count: u64) -> Option<f64> {
        (count > 0).then(|| match *self {
            Quantizer::Float { lower, upper } => self.float_total(sum, count, lower, upper),
            _ => self.int_total(sum, count) as f64,
        })
    }

    /// The value of one quantization step (1 for exact integers).
    pub fn step(&self) -> f64 {
        match *self {
            Quantizer::ExactInt { .. } => 1.0,
            Quantizer::ScaledInt { lower, upper } => {
                (upper as i128 - lower as i128) as f64 / LEVELS as f64
            }
            Quantizer::Float { lower, upper } => (upper - lower) / LEVELS as f64,
        }
    }
}

/// `round_half_even(offset · (2^32 − 1) / range)`, with `0 ≤ offset ≤ range`.
pub(crate) fn quantize(offset: f64, range: f64) -> u64 {
    let q = (offset * LEVELS as f64 / range).round_ties_even();
    q.clamp(0.0, LEVELS as f64) as u64
}

pub(crate) fn cast_to<T: datafusion::arrow::datatypes::ArrowPrimitiveType>(
    values: &dyn Array,
    to: &DataType,
) -> Result<datafusion::arrow::array::PrimitiveArray<T>> {
    let cast = datafusion::arrow::compute::cast(
        &datafusion::arrow::array::make_array(values.to_data()),
        to,
    )?;
    Ok(cast.as_primitive::<T>().clone())
}

/// The value types a secure aggregate takes.
pub(crate) fn supported(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int32 | DataType::Int64 | DataType::Float32 | DataType::Float64
    )
}

pub(crate) const SUPPORTED: &str = "INT, BIGINT, REAL or DOUBLE";

/// The element type of a list type, if it is one.
pub(crate) fn list_item(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

/// A bound's type coerced to the value's type `value`, or why it cannot be.
pub(crate) fn coerce_bound(
    function: &str,
    which: &str,
    bound: &DataType,
    value: &DataType,
) -> Result<DataType> {
    let ok = bound.is_null()
        || if value.is_integer() {
            bound.is_integer()
        } else {
            bound.is_numeric()
        };
    if ok {
        Ok(value.clone())
    } else {
        plan_err!(
            "{function}: the {which} bound is {bound}, but the value is {value}; give a constant of the value's type (an integer value takes integer bounds)"
        )
    }
}
