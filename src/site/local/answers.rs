//! The [`Site`] contract implemented by the embedded site: names, the
//! privacy budget, the two steps of a secure round, releasing a fit's kept
//! rows, and EXPLAIN, each over the pipeline of [`super::pipeline`].

use async_trait::async_trait;
use datafusion::physical_plan::displayable;

use crate::error::{FedError, Result};
use crate::protocol::encoder::StateBatch;
use crate::protocol::secure::consistency::{ConfirmRequest, ListSignature};
use crate::protocol::secure::{
    MaskRequest, Revealed, SecureLayout, SecureSession, SecureSetup, ShareEnvelope, ShareRequest,
    UnmaskRequest,
};
use crate::protocol::site::{Analyst, BudgetLine, Site, SiteRequest};
use crate::site::release::policy::describe_policy;
use crate::site::release::shown_plan;

use super::client::{LocalClient, Served};

#[async_trait]
impl Site for LocalClient {
    fn name(&self) -> &str {
        &self.name
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn in_process(&self) -> bool {
        true
    }

    fn keeps_budget_per_analyst(&self) -> bool {
        let policy = self.dp.policy();
        policy.budget.is_some() || policy.require_dp
    }

    async fn check_reachable(&self, _analyst: &Analyst) -> std::result::Result<(), String> {
        match self.files.iter().find(|f| !f.is_file()) {
            None => Ok(()),
            Some(_) if self.policy.is_some() => {
                Err("a file is missing (details withheld under its disclosure policy)".into())
            }
            Some(file) => Err(format!("the file {} is missing", file.display())),
        }
    }

    fn format(&self) -> String {
        self.format.clone()
    }

    fn policy(&self) -> String {
        describe_policy(self.policy.as_ref())
    }

    async fn encode(&self, request: &SiteRequest<'_>) -> Result<StateBatch> {
        let plan = self.plain_plan(request.encoder).await?;
        self.run(request, plan, None).await
    }

    async fn privacy_budget(&self, table: &str, analyst: &Analyst) -> Result<Option<BudgetLine>> {
        Ok(Some(self.dp.budget_line(table, analyst.name())))
    }

    fn secure_floor(&self) -> usize {
        self.policy.as_ref().map_or(0, |p| p.min_secure_clients)
    }

    fn secure_federation(&self) -> usize {
        self.federation()
    }

    async fn secure_setup(
        &self,
        request: &SiteRequest<'_>,
        session: &SecureSession,
    ) -> Result<SecureSetup> {
        let encoder = request.encoder;
        self.check_secure_peers()?;
        if let Some(policy) = &self.policy {
            policy.check_secure_session(&self.name, session)?;
        }
        let floor = self.secure_floor();
        if session.threshold < floor {
            return Err(FedError::Policy {
                client: self.name.clone(),
                rule: format!(
                    "a secure sum's threshold must be at least {floor} (its min_secure_clients policy), not {}",
                    session.threshold
                ),
                hint: Some(
                    "raise the threshold (SET fedsql.secure_threshold = t) or leave it unset"
                        .into(),
                ),
            });
        }
        // The session's threshold and DP share count, before anything runs
        // (a refused session spends no ε).
        crate::site::release::secure::check_session(session, self.threshold_floor())?;
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.site_error(e))?;
        let mut layout = SecureLayout::of_plan(&plan.plan).map_err(|e| self.error(e))?;
        if let Some(counts) = &plan.counts {
            layout = layout.without_columns(&counts.all());
        }
        let digest = crate::site::release::secure::encoder_digest(encoder.plan())
            .map_err(|e| self.site_error(e))?;
        // A secure_dp_… call's noise share: 1/d, the session's count
        // (checked above to be at most this site's: 1/t, or 1/(t − c)).
        let state = self.run(request, plan, Some(session.noise_shares)).await?;
        // Under require_secure: only declared keys kept, all announced.
        let declared = self
            .dp
            .declared_secure_groups(
                encoder.plan(),
                state.batch(),
                layout.key_columns,
                &layout.zero_state,
            )
            .map_err(|e| self.site_error(e))?;
        let (state, announced) = match declared {
            Some((rows, keys)) => (
                encoder.accept(&[rows]).map_err(|e| self.error(e))?,
                Some(keys),
            ),
            None => (state, None),
        };
        let mut setup = self
            .secrets
            .setup(session, (&state, digest), layout, self.threshold_floor())
            .map_err(|e| self.site_error(e))?;
        if let Some(keys) = announced {
            setup.group_keys = keys;
        }
        Ok(setup)
    }

    async fn secure_reveal(
        &self,
        _request: &SiteRequest<'_>,
        reveal: &ShareRequest,
    ) -> Result<[u8; 32]> {
        self.check_secure_peers()?;
        self.secrets.reveal(reveal).map_err(|e| self.site_error(e))
    }

    async fn secure_share(
        &self,
        _request: &SiteRequest<'_>,
        share: &ShareRequest,
    ) -> Result<Vec<ShareEnvelope>> {
        self.check_secure_peers()?;
        let min = self.secure_floor();
        let own = self.secrets.identity();
        let admit = |me: usize, neighbours: &[usize]| {
            crate::site::release::secure::check_participants(share, (me, neighbours), own, &self.peers, min).map_err(|rule| {
                FedError::Policy {
                    client: self.name.clone(),
                    rule,
                    hint: Some(
                        "run the round over the sites this one lists as peers, each with its identity key".into(),
                    ),
                }
            })
        };
        self.secrets
            .share(share, self.threshold_floor(), admit)
            .map_err(|e| self.site_error(e))
    }

    async fn encode_masked(
        &self,
        request: &SiteRequest<'_>,
        mask: &MaskRequest,
    ) -> Result<StateBatch> {
        self.check_secure_peers()?;
        let min = self.secure_floor();
        let admit = |taking_part: usize| {
            if taking_part < min {
                return Err(FedError::Policy {
                    client: self.name.clone(),
                    rule: format!(
                        "a secure sum needs at least {min} participants (its min_secure_clients policy)"
                    ),
                    hint: Some("run the query over more clients, or use plain aggregates".into()),
                });
            }
            Ok(())
        };
        self.secrets
            .mask(request.encoder, mask, admit)
            .map_err(|e| self.site_error(e))
    }

    async fn secure_confirm(
        &self,
        _request: &SiteRequest<'_>,
        confirm: &ConfirmRequest,
    ) -> Result<ListSignature> {
        self.check_secure_peers()?;
        self.secrets
            .confirm(confirm)
            .map_err(|e| self.site_error(e))
    }

    async fn secure_unmask(
        &self,
        _request: &SiteRequest<'_>,
        unmask: &UnmaskRequest,
    ) -> Result<Vec<Revealed>> {
        self.check_secure_peers()?;
        self.secrets
            .unmask(unmask, &self.peers)
            .map_err(|e| self.site_error(e))
    }

    fn release_fit(&self, scope: u64, _analyst: &Analyst) {
        self.kept.release(scope);
    }

    async fn explain(&self, request: &SiteRequest<'_>) -> Result<String> {
        let plan = self
            .physical_plan(request.encoder)
            .await
            .map_err(|e| self.site_error(e))?;
        // What a worker answers, or a site under a policy shows, names
        // none of its files; the analyst's own files are shown as they are.
        if self.served != Served::InProcess || self.policy.is_some() {
            return Ok(shown_plan::without_files(&plan.plan, &self.files));
        }
        Ok(displayable(plan.plan.as_ref()).indent(false).to_string())
    }
}
