//! Entry points for fuzzing: one function per input that crosses a trust
//! boundary, each taking raw bytes as an attacker (or a careless file)
//! would hand them over, and answering `Ok` (accepted) or a [`FedError`]
//! (refused, with a message) — never a panic, a hang or an unbounded
//! allocation.
//!
//! The fuzz targets under `tests/fuzz/` (cargo-fuzz, libFuzzer) call these
//! functions, and so does the integration suite over each target's
//! committed seed corpus (`tests/fuzz/corpus/<target>/`), so that every
//! input a fuzzer once found stays a regression test of ordinary
//! `cargo test`. Each function drives the real code path, not a copy:
//! the worker's Flight service ([`worker_ticket`], [`worker_plan`],
//! [`worker_action`]), `fedsql serve`'s PostgreSQL wire ([`pg_wire`]), the
//! data owner's files ([`worker_config`], [`users_file`]), the files a
//! site reads ([`site_csv`], [`site_parquet`]) and the analyst's text
//! ([`formula`], [`fed_statement`]). docs/guide/fuzzing.md says how long
//! each was fuzzed and what it found.

mod common;
mod files;
mod parsers;
mod pg_wire;
mod seeds;
mod worker;

use crate::error::{FedError, Result};

pub use files::{site_csv, site_parquet, users_file, worker_config};
pub use parsers::{fed_statement, formula};
pub use pg_wire::pg_wire;
pub use seeds::{SeedFile, seeds};
pub use worker::{worker_action, worker_plan, worker_ticket};

/// The names of the fuzz targets, as `tests/fuzz/Cargo.toml` names its
/// binaries and `tests/fuzz/corpus/` its folders.
pub const TARGETS: &[&str] = &[
    "worker_ticket",
    "worker_plan",
    "worker_action",
    "pg_wire",
    "worker_config",
    "users_file",
    "site_csv",
    "site_parquet",
    "formula",
    "fed_statement",
];

/// Runs target `name` over one input.
pub fn run(name: &str, data: &[u8]) -> Result<()> {
    match name {
        "worker_ticket" => worker_ticket(data),
        "worker_plan" => worker_plan(data),
        "worker_action" => worker_action(data),
        "pg_wire" => pg_wire(data),
        "worker_config" => worker_config(data),
        "users_file" => users_file(data),
        "site_csv" => site_csv(data),
        "site_parquet" => site_parquet(data),
        "formula" => formula(data),
        "fed_statement" => fed_statement(data),
        other => Err(FedError::InvalidArgument(format!(
            "no fuzz target `{other}` (the targets: {})",
            TARGETS.join(", ")
        ))),
    }
}

/// The fuzz targets' panic hook (set after libFuzzer's own): every panic
/// of fedsql's own code aborts (a finding). A panic inside a library
/// crate (an assertion of arrow, parquet or pgwire over malformed input)
/// unwinds to where fedsql catches it — where it reads Arrow IPC from the
/// network ([`crate::protocol::flight::batches_from_ipc`]), Parquet
/// footers and a site's rows, a worker's request, a `fedsql serve`
/// connection — and is answered with an error; one that nothing catches
/// still aborts when it reaches the target (libFuzzer's finding).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let contained = info
            .location()
            .is_some_and(|l| l.file().contains("/.cargo/registry/"));
        if !contained {
            eprintln!("{info}");
            std::process::abort();
        }
    }));
}
