//! Model formulas in R's syntax, and the design matrix they describe.
//!
//! ```text
//! response ~ a + b + C(g) + a:C(g) + c*d - 1
//! cbind(successes, failures) ~ x + offset(log_exposure)
//! ```
//!
//! - numeric columns enter as they are; text columns and `C(x)` are factors,
//!   treatment-coded with the first level (sorted) as reference, or the
//!   level `C(x, Treatment('b'))` names (also `Treatment("b")`; inside an
//!   SQL string literal the single quotes are doubled: `Treatment(''b'')`);
//! - `I(expr)` computes a numeric variable from columns, numbers, `+ - * /`,
//!   `^` (power) and the functions below; `log(x)` (natural), `exp(x)`,
//!   `sqrt(x)` may be used directly as terms (their argument is an
//!   expression too: `log(x + 1)`); the design column is named as written;
//! - `.` stands for every column of the source not otherwise in the formula
//!   (never the virtual `_client`);
//! - `a:b` is an interaction, `a*b` means `a + b + a:b`;
//! - `- 1` or `+ 0` drops the intercept (`+ 1` keeps it);
//! - `cbind(s, f)` is a binomial response of successes and failures,
//!   `offset(col)` adds a known term to the linear predictor (GLMs only).
//!
//! Design columns are named as patsy (and statsmodels) names them:
//! `(Intercept)`, `x`, `C(g)[T.b]`, `g[T.b]`, `x:C(g)[T.b]`. Each design
//! column becomes an SQL expression that runs at the clients; a NULL in any
//! used column makes the row drop out of the fit.
//!
//! [`parse`] reads a formula; [`design`] makes its design columns;
//! [`arithmetic`] reads the expressions of `I(...)` and its kin; [`random`]
//! splits lme4's `(effects | group)` terms off a mixed model's formula.

mod arithmetic;
mod design;
mod parse;
mod random;

pub(crate) use arithmetic::quote_ident;
pub(crate) use design::{DesignColumn, Levels, design_columns, level_label};
pub(crate) use parse::{Formula, Response, Term, Variable, missing_column};
pub(crate) use random::split_random_terms;

#[cfg(test)]
mod tests;
