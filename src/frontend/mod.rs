//! Everything a person or a program types at fedsql, and what it shows
//! them: the command line ([`cli`]), the REPL ([`repl`]), the PostgreSQL
//! wire endpoint `fedsql serve` ([`pgwire`]), scripts cut into statements
//! ([`split`]), the bundled demo table ([`demo`]) and output ([`print`],
//! [`matrix_display`], [`chart`]; R-style numbers are
//! [`crate::r_format`]'s, shared with the models' printed summaries).
//!
//! The frontend stands above the coordinator: it runs statements through
//! [`crate::FedContext`], whose own statements it recognises through
//! [`crate::coordinator::fed_statement`] like every other caller; nothing
//! below it imports it.

pub(crate) mod chart;
pub mod cli;
#[cfg(test)]
pub(crate) mod cli_reference;
pub mod demo;
pub mod exit_code;
pub(crate) mod matrix_display;
pub mod pgwire;
pub mod print;
pub mod repl;
pub mod split;
