//! `aten._scaled_mm(self, mat2, scale_a, scale_b, bias=None,
//! scale_result=None, out_dtype=None, use_fast_accum=False)`
//! (`extern_kernels._scaled_mm`): an fp8 GEMM on cuBLASLt as PyTorch's
//! `_scaled_mm_out_cuda` runs one with tensor-wise scales
//! (`aten/src/ATen/native/cuda/Blas.cpp`): its checks (fp8 operands, not both
//! e5m2; sizes multiples of 16; `self` row-major and `mat2` column-major,
//! the only pairing cuBLASLt multiplies), the layouts and swapped scales of
//! `cublasCommonArgs`, then `at::cuda::blas::scaled_gemm`
//! ([`blaslt::Fp8Plan`]: the heuristic's algorithm within the same workspace,
//! so the result is PyTorch's). Outputs in f32, f16 or bf16.
//!
//! Not on the device (errors that say so): row-wise and block-wise scales
//! (PyTorch runs them on its CUTLASS kernels), a bias, `scale_result`, and
//! fp8 outputs.

use super::call::{self, BlasCall};
use super::{common, done, is_contiguous, matrix_arg, result_tensor, CallArgs, Mat};
use crate::exec::cuda::blaslt::{Fp8Key, LtPointers};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::{ExternCall, Value};
use crate::ir::DType;
use cudarc::cublaslt::sys::cudaDataType;

/// cuBLASLt's type of an fp8 operand.
fn fp8_type(d: DType) -> Option<cudaDataType> {
    match d {
        DType::Float8E4m3fn => Some(cudaDataType::CUDA_R_8F_E4M3),
        DType::Float8E5m2 => Some(cudaDataType::CUDA_R_8F_E5M2),
        _ => None,
    }
}

/// cuBLASLt's type of a result.
fn out_type(d: DType) -> Option<cudaDataType> {
    match d {
        DType::Float32 => Some(cudaDataType::CUDA_R_32F),
        DType::Float16 => Some(cudaDataType::CUDA_R_16F),
        DType::Bfloat16 => Some(cudaDataType::CUDA_R_16BF),
        _ => None,
    }
}

/// `_scaled_mm` with tensor-wise scales on cuBLASLt.
pub(super) fn scaled_mm(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
) -> DeviceResult {
    let (x, y) = (matrix_arg(a, 0, "self", 2)?, matrix_arg(a, 1, "mat2", 2)?);
    let (scale_a, scale_b) = (a.tensor(2, "scale_a")?.clone(), a.tensor(3, "scale_b")?.clone());
    let (Some(xt), Some(yt)) = (fp8_type(x.spec.dtype), fp8_type(y.spec.dtype)) else {
        return Err(a.err(format!(
            "`self` and `mat2` must be float8_e4m3fn or float8_e5m2, got {} and {}",
            x.spec.dtype, y.spec.dtype
        )));
    };
    if x.spec.dtype == DType::Float8E5m2 && y.spec.dtype == DType::Float8E5m2 {
        return Err(a.err("cuBLASLt does not multiply two float8_e5m2 matrices"));
    }
    let out_dtype = match a.get(6, "out_dtype") {
        None => x.spec.dtype,
        Some(Value::DType(d)) => *d,
        Some(v) => return Err(a.err(format!("`out_dtype` must be a dtype, got {}", v.kind()))),
    };
    let Some(dt) = out_type(out_dtype) else {
        return Err(a.err(format!(
            "an {out_dtype} result does not run on the device (f32, f16 and bf16 do)"
        )));
    };
    if a.opt_tensor(4, "bias")?.is_some() {
        return Err(a.err("a bias does not run on the device"));
    }
    if a.opt_tensor(5, "scale_result")?.is_some() {
        return Err(a.err("`scale_result` does not run on the device"));
    }
    let fast_accum = a.boolean(7, "use_fast_accum", false)?;
    let tensorwise = |s: &CudaTensor| s.spec.dtype == DType::Float32 && s.spec.numel() == 1;
    if !(tensorwise(&scale_a) && tensorwise(&scale_b)) {
        return Err(a.err(format!(
            "only tensor-wise scales (one f32 each) run on the device, got {}{:?} and {}{:?} (PyTorch runs other \
             scalings on its CUTLASS kernels)",
            scale_a.spec.dtype, scale_a.spec.size, scale_b.spec.dtype, scale_b.spec.size
        )));
    }
    let (m, k) = (x.spec.size[0], x.spec.size[1]);
    let (k2, n) = (y.spec.size[0], y.spec.size[1]);
    if k2 != k {
        return Err(a.err(format!("cannot multiply a {m}x{k} matrix by a {k2}x{n} one")));
    }
    if k % 16 != 0 || n % 16 != 0 {
        return Err(a.err(format!(
            "`mat2` is {k2}x{n}; PyTorch's CUDA `_scaled_mm` needs both sizes divisible by 16"
        )));
    }
    let (c, returns_out) = result_tensor(backend, call, a, out_dtype, &[m, n])?;
    if !is_contiguous(&c.spec.size, &c.spec.stride) {
        return Err(a.err(format!("the result's strides {:?} are not contiguous", c.spec.stride)));
    }
    if m == 0 || n == 0 {
        return Ok(done(c, returns_out));
    }
    let cm = common(&Mat::of(&x), &Mat::of(&y), &Mat::of(&c))
        .filter(|cm| cm.a.transpose && !cm.b.transpose)
        .ok_or_else(|| {
            a.err(format!(
                "cuBLASLt multiplies fp8 matrices only row-major by column-major: `self` has strides {:?}, \
                 `mat2` {:?}",
                x.spec.stride, y.spec.stride
            ))
        })?;
    // The row-major result is computed as C^T = B^T A^T: A is `mat2`, so
    // its scale is `scale_b` (`cublasCommonArgs` swaps them the same way).
    let (sa, sb, ta, tb) = if cm.transpose_result {
        (&scale_b, &scale_a, yt, xt)
    } else {
        (&scale_a, &scale_b, xt, yt)
    };
    let key = Fp8Key {
        a_type: ta,
        b_type: tb,
        // C is unread (beta 0); PyTorch gives it the result's type.
        c_type: dt,
        d_type: dt,
        shape: call::lt_shape(&cm, call.op)?,
        fast_accum,
    };
    let ptrs = LtPointers {
        scale_a: sa.data_ptr(),
        scale_b: sb.data_ptr(),
        ..call::lt_pointers(&cm)
    };
    let Some(plan) = call::lt(backend)?
        .fp8_plan(&key, &ptrs)
        .map_err(|e| a.err(e.to_string()))?
    else {
        return Err(a.err(
            "cuBLASLt has no fp8 algorithm for these operands on this device (fp8 GEMMs need compute capability \
             8.9 or newer)",
        ));
    };
    call::submit(backend, call.op, BlasCall::Fp8 { plan, ptrs })?;
    Ok(done(c, returns_out))
}
