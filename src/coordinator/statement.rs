//! Running one analyst statement: [`FedContext::sql`] recognises fedsql's
//! own statements (CREATE FEDERATED TABLE, EXPLAIN [ANALYZE] FEDERATED,
//! SHOW CLIENTS, SHOW PRIVACY BUDGET), checks a gated session's plan, and
//! returns the result as a [`FedDataFrame`]; a query over federated tables
//! runs when collected. Kept apart from [`crate::coordinator::context`] (the
//! catalog) so that the data frame, which holds a context, and the context
//! do not import each other.

use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::dataframe::DataFrame;
use datafusion::datasource::MemTable;
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{SelectItem, SetExpr, Statement};

use crate::coordinator::context::FedContext;
use crate::coordinator::dataframe::FedDataFrame;
use crate::coordinator::ddl;
use crate::coordinator::explain;
use crate::coordinator::fed_statement::{self, FedStatement};
use crate::coordinator::federated_table::FederatedTable;
use crate::coordinator::fit_table::FitTable;
use crate::coordinator::gate::StatementGate;
use crate::coordinator::rounds::RoundLog;
use crate::error::{FedError, Result};
use crate::protocol::exposure;

impl FedContext {
    /// Plans one SQL statement. DDL (`CREATE FEDERATED TABLE`, `CREATE
    /// EXTERNAL TABLE`, ...) runs at once; a query runs when collected, after
    /// its exposure check (a refused query runs nothing at any client).
    pub async fn sql(&self, sql: &str) -> Result<FedDataFrame> {
        let sql = sql.trim().trim_end_matches(';').trim();
        // A gated session (`fedsql serve` without --allow-ddl) is checked
        // on what runs: the statement fedsql dispatches on below, or the
        // plan DataFusion's parser makes of it.
        let gate = StatementGate::of(&self.session().state_ref().read());
        match fed_statement::recognise(sql) {
            Some(FedStatement::CreateFederatedTable) => {
                if let Some(gate) = &gate {
                    return Err(gate.refuse_create_federated());
                }
                let stmt = ddl::parse_create_federated(sql)?;
                self.create_federated(&stmt).await?;
                return self.empty();
            }
            Some(FedStatement::ExplainFederated {
                analyze: true,
                statement,
            }) => {
                // Every round the statement runs, a model fit's included, is logged.
                let log = Arc::new(RoundLog::default());
                let mut state = self.session().state();
                state.config_mut().set_extension(Arc::clone(&log));
                Box::pin(FedContext::from_state(state).sql(statement))
                    .await?
                    .collect()
                    .await?;
                let reports = log.take();
                if reports.is_empty() {
                    return Err(FedError::InvalidArgument(
                        "EXPLAIN ANALYZE FEDERATED: the statement ran no federated round (use EXPLAIN ANALYZE)".into(),
                    ));
                }
                self.notice(explain::analyze_summary(&reports));
                return self.batch_result(explain::analyze_batch(&reports)?);
            }
            Some(FedStatement::ExplainFederated {
                analyze: false,
                statement,
            }) => {
                let plan = self
                    .session()
                    .state()
                    .create_logical_plan(statement)
                    .await?;
                if let Some(gate) = &gate {
                    gate.check_plan(&plan)?;
                }
                let df = self.session().execute_logical_plan(plan).await?;
                if let Some(text) = FitTable::explain_fits(self, df.logical_plan()).await? {
                    return self.text_result("plan", &text);
                }
                let text = self.explain_plan(df, &query_label(statement)).await?;
                return self.text_result("plan", &text);
            }
            Some(FedStatement::ShowClients { table }) => {
                let batch = self.clients_batch(table).await?;
                return self.batch_result(batch);
            }
            Some(FedStatement::ShowPrivacyBudget { table }) => {
                let provider = self.federated_table(table).await?;
                let federated =
                    FederatedTable::from_provider(provider.as_ref()).expect("checked above");
                let analyst = self.analyst();
                let batch =
                    crate::coordinator::dp::budget_batch(table, federated.clients(), &analyst)
                        .await?;
                return self.batch_result(batch);
            }
            None => {}
        }

        let state = self.session().state();
        let plan = state.create_logical_plan(sql).await?;
        if let Some(gate) = &gate {
            gate.check_plan(&plan)?;
        }
        match &plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) if exposure::touches_federated(&create.input) => {
                let input = FedDataFrame::new(self.clone(), DataFrame::new(state.clone(), (*create.input).clone()));
                let batches = input.collect().await?;
                let schema = Arc::new(create.input.schema().as_arrow().clone());
                let table = MemTable::try_new(schema, vec![batches])?;
                let name = create.name.clone();
                if create.or_replace {
                    self.session().deregister_table(name.clone())?;
                } else if self.session().table_exist(name.clone())? {
                    if create.if_not_exists {
                        return self.empty();
                    }
                    return Err(FedError::AlreadyExists(format!("table `{name}` already exists")));
                }
                self.session().register_table(name, Arc::new(table))?;
                self.empty()
            }
            // `COPY (query) TO 'file'` over a federated table: the query is
            // checked and run in rounds like any other, and only its (shared)
            // result is written.
            LogicalPlan::Copy(copy) if exposure::touches_federated(&copy.input) => {
                let input = FedDataFrame::with_label(
                    self.clone(),
                    DataFrame::new(state.clone(), (*copy.input).clone()),
                    query_label(sql),
                );
                let batches = input.collect().await?;
                let schema = Arc::new(copy.input.schema().as_arrow().clone());
                let table = MemTable::try_new(schema, vec![batches])?;
                let result = LogicalPlanBuilder::scan("copy_input", provider_as_source(Arc::new(table)), None)?.build()?;
                let mut copy = copy.clone();
                copy.input = Arc::new(result);
                let df = self.session().execute_logical_plan(LogicalPlan::Copy(copy)).await?;
                Ok(FedDataFrame::new(self.clone(), df))
            }
            LogicalPlan::Analyze(_) if exposure::touches_federated(&plan) => Err(FedError::InvalidArgument(
                "EXPLAIN ANALYZE would run a federated query on the coordinator: use EXPLAIN FEDERATED".into(),
            )),
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_) => {
                let df = self.session().execute_logical_plan(plan).await?;
                Ok(FedDataFrame::new(self.clone(), df))
            }
            // Queries are checked for exposure by `collect`, before anything runs.
            _ => Ok(FedDataFrame::with_label(
                self.clone(),
                DataFrame::new(state, plan),
                query_label(sql),
            )),
        }
    }

    /// A dataframe over a table (federated or shared).
    pub async fn table(&self, name: &str) -> Result<FedDataFrame> {
        Ok(FedDataFrame::new(
            self.clone(),
            self.session().table(name).await?,
        ))
    }

    fn empty(&self) -> Result<FedDataFrame> {
        Ok(FedDataFrame::new(
            self.clone(),
            self.session().read_empty()?,
        ))
    }

    fn batch_result(&self, batch: RecordBatch) -> Result<FedDataFrame> {
        Ok(FedDataFrame::new(
            self.clone(),
            self.session().read_batch(batch)?,
        ))
    }

    fn text_result(&self, column: &str, text: &str) -> Result<FedDataFrame> {
        let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(StringArray::from(vec![text.to_string()]))],
        )?;
        self.batch_result(batch)
    }
}

/// How to name a query in a raw-rows refusal: "`SELECT *`" when it selects
/// a wildcard, else a general phrase.
fn query_label(sql: &str) -> String {
    let dialect = datafusion::sql::sqlparser::dialect::GenericDialect {};
    let wildcard = datafusion::sql::sqlparser::parser::Parser::parse_sql(&dialect, sql)
        .ok()
        .and_then(|s| s.into_iter().next())
        .is_some_and(|s| match s {
            Statement::Query(q) => match *q.body {
                SetExpr::Select(select) => select.projection.iter().any(|p| {
                    matches!(
                        p,
                        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
                    )
                }),
                _ => false,
            },
            _ => false,
        });
    if wildcard {
        "`SELECT *`".into()
    } else {
        "a query without aggregation".into()
    }
}
