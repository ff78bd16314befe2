//! A bundle's conventions in one place: the names of its files, the
//! reference tensors a program's outputs pair with (`graph_out<k>`), and how
//! tolerances are overridden and combined. The CLI and the tests use these
//! rather than spelling them out.

use crate::exec::compare::{BundleMeta, Tolerance};

pub use super::{INPUTS, KERNELS, PROGRAM_JSON, PROGRAM_TEXT};
pub use crate::exec::compare::reference_outputs;

/// The bundle's metadata (`bundle.json`, [`BundleMeta`]).
pub const METADATA: &str = BundleMeta::FILE;
/// Eager PyTorch's outputs.
pub const EXPECTED: &str = BundleMeta::EXPECTED;
/// Inductor's compiled outputs (same tensor names as [`EXPECTED`]).
pub const COMPILED: &str = BundleMeta::COMPILED;

/// `tolerance` with `rtol` and `atol` replacing its parts when given (a
/// bundle without a tolerance starts from zero); unchanged when neither is
/// given (`None` then means the dtype defaults).
pub fn with_overrides(tolerance: Option<Tolerance>, rtol: Option<f64>, atol: Option<f64>) -> Option<Tolerance> {
    if rtol.is_none() && atol.is_none() {
        return tolerance;
    }
    let base = tolerance.unwrap_or(Tolerance { rtol: 0.0, atol: 0.0 });
    Some(Tolerance {
        rtol: rtol.unwrap_or(base.rtol),
        atol: atol.unwrap_or(base.atol),
    })
}

/// The looser of two tolerances, part by part: what a comparison with
/// Inductor's outputs uses when the run cannot compute what Inductor
/// computed (the eager tolerance where it is looser).
pub fn loosest(a: Tolerance, b: Tolerance) -> Tolerance {
    Tolerance {
        rtol: a.rtol.max(b.rtol),
        atol: a.atol.max(b.atol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_loosest() {
        let t = Tolerance { rtol: 1e-3, atol: 1e-5 };
        assert_eq!(with_overrides(Some(t), None, None), Some(t));
        assert_eq!(with_overrides(None, None, None), None);
        assert_eq!(
            with_overrides(Some(t), None, Some(0.5)),
            Some(Tolerance { rtol: 1e-3, atol: 0.5 })
        );
        assert_eq!(
            with_overrides(None, Some(0.1), None),
            Some(Tolerance { rtol: 0.1, atol: 0.0 })
        );
        let u = Tolerance { rtol: 1e-4, atol: 1e-2 };
        assert_eq!(loosest(t, u), Tolerance { rtol: 1e-3, atol: 1e-2 });
    }
}
