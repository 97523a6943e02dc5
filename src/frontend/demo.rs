//! The bundled demo federation: a federated table `clinic` over four clinics.
//!
//! The four client files of `testdata/clinic/` (synthetic patient records,
//! written by `testdata/generate_clinic.py`) are compiled into the binary, so
//! the REPL and the example queries in `queries/` work from any directory
//! without setup. Each file becomes one in-memory site ([`crate::site::in_process`]), exactly as
//! a CSV client on disk would be, and together they form the federated table
//! `clinic`. Tests can write [`DEMO_CLIENTS`] to disk to compare this bundled
//! table with one created by `CREATE FEDERATED TABLE` over the same files.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::csv::ReaderBuilder;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::FedContext;
use crate::coordinator::federated_table::FederatedTable;
use crate::error::{FedError, Result};
use crate::site::in_process::{Rows, SiteSettings};

/// Name of the demo federated table.
pub const DEMO_TABLE: &str = "clinic";

/// The demo's clients as `(client name, CSV text with a header row)`, in the
/// order they are registered.
pub const DEMO_CLIENTS: &[(&str, &str)] = &[
    (
        "hospital_a",
        include_str!("../../testdata/clinic/hospital_a.csv"),
    ),
    (
        "hospital_b",
        include_str!("../../testdata/clinic/hospital_b.csv"),
    ),
    (
        "hospital_c",
        include_str!("../../testdata/clinic/hospital_c.csv"),
    ),
    (
        "clinic_d",
        include_str!("../../testdata/clinic/clinic_d.csv"),
    ),
];

/// Rows per batch when parsing a bundled file (they are a few hundred rows).
const BATCH_SIZE: usize = 1024;

/// The schema of `clinic`, as the CSV files' columns come, all nullable.
pub fn demo_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("region", DataType::Utf8, true),
        Field::new("age", DataType::Int64, true),
        Field::new("sex", DataType::Utf8, true),
        Field::new("bmi", DataType::Float64, true),
        Field::new("systolic", DataType::Int64, true),
        Field::new("smoker", DataType::Int64, true),
        Field::new("event", DataType::Int64, true),
        Field::new("visits", DataType::Int64, true),
    ]))
}

/// Registers the federated table `clinic` (replacing any table of that name)
/// with one client per bundled CSV file, each under a worker's default
/// disclosure policy, so that a newcomer meets the rules a deployment has.
pub fn register_demo(ctx: &FedContext) -> Result<()> {
    register_demo_with(ctx, true)
}

/// Registers `clinic` as [`register_demo`] does, with every client under a
/// worker's default policy or (`with_policy` false, for comparing every
/// aggregate) under none.
pub fn register_demo_with(ctx: &FedContext, with_policy: bool) -> Result<()> {
    let schema = demo_schema();
    // The demo's public domains, so that DP queries may group by region
    // and sex (each client then releases a noisy state for every value);
    // `min_group_rows` at its default brings a worker's default policy.
    let mut options = vec![
        (
            "dp_domain.region".to_string(),
            "east,north,south,west".to_string(),
        ),
        ("dp_domain.sex".to_string(), "F,M".to_string()),
    ];
    if with_policy {
        options.push(("min_group_rows".to_string(), "5".to_string()));
    }
    let settings = SiteSettings::from_options(&options)?;
    let engine = ctx.site_engine();
    let clients = DEMO_CLIENTS
        .iter()
        .map(|(name, csv)| {
            let location = bundled_location(name);
            let batches = parse_client(name, &location, csv, &schema)?;
            let rows = Rows::Batches {
                name,
                location: &location,
                batches,
            };
            settings.site(rows, Arc::clone(&schema), None, Arc::clone(&engine))
        })
        .collect::<Result<Vec<_>>>()?;
    ctx.register_federated(FederatedTable::new(DEMO_TABLE, schema, clients))
}

/// Where a bundled client's rows came from, as `\clients` shows it.
fn bundled_location(name: &str) -> String {
    format!("<bundled>/{name}.csv")
}

/// Parses one bundled CSV file against the demo schema. The header must name
/// the schema's columns in order, so a regenerated file with other columns
/// fails here (and in the unit test) rather than being read by position.
fn parse_client(
    name: &str,
    location: &str,
    csv: &str,
    schema: &SchemaRef,
) -> Result<Vec<RecordBatch>> {
    let client_error = |message: String| FedError::Client {
        client: name.to_string(),
        location: location.to_string(),
        message,
    };
    let reader = ReaderBuilder::new(Arc::clone(schema))
        .with_header(true)
        .with_header_validation(true)
        .with_batch_size(BATCH_SIZE)
        .build(Cursor::new(csv.as_bytes()))
        .map_err(|e| client_error(format!("cannot read the bundled CSV: {e}")))?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| client_error(format!("cannot parse the bundled CSV: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_client_parses_with_all_columns() {
        let schema = demo_schema();
        assert_eq!(DEMO_CLIENTS.len(), 4);
        let mut total = 0;
        for (name, csv) in DEMO_CLIENTS {
            let batches = parse_client(name, &bundled_location(name), csv, &schema).unwrap();
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            let lines = csv.lines().count() - 1;
            assert_eq!(rows, lines, "client {name}: every data line is one row");
            for batch in &batches {
                assert_eq!(batch.num_columns(), 8, "client {name}");
                assert_eq!(batch.schema(), schema, "client {name}");
                for column in [
                    "region", "age", "sex", "systolic", "smoker", "event", "visits",
                ] {
                    let index = schema.index_of(column).unwrap();
                    assert_eq!(
                        batch.column(index).null_count(),
                        0,
                        "client {name}: `{column}` has no NULLs"
                    );
                }
            }
            // Every site has enough rows to teach under a worker's policy.
            assert!(rows >= 150, "client {name} has {rows} rows");
            total += rows;
        }
        assert!(total >= 4 * 150, "{total}");
    }

    #[test]
    fn some_bmi_values_are_null() {
        let schema = demo_schema();
        let index = schema.index_of("bmi").unwrap();
        let nulls: usize = DEMO_CLIENTS
            .iter()
            .flat_map(|(name, csv)| {
                parse_client(name, &bundled_location(name), csv, &schema).unwrap()
            })
            .map(|batch| batch.column(index).null_count())
            .sum();
        assert!(nulls > 0, "the demo should show how aggregates skip NULLs");
    }

    #[test]
    fn register_demo_adds_a_federated_table_with_four_clients() {
        let ctx = FedContext::new();
        register_demo(&ctx).unwrap();
        let provider =
            futures::executor::block_on(ctx.session().table_provider(DEMO_TABLE)).unwrap();
        let table = FederatedTable::from_provider(provider.as_ref()).expect("a federated table");
        let names: Vec<&str> = table.clients().iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            ["hospital_a", "hospital_b", "hospital_c", "clinic_d"]
        );
        assert_eq!(table.clients()[0].location(), "<bundled>/hospital_a.csv");
    }
}
