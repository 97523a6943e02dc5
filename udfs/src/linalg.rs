//! Shared-only linear algebra on merged matrices, through nalgebra (pure
//! Rust: no system BLAS or LAPACK). Everything here runs on the coordinator
//! after the merge, on matrices whose size is the number of model terms.
//!
//! Symmetric positive (semi)definite matrices are equilibrated to a unit
//! diagonal before they are factored, so that columns on very different
//! scales (a year next to a fraction) do not cost precision.

use nalgebra::{DMatrix, DVector};
use ndarray::{Array1, Array2};

/// Default tolerance of [`aliased_columns`]: a column whose part not
/// explained by the earlier kept columns has a relative squared norm below
/// this is aliased. 1e-10 on the squared scale is 1e-5 on the scale of R's
/// QR tolerance: exact and near-exact collinearity is found, while designs
/// as ill-conditioned as the Longley data keep every column.
pub const ALIAS_TOLERANCE: f64 = 1e-10;

/// An ndarray matrix as a nalgebra matrix.
pub fn to_dmatrix(a: &Array2<f64>) -> DMatrix<f64> {
    DMatrix::from_fn(a.nrows(), a.ncols(), |i, j| a[[i, j]])
}

/// An ndarray vector as a nalgebra vector.
pub fn to_dvector(v: &Array1<f64>) -> DVector<f64> {
    DVector::from_iterator(v.len(), v.iter().copied())
}

/// The submatrix of rows and columns `keep`.
pub fn select(a: &DMatrix<f64>, keep: &[usize]) -> DMatrix<f64> {
    DMatrix::from_fn(keep.len(), keep.len(), |i, j| a[(keep[i], keep[j])])
}

/// The entries `keep` of a vector.
pub fn select_vector(v: &DVector<f64>, keep: &[usize]) -> DVector<f64> {
    DVector::from_iterator(keep.len(), keep.iter().map(|&i| v[i]))
}

/// The Cholesky factor of a symmetric positive definite matrix, after
/// scaling it to a unit diagonal: returns (factor, scales) with
/// `a = S L Lᵀ S`, `S = diag(scales)`. `None` when `a` is not positive definite.
pub fn cholesky(
    a: &DMatrix<f64>,
) -> Option<(nalgebra::Cholesky<f64, nalgebra::Dyn>, DVector<f64>)> {
    let scales = DVector::from_iterator(a.nrows(), (0..a.nrows()).map(|i| a[(i, i)].sqrt()));
    if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return None;
    }
    let scaled = DMatrix::from_fn(a.nrows(), a.ncols(), |i, j| {
        a[(i, j)] / (scales[i] * scales[j])
    });
    nalgebra::Cholesky::new(scaled).map(|c| (c, scales))
}

/// Solves `a x = b` for symmetric positive definite `a`.
pub fn solve_spd(a: &DMatrix<f64>, b: &DVector<f64>) -> Option<DVector<f64>> {
    let (chol, scales) = cholesky(a)?;
    let scaled_b = b.component_div(&scales);
    Some(chol.solve(&scaled_b).component_div(&scales))
}

/// The inverse of a symmetric positive definite matrix.
pub fn inverse_spd(a: &DMatrix<f64>) -> Option<DMatrix<f64>> {
    let (chol, scales) = cholesky(a)?;
    let inv = chol.inverse();
    Some(DMatrix::from_fn(a.nrows(), a.ncols(), |i, j| {
        inv[(i, j)] / (scales[i] * scales[j])
    }))
}

/// Which columns of a Gram matrix are aliased: linearly dependent on the
/// columns before them, in order, as R's `lm` reports them (NA estimates).
/// A column is kept when the Cholesky factor of the kept columns plus it
/// (on the unit-diagonal scale) has a last pivot above `tol`; a column with
/// no variation at all (zero diagonal) is aliased.
pub fn aliased_columns(gram: &DMatrix<f64>, tol: f64) -> Vec<bool> {
    let mut kept: Vec<usize> = Vec::new();
    (0..gram.nrows())
        .map(|j| {
            let mut candidate = kept.clone();
            candidate.push(j);
            let independent = cholesky(&select(gram, &candidate)).is_some_and(|(chol, _)| {
                let l = chol.l();
                let last = candidate.len() - 1;
                l[(last, last)] * l[(last, last)] > tol
            });
            if independent {
                kept.push(j);
            }
            !independent
        })
        .collect()
}

/// The rank of a Gram matrix (its number of non-aliased columns).
pub fn rank(gram: &DMatrix<f64>) -> usize {
    aliased_columns(gram, ALIAS_TOLERANCE)
        .iter()
        .filter(|a| !**a)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gram(columns: &[Vec<f64>]) -> DMatrix<f64> {
        let k = columns.len();
        DMatrix::from_fn(k, k, |i, j| {
            columns[i].iter().zip(&columns[j]).map(|(a, b)| a * b).sum()
        })
    }

    #[test]
    fn solve_and_inverse_agree_with_the_matrix() {
        let a = gram(&[
            vec![1.0, 2.0, 3.0, 4.0],
            vec![1e4, 1.1e4, 0.9e4, 1.3e4],
            vec![0.5, -0.1, 0.2, 0.9],
        ]);
        let b = DVector::from_vec(vec![1.0, 2.0, 3.0]);
        let x = solve_spd(&a, &b).unwrap();
        assert!((&a * &x - &b).norm() < 1e-9 * b.norm());
        let inv = inverse_spd(&a).unwrap();
        let identity = &a * &inv;
        assert!((identity - DMatrix::identity(3, 3)).norm() < 1e-9);
    }

    #[test]
    fn later_dependent_columns_are_aliased_in_order() {
        let x1 = vec![1.0, 2.0, 3.0, 4.0, 5.0];
        let x2 = vec![2.0, 1.0, 0.0, 1.0, 2.0];
        let x3: Vec<f64> = x1.iter().zip(&x2).map(|(a, b)| a + 2.0 * b).collect();
        let constant = vec![0.0; 5];
        let x4 = vec![1.0, -1.0, 1.0, -1.0, 3.0];
        let g = gram(&[x1, x2, x3, constant, x4]);
        assert_eq!(
            aliased_columns(&g, ALIAS_TOLERANCE),
            [false, false, true, true, false]
        );
        assert_eq!(rank(&g), 3);
        assert!(inverse_spd(&g).is_none());
    }
}
