//! Mergeable aggregate functions for fedsql.
//!
//! Every function here has a fixed-size state that merges as a commutative
//! monoid, so fedsql can run its partial half at each client and merge the
//! states on the coordinator. [`register_all`] adds them to a context, and
//! [`is_bounded`] tells fedsql's exposure check that they are safe to run
//! over federated rows.

use datafusion::logical_expr::AggregateUDF;
use datafusion::prelude::SessionContext;

/// Every aggregate function of this crate.
pub fn all() -> Vec<AggregateUDF> {
    Vec::new()
}

/// Registers every aggregate function of this crate.
pub fn register_all(ctx: &SessionContext) {
    for udaf in all() {
        ctx.register_udaf(udaf);
    }
}

/// Whether `name` is one of this crate's (bounded-state) aggregates.
pub fn is_bounded(name: &str) -> bool {
    all()
        .iter()
        .any(|f| f.name() == name || f.aliases().iter().any(|a| a == name))
}
