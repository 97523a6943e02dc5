//! What a worker's admin page shows of its service: each table's policy,
//! DP settings and approval rule, the analysts and their profiles, each
//! analyst's DP budget per table, and the files of its audit trail and
//! approvals — read when asked, never kept.

use std::path::PathBuf;
use std::sync::Arc;

use super::calls::WorkerService;
use crate::protocol::site::{Analyst, BudgetLine};
use crate::site::worker::config::ALL_TABLES;
use crate::site::worker::profiles::Profile;

/// One served table, as the admin page shows it.
#[derive(Debug, Clone)]
pub(crate) struct TableView {
    pub(crate) name: String,
    pub(crate) policy: String,
    pub(crate) dp: String,
    pub(crate) manual_approval: bool,
}

/// One analyst's spending at one table.
#[derive(Debug, Clone)]
pub(crate) struct BudgetView {
    pub(crate) analyst: String,
    pub(crate) table: String,
    pub(crate) line: BudgetLine,
}

/// Everything the admin page shows but the audit records and approvals.
#[derive(Debug, Clone)]
pub(crate) struct Overview {
    pub(crate) tables: Vec<TableView>,
    /// Each analyst and the profile that applies to them (None: the policy alone).
    pub(crate) analysts: Vec<(String, Option<Arc<Profile>>)>,
    pub(crate) budgets: Vec<BudgetView>,
    pub(crate) audit: Option<PathBuf>,
    pub(crate) approvals: Option<PathBuf>,
}

impl WorkerService {
    /// The service as the admin page shows it, now.
    pub(crate) fn overview(&self) -> Overview {
        let tables = self
            .tables
            .values()
            .map(|t| {
                let dp = t.dp.policy();
                TableView {
                    name: t.name.clone(),
                    policy: t.policy_text(),
                    dp: format!(
                        "budget {} per analyst, at most {} per query{}{}",
                        dp.budget
                            .map_or_else(|| "unlimited".to_string(), |b| b.to_string()),
                        dp.max_epsilon,
                        if dp.require_dp { ", DP only" } else { "" },
                        if dp.require_secure {
                            ", masked only"
                        } else {
                            ""
                        }
                    ),
                    manual_approval: self.approval_tables.contains(&t.name)
                        || self.approval_tables.contains(ALL_TABLES),
                }
            })
            .collect();
        let names = self.tokens.names();
        let mut budgets = Vec::new();
        for name in &names {
            let analyst = Analyst::named(name);
            for (table, served) in self.tables_of(&analyst).iter() {
                budgets.push(BudgetView {
                    analyst: name.clone(),
                    table: table.clone(),
                    line: served.dp.budget_line(table, name),
                });
            }
        }
        Overview {
            tables,
            analysts: names
                .iter()
                .map(|n| (n.clone(), self.profiles.of(n).cloned()))
                .collect(),
            budgets,
            audit: self.audit.as_ref().map(|a| a.path().to_path_buf()),
            approvals: self.approvals.as_ref().map(|a| a.path().to_path_buf()),
        }
    }

    /// The worker's metrics.
    pub(crate) fn metrics(&self) -> &crate::site::worker::metrics::Metrics {
        &self.metrics
    }
}
