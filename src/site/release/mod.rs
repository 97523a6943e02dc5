//! What may leave a site, and on which conditions: the part of the site a
//! data protection officer reads.
//!
//! A site receives an *encoder* from the analyst's coordinator: a query
//! plan that reads the site's rows and ends in one aggregate. The site
//! runs it and sends back the aggregate's *state* — sums, counts, sketches
//! — never rows. Everything that decides whether a state may leave, and in
//! what form, is in this folder; how fast the site computes it is in
//! [`crate::site::engine`], which this folder does not depend on (a test
//! in [`crate::site`] checks it). The pipeline that strings the steps
//! together is [`crate::site::local::LocalClient`]; its steps, in order:
//!
//! 1. **Gate** ([`gate`]): the plan must have a shape the site can reason
//!    about — a scan, filters and projections, joins with small shared
//!    tables of unique keys, and exactly one aggregate at the root. Any
//!    other operator (a sort, limit, window, nested aggregate, a function
//!    that makes rows) is refused before anything runs. Under a policy,
//!    [`policy`] also checks the aggregates against the data owner's rules
//!    (e.g. min/max only where allowed), and [`joins`] checks that no join
//!    repeats a row.
//! 2. **Never-fail rewrite** ([`never_fail`]): under a policy, every
//!    expression that could fail on one person's value (a division by
//!    zero, a bad cast) is rewritten to give NULL instead, so whether a
//!    query fails cannot reveal a value.
//! 3. **Run**: the site runs the plan (in [`crate::site::engine`]). Under
//!    a policy each aggregate is wrapped ([`guarded`]) so that the same pass
//!    also counts the rows behind each group and the values of each input
//!    ([`group_rows`]).
//! 4. **Counts and k** ([`policy`], [`group_rows`]): every released group
//!    must cover 0 or at least `min_group_rows` (k) rows, every aggregate
//!    input as many non-NULL (and non-constant) values, models at most a
//!    ratio of parameters to rows; the counts are then dropped — they never
//!    leave. (What a worker logs as the rows a state covers is counted by
//!    [`covered`].)
//! 5. **Sketches** ([`sketches`]): quantile sketches (t-digests) are
//!    coarsened so that every centroid summarizes at least k values,
//!    histogram bins of fewer than k rows are folded together, and a
//!    sketch's exact min and max are hidden unless the policy allows
//!    extremes.
//! 6. **Differential privacy** ([`dp`], [`dp_budget`]): a DP aggregate's ε
//!    is paid from the analyst's budget in the ledger *before* the plan
//!    runs (a failed run spends it too), and calibrated noise is added to
//!    the state before it leaves.
//! 7. **Secure masks** ([`secure`], [`identity`]): for a secure sum the
//!    state leaves only masked, with masks agreed with the other sites
//!    (whose signed identity keys the data owner may list), so the
//!    coordinator sees only the sum over all sites.
//! 8. **Release**: the state batch, checked once more against the
//!    encoder's declared state schema, is handed to the coordinator.
//!
//! What the site explains of its plan names none of its files
//! ([`shown_plan`]); errors under a policy are one fixed refusal.
//!
//! This folder uses nothing of [`crate::site::engine`]: the engine uses
//! the release rules (the counts the policy checks), never the other way
//! round (a test in [`crate::site`] checks it).

pub(crate) mod covered;
pub mod dp;
pub mod dp_budget;
pub mod gate;
pub(crate) mod group_rows;
pub(crate) mod guarded;
pub mod identity;
pub(crate) mod joins;
pub(crate) mod never_fail;
pub mod policy;
pub mod secure;
pub(crate) mod shown_plan;
pub(crate) mod sketches;
