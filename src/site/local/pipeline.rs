//! How the embedded site answers one encoder, read top to bottom: admit
//! the plan, check it against the policy, plan the partial aggregate over
//! the site's rows (from a template, kept rows, or anew), run it within
//! the request's limits, and check, count, noise or mask the state before
//! it leaves. Errors are named for the site, or withheld under a policy.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionContext;
use fedsql_udfs::cox_step;

use crate::error::{FedError, Result};
use crate::protocol::encoder::{self, Encoder, StateBatch};
use crate::protocol::secure::{self};
use crate::protocol::site::SiteRequest;
use crate::site::engine::in_order;
use crate::site::engine::yielding::yield_after_each_batch;
use crate::site::engine::{self, Template, TemplateKey};
use crate::site::files::ParseFailure;
use crate::site::release::covered::CountRowsExec;
use crate::site::release::gate;
use crate::site::release::group_rows;
use crate::site::release::joins;
use crate::site::release::never_fail::never_fail_on_data;
use crate::site::release::policy::DisclosurePolicy;
use crate::site::release::sketches;

use super::client::LocalClient;

impl LocalClient {
    /// An error of this site's, naming it. Under a disclosure policy, one
    /// fixed refusal ([`crate::error::EVALUATION_REFUSAL`]): no kind, row text, values,
    /// position, paths or site name.
    pub(super) fn error(&self, e: impl fmt::Display) -> FedError {
        let message = e.to_string();
        let failure = ParseFailure::read(&message, &self.rows.schema());
        match (&self.policy, failure) {
            (None, Some(f)) => FedError::Client {
                client: self.name.clone(),
                location: self.location.clone(),
                message: f.describe(self.has_header, self.files.len() > 1),
            },
            (None, None) => FedError::Client {
                client: self.name.clone(),
                location: self.location.clone(),
                message,
            },
            // Under a policy: one fixed refusal, whatever failed and
            // wherever (no kind, no position): whether and how a query
            // fails must not tell one row's values.
            (Some(_), _) => FedError::Withheld { detail: message },
        }
    }

    /// The site's physical plan for an encoder: the partial aggregate over
    /// its own rows (or the fit's kept rows), one state row per group;
    /// under a policy, with the counts the policy checks. A plan of one
    /// file is instantiated from its layout's template when there is one.
    pub(super) async fn physical_plan(&self, encoder: &Encoder) -> Result<SitePlan> {
        gate::admit(encoder.plan())?;
        if let Some(policy) = &self.policy {
            policy.check_encoder(&self.name, encoder.plan())?;
            let session = SessionContext::new_with_state(self.engine.state().clone());
            joins::check_no_amplification(&self.name, encoder.plan(), &session).await?;
        }
        self.dp.check_encoder(&self.name, encoder.plan())?;
        let key = match (&self.layout, &self.file) {
            (Some(layout), Some(_))
                if self.fast_path
                    && encoder.fit_scope().is_none()
                    && engine::reads_one_table(encoder.plan()) =>
            {
                Some(TemplateKey::new(Arc::clone(layout), encoder))
            }
            _ => None,
        };
        if let (Some(key), Some(file)) = (&key, &self.file) {
            let template = match self.engine.template(key) {
                Some(template) => template,
                None => {
                    let planned = self.plan_anew(encoder).await?;
                    let Some(template) = Template::of(
                        Arc::clone(&planned.plan),
                        planned.counts.clone(),
                        self.engine.state().config().batch_size(),
                    ) else {
                        // Not bindable (several partitions, ranges): this
                        // site's own plan, planned again next time.
                        return Ok(planned);
                    };
                    let template = Arc::new(template);
                    self.engine
                        .keep_template(key.clone(), Arc::clone(&template));
                    template
                }
            };
            let (plan, counts) = template
                .instantiate(file, self.engine.footers())
                .map_err(|e| self.error(e))?;
            return Ok(SitePlan { plan, counts });
        }
        self.plan_anew(encoder).await
    }

    /// Plans an encoder for this site from its logical plan; a later round
    /// of a fit whose encoder differs only in its config rebinds the plan
    /// of the fit's kept rows instead (see [`KeptRows::rebound`]).
    pub(super) async fn plan_anew(&self, encoder: &Encoder) -> Result<SitePlan> {
        // DataFusion lists a file that is gone as no file at all: a site
        // whose file is gone answers an error, not an empty state (a site
        // on a cluster too: its plan lists the files, the executors read
        // them).
        if let Some(gone) = self.files.iter().find(|f| !f.is_file()) {
            let e = format!("cannot read {}: the file is missing", gone.display());
            return Err(self.error(DataFusionError::External(e.into())));
        }
        let rebound = match self.fit_scope(encoder) {
            Some(scope) => self
                .kept
                .rebound(scope, &Self::input_key(encoder)?, encoder.plan())?,
            None => None,
        };
        let partial = match rebound {
            Some(partial) => partial,
            None => self.plan_partial(encoder).await?,
        };
        let (partial, counts) = match &self.policy {
            Some(policy) => {
                let (partial, counts) = group_rows::counted(partial, policy.min_group_rows)?;
                (partial, Some(counts))
            }
            None => (partial, None),
        };
        Ok(SitePlan {
            plan: in_order::one_state_per_group(partial)?,
            counts,
        })
    }

    /// The partial aggregate of an encoder over this site's rows (over the
    /// fit's kept rows for an encoder of a fit), planned from its logical plan.
    pub(super) async fn plan_partial(&self, encoder: &Encoder) -> Result<AggregateExec> {
        let mut plan = encoder.bind(Arc::clone(&self.rows))?;
        if self.policy.is_some() {
            plan = never_fail_on_data(plan)?;
        }
        let state = self.engine.state();
        // The encoder is already optimized and validated: plan it as it is.
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, state)
            .await?;
        let partial = encoder::partial_aggregate(&physical)?;
        Ok(match self.fit_scope(encoder) {
            Some(scope) => self
                .kept
                .partial_over_kept(
                    partial,
                    encoder.plan(),
                    scope,
                    Self::input_key(encoder)?,
                    (&self.engine, &self.files),
                    self.task_ctx()?,
                )
                .await
                .map_err(|e| match &e {
                    FedError::DataFusion(d) => self.memory_refusal(d).unwrap_or(e),
                    _ => e,
                })?,
            None => partial,
        })
    }

    /// The fit whose rows this site keeps for `encoder`'s rounds (none
    /// with the fast path off: every round reads its rows anew).
    /// Never for an encoder with a secure aggregate: its state must come
    /// from the rows its own plan reads (the fifth outside attack primed a
    /// fit's kept rows with a plan that printed alike but kept no rows,
    /// then ran a secure round in that fit).
    pub(super) fn fit_scope(&self, encoder: &Encoder) -> Option<u64> {
        encoder
            .fit_scope()
            .filter(|_| self.fast_path && !has_secure_calls(encoder.plan()))
    }

    /// What identifies an encoder's input (the rows it aggregates) within
    /// one fit: the digest of the plan below its aggregate (as a secure
    /// round's encoder digest: injective, unlike the plan's text, where a
    /// string literal can spell out another plan and a shared table shows
    /// its name but not its rows).
    fn input_key(encoder: &Encoder) -> Result<String> {
        let input = match encoder.plan() {
            LogicalPlan::Aggregate(agg) => agg.input.as_ref(),
            other => other,
        };
        let digest = crate::site::release::secure::encoder_digest(input)?;
        Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The physical plan of an encoder whose state may leave this site as
    /// it is: never one with a secure aggregate, whose state leaves only
    /// masked (see [`crate::protocol::secure`]).
    pub(super) async fn plain_plan(&self, encoder: &Encoder) -> Result<SitePlan> {
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.site_error(e))?;
        if secure::has_secure_aggregates(&plan.plan) {
            return Err(secure::plain_state_refused(&self.name));
        }
        Ok(plan)
    }

    /// Runs a plan of this site's to its state batch; under a policy, the
    /// state is checked (and its counts dropped) before it is handed out.
    /// `shares` is the DP share count of the secure session the state is for
    /// (none for a plain state): the DP calls under the masks get a share
    /// of their noise cut for it.
    pub(super) async fn run(
        &self,
        request: &SiteRequest<'_>,
        plan: SitePlan,
        shares: Option<usize>,
    ) -> Result<StateBatch> {
        let encoder = request.encoder;
        // DP state: its constants checked and its ε debited, to the
        // request's analyst, before the plan runs, so that a run that fails
        // has spent it too.
        let dropped = plan.counts.as_ref().map(|c| c.all()).unwrap_or_default();
        let paid = self.dp.pay(
            (&self.name, request.analyst.name()),
            encoder.table(),
            (&plan.plan, &dropped),
        )?;
        let batches = match &self.cluster {
            // The row-reading part runs on the cluster; everything below
            // (checks, counts, noise, masks) runs here, as for local rows.
            Some(cluster) => cluster
                .collect(Arc::clone(&plan.plan), self.memory_limit)
                .await
                .map_err(|e| match &e {
                    FedError::DataFusion(d) => {
                        self.memory_refusal(d).unwrap_or_else(|| self.error(e))
                    }
                    _ => self.error(e),
                })?,
            None => {
                let physical = yield_after_each_batch(Arc::clone(&plan.plan))?;
                // A panic while reading (an assertion of a library over a
                // malformed file) fails this request with an error.
                let run = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(collect(
                    physical,
                    self.task_ctx()?,
                )))
                .await
                .unwrap_or_else(|panic| {
                    Err(datafusion::error::DataFusionError::Execution(format!(
                        "reading its rows failed on an internal error (a malformed file?): {}",
                        crate::error::panic_message(panic.as_ref())
                    )))
                });
                run.map_err(|e| {
                    self.memory_refusal(&e)
                        .unwrap_or_else(|| self.error(strip_context(e)))
                })?
            }
        };
        check_site_only_fields(&batches)?;
        let batches = match (&self.policy, &plan.counts) {
            (Some(policy), Some(columns)) => {
                let (batches, counts) =
                    group_rows::split_off(&batches, columns, policy.min_group_rows)?;
                let parameters = DisclosurePolicy::parameters(encoder.plan());
                // DP state only, under a finite budget: exempt from the
                // thresholds (the noise protects it).
                let site_rows = !columns.rows_asked;
                if !self
                    .dp
                    .exempts_from_thresholds(encoder.plan(), &plan.plan, site_rows)
                {
                    policy.check_counts(&self.name, &counts, parameters)?;
                    policy.check_cells(&self.name, &batches, &columns.cells)?;
                }
                let k = policy.min_group_rows;
                let mut released = Vec::with_capacity(batches.len());
                for batch in &batches {
                    let batch = sketches::coarsen(batch, k as f64, policy.allow_extremes)?;
                    let batch = sketches::fold_histograms(&batch, k as i64)
                        .map_err(|e| policy.histogram_refusal(&self.name, e))?;
                    released.push(batch);
                }
                released
            }
            _ => batches,
        };
        // DP state: declared keys completed, noise added.
        let batches = self
            .dp
            .release(
                encoder.plan(),
                &paid,
                (encoder.state_schema(), batches),
                shares,
            )
            .map_err(|e| self.site_error(e))?;
        encoder.accept(&batches).map_err(|e| self.error(e))
    }

    /// A policy refusal as it is; any other error names this site.
    pub(super) fn site_error(&self, e: FedError) -> FedError {
        match e {
            FedError::Policy { .. } | FedError::Refused { .. } | FedError::Withheld { .. } => e,
            other => self.error(other),
        }
    }

    /// Runs the encoder as [`Site::encode`] does, and also counts
    /// the rows its partial aggregate consumed: what a worker logs as the
    /// rows a released state covers.
    pub async fn encode_counted(&self, request: &SiteRequest<'_>) -> Result<(StateBatch, u64)> {
        let mut plan = self.plain_plan(request.encoder).await?;
        if self.cluster.is_some() {
            // The rows are counted on the cluster's executors, which keep
            // their counters: the log says 0.
            let state = self.run(request, plan, None).await?;
            return Ok((state, 0));
        }
        let rows;
        (plan.plan, rows) =
            CountRowsExec::under_partial_aggregates(plan.plan).map_err(|e| self.error(e))?;
        let state = self.run(request, plan, None).await?;
        Ok((state, CountRowsExec::count(&rows)))
    }
}

/// A site's physical plan for an encoder, and where the counts its policy
/// checks sit in the state (none without a policy).
pub(super) struct SitePlan {
    pub(super) plan: Arc<dyn ExecutionPlan>,
    pub(super) counts: Option<group_rows::CountColumns>,
}

/// State fields that only a site's own stages may hold (`cox_step`'s
/// `site_rows`, handed from its partial stage to its reduce) must be empty
/// in what leaves the site: checked here, on every state, whatever the
/// aggregate promises.
fn check_site_only_fields(batches: &[RecordBatch]) -> Result<()> {
    for batch in batches {
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            if !cox_step::is_site_rows(field.name()) {
                continue;
            }
            let leaking = column
                .as_list_opt::<i32>()
                .is_none_or(|list| !list.values().is_empty());
            if leaking {
                return Err(FedError::refused(
                    format!(
                        "state field `{}` would carry rows out of the site",
                        field.name()
                    ),
                    None,
                ));
            }
        }
    }
    Ok(())
}

/// DataFusion wraps errors from spawned tasks in context layers; the user
/// wants the innermost message (e.g. the CSV parser's line and column).
fn strip_context(e: DataFusionError) -> DataFusionError {
    match e {
        DataFusionError::Context(_, inner) => strip_context(*inner),
        DataFusionError::Shared(inner) => match Arc::try_unwrap(inner) {
            Ok(inner) => strip_context(inner),
            Err(shared) => DataFusionError::Shared(shared),
        },
        other => other,
    }
}

/// Whether `plan` calls a secure aggregate (`secure_sum`, ...) anywhere.
fn has_secure_calls(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::AggregateFunction(f) = e
                    && fedsql_udfs::catalogue::is_secure(f.func.name())
                {
                    found = true;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}
