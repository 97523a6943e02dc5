//! A site's row-reading work on a Ballista cluster (the `ballista` cargo
//! feature; see `site::cluster` for what stays in the worker).
//!
//! Ballista 55 takes an already-built physical plan as a job
//! (`execute_physical_plan`): the worker builds the site's partial
//! aggregate exactly as for its own files (the encoder admitted and
//! checked, the policy's guards and counts added) and sends it; the
//! scheduler only cuts it into stages. The states come back to the
//! worker, which releases them as for local data. [`codec`] carries
//! fedsql's site functions to the executors, [`client`] submits a job,
//! and [`processes`] starts the scheduler and executors of `fedsql
//! ballista ...`.

pub(crate) mod client;
pub(crate) mod codec;
pub mod processes;

pub(crate) use client::BallistaClient;
pub use processes::{
    RunningExecutor, RunningScheduler, start_executor, start_scheduler, start_scheduler_with,
};
pub(crate) use processes::{serve_executor, serve_scheduler};
