//! The rounds of one iterative fit (GLM by IRLS) read the same rows each
//! time. A fit runs its queries under a [`FitScope`]; a client may then keep
//! the decoded input of the fit's encoder in memory, so that rounds after the
//! first do not read and decode its files again. What a client keeps never
//! leaves it, and it is dropped when the fit ends ([`FitScope`] is released
//! by the fit) or when another fit starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Marks the queries of one fit (a session config extension).
#[derive(Debug)]
pub struct FitScope {
    id: u64,
}

impl FitScope {
    /// A scope no other fit has.
    pub fn new() -> Arc<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Arc::new(Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Its identifier.
    pub fn id(&self) -> u64 {
        self.id
    }
}
