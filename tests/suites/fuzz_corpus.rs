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
        (
            "last_byte_dropped",
            data[..data.len().saturating_sub(1)].to_vec(),
        ),
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

/// A stable-Rust stand-in for libFuzzer where its nightly build is not at
/// hand: random mutations of the committed inputs (bytes flipped, set to
/// boundary values, inserted, removed, repeated; inputs cut and spliced),
/// for `FEDSQL_FUZZ_SECONDS` per target of `FEDSQL_FUZZ_TARGETS` (comma
/// separated; default all). Not coverage-guided: it finds what lies near
/// the seeds. Each input that panics or takes longer than [`PER_INPUT`]
/// is written to `FEDSQL_FUZZ_FINDINGS` (default a temporary folder).
///
/// ```text
/// FEDSQL_FUZZ_SECONDS=300 FEDSQL_FUZZ_TARGETS=formula,worker_plan \
///   cargo test --test integration fuzz_corpus::random -- --ignored --nocapture
/// ```
#[test]
#[ignore = "runs for FEDSQL_FUZZ_SECONDS per target"]
fn random_mutations_of_the_committed_inputs() {
    let seconds: u64 = std::env::var("FEDSQL_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let wanted = std::env::var("FEDSQL_FUZZ_TARGETS").unwrap_or_default();
    let findings = std::env::var_os("FEDSQL_FUZZ_FINDINGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("fedsql-fuzz-findings"));
    std::fs::create_dir_all(&findings).unwrap();
    let mut state = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut found = Vec::new();
    for target in TARGETS {
        if !wanted.is_empty() && !wanted.split(',').any(|w| w.trim() == *target) {
            continue;
        }
        let seeds: Vec<Vec<u8>> = inputs(target).into_iter().map(|(_, d)| d).collect();
        let until = Instant::now() + Duration::from_secs(seconds);
        let (mut runs, mut refused) = (0u64, 0u64);
        while Instant::now() < until {
            let mut data = seeds[next() as usize % seeds.len()].clone();
            for _ in 0..1 + next() % 4 {
                mutate(&mut data, &seeds, &mut next);
            }
            let start = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| run(target, &data)));
            let took = start.elapsed();
            runs += 1;
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(_)) => refused += 1,
                Err(_) => {
                    let path = findings.join(format!("{target}-panic-{runs}"));
                    std::fs::write(&path, &data).unwrap();
                    found.push(path.display().to_string());
                }
            }
            if took >= PER_INPUT {
                let path = findings.join(format!("{target}-slow-{runs}"));
                std::fs::write(&path, &data).unwrap();
                found.push(format!("{} ({took:?})", path.display()));
            }
        }
        eprintln!("{target}: {runs} inputs in {seconds} s, {refused} refused");
    }
    assert!(found.is_empty(), "findings:\n{}", found.join("\n"));
}

/// One random change of `data` (`seeds` for splicing).
fn mutate(data: &mut Vec<u8>, seeds: &[Vec<u8>], next: &mut impl FnMut() -> u64) {
    let at = |len: usize, r: u64| if len == 0 { 0 } else { r as usize % len };
    match next() % 8 {
        0 if !data.is_empty() => {
            let i = at(data.len(), next());
            data[i] ^= 1 << (next() % 8);
        }
        1 if !data.is_empty() => {
            let i = at(data.len(), next());
            data[i] =
                [0, 1, 0x7f, 0x80, 0xff, b'\'', b'"', b'\n', b'(', b'~'][next() as usize % 10];
        }
        2 => {
            let i = at(data.len() + 1, next());
            let byte = next() as u8;
            data.insert(i.min(data.len()), byte);
        }
        3 if !data.is_empty() => {
            let i = at(data.len(), next());
            let n = (next() % 16) as usize;
            data.drain(i..(i + n).min(data.len()));
        }
        4 if !data.is_empty() => {
            // A stretch repeated: long fields, deep nesting, large counts.
            let i = at(data.len(), next());
            let n = 1 + (next() % 8) as usize;
            let piece: Vec<u8> = data[i..(i + n).min(data.len())].to_vec();
            for _ in 0..next() % 64 {
                data.splice(i..i, piece.iter().copied());
            }
        }
        5 => data.truncate(at(data.len() + 1, next())),
        6 => {
            let other = &seeds[next() as usize % seeds.len()];
            let cut = at(data.len() + 1, next()).min(data.len());
            let from = at(other.len() + 1, next()).min(other.len());
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        _ if data.len() >= 4 => {
            // A 32-bit length or count set to a boundary value.
            let i = at(data.len() - 3, next());
            let value: u32 =
                [0, 1, 0x7fff_ffff, 0xffff_ffff, 0x8000_0000, 65_536][next() as usize % 6];
            data[i..i + 4].copy_from_slice(&value.to_be_bytes());
        }
        _ => data.push(next() as u8),
    }
}
