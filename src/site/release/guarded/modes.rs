//! What a guard keeps of one numeric input per group for the rule that
//! all but fewer than k of its values must not share one value
//! ([`Modes`]: the count of values and two reference values with their
//! counts), and how an input's values are read as keys for it.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type};
use datafusion::common::Result as DFResult;

/// The state columns of one input's [`Modes`].
pub(crate) const MODE_WIDTH: usize = 5;

/// What a guard keeps of one numeric input per group, for the rule that
/// all but fewer than k of its values must not share one value: the
/// values (not NULL, not filtered out), and two reference values, each
/// with how many values equal it. A count of 0 means no reference yet.
///
/// Within one pass the counts are exact: the first reference is the first
/// value, the second the first value unlike it. When the common value is
/// not one of the two (the first two distinct values seen were both odd
/// ones: `CASE WHEN id IN (1, 2) THEN x ELSE 1 END` where rows 1 and 2
/// come first) the rule does not see it; isolating one row is always
/// seen. Merged states keep the two references counted most, with counts
/// that are then lower bounds (a value may have gone uncounted in a state
/// where it was no reference): the rule may miss, but never refuses an
/// input that the exact rule would release.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Modes {
    pub values: i64,
    pub refs: [(u64, i64); 2],
}

impl Modes {
    /// One more value, as its key ([`keys`]).
    #[inline]
    pub(super) fn add(&mut self, key: u64) {
        self.values += 1;
        let [(v0, e0), (v1, e1)] = &mut self.refs;
        if *e0 > 0 && key == *v0 {
            *e0 += 1;
        } else if *e1 > 0 && key == *v1 {
            *e1 += 1;
        } else if *e0 == 0 {
            (*v0, *e0) = (key, 1);
        } else if *e1 == 0 {
            (*v1, *e1) = (key, 1);
        }
    }

    /// Every value of `values`, as its key: as [`Modes::add`] row by row,
    /// but once both references are set (from then on they never change)
    /// the rest is counted in one pass the compiler vectorizes.
    fn add_slice<T: Copy>(&mut self, values: &[T], key: impl Fn(T) -> u64) {
        let mut next = 0;
        while next < values.len() && (self.refs[0].1 == 0 || self.refs[1].1 == 0) {
            self.add(key(values[next]));
            next += 1;
        }
        let rest = &values[next..];
        let [(v0, _), (v1, _)] = self.refs;
        let (mut c0, mut c1) = (0i64, 0i64);
        for &value in rest {
            let k = key(value);
            c0 += i64::from(k == v0);
            c1 += i64::from(k == v1);
        }
        self.values += rest.len() as i64;
        self.refs[0].1 += c0;
        self.refs[1].1 += c1;
    }

    /// Another state of the same group merged in: the values add up, and
    /// the two references counted most stay (equal references adding up;
    /// on a tie, the earlier).
    pub(crate) fn merge(&mut self, other: &Modes) {
        self.values += other.values;
        let mut refs = [self.refs[0], self.refs[1], other.refs[0], other.refs[1]];
        for i in 1..refs.len() {
            for j in 0..i {
                if refs[i].1 > 0 && refs[j].1 > 0 && refs[i].0 == refs[j].0 {
                    refs[j].1 += refs[i].1;
                    refs[i].1 = 0;
                }
            }
        }
        refs.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        self.refs = [refs[0], refs[1]];
    }

    /// How many values differ from the one most of them share, or 0 when
    /// that value is no background to them: shared by fewer than `k`, or
    /// by fewer than four times as many values as differ from it. The
    /// policy refuses 1 to k-1 of them: everything else is one value the
    /// analyst may know (`ELSE 1`), so the sum gives away the few.
    ///
    /// Ordinary data has common values too: a group of exactly k distinct
    /// values is k-1 values and one other; a small group of counts (8
    /// rows, 5 of them 3 visits) or a 0/1 column with 4 of 13 zeros is no
    /// attack the rule can tell from one. So the rule asks the common
    /// value to be shared by at least k values and four times as many as
    /// the others: isolating one row is seen in any group of more than k
    /// rows (max(k, 4) + 1); isolating 2 to k-1 rows needs a group of 5
    /// times as many. Smaller isolations pass this rule (the row count
    /// rule still holds the group to k rows, and `ELSE 0` is refused in
    /// any group).
    pub(crate) fn odd(&self, k: i64) -> i64 {
        let shared = self.refs[0].1.max(self.refs[1].1);
        let odd = self.values - shared;
        if shared >= k.max(1) && shared >= 4 * odd {
            odd
        } else {
            0
        }
    }

    /// The state columns' values.
    pub(super) fn columns(&self) -> [i64; MODE_WIDTH] {
        let [(v0, e0), (v1, e1)] = self.refs;
        [self.values, v0 as i64, e0, v1 as i64, e1]
    }

    /// From the state columns' values.
    pub(crate) fn from_columns(c: [i64; MODE_WIDTH]) -> Self {
        Self {
            values: c[0],
            refs: [(c[1] as u64, c[2]), (c[3] as u64, c[4])],
        }
    }
}

/// A float's key: its bits, with -0.0 as 0.0 (NaN is a value of its own).
#[inline]
pub(super) fn float_key(v: f64) -> u64 {
    (v + 0.0).to_bits()
}

/// Calls `f` with the row and key of every value of a numeric `values`
/// whose row is in `rows` (all rows when `None`) and not NULL: integers
/// compare exactly, everything else as f64.
pub(super) fn for_each_key(
    values: &ArrayRef,
    rows: Option<&BooleanBuffer>,
    f: impl FnMut(usize, u64),
) -> DFResult<()> {
    let nulls = values.logical_nulls();
    let rows = match (rows, nulls) {
        (Some(rows), Some(nulls)) => Some(rows & nulls.inner()),
        (Some(rows), None) => Some(rows.clone()),
        (None, Some(nulls)) => Some(nulls.into_inner()),
        (None, None) => None,
    };
    match values.data_type() {
        DataType::Int64 => {
            let ints = values.as_primitive::<Int64Type>().values();
            each_row(rows.as_ref(), ints, |v| v as u64, f);
        }
        DataType::Float64 => {
            let floats = values.as_primitive::<Float64Type>().values();
            each_row(rows.as_ref(), floats, float_key, f);
        }
        _ => {
            let floats = cast(values, &DataType::Float64)?;
            let floats = floats.as_primitive::<Float64Type>().values();
            each_row(rows.as_ref(), floats, float_key, f);
        }
    }
    Ok(())
}

/// `f(row, key)` for every row of `values` in `rows` (all when `None`).
#[inline]
fn each_row<T: Copy>(
    rows: Option<&BooleanBuffer>,
    values: &[T],
    key: impl Fn(T) -> u64,
    mut f: impl FnMut(usize, u64),
) {
    match rows {
        Some(rows) => rows.set_indices().for_each(|row| f(row, key(values[row]))),
        None => values
            .iter()
            .enumerate()
            .for_each(|(row, &v)| f(row, key(v))),
    }
}

/// Every value of a numeric `values` that is not NULL, added to `modes`
/// (as [`for_each_key`] with [`Modes::add`]; without NULLs, in one
/// vectorized pass once the references are set).
pub(super) fn add_values(modes: &mut Modes, values: &ArrayRef) -> DFResult<()> {
    if values.logical_nulls().is_some() {
        return for_each_key(values, None, |_, key| modes.add(key));
    }
    match values.data_type() {
        DataType::Int64 => {
            modes.add_slice(values.as_primitive::<Int64Type>().values(), |v| v as u64)
        }
        DataType::Float64 => {
            modes.add_slice(values.as_primitive::<Float64Type>().values(), float_key)
        }
        _ => {
            let floats = cast(values, &DataType::Float64)?;
            modes.add_slice(floats.as_primitive::<Float64Type>().values(), float_key);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
