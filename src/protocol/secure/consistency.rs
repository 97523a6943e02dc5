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
//! A site signs with a fresh Ed25519 key of the session ([`super::ParticipantKeys::list_key`]),
//! which its identity signs with its other keys when it has one; a site
//! that lists its peers counts only signatures whose keys a listed peer
//! signed.

use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};

use super::SecureSession;

/// Domain separation of survivor-list signatures.
const LIST_CONTEXT: &[u8] = b"fedsql secure aggregation v3: survivor list";

/// Step 4: the survivors (places whose masked state the coordinator
/// received), for each of them to sign.
#[derive(Debug, Clone)]
pub struct ConfirmRequest {
    pub session: SecureSession,
    pub survivors: Vec<u32>,
}

/// A survivor's signature of the survivor list, by the site at `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListSignature {
    pub from: u32,
    pub signature: [u8; 64],
}

/// What a survivor signs: the whole session (id, clients, threshold: a
/// signature counts only among sites with the same view of the round)
/// and the survivors' places in the order given.
pub fn list_message(session: &SecureSession, survivors: &[u32]) -> Vec<u8> {
    let mut hash = Sha256::new();
    hash.update(session.id);
    hash.update((session.clients.len() as u64).to_be_bytes());
    for client in &session.clients {
        hash.update((client.len() as u64).to_be_bytes());
        hash.update(client.as_bytes());
    }
    hash.update((session.threshold as u64).to_be_bytes());
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

/// Signs `survivors` for `session` with the key of `seed`.
pub fn sign_list(seed: &[u8; 32], session: &SecureSession, survivors: &[u32]) -> [u8; 64] {
    list_key_pair(seed)
        .sign(&list_message(session, survivors))
        .as_ref()
        .try_into()
        .expect("an Ed25519 signature is 64 bytes")
}

impl ListSignature {
    /// Whether this is `list_key`'s signature of `survivors` for `session`.
    pub fn verifies(
        &self,
        session: &SecureSession,
        survivors: &[u32],
        list_key: &[u8; 32],
    ) -> bool {
        UnparsedPublicKey::new(&ED25519, list_key)
            .verify(&list_message(session, survivors), &self.signature)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_good_for_one_list_and_one_session_only() {
        let seed = [7u8; 32];
        let key = list_public_key(&seed);
        let session = SecureSession::fresh(vec!["a".into(), "b".into(), "c".into()]);
        let signed = ListSignature {
            from: 0,
            signature: sign_list(&seed, &session, &[0, 1, 2]),
        };
        assert!(signed.verifies(&session, &[0, 1, 2], &key));
        assert!(!signed.verifies(&session, &[0, 1], &key));
        assert!(!signed.verifies(&session, &[0, 2, 1], &key));
        let other = SecureSession {
            id: session.id,
            clients: vec!["a".into(), "b".into(), "d".into()],
            threshold: session.threshold,
        };
        assert!(!signed.verifies(&other, &[0, 1, 2], &key));
        assert!(!signed.verifies(&session.clone().with_threshold(3), &[0, 1, 2], &key));
        assert!(!signed.verifies(&session, &[0, 1, 2], &list_public_key(&[8u8; 32])));
    }
}
