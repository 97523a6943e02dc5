//! The REPL: fedsql's interactive shell, in the manner of datafusion-cli and
//! psql.
//!
//! Input is read a line at a time ([`input`]): a line starting with `\` is a
//! backslash command ([`command`]), anything else is SQL that runs once a `;`
//! ends it. A [`Session`] runs both and prints results through
//! [`crate::frontend::print`], so `\?` and `\d` look like query results. The terminal
//! loop ([`interactive`]) adds line editing, history and Ctrl-C; everything
//! else can be driven in-process with [`run_script`], which is how the tests
//! (and the non-interactive CLI) use it.

pub mod command;
pub(crate) mod completion;
pub(crate) mod input;
pub(crate) mod interactive;
pub(crate) mod progress;
pub(crate) mod script;
pub(crate) mod session;
pub(crate) mod sql_types;

use std::io::Write;

pub use command::Command;
pub use input::{Input, LineBuffer};
pub use interactive::run_interactive;
pub use session::{Flow, ReplOptions, ScriptSummary, Session};

use crate::coordinator::context::FedContext;
use crate::error::Result;

/// Runs `input` — SQL statements and backslash commands — through a fresh
/// session over `ctx`, exactly as if it were typed at the REPL, writing
/// results (and, unless [`ReplOptions::stop_on_error`], `Error: ...` lines)
/// to `out`.
///
/// With `stop_on_error` the first error is returned and nothing after it
/// runs; otherwise errors are printed and counted in the summary.
///
/// ```no_run
/// # async fn demo() -> fedsql::Result<()> {
/// let ctx = fedsql::FedContext::new();
/// fedsql::frontend::demo::register_demo(&ctx)?;
/// let mut out = Vec::new();
/// let opts = fedsql::frontend::repl::ReplOptions::default();
/// fedsql::frontend::repl::run_script(&ctx, "\\d\nSELECT count(*) FROM clinic;", &mut out, &opts).await?;
/// # Ok(()) }
/// ```
pub async fn run_script(
    ctx: &FedContext,
    input: &str,
    out: &mut impl Write,
    opts: &ReplOptions,
) -> Result<ScriptSummary> {
    let mut session = Session::new(ctx, opts.clone());
    session.run_text(input, out).await?;
    Ok(session.summary().clone())
}
