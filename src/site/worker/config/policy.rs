//! The disclosure policy and DP settings of a worker: its policy flags and
//! the TOML `[policy]` section (with `[policy.tables.NAME]` and the DP keys)
//! read into the settings [`super::WorkerConfig`] holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::args::WorkerArgs;
use crate::error::{FedError, Result};
use crate::site::release::dp::DpPolicy;
use crate::site::release::identity::parse_peer;
use crate::site::release::policy::DisclosurePolicy;

/// What the policy flags and the TOML `policy` give.
pub(super) struct PolicySettings {
    /// The worker's policy: the defaults, changed by the file's `[policy]`
    /// settings, then by the flags; or none, when either says `none`.
    pub(super) policy: Option<DisclosurePolicy>,
    /// The per-table policies of `[policy.tables.NAME]` (the worker's
    /// policy with that section's settings changed, or none for
    /// `NAME = "none"`).
    pub(super) table_policies: BTreeMap<String, Option<DisclosurePolicy>>,
    /// The peers of `[policy] peers`.
    pub(super) peers: Vec<[u8; 32]>,
    /// `[policy] secure_without_peers` or `--secure-without-peers`.
    pub(super) secure_without_peers: bool,
    /// Tables with `approval = "manual"` (in `[policy]`: every table).
    pub(super) approval_tables: std::collections::BTreeSet<String>,
}

/// The worker's policy settings from its flags and the TOML `policy`; see
/// [`PolicySettings`].
pub(super) fn worker_policy(
    args: &WorkerArgs,
    file: Option<&toml::Value>,
) -> Result<PolicySettings> {
    let none = |v: &str| v.trim().eq_ignore_ascii_case("none");
    if args.policy.as_deref().is_some_and(none) || file.and_then(|v| v.as_str()).is_some_and(none) {
        return Ok(PolicySettings {
            policy: None,
            table_policies: BTreeMap::new(),
            peers: Vec::new(),
            secure_without_peers: args.secure_without_peers,
            approval_tables: std::collections::BTreeSet::new(),
        });
    }
    if let Some(other) = args.policy.as_deref() {
        return Err(FedError::InvalidArgument(format!(
            "--policy {other}: the only value is `none` (the settings have their own flags)"
        )));
    }
    let mut policy = DisclosurePolicy::default();
    let mut tables = None;
    let mut peers = Vec::new();
    let mut secure_without_peers = args.secure_without_peers;
    let mut approval_all = false;
    let mut approval_tables = std::collections::BTreeSet::new();
    match file {
        None => {}
        Some(toml::Value::Table(settings)) => {
            for (key, value) in settings {
                match (key.as_str(), value) {
                    ("tables", toml::Value::Table(t)) => tables = Some(t),
                    ("peers", toml::Value::Array(keys)) => {
                        for key in keys {
                            let text = key.as_str().ok_or_else(|| {
                                FedError::Syntax(
                                    "worker config: [policy] peers is a list of base64 public keys"
                                        .into(),
                                )
                            })?;
                            peers.push(parse_peer(text)?);
                        }
                    }
                    ("secure_without_peers", toml::Value::Boolean(trust)) => {
                        secure_without_peers |= *trust;
                    }
                    ("approval", value) => approval_all = manual_approval("[policy]", value)?,
                    ("tables" | "peers" | "secure_without_peers", other) => {
                        return Err(FedError::Syntax(format!(
                            "worker config: [policy] {key} = {other}: expected {}",
                            match key.as_str() {
                                "peers" => "a list of base64 public keys",
                                "secure_without_peers" => "true or false",
                                _ => "[policy.tables.NAME] sections",
                            }
                        )));
                    }
                    _ => policy.set(key, &setting_text(value))?,
                }
            }
        }
        Some(other) => {
            return Err(FedError::Syntax(format!(
                "worker config: `policy = {other}`: write policy = \"none\" or a [policy] section"
            )));
        }
    }
    let flags = [
        ("min_group_rows", args.min_group_rows.map(|v| v.to_string())),
        (
            "max_parameter_ratio",
            args.max_parameter_ratio.map(|v| v.to_string()),
        ),
        ("extremes", args.extremes.clone()),
        ("max_groups", args.max_groups.map(|v| v.to_string())),
        (
            "min_secure_clients",
            args.min_secure_clients.map(|v| v.to_string()),
        ),
    ];
    for (key, value) in flags {
        if let Some(value) = value {
            policy.set(key, &value)?;
        }
    }
    let mut table_policies = BTreeMap::new();
    for (name, section) in tables.into_iter().flatten() {
        let table_policy = match section {
            toml::Value::String(s) if none(s) => None,
            toml::Value::Table(settings) => {
                let mut table_policy = policy.clone();
                for (key, value) in settings {
                    if key == "approval" {
                        if manual_approval(&format!("[policy.tables.{name}]"), value)? {
                            approval_tables.insert(name.clone());
                        }
                        continue;
                    }
                    table_policy.set(key, &setting_text(value))?;
                }
                Some(table_policy)
            }
            other => {
                return Err(FedError::Syntax(format!(
                    "worker config: [policy.tables] {name} = {other}: write a [policy.tables.{name}] section of settings, or {name} = \"none\""
                )));
            }
        };
        table_policies.insert(name.clone(), table_policy);
    }
    if approval_all {
        approval_tables.insert(ALL_TABLES.to_string());
    }
    Ok(PolicySettings {
        policy: Some(policy),
        table_policies,
        peers,
        secure_without_peers,
        approval_tables,
    })
}

/// In [`PolicySettings::approval_tables`]: every table.
pub(crate) const ALL_TABLES: &str = "*";

/// `approval = "manual"` (true) or `"none"` (false).
fn manual_approval(section: &str, value: &toml::Value) -> Result<bool> {
    match value.as_str() {
        Some("manual") => Ok(true),
        Some("none" | "automatic") => Ok(false),
        _ => Err(FedError::Syntax(format!(
            "worker config: {section} approval = {value}: expected \"manual\" or \"none\""
        ))),
    }
}

/// A TOML setting's value as text for [`DisclosurePolicy::set`].
fn setting_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `[policy]` section without its DP settings (read by [`worker_dp`]).
pub(super) fn without_dp(file: Option<&toml::Value>) -> Option<toml::Value> {
    match file? {
        toml::Value::Table(settings) => Some(toml::Value::Table(
            settings
                .iter()
                .filter(|(k, _)| !(DpPolicy::is_key(k) || *k == "dp_domain" || *k == "dp_ledger"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )),
        other => Some(other.clone()),
    }
}

/// The DP settings and ledger file of the TOML `[policy]` (`dp_budget`,
/// `dp_max_epsilon`, `require_dp`, `dp_ledger`, `dp_domain.<column>`),
/// then the flags.
pub(super) fn worker_dp(
    args: &WorkerArgs,
    file: Option<&toml::Value>,
    base: &Path,
) -> Result<(DpPolicy, Option<PathBuf>)> {
    let mut dp = DpPolicy::default();
    let mut ledger = None;
    let text = |v: &toml::Value| match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(","),
        other => other.to_string(),
    };
    if let Some(toml::Value::Table(settings)) = file {
        for (key, value) in settings {
            match (key.as_str(), value) {
                ("dp_ledger", v) => ledger = Some(base.join(text(v))),
                ("dp_domain", toml::Value::Table(columns)) => {
                    for (column, values) in columns {
                        dp.set(&format!("dp_domain.{column}"), &text(values))?;
                    }
                }
                (key, v) if DpPolicy::is_key(key) => dp.set(key, &text(v))?,
                _ => {}
            }
        }
    }
    if let Some(budget) = args.dp_budget {
        dp.set("dp_budget", &budget.to_string())?;
    }
    if let Some(cap) = args.dp_max_epsilon {
        dp.set("dp_max_epsilon", &cap.to_string())?;
    }
    if let Some(path) = &args.dp_ledger {
        ledger = Some(path.clone());
    }
    if dp.budget.is_some() && ledger.is_none() {
        return Err(FedError::Syntax(
            "a DP budget needs a ledger file that survives restarts: give --dp-ledger FILE (or dp_ledger in [policy])".into(),
        ));
    }
    Ok((dp, ledger))
}
