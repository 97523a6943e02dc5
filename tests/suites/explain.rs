//! EXPLAIN FEDERATED: shows, per round, the encoder each client runs, the
//! state leaving a client with its size per group, the merge and the
//! decoder — without running anything.

use fedsql::FedContext;

async fn explain(ctx: &FedContext, sql: &str) -> String {
    let batches = ctx
        .sql(&format!("EXPLAIN FEDERATED {sql}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn shows_encoder_state_size_merge_and_decoder() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let text = explain(&ctx, "SELECT corr(age, bmi) FROM clinic").await;
    // A demo client reads one small file in one partition: its partial
    // aggregate gives the one state row itself, with no reduce above it.
    assert!(!text.contains("mode=PartialReduce"), "{text}");
    for part in [
        "Round 1, encoder: runs at each of the 4 clients of `clinic`",
        "mode=Partial",
        "what leaves each client",
        // corr's state: count (UInt64) and five Float64 moments.
        "size: 48 bytes per group per client",
        "mode=Final",
        "Decoder",
    ] {
        assert!(
            text.contains(part),
            "EXPLAIN FEDERATED should show {part:?}:\n{text}"
        );
    }
}

#[tokio::test]
async fn grouped_and_two_round_queries() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let text = explain(
        &ctx,
        "SELECT region, count(*) AS n FROM clinic WHERE age > (SELECT avg(age) FROM clinic) GROUP BY region ORDER BY region",
    )
    .await;
    assert!(
        text.contains("Round 1") && text.contains("Round 2"),
        "{text}"
    );
    assert!(text.contains("group key"), "{text}");
    assert!(
        text.contains("Sort"),
        "the decoder sorts the merged result:\n{text}"
    );
}

#[tokio::test]
async fn refuses_what_it_would_refuse_to_run() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let err = ctx
        .sql("EXPLAIN FEDERATED SELECT * FROM clinic")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("refused"), "{err}");
}

/// EXPLAIN FEDERATED says which disclosure rules each client applies.
#[tokio::test]
async fn shows_each_clients_disclosure_policy() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo(&ctx).unwrap();
    let text = explain(&ctx, "SELECT region, avg(age) FROM clinic GROUP BY region").await;
    let policy = fedsql::site::release::policy::DisclosurePolicy::default().to_string();
    for client in ["hospital_a", "hospital_b", "hospital_c", "clinic_d"] {
        assert!(
            text.contains(&format!("--   {client}: {policy}")),
            "{client}:\n{text}"
        );
    }
    let open = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&open, false).unwrap();
    let text = explain(&open, "SELECT avg(age) FROM clinic").await;
    assert!(
        text.contains("-- disclosure policy: none at any client"),
        "{text}"
    );
}

/// A site reads a small Parquet file itself on the fast path, and through
/// DataFusion's own scan with `fast_path 'off'`.
#[tokio::test]
async fn the_fast_path_switch_picks_the_sites_scan() {
    use crate::support::{Format, demo_rows, federation_in, split_sizes};
    let n = demo_rows().1.len();
    for fast_path in [true, false] {
        let f = federation_in(&split_sizes(n, 3), Format::Parquet, fast_path).await;
        let text = explain(&f.fed, "SELECT count(*), avg(age) FROM clinic").await;
        assert_eq!(text.contains("SmallParquetExec"), fast_path, "{text}");
        assert_eq!(text.contains("DataSourceExec"), !fast_path, "{text}");
    }
}
