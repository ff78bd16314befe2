//! The host backend's built-in extern ops.

use super::builtin::{norm_dim, split_at};
pub(crate) use super::builtin::{Args, Builtin, BuiltinOptions};
use super::gemm_ops;
use super::jagged::{self, Overflow};
use super::pointwise;
use super::tensor::Tensor;
use crate::exec::op::ExternOp;
use crate::exec::{ExecError, Value};
use crate::ir::DType;

/// The host's built-in implementation of `op` (`None`: the host has none;
/// the catalogue's `host` column says the same, which a test checks).
pub(crate) fn builtin(op: &ExternOp) -> Option<Builtin> {
    use ExternOp as E;
    Some(match op {
        E::JaggedToPaddedDenseForward => j2pd,
        E::PaddedDenseToJaggedForward => pd2j,
        E::JaggedToPaddedDenseBackward => j2pd_backward,
        E::PaddedDenseToJaggedBackward => pd2j_backward,
        E::InverseOffsets => inverse_offsets,
        E::Mm => gemm_ops::mm,
        E::Addmm => gemm_ops::addmm,
        E::AddmmActivation => gemm_ops::addmm_activation,
        E::Baddbmm => gemm_ops::baddbmm,
        E::Addbmm => gemm_ops::addbmm,
        E::BiasAddmm => gemm_ops::bias_addmm,
        E::Convolution => super::conv::convolution,
        E::Bmm => gemm_ops::bmm,
        E::Nonzero => nonzero,
        E::MaskedSelect => masked_select,
        E::Index => index,
        E::Item => item,
        E::Cumsum => cumsum,
        E::Histc => super::histc::histc,
        E::GroupedMmFallback => super::grouped_mm::grouped_mm_fallback,
        E::GroupedMm => super::grouped_mm::grouped_mm,
        E::IndexPut => index_put,
        E::Scatter => scatter,
        E::ScatterReduce => scatter_reduce,
        E::Topk => super::sort::topk,
        E::Sort => super::sort::sort,
        E::IntMm => super::int_gemm::int_mm,
        E::ScaledMm => super::scaled_mm::scaled_mm,
        E::MkldnnRnnLayer => super::rnn::mkldnn_rnn_layer,
        E::CudnnRnn => super::rnn::cudnn_rnn,
        E::Copy => copy,
        E::Clone => clone,
        E::Permute => permute,
        E::Add => pointwise::add,
        E::Sub => pointwise::sub,
        E::Mul => pointwise::mul,
        E::Div => pointwise::div,
        E::Neg => pointwise::neg,
        E::Relu => pointwise::relu,
        E::Exp => pointwise::exp,
        E::Sin => pointwise::sin,
        E::Where => pointwise::where_,
        E::ViewAsComplex => super::complex::view_as_complex,
        E::ViewAsReal => super::complex::view_as_real,
        E::View => super::complex::view,
        E::SegmentReduce => super::segment::segment_reduce,
        E::Randint => super::random::randint,
        E::RoiAlign => super::detection::roi_align,
        E::Nms => super::detection::nms,
        E::SdpaEfficient | E::SdpaFlash | E::SdpaCudnn | E::SdpaFlashCpu => return super::attention::builtin(op),
        E::ScatterAdd | E::ConvolutionInternal | E::Other => return None,
    })
}

/// A `torch.ops.streams.*` op, in program order ([`crate::exec::op::stream`]).
pub(crate) fn stream_op(a: &Args<'_>, _o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    crate::exec::op::stream::run_in_order(a.op, a.args, a.kwargs)
}

/// `jagged_to_padded` of argument 0 (named `name`) by the offsets (1) and
/// max lengths (2), padded with what `padding` reads (after those).
fn to_padded(
    a: &Args<'_>,
    o: &BuiltinOptions,
    name: &str,
    padding: impl FnOnce() -> Result<f64, ExecError>,
) -> Result<Value<Tensor>, ExecError> {
    let values = a.tensor(0, name)?;
    let offsets = a.tensors(1, "offsets")?;
    let max_lengths = a.ints(2, "max_lengths")?;
    let padding = padding()?;
    let padded = jagged::jagged_to_padded(a.op, values, &offsets, &max_lengths, padding, o.max_alloc_bytes())?;
    Ok(Value::Tensor(padded))
}

/// `padded_to_jagged` of argument 0 (named `name`) by the offsets (1), with
/// the rows `total` reads (after those).
fn to_jagged(
    a: &Args<'_>,
    name: &str,
    total: impl FnOnce() -> Result<Option<i64>, ExecError>,
    overflow: Overflow,
) -> Result<Value<Tensor>, ExecError> {
    let dense = a.tensor(0, name)?;
    let offsets = a.tensors(1, "offsets")?;
    let total = total()?;
    let jagged = jagged::padded_to_jagged(a.op, dense, &offsets, total, overflow)?;
    Ok(Value::Tensor(jagged))
}

fn j2pd(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    to_padded(a, o, "values", || a.float(3, "padding_value", 0.0))
}

fn pd2j(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    to_jagged(a, "dense", || a.opt_int(2, "total_L"), o.jagged_overflow)
}

/// Gradient of j2pd w.r.t. values: `[total_L, *rest]`, zero where the forward truncated.
fn j2pd_backward(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    to_jagged(
        a,
        "grad_output",
        || a.int(2, "total_L", None).map(Some),
        Overflow::ZeroFill,
    )
}

/// Gradient of pd2j w.r.t. dense: j2pd with padding 0.
fn pd2j_backward(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    to_padded(a, o, "grad_output", || Ok(0.0))
}

fn inverse_offsets(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let offsets = a.tensor(0, "offsets")?;
    let total = a.opt_int(1, "total_L")?;
    Ok(Value::Tensor(jagged::inverse_offsets_tensor(a.op, offsets, total)?))
}

/// `[N, ndim]` int64 indices of non-zero elements, laid out like ATen's
/// (column-major: strides `(1, N)`).
fn nonzero(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let v = x.to_f64_vec()?;
    let rank = x.dim();
    let mut hits: Vec<Vec<i64>> = Vec::new();
    let mut idx = vec![0i64; rank];
    for val in &v {
        if *val != 0.0 {
            hits.push(idx.clone());
        }
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < x.size()[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let n = hits.len();
    let mut col_major = vec![0i64; n * rank];
    for (i, h) in hits.iter().enumerate() {
        for (d, c) in h.iter().enumerate() {
            col_major[d * n + i] = *c;
        }
    }
    let storage = Tensor::from_vec(col_major, &[(n * rank) as i64])?;
    Ok(Value::Tensor(storage.view(
        &[n as i64, rank as i64],
        &[1, n as i64],
        0,
    )?))
}

/// `masked_select(self, mask)`: the elements of `self` where the boolean
/// `mask` is set, both broadcast to one shape, in row-major order, as a 1-D
/// tensor of `self`'s dtype (values copied exactly, in the storage type).
fn masked_select(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let mask = a.tensor(1, "mask")?;
    if mask.dtype() != DType::Bool {
        return Err(a.err(format!("`mask` must be a bool tensor, got {}", mask.dtype())));
    }
    let shape = super::broadcast::broadcast_shape(a, &[x.size(), mask.size()])?;
    let keep = mask.expand(&shape)?.to_i64_vec()?;
    let xe = x.expand(&shape)?;
    let n = keep.iter().filter(|k| **k != 0).count();
    crate::Limits::check(
        crate::Limit::AllocBytes,
        (n as u64).saturating_mul(x.dtype().size_bytes()),
        o.max_alloc_bytes(),
        format!("op `{}`: the result of {n} elements", a.op),
    )?;
    let len = i64::try_from(n).map_err(|_| a.err("too many elements"))?;
    let t = super::tensor::with_dtype!(x.dtype(), T => {
        let v: Vec<T> = xe.to_vec::<T>()?;
        let picked: Vec<T> = v.into_iter().zip(&keep).filter(|(_, k)| **k != 0).map(|(e, _)| e).collect();
        Tensor::from_vec(picked, &[len])?
    }, return Err(a.err(format!("dtype {} is not supported", x.dtype()))));
    Ok(Value::Tensor(t))
}

/// `index.Tensor(self, indices)` with one boolean mask over `self`'s leading
/// dimensions (`x[mask]`, the form Inductor leaves to ATen: the count is
/// data-dependent): the rows where the mask is set, in row-major order, as a
/// contiguous `[count, *self.shape[mask.dim():]]` of `self`'s dtype (ATen's
/// layout for it, whatever `self`'s strides). Integer index tensors, and
/// masks elsewhere than first, are refused by name: Inductor gathers those in
/// its own kernels.
fn index(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let indices = a.list(1, "indices")?;
    let mask = match indices {
        [Value::Tensor(m)] if matches!(m.dtype(), DType::Bool | DType::Uint8) => m,
        _ => {
            return Err(a.err(
                "the host takes one boolean mask over the leading dimensions (`x[mask]`); other advanced \
                 indexing is not built in",
            ))
        }
    };
    let k = mask.dim();
    if k > x.dim() || mask.size() != &x.size()[..k] {
        return Err(a.err(format!(
            "the mask {:?} does not match the indexed tensor's leading dimensions {:?}",
            mask.size(),
            x.size()
        )));
    }
    let keep = mask.to_i64_vec()?;
    let count = keep.iter().filter(|v| **v != 0).count();
    let rest = &x.size()[k..];
    let mut shape = vec![i64::try_from(count).map_err(|_| a.err("too many rows"))?];
    shape.extend_from_slice(rest);
    a.result_elements(&shape, x.dtype().size_bytes(), o.max_alloc_bytes())?;
    // A row's element count, checked: `self` may hold no rows and still
    // declare trailing sizes whose product overflows.
    let row = rest
        .iter()
        .try_fold(1usize, |n, &d| usize::try_from(d).ok().and_then(|d| n.checked_mul(d)))
        .ok_or_else(|| a.err(format!("the rows of {:?} have too many elements", x.size())))?;
    let t = super::tensor::with_dtype!(x.dtype(), T => {
        let v: Vec<T> = x.to_vec::<T>()?;
        let mut picked: Vec<T> = Vec::with_capacity(count * row);
        for (r, _) in keep.iter().enumerate().filter(|(_, k)| **k != 0) {
            picked.extend_from_slice(&v[r * row..(r + 1) * row]);
        }
        Tensor::from_vec(picked, &shape)?
    }, return Err(a.err(format!("dtype {} is not supported", x.dtype()))));
    Ok(Value::Tensor(t))
}

fn item(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    if x.numel() != 1 {
        return Err(a.err(format!("item() needs one element, the tensor has {}", x.numel())));
    }
    Ok(match x.dtype() {
        DType::Bool => Value::Bool(x.to_i64_vec()?[0] != 0),
        d if d.is_floating() => Value::Float(x.to_f64_vec()?[0]),
        _ => Value::Int(x.to_i64_vec()?[0]),
    })
}

fn cumsum(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let d = norm_dim(a, a.int(1, "dim", None)?, x.dim())?;
    let out_dtype = match a.get(2, "dtype") {
        Some(Value::DType(t)) => *t,
        _ if x.dtype().is_floating() => x.dtype(),
        _ => DType::Int64,
    };
    let shape = x.size().to_vec();
    let (outer, len, inner) = if x.dim() == 0 { (1, 1, 1) } else { split_at(&shape, d) };
    if out_dtype.is_floating() {
        let mut v = x.to_f64_vec()?;
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0.0;
                for k in 0..len {
                    let p = (o * len + k) * inner + i;
                    acc += v[p];
                    v[p] = acc;
                }
            }
        }
        Ok(Value::Tensor(Tensor::from_f64(out_dtype, &v, &shape)?))
    } else {
        let mut v = x.to_i64_vec()?;
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0i64;
                for k in 0..len {
                    let p = (o * len + k) * inner + i;
                    acc = acc.wrapping_add(v[p]);
                    v[p] = acc;
                }
            }
        }
        Ok(Value::Tensor(Tensor::from_i64(out_dtype, &v, &shape)?))
    }
}

/// `target[indices] = values` (or `+=` with accumulate) for index tensors on
/// the leading dimensions (`None` = full slice), broadcast together.
fn index_put(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let target = a.tensor(0, "self")?;
    let Some(Value::List(index_values)) = a.get(1, "indices") else {
        return Err(a.err("`indices` must be a list of tensors or None"));
    };
    let values = a.tensor(2, "values")?;
    let accumulate = a.boolean(3, "accumulate", false)?;
    let rank = target.dim();
    if index_values.len() > rank {
        return Err(a.err(format!("{} indices for a {rank}-d tensor", index_values.len())));
    }
    // Index tensors: all given ones must share a shape (after broadcasting to the first).
    let mut idx: Vec<Option<Vec<i64>>> = Vec::new();
    let mut idx_shape: Option<Vec<i64>> = None;
    for v in index_values {
        match v {
            Value::None => idx.push(None),
            Value::Tensor(t) => {
                if t.dtype() == DType::Bool {
                    return Err(a.err("boolean mask indices are not supported; use nonzero first"));
                }
                let shape = idx_shape.get_or_insert_with(|| t.size().to_vec()).clone();
                idx.push(Some(t.expand(&shape)?.to_i64_vec()?));
            }
            other => return Err(a.err(format!("index must be a tensor or None, got {}", other.kind()))),
        }
    }
    let Some(ishape) = idx_shape else {
        return Err(a.err("at least one index tensor is required"));
    };
    let n_idx: usize = ishape.iter().product::<i64>() as usize;
    // Each selected position: index tuple for the leading dims, full ranges for the rest.
    let lead = idx.len();
    let tail: Vec<i64> = target.size()[lead..].to_vec();
    let tail_n: usize = tail.iter().product::<i64>() as usize;
    let slice_dims: Vec<usize> = (0..lead).filter(|d| idx[*d].is_none()).collect();
    let slice_n: usize = slice_dims.iter().map(|d| target.size()[*d] as usize).product();
    let mut out_shape = ishape.clone();
    out_shape.extend(slice_dims.iter().map(|d| target.size()[*d]));
    out_shape.extend_from_slice(&tail);
    let vals = values.expand(&out_shape)?;
    let float = target.dtype().is_floating();
    let vf = if float { vals.to_f64_vec()? } else { Vec::new() };
    let vi = if float { Vec::new() } else { vals.to_i64_vec()? };
    let mut tf = if float { target.to_f64_vec()? } else { Vec::new() };
    let mut ti = if float { Vec::new() } else { target.to_i64_vec()? };
    let tstride = crate::exec::contiguous_strides(target.size());
    let mut k = 0usize;
    for p in 0..n_idx {
        for s in 0..slice_n {
            // Decompose s over the sliced dims.
            let mut rem = s;
            let mut coords = vec![0i64; lead];
            for d in slice_dims.iter().rev() {
                let sz = target.size()[*d] as usize;
                coords[*d] = (rem % sz) as i64;
                rem /= sz;
            }
            for d in 0..lead {
                if let Some(iv) = &idx[d] {
                    let mut c = iv[p];
                    let sz = target.size()[d];
                    if c < 0 {
                        c += sz;
                    }
                    if c < 0 || c >= sz {
                        return Err(a.err(format!(
                            "index {} is out of bounds for dimension {d} of size {sz}",
                            iv[p]
                        )));
                    }
                    coords[d] = c;
                }
            }
            let base: i64 = coords.iter().zip(&tstride).map(|(c, s)| c * s).sum();
            for t in 0..tail_n {
                let pos = base as usize + t;
                if float {
                    tf[pos] = if accumulate { tf[pos] + vf[k] } else { vf[k] };
                } else {
                    ti[pos] = if accumulate { ti[pos].wrapping_add(vi[k]) } else { vi[k] };
                }
                k += 1;
            }
        }
    }
    if float {
        target.write_f64(&tf)?;
    } else {
        target.write_i64(&ti)?;
    }
    Ok(Value::Tensor(target.clone()))
}

/// Visits every element of `index` (shape-compatible with `target` except along `dim`):
/// calls `f(target_position, index_element_position)`.
fn scatter_positions(
    a: &Args<'_>,
    target: &Tensor,
    dim: usize,
    index: &[i64],
    index_shape: &[i64],
    f: &mut dyn FnMut(usize, usize),
) -> Result<(), ExecError> {
    let rank = target.dim();
    if index_shape.len() != rank {
        return Err(a.err(format!("index has rank {} but self has rank {rank}", index_shape.len())));
    }
    let tstride = crate::exec::contiguous_strides(target.size());
    let mut coord = vec![0i64; rank];
    for (k, iv) in index.iter().enumerate() {
        let sz = target.size()[dim];
        let c = if *iv < 0 { iv + sz } else { *iv };
        if c < 0 || c >= sz {
            return Err(a.err(format!("index {iv} is out of bounds for dimension {dim} of size {sz}")));
        }
        let mut pos = 0i64;
        for d in 0..rank {
            let cd = if d == dim { c } else { coord[d] };
            if d != dim && cd >= target.size()[d] {
                return Err(a.err("index is larger than self outside the scatter dimension"));
            }
            pos += cd * tstride[d];
        }
        f(pos as usize, k);
        for d in (0..rank).rev() {
            coord[d] += 1;
            if coord[d] < index_shape[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    Ok(())
}

fn scatter_common(a: &Args<'_>, reduce: Option<&str>, include_self: bool) -> Result<Value<Tensor>, ExecError> {
    let target = a.tensor(0, "self")?;
    let dim = norm_dim(a, a.int(1, "dim", None)?, target.dim())?;
    let index_t = a.tensor(2, "index")?;
    let index = index_t.to_i64_vec()?;
    let src: Vec<f64> = match a.get(3, "src").or_else(|| a.get(3, "value")) {
        Some(Value::Tensor(s)) => {
            // src is read at the index's positions: the index-shaped corner of src.
            s.view(index_t.size(), s.stride(), s.spec().offset)?.to_f64_vec()?
        }
        Some(v) => vec![v.as_float().ok_or_else(|| a.err("scalar src must be a number"))?; index.len()],
        None => return Err(a.err("missing `src` / `value`")),
    };
    let mut t = target.to_f64_vec()?;
    let mut count = vec![if include_self { 1usize } else { 0 }; t.len()];
    let mut touched = vec![false; t.len()];
    let mut pending: Vec<(usize, f64)> = Vec::new();
    scatter_positions(a, target, dim, &index, index_t.size(), &mut |pos, k| {
        pending.push((pos, src[k]))
    })?;
    for (pos, v) in pending {
        let first = !touched[pos];
        touched[pos] = true;
        let cur = if first && !include_self { None } else { Some(t[pos]) };
        t[pos] = match (reduce, cur) {
            (None, _) => v,
            (Some(_), None) => v,
            (Some("add" | "sum" | "mean"), Some(c)) => c + v,
            (Some("multiply" | "prod"), Some(c)) => c * v,
            (Some("amax"), Some(c)) => c.max(v),
            (Some("amin"), Some(c)) => c.min(v),
            (Some(r), _) => return Err(a.err(format!("unknown reduction `{r}`"))),
        };
        count[pos] += 1;
    }
    if reduce == Some("mean") {
        for (p, c) in count.iter().enumerate() {
            if touched[p] && *c > 0 {
                t[p] /= *c as f64;
                if !target.dtype().is_floating() {
                    t[p] = t[p].floor();
                }
            }
        }
    }
    target.write_f64(&t)?;
    Ok(Value::Tensor(target.clone()))
}

fn scatter(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let reduce = a.string(4, "reduce")?;
    scatter_common(a, reduce, true)
}

fn scatter_reduce(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let reduce = a.string(4, "reduce")?.ok_or_else(|| a.err("missing `reduce`"))?;
    let include_self = a.boolean(5, "include_self", true)?;
    scatter_common(a, Some(reduce), include_self)
}

fn copy(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let dst = a.tensor(0, "self")?;
    let src = a.tensor(1, "src")?;
    dst.copy_from(&src.expand(dst.size())?)?;
    Ok(Value::Tensor(dst.clone()))
}

/// `aten.clone(self, *, memory_format=None)`: a copy, laid out as
/// `empty_like` lays it out (`None` or `torch.preserve_format`: a dense
/// tensor keeps its strides) or contiguous (`torch.contiguous_format`).
fn clone(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    // `memory_format` is keyword-only.
    let preserve = match a.get(usize::MAX, "memory_format") {
        None | Some(Value::None) => true,
        Some(Value::Str(f)) if f.ends_with("preserve_format") => true,
        Some(Value::Str(f)) if f.ends_with("contiguous_format") => false,
        Some(other) => {
            return Err(a.err(format!(
                "memory_format {other:?} is not supported (preserve_format or contiguous_format)"
            )))
        }
    };
    let copy = x.contiguous_copy()?;
    if !preserve {
        return Ok(Value::Tensor(copy));
    }
    let stride = super::layout::infer_dense_strides(x.size(), x.stride());
    Ok(Value::Tensor(super::layout::with_strides(copy, stride)?))
}

/// `aten.permute(self, dims)`: a view with the sizes and strides reordered
/// (`dims` a permutation of the dimensions; negative ones count from the end).
fn permute(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let dims = a.ints(1, "dims")?;
    let rank = x.dim();
    if dims.len() != rank {
        return Err(a.err(format!(
            "dims {dims:?} has {} entries for a tensor of rank {rank}",
            dims.len()
        )));
    }
    let mut seen = vec![false; rank];
    let mut size = Vec::with_capacity(rank);
    let mut stride = Vec::with_capacity(rank);
    for &d in &dims {
        let k = if d < 0 {
            i64::try_from(rank).ok().and_then(|r| d.checked_add(r))
        } else {
            Some(d)
        };
        let k = k
            .and_then(|k| usize::try_from(k).ok())
            .filter(|k| *k < rank && !seen[*k])
            .ok_or_else(|| a.err(format!("dims {dims:?} is not a permutation of {rank} dimensions")))?;
        seen[k] = true;
        size.push(x.size()[k]);
        stride.push(x.stride()[k]);
    }
    x.view(&size, &stride, x.spec().offset)
        .map(Value::Tensor)
        .map_err(|e| a.err(e.to_string()))
}
