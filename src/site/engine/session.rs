//! The session a set of sites share ([`SiteEngine`]): one DataFusion
//! session state, one memory pool with a child pool per limited request,
//! the cache of small Parquet footers, and the encoder templates; and the
//! fast-path switch that decides whether sites use the templates at all.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::common::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::Result;
use crate::site::engine::small_parquet::FooterCache;
use crate::site::engine::templates::{Template, TemplateKey, Templates};

/// The table option and worker setting that switches the fast path.
pub const FAST_PATH_KEY: &str = "fast_path";

/// Whether a `fast_path` setting turns the fast path on.
pub fn parse_fast_path(value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(crate::error::FedError::InvalidArgument(format!(
            "{FAST_PATH_KEY} '{value}': expected 'on' or 'off'"
        ))),
    }
}

/// Whether a table's OPTIONS leave the fast path on (the default).
pub fn fast_path_option(options: &[(String, String)]) -> Result<bool> {
    options
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case(FAST_PATH_KEY))
        .try_fold(true, |_, (_, value)| parse_fast_path(value))
}

/// One session, one memory pool and the encoder templates of all sites.
pub struct SiteEngine {
    state: SessionState,
    /// The task context of a request without a memory limit (built once:
    /// building one copies every function registry).
    task_ctx: Arc<TaskContext>,
    templates: Mutex<Templates>,
    /// The parsed footers of the small Parquet files sites read themselves.
    footers: Arc<FooterCache>,
    /// Sites reading the rows a fit keeps, at most one per core at once
    /// (see [`SiteEngine::keeping`]).
    keeping: tokio::sync::Semaphore,
}

impl fmt::Debug for SiteEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SiteEngine")
    }
}

impl Default for SiteEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl SiteEngine {
    /// A new engine: its own session, memory pool, caches and templates.
    /// The sites that share one share all of these.
    pub fn new() -> Self {
        let session = site_session();
        let state = session.state();
        let task_ctx = Arc::new(TaskContext::from(&state));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            state,
            task_ctx,
            templates: Mutex::default(),
            footers: Arc::default(),
            keeping: tokio::sync::Semaphore::new(cores),
        }
    }

    /// Leave for a site to read the rows a fit keeps. The rows stay in
    /// memory for the whole fit; while they are read, each of the scan's
    /// streams also holds a row group's column chunks (88 MB for a million
    /// rows of 11 doubles), and those buffers set a fit's peak. The sites
    /// of this engine read one per core at once, each with all its
    /// streams. Measured on 2 cores (`fedsql-bench --fits`, 8 clients of
    /// 10M rows in all, two alternated runs each): a fit's peak fell from
    /// 1.69–1.75x the decoded columns to 1.55–1.58x with the start as fast
    /// as before; one stream per core in all gave 1.50–1.52x but a start a
    /// quarter slower (a stream waiting on a read leaves its core idle).
    pub async fn keeping(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.keeping
            .acquire()
            .await
            .expect("the engine's semaphore is never closed")
    }

    /// The session state sites plan with.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The parsed footers of the small Parquet files sites read themselves.
    pub fn footers(&self) -> &Arc<FooterCache> {
        &self.footers
    }

    /// The task context of one request: under a memory limit, with a
    /// child pool of its own under the shared one (nothing spilled).
    pub fn task_ctx(&self, limit: Option<usize>) -> Result<Arc<TaskContext>> {
        let Some(limit) = limit else {
            return Ok(Arc::clone(&self.task_ctx));
        };
        let shared = self.state.runtime_env();
        let pool = ChildPool {
            parent: Arc::clone(&shared.memory_pool),
            limit,
            used: AtomicUsize::new(0),
        };
        let runtime = RuntimeEnvBuilder::from_runtime_env(shared)
            .with_memory_pool(Arc::new(pool))
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
            )
            .build_arc()?;
        Ok(Arc::new(
            TaskContext::from(&self.state).with_runtime(runtime),
        ))
    }

    /// The template planned for this layout and encoder, if any.
    pub fn template(&self, key: &TemplateKey) -> Option<Arc<Template>> {
        self.templates.lock().expect("not poisoned").find(key)
    }

    /// Keeps a template for the sites of its layout.
    pub fn keep_template(&self, key: TemplateKey, template: Arc<Template>) {
        self.templates
            .lock()
            .expect("not poisoned")
            .keep(key, template);
    }
}

/// A memory pool of one request under the shared pool: it counts what the
/// request holds and refuses past its own limit.
#[derive(Debug)]
struct ChildPool {
    parent: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl MemoryPool for ChildPool {
    fn name(&self) -> &str {
        "site-request"
    }

    fn register(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.parent.register(consumer);
    }

    fn unregister(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.parent.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.parent.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.parent.shrink(reservation, shrink);
    }

    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
    ) -> datafusion::error::Result<()> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                let new = used + additional;
                (new <= self.limit).then_some(new)
            })
            .map_err(|used| {
                DataFusionError::ResourcesExhausted(format!(
                    "Failed to allocate additional {additional} bytes for {} with {} bytes already allocated for this reservation - {} bytes remain available for the request",
                    reservation.consumer().name(),
                    reservation.size(),
                    self.limit.saturating_sub(used)
                ))
            })?;
        if let Err(e) = self.parent.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

impl fmt::Display for ChildPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "site-request(used: {}, limit: {})",
            self.used.load(Ordering::Relaxed),
            self.limit
        )
    }
}

/// Physical optimizer rules that must not run where a plan is split: the
/// first answers `count(*)` from file metadata (so a client would not run
/// it), the second fuses the partial and final aggregates into one.
const SPLIT_BREAKING_RULES: &[&str] = &["aggregate_statistics", "CombinePartialFinalAggregate"];

/// A session for running encoders at a site.
pub fn site_session() -> SessionContext {
    let rules = PhysicalOptimizer::new()
        .rules
        .into_iter()
        .filter(|r| !SPLIT_BREAKING_RULES.contains(&r.name()))
        .collect();
    let config = SessionConfig::new()
        // Never emit per-row "states" (raw values) from the partial stage.
        .set_str(
            "datafusion.execution.skip_partial_aggregation_probe_ratio_threshold",
            "1.0",
        )
        // Each partition reads its own byte ranges of the files, never a
        // sibling's taken at run time: which partition adds which rows
        // then depends on the files alone, and a state merged in partition
        // order has the same bits every run (see `site::engine::in_order`).
        .set_bool(
            "datafusion.execution.enable_file_stream_work_stealing",
            false,
        );
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_physical_optimizer_rules(rules)
        .build();
    SessionContext::new_with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::{MemoryConsumer, UnboundedMemoryPool};

    #[test]
    fn the_fast_path_is_on_unless_a_table_turns_it_off() {
        let options = |v: &str| vec![("Fast_Path".to_string(), v.to_string())];
        assert!(fast_path_option(&[]).unwrap());
        assert!(fast_path_option(&options("on")).unwrap());
        assert!(!fast_path_option(&options("OFF")).unwrap());
        let e = fast_path_option(&options("fast")).unwrap_err().to_string();
        assert!(e.contains("expected 'on' or 'off'"), "{e}");
    }

    #[tokio::test]
    async fn sites_keep_rows_one_per_core_at_once() {
        let engine = SiteEngine::new();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut reading = Vec::new();
        for _ in 0..cores {
            reading.push(engine.keeping().await);
        }
        let wait = std::time::Duration::from_millis(50);
        // One more site waits until one of them is done.
        assert!(tokio::time::timeout(wait, engine.keeping()).await.is_err());
        reading.pop();
        assert!(tokio::time::timeout(wait, engine.keeping()).await.is_ok());
    }

    #[test]
    fn a_child_pool_refuses_past_its_limit_and_counts_in_the_parent() {
        let parent: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let child: Arc<dyn MemoryPool> = Arc::new(ChildPool {
            parent: Arc::clone(&parent),
            limit: 100,
            used: AtomicUsize::new(0),
        });
        let r = MemoryConsumer::new("r").register(&child);
        r.try_grow(60).unwrap();
        assert_eq!(parent.reserved(), 60);
        let e = r.try_grow(60).unwrap_err();
        assert!(matches!(e, DataFusionError::ResourcesExhausted(_)), "{e}");
        assert_eq!(child.reserved(), 60);
        r.shrink(60);
        assert_eq!(parent.reserved(), 0);
        assert_eq!(child.reserved(), 0);
    }
}
