//! The host's pointwise extern ops (`add`, `sub`, `mul`, `div`, `neg`,
//! `relu`, `exp`, `sin`, `where`) with broadcasting, PyTorch's result
//! dtypes and TensorIterator's output layout; complex operands go to
//! [`super::complex`].

use super::broadcast::broadcast_shape;
use super::builtin::{Args, BuiltinOptions};
use super::complex;
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

/// An operand of a pointwise op.
enum Operand<'t> {
    Tensor(&'t Tensor),
    Scalar(f64, bool),
}

impl<'t> Operand<'t> {
    /// The tensor, when the operand is one.
    fn tensor(&self) -> Option<&'t Tensor> {
        match self {
            Operand::Tensor(t) => Some(t),
            Operand::Scalar(..) => None,
        }
    }
}

fn operand<'t>(a: &Args<'t>, i: usize, name: &str) -> Result<Operand<'t>, ExecError> {
    match a.get(i, name) {
        Some(Value::Tensor(t)) => Ok(Operand::Tensor(t)),
        Some(Value::Float(f)) => Ok(Operand::Scalar(*f, true)),
        Some(v) => v
            .as_int()
            .map(|x| Operand::Scalar(x as f64, false))
            .ok_or_else(|| a.err(format!("`{name}` must be a tensor or number"))),
        None => Err(a.err(format!("missing operand `{name}`"))),
    }
}

fn result_dtype(ops: &[&Operand<'_>]) -> DType {
    let tensors: Vec<DType> = ops.iter().filter_map(|o| o.tensor()).map(Tensor::dtype).collect();
    let float_t: Vec<DType> = tensors.iter().copied().filter(|d| d.is_floating()).collect();
    if let Some(first) = float_t.first() {
        if float_t.iter().all(|d| d == first) {
            return *first;
        }
        return DType::Float32.max_by_size(&float_t);
    }
    if ops.iter().any(|o| matches!(o, Operand::Scalar(_, true))) {
        return DType::Float32;
    }
    match tensors.first() {
        Some(first) if tensors.iter().all(|d| d == first) => *first,
        _ => DType::Int64,
    }
}

trait WidestFloat {
    fn max_by_size(self, ds: &[DType]) -> DType;
}

impl WidestFloat for DType {
    fn max_by_size(self, ds: &[DType]) -> DType {
        if ds.contains(&DType::Float64) {
            DType::Float64
        } else {
            self
        }
    }
}

/// An operand's values broadcast to `shape` (`n` elements, already checked
/// against the allocation limit).
fn values_of(op: &Operand<'_>, shape: &[i64], n: usize) -> Result<Vec<f64>, ExecError> {
    match op {
        Operand::Tensor(t) => t.expand(shape)?.to_f64_vec(),
        Operand::Scalar(v, _) => Ok(vec![*v; n]),
    }
}

fn pointwise(
    a: &Args<'_>,
    o: &BuiltinOptions,
    names: &[&str],
    f: &dyn Fn(&[f64]) -> f64,
    dtype: Option<DType>,
) -> Result<Value<Tensor>, ExecError> {
    let ops: Vec<Operand<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| operand(a, i, n))
        .collect::<Result<_, _>>()?;
    let shapes: Vec<&[i64]> = ops.iter().filter_map(|o| o.tensor()).map(Tensor::size).collect();
    let shape = broadcast_shape(a, &shapes)?;
    let refs: Vec<&Operand<'_>> = ops.iter().collect();
    let out_dtype = dtype.unwrap_or_else(|| result_dtype(&refs));
    // One f64 column per operand and one for the result.
    let n = a.result_elements(&shape, 8u64.saturating_mul(ops.len() as u64 + 1), o.max_alloc_bytes())?;
    let cols: Vec<Vec<f64>> = ops
        .iter()
        .map(|op| values_of(op, &shape, n))
        .collect::<Result<_, _>>()?;
    let n = cols.first().map(|c| c.len()).unwrap_or(0);
    let out: Vec<f64> = (0..n)
        .map(|i| {
            let xs: Vec<f64> = cols.iter().map(|c| c[i]).collect();
            f(&xs)
        })
        .collect();
    let out = if out_dtype.is_floating() {
        out
    } else {
        out.into_iter().map(|v| v.trunc()).collect()
    };
    // The output is laid out as TensorIterator lays it out: in the order its
    // tensor operands' strides agree on (a transposed input gives a transposed output).
    let layouts: Vec<(&[i64], &[i64])> = ops
        .iter()
        .filter_map(|o| o.tensor())
        .map(|t| (t.size(), t.stride()))
        .collect();
    let stride = super::layout::iterator_strides(&shape, &layouts);
    let out = Tensor::from_f64(out_dtype, &out, &shape)?;
    Ok(Value::Tensor(super::layout::with_strides(out, stride)?))
}

pub(crate) fn add(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let alpha = a.float(2, "alpha", 1.0)?;
    if complex::has_complex_operand(a) {
        return complex::binary(a, o, &|(p, q), (r, s)| (p + alpha * r, q + alpha * s));
    }
    pointwise(a, o, &["self", "other"], &|x| x[0] + alpha * x[1], None)
}

pub(crate) fn sub(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let alpha = a.float(2, "alpha", 1.0)?;
    if complex::has_complex_operand(a) {
        return complex::binary(a, o, &|(p, q), (r, s)| (p - alpha * r, q - alpha * s));
    }
    pointwise(a, o, &["self", "other"], &|x| x[0] - alpha * x[1], None)
}

pub(crate) fn mul(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    if complex::has_complex_operand(a) {
        return complex::binary(a, o, &complex::mul);
    }
    pointwise(a, o, &["self", "other"], &|x| x[0] * x[1], None)
}

pub(crate) fn div(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    if complex::has_complex_operand(a) {
        return complex::binary(a, o, &complex::div);
    }
    // True division: integer inputs give float32, as in torch.
    let ops = [operand(a, 0, "self")?, operand(a, 1, "other")?];
    let d = result_dtype(&[&ops[0], &ops[1]]);
    let d = if d.is_floating() { d } else { DType::Float32 };
    pointwise(a, o, &["self", "other"], &|x| x[0] / x[1], Some(d))
}

pub(crate) fn neg(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    pointwise(a, o, &["self"], &|x| -x[0], None)
}

pub(crate) fn relu(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    pointwise(
        a,
        o,
        &["self"],
        &|x| if x[0] > 0.0 || x[0].is_nan() { x[0] } else { 0.0 },
        None,
    )
}

fn float_unary(a: &Args<'_>, o: &BuiltinOptions, f: fn(f64) -> f64) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    let d = if x.dtype().is_floating() {
        x.dtype()
    } else {
        DType::Float32
    };
    pointwise(a, o, &["self"], &|v| f(v[0]), Some(d))
}

pub(crate) fn exp(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    float_unary(a, o, f64::exp)
}

pub(crate) fn sin(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    float_unary(a, o, f64::sin)
}

/// `where(cond, a, b)`; with scalar branches the result is int64 for integer
/// scalars and float32 for float scalars (`aten.where.Scalar`).
pub(crate) fn where_(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = operand(a, 1, "self")?;
    let y = operand(a, 2, "other")?;
    let d = match (&x, &y) {
        (Operand::Scalar(_, false), Operand::Scalar(_, false)) => DType::Int64,
        (Operand::Scalar(..), Operand::Scalar(..)) => DType::Float32,
        _ => result_dtype(&[&x, &y]),
    };
    pointwise(
        a,
        o,
        &["condition", "self", "other"],
        &|v| if v[0] != 0.0 { v[1] } else { v[2] },
        Some(d),
    )
}
