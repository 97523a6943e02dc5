//! `\chart`: the last result drawn as a line chart in the terminal (braille
//! characters, by the `textplots` crate) — e.g. the loss curve of
//! `fedsgd_history`.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use textplots::{Chart, LabelBuilder, LabelFormat, Plot, Shape};

use crate::error::{FedError, Result};

/// Chart width and height in braille dots (2 × 4 per character).
const WIDTH: u32 = 160;
const HEIGHT: u32 = 48;

/// Column `y` of a result against column `x`, as text. Without names: `loss`
/// against `round` when the result has them (fedsgd_history), else the
/// last numeric column against the first (or against the row number).
pub(crate) fn line_chart(
    batches: &[RecordBatch],
    schema: &Schema,
    y: Option<&str>,
    x: Option<&str>,
) -> Result<String> {
    let numeric: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| f.data_type().is_numeric())
        .map(|f| f.name().as_str())
        .collect();
    let has = |name: &str| schema.column_with_name(name).is_some();
    let y = match y {
        Some(y) => y,
        None if has("loss") => "loss",
        None => *numeric.last().ok_or_else(|| {
            FedError::InvalidArgument("\\chart: the last result has no numeric column".into())
        })?,
    };
    let x = match x {
        Some(x) => Some(x),
        None if has("round") && y != "round" => Some("round"),
        None => numeric.iter().copied().find(|&c| c != y),
    };
    let ys = values(batches, schema, y)?;
    let xs = match x {
        Some(x) => values(batches, schema, x)?,
        None => (1..=ys.len()).map(|i| Some(i as f64)).collect(),
    };
    let points: Vec<(f32, f32)> = xs
        .iter()
        .zip(&ys)
        .filter_map(|(x, y)| {
            Some((
                x.filter(|v| v.is_finite())? as f32,
                y.filter(|v| v.is_finite())? as f32,
            ))
        })
        .collect();
    if points.len() < 2 {
        return Err(FedError::InvalidArgument(format!(
            "\\chart: `{y}` has fewer than two finite values to draw"
        )));
    }
    let (xmin, xmax) = points
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (x, _)| {
            (lo.min(*x), hi.max(*x))
        });
    let shape = Shape::Lines(&points);
    let mut chart = Chart::new(WIDTH, HEIGHT, xmin, xmax.max(xmin + f32::EPSILON));
    let chart = chart
        .lineplot(&shape)
        .x_label_format(LabelFormat::Custom(Box::new(|v| format!("{v}"))))
        .y_label_format(LabelFormat::Custom(Box::new(|v| format!("{v:.6}"))));
    chart.axis();
    chart.figures();
    Ok(format!(
        "{y} by {}, {} points\n{chart}",
        x.unwrap_or("row"),
        points.len()
    ))
}

/// A column of the result as floats.
fn values(batches: &[RecordBatch], schema: &Schema, name: &str) -> Result<Vec<Option<f64>>> {
    let (i, field) = schema.column_with_name(name).ok_or_else(|| {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        FedError::UnknownObject(format!(
            "\\chart: the last result has no column `{name}` (it has {})",
            names.join(", ")
        ))
    })?;
    if !field.data_type().is_numeric() {
        return Err(FedError::InvalidArgument(format!(
            "\\chart: column `{name}` is {}, not numeric",
            field.data_type()
        )));
    }
    let mut out = Vec::new();
    for batch in batches {
        let column = datafusion::arrow::compute::cast(batch.column(i), &DataType::Float64)?;
        let column = column.as_primitive::<Float64Type>();
        out.extend((0..column.len()).map(|r| column.is_valid(r).then(|| column.value(r))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::Field;

    use super::*;

    fn history() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("round", DataType::Int64, false),
            Field::new("loss", DataType::Float64, false),
            Field::new("note", DataType::Utf8, false),
        ]));
        let loss: Vec<f64> = (1..=50).map(|r| 1.0 / r as f64).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(1..=50)),
                Arc::new(Float64Array::from(loss)),
                Arc::new(StringArray::from_iter_values(
                    (1..=50).map(|r| r.to_string()),
                )),
            ],
        )
        .unwrap()
    }

    #[test]
    fn draws_loss_by_round_by_default() {
        let batch = history();
        let text = line_chart(std::slice::from_ref(&batch), &batch.schema(), None, None).unwrap();
        assert!(text.starts_with("loss by round, 50 points\n"), "{text}");
        // The first value labels the top of the y axis; the curve is drawn.
        assert!(text.contains("1.000000"), "{text}");
        assert!(
            text.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)),
            "{text}"
        );
    }

    #[test]
    fn names_what_cannot_be_drawn() {
        let batch = history();
        let schema = batch.schema();
        let err = |y: &str| {
            line_chart(std::slice::from_ref(&batch), &schema, Some(y), None)
                .unwrap_err()
                .to_string()
        };
        assert!(err("nosuch").contains("no column `nosuch` (it has round, loss, note)"));
        assert!(err("note").contains("column `note` is Utf8, not numeric"));
    }
}
