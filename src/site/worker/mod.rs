//! `fedsql worker`: one site's tables served over Arrow Flight.
//!
//! A worker is run by the data owner. It holds a [`crate::site::local::LocalClient`] per served
//! table and answers the calls of [`crate::protocol::flight`]. It decides
//! for itself what may leave: every plan it receives is decoded with a codec
//! that only knows its served tables and inline shared rows, then checked
//! *here*, whatever the coordinator checked —
//!
//! * every scan reads a table this worker serves (by name) or rows shipped
//!   with the plan; any other scan (a file path in a hand-crafted plan, a
//!   view, ...) is refused, and so are plan nodes that write or define
//!   anything (COPY, INSERT, DDL, extension nodes);
//! * the root is an aggregate whose input reaches the served table only
//!   through client-local operators, with bounded aggregates only — the
//!   same [`crate::protocol::encoder::Encoder`] validation the coordinator runs ([`crate::protocol::exposure`]);
//! * the answer is the one-state-row-per-group batch the encoder makes.
//!
//! Every call must carry the worker's token (compared in constant time);
//! TLS (rustls) is used when a certificate and key are given. Each request
//! is logged to stderr: the peer, the table, the state released (aggregate
//! names, rows, bytes) and the rows it covers, or the refusal and its reason.
//!
//! Every encoder run is recorded in the [`audit`] trail (on by default),
//! synced to disk before its answer leaves; a request that cannot be
//! recorded is refused.
//!
//! [`config`] reads its flags and TOML file, [`tables`] holds the served
//! tables and binds received plans to them, [`service`] answers the Flight
//! calls, and [`log`] writes what it released and refused.

pub mod admin;
pub mod approvals;
pub mod audit;
pub(crate) mod checked_plans;
pub(crate) mod config;
pub(crate) mod fit_connections;
pub(crate) mod log;
pub mod metrics;
pub mod profiles;
pub(crate) mod service;
pub(crate) mod tables;
pub(crate) mod token_check;
pub(crate) mod tokens;

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use crate::site::release::identity;
pub use config::{RequestLimits, WorkerArgs, WorkerConfig, read_token};
pub use log::LogSink;
pub use service::WorkerService;
use tables::{ServedTable, SiteOptions};

use crate::error::{FedError, Result};
use crate::protocol::flight::MAX_MESSAGE_BYTES;

/// A worker serving in the background of this process.
pub struct RunningWorker {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    /// The admin page, when it is served.
    admin: Option<admin::AdminServer>,
}

impl RunningWorker {
    /// The address it listens on (with the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin page's address, when it is served.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(admin::AdminServer::addr)
    }

    /// Stops serving and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.handle).await;
    }

    /// Stops at once, as if the process died: open calls are cut.
    pub fn kill(&self) {
        self.handle.abort();
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Opens the tables and starts serving them.
pub async fn start(config: WorkerConfig) -> Result<RunningWorker> {
    config.check_dp_has_policy()?;
    // No two analysts share a ledger: no token named as the single one,
    // no token under two names.
    tokens::check_names(&config.token, &config.named_tokens)?;
    let peers: Arc<[[u8; 32]]> = config.peers.clone().into();
    // One privacy-budget ledger for every served table (DP, issue 14).
    let ledger = std::sync::Arc::new(match &config.dp_ledger {
        Some(path) => crate::site::release::dp_budget::Ledger::open(path)?,
        None => crate::site::release::dp_budget::Ledger::in_memory(),
    });
    // One engine for every site of this worker.
    let engine = Arc::new(crate::site::engine::SiteEngine::new());
    // The cluster that reads every served table's rows, if any.
    let cluster = match &config.engine {
        Some(address) => Some(crate::site::cluster::ClusterEngine::new(
            address.clone(),
            config.log.clone(),
        )?),
        None => None,
    };
    let session_ids = Arc::new(crate::site::release::secure::SecureSessionIds::default());
    let open = |name: &str, path: &std::path::Path, policy, dp| {
        let site = SiteOptions {
            policy,
            identity: config.identity.clone(),
            peers: Arc::clone(&peers),
            secure_without_peers: config.secure_without_peers,
            memory_limit: config.limits.memory,
            engine: Arc::clone(&engine),
            fast_path: config.fast_path,
            cluster: cluster.clone(),
            session_ids: Arc::clone(&session_ids),
        };
        ServedTable::open(name, path, site).map(|t| {
            t.with_dp(Arc::new(crate::site::release::dp::DpSite::new(
                dp,
                Arc::clone(&ledger),
            )))
        })
    };
    let tables = config
        .tables
        .iter()
        .map(|(name, path)| open(name, path, config.policy_of(name), config.dp.clone()))
        .collect::<Result<Vec<_>>>()?;
    // A profile with a larger k, a smaller budget or DP only reaches the
    // tables through clients of its own, under its own settings.
    let mut profile_tables = std::collections::BTreeMap::new();
    for profile in config.profiles.iter().filter(|p| p.tightens()) {
        let opened = config
            .tables
            .iter()
            .filter(|(name, _)| profile.tables.as_ref().is_none_or(|t| t.contains(name)))
            .map(|(name, path)| {
                open(
                    name,
                    path,
                    profile.policy(config.policy_of(name)),
                    profile.dp(&config.dp),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        profile_tables.insert(profile.name.clone(), opened);
    }
    let approvals = if config.needs_approvals() {
        Some(Arc::new(approvals::Approvals::open(
            &config.approvals_file,
        )?))
    } else {
        None
    };
    let audit = match &config.audit_log {
        Some(path) => Some(Arc::new(audit::AuditLog::open(path)?)),
        None => None,
    };
    let tokens = tokens::Tokens::new(&config.token, &config.named_tokens);
    let service = WorkerService::new(tables, &config.token, config.log.clone(), config.limits)
        .with_tokens(tokens.clone())
        .with_audit(audit)
        .with_profiles(config.profiles.clone(), profile_tables)
        .with_approvals(approvals, config.approval_tables.clone());
    let service = Arc::new(service);
    let fits = service.fit_connections();
    let releaser: Arc<dyn fit_connections::FitReleaser> = service.clone();
    fits.serve(Arc::downgrade(&releaser));
    let admin = match &config.admin {
        Some((addr, token)) => Some(admin::start(*addr, token, Arc::clone(&service)).await?),
        None => None,
    };
    let incoming = TcpIncoming::bind(config.listen)
        .map_err(|e| FedError::InvalidArgument(format!("cannot listen on {}: {e}", config.listen)))?
        .with_nodelay(Some(true))
        .with_keepalive(Some(config.keepalive));
    let addr = incoming.local_addr()?;
    // Each connection tells the service when it closes (a fit's kept rows go with it).
    let incoming = futures::StreamExt::map(incoming, move |accepted| {
        accepted.map(|stream| fit_connections::Tracked::new(stream, Arc::clone(&fits)))
    });
    // Until a call's token is checked (on its headers), the worker reads
    // at most the headers (64 KiB) and one flow-control window of its body
    // (1 MiB per call and per connection): an unauthenticated request of
    // any size costs it no more.
    // A connection that stops answering PINGs is closed (and its fits'
    // kept rows released with it).
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(config.keepalive))
        .http2_keepalive_timeout(Some(config.keepalive))
        .http2_max_header_list_size(64 << 10)
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(1 << 20);
    if let Some((cert, key)) = &config.tls {
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
            .map_err(|e| {
                FedError::InvalidArgument(format!("TLS certificate or key not usable: {e}"))
            })?;
    }
    let check = service::TokenCheck::new(&config.token, config.log.clone()).with_tokens(tokens);
    let server = FlightServiceServer::from_arc(service)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // The token is checked on the headers, before any body is read.
    let server = tonic::service::interceptor::InterceptedService::new(server, check);
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(builder.add_service(server).serve_with_incoming_shutdown(
        incoming,
        async {
            let _ = rx.await;
        },
    ));
    Ok(RunningWorker {
        addr,
        shutdown: Some(tx),
        handle,
        admin,
    })
}

/// `fedsql worker ...`: serves until Ctrl-C.
pub async fn run_cli(args: &WorkerArgs) -> Result<()> {
    if args.show_identity
        && let Some(path) = &args.identity_key
    {
        let (identity, created) = identity::SiteIdentity::load_or_create(path)?;
        if created {
            eprintln!("created identity key {}", path.display());
        }
        println!("{}", identity.public_key_text());
        return Ok(());
    }
    let config = WorkerConfig::from_args(args).await?;
    let names: Vec<String> = config
        .tables
        .iter()
        .map(|(n, p)| format!("{n}={}", p.display()))
        .collect();
    let tls = config.tls.is_some();
    let engine = config.engine.clone();
    let identity = config.identity.as_ref().map(|i| i.public_key_text());
    if config.policy.is_none() {
        eprintln!(
            "fedsql worker: WARNING: serving WITHOUT a disclosure policy (--policy none): any aggregate state of any group size leaves this site"
        );
    }
    if !tls && !config.listen.ip().is_loopback() {
        eprintln!(
            "fedsql worker: WARNING: serving in plain text on {}: tokens and aggregate states cross the network unencrypted (--tls-cert and --tls-key turn TLS on)",
            config.listen
        );
    }
    if config.audit_log.is_none() {
        eprintln!(
            "fedsql worker: WARNING: serving WITHOUT an audit trail (--audit-log none): no request is recorded"
        );
    }
    if let Some((addr, _)) = &config.admin
        && !addr.ip().is_loopback()
    {
        eprintln!(
            "fedsql worker: WARNING: the admin page listens on {addr}, beyond this machine, in plain HTTP: its token and pages cross the network unencrypted (put it behind a TLS proxy, or keep it on loopback)"
        );
    }
    let mut worker = start(config).await?;
    if let Some(admin) = worker.admin_addr() {
        eprintln!("fedsql worker: admin page on http://{admin}/ (sign in with the admin token)");
    }
    println!(
        "fedsql worker listening on {} ({}; tables: {}{})",
        worker.addr(),
        if tls { "TLS" } else { "plain text" },
        names.join(", "),
        match &engine {
            Some(address) => format!("; rows read by {}", address.url()),
            None => String::new(),
        }
    );
    if let Some(identity) = identity {
        eprintln!(
            "fedsql worker: identity {identity} (list it in the other sites' [policy] peers)"
        );
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        ended = &mut worker.handle => {
            return match ended {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(FedError::Io(std::io::Error::other(format!("the worker stopped: {e}")))),
                Err(e) => Err(FedError::Io(std::io::Error::other(format!("the worker stopped: {e}")))),
            };
        }
    }
    worker.shutdown().await;
    Ok(())
}
