//! Whom each site masks with and shares its secrets with: every other site
//! in a small round, and above [`FULL_GRAPH_MAX`] sites a sparse graph in
//! the manner of SecAgg+ (Bell et al., CCS 2020): a ring of the sites in
//! an order drawn from the graph's seed, each linked to its
//! [`degree`] / 2 nearest sites on either side. The cost per site then
//! grows with log n instead of n.
//!
//! The seed is a coin toss among the sites, not the coordinator's choice
//! (a coordinator that chose the order could seat its colluders around a
//! victim, who would then hold the victim's neighbourhood threshold): at
//! the setup each site commits to a fresh 32-byte nonce
//! ([`nonce_commitment`], in its signed keys); once every site's keys
//! (and so every commitment) are fixed, each reveals its nonce; the seed
//! hashes the session id and every participant's nonce ([`seed`]). One
//! honest site's nonce makes the order uniform, whatever the others chose
//! after seeing the commitments. A participant that does not reveal ends
//! the session (the coordinator runs the round again without it), so that
//! withholding a reveal cannot pick between two graphs; what a coordinator
//! can still do is abandon sessions until it likes a graph, one fresh
//! graph per session.
//!
//! When the sites check their peers (t more than two thirds of the sites),
//! the degree is sized against a third of colluding sites rather than
//! log n: 3·(40 + ⌈log2 n⌉) neighbours ([`degree`]), so that peered
//! rounds up to 145 sites are full.
//!
//! In a sparse round, a site's secrets are shared among its neighbours
//! with a threshold of the same share of its neighbourhood (itself and
//! its neighbours) as t is of the sites: a strict majority of it at the
//! default t, more than two thirds of it when the sites check their peers
//! ([`share_threshold`]); in a full round the threshold is the session's t.

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

use super::SecureSession;

/// Up to this many sites, every site masks with every other.
pub const FULL_GRAPH_MAX: usize = 100;

/// Domain separation of the graph's permutation.
const GRAPH_CONTEXT: &[u8] = b"fedsql secure aggregation v3: neighbour graph";

/// Domain separation of a site's commitment to its graph nonce.
const NONCE_CONTEXT: &[u8] = b"fedsql secure aggregation v3: graph nonce";

/// The seed of a session's graph (see [`seed`]); all zeros in a full
/// round, where the graph does not depend on it.
pub type GraphSeed = [u8; 32];

/// A site's commitment to its graph nonce for a session.
pub fn nonce_commitment(session: &[u8; 16], nonce: &[u8; 32]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(NONCE_CONTEXT);
    hash.update(session);
    hash.update(nonce);
    hash.finalize().into()
}

/// The graph's seed from every participant's revealed nonce (in session
/// order; `None` for a site without keys), each checked against the
/// commitment in its keys. In a full round, no nonces are relayed and the
/// seed is all zeros. Returns the broken rule otherwise.
pub fn seed(
    session: &SecureSession,
    keys: &[Option<super::ParticipantKeys>],
    nonces: &[Option<[u8; 32]>],
) -> std::result::Result<GraphSeed, String> {
    let n = session.clients.len();
    if !session_is_sparse(session) {
        return if nonces.is_empty() {
            Ok([0; 32])
        } else {
            Err("graph nonces relayed in a full round, which has no sparse graph".into())
        };
    }
    if nonces.len() != n || keys.len() != n {
        return Err(format!(
            "{} graph nonces relayed for {n} clients (every participant's nonce must be)",
            nonces.len()
        ));
    }
    let mut hash = Sha256::new();
    hash.update(GRAPH_CONTEXT);
    hash.update(session.id);
    hash.update((n as u64).to_le_bytes());
    for (i, (k, nonce)) in keys.iter().zip(nonces).enumerate() {
        match (k, nonce) {
            (None, None) => hash.update([0]),
            (Some(k), Some(nonce))
                if nonce_commitment(&session.id, nonce) == k.graph_commitment =>
            {
                hash.update([1]);
                hash.update(nonce);
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "participant {i}'s graph nonce does not match its commitment"
                ));
            }
            (Some(_), None) => {
                return Err(format!(
                    "participant {i} sent keys but its graph nonce was not relayed (every participant must reveal)"
                ));
            }
            (None, Some(_)) => {
                return Err(format!(
                    "a graph nonce relayed for participant {i}, which sent no keys"
                ));
            }
        }
    }
    Ok(hash.finalize().into())
}

/// The bits of security per session of a sparse neighbourhood against a
/// third of colluding sites: see [`degree`].
pub const NEIGHBOURHOOD_SECURITY_BITS: usize = 40;

/// The number of neighbours of each site in a round over `n` sites at
/// threshold `t`, at most n − 1 (every other site).
///
/// At a strict majority (sites without `peers`, which trust the
/// coordinator to follow the protocol): 2⌈3·log2 n / 2⌉, as SecAgg+.
///
/// When t is more than two thirds of the sites (the sites check their
/// peers, and up to a third of the federation may collude with the
/// coordinator): k ≥ 3·(40 + ⌈log2 n⌉), rounded up to even. A site's
/// neighbours are a uniform draw of k of the others (its place in the
/// ring is uniform), so the colluders among them, at most a third on
/// average, reach its neighbourhood's threshold of more than two thirds
/// with probability at most 2^(−k·D(2/3 ‖ 1/3)) = 2^(−k/3) (the
/// Chernoff–Hoeffding bound, which holds for draws without replacement):
/// at most 2⁻⁴⁰ / n per site, 2⁻⁴⁰ per session over all n. A coordinator
/// that abandons sessions until a neighbourhood fills (the tenth outside
/// review: about 700 sessions at 21 neighbours) then needs about 2⁴⁰.
/// Peered rounds up to 145 sites are therefore full.
pub fn degree(n: usize, threshold: usize) -> usize {
    ring_degree(n, threshold).min(n.saturating_sub(1))
}

/// [`degree`] before it is capped at every other site.
fn ring_degree(n: usize, threshold: usize) -> usize {
    let log = (n.max(2) as f64).log2();
    let strict = 2 * (1.5 * log).ceil() as usize;
    if 3 * threshold > 2 * n {
        let ceil_log = n.max(2).next_power_of_two().trailing_zeros() as usize;
        let third = 3 * (NEIGHBOURHOOD_SECURITY_BITS + ceil_log);
        strict.max(third.next_multiple_of(2))
    } else {
        strict
    }
}

/// Whether a round over `n` sites at threshold `t` uses the sparse graph:
/// above [`FULL_GRAPH_MAX`] sites, unless its [`degree`] reaches every
/// other site.
pub fn is_sparse(n: usize, threshold: usize) -> bool {
    n > FULL_GRAPH_MAX && ring_degree(n, threshold) < n - 1
}

/// Whether `session`'s round uses the sparse graph ([`is_sparse`]).
pub fn session_is_sparse(session: &SecureSession) -> bool {
    is_sparse(session.clients.len(), session.threshold)
}

/// The neighbours of every site of the session (each list sorted; the
/// relation is symmetric), in a sparse round those of the graph drawn from
/// `seed`.
pub fn neighbours(session: &SecureSession, seed: &GraphSeed) -> Vec<Vec<usize>> {
    let n = session.clients.len();
    if !session_is_sparse(session) {
        return (0..n)
            .map(|i| (0..n).filter(|&j| j != i).collect())
            .collect();
    }
    let order = ring_order(n, seed);
    let mut position = vec![0; n];
    for (p, &site) in order.iter().enumerate() {
        position[site] = p;
    }
    let half = degree(n, session.threshold) / 2;
    (0..n)
        .map(|i| {
            let p = position[i];
            let mut list: Vec<usize> = (1..=half)
                .flat_map(|d| [order[(p + d) % n], order[(p + n - d) % n]])
                .collect();
            list.sort_unstable();
            list.dedup();
            list
        })
        .collect()
}

/// The order of `n` sites around a sparse round's ring, drawn from `seed`:
/// Fisher-Yates over ChaCha20 with rejection sampling (an unbiased order).
pub fn ring_order(n: usize, seed: &GraphSeed) -> Vec<usize> {
    let mut prg = ChaCha20Rng::from_seed(*seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let bound = (i + 1) as u64;
        let zone = u64::MAX - (u64::MAX % bound);
        let j = loop {
            let r = prg.next_u64();
            if r < zone {
                break (r % bound) as usize;
            }
        };
        order.swap(i, j);
    }
    order
}

/// The Shamir threshold of a site's secrets with `neighbourhood` sites
/// (itself included): the session's t in a full round; in a sparse one
/// the same share of the neighbourhood as t is of the sites, rounded up
/// past it (⌊neighbourhood · t / n⌋ + 1, at most the neighbourhood): a
/// strict majority of it at the default t, more than two thirds of it
/// when t is more than two thirds of the sites (a site with `peers`).
pub fn share_threshold(session: &SecureSession, neighbourhood: usize) -> usize {
    let n = session.clients.len();
    if session_is_sparse(session) {
        (neighbourhood * session.threshold / n + 1).min(neighbourhood)
    } else {
        session.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_rounds_are_full_and_large_ones_sparse_symmetric_and_fresh() {
        let session = SecureSession::fresh((0..5).map(|i| i.to_string()).collect());
        let full = neighbours(&session, &[0; 32]);
        assert_eq!(full[2], vec![0, 1, 3, 4]);
        assert_eq!(share_threshold(&session, 5), session.threshold);
        for n in [101, 1000] {
            let session = SecureSession::fresh((0..n).map(|i| i.to_string()).collect());
            let seed: GraphSeed = rand::random();
            let graph = neighbours(&session, &seed);
            let k = degree(n, session.threshold);
            assert!((20..40).contains(&k), "{n}: {k}");
            assert!(session_is_sparse(&session));
            for (i, list) in graph.iter().enumerate() {
                assert_eq!(list.len(), k, "site {i}");
                assert!(!list.contains(&i));
                for &j in list {
                    assert!(graph[j].contains(&i), "{i} -> {j} not symmetric");
                }
            }
            // The same for everyone with the seed, another for another.
            assert_eq!(neighbours(&session, &seed), graph);
            assert_ne!(neighbours(&session, &rand::random()), graph);
            // k is even: a strict majority of k + 1 is k / 2 + 1.
            assert_eq!(share_threshold(&session, k + 1), k / 2 + 1);
            // All of the sites: a neighbourhood sized against a third of
            // colluders (below), all of it, no more.
            let all = session.clone().with_threshold(n);
            let k_all = degree(n, n);
            assert_eq!(share_threshold(&all, k_all + 1), k_all + 1);
        }
        // More than two thirds of the sites (sites with peers): 2^-40 per
        // session against a third of colluders, so full up to 145 sites.
        for (n, k) in [(101, 100), (145, 144), (146, 144), (1000, 150), (5000, 160)] {
            let peered = super::super::peered_threshold(n);
            assert_eq!(degree(n, peered), k, "{n}");
            assert_eq!(is_sparse(n, peered), n > 145, "{n}");
            assert_eq!(is_sparse(n, super::super::default_threshold(n)), n > 100);
        }
        let session = SecureSession::fresh((0..1000).map(|i| i.to_string()).collect())
            .with_threshold(super::super::peered_threshold(1000));
        let graph = neighbours(&session, &rand::random());
        assert!(graph.iter().all(|list| list.len() == 150));
        let share_t = share_threshold(&session, 151);
        assert_eq!(share_t, 2 * 151 / 3 + 1);
        assert!(3 * share_t > 2 * 151);
        // The bound: a third of colluders fill more than two thirds of a
        // neighbourhood of 150 with probability at most 2^(-150/3) =
        // 2^-50, under 2^-40 / 1000.
        let d = (2.0f64 / 3.0) * 2f64.ln() + (1.0 / 3.0) * 0.5f64.ln();
        assert!((d - 2f64.ln() / 3.0).abs() < 1e-12);
        assert!((-(150.0) * d).exp() <= 2f64.powi(-40) / 1000.0);
        // A peered round of 101 is full: no nonces, every other site.
        let full = SecureSession::fresh((0..101).map(|i| i.to_string()).collect())
            .with_threshold(super::super::peered_threshold(101));
        assert!(!session_is_sparse(&full));
        assert_eq!(neighbours(&full, &[0; 32])[0].len(), 100);
        assert_eq!(share_threshold(&full, 101), full.threshold);
    }

    fn keys_with(commitment: [u8; 32]) -> super::super::ParticipantKeys {
        super::super::ParticipantKeys {
            mask_key: rand::random(),
            cipher_key: rand::random(),
            self_commitment: rand::random(),
            list_key: rand::random(),
            graph_commitment: commitment,
            signed: None,
        }
    }

    #[test]
    fn the_seed_takes_every_participants_revealed_nonce_and_nothing_else() {
        let session = SecureSession::fresh((0..101).map(|i| i.to_string()).collect());
        let nonces: Vec<Option<[u8; 32]>> = (0..101)
            .map(|i| (i != 7).then(rand::random::<[u8; 32]>))
            .collect();
        let keys: Vec<_> = nonces
            .iter()
            .map(|n| n.map(|n| keys_with(nonce_commitment(&session.id, &n))))
            .collect();
        let good = seed(&session, &keys, &nonces).unwrap();
        // Any one nonce changes it.
        let mut other = nonces.clone();
        other[3] = Some(rand::random());
        let mut other_keys = keys.clone();
        other_keys[3] = other[3].map(|n| keys_with(nonce_commitment(&session.id, &n)));
        assert_ne!(seed(&session, &other_keys, &other).unwrap(), good);
        // A nonce that is not the committed one, a missing one, one for a
        // site without keys, too few: refused.
        let e = seed(&session, &keys, &other).unwrap_err();
        assert!(
            e.contains("participant 3's graph nonce does not match"),
            "{e}"
        );
        let mut missing = nonces.clone();
        missing[5] = None;
        let e = seed(&session, &keys, &missing).unwrap_err();
        assert!(
            e.contains("participant 5 sent keys but its graph nonce"),
            "{e}"
        );
        let mut extra = nonces.clone();
        extra[7] = Some(rand::random());
        let e = seed(&session, &keys, &extra).unwrap_err();
        assert!(e.contains("participant 7, which sent no keys"), "{e}");
        assert!(seed(&session, &keys, &nonces[..100]).is_err());
        // A full round takes none.
        let small = SecureSession::fresh((0..5).map(|i| i.to_string()).collect());
        assert_eq!(seed(&small, &keys[..5], &[]).unwrap(), [0; 32]);
        assert!(seed(&small, &keys[..5], &nonces[..5]).is_err());
    }
}
