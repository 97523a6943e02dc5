//! `correlation_matrix(x1, ..., xk)`: the correlation matrix of k columns
//! (listwise deletion of rows with a NULL). State: the centered co-moments
//! n, means and cross products (k² + k + 1 numbers).

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature};

use crate::comoments::{CoMoments, CoMomentsAccumulator, argument_names};
use crate::labeled::{labeled_matrix, labeled_matrix_type};

/// The correlation matrix of its arguments, as a labeled matrix.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CorrelationMatrix {
    signature: Signature,
}

impl Default for CorrelationMatrix {
    fn default() -> Self {
        Self {
            signature: crate::comoments::numeric_signature(),
        }
    }
}

fn finish(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    labeled_matrix(names, state.correlation().as_ref())
}

impl AggregateUDFImpl for CorrelationMatrix {
    fn name(&self) -> &str {
        "correlation_matrix"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(labeled_matrix_type())
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        crate::comoments::coerce_to_float(self.name(), arg_types)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(CoMoments::state_fields(args.name, args.input_fields.len()))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(CoMomentsAccumulator::new(
            argument_names(&args),
            finish,
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{assert_split_invariant, matrix_of};

    #[tokio::test]
    async fn matches_corr_with_a_unit_diagonal() {
        let (got, want) = crate::testing::run_pair(
            "SELECT correlation_matrix(a, c) AS m FROM t",
            "SELECT corr(a, c) AS r FROM t",
        )
        .await;
        let m = matrix_of(&got, "m");
        let r = crate::testing::float(&want, 0);
        assert_eq!((m[0][0], m[1][1]), (1.0, 1.0));
        assert!((m[0][1] - r).abs() <= 1e-9 * r.abs() && (m[1][0] - r).abs() <= 1e-9 * r.abs());
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("correlation_matrix(a, b, c)").await;
    }
}
