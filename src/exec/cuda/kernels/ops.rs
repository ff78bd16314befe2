//! The extern ops the built-in kernels implement: argument checks, output
//! allocation and launches.

use super::{blocks_for, dtype_suffix, launch, read_i64, reducible, scratch, Arg, Indices, Nd, MAX_RANK, TILE};
use crate::exec::cuda::DeviceResult;
use crate::exec::cuda::{host_storage_bytes, CudaBackend, CudaTensor};
use crate::exec::host::broadcast;
use crate::exec::op::ExternOp;
use crate::exec::{Backend, ExecError, ExternCall, Tensor, TensorSpec, Value};
use crate::ir::DType;

/// Reduction modes of the scatter kernels (`MODE_*` in the source).
const MODE_ASSIGN: i32 = 0;
const MODE_SUM: i32 = 1;
const MODE_PROD: i32 = 2;
const MODE_AMAX: i32 = 3;
const MODE_AMIN: i32 = 4;
const MODE_IDENTITY: i32 = 8;

/// Positional-or-keyword access to a call's arguments (the host ops' reader).
type Args<'c> = crate::exec::op::Args<'c, CudaTensor>;

/// A built-in op's function.
pub(super) type OpFn = fn(&mut CudaBackend, &ExternCall<'_, CudaTensor>, &Args<'_>) -> DeviceResult;

/// The function of each family these kernels run (the catalogue's
/// `CudaRoute::Kernel` ops): the one table that both [`run`] and the
/// backend's route check read.
pub(super) fn op_fn(op: ExternOp) -> Option<OpFn> {
    let f: OpFn = match op {
        ExternOp::Nonzero => |b, _, a| nonzero(b, a),
        ExternOp::MaskedSelect => |b, _, a| masked_select(b, a),
        ExternOp::Index => |b, _, a| index_with_mask(b, a),
        ExternOp::JaggedToPaddedDenseForward => |b, _, a| {
            let padding = a.float(3, "padding_value", 0.0)?;
            jagged_to_padded(b, a, "values", padding)
        },
        ExternOp::PaddedDenseToJaggedBackward => |b, _, a| jagged_to_padded(b, a, "grad_output", 0.0),
        ExternOp::PaddedDenseToJaggedForward => |b, _, a| {
            let total = a.opt_int(2, "total_L")?;
            padded_to_jagged(b, a, "dense", total)
        },
        ExternOp::JaggedToPaddedDenseBackward => |b, _, a| {
            let total = a.int(2, "total_L", None)?;
            padded_to_jagged(b, a, "grad_output", Some(total))
        },
        ExternOp::Scatter => |b, _, a| {
            let mode = match a.string(4, "reduce")? {
                None => MODE_ASSIGN,
                Some("add") => MODE_SUM,
                Some("multiply") => MODE_PROD,
                Some(r) => return Err(a.err(format!("unknown scatter reduction `{r}` (expected add or multiply)"))),
            };
            scatter(b, a, mode, true)
        },
        ExternOp::ScatterAdd => |b, _, a| scatter(b, a, MODE_SUM, true),
        ExternOp::ScatterReduce => |b, _, a| {
            let mode = match a.string(4, "reduce")? {
                Some("sum") => MODE_SUM,
                Some("prod") => MODE_PROD,
                Some("amax") => MODE_AMAX,
                Some("amin") => MODE_AMIN,
                // `mean` divides by per-position counts: left to the host.
                _ => return Ok(None),
            };
            let include_self = a.boolean(5, "include_self", true)?;
            scatter(b, a, mode, include_self)
        },
        ExternOp::IndexPut => |b, _, a| index_put(b, a),
        ExternOp::Topk => |b, _, a| topk(b, a),
        ExternOp::Sort => |b, c, _| super::sort::sort(b, c),
        ExternOp::Histc => |b, c, _| super::histc::histc(b, c),
        ExternOp::RoiAlign => |b, c, _| super::detection::roi_align(b, c),
        ExternOp::Nms => |b, c, _| super::detection::nms(b, c),
        _ => return None,
    };
    Some(f)
}

/// Dispatches `call` by op family; `Ok(None)` when no kernel covers it.
pub(super) fn run(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    if call.kwargs.get("out").is_some_and(|v| !matches!(v, Value::None)) {
        return Ok(None);
    }
    match op_fn(call.family) {
        Some(f) => f(backend, call, &Args::of(call)),
        None => Ok(None),
    }
}

fn nd_of(spec: &TensorSpec) -> Option<Nd> {
    Nd::new(&spec.size, &spec.stride)
}

fn new_tensor(backend: &mut CudaBackend, dtype: DType, size: &[i64]) -> Result<CudaTensor, ExecError> {
    let spec = TensorSpec::contiguous(dtype, backend.device_of(), size);
    backend.allocate(&spec)
}

/// Row-major linear indices of the non-zero elements of the `n`-element
/// tensor at `ptr` laid out by `md`, in order: the index buffer and its length.
fn compact(
    backend: &mut CudaBackend,
    dtype: DType,
    ptr: u64,
    md: Nd,
    n: i64,
) -> Result<Option<(std::sync::Arc<crate::exec::cuda::Storage>, i64)>, ExecError> {
    let Some(suffix) = dtype_suffix(dtype) else {
        return Ok(None);
    };
    let tiles = (n.max(0) + TILE - 1) / TILE;
    let blocks = u32::try_from(tiles).map_err(|_| ExecError::Input(format!("{n} elements are too many to compact")))?;
    let counts = scratch(backend, (tiles + 1) * 8)?;
    if tiles == 0 {
        let hits = scratch(backend, 0)?;
        return Ok(Some((hits, 0)));
    }
    launch(
        backend,
        &format!("compact_count_{suffix}"),
        blocks,
        vec![Arg::Ptr(ptr), Arg::Nd(md), Arg::I64(n), Arg::Ptr(counts.ptr)],
    )?;
    launch(backend, "compact_scan", 1, vec![Arg::Ptr(counts.ptr), Arg::I64(tiles)])?;
    let total = read_i64(backend, counts.ptr, tiles)?;
    let hits = scratch(backend, total * 8)?;
    if total > 0 {
        launch(
            backend,
            &format!("compact_write_{suffix}"),
            blocks,
            vec![
                Arg::Ptr(ptr),
                Arg::Nd(md),
                Arg::I64(n),
                Arg::Ptr(counts.ptr),
                Arg::Ptr(hits.ptr),
            ],
        )?;
    }
    Ok(Some((hits, total)))
}

fn nonzero(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let x = a.tensor(0, "self")?;
    let Some(md) = nd_of(&x.spec) else { return Ok(None) };
    let rank = x.spec.size.len() as i64;
    if rank == 0 {
        return Ok(None);
    }
    let Some((hits, n)) = compact(backend, x.spec.dtype, x.data_ptr(), md, x.spec.numel())? else {
        return Ok(None);
    };
    let storage = new_tensor(backend, DType::Int64, &[n * rank])?;
    if n > 0 {
        let shape = Nd::new(&x.spec.size, &crate::exec::contiguous_strides(&x.spec.size)).unwrap_or(md);
        launch(
            backend,
            "nonzero_coords",
            blocks_for(n),
            vec![
                Arg::Ptr(hits.ptr),
                Arg::I64(n),
                Arg::Nd(shape),
                Arg::Ptr(storage.data_ptr()),
            ],
        )?;
    }
    // ATen's layout: [n, rank] with strides (1, n).
    let out = backend.view(&storage, &[n, rank], &[1, n], 0)?;
    Ok(Some(Value::Tensor(out)))
}

/// The strides of `spec` broadcast to `shape` (0 on broadcast dimensions).
fn broadcast_strides(a: &Args<'_>, what: &str, spec: &TensorSpec, shape: &[i64]) -> Result<Vec<i64>, ExecError> {
    broadcast::broadcast_strides(&spec.size, &spec.stride, shape).ok_or_else(|| {
        a.err(format!(
            "`{what}` of shape {:?} cannot broadcast to {shape:?}",
            spec.size
        ))
    })
}

/// The broadcast of two shapes ([`broadcast::broadcast_shape`]).
fn broadcast_shape(a: &Args<'_>, x: &[i64], y: &[i64]) -> Result<Vec<i64>, ExecError> {
    broadcast::broadcast_shape(a, &[x, y])
}

/// Copies the rows of `src` picked by compaction hits into a new `[n, *rest]` tensor.
fn gather(
    backend: &mut CudaBackend,
    src: &CudaTensor,
    lead: Nd,
    rest_size: &[i64],
    rest_stride: &[i64],
    hits: u64,
    n: i64,
) -> Result<Option<CudaTensor>, ExecError> {
    let Some(rest) = Nd::new(rest_size, rest_stride) else {
        return Ok(None);
    };
    let inner: i64 = rest_size.iter().product();
    let mut shape = vec![n];
    shape.extend_from_slice(rest_size);
    let out = new_tensor(backend, src.spec.dtype, &shape)?;
    let width = src.spec.dtype.size_bytes();
    if n * inner > 0 {
        launch(
            backend,
            &format!("gather_hits_w{width}"),
            blocks_for(n * inner),
            vec![
                Arg::Ptr(src.data_ptr()),
                Arg::Nd(lead),
                Arg::Nd(rest),
                Arg::Ptr(hits),
                Arg::I64(n),
                Arg::I64(inner),
                Arg::Ptr(out.data_ptr()),
            ],
        )?;
    }
    Ok(Some(out))
}

fn masked_select(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let x = a.tensor(0, "self")?;
    let mask = a.tensor(1, "mask")?;
    if !matches!(mask.spec.dtype, DType::Bool | DType::Uint8) {
        return Err(a.err(format!("mask must be bool, got {}", mask.spec.dtype)));
    }
    if !matches!(x.spec.dtype.size_bytes(), 1 | 2 | 4 | 8) {
        return Ok(None);
    }
    let shape = broadcast_shape(a, &x.spec.size, &mask.spec.size)?;
    let (Some(md), Some(xd)) = (
        Nd::new(&shape, &broadcast_strides(a, "mask", &mask.spec, &shape)?),
        Nd::new(&shape, &broadcast_strides(a, "self", &x.spec, &shape)?),
    ) else {
        return Ok(None);
    };
    let Some((hits, n)) = compact(backend, mask.spec.dtype, mask.data_ptr(), md, shape.iter().product())? else {
        return Ok(None);
    };
    Ok(gather(backend, x, xd, &[], &[], hits.ptr, n)?.map(Value::Tensor))
}

/// `self[mask]` for one boolean mask over the leading dimensions.
fn index_with_mask(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let x = a.tensor(0, "self")?;
    let [Value::Tensor(mask)] = a.list(1, "indices")? else {
        return Ok(None);
    };
    if !matches!(mask.spec.dtype, DType::Bool | DType::Uint8) || !matches!(x.spec.dtype.size_bytes(), 1 | 2 | 4 | 8) {
        return Ok(None);
    }
    let k = mask.spec.size.len();
    if k > x.spec.size.len() || mask.spec.size[..] != x.spec.size[..k] {
        return Err(a.err(format!(
            "the shape of the mask {:?} does not match the shape of the indexed tensor {:?}",
            mask.spec.size, x.spec.size
        )));
    }
    let (Some(md), Some(lead)) = (nd_of(&mask.spec), Nd::new(&x.spec.size[..k], &x.spec.stride[..k])) else {
        return Ok(None);
    };
    let Some((hits, n)) = compact(backend, mask.spec.dtype, mask.data_ptr(), md, mask.spec.numel())? else {
        return Ok(None);
    };
    let (rest_size, rest_stride) = (x.spec.size[k..].to_vec(), x.spec.stride[k..].to_vec());
    Ok(gather(backend, x, lead, &rest_size, &rest_stride, hits.ptr, n)?.map(Value::Tensor))
}

/// The one offsets tensor of a jagged op: its device address, suffix and row count `B`.
fn offsets_of(a: &Args<'_>) -> Result<Option<(u64, &'static str, i64)>, ExecError> {
    let items = a.list(1, "offsets")?;
    let [Value::Tensor(o)] = items else {
        return Err(a.err(format!(
            "exactly one offsets tensor is supported (one jagged dimension), got {}",
            items.len()
        )));
    };
    let suffix = match o.spec.dtype {
        DType::Int32 => "o32",
        DType::Int64 => "o64",
        other => return Err(a.err(format!("offsets must be int32 or int64, got {other}"))),
    };
    if o.spec.size.len() != 1 || o.spec.size[0] < 1 {
        return Err(a.err(format!(
            "offsets must be 1-d with at least one element, got shape {:?}",
            o.spec.size
        )));
    }
    if o.spec.size[0] > 1 && o.spec.stride[0] != 1 {
        return Ok(None);
    }
    Ok(Some((o.data_ptr(), suffix, o.spec.size[0] - 1)))
}

fn jagged_to_padded(backend: &mut CudaBackend, a: &Args<'_>, values_name: &str, padding: f64) -> DeviceResult {
    let values = a.tensor(0, values_name)?;
    let Some((offsets, osuffix, b)) = offsets_of(a)? else {
        return Ok(None);
    };
    let max_lengths = a.ints(2, "max_lengths")?;
    let [n] = max_lengths[..] else {
        return Err(a.err(format!("expected one max length, got {}", max_lengths.len())));
    };
    if n < 0 {
        return Err(a.err(format!("max length {n} is negative")));
    }
    let spec = &values.spec;
    if spec.size.is_empty() {
        return Err(a.err("values must have at least one dimension"));
    }
    let width = spec.dtype.size_bytes();
    let Some(rest) = Nd::new(&spec.size[1..], &spec.stride[1..]) else {
        return Ok(None);
    };
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Ok(None);
    }
    let pad = host_storage_bytes(&Tensor::from_f64(spec.dtype, &[padding], &[1])?)?;
    let mut pad_bits = [0u8; 8];
    pad_bits[..pad.len().min(8)].copy_from_slice(&pad[..pad.len().min(8)]);
    let d: i64 = spec.size[1..].iter().product();
    let mut shape = vec![b, n];
    shape.extend_from_slice(&spec.size[1..]);
    let out = new_tensor(backend, spec.dtype, &shape)?;
    let total = b * n * d;
    if total > 0 {
        launch(
            backend,
            &format!("jagged_to_padded_w{width}_{osuffix}"),
            blocks_for(total),
            vec![
                Arg::Ptr(values.data_ptr()),
                Arg::I64(spec.size[0]),
                Arg::I64(spec.stride[0]),
                Arg::Nd(rest),
                Arg::Ptr(offsets),
                Arg::I64(b),
                Arg::I64(n),
                Arg::I64(d),
                Arg::Bits(u64::from_le_bytes(pad_bits)),
                Arg::Ptr(out.data_ptr()),
            ],
        )?;
    }
    Ok(Some(Value::Tensor(out)))
}

fn padded_to_jagged(backend: &mut CudaBackend, a: &Args<'_>, dense_name: &str, total: Option<i64>) -> DeviceResult {
    let dense = a.tensor(0, dense_name)?;
    let Some((offsets, osuffix, b)) = offsets_of(a)? else {
        return Ok(None);
    };
    let spec = &dense.spec;
    if spec.size.len() < 2 {
        return Err(a.err(format!(
            "dense must have at least 2 dimensions, got shape {:?}",
            spec.size
        )));
    }
    let width = spec.dtype.size_bytes();
    let Some(rest) = Nd::new(&spec.size[2..], &spec.stride[2..]) else {
        return Ok(None);
    };
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Ok(None);
    }
    let total = match total {
        Some(t) => t,
        // offsets[B], read back: the result size depends on it.
        None => {
            let elem = if osuffix == "o32" { 4 } else { 8 };
            let bytes = backend.read_device(offsets + (b as u64) * elem as u64, elem)?;
            if elem == 4 {
                i64::from(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
            } else {
                i64::from_le_bytes(bytes)
            }
        }
    };
    if total < 0 {
        return Err(a.err(format!("total_L = {total} is negative")));
    }
    let d: i64 = spec.size[2..].iter().product();
    let mut shape = vec![total];
    shape.extend_from_slice(&spec.size[2..]);
    let out = new_tensor(backend, spec.dtype, &shape)?;
    if total * d > 0 {
        launch(
            backend,
            &format!("padded_to_jagged_w{width}_{osuffix}"),
            blocks_for(total * d),
            vec![
                Arg::Ptr(dense.data_ptr()),
                Arg::I64(spec.size[0]),
                Arg::I64(spec.size[1]),
                Arg::I64(spec.stride[0]),
                Arg::I64(spec.stride[1]),
                Arg::Nd(rest),
                Arg::Ptr(offsets),
                Arg::I64(b),
                Arg::I64(total),
                Arg::I64(d),
                Arg::Ptr(out.data_ptr()),
            ],
        )?;
    }
    Ok(Some(Value::Tensor(out)))
}

/// A zeroed device `i64` that kernels set to 1 + the position of the first bad index.
fn error_flag(backend: &mut CudaBackend) -> Result<std::sync::Arc<crate::exec::cuda::Storage>, ExecError> {
    let flag = scratch(backend, 8)?;
    backend.zero(flag.ptr, 8)?;
    Ok(flag)
}

fn scatter(backend: &mut CudaBackend, a: &Args<'_>, mode: i32, include_self: bool) -> DeviceResult {
    let target = a.tensor(0, "self")?;
    let rank = target.spec.size.len();
    let dim = a.int(1, "dim", None)?;
    let d = if dim < 0 { dim + rank.max(1) as i64 } else { dim };
    if d < 0 || d >= rank.max(1) as i64 {
        return Err(a.err(format!("dimension {dim} out of range for rank {rank}")));
    }
    let index = a.tensor(2, "index")?;
    let Some(suffix) = dtype_suffix(target.spec.dtype).filter(|_| reducible(target.spec.dtype)) else {
        return Ok(None);
    };
    if index.spec.dtype != DType::Int64 || rank == 0 {
        return Ok(None);
    }
    if index.spec.size.len() != rank {
        return Err(a.err(format!(
            "index has rank {} but self has rank {rank}",
            index.spec.size.len()
        )));
    }
    for (k, (i, s)) in index.spec.size.iter().zip(&target.spec.size).enumerate() {
        if k as i64 != d && i > s {
            return Err(a.err(format!("index size {i} exceeds self size {s} in dimension {k}")));
        }
    }
    let (src_ptr, src_nd, has_src, value) = match a.get(3, "src").or_else(|| a.get(3, "value")) {
        Some(Value::Tensor(s)) => {
            if s.spec.dtype != target.spec.dtype {
                return Ok(None);
            }
            if s.spec.size.len() != rank || index.spec.size.iter().zip(&s.spec.size).any(|(i, s)| i > s) {
                return Err(a.err(format!(
                    "index of shape {:?} is larger than src of shape {:?}",
                    index.spec.size, s.spec.size
                )));
            }
            let Some(nd) = Nd::new(&index.spec.size, &s.spec.stride) else {
                return Ok(None);
            };
            (s.data_ptr(), nd, 1, 0.0)
        }
        Some(v) => {
            let f = v.as_float().ok_or_else(|| a.err("scalar src must be a number"))?;
            (0, rank0_nd(), 0, f)
        }
        None => return Err(a.err("missing `src` / `value`")),
    };
    let (Some(sd), Some(ind)) = (nd_of(&target.spec), nd_of(&index.spec)) else {
        return Ok(None);
    };
    let n = index.spec.numel();
    if n == 0 {
        return Ok(Some(Value::Tensor(target.clone())));
    }
    let flag = error_flag(backend)?;
    let name = format!("scatter_{suffix}");
    let passes: &[i32] = if include_self || mode == MODE_ASSIGN {
        &[mode]
    } else {
        &[MODE_IDENTITY + mode, mode]
    };
    for m in passes {
        let args = vec![
            Arg::Ptr(target.data_ptr()),
            Arg::Nd(sd),
            Arg::I32(d as i32),
            Arg::Ptr(index.data_ptr()),
            Arg::Nd(ind),
            Arg::Ptr(src_ptr),
            Arg::Nd(src_nd),
            Arg::I32(has_src),
            Arg::F64(value),
            Arg::I32(*m),
            Arg::I64(n),
            Arg::Ptr(flag.ptr),
        ];
        launch(backend, &name, blocks_for(n), args)?;
    }
    let bad = read_i64(backend, flag.ptr, 0)?;
    if bad != 0 {
        return Err(a.err(format!(
            "index element {} is out of bounds for dimension {d} of size {}",
            bad - 1,
            target.spec.size[d as usize]
        )));
    }
    Ok(Some(Value::Tensor(target.clone())))
}

/// An `Nd` of rank 0 (the unused source layout of a scalar scatter).
fn rank0_nd() -> Nd {
    Nd {
        size: [1; MAX_RANK],
        stride: [0; MAX_RANK],
        rank: 0,
    }
}

fn index_put(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let target = a.tensor(0, "self")?;
    let items = a.list(1, "indices")?;
    let values = a.tensor(2, "values")?;
    let accumulate = a.boolean(3, "accumulate", false)?;
    let Some(suffix) = dtype_suffix(target.spec.dtype).filter(|_| reducible(target.spec.dtype)) else {
        return Ok(None);
    };
    if values.spec.dtype != target.spec.dtype
        || items.is_empty()
        || items.len() > 4
        || items.len() > target.spec.size.len()
    {
        return Ok(None);
    }
    let mut index: Vec<&CudaTensor> = Vec::new();
    for item in items {
        match item {
            Value::Tensor(t) if t.spec.dtype == DType::Int64 => index.push(t),
            // None slices and boolean masks stay on the host path.
            _ => return Ok(None),
        }
    }
    let mut ishape: Vec<i64> = index[0].spec.size.clone();
    for t in &index[1..] {
        ishape = broadcast_shape(a, &ishape, &t.spec.size)?;
    }
    let k = index.len();
    let tail_size = target.spec.size[k..].to_vec();
    let mut ix = Indices {
        ptr: [0; 4],
        stride: [[0; MAX_RANK]; 4],
        count: k as i64,
    };
    for (q, t) in index.iter().enumerate() {
        let strides = broadcast_strides(a, "indices", &t.spec, &ishape)?;
        if strides.len() > MAX_RANK {
            return Ok(None);
        }
        ix.ptr[q] = t.data_ptr();
        ix.stride[q][..strides.len()].copy_from_slice(&strides);
    }
    let mut vshape = ishape.clone();
    vshape.extend_from_slice(&tail_size);
    let vstrides = broadcast_strides(a, "values", &values.spec, &vshape)?;
    let (Some(sd), Some(tail), Some(ind), Some(vd)) = (
        nd_of(&target.spec),
        Nd::new(&tail_size, &target.spec.stride[k..]),
        Nd::new(&ishape, &crate::exec::contiguous_strides(&ishape)),
        Nd::new(&vshape, &vstrides),
    ) else {
        return Ok(None);
    };
    let n: i64 = vshape.iter().product();
    if n == 0 {
        return Ok(Some(Value::Tensor(target.clone())));
    }
    let flag = error_flag(backend)?;
    let mode = if accumulate { MODE_SUM } else { MODE_ASSIGN };
    launch(
        backend,
        &format!("index_put_{suffix}"),
        blocks_for(n),
        vec![
            Arg::Ptr(target.data_ptr()),
            Arg::Nd(sd),
            Arg::Nd(tail),
            Arg::Indices(Box::new(ix)),
            Arg::Nd(ind),
            Arg::Ptr(values.data_ptr()),
            Arg::Nd(vd),
            Arg::I32(mode),
            Arg::I64(n),
            Arg::Ptr(flag.ptr),
        ],
    )?;
    let bad = read_i64(backend, flag.ptr, 0)?;
    if bad != 0 {
        return Err(a.err(format!(
            "index tuple {} is out of bounds for self of shape {:?}",
            bad - 1,
            target.spec.size
        )));
    }
    Ok(Some(Value::Tensor(target.clone())))
}

fn topk(backend: &mut CudaBackend, a: &Args<'_>) -> DeviceResult {
    let x = a.tensor(0, "self")?;
    let k = a.int(1, "k", None)?;
    let rank = x.spec.size.len();
    let dim = a.int(2, "dim", Some(-1))?;
    let largest = a.boolean(3, "largest", true)?;
    let Some(suffix) = dtype_suffix(x.spec.dtype).filter(|_| reducible(x.spec.dtype)) else {
        return Ok(None);
    };
    if rank == 0 || x.spec.stride != crate::exec::contiguous_strides(&x.spec.size) {
        return Ok(None);
    }
    let d = if dim < 0 { dim + rank as i64 } else { dim };
    if d < 0 || d >= rank as i64 {
        return Err(a.err(format!("dimension {dim} out of range for rank {rank}")));
    }
    let d = d as usize;
    let len = x.spec.size[d];
    if k < 0 || k > len {
        return Err(a.err(format!("k = {k} is out of range for dimension of size {len}")));
    }
    let outer: i64 = x.spec.size[..d].iter().product();
    let inner: i64 = x.spec.size[d + 1..].iter().product();
    let mut shape = x.spec.size.clone();
    shape[d] = k;
    let values = new_tensor(backend, x.spec.dtype, &shape)?;
    let indices = new_tensor(backend, DType::Int64, &shape)?;
    if outer * inner * k > 0 {
        launch(
            backend,
            &format!("topk_{suffix}"),
            blocks_for(outer * inner),
            vec![
                Arg::Ptr(x.data_ptr()),
                Arg::I64(outer),
                Arg::I64(len),
                Arg::I64(inner),
                Arg::I64(k),
                Arg::I32(i32::from(largest)),
                Arg::Ptr(values.data_ptr()),
                Arg::Ptr(indices.data_ptr()),
            ],
        )?;
    }
    Ok(Some(Value::List(vec![Value::Tensor(values), Value::Tensor(indices)])))
}

/// Copies `src` (`size` elements laid out by `src_stride`, stride 0 on
/// broadcast dimensions) into `dst` (same sizes, any strides) on the device:
/// the bias of the GEMM ops expanded into their result.
pub(in crate::exec::cuda) fn copy_strided(
    backend: &mut CudaBackend,
    src: &CudaTensor,
    src_stride: &[i64],
    dst: &CudaTensor,
) -> Result<(), ExecError> {
    let n = dst.spec.numel();
    if n == 0 {
        return Ok(());
    }
    let width = dst.spec.dtype.size_bytes();
    let (Some(sd), Some(dd)) = (Nd::new(&dst.spec.size, src_stride), nd_of(&dst.spec)) else {
        return Err(ExecError::op(
            "strided_copy",
            format!("more than {MAX_RANK} dimensions"),
        ));
    };
    if !matches!(width, 1 | 2 | 4 | 8) || src.spec.dtype.size_bytes() != width {
        return Err(ExecError::op(
            "strided_copy",
            format!("cannot copy {} into {}", src.spec.dtype, dst.spec.dtype),
        ));
    }
    launch(
        backend,
        &format!("strided_copy_w{width}"),
        blocks_for(n),
        vec![
            Arg::Ptr(src.data_ptr()),
            Arg::Nd(sd),
            Arg::Ptr(dst.data_ptr()),
            Arg::Nd(dd),
            Arg::I64(n),
        ],
    )
}

/// Applies `relu_` or `gelu_(approximate="tanh")` to `t` in place (f32, f16, bf16).
pub(in crate::exec::cuda) fn gemm_activation(
    backend: &mut CudaBackend,
    t: &CudaTensor,
    gelu: bool,
) -> Result<(), ExecError> {
    let n = t.spec.numel();
    if n == 0 {
        return Ok(());
    }
    let suffix = match t.spec.dtype {
        DType::Float32 => "f32",
        DType::Float16 => "f16",
        DType::Bfloat16 => "bf16",
        d => return Err(ExecError::op("gemm_activation", format!("dtype {d}"))),
    };
    let Some(d) = nd_of(&t.spec) else {
        return Err(ExecError::op(
            "gemm_activation",
            format!("more than {MAX_RANK} dimensions"),
        ));
    };
    launch(
        backend,
        &format!("gemm_activation_{suffix}"),
        blocks_for(n),
        vec![
            Arg::Ptr(t.data_ptr()),
            Arg::Nd(d),
            Arg::I32(i32::from(gelu)),
            Arg::I64(n),
        ],
    )
}
