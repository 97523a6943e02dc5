//! A worker's log: every request, every state released and every refusal,
//! with its reason. It goes to stderr unless a test captures it.

use std::sync::Arc;

use tonic::Status;

/// Where the worker's log lines go (stderr unless a test captures them).
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The worker's log.
#[derive(Clone)]
pub(crate) struct WorkerLog {
    sink: LogSink,
}

impl WorkerLog {
    /// A log writing to `sink`, or to stderr.
    pub(crate) fn new(sink: Option<LogSink>) -> Self {
        Self {
            sink: sink.unwrap_or_else(|| Arc::new(|line: &str| eprintln!("{line}"))),
        }
    }

    /// Logs one line about a request from `peer`.
    pub(crate) fn line(&self, peer: &str, line: &str) {
        (self.sink)(&format!("fedsql worker: peer {peer}: {line}"));
    }

    /// Logs a refused request and hands back its status.
    pub(crate) fn refuse(&self, peer: &str, call: &str, status: Status) -> Status {
        self.line(
            peer,
            &format!("{call} REFUSED ({:?}): {}", status.code(), status.message()),
        );
        status
    }
}
