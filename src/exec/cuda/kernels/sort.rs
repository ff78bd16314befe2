//! `aten.sort` (`default` and `stable`) on the device: the kernels of
//! `sort.cu` (its own NVRTC module), a bitonic network per line whose total
//! order makes the result the stable sort, as the host's
//! ([`crate::exec::host::sort`]): NaN larger than every number, equal
//! elements in index order (what `stable=True` asks for, and what PyTorch's
//! CUDA sort gives for every line longer than 32). Both results are laid out
//! as ATen's sort meta function lays them out: the input's strides when it
//! is non-overlapping and dense, else `infer_dense_strides` of them. Any
//! strides are read; `out=` variants go to the host fallback (`Ok(None)`).

use super::{blocks_for, dtype_suffix, scratch, Arg, Nd, OwnModule};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{CudaBackend, CudaTensor};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;

/// These kernels' module (`sort.cu` after the shared `prelude.cuh`).
pub(super) const MODULE: OwnModule = OwnModule {
    name: "sort",
    what: "cuda sort kernels (sort.cu)",
    source: concat!(include_str!("prelude.cuh"), include_str!("sort.cu")),
};

type Args<'c> = crate::exec::op::Args<'c, CudaTensor>;

/// `aten.sort(self, dim=-1, descending=False)` and `aten.sort.stable(self,
/// *, stable, dim=-1, descending=False)`: (values, int64 indices).
pub(super) fn sort(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    if ["out", "values", "indices"]
        .iter()
        .any(|k| call.kwargs.get(*k).is_some_and(|v| !matches!(v, Value::None)))
    {
        return Ok(None);
    }
    let a = Args::of(call);
    let x = a.tensor(0, "self")?;
    // `stable` takes its arguments after `self` by keyword only.
    let (dim_at, descending_at) = if call.op.ends_with(".stable") {
        (usize::MAX, usize::MAX)
    } else {
        (1, 2)
    };
    let dim = a.int(dim_at, "dim", Some(-1))?;
    let descending = a.boolean(descending_at, "descending", false)?;
    let size = &x.spec.size;
    let rank = size.len();
    // A 0-d tensor sorts as one element along dimension 0 or -1.
    let d = match (rank, dim) {
        (0, -1 | 0) => None,
        (0, _) => return Err(a.err(format!("dimension {dim} out of range for a 0-d tensor"))),
        _ => {
            let d = if dim < 0 { dim + rank as i64 } else { dim };
            if !(0..rank as i64).contains(&d) {
                return Err(a.err(format!("dimension {dim} out of range for rank {rank}")));
            }
            // In 0..rank, checked above.
            Some(d as usize)
        }
    };
    Ok(sorted(backend, &a, x, d, descending)?.map(|(values, indices)| pair(values, indices)))
}

/// `x` sorted along dimension `d` (`None`: a 0-d tensor), ascending or
/// descending, in the stable order: (values, int64 indices), laid out as
/// [`sort`] lays them out; `None` when the kernels do not take `x` (its
/// dtype, more than 8 dimensions). Errors name `a`'s op.
pub(super) fn sorted(
    backend: &mut CudaBackend,
    a: &Args<'_>,
    x: &CudaTensor,
    d: Option<usize>,
    descending: bool,
) -> Result<Option<(CudaTensor, CudaTensor)>, ExecError> {
    let Some(suffix) = dtype_suffix(x.spec.dtype) else {
        return Ok(None);
    };
    let size = &x.spec.size;
    let Some(xd) = Nd::new(size, &x.spec.stride) else {
        return Ok(None);
    };
    let stride = crate::exec::host::layout::infer_dense_strides(size, &x.spec.stride);
    let result = |dtype| TensorSpec {
        dtype,
        size: size.clone(),
        stride: stride.clone(),
        offset: 0,
        device: backend.device_of(),
    };
    let (values_spec, indices_spec) = (result(x.spec.dtype), result(DType::Int64));
    let values = backend.allocate(&values_spec)?;
    let indices = backend.allocate(&indices_spec)?;
    let (len, outer, inner) = match d {
        None => (1, 1, 1),
        Some(d) => (
            size[d],
            size[..d].iter().product::<i64>(),
            size[d + 1..].iter().product::<i64>(),
        ),
    };
    let rows = outer * inner;
    if rows == 0 || len == 0 {
        return Ok(Some((values, indices)));
    }
    let too_long = || a.err(format!("a line of {len} elements is too long to sort"));
    let p2 = u64::try_from(len)
        .ok()
        .and_then(u64::checked_next_power_of_two)
        .and_then(|p| i64::try_from(p).ok())
        .ok_or_else(too_long)?;
    let slots_bytes = rows
        .checked_mul(p2)
        .and_then(|n| n.checked_mul(8))
        .ok_or_else(too_long)?;
    let slots = scratch(backend, slots_bytes)?;
    MODULE.launch(
        backend,
        "sort_init",
        blocks_for(rows * p2),
        vec![Arg::Ptr(slots.ptr), Arg::I64(rows * p2), Arg::I64(p2)],
    )?;
    // The arguments `sort_step` and `sort_write` start with: the input and
    // its layout, the slots, and the lines' geometry.
    let line_args = |more: Vec<Arg>| {
        let mut args = vec![
            Arg::Ptr(x.data_ptr()),
            Arg::Nd(xd),
            Arg::Ptr(slots.ptr),
            Arg::I64(rows),
            Arg::I64(p2),
            Arg::I64(len),
            Arg::I64(inner),
        ];
        args.extend(more);
        args
    };
    let step = format!("sort_step_{suffix}");
    let mut k = 2;
    while k <= p2 {
        let mut j = k / 2;
        while j > 0 {
            MODULE.launch(
                backend,
                &step,
                blocks_for(rows * (p2 / 2)),
                line_args(vec![Arg::I64(j), Arg::I64(k), Arg::I32(i32::from(descending))]),
            )?;
            j /= 2;
        }
        k *= 2;
    }
    // The results' own layouts (sizes of `x`, checked by `Nd::new` above).
    let (Some(vd), Some(id)) = (Nd::new(size, &values.spec.stride), Nd::new(size, &indices.spec.stride)) else {
        return Ok(None);
    };
    MODULE.launch(
        backend,
        &format!("sort_write_{suffix}"),
        blocks_for(rows * len),
        line_args(vec![
            Arg::Ptr(values.data_ptr()),
            Arg::Nd(vd),
            Arg::Ptr(indices.data_ptr()),
            Arg::Nd(id),
        ]),
    )?;
    Ok(Some((values, indices)))
}

fn pair(values: CudaTensor, indices: CudaTensor) -> Value<CudaTensor> {
    Value::List(vec![Value::Tensor(values), Value::Tensor(indices)])
}
