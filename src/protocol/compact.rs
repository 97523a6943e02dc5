//! A state holds only the bytes of its own rows.
//!
//! Some Arrow arrays share buffers with the array they were taken from: a
//! string or binary *view* column keeps every data buffer its views point
//! into, and a dictionary column keeps its whole dictionary, whichever
//! rows were kept. The Arrow IPC writer sends such buffers whole. A state
//! built by `take` or `filter` from a site's rows (the groups a threshold
//! or a DP domain keeps) would then carry the keys of the groups it
//! dropped, and the buffers' order the order of the rows it read (the
//! seventeenth outside attack spelled an undeclared key from them, and
//! read which declared keys a site holds). [`rows_only`] rebuilds such
//! columns from their values, so every state ([`super::encoder::Encoder::accept`])
//! holds exactly its rows.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{FedError, Result};

/// Whether a column of `data_type` may hold bytes of rows it does not
/// contain (a view or dictionary type, or a nested type holding one).
pub(crate) fn holds_shared(data_type: &DataType) -> bool {
    match data_type {
        DataType::Utf8View
        | DataType::BinaryView
        | DataType::Dictionary(..)
        | DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::RunEndEncoded(..)
        | DataType::Union(..)
        | DataType::Map(..) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_shared(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| holds_shared(f.data_type())),
        _ => false,
    }
}

/// `batch` with every column that may hold other rows' bytes rebuilt from
/// its values (cast to the type without views or dictionaries, and back).
pub(crate) fn rows_only(batch: &RecordBatch) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(batch.schema().fields())
        .map(|(column, field)| {
            if !holds_shared(column.data_type()) {
                return Ok(Arc::clone(column));
            }
            rebuilt(column).ok_or_else(|| {
                FedError::Internal(format!(
                    "state column `{}` of type {} cannot be rebuilt to hold only its rows' bytes",
                    field.name(),
                    column.data_type()
                ))
            })
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

fn rebuilt(column: &ArrayRef) -> Option<ArrayRef> {
    let plain = plain_type(column.data_type())?;
    let values = cast(column, &plain).ok()?;
    let back = cast(&values, column.data_type()).ok()?;
    (back.data_type() == column.data_type()).then_some(back)
}

/// `data_type` with its views and dictionaries replaced by plain arrays;
/// `None` for a type this cannot rebuild (refused: fail closed).
fn plain_type(data_type: &DataType) -> Option<DataType> {
    let field = |f: &Field| -> Option<Arc<Field>> {
        Some(Arc::new(
            f.clone().with_data_type(plain_type(f.data_type())?),
        ))
    };
    Some(match data_type {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, values) => plain_type(values)?,
        DataType::List(f) => DataType::List(field(f)?),
        DataType::LargeList(f) => DataType::LargeList(field(f)?),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(field(f)?, *n),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| field(f))
                .collect::<Option<Vec<_>>>()?
                .into(),
        ),
        DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::RunEndEncoded(..)
        | DataType::Union(..)
        | DataType::Map(..) => return None,
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        Array, DictionaryArray, StringViewArray, UInt32Array, as_dictionary_array,
    };
    use datafusion::arrow::compute::take;
    use datafusion::arrow::datatypes::{Int32Type, Schema};

    fn bytes(column: &ArrayRef) -> Vec<u8> {
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "k",
                column.data_type().clone(),
                true,
            )])),
            vec![Arc::clone(column)],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w =
            datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())
                .unwrap();
        w.write(&rows_only(&batch).unwrap()).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    fn contains(hay: &[u8], needle: &str) -> bool {
        hay.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    #[test]
    fn a_taken_view_or_dictionary_column_keeps_only_its_rows_bytes() {
        let secret = "undeclared-key-of-the-site-SECRET";
        let views: ArrayRef = Arc::new(StringViewArray::from(vec![
            "east-region-of-the-federation",
            secret,
            "west-region-of-the-federation",
        ]));
        let kept = take(views.as_ref(), &UInt32Array::from(vec![2, 0]), None).unwrap();
        assert!(contains(&bytes(&kept), "east-region-of-the-federation"));
        assert!(!contains(&bytes(&kept), secret));
        // The same rows, taken from arrays in another order, give the
        // same bytes (no order of the rows read shows).
        let other: ArrayRef = Arc::new(StringViewArray::from(vec![
            "west-region-of-the-federation",
            "east-region-of-the-federation",
        ]));
        let same = take(other.as_ref(), &UInt32Array::from(vec![0, 1]), None).unwrap();
        assert_eq!(bytes(&kept), bytes(&same));

        let dictionary: DictionaryArray<Int32Type> =
            vec!["east", secret, "west"].into_iter().collect();
        let dictionary: ArrayRef = Arc::new(dictionary);
        let kept = take(dictionary.as_ref(), &UInt32Array::from(vec![0]), None).unwrap();
        assert!(contains(&bytes(&kept), "east"));
        assert!(!contains(&bytes(&kept), secret));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "k",
                kept.data_type().clone(),
                true,
            )])),
            vec![kept],
        )
        .unwrap();
        let rebuilt = rows_only(&batch).unwrap();
        assert_eq!(
            as_dictionary_array::<Int32Type>(rebuilt.column(0))
                .values()
                .len(),
            1
        );
        assert_eq!(rebuilt.column(0).len(), 1);
    }
}

#[cfg(test)]
mod sliced {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::Schema;

    /// The IPC writer sends a sliced offset or primitive array's rows only
    /// (what [`rows_only`] leaves to it).
    #[test]
    fn a_sliced_column_is_written_without_the_rows_cut_off() {
        let secret = "undeclared-key-of-the-site-SECRET";
        let text: ArrayRef = Arc::new(StringArray::from(vec!["east", secret, "west"]));
        let numbers: ArrayRef = Arc::new(Int64Array::from(vec![7, 0x5EC2E7_5EC2E7, 9]));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("k", DataType::Utf8, true),
                Field::new("n", DataType::Int64, true),
            ])),
            vec![text, numbers],
        )
        .unwrap();
        let mut out = Vec::new();
        let mut w =
            datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())
                .unwrap();
        w.write(&rows_only(&batch.slice(0, 1)).unwrap()).unwrap();
        w.finish().unwrap();
        drop(w);
        let has = |needle: &[u8]| out.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"east"));
        assert!(!has(secret.as_bytes()) && !has(b"west"));
        assert!(!has(&0x5EC2E7_5EC2E7i64.to_le_bytes()));
    }
}
