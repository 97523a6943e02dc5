//! [`FedDataFrame`]: DataFusion's DataFrame API over federated tables.
//!
//! Building a dataframe (filter, select, aggregate, sort, limit) only builds
//! a logical plan on the coordinator; [`FedDataFrame::collect`] runs it —
//! as rounds of encode → merge → decode when it reads a federated table,
//! as an ordinary DataFusion query otherwise.
//!
//! ```no_run
//! # async fn demo() -> fedsql::Result<()> {
//! use datafusion::functions_aggregate::expr_fn::avg;
//! use datafusion::prelude::*;
//! let ctx = fedsql::FedContext::new();
//! fedsql::frontend::demo::register_demo(&ctx)?;
//! let batches = ctx
//!     .table("clinic")
//!     .await?
//!     .filter(col("age").gt_eq(lit(40)))?
//!     .aggregate(vec![col("region")], vec![avg(col("systolic")).alias("mean_sbp")])?
//!     .sort(vec![col("region").sort(true, false)])?
//!     .collect()
//!     .await?;
//! # Ok(()) }
//! ```

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::dataframe::DataFrame;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, SortExpr};

use crate::coordinator::context::FedContext;
use crate::coordinator::rounds::{self, RoundReport};
use crate::coordinator::split::Round;
use crate::error::Result;
use crate::protocol::exposure;

/// A lazily evaluated query over federated and shared tables.
#[derive(Clone)]
pub struct FedDataFrame {
    ctx: FedContext,
    df: DataFrame,
    /// How a raw-rows refusal names this query (e.g. "`SELECT *`").
    label: String,
}

impl FedDataFrame {
    pub(crate) fn new(ctx: FedContext, df: DataFrame) -> Self {
        Self::with_label(ctx, df, "the query".into())
    }

    pub(crate) fn with_label(ctx: FedContext, df: DataFrame, label: String) -> Self {
        Self { ctx, df, label }
    }

    /// The output schema.
    pub fn schema(&self) -> &DFSchema {
        self.df.schema()
    }

    /// The logical plan as built (before optimization).
    pub fn logical_plan(&self) -> &LogicalPlan {
        self.df.logical_plan()
    }

    /// Keeps the rows for which `predicate` is true (runs at the clients).
    pub fn filter(self, predicate: Expr) -> Result<Self> {
        self.map(|df| df.filter(predicate))
    }

    /// Computes expressions per row (runs at the clients).
    pub fn select(self, exprs: Vec<Expr>) -> Result<Self> {
        self.map(|df| df.select(exprs))
    }

    /// Groups and aggregates: the cut where client states are merged.
    pub fn aggregate(self, group_by: Vec<Expr>, aggregates: Vec<Expr>) -> Result<Self> {
        self.map(|df| df.aggregate(group_by, aggregates))
    }

    /// Sorts (over aggregated, shared results).
    pub fn sort(self, exprs: Vec<SortExpr>) -> Result<Self> {
        self.map(|df| df.sort(exprs))
    }

    /// Skips and limits rows (over aggregated, shared results).
    pub fn limit(self, skip: usize, fetch: Option<usize>) -> Result<Self> {
        self.map(|df| df.limit(skip, fetch))
    }

    /// Applies any DataFusion DataFrame transformation.
    pub fn map(
        self,
        f: impl FnOnce(DataFrame) -> datafusion::error::Result<DataFrame>,
    ) -> Result<Self> {
        Ok(Self::new(self.ctx, f(self.df)?))
    }

    /// Runs the query and returns its result.
    pub async fn collect(self) -> Result<Vec<RecordBatch>> {
        Ok(self.run(false).await?.0)
    }

    /// Runs the query; also returns what each federated round did. A query
    /// that would let raw rows leave a client is refused before anything runs.
    pub async fn collect_with_report(self) -> Result<(Vec<RecordBatch>, Vec<RoundReport>)> {
        self.run(true).await
    }

    /// Runs the query; with `reported`, its rounds measure the bytes of
    /// every state for the reports.
    async fn run(self, reported: bool) -> Result<(Vec<RecordBatch>, Vec<RoundReport>)> {
        if !exposure::touches_federated(self.df.logical_plan()) {
            return Ok((self.df.collect().await?, Vec::new()));
        }
        exposure::check(self.df.logical_plan(), &self.label)?;
        let (mut state, plan) = self.df.into_parts();
        if reported && state.config().get_extension::<rounds::RoundLog>().is_none() {
            state
                .config_mut()
                .set_extension(std::sync::Arc::new(rounds::RoundLog::default()));
        }
        let optimized = state.optimize(&plan)?;
        rounds::execute(&state, optimized).await
    }

    /// Runs an aggregate query once per client: each chosen client's state
    /// is decoded on its own (see [`rounds::execute_per_client`]). `choose`
    /// picks clients by index from the federated table's client names.
    pub async fn collect_per_client(
        self,
        choose: impl FnOnce(&[&str]) -> Result<Vec<usize>>,
    ) -> Result<Vec<rounds::ClientAnswer>> {
        exposure::check(self.df.logical_plan(), &self.label)?;
        let (state, plan) = self.df.into_parts();
        let optimized = state.optimize(&plan)?;
        rounds::execute_per_client(&state, optimized, choose).await
    }

    /// Plans an aggregate query to be run once per client, round after
    /// round, rebinding its config between rounds ([`PreparedRound`]).
    pub async fn prepare_per_client(self) -> Result<PreparedRound> {
        exposure::check(self.df.logical_plan(), &self.label)?;
        let (state, plan) = self.df.into_parts();
        let optimized = state.optimize(&plan)?;
        let round = rounds::prepare_per_client(&state, optimized).await?;
        Ok(PreparedRound { state, round })
    }

    /// Plans a query of one round to be run many times, rebinding its
    /// config between runs; `None` when it has more than one round (or
    /// none), and then it is run as usual.
    pub async fn prepare(self) -> Result<Option<PreparedQuery>> {
        if !exposure::touches_federated(self.df.logical_plan()) {
            return Ok(None);
        }
        exposure::check(self.df.logical_plan(), &self.label)?;
        let (state, plan) = self.df.into_parts();
        let optimized = state.optimize(&plan)?;
        Ok(rounds::PreparedQuery::plan(&state, optimized)
            .await?
            .map(|query| PreparedQuery { state, query }))
    }

    /// The EXPLAIN FEDERATED text of this query.
    pub async fn explain_federated(self) -> Result<String> {
        self.ctx.explain_plan(self.df, &self.label).await
    }
}

/// A per-client round planned once (see [`FedDataFrame::prepare_per_client`]):
/// a program's later rounds, which differ only in their step config,
/// reuse its plans instead of parsing and planning the SQL again.
pub struct PreparedRound {
    state: SessionState,
    round: Round,
}

impl PreparedRound {
    /// Runs the round at the clients `choose` picks, each client's state
    /// decoded on its own (see [`rounds::execute_per_client`]).
    pub async fn run(
        &self,
        choose: impl FnOnce(&[&str]) -> Result<Vec<usize>>,
    ) -> Result<Vec<rounds::ClientAnswer>> {
        rounds::run_per_client(&self.state, &self.round, choose).await
    }

    /// The same round with the config text `old` of its step aggregate
    /// replaced by `new`; `None` when it cannot be rebound (plan the SQL
    /// anew then).
    pub fn rebound(&self, old: &str, new: &str) -> Result<Option<Self>> {
        Ok(self.round.rebound(old, new)?.map(|round| Self {
            state: self.state.clone(),
            round,
        }))
    }
}

/// A query of one round planned once (see [`FedDataFrame::prepare`]).
pub struct PreparedQuery {
    state: SessionState,
    query: rounds::PreparedQuery,
}

impl PreparedQuery {
    /// Runs the query.
    pub async fn collect(&self) -> Result<Vec<RecordBatch>> {
        self.query.run(&self.state).await
    }

    /// The same query with the config text `old` of its step aggregate
    /// replaced by `new`; `None` when it cannot be rebound.
    pub fn rebound(&self, old: &str, new: &str) -> Result<Option<Self>> {
        Ok(self.query.rebound(old, new)?.map(|query| Self {
            state: self.state.clone(),
            query,
        }))
    }
}
