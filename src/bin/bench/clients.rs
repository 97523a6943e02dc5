//! Many clients at the cost of few: the suite over the same number of rows
//! held by 8 clients and by `--many-clients` clients, in the same run.

use std::path::Path;
use std::time::Duration;

use fedsql::FedContext;

use crate::baseline::run_federated;
use crate::data::{client_plan, federated_table_sql, prepare_data};
use crate::report::{median, minimum};
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult};

/// A federation of `clients` Parquet clients holding `rows` rows in `dir`.
async fn federation(
    dir: &Path,
    rows: u64,
    clients: usize,
    regenerate: bool,
) -> BenchResult<FedContext> {
    let plan = client_plan(dir, rows, clients);
    prepare_data(dir, &plan, regenerate)?;
    let ctx = FedContext::new();
    ctx.sql(&federated_table_sql(&plan, "")).await?;
    Ok(ctx)
}

pub async fn run(args: &Args, many: usize, queries: &[SuiteQuery]) -> BenchResult<()> {
    let few_dir = args.dir.join(format!("clients-{}", args.clients));
    let many_dir = args.dir.join(format!("clients-{many}"));
    let few = federation(&few_dir, args.rows, args.clients, args.regenerate).await?;
    let many_ctx = federation(&many_dir, args.rows, many, args.regenerate).await?;
    println!(
        "fedsql-bench --many-clients {many}: the suite over {} rows held by {} and by {many} Parquet clients \
         (same generator, same row count), in-process, alternating; median and minimum of {} runs after one warm-up.",
        args.rows, args.clients, args.runs
    );
    println!();
    println!(
        "| query | {f} clients median (s) | {f} min (s) | {many} clients median (s) | {many} min (s) | ratio |",
        f = args.clients
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let (mut few_total, mut many_total) = (Vec::new(), Vec::new());
    for _ in 0..args.runs {
        few_total.push(Duration::ZERO);
        many_total.push(Duration::ZERO);
    }
    for query in queries {
        eprintln!("{}: warm-up", query.name);
        run_federated(&few, &query.sql).await?;
        run_federated(&many_ctx, &query.sql).await?;
        let (mut f, mut m) = (Vec::new(), Vec::new());
        for run in 0..args.runs {
            if run % 2 == 0 {
                f.push(run_federated(&few, &query.sql).await?.0);
                m.push(run_federated(&many_ctx, &query.sql).await?.0);
            } else {
                m.push(run_federated(&many_ctx, &query.sql).await?.0);
                f.push(run_federated(&few, &query.sql).await?.0);
            }
            few_total[run] += f[run];
            many_total[run] += m[run];
        }
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} |",
            query.name,
            median(&f),
            minimum(&f),
            median(&m),
            minimum(&m),
            median(&m) / median(&f)
        );
    }
    println!(
        "| **suite total** | **{:.3}** | {:.3} | **{:.3}** | {:.3} | **{:.2}** |",
        median(&few_total),
        minimum(&few_total),
        median(&many_total),
        minimum(&many_total),
        median(&many_total) / median(&few_total)
    );
    println!();
    println!(
        "Suite total, {many} clients / {} clients: {:.2}x median, {:.2}x minimum (target <= 1.5x).",
        args.clients,
        median(&many_total) / median(&few_total),
        minimum(&many_total) / minimum(&few_total)
    );
    Ok(())
}
