//! cuBLAS: a handle per device, set up as PyTorch sets its own (stream,
//! workspace, math mode), and the GEMM calls PyTorch's `at::cuda::blas`
//! makes ([`BlasHandle::gemm`]).

use super::driver::{keep_loaded, setup_lock, CudaError, Device};
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

impl Device {
    /// Creates a cuBLAS handle bound to the stream.
    pub(super) fn blas_handle(self: &Arc<Self>) -> Result<BlasHandle, CudaError> {
        // SAFETY: as in `open`: a dlopen probe, checked before cudarc would panic.
        if !keep_loaded("cublas", &self.paths.library_dirs) || !unsafe { blas_sys::is_culib_present() } {
            return Err(CudaError::Library("cuBLAS (libcublas)"));
        }
        self.bind()?;
        let _setup = setup_lock();
        let raw = blas::create_handle().map_err(|e| CudaError::blas("cublasCreate", e))?;
        let major = self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let workspace_bytes = blas_workspace_bytes(major);
        let mut handle = BlasHandle {
            raw,
            workspace: 0,
            device: Arc::clone(self),
        };
        handle.workspace = self.alloc(workspace_bytes)?;
        // SAFETY: `raw` was just created; the stream outlives the handle (the
        // handle holds the device, which holds the stream).
        unsafe { blas::set_stream(raw, self.raw_stream().cast()) }
            .map_err(|e| CudaError::blas("cublasSetStream", e))?;
        // SAFETY: `raw` is live; the workspace is a live allocation of
        // `workspace_bytes` ordered on the handle's stream and freed only after
        // the handle is destroyed. Set after `cublasSetStream`, which resets it.
        unsafe { blas_sys::cublasSetWorkspace_v2(raw, handle.workspace as *mut std::ffi::c_void, workspace_bytes) }
            .result()
            .map_err(|e| CudaError::blas("cublasSetWorkspace", e))?;
        // SAFETY: `raw` is a live handle. CUBLAS_DEFAULT_MATH with a 32-bit
        // compute type never rounds fp32 inputs to TF32 (PyTorch's default
        // `allow_tf32=False`).
        unsafe { blas_sys::cublasSetMathMode(raw, blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH) }
            .result()
            .map_err(|e| CudaError::blas("cublasSetMathMode", e))?;
        Ok(handle)
    }
}

/// A cuBLAS handle; destroyed on drop.
#[derive(Debug)]
pub(super) struct BlasHandle {
    raw: blas_sys::cublasHandle_t,
    /// The handle's own workspace (PyTorch's size, see [`blas_workspace_bytes`]):
    /// cuBLAS picks algorithms by the workspace it may use, and with one set
    /// it never allocates inside a stream capture.
    workspace: sys::CUdeviceptr,
    device: Arc<Device>,
}

/// PyTorch's default cuBLAS workspace (`CUBLAS_WORKSPACE_CONFIG` unset):
/// `:4096:8` (32 MiB) from compute capability 9.0, `:4096:2:16:8` before.
pub(super) fn blas_workspace_bytes(major: i32) -> usize {
    if major >= 9 {
        4096 * 1024 * 8
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    }
}

/// One operand of a column-major GEMM.
#[derive(Clone, Copy, Debug)]
pub(super) struct GemmOperand {
    pub(super) ptr: sys::CUdeviceptr,
    pub(super) transpose: bool,
    pub(super) ld: i64,
    pub(super) batch_stride: i64,
}

impl GemmOperand {
    /// The leading dimension cuBLAS is given for this operand when `op(X)`
    /// is `rows` x `cols`: its own, unless a degenerate size makes it
    /// meaningless, then the one PyTorch's `cublasAdjustLdLevel3` picks.
    fn adjusted_ld(&self, rows: i64, cols: i64) -> i64 {
        if self.transpose {
            if rows <= 1 {
                return cols.max(1);
            }
        } else if cols <= 1 {
            return rows.max(1);
        }
        self.ld
    }
}

impl Gemm {
    /// `(lda, ldb, ldc)` as PyTorch's `cublasAdjustLdLevel3` gives them to
    /// cuBLAS: `op(A)` is m x k, `op(B)` k x n, C (never transposed) m x n.
    pub(super) fn leading_dims(&self) -> (i64, i64, i64) {
        let ldc = if self.n <= 1 { self.m.max(1) } else { self.c.ld };
        (
            self.a.adjusted_ld(self.m, self.k),
            self.b.adjusted_ld(self.k, self.n),
            ldc,
        )
    }
}

/// A column-major `C = alpha * op(A) op(B) + beta * C`, batched.
#[derive(Clone, Copy, Debug)]
pub(super) struct Gemm {
    pub(super) m: i64,
    pub(super) n: i64,
    pub(super) k: i64,
    pub(super) batch: i64,
    pub(super) a: GemmOperand,
    pub(super) b: GemmOperand,
    pub(super) c: GemmOperand,
    pub(super) alpha: f32,
    pub(super) beta: f32,
    pub(super) dtype: blas_sys::cudaDataType,
    /// The handle's math mode for this call (TF32, reduced-precision reductions).
    pub(super) math: blas_sys::cublasMath_t,
}

impl BlasHandle {
    /// Runs `g` as PyTorch's `at::cuda::blas::gemm` / `bgemm` do: leading
    /// dimensions adjusted for degenerate sizes (`cublasAdjustLdLevel3`), the
    /// math mode set, then `cublasSgemm` / `cublasGemmEx` for one matrix and
    /// `cublasSgemmStridedBatched` / `cublasGemmStridedBatchedEx` for batches
    /// (fp32 accumulation, `CUBLAS_GEMM_DEFAULT_TENSOR_OP`).
    /// [`BlasHandle::gemm`] with `workspace` (a live device allocation of
    /// `bytes`, at least the handle's own size, ordered on the handle's
    /// stream) as the handle's workspace for this call, the handle's own
    /// set back after it: a concurrent graph's GEMMs that may overlap each
    /// get one of their own (`cublasSetWorkspace` is a host setting; a
    /// capture keeps the address the call was made with).
    pub(super) fn gemm_in(&self, g: &Gemm, workspace: sys::CUdeviceptr, bytes: usize) -> Result<(), CudaError> {
        let set = |ptr: sys::CUdeviceptr, bytes: usize| {
            // SAFETY: `raw` is live; `ptr` is a live allocation of `bytes`
            // ordered on the handle's stream (the caller's, or the handle's own).
            unsafe { blas_sys::cublasSetWorkspace_v2(self.raw, ptr as *mut c_void, bytes) }
                .result()
                .map_err(|e| CudaError::blas("cublasSetWorkspace", e))
        };
        self.device.bind()?;
        let own_bytes = self.device_workspace_bytes()?;
        set(workspace, bytes)?;
        let result = self.gemm(g);
        let restored = set(self.workspace, own_bytes);
        result.and(restored)
    }

    /// The size of the handle's own workspace.
    fn device_workspace_bytes(&self) -> Result<usize, CudaError> {
        let major = self
            .device
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        Ok(blas_workspace_bytes(major))
    }

    pub(super) fn gemm(&self, g: &Gemm) -> Result<(), CudaError> {
        let int = |v: i64, what: &str| {
            i32::try_from(v).map_err(|_| CudaError::Range(format!("GEMM {what} {v} does not fit cuBLAS's int")))
        };
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (lda, ldb, ldc) = g.leading_dims();
        let (m, n, k, batch) = (int(g.m, "m")?, int(g.n, "n")?, int(g.k, "k")?, int(g.batch, "batch")?);
        let (lda, ldb, ldc) = (int(lda, "lda")?, int(ldb, "ldb")?, int(ldc, "ldc")?);
        let (alpha, beta) = (g.alpha, g.beta);
        let (ta, tb) = (op(g.a.transpose), op(g.b.transpose));
        self.device.bind()?;
        // SAFETY: `raw` is a live handle; the mode is one of cuBLAS's values.
        unsafe { blas_sys::cublasSetMathMode(self.raw, g.math) }
            .result()
            .map_err(|e| CudaError::blas("cublasSetMathMode", e))?;
        let f32_data = g.dtype == blas_sys::cudaDataType::CUDA_R_32F;
        let compute = blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
        let algo = blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP;
        let (pa, pb, pc) = (g.a.ptr, g.b.ptr, g.c.ptr);
        let (sa, sb, sc) = (g.a.batch_stride, g.b.batch_stride, g.c.batch_stride);
        // The operands: f32 pointers for the S calls; for the Ex calls untyped
        // pointers, each of the data type `dt`.
        let (fa, fb, fc) = (pa as *const f32, pb as *const f32, pc as *mut f32);
        let (a, b, c, dt) = (pa as *const c_void, pb as *const c_void, pc as *mut c_void, g.dtype);
        let (alpha_p, beta_p) = ((&alpha as *const f32).cast(), (&beta as *const f32).cast());
        let h = self.raw;
        // SAFETY (all four calls): the handle is live; A, B and C are live
        // device allocations ordered on the handle's stream whose extents the
        // caller checked against m, n, k, the leading dimensions and batch
        // strides; alpha and beta are host f32 values, as fp32 accumulation
        // expects, living until the call returns (cuBLAS reads host scalars
        // before returning).
        // Each call on one line (cuBLAS's argument order), so that the four read side by side.
        match (batch == 1, f32_data) {
            // SAFETY: as stated above the match, for cublasSgemm.
            #[rustfmt::skip]
            (true, true) => unsafe {
                blas::sgemm(h, ta, tb, m, n, k, &alpha, fa, lda, fb, ldb, &beta, fc, ldc)
            }
            .map_err(|e| CudaError::blas("cublasSgemm", e)),
            // SAFETY: as stated above the match, for cublasGemmEx.
            #[rustfmt::skip]
            (true, false) => unsafe {
                blas::gemm_ex(h, ta, tb, m, n, k, alpha_p, a, dt, lda, b, dt, ldb, beta_p, c, dt, ldc,
                    compute, algo)
            }
            .map_err(|e| CudaError::blas("cublasGemmEx", e)),
            // SAFETY: as stated above the match, for cublasSgemmStridedBatched.
            #[rustfmt::skip]
            (false, true) => unsafe {
                blas::sgemm_strided_batched(h, ta, tb, m, n, k, &alpha, fa, lda, sa, fb, ldb, sb, &beta, fc, ldc, sc,
                    batch)
            }
            .map_err(|e| CudaError::blas("cublasSgemmStridedBatched", e)),
            // SAFETY: as stated above the match, for cublasGemmStridedBatchedEx.
            #[rustfmt::skip]
            (false, false) => unsafe {
                blas::gemm_strided_batched_ex(h, ta, tb, m, n, k, alpha_p, a, dt, lda, sa, b, dt, ldb, sb, beta_p, c, dt, ldc, sc,
                    batch, compute, algo)
            }
            .map_err(|e| CudaError::blas("cublasGemmStridedBatchedEx", e)),
        }
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let _setup = setup_lock();
        // SAFETY: the handle was created once and is destroyed once, here.
        let _ = unsafe { blas::destroy_handle(self.raw) };
        if self.workspace != 0 {
            let _ = self.device.free(self.workspace);
        }
    }
}
