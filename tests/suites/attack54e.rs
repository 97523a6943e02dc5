//! Issue 54, attacked a fifth time from outside: secure aggregation after
//! the fixes of the fourth review, by a hostile coordinator that drives
//! honest in-process sites through the `Site` trait with hand-made
//! messages (the harness of `attack54b.rs` / `attack54d.rs`).
//!
//! A test named `holds_…` asserts what stops an attack; `limit_…` and
//! `gap_…` assert that the secret the coordinator recovers equals the
//! true value (a documented limit; a gap still open).
//! 1. The rows a secure encoder reads were not all in its digest: inside a
//!    fit (a `fit_scope` the coordinator chooses), a site reused the rows
//!    it kept for an earlier encoder whose input *printed* the same
//!    (the input's display text: a string literal, or a shared table's
//!    rows, which the text does not show), so the others were primed with
//!    an input that keeps nothing and then all ran the victim's encoder
//!    (was BREAK, critical; FIXED: no kept rows in a secure round, and
//!    kept rows keyed by the input's digest).
//! 2. A join's `null_equality` was neither printed nor an expression nor
//!    a literal: two joins that differ only in it had one digest (was
//!    BREAK, critical; FIXED: in the digest; and every survivor must sign
//!    over the same view, so the others shown only their own t signatures
//!    no longer reveal the victim's self seed).
//! 3. Two sessions over different sets of participants: their difference
//!    is one site's exact state (LIMIT, high: documented; only DP noise,
//!    `secure_dp_…`, protects against it).
//! 4. A sparse round's ring was drawn from the session id the coordinator
//!    picks, over places the coordinator assigns: 11 colluders of 101
//!    seated next to the victim held the threshold of its shares (mask
//!    key and self seed alike): its exact state, or a `secure_dp_count`
//!    with 1/51 of the noise (was GAP, high; FIXED: the graph is the
//!    sites' commit-then-reveal coin toss).
//! 5. A sparse round padded with participants no peer signed passed steps
//!    2–4; only step 5's peers check stopped the sum of an arc of 21
//!    sites (HOLDS; since the coin toss, at step 2).
//! 6. Two clients of one worker (one identity) in one session (HOLDS).

use crate::attack54f::rebuild;
use crate::hostile::{SUM_SQL, schema, site_rows};

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, UInt64Type};
use datafusion::common::NullEquality;
use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::LogicalPlan;
use fedsql::FedContext;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::codec::InlineTable;
use fedsql::protocol::encoder::Encoder;
use fedsql::protocol::secure::consistency::{self, ConfirmRequest, ListSignature};
use fedsql::protocol::secure::{
    MaskRequest, ParticipantKeys, Revealed, RevealedKind, SecureSession, ShareEnvelope,
    ShareRequest, UnmaskRequest, graph, masks, shamir,
};
use fedsql::protocol::site::{Analyst, Site, SiteRequest};
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::{DpPolicy, DpSite};
use fedsql::site::release::dp_budget::Ledger;
use fedsql::site::release::identity::SiteIdentity;
use fedsql::site::release::policy::DisclosurePolicy;
use fedsql::site::release::secure::encoder_digest;
use x25519_dalek::{PublicKey, StaticSecret};

/// Site `c`'s plain sum of x (what `secure_sum(x, 0, 1000)` masks).
fn site_sum(c: usize) -> u64 {
    site_rows(c)
        .column(1)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .values()
        .iter()
        .map(|&v| v as u64)
        .sum()
}

/// A hostile coordinator: `n` honest in-process sites, each with an
/// Ed25519 identity and every site's identity listed as a peer, under a
/// worker's default disclosure policy (k = 5, min_secure_clients = 3),
/// served as a worker serves them; the round's encoder as the real
/// coordinator plans it; and hand-made messages.
struct Hostile {
    ctx: FedContext,
    sites: Vec<Arc<LocalClient>>,
    /// The encoder each site is sent.
    encoders: Vec<Encoder>,
    analyst: Analyst,
    /// Each site's long-term identity (a colluding site hands its own to
    /// the coordinator).
    identities: Vec<Arc<SiteIdentity>>,
}

impl Hostile {
    async fn new(n: usize, sql: &str) -> Self {
        Self::build(n, sql, None, Some(DisclosurePolicy::default())).await
    }

    /// The same, each site under `dp` (its own in-memory ledger) and
    /// under `policy` if any.
    async fn build(
        n: usize,
        sql: &str,
        dp: Option<&DpPolicy>,
        policy: Option<DisclosurePolicy>,
    ) -> Self {
        Self::build_with_peers(n, sql, dp, policy, true).await
    }

    /// The same; with `peers` false, each site keeps its identity (it signs
    /// its keys) but lists no peers, so it accepts a strict majority and a
    /// round of more than 100 sites is sparse.
    async fn build_with_peers(
        n: usize,
        sql: &str,
        dp: Option<&DpPolicy>,
        policy: Option<DisclosurePolicy>,
        peers: bool,
    ) -> Self {
        let ctx = FedContext::new();
        // A shared lookup table of one row whose key `k` is NULL and whose
        // `v` is 0 (see 2.).
        let lookup_schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, false),
        ]));
        let lookup = RecordBatch::try_new(
            Arc::clone(&lookup_schema),
            vec![
                Arc::new(Int64Array::from(vec![None::<i64>])),
                Arc::new(Int64Array::from(vec![0i64])),
            ],
        )
        .unwrap();
        ctx.session()
            .register_table(
                "lookup",
                Arc::new(InlineTable::new(lookup_schema, vec![lookup])),
            )
            .unwrap();
        let identities: Vec<Arc<SiteIdentity>> = (0..n)
            .map(|_| Arc::new(SiteIdentity::generate().unwrap().0))
            .collect();
        let listed: Arc<[[u8; 32]]> = if peers {
            identities.iter().map(|i| i.public_key()).collect()
        } else {
            Arc::new([])
        };
        let sites: Vec<Arc<LocalClient>> = (0..n)
            .map(|c| {
                let name = format!("site{c}");
                let mut site = LocalClient::from_batches(
                    &name,
                    &format!("memory:{name}"),
                    schema(),
                    vec![site_rows(c)],
                    ctx.site_engine(),
                )
                .unwrap()
                .with_identity(Some(Arc::clone(&identities[c])), listed.clone());
                if policy.is_some() {
                    site = site.with_policy(policy.clone()).served_remotely(false);
                }
                if let Some(p) = dp {
                    site = site.with_dp(Arc::new(DpSite::new(
                        p.clone(),
                        Arc::new(Ledger::in_memory()),
                    )));
                }
                Arc::new(site)
            })
            .collect();
        ctx.register_federated(FederatedTable::new(
            "t",
            schema(),
            sites
                .iter()
                .map(|s| Arc::clone(s) as Arc<dyn Site>)
                .collect(),
        ))
        .unwrap();
        let mut h = Self {
            ctx,
            encoders: Vec::new(),
            sites,
            analyst: Analyst::session(),
            identities,
        };
        let encoder = h.plan_encoder(sql).await;
        h.encoders = vec![encoder; n];
        h
    }

    /// The encoder the coordinator would plan for `sql` over the same table.
    async fn plan_encoder(&self, sql: &str) -> Encoder {
        let state = self.ctx.session().state();
        let plan = state.create_logical_plan(sql).await.unwrap();
        let plan = state.optimize(&plan).unwrap();
        let cut = fedsql::coordinator::split::lowest_cut(&plan).unwrap();
        fedsql::coordinator::split::plan_round(&state, &cut)
            .await
            .unwrap()
            .encoder
    }

    fn req(&self, c: usize) -> SiteRequest<'_> {
        SiteRequest::new(&self.encoders[c], &self.analyst)
    }

    async fn setup(
        &self,
        c: usize,
        session: &SecureSession,
    ) -> Result<(ParticipantKeys, RecordBatch), String> {
        let s = self.sites[c]
            .secure_setup(&self.req(c), session)
            .await
            .map_err(|e| format!("site {c} refused the setup: {e}"))?;
        Ok((s.keys, s.group_keys))
    }

    async fn share(
        &self,
        c: usize,
        session: &SecureSession,
        keys: Vec<Option<ParticipantKeys>>,
    ) -> Result<Vec<ShareEnvelope>, String> {
        let nonces =
            crate::support::graph_nonces(&self.sites, |i| self.req(i), session, &keys).await;
        let request = ShareRequest {
            session: session.clone(),
            keys,
            nonces,
        };
        self.sites[c]
            .secure_share(&self.req(c), &request)
            .await
            .map_err(|e| format!("site {c} refused to share: {e}"))
    }

    async fn mask(
        &self,
        c: usize,
        session: &SecureSession,
        envelopes: Vec<ShareEnvelope>,
        groups: &RecordBatch,
    ) -> Result<u64, String> {
        Ok(first_word(
            &self.mask_state(c, session, envelopes, groups).await?,
        ))
    }

    /// Step 3 at site `c`: its whole masked state.
    async fn mask_state(
        &self,
        c: usize,
        session: &SecureSession,
        envelopes: Vec<ShareEnvelope>,
        groups: &RecordBatch,
    ) -> Result<RecordBatch, String> {
        let request = MaskRequest {
            session: session.clone(),
            envelopes,
            groups: groups.clone(),
        };
        let state = self.sites[c]
            .encode_masked(&self.req(c), &request)
            .await
            .map_err(|e| format!("site {c} refused to mask: {e}"))?;
        Ok(state.batch().clone())
    }

    async fn confirm(
        &self,
        c: usize,
        session: &SecureSession,
        list: &[u32],
    ) -> Result<ListSignature, String> {
        let request = ConfirmRequest {
            session: session.clone(),
            survivors: list.to_vec(),
        };
        self.sites[c]
            .secure_confirm(&self.req(c), &request)
            .await
            .map_err(|e| format!("site {c} refused to sign: {e}"))
    }

    async fn unmask(
        &self,
        c: usize,
        session: &SecureSession,
        list: &[u32],
        signatures: Vec<ListSignature>,
    ) -> Result<Vec<Revealed>, String> {
        let request = UnmaskRequest {
            session: session.clone(),
            survivors: list.to_vec(),
            signatures,
        };
        self.sites[c]
            .secure_unmask(&self.req(c), &request)
            .await
            .map_err(|e| format!("site {c} refused to unmask: {e}"))
    }
}

fn first_word(batch: &RecordBatch) -> u64 {
    let column = (0..batch.num_columns())
        .find(|&i| batch.column(i).data_type() == &DataType::UInt64)
        .expect("a secure state column");
    batch.column(column).as_primitive::<UInt64Type>().value(0)
}

fn session_of(n: usize) -> SecureSession {
    SecureSession::fresh((0..n).map(|c| format!("site{c}")).collect())
        .with_threshold(fedsql::protocol::secure::peered_threshold(n))
}

/// A round run honestly over the sites `taking_part` of a session of all
/// of `h`'s sites (the others are never set up: "dropped out at setup"),
/// each sent its own encoder (`h.encoders`): every envelope delivered,
/// the one list of those sites signed by all and every signature shown to
/// all; the coordinator then removes every survivor's self mask. Returns
/// the unmasked first word (a `secure_sum`'s sum) over `taking_part`.
async fn round_over(h: &Hostile, taking_part: &[usize]) -> Result<u64, String> {
    round_showing(h, taking_part, &|_| taking_part.to_vec()).await
}

/// As [`round_over`], with site `c` shown at the unmasking only the
/// signatures of the sites `shown(c)`.
async fn round_showing(
    h: &Hostile,
    taking_part: &[usize],
    shown: &dyn Fn(usize) -> Vec<usize>,
) -> Result<u64, String> {
    let n = h.sites.len();
    let session = session_of(n);
    let t = session.threshold;
    let mut keys: Vec<Option<ParticipantKeys>> = vec![None; n];
    let mut group_keys = Vec::new();
    for &c in taking_part {
        let (k, g) = h.setup(c, &session).await?;
        keys[c] = Some(k);
        group_keys.push(g);
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let mut envelopes = Vec::new();
    for &c in taking_part {
        envelopes.extend(h.share(c, &session, keys.clone()).await?);
    }
    let mut total = 0u64;
    for &c in taking_part {
        let mine: Vec<ShareEnvelope> = envelopes
            .iter()
            .filter(|e| e.to as usize == c)
            .cloned()
            .collect();
        total = total.wrapping_add(h.mask(c, &session, mine, &groups).await?);
    }
    let list: Vec<u32> = taking_part.iter().map(|&c| c as u32).collect();
    let mut signatures = Vec::new();
    for &c in taking_part {
        signatures.push(h.confirm(c, &session, &list).await?);
    }
    let mut revealed = Vec::new();
    for &c in taking_part {
        if shown(c).is_empty() {
            continue;
        }
        let mine = taking_part
            .iter()
            .zip(&signatures)
            .filter(|(s, _)| shown(c).contains(s))
            .map(|(_, signature)| *signature)
            .collect();
        revealed.extend(h.unmask(c, &session, &list, mine).await?);
    }
    for &c in taking_part {
        let shares: Vec<shamir::Share> = revealed
            .iter()
            .filter(|r| r.of as usize == c && r.kind == RevealedKind::SelfSeed)
            .map(|r| r.share)
            .collect();
        let seed = rebuild(&shares, t, "a self seed");
        assert_eq!(
            masks::self_commitment(&session.id, &seed),
            keys[c].unwrap().self_commitment
        );
        let mut word = [total];
        masks::apply_self(&mut word, &seed, &session.id, false);
        total = word[0];
    }
    Ok(total)
}

/// The same over every site.
async fn honest_total(h: &Hostile) -> Result<u64, String> {
    let all: Vec<usize> = (0..h.sites.len()).collect();
    round_over(h, &all).await
}

#[tokio::test]
async fn holds_control_the_harness_unmasks_the_total_of_all_sites() {
    let h = Hostile::new(5, SUM_SQL).await;
    let total = honest_total(&h).await.unwrap();
    assert_eq!(total, (0..5).map(site_sum).sum::<u64>());
}

// ---------------------------------------------------------------------
// 1. Kept rows of a fit: the data a secure encoder reads is not bound by
//    its digest.
// ---------------------------------------------------------------------

/// The victim's query keeps every row: `CAST(x + g AS VARCHAR) = 'q' OR
/// CAST(x AS VARCHAR) <> 'r'`.
const VICTIM_SQL: &str = "SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE CAST(x + g AS VARCHAR) = 'q' OR CAST(x AS VARCHAR) <> 'r'";

/// The fourth review's twin of the victim's encoder: one comparison with a
/// string that spells out, as the plan prints, the rest of the victim's
/// predicate. It keeps no row and prints as the victim's plan (its digest
/// differs since the fourth review's fix; its *input key* does not).
async fn quiet_twin(h: &Hostile, victim: &Encoder) -> Encoder {
    let text = victim.plan().display_indent_schema().to_string();
    let start = text.find("q\")").expect("the victim's literal 'q'");
    let end = start + text[start..].find("r\")").expect("the literal 'r'") + 1;
    let spelled = text[start..end].replace('\'', "''");
    h.plan_encoder(&format!(
        "SELECT secure_sum(x, 0, 1000) AS s FROM t WHERE CAST(x + g AS VARCHAR) = '{spelled}'"
    ))
    .await
}

/// The fit scope the hostile coordinator names (any 64-bit number).
const SCOPE: u64 = 0x5eed;

/// HOLDS since the fix (was BREAK, severity critical). Five honest peered sites under a worker's
/// default disclosure policy; the coordinator learns site 0's exact
/// secure_sum. Every site runs the *same* encoder in the secure round (the
/// victim's, which keeps every row), so every view and digest agree, every
/// site signs and reveals — yet sites 1–4 aggregate no rows.
///
/// Mechanism: an encoder may carry a fit scope (`Encoder::in_fit`, the
/// `fit_scope` field of the wire's `EncodeRequest`, chosen freely by the
/// coordinator). A site then reads the input of its partial aggregate
/// once and keeps it (`KeptRows::partial_over_kept`), keyed by the scope
/// and `Encoder::input_key()` — the *display text* of the plan below the
/// aggregate, which is not injective (a string literal prints unescaped:
/// the fourth review's twin). The coordinator first sends sites 1–4 the
/// twin (a filter that keeps nothing) under scope F — a plain `encode`
/// suffices: the rows are kept while the plan is made, before the site
/// refuses a secure aggregate in a plain state. Then it runs the secure
/// round with the victim's encoder under scope F at all five sites: sites
/// 1–4 find rows kept under F with the same key (none) and aggregate
/// those; site 0 reads its own. `encoder_digest` hashes the plan, not the
/// rows the site actually aggregated, nor the scope.
///
/// Where to fix: a site should not use kept rows in a secure round (refuse
/// a fit scope in `secure_setup`, or plan a secure encoder without
/// `fit_scope`); and the kept-rows key should be injective (the digest of
/// the input plan, e.g. `encoder_digest` of the aggregate's input, not
/// its display), so that rows kept for one plan never serve another.
///
/// FIXED: a site keeps no rows for an encoder with a secure aggregate
/// (nor uses kept ones), and keys kept rows by the digest of the input
/// plan. The priming keeps nothing, and the round gives the total.
#[tokio::test]
async fn holds_rows_kept_for_a_fit_never_feed_a_secure_round_printed_alike_input() {
    let mut h = Hostile::new(5, VICTIM_SQL).await;
    let victim = h.encoders[0].clone().in_fit(Some(SCOPE));
    let quiet = quiet_twin(&h, &victim).await.in_fit(Some(SCOPE));
    assert_ne!(quiet.plan(), victim.plan(), "two different plans");
    assert_ne!(
        encoder_digest(quiet.plan()).unwrap(),
        encoder_digest(victim.plan()).unwrap(),
        "the digests differ (the fourth review's fix): the twin is not sent in the round"
    );
    // Priming: sites 1-4 are asked for a plain state of the twin under
    // scope F. Each refuses (a secure aggregate), and keeps no rows.
    for c in 1..5 {
        let err = h.sites[c]
            .encode(&SiteRequest::new(&quiet, &h.analyst))
            .await
            .expect_err("a plain state of a secure aggregate");
        assert!(err.to_string().contains("secure"), "{err}");
        assert_eq!(h.sites[c].kept_fits(), 0, "site {c} kept the twin's rows");
    }
    // The secure round: the victim's encoder, scope F, at every site.
    h.encoders = vec![victim; 5];
    let digests: Vec<[u8; 32]> = h
        .encoders
        .iter()
        .map(|e| encoder_digest(e.plan()).unwrap())
        .collect();
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "one digest");
    let learned = honest_total(&h)
        .await
        .expect("every site signs and reveals");
    assert_eq!(learned, (0..5).map(site_sum).sum::<u64>(), "the total");
}

/// Control: without the priming, the same round under scope F unmasks the
/// total of all five sites (the sites read their own rows).
#[tokio::test]
async fn holds_control_a_round_in_a_fit_scope_without_priming_gives_the_total() {
    let mut h = Hostile::new(5, VICTIM_SQL).await;
    let victim = h.encoders[0].clone().in_fit(Some(SCOPE));
    h.encoders = vec![victim; 5];
    let total = honest_total(&h).await.unwrap();
    assert_eq!(total, (0..5).map(site_sum).sum::<u64>());
}

/// The same priming without any string trick: the kept-rows key is the
/// input's display text, which names a shared table but shows none of its
/// rows. The victim's query joins `t` with the shared `lookup` on
/// `t.g = lookup.v` (v = 0: every row matches); the twin sent to sites
/// 1–4 first is the same query with `lookup` holding v = 1 (nothing
/// matches). Same text, same key, different rows. (So escaping string
/// literals in the display would not fix the kept-rows key.) FIXED, as
/// above: the priming keeps nothing, and the round gives the total.
#[tokio::test]
async fn holds_rows_kept_for_a_fit_never_feed_a_secure_round_other_lookup_rows() {
    let sql = "SELECT secure_sum(t.x, 0, 1000) AS s FROM t JOIN lookup ON t.g = lookup.v";
    let mut h = Hostile::new(5, sql).await;
    let victim = h.encoders[0].clone().in_fit(Some(SCOPE));
    // The twin: `lookup` with v = 1.
    let lookup_schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
    ]));
    let other = RecordBatch::try_new(
        Arc::clone(&lookup_schema),
        vec![
            Arc::new(Int64Array::from(vec![None::<i64>])),
            Arc::new(Int64Array::from(vec![1i64])),
        ],
    )
    .unwrap();
    h.ctx.session().deregister_table("lookup").unwrap();
    h.ctx
        .session()
        .register_table(
            "lookup",
            Arc::new(InlineTable::new(lookup_schema, vec![other])),
        )
        .unwrap();
    let quiet = h.plan_encoder(sql).await.in_fit(Some(SCOPE));
    assert_ne!(
        encoder_digest(quiet.plan()).unwrap(),
        encoder_digest(victim.plan()).unwrap(),
        "the digests differ (the inline rows are hashed)"
    );
    for c in 1..5 {
        let _ = h.sites[c]
            .encode(&SiteRequest::new(&quiet, &h.analyst))
            .await
            .expect_err("a plain state of a secure aggregate");
        assert_eq!(h.sites[c].kept_fits(), 0, "site {c} kept the twin's rows");
    }
    h.encoders = vec![victim; 5];
    let learned = honest_total(&h)
        .await
        .expect("every site signs and reveals");
    assert_eq!(learned, (0..5).map(site_sum).sum::<u64>(), "the total");
}

// ---------------------------------------------------------------------
// 2. A join's null equality is not in the digest.
// ---------------------------------------------------------------------

/// The victim's query: a join of `t` (every row has g = 0) with a shared
/// side that is itself a join of the shared `lookup` table (one row, k
/// NULL, v 0) with itself on `k IS NOT DISTINCT FROM k`: one row, v = 0,
/// so every row of `t` matches once (no amplification; the shared side's
/// key is unique). A site refuses `IS NOT DISTINCT FROM` on a join of its
/// rows (`gate::rows`), not on a join of two shared tables.
const JOIN_VICTIM_SQL: &str = "SELECT secure_sum(t.x, 0, 1000) AS s FROM t JOIN (SELECT a.v FROM lookup a JOIN lookup b ON a.k IS NOT DISTINCT FROM b.k) m ON t.g = m.v";

/// The others': the same with `=` in the shared join, under which NULL
/// matches nothing: an empty shared side, no row of `t` matches.
const JOIN_QUIET_SQL: &str = "SELECT secure_sum(t.x, 0, 1000) AS s FROM t JOIN (SELECT a.v FROM lookup a JOIN lookup b ON a.k = b.k) m ON t.g = m.v";

fn null_equalities(plan: &LogicalPlan) -> Vec<NullEquality> {
    let mut found = Vec::new();
    plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            found.push(join.null_equality);
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })
    .unwrap();
    found
}

/// HOLDS since the fix (was BREAK, severity critical; the fourth review's fix — an injective
/// digest — bypassed another way). Five honest peered sites under a
/// worker's default disclosure policy; the coordinator learns site 0's
/// exact secure_sum in one round with one list signed by all.
///
/// Mechanism: `encoder_digest` hashes each node's printed line, its
/// fields' names and types, its expressions' literals and its scans'
/// names and inline rows. A `Join`'s `null_equality` is none of these:
/// DataFusion prints `Inner Join: <l> = <r>` for both
/// `NullEqualsNull` (`IS NOT DISTINCT FROM`) and `NullEqualsNothing`
/// (`=`), and it is a plain field of the node, not an expression. A site
/// refuses `NullEqualsNull` on a join of its own rows (`gate::rows`), but
/// not on a join inside the shared side. The victim (site 0) is sent a
/// join of its rows with a shared side that is a null-safe self-join of a
/// one-row lookup whose key is NULL (one row: every row of the victim
/// matches it once). Sites 1–4 are sent the same with `=` in the shared
/// join: an empty shared side, so they take part with zeros. Both plans
/// print alike and have one digest, so every view agrees.
/// `null_equality` travels over the wire (datafusion-proto's `JoinNode`),
/// so a worker would run each as sent.
///
/// Where to fix: the digest must cover every field of every node, not a
/// chosen list — e.g. hash the encoder's datafusion-proto bytes (with the
/// codec's inline rows), which the worker decodes anyway; or at least add
/// `Join::null_equality` (and audit every other node for fields not
/// printed: `null_aware`, scan `fetch`/filters, `Limit`, `Distinct::On`,
/// aggregate `distinct`/`filter`/`order_by`/`null_treatment`).
///
/// FIXED: the digest adds what a join (its null equality, constraint and
/// null awareness) and an unnest (its options) do that their lines do not
/// print, so the two views differ. And since every listed survivor must
/// sign over the same view, the others refuse also when the coordinator
/// shows them only their own four signatures (t = 3 of them): with t
/// enough, they revealed the victim's self seed.
#[tokio::test]
async fn holds_a_joins_null_equality_is_in_the_digest_and_every_survivor_must_sign() {
    let mut h = Hostile::new(5, JOIN_VICTIM_SQL).await;
    let quiet = h.plan_encoder(JOIN_QUIET_SQL).await;
    let victim = h.encoders[0].clone();
    assert!(
        null_equalities(victim.plan()).contains(&NullEquality::NullEqualsNull),
        "{}",
        victim.plan().display_indent()
    );
    assert!(!null_equalities(quiet.plan()).contains(&NullEquality::NullEqualsNull));
    assert_ne!(quiet.plan(), victim.plan(), "two different plans");
    assert_eq!(
        quiet.plan().display_indent_schema().to_string(),
        victim.plan().display_indent_schema().to_string(),
        "the same text"
    );
    assert_ne!(
        encoder_digest(quiet.plan()).unwrap(),
        encoder_digest(victim.plan()).unwrap(),
        "two digests"
    );
    for c in 1..5 {
        h.encoders[c] = quiet.clone();
    }
    let all: Vec<usize> = (0..5).collect();
    // (Under the policy a refusal says no more than that.)
    let err = honest_total(&h).await.expect_err("the views differ");
    assert!(err.contains("a site could not evaluate the query"), "{err}");
    // Each shown only the signatures over its own view.
    // (The victim is not asked: it would refuse, seeing no quiet signature
    // verify over its view.)
    let err = round_showing(&h, &all, &|c| {
        if c == 0 { vec![] } else { vec![1, 2, 3, 4] }
    })
    .await
    .expect_err("a listed site did not sign over this view");
    assert!(err.contains("a site could not evaluate the query"), "{err}");
}

/// Control: the victim's join sent to every site gives the total of all
/// five (each row matches once: no amplification).
#[tokio::test]
async fn holds_control_the_null_safe_join_at_every_site_gives_the_total() {
    let h = Hostile::new(5, JOIN_VICTIM_SQL).await;
    let total = honest_total(&h).await.unwrap();
    assert_eq!(total, (0..5).map(site_sum).sum::<u64>());
}

// ---------------------------------------------------------------------
// 3. Two sessions over different participants.
// ---------------------------------------------------------------------

/// BREAK (severity: high). Five honest peered sites under a worker's
/// default disclosure policy (min_secure_clients = 3); the coordinator
/// learns site 0's exact secure_sum from two honest-looking rounds of the
/// same query: one over all five sites, one in which site 0 "dropped out
/// at setup" (it is never asked; its place has no keys). Every check of
/// every site passes in both: four participants ≥ t = 3, a strict
/// majority of those that sent keys, each peer-signed, each site's floor
/// met. The difference of the two totals is site 0's state.
///
/// The protocol's promise ("does not learn any single site's secure
/// state, as long as at least one other participant is honest") holds per
/// session only. The same data is aggregated again and again (unlike the
/// fresh model updates of Bonawitz et al.'s setting), and the coordinator
/// alone decides who "dropped out". With n sites and a floor m, every
/// subset of ≥ max(m, t) sites gives its sum, so each site's value.
///
/// Where to fix: nothing in one session can tell; a site would need to
/// refuse to take part in two sessions of the same encoder digest (and
/// table data) with different participant sets, or a site option
/// requiring all its listed peers to take part (no dropout tolerance).
/// At least the security page should state it as a limit beside the
/// analyst's filters: without `secure_dp_…`, a secure_sum protects a
/// site's value from a coordinator for *one* query only.
#[tokio::test]
async fn limit_two_sessions_with_one_site_left_out_give_its_exact_secure_sum() {
    let h = Hostile::new(5, SUM_SQL).await;
    let all = round_over(&h, &[0, 1, 2, 3, 4]).await.unwrap();
    let without_0 = round_over(&h, &[1, 2, 3, 4]).await.unwrap();
    let learned = all.wrapping_sub(without_0);
    assert_eq!(learned, site_sum(0), "site 0's exact secure_sum");
}

// ---------------------------------------------------------------------
// 4. A sparse round's graph was drawn from a session id the coordinator
//    picks; now by the sites' coin toss.
// ---------------------------------------------------------------------

/// The attack the fifth review found, as far as it gets now: the
/// coordinator seats `colluding` sites where the graph it can compute
/// before the toss (from the session id alone) puts the victim's (site
/// 0's) neighbours, makes their keys, runs every honest site's setup and
/// the coin toss (each honest site reveals its nonce once every
/// commitment is fixed; the colluders' nonces are the coordinator's),
/// then step 2 at the victim. Returns how many of the victim's sealed
/// envelopes went to colluders, and its neighbourhood's threshold.
async fn seat_colluders_then_toss(h: &Hostile, colluding_count: usize) -> (usize, usize) {
    let n = h.sites.len();
    let session = crate::attack54f::majority_session_of(n);
    assert!(graph::session_is_sparse(&session));
    // What the session id alone would have drawn (the old graph).
    let guessed = graph::neighbours(&session, &[0; 32]).swap_remove(0);
    let colluding: Vec<usize> = guessed[..colluding_count].to_vec();
    let mut keys: Vec<Option<ParticipantKeys>> = vec![None; n];
    let mut nonces: Vec<Option<[u8; 32]>> = vec![None; n];
    for c in 0..n {
        if colluding.contains(&c) {
            let made = crate::attack54i::made_colluder(c, &session, &h.identities[c]);
            keys[c] = Some(made.keys);
            nonces[c] = Some(made.nonce);
        } else {
            keys[c] = Some(h.setup(c, &session).await.unwrap().0);
        }
    }
    let reveal = ShareRequest {
        session: session.clone(),
        keys: keys.clone(),
        nonces: Vec::new(),
    };
    for c in (0..n).filter(|c| !colluding.contains(c)) {
        nonces[c] = Some(h.sites[c].secure_reveal(&h.req(c), &reveal).await.unwrap());
    }
    // A colluder "revealing" a nonce it did not commit to ends the
    // session at every honest site (tested below); these are committed.
    crate::support::remember_nonces(&session, nonces);
    let near = graph::neighbours(&session, &crate::support::graph_seed(&session)).swap_remove(0);
    let share_t = graph::share_threshold(&session, near.len() + 1);
    let envelopes = h.share(0, &session, keys).await.unwrap();
    let mut to: Vec<usize> = envelopes.iter().map(|e| e.to as usize).collect();
    to.sort_unstable();
    assert_eq!(to, near, "the victim shares with the toss's neighbours");
    let to_colluders = to.iter().filter(|j| colluding.contains(j)).count();
    eprintln!(
        "{to_colluders} of the victim's {} envelopes to colluders (threshold {share_t})",
        to.len()
    );
    (to_colluders, share_t)
}

/// Was GAP (high; the fifth review): a sparse round's ring was drawn from
/// the session id the coordinator picks, over places it assigns, so 11
/// colluders of 101 seated next to the victim held the threshold of its
/// shares (mask key and self seed alike) — its exact secure_sum; and a
/// coordinator could grind session ids offline for any 20 colluders.
/// HOLDS now: the graph is the sites' coin toss (each commits to a nonce
/// in its signed keys, reveals it once every commitment is fixed, and
/// the seed hashes them all), so the colluders land where the toss puts
/// them: about 2 of the victim's 20 neighbours, far below its threshold
/// of 11, and no session id can be ground for it. Sites without peers
/// (t = 51 of 101): since the eleventh review a round at the threshold of
/// peered sites (more than two thirds) is full at any size, so the coin
/// toss draws only the graphs of sites that trust the coordinator to
/// follow the protocol.
#[tokio::test]
async fn holds_a_sparse_rounds_colluders_seated_before_the_coin_toss_hold_too_few_of_the_victims_shares()
 {
    let h = Hostile::build_with_peers(101, SUM_SQL, None, None, false).await;
    let (to_colluders, share_t) = seat_colluders_then_toss(&h, 11).await;
    assert_eq!(share_t, 11);
    assert!(to_colluders < share_t, "{to_colluders} of {share_t}");
}

/// Was GAP (high, the DP promise): the same seating against
/// `secure_dp_count` gave the victim's counts with 1/51 of the noise.
/// HOLDS now, as above: the colluders seated before the toss hold too
/// few of the victim's shares to take its masks off.
#[tokio::test]
async fn holds_a_sparse_rounds_colluders_seated_before_the_coin_toss_get_no_dp_count() {
    let mut policy = DpPolicy::default();
    let domain: Vec<String> = (0..50).map(|g| g.to_string()).collect();
    policy.set("dp_domain.g", &domain.join(",")).unwrap();
    let h = Hostile::build_with_peers(
        101,
        "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g",
        Some(&policy),
        None,
        false,
    )
    .await;
    let (to_colluders, share_t) = seat_colluders_then_toss(&h, 11).await;
    assert!(to_colluders < share_t, "{to_colluders} of {share_t}");
}

/// HOLDS. The coin toss itself: a participant whose revealed nonce is not
/// the one it committed to, a nonce missing, keys changed between the
/// reveal and step 2, a second reveal: every honest site refuses, and the
/// session is over there.
#[tokio::test]
async fn holds_the_coin_toss_refuses_a_wrong_or_missing_nonce_changed_keys_and_a_second_reveal() {
    // Sites without peers: a peered round is full at any size.
    let n = 101;
    // No disclosure policy, so that the refusals' reasons are shown.
    let h = Hostile::build_with_peers(n, SUM_SQL, None, None, false).await;
    let session = crate::attack54f::majority_session_of(n);
    let mut keys = Vec::new();
    for c in 0..n {
        keys.push(Some(h.setup(c, &session).await.unwrap().0));
    }
    let reveal = ShareRequest {
        session: session.clone(),
        keys: keys.clone(),
        nonces: Vec::new(),
    };
    let mut nonces = Vec::new();
    for c in 0..n {
        nonces.push(Some(
            h.sites[c].secure_reveal(&h.req(c), &reveal).await.unwrap(),
        ));
    }
    // A second reveal: a step out of order ends the session at site 0.
    let err = h.sites[0]
        .secure_reveal(&h.req(0), &reveal)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("a step out of order"), "{err}");
    let share = |c: usize, keys: Vec<Option<ParticipantKeys>>, nonces: Vec<Option<[u8; 32]>>| {
        let request = ShareRequest {
            session: session.clone(),
            keys,
            nonces,
        };
        let site = Arc::clone(&h.sites[c]);
        let req = h.req(c);
        async move {
            site.secure_share(&req, &request)
                .await
                .unwrap_err()
                .to_string()
        }
    };
    let mut wrong = nonces.clone();
    wrong[5] = Some(rand::random());
    let err = share(1, keys.clone(), wrong).await;
    assert!(
        err.contains("participant 5's graph nonce does not match its commitment"),
        "{err}"
    );
    let mut missing = nonces.clone();
    missing[6] = None;
    let err = share(2, keys.clone(), missing).await;
    assert!(
        err.contains("participant 6 sent keys but its graph nonce was not relayed"),
        "{err}"
    );
    let mut fewer = keys.clone();
    fewer[7] = None;
    let mut fewer_nonces = nonces.clone();
    fewer_nonces[7] = None;
    let err = share(3, fewer, fewer_nonces).await;
    assert!(
        err.contains("differ from those relayed when this site revealed"),
        "{err}"
    );
    // No nonces at all in a sparse round.
    let err = share(4, keys.clone(), Vec::new()).await;
    assert!(
        err.contains("graph nonces relayed for 101 clients"),
        "{err}"
    );
    // Each refusal ended that site's session.
    let err = share(1, keys.clone(), nonces.clone()).await;
    assert!(err.contains("no secure session"), "{err}");
    // A full round has no toss (five peered sites of a federation of
    // their own).
    let h = Hostile::build(5, SUM_SQL, None, None).await;
    let small = session_of(5);
    let mut small_keys = Vec::new();
    for c in 0..5 {
        small_keys.push(Some(h.setup(c, &small).await.unwrap().0));
    }
    let err = h.sites[0]
        .secure_reveal(
            &h.req(0),
            &ShareRequest {
                session: small.clone(),
                keys: small_keys,
                nonces: Vec::new(),
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("only in a sparse round"), "{err}");
}

// ---------------------------------------------------------------------
// 5. A sparse round padded with participants no peer signed.
// ---------------------------------------------------------------------

/// HOLDS, now at step 2. 101 places, peers on every real site (t = 68;
/// since the eleventh review a peered round is full at any size).
/// The fifth review seated 21 honest sites on one arc of the ring (drawn
/// from the session id then), left the 10 places either side without
/// keys and filled the 60 beyond with keys of the coordinator's making
/// that no peer signed: steps 2–4 passed (the peers check of step 2
/// looks at a site's neighbours only), and only step 5's check that every
/// signer's keys are peer-signed refused. Now the places are fixed
/// before the coin toss draws the ring, and a peered round is full: the
/// 60 inventions are every honest site's neighbours, and step 2's peers
/// check refuses there.
#[tokio::test]
async fn holds_a_sparse_round_padded_with_unsigned_participants_is_refused_at_step_2() {
    let n = 101;
    // No disclosure policy, so that the refusal's reason is shown.
    let h = Hostile::build(n, SUM_SQL, None, None).await;
    let session = session_of(n);
    let honest: Vec<usize> = (0..41).collect();
    let mut keys: Vec<Option<ParticipantKeys>> = vec![None; n];
    let mut nonces: Vec<Option<[u8; 32]>> = vec![None; n];
    for &c in &honest {
        keys[c] = Some(h.setup(c, &session).await.unwrap().0);
    }
    for c in 41..n {
        let nonce: [u8; 32] = rand::random();
        keys[c] = Some(ParticipantKeys {
            mask_key: PublicKey::from(&StaticSecret::from(rand::random::<[u8; 32]>())).to_bytes(),
            cipher_key: PublicKey::from(&StaticSecret::from(rand::random::<[u8; 32]>())).to_bytes(),
            self_commitment: rand::random(),
            list_key: consistency::list_public_key(&rand::random()),
            graph_commitment: graph::nonce_commitment(&session.id, &nonce),
            signed: None,
        });
        nonces[c] = Some(nonce);
    }
    // A full round: no coin toss; every site is every other's neighbour.
    assert!(!graph::session_is_sparse(&session));
    drop(nonces);
    let nb = graph::neighbours(&session, &crate::support::graph_seed(&session));
    let mut refused = 0;
    for &c in &honest {
        let invented_near = nb[c].iter().any(|&j| j >= 41);
        match h.share(c, &session, keys.clone()).await {
            Err(err) => {
                assert!(invented_near, "site {c}: {err}");
                assert!(
                    err.contains("not signed by one of its listed peers"),
                    "{err}"
                );
                refused += 1;
            }
            Ok(_) => assert!(!invented_near, "site {c} shared beside an invention"),
        }
    }
    eprintln!("{refused} of 41 honest sites refused at step 2");
    assert_eq!(refused, 41);
}

// ---------------------------------------------------------------------
// 6. Two tables of one worker in one session.
// ---------------------------------------------------------------------

/// HOLDS. A worker serving two tables has one identity and one client
/// (with its own secrets) per table. The coordinator seats both clients
/// of the victim's worker in one session (site 0 reads the victim's
/// table; place 4 is the same worker's client of another table, with the
/// same identity), hoping to stand in for an independent participant.
/// Every site refuses at step 2: the victim sees a participant signed by
/// its own identity, the others one identity signing two participants.
#[tokio::test]
async fn holds_two_clients_of_one_worker_cannot_both_take_part_in_a_session() {
    let mut h = Hostile::new(5, SUM_SQL).await;
    let listed: Arc<[[u8; 32]]> = h.identities.iter().map(|i| i.public_key()).collect();
    let twin = LocalClient::from_batches(
        "site0-other-table",
        "memory:site0-other-table",
        schema(),
        vec![site_rows(7)],
        h.ctx.site_engine(),
    )
    .unwrap()
    .with_identity(Some(Arc::clone(&h.identities[0])), listed)
    .with_policy(Some(DisclosurePolicy::default()))
    .served_remotely(false);
    h.sites[4] = Arc::new(twin);
    let session = session_of(5);
    let mut keys = Vec::new();
    for c in 0..5 {
        keys.push(Some(h.setup(c, &session).await.unwrap().0));
    }
    for c in 0..5 {
        let err = h
            .share(c, &session, keys.clone())
            .await
            .expect_err("one identity at two places");
        let want = if c == 0 || c == 4 {
            "not signed by one of its listed peers"
        } else {
            "one peer's identity signs two"
        };
        assert!(err.contains(want), "site {c}: {err}");
    }
}
