//! Tail probabilities and quantiles of the normal, Student t, χ² and F
//! distributions to R's precision (≤ 1e-12 relative), for every p-value and
//! confidence bound fedsql prints.
//!
//! statrs finds the t quantile by an inverse incomplete beta good to ~1e-8
//! and the F and χ² quantiles by bisection, and its F upper tail loses the
//! digits of a tiny p-value in `1 − x`. Here each tail probability is
//! computed on the side where it is small (the incomplete beta by its
//! continued fraction on the convergent side, with R's `lbeta` for large
//! arguments; the t tail as R's `pt`), and each quantile starts from statrs's
//! and is polished by safeguarded Newton steps on that tail, so it is as
//! exact as the tail probability itself: ≤ 1e-12 relative, except the t
//! tail for df above ~1e5, where the continued fraction's rounding grows to
//! ~1e-11 (R itself switches to a normal approximation above 4e5).

use statrs::distribution::{
    ChiSquared, Continuous, ContinuousCDF, FisherSnedecor, Normal, StudentsT,
};
use statrs::function::gamma::{gamma_lr, gamma_ur, ln_gamma};

const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

/// Stirling's remainder ln Γ(x) − ((x − ½) ln x − x + ln √(2π)), x ≥ 10.
fn ln_gamma_correction(x: f64) -> f64 {
    // Bernoulli terms B_{2k} / (2k (2k − 1) x^{2k−1}), k = 1..8: the 8th is
    // below 1e-17 at x = 10.
    const C: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360_360.0,
        1.0 / 156.0,
        -3617.0 / 122_400.0,
    ];
    let x2 = 1.0 / (x * x);
    let mut sum = 0.0;
    for c in C.iter().rev() {
        sum = sum * x2 + c;
    }
    sum / x
}

/// ln B(a, b), as R's `lbeta` (no cancellation of large ln Γ values).
pub fn ln_beta(a: f64, b: f64) -> f64 {
    let (p, q) = (a.min(b), a.max(b));
    if p >= 10.0 {
        let corr = ln_gamma_correction(p) + ln_gamma_correction(q) - ln_gamma_correction(p + q);
        -0.5 * q.ln()
            + LN_SQRT_2PI
            + corr
            + (p - 0.5) * (p / (p + q)).ln()
            + q * (-p / (p + q)).ln_1p()
    } else if q >= 10.0 {
        let corr = ln_gamma_correction(q) - ln_gamma_correction(p + q);
        ln_gamma(p) + corr + p - p * (p + q).ln() + (q - 0.5) * (-p / (p + q)).ln_1p()
    } else {
        ln_gamma(p) + ln_gamma(q) - ln_gamma(p + q)
    }
}

/// The continued fraction of I_x(a, b) (Lentz), for x < (a + 1)/(a + b + 2).
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..100_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        for aa in [
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ] {
            d = 1.0 + aa * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + aa / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() <= 1e-16 {
            break;
        }
    }
    h
}

/// (I_x(a, b), 1 − I_x(a, b)), each accurate where it is small; `y` = 1 − x
/// exactly as the caller knows it.
pub fn beta_tails(a: f64, b: f64, x: f64, y: f64) -> (f64, f64) {
    if x <= 0.0 {
        return (0.0, 1.0);
    }
    if y <= 0.0 {
        return (1.0, 0.0);
    }
    let ln_x = if x > 0.5 { (-y).ln_1p() } else { x.ln() };
    let ln_y = if y > 0.5 { (-x).ln_1p() } else { y.ln() };
    let front = (a * ln_x + b * ln_y - ln_beta(a, b)).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        let lower = front * beta_fraction(a, b, x) / a;
        (lower, 1.0 - lower)
    } else {
        let upper = front * beta_fraction(b, a, y) / b;
        (1.0 - upper, upper)
    }
}

/// P(Z ≤ x) for the standard normal (libm's erfc: statrs's is off by ~1e-12).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// P(Z > x) for the standard normal.
pub fn normal_sf(x: f64) -> f64 {
    normal_cdf(-x)
}

/// P(T ≤ t) with `df` degrees of freedom, as R's `pt`.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if df.is_infinite() {
        return normal_cdf(t);
    }
    if df > 4e5 {
        // R's pt: the normal approximation is exact to double precision here.
        let v = 1.0 / (4.0 * df);
        return normal_cdf(t * (1.0 - v) / (1.0 + t * t * 2.0 * v).sqrt());
    }
    if t.is_infinite() {
        return if t < 0.0 { 0.0 } else { 1.0 };
    }
    let t2 = t * t;
    let (x, y) = if t2 > df {
        let r = df / t2;
        (r / (1.0 + r), 1.0 / (1.0 + r))
    } else {
        (df / (df + t2), t2 / (df + t2))
    };
    // P(|T| > |t|) = I_x(df/2, 1/2).
    let (both_tails, _) = beta_tails(df / 2.0, 0.5, x, y);
    let half = 0.5 * both_tails;
    if t <= 0.0 { half } else { 1.0 - half }
}

/// P(T > t) with `df` degrees of freedom.
pub fn t_sf(t: f64, df: f64) -> f64 {
    t_cdf(-t, df)
}

/// P(X > x) for χ² with `df` degrees of freedom.
pub fn chi_squared_sf(x: f64, df: f64) -> f64 {
    if x.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if x <= 0.0 {
        return 1.0;
    }
    if x.is_infinite() {
        return 0.0;
    }
    gamma_ur(df / 2.0, x / 2.0)
}

/// P(X ≤ x) for χ² with `df` degrees of freedom.
pub fn chi_squared_cdf(x: f64, df: f64) -> f64 {
    if x.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if x <= 0.0 {
        return 0.0;
    }
    if x.is_infinite() {
        return 1.0;
    }
    gamma_lr(df / 2.0, x / 2.0)
}

/// (P(F ≤ f), P(F > f)) for F with (`d1`, `d2`) degrees of freedom, as R's `pf`.
fn f_tails(f: f64, d1: f64, d2: f64) -> (f64, f64) {
    if f <= 0.0 {
        return (0.0, 1.0);
    }
    if f.is_infinite() {
        return (1.0, 0.0);
    }
    let denominator = d1 * f + d2;
    beta_tails(d1 / 2.0, d2 / 2.0, d1 * f / denominator, d2 / denominator)
}

/// P(F > f) for F with (`d1`, `d2`) degrees of freedom.
pub fn f_sf(f: f64, d1: f64, d2: f64) -> f64 {
    if f.is_nan() || !(d1 > 0.0 && d2 > 0.0) {
        return f64::NAN;
    }
    f_tails(f, d1, d2).1
}

/// P(F ≤ f) for F with (`d1`, `d2`) degrees of freedom.
pub fn f_cdf(f: f64, d1: f64, d2: f64) -> f64 {
    if f.is_nan() || !(d1 > 0.0 && d2 > 0.0) {
        return f64::NAN;
    }
    f_tails(f, d1, d2).0
}

/// Solves cdf(x) = p (p < ½) or sf(x) = 1 − p (p ≥ ½) from `start` by
/// Newton steps, bisecting whenever a step leaves the bracket.
fn polish(
    p: f64,
    start: f64,
    support_low: f64,
    cdf: impl Fn(f64) -> f64,
    sf: impl Fn(f64) -> f64,
    pdf: impl Fn(f64) -> f64,
) -> f64 {
    // residual(x) increases with x and is 0 at the quantile.
    let residual = |x: f64| {
        if p < 0.5 {
            cdf(x) - p
        } else {
            (1.0 - p) - sf(x)
        }
    };
    let (mut low, mut high) = (support_low, f64::INFINITY);
    let mut x = if start.is_finite() && start > support_low {
        start
    } else if support_low.is_finite() {
        support_low + 1.0
    } else {
        0.0
    };
    for _ in 0..200 {
        let r = residual(x);
        if r == 0.0 {
            return x;
        }
        if r < 0.0 {
            low = x;
        } else {
            high = x;
        }
        let density = pdf(x);
        let mut next = x - r / density;
        if !(next.is_finite() && next > low && next < high) {
            next = match (low.is_finite(), high.is_finite()) {
                (true, true) => 0.5 * (low + high),
                (true, false) => 2.0 * x.abs().max(1.0) + x,
                (false, true) => x - 2.0 * x.abs().max(1.0),
                (false, false) => 0.0,
            };
        }
        let converged = (next - x).abs() <= 4.0 * f64::EPSILON * x.abs().max(f64::MIN_POSITIVE);
        x = next;
        if converged || (high - low).abs() <= 2.0 * f64::EPSILON * x.abs() {
            break;
        }
    }
    x
}

fn check_probability(p: f64) -> Option<f64> {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        Some(f64::NAN)
    } else {
        None
    }
}

/// The standard normal quantile, as R's `qnorm`.
pub fn normal_quantile(p: f64) -> f64 {
    if let Some(nan) = check_probability(p) {
        return nan;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let normal = Normal::standard();
    let start = normal.inverse_cdf(p);
    polish(p, start, f64::NEG_INFINITY, normal_cdf, normal_sf, |x| {
        normal.pdf(x)
    })
}

/// The Student t quantile with `df` degrees of freedom, as R's `qt`.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if let Some(nan) = check_probability(p) {
        return nan;
    }
    if df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if df.is_infinite() {
        return normal_quantile(p);
    }
    let dist = StudentsT::new(0.0, 1.0, df).expect("df > 0");
    let start = dist.inverse_cdf(p);
    polish(
        p,
        start,
        f64::NEG_INFINITY,
        |t| t_cdf(t, df),
        |t| t_sf(t, df),
        |t| dist.pdf(t),
    )
}

/// The χ² quantile with `df` degrees of freedom, as R's `qchisq`.
pub fn chi_squared_quantile(p: f64, df: f64) -> f64 {
    if let Some(nan) = check_probability(p) {
        return nan;
    }
    if df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if p == 0.0 {
        return 0.0;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let dist = ChiSquared::new(df).expect("df > 0");
    let start = dist.inverse_cdf(p);
    polish(
        p,
        start,
        0.0,
        |x| chi_squared_cdf(x, df),
        |x| chi_squared_sf(x, df),
        |x| dist.pdf(x),
    )
}

/// The F quantile with (`d1`, `d2`) degrees of freedom, as R's `qf`.
pub fn f_quantile(p: f64, d1: f64, d2: f64) -> f64 {
    if let Some(nan) = check_probability(p) {
        return nan;
    }
    if !(d1 > 0.0 && d2 > 0.0) {
        return f64::NAN;
    }
    if p == 0.0 {
        return 0.0;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    let dist = FisherSnedecor::new(d1, d2).expect("df > 0");
    let start = dist.inverse_cdf(p);
    polish(
        p,
        start,
        0.0,
        |f| f_cdf(f, d1, d2),
        |f| f_sf(f, d1, d2),
        |f| dist.pdf(f),
    )
}

#[cfg(test)]
mod tests;
