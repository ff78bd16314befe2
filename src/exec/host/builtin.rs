//! What every built-in op of the host backend takes: its arguments
//! ([`Args`]), the backend's options it reads ([`BuiltinOptions`]), its
//! signature ([`Builtin`]) and the dimension helpers several ops share.
//! Below the op files and the registry (`ops.rs`) that lists them.

use super::jagged::Overflow;
use super::tensor::Tensor;
use crate::exec::{ExecError, Value};

/// An op call's arguments on the host backend.
pub(crate) type Args<'a> = crate::exec::op::Args<'a, Tensor>;

impl<'a> crate::exec::op::Args<'a, Tensor> {
    /// The tensor list at `i` or `name` (one tensor is a list of one).
    pub(super) fn tensors(&self, i: usize, name: &str) -> Result<Vec<Tensor>, ExecError> {
        match self.get(i, name) {
            Some(Value::List(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Tensor(t) => Ok(t.clone()),
                    other => Err(self.err(format!("`{name}` must be a list of tensors, found {}", other.kind()))),
                })
                .collect(),
            Some(Value::Tensor(t)) => Ok(vec![t.clone()]),
            _ => Err(self.err(format!("missing tensor-list argument `{name}`"))),
        }
    }
}

/// A built-in op.
pub(crate) type Builtin = fn(&Args<'_>, &BuiltinOptions) -> Result<Value<Tensor>, ExecError>;

/// Options the built-ins read.
#[derive(Clone, Debug)]
pub(crate) struct BuiltinOptions {
    pub(crate) jagged_overflow: Overflow,
    /// The backend's [`crate::Limits::max_alloc_bytes`], shared with it so
    /// that [`super::HostBackend::with_limits`] reaches ops already
    /// registered.
    pub(crate) max_alloc_bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The CUDA generator state `aten.randint` draws from (shared with the backend).
    pub(crate) rng: std::sync::Arc<std::sync::Mutex<crate::format::bundle_json::CudaRngState>>,
}

impl BuiltinOptions {
    /// The most bytes one result may take.
    pub(crate) fn max_alloc_bytes(&self) -> u64 {
        self.max_alloc_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A dimension index `dim` (negative: from the end) of a rank-`rank` tensor, checked.
pub(super) fn norm_dim(a: &Args<'_>, dim: i64, rank: usize) -> Result<usize, ExecError> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(a.err(format!("dimension {dim} out of range for rank {rank}")));
    }
    Ok(d as usize)
}

/// (outer, len, inner) sizes around dimension `d`.
pub(super) fn split_at(size: &[i64], d: usize) -> (usize, usize, usize) {
    let outer: i64 = size[..d].iter().product();
    let inner: i64 = size[d + 1..].iter().product();
    (
        outer as usize,
        size.get(d).copied().unwrap_or(1) as usize,
        inner as usize,
    )
}
