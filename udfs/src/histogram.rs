//! `histogram(x, lower, upper, bins)`: counts of x in `bins` equal-width bins
//! over [lower, upper], closed as R's `hist()` closes them by default — (a, b],
//! the first bin [lower, b], with R's fuzz of 1e-7 bin widths at the breaks —
//! returned as a list of `bins` counts. The state is the bin counts plus the
//! counts of values below and above the range and of NULL (or NaN) values:
//! `bins + 3` integers whatever the number of rows, merged by addition.
//!
//! `lower`, `upper` and `bins` must be constants (the same at every client);
//! `bins` ≥ 1 and `lower` < `upper`, both finite, or the aggregate is refused.

use std::sync::Arc;

use crate::function_doc::{FunctionDoc, FunctionFamily};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;

const NAME: &str = "histogram";
const USAGE: &str = "histogram(x, lower, upper, bins), e.g. histogram(bmi, 15, 45, 10)";

/// `histogram(x, lower, upper, bins)`: equal-width bin counts (see the module docs).
pub fn histogram() -> AggregateUDF {
    AggregateUDF::from(Histogram {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

/// Equal-width bins over [lower, upper] with R's `hist()` breaks and fuzz.
#[derive(Debug, Clone, PartialEq)]
pub struct Bins {
    /// The breaks, `bins + 1` of them, as R's `seq(lower, upper, length.out = bins + 1)`.
    pub breaks: Vec<f64>,
    /// The breaks moved by R's fuzz: the first down, the others up, so that
    /// a value within 1e-7 bin widths above a break counts in the bin below.
    pub fuzzy: Vec<f64>,
}

/// Where a value falls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Slot {
    /// In bin i (0-based).
    Bin(usize),
    /// Below the first (fuzzy) break.
    Below,
    /// Above the last (fuzzy) break.
    Above,
    /// NaN: in no bin.
    Missing,
}

/// The most bins a histogram (or a DP histogram) may have: a site refuses
/// more before it allocates anything.
pub const MAX_BINS: i64 = 10_000;

impl Bins {
    /// The bins of `histogram(x, lower, upper, bins)`; an error names a bad argument.
    pub fn new(lower: f64, upper: f64, bins: i64) -> Result<Self> {
        if bins < 1 {
            return plan_err!("{NAME}: bins must be at least 1, got {bins}");
        }
        if bins > MAX_BINS {
            return plan_err!(
                "{NAME}: at most {MAX_BINS} bins, got {bins} (a site bounds a state's size before it allocates it)"
            );
        }
        if !(lower.is_finite() && upper.is_finite()) {
            return plan_err!("{NAME}: lower and upper must be finite, got {lower} and {upper}");
        }
        if lower >= upper {
            return plan_err!("{NAME}: lower ({lower}) must be less than upper ({upper})");
        }
        let n = bins as usize;
        // R's seq.default: c(from, from + seq_len(n - 1) * ((to - from) / n), to).
        let width = (upper - lower) / n as f64;
        let mut breaks = Vec::with_capacity(n + 1);
        breaks.push(lower);
        breaks.extend((1..n).map(|i| lower + i as f64 * width));
        breaks.push(upper);
        // R's hist.default: diddle = 1e-7 × the median bin width (more than
        // 5 breaks), the least positive width (4 or 5 breaks), or the range of
        // the data (2 or 3 breaks; here the least width, as the data's range
        // is not known in advance).
        let mut h: Vec<f64> = breaks.windows(2).map(|w| w[1] - w[0]).collect();
        let diddle = 1e-7
            * if breaks.len() > 5 {
                h.sort_by(f64::total_cmp);
                let m = h.len();
                if m % 2 == 1 {
                    h[m / 2]
                } else {
                    (h[m / 2 - 1] + h[m / 2]) / 2.0
                }
            } else {
                h.iter()
                    .copied()
                    .filter(|w| *w > 0.0)
                    .fold(f64::INFINITY, f64::min)
            };
        let fuzzy = breaks
            .iter()
            .enumerate()
            .map(|(i, b)| if i == 0 { b - diddle } else { b + diddle })
            .collect();
        Ok(Self { breaks, fuzzy })
    }

    /// The number of bins.
    pub fn len(&self) -> usize {
        self.breaks.len() - 1
    }

    /// Always false: there is at least one bin.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bin of `x`: the binary search of R's C_BinCount (right-closed,
    /// lowest break included).
    pub fn locate(&self, x: f64) -> Slot {
        if x.is_nan() {
            return Slot::Missing;
        }
        let last = self.fuzzy.len() - 1;
        if x < self.fuzzy[0] {
            return Slot::Below;
        }
        if x > self.fuzzy[last] {
            return Slot::Above;
        }
        let (mut lo, mut hi) = (0, last);
        while hi - lo >= 2 {
            let mid = (hi + lo) / 2;
            if x > self.fuzzy[mid] {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Slot::Bin(lo)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Histogram {
    signature: Signature,
}

impl AggregateUDFImpl for Histogram {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [x, lower, upper, bins] = arg_types else {
            return plan_err!("{NAME} takes four arguments: {USAGE}");
        };
        for (what, t) in [("x", x), ("lower", lower), ("upper", upper)] {
            if !(t.is_numeric() || t.is_null()) {
                return plan_err!("{NAME}: {what} is {t}, but it must be numeric; usage: {USAGE}");
            }
        }
        if !bins.is_integer() {
            return plan_err!(
                "{NAME}: bins is {bins}, but it must be a whole number; usage: {USAGE}"
            );
        }
        Ok(vec![
            DataType::Float64,
            DataType::Float64,
            DataType::Float64,
            DataType::Int64,
        ])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(counts_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "bin_counts"),
            counts_type(),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let [_, lower, upper, bins] = args.exprs else {
            return plan_err!("{NAME} takes four arguments: {USAGE}");
        };
        let lower = constant("lower", lower)?;
        let upper = constant("upper", upper)?;
        let bins = match constant("bins", bins)? {
            ScalarValue::Int64(Some(b)) => b,
            other => return plan_err!("{NAME}: bins must be a whole number, got {other}"),
        };
        let float = |what: &str, v: ScalarValue| match v {
            ScalarValue::Float64(Some(f)) => Ok(f),
            other => plan_err!("{NAME}: {what} must be a number, got {other}"),
        };
        let bins = Bins::new(float("lower", lower)?, float("upper", upper)?, bins)?;
        let counts = vec![0; bins.len() + 3];
        Ok(Box::new(HistogramAccumulator { bins, counts }))
    }
}

/// The state and result type: a list of counts.
fn counts_type() -> DataType {
    DataType::new_list(DataType::Int64, true)
}

/// A constant argument (after constant folding).
fn constant(what: &str, expr: &Arc<dyn PhysicalExpr>) -> Result<ScalarValue> {
    match expr.downcast_ref::<Literal>() {
        Some(literal) if !literal.value().is_null() => Ok(literal.value().clone()),
        Some(_) => plan_err!("{NAME}: {what} must not be NULL"),
        None => plan_err!(
            "{NAME}: {what} `{expr}` is not a constant; the bins must be the same at every client, so give constants"
        ),
    }
}

/// Bin counts, then below, above and missing.
#[derive(Debug)]
struct HistogramAccumulator {
    bins: Bins,
    counts: Vec<i64>,
}

impl HistogramAccumulator {
    fn list(&self, values: Vec<i64>) -> ScalarValue {
        let len = values.len() as i32;
        let list = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Int64, true)),
            OffsetBuffer::new(vec![0, len].into()),
            Arc::new(Int64Array::from(values)),
            None,
        );
        ScalarValue::List(Arc::new(list))
    }
}

impl Accumulator for HistogramAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let k = self.bins.len();
        let x = values[0].as_primitive::<Float64Type>();
        for v in x.iter() {
            let slot = match v {
                Some(v) => self.bins.locate(v),
                None => Slot::Missing,
            };
            let i = match slot {
                Slot::Bin(i) => i,
                Slot::Below => k,
                Slot::Above => k + 1,
                Slot::Missing => k + 2,
            };
            self.counts[i] += 1;
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            let values = lists.value(row);
            let values = values.as_primitive::<Int64Type>();
            if values.len() != self.counts.len() {
                return exec_err!(
                    "{NAME} state of {} counts, expected {}",
                    values.len(),
                    self.counts.len()
                );
            }
            for (total, v) in self.counts.iter_mut().zip(values.values()) {
                *total += v;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.list(self.counts.clone())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.list(self.counts[..self.bins.len()].to_vec()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * (self.counts.len() + 2 * self.bins.breaks.len())
    }
}

/// The documentation of `histogram`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Descriptive,
    description: "Counts of x in `bins` equal-width bins over [lower, upper], closed as R's `hist()` closes them: (a, b], the first bin [lower, b].",
    syntax: "histogram(x, lower, upper, bins)",
    arguments: &[
        ("x", "a numeric column or expression"),
        ("lower, upper", "constants, finite, lower < upper"),
        ("bins", "a constant number of bins, 1 to 10000"),
    ],
    options: &[],
    returns: "a list of `bins` counts (`list<int64>`)",
    releases: "`bins` + 3 counts: each bin's, and those below and above the range and of NULLs, whatever its rows. Under a disclosure policy the out-of-range counts are folded into the end bins, and a bin with 1 to k − 1 values is refused at the site.",
    example: "SELECT histogram(bmi, 18, 36, 6) AS bins FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_split_invariant, run_pair};

    fn counts(batches: &[datafusion::arrow::record_batch::RecordBatch]) -> Vec<i64> {
        let list = batches[0].column(0).as_list::<i32>().value(0);
        list.as_primitive::<Int64Type>().values().to_vec()
    }

    #[test]
    fn bins_are_closed_on_the_right_with_the_lowest_break_included() {
        let bins = Bins::new(0.0, 10.0, 5).unwrap();
        assert_eq!(bins.breaks, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(bins.locate(0.0), Slot::Bin(0));
        assert_eq!(bins.locate(2.0), Slot::Bin(0));
        assert_eq!(bins.locate(2.0 + 1e-9), Slot::Bin(0)); // within R's fuzz
        assert_eq!(bins.locate(2.001), Slot::Bin(1));
        assert_eq!(bins.locate(10.0), Slot::Bin(4));
        assert_eq!(bins.locate(-0.5), Slot::Below);
        assert_eq!(bins.locate(10.5), Slot::Above);
        assert_eq!(bins.locate(f64::NAN), Slot::Missing);
    }

    #[test]
    fn bad_bins_and_ranges_are_refused() {
        assert!(
            Bins::new(0.0, 1.0, 0)
                .unwrap_err()
                .to_string()
                .contains("at least 1")
        );
        assert!(Bins::new(0.0, 1.0, -3).is_err());
        let err = Bins::new(2.0, 2.0, 4).unwrap_err().to_string();
        assert!(err.contains("must be less than upper"), "{err}");
        assert!(Bins::new(3.0, 1.0, 4).is_err());
    }

    #[tokio::test]
    async fn counts_agree_with_filters() {
        // Column a lies in about [990, 1012]; bins of width 2 from 990 to 1010.
        let (got, want) = run_pair(
            "SELECT histogram(a, 990, 1010, 10) FROM t",
            "SELECT count(*) FILTER (WHERE a >= 990 AND a <= 992) FROM t",
        )
        .await;
        let c = counts(&got);
        assert_eq!(c.len(), 10);
        assert_eq!(c[0] as f64, crate::testing::float(&want, 0));
        let (_, total) = run_pair(
            "SELECT 1",
            "SELECT count(a) FILTER (WHERE a >= 990 AND a <= 1010) FROM t",
        )
        .await;
        assert_eq!(
            c.iter().sum::<i64>() as f64,
            crate::testing::float(&total, 0)
        );
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("histogram(a, 995, 1008, 7)").await;
    }
}
