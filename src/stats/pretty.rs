//! R's `pretty()` (its C routine `R_pretty` with `pretty.default`'s
//! defaults) and `nclass.Sturges`: how R's `hist()` picks its breaks by
//! default — about `ceiling(log2(n) + 1)` bins of a width of 1, 2 or 5
//! times a power of ten, covering the data's range.

/// `nclass.Sturges`: `ceiling(log2(n) + 1)` for `n` values.
pub(crate) fn sturges(n: i64) -> i64 {
    ((n.max(1) as f64).log2() + 1.0).ceil() as i64
}

/// `pretty(c(lo, up), n = n, min.n = min_n)`: (first break, last break,
/// number of intervals); the breaks are equally spaced between the two.
pub(crate) fn pretty(lo: f64, up: f64, n: i64, min_n: i64) -> (f64, f64, i64) {
    const ROUNDING_EPS: f64 = 1e-10;
    // pretty.default: shrink.sml = 0.75, high.u.bias = 1.5,
    // u5.bias = 0.5 + 1.5 * high.u.bias, f.min = 2^-20.
    let (shrink_sml, h) = (0.75, 1.5);
    let h5 = 0.5 + 1.5 * h;
    let f_min = 2f64.powi(-20);
    let ndiv = n.max(0);
    let dx = up - lo;
    let (mut cell, i_small) = if dx == 0.0 && up == 0.0 {
        (1.0, true)
    } else {
        let cell = lo.abs().max(up.abs());
        let mut u = 1.0
            + if h5 >= 1.5 * h + 0.5 {
                1.0 / (1.0 + h)
            } else {
                1.5 / (1.0 + h5)
            };
        u *= ndiv.max(1) as f64 * f64::EPSILON;
        (cell, dx < cell * u * 3.0)
    };
    if i_small {
        if cell > 10.0 {
            cell = 9.0 + cell / 10.0;
        }
        cell *= shrink_sml;
        if min_n > 1 {
            cell /= min_n as f64;
        }
    } else {
        cell = dx;
        if ndiv > 1 {
            cell /= ndiv as f64;
        }
    }
    let subsmall = f_min * f64::MIN_POSITIVE;
    if cell < subsmall {
        cell = subsmall;
    } else if cell > f64::MAX / 1.25 {
        cell = f64::MAX / 1.25;
    }
    let base = 10f64.powf(cell.log10().floor());
    let mut unit = base;
    let candidate = 2.0 * base;
    if candidate - cell < h * (cell - unit) {
        unit = candidate;
        let candidate = 5.0 * base;
        if candidate - cell < h5 * (cell - unit) {
            unit = candidate;
            let candidate = 10.0 * base;
            if candidate - cell < h * (cell - unit) {
                unit = candidate;
            }
        }
    }
    let mut ns = (lo / unit + ROUNDING_EPS).floor();
    let mut nu = (up / unit - ROUNDING_EPS).ceil();
    while ns * unit > lo + ROUNDING_EPS * unit {
        ns -= 1.0;
    }
    while nu * unit < up - ROUNDING_EPS * unit {
        nu += 1.0;
    }
    let mut k = (0.5 + nu - ns) as i64;
    if k < min_n {
        let missing = min_n - k;
        if ns >= 0.0 {
            nu += (missing / 2) as f64;
            ns -= (missing / 2 + missing % 2) as f64;
        } else {
            ns -= (missing / 2) as f64;
            nu += (missing / 2 + missing % 2) as f64;
        }
        k = min_n;
    }
    let (mut first, mut last) = (lo, up);
    if ns * unit < first {
        first = ns * unit;
    }
    if nu * unit > last {
        last = nu * unit;
    }
    (first, last, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaks_as_r_pretty_gives_them() {
        // R 4.2.2: pretty(c(lo, up), n = n, min.n = 1): first, last, count.
        let cases = [
            ((15.3, 42.1, 9), (15.0, 45.0, 6)),
            ((0.001, 0.0123, 7), (0.0, 0.014, 7)),
            ((-3.2, 7.9, 11), (-4.0, 8.0, 12)),
            ((100.0, 100.5, 8), (100.0, 100.5, 10)),
            ((5.0, 5.0, 3), (0.0, 5.0, 1)),
            ((18.04, 44.93, 12), (18.0, 46.0, 14)),
            ((0.0, 1022.0, 9), (0.0, 1100.0, 11)),
        ];
        for ((lo, up, n), (first, last, k)) in cases {
            let got = pretty(lo, up, n, 1);
            assert!(
                (got.0 - first).abs() < 1e-12 && (got.1 - last).abs() < 1e-12 && got.2 == k,
                "pretty({lo}, {up}, {n}) = {got:?}, R: {first} {last} {k}"
            );
        }
        // lung's age: 228 values, 9 classes, breaks 35, 40, ..., 85.
        assert_eq!(sturges(228), 9);
        assert_eq!(pretty(39.0, 82.0, 9, 1), (35.0, 85.0, 10));
    }
}
