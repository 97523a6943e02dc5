//! Fuzz target `worker_ticket`: the bytes go to `fedsql::fuzzing::worker_ticket`, which
//! accepts them or refuses them with an error; a panic, a hang (libFuzzer's
//! `-timeout`) or an allocation past `-rss_limit_mb` is a finding.
#![no_main]

libfuzzer_sys::fuzz_target!(init: fedsql::fuzzing::install_panic_hook(), |data: &[u8]| {
    let _ = fedsql::fuzzing::worker_ticket(data);
});
