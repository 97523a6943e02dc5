//! `fedsql-bench --policy`: what a disclosure policy costs. The suite over
//! the same clients with a worker's default policy at every client
//! (`min_group_rows` 5, with `--extremes allow` so that `min`/`max` are
//! timed too) against the same clients without a policy, in the same run.
//! The policy's input counts run inside each aggregate's own pass; this
//! measures what they and the checks add. Queries the policy refuses (a
//! group of fewer than 5 rows at some client) are listed, not timed.

use fedsql::FedContext;

use crate::baseline::{compare_results, run_federated};
use crate::report::median;
use crate::suite::SuiteQuery;
use crate::{Args, BenchResult};

pub async fn run(args: &Args, open: &FedContext, queries: &[SuiteQuery]) -> BenchResult<()> {
    let dir = args.dir.to_string_lossy().into_owned();
    let guarded = FedContext::new();
    guarded
        .sql(&format!(
            "CREATE FEDERATED TABLE t STORED AS PARQUET LOCATION '{dir}' \
             OPTIONS ('min_group_rows' '5', 'max_parameter_ratio' '0.33', 'extremes' 'allow')"
        ))
        .await?;
    let mut rows = Vec::new();
    let mut refused = Vec::new();
    for query in queries {
        eprintln!("{}: warm-up", query.name);
        let (_, open_rows) = run_federated(open, &query.sql).await?;
        let guarded_rows = match run_federated(&guarded, &query.sql).await {
            Ok((_, rows)) => rows,
            Err(e) => {
                refused.push(format!(
                    "{}: {}",
                    query.name,
                    e.to_string().replace('\n', " ")
                ));
                continue;
            }
        };
        if !query.is_approximate() {
            compare_results(&guarded_rows, &open_rows)
                .map_err(|d| format!("{}: the policy changed the answer: {d}", query.name))?;
        }
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for run in 0..args.runs {
            if run % 2 == 0 {
                without.push(run_federated(open, &query.sql).await?.0);
                with.push(run_federated(&guarded, &query.sql).await?.0);
            } else {
                with.push(run_federated(&guarded, &query.sql).await?.0);
                without.push(run_federated(open, &query.sql).await?.0);
            }
        }
        rows.push((query.name.clone(), median(&without), median(&with)));
    }
    println!(
        "Disclosure policy (min_group_rows 5, extremes allow) at all {} clients, {} rows, median of {} runs",
        args.clients, args.rows, args.runs
    );
    println!();
    println!("| query | no policy (s) | policy (s) | ratio |");
    println!("|---|---:|---:|---:|");
    let (mut total_without, mut total_with) = (0.0, 0.0);
    for (name, without, with) in &rows {
        println!(
            "| {name} | {without:.3} | {with:.3} | {:.3} |",
            with / without
        );
        total_without += without;
        total_with += with;
    }
    if total_without > 0.0 {
        println!(
            "| **suite (answered queries)** | {total_without:.3} | {total_with:.3} | **{:.3}** |",
            total_with / total_without
        );
    }
    println!();
    for line in &refused {
        println!("refused under the policy: {line}");
    }
    Ok(())
}
