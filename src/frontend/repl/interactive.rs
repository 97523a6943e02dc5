//! The interactive loop: rustyline line editing, history and tab
//! completion ([`crate::frontend::repl::completion`]), a continuation prompt while a
//! statement is pending, the start-up file, and Ctrl-C handling.
//!
//! Ctrl-C means two things. At the prompt, rustyline reads it as a key and
//! the loop drops the line (and any pending statement). While a query runs,
//! the terminal sends SIGINT; the query's future runs inside
//! `tokio::select!` against `tokio::signal::ctrl_c()`, so the signal drops
//! the future — cancelling the query and its client rounds — and the session
//! goes on.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{CompletionType, Config, Editor};

use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::frontend::repl::completion::{FedHelper, Vocabulary};
use crate::frontend::repl::input::LineBuffer;
use crate::frontend::repl::session::{Flow, ReplOptions, Session};

/// The prompt for a new statement or command.
pub(crate) const PROMPT: &str = "fedsql> ";
/// The prompt while a statement waits for its `;`.
pub(crate) const CONTINUATION_PROMPT: &str = "     -> ";

/// Runs the interactive REPL on the terminal until `\q` or Ctrl-D, after
/// the start-up file `rc` (if any) in the same session.
///
/// Errors in commands and statements are printed and the loop goes on; only
/// a failure of the terminal itself ends it with an error.
pub async fn run_interactive(
    ctx: &FedContext,
    options: ReplOptions,
    rc: Option<&Path>,
) -> Result<()> {
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .build();
    let mut editor: Editor<FedHelper, DefaultHistory> =
        Editor::with_config(config).map_err(terminal_error)?;
    let helper = FedHelper::default();
    editor.set_helper(Some(helper.clone()));
    let history = history_path();
    if let Some(path) = &history {
        // No history file yet is the normal first run.
        let _ = editor.load_history(path);
    }
    let mut session = Session::new(
        ctx,
        ReplOptions {
            progress: true,
            ..options
        },
    );
    let mut stdout = io::stdout();
    if let Some(rc) = rc
        && let Err(error) =
            crate::frontend::repl::script::run_rc(&mut session, rc, &mut stdout).await
    {
        eprintln!("Error: {error}");
    }
    let mut buffer = LineBuffer::new();
    // The lines of the statement being typed, kept as one history entry.
    let mut typed = String::new();
    let result = loop {
        // Names created by the last statement complete at this prompt.
        helper.set_vocabulary(Vocabulary::of(ctx).await);
        let prompt = if buffer.is_pending() {
            CONTINUATION_PROMPT
        } else {
            PROMPT
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                typed.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break Ok(()),
            Err(error) => break Err(terminal_error(error)),
        };
        if !typed.is_empty() {
            typed.push('\n');
        }
        typed.push_str(&line);
        let inputs = buffer.push_line(&line);
        if !buffer.is_pending() {
            if !typed.trim().is_empty() {
                let _ = editor.add_history_entry(typed.trim());
            }
            typed.clear();
        }
        let flow = tokio::select! {
            flow = session.run_inputs(inputs, &mut stdout) => flow,
            Ok(()) = tokio::signal::ctrl_c() => {
                // `\r` writes over the `^C` the terminal has echoed.
                println!("\r^C query cancelled");
                Ok(Flow::Continue)
            }
        };
        match flow {
            Ok(Flow::Continue) => {}
            Ok(Flow::Quit) => break Ok(()),
            // Only writing to stdout can fail here (statement errors are
            // printed by the session); say so and go on.
            Err(error) => eprintln!("Error: {error}"),
        }
        let _ = stdout.flush();
    };
    if let Some(path) = &history
        && let Err(error) = editor.save_history(path)
    {
        eprintln!(
            "warning: could not save the history to {}: {error}",
            path.display()
        );
    }
    result
}

/// `~/.fedsql_history`, if there is a home directory.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(".fedsql_history"))
}

fn terminal_error(error: ReadlineError) -> FedError {
    match error {
        ReadlineError::Io(error) => FedError::Io(error),
        other => FedError::Io(io::Error::other(other.to_string())),
    }
}
