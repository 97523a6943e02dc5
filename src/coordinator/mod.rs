//! The coordinator: the analyst's process. It plans, splits, merges and
//! decodes; it never holds a federated row.
//!
//! The data path, in the order a query takes it:
//! - [`context`]: the catalog ([`context::FedContext`]); [`statement`]: its
//!   SQL entry point, with [`fed_statement`] recognising fedsql's own statements, [`ddl`]
//!   for `CREATE FEDERATED TABLE` and [`gate`] for what a served session
//!   may run;
//! - [`federated_table`]: a federated table's schema and its sites, with
//!   [`client_column`] for its virtual `_client` column;
//! - the exposure check ([`crate::protocol::exposure`]), then [`split`]: the
//!   cuts of a plan and each round's encoder and merge;
//! - [`rounds`]: every site encodes, then [`merge`] merges and decodes;
//!   [`secure`] relays a secure round's masks;
//! - [`analyst`]: who a statement runs for, carried in every site request;
//! - [`worker_client`] and [`worker_url`]: the [`crate::protocol::site::Site`]
//!   that talks to a remote worker;
//! - [`explain`] (`EXPLAIN FEDERATED`), [`dataframe`] (the DataFrame API),
//!   [`fit_scope`] (the rounds of one fit);
//! - [`function_docs`] (the documentation of fedsql's functions) and
//!   [`information_schema`] (which lists them, for `SHOW FUNCTIONS`).

pub(crate) mod analyst;
pub mod client_column;
pub(crate) mod context;
pub(crate) mod dataframe;
pub(crate) mod ddl;
pub(crate) mod dp;
pub(crate) mod explain;
pub(crate) mod fed_statement;
pub mod federated_table;
pub mod fit_scope;
pub(crate) mod fit_table;
pub(crate) mod function_docs;
pub(crate) mod gate;
pub(crate) mod information_schema;
pub(crate) mod merge;
pub(crate) mod rounds;
pub(crate) mod secure;
pub(crate) mod settings;
pub mod split;
pub(crate) mod statement;
pub(crate) mod worker_client;
pub(crate) mod worker_url;
