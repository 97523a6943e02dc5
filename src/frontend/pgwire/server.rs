//! The listener: accepts connections, gives each its session and its
//! start-up (SCRAM or none), optionally over TLS, and serves them all at
//! once, each on a task of its own — a client that misbehaves or drops
//! its connection mid-query ends only its own task.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use pgwire::api::auth::DefaultServerParameterProvider;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ConnectionManager, PgWireServerHandlers};
use pgwire::tokio::TlsAcceptor;
use pgwire::tokio::process_socket;
use pgwire::tokio::tokio_rustls::rustls;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::auth::{Startup, Users};
use super::catalog;
use super::session::{Connection, Extended, ServerState};
use crate::coordinator::context::FedContext;
use crate::coordinator::federated_table::FederatedTable;
use crate::error::{FedError, Result};

/// How to serve.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// Where to listen, e.g. `127.0.0.1:5433` (port 0: any free port).
    pub listen: String,
    /// The users who may connect (SCRAM-SHA-256); `None`: no password, and
    /// then only on a loopback address.
    pub users: Option<Arc<Users>>,
    /// TLS, when a certificate and key were given.
    pub tls: Option<TlsAcceptor>,
    /// Let connections run DDL and statements that name paths.
    pub allow_ddl: bool,
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    handle: JoinHandle<()>,
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until the server stops (it stops only when dropped or on error).
    pub async fn wait(&mut self) -> Result<()> {
        (&mut self.handle)
            .await
            .map_err(|e| FedError::Internal(format!("the server stopped: {e}")))
    }

    /// Stops accepting connections.
    pub fn shutdown(&self) {
        self.handle.abort();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Starts serving `ctx`'s catalog. The server is listening when this
/// returns (a test can connect at once).
pub async fn start(ctx: FedContext, options: ServerOptions) -> Result<Server> {
    let not_loopback = |addr: &str| {
        FedError::InvalidArgument(format!(
            "without --users the server accepts connections without a password, so it listens only on a loopback address, not {addr}: write a users file with `fedsql passwd USER --users users.toml` and pass --users users.toml"
        ))
    };
    // Checked before binding where the address says it all.
    if options.users.is_none()
        && let Ok(addr) = options.listen.parse::<SocketAddr>()
        && !addr.ip().is_loopback()
    {
        return Err(not_loopback(&options.listen));
    }
    if options.users.is_none() {
        dp_tables_need_users(&ctx).await?;
    }
    let listener = TcpListener::bind(&options.listen).await.map_err(|e| {
        FedError::InvalidArgument(format!("cannot listen on {}: {e}", options.listen))
    })?;
    let addr = listener.local_addr()?;
    if options.users.is_none() && !addr.ip().is_loopback() {
        return Err(not_loopback(&addr.to_string()));
    }
    catalog::install(&ctx)?;
    let shared = Arc::new(Shared {
        state: ServerState {
            ctx,
            allow_ddl: options.allow_ddl,
            users: options.users.clone(),
        },
        users: options.users,
        parameters: Arc::new(parameters(options.allow_ddl)),
        connections: Arc::new(ConnectionManager::new()),
    });
    let tls = options.tls;
    let handle = tokio::spawn(async move {
        loop {
            let Ok((socket, peer)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let handlers = ConnectionHandlers::new(&shared);
            let tls = tls.clone();
            tokio::spawn(async move {
                // A connection's errors end that connection only; so does
                // a panic in the wire library over a malformed message
                // (pgwire 0.41 panics on a SASL response whose length runs
                // past the message: found by the `pg_wire` fuzz target).
                let served = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                    process_socket(socket, tls, handlers),
                ))
                .await;
                if let Err(panic) = served {
                    eprintln!(
                        "fedsql serve: connection from {peer} closed: a malformed message ({})",
                        crate::error::panic_message(panic.as_ref())
                    );
                }
            });
        }
    });
    Ok(Server { addr, handle })
}

/// Refuses to serve, without `--users`, a table whose in-process clients
/// keep a DP budget (`dp_budget`) or answer only DP (`require_dp`): their
/// ledgers are kept per connection user, and without a users file a
/// connection may call itself anyone — every new name would bring a fresh
/// budget. (A worker's ledger is keyed by the coordinator's token, which
/// every connection shares: it is not multiplied by names.)
async fn dp_tables_need_users(ctx: &FedContext) -> Result<()> {
    for table in ctx.tables().await? {
        if table.clients.is_none() {
            continue;
        }
        let provider = ctx.federated_table(&table.name).await?;
        let Some(federated) = FederatedTable::from_provider(provider.as_ref()) else {
            continue;
        };
        let dp = federated
            .clients()
            .iter()
            .any(|c| c.keeps_budget_per_analyst());
        if dp {
            return Err(FedError::InvalidArgument(format!(
                "table `{}` has a DP policy (dp_budget or require_dp) whose budget is kept per user: \
                 serving it needs --users, so that every connection is a known user spending their own budget \
                 (write the users file with `fedsql passwd USER --users users.toml`)",
                table.name
            )));
        }
    }
    Ok(())
}

/// A TLS acceptor from PEM files.
pub(crate) fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| {
            FedError::InvalidArgument(format!(
                "cannot read the certificate {}: {e}",
                cert.display()
            ))
        })?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        FedError::InvalidArgument(format!("cannot read the key {}: {e}", key.display()))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| {
            FedError::InvalidArgument(format!("TLS certificate or key not usable: {e}"))
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The parameters a client gets at start-up (`server_version` is what
/// psql and JDBC read the version from).
fn parameters(allow_ddl: bool) -> DefaultServerParameterProvider {
    let mut parameters = DefaultServerParameterProvider::default();
    parameters.server_version = format!(
        "{} (fedsql {})",
        catalog::SERVER_VERSION,
        env!("CARGO_PKG_VERSION")
    );
    parameters.is_superuser = false;
    parameters.default_transaction_read_only = !allow_ddl;
    parameters
}

/// What every connection's handlers share.
struct Shared {
    state: ServerState,
    users: Option<Arc<Users>>,
    parameters: Arc<DefaultServerParameterProvider>,
    connections: Arc<ConnectionManager>,
}

/// The handlers of one connection.
struct ConnectionHandlers {
    connection: Arc<Connection>,
    extended: Arc<Extended>,
    startup: Arc<Startup<DefaultServerParameterProvider>>,
    cancel: Arc<DefaultCancelHandler>,
}

impl ConnectionHandlers {
    fn new(shared: &Shared) -> Self {
        let connection = Connection::new(&shared.state);
        Self {
            extended: Arc::new(Extended::new(connection.clone())),
            connection,
            startup: Arc::new(Startup::new(
                shared.users.clone(),
                shared.parameters.clone(),
                shared.connections.clone(),
            )),
            cancel: Arc::new(DefaultCancelHandler::new(shared.connections.clone())),
        }
    }
}

impl PgWireServerHandlers for ConnectionHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.connection.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.extended.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}
