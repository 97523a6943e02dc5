//! The steps of secure aggregation at a site, as a state machine per
//! session: keys sent → (in a sparse round) graph nonce revealed → shares
//! sent → masked → list signed → unmasked (forgotten). Each
//! step is answered once, in order; anything else (a replay, a step out of
//! order, a session it does not know) is refused, so a coordinator cannot
//! ask twice and collect both kinds of shares of one site.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use datafusion::arrow::record_batch::RecordBatch;
use x25519_dalek::{PublicKey, StaticSecret};

use super::align::{align, groups_digest};
use super::checks::{check_session, check_threshold, relayed_place};
use crate::error::{FedError, Result};
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::secure::consistency::{self, ConfirmRequest, ListSignature};
use crate::protocol::secure::masks::{self, SharePair};
use crate::protocol::secure::threshold::SiteFloor;
use crate::protocol::secure::{
    MaskRequest, ParticipantKeys, Revealed, RevealedKind, SecureLayout, SecureSession, SecureSetup,
    ShareEnvelope, ShareRequest, UnmaskRequest, graph, shamir,
};
use crate::site::release::identity::SiteIdentity;

/// Sessions a client keeps at once; older ones (of rounds that failed or
/// lost this site) are forgotten.
const MAX_PENDING_SESSIONS: usize = 16;

/// Session ids a client remembers having set up (16 bytes each, 1 MiB in
/// all): an id seen before is refused, so a coordinator cannot run a
/// second setup under an old session's id and replay that session's
/// messages into it. The oldest are forgotten first; a restarted worker
/// starts afresh (its old sessions' secrets are gone with it).
const REMEMBERED_SESSIONS: usize = 65_536;

/// What a client keeps between the steps: one entry per session; the
/// session ids its site has set up; and the site's long-term identity, if
/// it has one, to sign its session keys.
#[derive(Default)]
pub(crate) struct ClientSecrets {
    pending: Mutex<VecDeque<Pending>>,
    seen: Arc<SecureSessionIds>,
    identity: Option<Arc<SiteIdentity>>,
}

/// The secure session ids one site has set up, shared by all its clients:
/// a worker makes a client per table and per schema a plan reads the
/// table with, and an id must be refused by every one of them (the eighth
/// outside attack set a used id up again under another schema).
#[derive(Default)]
pub struct SecureSessionIds(Mutex<SeenSessions>);

impl std::fmt::Debug for SecureSessionIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map(|s| s.order.len()).unwrap_or(0);
        write!(f, "SecureSessionIds({n} remembered)")
    }
}

/// The ids of the last [`REMEMBERED_SESSIONS`] sessions set up here.
#[derive(Default)]
struct SeenSessions {
    order: VecDeque<[u8; 16]>,
    ids: HashSet<[u8; 16]>,
}

impl SeenSessions {
    /// Records `id`; false if it was seen before.
    fn first_time(&mut self, id: [u8; 16]) -> bool {
        if !self.ids.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > REMEMBERED_SESSIONS
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        true
    }
}

impl std::fmt::Debug for ClientSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.pending.lock().map(|p| p.len()).unwrap_or(0);
        write!(f, "ClientSecrets({n} pending sessions)")
    }
}

struct Pending {
    session: SecureSession,
    mask_secret: StaticSecret,
    cipher_secret: StaticSecret,
    self_seed: [u8; 32],
    /// The seed of its Ed25519 list key (step 4).
    list_seed: [u8; 32],
    /// Its nonce of the sparse graph's coin toss.
    graph_nonce: [u8; 32],
    /// The graph's seed, once the nonces are in (step 2).
    graph_seed: graph::GraphSeed,
    keys: ParticipantKeys,
    state: RecordBatch,
    layout: SecureLayout,
    /// The digest of the encoder that computed `state` (part of the view).
    encoder: [u8; 32],
    step: Step,
}

enum Step {
    /// Step 1 answered.
    KeysSent,
    /// In a sparse round: its graph nonce revealed, for these keys.
    Revealed { keys: Vec<Option<ParticipantKeys>> },
    /// Step 2 answered: this site's place, the keys it checked, and its own
    /// shares of its secrets.
    SharesSent {
        me: usize,
        keys: Vec<Option<ParticipantKeys>>,
        own: SharePair,
        /// Its neighbours with keys (every other site in a full round).
        neighbours: Vec<usize>,
        /// The Shamir threshold of its neighbourhood.
        share_t: usize,
    },
    /// Step 3 answered: the sites it masked with (itself included) and the
    /// shares it holds of each of them.
    Masked {
        me: usize,
        keys: Vec<Option<ParticipantKeys>>,
        /// Its view of the round (the keys and the group list; see
        /// [`consistency::view_digest`]).
        view: [u8; 32],
        masked_with: Vec<usize>,
        held: BTreeMap<usize, SharePair>,
        neighbours: Vec<usize>,
        share_t: usize,
    },
    /// Step 4 answered: the one survivor list it signed.
    Confirmed {
        me: usize,
        keys: Vec<Option<ParticipantKeys>>,
        view: [u8; 32],
        held: BTreeMap<usize, SharePair>,
        survivors: Vec<u32>,
    },
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::KeysSent => "its keys were sent",
            Step::Revealed { .. } => "its graph nonce was revealed",
            Step::SharesSent { .. } => "its shares were sent",
            Step::Masked { .. } => "its masked state was sent",
            Step::Confirmed { .. } => "it signed the survivor list",
        }
    }
}

fn fill_random(buf: &mut [u8]) {
    use rand::RngCore;
    rand::rng().fill_bytes(buf);
}

impl ClientSecrets {
    /// Secrets of a site that signs its session keys with `identity`.
    pub(crate) fn with_identity(identity: Option<Arc<SiteIdentity>>) -> Self {
        Self {
            pending: Mutex::default(),
            seen: Arc::default(),
            identity,
        }
    }

    /// The same secrets, remembering set-up session ids in `ids` (the
    /// site's, shared by all its clients).
    pub(crate) fn with_session_ids(mut self, ids: Arc<SecureSessionIds>) -> Self {
        self.seen = ids;
        self
    }

    /// The site's identity key, if it has one.
    pub(crate) fn identity(&self) -> Option<[u8; 32]> {
        self.identity.as_ref().map(|i| i.public_key())
    }

    /// Takes the session's entry if it is at the step `at` accepts.
    fn take(&self, session: &SecureSession, at: impl Fn(&Step) -> bool) -> Result<Pending> {
        let mut kept = self.pending.lock().expect("not poisoned");
        let found = kept.iter().position(|p| p.session.id == session.id);
        let Some(i) = found else {
            return Err(FedError::InvalidArgument(format!(
                "no secure session {} here: its setup did not happen here, or the session is over (each step is answered once)",
                session.id_hex()
            )));
        };
        if kept[i].session != *session {
            return Err(FedError::InvalidArgument(format!(
                "secure session {}: its clients or threshold differ from the setup's",
                session.id_hex()
            )));
        }
        if !at(&kept[i].step) {
            let step = kept[i].step.name();
            // A step out of order ends the session: nothing more is answered.
            kept.remove(i);
            return Err(FedError::InvalidArgument(format!(
                "secure session {}: a step out of order ({step}; each step is answered once); the session is over here",
                session.id_hex()
            )));
        }
        Ok(kept.remove(i).expect("found"))
    }

    fn keep(&self, pending: Pending) {
        let mut kept = self.pending.lock().expect("not poisoned");
        kept.retain(|p| p.session.id != pending.session.id);
        if kept.len() >= MAX_PENDING_SESSIONS {
            kept.pop_front();
        }
        kept.push_back(pending);
    }

    /// Step 1 at a client whose state for the session is `state`, computed
    /// by the encoder of digest `encoder` ([`super::encoder_digest`]):
    /// fresh keys and self seed, kept with the state. `floor` is what the
    /// site requires of the threshold (its min_secure_clients, its peers).
    pub(crate) fn setup(
        &self,
        session: &SecureSession,
        (state, encoder): (&StateBatch, [u8; 32]),
        layout: SecureLayout,
        floor: SiteFloor,
    ) -> Result<SecureSetup> {
        check_session(session, floor)?;
        if !self
            .seen
            .0
            .lock()
            .expect("not poisoned")
            .first_time(session.id)
        {
            return Err(FedError::InvalidArgument(format!(
                "secure session {} was set up here already (a replay?); a session id is used once",
                session.id_hex()
            )));
        }
        let mask_secret = StaticSecret::from(rand::random::<[u8; 32]>());
        let cipher_secret = StaticSecret::from(rand::random::<[u8; 32]>());
        let self_seed: [u8; 32] = rand::random();
        let list_seed: [u8; 32] = rand::random();
        let graph_nonce: [u8; 32] = rand::random();
        let mut keys = ParticipantKeys {
            mask_key: PublicKey::from(&mask_secret).to_bytes(),
            cipher_key: PublicKey::from(&cipher_secret).to_bytes(),
            self_commitment: masks::self_commitment(&session.id, &self_seed),
            list_key: consistency::list_public_key(&list_seed),
            graph_commitment: graph::nonce_commitment(&session.id, &graph_nonce),
            signed: None,
        };
        keys.signed = self
            .identity
            .as_ref()
            .map(|i| i.sign(&session.id, &keys.digest()));
        let batch = state.batch().clone();
        let group_keys = batch.project(&(0..layout.key_columns).collect::<Vec<_>>())?;
        self.keep(Pending {
            session: session.clone(),
            mask_secret,
            cipher_secret,
            self_seed,
            list_seed,
            graph_nonce,
            graph_seed: [0; 32],
            keys,
            state: batch,
            layout,
            encoder,
            step: Step::KeysSent,
        });
        Ok(SecureSetup { keys, group_keys })
    }

    /// Between steps 1 and 2, in a sparse round only: checks the relayed
    /// keys (its own among them, unchanged; no key twice; at least t
    /// sites) and reveals this site's graph nonce, once. The keys of step
    /// 2 must then be these.
    pub(crate) fn reveal(&self, request: &ShareRequest) -> Result<[u8; 32]> {
        let session = &request.session;
        let mut pending = self.take(session, |s| matches!(s, Step::KeysSent))?;
        if !graph::session_is_sparse(session) || !request.nonces.is_empty() {
            return Err(FedError::InvalidArgument(format!(
                "secure session {}: a graph nonce is revealed only in a sparse round (more than {} sites, each masking with fewer than all the others), to a request without nonces; the session is over here",
                session.id_hex(),
                graph::FULL_GRAPH_MAX
            )));
        }
        relayed_place(request, &pending.keys)?;
        let nonce = pending.graph_nonce;
        pending.step = Step::Revealed {
            keys: request.keys.clone(),
        };
        self.keep(pending);
        Ok(nonce)
    }

    /// Step 2: checks the relayed keys (`admit` checks its neighbours'
    /// against the site's peers and floor, given this site's place and its
    /// neighbours), then shares this site's mask key and self seed among
    /// its neighbours and seals each one's pair to it.
    pub(crate) fn share(
        &self,
        request: &ShareRequest,
        floor: SiteFloor,
        admit: impl FnOnce(usize, &[usize]) -> Result<()>,
    ) -> Result<Vec<ShareEnvelope>> {
        let session = &request.session;
        let sparse = graph::session_is_sparse(session);
        let mut pending = self.take(session, |s| {
            if sparse {
                matches!(s, Step::Revealed { .. })
            } else {
                matches!(s, Step::KeysSent)
            }
        })?;
        if let Step::Revealed { keys } = &pending.step
            && *keys != request.keys
        {
            return Err(FedError::InvalidArgument(format!(
                "secure session {}: the keys relayed for the shares differ from those relayed when this site revealed its graph nonce; the session is over here",
                session.id_hex()
            )));
        }
        let me = relayed_place(request, &pending.keys)?;
        let participants = request.participants();
        // The graph's coin toss: every participant's nonce, as committed.
        pending.graph_seed =
            graph::seed(session, &request.keys, &request.nonces).map_err(|why| {
                FedError::InvalidArgument(format!(
                    "secure session {}: {why}; the session is over here",
                    session.id_hex()
                ))
            })?;
        let n = session.clients.len();
        // A strict majority (more than two thirds with peers) of the sites
        // that can hold shares.
        check_threshold(session, participants.len(), floor)?;
        let graph_neighbours = graph::neighbours(session, &pending.graph_seed).swap_remove(me);
        let share_t = graph::share_threshold(session, graph_neighbours.len() + 1);
        let neighbours: Vec<usize> = graph_neighbours
            .into_iter()
            .filter(|&j| request.keys[j].is_some())
            .collect();
        if neighbours.len() + 1 < share_t {
            return Err(FedError::InvalidArgument(format!(
                "secure session {}: {} of this site's neighbours sent keys, fewer than its neighbourhood's threshold {share_t}",
                session.id_hex(),
                neighbours.len()
            )));
        }
        admit(me, &neighbours)?;
        let mask_key = shamir::split(&pending.mask_secret.to_bytes(), n, share_t, fill_random);
        let self_seed = shamir::split(&pending.self_seed, n, share_t, fill_random);
        let mut envelopes = Vec::with_capacity(neighbours.len());
        for &j in &neighbours {
            let peer = request.keys[j].expect("a participant");
            let pair = SharePair {
                mask_key: mask_key[j],
                self_seed: self_seed[j],
            };
            envelopes.push(ShareEnvelope {
                from: me as u32,
                to: j as u32,
                ciphertext: masks::seal(
                    &pending.cipher_secret,
                    &peer.cipher_key,
                    session,
                    (me as u32, j as u32),
                    &pair,
                )?,
            });
        }
        pending.step = Step::SharesSent {
            me,
            keys: request.keys.clone(),
            own: SharePair {
                mask_key: mask_key[me],
                self_seed: self_seed[me],
            },
            neighbours,
            share_t,
        };
        self.keep(pending);
        Ok(envelopes)
    }

    /// Step 3: opens the envelopes addressed to this site, and answers with
    /// its state aligned to the request's groups, plus its self mask and
    /// the pairwise masks with every site whose envelope it opened.
    /// `admit` checks the number of those sites (this one included)
    /// against the site's floor.
    pub(crate) fn mask(
        &self,
        encoder: &Encoder,
        request: &MaskRequest,
        admit: impl FnOnce(usize) -> Result<()>,
    ) -> Result<StateBatch> {
        let session = &request.session;
        let mut pending = self.take(session, |s| matches!(s, Step::SharesSent { .. }))?;
        let Step::SharesSent {
            me,
            keys,
            own,
            neighbours,
            share_t,
        } = std::mem::replace(&mut pending.step, Step::KeysSent)
        else {
            unreachable!("taken at SharesSent");
        };
        let mut held = BTreeMap::new();
        held.insert(me, own);
        for envelope in &request.envelopes {
            let from = envelope.from as usize;
            let sender = keys
                .get(from)
                .copied()
                .flatten()
                .filter(|_| neighbours.contains(&from));
            let Some(sender) = sender else {
                return Err(FedError::InvalidArgument(format!(
                    "an envelope from participant {from}, which did not send keys in this session"
                )));
            };
            if envelope.to as usize != me {
                return Err(FedError::InvalidArgument(
                    "an envelope addressed to another site".into(),
                ));
            }
            if held.contains_key(&from) {
                return Err(FedError::InvalidArgument(format!(
                    "two envelopes from participant {from} (a replay?)"
                )));
            }
            let pair = masks::open(
                &pending.cipher_secret,
                &sender.cipher_key,
                session,
                (envelope.from, envelope.to),
                &envelope.ciphertext,
            )?;
            held.insert(from, pair);
        }
        if held.len() < share_t {
            return Err(FedError::InvalidArgument(format!(
                "secure session {}: {} sites of this one's neighbourhood would take part, fewer than its threshold {share_t}",
                session.id_hex(),
                held.len(),
            )));
        }
        admit(held.len())?;
        let aligned = align(&pending.state, &pending.layout, &request.groups)?;
        let view = consistency::view_digest(
            &pending.encoder,
            &keys,
            &groups_digest(&pending.layout, &request.groups)?,
        );
        let words = masks::secure_words(&aligned, &pending.layout)?;
        let mut mask = vec![0u64; words];
        masks::apply_self(&mut mask, &pending.self_seed, &session.id, true);
        for &j in held.keys() {
            if j == me {
                continue;
            }
            let peer = keys[j].expect("a participant");
            let seed = masks::pairwise_seed(&pending.mask_secret, &peer.mask_key, &session.id)
                .map_err(|e| {
                    FedError::InvalidArgument(format!("client '{}': {e}", session.clients[j]))
                })?;
            masks::apply_pairwise(&mut mask, &seed, masks::adds(me, j));
        }
        let masked = masks::add_mask(&aligned, &pending.layout, &mask)?;
        let state = encoder.accept(&[masked])?;
        pending.step = Step::Masked {
            me,
            keys,
            view,
            masked_with: held.keys().copied().collect(),
            held,
            neighbours,
            share_t,
        };
        // The state is no longer needed.
        pending.state = RecordBatch::new_empty(pending.state.schema());
        self.keep(pending);
        Ok(state)
    }

    /// Step 4, once per session: checks the survivor list and signs it.
    /// Refused (and the session is over) if the list is not in strictly
    /// increasing order, names a site that sent no keys, leaves this site
    /// out, names a neighbour this site did not mask with, or has fewer
    /// than the threshold (of the session, or of this site's
    /// neighbourhood).
    pub(crate) fn confirm(&self, request: &ConfirmRequest) -> Result<ListSignature> {
        let session = &request.session;
        let mut pending = self.take(session, |s| matches!(s, Step::Masked { .. }))?;
        let Step::Masked {
            me,
            keys,
            view,
            masked_with,
            held,
            neighbours,
            share_t,
        } = std::mem::replace(&mut pending.step, Step::KeysSent)
        else {
            unreachable!("taken at Masked");
        };
        let listed = &request.survivors;
        let refuse = |why: String| {
            FedError::InvalidArgument(format!(
                "secure session {}: {why}; nothing is signed or revealed, and the session is over here",
                session.id_hex()
            ))
        };
        if listed.windows(2).any(|w| w[0] >= w[1]) {
            return Err(refuse(
                "the survivor list is not in increasing order, or lists a site twice".into(),
            ));
        }
        let survivors: Vec<usize> = listed.iter().map(|&s| s as usize).collect();
        if let Some(unknown) = survivors
            .iter()
            .find(|&&s| keys.get(s).is_none_or(Option::is_none))
        {
            return Err(refuse(format!(
                "participant {unknown} is listed as a survivor but sent no keys in this session"
            )));
        }
        if !survivors.contains(&me) {
            return Err(refuse(
                "this site sent its masked state but is listed as dropped".into(),
            ));
        }
        let stranger = survivors
            .iter()
            .find(|s| neighbours.contains(s) && !masked_with.contains(s));
        if let Some(stranger) = stranger {
            return Err(refuse(format!(
                "participant {stranger} is listed as a survivor but did not share its keys with this site"
            )));
        }
        let near = survivors.iter().filter(|s| masked_with.contains(s)).count();
        if survivors.len() < session.threshold || near < share_t {
            return Err(refuse(format!(
                "{} survivors ({near} of this site's neighbourhood), fewer than the threshold {} (or {share_t})",
                survivors.len(),
                session.threshold
            )));
        }
        let signature = ListSignature {
            from: me as u32,
            signature: consistency::sign_list(&pending.list_seed, session, &view, listed),
        };
        pending.step = Step::Confirmed {
            me,
            keys,
            view,
            held,
            survivors: listed.clone(),
        };
        self.keep(pending);
        Ok(signature)
    }

    /// Step 5, once per session: for every site this one masked with, its
    /// share of that site's self seed if the site is on the survivor list,
    /// of its mask key if not — decided by the list alone, not by which
    /// signatures came with the request. Refused unless the list is the
    /// one this site signed in step 4 and every site on it (at least
    /// the threshold) signed it too over the same view (each
    /// signature verified; with `peers` listed, each signer's keys signed
    /// by a distinct listed peer), and, in a sparse round, unless the
    /// survivors linked to this site through the graph make the threshold.
    /// The session is then forgotten.
    pub(crate) fn unmask(
        &self,
        request: &UnmaskRequest,
        peers: &[[u8; 32]],
    ) -> Result<Vec<Revealed>> {
        let session = &request.session;
        let pending = self.take(session, |s| matches!(s, Step::Confirmed { .. }))?;
        let Step::Confirmed {
            me,
            keys,
            view,
            held,
            survivors,
        } = &pending.step
        else {
            unreachable!("taken at Confirmed");
        };
        let refuse = |why: String| {
            FedError::InvalidArgument(format!(
                "secure session {}: {why}; nothing is revealed, and the session is over here",
                session.id_hex()
            ))
        };
        if request.survivors != *survivors {
            return Err(refuse(
                "the survivor list differs from the one this site signed".into(),
            ));
        }
        let own = self.identity();
        let mut seen = std::collections::BTreeSet::new();
        for signed in &request.signatures {
            let from = signed.from;
            if !survivors.contains(&from) || !seen.insert(from) {
                return Err(refuse(format!(
                    "a signature of the survivor list by participant {from}, which is not on it or signed twice"
                )));
            }
        }
        // Every listed survivor must have signed the list over this
        // site's view, and every signature is checked. What is revealed
        // depends on the signed list alone, never on which signatures came
        // with the request (a coordinator could show each site another
        // subset), and a listed site whose signature over this view is
        // missing may have run another encoder: the fifth outside attack
        // sent the victim the analyst's query and the others one that adds
        // nothing, and showed the others only their own signatures, so that
        // they would reveal the victim's self seed. In a sparse round, too,
        // only a signer checked that its listed neighbours masked with it.
        let sparse = graph::session_is_sparse(session);
        let mut signers: Vec<u32> = Vec::new();
        let mut identities: Vec<[u8; 32]> = Vec::new();
        for signed in &request.signatures {
            let from = signed.from;
            let signer = keys[from as usize].expect("every survivor sent keys");
            if !signed.verifies(session, view, survivors, &signer.list_key) {
                return Err(refuse(format!(
                    "participant {from}'s signature of the survivor list does not verify"
                )));
            }
            if !peers.is_empty() && from as usize != *me {
                let identity = signer
                    .signed
                    .filter(|s| {
                        peers.contains(&s.identity)
                            && Some(s.identity) != own
                            && signer.signature_verifies(&session.id)
                    })
                    .map(|s| s.identity);
                let Some(identity) = identity else {
                    return Err(refuse(format!(
                        "participant {from}'s keys are not signed by one of this site's listed peers"
                    )));
                };
                if identities.contains(&identity) {
                    return Err(refuse(
                        "one peer's identity signs two of the signers' keys".into(),
                    ));
                }
                identities.push(identity);
            }
            signers.push(from);
        }
        if !signers.contains(&(*me as u32)) || signers.len() < session.threshold {
            return Err(refuse(format!(
                "{} survivors signed the survivor list{}, fewer than the threshold {} (each survivor must see the same list)",
                signers.len(),
                if signers.contains(&(*me as u32)) {
                    ""
                } else {
                    " (this site's own signature missing)"
                },
                session.threshold
            )));
        }
        if signers.len() < survivors.len() {
            return Err(refuse(format!(
                "every survivor must sign the survivor list over the same view; {} of {} did",
                signers.len(),
                survivors.len()
            )));
        }
        if sparse {
            // The coordinator can unmask the sum of any part of the
            // survivors that no pairwise mask links to the rest: the
            // sites this one is linked to through survivors must make t.
            let links = graph::neighbours(session, &pending.graph_seed);
            let mut listed = vec![false; links.len()];
            for &s in survivors {
                listed[s as usize] = true;
            }
            let mut seen = vec![false; links.len()];
            seen[*me] = true;
            let mut reached = vec![*me];
            let mut at = 0;
            while at < reached.len() {
                for &j in &links[reached[at]] {
                    if listed[j] && !seen[j] {
                        seen[j] = true;
                        reached.push(j);
                    }
                }
                at += 1;
            }
            if reached.len() < session.threshold {
                return Err(refuse(format!(
                    "only {} of the survivors are linked to this site through the masks of the sparse graph, fewer than the threshold {} (the others' dropouts would cut it off)",
                    reached.len(),
                    session.threshold
                )));
            }
        }
        Ok(held
            .iter()
            .map(|(&of, pair)| {
                // Self seeds of the listed sites (they sent their masked
                // states), mask keys of the others: the list is the one
                // at least t sites signed over this view.
                if survivors.contains(&(of as u32)) {
                    Revealed {
                        of: of as u32,
                        kind: RevealedKind::SelfSeed,
                        share: pair.self_seed,
                    }
                } else {
                    Revealed {
                        of: of as u32,
                        kind: RevealedKind::MaskKey,
                        share: pair.mask_key,
                    }
                }
            })
            .collect())
    }
}
