//! The fuzz targets' seed corpus as ordinary tests: every committed input
//! of every target (tests/fuzz/corpus/<target>/: well-formed seeds, and
//! each input a fuzzer once found to panic, hang or over-allocate) runs
//! through the same entry function the fuzz target calls
//! (`fedsql::fuzzing`), and must answer — accepted or refused with a
//! message — without a panic and within a bounded time; so must a few
//! fixed mutations of each seed (of the targets that answer quickly), and
//! plainly bad inputs must be refused.
//! `FEDSQL_BLESS=1` rewrites the generated seeds (`fedsql::fuzzing::seeds`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fedsql::fuzzing::{TARGETS, run, seeds};

/// The longest one input may take here (an unoptimized build; the fuzzer
/// gives its optimized one far less). A hang fails well before.
const PER_INPUT: Duration = Duration::from_secs(10);

/// The targets whose inputs each run several queries.
const SLOW: &[&str] = &["pg_wire", "site_csv", "site_parquet"];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus")
}

/// The committed inputs of `target`, by name.
fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus().join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Runs one input: no panic, within [`PER_INPUT`]; the refusal's message
/// (if refused) is not empty.
fn answers(target: &str, name: &str, data: &[u8]) -> Result<(), String> {
    let start = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| run(target, data)));
    let took = start.elapsed();
    let outcome = outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("{target}/{name}: panicked: {message}")
    });
    assert!(
        took < PER_INPUT,
        "{target}/{name}: took {took:?} (at most {PER_INPUT:?})"
    );
    outcome.map_err(|e| {
        let message = e.to_string();
        assert!(
            !message.trim().is_empty(),
            "{target}/{name}: refused without a message"
        );
        message
    })
}

/// Fixed mutations of a seed: cut in half, one byte flipped in the
/// middle, the last byte dropped.
fn mutations(data: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut flipped = data.to_vec();
    if let Some(b) = flipped.get_mut(data.len() / 2) {
        *b ^= 0x41;
    }
    vec![
        ("half", data[..data.len() / 2].to_vec()),
        ("flipped", flipped),
        ("last_byte_dropped", data[..data.len().saturating_sub(1)].to_vec()),
    ]
}

#[test]
fn every_committed_input_of_every_target_answers_in_time_without_panic() {
    if std::env::var_os("FEDSQL_BLESS").is_some() {
        for seed in seeds().unwrap() {
            let path = corpus().join(seed.target).join(&seed.name);
            std::fs::write(&path, &seed.bytes).unwrap();
        }
    }
    let mut ran = 0;
    for target in TARGETS {
        let start = Instant::now();
        let inputs = inputs(target);
        assert!(!inputs.is_empty(), "{target}: no committed input");
        for (name, data) in &inputs {
            let _ = answers(target, name, data);
            ran += 1;
            // The file and wire targets run whole queries per input: their
            // seeds alone keep the suite fast.
            if SLOW.contains(target) {
                continue;
            }
            for (how, mutated) in mutations(data) {
                let _ = answers(target, &format!("{name} ({how})"), &mutated);
                ran += 1;
            }
        }
        eprintln!("{target}: {} inputs in {:?}", inputs.len(), start.elapsed());
    }
    assert!(ran > 50, "only {ran} inputs ran");
}

#[test]
fn well_formed_seeds_are_accepted() {
    // One seed per target that must pass: a check that the targets reach
    // past their first refusal (a fuzzer starting from refused seeds
    // would explore little).
    for (target, name) in [
        ("worker_ticket", "count"),
        ("worker_plan", "grouped"),
        ("worker_action", "explain_count"),
        ("pg_wire", "simple_count"),
        ("worker_config", "full.toml"),
        ("users_file", "with_token"),
        ("site_csv", "clinic.csv"),
        ("site_parquet", "types_zstd"),
        ("formula", "interaction"),
        ("fed_statement", "create_clients.sql"),
    ] {
        let data = std::fs::read(corpus().join(target).join(name)).unwrap();
        let _ = std::env::var("FEDSQL_FUZZ_LOG");
        answers(target, name, &data).unwrap_or_else(|e| panic!("{target}/{name}: refused: {e}"));
    }
}

#[test]
fn bad_inputs_are_refused_with_a_message() {
    let garbage: &[&[u8]] = &[b"", b"\xff\xfe\x00garbage\x80", &[0x0a; 300]];
    for target in TARGETS {
        if *target == "site_csv" {
            // Any text is a CSV file of some shape; its bad inputs follow.
            continue;
        }
        for data in garbage {
            if *target == "users_file" && data.iter().all(u8::is_ascii_whitespace) {
                // An empty users file is a valid one: no users yet.
                continue;
            }
            answers(target, "garbage", data)
                .expect_err(&format!("{target}: garbage {data:?} was accepted"));
        }
    }
    for data in [&b"a,b\n1,2,3,4\n"[..], b"\xff\xfe,\x00\n1\n", b""] {
        answers("site_csv", "bad", data).expect_err(&format!("site_csv: {data:?} was accepted"));
    }
}
