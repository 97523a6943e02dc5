//! Issue 54, attacked an eighth time from outside: secure aggregation and
//! the site rules around it after the fixes of the seventh review, by a
//! hostile coordinator that drives honest sites through the `Site` trait
//! with hand-made messages (the harness of `attack54f.rs`, in process and
//! against `fedsql worker`s over Flight), and by a hostile analyst with
//! SQL only.
//!
//! Each finding's test was `break_…` (the secret recovered equal to the
//! victim's true value); all four are fixed, and the tests, `holds_…`,
//! assert what stops each attack now.
//! 1. `require_secure` with a declared group column: for a secure (non-DP)
//!    aggregate the site does not complete the declared keys, so a range
//!    filter's group key (absent / refused / present) still finds every
//!    value of `x`, the seventh review's range search (was BREAK, medium;
//!    FIXED: every declared key is announced, only their rows kept).
//! 2. `require_secure` checks a group column by its name only: `x AS g`
//!    (g declared) sends every value of the undeclared `x` in plain at
//!    setup; over the wire too, and through an honest coordinator the
//!    analyst reads the values t sites hold (was BREAK, high). 2d: a shared
//!    `VALUES` column named `g` tests membership of many candidates in one
//!    setup (was BREAK, high, same root; FIXED: a group column must be the
//!    federated table's own, by its own name). 2c: under `secure_dp_*` the alias is
//!    harmless, the keys are completed to the declared ones (HOLDS).
//! 3. Manual approval: a request flagged as a fit's round (`fit_scope`,
//!    the coordinator's to set) has its aggregates' literals masked in
//!    the fingerprint, so an approved aggregate runs with any constants
//!    (was BREAK, medium; FIXED: only a fit step's coefficients are masked).
//! 4. "A session id is used once" holds per local client, and a worker
//!    makes one per schema a plan reads its table with: a used id is set
//!    up again, and the finished round's signed keys pass step 2 (was
//!    BREAK, low: step 3 stopped it; FIXED: the ids are the worker's).

#![allow(dead_code, unused_imports)]

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type};
use datafusion::logical_expr::LogicalPlan;
use fedsql::FedContext;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::codec::InlineTable;
use fedsql::protocol::encoder::Encoder;
use fedsql::protocol::secure::{
    MaskRequest, ParticipantKeys, Revealed, RevealedKind, SecureSession, ShareEnvelope,
    ShareRequest, UnmaskRequest, masks, shamir,
};
use fedsql::protocol::site::{Analyst, Site, SiteRequest};
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::{DpPolicy, DpSite};
use fedsql::site::release::dp_budget::Ledger;
use fedsql::site::release::identity::SiteIdentity;
use fedsql::site::release::policy::DisclosurePolicy;

use crate::attack54f::{
    Hostile, SUM_SQL, encoder_of, first_word, first_words, honest_total, rebuild, round_over,
    round_showing, schema, session_of, site_rows, site_sum,
};

/// `require_secure`, with `g` declared public (`dp_domain.g = '0'`: in the
/// harness every row has `g = 0`, so the declaration is true).
fn require_secure_declared() -> DpPolicy {
    let mut dp = DpPolicy::default();
    dp.set("require_secure", "true").unwrap();
    dp.set("dp_domain.g", "0").unwrap();
    dp
}

/// The `Int64` values of a batch's column `i`.
fn int64s(batch: &RecordBatch, i: usize) -> Vec<i64> {
    let column = datafusion::arrow::compute::cast(batch.column(i), &DataType::Int64).unwrap();
    column
        .as_primitive::<Int64Type>()
        .iter()
        .map(|v| v.expect("a value"))
        .collect()
}

// ---------------------------------------------------------------------
// 1. require_secure with a declared group column: the group keys of a
//    filtered secure setup still tell whether 0, 1..k-1 or k+ rows pass.
// ---------------------------------------------------------------------

/// What site 0's secure setup of `secure_count(1)` over the rows with
/// `lo <= x < hi`, grouped by the declared `g`, tells: `None` if refused
/// (1 to k − 1 rows pass), else whether its group key came back (k or
/// more rows pass) or not (none pass).
async fn rows_in(h: &Hostile, lo: i64, hi: i64, asked: &mut usize) -> Option<bool> {
    *asked += 1;
    let sql =
        format!("SELECT g, secure_count(1) AS n FROM t WHERE x >= {lo} AND x < {hi} GROUP BY g");
    let encoder = h.plan_encoder(&sql).await;
    let request = SiteRequest::new(&encoder, &h.analyst);
    match h.sites[0].secure_setup(&request, &session_of(5)).await {
        Ok(setup) => Some(setup.group_keys.num_rows() > 0),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("min_group_rows"), "another refusal: {e}");
            None
        }
    }
}

/// The values of x at site 0 within `[lo, hi)`, found by halving: a range
/// is searched further unless its setup came back without a group key (no
/// row in it).
fn values_in<'a>(
    h: &'a Hostile,
    (lo, hi): (i64, i64),
    asked: &'a mut usize,
    found: &'a mut Vec<i64>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>> {
    Box::pin(async move {
        if rows_in(h, lo, hi, asked).await == Some(false) {
            return;
        }
        if hi - lo == 1 {
            found.push(lo);
            return;
        }
        let mid = lo + (hi - lo) / 2;
        values_in(h, (lo, mid), asked, found).await;
        values_in(h, (mid, hi), asked, found).await;
    })
}

/// Was BREAK 1 (medium). The seventh review's range search, with the group
/// column declared: under `require_secure` and the default disclosure
/// policy (k = 5), with `g` declared public (`dp_domain.g`), a secure
/// setup of `secure_count(1) … WHERE lo <= x AND x < hi GROUP BY g` is
/// accepted (g is declared), and it is refused (1 to 4 rows pass),
/// answered with the group key `0` (5 or more) or with *no* group key
/// (none): for a secure (non-DP) aggregate the site does not complete the
/// declared keys as it does for DP (`DpSite::release` completes only when
/// the query has DP calls), so which declared keys come back still tells
/// whether rows pass the filter. Halving `[lo, hi)` gives every value of
/// `x` at site 0, and so its exact `secure_sum(x, 0, 1000)`, from setups
/// alone, never a plain state.
///
/// The security page says the declared-columns rule answers exactly this
/// attack ("found values by a range search on which group keys came back
/// … What is left is the refusal of the thresholds").
///
/// Where to fix: under `require_secure`, release exactly the declared
/// groups, as DP does (an empty state for every declared key the site does
/// not hold, rows of undeclared keys dropped), for secure aggregates too.
/// FIXED since: under `require_secure` a grouped secure setup announces
/// every declared key whatever rows pass (its state keeps the declared
/// keys' rows only; `DpSite::declared_secure_groups`), so the group keys
/// tell nothing; the refusal of the thresholds is the documented limit.
#[tokio::test]
async fn holds_require_secure_announces_every_declared_key_whatever_rows_pass() {
    let dp = require_secure_declared();
    let h = Hostile::build(5, SUM_SQL, Some(&dp), Some(DisclosurePolicy::default())).await;
    // The setting is on: the plain sum is refused.
    let plain = h.plan_encoder("SELECT sum(x) AS s FROM t").await;
    let err = h.sites[0]
        .encode(&SiteRequest::new(&plain, &h.analyst))
        .await
        .expect_err("a plain sum under require_secure")
        .to_string();
    assert!(err.contains("require_secure"), "{err}");
    // No row passes: the declared key comes back all the same.
    assert_eq!(announced(&h, 2000, 3000).await, Some(vec![0]));
    // Every row passes: the same keys (or the thresholds' refusal).
    let all = announced(&h, 0, 1024).await;
    assert!(all.is_none() || all == Some(vec![0]), "{all:?}");
}

/// The group keys site 0's secure setup of `secure_count(1)` over the rows
/// with `lo <= x < hi`, grouped by the declared `g`, announces; `None` if
/// refused by the thresholds.
async fn announced(h: &Hostile, lo: i64, hi: i64) -> Option<Vec<i64>> {
    let sql =
        format!("SELECT g, secure_count(1) AS n FROM t WHERE x >= {lo} AND x < {hi} GROUP BY g");
    let encoder = h.plan_encoder(&sql).await;
    let request = SiteRequest::new(&encoder, &h.analyst);
    match h.sites[0].secure_setup(&request, &session_of(5)).await {
        Ok(setup) => Some(int64s(&setup.group_keys, 0)),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("min_group_rows"), "another refusal: {e}");
            None
        }
    }
}

// ---------------------------------------------------------------------
// 2. require_secure checks a group column by its name alone: a declared
//    name given to any expression of the rows (`x AS g`) passes.
// ---------------------------------------------------------------------

/// Site `c`'s rows for 2.: `g = 0` everywhere; `x` holds two values, five
/// rows each (a category-like column the data owner did not declare).
fn repeated_rows(c: usize) -> RecordBatch {
    let g: Vec<i64> = vec![0; 10];
    let x: Vec<i64> = (0..10)
        .map(|i| {
            if i < 5 {
                100 + c as i64
            } else {
                500 + 7 * c as i64
            }
        })
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(g)), Arc::new(Int64Array::from(x))],
    )
    .unwrap()
}

/// As [`Hostile::build`], with each site's rows from `rows`.
async fn hostile_with_rows(
    n: usize,
    sql: &str,
    rows: impl Fn(usize) -> RecordBatch,
    dp: Option<&DpPolicy>,
    policy: Option<DisclosurePolicy>,
) -> Hostile {
    Hostile::build_with_rows(n, sql, rows, dp, policy).await
}

/// The analyst's query of 2.: the undeclared `x`, named `g`.
const ALIAS_SQL: &str =
    "SELECT g, secure_count(1) AS n FROM (SELECT x AS g FROM t) AS s GROUP BY g";

/// Was BREAK 2 (high). Under `require_secure` a secure aggregate may group
/// only by declared public columns, but `DpSite::check_encoder` checks a
/// group column by its *name* (`group_columns`: `Expr::Column(c) ⇒
/// c.name`), not by what it is: `SELECT g, secure_count(1) FROM (SELECT
/// x AS g FROM t) GROUP BY g` groups by the undeclared `x` under the
/// declared name `g`. It is accepted, and site 0's setup sends the hostile
/// coordinator every value of `x` held by k or more rows, in plain, before
/// any mask — what the seventh review's `GROUP BY x` did, which the rule
/// was added to stop. (For DP aggregates the same alias is harmless:
/// `release` keeps only the declared values.)
///
/// Where to fix: resolve a group column to the table's own column (the
/// scan's field, through projections that only rename) before matching it
/// against `dp_domain`, or refuse a group column made by a projection;
/// and complete the declared keys for secure aggregates as for DP (which
/// would also drop the undeclared values here).
/// FIXED since: a group column must be the federated table's own column
/// under its own name (`scanned_column` in `DpSite::check_encoder`).
#[tokio::test]
async fn holds_require_secure_an_alias_of_an_undeclared_column_is_refused() {
    let dp = require_secure_declared();
    let h = hostile_with_rows(
        5,
        ALIAS_SQL,
        repeated_rows,
        Some(&dp),
        Some(DisclosurePolicy::default()),
    )
    .await;
    // Grouping by the undeclared column under its own name is refused.
    let direct = h
        .plan_encoder("SELECT x, secure_count(1) AS n FROM t GROUP BY x")
        .await;
    let err = h.sites[0]
        .secure_setup(&SiteRequest::new(&direct, &h.analyst), &session_of(5))
        .await
        .expect_err("GROUP BY x under require_secure")
        .to_string();
    assert!(err.contains("declares public"), "{err}");
    // The same column named `g`: refused too.
    let err = h
        .setup(0, &session_of(5))
        .await
        .expect_err("x AS g under require_secure");
    assert!(err.contains("declares public"), "{err}");
}

/// Worker `c`'s rows for 2b.: as [`repeated_rows`], and five more rows of
/// `x = 42` at every worker (a value every site holds).
fn worker_rows(c: usize) -> RecordBatch {
    let base = repeated_rows(c);
    let mut x = int64s(&base, 1);
    x.extend([42; 5]);
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![0i64; x.len()])),
            Arc::new(Int64Array::from(x)),
        ],
    )
    .unwrap()
}

/// Five `fedsql worker`s (in this process), worker `c` serving
/// [`worker_rows`]`(c)` as `t` under the default disclosure policy with
/// `require_secure` and `dp_domain.g = '0'`, each with an identity key
/// and every identity listed as a peer; an honest coordinator's context
/// over them (`ctx`), and a hostile coordinator driving their clients.
async fn declared_workers(dir: &std::path::Path) -> (crate::remote::Workers, Hostile) {
    crate::attack54f::hostile_over_workers_with(
        dir,
        worker_rows,
        Some(require_secure_declared()),
        ALIAS_SQL,
    )
    .await
}

/// Was BREAK 2b (high), against real workers: the aliased encoder travels as
/// datafusion-proto bytes, each worker decodes and checks it, and accepts
/// it: worker 0's setup gives the hostile coordinator every value of its
/// undeclared `x` (held by 5 or more rows). And a hostile analyst through
/// an honest coordinator, with SQL alone, reads the values of `x` that at
/// least t workers hold (here 42) with their secure counts — the rule
/// "group only by declared public columns" holds for neither.
/// FIXED since, as 2: the workers refuse the alias, to a hostile
/// coordinator's setup and to the analyst's SQL alike.
#[tokio::test]
async fn holds_require_secure_an_alias_over_the_wire_and_through_sql_is_refused() {
    let dir = tempfile::TempDir::new().unwrap();
    let (_workers, h) = declared_workers(dir.path()).await;
    // The worker refuses the plain sum and the undeclared column by name.
    for (sql, want) in [
        ("SELECT sum(x) AS s FROM t", "require_secure"),
        (
            "SELECT x, secure_count(1) AS n FROM t GROUP BY x",
            "declares public",
        ),
    ] {
        let err = match h.ctx.sql(sql).await {
            Ok(df) => df.collect().await.map(|_| ()),
            Err(e) => Err(e),
        }
        .expect_err(sql)
        .to_string();
        assert!(err.contains(want), "{sql}: {err}");
    }
    // The hostile coordinator's setup of the alias: refused.
    let err = h
        .setup(0, &session_of(5))
        .await
        .expect_err("x AS g at a worker under require_secure");
    assert!(err.contains("declares public"), "{err}");
    // The analyst, through the honest coordinator: refused.
    let err = crate::remote::run(&h.ctx, ALIAS_SQL)
        .await
        .expect_err("x AS g through SQL")
        .to_string();
    assert!(err.contains("declares public"), "{err}");
}

/// HOLDS 2c. The same alias under the masks with DP (`secure_dp_count`,
/// `require_secure` and `dp_domain.g`): the site releases exactly the
/// declared keys (`DpSite::release` completes them and drops the others),
/// so the setup's group keys are the declared `0` alone, whatever `x`
/// holds.
#[tokio::test]
async fn holds_require_secure_an_alias_under_secure_dp_gives_only_declared_keys() {
    let dp = require_secure_declared();
    let sql = "SELECT g, secure_dp_count(1, 1.0) AS n FROM (SELECT x AS g FROM t) AS s GROUP BY g";
    let h = hostile_with_rows(
        5,
        sql,
        repeated_rows,
        Some(&dp),
        Some(DisclosurePolicy::default()),
    )
    .await;
    // Since the fix of 2, refused outright (before, only the declared
    // key came back).
    let err = h
        .setup(0, &session_of(5))
        .await
        .expect_err("x AS g under require_secure");
    assert!(err.contains("declares public"), "{err}");
}

// ---------------------------------------------------------------------
// 3. Manual approval: a request the coordinator flags as a fit's round
//    has its aggregates' literals masked in the approval fingerprint.
// ---------------------------------------------------------------------

/// Asserts that `worker` holds `encoder`'s request for the data owner's
/// approval; returns the refusal (it names the pending request).
pub(crate) async fn held_for_approval(
    worker: &Arc<dyn Site>,
    encoder: &Encoder,
    analyst: &Analyst,
) -> String {
    let err = worker
        .encode(&SiteRequest::new(encoder, analyst))
        .await
        .expect_err("held for approval")
        .to_string();
    assert!(err.contains("awaits the data owner's approval"), "{err}");
    err
}

/// `encoder`'s request held at `worker`, approved by the data owner of
/// `site`, and run again: the plain sum it answers.
pub(crate) async fn approved_sum(
    site: &crate::profiles::Site,
    worker: &Arc<dyn Site>,
    encoder: &Encoder,
    analyst: &Analyst,
) -> f64 {
    let err = held_for_approval(worker, encoder, analyst).await;
    fedsql::site::worker::approvals::set(
        &site.approvals,
        &crate::profiles::pending_id(&err),
        "approved",
    )
    .unwrap();
    first_sum(
        &worker
            .encode(&SiteRequest::new(encoder, analyst))
            .await
            .unwrap(),
    )
}

/// The plain sum in a state batch's first column.
pub(crate) fn first_sum(state: &fedsql::protocol::encoder::StateBatch) -> f64 {
    let c = datafusion::arrow::compute::cast(state.batch().column(0), &DataType::Float64).unwrap();
    c.as_primitive::<datafusion::arrow::datatypes::Float64Type>()
        .value(0)
}

/// Was BREAK 3 (medium; the analyst's own coordinator, patched). Under
/// `approval = "manual"` "a changed filter or grouping is a new request"
/// (data-owner guide): the approval covers the request's fingerprint. But
/// the worker masks the aggregates' literals in the fingerprint whenever
/// the request says it is a fit's round (`fit_scope`, set by the
/// coordinator: `describe(plan, encode.fit_scope.is_some())`, in
/// `encode` and in every secure step alike), and compares the aggregates
/// by their printed text. So once the data owner approves
/// `sum(CASE WHEN age < 50 THEN 1 ELSE 0 END)`, the same request flagged
/// as a fit runs with any other constant (`age < 37`, …) without approval:
/// a filter moved into the aggregate, changed freely. The unflagged
/// request with the new constant is held, as the guide says.
///
/// Where to fix: mask literals only in requests whose aggregates are a
/// fit's (the catalogue's model aggregates, `irls_step`, …) and only in
/// their coefficient arguments, and never for a secure aggregate; or bind
/// a fit scope to an approved fit (the worker remembers which scopes it
/// approved).
/// FIXED since: only a fit step's coefficients (the literal arguments
/// after its data arguments, of an aggregate the catalogue marks
/// `shares_constants`) are masked in the fingerprint.
#[tokio::test]
async fn holds_approval_a_request_flagged_as_a_fit_keeps_its_constants_in_the_fingerprint() {
    let site = crate::profiles::site("[analysts.bob]\napproval = \"manual\"\n").await;
    let bob = site.session("bob").await;
    let provider = bob.session().table_provider("clinic").await.unwrap();
    let worker = FederatedTable::from_provider(provider.as_ref())
        .unwrap()
        .clients()[0]
        .clone();
    let analyst = Analyst::session();
    let below =
        |age: i64| format!("SELECT sum(CASE WHEN age < {age} THEN 1 ELSE 0 END) AS s FROM clinic");
    // The data owner approves the request with the constant 50, as a fit's.
    let approved = encoder_of(&bob, &below(50)).await.in_fit(Some(1));
    let at_50 = approved_sum(&site, &worker, &approved, &analyst).await;
    // Control: the constant 37, not flagged, is a new request.
    let plain = encoder_of(&bob, &below(37)).await;
    held_for_approval(&worker, &plain, &analyst).await;
    // The constant 37, flagged as a fit's round: a new request too.
    let flagged = plain.in_fit(Some(1));
    held_for_approval(&worker, &flagged, &analyst).await;
    // The honest count over the demo rows.
    let (header, rows) = crate::support::demo_rows();
    let age = header.split(',').position(|h| h == "age").unwrap();
    let truth = |below: f64| {
        rows.iter()
            .filter(|r| {
                r.split(',')
                    .nth(age)
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|v| v < below)
            })
            .count() as f64
    };
    assert_eq!(at_50, truth(50.0));
}

/// Was BREAK 2d (high; the same root as 2). A declared name on a *shared*
/// table's column: the analyst's inline `VALUES` of candidate values
/// `(k, g)`, joined on `t.x = s.k` and grouped by `s.g` (named `g`,
/// declared). The join passes the amplification check (the shared keys
/// are distinct), the group check sees the name `g` only, and the setup's
/// group keys are the candidates that 5 or more of site 0's rows hold: a
/// membership test of many values of the undeclared `x` in one setup.
/// (A fix that only follows projections to a scan would still accept
/// this: the group column must be the *federated* table's own column.)
/// FIXED since, as 2: a shared table's column is not the federated
/// table's own.
#[tokio::test]
async fn holds_require_secure_a_shared_tables_column_named_as_declared_is_refused() {
    let dp = require_secure_declared();
    let candidates: Vec<i64> = (95..110).chain(495..510).collect();
    let values = candidates
        .iter()
        .map(|v| format!("({v}, {v})"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT s.g, secure_count(1) AS n FROM t JOIN (VALUES {values}) AS s(k, g) ON t.x = s.k GROUP BY s.g"
    );
    let h = hostile_with_rows(
        5,
        &sql,
        repeated_rows,
        Some(&dp),
        Some(DisclosurePolicy::default()),
    )
    .await;
    let err = h
        .setup(0, &session_of(5))
        .await
        .expect_err("a shared column named g");
    assert!(err.contains("declares public"), "{err}");
}

// ---------------------------------------------------------------------
// 4. "A session id is used once" holds per (table, schema) at a worker,
//    not per site: a worker makes a new local client, with fresh secure
//    secrets, for every schema a plan reads its table with.
// ---------------------------------------------------------------------

/// Was BREAK 4 (low). The security page: a site "remembers the ids of the
/// last 65,536 sessions it set up: a setup under an id it has seen is
/// refused (`a session id is used once`), so a finished round's signed
/// keys cannot be replayed into a new setup of its id" (the fix of the
/// fourth review, `attack54d.rs`). At a worker the ids are remembered by
/// the `ClientSecrets` of a `LocalClient`, and `ServedTable::client_for`
/// makes a new client (new secrets, nothing seen) for every schema a plan
/// reads the table with — the same column names with another nullability
/// will do. After an honest round of session S, the hostile coordinator
/// reads worker 0's table with the nullability flipped: the setup of S is
/// accepted again, and the four other workers' keys of the finished round
/// (each signed by a listed peer *for S*) pass worker 0's peers check at
/// step 2 — the replay the fix was to stop. What stops it going further
/// is step 3: no stale envelope opens to worker 0's new keys, so it has
/// too few senders (nothing is revealed here).
///
/// Where to fix: keep the seen ids (and the pending sessions) per worker
/// (per identity), not per local client; or key a table's clients by its
/// column names only.
/// FIXED since: a worker's clients (every table, every schema) share the
/// worker's remembered session ids (`SiteOptions::session_ids`).
#[tokio::test]
async fn holds_a_worker_refuses_a_used_session_id_under_another_schema_too() {
    let dir = tempfile::TempDir::new().unwrap();
    let (workers, mut h) = declared_workers(dir.path()).await;
    let honest = h.plan_encoder(SUM_SQL).await;
    h.encoders = vec![honest; 5];
    // An honest round of session S, to the end.
    let session = session_of(5);
    let mut keys = Vec::new();
    let mut group_keys = Vec::new();
    for c in 0..5 {
        let (k, g) = h.setup(c, &session).await.unwrap();
        keys.push(Some(k));
        group_keys.push(g);
    }
    let groups = fedsql::protocol::secure::union_groups(&group_keys).unwrap();
    let mut envelopes = Vec::new();
    for c in 0..5 {
        envelopes.extend(h.share(c, &session, keys.clone()).await.unwrap());
    }
    for c in 0..5 {
        let mine: Vec<ShareEnvelope> = envelopes
            .iter()
            .filter(|e| e.to as usize == c)
            .cloned()
            .collect();
        h.mask(c, &session, mine.clone(), &groups).await.unwrap();
    }
    let list: Vec<u32> = (0..5).collect();
    let mut signatures = Vec::new();
    for c in 0..5 {
        signatures.push(h.confirm(c, &session, &list).await.unwrap());
    }
    for c in 0..5 {
        h.unmask(c, &session, &list, signatures.clone())
            .await
            .unwrap();
    }
    // The id again at worker 0, same schema: refused, as the page says
    // (under a policy the reason is withheld; the worker logs it).
    h.setup(0, &session).await.expect_err("a used session id");
    assert!(
        workers
            .logs()
            .iter()
            .any(|l| l.contains("a session id is used once")),
        "{:?}",
        workers.logs()
    );
    // The same table read with the columns' nullability flipped.
    let provider = h.ctx.session().table_provider("t").await.unwrap();
    let table = FederatedTable::from_provider(provider.as_ref()).unwrap();
    let flipped: Vec<Field> = table
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(!f.is_nullable()))
        .collect();
    let ctx = FedContext::new();
    ctx.register_federated(FederatedTable::new(
        "t",
        Arc::new(Schema::new(flipped)),
        h.sites.clone(),
    ))
    .unwrap();
    let mut other = Hostile {
        ctx,
        sites: h.sites.clone(),
        encoders: Vec::new(),
        analyst: Analyst::session(),
        identities: h.identities.clone(),
    };
    other.encoders = vec![other.plan_encoder(SUM_SQL).await; 5];
    // Refused too: the worker remembers S for every client (or, as now,
    // refuses first to read a nullable column as NOT NULL).
    other
        .setup(0, &session)
        .await
        .expect_err("the used id under another schema");
    let logs = workers.logs();
    let refusals = logs
        .iter()
        .filter(|l| l.contains("a session id is used once"))
        .count();
    let not_null = logs
        .iter()
        .any(|l| l.contains("NOT NULL, but this site holds it as"));
    assert!(refusals >= 2 || not_null, "{logs:?}");
}

/// Was BREAK 1b (medium), against real workers: the range search of 1 over
/// the wire, worker 0 under `require_secure` with `dp_domain.g = '0'`.
/// Worker 0's rows hold three values of `x`, five rows each: halving on
/// which setups come back with the declared key `0` finds them all.
/// FIXED since, as 1: over the wire too, the declared key comes back
/// whatever rows pass.
#[tokio::test]
async fn holds_require_secure_the_range_search_over_the_wire_finds_nothing() {
    let dir = tempfile::TempDir::new().unwrap();
    let (_workers, h) = declared_workers(dir.path()).await;
    assert_eq!(announced(&h, 2000, 3000).await, Some(vec![0]));
    let all = announced(&h, 0, 1024).await;
    assert!(all.is_none() || all == Some(vec![0]), "{all:?}");
}
