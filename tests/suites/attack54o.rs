//! The fifteenth outside attack set: secure aggregation and DP under the
//! masks (`secure_dp_*`) after the fourteenth review's fixes (a noised
//! state aligned only to its own groups; a noise share's urn of fixed
//! length), by a hostile coordinator and by a hostile analyst.
//!
//! 1. **A grid step of zero.** `dp_sum`, `secure_dp_sum` (and the sums of
//!    `dp_avg`/`secure_dp_avg`) put a clamped value on a grid of step
//!    M / levels, M the bounds' magnitude. The bounds are checked to be
//!    finite with lower < upper, nothing more: with a subnormal upper
//!    bound (`1e-319`) the step underflows to 0.0, and each row's grid
//!    value is `(v / 0.0) as i64` = i64::MAX. The noise is calibrated for
//!    a row moving the state by `levels` (2^16 masked, 2^20 plain), so
//!    the total is K · (2^63 − 1) + noise: it tells the parity of K, the
//!    number of rows with x > 0, exactly (found, critical): an unbounded
//!    privacy loss, for the ε the ledger debits (1). Plain `dp_sum` at a
//!    site gives the same bit of each site's state to the coordinator.
//! 2. **A grid step of one subnormal unit.** Bounds whose step rounds to
//!    f64's least subnormal make one row's grid value up to 1.5 × the
//!    sensitivity the noise is calibrated for; the honest coordinator
//!    shows the analyst the total exactly (value / 2^-1074): a privacy
//!    loss of 1.5 ε for ε debited (found, high).
//!    The same in `dp_avg`/`secure_dp_avg` with normal bounds: the
//!    midpoint (lower + upper) / 2 overflows to +inf for [1e308, 1.5e308]
//!    (each centered value is −inf, i64::MIN on the grid: the parity
//!    again), and rounds to the lower bound for [2^53, 2^53 + 2], where a
//!    value at the upper bound is centered to twice the half range (a
//!    row weighs 2 × levels: 1.5 ε for the ε debited; found, medium).
//! 3. **The work of the geometric's high part.** The urn's length is
//!    fixed, and the geometric draws at least 48 Bernoulli(exp(−1)); but
//!    each such draw's work (`bernoulli_exp(1, 1)`: K uniform draws, the
//!    outcome is K odd) tells its outcome, so the words a share draws
//!    grow by about half a word per unit of the high part v — and for a
//!    count at ε = 1 (scale 2^20/2^20) the geometric *is* v (found, low:
//!    a few nanoseconds per unit against a setup's milliseconds, one
//!    sample per draw; the docs say only the low part remains).
//!
//! All three HOLD now: bounds whose float grid cannot hold the noise's
//! sensitivity (a step that is not a normal float, a midpoint or half
//! range that is not finite) are refused at planning and by every site
//! (`Params::check_grid`), every row's grid value is clamped to the
//! sensitivity, and each Bernoulli(exp(−γ)) of the geometric draws a
//! fixed 24 times (`sampler::bernoulli_exp_fixed`).
//! 4. HOLDS: phantom client names inflating a session's size do not
//!    coarsen the noise share (c grows, so d shrinks) and the session
//!    fails at the shares; a declared value spelled twice (or two
//!    spellings of one value) keeps a noise share on every group.
//!
//! Harness: `attack54f`'s `Hostile`, `attack54i`'s `open_session`,
//! `attack54k`'s `session_at` and `honestly_with_colluders`.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use fedsql::protocol::secure::threshold::SiteFloor;
use fedsql::protocol::secure::{ParticipantKeys, SecureSession};
use fedsql::protocol::site::SiteRequest;
use fedsql::site::release::dp::DpPolicy;
use fedsql::site::release::policy::DisclosurePolicy;

use crate::attack54f::{Hostile, schema, site_rows};
use crate::attack54i::open_session;
use crate::attack54k::{honestly_with_colluders, session_at};
use crate::attack54n::Counting;

/// A finite budget, `require_dp` and `require_secure`: the strictest DP
/// configuration, under which DP state is exempt from the thresholds.
fn strict() -> DpPolicy {
    DpPolicy {
        budget: Some(1000.0),
        require_dp: true,
        require_secure: true,
        ..DpPolicy::default()
    }
}

/// `attack54f::site_rows`, with site 0's first `drop` rows removed (its
/// neighbouring data set, one row fewer).
fn rows_less(drop: usize) -> impl Fn(usize) -> RecordBatch {
    move |c| {
        let rows = site_rows(c);
        if c == 0 {
            rows.slice(drop, rows.num_rows() - drop)
        } else {
            rows
        }
    }
}

/// The number of rows of the five sites (all with x > 0).
fn rows_in_all(rows: &dyn Fn(usize) -> RecordBatch) -> usize {
    (0..5).map(|c| rows(c).num_rows()).sum()
}

/// Whether the 64-bit word `w` is within 2^62 of 2^63 (rather than of 0).
fn near_half(w: u64) -> bool {
    (w.wrapping_sub(1 << 63) as i64).unsigned_abs() < 1 << 62
}

/// `sql` as the coordinator plans it, or the error of its planning; then,
/// if it planned, what site 0 answers for it (plain or, under the masks,
/// a session's setup). The DP grid's check must refuse in one or the
/// other, with `words`.
async fn refused_with(h: &Hostile, sql: &str, words: &str) {
    let answered = async {
        let batches = h.ctx.sql(sql).await?.collect().await?;
        Ok::<_, fedsql::FedError>(batches)
    }
    .await;
    let err = answered.expect_err("the query is refused").to_string();
    assert!(err.contains(words), "{err}");
    // A hostile coordinator's encoder, planned without the coordinator's
    // checks where it plans at all: the site refuses it too.
    let state = h.ctx.session().state();
    let planned = async {
        let plan = state.create_logical_plan(sql).await.ok()?;
        let plan = state.optimize(&plan).ok()?;
        let cut = fedsql::coordinator::split::lowest_cut(&plan)?;
        let round = fedsql::coordinator::split::plan_round(&state, &cut)
            .await
            .ok()?;
        round.encoder_for("").ok()
    }
    .await;
    if let Some(encoder) = planned {
        let request = SiteRequest::new(&encoder, &h.analyst);
        let plain = h.sites[0].encode(&request).await;
        let masked = h.sites[0]
            .secure_setup(&request, &session_at(5, 4).with_noise_shares(3))
            .await;
        for answer in [plain.err(), masked.err()] {
            let err = answer.expect("site 0 refuses").to_string();
            assert!(err.contains(words) || err.contains("refused"), "{err}");
        }
    }
}

/// A finite budget and `require_dp`: plain DP answers only.
fn plain_dp() -> DpPolicy {
    DpPolicy {
        budget: Some(1000.0),
        require_dp: true,
        ..DpPolicy::default()
    }
}

/// Five sites under [`plain_dp`], the coordinator's encoder `sql`'s.
async fn plain_dp_sites(sql: &str) -> Hostile {
    Hostile::build(5, sql, Some(&plain_dp()), Some(DisclosurePolicy::default())).await
}

const ZERO_STEP_SQL: &str = "SELECT secure_dp_sum(x, 0.0, 1e-319, 1.0) AS s FROM t";

/// HOLDS (was BREAK, severity critical — the DP promise of
/// `secure_dp_sum` against a coordinator that follows the protocol).
/// Found: `secure_dp_sum(x, 0.0, 1e-319, 1.0)` passed every check; the
/// grid step 1e-319 / 2^16 underflowed to 0.0 and each row with x > 0
/// weighed `(+inf) as i64` = i64::MAX, so the unmasked word told the
/// exact parity of their number (near 2^63 for 31 rows, near 0 for 30):
/// an unbounded privacy loss for the ε = 1 each ledger debited. Now the
/// bounds are refused, by the coordinator and by the site.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_subnormal_bound_is_refused_before_any_row_is_put_on_the_grid() {
    let (upper, levels) = (1e-319f64, 65536.0f64);
    assert!(upper.is_finite() && 0.0 < upper && !upper.is_normal());
    assert_eq!(upper / levels, 0.0);
    assert_eq!((upper / 0.0).round_ties_even() as i64, i64::MAX);
    let h = Hostile::build_with_rows(
        5,
        "SELECT secure_dp_sum(x, 0.0, 1.0, 1.0) AS s FROM t",
        rows_less(0),
        Some(&strict()),
        Some(DisclosurePolicy::default()),
    )
    .await;
    refused_with(&h, ZERO_STEP_SQL, "too narrow or too wide").await;
    assert!(near_half(1 << 63) && !near_half(3));
}

/// HOLDS (was BREAK, severity critical — the DP promise of plain
/// `dp_sum`: "each site's released state alone is ε-differentially
/// private … whatever the coordinator does"). Found: `dp_sum(x, 0.0,
/// 1e-319, 1.0)` gave the parity of each site's own row count from its
/// noised state. Now refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_subnormal_bound_of_a_plain_dp_sum_is_refused() {
    let h = plain_dp_sites("SELECT dp_sum(x, 0.0, 1.0, 1.0) AS s FROM t").await;
    refused_with(
        &h,
        "SELECT dp_sum(x, 0.0, 1e-319, 1.0) AS s FROM t",
        "too narrow or too wide",
    )
    .await;
}

/// HOLDS (was BREAK, severity high — the DP promise of `secure_dp_sum`
/// to a hostile analyst, through the honest coordinator). Found: with
/// M = 98,000 · 2^-1074 the grid step M / 2^16 rounded to one subnormal
/// unit, so a row weighed 98,000 grid units where the noise assumed
/// 65,536 (a privacy loss of 1.495 ε), and the answer was exact in a
/// subnormal float. Now refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_subnormal_grid_step_is_refused() {
    let unit = f64::from_bits(1);
    let upper = f64::from_bits(98_000);
    assert_eq!(upper / 65536.0, unit);
    let sql = format!("SELECT secure_dp_sum(x, 0.0, {upper:e}, 1.0) AS s FROM t");
    let h = Hostile::build_with_rows(
        5,
        "SELECT secure_dp_sum(x, 0.0, 1.0, 1.0) AS s FROM t",
        rows_less(0),
        Some(&strict()),
        Some(DisclosurePolicy::default()),
    )
    .await;
    refused_with(&h, &sql, "too narrow or too wide").await;
}

/// HOLDS (was BREAK, severity low — "the time a site takes does not tell
/// its noise"). Found: each `bernoulli_exp(1, 1)` of the geometric's
/// padded high part ran K rational draws and returned "K odd", so its
/// work told its result: geometrics of 3 or more took 1.9 words more
/// than those of 0 (z = 11.6 over 40,000 draws), a whole share 1 word
/// more (z = 4.9). Now each Bernoulli(exp(−γ)) of the geometric draws a
/// fixed 24 times: counted again, the means differ by no more than
/// chance (|z| < 4; here 0.43 of 1,192 words, z = 0.7: the variation left
/// is that of the geometric's rejected tries, which do not follow its
/// value).
#[test]
fn holds_the_work_of_the_geometrics_high_part_does_not_tell_its_size() {
    use fedsql_udfs::dp::sampler::{Scale, geometric, laplace_share};
    use rand::SeedableRng;
    // A count at ε = 1: Δ = 1 grid unit, ε = 2^20 / 2^20.
    let scale = Scale {
        num: 1 << 20,
        den: 1 << 20,
    };
    let stats = |xs: &[f64]| {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, (var / n).sqrt())
    };
    let mut rng = Counting(rand_chacha::ChaCha20Rng::seed_from_u64(15), 0);
    let (mut low, mut high) = (Vec::new(), Vec::new());
    for _ in 0..40_000 {
        let before = rng.1;
        let g = geometric(&mut rng, scale);
        let words = (rng.1 - before) as f64;
        match g {
            0 => low.push(words),
            3.. => high.push(words),
            _ => {}
        }
    }
    let ((m0, e0), (m3, e3)) = (stats(&low), stats(&high));
    let z = (m3 - m0) / (e0 * e0 + e3 * e3).sqrt().max(1e-12);
    assert!(
        z.abs() < 4.0,
        "G = 0: {m0:.2} words ({} draws); G ≥ 3: {m3:.2} words ({} draws); z = {z:.1}",
        low.len(),
        high.len()
    );
    let mut rng = Counting(rand_chacha::ChaCha20Rng::seed_from_u64(16), 0);
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for _ in 0..4_000 {
        let before = rng.1;
        let share = laplace_share(&mut rng, scale, 3);
        let words = (rng.1 - before) as f64;
        match share.unsigned_abs() {
            0 => small.push(words),
            2.. => large.push(words),
            _ => {}
        }
    }
    let ((ms, es), (ml, el)) = (stats(&small), stats(&large));
    let z = (ml - ms) / (es * es + el * el).sqrt().max(1e-12);
    assert!(
        z.abs() < 4.0,
        "share 0: {ms:.2} words; |share| ≥ 2: {ml:.2} words; z = {z:.1}"
    );
}

/// HOLDS. A coordinator lists phantom client names (no keys) to make a
/// session look larger than the federation: a peered site then counts
/// more colluders (c = ⌈n/3⌉ − 1 of the n names), so the share count it
/// accepts is *smaller* (more noise), and the session cannot reach its
/// threshold with the real sites: the shares step refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_phantom_clients_neither_coarsen_the_share_nor_pass_the_threshold() {
    let sql = "SELECT secure_dp_count(*, 1.0) AS n FROM t";
    let h = Hostile::build(5, sql, Some(&strict()), Some(DisclosurePolicy::default())).await;
    let floor = SiteFloor {
        min_secure_clients: 3,
        federation: 5,
    };
    // Over 10 names: c = 3, t ≥ 7, d ≤ 4 — against d ≤ 3 over the 5 real
    // sites at t = 4 (4 − 1); with t = 7, 7 − 3 = 4 shares, and the 7
    // survivors the threshold needs do not exist.
    assert_eq!((floor.least(10), floor.noise_shares(7, 10)), (7, 4));
    let session = SecureSession::fresh((0..10).map(|c| format!("site{c}")).collect())
        .with_threshold(7)
        .with_noise_shares(4);
    let mut keys: Vec<Option<ParticipantKeys>> = vec![None; 10];
    for (c, k) in keys.iter_mut().enumerate().take(5) {
        *k = Some(h.setup(c, &session).await.unwrap().0);
    }
    for c in 0..5 {
        let err = h.share(c, &session, keys.clone()).await.unwrap_err();
        // Under a disclosure policy the reason is withheld (the session
        // has 5 of the 7 sites its threshold needs); nothing is shared.
        assert!(
            err.contains("fewer than the threshold") || err.contains("says nothing more"),
            "{err}"
        );
    }
    // A finer share over the phantom session is refused at setup.
    let finer = SecureSession::fresh((0..10).map(|c| format!("site{c}")).collect())
        .with_threshold(7)
        .with_noise_shares(5);
    let err = h.setup(0, &finer).await.unwrap_err();
    assert!(
        err.contains("cuts each site's DP noise into 5 shares"),
        "{err}"
    );
}

/// HOLDS (with a correctness note). Declared values spelled twice
/// (`0, 0`) or two spellings of one value (`1, 01` on a BIGINT column)
/// make a site release two state rows of one key, each with its own
/// noise share; the site aligns one of them, so every group of the total
/// still carries every site's share. Noted: where the spelling of the
/// declared value differs from the value's text (`01` for 1), the site's
/// rows of that value are dropped and its group is noise only, silently
/// (here every site's rows of g = 1 are missing from the total: the site
/// aligns the later of its two rows of key 1, the empty one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_declared_values_spelled_twice_keep_a_share_on_every_group() {
    let sql = "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g";
    let rows = |c: usize| {
        let n = 6 + c;
        let g: Vec<i64> = (0..n).map(|i| (i % 2) as i64).collect();
        let x: Vec<i64> = (0..n).map(|i| i as i64 + 1).collect();
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from(g)), Arc::new(Int64Array::from(x))],
        )
        .unwrap()
    };
    let mut dp = strict();
    dp.domains.insert(
        "g".into(),
        vec!["0".into(), "0".into(), "1".into(), "01".into()],
    );
    let h =
        Hostile::build_with_rows(5, sql, rows, Some(&dp), Some(DisclosurePolicy::default())).await;
    let mut zero_noise = [0usize; 2];
    let rounds = 12;
    for _ in 0..rounds {
        let round = open_session(&h, &[], session_at(5, 4).with_noise_shares(3)).await;
        assert_eq!(round.groups.num_rows(), 2, "groups 0 and 1");
        let total = honestly_with_colluders(&h, &round).await.unwrap();
        // Group 0: 3 + 4 + 4 + 5 + 5 rows (6..=10 rows, half of them).
        let noise = total.wrapping_sub((0..5).map(|c| (6 + c as u64).div_ceil(2)).sum()) as i64;
        zero_noise[0] += usize::from(noise == 0);
    }
    // 5/3 draws of a count's noise at ε = 1: zero in about a third of
    // rounds; a group without shares would be zero every time.
    assert!(zero_noise[0] * 2 < rounds, "{zero_noise:?}");
}

/// HOLDS (was BREAK, severity critical — the first break over `fedsql
/// worker`s, where the subnormal bound's word told the parity of the 31
/// rows). Now every worker refuses the encoder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_subnormal_bound_is_refused_over_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (_workers, h) = crate::attack54f::hostile_over_workers_with(
        dir.path(),
        site_rows,
        Some(strict()),
        "SELECT secure_dp_sum(x, 0.0, 1.0, 1.0) AS s FROM t",
    )
    .await;
    refused_with(&h, ZERO_STEP_SQL, "too narrow or too wide").await;
    assert_eq!(rows_in_all(&site_rows), 31, "an odd count, as found");
}

/// HOLDS (was BREAK, severity medium — the DP promise of `dp_avg` and
/// `secure_dp_avg`: a row moves the centered sum by at most `levels`).
/// Found: for [2^53, 2^53 + 2] the midpoint rounds to the lower bound
/// while the half range is 1, so a value at the upper bound was centered
/// to 2h and weighed 2 × levels (1.5 ε for the ε debited); two states
/// differing in one such row were 2^21 apart. Now each grid value is
/// clamped to ±levels: they are 2^20 apart, the sensitivity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_rounded_midpoint_leaves_a_row_its_sensitivity_in_dp_avg() {
    let (lower, upper) = (9007199254740992.0f64, 9007199254740994.0f64);
    assert_eq!((lower + upper) / 2.0, lower);
    assert_eq!((upper - lower) / 2.0, 1.0);
    let sql =
        format!("SELECT dp_avg(CAST(x AS DOUBLE) + 1e16, {lower:.1}, {upper:.1}, 1.0) AS m FROM t");
    let mut sums = Vec::new();
    for drop in [0, 1] {
        let h = Hostile::build_with_rows(
            5,
            &sql,
            rows_less(drop),
            Some(&plain_dp()),
            Some(DisclosurePolicy::default()),
        )
        .await;
        let state = h.sites[0]
            .encode(&SiteRequest::new(&h.encoders[0], &h.analyst))
            .await
            .unwrap();
        let batch = state.batch();
        assert_eq!(batch.num_columns(), 2, "count and centered sum");
        sums.push(batch.column(1).as_primitive::<Int64Type>().value(0));
    }
    assert_eq!(sums[0] - sums[1], 1 << 20, "{sums:?}");
}

/// HOLDS (was BREAK, severity critical — the DP promise of `dp_avg` and
/// `secure_dp_avg` with bounds that are normal floats). Found: for
/// [1e308, 1.5e308] the midpoint (lower + upper) / 2 overflowed to +inf,
/// every centered value was −inf (i64::MIN on the grid), and each site's
/// state told the parity of its row count. Now refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_an_overflowing_midpoint_is_refused() {
    let (lower, upper) = (1e308f64, 1.5e308f64);
    assert!(((lower + upper) / 2.0).is_infinite() && ((upper - lower) / 2.0).is_normal());
    let h = plain_dp_sites("SELECT dp_avg(CAST(x AS DOUBLE), 0.0, 1.0, 1.0) AS m FROM t").await;
    refused_with(
        &h,
        "SELECT dp_avg(CAST(x AS DOUBLE), 1e308, 1.5e308, 1.0) AS m FROM t",
        "too far apart",
    )
    .await;
    refused_with(
        &h,
        "SELECT secure_dp_avg(CAST(x AS DOUBLE), 1e308, 1.5e308, 1.0) AS m FROM t",
        "too far apart",
    )
    .await;
}
