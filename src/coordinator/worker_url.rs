//! Where a worker is: the `grpc://` / `grpcs://` URLs and the connection
//! options of remote clients.
//!
//! A data owner runs [`crate::site::worker`] over its files; a coordinator
//! names it as a client of a federated table by URL:
//!
//! ```sql
//! CREATE FEDERATED TABLE clinic CLIENTS (
//!     'hospital_a' = 'grpc://10.0.0.5:50051',          -- worker table `clinic` (the table's name)
//!     'hospital_b' = 'grpcs://b.example.org:50051/cl',  -- TLS; worker table `cl`
//!     'hospital_c' = '/data/c/clinic.parquet'           -- an in-process client
//! ) OPTIONS ('token_file' 'secrets/workers.token', 'timeout' '30s', 'ca_cert' 'ca.pem');
//! ```
//!
//! [`crate::coordinator::worker_client::RemoteClient`] is the
//! coordinator's side of a worker ([`crate::protocol::site::Site`]),
//! [`crate::protocol::codec`] puts plans on the wire and
//! [`crate::protocol::flight`] is the Flight contract.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use crate::error::{FedError, Result};

/// How long a remote call may take unless the `timeout` option says otherwise.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Option keys of `CREATE FEDERATED TABLE ... OPTIONS (...)`; the first
/// two may also be given per client as `key.client`.
const OPTION_KEYS: &[&str] = &["token_file", "ca_cert", "timeout"];

/// Option key of the threshold of a table's secure rounds.
pub(crate) const SECURE_THRESHOLD_KEY: &str = "secure_threshold";

/// The table's `secure_threshold` option, if it has one (a whole number >= 1).
pub(crate) fn secure_threshold_option(options: &[(String, String)]) -> Result<Option<usize>> {
    let Some((_, value)) = options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(SECURE_THRESHOLD_KEY))
    else {
        return Ok(None);
    };
    match value.trim().parse::<usize>() {
        Ok(t) if t >= 1 => Ok(Some(t)),
        _ => Err(FedError::Syntax(format!(
            "OPTIONS secure_threshold '{value}': expected a whole number of sites, at least 1"
        ))),
    }
}

/// Whether a location is a URL (`scheme://...`) rather than a path: a
/// worker URL, or one with a scheme no worker speaks (an error, not a
/// missing file).
pub(crate) fn is_url(location: &str) -> bool {
    location.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
    })
}

/// A worker's address: `grpc://host:port[/table]` (or `grpcs://` for TLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerUrl {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The table's name at the worker.
    pub table: String,
}

impl WorkerUrl {
    /// Parses a worker URL; `default_table` is used when it names none.
    pub(crate) fn parse(url: &str, default_table: &str) -> Result<Self> {
        let bad = |why: &str| {
            FedError::Syntax(format!(
                "worker address '{url}': {why}; expected grpc://host:port or grpc://host:port/table (grpcs:// for TLS)"
            ))
        };
        let (tls, rest) = if let Some(rest) = url.strip_prefix("grpcs://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("grpc://") {
            (false, rest)
        } else if let Some((scheme, _)) = url.split_once("://") {
            return Err(bad(&format!(
                "the scheme `{scheme}://` is not one a worker speaks (a worker is reached with grpc://, or grpcs:// when it has TLS)"
            )));
        } else {
            return Err(bad("unknown scheme"));
        };
        let (authority, table) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = authority.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let table = table.trim_end_matches('/');
        if table.contains('/') {
            return Err(bad("the table name may not contain '/'"));
        }
        Ok(Self {
            tls,
            host: host.to_string(),
            port,
            table: if table.is_empty() {
                default_table.to_string()
            } else {
                table.to_string()
            },
        })
    }

    /// The URI tonic connects to.
    pub(crate) fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for WorkerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "grpcs" } else { "grpc" };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(f, "{scheme}://{host}:{}/{}", self.port, self.table)
    }
}

/// How a coordinator talks to one worker.
#[derive(Clone)]
pub(crate) struct RemoteOptions {
    /// The worker's token, sent with every call.
    pub token: String,
    /// Limit on every call.
    pub timeout: Duration,
    /// PEM certificate of the authority that signed the worker's
    /// certificate (needed for `grpcs://`).
    pub ca_cert: Option<Vec<u8>>,
}

impl fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("token", &"<hidden>")
            .field("timeout", &self.timeout)
            .field("ca_cert", &self.ca_cert.as_ref().map(|c| c.len()))
            .finish()
    }
}

impl RemoteOptions {
    /// The options for `client` from a statement's `OPTIONS (...)`: a
    /// `key.client` entry overrides `key`.
    pub(crate) fn for_client(options: &[(String, String)], client: &str) -> Result<Self> {
        let get = |key: &str| {
            let specific = format!("{key}.{client}");
            options
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(&specific))
                .or_else(|| options.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)))
                .map(|(_, v)| v.as_str())
        };
        let client_err = |message: String| FedError::Client {
            client: client.to_string(),
            location: "OPTIONS".into(),
            message,
        };
        let token_file = get("token_file").ok_or_else(|| {
            client_err(
                "a worker needs its token: OPTIONS ('token_file' 'path/to/token') (or 'token_file.<client>' for this client only)".into(),
            )
        })?;
        let token = crate::site::worker::read_token(Path::new(token_file))
            .map_err(|e| client_err(e.to_string()))?;
        let ca_cert = get("ca_cert")
            .map(|path| {
                std::fs::read(path)
                    .map_err(|e| client_err(format!("cannot read ca_cert {path}: {e}")))
            })
            .transpose()?;
        let timeout = match get("timeout") {
            Some(text) => parse_duration(text).ok_or_else(|| {
                FedError::Syntax(format!(
                    "OPTIONS timeout '{text}': expected a duration such as '30s', '500ms' or '2m'"
                ))
            })?,
            None => DEFAULT_TIMEOUT,
        };
        Ok(Self {
            token,
            timeout,
            ca_cert,
        })
    }
}

pub(crate) use crate::site::files::CSV_OPTION_KEYS;

/// Checks that every option key is known (`key` or `key.client` for one
/// of `clients`), for every kind of client; an unknown key is refused
/// with the valid ones and the closest of them.
pub(crate) fn check_option_keys(options: &[(String, String)], clients: &[&str]) -> Result<()> {
    for (key, _) in options {
        let lower = key.to_ascii_lowercase();
        let site_csv = crate::site::files::site_csv_key(key)
            .is_some_and(|(_, site)| clients.iter().any(|c| c.eq_ignore_ascii_case(site)));
        if crate::site::release::policy::POLICY_KEYS.contains(&lower.as_str())
            || crate::site::release::dp::DpPolicy::is_key(&lower)
            || CSV_OPTION_KEYS.contains(&lower.as_str())
            || site_csv
            || lower == crate::site::engine::FAST_PATH_KEY
            || lower == SECURE_THRESHOLD_KEY
        {
            continue;
        }
        let (base, client) = lower.split_once('.').unwrap_or((&lower, ""));
        let known = OPTION_KEYS.contains(&base)
            && (client.is_empty()
                || (base != "timeout" && clients.iter().any(|c| c.eq_ignore_ascii_case(client))));
        if !known {
            let mut valid: Vec<&str> = OPTION_KEYS.to_vec();
            valid.push(SECURE_THRESHOLD_KEY);
            valid.extend(CSV_OPTION_KEYS);
            valid.extend(crate::site::release::policy::POLICY_KEYS);
            valid.extend(crate::site::release::dp::DP_OPTION_KEYS);
            let hint = crate::suggest::did_you_mean(&lower, &valid)
                .or_else(|| crate::suggest::did_you_mean(base, &valid))
                .map(|k| format!("did you mean '{k}'? "))
                .unwrap_or_default();
            return Err(FedError::Syntax(format!(
                "unknown option '{key}': {hint}the options of a federated table are token_file, ca_cert and timeout for remote clients (token_file.<client> and ca_cert.<client> for one of them), secure_threshold (sites a secure round needs), the CSV options {} (or '<option>.<client>' for one of them) and fast_path ('on' or 'off') for local files, and the disclosure policy of its in-process clients: {}; and their privacy budget: {}, dp_domain.<column>",
                CSV_OPTION_KEYS.join(", "),
                crate::site::release::policy::POLICY_KEYS.join(", "),
                crate::site::release::dp::DP_OPTION_KEYS.join(", ")
            )));
        }
    }
    Ok(())
}

/// Refuses a CSV option for one site when that site is a worker: a worker
/// reads its own files as its data owner set them up (NA, NaN, NULL and
/// empty fields are missing in numeric columns there too).
pub(crate) fn check_no_site_csv(options: &[(String, String)], client: &str) -> Result<()> {
    for (key, _) in options {
        if let Some((_, site)) = crate::site::files::site_csv_key(key)
            && site.eq_ignore_ascii_case(client)
        {
            return Err(FedError::InvalidArgument(format!(
                "option '{key}': client '{client}' is a worker, which reads its own files; CSV options apply to local files only (a worker reads NA, NaN, NULL and empty fields as missing in numeric columns)"
            )));
        }
    }
    Ok(())
}

/// `30s`, `500ms`, `2m`, or a number of seconds.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, "s"),
    };
    let value: f64 = number.trim().parse().ok()?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        _ => return None,
    };
    (seconds.is_finite() && seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_urls() {
        let u = WorkerUrl::parse("grpc://127.0.0.1:50051", "clinic").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.table.as_str()),
            (false, "127.0.0.1", 50051, "clinic")
        );
        assert_eq!(u.endpoint(), "http://127.0.0.1:50051");
        let u = WorkerUrl::parse("grpcs://localhost:1/visits/", "clinic").unwrap();
        assert_eq!((u.tls, u.table.as_str()), (true, "visits"));
        assert_eq!(u.to_string(), "grpcs://localhost:1/visits");
        assert_eq!(
            WorkerUrl::parse("grpc://[::1]:7", "t").unwrap().endpoint(),
            "http://[::1]:7"
        );
        for bad in [
            "http://x:1",
            "grpc://x",
            "grpc://x:port",
            "grpc://:1",
            "grpc://x:1/a/b",
        ] {
            assert!(WorkerUrl::parse(bad, "t").is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn option_keys() {
        let opts = |k: &str| vec![(k.to_string(), "x".to_string())];
        assert!(check_option_keys(&opts("token_file"), &["a"]).is_ok());
        assert!(check_option_keys(&opts("token_file.a"), &["a"]).is_ok());
        assert!(check_option_keys(&opts("token_file.b"), &["a"]).is_err());
        assert!(check_option_keys(&opts("tokenfile"), &["a"]).is_err());
        assert!(check_option_keys(&opts("timeout.a"), &["a"]).is_err());
        assert!(check_option_keys(&opts("format.null_value"), &["a"]).is_ok());
        let e = check_option_keys(&opts("format.nul_value"), &["a"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean 'format.null_value'?"), "{e}");
    }

    #[test]
    fn per_client_token_overrides_the_table_token() {
        let dir = tempfile::TempDir::new().unwrap();
        let (all, a) = (dir.path().join("all"), dir.path().join("a"));
        std::fs::write(&all, "secret-all\n").unwrap();
        std::fs::write(&a, "secret-a").unwrap();
        let options = vec![
            ("token_file".to_string(), all.display().to_string()),
            ("token_file.a".to_string(), a.display().to_string()),
            ("timeout".to_string(), "2s".to_string()),
        ];
        let for_a = RemoteOptions::for_client(&options, "a").unwrap();
        let for_b = RemoteOptions::for_client(&options, "b").unwrap();
        assert_eq!(
            (for_a.token.as_str(), for_b.token.as_str()),
            ("secret-a", "secret-all")
        );
        assert_eq!(for_a.timeout, Duration::from_secs(2));
        let err = RemoteOptions::for_client(&[], "a").unwrap_err().to_string();
        assert!(
            err.contains("client 'a'") && err.contains("token_file"),
            "{err}"
        );
    }
}
