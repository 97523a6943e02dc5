//! The cryptography both sides of secure aggregation compute alike: the
//! pairwise and self masks, their expansion into 64-bit words, where in a
//! state those words go, and the envelopes that carry Shamir shares from
//! site to site through the coordinator.
//!
//! - **Pairwise mask seed**: HKDF-SHA256 of the X25519 shared secret of
//!   two sites' mask keys, salted with the session id and bound to both
//!   public keys in a fixed order. The coordinator recomputes it only for
//!   a site that dropped out after masking, from that site's mask key
//!   rebuilt from t shares.
//! - **Self mask seed**: 32 random bytes per site and session; the word
//!   stream is keyed by HKDF-SHA256 of it, salted with the session id. Its
//!   SHA-256 commitment (with the session id) is published at setup, so a
//!   seed rebuilt from shares is checked before it is used.
//! - **Expansion**: ChaCha20 keyed by the full 32-byte seed, on a stream
//!   number that separates pairwise from self masks, one `u64` per word.
//! - **Envelopes**: each share pair travels sealed with ChaCha20-Poly1305
//!   under a key from the X25519 agreement of the two sites' cipher keys
//!   (HKDF-SHA256 bound to the session, sender, receiver and both keys),
//!   with the session id, threshold, sender, receiver and round in the
//!   associated data; the coordinator relays ciphertexts it cannot open
//!   nor move to another session, pair or round.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};

use super::shamir::{SHARE_BYTES, Share};
use super::{SecureLayout, SecureSession};
use crate::error::{FedError, Result};

/// Domain separation of the pairwise key derivation.
const PAIRWISE_INFO: &[u8] = b"fedsql secure aggregation v2: pairwise mask key";
/// Domain separation of the self mask's key.
const SELF_INFO: &[u8] = b"fedsql secure aggregation v2: self mask key";
/// Domain separation of the self-mask seed's commitment.
const COMMITMENT_CONTEXT: &[u8] = b"fedsql secure aggregation v2: self mask commitment";
/// Domain separation of the envelope keys.
const ENVELOPE_INFO: &[u8] = b"fedsql secure aggregation v2: share envelope";
/// The round in an envelope's associated data (the share distribution).
const SHARE_ROUND: u8 = 1;

/// ChaCha20 stream of pairwise masks.
const PAIRWISE_STREAM: u64 = 0;
/// ChaCha20 stream of self masks.
const SELF_STREAM: u64 = 1;

/// The ChaCha20 seed shared by the owner of `secret` and the owner of
/// `peer` (both mask keys) for `session`.
pub fn pairwise_seed(
    secret: &StaticSecret,
    peer: &[u8; 32],
    session: &[u8; 16],
) -> std::result::Result<[u8; 32], String> {
    let mine = PublicKey::from(secret).to_bytes();
    if *peer == mine {
        return Err("its public key equals this client's".into());
    }
    let shared = secret.diffie_hellman(&PublicKey::from(*peer));
    if !shared.was_contributory() {
        return Err("its public key is a low-order point; refusing the key exchange".into());
    }
    let (low, high) = if mine < *peer {
        (mine, *peer)
    } else {
        (*peer, mine)
    };
    let mut info = PAIRWISE_INFO.to_vec();
    info.extend_from_slice(&low);
    info.extend_from_slice(&high);
    let hkdf = hkdf::Hkdf::<Sha256>::new(Some(session), shared.as_bytes());
    let mut seed = [0u8; 32];
    hkdf.expand(&info, &mut seed)
        .map_err(|e| format!("key derivation failed: {e}"))?;
    Ok(seed)
}

/// Whether the site at `me` adds (rather than subtracts) the mask it
/// shares with the site at `peer`: the lower place adds.
pub fn adds(me: usize, peer: usize) -> bool {
    me < peer
}

/// Adds (or subtracts) the pairwise mask of `seed` to `mask`.
pub fn apply_pairwise(mask: &mut [u64], seed: &[u8; 32], add: bool) {
    apply(mask, seed, PAIRWISE_STREAM, add);
}

/// Adds (or subtracts) the self mask of `self_seed` for `session`.
pub fn apply_self(mask: &mut [u64], self_seed: &[u8; 32], session: &[u8; 16], add: bool) {
    let hkdf = hkdf::Hkdf::<Sha256>::new(Some(session), self_seed);
    let mut key = [0u8; 32];
    hkdf.expand(SELF_INFO, &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 length");
    apply(mask, &key, SELF_STREAM, add);
}

fn apply(mask: &mut [u64], key: &[u8; 32], stream: u64, add: bool) {
    let mut prg = ChaCha20Rng::from_seed(*key);
    prg.set_stream(stream);
    if add {
        mask.iter_mut()
            .for_each(|m| *m = m.wrapping_add(prg.next_u64()));
    } else {
        mask.iter_mut()
            .for_each(|m| *m = m.wrapping_sub(prg.next_u64()));
    }
}

/// The commitment to a self-mask seed a site publishes at setup.
pub fn self_commitment(session: &[u8; 16], self_seed: &[u8; 32]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(COMMITMENT_CONTEXT);
    hash.update(session);
    hash.update(self_seed);
    hash.finalize().into()
}

/// What one site tells another, sealed: its shares of its own mask key
/// and self-mask seed, at the receiver's point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharePair {
    /// The share of the sender's mask (X25519) secret key.
    pub mask_key: Share,
    /// The share of the sender's self-mask seed.
    pub self_seed: Share,
}

/// The associated data of an envelope.
fn envelope_aad(session: &SecureSession, from: u32, to: u32) -> Vec<u8> {
    let mut aad = ENVELOPE_INFO.to_vec();
    aad.extend_from_slice(&session.id);
    aad.extend_from_slice(&(session.threshold as u32).to_le_bytes());
    aad.extend_from_slice(&(session.noise_shares as u32).to_le_bytes());
    aad.extend_from_slice(&(session.clients.len() as u32).to_le_bytes());
    aad.extend_from_slice(&from.to_le_bytes());
    aad.extend_from_slice(&to.to_le_bytes());
    aad.push(SHARE_ROUND);
    aad
}

/// The AEAD key of the envelope from `from` to `to`: one key per
/// direction, pair and session.
fn envelope_key(
    secret: &StaticSecret,
    peer: &[u8; 32],
    session: &SecureSession,
    (from, to): (u32, u32),
    sender_key: &[u8; 32],
) -> Result<LessSafeKey> {
    let shared = secret.diffie_hellman(&PublicKey::from(*peer));
    if !shared.was_contributory() {
        return Err(FedError::InvalidArgument(
            "a cipher key is a low-order point; refusing the key exchange".into(),
        ));
    }
    let receiver_key = if sender_key == peer {
        PublicKey::from(secret).to_bytes()
    } else {
        *peer
    };
    let mut info = ENVELOPE_INFO.to_vec();
    info.extend_from_slice(&from.to_le_bytes());
    info.extend_from_slice(&to.to_le_bytes());
    info.extend_from_slice(sender_key);
    info.extend_from_slice(&receiver_key);
    let hkdf = hkdf::Hkdf::<Sha256>::new(Some(&session.id), shared.as_bytes());
    let mut key = [0u8; 32];
    hkdf.expand(&info, &mut key)
        .map_err(|e| FedError::Internal(format!("key derivation failed: {e}")))?;
    let unbound = UnboundKey::new(&CHACHA20_POLY1305, &key)
        .map_err(|_| FedError::Internal("bad ChaCha20-Poly1305 key".into()))?;
    Ok(LessSafeKey::new(unbound))
}

/// Seals `pair` from the site at `from` (cipher secret `secret`) to the
/// site at `to` (cipher public key `peer`): a random nonce, then the
/// ciphertext and tag.
pub fn seal(
    secret: &StaticSecret,
    peer: &[u8; 32],
    session: &SecureSession,
    (from, to): (u32, u32),
    pair: &SharePair,
) -> Result<Vec<u8>> {
    let sender_key = PublicKey::from(secret).to_bytes();
    let key = envelope_key(secret, peer, session, (from, to), &sender_key)?;
    let nonce_bytes: [u8; 12] = rand::random();
    let mut body = Vec::with_capacity(8 + 2 * SHARE_BYTES + 16);
    body.extend_from_slice(&from.to_le_bytes());
    body.extend_from_slice(&to.to_le_bytes());
    body.extend_from_slice(&pair.mask_key.to_bytes());
    body.extend_from_slice(&pair.self_seed.to_bytes());
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce_bytes),
        Aad::from(envelope_aad(session, from, to)),
        &mut body,
    )
    .map_err(|_| FedError::Internal("sealing a share failed".into()))?;
    let mut out = nonce_bytes.to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Opens an envelope from the site at `from` (cipher public key `peer`) to
/// this site at `to` (cipher secret `secret`); fails on any change of its
/// bytes, session, threshold, sender, receiver or round.
pub fn open(
    secret: &StaticSecret,
    peer: &[u8; 32],
    session: &SecureSession,
    (from, to): (u32, u32),
    envelope: &[u8],
) -> Result<SharePair> {
    let refused = || {
        FedError::InvalidArgument(format!(
            "the share envelope relayed from participant {from} does not open: it was changed, replayed from another session or addressed to another site"
        ))
    };
    if envelope.len() < 12 {
        return Err(refused());
    }
    let key = envelope_key(secret, peer, session, (from, to), peer)?;
    let nonce = Nonce::try_assume_unique_for_key(&envelope[..12]).map_err(|_| refused())?;
    let mut body = envelope[12..].to_vec();
    let plain = key
        .open_in_place(nonce, Aad::from(envelope_aad(session, from, to)), &mut body)
        .map_err(|_| refused())?;
    if plain.len() != 8 + 2 * SHARE_BYTES
        || plain[..4] != from.to_le_bytes()
        || plain[4..8] != to.to_le_bytes()
    {
        return Err(refused());
    }
    let mask_key = Share::from_bytes(&plain[8..8 + SHARE_BYTES]).ok_or_else(refused)?;
    let self_seed = Share::from_bytes(&plain[8 + SHARE_BYTES..]).ok_or_else(refused)?;
    // Shares are at the receiver's point.
    if mask_key.x != to + 1 || self_seed.x != to + 1 {
        return Err(refused());
    }
    Ok(SharePair {
        mask_key,
        self_seed,
    })
}

/// The number of 64-bit words in the secure columns of a state batch.
pub fn secure_words(batch: &RecordBatch, layout: &SecureLayout) -> Result<usize> {
    let mut words = 0;
    for &i in &layout.secure_columns {
        words += secure_values(batch.column(i))?.len();
    }
    Ok(words)
}

/// The `UInt64` words of a secure column (a list column's flat values).
fn secure_values(column: &ArrayRef) -> Result<UInt64Array> {
    let values = match column.data_type() {
        DataType::UInt64 => column.as_primitive::<UInt64Type>().clone(),
        DataType::List(_) => {
            let list = column.as_list::<i32>();
            let offsets = list.value_offsets();
            let (start, end) = (offsets[0] as usize, offsets[list.len()] as usize);
            list.values()
                .slice(start, end - start)
                .as_primitive::<UInt64Type>()
                .clone()
        }
        other => {
            return Err(FedError::Internal(format!(
                "a secure state column of type {other}"
            )));
        }
    };
    if column.null_count() > 0 || values.null_count() > 0 {
        return Err(FedError::Internal(
            "a secure state column with NULLs".into(),
        ));
    }
    Ok(values)
}

/// The state with `mask` added (mod 2^64) to its secure columns, in order.
pub fn add_mask(batch: &RecordBatch, layout: &SecureLayout, mask: &[u64]) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    let mut at = 0;
    for &i in &layout.secure_columns {
        let column = &columns[i];
        let values = secure_values(column)?;
        let n = values.len();
        let words = UInt64Array::from(
            mask.get(at..at + n)
                .ok_or_else(|| FedError::Internal("a mask shorter than the state".into()))?
                .to_vec(),
        );
        at += n;
        let masked = datafusion::arrow::compute::kernels::numeric::add_wrapping(&values, &words)?;
        columns[i] = match column.data_type() {
            DataType::List(field) => {
                let list = column.as_list::<i32>();
                let start = list.value_offsets()[0];
                let offsets = list.offsets().iter().map(|o| o - start).collect::<Vec<_>>();
                Arc::new(ListArray::try_new(
                    Arc::clone(field),
                    datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
                    masked,
                    None,
                )?)
            }
            _ => masked,
        };
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::secure::shamir;

    #[test]
    fn pairwise_seeds_agree_and_differ_per_session() {
        let a = StaticSecret::from([1u8; 32]);
        let b = StaticSecret::from([2u8; 32]);
        let (pa, pb) = (PublicKey::from(&a), PublicKey::from(&b));
        let s1 = [7u8; 16];
        let ab = pairwise_seed(&a, &pb.to_bytes(), &s1).unwrap();
        let ba = pairwise_seed(&b, &pa.to_bytes(), &s1).unwrap();
        assert_eq!(ab, ba);
        let other = pairwise_seed(&a, &pb.to_bytes(), &[8u8; 16]).unwrap();
        assert_ne!(ab, other);
        // A low-order peer key is refused.
        assert!(pairwise_seed(&a, &[0u8; 32], &s1).is_err());
        // Masks of the two sides cancel; the self mask's stream differs.
        let mut mask = vec![0u64; 5];
        apply_pairwise(&mut mask, &ab, true);
        apply_pairwise(&mut mask, &ba, false);
        assert_eq!(mask, vec![0; 5]);
        let mut pair = vec![0u64; 3];
        apply_pairwise(&mut pair, &ab, true);
        let mut own = vec![0u64; 3];
        apply_self(&mut own, &ab, &s1, true);
        assert_ne!(pair, own);
    }

    #[test]
    fn envelopes_open_only_for_their_session_pair_and_bytes() {
        let session = SecureSession::fresh(vec!["a".into(), "b".into(), "c".into()]);
        let a = StaticSecret::from(rand::random::<[u8; 32]>());
        let b = StaticSecret::from(rand::random::<[u8; 32]>());
        let c = StaticSecret::from(rand::random::<[u8; 32]>());
        let (pa, pb, pc) = (
            PublicKey::from(&a).to_bytes(),
            PublicKey::from(&b).to_bytes(),
            PublicKey::from(&c).to_bytes(),
        );
        let fill = |buf: &mut [u8]| rand::RngCore::fill_bytes(&mut rand::rng(), buf);
        let key = shamir::split(&[5u8; 32], 3, 2, fill);
        let seed = shamir::split(&[6u8; 32], 3, 2, fill);
        let pair = SharePair {
            mask_key: key[1],
            self_seed: seed[1],
        };
        let sealed = seal(&a, &pb, &session, (0, 1), &pair).unwrap();
        assert_eq!(open(&b, &pa, &session, (0, 1), &sealed).unwrap(), pair);
        // Another receiver, sender, direction or session: refused.
        assert!(open(&c, &pa, &session, (0, 1), &sealed).is_err());
        assert!(open(&b, &pc, &session, (0, 1), &sealed).is_err());
        assert!(open(&b, &pa, &session, (0, 2), &sealed).is_err());
        assert!(open(&b, &pa, &session, (1, 0), &sealed).is_err());
        let mut other = session.clone();
        other.id[0] ^= 1;
        assert!(open(&b, &pa, &other, (0, 1), &sealed).is_err());
        let mut lower = session.clone();
        lower.threshold -= 1;
        assert!(open(&b, &pa, &lower, (0, 1), &sealed).is_err());
        let finer = session.clone().with_noise_shares(session.noise_shares + 1);
        assert!(open(&b, &pa, &finer, (0, 1), &sealed).is_err());
        // A flipped bit anywhere.
        for i in [0, 12, sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(open(&b, &pa, &session, (0, 1), &bad).is_err());
        }
        // A share sealed for the wrong point is refused by its receiver.
        let wrong = SharePair {
            mask_key: key[2],
            self_seed: seed[2],
        };
        let sealed = seal(&a, &pb, &session, (0, 1), &wrong).unwrap();
        assert!(open(&b, &pa, &session, (0, 1), &sealed).is_err());
    }
}
