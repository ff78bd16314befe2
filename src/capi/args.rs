//! The C ABI's arguments as the backend's values, and op results back.

use super::{c_str, Failure, WrapirRtArg, WrapirRtLayout, WrapirRtTensorDesc, WRAPIR_RT_HOST};
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::{Backend, ExpectedLayout, Tensor, TensorSpec, Value};
use crate::ir::{DType, Device};
use indexmap::IndexMap;

/// Arguments of one call, list items included, at most.
const MAX_ARGS: usize = 1 << 16;
/// Nesting of list arguments, at most.
const MAX_DEPTH: usize = 16;
/// Rank of a tensor, at most.
const MAX_RANK: usize = 64;

/// The dtype of code `code` (its index in [`DType::ALL`]).
pub(super) fn dtype_of(code: i32, what: &str) -> Result<DType, Failure> {
    usize::try_from(code)
        .ok()
        .and_then(|i| DType::ALL.get(i).copied())
        .ok_or_else(|| {
            Failure::argument(format!(
                "{what}: dtype code {code} is not one of wrapir's dtypes (0..={})",
                DType::ALL.len() - 1
            ))
        })
}

/// The code of `dtype` (its index in [`DType::ALL`]).
pub(super) fn dtype_code(dtype: DType) -> i32 {
    // ALL holds every dtype, so the position exists; it is below 17.
    DType::ALL.iter().position(|d| *d == dtype).unwrap_or(0) as i32
}

/// A count the caller passed with its array: non-negative, within
/// [`MAX_ARGS`], and not with a null array unless it is 0.
pub(super) fn count(n: i64, null: bool, what: &str) -> Result<usize, Failure> {
    let n = usize::try_from(n).map_err(|_| Failure::argument(format!("{what} is negative ({n})")))?;
    if n > MAX_ARGS {
        return Err(Failure::argument(format!("{what} is {n}, more than {MAX_ARGS}")));
    }
    if n > 0 && null {
        return Err(Failure::argument(format!(
            "{what} is {n} but the array is a null pointer"
        )));
    }
    Ok(n)
}

/// The `n` elements at `ptr` (checked by [`count`]).
///
/// # Safety
/// `ptr` must point at `n` initialised elements alive for `'a` (or `n` is 0).
unsafe fn slice<'a, T>(ptr: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        return &[];
    }
    // SAFETY: non-null (checked by `count`) and `n` elements long by the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr, n) }
}

/// A layout's rank, sizes and strides.
///
/// # Safety
/// `layout.sizes` and `layout.strides` must point at `layout.ndim` elements.
pub(super) unsafe fn spec_of(layout: &WrapirRtLayout, device: Device, what: &str) -> Result<TensorSpec, Failure> {
    let dtype = dtype_of(layout.dtype, what)?;
    let ndim = usize::try_from(layout.ndim)
        .ok()
        .filter(|n| *n <= MAX_RANK)
        .ok_or_else(|| Failure::argument(format!("{what}: rank {} is outside 0..={MAX_RANK}", layout.ndim)))?;
    if ndim > 0 && (layout.sizes.is_null() || layout.strides.is_null()) {
        return Err(Failure::argument(format!(
            "{what}: rank {ndim} with null sizes or strides"
        )));
    }
    // SAFETY: `ndim` elements each, by the caller's contract; non-null checked above.
    let (size, stride) = unsafe { (slice(layout.sizes, ndim), slice(layout.strides, ndim)) };
    if let Some(d) = size.iter().position(|s| *s < 0) {
        return Err(Failure::argument(format!("{what}: size {d} is negative ({})", size[d])));
    }
    if let Some(d) = stride.iter().position(|s| *s < 0) {
        return Err(Failure::argument(format!(
            "{what}: stride {d} is negative ({})",
            stride[d]
        )));
    }
    if layout.offset < 0 {
        return Err(Failure::argument(format!(
            "{what}: storage offset {} is negative",
            layout.offset
        )));
    }
    Ok(TensorSpec {
        dtype,
        device,
        size: size.to_vec(),
        stride: stride.to_vec(),
        offset: layout.offset,
    })
}

/// The caller's device tensor `desc`, borrowed.
///
/// # Safety
/// `desc` must follow `wrapir_rt.h`: its layout arrays hold `ndim`
/// elements, and `storage` is a live allocation of the backend's device
/// holding `storage_bytes` bytes, not written by others while it is used.
pub(super) unsafe fn borrow(
    backend: &CudaBackend,
    desc: &WrapirRtTensorDesc,
    what: &str,
) -> Result<CudaTensor, Failure> {
    if desc.flags & WRAPIR_RT_HOST != 0 {
        return Err(Failure::argument(format!(
            "{what} is in host memory; the runtime runs ops on the device"
        )));
    }
    let device = Device::cuda(u32::try_from(backend.ordinal()).unwrap_or(u32::MAX));
    // SAFETY: the caller's contract on the layout arrays.
    let spec = unsafe { spec_of(&desc.layout, device, what) }?;
    let bytes = usize::try_from(desc.storage_bytes)
        .map_err(|_| Failure::argument(format!("{what}: storage of {} bytes", desc.storage_bytes)))?;
    if desc.storage == 0 && bytes > 0 {
        return Err(Failure::argument(format!("{what}: a null storage of {bytes} bytes")));
    }
    // SAFETY: the caller's contract on the storage; the view is checked
    // against `bytes` by `borrow_device`.
    unsafe { backend.borrow_device(desc.storage, bytes, spec) }.map_err(|e| Failure::argument(format!("{what}: {e}")))
}

/// A call's arguments as the backend takes them.
pub(super) struct Converted<T> {
    pub(super) args: Vec<Value<T>>,
    pub(super) kwargs: IndexMap<String, Value<T>>,
    pub(super) expected: Option<ExpectedLayout>,
}

/// How a context takes the caller's tensor descriptors (`what` names the
/// argument in errors); the descriptors follow `wrapir_rt.h` (see [`convert`]).
pub(super) type BorrowFn<'b, T> = dyn FnMut(&WrapirRtTensorDesc, &str) -> Result<T, Failure> + 'b;

/// Converts the caller's arguments of `op` for the CUDA context of `backend`.
///
/// # Safety
/// As for [`convert`], and every tensor descriptor names device memory of
/// the backend's device.
pub(super) unsafe fn convert_device(
    backend: &CudaBackend,
    op: &str,
    args: *const WrapirRtArg,
    num_args: i64,
    expected: *const WrapirRtLayout,
) -> Result<Converted<CudaTensor>, Failure> {
    let device = Device::cuda(u32::try_from(backend.ordinal()).unwrap_or(u32::MAX));
    // SAFETY: the descriptors follow `wrapir_rt.h` and name live device
    // memory of the backend's device (the caller's contract).
    let mut take = |desc: &WrapirRtTensorDesc, what: &str| unsafe { borrow(backend, desc, what) };
    // SAFETY: the caller's contract, passed on.
    unsafe { convert(&mut take, device, op, args, num_args, expected) }
}

/// Converts the caller's arguments of `op`: positional ones in order,
/// named ones as keyword arguments in order; tensors through `take`, the
/// expected layout on `device`.
///
/// # Safety
/// As for `wrapir_rt_call`: `args` points at `num_args` arguments following
/// `wrapir_rt.h`, `expected` is null or points at a layout.
pub(super) unsafe fn convert<T>(
    take: &mut BorrowFn<'_, T>,
    device: Device,
    op: &str,
    args: *const WrapirRtArg,
    num_args: i64,
    expected: *const WrapirRtLayout,
) -> Result<Converted<T>, Failure> {
    let n = count(num_args, args.is_null(), &format!("op `{op}`: `num_args`"))?;
    // SAFETY: `n` arguments at `args` (the caller's contract; null checked by `count`).
    let items = unsafe { slice(args, n) };
    let mut budget = MAX_ARGS;
    let mut out = Converted {
        args: Vec::new(),
        kwargs: IndexMap::new(),
        expected: None,
    };
    for (i, a) in items.iter().enumerate() {
        let label = if a.name.is_null() {
            format!("op `{op}`: argument {i}")
        } else {
            // SAFETY: a non-null name is NUL-terminated (the caller's contract).
            format!("op `{op}`: argument `{}`", unsafe { c_str(a.name, "name") }?)
        };
        // SAFETY: the caller's contract, passed on.
        let value = unsafe { value_of(take, a, &label, 0, &mut budget) }?;
        if a.name.is_null() {
            // Keywords are matched by name, so only their order among
            // positionals could mislead; `out` comes first in an `out=`
            // call (the wrapper passes the destination before the operands).
            if out.kwargs.keys().any(|k| k != "out") {
                return Err(Failure::argument(format!(
                    "{label}: a positional argument after keyword arguments"
                )));
            }
            out.args.push(value);
        } else {
            // SAFETY: as above.
            let name = unsafe { c_str(a.name, "name") }?;
            if out.kwargs.insert(name.to_string(), value).is_some() {
                return Err(Failure::argument(format!("{label} is given twice")));
            }
        }
    }
    if !expected.is_null() {
        // SAFETY: a non-null `expected` points at a layout (the caller's contract).
        let layout = unsafe { &*expected };
        // SAFETY: its arrays hold `ndim` elements (the caller's contract).
        let spec = unsafe { spec_of(layout, device, &format!("op `{op}`: the expected result layout")) }?;
        out.expected = Some(ExpectedLayout {
            dtype: spec.dtype,
            device: spec.device,
            size: spec.size.into_iter().map(Some).collect(),
            stride: spec.stride.into_iter().map(Some).collect(),
            offset: Some(spec.offset),
        });
    }
    Ok(out)
}

/// One argument as a value; `budget` counts the arguments left to convert.
///
/// # Safety
/// `a` follows `wrapir_rt.h` (see [`convert`]).
unsafe fn value_of<T>(
    take: &mut BorrowFn<'_, T>,
    a: &WrapirRtArg,
    label: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<Value<T>, Failure> {
    *budget = budget
        .checked_sub(1)
        .ok_or_else(|| Failure::argument(format!("{label}: more than {MAX_ARGS} arguments and list items")))?;
    Ok(match a.kind {
        super::WRAPIR_RT_ARG_NONE => Value::None,
        super::WRAPIR_RT_ARG_TENSOR => Value::Tensor(take(&a.tensor, label)?),
        super::WRAPIR_RT_ARG_INT => Value::Int(a.int_value),
        super::WRAPIR_RT_ARG_FLOAT => Value::Float(a.float_value),
        super::WRAPIR_RT_ARG_BOOL => Value::Bool(a.int_value != 0),
        // SAFETY: a string argument's pointer is NUL-terminated (the caller's contract).
        super::WRAPIR_RT_ARG_STRING => Value::Str(unsafe { c_str(a.string_value, label) }?.to_string()),
        super::WRAPIR_RT_ARG_DTYPE => Value::DType(dtype_of(a.dtype, label)?),
        super::WRAPIR_RT_ARG_DEVICE => Value::Device(match a.int_value {
            -1 => Device::cpu(),
            i => Device::cuda(u32::try_from(i).map_err(|_| Failure::argument(format!("{label}: device index {i}")))?),
        }),
        super::WRAPIR_RT_ARG_LIST => {
            if depth >= MAX_DEPTH {
                return Err(Failure::argument(format!(
                    "{label}: lists nested deeper than {MAX_DEPTH}"
                )));
            }
            let n = count(a.num_items, a.items.is_null(), &format!("{label}: `num_items`"))?;
            // SAFETY: `n` items at `a.items` (the caller's contract; null checked by `count`).
            let items = unsafe { slice(a.items, n) };
            let mut values = Vec::with_capacity(n.min(*budget));
            for (i, item) in items.iter().enumerate() {
                // SAFETY: the caller's contract, passed on.
                values.push(unsafe { value_of(take, item, &format!("{label} item {i}"), depth + 1, budget) }?);
            }
            Value::List(values)
        }
        other => return Err(Failure::argument(format!("{label}: unknown argument kind {other}"))),
    })
}

/// The first `n` leaves of an op's result, in order, as tensors (`None` for
/// `None` elements; integers, booleans and floats become 0-d tensors of
/// the backend). A wrapper takes the elements up to the last one its program
/// uses (attention ops return up to nine, programs use the first), so
/// leaves past `n` are dropped; fewer than `n` is an error.
pub(super) fn flatten_result<B: Backend>(
    backend: &mut B,
    op: &str,
    value: Value<B::Tensor>,
    n: usize,
) -> Result<Vec<Option<B::Tensor>>, Failure> {
    fn walk<B: Backend>(backend: &mut B, v: Value<B::Tensor>, out: &mut Vec<Option<B::Tensor>>) -> Result<(), Failure> {
        let scalar = |t: Tensor, backend: &mut B| backend.copy_in(&t).map(Some).map_err(Failure::from);
        match v {
            Value::Tensor(t) => out.push(Some(t)),
            Value::None => out.push(None),
            Value::List(items) => {
                for i in items {
                    walk(backend, i, out)?;
                }
            }
            Value::Int(i) => out.push(scalar(Tensor::scalar(i), backend)?),
            Value::Bool(b) => out.push(scalar(Tensor::scalar(b), backend)?),
            Value::Float(f) => out.push(scalar(Tensor::scalar(f), backend)?),
            other => {
                return Err(Failure::new(
                    super::WRAPIR_RT_ERR_OP,
                    format!("returned a {} element, which has no tensor form", other.kind()),
                ))
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(backend, value, &mut out)?;
    if out.len() > n {
        out.truncate(n);
    }
    if out.len() != n {
        return Err(Failure::new(
            super::WRAPIR_RT_ERR_OP,
            format!(
                "op `{op}` returned {} result element(s); the caller takes {n}",
                out.len()
            ),
        ));
    }
    Ok(out)
}
