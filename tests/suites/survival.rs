//! `kaplan_meier`, `logrank_test`, `coxph` and `coxph_stats` against R's
//! `survival` package (testdata/reference/survival_multivariate.R: `survfit`
//! and its `summary` at every distinct time, `survdiff`, and `coxph(... +
//! strata(site))` with the tests' site assignment), on `lung` and
//! `veteran` split unevenly over 1, 3 and 7 sites (with 7, one site is
//! empty and one holds one row).

use datafusion::arrow::array::{Array, AsArray, RecordBatch};

use crate::lm::{read_csv, value};
use crate::multivariate::{error, number, run, sites};
use crate::support::close;

fn assert_close(what: &str, got: Option<f64>, want: &str, rel: f64) {
    match (got, want.parse::<f64>().ok()) {
        (None, None) => {}
        (Some(g), Some(w)) => assert!(
            close(g, w, rel),
            "{what}: got {g}, R {w} (rel {:.2e})",
            (g - w).abs() / w.abs()
        ),
        (g, _) => panic!("{what}: got {g:?}, R {want:?}"),
    }
}

/// `'breaks=0 t1 t2 ...'`: a break at every distinct time of a reference table.
fn every_time(reference: &[std::collections::HashMap<String, String>]) -> String {
    let mut times: Vec<f64> = reference.iter().map(|r| number(r, "time")).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let times: Vec<String> = times.iter().map(|t| t.to_string()).collect();
    format!("breaks=0 {}", times.join(" "))
}

fn strata(batches: &[RecordBatch]) -> Vec<Option<String>> {
    let column = batches[0]
        .column_by_name("stratum")
        .unwrap()
        .as_string::<i32>();
    (0..column.len())
        .map(|i| (!column.is_null(i)).then(|| column.value(i).to_string()))
        .collect()
}

/// (dataset, `by` column or "", reference)
const CURVES: &[(&str, &str, &str)] = &[
    ("lung", "", "km_lung"),
    ("lung", "sex", "km_lung_sex"),
    ("veteran", "", "km_veteran"),
    ("veteran", "trt", "km_veteran_trt"),
];

#[tokio::test]
async fn kaplan_meier_on_every_distinct_time_equals_r_survfit() {
    for &(dataset, by, reference) in CURVES {
        let want = read_csv(&format!("{reference}.csv"));
        let mut options = every_time(&want);
        if !by.is_empty() {
            options.push_str(&format!(", by={by}"));
        }
        for k in [1, 3, 7] {
            let what = format!("{reference} over {k} sites");
            let (ctx, _dir) = sites(dataset, k).await;
            let got = run(
                &ctx,
                &format!("SELECT * FROM kaplan_meier('{dataset}', 'time', 'status', '{options}')"),
            )
            .await;
            assert_eq!(got.len(), 1, "{what}");
            assert_eq!(got[0].num_rows(), want.len(), "{what}");
            let names = strata(&got);
            for (i, row) in want.iter().enumerate() {
                let what = format!("{what}, row {i} (time {})", row["time"]);
                let stratum = (!row["stratum"].is_empty()).then(|| row["stratum"].clone());
                assert_eq!(names[i], stratum, "{what}");
                assert_eq!(
                    value(&got, i, "time_upper"),
                    Some(number(row, "time")),
                    "{what}"
                );
                for c in ["n_risk", "n_event", "n_censor"] {
                    assert_eq!(value(&got, i, c), Some(number(row, c)), "{what}: {c}");
                }
                for c in ["survival", "std_err", "conf_low", "conf_high"] {
                    assert_close(&format!("{what}: {c}"), value(&got, i, c), &row[c], 1e-10);
                }
            }
        }
    }
}

#[tokio::test]
async fn kaplan_meier_on_a_coarse_grid_counts_per_interval() {
    let (ctx, _dir) = sites("lung", 3).await;
    let got = run(
        &ctx,
        "SELECT * FROM kaplan_meier('lung', 'time', 'status', 'width=365, max=1100')",
    )
    .await;
    // (0, 365], (365, 730], (730, 1095], (1095, 1100]
    assert_eq!(got[0].num_rows(), 4);
    assert_eq!(value(&got, 0, "n_risk"), Some(228.0));
    assert_eq!(value(&got, 2, "time_upper"), Some(1095.0));
    assert_eq!(value(&got, 3, "time_upper"), Some(1100.0));
    let events: f64 = (0..4).map(|i| value(&got, i, "n_event").unwrap()).sum();
    let censored: f64 = (0..4).map(|i| value(&got, i, "n_censor").unwrap()).sum();
    assert_eq!((events, censored), (165.0, 63.0));
}

#[tokio::test]
async fn kaplan_meier_errors_and_dropped_rows() {
    let (ctx, _dir) = sites("lung", 7).await;
    let e = error(
        &ctx,
        "SELECT * FROM kaplan_meier('lung', 'time', 'status', 'breaks=0 30 30 90')",
    )
    .await;
    assert!(
        e.contains("breaks must be increasing: 30 is followed by 30"),
        "{e}"
    );
    let e = error(
        &ctx,
        "SELECT * FROM kaplan_meier('lung', 'time', 'status', 'max=30')",
    )
    .await;
    assert!(e.contains("declare the time grid"), "{e}");
    let e = error(
        &ctx,
        "SELECT * FROM kaplan_meier('SELECT time - 100 AS time, status FROM lung', 'time', 'status', 'width=30, max=900')",
    )
    .await;
    // 31 rows of lung have time <= 100, 1 of them exactly 100.
    let negative = read_csv("lung.csv")
        .iter()
        .filter(|r| number(r, "time") < 100.0)
        .count();
    assert!(
        e.contains(&format!("{negative} rows have a negative time")),
        "{e}"
    );
    // NULL times are dropped, and a notice says how many.
    let old = read_csv("lung.csv")
        .iter()
        .filter(|r| number(r, "age") > 70.0)
        .count();
    ctx.take_notices();
    run(
        &ctx,
        "SELECT * FROM kaplan_meier('SELECT CASE WHEN age > 70 THEN NULL ELSE time END AS time, status FROM lung', 'time', 'status', 'width=30, max=900')",
    )
    .await;
    let notices = ctx.take_notices().join("\n");
    assert!(
        notices.contains(&format!(
            "kaplan_meier: {old} rows dropped (a NULL time or event)"
        )),
        "{notices}"
    );
}

/// (dataset, group, reference)
const LOGRANKS: &[(&str, &str, &str)] = &[
    ("lung", "sex", "logrank_lung_sex"),
    ("veteran", "celltype", "logrank_veteran_celltype"),
    ("veteran", "trt", "logrank_veteran_trt"),
];

#[tokio::test]
async fn logrank_test_equals_r_survdiff() {
    for &(dataset, group, reference) in LOGRANKS {
        let want = &read_csv(&format!("{reference}.csv"))[0];
        let grid = every_time(&read_csv(&format!("{dataset}.csv")));
        for k in [1, 3, 7] {
            let what = format!("{reference} over {k} sites");
            let (ctx, _dir) = sites(dataset, k).await;
            let got = run(
                &ctx,
                &format!(
                    "SELECT * FROM logrank_test('{dataset}', 'time', 'status', '{group}', '{grid}')"
                ),
            )
            .await;
            assert_close(
                &what,
                value(&got, 0, "statistic"),
                &want["statistic"],
                1e-10,
            );
            assert_eq!(value(&got, 0, "parameter"), Some(number(want, "parameter")));
            assert_close(&what, value(&got, 0, "p_value"), &want["p_value"], 1e-8);
        }
    }
}

const LUNG: &str = "Surv(time, status) ~ age + sex + ph_ecog";
const VETERAN: &str = "Surv(time, status) ~ karno + age + diagtime + trt + C(celltype)";

/// Compares `coxph` and `coxph_stats` with R's reference files.
async fn assert_cox(dataset: &str, formula: &str, ties: &str, k: usize, reference: &str) {
    let what = format!("{reference} over {k} sites");
    let (ctx, _dir) = sites(dataset, k).await;
    let args = format!("'{dataset}', '{formula}', 'ties={ties}'");
    let got = run(&ctx, &format!("SELECT * FROM coxph({args})")).await;
    let want = read_csv(&format!("{reference}.coef.csv"));
    assert_eq!(got[0].num_rows(), want.len(), "{what}");
    for (i, row) in want.iter().enumerate() {
        let what = format!("{what}: {}", row["term"]);
        if row["estimate"].is_empty() {
            // Aliased (R: NA): constant within every site's stratum.
            assert_eq!(value(&got, i, "estimate"), None, "{what}");
            assert_eq!(value(&got, i, "std_error"), None, "{what}");
            continue;
        }
        assert_close(&what, value(&got, i, "estimate"), &row["estimate"], 1e-6);
        assert_close(
            &what,
            value(&got, i, "exp_estimate"),
            &row["exp_estimate"],
            1e-6,
        );
        for c in ["std_error", "statistic", "conf_low", "conf_high"] {
            assert_close(&format!("{what} {c}"), value(&got, i, c), &row[c], 1e-5);
        }
        assert_close(
            &format!("{what} p"),
            value(&got, i, "p_value"),
            &row["p_value"],
            1e-4,
        );
    }
    let stats = run(&ctx, &format!("SELECT * FROM coxph_stats({args})")).await;
    let want = &read_csv(&format!("{reference}.stats.csv"))[0];
    assert_close(&what, value(&stats, 0, "loglik"), &want["loglik"], 1e-8);
    assert_close(
        &what,
        value(&stats, 0, "loglik_null"),
        &want["loglik_null"],
        1e-8,
    );
    for (ours, theirs) in [("n", "n"), ("n_event", "n_event"), ("df", "df")] {
        assert_eq!(
            value(&stats, 0, ours),
            Some(number(want, theirs)),
            "{what}: {ours}"
        );
    }
    for (ours, theirs) in [
        ("concordance", "concordance"),
        ("wald_statistic", "wald"),
        ("score_statistic", "score"),
        ("lr_statistic", "lr"),
    ] {
        assert_close(
            &format!("{what}: {ours}"),
            value(&stats, 0, ours),
            &want[theirs],
            1e-6,
        );
    }
    assert_eq!(
        value(&stats, 0, "iterations"),
        Some(number(want, "iterations")),
        "{what}"
    );
}

#[tokio::test]
async fn coxph_stratified_by_site_equals_r_efron() {
    for k in [1, 3, 7] {
        assert_cox("lung", LUNG, "efron", k, &format!("cox_lung_efron_{k}")).await;
        assert_cox(
            "veteran",
            VETERAN,
            "efron",
            k,
            &format!("cox_veteran_efron_{k}"),
        )
        .await;
    }
}

#[tokio::test]
async fn coxph_stratified_by_site_equals_r_breslow() {
    for k in [1, 3, 7] {
        assert_cox("lung", LUNG, "breslow", k, &format!("cox_lung_breslow_{k}")).await;
        assert_cox(
            "veteran",
            VETERAN,
            "breslow",
            k,
            &format!("cox_veteran_breslow_{k}"),
        )
        .await;
    }
}

#[tokio::test]
async fn coxph_with_strata_within_sites() {
    let formula = "Surv(time, status) ~ age + ph_ecog + strata(sex)";
    for ties in ["efron", "breslow"] {
        assert_cox(
            "lung",
            formula,
            ties,
            3,
            &format!("cox_lung_strata_sex_{ties}_3"),
        )
        .await;
    }
}

#[tokio::test]
async fn coxph_errors_name_the_problem() {
    let (ctx, _dir) = sites("lung", 7).await;
    let e = error(
        &ctx,
        "SELECT * FROM coxph('SELECT time, 0 AS status, age FROM lung', 'Surv(time, status) ~ age')",
    )
    .await;
    assert!(e.contains("no events at any site"), "{e}");
    let e = error(
        &ctx,
        "SELECT * FROM coxph('SELECT time - 100 AS time, status, age FROM lung', 'Surv(time, status) ~ age')",
    )
    .await;
    assert!(e.contains("rows have a negative time"), "{e}");
    let e = error(&ctx, "SELECT * FROM coxph('lung', 'time ~ age')").await;
    assert!(e.contains("the response must be Surv(time, event)"), "{e}");
    let e = error(
        &ctx,
        "SELECT * FROM coxph('lung', 'Surv(time, status) ~ age', 'ties=exact')",
    )
    .await;
    assert!(e.contains("unknown ties method `exact`"), "{e}");
}

/// A site whose rows are in several files runs `cox_step` over several
/// partitions: the partial stages hand their rows to the site's own reduce,
/// so the site is still one stratum, and what leaves it is fixed-size.
#[tokio::test]
async fn coxph_site_rows_stay_at_the_site() {
    let text = std::fs::read_to_string(crate::lm::reference("lung.csv")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let rows: Vec<&str> = lines.collect();
    let dir = tempfile::TempDir::new().unwrap();
    let write = |path: std::path::PathBuf, part: &[&str]| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{header}\n{}\n", part.join("\n"))).unwrap();
    };
    // Site a: one file; site b: the same rows over three files.
    write(dir.path().join("one/a.csv"), &rows[..100]);
    write(dir.path().join("one/b.csv"), &rows[100..]);
    write(dir.path().join("many/a.csv"), &rows[..100]);
    write(dir.path().join("many/b/1.csv"), &rows[100..101]);
    write(dir.path().join("many/b/2.csv"), &rows[101..180]);
    write(dir.path().join("many/b/3.csv"), &rows[180..]);
    let ctx = fedsql::FedContext::new();
    for name in ["one", "many"] {
        run(
            &ctx,
            &format!(
                "CREATE FEDERATED TABLE {name} LOCATION '{}'",
                dir.path().join(name).display()
            ),
        )
        .await;
    }
    let fit = |table: &str| {
        format!("SELECT * FROM coxph('{table}', 'Surv(time, status) ~ age + sex + ph_ecog')")
    };
    let (one, many) = (run(&ctx, &fit("one")).await, run(&ctx, &fit("many")).await);
    for i in 0..3 {
        let (a, b) = (
            value(&one, i, "estimate").unwrap(),
            value(&many, i, "estimate").unwrap(),
        );
        assert!(close(a, b, 1e-12), "term {i}: {a} vs {b}");
    }
    // The state each site sends is the same size, whatever its rows (100 and 128).
    let analyzed = run(
        &ctx,
        "EXPLAIN ANALYZE FEDERATED SELECT cox_step('ties=efron', 0.0, time, status, 1.0, age, sex) FROM many",
    )
    .await;
    let bytes: Vec<f64> = (0..2)
        .map(|i| value(&analyzed, i, "bytes_received").unwrap())
        .collect();
    assert_eq!(bytes[0], bytes[1], "{bytes:?}");
    assert!(bytes[0] < 2000.0, "{bytes:?}");
}
