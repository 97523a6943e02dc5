//! EXPLAIN FEDERATED: what runs where, and what leaves each client.
//!
//! For every round of a query it shows the encoder (the logical plan every
//! client runs, and the physical plan at one client), the state schema with
//! its size in bytes per group, the merge, and finally the shared-only
//! decoder run on the coordinator. Nothing is executed.
//!
//! `EXPLAIN ANALYZE FEDERATED` runs the query and reports what each round
//! cost per client: state rows, bytes sent and received, time
//! ([`analyze_batch`]).

use std::cmp::Ordering;
use std::fmt::{self, Write};
use std::sync::Arc;

use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchemaRef;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{
    EmptyRelation, Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::{ExecutionPlan, displayable};
use fedsql_udfs::{catalogue, cox_step};

use crate::coordinator::rounds;
use crate::coordinator::split::{self, Round};
use crate::error::Result;
use crate::protocol::exposure;
use crate::protocol::secure::SecureLayout;
use crate::protocol::site::Site;

/// The explanation of an optimized plan that reads federated tables.
pub(crate) async fn explain(state: &SessionState, plan: LogicalPlan) -> Result<String> {
    exposure::check(&plan, "the query")?;
    let mut out = String::new();
    // Two copies of the plan: in `planned`, a finished round's cut becomes
    // an empty relation of its schema (so that later rounds can be planned
    // without running it); in `shown`, a node that names the round.
    let mut planned = plan.clone();
    let mut shown = plan;
    let mut round_no = 0;
    while let (Some(cut), Some(cut_shown)) =
        (split::lowest_cut(&planned), split::lowest_cut(&shown))
    {
        round_no += 1;
        let round = split::plan_round(state, &cut).await?;
        let analyst = crate::coordinator::analyst::of(state.config());
        explain_round(&mut out, (round_no, &analyst), &round, &cut_shown).await?;
        let schema = Arc::clone(cut.schema());
        let placeholder = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: Arc::clone(&schema),
        });
        planned = split::substitute(planned, &cut, placeholder)?;
        let merged = MergedRound {
            round: round_no,
            table: round.table().name().to_string(),
            clients: round.table().clients().len(),
            schema,
        };
        let merged = LogicalPlan::Extension(Extension {
            node: Arc::new(merged),
        });
        shown = split::substitute(shown, &cut_shown, merged)?;
    }
    writeln!(out, "== Decoder: shared-only, on the coordinator ==").ok();
    writeln!(out, "{}", shown.display_indent()).ok();
    Ok(out)
}

/// Stands for a round's merged, decoded result in the decoder's plan.
#[derive(Debug, PartialEq, Eq, Hash)]
struct MergedRound {
    round: usize,
    table: String,
    clients: usize,
    schema: DFSchemaRef,
}

impl PartialOrd for MergedRound {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        self.round.partial_cmp(&other.round)
    }
}

impl UserDefinedLogicalNodeCore for MergedRound {
    fn name(&self) -> &str {
        "MergedRound"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "MergedRound: round {}, the final aggregate over the states of the {} clients of `{}`",
            self.round, self.clients, self.table
        )
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        _inputs: Vec<LogicalPlan>,
    ) -> datafusion::error::Result<Self> {
        Ok(Self {
            round: self.round,
            table: self.table.clone(),
            clients: self.clients,
            schema: Arc::clone(&self.schema),
        })
    }
}

/// Which disclosure rules each client applies to the round's state before
/// it leaves (the client enforces them; this only says so).
fn write_policies(out: &mut String, clients: &[Arc<dyn Site>]) {
    let policies: Vec<(String, String)> = clients
        .iter()
        .map(|c| (c.name().to_string(), c.policy()))
        .collect();
    if policies.iter().all(|(_, p)| p == "none") {
        writeln!(out, "-- disclosure policy: none at any client").ok();
        return;
    }
    writeln!(
        out,
        "-- disclosure policy, applied by each client to its state before it leaves \
         (every group and every aggregate input: 0 or at least min_group_rows values; \
         joins only with unique shared keys; t-digests coarsened to min_group_rows values per centroid):"
    )
    .ok();
    for (name, policy) in policies {
        writeln!(out, "--   {name}: {policy}").ok();
    }
}

async fn explain_round(
    out: &mut String,
    (round_no, analyst): (usize, &crate::protocol::site::Analyst),
    round: &Round,
    shown: &LogicalPlan,
) -> Result<()> {
    let table = round.table();
    let clients = table.clients();
    let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
    writeln!(
        out,
        "== Round {round_no}, encoder: runs at each of the {} clients of `{}` ({}) ==",
        clients.len(),
        table.name(),
        names.join(", ")
    )
    .ok();
    writeln!(out, "{}", shown.display_indent()).ok();
    write_policies(out, clients);
    if let Some(first) = clients.first() {
        writeln!(out, "-- physical, at client '{}':", first.name()).ok();
        write!(
            out,
            "{}",
            first
                .explain(&crate::protocol::site::SiteRequest::new(
                    &round.encoder_for(first.name())?,
                    analyst
                ))
                .await?
        )
        .ok();
    }

    let schema = round.encoder.state_schema();
    let layout = SecureLayout::of(&round.partial)?;
    let groups = layout.key_columns;
    writeln!(
        out,
        "== Round {round_no}, state: what leaves each client, one row per group{} ==",
        if groups == 0 {
            " (one row: no GROUP BY)"
        } else {
            ""
        }
    )
    .ok();
    let mut fixed = 0usize;
    let mut variable = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let role = if i < groups {
            "group key"
        } else if layout.secure_columns.contains(&i) {
            "secure (masked)"
        } else {
            "state"
        };
        let size = match field_size(field) {
            // A secure list state: one masked UInt64 per value of the call.
            FieldSize::Variable(_) if layout.secure_columns.contains(&i) => {
                FieldSize::Variable("8 B per value".into())
            }
            size => size,
        };
        match size {
            FieldSize::Fixed(n) => fixed += n,
            FieldSize::Variable(ref what) => variable.push(format!("{} ({what})", field.name())),
        }
        writeln!(
            out,
            "  {:<48} {:<28} {:<10} {}",
            field.name(),
            field.data_type().to_string(),
            role,
            size
        )
        .ok();
    }
    // Differential privacy: the mechanism, ε and scale of each DP state column.
    let dp_lines = crate::protocol::dp::explain_lines(&round.partial, clients.len())?;
    if !dp_lines.is_empty() {
        writeln!(out, "  noise added by each client before its state leaves:").ok();
        for line in dp_lines {
            writeln!(out, "  {line}").ok();
        }
    }
    if variable.is_empty() {
        writeln!(
            out,
            "  size: {fixed} bytes per group per client, whatever the number of rows"
        )
        .ok();
    } else {
        writeln!(
            out,
            "  size: {fixed} bytes per group per client plus {}; bounded whatever the number of rows",
            variable.join(", ")
        )
        .ok();
    }

    let decode = crate::coordinator::merge::merge_and_decode(&round.partial, &[])?;
    if layout.is_secure() {
        writeln!(
            out,
            "== Round {round_no}, secure merge: the secure (masked) columns are a double-masked sum mod 2^64 (t of n sites) =="
        )
        .ok();
        writeln!(
            out,
            "  each client adds a self mask and pairwise masks (X25519 keys fresh per round, HKDF-SHA256, ChaCha20) mod 2^64 to its secure columns; pairwise masks cancel in the sum, and the sites' Shamir shares (sealed site to site) let the coordinator remove the self masks and the masks of sites that drop out after masking, so it sees only masked states and the total over the sites that took part{}",
            if layout.secure_columns.len() + groups < schema.fields().len() {
                "; the other state columns are sent in plain"
            } else {
                ""
            }
        )
        .ok();
        if groups > 0 {
            writeln!(
                out,
                "  group keys are not masked: the coordinator learns which groups each client has, and sends every client the union to align to"
            )
            .ok();
        }
    }
    writeln!(
        out,
        "== Round {round_no}, merge + decode: the clients' states merged (a commutative monoid: any arrival order) by the final aggregate =="
    )
    .ok();
    let decode = displayable(decode.as_ref() as &dyn ExecutionPlan)
        .indent(false)
        .to_string();
    // The states' source is filled at run time; say what it holds.
    let states = format!(
        "ClientStates: one state batch from each of the {} clients",
        clients.len()
    );
    write!(
        out,
        "{}",
        decode.replace("DataSourceExec: partitions=1, partition_sizes=[0]", &states)
    )
    .ok();
    Ok(())
}

enum FieldSize {
    Fixed(usize),
    Variable(String),
}

impl std::fmt::Display for FieldSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldSize::Fixed(n) => write!(f, "{n} B"),
            FieldSize::Variable(what) => f.write_str(what),
        }
    }
}

/// Bytes a state field takes per group (value plus validity is ignored).
fn field_size(field: &Field) -> FieldSize {
    let t = field.data_type();
    if let Some(width) = t.primitive_width() {
        return FieldSize::Fixed(width);
    }
    match t {
        DataType::FixedSizeList(item, n) => match field_size(item) {
            FieldSize::Fixed(width) => FieldSize::Fixed(width * *n as usize),
            variable => variable,
        },
        DataType::Boolean => FieldSize::Fixed(1),
        DataType::Null => FieldSize::Fixed(0),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::List(_)
        | DataType::LargeList(_)
            if let Some(what) = catalogue::variable_state_of_field(field.name()) =>
        {
            FieldSize::Variable(what.into())
        }
        // cox_step: a partial stage hands its rows to the site's own reduce,
        // whose state (what leaves the site) has this list empty.
        DataType::List(_) if cox_step::is_site_rows(field.name()) => FieldSize::Variable(
            "empty when it leaves the site: rows stay in the site's partial stage".into(),
        ),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            FieldSize::Variable("one text value".into())
        }
        DataType::Struct(fields) => {
            let mut total = 0;
            for f in fields {
                match field_size(f) {
                    FieldSize::Fixed(n) => total += n,
                    v @ FieldSize::Variable(_) => return v,
                }
            }
            FieldSize::Fixed(total)
        }
        _ => FieldSize::Variable("bounded".into()),
    }
}

/// `EXPLAIN ANALYZE FEDERATED`: after running the statement (a query, or
/// a model fit with all its rounds), one row per round and client: the
/// state rows; the bytes sent to the client (the encoder's plan and
/// parameters; NULL for an in-process client, where nothing crosses a
/// wire); the bytes received (from a worker: the Flight frames of the
/// state, as they arrived; in-process: the state's Arrow IPC size); the
/// time; `state_bytes`, the Arrow IPC size of the state — the number a
/// worker's log prints when it releases it ("released ... N bytes"); and
/// what the client computed (the encoder's aggregates and grouping).
pub(crate) fn analyze_batch(reports: &[rounds::RoundReport]) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("round", DataType::Int64, false),
        Field::new("table", DataType::Utf8, false),
        Field::new("client", DataType::Utf8, false),
        Field::new("state_rows", DataType::Int64, false),
        Field::new("bytes_sent", DataType::Int64, true),
        Field::new("bytes_received", DataType::Int64, false),
        Field::new("time_ms", DataType::Float64, false),
        Field::new("state_bytes", DataType::Int64, false),
        Field::new("computes", DataType::Utf8, false),
    ]));
    let (mut rounds, mut tables, mut clients) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rows, mut sent, mut received, mut times) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut state_bytes, mut computes) = (Vec::new(), Vec::new());
    for (i, report) in reports.iter().enumerate() {
        for (j, (client, state_rows, bytes, time)) in report.clients.iter().enumerate() {
            let traffic = report.traffic.get(j).copied().unwrap_or_default();
            rounds.push(i as i64 + 1);
            tables.push(report.table.clone());
            clients.push(client.clone());
            rows.push(*state_rows as i64);
            sent.push(traffic.sent.map(|s| s as i64));
            received.push(traffic.received as i64);
            times.push(time.as_secs_f64() * 1000.0);
            state_bytes.push(*bytes as i64);
            computes.push(report.computes.clone());
        }
    }
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(rounds)),
            Arc::new(StringArray::from(tables)),
            Arc::new(StringArray::from(clients)),
            Arc::new(Int64Array::from(rows)),
            Arc::new(Int64Array::from(sent)),
            Arc::new(Int64Array::from(received)),
            Arc::new(Float64Array::from(times)),
            Arc::new(Int64Array::from(state_bytes)),
            Arc::new(StringArray::from(computes)),
        ],
    )?)
}

/// The line under an `EXPLAIN ANALYZE FEDERATED` table: rounds run, and
/// the totals per client.
pub(crate) fn analyze_summary(reports: &[rounds::RoundReport]) -> String {
    let mut per_client: Vec<(String, usize, usize, f64)> = Vec::new();
    for report in reports {
        for (j, (client, _, _, time)) in report.clients.iter().enumerate() {
            let received = report.traffic.get(j).map_or(0, |t| t.received);
            match per_client.iter_mut().find(|(c, ..)| c == client) {
                Some(entry) => {
                    entry.1 += 1;
                    entry.2 += received;
                    entry.3 += time.as_secs_f64() * 1000.0;
                }
                None => per_client.push((client.clone(), 1, received, time.as_secs_f64() * 1000.0)),
            }
        }
    }
    let totals: Vec<String> = per_client
        .iter()
        .map(|(c, n, bytes, ms)| format!("{c}: {n} rounds, {bytes} bytes received, {ms:.1} ms"))
        .collect();
    let secure: String = reports
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.secure
                .as_ref()
                .map(|s| format!("\nround {}, secure aggregation: {s}", i + 1))
        })
        .collect();
    format!(
        "{} federated round(s) run; per client: {}{secure}",
        reports.len(),
        totals.join("; ")
    )
}
