//! `exp` and `ln` over slices, in a form the compiler vectorizes: no
//! branches and no calls per value, so that a fit round's one exponential
//! and one logarithm per row cost a few cycles each.
//!
//! The arithmetic is fdlibm's (`e_exp.c`, `e_log.c`: range reduction by
//! ln 2, then a rational or polynomial approximation on the reduced
//! argument), accurate to within one unit in the last place; the unit
//! tests check that against the standard library over the whole range a
//! fit uses. Every value is computed alone, so the results do not depend
//! on the slice's length or alignment, nor on the instruction set (no
//! fused multiply-adds are used).

// fdlibm's constants, digit for digit as it publishes them.
#![allow(clippy::excessive_precision)]

const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
const INV_LN2: f64 = std::f64::consts::LOG2_E;
/// 1.5 × 2⁵²: adding it rounds a double below 2⁵¹ to the nearest integer.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// Largest and smallest arguments whose exponential is a normal double.
const EXP_MAX: f64 = 709.0;
const EXP_MIN: f64 = -708.0;

/// e^x for x within [`EXP_MIN`], [`EXP_MAX`] (clamped outside it, which a
/// caller's own clamps make moot); NaN stays NaN.
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    const P1: f64 = 1.666_666_666_666_660_190_37e-01;
    const P2: f64 = -2.777_777_777_701_559_338_42e-03;
    const P3: f64 = 6.613_756_321_437_934_361_17e-05;
    const P4: f64 = -1.653_390_220_546_525_153_90e-06;
    const P5: f64 = 4.138_136_797_057_238_460_39e-08;
    let x = x.clamp(EXP_MIN, EXP_MAX);
    let rounded = x * INV_LN2 + ROUNDER;
    let k = rounded - ROUNDER;
    let hi = x - k * LN2_HI;
    let lo = k * LN2_LO;
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (P1 + rr * (P2 + rr * (P3 + rr * (P4 + rr * P5))));
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    // 2^k from its exponent bits: `rounded`'s low bits hold k (no
    // float-to-integer conversion, which would not vectorize).
    let scale = f64::from_bits(rounded.to_bits().wrapping_add(1023) << 52);
    y * scale
}

/// ln x for a positive normal x (what a fit passes: μ, 1 − μ, 1 + e^η
/// clamped away from 0); for 0, subnormals, negatives or NaN the result is
/// not the standard library's, so callers keep those out.
#[inline(always)]
pub fn ln(x: f64) -> f64 {
    const LG1: f64 = 6.666_666_666_666_735_130e-01;
    const LG2: f64 = 3.999_999_999_940_941_908e-01;
    const LG3: f64 = 2.857_142_874_366_239_149e-01;
    const LG4: f64 = 2.222_219_843_214_978_396e-01;
    const LG5: f64 = 1.818_357_216_161_805_012e-01;
    const LG6: f64 = 1.531_383_769_920_937_332e-01;
    const LG7: f64 = 1.479_819_860_511_658_591e-01;
    // Split x = 2^k · m with m in [√2/2, √2) (fdlibm's reduction on the
    // whole word: offset the exponent so that m ≥ √2 carries into k).
    const OFFSET: u64 = 0x3ff0_0000_0000_0000 - 0x3fe6_a09e_0000_0000;
    let bits = x.to_bits().wrapping_add(OFFSET);
    // k as a double through the bits of 2⁵² + exponent (vectorizes).
    let k = f64::from_bits(0x4330_0000_0000_0000 | (bits >> 52)) - 4_503_599_627_370_496.0 - 1023.0;
    let m_bits = (bits & 0x000f_ffff_ffff_ffff) + 0x3fe6_a09e_0000_0000;
    let f = f64::from_bits(m_bits) - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    let hfsq = 0.5 * f * f;
    k * LN2_HI - ((hfsq - (s * (hfsq + r) + k * LN2_LO)) - f)
}

/// ln x for any x, as the standard library gives it at the edges (0, ∞,
/// negatives, NaN), still without branches; subnormal x are not exact.
#[inline(always)]
pub fn ln_any(x: f64) -> f64 {
    let l = ln(x);
    let l = if x == f64::INFINITY { x } else { l };
    let l = if x == 0.0 { f64::NEG_INFINITY } else { l };
    if x >= 0.0 { l } else { f64::NAN }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units of the last place.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    fn samples() -> impl Iterator<Item = f64> {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        (0..200_000).map(move |_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        })
    }

    #[test]
    fn exp_is_within_one_ulp() {
        for u in samples() {
            for x in [(u - 0.5) * 1400.0, (u - 0.5) * 80.0, (u - 0.5) * 2.0] {
                assert!(
                    ulps(exp(x), x.exp()) <= 1,
                    "exp({x:e}) {} vs {}",
                    exp(x),
                    x.exp()
                );
            }
        }
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f64::NAN).is_nan());
    }

    #[test]
    fn ln_is_within_one_ulp() {
        for u in samples() {
            for x in [u + 1e-300, u * 1e12 + 1e-9, 0.5 + u, 1.0 - u * 1e-8] {
                assert!(
                    ulps(ln(x), x.ln()) <= 1,
                    "ln({x:e}) {} vs {}",
                    ln(x),
                    x.ln()
                );
            }
        }
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln_any(0.0), f64::NEG_INFINITY);
        assert_eq!(ln_any(f64::INFINITY), f64::INFINITY);
        assert!(ln_any(-1.0).is_nan() && ln_any(f64::NAN).is_nan());
        assert_eq!(ln(f64::MAX), f64::MAX.ln());
    }
}
