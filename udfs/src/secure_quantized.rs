//! The quantized sum behind `secure_sum`, `secure_avg`, `secure_count` and
//! `secure_sum_vec`: every value is clipped to its bounds and mapped to an
//! integer, and the state is the sum of those integers and the row count,
//! both as `UInt64` added with wrap-around (mod 2^64).
//!
//! A sum mod 2^64 is what secure aggregation needs: fedsql's clients add
//! pairwise masks mod 2^64 to exactly these state columns (see
//! [`crate::catalogue::is_secure`]), the masks cancel in the merge, and the merge here is a
//! plain wrapping addition. The mapping follows TensorFlow Federated's
//! `secure_quantized_sum`:
//!
//! - Integers with `upper − lower < 2^32`: `q = clip(v) − lower`, exact; the
//!   result is `lower · count + Σq`.
//! - Other integers, and floats: `q = round_half_even((clip(v) − lower) ·
//!   (2^32 − 1) / (upper − lower))` in `[0, 2^32 − 1]`; the result is
//!   `lower · count + Σq · (upper − lower) / (2^32 − 1)` (for integers in
//!   exact 128-bit arithmetic, rounded to nearest). Each value is off by at
//!   most half a step, `(upper − lower) / (2 · (2^32 − 1))`.
//!
//! No wrap-around: each `q < 2^32`, so the true sum stays below 2^64 while
//! fewer than 2^32 rows contribute in total (all clients together), and the
//! sum mod 2^64 is the sum itself.
//!
//! Bounds must be constants of the value's type (after constant folding:
//! `-1000`, `2 * 500`, `CAST(0 AS REAL)` are fine), not NULL, finite, and
//! `lower < upper`; values outside are clipped. NULL and NaN values are
//! skipped (not counted). The checks run when an accumulator is created,
//! which fedsql does while planning a round, before any client runs.
//!
//! Why this file is over 600 lines: it holds the secure sums' one accumulator, its quantizer bounds and state layout, which read together
//! (the style's one aggregate, one file); its tests are in the same file.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, UInt64Array};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;

pub use crate::quantizer::Quantizer;
use crate::quantizer::{SUPPORTED, coerce_bound, list_item, supported};

/// Quantization levels: values map to `0 ..= 2^32 − 1`.
pub const LEVELS: u64 = u32::MAX as u64;

/// What a secure aggregate returns from the merged state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// `secure_sum(v, lower, upper)`: the sum, of the value's type.
    Sum,
    /// `secure_avg(v, lower, upper)`: sum / count as DOUBLE.
    Avg,
    /// `secure_count(v)`: the number of non-NULL values, BIGINT.
    Count,
    /// `secure_sum_vec(values, lowers, uppers)`: a list of sums.
    SumVec,
}

impl Output {
    fn has_bounds(self) -> bool {
        self != Output::Count
    }
}

/// A secure aggregate: one of [`Output`] over the quantized sum.
#[derive(Debug)]
pub struct SecureAggregate {
    name: &'static str,
    output: Output,
    signature: Signature,
}

impl SecureAggregate {
    /// The aggregate `name` returning `output`.
    pub fn new(name: &'static str, output: Output) -> Self {
        Self {
            name,
            output,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

// Aggregates are told apart by name: two with one name are the same function.
impl PartialEq for SecureAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for SecureAggregate {}

impl std::hash::Hash for SecureAggregate {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl AggregateUDFImpl for SecureAggregate {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let f = self.name;
        match self.output {
            Output::Count => match arg_types {
                [t] => Ok(vec![t.clone()]),
                _ => plan_err!("{f} takes one argument: {f}(value) counts its non-NULL values"),
            },
            Output::Sum | Output::Avg => {
                let [value, lower, upper] = arg_types else {
                    return plan_err!(
                        "{f} takes three arguments: {f}(value, lower, upper), e.g. {f}(amount, 0, 10000)"
                    );
                };
                if !supported(value) {
                    return plan_err!(
                        "{f}: the value is {value}, but {f} takes {SUPPORTED}; cast it, e.g. {f}(CAST(x AS DOUBLE), lower, upper)"
                    );
                }
                Ok(vec![
                    value.clone(),
                    coerce_bound(f, "lower", lower, value)?,
                    coerce_bound(f, "upper", upper, value)?,
                ])
            }
            Output::SumVec => {
                let [values, lower, upper] = arg_types else {
                    return plan_err!(
                        "{f} takes three lists: {f}([x, y, z], [lower_x, lower_y, lower_z], [upper_x, upper_y, upper_z])"
                    );
                };
                let Some(item) = list_item(values).filter(|t| supported(t)) else {
                    return plan_err!(
                        "{f}: the values are {values}, but {f} takes a list of {SUPPORTED}, e.g. [x, y, z]"
                    );
                };
                let bound = |which: &str, t: &DataType| -> Result<DataType> {
                    let inner = match list_item(t) {
                        Some(inner) => inner,
                        None if t.is_null() => t,
                        None => {
                            return plan_err!(
                                "{f}: the {which} bounds are {t}, but {f} takes a list of constants, e.g. [0, 0, -5]"
                            );
                        }
                    };
                    coerce_bound(f, which, inner, item)?;
                    Ok(DataType::new_list(item.clone(), true))
                };
                Ok(vec![
                    DataType::new_list(item.clone(), true),
                    bound("lower", lower)?,
                    bound("upper", upper)?,
                ])
            }
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.output {
            Output::Sum => arg_types[0].clone(),
            Output::Avg => DataType::Float64,
            Output::Count => DataType::Int64,
            Output::SumVec => arg_types[0].clone(),
        })
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        match self.output {
            Output::Count => Ok(ScalarValue::Int64(Some(0))),
            _ => ScalarValue::try_from(data_type),
        }
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let field = |part: &str, t: DataType| {
            Arc::new(Field::new(format_state_name(args.name, part), t, true))
        };
        let list = DataType::new_list(DataType::UInt64, true);
        Ok(match self.output {
            Output::Count => vec![field("count", DataType::UInt64)],
            Output::Sum | Output::Avg => vec![
                field("quantized_sum", DataType::UInt64),
                field("count", DataType::UInt64),
            ],
            Output::SumVec => vec![field("quantized_sums", list.clone()), field("counts", list)],
        })
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let f = self.name;
        let quantizers = if self.output.has_bounds() {
            let [_, lower, upper] = args.exprs else {
                return plan_err!("{f} takes three arguments: (value, lower, upper)");
            };
            let (lower, upper) = (constant(f, "lower", lower)?, constant(f, "upper", upper)?);
            match self.output {
                Output::SumVec => vec_quantizers(f, &lower, &upper)?,
                _ => vec![Quantizer::new(f, &lower, &upper)?],
            }
        } else {
            Vec::new()
        };
        let value_type = match self.output {
            Output::SumVec => list_item(args.return_field.data_type())
                .cloned()
                .unwrap_or(DataType::Float64),
            _ => args.return_field.data_type().clone(),
        };
        let components = quantizers.len().max(1);
        Ok(Box::new(SecureAccumulator {
            output: self.output,
            value_type,
            quantizers,
            sums: vec![0; components],
            counts: vec![0; components],
        }))
    }
}

/// A bound's value: it must be a constant after constant folding.
fn constant(function: &str, which: &str, expr: &Arc<dyn PhysicalExpr>) -> Result<ScalarValue> {
    match expr.downcast_ref::<Literal>() {
        Some(literal) => Ok(literal.value().clone()),
        None => plan_err!(
            "{function}: the {which} bound `{expr}` is not a constant; bounds must be the same at every client, so give constants (or expressions of constants) of the value's type"
        ),
    }
}

/// One quantizer per component of `secure_sum_vec`'s list bounds.
fn vec_quantizers(
    function: &str,
    lower: &ScalarValue,
    upper: &ScalarValue,
) -> Result<Vec<Quantizer>> {
    let elements = |s: &ScalarValue, which: &str| -> Result<Vec<ScalarValue>> {
        let ScalarValue::List(list) = s else {
            return plan_err!(
                "{function}: the {which} bounds must be a list of constants, got {s}"
            );
        };
        if list.is_null(0) {
            return plan_err!("{function}: the {which} bounds must not be NULL");
        }
        let values = list.value(0);
        (0..values.len())
            .map(|i| ScalarValue::try_from_array(&values, i))
            .collect()
    };
    let (lower, upper) = (elements(lower, "lower")?, elements(upper, "upper")?);
    if lower.len() != upper.len() || lower.is_empty() {
        return plan_err!(
            "{function}: {} lower bounds and {} upper bounds; give one lower and one upper bound per value",
            lower.len(),
            upper.len()
        );
    }
    lower
        .iter()
        .zip(&upper)
        .enumerate()
        .map(|(i, (lo, hi))| Quantizer::new(&format!("{function} (value {})", i + 1), lo, hi))
        .collect()
}

/// Quantized sums and counts, one per component.
#[derive(Debug)]
struct SecureAccumulator {
    output: Output,
    /// The value's type (the list's element type for `secure_sum_vec`).
    value_type: DataType,
    /// One per component; empty for `secure_count`.
    quantizers: Vec<Quantizer>,
    sums: Vec<u64>,
    counts: Vec<u64>,
}

impl SecureAccumulator {
    fn update_vec(&mut self, values: &ArrayRef) -> Result<()> {
        let k = self.quantizers.len();
        let values = datafusion::arrow::compute::cast(
            values,
            &DataType::new_list(self.value_type.clone(), true),
        )?;
        let lists = values.as_list::<i32>();
        // Rows whose list has k values; each component is one strided slice.
        let offsets = lists.value_offsets();
        let mut take: Vec<Vec<u32>> = vec![Vec::new(); k];
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            if end - start != k {
                return exec_err!(
                    "secure_sum_vec: a row has {} values but the bounds have {k}",
                    end - start
                );
            }
            for (component, indices) in take.iter_mut().enumerate() {
                indices.push((start + component) as u32);
            }
        }
        let items = lists.values();
        for (component, indices) in take.into_iter().enumerate() {
            let picked = datafusion::arrow::compute::take(
                items.as_ref(),
                &datafusion::arrow::array::UInt32Array::from(indices),
                None,
            )?;
            self.quantizers[component].add(
                picked.as_ref(),
                &mut self.sums[component],
                &mut self.counts[component],
            )?;
        }
        Ok(())
    }
}

fn u64_list(values: &[u64]) -> ScalarValue {
    let array = ListArray::new(
        Arc::new(Field::new_list_field(DataType::UInt64, true)),
        OffsetBuffer::from_lengths([values.len()]),
        Arc::new(UInt64Array::from(values.to_vec())),
        None,
    );
    ScalarValue::List(Arc::new(array))
}

/// Adds every row of a list<uint64> state column into `into`, mod 2^64.
fn merge_lists(column: &ArrayRef, into: &mut [u64]) -> Result<()> {
    let lists = column.as_list::<i32>();
    for row in 0..lists.len() {
        if lists.is_null(row) {
            continue;
        }
        let part = lists.value(row);
        let part = part.as_primitive::<UInt64Type>();
        if part.len() != into.len() {
            return exec_err!(
                "secure_sum_vec: a state of {} components where the bounds have {}",
                part.len(),
                into.len()
            );
        }
        for (total, v) in into.iter_mut().zip(part.values()) {
            *total = total.wrapping_add(*v);
        }
    }
    Ok(())
}

impl Accumulator for SecureAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let value = &values[0];
        match self.output {
            Output::Count => {
                self.counts[0] += (value.len() - value.logical_null_count()) as u64;
            }
            Output::SumVec => self.update_vec(value)?,
            Output::Sum | Output::Avg => {
                self.quantizers[0].add(value.as_ref(), &mut self.sums[0], &mut self.counts[0])?
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        // Masked states are uniformly random: only wrap-around addition is right.
        let wrapping_sum = |a: &ArrayRef| {
            a.as_primitive::<UInt64Type>()
                .iter()
                .flatten()
                .fold(0u64, u64::wrapping_add)
        };
        match (self.output, states) {
            (Output::Count, [count]) => {
                self.counts[0] = self.counts[0].wrapping_add(wrapping_sum(count))
            }
            (Output::Sum | Output::Avg, [sum, count]) => {
                self.sums[0] = self.sums[0].wrapping_add(wrapping_sum(sum));
                self.counts[0] = self.counts[0].wrapping_add(wrapping_sum(count));
            }
            (Output::SumVec, [sums, counts]) => {
                merge_lists(sums, &mut self.sums)?;
                merge_lists(counts, &mut self.counts)?;
            }
            _ => {
                return exec_err!(
                    "{:?}: unexpected state of {} columns",
                    self.output,
                    states.len()
                );
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(match self.output {
            Output::Count => vec![ScalarValue::UInt64(Some(self.counts[0]))],
            Output::Sum | Output::Avg => vec![
                ScalarValue::UInt64(Some(self.sums[0])),
                ScalarValue::UInt64(Some(self.counts[0])),
            ],
            Output::SumVec => vec![u64_list(&self.sums), u64_list(&self.counts)],
        })
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        match self.output {
            Output::Count => Ok(ScalarValue::Int64(Some(self.counts[0] as i64))),
            Output::Sum => {
                self.quantizers[0].decode(self.sums[0], self.counts[0], &self.value_type)
            }
            Output::Avg => Ok(ScalarValue::Float64(
                self.quantizers[0]
                    .decode_f64(self.sums[0], self.counts[0])
                    .map(|total| total / self.counts[0] as f64),
            )),
            Output::SumVec => {
                let sums = self
                    .quantizers
                    .iter()
                    .zip(self.sums.iter().zip(&self.counts))
                    .map(|(q, (&s, &n))| q.decode(s, n, &self.value_type))
                    .collect::<Result<Vec<_>>>()?;
                Ok(ScalarValue::List(ScalarValue::new_list_nullable(
                    &sums,
                    &self.value_type,
                )))
            }
        }
    }

    fn size(&self) -> usize {
        size_of_val(self) + 16 * self.sums.len() + size_of_val(self.quantizers.as_slice())
    }
}

/// Independent reference for tests: the clipped values' exact sum.
#[cfg(test)]
pub(crate) fn clipped_sum(values: &[f64], lower: f64, upper: f64) -> f64 {
    values.iter().map(|v| v.clamp(lower, upper)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int64Array};

    fn run(q: Quantizer, values: ArrayRef, t: &DataType) -> ScalarValue {
        let (mut s, mut n) = (0, 0);
        q.add(values.as_ref(), &mut s, &mut n).unwrap();
        q.decode(s, n, t).unwrap()
    }

    #[test]
    fn exact_integers_are_exact_and_clipped() {
        let q = Quantizer::new(
            "t",
            &ScalarValue::Int64(Some(-5)),
            &ScalarValue::Int64(Some(100)),
        )
        .unwrap();
        assert!(matches!(q, Quantizer::ExactInt { .. }));
        let values: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(-7),
            Some(3),
            None,
            Some(250),
            Some(99),
        ]));
        // -5 + 3 + 100 + 99
        assert_eq!(
            run(q, values, &DataType::Int64),
            ScalarValue::Int64(Some(197))
        );
    }

    #[test]
    fn wide_integer_ranges_round_to_nearest_step() {
        let q = Quantizer::new(
            "t",
            &ScalarValue::Int64(Some(i64::MIN)),
            &ScalarValue::Int64(Some(i64::MAX)),
        )
        .unwrap();
        assert!(matches!(q, Quantizer::ScaledInt { .. }));
        let raw = [i64::MIN, -123_456_789_012, 0, 987_654_321_098_765, i64::MAX];
        let values: ArrayRef = Arc::new(Int64Array::from(raw.to_vec()));
        let ScalarValue::Int64(Some(got)) = run(q, values, &DataType::Int64) else {
            panic!()
        };
        let want: i128 = raw.iter().map(|&v| v as i128).sum();
        // Half a step per value, plus the final rounding.
        let bound = raw.len() as f64 * q.step() / 2.0 + 1.0;
        assert!(
            ((got as i128 - want) as f64).abs() <= bound,
            "{got} vs {want}"
        );
    }

    #[test]
    fn float_error_is_at_most_half_a_step_per_value() {
        let q = Quantizer::new(
            "t",
            &ScalarValue::Float64(Some(-1000.0)),
            &ScalarValue::Float64(Some(1000.0)),
        )
        .unwrap();
        let raw: Vec<f64> = (0..1000)
            .map(|i| ((i as f64) * 0.7311).sin() * 1300.0)
            .collect();
        let values: ArrayRef = Arc::new(Float64Array::from(raw.clone()));
        let ScalarValue::Float64(Some(got)) = run(q, values, &DataType::Float64) else {
            panic!()
        };
        let want = clipped_sum(&raw, -1000.0, 1000.0);
        let bound = raw.len() as f64 * q.step() / 2.0 * (1.0 + 1e-9) + 1e-9 * want.abs();
        assert!(
            (got - want).abs() <= bound,
            "{got} vs {want}, bound {bound}"
        );
        assert!((got - want).abs() <= 1e-5 * raw.len() as f64);
    }

    #[test]
    fn quantization_rounds_to_nearest_ties_to_even() {
        // A range of 2^32 − 1 makes one step exactly 1.
        let q = Quantizer::Float {
            lower: 0.0,
            upper: LEVELS as f64,
        };
        for (v, want) in [
            (2.4, 2u64),
            (2.5, 2),
            (2.6, 3),
            (3.5, 4),
            (0.0, 0),
            (-7.0, 0),
        ] {
            let (mut s, mut n) = (0, 0);
            let values: ArrayRef = Arc::new(Float64Array::from(vec![v]));
            q.add(values.as_ref(), &mut s, &mut n).unwrap();
            assert_eq!((s, n), (want, 1), "{v}");
        }
        // NaN is skipped like NULL; the upper bound maps to the last level.
        let values: ArrayRef = Arc::new(Float64Array::from(vec![f64::NAN, 1e300]));
        let (mut s, mut n) = (0, 0);
        q.add(values.as_ref(), &mut s, &mut n).unwrap();
        assert_eq!((s, n), (LEVELS, 1));
    }

    #[test]
    fn bad_bounds_are_refused() {
        let i = |v: Option<i64>| ScalarValue::Int64(v);
        for (lo, hi, says) in [
            (i(Some(5)), i(Some(5)), "not below"),
            (i(Some(6)), i(Some(5)), "not below"),
            (i(None), i(Some(5)), "must not be NULL"),
        ] {
            let e = Quantizer::new("secure_sum", &lo, &hi)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{e}");
        }
        let e = Quantizer::new(
            "secure_sum",
            &ScalarValue::Float64(Some(f64::NEG_INFINITY)),
            &ScalarValue::Float64(Some(1.0)),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("finite"), "{e}");
        for (lo, hi) in [(0.0, 1e-300), (0.0, f64::MIN_POSITIVE), (1.0, 1.0 + 1e-16)] {
            let e = Quantizer::new(
                "secure_sum",
                &ScalarValue::Float64(Some(lo)),
                &ScalarValue::Float64(Some(hi)),
            )
            .map(|q| format!("{q:?}"))
            .unwrap_or_else(|e| e.to_string());
            assert!(
                e.contains("too close together") || e.contains("not below"),
                "{lo}, {hi}: {e}"
            );
        }
    }

    #[test]
    fn the_sum_of_states_wraps_like_the_masks() {
        let mut acc = SecureAccumulator {
            output: Output::Sum,
            value_type: DataType::Int64,
            quantizers: vec![Quantizer::ExactInt {
                lower: 0,
                upper: 10,
            }],
            sums: vec![0],
            counts: vec![0],
        };
        // Two "masked" states whose masks (±m) cancel mod 2^64.
        let m = 0xdead_beef_1234_5678u64;
        let sums: ArrayRef = Arc::new(UInt64Array::from(vec![
            7u64.wrapping_add(m),
            5u64.wrapping_sub(m),
        ]));
        let counts: ArrayRef = Arc::new(UInt64Array::from(vec![
            2u64.wrapping_sub(m),
            1u64.wrapping_add(m),
        ]));
        acc.merge_batch(&[sums, counts]).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int64(Some(12)));
    }
}
