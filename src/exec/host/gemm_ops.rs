//! The GEMM-family extern ops on the host (`mm`, `bmm`, `addmm`,
//! `_addmm_activation`, `baddbmm`, `addbmm`, Inductor's `bias_addmm`): one
//! problem shape, PyTorch's accumulation dtypes, every result element
//! rounded once. `ops` registers them; other host ops (`grouped_mm`) call
//! [`gemm_op`] for their per-group products.

use super::builtin::{Args, BuiltinOptions};
use super::gemm::{matmul, Acc};
use super::tensor::Tensor;
use crate::exec::{ExecError, Value};
use crate::ir::DType;

/// The epilogue activation of `_addmm_activation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Activation {
    None,
    Relu,
    /// GELU, tanh approximation.
    Gelu,
}

/// One host GEMM-family problem: `batch` products `[m, k] @ [k, n]`, summed
/// over the batches when `sum_batches` (`addbmm`).
struct GemmShape {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    sum_batches: bool,
}

/// `act(alpha * x @ y + beta * bias)` accumulated in `F` and returned
/// unrounded (the caller rounds once to the result dtype); `bias` is laid
/// out like the result, and ignored when `beta == 0` (as ATen does).
fn gemm_in<F: Acc>(
    x: &[f64],
    y: &[f64],
    bias: Option<&[f64]>,
    s: &GemmShape,
    alpha: f64,
    beta: f64,
    act: Activation,
) -> Vec<f64> {
    let xv: Vec<F> = x.iter().map(|v| F::of(*v)).collect();
    let yv: Vec<F> = y.iter().map(|v| F::of(*v)).collect();
    let (mk, kn, mn) = (s.m * s.k, s.k * s.n, s.m * s.n);
    let mut acc: Vec<F> = if s.sum_batches {
        vec![F::ZERO; mn]
    } else {
        Vec::with_capacity(s.batch * mn)
    };
    for b in 0..s.batch {
        let p = matmul(&xv[b * mk..(b + 1) * mk], &yv[b * kn..(b + 1) * kn], s.m, s.k, s.n);
        if s.sum_batches {
            acc.iter_mut().zip(p).for_each(|(a, v)| *a = *a + v);
        } else {
            acc.extend(p);
        }
    }
    let (fa, fb) = (F::of(alpha), F::of(beta));
    let beta_kappa = F::of(std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5);
    let kappa = F::of(0.044715);
    acc.iter()
        .enumerate()
        .map(|(i, p)| {
            let mut v = fa * *p;
            if let (Some(b), true) = (bias, beta != 0.0) {
                v = v + fb * F::of(b.get(i).copied().unwrap_or(0.0));
            }
            let v = match act {
                Activation::None => v,
                Activation::Relu if v.is_nan() || v > F::ZERO => v,
                Activation::Relu => F::ZERO,
                Activation::Gelu => {
                    let inner = beta_kappa * (v + kappa * (v * v * v));
                    F::of(0.5) * v * (F::of(1.0) + inner.tanh())
                }
            };
            v.get()
        })
        .collect()
}

fn check_float_pair(a: &Args<'_>, x: &Tensor, y: &Tensor) -> Result<DType, ExecError> {
    if x.dtype() != y.dtype() {
        return Err(a.err(format!("dtypes differ: {} and {}", x.dtype(), y.dtype())));
    }
    Ok(x.dtype())
}

fn dim(a: &Args<'_>, v: i64) -> Result<usize, ExecError> {
    usize::try_from(v).map_err(|_| a.err(format!("size {v} is negative")))
}

/// The GEMM-family ops on the host: `x @ y` (2-D, or batches of 3-D when
/// `batched`), plus `beta * bias` broadcast to the result, then `act`;
/// f32, f16 and bf16 multiply and accumulate in f32 (f16 / bf16 converted, as
/// PyTorch's CPU kernels do), the others in f64; every result element is rounded once.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_op(
    a: &Args<'_>,
    o: &BuiltinOptions,
    x: &Tensor,
    y: &Tensor,
    bias: Option<&Tensor>,
    beta: f64,
    alpha: f64,
    act: Activation,
    batched: bool,
    sum_batches: bool,
) -> Result<Value<Tensor>, ExecError> {
    let dtype = check_float_pair(a, x, y)?;
    let (batch, m, k, k2, n) = match (batched, x.size(), y.size()) {
        (false, &[m, k], &[k2, n]) => (1, m, k, k2, n),
        (true, &[b, m, k], &[b2, k2, n]) if b == b2 => (b, m, k, k2, n),
        (false, _, _) => {
            return Err(a.err(format!("expected 2-d matrices, got {:?} and {:?}", x.size(), y.size())));
        }
        (true, _, _) => {
            return Err(a.err(format!(
                "expected 3-d batches of one count, got {:?} and {:?}",
                x.size(),
                y.size()
            )));
        }
    };
    if k != k2 {
        return Err(a.err(format!("shapes {:?} and {:?} cannot be multiplied", x.size(), y.size())));
    }
    let out: Vec<i64> = if batched && !sum_batches {
        vec![batch, m, n]
    } else {
        vec![m, n]
    };
    let bias = bias
        .map(|b| b.expand(&out).and_then(|e| e.to_f64_vec()))
        .transpose()
        .map_err(|e| a.err(format!("`self`: {e}")))?;
    let s = GemmShape {
        batch: dim(a, batch)?,
        m: dim(a, m)?,
        k: dim(a, k)?,
        n: dim(a, n)?,
        sum_batches,
    };
    let elements = s
        .batch
        .checked_mul(s.m)
        .and_then(|x| x.checked_mul(s.n))
        .filter(|t| i64::try_from(*t).is_ok())
        .ok_or_else(|| a.err(format!("the result {out:?} has more elements than fit in 64 bits")))?;
    // The result and its accumulator, in f64, within the one-allocation limit.
    crate::Limits::check(
        crate::Limit::AllocBytes,
        (elements as u64).saturating_mul(16),
        o.max_alloc_bytes(),
        format!("op `{}`: the result {out:?}", a.op),
    )?;
    let (xv, yv) = (x.to_f64_vec()?, y.to_f64_vec()?);
    let values = match dtype {
        DType::Float32 | DType::Float16 | DType::Bfloat16 => {
            gemm_in::<f32>(&xv, &yv, bias.as_deref(), &s, alpha, beta, act)
        }
        _ => gemm_in::<f64>(&xv, &yv, bias.as_deref(), &s, alpha, beta, act),
    };
    Ok(Value::Tensor(Tensor::from_f64(dtype, &values, &out)?))
}

pub(super) fn mm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let (x, y) = (a.tensor(0, "self")?, a.tensor(1, "mat2")?);
    gemm_op(a, o, x, y, None, 0.0, 1.0, Activation::None, false, false)
}

pub(super) fn bmm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let (x, y) = (a.tensor(0, "self")?, a.tensor(1, "mat2")?);
    gemm_op(a, o, x, y, None, 0.0, 1.0, Activation::None, true, false)
}

/// `addmm`, `_addmm_activation`, `baddbmm` and `addbmm`: `(self, mat1 |
/// batch1, mat2 | batch2, beta, alpha)`, positional or by keyword.
fn gemm_with_bias(
    a: &Args<'_>,
    o: &BuiltinOptions,
    act: Activation,
    batched: bool,
    sum_batches: bool,
) -> Result<Value<Tensor>, ExecError> {
    let bias = a.tensor(0, "self")?;
    let names = if batched {
        ["batch1", "batch2"]
    } else {
        ["mat1", "mat2"]
    };
    let (x, y) = (a.tensor(1, names[0])?, a.tensor(2, names[1])?);
    let beta = a.float(3, "beta", 1.0)?;
    let alpha = a.float(4, "alpha", 1.0)?;
    gemm_op(a, o, x, y, Some(bias), beta, alpha, act, batched, sum_batches)
}

pub(super) fn addmm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    gemm_with_bias(a, o, Activation::None, false, false)
}

/// `extern_kernels.bias_addmm(inp, mat1, mat2, *, out, alpha, beta)`:
/// Inductor's wrapper (`torch/_inductor/kernel/mm.py`), `addmm` of `inp[0]`
/// when `inp` is a row broadcast (stride 0) or one row, else of `inp`.
pub(super) fn bias_addmm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let inp = a.tensor(0, "inp")?;
    let (size, stride) = (inp.size(), inp.stride());
    let first_row = matches!((size.first(), stride.first()), (Some(&s), Some(&st)) if (st == 0 && s != 0) || s == 1);
    let row;
    let bias = if first_row {
        row = inp.view(&size[1..], &stride[1..], inp.spec().offset)?;
        &row
    } else {
        inp
    };
    let (x, y) = (a.tensor(1, "mat1")?, a.tensor(2, "mat2")?);
    // `alpha` and `beta` are keyword-only.
    let beta = a.float(usize::MAX, "beta", 1.0)?;
    let alpha = a.float(usize::MAX, "alpha", 1.0)?;
    gemm_op(a, o, x, y, Some(bias), beta, alpha, Activation::None, false, false)
}

pub(super) fn addmm_activation(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let act = if a.boolean(5, "use_gelu", false)? {
        Activation::Gelu
    } else {
        Activation::Relu
    };
    gemm_with_bias(a, o, act, false, false)
}

pub(super) fn baddbmm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    gemm_with_bias(a, o, Activation::None, true, false)
}

pub(super) fn addbmm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    gemm_with_bias(a, o, Activation::None, true, true)
}
