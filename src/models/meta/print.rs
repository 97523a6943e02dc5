//! What the REPL prints under a meta-analysis: per term, metafor's
//! `summary(rma)` (model line, τ², I², H², the Q test and the model
//! results, numbers as metafor's `digits = 4` fixed format) and a text
//! forest plot of the per-site estimates with the pooled diamond.

use super::analysis::{Analysis, MetaModel, MetaOptions, TermAnalysis};
use super::pooling::{Method, Pooled, Test};
use crate::notices::printed_summary::{FitLines, ModelSummary, call_text};
use crate::r_format::significance_stars;

/// The width of a forest plot's axis, in characters.
const AXIS: usize = 41;

/// metafor's `fmtx(x, digits = 4)`.
fn fixed(x: f64) -> String {
    format!("{x:.4}")
}

/// τ² as metafor prints it: `0` at the boundary.
fn zero_or_fixed(x: f64) -> String {
    if x == 0.0 { "0".into() } else { fixed(x) }
}

/// metafor's `fmtp(p, digits = 4)`.
fn p_value(p: f64) -> String {
    if p < 1e-4 {
        "<.0001".into()
    } else {
        format!("{p:.4}")
    }
}

/// The R call the analysis stands for: the per-site fit, then `rma`.
pub(crate) fn r_call(model: MetaModel, args: &[String], options: &MetaOptions) -> String {
    let middle: Vec<String> = match model {
        MetaModel::Glm => vec![format!("family = {}", args[2].trim())],
        _ => Vec::new(),
    };
    let site_fit = call_text(model.r_function(), &args[1], &middle, &args[0]);
    let test = match options.test {
        Test::Z => String::new(),
        Test::KnappHartung => ", test = \"knha\"".into(),
    };
    let level = if options.level == 0.95 {
        String::new()
    } else {
        format!(", level = {}", 100.0 * options.level)
    };
    format!(
        "rma(yi, sei = se, method = \"{}\"{test}{level})\n  with yi, se from {site_fit} at each site",
        options.method.name()
    )
}

/// The summary the REPL prints after the table.
pub(crate) fn printed_summary(analysis: &Analysis, call: String) -> ModelSummary {
    let mut text = format!("Call:\n{call}\n\n");
    for term in &analysis.terms {
        text.push_str(&format!("Term: {}\n\n", term.term));
        text.push_str(&summary_rma(term, term.main(), &analysis.options));
        text.push('\n');
        text.push_str(&forest(term, &analysis.options));
        text.push('\n');
    }
    ModelSummary {
        call,
        aliased: 0,
        rows_dropped: 0,
        fit: FitLines::Printed(text),
    }
}

/// `summary(rma(...))` of one pooled model.
pub(crate) fn summary_rma(term: &TermAnalysis, p: &Pooled, options: &MetaOptions) -> String {
    let k = term.sites.len();
    let random = term.random.is_some();
    let mut out = if random {
        format!(
            "Random-Effects Model (k = {k}; tau^2 estimator: {})\n\n",
            options.method.name()
        )
    } else {
        format!("Fixed-Effects Model (k = {k})\n\n")
    };
    out.push_str(&fit_statistics(p, k, options.method));
    if random {
        let se = p
            .tau2_std_error
            .map(|s| format!(" (SE = {})", fixed(s)))
            .unwrap_or_default();
        out.push_str(&format!(
            "tau^2 (estimated amount of total heterogeneity): {}{se}\n",
            zero_or_fixed(p.tau2)
        ));
        out.push_str(&format!(
            "tau (square root of estimated tau^2 value):      {}\n",
            zero_or_fixed(p.tau2.sqrt())
        ));
    }
    out.push_str(&format!(
        "I^2 (total heterogeneity / total variability):   {:.2}%\n",
        p.i2
    ));
    out.push_str(&format!(
        "H^2 (total variability / sampling variability):  {:.2}\n\n",
        p.h2
    ));
    let q_p = match p_value(p.q_p_value) {
        small if small.starts_with('<') => format!("< {}", &small[1..]),
        p => format!("= {p}"),
    };
    out.push_str(&format!(
        "Test for Heterogeneity:\nQ(df = {}) = {}, p-val {q_p}\n\n",
        p.q_df,
        fixed(p.q)
    ));
    let (statistic, p_name) = match p.t_df {
        Some(_) => ("tval", "pval"),
        None => ("zval", "pval"),
    };
    let mut cells = vec![
        ("estimate", fixed(p.estimate)),
        ("se", fixed(p.std_error)),
        (statistic, fixed(p.statistic)),
    ];
    if let Some(df) = p.t_df {
        cells.push(("df", df.to_string()));
    }
    cells.extend([
        (p_name, p_value(p.p_value)),
        ("ci.lb", fixed(p.conf_low)),
        ("ci.ub", fixed(p.conf_high)),
    ]);
    // metafor's layout: each column as wide as its header or value, all
    // but the first two spaces wider.
    let (mut head_line, mut value_line) = (String::new(), String::new());
    for (i, (h, c)) in cells.iter().enumerate() {
        let w = h.len().max(c.len()) + if i == 0 { 0 } else { 2 };
        head_line.push_str(&format!("{h:>w$}"));
        value_line.push_str(&format!("{c:>w$}"));
    }
    out.push_str("Model Results:\n\n");
    out.push_str(&head_line);
    out.push('\n');
    out.push_str(&format!(
        "{value_line}  {}\n",
        significance_stars(p.p_value)
    ));
    out
}

/// metafor's line of fit statistics: logLik, deviance, AIC, BIC, AICc
/// (REML over k − 1 observations, ML over k; μ and τ² as parameters, μ
/// alone for the fixed-effect model).
fn fit_statistics(p: &Pooled, k: usize, method: Method) -> String {
    let parameters = if method == Method::FixedEffect {
        1.0
    } else {
        2.0
    };
    let n = if method == Method::Reml {
        k as f64 - 1.0
    } else {
        k as f64
    };
    let minus_two_ll = -2.0 * p.log_likelihood;
    let aic = minus_two_ll + 2.0 * parameters;
    let bic = minus_two_ll + parameters * n.ln();
    let aicc = aic + 2.0 * parameters * (parameters + 1.0) / (n - parameters - 1.0).max(1.0);
    let values = [
        fixed(p.log_likelihood),
        fixed(p.deviance),
        fixed(aic),
        fixed(bic),
        fixed(aicc),
    ];
    // metafor's layout: every column as wide as the widest of its headers
    // and values, the first without the two spaces the others lead with.
    let width = values.iter().map(String::len).max().unwrap_or(0).max(8);
    let mut heads = String::new();
    let mut line = String::new();
    for (i, (h, v)) in ["logLik", "deviance", "AIC", "BIC", "AICc"]
        .iter()
        .zip(values)
        .enumerate()
    {
        let w = if i == 0 { width } else { width + 2 };
        heads.push_str(&format!("{h:>w$}"));
        line.push_str(&format!("{v:>w$}"));
    }
    format!("{heads}   \n{line}   \n\n")
}

/// A text forest plot: each site's estimate and interval, then the pooled
/// estimates as diamonds, on one axis.
pub(crate) fn forest(term: &TermAnalysis, options: &MetaOptions) -> String {
    let z = fedsql_udfs::distribution::normal_quantile(1.0 - (1.0 - options.level) / 2.0);
    let mut rows: Vec<(String, f64, f64, f64, bool)> = term
        .sites
        .iter()
        .map(|(site, b, se)| (site.clone(), *b, b - z * se, b + z * se, false))
        .collect();
    let fe_label = "FE Model";
    rows.push((
        fe_label.into(),
        term.fixed.estimate,
        term.fixed.conf_low,
        term.fixed.conf_high,
        true,
    ));
    if let Some(r) = &term.random {
        rows.push(("RE Model".into(), r.estimate, r.conf_low, r.conf_high, true));
    }
    let low = rows
        .iter()
        .map(|r| r.2)
        .fold(f64::INFINITY, f64::min)
        .min(0.0);
    let high = rows
        .iter()
        .map(|r| r.3)
        .fold(f64::NEG_INFINITY, f64::max)
        .max(0.0);
    let span = if high > low { high - low } else { 1.0 };
    let at = |x: f64| (((x - low) / span) * (AXIS - 1) as f64).round() as usize;
    let name_width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let mut out = format!("Forest plot ({}% intervals):\n", 100.0 * options.level);
    let zero = at(0.0);
    for (i, (name, b, lo, hi, pooled)) in rows.iter().enumerate() {
        if *pooled && (i == 0 || !rows[i - 1].4) {
            out.push_str(&format!("{:name_width$}  {}\n", "", "-".repeat(AXIS)));
        }
        let mut line: Vec<char> = vec![' '; AXIS];
        line[zero] = ':';
        let (l, h, m) = (at(*lo), at(*hi), at(*b));
        if *pooled {
            for c in line.iter_mut().take(h + 1).skip(l) {
                *c = '=';
            }
            line[l] = '<';
            line[h] = '>';
            line[m] = '◆';
        } else {
            for c in line.iter_mut().take(h + 1).skip(l) {
                *c = '-';
            }
            line[l] = '[';
            line[h] = ']';
            line[m] = '■';
        }
        let text: String = line.into_iter().collect();
        out.push_str(&format!(
            "{name:name_width$}  {text}  {:>8} [{}, {}]\n",
            fixed(*b),
            fixed(*lo),
            fixed(*hi)
        ));
    }
    out.push_str(&format!(
        "{:name_width$}  {:<w$}{}\n",
        "",
        fixed(low),
        fixed(high),
        w = AXIS - fixed(high).len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::super::pooling::pool;
    use super::*;

    fn analysis() -> TermAnalysis {
        let (y, se) = ([0.5, 1.2, -0.3, 0.8], [0.3, 0.5, 0.4, 0.2]);
        TermAnalysis {
            term: "x".into(),
            sites: ["a", "b", "c", "d"]
                .iter()
                .zip(y.iter().zip(se))
                .map(|(s, (b, e))| (s.to_string(), *b, e))
                .collect(),
            fixed: pool(&y, &se, Method::FixedEffect, Test::Z, 0.95),
            random: Some(pool(&y, &se, Method::Reml, Test::Z, 0.95)),
        }
    }

    #[test]
    fn summary_prints_as_metafor() {
        let options = MetaOptions {
            method: Method::Reml,
            level: 0.95,
            test: Test::Z,
        };
        let t = analysis();
        let text = summary_rma(&t, t.main(), &options);
        // metafor 3.8.1's summary(rma(yi, sei = sei)) of the same studies.
        for line in [
            "Random-Effects Model (k = 4; tau^2 estimator: REML)",
            "tau^2 (estimated amount of total heterogeneity): 0.1774 (SE = 0.2394)",
            "tau (square root of estimated tau^2 value):      0.4211",
            "I^2 (total heterogeneity / total variability):   63.18%",
            "H^2 (total variability / sampling variability):  2.72",
            "Q(df = 3) = 7.6041, p-val = 0.0549",
            "estimate      se    zval    pval   ci.lb   ci.ub",
            "  0.5474  0.2707  2.0221  0.0432  0.0168  1.0780  *",
            "  logLik  deviance       AIC       BIC      AICc   ",
            " -2.6928    5.3857    9.3857    7.5829   21.3857   ",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
    }

    #[test]
    fn forest_plot_has_a_row_per_site_and_a_diamond_per_model() {
        let options = MetaOptions {
            method: Method::Reml,
            level: 0.95,
            test: Test::Z,
        };
        let plot = forest(&analysis(), &options);
        assert_eq!(plot.matches('■').count(), 4, "{plot}");
        assert_eq!(plot.matches('◆').count(), 2, "{plot}");
        assert!(plot.contains("RE Model"), "{plot}");
    }
}
