//! What R's `summary()` prints around an `lm` or `glm` coefficient table,
//! rebuilt from the fit: the `Call:` line and the `Coefficients:` header
//! above the table, the significance legend and the fit lines below it
//! (residual standard error, R², F for `lm`; dispersion, deviances, AIC and
//! Fisher scoring iterations for `glm`; rows deleted for missingness).
//!
//! A fit leaves a [`ModelSummary`] in the session's notices
//! ([`crate::notices::Notices::push_summary`]); the REPL prints
//! [`ModelSummary::header`] above the table (to which it adds the stars)
//! and [`ModelSummary::footer`] below it. Numbers follow R's own print
//! methods (`print.summary.lm`, `print.summary.glm`, with R's default
//! `digits = 7`, hence 4 in those methods); the text is compared with R's
//! transcript in `testdata/reference/summary_print.txt`. The residual
//! quantiles R prints first are not shown: they would need every residual.

use crate::r_format::{SIGNIFICANCE_LEGEND, format_g, format_number, format_pval, format_real};

/// R's `digits` inside `print.summary.*`: `max(3, getOption("digits") - 3)`.
const SUMMARY_DIGITS: usize = 4;

/// What a fit's summary prints besides the coefficient table.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSummary {
    /// R's call, e.g. `glm(formula = y ~ x, family = binomial, data = clinic)`.
    pub call: String,
    /// Terms without an estimate (aliased, printed as `NA`).
    pub aliased: usize,
    /// Rows left out for a NULL in a column the formula uses.
    pub rows_dropped: i64,
    /// The fit lines of the model kind.
    pub fit: FitLines,
}

/// The numbers of the lines under the table.
#[derive(Debug, Clone, PartialEq)]
pub enum FitLines {
    /// `lm`: residual standard error, R², F.
    Lm {
        sigma: Option<f64>,
        df_residual: f64,
        r_squared: f64,
        adj_r_squared: Option<f64>,
        /// F, its two degrees of freedom and p-value (none without a model
        /// term or residual degrees of freedom).
        f_statistic: Option<(f64, f64, f64, f64)>,
    },
    /// `glm`: dispersion, deviances, AIC, iterations.
    Glm {
        /// R's family name (`binomial`, `Gamma`, `inverse.gaussian`, ...).
        family: String,
        /// Whether the family estimates its dispersion (else it is 1).
        estimated_dispersion: bool,
        dispersion: f64,
        null_deviance: f64,
        df_null: i64,
        deviance: f64,
        df_residual: i64,
        aic: f64,
        iterations: usize,
        /// `glm_nb`: θ, its standard error, 2 × log-likelihood and
        /// MASS's warning while fitting θ (`print.summary.negbin`).
        theta: Option<(f64, f64, f64, Option<String>)>,
    },
    /// A model that prints itself whole, as R's `summary()` of it does (a
    /// meta-analysis: metafor's `summary(rma)` and a forest plot per term;
    /// a mixed model: `summary(lmer)`).
    Printed(String),
    /// `coxph`: R's `summary.coxph` footer, and the strata by site.
    Cox {
        n: i64,
        events: i64,
        /// Strata with events (each site is one, or more with `strata()`).
        strata: i64,
        concordance: f64,
        df: usize,
        /// (statistic, p-value) of the likelihood ratio, Wald and score tests.
        tests: [(f64, f64); 3],
    },
}

impl ModelSummary {
    /// What R prints above the table: the call and the `Coefficients:` line.
    pub fn header(&self) -> String {
        let coefficients = match self.aliased {
            0 => "Coefficients:".to_string(),
            n => format!("Coefficients: ({n} not defined because of singularities)"),
        };
        format!("Call:\n{}\n\n{coefficients}\n", self.call)
    }

    /// What R prints below the table: the stars' legend and the fit lines.
    pub fn footer(&self) -> String {
        format!("---\n{SIGNIFICANCE_LEGEND}\n\n{}", self.fit_lines())
    }

    /// The call and the fit lines, without a table to go around (what a
    /// machine format writes to stderr, what a projection of the table is
    /// followed by, and what `FedContext::take_notices` hands out).
    pub fn text(&self) -> String {
        match &self.fit {
            // A model that prints itself (R's own layout has no `Call:`).
            FitLines::Printed(text) => text.clone(),
            _ => format!("Call:\n{}\n\n{}", self.call, self.fit_lines()),
        }
    }

    /// The lines under the legend: R², F, ... or dispersion, deviances, ...
    fn fit_lines(&self) -> String {
        let mut out = String::new();
        let deleted = (self.rows_dropped > 0).then(|| {
            format!(
                "  ({} observation{} deleted due to missingness)\n",
                self.rows_dropped,
                if self.rows_dropped == 1 { "" } else { "s" }
            )
        });
        match &self.fit {
            FitLines::Lm {
                sigma,
                df_residual,
                r_squared,
                adj_r_squared,
                f_statistic,
            } => {
                let na = || "NaN".to_string();
                out.push_str(&format!(
                    "Residual standard error: {} on {} degrees of freedom\n",
                    sigma.map_or_else(na, |s| format_number(signif(s, SUMMARY_DIGITS), 7)),
                    df_residual
                ));
                out.push_str(deleted.as_deref().unwrap_or(""));
                if let Some((f, df1, df2, p)) = f_statistic {
                    out.push_str(&format!(
                        "Multiple R-squared:  {},\tAdjusted R-squared:  {} \nF-statistic: {} on {} and {} DF,  p-value: {}\n",
                        format_g(*r_squared, SUMMARY_DIGITS),
                        adj_r_squared.map_or_else(na, |a| format_g(a, SUMMARY_DIGITS)),
                        format_g(*f, SUMMARY_DIGITS),
                        df1,
                        df2,
                        format_pval(*p, SUMMARY_DIGITS)
                    ));
                }
            }
            FitLines::Glm {
                family,
                estimated_dispersion,
                dispersion,
                null_deviance,
                df_null,
                deviance,
                df_residual,
                aic,
                iterations,
                theta,
            } => {
                let dispersion = if *estimated_dispersion {
                    format_number(*dispersion, 7)
                } else {
                    "1".into()
                };
                out.push_str(&format!(
                    "(Dispersion parameter for {family} family taken to be {dispersion})\n\n"
                ));
                let deviances = format_real(&[*null_deviance, *deviance], SUMMARY_DIGITS + 1);
                let dfs = format_real(&[*df_null as f64, *df_residual as f64], 7);
                for (i, name) in ["    Null", "Residual"].iter().enumerate() {
                    out.push_str(&format!(
                        "{name} deviance: {}  on {}  degrees of freedom\n",
                        deviances[i], dfs[i]
                    ));
                }
                out.push_str(deleted.as_deref().unwrap_or(""));
                out.push_str(&format!(
                    "AIC: {}\n\nNumber of Fisher Scoring iterations: {iterations}\n",
                    format_number(*aic, SUMMARY_DIGITS + 1)
                ));
                if let Some((theta, se, twologlik, warning)) = theta {
                    out.push_str(&negbin_lines(*theta, *se, *twologlik, warning.as_deref()));
                }
            }
            FitLines::Printed(text) => out.push_str(text),
            FitLines::Cox {
                n,
                events,
                strata,
                concordance,
                df,
                tests,
            } => {
                out.push_str(&format!("n= {n}, number of events= {events} \n"));
                out.push_str(deleted.as_deref().unwrap_or(""));
                out.push_str(&format!("Stratified by site: {strata} strata\n\n"));
                let round = |x: f64, d: i32| (x * 10f64.powi(d)).round() / 10f64.powi(d);
                out.push_str(&format!("Concordance= {}\n", round(*concordance, 3)));
                let names = [
                    "Likelihood ratio test= ",
                    "Wald test            = ",
                    "Score (logrank) test = ",
                ];
                for (name, (statistic, p)) in names.iter().zip(tests) {
                    out.push_str(&format!(
                        "{name}{}  on {df} df,   p={}\n",
                        round(*statistic, 2),
                        format_pval(*p, 3)
                    ));
                }
            }
        }
        out
    }
}

/// R's `signif(x, digits)`.
fn signif(x: f64, digits: usize) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    format!("{x:.*e}", digits.saturating_sub(1))
        .parse()
        .unwrap_or(x)
}

/// R's call of a model: `name(formula = ..., <middle>, data = ...)`,
/// broken over lines as R's `deparse` breaks it (after an argument once a
/// line is past 60 characters, continuing with 4 spaces).
pub(crate) fn call_text(function: &str, formula: &str, middle: &[String], data: &str) -> String {
    let formula = formula.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut arguments = vec![format!("formula = {formula}")];
    arguments.extend(middle.iter().cloned());
    arguments.push(format!("data = {}", r_data_name(data)));
    let mut text = format!("{function}(");
    let mut line_start = 0;
    for (i, argument) in arguments.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
            if text.len() - line_start > 60 {
                text.push('\n');
                line_start = text.len();
                text.push_str("    ");
            }
        }
        text.push_str(argument);
    }
    text.push(')');
    text
}

/// A table name as is; a query source in quotes, as R would show a string.
fn r_data_name(source: &str) -> String {
    let source = source.trim();
    let plain = source
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if plain {
        source.to_string()
    } else {
        format!(
            "\"{}\"",
            source.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    }
}

/// MASS's `print.summary.negbin` lines: θ and its standard error to the
/// decimals the error warrants, then 2 × log-likelihood.
fn negbin_lines(theta: f64, se: f64, twologlik: f64, warning: Option<&str>) -> String {
    let dp = (2.0 - se.log10().floor()).max(0.0) as usize;
    let fixed = |x: f64, d: usize| {
        let scale = 10f64.powi(d as i32);
        format!("{:.d$}", (x * scale).round() / scale)
    };
    let mut out = format!(
        "\n\n              Theta:  {} \n          Std. Err.:  {} \n",
        fixed(theta, dp),
        fixed(se, dp)
    );
    if let Some(w) = warning {
        out.push_str(&format!("Warning while fitting theta: {w} \n"));
    }
    // R: format(round(x, 3), nsmall = dp), seven significant digits.
    let whole = (twologlik.abs().max(1.0).log10().floor() as usize) + 1;
    let mut text = fixed(twologlik, 7usize.saturating_sub(whole).min(3).max(dp));
    while text.contains('.')
        && text.ends_with('0')
        && text.split('.').nth(1).unwrap_or("").len() > dp
    {
        text.pop();
    }
    if text.ends_with('.') {
        text.pop();
    }
    out.push_str(&format!("\n 2 x log-likelihood:  {text} \n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negbin_lines_are_mass_print() {
        // MASS 7.3-58 on testdata/reference/idioms.R's glm.nb fit.
        let text = negbin_lines(
            2.522320675466197,
            0.44325317696226113,
            -1273.6925395514872,
            None,
        );
        assert_eq!(
            text,
            "\n\n              Theta:  2.522 \n          Std. Err.:  0.443 \n\n 2 x log-likelihood:  -1273.693 \n"
        );
    }

    #[test]
    fn calls_break_as_r_deparses_them() {
        assert_eq!(
            call_text(
                "glm",
                "event ~ age + bmi + smoker",
                &["family = binomial".into()],
                "clinic"
            ),
            "glm(formula = event ~ age + bmi + smoker, family = binomial, \n    data = clinic)"
        );
        assert_eq!(
            call_text("lm", "y ~  x", &[], "SELECT * FROM t"),
            "lm(formula = y ~ x, data = \"SELECT * FROM t\")"
        );
    }

    #[test]
    fn signif_rounds_to_significant_digits() {
        assert_eq!(signif(10.84321, 4), 10.84);
        assert_eq!(signif(0.000123456, 2), 0.00012);
    }
}
