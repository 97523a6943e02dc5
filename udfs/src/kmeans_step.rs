//! `kmeans_step(config, x1, ..., xp)`: one round of Lloyd's k-means as a
//! mergeable aggregate; state: per centre, the count, the sum of its rows
//! and their within sum of squares, and the number of rows that changed
//! cluster — a list of k × (p + 2) + 1 floats whatever the rows (k, the
//! number of centres, is fixed by the config).
//!
//! The only shared input is `config`, a constant string with the current
//! centres, row by row: `centers=1.5,2;3,4.25` (floats written so that they
//! round-trip exactly). Each row goes to the nearest centre (squared
//! Euclidean distance; the first centre wins a tie, as R's `kmeans` does).
//! `previous=...` (same layout, `|`-separated from the rest) are the last
//! round's centres: the state then ends with the number of rows whose
//! nearest centre changed — Lloyd has converged when none did, as R's
//! `kmeans(algorithm = "Lloyd")` decides. `measure=...` measures the within
//! sum of squares around other centres than those that assign the rows —
//! R's result when Lloyd stops at `iter.max`: the last assignment, around
//! the moved centres. Rows with a NULL in any column are dropped.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use crate::flat_state;
use crate::function_doc::{DocOption, FunctionDoc, FunctionFamily};

/// What the coordinator sends for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct KmeansConfig {
    /// The centres that assign the rows, k × p.
    pub centers: Vec<Vec<f64>>,
    /// The last round's centres, to count the rows that changed cluster.
    pub previous: Option<Vec<Vec<f64>>>,
    /// The centres the within sum of squares is measured around (default: `centers`).
    pub measure: Option<Vec<Vec<f64>>>,
}

/// The index of the nearest centre (the first of equally near ones).
fn nearest(centers: &[Vec<f64>], x: &[&[f64]], i: usize) -> usize {
    let mut best = f64::INFINITY;
    let mut nearest = 0;
    for (j, centre) in centers.iter().enumerate() {
        let d: f64 = centre
            .iter()
            .zip(x)
            .map(|(c, column)| (column[i] - c) * (column[i] - c))
            .sum();
        if d < best {
            best = d;
            nearest = j;
        }
    }
    nearest
}

fn encode_centers(centers: &[Vec<f64>]) -> String {
    centers
        .iter()
        .map(|c| {
            c.iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(";")
}

fn decode_centers(text: &str) -> std::result::Result<Vec<Vec<f64>>, String> {
    let centers: Vec<Vec<f64>> = text
        .split(';')
        .map(|row| {
            row.split(',')
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .map_err(|e| format!("bad centre value `{v}`: {e}"))
                })
                .collect()
        })
        .collect::<std::result::Result<_, _>>()?;
    let p = centers.first().map_or(0, Vec::len);
    if p == 0 || centers.iter().any(|c| c.len() != p) {
        return Err("centres must all have the same, non-zero number of values".into());
    }
    Ok(centers)
}

impl KmeansConfig {
    /// The config string the aggregate reads.
    pub fn encode(&self) -> String {
        let mut s = format!("centers={}", encode_centers(&self.centers));
        if let Some(m) = &self.previous {
            s.push_str(&format!("|previous={}", encode_centers(m)));
        }
        if let Some(m) = &self.measure {
            s.push_str(&format!("|measure={}", encode_centers(m)));
        }
        s
    }

    /// Reads a config string.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let mut centers = None;
        let mut measure = None;
        let mut previous = None;
        for part in text.split('|').filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("centers", v)) => centers = Some(decode_centers(v)?),
                Some(("measure", v)) => measure = Some(decode_centers(v)?),
                Some(("previous", v)) => previous = Some(decode_centers(v)?),
                _ => return Err(format!("bad config entry `{part}`")),
            }
        }
        let centers = centers.ok_or("config needs centers=")?;
        for m in measure.iter().chain(&previous) {
            if m.len() != centers.len() || m[0].len() != centers[0].len() {
                return Err("measure= and previous= must have the shape of centers=".into());
            }
        }
        Ok(Self {
            centers,
            previous,
            measure,
        })
    }
}

/// The merged sums of one round, per cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct KmeansSums {
    pub count: Vec<f64>,
    /// Per cluster, the sum of its rows (p values).
    pub sum: Vec<Vec<f64>>,
    pub withinss: Vec<f64>,
    /// Rows whose nearest centre is not the one of `previous` (all rows
    /// without `previous`).
    pub changed: f64,
}

impl KmeansSums {
    /// Reads the flat layout: per cluster, count, p sums, withinss; then
    /// the changed rows.
    pub fn from_slice(values: &[f64], k: usize) -> Self {
        let changed = values[values.len() - 1];
        let values = &values[..values.len() - 1];
        let width = values.len() / k;
        let p = width - 2;
        let block = |j: usize| &values[j * width..(j + 1) * width];
        Self {
            count: (0..k).map(|j| block(j)[0]).collect(),
            sum: (0..k).map(|j| block(j)[1..=p].to_vec()).collect(),
            withinss: (0..k).map(|j| block(j)[p + 1]).collect(),
            changed,
        }
    }
}

/// `kmeans_step(config, x1, ..., xp)`.
pub fn kmeans_step() -> AggregateUDF {
    AggregateUDF::from(KmeansStep {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct KmeansStep {
    signature: Signature,
}

impl AggregateUDFImpl for KmeansStep {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        "kmeans_step"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        flat_state::coerce_step_arguments(self.name(), "config, x1, ..., xp", 1, arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(flat_state::result_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        // k comes from the config, a constant the state's type cannot see:
        // the state is a list of exactly k × (p + 2) floats.
        let item = Arc::new(Field::new_list_field(DataType::Float64, true));
        Ok(vec![Arc::new(Field::new(
            format_state_name(args.name, "cluster_sums"),
            DataType::List(item),
            true,
        ))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let config =
            KmeansConfig::decode(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let p = args.exprs.len() - 1;
        if config.centers[0].len() != p {
            return plan_err!(
                "kmeans_step: centres of {} values for {p} columns",
                config.centers[0].len()
            );
        }
        let k = config.centers.len();
        Ok(Box::new(KmeansAccumulator {
            config,
            p,
            sums: vec![0.0; k * (p + 2) + 1],
        }))
    }
}

#[derive(Debug)]
struct KmeansAccumulator {
    config: KmeansConfig,
    p: usize,
    sums: Vec<f64>,
}

impl Accumulator for KmeansAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let columns = crate::comoments::complete_rows(&values[1..])?;
        let x: Vec<&[f64]> = columns
            .iter()
            .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
            .collect();
        let rows = x.first().map_or(0, |c| c.len());
        let p = self.p;
        let width = p + 2;
        let measure = self.config.measure.as_ref().unwrap_or(&self.config.centers);
        let last = self.sums.len() - 1;
        for i in 0..rows {
            let cluster = nearest(&self.config.centers, &x, i);
            let moved = match &self.config.previous {
                Some(previous) => nearest(previous, &x, i) != cluster,
                None => true,
            };
            self.sums[last] += f64::from(u8::from(moved));
            let block = &mut self.sums[cluster * width..(cluster + 1) * width];
            block[0] += 1.0;
            for (c, column) in x.iter().enumerate() {
                block[1 + c] += column[i];
            }
            block[p + 1] += measure[cluster]
                .iter()
                .zip(&x)
                .map(|(c, column)| (column[i] - c) * (column[i] - c))
                .sum::<f64>();
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
            if values.len() != self.sums.len() {
                return exec_err!(
                    "kmeans_step state of {} values, expected {}",
                    values.len(),
                    self.sums.len()
                );
            }
            for (total, v) in self.sums.iter_mut().zip(values.iter()) {
                *total += v;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![flat_state::result_value(self.sums.clone())])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.sums.clone()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * self.sums.len()
    }
}

/// The documentation of `kmeans_step`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Multivariate,
    description: "One round of Lloyd's k-means (the round `kmeans` runs): every row goes to the nearest centre of the config, and each centre gets its count, the sum of its rows and their within sum of squares.",
    syntax: "kmeans_step('centers=c11,c12;c21,c22', x1, ..., xp)",
    arguments: &[
        (
            "config",
            "a constant string of `key=value` entries separated by `|` (the options below); a centre's coordinates are separated by commas, centres by `;`",
        ),
        (
            "x1, ..., xp",
            "the numeric columns; rows with a NULL are dropped",
        ),
    ],
    options: &[
        DocOption {
            name: "centers",
            default: "required",
            meaning: "the current k centres",
        },
        DocOption {
            name: "previous",
            default: "none",
            meaning: "the last round's centres: the state then counts the rows whose nearest centre changed",
        },
        DocOption {
            name: "measure",
            default: "none",
            meaning: "centres to measure the within sums of squares around, instead of those that assign the rows",
        },
    ],
    returns: "the merged sums as `list<float64>`: per centre the count, the p sums and the within sum of squares, then the rows that changed cluster",
    releases: "k × (p + 2) + 1 numbers, whatever its rows: per centre its count, the sum of its rows and their within sum of squares, and how many rows changed cluster.",
    example: "SELECT kmeans_step('centers=40,25;70,30', age, bmi) AS sums FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_exactly() {
        let config = KmeansConfig {
            centers: vec![vec![0.1, -1.0 / 3.0], vec![1e300, 2.0]],
            previous: Some(vec![vec![0.5, 2.0], vec![3.0, 4.0]]),
            measure: Some(vec![vec![1.0, 2.0], vec![3.0, 4.0]]),
        };
        assert_eq!(KmeansConfig::decode(&config.encode()).unwrap(), config);
        assert!(KmeansConfig::decode("centers=1,2;3").is_err());
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        crate::testing::assert_split_invariant("kmeans_step('centers=1000,0;1003,0.01', a, b)")
            .await;
        crate::testing::assert_split_invariant(
            "kmeans_step('centers=1000,0;1003,0.01|previous=1001,0;1002,0|measure=999,0;1004,0', a, b)",
        )
        .await;
    }
}
