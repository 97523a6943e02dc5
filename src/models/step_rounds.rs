//! The rounds of an iterative program (`glm`, `coxph`, `kmeans`) whose SQL
//! differs from round to round only in the config text of its step
//! aggregate (the coefficients or centers): the first round is planned
//! from its SQL, the later ones rebind that config, at the coordinator and
//! at the sites, instead of planning again (see [`crate::protocol::rebind`]).

use datafusion::arrow::record_batch::RecordBatch;

use crate::coordinator::context::FedContext;
use crate::coordinator::dataframe::PreparedQuery;
use crate::error::Result;
use crate::table_function::rounds::{query, records_rounds};

/// A program's step rounds.
pub(crate) struct StepRounds<'a> {
    ctx: &'a FedContext,
    /// The last round's planned query and its config text.
    planned: Option<(PreparedQuery, String)>,
}

impl<'a> StepRounds<'a> {
    pub(crate) fn new(ctx: &'a FedContext) -> Self {
        Self { ctx, planned: None }
    }

    /// Runs the round whose step config reads `config`; `sql` writes the
    /// round's SQL (with that text in it) when it must be planned: the
    /// first round, a round that cannot be rebound, a source whose query
    /// has more than one round, and every round of an EXPLAIN, which
    /// records their SQL. Empty batches are dropped.
    pub(crate) async fn run(
        &mut self,
        config: &str,
        sql: impl FnOnce() -> String,
    ) -> Result<Vec<RecordBatch>> {
        if records_rounds(self.ctx) {
            return query(self.ctx, &sql()).await;
        }
        let rebound = match &self.planned {
            Some((query, old)) => query.rebound(old, config)?,
            None => None,
        };
        let sql = sql();
        let query = match rebound {
            Some(query) => Some(query),
            None => self.ctx.sql(&sql).await?.prepare().await?,
        };
        let batches = match &query {
            Some(query) => query.collect().await?,
            None => self.ctx.sql(&sql).await?.collect().await?,
        };
        self.planned = query.map(|query| (query, config.to_string()));
        Ok(batches.into_iter().filter(|b| b.num_rows() > 0).collect())
    }
}
