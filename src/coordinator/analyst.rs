//! Who a statement runs for: the analyst every site request carries.
//!
//! A session names its analyst as a config extension ([`Analyst`], set by
//! `fedsql serve` for each connection's user, with the user's own worker
//! token under `--users`); a session that names none runs for
//! [`Analyst::session`] with the tables' tokens (the REPL, a script). The
//! coordinator reads it once per round ([`of`]) and puts it in every
//! [`crate::protocol::site::SiteRequest`]: nothing reaches a site without
//! it, and no task-local value carries it.
//!
//! A session whose statements must run for users with tokens of their own
//! ([`UserTokensRequired`], `serve --users`) fails closed: an analyst
//! without one gets [`Credential::Missing`], and every worker call for them
//! is refused rather than sent with the table's token.

use datafusion::prelude::SessionConfig;

use crate::protocol::site::{Analyst, Credential};

/// A session whose statements run for pg users with tokens of their own
/// (set by `fedsql serve --users`). (A session config extension:
/// `SessionConfig::set_extension`.)
#[derive(Debug, Clone, Default)]
pub(crate) struct UserTokensRequired;

/// The analyst the session's statements run for.
pub(crate) fn of(config: &SessionConfig) -> Analyst {
    let analyst = config
        .get_extension::<Analyst>()
        .map(|a| (*a).clone())
        .unwrap_or_else(Analyst::session);
    if config.get_extension::<UserTokensRequired>().is_some() && !analyst.has_own_credential() {
        return analyst.with_credential(Credential::Missing);
    }
    analyst
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_session_without_a_user_runs_for_the_session_with_table_tokens() {
        let analyst = of(&SessionConfig::new());
        assert_eq!(analyst, Analyst::session());
        assert_eq!(&*analyst.token_for_call("table").unwrap(), "table");
    }

    #[test]
    fn a_session_that_requires_user_tokens_fails_closed() {
        let config = SessionConfig::new().with_extension(Arc::new(UserTokensRequired));
        assert!(of(&config).token_for_call("table").is_err());
        let named = config.with_extension(Arc::new(Analyst::named("ann")));
        assert!(of(&named).token_for_call("table").is_err());
        let own = named.with_extension(Arc::new(
            Analyst::named("ann").with_credential(Credential::Own("t0k".into())),
        ));
        assert_eq!(&*of(&own).token_for_call("table").unwrap(), "t0k");
        assert_eq!(of(&own).name(), "ann");
    }
}
