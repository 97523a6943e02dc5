//! Remote clients: `fedsql worker`s on 127.0.0.1 (in this process on
//! ephemeral ports, or child processes of the built binary) serving unequal
//! parts of the demo rows. Results equal the in-process federation and the
//! centralized run; the worker refuses wrong tokens and hand-crafted plans
//! on its own; a killed, unreachable or silent worker is an error naming
//! its client, and the coordinator keeps working.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightDescriptor, Ticket};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::CsvReadOptions;
use fedsql::FedContext;
use fedsql::protocol::codec::{CoordinatorCodec, plan_to_bytes};
use fedsql::protocol::flight::{EncodeRequest, TicketCommand, ticket_command};
use fedsql::site::release::policy::DisclosurePolicy;
use fedsql::site::worker::{self, RunningWorker, WorkerConfig};
use futures::TryStreamExt;
use prost::Message;
use tempfile::TempDir;
use tonic::{Code, Request, Status};

use crate::golden::{check_files, queries};
use crate::support::{
    Format, assert_same_result, demo_rows, federation, split_sizes, write_clients,
};

pub(crate) const TOKEN: &str = "s3cret-token-for-tests";

/// In-process workers, one per client file, each serving it as `table`.
pub(crate) struct Workers {
    pub(crate) workers: Vec<RunningWorker>,
    logs: Arc<Mutex<Vec<String>>>,
    token_file: PathBuf,
    _dir: TempDir,
}

impl Workers {
    pub(crate) async fn start(files: &[PathBuf], table: &str) -> Self {
        Self::start_with(files, table, |c| c).await
    }

    pub(crate) async fn start_with(
        files: &[PathBuf],
        table: &str,
        configure: impl Fn(WorkerConfig) -> WorkerConfig,
    ) -> Self {
        let dir = TempDir::new().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut workers = Vec::new();
        for file in files {
            let sink = Arc::clone(&logs);
            let mut config = WorkerConfig::new(
                "127.0.0.1:0".parse().unwrap(),
                vec![(table.to_string(), file.clone())],
                TOKEN,
            );
            // These suites compare with the unrestricted answer: the worker
            // runs with no disclosure policy, as `--policy none` asks.
            config.policy = None;
            config.log = Some(Arc::new(move |line: &str| {
                sink.lock().unwrap().push(line.to_string())
            }));
            workers.push(worker::start(configure(config)).await.unwrap());
        }
        Self {
            workers,
            logs,
            token_file,
            _dir: dir,
        }
    }

    fn url(&self, i: usize) -> String {
        format!("grpc://{}", self.workers[i].addr())
    }

    /// `CREATE FEDERATED TABLE name CLIENTS ('h0' = url0, ...) OPTIONS (token)`.
    pub(crate) fn create(&self, name: &str) -> String {
        let clients: Vec<String> = (0..self.workers.len())
            .map(|i| format!("'h{i}' = '{}'", self.url(i)))
            .collect();
        format!(
            "CREATE OR REPLACE FEDERATED TABLE {name} CLIENTS ({}) OPTIONS ('token_file' '{}')",
            clients.join(", "),
            self.token_file.display()
        )
    }

    pub(crate) fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }
}

pub(crate) async fn run(ctx: &FedContext, sql: &str) -> fedsql::Result<Vec<RecordBatch>> {
    ctx.sql(sql).await?.collect().await
}

pub(crate) async fn remote_context(workers: &Workers) -> FedContext {
    let ctx = FedContext::new();
    run(&ctx, &workers.create("clinic")).await.unwrap();
    ctx
}

#[tokio::test]
async fn three_workers_match_local_federated_and_centralized() {
    let n = demo_rows().1.len();
    let sizes = split_sizes(n, 3);
    assert!(
        sizes.contains(&1),
        "unequal clients, one of them a single row"
    );
    let mut f = federation(&sizes, Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let remote = remote_context(&workers).await;
    let clients = run(&remote, "SHOW CLIENTS clinic").await.unwrap();
    assert_eq!(clients[0].num_rows(), 3);

    // Remote = in-process federated, query by query.
    for sql in &queries("aggregates.slt") {
        let a = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = run(&f.fed, sql).await.unwrap();
        assert_same_result(sql, &a, &b, sql.contains("ORDER BY"), 1e-12);
    }
    // EXPLAIN FEDERATED shows the physical plan the first worker would run.
    let explained = run(
        &remote,
        "EXPLAIN FEDERATED SELECT region, avg(bmi) FROM clinic GROUP BY region",
    )
    .await
    .unwrap();
    let text = explained[0]
        .column(0)
        .as_string::<i32>()
        .value(0)
        .to_string();
    assert!(
        text.contains("(at worker grpc://") && text.contains("mode=PartialReduce"),
        "{text}"
    );
    // Remote = centralized, over the golden files that need no policy
    // (shared tables joined inside the encoders, multi-round queries).
    f.fed = remote;
    check_files(
        &f,
        &[
            "aggregates.slt",
            "shared_tables.slt",
            "answered_over_aggregates.slt",
            "refusals.slt",
        ],
    )
    .await;
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("released") && l.contains("covering")),
        "workers log what they release: {logs:?}"
    );
}

#[tokio::test]
async fn a_table_may_mix_local_and_remote_clients_and_name_the_worker_table() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Parquet).await;
    // The workers serve the rows as `visits_2024`; the URL names that table.
    let workers = Workers::start(&f.client_files[1..], "visits_2024").await;
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE clinic CLIENTS ('local' = '{}', 'w1' = '{}/visits_2024', 'w2' = '{}/visits_2024') \
             OPTIONS ('token_file' '{}', 'timeout' '20s')",
            f.client_files[0].display(),
            workers.url(0),
            workers.url(1),
            workers.token_file.display()
        ),
    )
    .await
    .unwrap();
    for sql in &queries("aggregates.slt")[..12] {
        let a = run(&ctx, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = f.central.sql(sql).await.unwrap().collect().await.unwrap();
        assert_same_result(sql, &a, &b, sql.contains("ORDER BY"), 1e-9);
    }
    // The default worker-side name is the federated table's: not served here.
    let err = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE other CLIENTS ('w1' = '{}') OPTIONS ('token_file' '{}')",
            workers.url(0),
            workers.token_file.display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'w1'") && err.contains("no table"),
        "{err}"
    );
}

#[tokio::test]
async fn lm_and_glm_fits_are_the_same_over_workers() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let one = federation(&[n], Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let remote = remote_context(&workers).await;
    for sql in [
        "SELECT * FROM lm('clinic', 'systolic ~ age + bmi + smoker + C(region)')",
        "SELECT * FROM lm_stats('SELECT * FROM clinic WHERE age > 40', 'systolic ~ age + sex')",
        "SELECT * FROM glm('clinic', 'event ~ age + bmi + smoker + C(region)', 'binomial')",
        "SELECT * FROM glm_stats('clinic', 'event ~ age + bmi + smoker + C(region)', 'binomial')",
        "SELECT * FROM glm('SELECT * FROM clinic WHERE age > 30', 'visits ~ age + smoker', 'poisson')",
    ] {
        let got = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let local = run(&f.fed, sql).await.unwrap();
        let centralized = run(&one.fed, sql).await.unwrap();
        assert_same_result(sql, &got, &local, true, 1e-9);
        assert_same_result(sql, &got, &centralized, true, 1e-8);
    }
    // Each IRLS round after the first reused the rows the worker decoded,
    // and the fit's end was announced to the workers.
    // The release is sent as the fit ends, without waiting for an answer:
    // wait until the workers have logged it (or give up after 10 s).
    let started = std::time::Instant::now();
    while !workers.logs().iter().any(|l| l.contains("released fit"))
        && started.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let logs = workers.logs();
    assert!(logs.iter().any(|l| l.contains("(fit ")), "{logs:?}");
    assert!(logs.iter().any(|l| l.contains("released fit")), "{logs:?}");
}

/// A raw Flight client, for what a coordinator would never send.
pub(crate) async fn flight(
    addr: std::net::SocketAddr,
) -> FlightServiceClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightServiceClient::new(channel)
}

pub(crate) fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// Sends a plan straight to a worker, as its ticket.
async fn send_plan(addr: std::net::SocketAddr, plan: Vec<u8>) -> Result<Vec<RecordBatch>, Status> {
    send_ticket(
        addr,
        TicketCommand {
            command: Some(ticket_command::Command::Encode(EncodeRequest {
                plan,
                fit_scope: None,
            })),
        }
        .encode_to_vec(),
    )
    .await
}

async fn send_ticket(
    addr: std::net::SocketAddr,
    ticket: Vec<u8>,
) -> Result<Vec<RecordBatch>, Status> {
    let stream = flight(addr)
        .await
        .do_get(with_token(
            Ticket {
                ticket: ticket.into(),
            },
            TOKEN,
        ))
        .await?
        .into_inner();
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(|e| match e {
            FlightError::Tonic(status) => *status,
            other => Status::internal(other.to_string()),
        })
}

/// The first node of a plan that matches.
fn find(plan: &LogicalPlan, want: impl Fn(&LogicalPlan) -> bool) -> LogicalPlan {
    let mut found = None;
    plan.apply(|node| {
        if want(node) {
            found = Some(node.clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .unwrap();
    found.expect("node in plan")
}

/// A coordinator's plan as a client would get it (`_client` bound).
async fn logical(ctx: &FedContext, sql: &str) -> LogicalPlan {
    let plan = ctx
        .session()
        .state()
        .create_logical_plan(sql)
        .await
        .unwrap();
    fedsql::coordinator::client_column::bind_plan(plan, "h0").unwrap()
}

#[tokio::test]
async fn the_worker_refuses_hand_crafted_plans_and_keeps_serving() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let workers = Workers::start(&f.client_files[2..], "clinic").await;
    let addr = workers.workers[0].addr();
    let ctx = remote_context(&workers).await;
    let is_scan = |p: &LogicalPlan| matches!(p, LogicalPlan::TableScan(_));
    let is_aggregate = |p: &LogicalPlan| matches!(p, LogicalPlan::Aggregate(_));

    // A file the worker was not told to serve, as a shared table here.
    let secret_dir = TempDir::new().unwrap();
    let secret = secret_dir.path().join("secret.csv");
    std::fs::write(&secret, "region,password\nnorth,hunter2\n").unwrap();
    ctx.session()
        .register_csv("secret", secret.to_str().unwrap(), CsvReadOptions::new())
        .await
        .unwrap();
    let proto = |plan: &LogicalPlan| {
        datafusion_proto::bytes::logical_plan_to_bytes_with_extension_codec(
            plan,
            &CoordinatorCodec::new("clinic"),
        )
        .unwrap()
        .to_vec()
    };

    let scan = find(&logical(&ctx, "SELECT * FROM clinic").await, is_scan);
    let projection = logical(&ctx, "SELECT age, bmi FROM clinic WHERE age > 50").await;
    let array_agg = find(
        &logical(
            &ctx,
            "SELECT region, array_agg(age) FROM clinic GROUP BY region",
        )
        .await,
        is_aggregate,
    );
    let distinct = find(
        &logical(&ctx, "SELECT count(DISTINCT age) FROM clinic").await,
        is_aggregate,
    );
    let file_path = find(
        &logical(&ctx, "SELECT max(password) FROM secret").await,
        is_aggregate,
    );
    let joined_file = find(
        &logical(
            &ctx,
            "SELECT s.password, count(*) FROM clinic c JOIN secret s ON c.region = s.region GROUP BY s.password",
        )
        .await,
        is_aggregate,
    );
    let count = find(
        &logical(&ctx, "SELECT count(*) FROM clinic").await,
        is_aggregate,
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("a bare scan", proto(&scan), "not an aggregate"),
        ("a projection", proto(&projection), "not an aggregate"),
        ("array_agg", proto(&array_agg), "array_agg"),
        ("count(DISTINCT)", proto(&distinct), "DISTINCT"),
        (
            "a file the worker does not serve",
            proto(&file_path),
            "not a table this worker serves",
        ),
        (
            "a join with a file the worker does not serve",
            proto(&joined_file),
            "not a table this worker serves",
        ),
        (
            "a table the worker does not serve",
            plan_to_bytes(&count, "other_table").await.unwrap(),
            "serves no table `other_table`",
        ),
    ];
    for (what, plan, why) in cases {
        let status = send_plan(addr, plan).await.expect_err(what);
        assert_eq!(status.code(), Code::PermissionDenied, "{what}: {status:?}");
        assert!(status.message().contains(why), "{what}: {status:?}");
        assert!(!status.message().contains("hunter2"), "{what}: {status:?}");
    }
    // Malformed bytes: refused as such.
    for (what, ticket) in [
        ("garbage ticket", vec![0xff, 0x01, 0x02]),
        ("empty ticket", Vec::new()),
        (
            "garbage plan",
            TicketCommand {
                command: Some(ticket_command::Command::Encode(EncodeRequest {
                    plan: b"not a plan at all".to_vec(),
                    fit_scope: Some(1),
                })),
            }
            .encode_to_vec(),
        ),
    ] {
        let status = send_ticket(addr, ticket).await.expect_err(what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    }
    let status = flight(addr)
        .await
        .do_action(with_token(
            Action {
                r#type: "fedsql.read_file".into(),
                body: b"/etc/passwd".to_vec().into(),
            },
            TOKEN,
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    // A well-formed aggregate sent the same way gets exactly one state row.
    let states = send_plan(addr, proto(&count)).await.unwrap();
    assert_eq!(states.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let covering = format!("covering {} row(s)", f.sizes[2]);
    assert!(
        workers
            .logs()
            .iter()
            .any(|l| l.contains("released 1 state row(s) of [count]") && l.contains(&covering)),
        "the log says what was released and how many rows it covers: {:?}",
        workers.logs()
    );
    // And the worker still serves the coordinator.
    let got = run(&ctx, "SELECT count(*) AS n, avg(bmi) AS b FROM clinic")
        .await
        .unwrap();
    let n_rows = got[0].column(0).as_primitive::<Int64Type>().value(0);
    assert_eq!(n_rows as usize, f.sizes[2]);
    let refusals = workers
        .logs()
        .iter()
        .filter(|l| l.contains("REFUSED"))
        .count();
    assert!(
        refusals >= 10,
        "every refusal is logged: {:?}",
        workers.logs()
    );
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused_and_logged() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let wrong = workers._dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-token").unwrap();
    let ctx = FedContext::new();
    let err = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE clinic CLIENTS ('h0' = '{}') OPTIONS ('token_file' '{}')",
            workers.url(0),
            wrong.display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'h0'") && err.contains("token"),
        "{err}"
    );
    let err = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE clinic CLIENTS ('h0' = '{}')",
            workers.url(0)
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("token_file"), "{err}");

    // Straight to the worker: no token, and a wrong one.
    let addr = workers.workers[0].addr();
    let descriptor = || FlightDescriptor::new_path(vec!["clinic".into()]);
    let status = flight(addr)
        .await
        .get_schema(descriptor())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    let status = flight(addr)
        .await
        .get_schema(with_token(descriptor(), "s3cret-token-for-test"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    let status = flight(addr)
        .await
        .do_get(with_token(
            Ticket {
                ticket: vec![].into(),
            },
            "nope",
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert!(
        flight(addr)
            .await
            .get_schema(with_token(descriptor(), TOKEN))
            .await
            .is_ok()
    );
    let logs = workers.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("REFUSED") && l.contains("wrong token")),
        "{logs:?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.contains("REFUSED") && l.contains("no token")),
        "{logs:?}"
    );
}

#[tokio::test]
async fn unreachable_and_silent_workers_fail_within_the_timeout() {
    let dir = TempDir::new().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    // Nobody listens on this port any more.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // This one accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let ctx = FedContext::new();
    for (client, addr, expect) in [
        ("gone", closed, "client 'gone'"),
        ("mute", silent_addr, "no answer within"),
    ] {
        let started = Instant::now();
        let err = run(
            &ctx,
            &format!(
                "CREATE FEDERATED TABLE t CLIENTS ('{client}' = 'grpc://{addr}') OPTIONS ('token_file' '{}', 'timeout' '1s')",
                token.display()
            ),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, fedsql::FedError::Client { .. }), "{text}");
        assert!(
            text.contains(&format!("client '{client}'")) && text.contains(expect),
            "{text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
    // The coordinator is still usable.
    assert!(run(&ctx, "SELECT 1").await.is_ok());
    held.abort();
}

/// Bytes per round and client for a query over `files` served by workers.
async fn analyze(files: &[PathBuf], sql: &str) -> Vec<(String, i64, Option<i64>, i64)> {
    let workers = Workers::start(files, "clinic").await;
    let ctx = remote_context(&workers).await;
    let batches = run(&ctx, &format!("EXPLAIN ANALYZE FEDERATED {sql}"))
        .await
        .unwrap();
    let mut rows = Vec::new();
    for b in &batches {
        let column = |name: &str| b.column(b.schema().index_of(name).unwrap()).clone();
        let (client, state_rows, sent, received) = (
            column("client"),
            column("state_rows"),
            column("bytes_sent"),
            column("bytes_received"),
        );
        for i in 0..b.num_rows() {
            rows.push((
                client.as_string::<i32>().value(i).to_string(),
                state_rows.as_primitive::<Int64Type>().value(i),
                (!sent.is_null(i)).then(|| sent.as_primitive::<Int64Type>().value(i)),
                received.as_primitive::<Int64Type>().value(i),
            ));
        }
    }
    rows
}

#[tokio::test]
async fn explain_analyze_bytes_received_do_not_grow_with_the_rows() {
    let (header, rows) = demo_rows();
    let sizes = split_sizes(rows.len(), 3);
    let dir = TempDir::new().unwrap();
    let small = write_clients(&dir.path().join("x1"), &header, &rows, &sizes, Format::Csv);
    // Every client's rows ten times over.
    let mut big_rows = Vec::new();
    let mut big_sizes = Vec::new();
    let mut start = 0;
    for size in &sizes {
        for _ in 0..10 {
            big_rows.extend_from_slice(&rows[start..start + size]);
        }
        big_sizes.push(size * 10);
        start += size;
    }
    let big = write_clients(
        &dir.path().join("x10"),
        &header,
        &big_rows,
        &big_sizes,
        Format::Csv,
    );
    let sql = "SELECT region, count(*) AS n, avg(bmi) AS b, corr(age, bmi) AS r FROM clinic GROUP BY region";
    let one = analyze(&small, sql).await;
    let ten = analyze(&big, sql).await;
    assert_eq!(one.len(), 3, "{one:?}");
    assert_eq!(one, ten, "the same state, whatever the number of rows");
    for (client, state_rows, sent, received) in &one {
        assert!(*state_rows >= 1 && *received > 0, "{client}");
        assert!(sent.is_some_and(|s| s > 0), "{client}: the plan was sent");
    }
    // A multi-round query reports each round; in-process clients send nothing.
    let n = rows.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let batches = run(
        &f.fed,
        "EXPLAIN ANALYZE FEDERATED SELECT count(*) FROM clinic WHERE age > (SELECT avg(age) FROM clinic)",
    )
    .await
    .unwrap();
    let b = &batches[0];
    assert_eq!(b.num_rows(), 6, "two rounds of three clients");
    assert_eq!(b.column(4).null_count(), 6);
}

#[tokio::test]
async fn a_tls_worker_serves_over_grpcs() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &Issuer::from_params(&ca_params, &ca_key))
        .unwrap();
    let tls = (
        leaf.pem().into_bytes(),
        leaf_key.serialize_pem().into_bytes(),
    );

    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let workers = Workers::start_with(&f.client_files, "clinic", |mut c| {
        c.tls = Some(tls.clone());
        c
    })
    .await;
    let ca_file = workers._dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let clients: Vec<String> = workers
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| format!("'h{i}' = 'grpcs://localhost:{}'", w.addr().port()))
        .collect();
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE clinic CLIENTS ({}) OPTIONS ('token_file' '{}', 'ca_cert' '{}')",
            clients.join(", "),
            workers.token_file.display(),
            ca_file.display()
        ),
    )
    .await
    .unwrap();
    for sql in &queries("aggregates.slt")[..6] {
        let a = run(&ctx, sql).await.unwrap();
        let b = f.central.sql(sql).await.unwrap().collect().await.unwrap();
        assert_same_result(sql, &a, &b, false, 1e-9);
    }
    // Plain text to a TLS worker, and TLS without the authority, fail.
    let err = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('plain' = '{}') OPTIONS ('token_file' '{}', 'timeout' '3s')",
            workers.url(0),
            workers.token_file.display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'plain'") && err.contains("the worker speaks TLS: use grpcs://"),
        "{err}"
    );
    // TLS to a worker without it.
    let plain = Workers::start(&f.client_files[..1], "clinic").await;
    let err = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('tls' = 'grpcs://localhost:{}') OPTIONS ('token_file' '{}', 'ca_cert' '{}', 'timeout' '3s')",
            plain.workers[0].addr().port(),
            plain.token_file.display(),
            ca_file.display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'tls'") && err.contains("the worker does not speak TLS: use grpc://"),
        "{err}"
    );
    let err = run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE t CLIENTS ('noca' = 'grpcs://localhost:{}') OPTIONS ('token_file' '{}')",
            workers.workers[0].addr().port(),
            workers.token_file.display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("client 'noca'") && err.contains("ca_cert"),
        "{err}"
    );
}

/// A `fedsql worker` child process, killed when dropped.
struct ChildWorker {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl ChildWorker {
    fn spawn(table_file: &Path, token_file: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fedsql"))
            .args([
                "worker",
                "--audit-log",
                "none",
                "--policy",
                "none",
                "--listen",
                "127.0.0.1:0",
                "--table",
            ])
            .arg(format!("clinic={}", table_file.display()))
            .arg("--token-file")
            .arg(token_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix("fedsql worker listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        let stderr: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            addr,
            stderr,
        }
    }

    fn saw(&self, text: &str) -> bool {
        self.stderr.lock().unwrap().iter().any(|l| l.contains(text))
    }
}

impl Drop for ChildWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_worker_killed_mid_query_names_its_client_and_the_rest_keep_working() {
    let (header, rows) = demo_rows();
    let sizes = split_sizes(rows.len(), 3);
    let f = federation(&sizes, Format::Csv).await;
    let dir = TempDir::new().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    // The third client holds many rows, so that its encoder runs long
    // enough to be killed while it runs.
    let mut big = String::from(&header);
    big.push('\n');
    for _ in 0..600 {
        for row in &rows {
            big.push_str(row);
            big.push('\n');
        }
    }
    let big_file = dir.path().join("big.csv");
    std::fs::write(&big_file, big).unwrap();
    let workers = [
        ChildWorker::spawn(&f.client_files[0], &token),
        ChildWorker::spawn(&f.client_files[1], &token),
        ChildWorker::spawn(&big_file, &token),
    ];
    let ctx = FedContext::new();
    let clients: Vec<String> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| format!("'h{i}' = 'grpc://{}'", w.addr))
        .collect();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE clinic CLIENTS ({}) OPTIONS ('token_file' '{}', 'timeout' '60s')",
            clients.join(", "),
            token.display()
        ),
    )
    .await
    .unwrap();

    let [w0, w1, mut w2] = workers;
    let query = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            run(
                &ctx,
                "SELECT region, approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY systolic) AS p, \
                 covariance_matrix(age, bmi, systolic) AS c FROM clinic GROUP BY region",
            )
            .await
        })
    };
    let started = Instant::now();
    while !w2.saw("running encoder") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the big worker never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    w2.child.kill().unwrap();
    let _ = w2.child.wait();
    let err = query
        .await
        .unwrap()
        .expect_err("a killed worker fails the query");
    let text = err.to_string();
    assert!(matches!(err, fedsql::FedError::Client { .. }), "{text}");
    assert!(text.contains("client 'h2'"), "{text}");
    assert!(!w2.saw("released"), "the worker died before answering");

    // The same table now fails at once, naming the dead client.
    let err = run(&ctx, "SELECT count(*) FROM clinic")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("client 'h2'"), "{err}");
    // The remaining workers answer, exactly.
    run(
        &ctx,
        &format!(
            "CREATE OR REPLACE FEDERATED TABLE clinic CLIENTS ('h0' = 'grpc://{}', 'h1' = 'grpc://{}') OPTIONS ('token_file' '{}')",
            w0.addr,
            w1.addr,
            token.display()
        ),
    )
    .await
    .unwrap();
    let sql = "SELECT count(*) AS n, sum(age) AS s FROM clinic";
    let got = run(&ctx, sql).await.unwrap();
    // Centralized over the two remaining clients' rows.
    let central = datafusion::prelude::SessionContext::new();
    let both = central
        .read_csv(
            vec![
                f.client_files[0].to_str().unwrap(),
                f.client_files[1].to_str().unwrap(),
            ],
            CsvReadOptions::new(),
        )
        .await
        .unwrap();
    central.register_table("clinic", both.into_view()).unwrap();
    let expected = central.sql(sql).await.unwrap().collect().await.unwrap();
    assert_same_result(sql, &got, &expected, true, 1e-9);
    assert!(w0.saw("released") && w1.saw("released"));
}

/// Secure sums over workers: the two steps of the masking protocol travel
/// as Flight actions; the result equals the in-process federation's (which
/// tests/suites/secure.rs checks against the centralized sum), each worker
/// releases only a masked state, and a plain ticket for a secure encoder is
/// refused by the worker itself.
#[tokio::test]
async fn secure_sums_run_over_workers_and_leave_them_only_masked() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let remote = remote_context(&workers).await;
    for sql in [
        "SELECT secure_sum(age, 0, 120) AS s, secure_count(1) AS n FROM clinic",
        "SELECT region, secure_sum(age, 0, 120) AS s, secure_avg(bmi, 10, 60) AS b, count(*) AS n FROM clinic GROUP BY region ORDER BY region",
        "SELECT sex, secure_sum_vec([CAST(age AS DOUBLE), bmi], [0, 10], [120, 60]) AS v FROM clinic WHERE smoker = 1 GROUP BY sex ORDER BY sex",
    ] {
        let a = run(&remote, sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = run(&f.fed, sql).await.unwrap();
        assert_same_result(sql, &a, &b, true, 0.0);
    }
    let logs = workers.logs();
    let masked = logs
        .iter()
        .filter(|l| l.contains("released") && l.contains("masked state"))
        .count();
    assert_eq!(masked, 9, "three queries, three workers: {logs:#?}");
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("released") && !l.contains("masked") && l.contains("secure_")),
        "{logs:#?}"
    );
    // A hand-crafted plain ticket for a secure encoder.
    let plan = find(
        &logical(&remote, "SELECT secure_sum(age, 0, 120) FROM clinic").await,
        |p| matches!(p, LogicalPlan::Aggregate(_)),
    );
    let bytes = plan_to_bytes(&plan, "clinic").await.unwrap();
    let refused = send_plan(workers.workers[0].addr(), bytes)
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("masked"),
        "{}",
        refused.message()
    );
    // The worker keeps serving.
    run(&remote, "SELECT secure_sum(age, 0, 120) FROM clinic")
        .await
        .unwrap();
}

/// A worker under a disclosure policy takes part in secure sums only with
/// listed peers: with none, the coordinator that relays the session keys
/// could invent the other participants and unmask the worker's state. It
/// refuses at the key exchange, before its encoder runs, naming the
/// settings that change this; with `secure_without_peers` (the data owner
/// trusting the coordinator) it answers as before. (Workers with no policy,
/// above, and in-process sites under one, in policy.rs, answer as before.)
#[tokio::test]
async fn a_worker_under_a_policy_refuses_secure_sums_without_peers() {
    let n = demo_rows().1.len();
    // Three sites, each with enough rows for the default policy's k.
    let f = federation(&[n / 3, n / 3, n - 2 * (n / 3)], Format::Csv).await;
    let sql = "SELECT secure_sum(age, 0, 120) AS s, secure_count(1) AS n FROM clinic";
    let guarded = Workers::start_with(&f.client_files, "clinic", |mut c| {
        c.policy = Some(DisclosurePolicy::default());
        c
    })
    .await;
    let remote = remote_context(&guarded).await;
    let e = run(&remote, sql).await.unwrap_err().to_string();
    assert!(
        e.contains("refused")
            && e.contains("`peers`")
            && e.contains("invent the other participants")
            && e.contains("secure_without_peers = true"),
        "{e}"
    );
    let logs = guarded.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("REFUSED") && l.contains("peers policy")),
        "{logs:#?}"
    );
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("key pair made") || l.contains("released")),
        "nothing ran, nothing left: {logs:#?}"
    );
    // Plain aggregates are answered as ever.
    run(&remote, "SELECT count(*), avg(age) FROM clinic")
        .await
        .unwrap();

    let trusting = Workers::start_with(&f.client_files, "clinic", |mut c| {
        c.policy = Some(DisclosurePolicy::default());
        c.secure_without_peers = true;
        c
    })
    .await;
    let got = run(&remote_context(&trusting).await, sql).await.unwrap();
    let want = run(&f.fed, sql).await.unwrap();
    assert_same_result(sql, &got, &want, true, 0.0);
}

/// Nothing a worker answers names its machine: `EXPLAIN FEDERATED` over a
/// worker shows the plan it would run with its files withheld, and its
/// errors (a file gone bad, a table it does not serve) name neither the
/// data file's folder nor its name — with a policy or without, CSV or
/// Parquet.
#[tokio::test]
async fn nothing_a_worker_answers_names_its_files() {
    let n = demo_rows().1.len();
    let explain =
        "EXPLAIN FEDERATED SELECT region, avg(bmi) FROM clinic WHERE age > 30 GROUP BY region";
    for format in [Format::Csv, Format::Parquet] {
        for policy in [None, Some(DisclosurePolicy::default())] {
            let f = federation(&split_sizes(n, 2), format).await;
            let file = &f.client_files[0];
            let folder = file.parent().unwrap().display().to_string();
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            let secrets = [
                folder.clone(),
                folder.trim_start_matches('/').to_string(),
                name.clone(),
            ];
            let leaks = |text: &str| secrets.iter().any(|s| text.contains(s.as_str()));
            let workers = Workers::start_with(&f.client_files, "clinic", |mut c| {
                c.policy = policy.clone();
                c
            })
            .await;
            let remote = remote_context(&workers).await;
            let explained = run(&remote, explain).await.unwrap();
            let text = explained[0]
                .column(0)
                .as_string::<i32>()
                .value(0)
                .to_string();
            assert!(
                text.contains("(at worker grpc://")
                    && text.contains("mode=Partial")
                    && text.contains("<files withheld>"),
                "{text}"
            );
            assert!(!leaks(&text), "{format:?}, {policy:?}: {text}");
            // The in-process site, the analyst's own files, shows them.
            let own = run(&f.fed, explain).await.unwrap();
            let own = own[0].column(0).as_string::<i32>().value(0).to_string();
            assert!(own.contains(&name), "{own}");

            // A table the worker does not serve.
            let url = format!("grpc://{}/nosuch", workers.workers[0].addr());
            let e = run(
                &remote,
                &format!(
                    "CREATE OR REPLACE FEDERATED TABLE other CLIENTS ('h0' = '{url}') OPTIONS ('token_file' '{}')",
                    workers.token_file.display()
                ),
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(e.contains("serves no table"), "{e}");
            assert!(!leaks(&e), "{e}");
            // Its file gone bad, then gone.
            std::fs::write(file, "not,the,same\nfile,at,all\n").unwrap();
            let e = run(&remote, "SELECT count(*), sum(age) FROM clinic")
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("client 'h0'"), "{e}");
            assert!(!leaks(&e), "{format:?}, {policy:?}: {e}");
            std::fs::remove_file(file).unwrap();
            for sql in ["SELECT count(*), sum(age) FROM clinic", explain] {
                let e = run(&remote, sql).await.unwrap_err().to_string();
                assert!(e.contains("client 'h0'"), "{e}");
                assert!(!leaks(&e), "{format:?}, {policy:?}: {e}");
            }
        }
    }
}

/// FedSGD over workers: the per-client rounds (weighting, sampling) go
/// through the same runner calls, and the iterates equal the in-process
/// federation's.
#[tokio::test]
async fn fedsgd_runs_the_same_over_workers() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let remote = remote_context(&workers).await;
    for options in [
        "optimizer=adam, learning_rate=0.05, rounds=5, standardize=true",
        "optimizer=newton, rounds=4",
        "optimizer=sgd, learning_rate=0.001, rounds=4, weighting=uniform, clients_per_round=2, seed=3",
    ] {
        let spec = fedsql::models::fedsgd::FedSgdSpec::parse(&[
            "clinic".to_string(),
            "event ~ age + bmi + smoker".to_string(),
            "logistic".to_string(),
            options.to_string(),
        ])
        .unwrap();
        let a = fedsql::models::fedsgd::fit(&remote, &spec, None)
            .await
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let b = fedsql::models::fedsgd::fit(&f.fed, &spec, None)
            .await
            .unwrap();
        assert_eq!(a.iterates, b.iterates, "{options}");
        assert_eq!(a.history, b.history, "{options}");
    }
}
