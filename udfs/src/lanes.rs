//! Four `f64` lanes for the row passes of model rounds, written once
//! against [`Lanes`] and run with 256-bit vectors where the processor has
//! AVX2 (x86-64-v3, chosen at run time by [`dispatch`] through `pulp`'s
//! safe intrinsics) or as plain arrays elsewhere ([`Portable`]). Every
//! operation is the same IEEE operation either way (no fused multiply-add,
//! no reassociation), so the results do not depend on the processor.
//!
//! [`Vec4`] gives the lanes arithmetic operators; [`Vec4::exp`] and
//! [`Vec4::ln`] are branch-free polynomial versions of `exp` and `ln` (the
//! Cephes and fdlibm constants, as the `wide` crate has them) for the
//! arguments a model round feeds them; see each.
//!
//! Why this file is over 600 lines: it holds the four-lane row kernels every model round shares, which read together.

use std::ops::{Add, AddAssign, Div, Mul, Sub};

/// Lanes per vector.
pub const LANES: usize = 4;

/// 2⁵².
const TWO_52: f64 = 4503599627370496.0;

/// The vector operations of the row kernels, four lanes wide.
pub trait Lanes: Copy {
    /// Four values.
    type V: Copy;
    /// Four conditions.
    type M: Copy;
    fn splat(self, value: f64) -> Self::V;
    fn of_array(self, values: [f64; LANES]) -> Self::V;
    fn to_array(self, v: Self::V) -> [f64; LANES];
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a` where a > b, else `b` (so `b` where either is NaN).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    fn lt(self, a: Self::V, b: Self::V) -> Self::M;
    fn le(self, a: Self::V, b: Self::V) -> Self::M;
    fn gt(self, a: Self::V, b: Self::V) -> Self::M;
    fn eq(self, a: Self::V, b: Self::V) -> Self::M;
    fn and(self, a: Self::M, b: Self::M) -> Self::M;
    fn or(self, a: Self::M, b: Self::M) -> Self::M;
    fn select(self, m: Self::M, yes: Self::V, no: Self::V) -> Self::V;
    fn is_finite(self, v: Self::V) -> Self::M;
    /// To the nearest whole number, ties to even.
    fn round(self, v: Self::V) -> Self::V;
    /// 2ʳ for whole r with −1022 ≤ r ≤ 1023.
    fn pow2(self, r: Self::V) -> Self::V;
    /// (m, e) with v = m · 2^e, m in [0.5, 1), for positive normal v.
    fn split(self, v: Self::V) -> (Self::V, Self::V);
}

/// A kernel generic over [`Lanes`], for [`dispatch`].
pub trait WithLanes {
    type Output;
    fn run<L: Lanes>(self, lanes: L) -> Self::Output;
}

/// Runs `kernel` with 256-bit vectors where the processor has AVX2 and
/// FMA (x86-64-v3; checked once and cached), with [`Portable`] lanes
/// elsewhere. The kernel's functions must be `#[inline(always)]` so that
/// they are compiled for the vector unit chosen.
#[inline]
pub fn dispatch<K: WithLanes>(kernel: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    if let Some(v3) = pulp::x86::V3::try_new() {
        return v3.vectorize(OnV3(kernel, v3));
    }
    kernel.run(Portable)
}

/// A kernel and its AVX2 lanes, for `pulp`'s `vectorize`: a call that is
/// always inlined (a closure may not be, and then compiles without AVX2).
#[cfg(target_arch = "x86_64")]
struct OnV3<K>(K, pulp::x86::V3);

#[cfg(target_arch = "x86_64")]
impl<K: WithLanes> pulp::NullaryFnOnce for OnV3<K> {
    type Output = K::Output;

    #[inline(always)]
    fn call(self) -> K::Output {
        self.0.run(self.1)
    }
}

/// [`Lanes`] as plain arrays, for any processor.
#[derive(Debug, Clone, Copy)]
pub struct Portable;

#[inline(always)]
fn each(a: [f64; LANES], b: [f64; LANES], f: impl Fn(f64, f64) -> f64) -> [f64; LANES] {
    [f(a[0], b[0]), f(a[1], b[1]), f(a[2], b[2]), f(a[3], b[3])]
}

#[inline(always)]
fn test(a: [f64; LANES], b: [f64; LANES], f: impl Fn(f64, f64) -> bool) -> [bool; LANES] {
    [f(a[0], b[0]), f(a[1], b[1]), f(a[2], b[2]), f(a[3], b[3])]
}

impl Lanes for Portable {
    type V = [f64; LANES];
    type M = [bool; LANES];
    #[inline(always)]
    fn splat(self, value: f64) -> Self::V {
        [value; LANES]
    }
    #[inline(always)]
    fn of_array(self, values: [f64; LANES]) -> Self::V {
        values
    }
    #[inline(always)]
    fn to_array(self, v: Self::V) -> [f64; LANES] {
        v
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        each(a, b, |a, b| a + b)
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        each(a, b, |a, b| a - b)
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        each(a, b, |a, b| a * b)
    }
    #[inline(always)]
    fn div(self, a: Self::V, b: Self::V) -> Self::V {
        each(a, b, |a, b| a / b)
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        each(a, b, |a, b| if a > b { a } else { b })
    }
    #[inline(always)]
    fn lt(self, a: Self::V, b: Self::V) -> Self::M {
        test(a, b, |a, b| a < b)
    }
    #[inline(always)]
    fn le(self, a: Self::V, b: Self::V) -> Self::M {
        test(a, b, |a, b| a <= b)
    }
    #[inline(always)]
    fn gt(self, a: Self::V, b: Self::V) -> Self::M {
        test(a, b, |a, b| a > b)
    }
    #[inline(always)]
    fn eq(self, a: Self::V, b: Self::V) -> Self::M {
        test(a, b, |a, b| a == b)
    }
    #[inline(always)]
    fn and(self, a: Self::M, b: Self::M) -> Self::M {
        [a[0] & b[0], a[1] & b[1], a[2] & b[2], a[3] & b[3]]
    }
    #[inline(always)]
    fn or(self, a: Self::M, b: Self::M) -> Self::M {
        [a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3]]
    }
    #[inline(always)]
    fn select(self, m: Self::M, yes: Self::V, no: Self::V) -> Self::V {
        std::array::from_fn(|l| if m[l] { yes[l] } else { no[l] })
    }
    #[inline(always)]
    fn is_finite(self, v: Self::V) -> Self::M {
        v.map(f64::is_finite)
    }
    #[inline(always)]
    fn round(self, v: Self::V) -> Self::V {
        v.map(f64::round_ties_even)
    }
    #[inline(always)]
    fn pow2(self, r: Self::V) -> Self::V {
        // r + 1023 lands in the low mantissa bits of 2⁵² + r + 1023.
        r.map(|r| f64::from_bits((r + (1023.0 + TWO_52)).to_bits() << 52))
    }
    #[inline(always)]
    fn split(self, v: Self::V) -> (Self::V, Self::V) {
        let bits = v.map(f64::to_bits);
        (
            bits.map(|b| f64::from_bits((b & 0x000F_FFFF_FFFF_FFFF) | 0x3FE0_0000_0000_0000)),
            bits.map(|b| f64::from_bits((b >> 52) | TWO_52.to_bits()) - (TWO_52 + 1023.0)),
        )
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for pulp::x86::V3 {
    type V = pulp::f64x4;
    type M = pulp::m64x4;
    #[inline(always)]
    fn splat(self, value: f64) -> Self::V {
        self.splat_f64x4(value)
    }
    #[inline(always)]
    fn of_array(self, values: [f64; LANES]) -> Self::V {
        pulp::cast(values)
    }
    #[inline(always)]
    fn to_array(self, v: Self::V) -> [f64; LANES] {
        pulp::cast(v)
    }
    #[inline(always)]
    fn add(self, a: Self::V, b: Self::V) -> Self::V {
        self.add_f64x4(a, b)
    }
    #[inline(always)]
    fn sub(self, a: Self::V, b: Self::V) -> Self::V {
        self.sub_f64x4(a, b)
    }
    #[inline(always)]
    fn mul(self, a: Self::V, b: Self::V) -> Self::V {
        self.mul_f64x4(a, b)
    }
    #[inline(always)]
    fn div(self, a: Self::V, b: Self::V) -> Self::V {
        self.div_f64x4(a, b)
    }
    #[inline(always)]
    fn max(self, a: Self::V, b: Self::V) -> Self::V {
        // maxpd returns its second operand unless a > b, as Portable does.
        self.max_f64x4(a, b)
    }
    #[inline(always)]
    fn lt(self, a: Self::V, b: Self::V) -> Self::M {
        self.cmp_lt_f64x4(a, b)
    }
    #[inline(always)]
    fn le(self, a: Self::V, b: Self::V) -> Self::M {
        self.cmp_le_f64x4(a, b)
    }
    #[inline(always)]
    fn gt(self, a: Self::V, b: Self::V) -> Self::M {
        self.cmp_gt_f64x4(a, b)
    }
    #[inline(always)]
    fn eq(self, a: Self::V, b: Self::V) -> Self::M {
        self.cmp_eq_f64x4(a, b)
    }
    #[inline(always)]
    fn and(self, a: Self::M, b: Self::M) -> Self::M {
        self.and_m64x4(a, b)
    }
    #[inline(always)]
    fn or(self, a: Self::M, b: Self::M) -> Self::M {
        self.or_m64x4(a, b)
    }
    #[inline(always)]
    fn select(self, m: Self::M, yes: Self::V, no: Self::V) -> Self::V {
        self.select_f64x4(m, yes, no)
    }
    #[inline(always)]
    fn is_finite(self, v: Self::V) -> Self::M {
        // |v| < ∞ is false for infinities and NaN.
        self.cmp_lt_f64x4(self.abs_f64x4(v), self.splat_f64x4(f64::INFINITY))
    }
    #[inline(always)]
    fn round(self, v: Self::V) -> Self::V {
        self.round_f64x4(v)
    }
    #[inline(always)]
    fn pow2(self, r: Self::V) -> Self::V {
        let biased: pulp::u64x4 = pulp::cast(self.add_f64x4(r, self.splat_f64x4(1023.0 + TWO_52)));
        pulp::cast(self.shl_const_u64x4::<52>(biased))
    }
    #[inline(always)]
    fn split(self, v: Self::V) -> (Self::V, Self::V) {
        let bits: pulp::u64x4 = pulp::cast(v);
        let mantissa = self.or_u64x4(
            self.and_u64x4(bits, self.splat_u64x4(0x000F_FFFF_FFFF_FFFF)),
            self.splat_u64x4(0x3FE0_0000_0000_0000),
        );
        let exponent = self.or_u64x4(
            self.shr_const_u64x4::<52>(bits),
            self.splat_u64x4(TWO_52.to_bits()),
        );
        (
            pulp::cast(mantissa),
            self.sub_f64x4(pulp::cast(exponent), self.splat_f64x4(TWO_52 + 1023.0)),
        )
    }
}

/// Four lanes with their [`Lanes`], for arithmetic with operators.
#[derive(Clone, Copy)]
pub struct Vec4<L: Lanes> {
    lanes: L,
    v: L::V,
}

/// Four conditions, from a comparison of [`Vec4`]s.
#[derive(Clone, Copy)]
pub struct Mask<L: Lanes> {
    lanes: L,
    m: L::M,
}

impl<L: Lanes> Vec4<L> {
    #[inline(always)]
    pub fn splat(lanes: L, value: f64) -> Self {
        Self {
            lanes,
            v: lanes.splat(value),
        }
    }

    /// The four values of `values` from `row` on.
    #[inline(always)]
    pub fn load(lanes: L, values: &[f64], row: usize) -> Self {
        Self::chunk(lanes, &values[row..row + LANES])
    }

    /// The lanes these values are computed on.
    #[inline(always)]
    pub fn lanes(self) -> L {
        self.lanes
    }

    /// Four values.
    #[inline(always)]
    pub fn of(lanes: L, values: &[f64; LANES]) -> Self {
        Self {
            lanes,
            v: lanes.of_array(*values),
        }
    }

    /// A chunk of exactly four values (as `chunks_exact(4)` gives).
    #[inline(always)]
    pub fn chunk(lanes: L, values: &[f64]) -> Self {
        let values: [f64; LANES] = values.try_into().expect("a chunk of four");
        Self {
            lanes,
            v: lanes.of_array(values),
        }
    }

    #[inline(always)]
    pub fn to_array(self) -> [f64; LANES] {
        self.lanes.to_array(self.v)
    }

    /// Writes the lanes to `out[row..row + 4]`.
    #[inline(always)]
    pub fn store(self, out: &mut [f64], row: usize) {
        out[row..row + LANES].copy_from_slice(&self.to_array());
    }

    /// The sum of the lanes, in the order (l0 + l2) + (l1 + l3).
    #[inline(always)]
    pub fn sum(self) -> f64 {
        let a = self.to_array();
        (a[0] + a[2]) + (a[1] + a[3])
    }

    #[inline(always)]
    fn with(self, v: L::V) -> Self {
        Self {
            lanes: self.lanes,
            v,
        }
    }

    #[inline(always)]
    fn mask(self, m: L::M) -> Mask<L> {
        Mask {
            lanes: self.lanes,
            m,
        }
    }

    #[inline(always)]
    pub fn max(self, other: Self) -> Self {
        self.with(self.lanes.max(self.v, other.v))
    }

    #[inline(always)]
    pub fn lt(self, other: Self) -> Mask<L> {
        self.mask(self.lanes.lt(self.v, other.v))
    }

    #[inline(always)]
    pub fn le(self, other: Self) -> Mask<L> {
        self.mask(self.lanes.le(self.v, other.v))
    }

    #[inline(always)]
    pub fn gt(self, other: Self) -> Mask<L> {
        self.mask(self.lanes.gt(self.v, other.v))
    }

    #[inline(always)]
    pub fn eq(self, other: Self) -> Mask<L> {
        self.mask(self.lanes.eq(self.v, other.v))
    }

    /// Lanes that are neither infinite nor NaN.
    #[inline(always)]
    pub fn is_finite(self) -> Mask<L> {
        self.mask(self.lanes.is_finite(self.v))
    }

    /// `eˣ` for |x| ≤ 708, to about one unit in the last place (Cephes'
    /// Taylor polynomial of degree 13 after reducing by ln 2 in two parts,
    /// as `wide` computes it without a fused multiply-add). Outside that
    /// range the result is not defined: callers admit only such rows.
    #[inline(always)]
    #[allow(clippy::excessive_precision)] // the constants as published
    pub fn exp(self) -> Self {
        const LN2_HI: f64 = 0.693145751953125;
        const LN2_LO: f64 = 1.42860682030941723212E-6;
        const P: [f64; 12] = [
            1.0 / 2.0,
            1.0 / 6.0,
            1.0 / 24.0,
            1.0 / 120.0,
            1.0 / 720.0,
            1.0 / 5040.0,
            1.0 / 40320.0,
            1.0 / 362880.0,
            1.0 / 3628800.0,
            1.0 / 39916800.0,
            1.0 / 479001600.0,
            1.0 / 6227020800.0,
        ];
        let lanes = self.lanes;
        let c = |v: f64| Self::splat(lanes, v);
        let mul_add = |a: Self, b: Self, c: Self| a * b + c;
        let r = self.with(lanes.round((self * c(std::f64::consts::LOG2_E)).v));
        let t = self - r * c(LN2_HI);
        let t = t - r * c(LN2_LO);
        let (t2, t4) = (t * t, t * t * (t * t));
        let t8 = t4 * t4;
        let p = |i: usize| c(P[i]);
        let z = mul_add(
            t8,
            mul_add(
                t4,
                mul_add(t, p(11), p(10)),
                mul_add(t2, mul_add(t, p(9), p(8)), mul_add(t, p(7), p(6))),
            ),
            mul_add(
                t4,
                mul_add(t2, mul_add(t, p(5), p(4)), mul_add(t, p(3), p(2))),
                mul_add(t2, mul_add(t, p(1), p(0)), t),
            ),
        );
        (z + c(1.0)) * self.with(lanes.pow2(r.v))
    }

    /// The natural logarithm of a positive, finite, normal number, to about
    /// one unit in the last place (Cephes' rational approximation on the
    /// mantissa, fdlibm's two-part ln 2, as `wide` computes it without a
    /// fused multiply-add). For zero, negative, subnormal, infinite or NaN
    /// lanes the result is not defined: callers admit only such rows.
    #[inline(always)]
    #[allow(clippy::excessive_precision)] // the constants as published
    pub fn ln(self) -> Self {
        const P: [f64; 6] = [
            7.70838733755885391666E0,
            1.79368678507819816313E1,
            1.44989225341610930846E1,
            4.70579119878881725854E0,
            4.97494994976747001425E-1,
            1.01875663804580931796E-4,
        ];
        const Q: [f64; 5] = [
            2.31251620126765340583E1,
            7.11544750618563894466E1,
            8.29875266912776603211E1,
            4.52279145837532221105E1,
            1.12873587189167450590E1,
        ];
        let lanes = self.lanes;
        let c = |v: f64| Self::splat(lanes, v);
        let mul_add = |a: Self, b: Self, c: Self| a * b + c;
        let (m, e) = lanes.split(self.v);
        let (m, e) = (self.with(m), self.with(e));
        let above = m.gt(c(std::f64::consts::SQRT_2 * 0.5));
        let x = above.select(m, m + m);
        let fe = above.select(e + c(1.0), e);
        let x = x - c(1.0);
        let (x2, x4) = (x * x, x * x * (x * x));
        let px = mul_add(
            mul_add(x, c(P[3]), c(P[2])),
            x2,
            mul_add(
                mul_add(x, c(P[5]), c(P[4])),
                x4,
                mul_add(x, c(P[1]), c(P[0])),
            ),
        );
        let px = x2 * x * px;
        let qx = mul_add(
            x2,
            mul_add(x, c(Q[3]), c(Q[2])),
            mul_add(x4, c(Q[4]) + x, mul_add(x, c(Q[1]), c(Q[0]))),
        );
        let res = px / qx;
        let res = mul_add(fe, c(f64::from_bits(0x3DEA39EF35793C76)), res);
        let res = res + (x - x2 * c(0.5));
        mul_add(fe, c(f64::from_bits(0x3FE62E42FEE00000)), res)
    }
}

impl<L: Lanes> Mask<L> {
    /// `yes` in the lanes that hold, `no` in the others.
    #[inline(always)]
    pub fn select(self, yes: Vec4<L>, no: Vec4<L>) -> Vec4<L> {
        yes.with(self.lanes.select(self.m, yes.v, no.v))
    }
}

impl<L: Lanes> std::ops::BitAnd for Mask<L> {
    type Output = Self;
    #[inline(always)]
    fn bitand(self, other: Self) -> Self {
        Self {
            lanes: self.lanes,
            m: self.lanes.and(self.m, other.m),
        }
    }
}

impl<L: Lanes> std::ops::BitOr for Mask<L> {
    type Output = Self;
    #[inline(always)]
    fn bitor(self, other: Self) -> Self {
        Self {
            lanes: self.lanes,
            m: self.lanes.or(self.m, other.m),
        }
    }
}

macro_rules! lane_op {
    ($trait:ident, $method:ident) => {
        impl<L: Lanes> $trait for Vec4<L> {
            type Output = Self;
            #[inline(always)]
            fn $method(self, other: Self) -> Self {
                self.with(self.lanes.$method(self.v, other.v))
            }
        }
    };
}

lane_op!(Add, add);
lane_op!(Sub, sub);
lane_op!(Mul, mul);
lane_op!(Div, div);

impl<L: Lanes> AddAssign for Vec4<L> {
    #[inline(always)]
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    /// Every operation of [`Vec4`] once, on four values.
    #[inline(always)]
    fn workout<L: Lanes>(lanes: L, values: [f64; LANES]) -> [f64; LANES] {
        let v = Vec4::chunk(lanes, &values);
        let one = Vec4::splat(lanes, 1.0);
        let positive = (v * v + one).ln() / (one + v.max(one));
        let picked = (v.lt(one) & v.is_finite() | v.eq(one)).select(v.exp(), positive);
        (picked - v.gt(one).select(one, positive)).to_array()
    }

    struct Workout([f64; LANES]);

    impl WithLanes for Workout {
        type Output = [f64; LANES];
        #[inline(always)]
        fn run<L: Lanes>(self, lanes: L) -> [f64; LANES] {
            workout(lanes, self.0)
        }
    }

    #[test]
    fn exp_agrees_with_libm_over_the_range_rounds_use() {
        let mut worst = 0;
        for i in 0..=200_000 {
            let x = -708.0 + 1416.0 * f64::from(i) / 200_000.0;
            let values = [x, -x, x / 7.0, x * 1e-6];
            let got = Vec4::chunk(Portable, &values).exp().to_array();
            for (g, v) in got.iter().zip(values) {
                worst = worst.max(ulps(*g, v.exp()));
            }
        }
        assert!(worst <= 2, "exp is {worst} ulps from libm");
    }

    #[test]
    fn ln_agrees_with_libm_over_normal_numbers() {
        let mut worst = 0;
        for i in 0..=200_000 {
            let t = f64::from(i) / 200_000.0;
            let values = [
                f64::MIN_POSITIVE * (1.0 + t),
                (-700.0 + 1400.0 * t).exp(),
                1.0 + (t - 0.5) * 1e-3,
                t * 1e300 + 1e-300,
            ];
            let got = Vec4::chunk(Portable, &values).ln().to_array();
            for (g, v) in got.iter().zip(values) {
                worst = worst.max(ulps(*g, v.ln()));
            }
        }
        assert!(worst <= 2, "ln is {worst} ulps from libm");
    }

    #[test]
    fn the_vector_unit_gives_the_bits_of_plain_arrays() {
        for i in 0..10_000 {
            let x = -700.0 + 1400.0 * f64::from(i) / 10_000.0;
            let values = [x, x / 3.0, -x / 5.0, 1.0 / (1.0 + x.abs())];
            let portable = workout(Portable, values);
            assert_eq!(portable, dispatch(Workout(values)), "at {x}");
        }
    }

    #[test]
    fn lanes_compute_lane_by_lane() {
        let v = |a: [f64; 4]| Vec4::chunk(Portable, &a);
        let (a, b) = (v([1.0, -2.0, 3.5, 0.0]), v([2.0, 2.0, -1.0, 4.0]));
        assert_eq!((a + b).to_array(), [3.0, 0.0, 2.5, 4.0]);
        assert_eq!((a - b).to_array(), [-1.0, -4.0, 4.5, -4.0]);
        assert_eq!((a * b).to_array(), [2.0, -4.0, -3.5, 0.0]);
        assert_eq!((a / b).to_array(), [0.5, -1.0, -3.5, 0.0]);
        assert_eq!(a.max(b).to_array(), [2.0, 2.0, 3.5, 4.0]);
        let zero = Vec4::splat(Portable, 0.0);
        let picked = (a.lt(b) & a.gt(zero) | a.eq(zero)).select(a, b);
        assert_eq!(picked.to_array(), [1.0, 2.0, -1.0, 0.0]);
        assert_eq!(a.sum(), 2.5);
    }
}
