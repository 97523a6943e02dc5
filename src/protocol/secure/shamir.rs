//! Shamir secret sharing of 32-byte secrets, t of n, for secure
//! aggregation's dropout recovery (a site's pairwise mask key and its
//! self-mask seed).
//!
//! The field is the integers modulo ℓ = 2^252 + 27742317777372353535851937790883648493,
//! the prime order of Curve25519's group, through `curve25519-dalek`'s
//! `Scalar` (constant-time, audited, and already built for the X25519 key
//! exchange; a Shamir crate would add a second big-integer stack for one
//! polynomial). A 32-byte secret does not fit below ℓ, so it is shared as
//! two 16-byte halves, each a field element below 2^128, with independent
//! random polynomials of degree t - 1. A share is the evaluation point
//! x = 1..=n (a site's place in the session plus one) and the two values.
//! Fewer than t shares reveal nothing about the secret (each half is
//! uniformly distributed given any t - 1 points); reconstruction is
//! Lagrange interpolation at 0, and a result whose halves are not below
//! 2^128 is refused, as it cannot come from honest shares.

use curve25519_dalek::scalar::Scalar;

/// One share of a 32-byte secret: the point and the two halves' values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// The evaluation point, 1-based (never 0: that is the secret).
    pub x: u32,
    pub y: [[u8; 32]; 2],
}

impl std::fmt::Debug for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Share(x = {}, <hidden>)", self.x)
    }
}

/// Bytes of a share on the wire: the point (4, little-endian) and the halves.
pub const SHARE_BYTES: usize = 4 + 64;

impl Share {
    /// The wire form.
    pub fn to_bytes(&self) -> [u8; SHARE_BYTES] {
        let mut out = [0u8; SHARE_BYTES];
        out[..4].copy_from_slice(&self.x.to_le_bytes());
        out[4..36].copy_from_slice(&self.y[0]);
        out[36..].copy_from_slice(&self.y[1]);
        out
    }

    /// From the wire form; `None` if it is not one (wrong length, point 0,
    /// or a value that is not a canonical field element).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != SHARE_BYTES {
            return None;
        }
        let x = u32::from_le_bytes(bytes[..4].try_into().ok()?);
        let y0: [u8; 32] = bytes[4..36].try_into().ok()?;
        let y1: [u8; 32] = bytes[36..].try_into().ok()?;
        let canonical =
            |y: [u8; 32]| bool::from(Scalar::from_canonical_bytes(y).is_some()).then_some(y);
        (x != 0).then_some(Self {
            x,
            y: [canonical(y0)?, canonical(y1)?],
        })
    }
}

/// A uniformly random field element from the generator.
fn random_scalar(random: &mut impl FnMut(&mut [u8])) -> Scalar {
    let mut wide = [0u8; 64];
    random(&mut wide);
    Scalar::from_bytes_mod_order_wide(&wide)
}

/// The field element of a 16-byte half of a secret.
fn half(bytes: &[u8]) -> Scalar {
    let mut padded = [0u8; 32];
    padded[..16].copy_from_slice(bytes);
    Scalar::from_bytes_mod_order(padded)
}

/// Splits `secret` into `n` shares, any `t` of which recover it
/// (1 <= t <= n); `random` fills buffers from a cryptographic generator.
pub fn split(
    secret: &[u8; 32],
    n: usize,
    t: usize,
    mut random: impl FnMut(&mut [u8]),
) -> Vec<Share> {
    assert!(
        t >= 1 && t <= n && n < u32::MAX as usize,
        "a t-of-n sharing"
    );
    let polynomials: Vec<Vec<Scalar>> = [&secret[..16], &secret[16..]]
        .iter()
        .map(|h| {
            let mut coefficients = vec![half(h)];
            coefficients.extend((1..t).map(|_| random_scalar(&mut random)));
            coefficients
        })
        .collect();
    (1..=n as u32)
        .map(|x| {
            let point = Scalar::from(x as u64);
            let eval = |c: &[Scalar]| {
                c.iter()
                    .rev()
                    .fold(Scalar::ZERO, |acc, &k| acc * point + k)
                    .to_bytes()
            };
            Share {
                x,
                y: [eval(&polynomials[0]), eval(&polynomials[1])],
            }
        })
        .collect()
}

/// The secret of `shares` (at least t of them, distinct points): Lagrange
/// interpolation at 0. `None` when the points repeat, a value is not a
/// field element, or the result is not a 32-byte secret (more wrong shares
/// than the polynomial's degree allows cannot be told from right ones; a
/// caller checks the secret against a public commitment).
pub fn combine(shares: &[Share]) -> Option<[u8; 32]> {
    if shares.is_empty() {
        return None;
    }
    let mut points: Vec<u32> = shares.iter().map(|s| s.x).collect();
    points.sort_unstable();
    points.dedup();
    if points.len() != shares.len() || points[0] == 0 {
        return None;
    }
    let mut secret = [0u8; 32];
    for half_index in 0..2 {
        let mut sum = Scalar::ZERO;
        for (i, share) in shares.iter().enumerate() {
            let xi = Scalar::from(share.x as u64);
            let mut numerator = Scalar::ONE;
            let mut denominator = Scalar::ONE;
            for (j, other) in shares.iter().enumerate() {
                if i != j {
                    let xj = Scalar::from(other.x as u64);
                    numerator *= xj;
                    denominator *= xj - xi;
                }
            }
            let y = Option::<Scalar>::from(Scalar::from_canonical_bytes(share.y[half_index]))?;
            sum += y * numerator * denominator.invert();
        }
        let bytes = sum.to_bytes();
        if bytes[16..].iter().any(|&b| b != 0) {
            return None;
        }
        secret[half_index * 16..(half_index + 1) * 16].copy_from_slice(&bytes[..16]);
    }
    Some(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(buf: &mut [u8]) {
        use rand::RngCore;
        rand::rng().fill_bytes(buf);
    }

    #[test]
    fn any_t_shares_recover_the_secret_and_fewer_do_not() {
        let secret: [u8; 32] = rand::random();
        for (n, t) in [(1, 1), (3, 2), (5, 3), (7, 7), (25, 13)] {
            let shares = split(&secret, n, t, fill);
            assert_eq!(shares.len(), n);
            // Every window of t shares, and all n.
            for start in 0..=(n - t) {
                assert_eq!(combine(&shares[start..start + t]), Some(secret), "{n} {t}");
            }
            assert_eq!(combine(&shares), Some(secret));
            // In another order.
            let mut reversed = shares.clone();
            reversed.reverse();
            assert_eq!(combine(&reversed[..t]), Some(secret));
            if t > 1 {
                assert_ne!(combine(&shares[..t - 1]), Some(secret), "{n} {t}");
            }
        }
    }

    #[test]
    fn extreme_secrets_and_bad_shares() {
        for secret in [[0u8; 32], [0xff; 32]] {
            let shares = split(&secret, 4, 3, fill);
            assert_eq!(combine(&shares[1..]), Some(secret));
            let wire: Vec<Share> = shares
                .iter()
                .map(|s| Share::from_bytes(&s.to_bytes()).unwrap())
                .collect();
            assert_eq!(wire, shares);
        }
        let secret: [u8; 32] = rand::random();
        let shares = split(&secret, 4, 3, fill);
        // A repeated point is refused.
        assert_eq!(combine(&[shares[0], shares[0], shares[1]]), None);
        // A changed share gives something else (caught by the caller's
        // commitment), never the secret.
        let mut bad = shares[0];
        bad.y[0][0] ^= 1;
        assert_ne!(combine(&[bad, shares[1], shares[2]]), Some(secret));
        // Point 0 and non-canonical values do not decode.
        let mut zero = shares[0].to_bytes();
        zero[..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(Share::from_bytes(&zero).is_none());
        let mut big = shares[0].to_bytes();
        big[4..36].copy_from_slice(&[0xff; 32]);
        assert!(Share::from_bytes(&big).is_none());
        assert!(Share::from_bytes(&[0u8; 10]).is_none());
    }

    #[test]
    fn t_minus_one_shares_leave_every_secret_possible() {
        // With t = 2, one share is consistent with any secret: for a
        // chosen other secret, some line passes through the share.
        let secret = [7u8; 32];
        let shares = split(&secret, 3, 2, fill);
        let other = [9u8; 32];
        // The line through (0, other) and shares[0] gives a share at x=2
        // that, with shares[0], recovers `other`.
        let [a0, a1] = [half(&other[..16]), half(&other[16..])];
        let x1 = Scalar::from(shares[0].x as u64);
        let fake = |a: Scalar, y: [u8; 32]| {
            let y1 = Scalar::from_canonical_bytes(y).unwrap();
            let slope = (y1 - a) * x1.invert();
            (a + slope * Scalar::from(5u64)).to_bytes()
        };
        let forged = Share {
            x: 5,
            y: [fake(a0, shares[0].y[0]), fake(a1, shares[0].y[1])],
        };
        assert_eq!(combine(&[shares[0], forged]), Some(other));
    }
}
