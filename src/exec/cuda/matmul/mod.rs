//! The GEMM family (`mm`, `bmm`, `addmm`, `_addmm_activation`, `baddbmm`,
//! `addbmm`; the int8 `_int_mm` in [`int_mm`], the fp8 `_scaled_mm`
//! in [`scaled_mm`]; transformers' `grouped_mm_fallback` in [`grouped`]) on
//! cuBLAS and cuBLASLt, called as PyTorch's CUDA kernels call
//! them (`aten/src/ATen/native/cuda/Blas.cpp`), so that results are equal:
//!
//! * Layouts follow `cublasCommonArgs` / `prepare_matrix_for_cublas` (2-D)
//!   and `baddbmm_out_cuda_impl` / `prepare_batch_matrix_for_cublas`
//!   (batches): a row-major result is computed as the column-major
//!   `C^T = B^T A^T`; operands PyTorch would copy first (neither row- nor
//!   column-major) are left to the host fallback.
//! * `addmm` and `_addmm_activation` take cuBLASLt (`gemm_and_bias`: bias
//!   and activation in the epilogue, `beta = 0`) when
//!   `isInputCompliesAddmmCudaLt` holds: `beta == 1`, a contiguous 2-D
//!   result, a contiguous bias that squeezes to `[n]` (or, with an
//!   activation, any 2-D bias, copied into the result first and read with
//!   `beta = 1`), f32/f16/bf16, and every dimension of both operands > 1. If
//!   the heuristic returns no algorithm, the call falls back as PyTorch's does.
//! * Otherwise the bias is broadcast-copied into the result (when
//!   `beta != 0`) and one cuBLAS GEMM applies `alpha` and `beta`; then
//!   `relu_` or `gelu_(approximate="tanh")` runs in place. `addbmm` is a
//!   loop of such GEMMs into the result (`beta` first, then 1), as ATen's
//!   `addbmm_impl_` runs `addmm_` per batch.
//! * Math modes follow [`MathModes`]: TF32 for f32 only when
//!   `matmul_allow_tf32`, and the fp16 / bf16 reduced-precision-reduction
//!   switches as `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`
//!   (single GEMMs) and the Lt reduction-scheme mask.

mod call;
mod grouped;
mod int_mm;
mod scaled_mm;

use super::blaslt::{self, Activation, LtKey, LtPointers};
use super::cublas::{Gemm, GemmOperand};
use super::{kernels, CudaBackend, CudaTensor};
use crate::exec::cuda::DeviceResult;
use crate::exec::op::Args;
use crate::exec::op::ExternOp;
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::format::bundle_json::MathModes;
use crate::ir::DType;
use call::BlasCall;
use cudarc::cublas::sys::{cublasMath_t, cudaDataType};
use cudarc::cublaslt::sys as lt_sys;
use cudarc::driver::sys::CUdeviceptr;

type CallArgs<'c> = Args<'c, CudaTensor>;

/// A GEMM-family op's function.
pub(super) type GemmFn = fn(&mut CudaBackend, &ExternCall<'_, CudaTensor>, &CallArgs<'_>) -> DeviceResult;

/// The function of each family this module runs (the catalogue's
/// `CudaRoute::Blas` ops): the one table that both [`call`] and the
/// backend's route check read.
pub(super) fn op_fn(op: ExternOp) -> Option<GemmFn> {
    let f: GemmFn = match op {
        ExternOp::Mm => mm,
        ExternOp::Addmm => |b, c, a| addmm(b, c, a, Activation::None),
        ExternOp::AddmmActivation => |b, c, a| {
            let act = if a.boolean(5, "use_gelu", false)? {
                Activation::Gelu
            } else {
                Activation::Relu
            };
            addmm(b, c, a, act)
        },
        ExternOp::Bmm => |b, c, a| baddbmm(b, c, a, false),
        ExternOp::Baddbmm => |b, c, a| baddbmm(b, c, a, true),
        ExternOp::Addbmm => addbmm,
        ExternOp::BiasAddmm => bias_addmm,
        ExternOp::IntMm => int_mm::int_mm,
        ExternOp::ScaledMm => scaled_mm::scaled_mm,
        ExternOp::GroupedMmFallback => grouped::grouped_mm_fallback,
        ExternOp::GroupedMm => grouped::grouped_mm,
        _ => return None,
    };
    Some(f)
}

/// Runs `call` when it is a GEMM-family op the libraries can take; `Ok(None)` otherwise.
pub(super) fn call(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let Some(run) = op_fn(call.family) else {
        return Ok(None);
    };
    let a = Args::of(call);
    let first = (backend.blas.is_none() && backend.lt.is_none()).then(std::time::Instant::now);
    let result = run(backend, call, &a)?;
    if let Some(t0) = first {
        if backend.blas.is_some() || backend.lt.is_some() {
            backend.timings.blas_first_call += t0.elapsed();
        }
    }
    Ok(result)
}

/// The cuBLAS element type of `d`, for the dtypes the GEMMs take.
fn data_type(d: DType) -> Option<cudaDataType> {
    match d {
        DType::Float32 => Some(cudaDataType::CUDA_R_32F),
        DType::Float16 => Some(cudaDataType::CUDA_R_16F),
        DType::Bfloat16 => Some(cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

fn lt_data_type(d: DType) -> Option<lt_sys::cudaDataType> {
    match d {
        DType::Float32 => Some(lt_sys::cudaDataType::CUDA_R_32F),
        DType::Float16 => Some(lt_sys::cudaDataType::CUDA_R_16F),
        DType::Bfloat16 => Some(lt_sys::cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

/// The handle math mode PyTorch sets for a cuBLAS GEMM: TF32 for f32 when
/// allowed; for one f16 / bf16 matrix, reduced-precision reductions
/// disallowed when the switch is off (its batched GEMMs leave the default).
fn math_mode(math: &MathModes, dtype: DType, batched: bool) -> cublasMath_t {
    match dtype {
        DType::Float32 if math.matmul_allow_tf32 => cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
        DType::Float16 if !batched && !math.fp16_reduced_precision_reduction => {
            cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
        }
        DType::Bfloat16 if !batched && !math.bf16_reduced_precision_reduction => {
            cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
        }
        _ => cublasMath_t::CUBLAS_DEFAULT_MATH,
    }
}

/// A matrix: the last two dimensions of a tensor, at `ptr`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mat {
    ptr: CUdeviceptr,
    rows: i64,
    cols: i64,
    rs: i64,
    cs: i64,
}

impl Mat {
    pub(super) fn of(t: &CudaTensor) -> Mat {
        let (s, st) = (&t.spec.size, &t.spec.stride);
        let r = s.len();
        Mat {
            ptr: t.data_ptr(),
            rows: s[r - 2],
            cols: s[r - 1],
            rs: st[r - 2],
            cs: st[r - 1],
        }
    }

    fn stride(&self, d: usize) -> i64 {
        if d == 0 {
            self.rs
        } else {
            self.cs
        }
    }
}

/// PyTorch's `is_contiguous` (dimensions of size 1 ignored; empty tensors are contiguous).
pub(super) fn is_contiguous(size: &[i64], stride: &[i64]) -> bool {
    if size.contains(&0) {
        return true;
    }
    let mut expected = 1i64;
    for (s, st) in size.iter().zip(stride).rev() {
        if *s != 1 {
            if *st != expected {
                return false;
            }
            expected = expected.saturating_mul(*s);
        }
    }
    true
}

/// PyTorch's `is_non_overlapping_and_dense`.
fn non_overlapping_and_dense(size: &[i64], stride: &[i64]) -> bool {
    let mut dims: Vec<usize> = (0..size.len()).filter(|&d| size[d] >= 2).collect();
    dims.sort_by_key(|&d| stride[d]);
    let mut expected = 1i64;
    for d in dims {
        if stride[d] != expected {
            return false;
        }
        expected = expected.saturating_mul(size[d]);
    }
    true
}

/// `prepare_matrix_for_cublas`: `Some(true)` when cuBLAS reads the matrix
/// transposed (row-major), `Some(false)` column-major, `None` when PyTorch
/// would copy it first.
fn cublas_layout(m: &Mat) -> Option<bool> {
    let (size, stride) = ([m.rows, m.cols], [m.rs, m.cs]);
    if non_overlapping_and_dense(&size, &stride) {
        return Some(is_contiguous(&size, &stride));
    }
    if m.rs == 1 && m.cs >= m.rows.max(1) {
        return Some(false);
    }
    if m.cs == 1 && m.rs >= m.cols.max(1) {
        return Some(true);
    }
    None
}

/// `cublasCommonArgs`: the column-major problem for `c = mat1 @ mat2`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Common {
    /// The result is row-major (computed as `C^T = B^T A^T`).
    pub(super) transpose_result: bool,
    pub(super) m: i64,
    pub(super) n: i64,
    pub(super) k: i64,
    pub(super) a: GemmOperand,
    pub(super) b: GemmOperand,
    pub(super) c: GemmOperand,
}

pub(super) fn common(mat1: &Mat, mat2: &Mat, c: &Mat) -> Option<Common> {
    let tr = cublas_layout(c)?;
    let (ma, mb) = if tr { (mat2, mat1) } else { (mat1, mat2) };
    let (mut ta, mut tb) = (cublas_layout(ma)?, cublas_layout(mb)?);
    if tr {
        ta = !ta;
        tb = !tb;
    }
    let (sa, sb) = ([ma.rows, ma.cols], [mb.rows, mb.cols]);
    let (m, k, n) = if tr {
        (sa[1], sa[0], sb[0])
    } else {
        (sa[0], sa[1], sb[1])
    };
    let operand = |x: &Mat, transpose: bool, ld: i64| GemmOperand {
        ptr: x.ptr,
        transpose,
        ld,
        batch_stride: 0,
    };
    Some(Common {
        transpose_result: tr,
        m,
        n,
        k,
        a: operand(ma, ta, ma.stride(if ta == tr { 1 } else { 0 })),
        b: operand(mb, tb, mb.stride(if tb == tr { 1 } else { 0 })),
        c: operand(c, false, c.stride(if tr { 0 } else { 1 })),
    })
}

/// `prepare_batch_matrix_for_cublas`: (transposed, leading dimension).
fn batch_layout(t: &CudaTensor, tr: bool, m: i64, n: i64) -> Option<(bool, i64)> {
    let st = &t.spec.stride;
    let (fast, lead) = if tr { (2, 1) } else { (1, 2) };
    if st[fast] == 1 && st[lead] >= m.max(1) {
        return Some((false, st[lead]));
    }
    if st[lead] == 1 && st[fast] >= n.max(1) {
        return Some((true, st[fast]));
    }
    if is_contiguous(&t.spec.size, st) && st[1] != 0 && st[2] != 0 {
        return Some((!tr, st[1]));
    }
    None
}

/// A batched GEMM operand as `prepare_batch_matrix_for_cublas` passes it:
/// as it is where cuBLAS can read it in place (or where the result's layout
/// leaves the GEMM to the host anyway), else a contiguous copy, as ATen's
/// `tensor.clone(at::MemoryFormat::Contiguous)` (for example a batch of
/// single rows expanded with a stride of 0, which is no valid leading
/// dimension). `first`: the left operand (`batch1`).
fn batch_operand(
    backend: &mut CudaBackend,
    t: &CudaTensor,
    c: &CudaTensor,
    first: bool,
) -> Result<CudaTensor, ExecError> {
    let (rs, rz) = (&c.spec.stride, &c.spec.size);
    let Some(tr) = result_transposed(rs, rz) else {
        return Ok(t.clone());
    };
    // The operand's (m, n) in `batch_layout`'s terms: cuBLAS's A is
    // `batch2` when the result is transposed.
    let (sz, lead) = (&t.spec.size, if tr { 1 } else { 2 });
    let as_a = first != tr;
    // A's (m, k) and B's (k, n), k the contracted size.
    let (m, n) = if as_a {
        (rz[if tr { 2 } else { 1 }], sz[lead])
    } else {
        (sz[3 - lead], rz[lead])
    };
    if batch_layout(t, tr, m, n).is_some() {
        return Ok(t.clone());
    }
    let dense = backend.allocate(&TensorSpec::contiguous(t.spec.dtype, backend.device_of(), sz))?;
    kernels::copy_strided(backend, t, &t.spec.stride, &dense)?;
    Ok(dense)
}

/// Whether a batched GEMM's result is written row-major (`C^T = B^T A^T`),
/// as `baddbmm_out_cuda_impl` decides; `None` when ATen would compute into
/// a copy of the result.
fn result_transposed(rs: &[i64], rz: &[i64]) -> Option<bool> {
    if rs[1] == 1 && (rz[2] == 1 || rs[2] >= rz[1].max(1)) {
        Some(false)
    } else if rs[2] == 1 && (rz[1] == 1 || rs[1] >= rz[2].max(1)) {
        Some(true)
    } else {
        None
    }
}

/// `baddbmm_out_cuda_impl`'s problem for `c = b1 @ b2` (3-D each), or `None`
/// when PyTorch would copy an operand or the result.
fn batched(b1: &CudaTensor, b2: &CudaTensor, c: &CudaTensor) -> Option<Common> {
    let (rs, rz) = (&c.spec.stride, &c.spec.size);
    let tr = result_transposed(rs, rz)?;
    let lead = if tr { 1 } else { 2 };
    let (m, n) = (rz[if tr { 2 } else { 1 }], rz[lead]);
    let (x1, x2) = if tr { (b2, b1) } else { (b1, b2) };
    let k = x1.spec.size[lead];
    let (ta, lda) = batch_layout(x1, tr, m, k)?;
    let (tb, ldb) = batch_layout(x2, tr, k, n)?;
    // cuBLAS writes one C per batch: overlapping batches would race.
    if rz[0] > 1 && rs[0] == 0 {
        return None;
    }
    let operand = |t: &CudaTensor, transpose: bool, ld: i64| GemmOperand {
        ptr: t.data_ptr(),
        transpose,
        ld,
        batch_stride: t.spec.stride[0],
    };
    Some(Common {
        transpose_result: tr,
        m,
        n,
        k,
        a: operand(x1, ta, lda),
        b: operand(x2, tb, ldb),
        c: operand(c, false, rs[lead]),
    })
}

/// The strides of `bias` broadcast to `shape` (0 on broadcast dimensions).
fn expand_strides(a: &CallArgs<'_>, bias: &TensorSpec, shape: &[i64]) -> Result<Vec<i64>, ExecError> {
    let err = || {
        a.err(format!(
            "`self` of shape {:?} does not broadcast to {shape:?}",
            bias.size
        ))
    };
    let lead = shape.len().checked_sub(bias.size.len()).ok_or_else(err)?;
    let mut strides = vec![0i64; shape.len()];
    for (d, (s, st)) in bias.size.iter().zip(&bias.stride).enumerate() {
        if *s == shape[lead + d] {
            strides[lead + d] = if *s == 1 { 0 } else { *st };
        } else if *s != 1 {
            return Err(err());
        }
    }
    Ok(strides)
}

pub(super) fn matrix_arg(a: &CallArgs<'_>, i: usize, name: &str, rank: usize) -> Result<CudaTensor, ExecError> {
    let t = a.tensor(i, name)?;
    if t.spec.size.len() != rank {
        return Err(a.err(format!("`{name}` has rank {}, expected {rank}", t.spec.size.len())));
    }
    Ok(t.clone())
}

fn same_dtype(a: &CallArgs<'_>, x: &CudaTensor, y: &CudaTensor, what: &str) -> Result<(), ExecError> {
    if x.spec.dtype != y.spec.dtype {
        return Err(a.err(format!("{what} dtypes differ: {} and {}", x.spec.dtype, y.spec.dtype)));
    }
    Ok(())
}

/// The result: `out=` (checked against `shape` and `dtype`) or a new tensor
/// (the declared layout when it matches, else contiguous); true for `out=`.
pub(super) fn result_tensor(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
    dtype: DType,
    shape: &[i64],
) -> Result<(CudaTensor, bool), ExecError> {
    match call.kwargs.get("out") {
        Some(Value::Tensor(out)) => {
            if out.spec.size != shape || out.spec.dtype != dtype {
                return Err(a.err(format!(
                    "`out` is {}{:?}, the product is {dtype}{shape:?}",
                    out.spec.dtype, out.spec.size
                )));
            }
            Ok((out.clone(), true))
        }
        None | Some(Value::None) => {
            let declared = call
                .expected
                .as_ref()
                .and_then(|e| e.concrete())
                .filter(|s| s.size == shape && s.dtype == dtype);
            let spec = declared.unwrap_or_else(|| TensorSpec::contiguous(dtype, backend.device_of(), shape));
            Ok((backend.allocate(&spec)?, false))
        }
        Some(other) => Err(a.err(format!("`out` must be a tensor, got {}", other.kind()))),
    }
}

pub(super) fn done(c: CudaTensor, returns_out: bool) -> Option<Value<CudaTensor>> {
    Some(if returns_out { Value::None } else { Value::Tensor(c) })
}

fn mm(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>, a: &CallArgs<'_>) -> DeviceResult {
    let (x, y) = (matrix_arg(a, 0, "self", 2)?, matrix_arg(a, 1, "mat2", 2)?);
    addmm_common(backend, call, a, None, x, y, 0.0, 1.0, Activation::None)
}

fn addmm(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
    act: Activation,
) -> DeviceResult {
    let bias = a.tensor(0, "self")?.clone();
    let (x, y) = (matrix_arg(a, 1, "mat1", 2)?, matrix_arg(a, 2, "mat2", 2)?);
    let beta = a.float(3, "beta", 1.0)?;
    let alpha = a.float(4, "alpha", 1.0)?;
    same_dtype(a, &bias, &x, "`self` and `mat1`")?;
    addmm_common(backend, call, a, Some(bias), x, y, beta, alpha, act)
}

/// `extern_kernels.bias_addmm(inp, mat1, mat2, *, out, alpha, beta)`:
/// Inductor's wrapper (`torch/_inductor/kernel/mm.py`), `addmm` of `inp[0]`
/// (a view) when `inp` is a row broadcast (stride 0) or one row, else of
/// `inp`: the 1-D bias takes PyTorch's cuBLASLt epilogue path.
fn bias_addmm(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>, a: &CallArgs<'_>) -> DeviceResult {
    let inp = a.tensor(0, "inp")?.clone();
    let (size, stride) = (&inp.spec.size, &inp.spec.stride);
    let first_row = matches!((size.first(), stride.first()), (Some(&s), Some(&st)) if (st == 0 && s != 0) || s == 1);
    let bias = if first_row {
        backend.view(&inp, &size[1..], &stride[1..], inp.spec.offset)?
    } else {
        inp.clone()
    };
    let (x, y) = (matrix_arg(a, 1, "mat1", 2)?, matrix_arg(a, 2, "mat2", 2)?);
    // `alpha` and `beta` are keyword-only.
    let beta = a.float(usize::MAX, "beta", 1.0)?;
    let alpha = a.float(usize::MAX, "alpha", 1.0)?;
    same_dtype(a, &bias, &x, "`inp` and `mat1`")?;
    addmm_common(backend, call, a, Some(bias), x, y, beta, alpha, Activation::None)
}

/// `addmm_out_cuda_impl`: `out = act(beta * bias + alpha * x @ y)`.
#[allow(clippy::too_many_arguments)]
fn addmm_common(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
    bias: Option<CudaTensor>,
    x: CudaTensor,
    y: CudaTensor,
    beta: f64,
    alpha: f64,
    act: Activation,
) -> DeviceResult {
    same_dtype(a, &x, &y, "operand")?;
    let dtype = x.spec.dtype;
    let (m, k, n) = (x.spec.size[0], x.spec.size[1], y.spec.size[1]);
    if y.spec.size[0] != k {
        return Err(a.err(format!(
            "cannot multiply shapes {:?} and {:?}",
            x.spec.size, y.spec.size
        )));
    }
    let shape = [m, n];
    let bias_strides = bias.as_ref().map(|b| expand_strides(a, &b.spec, &shape)).transpose()?;
    if data_type(dtype).is_none() {
        return Ok(None);
    }
    let (c, returns_out) = result_tensor(backend, call, a, dtype, &shape)?;
    if m == 0 || n == 0 {
        return Ok(done(c, returns_out));
    }
    let Some(cm) = common(&Mat::of(&x), &Mat::of(&y), &Mat::of(&c)) else {
        return Ok(None);
    };
    let op = call.op;
    if let Some(b) = bias.as_ref().filter(|b| lt_complies(&c, b, &x, &y, beta, act)) {
        if addmm_lt(
            backend,
            op,
            b,
            bias_strides.as_deref().unwrap_or_default(),
            &cm,
            &c,
            alpha,
            act,
        )? {
            return Ok(done(c, returns_out));
        }
    }
    if let (Some(b), Some(st)) = (&bias, &bias_strides) {
        if beta != 0.0 {
            kernels::copy_strided(backend, b, st, &c)?;
        }
    }
    let beta = if bias.is_some() { beta } else { 0.0 };
    submit_gemm(backend, op, &cm, 1, alpha, beta, dtype)?;
    // ATen returns early for an empty reduction, before the activation.
    if act != Activation::None && k > 0 {
        kernels::gemm_activation(backend, &c, act == Activation::Gelu)?;
    }
    Ok(done(c, returns_out))
}

/// `isInputCompliesAddmmCudaLt` (CUDA >= 12.1).
fn lt_complies(c: &CudaTensor, bias: &CudaTensor, x: &CudaTensor, y: &CudaTensor, beta: f64, act: Activation) -> bool {
    let n = y.spec.size[1];
    let squeezed = bias.spec.size.iter().filter(|s| **s != 1).count();
    let vector = is_contiguous(&bias.spec.size, &bias.spec.stride)
        && (bias.spec.size.len() == 1 || squeezed == 1)
        && bias.spec.size.last() == Some(&n);
    let matrix = act != Activation::None && bias.spec.size.len() == 2;
    beta == 1.0
        && c.spec.size.len() == 2
        && is_contiguous(&c.spec.size, &c.spec.stride)
        && (vector || matrix)
        && x.spec.size.iter().chain(&y.spec.size).all(|s| *s > 1)
}

/// The Lt path (`launchGemmAndBiasCublasLt`); false when the heuristic
/// found no algorithm (the caller then takes the cuBLAS path).
#[allow(clippy::too_many_arguments)]
fn addmm_lt(
    backend: &mut CudaBackend,
    op: &str,
    bias: &CudaTensor,
    bias_strides: &[i64],
    cm: &Common,
    c: &CudaTensor,
    alpha: f64,
    act: Activation,
) -> Result<bool, ExecError> {
    let dtype = c.spec.dtype;
    let Some(lt_type) = lt_data_type(dtype) else {
        return Ok(false);
    };
    // A contiguous bias that squeezes to [n] is the epilogue's vector (the
    // Lt problem's m = n, since the contiguous result is computed
    // transposed); any other (2-D) bias is copied into the result and read
    // with beta = 1, with the activation alone in the epilogue.
    let n = c.spec.size[1];
    let squeezed = bias.spec.size.iter().filter(|s| **s != 1).count();
    let vector = cm.transpose_result
        && is_contiguous(&bias.spec.size, &bias.spec.stride)
        && (bias.spec.size.len() == 1 || squeezed == 1)
        && bias.spec.size.last() == Some(&n);
    let math = backend.options.math;
    let compute = match dtype {
        DType::Float32 if math.matmul_allow_tf32 => lt_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        _ => lt_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    };
    let no_reduced = lt_sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u32
        | lt_sys::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_NONE as u32;
    let reduction_mask = match dtype {
        DType::Float16 if !math.fp16_reduced_precision_reduction => Some(no_reduced),
        DType::Bfloat16 if !math.bf16_reduced_precision_reduction => Some(no_reduced),
        _ => None,
    };
    let bias_ptr = if vector { bias.data_ptr() } else { 0 };
    let key = LtKey {
        dtype: lt_type,
        compute,
        reduction_mask,
        shape: call::lt_shape(cm, op)?,
        activation: act,
        bias: vector,
        align_a: blaslt::alignment(cm.a.ptr),
        align_b: blaslt::alignment(cm.b.ptr),
        align_c: blaslt::alignment(cm.c.ptr),
        align_d: blaslt::alignment(bias_ptr),
    };
    let lt = call::lt(backend)?;
    let Some(plan) = lt.plan(&key).map_err(|e| ExecError::op(op, e.to_string()))? else {
        return Ok(false);
    };
    if !vector {
        kernels::copy_strided(backend, bias, bias_strides, c)?;
    }
    let ptrs = LtPointers {
        bias: bias_ptr,
        ..call::lt_pointers(cm)
    };
    let (alpha, beta) = (alpha as f32, if vector { 0.0 } else { 1.0 });
    call::submit(
        backend,
        op,
        BlasCall::Lt {
            plan,
            ptrs,
            alpha,
            beta,
        },
    )?;
    Ok(true)
}

/// Queues one cuBLAS GEMM of `batch` matrices for `cm`.
fn submit_gemm(
    backend: &mut CudaBackend,
    op: &str,
    cm: &Common,
    batch: i64,
    alpha: f64,
    beta: f64,
    dtype: DType,
) -> Result<(), ExecError> {
    let data = data_type(dtype).ok_or_else(|| ExecError::op(op, format!("cuBLAS does not take {dtype}")))?;
    if cm.m <= 0 || cm.n <= 0 || batch <= 0 {
        return Ok(());
    }
    if backend.blas.is_none() {
        backend.blas = Some(backend.device.blas_handle()?);
    }
    let gemm = Gemm {
        m: cm.m,
        n: cm.n,
        k: cm.k,
        batch,
        a: cm.a,
        b: cm.b,
        c: cm.c,
        alpha: alpha as f32,
        beta: beta as f32,
        dtype: data,
        math: math_mode(&backend.options.math, dtype, batch > 1),
    };
    call::submit(backend, op, BlasCall::Gemm(gemm))
}

/// `bmm` (`with_bias` false) and `baddbmm`: one strided-batched GEMM (a
/// plain GEMM for one batch, as ATen calls it).
fn baddbmm(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
    with_bias: bool,
) -> DeviceResult {
    let (bias, i0, names) = if with_bias {
        (Some(a.tensor(0, "self")?.clone()), 1, ["batch1", "batch2"])
    } else {
        (None, 0, ["self", "mat2"])
    };
    let (x, y) = (matrix_arg(a, i0, names[0], 3)?, matrix_arg(a, i0 + 1, names[1], 3)?);
    let (beta, alpha) = if with_bias {
        (a.float(3, "beta", 1.0)?, a.float(4, "alpha", 1.0)?)
    } else {
        (0.0, 1.0)
    };
    same_dtype(a, &x, &y, "operand")?;
    if let Some(b) = &bias {
        same_dtype(a, b, &x, "`self` and `batch1`")?;
    }
    let (sx, sy) = (&x.spec.size, &y.spec.size);
    if sx[0] != sy[0] || sx[2] != sy[1] {
        return Err(a.err(format!("cannot multiply shapes {sx:?} and {sy:?}")));
    }
    let shape = [sx[0], sx[1], sy[2]];
    let bias_strides = bias.as_ref().map(|b| expand_strides(a, &b.spec, &shape)).transpose()?;
    let dtype = x.spec.dtype;
    if data_type(dtype).is_none() {
        return Ok(None);
    }
    let (c, returns_out) = result_tensor(backend, call, a, dtype, &shape)?;
    if c.spec.numel() == 0 {
        return Ok(done(c, returns_out));
    }
    let (x, y) = (
        batch_operand(backend, &x, &c, true)?,
        batch_operand(backend, &y, &c, false)?,
    );
    let Some(cm) = batched(&x, &y, &c) else {
        return Ok(None);
    };
    if let (Some(b), Some(st)) = (&bias, &bias_strides) {
        if beta != 0.0 {
            kernels::copy_strided(backend, b, st, &c)?;
        }
    }
    submit_gemm(backend, call.op, &cm, shape[0], alpha, beta, dtype)?;
    Ok(done(c, returns_out))
}

/// `addbmm`: the bias copied into the result, then one GEMM per batch
/// accumulating into it (`beta` for the first, 1 after), as `addbmm_impl_`.
fn addbmm(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>, a: &CallArgs<'_>) -> DeviceResult {
    let bias = a.tensor(0, "self")?.clone();
    let (x, y) = (matrix_arg(a, 1, "batch1", 3)?, matrix_arg(a, 2, "batch2", 3)?);
    let beta = a.float(3, "beta", 1.0)?;
    let alpha = a.float(4, "alpha", 1.0)?;
    same_dtype(a, &x, &y, "operand")?;
    same_dtype(a, &bias, &x, "`self` and `batch1`")?;
    let (sx, sy) = (&x.spec.size, &y.spec.size);
    if sx[0] != sy[0] || sx[2] != sy[1] {
        return Err(a.err(format!("cannot multiply shapes {sx:?} and {sy:?}")));
    }
    let shape = [sx[1], sy[2]];
    let bias_strides = expand_strides(a, &bias.spec, &shape)?;
    let dtype = x.spec.dtype;
    // No batches: ATen scales the bias (left to the host).
    if data_type(dtype).is_none() || sx[0] == 0 {
        return Ok(None);
    }
    let (c, returns_out) = result_tensor(backend, call, a, dtype, &shape)?;
    let elem = dtype.size_bytes();
    let step = |t: &CudaTensor, i: i64| -> Result<Mat, ExecError> {
        let off = i
            .checked_mul(t.spec.stride[0])
            .and_then(|e| u64::try_from(e).ok())
            .and_then(|e| e.checked_mul(elem))
            .ok_or_else(|| a.err(format!("batch {i} offset overflows")))?;
        let mut m = Mat::of(t);
        m.ptr += off;
        Ok(m)
    };
    if c.spec.numel() == 0 {
        return Ok(done(c, returns_out));
    }
    let mut plans = Vec::new();
    for i in 0..sx[0] {
        match common(&step(&x, i)?, &step(&y, i)?, &Mat::of(&c)) {
            Some(cm) => plans.push(cm),
            None => return Ok(None),
        }
    }
    if beta != 0.0 {
        kernels::copy_strided(backend, &bias, &bias_strides, &c)?;
    }
    for (i, cm) in plans.iter().enumerate() {
        submit_gemm(backend, call.op, cm, 1, alpha, if i == 0 { beta } else { 1.0 }, dtype)?;
    }
    Ok(done(c, returns_out))
}

#[cfg(test)]
mod tests {
    use super::{Gemm, GemmOperand};
    use cudarc::cublas::sys::{cublasMath_t, cudaDataType};

    /// The leading dimensions cuBLAS is given, case by case as PyTorch's
    /// `cublasAdjustLdLevel3` states them: `ldc = max(m, 1)` when `n <= 1`;
    /// a transposed A takes `max(k, 1)` when `m <= 1`, an untransposed one
    /// `max(m, 1)` when `k <= 1`; a transposed B takes `max(n, 1)` when
    /// `k <= 1`, an untransposed one `max(k, 1)` when `n <= 1`; otherwise
    /// each operand keeps its own (9 here).
    #[test]
    fn degenerate_sizes_take_pytorchs_leading_dimensions() {
        // (transpose A, transpose B, m, n, k) -> (lda, ldb, ldc)
        #[rustfmt::skip]
        let cases: [((bool, bool, i64, i64, i64), (i64, i64, i64)); 8] = [
            ((false, false, 4, 5, 6), (9, 9, 9)),
            ((false, false, 4, 1, 6), (9, 6, 4)),
            ((false, false, 4, 5, 1), (4, 9, 9)),
            ((true, false, 1, 5, 6), (6, 9, 9)),
            ((false, false, 1, 5, 6), (9, 9, 9)),
            ((false, true, 4, 5, 1), (4, 5, 9)),
            ((true, true, 4, 0, 6), (9, 9, 4)),
            ((true, true, 0, 0, 0), (1, 1, 1)),
        ];
        for ((ta, tb, m, n, k), want) in cases {
            let operand = |transpose| GemmOperand {
                ptr: 0,
                transpose,
                ld: 9,
                batch_stride: 0,
            };
            let gemm = Gemm {
                m,
                n,
                k,
                batch: 1,
                a: operand(ta),
                b: operand(tb),
                c: operand(false),
                alpha: 1.0,
                beta: 0.0,
                dtype: cudaDataType::CUDA_R_32F,
                math: cublasMath_t::CUBLAS_DEFAULT_MATH,
            };
            assert_eq!(gemm.leading_dims(), want, "transposes {ta}/{tb}, m {m} n {n} k {k}");
        }
    }
}
