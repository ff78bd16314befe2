//! The host's `aten.randint`: PyTorch's CUDA values
//! ([`crate::exec::random`]) at the backend's generator state.

use super::builtin::{Args, BuiltinOptions};
use super::tensor::{self, Tensor};
use crate::exec::random::{DeviceShape, RandintPlan};
use crate::exec::{ExecError, Value};

/// The host's `aten.randint` (`randint.low_out(low, high, size, out=...)`
/// and `randint.low(low, high, size)`, int64): PyTorch's CUDA values at the
/// backend's generator state, which the call advances.
pub(crate) fn randint(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let low = a.int(0, "low", None)?;
    let high = a.int(1, "high", None)?;
    let size = a.ints(2, "size")?;
    let out = match a.get(usize::MAX, "out") {
        Some(Value::Tensor(t)) => {
            if t.size() != size.as_slice() {
                return Err(a.err(format!("`out` has shape {:?}, `size` is {size:?}", t.size())));
            }
            t.clone()
        }
        Some(v) => return Err(a.err(format!("`out` must be a tensor, got {}", v.kind()))),
        None => {
            let n = tensor::checked_numel(&size)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| a.err(format!("invalid size {size:?}")))?;
            let zeros = tensor::filled(n, 0i64, o.max_alloc_bytes(), &|| format!("{}: the result", a.op))?;
            Tensor::from_vec(zeros, &size)?
        }
    };
    let mut state = o.rng.lock().map_err(|_| a.err("generator state poisoned by a panic"))?;
    let (plan, next) = RandintPlan::new(*state, low, high, out.numel() as u64, DeviceShape::default())?;
    *state = next;
    let values = plan.values();
    if out.dtype().is_floating() {
        out.write_f64(&values.iter().map(|v| *v as f64).collect::<Vec<_>>())?;
    } else {
        out.write_i64(&values)?;
    }
    Ok(Value::Tensor(out))
}
