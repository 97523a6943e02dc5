//! The coordinator's side of differential privacy: it writes the
//! session's ε into every DP call that names none ([`SessionEpsilon`]), so
//! every site reads and debits the same value; it shows each site's
//! budget (`SHOW PRIVACY BUDGET`); and it states the noise of every DP
//! result (a notice with its standard deviation and a 95% interval). The
//! noise itself and the budget belong to the sites (see `site::release::dp`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::array::{Float64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use fedsql_udfs::dp::Kind;

use crate::coordinator::settings::FedsqlOptions;
use crate::error::Result;
use crate::protocol::dp::dp_calls;
use crate::protocol::encoder::StateBatch;
use crate::protocol::site::{Analyst, Site};

/// Where a session keeps the privacy-budget ledgers of the in-process
/// tables it creates: one file per table and client in a folder
/// (`fedsql serve --dp-ledgers DIR`), so that what each user spent
/// survives a restart. Without it, an in-process table's ledgers live as
/// long as the process.
#[derive(Debug, Clone)]
pub(crate) struct LedgerFolder(pub std::path::PathBuf);

impl LedgerFolder {
    /// The ledger file of `client` of `table`.
    pub(crate) fn file(&self, table: &str, client: &str) -> std::path::PathBuf {
        self.0
            .join(format!("{}.{}.toml", file_part(table), file_part(client)))
    }
}

/// A name as a file name part: letters, digits, `-` and `_` as they are,
/// every other byte `%XX` (so two names never share a file).
fn file_part(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Appends the session's `fedsql.dp_epsilon` to every DP aggregate call
/// without an explicit epsilon, keeping the call's output name.
#[derive(Debug, Default)]
pub(crate) struct SessionEpsilon;

impl AnalyzerRule for SessionEpsilon {
    fn analyze(
        &self,
        plan: LogicalPlan,
        config: &ConfigOptions,
    ) -> datafusion::common::Result<LogicalPlan> {
        let epsilon = config
            .extensions
            .get::<FedsqlOptions>()
            .map_or(1.0, |o| o.dp_epsilon);
        Ok(plan
            .transform_up_with_subqueries(|node| {
                let LogicalPlan::Aggregate(agg) = node else {
                    return Ok(Transformed::no(node));
                };
                let mut changed = false;
                let aggr_expr: Vec<Expr> = agg
                    .aggr_expr
                    .iter()
                    .map(|e| with_epsilon(e, epsilon, &mut changed))
                    .collect();
                if !changed {
                    return Ok(Transformed::no(LogicalPlan::Aggregate(agg)));
                }
                let Aggregate {
                    input, group_expr, ..
                } = agg;
                Ok(Transformed::yes(LogicalPlan::Aggregate(
                    Aggregate::try_new(input, group_expr, aggr_expr)?,
                )))
            })?
            .data)
    }

    fn name(&self) -> &str {
        "fedsql_session_epsilon"
    }
}

/// `expr` with ε appended if it is a DP call without one (under its
/// original name).
fn with_epsilon(expr: &Expr, epsilon: f64, changed: &mut bool) -> Expr {
    let add = |f: &AggregateFunction| -> Option<Expr> {
        let (kind, _) = Kind::parse(f.func.name())?;
        if f.params.args.len() != kind.base_args() {
            return None;
        }
        let mut f = f.clone();
        f.params
            .args
            .push(Expr::Literal(ScalarValue::Float64(Some(epsilon)), None));
        Some(Expr::AggregateFunction(f))
    };
    match expr {
        Expr::Alias(alias) => match alias.expr.as_ref() {
            Expr::AggregateFunction(f) => match add(f) {
                Some(new) => {
                    *changed = true;
                    let mut alias = alias.clone();
                    alias.expr = Box::new(new);
                    Expr::Alias(alias)
                }
                None => expr.clone(),
            },
            _ => expr.clone(),
        },
        Expr::AggregateFunction(f) => match add(f) {
            Some(new) => {
                *changed = true;
                new.alias(expr.schema_name().to_string())
            }
            None => expr.clone(),
        },
        _ => expr.clone(),
    }
}

/// `SHOW PRIVACY BUDGET table`: per client, the analyst's total, spent and
/// remaining ε (as each client reports it).
pub(crate) async fn budget_batch(
    table: &str,
    clients: &[Arc<dyn Site>],
    analyst: &Analyst,
) -> Result<RecordBatch> {
    let mut names = Vec::new();
    let (mut budgets, mut spent, mut remaining) = (Vec::new(), Vec::new(), Vec::new());
    for client in clients {
        names.push(client.name().to_string());
        match client.privacy_budget(table, analyst).await? {
            Some(line) => {
                budgets.push(line.budget);
                spent.push(Some(line.spent));
                remaining.push(line.budget.map(|b| (b - line.spent).max(0.0)));
            }
            None => {
                budgets.push(None);
                spent.push(None);
                remaining.push(None);
            }
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("client", DataType::Utf8, false),
        Field::new("budget", DataType::Float64, true),
        Field::new("spent", DataType::Float64, true),
        Field::new("remaining", DataType::Float64, true),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(Float64Array::from(budgets)),
            Arc::new(Float64Array::from(spent)),
            Arc::new(Float64Array::from(remaining)),
        ],
    )?)
}

/// The factor of a standard deviation that covers 95% of the noise: the
/// 95% point of |Laplace| is 2.12 standard deviations, and a sum of
/// several independent noises is nearer the normal's 1.96 — so 2.12 is
/// never too narrow.
const INTERVAL_95: f64 = 2.12;

/// A notice per DP call of a round: mechanism, ε, and the standard
/// deviation and 95% interval of the noise in its result, given the
/// merged (noisy) `states` of its `clients`; `shares` is, for a secure
/// round (whose states are masked: only their sum is read), the number of
/// shares each site split its noise into and the round's threshold.
pub(crate) fn noise_notices(
    partial: &AggregateExec,
    states: &[StateBatch],
    shares: Option<(usize, usize)>,
) -> Result<Vec<String>> {
    let calls = dp_calls(partial)?;
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let clients = states.len();
    let groups = calls
        .iter()
        .map(|c| c.first_column)
        .min()
        .unwrap_or(0)
        .min(partial.group_expr().expr().len());
    let mut notices = Vec::new();
    let count = calls.len();
    let total: f64 = calls.iter().map(|c| c.release.epsilon).sum();
    for call in calls {
        let r = &call.release;
        let draws = r.noise_draws(clients, shares.map(|(d, _)| d));
        let sd = match r.params.kind {
            Kind::Count | Kind::Sum | Kind::Histogram => r.result_std_dev(draws, 0.0, 0.0),
            Kind::Avg | Kind::Var => {
                // The largest over the groups, at each group's merged state.
                let mut merged: HashMap<String, Vec<i64>> = HashMap::new();
                for state in states {
                    let batch = state.batch();
                    for row in 0..batch.num_rows() {
                        let mut key = String::new();
                        for c in 0..groups {
                            key.push_str(
                                &ScalarValue::try_from_array(batch.column(c), row)?.to_string(),
                            );
                            key.push('\u{1f}');
                        }
                        let sums = merged
                            .entry(key)
                            .or_insert_with(|| vec![0; r.columns.len()]);
                        for (i, total) in sums.iter_mut().enumerate() {
                            let column = batch.column(call.first_column + i);
                            // Masked states (UInt64) add up mod 2^64.
                            let v = match column.as_primitive_opt::<UInt64Type>() {
                                Some(masked) => masked.value(row) as i64,
                                None => column.as_primitive::<Int64Type>().value(row),
                            };
                            *total = total.wrapping_add(v);
                        }
                    }
                }
                merged
                    .values()
                    .map(|s| {
                        let n = s[0] as f64;
                        let (s1, s2) = (
                            s[1] as f64 * r.columns[1].step,
                            s.get(2).map_or(0.0, |v| *v as f64 * r.columns[2].step),
                        );
                        let value = match r.params.kind {
                            Kind::Avg => r.params.mid() + s1 / n.max(1.0),
                            _ => (s2 - s1 * s1 / n.max(1.0)) / (n - 1.0).max(1.0),
                        };
                        r.result_std_dev(draws, n, value)
                    })
                    .fold(0.0, f64::max)
            }
        };
        let approx = if matches!(r.params.kind, Kind::Avg | Kind::Var) {
            "≈ "
        } else {
            ""
        };
        let per = if r.params.kind == Kind::Histogram {
            " per bin"
        } else if groups > 0 {
            " per group"
        } else {
            ""
        };
        let shared = match (r.under_masks, shares) {
            (true, Some((d, t))) => format!(
                "; each added a 1/{d} share ({}), so the total carries {} of the noise",
                if d == t {
                    format!("threshold {t}")
                } else {
                    format!(
                        "threshold {t}, less the {} colluders the sites tolerate",
                        t - d
                    )
                },
                if clients == d {
                    "exactly one draw".to_string()
                } else {
                    format!("{clients}/{d} draws")
                }
            ),
            _ => String::new(),
        };
        notices.push(format!(
            "{}: differentially private ({}, ε = {} at each of {clients} client{}{shared}); noise std dev {approx}{}{per}, 95% interval ± {}",
            display_call(&call.name),
            r.mechanism(),
            r.epsilon,
            if clients == 1 { "" } else { "s" },
            format_sd(sd),
            format_sd(INTERVAL_95 * sd),
        ));
    }
    if count > 1 {
        // SET fedsql.dp_epsilon gives each call its ε: they add up.
        notices.push(format!(
            "this query spends ε = {} in all at each client (its {count} DP calls' ε add up)",
            (total * 1e9).round() / 1e9
        ));
    }
    Ok(notices)
}

/// A call's plan name as the user wrote it: `dp_count(*)` for the count
/// of rows, literals without their type (`Int64(10)` → `10`).
pub(crate) fn display_call(name: &str) -> String {
    let mut out = name.to_string();
    for wrapper in ["Int64(", "Int32(", "Float64(", "Float32(", "UInt64("] {
        while let Some(at) = out.find(wrapper) {
            let inner = at + wrapper.len();
            let Some(close) = out[inner..].find(')') else {
                break;
            };
            out = format!(
                "{}{}{}",
                &out[..at],
                &out[inner..inner + close],
                &out[inner + close + 1..]
            );
        }
    }
    for count in ["dp_count(", "secure_dp_count("] {
        if let Some(rest) = out.strip_prefix(&format!("{count}1"))
            && (rest.starts_with(')') || rest.starts_with(','))
        {
            out = format!("{count}*{rest}");
        }
    }
    out.replace(',', ", ")
}

fn format_sd(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e-3 && v.abs() < 1e7 {
        format!("{:.4}", v)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        format!("{v:.4e}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn calls_read_as_written() {
        assert_eq!(super::display_call("dp_count(Int64(1))"), "dp_count(*)");
        assert_eq!(
            super::display_call("dp_sum(clinic.visits,Int64(0),Int64(10),Float64(0.25))"),
            "dp_sum(clinic.visits, 0, 10, 0.25)"
        );
    }
}
