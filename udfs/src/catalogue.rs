//! The one catalogue of what may run over a site's rows: for every
//! aggregate and scalar function fedsql lets run beside the data, the facts
//! a site needs to reason about it. What is not here is not run: a site
//! refuses any function it does not find (in process and at workers
//! alike), and every other part of fedsql asks this table instead of
//! keeping a list of names.
//!
//! The facts of an aggregate ([`Aggregate`]): its state is bounded
//! whatever the rows (every catalogued aggregate's is); whether its state
//! is one row's value or a bit pattern of values (`extremes`); whether it
//! adds its inputs (a zero input then adds nothing, and the site counts
//! only non-zero inputs against k) or counts them; whether its state
//! identifies the values it summarizes; whether it is differentially
//! private or a secure (maskable) sum; how many model parameters it
//! estimates; which cells of its state count rows; whether a fit's rounds
//! over kept rows may share its constants between batches.
//!
//! The facts of a scalar function ([`Scalar`]): whether it can fail on a
//! row's values. A site under a disclosure policy evaluates every
//! catalogued function NULL-on-error (a failure on one row gives NULL for
//! that row), so the facts here say which calls need the wrapper; a
//! function whose work or output grows with an argument's value (`repeat`,
//! `lpad`, `range`, `array_repeat`, ...) or that makes rows from one row is
//! not catalogued, and so never runs at a site.
//!
//! Why this file is over 600 lines: the catalogue is one table by design
//! (one fact, one place); its reference page is built in `catalogue/reference.rs`.

/// How a catalogued function may fail on a row's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnData {
    /// It never fails on data (only on argument types, which planning
    /// checks before any row is read).
    Never,
    /// It may fail on some values: a site under a policy evaluates it
    /// NULL-on-error.
    NullOnError,
}

/// What an aggregate's state is, for the privacy rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privacy {
    /// An exact state, held to the disclosure policy's thresholds.
    Exact,
    /// A differentially private state: the site adds noise and debits ε.
    Dp,
    /// A quantized sum mod 2^64 the sites may mask (secure aggregation).
    Secure,
    /// Both: a DP state the sites mask, each adding a share of the noise
    /// (`secure_dp_…`).
    SecureDp,
}

/// The cells of an aggregate's state that count rows (each held to k), and
/// how a refusal names them.
#[derive(Debug, Clone, Copy)]
pub struct Cells {
    /// Where, in the state of a call with `args` arguments, the counts of
    /// rows per cell are: `None` when the state does not have the expected
    /// shape.
    pub counts: fn(args: usize, state: &[f64]) -> Option<Vec<f64>>,
    /// What a too-small cell would be ("a cluster would hold").
    pub holds: &'static str,
    /// How to ask for larger cells.
    pub hint: &'static str,
}

/// The facts of one aggregate function.
#[derive(Debug, Clone, Copy)]
pub struct Aggregate {
    /// Its name, as DataFusion's registry keys it.
    pub name: &'static str,
    /// Its state is one row's value or a bit pattern of values (refused
    /// under a policy with `extremes = refuse`).
    pub extremes: bool,
    /// It adds its inputs: a zero input adds nothing, so only non-zero
    /// inputs count towards k. Otherwise it counts its (non-NULL) inputs.
    pub adds_inputs: bool,
    /// Its state identifies the values it summarizes (refused under any
    /// policy).
    pub identifying: bool,
    /// Exact, DP or secure.
    pub privacy: Privacy,
    /// For a model round or matrix aggregate: the number of leading
    /// arguments that are not design columns (the rest are parameters).
    pub model_leading: Option<usize>,
    /// The cells its state releases counts of (each held to k).
    pub cells: Option<Cells>,
    /// A fit's rounds over kept rows may share its literal arguments
    /// between batches (it reads a literal only through
    /// `constant_argument::literal_value`, or reads none).
    pub shares_constants: bool,
    /// The argument that sizes its state (a histogram's bins): a constant
    /// of at most [`MAX_BINS`], checked before anything is allocated.
    pub sized_by: Option<usize>,
    /// The argument that must be a list of fixed length, written as one
    /// (`[a, b]`): a list whose length came from the rows would make the
    /// aggregate fail on one row's value.
    pub fixed_list: Option<usize>,
    /// For a state whose size varies (below a fixed bound): what it is
    /// and its bound, as `EXPLAIN FEDERATED` states it.
    pub variable_state: Option<&'static str>,
    /// The documentation of one of fedsql's own aggregates (DataFusion's
    /// carry their own).
    pub doc: Option<&'static FunctionDoc>,
}

impl Aggregate {
    /// An exact aggregate that adds its inputs, with no other facts.
    const fn adding(name: &'static str) -> Self {
        Self {
            name,
            extremes: false,
            adds_inputs: true,
            identifying: false,
            privacy: Privacy::Exact,
            model_leading: None,
            cells: None,
            shares_constants: false,
            sized_by: None,
            fixed_list: None,
            variable_state: None,
            doc: None,
        }
    }

    /// An exact aggregate that counts its inputs.
    const fn counting(name: &'static str) -> Self {
        Self {
            adds_inputs: false,
            ..Self::adding(name)
        }
    }

    const fn extremes(self) -> Self {
        Self {
            extremes: true,
            ..self
        }
    }

    const fn identifying(self) -> Self {
        Self {
            identifying: true,
            ..self
        }
    }

    const fn privacy(self, privacy: Privacy) -> Self {
        Self { privacy, ..self }
    }

    const fn model(self, leading: usize) -> Self {
        Self {
            model_leading: Some(leading),
            ..self
        }
    }

    const fn cells(self, cells: Cells) -> Self {
        Self {
            cells: Some(cells),
            ..self
        }
    }

    const fn sized_by(self, argument: usize) -> Self {
        Self {
            sized_by: Some(argument),
            ..self
        }
    }

    const fn fixed_list(self, argument: usize) -> Self {
        Self {
            fixed_list: Some(argument),
            ..self
        }
    }

    const fn variable_state(self, what: &'static str) -> Self {
        Self {
            variable_state: Some(what),
            ..self
        }
    }

    const fn doc(self, doc: &'static FunctionDoc) -> Self {
        Self {
            doc: Some(doc),
            ..self
        }
    }

    const fn shares_constants(self) -> Self {
        Self {
            shares_constants: true,
            ..self
        }
    }

    /// Whether the state is differentially private.
    pub fn is_dp(&self) -> bool {
        matches!(self.privacy, Privacy::Dp | Privacy::SecureDp)
    }

    /// Whether the state is a maskable secure sum.
    pub fn is_secure(&self) -> bool {
        matches!(self.privacy, Privacy::Secure | Privacy::SecureDp)
    }

    /// How many model parameters a call with `args` arguments estimates;
    /// `None` for an aggregate that fits no model.
    pub fn parameters(&self, args: usize) -> Option<usize> {
        self.model_leading
            .map(|leading| args.saturating_sub(leading))
    }
}

/// The facts of one scalar function.
#[derive(Debug, Clone, Copy)]
pub struct Scalar {
    /// Its name, as DataFusion's registry keys it.
    pub name: &'static str,
    /// Whether it can fail on a row's values.
    pub on_data: OnData,
    /// It builds a list of its arguments, one element each (what a list
    /// written out as `[a, b]` plans to): the length is the call's.
    pub writes_out_list: bool,
}

impl Scalar {
    const fn writes_out_list(self) -> Self {
        Self {
            writes_out_list: true,
            ..self
        }
    }
}

use Privacy::{Dp, Secure, SecureDp};

use std::sync::LazyLock;

use datafusion::logical_expr::Documentation;

use crate::function_doc::FunctionDoc;

/// The most bins a state may have (see `Aggregate::sized_by`).
pub use crate::histogram::MAX_BINS;

/// Every aggregate that may run over a site's rows.
pub const AGGREGATES: &[Aggregate] = &[
    // DataFusion's bounded aggregates.
    // Reads no literal: a fit's rounds share it as they are.
    Aggregate::counting("count").shares_constants(),
    Aggregate::adding("sum"),
    Aggregate::adding("avg"),
    Aggregate::adding("min").extremes(),
    Aggregate::adding("max").extremes(),
    Aggregate::adding("var"),
    Aggregate::adding("var_pop"),
    Aggregate::adding("stddev"),
    Aggregate::adding("stddev_pop"),
    Aggregate::adding("covar_samp"),
    Aggregate::adding("covar_pop"),
    Aggregate::adding("corr"),
    Aggregate::adding("regr_slope"),
    Aggregate::adding("regr_intercept"),
    Aggregate::adding("regr_count"),
    Aggregate::adding("regr_r2"),
    Aggregate::adding("regr_avgx"),
    Aggregate::adding("regr_avgy"),
    Aggregate::adding("regr_sxx"),
    Aggregate::adding("regr_syy"),
    Aggregate::adding("regr_sxy"),
    Aggregate::adding("bool_and").extremes(),
    Aggregate::adding("bool_or").extremes(),
    Aggregate::adding("bit_and").extremes(),
    Aggregate::adding("bit_or").extremes(),
    Aggregate::adding("bit_xor").extremes(),
    Aggregate::adding("first_value").extremes(),
    Aggregate::adding("last_value").extremes(),
    Aggregate::adding("any_value").extremes(),
    Aggregate::counting("grouping"),
    // HyperLogLog registers are hashes of the values.
    Aggregate::adding("approx_distinct")
        .identifying()
        .variable_state("HyperLogLog registers, at most 16 KiB"),
    // t-digests: a site coarsens their centroids to k values each. A
    // centroid's mean adds its values, so a zero counts for nothing (`CASE
    // WHEN id = 17 THEN x ELSE 0 END` would otherwise be one of k).
    Aggregate::adding("approx_percentile_cont").variable_state(T_DIGEST),
    Aggregate::adding("approx_median").variable_state(T_DIGEST),
    // Centroids weighted by the analyst's expression single out values.
    Aggregate::adding("approx_percentile_cont_with_weight")
        .identifying()
        .variable_state(T_DIGEST),
    // fedsql's matrix aggregates (y, x... or x...).
    Aggregate::adding("covariance_matrix")
        .model(0)
        .doc(&crate::covariance_matrix::DOC),
    Aggregate::adding("correlation_matrix")
        .model(0)
        .doc(&crate::correlation_matrix::DOC),
    Aggregate::adding("centered_moments")
        .model(0)
        .doc(&crate::centered_moments::DOC),
    Aggregate::adding("normal_equations")
        .model(0)
        .doc(&crate::normal_equations::DOC),
    Aggregate::adding("normal_equations_no_intercept")
        .model(1)
        .doc(&crate::normal_equations::NO_INTERCEPT_DOC),
    // Model rounds: config, y, trials, offset, weight, x...
    // Its count of rows with a response outside the family's range is
    // held to k like any count (the eighteenth outside review read one
    // row's condition from it).
    Aggregate::adding("irls_step")
        .model(5)
        .cells(Cells {
            counts: irls_cells,
            holds: "a fit round would count rows with an invalid response among",
            hint: "filter out the rows whose response is outside the family's range",
        })
        .shares_constants()
        .doc(&crate::irls_step::DOC),
    // config, y, trials, offset, weight, x... (robust standard errors)
    Aggregate::adding("sandwich_step")
        .model(5)
        .shares_constants()
        .doc(&crate::sandwich_step::DOC),
    // config, y, trials, offset, weight, x... (glm_nb's θ rounds)
    Aggregate::adding("nb_theta_step")
        .model(5)
        .shares_constants()
        .doc(&crate::nb_theta_step::DOC),
    // config, y, offset, x...
    Aggregate::adding("sgd_gradient")
        .model(3)
        .cells(SGD_CELLS)
        .shares_constants()
        .doc(&crate::sgd_step::GRADIENT_DOC),
    Aggregate::adding("sgd_newton")
        .model(3)
        .cells(SGD_CELLS)
        .shares_constants()
        .doc(&crate::sgd_step::NEWTON_DOC),
    // config, stratum, time, event, weight, x...
    Aggregate::adding("cox_step")
        .model(5)
        .shares_constants()
        .doc(&crate::cox_step::DOC),
    // Its state sums each cluster's coordinates: it adds its inputs.
    Aggregate::adding("kmeans_step")
        .cells(Cells {
            counts: kmeans_cells,
            holds: "a cluster would hold",
            hint: "use fewer clusters",
        })
        .shares_constants()
        .doc(&crate::kmeans_step::DOC),
    Aggregate::counting("life_table")
        .cells(Cells {
            counts: life_table_cells,
            holds: "a life-table interval would count events or censorings of",
            hint: "use wider intervals (breaks or width)",
        })
        .shares_constants()
        .doc(&crate::life_table::DOC),
    Aggregate::counting("histogram")
        .sized_by(3)
        .doc(&crate::histogram::DOC),
    // Secure sums: quantized sums mod 2^64 that sites mask.
    Aggregate::adding("secure_sum")
        .privacy(Secure)
        .doc(&crate::secure_sum::DOC),
    Aggregate::adding("secure_avg")
        .privacy(Secure)
        .doc(&crate::secure_avg::DOC),
    Aggregate::counting("secure_count")
        .privacy(Secure)
        .doc(&crate::secure_count::DOC),
    Aggregate::adding("secure_sum_vec")
        .privacy(Secure)
        .fixed_list(0)
        .doc(&crate::secure_sum_vec::DOC),
    // Differentially private aggregates: noised at the site.
    Aggregate::counting("dp_count")
        .privacy(Dp)
        .doc(&crate::dp::COUNT_DOC),
    Aggregate::adding("dp_sum")
        .privacy(Dp)
        .doc(&crate::dp::SUM_DOC),
    Aggregate::adding("dp_avg")
        .privacy(Dp)
        .doc(&crate::dp::AVG_DOC),
    Aggregate::adding("dp_var")
        .privacy(Dp)
        .doc(&crate::dp::VAR_DOC),
    Aggregate::counting("dp_histogram")
        .privacy(Dp)
        .sized_by(3)
        .doc(&crate::dp::HISTOGRAM_DOC),
    // Differentially private sums under the masks: each site adds a share
    // of the noise, then masks.
    Aggregate::counting("secure_dp_count")
        .privacy(SecureDp)
        .doc(&crate::dp::SECURE_COUNT_DOC),
    Aggregate::adding("secure_dp_sum")
        .privacy(SecureDp)
        .doc(&crate::dp::SECURE_SUM_DOC),
    Aggregate::adding("secure_dp_avg")
        .privacy(SecureDp)
        .doc(&crate::dp::SECURE_AVG_DOC),
];

/// The rows with an invalid response in an `irls_step` state (its scalar
/// 10).
fn irls_cells(_args: usize, state: &[f64]) -> Option<Vec<f64>> {
    Some(vec![*state.get(10)?])
}

/// The rows with an invalid response in an `sgd_*` state (its scalar 2).
fn sgd_cells(_args: usize, state: &[f64]) -> Option<Vec<f64>> {
    Some(vec![*state.get(2)?])
}

const SGD_CELLS: Cells = Cells {
    counts: sgd_cells,
    holds: "a training round would count rows with an invalid response among",
    hint: "filter out the rows whose response is outside the family's range",
};

/// The rows of each cluster in a `kmeans_step` state: blocks of (count,
/// sums of the coordinates, sum of squared distances) and a last value.
fn kmeans_cells(args: usize, state: &[f64]) -> Option<Vec<f64>> {
    let width = args.checked_sub(1)? + 2;
    let blocks = state.len().checked_sub(1)?;
    (blocks % width == 0).then(|| state[..blocks].chunks(width).map(|b| b[0]).collect())
}

/// The events and the censorings per interval of a `life_table` state, and
/// the rows before and beyond its grid.
fn life_table_cells(_args: usize, state: &[f64]) -> Option<Vec<f64>> {
    let header = crate::life_table::HEADER;
    let table = (state.len() >= header && (state.len() - header).is_multiple_of(2))
        .then(|| crate::life_table::LifeTable::from_slice(state))?;
    let mut cells = table.events;
    cells.extend(table.censored);
    cells.extend([table.before, table.beyond]);
    Some(cells)
}

/// A t-digest's state, as `EXPLAIN FEDERATED` states it.
const T_DIGEST: &str = "t-digest centroids, at most 100";

/// Aggregates a site refuses (their state grows with the rows) that have
/// a bounded alternative, and the alternative: what a refusal suggests.
const ALTERNATIVES: &[(&str, &str)] = &[
    (
        "median",
        "use approx_median(x) (t-digest state of at most 100 centroids)",
    ),
    (
        "percentile_cont",
        "use approx_percentile_cont(x, p) (t-digest state of at most 100 centroids)",
    ),
    (
        "quantile_cont",
        "use approx_percentile_cont(x, p) (t-digest state of at most 100 centroids)",
    ),
    (
        "array_agg",
        "aggregate the values instead (count, sum, min, max, approx_distinct), or GROUP BY the column",
    ),
    (
        "string_agg",
        "aggregate the values instead (count, sum, min, max, approx_distinct), or GROUP BY the column",
    ),
];

/// The bounded alternative to an aggregate a site refuses, where there is one.
pub fn alternative(name: &str) -> Option<&'static str> {
    ALTERNATIVES
        .iter()
        .find(|(refused, _)| refused.eq_ignore_ascii_case(name))
        .map(|(_, alternative)| *alternative)
}

/// What a state field of variable size holds, and its bound: the
/// `variable_state` of the aggregate whose call names the field
/// (DataFusion names state fields `name(args)[part]`).
pub fn variable_state_of_field(field: &str) -> Option<&'static str> {
    let field = field.to_ascii_lowercase();
    AGGREGATES
        .iter()
        .filter(|a| field.contains(&format!("{}(", a.name)))
        .max_by_key(|a| a.name.len())
        .and_then(|a| a.variable_state)
}

/// The DataFusion documentation of one of fedsql's own aggregates, built
/// once from its [`FunctionDoc`]: what its `AggregateUDFImpl::documentation`
/// returns, so that `SHOW FUNCTIONS` and `information_schema.routines`
/// describe it.
pub fn documentation(name: &str) -> Option<&'static Documentation> {
    static DOCUMENTATION: LazyLock<Vec<(&'static str, Documentation)>> = LazyLock::new(|| {
        AGGREGATES
            .iter()
            .filter_map(|a| a.doc.map(|doc| (a.name, doc.documentation())))
            .collect()
    });
    DOCUMENTATION
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, documentation)| documentation)
}

impl Aggregate {
    /// What the catalogue's facts say about the state a site releases, in
    /// sentences, for the function reference.
    pub fn release_facts(&self) -> Vec<String> {
        let mut facts = Vec::new();
        match self.privacy {
            Privacy::Exact => facts.push(format!(
                "Under a disclosure policy the state is held to the site's thresholds; its inputs count towards k when {}.",
                if self.adds_inputs {
                    "non-NULL and non-zero"
                } else {
                    "non-NULL"
                }
            )),
            Privacy::Dp => facts.push(
                "The site adds the noise and debits ε before its encoder runs; the state is exempt from the thresholds only under a finite `dp_budget` when every aggregate of the query is DP."
                    .to_string(),
            ),
            Privacy::Secure => facts.push(
                "The site hands over the state only masked; under a disclosure policy a worker requires `peers` (or `secure_without_peers`)."
                    .to_string(),
            ),
            Privacy::SecureDp => facts.push(
                "The site debits ε before its encoder runs, adds its share of the noise (cut into the secure session's share count: its threshold, less the colluders its peers tolerate) and hands over the state only masked; under a disclosure policy a worker requires `peers` (or `secure_without_peers`)."
                    .to_string(),
            ),
        }
        match self.model_leading {
            Some(0) => facts.push(
                "Each argument counts as a model parameter for the policy's `max_parameter_ratio`."
                    .to_string(),
            ),
            Some(leading) => facts.push(format!(
                "Each argument after the first {leading} counts as a model parameter for the policy's `max_parameter_ratio`."
            )),
            None => {}
        }
        if let Some(cells) = self.cells {
            facts.push(format!(
                "A site refuses the round when {} fewer than k of its rows ({}).",
                cells.holds, cells.hint
            ));
        }
        if let Some(argument) = self.sized_by {
            facts.push(format!(
                "Argument {} sizes the state: a constant of at most {MAX_BINS}.",
                argument + 1
            ));
        }
        facts
    }
}

/// The facts of aggregate `name` (any case); `None`: not catalogued, so
/// refused at a site.
pub fn aggregate(name: &str) -> Option<&'static Aggregate> {
    AGGREGATES
        .iter()
        .find(|a| a.name.eq_ignore_ascii_case(name))
}

/// The facts of scalar function `name` (any case); `None`: not
/// catalogued, so refused at a site.
pub fn scalar(name: &str) -> Option<&'static Scalar> {
    SCALARS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// Whether `name` is a differentially private aggregate.
pub fn is_dp(name: &str) -> bool {
    aggregate(name).is_some_and(Aggregate::is_dp)
}

/// Whether `name` is a secure (maskable) aggregate.
pub fn is_secure(name: &str) -> bool {
    aggregate(name).is_some_and(Aggregate::is_secure)
}

const fn never(name: &'static str) -> Scalar {
    Scalar {
        name,
        on_data: OnData::Never,
        writes_out_list: false,
    }
}

const fn may_fail(name: &'static str) -> Scalar {
    Scalar {
        name,
        on_data: OnData::NullOnError,
        writes_out_list: false,
    }
}

/// Every scalar function that may run over a site's rows. Functions whose
/// output or work grows with an argument's value (`repeat`, `lpad`,
/// `replace`, whose nested calls multiply a value's length, `levenshtein`,
/// quadratic in its inputs' lengths), that read files or the clock's state
/// in ways a site does not model, or that build rows, are left out on
/// purpose (see the module docs); so is anything DataFusion adds in a
/// later version until it is looked at.
pub const SCALARS: &[Scalar] = &[
    // Conditionals and NULL handling.
    never("coalesce"),
    never("nullif"),
    never("nvl"),
    never("nvl2"),
    never("ifnull"),
    never("greatest"),
    never("least"),
    // Arithmetic and mathematics (NaN, not an error, for domain errors of
    // floats; integer forms can overflow).
    may_fail("abs"),
    never("acos"),
    never("acosh"),
    never("asin"),
    never("asinh"),
    never("atan"),
    never("atan2"),
    never("atanh"),
    never("cbrt"),
    may_fail("ceil"),
    never("cos"),
    never("cosh"),
    never("cot"),
    never("degrees"),
    never("exp"),
    may_fail("floor"),
    may_fail("gcd"),
    never("isnan"),
    never("iszero"),
    may_fail("lcm"),
    never("ln"),
    may_fail("log"),
    never("log10"),
    never("log2"),
    never("nanvl"),
    never("pi"),
    may_fail("power"),
    never("radians"),
    may_fail("round"),
    may_fail("signum"),
    never("sin"),
    never("sinh"),
    // DataFusion refuses a negative value (an error, not NaN).
    may_fail("sqrt"),
    never("tan"),
    never("tanh"),
    may_fail("trunc"),
    // Text of bounded length: at most its inputs' length (or a constant
    // factor of it).
    never("ascii"),
    never("bit_length"),
    never("btrim"),
    never("char_length"),
    never("character_length"),
    never("concat"),
    never("concat_ws"),
    may_fail("contains"),
    never("ends_with"),
    may_fail("initcap"),
    may_fail("left"),
    never("length"),
    never("lower"),
    never("ltrim"),
    never("octet_length"),
    never("reverse"),
    may_fail("right"),
    never("rtrim"),
    may_fail("split_part"),
    never("starts_with"),
    may_fail("strpos"),
    may_fail("substr"),
    may_fail("substring"),
    may_fail("substr_index"),
    never("trim"),
    may_fail("translate"),
    never("upper"),
    may_fail("md5"),
    may_fail("sha224"),
    may_fail("sha256"),
    may_fail("sha384"),
    may_fail("sha512"),
    // Dates and times: parsing and arithmetic can fail on values.
    may_fail("date_bin"),
    may_fail("date_part"),
    may_fail("date_trunc"),
    may_fail("datepart"),
    may_fail("datetrunc"),
    may_fail("make_date"),
    may_fail("to_date"),
    may_fail("to_timestamp"),
    may_fail("to_timestamp_seconds"),
    may_fail("to_timestamp_millis"),
    may_fail("to_timestamp_micros"),
    may_fail("to_timestamp_nanos"),
    may_fail("to_unixtime"),
    may_fail("from_unixtime"),
    may_fail("make_time"),
    may_fail("to_char"),
    may_fail("to_time"),
    never("to_hex"),
    never("now"),
    never("current_date"),
    never("current_time"),
    never("today"),
    // fedsql's own scalar helpers, the struct access the planner makes,
    // and the literal lists of model configs.
    never("get_field"),
    never("named_struct"),
    never("struct"),
    may_fail("make_array").writes_out_list(),
    may_fail("make_list").writes_out_list(),
    may_fail("array_element"),
    // DataFusion's array_length panics on an empty list of lists (the
    // eighteenth outside attack made it fail on one row): the array
    // functions run NULL-on-error, panics included.
    may_fail("array_length"),
    may_fail("cardinality"),
    may_fail("array_has"),
    never("arrow_typeof"),
];

pub mod groups;
mod reference;
pub use reference::reference_markdown;

#[cfg(test)]
mod tests;
