//! A worker's settings: its command-line flags ([`args`]) and its TOML
//! file, with the disclosure policy and DP settings read by [`policy`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{FedError, Result};
use crate::site::release::dp::DpPolicy;
use crate::site::release::identity::{SiteIdentity, parse_peer};
use crate::site::release::policy::DisclosurePolicy;
use crate::site::worker::log::LogSink;
use crate::site::worker::profiles::{ProfileSection, Profiles, Served};

mod args;
mod policy;

pub use args::WorkerArgs;
pub(crate) use policy::ALL_TABLES;
use policy::{PolicySettings, without_dp, worker_dp, worker_policy};

/// The default approvals file, beside the audit trail.
pub const DEFAULT_APPROVALS_FILE: &str = "fedsql-approvals.jsonl";

/// A request's limits at a worker, whatever its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Longest a request may run; past it the request is refused.
    pub timeout: Option<Duration>,
    /// Most memory one request may use (its own memory pool).
    pub memory: Option<usize>,
    /// Most rows of shared tables and `VALUES` in one plan.
    pub max_shared_rows: usize,
}

impl Default for RequestLimits {
    /// 10 minutes, 4 GiB and 100,000 shared rows.
    fn default() -> Self {
        Self {
            timeout: Some(Duration::from_secs(600)),
            memory: Some(4 << 30),
            max_shared_rows: 100_000,
        }
    }
}

/// The worker's TOML configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: Option<String>,
    token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    tables: BTreeMap<String, PathBuf>,
    /// `"none"`, or a `[policy]` table of settings.
    policy: Option<toml::Value>,
    identity_key: Option<PathBuf>,
    request_timeout: Option<String>,
    memory_limit: Option<String>,
    max_shared_rows: Option<usize>,
    /// `"on"` or `"off"` (see [`WorkerArgs::fast_path`]).
    fast_path: Option<String>,
    /// `"ballista://HOST:PORT"` (see [`WorkerArgs::engine`]).
    engine: Option<String>,
    /// The audit file, or `"none"` (see [`WorkerArgs::audit_log`]).
    audit_log: Option<PathBuf>,
    /// Named tokens: analyst name = token file (DP budgets are per analyst).
    #[serde(default)]
    tokens: BTreeMap<String, PathBuf>,
    /// Analyst profiles by token name (`[analysts.NAME]`).
    #[serde(default)]
    analysts: BTreeMap<String, ProfileSection>,
    /// The approvals file (see [`WorkerArgs::approvals_file`]).
    approvals_file: Option<PathBuf>,
    /// The admin page's address and token file.
    admin_listen: Option<String>,
    admin_token_file: Option<PathBuf>,
}

/// Everything a worker needs to start.
#[derive(Clone)]
pub struct WorkerConfig {
    pub listen: SocketAddr,
    /// How often the worker pings a connection (HTTP/2 PING, and TCP
    /// keepalive); one that does not answer within the same time is
    /// closed, and the rows its fits kept are released. A coordinator
    /// whose machine vanished without closing its connections (a power
    /// cut, a partition) costs the worker at most twice this.
    pub keepalive: Duration,
    /// Served tables: name and path (file or folder).
    pub tables: Vec<(String, PathBuf)>,
    pub token: String,
    /// PEM certificate chain and key, for TLS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Log sink; `None` writes to stderr.
    pub log: Option<LogSink>,
    /// The disclosure policy of every served table; `None` only when the
    /// data owner asked for none.
    pub policy: Option<DisclosurePolicy>,
    /// Tables whose policy differs from [`WorkerConfig::policy`]
    /// (`[policy.tables.NAME]`).
    pub table_policies: BTreeMap<String, Option<DisclosurePolicy>>,
    /// The site's identity key, which signs its secure-session keys.
    pub identity: Option<Arc<SiteIdentity>>,
    /// Identity keys of the peers secure sums mask with (empty: any, and
    /// then under a policy only with [`WorkerConfig::secure_without_peers`]).
    pub peers: Vec<[u8; 32]>,
    /// Whether tables under a policy take part in secure sums with no
    /// peers listed, trusting the coordinator not to invent participants
    /// (`--secure-without-peers`, `[policy] secure_without_peers`).
    pub secure_without_peers: bool,
    /// Each request's time, memory and shared-row limits.
    pub limits: RequestLimits,
    /// Named tokens (analyst, token), besides `token` (analyst `default`).
    pub named_tokens: Vec<(String, String)>,
    /// DP settings of every served table (budget, per-query ε cap,
    /// require_dp, domains).
    pub dp: DpPolicy,
    /// The privacy-budget ledger file; `None`: kept in memory.
    pub dp_ledger: Option<PathBuf>,
    /// Whether the site engine's fast path runs encoders (default on).
    pub fast_path: bool,
    /// The Ballista cluster that reads the rows (`--engine`); `None`: the
    /// worker reads them.
    pub engine: Option<crate::site::cluster::ClusterAddress>,
    /// The audit trail's file; `None`: no audit trail (the default of
    /// [`WorkerConfig::new`]; `fedsql worker` writes
    /// [`crate::site::worker::audit::DEFAULT_AUDIT_LOG`] unless told `none`).
    pub audit_log: Option<PathBuf>,
    /// Analyst profiles (`[analysts.NAME]`); empty: the policy alone decides.
    pub profiles: Profiles,
    /// Tables whose new requests wait for the data owner's approval
    /// (`approval = "manual"` in `[policy]` or `[policy.tables.NAME]`).
    pub approval_tables: std::collections::BTreeSet<String>,
    /// The approvals file (used when a profile or table asks for manual approval).
    pub approvals_file: PathBuf,
    /// The admin page's address and token.
    pub admin: Option<(SocketAddr, String)>,
}

impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("listen", &self.listen)
            .field("tables", &self.tables)
            .field("token", &"<hidden>")
            .field("tls", &self.tls.is_some())
            .field("policy", &self.policy)
            .field("table_policies", &self.table_policies)
            .field("identity", &self.identity)
            .field("peers", &self.peers.len())
            .field("secure_without_peers", &self.secure_without_peers)
            .field("limits", &self.limits)
            .field("fast_path", &self.fast_path)
            .field("engine", &self.engine)
            .finish()
    }
}

/// The default [`WorkerConfig::keepalive`]: 30 s.
pub(crate) const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);

impl WorkerConfig {
    /// A plain-text worker on `listen` serving `tables` with `token`.
    pub fn new(listen: SocketAddr, tables: Vec<(String, PathBuf)>, token: &str) -> Self {
        Self {
            listen,
            tables,
            token: token.to_string(),
            tls: None,
            log: None,
            policy: Some(DisclosurePolicy::default()),
            named_tokens: Vec::new(),
            dp: DpPolicy::default(),
            dp_ledger: None,
            table_policies: BTreeMap::new(),
            identity: None,
            peers: Vec::new(),
            secure_without_peers: false,
            limits: RequestLimits::default(),
            fast_path: true,
            engine: None,
            audit_log: None,
            profiles: Profiles::default(),
            approval_tables: std::collections::BTreeSet::new(),
            approvals_file: PathBuf::from(DEFAULT_APPROVALS_FILE),
            admin: None,
            keepalive: DEFAULT_KEEPALIVE,
        }
    }

    /// Whether any request may wait for manual approval.
    pub fn needs_approvals(&self) -> bool {
        !self.approval_tables.is_empty() || self.profiles.iter().any(|p| p.manual_approval)
    }

    /// The policy of served table `name`.
    pub fn policy_of(&self, name: &str) -> Option<DisclosurePolicy> {
        match self.table_policies.get(name) {
            Some(policy) => policy.clone(),
            None => self.policy.clone(),
        }
    }

    /// Refuses DP settings (`dp_budget`, `require_dp`) over a table served
    /// without a disclosure policy: DP relies on the policy's checks
    /// (no join amplification, no values in errors, evaluation that cannot
    /// fail on data), which `policy = none` turns off. Checked when the
    /// worker starts.
    pub fn check_dp_has_policy(&self) -> Result<()> {
        if self.dp.budget.is_none() && !self.dp.require_dp && !self.dp.require_secure {
            return Ok(());
        }
        let bare: Vec<&str> = self
            .tables
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.policy_of(name).is_none())
            .collect();
        if bare.is_empty() {
            return Ok(());
        }
        Err(FedError::Syntax(format!(
            "dp_budget, require_dp and require_secure need a disclosure policy, but {} served with policy = none: they rely on the policy's thresholds, join and error checks; drop `none` (for {}), or drop those settings",
            if bare.len() == 1 {
                "table `".to_string() + bare[0] + "` is"
            } else {
                format!("tables `{}` are", bare.join("`, `"))
            },
            bare.join(", ")
        )))
    }

    /// The configuration the command line (and its `--config` file) gives.
    pub async fn from_args(args: &WorkerArgs) -> Result<Self> {
        let (file, base) = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    FedError::InvalidArgument(format!(
                        "cannot read worker config {}: {e}",
                        path.display()
                    ))
                })?;
                let file: ConfigFile = toml::from_str(&text).map_err(|e| {
                    FedError::Syntax(format!("worker config {}: {e}", path.display()))
                })?;
                let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
                (file, base)
            }
            None => (ConfigFile::default(), PathBuf::new()),
        };
        // Paths in the config file are relative to its folder.
        let from_file = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
        let listen = args.listen.clone().or(file.listen).ok_or_else(|| {
            FedError::Syntax("fedsql worker needs --listen ADDR (or `listen` in --config)".into())
        })?;
        let listen = resolve(&listen).await?;
        let named_tokens = file
            .tokens
            .iter()
            .map(|(name, path)| Ok((name.clone(), read_token(&base.join(path))?)))
            .collect::<Result<Vec<_>>>()?;
        let token_file = args
            .token_file
            .clone()
            .or_else(|| from_file(&file.token_file));
        let token = match token_file {
            Some(path) => read_token(&path)?,
            None if !named_tokens.is_empty() => String::new(),
            None => return Err(FedError::Syntax(
                "fedsql worker needs --token-file FILE (or `token_file` or a [tokens] section in --config): every request must carry its token".into(),
            )),
        };
        let mut tables: Vec<(String, PathBuf)> = file
            .tables
            .iter()
            .map(|(name, path)| (name.clone(), base.join(path)))
            .collect();
        for spec in &args.tables {
            let (name, path) = spec.split_once('=').ok_or_else(|| {
                FedError::Syntax(format!(
                    "--table {spec}: expected NAME=PATH, e.g. --table clinic=/data/clinic.parquet"
                ))
            })?;
            let name = name.trim();
            if name.is_empty() {
                return Err(FedError::Syntax(format!(
                    "--table {spec}: the name is empty"
                )));
            }
            if tables.iter().any(|(n, _)| n == name) {
                return Err(FedError::Syntax(format!("table `{name}` is given twice")));
            }
            tables.push((name.to_string(), PathBuf::from(path.trim())));
        }
        if tables.is_empty() {
            return Err(FedError::Syntax(
                "fedsql worker serves nothing: give --table NAME=PATH (or a [tables] section in --config)".into(),
            ));
        }
        let cert = args.tls_cert.clone().or_else(|| from_file(&file.tls_cert));
        let key = args.tls_key.clone().or_else(|| from_file(&file.tls_key));
        let tls = match (cert, key) {
            (Some(cert), Some(key)) => Some((
                read_file(&cert, "TLS certificate")?,
                read_file(&key, "TLS key")?,
            )),
            (None, None) => None,
            _ => {
                return Err(FedError::Syntax(
                    "TLS needs both --tls-cert and --tls-key".into(),
                ));
            }
        };
        let (dp, dp_ledger) = worker_dp(args, file.policy.as_ref(), &base)?;
        let PolicySettings {
            policy,
            table_policies,
            mut peers,
            secure_without_peers,
            approval_tables,
        } = worker_policy(args, without_dp(file.policy.as_ref()).as_ref())?;
        for name in table_policies.keys() {
            if !tables.iter().any(|(n, _)| n == name) {
                return Err(FedError::Syntax(format!(
                    "worker config: [policy.tables.{name}]: this worker serves no table `{name}`"
                )));
            }
        }
        for peer in &args.peers {
            peers.push(parse_peer(peer)?);
        }
        let identity = match args
            .identity_key
            .clone()
            .or_else(|| from_file(&file.identity_key))
        {
            Some(path) => Some(Arc::new(SiteIdentity::load_or_create(&path)?.0)),
            None => None,
        };
        if !peers.is_empty() && identity.is_none() {
            return Err(FedError::Syntax(
                "a worker with peers needs its own identity key (--identity-key FILE or `identity_key` in --config): its peers check its signature as it checks theirs".into(),
            ));
        }
        let defaults = RequestLimits::default();
        let timeout = args.request_timeout.clone().or(file.request_timeout);
        let memory = args.memory_limit.clone().or(file.memory_limit);
        let limits = RequestLimits {
            timeout: match timeout {
                Some(text) => parse_limit(
                    &text,
                    parse_duration,
                    "request_timeout",
                    "a duration such as 30s, 500ms or 10m",
                )?,
                None => defaults.timeout,
            },
            memory: match memory {
                Some(text) => parse_limit(
                    &text,
                    parse_bytes,
                    "memory_limit",
                    "a size such as 512MiB or 4GiB",
                )?,
                None => defaults.memory,
            },
            max_shared_rows: args
                .max_shared_rows
                .or(file.max_shared_rows)
                .unwrap_or(defaults.max_shared_rows),
        };
        let audit_log = match (&args.audit_log, &file.audit_log) {
            (Some(path), _) if path.as_os_str() == "none" => None,
            (Some(path), _) => Some(path.clone()),
            (None, Some(path)) if path.as_os_str() == "none" => None,
            (None, Some(path)) => Some(base.join(path)),
            (None, None) => Some(PathBuf::from(crate::site::worker::audit::DEFAULT_AUDIT_LOG)),
        };
        let fast_path = match args.fast_path.clone().or(file.fast_path) {
            Some(text) => crate::site::engine::parse_fast_path(&text)?,
            None => true,
        };
        let engine = match args.engine.clone().or(file.engine.clone()) {
            Some(text) => Some(crate::site::cluster::ClusterAddress::parse(&text)?),
            None => None,
        };
        let approvals_file = match (&args.approvals_file, &file.approvals_file) {
            (Some(path), _) => path.clone(),
            (None, Some(path)) => base.join(path),
            (None, None) => default_approvals_file(audit_log.as_deref()),
        };
        let admin = match (
            args.admin_listen.clone().or(file.admin_listen.clone()),
            args.admin_token_file
                .clone()
                .or_else(|| from_file(&file.admin_token_file)),
        ) {
            (None, None) => None,
            (Some(listen), Some(token)) => Some((resolve(&listen).await?, read_token(&token)?)),
            (Some(_), None) => {
                return Err(FedError::Syntax(
                    "--admin-listen needs --admin-token-file FILE (or `admin_token_file` in --config): the admin page answers only requests that carry its token".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(FedError::Syntax(
                    "--admin-token-file is given without --admin-listen ADDR".into(),
                ));
            }
        };
        let analyst_names: Vec<&str> = {
            let mut names: Vec<&str> = named_tokens.iter().map(|(n, _)| n.as_str()).collect();
            if !token.is_empty() {
                names.push(crate::site::worker::tokens::DEFAULT_ANALYST);
            }
            names
        };
        let served_policies: Vec<(&str, Option<DisclosurePolicy>)> = tables
            .iter()
            .map(|(name, _)| {
                let policy = match table_policies.get(name) {
                    Some(p) => p.clone(),
                    None => policy.clone(),
                };
                (name.as_str(), policy)
            })
            .collect();
        let profiles = Profiles::from_sections(
            &file.analysts,
            &Served {
                tables: served_policies,
                dp: &dp,
                ledger: dp_ledger.is_some(),
                analysts: analyst_names,
            },
        )?;
        let config = Self {
            listen,
            tables,
            token,
            tls,
            log: None,
            policy,
            table_policies,
            identity,
            peers,
            secure_without_peers,
            limits,
            named_tokens,
            dp,
            dp_ledger,
            fast_path,
            engine,
            audit_log,
            profiles,
            approval_tables,
            approvals_file,
            admin,
            keepalive: DEFAULT_KEEPALIVE,
        };
        config.check_dp_has_policy()?;
        Ok(config)
    }
}

/// The approvals file beside the audit trail (or in the working
/// directory without one).
fn default_approvals_file(audit_log: Option<&Path>) -> PathBuf {
    let name = DEFAULT_APPROVALS_FILE;
    match audit_log.and_then(Path::parent) {
        Some(folder) => folder.join(name),
        None => PathBuf::from(name),
    }
}

/// The approvals file a worker TOML names (`approvals_file`, else the
/// default beside its `audit_log`), for `fedsql approvals --config`.
pub(crate) fn approvals_file_of(config: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(config).map_err(|e| {
        FedError::InvalidArgument(format!(
            "cannot read worker config {}: {e}",
            config.display()
        ))
    })?;
    let file: ConfigFile = toml::from_str(&text)
        .map_err(|e| FedError::Syntax(format!("worker config {}: {e}", config.display())))?;
    let base = config.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(match (&file.approvals_file, &file.audit_log) {
        (Some(path), _) => base.join(path),
        (None, Some(audit)) if audit.as_os_str() != "none" => {
            default_approvals_file(Some(&base.join(audit)))
        }
        (None, _) => PathBuf::from(DEFAULT_APPROVALS_FILE),
    })
}

/// A limit's setting: `none` (no limit) or a value `parse` reads.
fn parse_limit<T>(
    text: &str,
    parse: fn(&str) -> Option<T>,
    key: &str,
    expected: &str,
) -> Result<Option<T>> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    parse(text).map(Some).ok_or_else(|| {
        FedError::InvalidArgument(format!("{key} = {text}: expected {expected}, or none"))
    })
}

/// `500ms`, `30s`, `10m`, `1h`, or seconds.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .ok()
        .filter(|n: &f64| *n > 0.0 && n.is_finite())?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

/// `512KiB`, `64MiB`, `4GiB` (KB, MB, GB mean the same powers of 1024), or bytes.
pub(crate) fn parse_bytes(text: &str) -> Option<usize> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: usize = number.parse().ok().filter(|n| *n > 0)?;
    let scale: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale)
}

async fn resolve(listen: &str) -> Result<SocketAddr> {
    if let Ok(addr) = listen.parse() {
        return Ok(addr);
    }
    tokio::net::lookup_host(listen)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            FedError::Syntax(format!(
                "--listen {listen}: not an address to listen on (e.g. 127.0.0.1:50051)"
            ))
        })
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        FedError::InvalidArgument(format!("cannot read {what} {}: {e}", path.display()))
    })
}

/// Reads a token file: its content without surrounding whitespace.
pub fn read_token(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        FedError::InvalidArgument(format!("cannot read token file {}: {e}", path.display()))
    })?;
    let token = text.trim().to_string();
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(FedError::InvalidArgument(format!(
            "token file {} must hold one token of printable ASCII characters",
            path.display()
        )));
    }
    Ok(token)
}

#[cfg(test)]
mod tests;
