//! cuBLASLt: the handle, the persistent workspace, and planned matmuls
//! (descriptors, layouts and the heuristic's algorithm), as PyTorch's
//! `at::cuda::blas::gemm_and_bias` makes them.
//!
//! A [`LtPlan`] is made once per [`LtKey`] (shape, leading dimensions,
//! transposes, dtype, epilogue, pointer alignments, math modes) and kept by
//! the backend; running it is one `cublasLtMatmul` with the plan's
//! algorithm and the backend's workspace, so the prepared path and CUDA
//! graphs repeat it without planning. An int8 GEMM (`aten._int_mm`) has a
//! plan of its own ([`Int8Plan`]: descriptors only, as PyTorch's
//! `at::cuda::blas::int8_gemm` passes no algorithm and no workspace), and
//! so does an fp8 GEMM with tensor-wise scales (`aten._scaled_mm`,
//! [`Fp8Plan`], as `at::cuda::blas::scaled_gemm` makes it).

use super::driver::{CudaError, Device};
use cudarc::cublaslt::{result as lt, sys};
use cudarc::driver::sys as drv_sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::Arc;

/// Bytes of the Lt workspace: PyTorch's `CUBLASLT_WORKSPACE_SIZE` default
/// (1024 KiB), which its unified cuBLAS/cuBLASLt workspace (32 MiB on
/// Hopper, 8 MiB + 128 KiB elsewhere) does not cap.
pub(super) const WORKSPACE_BYTES: usize = 1024 * 1024;

fn lt_err(call: &'static str, e: lt::CublasError) -> CudaError {
    CudaError::Blas {
        call,
        status: format!("{:?}", e.0),
    }
}

fn status(call: &'static str, s: sys::cublasStatus_t) -> Result<(), CudaError> {
    s.result().map_err(|e| lt_err(call, e))
}

/// The largest power of two (at most 256) dividing `address`, as PyTorch's
/// `getAlignment` computes the `MIN_ALIGNMENT_*_BYTES` preferences.
pub(super) fn alignment(address: u64) -> u32 {
    let mut a = 256u32;
    while a > 1 && address % u64::from(a) != 0 {
        a /= 2;
    }
    a
}

/// The backend's cuBLASLt state: the handle, the workspace (one persistent
/// device allocation, as PyTorch keeps one per handle and stream) and the
/// planned matmuls.
#[derive(Debug)]
pub(super) struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: drv_sys::CUdeviceptr,
    device: Arc<Device>,
    plans: HashMap<LtKey, Rc<LtPlan>>,
    int8_plans: HashMap<Int8Key, Rc<Int8Plan>>,
    fp8_plans: HashMap<Fp8Key, Rc<Fp8Plan>>,
}

impl Lt {
    /// Loads cuBLASLt, creates a handle and allocates the workspace.
    pub(super) fn new(device: &Arc<Device>) -> Result<Lt, CudaError> {
        // SAFETY: a dlopen probe, checked first because cudarc panics on a missing library.
        if !super::driver::keep_loaded("cublasLt", &device.paths.library_dirs) || !unsafe { sys::is_culib_present() } {
            return Err(CudaError::Library("cuBLASLt (libcublasLt)"));
        }
        bind(device)?;
        let _setup = super::driver::setup_lock();
        let handle = lt::create_handle().map_err(|e| lt_err("cublasLtCreate", e))?;
        let workspace = match device.alloc(WORKSPACE_BYTES) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: the handle was just created and is destroyed once, here.
                let _ = unsafe { lt::destroy_handle(handle) };
                return Err(e);
            }
        };
        Ok(Lt {
            handle,
            workspace,
            device: Arc::clone(device),
            plans: HashMap::new(),
            int8_plans: HashMap::new(),
            fp8_plans: HashMap::new(),
        })
    }

    /// The plan for `key`, made (descriptors, preference, heuristic) on first
    /// use; `Ok(None)` when the heuristic returns no algorithm (PyTorch then
    /// falls back to the cuBLAS path).
    pub(super) fn plan(&mut self, key: &LtKey) -> Result<Option<Rc<LtPlan>>, CudaError> {
        if let Some(p) = self.plans.get(key) {
            return Ok(Some(Rc::clone(p)));
        }
        bind(&self.device)?;
        let Some(plan) = LtPlan::new(self.handle, key)? else {
            return Ok(None);
        };
        let plan = Rc::new(plan);
        self.plans.insert(key.clone(), Rc::clone(&plan));
        Ok(Some(plan))
    }

    /// Queues `plan` on the device's stream: `D = C = epilogue(alpha * op(A) op(B) + beta * C)`.
    pub(super) fn matmul(&self, plan: &LtPlan, ptrs: &LtPointers, alpha: f32, beta: f32) -> Result<(), CudaError> {
        self.matmul_in(plan, ptrs, alpha, beta, self.workspace)
    }

    /// [`Lt::matmul`] with `workspace` (a live device allocation of
    /// [`WORKSPACE_BYTES`] ordered on the stream) instead of the persistent
    /// one: a concurrent graph's matmuls that may overlap each get one.
    pub(super) fn matmul_in(
        &self,
        plan: &LtPlan,
        ptrs: &LtPointers,
        alpha: f32,
        beta: f32,
        workspace: drv_sys::CUdeviceptr,
    ) -> Result<(), CudaError> {
        let k = &plan.key;
        let checks = [
            (ptrs.a, k.align_a, "A"),
            (ptrs.b, k.align_b, "B"),
            (ptrs.c, k.align_c, "C"),
            (ptrs.bias, k.align_d, "bias"),
        ];
        for (p, planned, what) in checks {
            if alignment(p) < planned {
                return Err(CudaError::Range(format!(
                    "cuBLASLt {what} pointer {p:#x} is less aligned than the planned {planned} bytes"
                )));
            }
        }
        if (ptrs.bias != 0) != k.bias {
            return Err(CudaError::Range("cuBLASLt bias pointer does not match the plan".into()));
        }
        bind(&self.device)?;
        if k.bias {
            let bias = ptrs.bias as *const c_void;
            // The descriptor is live (the plan owns it); the attribute is a
            // device pointer read from the host value during the call. Plans
            // are used by one thread (the backend is not `Send`), so setting
            // it here cannot race another call.
            DESC.set(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &bias,
            )?;
        }
        let stream = self.device.stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: the handle, descriptors and algorithm are live; A, B and C
        // (= D) are device allocations ordered on this stream whose extents
        // the caller checked against the layouts; alpha and beta are host f32
        // values (CUDA_R_32F scale type) living until the call returns; the
        // workspace (the persistent one or the caller's, see `matmul_in`)
        // holds WORKSPACE_BYTES, the size the preference allowed.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                ptrs.a as *const c_void,
                plan.a,
                ptrs.b as *const c_void,
                plan.b,
                ptrs.c as *const c_void,
                plan.c,
                ptrs.c as *mut c_void,
                plan.c,
                &plan.algo,
                workspace as *mut c_void,
                WORKSPACE_BYTES,
                stream,
            )
        }
        .map_err(|e| lt_err("cublasLtMatmul", e))
    }
}

impl Lt {
    /// The int8 plan for `key`, made on first use.
    pub(super) fn int8_plan(&mut self, key: &Int8Key) -> Result<Rc<Int8Plan>, CudaError> {
        if let Some(p) = self.int8_plans.get(key) {
            return Ok(Rc::clone(p));
        }
        bind(&self.device)?;
        let plan = Rc::new(Int8Plan::new(key)?);
        self.int8_plans.insert(*key, Rc::clone(&plan));
        Ok(plan)
    }

    /// Queues `plan` on the device's stream: `C = A B` in int32, as
    /// `int8_gemm` calls `cublasLtMatmul`: int32 `alpha = 1`, `beta = 0`,
    /// no algorithm (cuBLASLt chooses) and no workspace.
    pub(super) fn int8_matmul(&self, plan: &Int8Plan, ptrs: &LtPointers) -> Result<(), CudaError> {
        if ptrs.bias != 0 {
            return Err(CudaError::Range("an int8 GEMM takes no bias".into()));
        }
        bind(&self.device)?;
        let (alpha, beta) = (1i32, 0i32);
        let stream = self.device.stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: the handle and the plan's descriptors are live; A and B
        // (int8) and C (= D, int32) are device allocations ordered on this
        // stream whose extents the caller checked against the layouts; alpha
        // and beta are host i32 values (the CUDA_R_32I scale type) living
        // until the call returns; a null algorithm lets cuBLASLt choose one
        // and a null workspace of 0 bytes asks for none, as PyTorch passes.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const i32).cast(),
                (&beta as *const i32).cast(),
                ptrs.a as *const c_void,
                plan.a,
                ptrs.b as *const c_void,
                plan.b,
                ptrs.c as *const c_void,
                plan.c,
                ptrs.c as *mut c_void,
                plan.c,
                std::ptr::null(),
                std::ptr::null_mut(),
                0,
                stream,
            )
        }
        .map_err(|e| lt_err("cublasLtMatmul", e))
    }
}

impl Lt {
    /// The fp8 plan for `key`, made on first use with the scale pointers of
    /// `ptrs` set, as PyTorch sets them before asking the heuristic;
    /// `Ok(None)` when the heuristic returns no algorithm (PyTorch's error).
    pub(super) fn fp8_plan(&mut self, key: &Fp8Key, ptrs: &Fp8Pointers) -> Result<Option<Rc<Fp8Plan>>, CudaError> {
        if let Some(p) = self.fp8_plans.get(key) {
            return Ok(Some(Rc::clone(p)));
        }
        bind(&self.device)?;
        let Some(plan) = Fp8Plan::new(self.handle, key, ptrs)? else {
            return Ok(None);
        };
        let plan = Rc::new(plan);
        self.fp8_plans.insert(*key, Rc::clone(&plan));
        Ok(Some(plan))
    }

    /// Queues `plan` on the device's stream with `workspace` (the persistent
    /// one, or a concurrent lane's of [`WORKSPACE_BYTES`]): `D = scale_a *
    /// scale_b * A B` as `at::cuda::blas::scaled_gemm` calls `cublasLtMatmul`
    /// (f32 `alpha = 1`, `beta = 0`, C the result).
    pub(super) fn fp8_matmul(
        &self,
        plan: &Fp8Plan,
        ptrs: &Fp8Pointers,
        workspace: Option<drv_sys::CUdeviceptr>,
    ) -> Result<(), CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        bind(&self.device)?;
        // The descriptor is live (the plan owns it); the attributes are device
        // pointers read from the host values during the call. Plans are used
        // by one thread (the backend is not `Send`), so this cannot race.
        let (scale_a, scale_b) = (ptrs.scale_a as *const c_void, ptrs.scale_b as *const c_void);
        DESC.set(plan.desc, D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a)?;
        DESC.set(plan.desc, D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = self.device.stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: the handle, descriptors and algorithm are live; A and B
        // (fp8), the scales (one f32 each) and D (= C, unread with beta 0)
        // are device allocations ordered on this stream whose extents the
        // caller checked against the layouts; alpha and beta are host f32
        // values living until the call returns; the workspace holds
        // WORKSPACE_BYTES, the size the preference allowed.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                ptrs.a as *const c_void,
                plan.a,
                ptrs.b as *const c_void,
                plan.b,
                ptrs.d as *const c_void,
                plan.c,
                ptrs.d as *mut c_void,
                plan.d,
                &plan.algo,
                workspace.unwrap_or(self.workspace) as *mut c_void,
                WORKSPACE_BYTES,
                stream,
            )
        }
        .map_err(|e| lt_err("cublasLtMatmul", e))
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        // Plans reference the handle only through calls; drop them first.
        self.plans.clear();
        self.int8_plans.clear();
        self.fp8_plans.clear();
        let _ = bind(&self.device);
        let _setup = super::driver::setup_lock();
        // SAFETY: created once in `new`, destroyed once, here.
        let _ = unsafe { lt::destroy_handle(self.handle) };
        self.device.defer(self.device.free(self.workspace));
    }
}

fn bind(device: &Device) -> Result<(), CudaError> {
    device.ctx.bind_to_thread().map_err(|e| CudaError::Driver {
        call: "cuCtxSetCurrent",
        message: e.to_string(),
    })
}

/// The epilogue of a planned matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Activation {
    None,
    Relu,
    /// GELU, tanh approximation (cuBLASLt's GELU epilogue).
    Gelu,
}

/// Everything a plan depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct LtKey {
    /// Element type of A, B, C (`CUDA_R_32F`, `CUDA_R_16F`, `CUDA_R_16BF`).
    pub(super) dtype: sys::cudaDataType,
    pub(super) compute: sys::cublasComputeType_t,
    /// `CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK`, when set.
    pub(super) reduction_mask: Option<u32>,
    pub(super) trans_a: bool,
    pub(super) trans_b: bool,
    pub(super) m: u64,
    pub(super) n: u64,
    pub(super) k: u64,
    pub(super) lda: i64,
    pub(super) ldb: i64,
    pub(super) ldc: i64,
    pub(super) activation: Activation,
    /// A bias vector of `m` elements is added in the epilogue.
    pub(super) bias: bool,
    pub(super) align_a: u32,
    pub(super) align_b: u32,
    pub(super) align_c: u32,
    /// PyTorch passes the bias pointer's alignment as D's (256 without bias).
    pub(super) align_d: u32,
}

/// Device addresses of one Lt matmul.
#[derive(Clone, Copy, Debug)]
pub(super) struct LtPointers {
    pub(super) a: drv_sys::CUdeviceptr,
    pub(super) b: drv_sys::CUdeviceptr,
    /// C and D (the result, in place).
    pub(super) c: drv_sys::CUdeviceptr,
    /// 0 without bias.
    pub(super) bias: drv_sys::CUdeviceptr,
}

/// A planned matmul: descriptor, layouts and the heuristic's first algorithm.
#[derive(Debug)]
pub(super) struct LtPlan {
    pub(super) key: LtKey,
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    c: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

/// Owns descriptors while a plan is being made (destroyed if it fails).
#[derive(Default)]
struct Parts {
    desc: Option<sys::cublasLtMatmulDesc_t>,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: Option<sys::cublasLtMatmulPreference_t>,
}

impl Drop for Parts {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once and is owned only here
        // (moved out by `LtPlan::new` on success), so it is destroyed once.
        unsafe {
            if let Some(d) = self.desc.take() {
                let _ = lt::destroy_matmul_desc(d);
            }
            for l in self.layouts.drain(..) {
                let _ = lt::destroy_matrix_layout(l);
            }
            if let Some(p) = self.pref.take() {
                let _ = lt::destroy_matmul_pref(p);
            }
        }
    }
}

/// A cuBLASLt attribute setter (`descriptor, attribute, value, bytes`) and
/// the C call it makes, for errors.
struct Setter<H, A> {
    call: &'static str,
    set: unsafe fn(H, A, *const c_void, usize) -> Result<(), lt::CublasError>,
}

/// Attributes of a matmul descriptor.
const DESC: Setter<sys::cublasLtMatmulDesc_t, sys::cublasLtMatmulDescAttributes_t> = Setter {
    call: "cublasLtMatmulDescSetAttribute",
    set: lt::set_matmul_desc_attribute,
};

/// Attributes of a matmul preference.
const PREF: Setter<sys::cublasLtMatmulPreference_t, sys::cublasLtMatmulPreferenceAttributes_t> = Setter {
    call: "cublasLtMatmulPreferenceSetAttribute",
    set: lt::set_matmul_pref_attribute,
};

impl<H, A> Setter<H, A> {
    /// Sets attribute `attr` of the live descriptor `desc` to `v`, a value
    /// of the attribute's type.
    fn set<T>(&self, desc: H, attr: A, v: &T) -> Result<(), CudaError> {
        // SAFETY: `desc` is live; `v` points at a value of the attribute's type and size.
        unsafe { (self.set)(desc, attr, (v as *const T).cast(), std::mem::size_of::<T>()) }
            .map_err(|e| lt_err(self.call, e))
    }
}

impl LtPlan {
    /// Builds the descriptors as `gemm_and_bias` does and asks the heuristic
    /// for one algorithm; `None` when it returns none.
    fn new(handle: sys::cublasLtHandle_t, key: &LtKey) -> Result<Option<LtPlan>, CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let mut parts = Parts::default();
        let desc = lt::create_matmul_desc(key.compute, sys::cudaDataType::CUDA_R_32F)
            .map_err(|e| lt_err("cublasLtMatmulDescCreate", e))?;
        parts.desc = Some(desc);
        let op = |t: bool| {
            if t {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSA, &op(key.trans_a))?;
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSB, &op(key.trans_b))?;
        let epilogue = match (key.activation, key.bias) {
            (Activation::None, false) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            (Activation::None, true) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            (Activation::Relu, false) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU,
            (Activation::Relu, true) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            (Activation::Gelu, false) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU,
            (Activation::Gelu, true) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
        };
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
        // Layouts as stored: op(A) is m x k, so A is k x m when transposed.
        let layout = |parts: &mut Parts, rows: u64, cols: u64, ld: i64, t: bool| -> Result<_, CudaError> {
            let (r, c) = if t { (cols, rows) } else { (rows, cols) };
            let l =
                lt::create_matrix_layout(key.dtype, r, c, ld).map_err(|e| lt_err("cublasLtMatrixLayoutCreate", e))?;
            parts.layouts.push(l);
            Ok(l)
        };
        let a = layout(&mut parts, key.m, key.k, key.lda, key.trans_a)?;
        let b = layout(&mut parts, key.k, key.n, key.ldb, key.trans_b)?;
        let c = layout(&mut parts, key.m, key.n, key.ldc, false)?;
        let pref = lt::create_matmul_pref().map_err(|e| lt_err("cublasLtMatmulPreferenceCreate", e))?;
        parts.pref = Some(pref);
        if let Some(mask) = key.reduction_mask {
            PREF.set(pref, P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask)?;
        }
        PREF.set(
            pref,
            P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &(WORKSPACE_BYTES as u64),
        )?;
        PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a)?;
        PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b)?;
        PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c)?;
        PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d)?;
        let mut result = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::zeroed();
        let mut returned: std::ffi::c_int = 0;
        // SAFETY: every descriptor is live; `result` has room for the one
        // requested algorithm and `returned` receives the count.
        status("cublasLtMatmulAlgoGetHeuristic", unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 1, result.as_mut_ptr(), &mut returned)
        })?;
        if returned == 0 {
            return Ok(None);
        }
        // SAFETY: zero-initialised plain data, filled by the heuristic (returned >= 1).
        let result = unsafe { result.assume_init() };
        status("cublasLtMatmulAlgoGetHeuristic", result.state)?;
        // The plan takes the descriptors; the preference is no longer needed.
        parts.desc = None;
        parts.layouts.clear();
        drop(parts);
        Ok(Some(LtPlan {
            key: key.clone(),
            desc,
            a,
            b,
            c,
            algo: result.algo,
        }))
    }
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: the plan owns these descriptors (created once in `new`) and
        // destroys each once; no call using them is pending on the host side.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in [self.a, self.b, self.c] {
                let _ = lt::destroy_matrix_layout(l);
            }
        }
    }
}

/// The column-major problem of an int8 GEMM (`at::cuda::blas::int8_gemm`):
/// `op(A)` is `m x k` (A stored `k x m` when transposed), `op(B)` `k x n`,
/// C `m x n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Int8Key {
    pub(super) trans_a: bool,
    pub(super) trans_b: bool,
    pub(super) m: u64,
    pub(super) n: u64,
    pub(super) k: u64,
    pub(super) lda: i64,
    pub(super) ldb: i64,
    pub(super) ldc: i64,
}

/// An int8 GEMM's descriptors as `int8_gemm` makes them: compute
/// `CUBLAS_COMPUTE_32I` with `CUDA_R_32I` scales, A and B `CUDA_R_8I`, C
/// `CUDA_R_32I`. No algorithm is planned: PyTorch passes none ("heuristics
/// don't seem to work for int8"); integer sums are exact, so the one
/// cuBLASLt picks does not change the result.
#[derive(Debug)]
pub(super) struct Int8Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    c: sys::cublasLtMatrixLayout_t,
}

impl Int8Plan {
    fn new(key: &Int8Key) -> Result<Int8Plan, CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        use sys::cudaDataType::{CUDA_R_32I, CUDA_R_8I};
        let mut parts = Parts::default();
        let desc = lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32I, CUDA_R_32I)
            .map_err(|e| lt_err("cublasLtMatmulDescCreate", e))?;
        parts.desc = Some(desc);
        let op = |t: bool| {
            if t {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSA, &op(key.trans_a))?;
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSB, &op(key.trans_b))?;
        let mut layout = |ty, rows: u64, cols: u64, ld: i64, t: bool| -> Result<_, CudaError> {
            let (r, c) = if t { (cols, rows) } else { (rows, cols) };
            let l = lt::create_matrix_layout(ty, r, c, ld).map_err(|e| lt_err("cublasLtMatrixLayoutCreate", e))?;
            parts.layouts.push(l);
            Ok(l)
        };
        let a = layout(CUDA_R_8I, key.m, key.k, key.lda, key.trans_a)?;
        let b = layout(CUDA_R_8I, key.k, key.n, key.ldb, key.trans_b)?;
        let c = layout(CUDA_R_32I, key.m, key.n, key.ldc, false)?;
        // The plan takes the descriptors.
        parts.desc = None;
        parts.layouts.clear();
        Ok(Int8Plan { desc, a, b, c })
    }
}

impl Drop for Int8Plan {
    fn drop(&mut self) {
        // SAFETY: the plan owns these descriptors (created once in `new`) and
        // destroys each once; no call using them is pending on the host side.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in [self.a, self.b, self.c] {
                let _ = lt::destroy_matrix_layout(l);
            }
        }
    }
}

/// The column-major problem of an fp8 GEMM (`at::cuda::blas::scaled_gemm`,
/// tensor-wise scales): types of A, B (fp8), C (unread; PyTorch's choice of
/// its type) and D (the result), transposes, sizes, leading dimensions and
/// the fast-accumulation switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Fp8Key {
    pub(super) a_type: sys::cudaDataType,
    pub(super) b_type: sys::cudaDataType,
    pub(super) c_type: sys::cudaDataType,
    pub(super) d_type: sys::cudaDataType,
    pub(super) trans_a: bool,
    pub(super) trans_b: bool,
    pub(super) m: u64,
    pub(super) n: u64,
    pub(super) k: u64,
    pub(super) lda: i64,
    pub(super) ldb: i64,
    pub(super) ldd: i64,
    pub(super) fast_accum: bool,
}

/// Device addresses of one fp8 GEMM.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fp8Pointers {
    pub(super) a: drv_sys::CUdeviceptr,
    pub(super) b: drv_sys::CUdeviceptr,
    pub(super) d: drv_sys::CUdeviceptr,
    /// One f32 each: A's and B's scales.
    pub(super) scale_a: drv_sys::CUdeviceptr,
    pub(super) scale_b: drv_sys::CUdeviceptr,
}

/// A planned fp8 GEMM: compute `CUBLAS_COMPUTE_32F`, f32 scales, the
/// A/B scale pointers, `CUBLASLT_MATMUL_DESC_FAST_ACCUM`, and the
/// heuristic's first algorithm within [`WORKSPACE_BYTES`], as `scaled_gemm`.
#[derive(Debug)]
pub(super) struct Fp8Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    c: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Fp8Plan {
    fn new(handle: sys::cublasLtHandle_t, key: &Fp8Key, ptrs: &Fp8Pointers) -> Result<Option<Fp8Plan>, CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let mut parts = Parts::default();
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(|e| lt_err("cublasLtMatmulDescCreate", e))?;
        parts.desc = Some(desc);
        let op = |t: bool| {
            if t {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSA, &op(key.trans_a))?;
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSB, &op(key.trans_b))?;
        let (scale_a, scale_b) = (ptrs.scale_a as *const c_void, ptrs.scale_b as *const c_void);
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a)?;
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b)?;
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_FAST_ACCUM, &i8::from(key.fast_accum))?;
        let mut layout = |ty, rows: u64, cols: u64, ld: i64, t: bool| -> Result<_, CudaError> {
            let (r, c) = if t { (cols, rows) } else { (rows, cols) };
            let l = lt::create_matrix_layout(ty, r, c, ld).map_err(|e| lt_err("cublasLtMatrixLayoutCreate", e))?;
            parts.layouts.push(l);
            Ok(l)
        };
        let a = layout(key.a_type, key.m, key.k, key.lda, key.trans_a)?;
        let b = layout(key.b_type, key.k, key.n, key.ldb, key.trans_b)?;
        let c = layout(key.c_type, key.m, key.n, key.ldd, false)?;
        let d = layout(key.d_type, key.m, key.n, key.ldd, false)?;
        let pref = lt::create_matmul_pref().map_err(|e| lt_err("cublasLtMatmulPreferenceCreate", e))?;
        parts.pref = Some(pref);
        PREF.set(
            pref,
            P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &(WORKSPACE_BYTES as u64),
        )?;
        let mut result = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::zeroed();
        let mut returned: std::ffi::c_int = 0;
        // SAFETY: every descriptor is live; `result` has room for the one
        // requested algorithm and `returned` receives the count.
        status("cublasLtMatmulAlgoGetHeuristic", unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, 1, result.as_mut_ptr(), &mut returned)
        })?;
        if returned == 0 {
            return Ok(None);
        }
        // SAFETY: zero-initialised plain data, filled by the heuristic (returned >= 1).
        let result = unsafe { result.assume_init() };
        status("cublasLtMatmulAlgoGetHeuristic", result.state)?;
        // The plan takes the descriptors; the preference is no longer needed.
        parts.desc = None;
        parts.layouts.clear();
        drop(parts);
        Ok(Some(Fp8Plan {
            desc,
            a,
            b,
            c,
            d,
            algo: result.algo,
        }))
    }
}

impl Drop for Fp8Plan {
    fn drop(&mut self) {
        // SAFETY: the plan owns these descriptors (created once in `new`) and
        // destroys each once; no call using them is pending on the host side.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in [self.a, self.b, self.c, self.d] {
                let _ = lt::destroy_matrix_layout(l);
            }
        }
    }
}
