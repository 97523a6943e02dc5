//! The one `fedsql.*` configuration namespace of a coordinator session,
//! set with `SET fedsql.<name> = <value>` and listed by `SHOW ALL`.
//!
//! Every `fedsql` setting lives here, so the names stay in one place:
//! `fedsql.dp_epsilon` (the ε of a differentially private aggregate that
//! names none) and `fedsql.display_digits` (significant digits of floats in
//! the table format; 0 shows all) and `fedsql.secure_threshold` (how many
//! sites a secure round needs; 0: the table's option or the least the sites
//! accept — a strict majority, more than two thirds where they check peers).

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;
use datafusion::prelude::SessionContext;

extensions_options! {
    /// The `fedsql` settings of one session.
    pub struct FedsqlOptions {
        /// ε of a DP aggregate called without an explicit epsilon argument.
        pub dp_epsilon: f64, default = 1.0
        /// Significant digits of floats in the table format (0: all digits).
        pub display_digits: usize, default = 7
        /// How many sites a secure round needs to unmask its sum (0: the
        /// table's `secure_threshold` option, else the least the sites
        /// accept: a strict majority, more than two thirds with peers).
        pub secure_threshold: usize, default = 0
    }
}

impl ConfigExtension for FedsqlOptions {
    const PREFIX: &'static str = "fedsql";
}

/// The session's current `fedsql` settings.
pub(crate) fn fedsql_options(ctx: &SessionContext) -> FedsqlOptions {
    ctx.state()
        .config()
        .options()
        .extensions
        .get::<FedsqlOptions>()
        .cloned()
        .unwrap_or_default()
}

/// The `fedsql` settings of a session's state (as a round sees them).
pub(crate) fn fedsql_options_of(state: &datafusion::execution::SessionState) -> FedsqlOptions {
    state
        .config()
        .options()
        .extensions
        .get::<FedsqlOptions>()
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FedContext;

    #[tokio::test]
    async fn set_changes_a_fedsql_setting_and_unknown_names_are_refused() {
        let ctx = FedContext::new();
        assert_eq!(fedsql_options(ctx.session()).dp_epsilon, 1.0);
        ctx.sql("SET fedsql.dp_epsilon = 0.5").await.unwrap();
        ctx.sql("SET fedsql.display_digits = 3").await.unwrap();
        let options = fedsql_options(ctx.session());
        assert_eq!(options.dp_epsilon, 0.5);
        assert_eq!(options.display_digits, 3);
        let err = ctx.sql("SET fedsql.dp_epsilonn = 1").await.err().unwrap();
        assert!(err.to_string().contains("dp_epsilonn"), "{err}");
    }
}
