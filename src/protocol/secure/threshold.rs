//! What a site requires of a secure session's threshold, by its
//! `min_secure_clients` and the federation its `peers` make, and what the
//! coordinator's default follows ([`SiteFloor`]).

use super::{default_threshold, graph, peered_threshold};

/// The most colluding sites a peered site tolerates in a federation of
/// `federation` sites: fewer than a third of them, ⌈N/3⌉ − 1.
pub fn tolerated_colluders(federation: usize) -> usize {
    federation.div_ceil(3).saturating_sub(1)
}

/// The size of the federation a site's listed `peers` make with its own
/// identity `own` (distinct identities; 0 when no peer is listed).
pub fn federation_size(peers: &[[u8; 32]], own: Option<[u8; 32]>) -> usize {
    if peers.is_empty() {
        return 0;
    }
    let mut all: Vec<[u8; 32]> = peers.iter().copied().chain(own).collect();
    all.sort_unstable();
    all.dedup();
    all.len()
}

/// What a site requires of a session's threshold: its `min_secure_clients`,
/// and, when it checks its participants against listed `peers`, the size
/// of the federation they make (the distinct identities it accepts, its
/// own included; 0: no peers). With peers the site does not trust the
/// coordinator, and a strict majority is not enough: see
/// [`peered_threshold`]. The coordinator's default is the greatest of its
/// sites' least.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiteFloor {
    pub min_secure_clients: usize,
    pub federation: usize,
}

impl SiteFloor {
    /// The least threshold over `n` sites the sites' rule allows: a strict
    /// majority without peers; with peers, more than two thirds of the
    /// `n` sites, and more than (n + c)/2 for the c colluders the site
    /// tolerates in its whole federation of N (fewer than a third of it) —
    /// in a sparse round more than (N + c)/2.
    ///
    /// The second bound matters when the coordinator asks only part of
    /// the federation (the tenth outside review): its colluders may then
    /// be more than a third of the round, though fewer than a third of
    /// the federation. In a full round a site's t shares of each kind lie
    /// with the n sites of its own view, so both kinds need 2t − n + 1 of
    /// them colluding. In a sparse round its shares lie with a few
    /// neighbours, and the one survivor list every honest site signs is
    /// what keeps the kinds apart; but sites outside the victim's view can
    /// sign a second list over another view, so the lists' signers come
    /// from the whole federation: two lists of t share 2t − N of them.
    pub fn majority(self, n: usize) -> usize {
        if self.federation == 0 {
            return default_threshold(n);
        }
        let federation = self.federation.max(n);
        let c = tolerated_colluders(federation);
        let over = if graph::is_sparse(n, peered_threshold(n)) {
            federation
        } else {
            n
        };
        peered_threshold(n).max((over + c) / 2 + 1)
    }

    /// The least threshold over `n` sites this site accepts.
    pub fn least(self, n: usize) -> usize {
        self.majority(n).max(self.min_secure_clients).max(1)
    }
}
