//! A literal argument of an aggregate whose array is made once per batch
//! length instead of once per batch.
//!
//! DataFusion evaluates every argument of an aggregate to an array before
//! it calls the accumulator, so a literal (the trials, offset, weight and
//! intercept of an IRLS round, the config string, `count(*)`'s 1) becomes a
//! freshly filled array in every batch of every round. A site runs the
//! rounds of a fit over its kept rows with these literals wrapped in a
//! [`ConstantArgument`], which hands out the same array for every batch of
//! the same length. The accumulators that read a literal at creation (the
//! config of a step aggregate) read it through [`literal_value`], which
//! sees through the wrapper.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_plan::PhysicalExpr;

/// A literal whose array is built once per batch length and then shared.
#[derive(Debug)]
pub struct ConstantArgument {
    literal: Literal,
    /// The array of the last batch length asked for.
    array: Mutex<Option<ArrayRef>>,
}

impl ConstantArgument {
    /// Wraps a literal.
    pub fn new(literal: Literal) -> Self {
        Self {
            literal,
            array: Mutex::new(None),
        }
    }

    /// The literal's value.
    pub fn value(&self) -> &ScalarValue {
        self.literal.value()
    }
}

/// The value of a literal argument, plain or wrapped in a
/// [`ConstantArgument`]; `None` for any other expression.
pub fn literal_value(expr: &Arc<dyn PhysicalExpr>) -> Option<&ScalarValue> {
    match expr.downcast_ref::<Literal>() {
        Some(literal) => Some(literal.value()),
        None => expr.downcast_ref::<ConstantArgument>().map(|c| c.value()),
    }
}

impl PartialEq for ConstantArgument {
    fn eq(&self, other: &Self) -> bool {
        self.literal == other.literal
    }
}

impl Eq for ConstantArgument {}

impl Hash for ConstantArgument {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.literal.hash(state);
    }
}

impl fmt::Display for ConstantArgument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.literal, f)
    }
}

impl PhysicalExpr for ConstantArgument {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.literal.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.literal.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.literal.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let rows = batch.num_rows();
        let mut array = self.array.lock().expect("not poisoned");
        let shared = match array.as_ref() {
            Some(a) if a.len() == rows => Arc::clone(a),
            _ => {
                let made = self.literal.value().to_array_of_size(rows)?;
                *array = Some(Arc::clone(&made));
                made
            }
        };
        Ok(ColumnarValue::Array(shared))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![]
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.literal.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, Float64Array, Int32Array};
    use datafusion::arrow::datatypes::Field;

    use super::*;

    fn batch(rows: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int32Array::from_iter_values(0..rows))],
        )
        .unwrap()
    }

    fn array(value: &ColumnarValue) -> ArrayRef {
        match value {
            ColumnarValue::Array(a) => Arc::clone(a),
            ColumnarValue::Scalar(_) => panic!("a constant argument evaluates to an array"),
        }
    }

    #[test]
    fn one_array_per_batch_length_with_the_literal_in_every_row() {
        let constant = ConstantArgument::new(Literal::new(ScalarValue::Float64(Some(1.5))));
        let first = array(&constant.evaluate(&batch(5)).unwrap());
        let again = array(&constant.evaluate(&batch(5)).unwrap());
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same length shares one array"
        );
        let shorter = array(&constant.evaluate(&batch(3)).unwrap());
        assert_eq!(
            shorter.as_any().downcast_ref::<Float64Array>().unwrap(),
            &Float64Array::from(vec![1.5; 3])
        );
        assert_eq!(
            first.as_any().downcast_ref::<Float64Array>().unwrap(),
            &Float64Array::from(vec![1.5; 5])
        );
    }

    #[test]
    fn literal_value_sees_through_the_wrapper() {
        let value = ScalarValue::Utf8(Some("family=binomial".into()));
        let plain: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(value.clone()));
        let wrapped: Arc<dyn PhysicalExpr> =
            Arc::new(ConstantArgument::new(Literal::new(value.clone())));
        assert_eq!(literal_value(&plain), Some(&value));
        assert_eq!(literal_value(&wrapped), Some(&value));
        let column: Arc<dyn PhysicalExpr> =
            Arc::new(datafusion::physical_expr::expressions::Column::new("a", 0));
        assert_eq!(literal_value(&column), None);
    }
}
