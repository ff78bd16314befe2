//! Comparing host tensors with expected values, like
//! `torch.testing.assert_close`.

use super::Tensor;
use crate::ir::DType;

/// Floating tolerance: `|got - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// `torch.testing.assert_close`'s defaults: f64 (1e-7, 1e-7), f32
    /// (1.3e-6, 1e-5), f16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5); fp8 (0.125,
    /// 1e-5), one step of a 3-bit mantissa. `None` for integers and booleans,
    /// which must be equal.
    pub fn default_for(dtype: DType) -> Option<Tolerance> {
        let (rtol, atol) = match dtype {
            DType::Float64 => (1e-7, 1e-7),
            DType::Float32 => (1.3e-6, 1e-5),
            DType::Float16 => (1e-3, 1e-5),
            DType::Bfloat16 => (1.6e-2, 1e-5),
            d if d.is_floating() => (1.25e-1, 1e-5),
            _ => return None,
        };
        Some(Tolerance { rtol, atol })
    }
}

/// How a tensor differs from the expected one.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Mismatch {
    /// Different dtype or shape.
    #[error("got {got_dtype}{got_size:?}, expected {expected_dtype}{expected_size:?}")]
    Layout {
        /// Dtype of the result.
        got_dtype: DType,
        /// Shape of the result.
        got_size: Vec<i64>,
        /// Expected dtype.
        expected_dtype: DType,
        /// Expected shape.
        expected_size: Vec<i64>,
    },
    /// Elements outside the tolerance.
    #[error(
        "{count} of {numel} elements differ{}; first at index {index:?}: got {got}, expected {expected}",
        tolerance.map(|t| format!(" (rtol {}, atol {})", t.rtol, t.atol)).unwrap_or_default()
    )]
    Values {
        /// How many elements differ.
        count: usize,
        /// Elements in all.
        numel: usize,
        /// Index of the first differing element.
        index: Vec<i64>,
        /// Its value in the result.
        got: f64,
        /// Its expected value.
        expected: f64,
        /// The tolerance used (`None`: exact).
        tolerance: Option<Tolerance>,
    },
    /// The data could not be read.
    #[error("{0}")]
    Unreadable(String),
}

/// Compares `got` with `expected`: same dtype and shape, then every element.
/// Floating dtypes use `tolerance` (default: [`Tolerance::default_for`]); NaN
/// matches NaN and infinities must be equal. Integers and booleans must be
/// equal (compared as `i64`, so exactly).
pub fn compare(got: &Tensor, expected: &Tensor, tolerance: Option<Tolerance>) -> Result<(), Mismatch> {
    if got.dtype() != expected.dtype() || got.size() != expected.size() {
        return Err(Mismatch::Layout {
            got_dtype: got.dtype(),
            got_size: got.size().to_vec(),
            expected_dtype: expected.dtype(),
            expected_size: expected.size().to_vec(),
        });
    }
    let unreadable = |e: super::ExecError| Mismatch::Unreadable(e.to_string());
    let tolerance = if got.dtype().is_floating() {
        tolerance.or_else(|| Tolerance::default_for(got.dtype()))
    } else {
        None
    };
    let (count, first, numel) = match tolerance {
        Some(tol) => {
            let (g, e) = (
                got.to_f64_vec().map_err(unreadable)?,
                expected.to_f64_vec().map_err(unreadable)?,
            );
            let close =
                |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol.atol + tol.rtol * b.abs();
            let bad: Vec<usize> = (0..g.len().min(e.len())).filter(|i| !close(g[*i], e[*i])).collect();
            (bad.len(), bad.first().map(|i| (*i, g[*i], e[*i])), g.len())
        }
        None => {
            let (g, e) = (
                got.to_i64_vec().map_err(unreadable)?,
                expected.to_i64_vec().map_err(unreadable)?,
            );
            let bad: Vec<usize> = (0..g.len().min(e.len())).filter(|i| g[*i] != e[*i]).collect();
            (
                bad.len(),
                bad.first().map(|i| (*i, g[*i] as f64, e[*i] as f64)),
                g.len(),
            )
        }
    };
    match first {
        None => Ok(()),
        Some((flat, g, e)) => Err(Mismatch::Values {
            count,
            numel,
            index: unravel(flat, got.size()),
            got: g,
            expected: e,
            tolerance,
        }),
    }
}

/// The multi-index of row-major element `flat` in `size`.
fn unravel(flat: usize, size: &[i64]) -> Vec<i64> {
    let mut index = vec![0i64; size.len()];
    let mut rest = flat as i64;
    for (d, n) in size.iter().enumerate().rev() {
        let n = (*n).max(1);
        index[d] = rest % n;
        rest /= n;
    }
    index
}
