//! A TCP proxy that misbehaves on purpose, for the network benchmark
//! (`fedsql-bench --network`) and the partition tests (the integration
//! tests include this file with `#[path]`): it listens on loopback,
//! forwards every connection to one target (a worker), and delays what it
//! forwards as a slow or lossy link would.
//!
//! * **Round trip**: every chunk read from one side is written to the other
//!   `rtt / 2` after it was read, in both directions, so a request and its
//!   answer take one `rtt` more than without the proxy.
//! * **Bandwidth**: a chunk is written no sooner than the previous one
//!   plus its length at the capped rate (per connection and direction).
//! * **Loss**, approximated: the kernel has no `netem` here, and TCP over
//!   loopback does not lose segments, so a lost segment is modelled by
//!   what TCP makes of it — a retransmission after its timeout (200 ms,
//!   Linux's minimum RTO) that holds back everything behind it on that
//!   connection. Each chunk is "lost" with the given probability.
//! * **Partition**: nothing is delivered, in either direction, until it
//!   heals (new connections wait too); one that never heals holds
//!   everything for as long as the proxy lives.
//!
//! Order within a direction is kept (as TCP does), and the proxy counts
//! what it sees: connections opened and the client's request bursts (a
//! client-to-server chunk after a server-to-client one: a round trip).

// Two crates use this file (the benchmark, and the integration tests
// through `#[path]`), each a different part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// TCP's retransmission timeout that a "lost" chunk waits (Linux's
/// minimum RTO).
pub(crate) const RETRANSMISSION_TIMEOUT: Duration = Duration::from_millis(200);

/// How the link behaves.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Link {
    /// The round trip the proxy adds (half of it each way).
    pub(crate) rtt: Duration,
    /// Bytes per second in each direction; `None`: no cap.
    pub(crate) bytes_per_second: Option<u64>,
    /// The probability that a chunk is "lost" (delayed by
    /// [`RETRANSMISSION_TIMEOUT`]).
    pub(crate) loss: f64,
}

#[derive(Debug, Clone, Copy)]
enum Partition {
    None,
    Until(Instant),
    Forever,
}

/// What the proxy has seen.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Connections opened through the proxy.
    pub(crate) connections: AtomicU64,
    /// Client bursts: client-to-server chunks after server-to-client ones.
    pub(crate) round_trips: AtomicU64,
    /// Chunks held back as "lost".
    pub(crate) lost_chunks: AtomicU64,
}

#[derive(Debug)]
struct State {
    link: Mutex<Link>,
    partition: Mutex<Partition>,
    counts: Counts,
    /// Whether the last chunk of each connection went server to client.
    last_was_answer: Mutex<std::collections::HashMap<u64, bool>>,
}

impl State {
    /// When delivery may resume (`None`: now).
    fn blocked_until(&self) -> Option<Instant> {
        match *self.partition.lock().expect("not poisoned") {
            Partition::None => None,
            Partition::Until(t) if t <= Instant::now() => None,
            Partition::Until(t) => Some(t),
            Partition::Forever => Some(Instant::now() + Duration::from_millis(20)),
        }
    }

    async fn wait_while_partitioned(&self) {
        while let Some(until) = self.blocked_until() {
            let step = until.saturating_duration_since(Instant::now());
            tokio::time::sleep(step.min(Duration::from_millis(20))).await;
        }
    }
}

/// A proxy serving on loopback until dropped.
pub(crate) struct FaultProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to `target`.
    pub(crate) async fn start(target: SocketAddr, link: Link) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            link: Mutex::new(link),
            partition: Mutex::new(Partition::None),
            counts: Counts::default(),
            last_was_answer: Mutex::default(),
        });
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let state = Arc::clone(&state);
            let connections = Arc::clone(&connections);
            async move {
                let mut next_id = 0u64;
                while let Ok((inbound, _)) = listener.accept().await {
                    let _ = inbound.set_nodelay(true);
                    state.counts.connections.fetch_add(1, Ordering::Relaxed);
                    next_id += 1;
                    let task = tokio::spawn(forward(inbound, target, Arc::clone(&state), next_id));
                    let mut open = connections.lock().expect("not poisoned");
                    open.retain(|t| !t.is_finished());
                    open.push(task);
                }
            }
        });
        Ok(Self {
            addr,
            state,
            accept,
            connections,
        })
    }

    /// The address to connect to instead of the target.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Delivers nothing for `duration`, then resumes.
    pub(crate) fn partition_for(&self, duration: Duration) {
        *self.state.partition.lock().expect("not poisoned") =
            Partition::Until(Instant::now() + duration);
    }

    /// Delivers nothing until [`Self::heal`] (or the proxy is dropped).
    pub(crate) fn partition(&self) {
        *self.state.partition.lock().expect("not poisoned") = Partition::Forever;
    }

    /// Ends a partition.
    pub(crate) fn heal(&self) {
        *self.state.partition.lock().expect("not poisoned") = Partition::None;
    }

    /// Chunks held back as "lost" so far.
    pub(crate) fn lost_chunks(&self) -> u64 {
        self.state.counts.lost_chunks.load(Ordering::Relaxed)
    }

    /// Connections opened so far.
    pub(crate) fn connections(&self) -> u64 {
        self.state.counts.connections.load(Ordering::Relaxed)
    }

    /// Client request bursts (round trips) so far.
    pub(crate) fn round_trips(&self) -> u64 {
        self.state.counts.round_trips.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self.connections.lock().expect("not poisoned").drain(..) {
            task.abort();
        }
    }
}

/// Forwards one connection both ways until either side closes.
async fn forward(inbound: TcpStream, target: SocketAddr, state: Arc<State>, id: u64) {
    // A connection made during a partition waits for it to heal (its
    // SYN would be lost and sent again).
    state.wait_while_partitioned().await;
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = outbound.set_nodelay(true);
    let (client_read, client_write) = inbound.into_split();
    let (server_read, server_write) = outbound.into_split();
    let up = pump(client_read, server_write, Arc::clone(&state), id, true);
    let down = pump(server_read, client_write, Arc::clone(&state), id, false);
    // Either direction ending (a close, a reset) ends both, as a proxy
    // that passes a close on does.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    state
        .last_was_answer
        .lock()
        .expect("not poisoned")
        .remove(&id);
}

/// Reads chunks from `from` and writes each to `to` when it is due.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
    id: u64,
    client_to_server: bool,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = {
        let state = Arc::clone(&state);
        async move {
            let mut buffer = vec![0u8; 64 << 10];
            // When the previous chunk of this direction is delivered.
            let mut previous = Instant::now();
            loop {
                let n = match from.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let now = Instant::now();
                {
                    let mut last = state.last_was_answer.lock().expect("not poisoned");
                    let was_answer = last.insert(id, !client_to_server).unwrap_or(true);
                    if client_to_server && was_answer {
                        state.counts.round_trips.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let link = *state.link.lock().expect("not poisoned");
                let mut due = now + link.rtt / 2;
                if link.loss > 0.0 && rand::rng().random_bool(link.loss.min(1.0)) {
                    state.counts.lost_chunks.fetch_add(1, Ordering::Relaxed);
                    due += RETRANSMISSION_TIMEOUT;
                }
                let serialized = link
                    .bytes_per_second
                    .map(|rate| Duration::from_secs_f64(n as f64 / rate.max(1) as f64))
                    .unwrap_or_default();
                due = due.max(previous + serialized);
                previous = due;
                if tx.send((due, buffer[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            state.wait_while_partitioned().await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    // The writer drains what the reader queued before it ended.
    let (_, ()) = tokio::join!(reader, writer);
}
