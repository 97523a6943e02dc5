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

/// How many Bernoulli(γ/k) draws [`bernoulli_exp_fixed`] makes: a draw
/// needs more with probability below 1/23! ≈ 4 · 10⁻²³.
const FIXED_BERNOULLI_DRAWS: u64 = 24;

/// Bernoulli(exp(−num/den)) for γ = num/den in [0, 1], as
/// [`bernoulli_exp`] (the first k with A_k = 0 is odd with probability
/// exp(−γ)), but drawing A_1 … A_24 whatever the first failure, so that
/// its work does not tell its result (the fifteenth outside attack
/// counted K draws for "K is odd").
pub fn bernoulli_exp_fixed<R: RngCore + CryptoRng + ?Sized>(
    rng: &mut R,
    num: u64,
    den: u64,
) -> bool {
    assert!(den >= 1 && num <= den, "γ = {num}/{den} outside [0, 1]");
    let mut first_failure = 0u64;
    let mut k: u64 = 1;
    while k <= FIXED_BERNOULLI_DRAWS || first_failure == 0 {
        let a = bernoulli_rational(rng, num as u128, den as u128 * k as u128);
        if !a && first_failure == 0 {
            first_failure = k;
        }
        k += 1;
    }
    first_failure % 2 == 1
}

/// A sample of the discrete Laplace distribution of scale `scale`:
/// P(Z = z) ∝ exp(−|z| / scale) (CKS Algorithm 2, with t/s = num/den).
pub fn discrete_laplace<R: RngCore + CryptoRng + ?Sized>(rng: &mut R, scale: Scale) -> i64 {
    loop {
        let y = geometric(rng, scale) as i64;
        let negative = uniform_below(rng, 2) == 1;
        if negative && y == 0 {
            continue;
        }
        return if negative { -y } else { y };
    }
}

/// How many Bernoulli(exp(−1)) draws [`geometric`] makes for its high
/// part at the least: more are needed with probability exp(−48).
const GEOMETRIC_STEPS: u32 = 48;

/// A sample of the geometric distribution of parameter q = exp(−1/scale):
/// P(G = k) = (1 − q) q^k, k ≥ 0 (the magnitude step of CKS Algorithm 2:
/// a geometric of exp(−1/num) by parts, divided by den).
pub fn geometric<R: RngCore + CryptoRng + ?Sized>(rng: &mut R, scale: Scale) -> u64 {
    let (t, s) = (scale.num, scale.den);
    assert!(t >= 1 && s >= 1, "a geometric scale needs num, den ≥ 1");
    loop {
        let u = uniform_below(rng, t);
        if !bernoulli_exp_fixed(rng, u, t) {
            continue;
        }
        // v: the Bernoulli(exp(−1)) successes before the first failure,
        // drawn out to GEOMETRIC_STEPS draws whatever v (the rest discarded)
        // so that the loop's time does not tell ⌊G / scale⌋.
        let mut v: u64 = 0;
        let mut failed = false;
        let mut draws = 0;
        while !failed || draws < GEOMETRIC_STEPS {
            let success = bernoulli_exp_fixed(rng, 1, 1);
            if !failed {
                if success {
                    v += 1;
                } else {
                    failed = true;
                }
            }
            draws += 1;
        }
        let x = u as u128 + t as u128 * v as u128;
        return u64::try_from(x / s as u128).unwrap_or(u64::MAX);
    }
}

/// How many steps a Pólya urn of [`polya`] runs for a geometric of
/// `scale`, whatever the geometric G: ⌈23 · scale⌉ + 1. G exceeds it with
/// probability exp(−23) ≈ 10⁻¹⁰ (P(G ≥ m) = q^m, q = exp(−1/scale)),
/// and only then does the urn run longer.
pub fn urn_steps(scale: Scale) -> u64 {
    let steps = (23 * scale.num as u128).div_ceil(scale.den as u128) + 1;
    u64::try_from(steps).unwrap_or(u64::MAX)
}

/// A sample of the Pólya (negative binomial) distribution NB(1/`parts`, q)
/// with q = exp(−1/scale): P(X = k) = Γ(k + r) / (k! Γ(r)) (1 − q)^r q^k
/// for r = 1/parts. The sum of `parts` independent samples is a geometric
/// of parameter q (NB(1, q)): the negative binomial adds up in r for one q.
///
/// Exact, from uniform integers only: G ~ NB(1, q) ([`geometric`]) split
/// by a Pólya urn that starts with weights r and 1 − r and adds 1 to the
/// colour drawn, G times: its draws of the first colour are
/// beta-binomial(G; r, 1 − r), and that share of a NB(1, q) is NB(r, q)
/// (conditioned on their sum, independent negative binomials of one q are
/// Dirichlet-multinomial). In integers: weights `1` and `parts − 1`, each
/// draw adding `parts`.
///
/// The urn runs [`urn_steps`] steps however large G is (the steps after
/// the G-th draw and discard alike), so the time a site takes to draw its
/// share does not tell G, which bounds the share (the fourteenth outside
/// attack timed the setup: the fastest quarter of shares were six times
/// smaller than the slowest). The cost is about 23 · scale draws.
pub fn polya<R: RngCore + CryptoRng + ?Sized>(rng: &mut R, scale: Scale, parts: u64) -> u64 {
    assert!(parts >= 1, "a Pólya share of 0 parts");
    let g = geometric(rng, scale);
    if parts == 1 {
        return g;
    }
    let step = parts as u128;
    let (mut first, mut other) = (1u128, step - 1);
    let mut drawn = 0u64;
    for i in 0..g.max(urn_steps(scale)) {
        let total = first + other;
        let pick = match u64::try_from(total) {
            Ok(total) => (uniform_below(rng, total) as u128) < first,
            Err(_) => bernoulli_rational(rng, first, total),
        };
        // Past the G-th draw, the same work with nothing kept.
        let live = u128::from(i < g);
        let picked = u128::from(pick) * live;
        first += picked * step;
        other += (live - picked) * step;
        drawn += picked as u64;
    }
    drawn
}

/// One site's share of discrete Laplace noise of scale `scale` split into
/// `parts`: the difference of two independent [`polya`] samples. The sum
/// of `parts` independent shares is discrete Laplace of that scale (the
/// difference of two independent geometrics of one q), and the sum of
/// more than `parts` is that plus independent noise (Balle, Bell, Gascón
/// and Nissim, "Private Summation in the Multi-Message Shuffle Model",
/// CCS 2020, §4; Goryczka and Xiong, IEEE TDSC 2017).
pub fn laplace_share<R: RngCore + CryptoRng + ?Sized>(
    rng: &mut R,
    scale: Scale,
    parts: u64,
) -> i64 {
    let a = polya(rng, scale, parts);
    let b = polya(rng, scale, parts);
    (a as i128 - b as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
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
    fn the_fixed_bernoulli_exp_has_its_mean_and_draws_alike_whatever_its_result() {
        let mut rng = Counting(ChaCha20Rng::seed_from_u64(2), 0);
        for (num, den) in [(0, 1), (1, 3), (1, 1), (7, 9)] {
            let n = 100_000;
            let mut words = [0u64; 2];
            let mut counts = [0u64; 2];
            for _ in 0..n {
                let before = rng.1;
                let hit = bernoulli_exp_fixed(&mut rng, num, den) as usize;
                words[hit] += rng.1 - before;
                counts[hit] += 1;
            }
            let hits = counts[1] as f64;
            let p = (-(num as f64) / den as f64).exp();
            let se = (p * (1.0 - p) / n as f64).sqrt().max(1e-9);
            assert!(
                ((hits / n as f64) - p).abs() <= 4.0 * se,
                "{num}/{den}: {hits}"
            );
            // 24 draws of one word each (the rejection of a uniform below
            // 24 · den is rarer than 1 in 10^17), whatever the result.
            for (w, c) in words.iter().zip(counts) {
                if c > 0 {
                    assert_eq!(*w, 24 * c, "{num}/{den}");
                }
            }
        }
    }

    #[test]
    fn a_geometric_takes_the_same_work_whatever_its_value() {
        // The fifteenth outside attack counted 134.5 words for a geometric
        // of 0 against 136.4 for 3 or more. Now: the same per outer try.
        let scale = Scale { num: 1, den: 1 };
        let mut rng = Counting(ChaCha20Rng::seed_from_u64(3), 0);
        let mut by_value = std::collections::BTreeMap::<u64, (u64, u64)>::new();
        for _ in 0..20_000 {
            let before = rng.1;
            let g = geometric(&mut rng, scale).min(3);
            let e = by_value.entry(g).or_default();
            e.0 += rng.1 - before;
            e.1 += 1;
        }
        let per: Vec<f64> = by_value
            .values()
            .map(|(w, c)| *w as f64 / *c as f64)
            .collect();
        let (least, most) = per
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(most - least < 0.05 * least, "{by_value:?}");
    }

    #[test]
    fn shares_of_a_discrete_laplace_add_up_to_it() {
        // The sum of `parts` shares against the discrete Laplace pmf, and
        // one share's variance: 1/parts of the whole's.
        let mut rng = ChaCha20Rng::seed_from_u64(21);
        for (scale, parts) in [(Scale { num: 2, den: 1 }, 3), (Scale { num: 7, den: 2 }, 5)] {
            let draws: Vec<i64> = (0..20_000)
                .map(|_| {
                    (0..parts)
                        .map(|_| laplace_share(&mut rng, scale, parts))
                        .sum()
                })
                .collect();
            let (stat, df) = chi_square(&draws, |z| scale.pmf(z));
            assert!(
                stat < critical(df),
                "{parts} shares of scale {scale:?}: chi-square {stat:.1} on {df} df (critical {:.1})",
                critical(df)
            );
            let shares: Vec<f64> = (0..40_000)
                .map(|_| laplace_share(&mut rng, scale, parts) as f64)
                .collect();
            let mean = shares.iter().sum::<f64>() / shares.len() as f64;
            let var =
                shares.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / (shares.len() - 1) as f64;
            let want = scale.variance() / parts as f64;
            assert!(
                (var / want - 1.0).abs() < 0.05,
                "share variance {var} vs {want}"
            );
            assert!(
                mean.abs() < 4.0 * (want / shares.len() as f64).sqrt(),
                "mean {mean}"
            );
        }
    }

    /// A generator that counts the words it hands out.
    struct Counting(ChaCha20Rng, u64);

    impl RngCore for Counting {
        fn next_u32(&mut self) -> u32 {
            self.1 += 1;
            self.0.next_u32()
        }
        fn next_u64(&mut self) -> u64 {
            self.1 += 1;
            self.0.next_u64()
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            self.1 += 1;
            self.0.fill_bytes(dest)
        }
    }

    impl CryptoRng for Counting {}

    #[test]
    fn a_polya_share_takes_the_same_draws_whatever_its_size() {
        // The work of a share (the words it draws) does not follow the
        // geometric it splits: without the fixed urn, the fewest and most
        // words over these draws differed by thousands, as G does.
        let scale = Scale { num: 1000, den: 1 };
        let steps = urn_steps(scale);
        assert_eq!(steps, 23_001);
        let mut rng = Counting(ChaCha20Rng::seed_from_u64(9), 0);
        let mut runs = Vec::new();
        for _ in 0..300 {
            let before = rng.1;
            let share = polya(&mut rng, scale, 3);
            runs.push((share, rng.1 - before));
        }
        let words: Vec<u64> = runs.iter().map(|r| r.1).collect();
        let (least, most) = (*words.iter().min().unwrap(), *words.iter().max().unwrap());
        assert!(least >= steps, "{least} words");
        assert!(most - least < 400, "{least} to {most} words");
        // Small and large shares alike.
        let shares: Vec<u64> = runs.iter().map(|r| r.0).collect();
        assert!(shares.iter().any(|&s| s < 50) && shares.iter().any(|&s| s > 1000));
        // Urn steps for scales of a fraction, and past u64.
        assert_eq!(urn_steps(Scale { num: 7, den: 2 }), 82);
        assert_eq!(
            urn_steps(Scale {
                num: u64::MAX,
                den: 1
            }),
            u64::MAX
        );
    }

    #[test]
    fn a_polya_sample_has_the_negative_binomial_pmf() {
        // NB(r, q): P(k) = Γ(k + r)/(k! Γ(r)) (1 − q)^r q^k, by the ratio
        // P(k + 1)/P(k) = q (k + r)/(k + 1).
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let scale = Scale { num: 3, den: 1 };
        let (q, r) = ((-1.0f64 / 3.0).exp(), 1.0 / 4.0);
        let pmf = |k: i64| {
            let mut p = (1.0 - q).powf(r);
            for j in 0..k {
                p *= q * (j as f64 + r) / (j as f64 + 1.0);
            }
            p
        };
        let n = 40_000;
        let mut counts = [0f64; 8];
        for _ in 0..n {
            let k = polya(&mut rng, scale, 4) as usize;
            if k < counts.len() {
                counts[k] += 1.0;
            }
        }
        for (k, seen) in counts.iter().enumerate() {
            let want = n as f64 * pmf(k as i64);
            assert!(
                (seen - want).abs() <= 5.0 * want.sqrt() + 1.0,
                "P({k}): {seen} draws, expected {want:.0}"
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
