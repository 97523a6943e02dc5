//! The `fedsql` command line, in the manner of psql and datafusion-cli.
//!
//! Without `-c` or `-f` (and with a terminal on standard input) fedsql
//! starts the interactive REPL ([`crate::frontend::repl`]) with the demo federation
//! registered. With `-c SQL` and `-f FILE` — each may be repeated, and they
//! run in the order given — it runs them non-interactively and exits. By
//! default the first error stops it (like psql with `ON_ERROR_STOP`) and is
//! printed to stderr as `Error: <message>`; `--on-error continue` prints
//! each error and goes on. The exit code tells the kind of the (first)
//! error ([`ExitCode`]). Standard input that is not a terminal is read as a
//! script, as `-f -` would.
//!
//! A start-up file (`--rc FILE`, else `~/.fedsqlrc` when it exists; `-X`
//! skips it) runs first in the same session, so a session need not
//! re-register its tables. `fedsql completions bash|zsh|fish` prints a shell
//! completion script (clap_complete) and `fedsql man` the man page
//! (clap_mangen).

use std::borrow::Cow;
use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::coordinator::context::FedContext;
use crate::error::Result;
use crate::frontend::demo;
pub use crate::frontend::exit_code::ExitCode;
use crate::frontend::print::OutputFormat;
pub use crate::frontend::repl::script::{Source, run_sources};
use crate::frontend::repl::script::{run_rc, run_sources_in};
use crate::frontend::repl::{self, ReplOptions, Session};

/// Command-line arguments of `fedsql`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "fedsql",
    version,
    about = "Federated SQL: query data that stays at its clients; only mergeable aggregate states leave a client",
    after_help = "Without -c or -f, fedsql starts an interactive session (\\? lists its commands).",
    after_long_help = AFTER_LONG_HELP
)]
pub struct Args {
    /// Run SQL (several statements separated by `;`, or one backslash
    /// command), then exit. May be repeated.
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    pub sql: Vec<String>,

    /// Run the statements and commands in FILE (`-` reads standard input),
    /// then exit. May be repeated.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// How to print results.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,

    /// What a `-c`/`-f` run does after an error, as psql's `ON_ERROR_STOP`.
    /// `stop` is the default because a later statement often needs an
    /// earlier one, and a pipeline should not go on past a failure.
    #[arg(long, value_enum, default_value_t = OnError::Stop, value_name = "WHAT")]
    pub on_error: OnError,

    /// Print only results: no banner, no row-count and elapsed-time line.
    #[arg(short, long)]
    pub quiet: bool,

    /// Do not register the demo federated table `clinic`.
    #[arg(long)]
    pub no_demo: bool,

    /// Run the statements and commands in FILE first, in the same session
    /// (default: `~/.fedsqlrc`, when it exists).
    #[arg(long, value_name = "FILE")]
    pub rc: Option<PathBuf>,

    /// Do not run a start-up file (`--rc` or `~/.fedsqlrc`).
    #[arg(short = 'X', long, conflicts_with = "rc")]
    pub no_rc: bool,

    /// The `-c` and `-f` arguments in the order they were given.
    #[arg(skip)]
    pub sources: Vec<Source>,

    /// A subcommand instead of a session.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What a non-interactive run does after an error (`--on-error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    /// Stop at the first error and exit with its code.
    Stop,
    /// Print each error, run the rest, and exit with the first error's code.
    Continue,
}

/// The exit codes, after the flags in `fedsql --help` (and on the generated
/// reference page).
const AFTER_LONG_HELP: &str = "\
Without -c or -f, fedsql starts an interactive session (\\? lists its commands).

Exit codes of a -c/-f run (with --on-error continue, the code of the first error):
  0  every statement and command succeeded (also when the reader of the output went away, as with `| head -1`)
  1  another failure: a script that cannot be read, output that cannot be written, a resource limit
  2  a usage error on the command line
  3  an error in the SQL: it does not parse or plan (unknown table, column or function; a bad argument or setting; a value it cannot compute)
  4  refused: the exposure check or a site's disclosure policy turned the query away (SQLSTATE 42501 in `fedsql serve`)
  5  a site failed or did not answer in time (a worker down or unreachable, a timeout, a site's data that cannot be read)
  6  an internal error: a bug in fedsql";

/// Subcommands of `fedsql`.
#[derive(Debug, Clone, clap::Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Command {
    /// Serve this site's tables to coordinators over Arrow Flight; each
    /// request must carry the token, and only aggregate states leave.
    Worker(crate::site::worker::WorkerArgs),
    /// Serve the federation over the PostgreSQL wire protocol (psql, R,
    /// Python, BI tools); the setup scripts register its tables.
    Serve(crate::frontend::pgwire::ServeArgs),
    /// Run a data owner's Ballista cluster (scheduler, executors) that
    /// `fedsql worker --engine ballista://HOST:PORT` reads its rows with.
    Ballista {
        #[command(subcommand)]
        command: crate::site::cluster::BallistaCommand,
    },
    /// Set a user's password in the users file of `fedsql serve --users`.
    Passwd(crate::frontend::pgwire::PasswdArgs),
    /// Check or print a worker's audit trail (`--audit-log`).
    Audit {
        #[command(subcommand)]
        command: crate::site::worker::audit::AuditCommand,
    },
    /// List, approve or deny the requests a worker holds for the data
    /// owner's approval (`approval = "manual"`).
    Approvals {
        #[command(subcommand)]
        command: crate::site::worker::approvals::ApprovalsCommand,
    },
    /// Print a completion script for a shell, e.g.
    /// `fedsql completions bash > ~/.local/share/bash-completion/completions/fedsql`.
    Completions {
        /// The shell: bash, zsh, fish (also elvish, powershell).
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `fedsql man | man -l -`.
    Man,
}

impl Args {
    /// The session settings these arguments ask for.
    pub fn repl_options(&self, stop_on_error: bool) -> ReplOptions {
        ReplOptions {
            format: self.format,
            timing: !self.quiet,
            stop_on_error,
            progress: false,
        }
    }
}

/// Parses command-line arguments (the first is the program name), keeping
/// `-c` and `-f` in the order given.
pub fn try_parse_args<I, T>(args: I) -> Result<Args, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = Args::command().try_get_matches_from(args)?;
    let mut args = Args::from_arg_matches(&matches)?;
    let sql = matches.indices_of("sql").into_iter().flatten();
    let files = matches.indices_of("files").into_iter().flatten();
    let mut sources: Vec<(usize, Source)> = sql
        .zip(args.sql.iter().cloned().map(Source::Sql))
        .chain(files.zip(args.files.iter().cloned().map(Source::File)))
        .collect();
    sources.sort_by_key(|(index, _)| *index);
    args.sources = sources.into_iter().map(|(_, source)| source).collect();
    Ok(args)
}

/// The whole program: parses `args` (clap prints help, version and usage
/// errors itself and exits), then runs.
///
/// An error that ends the run is printed to stderr as `Error: <message>`;
/// the exit code tells its kind ([`ExitCode`]).
pub async fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = try_parse_args(args).unwrap_or_else(|error| error.exit());
    match run(&args).await {
        Ok(code) => code,
        // The reader of the output went away (`| head -1`): nothing to say.
        Err(error) if error.is_broken_pipe() => ExitCode::Success,
        Err(error) => {
            let error = error.unwrapped();
            eprintln!("Error: {error}");
            ExitCode::of(&error)
        }
    }
}

/// Runs parsed arguments: the REPL, or the `-c`/`-f` sources. An error
/// that stops the run is returned; with `--on-error continue` errors are
/// printed as they happen and the first one's code is returned.
pub async fn run(args: &Args) -> Result<ExitCode> {
    let done = |()| ExitCode::Success;
    if let Some(Command::Worker(worker)) = &args.command {
        return crate::site::worker::run_cli(worker).await.map(done);
    }
    if let Some(Command::Serve(serve)) = &args.command {
        return crate::frontend::pgwire::run_cli(serve).await.map(done);
    }
    if let Some(Command::Ballista { command }) = &args.command {
        return crate::site::cluster::run_cli(command).await.map(done);
    }
    if let Some(Command::Passwd(passwd)) = &args.command {
        return crate::frontend::pgwire::run_passwd(passwd).map(done);
    }
    if let Some(Command::Audit { command }) = &args.command {
        // `fedsql audit verify` exits 1 on a trail that does not verify,
        // whatever the kind of the error that says why.
        return match crate::site::worker::audit::run_cli(command) {
            Ok(text) => write_stdout(text.as_bytes()).map(done),
            Err(error) => {
                eprintln!("Error: {error}");
                Ok(ExitCode::Other)
            }
        };
    }
    if let Some(Command::Approvals { command }) = &args.command {
        return match crate::site::worker::approvals::run_cli(command) {
            Ok(text) => write_stdout(text.as_bytes()).map(done),
            Err(error) => {
                eprintln!("Error: {error}");
                Ok(ExitCode::Other)
            }
        };
    }
    if let Some(Command::Completions { shell }) = &args.command {
        return write_stdout(&completions(*shell)).map(done);
    }
    if let Some(Command::Man) = &args.command {
        return write_stdout(&man_page()?).map(done);
    }
    let ctx = FedContext::new();
    if !args.no_demo {
        demo::register_demo(&ctx)?;
    }
    if args.sources.is_empty() && io::stdin().is_terminal() {
        if !args.quiet {
            let tables = ctx.tables().await?;
            let demo_clients = tables
                .iter()
                .find(|t| t.name == demo::DEMO_TABLE)
                .and_then(|t| t.clients);
            print!("{}", banner(demo_clients));
        }
        return repl::run_interactive(&ctx, args.repl_options(false), args.rc_file().as_deref())
            .await
            .map(done);
    }
    let sources = if args.sources.is_empty() {
        Cow::Owned(vec![Source::File(PathBuf::from("-"))])
    } else {
        Cow::Borrowed(&args.sources)
    };
    let mut stdout = io::stdout();
    let mut session = Session::new(&ctx, args.repl_options(args.on_error == OnError::Stop));
    if let Some(rc) = args.rc_file() {
        run_rc(&mut session, &rc, &mut stdout).await?;
    }
    run_sources_in(&mut session, &sources, &mut stdout).await?;
    stdout.flush()?;
    Ok(session.first_error().unwrap_or(ExitCode::Success))
}

impl Args {
    /// The start-up file to run: `--rc FILE`, else `~/.fedsqlrc` when it
    /// exists, none with `-X`.
    pub fn rc_file(&self) -> Option<PathBuf> {
        if self.no_rc {
            return None;
        }
        self.rc.clone().or_else(|| {
            let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
            Some(PathBuf::from(home).join(".fedsqlrc")).filter(|p| p.is_file())
        })
    }
}

/// The completion script of `fedsql` for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "fedsql", &mut script);
    script
}

/// The man page of `fedsql`, in roff.
pub fn man_page() -> Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Args::command()).render(&mut page)?;
    Ok(page)
}

fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut stdout = io::stdout();
    stdout.write_all(bytes)?;
    stdout.flush()?;
    Ok(())
}

/// What the REPL prints when it starts; `demo_clients` is the number of
/// clients of the demo table `clinic`, if it is registered.
pub fn banner(demo_clients: Option<usize>) -> String {
    let mut banner = format!(
        "fedsql {} — federated SQL over data that stays at its clients\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(clients) = demo_clients {
        banner.push_str(&format!(
            "`{table}` is a demo federated table over {clients} clients: try \\d {table}, \\clients {table},\n  \
             SELECT region, count(*) AS n, avg(systolic) AS mean_sbp FROM {table} GROUP BY region;\n",
            table = demo::DEMO_TABLE
        ));
    }
    banner.push_str(
        "Register your own data (one file or folder per client under 'folder/'):\n\
         \x20 CREATE FEDERATED TABLE name STORED AS CSV|PARQUET LOCATION 'folder/';\n\
         Type \\? for help, \\q or Ctrl-D to quit.\n",
    );
    banner
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        try_parse_args(std::iter::once("fedsql").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_are_the_interactive_demo() {
        let args = parse(&[]);
        assert!(args.sources.is_empty());
        assert_eq!(args.format, OutputFormat::Table);
        assert!(!args.quiet && !args.no_demo);
        assert_eq!(args.repl_options(false), ReplOptions::default());
        assert_eq!(args.on_error, OnError::Stop);
        assert_eq!(
            parse(&["--on-error", "continue"]).on_error,
            OnError::Continue
        );
        assert!(try_parse_args(["fedsql", "--on-error", "maybe"]).is_err());
    }

    #[test]
    fn commands_and_files_keep_their_order() {
        let args = parse(&[
            "-f",
            "a.sql",
            "-c",
            "SELECT 1; SELECT 2",
            "--file",
            "b.sql",
            "--command",
            "\\d",
        ]);
        assert_eq!(
            args.sources,
            [
                Source::File("a.sql".into()),
                Source::Sql("SELECT 1; SELECT 2".into()),
                Source::File("b.sql".into()),
                Source::Sql("\\d".into()),
            ]
        );
    }

    #[test]
    fn format_quiet_and_no_demo() {
        let args = parse(&["--format", "ndjson", "-q", "--no-demo", "-c", "SELECT 1"]);
        assert_eq!(args.format, OutputFormat::NdJson);
        assert!(args.quiet && args.no_demo);
        assert!(!args.repl_options(true).timing);
        assert!(try_parse_args(["fedsql", "--format", "xml"]).is_err());
    }

    #[test]
    fn worker_subcommand_and_top_level_flags() {
        let args = parse(&[
            "worker",
            "--listen",
            "127.0.0.1:50051",
            "--table",
            "clinic=/data/clinic.parquet",
            "--table",
            "visits=/data/visits/",
            "--token-file",
            "secret.txt",
        ]);
        let Some(Command::Worker(w)) = &args.command else {
            panic!("expected the worker subcommand");
        };
        assert_eq!(w.listen.as_deref(), Some("127.0.0.1:50051"));
        assert_eq!(
            w.tables,
            ["clinic=/data/clinic.parquet", "visits=/data/visits/"]
        );
        assert_eq!(w.token_file, Some("secret.txt".into()));
        assert!(parse(&["-c", "SELECT 1"]).command.is_none());
        assert!(try_parse_args(["fedsql", "worker", "--bogus"]).is_err());
    }

    #[test]
    fn rc_file_completions_and_man_page() {
        assert_eq!(
            parse(&["--rc", "setup.sql"]).rc_file(),
            Some("setup.sql".into())
        );
        assert_eq!(parse(&["-X"]).rc_file(), None);
        assert!(try_parse_args(["fedsql", "-X", "--rc", "a.sql"]).is_err());
        for shell in ["bash", "zsh", "fish"] {
            let Some(Command::Completions { shell }) = parse(&["completions", shell]).command
            else {
                panic!("expected the completions subcommand");
            };
            let script = String::from_utf8(completions(shell)).unwrap();
            assert!(
                script.contains("fedsql") && script.contains("format"),
                "{script}"
            );
        }
        assert!(try_parse_args(["fedsql", "completions", "tcsh"]).is_err());
        let page = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(
            page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH fedsql"),
            "{page}"
        );
        assert!(
            page.contains("\\-\\-format") || page.contains("format"),
            "{page}"
        );
    }

    #[test]
    fn banner_says_how_to_start() {
        let with_demo = banner(Some(4));
        assert!(with_demo.contains("clinic") && with_demo.contains("4 clients"));
        assert!(
            with_demo
                .contains("CREATE FEDERATED TABLE name STORED AS CSV|PARQUET LOCATION 'folder/';")
        );
        assert!(with_demo.contains("\\?"));
        assert!(!banner(None).contains("clinic"));
    }
}
