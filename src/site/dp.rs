//! Differential privacy at the site: the data owner's DP settings, the
//! noise it adds to its own state before the state leaves, and the budget
//! it debits (see [`crate::site::dp_budget`]).
//!
//! The DP aggregates' accumulators keep exact integer state; a site runs
//! them like any aggregate, and then, on the one state batch it is about
//! to release ([`DpSite::release`]):
//! 1. keeps only the groups of declared public keys, and adds an empty
//!    state for every declared key it does not hold (which groups exist is
//!    itself a disclosure);
//! 2. debits the query's ε (the sum over its DP calls: sequential
//!    composition; disjoint groups compose in parallel) to the analyst's
//!    ledger for the table, or refuses, naming what is left;
//! 3. adds exact discrete Laplace noise, from a ChaCha20 generator seeded
//!    by the operating system, once to every value of every DP state
//!    column of every row.
//!
//! The analyst is the worker's token name ([`as_analyst`]); an in-process
//! client's ledger is its session's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::error::{FedError, Result};
use crate::site::dp_budget::Ledger;
use crate::wire::dp::{DpCall, dp_calls, top_aggregate};

tokio::task_local! {
    static ANALYST: String;
}

/// The analyst an in-process client's ledger is kept for.
pub const SESSION_ANALYST: &str = "session";

/// Runs `work` on behalf of `analyst` (a worker's token name): the DP
/// ledger debits that analyst.
pub async fn as_analyst<F: std::future::Future>(analyst: &str, work: F) -> F::Output {
    ANALYST.scope(analyst.to_string(), work).await
}

/// The analyst the current request runs for.
pub fn current_analyst() -> String {
    ANALYST
        .try_with(Clone::clone)
        .unwrap_or_else(|_| SESSION_ANALYST.to_string())
}

/// The DP settings of a table at a site (beside its disclosure policy).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DpPolicy {
    /// Total ε per analyst and table; `None`: unlimited (spending is still
    /// recorded).
    pub budget: Option<f64>,
    /// Answer only DP aggregates.
    pub require_dp: bool,
    /// Columns whose values are public, with their values: DP queries may
    /// group by them.
    pub domains: BTreeMap<String, Vec<String>>,
}

/// The setting keys (`OPTIONS`, the worker's `[policy]`); a domain is
/// `dp_domain.<column>` = comma-separated values.
pub const DP_KEYS: &[&str] = &["dp_budget", "require_dp", "dp_domain.<column>"];

/// The DP settings of table OPTIONS (besides `dp_domain.<column>`).
pub const DP_OPTION_KEYS: &[&str] = &["dp_budget", "require_dp"];

impl DpPolicy {
    /// Whether `key` is a DP setting.
    pub fn is_key(key: &str) -> bool {
        matches!(key, "dp_budget" | "require_dp") || key.starts_with("dp_domain.")
    }

    /// Changes one setting.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |what: &str| FedError::InvalidArgument(format!("policy {key}={value}: {what}"));
        match key {
            "dp_budget" => {
                self.budget = Some(
                    value
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|b| *b >= 0.0 && b.is_finite())
                        .ok_or_else(|| bad("expected a total ε ≥ 0"))?,
                )
            }
            "require_dp" => {
                self.require_dp = match value.trim().to_ascii_lowercase().as_str() {
                    "true" | "yes" | "on" => true,
                    "false" | "no" | "off" => false,
                    _ => return Err(bad("use true or false")),
                }
            }
            _ => match key.strip_prefix("dp_domain.") {
                Some(column) if !column.is_empty() => {
                    let values: Vec<String> = value
                        .split(',')
                        .map(|v| v.trim().to_string())
                        .filter(|v| !v.is_empty())
                        .collect();
                    if values.is_empty() {
                        return Err(bad(
                            "list the column's public values, e.g. 'east,north,south,west'",
                        ));
                    }
                    self.domains.insert(column.to_string(), values);
                }
                _ => {
                    return Err(FedError::UnknownObject(format!(
                        "unknown DP setting `{key}`; the settings are {}",
                        DP_KEYS.join(", ")
                    )));
                }
            },
        }
        Ok(())
    }

    /// The DP settings `OPTIONS` give, if they give any.
    pub fn from_options(options: &[(String, String)]) -> Result<Option<Self>> {
        let mut policy = None;
        for (key, value) in options {
            // Unquoted SQL names are lower case: so are the keys.
            let key = key.to_ascii_lowercase();
            if Self::is_key(&key) {
                policy
                    .get_or_insert_with(DpPolicy::default)
                    .set(&key, value)?;
            }
        }
        Ok(policy)
    }
}

impl std::fmt::Display for DpPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.budget {
            Some(b) => write!(f, "dp_budget={b}")?,
            None => write!(f, "dp_budget=unlimited")?,
        }
        write!(f, ", require_dp={}", self.require_dp)?;
        for (column, values) in &self.domains {
            write!(f, ", dp_domain.{column}={}", values.join("|"))?;
        }
        Ok(())
    }
}

/// What `SHOW PRIVACY BUDGET` shows for one client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetLine {
    pub budget: Option<f64>,
    pub spent: f64,
}

/// A site's DP settings and its ledger.
#[derive(Debug, Default)]
pub struct DpSite {
    policy: DpPolicy,
    /// Shared by the tables of one worker (one ledger file).
    ledger: Arc<Ledger>,
    /// A seeded generator, only ever set by tests through
    /// [`DpSite::seeded_for_tests`]; `None`: a fresh ChaCha20 seeded by the
    /// operating system for every release.
    test_rng: Option<std::sync::Mutex<ChaCha20Rng>>,
}

impl DpSite {
    /// A site with these settings and ledger.
    pub fn new(policy: DpPolicy, ledger: Arc<Ledger>) -> Self {
        Self {
            policy,
            ledger,
            test_rng: None,
        }
    }

    /// The same, drawing its noise from a seeded generator: for
    /// reproducible statistical tests only. Nothing in the worker, the
    /// REPL or `CREATE FEDERATED TABLE` can reach this.
    #[doc(hidden)]
    pub fn seeded_for_tests(policy: DpPolicy, ledger: Arc<Ledger>, seed: u64) -> Self {
        Self {
            test_rng: Some(std::sync::Mutex::new(ChaCha20Rng::seed_from_u64(seed))),
            ..Self::new(policy, ledger)
        }
    }

    /// The settings.
    pub fn policy(&self) -> &DpPolicy {
        &self.policy
    }

    /// The current analyst's budget line for `table`.
    pub fn budget_line(&self, table: &str) -> BudgetLine {
        BudgetLine {
            budget: self.policy.budget,
            spent: self.ledger.spent(&current_analyst(), table),
        }
    }

    /// Refuses, before anything runs, an encoder this site does not answer
    /// under DP: exact aggregates under `require_dp`, and DP aggregates
    /// grouped by anything but declared public columns.
    pub fn check_encoder(&self, client: &str, plan: &LogicalPlan) -> Result<()> {
        let LogicalPlan::Aggregate(agg) = plan else {
            return Ok(());
        };
        let mut dp = 0;
        let mut distinct = false;
        let mut exact: Vec<&str> = Vec::new();
        for expr in &agg.aggr_expr {
            // An aggregate's arguments hold no aggregate, so the walk stops
            // at each one rather than visiting its argument expressions.
            let _ = expr.apply(|e| {
                let Expr::AggregateFunction(f) = e else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                if fedsql_udfs::catalogue::is_dp(f.func.name()) {
                    dp += 1;
                    distinct |= f.params.distinct;
                } else {
                    exact.push(f.func.name());
                }
                Ok(TreeNodeRecursion::Jump)
            });
        }
        let refuse = |rule: String, hint: &str| FedError::Policy {
            client: client.to_string(),
            rule,
            hint: Some(hint.to_string()),
        };
        if self.policy.require_dp && (!exact.is_empty() || dp == 0) {
            let what = if exact.is_empty() {
                "rows grouped without an aggregate".to_string()
            } else {
                format!("exact `{}`", exact.join("`, `"))
            };
            return Err(refuse(
                format!(
                    "it answers only differentially private aggregates (its require_dp policy), not {what}"
                ),
                "use dp_count, dp_sum, dp_avg, dp_var or dp_histogram",
            ));
        }
        if distinct {
            return Err(refuse(
                "a DP aggregate over DISTINCT values: its sensitivity is not one row's".into(),
                "drop DISTINCT, or count distinct values by grouping on a declared column",
            ));
        }
        if dp == 0 || agg.group_expr.is_empty() {
            return Ok(());
        }
        if !exact.is_empty() {
            return Err(refuse(
                format!(
                    "a grouped DP query may not mix in exact aggregates (`{}`): their groups would show which keys it holds",
                    exact.join("`, `")
                ),
                "use DP aggregates only, or run the exact ones in a separate query",
            ));
        }
        let domain_hint = format!(
            "group by columns whose values the data owner declares public ({}), e.g. OPTIONS ('dp_domain.region' 'east,north,south,west') or dp_domain.region in the worker's [policy]; or drop GROUP BY",
            if self.policy.domains.is_empty() {
                "none are declared here".to_string()
            } else {
                self.policy
                    .domains
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let own_name = bound_client_name(plan);
        for expr in group_columns(&agg.group_expr) {
            match expr {
                Some(name) if self.policy.domains.contains_key(&name) => {}
                // `_client` is public: the analyst named the clients, and
                // here it is the constant the coordinator bound.
                Some(name) if name == CLIENT_COLUMN && own_name.is_some() => {}
                Some(name) => {
                    return Err(refuse(
                        format!(
                            "DP groups by `{name}`, whose values are not declared public: which groups exist would be disclosed"
                        ),
                        &domain_hint,
                    ));
                }
                None => {
                    return Err(refuse(
                        "DP groups by an expression or grouping sets; only plain columns with declared public values are allowed".into(),
                        &domain_hint,
                    ));
                }
            }
        }
        Ok(())
    }

    /// The state batches as they may leave: declared keys completed, the
    /// query's ε debited, noise added (see the module docs). `plan` is the
    /// physical plan that made them; `encoder` its logical plan.
    pub fn release(
        &self,
        client: &str,
        table: &str,
        encoder: &LogicalPlan,
        (plan, dropped): (&Arc<dyn ExecutionPlan>, &[usize]),
        state_schema: &SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let Some(agg) = top_aggregate(plan) else {
            return Ok(batches);
        };
        let mut calls = dp_calls(agg)?;
        // The plan's state also holds the policy's counts, which the site
        // has already taken out of `batches` (`dropped`, plan positions).
        for call in &mut calls {
            let before = dropped.iter().filter(|&&d| d < call.first_column).count();
            call.first_column -= before;
        }
        if calls.is_empty() {
            return Ok(batches);
        }
        let mut batch = concat_batches(state_schema, &batches)?;
        let mut schema = batch.schema();
        if let LogicalPlan::Aggregate(logical) = encoder
            && !logical.group_expr.is_empty()
        {
            let columns: Vec<String> = group_columns(&logical.group_expr)
                .into_iter()
                .collect::<Option<_>>()
                .ok_or_else(|| FedError::Internal("DP groups checked to be columns".into()))?;
            let mut domains = self.policy.domains.clone();
            if let Some(own) = bound_client_name(encoder) {
                domains.insert(CLIENT_COLUMN.to_string(), vec![own]);
            }
            batch = self.complete_keys(&batch, &columns, &calls, &domains)?;
            // A policy's row count (already split off) is not in `calls`.
            schema = batch.schema();
        }
        let cost: f64 = calls.iter().map(|c| c.release.epsilon).sum();
        let analyst = current_analyst();
        if let Err(over) = self
            .ledger
            .debit(&analyst, table, cost, self.policy.budget)?
        {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "the query would spend ε = {} of the privacy budget for `{table}`, but only ε = {} of {} remains (its dp_budget policy)",
                    trim(over.asked),
                    trim(over.remaining()),
                    trim(over.budget)
                ),
                hint: Some("SHOW PRIVACY BUDGET shows what each client has left; ask for a smaller epsilon".into()),
            });
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        let mut noise_all = |rng: &mut ChaCha20Rng| -> Result<()> {
            for call in &calls {
                for (i, noise) in call.release.columns.iter().enumerate() {
                    let at = call.first_column + i;
                    columns[at] = fedsql_udfs::dp::add_noise(&columns[at], noise, rng)?;
                }
            }
            Ok(())
        };
        match &self.test_rng {
            None => noise_all(&mut ChaCha20Rng::from_os_rng())?,
            Some(rng) => noise_all(&mut rng.lock().expect("not poisoned"))?,
        }
        Ok(vec![RecordBatch::try_new(schema, columns)?])
    }

    /// One state row per declared key (tuple), in the domain's order: the
    /// site's own row where it has one, an empty state where it does not;
    /// rows of undeclared keys (and NULL keys) are dropped.
    fn complete_keys(
        &self,
        batch: &RecordBatch,
        columns: &[String],
        calls: &[DpCall],
        domains: &BTreeMap<String, Vec<String>>,
    ) -> Result<RecordBatch> {
        let groups = columns.len();
        let mut present: HashMap<Vec<String>, u32> = HashMap::new();
        for row in 0..batch.num_rows() {
            let mut key = Vec::with_capacity(groups);
            for c in 0..groups {
                let v = ScalarValue::try_from_array(batch.column(c), row)?;
                if v.is_null() {
                    break;
                }
                key.push(v.to_string());
            }
            if key.len() == groups {
                present.insert(key, row as u32);
            }
        }
        let mut keys: Vec<Vec<String>> = vec![Vec::new()];
        for column in columns {
            let values = domains.get(column).ok_or_else(|| {
                FedError::Internal(format!("DP groups by `{column}`, checked to be declared"))
            })?;
            keys = keys
                .into_iter()
                .flat_map(|k| {
                    values.iter().map(move |v| {
                        let mut k = k.clone();
                        k.push(v.clone());
                        k
                    })
                })
                .collect();
        }
        let held: Vec<u32> = keys
            .iter()
            .filter_map(|k| present.get(k).copied())
            .collect();
        let absent: Vec<&Vec<String>> = keys.iter().filter(|k| !present.contains_key(*k)).collect();
        let held = RecordBatch::try_new(
            batch.schema(),
            batch
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &UInt32Array::from(held.clone()), None))
                .collect::<std::result::Result<Vec<_>, _>>()?,
        )?;
        let mut empty: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
        for (c, field) in batch.schema().fields().iter().enumerate().take(groups) {
            let text = StringArray::from_iter_values(absent.iter().map(|k| k[c].as_str()));
            empty.push(cast(&text, field.data_type()).map_err(|e| {
                FedError::InvalidArgument(format!(
                    "a declared value of `{}` is not a {}: {e}",
                    columns[c],
                    field.data_type()
                ))
            })?);
        }
        for at in groups..batch.num_columns() {
            let noise = calls.iter().find_map(|call| {
                at.checked_sub(call.first_column)
                    .and_then(|i| call.release.columns.get(i))
            });
            let Some(noise) = noise else {
                return Err(FedError::Internal(
                    "a grouped DP state with a column that is not DP".into(),
                ));
            };
            empty.push(fedsql_udfs::dp::zero_state(noise, absent.len()));
        }
        let empty = RecordBatch::try_new(batch.schema(), empty)?;
        Ok(concat_batches(&batch.schema(), &[held, empty])?)
    }
}

/// Whether a site's state under a disclosure policy holds DP state only:
/// its aggregates, but the policy's row count (always the last), are all
/// DP. Such a state is exempt from `min_group_rows`, the non-zero rule and
/// `max_groups`: the noise protects it (issue 14's exemption hook).
pub fn dp_only_under_policy(plan: &Arc<dyn ExecutionPlan>) -> bool {
    top_aggregate(plan)
        .and_then(|agg| agg.aggr_expr().split_last())
        .is_some_and(|(_, rest)| {
            !rest.is_empty()
                && rest
                    .iter()
                    .all(|e| fedsql_udfs::catalogue::is_dp(e.fun().name()))
        })
}

/// The virtual column of client names.
const CLIENT_COLUMN: &str = "_client";

/// This client's name, when `_client` in `plan` can only be the constant
/// the coordinator bound: every column of that name a projection makes is
/// that one string literal, and no table the plan reads has a real column
/// of that name. `None` otherwise (then `_client` is data, not public).
fn bound_client_name(plan: &LogicalPlan) -> Option<String> {
    let mut names = Vec::new();
    let mut data = false;
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Projection(p) => {
                for (expr, field) in p.expr.iter().zip(p.schema.fields()) {
                    if field.name() != CLIENT_COLUMN {
                        continue;
                    }
                    match expr.clone().unalias() {
                        Expr::Literal(datafusion::common::ScalarValue::Utf8(Some(v)), _) => {
                            names.push(v)
                        }
                        Expr::Column(c) if c.name == CLIENT_COLUMN => {}
                        _ => data = true,
                    }
                }
            }
            LogicalPlan::TableScan(scan) => {
                data |= scan.source.schema().field_with_name(CLIENT_COLUMN).is_ok();
            }
            LogicalPlan::Values(v) => {
                data |= v.schema.field_with_unqualified_name(CLIENT_COLUMN).is_ok();
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names.dedup();
    match (data, names.as_slice()) {
        (false, [one]) => Some(one.clone()),
        _ => None,
    }
}

/// The grouping columns by name; `None` for an expression or grouping sets.
fn group_columns(group_expr: &[Expr]) -> Vec<Option<String>> {
    group_expr
        .iter()
        .map(|e| match e {
            Expr::Column(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect()
}

/// ε without float noise in its last digits.
fn trim(epsilon: f64) -> String {
    let s = format!("{:.9}", epsilon);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_set_dp_settings() {
        let p = DpPolicy::from_options(&[
            ("dp_budget".into(), "10".into()),
            ("require_dp".into(), "true".into()),
            ("dp_domain.region".into(), "east, north,south,west".into()),
            ("min_group_rows".into(), "5".into()),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(p.budget, Some(10.0));
        assert!(p.require_dp);
        assert_eq!(p.domains["region"], ["east", "north", "south", "west"]);
        assert_eq!(
            DpPolicy::from_options(&[("timeout".into(), "1s".into())]).unwrap(),
            None
        );
        assert!(DpPolicy::from_options(&[("dp_budget".into(), "-1".into())]).is_err());
    }

    #[test]
    fn trimmed_epsilons() {
        assert_eq!(trim(0.30000000000000004), "0.3");
        assert_eq!(trim(10.0), "10");
    }
}
