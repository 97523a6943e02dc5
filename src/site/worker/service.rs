//! A worker's Flight service: each call authorized, every plan decoded and
//! checked here, whatever the coordinator checked, and every state it
//! releases logged.
//!
//! [`calls`] holds the service's state and what every call goes through
//! (authorization, limits, the checks and run of an encoder);
//! [`audited`] what the audit trail records of each encoder run;
//! [`actions`] the secure-aggregation setup, masked states, EXPLAIN and
//! how a site's error crosses the wire; [`flight`] maps each Flight call
//! and action to them; [`overview`] what the admin page shows of it.

mod actions;
mod audited;
mod calls;
mod flight;
mod overview;

pub(crate) use crate::site::worker::token_check::TokenCheck;
pub use calls::WorkerService;
pub(crate) use overview::Overview;
