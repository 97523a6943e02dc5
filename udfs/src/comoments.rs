//! Centered co-moments of p variables: the mergeable state behind
//! covariance and correlation matrices and the normal equations.
//!
//! The state is `n`, the mean vector `mean` (p) and the centered
//! cross-product matrix `m2 = Σ (z − mean)(z − mean)ᵀ` (p × p): p² + p + 1
//! numbers whatever the number of rows. Rows with a NULL in any variable are
//! dropped (listwise deletion).
//!
//! Precision: a record batch is centered on its own mean before its cross
//! products are taken (two passes over the batch, the products by one GEMM
//! over the batch's columns), and states are merged with the pairwise update
//! of Chan, Golub & LeVeque (1979):
//! `m2 = m2_a + m2_b + δδᵀ · n_a n_b / n` with `δ = mean_b − mean_a`.
//! Raw sums of squares would lose about log10(cond) digits more; this is what
//! lets ill-conditioned designs such as the Longley data keep their digits.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, FixedSizeListArray, Float64Array, UInt64Array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::{filter, sum};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type, UInt64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::utils::format_state_name;

use crate::gram::add_centered_gram;
use ndarray::{Array1, Array2, ArrayView2, Axis};

/// Centered co-moments of p variables.
#[derive(Debug, Clone, PartialEq)]
pub struct CoMoments {
    /// Rows seen (after listwise deletion).
    pub n: u64,
    /// Means of the p variables.
    pub mean: Array1<f64>,
    /// Centered cross products Σ (z − mean)(z − mean)ᵀ, p × p, symmetric.
    pub m2: Array2<f64>,
}

impl CoMoments {
    /// The empty state of p variables.
    pub fn new(p: usize) -> Self {
        Self {
            n: 0,
            mean: Array1::zeros(p),
            m2: Array2::zeros((p, p)),
        }
    }

    /// The number of variables.
    pub fn p(&self) -> usize {
        self.mean.len()
    }

    /// Adds a batch of rows given as p Float64 columns of equal length.
    pub fn update(&mut self, columns: &[ArrayRef]) -> Result<()> {
        if columns.len() != self.p() {
            return exec_err!("expected {} columns, got {}", self.p(), columns.len());
        }
        let columns = complete_rows(columns)?;
        let m = columns.first().map_or(0, |c| c.len());
        if m == 0 {
            return Ok(());
        }
        // Two passes: the means, then the centered co-moments block by
        // block (no copy of the batch).
        let slices: Vec<&[f64]> = columns
            .iter()
            .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
            .collect();
        let mean: Vec<f64> = columns
            .iter()
            .map(|c| sum(c.as_primitive::<Float64Type>()).unwrap_or(0.0) / m as f64)
            .collect();
        let mut m2 = vec![0.0; self.p() * self.p()];
        add_centered_gram(&mut m2, &slices, &mean);
        self.merge(&Self {
            n: m as u64,
            mean: Array1::from(mean),
            m2: Array2::from_shape_vec((self.p(), self.p()), m2).expect("p × p values"),
        });
        Ok(())
    }

    /// The co-moments of a complete m × p block of rows (two-pass, GEMM).
    pub fn of_rows(z: ArrayView2<f64>) -> Self {
        let m = z.nrows();
        let mean = z.mean_axis(Axis(0)).expect("at least one row");
        let centered = &z - &mean.view().insert_axis(Axis(0));
        let m2 = centered.t().dot(&centered);
        Self {
            n: m as u64,
            mean,
            m2,
        }
    }

    /// Merges another state into this one (Chan et al.'s pairwise update).
    pub fn merge(&mut self, other: &CoMoments) {
        if other.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = other.clone();
            return;
        }
        let (na, nb) = (self.n as f64, other.n as f64);
        let n = na + nb;
        let delta = &other.mean - &self.mean;
        let outer = delta
            .view()
            .insert_axis(Axis(1))
            .dot(&delta.view().insert_axis(Axis(0)));
        self.m2 = &self.m2 + &other.m2 + outer * (na * nb / n);
        self.mean = &self.mean + &delta * (nb / n);
        self.n += other.n;
    }

    /// Sample covariance matrix (n − 1 denominator); `None` below two rows.
    pub fn covariance(&self) -> Option<Array2<f64>> {
        (self.n >= 2).then(|| &self.m2 / (self.n as f64 - 1.0))
    }

    /// Correlation matrix; NaN where a variable is constant; `None` below two rows.
    pub fn correlation(&self) -> Option<Array2<f64>> {
        if self.n < 2 {
            return None;
        }
        let sd = self.m2.diag().mapv(f64::sqrt);
        let mut r = self.m2.clone();
        for ((i, j), v) in r.indexed_iter_mut() {
            *v = if i == j && sd[i] > 0.0 {
                1.0
            } else {
                *v / (sd[i] * sd[j])
            };
        }
        Some(r)
    }

    /// The Arrow state fields of a state of p variables.
    pub fn state_fields(name: &str, p: usize) -> Vec<FieldRef> {
        let item = Arc::new(Field::new_list_field(DataType::Float64, true));
        vec![
            Arc::new(Field::new(
                format_state_name(name, "n"),
                DataType::UInt64,
                true,
            )),
            Arc::new(Field::new(
                format_state_name(name, "mean"),
                DataType::FixedSizeList(Arc::clone(&item), p as i32),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(name, "m2"),
                DataType::FixedSizeList(item, (p * p) as i32),
                true,
            )),
        ]
    }

    /// The state as Arrow scalars, in the order of [`Self::state_fields`].
    pub fn to_state(&self) -> Vec<ScalarValue> {
        let list = |values: Vec<f64>| {
            let len = values.len() as i32;
            let item = Arc::new(Field::new_list_field(DataType::Float64, true));
            let array =
                FixedSizeListArray::new(item, len, Arc::new(Float64Array::from(values)), None);
            ScalarValue::FixedSizeList(Arc::new(array))
        };
        vec![
            ScalarValue::UInt64(Some(self.n)),
            list(self.mean.to_vec()),
            list(self.m2.iter().copied().collect()),
        ]
    }

    /// Merges every state row of a state batch into this state.
    pub fn merge_states(&mut self, states: &[ArrayRef]) -> Result<()> {
        let [n, mean, m2] = states else {
            return exec_err!("co-moment state has 3 columns, got {}", states.len());
        };
        let n = n.as_primitive::<UInt64Type>();
        let mean = mean.as_fixed_size_list();
        let m2 = m2.as_fixed_size_list();
        let p = self.p();
        for row in 0..n.len() {
            if n.is_null(row) || n.value(row) == 0 {
                continue;
            }
            let means = mean.value(row);
            let products = m2.value(row);
            let (means, products) = (
                means.as_primitive::<Float64Type>(),
                products.as_primitive::<Float64Type>(),
            );
            if means.len() != p || products.len() != p * p {
                return exec_err!("co-moment state of {} variables, expected {p}", means.len());
            }
            let other = CoMoments {
                n: n.value(row),
                mean: Array1::from_vec(means.values().to_vec()),
                m2: Array2::from_shape_vec((p, p), products.values().to_vec()).expect("p × p"),
            };
            self.merge(&other);
        }
        Ok(())
    }

    /// Bytes of state per group: n, p means and p² cross products.
    pub fn size_bytes(p: usize) -> usize {
        8 * (1 + p + p * p)
    }
}

/// The rows of `columns` with no NULL in any column, as Float64 arrays.
pub(crate) fn complete_rows(columns: &[ArrayRef]) -> Result<Vec<ArrayRef>> {
    let columns = columns
        .iter()
        .map(|c| match c.data_type() {
            // Already doubles: shared as they are (a cast would rebuild the array).
            DataType::Float64 => Ok(Arc::clone(c)),
            _ => datafusion::arrow::compute::cast(c, &DataType::Float64),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let nulls = columns.iter().fold(None::<NullBuffer>, |acc, c| {
        NullBuffer::union(acc.as_ref(), c.logical_nulls().as_ref())
    });
    match nulls {
        Some(valid) if valid.null_count() > 0 => {
            let keep = datafusion::arrow::array::BooleanArray::new(valid.inner().clone(), None);
            Ok(columns
                .iter()
                .map(|c| filter(c, &keep))
                .collect::<Result<Vec<_>, _>>()?)
        }
        _ => Ok(columns),
    }
}

/// The count column of a state batch, for callers that only need `n`.
pub fn state_counts(states: &[ArrayRef]) -> Option<&UInt64Array> {
    states.first().map(|a| a.as_primitive::<UInt64Type>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn columns(rows: &[[f64; 3]]) -> Vec<ArrayRef> {
        (0..3)
            .map(|j| {
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r[j]).collect::<Vec<_>>(),
                )) as ArrayRef
            })
            .collect()
    }

    fn rows() -> Vec<[f64; 3]> {
        (0..40)
            .map(|i| {
                let x = i as f64;
                [1e6 + x, (x * 0.37).sin() * 1e-3, x * x]
            })
            .collect()
    }

    fn assert_close(a: &CoMoments, b: &CoMoments) {
        assert_eq!(a.n, b.n);
        for (x, y) in a.mean.iter().zip(&b.mean).chain(a.m2.iter().zip(&b.m2)) {
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1e-12),
                "{x} vs {y}"
            );
        }
    }

    #[test]
    fn merge_of_split_states_equals_one_pass() {
        let all = rows();
        let mut one = CoMoments::new(3);
        one.update(&columns(&all)).unwrap();
        for cut in [0, 1, 2, 17, 39, 40] {
            let (a, b) = all.split_at(cut);
            let mut left = CoMoments::new(3);
            left.update(&columns(a)).unwrap();
            let mut right = CoMoments::new(3);
            right.update(&columns(b)).unwrap();
            // Through the Arrow state, as between client and coordinator.
            let state: Vec<ArrayRef> = right
                .to_state()
                .iter()
                .map(|s| s.to_array().unwrap())
                .collect();
            left.merge_states(&state).unwrap();
            assert_close(&left, &one);
        }
    }

    #[test]
    fn matches_the_textbook_two_pass_formula() {
        let all = rows();
        let mut state = CoMoments::new(3);
        state.update(&columns(&all)).unwrap();
        let n = all.len() as f64;
        let mean: Vec<f64> = (0..3)
            .map(|j| all.iter().map(|r| r[j]).sum::<f64>() / n)
            .collect();
        for i in 0..3 {
            for j in 0..3 {
                let m2: f64 = all
                    .iter()
                    .map(|r| (r[i] - mean[i]) * (r[j] - mean[j]))
                    .sum();
                assert!(
                    (state.m2[[i, j]] - m2).abs() <= 1e-9 * m2.abs().max(1e-9),
                    "{i},{j}"
                );
            }
        }
    }

    #[test]
    fn argument_names_come_from_the_call() {
        let args = split_call_arguments(
            "normal_equations(clinic.systolic,clinic.age * Int64(2),f(a, b),'x,y')",
        );
        assert_eq!(
            args,
            [
                "clinic.systolic",
                "clinic.age * Int64(2)",
                "f(a, b)",
                "'x,y'"
            ]
        );
        assert_eq!(strip_qualifier("clinic.systolic"), "systolic");
        assert_eq!(
            strip_qualifier("clinic.age * Int64(2)"),
            "clinic.age * Int64(2)"
        );
        assert_eq!(strip_qualifier("Float64(1.5)"), "Float64(1.5)");
    }

    #[test]
    fn rows_with_a_null_are_dropped() {
        let x: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(1.0),
            None,
            Some(3.0),
            Some(5.0),
        ]));
        let y: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(2.0),
            Some(9.0),
            None,
            Some(6.0),
        ]));
        let mut state = CoMoments::new(2);
        state.update(&[x, y]).unwrap();
        assert_eq!(state.n, 2);
        assert_eq!(state.mean, array![3.0, 4.0]);
        assert_eq!(state.m2, array![[8.0, 8.0], [8.0, 8.0]]);
    }
}

/// How an aggregate over co-moments turns the merged state into its result.
pub type Finish = fn(&CoMoments, &[String]) -> Result<ScalarValue>;

/// An aggregate over the co-moments of its numeric arguments. The aggregates
/// of this kind differ only in their name, result type and [`Finish`]; each
/// is defined in its own file by a constructor.
#[derive(Debug)]
pub struct CoMomentsAggregate {
    name: &'static str,
    return_type: DataType,
    /// Fewest arguments, with what they are for (for the error).
    min_args: (usize, &'static str),
    finish: Finish,
    signature: datafusion::logical_expr::Signature,
}

impl CoMomentsAggregate {
    /// The aggregate `name`, returning `return_type` made by `finish`.
    pub fn new(name: &'static str, return_type: DataType, finish: Finish) -> Self {
        Self {
            name,
            return_type,
            min_args: (1, "at least one numeric argument"),
            finish,
            signature: numeric_signature(),
        }
    }

    /// The same, needing at least `n` arguments (`usage` says which).
    pub fn with_min_args(mut self, n: usize, usage: &'static str) -> Self {
        self.min_args = (n, usage);
        self
    }
}

// Aggregates are told apart by name: two with one name are the same function.
impl PartialEq for CoMomentsAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CoMomentsAggregate {}

impl std::hash::Hash for CoMomentsAggregate {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl datafusion::logical_expr::AggregateUDFImpl for CoMomentsAggregate {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let (min, usage) = self.min_args;
        if arg_types.len() < min {
            return datafusion::common::plan_err!("{} needs {usage}", self.name);
        }
        Ok(self.return_type.clone())
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        coerce_to_float(self.name, arg_types)
    }

    fn state_fields(
        &self,
        args: datafusion::logical_expr::function::StateFieldsArgs,
    ) -> Result<Vec<FieldRef>> {
        Ok(CoMoments::state_fields(args.name, args.input_fields.len()))
    }

    fn accumulator(
        &self,
        args: datafusion::logical_expr::function::AccumulatorArgs,
    ) -> Result<Box<dyn datafusion::logical_expr::Accumulator>> {
        Ok(Box::new(CoMomentsAccumulator::new(
            argument_names(&args),
            self.finish,
        )))
    }
}

/// The accumulator shared by every co-moment aggregate: it differs between
/// them only in how the merged state is finished.
#[derive(Debug)]
pub struct CoMomentsAccumulator {
    state: CoMoments,
    names: Vec<String>,
    finish: Finish,
}

impl CoMomentsAccumulator {
    /// An accumulator over variables named `names`.
    pub fn new(names: Vec<String>, finish: Finish) -> Self {
        Self {
            state: CoMoments::new(names.len()),
            names,
            finish,
        }
    }
}

impl datafusion::logical_expr::Accumulator for CoMomentsAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.state.update(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.state.merge_states(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(self.state.to_state())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        (self.finish)(&self.state, &self.names)
    }

    fn size(&self) -> usize {
        size_of_val(self)
            + CoMoments::size_bytes(self.state.p())
            + self.names.iter().map(|n| n.len()).sum::<usize>()
    }
}

/// Display names of an aggregate's arguments, as the user wrote them.
///
/// They are read from the aggregate's own name (`f(clinic.age, bmi * 2)`),
/// because the physical argument expressions may have been renamed by the
/// optimizer (a shared `CAST(age AS DOUBLE)` becomes `__common_expr_1`).
/// Table qualifiers are dropped: `clinic.age` shows as `age`.
pub fn argument_names(args: &datafusion::logical_expr::function::AccumulatorArgs) -> Vec<String> {
    let parsed = split_call_arguments(args.name);
    if parsed.len() == args.exprs.len() {
        return parsed.iter().map(|a| strip_qualifier(a)).collect();
    }
    args.expr_fields.iter().map(|f| f.name().clone()).collect()
}

/// The top-level, comma-separated arguments of `name(a, b(c, d), 'x,y')`.
fn split_call_arguments(call: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (call.find('('), call.rfind(')')) else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let (mut depth, mut quoted, mut current) = (0usize, false, String::new());
    for c in call[open + 1..close].chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' | '[' if !quoted => depth += 1,
            ')' | ']' if !quoted => depth = depth.saturating_sub(1),
            ',' if !quoted && depth == 0 => {
                args.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    args.push(current.trim().to_string());
    args
}

/// `clinic.age` → `age`; anything that is not a plain qualified column stays.
fn strip_qualifier(arg: &str) -> String {
    match arg.rsplit_once('.') {
        Some((table, column))
            if !table.is_empty()
                && table
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                && column.chars().all(|c| c.is_alphanumeric() || c == '_')
                && !column.chars().next().is_some_and(|c| c.is_ascii_digit()) =>
        {
            column.to_string()
        }
        _ => arg.to_string(),
    }
}

/// The signature of the co-moment aggregates: any number of numeric arguments.
pub fn numeric_signature() -> datafusion::logical_expr::Signature {
    datafusion::logical_expr::Signature::user_defined(
        datafusion::logical_expr::Volatility::Immutable,
    )
}

/// Coerces every argument to Float64, refusing non-numeric ones by position.
pub fn coerce_to_float(function: &str, arg_types: &[DataType]) -> Result<Vec<DataType>> {
    if arg_types.is_empty() {
        return datafusion::common::plan_err!("{function} needs at least one numeric argument");
    }
    arg_types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_numeric() || t.is_null() {
                Ok(DataType::Float64)
            } else {
                datafusion::common::plan_err!(
                    "{function}: argument {} is {t}, but it takes numeric columns (cast, or encode text as numbers with CASE)",
                    i + 1
                )
            }
        })
        .collect()
}
