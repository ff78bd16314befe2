//! The CUDA backend: runs programs on an NVIDIA GPU through the driver API.
//!
//! * Memory: stream-ordered (`cuMemAllocAsync` / `cuMemFreeAsync`) on one
//!   stream that orders every operation of the backend; a tensor is a view
//!   (sizes, strides, storage offset) of a reference-counted allocation, freed
//!   when its last view goes.
//! * Triton kernels: each kernel's cubin (its path in the kernel metadata,
//!   looked up in [`CudaOptions::kernels`]) is loaded once per image and the
//!   function looked up once per kernel. A launch passes the runtime
//!   parameters ([`crate::ir::TritonMeta::runtime_params`]) marshalled by their
//!   signature types (pointers as device addresses including the view's
//!   offset; integer and floating scalars at their width), then the global and
//!   profile scratch pointers the kernel takes (null when it needs 0 bytes per
//!   CTA, else a stream-ordered allocation of `bytes * blocks`), with
//!   `32 * num_warps` threads per block and the kernel's dynamic shared memory
//!   (raising the function's limit above 48 KiB). Empty grids launch nothing,
//!   like Triton's launcher. Other kernel kinds are an error.
//! * Extern ops: `mm` and `bmm` run on cuBLAS (fp32, fp16, bf16 with fp32
//!   accumulation and no TF32, as PyTorch's default
//!   `torch.backends.cuda.matmul.allow_tf32 = False`) when the operands are
//!   row- or column-major; every other op, and matmuls cuBLAS cannot express,
//!   run on the [`HostBackend`]'s ops when [`CudaOptions::host_fallback`] is on (it is off by default)
//!   (arguments are copied to the host, results and modified arguments copied
//!   back), and are an error listing what is supported when it is off.

mod attention;
mod blaslt;
mod bytes;
pub mod capi;
mod conv;
mod dnn;
mod dnn_attention;
mod dnn_graph;
mod driver;
mod graph;
mod kernels;
mod libraries;
mod library;
mod matmul;
mod model;
mod prepared;
mod run;

pub use driver::{device_arch, CudaError};
pub use graph::{launch_floor, LaunchFloor};
pub use kernels::ExternOpLog;
pub use model::{DeviceInput, LoadReport, Model, ModelError, ModelOptions, Session};
pub use prepared::{Prepared, PreparedCache, Replay};

pub use run::{place_inputs, run_program, run_program_on, to_host};

use super::host::{op_key, HostBackend, HostOptions};
use super::tensor::{check_bounds, with_dtype, Accounted, MemCounter};
use super::{
    Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, Tensor, TensorSpec, Value,
};
use crate::ir::{ConstValue, DType, Device as IrDevice, KernelBackend, ScalarType, SigType, TritonMeta};
use bytes::{encode, host_from_bytes, host_storage_bytes};
use cudarc::driver::sys;
use driver::{Device, Module};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// Bytes of each of a backend's two pinned staging buffers.
const STAGING_BYTES: usize = 8 << 20;

/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// Options of the CUDA backend.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// The device ordinal.
    pub ordinal: usize,
    /// Where kernel images are found by their `cubin` path: a directory the
    /// paths are relative to (a bundle's directory), or images in memory (a
    /// package's entries; see [`crate::bundle::Bundle::kernel_images`]).
    pub kernels: crate::bundle::KernelImages,
    /// Run extern ops the GPU path does not implement (no row of
    /// [`crate::exec::device_ops::CUDA_OPS`], or operands the row refuses) on
    /// the host backend's ops, copying data through host memory, and count
    /// them in [`CudaOptions::extern_ops`]. Default `false`: such an op is an
    /// error naming it, so a run never leaves the device silently (the CLI's
    /// `--allow-host-fallback` turns this on).
    pub host_fallback: bool,
    /// Options of the host ops used by the fallback. The default follows
    /// ATen's CUDA kernels: `jagged_zero_fill` is on (rows longer than the
    /// padded width are written as 0 rather than raising, as on the CPU).
    pub host: HostOptions,
    /// Counts of the extern ops run on the device and through the host fallback.
    pub extern_ops: ExternOpLog,
    /// Load the cuBLAS library on a background thread while [`CudaBackend::new`]
    /// opens the device, so that the first matmul does not pay the library
    /// load after `cuInit` (default `false`; [`CudaOptions::preload_for`] sets
    /// it for programs with matmuls).
    pub preload_blas: bool,
    /// Compile the built-in kernels (NVRTC) on a background thread while
    /// [`CudaBackend::new`] creates the context (default `false`;
    /// [`CudaOptions::preload_for`] sets it for programs with other extern ops).
    pub preload_builtins: bool,
    /// Load cuDNN (and its sub-libraries) on a background thread while
    /// [`CudaBackend::new`] creates the context (default `false`;
    /// [`CudaOptions::preload_for`] sets it for programs with convolutions).
    pub preload_dnn: bool,
    /// The math modes the program was compiled under (PyTorch's defaults
    /// unless the bundle records others).
    pub math: MathModes,
    /// The CUDA generator state `aten.randint` (Inductor's seed buffer)
    /// starts from (a bundle's `cuda_rng`; default PyTorch's default seed at
    /// offset 0); each call advances it as PyTorch's generator advances
    /// (see [`crate::exec::random`]).
    pub cuda_rng: crate::exec::random::CudaRngState,
}

/// PyTorch's math-mode switches that change library numerics; each library
/// call follows them as PyTorch's own call does. Defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct MathModes {
    /// `torch.backends.cuda.matmul.allow_tf32` (default `false`): fp32 GEMMs may round inputs to TF32.
    pub matmul_allow_tf32: bool,
    /// `torch.backends.cudnn.allow_tf32` (default `true`): fp32 convolutions may use TF32.
    pub cudnn_allow_tf32: bool,
    /// `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction` (default `true`).
    pub fp16_reduced_precision_reduction: bool,
    /// `torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction` (default `true`).
    pub bf16_reduced_precision_reduction: bool,
}

impl Default for MathModes {
    fn default() -> Self {
        MathModes {
            matmul_allow_tf32: false,
            cudnn_allow_tf32: true,
            fp16_reduced_precision_reduction: true,
            bf16_reduced_precision_reduction: true,
        }
    }
}

impl CudaOptions {
    /// These options with the start-up work `program` needs started early,
    /// by what runs its extern ops ([`crate::exec::device_ops::CUDA_OPS`]):
    /// [`CudaOptions::preload_blas`] for cuBLAS / cuBLASLt ops,
    /// [`CudaOptions::preload_dnn`] for cuDNN ops and
    /// [`CudaOptions::preload_builtins`] for ops on the built-in kernels.
    pub fn preload_for(mut self, program: &crate::ir::Program) -> Self {
        let calls = std::iter::once(&program.main)
            .chain(program.subgraphs.values())
            .flat_map(|g| &g.lines)
            .filter_map(|line| match line {
                crate::ir::Line::ExternKernelAlloc(call) | crate::ir::Line::ExternKernelOut { call, .. } => Some(call),
                _ => None,
            });
        for call in calls {
            match crate::exec::device_ops::cuda_op(&call.op).map(|row| row.via) {
                Some("cuBLAS" | "cuBLASLt") => self.preload_blas = true,
                Some("cuDNN") => self.preload_dnn = true,
                // The attention kernels are their own module, compiled per head dim.
                Some(crate::exec::device_ops::OWN_ATTENTION) => {}
                Some(_) => self.preload_builtins = true,
                None => {}
            }
        }
        self
    }
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            ordinal: 0,
            kernels: crate::bundle::KernelImages::default(),
            host_fallback: false,
            host: HostOptions { jagged_zero_fill: true },
            extern_ops: ExternOpLog::default(),
            preload_blas: false,
            preload_builtins: false,
            preload_dnn: false,
            math: MathModes::default(),
            cuda_rng: crate::exec::random::CudaRngState::default(),
        }
    }
}

/// One device allocation; freed (stream-ordered) when dropped.
#[derive(Debug)]
struct Storage {
    /// Device address; 0 for an empty allocation.
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device: Arc<Device>,
    _accounted: Accounted,
    /// The caller's memory (a device tensor passed in): never freed here.
    borrowed: bool,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if self.ptr != 0 && !self.borrowed {
            self.device.defer(self.device.free(self.ptr));
        }
    }
}

/// A strided tensor in device memory. Clones share the allocation.
#[derive(Clone, Debug)]
pub struct CudaTensor {
    storage: Arc<Storage>,
    spec: TensorSpec,
}

impl CudaTensor {
    /// The layout.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// Elements the allocation holds.
    fn storage_numel(&self) -> usize {
        let elem = self.spec.dtype.size_bytes().max(1) as usize;
        self.storage.bytes / elem
    }

    /// Device address of element 0 of the view.
    fn data_ptr(&self) -> sys::CUdeviceptr {
        // Views are bounds-checked at creation, so the offset lies inside the
        // allocation and the sum cannot overflow.
        self.storage.ptr + self.spec.offset.max(0) as u64 * self.spec.dtype.size_bytes()
    }
}

#[derive(Clone)]
struct LoadedKernel {
    function: sys::CUfunction,
    _module: Arc<Module>,
}

/// Kernels one backend loaded, for other backends of the same device to use
/// without loading the images again (see [`CudaBackend::adopt_kernels`]).
#[derive(Clone, Default)]
pub(crate) struct SharedKernels {
    kernels: HashMap<String, LoadedKernel>,
}

// SAFETY: a CUfunction and its CUmodule are handles of the device's primary
// context, valid in every thread that binds it; they are not mutated after
// loading (launches and attribute reads are thread-safe driver calls), and
// the module is unloaded only when the last `Arc` goes.
unsafe impl Send for SharedKernels {}
// SAFETY: as for `Send`: shared references only read the handles.
unsafe impl Sync for SharedKernels {}

/// Runs programs on a CUDA GPU.
pub struct CudaBackend {
    device: Arc<Device>,
    options: CudaOptions,
    /// Loaded modules by `cubin` path.
    modules: HashMap<String, Arc<Module>>,
    kernels: HashMap<String, LoadedKernel>,
    blas: Option<driver::BlasHandle>,
    /// cuBLASLt: handle, persistent workspace and planned matmuls (first `addmm`-style call).
    lt: Option<blaslt::Lt>,
    host: HostBackend,
    memory: Arc<MemCounter>,
    builtins: kernels::Builtins,
    timings: LoadTimings,
    /// While the prepared path records a built-in op: its device operations.
    trace: Option<Vec<kernels::Traced>>,
    /// Fused attention plans by shape (dropped before the cuDNN handle).
    sdpa: dnn_attention::SdpaCache,
    /// The cuDNN handle, created at the first convolution or cuDNN attention.
    dnn: Option<dnn::DnnHandle>,
    /// Convolution plans (descriptors, chosen algorithm) by shape.
    conv: conv::ConvCache,
    /// The device copy of the CUDA generator state (see [`CudaBackend::set_cuda_rng`]).
    rng_state: Option<sys::CUdeviceptr>,
    /// Pinned buffers host-to-device copies of inputs and weights go through
    /// (made at the first such copy).
    staging: Option<driver::Staging>,
}

/// Where a backend's one-time start-up work went (wall time): opening the
/// device, loading kernel images, compiling the built-in kernels, creating
/// the cuBLAS handle. Each happens at first use, so a program that launches
/// no built-in kernel pays no NVRTC compilation and one with no matmul
/// creates no cuBLAS handle.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadTimings {
    /// `cuInit`, the primary context and the stream ([`CudaBackend::new`]).
    pub device_open: std::time::Duration,
    /// Reading cubin files and `cuModuleLoadData` (and function look-ups).
    pub module_load: std::time::Duration,
    /// Kernel image files loaded.
    pub modules: usize,
    /// NVRTC compilation and loading of the built-in kernels (0 when none ran).
    pub builtin_load: std::time::Duration,
    /// The first cuBLAS call: handle creation (library load) and its first GEMM (0 when none ran).
    pub blas_first_call: std::time::Duration,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("options", &self.options)
            .field("modules", &self.modules.keys().collect::<Vec<_>>())
            .field("kernels", &self.kernels.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        libraries::join_background();
        // Modules are unloaded after this; no launch may still be running.
        let _ = self.device.synchronize();
        if let Some(ptr) = self.rng_state.take() {
            let _ = self.device.free(ptr);
        }
    }
}

/// A generator state as the device copy holds it (little-endian seed, offset).
fn rng_bytes(state: crate::exec::random::CudaRngState) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&state.seed.to_le_bytes());
    b[8..].copy_from_slice(&state.offset.to_le_bytes());
    b
}

impl CudaBackend {
    /// Opens the device and creates the backend's stream.
    pub fn new(options: CudaOptions) -> Result<Self, CudaError> {
        let opened = std::time::Instant::now();
        // Background work starts after cuInit, during context creation:
        // loading cuBLAS while cuInit runs slowed cuInit down by about as much
        // as it saved (both load shared objects). An error here is
        // `Device::open`'s to report.
        if (options.preload_blas || options.preload_builtins || options.preload_dnn) && driver::keep_loaded("cuda") {
            let _ = cudarc::driver::result::init();
        }
        if options.preload_blas {
            // Detached: `keep_loaded` is idempotent and serialised, so the
            // first matmul waits for this load if it is still running.
            libraries::spawn_background(|| {
                driver::keep_loaded("cublas");
                driver::keep_loaded("cublasLt");
            });
        }
        if options.preload_dnn {
            libraries::spawn_background(|| {
                libraries::keep_loaded("cudnn");
            });
        }
        if options.preload_builtins {
            kernels::precompile_in_background(options.ordinal);
        }
        let device = Device::open(options.ordinal)?;
        let timings = LoadTimings {
            device_open: opened.elapsed(),
            ..LoadTimings::default()
        };
        // The host backend holds the generator state: the device's randint and
        // the host fallback's draw from (and advance) the same one.
        let host = HostBackend::new(options.host);
        host.set_cuda_rng(options.cuda_rng);
        Ok(CudaBackend {
            device,
            host,
            options,
            modules: HashMap::new(),
            kernels: HashMap::new(),
            blas: None,
            lt: None,
            memory: Arc::default(),
            builtins: kernels::Builtins::default(),
            timings,
            trace: None,
            sdpa: dnn_attention::SdpaCache::default(),
            dnn: None,
            conv: conv::ConvCache::default(),
            rng_state: None,
            staging: None,
        })
    }

    /// Loads the image of every Triton kernel `program` defines that has a
    /// cubin, so that no run loads one later; returns how many are loaded.
    /// Each image is checked before it loads: present, a cubin or PTX, and
    /// for this GPU's architecture; an error names the kernel, the image
    /// and both architectures, before anything launched.
    pub fn preload_kernels(&mut self, program: &crate::ir::Program) -> Result<usize, ExecError> {
        for (name, def) in &program.kernels {
            if let crate::ir::KernelBackend::Triton(meta) = &def.backend {
                if meta.cubin.is_some() {
                    self.function(name.as_str(), meta)?;
                }
            }
        }
        Ok(self.kernels.len())
    }

    /// The kernels this backend has loaded, for [`CudaBackend::adopt_kernels`].
    pub(crate) fn shared_kernels(&self) -> SharedKernels {
        SharedKernels {
            kernels: self.kernels.clone(),
        }
    }

    /// Uses kernels another backend of the same device loaded (its primary
    /// context is this backend's) instead of loading their images again.
    pub(crate) fn adopt_kernels(&mut self, shared: &SharedKernels) {
        for (name, k) in &shared.kernels {
            self.kernels.entry(name.clone()).or_insert_with(|| k.clone());
        }
    }

    /// Makes the backend's context current on the calling thread (a
    /// backend moved to another thread binds before its first call there).
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.device.bind()
    }

    /// Orders the backend's stream after the work queued so far on the
    /// caller's `stream` (a `CUstream` of this device's context; 0: the
    /// legacy default stream).
    pub(crate) fn wait_for_stream(&self, stream: u64) -> Result<(), CudaError> {
        self.device
            .order_streams(self.device.cu_stream(), stream as sys::CUstream)
    }

    /// Orders the caller's `stream` after the work queued so far on the backend's.
    pub(crate) fn signal_stream(&self, stream: u64) -> Result<(), CudaError> {
        self.device
            .order_streams(stream as sys::CUstream, self.device.cu_stream())
    }

    /// The device's compute capability (major, minor).
    pub fn compute_capability(&self) -> Result<(i32, i32), CudaError> {
        let major = self
            .device
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = self
            .device
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok((major, minor))
    }

    /// The device ordinal this backend runs on.
    pub fn ordinal(&self) -> usize {
        self.options.ordinal
    }

    /// The device's name as the driver reports it (`NVIDIA H200`).
    pub fn device_name(&self) -> Result<String, CudaError> {
        self.device.name()
    }

    /// A tensor over the caller's device memory at `ptr` (`bytes` long,
    /// laid out as `spec`), used in place and never freed by the backend.
    ///
    /// # Safety
    /// `ptr` must be a device allocation of this device's context holding at
    /// least `bytes` bytes, alive and not written by others while the
    /// backend uses the tensor.
    pub(crate) unsafe fn borrow_device(
        &self,
        ptr: sys::CUdeviceptr,
        bytes: usize,
        spec: TensorSpec,
    ) -> Result<CudaTensor, ExecError> {
        let elem = spec.dtype.size_bytes().max(1) as usize;
        check_bounds(&spec, bytes / elem)?;
        Ok(CudaTensor {
            storage: Arc::new(Storage {
                ptr,
                bytes,
                device: Arc::clone(&self.device),
                _accounted: Accounted {
                    bytes: 0,
                    counter: None,
                },
                borrowed: true,
            }),
            spec,
        })
    }

    /// Where this backend's start-up work went so far (see [`LoadTimings`]).
    pub fn load_timings(&self) -> LoadTimings {
        LoadTimings {
            builtin_load: self.builtins.load_time,
            ..self.timings
        }
    }

    /// Writes the host tensor `src` into the device tensor `dst` in place
    /// (same dtype and sizes; `dst` contiguous), so that recordings holding
    /// `dst` ([`Prepared`]) see the new values on their next replay.
    pub fn overwrite(&mut self, dst: &CudaTensor, src: &Tensor) -> Result<(), ExecError> {
        if dst.spec.dtype != src.dtype() || dst.spec.size != src.spec().size {
            return Err(ExecError::Input(format!(
                "overwrite: a {}{:?} tensor into a {}{:?} one",
                src.dtype(),
                src.spec().size,
                dst.spec.dtype,
                dst.spec.size
            )));
        }
        if src.spec().stride == dst.spec.stride && src.spec().offset == dst.spec.offset && !src.dtype().is_complex() {
            // The same layout: the host storage's bytes are the device storage's.
            let copied = src.with_storage_bytes(|bytes| {
                if bytes.len() <= dst.storage.bytes {
                    self.upload_raw(&[(dst, bytes)]).map(Some)
                } else {
                    Ok(None)
                }
            })?;
            if let Some(r) = copied {
                if r?.is_some() {
                    return Ok(());
                }
            }
        }
        let dense = super::contiguous_strides(&dst.spec.size);
        if dst
            .spec
            .size
            .iter()
            .zip(dst.spec.stride.iter().zip(&dense))
            .any(|(s, (a, b))| *s > 1 && a != b)
        {
            // Lay the values out as the device tensor's storage holds them.
            let laid_out = Tensor::zeros_like_spec(&dst.spec)?;
            laid_out.copy_from(src)?;
            let offsets = laid_out.element_offsets()?;
            let numel = crate::exec::tensor::storage_elements(&dst.spec)?;
            let bytes = with_dtype!(
                src.dtype(),
                T => {
                    let mut storage = vec![<T as super::Element>::from_i64(0); numel];
                    for (o, v) in offsets.into_iter().zip(src.to_vec::<T>()?) {
                        if let Some(slot) = storage.get_mut(o) {
                            *slot = v;
                        }
                    }
                    encode::<T>(&storage)
                },
                return Err(ExecError::Unsupported(format!("overwrite: dtype {}", src.dtype())))
            );
            self.device.upload(dst.storage.ptr, &bytes)?;
            return Ok(());
        }
        let bytes = with_dtype!(
            src.dtype(),
            T => encode::<T>(&src.to_vec::<T>()?),
            return Err(ExecError::Unsupported(format!("overwrite: dtype {}", src.dtype())))
        );
        self.device.upload(dst.data_ptr(), &bytes)?;
        Ok(())
    }

    /// Copies host bytes to the start of each device tensor's storage (at
    /// most its size) through the backend's pinned staging buffers, and
    /// waits for the copies.
    pub(crate) fn upload_raw(&mut self, copies: &[(&CudaTensor, &[u8])]) -> Result<(), ExecError> {
        for (t, bytes) in copies {
            if bytes.len() > t.storage.bytes {
                return Err(ExecError::Input(format!(
                    "{} bytes into a device storage of {} bytes",
                    bytes.len(),
                    t.storage.bytes
                )));
            }
        }
        let list: Vec<(sys::CUdeviceptr, &[u8])> = copies.iter().map(|(t, b)| (t.storage.ptr, *b)).collect();
        if list.iter().all(|(_, b)| b.is_empty()) {
            return Ok(());
        }
        if self.staging.is_none() {
            self.staging = Some(driver::Staging::new(&self.device, STAGING_BYTES)?);
        }
        let staging = self
            .staging
            .as_mut()
            .ok_or_else(|| ExecError::op("cuda", "no staging buffers"))?;
        self.device.upload_staged(staging, &list)?;
        Ok(())
    }

    /// Sets the CUDA generator state `aten.randint` draws from next (see
    /// [`crate::exec::random`]). The state lives in device memory once a
    /// draw has run: each draw's kernel reads it and a second kernel
    /// advances it, so replays of a prepared recording (direct or through
    /// a CUDA graph) draw new numbers each call, as PyTorch's generator does.
    pub fn set_cuda_rng(&mut self, state: crate::exec::random::CudaRngState) -> Result<(), ExecError> {
        self.host.set_cuda_rng(state);
        if let Some(ptr) = self.rng_state {
            self.device.upload(ptr, &rng_bytes(state))?;
        }
        Ok(())
    }

    /// The generator state now (advanced by every draw, replays included).
    pub fn cuda_rng(&self) -> Result<crate::exec::random::CudaRngState, ExecError> {
        let Some(ptr) = self.rng_state else {
            return Ok(self.host.cuda_rng());
        };
        let mut bytes = [0u8; 16];
        self.device.download(&mut bytes, ptr)?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
            u64::from_le_bytes(w)
        };
        Ok(crate::exec::random::CudaRngState {
            seed: word(0),
            offset: word(1),
        })
    }

    /// The device copy of the generator state (`{seed, offset}`, two u64),
    /// made at the first draw from the host's.
    fn rng_state_ptr(&mut self) -> Result<sys::CUdeviceptr, ExecError> {
        if let Some(ptr) = self.rng_state {
            return Ok(ptr);
        }
        let ptr = self.device.alloc(16)?;
        self.rng_state = Some(ptr);
        self.device.upload(ptr, &rng_bytes(self.host.cuda_rng()))?;
        Ok(ptr)
    }

    /// Waits for all queued work and reports any error it raised.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.device.synchronize()
    }

    /// The extern ops this backend runs: on the GPU, then through the host fallback when it is on.
    pub fn supported_ops(&self) -> Vec<String> {
        let device = crate::exec::device_ops::CUDA_OPS;
        let mut ops: Vec<String> = device.iter().map(|row| row.op.to_string()).collect();
        if self.options.host_fallback {
            ops.extend(
                self.host
                    .op_names()
                    .into_iter()
                    .filter(|o| !device.iter().any(|row| row.op == o.as_str()))
                    .map(|o| format!("{o} (host)")),
            );
        }
        ops
    }

    /// Runs `call` on the device: the GEMM family on cuBLAS / cuBLASLt,
    /// convolution on cuDNN, attention and the other ops on built-in
    /// kernels; `Ok(None)` when none of them takes these operands.
    fn run_on_device(&mut self, call: &ExternCall<'_, CudaTensor>) -> Result<Option<Value<CudaTensor>>, ExecError> {
        if let Some(v) = matmul::call(self, call)? {
            return Ok(Some(v));
        }
        if let Some(v) = conv::call(self, call)? {
            return Ok(Some(v));
        }
        if let Some(v) = attention::call(self, call)? {
            return Ok(Some(v));
        }
        kernels::run(self, call)
    }

    fn device_of(&self) -> IrDevice {
        IrDevice::cuda(u32::try_from(self.options.ordinal).unwrap_or(u32::MAX))
    }

    fn alloc_storage(&mut self, bytes: usize) -> Result<Arc<Storage>, ExecError> {
        let ptr = if bytes == 0 { 0 } else { self.device.alloc(bytes)? };
        self.memory.add(bytes as u64);
        let storage = Arc::new(Storage {
            ptr,
            bytes,
            device: Arc::clone(&self.device),
            _accounted: Accounted {
                bytes: bytes as u64,
                counter: Some(Arc::clone(&self.memory)),
            },
            borrowed: false,
        });
        if let Some(trace) = self.trace.as_mut() {
            trace.push(kernels::Traced::Alloc(Arc::clone(&storage)));
        }
        Ok(storage)
    }

    /// Reads `bytes` (at most 8) bytes of device memory at `ptr`, after the
    /// work queued before it; traced for the prepared path.
    fn read_device(&mut self, ptr: sys::CUdeviceptr, bytes: usize) -> Result<[u8; 8], ExecError> {
        let mut value = [0u8; 8];
        let n = bytes.min(value.len());
        self.device.download(&mut value[..n], ptr)?;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(kernels::Traced::Read { ptr, bytes: n, value });
        }
        Ok(value)
    }

    /// Zeroes `bytes` bytes of device memory at `ptr` (queued on the stream);
    /// traced for the prepared path.
    fn zero(&mut self, ptr: sys::CUdeviceptr, bytes: usize) -> Result<(), ExecError> {
        self.device.zero(ptr, bytes)?;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(kernels::Traced::Zero { ptr, bytes });
        }
        Ok(())
    }

    fn storage_bytes(spec: &TensorSpec) -> Result<usize, ExecError> {
        if spec.size.len() != spec.stride.len() {
            return Err(ExecError::Input(format!(
                "{} sizes but {} strides",
                spec.size.len(),
                spec.stride.len()
            )));
        }
        spec.storage_numel()
            .and_then(|n| u64::try_from(n).ok())
            .and_then(|n| n.checked_mul(spec.dtype.size_bytes()))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| {
                ExecError::Input(format!(
                    "invalid layout: sizes {:?}, strides {:?}",
                    spec.size, spec.stride
                ))
            })
    }

    fn function(&mut self, name: &str, meta: &TritonMeta) -> Result<sys::CUfunction, ExecError> {
        if let Some(k) = self.kernels.get(name) {
            return Ok(k.function);
        }
        let cubin = meta.cubin.as_ref().ok_or_else(|| {
            ExecError::Unsupported(format!(
                "kernel `{name}` has no compiled cubin; the cuda backend does not compile Triton source"
            ))
        })?;
        let loading = std::time::Instant::now();
        let module = match self.modules.get(cubin) {
            Some(m) => Arc::clone(m),
            None => {
                let (image, arch) = self
                    .options
                    .kernels
                    .kernel_image(name, cubin)
                    .map_err(|e| ExecError::Input(e.to_string()))?;
                let (major, minor) = self.compute_capability()?;
                let device_sm = u32::try_from(major * 10 + minor).unwrap_or(0);
                let device = self
                    .device_name()
                    .unwrap_or_else(|_| format!("cuda:{}", self.ordinal()));
                arch.check_runs_on(device_sm, &device).map_err(|e| {
                    ExecError::Input(format!(
                        "kernel `{name}`: {} is {e}",
                        self.options.kernels.describe(cubin)
                    ))
                })?;
                let m = Arc::new(
                    self.device
                        .load_module(&image)
                        .map_err(|e| ExecError::op(name, e.to_string()))?,
                );
                self.modules.insert(cubin.clone(), Arc::clone(&m));
                self.timings.modules += 1;
                m
            }
        };
        let symbol = meta.mangled_name.as_deref().unwrap_or(name);
        let function = module
            .function(symbol)
            .map_err(|e| ExecError::op(name, e.to_string()))?;
        let threads_limit = driver::max_threads_per_block(function).map_err(|e| ExecError::op(name, e.to_string()))?;
        if u64::from(meta.num_warps) * 32 > u64::try_from(threads_limit).unwrap_or(0) {
            return Err(ExecError::op(
                name,
                format!(
                    "launches {} threads a block (num_warps {}); the kernel allows at most {threads_limit}",
                    u64::from(meta.num_warps) * 32,
                    meta.num_warps
                ),
            ));
        }
        if meta.shared_mem > DEFAULT_SHARED_LIMIT {
            let optin = self
                .device
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                .map_err(|e| ExecError::op(name, e.to_string()))?;
            if i64::from(meta.shared_mem) > i64::from(optin) {
                return Err(ExecError::op(
                    name,
                    format!(
                        "needs {} bytes of shared memory; the device allows {optin} per block",
                        meta.shared_mem
                    ),
                ));
            }
            driver::set_max_dynamic_shared(function, meta.shared_mem)
                .map_err(|e| ExecError::op(name, e.to_string()))?;
        }
        self.kernels.insert(
            name.to_string(),
            LoadedKernel {
                function,
                _module: module,
            },
        );
        self.timings.module_load += loading.elapsed();
        Ok(function)
    }

    /// One kernel argument as the bytes of a u64 slot (little-endian, so the
    /// driver reads the parameter's width from the start of the slot).
    fn marshal(
        &mut self,
        kernel: &str,
        param: &str,
        ty: &SigType,
        value: &Value<CudaTensor>,
    ) -> Result<u64, ExecError> {
        let err = |msg: String| ExecError::op(kernel, format!("parameter `{param}` ({ty}): {msg}"));
        match ty {
            SigType::Pointer(dtype) => match value {
                Value::Tensor(t) => {
                    if t.spec.dtype.size_bytes() != dtype.size_bytes() {
                        return Err(err(format!("given a {} tensor", t.spec.dtype)));
                    }
                    Ok(t.data_ptr())
                }
                Value::None => Ok(0),
                other => Err(err(format!("given a {}", other.kind()))),
            },
            SigType::Scalar(s) => {
                let scalar = match value {
                    Value::Int(v) => ScalarValue::Int(*v),
                    Value::Bool(b) => ScalarValue::Bool(*b),
                    Value::Float(f) => ScalarValue::Float(*f),
                    Value::Tensor(t) => self.read_scalar(
                        t,
                        &ScalarRequest {
                            symbol: None,
                            decl: None,
                            multiplier: 1,
                        },
                    )?,
                    other => return Err(err(format!("given a {}", other.kind()))),
                };
                encode_scalar(*s, scalar).map_err(err)
            }
            SigType::Constexpr | SigType::Other(_) => Err(err("cannot be passed at launch".into())),
        }
    }

    fn launch_triton(&mut self, launch: &KernelLaunch<'_, CudaTensor>, meta: &TritonMeta) -> Result<(), ExecError> {
        let name = launch.kernel.name.as_str();
        let grid = launch
            .grid
            .ok_or_else(|| ExecError::op(name, "a Triton launch without a grid"))?;
        for (param, c) in &meta.constants {
            if let (ConstValue::Int(baked), Some(Value::Int(passed))) = (c, launch.kwargs.get(param.as_str())) {
                if baked != passed {
                    return Err(ExecError::op(
                        name,
                        format!("`{param}` = {passed}, but the kernel was compiled for {baked}"),
                    ));
                }
            }
        }
        let dim = |g: i64, axis: &str| {
            u32::try_from(g).map_err(|_| ExecError::op(name, format!("grid {axis} = {g} is outside 0..=2^32-1")))
        };
        let grid = (dim(grid[0], "x")?, dim(grid[1], "y")?, dim(grid[2], "z")?);
        let threads = meta
            .num_warps
            .checked_mul(32)
            .ok_or_else(|| ExecError::op(name, format!("num_warps {} is too large", meta.num_warps)))?;
        let function = self.function(name, meta)?;
        let mut slots: Vec<u64> = Vec::new();
        for (param, ty) in meta.runtime_params() {
            let value = launch
                .kwargs
                .get(param)
                .ok_or_else(|| ExecError::op(name, format!("no value for parameter `{param}`")))?;
            slots.push(self.marshal(name, param, ty, value)?);
        }
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let blocks = u64::from(grid.0) * u64::from(grid.1) * u64::from(grid.2);
        // Scratch buffers live until the launch is queued; their frees are
        // ordered after it on the same stream.
        let mut scratch = Vec::new();
        for per_cta in [meta.global_scratch, meta.profile_scratch].into_iter().flatten() {
            if per_cta == 0 {
                slots.push(0);
                continue;
            }
            let bytes = per_cta
                .checked_mul(blocks)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| ExecError::op(name, "scratch size overflows"))?;
            let s = self.alloc_storage(bytes)?;
            slots.push(s.ptr);
            scratch.push(s);
        }
        let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast::<c_void>()).collect();
        self.device
            .launch(function, grid, (threads, 1, 1), meta.shared_mem, &mut params)
            .map_err(|e| ExecError::op(name, e.to_string()))?;
        drop(scratch);
        Ok(())
    }

    /// Runs an extern op on the host: tensors go to host memory (one host
    /// copy per device allocation, so aliasing views stay aliased), the op
    /// runs, allocations it modified are copied back, and results come back
    /// as new device tensors (in-place ops return their first argument).
    fn host_fallback(&mut self, call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
        self.options.extern_ops.record_host(call.op);
        if let Some(trace) = self.trace.as_mut() {
            trace.push(kernels::Traced::Host(call.op.to_string()));
        }
        let mut staged: Vec<Staged> = Vec::new();
        let args = call
            .args
            .iter()
            .map(|v| self.stage_to_host(v, &mut staged))
            .collect::<Result<Vec<_>, _>>()?;
        let kwargs = call
            .kwargs
            .iter()
            .map(|(k, v)| Ok((k.to_string(), self.stage_to_host(v, &mut staged)?)))
            .collect::<Result<IndexMap<_, _>, ExecError>>()?;
        let result = self.host.call_extern(ExternCall {
            op: call.op,
            args: (&args).into(),
            kwargs: (&kwargs).into(),
            expected: call.expected,
        })?;
        for s in &staged {
            let now = host_storage_bytes(&s.host)?;
            if now != s.original {
                self.device.upload(s.storage.ptr, &now)?;
            }
        }
        if op_key(call.op).ends_with('_') {
            if let (Value::Tensor(_), Some(Value::Tensor(first))) = (&result, call.args.first()) {
                return Ok(Value::Tensor(first.clone()));
            }
        }
        self.copy_value_in(&result)
    }

    fn stage_to_host(&mut self, v: &Value<CudaTensor>, staged: &mut Vec<Staged>) -> Result<Value<Tensor>, ExecError> {
        Ok(match v {
            Value::Tensor(t) => {
                let i = match staged.iter().position(|s| Arc::ptr_eq(&s.storage, &t.storage)) {
                    Some(i) => i,
                    None => {
                        let mut bytes = vec![0u8; t.storage.bytes];
                        self.device.download(&mut bytes, t.storage.ptr)?;
                        let n = i64::try_from(t.storage_numel())
                            .map_err(|_| ExecError::Input("storage too large".into()))?;
                        let host = host_from_bytes(t.spec.dtype, &bytes, n)?;
                        staged.push(Staged {
                            storage: Arc::clone(&t.storage),
                            host,
                            original: bytes,
                        });
                        staged.len() - 1
                    }
                };
                Value::Tensor(staged[i].host.view(&t.spec.size, &t.spec.stride, t.spec.offset)?)
            }
            Value::Int(i) => Value::Int(*i),
            Value::Float(f) => Value::Float(*f),
            Value::Bool(b) => Value::Bool(*b),
            Value::None => Value::None,
            Value::Str(s) => Value::Str(s.clone()),
            Value::DType(d) => Value::DType(*d),
            Value::Device(d) => Value::Device(*d),
            Value::List(items) => Value::List(
                items
                    .iter()
                    .map(|i| self.stage_to_host(i, staged))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Dict(items) => Value::Dict(
                items
                    .iter()
                    .map(|(k, i)| Ok((k.clone(), self.stage_to_host(i, staged)?)))
                    .collect::<Result<indexmap::IndexMap<_, _>, ExecError>>()?
                    .into(),
            ),
            Value::Opaque => Value::Opaque,
        })
    }

    fn copy_value_in(&mut self, v: &Value<Tensor>) -> Result<Value<CudaTensor>, ExecError> {
        Ok(match v {
            Value::Tensor(t) => Value::Tensor(self.copy_in(t)?),
            Value::Int(i) => Value::Int(*i),
            Value::Float(f) => Value::Float(*f),
            Value::Bool(b) => Value::Bool(*b),
            Value::None => Value::None,
            Value::Str(s) => Value::Str(s.clone()),
            Value::DType(d) => Value::DType(*d),
            Value::Device(d) => Value::Device(*d),
            Value::List(items) => Value::List(items.iter().map(|i| self.copy_value_in(i)).collect::<Result<_, _>>()?),
            Value::Dict(items) => Value::Dict(
                items
                    .iter()
                    .map(|(k, i)| Ok((k.clone(), self.copy_value_in(i)?)))
                    .collect::<Result<indexmap::IndexMap<_, _>, ExecError>>()?
                    .into(),
            ),
            Value::Opaque => Value::Opaque,
        })
    }
}

/// A device allocation copied to the host for a fallback op.
struct Staged {
    storage: Arc<Storage>,
    /// The whole allocation as a 1-D host tensor.
    host: Tensor,
    original: Vec<u8>,
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn allocate(&mut self, spec: &TensorSpec) -> Result<CudaTensor, ExecError> {
        let bytes = Self::storage_bytes(spec)?;
        let storage = self.alloc_storage(bytes)?;
        let mut spec = spec.clone();
        spec.device = self.device_of();
        Ok(CudaTensor { storage, spec })
    }

    fn spec<'a>(&'a self, tensor: &'a CudaTensor) -> &'a TensorSpec {
        &tensor.spec
    }

    fn view(&mut self, base: &CudaTensor, size: &[i64], stride: &[i64], offset: i64) -> Result<CudaTensor, ExecError> {
        let spec = TensorSpec {
            size: size.to_vec(),
            stride: stride.to_vec(),
            offset,
            ..base.spec.clone()
        };
        check_bounds(&spec, base.storage_numel())?;
        Ok(CudaTensor {
            storage: Arc::clone(&base.storage),
            spec,
        })
    }

    fn launch(&mut self, launch: KernelLaunch<'_, CudaTensor>) -> Result<(), ExecError> {
        match &launch.kernel.backend {
            KernelBackend::Triton(meta) => self.launch_triton(&launch, meta),
            other => Err(ExecError::Unsupported(format!(
                "kernel `{}` is a {} kernel; the cuda backend launches Triton kernels only",
                launch.kernel.name,
                other.keyword()
            ))),
        }
    }

    fn call_extern(&mut self, call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
        let on_device = crate::exec::device_ops::cuda_op(call.op).is_some();
        if on_device {
            if let Some(v) = self.run_on_device(&call)? {
                self.options.extern_ops.record_device(call.op);
                return Ok(v);
            }
        }
        let key = op_key(call.op);
        let on_host = self.host.op_names().contains(&key) || self.host.op_names().iter().any(|o| o == call.op);
        if self.options.host_fallback && on_host {
            return self.host_fallback(call);
        }
        if on_device {
            return Err(ExecError::op(
                call.op,
                format!(
                    "the cuda backend cannot run these operands on the device ({}){}",
                    describe_operands(&call),
                    if on_host {
                        "; --allow-host-fallback runs it on the host"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Err(ExecError::UnknownOp {
            backend: "cuda",
            op: call.op.to_string(),
            supported: self.supported_ops(),
        })
    }

    fn read_scalar(&mut self, tensor: &CudaTensor, _request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        let numel = tensor.spec.numel();
        if numel != 1 {
            return Err(ExecError::Type(format!("item() of a tensor with {numel} elements")));
        }
        let elem = tensor.spec.dtype.size_bytes() as usize;
        let mut bytes = vec![0u8; elem];
        self.device.download(&mut bytes, tensor.data_ptr())?;
        let t = host_from_bytes(tensor.spec.dtype, &bytes, 1)?;
        Ok(match tensor.spec.dtype {
            DType::Bool => ScalarValue::Bool(t.to_i64_vec()?.first().is_some_and(|v| *v != 0)),
            d if d.is_floating() => ScalarValue::Float(t.to_f64_vec()?.first().copied().unwrap_or(f64::NAN)),
            _ => ScalarValue::Int(t.to_i64_vec()?.first().copied().unwrap_or_default()),
        })
    }

    fn copy_in(&mut self, tensor: &Tensor) -> Result<CudaTensor, ExecError> {
        if tensor.dtype().is_complex() {
            // Its parts, then the complex view of the same device storage.
            let real = self.copy_in(&tensor.view_as_real()?)?;
            let spec = real.spec.as_complex()?;
            check_bounds(&spec, real.storage.bytes / spec.dtype.size_bytes().max(1) as usize)?;
            return Ok(CudaTensor {
                storage: real.storage,
                spec,
            });
        }
        let spec = TensorSpec {
            device: self.device_of(),
            ..tensor.spec().clone()
        };
        let numel = crate::exec::tensor::storage_elements(&spec)?;
        let bytes = with_dtype!(
            spec.dtype,
            T => {
                let mut storage = vec![<T as super::Element>::from_i64(0); numel];
                for (o, v) in tensor.element_offsets()?.into_iter().zip(tensor.to_vec::<T>()?) {
                    if let Some(slot) = storage.get_mut(o) {
                        *slot = v;
                    }
                }
                encode::<T>(&storage)
            },
            return Err(ExecError::Unsupported(format!("copying {} tensors to the device", spec.dtype)))
        );
        let out = self.allocate(&spec)?;
        self.device.upload(out.storage.ptr, &bytes)?;
        Ok(out)
    }

    fn copy_out(&mut self, tensor: &CudaTensor) -> Result<Tensor, ExecError> {
        let need = Self::storage_bytes(&tensor.spec)?;
        let mut bytes = vec![0u8; need];
        self.device.download(&mut bytes, tensor.storage.ptr)?;
        let elem = tensor.spec.dtype.size_bytes().max(1) as usize;
        let n = i64::try_from(need / elem).map_err(|_| ExecError::Input("tensor too large".into()))?;
        let host = host_from_bytes(tensor.spec.dtype, &bytes, n)?;
        host.view(&tensor.spec.size, &tensor.spec.stride, tensor.spec.offset)
    }

    fn check_alignment(&self, tensor: &CudaTensor, alignment: u32) -> Result<(), ExecError> {
        if alignment > 0 && tensor.data_ptr() % u64::from(alignment) != 0 {
            return Err(ExecError::Assert(format!("data is not {alignment}-byte aligned")));
        }
        Ok(())
    }

    fn memory(&self) -> MemoryStats {
        self.memory.stats()
    }
}

/// A scalar kernel argument at its signature width, in the low bytes of a u64.
fn encode_scalar(ty: ScalarType, v: ScalarValue) -> Result<u64, String> {
    let as_int = |v: ScalarValue| match v {
        ScalarValue::Int(i) => Ok(i),
        ScalarValue::Bool(b) => Ok(i64::from(b)),
        ScalarValue::Float(f) => Err(format!("given the float {f}")),
    };
    let as_float = |v: ScalarValue| match v {
        ScalarValue::Int(i) => i as f64,
        ScalarValue::Bool(b) => f64::from(u8::from(b)),
        ScalarValue::Float(f) => f,
    };
    let fit = |i: i64, lo: i64, hi: i64| {
        if (lo..=hi).contains(&i) {
            Ok(i as u64)
        } else {
            Err(format!("{i} does not fit {ty:?}"))
        }
    };
    Ok(match ty {
        ScalarType::I1 => fit(as_int(v)?, 0, 1)?,
        ScalarType::I8 => fit(as_int(v)?, i8::MIN.into(), i8::MAX.into())? & 0xff,
        ScalarType::I16 => fit(as_int(v)?, i16::MIN.into(), i16::MAX.into())? & 0xffff,
        ScalarType::I32 => fit(as_int(v)?, i32::MIN.into(), i32::MAX.into())? & 0xffff_ffff,
        ScalarType::I64 => as_int(v)? as u64,
        ScalarType::U8 => fit(as_int(v)?, 0, u8::MAX.into())?,
        ScalarType::U16 => fit(as_int(v)?, 0, u16::MAX.into())?,
        ScalarType::U32 => fit(as_int(v)?, 0, u32::MAX.into())?,
        ScalarType::U64 => {
            let i = as_int(v)?;
            u64::try_from(i).map_err(|_| format!("{i} does not fit u64"))?
        }
        ScalarType::Fp16 => u64::from(half::f16::from_f64(as_float(v)).to_bits()),
        ScalarType::Bf16 => u64::from(half::bf16::from_f64(as_float(v)).to_bits()),
        ScalarType::Fp32 => u64::from((as_float(v) as f32).to_bits()),
        ScalarType::Fp64 => as_float(v).to_bits(),
    })
}

/// The dtypes and sizes of a call's tensor arguments, for errors.
fn describe_operands(call: &ExternCall<'_, CudaTensor>) -> String {
    let mut parts = Vec::new();
    for (i, v) in call.args.iter().enumerate() {
        if let Value::Tensor(t) = v {
            parts.push(format!(
                "arg {i}: {}{:?} strides {:?}",
                t.spec.dtype, t.spec.size, t.spec.stride
            ));
        }
    }
    for (k, v) in call.kwargs.iter() {
        if let Value::Tensor(t) = v {
            parts.push(format!(
                "{k}: {}{:?} strides {:?}",
                t.spec.dtype, t.spec.size, t.spec.stride
            ));
        }
    }
    parts.join(", ")
}
