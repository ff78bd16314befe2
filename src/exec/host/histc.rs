//! `aten.histc(self, bins=100, min=0, max=0)` as PyTorch computes it on
//! the CPU (`histogram_histc_out`, `Histogram.cpp`, and the linear-binning
//! kernel of `cpu/HistogramKernel.cpp`):
//!
//! * the range is `[min, max]`; when `min == max` (and the input is not
//!   empty) it is the data's (`aminmax`, so a NaN makes it non-finite), and
//!   an empty range becomes `[min - 1, max + 1]`; a non-finite range, or
//!   `max <= min`, is an error;
//! * the bins are `linspace(min, max, bins + 1)` in the input's dtype, of
//!   which histc reads the outer edges only (`lo` and `hi` in that dtype):
//!   its kernel bins by linear interpolation without the search of the
//!   inner edges that `torch.histogram` adds (`local_search = false`), so an
//!   element outside `[lo, hi]`, or NaN, is not counted and the others take
//!   the bin `(x - lo) * bins / (hi - lo)`, truncated, in the dtype's
//!   arithmetic (the last bin holds `hi`); an element on an inner edge can
//!   land in the bin below it (`tests/op_layouts.rs` has such cases);
//! * counts are accumulated in the input's dtype, into a contiguous `[bins]`
//!   result of that dtype: exact while a bin holds fewer than 2^24 (float32)
//!   elements; beyond, PyTorch's float counts stop growing per thread, so its
//!   result depends on its thread count.
//!
//! PyTorch's CPU `histc` takes float32, float64, float16 and bfloat16 (an
//! integer input is its error `"histogram_cpu" not implemented`); this
//! backend takes float32 and float64, the dtypes real programs bin
//! (Hugging Face's MoE layers call `histc` on `expert_ids.float()`):
//! float16 and bfloat16 counts stop at 2048 and 256 per thread in PyTorch,
//! so its result for a fuller bin depends on its thread count. The CUDA
//! kernel bins the same way in the accumulate type, and takes integers
//! (`exec::cuda` follows `SummaryOps.cu`).

use super::builtin::{Args, BuiltinOptions};
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

/// The float types the host bins in: ATen's `scalar_t` arithmetic.
trait Bin:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    fn of_f64(v: f64) -> Self;
    /// An index or count as this type (`static_cast<scalar_t>(int64_t)`).
    fn of_index(i: usize) -> Self;
    /// `static_cast<int64_t>`: truncation toward zero.
    fn trunc_i64(self) -> i64;
    fn to_f64(self) -> f64;
}

macro_rules! impl_bin {
    ($t:ty) => {
        impl Bin for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[allow(clippy::unnecessary_cast)]
            fn of_f64(v: f64) -> Self {
                v as $t
            }
            fn of_index(i: usize) -> Self {
                i as $t
            }
            fn trunc_i64(self) -> i64 {
                self as i64
            }
            #[allow(clippy::unnecessary_cast)]
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}

impl_bin!(f32);
impl_bin!(f64);

/// The counts of `values` in `bins` bins over `[lo, hi]` (finite, `lo < hi`).
fn bin_counts<T: Bin>(values: &[T], bins: usize, lo: f64, hi: f64) -> Vec<f64> {
    // The outer edges of `linspace(lo, hi, bins + 1)` in `T`: exactly `lo`
    // and `hi` rounded to `T` (its first and last elements).
    let (first, last) = (T::of_f64(lo), T::of_f64(hi));
    let scale = T::of_index(bins);
    let mut counts = vec![T::ZERO; bins];
    for &x in values {
        // NaN fails both comparisons.
        if !(x >= first && x <= last) {
            continue;
        }
        // Non-negative (x >= first); at most `bins` up to rounding.
        let mut pos = usize::try_from(((x - first) * scale / (last - first)).trunc_i64()).unwrap_or(0);
        // The last bin holds its right edge.
        if pos >= bins {
            pos = bins - 1;
        }
        if let Some(c) = counts.get_mut(pos) {
            *c = *c + T::ONE;
        }
    }
    counts.into_iter().map(Bin::to_f64).collect()
}

/// `[lo, hi]` of the call: `min` / `max`, else the data's range, widened
/// when empty; an error naming the range when it is not finite or not
/// increasing (PyTorch's `histc_select_outer_bin_edges`).
pub(crate) fn histc_range(a: &Args<'_>, min: f64, max: f64, data: Option<(f64, f64)>) -> Result<(f64, f64), ExecError> {
    let (mut lo, mut hi) = (min, max);
    if lo == hi {
        if let Some((dmin, dmax)) = data {
            (lo, hi) = (dmin, dmax);
        }
    }
    if lo == hi {
        (lo, hi) = (lo - 1.0, hi + 1.0);
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return Err(a.err(format!("range of [{lo}, {hi}] is not finite")));
    }
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
        return Err(a.err("max must be larger than min"));
    }
    Ok((lo, hi))
}

/// `aminmax` of `values`: NaN when any is NaN (`None` when empty).
fn data_range(values: &[f64]) -> Option<(f64, f64)> {
    let mut it = values.iter().copied();
    let first = it.next()?;
    Some(it.fold((first, first), |(lo, hi), v| {
        if lo.is_nan() || v.is_nan() {
            (f64::NAN, f64::NAN)
        } else {
            (lo.min(v), hi.max(v))
        }
    }))
}

/// `aten.histc(self, bins=100, min=0, max=0)` on the host.
pub(super) fn histc(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let bins = a.int(1, "bins", Some(100))?;
    let (min, max) = (a.float(2, "min", 0.0)?, a.float(3, "max", 0.0)?);
    let dtype = x.dtype();
    if !matches!(dtype, DType::Float32 | DType::Float64) {
        return Err(a.err(format!(
            "histc on the host takes float32 or float64, got {dtype} (PyTorch's CPU histc takes floating inputs \
             only; its float16 / bfloat16 counts depend on its thread count once a bin is full)"
        )));
    }
    if bins <= 0 {
        return Err(a.err(format!("bins must be > 0, but got {bins}")));
    }
    let n = a.result_elements(&[bins], 8, o.max_alloc_bytes())?;
    let values = x.to_f64_vec()?;
    let (lo, hi) = histc_range(a, min, max, data_range(&values))?;
    let counts = match dtype {
        DType::Float32 => bin_counts::<f32>(&values.iter().map(|v| *v as f32).collect::<Vec<_>>(), n, lo, hi),
        _ => bin_counts::<f64>(&values, n, lo, hi),
    };
    Ok(Value::Tensor(Tensor::from_f64(dtype, &counts, &[bins])?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_bin_holds_its_right_edge_and_outside_values_and_nan_are_dropped() {
        // torch.histc(torch.tensor([0., 1., 2., 3., 3., -1., 4., nan]), bins=4, min=0, max=3)
        //   -> [1., 1., 1., 2.]
        let v = [0.0f32, 1.0, 2.0, 3.0, 3.0, -1.0, 4.0, f32::NAN];
        assert_eq!(bin_counts(&v, 4, 0.0, 3.0), [1.0, 1.0, 1.0, 2.0]);
    }
}
