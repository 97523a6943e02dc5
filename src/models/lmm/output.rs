//! The tables of a fitted linear mixed model (fixed effects, variance
//! components as lme4's `as.data.frame(VarCorr())`, fit statistics,
//! conditional modes) and its printout as `summary(lmer)`.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use nalgebra::DMatrix;

use super::pls::lambda;
use super::spec::{LmmFit, LmmOutput, LmmSpec};
use crate::error::Result;
use crate::notices::printed_summary::{FitLines, ModelSummary};
use crate::r_format::format_real;

/// The columns of each output.
pub(crate) fn schema(output: LmmOutput) -> SchemaRef {
    let float = |n: &str| Field::new(n, DataType::Float64, true);
    let text = |n: &str, nullable: bool| Field::new(n, DataType::Utf8, nullable);
    Arc::new(Schema::new(match output {
        LmmOutput::FixedEffects => vec![
            text("term", false),
            float("estimate"),
            float("std_error"),
            float("statistic"),
        ],
        LmmOutput::VarComp => vec![
            text("group", false),
            text("term1", true),
            text("term2", true),
            float("variance"),
            float("std_dev"),
            float("corr"),
        ],
        LmmOutput::Stats => vec![
            Field::new("nobs", DataType::Int64, false),
            Field::new("ngroups", DataType::Int64, false),
            float("sigma"),
            float("log_likelihood"),
            float("aic"),
            float("bic"),
            float("reml_criterion"),
            Field::new("converged", DataType::Boolean, false),
            Field::new("iterations", DataType::Int64, false),
        ],
        LmmOutput::RandomEffects => vec![
            text("group", false),
            text("level", false),
            text("term", false),
            float("estimate"),
            float("cond_std_error"),
        ],
    }))
}

/// σ² ΛΛ': the random effects' covariance matrix.
fn covariance(fit: &LmmFit) -> DMatrix<f64> {
    let l = lambda(&fit.theta, fit.random_terms.len());
    (&l * l.transpose()) * (fit.sigma * fit.sigma)
}

/// The fixed effects' standard errors: √diag(σ² (R_X'R_X)⁻¹).
fn fixed_std_errors(fit: &LmmFit) -> Vec<f64> {
    let inverse = fit
        .solution
        .rx_rx
        .clone()
        .try_inverse()
        .unwrap_or_else(|| DMatrix::from_element(1, 1, f64::NAN));
    (0..fit.fixed_terms.len())
        .map(|i| (fit.sigma * fit.sigma * inverse[(i, i)]).sqrt())
        .collect()
}

/// The number of covariance parameters (θ) plus the fixed effects and σ.
fn parameters(fit: &LmmFit) -> f64 {
    (fit.theta.len() + fit.fixed_terms.len() + 1) as f64
}

/// The table of `output`.
pub(crate) fn batch(output: LmmOutput, spec: &LmmSpec, fit: &LmmFit) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = match output {
        LmmOutput::FixedEffects => {
            let se = fixed_std_errors(fit);
            let beta: Vec<f64> = fit.solution.beta.iter().copied().collect();
            let t: Vec<f64> = beta.iter().zip(&se).map(|(b, s)| b / s).collect();
            vec![
                Arc::new(StringArray::from(fit.fixed_terms.clone())),
                Arc::new(Float64Array::from(beta)),
                Arc::new(Float64Array::from(se)),
                Arc::new(Float64Array::from(t)),
            ]
        }
        LmmOutput::VarComp => {
            let sigma = covariance(fit);
            let q = fit.random_terms.len();
            let (mut group, mut term1, mut term2) = (Vec::new(), Vec::new(), Vec::new());
            let (mut variance, mut std_dev, mut corr) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..q {
                group.push(spec.group.clone());
                term1.push(Some(fit.random_terms[i].clone()));
                term2.push(None);
                variance.push(sigma[(i, i)]);
                std_dev.push(Some(sigma[(i, i)].sqrt()));
                corr.push(None);
            }
            for i in 0..q {
                for j in i + 1..q {
                    group.push(spec.group.clone());
                    term1.push(Some(fit.random_terms[i].clone()));
                    term2.push(Some(fit.random_terms[j].clone()));
                    variance.push(sigma[(i, j)]);
                    std_dev.push(None);
                    let scale = (sigma[(i, i)] * sigma[(j, j)]).sqrt();
                    corr.push((scale > 0.0).then(|| sigma[(i, j)] / scale));
                }
            }
            group.push("Residual".into());
            term1.push(None);
            term2.push(None);
            variance.push(fit.sigma * fit.sigma);
            std_dev.push(Some(fit.sigma));
            corr.push(None);
            vec![
                Arc::new(StringArray::from(group)),
                Arc::new(StringArray::from(term1)),
                Arc::new(StringArray::from(term2)),
                Arc::new(Float64Array::from(variance)),
                Arc::new(Float64Array::from(std_dev)),
                Arc::new(Float64Array::from(corr)),
            ]
        }
        LmmOutput::Stats => {
            let k = parameters(fit);
            vec![
                Arc::new(Int64Array::from(vec![fit.nobs as i64])),
                Arc::new(Int64Array::from(vec![fit.levels.len() as i64])),
                Arc::new(Float64Array::from(vec![fit.sigma])),
                Arc::new(Float64Array::from(vec![-fit.criterion / 2.0])),
                Arc::new(Float64Array::from(vec![fit.criterion + 2.0 * k])),
                Arc::new(Float64Array::from(vec![fit.criterion + k * fit.nobs.ln()])),
                Arc::new(Float64Array::from(vec![spec.reml.then_some(fit.criterion)])),
                Arc::new(BooleanArray::from(vec![fit.criterion.is_finite()])),
                Arc::new(Int64Array::from(vec![fit.evaluations as i64])),
            ]
        }
        LmmOutput::RandomEffects => {
            let q = fit.random_terms.len();
            let l = lambda(&fit.theta, q);
            let s2 = fit.sigma * fit.sigma;
            let (mut group, mut level, mut term) = (Vec::new(), Vec::new(), Vec::new());
            let (mut estimate, mut std_error) = (Vec::new(), Vec::new());
            for j in 0..q {
                for (g, name) in fit.levels.iter().enumerate() {
                    let b = &l * &fit.solution.u[g];
                    let var = (&l * &fit.solution.l_inverse[g] * l.transpose()) * s2;
                    group.push(spec.group.clone());
                    level.push(name.clone());
                    term.push(fit.random_terms[j].clone());
                    estimate.push(b[j]);
                    std_error.push(var[(j, j)].max(0.0).sqrt());
                }
            }
            vec![
                Arc::new(StringArray::from(group)),
                Arc::new(StringArray::from(level)),
                Arc::new(StringArray::from(term)),
                Arc::new(Float64Array::from(estimate)),
                Arc::new(Float64Array::from(std_error)),
            ]
        }
    };
    Ok(RecordBatch::try_new(schema(output), columns)?)
}

/// Left-justifies the cells of each column to a common width, as R prints
/// a character matrix with `right = FALSE`.
fn left_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        for (c, w) in widths.iter().enumerate() {
            let cell = row.get(c).map_or("", String::as_str);
            out.push_str(&format!(" {cell:<w$}"));
        }
        out.push('\n');
    }
    out
}

/// `summary(lmer(...))`: the model line, the criterion, the random
/// effects, the counts and the fixed effects.
pub(crate) fn printed_summary(spec: &LmmSpec, fit: &LmmFit) -> ModelSummary {
    let mut out = if spec.reml {
        "Linear mixed model fit by REML ['lmerMod']\n".to_string()
    } else {
        "Linear mixed model fit by maximum likelihood  ['lmerMod']\n".to_string()
    };
    out.push_str(&format!(
        "Formula: {}\n   Data: {}\n\n",
        spec.text, spec.source.given
    ));
    if spec.reml {
        out.push_str(&format!(
            "REML criterion at convergence: {:.1}\n\n",
            fit.criterion
        ));
    } else {
        let k = parameters(fit);
        let values = [
            fit.criterion + 2.0 * k,
            fit.criterion + k * fit.nobs.ln(),
            -fit.criterion / 2.0,
            fit.criterion,
            fit.nobs - k,
        ];
        let heads = ["AIC", "BIC", "logLik", "deviance", "df.resid"];
        let cells: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
        let w = cells.iter().map(String::len).chain([8]).max().unwrap_or(8);
        let line = |items: &[String]| {
            items
                .iter()
                .map(|s| format!("{s:>w$}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&line(&heads.map(String::from)));
        out.push('\n');
        out.push_str(&line(&cells));
        out.push_str("\n\n");
    }
    let sigma = covariance(fit);
    let q = fit.random_terms.len();
    let mut variances: Vec<f64> = (0..q).map(|i| sigma[(i, i)]).collect();
    variances.push(fit.sigma * fit.sigma);
    let std_devs: Vec<f64> = variances.iter().map(|v| v.sqrt()).collect();
    let (variances, std_devs) = (format_real(&variances, 4), format_real(&std_devs, 4));
    let mut header = vec![
        "Groups".to_string(),
        "Name".into(),
        "Variance".into(),
        "Std.Dev.".into(),
    ];
    if q > 1 {
        header.push("Corr".into());
        header.extend((2..q).map(|_| String::new()));
    }
    let mut rows = vec![header];
    for i in 0..q {
        let mut row = vec![
            if i == 0 {
                spec.group.clone()
            } else {
                String::new()
            },
            fit.random_terms[i].clone(),
            variances[i].clone(),
            std_devs[i].clone(),
        ];
        for j in 0..q.saturating_sub(1) {
            row.push(if j < i {
                let r = sigma[(i, j)] / (sigma[(i, i)] * sigma[(j, j)]).sqrt();
                format!("{r:.2}")
            } else {
                String::new()
            });
        }
        rows.push(row);
    }
    rows.push(vec![
        "Residual".into(),
        String::new(),
        variances[q].clone(),
        std_devs[q].clone(),
    ]);
    out.push_str("Random effects:\n");
    out.push_str(&left_table(&rows));
    out.push_str(&format!(
        "Number of obs: {}, groups:  {}, {}\n\n",
        fit.nobs,
        spec.group,
        fit.levels.len()
    ));
    let se = fixed_std_errors(fit);
    let beta: Vec<f64> = fit.solution.beta.iter().copied().collect();
    let t: Vec<f64> = beta.iter().zip(&se).map(|(b, s)| b / s).collect();
    // printCoefmat: estimates and standard errors in one format (4
    // digits), t values rounded to 3 decimals then formatted to 4 digits.
    let joint: Vec<f64> = beta.iter().chain(&se).copied().collect();
    let joint = format_real(&joint, 4);
    let (beta, se) = joint.split_at(beta.len());
    let t: Vec<f64> = t.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
    let t = format_real(&t, 4);
    let names_width = fit.fixed_terms.iter().map(String::len).max().unwrap_or(0);
    let widths = [
        beta[0].len().max("Estimate".len()),
        se[0].len().max("Std. Error".len()),
        t[0].len().max("t value".len()),
    ];
    out.push_str("Fixed effects:\n");
    out.push_str(&format!(
        "{:names_width$} {:>a$} {:>b$} {:>c$}\n",
        "",
        "Estimate",
        "Std. Error",
        "t value",
        a = widths[0],
        b = widths[1],
        c = widths[2]
    ));
    for (i, name) in fit.fixed_terms.iter().enumerate() {
        out.push_str(&format!(
            "{name:<names_width$} {:>a$} {:>b$} {:>c$}\n",
            beta[i],
            se[i],
            t[i],
            a = widths[0],
            b = widths[1],
            c = widths[2]
        ));
    }
    ModelSummary {
        call: spec.text.clone(),
        aliased: 0,
        rows_dropped: 0,
        fit: FitLines::Printed(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_effects_print_as_lme4_s_table() {
        let rows = vec![
            vec![
                "Groups".to_string(),
                "Name".into(),
                "Variance".into(),
                "Std.Dev.".into(),
                "Corr".into(),
            ],
            vec![
                "site".into(),
                "(Intercept)".into(),
                "8.530021".into(),
                "2.92062".into(),
                String::new(),
            ],
            vec![
                String::new(),
                "x1".into(),
                "0.001259".into(),
                "0.03549".into(),
                "-1.00".into(),
            ],
            vec![
                "Residual".into(),
                String::new(),
                "4.332124".into(),
                "2.08138".into(),
            ],
        ];
        // lme4 1.1.31's summary(lmer(y ~ x1 + x2 + (1 + x1 | site))).
        let want = " Groups   Name        Variance Std.Dev. Corr \n site     (Intercept) 8.530021 2.92062       \n          x1          0.001259 0.03549  -1.00\n Residual             4.332124 2.08138       \n";
        assert_eq!(left_table(&rows), want);
    }
}
