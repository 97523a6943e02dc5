//! A data owner's disclosure policy, enforced at the site on every state
//! before it leaves (the coordinator may check early to explain, never
//! instead).
//!
//! The rules (their names are the settings' names):
//! - `min_group_rows` (k): every state row a site releases — each group,
//!   and the one row of a query without GROUP BY — covers 0 or at least k
//!   of its rows. The site counts the rows of each group in the same pass
//!   as the aggregates (one extra count in its partial aggregate, dropped
//!   before the state leaves).
//!   Every aggregate counts its own inputs in the same pass: each input
//!   column has 0 or at least k values that are non-NULL after the
//!   aggregate's FILTER and, for aggregates that add their inputs,
//!   non-zero (`sum(x) FILTER (WHERE id = 17)`, `sum(CASE WHEN id = 17
//!   THEN x ELSE 0 END)` and a one-person dummy column are refused).
//!   Nor may all but 1 to k-1 of a numeric input's values to an adding
//!   aggregate share one value, shared by most of them (`ELSE 1`, `ELSE
//!   1e-9`, glm weights of 1e-12 for all rows but one).
//! - `max_groups`: a state of more groups than this is refused.
//! - `extremes`: `refuse` turns away aggregates whose state is one row's
//!   value or a bit pattern of values (min, max, first_value, last_value,
//!   any_value, bit_and, bit_or, bit_xor).
//! - sketches whose state identifies values (`approx_distinct`'s
//!   registers, the analyst-weighted centroids of
//!   `approx_percentile_cont_with_weight`) are refused under any policy;
//!   a t-digest leaves with every centroid summarizing at least k values,
//!   and without its exact min and max when extremes are refused.
//! - `max_parameter_ratio`: a model round or matrix aggregate over p
//!   columns is refused at a site where p > ratio × its rows.
//! - `min_secure_clients`: a secure session needs that many participants.
//!
//! A refusal names the site, the rule and its setting, never the value,
//! key or count that broke it.

use std::fmt;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};

use fedsql_udfs::catalogue;

use crate::error::{FedError, Result};
use crate::protocol::secure::SecureSession;
use crate::site::release::group_rows::StateCounts;

/// The setting keys, as `OPTIONS`, flags and the TOML `[policy]` name them.
pub const POLICY_KEYS: &[&str] = &[
    "min_group_rows",
    "max_parameter_ratio",
    "extremes",
    "max_groups",
    "min_secure_clients",
];

/// What a site releases, and what it refuses.
#[derive(Debug, Clone, PartialEq)]
pub struct DisclosurePolicy {
    pub min_group_rows: u64,
    pub max_parameter_ratio: f64,
    pub allow_extremes: bool,
    pub max_groups: usize,
    pub min_secure_clients: usize,
}

impl Default for DisclosurePolicy {
    /// A worker's defaults: k = 5, ratio 0.33, extremes refused, 100,000
    /// groups, 3 secure participants.
    fn default() -> Self {
        Self {
            min_group_rows: 5,
            max_parameter_ratio: 0.33,
            allow_extremes: false,
            max_groups: 100_000,
            min_secure_clients: 3,
        }
    }
}

impl fmt::Display for DisclosurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "min_group_rows={}, max_parameter_ratio={}, extremes={}, max_groups={}, min_secure_clients={}",
            self.min_group_rows,
            self.max_parameter_ratio,
            if self.allow_extremes {
                "allow"
            } else {
                "refuse"
            },
            self.max_groups,
            self.min_secure_clients
        )
    }
}

/// What kind of error a message describes, in words that carry no data.
pub fn error_kind(message: &str) -> &'static str {
    let lower = message.to_ascii_lowercase();
    if lower.contains("csv") || lower.contains("parse") || lower.contains("parquet") {
        "a parse"
    } else if lower.contains("cast") {
        "a cast"
    } else if lower.contains("divide by zero") || lower.contains("overflow") {
        "an arithmetic"
    } else if lower.contains("schema") || lower.contains("column") {
        "a schema"
    } else if lower.contains("resources exhausted") || lower.contains("memory") {
        "a resource"
    } else {
        "an execution"
    }
}

/// A site's policy as `\\clients` shows it.
pub fn describe_policy(policy: Option<&DisclosurePolicy>) -> String {
    policy.map_or_else(|| "none".to_string(), |p| p.to_string())
}

impl DisclosurePolicy {
    /// The defaults with one setting changed; `key` is one of [`POLICY_KEYS`].
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = |what: &str| FedError::InvalidArgument(format!("policy {key}={value}: {what}"));
        let whole = || {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| bad("expected a whole number"))
        };
        match key {
            "min_group_rows" => self.min_group_rows = whole()?.max(1),
            "max_groups" => self.max_groups = whole()?.max(1) as usize,
            "min_secure_clients" => self.min_secure_clients = whole()? as usize,
            "max_parameter_ratio" => {
                self.max_parameter_ratio = value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| *r > 0.0 && r.is_finite())
                    .ok_or_else(|| bad("expected a positive number"))?
            }
            "extremes" => {
                self.allow_extremes = match value.trim().to_ascii_lowercase().as_str() {
                    "allow" => true,
                    "refuse" => false,
                    _ => return Err(bad("use allow or refuse")),
                }
            }
            other => {
                return Err(FedError::UnknownObject(format!(
                    "unknown policy setting `{other}`; the settings are {}",
                    POLICY_KEYS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The policy that `OPTIONS` of a table set, if they set any: the
    /// worker defaults with the given settings changed.
    pub fn from_options(options: &[(String, String)]) -> Result<Option<Self>> {
        let mut policy = None;
        for (key, value) in options {
            if POLICY_KEYS.contains(&key.as_str()) {
                policy
                    .get_or_insert_with(DisclosurePolicy::default)
                    .set(key, value)?;
            }
        }
        Ok(policy)
    }

    /// Refuses an encoder whose aggregates this policy does not release:
    /// extremes (when refused) and identifying sketches.
    pub fn check_encoder(&self, client: &str, plan: &LogicalPlan) -> Result<()> {
        let LogicalPlan::Aggregate(agg) = plan else {
            return Ok(());
        };
        let mut refusal = None;
        for expr in &agg.aggr_expr {
            expr.apply(|e| {
                if let Expr::AggregateFunction(f) = e {
                    let name = f.func.name().to_ascii_lowercase();
                    let facts = catalogue::aggregate(&name);
                    if !self.allow_extremes && facts.is_some_and(|a| a.extremes) {
                        refusal = Some(FedError::Policy {
                            client: client.to_string(),
                            rule: format!(
                                "`{name}` releases one row's value (its extremes=refuse policy)"
                            ),
                            hint: Some(
                                "use approx_percentile_cont(x, 0.01) (its t-digest is coarsened to k values per centroid) or a histogram of counts".into(),
                            ),
                        });
                    } else if facts.is_some_and(|a| a.identifying) {
                        refusal = Some(FedError::Policy {
                            client: client.to_string(),
                            rule: format!(
                                "the state of `{name}` identifies the values it summarizes (refused under a disclosure policy)"
                            ),
                            hint: Some("use counts of coarser groups instead".into()),
                        });
                    }
                    if refusal.is_some() {
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
            if let Some(e) = refusal {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Refuses a secure session of fewer distinct participants than
    /// `min_secure_clients`: masking with too few others releases (nearly)
    /// the plain state. A count stops accidents, not a coordinator that
    /// invents participants: see the README's threat model.
    pub fn check_secure_session(&self, client: &str, session: &SecureSession) -> Result<()> {
        let mut names: Vec<&String> = session.clients.iter().collect();
        names.sort();
        names.dedup();
        if names.len() < self.min_secure_clients {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "a secure sum needs at least {} participants (its min_secure_clients policy)",
                    self.min_secure_clients
                ),
                hint: Some("run the query over more clients, or use plain aggregates".into()),
            });
        }
        Ok(())
    }

    /// The most model parameters (design columns) any aggregate of the
    /// encoder estimates: what `max_parameter_ratio` weighs against rows.
    pub fn parameters(plan: &LogicalPlan) -> usize {
        let LogicalPlan::Aggregate(agg) = plan else {
            return 0;
        };
        let mut most = 0;
        for expr in &agg.aggr_expr {
            let _ = expr.apply(|e| {
                if let Expr::AggregateFunction(f) = e
                    && let Some(p) = catalogue::aggregate(f.func.name())
                        .and_then(|a| a.parameters(f.params.args.len()))
                {
                    most = most.max(p);
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        most
    }

    /// Refuses a state with a cluster of `kmeans_step` or a cell of
    /// `life_table` that counts 1 to k-1 rows. `cells` are the columns to
    /// look at: (column name, aggregate, number of arguments).
    pub fn check_cells(
        &self,
        client: &str,
        batches: &[RecordBatch],
        cells: &[(String, String, usize)],
    ) -> Result<()> {
        let k = self.min_group_rows as f64;
        for batch in batches {
            for (column, aggregate, args) in cells {
                let Some(state) = batch.column_by_name(column) else {
                    continue;
                };
                // A list (kmeans_step, life_table) or a fixed-size list
                // (the model rounds' flat states).
                let value =
                    |row: usize| match (state.as_list_opt::<i32>(), state.as_fixed_size_list_opt())
                    {
                        (Some(lists), _) => Some(lists.value(row)),
                        (_, Some(lists)) => Some(lists.value(row)),
                        _ => None,
                    };
                for row in 0..state.len() {
                    if state.is_null(row) {
                        continue;
                    }
                    let Some(values) = value(row) else {
                        continue;
                    };
                    let Some(values) = values.as_primitive_opt::<Float64Type>() else {
                        continue;
                    };
                    let Some(cells) = catalogue::aggregate(aggregate).and_then(|a| a.cells) else {
                        continue;
                    };
                    let small = (cells.counts)(*args, values.values())
                        .is_some_and(|counts| counts.iter().any(|&n| n > 0.0 && n < k));
                    if small {
                        // Which cells are small, or which would pass, is not
                        // said: it depends on the rows (the nineteenth
                        // outside attack read one row's value from the
                        // interval a life table's refusal named).
                        return Err(FedError::Policy {
                            client: client.to_string(),
                            rule: format!(
                                "{} fewer than {} of its rows (its min_group_rows policy)",
                                cells.holds, self.min_group_rows
                            ),
                            hint: Some(cells.hint.to_string()),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The refusal of a histogram state that could not be released.
    pub fn histogram_refusal(
        &self,
        client: &str,
        e: crate::site::release::sketches::FoldError,
    ) -> FedError {
        match e {
            crate::site::release::sketches::FoldError::SmallBin => FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "a histogram bin would count fewer than {} of its rows (its min_group_rows policy)",
                    self.min_group_rows
                ),
                hint: Some("use fewer or wider bins".into()),
            },
            crate::site::release::sketches::FoldError::NotAList => {
                FedError::Internal("a histogram state is not a list of counts".into())
            }
        }
    }

    /// Refuses a state whose groups cover 1 to k-1 rows, whose aggregates
    /// have an input of 1 to k-1 counting values, with too few rows for
    /// its `parameters` (DataSHIELD's nfilter.glm), or with more groups
    /// than allowed.
    pub fn check_counts(
        &self,
        client: &str,
        counts: &StateCounts,
        parameters: usize,
    ) -> Result<()> {
        self.check_state(client, &counts.rows, parameters)?;
        let k = self.min_group_rows as i64;
        if counts.inputs.iter().any(|&n| n > 0 && n < k) {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "an aggregate would add fewer than {k} of its rows' values: the others are NULL, filtered out or zero (its min_group_rows policy)"
                ),
                hint: Some(
                    "aggregate over a wider subset, without CASE/FILTER that single out rows, or with fewer dummy columns".into(),
                ),
            });
        }
        if counts.odd.iter().any(|&n| n > 0 && n < k) {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "an aggregate would add fewer than {k} of its rows' values that differ from a value the others share (its min_group_rows policy)"
                ),
                hint: Some(
                    "aggregate over a wider subset, without CASE that sets all rows but a few to one value".into(),
                ),
            });
        }
        Ok(())
    }

    /// Refuses a state whose groups cover 1 to k-1 rows, or too few rows
    /// for its `parameters` (DataSHIELD's nfilter.glm), or that has more
    /// groups than allowed. `rows` holds the rows each group covers.
    pub fn check_state(&self, client: &str, rows: &[i64], parameters: usize) -> Result<()> {
        if rows.len() > self.max_groups {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "the state would have more than {} groups (its max_groups policy)",
                    self.max_groups
                ),
                hint: Some("use coarser groups".into()),
            });
        }
        let k = self.min_group_rows as i64;
        if rows.iter().any(|&n| n > 0 && n < k) {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "a group would summarize fewer than {k} of its rows (its min_group_rows policy)"
                ),
                hint: Some("use coarser groups or a wider filter".into()),
            });
        }
        let too_few = |&n: &i64| n > 0 && parameters as f64 > self.max_parameter_ratio * n as f64;
        if parameters > 0 && rows.iter().any(too_few) {
            return Err(FedError::Policy {
                client: client.to_string(),
                rule: format!(
                    "a model or matrix of {parameters} columns needs more rows here (its max_parameter_ratio={} policy)",
                    self.max_parameter_ratio
                ),
                hint: Some("use fewer terms, or a wider filter".into()),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_set_a_policy_from_the_defaults() {
        let none = DisclosurePolicy::from_options(&[("timeout".into(), "3s".into())]).unwrap();
        assert_eq!(none, None);
        let policy = DisclosurePolicy::from_options(&[
            ("min_group_rows".into(), "10".into()),
            ("extremes".into(), "allow".into()),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(policy.min_group_rows, 10);
        assert!(policy.allow_extremes);
        assert_eq!(policy.max_groups, DisclosurePolicy::default().max_groups);
        let err = DisclosurePolicy::from_options(&[("extremes".into(), "maybe".into())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("use allow or refuse"), "{err}");
    }

    #[test]
    fn small_groups_are_refused_and_empty_ones_released() {
        let policy = DisclosurePolicy::default();
        assert!(policy.check_state("a", &[0, 5, 100], 0).is_ok());
        let err = policy.check_state("a", &[7, 4], 0).unwrap_err().to_string();
        assert!(err.contains("client 'a' refused"), "{err}");
        assert!(err.contains("fewer than 5"), "{err}");
        assert!(
            !err.contains('4'),
            "the count itself is not disclosed: {err}"
        );
        let small = DisclosurePolicy {
            max_groups: 2,
            ..DisclosurePolicy::default()
        };
        assert!(small.check_state("a", &[5, 5, 5], 0).is_err());
        // 0.33 parameters per row: 3 columns need 10 rows.
        assert!(policy.check_state("a", &[10], 3).is_ok());
        let err = policy.check_state("a", &[9], 3).unwrap_err().to_string();
        assert!(err.contains("max_parameter_ratio=0.33"), "{err}");
    }
}
