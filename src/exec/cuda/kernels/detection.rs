//! torchvision's detection ops on the device: the kernels of
//! `detection.cu` (its own NVRTC module), as torchvision's CUDA kernels
//! compute them (`roi_align_kernel.cu`, `nms_kernel.cu`):
//!
//! * `torchvision.roi_align(input, rois, spatial_scale, pooled_height,
//!   pooled_width, sampling_ratio, aligned)`: one thread per output element,
//!   summing its bin's sampling points' bilinear values in grid order, in
//!   the input's dtype; the result is a contiguous `[K, C, pooled_height,
//!   pooled_width]`. torchvision's CPU kernel sums the same terms in the
//!   same order, but the GPU compiler fuses multiply-adds, so the two
//!   devices differ in the last bits.
//! * `torchvision.nms(dets, scores, iou_threshold)`: the scores sorted
//!   descending by the stable sort (`sort.rs`), the boxes gathered in that
//!   order, the IoU mask in 64-box words (the threshold rounded to float, as
//!   torchvision passes it), then the greedy pass in one block on the device
//!   (`gather_keep_from_mask`), writing the kept boxes' indices in score
//!   order; their count is read back (one synchronisation, as `nonzero`'s).
//!   The result is a contiguous int64 `[kept]`.
//!
//! The arguments are checked as the host backend checks them
//! ([`crate::exec::op::detection`]): float32 and float64 (torchvision also
//! takes float16). What torchvision leaves undefined is an error, as on the host:
//! a region whose batch index is outside the input's batch (found by the
//! kernel, reported after it), an input without pixels; and, so that no
//! call runs unboundedly long, a region whose sampling grid has more than
//! [`MAX_GRID_POINTS`] points a bin (an adaptive grid over a region far
//! larger than the feature map).

use super::{blocks_for, scratch, Arg, Nd, OwnModule};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::op::detection::{nms_threshold, DetectionDevice, RoiAlignCall};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;

/// These kernels' module (`detection.cu` after the shared `prelude.cuh`).
pub(super) const MODULE: OwnModule = OwnModule {
    name: "detection",
    what: "cuda detection kernels (detection.cu)",
    source: concat!(include_str!("prelude.cuh"), include_str!("detection.cu")),
};

/// Most sampling points a `roi_align` bin may have (a 256 x 256 grid).
pub const MAX_GRID_POINTS: i64 = 1 << 16;

/// Boxes one word of the IoU mask covers (`NMS_BLOCK` in the source).
const NMS_BLOCK: i64 = 64;

/// `ROI_GRID_TOO_LARGE` in the source (the failure kind's bit).
const ROI_GRID_TOO_LARGE: u64 = 1;

type Args<'c> = crate::exec::op::Args<'c, CudaTensor>;

/// The kernel-name suffix of a dtype the shared checks let through
/// (float32, float64).
fn suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::Float32 => "f32",
        _ => "f64",
    }
}

/// A float scalar as the kernel's `T` parameter (f32 bits, or f64).
fn real_arg(dtype: DType, v: f64) -> Arg {
    match dtype {
        DType::Float32 => Arg::I32(f32::to_bits(v as f32) as i32),
        _ => Arg::F64(v),
    }
}

/// `v` as a C++ `int`, or an error naming it.
fn int32(a: &Args<'_>, name: &str, v: i64) -> Result<i32, ExecError> {
    i32::try_from(v).map_err(|_| a.err(format!("{name} {v} overflows int")))
}

/// `torchvision.roi_align` on the device.
pub(super) fn roi_align(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let a = Args::of(call);
    let input = a.tensor(0, "input")?;
    let rois = a.tensor(1, "rois")?;
    let (x, r) = (&input.spec, &rois.spec);
    let checked = RoiAlignCall::checked(&a, x, r, DetectionDevice::Cuda)?;
    let sfx = suffix(x.dtype);
    let (ph, pw) = (
        int32(&a, "pooled_height", checked.pooled_height)?,
        int32(&a, "pooled_width", checked.pooled_width)?,
    );
    for (d, name) in [(1, "channels"), (2, "height"), (3, "width")] {
        int32(&a, &format!("the input's {name}"), x.size[d])?;
    }
    let regions = r.size[0];
    let shape = checked.shape;
    let total = shape
        .iter()
        .try_fold(1i64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| a.err(format!("the result {shape:?} has more elements than fit in 64 bits")))?;
    let spec = TensorSpec::contiguous(x.dtype, backend.device_of(), &shape);
    let out = backend.allocate(&spec)?;
    if total == 0 {
        // torchvision returns its empty result before reading a region.
        return Ok(Some(Value::Tensor(out)));
    }
    checked.check_pixels(&a, x)?;
    let (Some(xd), Some(rd)) = (Nd::new(&x.size, &x.stride), Nd::new(&r.size, &r.stride)) else {
        return Ok(None);
    };
    let fail = scratch(backend, 8)?;
    backend.zero(fail.ptr, 8)?;
    MODULE.launch(
        backend,
        &format!("roi_align_{sfx}"),
        blocks_for(total),
        vec![
            Arg::Ptr(input.data_ptr()),
            Arg::Nd(xd),
            Arg::Ptr(rois.data_ptr()),
            Arg::Nd(rd),
            real_arg(x.dtype, checked.spatial_scale),
            Arg::I32(ph),
            Arg::I32(pw),
            Arg::I32(checked.sampling_ratio),
            Arg::I32(i32::from(checked.aligned)),
            Arg::I64(MAX_GRID_POINTS),
            Arg::I64(total),
            Arg::Ptr(out.data_ptr()),
            Arg::Ptr(fail.ptr),
        ],
    )?;
    let failed = u64::from_le_bytes(backend.read_device(fail.ptr, 8)?);
    if failed != 0 {
        // The slot holds (regions - n) << 1 | kind for the first failed region n.
        let n = regions - i64::try_from(failed >> 1).unwrap_or(regions);
        if failed & 1 == ROI_GRID_TOO_LARGE {
            return Err(a.err(format!(
                "region {n}'s sampling grid has more than {MAX_GRID_POINTS} points a bin (sampling_ratio \
                 {}, pooled size {} x {})",
                checked.sampling_ratio, checked.pooled_height, checked.pooled_width
            )));
        }
        let at = rois.data_ptr() + u64::try_from(n * r.stride[0]).unwrap_or(0) * x.dtype.size_bytes();
        let bytes = backend.read_device(at, x.dtype.size_bytes() as usize)?;
        let batch_index = match x.dtype {
            DType::Float32 => f64::from(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            _ => f64::from_le_bytes(bytes),
        };
        return Err(a.err(format!(
            "region {n} has batch index {batch_index}, outside the input's batch of {}",
            x.size[0]
        )));
    }
    Ok(Some(Value::Tensor(out)))
}

/// `torchvision.nms` on the device.
pub(super) fn nms(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let a = Args::of(call);
    let dets = a.tensor(0, "dets")?;
    let scores = a.tensor(1, "scores")?;
    let (d, s) = (&dets.spec, &scores.spec);
    let iou_threshold = nms_threshold(&a, d, s, DetectionDevice::Cuda)?;
    let sfx = suffix(d.dtype);
    let n = d.size[0];
    if n == 0 {
        let empty = TensorSpec::contiguous(DType::Int64, backend.device_of(), &[0]);
        return Ok(Some(Value::Tensor(backend.allocate(&empty)?)));
    }
    // torchvision counts the boxes in an `int`.
    int32(&a, "the box count", n)?;
    let Some((_, order)) = super::sort::sorted(backend, &a, scores, Some(0), true)? else {
        return Err(a.err("the scores could not be sorted on the device"));
    };
    let Some(dd) = Nd::new(&d.size, &d.stride) else {
        return Ok(None);
    };
    let sorted_spec = TensorSpec::contiguous(d.dtype, backend.device_of(), &[n, 4]);
    let sorted = backend.allocate(&sorted_spec)?;
    MODULE.launch(
        backend,
        &format!("nms_gather_{sfx}"),
        blocks_for(n * 4),
        vec![
            Arg::Ptr(dets.data_ptr()),
            Arg::Nd(dd),
            Arg::Ptr(order.data_ptr()),
            Arg::I64(n),
            Arg::Ptr(sorted.data_ptr()),
        ],
    )?;
    let col_blocks = (n + NMS_BLOCK - 1) / NMS_BLOCK;
    // n fits an int, so n * col_blocks * 8 < 2^31 * 2^25 * 8 fits an i64.
    let words = n * col_blocks;
    let mask = scratch(backend, words * 8)?;
    MODULE.launch(
        backend,
        &format!("nms_mask_{sfx}"),
        blocks_for(words),
        vec![
            Arg::Ptr(sorted.data_ptr()),
            Arg::I64(n),
            Arg::I64(col_blocks),
            Arg::I32(f32::to_bits(iou_threshold as f32) as i32),
            Arg::Ptr(mask.ptr),
        ],
    )?;
    let removed = scratch(backend, col_blocks * 8)?;
    // `col_blocks * 8` bytes were allocated: it fits a usize.
    backend.zero(removed.ptr, (col_blocks * 8) as usize)?;
    let keep = backend.allocate(&TensorSpec::contiguous(DType::Int64, backend.device_of(), &[n]))?;
    let count = scratch(backend, 8)?;
    MODULE.launch(
        backend,
        "nms_keep",
        1,
        vec![
            Arg::Ptr(mask.ptr),
            Arg::I64(n),
            Arg::I64(col_blocks),
            Arg::Ptr(removed.ptr),
            Arg::Ptr(order.data_ptr()),
            Arg::Ptr(keep.data_ptr()),
            Arg::Ptr(count.ptr),
        ],
    )?;
    let kept = i64::from_le_bytes(backend.read_device(count.ptr, 8)?);
    if !(0..=n).contains(&kept) {
        return Err(a.err(format!("the device kept {kept} of {n} boxes")));
    }
    Ok(Some(Value::Tensor(backend.view(&keep, &[kept], &[1], 0)?)))
}
