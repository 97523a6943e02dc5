//! What both sides of the boundary agree on: the coordinator and the sites.
//!
//! - [`encoder`]: the encoder as a plain message (a validated plan that
//!   names its federated table) and the state batch, the only thing a site
//!   hands back;
//! - [`compact`]: a state holds only the bytes of its own rows;
//! - [`exposure`]: the validation of a plan, which the coordinator runs
//!   before it sends an encoder and every site runs again on receipt;
//! - [`federated_scan`]: the federated table as a plan sees it, a name and
//!   a schema;
//! - [`secure`]: the messages and the state layout of secure aggregation;
//! - [`rebind`]: a planned round with new constants (the later rounds of
//!   a fit);
//! - [`site`]: the interface a site answers ([`site::Site`]) and the
//!   request it takes ([`site::SiteRequest`]: an encoder and the analyst
//!   it runs for);
//! - [`flight`] and [`codec`]: the Flight protocol between a coordinator
//!   and a worker, and plans as bytes.
//!
//! Nothing here depends on either side.

pub mod codec;
pub(crate) mod compact;
pub(crate) mod dp;
pub mod encoder;
pub(crate) mod exposure;
pub(crate) mod federated_scan;
pub mod flight;
pub(crate) mod rebind;
pub mod secure;
pub mod site;
