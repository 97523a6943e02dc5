//! Tests of a guard's [`Modes`]: the common value seen, kept through merges,
//! and no odd values in ordinary columns.

use super::*;
use std::sync::Arc;

use datafusion::arrow::array::{Float64Array, Int64Array};

fn modes_of(values: ArrayRef) -> Modes {
    let mut modes = Modes::default();
    for_each_key(&values, None, |_, key| modes.add(key)).unwrap();
    modes
}

fn floats(v: Vec<f64>) -> ArrayRef {
    Arc::new(Float64Array::from(v))
}

#[test]
fn a_common_value_with_a_few_others_is_seen() {
    // ELSE 1, ELSE 1e-9, ELSE -0.0 mixed with 0.0: one odd value.
    for (common, odd) in [(1.0, 42.5), (1e-9, 3.0), (-0.0, 7.0), (1e-12, 1.0)] {
        for at in [0, 1, 5, 9] {
            let mut v = vec![common; 10];
            v[at] = odd;
            if common == -0.0 {
                v[3] = 0.0;
            }
            assert_eq!(modes_of(floats(v)).odd(5), 1, "{common} {at}");
        }
    }
    let ints: ArrayRef = Arc::new(Int64Array::from(vec![5, 5, 9, 5, 5, 5, 7, 5, 5, 5, 5, 5]));
    assert_eq!(modes_of(ints).odd(5), 2);
    // NULLs are no values.
    let with_nulls: ArrayRef = Arc::new(Float64Array::from(vec![
        Some(2.0),
        None,
        Some(1.0),
        Some(1.0),
        None,
        Some(1.0),
        Some(1.0),
    ]));
    assert_eq!(modes_of(with_nulls).odd(3), 1);
}

#[test]
fn ordinary_columns_have_no_odd_values() {
    // Continuous, a group of exactly k distinct values, constant, a
    // binary column with many of each value.
    let continuous = floats((0..5).map(|i| i as f64 * 1.5).collect());
    assert_eq!(modes_of(continuous).odd(5), 0);
    assert_eq!(modes_of(floats(vec![3.0; 7])).odd(5), 0);
    let binary = floats((0..20).map(|i| (i % 2) as f64).collect());
    assert_eq!(modes_of(binary).odd(5), 0);
    assert_eq!(modes_of(floats(vec![f64::NAN; 6])).odd(5), 0);
    // A small group of counts: the common value is shared by fewer
    // than k.
    assert_eq!(
        modes_of(floats(vec![1.0, 1.0, 3.0, 1.0, 1.0, 5.0])).odd(5),
        0
    );
    let visits = floats(vec![3.0, 2.0, 3.0, 3.0, 4.0, 3.0, 1.0, 3.0]);
    assert_eq!(modes_of(visits).odd(5), 0);
    // One row apart from 5 others is seen; 2 apart from 7 are not.
    assert_eq!(
        modes_of(floats(vec![2.0, 2.0, 9.0, 2.0, 2.0, 2.0])).odd(5),
        1
    );
    let mut two = vec![2.0; 9];
    two[4] = 9.0;
    two[7] = 8.0;
    assert_eq!(modes_of(floats(two)).odd(5), 0);
}

#[test]
fn merged_states_keep_the_common_value() {
    let mut a = modes_of(floats(vec![9.0, 1.0, 1.0, 1.0]));
    let b = modes_of(floats(vec![1.0, 1.0, 1.0]));
    let c = modes_of(floats(vec![4.0, 6.0, 1.0, 1.0]));
    a.merge(&b);
    a.merge(&c);
    assert_eq!(a.values, 11);
    // c's first two values were odd ones, its references: its 1.0s go
    // uncounted, so 1.0 counts 6 of 8 times (a lower bound) and 5 odd
    // values are seen where the exact rule sees 3 (the documented
    // limit: a miss, never a refusal the exact rule would not make).
    assert_eq!(a.refs, [(float_key(1.0), 6), (float_key(9.0), 1)]);
    // In the order of a site's usual partitions, exact.
    let mut f = modes_of(floats(vec![1.0, 4.0, 6.0, 1.0]));
    f.merge(&modes_of(floats(vec![9.0, 1.0, 1.0, 1.0])));
    f.merge(&modes_of(floats(vec![1.0, 1.0, 1.0])));
    assert_eq!(f.values, 11);
    assert_eq!(f.refs[0], (float_key(1.0), 8));
    // An empty state merges as nothing.
    let mut d = Modes::default();
    d.merge(&modes_of(floats(vec![2.0, 2.0, 8.0])));
    assert_eq!(d.refs, [(float_key(2.0), 2), (float_key(8.0), 1)]);
    // Round trip through the state columns.
    assert_eq!(Modes::from_columns(d.columns()), d);
    // Partitions of distinct values never make a majority.
    let mut e = modes_of(floats(vec![1.0, 2.0, 3.0]));
    e.merge(&modes_of(floats(vec![4.0, 5.0, 6.0])));
    assert_eq!(e.odd(5), 0);
}

#[test]
fn the_vectorized_pass_counts_as_the_row_by_row_one() {
    let columns: Vec<ArrayRef> = vec![
        floats(vec![]),
        floats(vec![3.0]),
        floats(vec![3.0, 3.0, 3.0, -0.0, 0.0, 3.0, 7.5, 0.0, 3.0]),
        floats((0..1000).map(|i| f64::from(i % 7)).collect()),
        Arc::new(Int64Array::from(
            (0..777).map(|i| (i * i) % 5).collect::<Vec<i64>>(),
        )),
        Arc::new(datafusion::arrow::array::Int32Array::from(vec![
            1, 1, 2, 1, 3, 2,
        ])),
        Arc::new(Int64Array::from(vec![
            Some(1),
            None,
            Some(1),
            Some(2),
            None,
        ])),
    ];
    for (at, column) in columns.iter().enumerate() {
        let mut fast = Modes::default();
        add_values(&mut fast, column).unwrap();
        // Twice: a second batch starts with the references set.
        add_values(&mut fast, column).unwrap();
        let mut slow = Modes::default();
        for _ in 0..2 {
            for_each_key(column, None, |_, key| slow.add(key)).unwrap();
        }
        assert_eq!(fast, slow, "column {at}");
    }
}
