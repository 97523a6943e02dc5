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
//! interface, its request, and the messages between them. Above them,
//! [`frontend`] is what people and programs type at (the command line,
//! the REPL, `fedsql serve`), and a composition root registers the models
//! and statistics as table functions.
//!
//! # The library's API
//!
//! `pub` is kept for what a program embedding fedsql (or its integration
//! tests) uses; everything else is `pub(crate)` or private, and the
//! `unreachable_pub` lint keeps it so:
//! - [`FedContext`], [`FedDataFrame`], [`TableInfo`], [`FedError`],
//!   [`Result`]: the SQL entry point and its errors;
//! - [`protocol`]: the [`protocol::site::Site`] interface, its request and
//!   the encoder, state and Flight messages;
//! - [`site`]: an embedded site ([`site::local`]), its engine
//!   ([`site::engine`]), the release rules a data owner sets
//!   ([`site::release::policy`], [`site::release::dp`]) and the worker
//!   ([`site::worker`]);
//! - [`coordinator`]: federated tables ([`coordinator::federated_table`],
//!   [`coordinator::client_column`]), the split of a plan into rounds
//!   ([`coordinator::split`]) and a fit's scope ([`coordinator::fit_scope`]);
//! - [`frontend`]: the command line, the REPL, `fedsql serve`, output,
//!   script splitting and the demo table;
//! - [`models::fedsgd`], [`notices`], [`r_format`]: FedSGD's spec, the
//!   notices a statement leaves, R's number formatting;
//! - [`fuzzing`]: one entry point per input that crosses a trust boundary,
//!   for the fuzz targets (tests/fuzz/) and their seed corpus.
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
pub(crate) mod error;
pub(crate) mod formula;
pub mod frontend;
pub mod fuzzing;
pub mod models;
#[cfg(test)]
mod module_graph;
pub mod notices;
pub mod protocol;
pub mod r_format;
pub(crate) mod session;
pub mod site;
pub(crate) mod stats;
pub(crate) mod suggest;
pub(crate) mod table_function;

pub use coordinator::context::{FedContext, TableInfo};
pub use coordinator::dataframe::FedDataFrame;
pub use error::{FedError, Result};
