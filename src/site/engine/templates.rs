//! Encoder templates: a site's physical plan of an encoder, planned once
//! per layout and bound to each site's file of that layout (see the
//! folder's doc), and the bounded set the engine keeps of them.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::Result;
use crate::protocol::encoder::Encoder;
use crate::site::engine::site_file::{SiteFile, bound_scan};
use crate::site::engine::small_parquet::{FooterCache, SMALL_FILE, SmallParquetExec, SmallScan};
use crate::site::files::file_scan;
use crate::site::release::group_rows::CountColumns;

/// How many encoder templates the engine keeps (the oldest go first).
const MAX_TEMPLATES: usize = 64;

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
pub(crate) struct Templates {
    by_key: HashMap<TemplateKey, Arc<Template>>,
    order: VecDeque<TemplateKey>,
    /// The template last found, by the key it was last asked with.
    last: Option<(TemplateKey, Arc<Template>)>,
}

impl Templates {
    /// The template planned for this layout and encoder, if any.
    pub(crate) fn find(&mut self, key: &TemplateKey) -> Option<Arc<Template>> {
        // The sites of a round share its encoder's plan: after the first,
        // the plan is known by its pointer, not compared again.
        if let Some((last, template)) = &self.last
            && Arc::ptr_eq(&last.encoder, &key.encoder)
            && last.layout == key.layout
        {
            return Some(Arc::clone(template));
        }
        let template = self.by_key.get(key).cloned()?;
        self.last = Some((key.clone(), Arc::clone(&template)));
        Some(template)
    }

    /// Keeps a template, forgetting the oldest past [`MAX_TEMPLATES`].
    pub(crate) fn keep(&mut self, key: TemplateKey, template: Arc<Template>) {
        if self.by_key.insert(key.clone(), template).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > MAX_TEMPLATES {
            if let Some(old) = self.order.pop_front() {
                self.by_key.remove(&old);
            }
        }
    }
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
