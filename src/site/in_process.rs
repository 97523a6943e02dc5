//! An in-process site as its table's OPTIONS describe it: the one way the
//! coordinator makes a site in its own process.
//!
//! In-process sites have no data owner: the disclosure policy and the DP
//! settings are the rehearsal the table's OPTIONS ask for. The rules are
//! those of a worker: DP relies on the policy's checks (no row
//! amplification, no evaluation failure as an oracle), so `dp_budget` or
//! `require_dp` without a policy key bring a worker's default policy, as a
//! worker refuses to run them without one. The coordinator hands over the
//! OPTIONS and, where the session keeps ledgers on disk, the ledger file;
//! it never assembles a policy, DP settings or a ledger itself.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::protocol::site::Site;
use crate::site::engine::{SiteEngine, fast_path_option};
use crate::site::files::ClientFiles;
use crate::site::local::LocalClient;
use crate::site::release::dp::{DpPolicy, DpSite};
use crate::site::release::dp_budget::Ledger;
use crate::site::release::policy::DisclosurePolicy;

/// Where an in-process site's rows are.
pub(crate) enum Rows<'a> {
    /// Local CSV or Parquet files.
    Files(&'a ClientFiles),
    /// Batches in memory (the bundled demo), with the site's name and
    /// where they came from (for `\clients`).
    Batches {
        name: &'a str,
        location: &'a str,
        batches: Vec<RecordBatch>,
    },
}

/// The settings of an in-process site, parsed once per table from its
/// OPTIONS (so that a bad value fails before any site is made).
#[derive(Debug, Clone)]
pub(crate) struct SiteSettings {
    policy: Option<DisclosurePolicy>,
    dp: DpPolicy,
    /// The engine's fast path (`fast_path`, default on).
    fast_path: bool,
}

impl SiteSettings {
    /// The settings `options` (a table's OPTIONS) ask for.
    pub(crate) fn from_options(options: &[(String, String)]) -> Result<Self> {
        let mut policy = DisclosurePolicy::from_options(options)?;
        let dp = DpPolicy::from_options(options)?.unwrap_or_default();
        if policy.is_none() && (dp.budget.is_some() || dp.require_dp || dp.require_secure) {
            policy = Some(DisclosurePolicy::default());
        }
        let fast_path = fast_path_option(options)?;
        Ok(Self {
            policy,
            dp,
            fast_path,
        })
    }

    /// A site over `rows` under these settings, debiting the ledger kept
    /// in `ledger` (a file; `None`: in memory, for this process only).
    pub(crate) fn site(
        &self,
        rows: Rows<'_>,
        schema: SchemaRef,
        ledger: Option<&Path>,
        engine: Arc<SiteEngine>,
    ) -> Result<Arc<dyn Site>> {
        let ledger = match ledger {
            Some(file) => Ledger::open(file)?,
            None => Ledger::in_memory(),
        };
        let client = match rows {
            Rows::Files(files) => LocalClient::from_files(files, schema, engine)?,
            Rows::Batches {
                name,
                location,
                batches,
            } => LocalClient::from_batches(name, location, schema, batches, engine)?,
        };
        Ok(Arc::new(
            client
                .with_fast_path(self.fast_path)
                .with_policy(self.policy.clone())
                .with_dp(Arc::new(DpSite::new(self.dp.clone(), Arc::new(ledger)))),
        ))
    }
}
