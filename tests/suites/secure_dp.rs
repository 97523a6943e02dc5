//! Differential privacy under the masks (issue 54, item 4):
//! `secure_dp_count`, `secure_dp_sum` and `secure_dp_avg` are masked like
//! a secure sum, and each site adds only a Pólya share of the noise, cut
//! for the secure session's threshold t, so that the total over s ≥ t
//! sites carries s/t draws of discrete Laplace noise of the full scale.
//!
//! The statistical tests draw each site's noise from a seeded generator
//! (a test hook no worker or SQL statement can reach); the masks and keys
//! are fresh as in production.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use fedsql::FedContext;
use fedsql::protocol::site::{Site, SiteRequest};
use fedsql::site::local::LocalClient;
use fedsql::site::release::dp::DpPolicy;

use crate::dp::{demo_column, discrete_laplace_variance, one_row};
use crate::support::demo_rows;

/// The demo rows over `clients` in-process sites with `policy`, each with
/// a seeded noise generator of its own when `seed` is given; also the
/// sites themselves.
fn federation(
    clients: usize,
    policy: &DpPolicy,
    seed: Option<u64>,
) -> (FedContext, Vec<Arc<LocalClient>>) {
    crate::dp::dp_federation_with_sites(clients, policy, seed)
}

/// Mean and sample variance.
fn moments(errors: &[f64]) -> (f64, f64) {
    let n = errors.len() as f64;
    let mean = errors.iter().sum::<f64>() / n;
    let var = errors.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// The demo's regions, declared public at every site (so that DP may
/// group by them): each group's total gets its own noise.
const REGIONS: [&str; 4] = ["east", "north", "south", "west"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_dp_totals_are_unbiased_with_the_stated_variance_over_1000_runs() {
    // 1,000 queries, each with four groups: 4,000 independent totals per
    // aggregate, so that 10% is about three standard errors of a variance.
    const REPETITIONS: usize = 1000;
    let rows = demo_rows().1;
    let region = |r: &String| r.split(',').next().unwrap().to_string();
    let visits = demo_column(7);
    let mut true_count = std::collections::BTreeMap::<String, f64>::new();
    let mut true_sum = std::collections::BTreeMap::<String, f64>::new();
    for (r, v) in rows.iter().zip(&visits) {
        *true_count.entry(region(r)).or_default() += 1.0;
        *true_sum.entry(region(r)).or_default() += v.map_or(0, |v| v.clamp(0, 10)) as f64;
    }
    let mut policy = DpPolicy::default();
    policy.set("dp_domain.region", &REGIONS.join(",")).unwrap();
    // 5 sites; the default threshold is 3 (a strict majority): every
    // site's share is 1/3 of the noise, so each total carries 5/3 draws.
    // With the threshold at 5, exactly one draw.
    for (threshold, draws) in [(None, 5.0 / 3.0), (Some(5), 1.0)] {
        let (ctx, _) = federation(5, &policy, Some(threshold.unwrap_or(3)));
        if let Some(t) = threshold {
            ctx.sql(&format!("SET fedsql.secure_threshold = {t}"))
                .await
                .unwrap();
        }
        let (mut counts, mut sums) = (Vec::new(), Vec::new());
        for _ in 0..REPETITIONS {
            let b = one_row(
                &ctx,
                "SELECT region, secure_dp_count(*, 0.5) AS n, secure_dp_sum(visits, 0, 10, 0.5) AS s \
                 FROM clinic GROUP BY region ORDER BY region",
            )
            .await;
            assert_eq!(b.num_rows(), REGIONS.len());
            let names = b.column(0).as_string::<i32>();
            let n = b.column(1).as_primitive::<Int64Type>();
            let s = b.column(2).as_primitive::<Int64Type>();
            for g in 0..b.num_rows() {
                let key = names.value(g);
                counts.push(n.value(g) as f64 - true_count[key]);
                sums.push(s.value(g) as f64 - true_sum[key]);
            }
        }
        // Scale Δ/ε: 1/0.5 for the count, 10/0.5 for the sum.
        for (what, errors, scale) in [("count", &counts, 2.0), ("sum", &sums, 20.0)] {
            let stated = draws * discrete_laplace_variance(scale);
            let (mean, var) = moments(errors);
            let se = (stated / errors.len() as f64).sqrt();
            assert!(
                mean.abs() <= 3.5 * se,
                "threshold {threshold:?}, {what}: mean error {mean} beyond 3.5 SE ({se})"
            );
            assert!(
                (var / stated - 1.0).abs() <= 0.10,
                "threshold {threshold:?}, {what}: variance {var} vs stated {stated}"
            );
        }
    }
}

#[tokio::test]
async fn the_notice_states_the_shares_and_the_noise_and_each_site_debits() {
    let mut policy = DpPolicy::default();
    policy.set("dp_max_epsilon", "2").unwrap();
    let (ctx, _) = federation(5, &policy, None);
    ctx.take_notices();
    let b = one_row(
        &ctx,
        "SELECT secure_dp_count(*), secure_dp_avg(systolic, 80, 200, 0.5) AS m FROM clinic",
    )
    .await;
    assert_eq!(b.schema().field(0).name(), "secure_dp_count(*)");
    let mean = b.column(1).as_primitive::<Float64Type>().value(0);
    assert!((80.0..=200.0).contains(&mean), "{mean}");
    let notices = ctx.take_notices();
    let count = notices
        .iter()
        .find(|n| n.starts_with("secure_dp_count(*)"))
        .unwrap_or_else(|| panic!("a notice for secure_dp_count(*): {notices:?}"));
    // 5 sites, threshold 3, scale 1/ε = 1: sd = sqrt(5/3 · 2p/(1−p)²).
    let sd = (5.0 / 3.0 * discrete_laplace_variance(1.0)).sqrt();
    assert!(
        count.contains(&format!("{sd:.4}")[..5]),
        "{count} (sd {sd})"
    );
    assert!(count.contains("1/3 share"), "{count}");
    assert!(count.contains("5/3 draws"), "{count}");
    assert!(count.contains("under the masks"), "{count}");
    assert!(
        notices.iter().any(|n| n.contains("ε = 1.5 in all")),
        "{notices:?}"
    );
    // Every site debited the query's ε = 1 + 0.5.
    let budget = ctx
        .sql("SHOW PRIVACY BUDGET clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let spent = budget[0].column(2).as_primitive::<Float64Type>();
    assert_eq!(spent.len(), 5);
    for i in 0..5 {
        assert!(
            (spent.value(i) - 1.5).abs() < 1e-9,
            "site {i}: {}",
            spent.value(i)
        );
    }
    let explain = ctx
        .sql("EXPLAIN FEDERATED SELECT secure_dp_sum(visits, 0, 10) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = explain[0].column(0).as_string::<i32>().value(0).to_string();
    assert!(text.contains("added in shares under the masks"), "{text}");
}

#[tokio::test]
async fn a_site_never_hands_over_a_dp_state_under_the_masks_in_plain() {
    // A hostile coordinator asks a site for the plain state of a
    // secure_dp encoder (which would carry only a share of the noise).
    let (ctx, sites) = federation(3, &DpPolicy::default(), None);
    let state = ctx.session().state();
    let plan = state
        .create_logical_plan("SELECT secure_dp_sum(visits, 0, 10, 1.0) FROM clinic")
        .await
        .unwrap();
    let plan = state.optimize(&plan).unwrap();
    let cut = fedsql::coordinator::split::lowest_cut(&plan).unwrap();
    let round = fedsql::coordinator::split::plan_round(&state, &cut)
        .await
        .unwrap();
    let analyst = fedsql::protocol::site::Analyst::session();
    let request = SiteRequest::new(&round.encoder, &analyst);
    let err = sites[0].encode(&request).await.unwrap_err();
    assert!(err.to_string().contains("only masked"), "{err}");
    // Nothing ran, so nothing was spent.
    let budget = ctx
        .sql("SHOW PRIVACY BUDGET clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        budget[0].column(2).as_primitive::<Float64Type>().value(0),
        0.0
    );
}

#[tokio::test]
async fn require_dp_sites_answer_dp_under_the_masks_and_refuse_plain_secure_sums() {
    let mut policy = DpPolicy::default();
    policy.set("require_dp", "true").unwrap();
    let (ctx, _) = federation(3, &policy, None);
    let b = one_row(&ctx, "SELECT secure_dp_count(*) AS n FROM clinic").await;
    assert_eq!(b.num_rows(), 1);
    let err = ctx
        .sql("SELECT secure_sum(visits, 0, 10) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("require_dp"), "{err}");
    assert!(!b.column(0).is_null(0));
}

#[tokio::test]
async fn a_tiny_epsilon_with_wide_bounds_is_refused_before_any_site_samples() {
    // Found by an outside attack: the noise share costs O(Δ/ε) draws, and
    // ε = 10^-6 over [0, 10^6] asked for ~10^12 of them at every site.
    let (ctx, _) = federation(3, &DpPolicy::default(), None);
    let started = std::time::Instant::now();
    let err = ctx
        .sql("SELECT secure_dp_sum(visits, 0, 1000000, 0.000001) FROM clinic")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("grid units"), "{err}");
    assert!(err.contains("larger ε or narrower bounds"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // A small ε on a count (Δ = 1) is cheap and answered.
    let b = one_row(&ctx, "SELECT secure_dp_count(*, 0.001) AS n FROM clinic").await;
    assert_eq!(b.num_rows(), 1);
}
