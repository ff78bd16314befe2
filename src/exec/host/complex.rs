//! Complex tensors on the host: the views Inductor's wrappers call
//! (`aten.view_as_complex`, `aten.view_as_real`, `aten.view.dtype`), which
//! alias their input as in PyTorch, and the pointwise ops Inductor leaves to
//! ATen on complex operands (`aten.mul` / `add` / `sub` / `div`; Triton has
//! no complex types, so Inductor falls back to ATen for them).
//!
//! A complex host tensor stores its parts (`Tensor::view_as_real`). The
//! arithmetic is done in `f64` and rounded to the result's part dtype:
//! `(a + bi)(c + di) = (ac - bd) + (ad + bc)i` and `c10::complex`'s
//! division for `/`, so a `complex64` result may differ from CUDA's (which rounds each
//! product, or fuses it) in the last bit of a part.

use super::builtin::{Args, BuiltinOptions};
use crate::exec::{ExecError, Tensor, Value};
use crate::ir::DType;

/// `aten.view_as_complex(self)`.
pub(crate) fn view_as_complex(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    x.view_as_complex().map(Value::Tensor).map_err(|e| a.err(e.to_string()))
}

/// `aten.view_as_real(self)`.
pub(crate) fn view_as_real(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    x.view_as_real().map(Value::Tensor).map_err(|e| a.err(e.to_string()))
}

/// `aten.view.dtype(self, dtype)` (and `aten.view(self, size)` is not this op).
pub(crate) fn view(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "self")?;
    match a.get(1, "dtype") {
        Some(Value::DType(d)) => x.view_dtype(*d).map(Value::Tensor).map_err(|e| a.err(e.to_string())),
        Some(v) => Err(a.err(format!(
            "the host implements view(dtype) only, got a {} argument",
            v.kind()
        ))),
        None => Err(a.err("missing argument `dtype`")),
    }
}

/// A complex operand: a tensor (complex or real) or a number.
enum Operand<'t> {
    Tensor(&'t Tensor),
    Scalar(f64, f64),
}

/// Whether any tensor operand of the binary op `a` is complex (then the op
/// runs here instead of the real pointwise path).
pub(crate) fn has_complex_operand(a: &Args<'_>) -> bool {
    ["self", "other"]
        .iter()
        .enumerate()
        .any(|(i, n)| matches!(a.get(i, n), Some(Value::Tensor(t)) if t.dtype().is_complex()))
}

fn operand<'t>(a: &Args<'t>, i: usize, name: &str) -> Result<Operand<'t>, ExecError> {
    match a.get(i, name) {
        Some(Value::Tensor(t)) => Ok(Operand::Tensor(t)),
        Some(v) => v
            .as_float()
            .map(|x| Operand::Scalar(x, 0.0))
            .ok_or_else(|| a.err(format!("`{name}` must be a tensor or number, got {}", v.kind()))),
        None => Err(a.err(format!("missing operand `{name}`"))),
    }
}

/// The result dtype: the widest complex dtype among the operands, raised to
/// `complex128` by a `float64` tensor of at least one dimension (PyTorch's
/// promotion; 0-d tensors and numbers do not raise the category's width).
fn result_dtype(ops: &[&Operand<'_>]) -> DType {
    let mut best = DType::Complex32;
    let rank = |d: DType| match d {
        DType::Complex32 => 0,
        DType::Complex64 => 1,
        _ => 2,
    };
    for o in ops {
        if let Operand::Tensor(t) = o {
            let d = match t.dtype() {
                d if d.is_complex() => d,
                DType::Float64 if t.dim() > 0 => DType::Complex128,
                _ => continue,
            };
            if rank(d) > rank(best) {
                best = d;
            }
        }
    }
    best
}

fn values(op: &Operand<'_>, shape: &[i64], n: usize) -> Result<Vec<(f64, f64)>, ExecError> {
    match op {
        Operand::Tensor(t) => {
            let e = t.expand(shape)?;
            if e.dtype().is_complex() {
                e.to_complex_vec()
            } else {
                Ok(e.to_f64_vec()?.into_iter().map(|v| (v, 0.0)).collect())
            }
        }
        Operand::Scalar(re, im) => Ok(vec![(*re, *im); n]),
    }
}

/// A binary pointwise op on complex operands with broadcasting.
pub(crate) fn binary(
    a: &Args<'_>,
    o: &BuiltinOptions,
    f: &dyn Fn((f64, f64), (f64, f64)) -> (f64, f64),
) -> Result<Value<Tensor>, ExecError> {
    let x = operand(a, 0, "self")?;
    let y = operand(a, 1, "other")?;
    let shapes: Vec<&[i64]> = [&x, &y]
        .iter()
        .filter_map(|o| match o {
            Operand::Tensor(t) => Some(t.size()),
            Operand::Scalar(..) => None,
        })
        .collect();
    let shape = super::broadcast::broadcast_shape(a, &shapes)?;
    let dtype = result_dtype(&[&x, &y]);
    let n = a.result_elements(&shape, dtype.size_bytes(), o.max_alloc_bytes())?;
    let (xs, ys) = (values(&x, &shape, n)?, values(&y, &shape, n)?);
    let out: Vec<(f64, f64)> = xs.into_iter().zip(ys).map(|(p, q)| f(p, q)).collect();
    Ok(Value::Tensor(Tensor::from_complex(dtype, &out, &shape)?))
}

/// `(a + bi)(c + di)`.
pub(crate) fn mul((a, b): (f64, f64), (c, d): (f64, f64)) -> (f64, f64) {
    (a * c - b * d, a * d + b * c)
}

/// `(a + bi) / (c + di)` as `c10::complex` divides (numpy's scaled
/// algorithm: one reciprocal, then products).
pub(crate) fn div((a, b): (f64, f64), (c, d): (f64, f64)) -> (f64, f64) {
    let (abs_c, abs_d) = (c.abs(), d.abs());
    if abs_c >= abs_d {
        if abs_c == 0.0 && abs_d == 0.0 {
            return (a / abs_c, b / abs_c);
        }
        let rat = d / c;
        let scl = 1.0 / (c + d * rat);
        ((a + b * rat) * scl, (b - a * rat) * scl)
    } else {
        let rat = c / d;
        let scl = 1.0 / (d + c * rat);
        ((a * rat + b) * scl, (b * rat - a) * scl)
    }
}
