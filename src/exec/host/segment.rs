//! `aten.segment_reduce` (`torch.segment_reduce`): reductions over
//! consecutive segments of one axis, given by `lengths` or `offsets`.
//!
//! Semantics of ATen's kernels (`aten/src/ATen/native/SegmentReduce.cpp`,
//! shared by the CUDA built-in in `exec::cuda::kernels`):
//! * `reduce` is `sum`, `mean`, `max`, `min` or `prod`; `axis` must be the
//!   last dimension of `lengths` / `offsets`, whose leading dimensions are
//!   the data's; the result has the data's shape with `axis` replaced by the
//!   segment count (`lengths.size(axis)`, or `offsets.size(axis) - 1`);
//! * each segment starts from `initial` when given, else the reduction's
//!   identity (`-inf` for max, `inf` for min, 0, 1); `max` / `min`
//!   propagate NaN; a `mean` divides by the segment's length, and an empty
//!   segment's mean is NaN without `initial`;
//! * the accumulator is the data's dtype (every step rounds to it);
//! * with `lengths` and `unsafe=False`, lengths must be non-negative and sum
//!   to the axis' size; offsets are checked to stay within the axis (ATen
//!   does not check them; reading outside the data would be undefined).
//!
//! `indices=` is unsupported, as in ATen.

use super::builtin::{Args, BuiltinOptions};
use super::tensor::checked_numel;
use crate::exec::op;
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

/// A segment reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// `sum`
    Sum,
    /// `mean`
    Mean,
    /// `max`
    Max,
    /// `min`
    Min,
    /// `prod`
    Prod,
}

impl Reduction {
    /// The reduction named `s` (`torch.segment_reduce`'s `reduce`).
    pub fn parse(s: &str) -> Option<Reduction> {
        Some(match s {
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            "prod" => Reduction::Prod,
            _ => return None,
        })
    }

    /// The starting value without `initial`.
    fn identity(self) -> f64 {
        match self {
            Reduction::Sum | Reduction::Mean => 0.0,
            Reduction::Max => f64::NEG_INFINITY,
            Reduction::Min => f64::INFINITY,
            Reduction::Prod => 1.0,
        }
    }
}

/// The segments of one call: the data's shape split around `axis`, and each
/// outer row's segment bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segments {
    /// Product of the data's sizes before `axis`.
    pub outer: usize,
    /// The data's size at `axis`.
    pub len: usize,
    /// Product of the data's sizes after `axis`.
    pub inner: usize,
    /// Segments per outer row.
    pub count: usize,
    /// `[outer][count]` (start, end) along the axis.
    pub bounds: Vec<(usize, usize)>,
}

/// A call's shape: the data split around `axis` and the segment count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// Product of the data's sizes before `axis`.
    pub outer: usize,
    /// The data's size at `axis`.
    pub len: usize,
    /// Product of the data's sizes after `axis`.
    pub inner: usize,
    /// Segments per outer row.
    pub count: usize,
    /// `lengths` / `offsets` entries per outer row.
    pub row: usize,
    /// `axis`, wrapped.
    pub axis: usize,
}

/// The shape checks of ATen's `segment_reduce` on data of shape
/// `data_shape`, `lengths` / `offsets` of shape `seg_shape` and `axis`.
pub fn split(data_shape: &[i64], axis: i64, seg_shape: &[i64], is_offsets: bool) -> Result<Split, String> {
    let rank = data_shape.len() as i64;
    let axis = if axis < 0 { axis + rank } else { axis };
    if axis < 0 || axis >= rank {
        return Err(format!("axis {axis} is out of range for data of {rank} dimensions"));
    }
    let what = if is_offsets { "offsets" } else { "lengths" };
    if seg_shape.len() as i64 != axis + 1 {
        return Err(format!(
            "expected axis to be the last dimension of {what}, got axis {axis} and {what} of shape {seg_shape:?}"
        ));
    }
    let axis = axis as usize;
    if seg_shape[..axis] != data_shape[..axis] {
        return Err(format!(
            "{what} of shape {seg_shape:?} does not match the data's leading sizes {:?}",
            &data_shape[..axis]
        ));
    }
    let size = |s: &[i64]| checked_numel(s).and_then(|n| usize::try_from(n).ok());
    let outer = size(&data_shape[..axis]).ok_or("data shape overflows")?;
    let inner = size(&data_shape[axis + 1..]).ok_or("data shape overflows")?;
    let len = usize::try_from(data_shape[axis]).map_err(|_| "negative data size".to_string())?;
    let row = usize::try_from(seg_shape[axis]).map_err(|_| format!("negative {what} size"))?;
    let count = if is_offsets {
        row.checked_sub(1)
            .ok_or_else(|| "offsets must have at least one entry along the axis".to_string())?
    } else {
        row
    };
    Ok(Split {
        outer,
        len,
        inner,
        count,
        row,
        axis,
    })
}

/// Segments from `lengths` or `offsets` (row-major `i64` values of shape
/// `seg_shape`) for data of shape `data_shape` reduced along `axis`.
pub fn segments(
    data_shape: &[i64],
    axis: i64,
    seg_shape: &[i64],
    values: &[i64],
    is_offsets: bool,
    unsafe_: bool,
) -> Result<Segments, String> {
    let shape = split(data_shape, axis, seg_shape, is_offsets)?;
    let Split { len, count, row, .. } = shape;
    let what = if is_offsets { "offsets" } else { "lengths" };
    let mut bounds = Vec::new();
    bounds
        .try_reserve_exact(shape.outer.saturating_mul(count))
        .map_err(|_| "segment table could not be allocated".to_string())?;
    for o in 0..shape.outer {
        let vals = values
            .get(o * row..(o + 1) * row)
            .ok_or_else(|| format!("{what} has {} values, fewer than its shape {seg_shape:?}", values.len()))?;
        let mut end = if is_offsets {
            vals.first().copied().unwrap_or(0)
        } else {
            0
        };
        for s in 0..count {
            let start = end;
            if is_offsets {
                end = vals[s + 1];
            } else {
                if !unsafe_ && vals[s] < 0 {
                    return Err("lengths contains negative value!".into());
                }
                end = start
                    .checked_add(vals[s])
                    .ok_or_else(|| "lengths overflow".to_string())?;
            }
            let in_axis = |v: i64| usize::try_from(v).ok().filter(|v| *v <= len);
            match (in_axis(start), in_axis(end)) {
                (Some(a), Some(b)) if a <= b => bounds.push((a, b)),
                _ => {
                    return Err(format!(
                        "segment {s} of row {o} spans [{start}, {end}), outside the axis of size {len}"
                    ))
                }
            }
        }
        if !is_offsets && !unsafe_ && usize::try_from(end).ok() != Some(len) {
            return Err(format!(
                "Expected all rows of lengths along axis to sum to data.size({}) = {len} when !unsafe, got {end}",
                shape.axis
            ));
        }
    }
    Ok(Segments {
        outer: shape.outer,
        len,
        inner: shape.inner,
        count,
        bounds,
    })
}

/// Rounds `v` to `dtype` (the accumulator is the data's dtype).
fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::Float32 => v as f32 as f64,
        DType::Float16 => half::f16::from_f64(v).to_f64(),
        DType::Bfloat16 => half::bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// The reduction of row-major `data` over `seg`, as ATen computes it in `dtype`.
pub fn reduce(data: &[f64], seg: &Segments, reduction: Reduction, initial: Option<f64>, dtype: DType) -> Vec<f64> {
    let mut out = Vec::with_capacity(seg.outer.saturating_mul(seg.count).saturating_mul(seg.inner));
    for o in 0..seg.outer {
        for s in 0..seg.count {
            let (start, end) = seg.bounds[o * seg.count + s];
            for i in 0..seg.inner {
                let mut acc = round_to(dtype, initial.unwrap_or(reduction.identity()));
                for j in start..end {
                    let v = data[(o * seg.len + j) * seg.inner + i];
                    acc = match reduction {
                        Reduction::Max if v.is_nan() => v,
                        Reduction::Max => {
                            if acc < v {
                                v
                            } else {
                                acc
                            }
                        }
                        Reduction::Min if v.is_nan() => v,
                        Reduction::Min => {
                            if v < acc {
                                v
                            } else {
                                acc
                            }
                        }
                        Reduction::Sum | Reduction::Mean => round_to(dtype, acc + v),
                        Reduction::Prod => round_to(dtype, acc * v),
                    };
                }
                let n = end - start;
                if reduction == Reduction::Mean {
                    if n == 0 && initial.is_none() {
                        acc = f64::NAN;
                    } else if n > 0 && !acc.is_nan() {
                        acc = round_to(dtype, acc / n as f64);
                    }
                }
                out.push(acc);
            }
        }
    }
    out
}

/// The parsed arguments of one `segment_reduce` call.
pub(crate) struct Call<'t, T> {
    pub(crate) data: &'t T,
    pub(crate) reduction: Reduction,
    /// `offsets` when true, else `lengths`.
    pub(crate) is_offsets: bool,
    pub(crate) segs: &'t T,
    pub(crate) axis: i64,
    pub(crate) unsafe_: bool,
    pub(crate) initial: Option<f64>,
}

/// Reads `segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial)`.
pub(crate) fn parse_call<'t, T>(a: &op::Args<'t, T>) -> Result<Call<'t, T>, ExecError> {
    let data = a.tensor(0, "data")?;
    let reduce = a.string(1, "reduce")?.ok_or_else(|| a.err("missing `reduce`"))?;
    let reduction = Reduction::parse(reduce)
        .ok_or_else(|| a.err(format!("unsupported reduction `{reduce}` (sum, mean, max, min, prod)")))?;
    if a.get(3, "indices").is_some() {
        return Err(a.err("indices based reduction is not supported (as in ATen)"));
    }
    let (is_offsets, segs) = match (a.get(2, "lengths"), a.get(4, "offsets")) {
        (_, Some(_)) => (true, a.tensor(4, "offsets")?),
        (Some(_), None) => (false, a.tensor(2, "lengths")?),
        (None, None) => return Err(a.err("either `lengths` or `offsets` must be given")),
    };
    let axis = a.int(5, "axis", Some(0))?;
    let unsafe_ = a.boolean(6, "unsafe", false)?;
    let initial = match a.get(7, "initial") {
        Some(v) => Some(v.as_float().ok_or_else(|| a.err("`initial` must be a number"))?),
        None => None,
    };
    Ok(Call {
        data,
        reduction,
        is_offsets,
        segs,
        axis,
        unsafe_,
        initial,
    })
}

/// The result shape: the data's with `axis` (wrapped, in range) replaced by `count`.
pub(crate) fn result_shape(data_shape: &[i64], axis: usize, count: usize) -> Vec<i64> {
    let mut shape = data_shape.to_vec();
    if let Some(d) = shape.get_mut(axis) {
        *d = count as i64;
    }
    shape
}

/// The host's `aten.segment_reduce`.
pub(crate) fn segment_reduce(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let call = parse_call(a)?;
    let dtype = call.data.dtype();
    if !matches!(
        dtype,
        DType::Float32 | DType::Float64 | DType::Float16 | DType::Bfloat16
    ) {
        return Err(a.err(format!(
            "data of dtype {dtype}: segment_reduce takes f32, f64, f16, bf16"
        )));
    }
    let seg_values = call.segs.to_i64_vec()?;
    let seg = segments(
        call.data.size(),
        call.axis,
        call.segs.size(),
        &seg_values,
        call.is_offsets,
        call.unsafe_,
    )
    .map_err(|m| a.err(m))?;
    let axis = split(call.data.size(), call.axis, call.segs.size(), call.is_offsets)
        .map_err(|m| a.err(m))?
        .axis;
    let shape = result_shape(call.data.size(), axis, seg.count);
    a.result_elements(&shape, dtype.size_bytes(), o.max_alloc_bytes())?;
    let out = reduce(&call.data.to_f64_vec()?, &seg, call.reduction, call.initial, dtype);
    Ok(Value::Tensor(Tensor::from_f64(dtype, &out, &shape)?))
}
