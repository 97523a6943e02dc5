//! EXPLAIN FEDERATED: what runs where, and what leaves each client.
//!
//! For every round of a query it shows the encoder (the logical plan every
//! client runs, and the physical plan at one client), the state schema with
//! its size in bytes per group, the merge, and finally the shared-only
//! decoder run on the coordinator. Nothing is executed.

use std::fmt::Write;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::physical_plan::{ExecutionPlan, displayable};

use crate::encoder;
use crate::error::Result;
use crate::exposure;
use crate::round::{self, Round};

/// The explanation of an optimized plan that reads federated tables.
pub async fn explain(state: &SessionState, plan: LogicalPlan) -> Result<String> {
    exposure::check(&plan, "the query")?;
    let mut out = String::new();
    let mut plan = plan;
    let mut round_no = 0;
    while let Some(cut) = round::lowest_cut(&plan) {
        round_no += 1;
        let round = round::plan_round(state, &cut).await?;
        explain_round(&mut out, round_no, &round).await?;
        // Later rounds see this round's result as a shared input.
        let placeholder = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: false,
            schema: std::sync::Arc::clone(cut.schema()),
        });
        plan = round::substitute(plan, &cut, placeholder)?;
    }
    let physical = state.query_planner().create_physical_plan(&plan, state).await?;
    writeln!(out, "== Decoder: shared-only, on the coordinator ==").ok();
    if round_no > 1 {
        writeln!(out, "(an EmptyRelation stands for an earlier round's merged result)").ok();
    }
    writeln!(out, "{}", plan.display_indent()).ok();
    writeln!(out, "-- physical:").ok();
    write!(out, "{}", displayable(physical.as_ref()).indent(false)).ok();
    Ok(out)
}

async fn explain_round(out: &mut String, round_no: usize, round: &Round) -> Result<()> {
    let table = round.encoder.table();
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
    writeln!(out, "{}", round.encoder.plan().display_indent()).ok();
    if let Some(first) = clients.first() {
        writeln!(out, "-- physical, at client '{}':", first.name()).ok();
        write!(out, "{}", first.explain(&round.encoder).await?).ok();
    }

    let schema = round.encoder.state_schema();
    let groups = round.partial.group_expr().expr().len();
    writeln!(
        out,
        "== Round {round_no}, state: what leaves each client, one row per group{} ==",
        if groups == 0 { " (one row: no GROUP BY)" } else { "" }
    )
    .ok();
    let mut fixed = 0usize;
    let mut variable = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let role = if i < groups || field.name() == "__grouping_id" {
            "group key"
        } else {
            "state"
        };
        let size = field_size(field);
        match size {
            FieldSize::Fixed(n) => fixed += n,
            FieldSize::Variable(ref what) => variable.push(format!("{} ({what})", field.name())),
        }
        writeln!(out, "  {:<48} {:<28} {:<10} {}", field.name(), field.data_type().to_string(), role, size).ok();
    }
    if variable.is_empty() {
        writeln!(out, "  size: {fixed} bytes per group per client, whatever the number of rows").ok();
    } else {
        writeln!(
            out,
            "  size: {fixed} bytes per group per client plus {}; bounded whatever the number of rows",
            variable.join(", ")
        )
        .ok();
    }

    let decode = encoder::merge_and_decode(&round.partial, &[])?;
    writeln!(
        out,
        "== Round {round_no}, merge + decode: the clients' states merged (a commutative monoid: any arrival order) by the final aggregate =="
    )
    .ok();
    write!(out, "{}", displayable(decode.as_ref() as &dyn ExecutionPlan).indent(false)).ok();
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
        DataType::Boolean => FieldSize::Fixed(1),
        DataType::Null => FieldSize::Fixed(0),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
            if field.name().contains("approx_distinct") =>
        {
            FieldSize::Variable("HyperLogLog registers, at most 16 KiB".into())
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)
            if field.name().contains("approx_percentile") || field.name().contains("approx_median") =>
        {
            FieldSize::Variable("t-digest centroids, at most 100".into())
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => FieldSize::Variable("one text value".into()),
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
