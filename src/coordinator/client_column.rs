//! `_client`: the virtual column of every federated table, the client's
//! name as `CREATE FEDERATED TABLE ... CLIENTS` (or the folder) named it.
//!
//! The name is shared information — the analyst chose it — so the column
//! can be selected, filtered on and grouped by like any other; grouped by,
//! it gives a per-site breakdown, and the sites' disclosure policies apply
//! to its groups as to any others. A site does not know the name the
//! coordinator gave it, and its rows have no such column: before an encoder
//! is sent to a client, [`bind_client_name`] takes the column out of the
//! federated scan and puts the client's name in its place as a literal
//! (a projection just above the scan). A table with a real column of that
//! name keeps it, and has no virtual one.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Column;
use datafusion::common::tree_node::Transformed;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::logical_expr::{Expr, LogicalPlan, Projection, TableScan, TableScanBuilder, lit};

use crate::error::Result;
use crate::protocol::encoder::Encoder;
use crate::protocol::federated_scan::FederatedScan;

/// The virtual column's name.
pub const CLIENT_COLUMN: &str = "_client";

/// The field metadata that marks the virtual column.
const VIRTUAL_KEY: &str = "fedsql.virtual";

/// Whether a field is the virtual `_client` column (not a real one).
pub fn is_virtual(field: &Field) -> bool {
    field.metadata().get(VIRTUAL_KEY).map(String::as_str) == Some("client")
}

/// The table's schema as a plan sees it: its columns and, unless one of
/// them is already called `_client`, the virtual `_client` at the end.
pub fn with_client_column(data: SchemaRef) -> SchemaRef {
    if data.field_with_name(CLIENT_COLUMN).is_ok() {
        return data;
    }
    let mut fields: Vec<Field> = data.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(
        Field::new(CLIENT_COLUMN, DataType::Utf8, false).with_metadata(HashMap::from([(
            VIRTUAL_KEY.to_string(),
            "client".to_string(),
        )])),
    );
    Arc::new(Schema::new_with_metadata(fields, data.metadata().clone()))
}

/// The schema without the virtual column: what a client's rows have.
pub fn data_schema(schema: &SchemaRef) -> SchemaRef {
    if !schema.fields().iter().any(|f| is_virtual(f)) {
        return Arc::clone(schema);
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .filter(|f| !is_virtual(f))
        .map(|f| f.as_ref().clone())
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The encoder as `client` must run it: every federated scan reads the
/// client's own columns only, and `_client` is the literal `client`.
pub fn bind_client_name(encoder: &Encoder, client: &str) -> Result<Encoder> {
    if !reads_virtual_column(encoder.plan()) {
        return Ok(encoder.clone());
    }
    encoder.rewritten(|plan| bind_plan(plan, client))
}

/// The encoder as every client runs it, when no scan of it shows
/// `_client` (nor filters on it): the binding then names no client, so one
/// binding serves the whole round. `None` when a scan shows the column.
pub fn bind_for_any_client(encoder: &Encoder) -> Result<Option<Encoder>> {
    if shows_virtual_column(encoder.plan()) {
        return Ok(None);
    }
    bind_client_name(encoder, "").map(Some)
}

/// Whether a federated scan of the plan outputs the virtual column or
/// has a filter on it.
fn shows_virtual_column(plan: &LogicalPlan) -> bool {
    let mut shown = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Some(position) = scan
                .source
                .schema()
                .fields()
                .iter()
                .position(|f| is_virtual(f))
        {
            shown |= scan
                .projection
                .as_ref()
                .is_none_or(|p| p.contains(&position))
                || scan
                    .filters
                    .iter()
                    .any(|f| f.column_refs().iter().any(|c| c.name == CLIENT_COLUMN));
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    shown
}

/// A plan with every federated scan bound as in [`bind_client_name`]
/// (for a plan that is not yet an encoder).
pub fn bind_plan(plan: LogicalPlan, client: &str) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::TableScan(scan) => bind_scan(scan, client),
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

fn reads_virtual_column(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && scan.source.schema().fields().iter().any(|f| is_virtual(f))
        {
            found = true;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

fn bind_scan(scan: TableScan, client: &str) -> datafusion::error::Result<Transformed<LogicalPlan>> {
    let schema = scan.source.schema();
    let (Some(position), Ok(provider)) = (
        schema.fields().iter().position(|f| is_virtual(f)),
        source_as_provider(&scan.source),
    ) else {
        return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
    };
    let Some(federated) = FederatedScan::of(provider.as_ref()) else {
        return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
    };
    let rows = FederatedScan::new(federated.name(), data_schema(&schema));
    let shown: Vec<usize> = scan
        .projection
        .clone()
        .unwrap_or_else(|| (0..schema.fields().len()).collect());
    let kept: Vec<usize> = shown
        .iter()
        .filter(|&&i| i != position)
        .map(|&i| if i > position { i - 1 } else { i })
        .collect();
    // Filters offered to the scan are inexact: the filter above still
    // applies them, so those on `_client` can simply be left out here.
    let filters: Vec<Expr> = scan
        .filters
        .into_iter()
        .filter(|f| !f.column_refs().iter().any(|c| c.name == CLIENT_COLUMN))
        .collect();
    let qualifier = scan.table_name.clone();
    let bound = LogicalPlan::TableScan(
        TableScanBuilder::new(qualifier.clone(), provider_as_source(Arc::new(rows)))
            .with_projection(Some(kept))
            .with_filters(filters)
            .with_fetch(scan.fetch)
            .build()?,
    );
    if !shown.contains(&position) {
        return Ok(Transformed::yes(bound));
    }
    let exprs: Vec<Expr> = shown
        .iter()
        .map(|&i| {
            let name = schema.field(i).name();
            if i == position {
                lit(client).alias_qualified(Some(qualifier.clone()), CLIENT_COLUMN)
            } else {
                Expr::Column(Column::new(Some(qualifier.clone()), name))
            }
        })
        .collect();
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(exprs, Arc::new(bound))?,
    )))
}
