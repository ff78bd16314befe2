//! Host tensors: typed storage shared by strided views.

use crate::exec::{ExecError, MemoryStats, TensorSpec};
use crate::ir::{DType, Device};
use half::{bf16, f16};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

mod fp8;
mod owned;
mod raw;
pub use fp8::{F8E4m3fn, F8E5m2};
pub use owned::OwnedStorage;
pub(crate) use raw::RawView;

/// Typed element storage (not re-exported: reachable only through [`Element`]'s sealed supertrait).
#[derive(Clone, Debug)]
#[allow(missing_docs)]
pub enum Data {
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    F8E4M3(Vec<F8E4m3fn>),
    F8E5M2(Vec<F8E5m2>),
}

/// Counts live and peak bytes of storages that report to it, and holds the
/// memory limits a backend's allocations must stay within.
///
/// The counts are atomics, not a mutex: a backend's allocate/free path is
/// hot (the meta backend runs a plan's allocations at a few ns each) and the
/// counter is uncontended there; the values are the same as under a lock.
#[derive(Debug)]
pub(crate) struct MemCounter {
    current: AtomicU64,
    peak: AtomicU64,
    max_alloc: u64,
    max_run: u64,
}

impl Default for MemCounter {
    fn default() -> Self {
        MemCounter::with_limits(&crate::Limits::default())
    }
}

impl MemCounter {
    /// A counter enforcing `limits`' memory limits.
    pub(crate) fn with_limits(limits: &crate::Limits) -> Self {
        MemCounter {
            current: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            max_alloc: limits.max_alloc_bytes,
            max_run: limits.max_run_bytes,
        }
    }

    /// Counts `bytes` when one allocation of that size and the run's new total
    /// stay within the limits; else an error naming the limit and `what`.
    pub(crate) fn reserve(&self, bytes: u64, what: &dyn Fn() -> String) -> Result<(), ExecError> {
        // The message is built only on failure: the meta backend's hot path allocates nothing.
        if bytes > self.max_alloc {
            crate::Limits::check(crate::Limit::AllocBytes, bytes, self.max_alloc, what())?;
        }
        let mut current = self.current.load(Ordering::Relaxed);
        loop {
            let total = current.saturating_add(bytes);
            if total > self.max_run {
                crate::Limits::check(
                    crate::Limit::RunBytes,
                    total,
                    self.max_run,
                    format!("{} (live bytes of the run)", what()),
                )?;
            }
            match self
                .current
                .compare_exchange_weak(current, total, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.raise_peak(total);
                    return Ok(());
                }
                Err(now) => current = now,
            }
        }
    }

    /// `peak = max(peak, total)`, without a write when the peak is already higher.
    #[inline]
    fn raise_peak(&self, total: u64) {
        if self.peak.load(Ordering::Relaxed) < total {
            self.peak.fetch_max(total, Ordering::Relaxed);
        }
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn add(&self, bytes: u64) {
        let mut current = self.current.load(Ordering::Relaxed);
        loop {
            let total = current.saturating_add(bytes);
            match self
                .current
                .compare_exchange_weak(current, total, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return self.raise_peak(total),
                Err(now) => current = now,
            }
        }
    }

    pub(crate) fn sub(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        // The closure always returns `Some`: the update cannot fail.
        let _ = self
            .current
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c.saturating_sub(bytes)));
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        MemoryStats {
            current_bytes: self.current.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
        }
    }
}

/// Storage bytes reported to a counter for as long as the storage lives.
#[derive(Debug)]
pub(crate) struct Accounted {
    pub(crate) bytes: u64,
    pub(crate) counter: Option<Arc<MemCounter>>,
}

impl Drop for Accounted {
    fn drop(&mut self) {
        if let Some(c) = &self.counter {
            c.sub(self.bytes);
        }
    }
}

#[derive(Debug)]
struct Storage {
    data: RwLock<Data>,
    _accounted: Accounted,
}

mod sealed {
    /// Access to the typed storage (implemented only in this module).
    pub trait Storable: Sized {
        fn slice(d: &super::Data) -> Option<&[Self]>;
        fn slice_mut(d: &mut super::Data) -> Option<&mut [Self]>;
        fn wrap(v: Vec<Self>) -> super::Data;
    }
}
use sealed::Storable;

/// An element type of host tensors (sealed: the dtypes wrapir stores).
pub trait Element: Storable + Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// The dtype.
    const DTYPE: DType;
    /// Conversion to `f64`.
    fn to_f64(self) -> f64;
    /// Conversion from `f64` (integers saturate; NaN becomes 0).
    fn from_f64(v: f64) -> Self;
    /// Conversion to `i64` (floats truncate).
    fn to_i64(self) -> i64;
    /// Conversion from `i64` (wrapping for narrow integers, as torch casts).
    fn from_i64(v: i64) -> Self;
}

macro_rules! element {
    ($t:ty, $dtype:ident, $variant:ident, $to_f:expr, $from_f:expr, $to_i:expr, $from_i:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            fn to_f64(self) -> f64 {
                ($to_f)(self)
            }
            fn from_f64(v: f64) -> Self {
                ($from_f)(v)
            }
            fn to_i64(self) -> i64 {
                ($to_i)(self)
            }
            fn from_i64(v: i64) -> Self {
                ($from_i)(v)
            }
        }
        impl Storable for $t {
            fn slice(d: &Data) -> Option<&[Self]> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(d: &mut Data) -> Option<&mut [Self]> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn wrap(v: Vec<Self>) -> Data {
                Data::$variant(v)
            }
        }
    };
}

element!(
    bool,
    Bool,
    Bool,
    |x: bool| x as i64 as f64,
    |v: f64| v != 0.0,
    |x: bool| x as i64,
    |v: i64| v != 0
);

/// An element type whose conversions are Rust's `as` casts (integers wrap,
/// floats truncate and saturate, as torch's casts do).
macro_rules! primitive_element {
    ($($t:ty, $dtype:ident, $variant:ident;)*) => {
        $(element!(
            $t,
            $dtype,
            $variant,
            |x: $t| x as f64,
            |v: f64| v as $t,
            |x: $t| x as i64,
            |v: i64| v as $t
        );)*
    };
}

primitive_element!(
    u8, Uint8, U8;
    i8, Int8, I8;
    i16, Int16, I16;
    i32, Int32, I32;
    i64, Int64, I64;
    f32, Float32, F32;
    f64, Float64, F64;
);

/// A floating element type stored in fewer bits than `f32` (`half`'s `f16`
/// and `bf16`, [`fp8`]'s): conversions through `f64`.
macro_rules! narrow_float_element {
    ($($t:ty, $dtype:ident, $variant:ident;)*) => {
        $(element!(
            $t,
            $dtype,
            $variant,
            |x: $t| x.to_f64(),
            <$t>::from_f64,
            |x: $t| x.to_f64() as i64,
            |v: i64| <$t>::from_f64(v as f64)
        );)*
    };
}

narrow_float_element!(
    f16, Float16, F16;
    bf16, Bfloat16, BF16;
    F8E4m3fn, Float8E4m3fn, F8E4M3;
    F8E5m2, Float8E5m2, F8E5M2;
);

/// Runs `$body` with `$T` bound to the element type of `$dtype`, or evaluates
/// `$other` for dtypes the host backend does not store (complex, the fnuz fp8 kinds).
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr, $other:expr) => {
        $crate::exec::host::tensor::with_dtype!(@arms $dtype, $T, $body, $other;
            Bool => bool,
            Uint8 => u8,
            Int8 => i8,
            Int16 => i16,
            Int32 => i32,
            Int64 => i64,
            Float16 => half::f16,
            Bfloat16 => half::bf16,
            Float32 => f32,
            Float64 => f64,
            Float8E4m3fn => $crate::exec::host::tensor::F8E4m3fn,
            Float8E5m2 => $crate::exec::host::tensor::F8E5m2,
        )
    };
    (@arms $dtype:expr, $T:ident, $body:expr, $other:expr; $($variant:ident => $ty:ty,)*) => {
        match $dtype {
            $(crate::ir::DType::$variant => {
                type $T = $ty;
                $body
            })*
            _ => $other,
        }
    };
}
pub(crate) use with_dtype;

/// Evaluates `$body` with `$v` bound to the elements a [`Data`] (or a
/// reference to one) holds, whichever type they have: one home for the
/// storage types' list where code is the same for every type.
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::exec::host::tensor::Data::Bool($v) => $body,
            $crate::exec::host::tensor::Data::U8($v) => $body,
            $crate::exec::host::tensor::Data::I8($v) => $body,
            $crate::exec::host::tensor::Data::I16($v) => $body,
            $crate::exec::host::tensor::Data::I32($v) => $body,
            $crate::exec::host::tensor::Data::I64($v) => $body,
            $crate::exec::host::tensor::Data::F16($v) => $body,
            $crate::exec::host::tensor::Data::BF16($v) => $body,
            $crate::exec::host::tensor::Data::F32($v) => $body,
            $crate::exec::host::tensor::Data::F64($v) => $body,
            $crate::exec::host::tensor::Data::F8E4M3($v) => $body,
            $crate::exec::host::tensor::Data::F8E5M2($v) => $body,
        }
    };
}
pub(crate) use with_data;

/// A strided tensor in host memory. Clones share storage (like torch views).
#[derive(Clone, Debug)]
pub struct Tensor {
    storage: Arc<Storage>,
    spec: TensorSpec,
}

/// The bytes of a slice of plain numeric elements.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn element_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: the storage's element types (bool, integers, f16, bf16, f32,
    // f64) have no padding and no invalid bytes to read; the slice covers
    // exactly the elements' memory and lives as long as `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

impl Tensor {
    /// Calls `f` with the whole storage (not only the view) as
    /// little-endian bytes, as a device copy of it would hold them; `None` on
    /// a big-endian host, where the bytes would need converting.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_storage_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, ExecError> {
        if cfg!(target_endian = "big") {
            return Ok(None);
        }
        let data = self
            .storage
            .data
            .read()
            .map_err(|_| ExecError::Input("tensor storage poisoned by a panic".into()))?;
        let bytes = with_data!(&*data, v => element_bytes(v));
        Ok(Some(f(bytes)))
    }
}

pub(crate) use crate::exec::{checked_numel, storage_elements};

/// `n` copies of `v` for an op's result, or an error naming `what` when the
/// bytes exceed `max` (the one-allocation limit) or cannot be had (never an abort).
pub(crate) fn filled<T: Clone>(n: usize, v: T, max: u64, what: &dyn Fn() -> String) -> Result<Vec<T>, ExecError> {
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    crate::Limits::check(crate::Limit::AllocBytes, bytes, max, what())?;
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| ExecError::Unsupported(format!("{}: {bytes} bytes could not be allocated", what())))?;
    out.resize(n, v);
    Ok(out)
}

/// `n` zeroed elements, or `too_large()` when the memory cannot be had
/// (never an abort).
fn zeroed<T: Element>(n: usize, too_large: impl FnOnce() -> ExecError) -> Result<Vec<T>, ExecError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_large())?;
    v.resize(n, T::from_i64(0));
    Ok(v)
}

fn unsupported_dtype(d: DType) -> ExecError {
    if d.is_complex() {
        return ExecError::Type(format!(
            "a {d} tensor has no real elements (its parts are read through view_as_real)"
        ));
    }
    ExecError::Unsupported(format!("host tensors do not store dtype {d}"))
}

impl Tensor {
    /// A tensor over `data`, whose `bytes` are already counted in `counter`.
    fn with_storage(data: Data, bytes: u64, counter: Option<Arc<MemCounter>>, spec: TensorSpec) -> Tensor {
        Tensor {
            storage: Arc::new(Storage {
                data: RwLock::new(data),
                _accounted: Accounted { bytes, counter },
            }),
            spec,
        }
    }

    /// A zero-filled tensor with this layout (within the default memory limits).
    pub fn zeros_like_spec(spec: &TensorSpec) -> Result<Tensor, ExecError> {
        Self::allocate(spec, Some(Arc::new(MemCounter::default())))
    }

    pub(crate) fn allocate(spec: &TensorSpec, counter: Option<Arc<MemCounter>>) -> Result<Tensor, ExecError> {
        if spec.size.len() != spec.stride.len() {
            return Err(ExecError::Input(format!(
                "{} sizes but {} strides",
                spec.size.len(),
                spec.stride.len()
            )));
        }
        let n = storage_elements(spec)?;
        let what = || format!("allocating {} {:?} strides {:?}", spec.dtype, spec.size, spec.stride);
        let bytes = (n as u64).checked_mul(spec.dtype.size_bytes()).unwrap_or(u64::MAX);
        if let Some(c) = &counter {
            c.reserve(bytes, &what)?;
        }
        // A complex tensor stores its parts: two elements of the part dtype per element.
        let too_large = || ExecError::Unsupported(format!("{}: {bytes} bytes could not be allocated", what()));
        let data = match n.checked_mul(lanes(spec.dtype)) {
            Some(parts) => {
                with_dtype!(storage_dtype(spec.dtype), T => zeroed::<T>(parts, &too_large).map(T::wrap), Err(unsupported_dtype(spec.dtype)))
            }
            None => Err(too_large()),
        };
        let data = match data {
            Ok(d) => d,
            Err(e) => {
                if let Some(c) = &counter {
                    c.sub(bytes);
                }
                return Err(e);
            }
        };
        Ok(Self::with_storage(data, bytes, counter, spec.clone()))
    }

    /// A contiguous tensor on the CPU from row-major data.
    pub fn from_vec<T: Element>(data: Vec<T>, size: &[i64]) -> Result<Tensor, ExecError> {
        let numel = checked_numel(size);
        if numel.and_then(|n| usize::try_from(n).ok()) != Some(data.len()) {
            return Err(ExecError::Input(format!(
                "{} elements do not fill shape {size:?}",
                data.len()
            )));
        }
        let spec = TensorSpec::contiguous(T::DTYPE, Device::cpu(), size);
        let bytes = data.len() as u64 * T::DTYPE.size_bytes();
        Ok(Self::with_storage(T::wrap(data), bytes, None, spec))
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        let spec = TensorSpec::contiguous(T::DTYPE, Device::cpu(), &[]);
        Self::with_storage(T::wrap(vec![v]), T::DTYPE.size_bytes(), None, spec)
    }

    /// A tensor of `dtype` from `f64` values (converted like `Element::from_f64`).
    pub fn from_f64(dtype: DType, data: &[f64], size: &[i64]) -> Result<Tensor, ExecError> {
        with_dtype!(dtype, T => Tensor::from_vec(data.iter().map(|v| T::from_f64(*v)).collect::<Vec<T>>(), size), Err(unsupported_dtype(dtype)))
    }

    /// A tensor of `dtype` from `i64` values.
    pub fn from_i64(dtype: DType, data: &[i64], size: &[i64]) -> Result<Tensor, ExecError> {
        with_dtype!(dtype, T => Tensor::from_vec(data.iter().map(|v| T::from_i64(*v)).collect::<Vec<T>>(), size), Err(unsupported_dtype(dtype)))
    }

    /// The layout.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.spec.dtype
    }

    /// Sizes.
    pub fn size(&self) -> &[i64] {
        &self.spec.size
    }

    /// Strides.
    pub fn stride(&self) -> &[i64] {
        &self.spec.stride
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Construction checks the layout against its storage, so the product fits.
        checked_numel(&self.spec.size)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.spec.size.len()
    }

    /// Storage length in elements of the tensor's dtype (a complex element
    /// is two stored parts).
    fn storage_len(&self) -> usize {
        let d = self.storage.data.read().map(|d| data_len(&d)).unwrap_or(0);
        d / lanes(self.spec.dtype)
    }

    /// `torch.view_as_real`: a complex tensor's parts as a view of the same
    /// storage ([`TensorSpec::as_real`]).
    pub fn view_as_real(&self) -> Result<Tensor, ExecError> {
        self.aliased(self.spec.as_real()?)
    }

    /// `torch.view_as_complex`: a real tensor with a last dimension of 2
    /// as a complex view of the same storage ([`TensorSpec::as_complex`]).
    pub fn view_as_complex(&self) -> Result<Tensor, ExecError> {
        self.aliased(self.spec.as_complex()?)
    }

    /// `spec` over this tensor's storage, whose stored dtype must be `spec`'s
    /// (the part dtype for a complex `spec`); checked against its bounds.
    fn aliased(&self, spec: TensorSpec) -> Result<Tensor, ExecError> {
        if storage_dtype(spec.dtype) != storage_dtype(self.spec.dtype) {
            return Err(ExecError::Type(format!(
                "a {} view of {} storage",
                spec.dtype, self.spec.dtype
            )));
        }
        let t = Tensor {
            storage: Arc::clone(&self.storage),
            spec,
        };
        check_bounds(&t.spec, t.storage_len())?;
        Ok(t)
    }

    /// `aten.view.dtype`: the same storage read as `dtype`. Between a
    /// complex dtype and its part dtype the view aliases (PyTorch's rule for
    /// element sizes that differ: the last dimension, of stride 1, scales by
    /// the size ratio and the other strides and the offset by its inverse);
    /// equal dtypes give the tensor itself. Other reinterpretations are an
    /// error (host storage is typed).
    pub fn view_dtype(&self, dtype: DType) -> Result<Tensor, ExecError> {
        let from = self.dtype();
        if from == dtype {
            return Ok(self.clone());
        }
        let last_unit = |t: &Tensor| t.stride().last() == Some(&1) || t.dim() == 0;
        if from.complex_part() == Some(dtype) && last_unit(self) && self.dim() > 0 {
            // c64 [.., n] -> f32 [.., 2n]
            let r = self.view_as_real()?;
            let rank = self.dim();
            let mut size = r.size()[..rank].to_vec();
            let mut stride = r.stride()[..rank].to_vec();
            size[rank - 1] = size[rank - 1]
                .checked_mul(2)
                .ok_or_else(|| ExecError::Input("view(dtype): size overflows".into()))?;
            stride[rank - 1] = 1;
            return r.view(&size, &stride, r.spec.offset);
        }
        if dtype.complex_part() == Some(from) && last_unit(self) && self.dim() > 0 {
            // f32 [.., 2n] -> c64 [.., n]
            let rank = self.dim();
            let last = self.size()[rank - 1];
            if last % 2 != 0 {
                return Err(ExecError::Type(format!(
                    "view({dtype}) of {from} needs an even last dimension, got sizes {:?}",
                    self.size()
                )));
            }
            let mut size = self.size().to_vec();
            size[rank - 1] = last / 2;
            size.push(2);
            let mut stride = self.stride().to_vec();
            stride.push(1);
            stride[rank - 1] = 2;
            return self.view(&size, &stride, self.spec.offset)?.view_as_complex();
        }
        Err(ExecError::Unsupported(format!(
            "view({dtype}) of a {from} tensor: host tensors reinterpret only between a complex dtype and its parts"
        )))
    }

    /// The elements of a complex tensor in row-major order, as `(real,
    /// imaginary)` pairs converted to `f64`.
    pub fn to_complex_vec(&self) -> Result<Vec<(f64, f64)>, ExecError> {
        let parts = self.view_as_real()?.to_f64_vec()?;
        Ok(parts.chunks_exact(2).map(|p| (p[0], p[1])).collect())
    }

    /// A contiguous complex tensor of `dtype` from `(real, imaginary)` pairs.
    pub fn from_complex(dtype: DType, data: &[(f64, f64)], size: &[i64]) -> Result<Tensor, ExecError> {
        let part = dtype
            .complex_part()
            .ok_or_else(|| ExecError::Type(format!("{dtype} is not a complex dtype")))?;
        let flat: Vec<f64> = data.iter().flat_map(|(re, im)| [*re, *im]).collect();
        let mut real_size = size.to_vec();
        real_size.push(2);
        Tensor::from_f64(part, &flat, &real_size)?.view_as_complex()
    }

    /// Whether `self` and `other` are views of one storage.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn same_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// A view of the same storage; checked against the storage bounds.
    pub fn view(&self, size: &[i64], stride: &[i64], offset: i64) -> Result<Tensor, ExecError> {
        let spec = TensorSpec {
            dtype: self.spec.dtype,
            device: self.spec.device,
            size: size.to_vec(),
            stride: stride.to_vec(),
            offset,
        };
        check_bounds(&spec, self.storage_len())?;
        Ok(Tensor {
            storage: Arc::clone(&self.storage),
            spec,
        })
    }

    /// This tensor broadcast to `shape` (stride 0 on expanded dimensions).
    pub(crate) fn expand(&self, shape: &[i64]) -> Result<Tensor, ExecError> {
        let extra = shape
            .len()
            .checked_sub(self.dim())
            .ok_or_else(|| ExecError::Type(format!("cannot broadcast shape {:?} to {shape:?}", self.size())))?;
        let mut stride = vec![0i64; shape.len()];
        for (i, (s, st)) in self.size().iter().zip(self.stride()).enumerate() {
            let target = shape[extra + i];
            if *s == target {
                stride[extra + i] = *st;
            } else if *s != 1 {
                return Err(ExecError::Type(format!(
                    "cannot broadcast shape {:?} to {shape:?}",
                    self.size()
                )));
            }
        }
        Ok(Tensor {
            storage: Arc::clone(&self.storage),
            spec: TensorSpec {
                size: shape.to_vec(),
                stride,
                ..self.spec.clone()
            },
        })
    }

    /// Storage index of every element, in row-major logical order; an error
    /// when one falls outside the storage (a negative stride or offset).
    pub(crate) fn element_offsets(&self) -> Result<Vec<usize>, ExecError> {
        let n = self.numel();
        let len = self.storage_len();
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|_| ExecError::Unsupported(format!("{n} element offsets could not be allocated")))?;
        if n == 0 {
            return Ok(out);
        }
        let rank = self.dim();
        let bad = || {
            ExecError::Input(format!(
                "layout {:?} / {:?} + {} reaches outside its storage of {len} elements",
                self.spec.size, self.spec.stride, self.spec.offset
            ))
        };
        // The lowest and highest offsets the layout reaches (its corner
        // elements), checked once: every element's offset lies between them.
        let (size, stride) = (&self.spec.size, &self.spec.stride);
        let (mut lo, mut hi) = (i128::from(self.spec.offset), i128::from(self.spec.offset));
        for d in 0..rank {
            let reach = i128::from(size[d] - 1) * i128::from(stride[d]);
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        if lo < 0 || hi >= len as i128 {
            return Err(bad());
        }
        // Walked in row-major order: a step of index `d` moves the offset by
        // its stride, a wrap back by `(size - 1) * stride` (both within
        // `lo..=hi`, so no arithmetic overflows).
        let mut idx = vec![0i64; rank];
        let mut off = self.spec.offset;
        for _ in 0..n {
            // In `lo..=hi`, checked above: non-negative and below `len`.
            out.push(off as usize);
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < size[d] {
                    off += stride[d];
                    break;
                }
                idx[d] = 0;
                off -= (size[d] - 1) * stride[d];
            }
        }
        Ok(out)
    }

    /// The elements in row-major order, as `T` (which must be the dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, ExecError> {
        self.not_complex(T::DTYPE)?;
        let offsets = if self.is_contiguous() {
            None
        } else {
            Some(self.element_offsets()?)
        };
        let data = self
            .storage
            .data
            .read()
            .map_err(|_| ExecError::Unsupported("poisoned storage".into()))?;
        let s = T::slice(&data)
            .ok_or_else(|| ExecError::Type(format!("tensor has dtype {}, not {}", self.spec.dtype, T::DTYPE)))?;
        match offsets {
            None => {
                let start = usize::try_from(self.spec.offset).ok();
                let range = start.and_then(|a| Some(a..a.checked_add(self.numel())?));
                range.and_then(|r| s.get(r)).map(|v| v.to_vec()).ok_or_else(|| {
                    ExecError::Input(format!(
                        "layout {:?} / {:?} + {} reaches outside its storage of {} elements",
                        self.spec.size,
                        self.spec.stride,
                        self.spec.offset,
                        s.len()
                    ))
                })
            }
            Some(offsets) => Ok(offsets.into_iter().map(|o| s[o]).collect()),
        }
    }

    /// The elements in row-major order, converted to `f64`.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, ExecError> {
        with_dtype!(self.dtype(), T => Ok(self.to_vec::<T>()?.into_iter().map(|x| x.to_f64()).collect()), Err(unsupported_dtype(self.dtype())))
    }

    /// The elements in row-major order, converted to `i64`.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, ExecError> {
        with_dtype!(self.dtype(), T => Ok(self.to_vec::<T>()?.into_iter().map(|x| x.to_i64()).collect()), Err(unsupported_dtype(self.dtype())))
    }

    /// An error for a complex tensor read or written as `T` (its storage
    /// holds parts: see [`Tensor::view_as_real`]).
    fn not_complex(&self, t: DType) -> Result<(), ExecError> {
        if self.dtype().is_complex() {
            return Err(ExecError::Type(format!(
                "tensor has dtype {}, not {t} (read complex tensors through view_as_real)",
                self.dtype()
            )));
        }
        Ok(())
    }

    /// Writes row-major `values` into the tensor's elements.
    pub fn write<T: Element>(&self, values: &[T]) -> Result<(), ExecError> {
        self.not_complex(T::DTYPE)?;
        if values.len() != self.numel() {
            return Err(ExecError::Type(format!(
                "writing {} values into {} elements",
                values.len(),
                self.numel()
            )));
        }
        let offsets = self.element_offsets()?;
        let mut data = self
            .storage
            .data
            .write()
            .map_err(|_| ExecError::Unsupported("poisoned storage".into()))?;
        let s = T::slice_mut(&mut data)
            .ok_or_else(|| ExecError::Type(format!("tensor has dtype {}, not {}", self.spec.dtype, T::DTYPE)))?;
        for (o, v) in offsets.into_iter().zip(values) {
            s[o] = *v;
        }
        Ok(())
    }

    /// Writes row-major `f64` values, converting to the tensor's dtype.
    pub fn write_f64(&self, values: &[f64]) -> Result<(), ExecError> {
        with_dtype!(self.dtype(), T => self.write::<T>(&values.iter().map(|v| T::from_f64(*v)).collect::<Vec<T>>()), Err(unsupported_dtype(self.dtype())))
    }

    /// Writes row-major `i64` values, converting to the tensor's dtype.
    pub fn write_i64(&self, values: &[i64]) -> Result<(), ExecError> {
        with_dtype!(self.dtype(), T => self.write::<T>(&values.iter().map(|v| T::from_i64(*v)).collect::<Vec<T>>()), Err(unsupported_dtype(self.dtype())))
    }

    /// Copies `src`'s elements (same shape, any dtype) into this tensor.
    pub fn copy_from(&self, src: &Tensor) -> Result<(), ExecError> {
        if src.size() != self.size() {
            return Err(ExecError::Type(format!(
                "copy of shape {:?} into shape {:?}",
                src.size(),
                self.size()
            )));
        }
        if self.dtype().is_complex() || src.dtype().is_complex() {
            if !(self.dtype().is_complex() && src.dtype().is_complex()) {
                return Err(ExecError::Type(format!(
                    "copy of a {} tensor into a {} tensor",
                    src.dtype(),
                    self.dtype()
                )));
            }
            self.view_as_real()?.copy_from(&src.view_as_real()?)
        } else if self.dtype().is_floating() || src.dtype().is_floating() {
            self.write_f64(&src.to_f64_vec()?)
        } else {
            self.write_i64(&src.to_i64_vec()?)
        }
    }

    /// A contiguous copy with its own storage.
    pub fn contiguous_copy(&self) -> Result<Tensor, ExecError> {
        if self.dtype().is_complex() {
            return self.view_as_real()?.contiguous_copy()?.view_as_complex();
        }
        with_dtype!(self.dtype(), T => {
            let mut t = Tensor::from_vec(self.to_vec::<T>()?, self.size())?;
            t.spec.device = self.spec.device;
            Ok(t)
        }, Err(unsupported_dtype(self.dtype())))
    }

    /// `true` when elements are row-major and dense.
    pub fn is_contiguous(&self) -> bool {
        self.spec.is_contiguous()
    }

    /// Byte address of the first element, for alignment checks.
    pub(crate) fn data_address(&self) -> usize {
        let base = self.storage.data.read().map(|d| data_ptr(&d)).unwrap_or(0);
        base + self.spec.offset.max(0) as usize * self.spec.dtype.size_bytes() as usize
    }
}

/// Stored parts per element: 2 for the complex dtypes, else 1.
pub(crate) fn lanes(dtype: DType) -> usize {
    if dtype.is_complex() {
        2
    } else {
        1
    }
}

/// The dtype of a tensor's stored elements: the part dtype for a complex
/// dtype (its storage holds `(real, imaginary)` pairs), else the dtype.
pub(crate) fn storage_dtype(dtype: DType) -> DType {
    dtype.complex_part().unwrap_or(dtype)
}

fn data_len(d: &Data) -> usize {
    with_data!(d, v => v.len())
}

fn data_ptr(d: &Data) -> usize {
    with_data!(d, v => v.as_ptr() as usize)
}

/// Checks that every element of `spec` lies inside a storage of `len` elements.
pub(crate) fn check_bounds(spec: &TensorSpec, len: usize) -> Result<(), ExecError> {
    if spec.size.len() != spec.stride.len() {
        return Err(ExecError::Input(format!(
            "{} sizes but {} strides",
            spec.size.len(),
            spec.stride.len()
        )));
    }
    if spec.size.iter().any(|s| *s < 0) || spec.offset < 0 || spec.stride.iter().any(|s| *s < 0) {
        return Err(ExecError::Input(format!(
            "negative size, stride or offset in view {:?} / {:?} + {}",
            spec.size, spec.stride, spec.offset
        )));
    }
    let need = spec
        .storage_numel()
        .ok_or_else(|| ExecError::Input("view size overflows".into()))?;
    if need as u64 > len as u64 {
        return Err(ExecError::Input(format!(
            "view {:?} / {:?} + {} needs {need} elements but the storage has {len}",
            spec.size, spec.stride, spec.offset
        )));
    }
    Ok(())
}
