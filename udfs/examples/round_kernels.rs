//! Times the three kernels of an IRLS round at a site, one thread, in
//! nanoseconds per row: η ([`linear_predictor`]), the logistic (or
//! poisson) rows with the check that admits them ([`Canonical::add_rows`])
//! and X'WX with X'Wz ([`GramLanes`]), over 11 columns in blocks of
//! [`BLOCK`] rows, as `irls_step` runs them.
//!
//! `cargo run --release -p fedsql-udfs --example round_kernels [ROWS]
//! [logistic|poisson] [start]`, `start` for the first round's rows (from
//! R's `mustart`, without η; η is still timed):
//! ROWS = 8192 keeps the columns in the cache; the default, 1.25M rows
//! (110 MB), makes η read them from memory, as a round over a client's
//! kept rows does. Prints the fastest of 5 passes over 5M rows in all.

use std::time::{Duration, Instant};

use fedsql_udfs::gram::{BLOCK, GramLanes, linear_predictor};
use fedsql_udfs::irls_canonical::{Canonical, CanonicalRows};

const COLUMNS: usize = 11;
const ROWS_TIMED: usize = 5_000_000;

fn main() {
    let rows: usize = std::env::args()
        .nth(1)
        .map(|r| r.parse().expect("ROWS is a whole number"))
        .unwrap_or(1_250_000);
    let columns: Vec<Vec<f64>> = (0..COLUMNS)
        .map(|j| {
            (0..rows)
                .map(|i| match j {
                    0 => 1.0,
                    _ => ((i * 7919 + j * 104_729) % 1000) as f64 / 1000.0 - 0.5,
                })
                .collect()
        })
        .collect();
    let x: Vec<&[f64]> = columns.iter().map(|c| c.as_slice()).collect();
    // The family: `logistic` (the default, 0/1 responses) or `poisson`
    // (counts 0..6).
    let family = std::env::args().nth(2).unwrap_or_else(|| "logistic".into());
    let (kind, y): (Canonical, Vec<f64>) = match family.as_str() {
        "logistic" => (
            Canonical::Logistic,
            (0..rows)
                .map(|i| ((i * 31) % 3 == 0) as u8 as f64)
                .collect(),
        ),
        "poisson" => (
            Canonical::PoissonLog,
            (0..rows).map(|i| ((i * 31) % 7) as f64).collect(),
        ),
        other => panic!("FAMILY is logistic or poisson, not {other}"),
    };
    let (offset, weight) = (vec![0.0; rows], vec![1.0; rows]);
    let beta: Vec<f64> = (0..COLUMNS).map(|j| 0.1 * j as f64 - 0.3).collect();
    // `start`: the first round, from R's `mustart` (no η).
    let start_round = std::env::args().nth(3).is_some_and(|a| a == "start");
    let passes = ROWS_TIMED.div_ceil(rows);
    let mut best = [Duration::MAX; 3];
    for _ in 0..5 {
        let mut spent = [Duration::ZERO; 3];
        let mut gram = GramLanes::new(COLUMNS);
        let (mut eta, mut working, mut wz) = ([0.0; BLOCK], [0.0; BLOCK], [0.0; BLOCK]);
        let mut deviance = 0.0;
        for _ in 0..passes {
            for start in (0..rows).step_by(BLOCK) {
                let end = (start + BLOCK).min(rows);
                let n = end - start;
                let block: Vec<&[f64]> = x.iter().map(|c| &c[start..end]).collect();
                let t0 = Instant::now();
                linear_predictor(&mut eta[..n], &offset[start..end], &block, &beta);
                let t1 = Instant::now();
                let whole = n / 4 * 4;
                let sums = kind.add_rows(
                    CanonicalRows {
                        y: &y[start..start + whole],
                        trials: &weight[start..start + whole],
                        offset: &offset[start..start + whole],
                        weight: &weight[start..start + whole],
                        eta: (!start_round).then(|| &eta[..whole]),
                    },
                    &mut working[..whole],
                    &mut wz[..whole],
                );
                deviance += sums.expect("every row admitted").deviance;
                let t2 = Instant::now();
                gram.add(&block, &working[..n], Some(&wz[..n]));
                spent[0] += t1 - t0;
                spent[1] += t2 - t1;
                spent[2] += t2.elapsed();
            }
        }
        let (mut xtwx, mut xtwz) = (vec![0.0; COLUMNS * COLUMNS], vec![0.0; COLUMNS]);
        gram.add_upper_to(&mut xtwx, &mut xtwz);
        std::hint::black_box((deviance, &xtwx, &xtwz));
        for (best, spent) in best.iter_mut().zip(spent) {
            *best = (*best).min(spent);
        }
    }
    let per_row = |d: Duration| d.as_secs_f64() * 1e9 / (passes * rows) as f64;
    let [eta, rows_part, gram] = best.map(per_row);
    println!(
        "{rows} rows × {COLUMNS} columns, ns per row (fastest of 5): η {eta:.2}, \
         {family} rows {rows_part:.2}, X'WX and X'Wz {gram:.2}, all {:.2}",
        eta + rows_part + gram
    );
}
