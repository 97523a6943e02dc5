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
//! A round at a threshold of more than two thirds of the sites (sites
//! that check their peers) is full at any size ([`is_sparse`]).
//!
//! In a sparse round, a site's secrets are shared among its neighbours
//! with a threshold of the same share of its neighbourhood (itself and
//! its neighbours) as t is of the sites: a strict majority of it at the
//! default t ([`share_threshold`]); in a full round the threshold is the
//! session's t.

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

/// The number of neighbours of each site in a round over `n` sites at
/// threshold `t`: every other site in a full round; in a sparse one
/// 2⌈3·log2 n / 2⌉ (SecAgg+), at most n − 1.
pub fn degree(n: usize, threshold: usize) -> usize {
    if is_sparse(n, threshold) {
        let log = (n as f64).log2();
        (2 * (1.5 * log).ceil() as usize).min(n - 1)
    } else {
        n.saturating_sub(1)
    }
}

/// Whether a round over `n` sites at threshold `t` uses the sparse graph:
/// above [`FULL_GRAPH_MAX`] sites, at a threshold of at most two thirds of
/// them. A round at t > 2n/3 — the threshold of sites that check their
/// peers, which do not trust the coordinator — is full at any size.
///
/// Why: in a sparse round a site's shares lie with its few neighbours,
/// and what keeps a coordinator from collecting both kinds of them is
/// that two survivor lists of t signers share more signers than it has
/// colluders. That holds only if every neighbour counts signers among the
/// same listed identities; a neighbour without peers (or with others)
/// accepts signatures of keys the coordinator made, and the eleventh
/// outside review split a peered site's neighbourhood so
/// (`tests/suites/attack54k.rs`). Before, the tenth showed that a third
/// of colluders fill a neighbourhood of SecAgg+'s size after some 700
/// abandoned sessions. In a full round a site's shares lie with the n
/// sites of its own view, each of which reveals one kind, so counting
/// alone protects it: t > (n + c)/2 for c colluders, whatever the others
/// check.
pub fn is_sparse(n: usize, threshold: usize) -> bool {
    n > FULL_GRAPH_MAX && 3 * threshold <= 2 * n
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
/// strict majority of it at the default t.
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
            // More than two thirds of the sites (the threshold of sites
            // with peers), or all of them: a full round at any size.
            for t in [super::super::peered_threshold(n), n] {
                let full = session.clone().with_threshold(t);
                assert!(!session_is_sparse(&full), "{n}, t = {t}");
                assert_eq!(degree(n, t), n - 1);
                assert_eq!(neighbours(&full, &[0; 32])[0].len(), n - 1);
                assert_eq!(share_threshold(&full, n), t);
            }
            // Two thirds exactly is still sparse.
            assert!(is_sparse(n, 2 * n / 3));
        }
        assert!(!is_sparse(100, 51));
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
