//! The REPL and the non-interactive CLI, driven in-process: scripts of
//! backslash commands and statements over the demo federation, checked
//! against what the library itself returns for the same SQL.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::record_batch::RecordBatch;
use fedsql::FedContext;
use fedsql::frontend::cli::{self, Source};
use fedsql::frontend::print::{self, OutputFormat};
use fedsql::frontend::repl::{self, ReplOptions, ScriptSummary};

fn demo() -> FedContext {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    ctx
}

/// Interactive-style options without the timing line, whose elapsed time
/// changes from run to run.
fn untimed() -> ReplOptions {
    ReplOptions {
        timing: false,
        ..ReplOptions::default()
    }
}

async fn run(ctx: &FedContext, script: &str, opts: &ReplOptions) -> (String, ScriptSummary) {
    let mut out = Vec::new();
    let summary = repl::run_script(ctx, script, &mut out, opts).await.unwrap();
    (String::from_utf8(out).unwrap(), summary)
}

async fn library_result(
    ctx: &FedContext,
    sql: &str,
) -> (Vec<RecordBatch>, datafusion::arrow::datatypes::SchemaRef) {
    let df = ctx.sql(sql).await.unwrap();
    let schema = df.schema().inner().clone();
    (df.collect().await.unwrap(), schema)
}

/// What the library's result for `sql` looks like printed in `format`.
async fn printed_by_library(ctx: &FedContext, sql: &str, format: OutputFormat) -> String {
    let (batches, schema) = library_result(ctx, sql).await;
    let mut out = Vec::new();
    print::print_batches(&batches, &schema, format, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn count_in_csv_equals_the_library_count() {
    let ctx = demo();
    let sql = "SELECT count(*) AS n FROM clinic";
    let (batches, _) = library_result(&ctx, sql).await;
    let n = batches[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .value(0);
    assert!(n > 0);

    // In a machine format the output holds only the result (the
    // confirmation goes to stderr).
    let (out, summary) = run(&ctx, &format!("\\format csv\n{sql};"), &untimed()).await;
    assert_eq!(out, format!("n\n{n}\n"));
    assert_eq!(
        summary,
        ScriptSummary {
            statements: 1,
            commands: 1,
            errors: 0,
            quit: false
        }
    );
}

#[tokio::test]
async fn grouped_aggregate_prints_what_the_library_returns() {
    let ctx = demo();
    let sql = "SELECT region, count(*) AS n, avg(systolic) AS mean_sbp FROM clinic GROUP BY region ORDER BY region";
    for format in OutputFormat::ALL {
        // Typed over several lines, with a comment, as at the prompt.
        let script = format!(
            "\\format {format}\n-- by region\n{}\n;",
            sql.replace(" FROM", "\n  FROM")
        );
        let (out, summary) = run(&ctx, &script, &untimed()).await;
        let expected = printed_by_library(&ctx, sql, format).await;
        let confirmation = if format == OutputFormat::Table {
            format!("Output format is {format}.\n")
        } else {
            String::new()
        };
        assert_eq!(out, format!("{confirmation}{expected}"));
        assert_eq!(summary.errors, 0, "{out}");
    }
    // The table really has one line per region (plus header and borders).
    let (batches, _) = library_result(&ctx, sql).await;
    let regions: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let (table, _) = run(&ctx, &format!("{sql};"), &untimed()).await;
    assert_eq!(table.lines().count(), regions + 4, "{table}");
}

#[tokio::test]
async fn list_describe_and_clients() {
    let ctx = demo();
    let (out, summary) = run(&ctx, "\\d\n\\d clinic\n\\clients clinic", &untimed()).await;
    assert_eq!(summary.errors, 0, "{out}");

    let tables = ctx.tables().await.unwrap();
    let clinic = tables
        .iter()
        .find(|t| t.name == "clinic")
        .expect("demo table");
    let clients = clinic.clients.expect("clinic is federated");
    let listing = out
        .lines()
        .find(|l| l.starts_with("| clinic "))
        .unwrap_or_else(|| panic!("no clinic row in\n{out}"));
    assert!(listing.contains("| federated |"), "{listing}");
    assert!(listing.contains(&format!("| {clients} ")), "{listing}");

    for field in clinic.schema.fields() {
        let row = format!("| {} ", field.name());
        assert!(
            out.contains(&row),
            "no row for column {}:\n{out}",
            field.name()
        );
    }
    assert!(
        out.contains(&format!("federated table over {clients} client(s)")),
        "{out}"
    );

    let batch = ctx.clients_batch("clinic").await.unwrap();
    let names = batch.column_by_name("client").unwrap().as_string::<i32>();
    assert_eq!(names.len(), clients);
    for name in names.iter().flatten() {
        assert!(
            out.contains(&format!("| {name} ")),
            "client {name} not listed:\n{out}"
        );
    }
}

#[tokio::test]
async fn refused_query_prints_an_error_and_the_session_goes_on() {
    let ctx = demo();
    let script = "SELECT * FROM clinic;\nSELECT 1 AS still_here;";
    let (out, summary) = run(&ctx, script, &untimed()).await;
    let error = out.lines().next().unwrap();
    assert!(error.starts_with("Error: refused: "), "{out}");
    assert!(out.contains("still_here"), "{out}");
    assert_eq!((summary.statements, summary.errors), (1, 1));
}

#[tokio::test]
async fn unknown_command_names_help() {
    let ctx = demo();
    let (out, summary) = run(
        &ctx,
        "\\frobnicate\n\\format csv\nSELECT 2 AS two;",
        &untimed(),
    )
    .await;
    let error = out.lines().next().unwrap();
    assert!(
        error.starts_with("Error: unknown command `\\frobnicate`"),
        "{out}"
    );
    assert!(error.contains("\\?"), "{error}");
    assert!(out.ends_with("two\n2\n"), "{out}");
    assert_eq!(summary.errors, 1);
}

#[tokio::test]
async fn unreadable_sql_is_reported_without_waiting_for_more_input() {
    let ctx = demo();
    let script = "SELECT ._x;\nSELECT 2 AS two;\nSELECT 'never closed";
    let (out, summary) = run(&ctx, script, &untimed()).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("Error: cannot read the SQL: "),
        "{out}"
    );
    assert_eq!(
        lines[2..6],
        ["| two |", "+-----+", "| 2   |", "+-----+"],
        "{out}"
    );
    assert!(
        lines[6].starts_with("Error: cannot read the SQL: Unterminated"),
        "{out}"
    );
    assert_eq!((summary.statements, summary.errors), (1, 2));
}

#[tokio::test]
async fn help_prints_as_a_table() {
    let ctx = demo();
    let (out, _) = run(&ctx, "\\?", &untimed()).await;
    assert!(out.starts_with("+-"), "{out}");
    assert!(out.contains("| command "), "{out}");
    for (usage, _) in repl::command::COMMANDS {
        assert!(out.contains(usage), "{usage} missing from\n{out}");
    }
}

#[tokio::test]
async fn timing_line_follows_each_result_until_toggled_off() {
    let ctx = demo();
    let (out, _) = run(
        &ctx,
        "SELECT 1 AS a;\n\\timing\nSELECT 2 AS b;",
        &ReplOptions::default(),
    )
    .await;
    assert_eq!(
        out.matches(" row(s) fetched. \nElapsed ").count(),
        1,
        "{out}"
    );
    assert!(out.contains("1 row(s) fetched. \nElapsed "), "{out}");
    assert!(out.contains("Timing is off."), "{out}");
    assert!(out.trim_end().ends_with("+---+"), "{out}");
}

#[tokio::test]
async fn shared_tables_and_ddl() {
    let ctx = demo();
    let script = "CREATE TABLE thresholds AS VALUES (140), (160);\n\\d\n\\clients thresholds";
    let (out, summary) = run(&ctx, script, &untimed()).await;
    let row = out
        .lines()
        .find(|l| l.starts_with("| thresholds "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("| shared "), "{row}");
    // \clients on a shared table is an error, not a crash.
    assert!(out.lines().last().unwrap().starts_with("Error: "), "{out}");
    assert_eq!((summary.statements, summary.errors), (1, 1));
}

#[tokio::test]
async fn include_runs_a_file_and_quit_stops() {
    let ctx = demo();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q.sql");
    std::fs::write(
        &file,
        "\\format csv\nSELECT 'a;b' AS s; -- a comment; not a statement\n",
    )
    .unwrap();
    let script = format!("\\i {}\n\\q\nSELECT 'not run' AS t;", file.display());
    let (out, summary) = run(&ctx, &script, &untimed()).await;
    assert_eq!(out, "s\na;b\n");
    assert!(summary.quit);

    // A file that includes itself stops at a depth limit, once.
    let looping = dir.path().join("loop.sql");
    std::fs::write(&looping, format!("\\i {}\n", looping.display())).unwrap();
    let (out, summary) = run(
        &ctx,
        &format!("\\i {}\nSELECT 1 AS after;", looping.display()),
        &untimed(),
    )
    .await;
    assert!(
        out.starts_with("Error: \\i ") && out.contains("deep"),
        "{out}"
    );
    assert!(out.contains("after"), "{out}");
    assert_eq!(summary.errors, 1);

    let (out, summary) = run(&ctx, "\\i /no/such/file.sql", &untimed()).await;
    assert!(
        out.starts_with("Error: \\i /no/such/file.sql: cannot read"),
        "{out}"
    );
    assert_eq!(summary.errors, 1);
}

#[tokio::test]
async fn stop_on_error_returns_the_first_error() {
    let ctx = demo();
    let opts = ReplOptions {
        stop_on_error: true,
        ..untimed()
    };
    let mut out = Vec::new();
    let error = repl::run_script(
        &ctx,
        "SELECT 1 AS a;\nSELECT * FROM clinic;\nSELECT 3 AS c;",
        &mut out,
        &opts,
    )
    .await
    .unwrap_err();
    assert!(error.to_string().starts_with("refused: "), "{error}");
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("| a "), "{out}");
    assert!(!out.contains("| c ") && !out.contains("Error"), "{out}");
}

#[tokio::test]
async fn cli_sources_run_in_order_in_one_session() {
    let ctx = demo();
    let args = cli::try_parse_args([
        "fedsql",
        "-q",
        "--format",
        "csv",
        "-c",
        "SELECT 1 AS a; SELECT 2 AS b",
        "-c",
        "\\format ndjson",
        "-c",
        "SELECT 3 AS c",
    ])
    .unwrap();
    let mut out = Vec::new();
    cli::run_sources(&ctx, &args.sources, args.repl_options(true), &mut out)
        .await
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "a\n1\nb\n2\n{\"c\":3}\n");

    let sources = [Source::Sql(
        "SELECT 1 AS a; SELECT * FROM clinic; SELECT 3 AS c".into(),
    )];
    let mut out = Vec::new();
    let error = cli::run_sources(&ctx, &sources, args.repl_options(true), &mut out)
        .await
        .unwrap_err();
    assert!(error.to_string().starts_with("refused: "), "{error}");
    assert_eq!(String::from_utf8(out).unwrap(), "a\n1\n");
}

#[tokio::test]
async fn explain_federated_prints_the_plan_text() {
    let ctx = demo();
    let sql = "EXPLAIN FEDERATED SELECT region, count(*) FROM clinic GROUP BY region";
    let (out, summary) = run(&ctx, &format!("\\format csv\n{sql};"), &untimed()).await;
    assert_eq!(summary.errors, 0, "{out}");
    let expected = printed_by_library(&ctx, sql, OutputFormat::Csv).await;
    assert_eq!(out, expected);
    assert!(
        out.lines().count() > 3,
        "the plan spans several lines:\n{out}"
    );
}

#[tokio::test]
async fn a_glm_is_followed_by_its_deviance_summary() {
    let ctx = demo();
    let script = "SELECT term, round(estimate, 6) AS estimate FROM glm('clinic', 'event ~ age + smoker', 'binomial');";
    let (out, summary) = run(&ctx, script, &untimed()).await;
    assert_eq!(summary.errors, 0, "{out}");
    // The summary's figures are glm_stats' own.
    let stats = ctx
        .sql("SELECT null_deviance, deviance, df_residual, iterations FROM glm_stats('clinic', 'event ~ age + smoker', 'binomial')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let float = |i: usize| {
        datafusion::arrow::compute::cast(
            stats[0].column(i),
            &datafusion::arrow::datatypes::DataType::Float64,
        )
        .unwrap()
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Float64Array>()
        .unwrap()
        .value(0)
    };
    let deviances = fedsql::r_format::format_real(&[float(0), float(1)], 5);
    assert!(
        // R's print.summary.glm: both deviances in one format, 5 digits.
        out.contains(&format!("Null deviance: {}", deviances[0])),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Residual deviance: {}  on {}  degrees of freedom",
            deviances[1],
            float(2)
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Number of Fisher Scoring iterations: {}",
            float(3)
        )),
        "{out}"
    );
    assert!(out.find("(Intercept)").unwrap() < out.find("Residual deviance").unwrap());
}

#[tokio::test]
async fn fedsgd_history_then_chart_draws_the_loss_curve() {
    let ctx = demo();
    let call = "fedsgd_history('clinic', 'event ~ age + smoker', 'logistic', 'optimizer=adam, learning_rate=0.05, rounds=30, standardize=true')";
    let script = format!("SELECT * FROM {call};\n\\chart\n\\chart gradient_norm round\n");
    let (out, summary) = run(&ctx, &script, &untimed()).await;
    assert_eq!(summary.errors, 0, "{out}");
    assert!(
        out.contains("fedsgd: logistic model, adam optimizer"),
        "{out}"
    );
    assert!(out.contains("loss by round, 30 points"), "{out}");
    assert!(out.contains("gradient_norm by round, 30 points"), "{out}");
    // The chart's y range is the history's own: the top label is the first
    // round's loss (the largest under Adam here), to 6 decimals.
    let (batches, _) = library_result(&ctx, &format!("SELECT max(loss) FROM {call}")).await;
    let top = batches[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
        .value(0);
    assert!(out.contains(&format!("{:.6}", top as f32)), "{top}: {out}");
    // Without a result to draw, \chart says what to do.
    let (out, _) = run(&demo(), "\\chart\n", &untimed()).await;
    assert!(out.contains("run a query first"), "{out}");
}

// ------------------------------------------------- issue 19, point 8

#[tokio::test]
async fn backslash_commands_end_a_pending_statement_as_psql_does() {
    let ctx = demo();
    // A command typed while a statement waits for its `;` runs at once; the
    // statement stays pending until `;` (or `\g`).
    let (out, summary) = run(
        &ctx,
        "SELECT count(*) AS n\n\\dt\nFROM clinic;\nSELECT 1 AS one\n\\g\nSELECT oops\n\\r\n\\q\nSELECT 'not run' AS t;",
        &untimed(),
    )
    .await;
    assert_eq!(summary.errors, 0, "{out}");
    let tables = out.find("| clinic | federated |").expect("\\dt ran");
    let count = out.find("| n ").expect("the statement ran after its `;`");
    assert!(tables < count, "{out}");
    let (batches, _) = library_result(&ctx, "SELECT count(*) AS n FROM clinic").await;
    let n = batches[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .value(0);
    assert!(out.contains(&format!("| {n} |")), "{out}");
    assert!(
        out.contains("| one |"),
        "\\g runs the pending statement: {out}"
    );
    assert!(out.contains("Query buffer reset (cleared)."), "{out}");
    assert!(!out.contains("oops") && !out.contains("not run"), "{out}");
    assert!(summary.quit);
}

#[tokio::test]
async fn dt_lists_tables_matching_a_pattern() {
    let ctx = demo();
    let (out, _) = run(
        &ctx,
        "CREATE TABLE thresholds AS VALUES (140);\n\\dt\n\\dt cl*\n\\dt nothing*",
        &untimed(),
    )
    .await;
    let tables = out.split("+--------").collect::<String>();
    assert_eq!(out.matches("| clinic ").count(), 2, "{tables}");
    assert_eq!(out.matches("| thresholds ").count(), 1, "{out}");
}

fn fedsql_binary(home: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fedsql"));
    command
        .env("HOME", home)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

#[test]
fn a_start_up_file_registers_tables_for_the_session() {
    let home = tempfile::tempdir().unwrap();
    let visits = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/visits/");
    let setup = format!(
        "CREATE FEDERATED TABLE visits STORED AS PARQUET LOCATION '{}';\n\\timing off\n",
        visits.display()
    );
    let count = "SELECT count(*) AS n FROM visits";
    // ~/.fedsqlrc when present.
    std::fs::write(home.path().join(".fedsqlrc"), &setup).unwrap();
    let output = fedsql_binary(home.path())
        .args(["--format", "csv", "-c", count])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8(output.stdout).unwrap(), "n\n135\n");
    // -X skips it.
    let output = fedsql_binary(home.path())
        .args(["-X", "-c", count])
        .output()
        .unwrap();
    assert!(!output.status.success());
    // --rc FILE instead of ~/.fedsqlrc; an error in it names the file.
    std::fs::remove_file(home.path().join(".fedsqlrc")).unwrap();
    let rc = home.path().join("setup.sql");
    std::fs::write(&rc, &setup).unwrap();
    let output = fedsql_binary(home.path())
        .arg("--rc")
        .arg(&rc)
        .args(["-q", "-c", count])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("| 135 |"), "{stdout}");
    std::fs::write(&rc, "SELECT * FROM nowhere;").unwrap();
    let output = fedsql_binary(home.path())
        .arg("--rc")
        .arg(&rc)
        .args(["-c", "SELECT 1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert!(
        stderr.contains("in the start-up file") && stderr.contains("setup.sql"),
        "{stderr}"
    );
}

#[test]
fn completions_and_the_man_page() {
    let home = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "_fedsql()"),
        ("zsh", "#compdef fedsql"),
        ("fish", "complete -c fedsql"),
    ] {
        let output = fedsql_binary(home.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("worker") && script.contains("completions"),
            "{shell}"
        );
    }
    let output = fedsql_binary(home.path()).arg("man").output().unwrap();
    assert!(output.status.success());
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH fedsql"), "{page}");
    assert!(
        page.contains("\\-\\-rc") && page.contains("\\-\\-format"),
        "{page}"
    );
}

/// The REPL shows `lm_vcov` / `glm_vcov` as the matrix it is; machine
/// formats keep the long form.
#[tokio::test]
async fn a_covariance_in_long_form_prints_as_a_matrix() {
    let ctx = demo();
    let sql = "SELECT * FROM lm_vcov('clinic', 'systolic ~ age + bmi')";
    let (long, _) = library_result(&ctx, sql).await;
    let (out, summary) = run(&ctx, &format!("{sql};"), &untimed()).await;
    assert_eq!(summary.errors, 0, "{out}");
    let header = out.lines().nth(1).unwrap();
    for term in ["(Intercept)", "age", "bmi"] {
        assert!(header.contains(term), "{out}");
    }
    // One row per term; the cell (age, bmi) is the long form's value.
    let row = out.lines().find(|l| l.starts_with("| age ")).unwrap();
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let mut expected = None;
    for batch in &long {
        let (a, b, c) = (
            batch
                .column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::StringArray>()
                .unwrap(),
            batch
                .column(1)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::StringArray>()
                .unwrap(),
            batch
                .column(2)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                .unwrap(),
        );
        for r in 0..batch.num_rows() {
            if a.value(r) == "age" && b.value(r) == "bmi" {
                expected = Some(c.value(r));
            }
        }
    }
    let shown: f64 = cells[4].parse().unwrap();
    let expected = expected.unwrap();
    assert!(
        (shown - expected).abs() <= 1e-6 * expected.abs(),
        "{shown} vs {expected}\n{out}"
    );
    let csv = ReplOptions {
        format: fedsql::frontend::print::OutputFormat::Csv,
        ..untimed()
    };
    let (out, _) = run(&ctx, &format!("{sql};"), &csv).await;
    assert!(out.starts_with("term1,term2,covariance"), "{out}");
}

/// The exit code tells the kind of the error that ended a run, and
/// `--on-error continue` runs every statement and exits with the first
/// error's code.
#[test]
fn exit_codes_tell_the_kind_of_error_and_on_error_continue_runs_the_rest() {
    let home = tempfile::tempdir().unwrap();
    let code = |args: &[&str]| {
        let output = fedsql_binary(home.path())
            .args(["-X", "-q"])
            .args(args)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
        )
    };
    assert_eq!(code(&["-c", "SELECT 1 AS one"]).0, Some(0));
    assert_eq!(code(&["-c", "SELEC 1"]).0, Some(3));
    assert_eq!(code(&["-c", "SELECT nope FROM clinic"]).0, Some(3));
    assert_eq!(code(&["-c", "SELECT min(age) FROM clinic"]).0, Some(4));
    assert_eq!(code(&["-f", "no/such/script.sql"]).0, Some(1));
    assert_eq!(code(&["--on-error", "maybe"]).0, Some(2));
    // A site that does not answer.
    let token = home.path().join("token");
    std::fs::write(&token, "secret\n").unwrap();
    let create = format!(
        "CREATE FEDERATED TABLE t (x DOUBLE) CLIENTS ('a' = 'grpc://127.0.0.1:1') OPTIONS ('token_file' '{}')",
        token.display()
    );
    assert_eq!(
        code(&["--no-demo", "-c", &create, "-c", "SELECT count(*) FROM t"]).0,
        Some(5)
    );
    // Stop (the default) runs nothing after the first error.
    let (status, out) = code(&["-c", "SELECT nope FROM clinic", "-c", "SELECT 7 AS seven"]);
    assert_eq!(status, Some(3));
    assert!(!out.contains("seven"), "{out}");
    // Continue runs the rest and exits with the first error's code.
    let (status, out) = code(&[
        "--on-error",
        "continue",
        "-c",
        "SELECT min(age) FROM clinic",
        "-c",
        "SELECT nope FROM clinic",
        "-c",
        "SELECT 7 AS seven",
    ]);
    assert_eq!(status, Some(4), "{out}");
    assert!(out.contains("seven") && out.contains("Error: "), "{out}");
    // Every refusal of the example file shows.
    let (status, out) = code(&[
        "--on-error",
        "continue",
        "-f",
        "queries/07_refused_under_a_policy.sql",
    ]);
    assert_eq!(status, Some(4));
    assert!(out.matches("Error: ").count() >= 3, "{out}");
}
