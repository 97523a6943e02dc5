//! What a worker's audit trail records of an encoder run: the request's
//! one-line summary and fingerprint, and what the call knows when it is
//! recorded ([`Outcome`]); `WorkerService::record` in `calls` writes it.

use datafusion::common::Column;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};
use tonic::Status;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::source_as_provider;

use crate::protocol::codec::InlineTable;
use crate::site::worker::audit::fingerprint;

/// The longest request summary kept in a record.
const MAX_SUMMARY: usize = 2000;

/// An encoder's audit view: its summary and fingerprint.
pub(super) struct Described {
    pub(super) request: String,
    pub(super) fingerprint: String,
}

/// A fit step's coefficients masked as `?` (they change each round): the
/// literal arguments of an aggregate the catalogue marks as a fit's step
/// (`shares_constants`; its coefficients ride in its config string or a
/// list literal), not the literals inside its data arguments' expressions.
/// Every other literal stays: a request merely flagged as a fit's round (the flag is
/// the coordinator's to set) could otherwise change an approved
/// aggregate's constants (`CASE WHEN age < 50` to `< 37`) under the same
/// fingerprint — the eighth outside attack did so.
fn masked(expr: &Expr) -> Expr {
    expr.clone()
        .transform(|e| {
            let Expr::AggregateFunction(mut f) = e else {
                return Ok(Transformed::no(e));
            };
            let fit_step = fedsql_udfs::catalogue::aggregate(f.func.name())
                .is_some_and(|a| a.shares_constants);
            if !fit_step {
                return Ok(Transformed::no(Expr::AggregateFunction(f)));
            }
            for arg in f.params.args.iter_mut() {
                let literal = match arg {
                    Expr::Literal(..) => true,
                    Expr::Cast(c) => matches!(*c.expr, Expr::Literal(..)),
                    Expr::TryCast(c) => matches!(*c.expr, Expr::Literal(..)),
                    _ => false,
                };
                if literal {
                    *arg = Expr::Column(Column::from_name("?"));
                }
            }
            Ok(Transformed::yes(Expr::AggregateFunction(f)))
        })
        .map(|t| t.data)
        .unwrap_or_else(|_| expr.clone())
}

/// `expr` with its fit steps' literal arguments (those [`masked`] shows as
/// `?`) made NULLs of their types: the aggregates a fit's rounds share,
/// whatever their coefficients.
fn nulled(expr: &Expr) -> Expr {
    use datafusion::common::ScalarValue;
    let null_of =
        |value: &ScalarValue| ScalarValue::try_from(value.data_type()).unwrap_or(ScalarValue::Null);
    expr.clone()
        .transform(|e| {
            let Expr::AggregateFunction(mut f) = e else {
                return Ok(Transformed::no(e));
            };
            let fit_step = fedsql_udfs::catalogue::aggregate(f.func.name())
                .is_some_and(|a| a.shares_constants);
            if !fit_step {
                return Ok(Transformed::no(Expr::AggregateFunction(f)));
            }
            for arg in f.params.args.iter_mut() {
                match arg {
                    Expr::Literal(value, _) => *value = null_of(value),
                    Expr::Cast(datafusion::logical_expr::Cast { expr, .. })
                    | Expr::TryCast(datafusion::logical_expr::TryCast { expr, .. }) => {
                        if let Expr::Literal(value, _) = expr.as_mut() {
                            *value = null_of(value);
                        }
                    }
                    _ => {}
                }
            }
            Ok(Transformed::yes(Expr::AggregateFunction(f)))
        })
        .map(|t| t.data)
        .unwrap_or_else(|_| expr.clone())
}

/// The summary and fingerprint of an encoder's plan; `fit`: its fit
/// steps' coefficients are masked (see [`masked`]).
pub(super) fn describe(plan: &LogicalPlan, fit: bool) -> Described {
    let LogicalPlan::Aggregate(agg) = plan else {
        let text = plan.display_indent().to_string();
        return Described {
            request: String::new(),
            fingerprint: fingerprint(&text),
        };
    };
    let aggregates: Vec<Expr> = agg
        .aggr_expr
        .iter()
        .map(|e| if fit { masked(e) } else { e.clone() })
        .collect();
    let join = |exprs: &[Expr]| {
        exprs
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut filters = Vec::new();
    let mut functions = std::collections::BTreeSet::new();
    let _ = agg.input.apply_with_subqueries(|node| {
        if let LogicalPlan::Filter(filter) = node {
            filters.push(filter.predicate.to_string());
        }
        for expr in node.expressions() {
            let _ = expr.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    functions.insert(f.func.name().to_string());
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let mut request = format!("aggregates: {}", join(&aggregates));
    if !agg.group_expr.is_empty() {
        request += &format!("; group by: {}", join(&agg.group_expr));
    }
    if !filters.is_empty() {
        request += &format!("; filters: {}", filters.join(" AND "));
    }
    if !functions.is_empty() {
        request += &format!(
            "; functions: {}",
            functions.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    // One line, and nothing a terminal would obey (an analyst's literal
    // could hold escape sequences that hide the rest of the summary).
    let request: String = request
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let (shared_text, shared) = shared_rows(&agg.input);
    let request = if shared > 0 {
        format!("{request}; shared rows: {shared} (in the fingerprint)")
    } else {
        request
    };
    let request = if request.len() > MAX_SUMMARY {
        let mut end = MAX_SUMMARY;
        while !request.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &request[..end])
    } else {
        request
    };
    // The plan's structure, not its text (plans that print alike differ:
    // a column named "t.x" beside the qualified t.x, `x - (x - x)` beside
    // `(x - x) - x`): the digest of its datafusion-proto encoding.
    let structure = |plan: &LogicalPlan| {
        crate::site::release::secure::encoder_digest(plan)
            .map(|d| d.iter().map(|b| format!("{b:02x}")).collect::<String>())
            .unwrap_or_else(|_| format!("text:\n{}", plan.display_indent()))
    };
    // A fit's round: the structure of the same plan with its fit steps'
    // literal arguments made typed NULLs (the ninth outside attack had
    // `sum(a - (b + c))` share the approval of `sum(a - b + c)` when the
    // aggregates were compared by their text). Should that plan not
    // build, nothing is masked.
    let shown = if fit {
        let nulled: Vec<Expr> = agg.aggr_expr.iter().map(nulled).collect();
        datafusion::logical_expr::Aggregate::try_new(
            std::sync::Arc::clone(&agg.input),
            agg.group_expr.clone(),
            nulled,
        )
        .map(LogicalPlan::Aggregate)
        .unwrap_or_else(|_| plan.clone())
    } else {
        plan.clone()
    };
    let canonical = format!("plan: {}\nshared rows:\n{}", structure(&shown), shared_text);
    Described {
        request,
        fingerprint: fingerprint(&canonical),
    }
}

/// The rows a plan carries itself (`VALUES` and inline shared tables),
/// written out, and how many: they decide which of the site's rows a
/// filter or join keeps, so they are part of what a fingerprint names.
fn shared_rows(plan: &LogicalPlan) -> (String, usize) {
    let mut text = String::new();
    let mut rows = 0;
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Values(values) => {
                rows += values.values.len();
                text += &format!("values {:?}\n", values.values);
            }
            LogicalPlan::TableScan(scan) => {
                if let Ok(provider) = source_as_provider(&scan.source)
                    && let Some(inline) = provider.downcast_ref::<InlineTable>()
                {
                    rows += inline.num_rows();
                    for batch in inline.batches() {
                        let shown = pretty_format_batches(std::slice::from_ref(batch))
                            .map(|t| t.to_string())
                            .unwrap_or_else(|e| format!("unprintable: {e}"));
                        text += &format!("inline {}\n{shown}\n", scan.table_name);
                    }
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (text, rows)
}

/// What an audited call knows when it is recorded.
#[derive(Default)]
pub(super) struct Outcome<'a> {
    pub(super) table: &'a str,
    pub(super) described: Option<&'a Described>,
    pub(super) refusal: Option<&'a Status>,
    pub(super) groups: u64,
    pub(super) rows: u64,
    pub(super) epsilon: f64,
    pub(super) bytes: u64,
    /// Refused because it awaits the data owner's approval.
    pub(super) pending: bool,
}
