//! How a table function runs its rounds: [`query`] runs one (and records
//! it when `EXPLAIN FEDERATED` asks), and [`recording_program`] is the
//! `EXPLAIN FEDERATED` of a function that runs its rounds once to show
//! them. A function leaves a notice with
//! [`FedContext::notice`](crate::coordinator::context::FedContext::notice).

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use futures::future::BoxFuture;

use crate::coordinator::context::FedContext;
use crate::coordinator::fit_table::Program;
use crate::error::Result;
use crate::notices::Notices;

/// The `EXPLAIN FEDERATED` program of a function that `run` computes: it
/// runs it once with a recorder in the session and shows the federated
/// plan of each round it ran. Rounds that repeat one aggregate with new
/// constants (the iterations of k-means or of a Newton fit) are shown once.
pub(crate) fn recording_program<R>(heading: String, run: R) -> Program
where
    R: Fn(FedContext) -> BoxFuture<'static, Result<RecordBatch>> + Send + Sync + 'static,
{
    let run = Arc::new(run);
    Arc::new(move |ctx: FedContext| {
        let (run, heading) = (Arc::clone(&run), heading.clone());
        Box::pin(async move {
            let recorder = Arc::new(RecordedRounds::default());
            let mut state = ctx.session().state();
            state.config_mut().set_extension(Arc::clone(&recorder));
            // What the rounds would tell the analyst belongs to running
            // the function, not to explaining it.
            state
                .config_mut()
                .set_extension(Arc::new(Notices::default()));
            run(FedContext::from_state(state)).await?;
            let rounds = recorder.0.lock().expect("not poisoned").clone();
            let mut out = format!(
                "== Program of {heading}: {} federated round(s) (EXPLAIN runs them: a round may depend on what the earlier ones returned) ==\n",
                rounds.len()
            );
            let mut shown: Vec<(String, usize)> = Vec::new();
            for (i, sql) in rounds.iter().enumerate() {
                let shape = shape_of(sql);
                if let Some((_, first)) = shown.iter().find(|(s, _)| *s == shape) {
                    out += &format!(
                        "#### Step {}: the aggregate of step {first} again, with the coordinator's new constants\n",
                        i + 1
                    );
                    continue;
                }
                shown.push((shape, i + 1));
                out += &explain_step(&ctx, &format!("Step {}: one round", i + 1), sql).await?;
            }
            Ok(out)
        })
    })
}

/// A query with its string and number literals blanked: two rounds of the
/// same shape differ only in the constants the coordinator sent.
fn shape_of(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            out.push_str("'?'");
            while let Some(d) = chars.next() {
                if d == '\'' {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        break;
                    }
                }
            }
        } else if c.is_ascii_digit() || (c == '-' && chars.peek().is_some_and(char::is_ascii_digit))
        {
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.' || *d == 'e')
            {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

/// The queries of the rounds a table function ran, when `EXPLAIN
/// FEDERATED` asks (a session extension).
#[derive(Debug, Default)]
struct RecordedRounds(std::sync::Mutex<Vec<String>>);

/// Whether this context records its rounds' SQL (an EXPLAIN of a program).
pub(crate) fn records_rounds(ctx: &FedContext) -> bool {
    // Read in place: a copy of the session state per round costs more
    // than a rebound round.
    ctx.session()
        .state_ref()
        .read()
        .config()
        .get_extension::<RecordedRounds>()
        .is_some()
}

/// Runs the query of one round and returns its batches (empty ones
/// dropped), recording it for `EXPLAIN FEDERATED` of the function that runs
/// it: the one way a table function runs a query.
pub(crate) async fn query(ctx: &FedContext, sql: &str) -> Result<Vec<RecordBatch>> {
    if let Some(recorder) = ctx
        .session()
        .state()
        .config()
        .get_extension::<RecordedRounds>()
    {
        recorder
            .0
            .lock()
            .expect("not poisoned")
            .push(sql.to_string());
    }
    let batches = ctx.sql(sql).await?.collect().await?;
    Ok(batches.into_iter().filter(|b| b.num_rows() > 0).collect())
}

/// One step of a program: a heading, then `EXPLAIN FEDERATED` of the
/// query the step runs (planned, not run).
pub(crate) async fn explain_step(ctx: &FedContext, heading: &str, sql: &str) -> Result<String> {
    let df = ctx.session().sql(sql).await?;
    let text = ctx.explain_plan(df, "a model round").await?;
    Ok(format!("#### {heading}\n{text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_of_one_shape_differ_only_in_constants() {
        assert_eq!(
            shape_of("SELECT count(*) FROM t WHERE x < 3.5e1 AND y = 'a''b'"),
            shape_of("SELECT count(*) FROM t WHERE x < -2 AND y = 'c'")
        );
        assert_ne!(
            shape_of("SELECT sum(x) FROM t"),
            shape_of("SELECT sum(y) FROM t")
        );
    }
}
