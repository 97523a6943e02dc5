//! `life_table(config, time, event)`: counts of events and censorings per
//! interval of a declared time grid, as a mergeable aggregate; state: a list
//! of 6 + 2m counts for m intervals, whatever the rows (m is fixed by the
//! config's grid, never by the data).
//!
//! `config` is `breaks=0,30,60,90` (increasing). The intervals are
//! (b0, b1], (b1, b2], ...: an event or a censoring at b1 counts in the
//! first. `event` is 1 (event) or 0 (censored). The counts: rows used,
//! rows with a negative time, rows whose event is neither 0 nor 1, rows at
//! or before b0, rows after the last break, whether any time falls strictly
//! inside an interval (a 0/1 flag, merged by max: then the grid groups
//! distinct times, and Kaplan–Meier on it is not R's `survfit`), then the
//! events and the censorings of each interval. The number at risk just
//! after b_i is the
//! rows in the intervals from i + 1 on plus those after the last break, so
//! the coordinator needs nothing else for Kaplan–Meier or the log-rank test.
//! Rows with a NULL time or event are dropped.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use crate::flat_state;
use crate::function_doc::{FunctionDoc, FunctionFamily};

/// Counts before the per-interval ones.
pub const HEADER: usize = 6;

/// Where the off-grid flag is in the state (merged by max, not summed).
const OFF_GRID: usize = 5;

/// Reads `breaks=...` (comma-separated, strictly increasing).
pub fn decode_breaks(config: &str) -> std::result::Result<Vec<f64>, String> {
    let list = config
        .strip_prefix("breaks=")
        .ok_or("life_table config must be breaks=b0,b1,...")?;
    let breaks: Vec<f64> = list
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .map_err(|e| format!("bad break `{v}`: {e}"))
        })
        .collect::<std::result::Result<_, _>>()?;
    if breaks.len() < 2 {
        return Err("a time grid needs at least two breaks".into());
    }
    if let Some(w) = breaks
        .windows(2)
        .find(|w| w[0] >= w[1] || w[0].is_nan() || w[1].is_nan())
    {
        return Err(format!(
            "breaks must be increasing: {} is followed by {}",
            w[0], w[1]
        ));
    }
    Ok(breaks)
}

/// The config string for a grid.
pub fn encode_breaks(breaks: &[f64]) -> String {
    let values: Vec<String> = breaks.iter().map(|b| format!("{b:?}")).collect();
    format!("breaks={}", values.join(","))
}

/// The merged counts of one life table.
#[derive(Debug, Clone, PartialEq)]
pub struct LifeTable {
    pub rows: f64,
    pub negative: f64,
    pub invalid_event: f64,
    pub before: f64,
    pub beyond: f64,
    /// Greater than 0 when some time falls strictly inside an interval:
    /// the grid groups distinct times.
    pub off_grid: f64,
    pub events: Vec<f64>,
    pub censored: Vec<f64>,
}

impl LifeTable {
    /// Reads the flat layout of m intervals.
    pub fn from_slice(values: &[f64]) -> Self {
        let m = (values.len() - HEADER) / 2;
        Self {
            rows: values[0],
            negative: values[1],
            invalid_event: values[2],
            before: values[3],
            beyond: values[4],
            off_grid: values[OFF_GRID],
            events: values[HEADER..HEADER + m].to_vec(),
            censored: values[HEADER + m..HEADER + 2 * m].to_vec(),
        }
    }

    /// The number at risk at the start of each interval.
    pub fn at_risk(&self) -> Vec<f64> {
        let m = self.events.len();
        let mut risk = vec![0.0; m];
        let mut after = self.beyond;
        for i in (0..m).rev() {
            after += self.events[i] + self.censored[i];
            risk[i] = after;
        }
        risk
    }

    /// Whether the grid groups distinct times (some time falls strictly
    /// inside an interval).
    pub fn groups_times(&self) -> bool {
        self.off_grid > 0.0
    }
}

/// `life_table(config, time, event)`.
pub fn life_table() -> AggregateUDF {
    AggregateUDF::from(LifeTableAggregate {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct LifeTableAggregate {
    signature: Signature,
}

impl AggregateUDFImpl for LifeTableAggregate {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        "life_table"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if arg_types.len() != 3 {
            return datafusion::common::plan_err!("life_table(config, time, event)");
        }
        flat_state::coerce_step_arguments(self.name(), "config, time, event", 1, arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(flat_state::result_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        // The grid is in the config, a constant the state's type cannot
        // see: the state is a list of exactly 6 + 2m counts.
        let item = Arc::new(Field::new_list_field(DataType::Float64, true));
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "interval_counts"),
            DataType::List(item),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let breaks = decode_breaks(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let m = breaks.len() - 1;
        Ok(Box::new(LifeTableAccumulator {
            breaks,
            counts: vec![0.0; HEADER + 2 * m],
        }))
    }
}

#[derive(Debug)]
struct LifeTableAccumulator {
    breaks: Vec<f64>,
    counts: Vec<f64>,
}

impl Accumulator for LifeTableAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let columns = crate::comoments::complete_rows(&values[1..])?;
        let time = columns[0].as_primitive::<Float64Type>().values();
        let event = columns[1].as_primitive::<Float64Type>().values();
        let m = self.breaks.len() - 1;
        let last = self.breaks[m];
        for (&t, &e) in time.iter().zip(event.iter()) {
            self.counts[0] += 1.0;
            if t < 0.0 || t.is_nan() {
                self.counts[1] += 1.0;
                continue;
            }
            if e != 0.0 && e != 1.0 {
                self.counts[2] += 1.0;
                continue;
            }
            if t <= self.breaks[0] {
                self.counts[3] += 1.0;
            } else if t > last {
                self.counts[4] += 1.0;
            } else {
                // The first break >= t closes t's interval.
                let upper = self.breaks.partition_point(|&b| b < t);
                if self.breaks[upper] != t {
                    self.counts[OFF_GRID] = 1.0;
                }
                let interval = upper - 1;
                let slot = if e == 1.0 { HEADER } else { HEADER + m };
                self.counts[slot + interval] += 1.0;
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            let values = lists.value(row);
            let values = values.as_primitive::<Float64Type>().values();
            if values.len() != self.counts.len() {
                return exec_err!(
                    "life_table state of {} values, expected {}",
                    values.len(),
                    self.counts.len()
                );
            }
            for (i, (total, v)) in self.counts.iter_mut().zip(values.iter()).enumerate() {
                if i == OFF_GRID {
                    *total = total.max(*v);
                } else {
                    *total += v;
                }
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![flat_state::result_value(self.counts.clone())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.counts.clone()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * (self.counts.len() + self.breaks.len())
    }
}

/// The documentation of `life_table`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "Counts of events and censorings per interval (b0, b1], (b1, b2], ... of a declared time grid (the round of `kaplan_meier` and `logrank_test`).",
    syntax: "life_table('breaks=b0,b1,...,bm', time, event)",
    arguments: &[
        (
            "config",
            "a constant `breaks=` list, increasing, separated by commas",
        ),
        (
            "time",
            "the non-negative time; rows with a NULL time or event are dropped",
        ),
        ("event", "1 for an event, 0 for a censoring"),
    ],
    options: &[],
    returns: "the merged counts as `list<float64>`: rows used, negative times, bad events, rows at or before b0, rows after bm, whether a time falls strictly inside an interval (1 or 0), then the events and the censorings of each interval",
    releases: "6 + 2m counts for m intervals, whatever its rows (one of them a 0/1 flag: whether the grid groups distinct times).",
    example: "SELECT life_table('breaks=0,50,70,100', age, event) AS counts FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaks_must_increase() {
        assert_eq!(decode_breaks("breaks=0,1.5,3").unwrap(), [0.0, 1.5, 3.0]);
        assert!(decode_breaks("breaks=0,3,3").is_err());
        assert!(decode_breaks("breaks=0").is_err());
        let breaks = [0.0, 1.0 / 3.0, 1e10];
        assert_eq!(decode_breaks(&encode_breaks(&breaks)).unwrap(), breaks);
    }

    #[test]
    fn at_risk_counts_everyone_after_the_interval_start() {
        // 2 intervals; 1 row beyond the grid.
        let t = LifeTable::from_slice(&[6.0, 0.0, 0.0, 1.0, 1.0, 0.0, 2.0, 1.0, 0.0, 1.0]);
        assert_eq!(t.at_risk(), [5.0, 3.0]);
        assert!(!t.groups_times());
    }

    #[tokio::test]
    async fn the_off_grid_flag_says_whether_the_grid_groups_times() {
        use datafusion::arrow::array::{Float64Array, RecordBatch};
        use datafusion::arrow::datatypes::{Field, Schema};
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_udaf(life_table());
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Float64, false),
            Field::new("e", DataType::Float64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Float64Array::from(vec![1.0, 2.0, 2.0, 2.5])),
                Arc::new(Float64Array::from(vec![1.0, 0.0, 1.0, 1.0])),
            ],
        )
        .unwrap();
        ctx.register_batch("s", batch).unwrap();
        let flag = |breaks: &'static str, filter: &'static str| {
            let ctx = ctx.clone();
            async move {
                let sql =
                    format!("SELECT life_table('breaks={breaks}', t, e) FROM s WHERE {filter}");
                let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                let list = batches[0].column(0).as_list::<i32>().value(0);
                LifeTable::from_slice(list.as_primitive::<Float64Type>().values())
            }
        };
        assert!(!flag("0,1,2,3", "t <> 2.5").await.groups_times());
        assert!(flag("0,1,2,3", "true").await.groups_times());
        assert!(flag("0,3", "true").await.groups_times());
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        crate::testing::assert_split_invariant(
            "life_table('breaks=999,1000,1002,1004.5', a, CASE WHEN b > 0 THEN 1 ELSE 0 END)",
        )
        .await;
    }
}
