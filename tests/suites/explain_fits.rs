//! EXPLAIN FEDERATED and EXPLAIN ANALYZE FEDERATED of model fits (issue
//! 19, point 6): the program's rounds, what each client computes and the
//! size of its state; after a run, every round per client, with byte
//! counts that agree with what a worker logs.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use fedsql::FedContext;

use crate::remote::{Workers, remote_context};
use crate::support::{Format, demo_rows, federation, split_sizes};

async fn run(ctx: &FedContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn plan_text(ctx: &FedContext, sql: &str) -> String {
    let batches = run(ctx, &format!("EXPLAIN FEDERATED {sql}")).await;
    batches[0].column(0).as_string::<i32>().value(0).to_string()
}

/// (round, client, state_rows, bytes_sent, bytes_received, state_bytes, computes)
type AnalyzeRow = (i64, String, i64, Option<i64>, i64, i64, String);

fn analyze_rows(batches: &[RecordBatch]) -> Vec<AnalyzeRow> {
    let mut rows = Vec::new();
    for b in batches {
        let int = |name: &str| {
            b.column_by_name(name)
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone()
        };
        let text = |name: &str| b.column_by_name(name).unwrap().as_string::<i32>().clone();
        let (round, rows_, sent, received, bytes) = (
            int("round"),
            int("state_rows"),
            int("bytes_sent"),
            int("bytes_received"),
            int("state_bytes"),
        );
        let (client, computes) = (text("client"), text("computes"));
        for i in 0..b.num_rows() {
            rows.push((
                round.value(i),
                client.value(i).to_string(),
                rows_.value(i),
                (!sent.is_null(i)).then(|| sent.value(i)),
                received.value(i),
                bytes.value(i),
                computes.value(i).to_string(),
            ));
        }
    }
    rows
}

#[tokio::test]
async fn explain_federated_shows_the_rounds_of_a_fit() {
    let f = federation(&[1, 400, 659], Format::Csv).await;
    let glm = plan_text(
        &f.fed,
        "SELECT * FROM glm('clinic', 'event ~ age + bmi + C(region)', 'binomial')",
    )
    .await;
    for words in [
        "== Program of glm('clinic', family binomial(logit))",
        "Step 1: the levels of the factors",
        "Step 2: IRLS round 1",
        "over 6 design column(s)",
        "irls_step(",
        "runs at each of the 3 clients of `clinic`",
        "bytes per group per client",
        "Step 3: IRLS rounds 2, 3, ...",
        "at most 26 rounds",
    ] {
        assert!(glm.contains(words), "{words}:\n{glm}");
    }
    let lm = plan_text(&f.fed, "SELECT * FROM lm('clinic', 'systolic ~ age + bmi')").await;
    assert!(
        lm.contains("1 federated round(s)") && lm.contains("centered_moments("),
        "{lm}"
    );
    assert!(!lm.contains("levels"), "{lm}");
    let sgd = plan_text(
        &f.fed,
        "SELECT * FROM fedsgd('clinic', 'event ~ age + bmi', 'logistic', 'rounds=5, standardize=true')",
    )
    .await;
    assert!(
        sgd.contains("shared statistics")
            && sgd.contains("sgd_gradient(")
            && sgd.contains("rounds 1..5"),
        "{sgd}"
    );
    // The multivariate and survival functions: their rounds, recorded from
    // one run; the iterations of k-means and Cox are one aggregate each,
    // shown once.
    for (call, first) in [
        ("pca('clinic', 'age, bmi, systolic')", "centered_moments("),
        (
            "kmeans('clinic', 'age, systolic', NULL, 'centers=40 120; 70 150')",
            "kmeans_step(",
        ),
        (
            "kaplan_meier('SELECT age AS time, event FROM clinic', 'time', 'event', 'breaks=0 40 60 90')",
            "life_table(",
        ),
        (
            "coxph('SELECT age AS time, event, bmi FROM clinic', 'Surv(time, event) ~ bmi')",
            "cox_step(",
        ),
    ] {
        let text = plan_text(&f.fed, &format!("SELECT * FROM {call}")).await;
        assert!(
            text.contains("federated round(s)") && text.contains("Step 1: one round"),
            "{call}: {text}"
        );
        assert!(text.contains(first), "{call}: {text}");
        assert!(text.contains("what leaves each client"), "{call}: {text}");
        if call.starts_with("kmeans") || call.starts_with("coxph") {
            assert!(
                text.contains("again, with the coordinator's new constants"),
                "{call}: {text}"
            );
        }
    }
}

#[tokio::test]
async fn explain_analyze_federated_lists_every_round_of_a_fit() {
    let f = federation(&[1, 400, 659], Format::Csv).await;
    let call = "('clinic', 'event ~ age + bmi + smoker', 'binomial')";
    let stats = run(&f.fed, &format!("SELECT iterations FROM glm_stats{call}")).await;
    let iterations = stats[0].column(0).as_primitive::<Int64Type>().value(0);
    f.fed.take_notices();
    let rows = analyze_rows(
        &run(
            &f.fed,
            &format!("EXPLAIN ANALYZE FEDERATED SELECT * FROM glm{call}"),
        )
        .await,
    );
    // Round 1 from the starting means, then one per iteration; three clients each.
    let rounds = rows.iter().map(|r| r.0).max().unwrap();
    assert_eq!(rounds, iterations + 1, "{rows:?}");
    assert_eq!(rows.len() as i64, 3 * rounds);
    for (_, client, state_rows, sent, received, bytes, computes) in &rows {
        assert!(computes.contains("irls_step("), "{computes}");
        assert_eq!(*state_rows, 1, "{client}");
        assert_eq!(*sent, None, "in-process: nothing crosses a wire");
        assert_eq!(received, bytes, "in-process: the state as it is");
    }
    // A few hundred numbers, whatever the rows (1060 here).
    assert!(rows.iter().all(|r| r.5 < 2048), "{rows:?}");
    let notices = f.fed.take_notices().join("\n");
    assert!(
        notices.contains(&format!("{rounds} federated round(s) run")),
        "{notices}"
    );
}

#[tokio::test]
async fn state_bytes_agree_with_the_worker_log() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let ctx = remote_context(&workers).await;
    let rows = analyze_rows(
        &run(
            &ctx,
            "EXPLAIN ANALYZE FEDERATED SELECT * FROM lm('clinic', 'systolic ~ age + bmi')",
        )
        .await,
    );
    assert_eq!(rows.len(), 3, "{rows:?}");
    let logs = workers.logs();
    for (_, client, _, sent, received, bytes, computes) in &rows {
        assert!(computes.contains("centered_moments("), "{computes}");
        assert!(sent.is_some_and(|s| s > 0), "{client}");
        assert!(
            *received > 0 && *bytes > 0,
            "{client}: {received} / {bytes}"
        );
        let logged = format!("of [count, count, centered_moments], {bytes} bytes");
        assert!(
            logs.iter()
                .any(|l| l.contains("released 1 state row(s)") && l.contains(&logged)),
            "{client}: {logged} in {logs:?}"
        );
    }
}
