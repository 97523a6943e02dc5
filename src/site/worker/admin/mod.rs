//! The data owner's admin page of a worker (`--admin-listen ADDR` with
//! `--admin-token-file FILE`), on its own port: a server-rendered HTML page
//! (no JavaScript) with the policy in force per table, the analysts and
//! their profiles, the DP budget spent and left, the latest audit records
//! and the pending approvals with approve / deny buttons; `GET /metrics`
//! (Prometheus text) and `GET /healthz`.
//!
//! Every request must carry the admin token: as `Authorization: Bearer
//! TOKEN` (scrapers, scripts) or as the session cookie that signing in
//! with the token on the page's form sets (a random session id, HttpOnly,
//! SameSite=Strict, 8 hours). Without it: 401 and nothing else (the page's
//! sign-in form holds no data). The approve / deny forms POST with the
//! session's CSRF token, and a request whose `Origin` is not this page's is
//! refused. Pages carry a Content-Security-Policy that allows no script.

mod page;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::task::JoinHandle;

use crate::error::{FedError, Result};
use crate::site::worker::approvals;
use crate::site::worker::service::WorkerService;

/// How long a signed-in session lasts.
const SESSION: Duration = Duration::from_secs(8 * 3600);

/// The cookie of a signed-in session.
const COOKIE: &str = "fedsql_admin";

struct Admin {
    service: Arc<WorkerService>,
    /// SHA-256 of the admin token (compared in constant time).
    token: [u8; 32],
    /// Session id → (CSRF token, when it started).
    sessions: Mutex<HashMap<String, (String, Instant)>>,
}

type Shared = Arc<Admin>;

/// The admin page serving in the background.
pub struct AdminServer {
    addr: SocketAddr,
    handle: JoinHandle<()>,
}

impl AdminServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Starts the admin page of `service` on `addr`.
pub(crate) async fn start(
    addr: SocketAddr,
    token: &str,
    service: Arc<WorkerService>,
) -> Result<AdminServer> {
    let admin = Arc::new(Admin {
        service,
        token: Sha256::digest(token.as_bytes()).into(),
        sessions: Mutex::default(),
    });
    let app = Router::new()
        .route("/", get(index))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/approvals/{id}/{decision}", post(decide))
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .fallback(unknown)
        .with_state(admin);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        FedError::InvalidArgument(format!("cannot listen on {addr} for the admin page: {e}"))
    })?;
    let addr = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(AdminServer { addr, handle })
}

/// Headers every answer carries: no script, no framing, no caching.
fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

impl Admin {
    fn token_matches(&self, given: &str) -> bool {
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        bool::from(self.token.ct_eq(&given))
    }

    /// The session's CSRF token when the request is signed in (bearer
    /// token or session cookie); `None`: not signed in.
    fn signed_in(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            && self.token_matches(token.trim())
        {
            return Some(String::new());
        }
        let session = cookie(headers, COOKIE)?;
        let mut sessions = self.sessions.lock().expect("not poisoned");
        sessions.retain(|_, (_, started)| started.elapsed() < SESSION);
        sessions.get(&session).map(|(csrf, _)| csrf.clone())
    }

    fn unauthorized(&self) -> Response {
        hardened(
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    "Bearer realm=\"fedsql worker admin\"",
                )],
                page::sign_in(None),
            )
                .into_response(),
        )
    }
}

/// A cookie's value.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

/// Whether a form POST comes from this page: its `Origin`, when sent,
/// names the host it was sent to.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn index(State(admin): State<Shared>, headers: HeaderMap) -> Response {
    let Some(csrf) = admin.signed_in(&headers) else {
        return admin.unauthorized();
    };
    let overview = admin.service.overview();
    hardened(page::index(&overview, &csrf).into_response())
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

async fn login(
    State(admin): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<SignIn>,
) -> Response {
    if !same_origin(&headers) || !admin.token_matches(form.token.trim()) {
        // Slows guessing; the token is long and random in any case.
        tokio::time::sleep(Duration::from_millis(250)).await;
        return hardened(
            (
                StatusCode::UNAUTHORIZED,
                page::sign_in(Some("That is not the admin token.")),
            )
                .into_response(),
        );
    }
    let session = random_hex();
    admin
        .sessions
        .lock()
        .expect("not poisoned")
        .insert(session.clone(), (random_hex(), Instant::now()));
    let cookie = format!(
        "{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION.as_secs()
    );
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    hardened(response)
}

#[derive(Deserialize)]
struct Csrf {
    csrf: String,
}

async fn logout(
    State(admin): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<Csrf>,
) -> Response {
    match admin.signed_in(&headers) {
        Some(csrf)
            if !csrf.is_empty() && bool::from(csrf.as_bytes().ct_eq(form.csrf.as_bytes())) =>
        {
            if let Some(session) = cookie(&headers, COOKIE) {
                admin
                    .sessions
                    .lock()
                    .expect("not poisoned")
                    .remove(&session);
            }
            hardened(Redirect::to("/").into_response())
        }
        _ => admin.unauthorized(),
    }
}

async fn decide(
    State(admin): State<Shared>,
    Path((id, decision)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<Csrf>,
) -> Response {
    let Some(csrf) = admin.signed_in(&headers) else {
        return admin.unauthorized();
    };
    // A form must carry its session's CSRF token (a bearer caller has no
    // session and needs none: it cannot be made to send the header).
    let bearer = csrf.is_empty() && form.csrf.is_empty();
    if !same_origin(&headers)
        || (!bearer && !bool::from(csrf.as_bytes().ct_eq(form.csrf.as_bytes())))
    {
        return hardened((StatusCode::FORBIDDEN, "cross-site request refused").into_response());
    }
    let status = match decision.as_str() {
        "approve" => "approved",
        "deny" => "denied",
        _ => return not_found().await,
    };
    let Some(path) = admin.service.overview().approvals else {
        return hardened(
            (
                StatusCode::NOT_FOUND,
                "this worker holds no requests for approval",
            )
                .into_response(),
        );
    };
    match approvals::set(&path, &id, status) {
        Ok(_) => hardened(Redirect::to("/").into_response()),
        Err(e) => hardened((StatusCode::BAD_REQUEST, e.to_string()).into_response()),
    }
}

async fn metrics_text(State(admin): State<Shared>, headers: HeaderMap) -> Response {
    if admin.signed_in(&headers).is_none() {
        return admin.unauthorized();
    }
    let overview = admin.service.overview();
    let spent: Vec<(String, String, f64)> = overview
        .budgets
        .iter()
        .map(|b| (b.analyst.clone(), b.table.clone(), b.line.spent))
        .collect();
    hardened(
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            admin
                .service
                .metrics()
                .render(&spent, admin.service.kept_fits()),
        )
            .into_response(),
    )
}

async fn healthz(State(admin): State<Shared>, headers: HeaderMap) -> Response {
    if admin.signed_in(&headers).is_none() {
        return admin.unauthorized();
    }
    hardened("ok\n".into_response())
}

/// Any other path: 404 when signed in, else 401 (nothing about the paths).
async fn unknown(State(admin): State<Shared>, headers: HeaderMap) -> Response {
    if admin.signed_in(&headers).is_none() {
        return admin.unauthorized();
    }
    not_found().await
}

async fn not_found() -> Response {
    hardened((StatusCode::NOT_FOUND, "not found").into_response())
}
