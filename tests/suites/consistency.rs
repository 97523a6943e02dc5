//! Virtual-global consistency: every query, run federated over the demo rows
//! split in several ways (one client; three with a one-row client; seven with
//! an empty and a one-row client; CSV and Parquet), gives the result plain
//! DataFusion gives on all rows put together — with the site engine's fast
//! path on and off (each test runs in both modes, or in the one
//! `FEDSQL_TEST_FAST_PATH` names).

use crate::support::{
    Federation, Format, assert_consistent, assert_consistent_to, demo_rows, fast_path_modes,
    federation_in, run_both, split_sizes,
};

/// Queries beyond `queries/`: every bounded aggregate family and clause.
pub const QUERIES: &[&str] = &[
    "SELECT count(*) AS n FROM clinic",
    "SELECT count(*) AS n, count(bmi) AS n_bmi, sum(age) AS s, avg(bmi) AS a FROM clinic WHERE age > 200",
    "SELECT region, count(*) AS n FROM clinic WHERE age > 200 GROUP BY region",
    "SELECT sum(age) AS s, avg(age) AS a, min(bmi) AS lo, max(bmi) AS hi, min(region) AS r_lo, max(sex) AS s_hi FROM clinic",
    "SELECT var_samp(bmi) AS vs, var_pop(bmi) AS vp, stddev_samp(systolic) AS ss, stddev_pop(systolic) AS sp FROM clinic",
    "SELECT covar_samp(age, bmi) AS cs, covar_pop(age, bmi) AS cp, corr(age, bmi) AS r FROM clinic",
    "SELECT regr_slope(systolic, age) AS b, regr_intercept(systolic, age) AS a, regr_count(systolic, bmi) AS n, regr_r2(systolic, bmi) AS r2, \
     regr_avgx(systolic, age) AS ax, regr_avgy(systolic, age) AS ay, regr_sxx(systolic, age) AS sxx, regr_syy(systolic, age) AS syy, regr_sxy(systolic, age) AS sxy FROM clinic",
    "SELECT bool_and(age > 17) AS all_adults, bool_or(age > 85) AS any_old, bit_and(visits) AS ba, bit_or(visits) AS bo, bit_xor(visits) AS bx FROM clinic",
    "SELECT region, sex, count(*) AS n, avg(systolic) AS m FROM clinic GROUP BY region, sex ORDER BY region, sex",
    "SELECT age / 10 AS decade, count(*) AS n, avg(bmi) AS mean_bmi FROM clinic GROUP BY age / 10 ORDER BY decade",
    "SELECT CASE WHEN bmi >= 30 THEN 'obese' WHEN bmi IS NULL THEN 'unknown' ELSE 'not obese' END AS cls, count(*) AS n \
     FROM clinic GROUP BY 1 ORDER BY cls",
    "SELECT region, count(*) FILTER (WHERE smoker = 1) AS smokers, sum(visits) FILTER (WHERE event = 1) AS v FROM clinic GROUP BY region ORDER BY region",
    "SELECT region, avg(systolic) AS m FROM clinic GROUP BY region HAVING avg(systolic) > 130 AND count(*) > 10 ORDER BY m DESC",
    "SELECT region, sex, count(*) AS n FROM clinic GROUP BY GROUPING SETS ((region), (sex), ()) ORDER BY region NULLS LAST, sex NULLS LAST",
    "SELECT region, smoker, count(*) AS n, grouping(region) AS g FROM clinic GROUP BY CUBE (region, smoker) ORDER BY region NULLS LAST, smoker NULLS LAST",
    "SELECT sum(systolic) / count(*) AS mean_sbp, max(age) - min(age) AS age_range, round(avg(bmi), 2) AS rounded FROM clinic",
    "SELECT upper(region) AS r, sum(CASE WHEN sex = 'F' THEN 1 ELSE 0 END) AS women, sum(age * smoker) AS s FROM clinic GROUP BY upper(region) ORDER BY r LIMIT 2",
    "SELECT first_value(age ORDER BY age, systolic, bmi) AS youngest FROM clinic",
    "SELECT approx_distinct(region) AS regions, approx_distinct(age) AS ages FROM clinic",
    // Two rounds: the inner aggregate is merged first, then used at the clients.
    "SELECT count(*) AS n FROM clinic WHERE age > (SELECT avg(age) FROM clinic)",
    "SELECT region, count(*) AS n FROM clinic c WHERE systolic > (SELECT avg(systolic) FROM clinic d WHERE d.region = c.region) GROUP BY region ORDER BY region",
    // Aggregating an aggregate: the outer one is shared-only.
    "SELECT count(*) AS groups, max(n) AS largest FROM (SELECT region, sex, count(*) AS n FROM clinic GROUP BY region, sex)",
    "WITH r AS (SELECT region, avg(bmi) AS b FROM clinic GROUP BY region) SELECT region, b FROM r WHERE b > 20 ORDER BY region",
];

/// Shared tables used by the queries above and in `queries/`.
const SHARED_SETUP: &[&str] = &[
    "CREATE TABLE weights (region VARCHAR, w DOUBLE) AS VALUES ('north', 1.5), ('south', 0.5), ('east', 2.0)",
];

const SHARED_QUERIES: &[&str] = &[
    "SELECT sum(c.age * w.w) AS weighted, count(*) AS n FROM clinic c JOIN weights w ON c.region = w.region",
    "SELECT w.region, count(*) AS n, avg(c.bmi) AS b FROM weights w JOIN clinic c ON c.region = w.region GROUP BY w.region ORDER BY w.region",
    "SELECT count(*) AS n, sum(w.w) AS total_w FROM clinic c LEFT JOIN weights w ON c.region = w.region",
    "SELECT count(*) AS n FROM clinic c WHERE c.region IN (SELECT region FROM weights WHERE w > 1)",
];

/// Every statement of every file in `queries/` (the benchmark suite excluded).
fn query_files() -> Vec<(String, Vec<String>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("queries");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "queries/ should hold the example queries");
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                fedsql::coordinator::statements::split_statements(&text).unwrap(),
            )
        })
        .collect()
}

pub async fn check_all(f: &Federation) {
    for sql in SHARED_SETUP {
        run_both(f, sql).await;
    }
    for sql in QUERIES.iter().chain(SHARED_QUERIES) {
        assert_consistent(f, sql).await;
    }
    for (file, statements) in query_files() {
        for sql in statements {
            let upper = sql.to_ascii_uppercase();
            if upper.trim_start().starts_with("CREATE") || upper.trim_start().starts_with("DROP") {
                run_both(f, &sql).await;
            } else if upper.contains("APPROX_PERCENTILE") || upper.contains("APPROX_MEDIAN") {
                // t-digests merged from clients are not bit-identical to one
                // pass; they agree to the sketch's accuracy.
                assert_consistent_to(f, &sql, 0.05).await;
            } else {
                assert_consistent(f, &format!("-- {file}\n{sql}")).await;
            }
        }
    }
}

/// [`check_all`] over the demo rows split by `sizes`, in every fast-path mode.
async fn check_in_every_mode(sizes: &[usize], format: Format) {
    for fast_path in fast_path_modes() {
        check_all(&federation_in(sizes, format, fast_path).await).await;
    }
}

#[tokio::test]
async fn one_client() {
    let n = demo_rows().1.len();
    check_in_every_mode(&split_sizes(n, 1), Format::Csv).await;
}

#[tokio::test]
async fn three_clients_with_a_one_row_client() {
    let n = demo_rows().1.len();
    check_in_every_mode(&split_sizes(n, 3), Format::Csv).await;
}

#[tokio::test]
async fn seven_clients_with_an_empty_and_a_one_row_client() {
    let n = demo_rows().1.len();
    let sizes = split_sizes(n, 7);
    assert!(sizes.contains(&0) && sizes.contains(&1));
    check_in_every_mode(&sizes, Format::Csv).await;
}

#[tokio::test]
async fn seven_parquet_clients() {
    let n = demo_rows().1.len();
    check_in_every_mode(&split_sizes(n, 7), Format::Parquet).await;
}

#[tokio::test]
async fn bundled_demo_matches_the_same_files_on_disk() {
    let n = demo_rows().1.len();
    let f = federation_in(&split_sizes(n, 3), Format::Csv, true).await;
    let demo = fedsql::FedContext::new();
    fedsql::coordinator::demo::register_demo_with(&demo, None).unwrap();
    for sql in QUERIES {
        let a = demo.sql(sql).await.unwrap().collect().await.unwrap();
        let b = f.central.sql(sql).await.unwrap().collect().await.unwrap();
        crate::support::assert_same_result(sql, &a, &b, sql.contains("ORDER BY"), 1e-9);
    }
}

/// A hundred and fifty clients: states are merged in chunks of 64 sites as
/// they arrive (two chunks, then the rest), and plans are instantiated from
/// one template; the answers stay the centralized ones.
#[tokio::test]
async fn a_hundred_and_fifty_parquet_clients_merge_in_chunks() {
    let n = demo_rows().1.len();
    for fast_path in fast_path_modes() {
        let f = federation_in(&split_sizes(n, 150), Format::Parquet, fast_path).await;
        for sql in SHARED_SETUP {
            run_both(&f, sql).await;
        }
        for sql in QUERIES.iter().chain(SHARED_QUERIES) {
            assert_consistent(&f, sql).await;
        }
    }
}

/// A hundred and fifty clients, run by a few runner tasks: a client whose
/// file is broken ends the round with an error that names it, and once
/// the file is written again the same query gives the centralized answer.
#[tokio::test]
async fn a_broken_client_among_a_hundred_and_fifty_ends_the_round_naming_it() {
    let n = demo_rows().1.len();
    for fast_path in fast_path_modes() {
        let f = federation_in(&split_sizes(n, 150), Format::Parquet, fast_path).await;
        let sql = "SELECT count(*) AS n, avg(age) AS mean_age FROM clinic";
        assert_consistent(&f, sql).await;
        let broken = &f.client_files[100];
        let name = broken.file_stem().unwrap().to_string_lossy().to_string();
        let good = std::fs::read(broken).unwrap();
        std::fs::write(broken, b"not a Parquet file at all").unwrap();
        let e = match f.fed.sql(sql).await.unwrap().collect().await {
            Ok(batches) => panic!("a broken file answered: {batches:?}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&format!("'{name}'")), "{e}");
        std::fs::write(broken, good).unwrap();
        assert_consistent(&f, sql).await;
    }
}
