//! A bundle's conventions in one place: the names of its files, the
//! reference tensors a program's outputs pair with (`graph_out<k>`), and how
//! tolerances are overridden and combined. The CLI and the tests use these
//! rather than spelling them out.

use crate::format::bundle_json::{BundleMeta, Tolerance};

pub use super::{INPUTS, KERNELS, PROGRAM_JSON, PROGRAM_TEXT};
pub use crate::exec::compare::reference_outputs;

/// The bundle's metadata (`bundle.json`, [`BundleMeta`]).
pub const METADATA: &str = BundleMeta::FILE;
/// Eager PyTorch's outputs.
pub const EXPECTED: &str = BundleMeta::EXPECTED;
/// Inductor's compiled outputs (same tensor names as [`EXPECTED`]).
pub const COMPILED: &str = BundleMeta::COMPILED;
/// Eager PyTorch's values of the mutated inputs after the call.
pub const MUTATED: &str = BundleMeta::MUTATED;

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

/// The tensor a runner other than wrapir (a standalone package's `main`)
/// stores program output `index` under: `out<index>`.
pub fn runner_output_name(index: usize) -> String {
    format!("out{index}")
}

/// Why a runner's stored outputs do not give the program's outputs.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunnerOutputError {
    /// No tensor for an output.
    #[error("no tensor `{name}` for output {index} (`{output}`) of the program")]
    Missing {
        /// The tensor name ([`runner_output_name`]).
        name: String,
        /// The output's index.
        index: usize,
        /// The output as the program states it.
        output: String,
    },
    /// A size output that is not a one-element integer tensor.
    #[error("`{name}` (the size output {index}) must be a one-element integer tensor, got {got}")]
    NotASize {
        /// The tensor name.
        name: String,
        /// The output's index.
        index: usize,
        /// Its dtype and sizes.
        got: String,
    },
    /// An output that is neither a tensor, an integer nor `None`.
    #[error("output {index} is {kind}: a runner stores tensors and integers only")]
    NotStorable {
        /// The output's index.
        index: usize,
        /// What it is.
        kind: String,
    },
    /// The tensor could not be read.
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
}

/// A run's outputs as a runner stores them (what [`runner_outputs`] reads
/// back, and `wrapir run --save-outputs` writes): output `i` as
/// [`runner_output_name`]`(i)`, an integer output as a 0-d int64 tensor, a
/// `None` output left out.
pub fn runner_tensors(
    outputs: &[crate::exec::Value<crate::exec::Tensor>],
) -> Result<indexmap::IndexMap<String, crate::exec::Tensor>, RunnerOutputError> {
    use crate::exec::{Tensor, Value};
    let mut stored = indexmap::IndexMap::new();
    for (index, value) in outputs.iter().enumerate() {
        let tensor = match value {
            Value::None => continue,
            Value::Tensor(t) => t.clone(),
            Value::Int(v) => Tensor::from_vec(vec![*v], &[])?,
            other => {
                return Err(RunnerOutputError::NotStorable {
                    index,
                    kind: other.kind().to_string(),
                })
            }
        };
        stored.insert(runner_output_name(index), tensor);
    }
    Ok(stored)
}

/// The outputs of `program` from the tensors another runner stored: output
/// `i` as [`runner_output_name`]`(i)`, a size output as a one-element
/// integer tensor, a `None` output left out. The values compare with a
/// bundle's references as a run's own outputs do.
pub fn runner_outputs(
    program: &crate::ir::Program,
    stored: &indexmap::IndexMap<String, crate::exec::Tensor>,
) -> Result<Vec<crate::exec::Value<crate::exec::Tensor>>, RunnerOutputError> {
    use crate::exec::Value;
    use crate::ir::GraphOutput;
    let mut values = Vec::new();
    for (index, output) in program.main.outputs.iter().enumerate() {
        let name = runner_output_name(index);
        let get = || {
            stored.get(&name).ok_or_else(|| RunnerOutputError::Missing {
                name: name.clone(),
                index,
                output: match output {
                    GraphOutput::Buffer(b) => b.to_string(),
                    GraphOutput::Expr(e) => e.to_string(),
                    GraphOutput::None => "None".to_string(),
                },
            })
        };
        values.push(match output {
            GraphOutput::None => Value::None,
            GraphOutput::Buffer(_) => Value::Tensor(get()?.clone()),
            GraphOutput::Expr(_) => {
                let t = get()?;
                match t.to_i64_vec()?.as_slice() {
                    [v] if !t.dtype().is_floating() => Value::Int(*v),
                    _ => {
                        return Err(RunnerOutputError::NotASize {
                            name: name.clone(),
                            index,
                            got: format!("{}{:?}", t.dtype(), t.size()),
                        })
                    }
                }
            }
        });
    }
    Ok(values)
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
    use crate::exec::device_ops::cuda_op;
    use crate::exec::uses::extern_uses;
    let ops: std::collections::BTreeSet<String> = extern_uses(program)
        .iter()
        .filter(|u| cuda_op(&u.op).is_some_and(|row| !row.same_numerics_as_pytorch()))
        .map(|u| crate::exec::op::op_key(&u.op))
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
        use crate::exec::op::{key, target};
        let sdpa = program(&target(key::SDPA_EFFICIENT, "default"));
        assert_eq!(
            inductor_tolerance_on_cuda(&sdpa, tight, Some(eager)),
            Some(Loosened {
                tolerance: Tolerance { rtol: 1e-3, atol: 1e-6 },
                ops: vec![key::SDPA_EFFICIENT.to_string()],
            })
        );
        assert_eq!(inductor_tolerance_on_cuda(&sdpa, tight, None), None);
        let mm = program(&format!("extern_kernels.{}", crate::exec::op::op_name(key::MM)));
        assert_eq!(inductor_tolerance_on_cuda(&mm, tight, Some(eager)), None);
    }

    #[test]
    fn runner_outputs_pair_out_i_with_output_i() {
        use crate::exec::{Tensor, Value};
        use crate::ir::{DType, Device, Layout, ProgramBuilder};
        let mut p = ProgramBuilder::new();
        let mut g = p.main();
        let x = g.tensor_input(
            "arg0_1",
            Layout::contiguous(DType::Float32, Device::cuda(0), [2i64.into()]),
        );
        g.output(&x);
        g.output_expr(7i64.into());
        g.finish();
        let program = p.finish();
        let t = Tensor::from_f64(DType::Float32, &[1.0, 2.0], &[2]).unwrap();
        let size = |v: f64, dtype| Tensor::from_f64(dtype, &[v], &[]).unwrap();
        let mut stored = indexmap::IndexMap::new();
        stored.insert(runner_output_name(0), t.clone());
        let missing = runner_outputs(&program, &stored).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "no tensor `out1` for output 1 (`7`) of the program"
        );
        stored.insert(runner_output_name(1), size(7.0, DType::Float32));
        let float = runner_outputs(&program, &stored).unwrap_err();
        assert_eq!(
            float.to_string(),
            "`out1` (the size output 1) must be a one-element integer tensor, got f32[]"
        );
        stored.insert(runner_output_name(1), size(7.0, DType::Int64));
        let values = runner_outputs(&program, &stored).unwrap();
        assert!(
            matches!(values.as_slice(), [Value::Tensor(got), Value::Int(7)] if got.to_f64_vec().unwrap() == [1.0, 2.0])
        );
        // What a run stores reads back as the same outputs; `None` is left out.
        let mut outputs = values.clone();
        outputs.push(Value::None);
        let written = runner_tensors(&outputs).unwrap();
        assert_eq!(written.keys().collect::<Vec<_>>(), ["out0", "out1"]);
        assert_eq!(written["out1"].dtype(), DType::Int64);
        let read_back = runner_outputs(&program, &written).unwrap();
        assert!(
            matches!(read_back.as_slice(), [Value::Tensor(got), Value::Int(7)] if got.to_f64_vec().unwrap() == [1.0, 2.0])
        );
        let list = runner_tensors(&[Value::List(vec![])]).unwrap_err();
        assert_eq!(
            list.to_string(),
            "output 0 is list: a runner stores tensors and integers only"
        );
    }
}
