//! Fixed-size float states: the layout shared by the aggregates whose state
//! is one flat vector of sums (`irls_step`, `sgd_gradient`, `sgd_newton`).
//! The state travels as a `FixedSizeList<Float64>` of a length fixed by the
//! number of arguments; the result is a `List<Float64>` of the merged sums.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, FixedSizeListArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::physical_expr::PhysicalExpr;

/// The one state field: `len` floats.
pub fn state_field(aggregate: &str, len: usize) -> FieldRef {
    let item = Arc::new(Field::new_list_field(DataType::Float64, true));
    Arc::new(Field::new(
        format_state_name(aggregate, "sums"),
        DataType::FixedSizeList(item, len as i32),
        true,
    ))
}

/// Argument types of a step aggregate `name(config, ..., x1, ..., xk)`: the
/// config string, then floats; `usage` names the arguments for the error
/// when there are no regressors after the `leading` ones.
///
/// The config is taken as a one-value dictionary ([`config_type`]): an
/// aggregate's arguments are evaluated into arrays batch by batch, and a
/// plain string literal would be copied into every row (a round's
/// coefficients, hundreds of bytes, times every row of every batch), while
/// a dictionary repeats only a small key.
pub fn coerce_step_arguments(
    name: &str,
    usage: &str,
    leading: usize,
    arg_types: &[DataType],
) -> Result<Vec<DataType>> {
    if arg_types.len() <= leading {
        return datafusion::common::plan_err!("{name}({usage}) needs at least one x");
    }
    let mut types = vec![config_type()];
    types.extend(crate::comoments::coerce_to_float(name, &arg_types[1..])?);
    Ok(types)
}

/// The type a config argument is coerced to: a string dictionary, which the
/// planner folds into a dictionary literal.
pub fn config_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The result type: the merged sums as a list.
pub fn result_type() -> DataType {
    DataType::new_list(DataType::Float64, true)
}

/// A state value.
pub fn state_value(values: Vec<f64>) -> ScalarValue {
    let item = Arc::new(Field::new_list_field(DataType::Float64, true));
    let len = values.len() as i32;
    let array = FixedSizeListArray::new(item, len, Arc::new(Float64Array::from(values)), None);
    ScalarValue::FixedSizeList(Arc::new(array))
}

/// A result value.
pub fn result_value(values: Vec<f64>) -> ScalarValue {
    let items: Vec<ScalarValue> = values.into_iter().map(ScalarValue::from).collect();
    ScalarValue::List(ScalarValue::new_list_nullable(&items, &DataType::Float64))
}

/// Adds every (non-null) state row of `states` into `into`.
pub fn merge_into(aggregate: &str, into: &mut [f64], states: &ArrayRef) -> Result<()> {
    let lists = states.as_fixed_size_list();
    for row in 0..lists.len() {
        if lists.is_null(row) {
            continue;
        }
        let values = lists.value(row);
        let values = values.as_primitive::<Float64Type>().values();
        if values.len() != into.len() {
            return exec_err!(
                "{aggregate} state of {} values, expected {}",
                values.len(),
                into.len()
            );
        }
        for (total, v) in into.iter_mut().zip(values.iter()) {
            *total += v;
        }
    }
    Ok(())
}

/// The constant string of a config argument (the shared input of a round).
pub fn config_literal(aggregate: &str, expr: &Arc<dyn PhysicalExpr>) -> Result<String> {
    fn text(value: &ScalarValue) -> Option<String> {
        match value {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s)) => Some(s.clone()),
            ScalarValue::Dictionary(_, value) => text(value),
            _ => None,
        }
    }
    crate::constant_argument::literal_value(expr)
        .and_then(text)
        .ok_or_else(|| {
            datafusion::error::DataFusionError::Plan(format!(
                "{aggregate}: the config must be a constant string"
            ))
        })
}
