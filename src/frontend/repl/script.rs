//! Running SQL non-interactively in a REPL session: the `-c` texts and
//! `-f` files of the command line, a server's setup scripts, and the
//! start-up file (`~/.fedsqlrc`), each as the REPL would run it typed.

use std::borrow::Cow;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::frontend::repl::session::{Flow, ReplOptions, Session};

/// One thing to run non-interactively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The text of a `-c` argument.
    Sql(String),
    /// A `-f` file (`-` is standard input).
    File(PathBuf),
}

/// Runs a start-up file in `session`; an error in it names the file.
pub(crate) async fn run_rc(session: &mut Session, rc: &Path, out: &mut dyn Write) -> Result<()> {
    let text = read_script(rc)?;
    session
        .run_text(&text, out)
        .await
        .map(|_| ())
        .map_err(|error| match error {
            error if error.is_broken_pipe() => error,
            error => {
                FedError::InvalidArgument(format!("in the start-up file {}: {error}", rc.display()))
            }
        })
}

/// Runs `-c` texts and `-f` files in order, in one session (so `\format`
/// in one carries over to the next), until `\q` or — with
/// [`ReplOptions::stop_on_error`] — the first error, which is returned.
pub async fn run_sources(
    ctx: &FedContext,
    sources: &[Source],
    options: ReplOptions,
    out: &mut impl Write,
) -> Result<()> {
    let mut session = Session::new(ctx, options);
    run_sources_in(&mut session, sources, out).await
}

/// Runs `-c` texts and `-f` files in order in `session` (see [`run_sources`]).
pub(crate) async fn run_sources_in(
    session: &mut Session,
    sources: &[Source],
    out: &mut dyn Write,
) -> Result<()> {
    for source in sources {
        let text = match source {
            Source::Sql(sql) if mixes_command_and_sql(sql) => {
                return Err(FedError::Syntax(format!(
                    "one backslash command per -c: `{}` mixes a backslash command with SQL; give each as its own -c (or put them in a file for -f)",
                    sql.trim()
                )));
            }
            Source::Sql(sql) => Cow::Borrowed(sql.as_str()),
            Source::File(path) => Cow::Owned(read_script(path)?),
        };
        if session.run_text(&text, out).await? == Flow::Quit {
            break;
        }
    }
    Ok(())
}

/// Whether a `-c` text holds a backslash command and something else.
fn mixes_command_and_sql(text: &str) -> bool {
    let text = text.trim();
    if let Some(command) = text.strip_prefix('\\') {
        return command.lines().count() > 1
            || command
                .split_once(';')
                .is_some_and(|(_, rest)| !rest.trim().is_empty());
    }
    text.split(';')
        .skip(1)
        .chain(text.lines().skip(1))
        .any(|part| part.trim_start().starts_with('\\'))
}

fn read_script(path: &Path) -> Result<String> {
    let read = if path == Path::new("-") {
        let mut text = String::new();
        io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    // An I/O error (exit code 1), as psql's for a file it cannot read.
    read.map_err(|e| {
        FedError::Io(io::Error::new(
            e.kind(),
            format!("cannot read the script {}: {e}", path.display()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_backslash_command_per_c() {
        assert!(mixes_command_and_sql("SELECT 1; \\d"));
        assert!(mixes_command_and_sql("\\d; SELECT 1"));
        assert!(mixes_command_and_sql("SELECT 1\n\\clients t"));
        assert!(!mixes_command_and_sql("\\d clinic"));
        assert!(!mixes_command_and_sql("SELECT 'a\\b'; SELECT 2"));
    }
}
