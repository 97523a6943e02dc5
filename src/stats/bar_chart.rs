//! `\chart` after `hist(...)`: the histogram as horizontal bars in the
//! terminal, one line per bin, labeled with its interval as R closes it
//! (`[a, b]` for the first bin, `(a, b]` for the others) and its count.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{FedError, Result};

/// The longest bar, in characters.
const WIDTH: usize = 60;

/// Eighths of a character cell, for the end of a bar.
const EIGHTHS: [char; 8] = ['▏', '▎', '▍', '▌', '▋', '▊', '▉', '█'];

/// The bars of a `hist` result (columns `lower`, `upper`, `count`).
pub(crate) fn bar_chart(batches: &[RecordBatch], schema: &Schema) -> Result<String> {
    let column = |name: &str, t: &DataType| -> Result<Vec<f64>> {
        let (i, _) = schema.column_with_name(name).ok_or_else(|| {
            FedError::InvalidArgument(format!("\\chart: the last result has no column `{name}`"))
        })?;
        let mut out = Vec::new();
        for batch in batches {
            let c = datafusion::arrow::compute::cast(batch.column(i), t)?;
            let c = datafusion::arrow::compute::cast(&c, &DataType::Float64)?;
            let c = c.as_primitive::<Float64Type>();
            out.extend((0..c.len()).map(|r| if c.is_valid(r) { c.value(r) } else { 0.0 }));
        }
        Ok(out)
    };
    let lower = column("lower", &DataType::Float64)?;
    let upper = column("upper", &DataType::Float64)?;
    let counts = column("count", &DataType::Int64)?;
    if counts.is_empty() {
        return Err(FedError::InvalidArgument(
            "\\chart: the histogram has no bins".into(),
        ));
    }
    let labels: Vec<String> = lower
        .iter()
        .zip(&upper)
        .enumerate()
        .map(|(i, (a, b))| {
            let open = if i == 0 { '[' } else { '(' };
            format!("{open}{a}, {b}]")
        })
        .collect();
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let max = counts.iter().copied().fold(0.0, f64::max);
    let total: f64 = counts.iter().sum();
    let mut out = format!(
        "count by bin, {} bins, {} values\n",
        counts.len(),
        total as i64
    );
    for (label, count) in labels.iter().zip(&counts) {
        let eighths = if max > 0.0 {
            (count / max * (WIDTH * 8) as f64).round() as usize
        } else {
            0
        };
        let mut bar = "█".repeat(eighths / 8);
        if eighths % 8 > 0 {
            bar.push(EIGHTHS[eighths % 8 - 1]);
        }
        if bar.is_empty() && *count > 0.0 {
            bar.push(EIGHTHS[0]);
        }
        out.push_str(&format!("{label:<label_width$} │{bar} {}\n", *count as i64));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedsql_udfs::histogram::Bins;

    #[test]
    fn draws_one_bar_per_bin_scaled_to_the_largest() {
        let bins = Bins::new(0.0, 30.0, 3).unwrap();
        let batch = crate::stats::hist::histogram_batch(&bins, &[4, 8, 0]).unwrap();
        let text = bar_chart(std::slice::from_ref(&batch), &batch.schema()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "count by bin, 3 bins, 12 values");
        assert!(lines[1].starts_with("[0, 10]  │"), "{text}");
        assert!(lines[2].starts_with("(10, 20] │"), "{text}");
        assert_eq!(lines[1].matches('█').count(), WIDTH / 2, "{text}");
        assert_eq!(lines[2].matches('█').count(), WIDTH, "{text}");
        assert!(lines[3].ends_with("│ 0"), "{text}");
    }
}
