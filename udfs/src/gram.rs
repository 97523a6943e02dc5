//! The weighted Gram matrix of a batch's columns, the inner loop of every
//! model round at a site: X'WX (and X'Wz beside it) for IRLS, the
//! curvature block of `sgd_newton`.
//!
//! One pass over blocks of rows small enough to stay in the L1 cache
//! (k columns × [`BLOCK`] rows), computing only the upper triangle of the
//! symmetric result (k(k+1)/2 dot products instead of a general k × k
//! matrix product) and mirroring it once per batch. The dot products run
//! four columns at a time with independent partial sums, so that the
//! compiler vectorizes them and one load serves four products.
//! The order of the additions depends only on the rows, never on threads.

use multiversion::multiversion;

/// Rows per cache block.
pub const BLOCK: usize = 256;

/// Adds Σ_r w_r x_r x_rᵀ to `gram` (k × k, row-major, kept symmetric)
/// and, when `wz` is given, Σ_r wz_r x_r to `rhs`. `x` holds k columns of
/// `w.len()` rows each; a row whose weight is zero adds nothing.
pub fn add_weighted_gram(
    gram: &mut [f64],
    rhs: &mut [f64],
    x: &[&[f64]],
    w: &[f64],
    wz: Option<&[f64]>,
) {
    add_upper_gram(gram, rhs, x, w, wz);
    mirror_upper(gram, x.len());
}

/// [`add_weighted_gram`] on the upper triangle only (j ≥ i); callers that
/// add many blocks mirror once at the end ([`mirror_upper`]). The dot
/// products run with AVX2 where the processor has it (chosen at run time).
#[multiversion(targets("x86_64+avx2", "aarch64+neon"))]
pub fn add_upper_gram(
    gram: &mut [f64],
    rhs: &mut [f64],
    x: &[&[f64]],
    w: &[f64],
    wz: Option<&[f64]>,
) {
    let k = x.len();
    debug_assert_eq!(gram.len(), k * k);
    let rows = w.len();
    let mut scaled = [0.0; BLOCK];
    let mut start = 0;
    while start < rows {
        let end = (start + BLOCK).min(rows);
        let weights = &w[start..end];
        let scaled = &mut scaled[..end - start];
        for i in 0..k {
            let xi = &x[i][start..end];
            for ((s, a), b) in scaled.iter_mut().zip(xi).zip(weights) {
                *s = a * b;
            }
            // Four columns at a time share each load of the scaled one.
            let mut j = i;
            while j + 4 <= k {
                let column = |t: usize| &x[j + t][start..end];
                let sums = dots4(scaled, [column(0), column(1), column(2), column(3)]);
                for (t, sum) in sums.into_iter().enumerate() {
                    gram[i * k + j + t] += sum;
                }
                j += 4;
            }
            for j in j..k {
                gram[i * k + j] += dot(scaled, &x[j][start..end]);
            }
            if let Some(wz) = wz {
                rhs[i] += dot(xi, &wz[start..end]);
            }
        }
        start = end;
    }
}

/// Copies the upper triangle of a k × k row-major matrix to the lower.
pub fn mirror_upper(gram: &mut [f64], k: usize) {
    for i in 0..k {
        for j in 0..i {
            gram[i * k + j] = gram[j * k + i];
        }
    }
}

/// The block's columns with zeros in the rows of weight zero, when one of
/// those rows holds an infinite or NaN value (0 × ∞ is NaN, so such a row
/// would otherwise add NaN to X'WX though it does not enter it); `None`,
/// and no copy, in the usual case.
pub fn masked_where_unweighted(x: &[&[f64]], w: &[f64]) -> Option<Vec<Vec<f64>>> {
    let unweighted_non_finite = w
        .iter()
        .enumerate()
        .any(|(r, &w)| w == 0.0 && x.iter().any(|column| !column[r].is_finite()));
    unweighted_non_finite.then(|| {
        x.iter()
            .map(|column| {
                column
                    .iter()
                    .zip(w)
                    .map(|(&v, &w)| if w == 0.0 { 0.0 } else { v })
                    .collect()
            })
            .collect()
    })
}

/// η = offset + Σ_j β_j x_j over a block of rows, one pass per column (in
/// column order, so η is the same whatever the block size).
#[multiversion(targets("x86_64+avx2", "aarch64+neon"))]
pub fn linear_predictor(eta: &mut [f64], offset: &[f64], x: &[&[f64]], beta: &[f64]) {
    eta.copy_from_slice(offset);
    for (column, b) in x.iter().zip(beta) {
        for (e, v) in eta.iter_mut().zip(column.iter()) {
            *e += b * v;
        }
    }
}

/// The dot products of `s` with four columns of the same length, with
/// four independent partial sums per column (one vector register each):
/// one load of `s` serves all four.
#[inline(always)]
fn dots4(s: &[f64], columns: [&[f64]; 4]) -> [f64; 4] {
    let whole = s.len() / 4 * 4;
    let [c0, c1, c2, c3] = columns.map(|c| &c[..whole]);
    let mut lanes = [[0.0f64; 4]; 4];
    for ((((s4, x0), x1), x2), x3) in s[..whole]
        .chunks_exact(4)
        .zip(c0.chunks_exact(4))
        .zip(c1.chunks_exact(4))
        .zip(c2.chunks_exact(4))
        .zip(c3.chunks_exact(4))
    {
        for l in 0..4 {
            lanes[0][l] += s4[l] * x0[l];
            lanes[1][l] += s4[l] * x1[l];
            lanes[2][l] += s4[l] * x2[l];
            lanes[3][l] += s4[l] * x3[l];
        }
    }
    let mut out = [0.0; 4];
    for ((o, lane), column) in out.iter_mut().zip(lanes).zip(columns) {
        *o = (lane[0] + lane[2]) + (lane[1] + lane[3]) + tail(s, column, whole);
    }
    out
}

/// Σ s_i x_i with four independent partial sums (vectorizable).
#[inline(always)]
fn dot(s: &[f64], x: &[f64]) -> f64 {
    let whole = s.len() / 4 * 4;
    let mut lane = [0.0f64; 4];
    for (s4, x4) in s[..whole].chunks_exact(4).zip(x[..whole].chunks_exact(4)) {
        for l in 0..4 {
            lane[l] += s4[l] * x4[l];
        }
    }
    (lane[0] + lane[2]) + (lane[1] + lane[3]) + tail(s, x, whole)
}

/// Σ s_i x_i over the rows from `whole` on (fewer than four).
#[inline(always)]
fn tail(s: &[f64], x: &[f64], whole: usize) -> f64 {
    s[whole..]
        .iter()
        .zip(&x[whole..s.len()])
        .map(|(a, b)| a * b)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) (a linear congruential sequence).
    fn values(n: usize, seed: u64) -> Vec<f64> {
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

    #[test]
    fn equals_the_row_by_row_sums() {
        // Rows spanning several blocks and a partial one.
        let (k, rows) = (5, 3 * BLOCK + 37);
        let columns: Vec<Vec<f64>> = (0..k).map(|j| values(rows, j as u64 + 1)).collect();
        let w: Vec<f64> = values(rows, 99).iter().map(|v| v.abs()).collect();
        let z = values(rows, 7);
        let wz: Vec<f64> = w.iter().zip(&z).map(|(a, b)| a * b).collect();
        let x: Vec<&[f64]> = columns.iter().map(|c| c.as_slice()).collect();
        let (mut gram, mut rhs) = (vec![1.0; k * k], vec![2.0; k]);
        add_weighted_gram(&mut gram, &mut rhs, &x, &w, Some(&wz));
        for i in 0..k {
            let expected: f64 = 2.0 + (0..rows).map(|r| wz[r] * x[i][r]).sum::<f64>();
            assert!((rhs[i] - expected).abs() < 1e-12 * rows as f64, "{i}");
            for j in 0..k {
                let expected: f64 = 1.0 + (0..rows).map(|r| w[r] * x[i][r] * x[j][r]).sum::<f64>();
                assert!((gram[i * k + j] - expected).abs() < 1e-12 * rows as f64);
                assert_eq!(gram[i * k + j], gram[j * k + i]);
            }
        }
        // No rows add nothing; no wz leaves the right-hand side alone.
        let before = gram.clone();
        add_weighted_gram(&mut gram, &mut rhs, &x, &[], None);
        assert_eq!(gram, before);
    }

    #[test]
    fn rows_of_weight_zero_add_nothing_even_when_not_finite() {
        let a = [1.0, f64::NAN, 2.0, f64::INFINITY];
        let b = [3.0, 4.0, -1.0, 5.0];
        let w = [1.0, 0.0, 2.0, 0.0];
        let x: [&[f64]; 2] = [&a, &b];
        assert!(masked_where_unweighted(&x, &[1.0, 1.0, 1.0, 1.0]).is_none());
        let masked = masked_where_unweighted(&x, &w).unwrap();
        let masked: Vec<&[f64]> = masked.iter().map(|c| c.as_slice()).collect();
        let (mut gram, mut rhs) = (vec![0.0; 4], vec![0.0; 2]);
        add_weighted_gram(&mut gram, &mut rhs, &masked, &w, None);
        // Rows 0 and 2 only: 1·(1, 3)(1, 3)ᵀ + 2·(2, −1)(2, −1)ᵀ.
        assert_eq!(gram, [9.0, -1.0, -1.0, 11.0]);
    }

    #[test]
    fn linear_predictor_adds_each_column_in_order() {
        let rows = 37;
        let columns: Vec<Vec<f64>> = (0..3).map(|j| values(rows, j + 11)).collect();
        let x: Vec<&[f64]> = columns.iter().map(|c| c.as_slice()).collect();
        let offset = values(rows, 5);
        let beta = [0.5, -2.0, 3.25];
        let mut eta = vec![0.0; rows];
        linear_predictor(&mut eta, &offset, &x, &beta);
        for r in 0..rows {
            let expected =
                ((offset[r] + beta[0] * x[0][r]) + beta[1] * x[1][r]) + beta[2] * x[2][r];
            assert_eq!(eta[r], expected, "{r}");
        }
    }

    #[test]
    fn dots_cover_the_tail() {
        for n in [0, 1, 3, 4, 5, 8, 23] {
            let a = values(n, 3);
            let b = values(n, 4);
            let c = values(n, 5);
            let d = values(n, 6);
            let e = values(n, 8);
            let expected = |y: &[f64]| a.iter().zip(y).map(|(x, y)| x * y).sum::<f64>();
            let four = dots4(&a, [&b, &c, &d, &e]);
            for (got, y) in four.into_iter().zip([&b, &c, &d, &e]) {
                assert!((got - expected(y)).abs() < 1e-14, "{n}");
            }
            assert!((dot(&a, &b) - expected(&b)).abs() < 1e-14, "{n}");
        }
    }
}
