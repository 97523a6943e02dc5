//! `pca`, `pca_loadings`, `kmeans` and `kmeans_summary` against R
//! (testdata/reference/survival_multivariate.R: `prcomp`, and `kmeans` with
//! given centres and `algorithm = "Lloyd"`), each dataset split unevenly
//! over 1, 3 and 7 sites (with 7, one site is empty and one holds one row).

use std::collections::HashMap;

use datafusion::arrow::array::{AsArray, RecordBatch};
use fedsql::FedContext;
use tempfile::TempDir;

use crate::lm::{read_csv, value};
use crate::support::{close, split_sizes};

/// The dataset's rows over `sites` sites of `split_sizes` sizes.
pub(crate) async fn sites(dataset: &str, sites: usize) -> (FedContext, TempDir) {
    let rows = read_csv(&format!("{dataset}.csv")).len();
    let sizes: Vec<i64> = split_sizes(rows, sites).iter().map(|s| *s as i64).collect();
    crate::lm::federated(dataset, &sizes).await
}

pub(crate) async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    let batches = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    batches.into_iter().filter(|b| b.num_rows() > 0).collect()
}

pub(crate) async fn error(ctx: &FedContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Ok(df) => match df.collect().await {
            Ok(_) => panic!("{sql}: expected an error"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

pub(crate) fn number(row: &HashMap<String, String>, column: &str) -> f64 {
    row[column]
        .parse()
        .unwrap_or_else(|_| panic!("{column} = {:?}", row[column]))
}

fn assert_close(what: &str, got: f64, want: f64, rel: f64) {
    assert!(
        close(got, want, rel),
        "{what}: got {got}, R {want} (rel {:.2e})",
        (got - want).abs() / want.abs()
    );
}

const USARRESTS: &str = "murder, assault, urbanpop, rape";
const LUNG: &str = "age, ph_karno, pat_karno, meal_cal, wt_loss";
const IRIS: &str = "sepal_length, sepal_width, petal_length, petal_width";

/// (dataset, columns, options, reference)
const PCAS: &[(&str, &str, &str, &str)] = &[
    ("usarrests", USARRESTS, "scale=true", "pca_usarrests_scaled"),
    ("usarrests", USARRESTS, "", "pca_usarrests_cov"),
    ("lung", LUNG, "scale=true, center=true", "pca_lung_scaled"),
];

#[tokio::test]
async fn pca_equals_r_prcomp() {
    for &(dataset, columns, options, reference) in PCAS {
        for k in [1, 3, 7] {
            let what = format!("{reference} over {k} sites");
            let (ctx, _dir) = sites(dataset, k).await;
            let got = run(
                &ctx,
                &format!("SELECT * FROM pca('{dataset}', '{columns}', '{options}')"),
            )
            .await;
            let want = read_csv(&format!("{reference}.sdev.csv"));
            assert_eq!(got[0].num_rows(), want.len(), "{what}");
            for (i, row) in want.iter().enumerate() {
                assert_eq!(value(&got, i, "component"), Some((i + 1) as f64));
                for c in ["sdev", "proportion", "cumulative"] {
                    assert_close(
                        &format!("{what}: {c} {i}"),
                        value(&got, i, c).unwrap(),
                        number(row, c),
                        1e-10,
                    );
                }
            }
            let notices = ctx.take_notices().join("\n");
            let loadings = run(
                &ctx,
                &format!("SELECT * FROM pca_loadings('{dataset}', '{columns}', '{options}')"),
            )
            .await;
            let want = read_csv(&format!("{reference}.loadings.csv"));
            let names = loadings[0].column(0).as_string::<i32>();
            for j in 1..=want.len() {
                let pc = format!("PC{j}");
                // Up to sign: ours has the largest-magnitude loading positive.
                let sign = want
                    .iter()
                    .map(|r| number(r, &pc))
                    .max_by(|a, b| a.abs().total_cmp(&b.abs()))
                    .unwrap()
                    .signum();
                for (i, row) in want.iter().enumerate() {
                    assert_eq!(names.value(i), row["variable"]);
                    let got = value(&loadings, i, &pc).unwrap();
                    assert!(
                        (got - sign * number(row, &pc)).abs() <= 1e-8,
                        "{what}: loading {pc} of {}: {got} vs R {}",
                        row["variable"],
                        number(row, &pc)
                    );
                }
            }
            if dataset == "lung" {
                // 228 rows, 59 with a NULL in a listed column (R: nrow(na.omit(...)) = 169).
                assert!(
                    notices.contains("169 rows used, 59 dropped"),
                    "{what}: {notices}"
                );
            }
        }
    }
}

#[tokio::test]
async fn pca_refuses_a_constant_column_with_scale() {
    let (ctx, _dir) = sites("usarrests", 3).await;
    let e = error(
        &ctx,
        "SELECT * FROM pca('SELECT murder, 1.0 AS one FROM usarrests', 'murder, one', 'scale=true')",
    )
    .await;
    assert!(e.contains("column `one` is constant"), "{e}");
    // Without scaling a constant column is a zero-variance component.
    let got = run(
        &ctx,
        "SELECT * FROM pca('SELECT murder, 1.0 AS one FROM usarrests', 'murder, one')",
    )
    .await;
    assert_eq!(value(&got, 1, "sdev"), Some(0.0));
    let e = error(&ctx, "SELECT * FROM pca('usarrests', 'murder', 'rank=2')").await;
    assert!(e.contains("unknown option `rank`"), "{e}");
}

/// (dataset, columns, centres, iter_max, reference)
const KMEANS: &[(&str, &str, &str, usize, &str)] = &[
    (
        "usarrests",
        USARRESTS,
        "4 100 60 15; 10 180 65 22; 12 280 70 30",
        50,
        "kmeans_usarrests",
    ),
    (
        "iris",
        IRIS,
        "5 3.5 1.5 0.2; 6 2.5 4 1.2; 7 3 6 2",
        50,
        "kmeans_iris",
    ),
    (
        "iris",
        IRIS,
        "5 3.5 1.5 0.2; 6 2.5 4 1.2; 7 3 6 2",
        1,
        "kmeans_iris_iter1",
    ),
];

#[tokio::test]
async fn kmeans_with_given_centres_equals_r_lloyd() {
    for &(dataset, columns, centers, iter_max, reference) in KMEANS {
        for k in [1, 3, 7] {
            let what = format!("{reference} over {k} sites");
            let (ctx, _dir) = sites(dataset, k).await;
            let args =
                format!("'{dataset}', '{columns}', NULL, 'centers={centers}, iter_max={iter_max}'");
            let got = run(&ctx, &format!("SELECT * FROM kmeans({args})")).await;
            let want = read_csv(&format!("{reference}.clusters.csv"));
            assert_eq!(got[0].num_rows(), want.len(), "{what}");
            for (i, row) in want.iter().enumerate() {
                assert_eq!(value(&got, i, "cluster"), Some(number(row, "cluster")));
                assert_eq!(value(&got, i, "size"), Some(number(row, "size")), "{what}");
                for c in std::iter::once("withinss").chain(columns.split(", ")) {
                    assert_close(
                        &format!("{what}: cluster {} {c}", i + 1),
                        value(&got, i, c).unwrap(),
                        number(row, c),
                        1e-10,
                    );
                }
            }
            let summary = run(&ctx, &format!("SELECT * FROM kmeans_summary({args})")).await;
            let want = &read_csv(&format!("{reference}.summary.csv"))[0];
            for c in ["tot_withinss", "betweenss", "totss"] {
                assert_close(
                    &format!("{what}: {c}"),
                    value(&summary, 0, c).unwrap(),
                    number(want, c),
                    1e-10,
                );
            }
            let converged = summary[0]
                .column_by_name("converged")
                .unwrap()
                .as_boolean()
                .value(0);
            let iterations = value(&summary, 0, "iterations").unwrap();
            if iter_max == 1 {
                // R reports iter.max + 1 when Lloyd stops unconverged.
                assert!(!converged, "{what}");
                assert_eq!(iterations + 1.0, number(want, "iterations"), "{what}");
            } else {
                assert!(converged, "{what}");
                assert_eq!(iterations, number(want, "iterations"), "{what}");
            }
        }
    }
}

#[tokio::test]
async fn kmeans_random_starts_come_from_quantiles() {
    let (ctx, _dir) = sites("iris", 3).await;
    let got = run(
        &ctx,
        &format!(
            "SELECT * FROM kmeans_summary('iris', '{IRIS}', 3, 'nstart=4, seed=11, iter_max=50')"
        ),
    )
    .await;
    assert_eq!(value(&got, 0, "n"), Some(150.0));
    let within = value(&got, 0, "tot_withinss").unwrap();
    // The best of 4 starts finds one of iris' good 3-cluster solutions.
    assert!(within < 150.0, "tot_withinss {within}");
    let clusters = run(
        &ctx,
        &format!("SELECT sum(size) AS n FROM kmeans('iris', '{IRIS}', 3, 'nstart=4, seed=11, iter_max=50')"),
    )
    .await;
    assert_eq!(value(&clusters, 0, "n"), Some(150.0));
    // scale=true clusters the standardized columns.
    let scaled = run(
        &ctx,
        &format!(
            "SELECT * FROM kmeans_summary('iris', '{IRIS}', 3, 'seed=3, scale=true, iter_max=50')"
        ),
    )
    .await;
    assert_close(
        "scaled totss",
        value(&scaled, 0, "totss").unwrap(),
        149.0 * 4.0,
        1e-12,
    );
}

#[tokio::test]
async fn kmeans_errors_name_the_problem() {
    let (ctx, _dir) = sites("usarrests", 7).await;
    let e = error(
        &ctx,
        "SELECT * FROM kmeans('usarrests', 'murder, rape', 51)",
    )
    .await;
    assert!(
        e.contains("k = 51 is more than the 50 complete rows"),
        "{e}"
    );
    let e = error(
        &ctx,
        "SELECT * FROM kmeans('usarrests', 'murder, rape', NULL, 'centers=1 2 3')",
    )
    .await;
    assert!(e.contains("each centre needs 2 values"), "{e}");
    // A centre far from every row loses all its rows.
    let e = error(
        &ctx,
        "SELECT * FROM kmeans('usarrests', 'murder, rape', NULL, 'centers=5 20; 1000 1000')",
    )
    .await;
    assert!(e.contains("cluster 2 became empty"), "{e}");
}

/// Models and statistics read their options with one parser: a boolean
/// is on/off, true/false, yes/no or 1/0 in every function, a number must
/// be finite in every function, and an unknown key lists the valid ones.
#[tokio::test]
async fn models_and_statistics_read_options_alike() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo(&ctx).unwrap();
    let pca = |o: &str| format!("SELECT * FROM pca('clinic', 'age, systolic, bmi', '{o}')");
    let chisq = |o: &str| format!("SELECT * FROM chisq_test('clinic', 'smoker', 'event', '{o}')");
    let text = |batches: Vec<RecordBatch>| {
        datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
    };
    for (on, off) in [("scale=on", "scale=off"), ("scale=yes", "scale=0")] {
        assert_eq!(
            text(run(&ctx, &pca(on)).await),
            text(run(&ctx, &pca("scale=true")).await)
        );
        assert_eq!(
            text(run(&ctx, &pca(off)).await),
            text(run(&ctx, &pca("scale=false")).await)
        );
    }
    assert_eq!(
        text(run(&ctx, &chisq("correct=off")).await),
        text(run(&ctx, &chisq("correct=false")).await)
    );
    assert_eq!(
        text(run(&ctx, &chisq("correct=on")).await),
        text(run(&ctx, &chisq("")).await)
    );
    for sql in [pca("scale=NaN"), chisq("correct=NaN")] {
        let e = error(&ctx, &sql).await;
        assert!(e.contains("expected true or false"), "{sql}: {e}");
    }
    for sql in [
        "SELECT * FROM t_test('clinic', 'systolic', 'mu=NaN')",
        "SELECT * FROM t_test('clinic', 'systolic', 'conf_level=nan')",
        "SELECT * FROM hist('clinic', 'systolic', 'lower=-inf')",
        "SELECT * FROM kaplan_meier('clinic', 'age', 'event', 'width=inf, max=100')",
        "SELECT * FROM kaplan_meier('clinic', 'age', 'event', 'breaks=0 NaN 90')",
        "SELECT * FROM coxph('clinic', 'Surv(age, event) ~ bmi', 'tolerance=NaN')",
        "SELECT * FROM glm('clinic', 'event ~ age', 'binomial', 'epsilon=inf')",
    ] {
        let e = error(&ctx, sql).await;
        assert!(e.contains("finite"), "{sql}: {e}");
    }
    for (sql, valid) in [
        (pca("rank=2"), "pca takes scale, center"),
        (chisq("simulate=true"), "chisq_test takes correct"),
    ] {
        let e = error(&ctx, &sql).await;
        assert!(e.contains(valid), "{sql}: {e}");
    }
}
