//! The nineteenth outside attack set: error oracles, by a hostile analyst
//! writing SQL (in process and over `fedsql worker`s).
//!
//! **Status:** both breaks below are fixed and their tests are now
//! `holds_…` (the names in these notes are the tests' first names).
//!
//! A test named `breaks_…` asserts the leaking behaviour (it passes while
//! the bug exists); `holds_…` asserts what stopped an attack.
//!
//! **Found (BREAK, high): `sqrt` fails on a negative value, and the
//! catalogue says it never fails.** `udfs/src/catalogue.rs` marks `sqrt`
//! `never` ("NaN, not an error, for domain errors of floats"), so the
//! never-fail rewrite leaves it alone. But DataFusion 55's `sqrt` runs a
//! validator on every value (`validate_sqrt_input`: "cannot take square
//! root of a negative number") through `try_unary`, so one negative value
//! fails the whole batch, and the site answers its fixed refusal. Whether
//! a query fails then depends on one row:
//! `sqrt(CASE WHEN id = 17 AND x >= m THEN -1.0 ELSE 1.0 END)` fails
//! exactly when row 17 has x >= m — under `require_dp` (in process:
//! `breaks_sqrt_of_a_negative_fails_a_dp_query_on_one_row`), under plain
//! thresholds (`breaks_sqrt_of_a_negative_fails_a_thresholds_query_on_one_row`),
//! and over real `fedsql worker`s under `require_dp` and a budget of 1,
//! where seven `dp_count` queries at ε = 0.01 read the victim's x = 42
//! exactly (`breaks_an_analyst_reads_a_value_over_workers_through_sqrt`).
//! The answer is the same whatever ε: the refusal carries no noise.
//!
//! Fix: mark `sqrt` `may_fail` (it is then NULL-on-error row by row);
//! better, wrap *every* catalogued scalar function NULL-on-error (the
//! wrapper costs nothing when the batch succeeds), so that a library
//! upgrade that adds a validator or a panic to a function marked `never`
//! cannot reopen this; and add a catalogue test that runs each `never`
//! function over edge values (negative, zero, NaN, ±inf, extremes, empty
//! strings) and asserts it does not error.
//!
//! **Found (BREAK, high; thresholds policy): a life table's refusal names
//! the intervals that hold one row.** The `min_group_rows` refusal of a
//! cell aggregate appends `Cells::explain`'s text, and `life_table`'s
//! (`explain_small_cells`) names up to 8 intervals whose event or
//! censoring count is 1 to k−1. With a grid of one interval per candidate
//! value (`breaks=0,1,...,128`) and a time that puts the victim's row
//! alone in the interval of its x (`CASE WHEN id = 17 THEN x + 0.5 ELSE
//! 1000 END`: every other row after the last break, a count of 20 ≥ k),
//! one query's refusal reads "interval (42, 43]": the victim's exact x,
//! in process and over a real `fedsql worker`
//! (`breaks_a_life_table_refusal_names_one_rows_interval`,
//! `breaks_an_analyst_reads_a_value_over_workers_from_a_life_table_refusal`).
//! A refusal under thresholds is meant to say one bit; this one says up to
//! 8 values of log2(#intervals) bits each, per query.
//!
//! Fix: a site's refusal must not depend on which cells are small: drop
//! the interval names (and the "no grid passes" / coarsening hint, which
//! also depends on the counts) from what leaves the site; the coordinator
//! may coarsen a grid from the *released* states only, or the data owner
//! can read the detail in the site's log.
//!
//! What else was tried (HOLDS, see
//! `holds_other_never_functions_and_casts_answer_on_edge_values`): the
//! other `never` math functions on domain errors (`ln`, `log10`, `log2`,
//! `acos`, `acosh`, `atanh`, `cot`, `exp`, `cbrt`, `degrees`, `atan2`,
//! `nanvl`, `greatest` with NaN), `to_hex` of i64::MIN, `btrim`, `ascii`,
//! `reverse` of empty text, `concat_ws` with a NULL separator; casts of
//! text to DECIMAL (1e400, 42 digits), of 1e308 to DECIMAL(38,0), of text
//! to INTERVAL (i64::MAX years, garbage), to BIGINT ('abc', 1e30), to
//! TIMESTAMP / DATE / TIME out of range, of 1e30 to TIMESTAMP; an implicit
//! text-to-integer coercion (`'abc' = 1`); negating a DECIMAL(38,0); an
//! integer shift by 100; `greatest`, `least`, `coalesce`, `nullif`,
//! comparisons, `IN` and `get_field` over an empty (nested) list. All
//! answer whatever the victim's value. DP
//! aggregates over extreme inputs (i64::MAX, u64::MAX, ±inf, NaN, 38
//! nines) answer alike (`holds_dp_aggregates_answer_on_extreme_inputs`),
//! and so does DECIMAL division or remainder by a DECIMAL constant whose
//! rescaling overflows for the victim's value
//! (`holds_decimal_division_by_a_constant_answers_on_overflow`).
//! Under thresholds, the `approx_*` / `sum` / `avg` / `var` / `corr` of a
//! CASE that singles out one row are refused by the "values that differ
//! from a value the others share" rule (the policy's own one bit), and
//! `approx_distinct` / `approx_percentile_cont_with_weight` are refused
//! as identifying; neither is new.

use fedsql::FedContext;
use fedsql::site::release::dp::DpPolicy;
use fedsql::site::release::policy::DisclosurePolicy;

use crate::attack54r::{
    DAY, answer_over_one, date_batch, date_schema, dp_only, dp_workers, ordinary,
};

/// The filter of a DP count that gives `bad` for the victim's row (id 17)
/// when its x is at least `m`, and `good` for every other row.
fn probe(template: &str, m: i64, bad: &str, good: &str) -> String {
    let value = format!("CASE WHEN id = 17 AND x >= {m} THEN {bad} ELSE {good} END");
    format!(
        "SELECT dp_count(*, 0.01) AS n FROM t WHERE {} IS NOT NULL",
        template.replace("{v}", &value)
    )
}

/// The victim's site: 20 ordinary rows and the victim's (id 17, x = 42).
fn victim_rows() -> Vec<(i32, i64, i64)> {
    let mut rows = ordinary();
    rows.push((DAY, 17, 42));
    rows
}

fn outcome(answer: &Result<String, String>) -> String {
    match answer {
        Ok(_) => "ok".to_string(),
        Err(e) => e.clone(),
    }
}

/// HOLDS (was BREAK, high) — "Under a policy, whether a query fails, and
/// how, must not depend on one person's values". Found: `sqrt` was
/// catalogued as never failing but DataFusion fails it on a negative
/// value, so a DP count whose filter took the square root of -1 for the
/// victim's row when x >= m was refused exactly then. Now every
/// catalogued function runs NULL-on-error: both answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_sqrt_of_a_negative_answers_a_dp_query_either_way() {
    let dp = dp_only();
    let rows = victim_rows();
    let template = "sqrt({v})";
    for m in [42, 43] {
        let answer = answer_over_one(&probe(template, m, "-1.0", "1.0"), &rows, &dp).await;
        assert!(answer.is_ok(), "x >= {m}: {answer:?}");
    }
}

/// HOLDS (was BREAK, high) — the same bit under a plain disclosure policy
/// (thresholds, no DP): `count(*)` of 21 rows answers either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_sqrt_of_a_negative_answers_a_thresholds_query_either_way() {
    let dp = DpPolicy::default();
    let rows = victim_rows();
    let sql = |m: i64| {
        format!(
            "SELECT count(*) AS n FROM t WHERE sqrt(CASE WHEN id = 17 AND x >= {m} THEN -1.0 ELSE 1.0 END) > 0"
        )
    };
    // Both answer (the counts differ by the row the NULL filters out, as
    // `WHERE NOT (id = 17 AND x >= m)` would: exact counts of k or more
    // are what thresholds release, see "What the thresholds do not stop").
    for m in [42, 43] {
        let answer = answer_over_one(&sql(m), &rows, &dp).await;
        assert!(answer.is_ok(), "x >= {m}: {answer:?}");
    }
}

/// HOLDS (was BREAK, high) — over real `fedsql worker`s, by SQL alone:
/// seven `dp_count` queries whose filter took `sqrt(-1)` for the victim's
/// row read its x = 42 exactly. Now every probe answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_an_analyst_reads_nothing_over_workers_through_sqrt() {
    let (_workers, ctx, _dir) = dp_workers(&[victim_rows(), ordinary()]).await;
    for m in [41, 42, 43] {
        let answer = crate::attacks::answer(&ctx, &probe("sqrt({v})", m, "-1.0", "1.0")).await;
        assert!(answer.is_ok(), "x >= {m}: {}", outcome(&answer));
    }
}

/// HOLDS — the other functions marked `never`, and casts (which the site
/// makes TRY_CAST), answer whether the victim's row takes an edge value
/// or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_other_never_functions_and_casts_answer_on_edge_values() {
    let dp = dp_only();
    let rows = victim_rows();
    let cases: &[(&str, &str, &str)] = &[
        ("ln({v})", "-1.0", "1.0"),
        ("log10({v})", "-1.0", "1.0"),
        ("log2({v})", "0.0", "1.0"),
        ("acos({v})", "2.0", "0.5"),
        ("acosh({v})", "0.5", "2.0"),
        ("atanh({v})", "2.0", "0.5"),
        ("cot({v})", "0.0", "1.0"),
        ("exp({v})", "1000.0", "1.0"),
        ("cbrt({v})", "-8.0", "8.0"),
        ("degrees({v})", "1e308", "1.0"),
        ("atan2({v}, 0.0)", "0.0", "1.0"),
        ("nanvl({v}, 1.0)", "CAST('NaN' AS DOUBLE)", "1.0"),
        ("greatest({v}, 1.0)", "CAST('NaN' AS DOUBLE)", "1.0"),
        ("to_hex({v})", "-9223372036854775808", "1"),
        ("btrim({v}, '')", "''", "'a'"),
        ("ascii({v})", "''", "'a'"),
        ("reverse({v})", "''", "'a'"),
        ("concat_ws({v}, 'a', 'b')", "NULL", "','"),
        ("CAST({v} AS DECIMAL(38,0))", "'1e400'", "'1'"),
        (
            "CAST({v} AS DECIMAL(38,0))",
            "'999999999999999999999999999999999999999999'",
            "'1'",
        ),
        ("CAST({v} AS DECIMAL(38,0))", "1e308", "1.0"),
        (
            "CAST({v} AS INTERVAL)",
            "'9223372036854775807 years'",
            "'1 day'",
        ),
        ("CAST({v} AS INTERVAL)", "'garbage'", "'1 day'"),
        ("CAST({v} AS BIGINT)", "'abc'", "'1'"),
        ("CAST({v} AS BIGINT)", "1e30", "1.0"),
        ("({v} = 1)", "'abc'", "'1'"),
        (
            "(-CAST({v} AS DECIMAL(38,0)))",
            "-99999999999999999999999999999999999999",
            "1",
        ),
        ("(1 << {v})", "100", "1"),
        ("CAST({v} AS TIMESTAMP)", "'+99999-01-01'", "'2020-01-01'"),
        ("CAST({v} AS DATE)", "'99999999-01-01'", "'2020-01-01'"),
        ("CAST({v} AS TIME)", "'25:99:99'", "'10:00:00'"),
        ("CAST({v} AS TIMESTAMP)", "1e30", "1.0"),
        // Nested values: empty lists against non-empty ones.
        (
            "greatest({v}, make_array(1))",
            "make_array()",
            "make_array(2)",
        ),
        (
            "least({v}, make_array(make_array(1)))",
            "make_array(make_array())",
            "make_array(make_array(2))",
        ),
        (
            "coalesce({v}, make_array(1))",
            "make_array()",
            "make_array(2)",
        ),
        (
            "nullif({v}, make_array(1))",
            "make_array()",
            "make_array(2)",
        ),
        ("({v} = make_array(1))", "make_array()", "make_array(2)"),
        (
            "({v} < make_array(make_array(1)))",
            "make_array(make_array())",
            "make_array(make_array(2))",
        ),
        (
            "get_field(named_struct('a', {v}), 'a')",
            "make_array()",
            "make_array(2)",
        ),
        (
            "({v} IN (make_array(1), make_array(2)))",
            "make_array()",
            "make_array(2)",
        ),
        ("concat({v}, 'a')", "''", "'b'"),
    ];
    for (template, bad, good) in cases {
        let at_42 = answer_over_one(&probe(template, 42, bad, good), &rows, &dp).await;
        let at_43 = answer_over_one(&probe(template, 43, bad, good), &rows, &dp).await;
        assert!(
            at_42.is_ok() && at_43.is_ok(),
            "{template} with {bad}: {} / {}",
            outcome(&at_42),
            outcome(&at_43)
        );
    }
}

/// HOLDS — DP aggregates over extreme inputs (i64::MAX, u64::MAX, ±inf,
/// NaN, a DECIMAL(38,0) of 38 nines) for the victim's row answer whether
/// or not the row takes them: clamping and NaN-dropping keep them from
/// failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_dp_aggregates_answer_on_extreme_inputs() {
    let rows = victim_rows();
    let cases: &[(&str, &str, &str)] = &[
        ("dp_sum({v}, 0, 10)", "9223372036854775807", "1"),
        ("dp_sum({v}, 0.0, 10.0)", "CAST('inf' AS DOUBLE)", "1.0"),
        ("dp_avg({v}, 0.0, 10.0)", "CAST('-inf' AS DOUBLE)", "1.0"),
        ("dp_var({v}, 0.0, 10.0)", "CAST('inf' AS DOUBLE)", "1.0"),
        (
            "dp_histogram({v}, 0.0, 10.0, 5)",
            "CAST('NaN' AS DOUBLE)",
            "1.0",
        ),
        (
            "dp_sum(CAST({v} AS DECIMAL(38,0)), 0, 10)",
            "99999999999999999999999999999999999999",
            "1",
        ),
        (
            "dp_sum({v}, 0, 10)",
            "CAST(18446744073709551615 AS BIGINT UNSIGNED)",
            "CAST(1 AS BIGINT UNSIGNED)",
        ),
    ];
    for (template, bad, good) in cases {
        let sql = |m: i64| {
            let value = format!("CASE WHEN id = 17 AND x >= {m} THEN {bad} ELSE {good} END");
            format!("SELECT {} AS a FROM t", template.replace("{v}", &value))
        };
        let at_42 = answer_over_one(&sql(42), &rows, &dp_only()).await;
        let at_43 = answer_over_one(&sql(43), &rows, &dp_only()).await;
        assert!(
            at_42.is_ok() && at_43.is_ok(),
            "{template} with {bad}: {} / {}",
            outcome(&at_42),
            outcome(&at_43)
        );
    }
}

/// `life_table` over time grid 0, 1, ..., 128 whose time is the victim's
/// x + 0.5 (its own interval) and 1000 (after the last break) for
/// every other row.
fn life_table_reads_x() -> String {
    let breaks: Vec<String> = (0..=128).map(|b| b.to_string()).collect();
    format!(
        "SELECT life_table('breaks={}', CASE WHEN id = 17 THEN x + 0.5 ELSE 1000 END, 1) AS lt FROM t",
        breaks.join(",")
    )
}

/// HOLDS (was BREAK, high; thresholds) — "a refusal says one bit".
/// Found: a life table's refusal named the intervals whose counts are
/// below k (up to 8), so one query whose grid has an interval per
/// candidate value read the victim's x exactly: "interval (42, 43]". Now
/// the refusal names no interval and proposes no grid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_life_table_refusal_names_no_interval() {
    let answer = answer_over_one(&life_table_reads_x(), &victim_rows(), &DpPolicy::default()).await;
    assert!(
        answer.as_ref().is_err_and(|e| e
            .contains("a life-table interval would count events or censorings of fewer than")
            && !e.contains("(42, 43]")
            && !e.contains("breaks=")),
        "{answer:?}"
    );
}

/// Real `fedsql worker`s under a worker's default disclosure policy
/// (thresholds, no DP), one per data set.
async fn threshold_workers(
    datasets: &[Vec<(i32, i64, i64)>],
) -> (crate::remote::Workers, FedContext, tempfile::TempDir) {
    use fedsql::site::worker::WorkerConfig;
    let dir = tempfile::TempDir::new().unwrap();
    let files: Vec<std::path::PathBuf> = datasets
        .iter()
        .enumerate()
        .map(|(c, rows)| {
            let path = dir.path().join(format!("site{c}.parquet"));
            let file = std::fs::File::create(&path).unwrap();
            let mut writer =
                datafusion::parquet::arrow::ArrowWriter::try_new(file, date_schema(), None)
                    .unwrap();
            writer.write(&date_batch(rows)).unwrap();
            writer.close().unwrap();
            path
        })
        .collect();
    let workers = crate::remote::Workers::start_with(&files, "t", |mut c: WorkerConfig| {
        c.policy = Some(DisclosurePolicy::default());
        c
    })
    .await;
    let ctx = FedContext::new();
    crate::remote::run(&ctx, &workers.create("t"))
        .await
        .unwrap();
    (workers, ctx, dir)
}

/// HOLDS (was BREAK, high; thresholds) — the same over real `fedsql
/// worker`s, by SQL alone: the worker's refusal no longer names the
/// victim's interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_an_analyst_reads_nothing_over_workers_from_a_life_table_refusal() {
    let (_workers, ctx, _dir) = threshold_workers(&[victim_rows(), ordinary()]).await;
    let answer = crate::attacks::answer(&ctx, &life_table_reads_x()).await;
    assert!(
        answer
            .as_ref()
            .is_err_and(|e| e.contains("min_group_rows") && !e.contains("(42, 43]")),
        "{answer:?}"
    );
}

/// HOLDS — DECIMAL division and remainder by a constant (which the
/// rewrite's `is_safe_divisor` might leave unwrapped) answer whether the
/// victim's dividend overflows the rescaled result or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_decimal_division_by_a_constant_answers_on_overflow() {
    let rows = victim_rows();
    let big = "99999999999999999999999999999999999999";
    let cases: &[(&str, &str, &str)] = &[
        (
            "(CAST({v} AS DECIMAL(38,0)) / CAST(0.5 AS DECIMAL(3,1)))",
            big,
            "1",
        ),
        (
            "(CAST({v} AS DECIMAL(38,0)) / CAST(2 AS DECIMAL(3,0)))",
            big,
            "1",
        ),
        (
            "(CAST({v} AS DECIMAL(38,0)) % CAST(0.5 AS DECIMAL(3,1)))",
            big,
            "1",
        ),
        (
            "(CAST({v} AS DECIMAL(38,10)) / CAST(0.001 AS DECIMAL(10,3)))",
            "9999999999999999999999999999",
            "1",
        ),
        (
            "(CAST({v} AS DECIMAL(20,0)) / CAST(0.5 AS DECIMAL(38,30)))",
            "99999999999999999999",
            "1",
        ),
        ("(CAST({v} AS DECIMAL(38,0)) / 0.5)", big, "1"),
    ];
    for (template, bad, good) in cases {
        let at_42 = answer_over_one(&probe(template, 42, bad, good), &rows, &dp_only()).await;
        let at_43 = answer_over_one(&probe(template, 43, bad, good), &rows, &dp_only()).await;
        assert!(
            at_42.is_ok() && at_43.is_ok(),
            "{template}: {} / {}",
            outcome(&at_42),
            outcome(&at_43)
        );
    }
}
