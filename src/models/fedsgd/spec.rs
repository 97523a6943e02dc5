//! What defines a FedSGD run, and how `fedsgd`'s arguments and options
//! string are read into it.

use crate::error::{FedError, Result};
use crate::formula::{Formula, Response};
use crate::models::optimizer::OptimizerKind;
use crate::models::source::ModelSource;
use crate::table_function::options::{Options, unknown_option};
use fedsql_udfs::sgd_step::SgdModel;

pub(crate) const USAGE: &str = "fedsgd('table or SELECT query', 'y ~ x1 + C(factor)', 'linear|logistic|poisson' [, 'optimizer=adam, learning_rate=0.05, rounds=200, ...'])";

/// How client gradients are averaged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Weighting {
    /// Weighted by example counts: the mean gradient over all examples.
    NumExamples,
    /// Every client's mean gradient counts the same.
    Uniform,
}

/// Everything that defines a FedSGD run.
#[derive(Debug, Clone)]
pub struct FedSgdSpec {
    pub source: ModelSource,
    pub formula: Formula,
    pub model: SgdModel,
    pub optimizer: OptimizerKind,
    pub learning_rate: f64,
    pub rounds: usize,
    pub l2: f64,
    pub weighting: Weighting,
    /// Clients sampled per round (all when `None`), with the sampling seed.
    pub clients_per_round: Option<usize>,
    pub seed: u64,
    /// Fit on standardized columns (means and standard deviations learned by
    /// one federated round), report on the original scale.
    pub standardize: bool,
    /// Stop when the gradient norm falls below this (0: run every round).
    pub tolerance: f64,
    /// Where the parameters start.
    pub start: Start,
}

/// The starting parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// Every coefficient 0.
    Zero,
    /// The intercept at the intercept-only fit (the link of the mean
    /// response), every other coefficient 0; models without an intercept
    /// start at 0.
    Mean,
}

/// The options `fedsgd` takes besides each optimizer's own.
const COMMON_OPTIONS: &[&str] = &[
    "optimizer",
    "learning_rate",
    "rounds",
    "l2",
    "weighting",
    "clients_per_round",
    "seed",
    "standardize",
    "tolerance",
    "start",
];

impl FedSgdSpec {
    /// Parses the string arguments of `fedsgd(source, formula, model [, options])`.
    pub fn parse(args: &[String]) -> Result<Self> {
        if !(3..=4).contains(&args.len()) {
            return Err(FedError::InvalidArgument(format!(
                "fedsgd takes 3 or 4 arguments; usage: {USAGE}"
            )));
        }
        let formula = Formula::parse(&args[1])?;
        if matches!(formula.response, Response::Counts { .. }) {
            return Err(FedError::InvalidArgument(
                "fedsgd takes one response column; for cbind(successes, failures) use glm(..., 'binomial')".into(),
            ));
        }
        let model = SgdModel::parse(&args[2]).map_err(FedError::InvalidArgument)?;
        let options = Options::parse_any(args.get(3).map(String::as_str))?;
        let optimizer = match options.iter().find(|o| o.key == "optimizer") {
            Some(o) => OptimizerKind::parse(&o.value)?,
            None => OptimizerKind::Sgd,
        };
        let mut spec = FedSgdSpec {
            source: ModelSource::parse(&args[0]),
            formula,
            model,
            learning_rate: optimizer.default_learning_rate(),
            optimizer,
            rounds: 100,
            l2: 0.0,
            weighting: Weighting::NumExamples,
            clients_per_round: None,
            seed: 0,
            standardize: false,
            tolerance: 0.0,
            start: Start::Mean,
        };
        for option in &options {
            let bad = |what: &str| option.bad(what);
            match option.key.as_str() {
                "optimizer" => {}
                "learning_rate" => {
                    spec.learning_rate = option
                        .positive()
                        .map_err(|_| bad("the learning rate must be positive"))?
                }
                "rounds" => {
                    spec.rounds = option
                        .count()
                        .map_err(|_| bad("rounds must be at least 1"))?
                }
                "l2" => {
                    spec.l2 = option
                        .non_negative()
                        .map_err(|_| bad("the L2 penalty must not be negative"))?
                }
                "weighting" => {
                    spec.weighting = match option.choice(&["num_examples", "uniform"])? {
                        "uniform" => Weighting::Uniform,
                        _ => Weighting::NumExamples,
                    }
                }
                "clients_per_round" => {
                    spec.clients_per_round = Some(
                        option
                            .count()
                            .map_err(|_| bad("at least one client per round"))?,
                    )
                }
                "seed" => {
                    spec.seed = option
                        .value
                        .parse()
                        .map_err(|_| bad("expected a whole number"))?
                }
                "standardize" => spec.standardize = option.boolean()?,
                "tolerance" => {
                    spec.tolerance = option
                        .non_negative()
                        .map_err(|_| bad("the tolerance must not be negative"))?
                }
                "start" => {
                    spec.start = match option.choice(&["zero", "mean"])? {
                        "zero" => Start::Zero,
                        _ => Start::Mean,
                    }
                }
                other if spec.optimizer.options().contains(&other) => spec.optimizer.set(option)?,
                other => {
                    let all = OptimizerKind::NAMES
                        .split(", ")
                        .filter_map(|n| OptimizerKind::parse(n).ok())
                        .find(|o| o.options().contains(&other));
                    return Err(FedError::InvalidArgument(match all {
                        Some(owner) => format!(
                            "option `{other}` is for the {} optimizer, not {}",
                            owner.name(),
                            spec.optimizer.name()
                        ),
                        None => {
                            let valid: Vec<&str> = COMMON_OPTIONS
                                .iter()
                                .chain(spec.optimizer.options())
                                .copied()
                                .collect();
                            return Err(unknown_option("fedsgd", other, &valid));
                        }
                    }));
                }
            }
        }
        Ok(spec)
    }
}
