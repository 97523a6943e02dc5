//! A table's DP settings at a site ([`DpPolicy`]): the budget, the
//! per-query ε cap, whether every aggregate must be DP, and the declared
//! domains of grouping columns, read from table options or a worker's
//! `[policy]` keys.

use std::collections::BTreeMap;

use crate::error::{FedError, Result};
use crate::site::release::dp_budget::MAX_EPSILON;

/// The DP settings of a table at a site (beside its disclosure policy).
#[derive(Debug, Clone, PartialEq)]
pub struct DpPolicy {
    /// Total ε per analyst and table; `None`: unlimited (spending is still
    /// recorded). Only under a finite budget is DP state exempt from the
    /// disclosure policy's thresholds.
    pub budget: Option<f64>,
    /// The most ε one round of a query may spend here (the sum over its DP
    /// calls of one request);
    /// a query asking for more is refused before it runs. Default
    /// [`DEFAULT_MAX_EPSILON`].
    pub max_epsilon: f64,
    /// Answer only DP aggregates.
    pub require_dp: bool,
    /// Let values leave only masked: answer only secure aggregates
    /// (`secure_*`, `secure_dp_*`), never a plain state of these rows.
    pub require_secure: bool,
    /// Columns whose values are public, with their values: DP queries may
    /// group by them.
    pub domains: BTreeMap<String, Vec<String>>,
}

/// The per-query ε cap of a site that sets none.
pub const DEFAULT_MAX_EPSILON: f64 = 1.0;

impl Default for DpPolicy {
    fn default() -> Self {
        Self {
            budget: None,
            max_epsilon: DEFAULT_MAX_EPSILON,
            require_dp: false,
            require_secure: false,
            domains: BTreeMap::new(),
        }
    }
}

/// The setting keys (`OPTIONS`, the worker's `[policy]`); a domain is
/// `dp_domain.<column>` = comma-separated values.
pub const DP_KEYS: &[&str] = &[
    "dp_budget",
    "dp_max_epsilon",
    "require_dp",
    "require_secure",
    "dp_domain.<column>",
];

/// The DP settings of table OPTIONS (besides `dp_domain.<column>`).
pub const DP_OPTION_KEYS: &[&str] = &[
    "dp_budget",
    "dp_max_epsilon",
    "require_dp",
    "require_secure",
];

impl DpPolicy {
    /// Whether `key` is a DP setting.
    pub fn is_key(key: &str) -> bool {
        matches!(
            key,
            "dp_budget" | "dp_max_epsilon" | "require_dp" | "require_secure"
        ) || key.starts_with("dp_domain.")
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
                        .filter(|b| *b >= 0.0 && *b <= MAX_EPSILON)
                        .ok_or_else(|| {
                            bad(&format!("expected a total ε between 0 and {MAX_EPSILON}"))
                        })?,
                )
            }
            "dp_max_epsilon" => self.max_epsilon = value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|e| *e > 0.0 && *e <= MAX_EPSILON)
                .ok_or_else(|| {
                    bad(&format!(
                        "expected the most ε one query may spend, above 0 and at most {MAX_EPSILON}"
                    ))
                })?,
            "require_dp" | "require_secure" => {
                let on = match value.trim().to_ascii_lowercase().as_str() {
                    "true" | "yes" | "on" => true,
                    "false" | "no" | "off" => false,
                    _ => return Err(bad("use true or false")),
                };
                if key == "require_dp" {
                    self.require_dp = on;
                } else {
                    self.require_secure = on;
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
        write!(f, ", dp_max_epsilon={}", self.max_epsilon)?;
        write!(f, ", require_dp={}", self.require_dp)?;
        for (column, values) in &self.domains {
            write!(f, ", dp_domain.{column}={}", values.join("|"))?;
        }
        Ok(())
    }
}
