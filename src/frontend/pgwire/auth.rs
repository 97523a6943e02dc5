//! Who may connect: the users file, SCRAM-SHA-256 against stored verifiers,
//! and `fedsql passwd USER`.
//!
//! The users file is TOML with one entry per user, in the form PostgreSQL
//! keeps in `pg_authid.rolpassword`:
//!
//! ```toml
//! [users]
//! alice = "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"
//!
//! [users.bob]
//! verifier = "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"
//! token_file = "bob.token"
//! ```
//!
//! A user's `token_file` (relative to the users file's folder) holds their
//! own bearer token for the workers: their queries over workers carry it
//! instead of the table's `token_file`, so that each worker debits their
//! own privacy budget (the worker's `[tokens]` section names the analyst
//! of each token). A user without one is refused every table over workers
//! (see [`crate::coordinator::worker_token`]).
//!
//! A verifier holds `StoredKey = H(ClientKey)` and `ServerKey`, never the
//! password nor the salted password: someone who reads the file can neither
//! log in with it nor recover the password other than by guessing it
//! through 4096 rounds of PBKDF2 per guess. (pgwire's own SCRAM module
//! wants the salted password, which is password-equivalent, so the exchange
//! is done here, on pgwire's startup hooks.)
//!
//! Without a users file the server trusts every connection — and therefore
//! listens only on a loopback address (see [`super::server`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    ServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use pgwire::api::{
    ClientInfo, ConnectionHandle, ConnectionManager, METADATA_USER, PgWireConnectionState,
    PidSecretKeyGenerator, RandomPidSecretKeyGenerator,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tokio::sync::Mutex;

use crate::error::{FedError, Result};
use crate::protocol::site::{Credential, SESSION_ANALYST};

/// PBKDF2 rounds of a new verifier (PostgreSQL's default).
pub const SCRAM_ITERATIONS: u32 = 4096;
const MECHANISM: &str = "SCRAM-SHA-256";

/// One user's SCRAM-SHA-256 verifier.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(SCRAM-SHA-256)")
    }
}

impl Verifier {
    /// A new verifier of `password`, with a fresh random salt.
    pub fn new(password: &str) -> Result<Self> {
        let mut salt = vec![0u8; 16];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| FedError::Internal("cannot draw a random salt".into()))?;
        Ok(Self::with_salt(password, salt, SCRAM_ITERATIONS))
    }

    fn with_salt(password: &str, salt: Vec<u8>, iterations: u32) -> Self {
        let salted = salted_password(password, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored_key = digest::digest(&digest::SHA256, &client_key)
            .as_ref()
            .to_vec();
        let server_key = hmac_sha256(&salted, b"Server Key");
        Self {
            iterations,
            salt,
            stored_key,
            server_key,
        }
    }

    /// PostgreSQL's text form: `SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn encode(&self) -> String {
        format!(
            "{MECHANISM}${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(&self.stored_key),
            B64.encode(&self.server_key)
        )
    }

    /// Reads the text form.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(MECHANISM)?.strip_prefix('$')?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let verifier = Self {
            iterations: iterations.parse().ok()?,
            salt: B64.decode(salt).ok()?,
            stored_key: B64.decode(stored).ok()?,
            server_key: B64.decode(server).ok()?,
        };
        (verifier.stored_key.len() == 32 && verifier.server_key.len() == 32).then_some(verifier)
    }
}

/// The users allowed to connect, from a users file.
#[derive(Debug, Clone, Default)]
pub struct Users {
    users: BTreeMap<String, Verifier>,
    /// Each user's `token_file`, as written in the file.
    token_files: BTreeMap<String, PathBuf>,
    /// The tokens those files hold (read by [`Users::load`]).
    tokens: BTreeMap<String, Arc<str>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    users: BTreeMap<String, UserEntry>,
}

/// A user's entry: the verifier alone, or a table with the verifier and
/// the user's worker token file.
#[derive(Deserialize)]
#[serde(untagged)]
enum UserEntry {
    Verifier(String),
    Table(UserTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserTable {
    verifier: String,
    token_file: Option<PathBuf>,
}

impl Users {
    /// The user a start-up line suggests connecting as: `preferred` when
    /// the file holds it, else the file's first user (by name).
    pub(crate) fn suggested<'a>(&'a self, preferred: &'a str) -> Option<&'a str> {
        if self.users.contains_key(preferred) {
            return Some(preferred);
        }
        self.users.keys().next().map(String::as_str)
    }

    /// Reads a users file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            FedError::InvalidArgument(format!(
                "cannot read the users file {}: {e}",
                path.display()
            ))
        })?;
        let mut users = Self::parse(&text).map_err(|e| {
            FedError::InvalidArgument(format!("users file {}: {e}", path.display()))
        })?;
        let folder = path.parent().unwrap_or(Path::new(""));
        for (name, file) in &users.token_files {
            let token = crate::site::worker::read_token(&folder.join(file)).map_err(|e| {
                FedError::InvalidArgument(format!(
                    "users file {}: the token_file of user `{name}`: {e}",
                    path.display()
                ))
            })?;
            users.tokens.insert(name.clone(), Arc::from(token));
        }
        Ok(users)
    }

    /// The file's entries (the token files are not read).
    fn parse(text: &str) -> std::result::Result<Self, String> {
        let file: UsersFile = toml::from_str(text).map_err(|e| {
            format!("{e} (an entry is `NAME = \"<verifier>\"`, or a table `[users.NAME]` with `verifier` and `token_file`)")
        })?;
        let mut users = Self::default();
        for (name, entry) in file.users {
            reserved(&name)?;
            let (text, token_file) = match entry {
                UserEntry::Verifier(text) => (text, None),
                UserEntry::Table(table) => (table.verifier, table.token_file),
            };
            let Some(verifier) = Verifier::parse(&text) else {
                return Err(format!(
                    "user `{name}`: not a SCRAM-SHA-256 verifier (write it with `fedsql passwd {name}`)"
                ));
            };
            users.users.insert(name.clone(), verifier);
            if let Some(file) = token_file {
                users.token_files.insert(name, file);
            }
        }
        Ok(users)
    }

    /// The worker token a user's queries carry: their own, or none (then
    /// they are refused every table over workers).
    pub fn worker_token(&self, name: &str) -> Credential {
        match self.tokens.get(name) {
            Some(token) => Credential::Own(Arc::clone(token)),
            None => Credential::Missing,
        }
    }

    /// The verifier of a user.
    pub fn get(&self, name: &str) -> Option<&Verifier> {
        self.users.get(name)
    }

    /// The salt and iteration count a SCRAM exchange offers `name`.
    ///
    /// A known user gets their verifier's. An unknown user gets, as from
    /// PostgreSQL, a salt derived from a server secret and the name —
    /// HMAC-SHA-256(secret, name), cut to the length of the users' salts —
    /// and the users' iteration count: the same answer on every attempt,
    /// of the same shape as a real one, so that the exchange does not tell
    /// who exists. The secret is derived from every verifier's keys, which
    /// only the server holds (the users file is readable by its owner
    /// only): it needs no file of its own, and stays the same across
    /// restarts as long as no password changes.
    pub fn salt_and_iterations(&self, name: &str) -> (Vec<u8>, u32) {
        if let Some(verifier) = self.users.get(name) {
            return (verifier.salt.clone(), verifier.iterations);
        }
        let salt_len = most_common(self.users.values().map(|v| v.salt.len())).unwrap_or(16);
        let iterations =
            most_common(self.users.values().map(|v| v.iterations)).unwrap_or(SCRAM_ITERATIONS);
        let mut secret = digest::Context::new(&digest::SHA256);
        secret.update(b"fedsql SCRAM salt of unknown users\0");
        for (user, verifier) in &self.users {
            for part in [
                user.as_bytes(),
                &verifier.salt,
                &verifier.stored_key,
                &verifier.server_key,
            ] {
                secret.update(&(part.len() as u64).to_be_bytes());
                secret.update(part);
            }
        }
        let mut salt = hmac_sha256(secret.finish().as_ref(), name.as_bytes());
        salt.truncate(salt_len.clamp(1, salt.len()));
        (salt, iterations)
    }

    /// Sets a user's verifier.
    pub fn set(&mut self, name: &str, verifier: Verifier) {
        self.users.insert(name.to_string(), verifier);
    }

    /// Whether there is no user at all.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The file's text.
    pub fn to_toml(&self) -> String {
        let mut text = String::from(
            "# fedsql users: SCRAM-SHA-256 verifiers written by `fedsql passwd USER`.\n[users]\n",
        );
        let key = |name: &str| {
            if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                name.to_string()
            } else {
                format!("{name:?}")
            }
        };
        for (name, verifier) in &self.users {
            if !self.token_files.contains_key(name) {
                text.push_str(&format!("{} = \"{}\"\n", key(name), verifier.encode()));
            }
        }
        for (name, file) in &self.token_files {
            let Some(verifier) = self.users.get(name) else {
                continue;
            };
            text.push_str(&format!(
                "\n[users.{}]\nverifier = \"{}\"\ntoken_file = {}\n",
                key(name),
                verifier.encode(),
                toml::Value::String(file.to_string_lossy().into_owned())
            ));
        }
        text
    }
}

/// Refuses the name of the ledger a session without a user debits
/// ([`SESSION_ANALYST`]: setup scripts, an embedding program): a pg user
/// of that name would share it.
fn reserved(name: &str) -> std::result::Result<(), String> {
    if name == SESSION_ANALYST {
        return Err(format!(
            "user `{name}`: the name is reserved (the privacy-budget ledger of sessions without a user); choose another"
        ));
    }
    Ok(())
}

/// `fedsql passwd USER`: sets the user's password in the users file
/// (created if missing, readable by its owner only).
pub fn set_password(path: &Path, user: &str, password: &str) -> Result<()> {
    if user.is_empty() {
        return Err(FedError::InvalidArgument("the user name is empty".into()));
    }
    if password.is_empty() {
        return Err(FedError::InvalidArgument("the password is empty".into()));
    }
    reserved(user).map_err(FedError::InvalidArgument)?;
    let mut users = if path.exists() {
        let text = std::fs::read_to_string(path)?;
        Users::parse(&text)
            .map_err(|e| FedError::InvalidArgument(format!("users file {}: {e}", path.display())))?
    } else {
        Users::default()
    };
    users.set(user, Verifier::new(password)?);
    write_private(path, &users.to_toml())
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    // PostgreSQL uses the password as given when SASLprep rejects it.
    let prepared = stringprep::saslprep(password)
        .map(|p| p.into_owned())
        .unwrap_or_else(|_| password.to_string());
    let mut out = vec![0u8; digest::SHA256_OUTPUT_LEN];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        std::num::NonZeroU32::new(iterations.max(1)).expect("at least one"),
        salt,
        prepared.as_bytes(),
        &mut out,
    );
    out
}

/// The value that occurs most often (the smallest of those that tie).
fn most_common<T: Ord + Copy>(values: impl Iterator<Item = T>) -> Option<T> {
    let mut counts = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_insert(0usize) += 1;
    }
    let most = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == most).map(|(v, _)| v)
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, message).as_ref().to_vec()
}

/// The server's side of one SCRAM exchange (RFC 5802, RFC 7677).
#[derive(Debug)]
struct ScramExchange {
    /// `None` for an unknown user: the exchange runs to the end with the
    /// salt [`Users::salt_and_iterations`] derives and fails there, so
    /// that it does not tell who exists.
    verifier: Option<Verifier>,
    client_first_bare: String,
    server_first: String,
    gs2_header: String,
    nonce: String,
}

impl ScramExchange {
    /// Answers the client-first message with the server-first message,
    /// which offers `salt` and `iterations` (the verifier's, for a known
    /// user).
    fn start(
        client_first: &str,
        verifier: Option<Verifier>,
        (salt, iterations): (Vec<u8>, u32),
    ) -> PgWireResult<Self> {
        let invalid = || PgWireError::InvalidScramMessage("malformed client-first-message".into());
        // gs2-header: "n,," or "y,," (no channel binding); "p=..." asks for
        // channel binding, which is not offered.
        let mut parts = client_first.splitn(3, ',');
        let flag = parts.next().ok_or_else(invalid)?;
        let authzid = parts.next().ok_or_else(invalid)?;
        let bare = parts.next().ok_or_else(invalid)?;
        if !(flag == "n" || flag == "y") {
            return Err(PgWireError::InvalidScramMessage(
                "channel binding is not offered".into(),
            ));
        }
        let client_nonce = bare
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .ok_or_else(invalid)?;
        let mut random = [0u8; 18];
        ring::rand::SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| invalid())?;
        let nonce = format!("{client_nonce}{}", B64.encode(random));
        let server_first = format!("r={nonce},s={},i={iterations}", B64.encode(salt));
        Ok(Self {
            verifier,
            client_first_bare: bare.to_string(),
            server_first,
            gs2_header: format!("{flag},{authzid},"),
            nonce,
        })
    }

    /// Checks the client's proof; on success, the server-final message.
    fn finish(&self, client_final: &str) -> Option<String> {
        let (without_proof, proof) = client_final.rsplit_once(",p=")?;
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(v) = attr.strip_prefix("c=") {
                binding = Some(v);
            } else if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            }
        }
        if nonce? != self.nonce || B64.decode(binding?).ok()? != self.gs2_header.as_bytes() {
            return None;
        }
        let verifier = self.verifier.as_ref()?;
        let proof = B64.decode(proof).ok()?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_signature = hmac_sha256(&verifier.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return None;
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let stored = digest::digest(&digest::SHA256, &client_key);
        if !bool::from(stored.as_ref().ct_eq(&verifier.stored_key)) {
            return None;
        }
        let server_signature = hmac_sha256(&verifier.server_key, auth_message.as_bytes());
        Some(format!("v={}", B64.encode(server_signature)))
    }
}

/// Where a connection is in its authentication.
#[derive(Debug)]
enum AuthStep {
    Initial,
    ServerFirstSent(Box<ScramExchange>),
}

/// The start-up of one connection: SCRAM when there are users, none
/// otherwise; then the connection is registered for cancel requests.
pub struct Startup<P> {
    users: Option<Arc<Users>>,
    parameters: Arc<P>,
    connections: Arc<ConnectionManager>,
    step: Mutex<AuthStep>,
}

impl<P> Startup<P> {
    /// The start-up handler of a new connection.
    pub fn new(
        users: Option<Arc<Users>>,
        parameters: Arc<P>,
        connections: Arc<ConnectionManager>,
    ) -> Self {
        Self {
            users,
            parameters,
            connections,
            step: Mutex::new(AuthStep::Initial),
        }
    }
}

#[async_trait]
impl<P: ServerParameterProvider> StartupHandler for Startup<P> {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                if self.users.is_some() {
                    client.set_state(PgWireConnectionState::AuthenticationInProgress);
                    client
                        .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                            vec![MECHANISM.to_string()],
                        )))
                        .await?;
                } else {
                    self.accept(client).await?;
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let Some(users) = &self.users else {
                    return Err(PgWireError::InvalidSASLState);
                };
                let user = client
                    .metadata()
                    .get(METADATA_USER)
                    .cloned()
                    .ok_or(PgWireError::UserNameRequired)?;
                let mut step = self.step.lock().await;
                match &*step {
                    AuthStep::Initial => {
                        let initial = message.into_sasl_initial_response()?;
                        if initial.auth_method != MECHANISM {
                            return Err(PgWireError::UnsupportedSASLAuthMethod(
                                initial.auth_method,
                            ));
                        }
                        let data = initial.data.unwrap_or_default();
                        let client_first = std::str::from_utf8(&data)
                            .map_err(|_| PgWireError::InvalidScramMessage("not UTF-8".into()))?;
                        let exchange = ScramExchange::start(
                            client_first,
                            users.get(&user).cloned(),
                            users.salt_and_iterations(&user),
                        )?;
                        let server_first = exchange.server_first.clone();
                        *step = AuthStep::ServerFirstSent(Box::new(exchange));
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLContinue(server_first.into_bytes().into()),
                            ))
                            .await?;
                    }
                    AuthStep::ServerFirstSent(exchange) => {
                        let response = message.into_sasl_response()?;
                        let client_final = std::str::from_utf8(&response.data).unwrap_or("");
                        let Some(server_final) = exchange.finish(client_final) else {
                            return Err(PgWireError::InvalidPassword(user));
                        };
                        *step = AuthStep::Initial;
                        client
                            .feed(PgWireBackendMessage::Authentication(
                                Authentication::SASLFinal(server_final.into_bytes().into()),
                            ))
                            .await?;
                        self.accept(client).await?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl<P: ServerParameterProvider> Startup<P> {
    /// Ends the start-up: the connection gets its cancel key and is ready.
    async fn accept<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, secret) = RandomPidSecretKeyGenerator::default().generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let (handle, guard) = self.connections.register(pid, secret);
        client
            .session_extensions()
            .insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert(guard);
        finish_authentication(client, self.parameters.as_ref()).await
    }
}

#[cfg(test)]
mod tests;
