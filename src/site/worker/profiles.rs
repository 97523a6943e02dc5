//! Analyst profiles: what each analyst (a token's name) may do at this
//! worker, from the `[analysts.NAME]` sections of its TOML, with
//! `[analysts.default]` for anyone without a section of their own.
//!
//! A profile only ever narrows what the worker's policy allows: the
//! tables it may query, the aggregates its requests may run (an allow-list
//! of groups, table functions or aggregates, from the udfs catalogue's
//! [`fedsql_udfs::catalogue::groups`]), columns it may never read, a
//! larger k, a smaller DP budget, DP only, masked only, and manual approval of new
//! requests. A setting that would widen the policy is a start-up error.
//! The checks run at the worker on the plan it received, whatever the
//! coordinator checked; a refusal names the profile and the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};
use fedsql_udfs::catalogue::groups;
use serde::Deserialize;

use crate::error::{FedError, Result};
use crate::site::release::dp::DpPolicy;
use crate::site::release::policy::DisclosurePolicy;

/// The name of the profile of analysts without one of their own.
pub const DEFAULT_PROFILE: &str = "default";

/// One `[analysts.NAME]` section as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileSection {
    tables: Option<Vec<String>>,
    functions: Option<Vec<String>>,
    #[serde(default)]
    deny_columns: Vec<String>,
    min_group_rows: Option<u64>,
    dp_budget: Option<f64>,
    #[serde(default)]
    require_dp: bool,
    #[serde(default)]
    require_secure: bool,
    approval: Option<String>,
}

/// What one analyst (or the default profile) may do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    /// The section's name: the analyst's, or [`DEFAULT_PROFILE`].
    pub name: String,
    /// Tables the analyst may query; `None`: every served table.
    pub tables: Option<BTreeSet<String>>,
    /// The allow-list as written; `None`: every catalogued aggregate.
    pub functions: Option<Vec<String>>,
    /// The aggregates the allow-list admits.
    admitted: Option<BTreeSet<&'static str>>,
    /// Columns never read (compared without case).
    pub deny_columns: BTreeSet<String>,
    /// A k larger than the table's.
    pub min_group_rows: Option<u64>,
    /// This analyst's total ε per table (at most the table's).
    pub dp_budget: Option<f64>,
    /// Only DP aggregates.
    pub require_dp: bool,
    /// Only secure (masked) aggregates, grouped only by declared columns.
    pub require_secure: bool,
    /// New requests wait for the data owner's approval.
    pub manual_approval: bool,
}

/// Every profile of a worker.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    by_name: BTreeMap<String, Arc<Profile>>,
}

/// The policy settings a profile is checked against at start-up.
pub(crate) struct Served<'a> {
    /// Served tables and their policies.
    pub(crate) tables: Vec<(&'a str, Option<DisclosurePolicy>)>,
    /// The worker's DP settings.
    pub(crate) dp: &'a DpPolicy,
    /// Whether the worker keeps a ledger file.
    pub(crate) ledger: bool,
    /// The analysts its tokens name.
    pub(crate) analysts: Vec<&'a str>,
}

impl Profiles {
    /// The profiles of the `[analysts]` sections, checked against what the
    /// worker serves: unknown analysts, tables, functions or columns and
    /// any setting looser than the policy are errors.
    pub(crate) fn from_sections(
        sections: &BTreeMap<String, ProfileSection>,
        served: &Served<'_>,
    ) -> Result<Self> {
        let mut by_name = BTreeMap::new();
        for (name, section) in sections {
            let profile = Profile::from_section(name, section, served)?;
            by_name.insert(name.clone(), Arc::new(profile));
        }
        Ok(Self { by_name })
    }

    /// Whether there are no profiles (the worker's policy alone decides).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The profile of `analyst`: their own, else the default one; `None`
    /// when neither exists.
    pub fn of(&self, analyst: &str) -> Option<&Arc<Profile>> {
        self.by_name
            .get(analyst)
            .or_else(|| self.by_name.get(DEFAULT_PROFILE))
    }

    /// Every profile, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Profile>> {
        self.by_name.values()
    }
}

impl Profile {
    fn from_section(name: &str, section: &ProfileSection, served: &Served<'_>) -> Result<Self> {
        let bad =
            |what: String| FedError::Syntax(format!("worker config: [analysts.{name}] {what}"));
        if name != DEFAULT_PROFILE && !served.analysts.contains(&name) {
            return Err(bad(format!(
                "names no analyst of this worker's tokens ({}): add `{name} = \"FILE\"` to [tokens], or name the section after a token",
                served.analysts.join(", ")
            )));
        }
        let tables = match &section.tables {
            None => None,
            Some(list) => {
                let mut set = BTreeSet::new();
                for table in list {
                    if !served.tables.iter().any(|(t, _)| t == table) {
                        return Err(bad(format!(
                            "tables: this worker serves no table `{table}`"
                        )));
                    }
                    set.insert(table.clone());
                }
                Some(set)
            }
        };
        let admitted = match &section.functions {
            None => None,
            Some(list) => {
                let mut set = BTreeSet::new();
                for function in list {
                    let members = groups::admitted_by(function).ok_or_else(|| {
                        bad(format!(
                            "functions: `{function}` is no group ({}), table function or aggregate fedsql runs at a site",
                            groups::group_names().join(", ")
                        ))
                    })?;
                    set.extend(members);
                }
                Some(set)
            }
        };
        let reachable: Vec<&(&str, Option<DisclosurePolicy>)> = served
            .tables
            .iter()
            .filter(|(t, _)| tables.as_ref().is_none_or(|s| s.contains(*t)))
            .collect();
        if let Some(k) = section.min_group_rows {
            for (table, policy) in &reachable {
                if let Some(policy) = policy
                    && k < policy.min_group_rows
                {
                    return Err(bad(format!(
                        "min_group_rows = {k} is looser than table `{table}`'s policy (min_group_rows = {}): a profile may only be stricter",
                        policy.min_group_rows
                    )));
                }
            }
        }
        if (section.dp_budget.is_some() || section.require_dp || section.require_secure)
            && let Some((table, _)) = reachable.iter().find(|(_, p)| p.is_none())
        {
            return Err(bad(format!(
                "dp_budget, require_dp and require_secure need a disclosure policy, but table `{table}` is served with policy = none"
            )));
        }
        if let Some(budget) = section.dp_budget {
            if !(0.0..=crate::site::release::dp_budget::MAX_EPSILON).contains(&budget) {
                return Err(bad(format!("dp_budget = {budget}: expected a total ε ≥ 0")));
            }
            if let Some(table_budget) = served.dp.budget
                && budget > table_budget
            {
                return Err(bad(format!(
                    "dp_budget = {budget} is looser than the worker's dp_budget = {table_budget}: a profile may only be stricter"
                )));
            }
            if !served.ledger {
                return Err(bad(
                    "dp_budget needs a ledger file that survives restarts: give --dp-ledger FILE (or dp_ledger in [policy])".into(),
                ));
            }
        }
        let manual_approval = match section.approval.as_deref() {
            None | Some("none" | "automatic") => false,
            Some("manual") => true,
            Some(other) => {
                return Err(bad(format!(
                    "approval = \"{other}\": expected \"manual\" or \"none\""
                )));
            }
        };
        Ok(Self {
            name: name.to_string(),
            tables,
            functions: section.functions.clone(),
            admitted,
            deny_columns: section
                .deny_columns
                .iter()
                .map(|c| c.to_ascii_lowercase())
                .collect(),
            min_group_rows: section.min_group_rows,
            dp_budget: section.dp_budget,
            require_dp: section.require_dp,
            require_secure: section.require_secure,
            manual_approval,
        })
    }

    /// Whether the profile needs its own policy or DP settings for a table
    /// (a larger k, a smaller budget, DP only, masked only).
    pub(crate) fn tightens(&self) -> bool {
        self.min_group_rows.is_some()
            || self.dp_budget.is_some()
            || self.require_dp
            || self.require_secure
    }

    /// The table's policy under this profile.
    pub(crate) fn policy(&self, table: Option<DisclosurePolicy>) -> Option<DisclosurePolicy> {
        match (table, self.min_group_rows) {
            (Some(mut policy), Some(k)) => {
                policy.min_group_rows = policy.min_group_rows.max(k);
                Some(policy)
            }
            (None, Some(k)) => Some(DisclosurePolicy {
                min_group_rows: k,
                ..DisclosurePolicy::default()
            }),
            (policy, None) => policy,
        }
    }

    /// The table's DP settings under this profile.
    pub(crate) fn dp(&self, table: &DpPolicy) -> DpPolicy {
        let mut dp = table.clone();
        if let Some(budget) = self.dp_budget {
            dp.budget = Some(dp.budget.map_or(budget, |b| b.min(budget)));
        }
        dp.require_dp |= self.require_dp;
        dp.require_secure |= self.require_secure;
        dp
    }

    /// Refuses an encoder over `table` this profile excludes: a table not
    /// listed, an aggregate not admitted, a denied column read anywhere.
    pub(crate) fn check(&self, table: &str, plan: &LogicalPlan) -> Result<()> {
        let refuse = |rule: &str, what: String, hint: &str| {
            Err(FedError::refused(
                format!("analyst profile `{}` ({rule}): {what}", self.name),
                Some(hint),
            ))
        };
        if let Some(tables) = &self.tables
            && !tables.contains(table)
        {
            return refuse(
                "tables",
                format!("table `{table}` is not among the tables this analyst may query"),
                "ask the data owner to add the table to your profile",
            );
        }
        let mut aggregates = BTreeSet::new();
        let mut denied = None;
        plan.apply(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                for field in scan.projected_schema.fields() {
                    if self.denies(field.name()) {
                        denied.get_or_insert_with(|| field.name().clone());
                    }
                }
            }
            for expr in node.expressions() {
                expr.apply(|e| {
                    match e {
                        Expr::AggregateFunction(f) => {
                            aggregates.insert(f.func.name().to_ascii_lowercase());
                        }
                        Expr::WindowFunction(_) => {
                            aggregates.insert("(window function)".to_string());
                        }
                        Expr::Column(c) if self.denies(&c.name) => {
                            denied.get_or_insert_with(|| c.name.clone());
                        }
                        _ => {}
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(FedError::from)?;
        if let Some(column) = denied {
            return refuse(
                "deny_columns",
                format!(
                    "column `{column}` may not be read by this analyst (not in SELECT, WHERE, GROUP BY, joins or formulas)"
                ),
                "leave the column out of the query",
            );
        }
        if let Some(admitted) = &self.admitted
            && let Some(name) = aggregates.iter().find(|a| !admitted.contains(a.as_str()))
        {
            return refuse(
                "functions",
                format!(
                    "`{name}` is not admitted by this analyst's functions allow-list ({})",
                    self.functions.as_deref().unwrap_or_default().join(", ")
                ),
                "ask the data owner to add the function or its group to your profile",
            );
        }
        Ok(())
    }

    fn denies(&self, column: &str) -> bool {
        !self.deny_columns.is_empty() && self.deny_columns.contains(&column.to_ascii_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served<'a>(dp: &'a DpPolicy) -> Served<'a> {
        Served {
            tables: vec![
                ("clinic", Some(DisclosurePolicy::default())),
                ("open", None),
            ],
            dp,
            ledger: true,
            analysts: vec!["alice", "bob"],
        }
    }

    fn section(text: &str) -> ProfileSection {
        toml::from_str(text).expect("a section")
    }

    #[test]
    fn looser_settings_and_unknown_names_are_start_up_errors() {
        let dp = DpPolicy {
            budget: Some(2.0),
            ..DpPolicy::default()
        };
        let served = served(&dp);
        let error = |text: &str, name: &str| {
            Profile::from_section(name, &section(text), &served)
                .unwrap_err()
                .to_string()
        };
        assert!(error("min_group_rows = 3", "alice").contains("looser"));
        assert!(error("dp_budget = 3\ntables = [\"clinic\"]", "alice").contains("looser"));
        assert!(error("functions = [\"nope\"]", "alice").contains("`nope` is no group"));
        assert!(error("tables = [\"x\"]", "alice").contains("no table `x`"));
        assert!(error("", "carol").contains("names no analyst"));
        assert!(error("require_dp = true", "alice").contains("policy = none"));
        assert!(error("require_secure = true", "alice").contains("policy = none"));
        assert!(error("approval = \"maybe\"", "alice").contains("approval"));
        let ok = Profile::from_section(
            "default",
            &section(
                "min_group_rows = 10\ntables = [\"clinic\"]\ndp_budget = 1\nrequire_dp = true",
            ),
            &served,
        )
        .unwrap();
        assert!(ok.tightens());
        assert_eq!(
            ok.policy(Some(DisclosurePolicy::default()))
                .unwrap()
                .min_group_rows,
            10
        );
        assert_eq!(ok.dp(&dp).budget, Some(1.0));
        assert!(ok.dp(&dp).require_dp);
        assert!(!ok.dp(&dp).require_secure);
        let masked = Profile::from_section(
            "default",
            &section("tables = [\"clinic\"]\nrequire_secure = true"),
            &served,
        )
        .unwrap();
        assert!(masked.tightens());
        assert!(masked.dp(&dp).require_secure);
        assert!(!masked.dp(&dp).require_dp);
    }
}
