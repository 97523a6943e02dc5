//! A fit at one site: the same federated fit, in a session whose catalog
//! shows the source's federated table with that one client. The table keeps
//! its name (a site binds an encoder to its data by the table's name), so
//! the site sees an ordinary fit of its own rows and applies its own
//! disclosure policy to it (minimum rows, parameter ratio) as to any fit;
//! the other sites are not asked anything.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider};
use datafusion::common::Result as DfResult;
use datafusion::execution::session_state::SessionStateBuilder;

use crate::coordinator::context::FedContext;
use crate::coordinator::federated_table::FederatedTable;
use crate::error::{FedError, Result};
use crate::models::source::ModelSource;
use crate::protocol::site::Site;

/// The federated table a model source reads, and its clients.
pub(crate) struct SourceSites {
    /// Where the table sits in the catalog.
    reference: (String, String, String),
    table: Arc<FederatedTableParts>,
}

struct FederatedTableParts {
    name: String,
    schema: datafusion::arrow::datatypes::SchemaRef,
    clients: Vec<Arc<dyn Site>>,
}

impl SourceSites {
    /// The one federated table `source` reads (a table name, or a query
    /// over exactly one federated table).
    pub(crate) async fn of(ctx: &FedContext, source: &ModelSource, function: &str) -> Result<Self> {
        let state = ctx.session().state();
        let sql = format!("SELECT * FROM {}", source.from);
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(&sql, &dialect)?;
        let options = state.config().options();
        let (catalog, schema) = (
            options.catalog.default_catalog.clone(),
            options.catalog.default_schema.clone(),
        );
        let mut found = Vec::new();
        for reference in state.resolve_table_references(&statement)? {
            let resolved = reference.clone().resolve(&catalog, &schema);
            let Ok(provider) = ctx.session().table_provider(reference.clone()).await else {
                continue;
            };
            if let Some(table) = FederatedTable::from_provider(provider.as_ref()) {
                let parts = FederatedTableParts {
                    name: table.name().to_string(),
                    schema: table.schema(),
                    clients: table.clients().to_vec(),
                };
                let key = (
                    resolved.catalog.to_string(),
                    resolved.schema.to_string(),
                    resolved.table.to_string(),
                );
                if !found.iter().any(|f: &SourceSites| f.reference == key) {
                    found.push(SourceSites {
                        reference: key,
                        table: Arc::new(parts),
                    });
                }
            }
        }
        match found.len() {
            1 => Ok(found.pop().expect("one")),
            0 => Err(FedError::InvalidArgument(format!(
                "{function}: '{}' reads no federated table; a meta-analysis fits the model at each site of one",
                source.given
            ))),
            _ => Err(FedError::InvalidArgument(format!(
                "{function}: '{}' reads {} federated tables; a meta-analysis needs the sites of one",
                source.given,
                found.len()
            ))),
        }
    }

    /// The sites' names, in the table's order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.table
            .clients
            .iter()
            .map(|c| c.name().to_string())
            .collect()
    }

    /// `ctx` with the table narrowed to its client number `index`.
    pub(crate) fn at(&self, ctx: &FedContext, index: usize) -> Result<FedContext> {
        let client = Arc::clone(&self.table.clients[index]);
        let narrowed = FederatedTable::new(
            self.table.name.clone(),
            Arc::clone(&self.table.schema),
            vec![client],
        )
        .into_provider();
        let state = ctx.session().state();
        let catalogs: Arc<dyn CatalogProviderList> = Arc::new(OverlayCatalogs {
            inner: Arc::clone(state.catalog_list()),
            reference: self.reference.clone(),
            table: narrowed,
        });
        let state = SessionStateBuilder::new_from_existing(state)
            .with_catalog_list(catalogs)
            .build();
        Ok(FedContext::from_state(state))
    }
}

/// The catalogs, with one table replaced.
#[derive(Debug)]
struct OverlayCatalogs {
    inner: Arc<dyn CatalogProviderList>,
    reference: (String, String, String),
    table: Arc<dyn TableProvider>,
}

impl CatalogProviderList for OverlayCatalogs {
    fn register_catalog(
        &self,
        name: String,
        catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        self.inner.register_catalog(name, catalog)
    }

    fn catalog_names(&self) -> Vec<String> {
        self.inner.catalog_names()
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let inner = self.inner.catalog(name)?;
        if name != self.reference.0 {
            return Some(inner);
        }
        Some(Arc::new(OverlayCatalog {
            inner,
            schema: self.reference.1.clone(),
            table_name: self.reference.2.clone(),
            table: Arc::clone(&self.table),
        }))
    }
}

#[derive(Debug)]
struct OverlayCatalog {
    inner: Arc<dyn CatalogProvider>,
    schema: String,
    table_name: String,
    table: Arc<dyn TableProvider>,
}

impl CatalogProvider for OverlayCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.inner.schema_names()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let inner = self.inner.schema(name)?;
        if name != self.schema {
            return Some(inner);
        }
        Some(Arc::new(OverlaySchema {
            inner,
            table_name: self.table_name.clone(),
            table: Arc::clone(&self.table),
        }))
    }
}

#[derive(Debug)]
struct OverlaySchema {
    inner: Arc<dyn SchemaProvider>,
    table_name: String,
    table: Arc<dyn TableProvider>,
}

#[async_trait]
impl SchemaProvider for OverlaySchema {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if name == self.table_name {
            return Ok(Some(Arc::clone(&self.table)));
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        name == self.table_name || self.inner.table_exist(name)
    }
}
