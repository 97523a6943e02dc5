//! What defines a linear mixed model ([`LmmSpec`]: the arguments of
//! `lmm(source, formula [, options])` read), which table a call returns,
//! and the fitted model.

use crate::error::{FedError, Result};
use crate::formula::{Formula, Response, split_random_terms};
use crate::models::source::ModelSource;
use crate::table_function::options::Options;

use super::pls::Solution;

pub(crate) const USAGE: &str =
    "lmm('table or SELECT query', 'y ~ x1 + x2 + (1 + x1 | _client)' [, 'reml=true'])";

/// Which table a call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LmmOutput {
    FixedEffects,
    VarComp,
    Stats,
    RandomEffects,
}

impl LmmOutput {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LmmOutput::FixedEffects => "lmm",
            LmmOutput::VarComp => "lmm_varcomp",
            LmmOutput::Stats => "lmm_stats",
            LmmOutput::RandomEffects => "lmm_ranef",
        }
    }
}

/// A parsed call.
#[derive(Debug, Clone)]
pub(crate) struct LmmSpec {
    pub source: ModelSource,
    /// The formula as written.
    pub text: String,
    pub fixed: Formula,
    /// The random effects, as a formula whose response is the model's.
    pub random: Formula,
    pub group: String,
    pub reml: bool,
}

impl LmmSpec {
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        if !(2..=3).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "lmm takes 2 or 3 arguments; usage: {USAGE}"
            )));
        }
        let (fixed_text, random) = split_random_terms(&args[1])?;
        let term = match random.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(FedError::InvalidArgument(format!(
                    "formula '{}': no random-effect term such as `(1 | _client)`; lm fits a model without one",
                    args[1]
                )));
            }
            _ => {
                return Err(FedError::InvalidArgument(format!(
                    "formula '{}': one random-effect term (one grouping column) is supported",
                    args[1]
                )));
            }
        };
        let fixed = Formula::parse(&fixed_text)?;
        let Response::Column(y) = &fixed.response else {
            return Err(FedError::InvalidArgument(
                "lmm takes one numeric response column".into(),
            ));
        };
        if fixed.offset.is_some() {
            return Err(FedError::InvalidArgument(
                "offset() belongs to glm formulas".into(),
            ));
        }
        let random_formula = Formula::parse(&format!("{y} ~ {}", term.effects))?;
        if random_formula.offset.is_some() {
            return Err(FedError::InvalidArgument(
                "offset() cannot be a random effect".into(),
            ));
        }
        let mut reml = true;
        for option in &Options::parse("lmm", args.get(2).map(String::as_str), &["reml"])? {
            reml = option.boolean()?;
        }
        Ok(Self {
            source: ModelSource::parse(&args[0]),
            text: args[1].clone(),
            fixed,
            random: random_formula,
            group: term.group,
            reml,
        })
    }
}

/// A fitted linear mixed model.
#[derive(Debug, Clone)]
pub(crate) struct LmmFit {
    pub fixed_terms: Vec<String>,
    pub random_terms: Vec<String>,
    pub levels: Vec<String>,
    pub theta: Vec<f64>,
    pub solution: Solution,
    pub criterion: f64,
    pub sigma: f64,
    pub nobs: f64,
    pub evaluations: usize,
}
