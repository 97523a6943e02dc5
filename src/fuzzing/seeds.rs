//! The generated part of the fuzz targets' seed corpus: well-formed
//! requests as fedsql's own coordinator and PostgreSQL clients send them
//! (a fuzzer mutates from these into the deep paths), and small Parquet
//! files of many types. `FEDSQL_BLESS=1 cargo test --test integration
//! fuzz_corpus` writes them under `tests/fuzz/corpus/<target>/`; the text
//! seeds (formulas, statements, configuration and CSV files) are written
//! by hand beside them.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
    StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use prost::Message;

use super::common::{runtime, testdata};
use super::worker::{CALLS, CSV_TABLE, PARQUET_TABLE, TOKEN};
use crate::coordinator::context::FedContext;
use crate::coordinator::split::{lowest_cut, plan_round};
use crate::error::{FedError, Result};
use crate::frontend::pgwire::auth::Verifier;
use crate::protocol::codec::plan_to_bytes;
use crate::protocol::flight::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_PRIVACY_BUDGET, ACTION_RELEASE_FIT,
    ACTION_SECURE_CONFIRM, ACTION_SECURE_REVEAL, ACTION_SECURE_SETUP, ACTION_SECURE_SHARE,
    ACTION_SECURE_UNMASK, EncodeMaskedRequest, EncodeRequest, EnvelopeMessage, KeysMessage,
    MaybeKeys, ReleaseFit, SecureConfirmReply, SecureConfirmRequest, SecureSetupRequest,
    SecureShareRequest, SecureUnmaskRequest, SessionMessage, TicketCommand, ticket_command,
};
use crate::protocol::secure::{ParticipantKeys, SecureSession};

/// One seed input of one target.
#[derive(Debug, Clone)]
pub struct SeedFile {
    /// The target (a folder of `tests/fuzz/corpus/`).
    pub target: &'static str,
    /// The file's name in that folder.
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Encoders over the CSV table (under the default policy) and the
/// Parquet one (under none), as a coordinator sends them.
const QUERIES: &[(&str, &str)] = &[
    ("count", "SELECT count(*) FROM clinic"),
    (
        "grouped",
        "SELECT region, avg(systolic), stddev(bmi) FROM clinic WHERE age > 40 GROUP BY region",
    ),
    (
        "expressions",
        "SELECT sex, sum(CASE WHEN smoker = 1 THEN bmi * 2 ELSE ln(age) END), corr(age, bmi) FROM clinic GROUP BY sex",
    ),
    (
        "sketches",
        "SELECT approx_distinct(region), approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY bmi) FROM clinic",
    ),
    (
        "shared_join",
        "SELECT w.weight, count(*) FROM clinic c JOIN (VALUES ('north', 1.5), ('south', 2.0)) AS w(region, weight) ON c.region = w.region GROUP BY w.weight",
    ),
    (
        "parquet",
        "SELECT reason, count(*), avg(cost) FROM visits GROUP BY reason",
    ),
];

/// Every generated seed.
pub fn seeds() -> Result<Vec<SeedFile>> {
    runtime().block_on(generate())
}

async fn generate() -> Result<Vec<SeedFile>> {
    let mut seeds = Vec::new();
    let plans = plans().await?;
    let mut seed = |target: &'static str, name: String, bytes: Vec<u8>| {
        seeds.push(SeedFile {
            target,
            name,
            bytes,
        })
    };
    for (name, plan) in &plans {
        seed("worker_plan", name.to_string(), plan.clone());
        let encode = EncodeRequest {
            plan: plan.clone(),
            fit_scope: None,
        };
        let ticket = TicketCommand {
            command: Some(ticket_command::Command::Encode(encode.clone())),
        };
        seed("worker_ticket", name.to_string(), ticket.encode_to_vec());
        let mut with_token = format!("{TOKEN}\n").into_bytes();
        with_token.extend(ticket.encode_to_vec());
        seed(
            "worker_action",
            format!("token_{name}"),
            action("token", with_token),
        );
        seed(
            "worker_action",
            format!("explain_{name}"),
            action(ACTION_EXPLAIN, encode.encode_to_vec()),
        );
    }
    let (_, plan) = &plans[1];
    let in_fit = TicketCommand {
        command: Some(ticket_command::Command::Encode(EncodeRequest {
            plan: plan.clone(),
            fit_scope: Some(42),
        })),
    };
    seed("worker_ticket", "in_fit".into(), in_fit.encode_to_vec());
    for (name, bytes) in secure_actions(plan) {
        seed("worker_action", name, bytes);
    }
    for (name, bytes) in pg_wire_seeds() {
        seed("pg_wire", name.to_string(), bytes);
    }
    let verifier = Verifier::new("secret")?.encode();
    seed(
        "users_file",
        "one_user".into(),
        format!("[users]\nalice = \"{verifier}\"\n").into_bytes(),
    );
    seed(
        "users_file",
        "with_token".into(),
        format!("[users.alice]\nverifier = \"{verifier}\"\ntoken_file = \"token\"\n\n[users.bob]\nverifier = \"{verifier}\"\n").into_bytes(),
    );
    for (name, bytes) in parquet_seeds()? {
        seed("site_parquet", name.to_string(), bytes);
    }
    Ok(seeds)
}

/// The plan bytes of [`QUERIES`]' encoders.
async fn plans() -> Result<Vec<(&'static str, Vec<u8>)>> {
    let ctx = FedContext::new();
    let data = testdata();
    for (table, file) in [
        (CSV_TABLE, "clinic/hospital_a.csv"),
        (PARQUET_TABLE, "visits/east_clinic.parquet"),
    ] {
        ctx.sql(&format!(
            "CREATE FEDERATED TABLE {table} CLIENTS ('a' = '{}')",
            data.join(file).display()
        ))
        .await?
        .collect()
        .await?;
    }
    let state = ctx.session().state();
    let mut plans = Vec::new();
    for (name, sql) in QUERIES {
        let frame = ctx.sql(sql).await?;
        // As the coordinator runs it: optimized (types coerced) first.
        let plan = state.optimize(frame.logical_plan())?;
        let cut = lowest_cut(&plan)
            .ok_or_else(|| FedError::Internal(format!("{name}: no aggregate to encode")))?;
        let round = plan_round(&state, &cut).await?;
        let encoder = round.encoder_for("a")?;
        plans.push((*name, plan_to_bytes(encoder.plan(), encoder.table()).await?));
    }
    Ok(plans)
}

/// An input of `worker_action`: the call's byte, then the body.
fn action(call: &str, body: Vec<u8>) -> Vec<u8> {
    let pick = CALLS.iter().position(|c| *c == call).expect("a known call") as u8;
    let mut bytes = vec![pick];
    bytes.extend(body);
    bytes
}

/// The secure steps' bodies, well formed (the session is unknown to a
/// fresh worker, so they reach its session checks), and the other calls.
fn secure_actions(plan: &[u8]) -> Vec<(String, Vec<u8>)> {
    let encode = Some(EncodeRequest {
        plan: plan.to_vec(),
        fit_scope: None,
    });
    let session = SecureSession {
        id: [7; 16],
        clients: vec!["a".into(), "b".into(), "c".into()],
        threshold: 2,
        noise_shares: 2,
    };
    let session = Some(SessionMessage::of(&session));
    let keys = |i: u8| ParticipantKeys {
        mask_key: [i; 32],
        cipher_key: [i.wrapping_add(1); 32],
        self_commitment: [i.wrapping_add(2); 32],
        list_key: [i.wrapping_add(3); 32],
        graph_commitment: [i.wrapping_add(4); 32],
        signed: None,
    };
    let envelope = |from: u32, to: u32| EnvelopeMessage {
        from,
        to,
        ciphertext: vec![0x5a; 80],
    };
    let setup = SecureSetupRequest {
        encode: encode.clone(),
        session: session.clone(),
    };
    let share = SecureShareRequest {
        encode: encode.clone(),
        session: session.clone(),
        keys: (1..=3)
            .map(|i| MaybeKeys {
                keys: Some(KeysMessage::of(&keys(i))),
            })
            .collect(),
        nonces: Vec::new(),
    };
    let mut with_nonces = share.clone();
    with_nonces.nonces = vec![vec![9; 32], Vec::new(), vec![8; 32]];
    let masked = EncodeMaskedRequest {
        encode: encode.clone(),
        session: session.clone(),
        groups: Vec::new(),
        envelopes: vec![envelope(1, 0), envelope(2, 0)],
    };
    let confirm = SecureConfirmRequest {
        encode: encode.clone(),
        session: session.clone(),
        survivors: vec![0, 1],
    };
    let unmask = SecureUnmaskRequest {
        encode,
        session,
        survivors: vec![0, 1],
        signatures: vec![
            SecureConfirmReply {
                from: 0,
                signature: vec![0x11; 64],
            },
            SecureConfirmReply {
                from: 1,
                signature: vec![0x22; 64],
            },
        ],
    };
    vec![
        (
            "secure_setup".into(),
            action(ACTION_SECURE_SETUP, setup.encode_to_vec()),
        ),
        (
            "secure_share".into(),
            action(ACTION_SECURE_SHARE, share.encode_to_vec()),
        ),
        (
            "secure_reveal".into(),
            action(ACTION_SECURE_REVEAL, share.encode_to_vec()),
        ),
        (
            "secure_share_nonces".into(),
            action(ACTION_SECURE_SHARE, with_nonces.encode_to_vec()),
        ),
        (
            "encode_masked".into(),
            action(ACTION_ENCODE_MASKED, masked.encode_to_vec()),
        ),
        (
            "secure_confirm".into(),
            action(ACTION_SECURE_CONFIRM, confirm.encode_to_vec()),
        ),
        (
            "secure_unmask".into(),
            action(ACTION_SECURE_UNMASK, unmask.encode_to_vec()),
        ),
        (
            "release_fit".into(),
            action(ACTION_RELEASE_FIT, ReleaseFit { scope: 42 }.encode_to_vec()),
        ),
        (
            "privacy_budget".into(),
            action(ACTION_PRIVACY_BUDGET, CSV_TABLE.as_bytes().to_vec()),
        ),
        (
            "get_schema".into(),
            action("get_schema", b"visits".to_vec()),
        ),
    ]
}

/// A frontend message: its type byte, length and body.
fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![kind];
    bytes.extend(((body.len() + 4) as u32).to_be_bytes());
    bytes.extend(body);
    bytes
}

/// The start-up message of `user` (protocol 3.0).
fn startup(user: &str) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for text in [
        "user",
        user,
        "database",
        "fedsql",
        "application_name",
        "fuzz",
    ] {
        body.extend(text.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut bytes = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    bytes.extend(body);
    bytes
}

fn cstr(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// Whole connections: the first byte picks the server (0: no password,
/// 1: SCRAM).
fn pg_wire_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let simple = |sql: &str| {
        let mut bytes = vec![0];
        bytes.extend(startup("fuzz"));
        bytes.extend(message(b'Q', &cstr(sql)));
        bytes.extend(message(b'X', &[]));
        bytes
    };
    let mut extended = vec![0];
    extended.extend(startup("fuzz"));
    let mut parse = cstr("s1");
    parse.extend(cstr(
        "SELECT region, avg(systolic) FROM clinic WHERE age > $1 GROUP BY region",
    ));
    parse.extend(1u16.to_be_bytes());
    parse.extend(23u32.to_be_bytes());
    extended.extend(message(b'P', &parse));
    let mut bind = cstr("");
    bind.extend(cstr("s1"));
    bind.extend(0u16.to_be_bytes());
    bind.extend(1u16.to_be_bytes());
    bind.extend(2u32.to_be_bytes());
    bind.extend(b"40");
    bind.extend(0u16.to_be_bytes());
    extended.extend(message(b'B', &bind));
    extended.extend(message(b'D', &[b'P', 0]));
    let mut execute = cstr("");
    execute.extend(0u32.to_be_bytes());
    extended.extend(message(b'E', &execute));
    extended.extend(message(b'S', &[]));
    extended.extend(message(b'X', &[]));
    let mut ssl = vec![0];
    ssl.extend(8u32.to_be_bytes());
    ssl.extend(80_877_103u32.to_be_bytes());
    ssl.extend(startup("fuzz"));
    ssl.extend(message(b'Q', &cstr("SELECT 1")));
    let mut scram = vec![1];
    scram.extend(startup("fuzz"));
    let first = b"n,,n=,r=rOprNGfwEbeRWgbNEkqO";
    let mut initial = cstr("SCRAM-SHA-256");
    initial.extend((first.len() as u32).to_be_bytes());
    initial.extend(first);
    scram.extend(message(b'p', &initial));
    scram.extend(message(
        b'p',
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    ));
    vec![
        ("simple_count", simple("SELECT count(*) FROM clinic")),
        (
            "simple_grouped",
            simple("SELECT region, avg(systolic) FROM clinic GROUP BY region; SHOW CLIENTS clinic"),
        ),
        (
            "simple_catalog",
            simple("SELECT relname FROM pg_catalog.pg_class LIMIT 3"),
        ),
        ("simple_refused", simple("SELECT * FROM clinic")),
        ("extended", extended),
        ("ssl_request", ssl),
        ("scram", scram),
    ]
}

/// Small Parquet files: many types, nulls, two compressions.
fn parquet_seeds() -> Result<Vec<(&'static str, Vec<u8>)>> {
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "i",
            Arc::new(Int32Array::from(vec![Some(1), None, Some(-3)])),
        ),
        ("n", Arc::new(Int64Array::from(vec![10, 20, 30]))),
        (
            "x",
            Arc::new(Float64Array::from(vec![Some(0.5), Some(f64::NAN), None])),
        ),
        (
            "s",
            Arc::new(StringArray::from(vec![Some("north"), None, Some("ü")])),
        ),
        ("b", Arc::new(BooleanArray::from(vec![true, false, true]))),
        (
            "d",
            Arc::new(Date32Array::from(vec![19_000, 19_001, 19_002])),
        ),
        (
            "t",
            Arc::new(TimestampMicrosecondArray::from(vec![
                0, 1_000_000, 2_000_000,
            ])),
        ),
        (
            "m",
            Arc::new(
                Decimal128Array::from(vec![12_345, -1, 0])
                    .with_precision_and_scale(10, 2)
                    .map_err(FedError::Arrow)?,
            ),
        ),
    ];
    let batch = RecordBatch::try_from_iter(columns)?;
    let mut files = Vec::new();
    for (name, compression) in [
        ("types_plain", Compression::UNCOMPRESSED),
        ("types_zstd", Compression::ZSTD(ZstdLevel::default())),
    ] {
        let properties = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(2))
            .build();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties))
            .map_err(|e| FedError::Internal(e.to_string()))?;
        writer
            .write(&batch)
            .map_err(|e| FedError::Internal(e.to_string()))?;
        writer
            .close()
            .map_err(|e| FedError::Internal(e.to_string()))?;
        files.push((name, bytes));
    }
    for name in ["east_clinic", "north_clinic"] {
        let bytes = std::fs::read(testdata().join(format!("visits/{name}.parquet")))?;
        files.push((name, bytes));
    }
    Ok(files)
}
