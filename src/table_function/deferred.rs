//! The table a table function returns: [`deferred_table`], the one
//! constructor every model and statistic uses. It knows its schema when the
//! call is planned and computes its one batch when the plan runs, so that
//! `EXPLAIN` runs nothing; `EXPLAIN FEDERATED` shows the rounds it runs.

use std::future::Future;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::execution::SessionState;
use futures::future::BoxFuture;

use super::rounds::recording_program;
use crate::coordinator::context::FedContext;
use crate::coordinator::fit_scope::FitScope;
use crate::coordinator::fit_table::{Fit, FitTable, Program};
use crate::error::Result;
use crate::notices::Progress;

/// Whether the sites may keep their decoded rows between a function's
/// rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounds {
    /// Each round reads the source afresh (a test of one or two rounds).
    Independent,
    /// The rounds repeat over one input (an iterative fit): sites may keep
    /// their decoded rows until the function ends (see
    /// [`crate::coordinator::fit_scope`]).
    Iterative,
}

/// A table of `schema` whose one batch `compute` makes when the plan runs
/// (not when it is planned); `label` names it in plans. The function
/// leaves its notices with [`FedContext::notice`].
///
/// `EXPLAIN FEDERATED` of it shows `program` when given (a model that
/// describes its rounds without running them), or else runs `compute` once
/// with a recorder in the session and shows every round it ran: what each
/// client computes and the state that leaves it, with its size (a later
/// round may depend on what the earlier ones returned, e.g. `hist`'s range
/// or `anova`'s factor levels).
///
/// `compute` gets a context over the session that scans the table and the
/// session's progress reporter (for long fits).
pub(crate) fn deferred_table<F>(
    label: String,
    schema: SchemaRef,
    rounds: Rounds,
    program: Option<Program>,
    compute: F,
) -> Arc<dyn TableProvider>
where
    F: Fn(FedContext, Option<Arc<Progress>>) -> BoxFuture<'static, Result<RecordBatch>>
        + Send
        + Sync
        + 'static,
{
    let compute = Arc::new(compute);
    let run = Arc::clone(&compute);
    let fit: Fit = Arc::new(move |state: SessionState| {
        let run = Arc::clone(&run);
        Box::pin(async move {
            let progress = state.config().get_extension::<Progress>();
            in_scope(rounds, state, |ctx| run(ctx, progress)).await
        })
    });
    let program = program.unwrap_or_else(|| {
        recording_program(label.clone(), move |ctx: FedContext| {
            let compute = Arc::clone(&compute);
            Box::pin(async move {
                in_scope(rounds, ctx.session().state(), |ctx| compute(ctx, None)).await
            })
        })
    });
    FitTable::explained(Arc::new(FitTable::new(label, schema, fit)), program)
}

/// Runs `run` over `state`, in a fit scope when the rounds are iterative.
async fn in_scope<T, F, Fut>(rounds: Rounds, state: SessionState, run: F) -> Result<T>
where
    F: FnOnce(FedContext) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match rounds {
        Rounds::Independent => run(FedContext::from_state(state)).await,
        Rounds::Iterative => in_fit_scope(state, run).await,
    }
}

/// Runs an iterative computation in its own scope (see
/// [`crate::coordinator::fit_scope`]): clients may keep their decoded rows
/// in memory until it ends, and they are told to release them when it
/// does, however it ends.
async fn in_fit_scope<T, F, Fut>(state: SessionState, run: F) -> Result<T>
where
    F: FnOnce(FedContext) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let scope = FitScope::new();
    let mut fit_state = state;
    fit_state.config_mut().set_extension(Arc::clone(&scope));
    let ctx = FedContext::from_state(fit_state);
    let result = run(ctx.clone()).await;
    ctx.release_fit(scope.id()).await;
    result
}
