//! Rows kept for a fit are dropped when the connection that used them
//! closes.
//!
//! A site keeps a fit's decoded rows between its rounds
//! ([`crate::site::engine::kept_rows`]); the coordinator releases them when
//! the fit ends. A coordinator that dies (killed, its machine gone) never
//! does, and until four newer fits pushed them out its rows would stay in
//! the worker's memory. So the worker notes which connection sent each
//! fit's rounds ([`FitConnections::note`]), and every accepted connection
//! is wrapped ([`Tracked`]) so that when it closes — the coordinator's
//! process ended, or its connection was cut — the rows of the fits it
//! carried are dropped. Dropping them is always safe: kept rows are a
//! cache, and a later round of a fit that lost them reads its rows again.
//! A request under way on that connection is cancelled as the
//! connection goes (tonic drops its future, which stops its work).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// What keeps a fit's rows: the worker's service (a trait, so that this
/// registry and the service import in one direction only).
pub(crate) trait FitReleaser: Send + Sync {
    /// Drops the rows kept for fit `scope`; whether there were any.
    fn release_fit(&self, scope: u64) -> bool;
    /// A line in the worker's log.
    fn log(&self, peer: &str, line: &str);
}

/// The fits each open connection has sent rounds of.
#[derive(Default)]
pub(crate) struct FitConnections {
    by_peer: Mutex<HashMap<SocketAddr, BTreeSet<u64>>>,
    /// The service whose tables keep the rows (weak: the service holds
    /// this registry).
    service: OnceLock<Weak<dyn FitReleaser>>,
}

impl std::fmt::Debug for FitConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FitConnections")
            .field("by_peer", &self.by_peer)
            .finish_non_exhaustive()
    }
}

impl FitConnections {
    /// Releases into `service`'s tables from now on.
    pub(crate) fn serve(&self, service: Weak<dyn FitReleaser>) {
        let _ = self.service.set(service);
    }

    /// Notes that the connection from `peer` sent a round of fit `scope`.
    pub(crate) fn note(&self, peer: SocketAddr, scope: u64) {
        self.by_peer
            .lock()
            .expect("not poisoned")
            .entry(peer)
            .or_default()
            .insert(scope);
    }

    /// The connection from `peer` closed: drops the rows of its fits.
    fn closed(&self, peer: SocketAddr) {
        let scopes = self.by_peer.lock().expect("not poisoned").remove(&peer);
        let (Some(scopes), Some(service)) = (scopes, self.service.get().and_then(Weak::upgrade))
        else {
            return;
        };
        for scope in scopes {
            if service.release_fit(scope) {
                service.log(
                    &peer.to_string(),
                    &format!("connection closed: released the rows kept for fit {scope}"),
                );
            }
        }
    }
}

/// An accepted connection that tells [`FitConnections`] when it closes.
pub(crate) struct Tracked {
    stream: TcpStream,
    peer: Option<SocketAddr>,
    fits: Arc<FitConnections>,
}

impl Tracked {
    pub(crate) fn new(stream: TcpStream, fits: Arc<FitConnections>) -> Self {
        Self {
            peer: stream.peer_addr().ok(),
            stream,
            fits,
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(peer) = self.peer {
            self.fits.closed(peer);
        }
    }
}

impl Connected for Tracked {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
