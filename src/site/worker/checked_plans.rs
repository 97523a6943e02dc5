//! The encoders a worker has split and checked, by the plan it received.
//!
//! The rounds of a fit, and a program's repeated queries, send the same
//! plan again and again; splitting it (a physical plan of the cut, to find
//! its partial aggregate and state) costs more than a small round's data.
//! A plan that reads nothing but its federated table is split once and its
//! encoder reused; a plan with a shared table is split every time, since a
//! plan's equality does not look at a table's rows.

use std::collections::VecDeque;
use std::sync::Mutex;

use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;

use crate::error::Result;
use crate::protocol::encoder::Encoder;
use crate::site::engine::reads_one_table;

/// How many split plans a worker keeps (the oldest go first).
const KEPT: usize = 32;

/// Split plans, most recent last.
#[derive(Debug, Default)]
pub(crate) struct CheckedPlans {
    kept: Mutex<VecDeque<(LogicalPlan, Encoder)>>,
}

impl CheckedPlans {
    /// The encoder of `plan` (outside any fit), split anew or as before.
    pub(crate) async fn split(&self, state: &SessionState, plan: &LogicalPlan) -> Result<Encoder> {
        let cacheable = reads_one_table(plan);
        if cacheable {
            let kept = self.kept.lock().expect("not poisoned");
            if let Some((_, encoder)) = kept.iter().find(|(p, _)| p == plan) {
                return Ok(encoder.clone());
            }
        }
        let (encoder, _) = Encoder::split(state, plan).await?;
        if cacheable {
            let mut kept = self.kept.lock().expect("not poisoned");
            if kept.len() >= KEPT {
                kept.pop_front();
            }
            kept.push_back((plan.clone(), encoder.clone()));
        }
        Ok(encoder)
    }
}
