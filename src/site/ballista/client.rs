//! The worker's side of a cluster: a site's physical plan sent to the
//! scheduler as one Ballista job (Ballista's physical-plan submission:
//! the scheduler cuts it into stages but plans nothing itself), and the
//! job's output, the site's state batches, read back.
//!
//! The plan is the one the worker would run on its own files, with one
//! change: its partitions' partial states are gathered by a
//! `CoalescePartitionsExec` instead of the site's in-partition-order
//! merge ([`InPartitionOrderExec`]), so that Ballista runs the partial
//! aggregate as one task per file partition, spread over the executors,
//! and the reduce to one state row per group as a last task. Floating
//! sums merged in the order the tasks finish may differ in their last
//! bits from the local run's (1e-12 relative); counts, integers and
//! strings are the same.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result as DFResult;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::Channel;

use ballista_core::client::BallistaClient as ExecutorClient;
use ballista_core::extension::SessionConfigExt;
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use ballista_core::serde::protobuf::{
    CancelJobParams, ExecuteQueryParams, GetJobStatusParams, KeyValuePair, SuccessfulJob,
    execute_query_params::Query, execute_query_result, job_status,
};
use ballista_core::utils::{GrpcClientConfig, create_grpc_client_endpoint};

use crate::site::engine::in_order::InPartitionOrderExec;

use super::codec::SiteCodec;

/// How often a running job's status is asked for: a job takes some
/// hundreds of milliseconds of Ballista's task polling (its executors
/// poll every 50 ms), so this adds at most a few per cent.
const POLL: Duration = Duration::from_millis(10);

/// Where the client logs what it does to a job besides running it (the
/// worker's log; the same type as `site::cluster::JobLog`, which this
/// module may not import: the cluster module imports this one).
type JobLog = Arc<dyn Fn(&str) + Send + Sync>;

/// A worker's connection settings for its cluster (each job connects anew).
pub(crate) struct BallistaClient {
    scheduler_url: String,
    config: SessionConfig,
    codec: SiteCodec,
    session_id: String,
    log: JobLog,
}

impl std::fmt::Debug for BallistaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BallistaClient({})", self.scheduler_url)
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("{what}: {e}"))
}

impl BallistaClient {
    /// The client of the scheduler at `host_port` (HOST:PORT); what it
    /// does to a job besides running it (a cancellation) goes to `log`.
    pub(crate) fn new(host_port: &str, log: JobLog) -> Self {
        Self {
            scheduler_url: format!("http://{host_port}"),
            config: SessionConfig::new_with_ballista(),
            codec: SiteCodec::new(),
            session_id: format!("fedsql-worker-{}", std::process::id()),
            log,
        }
    }

    /// Runs `plan` on the cluster and collects its output.
    ///
    /// The job is submitted and followed here rather than through
    /// Ballista's `execute_physical_plan`, which does not hand the job's
    /// id back: a request that ends before its job (the coordinator gave
    /// up, the worker's `request_timeout`) drops this future, and the
    /// job is cancelled at the scheduler.
    ///
    /// The states fetched count against `memory_limit` (the worker's):
    /// past it, the fetch stops with a resources-exhausted error.
    pub(crate) async fn collect(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        memory_limit: Option<usize>,
    ) -> DFResult<Vec<RecordBatch>> {
        let plan = for_the_cluster(plan)?;
        let node = PhysicalPlanNode::try_from_physical_plan(plan, &self.codec)?;
        let ballista = self.config.ballista_config();
        let grpc = GrpcClientConfig::from(&ballista);
        let max_message = ballista.grpc_client_max_message_size();
        let channel = create_grpc_client_endpoint(self.scheduler_url.clone(), Some(&grpc))
            .map_err(|e| failed("bad scheduler address", e))?
            .connect()
            .await
            .map_err(|e| failed("cannot connect to the scheduler", format!("{e:?}")))?;
        let mut scheduler = SchedulerGrpcClient::new(channel)
            .max_encoding_message_size(max_message)
            .max_decoding_message_size(max_message);
        let settings = self
            .config
            .options()
            .entries()
            .into_iter()
            .map(|entry| KeyValuePair {
                key: entry.key,
                value: entry.value,
            })
            .collect();
        let mut request = tonic::Request::new(ExecuteQueryParams {
            query: Some(Query::PhysicalPlan(node.encode_to_vec())),
            settings,
            session_id: self.session_id.clone(),
            operation_id: uuid::Uuid::now_v7().to_string(),
        });
        ballista_core::version::insert_version_header(request.metadata_mut());
        let submitted = scheduler
            .execute_query(request)
            .await
            .map_err(|e| failed("the scheduler refused the job", e.message()))?;
        ballista_core::version::check_compatibility(
            Some(ballista_core::BALLISTA_VERSION),
            ballista_core::version::version_from_metadata(submitted.metadata()),
        )
        .map_err(|e| failed("the scheduler's version", e))?;
        // The job's id comes back with its submission, so that a request
        // that ends from here on cancels the job.
        let job_id = match submitted.into_inner().result {
            Some(execute_query_result::Result::Success(success)) => success.job_id,
            Some(execute_query_result::Result::Failure(failure)) => {
                return Err(failed(
                    "the scheduler refused the job",
                    format!("{failure:?}"),
                ));
            }
            None => return Err(failed("the scheduler's answer", "no job")),
        };
        let mut job = RunningJob {
            scheduler: scheduler.clone(),
            job_id: job_id.clone(),
            log: Arc::clone(&self.log),
            done: false,
        };
        let done = job.wait().await?;
        let mut batches = Vec::new();
        let mut held = 0usize;
        for location in done.partition_location {
            let layout = location.layout();
            let (Some(executor), Some(partition)) = (location.executor_meta, location.partition_id)
            else {
                return Err(failed(
                    &format!("job {job_id}"),
                    "a result partition without its executor",
                ));
            };
            let mut client = ExecutorClient::try_new(
                &executor.host,
                executor.port as u16,
                max_message,
                false,
                None,
                grpc.io_retries_times,
                grpc.io_retry_wait_time_ms,
                0,
                0,
            )
            .await
            .map_err(|e| failed(&format!("executor {}", executor.id), e))?;
            let stream = client
                .fetch_partition(
                    &executor.id,
                    &partition.into(),
                    location.file_id,
                    layout,
                    true,
                )
                .await
                .map_err(|e| failed(&format!("executor {}", executor.id), e))?;
            let mut stream = stream;
            while let Some(batch) = stream.try_next().await? {
                held += batch.get_array_memory_size();
                if let Some(limit) = memory_limit
                    && held > limit
                {
                    return Err(DataFusionError::ResourcesExhausted(format!(
                        "the states of job {job_id} need more than {limit} bytes at the worker"
                    )));
                }
                batches.push(batch);
            }
        }
        Ok(batches)
    }
}

/// A job submitted to the scheduler; cancelled there if dropped before
/// it ended.
struct RunningJob {
    scheduler: SchedulerGrpcClient<Channel>,
    job_id: String,
    log: JobLog,
    done: bool,
}

impl RunningJob {
    /// Follows the job to its end, asking its status every [`POLL`]: its
    /// result's partitions, or its error.
    async fn wait(&mut self) -> DFResult<SuccessfulJob> {
        loop {
            let status = self
                .scheduler
                .get_job_status(GetJobStatusParams {
                    job_id: self.job_id.clone(),
                })
                .await
                .map_err(|e| failed(&format!("job {}", self.job_id), e.message()))?
                .into_inner();
            match status.status.and_then(|s| s.status) {
                None | Some(job_status::Status::Queued(_) | job_status::Status::Running(_)) => {
                    tokio::time::sleep(POLL).await
                }
                Some(job_status::Status::Failed(failure)) => {
                    self.done = true;
                    return Err(failed(
                        &format!("job {} failed", self.job_id),
                        failure.error,
                    ));
                }
                Some(job_status::Status::Successful(success)) => {
                    self.done = true;
                    return Ok(success);
                }
            }
        }
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let job_id = self.job_id.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut scheduler = self.scheduler.clone();
        let log = Arc::clone(&self.log);
        runtime.spawn(async move {
            let outcome = scheduler
                .cancel_job(CancelJobParams {
                    job_id: job_id.clone(),
                })
                .await;
            match outcome {
                Ok(_) => log(&format!(
                    "fedsql worker: cancelled Ballista job {job_id} (its request ended first)"
                )),
                Err(e) => log(&format!(
                    "fedsql worker: could not cancel Ballista job {job_id}: {}",
                    e.message()
                )),
            }
        });
    }
}

/// `plan` with its in-partition-order merges as Ballista stage boundaries.
fn for_the_cluster(plan: Arc<dyn ExecutionPlan>) -> DFResult<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            if node.downcast_ref::<InPartitionOrderExec>().is_none() {
                return Ok(Transformed::no(node));
            }
            let input = Arc::clone(node.children()[0]);
            let merged: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(input));
            Ok(Transformed::yes(merged))
        })?
        .data)
}
