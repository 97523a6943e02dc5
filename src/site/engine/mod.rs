//! The engine a set of sites share: one DataFusion session (one runtime,
//! one memory pool, one cache of file listings and Parquet footers) and
//! the physical plans of the encoders they have run.
//!
//! Whoever makes sites owns their engine and hands it to each
//! ([`crate::site::local::LocalClient::from_files`]): a coordinator one
//! per context, a worker one per running worker. A test or an embedder
//! makes its own with [`SiteEngine::new`]; there is no process-wide one.
//!
//! A thousand in-process clients must cost little more than eight, so the
//! work of a round at a site must not grow with the plan. A site plans an
//! encoder physically once, as a *template* for its layout (format, CSV
//! options, schema, policy); every site of that layout, in this round and
//! the next, instantiates the template for its own data: its file, stated
//! afresh each round (size and modification time, so a file that changed is
//! read anew and its cached footer dropped), bound into the template's scan.
//! The template is the site's own plan of the validated encoder the
//! coordinator sent; nothing of it crosses the wire.
//!
//! The fast path — templates, a small Parquet file read by the site
//! ([`SmallParquetExec`]) with its footer and bytes cached
//! ([`FooterCache`]), the rows of a fit kept between its rounds
//! ([`crate::site::engine::kept_rows`]) and read by row group — can be switched off
//! per table (`OPTIONS ('fast_path' 'off')`) or per worker (`--fast-path
//! off`, TOML `fast_path = "off"`): each encoder is then planned from its
//! logical plan over DataFusion's own `ListingTable` scan and run as
//! DataFusion runs it, every round. The answers are the same either way
//! (the consistency suite runs in both modes); only the time differs.
//! What a site checks and releases does not depend on the switch.
//!
//! Memory: every site draws on the one shared pool; a request under a
//! memory limit draws on a child pool of its own, which refuses past its
//! limit whatever the shared pool has left.

pub(crate) mod in_order;
pub(crate) mod kept_rows;
pub(crate) mod small_parquet;
pub(crate) mod yielding;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Statistics};
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::object_store::ObjectMeta;
use datafusion::object_store::path::Path as StorePath;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::Result;
use crate::protocol::encoder::Encoder;
use crate::site::engine::small_parquet::{FooterCache, SMALL_FILE, SmallParquetExec, SmallScan};
use crate::site::files::file_scan;
use crate::site::release::group_rows::CountColumns;

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

/// How many encoder templates the engine keeps (the oldest go first).
const MAX_TEMPLATES: usize = 64;

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
        let session = crate::site::engine::site_session();
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
        let mut templates = self.templates.lock().expect("not poisoned");
        // The sites of a round share its encoder's plan: after the first,
        // the plan is known by its pointer, not compared again.
        if let Some((last, template)) = &templates.last
            && Arc::ptr_eq(&last.encoder, &key.encoder)
            && last.layout == key.layout
        {
            return Some(Arc::clone(template));
        }
        let template = templates.by_key.get(key).cloned()?;
        templates.last = Some((key.clone(), Arc::clone(&template)));
        Some(template)
    }

    /// Keeps a template for the sites of its layout.
    pub fn keep_template(&self, key: TemplateKey, template: Arc<Template>) {
        let mut templates = self.templates.lock().expect("not poisoned");
        if templates.by_key.insert(key.clone(), template).is_none() {
            templates.order.push_back(key);
        }
        while templates.order.len() > MAX_TEMPLATES {
            if let Some(old) = templates.order.pop_front() {
                templates.by_key.remove(&old);
            }
        }
    }
}

/// What a template is planned for: the layout of a site's rows and the
/// encoder as the site received it. Hashed by the encoder's fingerprint
/// (computed once per round, not once per site); equal only when the
/// plans are equal.
#[derive(Debug, Clone)]
pub struct TemplateKey {
    layout: Arc<str>,
    encoder: Arc<LogicalPlan>,
    fingerprint: u64,
}

impl TemplateKey {
    /// The key of `encoder` at a site of `layout`.
    pub fn new(layout: Arc<str>, encoder: &Encoder) -> Self {
        Self {
            layout,
            encoder: Arc::clone(encoder.shared_plan()),
            fingerprint: encoder.fingerprint(),
        }
    }
}

impl PartialEq for TemplateKey {
    fn eq(&self, other: &Self) -> bool {
        // `Arc`'s equality compares the pointers first.
        self.fingerprint == other.fingerprint
            && self.layout == other.layout
            && self.encoder == other.encoder
    }
}

impl Eq for TemplateKey {}

impl Hash for TemplateKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.layout.hash(state);
        self.fingerprint.hash(state);
    }
}

#[derive(Default)]
struct Templates {
    by_key: HashMap<TemplateKey, Arc<Template>>,
    order: VecDeque<TemplateKey>,
    /// The template last found, by the key it was last asked with.
    last: Option<(TemplateKey, Arc<Template>)>,
}

/// A site's physical plan of an encoder with one file scan, ready to be
/// bound to another site's file of the same layout.
#[derive(Debug)]
pub struct Template {
    plan: Arc<dyn ExecutionPlan>,
    counts: Option<CountColumns>,
    /// How a site reads a small file itself, when the scan allows.
    small: Option<SmallScan>,
}

impl Template {
    /// `plan` as a template, when it reads exactly one file through one
    /// file scan in one piece (in one partition, no byte ranges, no
    /// declared ordering): otherwise each site plans for itself. Shared
    /// rows in memory (a subquery's result) are part of the key, and stay.
    pub fn of(
        plan: Arc<dyn ExecutionPlan>,
        counts: Option<CountColumns>,
        batch_size: usize,
    ) -> Option<Self> {
        let mut scans = 0;
        let mut simple = true;
        let mut small = None;
        let _ = plan.apply(|node| {
            // A join (or union) may share state with its scans (a dynamic
            // filter): such plans are planned site by site.
            simple &= node.children().len() <= 1;
            if let Some(config) = file_scan(node) {
                scans += 1;
                let files: Vec<&PartitionedFile> =
                    config.file_groups.iter().flat_map(|g| g.iter()).collect();
                simple &= config.file_groups.len() == 1
                    && files.len() == 1
                    && files[0].range.is_none()
                    && files[0].partition_values.is_empty()
                    && config.output_ordering.is_empty()
                    && config.table_partition_cols().is_empty();
                small = SmallScan::of(config, batch_size);
            }
            Ok(TreeNodeRecursion::Continue)
        });
        // A dynamic filter is shared between an operator and its scan:
        // bound anew per site it would not be, so such plans are not
        // templates.
        let text = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        simple &= !text.contains("DynamicFilter");
        (scans == 1 && simple).then_some(Self {
            plan,
            counts,
            small,
        })
    }

    /// The template bound to one site's file: its scan reads `file` as it
    /// is now (a fresh `stat`), and every operator above is a new one. A
    /// small Parquet file is read by the site ([`SmallParquetExec`]) when the
    /// template's scan allows.
    pub fn instantiate(
        &self,
        file: &SiteFile,
        footers: &Arc<FooterCache>,
    ) -> Result<(Arc<dyn ExecutionPlan>, Option<CountColumns>)> {
        // A file the site may read itself is opened now (or found among
        // the small files the cache keeps whole): its `stat` is that of
        // the bytes the scan reads.
        let (meta, opened) = match &self.small {
            Some(_) => {
                let opened = footers.open(&file.path)?;
                (file.meta(opened.size(), opened.modified()), Some(opened))
            }
            None => (file.stat()?, None),
        };
        let mut opened = opened.filter(|o| o.size() <= SMALL_FILE);
        let small = self.small.as_ref().filter(|_| opened.is_some());
        let plan = Arc::clone(&self.plan)
            .transform_up(|node| {
                let Some(config) = file_scan(&node) else {
                    return Ok(Transformed::no(node));
                };
                let scan: Arc<dyn ExecutionPlan> = match small {
                    // The template scan's properties, the same `Arc`: the
                    // operators above keep theirs instead of computing them
                    // again (DataFusion compares the pointers).
                    Some(small) => Arc::new(SmallParquetExec::new(
                        &file.path,
                        opened.take(),
                        small.clone(),
                        Arc::clone(footers),
                        (Arc::clone(&node), meta.clone()),
                        Arc::clone(node.properties()),
                    )),
                    None => bound_scan(config, &meta),
                };
                Ok(Transformed::yes(scan))
            })?
            .data;
        Ok((plan, self.counts.clone()))
    }
}

/// A template's file scan bound to a site's file as `meta` describes it
/// (a template's scan reads exactly one file).
pub fn bound_scan(config: &FileScanConfig, meta: &ObjectMeta) -> Arc<dyn ExecutionPlan> {
    let files = config.file_groups.iter().flat_map(|g| g.iter());
    let bound: Vec<PartitionedFile> = files
        .map(|template_file| {
            let mut bound = template_file.clone();
            bound.object_meta = meta.clone();
            bound.statistics = None;
            bound.metadata_size_hint = None;
            bound
        })
        .collect();
    let schema = config.file_schema().clone();
    let config = FileScanConfigBuilder::from(config.clone())
        .with_file_groups(vec![FileGroup::new(bound)])
        .with_statistics(Statistics::new_unknown(&schema))
        .build();
    DataSourceExec::from_data_source(config)
}

/// Whether a plan reads no table but its federated one: a shared table's
/// scan does not show its rows in the plan, so a cache keyed by the plan
/// could not tell two of them apart.
pub fn reads_one_table(plan: &LogicalPlan) -> bool {
    let mut scans = 0;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(_) = node {
            scans += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    scans == 1
}

/// A site's one file: where it is, and how its scans name it.
#[derive(Debug, Clone)]
pub struct SiteFile {
    path: PathBuf,
    location: StorePath,
}

impl SiteFile {
    /// The file at `path`, named as a listing of it names it.
    pub fn new(path: &Path) -> Result<Self> {
        let url = ListingTableUrl::parse(path.to_string_lossy())?;
        Ok(Self {
            path: path.to_path_buf(),
            location: url.prefix().clone(),
        })
    }

    /// How a scan of the file names it.
    pub(crate) fn location(&self) -> &StorePath {
        &self.location
    }

    /// The file's metadata as it is now: its size and modification time
    /// key every cache of its listing and footer.
    fn stat(&self) -> Result<ObjectMeta> {
        let unreadable = |e: std::io::Error| {
            DataFusionError::External(format!("cannot read {}: {e}", self.path.display()).into())
        };
        let meta = std::fs::metadata(&self.path).map_err(unreadable)?;
        Ok(self.meta(meta.len(), Some(meta.modified().map_err(unreadable)?)))
    }

    /// The file's metadata from its length and modification time.
    fn meta(&self, size: u64, modified: Option<SystemTime>) -> ObjectMeta {
        ObjectMeta {
            location: self.location.clone(),
            last_modified: modified.unwrap_or(SystemTime::UNIX_EPOCH).into(),
            size,
            e_tag: None,
            version: None,
        }
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
