//! The PLS fit from per-group cross-products against lme4::lmer (fitted to
//! the last digits) on testdata/reference/hetero.csv.

// The references keep R's 17 printed digits.
#![allow(clippy::excessive_precision, clippy::inconsistent_digit_grouping)]

use super::*;

/// hetero.csv's first `k` sites: (group, y, x1, x2) per row, grouped by
/// `column` (0 site, 1 ward).
fn rows(k: usize, column: usize) -> Vec<(String, f64, f64, f64)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/reference/hetero.csv");
    let text = std::fs::read_to_string(path).unwrap();
    let sites: Vec<String> = (1..=k).map(|i| format!("s{i}")).collect();
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| sites.contains(&f[0].to_string()))
        .map(|f| {
            let num = |i: usize| f[i].parse::<f64>().unwrap();
            (f[column].to_string(), num(2), num(3), num(4))
        })
        .collect()
}

/// The moments of X = [1, x1, x2] and Z = the columns `z` of X.
fn moments(rows: &[(String, f64, f64, f64)], z: &[usize]) -> Moments {
    let mut levels: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    levels.sort();
    levels.dedup();
    let q = z.len();
    let mut m = Moments {
        groups: Vec::new(),
        n: 0.0,
        xtx: DMatrix::zeros(3, 3),
        xty: DVector::zeros(3),
        yty: 0.0,
    };
    for level in levels {
        let mut g = GroupMoments {
            level: level.clone(),
            ztz: DMatrix::zeros(q, q),
            ztx: DMatrix::zeros(q, 3),
            zty: DVector::zeros(q),
        };
        for r in rows.iter().filter(|r| r.0 == level) {
            let x = [1.0, r.2, r.3];
            let y = r.1;
            m.n += 1.0;
            m.yty += y * y;
            for i in 0..3 {
                m.xty[i] += x[i] * y;
                for j in 0..3 {
                    m.xtx[(i, j)] += x[i] * x[j];
                }
            }
            for (a, &za) in z.iter().enumerate() {
                g.zty[a] += x[za] * y;
                for j in 0..3 {
                    g.ztx[(a, j)] += x[za] * x[j];
                }
                for (b, &zb) in z.iter().enumerate() {
                    g.ztz[(a, b)] += x[za] * x[zb];
                }
            }
        }
        m.groups.push(g);
    }
    m
}

fn close(what: &str, got: f64, want: f64, tolerance: f64) {
    let err = (got - want).abs() / want.abs();
    assert!(
        err <= tolerance,
        "{what}: got {got:.12e}, lme4 {want:.12e} ({err:e})"
    );
}

#[test]
fn random_intercept_by_site_matches_lmer() {
    let m = moments(&rows(7, 0), &[0]);
    let (theta, criterion, _) = optimise(&m, 1, true);
    // lmer(y ~ x1 + x2 + (1 | site), REML, bobyqa rhoend = 1e-12).
    close("REML criterion", criterion, 3156.1066405100332, 1e-12);
    close("theta", theta[0], 0.547_623_667_498_946_42, 1e-6);
    let s = solve(&m, &theta, 1).unwrap();
    close("(Intercept)", s.beta[0], 5.437_481_033_835_163_1, 1e-6);
    close("x1", s.beta[1], 0.089_748_507_705_030_858, 1e-6);
    let (_, ml, _) = optimise(&m, 1, false);
    close("ML deviance", ml, 3144.400_852_129_005_2, 1e-12);
}

#[test]
fn random_intercept_by_ward_matches_lmer() {
    let m = moments(&rows(3, 1), &[0]);
    let (theta, criterion, _) = optimise(&m, 1, true);
    close("REML criterion", criterion, 1061.329_355_554_273, 1e-12);
    close("theta", theta[0], 0.458_523_122_264_850_09, 1e-6);
}

#[test]
fn correlated_slope_reaches_lmer_s_optimum_or_lower() {
    let m = moments(&rows(7, 0), &[0, 1]);
    let (_, criterion, _) = optimise(&m, 2, true);
    // lmer's tight fit is singular (correlation −1); its criterion:
    let lme4 = 3131.354_982_763_858_1;
    assert!(criterion <= lme4 + 1e-6, "{criterion} vs lme4 {lme4}");
    close("REML criterion", criterion, lme4, 1e-9);
}
