//! [`RemoteClient`]: a client that is a `fedsql worker` on another machine.
//!
//! It implements [`Site`] over Arrow Flight: an encoder travels as
//! its serialized logical plan (see [`crate::protocol::codec`]) with the fit it
//! belongs to, and the state batch comes back as Arrow IPC. Every call
//! carries the worker's token and runs under the client's timeout; any
//! failure — unreachable, refused, timed out, cut off mid-answer — is a
//! [`FedError::Client`] naming this client, and the round fails as a whole
//! (no partial result). A call is sent again only when it never left: its
//! connection could not be made ([`never_sent`]). One that timed out, was
//! cut off or may otherwise have reached the worker is not, since the
//! worker could be running it still (and would do its work twice).

use std::fmt;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightData, FlightDescriptor, Ticket};
use async_trait::async_trait;
use datafusion::arrow::datatypes::Schema;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::coordinator::worker_url::{RemoteOptions, WorkerUrl};
use crate::error::{FedError, Result};
use crate::protocol::codec;
use crate::protocol::encoder::{Encoder, StateBatch};
use crate::protocol::flight::{
    ACTION_ENCODE_MASKED, ACTION_EXPLAIN, ACTION_PRIVACY_BUDGET, ACTION_RELEASE_FIT,
    ACTION_SECURE_CONFIRM, ACTION_SECURE_REVEAL, ACTION_SECURE_SETUP, ACTION_SECURE_SHARE,
    ACTION_SECURE_UNMASK, AUTHORIZATION, BEARER, EncodeMaskedRequest, EncodeRequest,
    EnvelopeMessage, FEDERATION_KEY, HAS_ROWS_KEY, KeysMessage, MAX_MESSAGE_BYTES, MaybeKeys,
    POLICY_KEY, POLICY_REFUSAL, POSITIONAL_KEY, ReleaseFit, SecureConfirmReply,
    SecureConfirmRequest, SecureRevealReply, SecureSetupReply, SecureSetupRequest,
    SecureShareReply, SecureShareRequest, SecureUnmaskReply, SecureUnmaskRequest, SessionMessage,
    TicketCommand, batch_from_ipc, batch_to_ipc, ticket_command,
};
use crate::protocol::secure::consistency::{ConfirmRequest, ListSignature};
use crate::protocol::secure::{
    MaskRequest, Revealed, SecureSession, SecureSetup, ShareEnvelope, ShareRequest, UnmaskRequest,
};
use crate::protocol::site::{Analyst, BudgetLine, Site, SiteRequest, Traffic};
use crate::site::files::ObservedSchema;

/// Whether the server at `host:port` answers an HTTP/2 greeting with a TLS
/// record (an alert): it expects a TLS handshake first.
async fn speaks_tls(host: &str, port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        // 0x15: a TLS alert record; 0x16: a handshake record.
        Some(matches!(first[0], 0x15 | 0x16))
    };
    tokio::time::timeout(std::time::Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// The causes under a status, as `: cause: cause`.
fn error_chain(status: &Status) -> String {
    let mut out = String::new();
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        out.push_str(&format!(": {e}"));
        source = e.source();
    }
    out
}

/// Whether a failed call never reached the worker: its connection could
/// not be made (refused, unreachable, its TLS handshake failed), so the
/// request was never sent. Tonic says so by a [`tonic::ConnectError`] among
/// the status's causes; a timeout, a cancellation or a connection cut
/// after the request went out has none.
fn never_sent(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A client served by a remote worker.
pub(crate) struct RemoteClient {
    name: String,
    url: WorkerUrl,
    options: RemoteOptions,
    channel: Channel,
    /// The policy the worker announced with its schema.
    policy: std::sync::Mutex<String>,
    /// The federation its schema announced its peers make (0: none).
    federation: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for RemoteClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteClient({} at {})", self.name, self.url)
    }
}

impl RemoteClient {
    /// A client for the worker at `url` (connections are made on first use
    /// and remade after a failure).
    pub(crate) fn new(name: &str, url: WorkerUrl, options: RemoteOptions) -> Result<Self> {
        let error = |message: String| FedError::Client {
            client: name.to_string(),
            location: url.to_string(),
            message,
        };
        let mut endpoint = Endpoint::from_shared(url.endpoint())
            .map_err(|e| error(format!("not a worker address: {e}")))?
            .connect_timeout(options.timeout)
            .timeout(options.timeout)
            .tcp_nodelay(true);
        if url.tls {
            let ca = options.ca_cert.as_ref().ok_or_else(|| {
                error(
                    "grpcs:// needs the certificate authority that signed the worker's certificate: OPTIONS ('ca_cert' 'ca.pem')".into(),
                )
            })?;
            endpoint = endpoint
                .tls_config(
                    ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(ca))
                        .domain_name(url.host.clone()),
                )
                .map_err(|e| error(format!("TLS setup failed: {e}")))?;
        }
        Ok(Self {
            name: name.to_string(),
            channel: endpoint.connect_lazy(),
            url,
            options,
            policy: std::sync::Mutex::new("unknown (not yet asked)".into()),
            federation: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn error(&self, message: impl fmt::Display) -> FedError {
        FedError::Client {
            client: self.name.clone(),
            location: self.url.to_string(),
            message: message.to_string(),
        }
    }

    /// What a failed call means, for the user.
    fn status_error(&self, status: &Status, analyst: &Analyst) -> FedError {
        let message = status.message();
        if matches!(
            status.code(),
            Code::PermissionDenied | Code::ResourceExhausted
        ) && let Some(refusal) = message.strip_prefix(POLICY_REFUSAL)
        {
            let (rule, hint) = match refusal.split_once("\nhint: ") {
                Some((rule, hint)) => (rule, Some(hint.to_string())),
                None => (refusal, None),
            };
            return FedError::Policy {
                client: self.name.clone(),
                rule: rule.to_string(),
                hint,
            };
        }
        self.error(match status.code() {
            Code::Unauthenticated => match analyst.has_own_credential() {
                true => format!(
                    "the worker refused our token ({message}); check the user's token_file in the users file"
                ),
                false => format!(
                    "the worker refused our token ({message}); check the table's token_file option"
                ),
            },
            Code::PermissionDenied => format!("the worker refused the plan: {message}"),
            Code::Unavailable => format!("worker unreachable: {message}"),
            Code::DeadlineExceeded | Code::Cancelled => format!(
                "no answer within {:?} ({message}); the timeout option sets the limit",
                self.options.timeout
            ),
            Code::NotFound => format!("worker: {message}"),
            code => format!("worker error ({code:?}): {message}{}", error_chain(status)),
        })
    }

    /// A failed first call, with the likeliest cause of a transport
    /// failure named: a scheme that does not match the worker's TLS.
    async fn connection_error(&self, status: &Status, analyst: &Analyst) -> FedError {
        let detail = format!("{}{}", status.message(), error_chain(status));
        let transport = matches!(status.code(), Code::Unknown | Code::Unavailable)
            && detail.contains("transport error");
        // A plain HTTP/2 client reading a TLS record fails as a transport
        // error, or (depending on the record's first bytes) as an HTTP/2
        // framing error with status Internal.
        let framing =
            detail.contains("h2 protocol error") || detail.contains("frame with invalid size");
        if (transport || framing)
            && !self.url.tls
            && speaks_tls(&self.url.host, self.url.port).await
        {
            return self.error(format!(
                "the worker speaks TLS: use grpcs://{}:{} (and OPTIONS ('ca_cert' 'ca.pem'))",
                self.url.host, self.url.port
            ));
        }
        let tls_mismatch = [
            "InvalidContentType",
            "corrupt message",
            "wrong version number",
        ];
        if transport && self.url.tls && tls_mismatch.iter().any(|m| detail.contains(m)) {
            return self.error(format!(
                "the worker does not speak TLS: use grpc://{}:{}",
                self.url.host, self.url.port
            ));
        }
        self.status_error(status, analyst)
    }

    fn flight_error(&self, e: FlightError, analyst: &Analyst) -> FedError {
        match e {
            FlightError::Tonic(status) => self.status_error(&status, analyst),
            other => self.error(format!("bad answer from the worker: {other}")),
        }
    }

    /// A call for `analyst`: with their token (or the table's).
    fn request<T>(&self, message: T, analyst: &Analyst) -> Result<Request<T>> {
        let mut request = Request::new(message);
        let token = analyst.token_for_call(&self.options.token)?;
        let value = MetadataValue::try_from(format!("{BEARER}{token}"))
            .map_err(|_| self.error("the token is not a valid header value"))?;
        request.metadata_mut().insert(AUTHORIZATION, value);
        request.set_timeout(self.options.timeout);
        Ok(request)
    }

    fn flight(&self) -> FlightServiceClient<Channel> {
        FlightServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Runs `call` under the client's timeout.
    async fn timed<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.options.timeout, call)
            .await
            .map_err(|_| {
                self.error(format!(
                    "no answer within {:?}; the timeout option sets the limit",
                    self.options.timeout
                ))
            })?
    }

    /// The served table's schema, as the worker sees its files.
    pub(crate) async fn observe_schema(&self, analyst: &Analyst) -> Result<ObservedSchema> {
        self.timed(async {
            let descriptor = FlightDescriptor::new_path(vec![self.url.table.clone()]);
            let request = self.request(descriptor, analyst)?;
            let result = match self.flight().get_schema(request).await {
                Ok(result) => result.into_inner(),
                Err(status) => return Err(self.connection_error(&status, analyst).await),
            };
            let schema = Schema::try_from(&result)
                .map_err(|e| self.error(format!("bad schema from the worker: {e}")))?;
            let flag = |key: &str| schema.metadata().get(key).is_some_and(|v| v == "true");
            if let Some(policy) = schema.metadata().get(POLICY_KEY) {
                *self.policy.lock().expect("not poisoned") = policy.clone();
            }
            let federation = schema
                .metadata()
                .get(FEDERATION_KEY)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            self.federation
                .store(federation, std::sync::atomic::Ordering::Relaxed);
            Ok(ObservedSchema {
                client: self.name.clone(),
                file: self.url.to_string(),
                has_rows: flag(HAS_ROWS_KEY),
                positional: flag(POSITIONAL_KEY),
                na_text: Vec::new(),
                schema: Schema::new(schema.fields().clone()),
            })
        })
        .await
    }

    /// Runs a named action and returns the bodies of its results, joined.
    async fn action(&self, name: &str, body: Vec<u8>, analyst: &Analyst) -> Result<Vec<u8>> {
        let action = Action {
            r#type: name.into(),
            body: body.into(),
        };
        let request = self.request(action, analyst)?;
        let mut results = self
            .flight()
            .do_action(request)
            .await
            .map_err(|s| self.status_error(&s, analyst))?
            .into_inner();
        let mut answer = Vec::new();
        while let Some(result) = results.next().await {
            let result = result.map_err(|s| self.status_error(&s, analyst))?;
            answer.extend_from_slice(&result.body);
        }
        Ok(answer)
    }

    async fn encode_request(&self, encoder: &Encoder) -> Result<EncodeRequest> {
        let plan = codec::plan_to_bytes(encoder.plan(), &self.url.table)
            .await
            .map_err(|e| self.error(e))?;
        Ok(EncodeRequest {
            plan,
            fit_scope: encoder.fit_scope(),
        })
    }
}

impl RemoteClient {
    /// The body of a sparse round's reveal and of step 2.
    async fn share_body(&self, request: &SiteRequest<'_>, share: &ShareRequest) -> Result<Vec<u8>> {
        Ok(SecureShareRequest {
            encode: Some(self.encode_request(request.encoder).await?),
            session: Some(SessionMessage::of(&share.session)),
            keys: share
                .keys
                .iter()
                .map(|k| MaybeKeys {
                    keys: k.as_ref().map(KeysMessage::of),
                })
                .collect(),
            nonces: SecureShareRequest::nonces_of(&share.nonces),
        }
        .encode_to_vec())
    }
}

#[async_trait]
impl Site for RemoteClient {
    fn name(&self) -> &str {
        &self.name
    }

    fn location(&self) -> String {
        self.url.to_string()
    }

    fn policy(&self) -> String {
        self.policy.lock().expect("not poisoned").clone()
    }

    fn format(&self) -> String {
        if self.url.tls {
            "WORKER (TLS)"
        } else {
            "WORKER"
        }
        .into()
    }

    async fn check_reachable(&self, analyst: &Analyst) -> std::result::Result<(), String> {
        match self.observe_schema(analyst).await {
            Ok(_) => Ok(()),
            Err(FedError::Client { message, .. }) => Err(message),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn encode(&self, request: &SiteRequest<'_>) -> Result<StateBatch> {
        Ok(self.encode_with_traffic(request).await?.0)
    }

    async fn encode_with_traffic(
        &self,
        request: &SiteRequest<'_>,
    ) -> Result<(StateBatch, Traffic)> {
        let (encoder, analyst) = (request.encoder, request.analyst);
        self.timed(async {
            let ticket = TicketCommand {
                command: Some(ticket_command::Command::Encode(
                    self.encode_request(encoder).await?,
                )),
            }
            .encode_to_vec();
            let sent = ticket.len();
            let ticket = Ticket {
                ticket: ticket.into(),
            };
            let mut answer = self
                .flight()
                .do_get(self.request(ticket.clone(), analyst)?)
                .await;
            // A request that never left (its connection could not be made:
            // a worker restarting) is sent once more, on a connection made
            // anew; one that may have reached the worker never is.
            if answer.as_ref().is_err_and(never_sent) {
                answer = self.flight().do_get(self.request(ticket, analyst)?).await;
            }
            let stream = answer
                .map_err(|s| self.status_error(&s, analyst))?
                .into_inner();
            let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = std::sync::Arc::clone(&received);
            let counted = stream
                .inspect_ok(move |data: &FlightData| {
                    counter.fetch_add(
                        data.data_header.len() + data.data_body.len() + data.app_metadata.len(),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                })
                .map_err(FlightError::from);
            let batches: Vec<_> = FlightRecordBatchStream::new_from_flight_data(counted)
                .try_collect()
                .await
                .map_err(|e| self.flight_error(e, analyst))?;
            let state = encoder.accept(&batches).map_err(|e| self.error(e))?;
            let traffic = Traffic {
                sent: Some(sent),
                received: received.load(std::sync::atomic::Ordering::Relaxed),
            };
            Ok((state, traffic))
        })
        .await
    }

    async fn explain(&self, request: &SiteRequest<'_>) -> Result<String> {
        self.timed(async {
            let body = self.encode_request(request.encoder).await?.encode_to_vec();
            let text = self.action(ACTION_EXPLAIN, body, request.analyst).await?;
            Ok(format!(
                "(at worker {})\n{}",
                self.url,
                String::from_utf8_lossy(&text)
            ))
        })
        .await
    }

    async fn privacy_budget(&self, _table: &str, analyst: &Analyst) -> Result<Option<BudgetLine>> {
        self.timed(async {
            let body = self.url.table.clone().into_bytes();
            let text = self.action(ACTION_PRIVACY_BUDGET, body, analyst).await?;
            let text = String::from_utf8_lossy(&text);
            let mut parts = text.split_whitespace();
            let budget = parts.next().and_then(|b| b.parse::<f64>().ok());
            let spent = parts
                .next()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
            Ok(Some(BudgetLine { budget, spent }))
        })
        .await
    }

    /// The worker's min_secure_clients, as its schema announced its policy.
    fn secure_floor(&self) -> usize {
        let policy = self.policy.lock().expect("not poisoned").clone();
        policy
            .split(',')
            .filter_map(|part| part.trim().strip_prefix("min_secure_clients="))
            .find_map(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The federation the worker's schema announced its peers make.
    fn secure_federation(&self) -> usize {
        self.federation.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn secure_setup(
        &self,
        request: &SiteRequest<'_>,
        session: &SecureSession,
    ) -> Result<SecureSetup> {
        self.timed(async {
            let body = SecureSetupRequest {
                encode: Some(self.encode_request(request.encoder).await?),
                session: Some(SessionMessage::of(session)),
            }
            .encode_to_vec();
            let answer = self
                .action(ACTION_SECURE_SETUP, body, request.analyst)
                .await?;
            let reply = SecureSetupReply::decode(answer.as_slice())
                .map_err(|e| self.error(format!("bad secure setup answer: {e}")))?;
            let keys = reply
                .keys
                .ok_or_else(|| self.error("a secure setup answer without keys"))?;
            Ok(SecureSetup {
                keys: keys.keys().map_err(|e| self.error(e))?,
                group_keys: batch_from_ipc(&reply.group_keys).map_err(|e| self.error(e))?,
            })
        })
        .await
    }

    async fn secure_reveal(
        &self,
        request: &SiteRequest<'_>,
        reveal: &ShareRequest,
    ) -> Result<[u8; 32]> {
        self.timed(async {
            let body = self.share_body(request, reveal).await?;
            let answer = self
                .action(ACTION_SECURE_REVEAL, body, request.analyst)
                .await?;
            let reply = SecureRevealReply::decode(answer.as_slice())
                .map_err(|e| self.error(format!("bad secure reveal answer: {e}")))?;
            reply.nonce().map_err(|e| self.error(e))
        })
        .await
    }

    async fn secure_share(
        &self,
        request: &SiteRequest<'_>,
        share: &ShareRequest,
    ) -> Result<Vec<ShareEnvelope>> {
        self.timed(async {
            let body = self.share_body(request, share).await?;
            let answer = self
                .action(ACTION_SECURE_SHARE, body, request.analyst)
                .await?;
            let reply = SecureShareReply::decode(answer.as_slice())
                .map_err(|e| self.error(format!("bad secure share answer: {e}")))?;
            Ok(reply
                .envelopes
                .iter()
                .map(EnvelopeMessage::envelope)
                .collect())
        })
        .await
    }

    async fn encode_masked(
        &self,
        site_request: &SiteRequest<'_>,
        request: &MaskRequest,
    ) -> Result<StateBatch> {
        let (encoder, analyst) = (site_request.encoder, site_request.analyst);
        self.timed(async {
            let body = EncodeMaskedRequest {
                encode: Some(self.encode_request(encoder).await?),
                session: Some(SessionMessage::of(&request.session)),
                groups: batch_to_ipc(&request.groups).map_err(|e| self.error(e))?,
                envelopes: request.envelopes.iter().map(EnvelopeMessage::of).collect(),
            }
            .encode_to_vec();
            let answer = self.action(ACTION_ENCODE_MASKED, body, analyst).await?;
            let batch = batch_from_ipc(&answer).map_err(|e| self.error(e))?;
            encoder.accept(&[batch]).map_err(|e| self.error(e))
        })
        .await
    }

    async fn secure_confirm(
        &self,
        request: &SiteRequest<'_>,
        confirm: &ConfirmRequest,
    ) -> Result<ListSignature> {
        self.timed(async {
            let body = SecureConfirmRequest {
                encode: Some(self.encode_request(request.encoder).await?),
                session: Some(SessionMessage::of(&confirm.session)),
                survivors: confirm.survivors.clone(),
            }
            .encode_to_vec();
            let answer = self
                .action(ACTION_SECURE_CONFIRM, body, request.analyst)
                .await?;
            let reply = SecureConfirmReply::decode(answer.as_slice())
                .map_err(|e| self.error(format!("bad secure confirm answer: {e}")))?;
            reply.signature().map_err(|e| self.error(e))
        })
        .await
    }

    async fn secure_unmask(
        &self,
        request: &SiteRequest<'_>,
        unmask: &UnmaskRequest,
    ) -> Result<Vec<Revealed>> {
        self.timed(async {
            let body = SecureUnmaskRequest {
                encode: Some(self.encode_request(request.encoder).await?),
                session: Some(SessionMessage::of(&unmask.session)),
                survivors: unmask.survivors.clone(),
                signatures: unmask
                    .signatures
                    .iter()
                    .map(SecureConfirmReply::of)
                    .collect(),
            }
            .encode_to_vec();
            let answer = self
                .action(ACTION_SECURE_UNMASK, body, request.analyst)
                .await?;
            let reply = SecureUnmaskReply::decode(answer.as_slice())
                .map_err(|e| self.error(format!("bad secure unmask answer: {e}")))?;
            reply
                .shares
                .iter()
                .map(|r| r.revealed().map_err(|e| self.error(e)))
                .collect()
        })
        .await
    }

    /// Tells the worker in the background; a worker that misses it drops
    /// the rows when the next fit starts.
    fn release_fit(&self, scope: u64, analyst: &Analyst) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let action = Action {
            r#type: ACTION_RELEASE_FIT.into(),
            body: ReleaseFit { scope }.encode_to_vec().into(),
        };
        let Ok(request) = self.request(action, analyst) else {
            return;
        };
        let mut flight = self.flight();
        let timeout = self.options.timeout;
        runtime.spawn(async move {
            let _ = tokio::time::timeout(timeout, flight.do_action(request)).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a call whose connection could not be made counts as never
    /// sent; a timeout, a cancellation or a cut connection may have
    /// reached the worker.
    #[tokio::test]
    async fn only_a_call_that_could_not_connect_was_never_sent() {
        // Nobody listens on this port any more.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let channel = Endpoint::from_shared(format!("http://{closed}"))
            .unwrap()
            .connect_lazy();
        let refused = FlightServiceClient::new(channel)
            .get_schema(FlightDescriptor::new_path(vec!["t".into()]))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        assert!(never_sent(&refused), "{refused:?}");
        for status in [
            Status::cancelled("Timeout expired"),
            Status::deadline_exceeded("deadline exceeded"),
            Status::unavailable("connection reset by peer"),
            Status::unknown("h2 protocol error: stream closed"),
            Status::internal("worker error"),
        ] {
            assert!(!never_sent(&status), "{status:?}");
        }
    }
}
