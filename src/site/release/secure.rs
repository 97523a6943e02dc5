//! A site's half of secure aggregation: its key pair for a session, its
//! state kept between the two steps, and the pairwise masks it adds (see
//! [`crate::protocol::secure`] for the protocol).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, UInt64Array};
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use x25519_dalek::{PublicKey, StaticSecret};

use crate::error::{FedError, Result};
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::secure::{
    MaskRequest, SecureLayout, SecureSession, SecureSetup, key_converter,
};
use crate::site::release::identity::SiteIdentity;

/// Domain separation of the pairwise key derivation.
const KDF_INFO: &[u8] = b"fedsql secure aggregation v1: pairwise mask key";

/// Sessions a client keeps between setup and masked state; older ones (of
/// rounds that failed before step 2) are forgotten.
const MAX_PENDING_SESSIONS: usize = 16;

/// What a client keeps between the two steps: one entry per session; and
/// the site's long-term identity, if it has one, to sign its session keys.
#[derive(Default)]
pub(crate) struct ClientSecrets {
    pending: Mutex<VecDeque<Pending>>,
    identity: Option<Arc<SiteIdentity>>,
}

impl std::fmt::Debug for ClientSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.pending.lock().map(|p| p.len()).unwrap_or(0);
        write!(f, "ClientSecrets({n} pending sessions)")
    }
}

struct Pending {
    session: [u8; 16],
    secret: StaticSecret,
    public: PublicKey,
    state: RecordBatch,
    layout: SecureLayout,
}

impl ClientSecrets {
    /// Secrets of a site that signs its session keys with `identity`.
    pub(crate) fn with_identity(identity: Option<Arc<SiteIdentity>>) -> Self {
        Self {
            pending: Mutex::default(),
            identity,
        }
    }

    /// The site's identity key, if it has one.
    pub(crate) fn identity(&self) -> Option<[u8; 32]> {
        self.identity.as_ref().map(|i| i.public_key())
    }

    /// Step 1 at a client whose state for the session is `state`: a fresh
    /// key pair, kept with the state; returns the public key and group keys.
    pub(crate) fn setup(
        &self,
        session: &SecureSession,
        state: &StateBatch,
        layout: SecureLayout,
    ) -> Result<SecureSetup> {
        let secret = StaticSecret::from(rand::random::<[u8; 32]>());
        let public = PublicKey::from(&secret);
        let batch = state.batch().clone();
        let group_keys = batch.project(&(0..layout.key_columns).collect::<Vec<_>>())?;
        let mut pending = self.pending.lock().expect("not poisoned");
        pending.retain(|p| p.session != session.id);
        if pending.len() >= MAX_PENDING_SESSIONS {
            pending.pop_front();
        }
        pending.push_back(Pending {
            session: session.id,
            secret,
            public,
            state: batch,
            layout,
        });
        Ok(SecureSetup {
            public_key: public.to_bytes(),
            group_keys,
            signed: self
                .identity
                .as_ref()
                .map(|i| i.sign(&session.id, &public.to_bytes())),
        })
    }

    /// Step 2: the kept state aligned to the request's
    /// groups and masked; the session's secret is forgotten. `admit`
    /// decides, once this client's place in the session is known, whether
    /// it masks with the relayed participants at all.
    pub(crate) fn mask(
        &self,
        encoder: &Encoder,
        request: &MaskRequest,
        admit: impl FnOnce(usize) -> Result<()>,
    ) -> Result<StateBatch> {
        let session = &request.session;
        let pending = {
            let mut kept = self.pending.lock().expect("not poisoned");
            let at = kept.iter().position(|p| p.session == session.id);
            at.and_then(|i| kept.remove(i)).ok_or_else(|| {
                FedError::InvalidArgument(format!(
                    "no secure session {} here: the key exchange did not happen, or its masked state was already sent",
                    session.id_hex()
                ))
            })?
        };
        if request.public_keys.len() != session.clients.len() {
            return Err(FedError::InvalidArgument(format!(
                "{} public keys relayed for {} clients",
                request.public_keys.len(),
                session.clients.len()
            )));
        }
        // This client's place in the session is where its own public key
        // was relayed (a worker need not know the name the coordinator
        // gave it); a key relayed twice would pair a client with itself.
        let mine = pending.public.to_bytes();
        let places: Vec<usize> = (0..request.public_keys.len())
            .filter(|&j| request.public_keys[j] == mine)
            .collect();
        let me_at = match places[..] {
            [at] => at,
            [] => {
                return Err(FedError::InvalidArgument(format!(
                    "the coordinator did not relay this client's public key for secure session {}",
                    session.id_hex()
                )));
            }
            _ => {
                return Err(FedError::InvalidArgument(
                    "the coordinator relayed this client's public key more than once".into(),
                ));
            }
        };
        // A key relayed twice would make a pair of masks cancel.
        let mut keys = request.public_keys.clone();
        keys.sort();
        keys.dedup();
        if keys.len() != request.public_keys.len() {
            return Err(FedError::InvalidArgument(
                "the coordinator relayed a public key more than once".into(),
            ));
        }
        admit(me_at)?;
        let aligned = align(&pending.state, &pending.layout, &request.groups)?;
        let words = secure_words(&aligned, &pending.layout)?;
        let mut mask = vec![0u64; words];
        for (j, key) in request.public_keys.iter().enumerate() {
            if j == me_at {
                continue;
            }
            let seed =
                pairwise_seed(&pending.secret, &pending.public, key, &session.id).map_err(|e| {
                    FedError::InvalidArgument(format!("client '{}': {e}", session.clients[j]))
                })?;
            let mut prg = ChaCha20Rng::from_seed(seed);
            if me_at < j {
                mask.iter_mut()
                    .for_each(|m| *m = m.wrapping_add(prg.next_u64()));
            } else {
                mask.iter_mut()
                    .for_each(|m| *m = m.wrapping_sub(prg.next_u64()));
            }
        }
        let masked = add_mask(&aligned, &pending.layout, &mask)?;
        encoder.accept(&[masked])
    }
}

/// Whom a site masks with: the relayed participants of a secure session,
/// checked against the site's listed peers before it masks.
///
/// Every relayed key but the site's own (at `me_at`) must be signed, for
/// this session, by a listed peer; no peer may count twice, nor may the
/// site itself; and the site with its peers must make `min_participants`.
/// With no peers listed, only the number of distinct keys is checked — a
/// coordinator that invents participants passes that (the README's threat
/// model says so). Returns the rule broken, for the refusal.
pub(crate) fn check_participants(
    request: &MaskRequest,
    me_at: usize,
    own_identity: Option<[u8; 32]>,
    peers: &[[u8; 32]],
    min_participants: usize,
) -> std::result::Result<(), String> {
    let too_few = || {
        format!(
            "a secure sum needs at least {min_participants} participants (its min_secure_clients policy)"
        )
    };
    if peers.is_empty() {
        return if request.public_keys.len() < min_participants {
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
    for (j, key) in request.public_keys.iter().enumerate() {
        if j == me_at {
            continue;
        }
        let signed = request
            .signed
            .get(j)
            .copied()
            .flatten()
            .ok_or_else(unsigned)?;
        let listed = peers.contains(&signed.identity) && Some(signed.identity) != own_identity;
        if !listed || !signed.verifies(&request.session.id, key) {
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

/// The ChaCha20 seed shared by this client and the owner of `peer`:
/// HKDF-SHA256 of the X25519 shared secret, salted with the session id and
/// bound to both public keys (in a fixed order).
fn pairwise_seed(
    secret: &StaticSecret,
    public: &PublicKey,
    peer: &[u8; 32],
    session: &[u8; 16],
) -> std::result::Result<[u8; 32], String> {
    let mine = public.to_bytes();
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
    let mut info = KDF_INFO.to_vec();
    info.extend_from_slice(&low);
    info.extend_from_slice(&high);
    let hkdf = hkdf::Hkdf::<sha2::Sha256>::new(Some(session), shared.as_bytes());
    let mut seed = [0u8; 32];
    hkdf.expand(&info, &mut seed)
        .map_err(|e| format!("key derivation failed: {e}"))?;
    Ok(seed)
}

/// The number of 64-bit words in the secure columns of a state batch.
fn secure_words(batch: &RecordBatch, layout: &SecureLayout) -> Result<usize> {
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
fn add_mask(batch: &RecordBatch, layout: &SecureLayout, mask: &[u64]) -> Result<RecordBatch> {
    let mut columns = batch.columns().to_vec();
    let mut at = 0;
    for &i in &layout.secure_columns {
        let column = &columns[i];
        let values = secure_values(column)?;
        let n = values.len();
        let words = UInt64Array::from(mask[at..at + n].to_vec());
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

/// The state aligned to `groups`: one row per group in that order, the
/// empty state where this client has no rows of the group.
fn align(state: &RecordBatch, layout: &SecureLayout, groups: &RecordBatch) -> Result<RecordBatch> {
    if layout.key_columns == 0 {
        if state.num_rows() != 1 {
            return Err(FedError::Internal(format!(
                "{} state rows without GROUP BY",
                state.num_rows()
            )));
        }
        return Ok(state.clone());
    }
    let own_keys = state.project(&(0..layout.key_columns).collect::<Vec<_>>())?;
    if groups.num_columns() != layout.key_columns {
        return Err(FedError::InvalidArgument(format!(
            "the coordinator sent {} group key columns where the state has {}",
            groups.num_columns(),
            layout.key_columns
        )));
    }
    let converter = key_converter(&own_keys)?;
    let own_rows = converter.convert_columns(own_keys.columns())?;
    let group_rows = converter.convert_columns(groups.columns())?;
    let own: HashMap<&[u8], usize> = own_rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.data(), i))
        .collect();
    // (0, i): this client's row i; (1, 0): the empty state.
    let mut picks = Vec::with_capacity(groups.num_rows());
    let mut found = 0;
    for row in group_rows.iter() {
        match own.get(row.data()) {
            Some(&i) => {
                picks.push((0, i));
                found += 1;
            }
            None => picks.push((1, 0)),
        }
    }
    if found != own.len() {
        return Err(FedError::InvalidArgument(format!(
            "the coordinator's group list lacks {} of this client's groups; its state would be lost",
            own.len() - found
        )));
    }
    let mut columns: Vec<ArrayRef> = groups.columns().to_vec();
    for (i, zero) in layout.zero_state.iter().enumerate() {
        let mine = state.column(layout.key_columns + i);
        columns.push(interleave(&[mine.as_ref(), zero.as_ref()], &picks)?);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(groups.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        state.schema(),
        columns,
        &options,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::secure::union_groups;
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::{Field, Schema};

    fn keys(values: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("g", DataType::Utf8, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(values.to_vec()))]).unwrap()
    }

    #[test]
    fn the_group_union_is_canonical_and_alignment_fills_the_identity() {
        let a = keys(&["y", "x"]);
        let b = keys(&["z", "x"]);
        let union = union_groups(&[a.clone(), b.clone()]).unwrap();
        // The same list whatever the clients' order.
        let again = union_groups(&[b, a.clone()]).unwrap();
        assert_eq!(union, again);
        assert_eq!(union.num_rows(), 3);

        // Client a's state: g, sum, count; it has no row of group z.
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, true),
            Field::new("s", DataType::UInt64, true),
            Field::new("n", DataType::UInt64, true),
        ]));
        let state = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::clone(a.column(0)),
                Arc::new(UInt64Array::from(vec![10, 20])),
                Arc::new(UInt64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let layout = SecureLayout {
            key_columns: 1,
            secure_columns: vec![1, 2],
            zero_state: vec![
                Arc::new(UInt64Array::from(vec![0])),
                Arc::new(UInt64Array::from(vec![0])),
            ],
            schema,
        };
        let aligned = align(&state, &layout, &union).unwrap();
        let groups = aligned.column(0).as_string::<i32>();
        let sums = aligned.column(1).as_primitive::<UInt64Type>();
        for row in 0..3 {
            let want = match groups.value(row) {
                "x" => 20,
                "y" => 10,
                _ => 0,
            };
            assert_eq!(sums.value(row), want, "group {}", groups.value(row));
        }
        // A group list that lacks one of the client's groups is refused.
        let err = align(&state, &layout, &keys(&["x"])).unwrap_err();
        assert!(
            err.to_string().contains("lacks 1 of this client's groups"),
            "{err}"
        );
    }

    #[test]
    fn only_keys_signed_by_distinct_listed_peers_are_masked_with() {
        let session = SecureSession::fresh(vec!["me".into(), "b".into(), "c".into()]);
        let ids: Vec<SiteIdentity> = (0..4)
            .map(|_| SiteIdentity::generate().unwrap().0)
            .collect();
        let keys = [[1u8; 32], [2u8; 32], [3u8; 32]];
        let peers = [ids[1].public_key(), ids[2].public_key()];
        let request = |signed: Vec<Option<crate::protocol::secure::SignedKey>>| MaskRequest {
            session: session.clone(),
            public_keys: keys.to_vec(),
            signed,
            groups: RecordBatch::new_empty(Arc::new(Schema::empty())),
        };
        let own = Some(ids[0].public_key());
        let sign = |i: usize, k: usize| Some(ids[i].sign(&session.id, &keys[k]));
        let good = request(vec![sign(0, 0), sign(1, 1), sign(2, 2)]);
        assert_eq!(check_participants(&good, 0, own, &peers, 3), Ok(()));
        assert!(check_participants(&good, 0, own, &peers, 4).is_err());
        // An invented participant: unsigned, or signed by an unlisted key.
        for signed in [
            vec![sign(0, 0), sign(1, 1), None],
            vec![sign(0, 0), sign(1, 1), sign(3, 2)],
            // A listed peer's signature of another key or session.
            vec![sign(0, 0), sign(1, 1), sign(2, 1)],
            // One peer counted twice; the site itself as a peer.
            vec![sign(0, 0), sign(1, 1), sign(1, 2)],
            vec![sign(0, 0), sign(1, 1), sign(0, 2)],
        ] {
            let err = check_participants(
                &request(signed),
                0,
                own,
                &[peers[0], peers[1], ids[0].public_key()],
                3,
            );
            assert!(err.is_err());
        }
        // Without peers, only the count of keys.
        assert_eq!(check_participants(&request(vec![]), 0, own, &[], 3), Ok(()));
        assert!(check_participants(&request(vec![]), 0, own, &[], 4).is_err());
    }

    #[test]
    fn pairwise_seeds_agree_and_differ_per_session() {
        let a = StaticSecret::from([1u8; 32]);
        let b = StaticSecret::from([2u8; 32]);
        let (pa, pb) = (PublicKey::from(&a), PublicKey::from(&b));
        let s1 = [7u8; 16];
        let ab = pairwise_seed(&a, &pa, &pb.to_bytes(), &s1).unwrap();
        let ba = pairwise_seed(&b, &pb, &pa.to_bytes(), &s1).unwrap();
        assert_eq!(ab, ba);
        let other = pairwise_seed(&a, &pa, &pb.to_bytes(), &[8u8; 16]).unwrap();
        assert_ne!(ab, other);
        // A low-order peer key is refused.
        assert!(pairwise_seed(&a, &pa, &[0u8; 32], &s1).is_err());
    }
}
