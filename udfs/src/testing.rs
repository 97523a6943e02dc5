//! Test helpers shared by the aggregates of this crate: a small table with
//! NULLs, and the state-compatibility check that splitting the input in any
//! way and merging the states gives what one pass gives.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Float64Array, RecordBatch, StructArray};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};

/// Deterministic values in [-1, 1) (a linear congruential sequence).
pub(crate) fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// Rows of the test table: a, b, c with a few NULLs and unequal scales.
fn columns(rows: usize) -> Vec<(Option<f64>, Option<f64>, Option<f64>)> {
    (0..rows)
        .map(|i| {
            let x = i as f64;
            let a = (i % 11 != 3).then_some(1e3 + (x * 0.7).sin() * 5.0 + x * 0.01);
            let b = (i % 13 != 5).then_some((x * 1.3).cos() * 1e-2 + x * 1e-4);
            let c = Some(2.0 + 0.5 * a.unwrap_or(0.0) - 40.0 * b.unwrap_or(0.0) + (x * 2.1).sin());
            (a, b, c)
        })
        .collect()
}

fn batch(rows: &[(Option<f64>, Option<f64>, Option<f64>)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Float64, true),
        Field::new("b", DataType::Float64, true),
        Field::new("c", DataType::Float64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

/// A context whose table `t` holds the rows split into `parts` partitions
/// (kept as they are, so each runs its own partial aggregate).
fn context(parts: &[usize]) -> SessionContext {
    let rows = columns(parts.iter().sum());
    let mut start = 0;
    let partitions: Vec<Vec<RecordBatch>> = parts
        .iter()
        .map(|n| {
            let part = vec![batch(&rows[start..start + n])];
            start += n;
            part
        })
        .collect();
    let config = SessionConfig::new()
        .with_target_partitions(parts.len().max(1))
        .with_round_robin_repartition(false)
        .with_repartition_aggregations(false);
    let ctx = SessionContext::new_with_config(config);
    crate::register_all(&ctx);
    let schema = partitions[0][0].schema();
    ctx.register_table(
        "t",
        Arc::new(MemTable::try_new(schema, partitions).unwrap()),
    )
    .unwrap();
    ctx
}

/// Runs two queries over the 120-row test table in one partition.
pub(crate) async fn run_pair(a: &str, b: &str) -> (Vec<RecordBatch>, Vec<RecordBatch>) {
    let ctx = context(&[120]);
    let run = |sql: &str| {
        let ctx = ctx.clone();
        let sql = sql.to_string();
        async move { ctx.sql(&sql).await.unwrap().collect().await.unwrap() }
    };
    (run(a).await, run(b).await)
}

/// Every float in a result, in order (lists and structs flattened).
fn floats(batches: &[RecordBatch]) -> Vec<f64> {
    fn walk(array: &dyn Array, out: &mut Vec<f64>) {
        match array.data_type() {
            DataType::Float64 => out.extend(
                array
                    .as_primitive::<Float64Type>()
                    .iter()
                    .map(|v| v.unwrap_or(f64::NAN)),
            ),
            DataType::Int64 => out.extend(
                array
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .iter()
                    .map(|v| v.unwrap_or(0) as f64),
            ),
            DataType::List(_) => walk(array.as_list::<i32>().values().as_ref(), out),
            DataType::Struct(_) => array
                .as_struct()
                .columns()
                .iter()
                .for_each(|c| walk(c.as_ref(), out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for b in batches {
        b.columns().iter().for_each(|c| walk(c.as_ref(), &mut out));
    }
    out
}

/// Asserts that `SELECT <call> FROM t` gives the same result whether the
/// 120 rows are aggregated in one pass or split (unevenly, with empty and
/// one-row parts) into partitions whose states are merged.
pub(crate) async fn assert_split_invariant(call: &str) {
    let sql = format!("SELECT {call} AS r FROM t");
    let one = floats(
        &context(&[120])
            .sql(&sql)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap(),
    );
    assert!(!one.is_empty(), "{call}: no values");
    for parts in [
        vec![60, 60],
        vec![0, 1, 119],
        vec![7, 0, 50, 1, 62],
        vec![1; 120],
    ] {
        let split = floats(
            &context(&parts)
                .sql(&sql)
                .await
                .unwrap()
                .collect()
                .await
                .unwrap(),
        );
        assert_eq!(one.len(), split.len(), "{call} split {parts:?}");
        for (x, y) in one.iter().zip(&split) {
            let same = (x.is_nan() && y.is_nan())
                || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1e-9);
            assert!(same, "{call} split {parts:?}: {x} vs {y}");
        }
    }
}

/// The float in column `i` of the first row.
pub(crate) fn float(batches: &[RecordBatch], i: usize) -> f64 {
    let c = datafusion::arrow::compute::cast(batches[0].column(i), &DataType::Float64).unwrap();
    c.as_primitive::<Float64Type>().value(0)
}

/// The struct column `name` of the first batch.
pub(crate) fn struct_of(batches: &[RecordBatch], name: &str) -> StructArray {
    batches[0].column_by_name(name).unwrap().as_struct().clone()
}

/// Row 0 of a list<list<float64>> field of a struct.
pub(crate) fn matrix_field(s: &StructArray, field: &str) -> Vec<Vec<f64>> {
    let rows = s.column_by_name(field).unwrap().as_list::<i32>().value(0);
    let rows = rows.as_list::<i32>();
    (0..rows.len())
        .map(|i| {
            rows.value(i)
                .as_primitive::<Float64Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// Row 0 of a list<float64> field of a struct.
pub(crate) fn vector_field(s: &StructArray, field: &str) -> Vec<f64> {
    s.column_by_name(field)
        .unwrap()
        .as_list::<i32>()
        .value(0)
        .as_primitive::<Float64Type>()
        .values()
        .to_vec()
}

/// Row 0 of a float64 field of a struct.
pub(crate) fn float_field(s: &StructArray, field: &str) -> f64 {
    s.column_by_name(field)
        .unwrap()
        .as_primitive::<Float64Type>()
        .value(0)
}

/// The matrix of a labeled-matrix column.
pub(crate) fn matrix_of(batches: &[RecordBatch], column: &str) -> Vec<Vec<f64>> {
    matrix_field(&struct_of(batches, column), "matrix")
}
