//! Manual approval of new requests: where a profile or a table says
//! `approval = "manual"`, a request whose fingerprint (the audit trail's:
//! the canonical encoder, a fit's coefficients masked) the data owner has
//! not approved for that analyst and table is not run. The worker records
//! it as pending in the approvals file and the coordinator is told it
//! awaits approval, with a short id; `fedsql approvals approve ID` (or the
//! admin page) appends the decision, which the running worker reads at
//! the next request — no restart. An approval covers that fingerprint, so
//! a later run of the same query, or a later round of the same fit, needs
//! none.
//!
//! The file holds JSON lines, appended and synced, never rewritten: a
//! request's latest line is its state. A line that does not parse (a torn
//! last line) approves nothing.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{FedError, Result};
use crate::site::worker::audit::now_rfc3339;

pub use crate::site::worker::config::DEFAULT_APPROVALS_FILE;

/// One line of the approvals file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ApprovalRecord {
    /// Short id (hex) of the analyst, table and fingerprint.
    pub id: String,
    /// RFC 3339, UTC: when this line was written.
    pub time: String,
    pub analyst: String,
    pub table: String,
    /// The audit trail's fingerprint of the request.
    pub fingerprint: String,
    /// The audit trail's one-line summary of the request.
    pub request: String,
    /// `pending`, `approved` or `denied`.
    pub status: String,
}

/// What the approvals file says of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approved,
    /// Denied by the data owner (its id).
    Denied(String),
    /// Waiting for the data owner (its id).
    Pending(String),
}

/// A worker's approvals file.
#[derive(Debug)]
pub struct Approvals {
    path: PathBuf,
    /// One writer at a time in this process.
    lock: Mutex<()>,
}

/// The id of a request: 12 hex digits of SHA-256 over who, where and what.
pub fn request_id(analyst: &str, table: &str, fingerprint: &str) -> String {
    let digest = Sha256::digest(format!("{analyst}\0{table}\0{fingerprint}").as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

impl Approvals {
    /// Opens (creating if missing) the approvals file; an error when it
    /// cannot be written.
    pub fn open(path: &Path) -> Result<Self> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                FedError::InvalidArgument(format!(
                    "cannot open the approvals file {}: {e}",
                    path.display()
                ))
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            lock: Mutex::new(()),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decision on a request; a request never seen is recorded as
    /// pending (and stays so until the data owner decides).
    pub fn decide(
        &self,
        analyst: &str,
        table: &str,
        fingerprint: &str,
        request: &str,
    ) -> Result<Decision> {
        let _guard = self.lock.lock().expect("not poisoned");
        let id = request_id(analyst, table, fingerprint);
        let latest = read(&self.path)?
            .into_iter()
            .rev()
            .find(|r| r.analyst == analyst && r.table == table && r.fingerprint == fingerprint);
        Ok(match latest.as_ref().map(|r| r.status.as_str()) {
            Some("approved") => Decision::Approved,
            Some("denied") => Decision::Denied(id),
            Some(_) => Decision::Pending(id),
            None => {
                append(
                    &self.path,
                    &ApprovalRecord {
                        id: id.clone(),
                        time: now_rfc3339(),
                        analyst: analyst.into(),
                        table: table.into(),
                        fingerprint: fingerprint.into(),
                        request: request.into(),
                        status: "pending".into(),
                    },
                )?;
                Decision::Pending(id)
            }
        })
    }
}

/// Every parseable line of the file, in order.
fn read(path: &Path) -> Result<Vec<ApprovalRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(FedError::InvalidArgument(format!(
                "cannot read the approvals file {}: {e}",
                path.display()
            )));
        }
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

/// Appends one line and syncs it.
fn append(path: &Path, record: &ApprovalRecord) -> Result<()> {
    let mut line = serde_json::to_string(record)
        .map_err(|e| FedError::Internal(format!("an approval record: {e}")))?;
    line.push('\n');
    // After a torn last line, the record starts a line of its own.
    let torn = std::fs::read(path)
        .map(|bytes| bytes.last().is_some_and(|b| *b != b'\n'))
        .unwrap_or(false);
    if torn {
        line.insert(0, '\n');
    }
    let written = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| {
            file.write_all(line.as_bytes())?;
            file.sync_data()
        });
    written.map_err(|e| {
        FedError::InvalidArgument(format!(
            "cannot write the approvals file {}: {e}",
            path.display()
        ))
    })
}

/// Each request's latest line, in the order requests first appeared.
pub fn current(path: &Path) -> Result<Vec<ApprovalRecord>> {
    let mut latest: Vec<ApprovalRecord> = Vec::new();
    for record in read(path)? {
        match latest.iter_mut().find(|r| r.id == record.id) {
            Some(slot) => *slot = record,
            None => latest.push(record),
        }
    }
    Ok(latest)
}

/// Approves or denies request `id` (or a unique prefix of it, at least 4
/// digits): appends the decision; the record as it now stands.
pub fn set(path: &Path, id: &str, status: &str) -> Result<ApprovalRecord> {
    let id = id.trim().to_ascii_lowercase();
    if id.len() < 4 {
        return Err(FedError::InvalidArgument(format!(
            "approval id `{id}`: give at least 4 of its digits"
        )));
    }
    let matching: Vec<ApprovalRecord> = current(path)?
        .into_iter()
        .filter(|r| r.id.starts_with(&id))
        .collect();
    let record = match matching.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(FedError::InvalidArgument(format!(
                "no request `{id}` in {} (`fedsql approvals list` shows them)",
                path.display()
            )));
        }
        _ => {
            return Err(FedError::InvalidArgument(format!(
                "`{id}` names {} requests: give more digits",
                matching.len()
            )));
        }
    };
    let decided = ApprovalRecord {
        time: now_rfc3339(),
        status: status.to_string(),
        ..record
    };
    append(path, &decided)?;
    Ok(decided)
}

/// `fedsql approvals ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ApprovalsCommand {
    /// List the requests awaiting approval (all of them with --all).
    List {
        #[command(flatten)]
        file: ApprovalsFile,
        /// Also list approved and denied requests.
        #[arg(long)]
        all: bool,
    },
    /// Approve a request: the worker answers it (and later runs of it) from now on.
    Approve {
        /// The request's id, as the refusal and `list` show it.
        id: String,
        #[command(flatten)]
        file: ApprovalsFile,
    },
    /// Deny a request: the worker refuses it from now on.
    Deny {
        /// The request's id, as the refusal and `list` show it.
        id: String,
        #[command(flatten)]
        file: ApprovalsFile,
    },
}

/// Where the approvals file is.
#[derive(Debug, Clone, clap::Args)]
pub struct ApprovalsFile {
    /// The worker's TOML configuration (its `approvals_file`, or the
    /// default beside its audit log).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The approvals file itself (default: fedsql-approvals.jsonl here).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub file: Option<PathBuf>,
}

impl ApprovalsFile {
    fn path(&self) -> Result<PathBuf> {
        match (&self.file, &self.config) {
            (Some(file), _) => Ok(file.clone()),
            (None, Some(config)) => super::config::approvals_file_of(config),
            (None, None) => Ok(PathBuf::from(DEFAULT_APPROVALS_FILE)),
        }
    }
}

/// Runs `fedsql approvals ...`: the text to print.
pub fn run_cli(command: &ApprovalsCommand) -> Result<String> {
    match command {
        ApprovalsCommand::List { file, all } => {
            let path = file.path()?;
            let records: Vec<ApprovalRecord> = current(&path)?
                .into_iter()
                .filter(|r| *all || r.status == "pending")
                .collect();
            if records.is_empty() {
                return Ok(format!(
                    "no {}requests in {}\n",
                    if *all { "" } else { "pending " },
                    path.display()
                ));
            }
            let mut table = comfy_table::Table::new();
            table.load_preset(comfy_table::presets::ASCII_MARKDOWN);
            table.set_header(["id", "status", "time", "analyst", "table", "request"]);
            // Nothing a terminal would obey reaches it from a file.
            let shown = |text: &str| -> String {
                text.chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect()
            };
            for r in &records {
                table.add_row([
                    shown(&r.id),
                    shown(&r.status),
                    shown(&r.time),
                    shown(&r.analyst),
                    shown(&r.table),
                    shown(&r.request),
                ]);
            }
            Ok(format!("{table}\n"))
        }
        ApprovalsCommand::Approve { id, file } => {
            let r = set(&file.path()?, id, "approved")?;
            Ok(format!(
                "approved {} ({} on {}): {}\n",
                r.id, r.analyst, r.table, r.request
            ))
        }
        ApprovalsCommand::Deny { id, file } => {
            let r = set(&file.path()?, id, "denied")?;
            Ok(format!(
                "denied {} ({} on {}): {}\n",
                r.id, r.analyst, r.table, r.request
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_request_waits_until_approved_and_denial_sticks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("approvals.jsonl");
        let approvals = Approvals::open(&path).unwrap();
        let first = approvals.decide("alice", "clinic", "f1", "aggregates: count(*)");
        let Ok(Decision::Pending(id)) = first else {
            panic!("{first:?}")
        };
        // Asking again does not add a second pending line.
        assert_eq!(
            approvals.decide("alice", "clinic", "f1", "x").unwrap(),
            Decision::Pending(id.clone())
        );
        assert_eq!(current(&path).unwrap().len(), 1);
        // Another analyst's same request is a request of its own.
        assert!(matches!(
            approvals.decide("bob", "clinic", "f1", "x").unwrap(),
            Decision::Pending(other) if other != id
        ));
        set(&path, &id[..6], "approved").unwrap();
        assert_eq!(
            approvals.decide("alice", "clinic", "f1", "x").unwrap(),
            Decision::Approved
        );
        set(&path, &id, "denied").unwrap();
        assert_eq!(
            approvals.decide("alice", "clinic", "f1", "x").unwrap(),
            Decision::Denied(id.clone())
        );
        assert!(set(&path, "zzzz", "approved").is_err());
        assert!(set(&path, "ab", "approved").is_err());
        // A torn last line approves nothing.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"id\":\"")
            .unwrap();
        assert_eq!(
            approvals.decide("alice", "clinic", "f1", "x").unwrap(),
            Decision::Denied(id.clone())
        );
        // ... and the next decision after it is read.
        set(&path, &id, "approved").unwrap();
        assert_eq!(
            approvals.decide("alice", "clinic", "f1", "x").unwrap(),
            Decision::Approved
        );
    }
}
