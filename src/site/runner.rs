//! The interface a site answers: encoders in, states out.
//!
//! A [`ClientRunner`] is the whole interface between the coordinator and a
//! site: it takes a validated [`Encoder`] and can only answer with a
//! [`StateBatch`]. The embedded site ([`crate::site::local::LocalClient`])
//! and the coordinator's proxy for a worker both implement it.

use std::fmt;

use async_trait::async_trait;

use crate::error::{FedError, Result};
use crate::wire::encoder::{Encoder, StateBatch};
use crate::wire::secure::{MaskRequest, SecureSession, SecureSetup};

/// What runs at one client: encoders in, states out.
#[async_trait]
pub trait ClientRunner: Send + Sync + fmt::Debug {
    /// The client's name (unique within its table).
    fn name(&self) -> &str;
    /// Where its rows are, for `\clients` and messages.
    fn location(&self) -> String;
    /// How its rows are stored (CSV, PARQUET, MEMORY, ...).
    fn format(&self) -> String;
    /// The disclosure policy it enforces, as `\\clients` shows it.
    fn policy(&self) -> String {
        "none".into()
    }
    /// The analyst's spent and total DP budget for `table` at this client;
    /// `None` when the client cannot tell.
    async fn privacy_budget(
        &self,
        _table: &str,
    ) -> Result<Option<crate::site::release::dp::BudgetLine>> {
        Ok(None)
    }

    /// The DP settings the client enforces, when it runs in this process
    /// (a worker's settings are its own, not known to the coordinator).
    fn dp_policy(&self) -> Option<crate::site::release::dp::DpPolicy> {
        None
    }

    /// Whether the client runs in this process (its rounds use this
    /// machine's cores, not a network's latency).
    fn in_process(&self) -> bool {
        false
    }

    /// Whether the client can be reached now, and if not, why (for `\\clients`).
    async fn check_reachable(&self) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Runs the encoder over this client's rows and returns its state.
    async fn encode(&self, encoder: &Encoder) -> Result<StateBatch>;
    /// The physical plan this client would run for the encoder.
    async fn explain(&self, encoder: &Encoder) -> Result<String>;
    /// Drops whatever the client kept in memory for the fit `scope`.
    fn release_fit(&self, _scope: u64) {}
    /// Secure aggregation, step 1 (see [`crate::wire::secure`]): runs the
    /// encoder, keeps its state and a fresh key pair for the session, and
    /// returns the public key and the group keys.
    async fn secure_setup(
        &self,
        _encoder: &Encoder,
        _session: &SecureSession,
    ) -> Result<SecureSetup> {
        Err(unsupported(self.name()))
    }
    /// Secure aggregation, step 2: the kept state, aligned to the
    /// coordinator's groups, with pairwise masks added to its secure columns.
    async fn encode_masked(
        &self,
        _encoder: &Encoder,
        _request: &MaskRequest,
    ) -> Result<StateBatch> {
        Err(unsupported(self.name()))
    }
    /// Runs the encoder as [`ClientRunner::encode`] does, and says what the
    /// exchange cost in bytes (for `EXPLAIN ANALYZE FEDERATED`). An
    /// in-process client sends nothing over a wire; what it hands back is
    /// its state's Arrow buffers.
    async fn encode_with_traffic(&self, encoder: &Encoder) -> Result<(StateBatch, Traffic)> {
        let state = self.encode(encoder).await?;
        let received = state.size_bytes();
        Ok((
            state,
            Traffic {
                sent: None,
                received,
            },
        ))
    }
}

/// The bytes one encoder run moved between the coordinator and a client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent to the client (plan and parameters); `None` for an
    /// in-process client, where nothing crosses a wire.
    pub sent: Option<usize>,
    /// Bytes received from the client (its state).
    pub received: usize,
}

/// The error for a runner that cannot take part in secure aggregation.
fn unsupported(client: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "client '{client}' does not support secure aggregation (secure_sum and friends); use plain sum/count/avg, or run the table's clients with a runner that does"
    ))
}
