//! Tests of kept rows: rounds over kept rows give the states and bits a
//! fresh read gives, however the rows were read.

use datafusion::arrow::array::{AsArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::*;
use crate::protocol::rebind::tests::{aggregate, partial, run};
use crate::site::engine::in_order;

const OLD: &str = "family=binomial;beta=0.5,-0.1";
const STEP: &str =
    "SELECT irls_step('family=binomial;beta=0.5,-0.1', y, 1.0, 0.0, 1.0, 1.0, x), count(*) FROM t";

/// Table `t(x, y)`: batches of the given lengths, rows numbered on
/// across them.
fn table_batches(lengths: &[u32]) -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Float64, false),
        Field::new("y", DataType::Float64, false),
    ]));
    let mut first = 0;
    lengths
        .iter()
        .map(|&rows| {
            let column = |f: &dyn Fn(u32) -> f64| {
                Arc::new(Float64Array::from_iter_values((first..first + rows).map(f)))
            };
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    column(&|i| f64::from((i * 37) % 101) / 50.0 - 1.0),
                    column(&|i| f64::from((i * 13) % 7 < 3)),
                ],
            )
            .unwrap();
            first += rows;
            batch
        })
        .collect()
}

/// 20,000 rows in batches of 8192 and fewer.
const LENGTHS: [u32; 3] = [8192, 8192, 3616];

/// A context of `target_partitions` with table `t` in `partitions`
/// (each a run of [`table_batches`]), and fedsql's aggregates.
fn context_of(target_partitions: usize, partitions: Vec<Vec<RecordBatch>>) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(target_partitions);
    let ctx = SessionContext::new_with_config(config);
    fedsql_udfs::register_all(&ctx);
    let schema = partitions[0][0].schema();
    let table = datafusion::datasource::MemTable::try_new(schema, partitions).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

/// A context with table `t` of [`LENGTHS`] in one partition.
fn context() -> SessionContext {
    context_of(2, vec![table_batches(&LENGTHS)])
}

fn shared(exec: &AggregateExec) -> AggregateExec {
    AggregateExec::try_new(
        *exec.mode(),
        exec.group_expr().clone(),
        shared_constants(exec.aggr_expr()),
        exec.filter_expr().to_vec(),
        Arc::clone(exec.input()),
        exec.input_schema(),
    )
    .unwrap()
}

/// The rows a round's states counted (`count(*)`, the last column).
fn counted(states: Vec<RecordBatch>) -> i64 {
    states
        .iter()
        .map(|b| {
            let count = b.column(b.num_columns() - 1);
            datafusion::arrow::compute::sum(count.as_primitive::<Int64Type>()).unwrap_or(0)
        })
        .sum()
}

fn wrapped_arguments(exec: &AggregateExec) -> usize {
    exec.aggr_expr()
        .iter()
        .flat_map(|a| a.expressions())
        .filter(|e| e.downcast_ref::<ConstantArgument>().is_some())
        .count()
}

#[tokio::test]
async fn shared_constants_give_the_same_state_and_stay_shared_when_rebound() {
    let ctx = context();
    let old_plan = aggregate(&ctx, STEP).await;
    let plain = partial(&ctx, &old_plan).await;
    let over_kept = shared(&plain);
    // The config, trials, offset, weight and intercept, and count's 1.
    assert_eq!(wrapped_arguments(&over_kept), 6);
    assert_eq!(
        run(&ctx, over_kept.clone()).await,
        run(&ctx, plain.clone()).await
    );

    let new_plan =
        rebind::replace_text_argument(&old_plan, OLD, "family=binomial;beta=-0.25,0.75").unwrap();
    let fresh = partial(&ctx, &new_plan).await;
    let changes = rebind::argument_changes(&old_plan, &new_plan).expect("only the config");
    let rebound = rebind::rebind(&over_kept, &changes)
        .unwrap()
        .expect("a shared literal rebinds");
    assert_eq!(wrapped_arguments(&rebound), 6);
    let (rebound_state, fresh_state) = (
        run(&ctx, rebound.clone()).await,
        run(&ctx, fresh.clone()).await,
    );
    assert_eq!(rebound_state[0].columns(), fresh_state[0].columns());
    assert_ne!(
        rebound_state[0].columns(),
        run(&ctx, plain.clone()).await[0].columns()
    );
}

#[tokio::test]
async fn kept_rows_are_spread_over_no_more_partitions_than_batches() {
    // 3 batches over 3 partitions; 40 over the fixed 16.
    let many = [500; 40];
    for (lengths, spread) in [(&LENGTHS[..], 3), (&many[..], KEPT_PARTITIONS)] {
        let ctx = context_of(2, vec![table_batches(lengths)]);
        let plan = aggregate(&ctx, STEP).await;
        let plain = partial(&ctx, &plan).await;
        let kept = KeptRows::default();
        let over_kept = kept
            .partial_over_kept(
                plain,
                &plan,
                1,
                "t".into(),
                (&SiteEngine::new(), &[]),
                ctx.task_ctx(),
            )
            .await
            .unwrap();
        let partitions = over_kept
            .input()
            .properties()
            .partitioning
            .partition_count();
        assert_eq!(partitions, spread, "{} batches", lengths.len());
        // Every kept row is counted once, whatever the spread.
        let rows: u32 = lengths.iter().sum();
        assert_eq!(counted(run(&ctx, over_kept).await), i64::from(rows));
    }
}

/// The state a site returns for a round of a fit, and for the round
/// after it (over the rows kept by the first).
async fn fit_states(ctx: &SessionContext, files: &[PathBuf]) -> [Vec<RecordBatch>; 2] {
    let plan = aggregate(ctx, STEP).await;
    let kept = KeptRows::default();
    let mut states = Vec::new();
    for _ in 0..2 {
        let plain = partial(ctx, &plan).await;
        let over_kept = kept
            .partial_over_kept(
                plain,
                &plan,
                9,
                "t".into(),
                (&SiteEngine::new(), files),
                ctx.task_ctx(),
            )
            .await
            .unwrap();
        let state = in_order::one_state_per_group(over_kept).unwrap();
        states.push(collect(state, ctx.task_ctx()).await.unwrap());
    }
    states.try_into().unwrap()
}

/// A Parquet file of 37 row groups of uneven lengths (of
/// [`table_batches`]) in a new folder.
fn file_of_row_groups() -> (tempfile::TempDir, PathBuf) {
    let lengths: Vec<u32> = (0..37).map(|i| 300 + (i * 7919) % 1200).collect();
    file_of_groups(&lengths)
}

/// A Parquet file of row groups of the given lengths in a new folder.
fn file_of_groups(lengths: &[u32]) -> (tempfile::TempDir, PathBuf) {
    let batches = table_batches(lengths);
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("t.parquet");
    let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        batches[0].schema(),
        None,
    )
    .unwrap();
    for batch in &batches {
        writer.write(batch).unwrap();
        writer.flush().unwrap();
    }
    writer.close().unwrap();
    (dir, path)
}

/// A site's context over the file at `path` as table `t`, its scan
/// spread over `cores` byte ranges (`split`) or one range.
async fn site_over(path: &std::path::Path, cores: usize, split: bool) -> SessionContext {
    let config = crate::site::engine::site_session()
        .copied_config()
        .with_target_partitions(cores)
        .with_repartition_file_min_size(if split { 0 } else { usize::MAX });
    let ctx = SessionContext::new_with_config(config);
    fedsql_udfs::register_all(&ctx);
    ctx.register_parquet("t", path.to_str().unwrap(), Default::default())
        .await
        .unwrap();
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fit_has_the_same_bits_however_many_cores_read_its_file() {
    // The file read as 1 to 7 byte ranges at once (as a site's scan
    // spreads a file over its cores), and as one range dealt out in
    // turn over 3 cores (as DataFusion spreads a file too small to
    // split), three times each; by DataFusion's scan (the file is not
    // named as the site's).
    let (_dir, path) = file_of_row_groups();
    let mut expected = None;
    for (cores, split) in [(1, true), (2, true), (3, true), (7, true), (3, false)] {
        let ctx = site_over(&path, cores, split).await;
        let plan = aggregate(&ctx, STEP).await;
        let scan = partial(&ctx, &plan).await;
        assert_eq!(scan.properties().partitioning.partition_count(), cores);
        let shown = datafusion::physical_plan::displayable(&scan)
            .indent(true)
            .to_string();
        assert_eq!(!split, shown.contains("RoundRobinBatch"), "{shown}");
        for _ in 0..3 {
            let states = fit_states(&ctx, &[]).await;
            assert_eq!(states[0], states[1], "{cores} cores");
            let expected = expected.get_or_insert_with(|| states.clone());
            assert_eq!(&states, expected, "{cores} cores");
        }
    }
}

/// The rows `scan`'s input gives [`read_in_order`] for a site of
/// `files`, in one batch, and the lengths of the batches.
async fn read_rows(
    scan: &AggregateExec,
    files: &[PathBuf],
    ctx: &SessionContext,
) -> (RecordBatch, Vec<usize>) {
    let batches = read_in_order(scan.input(), (&SiteEngine::new(), files), ctx.task_ctx())
        .await
        .unwrap();
    let lengths = batches.iter().map(|b| b.num_rows()).collect();
    let rows =
        datafusion::arrow::compute::concat_batches(&scan.input().schema(), &batches).unwrap();
    (rows, lengths)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_row_group_is_cut_every_batch_from_its_first_row() {
    // Batches of 300 rows: the site decodes 16 × 300 rows at once and
    // hands them out 300 at a time, and a row group's last rows alone.
    let groups = [5000, 1234, 4800, 7];
    let (_dir, path) = file_of_groups(&groups);
    let config = crate::site::engine::site_session()
        .copied_config()
        .with_target_partitions(2)
        .with_batch_size(300);
    let ctx = SessionContext::new_with_config(config);
    fedsql_udfs::register_all(&ctx);
    ctx.register_parquet("t", path.to_str().unwrap(), Default::default())
        .await
        .unwrap();
    let scan = partial(&ctx, &aggregate(&ctx, STEP).await).await;
    let (site_rows, lengths) = read_rows(&scan, &[path], &ctx).await;
    let expected: Vec<usize> = groups
        .iter()
        .flat_map(|&rows| {
            let rows = rows as usize;
            let mut cut = vec![300; rows / 300];
            cut.extend((!rows.is_multiple_of(300)).then_some(rows % 300));
            cut
        })
        .collect();
    assert_eq!(lengths, expected);
    let (datafusion_rows, _) = read_rows(&scan, &[], &ctx).await;
    assert_eq!(site_rows, datafusion_rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sites_parquet_file_is_read_by_row_group_with_the_same_rows_and_bits() {
    let (_dir, path) = file_of_row_groups();
    let files = [path.clone()];
    let mut expected = None;
    for cores in [1, 2, 3, 7] {
        let ctx = site_over(&path, cores, true).await;
        let plan = aggregate(&ctx, STEP).await;
        let scan = partial(&ctx, &plan).await;
        // The site reads the scan itself, in as many streams as cores.
        let mut leaves = Vec::new();
        let _ = scan.input().apply(|node| {
            if node.children().is_empty() {
                leaves.push(Arc::clone(node));
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        });
        let footers = SiteEngine::new().footers().clone();
        let by_site = RowGroupsExec::of(&leaves[0], &files, &footers, cores, 8192)
            .unwrap()
            .expect("a scan of the site's file");
        assert_eq!(by_site.properties().partitioning.partition_count(), cores);
        // Not for a file that is not the site's.
        let elsewhere = [path.with_file_name("other.parquet")];
        assert!(
            RowGroupsExec::of(&leaves[0], &elsewhere, &footers, cores, 8192)
                .unwrap()
                .is_none()
        );
        // The same rows as DataFusion's scan, in the same order, in
        // batches cut at the same places whatever the cores.
        let (site_rows, site_lengths) = read_rows(&scan, &files, &ctx).await;
        let (datafusion_rows, _) = read_rows(&scan, &[], &ctx).await;
        assert_eq!(site_rows, datafusion_rows, "{cores} cores");
        assert_eq!(
            site_rows.num_rows(),
            37 * 300 + (0..37u32).map(|i| (i * 7919) % 1200).sum::<u32>() as usize
        );
        // The sums of a fit over them: the same bits in every round
        // and whatever the cores.
        let states = fit_states(&ctx, &files).await;
        assert_eq!(states[0], states[1], "{cores} cores");
        let expected = expected.get_or_insert_with(|| (states.clone(), site_lengths.clone()));
        assert_eq!(&(states, site_lengths), expected, "{cores} cores");
    }
}
