//! Thin wrappers over the CUDA driver calls the backend makes (cuBLAS's are
//! in `cublas.rs`).
//!
//! Every call returns a [`CudaError`] naming the call on failure; nothing else
//! in the backend touches raw handles.

use super::CudaPaths;
use cudarc::cublas::result as blas;
use cudarc::driver::{result as drv, sys, CudaContext, CudaStream};
use std::ffi::c_void;
use std::sync::Arc;

/// A failed CUDA driver or cuBLAS call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CudaError {
    /// A driver API call failed.
    #[error("CUDA driver call `{call}` failed: {message}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The driver's error name and description.
        message: String,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS call `{call}` failed: {status}")]
    Blas {
        /// The cuBLAS function.
        call: &'static str,
        /// The status code.
        status: String,
    },
    /// A size that does not fit the driver's integer types.
    #[error("{0}")]
    Range(String),
    /// A cuDNN call failed.
    #[error("cuDNN call `{call}` failed: {status}")]
    Dnn {
        /// The cuDNN function.
        call: &'static str,
        /// The status and cuDNN's description of it.
        status: String,
    },
    /// A CUDA library was found nowhere; the message says where it was looked for.
    #[error("{0}")]
    NotFound(String),
    /// An NCCL call failed.
    #[error("NCCL call `{call}` failed: {status}")]
    Nccl {
        /// The NCCL function.
        call: &'static str,
        /// NCCL's description of the result, and its last error.
        status: String,
    },
    /// A CUDA shared library could not be loaded (no driver or toolkit).
    #[error("cannot load the {0} library: is an NVIDIA driver (and, for matmuls, cuBLAS) installed and on the library path?")]
    Library(&'static str),
}

impl CudaError {
    fn driver(call: &'static str, e: drv::DriverError) -> Self {
        CudaError::Driver {
            call,
            message: e.to_string(),
        }
    }

    pub(super) fn blas(call: &'static str, e: blas::CublasError) -> Self {
        CudaError::Blas {
            call,
            status: format!("{:?}", e.0),
        }
    }
}

impl From<CudaError> for super::super::ExecError {
    fn from(e: CudaError) -> Self {
        super::super::ExecError::Device(e.to_string())
    }
}

pub(super) use super::libraries::{keep_driver_loaded, keep_loaded};

/// Checks that the CUDA driver library can be loaded (and keeps it loaded),
/// before any call into it: cudarc panics on a missing library.
fn require_driver() -> Result<(), CudaError> {
    // SAFETY: only tries to open the library (dlopen); loading it runs no
    // CUDA code.
    if !keep_driver_loaded() || !unsafe { sys::is_culib_present() } {
        return Err(CudaError::Library("CUDA driver (libcuda)"));
    }
    Ok(())
}

/// A new event without timing data (the cheap kind, for ordering and
/// waiting only) on the bound context; the caller destroys it.
fn untimed_event() -> Result<sys::CUevent, CudaError> {
    let mut event: sys::CUevent = std::ptr::null_mut();
    // SAFETY: `event` is a valid out-pointer.
    unsafe { sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) }
        .result()
        .map_err(|e| CudaError::driver("cuEventCreate", e))?;
    Ok(event)
}

/// Orders CUDA graph captures against the calls that must not run anywhere
/// in the process while a stream captures, even in thread-local capture
/// mode: module loads and unloads, library handles created or destroyed,
/// cuDNN plans built (their engines may compile and load modules), and
/// device opening ("setups"). Captures run alongside each other, and setups
/// alongside each other (so that libraries started on separate threads
/// overlap), but never a capture alongside a setup; a waiting setup goes
/// first. Not re-entrant: a thread holding a capture guard never starts a
/// setup (the guard is dropped as the capture ends).
static PHASE: std::sync::Mutex<Phase> = std::sync::Mutex::new(Phase {
    captures: 0,
    setups: 0,
    waiting_setups: 0,
});
static PHASE_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

/// Who holds [`PHASE`], and how many setups wait for it.
struct Phase {
    captures: usize,
    setups: usize,
    waiting_setups: usize,
}

/// A held capture or setup guard; released on drop.
pub(super) struct PhaseGuard {
    capture: bool,
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        // The lock guards counters only, so a panic while it was held leaves them usable.
        let mut p = PHASE.lock().unwrap_or_else(|e| e.into_inner());
        if self.capture {
            p.captures = p.captures.saturating_sub(1);
        } else {
            p.setups = p.setups.saturating_sub(1);
        }
        PHASE_CHANGED.notify_all();
    }
}

/// Held for the whole of one graph capture.
pub(super) fn capture_lock() -> PhaseGuard {
    let mut p = PHASE.lock().unwrap_or_else(|e| e.into_inner());
    while p.setups > 0 || p.waiting_setups > 0 {
        p = PHASE_CHANGED.wait(p).unwrap_or_else(|e| e.into_inner());
    }
    p.captures += 1;
    PhaseGuard { capture: true }
}

/// Held by a call that no capture may overlap (see [`PHASE`]).
pub(super) fn setup_lock() -> PhaseGuard {
    let mut p = PHASE.lock().unwrap_or_else(|e| e.into_inner());
    p.waiting_setups += 1;
    while p.captures > 0 {
        p = PHASE_CHANGED.wait(p).unwrap_or_else(|e| e.into_inner());
    }
    p.waiting_setups -= 1;
    p.setups += 1;
    PhaseGuard { capture: false }
}

/// The name and SM number (`major * 10 + minor`) of device `ordinal`, asked
/// of the driver without creating a context (no device memory, no module).
pub fn device_arch(ordinal: usize) -> Result<(String, u32), CudaError> {
    require_driver()?;
    drv::init().map_err(|e| CudaError::driver("cuInit", e))?;
    let ordinal = i32::try_from(ordinal).map_err(|_| CudaError::Range(format!("device ordinal {ordinal}")))?;
    let dev = drv::device::get(ordinal).map_err(|e| CudaError::driver("cuDeviceGet", e))?;
    let name = drv::device::get_name(dev).map_err(|e| CudaError::driver("cuDeviceGetName", e))?;
    let attribute = |a: sys::CUdevice_attribute| {
        // SAFETY: `dev` came from `cuDeviceGet` above.
        unsafe { drv::device::get_attribute(dev, a) }.map_err(|e| CudaError::driver("cuDeviceGetAttribute", e))
    };
    let major = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sm = u32::try_from(major * 10 + minor)
        .map_err(|_| CudaError::Range(format!("compute capability {major}.{minor}")))?;
    Ok((name, sm))
}

/// The device, its context and the one stream every operation is ordered on.
#[derive(Debug)]
pub(super) struct Device {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// Where the CUDA libraries and the kernel cache are (the backend's options').
    pub(super) paths: Arc<CudaPaths>,
    /// The first error of a call made where no error can be returned (frees
    /// in `Drop`), reported at the next synchronisation.
    deferred: std::sync::Mutex<Option<CudaError>>,
}

impl Device {
    /// Opens device `ordinal` (its primary context) and creates a stream;
    /// the libraries it loads later are searched for in `paths`.
    pub(super) fn open(ordinal: usize, paths: Arc<CudaPaths>) -> Result<Arc<Device>, CudaError> {
        require_driver()?;
        let _setup = setup_lock();
        let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::driver("cuDevicePrimaryCtxRetain", e))?;
        // cudarc's event tracking synchronises the whole context when its
        // first stream is created; while another thread captures a CUDA
        // graph that synchronisation is illegal and breaks both threads.
        // SAFETY: the tracking only orders cudarc's own `CudaSlice`s, which
        // this backend never creates: all memory is raw stream-ordered
        // allocations used on this device's one stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| CudaError::driver("cuStreamCreate", e))?;
        Ok(Arc::new(Device {
            ctx,
            stream,
            paths,
            deferred: std::sync::Mutex::new(None),
        }))
    }

    pub(super) fn bind(&self) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::driver("cuCtxSetCurrent", e))
    }

    pub(super) fn raw_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Makes `waiter` wait for the work queued on `on` so far (both streams
    /// of this context; 0 is the legacy default stream).
    pub(super) fn order_streams(&self, waiter: sys::CUstream, on: sys::CUstream) -> Result<(), CudaError> {
        self.bind()?;
        let event = untimed_event()?;
        // SAFETY: `event` was just created; both streams belong to the bound
        // context (the caller's contract for `on`). Destroying an event a
        // stream still waits on releases it once the wait is done.
        let ordered = unsafe { sys::cuEventRecord(event, on) }
            .result()
            .map_err(|e| CudaError::driver("cuEventRecord", e))
            .and_then(|()| {
                // SAFETY: `event` was recorded above on `on`; `waiter` belongs
                // to the bound context (the caller's contract).
                unsafe { sys::cuStreamWaitEvent(waiter, event, 0) }
                    .result()
                    .map_err(|e| CudaError::driver("cuStreamWaitEvent", e))
            });
        // SAFETY: created above, destroyed once.
        let _ = unsafe { sys::cuEventDestroy_v2(event) };
        ordered
    }

    /// The raw handle of this device's stream.
    pub(super) fn cu_stream(&self) -> sys::CUstream {
        self.raw_stream()
    }

    /// The device's name (`cuDeviceGetName`).
    /// Bytes of this GPU's memory in use, by every process (`cuMemGetInfo`:
    /// total less free).
    pub(super) fn memory_in_use(&self) -> Result<u64, CudaError> {
        self.bind()?;
        let (free, total) = drv::mem_get_info().map_err(|e| CudaError::driver("cuMemGetInfo", e))?;
        Ok(total.saturating_sub(free) as u64)
    }

    pub(super) fn name(&self) -> Result<String, CudaError> {
        self.ctx.name().map_err(|e| CudaError::driver("cuDeviceGetName", e))
    }

    /// An attribute of the device.
    pub(super) fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32, CudaError> {
        self.ctx
            .attribute(attr)
            .map_err(|e| CudaError::driver("cuDeviceGetAttribute", e))
    }

    /// Stream-ordered allocation of `bytes` (> 0).
    pub(super) fn alloc(&self, bytes: usize) -> Result<sys::CUdeviceptr, CudaError> {
        self.bind()?;
        // SAFETY: the stream belongs to the bound context and outlives the call;
        // the memory is only used on this stream (every operation of the backend
        // is ordered on it) and is uninitialised, which raw bytes tolerate.
        unsafe { drv::malloc_async(self.raw_stream(), bytes) }.map_err(|e| CudaError::driver("cuMemAllocAsync", e))
    }

    /// Stream-ordered free of a pointer from [`Device::alloc`].
    pub(super) fn free(&self, ptr: sys::CUdeviceptr) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: `ptr` came from `cuMemAllocAsync` on this stream and is freed
        // once (its owning `Storage` is dropped once); later uses are ordered
        // before the free on the same stream.
        unsafe { drv::free_async(ptr, self.raw_stream()) }.map_err(|e| CudaError::driver("cuMemFreeAsync", e))
    }

    /// Copies `src` to device memory at `dst` and waits for the copy.
    pub(super) fn upload(&self, dst: sys::CUdeviceptr, src: &[u8]) -> Result<(), CudaError> {
        self.copy_and_wait(src.len(), |stream| {
            // SAFETY: the caller guarantees `dst` points at >= `src.len()` bytes
            // of live device memory; the host slice stays borrowed until the
            // stream is synchronised, so the asynchronous copy never outlives it.
            unsafe { drv::memcpy_htod_async(dst, src, stream) }.map_err(|e| CudaError::driver("cuMemcpyHtoDAsync", e))
        })
    }

    /// Copies each `(dst, src)` to the device through `staging` (see
    /// [`Staging`]) and waits for the last copy.
    pub(super) fn upload_staged(
        &self,
        staging: &mut Staging,
        copies: &[(sys::CUdeviceptr, &[u8])],
    ) -> Result<(), CudaError> {
        self.bind()?;
        staging.copy(self.raw_stream(), copies)?;
        self.synchronize()
    }

    /// Queues setting `bytes` bytes at `dst` to zero.
    pub(super) fn zero(&self, dst: sys::CUdeviceptr, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller guarantees `dst` points at >= `bytes` bytes of
        // live device memory, ordered on this stream.
        unsafe { drv::memset_d8_async(dst, 0, bytes, self.raw_stream()) }
            .map_err(|e| CudaError::driver("cuMemsetD8Async", e))
    }

    /// Copies `dst.len()` bytes from device memory at `src`, waiting for the
    /// work queued before it.
    pub(super) fn download(&self, dst: &mut [u8], src: sys::CUdeviceptr) -> Result<(), CudaError> {
        self.copy_and_wait(dst.len(), |stream| {
            // SAFETY: the caller guarantees `src` points at >= `dst.len()` bytes
            // of live device memory; `dst` stays mutably borrowed until the
            // stream is synchronised.
            unsafe { drv::memcpy_dtoh_async(dst, src, stream) }.map_err(|e| CudaError::driver("cuMemcpyDtoHAsync", e))
        })
    }

    /// A copy of `bytes` bytes between host and device: nothing when there
    /// are none; else `copy` queued on the stream (the context bound), then
    /// the wait for it (and for the work before it).
    fn copy_and_wait(
        &self,
        bytes: usize,
        copy: impl FnOnce(sys::CUstream) -> Result<(), CudaError>,
    ) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        copy(self.raw_stream())?;
        self.synchronize()
    }

    /// Waits for all work queued on the stream, then reports a deferred error.
    pub(super) fn synchronize(&self) -> Result<(), CudaError> {
        self.stream
            .synchronize()
            .map_err(|e| CudaError::driver("cuStreamSynchronize", e))?;
        self.take_deferred()
    }

    /// Remembers `result`'s error (the first one) for the next synchronisation.
    pub(super) fn defer(&self, result: Result<(), CudaError>) {
        if let (Err(e), Ok(mut slot)) = (result, self.deferred.lock()) {
            slot.get_or_insert(e);
        }
    }

    /// The deferred error, if any (cleared).
    pub(super) fn take_deferred(&self) -> Result<(), CudaError> {
        match self.deferred.lock().ok().and_then(|mut slot| slot.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Loads a module from a cubin image.
    pub(super) fn load_module(&self, image: &[u8]) -> Result<Module, CudaError> {
        self.bind()?;
        let _setup = setup_lock();
        // cuModuleLoadData reads a cubin up to its own length field; give it an
        // 8-byte-aligned copy, as ELF images expect.
        let mut words = vec![0u64; image.len().div_ceil(8) + 1];
        // SAFETY: `words` holds at least `image.len()` bytes; u8 has no
        // alignment requirement and the regions do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), words.as_mut_ptr().cast::<u8>(), image.len()) };
        // SAFETY: `words` is a complete cubin image kept alive for the call; the
        // driver copies what it needs before returning.
        let raw = unsafe { drv::module::load_data(words.as_ptr().cast::<c_void>()) }
            .map_err(|e| CudaError::driver("cuModuleLoadData", e))?;
        Ok(Module {
            raw,
            ctx: Arc::clone(&self.ctx),
        })
    }

    /// Launches `f`. `params` point at each argument's value, in parameter order.
    pub(super) fn launch(
        &self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: `f` is a function of a module this backend keeps loaded;
        // `params` holds one pointer per kernel parameter (the caller built it
        // from the kernel's signature), each pointing at a value of the
        // parameter's width that lives until this call returns (the driver
        // copies argument values at launch). Device pointers among them are
        // live allocations ordered on this stream.
        unsafe { drv::launch_kernel(f, grid, block, shared_mem, self.raw_stream(), params) }
            .map_err(|e| CudaError::driver("cuLaunchKernel", e))
    }
}

/// A loaded module; unloaded on drop.
#[derive(Debug)]
pub(super) struct Module {
    raw: sys::CUmodule,
    ctx: Arc<CudaContext>,
}

impl Module {
    /// The function named `name`.
    pub(super) fn function(&self, name: &str) -> Result<sys::CUfunction, CudaError> {
        let c = std::ffi::CString::new(name)
            .map_err(|_| CudaError::Range(format!("kernel name `{name}` contains a NUL byte")))?;
        // SAFETY: the module is loaded (it is unloaded only on drop).
        unsafe { drv::module::get_function(self.raw, c) }.map_err(|e| CudaError::driver("cuModuleGetFunction", e))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _setup = setup_lock();
        // SAFETY: the module was loaded once and is unloaded once, here; no
        // launch of its functions is pending past the backend's lifetime
        // because the backend synchronises before dropping its modules.
        let r = unsafe { drv::module::unload(self.raw) };
        self.ctx.record_err(r);
    }
}

/// Sets a function's dynamic shared memory limit (for > 48 KiB).
pub(super) fn set_max_dynamic_shared(f: sys::CUfunction, bytes: u32) -> Result<(), CudaError> {
    let value = i32::try_from(bytes).map_err(|_| CudaError::Range(format!("{bytes} bytes of shared memory")))?;
    // SAFETY: `f` is a function of a loaded module.
    unsafe {
        drv::function::set_function_attribute(
            f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            value,
        )
    }
    .map_err(|e| CudaError::driver("cuFuncSetAttribute", e))
}

/// The most threads a block of `f` may have (its registers and the device's limit).
pub(super) fn max_threads_per_block(f: sys::CUfunction) -> Result<i32, CudaError> {
    // SAFETY: `f` is a function of a loaded module.
    unsafe {
        drv::function::get_function_attribute(f, sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    }
    .map_err(|e| CudaError::driver("cuFuncGetAttribute", e))
}

/// Pinned (page-locked) host memory on a device's context, freed on drop.
#[derive(Debug)]
struct PinnedHost {
    ptr: *mut u8,
    ctx: Arc<CudaContext>,
}

// SAFETY: the memory is owned by this value and reached only through its
// owner's `&mut self`; it belongs to the device's primary context, which
// every use binds first.
unsafe impl Send for PinnedHost {}

impl PinnedHost {
    /// `bytes` of pinned memory on `device`'s context.
    fn new(device: &Device, bytes: usize) -> Result<PinnedHost, CudaError> {
        device.bind()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is bound. Freed in `Drop`.
        unsafe { sys::cuMemHostAlloc(&mut host, bytes, 0) }
            .result()
            .map_err(|e| CudaError::driver("cuMemHostAlloc", e))?;
        Ok(PinnedHost {
            ptr: host.cast(),
            ctx: Arc::clone(&device.ctx),
        })
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by `cuMemHostAlloc` in `new`, freed once; its
        // owner waited for every copy into or out of it first.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// Two pinned host buffers that host-to-device copies go through: bytes are
/// copied into one while the DMA engine drains the other, so copies run at
/// the bus's speed rather than pageable memory's, and the host never waits
/// for a copy it is not about to reuse the buffer of.
pub(super) struct Staging {
    /// Each buffer, the event recorded after the copies out of it, and
    /// whether that event is still to be waited for.
    buffers: [(PinnedHost, sys::CUevent, bool); 2],
    capacity: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the events are owned by this value and used only through `&mut
// self`; they belong to the device's primary context, which every use binds
// first.
unsafe impl Send for Staging {}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("capacity", &self.capacity).finish()
    }
}

impl Staging {
    /// Two pinned buffers of `capacity` bytes each (> 0) on `device`'s context.
    pub(super) fn new(device: &Device, capacity: usize) -> Result<Staging, CudaError> {
        let capacity = capacity.max(1);
        let buffers = [PinnedHost::new(device, capacity)?, PinnedHost::new(device, capacity)?];
        let mut staging = Staging {
            buffers: buffers.map(|host| (host, std::ptr::null_mut(), false)),
            capacity,
            ctx: Arc::clone(&device.ctx),
        };
        for slot in &mut staging.buffers {
            // Destroyed in `Drop` (the context is bound by `PinnedHost::new`).
            slot.1 = untimed_event()?;
        }
        Ok(staging)
    }

    /// Queues the copies on `stream`, in pieces of at most one buffer.
    fn copy(&mut self, stream: sys::CUstream, copies: &[(sys::CUdeviceptr, &[u8])]) -> Result<(), CudaError> {
        let mut current = 0usize;
        let mut fill = 0usize;
        let mut pending: Vec<(sys::CUdeviceptr, usize, usize)> = Vec::new();
        let flush = |buffers: &mut [(PinnedHost, sys::CUevent, bool); 2],
                     current: usize,
                     pending: &mut Vec<(sys::CUdeviceptr, usize, usize)>|
         -> Result<(), CudaError> {
            let (host, event) = (buffers[current].0.ptr, buffers[current].1);
            for (dst, at, len) in pending.drain(..) {
                // SAFETY: `host + at .. + len` lies in the pinned buffer
                // (filled below); the buffer is not written again before its
                // event, recorded after these copies, has completed; `dst`
                // holds `len` bytes (the caller's contract).
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst, host.add(at).cast(), len, stream) }
                    .result()
                    .map_err(|e| CudaError::driver("cuMemcpyHtoDAsync", e))?;
            }
            // SAFETY: a live event and stream of the bound context.
            unsafe { sys::cuEventRecord(event, stream) }
                .result()
                .map_err(|e| CudaError::driver("cuEventRecord", e))?;
            buffers[current].2 = true;
            Ok(())
        };
        for &(dst, src) in copies {
            let mut done = 0usize;
            while done < src.len() {
                if fill == self.capacity {
                    flush(&mut self.buffers, current, &mut pending)?;
                    current ^= 1;
                    fill = 0;
                }
                if fill == 0 && self.buffers[current].2 {
                    // SAFETY: a live event; waits for the copies out of this buffer.
                    unsafe { sys::cuEventSynchronize(self.buffers[current].1) }
                        .result()
                        .map_err(|e| CudaError::driver("cuEventSynchronize", e))?;
                    self.buffers[current].2 = false;
                }
                let len = (src.len() - done).min(self.capacity - fill);
                // SAFETY: `fill + len <= capacity` bytes of the pinned buffer,
                // which no queued copy reads (its event completed or it was never used).
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr().add(done), self.buffers[current].0.ptr.add(fill), len)
                };
                pending.push((dst + done as u64, fill, len));
                fill += len;
                done += len;
            }
        }
        if !pending.is_empty() {
            flush(&mut self.buffers, current, &mut pending)?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        for &(_, event, _) in &self.buffers {
            if !event.is_null() {
                // SAFETY: created in `new`; waits for queued copies out of the
                // buffer before it is freed (when the fields drop, after
                // this), then destroys the event once.
                unsafe {
                    let _ = sys::cuEventSynchronize(event);
                    let _ = sys::cuEventDestroy_v2(event);
                }
            }
        }
    }
}

/// A pinned host buffer of 8-byte words that a run of device reads is
/// copied into with one stream synchronisation for the whole run.
#[derive(Debug)]
pub(super) struct PinnedWords {
    host: PinnedHost,
    words: usize,
}

impl PinnedWords {
    /// A pinned buffer of `words` (> 0) words on `device`'s context.
    pub(super) fn new(device: &Device, words: usize) -> Result<PinnedWords, CudaError> {
        let words = words.max(1);
        let bytes = words
            .checked_mul(8)
            .ok_or_else(|| CudaError::Range(format!("{words} device reads at once")))?;
        Ok(PinnedWords {
            host: PinnedHost::new(device, bytes)?,
            words,
        })
    }

    /// Words the buffer holds.
    pub(super) fn words(&self) -> usize {
        self.words
    }

    /// Copies `bytes` (at most 8) from each device address of `reads` into
    /// one word each, in order, on `device`'s stream, and waits once for
    /// them all; returns the words (zero-extended). At most
    /// [`PinnedWords::words`] reads.
    pub(super) fn read(
        &mut self,
        device: &Device,
        reads: impl ExactSizeIterator<Item = (sys::CUdeviceptr, usize)>,
    ) -> Result<&[[u8; 8]], CudaError> {
        if reads.len() > self.words {
            return Err(CudaError::Range(format!(
                "{} device reads at once, the buffer holds {}",
                reads.len(),
                self.words
            )));
        }
        device.bind()?;
        // SAFETY: `host` holds `words` >= `reads.len()` words, owned by `self`
        // (borrowed mutably for the call), and no copy into it is in flight:
        // every call waits for its copies before returning.
        let out = unsafe { std::slice::from_raw_parts_mut(self.host.ptr.cast::<[u8; 8]>(), reads.len()) };
        for (word, (ptr, bytes)) in out.iter_mut().zip(reads) {
            *word = [0; 8];
            // SAFETY: the word is pinned memory of this context with room for
            // `bytes.min(8)` bytes; the caller guarantees `ptr` points at that
            // many bytes of live device memory; the copy is waited for below.
            unsafe { sys::cuMemcpyDtoHAsync_v2(word.as_mut_ptr().cast(), ptr, bytes.min(8), device.raw_stream()) }
                .result()
                .map_err(|e| CudaError::driver("cuMemcpyDtoHAsync", e))?;
        }
        device.synchronize()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{capture_lock, setup_lock};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Setups share the phase with each other, captures with each other,
    /// and a capture never overlaps a setup (either way round).
    #[test]
    fn setups_overlap_each_other_but_never_a_capture() {
        let a = setup_lock();
        let b = setup_lock(); // would deadlock if setups excluded each other
        let captured = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicBool::new(false));
        let (flag, end) = (Arc::clone(&captured), Arc::clone(&ended));
        let capture = std::thread::spawn(move || {
            let _c = capture_lock();
            flag.store(true, Ordering::SeqCst);
            let _d = capture_lock(); // captures share
            std::thread::sleep(Duration::from_millis(50));
            // Set while both guards are held: a setup that starts later sees it.
            end.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!captured.load(Ordering::SeqCst), "a capture started during a setup");
        drop(a);
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !captured.load(Ordering::SeqCst),
            "a capture started during the second setup"
        );
        drop(b);
        while !captured.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The capture holds the phase for 50 ms: a setup now waits for it.
        let t0 = std::time::Instant::now();
        let _s = setup_lock();
        // (Not `is_finished`: the thread may still be exiting after its guards dropped.)
        assert!(ended.load(Ordering::SeqCst), "a setup started during a capture");
        assert!(t0.elapsed() > Duration::from_millis(10));
        capture.join().unwrap();
    }
}
