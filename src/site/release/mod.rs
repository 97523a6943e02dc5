//! What may leave a site, and on which conditions.

pub mod covered;
pub mod dp;
pub mod dp_budget;
pub mod gate;
pub mod group_rows;
pub mod guarded;
pub mod identity;
pub mod joins;
pub mod never_fail;
pub mod policy;
pub mod secure;
pub mod shown_plan;
pub mod sketches;
