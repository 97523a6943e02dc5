//! The embedded site: a data owner's rows in local files or in memory.
//!
//! [`LocalClient`] runs encoders over local CSV or Parquet files (or
//! in-memory batches, for the bundled demo) in the DataFusion session of the
//! engine its maker hands it (see [`crate::site::engine`]), configured so
//! that the partial aggregate really runs over the rows (no
//! statistics shortcut, no skipping of partial aggregation that would ship
//! raw rows as "state"). A worker serves its tables through the same type.
//!
//! [`client`] holds what a site is and how it is made; [`pipeline`] how it
//! answers one encoder; [`answers`] the [`Site`](crate::protocol::site::Site)
//! contract over that pipeline.

mod answers;
mod client;
mod pipeline;

pub use client::{LocalClient, format_bytes};

pub use crate::site::engine::site_session;

pub use crate::error::EVALUATION_REFUSAL;
