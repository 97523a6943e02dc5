//! The REPL's progress line for a long statement: after one second, a
//! spinner on stderr with the sites that have answered the current round
//! out of all (and a fit's own message, e.g. its iteration and deviance),
//! drawn with `indicatif`. It is cleared when the statement ends or is
//! cancelled by Ctrl-C (dropping the statement's future drops the guard),
//! and never drawn when stdout or stderr is not a terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::coordinator::context::FedContext;
use crate::notices::{Progress, RoundEvent, RoundProgress};

/// How long a statement runs before its progress line appears.
pub(crate) const SHOW_AFTER: Duration = Duration::from_secs(1);

/// What the rounds of the running statement have reported.
#[derive(Debug, Default)]
pub(crate) struct ProgressState {
    round: AtomicUsize,
    answered: AtomicUsize,
    sites: AtomicUsize,
    /// A fit's own progress message (iteration, deviance).
    message: Mutex<String>,
}

impl ProgressState {
    /// Takes one round event.
    pub(crate) fn record(&self, event: RoundEvent) {
        match event {
            RoundEvent::Started { sites } => {
                self.round.fetch_add(1, Ordering::SeqCst);
                self.answered.store(0, Ordering::SeqCst);
                self.sites.store(sites, Ordering::SeqCst);
            }
            RoundEvent::SiteAnswered => {
                self.answered.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The line's text, e.g. `round 2: 3/4 sites answered · iteration 2, deviance 812.4`.
    pub(crate) fn render(&self) -> String {
        let round = self.round.load(Ordering::SeqCst);
        let mut text = if round == 0 {
            "waiting for the first round".to_string()
        } else {
            format!(
                "round {round}: {}/{} sites answered",
                self.answered.load(Ordering::SeqCst),
                self.sites.load(Ordering::SeqCst)
            )
        };
        let message = self.message.lock().expect("not poisoned");
        if !message.is_empty() {
            text.push_str(" · ");
            text.push_str(&message);
        }
        text
    }

    fn reset(&self) {
        self.round.store(0, Ordering::SeqCst);
        self.answered.store(0, Ordering::SeqCst);
        self.sites.store(0, Ordering::SeqCst);
        self.message.lock().expect("not poisoned").clear();
    }
}

/// The progress line of a session on a terminal.
#[derive(Debug, Clone)]
pub(crate) struct ProgressLine {
    state: Arc<ProgressState>,
}

impl ProgressLine {
    /// Listens to `ctx`'s rounds and fits, when stdout and stderr are
    /// terminals; `None` otherwise (a redirected output gets no progress).
    pub(crate) fn install(ctx: &FedContext) -> Option<Self> {
        if !std::io::stdout().is_terminal() || !std::io::stderr().is_terminal() {
            return None;
        }
        let state = Arc::new(ProgressState::default());
        let rounds = Arc::clone(&state);
        ctx.set_round_progress(RoundProgress::new(move |event| rounds.record(event)));
        let fits = Arc::clone(&state);
        ctx.set_progress(Progress::new(move |message| {
            *fits.message.lock().expect("not poisoned") = message.to_string();
        }));
        Some(Self { state })
    }

    /// Starts watching one statement; the line shows after [`SHOW_AFTER`]
    /// and is cleared when the guard is dropped. The timer is a thread of
    /// its own: the runtime's workers may all be busy with the query.
    pub(crate) fn start(&self) -> ProgressGuard {
        self.state.reset();
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let shown = Arc::new((Mutex::new(Visibility::Waiting), Condvar::new()));
        let (thread_bar, thread_shown, state) =
            (bar.clone(), Arc::clone(&shown), Arc::clone(&self.state));
        std::thread::spawn(move || {
            let (lock, wake) = &*thread_shown;
            let deadline = Instant::now() + SHOW_AFTER;
            let mut visibility = lock.lock().expect("not poisoned");
            while *visibility == Visibility::Waiting {
                let now = Instant::now();
                if now >= deadline {
                    *visibility = Visibility::Shown;
                    thread_bar.set_draw_target(ProgressDrawTarget::stderr());
                    thread_bar.enable_steady_tick(Duration::from_millis(120));
                    break;
                }
                visibility = wake
                    .wait_timeout(visibility, deadline - now)
                    .expect("not poisoned")
                    .0;
            }
            while *visibility == Visibility::Shown {
                thread_bar.set_message(state.render());
                visibility = wake
                    .wait_timeout(visibility, Duration::from_millis(120))
                    .expect("not poisoned")
                    .0;
            }
        });
        ProgressGuard { bar, shown }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visibility {
    Waiting,
    Shown,
    Done,
}

/// Clears the progress line of one statement when dropped.
pub(crate) struct ProgressGuard {
    bar: ProgressBar,
    shown: Arc<(Mutex<Visibility>, Condvar)>,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        let (lock, wake) = &*self.shown;
        let mut visibility = lock.lock().expect("not poisoned");
        if *visibility == Visibility::Shown {
            self.bar.finish_and_clear();
        }
        *visibility = Visibility::Done;
        wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_sites_per_round() {
        let state = ProgressState::default();
        assert_eq!(state.render(), "waiting for the first round");
        state.record(RoundEvent::Started { sites: 4 });
        state.record(RoundEvent::SiteAnswered);
        assert_eq!(state.render(), "round 1: 1/4 sites answered");
        state.record(RoundEvent::Started { sites: 4 });
        for _ in 0..3 {
            state.record(RoundEvent::SiteAnswered);
        }
        *state.message.lock().unwrap() = "iteration 2".into();
        assert_eq!(state.render(), "round 2: 3/4 sites answered · iteration 2");
    }

    #[test]
    fn a_statement_shorter_than_a_second_draws_nothing() {
        let line = ProgressLine {
            state: Arc::new(ProgressState::default()),
        };
        let guard = line.start();
        let bar = guard.bar.clone();
        drop(guard);
        // The timer thread sees `Done` and ends without showing the bar.
        std::thread::sleep(SHOW_AFTER + Duration::from_millis(200));
        assert!(bar.is_hidden());
    }

    #[test]
    fn no_progress_line_when_output_is_not_a_terminal() {
        // Test output is captured, never a terminal.
        assert!(ProgressLine::install(&FedContext::new()).is_none());
    }
}
