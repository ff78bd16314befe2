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
    int8_plans: HashMap<LtShape, Rc<Int8Plan>>,
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
        if k.bias {
            let bias = ptrs.bias as *const c_void;
            // The descriptor is live (the plan owns it); the attribute is a
            // device pointer read from the host value during the call. Plans
            // are used by one thread (the backend is not `Send`), so setting
            // it here cannot race another call.
            DESC.set(
                plan.descriptors.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &bias,
            )?;
        }
        // A, B and C (= D) are device allocations the caller checked; the
        // workspace is the persistent one or the caller's (see `matmul_in`).
        self.launch(
            &plan.descriptors,
            Scales::of(&alpha, &beta),
            [ptrs.a, ptrs.b, ptrs.c],
            Some(&plan.algo),
            Some(workspace),
        )
    }
}

impl Lt {
    /// The int8 plan for `shape`, made on first use.
    pub(super) fn int8_plan(&mut self, shape: &LtShape) -> Result<Rc<Int8Plan>, CudaError> {
        if let Some(p) = self.int8_plans.get(shape) {
            return Ok(Rc::clone(p));
        }
        bind(&self.device)?;
        let plan = Rc::new(Int8Plan::new(shape)?);
        self.int8_plans.insert(*shape, Rc::clone(&plan));
        Ok(plan)
    }

    /// Queues `plan` on the device's stream: `C = A B` in int32, as
    /// `int8_gemm` calls `cublasLtMatmul`: int32 `alpha = 1`, `beta = 0`,
    /// no algorithm (cuBLASLt chooses) and no workspace.
    pub(super) fn int8_matmul(&self, plan: &Int8Plan, ptrs: &LtPointers) -> Result<(), CudaError> {
        if ptrs.bias != 0 {
            return Err(CudaError::Range("an int8 GEMM takes no bias".into()));
        }
        let (alpha, beta) = (1i32, 0i32);
        // A and B (int8) and C (= D, int32) are device allocations the
        // caller checked; alpha and beta are the CUDA_R_32I scale type's
        // i32; no algorithm lets cuBLASLt choose one and no workspace is
        // passed, as PyTorch passes.
        self.launch(&plan.0, Scales::of(&alpha, &beta), [ptrs.a, ptrs.b, ptrs.c], None, None)
    }
}

impl Lt {
    /// The fp8 plan for `key`, made on first use with the scale pointers of
    /// `ptrs` set, as PyTorch sets them before asking the heuristic;
    /// `Ok(None)` when the heuristic returns no algorithm (PyTorch's error).
    pub(super) fn fp8_plan(&mut self, key: &Fp8Key, ptrs: &LtPointers) -> Result<Option<Rc<Fp8Plan>>, CudaError> {
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
        ptrs: &LtPointers,
        workspace: Option<drv_sys::CUdeviceptr>,
    ) -> Result<(), CudaError> {
        set_scale_pointers(plan.descriptors.desc, ptrs)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        // A and B (fp8), the scales (one f32 each) and D (= C, unread with
        // beta 0) are device allocations the caller checked.
        self.launch(
            &plan.descriptors,
            Scales::of(&alpha, &beta),
            [ptrs.a, ptrs.b, ptrs.c],
            Some(&plan.algo),
            Some(workspace.unwrap_or(self.workspace)),
        )
    }

    /// Queues one `cublasLtMatmul` of `descriptors` on the device's stream:
    /// A and B at `[a, b, c]`'s first two addresses, C and D (in place) at
    /// the third; `algo` (None: cuBLASLt chooses) and `workspace` (None:
    /// none; else a live allocation of [`WORKSPACE_BYTES`]).
    fn launch(
        &self,
        descriptors: &Descriptors,
        scales: Scales<'_>,
        [a, b, c]: [drv_sys::CUdeviceptr; 3],
        algo: Option<&sys::cublasLtMatmulAlgo_t>,
        workspace: Option<drv_sys::CUdeviceptr>,
    ) -> Result<(), CudaError> {
        bind(&self.device)?;
        let stream = self.device.stream.cu_stream() as sys::cudaStream_t;
        let d = descriptors;
        let (workspace, bytes) = match workspace {
            Some(w) => (w as *mut c_void, WORKSPACE_BYTES),
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: the handle, descriptors and algorithm are live; A, B and
        // C (= D) are device allocations ordered on this stream whose
        // extents the caller checked against the layouts; alpha and beta
        // point at host values of the descriptor's scale type living until
        // the call returns; the workspace holds `bytes`, the size the
        // preference allowed (none for no workspace).
        unsafe {
            lt::matmul(
                self.handle,
                d.desc,
                scales.alpha,
                scales.beta,
                a as *const c_void,
                d.a,
                b as *const c_void,
                d.b,
                c as *const c_void,
                d.c,
                c as *mut c_void,
                d.d,
                algo.map_or(std::ptr::null(), |a| a as *const _),
                workspace,
                bytes,
                stream,
            )
        }
        .map_err(|e| lt_err("cublasLtMatmul", e))
    }
}

/// Host pointers to `alpha` and `beta`, values of a descriptor's scale type.
#[derive(Clone, Copy)]
struct Scales<'v> {
    alpha: *const c_void,
    beta: *const c_void,
    _values: std::marker::PhantomData<&'v ()>,
}

impl<'v> Scales<'v> {
    fn of<T>(alpha: &'v T, beta: &'v T) -> Scales<'v> {
        Scales {
            alpha: (alpha as *const T).cast(),
            beta: (beta as *const T).cast(),
            _values: std::marker::PhantomData,
        }
    }
}

/// Sets the A and B scale pointers of an fp8 matmul's live descriptor.
fn set_scale_pointers(desc: sys::cublasLtMatmulDesc_t, ptrs: &LtPointers) -> Result<(), CudaError> {
    use sys::cublasLtMatmulDescAttributes_t as D;
    // The descriptor is live (its plan owns it); the attributes are device
    // pointers read from the host values during the call. Plans are used by
    // one thread (the backend is not `Send`), so this cannot race.
    let (scale_a, scale_b) = (ptrs.scale_a as *const c_void, ptrs.scale_b as *const c_void);
    DESC.set(desc, D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a)?;
    DESC.set(desc, D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b)
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

/// The column-major problem of a matmul: `op(A)` is `m x k` (A stored
/// `k x m` when transposed), `op(B)` `k x n`, C (and D) `m x n`, with their
/// leading dimensions. An int8 GEMM's plan depends on nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct LtShape {
    pub(super) trans_a: bool,
    pub(super) trans_b: bool,
    pub(super) m: u64,
    pub(super) n: u64,
    pub(super) k: u64,
    pub(super) lda: i64,
    pub(super) ldb: i64,
    /// C's and D's.
    pub(super) ldc: i64,
}

/// Everything a plan depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct LtKey {
    /// Element type of A, B, C (`CUDA_R_32F`, `CUDA_R_16F`, `CUDA_R_16BF`).
    pub(super) dtype: sys::cudaDataType,
    pub(super) compute: sys::cublasComputeType_t,
    /// `CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK`, when set.
    pub(super) reduction_mask: Option<u32>,
    pub(super) shape: LtShape,
    pub(super) activation: Activation,
    /// A bias vector of `m` elements is added in the epilogue.
    pub(super) bias: bool,
    pub(super) align_a: u32,
    pub(super) align_b: u32,
    pub(super) align_c: u32,
    /// PyTorch passes the bias pointer's alignment as D's (256 without bias).
    pub(super) align_d: u32,
}

/// Device addresses of one Lt matmul (float, int8 or fp8).
#[derive(Clone, Copy, Debug)]
pub(super) struct LtPointers {
    pub(super) a: drv_sys::CUdeviceptr,
    pub(super) b: drv_sys::CUdeviceptr,
    /// C and D (the result, in place; an fp8 GEMM's D, C unread).
    pub(super) c: drv_sys::CUdeviceptr,
    /// The epilogue's bias vector; 0 without bias.
    pub(super) bias: drv_sys::CUdeviceptr,
    /// An fp8 GEMM's A and B scales (one f32 each); 0 for the others.
    pub(super) scale_a: drv_sys::CUdeviceptr,
    pub(super) scale_b: drv_sys::CUdeviceptr,
}

/// A planned matmul: descriptor, layouts and the heuristic's first algorithm.
#[derive(Debug)]
pub(super) struct LtPlan {
    pub(super) key: LtKey,
    descriptors: Descriptors,
    algo: sys::cublasLtMatmulAlgo_t,
}

/// The descriptors of one matmul: the matmul descriptor and the layouts of
/// A, B, C and D (D's is C's unless the types differ). Each is destroyed
/// once, when this is dropped, also when a plan fails half made.
#[derive(Debug)]
struct Descriptors {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    c: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
}

impl Descriptors {
    /// A matmul descriptor (`compute` type, `scale` scales, the shape's
    /// transposes) and the layouts as stored of A and B (`types[0]`,
    /// `types[1]`), C (`types[2]`) and D (`d_type`, or C's layout).
    fn new(
        compute: sys::cublasComputeType_t,
        scale: sys::cudaDataType,
        shape: &LtShape,
        types: [sys::cudaDataType; 3],
        d_type: Option<sys::cudaDataType>,
    ) -> Result<Descriptors, CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        let desc = lt::create_matmul_desc(compute, scale).map_err(|e| lt_err("cublasLtMatmulDescCreate", e))?;
        let null = std::ptr::null_mut();
        let mut made = Descriptors {
            desc,
            a: null,
            b: null,
            c: null,
            d: null,
        };
        let op = |t: bool| {
            if t {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSA, &op(shape.trans_a))?;
        DESC.set(desc, D::CUBLASLT_MATMUL_DESC_TRANSB, &op(shape.trans_b))?;
        // Layouts as stored: op(A) is m x k, so A is k x m when transposed.
        let layout = |ty, rows: u64, cols: u64, ld: i64, t: bool| {
            let (r, c) = if t { (cols, rows) } else { (rows, cols) };
            lt::create_matrix_layout(ty, r, c, ld).map_err(|e| lt_err("cublasLtMatrixLayoutCreate", e))
        };
        let s = shape;
        made.a = layout(types[0], s.m, s.k, s.lda, s.trans_a)?;
        made.b = layout(types[1], s.k, s.n, s.ldb, s.trans_b)?;
        made.c = layout(types[2], s.m, s.n, s.ldc, false)?;
        made.d = match d_type {
            Some(ty) => layout(ty, s.m, s.n, s.ldc, false)?,
            None => made.c,
        };
        Ok(made)
    }

    /// The heuristic's first algorithm for these descriptors within
    /// [`WORKSPACE_BYTES`], with the preferences `prefer` sets; `None` when
    /// it returns none.
    fn heuristic(
        &self,
        handle: sys::cublasLtHandle_t,
        prefer: impl FnOnce(sys::cublasLtMatmulPreference_t) -> Result<(), CudaError>,
    ) -> Result<Option<sys::cublasLtMatmulAlgo_t>, CudaError> {
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let pref = Preference(lt::create_matmul_pref().map_err(|e| lt_err("cublasLtMatmulPreferenceCreate", e))?);
        PREF.set(
            pref.0,
            P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            &(WORKSPACE_BYTES as u64),
        )?;
        prefer(pref.0)?;
        let mut result = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::zeroed();
        let mut returned: std::ffi::c_int = 0;
        let (desc, a, b, c, d) = (self.desc, self.a, self.b, self.c, self.d);
        // SAFETY: every descriptor is live; `result` has room for the one
        // requested algorithm and `returned` receives the count.
        status("cublasLtMatmulAlgoGetHeuristic", unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref.0, 1, result.as_mut_ptr(), &mut returned)
        })?;
        if returned == 0 {
            return Ok(None);
        }
        // SAFETY: zero-initialised plain data, filled by the heuristic (returned >= 1).
        let result = unsafe { result.assume_init() };
        status("cublasLtMatmulAlgoGetHeuristic", result.state)?;
        Ok(Some(result.algo))
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once and is owned only here
        // (null: not made; D's layout may be C's, destroyed with it), so
        // each is destroyed once; no call using them is pending on the host
        // side.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            let d = (self.d != self.c).then_some(self.d);
            for l in [Some(self.a), Some(self.b), Some(self.c), d].into_iter().flatten() {
                if !l.is_null() {
                    let _ = lt::destroy_matrix_layout(l);
                }
            }
        }
    }
}

/// A matmul preference, destroyed once when dropped.
struct Preference(sys::cublasLtMatmulPreference_t);

impl Drop for Preference {
    fn drop(&mut self) {
        // SAFETY: created once in `Descriptors::heuristic`, owned only here.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
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
        let types = [key.dtype; 3];
        let descriptors = Descriptors::new(key.compute, sys::cudaDataType::CUDA_R_32F, &key.shape, types, None)?;
        let epilogue = match (key.activation, key.bias) {
            (Activation::None, false) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            (Activation::None, true) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            (Activation::Relu, false) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU,
            (Activation::Relu, true) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            (Activation::Gelu, false) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU,
            (Activation::Gelu, true) => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
        };
        DESC.set(descriptors.desc, D::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
        let algo = descriptors.heuristic(handle, |pref| {
            if let Some(mask) = key.reduction_mask {
                PREF.set(pref, P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask)?;
            }
            PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a)?;
            PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b)?;
            PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c)?;
            PREF.set(pref, P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d)
        })?;
        Ok(algo.map(|algo| LtPlan {
            key: key.clone(),
            descriptors,
            algo,
        }))
    }
}

/// An int8 GEMM's descriptors as `int8_gemm` makes them: compute
/// `CUBLAS_COMPUTE_32I` with `CUDA_R_32I` scales, A and B `CUDA_R_8I`, C
/// `CUDA_R_32I`. No algorithm is planned: PyTorch passes none ("heuristics
/// don't seem to work for int8"); integer sums are exact, so the one
/// cuBLASLt picks does not change the result.
#[derive(Debug)]
pub(super) struct Int8Plan(Descriptors);

impl Int8Plan {
    fn new(shape: &LtShape) -> Result<Int8Plan, CudaError> {
        use sys::cudaDataType::{CUDA_R_32I, CUDA_R_8I};
        let compute = sys::cublasComputeType_t::CUBLAS_COMPUTE_32I;
        let types = [CUDA_R_8I, CUDA_R_8I, CUDA_R_32I];
        Ok(Int8Plan(Descriptors::new(compute, CUDA_R_32I, shape, types, None)?))
    }
}

/// The problem of an fp8 GEMM (`at::cuda::blas::scaled_gemm`, tensor-wise
/// scales): types of A, B (fp8), C (unread; PyTorch's choice of its type)
/// and D (the result), the shape (`ldc` is C's and D's) and the
/// fast-accumulation switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Fp8Key {
    pub(super) a_type: sys::cudaDataType,
    pub(super) b_type: sys::cudaDataType,
    pub(super) c_type: sys::cudaDataType,
    pub(super) d_type: sys::cudaDataType,
    pub(super) shape: LtShape,
    pub(super) fast_accum: bool,
}

/// A planned fp8 GEMM: compute `CUBLAS_COMPUTE_32F`, f32 scales, the
/// A/B scale pointers, `CUBLASLT_MATMUL_DESC_FAST_ACCUM`, and the
/// heuristic's first algorithm within [`WORKSPACE_BYTES`], as `scaled_gemm`.
#[derive(Debug)]
pub(super) struct Fp8Plan {
    descriptors: Descriptors,
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Fp8Plan {
    fn new(handle: sys::cublasLtHandle_t, key: &Fp8Key, ptrs: &LtPointers) -> Result<Option<Fp8Plan>, CudaError> {
        let compute = sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
        let types = [key.a_type, key.b_type, key.c_type];
        let descriptors = Descriptors::new(
            compute,
            sys::cudaDataType::CUDA_R_32F,
            &key.shape,
            types,
            Some(key.d_type),
        )?;
        set_scale_pointers(descriptors.desc, ptrs)?;
        let fast_accum = i8::from(key.fast_accum);
        DESC.set(
            descriptors.desc,
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
            &fast_accum,
        )?;
        let algo = descriptors.heuristic(handle, |_| Ok(()))?;
        Ok(algo.map(|algo| Fp8Plan { descriptors, algo }))
    }
}
