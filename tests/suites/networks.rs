//! Networks that misbehave: a worker behind the fault proxy
//! (`src/bench/fault_proxy.rs`) with a slow link, a partition that heals
//! within the table's timeout (the exact answer) and one that does not
//! (an error naming the client within the timeout, and the exact answer
//! again once it heals); the coordinator keeps one connection per worker
//! across queries and rounds. Where the kernel has `netem` (and the test
//! runs as root), the same over a network namespace and a veth pair with
//! `tc netem`; elsewhere that test is skipped with a message.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fedsql::FedContext;

use crate::fault_proxy::{FaultProxy, Link};
use crate::faults::{MARGIN, assert_names, run};
use crate::remote::Workers;
use crate::support::{Federation, Format, assert_same_result, demo_rows, federation, split_sizes};

const GROUPED: &str = "SELECT region, count(*) AS n, avg(bmi) AS b FROM clinic GROUP BY region";
const TIMEOUT: Duration = Duration::from_secs(3);

/// Three in-process workers over the demo split, the last behind a proxy;
/// table `clinic` over them with a 3 s timeout.
async fn behind_a_proxy(link: Link) -> (Federation, Workers, FaultProxy, FedContext) {
    let f = federation(&split_sizes(demo_rows().1.len(), 3), Format::Csv).await;
    let workers = Workers::start(&f.client_files, "clinic").await;
    let proxy = FaultProxy::start(workers.workers[2].addr(), link)
        .await
        .unwrap();
    let create = workers.create("clinic").replace(
        &workers.workers[2].addr().to_string(),
        &proxy.addr().to_string(),
    );
    let create = format!(
        "{}, 'timeout' '{}s')",
        create.strip_suffix(')').unwrap(),
        TIMEOUT.as_secs()
    );
    let ctx = FedContext::new();
    run(&ctx, &create).await.unwrap();
    (f, workers, proxy, ctx)
}

async fn assert_exact(f: &Federation, ctx: &FedContext, sql: &str) -> Duration {
    let started = Instant::now();
    let got = run(ctx, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let took = started.elapsed();
    let want = f.central.sql(sql).await.unwrap().collect().await.unwrap();
    assert_same_result(sql, &got, &want, false, 1e-9);
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_slow_lossy_link_the_answer_is_exact_on_one_connection() {
    let link = Link {
        rtt: Duration::from_millis(50),
        bytes_per_second: Some(1 << 20),
        loss: 0.05,
    };
    let (f, _workers, proxy, ctx) = behind_a_proxy(link).await;
    for _ in 0..5 {
        let took = assert_exact(&f, &ctx, GROUPED).await;
        assert!(took >= Duration::from_millis(50), "{took:?}");
    }
    let fit = "SELECT * FROM glm('clinic', 'event ~ age + bmi + smoker', 'binomial')";
    let over_proxy = run(&ctx, fit).await.unwrap();
    let local = run(&f.fed, fit).await.unwrap();
    assert_same_result(fit, &over_proxy, &local, true, 1e-9);
    // One connection for the schema, the queries and every round.
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_heals_within_the_timeout_gives_the_exact_answer() {
    let (f, _workers, proxy, ctx) = behind_a_proxy(Link::default()).await;
    assert_exact(&f, &ctx, GROUPED).await;
    proxy.partition_for(Duration::from_secs(1));
    let took = assert_exact(&f, &ctx, GROUPED).await;
    assert!(
        took >= Duration::from_millis(900) && took < TIMEOUT + MARGIN,
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_does_not_heal_is_named_within_the_timeout() {
    let (f, _workers, proxy, ctx) = behind_a_proxy(Link::default()).await;
    assert_exact(&f, &ctx, GROUPED).await;
    proxy.partition();
    let started = Instant::now();
    let text = assert_names(run(&ctx, GROUPED).await, "h2");
    let took = started.elapsed();
    assert!(text.contains("no answer within"), "{text}");
    assert!(took >= TIMEOUT && took < TIMEOUT + MARGIN, "{took:?}");
    // Healed, the same table answers exactly.
    proxy.heal();
    assert_exact(&f, &ctx, GROUPED).await;
}

/// Runs a command; whether it succeeded, and its stderr.
fn sh(program: &str, args: &[&str]) -> (bool, String) {
    match Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(out) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Err(e) => (false, e.to_string()),
    }
}

/// A network namespace joined to this one by a veth pair (host side
/// 10.213.N.1, namespace side 10.213.N.2); deleted when dropped.
struct Namespace {
    name: String,
    host_link: String,
    ns_link: String,
    subnet: u32,
}

impl Namespace {
    fn create() -> Result<Self, String> {
        let id = std::process::id() % 10_000;
        let ns = Self {
            name: format!("fedsql-netem-{id}"),
            host_link: format!("fqn{id}a"),
            ns_link: format!("fqn{id}b"),
            subnet: 100 + id % 150,
        };
        let (ok, err) = sh("ip", &["netns", "add", &ns.name]);
        if !ok {
            return Err(format!("no network namespace ({})", err.trim()));
        }
        let steps: Vec<Vec<String>> = vec![
            vec![
                "link".into(),
                "add".into(),
                ns.host_link.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                ns.ns_link.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                ns.ns_link.clone(),
                "netns".into(),
                ns.name.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("10.213.{}.1/24", ns.subnet),
                "dev".into(),
                ns.host_link.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                ns.host_link.clone(),
                "up".into(),
            ],
            ns.inside(&[
                "addr",
                "add",
                &format!("10.213.{}.2/24", ns.subnet),
                "dev",
                &ns.ns_link,
            ]),
            ns.inside(&["link", "set", &ns.ns_link, "up"]),
            ns.inside(&["link", "set", "lo", "up"]),
        ];
        for step in steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            let (ok, err) = sh("ip", &args);
            if !ok {
                return Err(format!("ip {}: {}", step.join(" "), err.trim()));
            }
        }
        Ok(ns)
    }

    /// `ip netns exec NAME ip ARGS` as the arguments of `ip`.
    fn inside(&self, args: &[&str]) -> Vec<String> {
        let mut all = vec![
            "netns".into(),
            "exec".into(),
            self.name.clone(),
            "ip".into(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        all
    }

    /// `tc qdisc replace ... netem SPEC` on both ends of the pair.
    fn netem(&self, spec: &str) -> Result<(), String> {
        let spec: Vec<&str> = spec.split_whitespace().collect();
        let mut host = vec!["qdisc", "replace", "dev", &self.host_link, "root", "netem"];
        host.extend(&spec);
        let (ok, err) = sh("tc", &host);
        if !ok {
            return Err(err.trim().to_string());
        }
        let mut inside = vec![
            "netns",
            "exec",
            &self.name,
            "tc",
            "qdisc",
            "replace",
            "dev",
            &self.ns_link,
            "root",
            "netem",
        ];
        inside.extend(&spec);
        let (ok, err) = sh("ip", &inside);
        if ok {
            Ok(())
        } else {
            Err(err.trim().to_string())
        }
    }

    fn link(&self, state: &str) {
        assert!(sh("ip", &["link", "set", &self.host_link, state]).0);
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = sh("ip", &["link", "del", &self.host_link]);
        let _ = sh("ip", &["netns", "del", &self.name]);
    }
}

/// The same over a real (virtual) link where the kernel has `tc netem`:
/// a worker in its own network namespace behind a veth pair with 50 ms
/// round trips, then 5% loss, then the link down (a partition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_netem_where_the_kernel_has_it() {
    let ns = match Namespace::create() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("skipped: {why} (needs root and `ip netns`)");
            return;
        }
    };
    if let Err(why) = ns.netem("delay 25ms") {
        eprintln!("skipped: this kernel has no netem qdisc ({why})");
        return;
    }
    let f = federation(&[demo_rows().1.len()], Format::Csv).await;
    let dir = tempfile::TempDir::new().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, crate::remote::TOKEN).unwrap();
    let addr: SocketAddr = format!("10.213.{}.2:50651", ns.subnet).parse().unwrap();
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            env!("CARGO_BIN_EXE_fedsql"),
            "worker",
        ])
        .args(["--policy", "none", "--audit-log", "none", "--listen"])
        .arg(addr.to_string())
        .arg("--table")
        .arg(format!("clinic={}", f.client_files[0].display()))
        .arg("--token-file")
        .arg(&token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("fedsql worker listening"), "{line}");
    let ctx = FedContext::new();
    run(
        &ctx,
        &format!(
            "CREATE FEDERATED TABLE clinic CLIENTS ('h0' = 'grpc://{addr}') OPTIONS ('token_file' '{}', 'timeout' '{}s')",
            token.display(),
            TIMEOUT.as_secs()
        ),
    )
    .await
    .unwrap();
    let took = assert_exact(&f, &ctx, GROUPED).await;
    assert!(took >= Duration::from_millis(50), "{took:?}");
    ns.netem("delay 25ms loss 5%").unwrap();
    assert_exact(&f, &ctx, GROUPED).await;
    ns.link("down");
    let started = Instant::now();
    assert_names(run(&ctx, GROUPED).await, "h0");
    assert!(started.elapsed() < TIMEOUT + MARGIN);
    ns.link("up");
    assert_exact(&f, &ctx, GROUPED).await;
    let _ = child.kill();
    let _ = child.wait();
}

/// A coordinator that vanishes in the middle of a fit without closing its
/// connection (its machine lost, a partition that never heals): the
/// worker's keepalive PINGs go unanswered, it closes the connection and
/// releases the rows the fit kept, within about twice its keepalive —
/// not when TCP gives up hours later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_coordinators_kept_rows_are_released_by_the_keepalive() {
    use arrow_flight::Ticket;
    use arrow_flight::decode::FlightRecordBatchStream;
    use arrow_flight::error::FlightError;
    use fedsql::protocol::codec::plan_to_bytes;
    use fedsql::protocol::flight::{EncodeRequest, TicketCommand, ticket_command};
    use futures::TryStreamExt;
    use prost::Message;

    use crate::remote::{TOKEN, flight, with_token};

    const RELEASED: &str = "connection closed: released the rows kept for fit";
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "x\n1\n2\n3\n").unwrap();
    let keepalive = Duration::from_millis(500);
    let workers = Workers::start_with(std::slice::from_ref(&file), "t", |mut c| {
        c.keepalive = keepalive;
        c
    })
    .await;
    let proxy = FaultProxy::start(workers.workers[0].addr(), Link::default())
        .await
        .unwrap();
    let ctx = FedContext::new();
    run(&ctx, &workers.create("t")).await.unwrap();
    let plan = ctx
        .session()
        .state()
        .create_logical_plan("SELECT sum(x) FROM t")
        .await
        .unwrap();
    let plan = fedsql::coordinator::client_column::bind_plan(plan, "h0").unwrap();
    let plan = plan_to_bytes(&crate::worker_defence::aggregate_of(&plan), "t")
        .await
        .unwrap();
    let ticket = TicketCommand {
        command: Some(ticket_command::Command::Encode(EncodeRequest {
            plan,
            fit_scope: Some(0x5eed_0000_0000_0007),
        })),
    }
    .encode_to_vec();
    // A fit's first round, through the proxy: the worker keeps its rows.
    let mut client = flight(proxy.addr()).await;
    let stream = client
        .do_get(with_token(
            Ticket {
                ticket: ticket.into(),
            },
            TOKEN,
        ))
        .await
        .unwrap()
        .into_inner();
    let batches: Vec<_> =
        FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
            .try_collect()
            .await
            .unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    // Quiet for a while: an idle coordinator that answers PINGs keeps them.
    tokio::time::sleep(keepalive * 4).await;
    assert!(
        !workers.logs().iter().any(|l| l.contains(RELEASED)),
        "{:#?}",
        workers.logs()
    );
    // The coordinator vanishes; its connection stays open at the proxy.
    proxy.partition();
    let started = Instant::now();
    while !workers.logs().iter().any(|l| l.contains(RELEASED)) {
        assert!(
            started.elapsed() < keepalive * 10,
            "not released after {:?}: {:#?}",
            started.elapsed(),
            workers.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(client);
}
