//! Classical statistics (`t_test`, `anova`, `chisq_test`, `crosstab`,
//! `cor_test`, `hist`, `summary`) against R's own functions: the reference
//! values in testdata/reference/stats_*.csv were written once by
//! testdata/reference/stats.R (R 4.2.2). Each dataset — the demo `clinic`
//! (900 rows, with NULLs), R's `mtcars` (32) and `warpbreaks` (54) — is
//! split unevenly over 1, 3 and 7 clients; from 3 clients on one client
//! holds a single row, and with 7 one is empty.
//!
//! Tolerances (issue 55): statistics, estimates, confidence bounds, sums
//! of squares and p-values (however small) to 1e-10 relative; counts
//! exactly. `summary`'s quartiles are t-digest estimates, checked to
//! 5% of the column's range.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use fedsql::FedContext;

use crate::lm::{federated, read_csv, value};
use crate::support::{Format, federation, split_sizes};

/// A federation of `dataset` over `clients` clients, and what keeps its files.
async fn dataset(name: &str, clients: usize) -> (FedContext, Box<dyn std::any::Any>) {
    if name == "clinic" {
        let (_, rows) = crate::support::demo_rows();
        let f = federation(&split_sizes(rows.len(), clients), Format::Csv).await;
        let ctx = f.fed.clone();
        return (ctx, Box::new(f));
    }
    let text = std::fs::read_to_string(crate::lm::reference(&format!("{name}.csv"))).unwrap();
    let n = text.lines().skip(1).filter(|l| !l.is_empty()).count();
    let sizes: Vec<i64> = split_sizes(n, clients).iter().map(|s| *s as i64).collect();
    let (ctx, dir) = federated(name, &sizes).await;
    (ctx, Box::new(dir))
}

async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn run_err(ctx: &FedContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Ok(df) => match df.collect().await {
            Ok(b) => panic!("{sql}: expected an error, got {b:?}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// The reference rows of `file` with this `id`.
fn reference_rows(file: &str, id: &str) -> Vec<HashMap<String, String>> {
    let rows: Vec<_> = read_csv(file)
        .into_iter()
        .filter(|r| r["id"] == id)
        .collect();
    assert!(!rows.is_empty(), "no reference rows for {id} in {file}");
    rows
}

fn parse_reference(text: &str) -> Option<f64> {
    (!text.is_empty()).then(|| text.parse::<f64>().unwrap_or_else(|_| panic!("{text}")))
}

fn text(batches: &[RecordBatch], row: usize, column: &str) -> Option<String> {
    let c = batches[0].column_by_name(column).unwrap();
    if c.is_null(row) {
        return None;
    }
    let c = datafusion::arrow::compute::cast(c, &DataType::Utf8).unwrap();
    Some(c.as_string::<i32>().value(row).to_string())
}

fn assert_number(what: &str, got: Option<f64>, want: Option<f64>) {
    match (got, want) {
        (None, None) => {}
        (Some(g), Some(w)) => {
            let diff = (g - w).abs();
            let ok = g == w || diff <= 1e-10 * g.abs().max(w.abs());
            assert!(ok, "{what}: got {g:e}, R gives {w:e}");
        }
        _ => panic!("{what}: got {got:?}, R gives {want:?}"),
    }
}

/// Compares the numeric `columns` and text `texts` of one-row results.
fn assert_row(
    what: &str,
    got: &[RecordBatch],
    row: usize,
    want: &HashMap<String, String>,
    columns: &[&str],
    texts: &[&str],
) {
    for c in columns {
        assert_number(
            &format!("{what}: {c}"),
            value(got, row, c),
            parse_reference(&want[*c]),
        );
    }
    for c in texts {
        assert_eq!(
            text(got, row, c).as_deref(),
            Some(want[*c].as_str()),
            "{what}: {c}"
        );
    }
}

const CLIENTS: [usize; 3] = [1, 3, 7];

/// (reference id, dataset, SQL).
const T_TESTS: &[(&str, &str, &str)] = &[
    (
        "clinic_welch",
        "clinic",
        "t_test('clinic', 'systolic ~ smoker')",
    ),
    (
        "clinic_pooled",
        "clinic",
        "t_test('clinic', 'systolic ~ smoker', 'var_equal=true')",
    ),
    (
        "clinic_welch_less",
        "clinic",
        "t_test('clinic', 'bmi ~ sex', 'alternative=less, conf_level=0.9')",
    ),
    (
        "clinic_one",
        "clinic",
        "t_test('clinic', 'systolic', 'mu=130')",
    ),
    (
        "clinic_one_greater",
        "clinic",
        "t_test('clinic', 'bmi', 'mu=27, alternative=greater')",
    ),
    (
        "clinic_paired",
        "clinic",
        "t_test('clinic', 'systolic - age')",
    ),
    (
        "clinic_welch_mu",
        "clinic",
        "t_test('clinic', 'age ~ event', 'mu=-2, conf_level=0.99')",
    ),
    ("mtcars_welch", "mtcars", "t_test('mtcars', 'mpg ~ trans')"),
    (
        "mtcars_pooled_greater",
        "mtcars",
        "t_test('mtcars', 'mpg ~ trans', 'var_equal=true, alternative=greater')",
    ),
    ("mtcars_one", "mtcars", "t_test('mtcars', 'mpg', 'mu=20')"),
    (
        "mtcars_paired",
        "mtcars",
        "t_test('mtcars', 'mpg - qsec', 'conf_level=0.9')",
    ),
    (
        "clinic_welch_mu_greater",
        "clinic",
        "t_test('clinic', 'systolic ~ smoker', 'mu=2, alternative=greater')",
    ),
    (
        "clinic_pooled_mu_less",
        "clinic",
        "t_test('clinic', 'bmi ~ sex', 'mu=2, alternative=less, var_equal=true')",
    ),
    (
        "mtcars_welch_mu_greater",
        "mtcars",
        "t_test('mtcars', 'mpg ~ trans', 'mu=2, alternative=greater, conf_level=0.9')",
    ),
];

#[tokio::test]
async fn t_test_matches_r() {
    for dataset_name in ["clinic", "mtcars"] {
        for k in CLIENTS {
            let (ctx, _files) = dataset(dataset_name, k).await;
            for (id, _, call) in T_TESTS.iter().filter(|t| t.1 == dataset_name) {
                let got = run(&ctx, &format!("SELECT * FROM {call}")).await;
                let want = &reference_rows("stats_t_test.csv", id)[0];
                assert_row(
                    &format!("{id} over {k} clients"),
                    &got,
                    0,
                    want,
                    &[
                        "estimate",
                        "estimate1",
                        "estimate2",
                        "statistic",
                        "parameter",
                        "p_value",
                        "conf_low",
                        "conf_high",
                    ],
                    &["method", "alternative"],
                );
            }
        }
    }
}

const ANOVAS: &[(&str, &str, &str)] = &[
    (
        "clinic_main",
        "clinic",
        "anova('clinic', 'systolic ~ age + bmi + region + smoker')",
    ),
    (
        "clinic_interaction",
        "clinic",
        "anova('clinic', 'systolic ~ age * sex + region')",
    ),
    (
        "mtcars_interaction",
        "mtcars",
        "anova('mtcars', 'mpg ~ wt * cylf')",
    ),
    (
        "warpbreaks_factorial",
        "warpbreaks",
        "anova('warpbreaks', 'breaks ~ wool * tension')",
    ),
];

#[tokio::test]
async fn anova_matches_r_with_factors_and_interactions() {
    for dataset_name in ["clinic", "mtcars", "warpbreaks"] {
        for k in CLIENTS {
            let (ctx, _files) = dataset(dataset_name, k).await;
            for (id, _, call) in ANOVAS.iter().filter(|t| t.1 == dataset_name) {
                let got = run(&ctx, &format!("SELECT * FROM {call}")).await;
                let want = reference_rows("stats_anova.csv", id);
                let rows: usize = got.iter().map(|b| b.num_rows()).sum();
                assert_eq!(rows, want.len(), "{id} over {k} clients: rows");
                for (i, w) in want.iter().enumerate() {
                    assert_row(
                        &format!("{id} over {k} clients, row {i}"),
                        &got,
                        i,
                        w,
                        &["df", "sumsq", "meansq", "statistic", "p_value"],
                        &["term"],
                    );
                }
            }
        }
    }
}

const CHISQ_TESTS: &[(&str, &str, &str)] = &[
    (
        "clinic_2x2",
        "clinic",
        "chisq_test('clinic', 'smoker', 'event')",
    ),
    (
        "clinic_2x2_uncorrected",
        "clinic",
        "chisq_test('clinic', 'smoker', 'event', 'correct=false')",
    ),
    (
        "clinic_4x2",
        "clinic",
        "chisq_test('clinic', 'region', 'sex')",
    ),
    (
        "mtcars_2x2",
        "mtcars",
        "chisq_test('mtcars', 'engine', 'trans')",
    ),
    (
        "mtcars_2x2_uncorrected",
        "mtcars",
        "chisq_test('mtcars', 'engine', 'trans', 'correct=false')",
    ),
    (
        "mtcars_3x2",
        "mtcars",
        "chisq_test('mtcars', 'cylf', 'trans')",
    ),
];

const CROSSTABS: &[(&str, &str, &str)] = &[
    (
        "clinic_region_sex",
        "clinic",
        "crosstab('clinic', 'region', 'sex')",
    ),
    (
        "mtcars_cylf_gear",
        "mtcars",
        "crosstab('mtcars', 'cylf', 'gear')",
    ),
];

#[tokio::test]
async fn chisq_test_and_crosstab_match_r() {
    for dataset_name in ["clinic", "mtcars"] {
        for k in CLIENTS {
            let (ctx, _files) = dataset(dataset_name, k).await;
            for (id, _, call) in CHISQ_TESTS.iter().filter(|t| t.1 == dataset_name) {
                let got = run(&ctx, &format!("SELECT * FROM {call}")).await;
                let want = &reference_rows("stats_chisq_test.csv", id)[0];
                assert_row(
                    &format!("{id} over {k} clients"),
                    &got,
                    0,
                    want,
                    &["statistic", "parameter", "p_value"],
                    &["method"],
                );
            }
            for (id, _, call) in CROSSTABS.iter().filter(|t| t.1 == dataset_name) {
                let got = run(&ctx, &format!("SELECT * FROM {call}")).await;
                let names: Vec<String> = got[0]
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                let mut cells: Vec<(Option<String>, Option<String>, i64)> = Vec::new();
                for batch in &got {
                    let b = std::slice::from_ref(batch);
                    for row in 0..batch.num_rows() {
                        cells.push((
                            text(b, row, &names[0]),
                            text(b, row, &names[1]),
                            value(b, row, "n").unwrap() as i64,
                        ));
                    }
                }
                let want: Vec<(Option<String>, Option<String>, i64)> =
                    reference_rows("stats_crosstab.csv", id)
                        .iter()
                        .map(|r| {
                            let level = |s: &String| (!s.is_empty()).then(|| s.clone());
                            (level(&r["a"]), level(&r["b"]), r["n"].parse().unwrap())
                        })
                        .collect();
                assert_eq!(cells, want, "{id} over {k} clients");
            }
        }
    }
}

const COR_TESTS: &[(&str, &str, &str)] = &[
    (
        "clinic_age_systolic",
        "clinic",
        "cor_test('clinic', 'age', 'systolic')",
    ),
    (
        "clinic_bmi_systolic_greater",
        "clinic",
        "cor_test('clinic', 'bmi', 'systolic', 'alternative=greater')",
    ),
    (
        "clinic_visits_age_less",
        "clinic",
        "cor_test('clinic', 'visits', 'age', 'alternative=less, conf_level=0.9')",
    ),
    ("mtcars_mpg_wt", "mtcars", "cor_test('mtcars', 'mpg', 'wt')"),
    (
        "mtcars_mpg_qsec",
        "mtcars",
        "cor_test('mtcars', 'mpg', 'qsec', 'conf_level=0.99')",
    ),
];

#[tokio::test]
async fn cor_test_matches_r() {
    for dataset_name in ["clinic", "mtcars"] {
        for k in CLIENTS {
            let (ctx, _files) = dataset(dataset_name, k).await;
            for (id, _, call) in COR_TESTS.iter().filter(|t| t.1 == dataset_name) {
                let got = run(&ctx, &format!("SELECT * FROM {call}")).await;
                let want = &reference_rows("stats_cor_test.csv", id)[0];
                assert_row(
                    &format!("{id} over {k} clients"),
                    &got,
                    0,
                    want,
                    &[
                        "estimate",
                        "statistic",
                        "parameter",
                        "p_value",
                        "conf_low",
                        "conf_high",
                    ],
                    &["method", "alternative"],
                );
            }
        }
    }
}

const HISTS: &[(&str, &str, &str)] = &[
    (
        "clinic_systolic",
        "clinic",
        "hist('clinic', 'systolic', 'bins=12, lower=80, upper=200')",
    ),
    (
        "clinic_bmi",
        "clinic",
        "hist('clinic', 'bmi', 'bins=7, lower=10, upper=50')",
    ),
    (
        "mtcars_mpg",
        "mtcars",
        "hist('mtcars', 'mpg', 'bins=5, lower=10, upper=35')",
    ),
    (
        "mtcars_wt",
        "mtcars",
        "hist('mtcars', 'wt', 'bins=16, lower=1.5, upper=5.5')",
    ),
];

#[tokio::test]
async fn hist_matches_r() {
    for dataset_name in ["clinic", "mtcars"] {
        for k in CLIENTS {
            let (ctx, _files) = dataset(dataset_name, k).await;
            for (id, _, call) in HISTS.iter().filter(|t| t.1 == dataset_name) {
                let got = run(&ctx, &format!("SELECT * FROM {call}")).await;
                let want = reference_rows("stats_hist.csv", id);
                assert_eq!(got[0].num_rows(), want.len(), "{id}: bins");
                for (i, w) in want.iter().enumerate() {
                    let what = format!("{id} over {k} clients, bin {i}");
                    assert_eq!(value(&got, i, "bin"), parse_reference(&w["bin"]), "{what}");
                    assert_eq!(
                        value(&got, i, "count"),
                        parse_reference(&w["count"]),
                        "{what}"
                    );
                    assert_row(&what, &got, i, w, &["lower", "upper", "density"], &[]);
                }
            }
        }
    }
}

#[tokio::test]
async fn hist_takes_r_default_breaks_from_a_first_round_of_extremes() {
    // R 4.2.2 on the demo's files: hist(systolic)$breaks and $counts
    // (Sturges: 12 classes for 1060 values, through pretty()).
    let (ctx, _files) = dataset("clinic", 3).await;
    let got = run(&ctx, "SELECT * FROM hist('clinic', 'systolic')").await;
    let breaks = [
        80.0, 90.0, 100.0, 110.0, 120.0, 130.0, 140.0, 150.0, 160.0, 170.0, 180.0,
    ];
    let counts = [2.0, 20.0, 62.0, 149.0, 245.0, 259.0, 195.0, 99.0, 24.0, 5.0];
    assert_eq!(got[0].num_rows(), counts.len());
    for (i, count) in counts.iter().enumerate() {
        assert_eq!(value(&got, i, "lower"), Some(breaks[i]), "bin {i}");
        assert_eq!(value(&got, i, "upper"), Some(breaks[i + 1]), "bin {i}");
        assert_eq!(value(&got, i, "count"), Some(*count), "bin {i}");
    }
    // Every value is counted: no notice of values in no bin.
    let notices = ctx.take_notices();
    assert!(
        !notices.iter().any(|n| n.contains("are in no bin")),
        "{notices:?}"
    );
}

#[tokio::test]
async fn histogram_aggregate_is_federated_and_refuses_bad_bins() {
    let (ctx, _files) = dataset("clinic", 7).await;
    let got = run(
        &ctx,
        "SELECT histogram(systolic, 80, 200, 12) AS h FROM clinic",
    )
    .await;
    let list = got[0].column(0).as_list::<i32>().value(0);
    let counts: Vec<i64> = list
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .values()
        .to_vec();
    let want: Vec<i64> = reference_rows("stats_hist.csv", "clinic_systolic")
        .iter()
        .map(|r| r["count"].parse().unwrap())
        .collect();
    assert_eq!(counts, want);
    for (sql, message) in [
        (
            "SELECT histogram(bmi, 10, 50, 0) FROM clinic",
            "bins must be at least 1",
        ),
        (
            "SELECT histogram(bmi, 50, 10, 5) FROM clinic",
            "must be less than upper",
        ),
        (
            "SELECT histogram(bmi, 10, 10, 5) FROM clinic",
            "must be less than upper",
        ),
        (
            "SELECT histogram(bmi, age, 50, 5) FROM clinic",
            "not a constant",
        ),
    ] {
        let err = run_err(&ctx, sql).await;
        assert!(err.contains(message), "{sql}: {err}");
    }
}

#[tokio::test]
async fn summary_matches_r() {
    for (id, columns) in [
        ("clinic", "age, bmi, systolic, visits"),
        ("mtcars", "mpg, wt, hp"),
    ] {
        for k in CLIENTS {
            let (ctx, _files) = dataset(id, k).await;
            let got = run(&ctx, &format!("SELECT * FROM summary('{id}', '{columns}')")).await;
            let want = reference_rows("stats_summary.csv", id);
            assert_eq!(got[0].num_rows(), want.len());
            for (i, w) in want.iter().enumerate() {
                let what = format!("summary {id} over {k} clients, {}", w["column"]);
                assert_row(
                    &what,
                    &got,
                    i,
                    w,
                    &["n", "nmiss", "mean", "sd", "min", "max"],
                    &["column"],
                );
                let range =
                    parse_reference(&w["max"]).unwrap() - parse_reference(&w["min"]).unwrap();
                for q in ["q1", "median", "q3"] {
                    let (g, r) = (value(&got, i, q).unwrap(), parse_reference(&w[q]).unwrap());
                    assert!((g - r).abs() <= 0.05 * range, "{what}: {q} {g} vs R's {r}");
                }
            }
        }
    }
}

#[tokio::test]
async fn errors_name_what_is_wrong() {
    let (clinic, _c) = dataset("clinic", 3).await;
    let (mtcars, _m) = dataset("mtcars", 3).await;
    let empty = "SELECT * FROM clinic WHERE age > 1000";
    let cases: Vec<(&FedContext, String, &str)> = vec![
        // A two-sample grouping with one level, or more than two.
        (
            &clinic,
            "t_test('SELECT * FROM clinic WHERE smoker = 1', 'systolic ~ smoker')".into(),
            "has 1 level (1)",
        ),
        (
            &mtcars,
            "t_test('mtcars', 'mpg ~ cylf')".into(),
            "has 3 levels (c4, c6, c8)",
        ),
        (
            &clinic,
            "t_test('clinic', 'systolic ~ region')".into(),
            "has 4 levels",
        ),
        // Constant data.
        (
            &clinic,
            "t_test('clinic', 'systolic * 0 + 5')".into(),
            "data are essentially constant",
        ),
        (
            &clinic,
            "t_test('clinic', 'age * 0 + 5 ~ smoker')".into(),
            "data are essentially constant",
        ),
        (
            &clinic,
            "cor_test('SELECT age, 3 AS k FROM clinic', 'age', 'k')".into(),
            "`k` is constant",
        ),
        // Empty sources.
        (
            &clinic,
            format!("t_test('{empty}', 'systolic')"),
            "has no rows",
        ),
        (
            &clinic,
            format!("t_test('{empty}', 'systolic ~ smoker')"),
            "has no rows",
        ),
        (
            &clinic,
            format!("anova('{empty}', 'systolic ~ age')"),
            "has no rows",
        ),
        (
            &clinic,
            format!("chisq_test('{empty}', 'smoker', 'event')"),
            "has no rows",
        ),
        (
            &clinic,
            format!("crosstab('{empty}', 'smoker', 'event')"),
            "has no rows",
        ),
        (
            &clinic,
            format!("cor_test('{empty}', 'age', 'bmi')"),
            "has no rows",
        ),
        (&clinic, format!("hist('{empty}', 'bmi')"), "has no rows"),
        (
            &clinic,
            format!("hist('{empty}', 'bmi', 'lower=10, upper=50')"),
            "has no rows",
        ),
        (&clinic, format!("summary('{empty}', 'age')"), "has no rows"),
        // Bins and ranges.
        (
            &clinic,
            "hist('clinic', 'bmi', 'bins=0')".into(),
            "bins must be at least 1",
        ),
        (
            &clinic,
            "hist('clinic', 'bmi', 'bins=-4')".into(),
            "bins must be at least 1",
        ),
        (
            &clinic,
            "hist('clinic', 'bmi', 'lower=50, upper=10')".into(),
            "must be less than upper",
        ),
        (
            &clinic,
            "hist('clinic', 'bmi', 'lower=20, upper=20')".into(),
            "must be less than upper",
        ),
        // A one-level table; unknown columns and options.
        (
            &clinic,
            "chisq_test('SELECT * FROM clinic WHERE smoker = 1', 'smoker', 'event')".into(),
            "1 × 2",
        ),
        (
            &clinic,
            "cor_test('clinic', 'age', 'nosuch')".into(),
            "nosuch",
        ),
        (
            &clinic,
            "t_test('clinic', 'systolic', 'tails=2')".into(),
            "unknown option `tails`",
        ),
        (
            &clinic,
            "summary('SELECT CAST(''2020-01-01'' AS DATE) AS d FROM clinic', 'd')".into(),
            "must be numeric",
        ),
    ];
    for (ctx, call, message) in cases {
        let err = run_err(ctx, &format!("SELECT * FROM {call}")).await;
        assert!(err.contains(message), "{call}: {err}");
    }
}

/// `summary(source)`: every column; a text column's levels counted as R
/// counts a factor's, in a notice.
#[tokio::test]
async fn summary_of_every_column_counts_text_levels() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let got = run(&ctx, "SELECT * FROM summary('clinic')").await;
    let columns = got[0].column(0).as_string::<i32>();
    let names: Vec<&str> = (0..columns.len()).map(|i| columns.value(i)).collect();
    assert_eq!(
        names,
        [
            "region", "age", "sex", "bmi", "systolic", "smoker", "event", "visits"
        ]
    );
    assert_eq!(value(&got, 0, "n"), Some(1060.0));
    assert_eq!(value(&got, 0, "mean"), None);
    let notices = ctx.take_notices().join("\n");
    assert!(
        notices.contains("`region` (text, 4 levels): east: 235, north: 315, south: 312, west: 198"),
        "{notices}"
    );
}

#[tokio::test]
async fn chart_after_hist_draws_bars() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let script =
        "SELECT * FROM hist('clinic', 'systolic', 'bins=12, lower=80, upper=200');\n\\chart\n";
    let mut out = Vec::new();
    let options = fedsql::frontend::repl::ReplOptions {
        timing: false,
        ..fedsql::frontend::repl::ReplOptions::default()
    };
    let summary = fedsql::frontend::repl::run_script(&ctx, script, &mut out, &options)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(summary.errors, 0, "{out}");
    let rows: usize = fedsql::frontend::demo::DEMO_CLIENTS
        .iter()
        .map(|(_, csv)| csv.lines().count() - 1)
        .sum();
    assert!(
        out.contains(&format!("count by bin, 12 bins, {rows} values")),
        "{out}"
    );
    assert!(out.contains("[80, 90]   │"), "{out}");
    assert!(out.contains("(130, 140] │"), "{out}");
}

/// Under the demo's policy (extremes refused) summary withholds min and
/// max, says so, and answers the rest as without a policy.
#[tokio::test]
async fn summary_withholds_extremes_under_a_policy() {
    let guarded = FedContext::new();
    fedsql::frontend::demo::register_demo(&guarded).unwrap();
    let open = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&open, false).unwrap();
    let sql = "SELECT * FROM summary('clinic', 'age, bmi')";
    let a = guarded.sql(sql).await.unwrap().collect().await.unwrap();
    let b = open.sql(sql).await.unwrap().collect().await.unwrap();
    let notices = guarded.take_notices().join("\n");
    assert!(notices.contains("min and max are withheld"), "{notices}");
    let (a, b) = (&a[0], &b[0]);
    for name in ["min", "max"] {
        let i = a.schema().index_of(name).unwrap();
        assert_eq!(a.column(i).null_count(), 2, "{name}");
        assert_eq!(b.column(i).null_count(), 0, "{name}");
    }
    // Exact columns agree exactly; the t-digest quartiles agree closely
    // (the sites coarsen their centroids to 5 values).
    for name in ["n", "nmiss", "mean", "sd"] {
        let i = a.schema().index_of(name).unwrap();
        assert_eq!(a.column(i), b.column(i), "{name}");
    }
    for name in ["q1", "median", "q3"] {
        let i = a.schema().index_of(name).unwrap();
        let (x, y) = (
            a.column(i)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                .unwrap(),
            b.column(i)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                .unwrap(),
        );
        for r in 0..2 {
            assert!(
                (x.value(r) - y.value(r)).abs() <= 0.02 * y.value(r).abs(),
                "{name}: {} vs {}",
                x.value(r),
                y.value(r)
            );
        }
    }
}

/// EXPLAIN FEDERATED of each statistics function shows its rounds: what
/// each client computes and the state that leaves it, with its size.
#[tokio::test]
async fn explain_federated_shows_each_functions_rounds() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    for (call, rounds) in [
        ("t_test('clinic', 'systolic ~ smoker')", 1),
        ("t_test('clinic', 'systolic', 'mu=120')", 1),
        ("anova('clinic', 'systolic ~ age + C(region)')", 2),
        ("chisq_test('clinic', 'smoker', 'event')", 1),
        ("crosstab('clinic', 'smoker', 'event')", 1),
        ("cor_test('clinic', 'age', 'systolic')", 1),
        ("hist('clinic', 'bmi')", 2),
        ("hist('clinic', 'bmi', 'bins=6, lower=18, upper=36')", 1),
        ("summary('clinic', 'age, bmi')", 1),
    ] {
        let batches = ctx
            .sql(&format!("EXPLAIN FEDERATED SELECT * FROM {call}"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(
            text.contains(&format!("{rounds} federated round(s)")),
            "{call}:\n{text}"
        );
        for step in 1..=rounds {
            assert!(
                text.contains(&format!("Step {step}: one round")),
                "{call}:\n{text}"
            );
        }
        assert!(text.contains("what leaves each client"), "{call}:\n{text}");
        assert!(
            text.contains("runs at each of the 4 clients"),
            "{call}:\n{text}"
        );
    }
}
