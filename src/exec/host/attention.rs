//! Scaled-dot-product attention, the fused ops Inductor leaves as fallback
//! extern calls: `aten._scaled_dot_product_efficient_attention`,
//! `aten._scaled_dot_product_flash_attention`,
//! `aten._scaled_dot_product_cudnn_attention` and
//! `aten._scaled_dot_product_flash_attention_for_cpu` (forward, inference:
//! `dropout_p` must be 0).
//!
//! This module holds what every backend shares: argument parsing and checks
//! ([`parse`]), the layouts of the results as PyTorch gives them
//! ([`out_layout`], [`lse_layout`], [`result_items`]), and the host
//! implementation (computed in `f64`, the output rounded to its dtype once),
//! which is also the reference of the CUDA kernels' tests.
//!
//! Semantics, as ATen's kernels define them:
//! * `scores = q @ k^T * scale + bias`, `scale` defaulting to `1/sqrt(E)`;
//! * `is_causal` masks key `j` for query `i` when `j > i` (upper-left
//!   aligned, `tril(ones(L, S))`);
//! * `attn_bias` broadcasts to `[B, H, L, S]` (any strides, stride 0 on
//!   broadcast dimensions); the CUDA ops require it to have the query's dtype
//!   (ATen checks the same), the CPU op also takes a boolean mask (`False`
//!   masks);
//! * key/value may have fewer heads than the query (`H % Hkv == 0`): query
//!   head `h` reads key/value head `h / (H / Hkv)`; expanded views (head
//!   stride 0) need nothing special;
//! * `logsumexp = max + ln(sum(exp(scores - max)))` per query row, in `f32`
//!   (natural log);
//! * a row whose scores are all `-inf` gives NaN and log-sum-exp `-inf`
//!   (memory-efficient, cuDNN and CPU flash attention), or 0 and
//!   log-sum-exp `+inf` (CUDA flash attention's convention); with no keys
//!   (`S = 0`) the output is 0.

use super::builtin::{Args, BuiltinOptions};
use super::layout::infer_dense_strides;
use super::tensor::Tensor;
use crate::exec::op::{self, ExternOp};
use crate::exec::{ExecError, TensorSpec, Value};
use crate::ir::DType;
use rayon::prelude::*;

/// Which of the fused attention ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `aten._scaled_dot_product_efficient_attention`.
    Efficient,
    /// `aten._scaled_dot_product_flash_attention`.
    Flash,
    /// `aten._scaled_dot_product_cudnn_attention`.
    Cudnn,
    /// `aten._scaled_dot_product_flash_attention_for_cpu`.
    FlashCpu,
}

impl Kind {
    /// The attention op `op` is, if it is one.
    pub(crate) fn of(op: &ExternOp) -> Option<Kind> {
        Some(match op {
            ExternOp::SdpaEfficient => Kind::Efficient,
            ExternOp::SdpaFlash => Kind::Flash,
            ExternOp::SdpaCudnn => Kind::Cudnn,
            ExternOp::SdpaFlashCpu => Kind::FlashCpu,
            _ => return None,
        })
    }
}

/// Positional index of keyword-only arguments (never given by position).
const KW_ONLY: usize = usize::MAX;

/// The sizes of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dims {
    /// Batch.
    pub(crate) b: i64,
    /// Query heads.
    pub(crate) h: i64,
    /// Key/value heads (divides `h`).
    pub(crate) hk: i64,
    /// Query length.
    pub(crate) l: i64,
    /// Key/value length.
    pub(crate) s: i64,
    /// Query/key head dim.
    pub(crate) e: i64,
    /// Value head dim.
    pub(crate) ev: i64,
}

/// A parsed, checked call.
#[derive(Debug)]
pub(crate) struct Call<'a, T> {
    /// The op.
    pub(crate) kind: Kind,
    /// `[B, H, L, E]`.
    pub(crate) q: &'a T,
    /// `[B, Hkv, S, E]`.
    pub(crate) k: &'a T,
    /// `[B, Hkv, S, Ev]`.
    pub(crate) v: &'a T,
    /// The additive bias (or boolean mask, CPU op only) and its strides broadcast to `[B, H, L, S]`.
    pub(crate) bias: Option<(&'a T, [i64; 4])>,
    /// Sizes.
    pub(crate) dims: Dims,
    /// `is_causal`.
    pub(crate) causal: bool,
    /// The softmax scale (the default already applied).
    pub(crate) scale: f64,
    /// Whether the log-sum-exp is to be computed (always for flash, cuDNN, CPU flash).
    pub(crate) compute_lse: bool,
}

impl<T> Call<'_, T> {
    /// Fully masked rows: `false` for NaN / `-inf` (memory-efficient, cuDNN,
    /// CPU flash), `true` for 0 / `+inf` (CUDA flash).
    pub(crate) fn empty_rows_zero(&self) -> bool {
        self.kind == Kind::Flash
    }
}

/// Reads and checks the arguments of `kind` (`spec` gives a tensor's layout).
pub(crate) fn parse<'a, T>(
    a: &op::Args<'a, T>,
    kind: Kind,
    spec: impl Fn(&T) -> &TensorSpec,
) -> Result<Call<'a, T>, ExecError> {
    let q = a.tensor(0, "query")?;
    let k = a.tensor(1, "key")?;
    let v = a.tensor(2, "value")?;
    // (bias position, compute_log_sumexp position, dropout, causal, debug mask)
    let (bias_at, lse_at, dropout_at, causal_at, debug_at) = match kind {
        Kind::Efficient => (Some((3, "attn_bias")), Some(4), 5, 6, None),
        Kind::Flash => (None, None, 3, 4, Some(5)),
        Kind::Cudnn => (Some((3, "attn_bias")), Some(4), 5, 6, Some(7)),
        Kind::FlashCpu => (Some((KW_ONLY, "attn_mask")), None, 3, 4, None),
    };
    let dropout = a.float(dropout_at, "dropout_p", 0.0)?;
    if dropout != 0.0 {
        return Err(a.err(format!(
            "dropout_p = {dropout} is not supported (inference only: dropout_p must be 0)"
        )));
    }
    if let Some(i) = debug_at {
        if a.boolean(i, "return_debug_mask", false)? {
            return Err(a.err("return_debug_mask=True is not supported"));
        }
    }
    let causal = a.boolean(causal_at, "is_causal", false)?;
    let compute_lse = match lse_at {
        Some(i) => a.boolean(i, "compute_log_sumexp", false)?,
        None => true,
    };
    let (qs, ks, vs) = (spec(q), spec(k), spec(v));
    for (name, t) in [("query", qs), ("key", ks), ("value", vs)] {
        if t.size.len() != 4 {
            return Err(a.err(format!(
                "`{name}` must be 4-d [batch, heads, length, head dim], got sizes {:?}",
                t.size
            )));
        }
        if !t.dtype.is_floating() {
            return Err(a.err(format!("`{name}` must be floating, got {}", t.dtype)));
        }
        if t.size.iter().any(|s| *s < 0) {
            return Err(a.err(format!("`{name}` has a negative size: {:?}", t.size)));
        }
    }
    if ks.dtype != qs.dtype || vs.dtype != qs.dtype {
        return Err(a.err(format!(
            "query, key and value must have one dtype, got {}, {} and {}",
            qs.dtype, ks.dtype, vs.dtype
        )));
    }
    let dims = Dims {
        b: qs.size[0],
        h: qs.size[1],
        hk: ks.size[1],
        l: qs.size[2],
        s: ks.size[2],
        e: qs.size[3],
        ev: vs.size[3],
    };
    if ks.size[0] != dims.b || vs.size[0] != dims.b {
        return Err(a.err(format!(
            "batch sizes differ: query {:?}, key {:?}, value {:?}",
            qs.size, ks.size, vs.size
        )));
    }
    if vs.size[1] != dims.hk || vs.size[2] != dims.s {
        return Err(a.err(format!(
            "key {:?} and value {:?} must have the same heads and length",
            ks.size, vs.size
        )));
    }
    if ks.size[3] != dims.e {
        return Err(a.err(format!(
            "query {:?} and key {:?} must have the same head dim",
            qs.size, ks.size
        )));
    }
    if (dims.hk == 0 && dims.h != 0) || (dims.hk != 0 && dims.h % dims.hk != 0) {
        return Err(a.err(format!(
            "the query's {} heads are not a multiple of the key/value's {}",
            dims.h, dims.hk
        )));
    }
    if matches!(kind, Kind::Flash | Kind::FlashCpu) && dims.ev != dims.e {
        return Err(a.err(format!(
            "flash attention needs value head dim {} equal to the query's {}",
            dims.ev, dims.e
        )));
    }
    let bias = match bias_at {
        Some((i, name)) => match a.get(i, name) {
            Some(Value::Tensor(t)) => {
                let bs = spec(t);
                let boolean = bs.dtype == DType::Bool;
                if kind == Kind::FlashCpu {
                    if !(boolean || bs.dtype.is_floating()) {
                        return Err(a.err(format!("`{name}` must be bool or floating, got {}", bs.dtype)));
                    }
                } else if bs.dtype != qs.dtype {
                    return Err(a.err(format!(
                        "`{name}` has dtype {}; it must have the query's dtype {}",
                        bs.dtype, qs.dtype
                    )));
                }
                let target = [dims.b, dims.h, dims.l, dims.s];
                Some((t, broadcast_strides(a, name, bs, &target)?))
            }
            Some(v) => return Err(a.err(format!("`{name}` must be a tensor, got {}", v.kind()))),
            None => None,
        },
        None => None,
    };
    let scale = match a.get(KW_ONLY, "scale") {
        Some(v) => v
            .as_float()
            .ok_or_else(|| a.err(format!("`scale` must be a number, got {}", v.kind())))?,
        None => 1.0 / (dims.e as f64).sqrt(),
    };
    // Every size product the ops form, checked once here.
    let checked = [dims.b, dims.h, dims.l.max(dims.s), dims.e.max(dims.ev).max(1)]
        .iter()
        .try_fold(1i64, |acc, d| acc.checked_mul((*d).max(1)))
        .and_then(|n| n.checked_mul(dims.s.max(1)))
        .and_then(|n| n.checked_add(32 * dims.b.max(1) * dims.h.max(1)));
    if checked.is_none() {
        return Err(a.err(format!("sizes {:?} are too large", qs.size)));
    }
    Ok(Call {
        kind,
        q,
        k,
        v,
        bias,
        dims,
        causal,
        scale,
        compute_lse,
    })
}

/// The strides of `spec` broadcast to the 4-d `target` (0 on broadcast dimensions).
fn broadcast_strides<T>(
    a: &op::Args<'_, T>,
    what: &str,
    spec: &TensorSpec,
    target: &[i64; 4],
) -> Result<[i64; 4], ExecError> {
    super::broadcast::broadcast_strides(&spec.size, &spec.stride, target)
        .and_then(|s| <[i64; 4]>::try_from(s).ok())
        .ok_or_else(|| {
            a.err(format!(
                "`{what}` of shape {:?} does not broadcast to {target:?}",
                spec.size
            ))
        })
}

/// Dense strides for `size` whose order follows `like`'s strides (innermost
/// = smallest stride, ties by dimension index): cuDNN attention's
/// `alloc_with_matching_layout`.
fn matching_layout(size: &[i64], like: &[i64]) -> Vec<i64> {
    let mut order: Vec<usize> = (0..size.len()).collect();
    order.sort_by_key(|d| like[*d]);
    let mut out = vec![0i64; size.len()];
    let mut cur = 1i64;
    for d in order {
        out[d] = cur;
        cur = cur.saturating_mul(size[d]);
    }
    out
}

/// The output's sizes and strides:
/// * memory-efficient: `[B, L, H, Ev]` memory seen as `[B, H, L, Ev]`;
/// * CUDA flash: `empty_like(query)` (the query's strides when it is dense,
///   else dense strides in the query's order);
/// * cuDNN: `[B, H, L, Ev]` dense in the query's stride order;
/// * CPU flash: as CUDA flash, `empty_like(query)` (PyTorch 2.15's kernel and
///   meta function: a sequence-first model's query, `[L, B, H, E]` memory,
///   gives an output laid out the same way; `fixtures/inductor/op_layouts.json`
///   records PyTorch's layouts).
pub(crate) fn out_layout<T>(call: &Call<'_, T>, q: &TensorSpec) -> (Vec<i64>, Vec<i64>) {
    let Dims { b: _, h, l, ev, .. } = call.dims;
    let size = vec![call.dims.b, h, l, ev];
    let stride = match call.kind {
        Kind::Efficient => {
            let (l1, h1, ev1) = (l.max(1), h.max(1), ev.max(1));
            vec![l1 * h1 * ev1, ev1, h1 * ev1, 1]
        }
        Kind::Flash | Kind::FlashCpu => infer_dense_strides(&size, &q.stride),
        Kind::Cudnn => matching_layout(&size, &q.stride),
    };
    (size, stride)
}

/// The log-sum-exp tensor: its sizes, strides, dtype, the strides that
/// address its `[b, h, row]` elements, and the length of its row dimension
/// (rows from `L` on are `+inf` padding):
/// * memory-efficient: `f32[B, H, ceil(L / 32) * 32]` when
///   `compute_log_sumexp`, else `f32[B, H, 0]`;
/// * CUDA flash: `f32[B, H, L]`;
/// * cuDNN: `f32[B, H, L, 1]`;
/// * CPU flash: `[B, L, H]` memory seen as `[B, H, L]`, `f32` (`f64` for `f64` inputs).
pub(crate) fn lse_layout<T>(call: &Call<'_, T>, qdtype: DType) -> LseLayout {
    let Dims { b, h, l, .. } = call.dims;
    let (h1, l1) = (h.max(1), l.max(1));
    match call.kind {
        Kind::Efficient => {
            let len = if call.compute_lse { (l + 31) / 32 * 32 } else { 0 };
            let len1 = len.max(1);
            LseLayout {
                size: vec![b, h, len],
                stride: vec![h1 * len1, len1, 1],
                dtype: DType::Float32,
                rows: [h1 * len1, len1, 1],
                len,
            }
        }
        Kind::Flash => LseLayout {
            size: vec![b, h, l],
            stride: vec![h1 * l1, l1, 1],
            dtype: DType::Float32,
            rows: [h1 * l1, l1, 1],
            len: l,
        },
        Kind::Cudnn => LseLayout {
            size: vec![b, h, l, 1],
            stride: vec![h1 * l1, l1, 1, 1],
            dtype: DType::Float32,
            rows: [h1 * l1, l1, 1],
            len: l,
        },
        Kind::FlashCpu => LseLayout {
            size: vec![b, h, l],
            stride: vec![l1 * h1, 1, h1],
            dtype: if qdtype == DType::Float64 {
                DType::Float64
            } else {
                DType::Float32
            },
            rows: [l1 * h1, 1, h1],
            len: l,
        },
    }
}

/// See [`lse_layout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LseLayout {
    /// Sizes.
    pub(crate) size: Vec<i64>,
    /// Strides.
    pub(crate) stride: Vec<i64>,
    /// Element type.
    pub(crate) dtype: DType,
    /// Strides of the `[b, h, row]` addressing.
    pub(crate) rows: [i64; 3],
    /// Rows of the last (row) dimension, padding included.
    pub(crate) len: i64,
}

/// One element of an op's result tuple.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    /// The attention output.
    Out,
    /// The log-sum-exp.
    Lse,
    /// A zero-filled tensor (RNG state, debug mask).
    Zeros(DType, Vec<i64>),
    /// An integer.
    Int(i64),
    /// `None` (an undefined tensor).
    None,
}

/// The result tuple of `call`, in order:
/// * memory-efficient: `(output, logsumexp, philox_seed, philox_offset)`,
///   seed and offset `int64` 0-d tensors (their values are unused without
///   dropout);
/// * CUDA flash: `(output, logsumexp, None, None, L, S, rng_state,
///   unused, debug_attn_mask)`, the RNG state as `int64[2]` and the unused
///   one `int64[]` (PyTorch's are `uint64`, which these tensors do not
///   store), the debug mask `[0]` in the query's dtype;
/// * cuDNN: `(output, logsumexp, None, None, L, S, seed, offset, None)`;
/// * CPU flash: `(output, logsumexp)`.
pub(crate) fn result_items<T>(call: &Call<'_, T>, qdtype: DType) -> Vec<Item> {
    let Dims { l, s, .. } = call.dims;
    let scalar = || Item::Zeros(DType::Int64, vec![]);
    // The CUDA flash and cuDNN tuples' first six items.
    let flash_head = || vec![Item::Out, Item::Lse, Item::None, Item::None, Item::Int(l), Item::Int(s)];
    match call.kind {
        Kind::Efficient => vec![Item::Out, Item::Lse, scalar(), scalar()],
        Kind::Flash => {
            let mut items = flash_head();
            items.extend([
                Item::Zeros(DType::Int64, vec![2]),
                scalar(),
                Item::Zeros(qdtype, vec![0]),
            ]);
            items
        }
        Kind::Cudnn => {
            let mut items = flash_head();
            items.extend([scalar(), scalar(), Item::None]);
            items
        }
        Kind::FlashCpu => vec![Item::Out, Item::Lse],
    }
}

/// The host's implementation of the attention op `op`.
pub(crate) fn builtin(op: &ExternOp) -> Option<super::builtin::Builtin> {
    Some(match Kind::of(op)? {
        Kind::Efficient => efficient,
        Kind::Flash => flash,
        Kind::Cudnn => cudnn,
        Kind::FlashCpu => flash_cpu,
    })
}

fn efficient(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    host(a, Kind::Efficient)
}

fn flash(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    host(a, Kind::Flash)
}

fn cudnn(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    host(a, Kind::Cudnn)
}

fn flash_cpu(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    host(a, Kind::FlashCpu)
}

/// `usize` of a size already checked non-negative and small enough by [`parse`].
fn us(v: i64) -> usize {
    usize::try_from(v).unwrap_or(0)
}

/// The host op: every row in `f64`, results laid out as PyTorch lays them out.
fn host(a: &Args<'_>, kind: Kind) -> Result<Value<Tensor>, ExecError> {
    let call = parse(a, kind, |t: &Tensor| t.spec())?;
    let qdtype = call.q.dtype();
    let Dims { b, h, hk, l, s, e, ev } = call.dims;
    let (bu, hu, lu, su, eu, evu) = (us(b), us(h), us(l), us(s), us(e), us(ev));
    let group = if hk > 0 { us(h / hk) } else { 1 };
    let hku = us(hk);
    let q = call.q.to_f64_vec()?;
    let k = call.k.to_f64_vec()?;
    let v = call.v.to_f64_vec()?;
    // The bias as its own row-major values, addressed by broadcast strides of that contiguous copy.
    let bias = match &call.bias {
        Some((t, _)) => {
            let dense = crate::exec::contiguous_strides(t.size());
            let target = [b, h, l, s];
            let lead = 4 - t.dim();
            let mut st = [0i64; 4];
            for (d, size) in t.size().iter().enumerate() {
                if *size == target[lead + d] && *size != 1 {
                    st[lead + d] = dense[d];
                }
            }
            let values = if t.dtype() == DType::Bool {
                t.to_i64_vec()?
                    .into_iter()
                    .map(|m| if m != 0 { 0.0 } else { f64::NEG_INFINITY })
                    .collect()
            } else {
                t.to_f64_vec()?
            };
            Some((values, st))
        }
        None => None,
    };
    let zero_rows = call.empty_rows_zero();
    let (scale, causal) = (call.scale, call.causal);
    // Per (batch, head): the output rows [L, Ev] and the log-sum-exp [L].
    let heads: Vec<(Vec<f64>, Vec<f64>)> = (0..bu * hu)
        .into_par_iter()
        .map(|bh| {
            let (bi, hi) = (bh / hu.max(1), bh % hu.max(1));
            let kh = hi / group.max(1);
            let qbase = (bi * hu + hi) * lu * eu;
            let kbase = (bi * hku + kh) * su * eu;
            let vbase = (bi * hku + kh) * su * evu;
            let mut out = vec![0.0; lu * evu];
            let mut lse = vec![0.0; lu];
            let mut scores = vec![0.0; su];
            for i in 0..lu {
                let qrow = &q[qbase + i * eu..qbase + (i + 1) * eu];
                let mut max = f64::NEG_INFINITY;
                for (j, sc) in scores.iter_mut().enumerate() {
                    let mut x = if causal && j > i {
                        f64::NEG_INFINITY
                    } else {
                        let krow = &k[kbase + j * eu..kbase + (j + 1) * eu];
                        qrow.iter().zip(krow).map(|(x, y)| x * y).sum::<f64>() * scale
                    };
                    if let (Some((bv, st)), false) = (&bias, x == f64::NEG_INFINITY) {
                        let at = bi as i64 * st[0] + hi as i64 * st[1] + i as i64 * st[2] + j as i64 * st[3];
                        x += bv[us(at)];
                    }
                    *sc = x;
                    if x > max {
                        max = x;
                    }
                }
                let row = &mut out[i * evu..(i + 1) * evu];
                if max == f64::NEG_INFINITY {
                    let fill = if su == 0 || zero_rows { 0.0 } else { f64::NAN };
                    row.iter_mut().for_each(|o| *o = fill);
                    lse[i] = if zero_rows { f64::INFINITY } else { f64::NEG_INFINITY };
                    continue;
                }
                let mut sum = 0.0;
                for (j, sc) in scores.iter().enumerate() {
                    let p = (sc - max).exp();
                    sum += p;
                    if p != 0.0 {
                        let vrow = &v[vbase + j * evu..vbase + (j + 1) * evu];
                        row.iter_mut().zip(vrow).for_each(|(o, x)| *o += p * x);
                    }
                }
                row.iter_mut().for_each(|o| *o /= sum);
                lse[i] = max + sum.ln();
            }
            (out, lse)
        })
        .collect();
    let (osize, ostride) = out_layout(&call, call.q.spec());
    let out = Tensor::zeros_like_spec(&TensorSpec {
        dtype: qdtype,
        device: call.q.spec().device,
        size: osize,
        stride: ostride,
        offset: 0,
    })?;
    out.write_f64(&heads.iter().flat_map(|(o, _)| o.iter().copied()).collect::<Vec<_>>())?;
    let layout = lse_layout(&call, qdtype);
    let lse = Tensor::zeros_like_spec(&TensorSpec {
        dtype: layout.dtype,
        device: call.q.spec().device,
        size: layout.size.clone(),
        stride: layout.stride.clone(),
        offset: 0,
    })?;
    if layout.len > 0 {
        let padded = us(layout.len);
        let mut values = Vec::with_capacity(bu * hu * padded);
        for (_, rows) in &heads {
            values.extend_from_slice(rows);
            values.extend(std::iter::repeat_n(f64::INFINITY, padded.saturating_sub(rows.len())));
        }
        lse.write_f64(&values)?;
    }
    let mut items = Vec::new();
    for item in result_items(&call, qdtype) {
        items.push(match item {
            Item::Out => Value::Tensor(out.clone()),
            Item::Lse => Value::Tensor(lse.clone()),
            Item::Zeros(dtype, size) => Value::Tensor(Tensor::zeros_like_spec(&TensorSpec::contiguous(
                dtype,
                call.q.spec().device,
                &size,
            ))?),
            Item::Int(i) => Value::Int(i),
            Item::None => Value::None,
        });
    }
    Ok(Value::List(items))
}
