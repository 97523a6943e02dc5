//! Virtual-global consistency where it needs code: the bundled demo
//! against the same rows on disk, a hundred and fifty clients, a broken
//! client. The queries themselves, and every split they run over, are the
//! golden files' (tests/golden/, run by [`crate::golden`]).

use crate::golden::{check_files, queries};
use crate::support::{
    Format, assert_consistent, demo_rows, fast_path_modes, federation_in, split_sizes,
};

#[tokio::test]
async fn bundled_demo_matches_the_same_files_on_disk() {
    let n = demo_rows().1.len();
    let f = federation_in(&split_sizes(n, 3), Format::Csv, true).await;
    let demo = fedsql::FedContext::new();
    fedsql::frontend::demo::register_demo_with(&demo, false).unwrap();
    for sql in &queries("aggregates.slt") {
        let a = demo.sql(sql).await.unwrap().collect().await.unwrap();
        let b = f.central.sql(sql).await.unwrap().collect().await.unwrap();
        crate::support::assert_same_result(sql, &a, &b, sql.contains("ORDER BY"), 1e-9);
    }
}

/// A hundred and fifty clients: states are merged in chunks of 64 sites as
/// they arrive (two chunks, then the rest), and plans are instantiated from
/// one template; the answers stay the centralized ones.
#[tokio::test]
async fn a_hundred_and_fifty_parquet_clients_merge_in_chunks() {
    let n = demo_rows().1.len();
    for fast_path in fast_path_modes() {
        let f = federation_in(&split_sizes(n, 150), Format::Parquet, fast_path).await;
        check_files(&f, &["aggregates.slt", "shared_tables.slt"]).await;
    }
}

/// A hundred and fifty clients, run by a few runner tasks: a client whose
/// file is broken ends the round with an error that names it, and once
/// the file is written again the same query gives the centralized answer.
#[tokio::test]
async fn a_broken_client_among_a_hundred_and_fifty_ends_the_round_naming_it() {
    let n = demo_rows().1.len();
    for fast_path in fast_path_modes() {
        let f = federation_in(&split_sizes(n, 150), Format::Parquet, fast_path).await;
        let sql = "SELECT count(*) AS n, avg(age) AS mean_age FROM clinic";
        assert_consistent(&f, sql).await;
        let broken = &f.client_files[100];
        let name = broken.file_stem().unwrap().to_string_lossy().to_string();
        let good = std::fs::read(broken).unwrap();
        std::fs::write(broken, b"not a Parquet file at all").unwrap();
        let e = match f.fed.sql(sql).await.unwrap().collect().await {
            Ok(batches) => panic!("a broken file answered: {batches:?}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&format!("'{name}'")), "{e}");
        std::fs::write(broken, good).unwrap();
        assert_consistent(&f, sql).await;
    }
}
