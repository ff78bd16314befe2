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
pub(crate) mod conv;
mod cublas;
mod dnn;
mod dnn_attention;
mod dnn_graph;
mod driver;
mod fallback;
mod graph;
pub(crate) mod kernels;
mod launch;
mod libraries;
mod library;
mod matmul;
mod nccl;
mod options;
mod prepared;
mod prepared_cache;
pub(crate) mod prime;
mod rnn;
mod run;
mod tensor;

pub use super::cuda_paths::{CudaPaths, KERNEL_CACHE_VAR, LIBRARY_PATH_VAR};
pub use super::cuda_reports::{
    ChainStep, CriticalPath, GraphReads, GraphStreams, LaunchFloor, LibraryCost, LibraryVersion, LoadTimings, Replay,
    StreamChoice,
};
pub use super::model_source::CudnnPlans;
pub use driver::{device_arch, CudaError};
pub use graph::launch_floor;
pub use kernels::ExternOpLog;
pub use libraries::library_versions;
pub use nccl::NcclWorld;
pub use options::CudaOptions;
pub use prepared::Prepared;
pub use prepared_cache::PreparedCache;
pub use tensor::CudaTensor;

pub(crate) use bytes::host_from_bytes;
pub(crate) use launch::SharedKernels;
pub use run::{place_inputs, run_program, run_to_host, to_host};

use launch::LoadedKernel;
use tensor::Storage;

use super::host::tensor::{check_bounds, with_dtype, Accounted, MemCounter};
use super::host::HostBackend;
use super::op::{op_key, CudaRoute};
use super::{
    Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, Tensor, TensorSpec, Value,
};
use crate::ir::{DType, Device as IrDevice, KernelBackend};
use bytes::{encode, host_storage_bytes};
use cudarc::driver::sys;
use driver::{Device, Module};
use std::collections::HashMap;
use std::sync::Arc;

/// What a device implementation of an extern op answers: the op's value, or
/// `None` when it does not take these operands (the host fallback then runs
/// the call).
type DeviceResult = Result<Option<Value<CudaTensor>>, ExecError>;

/// Bytes of each of a backend's two pinned staging buffers.
const STAGING_BYTES: usize = 8 << 20;

/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// Runs programs on a CUDA GPU.
pub struct CudaBackend {
    device: Arc<Device>,
    options: CudaOptions,
    /// Loaded modules by `cubin` path.
    modules: HashMap<String, Arc<Module>>,
    kernels: HashMap<String, LoadedKernel>,
    blas: Option<cublas::BlasHandle>,
    /// cuBLASLt: handle, persistent workspace and planned matmuls (first `addmm`-style call).
    lt: Option<blaslt::Lt>,
    host: HostBackend,
    memory: Arc<MemCounter>,
    builtins: kernels::Builtins,
    timings: LoadTimings,
    /// While the prepared path records a built-in op: its device operations.
    trace: Option<Vec<library::Traced>>,
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
    /// This backend's communicators, once it joined a multi-rank run
    /// ([`CudaBackend::join_world`]); dropped after the stream is synchronised.
    collectives: Option<Arc<nccl::NcclRank>>,
    /// The kernel that checks a device read inside a graph, loaded at its
    /// first use (see `graph::guarded`).
    guard_kernel: std::cell::OnceCell<launch::LoadedKernel>,
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
fn rng_bytes(state: crate::format::bundle_json::CudaRngState) -> [u8; 16] {
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
        if (options.preload_blas || options.preload_builtins || options.preload_dnn) && driver::keep_driver_loaded() {
            let _ = cudarc::driver::result::init();
        }
        let paths = Arc::new(options.paths.clone());
        if options.preload_blas {
            // Detached: `keep_loaded` is idempotent and serialised, so the
            // first matmul waits for this load if it is still running.
            let paths = Arc::clone(&paths);
            libraries::spawn_background(move || {
                driver::keep_loaded("cublas", &paths.library_dirs);
                driver::keep_loaded("cublasLt", &paths.library_dirs);
            });
        }
        if options.preload_dnn {
            let paths = Arc::clone(&paths);
            libraries::spawn_background(move || {
                libraries::keep_loaded("cudnn", &paths.library_dirs);
            });
        }
        if options.preload_builtins {
            kernels::precompile_in_background(options.ordinal, Arc::clone(&paths));
        }
        let device = Device::open(options.ordinal, paths)?;
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
            collectives: None,
            guard_kernel: std::cell::OnceCell::new(),
        })
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

    /// Bytes of this backend's GPU memory in use, by every process
    /// (`cuMemGetInfo`); on a GPU this process has to itself, what the
    /// process holds: its context, libraries, weights, arenas and pools.
    pub fn device_memory_in_use(&self) -> Result<u64, CudaError> {
        self.device.memory_in_use()
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

    /// Convolution plans this backend made in calls (not ahead of them).
    pub(crate) fn conv_plans_made_in_calls(&self) -> usize {
        self.conv.made_in_calls()
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
        if src.dtype().is_complex() {
            // Complex values are written as their real and imaginary parts
            // (the device storage is the same; see `copy_in`).
            let real = CudaTensor {
                storage: Arc::clone(&dst.storage),
                spec: dst.spec.as_real()?,
            };
            return self.overwrite(&real, &src.view_as_real()?);
        }
        if src.spec().stride == dst.spec.stride && src.spec().offset == dst.spec.offset {
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
            let numel = crate::exec::host::tensor::storage_elements(&dst.spec)?;
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
            .ok_or_else(|| ExecError::Device("no staging buffers".into()))?;
        self.device.upload_staged(staging, &list)?;
        Ok(())
    }

    /// Sets the CUDA generator state `aten.randint` draws from next (see
    /// [`crate::exec::random`]). The state lives in device memory once a
    /// draw has run: each draw's kernel reads it and a second kernel
    /// advances it, so replays of a prepared recording (direct or through
    /// a CUDA graph) draw new numbers each call, as PyTorch's generator does.
    pub fn set_cuda_rng(&mut self, state: crate::format::bundle_json::CudaRngState) -> Result<(), ExecError> {
        self.host.set_cuda_rng(state);
        if let Some(ptr) = self.rng_state {
            self.device.upload(ptr, &rng_bytes(state))?;
        }
        Ok(())
    }

    /// The generator state now (advanced by every draw, replays included).
    pub fn cuda_rng(&self) -> Result<crate::format::bundle_json::CudaRngState, ExecError> {
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
        Ok(crate::format::bundle_json::CudaRngState {
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

    /// Device memory of `bytes` bytes (none for 0), counted in the backend's
    /// memory statistics and freed on its stream when the last handle goes;
    /// not part of a recording's trace.
    fn untraced_storage(&self, bytes: usize) -> Result<Arc<Storage>, ExecError> {
        let ptr = if bytes == 0 { 0 } else { self.device.alloc(bytes)? };
        self.memory.add(bytes as u64);
        Ok(Arc::new(Storage {
            ptr,
            bytes,
            device: Arc::clone(&self.device),
            _accounted: Accounted {
                bytes: bytes as u64,
                counter: Some(Arc::clone(&self.memory)),
            },
            borrowed: false,
        }))
    }

    /// The extern ops this backend runs: on the GPU, then through the host fallback when it is on.
    pub fn supported_ops(&self) -> Vec<String> {
        let device = crate::exec::device_ops::cuda_ops();
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
    /// Runs `call` on the device where its catalogue entry routes it
    /// (`Ok(None)`: no device implementation takes these operands).
    fn run_on_device(&mut self, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
        let Some(on) = call.family.on_cuda().filter(|on| route_runs(on.route, call.family)) else {
            return Ok(None);
        };
        match on.route {
            CudaRoute::Blas => matmul::call(self, call),
            CudaRoute::Conv => conv::call(self, call),
            CudaRoute::Attention => attention::call(self, call),
            CudaRoute::Kernel => kernels::run_indexing(self, call),
            CudaRoute::Extra => kernels::run_extra(self, call),
            CudaRoute::Rnn => rnn::call(self, call),
        }
    }

    fn device_of(&self) -> IrDevice {
        IrDevice::cuda(u32::try_from(self.options.ordinal).unwrap_or(u32::MAX))
    }

    fn alloc_storage(&mut self, bytes: usize) -> Result<Arc<Storage>, ExecError> {
        let storage = self.untraced_storage(bytes)?;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(library::Traced::Alloc(Arc::clone(&storage)));
        }
        Ok(storage)
    }

    /// A library call's workspace of `bytes` (none for 0 bytes), allocated
    /// (and traced) as any storage.
    fn workspace(&mut self, bytes: usize) -> Result<Option<Arc<Storage>>, ExecError> {
        match bytes {
            0 => Ok(None),
            _ => self.alloc_storage(bytes).map(Some),
        }
    }

    /// Reads `bytes` (at most 8) bytes of device memory at `ptr`, after the
    /// work queued before it; traced for the prepared path.
    fn read_device(&mut self, ptr: sys::CUdeviceptr, bytes: usize) -> Result<[u8; 8], ExecError> {
        let mut value = [0u8; 8];
        let n = bytes.min(value.len());
        self.device.download(&mut value[..n], ptr)?;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(library::Traced::Read { ptr, bytes: n, value });
        }
        Ok(value)
    }

    /// Zeroes `bytes` bytes of device memory at `ptr` (queued on the stream);
    /// traced for the prepared path.
    fn zero(&mut self, ptr: sys::CUdeviceptr, bytes: usize) -> Result<(), ExecError> {
        self.device.zero(ptr, bytes)?;
        if let Some(trace) = self.trace.as_mut() {
            trace.push(library::Traced::Zero { ptr, bytes });
        }
        Ok(())
    }

    /// Marks the start (`true`) or end (`false`) of operations that depend
    /// only on what came before the start, not on each other (see
    /// [`library::Traced::Fork`]); traced for the prepared path.
    fn independent_operations(&mut self, start: bool) {
        if let Some(trace) = self.trace.as_mut() {
            trace.push(if start {
                library::Traced::Fork
            } else {
                library::Traced::Join
            });
        }
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
        if let Some(v) = nccl::call(self, &call)? {
            return Ok(v);
        }
        if crate::exec::op::stream::is_stream_op(&op_key(call.op)) {
            // One stream, program order: nothing to wait for.
            return crate::exec::op::stream::run_in_order(call.op, &call.args, &call.kwargs);
        }
        let on_device = call.family.on_cuda().is_some();
        if on_device {
            if let Some(v) = self.run_on_device(&call)? {
                self.options.extern_ops.record_device(call.op);
                return Ok(v);
            }
        }
        let on_host = self.host.has_op(call.op);
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
        let numel = crate::exec::host::tensor::storage_elements(&spec)?;
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

    /// The host options' `skip_tensor_asserts` (the same switch for both
    /// backends of a run).
    fn checks_tensor_asserts(&self) -> bool {
        !self.options.host.skip_tensor_asserts
    }

    fn memory(&self) -> MemoryStats {
        self.memory.stats()
    }
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

/// Whether the part of the backend that `route` names runs `op`: each
/// module's own table, the one its dispatch reads.
fn route_runs(route: CudaRoute, op: super::op::ExternOp) -> bool {
    match route {
        CudaRoute::Blas => matmul::op_fn(op).is_some(),
        CudaRoute::Conv => conv::runs(op),
        CudaRoute::Attention => attention::device_kind(op).is_some(),
        CudaRoute::Kernel => kernels::runs_indexing(op),
        CudaRoute::Extra => kernels::runs_extra(op),
        CudaRoute::Rnn => rnn::runs(op),
    }
}

#[cfg(test)]
mod tests {
    //! The catalogue's CUDA claims against the backend's dispatch, no GPU needed.

    use super::route_runs;
    use crate::exec::op::{CudaRoute, CATALOGUE};

    /// Every op the catalogue says runs on the device is in the table of the
    /// module its route names (`wrapir ops` claims nothing the dispatch
    /// would send to the host), and no module runs an op the catalogue routes
    /// elsewhere.
    #[test]
    fn every_claimed_cuda_op_has_a_function_on_its_route() {
        let routes = [
            CudaRoute::Blas,
            CudaRoute::Conv,
            CudaRoute::Attention,
            CudaRoute::Kernel,
            CudaRoute::Extra,
            CudaRoute::Rnn,
        ];
        for entry in CATALOGUE {
            if let Some(on) = entry.cuda {
                assert!(
                    route_runs(on.route, entry.op),
                    "`{}`: the catalogue says {:?} runs it ({}), but that module has no function for it",
                    entry.key,
                    on.route,
                    on.via
                );
            }
            for route in routes {
                if route_runs(route, entry.op) {
                    assert!(
                        entry.cuda.is_none_or(|on| on.route == route),
                        "`{}` has a function on {route:?} but the catalogue routes it to {:?}",
                        entry.key,
                        entry.cuda.map(|on| on.route)
                    );
                }
            }
        }
    }
}
