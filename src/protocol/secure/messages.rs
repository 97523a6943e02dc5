//! The messages of the four steps of secure aggregation (see
//! [`super`] for the protocol): what a site answers and what the
//! coordinator relays. Sites are named by their place in the session's
//! client list (0-based); a Shamir share's point is that place plus one.

use datafusion::arrow::record_batch::RecordBatch;
use sha2::{Digest, Sha256};

use super::shamir::Share;
use super::{SecureSession, SignedKey};

/// Domain separation of the digest a site's identity signs.
const KEYS_DIGEST_CONTEXT: &[u8] = b"fedsql secure aggregation v2: participant keys";

/// A site's public keys for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParticipantKeys {
    /// The X25519 key of its pairwise masks.
    pub mask_key: [u8; 32],
    /// The X25519 key its share envelopes are sealed to.
    pub cipher_key: [u8; 32],
    /// SHA-256 commitment to its self-mask seed (see [`super::masks::self_commitment`]).
    pub self_commitment: [u8; 32],
    /// Its identity's signature of the session id and [`Self::digest`], at
    /// a site with a long-term identity.
    pub signed: Option<SignedKey>,
}

impl ParticipantKeys {
    /// The one 32-byte value a site's identity signs for its keys.
    pub fn digest(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(KEYS_DIGEST_CONTEXT);
        hash.update(self.mask_key);
        hash.update(self.cipher_key);
        hash.update(self.self_commitment);
        hash.finalize().into()
    }

    /// Whether the keys carry a valid signature for `session` by the
    /// identity they name (not whether that identity is a listed peer).
    pub fn signature_verifies(&self, session: &[u8; 16]) -> bool {
        self.signed
            .is_some_and(|s| s.verifies(session, &self.digest()))
    }
}

/// A site's answer to the setup: its keys and the group keys it has state
/// for (the key columns of its state; no columns without GROUP BY).
#[derive(Debug, Clone)]
pub struct SecureSetup {
    pub keys: ParticipantKeys,
    pub group_keys: RecordBatch,
}

/// Step 2: the keys of every site of the session, in session order; `None`
/// for a site that did not answer the setup.
#[derive(Debug, Clone)]
pub struct ShareRequest {
    pub session: SecureSession,
    pub keys: Vec<Option<ParticipantKeys>>,
}

impl ShareRequest {
    /// The places of the sites with keys.
    pub fn participants(&self) -> Vec<usize> {
        (0..self.keys.len())
            .filter(|&i| self.keys[i].is_some())
            .collect()
    }
}

/// One sealed pair of shares, from the site at `from` to the site at `to`
/// (see [`super::masks::seal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEnvelope {
    pub from: u32,
    pub to: u32,
    pub ciphertext: Vec<u8>,
}

/// Step 3: the envelopes addressed to one site, from every site that sent
/// its shares, and the union of the group keys in canonical order.
#[derive(Debug, Clone)]
pub struct MaskRequest {
    pub session: SecureSession,
    pub envelopes: Vec<ShareEnvelope>,
    pub groups: RecordBatch,
}

/// Step 4: the places of the sites whose masked state the coordinator
/// received (the survivors).
#[derive(Debug, Clone)]
pub struct UnmaskRequest {
    pub session: SecureSession,
    pub survivors: Vec<u32>,
}

/// Which secret a revealed share is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevealedKind {
    /// The self-mask seed of a site that survived.
    SelfSeed,
    /// The mask secret key of a site that dropped out after sharing.
    MaskKey,
}

/// One share a survivor reveals in step 4: of the site at `of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revealed {
    pub of: u32,
    pub kind: RevealedKind,
    pub share: Share,
}
