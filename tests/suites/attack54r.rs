//! The eighteenth outside attack set, after the seventeenth review's fixes
//! (states rebuilt to hold only their rows' bytes, DP grouping only by
//! types "whose values print each as its own text", a worker reading a
//! column only as its own type or a wider one), by a hostile analyst
//! writing SQL (in process and over `fedsql worker`s) and a hostile
//! coordinator driving honest sites through the `Site` trait.
//!
//! **Status:** every break below is fixed and its test is now a `holds_…`
//! (the names in these notes are the tests' first names).
//!
//! A test named `breaks_…` asserts the leaking behaviour (it passes while
//! the bug exists); `holds_…` asserts what stopped an attack.
//!
//! **Found (BREAK, high): `array_length` panics on one row's value, and
//! a panic is a failure.** The catalogue marks `array_length` as never
//! failing (`never`), so the never-fail rewrite leaves it alone; but
//! DataFusion's `compute_array_length` descends a nested list through
//! `value(0)` of each level, and an empty list of lists has no element 0:
//! it panics (index out of bounds; bounds checks stay on in release
//! builds). The site catches the panic and answers its fixed refusal, so
//! whether a query fails depends on one row:
//! `array_length(CASE WHEN id = 17 AND x > m THEN make_array() ELSE
//! make_array(make_array(1)) END, 2)` fails exactly when row 17 has x > m.
//! Under `require_dp` and a budget of 1 over real workers, SQL alone reads
//! the victim's x = 42 in 7 `dp_count` queries at ε = 0.01 (0.07 of the
//! budget spent): `breaks_array_length_panics_on_one_rows_empty_nested_list`,
//! `breaks_an_analyst_reads_a_value_over_workers_through_array_length`.
//! The same bit answers under any policy (thresholds or DP).
//!
//! Fix: mark `array_length` `may_fail` *and* make the never-fail wrapper
//! catch panics (a `NullOnError` evaluation that panics gives NULL, row
//! by row, like an error: `catch_unwind` around `invoke_with_args`); better,
//! wrap every catalogued scalar function so, since any kernel may panic
//! on some value; or drop `array_length` with a dimension argument.
//!
//! **Found (BREAK, high): `TRY_CAST` of a far timestamp to text still
//! fails.** Arrow's cast of a temporal value to a string formats it with
//! chrono and fails, *whatever* `CastOptions::safe` says, for a value
//! beyond chrono's ±262,143 years ("Failed to convert … to temporal"; the
//! same for Date32/Date64 values out of range and a negative Time64, and
//! a far Timestamp cast to DATE fails too). `from_unixtime` (catalogued, wrapped to give
//! NULL on failure) makes such a value from a plain BIGINT without
//! failing: `from_unixtime(9223372036854775807)`. So `CAST(from_unixtime(
//! CASE WHEN id = 17 AND x > m THEN 9223372036854775807 ELSE 0 END) AS
//! VARCHAR)` — rewritten to `TRY_CAST` at the site — fails exactly when
//! row 17 has x > m. Over real workers under `require_dp` and a budget,
//! 7 queries at ε = 0.01 read x = 42
//! (`breaks_a_try_cast_of_a_far_timestamp_to_text_fails_on_one_row`,
//! `breaks_an_analyst_reads_a_value_over_workers_through_a_far_timestamp`).
//! The same class hits data the owner holds: a Parquet `TIMESTAMP` stored
//! as i64::MAX µs (~292,000 years; an "infinity" sentinel) would make
//! `CAST(ts AS VARCHAR)` fail whenever that row passes the filter (not
//! run here).
//!
//! Fix: the site's cast must not fail on data: evaluate `TRY_CAST` (and
//! the coercion casts the planner adds) through a wrapper that gives NULL
//! for the rows whose cast errors (as `NullOnError` does for functions),
//! or refuse casts of temporal/decimal values to text under a policy.
//!
//! **Found (BREAK, medium): two DP groups of `DATE` keys still print
//! alike.** `text_shows_each_value` admits `Date32` ("dates print each as
//! their own text"), but DataFusion prints a `Date32` outside chrono's
//! range (beyond ±262,143 years: e.g. `i32::MAX` and `i32::MIN` days, the
//! kind of values an exporter may write for ±infinity dates) as the
//! empty string. `DpSite::complete_keys` then finds two state rows whose
//! keys print alike and fails the query with an internal error — after
//! the ε was debited, and only when the rows passing the analyst's
//! filter hold two such distinct dates. One row decides whether a DP
//! query fails:
//! - neighbouring data sets (one more row of `-infinity`) give an answer
//!   and a failure, with certainty, whatever ε
//!   (`breaks_two_out_of_range_dates_fail_a_dp_query_on_one_row`);
//! - over real workers, with SQL alone under `require_dp` and a budget, an
//!   analyst reads a row's exact `x` (42) by halving a filter `id <> 17 OR
//!   x > m`, 7 queries at ε = 0.01
//!   (`breaks_an_analyst_reads_a_value_over_workers_through_infinite_dates`).
//!
//! Fix: refuse DP grouping by `Date32` too (or canonicalize keys as typed
//! values rather than text: compare the `i32` days, and release an
//! out-of-range date never), and turn "two groups print alike" into a
//! drop of both rather than an error; in general, compare typed values
//! (the row format of `RowConverter`) rather than display text.
//!
//! **Found (BREAK, medium; hostile coordinator): under `require_secure`,
//! the masking step tells which declared keys a site holds.** A
//! `require_secure` site announces every declared key at setup, so that
//! "which keys a setup sends back tells nothing" (the fix of the eighth
//! review). But the state it keeps is its *held* declared keys only, and
//! `align` refuses a coordinator's group list that "lacks N of this
//! client's groups". A coordinator that sends the list of declared keys
//! less key K gets that refusal exactly when the site holds K (with k or
//! more rows), and a masked state when it does not: with a range filter,
//! the three-way answer of the eighth review's range search is back
//! (refused at setup: 1 to k−1 rows; refused at mask: k or more; masked:
//! none) (`breaks_require_secure_mask_step_tells_which_declared_keys_a_site_holds`).
//!
//! Fix: complete a `require_secure` site's kept state with an empty state
//! for every declared key it lacks (as a DP release does), so that its
//! own groups are always the declared ones; or refuse, under
//! `require_secure`, any group list other than the declared keys.
//!
//! **Found (BREAK, low; thresholds only): a `glm` round's state carries an
//! exact count of any predicate.** `irls_step` (and `sgd_step`) count the
//! rows whose response is outside the family's range in a state field
//! (`invalid`) that no input count holds to k, and the coordinator prints
//! it: `glm('SELECT id, CASE WHEN id = 3 AND x > m THEN -1 ELSE x END AS y
//! FROM t', 'y ~ id', 'poisson')` answers "1 rows have a response outside
//! the range" exactly when row 3 has x > m, at k = 5 — rule 2's
//! `count(*) FILTER (WHERE id = 17)`, released
//! (`breaks_a_glm_round_counts_one_rows_invalid_response`). Fix: hold
//! `invalid` to 0-or-k like an input count (or refuse the round at the
//! site when it is not 0, whatever its count, which is the same one bit
//! as the refusal of thresholds).
//!
//! What else was tried (HOLDS):
//! - grouped DP matches text keys byte for byte: case, whitespace,
//!   Unicode normalisation and NUL variants of a declared key are
//!   dropped, and the state is bit for bit the same with or without them
//!   (`holds_dp_text_keys_match_exactly_and_variants_are_dropped`);
//! - a dictionary-encoded key column (carrying an undeclared key in its
//!   dictionary) releases only declared bytes
//!   (`holds_a_dictionary_key_column_releases_only_declared_bytes`);
//! - declared column types over real workers: wider types read every
//!   value (a BIGINT of 2^53 + 1 as DOUBLE), narrower ones are refused
//!   before a row is read
//!   (`holds_declared_types_over_workers_widen_or_are_refused_alike`);
//! - a `secure_dp_…` state under `require_secure` is completed with every
//!   declared key before it is kept, so a short group list is refused
//!   whatever the site holds
//!   (`holds_require_secure_dp_state_is_refused_a_short_list_alike`).
//!
//! Noticed: the "two groups print alike" failure is a `FedError::Internal`
//! that `LocalClient::run` returns from `DpSite::release` without
//! `self.error`, so in process it reads "internal error: two groups of a
//! DP state print alike" rather than the fixed refusal (over a worker it
//! becomes "worker error (Internal): a cast error", classified by the word
//! "cast" in its hint).

use std::sync::Arc;

use datafusion::arrow::array::{Date32Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use fedsql::FedContext;
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::secure::ParticipantKeys;
use fedsql::protocol::site::Site;
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::{DpPolicy, DpSite};
use fedsql::site::release::dp_budget::Ledger;
use fedsql::site::release::policy::DisclosurePolicy;

use crate::attack54f::{Hostile, session_of};

/// `d` (a date), `id` and `x`.
pub(crate) fn date_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("d", DataType::Date32, true),
        Field::new("id", DataType::Int64, true),
        Field::new("x", DataType::Int64, true),
    ]))
}

/// 2020-01-01 in days since the epoch.
pub(crate) const DAY: i32 = 18_262;
/// The "infinity" and "-infinity" dates of PostgreSQL and DuckDB (and of
/// any sentinel beyond chrono's ±262,143 years).
const INFINITY: i32 = i32::MAX;
const MINUS_INFINITY: i32 = i32::MIN;

/// 20 ordinary rows (two declared days), ids 1001..=1020.
pub(crate) fn ordinary() -> Vec<(i32, i64, i64)> {
    (0..20i32)
        .map(|r| (DAY + r % 2, r as i64 + 1001, (r * 3 % 50) as i64))
        .collect()
}

pub(crate) fn date_batch(rows: &[(i32, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        date_schema(),
        vec![
            Arc::new(Date32Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

/// `require_dp` under a finite budget, `d` declared public.
fn dates_declared() -> DpPolicy {
    let mut dp = DpPolicy {
        budget: Some(100.0),
        require_dp: true,
        ..DpPolicy::default()
    };
    dp.domains.insert(
        "d".into(),
        vec!["2020-01-01".to_string(), "2020-01-02".to_string()],
    );
    dp
}

/// The honest coordinator's answer to `sql` over one in-process site
/// holding `rows` under a worker's default policy and `dp`.
pub(crate) async fn answer_over_one(
    sql: &str,
    rows: &[(i32, i64, i64)],
    dp: &DpPolicy,
) -> Result<String, String> {
    let ctx = FedContext::new();
    let site = LocalClient::from_batches(
        "site0",
        "memory:site0",
        date_schema(),
        vec![date_batch(rows)],
        ctx.site_engine(),
    )
    .unwrap()
    .with_policy(Some(DisclosurePolicy::default()))
    .with_dp(Arc::new(DpSite::new(
        dp.clone(),
        Arc::new(Ledger::in_memory()),
    )));
    ctx.register_federated(FederatedTable::new(
        "t",
        date_schema(),
        vec![Arc::new(site) as Arc<dyn Site>],
    ))
    .unwrap();
    crate::attacks::answer(&ctx, sql).await
}

/// HOLDS (was BREAK, medium) — "each site's released state alone is
/// ε-differentially private with respect to adding or removing one of its
/// rows". Found: two dates out of chrono's range (`infinity`,
/// `-infinity`) both printed as "", so a site holding both failed a
/// grouped DP query with certainty, and one holding one answered. Now DP
/// grouping by a DATE column is refused, alike with or without the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_dp_grouping_by_dates_is_refused_alike_with_or_without_far_dates() {
    let dp = dates_declared();
    let sql = "SELECT d, dp_count(*, 0.5) AS n FROM t GROUP BY d ORDER BY d";
    let mut base = ordinary();
    base.push((INFINITY, 100, 7));
    let mut neighbour = base.clone();
    neighbour.push((MINUS_INFINITY, 17, 42));
    let without = answer_over_one(sql, &base, &dp).await;
    let with = answer_over_one(sql, &neighbour, &dp).await;
    assert_eq!(without, with);
    assert!(
        with.as_ref().is_err_and(|e| e.contains("of type Date32")),
        "{with:?}"
    );
}

/// (Was BREAK, medium: the same over real `fedsql worker`s, by SQL alone,
/// under `require_dp` and a finite budget. Worker 0's Parquet file holds
/// 20 ordinary rows, one row dated `infinity` (id 100) and the victim's
/// row (id 17, x = 42) dated `-infinity`. `WHERE id <> 17 OR x > m` lets
/// the victim's row in exactly when x > m, and the query fails exactly
/// then: seven halvings of [0, 128) read x = 42 for ε = 0.07. Now refused
/// alike, see below.)
/// Real `fedsql worker`s, one per data set (a Parquet file each), under a
/// worker's default disclosure policy, `require_dp`, a budget of 1 and
/// `d` declared public; and a coordinator's context with the table `t`.
pub(crate) async fn dp_workers(
    datasets: &[Vec<(i32, i64, i64)>],
) -> (crate::remote::Workers, FedContext, tempfile::TempDir) {
    use fedsql::site::worker::WorkerConfig;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::TempDir::new().unwrap();
    let files: Vec<std::path::PathBuf> = datasets
        .iter()
        .enumerate()
        .map(|(c, rows)| {
            let batch = date_batch(rows);
            let path = dir.path().join(format!("site{c}.parquet"));
            let file = std::fs::File::create(&path).unwrap();
            let mut writer =
                datafusion::parquet::arrow::ArrowWriter::try_new(file, date_schema(), None)
                    .unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            path
        })
        .collect();
    let next = AtomicUsize::new(0);
    let ledgers = dir.path().to_path_buf();
    let workers = crate::remote::Workers::start_with(&files, "t", |mut c: WorkerConfig| {
        let i = next.fetch_add(1, Ordering::SeqCst);
        c.policy = Some(DisclosurePolicy::default());
        c.dp = dates_declared();
        c.dp.budget = Some(1.0);
        c.dp_ledger = Some(ledgers.join(format!("ledger{i}.json")));
        c
    })
    .await;
    let ctx = FedContext::new();
    crate::remote::run(&ctx, &workers.create("t"))
        .await
        .unwrap();
    // Control: an exact aggregate is refused (require_dp).
    let exact = crate::attacks::answer(&ctx, "SELECT count(*) FROM t").await;
    assert!(exact.is_err_and(|e| e.contains("require_dp")));
    (workers, ctx, dir)
}

/// HOLDS — over workers the DATE grouping is refused whatever the
/// victim's value: the answers for m = 41 and m = 42 are the same refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_an_analyst_reads_nothing_over_workers_through_infinite_dates() {
    let mut victim_site = ordinary();
    victim_site.push((INFINITY, 100, 7));
    victim_site.push((MINUS_INFINITY, 17, 42));
    let (_workers, ctx, _dir) = dp_workers(&[victim_site, ordinary()]).await;
    let sql = |m: i64| {
        format!("SELECT d, dp_count(*, 0.01) AS n FROM t WHERE id <> 17 OR x > {m} GROUP BY d")
    };
    // (Either worker's refusal may come first: both refuse.)
    for m in [41, 42] {
        let answer = crate::attacks::answer(&ctx, &sql(m)).await;
        assert!(
            answer.as_ref().is_err_and(|e| e.contains("of type Date32")),
            "x > {m}: {answer:?}"
        );
    }
}

/// `require_secure` with `g` declared public as 0 and 1.
fn require_secure_declared() -> DpPolicy {
    let mut dp = DpPolicy::default();
    dp.set("require_secure", "true").unwrap();
    dp.domains
        .insert("g".into(), vec!["0".to_string(), "1".to_string()]);
    dp
}

/// Steps 1 and 2 of a session over every site of `h` for its encoders:
/// the keys each announced, and the envelopes addressed to site `to`.
async fn set_up(
    h: &Hostile,
    session: &fedsql::protocol::secure::SecureSession,
    to: usize,
) -> (
    Vec<RecordBatch>,
    Vec<fedsql::protocol::secure::ShareEnvelope>,
) {
    let n = h.sites.len();
    let mut keys: Vec<Option<ParticipantKeys>> = vec![None; n];
    let mut announced = Vec::new();
    for (c, key) in keys.iter_mut().enumerate() {
        let (k, g) = h.setup(c, session).await.unwrap();
        *key = Some(k);
        announced.push(g);
    }
    let mut envelopes = Vec::new();
    for c in 0..n {
        envelopes.extend(h.share(c, session, keys.clone()).await.unwrap());
    }
    let mine = envelopes
        .into_iter()
        .filter(|e| e.to as usize == to)
        .collect();
    (announced, mine)
}

/// HOLDS (was BREAK, medium; hostile coordinator) — under
/// `require_secure`, "every declared key (tuple) whatever the site holds".
/// Found: the setup announced [0, 1] whatever site 0 held, but its kept
/// state had only the keys it held, so masking for the list [1] was
/// refused ("lacks 1 of this client's groups") exactly when it held g = 0.
/// Now the kept state has a row for every declared key (the empty state
/// where the site holds none): the list [1] is refused alike.
#[tokio::test]
async fn holds_require_secure_mask_step_refuses_a_short_list_alike() {
    let dp = require_secure_declared();
    let mut outcomes = Vec::new();
    for (hi, holds) in [(1000, true), (0, false)] {
        let sql = format!(
            "SELECT g, secure_sum(x, 0, 1000) AS s FROM t WHERE x >= 0 AND x < {hi} GROUP BY g"
        );
        let h = Hostile::build(5, &sql, Some(&dp), Some(DisclosurePolicy::default())).await;
        let session = session_of(5);
        let (announced, envelopes) = set_up(&h, &session, 0).await;
        let keys: Vec<String> = (0..announced[0].num_rows())
            .map(|r| {
                datafusion::common::ScalarValue::try_from_array(announced[0].column(0), r)
                    .unwrap()
                    .to_string()
            })
            .collect();
        // HOLDS at setup: the declared keys, whatever the site holds.
        assert_eq!(keys, ["0", "1"], "site 0 holds g = 0: {holds}");
        // The declared keys less 0.
        let lacking_zero = announced[0].slice(1, 1);
        let masked = h.mask_state(0, &session, envelopes, &lacking_zero).await;
        eprintln!(
            "holds g = 0: {holds}; mask for [1]: {:?}",
            masked.as_ref().err()
        );
        outcomes.push(masked.is_err());
    }
    // Refused whether or not site 0 holds g = 0.
    assert_eq!(outcomes, [true, true]);
}

/// `require_dp` under a finite budget, no domain.
pub(crate) fn dp_only() -> DpPolicy {
    DpPolicy {
        budget: Some(100.0),
        require_dp: true,
        ..DpPolicy::default()
    }
}

/// HOLDS (was BREAK, high) — "Under a policy, whether a query fails, and
/// how, must not depend on one person's values". Found: DataFusion's
/// `array_length` panics on an empty list of lists, and the site turned
/// the panic into its fixed refusal, so a DP query failed exactly when one
/// row made the list empty. Now the array functions run NULL-on-error,
/// panics included: the query answers either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_array_length_on_one_rows_empty_nested_list_answers() {
    let dp = dp_only();
    let sql = |m: i64| {
        format!(
            "SELECT dp_count(*, 0.01) AS n FROM t WHERE array_length(CASE WHEN id = 17 AND x > {m} THEN make_array() ELSE make_array(make_array(1)) END, 2) = 1"
        )
    };
    let mut rows = ordinary();
    rows.push((DAY, 17, 42));
    let yes = answer_over_one(&sql(41), &rows, &dp).await;
    let no = answer_over_one(&sql(42), &rows, &dp).await;
    assert!(yes.is_ok(), "{yes:?}");
    assert!(no.is_ok(), "{no:?}");
}

/// HOLDS (was BREAK, high) — the same over real `fedsql worker`s, by SQL alone, with
/// no unusual data: under `require_dp` and a budget of 1, seven
/// `dp_count` queries at ε = 0.01 whose filter makes an empty list of
/// lists for the victim's row (id 17) when x > m read its x = 42 exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_an_analyst_reads_nothing_over_workers_through_array_length() {
    answers_alike_over_workers(|m| format!("array_length(CASE WHEN id = 17 AND x > {m} THEN make_array() ELSE make_array(make_array(1)) END, 2) = 1")).await;
}

/// Over two workers (worker 0 holding the victim's row, id 17 with
/// x = 42) under `require_dp`, `dp_count` filtered by `filter(m)` answers
/// for m = 41 and m = 42 alike (an answer each, whatever the row).
async fn answers_alike_over_workers(filter: impl Fn(i64) -> String) {
    let mut victim_site = ordinary();
    victim_site.push((DAY, 17, 42));
    let (_workers, ctx, _dir) = dp_workers(&[victim_site, ordinary()]).await;
    for m in [41, 42] {
        let sql = format!("SELECT dp_count(*, 0.01) AS n FROM t WHERE {}", filter(m));
        let answer = crate::attacks::answer(&ctx, &sql).await;
        assert!(answer.is_ok(), "x > {m}: {answer:?}");
    }
}

/// HOLDS — grouped DP matches declared text keys byte for byte: rows whose
/// key differs from a declared value only in case, whitespace, Unicode
/// normalisation (a decomposed "é") or a trailing NUL are dropped as
/// undeclared, and the state is the same, bit for bit (twin sites seeded
/// alike draw the same noise), with or without them; none makes the
/// query fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_dp_text_keys_match_exactly_and_variants_are_dropped() {
    use datafusion::arrow::array::StringArray;
    let schema = Arc::new(Schema::new(vec![
        Field::new("region", DataType::Utf8, true),
        Field::new("x", DataType::Int64, true),
    ]));
    let batch = |regions: &[&str]| {
        RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(regions.to_vec())),
                Arc::new(Int64Array::from(vec![1i64; regions.len()])),
            ],
        )
        .unwrap()
    };
    let mut base: Vec<&str> = vec!["east"; 10];
    base.extend(["caf\u{e9}"; 10]);
    let mut variants = base.clone();
    variants.extend(["East", "east ", " east", "cafe\u{301}", "east\0", "EAST"]);
    let mut dp = dp_only();
    dp.domains.insert(
        "region".into(),
        vec!["east".to_string(), "caf\u{e9}".to_string()],
    );
    let mut states = Vec::new();
    for regions in [&base, &variants] {
        let ctx = FedContext::new();
        let site = LocalClient::from_batches(
            "site0",
            "memory:site0",
            Arc::clone(&schema),
            vec![batch(regions)],
            ctx.site_engine(),
        )
        .unwrap()
        .with_policy(Some(DisclosurePolicy::default()))
        .with_dp(Arc::new(DpSite::seeded_for_tests(
            dp.clone(),
            Arc::new(Ledger::in_memory()),
            0x5eed,
        )));
        let site: Arc<dyn Site> = Arc::new(site);
        ctx.register_federated(FederatedTable::new(
            "t",
            Arc::clone(&schema),
            vec![Arc::clone(&site)],
        ))
        .unwrap();
        let encoder = crate::attack54f::encoder_of(
            &ctx,
            "SELECT region, dp_count(*, 0.5) AS n FROM t GROUP BY region",
        )
        .await;
        let analyst = fedsql::protocol::site::Analyst::session();
        let state = site
            .encode(&fedsql::protocol::site::SiteRequest::new(
                &encoder, &analyst,
            ))
            .await
            .unwrap()
            .batch()
            .clone();
        states.push(format!("{state:?}"));
    }
    assert_eq!(states[0], states[1]);
}

/// HOLDS — the contrast of the `require_secure` break: a `secure_dp_count`
/// state is completed with every declared key before it is kept, so a
/// group list lacking g = 0 is refused whether or not site 0 holds it.
#[tokio::test]
async fn holds_require_secure_dp_state_is_refused_a_short_list_alike() {
    let dp = require_secure_declared();
    let mut outcomes = Vec::new();
    for hi in [1000, 0] {
        let sql = format!(
            "SELECT g, secure_dp_count(*, 0.5) AS n FROM t WHERE x >= 0 AND x < {hi} GROUP BY g"
        );
        let h = Hostile::build(5, &sql, Some(&dp), Some(DisclosurePolicy::default())).await;
        let session = session_of(5);
        let (announced, envelopes) = set_up(&h, &session, 0).await;
        let lacking_zero = announced[0].slice(1, 1);
        let masked = h.mask_state(0, &session, envelopes, &lacking_zero).await;
        eprintln!("x < {hi}: {:?}", masked.as_ref().err());
        outcomes.push(masked.is_err());
        // The full declared list is masked (the refusal above is the short
        // list's, not the session's).
        let session = session_of(5);
        let (announced, envelopes) = set_up(&h, &session, 0).await;
        assert!(
            h.mask_state(0, &session, envelopes, &announced[0])
                .await
                .is_ok()
        );
    }
    assert_eq!(outcomes, [true, true]);
}

/// HOLDS — a dictionary-encoded key column (as a Parquet file written from
/// a dictionary array reads back) groups under DP like its values: the
/// released key column is rebuilt from the declared values and holds no
/// byte of an undeclared key the dictionary carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_dictionary_key_column_releases_only_declared_bytes() {
    use datafusion::arrow::array::DictionaryArray;
    use datafusion::arrow::datatypes::Int32Type;
    let secret = "undeclared-ward-of-the-site-SECRET-4411";
    let dict_type = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    let schema = Arc::new(Schema::new(vec![
        Field::new("region", dict_type, true),
        Field::new("x", DataType::Int64, true),
    ]));
    let mut regions: Vec<&str> = vec!["east"; 10];
    regions.push(secret);
    let keys: DictionaryArray<Int32Type> = regions.iter().copied().collect();
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(keys),
            Arc::new(Int64Array::from(vec![1i64; regions.len()])),
        ],
    )
    .unwrap();
    let mut dp = dp_only();
    dp.domains.insert(
        "region".into(),
        vec!["east".to_string(), "west".to_string()],
    );
    let ctx = FedContext::new();
    let site = LocalClient::from_batches(
        "site0",
        "memory:site0",
        Arc::clone(&schema),
        vec![batch],
        ctx.site_engine(),
    )
    .unwrap()
    .with_policy(Some(DisclosurePolicy::default()))
    .with_dp(Arc::new(DpSite::new(dp, Arc::new(Ledger::in_memory()))));
    let site: Arc<dyn Site> = Arc::new(site);
    ctx.register_federated(FederatedTable::new(
        "t",
        Arc::clone(&schema),
        vec![Arc::clone(&site)],
    ))
    .unwrap();
    let encoder = crate::attack54f::encoder_of(
        &ctx,
        "SELECT region, dp_count(*, 0.5) AS n FROM t GROUP BY region",
    )
    .await;
    let analyst = fedsql::protocol::site::Analyst::session();
    let state = site
        .encode(&fedsql::protocol::site::SiteRequest::new(
            &encoder, &analyst,
        ))
        .await
        .unwrap()
        .batch()
        .clone();
    let mut ipc = Vec::new();
    {
        let mut w =
            datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut ipc, &state.schema())
                .unwrap();
        w.write(&state).unwrap();
        w.finish().unwrap();
    }
    assert_eq!(state.num_rows(), 2);
    assert!(!String::from_utf8_lossy(&ipc).contains(secret));
}

/// HOLDS (was BREAK, low; thresholds only) — rule 2 of the disclosure
/// policy: "`count(*) FILTER (WHERE id = 17)` … [is] refused". Found: a
/// `glm` round's state counted the rows whose response is outside the
/// family's range (`irls_step`'s `invalid`), unheld, and the coordinator
/// reported "1 rows have a response outside the range" exactly when row 3
/// had x > m. Now that count is a cell held to k: 1 such row is refused
/// by the site's min_group_rows rule (the threshold's usual refusal), and
/// the exact count never leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_glm_rounds_invalid_response_count_is_held_to_k() {
    let dir = tempfile::TempDir::new().unwrap();
    let files = crate::attacks::write_sites(dir.path());
    let ctx = crate::attacks::in_process_with(&files[..2], "'min_group_rows' '5'").await;
    let sql = |m: i64| {
        format!(
            "SELECT * FROM glm('SELECT id, CASE WHEN id = 3 AND x > {m} THEN -1 ELSE x END AS y FROM t', 'y ~ id', 'poisson')"
        )
    };
    // Row 3's x is 161.5.
    let yes = crate::attacks::answer(&ctx, &sql(161)).await;
    let no = crate::attacks::answer(&ctx, &sql(162)).await;
    eprintln!("x > 161: {yes:?}\nx > 162: {no:?}");
    assert!(
        yes.as_ref().is_err_and(|e| e.contains("min_group_rows")
            && e.contains("invalid response")
            && !e.contains("1 rows")),
        "{yes:?}"
    );
    assert!(no.is_ok(), "{no:?}");
}

/// HOLDS (was BREAK, high) — "`CAST` becomes `TRY_CAST`", but Arrow's
/// cast of a temporal value beyond chrono's range to text failed whatever
/// `safe` said, and `from_unixtime(9223372036854775807)` makes one from a
/// BIGINT: `CAST(from_unixtime(CASE WHEN id = 17 AND x > m THEN … END) AS
/// VARCHAR)` failed exactly when row 17 had x > m. Now a cast from a date
/// or time runs NULL-on-error row by row: the query answers either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_cast_of_a_far_timestamp_to_text_answers() {
    let dp = dp_only();
    let sql = |m: i64| {
        format!(
            "SELECT dp_count(*, 0.01) AS n FROM t WHERE CAST(from_unixtime(CASE WHEN id = 17 AND x > {m} THEN 9223372036854775807 ELSE 0 END) AS VARCHAR) IS NOT NULL"
        )
    };
    let mut rows = ordinary();
    rows.push((DAY, 17, 42));
    let yes = answer_over_one(&sql(41), &rows, &dp).await;
    let no = answer_over_one(&sql(42), &rows, &dp).await;
    assert!(yes.is_ok(), "{yes:?}");
    assert!(no.is_ok(), "{no:?}");
    // A TRY_CAST the analyst writes, and a far timestamp to a date, alike.
    for cast in [
        "TRY_CAST(from_unixtime(CASE WHEN id = 17 AND x > 41 THEN 9223372036854775807 ELSE 0 END) AS VARCHAR)",
        "CAST(from_unixtime(CASE WHEN id = 17 AND x > 41 THEN 9223372036854775807 ELSE 0 END) AS DATE)",
    ] {
        let sql = format!("SELECT dp_count(*, 0.01) AS n FROM t WHERE {cast} IS NOT NULL");
        let answer = answer_over_one(&sql, &rows, &dp).await;
        assert!(answer.is_ok(), "{cast}: {answer:?}");
    }
}

/// HOLDS (was BREAK, high) — the same over real workers by SQL alone (7
/// `dp_count` queries at ε = 0.01 read the victim's x = 42): now both
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_an_analyst_reads_nothing_over_workers_through_a_far_timestamp() {
    answers_alike_over_workers(|m| format!("CAST(from_unixtime(CASE WHEN id = 17 AND x > {m} THEN 9223372036854775807 ELSE 0 END) AS VARCHAR) IS NOT NULL")).await;
}

/// HOLDS — declared column types over real workers: a wider type (`id`,
/// `x` as DOUBLE over BIGINT, a value of 2^53 + 1 among them) reads every
/// value without failing, and a narrower one (`x INT`, `x SMALLINT`, `d
/// TIMESTAMP` over a DATE) is refused before a row is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_declared_types_over_workers_widen_or_are_refused_alike() {
    let mut big = ordinary();
    big.push((DAY, 17, (1i64 << 53) + 1));
    let (workers, _ctx, _dir) = dp_workers(&[big, ordinary()]).await;
    let create = |columns: &str| {
        workers.create("t").replace(
            "FEDERATED TABLE t CLIENTS",
            &format!("FEDERATED TABLE t ({columns}) CLIENTS"),
        )
    };
    let ctx = FedContext::new();
    crate::remote::run(&ctx, &create("d DATE, id DOUBLE, x DOUBLE"))
        .await
        .unwrap();
    let wide =
        crate::attacks::answer(&ctx, "SELECT dp_count(*, 0.01) AS n FROM t WHERE x > 1").await;
    assert!(wide.is_ok(), "{wide:?}");
    for columns in [
        "d DATE, id BIGINT, x INT",
        "d DATE, id BIGINT, x SMALLINT",
        "d TIMESTAMP, id BIGINT, x BIGINT",
    ] {
        let ctx = FedContext::new();
        let created = crate::remote::run(&ctx, &create(columns)).await;
        let answer = match created {
            Ok(_) => {
                crate::attacks::answer(&ctx, "SELECT dp_count(*, 0.01) AS n FROM t WHERE x > 1")
                    .await
            }
            Err(e) => Err(e.to_string()),
        };
        eprintln!("{columns}: {answer:?}");
        assert!(
            answer
                .as_ref()
                .is_err_and(|e| e.contains("its own type or a wider one")),
            "{columns}: {answer:?}"
        );
    }
}
