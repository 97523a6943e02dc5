//! Cancellable execution at a site: every operator of a plan the site
//! runs hands control back to the runtime between its batches.
//!
//! A request is cancelled by dropping its future (its caller timed out or
//! went away, or it ran past the worker's `request_timeout`); DataFusion's
//! tasks then stop at their next yield point. DataFusion's own cooperative
//! scheduling yields after 128 batches per task poll, which for expensive
//! expressions over local files can be many seconds of CPU — in the task
//! that reads the files and in the tasks that take batches from a
//! repartition's channels alike. Each operator here yields after a batch
//! once [`QUANTUM`] has passed since it last yielded (or started), which
//! bounds that by the work of one batch plus the quantum. A small client's
//! operator, done in microseconds, never pays for a task wake-up; one that
//! reads for seconds yields about every millisecond.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result as DFResult;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::Stream;

/// How long an operator runs between yields, at most (plus one batch).
pub(crate) const QUANTUM: Duration = Duration::from_millis(1);

/// `plan` with every operator wrapped so that it yields after a batch
/// once [`QUANTUM`] has passed.
pub(crate) fn yield_after_each_batch(
    plan: Arc<dyn ExecutionPlan>,
) -> DFResult<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node| {
            if node.downcast_ref::<YieldEachBatchExec>().is_some() {
                return Ok(Transformed::no(node));
            }
            let wrapped: Arc<dyn ExecutionPlan> = Arc::new(YieldEachBatchExec { input: node });
            Ok(Transformed::yes(wrapped))
        })?
        .data)
}

/// Its input, yielding to the runtime after a batch once [`QUANTUM`] has passed.
#[derive(Debug)]
struct YieldEachBatchExec {
    input: Arc<dyn ExecutionPlan>,
}

impl DisplayAs for YieldEachBatchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "YieldEachBatchExec")
    }
}

impl ExecutionPlan for YieldEachBatchExec {
    fn name(&self) -> &str {
        "YieldEachBatchExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DFResult<TreeNodeRecursion>,
    ) -> DFResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DFResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(YieldEachBatchExec {
            input: children.swap_remove(0),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DFResult<SendableRecordBatchStream> {
        Ok(Box::pin(YieldEachBatch {
            inner: self.input.execute(partition, context)?,
            yielding: None,
            since: Instant::now(),
        }))
    }
}

/// The stream of [`YieldEachBatchExec`].
struct YieldEachBatch {
    inner: SendableRecordBatchStream,
    /// After a batch was handed out: tokio's `yield_now`, which lets the
    /// runtime poll its I/O driver (and so see a caller's cancellation)
    /// before this task runs again — a plain self-wake would not.
    yielding: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// When the stream started or last yielded.
    since: Instant,
}

impl Stream for YieldEachBatch {
    type Item = DFResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(yielding) = self.yielding.as_mut() {
            if yielding.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.yielding = None;
            self.since = Instant::now();
        }
        let polled = self.inner.as_mut().poll_next(cx);
        if matches!(polled, Poll::Ready(Some(_))) && self.since.elapsed() >= QUANTUM {
            self.yielding = Some(Box::pin(tokio::task::yield_now()));
        }
        polled
    }
}

impl RecordBatchStream for YieldEachBatch {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}
