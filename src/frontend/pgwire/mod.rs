//! `fedsql serve`: fedsql over the PostgreSQL wire protocol, so that psql,
//! R (DBI with RPostgres or RPostgreSQL), Python (psycopg, pandas,
//! SQLAlchemy), DBeaver, Metabase and Grafana reach a federation without
//! knowing it is one.
//!
//! The protocol is `pgwire`'s; values are encoded by `arrow-pg`
//! ([`encode`]); the `pg_catalog` tables come from `datafusion-pg-catalog`
//! ([`catalog`]). What is fedsql's own: each connection is a session with
//! its own [`FedContext`] over the server's catalog ([`session`]), every
//! statement runs through fedsql's planning and exposure check
//! ([`statement`]), errors keep their meaning as SQLSTATEs ([`sqlstate`]),
//! and users log in with SCRAM-SHA-256 against stored verifiers ([`auth`]).
//! [`server`] accepts the connections.
//!
//! `fedsql passwd USER` writes a user's verifier into the users file.

pub mod auth;
pub(crate) mod catalog;
pub(crate) mod copy_out;
pub(crate) mod encode;
pub(crate) mod server;
pub(crate) mod session;
pub(crate) mod sqlstate;
pub(crate) mod statement;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

pub use server::{Server, ServerOptions, start};

use crate::coordinator::context::FedContext;
use crate::error::{FedError, Result};
use crate::frontend::print::OutputFormat;
use crate::frontend::repl::ReplOptions;
use crate::frontend::repl::script::{Source, run_sources};

/// Where `fedsql serve` listens unless told otherwise (5432 is left to a
/// real PostgreSQL).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5433";

/// Command-line arguments of `fedsql serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port). Without --users only a
    /// loopback address is accepted.
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Setup script run before serving (registers the federated and shared
    /// tables every connection sees). May be repeated.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Do not register the demo federated table `clinic`.
    #[arg(long)]
    pub no_demo: bool,
    /// Users file (SCRAM-SHA-256 verifiers written by `fedsql passwd`):
    /// connections must log in as one of them. A user's table
    /// `[users.NAME]` with `verifier` and `token_file` gives their own
    /// token for the workers; a user without one is refused tables over
    /// workers.
    #[arg(long, value_name = "FILE")]
    pub users: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key the server offers TLS.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Let connections run CREATE [FEDERATED | EXTERNAL] TABLE, DROP, COPY
    /// and other statements that change the catalog or name a path.
    #[arg(long)]
    pub allow_ddl: bool,
    /// Folder for the privacy-budget ledgers of the in-process tables the
    /// setup scripts create (one file per table and client, keyed by the
    /// authenticated user), so that what each user spent survives a
    /// restart. Without it the ledgers are kept in memory.
    #[arg(long, value_name = "DIR")]
    pub dp_ledgers: Option<PathBuf>,
}

/// Command-line arguments of `fedsql passwd`.
#[derive(Debug, Clone, clap::Args)]
pub struct PasswdArgs {
    /// The user whose password to set.
    pub user: String,
    /// The users file to write (created if missing).
    #[arg(long, value_name = "FILE", default_value = "users.toml")]
    pub users: PathBuf,
}

/// Builds the server's catalog: the demo table unless `--no-demo`, then
/// the setup scripts.
pub async fn setup_context(args: &ServeArgs) -> Result<FedContext> {
    let ctx = FedContext::new();
    if let Some(folder) = &args.dp_ledgers {
        ctx.keep_dp_ledgers_in(folder)?;
    }
    if !args.no_demo {
        crate::frontend::demo::register_demo(&ctx)?;
    }
    let sources: Vec<Source> = args.files.iter().cloned().map(Source::File).collect();
    let options = ReplOptions {
        format: OutputFormat::Table,
        timing: false,
        stop_on_error: true,
        progress: false,
    };
    let mut out = std::io::stdout();
    run_sources(&ctx, &sources, options, &mut out).await?;
    Ok(ctx)
}

/// The server options the arguments ask for.
pub fn server_options(args: &ServeArgs) -> Result<ServerOptions> {
    let users = args
        .users
        .as_deref()
        .map(auth::Users::load)
        .transpose()?
        .map(Arc::new);
    if users.as_ref().is_some_and(|u| u.is_empty()) {
        return Err(FedError::InvalidArgument(
            "the users file has no user: add one with `fedsql passwd USER --users FILE`".into(),
        ));
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(server::tls_acceptor(cert, key)?),
        _ => None,
    };
    Ok(ServerOptions {
        listen: args.listen.clone(),
        users,
        tls,
        allow_ddl: args.allow_ddl,
    })
}

/// `fedsql serve`: serves until Ctrl-C.
pub async fn run_cli(args: &ServeArgs) -> Result<()> {
    let options = server_options(args)?;
    let ctx = setup_context(args).await?;
    let tables = ctx.tables().await?;
    let (auth, tls, ddl) = (
        options.users.is_some(),
        options.tls.is_some(),
        options.allow_ddl,
    );
    // A user the users file holds (the login's own name if it does).
    let login = std::env::var("USER").unwrap_or_else(|_| "analyst".into());
    let user = match &options.users {
        Some(users) => users.suggested(&login).unwrap_or(&login).to_string(),
        None => login,
    };
    let mut server = start(ctx, options).await?;
    println!(
        "fedsql serving the PostgreSQL protocol on {} ({}; {}; DDL {}; tables: {})",
        server.addr(),
        if tls { "TLS offered" } else { "no TLS" },
        if auth {
            "SCRAM-SHA-256 login"
        } else {
            "no password: loopback connections only (give --users to require a login)"
        },
        if ddl { "allowed" } else { "refused" },
        tables
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "connect with: psql -h {} -p {} -U {} fedsql",
        server.addr().ip(),
        server.addr().port(),
        user
    );
    std::io::stdout().flush()?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        ended = server.wait() => return ended,
    }
    server.shutdown();
    Ok(())
}

/// `fedsql passwd USER`: reads the password (twice on a terminal) and
/// writes the user's verifier into the users file.
pub fn run_passwd(args: &PasswdArgs) -> Result<()> {
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let read = |prompt: &str| -> Result<String> {
        if interactive {
            eprint!("{prompt}");
            std::io::stderr().flush()?;
        }
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        Ok(line.trim_end_matches(['\n', '\r']).to_string())
    };
    let password = read(&format!("Password for {}: ", args.user))?;
    if interactive && read("Again: ")? != password {
        return Err(FedError::InvalidArgument("the passwords differ".into()));
    }
    auth::set_password(&args.users, &args.user, &password)?;
    eprintln!(
        "{}: SCRAM-SHA-256 verifier of `{}` written",
        args.users.display(),
        args.user
    );
    Ok(())
}
