//! The C ABI of wrapir's runtime library (`wrapir_rt.h`, built as
//! `libwrapir_runtime` by the `wrapir-runtime` crate; feature `cuda`): the
//! extern ops of the standalone C++ wrappers, run by the same [`CudaBackend`]
//! dispatch as every other CUDA run, a bundle's inputs (opened through
//! [`crate::bundle`]) and safetensors files in and out. It sits above both
//! `exec` and `bundle`. Device [`WRAPIR_RT_HOST_DEVICE`] (-1) is the host
//! context (`host.rs`): the extern ops of CPU programs, run by the
//! [`crate::exec::host::HostBackend`] dispatch as `wrapir run --device cpu`
//! runs them.
//!
//! * **One runtime per device**, created by [`wrapir_rt_init`] or at the
//!   device's first call: a [`CudaBackend`] on the device's primary context
//!   (the one the standalone wrapper's `wrapir::set_device` makes current,
//!   so device pointers are valid on both sides), behind a mutex: calls on
//!   one device are serialised. The CUDA libraries and the kernel cache are
//!   found where the environment says (`CudaPaths::from_env`, as the CLI).
//! * **Streams**: the backend queues its work on its own stream. Each call
//!   orders that stream after the caller's `stream` (an event) before it
//!   reads the caller's tensors, and the caller's `stream` after it before
//!   returning, so the op sits in the caller's stream order as if it ran
//!   there. A runtime tensor is freed after the work queued on the stream
//!   given to [`wrapir_rt_tensor_free`].
//! * **Tensors**: the caller's [`WrapirRtTensorDesc`]s are borrowed for the
//!   call (checked: dtype, rank, the view inside `storage_bytes`); results
//!   are [`WrapirRtTensor`]s owned by the caller. A result that aliases a
//!   caller's tensor (a view op) is flagged [`WRAPIR_RT_BORROWED`]: its
//!   memory lives as long as the caller's tensor does.
//! * **Errors** are status codes plus a thread-local message
//!   ([`wrapir_rt_last_error`]); every entry point catches panics, so none
//!   unwinds across the ABI.
//!
//! `wrapir_rt.h` declares exactly these functions and types (a test
//! compares the two).

mod args;
mod files;
mod host;

pub use files::{
    wrapir_rt_inputs_free, wrapir_rt_inputs_name, wrapir_rt_inputs_num_scalars, wrapir_rt_inputs_num_tensors,
    wrapir_rt_inputs_scalars, wrapir_rt_inputs_take, wrapir_rt_load_inputs, wrapir_rt_save_safetensors, WrapirRtInputs,
};

use crate::exec::cuda::{CudaBackend, CudaError, CudaOptions, CudaPaths, CudaTensor};
use crate::exec::{Backend, ExecError, ExternCall};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// Success.
pub const WRAPIR_RT_OK: i32 = 0;
/// A null pointer, a bad descriptor, dtype code or argument kind.
pub const WRAPIR_RT_ERR_ARGUMENT: i32 = 1;
/// The op rejected its operands, or has no device implementation.
pub const WRAPIR_RT_ERR_OP: i32 = 2;
/// The CUDA driver or a CUDA library failed, or none is installed.
pub const WRAPIR_RT_ERR_DEVICE: i32 = 3;
/// A file could not be read or written, or is malformed.
pub const WRAPIR_RT_ERR_FILE: i32 = 4;
/// The runtime is in the wrong state for the call.
pub const WRAPIR_RT_ERR_STATE: i32 = 5;
/// An internal error (a bug), caught at the boundary.
pub const WRAPIR_RT_ERR_INTERNAL: i32 = 6;

/// [`WrapirRtArg::kind`]: `None`.
pub const WRAPIR_RT_ARG_NONE: i32 = 0;
/// [`WrapirRtArg::kind`]: a tensor ([`WrapirRtArg::tensor`]).
pub const WRAPIR_RT_ARG_TENSOR: i32 = 1;
/// [`WrapirRtArg::kind`]: an integer ([`WrapirRtArg::int_value`]).
pub const WRAPIR_RT_ARG_INT: i32 = 2;
/// [`WrapirRtArg::kind`]: a float ([`WrapirRtArg::float_value`]).
pub const WRAPIR_RT_ARG_FLOAT: i32 = 3;
/// [`WrapirRtArg::kind`]: a boolean ([`WrapirRtArg::int_value`], 0 or 1).
pub const WRAPIR_RT_ARG_BOOL: i32 = 4;
/// [`WrapirRtArg::kind`]: a string ([`WrapirRtArg::string_value`]).
pub const WRAPIR_RT_ARG_STRING: i32 = 5;
/// [`WrapirRtArg::kind`]: a dtype ([`WrapirRtArg::dtype`]).
pub const WRAPIR_RT_ARG_DTYPE: i32 = 6;
/// [`WrapirRtArg::kind`]: a device ([`WrapirRtArg::int_value`]; -1 is the CPU).
pub const WRAPIR_RT_ARG_DEVICE: i32 = 7;
/// [`WrapirRtArg::kind`]: a list ([`WrapirRtArg::items`]).
pub const WRAPIR_RT_ARG_LIST: i32 = 8;

/// [`WrapirRtTensorDesc::flags`]: host memory.
pub const WRAPIR_RT_HOST: u32 = 1;
/// [`WrapirRtTensorDesc::flags`]: a returned tensor aliases the caller's memory.
pub const WRAPIR_RT_BORROWED: u32 = 2;

/// A strided layout (`wrapir_rt.h`'s `WrapirRtLayout`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WrapirRtLayout {
    /// Dtype code: the index in [`crate::ir::DType::ALL`].
    pub dtype: i32,
    /// Rank.
    pub ndim: i32,
    /// `ndim` sizes (may be null when `ndim` is 0).
    pub sizes: *const i64,
    /// `ndim` strides in elements.
    pub strides: *const i64,
    /// Storage offset in elements.
    pub offset: i64,
}

/// A tensor (`wrapir_rt.h`'s `WrapirRtTensorDesc`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WrapirRtTensorDesc {
    /// Address of the allocation (element 0 of the storage).
    pub storage: u64,
    /// Bytes of the allocation.
    pub storage_bytes: u64,
    /// [`WRAPIR_RT_HOST`], [`WRAPIR_RT_BORROWED`].
    pub flags: u32,
    /// The view.
    pub layout: WrapirRtLayout,
}

/// One op argument (`wrapir_rt.h`'s `WrapirRtArg`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WrapirRtArg {
    /// `WRAPIR_RT_ARG_*`.
    pub kind: i32,
    /// Dtype code of a `DTYPE` argument.
    pub dtype: i32,
    /// Keyword name, or null for positional arguments.
    pub name: *const c_char,
    /// A `TENSOR` argument.
    pub tensor: WrapirRtTensorDesc,
    /// `INT`, `BOOL` (0 or 1) and `DEVICE` (-1: CPU) arguments.
    pub int_value: i64,
    /// `FLOAT` arguments.
    pub float_value: f64,
    /// `STRING` arguments (NUL-terminated UTF-8).
    pub string_value: *const c_char,
    /// `LIST` items.
    pub items: *const WrapirRtArg,
    /// Number of `LIST` items.
    pub num_items: i64,
}

/// A tensor the runtime allocated, owned by the caller.
pub struct WrapirRtTensor {
    tensor: RtTensor,
}

/// A runtime tensor: device memory of a CUDA context, or host memory of the
/// host context.
pub(super) enum RtTensor {
    /// A CUDA context's.
    Device(CudaTensor),
    /// The host context's.
    Host(host::HostTensor),
}

/// The device number of the runtime's host context: extern ops on the CPU
/// (`wrapir::call_op(-1, ...)`), run by the host backend.
pub const WRAPIR_RT_HOST_DEVICE: i32 = -1;

/// A failure on its way to the caller: status and message.
#[derive(Debug)]
pub(super) struct Failure {
    status: i32,
    message: String,
}

impl Failure {
    fn new(status: i32, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }

    fn argument(message: impl Into<String>) -> Self {
        Failure::new(WRAPIR_RT_ERR_ARGUMENT, message)
    }
}

impl From<ExecError> for Failure {
    fn from(e: ExecError) -> Self {
        let status = match &e {
            ExecError::Device(_) => WRAPIR_RT_ERR_DEVICE,
            ExecError::Input(_) | ExecError::Type(_) => WRAPIR_RT_ERR_ARGUMENT,
            _ => WRAPIR_RT_ERR_OP,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<CudaError> for Failure {
    fn from(e: CudaError) -> Self {
        Failure::new(WRAPIR_RT_ERR_DEVICE, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs would cut the message short; they cannot be represented.
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = text);
}

/// Runs `f` at the ABI boundary: its failure or panic becomes a status and
/// the thread's last error; nothing unwinds into the caller.
pub(super) fn boundary(f: impl FnOnce() -> Result<(), Failure>) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => WRAPIR_RT_OK,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            set_last_error(&format!(
                "internal error in the wrapir runtime (please report it): {what}"
            ));
            WRAPIR_RT_ERR_INTERNAL
        }
    }
}

/// The message of the last failed call on this thread (`""` when none).
#[no_mangle]
pub extern "C" fn wrapir_rt_last_error() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

/// One device's runtime: its backend.
pub(super) struct Runtime {
    pub(super) backend: CudaBackend,
}

// SAFETY: the backend's raw CUDA handles (stream, modules, library handles)
// belong to the device's primary context, which every call binds on the
// calling thread before its first CUDA call (`CudaBackend::bind`); the
// runtime is only reached through its mutex, so no two threads use the
// handles at once (cuBLAS, cuBLASLt and cuDNN handles may move between
// threads when not used concurrently), as for `Session`.
unsafe impl Send for Runtime {}

type Runtimes = Mutex<HashMap<usize, Arc<Mutex<Runtime>>>>;

fn runtimes() -> &'static Runtimes {
    static RUNTIMES: OnceLock<Runtimes> = OnceLock::new();
    RUNTIMES.get_or_init(Runtimes::default)
}

fn ordinal(device: i32) -> Result<usize, Failure> {
    usize::try_from(device).map_err(|_| Failure::argument(format!("device {device} is not a CUDA device index")))
}

/// The runtime of `device`, created with `options` when it does not exist yet.
pub(super) fn runtime(device: i32, options: Option<CudaOptions>) -> Result<Arc<Mutex<Runtime>>, Failure> {
    let ordinal = ordinal(device)?;
    // A panic while the lock was held cannot leave the map inconsistent (inserts are single steps).
    let mut all = runtimes().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rt) = all.get(&ordinal) {
        if options.is_some() {
            return Err(Failure::new(
                WRAPIR_RT_ERR_STATE,
                format!("wrapir_rt_init: the runtime of device {device} exists already (wrapir_rt_init must come before the device's first call)"),
            ));
        }
        return Ok(Arc::clone(rt));
    }
    let options = CudaOptions {
        ordinal,
        ..options.unwrap_or_else(CudaOptions::from_env)
    };
    let backend = CudaBackend::new(options)?;
    let rt = Arc::new(Mutex::new(Runtime { backend }));
    all.insert(ordinal, Arc::clone(&rt));
    Ok(rt)
}

/// Locks a runtime; the calling thread's context is bound.
pub(super) fn with_runtime<R>(device: i32, f: impl FnOnce(&mut Runtime) -> Result<R, Failure>) -> Result<R, Failure> {
    let rt = runtime(device, None)?;
    // A panic inside a call leaves the backend as a failed call does (its
    // queued work is ordered, its caches are filled only by complete entries).
    let mut guard = rt.lock().unwrap_or_else(|e| e.into_inner());
    guard.backend.bind()?;
    f(&mut guard)
}

/// The NUL-terminated UTF-8 string at `ptr`; `what` names it in errors.
///
/// # Safety
/// `ptr` must be null or point at a NUL-terminated string alive for `'a`.
pub(super) unsafe fn c_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::argument(format!("{what} is a null pointer")));
    }
    // SAFETY: non-null, and NUL-terminated and alive by the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|e| Failure::argument(format!("{what} is not UTF-8: {e}")))
}

/// Creates `device`'s runtime with the options of the bundle at `bundle`
/// (null: the defaults); see `wrapir_rt.h`.
///
/// # Safety
/// `bundle` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_init(device: i32, bundle: *const c_char) -> i32 {
    boundary(|| {
        if device == WRAPIR_RT_HOST_DEVICE {
            if !bundle.is_null() {
                // SAFETY: non-null, NUL-terminated by the caller's contract.
                let path = unsafe { c_str(bundle, "wrapir_rt_init: `bundle`") }?;
                files::open_bundle(path)?;
            }
            return host::init();
        }
        let options = if bundle.is_null() {
            CudaOptions::from_env()
        } else {
            // SAFETY: non-null, NUL-terminated by the caller's contract.
            let path = unsafe { c_str(bundle, "wrapir_rt_init: `bundle`") }?;
            let opened = files::open_bundle(path)?;
            CudaOptions {
                paths: CudaPaths::from_env(),
                ..CudaOptions::for_bundle(opened.kernel_images(), opened.meta())
            }
        };
        runtime(device, Some(options)).map(|_| ())
    })
}

/// Runs extern op `op`; see `wrapir_rt.h`.
///
/// # Safety
/// `op` must be a NUL-terminated string; `args` must point at `num_args`
/// arguments (or be null when it is 0) whose pointers follow `wrapir_rt.h`
/// (tensor descriptors name live allocations of `device` holding
/// `storage_bytes` bytes, not written by others during the call); `expected`
/// must be null or point at a layout; `results` must point at `num_results`
/// writable slots (or be null when it is 0); `stream` must be null or a
/// stream of `device`'s primary context.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_call(
    device: i32,
    op: *const c_char,
    args: *const WrapirRtArg,
    num_args: i64,
    expected: *const WrapirRtLayout,
    stream: *mut c_void,
    results: *mut *mut WrapirRtTensor,
    num_results: i64,
) -> i32 {
    boundary(|| {
        // SAFETY: the caller's contract.
        let op = unsafe { c_str(op, "wrapir_rt_call: `op`") }?;
        let num_results = args::count(num_results, results.is_null(), &format!("op `{op}`: `num_results`"))?;
        if num_results > 0 {
            // SAFETY: `results` points at `num_results` writable slots (the caller's contract).
            unsafe { std::slice::from_raw_parts_mut(results, num_results) }.fill(std::ptr::null_mut());
        }
        let outcome = if device == WRAPIR_RT_HOST_DEVICE {
            // SAFETY: the caller's contract on `args` and `expected`.
            unsafe { host::call(op, args, num_args, expected, num_results) }
        } else {
            device_call(device, op, args, num_args, expected, stream, num_results)
        };
        let tensors = outcome.map_err(|mut e| {
            if !e.message.contains(op) {
                e.message = format!("op `{op}`: {}", e.message);
            }
            e
        })?;
        for (i, t) in tensors.into_iter().enumerate() {
            if let Some(tensor) = t {
                let boxed = Box::into_raw(Box::new(WrapirRtTensor { tensor }));
                // SAFETY: `i < num_results` (flatten_result returns exactly
                // that many) and the slots are writable (checked non-null above).
                unsafe { *results.add(i) = boxed };
            }
        }
        Ok(())
    })
}

/// [`wrapir_rt_call`] on CUDA device `device`.
///
/// # Safety
/// As for [`wrapir_rt_call`].
unsafe fn device_call(
    device: i32,
    op: &str,
    args: *const WrapirRtArg,
    num_args: i64,
    expected: *const WrapirRtLayout,
    stream: *mut c_void,
    num_results: usize,
) -> Result<Vec<Option<RtTensor>>, Failure> {
    with_runtime(device, |rt| {
        // SAFETY: the caller's contract on `args` and `expected`.
        let converted = unsafe { args::convert_device(&rt.backend, op, args, num_args, expected) }?;
        rt.backend.wait_for_stream(stream as u64)?;
        let value = rt.backend.call_extern(ExternCall {
            op,
            family: crate::exec::op::ExternOp::of(op),
            args: (&converted.args).into(),
            kwargs: (&converted.kwargs).into(),
            expected: converted.expected.as_ref(),
        });
        // The caller's stream waits for whatever the op queued, failed or not.
        let signalled = rt.backend.signal_stream(stream as u64);
        let value = value.map_err(Failure::from)?;
        signalled?;
        if num_results == 0 {
            return Ok(Vec::new());
        }
        let leaves = args::flatten_result(&mut rt.backend, op, value, num_results)?;
        Ok(leaves.into_iter().map(|t| t.map(RtTensor::Device)).collect())
    })
}

/// Describes a runtime tensor; see `wrapir_rt.h`.
///
/// # Safety
/// `tensor` must be null or a live tensor from this runtime; `out` must be
/// null or writable.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_tensor_desc(tensor: *const WrapirRtTensor, out: *mut WrapirRtTensorDesc) -> i32 {
    boundary(|| {
        if tensor.is_null() || out.is_null() {
            return Err(Failure::argument("wrapir_rt_tensor_desc: a null pointer"));
        }
        // SAFETY: non-null and live by the caller's contract.
        let t = unsafe { &*tensor };
        let desc = describe(&t.tensor)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *out = desc };
        Ok(())
    })
}

/// The descriptor of a runtime tensor (its arrays point into the tensor).
fn describe(t: &RtTensor) -> Result<WrapirRtTensorDesc, Failure> {
    let t = match t {
        RtTensor::Device(t) => t,
        RtTensor::Host(t) => return t.desc(),
    };
    let spec = t.spec();
    let dtype = args::dtype_code(spec.dtype);
    let ndim = i32::try_from(spec.size.len()).map_err(|_| Failure::argument("rank does not fit int32"))?;
    Ok(WrapirRtTensorDesc {
        storage: t.storage_address(),
        storage_bytes: t.storage_bytes() as u64,
        flags: if t.is_borrowed() { WRAPIR_RT_BORROWED } else { 0 },
        layout: WrapirRtLayout {
            dtype,
            ndim,
            sizes: spec.size.as_ptr(),
            strides: spec.stride.as_ptr(),
            offset: spec.offset,
        },
    })
}

/// Releases a runtime tensor after the work queued on `stream`; see `wrapir_rt.h`.
///
/// # Safety
/// `tensor` must be null or a tensor from this runtime not released before;
/// `stream` must be null or a stream of the tensor's device's primary context.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_tensor_free(tensor: *mut WrapirRtTensor, stream: *mut c_void) {
    if tensor.is_null() {
        return;
    }
    // SAFETY: a tensor from `Box::into_raw`, released once (the caller's contract).
    let owned = unsafe { Box::from_raw(tensor) };
    let status = boundary(|| release(owned.tensor, stream));
    // A free has no status to return: a failure is kept as the last error.
    let _ = status;
}

/// Drops `tensor` once `stream`'s work queued so far is done.
pub(super) fn release(tensor: RtTensor, stream: *mut c_void) -> Result<(), Failure> {
    match tensor {
        RtTensor::Device(t) => t.release_after(stream as u64)?,
        // Host memory: the caller's stream ordered nothing on it.
        RtTensor::Host(t) => drop(t),
    }
    Ok(())
}
