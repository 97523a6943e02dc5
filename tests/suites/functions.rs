//! The functions fedsql adds are listed and documented where a user looks:
//! `SHOW FUNCTIONS` and `information_schema.routines` list every aggregate
//! and table function with a description, and the example of every
//! function on the generated reference page (`docs/reference/functions.md`,
//! kept current by a unit test) runs against the demo.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use fedsql::FedContext;

/// A fresh session with the demo table `clinic` and R's `lung` over three
/// sites.
async fn demo() -> FedContext {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo(&ctx).unwrap();
    let lung = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/lung_sites/");
    ctx.sql(&format!("CREATE FEDERATED TABLE lung LOCATION '{lung}'"))
        .await
        .unwrap();
    ctx
}

/// The names fedsql adds: its aggregates and its table functions (those
/// of the session that DataFusion does not bring itself).
fn fedsql_functions(ctx: &FedContext) -> Vec<String> {
    let datafusion: Vec<String> = datafusion::functions_table::all_default_table_functions()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let mut names: Vec<String> = fedsql_udfs::all()
        .iter()
        .map(|f| f.name().to_string())
        .chain(
            ctx.session()
                .state()
                .table_functions()
                .keys()
                .filter(|n| !datafusion.contains(n))
                .cloned(),
        )
        .collect();
    names.sort();
    names
}

/// Each row's `name` column → its `description` column.
async fn descriptions(ctx: &FedContext, sql: &str, name: &str) -> HashMap<String, String> {
    let batches: Vec<RecordBatch> = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let mut found = HashMap::new();
    for batch in &batches {
        let names = batch.column_by_name(name).unwrap().as_string::<i32>();
        let about = batch
            .column_by_name("description")
            .unwrap()
            .as_string::<i32>();
        for row in 0..batch.num_rows() {
            let text = if about.is_null(row) {
                String::new()
            } else {
                about.value(row).to_string()
            };
            found.insert(names.value(row).to_string(), text);
        }
    }
    found
}

#[tokio::test]
async fn show_functions_lists_every_fedsql_function_with_a_description() {
    let ctx = demo().await;
    let expected = fedsql_functions(&ctx);
    assert!(expected.len() > 40, "{expected:?}");
    for (sql, column) in [
        ("SHOW FUNCTIONS", "function_name"),
        (
            "SELECT routine_name, description FROM information_schema.routines",
            "routine_name",
        ),
    ] {
        let listed = descriptions(&ctx, sql, column).await;
        for name in &expected {
            let description = listed
                .get(name)
                .unwrap_or_else(|| panic!("{sql} does not list {name}"));
            assert!(
                description.contains("Leaves each site:"),
                "{sql}: {name}: {description:?}"
            );
        }
        // DataFusion's own functions are still there.
        assert!(listed.contains_key("sum") && listed.contains_key("generate_series"));
    }
    let like = descriptions(&ctx, "SHOW FUNCTIONS LIKE 'secure%'", "function_name").await;
    let mut names: Vec<&String> = like.keys().collect();
    names.sort();
    assert_eq!(
        names,
        ["secure_avg", "secure_count", "secure_sum", "secure_sum_vec"]
    );
}

/// The statements of the page's **Example:** blocks, one per function.
fn reference_examples() -> Vec<String> {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/reference/functions.md"
    ))
    .unwrap();
    page.split("**Example:**\n\n```sql\n")
        .skip(1)
        .map(|rest| rest.split("\n```").next().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn every_documented_example_runs_against_the_demo() {
    let ctx = demo().await;
    let examples = reference_examples();
    assert_eq!(examples.len(), fedsql_functions(&ctx).len());
    for sql in examples {
        let batches = ctx
            .sql(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert!(rows > 0, "{sql} returned no row");
    }
}
