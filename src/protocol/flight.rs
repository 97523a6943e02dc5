//! The wire protocol between a coordinator and a `fedsql worker`, on top of
//! Arrow Flight.
//!
//! | call | request | answer |
//! |---|---|---|
//! | `GetSchema` | descriptor path `[table]` | the served table's Arrow schema, with [`HAS_ROWS_KEY`] / [`POSITIONAL_KEY`] metadata |
//! | `DoGet` | ticket: a [`TicketCommand`] | the state batch (Arrow IPC), one row per group |
//! | `DoAction` [`ACTION_EXPLAIN`] | body: an [`EncodeRequest`] | the worker's physical plan, as text |
//! | `DoAction` [`ACTION_RELEASE_FIT`] | body: a [`ReleaseFit`] | nothing |
//! | `DoAction` [`ACTION_SECURE_SETUP`] | body: a [`SecureSetupRequest`] | a [`SecureSetupReply`]: the worker's public keys for the session and its group keys |
//! | `DoAction` [`ACTION_SECURE_REVEAL`] | body: a [`SecureShareRequest`] without nonces | a [`SecureRevealReply`]: its graph nonce (sparse rounds) |
//! | `DoAction` [`ACTION_SECURE_SHARE`] | body: a [`SecureShareRequest`] | a [`SecureShareReply`]: its sealed share envelopes |
//! | `DoAction` [`ACTION_ENCODE_MASKED`] | body: an [`EncodeMaskedRequest`] | the masked state batch (Arrow IPC stream) |
//! | `DoAction` [`ACTION_SECURE_CONFIRM`] | body: a [`SecureConfirmRequest`] | a [`SecureConfirmReply`]: its signature of the survivor list |
//! | `DoAction` [`ACTION_SECURE_UNMASK`] | body: a [`SecureUnmaskRequest`] | a [`SecureUnmaskReply`]: the shares it reveals |
//! | `ListActions` | | the action types above |
//!
//! Every call carries `authorization: Bearer <token>` in its gRPC metadata.
//! The ticket is a protobuf message with a `oneof`, and actions are named,
//! so later calls are new variants and new action names without changing
//! the existing ones (the two steps of secure aggregation came that way).

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{FedError, Result};
use crate::protocol::secure::consistency::ListSignature;
use crate::protocol::secure::shamir::Share;
use crate::protocol::secure::{
    ParticipantKeys, Revealed, RevealedKind, SecureSession, ShareEnvelope, SignedKey,
};

/// How a worker's policy refusal begins (a `PermissionDenied` status):
/// the rule and its hint follow, so that the coordinator names the client.
pub const POLICY_REFUSAL: &str = "policy: ";

/// DoAction: secure aggregation, step 1 (see [`crate::protocol::secure`]).
pub const ACTION_SECURE_SETUP: &str = "fedsql.secure_setup";

/// DoAction: secure aggregation, between steps 1 and 2 of a sparse round:
/// the graph nonce.
pub const ACTION_SECURE_REVEAL: &str = "fedsql.secure_reveal";

/// DoAction: secure aggregation, step 2: the sealed shares.
pub const ACTION_SECURE_SHARE: &str = "fedsql.secure_share";

/// DoAction: secure aggregation, step 3: the masked state.
pub const ACTION_ENCODE_MASKED: &str = "fedsql.encode_masked";

/// DoAction: secure aggregation, step 4: the survivor list, signed.
pub const ACTION_SECURE_CONFIRM: &str = "fedsql.secure_confirm";

/// DoAction: secure aggregation, step 5: the shares that unmask the sum.
pub const ACTION_SECURE_UNMASK: &str = "fedsql.secure_unmask";

/// gRPC metadata key of the worker's token.
pub const AUTHORIZATION: &str = "authorization";

/// The token's prefix in [`AUTHORIZATION`].
pub const BEARER: &str = "Bearer ";

/// DoAction: the physical plan the worker would run for an encoder.
pub const ACTION_EXPLAIN: &str = "fedsql.explain";

/// DoAction: the coordinator's fit has ended; drop what was kept for it.
pub const ACTION_RELEASE_FIT: &str = "fedsql.release_fit";

/// DoAction: the calling analyst's DP budget for a table (body: the
/// table's name; reply: `<budget or unlimited> <spent>` as text).
pub const ACTION_PRIVACY_BUDGET: &str = "fedsql.privacy_budget";

/// Schema metadata: `"true"` when the served table has data rows (so its
/// column types are evidence when schemas are unified), `"false"` otherwise.
pub const HAS_ROWS_KEY: &str = "fedsql.has_rows";

/// Schema metadata key: the worker's disclosure policy, as `\clients`
/// shows it (`none` when it has none).
pub const POLICY_KEY: &str = "fedsql.policy";

/// Schema metadata: the size of the federation the worker's listed peers
/// make, its own identity included (`"0"`: no peers). A worker with peers
/// accepts only a threshold above two thirds of a round's sites and above
/// (n + c)/2 for the colluders such a federation may hold; the
/// coordinator's default follows.
pub const FEDERATION_KEY: &str = "fedsql.secure_federation";

/// Schema metadata: `"true"` when the served table is CSV (columns are read
/// by position, so their order must agree with the other clients).
pub const POSITIONAL_KEY: &str = "fedsql.positional";

/// Largest message (plan, shared tables, state) either side accepts.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Runs one encoder: the plan (datafusion-proto bytes, federated scans named
/// by table) and the fit it belongs to, if any.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EncodeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
    /// The coordinator's fit scope: rounds of one fit may reuse the rows the
    /// worker decoded in the first round.
    #[prost(uint64, optional, tag = "2")]
    pub fit_scope: Option<u64>,
}

/// The body of [`ACTION_RELEASE_FIT`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReleaseFit {
    #[prost(uint64, tag = "1")]
    pub scope: u64,
}

/// A secure-aggregation session: its random id and the round's clients in
/// order (see [`crate::protocol::secure::SecureSession`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionMessage {
    #[prost(bytes = "vec", tag = "1")]
    pub id: Vec<u8>,
    #[prost(string, repeated, tag = "2")]
    pub clients: Vec<String>,
    #[prost(uint32, tag = "3")]
    pub threshold: u32,
    /// Into how many shares each site cuts a `secure_dp_…` call's noise;
    /// 0 (a coordinator that does not send it) is refused by every site.
    #[prost(uint32, tag = "4")]
    pub noise_shares: u32,
}

impl SessionMessage {
    pub fn of(session: &SecureSession) -> Self {
        Self {
            id: session.id.to_vec(),
            clients: session.clients.clone(),
            threshold: session.threshold as u32,
            noise_shares: session.noise_shares as u32,
        }
    }

    pub fn session(&self) -> Result<SecureSession> {
        let id = self.id.as_slice().try_into().map_err(|_| {
            FedError::InvalidArgument(format!(
                "a secure session id is 16 bytes, not {}",
                self.id.len()
            ))
        })?;
        Ok(SecureSession {
            id,
            clients: self.clients.clone(),
            threshold: self.threshold as usize,
            noise_shares: self.noise_shares as usize,
        })
    }
}

/// The body of [`ACTION_SECURE_SETUP`]: the encoder and the session.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureSetupRequest {
    #[prost(message, optional, tag = "1")]
    pub encode: Option<EncodeRequest>,
    #[prost(message, optional, tag = "2")]
    pub session: Option<SessionMessage>,
}

/// A site's keys for a session (see [`ParticipantKeys`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeysMessage {
    #[prost(bytes = "vec", tag = "1")]
    pub mask_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub cipher_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub self_commitment: Vec<u8>,
    /// Its long-term Ed25519 identity key (empty: it has none).
    #[prost(bytes = "vec", tag = "4")]
    pub identity: Vec<u8>,
    /// Its signature of the session id and the keys' digest.
    #[prost(bytes = "vec", tag = "5")]
    pub signature: Vec<u8>,
    /// The Ed25519 key of its survivor-list signature.
    #[prost(bytes = "vec", tag = "6")]
    pub list_key: Vec<u8>,
    /// Its commitment to its graph nonce.
    #[prost(bytes = "vec", tag = "7")]
    pub graph_commitment: Vec<u8>,
}

impl KeysMessage {
    pub fn of(keys: &ParticipantKeys) -> Self {
        Self {
            mask_key: keys.mask_key.to_vec(),
            cipher_key: keys.cipher_key.to_vec(),
            self_commitment: keys.self_commitment.to_vec(),
            list_key: keys.list_key.to_vec(),
            graph_commitment: keys.graph_commitment.to_vec(),
            identity: keys.signed.map(|s| s.identity.to_vec()).unwrap_or_default(),
            signature: keys
                .signed
                .map(|s| s.signature.to_vec())
                .unwrap_or_default(),
        }
    }

    pub fn keys(&self) -> Result<ParticipantKeys> {
        Ok(ParticipantKeys {
            mask_key: public_key(&self.mask_key)?,
            cipher_key: public_key(&self.cipher_key)?,
            self_commitment: public_key(&self.self_commitment)?,
            list_key: public_key(&self.list_key)?,
            graph_commitment: public_key(&self.graph_commitment)?,
            signed: SignedKey::from_wire(&self.identity, &self.signature)?,
        })
    }
}

/// The answer to [`ACTION_SECURE_SETUP`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureSetupReply {
    #[prost(message, optional, tag = "1")]
    pub keys: Option<KeysMessage>,
    /// Its group keys, as an Arrow IPC stream.
    #[prost(bytes = "vec", tag = "2")]
    pub group_keys: Vec<u8>,
}

/// One site's keys in a [`SecureShareRequest`]; `present` is false for a
/// site that did not answer the setup.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MaybeKeys {
    #[prost(message, optional, tag = "1")]
    pub keys: Option<KeysMessage>,
}

/// The body of [`ACTION_SECURE_SHARE`]: the encoder, the session and every
/// site's keys in session order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureShareRequest {
    #[prost(message, optional, tag = "1")]
    pub encode: Option<EncodeRequest>,
    #[prost(message, optional, tag = "2")]
    pub session: Option<SessionMessage>,
    #[prost(message, repeated, tag = "3")]
    pub keys: Vec<MaybeKeys>,
    /// In a sparse round's step 2, every site's graph nonce in session
    /// order (empty bytes for a site without keys); none otherwise.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub nonces: Vec<Vec<u8>>,
}

impl SecureShareRequest {
    /// The request's sites' keys.
    pub fn keys(&self) -> Result<Vec<Option<ParticipantKeys>>> {
        self.keys
            .iter()
            .map(|k| k.keys.as_ref().map(KeysMessage::keys).transpose())
            .collect()
    }

    /// The request's graph nonces.
    pub fn nonces(&self) -> Result<Vec<Option<[u8; 32]>>> {
        self.nonces
            .iter()
            .map(|n| (!n.is_empty()).then(|| nonce(n)).transpose())
            .collect()
    }

    /// The nonces' wire form.
    pub fn nonces_of(nonces: &[Option<[u8; 32]>]) -> Vec<Vec<u8>> {
        nonces
            .iter()
            .map(|n| n.map(|n| n.to_vec()).unwrap_or_default())
            .collect()
    }
}

/// A 32-byte graph nonce from the wire.
fn nonce(bytes: &[u8]) -> Result<[u8; 32]> {
    bytes.try_into().map_err(|_| {
        FedError::InvalidArgument(format!("a graph nonce is 32 bytes, not {}", bytes.len()))
    })
}

/// The answer to [`ACTION_SECURE_REVEAL`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureRevealReply {
    #[prost(bytes = "vec", tag = "1")]
    pub nonce: Vec<u8>,
}

impl SecureRevealReply {
    /// The revealed nonce.
    pub fn nonce(&self) -> Result<[u8; 32]> {
        nonce(&self.nonce)
    }
}

/// A sealed share envelope (see [`ShareEnvelope`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EnvelopeMessage {
    #[prost(uint32, tag = "1")]
    pub from: u32,
    #[prost(uint32, tag = "2")]
    pub to: u32,
    #[prost(bytes = "vec", tag = "3")]
    pub ciphertext: Vec<u8>,
}

impl EnvelopeMessage {
    pub fn of(envelope: &ShareEnvelope) -> Self {
        Self {
            from: envelope.from,
            to: envelope.to,
            ciphertext: envelope.ciphertext.clone(),
        }
    }

    pub fn envelope(&self) -> ShareEnvelope {
        ShareEnvelope {
            from: self.from,
            to: self.to,
            ciphertext: self.ciphertext.clone(),
        }
    }
}

/// The answer to [`ACTION_SECURE_SHARE`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureShareReply {
    #[prost(message, repeated, tag = "1")]
    pub envelopes: Vec<EnvelopeMessage>,
}

/// The body of [`ACTION_ENCODE_MASKED`]: the encoder again, the session,
/// the union of the group keys (an Arrow IPC stream) and the envelopes
/// addressed to this site.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EncodeMaskedRequest {
    #[prost(message, optional, tag = "1")]
    pub encode: Option<EncodeRequest>,
    #[prost(message, optional, tag = "2")]
    pub session: Option<SessionMessage>,
    #[prost(bytes = "vec", tag = "4")]
    pub groups: Vec<u8>,
    #[prost(message, repeated, tag = "7")]
    pub envelopes: Vec<EnvelopeMessage>,
}

/// The body of [`ACTION_SECURE_CONFIRM`]: the encoder, the session and the
/// survivors' places.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureConfirmRequest {
    #[prost(message, optional, tag = "1")]
    pub encode: Option<EncodeRequest>,
    #[prost(message, optional, tag = "2")]
    pub session: Option<SessionMessage>,
    #[prost(uint32, repeated, tag = "3")]
    pub survivors: Vec<u32>,
}

/// A survivor's signature of the survivor list (see [`ListSignature`]);
/// the answer to [`ACTION_SECURE_CONFIRM`], and one of the signatures of
/// a [`SecureUnmaskRequest`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureConfirmReply {
    #[prost(uint32, tag = "1")]
    pub from: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub signature: Vec<u8>,
}

impl SecureConfirmReply {
    pub fn of(signed: &ListSignature) -> Self {
        Self {
            from: signed.from,
            signature: signed.signature.to_vec(),
        }
    }

    pub fn signature(&self) -> Result<ListSignature> {
        Ok(ListSignature {
            from: self.from,
            signature: self.signature.as_slice().try_into().map_err(|_| {
                FedError::InvalidArgument(format!(
                    "a survivor-list signature is 64 bytes, not {}",
                    self.signature.len()
                ))
            })?,
        })
    }
}

/// The body of [`ACTION_SECURE_UNMASK`]: the encoder, the session, the
/// survivors' places and the survivors' signatures of that list.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureUnmaskRequest {
    #[prost(message, optional, tag = "1")]
    pub encode: Option<EncodeRequest>,
    #[prost(message, optional, tag = "2")]
    pub session: Option<SessionMessage>,
    #[prost(uint32, repeated, tag = "3")]
    pub survivors: Vec<u32>,
    #[prost(message, repeated, tag = "4")]
    pub signatures: Vec<SecureConfirmReply>,
}

/// One revealed share (see [`Revealed`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RevealedMessage {
    #[prost(uint32, tag = "1")]
    pub of: u32,
    /// True: a share of the self-mask seed; false: of the mask key.
    #[prost(bool, tag = "2")]
    pub self_seed: bool,
    #[prost(bytes = "vec", tag = "3")]
    pub share: Vec<u8>,
}

impl RevealedMessage {
    pub fn of(revealed: &Revealed) -> Self {
        Self {
            of: revealed.of,
            self_seed: revealed.kind == RevealedKind::SelfSeed,
            share: revealed.share.to_bytes().to_vec(),
        }
    }

    pub fn revealed(&self) -> Result<Revealed> {
        Ok(Revealed {
            of: self.of,
            kind: if self.self_seed {
                RevealedKind::SelfSeed
            } else {
                RevealedKind::MaskKey
            },
            share: Share::from_bytes(&self.share).ok_or_else(|| {
                FedError::InvalidArgument("a revealed share that is not one".into())
            })?,
        })
    }
}

/// The answer to [`ACTION_SECURE_UNMASK`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecureUnmaskReply {
    #[prost(message, repeated, tag = "1")]
    pub shares: Vec<RevealedMessage>,
}

/// A public key (or another 32-byte value) from the wire.
pub fn public_key(bytes: &[u8]) -> Result<[u8; 32]> {
    bytes.try_into().map_err(|_| {
        FedError::InvalidArgument(format!(
            "a public key or commitment is 32 bytes, not {}",
            bytes.len()
        ))
    })
}

/// Batches as an Arrow IPC stream (the wire form of inline tables, group
/// keys and masked states).
pub fn batches_to_ipc(schema: &Schema, batches: &[RecordBatch]) -> Result<Vec<u8>, ArrowError> {
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(&mut bytes, schema)?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    drop(writer);
    Ok(bytes)
}

/// The schema and batches of an Arrow IPC stream.
///
/// The bytes come from the other side of the boundary (a plan's inline
/// rows, group keys, masked states), and arrow-ipc 59 asserts rather than
/// errs on some malformed buffers (a boolean column whose buffer is
/// shorter than its length, found by fuzzing): such a panic is caught
/// here and becomes an error, so that malformed bytes are refused like
/// any other.
pub fn batches_from_ipc(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>), ArrowError> {
    // A message's body length is read from the message and allocated
    // before it is read: a hostile length (petabytes) would abort the
    // process on allocation failure, which no panic handler catches. Each
    // message must fit in the bytes that arrived.
    check_ipc_framing(bytes)?;
    let read = || {
        let reader = StreamReader::try_new(bytes, None)?;
        let schema = reader.schema();
        let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
        Ok((schema, batches))
    };
    std::panic::catch_unwind(read).unwrap_or_else(|_| {
        Err(ArrowError::IpcError(
            "malformed Arrow IPC message: its buffers do not match its lengths".into(),
        ))
    })
}

/// Checks an Arrow IPC stream's framing before it is decoded: every
/// message's metadata and body lie within `bytes` (found by fuzzing: a
/// body length of 2^56 in a plan's inline rows made the reader allocate
/// it, and the allocation failure aborted the worker).
fn check_ipc_framing(bytes: &[u8]) -> Result<(), ArrowError> {
    let bad = |what: &str| {
        ArrowError::IpcError(format!(
            "malformed Arrow IPC stream of {} bytes: {what}",
            bytes.len()
        ))
    };
    let mut at = 0usize;
    while at < bytes.len() {
        let mut length_at = at;
        if bytes[at..].starts_with(&[0xff; 4]) {
            length_at += 4;
        }
        let length = bytes
            .get(length_at..length_at + 4)
            .ok_or_else(|| bad("a message length is cut short"))?;
        let length = i32::from_le_bytes(length.try_into().expect("4 bytes"));
        if length == 0 {
            return Ok(()); // the end-of-stream marker
        }
        let start = length_at + 4;
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| bad("a message's metadata length passes its end"))?;
        let message = datafusion::arrow::ipc::root_as_message(&bytes[start..end])
            .map_err(|e| bad(&format!("a message's metadata does not parse: {e}")))?;
        at = usize::try_from(message.bodyLength())
            .ok()
            .and_then(|body| end.checked_add(body))
            .filter(|&next| next <= bytes.len())
            .ok_or_else(|| bad("a message's body length passes its end"))?;
    }
    Ok(())
}

/// One batch as an Arrow IPC stream.
pub fn batch_to_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    Ok(batches_to_ipc(
        &batch.schema(),
        std::slice::from_ref(batch),
    )?)
}

/// The one batch of an Arrow IPC stream.
pub fn batch_from_ipc(bytes: &[u8]) -> Result<RecordBatch> {
    let (schema, batches) = batches_from_ipc(bytes)?;
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// What a `DoGet` ticket asks for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TicketCommand {
    #[prost(oneof = "ticket_command::Command", tags = "1")]
    pub command: Option<ticket_command::Command>,
}

/// The commands a ticket can carry.
pub mod ticket_command {
    /// One command.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Command {
        /// Run an encoder and return its state batch.
        #[prost(message, tag = "1")]
        Encode(super::EncodeRequest),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn ticket_round_trips_and_garbage_is_an_error() {
        let ticket = TicketCommand {
            command: Some(ticket_command::Command::Encode(EncodeRequest {
                plan: vec![1, 2, 3],
                fit_scope: Some(7),
            })),
        };
        let bytes = ticket.encode_to_vec();
        assert_eq!(TicketCommand::decode(bytes.as_slice()).unwrap(), ticket);
        assert!(TicketCommand::decode(&[0xff, 0xff, 0xff][..]).is_err());
    }

    #[test]
    fn secure_messages_round_trip() {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use std::sync::Arc;
        let session = SecureSession::fresh(vec!["a".into(), "b".into()]).with_noise_shares(2);
        let message = SessionMessage::of(&session);
        assert_eq!(message.session().unwrap(), session);
        let short = SessionMessage {
            id: vec![1, 2],
            clients: vec![],
            threshold: 1,
            noise_shares: 1,
        };
        assert!(short.session().is_err());
        assert!(public_key(&[0; 31]).is_err());
        assert_eq!(public_key(&[7; 32]).unwrap(), [7; 32]);
        let batch = RecordBatch::try_from_iter(vec![
            ("g", Arc::new(StringArray::from(vec!["x", "y"])) as _),
            ("n", Arc::new(Int64Array::from(vec![1, 2])) as _),
        ])
        .unwrap();
        assert_eq!(
            batch_from_ipc(&batch_to_ipc(&batch).unwrap()).unwrap(),
            batch
        );
        // No GROUP BY: group keys without columns, one row.
        let keys = batch.project(&[]).unwrap();
        assert_eq!(
            batch_from_ipc(&batch_to_ipc(&keys).unwrap())
                .unwrap()
                .num_rows(),
            keys.num_rows()
        );
        // Keys with their graph commitment, and a sparse round's nonces
        // (none for a site without keys).
        let participant = ParticipantKeys {
            mask_key: [1; 32],
            cipher_key: [2; 32],
            self_commitment: [3; 32],
            list_key: [4; 32],
            graph_commitment: [5; 32],
            signed: None,
        };
        assert_eq!(KeysMessage::of(&participant).keys().unwrap(), participant);
        let nonces = vec![Some([9; 32]), None, Some([8; 32])];
        let request = SecureShareRequest {
            encode: None,
            session: Some(message),
            keys: Vec::new(),
            nonces: SecureShareRequest::nonces_of(&nonces),
        };
        assert_eq!(request.nonces().unwrap(), nonces);
        let short = SecureShareRequest {
            nonces: vec![vec![1; 31]],
            ..request
        };
        assert!(
            short
                .nonces()
                .unwrap_err()
                .to_string()
                .contains("32 bytes, not 31")
        );
        let reply = SecureRevealReply { nonce: vec![6; 32] };
        assert_eq!(reply.nonce().unwrap(), [6; 32]);
        let no_commitment = KeysMessage {
            graph_commitment: Vec::new(),
            ..KeysMessage::of(&participant)
        };
        assert!(no_commitment.keys().is_err());
    }
}
