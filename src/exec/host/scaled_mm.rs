//! `aten._scaled_mm(self, mat2, scale_a, scale_b, bias=None,
//! scale_result=None, out_dtype=None, use_fast_accum=False)` on the host,
//! with tensor-wise scales (one f32 each): the fp8 operands as f32, each
//! scaled by its scale, their product accumulated in f32 and rounded once
//! to the result dtype (f32, f16 or bf16), as PyTorch's CPU op computes it
//! up to the order of the f32 sums (its kernel's differs: results agree
//! within f32 rounding, not bit for bit). Row-wise and block-wise scales, a
//! bias, `scale_result` and fp8 results are errors, as on the CUDA backend.

use super::builtin::{Args, BuiltinOptions};
use super::gemm::matmul;
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

pub(super) fn scaled_mm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let (x, y) = (a.tensor(0, "self")?, a.tensor(1, "mat2")?);
    let fp8 = |t: &Tensor| matches!(t.dtype(), DType::Float8E4m3fn | DType::Float8E5m2);
    if !(fp8(x) && fp8(y)) {
        return Err(a.err(format!(
            "`self` and `mat2` must be float8_e4m3fn or float8_e5m2, got {} and {}",
            x.dtype(),
            y.dtype()
        )));
    }
    let (m, k, k2, n) = match (x.size(), y.size()) {
        (&[m, k], &[k2, n]) => (m, k, k2, n),
        (sx, sy) => return Err(a.err(format!("expected matrices, got {sx:?} and {sy:?}"))),
    };
    if k != k2 {
        return Err(a.err(format!("cannot multiply a {m}x{k} matrix by a {k2}x{n} one")));
    }
    let (scale_a, scale_b) = (a.tensor(2, "scale_a")?, a.tensor(3, "scale_b")?);
    let tensorwise = |s: &Tensor| s.dtype() == DType::Float32 && s.numel() == 1;
    if !(tensorwise(scale_a) && tensorwise(scale_b)) {
        return Err(a.err(format!(
            "only tensor-wise scales (one f32 each) are supported, got {}{:?} and {}{:?}",
            scale_a.dtype(),
            scale_a.size(),
            scale_b.dtype(),
            scale_b.size()
        )));
    }
    if a.opt_tensor(4, "bias")?.is_some() {
        return Err(a.err("a bias is not supported"));
    }
    if a.opt_tensor(5, "scale_result")?.is_some() {
        return Err(a.err("`scale_result` is not supported"));
    }
    let out_dtype = match a.get(6, "out_dtype") {
        None => x.dtype(),
        Some(Value::DType(d)) => *d,
        Some(v) => return Err(a.err(format!("`out_dtype` must be a dtype, got {}", v.kind()))),
    };
    if !matches!(out_dtype, DType::Float32 | DType::Float16 | DType::Bfloat16) {
        return Err(a.err(format!(
            "an {out_dtype} result is not supported (f32, f16 and bf16 are)"
        )));
    }
    a.result_elements(&[m, n], 8, o.max_alloc_bytes())?;
    // Sizes of tensors that exist: non-negative, each fits in memory.
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let scaled = |t: &Tensor, s: &Tensor| -> Result<Vec<f32>, ExecError> {
        // One element, checked above.
        let s = s.to_f64_vec()?[0] as f32;
        Ok(t.to_f64_vec()?.into_iter().map(|v| v as f32 * s).collect())
    };
    let product = matmul::<f32>(&scaled(x, scale_a)?, &scaled(y, scale_b)?, mu, ku, nu);
    let values: Vec<f64> = product.into_iter().map(f64::from).collect();
    Ok(Value::Tensor(Tensor::from_f64(out_dtype, &values, &[m, n])?))
}
