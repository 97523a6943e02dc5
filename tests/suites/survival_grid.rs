//! `kaplan_meier` and `logrank_test` on grids coarser than the data
//! (issue 58, point 1), against `testdata/reference/lifetab.R`: the
//! life-table estimate equals `KMsurv::lifetab` on the grouped counts, the
//! log-rank statistic equals `survdiff` on times moved to their interval's
//! end, a notice says the grid groups times (and none says so on a grid of
//! every distinct time), and under a policy a refusal names the intervals
//! under k and a grid that passes.

use fedsql::FedContext;

use crate::lm::{read_csv, value};
use crate::multivariate::{error, number, run, sites};
use crate::support::close;

/// (dataset, the grid's max)
const DATA: &[(&str, f64)] = &[("lung", 1080.0), ("veteran", 1020.0)];
const WIDTHS: &[u32] = &[30, 90, 180];

fn assert_matches(what: &str, got: Option<f64>, want: &str) {
    let Ok(want) = want.parse::<f64>() else {
        // R's NaN where no one is left at risk.
        return;
    };
    let got = got.unwrap_or_else(|| panic!("{what}: NULL, R {want}"));
    assert!(
        close(got, want, 1e-10),
        "{what}: got {got}, R {want} (rel {:.2e})",
        (got - want).abs() / want.abs()
    );
}

#[tokio::test]
async fn the_life_table_on_a_coarse_grid_equals_kmsurv_lifetab() {
    for &(dataset, max) in DATA {
        for &width in WIDTHS {
            let want = read_csv(&format!("lifetab_{dataset}_{width}.csv"));
            for k in [1, 3, 7] {
                let what = format!("{dataset}, width {width}, {k} sites");
                let (ctx, _dir) = sites(dataset, k).await;
                for (method, column) in [("", "surv_end"), (", method=km", "km_grid_end")] {
                    let got = run(
                        &ctx,
                        &format!(
                            "SELECT * FROM kaplan_meier('{dataset}', 'time', 'status', 'width={width}, max={max}{method}')"
                        ),
                    )
                    .await;
                    let notices = ctx.take_notices().join("\n");
                    assert!(
                        notices.contains("the grid groups distinct times"),
                        "{what}: {notices}"
                    );
                    assert_eq!(got[0].num_rows(), want.len(), "{what}");
                    for (i, row) in want.iter().enumerate() {
                        let what = format!("{what}{method}, interval {i}");
                        assert_eq!(
                            value(&got, i, "n_risk"),
                            Some(number(row, "nsubs")),
                            "{what}"
                        );
                        assert_eq!(
                            value(&got, i, "n_event"),
                            Some(number(row, "nevent")),
                            "{what}"
                        );
                        assert_eq!(
                            value(&got, i, "n_censor"),
                            Some(number(row, "nlost")),
                            "{what}"
                        );
                        assert_matches(&what, value(&got, i, "survival"), &row[column]);
                        if method.is_empty() {
                            assert_matches(&what, value(&got, i, "std_err"), &row["se_end"]);
                            // lifetab's survival at the start of the next interval.
                            if let Some(next) = want.get(i + 1) {
                                assert_matches(&what, value(&got, i, "survival"), &next["surv"]);
                                assert_matches(&what, value(&got, i, "std_err"), &next["se_surv"]);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn the_log_rank_test_on_a_coarse_grid_says_so() {
    let want = read_csv("lifetab_logrank.csv");
    for row in &want {
        let (dataset, group, width) = (&row["data"], &row["group"], number(row, "width"));
        let max = DATA.iter().find(|(d, _)| d == dataset).unwrap().1;
        let (ctx, _dir) = sites(dataset, 3).await;
        let got = run(
            &ctx,
            &format!(
                "SELECT * FROM logrank_test('{dataset}', 'time', 'status', '{group}', 'width={width}, max={max}')"
            ),
        )
        .await;
        let what = format!("{dataset} by {group}, width {width}");
        assert_matches(&what, value(&got, 0, "statistic"), &row["statistic"]);
        let notices = ctx.take_notices().join("\n");
        assert!(
            notices.contains("logrank_test: the grid groups distinct times"),
            "{what}: {notices}"
        );
    }
    // Whole days, a one-day grid: every distinct time is a break.
    let (ctx, _dir) = sites("lung", 3).await;
    run(
        &ctx,
        "SELECT * FROM logrank_test('lung', 'time', 'status', 'sex', 'width=1, max=1022')",
    )
    .await;
    run(
        &ctx,
        "SELECT * FROM kaplan_meier('lung', 'time', 'status', 'width=1, max=1022')",
    )
    .await;
    let notices = ctx.take_notices().join("\n");
    assert!(!notices.contains("groups distinct times"), "{notices}");
}

async fn lung_under(k: u32) -> FedContext {
    let ctx = FedContext::new();
    ctx.sql(&format!(
        "CREATE FEDERATED TABLE lung LOCATION 'testdata/lung_sites/' OPTIONS ('min_group_rows' '{k}')"
    ))
    .await
    .unwrap()
    .collect()
    .await
    .unwrap();
    ctx
}

/// A refusal under k says that some interval counts 1 to k − 1 events or
/// censorings at that site, not which, and proposes no grid: either
/// depends on the rows (the nineteenth outside attack read one row's time
/// from the interval a refusal named).
#[tokio::test]
async fn a_refusal_names_no_interval_and_proposes_no_grid() {
    let ctx = lung_under(3).await;
    let first = error(
        &ctx,
        "SELECT * FROM kaplan_meier('lung', 'time', 'status', 'width=30, max=1080')",
    )
    .await;
    assert!(
        first.contains("a life-table interval would count events or censorings of fewer than 3")
            && !first.contains(']')
            && !first.contains("breaks=")
            && first.contains("use wider intervals"),
        "{first}"
    );
}
