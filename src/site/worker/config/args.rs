//! The command-line flags of `fedsql worker` (a TOML file can give the
//! same settings; the flags win).

use std::path::PathBuf;

/// Command-line arguments of `fedsql worker`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorkerArgs {
    /// Address to listen on, e.g. 127.0.0.1:50051 (port 0: any free port).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// A table to serve: NAME=PATH, the path a CSV or Parquet file or a
    /// folder of them. May be repeated.
    #[arg(long = "table", value_name = "NAME=PATH")]
    pub tables: Vec<String>,
    /// File holding the token every request must carry.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A TOML file with the same settings (`listen`, `token_file`,
    /// `tls_cert`, `tls_key`, `identity_key`, `request_timeout`,
    /// `memory_limit`, `max_shared_rows`, `fast_path`, `engine`, `audit_log`,
    /// `approvals_file`, `admin_listen`, `admin_token_file`, a `[tables]` section of
    /// name = "path", a `[tokens]` section of analyst = "token file", and a
    /// `[policy]` section with `peers`,
    /// `secure_without_peers`, the DP settings `dp_budget`,
    /// `dp_max_epsilon`, `dp_ledger`, `require_dp`, `dp_domain.COLUMN`,
    /// `approval`, and `[policy.tables.NAME]` overrides, and
    /// `[analysts.NAME]` profiles);
    /// command-line flags take precedence.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key, the worker speaks TLS.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// `none` serves without a disclosure policy (only for data you may
    /// show in full); by default the worker enforces one. DP settings
    /// (--dp-budget, require_dp) need the policy: with `none` they are a
    /// start-up error, since DP relies on the policy's join and
    /// error-message protections.
    #[arg(long, value_name = "none")]
    pub policy: Option<String>,
    /// Every released group covers 0 or at least this many rows (default 5).
    #[arg(long, value_name = "K")]
    pub min_group_rows: Option<u64>,
    /// Model parameters per row at most (default 0.33).
    #[arg(long, value_name = "RATIO")]
    pub max_parameter_ratio: Option<f64>,
    /// `allow` or `refuse` min, max and the other one-row aggregates (default refuse).
    #[arg(long, value_name = "allow|refuse")]
    pub extremes: Option<String>,
    /// At most this many groups in a released state (default 100000).
    #[arg(long, value_name = "N")]
    pub max_groups: Option<u64>,
    /// Secure sums need at least this many participants (default 3).
    #[arg(long, value_name = "N")]
    pub min_secure_clients: Option<u64>,
    /// Total differential-privacy ε each analyst may spend per table
    /// (needs --dp-ledger); default unlimited. Only under a budget are DP
    /// aggregates exempt from --min-group-rows and the other thresholds.
    #[arg(long, value_name = "EPSILON")]
    pub dp_budget: Option<f64>,
    /// The most differential-privacy ε one round of a query (one request)
    /// may spend here, summed over its DP calls (default 1); a round asking
    /// for more is refused before it runs.
    #[arg(long, value_name = "EPSILON")]
    pub dp_max_epsilon: Option<f64>,
    /// The file that keeps what each analyst has spent (survives restarts).
    #[arg(long, value_name = "FILE")]
    pub dp_ledger: Option<PathBuf>,
    /// This site's Ed25519 identity key (PEM, PKCS#8), created on first
    /// start if the file does not exist; it signs the site's secure-session
    /// keys.
    #[arg(long, value_name = "FILE")]
    pub identity_key: Option<PathBuf>,
    /// Print the public key of --identity-key (creating the key if needed)
    /// for the other sites' `peers`, and exit.
    #[arg(long, requires = "identity_key")]
    pub show_identity: bool,
    /// A peer site's identity public key (base64); secure sums then mask
    /// only with keys signed by listed peers. May be repeated.
    #[arg(long = "peer", value_name = "KEY")]
    pub peers: Vec<String>,
    /// Under a disclosure policy, take part in secure sums although no
    /// `--peer` is listed. This trusts the coordinator not to invent
    /// participants: it relays every participant's session key, and with
    /// keys of its own making it can unmask this site's state. Without
    /// this flag (or `secure_without_peers = true` in `[policy]`), a
    /// worker under a policy refuses secure sums until peers are listed.
    #[arg(long)]
    pub secure_without_peers: bool,
    /// Longest one request may run here (default 10m; `none`: no limit).
    #[arg(long, value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// Most memory one request may use here (default 4GiB; `none`: no limit).
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<String>,
    /// Most rows of shared tables and VALUES a plan may carry (default 100000).
    #[arg(long, value_name = "N")]
    pub max_shared_rows: Option<usize>,
    /// `off` runs every encoder through DataFusion's own scan and
    /// aggregate, without the engine's fast path (templates, the site's
    /// own small-Parquet reader, rows kept between a fit's rounds); the
    /// answers are the same (default on).
    #[arg(long, value_name = "on|off")]
    pub fast_path: Option<String>,
    /// Run the row-reading part of every encoder (scan, filter,
    /// projection, partial aggregate) on a Ballista cluster of `fedsql
    /// ballista` processes, as ballista://HOST:PORT (the scheduler); the
    /// worker still checks, counts, noises and masks what leaves, and
    /// never reads the files itself (needs the `ballista` build feature).
    #[arg(long, value_name = "ballista://HOST:PORT")]
    pub engine: Option<String>,
    /// The audit trail: one JSON line per request, synced before the
    /// answer leaves (default fedsql-audit.jsonl in the working directory;
    /// `none`: no audit trail, with a warning at start-up).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Where requests awaiting manual approval and the data owner's
    /// decisions are kept (default fedsql-approvals.jsonl beside the audit
    /// trail); `fedsql approvals` manages it.
    #[arg(long, value_name = "FILE")]
    pub approvals_file: Option<PathBuf>,
    /// Serve the data owner's admin page (policy, analysts, budgets, the
    /// latest requests, approvals), /metrics and /healthz on this address
    /// (loopback unless told otherwise); needs --admin-token-file.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// File holding the admin page's token (every admin request must carry it).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
}
