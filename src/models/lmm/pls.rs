//! The linear mixed model of one grouping factor from per-group
//! cross-products, as lme4's penalized least squares (Bates et al. 2015,
//! "Fitting Linear Mixed-Effects Models Using lme4", section 3).
//!
//! With random effects b_i = Λ u_i (u_i ~ N(0, σ² I), Λ lower-triangular
//! with parameters θ), the profiled REML and ML deviances depend on the data
//! only through X'X, X'y, y'y, Z_i'Z_i, Z_i'X_i, Z_i'y_i and n: for each θ,
//! L_i L_i' = Λ'Z_i'Z_iΛ + I, then block elimination gives R_X, β̂, the
//! penalized residual sum of squares r² and so the deviance. The
//! coordinator minimises it over θ (Nelder–Mead, as lme4 offers, run to
//! the last digits and restarted at its optimum).

use nalgebra::{DMatrix, DVector};

/// One group's cross-products (X: p fixed-effect columns, Z: q random).
#[derive(Debug, Clone)]
pub(crate) struct GroupMoments {
    pub level: String,
    pub ztz: DMatrix<f64>,
    pub ztx: DMatrix<f64>,
    pub zty: DVector<f64>,
}

/// Every group's cross-products and their totals.
#[derive(Debug, Clone)]
pub(crate) struct Moments {
    pub groups: Vec<GroupMoments>,
    pub n: f64,
    pub xtx: DMatrix<f64>,
    pub xty: DVector<f64>,
    pub yty: f64,
}

/// Λ from θ: the lower triangle filled column by column (lme4's order).
pub(crate) fn lambda(theta: &[f64], q: usize) -> DMatrix<f64> {
    let mut l = DMatrix::zeros(q, q);
    let mut k = 0;
    for j in 0..q {
        for i in j..q {
            l[(i, j)] = theta[k];
            k += 1;
        }
    }
    l
}

/// The solution of the penalized least squares at one θ.
#[derive(Debug, Clone)]
pub(crate) struct Solution {
    pub beta: DVector<f64>,
    /// The spherical random effects u_i, per group.
    pub u: Vec<DVector<f64>>,
    /// log |L_θ|².
    pub log_det_l: f64,
    /// log |R_X|².
    pub log_det_rx: f64,
    /// R_X'R_X (= X'V⁻¹X σ²), for the fixed effects' covariance.
    pub rx_rx: DMatrix<f64>,
    /// Penalized residual sum of squares r².
    pub pwrss: f64,
    /// Per group, (L_i L_i')⁻¹, for the conditional variances.
    pub l_inverse: Vec<DMatrix<f64>>,
}

/// Solves the PLS problem at θ; `None` if a factor is not positive definite.
pub(crate) fn solve(m: &Moments, theta: &[f64], q: usize) -> Option<Solution> {
    let lam = lambda(theta, q);
    let p = m.xtx.nrows();
    let mut rx_rx = m.xtx.clone();
    let mut rhs = m.xty.clone();
    let mut pwrss = m.yty;
    let mut log_det_l = 0.0;
    let mut blocks = Vec::with_capacity(m.groups.len());
    for g in &m.groups {
        let a = lam.transpose() * &g.ztz * &lam + DMatrix::identity(q, q);
        let chol = a.clone().cholesky()?;
        let l = chol.l();
        log_det_l += 2.0 * l.diagonal().iter().map(|d| d.ln()).sum::<f64>();
        // c_u = L⁻¹ Λ' Z'y, R_ZX = L⁻¹ Λ' Z'X.
        let cu = l.solve_lower_triangular(&(lam.transpose() * &g.zty))?;
        let rzx = l.solve_lower_triangular(&(lam.transpose() * &g.ztx))?;
        rx_rx -= rzx.transpose() * &rzx;
        rhs -= rzx.transpose() * &cu;
        pwrss -= cu.dot(&cu);
        blocks.push((l, cu, rzx, chol.inverse()));
    }
    let rx = rx_rx.clone().cholesky()?;
    let log_det_rx = 2.0 * rx.l().diagonal().iter().map(|d| d.ln()).sum::<f64>();
    let beta = rx.solve(&rhs);
    // r² = y'y − Σ|c_u|² − c_β'c_β, with c_β'c_β = rhs' (R_X'R_X)⁻¹ rhs.
    pwrss -= rhs.dot(&beta);
    let mut u = Vec::with_capacity(blocks.len());
    let mut l_inverse = Vec::with_capacity(blocks.len());
    for (l, cu, rzx, inverse) in blocks {
        let ui = l.transpose().solve_upper_triangular(&(cu - rzx * &beta))?;
        u.push(ui);
        l_inverse.push(inverse);
    }
    let _ = p;
    Some(Solution {
        beta,
        u,
        log_det_l,
        log_det_rx,
        rx_rx,
        pwrss: pwrss.max(f64::MIN_POSITIVE),
        l_inverse,
    })
}

/// The profiled deviance (REML criterion with `reml`), as lme4's `devfun`.
pub(crate) fn deviance(m: &Moments, s: &Solution, reml: bool) -> f64 {
    let p = m.xtx.nrows() as f64;
    let two_pi = 2.0 * std::f64::consts::PI;
    if reml {
        let df = m.n - p;
        s.log_det_l + s.log_det_rx + df * (1.0 + (two_pi * s.pwrss / df).ln())
    } else {
        s.log_det_l + m.n * (1.0 + (two_pi * s.pwrss / m.n).ln())
    }
}

/// Which θ entries are diagonal elements of Λ (bounded below by 0).
pub(crate) fn diagonal_positions(q: usize) -> Vec<usize> {
    let mut positions = Vec::new();
    let mut k = 0;
    for j in 0..q {
        for i in j..q {
            if i == j {
                positions.push(k);
            }
            k += 1;
        }
    }
    positions
}

/// The minimum of the profiled deviance: (θ, deviance, evaluations).
pub(crate) fn optimise(m: &Moments, q: usize, reml: bool) -> (Vec<f64>, f64, usize) {
    let diagonal = diagonal_positions(q);
    // A column of Λ and its negative give the same ΛΛ': the deviance is
    // even in each diagonal element, so the bound θ_jj ≥ 0 is kept by
    // optimising over |θ_jj|.
    let fold = |theta: &[f64]| {
        let mut t = theta.to_vec();
        for &d in &diagonal {
            t[d] = t[d].abs();
        }
        t
    };
    let objective = |theta: &[f64]| {
        let t = fold(theta);
        solve(m, &t, q).map_or(f64::INFINITY, |s| deviance(m, &s, reml))
    };
    // lme4's start: Λ = I.
    let mut start = vec![0.0; q * (q + 1) / 2];
    for &d in &diagonal {
        start[d] = 1.0;
    }
    let mut evaluations = 0;
    let mut best = start;
    let mut value = f64::INFINITY;
    for step in [0.5, 0.05, 0.005] {
        let (x, f, n) = nelder_mead(&objective, &best, step);
        evaluations += n;
        let improved = f < value;
        best = x;
        value = f;
        if !improved && step < 0.5 {
            break;
        }
    }
    (fold(&best), value, evaluations)
}

/// Nelder–Mead from `start` with an initial simplex of `step`, to the
/// last digits of the objective.
fn nelder_mead(f: &dyn Fn(&[f64]) -> f64, start: &[f64], step: f64) -> (Vec<f64>, f64, usize) {
    let k = start.len();
    let mut points: Vec<Vec<f64>> = vec![start.to_vec()];
    for i in 0..k {
        let mut p = start.to_vec();
        p[i] += if p[i] == 0.0 {
            step
        } else {
            step * p[i].abs().max(0.1)
        };
        points.push(p);
    }
    let mut values: Vec<f64> = points.iter().map(|p| f(p)).collect();
    let mut evaluations = k + 1;
    for _ in 0..20_000 {
        let mut order: Vec<usize> = (0..=k).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        points = order.iter().map(|&i| points[i].clone()).collect();
        values = order.iter().map(|&i| values[i]).collect();
        let spread = (values[k] - values[0]).abs();
        let size = points[1..]
            .iter()
            .flat_map(|p| p.iter().zip(&points[0]).map(|(a, b)| (a - b).abs()))
            .fold(0.0, f64::max);
        if spread <= 1e-15 * values[0].abs().max(1e-300) && size <= 1e-11 {
            break;
        }
        let centroid: Vec<f64> = (0..k)
            .map(|j| points[..k].iter().map(|p| p[j]).sum::<f64>() / k as f64)
            .collect();
        let along = |t: f64| -> Vec<f64> {
            centroid
                .iter()
                .zip(&points[k])
                .map(|(c, w)| c + t * (c - w))
                .collect()
        };
        let reflected = along(1.0);
        let fr = f(&reflected);
        evaluations += 1;
        if fr < values[0] {
            let expanded = along(2.0);
            let fe = f(&expanded);
            evaluations += 1;
            if fe < fr {
                points[k] = expanded;
                values[k] = fe;
            } else {
                points[k] = reflected;
                values[k] = fr;
            }
        } else if fr < values[k - 1] {
            points[k] = reflected;
            values[k] = fr;
        } else {
            let (t, bound) = if fr < values[k] {
                (0.5, fr)
            } else {
                (-0.5, values[k])
            };
            let contracted = along(t);
            let fc = f(&contracted);
            evaluations += 1;
            if fc < bound {
                points[k] = contracted;
                values[k] = fc;
            } else {
                for i in 1..=k {
                    points[i] = points[i]
                        .iter()
                        .zip(&points[0])
                        .map(|(p, b)| b + 0.5 * (p - b))
                        .collect();
                    values[i] = f(&points[i]);
                    evaluations += 1;
                }
            }
        }
    }
    let best = (0..=k)
        .min_by(|&a, &b| values[a].total_cmp(&values[b]))
        .expect("a simplex");
    (points[best].clone(), values[best], evaluations)
}

#[cfg(test)]
mod tests;
