//! A state aligned to the coordinator's group list: one row per group of
//! the union, in its canonical order, with the merge's identity where this
//! site has no rows of a group, so that every site's masks cover the same
//! words.

use std::collections::HashMap;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::interleave;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{FedError, Result};
use crate::protocol::secure::{SecureLayout, key_converter};

/// The SHA-256 digest of a group list (its rows in the row format, each
/// with its length), which a site signs with the survivor list so that
/// every site whose state is unmasked aligned to the same groups.
pub(super) fn groups_digest(layout: &SecureLayout, groups: &RecordBatch) -> Result<[u8; 32]> {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update((groups.num_rows() as u64).to_be_bytes());
    if layout.key_columns > 0 {
        let converter = key_converter(groups)?;
        for row in converter.convert_columns(groups.columns())?.iter() {
            hash.update((row.data().len() as u64).to_be_bytes());
            hash.update(row.data());
        }
    }
    Ok(hash.finalize().into())
}

/// The state aligned to `groups`: one row per group in that order, the
/// empty state where this client has no rows of the group.
pub(super) fn align(
    state: &RecordBatch,
    layout: &SecureLayout,
    groups: &RecordBatch,
) -> Result<RecordBatch> {
    if layout.key_columns == 0 {
        if state.num_rows() != 1 {
            return Err(FedError::Internal(format!(
                "{} state rows without GROUP BY",
                state.num_rows()
            )));
        }
        return Ok(state.clone());
    }
    let own_keys = state.project(&(0..layout.key_columns).collect::<Vec<_>>())?;
    if groups.num_columns() != layout.key_columns {
        return Err(FedError::InvalidArgument(format!(
            "the coordinator sent {} group key columns where the state has {}",
            groups.num_columns(),
            layout.key_columns
        )));
    }
    let converter = key_converter(&own_keys)?;
    let own_rows = converter.convert_columns(own_keys.columns())?;
    let group_rows = converter.convert_columns(groups.columns())?;
    let own: HashMap<&[u8], usize> = own_rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.data(), i))
        .collect();
    // (0, i): this client's row i; (1, 0): the empty state.
    // The union's canonical order, each group once: a group listed twice
    // would be masked twice with the same words (their difference would
    // be this site's value), and an order of the coordinator's choosing
    // could line groups up differently at different sites.
    if group_rows
        .iter()
        .zip(group_rows.iter().skip(1))
        .any(|(a, b)| a >= b)
    {
        return Err(FedError::InvalidArgument(
            "the coordinator's group list is not in the canonical order, or lists a group twice"
                .into(),
        ));
    }
    let mut picks = Vec::with_capacity(groups.num_rows());
    let mut found = 0;
    for row in group_rows.iter() {
        match own.get(row.data()) {
            Some(&i) => {
                picks.push((0, i));
                found += 1;
            }
            None => picks.push((1, 0)),
        }
    }
    if found != own.len() {
        return Err(FedError::InvalidArgument(format!(
            "the coordinator's group list lacks {} of this client's groups; its state would be lost",
            own.len() - found
        )));
    }
    // A DP state under the masks has its noise share on each group of the
    // site's declared domain; a group outside it would be filled with an
    // empty state and no share, so that its total carried the noise of the
    // sites that declare it only (the fourteenth outside attack: a group
    // only the victim declares carried the victim's own 1/d share).
    if layout.noised && found != groups.num_rows() {
        return Err(FedError::refused(
            format!(
                "the coordinator's group list holds {} group(s) outside this site's declared dp_domain: a secure_dp_… total of such a group would carry too little of the sites' noise",
                groups.num_rows() - found
            ),
            Some(
                "declare the same dp_domain for the GROUP BY columns at every site (the DP noise is shared over the sites that declare a group)",
            ),
        ));
    }
    let mut columns: Vec<ArrayRef> = groups.columns().to_vec();
    for (i, zero) in layout.zero_state.iter().enumerate() {
        let mine = state.column(layout.key_columns + i);
        columns.push(interleave(&[mine.as_ref(), zero.as_ref()], &picks)?);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(groups.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        state.schema(),
        columns,
        &options,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::secure::union_groups;
    use datafusion::arrow::array::{AsArray, StringArray, UInt64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt64Type};
    use std::sync::Arc;

    fn keys(values: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("g", DataType::Utf8, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(values.to_vec()))]).unwrap()
    }

    #[test]
    fn the_group_union_is_canonical_and_alignment_fills_the_identity() {
        let a = keys(&["y", "x"]);
        let b = keys(&["z", "x"]);
        let union = union_groups(&[a.clone(), b.clone()]).unwrap();
        // The same list whatever the clients' order.
        let again = union_groups(&[b, a.clone()]).unwrap();
        assert_eq!(union, again);
        assert_eq!(union.num_rows(), 3);

        // Client a's state: g, sum, count; it has no row of group z.
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, true),
            Field::new("s", DataType::UInt64, true),
            Field::new("n", DataType::UInt64, true),
        ]));
        let state = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::clone(a.column(0)),
                Arc::new(UInt64Array::from(vec![10, 20])),
                Arc::new(UInt64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let layout = SecureLayout {
            key_columns: 1,
            secure_columns: vec![1, 2],
            zero_state: vec![
                Arc::new(UInt64Array::from(vec![0])),
                Arc::new(UInt64Array::from(vec![0])),
            ],
            schema,
            noised: false,
        };
        let aligned = align(&state, &layout, &union).unwrap();
        let groups = aligned.column(0).as_string::<i32>();
        let sums = aligned.column(1).as_primitive::<UInt64Type>();
        for row in 0..3 {
            let want = match groups.value(row) {
                "x" => 20,
                "y" => 10,
                _ => 0,
            };
            assert_eq!(sums.value(row), want, "group {}", groups.value(row));
        }
        // A group list that lacks one of the client's groups is refused.
        let err = align(&state, &layout, &keys(&["x"])).unwrap_err();
        assert!(
            err.to_string().contains("lacks 1 of this client's groups"),
            "{err}"
        );
        // A noised (secure_dp) state aligns to its own groups only.
        let noised = SecureLayout {
            noised: true,
            ..layout
        };
        let own = union_groups(std::slice::from_ref(&a)).unwrap();
        assert!(align(&state, &noised, &own).is_ok());
        let err = align(&state, &noised, &union).unwrap_err();
        assert!(
            err.to_string()
                .contains("holds 1 group(s) outside this site's declared dp_domain"),
            "{err}"
        );
    }
}
