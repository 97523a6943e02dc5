//! Exact samplers of Canonne, Kamath and Steinke (2020), "The Discrete
//! Gaussian for Differential Privacy": Bernoulli(exp(−γ)) for a rational γ
//! and the discrete Laplace distribution of a rational scale, using only
//! uniform integers from an injected cryptographically secure generator —
//! no floating-point arithmetic, so none of the attacks on floating-point
//! Laplace noise (Mironov 2012) apply.
//!
//! Production code passes a generator seeded from the operating system; a
//! seed is only ever given in tests.

use rand_core::{CryptoRng, RngCore};

/// A rational scale `num / den` (both ≥ 1) of a discrete Laplace distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    pub num: u64,
    pub den: u64,
}

impl Scale {
    /// The scale as a float (for reporting only; sampling is exact).
    pub fn value(&self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The variance of the discrete Laplace distribution of this scale t:
    /// with p = exp(−1/t), 2p / (1 − p)².
    pub fn variance(&self) -> f64 {
        let p = (-1.0 / self.value()).exp();
        2.0 * p / ((1.0 - p) * (1.0 - p))
    }

    /// Its probability mass at z: (1 − p)/(1 + p) · p^|z|.
    pub fn pmf(&self, z: i64) -> f64 {
        let p = (-1.0 / self.value()).exp();
        (1.0 - p) / (1.0 + p) * p.powf(z.unsigned_abs() as f64)
    }
}

/// A uniform integer in `[0, n)`, `n ≥ 1`, by rejection (no modulo bias).
pub fn uniform_below<R: RngCore + CryptoRng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    assert!(n >= 1, "uniform_below(0)");
    // The largest multiple of n that fits, as a rejection threshold.
    let zone = u64::MAX - (u64::MAX % n + 1) % n;
    loop {
        let v = rng.next_u64();
        if v <= zone {
            return v % n;
        }
    }
}

/// Bernoulli(num / den), `0 ≤ num ≤ den`, `den ≥ 1`.
pub fn bernoulli_rational<R: RngCore + CryptoRng + ?Sized>(
    rng: &mut R,
    num: u128,
    den: u128,
) -> bool {
    debug_assert!(num <= den && den >= 1);
    // den may exceed u64 (γ / k with large k): sample in u128 by rejection.
    if den <= u64::MAX as u128 {
        return (uniform_below(rng, den as u64) as u128) < num;
    }
    let zone = u128::MAX - (u128::MAX % den + 1) % den;
    loop {
        let v = ((rng.next_u64() as u128) << 64) | rng.next_u64() as u128;
        if v <= zone {
            return v % den < num;
        }
    }
}

/// Bernoulli(exp(−num/den)), `den ≥ 1` (CKS Algorithm 1).
pub fn bernoulli_exp<R: RngCore + CryptoRng + ?Sized>(rng: &mut R, num: u64, den: u64) -> bool {
    assert!(den >= 1);
    if num <= den {
        // γ ∈ [0, 1]: the first k with A_k = 0 is odd with probability exp(−γ).
        let mut k: u128 = 1;
        loop {
            if !bernoulli_rational(rng, num as u128, den as u128 * k) {
                return k % 2 == 1;
            }
            k += 1;
        }
    }
    for _ in 0..num / den {
        if !bernoulli_exp(rng, 1, 1) {
            return false;
        }
    }
    bernoulli_exp(rng, num % den, den)
}

/// A sample of the discrete Laplace distribution of scale `scale`:
/// P(Z = z) ∝ exp(−|z| / scale) (CKS Algorithm 2, with t/s = num/den).
pub fn discrete_laplace<R: RngCore + CryptoRng + ?Sized>(rng: &mut R, scale: Scale) -> i64 {
    let (t, s) = (scale.num, scale.den);
    assert!(
        t >= 1 && s >= 1,
        "a discrete Laplace scale needs num, den ≥ 1"
    );
    loop {
        let u = uniform_below(rng, t);
        if !bernoulli_exp(rng, u, t) {
            continue;
        }
        let mut v: u64 = 0;
        while bernoulli_exp(rng, 1, 1) {
            v += 1;
        }
        let x = u as u128 + t as u128 * v as u128;
        let y = (x / s as u128) as i64;
        let negative = uniform_below(rng, 2) == 1;
        if negative && y == 0 {
            continue;
        }
        return if negative { -y } else { y };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    /// Chi-square of `draws` samples against the pmf, over the values
    /// with an expected count ≥ 5 and one pooled tail cell; returns
    /// (statistic, degrees of freedom).
    fn chi_square(draws: &[i64], pmf: impl Fn(i64) -> f64) -> (f64, usize) {
        let n = draws.len() as f64;
        let mut counts = std::collections::BTreeMap::<i64, f64>::new();
        for &z in draws {
            *counts.entry(z).or_default() += 1.0;
        }
        let mut z_max = 0;
        while n * pmf(z_max + 1) >= 5.0 {
            z_max += 1;
        }
        let (mut stat, mut cells, mut tail_expected, mut tail_seen) = (0.0, 0, 1.0, n);
        for z in -z_max..=z_max {
            let expected = n * pmf(z);
            let seen = counts.get(&z).copied().unwrap_or(0.0);
            stat += (seen - expected).powi(2) / expected;
            cells += 1;
            tail_expected -= pmf(z);
            tail_seen -= seen;
        }
        let tail_expected = n * tail_expected;
        stat += (tail_seen - tail_expected).powi(2) / tail_expected;
        (stat, cells) // cells + 1 cells, cells degrees of freedom
    }

    /// The 0.999 quantile of chi-square with `df` degrees of freedom
    /// (Wilson–Hilferty), so a correct sampler fails 1 time in 1000 seeds.
    fn critical(df: usize) -> f64 {
        let k = df as f64;
        let z = 3.090;
        k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
    }

    #[test]
    fn discrete_laplace_matches_its_pmf_over_200000_draws() {
        let mut rng = ChaCha20Rng::seed_from_u64(14);
        for scale in [
            Scale { num: 1, den: 1 },
            Scale { num: 7, den: 2 },
            Scale { num: 3, den: 10 },
        ] {
            let draws: Vec<i64> = (0..200_000)
                .map(|_| discrete_laplace(&mut rng, scale))
                .collect();
            let (stat, df) = chi_square(&draws, |z| scale.pmf(z));
            assert!(
                stat < critical(df),
                "scale {scale:?}: chi-square {stat:.1} on {df} df (critical {:.1})",
                critical(df)
            );
            let mean = draws.iter().sum::<i64>() as f64 / draws.len() as f64;
            let var = draws
                .iter()
                .map(|&z| (z as f64 - mean).powi(2))
                .sum::<f64>()
                / (draws.len() - 1) as f64;
            assert!(
                (var / scale.variance() - 1.0).abs() < 0.03,
                "variance {var} vs {}",
                scale.variance()
            );
        }
    }

    #[test]
    fn bernoulli_exp_has_its_mean() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for (num, den) in [(0, 1), (1, 3), (1, 1), (5, 2)] {
            let n = 100_000;
            let hits = (0..n).filter(|_| bernoulli_exp(&mut rng, num, den)).count() as f64;
            let p = (-(num as f64) / den as f64).exp();
            let se = (p * (1.0 - p) / n as f64).sqrt().max(1e-9);
            assert!(
                ((hits / n as f64) - p).abs() <= 4.0 * se,
                "{num}/{den}: {hits}"
            );
        }
    }

    #[test]
    fn large_scales_sample_without_overflow() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let scale = Scale {
            num: 1 << 40,
            den: 3 << 18,
        };
        let draws: Vec<f64> = (0..20_000)
            .map(|_| discrete_laplace(&mut rng, scale) as f64)
            .collect();
        let var = draws.iter().map(|z| z * z).sum::<f64>() / draws.len() as f64;
        assert!((var / scale.variance() - 1.0).abs() < 0.1, "{var}");
    }
}
