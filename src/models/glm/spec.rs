//! What defines a GLM fit ([`GlmSpec`]): the arguments and options of
//! `glm(source, formula, family [, options])` read, and R's call for them.

use fedsql_udfs::family::{Family, Link, parse_family};

use crate::error::{FedError, Result};
use crate::formula::{Formula, Response};
use crate::models::robust::Covariance;
use crate::models::source::ModelSource;
use crate::notices::printed_summary::call_text;
use crate::table_function::options::Options;

/// The options `glm` takes.
const OPTIONS: &[&str] = &["maxit", "epsilon", "weights", "se", "cluster", "names"];

pub(super) const USAGE: &str = "glm('table or SELECT query', 'y ~ x1 + C(factor)', 'family[(link)]' [, 'maxit=25, epsilon=1e-8, weights=col'])";

/// Everything that defines a fit.
#[derive(Debug, Clone)]
pub(crate) struct GlmSpec {
    pub source: ModelSource,
    pub formula: Formula,
    pub family: Family,
    pub link: Link,
    pub maxit: usize,
    pub epsilon: f64,
    pub weights: Option<String>,
    /// `quasibinomial` or `quasipoisson`: the family's fit with the
    /// dispersion estimated (Pearson's χ² / df, as R).
    pub quasi: bool,
    /// Terms named as R names them (`names=r`).
    pub r_names: bool,
    /// Model-based or robust standard errors (`se=`, `cluster=`).
    pub covariance: Covariance,
    /// A fit of `glm_nb` at its current θ: as MASS's `negbin` class, the
    /// dispersion is 1 (θ carries the variance).
    pub negbin_ml: bool,
}

impl GlmSpec {
    /// Parses the string arguments of `glm(source, formula, family [, options])`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        if !(3..=4).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "glm takes 3 or 4 arguments; usage: {USAGE}"
            )));
        }
        let formula = Formula::parse(&args[1])?;
        let (quasi, family_text) = quasi_family(&args[2]);
        let (family, link) = parse_family(family_text).map_err(FedError::InvalidArgument)?;
        if matches!(formula.response, Response::Counts { .. }) && family != Family::Binomial {
            return Err(FedError::InvalidArgument(
                "cbind(successes, failures) responses are for the binomial family".into(),
            ));
        }
        let mut spec = GlmSpec {
            source: ModelSource::parse(&args[0]),
            formula,
            family,
            link,
            maxit: 25,
            epsilon: 1e-8,
            weights: None,
            quasi,
            r_names: false,
            covariance: Covariance::Classical,
            negbin_ml: false,
        };
        let options = Options::parse("glm", args.get(3).map(String::as_str), OPTIONS)?;
        for option in &options {
            match option.key.as_str() {
                "maxit" => spec.maxit = option.count()?,
                "epsilon" => spec.epsilon = option.positive()?,
                "weights" => spec.weights = Some(option.value.clone()),
                "names" => spec.r_names = option.choice(&["r", "patsy"])? == "r",
                _ => {}
            }
        }
        spec.covariance = Covariance::from_options(&options)?;
        Ok(spec)
    }
}

/// `quasibinomial(...)` and `quasipoisson(...)`: whether the text names a
/// quasi family, and the family it fits as.
fn quasi_family(text: &str) -> (bool, &str) {
    let trimmed = text.trim();
    match trimmed.get(..5) {
        Some(prefix) if prefix.eq_ignore_ascii_case("quasi") => {
            let rest = &trimmed[5..];
            let lower = rest.to_ascii_lowercase();
            if lower.starts_with("binomial") || lower.starts_with("poisson") {
                (true, rest)
            } else {
                (false, trimmed)
            }
        }
        _ => (false, trimmed),
    }
}

/// R's call for `glm(source, formula, family [, options])`: the family
/// as R writes it (`binomial`, `binomial(link = "probit")`) and prior
/// weights as `weights = col`.
pub(super) fn r_call(args: &[String], spec: &GlmSpec) -> String {
    let name = match spec.family {
        _ if spec.quasi => format!("quasi{}", spec.family.name()),
        Family::NegativeBinomial(theta) => {
            return call_with_family(
                args,
                spec,
                format!("negative.binomial({:?})", theta.value()),
            );
        }
        _ => spec.family.name().to_string(),
    };
    let family = if spec.link == spec.family.default_link() {
        name
    } else {
        format!("{name}(link = \"{}\")", spec.link.name())
    };
    call_with_family(args, spec, family)
}

/// R's call with the family as R writes it.
fn call_with_family(args: &[String], spec: &GlmSpec, family: String) -> String {
    let mut middle = vec![format!("family = {family}")];
    if let Some(weights) = &spec.weights {
        middle.push(format!("weights = {weights}"));
    }
    call_text("glm", &args[1], &middle, &args[0])
}
