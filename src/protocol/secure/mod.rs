//! Secure aggregation: the coordinator learns only the sum of the states
//! of `secure_sum`, `secure_avg`, `secure_count` and `secure_sum_vec` over
//! the sites that took part, and the round survives sites that drop out.
//!
//! Those aggregates keep their state as `UInt64` words summed mod 2^64 (see
//! [`fedsql_udfs::secure_quantized`]). A round with one of them runs the
//! double-masking protocol of Bonawitz et al. (CCS 2017), with the
//! consistency round of its actively secure variant, as five (six in a sparse round)
//! request/response exchanges, each site answering the coordinator, so a
//! network worker serves it as a local site does:
//!
//! 1. **Setup** (`Site::secure_setup`): the coordinator sends a fresh
//!    [`SecureSession`] (a random id, the round's clients in order, and the
//!    threshold t). Each site runs the encoder, keeps its state, draws two
//!    X25519 key pairs (a *mask key* for pairwise masks, a *cipher key* for
//!    the envelopes of its shares), an Ed25519 *list key* for step 4, a
//!    32-byte self-mask seed and a 32-byte graph nonce, and answers with
//!    the public keys, the seed's and the nonce's commitments and its
//!    group keys ([`SecureSetup`]), signed by its identity if it has one.
//!
//!    In a sparse round only ([`graph::is_sparse`]: over more than
//!    [`graph::FULL_GRAPH_MAX`] sites, at t ≤ 2n/3 — without peers), the
//!    coordinator then relays every answering site's keys
//!    (`Site::secure_reveal`, a [`ShareRequest`] without nonces), and each
//!    site, its own keys among them unchanged, reveals its graph nonce:
//!    the coin toss that draws the graph ([`graph`]).
//! 2. **Shares** (`Site::secure_share`): the coordinator relays every
//!    answering site's keys ([`ShareRequest`]; in a sparse round the same
//!    keys as for the reveal, with every participant's nonce, each checked
//!    against its commitment). Each site checks them (its
//!    peers, its floor, t > n/2, or t > 2n/3 with peers listed), splits its mask secret key and its self
//!    seed t-of-n with Shamir ([`shamir`]) and seals the pair of shares of
//!    every other site for it alone ([`masks::seal`]); the coordinator only
//!    relays these envelopes.
//! 3. **Masked state** (`Site::encode_masked`): the coordinator relays to
//!    each site the envelopes addressed to it, from the sites that sent
//!    theirs, and the union of group keys ([`MaskRequest`]). The site opens
//!    them, aligns its state to the groups, and adds mod 2^64 its self mask
//!    and, with every site whose envelope it opened, the pairwise mask
//!    (added by the lower place, subtracted by the higher).
//! 4. **Consistency** (`Site::secure_confirm`): the coordinator names the
//!    sites whose masked state it received ([`consistency::ConfirmRequest`]).
//!    Each of them checks the list (itself on it, at least t sites, every
//!    one a site that sent keys, every neighbour on it one it masked with)
//!    and signs it, once per session.
//! 5. **Unmasking** (`Site::secure_unmask`): the coordinator sends the list
//!    again with the signatures it collected ([`UnmaskRequest`]). A survivor
//!    answers only for the list it signed, and only when at least t
//!    distinct sites on it signed it (so every honest survivor answers for
//!    the same list); it reveals for every site it masked with either its
//!    share of that site's self seed (listed) or of its mask key (not
//!    listed) — never both. The coordinator rebuilds the self seeds of the
//!    survivors and the mask keys of the sites that dropped after masking,
//!    checks them against their public keys and commitments, and removes
//!    those masks from the sum.
//!
//! Above [`graph::FULL_GRAPH_MAX`] sites, each site masks with and shares
//! with only its O(log n) neighbours in a graph drawn from the sites' coin
//! toss (SecAgg+, Bell et al. 2020; see [`graph`]) — unless t is more
//! than two thirds of the sites (sites with peers): such a round is full
//! at any size, as only counting protects a site against a coordinator
//! with colluders.
//!
//! A site that fails before its masked state is left out; one that fails
//! after it is recovered. Fewer than t sites at any step fail the round.
//! What the coordinator learns: the sum over the sites that took part,
//! which sites did, their group keys, and the plain columns of other
//! aggregates. A site refuses the plain `encode` of such an encoder.
//!
//! This module holds what both sides agree on: the session, the messages,
//! the masks and envelopes ([`masks`]), Shamir sharing ([`shamir`]), the
//! layout of a state's secure columns and the canonical group order. A
//! site's keys and steps are in `site::release::secure`; the coordinator's
//! relay and unmasking in `coordinator::secure`.

pub mod consistency;
pub mod graph;
pub mod masks;
pub mod shamir;
pub mod threshold;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, new_empty_array};
use datafusion::arrow::compute::{cast, interleave};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;

use sha2::{Digest, Sha256};

use self::shamir::Share;
use crate::error::{FedError, Result};

/// One round of secure aggregation: a fresh random id and the round's
/// clients in the order that decides who adds and who subtracts a mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecureSession {
    pub id: [u8; 16],
    pub clients: Vec<String>,
    /// How many sites must take part (and hold shares) for the round to
    /// be unmasked.
    pub threshold: usize,
    /// Into how many shares every site cuts a `secure_dp_…` call's noise
    /// (d: each adds NB(1/d) draws). The coordinator sets it to the least
    /// of its sites' [`threshold::SiteFloor::noise_shares`], and every
    /// site refuses a session that cuts finer than its own: any d honest
    /// survivors then carry a full draw, whichever sites they are (the
    /// thirteenth outside review: with each site's own count, a site
    /// without peers cut 1/t where a peered victim assumed 1/(t − c)).
    /// One for a session made by [`Self::fresh`]: a full draw at each site.
    pub noise_shares: usize,
}

/// The default threshold over `n` sites: a strict majority, ⌊n/2⌋ + 1, the
/// least for which no two disjoint sets of t sites exist (so a coordinator
/// cannot collect both kinds of shares of one site).
pub fn default_threshold(n: usize) -> usize {
    n / 2 + 1
}

/// The least threshold a site that checks its participants against listed
/// `peers` accepts over `n` sites: ⌊2n/3⌋ + 1, more than two thirds.
///
/// A strict majority is not enough once the coordinator is not trusted
/// (the ninth outside review): two survivor lists of t signers each share
/// at least 2t − n sites, so one colluding site that signs both at
/// t = ⌊n/2⌋ + 1 lets the coordinator show half the honest sites a list
/// on which a victim survived (they reveal its self-seed shares) and the
/// other half one on which it dropped (they reveal its mask-key shares).
/// With t > 2n/3 that split needs more than n/3 colluders, and t shares of
/// both kinds of one site's secrets need as many (Bonawitz et al. 2017,
/// the actively secure variant's bound t > (n + c)/2 with c < n/3).
pub fn peered_threshold(n: usize) -> usize {
    2 * n / 3 + 1
}

impl SecureSession {
    /// A new session over `clients`, with a random id, the default
    /// threshold and a full draw of DP noise at each site.
    pub fn fresh(clients: Vec<String>) -> Self {
        let threshold = default_threshold(clients.len());
        Self {
            id: rand::random(),
            clients,
            threshold,
            noise_shares: 1,
        }
    }

    /// The same session with threshold `t`.
    pub fn with_threshold(mut self, t: usize) -> Self {
        self.threshold = t;
        self
    }

    /// The same session with each site's DP noise cut into `d` shares.
    pub fn with_noise_shares(mut self, d: usize) -> Self {
        self.noise_shares = d;
        self
    }

    /// The session id as hex, for messages.
    pub fn id_hex(&self) -> String {
        self.id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

// The messages of the steps. Sites are named by their place in the
// session's client list (0-based); a Shamir share's point is that place
// plus one.

/// Domain separation of the digest a site's identity signs.
const KEYS_DIGEST_CONTEXT: &[u8] = b"fedsql secure aggregation v4: participant keys";

/// A site's public keys for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParticipantKeys {
    /// The X25519 key of its pairwise masks.
    pub mask_key: [u8; 32],
    /// The X25519 key its share envelopes are sealed to.
    pub cipher_key: [u8; 32],
    /// SHA-256 commitment to its self-mask seed (see [`super::masks::self_commitment`]).
    pub self_commitment: [u8; 32],
    /// The Ed25519 key that signs the survivor list it confirms (see
    /// [`consistency`]).
    pub list_key: [u8; 32],
    /// Its commitment to its nonce of the sparse graph's coin toss (see
    /// [`graph::nonce_commitment`]).
    pub graph_commitment: [u8; 32],
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
        hash.update(self.list_key);
        hash.update(self.graph_commitment);
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
/// for a site that did not answer the setup. In a sparse round, also every
/// participant's graph nonce (revealed in the step before, to a request
/// with the same keys and no nonces); none in a full round.
#[derive(Debug, Clone)]
pub struct ShareRequest {
    pub session: SecureSession,
    pub keys: Vec<Option<ParticipantKeys>>,
    pub nonces: Vec<Option<[u8; 32]>>,
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

/// A survivor's signature of the survivor list, by the site at `from`
/// (step 4; see `consistency`, which signs and checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListSignature {
    pub from: u32,
    pub signature: [u8; 64],
}

/// Step 5: the survivor list every survivor confirmed in step 4, with the
/// signatures of it the coordinator collected.
#[derive(Debug, Clone)]
pub struct UnmaskRequest {
    pub session: SecureSession,
    pub survivors: Vec<u32>,
    pub signatures: Vec<ListSignature>,
}

/// Which secret a revealed share is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevealedKind {
    /// The self-mask seed of a site that survived.
    SelfSeed,
    /// The mask secret key of a site that dropped out after sharing.
    MaskKey,
}

/// One share a survivor reveals in step 5: of the site at `of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revealed {
    pub of: u32,
    pub kind: RevealedKind,
    pub share: Share,
}

/// A session key signed with a site's long-term Ed25519 identity key: what
/// lets a site check that a relayed key is a listed peer's, not one the
/// coordinator made up (see `[policy] peers` in the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedKey {
    /// The signer's Ed25519 public key.
    pub identity: [u8; 32],
    pub signature: [u8; 64],
}

/// Domain separation of session-key signatures.
const SIGNATURE_CONTEXT: &[u8] = b"fedsql secure aggregation v2: session keys";

/// What a site signs: the session id and the digest of its keys for that
/// session ([`ParticipantKeys::digest`]), so that a signature is good for
/// one session and one set of keys only.
pub fn signed_message(session: &[u8; 16], public_key: &[u8; 32]) -> Vec<u8> {
    let mut message = SIGNATURE_CONTEXT.to_vec();
    message.extend_from_slice(session);
    message.extend_from_slice(public_key);
    message
}

impl SignedKey {
    /// Whether this is a valid signature of `public_key` for `session` by
    /// the identity it names.
    pub fn verifies(&self, session: &[u8; 16], public_key: &[u8; 32]) -> bool {
        use ring::signature::{ED25519, UnparsedPublicKey};
        UnparsedPublicKey::new(&ED25519, self.identity)
            .verify(&signed_message(session, public_key), &self.signature)
            .is_ok()
    }

    /// From its wire form (empty bytes: unsigned).
    pub fn from_wire(identity: &[u8], signature: &[u8]) -> Result<Option<Self>> {
        if identity.is_empty() && signature.is_empty() {
            return Ok(None);
        }
        let bad = || {
            FedError::InvalidArgument(format!(
                "a signed session key is a 32-byte identity and a 64-byte signature, not {} and {} bytes",
                identity.len(),
                signature.len()
            ))
        };
        Ok(Some(Self {
            identity: identity.try_into().map_err(|_| bad())?,
            signature: signature.try_into().map_err(|_| bad())?,
        }))
    }
}

/// Where a state batch's columns are: the group keys first, then the states
/// of the aggregates; which of them are secure; and the state of an empty
/// accumulator (the identity of the merge), for groups a client lacks.
#[derive(Debug, Clone)]
pub struct SecureLayout {
    pub key_columns: usize,
    /// Indices (into the state batch) of the columns to mask.
    pub secure_columns: Vec<usize>,
    /// One-row arrays: the empty state of every non-key column.
    pub zero_state: Vec<ArrayRef>,
    pub schema: SchemaRef,
    /// Whether a secure column carries a share of DP noise (`secure_dp_…`),
    /// which a site adds at setup to each group of its declared domain: it
    /// then aligns only to a group list of its own groups, as an empty
    /// group it filled would carry no share of its noise.
    pub noised: bool,
}

impl SecureLayout {
    /// The layout of the state of an aggregate (partial, or a client's
    /// one-state-per-group reduction).
    pub fn of(aggregate: &AggregateExec) -> Result<Self> {
        let schema = aggregate.schema();
        let mut widths = Vec::new();
        for expr in aggregate.aggr_expr() {
            widths.push((
                fedsql_udfs::catalogue::is_secure(expr.fun().name()),
                expr.state_fields()?.len(),
                expr,
            ));
        }
        let state_columns: usize = widths.iter().map(|(_, w, _)| w).sum();
        let key_columns = schema
            .fields()
            .len()
            .checked_sub(state_columns)
            .ok_or_else(|| {
                FedError::Internal("the state has fewer columns than its aggregates".into())
            })?;
        let mut secure_columns = Vec::new();
        let mut zero_state = Vec::new();
        let mut at = key_columns;
        let noised = aggregate.aggr_expr().iter().any(|e| {
            let name = e.fun().name();
            fedsql_udfs::catalogue::is_secure(name) && fedsql_udfs::catalogue::is_dp(name)
        });
        for (secure, width, expr) in widths {
            if secure {
                secure_columns.extend(at..at + width);
            }
            let empty = expr.create_accumulator()?.state()?;
            for (i, value) in empty.into_iter().enumerate() {
                let want = schema.field(at + i).data_type();
                zero_state.push(cast(&value.to_array()?, want)?);
            }
            at += width;
        }
        Ok(Self {
            key_columns,
            secure_columns,
            zero_state,
            schema,
            noised,
        })
    }

    /// The layout of the aggregate at the root of a client's physical plan.
    pub fn of_plan(plan: &Arc<dyn ExecutionPlan>) -> Result<Self> {
        let aggregate = plan.downcast_ref::<AggregateExec>().ok_or_else(|| {
            FedError::Internal("a client's state plan must end in an aggregate".into())
        })?;
        Self::of(aggregate)
    }

    /// The layout of the same state with `columns` dropped (the counts a
    /// site under a disclosure policy adds and removes).
    pub fn without_columns(mut self, columns: &[usize]) -> Self {
        let keep = |i: usize| !columns.contains(&i);
        let key_columns = self.key_columns;
        let mut zero_state = Vec::new();
        for (i, zero) in self.zero_state.into_iter().enumerate() {
            if keep(key_columns + i) {
                zero_state.push(zero);
            }
        }
        self.zero_state = zero_state;
        self.secure_columns = self
            .secure_columns
            .iter()
            .filter(|&&i| keep(i))
            .map(|&i| i - columns.iter().filter(|&&c| c < i).count())
            .collect();
        let fields: Vec<_> = (0..self.schema.fields().len())
            .filter(|&i| keep(i))
            .map(|i| self.schema.field(i).clone())
            .collect();
        self.schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        self
    }

    /// Whether any state column is secure.
    pub fn is_secure(&self) -> bool {
        !self.secure_columns.is_empty()
    }
}

/// Whether a round's state has secure columns; checks their bounds (by
/// creating each secure accumulator once), so that a bad `secure_sum` call
/// fails before any client runs.
pub fn check_round(partial: &AggregateExec) -> Result<bool> {
    let mut secure = false;
    for expr in partial.aggr_expr() {
        if fedsql_udfs::catalogue::is_secure(expr.fun().name()) {
            expr.create_accumulator()?;
            secure = true;
        }
    }
    Ok(secure)
}

/// Whether the aggregate at the root of a client's physical plan has a
/// secure aggregate: then the client sends its state only masked.
pub fn has_secure_aggregates(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<AggregateExec>().is_some_and(|a| {
        a.aggr_expr()
            .iter()
            .any(|e| fedsql_udfs::catalogue::is_secure(e.fun().name()))
    })
}

/// The error a client gives when asked for the plain state of an encoder
/// with secure aggregates.
pub fn plain_state_refused(client: &str) -> FedError {
    FedError::refused(
        format!(
            "client '{client}': this encoder has secure aggregates (secure_sum, ...): their state leaves the client only masked, through secure_setup and encode_masked"
        ),
        None,
    )
}

pub fn key_converter(keys: &RecordBatch) -> Result<RowConverter> {
    Ok(RowConverter::new(
        keys.schema()
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
}

/// The union of the clients' group keys, in the canonical (row-format
/// byte) order every client aligns to.
pub fn union_groups(keys: &[RecordBatch]) -> Result<RecordBatch> {
    let first = keys
        .first()
        .ok_or_else(|| FedError::Internal("no client in the round".into()))?;
    if first.num_columns() == 0 {
        return Ok(first.clone());
    }
    let converter = key_converter(first)?;
    let mut union: BTreeMap<OwnedRow, (usize, usize)> = BTreeMap::new();
    for (c, batch) in keys.iter().enumerate() {
        if batch.schema().fields() != first.schema().fields() {
            return Err(FedError::InvalidArgument(format!(
                "clients returned group keys {} and {}",
                first.schema(),
                batch.schema()
            )));
        }
        let rows = converter.convert_columns(batch.columns())?;
        for (r, row) in rows.iter().enumerate() {
            union.entry(row.owned()).or_insert((c, r));
        }
    }
    let picks: Vec<(usize, usize)> = union.into_values().collect();
    let columns = (0..first.num_columns())
        .map(|i| {
            let arrays: Vec<&dyn Array> = keys.iter().map(|b| b.column(i).as_ref()).collect();
            if picks.is_empty() {
                Ok(new_empty_array(first.schema().field(i).data_type()))
            } else {
                Ok(interleave(&arrays, &picks)?)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(first.schema(), columns)?)
}
