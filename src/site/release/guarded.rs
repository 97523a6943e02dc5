//! An aggregate that counts its own inputs: under a disclosure policy the
//! site wraps every aggregate of its partial aggregate so that, in the same
//! pass, it also counts per group how many values of each input column are
//! non-NULL after the aggregate's FILTER (and, for aggregates that add their
//! inputs, non-zero). The counts travel as extra state columns to the end
//! of the site's plan, where the policy checks them and drops them: they
//! never leave the site.
//!
//! Why per input and not per row: `sum(x) FILTER (WHERE id = 17)` and
//! `sum(CASE WHEN id = 17 THEN x ELSE 0 END)` summarize one person inside a
//! large group; a one-person dummy column in a model round does the same.
//!
//! Zero is not the only value an analyst can make every other row take:
//! `sum(CASE WHEN id = 17 THEN x ELSE 1 END) - count(*) + 1`, `ELSE 1e-9`
//! or glm weights of 1e-12 for all rows but one isolate one value while
//! every row counts. So for the numeric inputs of adding aggregates a
//! guard also keeps, per group, the [`Modes`] of the input: how many
//! values it has, and two reference values with how many values equal
//! each. The policy refuses an input whose values all but 1 to k-1 share
//! one value, shared by at least k of them and four times as many as the
//! others (see [`Modes::odd`]).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::kernels::cmp::neq;
use datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, Float16Type, Float32Type, Float64Type, Int64Type,
};
use datafusion::common::{Result as DFResult, ScalarValue, internal_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature,
};

mod modes;

pub(crate) use modes::{MODE_WIDTH, Modes};
use modes::{add_values, for_each_key};

/// What a guard counts of one input column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Counted {
    /// Values that are not NULL.
    NonNull,
    /// Values that are neither NULL nor zero (`false` for booleans): the
    /// values an adding aggregate actually adds.
    NonZero,
}

/// What a guard's state column holds per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Tally {
    /// The values that count.
    Counting,
    /// The group's rows whose value does not count (NULL, zero or filtered
    /// out): the site subtracts them from the group's row count. Cheaper in
    /// a grouped pass, where almost every row counts and a per-row count
    /// would cost one scatter per input; only a groups accumulator keeps
    /// it, since only it sees the rows its FILTER drops.
    Missing,
}

/// `inner` with one count per guarded input column appended to its state.
#[derive(Debug)]
pub(crate) struct Guarded {
    inner: Arc<AggregateUDF>,
    /// (argument index, what is counted), in the order of the counts.
    inputs: Vec<(usize, Counted)>,
    tally: Tally,
    /// A count this high answers the policy's question (0, or at least k?):
    /// an accumulator without groups stops counting an input there.
    enough: i64,
    /// The arguments (numeric inputs of an adding aggregate) whose
    /// [`Modes`] the state carries after the counts, [`MODE_WIDTH`]
    /// columns each.
    modes: Vec<usize>,
}

impl Guarded {
    pub(crate) fn new(
        inner: Arc<AggregateUDF>,
        inputs: Vec<(usize, Counted)>,
        tally: Tally,
        enough: i64,
        modes: Vec<usize>,
    ) -> Self {
        Self {
            inner,
            inputs,
            tally,
            enough,
            modes,
        }
    }
}

/// What a cluster's plan codec carries of a guard besides its inner
/// aggregate (see `crate::site::ballista::codec`): the guard is rebuilt
/// on every executor exactly as the worker built it.
#[cfg(feature = "ballista")]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct GuardWire {
    /// (argument index, whether it counts non-zero values).
    inputs: Vec<(usize, bool)>,
    /// Whether it tallies the missing values ([`Tally::Missing`]).
    missing: bool,
    enough: i64,
    modes: Vec<usize>,
}

#[cfg(feature = "ballista")]
impl Guarded {
    /// The aggregate it guards.
    pub(crate) fn inner(&self) -> &Arc<AggregateUDF> {
        &self.inner
    }

    /// Its settings, for the cluster's plan codec.
    pub(crate) fn to_wire(&self) -> GuardWire {
        GuardWire {
            inputs: self
                .inputs
                .iter()
                .map(|&(at, counted)| (at, counted == Counted::NonZero))
                .collect(),
            missing: self.tally == Tally::Missing,
            enough: self.enough,
            modes: self.modes.clone(),
        }
    }

    /// The guard of `inner` with settings `wire`.
    pub(crate) fn from_wire(inner: Arc<AggregateUDF>, wire: GuardWire) -> Self {
        let inputs = wire
            .inputs
            .into_iter()
            .map(|(at, non_zero)| {
                let counted = if non_zero {
                    Counted::NonZero
                } else {
                    Counted::NonNull
                };
                (at, counted)
            })
            .collect();
        let tally = if wire.missing {
            Tally::Missing
        } else {
            Tally::Counting
        };
        Self::new(inner, inputs, tally, wire.enough, wire.modes)
    }
}

impl PartialEq for Guarded {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
            && self.inputs == other.inputs
            && self.tally == other.tally
            && self.enough == other.enough
            && self.modes == other.modes
    }
}

impl Eq for Guarded {}

impl Hash for Guarded {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.inputs.hash(state);
        self.tally.hash(state);
        self.enough.hash(state);
        self.modes.hash(state);
    }
}

impl AggregateUDFImpl for Guarded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DFResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> DFResult<FieldRef> {
        self.inner.return_field(arg_fields)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn default_value(&self, data_type: &DataType) -> DFResult<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DFResult<Vec<FieldRef>> {
        let name = args.name;
        let mut fields = self.inner.state_fields(args)?;
        let what = match self.tally {
            Tally::Counting => "inputs",
            Tally::Missing => "rows missing",
        };
        for (i, _) in &self.inputs {
            fields.push(Arc::new(Field::new(
                format!("{name}[{what} of argument {i}]"),
                DataType::Int64,
                false,
            )));
        }
        for i in &self.modes {
            for what in [
                "values",
                "first reference",
                "values equal to the first reference",
                "second reference",
                "values equal to the second reference",
            ] {
                fields.push(Arc::new(Field::new(
                    format!("{name}[{what} of argument {i}]"),
                    DataType::Int64,
                    false,
                )));
            }
        }
        Ok(fields)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DFResult<Box<dyn Accumulator>> {
        if self.tally == Tally::Missing {
            // It would not see the rows its FILTER drops: fail closed.
            return internal_err!(
                "{}: a guard that counts missing rows needs a groups accumulator",
                self.inner.name()
            );
        }
        Ok(Box::new(GuardedAccumulator {
            inner: self.inner.accumulator(args)?,
            inputs: self.inputs.clone(),
            enough: self.enough,
            counts: vec![0; self.inputs.len()],
            modes: self.modes.iter().map(|&i| (i, Modes::default())).collect(),
        }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> DFResult<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(GuardedGroups {
            inner: self.inner.create_groups_accumulator(args)?,
            inputs: self.inputs.clone(),
            tally: self.tally,
            counts: vec![Vec::new(); self.inputs.len()],
            modes: self.modes.iter().map(|&i| (i, Vec::new())).collect(),
        }))
    }
}

/// The rows of `values` whose value counts: not NULL (and not zero).
fn counting_rows(values: &ArrayRef, counted: Counted) -> DFResult<BooleanBuffer> {
    let valid = || match values.logical_nulls() {
        Some(nulls) => nulls.into_inner(),
        None => BooleanBuffer::new_set(values.len()),
    };
    let zero_is_nothing = counted == Counted::NonZero
        && (values.data_type().is_numeric() || values.data_type() == &DataType::Boolean);
    if !zero_is_nothing {
        return Ok(valid());
    }
    // Arrow orders floats totally, so its `neq` finds -0.0 unequal to 0.0;
    // but -0.0 adds nothing either (`CASE WHEN id = 17 THEN x ELSE -0.0
    // END`), so floats compare as numbers here.
    let nonzero = match values.data_type() {
        DataType::Float64 => {
            let floats = values.as_primitive::<Float64Type>().values();
            BooleanBuffer::collect_bool(floats.len(), |i| floats[i] != 0.0)
        }
        DataType::Float32 => {
            let floats = values.as_primitive::<Float32Type>().values();
            BooleanBuffer::collect_bool(floats.len(), |i| floats[i] != 0.0)
        }
        DataType::Float16 => {
            let floats = values.as_primitive::<Float16Type>().values();
            BooleanBuffer::collect_bool(floats.len(), |i| f32::from(floats[i]) != 0.0)
        }
        _ => {
            let zero = ScalarValue::new_zero(values.data_type())?.to_scalar()?;
            return Ok(nonzero_and_valid(&neq(values, &zero)?));
        }
    };
    Ok(match values.logical_nulls() {
        Some(nulls) => &nonzero & nulls.inner(),
        None => nonzero,
    })
}

/// How many values of `values` count, without building a mask where the
/// type allows.
fn count_values(values: &ArrayRef, counted: Counted) -> DFResult<usize> {
    let without_nulls = values.logical_null_count() == 0;
    match (counted, values.data_type()) {
        (Counted::NonNull, _) => Ok(values.len() - values.logical_null_count()),
        (Counted::NonZero, DataType::Float64) if without_nulls => Ok(nonzero::floats(
            values.as_primitive::<Float64Type>().values(),
        )),
        (Counted::NonZero, DataType::Int64) if without_nulls => {
            Ok(nonzero::ints(values.as_primitive::<Int64Type>().values()))
        }
        _ => Ok(counting_rows(values, counted)?.count_set_bits()),
    }
}

/// Counting the non-zero values of a slice, the guard's hottest loop: the
/// compiler vectorizes it, with AVX2 where the processor has it (chosen at
/// run time).
mod nonzero {
    use multiversion::multiversion;

    #[multiversion(targets("x86_64+avx2", "aarch64+neon"))]
    pub fn floats(values: &[f64]) -> usize {
        values.iter().filter(|v| **v != 0.0).count()
    }

    #[multiversion(targets("x86_64+avx2", "aarch64+neon"))]
    pub fn ints(values: &[i64]) -> usize {
        values.iter().filter(|v| **v != 0).count()
    }
}

/// A comparison's result with its NULLs as false.
fn nonzero_and_valid(result: &BooleanArray) -> BooleanBuffer {
    match result.nulls() {
        Some(nulls) => result.values() & nulls.inner(),
        None => result.values().clone(),
    }
}

/// The accumulator of an aggregate without groups (or through DataFusion's
/// adapter, which applies the FILTER before it calls us).
#[derive(Debug)]
struct GuardedAccumulator {
    inner: Box<dyn Accumulator>,
    inputs: Vec<(usize, Counted)>,
    enough: i64,
    counts: Vec<i64>,
    /// (argument index, its modes).
    modes: Vec<(usize, Modes)>,
}

impl Accumulator for GuardedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DFResult<()> {
        self.inner.update_batch(values)?;
        for ((i, counted), count) in self.inputs.iter().zip(&mut self.counts) {
            if *count < self.enough {
                *count += count_values(&values[*i], *counted)? as i64;
            }
        }
        for (i, modes) in &mut self.modes {
            add_values(modes, &values[*i])?;
        }
        Ok(())
    }

    fn evaluate(&mut self) -> DFResult<ScalarValue> {
        self.inner.evaluate()
    }

    fn size(&self) -> usize {
        self.inner.size()
            + self.counts.len() * 8
            + self.modes.len() * std::mem::size_of::<(usize, Modes)>()
    }

    fn state(&mut self) -> DFResult<Vec<ScalarValue>> {
        let mut state = self.inner.state()?;
        state.extend(self.counts.iter().map(|&n| ScalarValue::Int64(Some(n))));
        for (_, modes) in &self.modes {
            state.extend(modes.columns().map(|n| ScalarValue::Int64(Some(n))));
        }
        Ok(state)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DFResult<()> {
        let inner = states.len() - self.counts.len() - MODE_WIDTH * self.modes.len();
        self.inner.merge_batch(&states[..inner])?;
        let (counts, modes) = states[inner..].split_at(self.counts.len());
        for (count, column) in self.counts.iter_mut().zip(counts) {
            *count += column
                .as_primitive::<Int64Type>()
                .iter()
                .flatten()
                .sum::<i64>();
        }
        for ((_, mine), columns) in self.modes.iter_mut().zip(modes.chunks(MODE_WIDTH)) {
            let columns = mode_columns(columns);
            for row in 0..columns[0].len() {
                mine.merge(&Modes::from_columns(columns.map(|c| c[row])));
            }
        }
        Ok(())
    }
}

/// The value slices of one input's [`MODE_WIDTH`] state columns.
fn mode_columns(columns: &[ArrayRef]) -> [&[i64]; MODE_WIDTH] {
    std::array::from_fn(|c| &**columns[c].as_primitive::<Int64Type>().values())
}

/// The groups accumulator: the inner one, and per guarded input a count per
/// group.
struct GuardedGroups {
    inner: Box<dyn GroupsAccumulator>,
    inputs: Vec<(usize, Counted)>,
    tally: Tally,
    counts: Vec<Vec<i64>>,
    /// (argument index, its modes per group).
    modes: Vec<(usize, Vec<Modes>)>,
}

impl GuardedGroups {
    /// The rows of one batch that this guard tallies: those whose value
    /// counts, or those whose value does not; `None` when there are none.
    fn tallied_rows(
        &self,
        values: &ArrayRef,
        counted: Counted,
        opt_filter: Option<&BooleanArray>,
    ) -> DFResult<Option<BooleanBuffer>> {
        if self.tally == Tally::Missing && opt_filter.is_none() {
            // The common case, every row counting, needs no mask at all.
            if count_values(values, counted)? == values.len() {
                return Ok(None);
            }
        }
        let mut rows = counting_rows(values, counted)?;
        if let Some(filter) = opt_filter {
            rows = &rows & &nonzero_and_valid(filter);
        }
        if self.tally == Tally::Missing {
            rows = !&rows;
        }
        Ok((rows.count_set_bits() > 0).then_some(rows))
    }
}

impl GroupsAccumulator for GuardedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DFResult<()> {
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)?;
        for (at, (i, counted)) in self.inputs.iter().enumerate() {
            let rows = self.tallied_rows(&values[*i], *counted, opt_filter)?;
            let counts = &mut self.counts[at];
            counts.resize(total_num_groups, 0);
            for row in rows.iter().flat_map(|rows| rows.set_indices()) {
                counts[group_indices[row]] += 1;
            }
        }
        let filter = opt_filter.map(nonzero_and_valid);
        for (i, modes) in &mut self.modes {
            modes.resize(total_num_groups, Modes::default());
            for_each_key(&values[*i], filter.as_ref(), |row, key| {
                modes[group_indices[row]].add(key)
            })?;
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DFResult<ArrayRef> {
        for counts in &mut self.counts {
            emit_to.take_needed(counts);
        }
        for (_, modes) in &mut self.modes {
            emit_to.take_needed(modes);
        }
        self.inner.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> DFResult<Vec<ArrayRef>> {
        let mut state = self.inner.state(emit_to)?;
        for counts in &mut self.counts {
            let taken = emit_to.take_needed(counts);
            state.push(Arc::new(Int64Array::from(taken)));
        }
        for (_, modes) in &mut self.modes {
            let taken = emit_to.take_needed(modes);
            for c in 0..MODE_WIDTH {
                let column: Int64Array = taken.iter().map(|m| Some(m.columns()[c])).collect();
                state.push(Arc::new(column));
            }
        }
        Ok(state)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DFResult<()> {
        let inner = values.len() - self.counts.len() - MODE_WIDTH * self.modes.len();
        self.inner
            .merge_batch(&values[..inner], group_indices, total_num_groups)?;
        let (counts_columns, mode_states) = values[inner..].split_at(self.counts.len());
        for (counts, column) in self.counts.iter_mut().zip(counts_columns) {
            counts.resize(total_num_groups, 0);
            let column = column.as_primitive::<Int64Type>();
            for (&group, n) in group_indices.iter().zip(column.values()) {
                counts[group] += n;
            }
        }
        for ((_, modes), columns) in self.modes.iter_mut().zip(mode_states.chunks(MODE_WIDTH)) {
            modes.resize(total_num_groups, Modes::default());
            let columns = mode_columns(columns);
            for (row, &group) in group_indices.iter().enumerate() {
                modes[group].merge(&Modes::from_columns(columns.map(|c| c[row])));
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DFResult<Vec<ArrayRef>> {
        let mut state = self.inner.convert_to_state(values, opt_filter)?;
        for (i, counted) in &self.inputs {
            let rows = self.tallied_rows(&values[*i], *counted, opt_filter)?;
            let ones: Int64Array = match rows {
                Some(rows) => rows
                    .iter()
                    .map(|tallied| Some(i64::from(tallied)))
                    .collect(),
                None => Int64Array::from(vec![0; values[*i].len()]),
            };
            state.push(Arc::new(ones));
        }
        let filter = opt_filter.map(nonzero_and_valid);
        for (i, _) in &self.modes {
            let mut modes = vec![Modes::default(); values[*i].len()];
            for_each_key(&values[*i], filter.as_ref(), |row, key| modes[row].add(key))?;
            for c in 0..MODE_WIDTH {
                let column: Int64Array = modes.iter().map(|m| Some(m.columns()[c])).collect();
                state.push(Arc::new(column));
            }
        }
        Ok(state)
    }

    fn size(&self) -> usize {
        self.inner.size()
            + self.counts.iter().map(|c| c.capacity() * 8).sum::<usize>()
            + self
                .modes
                .iter()
                .map(|(_, m)| m.capacity() * std::mem::size_of::<Modes>())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests;
