//! fedsql's `information_schema`: DataFusion's, with the functions fedsql
//! adds described in it.
//!
//! DataFusion lists a table function in `information_schema.routines`
//! without a description (its table functions carry none), and gives
//! `information_schema.parameters` rows only for the example argument types
//! of a signature, so an aggregate with a user-defined signature — every
//! one of fedsql's — has none there, and `SHOW FUNCTIONS`, which joins the
//! two, leaves it out. This schema serves every table from DataFusion's own
//! provider and completes those two from the functions' documentation
//! ([`crate::coordinator::function_docs`]): a table function's description
//! and syntax in `routines`, and an undocumented-by-signature aggregate's
//! parameters (named as its documentation names them, of type `ANY`) and
//! its result in `parameters`. `SHOW FUNCTIONS`, planned by DataFusion from
//! the two tables, then lists every function fedsql adds.
//!
//! The session registers it as the schema `information_schema` of its
//! default catalog, with DataFusion's built-in one turned off (which
//! would otherwise answer first).

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StringArray, UInt8Array, UInt64Array,
};
use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::catalog::information_schema::{
    INFORMATION_SCHEMA_TABLES, InformationSchemaProvider,
};
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{MemTable, TableType};
use datafusion::execution::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{ExecutionPlan, collect};

use crate::coordinator::function_docs::{
    DocumentedFunction, FunctionKind, documented_functions, table_function_doc,
};

/// The schema `information_schema` (see the module docs).
#[derive(Debug)]
pub(crate) struct FedInformationSchema {
    /// The session's catalogs (weak: this schema is one of them).
    catalogs: Weak<dyn CatalogProviderList>,
}

impl FedInformationSchema {
    pub(crate) fn new(catalogs: &Arc<dyn CatalogProviderList>) -> Self {
        Self {
            catalogs: Arc::downgrade(catalogs),
        }
    }

    /// DataFusion's provider over the same catalogs.
    fn datafusion(&self) -> Option<InformationSchemaProvider> {
        self.catalogs.upgrade().map(InformationSchemaProvider::new)
    }
}

#[async_trait]
impl SchemaProvider for FedInformationSchema {
    fn table_names(&self) -> Vec<String> {
        INFORMATION_SCHEMA_TABLES
            .iter()
            .map(|t| (*t).to_string())
            .collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let Some(datafusion) = self.datafusion() else {
            return Ok(None);
        };
        let table = datafusion.table(name).await?;
        let listing = match name.to_ascii_lowercase().as_str() {
            "routines" => Listing::Routines,
            "parameters" => Listing::Parameters,
            _ => return Ok(table),
        };
        Ok(table.map(|table| {
            Arc::new(DocumentedTable {
                listing,
                schema: table.schema(),
                catalogs: self.catalogs.clone(),
            }) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        INFORMATION_SCHEMA_TABLES.contains(&name.to_ascii_lowercase().as_str())
    }
}

/// Which of the two completed tables.
#[derive(Debug, Clone, Copy)]
enum Listing {
    Routines,
    Parameters,
}

/// `routines` or `parameters`: DataFusion's rows, completed.
#[derive(Debug)]
struct DocumentedTable {
    listing: Listing,
    schema: SchemaRef,
    catalogs: Weak<dyn CatalogProviderList>,
}

#[async_trait]
impl TableProvider for DocumentedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = session
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| {
                DataFusionError::Internal("information_schema needs a SessionState".into())
            })?;
        let catalogs = self.catalogs.upgrade().ok_or_else(|| {
            DataFusionError::Internal("information_schema outlived its session".into())
        })?;
        let name = match self.listing {
            Listing::Routines => "routines",
            Listing::Parameters => "parameters",
        };
        let datafusion = InformationSchemaProvider::new(catalogs)
            .with_table_functions(state.table_functions().clone());
        let table = datafusion
            .table(name)
            .await?
            .ok_or_else(|| DataFusionError::Internal(format!("no information_schema.{name}")))?;
        let plan = table.scan(session, None, &[], None).await?;
        let batches = collect(plan, session.task_ctx()).await?;
        let batches = match self.listing {
            Listing::Routines => batches
                .iter()
                .map(|b| describe_table_functions(b, state))
                .collect::<Result<Vec<_>>>()?,
            Listing::Parameters => {
                let mut batches = batches;
                let listed: HashSet<String> = batches
                    .iter()
                    .flat_map(|b| strings(b, "specific_name"))
                    .collect();
                let missing: Vec<DocumentedFunction> = documented_functions(state)
                    .into_iter()
                    .filter(|f| f.kind == FunctionKind::Aggregate && !listed.contains(&f.name))
                    .collect();
                batches.push(parameters_of(&missing, &self.schema, state)?);
                batches
            }
        };
        MemTable::try_new(Arc::clone(&self.schema), vec![batches])?
            .scan(session, projection, filters, limit)
            .await
    }
}

/// The values of a text column of a batch (empty for a NULL).
fn strings(batch: &RecordBatch, column: &str) -> Vec<String> {
    batch
        .column_by_name(column)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .map(|c| {
            (0..c.len())
                .map(|i| {
                    if c.is_null(i) {
                        String::new()
                    } else {
                        c.value(i).to_string()
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A `routines` batch with each documented table function's description
/// and syntax filled in.
fn describe_table_functions(batch: &RecordBatch, state: &SessionState) -> Result<RecordBatch> {
    let names = strings(batch, "routine_name");
    let kinds = strings(batch, "function_type");
    let doc = |row: usize| {
        (kinds[row] == "TABLE")
            .then(|| state.table_functions().get(&names[row]))
            .flatten()
            .and_then(|f| table_function_doc(f))
    };
    let fill = |column: &str, text: &dyn Fn(&fedsql_udfs::function_doc::FunctionDoc) -> String| {
        let old = strings(batch, column);
        let array = batch.column_by_name(column);
        let values: StringArray = (0..batch.num_rows())
            .map(|row| match doc(row) {
                Some(doc) => Some(text(doc)),
                None => array.filter(|a| !a.is_null(row)).map(|_| old[row].clone()),
            })
            .collect();
        Arc::new(values) as ArrayRef
    };
    let columns = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| match field.name().as_str() {
            "description" => fill("description", &|doc| doc.documentation().description),
            "syntax_example" => fill("syntax_example", &|doc| doc.syntax.to_string()),
            _ => Arc::clone(column),
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// `parameters` rows for aggregates whose signature gives none: one IN row
/// per documented argument (type `ANY`) and one OUT row with the result
/// type for numeric arguments (`ANY` where that is not defined).
fn parameters_of(
    functions: &[DocumentedFunction],
    schema: &SchemaRef,
    state: &SessionState,
) -> Result<RecordBatch> {
    let options = state.config_options();
    let (catalog, schema_name) = (
        options.catalog.default_catalog.clone(),
        options.catalog.default_schema.clone(),
    );
    // (name, position, mode, parameter name, data type)
    let mut rows: Vec<(String, u64, &str, Option<String>, String)> = Vec::new();
    for f in functions {
        for (i, (argument, _)) in f.doc.arguments.iter().enumerate() {
            rows.push((
                f.name.clone(),
                i as u64 + 1,
                "IN",
                Some(argument.to_string()),
                "ANY".into(),
            ));
        }
        let result = state
            .aggregate_functions()
            .get(&f.name)
            .and_then(|udaf| {
                let fields: Vec<_> = (0..f.doc.arguments.len())
                    .map(|i| {
                        Arc::new(Field::new(
                            format!("arg_{i}"),
                            datafusion::arrow::datatypes::DataType::Float64,
                            true,
                        ))
                    })
                    .collect();
                udaf.return_field(&fields).ok()
            })
            .map(|field| {
                datafusion::common::types::NativeType::from(field.data_type().clone()).to_string()
            })
            .unwrap_or_else(|| "ANY".into());
        rows.push((f.name.clone(), 1, "OUT", None, result));
    }
    let text = |values: Vec<Option<String>>| Arc::new(StringArray::from(values)) as ArrayRef;
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|field| match field.name().as_str() {
            "specific_catalog" => text(rows.iter().map(|_| Some(catalog.clone())).collect()),
            "specific_schema" => text(rows.iter().map(|_| Some(schema_name.clone())).collect()),
            "specific_name" => text(rows.iter().map(|r| Some(r.0.clone())).collect()),
            "ordinal_position" => {
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1))) as ArrayRef
            }
            "parameter_mode" => text(rows.iter().map(|r| Some(r.2.to_string())).collect()),
            "parameter_name" => text(rows.iter().map(|r| r.3.clone()).collect()),
            "data_type" => text(rows.iter().map(|r| Some(r.4.clone())).collect()),
            "is_variadic" => Arc::new(BooleanArray::from(vec![false; rows.len()])) as ArrayRef,
            "rid" => Arc::new(UInt8Array::from(vec![0u8; rows.len()])) as ArrayRef,
            _ => datafusion::arrow::array::new_null_array(field.data_type(), rows.len()),
        })
        .collect();
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}
