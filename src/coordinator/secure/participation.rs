//! Who took part in a secure round: the sites that dropped out and at
//! which step, the threshold check after each step, and the words of the
//! notice and of `EXPLAIN ANALYZE FEDERATED`.

use crate::error::{FedError, Result};
use crate::protocol::secure::SecureSession;

/// The step at which a site dropped out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// It did not answer the setup (keys and group keys).
    Setup,
    /// In a sparse round, it did not reveal its graph nonce (or revealed
    /// one it had not committed to): that session ended there, and the
    /// round ran again without it.
    Reveal,
    /// It did not send its shares.
    Shares,
    /// It shared its secrets but sent no masked state.
    Masking,
    /// It sent its masked state but did not sign the survivor list: that
    /// session was unmasked by no one, and the round ran again without it.
    Signing,
}

impl Stage {
    fn words(self) -> &'static str {
        match self {
            Stage::Setup => "dropped out before the key exchange; it was left out",
            Stage::Reveal => "did not reveal its graph nonce; the round was run again without it",
            Stage::Shares => "dropped out before sharing its keys; it was left out",
            Stage::Masking => "dropped out after masking; its masks were removed",
            Stage::Signing => "did not sign the survivor list; the round was run again without it",
        }
    }
}

/// The sites of a secure round and what became of each.
#[derive(Debug, Clone)]
pub(crate) struct Participation {
    clients: Vec<String>,
    threshold: usize,
    dropped: Vec<Option<(Stage, String)>>,
    /// Survivors that did not answer the unmasking (their state counts):
    /// the place, the step, why.
    silent: Vec<(usize, &'static str, String)>,
    /// Groups some but fewer than the threshold of the sites that took
    /// part have: withheld.
    thin_groups: usize,
}

impl Participation {
    pub(crate) fn new(session: &SecureSession) -> Self {
        Self {
            clients: session.clients.clone(),
            threshold: session.threshold,
            dropped: vec![None; session.clients.len()],
            silent: Vec::new(),
            thin_groups: 0,
        }
    }

    /// `n` groups are withheld: fewer than the threshold of the sites that
    /// took part have them.
    pub(crate) fn withhold_groups(&mut self, n: usize) {
        self.thin_groups = n;
    }

    /// The sentence on withheld groups, if any.
    fn withheld(&self) -> Option<String> {
        (self.thin_groups > 0).then(|| {
            format!(
                "{} group(s) held by fewer than the threshold of {} sites are not shown: their sums would be those of fewer than {} sites",
                self.thin_groups, self.threshold, self.threshold
            )
        })
    }

    /// The places of the sites still in the round.
    pub(crate) fn alive(&self) -> Vec<usize> {
        (0..self.clients.len())
            .filter(|&i| self.dropped[i].is_none())
            .collect()
    }

    pub(crate) fn drop_out(&mut self, site: usize, stage: Stage, why: &dyn std::fmt::Display) {
        self.dropped[site] = Some((stage, why.to_string()));
    }

    pub(crate) fn miss_unmasking(&mut self, site: usize, why: &FedError) {
        self.silent
            .push((site, "did not answer the unmasking", why.to_string()));
    }

    /// The sites that dropped out, as `'name' (step: reason)`.
    fn dropped_list(&self, with_reasons: bool) -> String {
        let mut parts: Vec<String> = self
            .dropped
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                d.as_ref().map(|(stage, why)| {
                    let name = &self.clients[i];
                    if with_reasons {
                        format!("'{name}' ({}: {why})", stage.words())
                    } else {
                        format!("'{name}' {}", stage.words())
                    }
                })
            })
            .collect();
        parts.extend(self.silent.iter().map(|(i, step, why)| {
            let name = &self.clients[*i];
            if with_reasons {
                format!("'{name}' ({step}: {why})")
            } else {
                format!("'{name}' {step}; its state counts")
            }
        }));
        parts.join("; ")
    }

    /// Fails the round when fewer than the threshold are left after `stage`.
    pub(crate) fn check(&self, stage: Stage) -> Result<()> {
        let alive = self.alive().len();
        if alive >= self.threshold {
            return Ok(());
        }
        Err(self.below_threshold(alive, &format!("after the step '{stage:?}'")))
    }

    fn below_threshold(&self, alive: usize, when: &str) -> FedError {
        FedError::InvalidArgument(format!(
            "secure aggregation failed: {alive} of {} clients were left {when}, fewer than the threshold {}; dropped out: {}\n\
             hint: rerun the query when more sites are available, or lower the threshold (SET fedsql.secure_threshold = t, or the table's 'secure_threshold' option; never below a strict majority, more than two thirds where the sites check their peers, nor a site's min_secure_clients)",
            self.clients.len(),
            self.threshold,
            self.dropped_list(true)
        ))
    }

    /// The error of an unmasking that could not finish: too few shares
    /// (named with the sites that dropped), or shares that do not match.
    pub(crate) fn unmask_failed(&self, e: FedError) -> FedError {
        let answered = self.alive().len() - self.silent.len();
        if answered < self.threshold {
            return self.below_threshold(answered, "to answer the unmasking");
        }
        FedError::InvalidArgument(format!(
            "secure aggregation failed while unmasking: {e}; no total is given"
        ))
    }

    /// How many sites took part (their states are in the total).
    pub(crate) fn took_part(&self) -> usize {
        self.alive().len()
    }

    /// The notice of a round some site dropped out of; `None` if all took part.
    pub(crate) fn notice(&self) -> Option<String> {
        if self.dropped.iter().all(Option::is_none) && self.silent.is_empty() {
            return self.withheld().map(|w| format!("secure aggregation: {w}"));
        }
        let mut line = format!(
            "secure aggregation: {} of {} clients took part ({})",
            self.took_part(),
            self.clients.len(),
            self.dropped_list(false)
        );
        if let Some(w) = self.withheld() {
            line.push_str(&format!("; {w}"));
        }
        Some(line)
    }

    /// One line for `EXPLAIN ANALYZE FEDERATED`.
    pub(crate) fn summary(&self) -> String {
        let mut line = format!(
            "{} of {} clients took part (threshold {})",
            self.took_part(),
            self.clients.len(),
            self.threshold
        );
        let dropped = self.dropped_list(false);
        if !dropped.is_empty() {
            line.push_str(&format!(": {dropped}"));
        }
        line
    }
}
