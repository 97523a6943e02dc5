//! t-digests a site may release under a disclosure policy: every centroid
//! summarizes at least k values (the site merges neighbouring centroids
//! until it does), and, when extremes are refused, the digest's exact min
//! and max are replaced by its first and last centroid means. The merged
//! digest is coarser: percentiles between two merged centroids are
//! interpolated over a wider span, and the extreme percentiles (below the
//! first and above the last centroid mean) are clamped to those means.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Float64Builder, ListBuilder, RecordBatch,
};
use datafusion::arrow::datatypes::Float64Type;

use crate::error::{FedError, Result};

/// The digest columns of a state, by their state names' suffixes, in the
/// order DataFusion writes them.
const DIGEST: [&str; 6] = [
    "[max_size]",
    "[sum]",
    "[count]",
    "[max]",
    "[min]",
    "[centroids]",
];

/// `batch` with each t-digest coarsened to centroids of at least `k`
/// values, and with its min and max replaced unless `keep_extremes`.
pub(crate) fn coarsen(batch: &RecordBatch, k: f64, keep_extremes: bool) -> Result<RecordBatch> {
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut columns = batch.columns().to_vec();
    for at in 0..names.len().saturating_sub(DIGEST.len() - 1) {
        let is_digest = DIGEST
            .iter()
            .enumerate()
            .all(|(i, suffix)| names[at + i].ends_with(suffix))
            && names[at..at + DIGEST.len()]
                .iter()
                .all(|n| n.split('[').next() == names[at].split('[').next());
        if !is_digest {
            continue;
        }
        let centroids = columns[at + 5]
            .as_list_opt::<i32>()
            .ok_or_else(|| FedError::Internal("a t-digest's centroids are not a list".into()))?;
        let mut merged =
            ListBuilder::new(Float64Builder::new()).with_field(centroids_field(&columns[at + 5]));
        let mut max = Vec::with_capacity(batch.num_rows());
        let mut min = Vec::with_capacity(batch.num_rows());
        let old_max = columns[at + 3].as_primitive::<Float64Type>();
        let old_min = columns[at + 4].as_primitive::<Float64Type>();
        for row in 0..batch.num_rows() {
            let values = centroids.value(row);
            let pairs = values.as_primitive::<Float64Type>().values();
            let coarse = merge_to_weight(pairs, k);
            match (keep_extremes, coarse.first(), coarse.last()) {
                (false, Some(first), Some(last)) => {
                    min.push(first.0);
                    max.push(last.0);
                }
                _ => {
                    min.push(old_min.value(row));
                    max.push(old_max.value(row));
                }
            }
            for (mean, weight) in coarse {
                merged.values().append_value(mean);
                merged.values().append_value(weight);
            }
            merged.append(true);
        }
        columns[at + 3] = Arc::new(Float64Array::from(max));
        columns[at + 4] = Arc::new(Float64Array::from(min));
        columns[at + 5] = Arc::new(merged.finish());
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn centroids_field(column: &ArrayRef) -> Arc<datafusion::arrow::datatypes::Field> {
    match column.data_type() {
        datafusion::arrow::datatypes::DataType::List(field) => Arc::clone(field),
        _ => Arc::new(datafusion::arrow::datatypes::Field::new_list_field(
            datafusion::arrow::datatypes::DataType::Float64,
            true,
        )),
    }
}

/// Sorted centroids `[mean, weight, mean, weight, ...]` merged left to
/// right into centroids of at least `k` weight each (a short tail joins the
/// last full one); means are weight-averaged, so the sum and count stay.
fn merge_to_weight(pairs: &[f64], k: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let (mut sum, mut weight) = (0.0, 0.0);
    for pair in pairs.chunks_exact(2) {
        sum += pair[0] * pair[1];
        weight += pair[1];
        if weight >= k {
            out.push((sum / weight, weight));
            (sum, weight) = (0.0, 0.0);
        }
    }
    if weight > 0.0 {
        match out.last_mut() {
            Some((mean, w)) => {
                let total = *w + weight;
                *mean = (*mean * *w + sum) / total;
                *w = total;
            }
            None => out.push((sum / weight, weight)),
        }
    }
    out
}

/// `batch` with every `histogram` state's below- and above-range counts
/// folded into its end bins; refused if a bin, or the count of missing
/// values, then counts 1 to k-1 values.
/// The state is `bins` counts, then below, above and missing.
pub(crate) fn fold_histograms(
    batch: &RecordBatch,
    k: i64,
) -> std::result::Result<RecordBatch, FoldError> {
    let schema = batch.schema();
    let mut columns = batch.columns().to_vec();
    for (i, field) in schema.fields().iter().enumerate() {
        if !field.name().ends_with("[bin_counts]") {
            continue;
        }
        let lists = columns[i].as_list_opt::<i32>().ok_or(FoldError::NotAList)?;
        let item = centroids_field(&columns[i]);
        let mut folded =
            ListBuilder::new(datafusion::arrow::array::Int64Builder::new()).with_field(item);
        for row in 0..lists.len() {
            if lists.is_null(row) {
                folded.append(false);
                continue;
            }
            let values = lists.value(row);
            let mut counts = values
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .values()
                .to_vec();
            let bins = counts
                .len()
                .checked_sub(3)
                .filter(|&b| b > 0)
                .ok_or(FoldError::NotAList)?;
            counts[0] += std::mem::take(&mut counts[bins]);
            counts[bins - 1] += std::mem::take(&mut counts[bins + 1]);
            // The missing values' count leaves too: it is a cell like a bin.
            if counts[..bins]
                .iter()
                .chain(&counts[bins + 2..])
                .any(|&n| n > 0 && n < k)
            {
                return Err(FoldError::SmallBin);
            }
            folded.values().append_slice(&counts);
            folded.append(true);
        }
        columns[i] = Arc::new(folded.finish());
    }
    RecordBatch::try_new(schema, columns).map_err(|_| FoldError::NotAList)
}

/// Why a histogram state could not be folded.
#[derive(Debug, PartialEq)]
pub enum FoldError {
    /// A bin would count 1 to k-1 values.
    SmallBin,
    /// The state is not a histogram's.
    NotAList,
}

#[cfg(test)]
mod tests {
    use super::merge_to_weight;

    #[test]
    fn centroids_merge_to_k_keeping_sum_and_count() {
        // Ten single values 1..=10, k = 4: [1..4], [5..8], then 9, 10 join.
        let pairs: Vec<f64> = (1..=10).flat_map(|v| [v as f64, 1.0]).collect();
        let merged = merge_to_weight(&pairs, 4.0);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0], (2.5, 4.0));
        assert_eq!(merged[1].1, 6.0);
        assert!((merged[1].0 - 7.5).abs() < 1e-12);
        let total: f64 = merged.iter().map(|(m, w)| m * w).sum();
        assert!((total - 55.0).abs() < 1e-9);
        // Fewer than k values in all stay one centroid (the count rule
        // refuses them before they leave).
        assert_eq!(
            merge_to_weight(&[3.0, 1.0, 5.0, 1.0], 4.0),
            vec![(4.0, 2.0)]
        );
        assert!(merge_to_weight(&[], 4.0).is_empty());
    }
}
