//! The rounds of one iterative fit (GLM by IRLS) read the same rows each
//! time. A fit runs its queries under a [`FitScope`]: its id travels with
//! every encoder of the fit, and a site may then keep the decoded input of
//! the fit's encoder between rounds (see [`crate::site::engine::kept_rows`]) until
//! the fit releases its scope.

use std::sync::Arc;

/// Marks the queries of one fit (a session config extension).
#[derive(Debug)]
pub struct FitScope {
    id: u64,
}

impl FitScope {
    /// A scope no other fit has: a random id, so that no other session (of
    /// this coordinator or another) can name it at a site to use or
    /// release the rows the site keeps for it.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            id: rand::random::<u64>().max(1),
        })
    }

    /// The scope of a fit's one-off queries (the levels of its factors, its
    /// shared statistics): no later round reads the same input, so sites
    /// keep nothing for them (an id no fit has).
    pub fn one_off() -> Arc<Self> {
        Arc::new(Self { id: 0 })
    }

    /// Its identifier.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether sites may keep the input of its rounds (not a one-off).
    pub fn keeps_rows(&self) -> bool {
        self.id != 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Float64Type;

    use super::FitScope;
    use crate::FedContext;
    use crate::coordinator::split;

    /// The state a client returns for `SELECT sum(x) FROM t`, in `scope`.
    async fn client_sum(ctx: &FedContext, scope: &Arc<FitScope>) -> f64 {
        try_client_sum(ctx, scope).await.unwrap()
    }

    async fn try_client_sum(ctx: &FedContext, scope: &Arc<FitScope>) -> crate::Result<f64> {
        let mut state = ctx.session().state();
        state.config_mut().set_extension(Arc::clone(scope));
        let plan = state
            .create_logical_plan("SELECT sum(x) FROM t")
            .await
            .unwrap();
        let plan = state.optimize(&plan).unwrap();
        let cut = split::lowest_cut(&plan).unwrap();
        let round = split::plan_round(&state, &cut).await.unwrap();
        let client = &round.table().clients()[0];
        let encoder = round.encoder_for(client.name()).unwrap();
        let analyst = crate::protocol::site::Analyst::session();
        let request = crate::protocol::site::SiteRequest::new(&encoder, &analyst);
        let batch = client.encode(&request).await?;
        let sum = datafusion::arrow::compute::cast(
            batch.batch().column(0),
            &datafusion::arrow::datatypes::DataType::Float64,
        )
        .unwrap();
        Ok(sum.as_primitive::<Float64Type>().value(0))
    }

    /// A federated table `t(x)` held by one client, in `file`.
    async fn one_client(file: &std::path::Path) -> FedContext {
        let ctx = FedContext::new();
        ctx.sql(&format!(
            "CREATE FEDERATED TABLE t (x DOUBLE) CLIENTS ('a' = '{}')",
            file.display()
        ))
        .await
        .unwrap();
        ctx
    }

    #[tokio::test]
    async fn a_first_round_that_fails_keeps_nothing() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("a.csv");
        // Several batches of good rows before the bad one.
        let good = "1\n".repeat(20_000);
        std::fs::write(&file, format!("x\n{good}oops\n")).unwrap();
        let ctx = one_client(&file).await;
        let scope = FitScope::new();
        assert!(try_client_sum(&ctx, &scope).await.is_err());
        // The next round of the same fit reads the (now good) file whole.
        std::fs::write(&file, format!("x\n{good}2\n")).unwrap();
        assert_eq!(client_sum(&ctx, &scope).await, 20_002.0);
        std::fs::write(&file, "x\n5\n").unwrap();
        assert_eq!(client_sum(&ctx, &scope).await, 20_002.0);
    }

    #[tokio::test]
    async fn a_fit_reads_its_rows_once_and_releases_them() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("a.csv");
        std::fs::write(&file, "x\n1.5\n2.5\n").unwrap();
        let ctx = one_client(&file).await;
        let scope = FitScope::new();
        assert_eq!(client_sum(&ctx, &scope).await, 4.0);
        // Within the fit the client answers from the rows it decoded.
        std::fs::write(&file, "x\n10.0\n").unwrap();
        assert_eq!(client_sum(&ctx, &scope).await, 4.0);
        // After the fit, and in another fit, it reads its file again.
        ctx.release_fit(scope.id()).await;
        assert_eq!(client_sum(&ctx, &scope).await, 10.0);
        std::fs::write(&file, "x\n7.0\n").unwrap();
        assert_eq!(client_sum(&ctx, &FitScope::new()).await, 7.0);
    }
    #[tokio::test]
    async fn a_fits_one_off_queries_keep_nothing() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("a.csv");
        std::fs::write(&file, "x\n4.0\n").unwrap();
        let ctx = one_client(&file).await;
        let scope = FitScope::new();
        let mut state = ctx.session().state();
        state.config_mut().set_extension(Arc::clone(&scope));
        let one_off = FedContext::from_state(state).one_off();
        let sum = |ctx: FedContext| async move {
            let batches = ctx.sql("SELECT sum(x) FROM t").await?.collect().await?;
            Ok::<_, crate::FedError>(batches[0].column(0).as_primitive::<Float64Type>().value(0))
        };
        assert_eq!(sum(one_off.clone()).await.unwrap(), 4.0);
        // Neither the one-off query nor the fit's first round finds rows kept.
        std::fs::write(&file, "x\n10.0\n").unwrap();
        assert_eq!(sum(one_off.clone()).await.unwrap(), 10.0);
        std::fs::write(&file, "x\n7.0\n").unwrap();
        assert_eq!(client_sum(&ctx, &scope).await, 7.0);
    }
}
