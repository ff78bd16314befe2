//! The cases of `fixtures/inductor/op_layouts.json` (written by
//! `fixtures/inductor/op_layouts.py` with PyTorch on the CPU): an extern op's
//! recorded inputs and PyTorch's outputs (their layouts, and for cases made
//! with `values=` their values and tolerance), read into host tensors.
//! Shared by `tests/op_layouts.rs` (the host backend) and the GPU tests
//! that hold the CUDA backend to the same values; included with `#[path]`
//! next to `mod common;` (it reads the checkout root from there).

#![allow(dead_code)]

use indexmap::IndexMap;
use serde_json::Value as Json;
use wrapir::exec::{Tensor, TensorSpec, Value};
use wrapir::ir::{DType, Device};

/// `fixtures/inductor/op_layouts.json`.
pub fn fixture() -> Json {
    let path = super::common::root().join("fixtures/inductor/op_layouts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A dtype by the fixture's (PyTorch's) name.
pub fn dtype(name: &str) -> DType {
    match name {
        "float32" => DType::Float32,
        "float64" => DType::Float64,
        "bfloat16" => DType::Bfloat16,
        "int64" => DType::Int64,
        "int32" => DType::Int32,
        "int8" => DType::Int8,
        "uint8" => DType::Uint8,
        "bool" => DType::Bool,
        "float8_e4m3fn" => DType::Float8E4m3fn,
        "float8_e5m2" => DType::Float8E5m2,
        other => panic!("dtype {other}"),
    }
}

/// A JSON list of integers.
pub fn ints(v: &Json) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

/// A host tensor with the recorded sizes, strides, offset and dtype,
/// holding the recorded values.
pub fn tensor(t: &Json) -> Tensor {
    let dt = dtype(t["dtype"].as_str().unwrap());
    let size = ints(&t["size"]);
    let spec = TensorSpec {
        dtype: dt,
        device: Device::cpu(),
        size: size.clone(),
        stride: ints(&t["stride"]),
        offset: t["offset"].as_i64().unwrap(),
    };
    let placed = Tensor::zeros_like_spec(&spec).unwrap();
    let values: Vec<f64> = t["values"]
        .as_array()
        .expect("values recorded")
        .iter()
        .map(|v| v.as_f64().or_else(|| v.as_bool().map(f64::from)).unwrap())
        .collect();
    placed
        .copy_from(&Tensor::from_f64(dt, &values, &size).unwrap())
        .unwrap();
    placed
}

/// An argument as the fixture records it (`{"tensor": ...}`, `{"int": 3}`, ...).
pub fn value(a: &Json) -> Value<Tensor> {
    let (kind, v) = a.as_object().unwrap().iter().next().unwrap();
    match kind.as_str() {
        "tensor" => Value::Tensor(tensor(v)),
        "int" => Value::Int(v.as_i64().unwrap()),
        "float" => Value::Float(v.as_f64().unwrap()),
        "bool" => Value::Bool(v.as_bool().unwrap()),
        "none" => Value::None,
        "str" => Value::Str(v.as_str().unwrap().to_string()),
        "dtype" => Value::DType(dtype(v.as_str().unwrap())),
        "list" => Value::List(v.as_array().unwrap().iter().map(value).collect()),
        other => panic!("argument kind {other}"),
    }
}

/// Every tensor of a result, in order (as the fixture lists them).
pub fn tensors(v: &Value<Tensor>, out: &mut Vec<Tensor>) {
    match v {
        Value::Tensor(t) => out.push(t.clone()),
        Value::List(items) => items.iter().for_each(|i| tensors(i, out)),
        _ => {}
    }
}

/// The name Inductor calls `op` by (`aten.mm` -> `torch.ops.aten.mm.default`).
pub fn call_name(op: &str) -> String {
    if op.matches('.').count() == 1 {
        format!("torch.ops.{op}.default")
    } else {
        format!("torch.ops.{op}")
    }
}

/// A case's call: the op string Inductor would call, its arguments and keyword arguments.
pub fn call(case: &Json) -> (String, Vec<Value<Tensor>>, IndexMap<String, Value<Tensor>>) {
    let op = call_name(case["op"].as_str().unwrap());
    let args = case["args"].as_array().unwrap().iter().map(value).collect();
    let kwargs = case["kwargs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), value(v)))
        .collect();
    (op, args, kwargs)
}

/// `got` against the recorded output `want` (`{"size", "stride", "dtype"}`,
/// and `"values"` with `"atol"` where recorded): every difference, described.
pub fn differences(got: &Tensor, want: &Json) -> Vec<String> {
    let mut out = Vec::new();
    let (size, stride, dt) = (
        ints(&want["size"]),
        ints(&want["stride"]),
        dtype(want["dtype"].as_str().unwrap()),
    );
    if got.size() != size.as_slice() || got.stride() != stride.as_slice() || got.dtype() != dt {
        out.push(format!(
            "{}{:?} strides {:?}, PyTorch gives {dt}{size:?} strides {stride:?}",
            got.dtype(),
            got.size(),
            got.stride()
        ));
    }
    if let Some(values) = want["values"].as_array() {
        let atol = want["atol"].as_f64().expect("a recorded value has its tolerance");
        // PyTorch's values in the output's dtype: serde_json reads a decimal to
        // the nearest double only within an ulp, so a float32 value is rounded
        // back to float32 (exact) before an exact comparison.
        let read: Vec<f64> = values.iter().map(|v| v.as_f64().unwrap()).collect();
        let expected = Tensor::from_f64(dt, &read, &[read.len() as i64])
            .and_then(|t| t.to_f64_vec())
            .unwrap_or(read);
        let actual = got.to_f64_vec().unwrap();
        let worst = actual
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        if actual.len() != expected.len() || !(worst <= atol) {
            out.push(format!(
                "values differ from PyTorch's by {worst} (tolerance {atol}): got {actual:?}, PyTorch gives {expected:?}"
            ));
        }
    }
    out
}
