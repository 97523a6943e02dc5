//! A worker's audit trail: one JSON object per line and per request,
//! written and synced before the answer leaves, each line chained to the
//! one before by a SHA-256 hash, and the `fedsql audit verify|show`
//! commands that read it back.
//!
//! A line is the record's JSON with `"hash"` as its last field; the hash
//! is SHA-256 over the previous line's hash (hex) and the line without
//! that field (`{...}`). The first record's `prev` is 64 zeros. Editing,
//! removing or reordering a line breaks the chain at that line; a crash
//! mid-write leaves at most a torn last line (no newline), which
//! [`verify`] reports as such.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{FedError, Result};

/// The default audit file, in the worker's working directory.
pub const DEFAULT_AUDIT_LOG: &str = "fedsql-audit.jsonl";

/// The `prev` of the first record.
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One request as the audit trail records it (before its `prev` and `hash`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    /// RFC 3339, UTC.
    pub time: String,
    /// The token's analyst name.
    pub analyst: String,
    /// The caller's address.
    pub peer: String,
    /// The served table (empty when the request named none this worker serves).
    pub table: String,
    /// A one-line summary of the encoder: aggregates, GROUP BY keys,
    /// filters and functions (never values of the data).
    pub request: String,
    /// SHA-256 of the canonical encoder, a fit's coefficients masked.
    pub fingerprint: String,
    /// `released`, `refused` or `pending`.
    pub decision: String,
    /// For a refusal: the rule and setting that refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// State rows (groups) released.
    pub groups: u64,
    /// Rows the state covers.
    pub rows: u64,
    /// Differential-privacy ε debited.
    pub epsilon: f64,
    /// Bytes released.
    pub bytes: u64,
    pub duration_ms: u64,
}

/// A record as written: the entry, chained.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditRecord {
    #[serde(flatten)]
    pub entry: AuditEntry,
    pub prev: String,
}

/// The current time, RFC 3339 in UTC.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn hex_sha256(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// SHA-256 (hex) of a canonical text, for fingerprints.
pub fn fingerprint(canonical: &str) -> String {
    hex_sha256(&[canonical.as_bytes()])
}

/// The open audit file of a running worker.
pub struct AuditLog {
    path: PathBuf,
    /// The file and the last record's hash.
    state: Mutex<(File, String)>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish()
    }
}

impl AuditLog {
    /// Opens (or creates) the audit file and continues its chain. A file
    /// whose chain does not hold (edited, or a torn last line) is a
    /// start-up error: move it aside first.
    pub fn open(path: &Path) -> Result<Self> {
        // A device (e.g. /dev/full in a test) has no chain to continue.
        let regular = !std::fs::metadata(path).is_ok_and(|m| !m.is_file());
        let text = match if regular {
            std::fs::read_to_string(path)
        } else {
            Ok(String::new())
        } {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(FedError::InvalidArgument(format!(
                    "cannot read the audit log {}: {e}",
                    path.display()
                )));
            }
        };
        let last = check_chain(&text).map_err(|e| {
            FedError::InvalidArgument(format!(
                "the audit log {} does not verify ({e}); move it aside to start a new one",
                path.display()
            ))
        })?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                FedError::InvalidArgument(format!(
                    "cannot open the audit log {}: {e}",
                    path.display()
                ))
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            state: Mutex::new((file, last.unwrap_or_else(|| GENESIS.to_string()))),
        })
    }

    /// The file this log writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record and syncs it to disk. An error means the
    /// request must not be answered.
    pub fn append(&self, entry: AuditEntry) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let record = AuditRecord {
            entry,
            prev: state.1.clone(),
        };
        let body = serde_json::to_string(&record)
            .map_err(|e| FedError::Io(std::io::Error::other(e.to_string())))?;
        let hash = hex_sha256(&[record.prev.as_bytes(), body.as_bytes()]);
        let line = format!("{},\"hash\":\"{hash}\"}}\n", &body[..body.len() - 1]);
        let written = state
            .0
            .write_all(line.as_bytes())
            .and_then(|()| state.0.sync_data());
        written.map_err(|e| {
            FedError::Io(std::io::Error::other(format!(
                "cannot write the audit log {}: {e}",
                self.path.display()
            )))
        })?;
        state.1 = hash;
        Ok(())
    }
}

/// Why a trail does not verify: the 1-based line and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainError {
    pub line: usize,
    pub problem: String,
}

impl std::fmt::Display for ChainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.problem)
    }
}

/// Splits one line into its body (without `hash`) and its hash.
fn split_line(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_suffix("\"}")?;
    let at = rest.rfind(",\"hash\":\"")?;
    let hash = &rest[at + 9..];
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((format!("{}}}", &rest[..at]), hash))
}

/// Checks a trail's chain; the last record's hash (`None`: empty trail).
pub fn check_chain(text: &str) -> std::result::Result<Option<String>, ChainError> {
    let mut prev = GENESIS.to_string();
    let mut count = 0;
    let torn = !text.is_empty() && !text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let number = i + 1;
        if torn && number == lines.len() {
            return Err(ChainError {
                line: number,
                problem: "torn last line (the write was cut short, e.g. by a crash)".into(),
            });
        }
        let bad = |problem: &str| ChainError {
            line: number,
            problem: problem.to_string(),
        };
        let (body, hash) = split_line(line).ok_or_else(|| bad("not an audit record"))?;
        let record: AuditRecord =
            serde_json::from_str(&body).map_err(|_| bad("not an audit record"))?;
        if record.prev != prev {
            return Err(bad(
                "its `prev` is not the previous line's hash: a line before it was removed, or lines were reordered",
            ));
        }
        if hex_sha256(&[prev.as_bytes(), body.as_bytes()]) != hash {
            return Err(bad("its hash does not match: the line was edited"));
        }
        prev = hash.to_string();
        count += 1;
    }
    Ok((count > 0).then_some(prev))
}

/// `fedsql audit verify FILE`: `ok: N records`, or an error naming the
/// first line that breaks the chain.
pub fn verify(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FedError::InvalidArgument(format!("cannot read {}: {e}", path.display())))?;
    check_chain(&text).map_err(|e| {
        FedError::InvalidArgument(format!("audit log {} does not verify: {e}", path.display()))
    })?;
    Ok(format!("ok: {} records", text.lines().count()))
}

/// `fedsql audit ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuditCommand {
    /// Check a worker's audit trail: `ok: N records`, or exit 1 naming the
    /// first line that was edited, removed or reordered (or a torn last line).
    Verify {
        /// The audit file (JSON lines).
        file: PathBuf,
    },
    /// Print a worker's audit trail.
    Show(ShowArgs),
}

/// `fedsql audit show` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ShowArgs {
    /// The audit file (JSON lines).
    pub file: PathBuf,
    /// Only this analyst's requests.
    #[arg(long, value_name = "NAME")]
    pub analyst: Option<String>,
    /// Only requests at or after this time (RFC 3339, or a date YYYY-MM-DD, UTC).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only requests with this decision.
    #[arg(long, value_name = "released|refused|pending")]
    pub decision: Option<String>,
    /// Output format.
    #[arg(long, value_name = "table|csv|json", default_value = "table")]
    pub format: String,
}

fn parse_since(text: &str) -> Result<chrono::DateTime<chrono::Utc>> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    Err(FedError::InvalidArgument(format!(
        "--since {text}: not an RFC 3339 time (2026-01-31T12:00:00Z) or a date (2026-01-31)"
    )))
}

/// `fedsql audit show`: the records that match, formatted.
pub fn show(args: &ShowArgs) -> Result<String> {
    let text = std::fs::read_to_string(&args.file).map_err(|e| {
        FedError::InvalidArgument(format!("cannot read {}: {e}", args.file.display()))
    })?;
    if let Some(d) = &args.decision
        && !["released", "refused", "pending"].contains(&d.as_str())
    {
        return Err(FedError::InvalidArgument(format!(
            "--decision {d}: one of released, refused, pending"
        )));
    }
    let since = args.since.as_deref().map(parse_since).transpose()?;
    let mut rows: Vec<(AuditRecord, String)> = Vec::new();
    for line in text.lines() {
        let Some((body, hash)) = split_line(line) else {
            continue;
        };
        let Ok(record) = serde_json::from_str::<AuditRecord>(&body) else {
            continue;
        };
        let e = &record.entry;
        if args.analyst.as_ref().is_some_and(|a| a != &e.analyst)
            || args.decision.as_ref().is_some_and(|d| d != &e.decision)
        {
            continue;
        }
        if let Some(since) = since {
            match chrono::DateTime::parse_from_rfc3339(&e.time) {
                Ok(t) if t >= since => {}
                _ => continue,
            }
        }
        rows.push((record, hash.to_string()));
    }
    let header = [
        "time", "analyst", "peer", "table", "decision", "rule", "groups", "rows", "epsilon",
        "bytes", "ms", "request",
    ];
    let cells = |e: &AuditEntry| -> Vec<String> {
        vec![
            e.time.clone(),
            e.analyst.clone(),
            e.peer.clone(),
            e.table.clone(),
            e.decision.clone(),
            e.rule.clone().unwrap_or_default(),
            e.groups.to_string(),
            e.rows.to_string(),
            e.epsilon.to_string(),
            e.bytes.to_string(),
            e.duration_ms.to_string(),
            e.request.clone(),
        ]
    };
    match args.format.as_str() {
        "json" => {
            let mut out = String::new();
            for (record, hash) in &rows {
                let mut value = serde_json::to_value(record)
                    .map_err(|e| FedError::Io(std::io::Error::other(e.to_string())))?;
                if let Some(map) = value.as_object_mut() {
                    map.insert("hash".into(), serde_json::Value::String(hash.clone()));
                }
                out.push_str(&value.to_string());
                out.push('\n');
            }
            Ok(out)
        }
        "csv" => {
            let quote = |s: &str| {
                if s.contains([',', '"', '\n']) {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s.to_string()
                }
            };
            let mut out = header.join(",") + "\n";
            for (record, _) in &rows {
                let line: Vec<String> = cells(&record.entry).iter().map(|c| quote(c)).collect();
                out.push_str(&line.join(","));
                out.push('\n');
            }
            Ok(out)
        }
        "table" => {
            let mut table = comfy_table::Table::new();
            table.load_preset(comfy_table::presets::ASCII_MARKDOWN);
            table.set_header(header);
            for (record, _) in &rows {
                table.add_row(cells(&record.entry));
            }
            Ok(format!("{table}\n"))
        }
        other => Err(FedError::InvalidArgument(format!(
            "--format {other}: one of table, csv, json"
        ))),
    }
}

/// Runs `fedsql audit ...`.
pub fn run_cli(command: &AuditCommand) -> Result<String> {
    match command {
        AuditCommand::Verify { file } => verify(file).map(|ok| ok + "\n"),
        AuditCommand::Show(args) => show(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(analyst: &str, decision: &str) -> AuditEntry {
        AuditEntry {
            time: now_rfc3339(),
            analyst: analyst.into(),
            peer: "127.0.0.1:1".into(),
            table: "clinic".into(),
            request: "aggregates: count".into(),
            fingerprint: fingerprint("x"),
            decision: decision.into(),
            ..AuditEntry::default()
        }
    }

    fn written(n: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        for i in 0..n {
            log.append(entry(&format!("a{i}"), "released")).unwrap();
        }
        (dir, path)
    }

    #[test]
    fn a_written_chain_verifies_and_continues_after_reopen() {
        let (_dir, path) = written(3);
        assert_eq!(verify(&path).unwrap(), "ok: 3 records");
        AuditLog::open(&path)
            .unwrap()
            .append(entry("b", "refused"))
            .unwrap();
        assert_eq!(verify(&path).unwrap(), "ok: 4 records");
    }

    #[test]
    fn edits_removals_reorders_and_torn_lines_are_named() {
        let (_dir, path) = written(4);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let check = |lines: Vec<String>, torn: bool| {
            let mut text = lines.join("\n");
            if !torn {
                text.push('\n');
            }
            check_chain(&text).unwrap_err()
        };
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut edited = own(&lines);
        edited[1] = edited[1].replace("\"a1\"", "\"zz\"");
        assert_eq!(check(edited, false).line, 2);
        let mut removed = own(&lines);
        removed.remove(2);
        assert_eq!(check(removed, false).line, 3);
        let mut reordered = own(&lines);
        reordered.swap(1, 2);
        assert_eq!(check(reordered, false).line, 2);
        let mut torn = own(&lines);
        let last = torn.pop().unwrap();
        torn.push(last[..20].to_string());
        let err = check(torn, true);
        assert_eq!(err.line, 4);
        assert!(err.problem.contains("torn"), "{err}");
    }

    #[test]
    fn show_filters_and_formats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path).unwrap();
        log.append(entry("alice", "released")).unwrap();
        log.append(AuditEntry {
            rule: Some("min_group_rows = 5".into()),
            ..entry("bob", "refused")
        })
        .unwrap();
        let args = |format: &str, decision: Option<&str>| ShowArgs {
            file: path.clone(),
            analyst: None,
            since: Some("2000-01-01".into()),
            decision: decision.map(str::to_string),
            format: format.into(),
        };
        let csv = show(&args("csv", Some("refused"))).unwrap();
        assert_eq!(csv.lines().count(), 2, "{csv}");
        assert!(csv.contains("bob") && csv.contains("min_group_rows = 5"));
        let json = show(&args("json", None)).unwrap();
        assert_eq!(json.lines().count(), 2);
        let table = show(&args("table", None)).unwrap();
        assert!(table.contains("alice") && table.contains("bob"), "{table}");
        assert!(show(&args("xml", None)).is_err());
    }
}
