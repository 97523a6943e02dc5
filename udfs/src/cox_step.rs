//! `cox_step(config, stratum, time, event, weight, x1, ..., xk)`: one
//! Newton–Raphson round of a Cox proportional hazards model stratified by
//! site, as a mergeable aggregate; the state that leaves a site is the
//! gradient and the information matrix of the site's own partial
//! log-likelihood at the shared coefficients, its log-likelihood and counts
//! — `8 + k + k²` floats whatever its rows.
//!
//! `config`: `ties=efron;beta=0.1,-0.2;concordance=1` (no `beta`: all zero;
//! `ties=breslow` for Breslow's method; `concordance=1` also counts the
//! concordant pairs, O(n²) per stratum, for the last round only).
//!
//! **Why the rows can stay at the site.** A risk set holds every row of a
//! stratum still under observation, so the partial likelihood of a stratum
//! needs all of its rows sorted by time: no per-row sum gives it. Every
//! stratum lies inside one site (the site is a stratum; `stratum` splits it
//! further), so the strata's log-likelihoods, gradients and information
//! matrices simply add up across sites — but within a site the accumulator
//! must see all of the site's rows at once. A site runs its encoder as
//! DataFusion's `Partial` aggregate over each of its partitions and then one
//! `PartialReduce` over all their states (`encoder::one_state_per_group` in
//! fedsql). So the state has two fields:
//!
//! - `rows`: the rows a `Partial` accumulator saw (stratum, time, event,
//!   weight, x), flattened. Only an accumulator that saw rows and merged no
//!   state emits them: that is the `Partial` stage, whose output goes to the
//!   site's own `PartialReduce` and nowhere else.
//! - `sums`: the fixed-size sums. An accumulator that merged states (the
//!   site's `PartialReduce`, or the coordinator's `Final`) computes the
//!   partial likelihood of every row it collected, stratum by stratum, adds
//!   the sums it merged, and emits an empty `rows` list: what leaves the
//!   site is the fixed-size `sums` only.
//!
//! In one-stage plans (a shared table: `Single` mode) the accumulator sees
//! its rows and evaluates directly.
//!
//! The computation per stratum is R's `coxfit6` (survival 3.x): rows by
//! decreasing time; at each distinct event time with d deaths, Breslow
//! divides by the risk set sum S0 once per death, Efron by
//! S0 − (j/d)·D0 for j = 0..d−1, D0 the deaths' own risk sum, each death
//! counted with the deaths' mean weight. The covariates are centred by the
//! stratum's mean first, which leaves every quantity unchanged (a stratum's
//! partial likelihood is invariant to a shift of x) and keeps exp(xβ) in
//! range. Rows with a NULL in any argument are dropped; rows with a
//! negative time or an event other than 0/1 are counted (the coordinator
//! refuses the fit).
//!
//! Why this file is over 600 lines: it holds the Cox round's aggregate, its accumulator and its site-only stage, which read together
//! (the style's one aggregate, one file); its tests are in the same file.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use crate::flat_state;
use crate::function_doc::{DocOption, FunctionDoc, FunctionFamily};

/// Leading arguments before the covariates: config, stratum, time, event, weight.
const LEADING: usize = 5;
/// Values per collected row before the covariates: stratum, time, event, weight.
const ROW_LEADING: usize = 4;
/// Scalar sums before the gradient in the state.
pub const SCALARS: usize = 9;

/// The state field in which a partial stage hands its rows to the site's
/// own reduce stage (named `<aggregate>[site_rows]`): only that stage
/// empties it, and a site refuses to send it otherwise.
pub const SITE_ROWS: &str = "site_rows";

/// Whether a state field is a [`SITE_ROWS`] field.
pub fn is_site_rows(field_name: &str) -> bool {
    field_name
        .strip_suffix(']')
        .and_then(|rest| rest.strip_suffix(SITE_ROWS))
        .is_some_and(|rest| rest.ends_with('['))
}

/// How tied event times are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ties {
    Efron,
    Breslow,
}

impl Ties {
    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "efron" => Ok(Self::Efron),
            "breslow" => Ok(Self::Breslow),
            other => Err(format!(
                "unknown ties method `{other}`: use efron or breslow"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Efron => "efron",
            Self::Breslow => "breslow",
        }
    }
}

/// What the coordinator sends for one round.
#[derive(Debug, Clone, PartialEq)]
pub struct CoxConfig {
    pub ties: Ties,
    /// Current coefficients; `None`: all zero.
    pub beta: Option<Vec<f64>>,
    /// Also count concordant pairs (the last round).
    pub concordance: bool,
}

impl CoxConfig {
    /// The config string the aggregate reads (floats round-trip exactly).
    pub fn encode(&self) -> String {
        let mut s = format!("ties={}", self.ties.name());
        if let Some(beta) = &self.beta {
            let values: Vec<String> = beta.iter().map(|b| format!("{b:?}")).collect();
            s.push_str(&format!(";beta={}", values.join(",")));
        }
        if self.concordance {
            s.push_str(";concordance=1");
        }
        s
    }

    /// Reads a config string.
    pub fn decode(text: &str) -> std::result::Result<Self, String> {
        let mut config = CoxConfig {
            ties: Ties::Efron,
            beta: None,
            concordance: false,
        };
        for part in text.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("bad config entry `{part}`"))?;
            match key {
                "ties" => config.ties = Ties::parse(value)?,
                "beta" => {
                    config.beta = Some(
                        value
                            .split(',')
                            .filter(|v| !v.is_empty())
                            .map(|v| {
                                v.parse::<f64>()
                                    .map_err(|e| format!("bad coefficient `{v}`: {e}"))
                            })
                            .collect::<std::result::Result<_, _>>()?,
                    )
                }
                "concordance" => config.concordance = value == "1",
                other => return Err(format!("unknown config key `{other}`")),
            }
        }
        Ok(config)
    }
}

/// The merged sums of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct CoxSums {
    /// Rows used (time ≥ 0, event 0 or 1).
    pub n: f64,
    /// Rows with an event.
    pub events: f64,
    /// Rows with a negative time or an event other than 0/1.
    pub invalid: f64,
    /// The partial log-likelihood.
    pub loglik: f64,
    /// Concordant, discordant pairs, pairs tied in the risk score, pairs
    /// tied in time (within strata; with `concordance=1` only).
    pub concordant: f64,
    pub discordant: f64,
    pub tied_x: f64,
    pub tied_y: f64,
    /// Strata with at least one event.
    pub strata_with_events: f64,
    /// Gradient (k) and information matrix (k × k, row-major).
    pub gradient: Vec<f64>,
    pub information: Vec<f64>,
}

impl CoxSums {
    fn new(k: usize) -> Self {
        Self::from_slice(&vec![0.0; SCALARS + k + k * k], k)
    }

    /// Reads the flat layout (scalars, gradient, information row-major).
    pub fn from_slice(v: &[f64], k: usize) -> Self {
        Self {
            n: v[0],
            events: v[1],
            invalid: v[2],
            loglik: v[3],
            concordant: v[4],
            discordant: v[5],
            tied_x: v[6],
            tied_y: v[7],
            strata_with_events: v[8],
            gradient: v[SCALARS..SCALARS + k].to_vec(),
            information: v[SCALARS + k..SCALARS + k + k * k].to_vec(),
        }
    }

    /// The flat layout.
    pub fn to_vec(&self) -> Vec<f64> {
        let mut v = vec![
            self.n,
            self.events,
            self.invalid,
            self.loglik,
            self.concordant,
            self.discordant,
            self.tied_x,
            self.tied_y,
            self.strata_with_events,
        ];
        v.extend(&self.gradient);
        v.extend(&self.information);
        v
    }

    fn add(&mut self, other: &[f64]) {
        let mut mine = self.to_vec();
        for (a, b) in mine.iter_mut().zip(other) {
            *a += b;
        }
        *self = Self::from_slice(&mine, self.gradient.len());
    }
}

/// One row of a stratum.
struct Row<'a> {
    time: f64,
    event: bool,
    weight: f64,
    x: &'a [f64],
}

/// Adds one stratum's partial likelihood, gradient and information at
/// `beta` (R's coxfit6), and its concordance counts when asked.
fn add_stratum(sums: &mut CoxSums, rows: &mut [Row<'_>], config: &CoxConfig, k: usize) {
    if rows.is_empty() {
        return;
    }
    let zero = vec![0.0; k];
    let beta = config.beta.as_deref().unwrap_or(&zero);
    // Centre by the stratum's mean: invariant, and keeps exp(xβ) in range.
    let mut mean = vec![0.0; k];
    for r in rows.iter() {
        for (m, v) in mean.iter_mut().zip(r.x) {
            *m += v;
        }
    }
    mean.iter_mut().for_each(|m| *m /= rows.len() as f64);
    // Decreasing time; at equal times the order does not matter.
    rows.sort_by(|a, b| b.time.total_cmp(&a.time));
    let centred: Vec<Vec<f64>> = rows
        .iter()
        .map(|r| r.x.iter().zip(&mean).map(|(v, m)| v - m).collect())
        .collect();
    let eta: Vec<f64> = centred
        .iter()
        .map(|x| x.iter().zip(beta).map(|(v, b)| v * b).sum())
        .collect();
    let risk: Vec<f64> = rows
        .iter()
        .zip(&eta)
        .map(|(r, e)| r.weight * e.exp())
        .collect();

    let (mut s0, mut s1, mut s2) = (0.0, vec![0.0; k], vec![0.0; k * k]);
    let mut i = 0;
    let mut any_event = false;
    while i < rows.len() {
        let t = rows[i].time;
        let (mut d0, mut d1, mut d2) = (0.0, vec![0.0; k], vec![0.0; k * k]);
        let (mut deaths, mut dead_weight) = (0usize, 0.0);
        while i < rows.len() && rows[i].time == t {
            let (x, r) = (&centred[i], risk[i]);
            s0 += r;
            for a in 0..k {
                s1[a] += r * x[a];
                for b in 0..=a {
                    s2[a * k + b] += r * x[a] * x[b];
                }
            }
            if rows[i].event {
                deaths += 1;
                dead_weight += rows[i].weight;
                sums.loglik += rows[i].weight * eta[i];
                d0 += r;
                for a in 0..k {
                    sums.gradient[a] += rows[i].weight * x[a];
                    d1[a] += r * x[a];
                    for b in 0..=a {
                        d2[a * k + b] += r * x[a] * x[b];
                    }
                }
            }
            i += 1;
        }
        if deaths == 0 {
            continue;
        }
        any_event = true;
        let efron = config.ties == Ties::Efron && deaths > 1;
        let (steps, share) = if efron {
            (deaths, dead_weight / deaths as f64)
        } else {
            (1, dead_weight)
        };
        for j in 0..steps {
            let frac = if efron { j as f64 / deaths as f64 } else { 0.0 };
            let denom = s0 - frac * d0;
            sums.loglik -= share * denom.ln();
            let a_vec: Vec<f64> = (0..k).map(|a| (s1[a] - frac * d1[a]) / denom).collect();
            for a in 0..k {
                sums.gradient[a] -= share * a_vec[a];
                for b in 0..=a {
                    let v = share
                        * ((s2[a * k + b] - frac * d2[a * k + b]) / denom - a_vec[a] * a_vec[b]);
                    sums.information[a * k + b] += v;
                    if a != b {
                        sums.information[b * k + a] += v;
                    }
                }
            }
        }
    }
    sums.strata_with_events += f64::from(u8::from(any_event));
    if config.concordance {
        // Comparable pairs: the shorter time is an event (a censoring at the
        // same time counts as longer); the higher risk should fail first.
        for a in 0..rows.len() {
            if !rows[a].event {
                continue;
            }
            for b in 0..rows.len() {
                if a == b {
                    continue;
                }
                let w = rows[a].weight * rows[b].weight;
                if rows[b].time > rows[a].time || (rows[b].time == rows[a].time && !rows[b].event) {
                    if eta[a] > eta[b] {
                        sums.concordant += w;
                    } else if eta[a] < eta[b] {
                        sums.discordant += w;
                    } else {
                        sums.tied_x += w;
                    }
                } else if rows[b].time == rows[a].time && rows[b].event && a < b {
                    sums.tied_y += w;
                }
            }
        }
    }
}

/// `cox_step(config, stratum, time, event, weight, x1, ..., xk)`.
pub fn cox_step() -> AggregateUDF {
    AggregateUDF::from(CoxStep {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CoxStep {
    signature: Signature,
}

impl AggregateUDFImpl for CoxStep {
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        crate::catalogue::documentation(self.name())
    }

    fn name(&self) -> &str {
        "cox_step"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        flat_state::coerce_step_arguments(
            self.name(),
            "config, stratum, time, event, weight, x1, ..., xk",
            LEADING,
            arg_types,
        )
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(flat_state::result_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let k = args.input_fields.len() - LEADING;
        let item = Arc::new(Field::new_list_field(DataType::Float64, true));
        Ok(vec![
            flat_state::state_field(args.name, SCALARS + k + k * k),
            Arc::new(Field::new(
                format_state_name(args.name, SITE_ROWS),
                DataType::List(item),
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let config = flat_state::config_literal(self.name(), &args.exprs[0])?;
        let config =
            CoxConfig::decode(&config).map_err(datafusion::error::DataFusionError::Plan)?;
        let k = args.exprs.len() - LEADING;
        if config.beta.as_ref().is_some_and(|b| b.len() != k) {
            return plan_err!(
                "cox_step: {} coefficients for {k} covariates",
                config.beta.as_ref().map_or(0, |b| b.len())
            );
        }
        Ok(Box::new(CoxAccumulator {
            config,
            k,
            rows: Vec::new(),
            merged: CoxSums::new(k),
            has_merged: false,
        }))
    }
}

#[derive(Debug)]
struct CoxAccumulator {
    config: CoxConfig,
    k: usize,
    /// Rows collected at this site, flattened (stratum, time, event, weight, x).
    rows: Vec<f64>,
    /// Sums merged from other states.
    merged: CoxSums,
    /// Whether `merge_batch` ran: this is a reducing stage, whose state is
    /// the sums only.
    has_merged: bool,
}

impl CoxAccumulator {
    /// The merged sums plus those of the collected rows, stratum by stratum.
    fn sums(&self) -> CoxSums {
        let width = ROW_LEADING + self.k;
        let mut strata: BTreeMap<u64, Vec<Row<'_>>> = BTreeMap::new();
        let mut sums = CoxSums::new(self.k);
        for row in self.rows.chunks_exact(width) {
            let (time, event) = (row[1], row[2]);
            if time.is_nan() || time < 0.0 || (event != 0.0 && event != 1.0) {
                sums.invalid += 1.0;
                continue;
            }
            sums.n += 1.0;
            sums.events += event;
            strata.entry(row[0].to_bits()).or_default().push(Row {
                time,
                event: event == 1.0,
                weight: row[3],
                x: &row[ROW_LEADING..],
            });
        }
        for rows in strata.values_mut() {
            add_stratum(&mut sums, rows, &self.config, self.k);
        }
        sums.add(&self.merged.to_vec());
        sums
    }
}

impl Accumulator for CoxAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let columns = crate::comoments::complete_rows(&values[1..])?;
        let slices: Vec<&[f64]> = columns
            .iter()
            .map(|c| c.as_primitive::<Float64Type>().values().as_ref())
            .collect();
        let rows = slices.first().map_or(0, |c| c.len());
        self.rows.reserve(rows * slices.len());
        for i in 0..rows {
            self.rows.extend(slices.iter().map(|c| c[i]));
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.has_merged = true;
        let mut total = self.merged.to_vec();
        flat_state::merge_into("cox_step", &mut total, &states[0])?;
        self.merged = CoxSums::from_slice(&total, self.k);
        let lists = states[1].as_list::<i32>();
        let width = ROW_LEADING + self.k;
        for row in 0..lists.len() {
            if lists.is_null(row) {
                continue;
            }
            let values = lists.value(row);
            let values = values.as_primitive::<Float64Type>().values();
            if values.len() % width != 0 {
                return exec_err!(
                    "cox_step: rows of {} values, expected {width}",
                    values.len()
                );
            }
            self.rows.extend_from_slice(values);
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let item = Arc::new(Field::new_list_field(DataType::Float64, true));
        if self.has_merged {
            // A reducing stage: every row of the site is here; only the
            // fixed-size sums go on.
            let empty = ListArray::new(
                item,
                OffsetBuffer::from_lengths([0]),
                Arc::new(Float64Array::from(Vec::<f64>::new())),
                None,
            );
            Ok(vec![
                flat_state::state_value(self.sums().to_vec()),
                ScalarValue::List(Arc::new(empty)),
            ])
        } else {
            // A partial stage, inside the site: its rows go to the site's
            // own reducing stage.
            let rows = std::mem::take(&mut self.rows);
            let len = rows.len();
            let list = ListArray::new(
                item,
                OffsetBuffer::from_lengths([len]),
                Arc::new(Float64Array::from(rows)),
                None,
            );
            Ok(vec![
                flat_state::state_value(CoxSums::new(self.k).to_vec()),
                ScalarValue::List(Arc::new(list)),
            ])
        }
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(flat_state::result_value(self.sums().to_vec()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + 8 * (self.rows.len() + self.merged.to_vec().len())
    }
}

/// The documentation of `cox_step`.
pub const DOC: FunctionDoc = FunctionDoc {
    family: FunctionFamily::Survival,
    description: "One Newton–Raphson round of a Cox proportional hazards model stratified by site (the round `coxph` runs): the gradient and the information matrix of the partial log-likelihood at the coefficients of the config.",
    syntax: "cox_step('ties=efron;beta=b1,...,bk', stratum, time, event, weight, x1, ..., xk)",
    arguments: &[
        (
            "config",
            "a constant string of `key=value` entries separated by `;` (the options below)",
        ),
        ("stratum", "a stratum within the site (a constant for none)"),
        ("time", "the time"),
        ("event", "1 for an event, 0 for a censoring"),
        ("weight", "the case weight (1 for none)"),
        ("x1, ..., xk", "the covariates (no intercept)"),
    ],
    options: &[
        DocOption {
            name: "ties",
            default: "efron",
            meaning: "efron or breslow",
        },
        DocOption {
            name: "beta",
            default: "all zero",
            meaning: "the current coefficients, separated by commas",
        },
        DocOption {
            name: "concordance",
            default: "0",
            meaning: "1 also counts the concordant, discordant and tied pairs within each stratum",
        },
    ],
    returns: "the merged sums as `list<float64>`: the log-likelihood, counts, the gradient and the information matrix",
    releases: "k² + k + 9 numbers, whatever its rows: the gradient and information matrix of its own partial log-likelihood, that log-likelihood and its counts. Its rows reach only the site's own reduce stage; the rows field of the state it sends is empty.",
    example: "SELECT cox_step('ties=efron', 0, age, event, 1.0, bmi) AS sums FROM clinic",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_exactly() {
        let config = CoxConfig {
            ties: Ties::Breslow,
            beta: Some(vec![0.1, -1.0 / 3.0]),
            concordance: true,
        };
        assert_eq!(CoxConfig::decode(&config.encode()).unwrap(), config);
    }

    /// Two rows, one event: at β = 0 the partial likelihood is 1/2, the
    /// gradient x_event − mean and the information the risk-set variance.
    #[test]
    fn one_event_among_two() {
        let x = [[1.0], [3.0]];
        let mut rows = vec![
            Row {
                time: 1.0,
                event: true,
                weight: 1.0,
                x: &x[0],
            },
            Row {
                time: 2.0,
                event: false,
                weight: 1.0,
                x: &x[1],
            },
        ];
        let mut sums = CoxSums::new(1);
        let config = CoxConfig::decode("ties=efron").unwrap();
        add_stratum(&mut sums, &mut rows, &config, 1);
        assert!((sums.loglik - 0.5f64.ln()).abs() < 1e-15);
        assert!((sums.gradient[0] - (1.0 - 2.0)).abs() < 1e-15);
        assert!((sums.information[0] - 1.0).abs() < 1e-15);
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        for ties in ["efron", "breslow"] {
            crate::testing::assert_split_invariant(&format!(
                "cox_step('ties={ties};beta=0.2,-30;concordance=1', CASE WHEN a > 1000 THEN 1 ELSE 0 END, round(c), CASE WHEN b > 0 THEN 1 ELSE 0 END, 1.0, a, b)"
            ))
            .await;
        }
    }

    #[test]
    fn site_rows_fields_are_named_by_their_state_suffix() {
        let named = format_state_name("cox_step(x)", SITE_ROWS);
        assert!(is_site_rows(&named));
        assert!(!is_site_rows("cox_step(x)[sums]"));
        assert!(!is_site_rows("my_site_rows"));
        assert!(!is_site_rows("cox_step(x)[not_site_rows]"));
    }
}
