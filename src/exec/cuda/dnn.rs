//! Thin wrappers over the cuDNN calls the convolution op makes: the handle,
//! tensor / filter / convolution descriptors (destroyed on drop) and the
//! calls themselves. Every call returns a [`CudaError`] naming it.

use super::driver::{CudaError, Device};
use super::libraries;
use cudarc::cudnn::sys as dnn;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

pub(super) use dnn::{cudnnDataType_t as DataType, cudnnMathType_t as MathType, cudnnTensorFormat_t as Format};

pub(super) fn check(call: &'static str, status: dnn::cudnnStatus_t) -> Result<(), CudaError> {
    if status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: cudnnGetErrorString returns a static NUL-terminated string for any status.
    let text = unsafe { std::ffi::CStr::from_ptr(dnn::cudnnGetErrorString(status)) };
    Err(CudaError::Dnn {
        call,
        status: format!("{status:?} ({})", text.to_string_lossy()),
    })
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
}

impl Drop for DnnHandle {
    fn drop(&mut self) {
        let _ = self.device.bind();
        let _setup = super::driver::setup_lock();
        // SAFETY: the handle was created once and is destroyed once, here.
        let _ = unsafe { dnn::cudnnDestroy(self.raw) };
    }
}

/// A strided tensor descriptor.
#[derive(Debug)]
pub(super) struct TensorDesc(dnn::cudnnTensorDescriptor_t);

impl TensorDesc {
    pub(super) fn new(dtype: DataType, size: &[i64], stride: &[i64]) -> Result<TensorDesc, CudaError> {
        let (dims, strides) = (ints(size, "tensor size")?, ints(stride, "tensor stride")?);
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("cudnnCreateTensorDescriptor", unsafe {
            dnn::cudnnCreateTensorDescriptor(&mut raw)
        })?;
        let desc = TensorDesc(raw);
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

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnDestroyTensorDescriptor(self.0) };
    }
}

/// A packed filter descriptor (`NCHW` or `NHWC` order).
#[derive(Debug)]
pub(super) struct FilterDesc(dnn::cudnnFilterDescriptor_t);

impl FilterDesc {
    pub(super) fn new(dtype: DataType, format: Format, size: &[i64]) -> Result<FilterDesc, CudaError> {
        let dims = ints(size, "filter size")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("cudnnCreateFilterDescriptor", unsafe {
            dnn::cudnnCreateFilterDescriptor(&mut raw)
        })?;
        let desc = FilterDesc(raw);
        // SAFETY: the descriptor is live; `dims` holds the given count.
        check("cudnnSetFilterNdDescriptor", unsafe {
            dnn::cudnnSetFilterNdDescriptor(raw, dtype, format, int(dims.len() as i64, "rank")?, dims.as_ptr())
        })?;
        Ok(desc)
    }
}

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnDestroyFilterDescriptor(self.0) };
    }
}

/// A cross-correlation descriptor (what PyTorch calls convolution).
#[derive(Debug)]
pub(super) struct ConvDesc(dnn::cudnnConvolutionDescriptor_t);

impl ConvDesc {
    pub(super) fn new(
        padding: &[i64],
        stride: &[i64],
        dilation: &[i64],
        groups: i64,
        compute: DataType,
        math: MathType,
    ) -> Result<ConvDesc, CudaError> {
        let (pad, st, dil) = (
            ints(padding, "padding")?,
            ints(stride, "stride")?,
            ints(dilation, "dilation")?,
        );
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("cudnnCreateConvolutionDescriptor", unsafe {
            dnn::cudnnCreateConvolutionDescriptor(&mut raw)
        })?;
        let desc = ConvDesc(raw);
        // SAFETY: the descriptor is live; the three arrays hold `pad.len()` entries.
        check("cudnnSetConvolutionNdDescriptor", unsafe {
            dnn::cudnnSetConvolutionNdDescriptor(
                raw,
                int(pad.len() as i64, "spatial rank")?,
                pad.as_ptr(),
                st.as_ptr(),
                dil.as_ptr(),
                dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                compute,
            )
        })?;
        // SAFETY: the descriptor is live.
        check("cudnnSetConvolutionGroupCount", unsafe {
            dnn::cudnnSetConvolutionGroupCount(raw, int(groups, "groups")?)
        })?;
        desc.set_math(math)?;
        Ok(desc)
    }

    pub(super) fn set_math(&self, math: MathType) -> Result<(), CudaError> {
        // SAFETY: the descriptor is live.
        check("cudnnSetConvolutionMathType", unsafe {
            dnn::cudnnSetConvolutionMathType(self.0, math)
        })
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnDestroyConvolutionDescriptor(self.0) };
    }
}

/// An algorithm cuDNN's heuristics chose (its math type set on the descriptor) and its workspace.
#[derive(Clone, Copy, Debug)]
pub(super) struct Choice<A> {
    pub(super) algo: A,
    pub(super) workspace: usize,
}

pub(super) type FwdAlgo = dnn::cudnnConvolutionFwdAlgo_t;
pub(super) type BwdDataAlgo = dnn::cudnnConvolutionBwdDataAlgo_t;

/// How many algorithms to ask the heuristics for.
const ALGOS: usize = 8;

/// What a chosen algorithm's math type becomes: `keep` (no TF32 allowed for
/// fp32) overrides the heuristics' choice, as PyTorch's does.
fn math_of(found: MathType, keep: Option<MathType>) -> MathType {
    keep.unwrap_or(found)
}

impl DnnHandle {
    /// The heuristics' first working forward algorithm for these descriptors
    /// (PyTorch's choice with `cudnn.benchmark = False`), and its workspace.
    pub(super) fn forward_algo(
        &self,
        x: &TensorDesc,
        w: &FilterDesc,
        conv: &ConvDesc,
        y: &TensorDesc,
        keep_math: Option<MathType>,
    ) -> Result<Choice<FwdAlgo>, CudaError> {
        self.device.bind()?;
        // SAFETY: an all-zero perf struct is a valid value of this plain C struct.
        let mut perf: [dnn::cudnnConvolutionFwdAlgoPerf_t; ALGOS] = unsafe { std::mem::zeroed() };
        let mut count = 0;
        // SAFETY: every descriptor is live; `perf` holds ALGOS entries.
        check("cudnnGetConvolutionForwardAlgorithm_v7", unsafe {
            dnn::cudnnGetConvolutionForwardAlgorithm_v7(
                self.raw,
                x.0,
                w.0,
                conv.0,
                y.0,
                ALGOS as i32,
                &mut count,
                perf.as_mut_ptr(),
            )
        })?;
        let found = perf
            .iter()
            .take(count.max(0) as usize)
            .find(|p| p.status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
            .ok_or_else(|| CudaError::Dnn {
                call: "cudnnGetConvolutionForwardAlgorithm_v7",
                status: "no algorithm supports this convolution".into(),
            })?;
        let math = math_of(found.mathType, keep_math);
        conv.set_math(math)?;
        let mut workspace = 0usize;
        // SAFETY: every descriptor is live; `workspace` is a valid out-pointer.
        check("cudnnGetConvolutionForwardWorkspaceSize", unsafe {
            dnn::cudnnGetConvolutionForwardWorkspaceSize(self.raw, x.0, w.0, conv.0, y.0, found.algo, &mut workspace)
        })?;
        Ok(Choice {
            algo: found.algo,
            workspace,
        })
    }

    /// The heuristics' first working backward-data algorithm (transposed
    /// convolution), and its workspace.
    pub(super) fn backward_data_algo(
        &self,
        w: &FilterDesc,
        dy: &TensorDesc,
        conv: &ConvDesc,
        dx: &TensorDesc,
        keep_math: Option<MathType>,
    ) -> Result<Choice<BwdDataAlgo>, CudaError> {
        self.device.bind()?;
        // SAFETY: an all-zero perf struct is a valid value of this plain C struct.
        let mut perf: [dnn::cudnnConvolutionBwdDataAlgoPerf_t; ALGOS] = unsafe { std::mem::zeroed() };
        let mut count = 0;
        // SAFETY: every descriptor is live; `perf` holds ALGOS entries.
        check("cudnnGetConvolutionBackwardDataAlgorithm_v7", unsafe {
            dnn::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                self.raw,
                w.0,
                dy.0,
                conv.0,
                dx.0,
                ALGOS as i32,
                &mut count,
                perf.as_mut_ptr(),
            )
        })?;
        let found = perf
            .iter()
            .take(count.max(0) as usize)
            .find(|p| p.status == dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
            .ok_or_else(|| CudaError::Dnn {
                call: "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                status: "no algorithm supports this transposed convolution".into(),
            })?;
        let math = math_of(found.mathType, keep_math);
        conv.set_math(math)?;
        let mut workspace = 0usize;
        // SAFETY: every descriptor is live; `workspace` is a valid out-pointer.
        check("cudnnGetConvolutionBackwardDataWorkspaceSize", unsafe {
            dnn::cudnnGetConvolutionBackwardDataWorkspaceSize(
                self.raw,
                w.0,
                dy.0,
                conv.0,
                dx.0,
                found.algo,
                &mut workspace,
            )
        })?;
        Ok(Choice {
            algo: found.algo,
            workspace,
        })
    }

    /// `y = conv(x, w)` (alpha 1, beta 0).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward(
        &self,
        x: (&TensorDesc, sys::CUdeviceptr),
        w: (&FilterDesc, sys::CUdeviceptr),
        conv: &ConvDesc,
        algo: FwdAlgo,
        workspace: (sys::CUdeviceptr, usize),
        y: (&TensorDesc, sys::CUdeviceptr),
    ) -> Result<(), CudaError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        self.device.bind()?;
        // SAFETY: descriptors are live and describe the live device buffers
        // passed with them (the caller checked their extents); the workspace
        // holds `workspace.1` bytes; alpha/beta are host f32 values, which
        // cuDNN reads before returning (float scaling for all data types
        // except double).
        check("cudnnConvolutionForward", unsafe {
            dnn::cudnnConvolutionForward(
                self.raw,
                (&alpha as *const f32).cast(),
                x.0 .0,
                x.1 as *const c_void,
                w.0 .0,
                w.1 as *const c_void,
                conv.0,
                algo,
                workspace.0 as *mut c_void,
                workspace.1,
                (&beta as *const f32).cast(),
                y.0 .0,
                y.1 as *mut c_void,
            )
        })
    }

    /// `dx = conv_transpose(dy, w)` (alpha 1, beta 0).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward_data(
        &self,
        w: (&FilterDesc, sys::CUdeviceptr),
        dy: (&TensorDesc, sys::CUdeviceptr),
        conv: &ConvDesc,
        algo: BwdDataAlgo,
        workspace: (sys::CUdeviceptr, usize),
        dx: (&TensorDesc, sys::CUdeviceptr),
    ) -> Result<(), CudaError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        self.device.bind()?;
        // SAFETY: as in `forward`.
        check("cudnnConvolutionBackwardData", unsafe {
            dnn::cudnnConvolutionBackwardData(
                self.raw,
                (&alpha as *const f32).cast(),
                w.0 .0,
                w.1 as *const c_void,
                dy.0 .0,
                dy.1 as *const c_void,
                conv.0,
                algo,
                workspace.0 as *mut c_void,
                workspace.1,
                (&beta as *const f32).cast(),
                dx.0 .0,
                dx.1 as *mut c_void,
            )
        })
    }

    /// `c = a + c` with `a` broadcast over `c` (the bias add).
    pub(super) fn add(
        &self,
        a: (&TensorDesc, sys::CUdeviceptr),
        c: (&TensorDesc, sys::CUdeviceptr),
    ) -> Result<(), CudaError> {
        let (alpha, beta) = (1.0f32, 1.0f32);
        self.device.bind()?;
        // SAFETY: descriptors are live and describe the live buffers passed with them.
        check("cudnnAddTensor", unsafe {
            dnn::cudnnAddTensor(
                self.raw,
                (&alpha as *const f32).cast(),
                a.0 .0,
                a.1 as *const c_void,
                (&beta as *const f32).cast(),
                c.0 .0,
                c.1 as *mut c_void,
            )
        })
    }

    /// `y = x` between two layouts of the same sizes.
    pub(super) fn transform(
        &self,
        x: (&TensorDesc, sys::CUdeviceptr),
        y: (&TensorDesc, sys::CUdeviceptr),
    ) -> Result<(), CudaError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        self.device.bind()?;
        // SAFETY: descriptors are live and describe the live buffers passed with them.
        check("cudnnTransformTensor", unsafe {
            dnn::cudnnTransformTensor(
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
