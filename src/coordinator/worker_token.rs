//! Whose token a worker call carries.
//!
//! A worker keys its DP ledger by the analyst its token names. Through
//! `fedsql serve --users` every connection is a pg user, and each must
//! spend their own budget at the workers: their calls carry their own
//! token (`token_file` of their entry in the users file), not the table's
//! `token_file`, which every connection shares. The pg session runs each
//! statement under [`with_user_token`], and the coordinator's rounds carry
//! it into the tasks they spawn (as they carry the analyst). Outside such
//! a scope (the REPL, a script, `serve` without `--users`) a call carries
//! the table's token.

use std::sync::Arc;

use crate::error::{FedError, Result};

/// The worker token of the user a statement runs for.
#[derive(Clone)]
pub enum UserToken {
    /// The user's own token.
    Own(Arc<str>),
    /// The user has none: calls to workers are refused.
    Missing {
        /// The pg user.
        user: String,
    },
}

impl std::fmt::Debug for UserToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Own(_) => f.write_str("Own(<hidden>)"),
            Self::Missing { user } => write!(f, "Missing({user})"),
        }
    }
}

impl UserToken {
    /// The refusal of a call for a user without a token.
    pub fn missing(user: &str) -> FedError {
        FedError::InvalidArgument(format!(
            "pg user `{user}` has no worker token of their own, and through `fedsql serve --users` \
             every user queries workers with their own token (the worker keeps a privacy budget per token): \
             set `token_file` in the users file's `[users.{user}]` table"
        ))
    }
}

tokio::task_local! {
    static USER_TOKEN: UserToken;
}

/// Runs `work` with `token` as the worker token of every call it makes
/// (`None`: as is).
pub async fn with_user_token<F: Future>(token: Option<UserToken>, work: F) -> F::Output {
    match token {
        Some(token) => USER_TOKEN.scope(token, work).await,
        None => work.await,
    }
}

/// The worker token of the statement running, if it runs for a user.
pub fn current() -> Option<UserToken> {
    USER_TOKEN.try_with(Clone::clone).ok()
}

/// A session whose statements run for pg users with tokens of their own
/// (set by `fedsql serve --users`): a round that finds no user token in
/// its task refuses its workers rather than fall back on the table's.
/// (A session config extension: `SessionConfig::set_extension`.)
#[derive(Debug, Clone, Default)]
pub struct UserTokensRequired;

/// The token of a worker call: the user's, else the table's.
pub fn token_for_call(table_token: &str) -> Result<Arc<str>> {
    match current() {
        None => Ok(Arc::from(table_token)),
        Some(UserToken::Own(token)) => Ok(token),
        Some(UserToken::Missing { user }) => Err(UserToken::missing(&user)),
    }
}
