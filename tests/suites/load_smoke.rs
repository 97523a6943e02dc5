//! A short load on `fedsql serve` (in this process): 20 PostgreSQL
//! clients for 3 s running aggregates, a GLM fit and queries the exposure
//! check refuses, at once. Every answer comes, every refusal is one, and
//! nothing else fails. The figures under load (100 clients for 60 s, a
//! worker under 50 coordinators, a 10-minute soak) are measured by
//! `fedsql-bench --load` (see docs/guide/reliability.md).

use std::time::{Duration, Instant};

use fedsql::FedContext;
use fedsql::frontend::pgwire::{ServerOptions, start};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

const MIX: [(&str, &str); 4] = [
    (
        "aggregate",
        "SELECT region, count(*) AS n, avg(bmi) AS b FROM clinic GROUP BY region",
    ),
    (
        "aggregate",
        "SELECT corr(age, systolic) AS r, stddev(bmi) AS s FROM clinic WHERE age > 30",
    ),
    (
        "glm",
        "SELECT * FROM glm('clinic', 'event ~ age + bmi', 'binomial')",
    ),
    ("refusal", "SELECT age FROM clinic"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_clients_for_three_seconds_get_every_answer_and_refusal() {
    let ctx = FedContext::new();
    fedsql::frontend::demo::register_demo_with(&ctx, false).unwrap();
    let server = start(
        ctx,
        ServerOptions {
            listen: "127.0.0.1:0".into(),
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let port = server.addr().port();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut clients = Vec::new();
    for c in 0..20usize {
        let (client, connection) = tokio_postgres::connect(
            &format!("host=127.0.0.1 port={port} user=load{c} dbname=fedsql"),
            NoTls,
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        clients.push(tokio::spawn(async move {
            let mut done = [0usize; 4];
            let mut i = c;
            while Instant::now() < deadline {
                let (kind, sql) = MIX[i % MIX.len()];
                match (kind, client.simple_query(sql).await) {
                    ("refusal", Err(e)) => {
                        assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{e:?}")
                    }
                    ("refusal", Ok(_)) => panic!("{sql}: answered raw rows"),
                    (_, Err(e)) => panic!("{sql}: {e:?}"),
                    (_, Ok(_)) => {}
                }
                done[i % MIX.len()] += 1;
                i += 1;
            }
            done
        }));
    }
    let mut total = [0usize; 4];
    for client in clients {
        let done = client.await.unwrap();
        for (t, d) in total.iter_mut().zip(done) {
            *t += d;
        }
    }
    assert!(total.iter().all(|n| *n > 0), "{total:?}");
    eprintln!("20 clients, 3 s: {total:?} requests of each kind");
}
