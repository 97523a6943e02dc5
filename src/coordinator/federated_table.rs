//! Federated tables on the coordinator: a name, a schema and the sites.
//!
//! A [`FederatedTable`] is *schema only*: DataFusion plans queries against
//! it through its [`FederatedScan`] (registered in the catalog with this
//! table attached), but it holds no rows and its scan can never run. The
//! rows are reached only through its sites ([`Site`]s), which run a
//! validated encoder over their own data and hand back aggregate states.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;

use crate::coordinator::client_column;
use crate::protocol::federated_scan::FederatedScan;
use crate::protocol::site::Site;

/// The coordinator's view of a federated table: its schema and its clients.
pub struct FederatedTable {
    name: String,
    schema: SchemaRef,
    clients: Vec<Arc<dyn Site>>,
    /// The threshold of its secure rounds (its `secure_threshold` option);
    /// `None`: the default.
    secure_threshold: Option<usize>,
}

impl fmt::Debug for FederatedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FederatedTable")
            .field("name", &self.name)
            .field(
                "clients",
                &self.clients.iter().map(|c| c.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl FederatedTable {
    /// A federated table over the given clients, all of which serve
    /// `schema`; plans see it with the virtual `_client` column added
    /// (see [`crate::coordinator::client_column`]).
    pub fn new(name: impl Into<String>, schema: SchemaRef, clients: Vec<Arc<dyn Site>>) -> Self {
        Self {
            name: name.into(),
            schema: client_column::with_client_column(schema),
            clients,
            secure_threshold: None,
        }
    }

    /// The same table with the threshold of its secure rounds set.
    pub fn with_secure_threshold(mut self, threshold: Option<usize>) -> Self {
        self.secure_threshold = threshold;
        self
    }

    /// The threshold of its secure rounds, if its options set one.
    pub fn secure_threshold(&self) -> Option<usize> {
        self.secure_threshold
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    pub fn clients(&self) -> &[Arc<dyn Site>] {
        &self.clients
    }

    /// The table provider to register in a catalog: the table's
    /// [`FederatedScan`] with this table attached.
    pub fn into_provider(self) -> Arc<dyn TableProvider> {
        let scan = FederatedScan::new(self.name.clone(), Arc::clone(&self.schema));
        Arc::new(scan.with_attachment(Arc::new(self)))
    }

    /// The federated table behind a provider, if it is one.
    pub fn from_provider(provider: &dyn TableProvider) -> Option<&FederatedTable> {
        FederatedScan::of(provider)?
            .attachment()?
            .downcast_ref::<FederatedTable>()
    }
}
