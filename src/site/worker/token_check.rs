//! The token check a worker runs on every call's headers, before its body
//! is read: a tonic interceptor, so an unauthenticated request of any size
//! is refused without being buffered.

use std::sync::Arc;

use tonic::{Request, Status};

use crate::protocol::flight::{AUTHORIZATION, BEARER};
use crate::site::worker::log::{LogSink, WorkerLog};
use crate::site::worker::tokens::Tokens;

/// Checks the token of every call before its body is read (a tonic
/// interceptor runs on the headers alone): an unauthenticated request of
/// any size is refused without being buffered.
#[derive(Clone)]
pub(crate) struct TokenCheck {
    tokens: Arc<Tokens>,
    log: WorkerLog,
}

impl TokenCheck {
    /// The check for `token`, logging refusals to `log`.
    pub(crate) fn new(token: &str, log: Option<LogSink>) -> Self {
        Self {
            tokens: Arc::new(Tokens::new(token, &[])),
            log: WorkerLog::new(log),
        }
    }

    /// The same check accepting these (named) tokens.
    pub(crate) fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = Arc::new(tokens);
        self
    }
}

/// The bearer token of a request's headers.
pub(crate) fn bearer(metadata: &tonic::metadata::MetadataMap) -> Option<&str> {
    metadata
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix(BEARER))
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let given = bearer(request.metadata());
        let refusal = match given {
            Some(token) if self.tokens.analyst(token.as_bytes()).is_some() => return Ok(request),
            Some(_) => Status::unauthenticated("wrong token"),
            None => Status::unauthenticated("no token: send `authorization: Bearer <token>`"),
        };
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        Err(self.log.refuse(&peer, "request", refusal))
    }
}
