//! A worker's settings: its command-line flags and its TOML file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{FedError, Result};
use crate::site::worker::log::LogSink;

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
    /// `tls_cert`, `tls_key`, and a `[tables]` section of name = "path");
    /// command-line flags take precedence.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key, the worker speaks TLS.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
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
}

/// Everything a worker needs to start.
#[derive(Clone)]
pub struct WorkerConfig {
    pub listen: SocketAddr,
    /// Served tables: name and path (file or folder).
    pub tables: Vec<(String, PathBuf)>,
    pub token: String,
    /// PEM certificate chain and key, for TLS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Log sink; `None` writes to stderr.
    pub log: Option<LogSink>,
}

impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("listen", &self.listen)
            .field("tables", &self.tables)
            .field("token", &"<hidden>")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl WorkerConfig {
    /// A plain-text worker on `listen` serving `tables` with `token`.
    pub fn new(listen: SocketAddr, tables: Vec<(String, PathBuf)>, token: &str) -> Self {
        Self {
            listen,
            tables,
            token: token.to_string(),
            tls: None,
            log: None,
        }
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
        let token_file = args
            .token_file
            .clone()
            .or_else(|| from_file(&file.token_file))
            .ok_or_else(|| {
                FedError::Syntax(
                    "fedsql worker needs --token-file FILE (or `token_file` in --config): every request must carry its token".into(),
                )
            })?;
        let token = read_token(&token_file)?;
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
        Ok(Self {
            listen,
            tables,
            token,
            tls,
            log: None,
        })
    }
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn config_file_and_flags_combine() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join("secret.txt"), "tok\n").unwrap();
        let config = dir.path().join("worker.toml");
        std::fs::write(
            &config,
            "listen = \"127.0.0.1:50051\"\ntoken_file = \"secret.txt\"\n[tables]\nclinic = \"data/clinic.parquet\"\n",
        )
        .unwrap();
        let args = WorkerArgs {
            config: Some(config.clone()),
            tables: vec!["visits=/srv/visits/".into()],
            ..Default::default()
        };
        let c = WorkerConfig::from_args(&args).await.unwrap();
        assert_eq!(c.listen, "127.0.0.1:50051".parse().unwrap());
        assert_eq!(c.token, "tok");
        assert_eq!(
            c.tables,
            [
                ("clinic".to_string(), dir.path().join("data/clinic.parquet")),
                ("visits".to_string(), PathBuf::from("/srv/visits/"))
            ]
        );
        // The flag wins over the file.
        let args = WorkerArgs {
            listen: Some("127.0.0.1:7".into()),
            ..args
        };
        assert_eq!(
            WorkerConfig::from_args(&args).await.unwrap().listen.port(),
            7
        );

        std::fs::write(&config, "listen = \"x\"\nport = 3\n").unwrap();
        let err = WorkerConfig::from_args(&WorkerArgs {
            config: Some(config),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("port"), "{err}");
        let err = WorkerConfig::from_args(&WorkerArgs {
            listen: Some("127.0.0.1:0".into()),
            token_file: Some(dir.path().join("secret.txt")),
            tables: vec!["no-equals-sign".into()],
            ..Default::default()
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("NAME=PATH"), "{err}");
    }
}
