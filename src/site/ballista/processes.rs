//! A data owner's Ballista cluster made of `fedsql` processes: a
//! scheduler (`fedsql ballista scheduler`) and executors (`fedsql
//! ballista executor`) that decode plans with fedsql's [`SiteCodec`] and
//! run them with fedsql's functions. Tests start the same processes in
//! their own runtime ([`start_scheduler`], [`start_executor`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::extension::SessionConfigExt;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::protobuf::ExecutorRegistration;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::scheduler::{
    ExecutorOperatingSystemSpecification, ExecutorSpecification,
};
use ballista_core::serde::{BallistaCodec, BallistaLogicalExtensionCodec};
use ballista_core::utils::{GrpcServerConfig, create_grpc_server};
use ballista_core::{BALLISTA_PROTOCOL_VERSION, ConfigProducer, RuntimeProducer};
use ballista_executor::execution_loop;
use ballista_executor::executor::Executor;
use ballista_executor::flight_service::BallistaFlightService;
use ballista_executor::health::ExecutorHealth;
use ballista_executor::metrics::LoggingMetricsCollector;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};

use crate::error::{FedError, Result};

use super::codec::{SiteCodec, site_functions};

/// A scheduler serving in the background of this process.
pub struct RunningScheduler {
    addr: SocketAddr,
    handle: JoinHandle<ballista_core::error::Result<()>>,
}

impl RunningScheduler {
    /// The address it listens on (the port chosen, for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RunningScheduler {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// An executor serving in the background of this process.
pub struct RunningExecutor {
    addr: SocketAddr,
    handles: Vec<JoinHandle<()>>,
}

impl RunningExecutor {
    /// The address it serves shuffle data on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops at once, as if the process died.
    pub fn kill(&self) {
        for handle in &self.handles {
            handle.abort();
        }
    }
}

impl Drop for RunningExecutor {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cannot(what: &str, e: impl std::fmt::Display) -> FedError {
    FedError::InvalidArgument(format!("{what}: {e}"))
}

/// Starts a scheduler listening on `listen` (HOST:PORT).
pub async fn start_scheduler(listen: &str) -> Result<RunningScheduler> {
    start_scheduler_with(listen, None).await
}

/// As [`start_scheduler`]; an executor silent for `executor_timeout`
/// counts as lost and its tasks run elsewhere (Ballista's default, for
/// `None`: 180 s).
pub async fn start_scheduler_with(
    listen: &str,
    executor_timeout: Option<std::time::Duration>,
) -> Result<RunningScheduler> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| cannot(&format!("cannot listen on {listen}"), e))?;
    let addr = listener.local_addr()?;
    let codec: Arc<SiteCodec> = Arc::new(SiteCodec::new());
    let config = SchedulerConfig {
        bind_host: addr.ip().to_string(),
        external_host: addr.ip().to_string(),
        bind_port: addr.port(),
        scheduling_policy: TaskSchedulingPolicy::PullStaged,
        override_session_builder: Some(Arc::new(|config: SessionConfig| {
            Ok(site_functions(config))
        })),
        override_physical_codec: Some(codec),
        ..SchedulerConfig::default()
    };
    let config = match executor_timeout {
        Some(timeout) => SchedulerConfig {
            executor_timeout_seconds: timeout.as_secs().max(1),
            expire_dead_executor_interval_seconds: 1,
            ..config
        },
        None => config,
    };
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| cannot("cannot start the Ballista scheduler", e))?;
    let scheduler =
        create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, Arc::new(config))
            .await
            .map_err(|e| cannot("cannot start the Ballista scheduler", e))?;
    let handle = tokio::spawn(start_grpc_service_with_listener(listener, scheduler));
    Ok(RunningScheduler { addr, handle })
}

/// Starts an executor that takes tasks from the scheduler at `scheduler`
/// (HOST:PORT), serves its shuffle data on `listen` (default
/// 127.0.0.1:0), runs `slots` tasks at once (default: the cores) and
/// writes shuffle files under `work_dir` (default: a fresh temporary folder).
pub async fn start_executor(
    scheduler: &str,
    listen: Option<&str>,
    slots: Option<usize>,
    work_dir: Option<PathBuf>,
) -> Result<RunningExecutor> {
    let client = SchedulerGrpcClient::connect(format!("http://{scheduler}"))
        .await
        .map_err(|e| {
            cannot(
                &format!("the Ballista scheduler at {scheduler} is unreachable"),
                e,
            )
        })?;
    let listen = listen.unwrap_or("127.0.0.1:0");
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| cannot(&format!("cannot listen on {listen}"), e))?;
    let addr = listener.local_addr()?;
    let slots = slots
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1);
    let id = ballista_core::ids::new_instance_id();
    let work_dir = match work_dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("fedsql-ballista-{id}")),
    };
    std::fs::create_dir_all(&work_dir)
        .map_err(|e| cannot(&format!("cannot create {}", work_dir.display()), e))?;
    let work_dir = work_dir.to_string_lossy().into_owned();
    let registration = ExecutorRegistration {
        id,
        host: Some(addr.ip().to_string()),
        port: u32::from(addr.port()),
        grpc_port: 0,
        specification: Some(
            ExecutorSpecification::default()
                .with_vcores(slots as u32)
                .into(),
        ),
        os_info: Some(ExecutorOperatingSystemSpecification::default().into()),
        ballista_protocol_version: BALLISTA_PROTOCOL_VERSION,
    };
    let state = site_functions(SessionConfig::new_with_ballista());
    let config = state.config().clone();
    let runtime = Arc::clone(state.runtime_env());
    let config_producer: ConfigProducer = Arc::new(move || config.clone());
    let runtime_producer: RuntimeProducer = Arc::new(move |_| Ok(Arc::clone(&runtime)));
    let executor = Arc::new(Executor::with_default_execution_engine(
        registration,
        &work_dir,
        runtime_producer,
        config_producer,
        Arc::new(BallistaFunctionRegistry::from(&state)),
        Arc::new(LoggingMetricsCollector::default()),
        slots,
    ));
    let flight = FlightServiceServer::new(BallistaFlightService::new(work_dir));
    let serve = create_grpc_server(&GrpcServerConfig::default())
        .add_service(flight)
        .serve_with_incoming(TcpIncoming::from(listener));
    let codec: BallistaCodec = BallistaCodec::new(
        Arc::new(BallistaLogicalExtensionCodec::default()),
        Arc::new(SiteCodec::new()),
    );
    let poll =
        execution_loop::poll_loop(client, executor, codec, None, None, ExecutorHealth::new());
    let handles = vec![
        tokio::spawn(async move {
            if let Err(e) = serve.await {
                eprintln!("fedsql ballista executor: shuffle service stopped: {e}");
            }
        }),
        tokio::spawn(async move {
            if let Err(e) = poll.await {
                eprintln!("fedsql ballista executor: stopped taking tasks: {e}");
            }
        }),
    ];
    Ok(RunningExecutor { addr, handles })
}

/// `fedsql ballista scheduler --listen LISTEN`: serves until Ctrl-C.
pub(crate) async fn serve_scheduler(listen: &str) -> Result<()> {
    use std::io::Write;
    let scheduler = start_scheduler(listen).await?;
    println!(
        "fedsql ballista scheduler listening on {} (workers: --engine ballista://{})",
        scheduler.addr(),
        scheduler.addr()
    );
    std::io::stdout().flush()?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// `fedsql ballista executor --scheduler ...`: serves until Ctrl-C.
pub(crate) async fn serve_executor(
    scheduler: &str,
    listen: Option<&str>,
    slots: Option<usize>,
    work_dir: Option<PathBuf>,
) -> Result<()> {
    use std::io::Write;
    let executor = start_executor(scheduler, listen, slots, work_dir).await?;
    println!(
        "fedsql ballista executor serving on {} (scheduler {scheduler})",
        executor.addr()
    );
    std::io::stdout().flush()?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}
