//! Differential privacy at the site: the data owner's DP settings
//! ([`settings`]), the noise it adds to its own state before the state
//! leaves, and the budget it debits (see
//! [`crate::site::release::dp_budget`]).
//!
//! The DP aggregates' accumulators keep exact integer state; a site runs
//! them like any aggregate. *Before* it runs a plan with DP calls
//! ([`DpSite::pay`]) it checks their constants, refuses a query whose ε
//! (the sum over its DP calls: sequential composition; disjoint groups
//! compose in parallel) passes the site's per-query cap
//! (`dp_max_epsilon`, default 1), and debits that ε to the analyst's
//! ledger for the table, or refuses, naming what is left: a run that then
//! fails has spent its ε all the same, so whether a query fails is no
//! free question about the rows. Then, on the one state batch it is about
//! to release ([`DpSite::release`]), it
//! 1. keeps only the groups of declared public keys, and adds an empty
//!    state for every declared key it does not hold (which groups exist is
//!    itself a disclosure);
//! 2. adds exact discrete Laplace noise, from a ChaCha20 generator seeded
//!    by the operating system, once to every value of every DP state
//!    column of every row.
//!
//! DP state is exempt from the disclosure policy's thresholds only where
//! the table has a finite budget ([`DpSite::exempts_from_thresholds`]);
//! with an unlimited one it meets them like exact state.
//!
//! The analyst is the one the request names ([`crate::protocol::site::SiteRequest`]):
//! at a worker, its token's name; in process, the session's user.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

use crate::error::{FedError, Result};
use crate::protocol::dp::{DpCall, dp_calls, top_aggregate};
use crate::protocol::site::BudgetLine;
use crate::site::release::dp_budget::{Ledger, units};

mod keys;
mod settings;

use keys::{
    MAX_DECLARED_KEYS, canonical_values, declared_keys, group_columns, key_arrays, row_key,
    text_shows_each_value,
};
pub use settings::{DEFAULT_MAX_EPSILON, DP_KEYS, DP_OPTION_KEYS, DpPolicy};

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

    /// `analyst`'s budget line for `table`.
    pub fn budget_line(&self, table: &str, analyst: &str) -> BudgetLine {
        BudgetLine {
            budget: self.policy.budget,
            spent: self.ledger.spent(analyst, table),
        }
    }

    /// Refuses, before anything runs, an encoder this site does not answer
    /// under its DP settings: a plain (unmasked) aggregate under
    /// `require_secure`, exact aggregates under `require_dp`, and DP
    /// aggregates grouped by anything but declared public columns.
    pub fn check_encoder(&self, client: &str, plan: &LogicalPlan) -> Result<()> {
        let LogicalPlan::Aggregate(agg) = plan else {
            return Ok(());
        };
        let mut dp = 0;
        let mut distinct = false;
        let mut exact: Vec<&str> = Vec::new();
        let mut unmasked: Vec<&str> = Vec::new();
        for expr in &agg.aggr_expr {
            // An aggregate's arguments hold no aggregate, so the walk stops
            // at each one rather than visiting its argument expressions.
            let _ = expr.apply(|e| {
                let Expr::AggregateFunction(f) = e else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                if !fedsql_udfs::catalogue::is_secure(f.func.name()) {
                    unmasked.push(f.func.name());
                }
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
        if self.policy.require_secure && (!unmasked.is_empty() || agg.aggr_expr.is_empty()) {
            let what = if unmasked.is_empty() {
                "rows grouped without an aggregate".to_string()
            } else {
                format!("`{}` in plain", unmasked.join("`, `"))
            };
            return Err(refuse(
                format!("it lets values leave only masked (its require_secure policy), not {what}"),
                "use secure_sum, secure_count or secure_avg (or secure_dp_sum, secure_dp_count, secure_dp_avg)",
            ));
        }
        if self.policy.require_secure {
            // Group keys leave in plain at a secure setup (to align the
            // states): under require_secure, only declared public columns
            // may be grouped by (the seventh outside attack read a
            // column's every value from `GROUP BY x`).
            // And by the federated table's own column under its own name
            // (the eighth attack grouped by `x AS g` and by a shared
            // table's column named `g`).
            let declared = |c: &Option<String>| {
                c.as_ref()
                    .is_some_and(|c| self.policy.domains.contains_key(c))
            };
            let exact_text = |e: &Expr| {
                e.get_type(agg.input.schema())
                    .is_ok_and(|t| text_shows_each_value(&t))
            };
            if !group_columns(&agg.group_expr).iter().all(declared)
                || !agg.group_expr.iter().all(|e| scanned_column(&agg.input, e))
                || !agg.group_expr.iter().all(exact_text)
            {
                return Err(refuse(
                    "under its require_secure policy a secure aggregate may group only by columns whose values the data owner declares public (their keys leave in plain), of a type whose values print each as its own text".into(),
                    "group by a declared integer, text, boolean or decimal column (dp_domain.<column> in the worker's [policy] or the table's OPTIONS), or drop GROUP BY",
                ));
            }
            self.check_declared_key_count(&agg.group_expr, &refuse)?;
        }
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
        for (expr, group) in group_columns(&agg.group_expr)
            .into_iter()
            .zip(&agg.group_expr)
        {
            match expr {
                Some(name)
                    if self.policy.domains.contains_key(&name)
                        && scanned_column(&agg.input, group) =>
                {
                    // A declared value the column cannot hold is the data
                    // owner's mistake, told before anything runs (the
                    // domain and the column's type are public).
                    let data_type = group.get_type(agg.input.schema())?;
                    if !text_shows_each_value(&data_type) {
                        return Err(refuse(
                            format!(
                                "DP groups by `{name}` of type {data_type}, whose values the site cannot match to the declared ones exactly (two values may print alike)"
                            ),
                            "group by a declared integer, text, boolean or decimal column",
                        ));
                    }
                    if let Err(e) = canonical_values(&name, &self.policy.domains[&name], &data_type)
                    {
                        return Err(refuse(
                            e.to_string(),
                            "the data owner declares the column's values as its type reads them (dp_domain.<column>)",
                        ));
                    }
                }
                // `_client` is public: the analyst named the clients, and
                // here it is the constant the coordinator bound.
                Some(name) if name == CLIENT_COLUMN && own_name.is_some() => {}
                Some(name) if self.policy.domains.contains_key(&name) => {
                    return Err(refuse(
                        format!(
                            "DP groups by `{name}`, which is not the table's own column of that name (an alias or a shared table's column): its values are not the declared ones"
                        ),
                        &domain_hint,
                    ));
                }
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
        self.check_declared_key_count(&agg.group_expr, &refuse)
    }

    /// A grouped DP or `require_secure` state has a row for every declared
    /// key (tuple): the product of the grouped columns' domains is refused
    /// above [`MAX_DECLARED_KEYS`] before anything is built (the
    /// eighteenth outside review: several large domains would make a
    /// worker run out of memory).
    fn check_declared_key_count(
        &self,
        group_expr: &[Expr],
        refuse: &dyn Fn(String, &str) -> FedError,
    ) -> Result<()> {
        let keys = group_columns(group_expr)
            .into_iter()
            .flatten()
            .filter_map(|c| self.policy.domains.get(&c).map(Vec::len))
            .fold(1usize, usize::saturating_mul);
        if keys > MAX_DECLARED_KEYS {
            return Err(refuse(
                format!(
                    "its groups would be the {keys} combinations of the declared values, more than the {MAX_DECLARED_KEYS} a site releases"
                ),
                "group by fewer declared columns",
            ));
        }
        Ok(())
    }

    /// Checks the DP calls of `plan` and debits their ε, *before* the plan
    /// runs, so that a run that fails spends like one that succeeds (a
    /// failure cannot be a free question), in this order:
    /// 1. the constants of every call (bounds, bins, ε, and bounds that
    ///    would change a call's type) are checked: nothing is debited for
    ///    a query that cannot run;
    /// 2. the query's ε (the sum over its calls) must be at most the
    ///    site's `dp_max_epsilon`;
    /// 3. the ε is debited to the analyst's ledger for `table`, or the
    ///    query is refused, naming what is left.
    ///
    /// `dropped` are the plan's state columns the site takes out before
    /// release (the policy's counts). What it returns is what
    /// [`DpSite::release`] noises.
    pub fn pay(
        &self,
        (client, analyst): (&str, &str),
        table: &str,
        (plan, dropped): (&Arc<dyn ExecutionPlan>, &[usize]),
    ) -> Result<Paid> {
        let Some(agg) = top_aggregate(plan) else {
            return Ok(Paid::default());
        };
        let mut calls = dp_calls(agg)?;
        if calls.is_empty() {
            return Ok(Paid::default());
        }
        // The plan's state also holds the policy's counts, which the site
        // takes out of the batches before release.
        for call in &mut calls {
            let before = dropped.iter().filter(|&&d| d < call.first_column).count();
            call.first_column -= before;
        }
        let refuse = |rule: String, hint: &str| FedError::Policy {
            client: client.to_string(),
            rule,
            hint: Some(hint.to_string()),
        };
        let cost: f64 = calls.iter().map(|c| c.release.epsilon).sum();
        let cap = self.policy.max_epsilon;
        let within_cap = match (units(cost), units(cap)) {
            (Some(cost), Some(cap)) => cost <= cap,
            _ => false,
        };
        if !within_cap {
            return Err(refuse(
                format!(
                    "the query asks for ε = {} here, more than one query may spend (its dp_max_epsilon={} policy)",
                    trim(cost),
                    trim(cap)
                ),
                &format!(
                    "ask for ε ≤ {} in all (the ε of a query's DP calls add up): SET fedsql.dp_epsilon, or give each call a smaller last argument",
                    trim(cap)
                ),
            ));
        }
        if let Err(over) = self
            .ledger
            .debit(analyst, table, cost, self.policy.budget)?
        {
            let hint = if over.remaining() > 0.0 {
                format!(
                    "ask for ε ≤ {} in all (the ε of a query's DP calls add up); SHOW PRIVACY BUDGET shows what each client has left",
                    trim(over.remaining())
                )
            } else {
                "this budget is spent: no DP query on this table can run here until its data owner grants more (dp_budget) or starts a new ledger; SHOW PRIVACY BUDGET shows what each client has left".to_string()
            };
            return Err(refuse(
                format!(
                    "the query would spend ε = {} of the privacy budget for `{table}`, but only ε = {} of {} remains (its dp_budget policy)",
                    trim(over.asked),
                    trim(over.remaining()),
                    trim(over.budget)
                ),
                &hint,
            ));
        }
        Ok(Paid { calls })
    }

    /// The state batches as they may leave: declared keys completed and
    /// noise added to the DP state of `paid` (see the module docs).
    /// `encoder` is the logical plan that made them. `shares` is the
    /// share count d of the secure session the state is masked for: a call
    /// under the masks (`secure_dp_…`) gets a 1/d share of its noise, and
    /// without a session it is refused (its state leaves only masked).
    pub fn release(
        &self,
        encoder: &LogicalPlan,
        paid: &Paid,
        (state_schema, batches): (&SchemaRef, Vec<RecordBatch>),
        shares: Option<usize>,
    ) -> Result<Vec<RecordBatch>> {
        let calls = &paid.calls;
        if calls.is_empty() {
            return Ok(batches);
        }
        let threshold = match shares {
            Some(t) if t >= 1 => Some(t),
            _ => None,
        };
        if threshold.is_none() && calls.iter().any(|c| c.release.under_masks) {
            return Err(FedError::Internal(
                "a DP state under the masks outside a secure session".into(),
            ));
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
            batch = self.complete_keys(&batch, &columns, calls, &domains)?;
            // A policy's row count (already split off) is not in `calls`.
            schema = batch.schema();
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        let mut noise_all = |rng: &mut ChaCha20Rng| -> Result<()> {
            for call in calls {
                for (i, noise) in call.release.columns.iter().enumerate() {
                    let at = call.first_column + i;
                    columns[at] = match (call.release.under_masks, threshold) {
                        (true, Some(t)) => fedsql_udfs::dp::add_share(&columns[at], noise, t, rng)?,
                        _ => fedsql_udfs::dp::add_noise(&columns[at], noise, rng)?,
                    };
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

    /// Under `require_secure`, a grouped secure state as it may be kept
    /// for a secure session, and the group keys its setup announces: one
    /// row per declared key (tuple), in the declared order, the site's own
    /// row where it holds the key and the empty state (`zero_state`, one
    /// row per state column) where it does not; NULL and undeclared keys
    /// dropped. So which keys a setup sends back tells nothing (the eighth
    /// outside attack ran the seventh's range search on them), and neither
    /// does a group list that lacks a declared key, refused alike whatever
    /// the site holds (the eighteenth attack read the held keys from the
    /// masking step's refusal). `None` where the rule does not apply (no
    /// `require_secure`, or no GROUP BY).
    pub fn declared_secure_groups(
        &self,
        encoder: &LogicalPlan,
        state: &RecordBatch,
        key_columns: usize,
        zero_state: &[ArrayRef],
    ) -> Result<Option<(RecordBatch, RecordBatch)>> {
        if !self.policy.require_secure || key_columns == 0 {
            return Ok(None);
        }
        let LogicalPlan::Aggregate(logical) = encoder else {
            return Ok(None);
        };
        let columns: Vec<String> = group_columns(&logical.group_expr)
            .into_iter()
            .collect::<Option<_>>()
            .filter(|c: &Vec<String>| c.len() == key_columns)
            .ok_or_else(|| {
                FedError::Internal("secure groups checked to be declared columns".into())
            })?;
        if zero_state.len() + key_columns != state.num_columns() {
            return Err(FedError::Internal(
                "a secure state's empty state does not fit its columns".into(),
            ));
        }
        let keys = declared_keys(&columns, &self.policy.domains, &state.schema())?;
        let mut present: HashMap<Vec<String>, usize> = HashMap::new();
        for row in 0..state.num_rows() {
            if let Some(key) = row_key(state, row, key_columns)?
                && present.insert(key, row).is_some()
            {
                return Err(FedError::Internal(
                    "two groups of a secure state print alike".into(),
                ));
            }
        }
        // (0, row): the site's own row; (1, 0): the empty state.
        let picks: Vec<(usize, usize)> = keys
            .iter()
            .map(|k| present.get(k).map_or((1, 0), |&row| (0, row)))
            .collect();
        let schema = Arc::new(
            state
                .schema()
                .project(&(0..key_columns).collect::<Vec<_>>())?,
        );
        let announced = key_arrays(&keys.iter().collect::<Vec<_>>(), &columns, &schema)?;
        let mut completed = announced.clone();
        for (i, zero) in zero_state.iter().enumerate() {
            let mine = state.column(key_columns + i);
            completed.push(datafusion::arrow::compute::interleave(
                &[mine.as_ref(), zero.as_ref()],
                &picks,
            )?);
        }
        let completed = RecordBatch::try_new_with_options(
            state.schema(),
            completed,
            &datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(keys.len())),
        )?;
        Ok(Some((completed, RecordBatch::try_new(schema, announced)?)))
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
            if let Some(key) = row_key(batch, row, groups)?
                && present.insert(key, row as u32).is_some()
            {
                // Checked before the run: the key types print each value
                // as its own text.
                return Err(FedError::Internal(
                    "two groups of a DP state print alike".into(),
                ));
            }
        }
        let keys = declared_keys(columns, domains, &batch.schema())?;
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
        let mut empty: Vec<ArrayRef> = key_arrays(&absent, columns, &batch.schema())?;
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
            let zeros = fedsql_udfs::dp::zero_state(noise, absent.len());
            // A masked call's state is UInt64 (the same zeros).
            empty.push(cast(&zeros, batch.schema().field(at).data_type())?);
        }
        let empty = RecordBatch::try_new(batch.schema(), empty)?;
        let held_rows = held.num_rows() as u32;
        let both = concat_batches(&batch.schema(), &[held, empty])?;
        // In the declared keys' order, whichever the site holds: rows held
        // first would tell which (the sixteenth outside attack read them
        // from the released state, a setup's group keys and an answer's
        // row order).
        let (mut h, mut a) = (0u32, held_rows);
        let order: UInt32Array = keys
            .iter()
            .map(|k| {
                let at = if present.contains_key(k) {
                    &mut h
                } else {
                    &mut a
                };
                *at += 1;
                *at - 1
            })
            .collect();
        // The key columns are the declared values themselves, never the
        // held rows' own keys: those differ from the declared text in what
        // the text does not show (a NaN's sign, the buffers a view column
        // shares with the site's other keys: the seventeenth outside attack
        // read both).
        let mut released: Vec<ArrayRef> =
            key_arrays(&keys.iter().collect::<Vec<_>>(), columns, &batch.schema())?;
        for c in &both.columns()[groups..] {
            released.push(take(c.as_ref(), &order, None)?);
        }
        Ok(RecordBatch::try_new(both.schema(), released)?)
    }
}

impl DpSite {
    /// Whether this site's state for `encoder` is exempt from its
    /// disclosure policy's thresholds (`min_group_rows`, the input counts,
    /// the non-zero rule, `max_groups`), the noise protecting it instead:
    /// only where the table has a finite `dp_budget` (an unlimited one
    /// bounds nothing over many queries), and only when every aggregate
    /// the encoder asked for is DP. `plan` is the site's physical plan and
    /// `site_rows` says whether the site added its own row count to it
    /// (as the last aggregate, [`crate::site::release::group_rows::counted`]): that
    /// one is told by construction, never by its name or place alone, so
    /// an exact `count(*)` the query asked for (wherever it stands) is
    /// never taken for it.
    pub fn exempts_from_thresholds(
        &self,
        encoder: &LogicalPlan,
        plan: &Arc<dyn ExecutionPlan>,
        site_rows: bool,
    ) -> bool {
        self.policy.budget.is_some() && asks_only_dp(encoder) && states_only_dp(plan, site_rows)
    }
}

/// Whether every aggregate function of the encoder's root aggregate is a
/// DP aggregate (and it has one).
fn asks_only_dp(encoder: &LogicalPlan) -> bool {
    let LogicalPlan::Aggregate(agg) = encoder else {
        return false;
    };
    let (mut dp, mut other) = (0, 0);
    for expr in &agg.aggr_expr {
        let mut found = false;
        let _ = expr.apply(|e| {
            let Expr::AggregateFunction(f) = e else {
                return Ok(TreeNodeRecursion::Continue);
            };
            found = true;
            if fedsql_udfs::catalogue::is_dp(f.func.name()) {
                dp += 1;
            } else {
                other += 1;
            }
            Ok(TreeNodeRecursion::Jump)
        });
        // An aggregate expression with no aggregate in it: not DP.
        other += usize::from(!found);
    }
    dp > 0 && other == 0
}

/// Whether the physical plan's top aggregate holds DP aggregates only,
/// besides the site's own row count when it added one (the last).
fn states_only_dp(plan: &Arc<dyn ExecutionPlan>, site_rows: bool) -> bool {
    let Some(agg) = top_aggregate(plan) else {
        return false;
    };
    let all = agg.aggr_expr();
    let asked = match (site_rows, all.split_last()) {
        (true, Some((_, rest))) => rest,
        (true, None) => return false,
        (false, _) => all,
    };
    !asked.is_empty()
        && asked
            .iter()
            .all(|e| fedsql_udfs::catalogue::is_dp(e.fun().name()))
}

/// A query's DP calls, checked and paid for by [`DpSite::pay`] before its
/// encoder ran: what [`DpSite::release`] adds noise to.
#[derive(Debug, Default)]
pub struct Paid {
    calls: Vec<DpCall>,
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

/// Whether the group expression `group` of an aggregate over `input` is a
/// column of the federated table's own scan, passed up unchanged under its
/// own name (through filters, aliases of the relation, sorts, limits,
/// projections that keep it as it is, and the table's side of a join) —
/// not an alias of another column, an expression, or a shared table's
/// column that happens to have the declared name.
fn scanned_column(input: &LogicalPlan, group: &Expr) -> bool {
    let Expr::Column(column) = group else {
        return false;
    };
    input
        .schema()
        .index_of_column(column)
        .is_ok_and(|i| scanned_at(input, i, &column.name))
}

/// Whether field `index` of `plan`, named `name`, is the federated
/// table's own column `name` (see [`scanned_column`]).
fn scanned_at(plan: &LogicalPlan, index: usize, name: &str) -> bool {
    use datafusion::logical_expr::JoinType;
    if plan.schema().fields().get(index).map(|f| f.name().as_str()) != Some(name) {
        return false;
    }
    match plan {
        LogicalPlan::TableScan(scan) => crate::protocol::exposure::federated_scan(scan).is_some(),
        LogicalPlan::Filter(f) => scanned_at(&f.input, index, name),
        LogicalPlan::SubqueryAlias(a) => scanned_at(&a.input, index, name),
        LogicalPlan::Sort(s) => scanned_at(&s.input, index, name),
        LogicalPlan::Limit(l) => scanned_at(&l.input, index, name),
        LogicalPlan::Projection(p) => match p.expr.get(index).map(|e| e.clone().unalias()) {
            Some(Expr::Column(c)) if c.name == name => p
                .input
                .schema()
                .index_of_column(&c)
                .is_ok_and(|i| scanned_at(&p.input, i, name)),
            _ => false,
        },
        LogicalPlan::Join(j) => {
            let left = j.left.schema().fields().len();
            match j.join_type {
                JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                    if index < left {
                        scanned_at(&j.left, index, name)
                    } else {
                        scanned_at(&j.right, index - left, name)
                    }
                }
                JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                    scanned_at(&j.left, index, name)
                }
                JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                    scanned_at(&j.right, index, name)
                }
            }
        }
        _ => false,
    }
}

/// ε without float noise in its last digits.
fn trim(epsilon: f64) -> String {
    let s = format!("{:.9}", epsilon);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests;
