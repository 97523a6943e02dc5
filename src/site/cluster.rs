//! Where a worker's encoders read their rows: on this machine, or on a
//! Ballista cluster inside the data owner's boundary (`fedsql worker
//! --engine ballista://HOST:PORT`, TOML `engine = "ballista://…"`).
//!
//! With a cluster, the worker still does everything that decides what may
//! leave: it admits and checks the encoder, plans the site's partial
//! aggregate (with the policy's counting wrappers) as for local files,
//! and applies the counts against k, the sketches' coarsening, DP noise,
//! secure masking, the ledger and the audit to the states it gets back.
//! Only the plan's row-reading part runs on the cluster, as one Ballista
//! job; the worker never runs a scan itself (it opens the table's files
//! as for local ones, for their schema, and lists them when it plans),
//! and a cluster it cannot reach fails the request with an error naming
//! the cluster.
//!
//! The cluster half lives in [`crate::site::ballista`], built with the
//! `ballista` cargo feature; without it the flags parse and the worker and
//! the `fedsql ballista` commands say how to get a build that has it.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::{FedError, Result};

/// The scheme of `--engine`.
pub const ENGINE_SCHEME: &str = "ballista://";

/// A Ballista scheduler's address, as `--engine ballista://HOST:PORT` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterAddress {
    pub host: String,
    pub port: u16,
}

impl ClusterAddress {
    /// Parses `ballista://HOST:PORT`.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            FedError::InvalidArgument(format!(
                "--engine '{text}': {why}; expected {ENGINE_SCHEME}HOST:PORT (the Ballista scheduler of `fedsql ballista scheduler --listen HOST:PORT`)"
            ))
        };
        let rest = text
            .trim()
            .strip_prefix(ENGINE_SCHEME)
            .ok_or_else(|| bad("not a ballista:// address"))?;
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.contains('/') {
            return Err(bad("no host"));
        }
        let port = port
            .parse::<u16>()
            .map_err(|_| bad("the port is not a number"))?;
        Ok(Self {
            host: host.to_string(),
            port,
        })
    }

    /// The address as `--engine` takes it.
    pub fn url(&self) -> String {
        format!("{ENGINE_SCHEME}{}", self.host_port())
    }

    /// `HOST:PORT` (an IPv6 host in brackets).
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Where a cluster engine logs what it does to a job besides running it
/// (a cancellation): the worker's log.
pub type JobLog = Arc<dyn Fn(&str) + Send + Sync>;

/// The cluster a worker's sites run their row-reading work on.
#[derive(Debug)]
pub struct ClusterEngine {
    address: ClusterAddress,
    #[cfg(feature = "ballista")]
    client: crate::site::ballista::BallistaClient,
}

impl ClusterEngine {
    /// The engine of a worker started with `--engine`: nothing is
    /// connected yet (every request connects, so a cluster that is down
    /// fails its requests, not the worker).
    /// A job it cancels (its request ended first) is logged to `log`
    /// (stderr if `None`).
    pub fn new(address: ClusterAddress, log: Option<JobLog>) -> Result<Arc<Self>> {
        #[cfg(feature = "ballista")]
        {
            let log = log.unwrap_or_else(|| Arc::new(|line: &str| eprintln!("{line}")));
            let client = crate::site::ballista::BallistaClient::new(&address.host_port(), log);
            Ok(Arc::new(Self { address, client }))
        }
        #[cfg(not(feature = "ballista"))]
        {
            let _ = log;
            Err(without_ballista(&format!("--engine {}", address.url())))
        }
    }

    /// The address it was started with.
    pub fn address(&self) -> &ClusterAddress {
        &self.address
    }

    /// Runs a site's physical plan (its partial aggregate and its reduce
    /// to one state row per group) as one Ballista job and returns its
    /// state batches. Errors name the cluster.
    /// The states fetched count against `memory_limit`.
    pub async fn collect(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        memory_limit: Option<usize>,
    ) -> Result<Vec<RecordBatch>> {
        #[cfg(feature = "ballista")]
        {
            self.client
                .collect(plan, memory_limit)
                .await
                .map_err(|e| cluster_error(&self.address, e))
        }
        #[cfg(not(feature = "ballista"))]
        {
            let _ = (plan, memory_limit);
            Err(without_ballista(&self.address.url()))
        }
    }
}

/// A failure of the cluster, naming it (the worker logs it; under a
/// policy the coordinator gets the fixed refusal, as for any site error).
#[cfg(feature = "ballista")]
fn cluster_error(address: &ClusterAddress, e: datafusion::error::DataFusionError) -> FedError {
    // Past the worker's memory_limit: the site names the limit.
    if matches!(e, datafusion::error::DataFusionError::ResourcesExhausted(_)) {
        return FedError::DataFusion(e);
    }
    let text = e.to_string();
    let unreachable = [
        "connect",
        "Connection refused",
        "transport error",
        "dns error",
    ]
    .iter()
    .any(|w| text.contains(w));
    let what = if unreachable {
        "is unreachable"
    } else {
        "failed to run the encoder"
    };
    FedError::DataFusion(datafusion::error::DataFusionError::External(
        format!("the Ballista cluster at {} {what}: {text}", address.url()).into(),
    ))
}

/// The error of a build without the `ballista` feature.
#[cfg(not(feature = "ballista"))]
fn without_ballista(what: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "{what}: this fedsql was built without Ballista; build it with `cargo build --release --features ballista`"
    ))
}

/// `fedsql ballista ...`: the processes of a data owner's Ballista cluster.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BallistaCommand {
    /// Start a Ballista scheduler that knows fedsql's functions and plans.
    Scheduler {
        /// Address to listen on, e.g. 0.0.0.0:50050 (port 0: any free port).
        #[arg(long, value_name = "HOST:PORT")]
        listen: String,
    },
    /// Start a Ballista executor with fedsql's functions, registered with a scheduler.
    Executor {
        /// The scheduler's address (as given to its --listen).
        #[arg(long, value_name = "HOST:PORT")]
        scheduler: String,
        /// Address to serve shuffle data on (default 127.0.0.1:0: any free port on loopback).
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
        /// Tasks run at once (default: the machine's cores).
        #[arg(long, value_name = "N")]
        slots: Option<usize>,
        /// Where shuffle files are written (default: a temporary folder).
        #[arg(long, value_name = "DIR")]
        work_dir: Option<std::path::PathBuf>,
    },
}

/// Runs `fedsql ballista ...` until Ctrl-C.
pub async fn run_cli(command: &BallistaCommand) -> Result<()> {
    #[cfg(feature = "ballista")]
    {
        use crate::site::ballista::{serve_executor, serve_scheduler};
        match command {
            BallistaCommand::Scheduler { listen } => serve_scheduler(listen).await,
            BallistaCommand::Executor {
                scheduler,
                listen,
                slots,
                work_dir,
            } => serve_executor(scheduler, listen.as_deref(), *slots, work_dir.clone()).await,
        }
    }
    #[cfg(not(feature = "ballista"))]
    {
        let what = match command {
            BallistaCommand::Scheduler { .. } => "fedsql ballista scheduler",
            BallistaCommand::Executor { .. } => "fedsql ballista executor",
        };
        Err(without_ballista(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_address_is_ballista_host_and_port() {
        let a = ClusterAddress::parse("ballista://127.0.0.1:50050").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 50050));
        assert_eq!(a.url(), "ballista://127.0.0.1:50050");
        let a = ClusterAddress::parse("ballista://[::1]:7/").unwrap();
        assert_eq!(a.host_port(), "[::1]:7");
        for bad in [
            "http://h:1",
            "ballista://h",
            "ballista://:1",
            "ballista://h:x",
        ] {
            let e = ClusterAddress::parse(bad).unwrap_err().to_string();
            assert!(e.contains("ballista://HOST:PORT"), "{bad}: {e}");
        }
    }
}
