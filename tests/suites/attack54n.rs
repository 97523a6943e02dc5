//! The fourteenth outside attack set: secure aggregation and DP under the
//! masks (`secure_dp_*`) after the thirteenth review's fix (one DP share
//! count d in the session, bound in every envelope and signed list), by a
//! hostile coordinator (colluding with sites up to what a peered site
//! tolerates) and by an analyst writing SQL.
//!
//! 1. **A group only some honest sites declare.** Under DP a site groups
//!    only by declared public columns, and releases a noisy state for
//!    every value *it* declares (`dp_domain.<column>`). Each data owner
//!    declares its own values; nothing made the federation's lists agree.
//!    Found (high): at the masking step a site aligned its (already
//!    noised) state to the coordinator's group list with an *exact zero*
//!    for a group it does not hold, so a group only the victim declares
//!    carried the victim's own 1/d share and nothing else. HOLDS now: a
//!    site with a noised state aligns only to its own groups, and the
//!    coordinator names the sites whose groups differ before masking.
//! 2. **The time a site takes to draw its noise share.** Found (medium):
//!    the Pólya urn that cuts a geometric into NB(1/d) ran once per unit
//!    of it, inside the setup request, so timing each site's setup told
//!    how large its share was. HOLDS now: the urn runs a fixed number of
//!    steps (`sampler::urn_steps`), so a share's draws do not follow its
//!    size.
//! 3. HOLDS: a session refused for its threshold or share count spends no
//!    ε; a share count shown differently to different sites opens no
//!    envelope; a wire session without a share count or threshold is
//!    refused by every worker.
//!
//! Harness: `attack54f`'s `Hostile`, `attack54i`'s `open_session`,
//! `attack54k`'s `session_at` and `honestly_with_colluders`, `attack54l`'s
//! `noise_pmf` and `privacy_loss`.

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use fedsql::coordinator::federated_table::FederatedTable;
use fedsql::protocol::secure::threshold::SiteFloor;
use fedsql::protocol::site::{Analyst, Site};
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::{DpPolicy, DpSite};
use fedsql::site::release::dp_budget::Ledger;
use fedsql::site::release::identity::SiteIdentity;
use fedsql::site::release::policy::DisclosurePolicy;

use crate::attack54f::{Hostile, schema, site_rows};
use crate::attack54i::open_session;
use crate::attack54k::{honestly_with_colluders, session_at};
use crate::attack54l::{noise_pmf, privacy_loss};

/// The victim's rows of its rare group: `k` rows with g = −1.
fn rare_rows(k: usize) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![-1i64; k])),
            Arc::new(Int64Array::from((1..=k as i64).collect::<Vec<_>>())),
        ],
    )
    .unwrap()
}

/// The strictest DP configuration a data owner can give a table: a
/// finite budget, `require_dp`, `require_secure`, and `g` declared public
/// with the values `domain`.
fn strict_dp(domain: &[&str]) -> DpPolicy {
    let mut p = DpPolicy {
        budget: Some(1000.0),
        require_dp: true,
        require_secure: true,
        ..DpPolicy::default()
    };
    p.domains.insert(
        "g".into(),
        domain.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
    );
    p
}

/// `n` peered in-process sites (every identity listed by every site)
/// under a worker's default disclosure policy, site `c` holding `rows(c)`
/// under the DP settings `dp(c)` (a seeded generator, so that the noise
/// tests are deterministic); the coordinator's encoder is `sql`'s.
async fn federation_with(
    n: usize,
    sql: &str,
    rows: &dyn Fn(usize) -> RecordBatch,
    dp: &dyn Fn(usize) -> DpPolicy,
) -> Hostile {
    let ctx = fedsql::FedContext::new();
    let identities: Vec<Arc<SiteIdentity>> = (0..n)
        .map(|_| Arc::new(SiteIdentity::generate().unwrap().0))
        .collect();
    let listed: Arc<[[u8; 32]]> = identities.iter().map(|i| i.public_key()).collect();
    let sites: Vec<Arc<dyn Site>> = (0..n)
        .map(|c| {
            let name = format!("site{c}");
            let site = LocalClient::from_batches(
                &name,
                &format!("memory:{name}"),
                schema(),
                vec![rows(c)],
                ctx.site_engine(),
            )
            .unwrap()
            .with_identity(Some(Arc::clone(&identities[c])), listed.clone())
            .with_policy(Some(DisclosurePolicy::default()))
            .served_remotely(false)
            .with_dp(Arc::new(DpSite::seeded_for_tests(
                dp(c),
                Arc::new(Ledger::in_memory()),
                0x14_5eed + c as u64,
            )));
            Arc::new(site) as Arc<dyn Site>
        })
        .collect();
    ctx.register_federated(FederatedTable::new("t", schema(), sites.clone()))
        .unwrap();
    let encoder = crate::attack54f::encoder_of(&ctx, sql).await;
    Hostile {
        ctx,
        encoders: vec![encoder; n],
        sites,
        analyst: Analyst::session(),
        identities,
    }
}

/// `rounds` sessions of `h`'s five sites at t = 4, d = 3, run honestly
/// by the hostile coordinator, which unmasks the group −1 (the first in
/// the canonical order): its total less the victim's 6 rows, each time.
async fn rare_group_noises(h: &Hostile, rounds: usize) -> Vec<i64> {
    let mut noises = Vec::new();
    for _ in 0..rounds {
        let round = open_session(h, &[], session_at(5, 4).with_noise_shares(3)).await;
        assert_eq!(round.groups.num_rows(), 2, "groups −1 and 0");
        let total = honestly_with_colluders(h, &round).await.unwrap();
        noises.push(total.wrapping_sub(6) as i64);
    }
    noises
}

const GROUPED_DP_SQL: &str = "SELECT g, secure_dp_count(*, 1.0) AS n FROM t GROUP BY g";

/// HOLDS (was BREAK, severity high — the DP promise of `secure_dp_*`
/// against the hostile coordinator a peered site is configured for, with
/// no colluder at all). Five peered sites (one federation, c = 1), each
/// under the strictest DP configuration (finite budget, `require_dp`,
/// `require_secure`), grouping by the declared column `g`. The victim
/// (site 0) declares g ∈ {−1, 0} — −1 is a category only it has (a rare
/// ward, a site-specific code) — and holds 6 rows of g = −1; sites 1 to 4
/// declare g ∈ {0}, the values they have.
///
/// Found: run honestly at t = 4, d = 3, the group −1 total was the
/// victim's count plus the victim's own 1/3 share and nothing else (zero
/// noise in three rounds of four; a privacy loss of 2.08 ε, 3.19 ε at
/// d = 9), as the other sites filled the group with an exact zero; and
/// the honest coordinator unmasked it before withholding it.
///
/// Now: the honest coordinator refuses the query after the setup, naming
/// the four sites that declare fewer groups; the hostile coordinator's
/// round stops at the masking step, where each of sites 1 to 4 refuses a
/// group outside its declared domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_group_only_the_victim_declares_is_refused_by_the_other_sites() {
    let h = federation_with(
        5,
        GROUPED_DP_SQL,
        &|c| if c == 0 { rare_rows(6) } else { site_rows(c) },
        &|c| {
            if c == 0 {
                strict_dp(&["-1", "0"])
            } else {
                strict_dp(&["0"])
            }
        },
    )
    .await;
    // What the coordinator computes for five peered sites of one
    // federation, and what every site accepts.
    let floor = SiteFloor {
        min_secure_clients: 3,
        federation: 5,
    };
    assert_eq!(floor.least(5), 4);
    assert_eq!(floor.noise_shares(4, 5), 3);

    // The honest coordinator explains before any site masks.
    let err = h
        .ctx
        .sql(GROUPED_DP_SQL)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'site1', 'site2', 'site3', 'site4' declare(s) fewer of the 2 groups")
            && err.contains("declare the same dp_domain"),
        "{err}"
    );

    // The hostile coordinator: the same round, run honestly, stops at the
    // masking step.
    for _ in 0..3 {
        let round = open_session(&h, &[], session_at(5, 4).with_noise_shares(3)).await;
        assert_eq!(round.groups.num_rows(), 2, "groups −1 and 0");
        let err = honestly_with_colluders(&h, &round).await.unwrap_err();
        assert!(
            err.contains("outside this site's declared dp_domain"),
            "{err}"
        );
    }
    // What it was: a 1/3 share's privacy loss, and at d = 9.
    let q = (-1.0f64).exp();
    assert!((noise_pmf(1.0 / 3.0, q, 1)[0] - 0.748).abs() < 1e-3);
    assert!(privacy_loss(1.0 / 3.0, q) > 2.0);
    assert!(privacy_loss(1.0 / 9.0, q) > 3.1);
}

/// HOLDS (the control of the test above). The same five sites, every one
/// declaring g ∈ {−1, 0}: the group −1 total carries every site's 1/3
/// share, 5/3 of a draw, zero in about one round of three (0.32; a 1/3 share
/// alone: three of four).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_control_a_group_every_site_declares_carries_every_sites_share() {
    let h = federation_with(
        5,
        GROUPED_DP_SQL,
        &|c| if c == 0 { rare_rows(6) } else { site_rows(c) },
        &|_| strict_dp(&["-1", "0"]),
    )
    .await;
    let rounds = 60;
    let noises = rare_group_noises(&h, rounds).await;
    let zeros = noises.iter().filter(|&&z| z == 0).count();
    let q = (-1.0f64).exp();
    assert!((noise_pmf(5.0 / 3.0, q, 1)[0] - 0.323).abs() < 1e-3);
    assert!(zeros * 2 < rounds, "{zeros} of {rounds} zero: {noises:?}");
}

/// Five `fedsql worker`s (in this process), worker `c` serving `rows(c)`
/// as `t` under the default disclosure policy and the DP settings
/// `dp(c)`, every identity listed as a peer by every worker
/// (`attack54f::hostile_over_workers_each`).
async fn workers_with(
    dir: &std::path::Path,
    rows: &dyn Fn(usize) -> RecordBatch,
    dp: &dyn Fn(usize) -> DpPolicy,
    sql: &str,
) -> (crate::remote::Workers, Hostile) {
    crate::attack54f::hostile_over_workers_each(dir, 5, rows, &|c| Some(dp(c)), sql).await
}

/// HOLDS (was BREAK: the same as the group test above, over `fedsql
/// worker`s). Five peered workers under the strictest DP configuration;
/// worker 4, the victim, declares `dp_domain.g = [-1, 0]` and holds 6
/// rows of g = −1, workers 0 to 3 declare `[0]`. Found: in a session of
/// workers 0 to 3 with the group −1 added to the group list, each honest
/// worker aligned to it, masked, signed and revealed, and the group's
/// unmasked total was exactly 0: no noise on a group it does not
/// declare. Now every one of them refuses that group list at the masking
/// step, in the round with the victim as in the one without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_workers_refuse_a_group_list_beyond_their_declared_groups() {
    let dir = tempfile::TempDir::new().unwrap();
    let (_workers, h) = workers_with(
        dir.path(),
        &|c| if c == 4 { rare_rows(6) } else { site_rows(c) },
        &|c| {
            if c == 4 {
                strict_dp(&["-1", "0"])
            } else {
                strict_dp(&["0"])
            }
        },
        GROUPED_DP_SQL,
    )
    .await;
    // The whole round, the victim among the survivors.
    let round = open_session(&h, &[], session_at(5, 4).with_noise_shares(3)).await;
    assert_eq!(round.groups.num_rows(), 2, "groups −1 and 0");
    let err = honestly_with_colluders(&h, &round).await.unwrap_err();
    assert!(
        err.contains("outside this site's declared dp_domain"),
        "{err}"
    );
    // The honest workers alone, the group −1 added by the coordinator.
    let honest = crate::attack54j::asking_first(h, 4);
    let mut round = open_session(&honest, &[], session_at(4, 4).with_noise_shares(3)).await;
    assert_eq!(round.groups.num_rows(), 1, "they announce the group 0 only");
    let rare = RecordBatch::try_new(
        round.groups.schema(),
        vec![Arc::new(Int64Array::from(vec![-1i64]))],
    )
    .unwrap();
    round.groups = fedsql::protocol::secure::union_groups(&[round.groups.clone(), rare]).unwrap();
    let err = honestly_with_colluders(&honest, &round).await.unwrap_err();
    assert!(
        err.contains("outside this site's declared dp_domain"),
        "{err}"
    );
}

const DP_SQL: &str = "SELECT secure_dp_count(*, 1.0) AS n FROM t";

/// HOLDS (ε accounting of refused sessions). Five peered sites under the
/// strictest DP configuration, a budget of 3. A session a site refuses
/// for its threshold or its share count spends nothing (the checks run
/// before the debit); a session it sets up spends ε = 1; a second setup
/// under a used session id is refused too, but after the run — it
/// spends ε like any run that fails (errs on the data owner's side: a
/// hostile coordinator can spend an analyst's budget with fresh
/// sessions anyway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_session_refused_for_its_threshold_or_share_count_spends_no_epsilon() {
    let mut dp = strict_dp(&["0"]);
    dp.budget = Some(3.0);
    let h = federation_with(5, DP_SQL, &site_rows, &|_| dp.clone()).await;
    let spent = |h: &Hostile| {
        let site = h.sites[0].clone();
        let analyst = h.analyst.clone();
        async move {
            site.privacy_budget("t", &analyst)
                .await
                .unwrap()
                .unwrap()
                .spent
        }
    };
    for session in [
        session_at(5, 4).with_noise_shares(4),
        session_at(5, 4).with_noise_shares(0),
        session_at(5, 3).with_noise_shares(2),
        session_at(5, 6).with_noise_shares(3),
    ] {
        assert!(h.setup(0, &session).await.is_err(), "{session:?}");
        assert_eq!(spent(&h).await, 0.0, "{session:?}");
    }
    let session = session_at(5, 4).with_noise_shares(3);
    assert!(h.setup(0, &session).await.is_ok());
    assert_eq!(spent(&h).await, 1.0);
    let replayed = h.setup(0, &session).await.unwrap_err();
    assert!(replayed.contains("refused"), "{replayed}");
    assert_eq!(spent(&h).await, 2.0, "the replayed setup ran, and spent");
}

/// HOLDS (sessions differing between sites in their share count). Five
/// peered sites (t = 4, each accepting d ≤ 3). The coordinator shows the
/// victim d = 3 and the other sites d = 2 under the same id, t and
/// names, hoping the victim's count and the others' would not be
/// compared: every envelope binds d, so the victim opens none of the
/// others' envelopes and masks nothing (and they none of its).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_victim_shown_another_share_count_than_its_neighbours_opens_no_envelope() {
    let h = Hostile::build(5, DP_SQL, Some(&DpPolicy::default()), None).await;
    let three = session_at(5, 4).with_noise_shares(3);
    let two = three.clone().with_noise_shares(2);
    let mut keys = Vec::new();
    let mut groups = Vec::new();
    for c in 0..5 {
        let s = if c == 0 { &three } else { &two };
        let (k, g) = h.setup(c, s).await.unwrap();
        keys.push(Some(k));
        groups.push(g);
    }
    let groups = fedsql::protocol::secure::union_groups(&groups).unwrap();
    let mut envelopes = Vec::new();
    for c in 0..5 {
        let s = if c == 0 { &three } else { &two };
        envelopes.extend(h.share(c, s, keys.clone()).await.unwrap());
    }
    let to = |c: u32| -> Vec<_> { envelopes.iter().filter(|e| e.to == c).cloned().collect() };
    let err = h.mask(0, &three, to(0), &groups).await.unwrap_err();
    assert!(err.contains("does not open"), "{err}");
    let err = h.mask(1, &two, to(1), &groups).await.unwrap_err();
    assert!(err.contains("does not open"), "{err}");
}

/// HOLDS (a Flight worker sent a session without a share count). A
/// coordinator that leaves `noise_shares` out of the wire message (0, a
/// proto3 default), or sends a threshold of 0, is refused by every worker
/// at setup, with the rule's words, before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_workers_refuse_a_session_without_a_share_count_or_threshold() {
    let dir = tempfile::TempDir::new().unwrap();
    let (_workers, h) = workers_with(dir.path(), &site_rows, &|_| strict_dp(&["0"]), DP_SQL).await;
    for c in 0..5 {
        let err = h
            .setup(c, &session_at(5, 4).with_noise_shares(0))
            .await
            .unwrap_err();
        assert!(err.contains("without a DP share count"), "{err}");
        let err = h
            .setup(c, &session_at(5, 0).with_noise_shares(1))
            .await
            .unwrap_err();
        assert!(err.contains("must be at least 3"), "{err}");
    }
    assert!(
        h.setup(0, &session_at(5, 4).with_noise_shares(3))
            .await
            .is_ok()
    );
}

/// The ranks of `xs` (0 for the least), ties in order.
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    for (rank, &i) in order.iter().enumerate() {
        r[i] = rank as f64;
    }
    r
}

/// Spearman's rank correlation of `xs` and `ys`.
fn spearman(xs: &[f64], ys: &[f64]) -> f64 {
    let (a, b) = (ranks(xs), ranks(ys));
    let n = a.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let cov: f64 = a.iter().zip(&b).map(|(x, y)| (x - mean) * (y - mean)).sum();
    let var: f64 = a.iter().map(|x| (x - mean).powi(2)).sum();
    cov / var
}

/// A generator that counts the words it hands out: the work of a sampler,
/// without the noise of a clock.
pub(crate) struct Counting(pub(crate) rand_chacha::ChaCha20Rng, pub(crate) u64);

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

/// HOLDS (was BREAK, severity medium — a side channel that read the noise
/// itself). A site draws its share of a `secure_dp_*` call's noise inside
/// the setup request. Found: the Pólya urn that splits the geometric G
/// into NB(1/d) ran once per unit of G, so the setup's duration grew with
/// G_a + G_b, which bounds the share a − b; timing the honest setups, the
/// coordinator knew which rounds carried little noise (the sampler alone
/// at scale 2^16, d = 3: mean |share| 8.5k in the fastest quarter against
/// 54k in the slowest, rank correlation 0.4; end to end 24k against 65k).
/// (Jin et al., "Are we there yet? Timing and floating-point attacks on
/// differential privacy systems", IEEE S&P 2022, for the class.)
///
/// Now the urn runs `urn_steps(scale)` steps whatever G (exceeded with
/// probability exp(−23)), and the geometric's high part draws at least
/// 48 Bernoulli(exp(−1)): the words a share draws — the work whose time
/// the coordinator sees — no longer follow its size. Counted, not timed
/// (a clock in a shared test machine is noisier than the channel).
#[test]
fn holds_the_work_of_a_noise_share_does_not_tell_its_size() {
    use fedsql_udfs::dp::sampler::{Scale, laplace_share, urn_steps};
    use rand::SeedableRng;
    let scale = Scale {
        num: 1 << 12,
        den: 1,
    };
    let mut rng = Counting(rand_chacha::ChaCha20Rng::seed_from_u64(7), 0);
    let mut words = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..200 {
        let before = rng.1;
        let share = laplace_share(&mut rng, scale, 3);
        words.push((rng.1 - before) as f64);
        sizes.push(share.unsigned_abs() as f64);
    }
    let (least, most) = (
        words.iter().copied().fold(f64::INFINITY, f64::min),
        words.iter().copied().fold(0.0, f64::max),
    );
    // Two urns of fixed length each; the geometrics' few draws vary.
    assert!(least >= 2.0 * urn_steps(scale) as f64, "{least}");
    assert!(most - least < 1000.0, "{least} to {most} words");
    // Shares small and large alike, and no rank correlation to speak of.
    assert!(sizes.iter().any(|&s| s < 300.0) && sizes.iter().any(|&s| s > 8000.0));
    let rho = spearman(&words, &sizes);
    assert!(
        rho.abs() < 0.25,
        "rank correlation of words and |share|: {rho}"
    );
}
