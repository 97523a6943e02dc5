//! Under a disclosure policy, a row's values never decide whether a query
//! fails: a `CAST` that fails on one person's value, a division by zero or
//! a date that does not parse inside `CASE WHEN <one person> ...`, would
//! tell the analyst one bit per query. After the encoder is admitted (see
//! [`crate::site::release::gate`]) and before it is planned, the site rewrites
//! `CAST` to `TRY_CAST`, every arithmetic operator that can fail on values
//! (division and remainder, date and time arithmetic) and every catalogued
//! function (those marked `OnData::NullOnError` are known to fail on some
//! values; any may, after a library upgrade) into a form
//! that gives NULL for the rows it fails on. Each rewritten expression
//! keeps its name, so the state's columns are the ones the coordinator
//! expects. What can still fail at run time (an aggregate's own work,
//! memory) becomes one fixed refusal (see `LocalClient::error`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ExprSchema, Result as DFResult, ScalarValue, internal_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, Cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TryCast, Volatility,
};
use datafusion::physical_expr::expressions::{Column as PhysicalColumn, binary as physical_binary};
use fedsql_udfs::catalogue;

use crate::error::Result;

/// The plan with every failing cast and division made NULL-giving.
pub(crate) fn never_fail_on_data(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            let inputs = node.inputs();
            let schema: DFSchema = match inputs.as_slice() {
                [input] => input.schema().as_ref().clone(),
                _ => node.schema().as_ref().clone(),
            };
            // A filter's or a join's expressions have no output name.
            let keeps_names = !matches!(node, LogicalPlan::Filter(_) | LogicalPlan::Join(_));
            node.map_expressions(|expr| {
                let name = expr.schema_name().to_string();
                let rewritten = expr.transform_up(|e| rewrite(e, &schema))?;
                if rewritten.transformed && keeps_names && !matches!(rewritten.data, Expr::Alias(_))
                {
                    Ok(Transformed::yes(rewritten.data.alias(name)))
                } else {
                    Ok(rewritten)
                }
            })
        })?
        .data)
}

fn rewrite(e: Expr, schema: &DFSchema) -> datafusion::error::Result<Transformed<Expr>> {
    Ok(match e {
        // A date or time that is out of chrono's range fails even a
        // TRY_CAST (to text, or a timestamp to a date): such casts run
        // NULL-on-error row by row (the eighteenth outside attack built a
        // far timestamp with from_unixtime and failed its cast on one row).
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field })
            if expr.get_type(schema).is_ok_and(|t| from_temporal(&t)) =>
        {
            let udf = ScalarUDF::new_from_impl(SiteCast::to(field.data_type().clone()));
            Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::new(udf),
                vec![*expr],
            )))
        }
        Expr::Cast(Cast { expr, field }) => {
            Transformed::yes(Expr::TryCast(TryCast { expr, field }))
        }
        Expr::BinaryExpr(binary) if may_fail(&binary, schema) => {
            let return_type = Expr::BinaryExpr(binary.clone()).get_type(schema)?;
            let udf = ScalarUDF::new_from_impl(SiteArithmetic {
                op: binary.op,
                return_type,
                signature: Signature::any(2, Volatility::Immutable),
            });
            Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::new(udf),
                vec![*binary.left, *binary.right],
            )))
        }
        // Every catalogued function, not only those known to fail on data:
        // DataFusion's `sqrt` refuses a negative value (the nineteenth
        // outside attack read a value from it, catalogued as never
        // failing), and a library upgrade can make any function fail or
        // panic on some value. The wrapper costs nothing while a batch
        // succeeds.
        Expr::ScalarFunction(f)
            if catalogue::scalar(f.func.name()).is_some()
                && f.func.inner().downcast_ref::<NullOnError>().is_none() =>
        {
            let wrapped = ScalarUDF::new_from_impl(NullOnError { inner: f.func });
            Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                Arc::new(wrapped),
                f.args,
            )))
        }
        other => Transformed::no(other),
    })
}

/// Whether a cast from `t` can fail on a value even as a TRY_CAST.
fn from_temporal(t: &DataType) -> bool {
    t.is_temporal() || matches!(t, DataType::Interval(_) | DataType::Duration(_))
}

/// Whether an arithmetic operator can fail on its operands' values.
fn may_fail(binary: &BinaryExpr, schema: &DFSchema) -> bool {
    // Integers and floats wrap or saturate; dates, times and decimals
    // can overflow with an error.
    let temporal = |e: &Expr| {
        e.get_type(schema).is_ok_and(|t| {
            t.is_temporal()
                || matches!(
                    t,
                    DataType::Interval(_)
                        | DataType::Duration(_)
                        | DataType::Decimal32(..)
                        | DataType::Decimal64(..)
                        | DataType::Decimal128(..)
                        | DataType::Decimal256(..)
                )
        })
    };
    match binary.op {
        Operator::Divide | Operator::Modulo | Operator::IntegerDivide => {
            !is_safe_divisor(&binary.right)
        }
        Operator::Plus | Operator::Minus | Operator::Multiply => {
            temporal(&binary.left) || temporal(&binary.right)
        }
        _ => false,
    }
}

/// A constant divisor no value can fail on: not zero (either sign), not
/// NULL, and not an integer -1 (the smallest integer divided by -1
/// overflows).
fn is_safe_divisor(divisor: &Expr) -> bool {
    match divisor {
        Expr::Literal(value, _) => {
            let minus_one = value.data_type().is_integer()
                && ScalarValue::new_negative_one(&value.data_type()).is_ok_and(|m| *value == m);
            !value.is_null()
                && !minus_one
                && match value {
                    ScalarValue::Float64(Some(v)) => *v != 0.0,
                    ScalarValue::Float32(Some(v)) => *v != 0.0,
                    _ => ScalarValue::new_zero(&value.data_type()).is_ok_and(|zero| *value != zero),
                }
        }
        _ => false,
    }
}

/// A catalogued function that may fail on data, evaluated so that a row
/// it fails on gives NULL: the whole batch first (the common case costs
/// nothing more), and only when that fails, row by row.
/// The site's wrappers of scalar functions as a cluster's plan codec
/// carries them (see `crate::site::ballista::codec`).
#[cfg(feature = "ballista")]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum NeverFailWire {
    /// A function that gives NULL where it would fail (by its name).
    NullOnError(String),
    /// Arithmetic that gives NULL where it would fail: the operator and
    /// the result type, as their texts.
    Arithmetic { op: String, return_type: String },
    /// A cast from a date or time that gives NULL where it would fail: the
    /// target type, as its text.
    Cast { to: String },
}

/// The arithmetic operators a site wraps (those that can fail on values).
#[cfg(feature = "ballista")]
const WRAPPED_OPERATORS: [Operator; 5] = [
    Operator::Plus,
    Operator::Minus,
    Operator::Multiply,
    Operator::Divide,
    Operator::Modulo,
];

/// `udf` as the codec carries it, if it is one of the site's wrappers.
#[cfg(feature = "ballista")]
pub(crate) fn to_wire(udf: &ScalarUDF) -> Option<NeverFailWire> {
    let inner = udf.inner();
    if let Some(wrapped) = inner.downcast_ref::<NullOnError>() {
        return Some(NeverFailWire::NullOnError(wrapped.inner.name().to_string()));
    }
    if let Some(cast) = inner.downcast_ref::<SiteCast>() {
        return Some(NeverFailWire::Cast {
            to: cast.to.to_string(),
        });
    }
    inner
        .downcast_ref::<SiteArithmetic>()
        .map(|a| NeverFailWire::Arithmetic {
            op: a.op.to_string(),
            return_type: a.return_type.to_string(),
        })
}

/// The wrapper `wire` describes; `function` finds a scalar function by name.
#[cfg(feature = "ballista")]
pub(crate) fn from_wire(
    wire: NeverFailWire,
    function: impl Fn(&str) -> DFResult<Arc<ScalarUDF>>,
) -> DFResult<ScalarUDF> {
    Ok(match wire {
        NeverFailWire::NullOnError(name) => ScalarUDF::new_from_impl(NullOnError {
            inner: function(&name)?,
        }),
        NeverFailWire::Cast { to } => ScalarUDF::new_from_impl(SiteCast::to(to.parse()?)),
        NeverFailWire::Arithmetic { op, return_type } => {
            let Some(op) = WRAPPED_OPERATORS.into_iter().find(|o| o.to_string() == op) else {
                return internal_err!("site_arithmetic of an unknown operator {op}");
            };
            let return_type = return_type.parse::<DataType>()?;
            ScalarUDF::new_from_impl(SiteArithmetic {
                op,
                return_type,
                signature: Signature::any(2, Volatility::Immutable),
            })
        }
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct NullOnError {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for NullOnError {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DFResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DFResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_nullable(&self, _args: &[Expr], _schema: &dyn ExprSchema) -> bool {
        true
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.inner().conditional_arguments(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        row_by_row_on_error(args, |args| self.inner.invoke_with_args(args))
    }
}

/// An arithmetic operator that may fail on data (integer division by zero
/// or of the smallest integer by -1, a float divided by -0.0, date, time
/// and decimal arithmetic past its range), evaluated by DataFusion's own
/// operator NULL-on-error.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SiteArithmetic {
    op: Operator,
    return_type: DataType,
    signature: Signature,
}

impl ScalarUDFImpl for SiteArithmetic {
    fn name(&self) -> &str {
        "site_arithmetic"
    }

    fn display_name(&self, args: &[Expr]) -> DFResult<String> {
        match args {
            [l, r] => Ok(format!("{l} {} {r}", self.op)),
            _ => Ok(self.name().to_string()),
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(self.return_type.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let op = self.op;
        row_by_row_on_error(args, |args| {
            let rows = args.number_rows;
            let [l, r] = args.args.as_slice() else {
                return internal_err!("site_arithmetic takes two arguments");
            };
            let batch = RecordBatch::try_new(
                Arc::new(Schema::new(vec![
                    Field::new("l", l.data_type(), true),
                    Field::new("r", r.data_type(), true),
                ])),
                vec![l.to_array(rows)?, r.to_array(rows)?],
            )?;
            let expr = physical_binary(
                Arc::new(PhysicalColumn::new("l", 0)),
                op,
                Arc::new(PhysicalColumn::new("r", 1)),
                batch.schema_ref(),
            )?;
            expr.evaluate(&batch)
        })
    }
}

/// A cast from a date or time, giving NULL for the rows it fails on.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SiteCast {
    to: DataType,
    signature: Signature,
}

impl SiteCast {
    fn to(to: DataType) -> Self {
        Self {
            to,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SiteCast {
    fn name(&self) -> &str {
        "site_cast"
    }

    fn display_name(&self, args: &[Expr]) -> DFResult<String> {
        match args {
            [e] => Ok(format!("TRY_CAST({e} AS {})", self.to)),
            _ => Ok(self.name().to_string()),
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(self.to.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let to = self.to.clone();
        row_by_row_on_error(args, |args| {
            let [value] = args.args.as_slice() else {
                return internal_err!("site_cast takes one argument");
            };
            // DataFusion's own cast options (its text formats), NULL on a
            // value that does not cast.
            let safe = datafusion::arrow::compute::CastOptions {
                safe: true,
                ..datafusion::common::format::DEFAULT_CAST_OPTIONS
            };
            let array = value.to_array(args.number_rows)?;
            Ok(ColumnarValue::Array(
                datafusion::arrow::compute::cast_with_options(&array, &to, &safe)?,
            ))
        })
    }
}

/// `evaluate(args)`, or, when it fails, each row evaluated alone with NULL
/// for the rows that fail. A panic is a failure like an error (a library's
/// index out of bounds on one row's value would otherwise fail the whole
/// query: the eighteenth outside attack read a value from
/// `array_length`'s).
fn row_by_row_on_error(
    args: ScalarFunctionArgs,
    evaluate: impl Fn(ScalarFunctionArgs) -> DFResult<ColumnarValue>,
) -> DFResult<ColumnarValue> {
    let evaluate = |args: ScalarFunctionArgs| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| evaluate(args)))
            .unwrap_or_else(|_| internal_err!("a function panicked"))
    };
    let return_type = args.return_field.data_type().clone();
    let one_row = |row: Option<usize>| ScalarFunctionArgs {
        args: args
            .args
            .iter()
            .map(|a| match (a, row) {
                (ColumnarValue::Array(array), Some(row)) => {
                    ColumnarValue::Array(array.slice(row, 1))
                }
                (other, _) => other.clone(),
            })
            .collect(),
        arg_fields: args.arg_fields.clone(),
        number_rows: if row.is_some() { 1 } else { args.number_rows },
        return_field: Arc::clone(&args.return_field),
        config_options: Arc::clone(&args.config_options),
    };
    if let Ok(value) = evaluate(one_row(None)) {
        return Ok(value);
    }
    let all_scalars = args
        .args
        .iter()
        .all(|a| matches!(a, ColumnarValue::Scalar(_)));
    if all_scalars {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from(&return_type)?));
    }
    let mut rows: Vec<ArrayRef> = Vec::with_capacity(args.number_rows);
    for row in 0..args.number_rows {
        rows.push(match evaluate(one_row(Some(row))) {
            Ok(value) => value.to_array(1)?,
            Err(_) => new_null_array(&return_type, 1),
        });
    }
    let refs: Vec<&dyn Array> = rows.iter().map(|a| a.as_ref()).collect();
    if refs.is_empty() {
        return Ok(ColumnarValue::Array(new_null_array(&return_type, 0)));
    }
    Ok(ColumnarValue::Array(concat(&refs)?))
}
