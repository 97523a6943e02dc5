//! The admin page's HTML, rendered on the server with maud (every value
//! escaped: an audit record's summary holds what an analyst wrote).

use axum::response::Html;
use maud::{DOCTYPE, Markup, html};

use crate::site::worker::approvals::{self, ApprovalRecord};
use crate::site::worker::audit::AuditEntry;
use crate::site::worker::profiles::Profile;
use crate::site::worker::service::Overview;

/// How many of the latest audit records the page shows.
const LATEST: usize = 50;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}\
table{border-collapse:collapse;margin:0.5rem 0 1.5rem}\
th,td{border:1px solid #ccc;padding:0.25rem 0.5rem;text-align:left;vertical-align:top;font-size:0.9rem}\
th{background:#f3f3f3}td.request{font-family:monospace;max-width:40rem;word-break:break-all}\
.released{color:#176317}.refused{color:#a31515}.pending{color:#8a5a00}\
form.inline{display:inline}button{margin-right:0.3rem}";

fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { (STYLE) }
            }
            body { (body) }
        }
    }
}

/// The sign-in form (all an unauthenticated caller sees).
pub(super) fn sign_in(problem: Option<&str>) -> Html<String> {
    Html(layout(
        "fedsql worker admin: sign in",
        html! {
            h1 { "fedsql worker admin" }
            @if let Some(problem) = problem { p.refused { (problem) } }
            form method="post" action="/login" {
                label { "Admin token " input type="password" name="token" autocomplete="off" autofocus; }
                " "
                button type="submit" id="sign-in" { "Sign in" }
            }
        },
    )
    .into_string())
}

/// The latest `n` records of an audit file (a torn or unreadable line is skipped).
fn latest_records(path: &std::path::Path, n: usize) -> Vec<AuditEntry> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str(l).ok())
        .take(n)
        .collect()
}

fn profile_cells(profile: Option<&Profile>) -> Markup {
    let list =
        |items: Option<Vec<String>>| items.map_or_else(|| "all".to_string(), |v| v.join(", "));
    html! {
        @match profile {
            None => td colspan="7" { "no profile: the tables' policies alone" },
            Some(p) => {
                td { (p.name) }
                td { (list(p.tables.as_ref().map(|t| t.iter().cloned().collect()))) }
                td { (list(p.functions.clone())) }
                td { (if p.deny_columns.is_empty() { "none".to_string() } else { p.deny_columns.iter().cloned().collect::<Vec<_>>().join(", ") }) }
                td { (p.min_group_rows.map_or_else(|| "policy's".to_string(), |k| k.to_string())) }
                td { (p.dp_budget.map_or_else(|| "policy's".to_string(), |b| b.to_string())) (if p.require_dp { ", DP only" } else { "" }) (if p.require_secure { ", masked only" } else { "" }) }
                td { (if p.manual_approval { "manual" } else { "none" }) }
            }
        }
    }
}

/// The page: policy, analysts, budgets, pending approvals, latest requests.
pub(super) fn index(overview: &Overview, csrf: &str) -> Html<String> {
    let pending: Vec<ApprovalRecord> = overview
        .approvals
        .as_ref()
        .and_then(|p| approvals::current(p).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.status == "pending")
        .collect();
    let records = overview
        .audit
        .as_ref()
        .map(|p| latest_records(p, LATEST))
        .unwrap_or_default();
    Html(layout(
        "fedsql worker admin",
        html! {
            h1 { "fedsql worker admin" }
            @if !csrf.is_empty() {
                form.inline method="post" action="/logout" {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Sign out" }
                }
            }
            h2 { "Tables and their policy" }
            table id="tables" {
                tr { th { "table" } th { "disclosure policy" } th { "differential privacy" } th { "approval" } }
                @for t in &overview.tables {
                    tr { td { (t.name) } td { (t.policy) } td { (t.dp) } td { (if t.manual_approval { "manual" } else { "none" }) } }
                }
            }
            h2 { "Analysts and their profiles" }
            table id="analysts" {
                tr { th { "analyst" } th { "profile" } th { "tables" } th { "functions" } th { "denied columns" } th { "min_group_rows" } th { "dp_budget" } th { "approval" } }
                @for (name, profile) in &overview.analysts {
                    tr { td { (name) } (profile_cells(profile.as_deref())) }
                }
            }
            h2 { "Privacy budget" }
            table id="budgets" {
                tr { th { "analyst" } th { "table" } th { "spent ε" } th { "budget ε" } th { "left ε" } }
                @for b in &overview.budgets {
                    tr {
                        td { (b.analyst) } td { (b.table) } td { (format!("{:.4}", b.line.spent)) }
                        td { (b.line.budget.map_or_else(|| "unlimited".to_string(), |x| x.to_string())) }
                        td { (b.line.budget.map_or_else(|| "unlimited".to_string(), |x| format!("{:.4}", (x - b.line.spent).max(0.0)))) }
                    }
                }
            }
            h2 { "Requests awaiting approval" }
            @if overview.approvals.is_none() {
                p { "No table or profile asks for manual approval." }
            } @else if pending.is_empty() {
                p id="no-pending" { "None." }
            } @else {
                table id="pending" {
                    tr { th { "id" } th { "since" } th { "analyst" } th { "table" } th { "request" } th { "decision" } }
                    @for r in &pending {
                        tr id=(format!("pending-{}", r.id)) {
                            td { code { (r.id) } } td { (r.time) } td { (r.analyst) } td { (r.table) } td.request { (r.request) }
                            td {
                                form.inline method="post" action=(format!("/approvals/{}/approve", r.id)) {
                                    input type="hidden" name="csrf" value=(csrf);
                                    button type="submit" id=(format!("approve-{}", r.id)) { "Approve" }
                                }
                                form.inline method="post" action=(format!("/approvals/{}/deny", r.id)) {
                                    input type="hidden" name="csrf" value=(csrf);
                                    button type="submit" id=(format!("deny-{}", r.id)) { "Deny" }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Latest requests" }
            @if overview.audit.is_none() {
                p { "This worker keeps no audit trail (--audit-log none)." }
            } @else {
                table id="requests" {
                    tr { th { "time" } th { "analyst" } th { "peer" } th { "table" } th { "decision" } th { "rule" } th { "groups" } th { "rows" } th { "ε" } th { "bytes" } th { "ms" } th { "request" } }
                    @for r in &records {
                        tr {
                            td { (r.time) } td { (r.analyst) } td { (r.peer) } td { (r.table) }
                            td class=(r.decision) { (r.decision) }
                            td { (r.rule.clone().unwrap_or_default()) }
                            td { (r.groups) } td { (r.rows) } td { (r.epsilon) } td { (r.bytes) } td { (r.duration_ms) }
                            td.request { (r.request) }
                        }
                    }
                }
            }
        },
    )
    .into_string())
}
