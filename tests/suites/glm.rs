//! `glm` and `glm_stats` against reference values computed once by
//! statsmodels (testdata/reference/generate.py; iteration counts by R's
//! glm.fit rule), each dataset split unevenly over clients including a client
//! of one to three rows.

use datafusion::arrow::array::RecordBatch;
use fedsql::FedContext;

use crate::lm::{federated, read_csv, terms, value};
use crate::support::close;

/// (dataset, formula, family, reference model, client sizes)
const MODELS: &[(&str, &str, &str, &str, &[i64])] = &[
    (
        "spector",
        "grade ~ gpa + tuce + psi",
        "binomial",
        "spector_logit",
        &[2, 10, 1, -1],
    ),
    (
        "spector",
        "grade ~ gpa + tuce + psi",
        "binomial(probit)",
        "spector_probit",
        &[3, -1],
    ),
    (
        "cpunish",
        "executions ~ income + perpoverty + perblack + ln_vc100k96 + south + degree",
        "poisson",
        "cpunish_poisson",
        &[1, 8, -1],
    ),
    (
        "scotland",
        "yes ~ coutax + unempf + mor + act + gdp + age + coutax_femaleunemp",
        "gamma(log)",
        "scotland_gamma",
        &[2, 15, 0, -1],
    ),
    (
        "star98",
        "cbind(nabove, nbelow) ~ lowinc + perasian + perblack + perhisp + pctchrt + pctyrrnd + perminte + avyrsexp + avsalk + perspenk + ptratio + pctaf",
        "binomial",
        "star98_binomial",
        &[1, 150, 50, -1],
    ),
    (
        "synthetic_poisson",
        "y ~ x1 + x2 + C(g) + offset(offset_log)",
        "poisson",
        "synthetic_poisson",
        &[3, 400, -1],
    ),
];

pub(crate) async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn text(batches: &[RecordBatch], column: &str) -> String {
    let c = batches[0].column_by_name(column).unwrap();
    datafusion::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &Default::default())
        .unwrap()
        .value(0)
        .to_string()
}

fn assert_coefficients(
    what: &str,
    got: &[RecordBatch],
    model: &str,
    rel_estimate: f64,
    rel_se: f64,
) {
    let names = terms(got);
    let want = read_csv(&format!("{model}.coef.csv"));
    assert_eq!(names.len(), want.len(), "{what}: terms {names:?}");
    for row in &want {
        let term = &row["term"];
        let i = names
            .iter()
            .position(|n| n == term)
            .unwrap_or_else(|| panic!("{what}: no term {term} in {names:?}"));
        for (column, tol) in [
            ("estimate", rel_estimate),
            ("std_error", rel_se),
            ("statistic", rel_se),
            ("conf_low", rel_se),
            ("conf_high", rel_se),
        ] {
            let expected: f64 = row[column].parse().unwrap();
            let actual = value(got, i, column).unwrap();
            assert!(
                close(actual, expected, tol),
                "{what}: {term} {column}: got {actual}, reference {expected}"
            );
        }
        let expected: f64 = row["p_value"].parse().unwrap();
        let actual = value(got, i, "p_value").unwrap();
        assert!(
            close(actual, expected, 1e-3) || (expected < 1e-300 && actual < 1e-300),
            "{what}: {term} p_value: {actual} vs {expected}"
        );
    }
}

fn assert_stats(what: &str, got: &[RecordBatch], model: &str, rel: f64, check_iterations: bool) {
    let want = &read_csv(&format!("{model}.stats.csv"))[0];
    for (column, expected) in want {
        match column.as_str() {
            "family" | "link" | "converged" => {
                assert_eq!(&text(got, column), expected, "{what}: {column}")
            }
            "iterations" if !check_iterations => {}
            _ => {
                let expected: f64 = expected.parse().unwrap();
                let actual = value(got, 0, column).unwrap();
                let tol = if column == "dispersion" {
                    rel.max(1e-6)
                } else {
                    rel
                };
                assert!(
                    close(actual, expected, tol),
                    "{what}: {column}: got {actual}, reference {expected}"
                );
            }
        }
    }
}

#[tokio::test]
async fn converged_fits_match_statsmodels() {
    // The references are converged to 1e-12; so is this fit.
    for (dataset, formula, family, model, sizes) in MODELS {
        let (ctx, _dir) = federated(dataset, sizes).await;
        let what = format!("{model} over clients {sizes:?}");
        let call = format!("('{dataset}', '{formula}', '{family}', 'epsilon=1e-14, maxit=100')");
        let coef = run(&ctx, &format!("SELECT * FROM glm{call}")).await;
        assert_coefficients(&what, &coef, model, 1e-6, 1e-4);
        let stats = run(&ctx, &format!("SELECT * FROM glm_stats{call}")).await;
        assert_stats(&what, &stats, model, 1e-6, false);
    }
}

#[tokio::test]
async fn r_default_stopping_rule_gives_r_iteration_counts() {
    for (dataset, formula, family, model, sizes) in MODELS {
        let (ctx, _dir) = federated(dataset, sizes).await;
        let what = format!("{model} with R's defaults");
        let stats = run(
            &ctx,
            &format!("SELECT * FROM glm_stats('{dataset}', '{formula}', '{family}')"),
        )
        .await;
        // R's rule stops before full convergence: estimates agree to ~1e-5.
        assert_stats(&what, &stats, model, 1e-5, true);
        let coef = run(
            &ctx,
            &format!("SELECT * FROM glm('{dataset}', '{formula}', '{family}')"),
        )
        .await;
        assert_coefficients(&what, &coef, model, 1e-4, 1e-3);
    }
}

#[tokio::test]
async fn the_fit_is_the_same_however_the_rows_are_split() {
    let formula = "y ~ x1 + x2 + C(g) + offset(offset_log)";
    let mut results = Vec::new();
    for sizes in [&[-1][..], &[1, -1][..], &[0, 2, 300, 1, -1][..]] {
        let (ctx, _dir) = federated("synthetic_poisson", sizes).await;
        results.push(
            run(
                &ctx,
                &format!("SELECT * FROM glm('synthetic_poisson', '{formula}', 'poisson')"),
            )
            .await,
        );
    }
    for other in &results[1..] {
        crate::support::assert_same_result("glm over splits", other, &results[0], true, 1e-9);
    }
}

#[tokio::test]
async fn non_convergence_and_separation_are_reported() {
    let (ctx, _dir) = federated("spector", &[5, -1]).await;
    let stats = run(&ctx, "SELECT iterations, converged FROM glm_stats('spector', 'grade ~ gpa + tuce + psi', 'binomial', 'maxit=2')").await;
    assert_eq!(value(&stats, 0, "iterations"), Some(2.0));
    assert_eq!(text(&stats, "converged"), "false");
    let notices = ctx.take_notices().join("\n");
    assert!(notices.contains("did not converge"), "{notices}");

    // A covariate that separates the outcomes perfectly.
    let separated =
        "SELECT grade, CASE WHEN grade = 1 THEN gpa + 10 ELSE gpa END AS split FROM spector";
    run(
        &ctx,
        &format!(
            "SELECT * FROM glm('{}', 'grade ~ split', 'binomial')",
            separated.replace('\'', "''")
        ),
    )
    .await;
    let notices = ctx.take_notices().join("\n");
    assert!(
        notices.contains("fitted probabilities numerically 0 or 1"),
        "{notices}"
    );
    assert!(
        notices.contains("Residual deviance"),
        "the deviance summary follows a glm: {notices}"
    );
}

#[tokio::test]
async fn errors_name_the_problem() {
    let (ctx, _dir) = federated("cpunish", &[2, -1]).await;
    let fails = |sql: String| {
        let ctx = ctx.clone();
        async move {
            match ctx.sql(&sql).await {
                Ok(df) => df
                    .collect()
                    .await
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                Err(e) => e.to_string(),
            }
        }
    };
    let e = fails("SELECT * FROM glm('cpunish', 'executions ~ income', 'weibull')".into()).await;
    assert!(e.contains("unknown family"), "{e}");
    let e =
        fails("SELECT * FROM glm('cpunish', 'executions ~ income', 'poisson(logit)')".into()).await;
    assert!(e.contains("no `logit` link"), "{e}");
    let e = fails("SELECT * FROM glm('SELECT income, executions - 5 AS n FROM cpunish', 'n ~ income', 'poisson')".into()).await;
    assert!(
        e.contains("outside the range of the poisson family") && e.contains("non-negative"),
        "{e}"
    );
    let e = fails("SELECT * FROM glm('cpunish', 'executions ~ income', 'binomial')".into()).await;
    assert!(
        e.contains("outside the range of the binomial family"),
        "{e}"
    );
    let e = fails("SELECT * FROM glm('cpunish', 'executions ~ nope', 'poisson')".into()).await;
    assert!(e.contains("`nope`"), "{e}");
    let e = fails("SELECT * FROM glm('SELECT * FROM cpunish WHERE income > 1e12', 'executions ~ income', 'poisson')".into()).await;
    assert!(e.contains("no rows"), "{e}");
    let e = fails("SELECT * FROM glm('SELECT *, CAST(NULL AS DOUBLE) AS z FROM cpunish', 'executions ~ z', 'poisson')".into()).await;
    assert!(e.contains("no rows left"), "{e}");
    let e =
        fails("SELECT * FROM glm('cpunish', 'executions ~ income', 'poisson', 'maxit=0')".into())
            .await;
    assert!(e.contains("maxit"), "{e}");
    let e = fails(
        "SELECT * FROM glm('cpunish', 'executions ~ income', 'poisson', 'tolerance=3')".into(),
    )
    .await;
    assert!(e.contains("unknown option"), "{e}");
}

#[tokio::test]
async fn prior_weights_scale_the_information() {
    // Prior weight 2 on every row: the same estimates, standard errors / √2.
    let (ctx, _dir) = federated("spector", &[4, -1]).await;
    let options = "epsilon=1e-14";
    let plain = run(
        &ctx,
        &format!("SELECT * FROM glm('spector', 'grade ~ gpa + psi', 'binomial', '{options}')"),
    )
    .await;
    let weighted = run(
        &ctx,
        &format!("SELECT * FROM glm('SELECT *, 2 AS w FROM spector', 'grade ~ gpa + psi', 'binomial', 'weights=w, {options}')"),
    )
    .await;
    for i in 0..3 {
        let (b, bw) = (
            value(&plain, i, "estimate").unwrap(),
            value(&weighted, i, "estimate").unwrap(),
        );
        assert!(close(b, bw, 1e-9), "{b} vs {bw}");
        let (s, sw) = (
            value(&plain, i, "std_error").unwrap(),
            value(&weighted, i, "std_error").unwrap(),
        );
        // As in R, the covariance comes from the X'WX of the last IRLS step,
        // one step before the estimate: the two fits stop after different
        // numbers of steps, so their X'WX agree to the convergence only.
        assert!(
            close(s / 2f64.sqrt(), sw, 1e-7),
            "{s} vs {sw}: {}",
            (s / 2f64.sqrt() - sw).abs() / sw
        );
    }
}

#[tokio::test]
async fn gaussian_identity_equals_lm_including_aliased_terms() {
    // x3 = x1 + x2 exactly: R reports NA for x3 in both lm and glm.
    let (ctx, _dir) = federated("synthetic_lm", &[1, 200, -1]).await;
    let formula = "y ~ x1 + x2 + x3 + C(grp)";
    let lm = run(
        &ctx,
        &format!("SELECT * FROM lm('synthetic_lm', '{formula}')"),
    )
    .await;
    let glm = run(
        &ctx,
        &format!("SELECT * FROM glm('synthetic_lm', '{formula}', 'gaussian')"),
    )
    .await;
    assert_eq!(terms(&lm), terms(&glm));
    let x3 = terms(&glm).iter().position(|t| t == "x3").unwrap();
    assert_eq!(value(&glm, x3, "estimate"), None, "x3 is aliased");
    // Gaussian IRLS converges in one step to the least-squares solution.
    crate::support::assert_same_result("gaussian glm vs lm", &glm, &lm, true, 1e-8);
}
