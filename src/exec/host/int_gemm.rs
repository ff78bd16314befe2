//! `aten._int_mm(self, mat2)`: an int8 × int8 matrix product with int32
//! results (what `torch._int_mm` and Inductor's `extern_kernels._int_mm`
//! compute for int8 GEMMs), exact: products are summed in 32-bit integers
//! with wrap-around, as the int32 accumulators of PyTorch's kernels do.

use super::builtin::{Args, BuiltinOptions};
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

pub(super) fn int_mm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let (x, y) = (a.tensor(0, "self")?, a.tensor(1, "mat2")?);
    for (name, t) in [("self", x), ("mat2", y)] {
        if t.dtype() != DType::Int8 {
            return Err(a.err(format!("`{name}` must be int8, got {}", t.dtype())));
        }
        if t.dim() != 2 {
            return Err(a.err(format!("`{name}` must be a matrix, got rank {}", t.dim())));
        }
    }
    let (m, k) = (x.size()[0], x.size()[1]);
    let (k2, n) = (y.size()[0], y.size()[1]);
    if k != k2 {
        return Err(a.err(format!("cannot multiply a {m}x{k} matrix by a {k2}x{n} one")));
    }
    let elements = a.result_elements(&[m, n], 4, o.max_alloc_bytes())?;
    // Sizes of tensors that exist: non-negative, and each fits in memory.
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let (xv, yv) = (x.to_i64_vec()?, y.to_i64_vec()?);
    let mut out = vec![0i64; elements];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0i32;
            for p in 0..k {
                // int8 values: every product fits in an i32.
                acc = acc.wrapping_add((xv[i * k + p] * yv[p * n + j]) as i32);
            }
            out[i * n + j] = i64::from(acc);
        }
    }
    Ok(Value::Tensor(Tensor::from_i64(
        DType::Int32,
        &out,
        &[x.size()[0], y.size()[1]],
    )?))
}
