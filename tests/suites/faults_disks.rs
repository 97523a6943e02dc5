//! Faults of the disk and of the coordinator: a worker's privacy-budget
//! ledger on a full or read-only disk, and its audit trail on a full one
//! (each fails closed: a DP query is refused, never answered without its
//! debit, and answered again once the disk is back); a coordinator
//! process killed in the middle of a fit (the worker stops the round's
//! work and drops the rows it kept for the fit).
//!
//! A full or read-only disk is a small tmpfs mounted for the test, which
//! needs root; elsewhere the read-only case uses a folder without write
//! permission and the full-disk cases are skipped with a message.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fedsql::FedContext;
use tempfile::TempDir;

use crate::faults::{
    DP_QUERY, DP_UNITS, ProcessWorker, create_sql, free_addr, ledger_units, plain_args, run, timed,
};
use crate::remote::TOKEN;
use crate::support::demo_rows;

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A tmpfs of `kib` KiB mounted at a fresh folder; unmounted when dropped.
struct SmallDisk {
    at: PathBuf,
    _parent: TempDir,
}

impl SmallDisk {
    /// `None` (with a message) where tmpfs cannot be mounted.
    fn mount(kib: u32) -> Option<Self> {
        let parent = TempDir::new().unwrap();
        let at = parent.path().join("disk");
        std::fs::create_dir(&at).unwrap();
        let mounted = is_root()
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
                .arg(&at)
                .status()
                .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: a small tmpfs cannot be mounted here (needs root)");
            return None;
        }
        Some(Self {
            at,
            _parent: parent,
        })
    }

    /// Fills the disk to the last byte.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.at.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        // What is left is smaller than a block.
        while f.write_all(&[0]).is_ok() {}
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.at.join("filler")).unwrap();
    }

    fn remount(&self, mode: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.at)
            .status()
            .unwrap();
        assert!(status.success(), "remount {mode}");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// The demo rows as one CSV file in `dir`, and a token file.
fn one_site(dir: &Path) -> (PathBuf, PathBuf) {
    let (header, rows) = demo_rows();
    let file = dir.join("c.csv");
    std::fs::write(&file, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    (file, token)
}

/// A DP query refused (not answered), naming the client; its message.
async fn refused(ctx: &FedContext) -> String {
    match timed(ctx, DP_QUERY).await {
        Ok(batches) => panic!("answered: {batches:?}"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("client 'h0'"), "{text}");
            text
        }
    }
}

/// A worker under a DP budget with its ledger at `ledger` and audit
/// trail at `audit`.
fn dp_worker(file: &Path, token: &Path, ledger: &Path, audit: &Path) -> ProcessWorker {
    ProcessWorker::spawn(plain_args(
        file,
        token,
        &[
            "--dp-budget",
            "1000",
            "--dp-ledger",
            ledger.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_on_a_full_or_read_only_disk_refuses_dp_queries_until_it_is_back() {
    let dir = TempDir::new().unwrap();
    let (file, token) = one_site(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let Some(disk) = SmallDisk::mount(256) else {
        // Read-only by permissions, for a user the permissions bind.
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        let ledger = ro.join("ledger.toml");
        let worker = dp_worker(&file, &token, &ledger, &audit);
        let ctx = FedContext::new();
        run(&ctx, &create_sql(&[worker.addr], &token))
            .await
            .unwrap();
        run(&ctx, DP_QUERY).await.unwrap();
        let mode = |m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(0o555);
        let text = refused(&ctx).await;
        assert!(
            text.contains("its privacy-budget ledger cannot be written"),
            "{text}"
        );
        mode(0o755);
        run(&ctx, DP_QUERY).await.unwrap();
        assert_eq!(ledger_units(&ledger), 2 * DP_UNITS);
        return;
    };
    let ledger = disk.at.join("ledger.toml");
    let worker = dp_worker(&file, &token, &ledger, &audit);
    let ctx = FedContext::new();
    run(&ctx, &create_sql(&[worker.addr], &token))
        .await
        .unwrap();
    run(&ctx, DP_QUERY).await.unwrap();
    assert_eq!(ledger_units(&ledger), DP_UNITS);

    // Full: refused, and the refused query is not counted as spent.
    disk.fill();
    let text = refused(&ctx).await;
    assert!(
        text.contains("its privacy-budget ledger cannot be written"),
        "{text}"
    );
    assert_eq!(ledger_units(&ledger), DP_UNITS);
    disk.free();
    run(&ctx, DP_QUERY).await.unwrap();
    assert_eq!(ledger_units(&ledger), 2 * DP_UNITS);

    // Read-only: the same.
    disk.remount("ro");
    let text = refused(&ctx).await;
    assert!(
        text.contains("its privacy-budget ledger cannot be written"),
        "{text}"
    );
    disk.remount("rw");
    run(&ctx, DP_QUERY).await.unwrap();
    assert_eq!(ledger_units(&ledger), 3 * DP_UNITS);
    assert!(
        worker.saw("cannot record the privacy budget"),
        "{:?}",
        worker.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_trail_on_a_full_disk_refuses_and_the_ledger_keeps_the_debit() {
    let dir = TempDir::new().unwrap();
    let (file, token) = one_site(dir.path());
    let Some(disk) = SmallDisk::mount(256) else {
        return;
    };
    let ledger = dir.path().join("ledger.toml");
    let audit = disk.at.join("audit.jsonl");
    let worker = dp_worker(&file, &token, &ledger, &audit);
    // Full before the first record: a record appended to a page the
    // trail already has would still fit.
    disk.fill();
    let ctx = FedContext::new();
    run(&ctx, &create_sql(&[worker.addr], &token))
        .await
        .unwrap();
    let text = refused(&ctx).await;
    assert!(text.contains("cannot audit"), "{text}");
    // Paid before it ran, refused before it left: spent, not answered.
    assert_eq!(ledger_units(&ledger), DP_UNITS);
    assert!(
        run(&ctx, "SELECT count(*) FROM clinic").await.is_err(),
        "no answer leaves unaudited"
    );
    disk.free();
    run(&ctx, DP_QUERY).await.unwrap();
    assert_eq!(ledger_units(&ledger), 2 * DP_UNITS);
}

/// `fedsql_worker_kept_fits` from the worker's `/metrics`.
fn kept_fits(admin: std::net::SocketAddr) -> i64 {
    let mut response = ureq::get(&format!("http://{admin}/metrics"))
        .header("Authorization", "Bearer admin-token-for-faults")
        .call()
        .unwrap();
    let text = response.body_mut().read_to_string().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("fedsql_worker_kept_fits "))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap()
}

/// A coordinator process killed while a fit runs: the worker stops the
/// round under way (its log says CANCELLED) and drops the rows it kept
/// for the fit when the connection closes (`/metrics` shows none kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_fit_leaves_no_kept_rows_at_the_worker() {
    let (header, rows) = demo_rows();
    let dir = TempDir::new().unwrap();
    // Enough rows that a round takes a while at the (unoptimized) worker.
    let file = dir.path().join("big.csv");
    let mut body = String::from(&header);
    body.push('\n');
    for _ in 0..400 {
        for row in &rows {
            body.push_str(row);
            body.push('\n');
        }
    }
    std::fs::write(&file, body).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let admin_token = dir.path().join("admin.token");
    std::fs::write(&admin_token, "admin-token-for-faults").unwrap();
    let admin = free_addr();
    let worker = ProcessWorker::spawn(plain_args(
        &file,
        &token,
        &[
            "--policy",
            "none",
            "--audit-log",
            "none",
            "--admin-listen",
            &admin.to_string(),
            "--admin-token-file",
            admin_token.to_str().unwrap(),
        ],
    ));
    let script = dir.path().join("fit.sql");
    std::fs::write(
        &script,
        format!(
            "{};\nSELECT * FROM glm('clinic', 'event ~ age + bmi + smoker + visits', 'binomial');\n",
            create_sql(&[worker.addr], &token).replace("'2s'", "'60s'")
        ),
    )
    .unwrap();
    let mut coordinator = Command::new(env!("CARGO_BIN_EXE_fedsql"))
        .arg("-f")
        .arg(&script)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let lines = || worker.stderr.lock().unwrap().clone();
    // The first round released (its rows kept), the next one started.
    let running_after_first = || {
        let lines = lines();
        let first = lines.iter().position(|l| l.contains("(fit "));
        first.is_some_and(|i| lines[i..].iter().any(|l| l.contains("running encoder")))
    };
    while !running_after_first() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no second round: {:?}",
            lines()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    coordinator.kill().unwrap();
    let _ = coordinator.wait();
    let killed = Instant::now();
    while !worker.saw("connection closed: released the rows kept for fit") {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the worker kept the fit's rows: {:?}",
            lines()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The round in flight was cancelled, or (a round over kept rows is
    // quick) had already answered when the connection closed.
    let answered = || {
        let lines = lines();
        let last = lines.iter().rposition(|l| l.contains("running encoder"));
        last.is_some_and(|i| lines[i..].iter().any(|l| l.contains("state row(s)")))
    };
    assert!(
        worker.saw("CANCELLED") || answered(),
        "the round was not stopped: {:?}",
        lines()
    );
    let kept = tokio::task::spawn_blocking(move || kept_fits(admin))
        .await
        .unwrap();
    assert_eq!(kept, 0);
}
