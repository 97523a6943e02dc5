//! Tests of the guarded aggregates' input counts: counting by mask and by
//! loop agree.

use super::*;
use datafusion::arrow::array::{Float32Array, Float64Array, Int64Array, StringArray};

#[test]
fn counts_by_mask_and_by_loop_agree() {
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(vec![
            Some(0.0),
            None,
            Some(1.5),
            Some(-0.0),
            Some(2.0),
        ])),
        Arc::new(Float64Array::from(vec![0.0, 3.0, 0.0, 4.0])),
        Arc::new(Int64Array::from(vec![Some(0), Some(7), None, Some(-1)])),
        Arc::new(StringArray::from(vec![Some("a"), None, Some("")])),
        Arc::new(Float32Array::from(vec![Some(-0.0), Some(0.5), None])),
        Arc::new(Float64Array::from(vec![-0.0, 0.0, 1.0])),
    ];
    let expected_nonzero = [2, 2, 2, 2, 1, 1];
    let expected_nonnull = [4, 4, 3, 2, 2, 3];
    for (i, a) in arrays.iter().enumerate() {
        for (counted, expected) in [
            (Counted::NonZero, expected_nonzero[i]),
            (Counted::NonNull, expected_nonnull[i]),
        ] {
            assert_eq!(
                count_values(a, counted).unwrap(),
                expected,
                "{i} {counted:?}"
            );
            assert_eq!(
                counting_rows(a, counted).unwrap().count_set_bits(),
                expected,
                "{i} {counted:?} by mask"
            );
        }
    }
}
