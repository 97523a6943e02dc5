//! The worker's Flight calls as a coordinator (or anyone holding a token)
//! sends them: a ticket, an encoder's plan bytes, an action and its body,
//! a table path, a token. One in-process [`WorkerService`] serves two
//! small tables (a CSV under the default disclosure policy, a Parquet file
//! under none) for every input, as a long-running worker would.

use std::sync::{Arc, OnceLock};

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{Action, FlightDescriptor, Ticket};
use futures::StreamExt;
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use super::common::{runtime, testdata};
use crate::error::{FedError, Result};
use crate::protocol::flight::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_PRIVACY_BUDGET, ACTION_RELEASE_FIT,
    ACTION_SECURE_CONFIRM, ACTION_SECURE_REVEAL, ACTION_SECURE_SETUP, ACTION_SECURE_SHARE,
    ACTION_SECURE_UNMASK, AUTHORIZATION, BEARER, EncodeRequest, TicketCommand, ticket_command,
};
use crate::site::engine::SiteEngine;
use crate::site::release::policy::DisclosurePolicy;
use crate::site::worker::tables::{ServedTable, SiteOptions};
use crate::site::worker::{RequestLimits, WorkerService};

/// The token the fuzzed requests carry (unless the input is the token).
pub(super) const TOKEN: &str = "fuzz-token";

/// The actions [`worker_action`]'s first byte picks from (`get_schema`
/// and `token` are not actions: a table path, and a token before a
/// ticket; the reveal came last, so the older seeds kept their bytes).
pub(super) const CALLS: &[&str] = &[
    ACTION_EXPLAIN,
    ACTION_RELEASE_FIT,
    ACTION_SECURE_SETUP,
    ACTION_SECURE_SHARE,
    ACTION_ENCODE_MASKED,
    ACTION_SECURE_CONFIRM,
    ACTION_SECURE_UNMASK,
    ACTION_PRIVACY_BUDGET,
    "get_schema",
    "token",
    ACTION_SECURE_REVEAL,
];

/// The served tables' names (the seeds' plans scan them).
pub(super) const CSV_TABLE: &str = "clinic";
pub(super) const PARQUET_TABLE: &str = "visits";

fn service() -> &'static WorkerService {
    static SERVICE: OnceLock<WorkerService> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let engine = Arc::new(SiteEngine::new());
        let session_ids = Arc::default();
        let options = |policy| SiteOptions {
            policy,
            identity: None,
            peers: Arc::from(Vec::new()),
            secure_without_peers: true,
            memory_limit: Some(256 << 20),
            engine: Arc::clone(&engine),
            fast_path: false,
            cluster: None,
            session_ids: Arc::clone(&session_ids),
        };
        let data = testdata();
        let tables = vec![
            ServedTable::open(
                CSV_TABLE,
                &data.join("clinic/hospital_a.csv"),
                options(Some(DisclosurePolicy::default())),
            )
            .expect("the fuzzed worker's CSV table"),
            ServedTable::open(
                PARQUET_TABLE,
                &data.join("visits/east_clinic.parquet"),
                options(None),
            )
            .expect("the fuzzed worker's Parquet table"),
        ];
        let limits = RequestLimits {
            timeout: Some(std::time::Duration::from_secs(20)),
            memory: Some(256 << 20),
            max_shared_rows: 10_000,
        };
        // The log lines are formatted (a fuzzer should run that code too)
        // and dropped, unless FEDSQL_FUZZ_LOG is set (to see a finding's).
        let shown = std::env::var_os("FEDSQL_FUZZ_LOG").is_some();
        let quiet: crate::site::worker::LogSink = Arc::new(move |line: &str| {
            if shown {
                eprintln!("{line}");
            }
            std::hint::black_box(line);
        });
        WorkerService::new(tables, TOKEN, Some(quiet), limits)
    })
}

/// A request carrying `token` as the worker expects it.
fn request<T>(message: T, token: &str) -> Result<Request<T>> {
    let mut request = Request::new(message);
    let value = MetadataValue::try_from(format!("{BEARER}{token}"))
        .map_err(|e| FedError::InvalidArgument(format!("not a header value: {e}")))?;
    request.metadata_mut().insert(AUTHORIZATION, value);
    Ok(request)
}

/// The worker's refusal as an error; a refusal must say what is wrong.
fn refused(status: Status) -> FedError {
    assert!(
        !status.message().trim().is_empty(),
        "the worker refused with an empty message ({:?})",
        status.code()
    );
    FedError::InvalidArgument(format!("{:?}: {}", status.code(), status.message()))
}

async fn do_get(ticket: Vec<u8>, token: &str) -> Result<()> {
    let ticket = Ticket {
        ticket: ticket.into(),
    };
    let mut stream = service()
        .do_get(request(ticket, token)?)
        .await
        .map_err(refused)?
        .into_inner();
    while let Some(data) = stream.next().await {
        data.map_err(refused)?;
    }
    Ok(())
}

async fn do_action(kind: &str, body: Vec<u8>) -> Result<()> {
    let action = Action {
        r#type: kind.to_string(),
        body: body.into(),
    };
    let mut stream = service()
        .do_action(request(action, TOKEN)?)
        .await
        .map_err(refused)?
        .into_inner();
    while let Some(result) = stream.next().await {
        result.map_err(refused)?;
    }
    Ok(())
}

/// A `DoGet` ticket (a [`TicketCommand`], protobuf).
pub fn worker_ticket(data: &[u8]) -> Result<()> {
    runtime().block_on(do_get(data.to_vec(), TOKEN))
}

/// An encoder's plan bytes (datafusion-proto with fedsql's codec), sent
/// in a well-formed ticket: the plan decoder and the site's checks.
pub fn worker_plan(data: &[u8]) -> Result<()> {
    let ticket = TicketCommand {
        command: Some(ticket_command::Command::Encode(EncodeRequest {
            plan: data.to_vec(),
            fit_scope: None,
        })),
    };
    runtime().block_on(do_get(ticket.encode_to_vec(), TOKEN))
}

/// An action: the first byte picks one of [`CALLS`], the rest is its
/// body (protobuf for the secure steps, a table name for the budget);
/// `get_schema` takes a `/`-separated path, and `token` a token, a
/// newline, then a ticket.
pub fn worker_action(data: &[u8]) -> Result<()> {
    let Some((&pick, body)) = data.split_first() else {
        return Err(FedError::InvalidArgument("an empty input".into()));
    };
    let call = CALLS[usize::from(pick) % CALLS.len()];
    runtime().block_on(async {
        match call {
            "get_schema" => {
                let path = String::from_utf8_lossy(body)
                    .split('/')
                    .map(str::to_string)
                    .collect::<Vec<_>>();
                let descriptor = FlightDescriptor::new_path(path);
                service()
                    .get_schema(request(descriptor, TOKEN)?)
                    .await
                    .map_err(refused)?;
                Ok(())
            }
            "token" => {
                let (token, ticket) = match body.iter().position(|&b| b == b'\n') {
                    Some(at) => (&body[..at], &body[at + 1..]),
                    None => (body, &[][..]),
                };
                do_get(ticket.to_vec(), &String::from_utf8_lossy(token)).await
            }
            action => do_action(action, body.to_vec()).await,
        }
    })
}
