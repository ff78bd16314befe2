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

use super::{common, done, is_contiguous, matrix_arg, result_tensor, Mat};
use crate::exec::cuda::blaslt::{self, Int8Key, Int8Plan, LtPointers};
use crate::exec::cuda::library::{self, Address, LibraryCall};
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::op::Args;
use crate::exec::{ExecError, ExternCall, Value};
use crate::ir::DType;
use cudarc::driver::sys::CUdeviceptr;
use std::rc::Rc;

/// `_int_mm` on cuBLASLt (`out=` as Inductor calls it, or a new contiguous result).
pub(super) fn int_mm(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &Args<'_, CudaTensor>,
) -> Result<Option<Value<CudaTensor>>, ExecError> {
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
    let dim = |v: i64, what: &str| u64::try_from(v).map_err(|_| a.err(format!("cuBLASLt {what} = {v} is negative")));
    let key = Int8Key {
        trans_a: cm.a.transpose,
        trans_b: cm.b.transpose,
        m: dim(cm.m, "m")?,
        n: dim(cm.n, "n")?,
        k: dim(cm.k, "k")?,
        lda: cm.a.ld,
        ldb: cm.b.ld,
        ldc: cm.c.ld,
    };
    if backend.lt.is_none() {
        backend.lt = Some(blaslt::Lt::new(&backend.device)?);
    }
    let Some(lt) = backend.lt.as_mut() else {
        return Err(a.err("cuBLASLt is not loaded"));
    };
    let plan = lt.int8_plan(&key).map_err(|e| a.err(e.to_string()))?;
    let ptrs = LtPointers {
        a: cm.a.ptr,
        b: cm.b.ptr,
        c: cm.c.ptr,
        bias: 0,
    };
    library::submit(
        backend,
        Box::new(Int8Call {
            op: call.op.to_string(),
            plan,
            ptrs,
        }),
    )?;
    Ok(done(c, returns_out))
}

/// A planned int8 cuBLASLt matmul as a replayable library call (no
/// workspace, so calls on concurrent lanes share nothing: the default `run_in`).
#[derive(Debug)]
struct Int8Call {
    op: String,
    plan: Rc<Int8Plan>,
    ptrs: LtPointers,
}

impl LibraryCall for Int8Call {
    fn op(&self) -> &str {
        &self.op
    }

    fn library(&self) -> &'static str {
        "cuBLASLt"
    }

    fn addresses(&self) -> Vec<Address> {
        let p = &self.ptrs;
        library::addresses(&[(p.a, false), (p.b, false), (p.c, true)], &[])
    }

    fn rebased(&self, addresses: &[CUdeviceptr]) -> Box<dyn LibraryCall> {
        let mut ptrs = self.ptrs;
        if let [a, b, c] = *addresses {
            (ptrs.a, ptrs.b, ptrs.c) = (a, b, c);
        }
        Box::new(Int8Call {
            op: self.op.clone(),
            plan: Rc::clone(&self.plan),
            ptrs,
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        library::recorded_handle(backend.lt.as_ref(), &self.op, "cuBLASLt")?
            .int8_matmul(&self.plan, &self.ptrs)
            .map_err(|e| ExecError::op(&self.op, e.to_string()))
    }
}
