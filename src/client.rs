//! Clients: where a federated table's rows are, and what runs there.
//!
//! A [`ClientRunner`] is the whole interface between the coordinator and a
//! client: it takes a validated [`Encoder`] and can only answer with a
//! [`StateBatch`]. [`LocalClient`] is the embedded runner over local CSV or
//! Parquet files (or in-memory batches, for the bundled demo); each has its
//! own DataFusion session, configured so that the partial aggregate really
//! runs over the rows (no statistics shortcut, no skipping of partial
//! aggregation that would ship raw rows as "state").

use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::encoder::{self, Encoder, StateBatch};
use crate::error::{FedError, Result};
use crate::federated_table::{ClientFiles, FileFormat, ObservedSchema};
use crate::secure::{self, ClientSecrets, MaskRequest, SecureLayout, SecureSession, SecureSetup};

/// Physical optimizer rules that must not run where a plan is split: the
/// first answers `count(*)` from file metadata (so a client would not run
/// it), the second fuses the partial and final aggregates into one.
const SPLIT_BREAKING_RULES: &[&str] = &["aggregate_statistics", "CombinePartialFinalAggregate"];

/// Rows to read for CSV schema inference, as DataFusion does.
const CSV_INFER_ROWS: usize = 1000;

/// What runs at one client: encoders in, states out.
#[async_trait]
pub trait ClientRunner: Send + Sync + fmt::Debug {
    /// The client's name (unique within its table).
    fn name(&self) -> &str;
    /// Where its rows are, for `\clients` and messages.
    fn location(&self) -> String;
    /// How its rows are stored (CSV, PARQUET, MEMORY, ...).
    fn format(&self) -> String;
    /// Runs the encoder over this client's rows and returns its state.
    async fn encode(&self, encoder: &Encoder) -> Result<StateBatch>;
    /// The physical plan this client would run for the encoder.
    async fn explain(&self, encoder: &Encoder) -> Result<String>;
    /// Drops whatever the client kept in memory for the fit `scope`.
    fn release_fit(&self, _scope: u64) {}
    /// Secure aggregation, step 1 (see [`crate::secure`]): runs the
    /// encoder, keeps its state and a fresh key pair for the session, and
    /// returns the public key and the group keys.
    async fn secure_setup(
        &self,
        _encoder: &Encoder,
        _session: &SecureSession,
    ) -> Result<SecureSetup> {
        Err(secure::unsupported(self.name()))
    }
    /// Secure aggregation, step 2: the kept state, aligned to the
    /// coordinator's groups, with pairwise masks added to its secure columns.
    async fn encode_masked(
        &self,
        _encoder: &Encoder,
        _request: &MaskRequest,
    ) -> Result<StateBatch> {
        Err(secure::unsupported(self.name()))
    }
    /// Runs the encoder as [`ClientRunner::encode`] does, and says what the
    /// exchange cost in bytes (for `EXPLAIN ANALYZE FEDERATED`). An
    /// in-process client sends nothing over a wire; what it hands back is
    /// its state's Arrow buffers.
    async fn encode_with_traffic(&self, encoder: &Encoder) -> Result<(StateBatch, Traffic)> {
        let state = self.encode(encoder).await?;
        let received = state.size_bytes();
        Ok((
            state,
            Traffic {
                sent: None,
                received,
            },
        ))
    }
}

/// The bytes one encoder run moved between the coordinator and a client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent to the client (plan and parameters); `None` for an
    /// in-process client, where nothing crosses a wire.
    pub sent: Option<usize>,
    /// Bytes received from the client (its state).
    pub received: usize,
}

/// A session for running encoders at a client.
pub fn client_session() -> SessionContext {
    let rules = PhysicalOptimizer::new()
        .rules
        .into_iter()
        .filter(|r| !SPLIT_BREAKING_RULES.contains(&r.name()))
        .collect();
    let config = SessionConfig::new()
        // Never emit per-row "states" (raw values) from the partial stage.
        .set_str(
            "datafusion.execution.skip_partial_aggregation_probe_ratio_threshold",
            "1.0",
        );
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_physical_optimizer_rules(rules)
        .build();
    SessionContext::new_with_state(state)
}

/// A client whose rows are local files or in-memory batches.
pub struct LocalClient {
    name: String,
    location: String,
    format: String,
    rows: Arc<dyn TableProvider>,
    session: SessionContext,
    /// The decoded input of the current fit's encoder (see [`crate::fit_cache`]).
    fit_input: Mutex<Option<FitInput>>,
    /// Key pairs and states of secure rounds between their two steps.
    secrets: ClientSecrets,
}

/// Decoded rows kept for the rounds of one fit.
struct FitInput {
    scope: u64,
    key: String,
    batches: Vec<RecordBatch>,
}

impl fmt::Debug for LocalClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalClient({} at {})", self.name, self.location)
    }
}

impl LocalClient {
    /// A client over its files, read with the federated table's `schema`.
    pub fn from_files(files: &ClientFiles, schema: SchemaRef) -> Result<Self> {
        let session = client_session();
        let state = session.state();
        let urls = files
            .files
            .iter()
            .map(|f| ListingTableUrl::parse(f.to_string_lossy()))
            .collect::<Result<Vec<_>, _>>()?;
        let options = match files.format {
            FileFormat::Csv => ListingOptions::new(Arc::new(
                CsvFormat::default()
                    .with_options(state.table_options().csv.clone())
                    .with_has_header(true),
            )),
            FileFormat::Parquet => ListingOptions::new(Arc::new(
                ParquetFormat::default().with_options(state.table_options().parquet.clone()),
            )),
        }
        .with_file_extension(files.format.extension());
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .with_schema(schema);
        Ok(Self {
            name: files.name.clone(),
            location: files.describe(),
            format: files.format.to_string(),
            rows: Arc::new(ListingTable::try_new(config)?),
            session,
            fit_input: Mutex::default(),
            secrets: ClientSecrets::default(),
        })
    }

    /// A client over batches held in memory (cast to `schema`).
    pub fn from_batches(
        name: &str,
        location: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<Self> {
        Ok(Self {
            name: name.to_string(),
            location: location.to_string(),
            format: "MEMORY".into(),
            rows: Arc::new(MemTable::try_new(schema, vec![batches])?),
            session: client_session(),
            fit_input: Mutex::default(),
            secrets: ClientSecrets::default(),
        })
    }

    fn error(&self, e: impl fmt::Display) -> FedError {
        FedError::Client {
            client: self.name.clone(),
            location: self.location.clone(),
            message: e.to_string(),
        }
    }

    async fn physical_plan(
        &self,
        encoder: &Encoder,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
        let plan = encoder.bind(Arc::clone(&self.rows))?;
        let state = self.session.state();
        // The encoder is already optimized and validated: plan it as it is.
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, &state)
            .await?;
        let partial = encoder::partial_aggregate(&physical)?;
        match encoder.fit_scope() {
            Some(scope) => {
                encoder::one_state_per_group(self.over_fit_input(partial, scope, encoder).await?)
            }
            None => encoder::one_state_per_group(partial),
        }
    }

    /// The partial aggregate over the fit's decoded input, read once per fit.
    async fn over_fit_input(
        &self,
        partial: AggregateExec,
        scope: u64,
        encoder: &Encoder,
    ) -> Result<AggregateExec> {
        let key = encoder.input_key();
        let cached = {
            let kept = self.fit_input.lock().expect("not poisoned");
            kept.as_ref()
                .filter(|k| k.scope == scope && k.key == key)
                .map(|k| k.batches.clone())
        };
        let batches = match cached {
            Some(batches) => batches,
            None => {
                let batches = collect(Arc::clone(partial.input()), self.session.task_ctx()).await?;
                *self.fit_input.lock().expect("not poisoned") = Some(FitInput {
                    scope,
                    key,
                    batches: batches.clone(),
                });
                batches
            }
        };
        // Spread the kept batches over the session's partitions.
        let parts = self.session.state().config().target_partitions().max(1);
        let mut partitions = vec![Vec::new(); parts];
        for (i, batch) in batches.into_iter().enumerate() {
            partitions[i % parts].push(batch);
        }
        let input = MemorySourceConfig::try_new_exec(&partitions, partial.input().schema(), None)?;
        Ok(AggregateExec::try_new(
            AggregateMode::Partial,
            partial.group_expr().clone(),
            partial.aggr_expr().to_vec(),
            partial.filter_expr().to_vec(),
            input,
            partial.input_schema(),
        )?)
    }

    /// Runs the encoder as [`ClientRunner::encode`] does, and also counts
    /// the rows its partial aggregate consumed: what a worker logs as the
    /// rows a released state covers.
    /// The physical plan of an encoder whose state may leave this client
    /// as it is: never one with a secure aggregate, whose state leaves only
    /// masked (see [`crate::secure`]).
    async fn plain_plan(&self, encoder: &Encoder) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.error(e))?;
        if secure::has_secure_aggregates(&plan) {
            return Err(self.error(secure::plain_state_refused()));
        }
        Ok(plan)
    }

    pub async fn encode_counted(&self, encoder: &Encoder) -> Result<(StateBatch, u64)> {
        let plan = self.plain_plan(encoder).await?;
        let (plan, rows) = crate::remote::covered::CountRowsExec::under_partial_aggregates(plan)
            .map_err(|e| self.error(e))?;
        let batches = collect(plan, self.session.task_ctx())
            .await
            .map_err(|e| self.error(strip_context(e)))?;
        let state = encoder.accept(&batches).map_err(|e| self.error(e))?;
        Ok((state, crate::remote::covered::CountRowsExec::count(&rows)))
    }
}

#[async_trait]
impl ClientRunner for LocalClient {
    fn name(&self) -> &str {
        &self.name
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn format(&self) -> String {
        self.format.clone()
    }

    async fn encode(&self, encoder: &Encoder) -> Result<StateBatch> {
        let plan = self.plain_plan(encoder).await?;
        let batches = collect(plan, self.session.task_ctx())
            .await
            .map_err(|e| self.error(strip_context(e)))?;
        encoder.accept(&batches).map_err(|e| self.error(e))
    }

    async fn secure_setup(
        &self,
        encoder: &Encoder,
        session: &SecureSession,
    ) -> Result<SecureSetup> {
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.error(e))?;
        let layout = SecureLayout::of_plan(&plan).map_err(|e| self.error(e))?;
        let batches = collect(plan, self.session.task_ctx())
            .await
            .map_err(|e| self.error(strip_context(e)))?;
        let state = encoder.accept(&batches).map_err(|e| self.error(e))?;
        self.secrets
            .setup(session, &state, layout)
            .map_err(|e| self.error(e))
    }

    async fn encode_masked(&self, encoder: &Encoder, request: &MaskRequest) -> Result<StateBatch> {
        self.secrets
            .mask(encoder, request)
            .map_err(|e| self.error(e))
    }

    fn release_fit(&self, scope: u64) {
        let mut kept = self.fit_input.lock().expect("not poisoned");
        if kept.as_ref().is_some_and(|k| k.scope == scope) {
            *kept = None;
        }
    }

    async fn explain(&self, encoder: &Encoder) -> Result<String> {
        let plan = self
            .physical_plan(encoder)
            .await
            .map_err(|e| self.error(e))?;
        Ok(displayable(plan.as_ref()).indent(false).to_string())
    }
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

/// The schema of each of a client's files, as DataFusion would infer it.
pub fn observe_schemas(client: &ClientFiles) -> Result<Vec<ObservedSchema>> {
    client
        .files
        .iter()
        .map(|file| observe_file(client, file))
        .collect()
}

fn observe_file(client: &ClientFiles, file: &Path) -> Result<ObservedSchema> {
    let err = |message: String| FedError::Client {
        client: client.name.clone(),
        location: file.display().to_string(),
        message,
    };
    let handle = File::open(file).map_err(|e| err(format!("cannot open: {e}")))?;
    let (schema, has_rows, positional) = match client.format {
        FileFormat::Csv => {
            let format = datafusion::arrow::csv::reader::Format::default().with_header(true);
            let (schema, rows) = format
                .infer_schema(handle, Some(CSV_INFER_ROWS))
                .map_err(|e| err(format!("not a readable CSV file with a header row: {e}")))?;
            if schema.fields().is_empty() {
                return Err(err(
                    "the CSV file is empty: it needs at least a header row".into()
                ));
            }
            (schema, rows > 0, true)
        }
        FileFormat::Parquet => {
            let meta = datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata::load(
                &handle,
                Default::default(),
            )
            .map_err(|e| err(format!("not a readable Parquet file: {e}")))?;
            let rows = meta.metadata().file_metadata().num_rows();
            (Schema::new(meta.schema().fields().clone()), rows > 0, false)
        }
    };
    Ok(ObservedSchema {
        client: client.name.clone(),
        file: file.display().to_string(),
        schema,
        has_rows,
        positional,
    })
}

/// Checks a declared schema against a client's files: the same column names
/// (CSV: in the same order, as CSV is read by position).
pub fn check_declared(client: &ClientFiles, declared: &Schema) -> Result<()> {
    for seen in observe_schemas(client)? {
        check_declared_schema(seen, declared)?;
    }
    Ok(())
}

/// Checks a declared schema against the schema seen at one client.
pub fn check_declared_schema(seen: ObservedSchema, declared: &Schema) -> Result<()> {
    let names: Vec<&str> = seen
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let want: Vec<&str> = declared
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let missing: Vec<&str> = want
        .iter()
        .filter(|n| !names.contains(n))
        .copied()
        .collect();
    let ok = if seen.positional {
        names == want
    } else {
        missing.is_empty()
    };
    if !ok {
        let detail = if missing.is_empty() {
            format!(
                "the header is ({}) but the declared columns are ({})",
                names.join(", "),
                want.join(", ")
            )
        } else {
            format!("missing declared column(s) {}", missing.join(", "))
        };
        return Err(FedError::Client {
            client: seen.client,
            location: seen.file,
            message: detail,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Float64Type;

    use crate::FedContext;
    use crate::fit_cache::FitScope;
    use crate::round;

    /// The state a client returns for `SELECT sum(x) FROM t`, in `scope`.
    async fn client_sum(ctx: &FedContext, scope: &Arc<FitScope>) -> f64 {
        let mut state = ctx.session().state();
        state.config_mut().set_extension(Arc::clone(scope));
        let plan = state
            .create_logical_plan("SELECT sum(x) FROM t")
            .await
            .unwrap();
        let plan = state.optimize(&plan).unwrap();
        let cut = round::lowest_cut(&plan).unwrap();
        let round = round::plan_round(&state, &cut).await.unwrap();
        let client = &round.encoder.table().clients()[0];
        let batch = client.encode(&round.encoder).await.unwrap();
        let sum = datafusion::arrow::compute::cast(
            batch.batch().column(0),
            &datafusion::arrow::datatypes::DataType::Float64,
        )
        .unwrap();
        sum.as_primitive::<Float64Type>().value(0)
    }

    #[tokio::test]
    async fn a_fit_reads_its_rows_once_and_releases_them() {
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("a.csv");
        std::fs::write(&file, "x\n1.5\n2.5\n").unwrap();
        let ctx = FedContext::new();
        ctx.sql(&format!(
            "CREATE FEDERATED TABLE t (x DOUBLE) CLIENTS ('a' = '{}')",
            file.display()
        ))
        .await
        .unwrap();
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
}
