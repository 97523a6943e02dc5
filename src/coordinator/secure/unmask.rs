//! The coordinator's unmasking: from the shares the survivors revealed it
//! rebuilds each survivor's self-mask seed and the mask key of each site
//! that dropped out after sharing, checks every rebuilt secret against
//! what its site published at setup, and computes the words that remove
//! those masks from the sum. Any share missing or not matching fails the
//! round: a total is exact or not given.

use std::collections::BTreeMap;

use datafusion::arrow::record_batch::RecordBatch;
use x25519_dalek::{PublicKey, StaticSecret};

use crate::error::{FedError, Result};
use crate::protocol::secure::graph::GraphSeed;
use crate::protocol::secure::masks::{self, apply_pairwise, apply_self};
use crate::protocol::secure::shamir::{self, Share};
use crate::protocol::secure::{
    ParticipantKeys, Revealed, RevealedKind, SecureLayout, SecureSession,
};

/// The words to add to one survivor's secure columns so that the sum of
/// the survivors' masked states is their plain sum: minus every
/// survivor's self mask, and minus every survivor's pairwise mask with a
/// site of `sharing` (the sites that sent shares) that is not a survivor.
/// `revealed` holds each answering survivor's shares; `state` is a masked
/// state (for the number of words); `graph_seed` draws a sparse round's
/// graph.
pub(super) fn correction(
    (session, graph_seed): (&SecureSession, &GraphSeed),
    keys: &[Option<ParticipantKeys>],
    sharing: &[usize],
    survivors: &[usize],
    revealed: &[(usize, Vec<Revealed>)],
    layout: &SecureLayout,
    state: &RecordBatch,
) -> Result<Vec<u64>> {
    if layout.schema.fields().len() != state.num_columns() {
        return Err(FedError::Internal(format!(
            "a masked state of {} columns where the round's state has {}",
            state.num_columns(),
            layout.schema.fields().len()
        )));
    }
    let graph = crate::protocol::secure::graph::neighbours(session, graph_seed);
    // Shares by (site, kind), each from a survivor at its own point; a
    // share of the wrong kind for its site is not used.
    let mut shares: BTreeMap<(usize, bool), Vec<Share>> = BTreeMap::new();
    for (from, list) in revealed {
        for r in list {
            let of = r.of as usize;
            let want_seed = survivors.contains(&of);
            let is_seed = r.kind == RevealedKind::SelfSeed;
            if !sharing.contains(&of) || want_seed != is_seed || r.share.x as usize != from + 1 {
                continue;
            }
            shares.entry((of, is_seed)).or_default().push(r.share);
        }
    }
    let rebuild = |of: usize, seed: bool| -> Result<[u8; 32]> {
        let t = crate::protocol::secure::graph::share_threshold(session, graph[of].len() + 1);
        let found = shares.get(&(of, seed)).map_or(&[][..], Vec::as_slice);
        if found.len() < t {
            return Err(FedError::InvalidArgument(format!(
                "{} of the threshold {t} shares of client '{}' were revealed",
                found.len(),
                session.clients[of]
            )));
        }
        shamir::combine(&found[..t]).ok_or_else(|| {
            FedError::InvalidArgument(format!(
                "the shares of client '{}' do not combine",
                session.clients[of]
            ))
        })
    };
    let published =
        |of: usize| keys[of].ok_or_else(|| FedError::Internal("a participant without keys".into()));
    let words = masks::secure_words(state, layout)?;
    let mut correction = vec![0u64; words];
    for &v in survivors {
        let seed = rebuild(v, true)?;
        if masks::self_commitment(&session.id, &seed) != published(v)?.self_commitment {
            return Err(FedError::InvalidArgument(format!(
                "the self-mask seed rebuilt for client '{}' does not match its commitment (a wrong share)",
                session.clients[v]
            )));
        }
        apply_self(&mut correction, &seed, &session.id, false);
    }
    for &x in sharing.iter().filter(|x| !survivors.contains(x)) {
        let secret = StaticSecret::from(rebuild(x, false)?);
        if PublicKey::from(&secret).to_bytes() != published(x)?.mask_key {
            return Err(FedError::InvalidArgument(format!(
                "the mask key rebuilt for client '{}' does not match its public key (a wrong share)",
                session.clients[x]
            )));
        }
        for &v in survivors.iter().filter(|v| graph[x].contains(v)) {
            let seed = masks::pairwise_seed(&secret, &published(v)?.mask_key, &session.id)
                .map_err(FedError::InvalidArgument)?;
            // Survivor v added its mask with x if it is below x: take it away.
            apply_pairwise(&mut correction, &seed, !masks::adds(v, x));
        }
    }
    Ok(correction)
}
