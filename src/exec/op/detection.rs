//! The argument checks of torchvision's detection ops (`torchvision.roi_align`,
//! `torchvision.nms`), shared by every backend: torchvision's own checks in
//! its words (shapes, the two tensors' common dtype), then the dtypes the
//! backends compute in (float32 and float64), and what this crate adds where
//! torchvision leaves a call undefined (a negative pooled size, a sampling
//! ratio past `int`, an input without pixels to pool).

use super::Args;
use crate::exec::{ExecError, TensorSpec};
use crate::ir::DType;

/// The backend a check speaks for (its dtype error names it and what
/// torchvision's kernel for that device takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DetectionDevice {
    Host,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's ops check with it
    Cuda,
}

impl DetectionDevice {
    /// Who runs the op, and torchvision's kernel on this device.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            DetectionDevice::Host => ("the host", "CPU kernel"),
            DetectionDevice::Cuda => ("the cuda backend", "CUDA kernel"),
        }
    }
}

/// torchvision's check that the op's two tensors share a dtype, then the
/// dtypes the backends compute these ops in, or an error naming the argument.
fn float_dtypes<T>(
    a: &Args<'_, T>,
    (name, dtype): (&str, DType),
    (other_name, other): (&str, DType),
    device: DetectionDevice,
    torchvision_takes: &str,
) -> Result<(), ExecError> {
    if dtype != other {
        return Err(a.err(format!(
            "{name} should have the same type as {other_name} ({dtype} and {other})"
        )));
    }
    if matches!(dtype, DType::Float32 | DType::Float64) {
        return Ok(());
    }
    let (runs, kernel) = device.names();
    Err(a.err(format!(
        "`{name}` is {dtype}: {runs} runs this op in float32 or float64 (torchvision's {kernel} takes \
         {torchvision_takes})"
    )))
}

/// A `torchvision.roi_align(input, rois, spatial_scale, pooled_height,
/// pooled_width, sampling_ratio, aligned)` call's scalar arguments, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RoiAlignCall {
    pub(crate) spatial_scale: f64,
    /// At least 0.
    pub(crate) pooled_height: i64,
    /// At least 0.
    pub(crate) pooled_width: i64,
    /// torchvision's kernels take an `int`.
    pub(crate) sampling_ratio: i32,
    pub(crate) aligned: bool,
    /// The result's sizes, `[K, C, pooled_height, pooled_width]` (a
    /// contiguous tensor of the input's dtype).
    pub(crate) shape: [i64; 4],
}

impl RoiAlignCall {
    /// The checks of a `roi_align` call whose tensors are laid out by
    /// `input` and `rois`. Whether the input has pixels to pool is
    /// [`RoiAlignCall::check_pixels`], once the result is known not empty.
    pub(crate) fn checked<T>(
        a: &Args<'_, T>,
        input: &TensorSpec,
        rois: &TensorSpec,
        device: DetectionDevice,
    ) -> Result<RoiAlignCall, ExecError> {
        let spatial_scale = a.float(2, "spatial_scale", 1.0)?;
        let pooled_height = a.int(3, "pooled_height", None)?;
        let pooled_width = a.int(4, "pooled_width", None)?;
        let sampling_ratio = a.int(5, "sampling_ratio", Some(-1))?;
        let aligned = a.boolean(6, "aligned", false)?;
        if input.size.len() != 4 {
            return Err(a.err(format!("`input` must be [N, C, H, W], got {:?}", input.size)));
        }
        if rois.size.len() != 2 || rois.size[1] != 5 {
            return Err(a.err(format!("rois must have shape as Tensor[K, 5], got {:?}", rois.size)));
        }
        float_dtypes(
            a,
            ("input", input.dtype),
            ("rois", rois.dtype),
            device,
            "float32, float64 and float16",
        )?;
        if pooled_height < 0 || pooled_width < 0 {
            return Err(a.err(format!("the pooled size {pooled_height} x {pooled_width} is negative")));
        }
        let sampling_ratio = i32::try_from(sampling_ratio)
            .map_err(|_| a.err(format!("sampling_ratio {sampling_ratio} overflows int")))?;
        Ok(RoiAlignCall {
            spatial_scale,
            pooled_height,
            pooled_width,
            sampling_ratio,
            aligned,
            shape: [rois.size[0], input.size[1], pooled_height, pooled_width],
        })
    }

    /// An input `[N, C, H, W]` without pixels (`H * W == 0`) has nothing to
    /// pool a region from: an error (torchvision reads outside it).
    pub(crate) fn check_pixels<T>(&self, a: &Args<'_, T>, input: &TensorSpec) -> Result<(), ExecError> {
        if input.size[2] == 0 || input.size[3] == 0 {
            return Err(a.err(format!("`input` {:?} has no pixels to pool", input.size)));
        }
        Ok(())
    }
}

/// The checks of a `torchvision.nms(dets, scores, iou_threshold)` call
/// whose tensors are laid out by `dets` and `scores`: the threshold.
pub(crate) fn nms_threshold<T>(
    a: &Args<'_, T>,
    dets: &TensorSpec,
    scores: &TensorSpec,
    device: DetectionDevice,
) -> Result<f64, ExecError> {
    let iou_threshold = a.float(2, "iou_threshold", 0.0)?;
    if dets.size.len() != 2 {
        return Err(a.err(format!("boxes should be a 2d tensor, got {}D", dets.size.len())));
    }
    if dets.size[1] != 4 {
        return Err(a.err(format!(
            "boxes should have 4 elements in dimension 1, got {}",
            dets.size[1]
        )));
    }
    if scores.size.len() != 1 {
        return Err(a.err(format!("scores should be a 1d tensor, got {}D", scores.size.len())));
    }
    if dets.size[0] != scores.size[0] {
        return Err(a.err(format!(
            "boxes and scores should have same number of elements in dimension 0, got {} and {}",
            dets.size[0], scores.size[0]
        )));
    }
    let takes = match device {
        DetectionDevice::Host => "float32 and float64",
        DetectionDevice::Cuda => "float32, float64 and float16",
    };
    float_dtypes(a, ("dets", dets.dtype), ("scores", scores.dtype), device, takes)?;
    Ok(iou_threshold)
}
