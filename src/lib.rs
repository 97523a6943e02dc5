//! fedsql: federated SQL analytics over data that stays at its clients.
//!
//! Analysts register *federated tables* whose rows live at several clients
//! and query them with SQL (or the [`FedDataFrame`] API) as if they were one
//! table. DataFusion plans each query; fedsql splits every aggregate over
//! federated rows into an **encoder** run at each client over its own rows
//! ([`protocol::encoder`], [`site`]), a **merge** of the clients' fixed-size
//! states (a commutative monoid), and a shared-only **decoder**
//! ([`coordinator::merge`]). The answer equals the same query on all rows
//! put together, and only aggregate states ever leave a client; queries that
//! would need raw rows are refused before anything runs
//! ([`protocol::exposure`]).
//!
//! The code is laid out along the trust boundary: [`site`] is everything
//! that runs beside the data, [`coordinator`] is the analyst's process, and
//! [`protocol`] is what the two agree on: the [`protocol::site::Site`]
//! interface, its request, and the messages between them.
//!
//! ```no_run
//! # async fn demo() -> fedsql::Result<()> {
//! let ctx = fedsql::FedContext::new();
//! fedsql::frontend::demo::register_demo(&ctx)?;
//! let df = ctx.sql("SELECT region, avg(systolic) AS mean_sbp FROM clinic GROUP BY region").await?;
//! let batches = df.collect().await?;
//! # Ok(()) }
//! ```

pub mod coordinator;
pub mod error;
pub mod formula;
pub mod frontend;
pub mod models;
#[cfg(test)]
mod module_graph;
pub mod notices;
pub mod protocol;
pub mod r_format;
pub mod session;
pub mod site;
pub mod stats;
pub mod suggest;
pub mod table_function;

pub use coordinator::context::{FedContext, TableInfo};
pub use coordinator::dataframe::FedDataFrame;
pub use error::{FedError, Result};
