//! The worker's audit trail end to end: loopback workers with their
//! audit files in a temporary folder record a released and a refused
//! request (fields and chain), `fedsql audit verify` names an edited line,
//! and a worker whose audit file cannot be written refuses to answer.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_flight::Ticket;
use fedsql::protocol::flight::{EncodeRequest, TicketCommand, ticket_command};
use fedsql::site::worker::audit::verify;
use prost::Message;
use tempfile::TempDir;

use crate::remote::{TOKEN, Workers, flight, remote_context, run, with_token};
use crate::support::{Format, demo_rows, federation, split_sizes};

/// Workers whose audit files are `dir/audit-<i>.jsonl`.
async fn audited_workers(dir: &TempDir, files: &[PathBuf]) -> (Workers, Vec<PathBuf>) {
    let paths: Vec<PathBuf> = (0..files.len())
        .map(|i| dir.path().join(format!("audit-{i}.jsonl")))
        .collect();
    let next = AtomicUsize::new(0);
    let own = paths.clone();
    let workers = Workers::start_with(files, "clinic", move |mut c| {
        c.audit_log = Some(own[next.fetch_add(1, Ordering::SeqCst)].clone());
        c
    })
    .await;
    (workers, paths)
}

fn records(path: &PathBuf) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn released_and_refused_requests_are_recorded_and_chained() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 3), Format::Csv).await;
    let dir = TempDir::new().unwrap();
    let (workers, paths) = audited_workers(&dir, &f.client_files).await;
    let ctx = remote_context(&workers).await;
    run(&ctx, "SELECT count(*) FROM clinic").await.unwrap();
    // A plan the worker cannot read: refused, and recorded.
    let addr = workers.workers[0].addr();
    let ticket = TicketCommand {
        command: Some(ticket_command::Command::Encode(EncodeRequest {
            plan: b"not a plan".to_vec(),
            ..Default::default()
        })),
    };
    let refused = flight(addr)
        .await
        .do_get(with_token(
            Ticket {
                ticket: ticket.encode_to_vec().into(),
            },
            TOKEN,
        ))
        .await;
    assert!(refused.is_err());
    let got = records(&paths[0]);
    let released = got
        .iter()
        .find(|r| r["decision"] == "released")
        .expect("a released record");
    for field in [
        "time",
        "analyst",
        "peer",
        "table",
        "request",
        "fingerprint",
        "groups",
        "rows",
        "epsilon",
        "bytes",
        "duration_ms",
        "prev",
        "hash",
    ] {
        assert!(released.get(field).is_some(), "no {field}: {released}");
    }
    assert_eq!(released["table"], "clinic");
    assert_eq!(released["analyst"], "default");
    assert!(
        released["request"].as_str().unwrap().contains("count"),
        "{released}"
    );
    assert_eq!(released["fingerprint"].as_str().unwrap().len(), 64);
    let refused = got.last().unwrap();
    assert_eq!(refused["decision"], "refused", "{refused}");
    assert!(
        refused["rule"].as_str().unwrap().contains("plan"),
        "{refused}"
    );
    assert_eq!(
        verify(&paths[0]).unwrap(),
        format!("ok: {} records", got.len())
    );
    // One edited line is named.
    let text = std::fs::read_to_string(&paths[0]).unwrap();
    let edited = text.replacen("\"released\"", "\"refused\"", 1);
    std::fs::write(&paths[0], edited).unwrap();
    let err = verify(&paths[0]).unwrap_err().to_string();
    assert!(err.contains("line 1") && err.contains("edited"), "{err}");
}

#[tokio::test]
async fn a_worker_that_cannot_audit_answers_nothing() {
    let n = demo_rows().1.len();
    let f = federation(&split_sizes(n, 1), Format::Csv).await;
    // /dev/full: every write fails as on a full disk.
    let workers = Workers::start_with(&f.client_files, "clinic", |mut c| {
        c.audit_log = Some(PathBuf::from("/dev/full"));
        c
    })
    .await;
    let ctx = remote_context(&workers).await;
    let err = match run(&ctx, "SELECT count(*) FROM clinic").await {
        Ok(batches) => panic!("answered unaudited: {batches:?}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("cannot audit"), "{err}");
}
