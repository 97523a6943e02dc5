//! The composition root: a new session is the coordinator with every table
//! function registered, the models ([`crate::models`]) and the statistics
//! ([`crate::stats`]). It sits above all three, so that the coordinator
//! imports no function and the functions are leaves: they use the
//! coordinator and the shell they share ([`crate::table_function`]).

use crate::coordinator::context::FedContext;

impl FedContext {
    /// An empty coordinator, with fedsql's functions: aggregates, models
    /// (`lm`, `glm`, `fedsgd`, `pca`, `kmeans`, survival) and statistics
    /// (`t_test`, `anova`, `chisq_test`, ...).
    pub fn new() -> Self {
        let ctx = Self::without_table_functions();
        crate::models::register_all(ctx.session());
        crate::stats::register_all(ctx.session());
        ctx
    }
}

impl Default for FedContext {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_new_session_has_the_models_and_the_statistics() {
        let ctx = FedContext::new();
        let state = ctx.session().state();
        for name in [
            "lm",
            "glm",
            "fedsgd",
            "pca",
            "kaplan_meier",
            "coxph",
            "t_test",
            "hist",
        ] {
            assert!(state.table_functions().contains_key(name), "{name}");
        }
        let bare = FedContext::without_table_functions();
        assert!(!bare.session().state().table_functions().contains_key("lm"));
    }
}
