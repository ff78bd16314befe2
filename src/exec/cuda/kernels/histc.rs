//! `aten.histc(self, bins=100, min=0, max=0)` on the device: the kernels of
//! `histc.cu` (its own NVRTC module), as PyTorch's CUDA `histc` computes it
//! (`_histc_cuda`, `SummaryOps.cu`): the bin of `(x - lo) * bins / (hi -
//! lo)`, truncated, as its CPU kernel ([`crate::exec::host`]'s `histc`),
//! but in the CUDA accumulate type and with its own range rules:
//!
//! * it takes the integer types and float32 / float64 (`AT_DISPATCH_ALL_TYPES`;
//!   float16 is PyTorch's error "HalfTensor is not supported"): those go to
//!   the host fallback (`Ok(None)`), as do `out=` calls;
//! * `min` and `max` are read in the accumulate type (`int64` for the
//!   integer types, else the float type) and stored in the input's type;
//!   when they are equal (and the input is not empty) the range is the
//!   data's, read back to the host as PyTorch reads `self.min()` and
//!   `self.max()` (a NaN makes it non-finite); an empty range becomes
//!   `[lo - 1, hi + 1]` in the input's type (wrapping as C++ does for the
//!   narrow integer types); a non-finite range or `max <= min` is an error;
//! * the result is a contiguous `[bins]` tensor of the input's dtype.

use super::{blocks_for, scratch, Arg, Nd, OwnModule};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;

/// These kernels' module (`histc.cu` after the shared `prelude.cuh`).
pub(super) const MODULE: OwnModule = OwnModule {
    name: "histc",
    what: "cuda histc kernels (histc.cu)",
    source: concat!(include_str!("prelude.cuh"), include_str!("histc.cu")),
};

type Args<'c> = crate::exec::op::Args<'c, CudaTensor>;

/// A bound of the range in the input's type: the value the kernel compares
/// with (float types as `f64`, integer types as `i64`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
enum Bound {
    Float(f64),
    Int(i64),
}

/// `v` stored in `dtype` (C++'s conversion to `input_t`: floats rounded,
/// integers wrapped to the type's width).
fn narrow(dtype: DType, v: Bound) -> Bound {
    match (dtype, v) {
        (DType::Float32, Bound::Float(f)) => Bound::Float(f64::from(f as f32)),
        (DType::Int32, Bound::Int(i)) => Bound::Int(i64::from(i as i32)),
        (DType::Int16, Bound::Int(i)) => Bound::Int(i64::from(i as i16)),
        (DType::Int8, Bound::Int(i)) => Bound::Int(i64::from(i as i8)),
        (DType::Uint8, Bound::Int(i)) => Bound::Int(i64::from(i as u8)),
        (_, v) => v,
    }
}

/// A `Scalar` argument in the accumulate type (`Scalar::to<bounds_t>`):
/// rounded to f32 for float32, truncated toward zero for the integer types.
fn scalar_bound(a: &Args<'_>, dtype: DType, i: usize, name: &str) -> Result<Bound, ExecError> {
    let v = a.get(i, name);
    if dtype.is_floating() {
        let f = a.float(i, name, 0.0)?;
        return Ok(narrow(dtype, Bound::Float(f)));
    }
    match v.and_then(Value::as_int) {
        Some(n) => Ok(Bound::Int(n)),
        None => {
            let f = a.float(i, name, 0.0)?;
            if !(f.is_finite() && f.abs() < 9.2e18) {
                return Err(a.err(format!("`{name}` = {f} does not fit the int64 range of {dtype} bounds")));
            }
            // Finite and within the i64 range: `as` truncates toward zero.
            Ok(Bound::Int(f.trunc() as i64))
        }
    }
}

/// The kernel-name suffix of the dtypes PyTorch's CUDA `histc` takes.
fn suffix(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Float32 => "f32",
        DType::Float64 => "f64",
        DType::Int64 => "i64",
        DType::Int32 => "i32",
        DType::Int16 => "i16",
        DType::Int8 => "i8",
        DType::Uint8 => "u8",
        _ => return None,
    })
}

/// `aten.histc` on the device; `Ok(None)` for dtypes PyTorch's CUDA kernel
/// does not take and for `out=`.
pub(super) fn histc(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let a = Args::of(call);
    let x = a.tensor(0, "self")?;
    let dtype = x.spec.dtype;
    let Some(sfx) = suffix(dtype) else {
        return Ok(None);
    };
    let bins = a.int(1, "bins", Some(100))?;
    if bins <= 0 {
        return Err(a.err(format!("bins must be > 0, but got {bins}")));
    }
    let (min, max) = (scalar_bound(&a, dtype, 2, "min")?, scalar_bound(&a, dtype, 3, "max")?);
    let Some(xd) = Nd::new(&x.spec.size, &x.spec.stride) else {
        return Ok(None);
    };
    let n = x.spec.numel();
    let (mut lo, mut hi) = (narrow(dtype, min), narrow(dtype, max));
    if min == max && n > 0 {
        (lo, hi) = data_range(backend, &a, x, xd, sfx, n)?;
    }
    if lo == hi {
        (lo, hi) = match (lo, hi) {
            (Bound::Float(l), Bound::Float(h)) => (Bound::Float(l - 1.0), Bound::Float(h + 1.0)),
            (Bound::Int(l), Bound::Int(h)) => (Bound::Int(l.wrapping_sub(1)), Bound::Int(h.wrapping_add(1))),
            other => other,
        };
        (lo, hi) = (narrow(dtype, lo), narrow(dtype, hi));
    }
    if let (Bound::Float(l), Bound::Float(h)) = (lo, hi) {
        if !(l.is_finite() && h.is_finite()) {
            return Err(a.err(format!("range of [{l}, {h}] is not finite")));
        }
    }
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
        return Err(a.err("max must be larger than min"));
    }
    let spec = TensorSpec::contiguous(dtype, backend.device_of(), &[bins]);
    let out = backend.allocate(&spec)?;
    let count_bytes = bins
        .checked_mul(8)
        .ok_or_else(|| a.err(format!("{bins} bins are too many")))?;
    let counts = scratch(backend, count_bytes)?;
    // `count_bytes` was allocated: it fits a usize.
    backend.zero(counts.ptr, count_bytes as usize)?;
    if n > 0 {
        let bound = |b: Bound| match b {
            Bound::Float(f) if dtype == DType::Float32 => Arg::I32(f32::to_bits(f as f32) as i32),
            Bound::Float(f) => Arg::F64(f),
            Bound::Int(i) => Arg::I64(i),
        };
        MODULE.launch(
            backend,
            &format!("histc_count_{sfx}"),
            blocks_for(n),
            vec![
                Arg::Ptr(x.data_ptr()),
                Arg::Nd(xd),
                Arg::I64(n),
                bound(lo),
                bound(hi),
                Arg::I64(bins),
                Arg::Ptr(counts.ptr),
            ],
        )?;
    }
    MODULE.launch(
        backend,
        &format!("histc_write_{sfx}"),
        blocks_for(bins),
        vec![Arg::Ptr(counts.ptr), Arg::I64(bins), Arg::Ptr(out.data_ptr())],
    )?;
    Ok(Some(Value::Tensor(out)))
}

/// `self.min()` and `self.max()` read back (`n > 0`); NaN when any element is NaN.
fn data_range(
    backend: &mut CudaBackend,
    a: &Args<'_>,
    x: &CudaTensor,
    xd: Nd,
    sfx: &str,
    n: i64,
) -> Result<(Bound, Bound), ExecError> {
    let slots = scratch(backend, 24)?;
    // One block: its threads reduce in shared memory (MINMAX_THREADS = THREADS).
    MODULE.launch(
        backend,
        &format!("histc_minmax_{sfx}"),
        1,
        vec![Arg::Ptr(x.data_ptr()), Arg::Nd(xd), Arg::I64(n), Arg::Ptr(slots.ptr)],
    )?;
    let word = |backend: &mut CudaBackend, i: u64| backend.read_device(slots.ptr + 8 * i, 8);
    let (lo, hi, nan) = (word(backend, 0)?, word(backend, 1)?, word(backend, 2)?);
    if x.spec.dtype.is_floating() {
        if f64::from_le_bytes(nan) != 0.0 {
            return Err(a.err("range of [nan, nan] is not finite"));
        }
        Ok((
            Bound::Float(f64::from_le_bytes(lo)),
            Bound::Float(f64::from_le_bytes(hi)),
        ))
    } else {
        Ok((Bound::Int(i64::from_le_bytes(lo)), Bound::Int(i64::from_le_bytes(hi))))
    }
}
