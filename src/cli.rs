//! The `fedsql` command line, in the manner of psql and datafusion-cli.
//!
//! Without `-c` or `-f` (and with a terminal on standard input) fedsql
//! starts the interactive REPL ([`crate::repl`]) with the demo federation
//! registered. With `-c SQL` and `-f FILE` — each may be repeated, and they
//! run in the order given — it runs them non-interactively and exits; the
//! first error stops it (like psql with `ON_ERROR_STOP`), and `main` prints
//! it to stderr as `Error: <message>` with a non-zero exit code. Standard
//! input that is not a terminal is read as a script, as `-f -` would.

use std::borrow::Cow;
use std::ffi::OsString;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::coordinator::context::FedContext;
use crate::coordinator::demo;
use crate::error::{FedError, Result};
use crate::print::OutputFormat;
use crate::repl::{self, Flow, ReplOptions, Session};

/// Command-line arguments of `fedsql`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "fedsql",
    version,
    about = "Federated SQL: query data that stays at its clients; only mergeable aggregate states leave a client",
    after_help = "Without -c or -f, fedsql starts an interactive session (\\? lists its commands)."
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

    /// Print only results: no banner, no row-count and elapsed-time line.
    #[arg(short, long)]
    pub quiet: bool,

    /// Do not register the demo federated table `clinic`.
    #[arg(long)]
    pub no_demo: bool,

    /// The `-c` and `-f` arguments in the order they were given.
    #[arg(skip)]
    pub sources: Vec<Source>,

    /// A subcommand instead of a session.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands of `fedsql`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Serve this site's tables to coordinators over Arrow Flight; each
    /// request must carry the token, and only aggregate states leave.
    Worker(crate::site::worker::WorkerArgs),
    /// Serve the federation over the PostgreSQL wire protocol (psql, R,
    /// Python, BI tools); the setup scripts register its tables.
    Serve(crate::pgwire::ServeArgs),
    /// Set a user's password in the users file of `fedsql serve --users`.
    Passwd(crate::pgwire::PasswdArgs),
}

/// One thing to run non-interactively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The text of a `-c` argument.
    Sql(String),
    /// A `-f` file (`-` is standard input).
    File(PathBuf),
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
pub async fn main_with_args<I, T>(args: I) -> Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = try_parse_args(args).unwrap_or_else(|error| error.exit());
    run(&args).await
}

/// Runs parsed arguments: the REPL, or the `-c`/`-f` sources.
pub async fn run(args: &Args) -> Result<()> {
    if let Some(Command::Worker(worker)) = &args.command {
        return crate::site::worker::run_cli(worker).await;
    }
    if let Some(Command::Serve(serve)) = &args.command {
        return crate::pgwire::run_cli(serve).await;
    }
    if let Some(Command::Passwd(passwd)) = &args.command {
        return crate::pgwire::run_passwd(passwd);
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
        return repl::run_interactive(&ctx, args.repl_options(false)).await;
    }
    let sources = if args.sources.is_empty() {
        Cow::Owned(vec![Source::File(PathBuf::from("-"))])
    } else {
        Cow::Borrowed(&args.sources)
    };
    let mut stdout = io::stdout();
    run_sources(&ctx, &sources, args.repl_options(true), &mut stdout).await?;
    stdout.flush()?;
    Ok(())
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

fn read_script(path: &Path) -> Result<String> {
    let read = if path == Path::new("-") {
        let mut text = String::new();
        io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    read.map_err(|e| {
        FedError::InvalidArgument(format!("cannot read the script {}: {e}", path.display()))
    })
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
    }

    #[test]
    fn one_backslash_command_per_c() {
        assert!(mixes_command_and_sql("SELECT 1; \\d"));
        assert!(mixes_command_and_sql("\\d; SELECT 1"));
        assert!(mixes_command_and_sql("SELECT 1\n\\clients t"));
        assert!(!mixes_command_and_sql("\\d clinic"));
        assert!(!mixes_command_and_sql("SELECT 'a\\b'; SELECT 2"));
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
