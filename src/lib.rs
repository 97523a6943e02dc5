//! fedsql: federated SQL analytics over data that stays at its clients.
//!
//! Analysts register *federated tables* whose rows live at several clients
//! and query them with SQL (or the [`FedDataFrame`] API) as if they were one
//! table. DataFusion plans each query; fedsql splits every aggregate over
//! federated rows into an **encoder** run at each client over its own rows
//! ([`encoder`], [`client`]), a **merge** of the clients' fixed-size states
//! (a commutative monoid), and a shared-only **decoder** ([`round`]). The
//! answer equals the same query on all rows put together, and only aggregate
//! states ever leave a client; queries that would need raw rows are refused
//! before anything runs ([`exposure`]).
//!
//! ```no_run
//! # async fn demo() -> fedsql::Result<()> {
//! let ctx = fedsql::FedContext::new();
//! fedsql::demo::register_demo(&ctx)?;
//! let df = ctx.sql("SELECT region, avg(systolic) AS mean_sbp FROM clinic GROUP BY region").await?;
//! let batches = df.collect().await?;
//! # Ok(()) }
//! ```

pub mod chart;
pub mod cli;
pub mod client;
pub mod context;
pub mod dataframe;
pub mod ddl;
pub mod demo;
pub mod encoder;
pub mod error;
pub mod explain;
pub mod exposure;
pub mod federated_table;
pub mod fit_cache;
pub mod formula;
pub mod matrix_display;
pub mod models;
pub mod notices;
pub mod pgwire;
pub mod print;
pub mod remote;
pub mod repl;
pub mod round;
pub mod secure;
pub mod statements;

pub use context::{FedContext, TableInfo};
pub use dataframe::FedDataFrame;
pub use error::{FedError, Result};
