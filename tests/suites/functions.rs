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
        [
            "secure_avg",
            "secure_count",
            "secure_dp_avg",
            "secure_dp_count",
            "secure_dp_sum",
            "secure_sum",
            "secure_sum_vec"
        ]
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

/// A table function's documented columns are the columns it returns
/// (those named after its input columns, and `PC1`, `PC2`, ..., aside).
#[tokio::test]
async fn documented_columns_are_the_columns_each_function_returns() {
    let ctx = demo().await;
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/reference/functions.md"
    ))
    .unwrap();
    for section in reference_sections() {
        if !section.example.starts_with("SELECT * FROM ") {
            continue;
        }
        let returns = page
            .split(&format!("\n### `{}`\n", section.name))
            .nth(1)
            .and_then(|s| s.split("**Returns:** ").nth(1))
            .and_then(|s| s.lines().next())
            .unwrap();
        let schema = ctx.sql(&section.example).await.unwrap().schema().clone();
        for field in schema.fields() {
            let name = field.name();
            let input = section.example.contains(name.as_str());
            let component = name
                .strip_prefix("PC")
                .is_some_and(|n| n.parse::<u32>().is_ok());
            assert!(
                input || component || returns.contains(name.as_str()),
                "{}: column {name} is not documented: {returns}",
                section.name
            );
        }
    }
}

/// One function's section of the reference page: its name, its arguments,
/// its option keys and its example.
struct Section {
    name: String,
    arguments: Vec<String>,
    options: Vec<String>,
    example: String,
}

/// The sections of the reference page.
fn reference_sections() -> Vec<Section> {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/reference/functions.md"
    ))
    .unwrap();
    page.split("\n### `")
        .skip(1)
        .map(|section| {
            let name = section.split('`').next().unwrap().to_string();
            let mut arguments = Vec::new();
            let mut options = Vec::new();
            let mut table = "";
            for line in section.lines() {
                if line.starts_with("| argument |") || line.starts_with("| option |") {
                    table = if line.starts_with("| argument |") {
                        "arguments"
                    } else {
                        "options"
                    };
                } else if let Some(cell) = line.strip_prefix("| `") {
                    let key = cell.split('`').next().unwrap();
                    match table {
                        "arguments" => arguments.push(key.to_string()),
                        _ => options.extend(key.split(", ").map(str::to_string)),
                    }
                } else if !line.starts_with('|') {
                    table = "";
                }
            }
            let example = section
                .split("**Example:**\n\n```sql\n")
                .nth(1)
                .unwrap()
                .split("\n```")
                .next()
                .unwrap()
                .to_string();
            Section {
                name,
                arguments,
                options,
                example,
            }
        })
        .collect()
}

/// The arguments of the call in `sql` (`SELECT * FROM f(a, 'b, c', 3)`),
/// as written.
fn call_arguments(sql: &str) -> Vec<String> {
    let inner = &sql[sql.find('(').unwrap() + 1..sql.rfind(')').unwrap()];
    let (mut arguments, mut current, mut quoted) = (Vec::new(), String::new(), false);
    for c in inner.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => arguments.push(std::mem::take(&mut current).trim().to_string()),
            _ => current.push(c),
        }
    }
    arguments.push(current.trim().to_string());
    arguments
}

/// Every table function takes exactly the options its page documents: a
/// call with an unknown option is refused with the list of the keys it
/// takes, which must be the documented ones (fedsgd's: with every
/// optimizer).
#[tokio::test]
async fn documented_options_are_the_options_each_function_takes() {
    let ctx = demo().await;
    let mut checked = 0;
    for section in reference_sections() {
        let Some(position) = section.arguments.iter().position(|a| a == "options") else {
            continue;
        };
        if !section.example.starts_with("SELECT * FROM ") {
            continue;
        }
        let mut taken: Vec<String> = Vec::new();
        let optimizers = ["sgd", "momentum", "adam", "adagrad", "newton"];
        let prefixes: Vec<String> = if section.options.iter().any(|o| o == "optimizer") {
            optimizers
                .iter()
                .map(|o| format!("optimizer={o}, "))
                .collect()
        } else {
            vec![String::new()]
        };
        for prefix in prefixes {
            let mut arguments = call_arguments(&section.example);
            arguments.resize(position + 1, "NULL".into());
            arguments[position] = format!("'{prefix}zz_unknown=1'");
            let sql = format!("SELECT * FROM {}({})", section.name, arguments.join(", "));
            let error = match ctx.sql(&sql).await {
                Ok(df) => df.collect().await.err().map(|e| e.to_string()),
                Err(e) => Some(e.to_string()),
            }
            .unwrap_or_else(|| panic!("{sql} ran"));
            let keys = error
                .split("unknown option `zz_unknown`: ")
                .nth(1)
                .and_then(|rest| rest.split_once(" takes "))
                .map(|(_, keys)| keys)
                .unwrap_or_else(|| panic!("{sql}: {error}"));
            taken.extend(keys.trim().split(", ").map(str::to_string));
        }
        taken.sort();
        taken.dedup();
        let mut documented = section.options.clone();
        documented.sort();
        documented.dedup();
        assert_eq!(taken, documented, "{}", section.name);
        checked += 1;
    }
    assert!(checked >= 15, "{checked}");
}

/// `\h NAME` prints the function's page section as text, DataFusion's own
/// functions included; `\h` lists fedsql's functions.
#[tokio::test]
async fn backslash_h_prints_a_functions_documentation() {
    let ctx = demo().await;
    let options = fedsql::frontend::repl::ReplOptions {
        timing: false,
        ..Default::default()
    };
    let mut out = Vec::new();
    fedsql::frontend::repl::run_script(&ctx, "\\h kmeans\n\\h avg\n\\h\n", &mut out, &options)
        .await
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.starts_with("kmeans: Federated Lloyd's k-means"),
        "{out}"
    );
    for line in [
        "Syntax: kmeans(source, columns, k [, options])",
        "  iter_max  the most Lloyd rounds (default 10)",
        "Leaves each site: a `centered_moments` round",
        "avg: Returns the average of numeric values in the specified column.",
        "| secure_sum_vec ",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
}
