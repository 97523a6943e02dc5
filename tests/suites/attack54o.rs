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
//! 4. HOLDS: phantom client names inflating a session's size do not
//!    coarsen the noise share (c grows, so d shrinks) and the session
//!    fails at the shares; a declared value spelled twice (or two
//!    spellings of one value) keeps a noise share on every group.
//!
//! Harness: `attack54f`'s `Hostile`, `attack54i`'s `open_session`,
//! `attack54k`'s `session_at` and `honestly_with_colluders`.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use fedsql::protocol::secure::threshold::SiteFloor;
use fedsql::protocol::secure::{ParticipantKeys, SecureSession};
use fedsql::protocol::site::SiteRequest;
use fedsql::site::release::dp::DpPolicy;
use fedsql::site::release::policy::DisclosurePolicy;

use crate::attack54f::{Hostile, schema, site_rows};
use crate::attack54i::open_session;
use crate::attack54k::{honestly_with_colluders, session_at};

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

const ZERO_STEP_SQL: &str = "SELECT secure_dp_sum(x, 0.0, 1e-319, 1.0) AS s FROM t";

/// BREAK (severity critical — the DP promise of `secure_dp_sum` against
/// a coordinator that follows the protocol, no colluder at all).
///
/// Leak: the exact parity of the number of rows with x > 0 over the
/// sites (one row more flips it): the privacy loss is unbounded, for the
/// ε = 1 each site's ledger debits.
///
/// Five peered sites under the strictest DP configuration. The analyst
/// (or coordinator) asks `secure_dp_sum(x, 0.0, 1e-319, 1.0)`: finite
/// bounds, lower < upper, a scale of 2^16 grid units — every check
/// passes. Root cause: the grid step M / 2^16 = 1e-319 / 65536 underflows
/// to 0.0 (`Params::steps`), and `grid(v, 0.0)` is `(+inf) as i64` =
/// i64::MAX for every row with x > 0 (0 for x ≤ 0: NaN as i64). Each
/// row moves the state by 2^63 − 1 grid units where the noise assumes
/// 2^16, so the unmasked word is K · (2^63 − 1) + noise mod 2^64: near
/// 2^63 when K is odd, near 0 when even. (The honest coordinator
/// multiplies the total by the zero step, so its answer is ±0; the
/// hostile one reads the word. Plain `dp_sum` leaks each site's parity
/// the same way: the next test.)
///
/// Fix: refuse bounds whose grid step is not a normal float, and more
/// generally check, where the noise is described (`release_of`), that
/// the largest grid value a clamped value can take (|grid(M, step)|, and
/// for avg/var of ±h, h²) is at most the sensitivity the noise assumes —
/// e.g. require `step.is_normal()` and `(M / step).round() <= levels`;
/// or quantize with the multiplication first (`v · levels / M`), as the
/// secure quantizer does, and saturate at ±levels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_a_subnormal_bound_makes_the_grid_step_zero_and_the_total_tells_a_counts_parity() {
    // Bounds that pass every check, and the step they make.
    let (upper, levels) = (1e-319f64, 65536.0f64);
    assert!(upper.is_finite() && 0.0 < upper && !upper.is_normal());
    assert_eq!(upper / levels, 0.0);
    assert_eq!((upper / 0.0).round_ties_even() as i64, i64::MAX);
    let floor = SiteFloor {
        min_secure_clients: 3,
        federation: 5,
    };
    assert_eq!((floor.least(5), floor.noise_shares(4, 5)), (4, 3));

    // The data set and its neighbour (site 0 with one row fewer).
    for (drop, odd) in [(0, true), (1, false)] {
        let rows = rows_less(drop);
        let k = rows_in_all(&rows);
        assert_eq!(k % 2 == 1, odd, "{k} rows");
        let h = Hostile::build_with_rows(
            5,
            ZERO_STEP_SQL,
            &rows,
            Some(&strict()),
            Some(DisclosurePolicy::default()),
        )
        .await;
        // Sessions run by the protocol, at the threshold and share count
        // the sites accept; the coordinator reads the unmasked word.
        for _ in 0..4 {
            let round = open_session(&h, &[], session_at(5, 4).with_noise_shares(3)).await;
            let word = honestly_with_colluders(&h, &round).await.unwrap();
            assert_eq!(
                near_half(word),
                odd,
                "{k} rows: the total word {word:#018x} tells the parity"
            );
            // What is left once the parity is known is −K plus the noise.
            let rest = word.wrapping_sub(if odd { 1 << 63 } else { 0 }) as i64;
            assert!(rest.unsigned_abs() < 1 << 40, "{rest}");
        }
        // The honest coordinator runs it too (ε debited at every site):
        // its answer is the total times the zero step.
        let batches = h
            .ctx
            .sql(ZERO_STEP_SQL)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let s = batches[0].column(0).as_primitive::<Float64Type>().value(0);
        assert_eq!(s, 0.0);
    }
}

/// BREAK (severity critical — the DP promise of plain `dp_sum`: "each
/// site's released state alone is ε-differentially private … whatever
/// the coordinator does").
///
/// Leak: the parity of each site's own number of rows with x > 0, from
/// its noised state, in one query per site (ε = 1 debited).
///
/// Root cause and fix: as above, on the plain grid (2^20 levels;
/// 1e-319 / 2^20 underflows to 0.0). Each row adds i64::MAX; the noise
/// (`add_noise`, saturating) moves the state by a few units of 2^20.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_a_subnormal_bound_gives_each_sites_count_parity_through_a_plain_dp_sum() {
    let sql = "SELECT dp_sum(x, 0.0, 1e-319, 1.0) AS s FROM t";
    let dp = DpPolicy {
        budget: Some(1000.0),
        require_dp: true,
        ..DpPolicy::default()
    };
    let h = Hostile::build(5, sql, Some(&dp), Some(DisclosurePolicy::default())).await;
    for c in 0..5 {
        let k = site_rows(c).num_rows();
        for _ in 0..3 {
            let state = h.sites[c]
                .encode(&SiteRequest::new(&h.encoders[c], &h.analyst))
                .await
                .unwrap();
            let batch = state.batch();
            let v = batch.column(0).as_primitive::<Int64Type>().value(0);
            // K · (2^63 − 1) mod 2^64: −K when even, 2^63 − K when odd
            // (saturated at i64::MAX by the noise), plus noise of scale 2^20.
            let odd = v > i64::MAX / 2;
            assert_eq!(odd, k % 2 == 1, "site {c}: {k} rows, state {v}");
        }
    }
}

/// BREAK (severity high — the DP promise of `secure_dp_sum` to a hostile
/// analyst, through the honest coordinator).
///
/// Leak: one row moves the released total by 98,000 grid units where the
/// noise is calibrated for 65,536: a privacy loss of 1.495 ε for the ε
/// debited (up to 1.5 ε with these bounds; a finer choice of M gets as
/// close to 1.5 as it likes).
///
/// The analyst asks `secure_dp_sum(x, 0.0, M)` with M = 98,000 · 2^-1074
/// (a subnormal): the grid step M / 2^16 rounds to 2^-1074 (1.495 units
/// to 1), so a row at the bound counts 98,000 steps. The answer is the
/// total times 2^-1074, exact in a subnormal float: answer / 2^-1074 is
/// the noised total in grid units. Two federations that differ in one
/// row of site 0, with the sites' noise seeded alike, answer totals
/// exactly 98,000 apart.
///
/// Root cause: as above (no check that |grid value| ≤ the sensitivity).
/// Fix: as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_a_subnormal_bound_inflates_a_rows_weight_past_the_noises_sensitivity() {
    let unit = f64::from_bits(1);
    let upper = f64::from_bits(98_000);
    assert_eq!(upper / 65536.0, unit);
    assert_eq!((upper / unit).round_ties_even(), 98_000.0);
    let sql = format!("SELECT secure_dp_sum(x, 0.0, {upper:e}, 1.0) AS s FROM t");
    let mut totals = Vec::new();
    for drop in [0, 1] {
        let h = Hostile::build_with_rows(
            5,
            &sql,
            rows_less(drop),
            Some(&strict()),
            Some(DisclosurePolicy::default()),
        )
        .await;
        let batches = h.ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        let s = batches[0].column(0).as_primitive::<Float64Type>().value(0);
        totals.push((s / unit).round() as i64);
    }
    // The same seeded noise: the difference is the one row's weight.
    // 98,000 / 65,536 = 1.495: the privacy loss of the call, in ε.
    assert_eq!(totals[0] - totals[1], 98_000, "{totals:?}");
}

/// A generator that counts the words it hands out (the work of a
/// sampler, without a clock's noise).
struct Counting(rand_chacha::ChaCha20Rng, u64);

impl rand::RngCore for Counting {
    fn next_u32(&mut self) -> u32 {
        self.1 += 1;
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.1 += 1;
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.1 += 1;
        self.0.fill_bytes(dest)
    }
}

impl rand::CryptoRng for Counting {}

/// BREAK (severity low — "the time a site takes does not tell its
/// noise"; a limit worse than documented, which says only the
/// geometric's low part remains).
///
/// Leak: the work of a noise share grows with the geometric's high part
/// v, about 0.48 uniform draws per unit; for a count at ε = 1 (scale
/// 2^20 / 2^20, d = 3) the geometric is v itself, so the draws a setup
/// makes tell the size of the noise it added. Counted here: geometrics
/// of value ≥ 3 take 1.7 more words on average than those of value 0
/// (over 40,000 seeded draws, more than eight standard errors).
///
/// Root cause: `geometric` pads the high part to 48 Bernoulli(exp(−1))
/// draws, but each `bernoulli_exp(1, 1)` runs K rational draws and
/// returns K odd: a success costs 3.19 words on average, a failure 2.44,
/// a discarded draw 2.72; so the 48 draws' work follows v. (Practically
/// a few nanoseconds per unit inside a setup of milliseconds, and one
/// sample per draw.)
///
/// Fix: draw each Bernoulli(exp(−γ)) with a fixed number of rational
/// draws (run the k loop to a fixed bound, e.g. 24, P(K > 24) = 1/23!,
/// keeping the first failure), or draw the high part from fixed work
/// (e.g. compare one uniform against precomputed exp(−j) thresholds in
/// exact rationals); and say in the docs which part still shows.
#[test]
fn break_the_work_of_the_geometrics_high_part_tells_its_size() {
    use fedsql_udfs::dp::sampler::{Scale, geometric, laplace_share};
    use rand::SeedableRng;
    // A count at ε = 1: Δ = 1 grid unit, ε = 2^20 / 2^20.
    let scale = Scale {
        num: 1 << 20,
        den: 1 << 20,
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
    let stats = |xs: &[f64]| {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, (var / n).sqrt())
    };
    let ((m0, e0), (m3, e3)) = (stats(&low), stats(&high));
    let z = (m3 - m0) / (e0 * e0 + e3 * e3).sqrt();
    eprintln!("geometric: G = 0 {m0:.3} words, G >= 3 {m3:.3} words, z = {z:.1}");
    assert!(
        m3 - m0 > 1.0 && z > 8.0,
        "G = 0: {m0:.2} words ({} draws); G ≥ 3: {m3:.2} words ({} draws); z = {z:.1}",
        low.len(),
        high.len()
    );
    // A whole share (two Pólya urns of d = 3): its work still follows the
    // share's size, if more faintly.
    let mut rng = Counting(rand_chacha::ChaCha20Rng::seed_from_u64(16), 0);
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for _ in 0..40_000 {
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
    let z = (ml - ms) / (es * es + el * el).sqrt();
    eprintln!("share: 0 {ms:.3} words, |share| >= 2 {ml:.3} words, z = {z:.1}");
    assert!(
        ml > ms && z > 3.0,
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

/// BREAK (severity critical — the first break over `fedsql worker`s).
/// Five peered workers under the strictest DP configuration; the hostile
/// coordinator runs the session by the protocol over Flight and reads the
/// unmasked word: near 2^63, as the 31 rows of x > 0 are an odd number.
/// Root cause and fix: as `break_a_subnormal_bound_makes_the_grid_step_zero_…`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_a_subnormal_bound_tells_a_counts_parity_over_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (_workers, h) = crate::attack54f::hostile_over_workers_with(
        dir.path(),
        site_rows,
        Some(strict()),
        ZERO_STEP_SQL,
    )
    .await;
    assert_eq!(rows_in_all(&site_rows), 31);
    for _ in 0..2 {
        let round = open_session(&h, &[], session_at(5, 4).with_noise_shares(3)).await;
        let word = honestly_with_colluders(&h, &round).await.unwrap();
        assert!(near_half(word), "{word:#018x}");
    }
}

/// BREAK (severity medium — the DP promise of `dp_avg` and
/// `secure_dp_avg`: a row moves the centered sum by at most `levels`
/// grid units).
///
/// Leak: one row moves the sum of centered values by 2 × levels where
/// the noise (ε/2 of the call) is calibrated for levels: that column
/// costs ε instead of ε/2, the call 1.5 ε instead of ε.
///
/// The bounds [2^53, 2^53 + 2] are finite, ordered and normal; but the
/// midpoint (lower + upper) / 2 rounds (2^54 + 2 is a tie, to even) to
/// 2^53 = lower, while the half range is 1: a value at the upper bound is
/// centered to 2 = 2h, two grid ranges. Two sites' data sets that differ
/// in one row (site 0, all values clamped to the upper bound), with the
/// noise seeded alike, release sums exactly 2^21 apart (plain `dp_avg`,
/// 2^20 levels, as the coordinator sees each site's state).
///
/// Root cause: `Params::mid` and `half_range` are rounded separately, so
/// |clamp(v) − mid| can exceed h. Fix: clamp the centered value to
/// [−h, h] (or its grid value to ±levels) before summing, or take h as
/// max(upper − mid, mid − lower).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_a_rounded_midpoint_doubles_a_rows_weight_in_dp_avg() {
    let (lower, upper) = (9007199254740992.0f64, 9007199254740994.0f64);
    assert_eq!((lower + upper) / 2.0, lower);
    assert_eq!((upper - lower) / 2.0, 1.0);
    let sql =
        format!("SELECT dp_avg(CAST(x AS DOUBLE) + 1e16, {lower:.1}, {upper:.1}, 1.0) AS m FROM t");
    let dp = DpPolicy {
        budget: Some(1000.0),
        require_dp: true,
        ..DpPolicy::default()
    };
    let mut sums = Vec::new();
    for drop in [0, 1] {
        let h = Hostile::build_with_rows(
            5,
            &sql,
            rows_less(drop),
            Some(&dp),
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
    assert_eq!(sums[0] - sums[1], 1 << 21, "{sums:?}");
}

/// BREAK (severity critical — the DP promise of `dp_avg` (and of
/// `secure_dp_avg`), with bounds that are normal floats).
///
/// Leak: the parity of each site's number of rows, from its noised
/// `dp_avg` state (the coordinator sees it), in one query.
///
/// The bounds [1e308, 1.5e308] are finite, ordered and normal, and so is
/// the half range (2.5e307) and its grid step; but the midpoint
/// (lower + upper) / 2 overflows to +inf, every centered value is −inf,
/// and its grid value `(−inf) as i64` is i64::MIN: the centered sum is
/// K · 2^63 mod 2^64 plus noise, i64::MIN for odd K, about 0 for even K.
///
/// Root cause: as the tests above — no check that a grid value stays
/// within ±levels (here the midpoint is not even finite). Fix: compute
/// the midpoint as lower / 2 + upper / 2 (and refuse a non-finite one),
/// and clamp every grid value to the sensitivity the noise assumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_an_overflowing_midpoint_gives_each_sites_count_parity_through_dp_avg() {
    let (lower, upper) = (1e308f64, 1.5e308f64);
    assert!(((lower + upper) / 2.0).is_infinite() && ((upper - lower) / 2.0).is_normal());
    let sql = "SELECT dp_avg(CAST(x AS DOUBLE), 1e308, 1.5e308, 1.0) AS m FROM t";
    let dp = DpPolicy {
        budget: Some(1000.0),
        require_dp: true,
        ..DpPolicy::default()
    };
    let h = Hostile::build(5, sql, Some(&dp), Some(DisclosurePolicy::default())).await;
    for c in 0..5 {
        let k = site_rows(c).num_rows();
        for _ in 0..3 {
            let state = h.sites[c]
                .encode(&SiteRequest::new(&h.encoders[c], &h.analyst))
                .await
                .unwrap();
            let v = state.batch().column(1).as_primitive::<Int64Type>().value(0);
            assert_eq!(v < i64::MIN / 2, k % 2 == 1, "site {c}: {k} rows, sum {v}");
        }
    }
}
