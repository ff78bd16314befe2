//! The extern ops of `extra.cu` (its own NVRTC module): the complex views
//! (`aten.view_as_complex`, `aten.view_as_real`, `aten.view.dtype` to a
//! dtype of the same width or between a complex dtype and its parts: no
//! kernel, the result aliases its input as in PyTorch), complex `aten.mul` / `add` / `sub` / `div` on two tensors,
//! `aten.segment_reduce` (semantics in [`crate::exec::host::segment`]) and
//! `aten.randint` (PyTorch's CUDA values, [`crate::exec::random`]).
//! `Ok(None)` for operands these do not take (real-only pointwise ops,
//! scalars, non-contiguous segment inputs, dtypes without a kernel).

use super::{blocks_for, read_i64, scratch, Arg, Nd, OwnModule};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::host::segment::{self, Reduction};
use crate::exec::op::ExternOp;
use crate::exec::random::{DeviceShape, RandintPlan};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::driver::sys;
use std::sync::Arc;

/// These kernels' module (`extra.cu` after the shared `prelude.cuh`).
pub(super) const MODULE: OwnModule = OwnModule {
    name: "extra",
    what: "cuda built-in kernels (extra.cu)",
    source: concat!(include_str!("prelude.cuh"), include_str!("extra.cu")),
};

type Args<'c> = crate::exec::op::Args<'c, CudaTensor>;

/// An op's function here.
pub(super) type OpFn = fn(&mut CudaBackend, &Args<'_>) -> DeviceResult;

/// The function of each family these kernels run (the catalogue's
/// `CudaRoute::Extra` ops): the one table that both [`run`] and the
/// backend's route check read.
pub(super) fn op_fn(op: ExternOp) -> Option<OpFn> {
    let f: OpFn = match op {
        ExternOp::Randint => randint,
        ExternOp::ViewAsComplex => |_, a| view(a, |s| s.as_complex()),
        ExternOp::ViewAsReal => |_, a| view(a, |s| s.as_real()),
        ExternOp::View => |_, a| view_dtype(a),
        ExternOp::Add => |b, a| complex_binary(b, a, 0),
        ExternOp::Sub => |b, a| complex_binary(b, a, 1),
        ExternOp::Mul => |b, a| complex_binary(b, a, 2),
        ExternOp::Div => |b, a| complex_binary(b, a, 3),
        ExternOp::SegmentReduce => segment_reduce,
        _ => return None,
    };
    Some(f)
}

/// Dispatches `call` by op family; `Ok(None)` when these kernels do not take
/// it. `randint` takes `out=` (Inductor's seed buffer); the others leave an
/// `out=` call to the host.
pub(super) fn run(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let Some(f) = op_fn(call.family) else {
        return Ok(None);
    };
    let out = call.kwargs.get("out").is_some_and(|v| !matches!(v, Value::None));
    if out && call.family != ExternOp::Randint {
        return Ok(None);
    }
    f(backend, &Args::of(call))
}

fn aliased(x: &CudaTensor, spec: TensorSpec) -> DeviceResult {
    crate::exec::host::tensor::check_bounds(&spec, x.storage.bytes / spec.dtype.size_bytes().max(1) as usize)?;
    Ok(Some(Value::Tensor(CudaTensor {
        storage: Arc::clone(&x.storage),
        spec,
    })))
}

fn view(a: &Args<'_>, f: fn(&TensorSpec) -> Result<TensorSpec, ExecError>) -> DeviceResult {
    let x = a.tensor(0, "self")?;
    let spec = f(&x.spec).map_err(|e| a.err(e.to_string()))?;
    aliased(x, spec)
}

/// `view(dtype)`: to a dtype of the same width (the same bytes), or between
/// a complex dtype and its part dtype (the last dimension, of stride 1,
/// doubles or halves).
fn view_dtype(a: &Args<'_>) -> DeviceResult {
    let x = a.tensor(0, "self")?;
    let Some(Value::DType(to)) = a.get(1, "dtype") else {
        return Ok(None);
    };
    let from = x.spec.dtype;
    let rank = x.spec.size.len();
    if to.size_bytes() == from.size_bytes() {
        // The same bytes read as another dtype of the same width (a bitcast).
        let spec = TensorSpec {
            dtype: *to,
            ..x.spec.clone()
        };
        return aliased(x, spec);
    }
    if rank == 0 || x.spec.stride[rank - 1] != 1 {
        return Ok(None);
    }
    let spec = if from.complex_part() == Some(*to) {
        let mut r = x.spec.as_real()?;
        r.size.pop();
        r.stride.pop();
        r.size[rank - 1] = r.size[rank - 1]
            .checked_mul(2)
            .ok_or_else(|| a.err("view(dtype): size overflows"))?;
        r.stride[rank - 1] = 1;
        r
    } else if to.complex_part() == Some(from) && x.spec.size[rank - 1] % 2 == 0 {
        let mut r = x.spec.clone();
        r.size[rank - 1] /= 2;
        r.size.push(2);
        r.stride[rank - 1] = 2;
        r.stride.push(1);
        r.as_complex()?
    } else {
        return Ok(None);
    };
    aliased(x, spec)
}

/// Broadcast strides of `spec` to `shape` (0 on broadcast dimensions).
fn broadcast_nd(spec: &TensorSpec, shape: &[i64]) -> Option<Nd> {
    Nd::new(
        shape,
        &crate::exec::host::broadcast::broadcast_strides(&spec.size, &spec.stride, shape)?,
    )
}

fn complex_binary(backend: &mut CudaBackend, a: &Args<'_>, op: i32) -> DeviceResult {
    let (Some(Value::Tensor(x)), Some(Value::Tensor(y))) = (a.get(0, "self"), a.get(1, "other")) else {
        return Ok(None);
    };
    let (dx, dy) = (x.spec.dtype, y.spec.dtype);
    if !(dx.is_complex() || dy.is_complex()) {
        return Ok(None);
    }
    // One complex dtype; a real operand must be its part dtype.
    let out = if dx.is_complex() { dx } else { dy };
    let part = out.complex_part();
    let fits = |d: DType| d == out || Some(d) == part;
    let name = match out {
        DType::Complex64 if fits(dx) && fits(dy) => "complex_binary_c64",
        DType::Complex128 if fits(dx) && fits(dy) => "complex_binary_c128",
        _ => return Ok(None),
    };
    let alpha = if op <= 1 { a.float(2, "alpha", 1.0)? } else { 1.0 };
    let shape = crate::exec::host::broadcast::broadcast_shape(a, &[&x.spec.size, &y.spec.size])?;
    let (Some(xd), Some(yd)) = (broadcast_nd(&x.spec, &shape), broadcast_nd(&y.spec, &shape)) else {
        return Ok(None);
    };
    let spec = TensorSpec::contiguous(out, backend.device_of(), &shape);
    let Some(od) = Nd::new(&spec.size, &spec.stride) else {
        return Ok(None);
    };
    let n = spec.numel();
    let result = backend.allocate(&spec)?;
    if n > 0 {
        MODULE.launch(
            backend,
            name,
            blocks_for(n),
            vec![
                Arg::Ptr(result.data_ptr()),
                Arg::Nd(od),
                Arg::Ptr(x.data_ptr()),
                Arg::Nd(xd),
                Arg::I32(i32::from(dx.is_complex())),
                Arg::Ptr(y.data_ptr()),
                Arg::Nd(yd),
                Arg::I32(i32::from(dy.is_complex())),
                Arg::I32(op),
                Arg::F64(alpha),
                Arg::I64(n),
            ],
        )?;
    }
    Ok(Some(Value::Tensor(result)))
}

fn segment_reduce(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let call = segment::parse_call(a)?;
    let suffix = match call.data.spec.dtype {
        DType::Float32 => "f32",
        DType::Float64 => "f64",
        DType::Float16 => "f16",
        DType::Bfloat16 => "bf16",
        _ => return Ok(None),
    };
    let index = match call.segs.spec.dtype {
        DType::Int64 => "o64",
        DType::Int32 => "o32",
        _ => return Ok(None),
    };
    if !call.data.spec.is_contiguous() || !call.segs.spec.is_contiguous() {
        return Ok(None);
    }
    let split =
        segment::split(&call.data.spec.size, call.axis, &call.segs.spec.size, call.is_offsets).map_err(|m| a.err(m))?;
    let shape = segment::result_shape(&call.data.spec.size, split.axis, split.count);
    let spec = TensorSpec::contiguous(call.data.spec.dtype, backend.device_of(), &shape);
    let out = backend.allocate(&spec)?;
    let n = spec.numel();
    if n == 0 {
        return Ok(Some(Value::Tensor(out)));
    }
    let red = match call.reduction {
        Reduction::Sum => 0,
        Reduction::Mean => 1,
        Reduction::Max => 2,
        Reduction::Min => 3,
        Reduction::Prod => 4,
    };
    let flag = scratch(backend, 8)?;
    backend.zero(flag.ptr, 8)?;
    let i64_of = |v: usize| i64::try_from(v).map_err(|_| a.err("sizes out of range"));
    MODULE.launch(
        backend,
        &format!("segment_reduce_{suffix}_{index}"),
        blocks_for(n),
        vec![
            Arg::Ptr(call.data.data_ptr()),
            Arg::I64(i64_of(split.outer)?),
            Arg::I64(i64_of(split.len)?),
            Arg::I64(i64_of(split.inner)?),
            Arg::Ptr(call.segs.data_ptr()),
            Arg::I32(i32::from(call.is_offsets)),
            Arg::I64(i64_of(split.count)?),
            Arg::I32(i32::from(!call.is_offsets && !call.unsafe_)),
            Arg::I32(red),
            Arg::I32(i32::from(call.initial.is_some())),
            Arg::F64(call.initial.unwrap_or(0.0)),
            Arg::Ptr(out.data_ptr()),
            Arg::Ptr(flag.ptr),
        ],
    )?;
    if read_i64(backend, flag.ptr, 0)? != 0 {
        return Err(a.err(if call.is_offsets {
            "offsets give a segment outside the reduced axis (or decreasing)".to_string()
        } else {
            format!(
                "lengths must be non-negative and each row must sum to the axis' size {} (unless `unsafe`)",
                split.len
            )
        }));
    }
    Ok(Some(Value::Tensor(out)))
}

/// The launch shape ATen's distribution kernels take on this device.
fn device_shape(backend: &CudaBackend, op: &str) -> Result<DeviceShape, ExecError> {
    let attr = |a| {
        backend
            .device
            .attribute(a)
            .map_err(|e| ExecError::op(op, e.to_string()))
            .and_then(|v| u32::try_from(v).map_err(|_| ExecError::op(op, format!("device attribute {v}"))))
    };
    Ok(DeviceShape {
        sm_count: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        max_threads_per_sm: attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
    })
}

/// `randint.low_out(low, high, size, out=...)` / `randint.low(low, high,
/// size)` into int64: PyTorch's values at the backend's generator state
/// (held by its host backend, shared with the host fallback), advanced.
fn randint(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let low = a.int(0, "low", None)?;
    let high = a.int(1, "high", None)?;
    let size = a.ints(2, "size")?;
    let (out, allocated) = match a.get(usize::MAX, "out") {
        Some(Value::Tensor(t)) => (t.clone(), false),
        Some(_) => return Ok(None),
        None => {
            let spec = TensorSpec::contiguous(DType::Int64, backend.device_of(), &size);
            (backend.allocate(&spec)?, true)
        }
    };
    if out.spec.dtype != DType::Int64 || out.spec.size != size {
        return Ok(None);
    }
    let Some(od) = Nd::new(&out.spec.size, &out.spec.stride) else {
        return Ok(None);
    };
    let n = out.spec.numel();
    let shape = device_shape(backend, a.op)?;
    let start = backend.cuda_rng()?;
    let (plan, next) = RandintPlan::new(start, low, high, n.max(0) as u64, shape)?;
    let increment = next.offset.wrapping_sub(start.offset);
    if n > 0 {
        // The state's address is the backend's for its lifetime: a plain word
        // (not an operand) in the recorded launches.
        let state = backend.rng_state_ptr()?;
        let i64_of = |v: u64| i64::try_from(v).map_err(|_| a.err("launch shape out of range"));
        MODULE.launch(
            backend,
            "randint_i64",
            blocks_for(n),
            vec![
                Arg::Ptr(out.data_ptr()),
                Arg::Nd(od),
                Arg::I64(n),
                Arg::Bits(state),
                Arg::Bits(plan.range),
                Arg::I64(plan.low),
                Arg::I64(i64_of(plan.unroll)?),
                Arg::I64(i64_of(plan.threads)?),
            ],
        )?;
        MODULE.launch(backend, "rng_advance", 1, vec![Arg::Bits(state), Arg::Bits(increment)])?;
    }
    // With `out=` the result is written there and the call returns nothing,
    // as every `out=` op does (the host's convention).
    Ok(Some(if allocated { Value::Tensor(out) } else { Value::None }))
}
