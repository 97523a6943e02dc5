//! What a site requires of a secure session's threshold, by its
//! `min_secure_clients` and the federation its `peers` make, and what the
//! coordinator's default follows ([`SiteFloor`]).

use super::{default_threshold, peered_threshold};

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

/// The fewest honest sites a peered site lets a total stand on beyond the
/// c colluders it tolerates: t ≥ c + 2.
///
/// Without it the coordinator (or an analyst declaring a table) asks the
/// victim and c colluders alone, at t = n = c + 1: no list is split, and
/// the total less the colluders' inputs is the victim's (the eleventh
/// outside review). A data owner who wants k honest sites behind every
/// total sets `min_secure_clients` to c + k.
pub const HONEST_BEHIND_A_TOTAL: usize = 2;

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
    /// tolerates in its whole federation of N (fewer than a third of it).
    ///
    /// The second bound matters when the coordinator asks only part of
    /// the federation (the tenth outside review): its colluders may then
    /// be more than a third of the round, though fewer than a third of
    /// the federation. A peered round is full ([`super::graph::is_sparse`]), so a
    /// site's t shares of each kind lie with the n sites of its own view,
    /// each of which reveals one kind: both kinds need 2t − n + 1 of them
    /// colluding, more than c.
    pub fn majority(self, n: usize) -> usize {
        if self.federation == 0 {
            return default_threshold(n);
        }
        let c = self.colluders(n);
        peered_threshold(n).max((n + c) / 2 + 1)
    }

    /// The colluders a peered site tolerates in a round over `n` sites:
    /// fewer than a third of its federation (of at least n).
    pub fn colluders(self, n: usize) -> usize {
        tolerated_colluders(self.federation.max(n))
    }

    /// Into how many shares this site splits a `secure_dp_…` call's noise
    /// in a session over `n` sites at threshold `t`: t without peers (any
    /// t survivors make a full draw); with peers t − c for the c colluders
    /// it tolerates, who add no noise of their own, so that any t
    /// survivors less c colluders still make a full draw (the twelfth
    /// outside review: at t − c survivors' shares the noise fell to 2/t of
    /// a draw). At least 1.
    pub fn noise_shares(self, t: usize, n: usize) -> usize {
        if self.federation == 0 {
            t.max(1)
        } else {
            t.saturating_sub(self.colluders(n)).max(1)
        }
    }

    /// The least threshold over `n` sites this site accepts: its rule,
    /// its `min_secure_clients`, and with peers t ≥ c +
    /// [`HONEST_BEHIND_A_TOTAL`].
    pub fn least(self, n: usize) -> usize {
        let least = self.majority(n).max(self.min_secure_clients).max(1);
        if self.federation == 0 {
            least
        } else {
            least.max(self.colluders(n) + HONEST_BEHIND_A_TOTAL)
        }
    }
}
