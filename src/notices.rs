//! Notices: messages a statement leaves for whoever runs it — warnings
//! (a GLM that did not converge, fitted probabilities of 0 or 1) and
//! summaries (a GLM's deviance lines) — and live progress of long fits.
//! Both travel in the session's config, so table functions reach them.

use std::sync::Mutex;

/// Messages left by the last statements, in order.
#[derive(Debug, Default)]
pub struct Notices {
    messages: Mutex<Vec<String>>,
}

impl Notices {
    /// Leaves a message.
    pub fn push(&self, message: impl Into<String>) {
        self.messages
            .lock()
            .expect("not poisoned")
            .push(message.into());
    }

    /// Takes every message left so far.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.messages.lock().expect("not poisoned"))
    }
}

/// Where long-running fits report progress (e.g. the REPL's status line).
pub struct Progress {
    report: Box<dyn Fn(&str) + Send + Sync>,
}

impl Progress {
    /// Progress reported through `report`.
    pub fn new(report: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self {
            report: Box::new(report),
        }
    }

    /// Reports one step.
    pub fn report(&self, message: &str) {
        (self.report)(message)
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}
