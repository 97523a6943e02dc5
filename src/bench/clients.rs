//! Many clients at the cost of few: the suite over the same number of rows
//! held by 8 clients and by `--many-clients` clients, in the same run.
//!
//! Beside the federated times it prints centralized DataFusion's over the
//! same two sets of files (one table each, `target_partitions = 2`), so
//! the report shows what reading a thousand small files instead of eight
//! big ones costs the engine that fedsql's sites run on.

use std::path::Path;
use std::time::Duration;

use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use fedsql::FedContext;

use crate::baseline::{compare_results, run_centralized, run_federated};
use crate::data::{ClientFile, client_plan, federated_table_sql, prepare_data};
use crate::report::{median, minimum};
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult};

/// A federation of `clients` Parquet clients holding `rows` rows in `dir`,
/// and centralized DataFusion over the same files as one table.
async fn federation(
    dir: &Path,
    rows: u64,
    clients: usize,
    regenerate: bool,
) -> BenchResult<(FedContext, SessionContext)> {
    let plan = client_plan(dir, rows, clients);
    prepare_data(dir, &plan, regenerate)?;
    let ctx = FedContext::new();
    ctx.sql(&federated_table_sql(&plan, "")).await?;
    Ok((ctx, centralized(&plan).await?))
}

async fn centralized(plan: &[ClientFile]) -> BenchResult<SessionContext> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    let files: Vec<String> = plan
        .iter()
        .map(|c| c.path.to_string_lossy().into_owned())
        .collect();
    let rows = ctx
        .read_parquet(files, ParquetReadOptions::default())
        .await?;
    ctx.register_table("t", rows.into_view())?;
    Ok(ctx)
}

/// The times of one query (or of the suite) in one layout, one per run.
#[derive(Default)]
struct Times {
    federated: Vec<Duration>,
    centralized: Vec<Duration>,
}

pub(crate) async fn run(args: &Args, many: usize, queries: &[SuiteQuery]) -> BenchResult<()> {
    let few_dir = args.dir.join(format!("clients-{}", args.clients));
    let many_dir = args.dir.join(format!("clients-{many}"));
    let (few, few_df) = federation(&few_dir, args.rows, args.clients, args.regenerate).await?;
    let (many_ctx, many_df) = federation(&many_dir, args.rows, many, args.regenerate).await?;
    println!(
        "fedsql-bench --many-clients {many}: the suite over {} rows held by {} and by {many} Parquet clients \
         (same generator, same row count), in-process, alternating; median and minimum of {} runs after one warm-up. \
         DataFusion: centralized over the same files as one table (target_partitions = 2).",
        args.rows, args.clients, args.runs
    );
    println!();
    println!(
        "| query | {f} clients median (s) | {f} min (s) | {many} clients median (s) | {many} min (s) | ratio \
         | DataFusion {f} files (s) | DataFusion {many} files (s) | DataFusion ratio |",
        f = args.clients
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let zero = || vec![Duration::ZERO; args.runs];
    let mut few_total = Times {
        federated: zero(),
        centralized: zero(),
    };
    let mut many_total = Times {
        federated: zero(),
        centralized: zero(),
    };
    let (mut compared, mut warnings) = (0, Vec::new());
    for query in queries {
        eprintln!("{}: warm-up", query.name);
        // Both federations must give DataFusion's answer over their files.
        for (fed, df, clients) in [(&few, &few_df, args.clients), (&many_ctx, &many_df, many)] {
            let (_, fed_rows) = run_federated(fed, &query.sql).await?;
            let (_, central_rows) = run_centralized(df, &query.sql).await?;
            if query.is_approximate() {
                continue;
            }
            compared += 1;
            if let Err(difference) = compare_results(&fed_rows, &central_rows) {
                warnings.push(format!(
                    "WARNING: {} over {clients} clients: federated and centralized results differ: {difference}",
                    query.name
                ));
            }
        }
        let (mut f, mut m) = (Times::default(), Times::default());
        for run in 0..args.runs {
            // Alternate which layout goes first, federated and centralized.
            let order: [bool; 2] = if run % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for is_many in order {
                let (fed, df, times) = if is_many {
                    (&many_ctx, &many_df, &mut m)
                } else {
                    (&few, &few_df, &mut f)
                };
                times
                    .federated
                    .push(run_federated(fed, &query.sql).await?.0);
                times
                    .centralized
                    .push(run_centralized(df, &query.sql).await?.0);
            }
            few_total.federated[run] += f.federated[run];
            few_total.centralized[run] += f.centralized[run];
            many_total.federated[run] += m.federated[run];
            many_total.centralized[run] += m.centralized[run];
        }
        print_row(&query.name, &f, &m, false);
    }
    print_row("suite total", &few_total, &many_total, true);
    println!();
    println!(
        "Suite total, {many} clients / {} clients: {:.2}x median, {:.2}x minimum (target <= 1.5x). \
         DataFusion over the same files: {:.2}x median, {:.2}x minimum.",
        args.clients,
        median(&many_total.federated) / median(&few_total.federated),
        minimum(&many_total.federated) / minimum(&few_total.federated),
        median(&many_total.centralized) / median(&few_total.centralized),
        minimum(&many_total.centralized) / minimum(&few_total.centralized),
    );
    if warnings.is_empty() {
        println!(
            "Results: federated and centralized agree on all {compared} exact query runs (both layouts)."
        );
    } else {
        for warning in &warnings {
            println!("{warning}");
        }
    }
    Ok(())
}

fn print_row(name: &str, few: &Times, many: &Times, bold: bool) {
    let b = if bold { "**" } else { "" };
    println!(
        "| {b}{name}{b} | {b}{:.3}{b} | {:.3} | {b}{:.3}{b} | {:.3} | {b}{:.2}{b} | {:.3} | {:.3} | {:.2} |",
        median(&few.federated),
        minimum(&few.federated),
        median(&many.federated),
        minimum(&many.federated),
        median(&many.federated) / median(&few.federated),
        median(&few.centralized),
        median(&many.centralized),
        median(&many.centralized) / median(&few.centralized),
    );
}
