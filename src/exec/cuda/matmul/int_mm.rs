//! `aten._int_mm(self, mat2)` (`extern_kernels._int_mm`): int8 x int8 with
//! int32 results on cuBLASLt, as PyTorch's `_int_mm_out_cuda` calls it
//! (`aten/src/ATen/native/cuda/Blas.cpp`): its checks (more than 16 rows, a
//! reduction size and column count that are positive multiples of 8, a
//! contiguous int32 result), the layouts of `cublasCommonArgs` (a row-major
//! result computed as `C^T = B^T A^T`), then `at::cuda::blas::int8_gemm`
//! ([`blaslt::Int8Plan`]). The sums are exact (int32 accumulators wrapping
//! as the host's, [`crate::exec::host::int_gemm`]), so the result is
//! PyTorch's bit for bit. An operand PyTorch would copy first (neither row-
//! nor column-major) goes to the host fallback (`Ok(None)`), as the other
//! GEMMs' do, and so do two column-major operands, which cuBLASLt's int8
//! GEMM does not support.

use super::call::{self, BlasCall};
use super::{common, done, is_contiguous, matrix_arg, result_tensor, CallArgs, Mat};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::ExternCall;
use crate::ir::DType;

/// `_int_mm` on cuBLASLt (`out=` as Inductor calls it, or a new contiguous result).
pub(super) fn int_mm(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>, a: &CallArgs<'_>) -> DeviceResult {
    let (x, y) = (matrix_arg(a, 0, "self", 2)?, matrix_arg(a, 1, "mat2", 2)?);
    for (name, t) in [("self", &x), ("mat2", &y)] {
        if t.spec.dtype != DType::Int8 {
            return Err(a.err(format!("`{name}` must be int8, got {}", t.spec.dtype)));
        }
    }
    let (m, k) = (x.spec.size[0], x.spec.size[1]);
    let (k2, n) = (y.spec.size[0], y.spec.size[1]);
    // `_int_mm_out_cuda`'s checks: what PyTorch refuses on the GPU.
    if m <= 16 {
        return Err(a.err(format!(
            "`self` has {m} rows; PyTorch's CUDA `_int_mm` needs more than 16"
        )));
    }
    if k <= 0 || k % 8 != 0 {
        return Err(a.err(format!(
            "`self` has {k} columns; PyTorch's CUDA `_int_mm` needs a positive multiple of 8"
        )));
    }
    if k2 != k {
        return Err(a.err(format!("cannot multiply a {m}x{k} matrix by a {k2}x{n} one")));
    }
    if n <= 0 || n % 8 != 0 {
        return Err(a.err(format!(
            "`mat2` has {n} columns; PyTorch's CUDA `_int_mm` needs a positive multiple of 8"
        )));
    }
    let (c, returns_out) = result_tensor(backend, call, a, DType::Int32, &[m, n])?;
    if !is_contiguous(&c.spec.size, &c.spec.stride) {
        return Err(a.err(format!(
            "the result's strides {:?} are not contiguous, which PyTorch's CUDA `_int_mm` requires",
            c.spec.stride
        )));
    }
    // cuBLASLt's int8 GEMM refuses both operands column-major
    // (`CUBLAS_STATUS_NOT_SUPPORTED` from `cublasLtMatmul` on an H100, for
    // the transposes `cublasCommonArgs` gives that case): the host fallback
    // takes it, as it takes operands PyTorch would copy first.
    let column_major = |t: &CudaTensor| t.spec.size[1] > 1 && t.spec.stride[1] != 1;
    if column_major(&x) && column_major(&y) {
        return Ok(None);
    }
    let Some(cm) = common(&Mat::of(&x), &Mat::of(&y), &Mat::of(&c)) else {
        return Ok(None);
    };
    let shape = call::lt_shape(&cm, call.op)?;
    let plan = call::lt(backend)?.int8_plan(&shape).map_err(|e| a.err(e.to_string()))?;
    let ptrs = call::lt_pointers(&cm);
    call::submit(backend, call.op, BlasCall::Int8 { plan, ptrs })?;
    Ok(done(c, returns_out))
}
