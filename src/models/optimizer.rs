//! Server-side optimizers for federated SGD. They live only at the
//! coordinator: each round they take the aggregated gradient (and, for
//! `newton`, the aggregated curvature) and move the parameters. The update
//! rules and defaults are Keras's (which TensorFlow Federated's server
//! optimizers follow).

use fedsql_udfs::linalg::{solve_spd, to_dmatrix, to_dvector};
use ndarray::Array2;

use crate::error::{FedError, Result};
use crate::table_function::options::TableOption;

/// An optimizer and its hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub enum OptimizerKind {
    /// θ ← θ − η g
    Sgd,
    /// Heavy ball: v ← μ v − η g; θ ← θ + v (Nesterov: θ ← θ + μ v − η g).
    Momentum { momentum: f64, nesterov: bool },
    /// Adam with bias correction: θ ← θ − η m̂ / (√v̂ + ε).
    Adam {
        beta1: f64,
        beta2: f64,
        epsilon: f64,
    },
    /// Adagrad: a ← a + g²; θ ← θ − η g / (√a + ε).
    Adagrad {
        initial_accumulator: f64,
        epsilon: f64,
    },
    /// Damped Newton: θ ← θ − η (H + λI)⁻¹ g.
    Newton { damping: f64 },
}

impl OptimizerKind {
    pub const NAMES: &'static str = "sgd, momentum, adam, adagrad, newton";

    /// The optimizer with its default hyperparameters.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "sgd" => Self::Sgd,
            "momentum" => Self::Momentum {
                momentum: 0.9,
                nesterov: false,
            },
            "adam" => Self::Adam {
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-7,
            },
            "adagrad" => Self::Adagrad {
                initial_accumulator: 0.1,
                epsilon: 1e-7,
            },
            "newton" => Self::Newton { damping: 0.0 },
            other => {
                return Err(FedError::UnknownObject(format!(
                    "unknown optimizer `{other}`: use one of {}",
                    Self::NAMES
                )));
            }
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Sgd => "sgd",
            Self::Momentum { .. } => "momentum",
            Self::Adam { .. } => "adam",
            Self::Adagrad { .. } => "adagrad",
            Self::Newton { .. } => "newton",
        }
    }

    /// Keras's default learning rate (1 for Newton's full step).
    pub fn default_learning_rate(&self) -> f64 {
        match self {
            Self::Sgd | Self::Momentum { .. } => 0.01,
            Self::Adam { .. } | Self::Adagrad { .. } => 0.001,
            Self::Newton { .. } => 1.0,
        }
    }

    /// Whether each round needs the curvature block.
    pub fn needs_curvature(&self) -> bool {
        matches!(self, Self::Newton { .. })
    }

    /// The hyperparameter options this optimizer takes.
    pub fn options(&self) -> &'static [&'static str] {
        match self {
            Self::Sgd => &[],
            Self::Momentum { .. } => &["momentum", "nesterov"],
            Self::Adam { .. } => &["beta1", "beta2", "epsilon"],
            Self::Adagrad { .. } => &["initial_accumulator_value", "epsilon"],
            Self::Newton { .. } => &["damping"],
        }
    }

    /// Sets one hyperparameter (`option.key` is one of [`Self::options`]).
    pub fn set(&mut self, option: &TableOption) -> Result<()> {
        let key = option.key.as_str();
        match (self, key) {
            (Self::Momentum { momentum, .. }, "momentum") => *momentum = option.fraction()?,
            (Self::Momentum { nesterov, .. }, "nesterov") => *nesterov = option.boolean()?,
            (Self::Adam { beta1, .. }, "beta1") => *beta1 = option.fraction()?,
            (Self::Adam { beta2, .. }, "beta2") => *beta2 = option.fraction()?,
            (Self::Adam { epsilon, .. } | Self::Adagrad { epsilon, .. }, "epsilon") => {
                *epsilon = option.positive()?
            }
            (
                Self::Adagrad {
                    initial_accumulator,
                    ..
                },
                "initial_accumulator_value",
            ) => *initial_accumulator = option.non_negative()?,
            (Self::Newton { damping }, "damping") => *damping = option.non_negative()?,
            (this, _) => {
                return Err(FedError::InvalidArgument(format!(
                    "option `{key}` does not apply to the {} optimizer",
                    this.name()
                )));
            }
        }
        Ok(())
    }
}

/// An optimizer with its state (moments, accumulators), kept at the
/// coordinator between rounds.
#[derive(Debug, Clone)]
pub(crate) struct ServerOptimizer {
    kind: OptimizerKind,
    learning_rate: f64,
    /// Steps taken so far (Adam's bias correction).
    steps: i32,
    /// Momentum's velocity, or Adam's first moment.
    first: Vec<f64>,
    /// Adam's second moment, or Adagrad's accumulator.
    second: Vec<f64>,
}

impl ServerOptimizer {
    pub(crate) fn new(kind: OptimizerKind, learning_rate: f64, k: usize) -> Self {
        let second = match kind {
            OptimizerKind::Adagrad {
                initial_accumulator,
                ..
            } => vec![initial_accumulator; k],
            _ => vec![0.0; k],
        };
        Self {
            kind,
            learning_rate,
            steps: 0,
            first: vec![0.0; k],
            second,
        }
    }

    /// Applies one step to `theta` with the aggregated gradient `g` (and
    /// curvature `h`, for Newton).
    pub(crate) fn step(
        &mut self,
        theta: &mut [f64],
        g: &[f64],
        h: Option<&Array2<f64>>,
    ) -> Result<()> {
        let lr = self.learning_rate;
        self.steps += 1;
        match self.kind {
            OptimizerKind::Sgd => {
                for (t, g) in theta.iter_mut().zip(g) {
                    *t -= lr * g;
                }
            }
            OptimizerKind::Momentum { momentum, nesterov } => {
                for ((t, v), g) in theta.iter_mut().zip(&mut self.first).zip(g) {
                    *v = momentum * *v - lr * g;
                    *t += if nesterov { momentum * *v - lr * g } else { *v };
                }
            }
            OptimizerKind::Adam {
                beta1,
                beta2,
                epsilon,
            } => {
                let correct1 = 1.0 - beta1.powi(self.steps);
                let correct2 = 1.0 - beta2.powi(self.steps);
                for (((t, m), v), g) in theta
                    .iter_mut()
                    .zip(&mut self.first)
                    .zip(&mut self.second)
                    .zip(g)
                {
                    *m = beta1 * *m + (1.0 - beta1) * g;
                    *v = beta2 * *v + (1.0 - beta2) * g * g;
                    *t -= lr * (*m / correct1) / ((*v / correct2).sqrt() + epsilon);
                }
            }
            OptimizerKind::Adagrad { epsilon, .. } => {
                for ((t, a), g) in theta.iter_mut().zip(&mut self.second).zip(g) {
                    *a += g * g;
                    *t -= lr * g / (a.sqrt() + epsilon);
                }
            }
            OptimizerKind::Newton { damping } => {
                let h = h.ok_or_else(|| {
                    FedError::Internal("a Newton step needs the curvature block".into())
                })?;
                let mut damped = h.clone();
                for j in 0..damped.nrows() {
                    damped[(j, j)] += damping;
                }
                let direction =
                    solve_spd(&to_dmatrix(&damped), &to_dvector(&ndarray::Array1::from(g.to_vec())))
                        .ok_or_else(|| {
                            FedError::InvalidArgument(
                                "the curvature matrix is singular (an aliased or constant column?): set damping=1e-6 or more, or drop the column".into(),
                            )
                        })?;
                for (t, d) in theta.iter_mut().zip(direction.iter()) {
                    *t -= lr * d;
                }
            }
        }
        Ok(())
    }
}
