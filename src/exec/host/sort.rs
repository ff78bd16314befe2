//! Ordering along one dimension: `aten.sort` (`default` and `stable`) and
//! `aten.topk`, one comparison for both: PyTorch's, where NaN is larger than
//! every number and equal elements keep their order (a stable sort, which
//! is one of the orders an unstable `sort` may give and the one `stable=True`
//! asks for). Integer tensors are compared as integers, never through `f64`.

use super::builtin::{norm_dim, split_at, Args, BuiltinOptions};
use crate::exec::{ExecError, Tensor, Value};

/// PyTorch's ascending order of two floats: NaN after every number (and
/// equal to NaN).
pub(super) fn float_order(p: f64, q: f64) -> std::cmp::Ordering {
    p.partial_cmp(&q).unwrap_or_else(|| p.is_nan().cmp(&q.is_nan()))
}

/// A tensor's elements as ordering keys: exact integers, or floats.
enum Keys {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl Keys {
    fn of(x: &Tensor) -> Result<Keys, ExecError> {
        Ok(if x.dtype().is_floating() {
            Keys::Float(x.to_f64_vec()?)
        } else {
            Keys::Int(x.to_i64_vec()?)
        })
    }

    /// `a` before `b` in ascending order (NaN last), by element index.
    fn cmp(&self, a: usize, b: usize) -> std::cmp::Ordering {
        match self {
            Keys::Int(v) => v[a].cmp(&v[b]),
            Keys::Float(v) => float_order(v[a], v[b]),
        }
    }

    /// The elements at `order`, as a tensor of `x`'s dtype and `shape`.
    fn gather(&self, x: &Tensor, order: &[usize], shape: &[i64]) -> Result<Tensor, ExecError> {
        match self {
            Keys::Int(v) => Tensor::from_i64(x.dtype(), &order.iter().map(|&k| v[k]).collect::<Vec<_>>(), shape),
            Keys::Float(v) => Tensor::from_f64(x.dtype(), &order.iter().map(|&k| v[k]).collect::<Vec<_>>(), shape),
        }
    }
}

/// The first `k` elements of every line of `x` along `d` in the requested
/// order (`descending`: largest first), stably: (values, int64 indices).
fn ordered(a: &Args<'_>, x: &Tensor, d: usize, k: usize, descending: bool) -> Result<Value<Tensor>, ExecError> {
    let shape = x.size().to_vec();
    let (outer, len, inner) = if x.dim() == 0 { (1, 1, 1) } else { split_at(&shape, d) };
    if k > len {
        return Err(a.err(format!("k = {k} is out of range for dimension of size {len}")));
    }
    let keys = Keys::of(x)?;
    let mut indices = vec![0i64; outer * k * inner];
    let mut line: Vec<usize> = Vec::with_capacity(len);
    let mut positions = vec![0usize; outer * k * inner];
    for o in 0..outer {
        for i in 0..inner {
            line.clear();
            line.extend(0..len);
            let at = |j: usize| (o * len + j) * inner + i;
            // `sort_by` is stable: equal elements keep their index order.
            line.sort_by(|&p, &q| {
                let ord = keys.cmp(at(p), at(q));
                if descending {
                    ord.reverse()
                } else {
                    ord
                }
            });
            for (r, &j) in line.iter().take(k).enumerate() {
                let out = (o * k + r) * inner + i;
                positions[out] = at(j);
                // A line is at most the tensor's element count, an i64.
                indices[out] = i64::try_from(j).map_err(|_| a.err("index overflows int64"))?;
            }
        }
    }
    let mut out_shape = shape;
    if let Some(s) = out_shape.get_mut(d) {
        *s = i64::try_from(k).map_err(|_| a.err("k overflows int64"))?;
    }
    Ok(Value::List(vec![
        Value::Tensor(keys.gather(x, &positions, &out_shape)?),
        Value::Tensor(Tensor::from_vec(indices, &out_shape)?),
    ]))
}

/// `aten.topk(self, k, dim=-1, largest=True, sorted=True)`.
pub(super) fn topk(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let k = a.int(1, "k", None)?;
    let d = norm_dim(a, a.int(2, "dim", Some(-1))?, x.dim())?;
    let largest = a.boolean(3, "largest", true)?;
    let k = usize::try_from(k).map_err(|_| a.err(format!("k = {k} is out of range")))?;
    ordered(a, x, d, k, largest)
}

/// `aten.sort(self, dim=-1, descending=False)` and
/// `aten.sort.stable(self, *, stable, dim=-1, descending=False)`: (values,
/// int64 indices), always stably.
pub(super) fn sort(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    // `stable` takes its arguments after `self` by keyword only.
    let keyword_only = a.op.ends_with(".stable");
    let (dim_at, descending_at) = if keyword_only { (usize::MAX, usize::MAX) } else { (1, 2) };
    let d = norm_dim(a, a.int(dim_at, "dim", Some(-1))?, x.dim())?;
    let descending = a.boolean(descending_at, "descending", false)?;
    let len = if x.dim() == 0 { 1 } else { split_at(x.size(), d).1 };
    // Both results are laid out dense in the input's order (ATen's sort meta
    // function: `infer_dense_strides` of the input); topk's are contiguous.
    let stride = super::layout::infer_dense_strides(x.size(), x.stride());
    match ordered(a, x, d, len, descending)? {
        Value::List(items) => Ok(Value::List(
            items
                .into_iter()
                .map(|v| match v {
                    Value::Tensor(t) => super::layout::with_strides(t, stride.clone()).map(Value::Tensor),
                    other => Ok(other),
                })
                .collect::<Result<_, _>>()?,
        )),
        other => Ok(other),
    }
}
