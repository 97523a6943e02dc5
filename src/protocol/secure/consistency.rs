//! The consistency round of secure aggregation (Bonawitz et al., CCS 2017,
//! §4, the variant secure against an actively hostile server): before any
//! survivor reveals a share, every survivor signs the one survivor list it
//! was given, and a survivor reveals only when it is shown the same list
//! signed by at least t distinct participants.
//!
//! Without it a coordinator could send each survivor a *different* list:
//! each list passes every check a single site can make, yet together they
//! hand over the self-seed shares of two sites and the mask-key shares of
//! all others — the sum of two sites below the threshold, and after three
//! such rounds one site's exact state. Each site signs one list per
//! session, and t > n/2, so no two lists can both gather t signatures: all
//! honest survivors answer for the same list, and for every site they
//! reveal one kind of share only.
//!
//! What a survivor signs binds, besides the list, its *view* of the round
//! ([`view_digest`]): the encoder it ran (its digest, made by the site), the keys it
//! was relayed for every place and the group list it aligned its state
//! to. A survivor reveals only when at least t signatures of the same
//! list and view verify, and what it reveals is decided by the list
//! alone (self-seed shares of listed sites, mask-key shares of the
//! others), never by which signatures it is shown. So a coordinator that
//! gives one site another query (the others one that adds nothing),
//! another group order, or puts another site at a place in one site's
//! view, finds no t sites that signed that site's view.
//!
//! A site signs with a fresh Ed25519 key of the session ([`super::ParticipantKeys::list_key`]),
//! which its identity signs with its other keys when it has one; a site
//! that lists its peers counts only signatures whose keys a listed peer
//! signed.

use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};

use super::{ParticipantKeys, SecureSession};

/// Domain separation of survivor-list signatures.
const LIST_CONTEXT: &[u8] = b"fedsql secure aggregation v3: survivor list";

/// Step 4: the survivors (places whose masked state the coordinator
/// received), for each of them to sign.
#[derive(Debug, Clone)]
pub struct ConfirmRequest {
    pub session: SecureSession,
    pub survivors: Vec<u32>,
}

pub use super::ListSignature;

/// A site's view of the round: the digest of the encoder it ran, of the
/// keys relayed for every place (none for a place without keys) and of
/// the group list its state was aligned to.
pub fn view_digest(
    encoder: &[u8; 32],
    keys: &[Option<ParticipantKeys>],
    groups: &[u8; 32],
) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(encoder);
    hash.update((keys.len() as u64).to_be_bytes());
    for k in keys {
        match k {
            Some(k) => {
                hash.update([1]);
                hash.update(k.digest());
                hash.update(k.signed.map(|s| s.identity).unwrap_or([0; 32]));
            }
            None => hash.update([0]),
        }
    }
    hash.update(groups);
    hash.finalize().into()
}

/// What a survivor signs: the whole session (id, clients, threshold, noise
/// shares), its
/// view of the round ([`view_digest`]) and the survivors' places in the
/// order given. A signature counts only among sites with the same session,
/// view and list.
pub fn list_message(session: &SecureSession, view: &[u8; 32], survivors: &[u32]) -> Vec<u8> {
    let mut hash = Sha256::new();
    hash.update(session.id);
    hash.update((session.clients.len() as u64).to_be_bytes());
    for client in &session.clients {
        hash.update((client.len() as u64).to_be_bytes());
        hash.update(client.as_bytes());
    }
    hash.update((session.threshold as u64).to_be_bytes());
    hash.update((session.noise_shares as u64).to_be_bytes());
    hash.update(view);
    let mut message = LIST_CONTEXT.to_vec();
    message.extend_from_slice(&hash.finalize());
    message.extend_from_slice(&(survivors.len() as u64).to_be_bytes());
    for s in survivors {
        message.extend_from_slice(&s.to_be_bytes());
    }
    message
}

/// The session key pair that signs a site's survivor list, from its seed.
pub fn list_key_pair(seed: &[u8; 32]) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(seed).expect("any 32 bytes are an Ed25519 seed")
}

/// The public half of [`list_key_pair`].
pub fn list_public_key(seed: &[u8; 32]) -> [u8; 32] {
    list_key_pair(seed)
        .public_key()
        .as_ref()
        .try_into()
        .expect("an Ed25519 public key is 32 bytes")
}

/// Signs `survivors` for `session` and `view` with the key of `seed`.
pub fn sign_list(
    seed: &[u8; 32],
    session: &SecureSession,
    view: &[u8; 32],
    survivors: &[u32],
) -> [u8; 64] {
    list_key_pair(seed)
        .sign(&list_message(session, view, survivors))
        .as_ref()
        .try_into()
        .expect("an Ed25519 signature is 64 bytes")
}

impl ListSignature {
    /// Whether this is `list_key`'s signature of `survivors` for `session`
    /// and `view`.
    pub fn verifies(
        &self,
        session: &SecureSession,
        view: &[u8; 32],
        survivors: &[u32],
        list_key: &[u8; 32],
    ) -> bool {
        UnparsedPublicKey::new(&ED25519, list_key)
            .verify(&list_message(session, view, survivors), &self.signature)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: [u8; 32] = [3; 32];

    #[test]
    fn a_signature_is_good_for_one_list_and_one_session_only() {
        let seed = [7u8; 32];
        let key = list_public_key(&seed);
        let session = SecureSession::fresh(vec!["a".into(), "b".into(), "c".into()]);
        let signed = ListSignature {
            from: 0,
            signature: sign_list(&seed, &session, &VIEW, &[0, 1, 2]),
        };
        assert!(signed.verifies(&session, &VIEW, &[0, 1, 2], &key));
        assert!(!signed.verifies(&session, &VIEW, &[0, 1], &key));
        assert!(!signed.verifies(&session, &VIEW, &[0, 2, 1], &key));
        let other = SecureSession {
            id: session.id,
            clients: vec!["a".into(), "b".into(), "d".into()],
            threshold: session.threshold,
            noise_shares: session.noise_shares,
        };
        assert!(!signed.verifies(&other, &VIEW, &[0, 1, 2], &key));
        assert!(!signed.verifies(&session.clone().with_threshold(3), &VIEW, &[0, 1, 2], &key));
        let finer = session.clone().with_noise_shares(2);
        assert!(!signed.verifies(&finer, &VIEW, &[0, 1, 2], &key));
        assert!(!signed.verifies(&session, &[4; 32], &[0, 1, 2], &key));
        assert!(!signed.verifies(&session, &VIEW, &[0, 1, 2], &list_public_key(&[8u8; 32])));
    }
}
