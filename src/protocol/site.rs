//! The interface a site answers: requests in, states out.
//!
//! A [`Site`] is the whole interface between the coordinator and a site:
//! it takes a [`SiteRequest`] — a validated [`Encoder`] and the
//! [`Analyst`] it runs for — and can only answer with a [`StateBatch`].
//! The analyst travels in the request, so no call reaches a site without
//! one: an in-process site debits that analyst's DP ledger, and the
//! coordinator's proxy for a worker sends that analyst's token (the worker
//! then keys its ledger by the token's name, whatever the request says).
//! The embedded site (the site folder's `LocalClient`) and the
//! coordinator's proxy for a worker both implement it.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{FedError, Result};
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::secure::consistency::{ConfirmRequest, ListSignature};
use crate::protocol::secure::{
    MaskRequest, Revealed, SecureSession, SecureSetup, ShareEnvelope, ShareRequest, UnmaskRequest,
};

/// The analyst an in-process site's ledger is kept for when the session
/// names no user (the REPL, a script, `fedsql serve` without `--users`
/// before the connection's user is known).
pub const SESSION_ANALYST: &str = "session";

/// Who a request runs for.
#[derive(Clone, PartialEq, Eq)]
pub struct Analyst {
    name: String,
    credential: Credential,
}

/// The worker token the calls of an analyst carry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// The table's own token (`token_file` of its OPTIONS).
    Table,
    /// The analyst's own token (`fedsql serve --users`).
    Own(Arc<str>),
    /// The analyst must use a token of their own and has none: every call
    /// to a worker is refused.
    Missing,
}

impl Analyst {
    /// The session's analyst ([`SESSION_ANALYST`]), calling workers with the
    /// tables' tokens.
    pub fn session() -> Self {
        Self::named(SESSION_ANALYST)
    }

    /// An analyst of that name, calling workers with the tables' tokens.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            credential: Credential::Table,
        }
    }

    /// The same analyst, calling workers with `credential`.
    pub fn with_credential(mut self, credential: Credential) -> Self {
        self.credential = credential;
        self
    }

    /// The analyst's name: whose DP ledger an in-process site debits.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The token of a worker call: the analyst's own, else the table's;
    /// refused when the analyst must have one of their own and has none.
    pub fn token_for_call(&self, table_token: &str) -> Result<Arc<str>> {
        match &self.credential {
            Credential::Table => Ok(Arc::from(table_token)),
            Credential::Own(token) => Ok(Arc::clone(token)),
            Credential::Missing => Err(missing_token(&self.name)),
        }
    }

    /// Whether the analyst's calls carry a token of their own (or must).
    pub fn has_own_credential(&self) -> bool {
        self.credential != Credential::Table
    }
}

impl fmt::Debug for Analyst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credential = match self.credential {
            Credential::Table => "table token",
            Credential::Own(_) => "own token <hidden>",
            Credential::Missing => "no token",
        };
        write!(f, "Analyst({}, {credential})", self.name)
    }
}

/// The refusal of a worker call for a user without a token of their own.
fn missing_token(user: &str) -> FedError {
    FedError::InvalidArgument(format!(
        "pg user `{user}` has no worker token of their own, and through `fedsql serve --users` \
         every user queries workers with their own token (the worker keeps a privacy budget per token): \
         set `token_file` in the users file's `[users.{user}]` table"
    ))
}

/// One call of a site: the encoder to run and the analyst it runs for.
#[derive(Debug, Clone, Copy)]
pub struct SiteRequest<'a> {
    /// The validated encoder.
    pub encoder: &'a Encoder,
    /// Who asks.
    pub analyst: &'a Analyst,
}

impl<'a> SiteRequest<'a> {
    /// A request to run `encoder` for `analyst`.
    pub fn new(encoder: &'a Encoder, analyst: &'a Analyst) -> Self {
        Self { encoder, analyst }
    }
}

/// What `SHOW PRIVACY BUDGET` shows for one site.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetLine {
    /// The analyst's total ε for the table; `None`: unlimited.
    pub budget: Option<f64>,
    /// What the analyst has spent.
    pub spent: f64,
}

/// What runs at one client: encoders in, states out.
#[async_trait]
pub trait Site: Send + Sync + fmt::Debug {
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
    async fn privacy_budget(&self, _table: &str, _analyst: &Analyst) -> Result<Option<BudgetLine>> {
        Ok(None)
    }

    /// Whether the client runs in this process and keeps a DP budget per
    /// analyst (`dp_budget`) or answers only DP (`require_dp`): a worker's
    /// settings are its own, not known to the coordinator.
    fn keeps_budget_per_analyst(&self) -> bool {
        false
    }

    /// Whether the client runs in this process (its rounds use this
    /// machine's cores, not a network's latency).
    fn in_process(&self) -> bool {
        false
    }

    /// Whether the client can be reached now, and if not, why (for `\\clients`).
    async fn check_reachable(&self, _analyst: &Analyst) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Runs the request's encoder over this client's rows and returns its state.
    async fn encode(&self, request: &SiteRequest<'_>) -> Result<StateBatch>;
    /// The physical plan this client would run for the request's encoder.
    async fn explain(&self, request: &SiteRequest<'_>) -> Result<String>;
    /// Drops whatever the client kept in memory for the fit `scope`.
    fn release_fit(&self, _scope: u64, _analyst: &Analyst) {}
    /// The least threshold of a secure round this site accepts, when the
    /// coordinator can know it (its min_secure_clients); 0 otherwise.
    fn secure_floor(&self) -> usize {
        0
    }
    /// When this site checks a secure round's participants against listed
    /// peers and the coordinator can know it: the size of the federation
    /// they make, its own identity included (it then accepts only a
    /// threshold above two thirds of a round's sites, and above (n + c)/2
    /// for the colluders such a federation may hold); 0 otherwise.
    fn secure_federation(&self) -> usize {
        0
    }
    /// Secure aggregation, step 1 (see [`crate::protocol::secure`]): runs the
    /// encoder, keeps its state and fresh keys for the session, and returns
    /// the public keys and the group keys.
    async fn secure_setup(
        &self,
        _request: &SiteRequest<'_>,
        _session: &SecureSession,
    ) -> Result<SecureSetup> {
        Err(unsupported(self.name()))
    }
    /// Secure aggregation, between steps 1 and 2 of a sparse round: the
    /// site's graph nonce, revealed once every site's keys (`reveal`, a
    /// request without nonces) are fixed (see
    /// [`crate::protocol::secure::graph`]).
    async fn secure_reveal(
        &self,
        _request: &SiteRequest<'_>,
        _reveal: &ShareRequest,
    ) -> Result<[u8; 32]> {
        Err(unsupported(self.name()))
    }
    /// Secure aggregation, step 2: the site's shares of its secrets, each
    /// sealed to the site it is for.
    async fn secure_share(
        &self,
        _request: &SiteRequest<'_>,
        _share: &ShareRequest,
    ) -> Result<Vec<ShareEnvelope>> {
        Err(unsupported(self.name()))
    }
    /// Secure aggregation, step 3: the kept state, aligned to the
    /// coordinator's groups, with its self mask and pairwise masks added to
    /// its secure columns.
    async fn encode_masked(
        &self,
        _request: &SiteRequest<'_>,
        _mask: &MaskRequest,
    ) -> Result<StateBatch> {
        Err(unsupported(self.name()))
    }
    /// Secure aggregation, step 4: the site's signature of the survivor
    /// list (see [`crate::protocol::secure::consistency`]).
    async fn secure_confirm(
        &self,
        _request: &SiteRequest<'_>,
        _confirm: &ConfirmRequest,
    ) -> Result<ListSignature> {
        Err(unsupported(self.name()))
    }
    /// Secure aggregation, step 5: the shares that unmask the survivors' sum.
    async fn secure_unmask(
        &self,
        _request: &SiteRequest<'_>,
        _unmask: &UnmaskRequest,
    ) -> Result<Vec<Revealed>> {
        Err(unsupported(self.name()))
    }
    /// Runs the encoder as [`Site::encode`] does, and says what the
    /// exchange cost in bytes (for `EXPLAIN ANALYZE FEDERATED`). An
    /// in-process client sends nothing over a wire; what it hands back is
    /// its state's Arrow buffers.
    async fn encode_with_traffic(
        &self,
        request: &SiteRequest<'_>,
    ) -> Result<(StateBatch, Traffic)> {
        let state = self.encode(request).await?;
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
