//! The worker's answers that go beyond one encoder's state: how a site's
//! error crosses the wire, the secure-aggregation setup and masked states,
//! and EXPLAIN.

use prost::Message;
use tonic::Status;

use super::audited::{Outcome, describe};
use super::calls::{Checked, WorkerService, aggregate_names};
use crate::error::{FedError, Result};
use crate::protocol::flight::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_SECURE_CONFIRM, ACTION_SECURE_REVEAL,
    ACTION_SECURE_SETUP, ACTION_SECURE_SHARE, ACTION_SECURE_UNMASK, EncodeMaskedRequest,
    EncodeRequest, EnvelopeMessage, KeysMessage, POLICY_REFUSAL, RevealedMessage,
    SecureConfirmReply, SecureConfirmRequest, SecureRevealReply, SecureSetupReply,
    SecureSetupRequest, SecureShareReply, SecureShareRequest, SecureUnmaskReply,
    SecureUnmaskRequest, SessionMessage, batch_from_ipc, batch_to_ipc,
};
use crate::protocol::secure::consistency::ConfirmRequest;
use crate::protocol::secure::{MaskRequest, SecureSession, ShareRequest, UnmaskRequest};
use crate::protocol::site::{Analyst, Site, SiteRequest};
use crate::site::release::dp_budget::LEDGER_WRITE_FAILED;
use crate::site::release::policy::error_kind;

impl WorkerService {
    /// How a site's error crosses the wire, refused and logged: a policy
    /// refusal as a refusal the coordinator can name (rule and hint), a
    /// plan refusal as it is; any other error as its kind and a reference
    /// to the full message in this worker's log — never data values, row
    /// text or the worker's paths.
    pub(super) fn site_status(&self, peer: &str, call: &str, table: &str, e: FedError) -> Status {
        let status = match e {
            FedError::Policy { rule, hint, .. } => Status::permission_denied(format!(
                "{POLICY_REFUSAL}{rule}{}",
                hint.map(|h| format!("\nhint: {h}")).unwrap_or_default()
            )),
            refused @ FedError::Refused { .. } => Status::permission_denied(refused.to_string()),
            // Under a policy: the same words for every failure; the detail
            // stays in this worker's log, found by a reference that carries
            // nothing of the failure.
            FedError::Withheld { detail } => {
                let reference = format!("{:08x}", rand::random::<u32>());
                self.log(
                    peer,
                    &format!("error {reference} (table={table}): {detail}"),
                );
                Status::permission_denied(format!(
                    "refused: {} (reference {reference} in the worker's log)",
                    crate::error::EVALUATION_REFUSAL
                ))
            }
            // The ledger could not be written (a full or read-only disk):
            // nothing about the rows, and the data owner has to act. The
            // query is refused before it runs; the path stays in the log.
            other if other.to_string().contains(LEDGER_WRITE_FAILED) => {
                self.log(peer, &format!("error (table={table}): {other}"));
                Status::unavailable(
                    "this worker answers no DP query it cannot debit: its privacy-budget ledger cannot be written
hint: ask the data owner to check the worker's --dp-ledger file and its disk",
                )
            }
            other => {
                let full = other.to_string();
                let reference = format!("{:08x}", rand::random::<u32>());
                self.log(peer, &format!("error {reference} (table={table}): {full}"));
                Status::internal(format!(
                    "{} error in table `{table}` (reference {reference}: the full message is in the worker's log)",
                    error_kind(&full)
                ))
            }
        };
        self.refuse(peer, call, status)
    }

    /// Refuses (and logs) a request that does not decode.
    pub(super) fn malformed(&self, peer: &str, call: &str, e: impl std::fmt::Display) -> Status {
        self.refuse(
            peer,
            call,
            Status::invalid_argument(format!("malformed request: {e}")),
        )
    }

    /// A secure-aggregation request's session, and its encoder checked as
    /// every encoder is.
    pub(super) async fn check_secure(
        &self,
        (peer, analyst): (&str, &Analyst),
        call: &str,
        encode: Option<EncodeRequest>,
        session: Option<SessionMessage>,
    ) -> Result<(Checked, SecureSession), Status> {
        let encode = encode.ok_or_else(|| self.malformed(peer, call, "no encoder"))?;
        let session = session
            .ok_or_else(|| self.malformed(peer, call, "no session"))?
            .session()
            .map_err(|e| self.malformed(peer, call, e))?;
        let started = std::time::Instant::now();
        let checked = match self.check(&encode, analyst).await {
            Ok(checked) => checked,
            Err(status) => {
                let status = self.refuse(peer, call, status);
                self.record(
                    (peer, analyst),
                    started,
                    Outcome {
                        refusal: Some(&status),
                        ..Outcome::default()
                    },
                )?;
                return Err(status);
            }
        };
        let described = describe(checked.encoder.plan(), encode.fit_scope.is_some());
        if let Err((status, pending)) = self.approval(analyst, &checked.table.name, &described) {
            let status = self.refuse(peer, call, status);
            self.record(
                (peer, analyst),
                started,
                Outcome {
                    table: &checked.table.name,
                    described: Some(&described),
                    refusal: Some(&status),
                    pending,
                    ..Outcome::default()
                },
            )?;
            return Err(status);
        }
        Ok((checked, session))
    }

    /// The physical plan an encoder would run here, for `EXPLAIN FEDERATED`.
    pub(super) async fn explain(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let encode = self.decode_request(peer, ACTION_EXPLAIN, body)?;
        let checked = match self.check(&encode, analyst).await {
            Ok(checked) => checked,
            Err(status) => return Err(self.refuse(peer, ACTION_EXPLAIN, status)),
        };
        let text = checked
            .client
            .explain(&SiteRequest::new(&checked.encoder, analyst))
            .await
            .map_err(|e| self.site_status(peer, ACTION_EXPLAIN, &checked.table.name, e))?;
        self.log(peer, &format!("table={}: explain", checked.table.name));
        Ok(text.into_bytes())
    }

    /// Secure aggregation, step 1: checks the encoder, runs it, keeps its
    /// state with a fresh key pair, and answers with the public key and
    /// the group keys.
    pub(super) async fn secure_setup(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_SETUP;
        let request =
            SecureSetupRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure((peer, analyst), call, request.encode, request.session)
            .await?;
        let setup = checked
            .client
            .secure_setup(&SiteRequest::new(&checked.encoder, analyst), &session)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: key pair made for [{}], {} group key(s) sent, state kept",
                checked.table.name,
                session.id_hex(),
                aggregate_names(checked.encoder.plan()),
                setup.group_keys.num_rows()
            ),
        );
        let group_keys =
            batch_to_ipc(&setup.group_keys).map_err(|e| Status::internal(e.to_string()))?;
        Ok(SecureSetupReply {
            keys: Some(KeysMessage::of(&setup.keys)),
            group_keys,
        }
        .encode_to_vec())
    }

    /// The relayed keys (and nonces) of a sparse round's reveal or of step
    /// 2, checked as every secure step's request is.
    async fn share_request(
        &self,
        (peer, analyst): (&str, &Analyst),
        call: &str,
        body: &[u8],
    ) -> Result<(Checked, ShareRequest), Status> {
        let request =
            SecureShareRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let keys = request.keys().map_err(|e| self.malformed(peer, call, e))?;
        let nonces = request
            .nonces()
            .map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure((peer, analyst), call, request.encode, request.session)
            .await?;
        Ok((
            checked,
            ShareRequest {
                session,
                keys,
                nonces,
            },
        ))
    }

    /// Secure aggregation, between steps 1 and 2 of a sparse round: this
    /// site's graph nonce.
    pub(super) async fn secure_reveal(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_REVEAL;
        let (checked, reveal) = self.share_request((peer, analyst), call, body).await?;
        let nonce = checked
            .client
            .secure_reveal(&SiteRequest::new(&checked.encoder, analyst), &reveal)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: graph nonce revealed",
                checked.table.name,
                reveal.session.id_hex()
            ),
        );
        Ok(SecureRevealReply {
            nonce: nonce.to_vec(),
        }
        .encode_to_vec())
    }

    /// Secure aggregation, step 2: this site's shares, sealed to the others.
    pub(super) async fn secure_share(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_SHARE;
        let (checked, share) = self.share_request((peer, analyst), call, body).await?;
        let envelopes = checked
            .client
            .secure_share(&SiteRequest::new(&checked.encoder, analyst), &share)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: {} sealed share envelope(s) sent",
                checked.table.name,
                share.session.id_hex(),
                envelopes.len()
            ),
        );
        Ok(SecureShareReply {
            envelopes: envelopes.iter().map(EnvelopeMessage::of).collect(),
        }
        .encode_to_vec())
    }

    /// Secure aggregation, step 4: this site's signature of the survivor
    /// list.
    pub(super) async fn secure_confirm(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_CONFIRM;
        let request =
            SecureConfirmRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure((peer, analyst), call, request.encode, request.session)
            .await?;
        let confirm = ConfirmRequest {
            session,
            survivors: request.survivors,
        };
        let signed = checked
            .client
            .secure_confirm(&SiteRequest::new(&checked.encoder, analyst), &confirm)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: survivor list of {} site(s) signed",
                checked.table.name,
                confirm.session.id_hex(),
                confirm.survivors.len()
            ),
        );
        Ok(SecureConfirmReply::of(&signed).encode_to_vec())
    }

    /// Secure aggregation, step 5: the shares that unmask the survivors' sum.
    pub(super) async fn secure_unmask(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_SECURE_UNMASK;
        let request =
            SecureUnmaskRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure((peer, analyst), call, request.encode, request.session)
            .await?;
        let signatures = request
            .signatures
            .iter()
            .map(SecureConfirmReply::signature)
            .collect::<crate::error::Result<Vec<_>>>()
            .map_err(|e| self.malformed(peer, call, e))?;
        let unmask = UnmaskRequest {
            session,
            survivors: request.survivors,
            signatures,
        };
        let shares = checked
            .client
            .secure_unmask(&SiteRequest::new(&checked.encoder, analyst), &unmask)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: {} share(s) revealed for {} survivor(s)",
                checked.table.name,
                unmask.session.id_hex(),
                shares.len(),
                unmask.survivors.len()
            ),
        );
        Ok(SecureUnmaskReply {
            shares: shares.iter().map(RevealedMessage::of).collect(),
        }
        .encode_to_vec())
    }

    /// Secure aggregation, step 2: the kept state, aligned to the
    /// coordinator's groups and masked.
    pub(super) async fn encode_masked(
        &self,
        (peer, analyst): (&str, &Analyst),
        body: &[u8],
    ) -> Result<Vec<u8>, Status> {
        let call = ACTION_ENCODE_MASKED;
        let started = std::time::Instant::now();
        let request =
            EncodeMaskedRequest::decode(body).map_err(|e| self.malformed(peer, call, e))?;
        let groups = batch_from_ipc(&request.groups).map_err(|e| self.malformed(peer, call, e))?;
        let (checked, session) = self
            .check_secure((peer, analyst), call, request.encode, request.session)
            .await?;
        let mask = MaskRequest {
            session,
            envelopes: request
                .envelopes
                .iter()
                .map(EnvelopeMessage::envelope)
                .collect(),
            groups,
        };
        let state = checked
            .client
            .encode_masked(&SiteRequest::new(&checked.encoder, analyst), &mask)
            .await
            .map_err(|e| self.site_status(peer, call, &checked.table.name, e))?;
        let described = describe(checked.encoder.plan(), false);
        self.record(
            (peer, analyst),
            started,
            Outcome {
                table: &checked.table.name,
                described: Some(&described),
                groups: state.batch().num_rows() as u64,
                bytes: state.size_bytes() as u64,
                ..Outcome::default()
            },
        )?;
        self.log(
            peer,
            &format!(
                "table={}: secure session {}: released {} masked state row(s) of [{}], {} bytes",
                checked.table.name,
                mask.session.id_hex(),
                state.batch().num_rows(),
                aggregate_names(checked.encoder.plan()),
                state.size_bytes()
            ),
        );
        batch_to_ipc(state.batch()).map_err(|e| Status::internal(e.to_string()))
    }
}
