//! `lm_vcov` and `glm_vcov` (issue 19, point 4) against R's `vcov()`
//! (testdata/reference/vcov.R), each dataset split unevenly over clients;
//! and the square root of the diagonal against `std_error`.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;

use crate::lm::{federated, read_csv, terms, value};
use crate::support::close;

/// (function, dataset, formula, family, reference, client sizes)
type Fit = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [i64],
);

const FITS: &[Fit] = &[
    (
        "glm",
        "spector",
        "grade ~ gpa + tuce + psi",
        "binomial",
        "spector_logit",
        &[2, 10, 1, -1],
    ),
    (
        "glm",
        "cpunish",
        "executions ~ income + perpoverty + perblack + ln_vc100k96 + south + degree",
        "poisson",
        "cpunish_poisson",
        &[1, 8, -1],
    ),
    (
        "glm",
        "scotland",
        "yes ~ coutax + unempf + mor + act + gdp + age + coutax_femaleunemp",
        "gamma(log)",
        "scotland_gamma",
        &[2, 15, 0, -1],
    ),
    (
        "glm",
        "synthetic_poisson",
        "y ~ x1 + x2 + C(g) + offset(offset_log)",
        "poisson",
        "synthetic_poisson",
        &[3, 400, -1],
    ),
    (
        "lm",
        "longley",
        "totemp ~ gnpdefl + gnp + unemp + armed + pop + year",
        "",
        "longley_lm",
        &[1, 7, -1],
    ),
    (
        "lm",
        "synthetic_lm",
        "y ~ x1 + x2 + C(grp) + x1:C(grp)",
        "",
        "synthetic_lm",
        &[1, 200, 120, -1],
    ),
    (
        "lm",
        "synthetic_lm",
        "y ~ x1 + x2 + x3",
        "",
        "synthetic_lm_aliased",
        &[1, 250, -1],
    ),
];

async fn run(ctx: &fedsql::FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// (term1, term2) -> covariance, NULL as None.
fn long_form(batches: &[RecordBatch]) -> HashMap<(String, String), Option<f64>> {
    let mut out = HashMap::new();
    for b in batches {
        let (t1, t2) = (
            b.column(0).as_string::<i32>(),
            b.column(1).as_string::<i32>(),
        );
        let cov = b.column(2).as_primitive::<Float64Type>();
        for row in 0..b.num_rows() {
            out.insert(
                (t1.value(row).to_string(), t2.value(row).to_string()),
                (!cov.is_null(row)).then(|| cov.value(row)),
            );
        }
    }
    out
}

#[tokio::test]
async fn vcov_matches_r_and_its_diagonal_is_the_squared_std_error() {
    for (function, dataset, formula, family, reference, sizes) in FITS {
        let (ctx, _dir) = federated(dataset, sizes).await;
        let family = if family.is_empty() {
            String::new()
        } else {
            format!(", '{family}'")
        };
        let args = format!("'{dataset}', '{formula}'{family}");
        let got = long_form(&run(&ctx, &format!("SELECT * FROM {function}_vcov({args})")).await);
        let want = read_csv(&format!("{reference}.vcov.csv"));
        assert_eq!(got.len(), want.len(), "{reference}: {:?}", got.keys());
        for row in &want {
            let key = (row["term1"].clone(), row["term2"].clone());
            let got = got
                .get(&key)
                .unwrap_or_else(|| panic!("{reference}: no {key:?}"));
            match (got, row["covariance"].as_str()) {
                (None, "") => {}
                (Some(g), w) if !w.is_empty() => {
                    let w: f64 = w.parse().unwrap();
                    assert!(close(*g, w, 1e-8), "{reference} {key:?}: {g} vs R {w}");
                }
                (g, w) => panic!("{reference} {key:?}: {g:?} vs R '{w}'"),
            }
        }
        let coefficients = run(&ctx, &format!("SELECT * FROM {function}({args})")).await;
        for (i, term) in terms(&coefficients).iter().enumerate() {
            let se = value(&coefficients, i, "std_error");
            let variance = got[&(term.clone(), term.clone())];
            match (se, variance) {
                (Some(se), Some(v)) => {
                    assert!(
                        close(v.sqrt(), se, 1e-12),
                        "{reference} {term}: {se} vs √{v}"
                    )
                }
                (None, None) => {}
                other => panic!("{reference} {term}: {other:?}"),
            }
        }
    }
}
