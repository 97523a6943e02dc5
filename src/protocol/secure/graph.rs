//! Whom each site masks with and shares its secrets with: every other site
//! in a small round, and above [`FULL_GRAPH_MAX`] sites a sparse graph in
//! the manner of SecAgg+ (Bell et al., CCS 2020): a ring of the sites in
//! an order drawn from the session id, each linked to its
//! [`degree`] / 2 nearest sites on either side. Every site computes the
//! same graph from the session alone. The cost per site then grows with
//! log n instead of n.
//!
//! In a sparse round, a site's secrets are shared among its neighbours
//! with a threshold of a strict majority of its neighbourhood (itself and
//! its neighbours), so that no two disjoint sets of that size exist
//! within it; in a full round the threshold is the session's t.

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

use super::SecureSession;

/// Up to this many sites, every site masks with every other.
pub const FULL_GRAPH_MAX: usize = 100;

/// Domain separation of the graph's permutation.
const GRAPH_CONTEXT: &[u8] = b"fedsql secure aggregation v2: neighbour graph";

/// The number of neighbours of each site in a sparse round over `n` sites:
/// 2⌈3·log2 n / 2⌉, at most n − 1.
pub fn degree(n: usize) -> usize {
    let log = (n.max(2) as f64).log2();
    let half = (1.5 * log).ceil() as usize;
    (2 * half).min(n.saturating_sub(1))
}

/// Whether a round over `n` sites uses the sparse graph.
pub fn is_sparse(n: usize) -> bool {
    n > FULL_GRAPH_MAX
}

/// The neighbours of every site of the session (each list sorted; the
/// relation is symmetric).
pub fn neighbours(session: &SecureSession) -> Vec<Vec<usize>> {
    let n = session.clients.len();
    if !is_sparse(n) {
        return (0..n)
            .map(|i| (0..n).filter(|&j| j != i).collect())
            .collect();
    }
    let mut hash = Sha256::new();
    hash.update(GRAPH_CONTEXT);
    hash.update(session.id);
    hash.update((n as u64).to_le_bytes());
    let mut prg = ChaCha20Rng::from_seed(hash.finalize().into());
    // Fisher-Yates with rejection sampling: an unbiased order.
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
    let mut position = vec![0; n];
    for (p, &site) in order.iter().enumerate() {
        position[site] = p;
    }
    let half = degree(n) / 2;
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

/// The Shamir threshold of a site's secrets with `neighbourhood` sites
/// (itself included): the session's t in a full round; a strict majority
/// of the neighbourhood in a sparse one.
pub fn share_threshold(session: &SecureSession, neighbourhood: usize) -> usize {
    if is_sparse(session.clients.len()) {
        neighbourhood / 2 + 1
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
        let full = neighbours(&session);
        assert_eq!(full[2], vec![0, 1, 3, 4]);
        assert_eq!(share_threshold(&session, 5), session.threshold);
        for n in [101, 1000] {
            let session = SecureSession::fresh((0..n).map(|i| i.to_string()).collect());
            let graph = neighbours(&session);
            let k = degree(n);
            assert!((20..40).contains(&k), "{n}: {k}");
            for (i, list) in graph.iter().enumerate() {
                assert_eq!(list.len(), k, "site {i}");
                assert!(!list.contains(&i));
                for &j in list {
                    assert!(graph[j].contains(&i), "{i} -> {j} not symmetric");
                }
            }
            // The same for everyone with the session, another for another.
            assert_eq!(neighbours(&session), graph);
            let other = SecureSession::fresh(session.clients.clone());
            assert_ne!(neighbours(&other), graph);
            // k is even: a strict majority of k + 1 is k / 2 + 1.
            assert_eq!(share_threshold(&session, k + 1), k / 2 + 1);
        }
    }
}
