//! The DataFrame API: filters and aggregations built in Rust run federated
//! and equal the same DataFrame run centrally.

use datafusion::functions_aggregate::expr_fn::{avg, count, stddev, sum};
use datafusion::prelude::*;

use crate::support::{Format, assert_same_result, demo_rows, federation, split_sizes};

#[tokio::test]
async fn filter_aggregate_sort_equals_centralized() {
    let n = demo_rows().1.len();
    for clients in [1, 3, 7] {
        let f = federation(&split_sizes(n, clients), Format::Csv).await;
        let build = |df: DataFrame| {
            df.filter(col("age").gt_eq(lit(40)))?
                .aggregate(
                    vec![col("region")],
                    vec![
                        count(lit(1)).alias("n"),
                        avg(col("systolic")).alias("mean_sbp"),
                        stddev(col("systolic")).alias("sd"),
                        sum(col("visits") * col("smoker")).alias("smoker_visits"),
                    ],
                )?
                .sort(vec![col("region").sort(true, false)])
        };
        let fed = f
            .fed
            .table("clinic")
            .await
            .unwrap()
            .map(build)
            .unwrap()
            .collect()
            .await
            .unwrap();
        let central = build(f.central.table("clinic").await.unwrap())
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_same_result(
            &format!("dataframe, {clients} clients"),
            &fed,
            &central,
            true,
            1e-9,
        );
    }
}

#[tokio::test]
async fn convenience_methods_and_sql_dataframes_compose() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Parquet).await;
    let fed = f
        .fed
        .sql("SELECT sex, smoker, systolic FROM clinic WHERE bmi IS NOT NULL")
        .await
        .unwrap()
        .aggregate(
            vec![col("sex")],
            vec![
                avg(col("systolic")).alias("m"),
                count(col("smoker")).alias("k"),
            ],
        )
        .unwrap()
        .sort(vec![col("sex").sort(true, false)])
        .unwrap()
        .limit(0, Some(1))
        .unwrap()
        .collect()
        .await
        .unwrap();
    let central = f
        .central
        .sql(
            "SELECT sex, avg(systolic) AS m, count(smoker) AS k FROM clinic WHERE bmi IS NOT NULL \
             GROUP BY sex ORDER BY sex LIMIT 1",
        )
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_same_result("sql + dataframe", &fed, &central, true, 1e-9);
}
