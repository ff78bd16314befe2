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

/// The comparison with Inductor's outputs of a run on the CUDA backend:
/// where `program` calls ops the backend runs on wrapir's own kernels rather
/// than PyTorch's library (attention), the run cannot compute what Inductor
/// computed, so the compiled tolerance `compiled` is loosened to the eager
/// one `eager` where that is looser. `None` when nothing changes (no such
/// op, or no eager tolerance).
pub fn inductor_tolerance_on_cuda(
    program: &crate::ir::Program,
    compiled: Tolerance,
    eager: Option<Tolerance>,
) -> Option<Loosened> {
    use crate::exec::device_ops::{cuda_op, extern_uses};
    let ops: std::collections::BTreeSet<String> = extern_uses(program)
        .iter()
        .filter(|u| cuda_op(&u.op).is_some_and(|row| !row.same_numerics_as_pytorch()))
        .map(|u| crate::exec::host::op_key(&u.op))
        .collect();
    match (ops.is_empty(), eager) {
        (false, Some(e)) => Some(Loosened {
            tolerance: loosest(compiled, e),
            ops: ops.into_iter().collect(),
        }),
        _ => None,
    }
}

/// A tolerance loosened by [`inductor_tolerance_on_cuda`].
#[derive(Clone, Debug, PartialEq)]
pub struct Loosened {
    /// The tolerance to compare with.
    pub tolerance: Tolerance,
    /// Why: the ops on wrapir's own kernels, by op key, sorted.
    pub ops: Vec<String>,
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

    #[test]
    fn own_kernels_loosen_the_inductor_tolerance() {
        use crate::ir::{ArgValue, DType, Device, Layout, ProgramBuilder};
        let program = |op: &str| {
            let mut p = ProgramBuilder::new();
            let mut g = p.main();
            let q = g.tensor_input(
                "arg0_1",
                Layout::contiguous(DType::Float16, Device::cuda(0), [4i64.into()]),
            );
            let out = g.extern_alloc_multi("buf0", op, vec![ArgValue::Buffer(q)]);
            g.output(&out);
            g.finish();
            p.finish()
        };
        let tight = Tolerance { rtol: 1e-5, atol: 1e-6 };
        let eager = Tolerance { rtol: 1e-3, atol: 1e-8 };
        let sdpa = program("torch.ops.aten._scaled_dot_product_efficient_attention.default");
        assert_eq!(
            inductor_tolerance_on_cuda(&sdpa, tight, Some(eager)),
            Some(Loosened {
                tolerance: Tolerance { rtol: 1e-3, atol: 1e-6 },
                ops: vec!["aten._scaled_dot_product_efficient_attention".to_string()],
            })
        );
        assert_eq!(inductor_tolerance_on_cuda(&sdpa, tight, None), None);
        let mm = program("extern_kernels.mm");
        assert_eq!(inductor_tolerance_on_cuda(&mm, tight, Some(eager)), None);
    }
}
