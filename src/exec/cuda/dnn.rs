//! Thin wrappers over cuDNN's legacy calls wrapir makes: the handle, tensor
//! descriptors (destroyed on drop), the bias add and layout copies of a
//! convolution (the convolution itself is a graph-API plan, `dnn_graph`).
//! Every call returns a [`CudaError`] naming it.

use super::driver::{CudaError, Device};
use super::libraries;
use cudarc::cudnn::sys as dnn;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

pub(super) use dnn::cudnnDataType_t as DataType;

pub(super) fn check(call: &'static str, status: dnn::cudnnStatus_t) -> Result<(), CudaError> {
    if status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: cudnnGetErrorString returns a static NUL-terminated string for any status.
    let text = unsafe { std::ffi::CStr::from_ptr(dnn::cudnnGetErrorString(status)) };
    let mut status = format!("{status:?} ({})", text.to_string_lossy());
    let mut last = [0 as std::ffi::c_char; 512];
    // SAFETY: cuDNN writes at most `last.len()` bytes, NUL-terminated, into the buffer.
    unsafe { dnn::cudnnGetLastErrorString(last.as_mut_ptr(), last.len()) };
    // SAFETY: the buffer was zeroed and cuDNN NUL-terminates what it writes.
    let last = unsafe { std::ffi::CStr::from_ptr(last.as_ptr()) }.to_string_lossy();
    if !last.is_empty() {
        status.push_str(&format!(": {last}"));
    }
    if status.contains("SUBLIBRARY") {
        for failure in libraries::sublibrary_failures() {
            status.push_str(&format!("; could not open {failure}"));
        }
        if let Some(why) = libraries::second_cudnn() {
            status.push_str(&format!("; {why}"));
        }
    }
    Err(CudaError::Dnn { call, status })
}

fn int(v: i64, what: &str) -> Result<i32, CudaError> {
    i32::try_from(v).map_err(|_| CudaError::Range(format!("{what} {v} does not fit cuDNN's int")))
}

fn ints(v: &[i64], what: &str) -> Result<Vec<i32>, CudaError> {
    v.iter().map(|&x| int(x, what)).collect()
}

/// A cuDNN handle bound to the device's stream; destroyed on drop.
#[derive(Debug)]
pub(super) struct DnnHandle {
    raw: dnn::cudnnHandle_t,
    device: Arc<Device>,
}

impl DnnHandle {
    /// Loads cuDNN (see [`libraries`]) and creates a handle on `device`'s stream.
    pub(super) fn new(device: &Arc<Device>) -> Result<DnnHandle, CudaError> {
        let dirs = &device.paths.library_dirs;
        // SAFETY: a dlopen probe, checked before cudarc would panic on a missing library.
        if !libraries::keep_loaded("cudnn", dirs) || !unsafe { dnn::is_culib_present() } {
            return Err(CudaError::NotFound(libraries::missing("cuDNN (libcudnn.so.9)", dirs)));
        }
        device.bind()?;
        let _setup = super::driver::setup_lock();
        let mut raw: dnn::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the context is bound to this thread.
        check("cudnnCreate", unsafe { dnn::cudnnCreate(&mut raw) })?;
        let handle = DnnHandle {
            raw,
            device: Arc::clone(device),
        };
        // SAFETY: `raw` is live; the stream outlives the handle (the handle
        // holds the device, which holds the stream).
        check("cudnnSetStream", unsafe {
            dnn::cudnnSetStream(raw, device.stream.cu_stream() as dnn::cudaStream_t)
        })?;
        Ok(handle)
    }
}

impl DnnHandle {
    /// The raw handle, for the graph API (`dnn_graph`).
    pub(super) fn raw(&self) -> dnn::cudnnHandle_t {
        self.raw
    }

    /// The device the handle is on.
    pub(super) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// What a serialized plan made on this handle is valid for: the cuDNN
    /// and driver versions and the GPU (name, compute capability, SMs).
    pub(super) fn identity(&self) -> Result<String, CudaError> {
        use sys::CUdevice_attribute as A;
        // SAFETY: a plain query of the loaded library.
        let cudnn = unsafe { dnn::cudnnGetVersion() };
        let mut driver = 0;
        // SAFETY: an out-pointer to a live int; the driver is loaded (the device is open).
        let _ = unsafe { sys::cuDriverGetVersion(&mut driver) };
        let d = &self.device;
        Ok(format!(
            "cudnn {cudnn} driver {driver} {} sm{}{} x{}",
            d.name()?,
            d.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            d.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            d.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
        ))
    }
}

impl Drop for DnnHandle {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let _setup = super::driver::setup_lock();
        // SAFETY: the handle was created once and is destroyed once, here.
        let _ = unsafe { dnn::cudnnDestroy(self.raw) };
    }
}

/// An owned cuDNN descriptor type `$name` holding a `$raw`:
/// `$name::create()` makes one with `$create` (cuDNN's defaults until a
/// setter fills it in), and dropping it calls `$destroy`.
macro_rules! cudnn_descriptor {
    ($(#[$doc:meta])* $vis:vis struct $name:ident($raw:ty), $create:ident, $destroy:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        $vis struct $name($raw);

        impl $name {
            fn create() -> Result<$name, $crate::exec::cuda::driver::CudaError> {
                let mut raw = std::ptr::null_mut();
                // SAFETY: `raw` is a valid out-pointer.
                $crate::exec::cuda::dnn::check(stringify!($create), unsafe { cudarc::cudnn::sys::$create(&mut raw) })?;
                Ok($name(raw))
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: created once (by `create`), destroyed once.
                let _ = unsafe { cudarc::cudnn::sys::$destroy(self.0) };
            }
        }
    };
}
pub(super) use cudnn_descriptor;

cudnn_descriptor! {
    /// A strided tensor descriptor.
    pub(super) struct TensorDesc(dnn::cudnnTensorDescriptor_t),
    cudnnCreateTensorDescriptor,
    cudnnDestroyTensorDescriptor
}

impl TensorDesc {
    pub(super) fn new(dtype: DataType, size: &[i64], stride: &[i64]) -> Result<TensorDesc, CudaError> {
        let (dims, strides) = (ints(size, "tensor size")?, ints(stride, "tensor stride")?);
        let desc = TensorDesc::create()?;
        let raw = desc.0;
        // SAFETY: the descriptor is live; both arrays hold `dims.len()` entries.
        check("cudnnSetTensorNdDescriptor", unsafe {
            dnn::cudnnSetTensorNdDescriptor(
                raw,
                dtype,
                int(dims.len() as i64, "rank")?,
                dims.as_ptr(),
                strides.as_ptr(),
            )
        })?;
        Ok(desc)
    }
}

impl TensorDesc {
    /// A descriptor cuDNN fills in (`cudnnGetRNNWeightParams`' matrix and
    /// bias descriptors).
    pub(super) fn blank() -> Result<TensorDesc, CudaError> {
        TensorDesc::create()
    }

    /// The raw descriptor, for calls outside this module (the RNN API).
    pub(super) fn raw(&self) -> dnn::cudnnTensorDescriptor_t {
        self.0
    }

    /// The sizes the descriptor holds (at most 8 dimensions).
    pub(super) fn sizes(&self) -> Result<Vec<i64>, CudaError> {
        const MAX: usize = 8;
        let (mut dtype, mut rank) = (DataType::CUDNN_DATA_FLOAT, 0i32);
        let (mut dims, mut strides) = ([0i32; MAX], [0i32; MAX]);
        // SAFETY: the descriptor is live; both arrays hold `MAX` entries, the
        // count requested.
        check("cudnnGetTensorNdDescriptor", unsafe {
            dnn::cudnnGetTensorNdDescriptor(
                self.0,
                MAX as i32,
                &mut dtype,
                &mut rank,
                dims.as_mut_ptr(),
                strides.as_mut_ptr(),
            )
        })?;
        let rank = usize::try_from(rank).unwrap_or(0).min(MAX);
        Ok(dims[..rank].iter().map(|&d| i64::from(d)).collect())
    }
}

/// cuDNN's scaled tensor calls a convolution makes, `y = alpha * x + beta * y`
/// over two descriptors.
#[derive(Clone, Copy, Debug)]
pub(super) enum Scaled {
    /// `y = x + y` with `x` broadcast over `y` (the bias add, `cudnnAddTensor`).
    Add,
    /// `y = x` between two layouts of the same sizes (`cudnnTransformTensor`).
    Transform,
}

impl DnnHandle {
    /// Queues `op` from `x` into `y`.
    pub(super) fn scaled(
        &self,
        op: Scaled,
        x: (&TensorDesc, sys::CUdeviceptr),
        y: (&TensorDesc, sys::CUdeviceptr),
    ) -> Result<(), CudaError> {
        // Both calls take (handle, alpha, x desc, x, beta, y desc, y): one
        // function pointer type for either.
        let (name, call, alpha, beta): (_, unsafe fn(_, _, _, _, _, _, _) -> _, f32, f32) = match op {
            Scaled::Add => ("cudnnAddTensor", dnn::cudnnAddTensor, 1.0, 1.0),
            Scaled::Transform => ("cudnnTransformTensor", dnn::cudnnTransformTensor, 1.0, 0.0),
        };
        self.device.bind()?;
        // SAFETY: descriptors are live and describe the live buffers passed with them.
        check(name, unsafe {
            call(
                self.raw,
                (&alpha as *const f32).cast(),
                x.0 .0,
                x.1 as *const c_void,
                (&beta as *const f32).cast(),
                y.0 .0,
                y.1 as *mut c_void,
            )
        })
    }
}
