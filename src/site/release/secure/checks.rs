//! What a site checks of the relayed keys before it takes part in a
//! secure session's steps: the threshold rules, its own place among the
//! keys, and its peers (see [`super::steps`] for the steps themselves).

use crate::error::{FedError, Result};
use crate::protocol::secure::threshold::{HONEST_BEHIND_A_TOTAL, SiteFloor};
use crate::protocol::secure::{ParticipantKeys, SecureSession, ShareRequest, peered_threshold};

/// What a site checks of a session before it runs anything for it: the
/// threshold rules over the session's sites ([`check_threshold`]) and the
/// DP noise's share count ([`check_noise_shares`]).
pub(crate) fn check_session(session: &SecureSession, floor: SiteFloor) -> Result<()> {
    check_threshold(session, session.clients.len(), floor)?;
    check_noise_shares(session, floor)
}

/// A session's DP share count d: each site adds NB(1/d) of a `secure_dp_…`
/// call's noise, so d must be at most this site's own count
/// ([`SiteFloor::noise_shares`]: t, or t − c with peers) — then any d
/// honest survivors carry a full draw, whatever the other sites' peers
/// lists say — and at least 1.
pub(super) fn check_noise_shares(session: &SecureSession, floor: SiteFloor) -> Result<()> {
    let (t, n, d) = (
        session.threshold,
        session.clients.len(),
        session.noise_shares,
    );
    let own = floor.noise_shares(t, n);
    if d == 0 {
        return Err(FedError::refused(
            format!(
                "a secure session without a DP share count (this site cuts its noise into at most {own} shares)"
            ),
            Some(
                "upgrade the coordinator to this worker's version: it sends the share count with the threshold",
            ),
        ));
    }
    if d > own {
        let why = if floor.federation == 0 {
            format!("its threshold {t}")
        } else {
            format!(
                "its threshold {t} less the {} sites of this site's federation that may collude with the coordinator and add no noise",
                floor.colluders(n)
            )
        };
        return Err(FedError::refused(
            format!(
                "a secure session that cuts each site's DP noise into {d} shares: this site cuts it into at most {own} ({why}), so that the honest survivors' shares make at least one full draw"
            ),
            Some(
                "a coordinator uses the least count its sites announce; this session asked this site for more (a coordinator that does not know this site's peers, or a hostile one)",
            ),
        ));
    }
    Ok(())
}

/// The threshold rules every site checks of a session over `n` sites: at
/// least its own floor and a strict majority of the sites (with peers
/// listed, more than two thirds of them, more than (n + c)/2 for the
/// colluders its federation may hold, and c + its honest minimum:
/// [`SiteFloor::least`]), at most `n`.
pub(super) fn check_threshold(session: &SecureSession, n: usize, floor: SiteFloor) -> Result<()> {
    let t = session.threshold;
    let least = floor.least(n);
    if t < least || t > n {
        let why = if floor.federation == 0 {
            "a strict majority".to_string()
        } else {
            let federation = floor.federation.max(n);
            let c = floor.colluders(n);
            let honest = c + HONEST_BEHIND_A_TOTAL;
            if honest > floor.majority(n) && honest >= floor.min_secure_clients {
                format!(
                    "the {c} sites of this site's federation of {federation} that may collude with the coordinator (fewer than a third) and {HONEST_BEHIND_A_TOTAL} more, as a total over fewer honest sites would give a site's state away once the colluders' inputs are taken from it"
                )
            } else if floor.majority(n) > peered_threshold(n) {
                format!(
                    "more than (n + c)/2 = {}, as this site's peers make a federation of N = {federation} sites of which up to c = {c} (fewer than a third) may collude with the coordinator, and a round over {n} of them could otherwise be split between two survivor lists",
                    (n + c) as f64 / 2.0
                )
            } else {
                format!(
                    "more than two thirds of the sites, as this site checks its peers: at t = {} or less, sites colluding with the coordinator could sign two survivor lists and unmask a site",
                    2 * n / 3
                )
            }
        };
        let own = if floor.min_secure_clients > floor.majority(n) {
            format!(
                ", and this site's min_secure_clients {}",
                floor.min_secure_clients
            )
        } else {
            String::new()
        };
        let hint = if least > n {
            "run the round over more of the federation's sites: no threshold over these few protects a site"
        } else {
            "leave the threshold unset (the coordinator picks the least the sites accept), or SET fedsql.secure_threshold within those bounds"
        };
        return Err(FedError::refused(
            format!(
                "a secure sum's threshold {t} over {n} sites: it must be at least {least} ({why}{own}) and at most {n}"
            ),
            Some(hint),
        ));
    }
    Ok(())
}

/// This site's place among the relayed keys of `request`, whose own keys
/// are `own`: refused unless they are relayed once and unchanged, no
/// public key is relayed twice, and at least the threshold sent keys.
pub(super) fn relayed_place(request: &ShareRequest, own: &ParticipantKeys) -> Result<usize> {
    let session = &request.session;
    let n = session.clients.len();
    if request.keys.len() != n {
        return Err(FedError::InvalidArgument(format!(
            "{} sites' keys relayed for {n} clients",
            request.keys.len()
        )));
    }
    let participants = request.participants();
    let places: Vec<usize> = participants
        .iter()
        .copied()
        .filter(|&j| request.keys[j].is_some_and(|k| k.mask_key == own.mask_key))
        .collect();
    let me = match places[..] {
        [at] if request.keys[at] == Some(*own) => at,
        [] => {
            return Err(FedError::InvalidArgument(format!(
                "the coordinator did not relay this client's keys for secure session {}",
                session.id_hex()
            )));
        }
        _ => {
            return Err(FedError::InvalidArgument(
                "the coordinator relayed this client's keys more than once, or changed them".into(),
            ));
        }
    };
    // A key relayed twice would make a pair of masks cancel, or let
    // one site read another's envelope.
    let mut seen: Vec<[u8; 32]> = participants
        .iter()
        .flat_map(|&j| {
            let k = request.keys[j].expect("a participant");
            [k.mask_key, k.cipher_key]
        })
        .collect();
    seen.sort();
    seen.dedup();
    if seen.len() != 2 * participants.len() {
        return Err(FedError::InvalidArgument(
            "the coordinator relayed a public key more than once".into(),
        ));
    }
    if participants.len() < session.threshold {
        return Err(FedError::InvalidArgument(format!(
            "secure session {}: {} sites sent keys, fewer than the threshold {}",
            session.id_hex(),
            participants.len(),
            session.threshold
        )));
    }
    Ok(me)
}

/// Whom a site shares its secrets with and masks with: the relayed
/// participants of a secure session, checked against the site's listed
/// peers.
///
/// The keys of every neighbour (every other site in a full round) must be
/// signed, for this session, by a listed peer; no peer may count twice, nor may the
/// site itself; and the site with its peers must make `min_participants`.
/// With no peers listed, only the number of sites with keys is checked — a
/// coordinator that invents participants passes that (the security page's
/// threat model says so). Returns the rule broken, for the refusal.
pub(crate) fn check_participants(
    request: &ShareRequest,
    (me, neighbours): (usize, &[usize]),
    own_identity: Option<[u8; 32]>,
    peers: &[[u8; 32]],
    min_participants: usize,
) -> std::result::Result<(), String> {
    let too_few = || {
        format!(
            "a secure sum needs at least {min_participants} participants (its min_secure_clients policy)"
        )
    };
    let mut participants: Vec<usize> = neighbours
        .iter()
        .copied()
        .filter(|&j| request.keys.get(j).is_some_and(Option::is_some))
        .collect();
    participants.push(me);
    if peers.is_empty() {
        return if participants.len() < min_participants {
            Err(too_few())
        } else {
            Ok(())
        };
    }
    let unsigned = || {
        "a participant's session key is not signed by one of its listed peers (its peers policy)"
            .to_string()
    };
    let mut signers = Vec::new();
    for &j in &participants {
        if j == me {
            continue;
        }
        let keys = request.keys[j].expect("a participant");
        let signed = keys.signed.ok_or_else(unsigned)?;
        let listed = peers.contains(&signed.identity) && Some(signed.identity) != own_identity;
        if !listed || !keys.signature_verifies(&request.session.id) {
            return Err(unsigned());
        }
        if signers.contains(&signed.identity) {
            return Err(
                "one peer's identity signs two of the session's keys (its peers policy)".into(),
            );
        }
        signers.push(signed.identity);
    }
    if 1 + signers.len() < min_participants {
        return Err(too_few());
    }
    Ok(())
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
