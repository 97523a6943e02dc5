//! The shell every table function that runs rounds shares (the models in
//! [`crate::models`], the statistics in [`crate::stats`]): one table that
//! computes its batch when the plan runs ([`deferred::deferred_table`]),
//! one options parser ([`options::Options`]), one way to report a bad
//! argument that keeps its error kind ([`arguments::argument_error`]), one
//! way to run a round ([`rounds::query`]); a notice is left with
//! [`FedContext::notice`](crate::coordinator::context::FedContext::notice).
//!
//! The functions themselves are leaves: they use this shell and the
//! coordinator, and the coordinator uses none of them; a composition root
//! ([`crate::session`]) registers them in every new session.

pub(crate) mod arguments;
pub(crate) mod deferred;
pub(crate) mod options;
pub(crate) mod rounds;
