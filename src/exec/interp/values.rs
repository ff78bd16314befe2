//! Reading operands and checking values while a plan runs.

use super::*;

/// One entry of a layout: a literal integer directly, anything else through
/// [`crate::sym::eval::eval_int_with`] (`None` when a symbol has no value).
#[inline]
pub(super) fn eval_dim(e: &SymExpr, lookup: &mut dyn FnMut(&Symbol) -> Option<i64>) -> Result<Option<i64>, ExecError> {
    use crate::sym::EvalError;
    if let SymExpr::Int(v) = e {
        return Ok(Some(*v));
    }
    match crate::sym::eval::eval_int_with(e, lookup) {
        Ok(v) => Ok(Some(v)),
        Err(EvalError::Unbound { .. }) => Ok(None),
        Err(EvalError::TypeMismatch { .. }) if e.is_boolean() => {
            Err(ExecError::Type(format!("`{e}` is boolean, not a size")))
        }
        Err(err) => Err(ExecError::Type(format!("evaluating `{e}`: {err}"))),
    }
}

#[inline(always)]
pub(super) fn slot<T>(s: usize, slots: &[Option<Value<T>>]) -> Result<&Value<T>, ExecError> {
    match slots.get(s) {
        Some(Some(v)) => Ok(v),
        _ => Err(empty_slot(s)),
    }
}

#[cold]
#[inline(never)]
pub(super) fn empty_slot(s: usize) -> ExecError {
    ExecError::Input(format!("slot {s} is empty (freed too early)"))
}

/// The kind of a literal, as [`Value::kind`] names it.
pub(super) fn lit_kind(l: &Lit) -> &'static str {
    match l {
        Lit::Int(_) => "int",
        Lit::Float(_) => "float",
        Lit::Bool(_) => "bool",
        Lit::None => "None",
        Lit::Str(_) => "str",
        Lit::DType(_) => "dtype",
        Lit::Device(_) => "device",
    }
}

/// The kind of value an operand reads, for messages.
pub(super) fn operand_kind<T>(o: &Operand, slots: &[Option<Value<T>>]) -> Result<&'static str, ExecError> {
    Ok(match o {
        Operand::Slot(s) => slot(*s, slots)?.kind(),
        Operand::Lit(l) => lit_kind(l),
        Operand::List(_) => "list",
    })
}

/// Reads an integer operand (booleans count as 0/1) without copying a value.
#[inline(always)]
pub(super) fn read_int<T>(o: &Operand, slots: &[Option<Value<T>>]) -> Result<i64, ExecError> {
    let v = match o {
        Operand::Slot(s) => slots.get(*s).and_then(Option::as_ref).and_then(Value::as_int),
        Operand::Lit(Lit::Int(v)) => Some(*v),
        Operand::Lit(Lit::Bool(b)) => Some(*b as i64),
        Operand::Lit(_) | Operand::List(_) => None,
    };
    match v {
        Some(v) => Ok(v),
        None => Err(not_an_int(o, slots)),
    }
}

/// The error of [`read_int`] (an empty slot, or a value of another kind).
#[cold]
#[inline(never)]
pub(super) fn not_an_int<T>(o: &Operand, slots: &[Option<Value<T>>]) -> ExecError {
    match operand_kind(o, slots) {
        Ok(kind) => ExecError::Type(format!("expected an integer, got {kind}")),
        Err(e) => e,
    }
}

/// An operand that is an integer (not a boolean), read in place; `None`
/// for anything else, an empty slot included (the general path reports it).
#[inline(always)]
pub(super) fn plain_int<T>(o: &Operand, slots: &[Option<Value<T>>]) -> Option<i64> {
    match o {
        Operand::Slot(s) => match slots.get(*s) {
            Some(Some(Value::Int(v))) => Some(*v),
            _ => None,
        },
        Operand::Lit(Lit::Int(v)) => Some(*v),
        _ => None,
    }
}

/// Reads an operand of a [`SymOp`].
pub(super) fn read_scalar<T>(o: &Operand, slots: &[Option<Value<T>>], op: SymOp) -> Result<Scalar, ExecError> {
    let v = match o {
        Operand::Slot(s) => match slot(*s, slots)? {
            Value::Int(v) => Some(Scalar::Int(*v)),
            Value::Bool(b) => Some(Scalar::Bool(*b)),
            _ => None,
        },
        Operand::Lit(Lit::Int(v)) => Some(Scalar::Int(*v)),
        Operand::Lit(Lit::Bool(b)) => Some(Scalar::Bool(*b)),
        Operand::Lit(_) | Operand::List(_) => None,
    };
    match v {
        Some(v) => Ok(v),
        None => Err(ExecError::Type(format!(
            "`{}` of a {}",
            op.node_name(),
            operand_kind(o, slots)?
        ))),
    }
}

/// Reads an operand, borrowing it when it is a slot's value.
pub(super) fn read_ref<'a, T: Clone>(
    o: &Operand,
    slots: &'a [Option<Value<T>>],
) -> Result<Cow<'a, Value<T>>, ExecError> {
    match o {
        Operand::Slot(s) => slot(*s, slots).map(Cow::Borrowed),
        _ => read(o, slots).map(Cow::Owned),
    }
}

/// Calls `f` with a call's positional and keyword arguments, borrowed:
/// values in slots by reference (no clone), literal and list operands
/// materialised for the call (and dropped after it). Operands are read in
/// order, so the first one that cannot be read is the one reported.
#[inline(always)]
pub(super) fn with_call<T: Clone, R>(
    args: &[Operand],
    kwargs: &KwOperands,
    slots: &[Option<Value<T>>],
    f: impl FnOnce(ArgList<'_, T>, Kwargs<'_, T>) -> Result<R, ExecError>,
) -> Result<R, ExecError> {
    // Literals were interned into slots at compile time, so unless an
    // operand is a list the call reads slots only.
    let Some(index) = &kwargs.slots else {
        return with_call_owned(args, kwargs, slots, f);
    };
    for s in index.iter() {
        slot(*s, slots)?;
    }
    let (a, kw) = index.split_at(args.len().min(index.len()));
    f(ArgList::slots(a, slots), Kwargs::slots(&kwargs.names, kw, slots))
}

/// [`with_call`] for calls with list operands.
#[inline(never)]
pub(super) fn with_call_owned<T: Clone, R>(
    args: &[Operand],
    kwargs: &KwOperands,
    slots: &[Option<Value<T>>],
    f: impl FnOnce(ArgList<'_, T>, Kwargs<'_, T>) -> Result<R, ExecError>,
) -> Result<R, ExecError> {
    let operands = || args.iter().chain(kwargs.values.iter());
    let mut owned: SmallVec<[Value<T>; 4]> = SmallVec::new();
    for o in operands() {
        match o {
            Operand::Slot(s) => {
                slot(*s, slots)?;
            }
            _ => owned.push(read(o, slots)?),
        }
    }
    let mut refs: SmallVec<[&Value<T>; 32]> = SmallVec::new();
    let mut next_owned = owned.iter();
    for o in operands() {
        refs.push(match o {
            Operand::Slot(s) => slot(*s, slots)?,
            _ => next_owned
                .next()
                .ok_or_else(|| ExecError::Input("call operand was not read".into()))?,
        });
    }
    let (a, kw) = refs.split_at(args.len().min(refs.len()));
    f(ArgList::refs(a), Kwargs::new(&kwargs.names, kw))
}

pub(super) fn read<T: Clone>(o: &Operand, slots: &[Option<Value<T>>]) -> Result<Value<T>, ExecError> {
    Ok(match o {
        Operand::Slot(s) => slot(*s, slots)?.clone(),
        Operand::Lit(l) => lit_value(l),
        Operand::List(items) => Value::List(items.iter().map(|i| read(i, slots)).collect::<Result<_, _>>()?),
    })
}

pub(super) fn lit_value<T>(l: &Lit) -> Value<T> {
    match l {
        Lit::Int(v) => Value::Int(*v),
        Lit::Float(v) => Value::Float(*v),
        Lit::Bool(v) => Value::Bool(*v),
        Lit::None => Value::None,
        Lit::Str(s) => Value::Str(s.to_string()),
        Lit::DType(d) => Value::DType(*d),
        Lit::Device(d) => Value::Device(*d),
    }
}

/// A packed launch whose ranges are out of the plan's tables (a compile
/// bug).
#[cold]
#[inline(never)]
pub(super) fn unpacked() -> ExecError {
    ExecError::Input("launch operands were not packed".into())
}

/// Drops `v`, testing inline for the kinds that own nothing (most results
/// the run loop drops: `None` from launches and asserts, freed integers), so
/// only the others reach the out-of-line drop glue.
#[inline(always)]
pub(super) fn drop_value<T>(v: Value<T>) {
    match v {
        // These own no heap data: forgetting them leaks nothing.
        Value::None | Value::Int(_) | Value::Bool(_) | Value::Float(_) | Value::Opaque => std::mem::forget(v),
        other => drop(other),
    }
}

pub(super) fn release<B: Backend>(backend: &mut B, v: Value<B::Tensor>) {
    match v {
        Value::Tensor(t) => backend.free(t),
        Value::List(items) => items.into_iter().for_each(|i| release(backend, i)),
        Value::Dict(items) => (*items).into_iter().for_each(|(_, i)| release(backend, i)),
        _ => {}
    }
}

pub(super) fn truthy<T>(v: &Value<T>) -> Result<bool, ExecError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Int(i) => Ok(*i != 0),
        Value::Float(f) => Ok(*f != 0.0),
        other => Err(ExecError::Type(format!("a {} is not a condition", other.kind()))),
    }
}

/// A switch index as Inductor's wrapper reads it: `int(x)` (a boolean is 0
/// or 1, a float truncates toward zero; a NaN or an infinity, which `int()`
/// refuses, is an error).
pub(super) fn value_index<T>(v: &Value<T>) -> Result<i64, ExecError> {
    match v {
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::Int(i) => Ok(*i),
        Value::Float(f) => float_index(*f),
        other => Err(ExecError::Type(format!("a {} is not a switch index", other.kind()))),
    }
}

/// [`value_index`] of a tensor's one element.
pub(super) fn scalar_index(v: ScalarValue) -> Result<i64, ExecError> {
    match v {
        ScalarValue::Bool(b) => Ok(i64::from(b)),
        ScalarValue::Int(i) => Ok(i),
        ScalarValue::Float(f) => float_index(f),
    }
}

fn float_index(f: f64) -> Result<i64, ExecError> {
    if !f.is_finite() {
        return Err(ExecError::Type(format!("switch index {f} is not a finite number")));
    }
    // Finite: `as` saturates a value beyond i64, which then picks the last
    // branch as any other out-of-range index does.
    Ok(f.trunc() as i64)
}

pub(super) fn scalar_truthy(v: ScalarValue) -> bool {
    match v {
        ScalarValue::Bool(b) => b,
        ScalarValue::Int(i) => i != 0,
        ScalarValue::Float(f) => f != 0.0,
    }
}

pub(super) fn dim_of(xs: &[i64], dim: i64, what: &str) -> Result<i64, ExecError> {
    let n = xs.len() as i64;
    let d = if dim < 0 { dim + n } else { dim };
    usize::try_from(d)
        .ok()
        .and_then(|d| xs.get(d).copied())
        .ok_or_else(|| ExecError::Type(format!("{what} dimension {dim} out of range for rank {n}")))
}

/// Checks a tensor against a (partly known) declared layout: dtype, rank,
/// known sizes, and known strides of dimensions with more than one element.
pub(super) fn check_layout(spec: &TensorSpec, exp: &ExpectedLayout) -> Result<(), ExecError> {
    check_sizes_strides(spec, exp.dtype, exp.size.iter().copied(), exp.stride.iter().copied())
}

/// [`check_layout`] on the parts of an expected layout, so callers with plain
/// integers need not build an [`ExpectedLayout`].
pub(super) fn check_sizes_strides(
    spec: &TensorSpec,
    dtype: DType,
    size: impl ExactSizeIterator<Item = Option<i64>>,
    mut stride: impl Iterator<Item = Option<i64>>,
) -> Result<(), ExecError> {
    if spec.dtype != dtype {
        return Err(ExecError::Assert(format!(
            "dtype is {}, expected {}",
            spec.dtype, dtype
        )));
    }
    if spec.size.len() != size.len() {
        return Err(ExecError::Assert(format!(
            "rank is {} (sizes {:?}), expected {}",
            spec.size.len(),
            spec.size,
            size.len()
        )));
    }
    for (d, expected_size) in size.enumerate() {
        // `d` is below the rank, which was just checked equal to both lengths.
        let (actual_size, actual_stride) = (spec.size[d], spec.stride[d]);
        if let Some(s) = expected_size {
            if actual_size != s {
                return Err(ExecError::Assert(format!(
                    "size of dim {d} is {actual_size}, expected {s} (sizes {:?})",
                    spec.size
                )));
            }
        }
        if let Some(st) = stride.next().flatten() {
            if actual_size > 1 && actual_stride != st {
                return Err(ExecError::Assert(format!(
                    "stride of dim {d} is {actual_stride}, expected {st} (strides {:?})",
                    spec.stride
                )));
            }
        }
    }
    Ok(())
}
