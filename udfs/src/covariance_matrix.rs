//! `covariance_matrix(x1, ..., xk)`: the sample covariance matrix of k
//! columns (listwise deletion of rows with a NULL). State: the centered
//! co-moments n, means and cross products (k² + k + 1 numbers).

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature};

use crate::comoments::{CoMoments, CoMomentsAccumulator, argument_names};
use crate::labeled::{labeled_matrix, labeled_matrix_type};

/// The sample covariance matrix of its arguments, as a labeled matrix.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CovarianceMatrix {
    signature: Signature,
}

impl Default for CovarianceMatrix {
    fn default() -> Self {
        Self {
            signature: crate::comoments::numeric_signature(),
        }
    }
}

fn finish(state: &CoMoments, names: &[String]) -> Result<ScalarValue> {
    labeled_matrix(names, state.covariance().as_ref())
}

impl AggregateUDFImpl for CovarianceMatrix {
    fn name(&self) -> &str {
        "covariance_matrix"
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
    async fn matches_covar_samp_and_var_samp() {
        let (got, want) = crate::testing::run_pair(
            "SELECT covariance_matrix(a, b) AS m FROM t",
            "SELECT var_samp(a) AS aa, covar_samp(a, b) AS ab, var_samp(b) AS bb FROM t WHERE a IS NOT NULL AND b IS NOT NULL",
        )
        .await;
        let m = matrix_of(&got, "m");
        let w: Vec<f64> = (0..3).map(|i| crate::testing::float(&want, i)).collect();
        for (x, y) in [
            (m[0][0], w[0]),
            (m[0][1], w[1]),
            (m[1][0], w[1]),
            (m[1][1], w[2]),
        ] {
            assert!((x - y).abs() <= 1e-9 * y.abs(), "{x} vs {y}");
        }
    }

    #[tokio::test]
    async fn merge_of_split_states_equals_one_pass() {
        assert_split_invariant("covariance_matrix(a, b, c)").await;
    }
}
