//! The weighted Gram matrix of a batch's columns, the inner loop of every
//! model round at a site: X'WX (and X'Wz beside it) for IRLS, the
//! curvature block of `sgd_newton`.
//!
//! Callers pass blocks of rows small enough to stay in the L2 cache (k
//! columns × [`BLOCK`] rows). Only the upper triangle of the symmetric
//! result is computed (k(k+1)/2 dot products instead of a general k × k
//! matrix product) and mirrored once per batch. The dot products run for
//! two rows of the triangle and four columns at a time (eight sums in
//! registers, from seven loads per four rows, the weights applied in
//! registers), each with four independent partial sums in one vector
//! ([`crate::lanes`]: AVX2 where the processor has it, the same bits
//! either way), which stay apart until the batch's end ([`GramLanes`]).
//! The order of the additions depends only on the rows, never on threads.

use crate::lanes::{self, LANES, Lanes, Vec4, WithLanes};

/// Rows per cache block: long enough that the dot products' loops run
/// hundreds of times per call, short enough that a block of a dozen
/// columns, read once from memory for η, is still in the L2 cache for
/// X'WX (2048 rows ran a round's kernels 12% faster than 256).
pub const BLOCK: usize = 2048;

/// Adds Σ_r w_r x_r x_rᵀ to `gram` (k × k, row-major, kept symmetric)
/// and, when `wz` is given, Σ_r wz_r x_r to `rhs`. `x` holds k columns of
/// `w.len()` rows each; a row whose weight is zero adds nothing. Callers
/// that add many blocks keep a [`GramLanes`] across them instead.
pub fn add_weighted_gram(
    gram: &mut [f64],
    rhs: &mut [f64],
    x: &[&[f64]],
    w: &[f64],
    wz: Option<&[f64]>,
) {
    let mut sums = GramLanes::new(x.len());
    sums.add(x, w, wz);
    sums.add_upper_to(gram, rhs);
    mirror_upper(gram, x.len());
}

/// Four partial sums of one entry: row r of a block adds to lane r mod 4.
type LaneSums = [f64; LANES];

/// X'WX (upper triangle) and X'Wz over any number of blocks of rows, each
/// entry kept as four partial sums ([`LaneSums`]) until
/// [`GramLanes::add_upper_to`] adds them out: one vector addition per
/// entry and block instead of a sum across lanes.
#[derive(Debug)]
pub struct GramLanes {
    k: usize,
    gram: Vec<LaneSums>,
    rhs: Vec<LaneSums>,
}

impl GramLanes {
    /// Zero sums for k columns.
    pub fn new(k: usize) -> Self {
        Self {
            k,
            gram: vec![[0.0; LANES]; k * k],
            rhs: vec![[0.0; LANES]; k],
        }
    }

    /// Zero sums again, for the same number of columns, in the same memory.
    pub fn clear(&mut self) {
        self.gram.fill([0.0; LANES]);
        self.rhs.fill([0.0; LANES]);
    }

    /// The number of columns.
    pub fn columns(&self) -> usize {
        self.k
    }

    /// Adds Σ_r w_r x_r x_rᵀ (upper triangle) and, when `wz` is given,
    /// Σ_r wz_r x_r, in blocks of [`BLOCK`] rows (a caller that has just
    /// computed the weights of a block passes that block, which is still
    /// in the cache), with AVX2 where the processor has it
    /// ([`lanes::dispatch`]; the same bits either way).
    pub fn add(&mut self, x: &[&[f64]], w: &[f64], wz: Option<&[f64]>) {
        debug_assert_eq!(x.len(), self.k);
        lanes::dispatch(UpperGram {
            sums: self,
            x,
            w,
            wz,
        })
    }

    /// Adds each entry's four partial sums, (l0 + l2) + (l1 + l3), to the
    /// upper triangle (j ≥ i) of `gram` (k × k, row-major) and to `rhs`.
    pub fn add_upper_to(&self, gram: &mut [f64], rhs: &mut [f64]) {
        let k = self.k;
        debug_assert_eq!(gram.len(), k * k);
        let total = |l: &LaneSums| (l[0] + l[2]) + (l[1] + l[3]);
        for i in 0..k {
            for j in i..k {
                gram[i * k + j] += total(&self.gram[i * k + j]);
            }
        }
        for (r, l) in rhs.iter_mut().zip(&self.rhs) {
            *r += total(l);
        }
    }
}

/// The arguments of [`GramLanes::add`], run over the lanes chosen.
struct UpperGram<'a> {
    sums: &'a mut GramLanes,
    x: &'a [&'a [f64]],
    w: &'a [f64],
    wz: Option<&'a [f64]>,
}

impl WithLanes for UpperGram<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Lanes>(self, lanes: L) {
        let UpperGram { sums, x, w, wz } = self;
        upper_gram(lanes, sums, x, w, wz);
    }
}

#[inline(always)]
fn upper_gram<L: Lanes>(
    lanes: L,
    sums: &mut GramLanes,
    x: &[&[f64]],
    w: &[f64],
    wz: Option<&[f64]>,
) {
    let k = x.len();
    let GramLanes { gram, rhs, .. } = sums;
    let mut start = 0;
    while start < w.len() {
        let rows = start..(start + BLOCK).min(w.len());
        // Two rows of the triangle at a time (i and i + 1), so that each
        // load of a column serves two dot products; w x_i is formed in
        // registers.
        let mut i = 0;
        while i + 1 < k {
            add_triangle_rows(lanes, gram, i, Some(w), [x[i], x[i + 1]], x, rows.clone());
            i += 2;
        }
        if i < k {
            add_triangle_rows(lanes, gram, i, Some(w), [x[i]], x, rows.clone());
        }
        // X'Wz: the weighted working responses against every column.
        if let Some(wz) = wz {
            let mut j = 0;
            while j < k {
                let width = (k - j).min(4);
                tile_sums(
                    lanes,
                    None,
                    [wz],
                    &x[j..j + width],
                    rows.clone(),
                    |_, c, sum| add_lanes(&mut rhs[j + c], sum),
                );
                j += width;
            }
        }
        start = rows.end;
    }
}

/// Adds a tile's lane sums to an entry's.
#[inline(always)]
fn add_lanes<L: Lanes>(entry: &mut LaneSums, sum: Vec4<L>) {
    *entry = (Vec4::of(sum.lanes(), entry) + sum).to_array();
}

/// Adds to rows i..i + R of the upper triangle of `gram` (k × k lane
/// sums, k = `x.len()`) the dot products of `s` (row i + p's left-hand
/// column) with the columns x_j, j ≥ i, over `rows`, four columns at a
/// time.
#[inline(always)]
fn add_triangle_rows<L: Lanes, const R: usize>(
    lanes: L,
    gram: &mut [LaneSums],
    i: usize,
    w: Option<&[f64]>,
    s: [&[f64]; R],
    x: &[&[f64]],
    rows: std::ops::Range<usize>,
) {
    let k = x.len();
    let mut j = i;
    while j < k {
        let width = (k - j).min(4);
        tile_sums(lanes, w, s, &x[j..j + width], rows.clone(), |p, c, sum| {
            // (i + 1, i) is below the diagonal: mirrored later.
            if j + c >= i + p {
                add_lanes(&mut gram[(i + p) * k + j + c], sum);
            }
        });
        j += width;
    }
}

/// Adds Σ_r (x_r − mean)(x_r − mean)ᵀ to `gram` (k × k, row-major, kept
/// symmetric): the centered co-moments of a batch given its column means,
/// one block of rows at a time, centered into a buffer that stays in the
/// L1 cache (no copy of the batch), on the lanes [`lanes::dispatch`] picks.
pub fn add_centered_gram(gram: &mut [f64], x: &[&[f64]], mean: &[f64]) {
    let mut sums = GramLanes::new(x.len());
    lanes::dispatch(CenteredGram {
        gram: &mut sums.gram,
        x,
        mean,
    });
    sums.add_upper_to(gram, &mut []);
    mirror_upper(gram, x.len());
}

/// The arguments of [`add_centered_gram`].
struct CenteredGram<'a> {
    gram: &'a mut [LaneSums],
    x: &'a [&'a [f64]],
    mean: &'a [f64],
}

impl WithLanes for CenteredGram<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Lanes>(self, lanes: L) {
        let CenteredGram { gram, x, mean } = self;
        let k = x.len();
        let rows = x.first().map_or(0, |c| c.len());
        let mut centered = vec![[0.0; BLOCK]; k];
        let mut start = 0;
        while start < rows {
            let end = (start + BLOCK).min(rows);
            let n = end - start;
            for ((c, column), m) in centered.iter_mut().zip(x).zip(mean) {
                for (c, v) in c[..n].iter_mut().zip(&column[start..end]) {
                    *c = v - m;
                }
            }
            let block: Vec<&[f64]> = centered.iter().map(|c| &c[..n]).collect();
            let mut i = 0;
            while i + 1 < k {
                add_triangle_rows(lanes, gram, i, None, [block[i], block[i + 1]], &block, 0..n);
                i += 2;
            }
            if i < k {
                add_triangle_rows(lanes, gram, i, None, [block[i]], &block, 0..n);
            }
            start = end;
        }
    }
}

/// The dot products of the `R` columns `s` with up to four columns of
/// `x` (over `rows` of them), passed to `add` as (row of s, column, lane
/// sums).
#[inline(always)]
fn tile_sums<L: Lanes, const R: usize>(
    lanes: L,
    w: Option<&[f64]>,
    s: [&[f64]; R],
    x: &[&[f64]],
    rows: std::ops::Range<usize>,
    mut add: impl FnMut(usize, usize, Vec4<L>),
) {
    let column = |c: usize| &x[c][rows.clone()];
    let (w, s) = (w.map(|w| &w[rows.clone()]), s.map(|s| &s[rows.clone()]));
    // One copy of the tile per width, so that its sums stay in registers.
    macro_rules! run {
        ($($c:expr),+) => {
            for (p, row) in tile(lanes, w, s, [$(column($c)),+]).iter().enumerate() {
                row.iter().enumerate().for_each(|(c, &v)| add(p, c, v));
            }
        };
    }
    match x.len() {
        4 => run!(0, 1, 2, 3),
        3 => run!(0, 1, 2),
        2 => run!(0, 1),
        1 => run!(0),
        _ => unreachable!("tiles are one to four columns wide"),
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
    // Most blocks have no weight of zero: a test without a branch per
    // row (it vectorizes) settles those.
    if !w.iter().fold(false, |any, &w| any | (w == 0.0)) {
        return None;
    }
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

/// η = offset + Σ_j β_j x_j over a block of rows, adding the columns in
/// their order (so η is the same whatever the block size), sixteen rows at
/// a time as four vectors kept in registers across the columns.
pub fn linear_predictor(eta: &mut [f64], offset: &[f64], x: &[&[f64]], beta: &[f64]) {
    lanes::dispatch(LinearPredictor {
        eta,
        offset,
        x,
        beta,
    })
}

/// Groups of four rows whose η [`linear_predictor`] sums side by side.
const GROUPS: usize = 4;

/// The arguments of [`linear_predictor`], run over the lanes chosen.
struct LinearPredictor<'a> {
    eta: &'a mut [f64],
    offset: &'a [f64],
    x: &'a [&'a [f64]],
    beta: &'a [f64],
}

impl WithLanes for LinearPredictor<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Lanes>(self, lanes: L) {
        let LinearPredictor {
            eta,
            offset,
            x,
            beta,
        } = self;
        let whole = eta.len() / LANES * LANES;
        // Four groups of four rows at a time: each row's sum is the same
        // chain of additions, but four chains run side by side instead of
        // each waiting on its own previous addition.
        let mut r = 0;
        while r + GROUPS * LANES <= whole {
            let mut e: [Vec4<L>; GROUPS] =
                std::array::from_fn(|g| Vec4::load(lanes, offset, r + g * LANES));
            for (column, &b) in x.iter().zip(beta) {
                let b = Vec4::splat(lanes, b);
                for (g, e) in e.iter_mut().enumerate() {
                    *e += b * Vec4::load(lanes, column, r + g * LANES);
                }
            }
            for (g, e) in e.into_iter().enumerate() {
                e.store(eta, r + g * LANES);
            }
            r += GROUPS * LANES;
        }
        for r in (r..whole).step_by(LANES) {
            let mut e = Vec4::load(lanes, offset, r);
            for (column, &b) in x.iter().zip(beta) {
                e += Vec4::splat(lanes, b) * Vec4::load(lanes, column, r);
            }
            e.store(eta, r);
        }
        for r in whole..eta.len() {
            let mut e = offset[r];
            for (column, b) in x.iter().zip(beta) {
                e += b * column[r];
            }
            eta[r] = e;
        }
    }
}

/// The dot products of the `R` columns `s` with the `C` columns `x`, all
/// of the same length: R × C sums held in vector registers (R × C ≤ 8),
/// each as four partial sums (row r goes to lane r mod 4), so one load of
/// a column serves R products. Each sum is added in the same order
/// whatever R, C and the vector unit.
#[inline(always)]
fn tile<L: Lanes, const R: usize, const C: usize>(
    lanes: L,
    w: Option<&[f64]>,
    s: [&[f64]; R],
    x: [&[f64]; C],
) -> [[Vec4<L>; C]; R] {
    let rows = s.first().map_or(0, |s| s.len());
    let groups = rows / LANES;
    let whole = groups * LANES;
    // Groups of four rows, every column cut to the same number of groups
    // so that the loads need no bounds checks.
    let (s_groups, x_groups) = (
        s.map(|c| &c.as_chunks::<LANES>().0[..groups]),
        x.map(|c| &c.as_chunks::<LANES>().0[..groups]),
    );
    let w_groups = w.map(|w| &w.as_chunks::<LANES>().0[..groups]);
    let mut sums = [[Vec4::splat(lanes, 0.0); C]; R];
    for g in 0..groups {
        let xs = x_groups.map(|c| Vec4::of(lanes, &c[g]));
        let w = w_groups.map(|w| Vec4::of(lanes, &w[g]));
        for (p, sp) in s_groups.iter().enumerate() {
            let sp = Vec4::of(lanes, &sp[g]);
            let sp = match w {
                Some(w) => sp * w,
                None => sp,
            };
            for (c, xc) in xs.iter().enumerate() {
                sums[p][c] += sp * *xc;
            }
        }
    }
    if whole < rows {
        // The last rows (fewer than four), each in its own lane.
        for p in 0..R {
            for c in 0..C {
                let mut lanes_of = sums[p][c].to_array();
                for r in whole..rows {
                    let sp = w.map_or(s[p][r], |w| s[p][r] * w[r]);
                    lanes_of[r - whole] += sp * x[c][r];
                }
                sums[p][c] = Vec4::of(lanes, &lanes_of);
            }
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::Portable;
    use crate::testing::values;

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
    fn vector_units_give_the_same_bits() {
        // An odd number of columns (a lone last row of the triangle) and
        // a partial block; the run-time choice against plain arrays.
        let (k, rows) = (11, 2 * BLOCK + 13);
        let columns: Vec<Vec<f64>> = (0..k).map(|j| values(rows, j as u64 + 21)).collect();
        let w: Vec<f64> = values(rows, 5).iter().map(|v| v.abs()).collect();
        let wz = values(rows, 6);
        let x: Vec<&[f64]> = columns.iter().map(|c| c.as_slice()).collect();
        let (mut chosen, mut chosen_rhs) = (vec![0.0; k * k], vec![0.0; k]);
        let mut sums = GramLanes::new(k);
        sums.add(&x, &w, Some(&wz));
        sums.add_upper_to(&mut chosen, &mut chosen_rhs);
        let (mut portable, mut portable_rhs) = (vec![0.0; k * k], vec![0.0; k]);
        let mut sums = GramLanes::new(k);
        upper_gram(Portable, &mut sums, &x, &w, Some(&wz));
        sums.add_upper_to(&mut portable, &mut portable_rhs);
        assert_eq!(chosen, portable);
        assert_eq!(chosen_rhs, portable_rhs);
        assert!(chosen[k - 1..].iter().any(|&v| v != 0.0));
    }

    #[test]
    fn centered_gram_equals_the_row_by_row_sums() {
        let (k, rows) = (7, 2 * BLOCK + 5);
        let columns: Vec<Vec<f64>> = (0..k).map(|j| values(rows, j as u64 + 31)).collect();
        let x: Vec<&[f64]> = columns.iter().map(|c| c.as_slice()).collect();
        let mean: Vec<f64> = x
            .iter()
            .map(|c| c.iter().sum::<f64>() / rows as f64)
            .collect();
        let mut gram = vec![0.5; k * k];
        add_centered_gram(&mut gram, &x, &mean);
        for i in 0..k {
            for j in 0..k {
                let expected: f64 = 0.5
                    + (0..rows)
                        .map(|r| (x[i][r] - mean[i]) * (x[j][r] - mean[j]))
                        .sum::<f64>();
                assert!(
                    (gram[i * k + j] - expected).abs() < 1e-12 * rows as f64,
                    "{i} {j}"
                );
                assert_eq!(gram[i * k + j], gram[j * k + i]);
            }
        }
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
        // Two groups of sixteen rows, one vector of four, one row alone.
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
            let four = tile(Portable, None, [&a], [&b, &c, &d, &e]);
            for (got, y) in four[0].map(Vec4::sum).into_iter().zip([&b, &c, &d, &e]) {
                assert!((got - expected(y)).abs() < 1e-14, "{n}");
            }
            // Every shape of tile: each sum bit for bit as one alone.
            let alone = |s: &[f64], y: &[f64]| tile(Portable, None, [s], [y])[0][0].sum();
            let two = tile(Portable, None, [&a, &e], [&b, &c, &d, &a]).map(|r| r.map(Vec4::sum));
            let three = tile(Portable, None, [&a, &e], [&b, &c, &d]).map(|r| r.map(Vec4::sum));
            for (t, y) in [&b, &c, &d, &a].into_iter().enumerate() {
                assert_eq!(two[0][t], alone(&a, y), "{n}");
                assert_eq!(two[1][t], alone(&e, y), "{n}");
                if t < 3 {
                    assert_eq!(three[1][t], alone(&e, y), "{n}");
                }
            }
        }
    }
}
