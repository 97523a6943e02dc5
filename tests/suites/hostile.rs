//! The hostile coordinator's harness of the outside attacks on secure
//! aggregation (`attack54b`, `attack54c`, `attack54d`): honest in-process
//! sites driven through the `Site` trait with hand-made messages.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use fedsql::FedContext;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::encoder::Encoder;
use fedsql::protocol::secure::consistency::{ConfirmRequest, ListSignature};
use fedsql::protocol::secure::{
    MaskRequest, ParticipantKeys, Revealed, SecureSession, ShareEnvelope, ShareRequest,
    UnmaskRequest, graph,
};
use fedsql::protocol::site::{Analyst, Site, SiteRequest};
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::{DpPolicy, DpSite};
use fedsql::site::release::dp_budget::Ledger;
use fedsql::site::release::identity::SiteIdentity;
use fedsql::site::release::policy::DisclosurePolicy;

pub(crate) const SUM_SQL: &str = "SELECT secure_sum(x, 0, 1000) AS s FROM t";

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("g", DataType::Int64, false),
        Field::new("x", DataType::Int64, false),
    ]))
}

/// Site `c`'s rows: one group, 5 to 8 rows (enough for a worker's default
/// disclosure policy, k = 5), values that differ per site.
pub(crate) fn site_rows(c: usize) -> RecordBatch {
    let n = c % 4 + 5;
    let g: Vec<i64> = vec![0; n];
    let x: Vec<i64> = (0..n)
        .map(|i| ((c * 53 + i * 17) % 999 + 1) as i64)
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(g)), Arc::new(Int64Array::from(x))],
    )
    .unwrap()
}

/// A hostile coordinator: `n` honest in-process sites (each, with
/// `peers`, holding an Ed25519 identity and listing every site's identity
/// as a peer), the round's encoder as the real coordinator plans it, and
/// hand-made messages.
pub(crate) struct Hostile {
    pub(crate) ctx: FedContext,
    pub(crate) sites: Vec<Arc<LocalClient>>,
    /// The encoder each site is sent (the round's, unless the coordinator
    /// sends some sites another).
    pub(crate) encoders: Vec<Encoder>,
    pub(crate) analyst: Analyst,
}

impl Hostile {
    pub(crate) async fn new(n: usize, dp: Option<&DpPolicy>, sql: &str, peers: bool) -> Self {
        Self::with_policy(n, dp, sql, peers, None).await
    }

    /// The same, each site also under `policy` and served as a worker
    /// serves it (so it takes part in secure rounds only with its peers).
    pub(crate) async fn with_policy(
        n: usize,
        dp: Option<&DpPolicy>,
        sql: &str,
        peers: bool,
        policy: Option<DisclosurePolicy>,
    ) -> Self {
        Self::with_rows(n, dp, sql, peers, policy, site_rows).await
    }

    /// The same, site `c` holding `rows(c)`.
    pub(crate) async fn with_rows(
        n: usize,
        dp: Option<&DpPolicy>,
        sql: &str,
        peers: bool,
        policy: Option<DisclosurePolicy>,
        rows: fn(usize) -> RecordBatch,
    ) -> Self {
        let ctx = FedContext::new();
        let identities: Vec<Arc<SiteIdentity>> = if peers {
            (0..n)
                .map(|_| Arc::new(SiteIdentity::generate().unwrap().0))
                .collect()
        } else {
            Vec::new()
        };
        let listed: Arc<[[u8; 32]]> = identities.iter().map(|i| i.public_key()).collect();
        let sites: Vec<Arc<LocalClient>> = (0..n)
            .map(|c| {
                let name = format!("site{c}");
                let mut site = LocalClient::from_batches(
                    &name,
                    &format!("memory:{name}"),
                    schema(),
                    vec![rows(c)],
                    ctx.site_engine(),
                )
                .unwrap();
                if peers {
                    site = site.with_identity(Some(Arc::clone(&identities[c])), listed.clone());
                }
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
        let state = ctx.session().state();
        let plan = state.create_logical_plan(sql).await.unwrap();
        let plan = state.optimize(&plan).unwrap();
        let cut = fedsql::coordinator::split::lowest_cut(&plan).unwrap();
        let round = fedsql::coordinator::split::plan_round(&state, &cut)
            .await
            .unwrap();
        Self {
            ctx,
            encoders: vec![round.encoder.clone(); sites.len()],
            sites,
            analyst: Analyst::session(),
        }
    }

    /// The encoder the coordinator would plan for `sql` over the same table.
    pub(crate) async fn plan_encoder(&self, sql: &str) -> Encoder {
        let state = self.ctx.session().state();
        let plan = state.create_logical_plan(sql).await.unwrap();
        let plan = state.optimize(&plan).unwrap();
        let cut = fedsql::coordinator::split::lowest_cut(&plan).unwrap();
        fedsql::coordinator::split::plan_round(&state, &cut)
            .await
            .unwrap()
            .encoder
    }

    /// The request to site `c`, with the encoder it is sent.
    pub(crate) fn req(&self, c: usize) -> SiteRequest<'_> {
        SiteRequest::new(&self.encoders[c], &self.analyst)
    }

    pub(crate) async fn setup(
        &self,
        c: usize,
        session: &SecureSession,
    ) -> (ParticipantKeys, RecordBatch) {
        let s = self.sites[c]
            .secure_setup(&self.req(c), session)
            .await
            .unwrap_or_else(|e| panic!("site {c} refused the setup: {e}"));
        (s.keys, s.group_keys)
    }

    pub(crate) async fn share(
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

    /// Step 3 at site `c`; its masked secure words (the first UInt64
    /// column of its first group).
    pub(crate) async fn mask(
        &self,
        c: usize,
        session: &SecureSession,
        envelopes: Vec<ShareEnvelope>,
        groups: &RecordBatch,
    ) -> Result<u64, String> {
        let request = MaskRequest {
            session: session.clone(),
            envelopes,
            groups: groups.clone(),
        };
        let state = self.sites[c]
            .encode_masked(&self.req(c), &request)
            .await
            .map_err(|e| format!("site {c} refused to mask: {e}"))?;
        Ok(first_word(state.batch()))
    }

    pub(crate) async fn confirm(
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

    pub(crate) async fn unmask(
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

/// The first `k` rows of the first UInt64 (secure) column: the first `k`
/// words of the state's mask.
pub(crate) fn first_words(batch: &RecordBatch, k: usize) -> Vec<u64> {
    let column = (0..batch.num_columns())
        .find(|&i| batch.column(i).data_type() == &DataType::UInt64)
        .expect("a secure state column");
    let values = batch.column(column).as_primitive::<UInt64Type>();
    (0..k).map(|r| values.value(r)).collect()
}

pub(crate) fn first_word(batch: &RecordBatch) -> u64 {
    let column = (0..batch.num_columns())
        .find(|&i| batch.column(i).data_type() == &DataType::UInt64)
        .expect("a secure state column");
    batch.column(column).as_primitive::<UInt64Type>().value(0)
}

pub(crate) fn session_of(n: usize) -> SecureSession {
    SecureSession::fresh((0..n).map(|c| format!("site{c}")).collect())
        .with_threshold(fedsql::protocol::secure::peered_threshold(n))
}

/// The ring order of a sparse round, recomputed as `graph::neighbours`
/// draws it from the graph's seed (checked against it below): who is next
/// to whom the coordinator learns once the sites revealed their nonces —
/// after every site's keys are fixed, no longer from the session id it
/// picks.
pub(crate) fn ring_order(session: &SecureSession) -> Vec<usize> {
    let n = session.clients.len();
    let seed = crate::support::graph_seed(session);
    let order = graph::ring_order(n, &seed);
    let half = graph::degree(n, session.threshold) / 2;
    let nb = graph::neighbours(session, &seed);
    for p in 0..n {
        let mut mine: Vec<usize> = (1..=half)
            .flat_map(|d| [order[(p + d) % n], order[(p + n - d) % n]])
            .collect();
        mine.sort_unstable();
        assert_eq!(nb[order[p]], mine, "the ring order was not reproduced");
    }
    order
}

/// Site `c`'s plain sum of `x`.
pub(crate) fn plain_sum(c: usize) -> u64 {
    site_rows(c)
        .column(1)
        .as_primitive::<Int64Type>()
        .values()
        .iter()
        .sum::<i64>() as u64
}
