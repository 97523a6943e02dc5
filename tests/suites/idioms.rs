//! R's formula idioms and robust standard errors (issue 58, items 2 and 3)
//! against R, MASS and sandwich (testdata/reference/idioms.R), on a
//! 400-row trial split over five sites (one of one row, one empty): every
//! estimate, standard error and covariance equal to R's on the whole data
//! to 1e-8, with R's own term names (`names=r`).

use std::collections::HashMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use fedsql::FedContext;
use tempfile::TempDir;

use crate::lm::{federated, reference, terms, value};
use crate::support::close;

/// The sites of every test: 1, 0, 150, 120 rows and the rest (129).
const SIZES: &[i64] = &[1, 0, 150, 120, -1];

async fn trial() -> (FedContext, TempDir) {
    federated("idioms", SIZES).await
}

async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A CSV line as R's write.csv(quote = TRUE) writes it.
fn fields(line: &str) -> Vec<String> {
    let (mut out, mut field, mut quoted, mut chars) =
        (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    out.push(field);
    out
}

/// The rows of an R output file, as maps from column to text.
fn read_r(name: &str) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(reference(&format!("idioms_{name}.csv"))).unwrap();
    let mut lines = text.lines();
    let header = fields(lines.next().unwrap());
    lines
        .filter(|l| !l.is_empty())
        .map(|l| header.iter().cloned().zip(fields(l)).collect())
        .collect()
}

/// R's value of a `name,value` stats file (`None` for NA).
fn r_stat(name: &str, stat: &str) -> Option<f64> {
    let value = &read_r(&format!("{name}.stats"))
        .into_iter()
        .find(|r| r["name"] == stat)
        .unwrap_or_else(|| panic!("{name}: no {stat}"))["value"];
    (!value.is_empty()).then(|| value.parse().unwrap())
}

/// Compares a coefficient table with R's, by term, on the columns R wrote.
fn assert_coefficients(what: &str, got: &[RecordBatch], name: &str) {
    let want = read_r(&format!("{name}.coef"));
    let names = terms(got);
    assert_eq!(names.len(), want.len(), "{what}: terms {names:?}");
    for row in &want {
        let term = &row["term"];
        let i = names
            .iter()
            .position(|n| n == term)
            .unwrap_or_else(|| panic!("{what}: no term {term} in {names:?}"));
        for column in ["estimate", "std_error", "statistic", "p_value"] {
            let Some(w) = row.get(column) else { continue };
            let w: f64 = w.parse().unwrap();
            let g = value(got, i, column).unwrap();
            assert!(close(g, w, 1e-8), "{what} {term} {column}: {g} vs R {w}");
        }
    }
}

/// (term1, term2) -> covariance.
fn long_form(batches: &[RecordBatch]) -> HashMap<(String, String), f64> {
    let mut out = HashMap::new();
    for b in batches {
        let t1 = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
        let t2 = datafusion::arrow::compute::cast(b.column(1), &DataType::Utf8).unwrap();
        let cov = b.column(2).as_primitive::<Float64Type>();
        for row in 0..b.num_rows() {
            assert!(!cov.is_null(row));
            out.insert(
                (
                    t1.as_string::<i32>().value(row).to_string(),
                    t2.as_string::<i32>().value(row).to_string(),
                ),
                cov.value(row),
            );
        }
    }
    out
}

fn assert_vcov(what: &str, got: &[RecordBatch], name: &str) {
    let got = long_form(got);
    let want = read_r(&format!("{name}.vcov"));
    assert_eq!(got.len(), want.len(), "{what}: {:?}", got.keys());
    for row in &want {
        let key = (row["term1"].clone(), row["term2"].clone());
        let g = got[&key];
        let w: f64 = row["covariance"].parse().unwrap();
        assert!(close(g, w, 1e-8), "{what} {key:?}: {g} vs R {w}");
    }
}

const OLS: (&str, &str, &str) = ("lm", "y ~ age + sex + treatment", "");
const POISSON: (&str, &str, &str) = (
    "glm",
    "events ~ treatment + age + offset(log(followup))",
    ", 'poisson'",
);
const LOGIT: (&str, &str, &str) = ("glm", "responded ~ sex + age + treatment", ", 'binomial'");

#[tokio::test]
async fn robust_standard_errors_equal_sandwich() {
    let (ctx, _dir) = trial().await;
    for (model, (function, formula, family)) in
        [("lm", OLS), ("poisson", POISSON), ("logit", LOGIT)]
    {
        let mut cases: Vec<(String, String)> = ["HC0", "HC1", "HC2", "HC3"]
            .iter()
            .map(|t| (format!("se={t}"), format!("{model}_{t}")))
            .collect();
        cases.push(("se=cluster".into(), format!("{model}_cluster_site")));
        cases.push(("cluster=clinic".into(), format!("{model}_cluster_clinic")));
        for (option, name) in cases {
            let args = format!("'idioms', '{formula}'{family}, '{option}, names=r'");
            let vcov = run(&ctx, &format!("SELECT * FROM {function}_vcov({args})")).await;
            assert_vcov(&name, &vcov, &name);
            let coefficients = run(&ctx, &format!("SELECT * FROM {function}({args})")).await;
            let covariance = long_form(&vcov);
            for (i, term) in terms(&coefficients).iter().enumerate() {
                let se = value(&coefficients, i, "std_error").unwrap();
                let v = covariance[&(term.clone(), term.clone())];
                assert!(close(se, v.sqrt(), 1e-12), "{name} {term}: {se} vs √{v}");
            }
        }
    }
}

#[tokio::test]
async fn a_cluster_column_with_nulls_or_a_source_without_sites_is_refused() {
    let (ctx, _dir) = trial().await;
    let err = ctx
        .sql("SELECT * FROM lm('SELECT y, age FROM idioms', 'y ~ age', 'se=cluster')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cluster=col"), "{err}");
    let err = ctx
        .sql("SELECT * FROM lm('SELECT y, age, CASE WHEN id > 390 THEN NULL ELSE clinic END AS c FROM idioms', 'y ~ age', 'cluster=c')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is NULL in 10"), "{err}");
}

#[tokio::test]
async fn formula_idioms_equal_r() {
    let (ctx, _dir) = trial().await;
    let fits = [
        (
            "poisson_offset",
            "events ~ treatment + age + offset(log(followup))",
            "poisson",
        ),
        (
            "logical_factor",
            "responded ~ factor(sex) + age",
            "binomial",
        ),
        (
            "text_relevel",
            "outcome ~ relevel(treatment, \"placebo\") + age",
            "binomial",
        ),
        (
            "as_factor",
            "events ~ as.factor(dose) + age * sex + offset(log(followup))",
            "poisson",
        ),
        (
            "quasipoisson",
            "events ~ treatment + age + offset(log(followup))",
            "quasipoisson",
        ),
        ("quasibinomial", "responded ~ sex + age", "quasibinomial"),
        (
            "negbin_theta2",
            "events ~ treatment + age + offset(log(followup))",
            "negative.binomial(2)",
        ),
    ];
    for (name, formula, family) in fits {
        let args = format!("'idioms', '{formula}', '{family}', 'names=r'");
        let got = run(&ctx, &format!("SELECT * FROM glm({args})")).await;
        assert_coefficients(name, &got, name);
        let stats = run(&ctx, &format!("SELECT * FROM glm_stats({args})")).await;
        for stat in ["deviance", "null_deviance", "dispersion", "aic"] {
            let g = value(&stats, 0, stat).filter(|g| !g.is_nan());
            match (g, r_stat(name, stat)) {
                (Some(g), Some(w)) => assert!(close(g, w, 1e-8), "{name} {stat}: {g} vs R {w}"),
                // R's AIC of a quasi family is NA.
                (None, None) => assert!(stat == "aic" && family.starts_with("quasi"), "{name}"),
                other => panic!("{name} {stat}: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn patsy_names_stay_the_default() {
    let (ctx, _dir) = trial().await;
    let got = run(
        &ctx,
        "SELECT * FROM glm('idioms', 'responded ~ factor(sex) + relevel(treatment, ''placebo'')', 'binomial')",
    )
    .await;
    assert_eq!(
        terms(&got),
        [
            "(Intercept)",
            "C(sex)[T.M]",
            "C(treatment, Treatment('placebo'))[T.drugA]",
            "C(treatment, Treatment('placebo'))[T.drugB]",
        ]
    );
}

/// MASS's `glm.nb` (θ by maximum likelihood) on five sites, one of one
/// row and one empty: coefficients, standard errors, θ, its standard
/// error, 2 × log-likelihood, deviances and AIC equal to R to 1e-8; the
/// same on two other splits (everything at one site, and sites of 1, 2
/// and the rest).
#[tokio::test]
async fn glm_nb_equals_mass() {
    let formula = "events ~ treatment + age + offset(log(followup))";
    let args = format!("'idioms', '{formula}', 'names=r'");
    for sizes in [SIZES, &[-1], &[1, 2, 0, -1]] {
        let (ctx, _dir) = federated("idioms", sizes).await;
        let got = run(&ctx, &format!("SELECT * FROM glm_nb({args})")).await;
        assert_coefficients("glm_nb", &got, "glm_nb");
        let stats = run(&ctx, &format!("SELECT * FROM glm_nb_stats({args})")).await;
        for (stat, column) in [
            ("deviance", "deviance"),
            ("null_deviance", "null_deviance"),
            ("dispersion", "dispersion"),
            ("aic", "aic"),
            ("theta", "theta"),
            ("se_theta", "se_theta"),
            ("twologlik", "twologlik"),
        ] {
            let g = value(&stats, 0, column).unwrap();
            let w = r_stat("glm_nb", stat).unwrap();
            assert!(close(g, w, 1e-8), "glm_nb {stat} {sizes:?}: {g} vs R {w}");
        }
        let vcov = run(&ctx, &format!("SELECT * FROM glm_nb_vcov({args})")).await;
        let covariance = long_form(&vcov);
        for (i, term) in terms(&got).iter().enumerate() {
            let se = value(&got, i, "std_error").unwrap();
            let v = covariance[&(term.clone(), term.clone())];
            assert!(close(se, v.sqrt(), 1e-12), "{term}: {se} vs √{v}");
        }
    }
}

#[tokio::test]
async fn glm_nb_refuses_what_it_cannot_fit() {
    let (ctx, _dir) = trial().await;
    for (args, expected) in [
        ("'idioms', 'events ~ age', 'link=logit'", "no `logit` link"),
        ("'idioms', 'events ~ age', 'se=HC0'", "unknown option"),
        ("'idioms', 'events ~ age', 'poisson'", "expected key=value"),
    ] {
        let err = match ctx.sql(&format!("SELECT * FROM glm_nb({args})")).await {
            Ok(df) => df.collect().await.unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(expected), "{args}: {err}");
    }
}

/// R's `lm(weights = w)`: coefficients, standard errors, t and p-values,
/// the residual standard error, R², adjusted R², F, log-likelihood and
/// AIC equal to R to 1e-8, and `se=HC3` with weights equal to
/// `sandwich::vcovHC(wlm, type = "HC3")`.
#[tokio::test]
async fn weighted_lm_equals_r() {
    let args = "'idioms', 'y ~ age + sex + treatment', 'weights=w, names=r'";
    for sizes in [SIZES, &[-1], &[1, 2, 0, -1]] {
        let (ctx, _dir) = federated("idioms", sizes).await;
        let got = run(&ctx, &format!("SELECT * FROM lm({args})")).await;
        assert_coefficients("lm weights", &got, "lm_weights");
        let stats = run(&ctx, &format!("SELECT * FROM lm_stats({args})")).await;
        for (stat, column) in [
            ("sigma", "sigma"),
            ("r_squared", "r_squared"),
            ("adj_r_squared", "adj_r_squared"),
            ("f_statistic", "f_statistic"),
            ("log_likelihood", "log_likelihood"),
            ("aic", "aic"),
        ] {
            let g = value(&stats, 0, column).unwrap();
            let w = r_stat("lm_weights", stat).unwrap();
            assert!(
                close(g, w, 1e-8),
                "lm weights {stat} {sizes:?}: {g} vs R {w}"
            );
        }
        let hc3 = "'idioms', 'y ~ age + sex + treatment', 'weights=w, se=HC3, names=r'";
        let vcov = run(&ctx, &format!("SELECT * FROM lm_vcov({hc3})")).await;
        assert_vcov("lm weights HC3", &vcov, "lm_weights_HC3");
    }
}

#[tokio::test]
async fn negative_weights_are_refused() {
    let (ctx, _dir) = trial().await;
    let err = ctx
        .sql("SELECT * FROM lm('SELECT y, age, CASE WHEN id = 7 THEN -1.0 ELSE w END AS w FROM idioms', 'y ~ age', 'weights=w')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("negative in 1 rows"), "{err}");
}
