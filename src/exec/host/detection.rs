//! torchvision's detection ops as its CPU kernels compute them
//! (`torchvision/csrc/ops/cpu/roi_align_kernel.cpp`, `roi_align_common.h`,
//! `nms_kernel.cpp`), so that a detector's second stage and its
//! post-processing give torchvision's values bit for bit:
//!
//! * `torchvision.roi_align(input, rois, spatial_scale, pooled_height,
//!   pooled_width, sampling_ratio, aligned)`: per region, the bilinear
//!   weights and the four pixel positions of every sampling point are
//!   computed once (`pre_calc_for_bilinear_interpolate`) in the input's
//!   dtype, then every channel's bin is the sum over its sampling points of
//!   `w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4`, in that order, divided by the
//!   point count; a point outside `[-1, height] x [-1, width]` (or NaN)
//!   keeps weight 0 on pixel 0, as torchvision's does. The result is a
//!   contiguous `[K, C, pooled_height, pooled_width]` of the input's dtype.
//! * `torchvision.nms(dets, scores, iou_threshold)`: boxes by decreasing
//!   score (ties in index order: a stable sort; torchvision's CPU kernel sorts
//!   unstably, so equal scores may come in another order there), each kept
//!   box suppressing the later ones whose IoU, computed in the boxes' dtype
//!   and compared in `f64`, is above the threshold; the result is the kept
//!   indices, a contiguous int64 `[kept]`.
//!
//! torchvision's CPU `roi_align` takes float32, float64 and float16, its
//! `nms` float32 and float64; this backend takes float32 and float64
//! (float16 `roi_align` rounds every operation to half, which it does not
//! model). What torchvision leaves undefined is an error here: a region
//! whose batch index is outside the input's batch, an input without pixels.

use super::builtin::{Args, BuiltinOptions};
use super::sort::float_order;
use super::tensor::Element;
use crate::exec::op::detection::{nms_threshold, DetectionDevice, RoiAlignCall};
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

/// The float types the kernels compute in: torchvision's `scalar_t` (`T`).
trait Real:
    Element
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const ZERO: Self;
    /// `static_cast<T>(double)` (also `int` and `int64_t` conversions, exact
    /// for the sizes and indices that reach it).
    fn of(v: f64) -> Self;
    fn ceil(self) -> Self;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    fn of(v: f64) -> Self {
        v as f32
    }
    fn ceil(self) -> Self {
        f32::ceil(self)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    fn of(v: f64) -> Self {
        v
    }
    fn ceil(self) -> Self {
        f64::ceil(self)
    }
}

/// `(int)x` of a float: truncation toward zero (C++ leaves an out-of-range
/// value undefined; this saturates, and NaN is 0).
fn to_int<T: Real>(x: T) -> i64 {
    x.to_f64() as i64
}

/// `std::max(a, b)`: `b` when `a < b`, else `a` (NaN in `a` stays).
fn max<T: Real>(a: T, b: T) -> T {
    if a < b {
        b
    } else {
        a
    }
}

/// `std::min(a, b)`: `b` when `b < a`, else `a`.
fn min<T: Real>(a: T, b: T) -> T {
    if b < a {
        b
    } else {
        a
    }
}

/// One axis of a sampling point at `v` in `[-1, size]` on a plane `size`
/// pixels long: its lower and upper pixel and its clamped coordinate
/// (below 0 at 0, past the last pixel on it), as torchvision's
/// `bilinear_interpolate` clamps `y` and `x`.
fn sample_axis<T: Real>(v: T, size: i64) -> (i64, i64, T) {
    let v = if v <= T::ZERO { T::ZERO } else { v };
    let low = to_int(v);
    if low >= size - 1 {
        (size - 1, size - 1, T::of((size - 1) as f64))
    } else {
        (low, low + 1, v)
    }
}

/// One sampling point: the four pixels around it (offsets in a channel's
/// `height * width` plane) and their bilinear weights.
#[derive(Clone, Copy)]
struct Sample<T> {
    pos: [usize; 4],
    w: [T; 4],
}

/// The geometry of one `roi_align` call.
struct Pooling {
    height: usize,
    width: usize,
    pooled_height: usize,
    pooled_width: usize,
    sampling_ratio: i64,
    aligned: bool,
}

/// `pre_calc_for_bilinear_interpolate`: every sampling point of a region,
/// bin by bin (`ph`, `pw`), then grid row and column (`iy`, `ix`).
#[allow(clippy::too_many_arguments)]
fn sampling_points<T: Real>(
    p: &Pooling,
    start_h: T,
    start_w: T,
    bin_h: T,
    bin_w: T,
    grid_h: i64,
    grid_w: i64,
    out: &mut Vec<Sample<T>>,
) {
    out.clear();
    let (height, width) = (p.height as i64, p.width as i64);
    let empty = Sample {
        pos: [0; 4],
        w: [T::ZERO; 4],
    };
    for ph in 0..p.pooled_height {
        for pw in 0..p.pooled_width {
            for iy in 0..grid_h {
                let yy = start_h + T::of(ph as f64) * bin_h + T::of(iy as f64 + 0.5) * bin_h / T::of(grid_h as f64);
                for ix in 0..grid_w {
                    let xx = start_w + T::of(pw as f64) * bin_w + T::of(ix as f64 + 0.5) * bin_w / T::of(grid_w as f64);
                    let (yf, xf) = (yy.to_f64(), xx.to_f64());
                    // Written as "not in range", so that NaN lands here.
                    if !(yf >= -1.0 && yf <= height as f64 && xf >= -1.0 && xf <= width as f64) {
                        out.push(empty);
                        continue;
                    }
                    let (y_low, y_high, y) = sample_axis(yy, height);
                    let (x_low, x_high, x) = sample_axis(xx, width);
                    let ly = y - T::of(y_low as f64);
                    let lx = x - T::of(x_low as f64);
                    // `T hy = 1. - ly`: the difference in double, then rounded to T.
                    let (hy, hx) = (T::of(1.0 - ly.to_f64()), T::of(1.0 - lx.to_f64()));
                    // In [0, height - 1] x [0, width - 1] (y, x >= 0 and clamped above).
                    let at = |r: i64, c: i64| (r * width + c) as usize;
                    out.push(Sample {
                        pos: [
                            at(y_low, x_low),
                            at(y_low, x_high),
                            at(y_high, x_low),
                            at(y_high, x_high),
                        ],
                        w: [hy * hx, hy * lx, ly * hx, ly * lx],
                    });
                }
            }
        }
    }
}

/// `roi_align_forward_kernel_impl` over contiguous `input` `[N, C, H, W]`
/// and `rois` `[K, 5]`, into a contiguous `[K, C, PH, PW]`.
fn roi_align_values<T: Real>(
    a: &Args<'_>,
    input: &[T],
    rois: &[T],
    (batch, channels): (usize, usize),
    spatial_scale: f64,
    p: &Pooling,
    max_alloc: u64,
) -> Result<Vec<T>, ExecError> {
    let plane = p.height * p.width;
    let bins = p.pooled_height * p.pooled_width;
    let mut output = Vec::with_capacity(rois.len() / 5 * channels * bins);
    let scale = T::of(spatial_scale);
    let offset = if p.aligned { T::of(0.5) } else { T::ZERO };
    let (pooled_h, pooled_w) = (T::of(p.pooled_height as f64), T::of(p.pooled_width as f64));
    let mut samples = Vec::new();
    for (n, roi) in rois.chunks_exact(5).enumerate() {
        let batch_index = to_int(roi[0]);
        let image = usize::try_from(batch_index)
            .ok()
            .filter(|&b| b < batch)
            .ok_or_else(|| {
                a.err(format!(
                    "region {n} has batch index {batch_index}, outside the input's batch of {batch}"
                ))
            })?;
        let start_w = roi[1] * scale - offset;
        let start_h = roi[2] * scale - offset;
        let end_w = roi[3] * scale - offset;
        let end_h = roi[4] * scale - offset;
        let (mut roi_w, mut roi_h) = (end_w - start_w, end_h - start_h);
        if !p.aligned {
            // Malformed regions are forced to 1 x 1.
            roi_w = max(roi_w, T::of(1.0));
            roi_h = max(roi_h, T::of(1.0));
        }
        let (bin_h, bin_w) = (roi_h / pooled_h, roi_w / pooled_w);
        let grid = |size: T, pooled: T| {
            if p.sampling_ratio > 0 {
                p.sampling_ratio
            } else {
                to_int((size / pooled).ceil())
            }
        };
        let (grid_h, grid_w) = (grid(roi_h, pooled_h), grid(roi_w, pooled_w));
        // `std::max(roi_bin_grid_h * roi_bin_grid_w, 1)` in int.
        let count = T::of(grid_h.saturating_mul(grid_w).max(1) as f64);
        let points = (grid_h.max(0) as u64)
            .saturating_mul(grid_w.max(0) as u64)
            .saturating_mul(bins as u64);
        crate::Limits::check(
            crate::Limit::AllocBytes,
            points.saturating_mul(std::mem::size_of::<Sample<T>>() as u64),
            max_alloc,
            format!("op `{}`: the {grid_h} x {grid_w} sampling grid of region {n}", a.op),
        )?;
        sampling_points(
            p,
            start_h,
            start_w,
            bin_h,
            bin_w,
            grid_h.max(0),
            grid_w.max(0),
            &mut samples,
        );
        // `grid_h * grid_w` points a bin, bin after bin (none for an empty grid).
        let per_bin = samples.len() / bins.max(1);
        for c in 0..channels {
            let base = (image * channels + c) * plane;
            let pixels = &input[base..base + plane];
            for b in 0..bins {
                let mut value = T::ZERO;
                for s in &samples[b * per_bin..(b + 1) * per_bin] {
                    let [w1, w2, w3, w4] = s.w;
                    let [p1, p2, p3, p4] = s.pos;
                    value = value + (w1 * pixels[p1] + w2 * pixels[p2] + w3 * pixels[p3] + w4 * pixels[p4]);
                }
                output.push(value / count);
            }
        }
    }
    Ok(output)
}

/// `torchvision.roi_align(input, rois, spatial_scale, pooled_height,
/// pooled_width, sampling_ratio, aligned)` on the host.
pub(super) fn roi_align(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let input = a.tensor(0, "input")?;
    let rois = a.tensor(1, "rois")?;
    let call = RoiAlignCall::checked(a, input.spec(), rois.spec(), DetectionDevice::Host)?;
    let RoiAlignCall {
        spatial_scale,
        pooled_height,
        pooled_width,
        aligned,
        shape,
        ..
    } = call;
    let sampling_ratio = i64::from(call.sampling_ratio);
    let n = a.result_elements(&shape, 8, o.max_alloc_bytes())?;
    let [batch, channels, height, width] = [0, 1, 2, 3].map(|d| input.size()[d] as usize);
    if n > 0 {
        call.check_pixels(a, input.spec())?;
    }
    let p = Pooling {
        height,
        width,
        pooled_height: pooled_height as usize,
        pooled_width: pooled_width as usize,
        sampling_ratio,
        aligned,
    };
    let dims = (batch, channels);
    if n == 0 {
        // torchvision returns its empty result before reading a region.
        return Ok(Value::Tensor(Tensor::from_f64(input.dtype(), &[], &shape)?));
    }
    let max_alloc = o.max_alloc_bytes();
    let out = match input.dtype() {
        DType::Float32 => {
            let (x, r) = (input.to_vec::<f32>()?, rois.to_vec::<f32>()?);
            Tensor::from_vec(roi_align_values(a, &x, &r, dims, spatial_scale, &p, max_alloc)?, &shape)?
        }
        _ => {
            let (x, r) = (input.to_vec::<f64>()?, rois.to_vec::<f64>()?);
            Tensor::from_vec(roi_align_values(a, &x, &r, dims, spatial_scale, &p, max_alloc)?, &shape)?
        }
    };
    Ok(Value::Tensor(out))
}

/// `nms_kernel_impl` over `boxes` (`[N, 4]`, row-major) and `scores`: the
/// kept indices in order.
fn nms_keep<T: Real>(boxes: &[T], scores: &[f64], iou_threshold: f64) -> Vec<i64> {
    let corner = |i: usize, k: usize| boxes[i * 4 + k];
    let areas: Vec<T> = (0..scores.len())
        .map(|i| (corner(i, 2) - corner(i, 0)) * (corner(i, 3) - corner(i, 1)))
        .collect();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&p, &q| float_order(scores[p], scores[q]).reverse());
    let mut suppressed = vec![false; scores.len()];
    let mut keep = Vec::new();
    for (at, &i) in order.iter().enumerate() {
        if suppressed[i] {
            continue;
        }
        keep.push(i as i64);
        let (ix1, iy1, ix2, iy2) = (corner(i, 0), corner(i, 1), corner(i, 2), corner(i, 3));
        for &j in &order[at + 1..] {
            if suppressed[j] {
                continue;
            }
            let xx1 = max(ix1, corner(j, 0));
            let yy1 = max(iy1, corner(j, 1));
            let xx2 = min(ix2, corner(j, 2));
            let yy2 = min(iy2, corner(j, 3));
            let w = max(T::ZERO, xx2 - xx1);
            let h = max(T::ZERO, yy2 - yy1);
            let inter = w * h;
            let ovr = inter / (areas[i] + areas[j] - inter);
            if ovr.to_f64() > iou_threshold {
                suppressed[j] = true;
            }
        }
    }
    keep
}

/// `torchvision.nms(dets, scores, iou_threshold)` on the host.
pub(super) fn nms(a: &Args<'_>, _o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let dets = a.tensor(0, "dets")?;
    let scores = a.tensor(1, "scores")?;
    let iou_threshold = nms_threshold(a, dets.spec(), scores.spec(), DetectionDevice::Host)?;
    // Scores compared as f64: exact for both dtypes.
    let score_values = scores.to_f64_vec()?;
    let keep = match dets.dtype() {
        DType::Float32 => nms_keep(&dets.to_vec::<f32>()?, &score_values, iou_threshold),
        _ => nms_keep(&dets.to_vec::<f64>()?, &score_values, iou_threshold),
    };
    let kept = keep.len() as i64;
    Ok(Value::Tensor(Tensor::from_i64(DType::Int64, &keep, &[kept])?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nms_keeps_the_best_box_of_each_overlapping_group() {
        // torchvision.ops.nms(boxes, scores, 0.5) -> tensor([1, 2])
        let boxes = [0.0f32, 0.0, 10.0, 10.0, 1.0, 1.0, 11.0, 11.0, 20.0, 20.0, 30.0, 30.0];
        assert_eq!(nms_keep(&boxes, &[0.8, 0.9, 0.1], 0.5), [1, 2]);
        // IoU 81 / 119 = 0.68: kept above that threshold.
        assert_eq!(nms_keep(&boxes, &[0.8, 0.9, 0.1], 0.7), [1, 0, 2]);
    }
}
