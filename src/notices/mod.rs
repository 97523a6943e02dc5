//! Notices: messages a statement leaves for whoever runs it — warnings
//! (a GLM that did not converge, fitted probabilities of 0 or 1) and
//! summaries (a GLM's deviance lines) — and live progress of long fits.
//! Both travel in the session's config, so table functions reach them.
//! A model fit also leaves its [`ModelSummary`], which the REPL prints
//! around the coefficient table as R's `summary()` does.

use std::sync::Mutex;

pub(crate) mod printed_summary;

use printed_summary::ModelSummary;

/// Messages left by the last statements, in order.
#[derive(Debug, Default)]
pub struct Notices {
    messages: Mutex<Vec<String>>,
    summaries: Mutex<Vec<ModelSummary>>,
}

impl Notices {
    /// Leaves a message.
    pub fn push(&self, message: impl Into<String>) {
        self.messages
            .lock()
            .expect("not poisoned")
            .push(message.into());
    }

    /// Leaves a model's summary (see [`printed_summary`]).
    pub fn push_summary(&self, summary: ModelSummary) {
        self.summaries.lock().expect("not poisoned").push(summary);
    }

    /// Takes every message left so far, each model summary as its text
    /// after the messages (for callers that print only text, e.g. a
    /// PostgreSQL NOTICE).
    pub fn take(&self) -> Vec<String> {
        let (mut messages, summaries) = self.take_separately();
        messages.extend(summaries.iter().map(ModelSummary::text));
        messages
    }

    /// Takes the messages and the model summaries left so far, apart.
    pub fn take_separately(&self) -> (Vec<String>, Vec<ModelSummary>) {
        (
            std::mem::take(&mut *self.messages.lock().expect("not poisoned")),
            std::mem::take(&mut *self.summaries.lock().expect("not poisoned")),
        )
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

/// What a round reports as it runs, for a progress line of plain SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundEvent {
    /// A round began: its encoder was sent to this many sites.
    Started { sites: usize },
    /// One site's state arrived.
    SiteAnswered,
}

/// Where the rounds of every statement report their sites' answers
/// (the REPL's progress line: sites answered / total).
pub struct RoundProgress {
    report: Box<dyn Fn(RoundEvent) + Send + Sync>,
}

impl RoundProgress {
    /// Round events reported through `report`.
    pub fn new(report: impl Fn(RoundEvent) + Send + Sync + 'static) -> Self {
        Self {
            report: Box::new(report),
        }
    }

    /// Reports one event.
    pub fn report(&self, event: RoundEvent) {
        (self.report)(event)
    }
}

impl std::fmt::Debug for RoundProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RoundProgress")
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}
