//! An extern op's output layout is part of its contract: Inductor asserts the
//! sizes and strides PyTorch gives (`assert_size_stride`) and indexes the
//! buffer with them. `fixtures/inductor/op_layouts.json` (written by
//! `fixtures/inductor/op_layouts.py` with PyTorch on the CPU) holds, per
//! case, an op's inputs (sizes, strides, storage offset, dtype, values) and
//! the sizes, strides and dtype of every tensor eager PyTorch returned; each
//! case runs on the host backend with inputs laid out the same way and must
//! give the same layouts. Every extern op the host backend implements has a
//! case, or is listed in `NOT_ALLOCATING` (or its namespace in
//! `NOT_ALLOCATING_NAMESPACES`) with the reason its output layout is not its
//! own choice.

use indexmap::IndexMap;
use serde_json::Value as Json;
use wrapir::exec::host::HostBackend;
use wrapir::exec::op::op_key;
use wrapir::exec::{Backend, ExternCall, Tensor, TensorSpec, Value};
use wrapir::ir::{DType, Device};

mod common;

/// Host ops whose output layout is not theirs to choose, so no case records
/// one: in-place ops return their argument, views are given their strides
/// by their arguments, and the rest are called by Inductor on buffers it
/// allocated (`out=`) or return no tensor.
const NOT_ALLOCATING: &[(&str, &str)] = &[
    ("aten.copy_", "in place: returns its first argument"),
    ("aten.index_put_", "in place: returns its first argument"),
    ("aten.scatter_", "in place: returns its first argument"),
    ("aten.scatter_reduce_", "in place: returns its first argument"),
    ("aten.item", "returns a number, not a tensor"),
    ("aten.randint", "Inductor calls `randint.low_out` on its seed buffer"),
    ("aten.view_as_complex", "a view: strides follow from its argument's"),
    ("aten.view_as_real", "a view: strides follow from its argument's"),
    (
        "aten.view",
        "a view (the host's is `view.dtype` between a complex dtype and its parts): strides follow from its argument's",
    ),
    (
        "aten._scaled_dot_product_efficient_attention",
        "a CUDA op: PyTorch on the CPU cannot run it",
    ),
    (
        "aten._scaled_dot_product_flash_attention",
        "a CUDA op: PyTorch on the CPU cannot run it",
    ),
    (
        "aten._scaled_dot_product_cudnn_attention",
        "a CUDA op: PyTorch on the CPU cannot run it",
    ),
    (
        "aten._cudnn_rnn",
        "a CUDA op: PyTorch on the CPU cannot run it (its layouts, from RNN.cpp, are asserted in host_features and cuda_rnn)",
    ),
    (
        "aten._jagged_to_padded_dense_backward",
        "no ATen op of this name in PyTorch to record a layout from (FBGEMM's)",
    ),
    (
        "aten._padded_dense_to_jagged_backward",
        "no ATen op of this name in PyTorch to record a layout from (FBGEMM's)",
    ),
    ("wrapir.inverse_offsets", "wrapir's own op, no PyTorch counterpart"),
    (
        "aten.bias_addmm",
        "Inductor's Python wrapper of `addmm` (`extern_kernels.bias_addmm`), not an ATen op: called with `out=` on a \
         buffer Inductor allocated; `addmm`'s layouts have cases",
    ),
];

/// Namespaces of host ops that return no tensor, with the reason.
const NOT_ALLOCATING_NAMESPACES: &[(&str, &str)] = &[("streams.", "stream and event ops: they return no tensor")];

fn fixture() -> Json {
    let path = common::root().join("fixtures/inductor/op_layouts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dtype(name: &str) -> DType {
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

fn ints(v: &Json) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

/// A host tensor with the recorded sizes, strides, offset and dtype,
/// holding the recorded values.
fn tensor(t: &Json) -> Tensor {
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

fn value(a: &Json) -> Value<Tensor> {
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
fn tensors(v: &Value<Tensor>, out: &mut Vec<Tensor>) {
    match v {
        Value::Tensor(t) => out.push(t.clone()),
        Value::List(items) => items.iter().for_each(|i| tensors(i, out)),
        _ => {}
    }
}

/// The name Inductor calls `op` by (`aten.mm` -> `torch.ops.aten.mm.default`).
fn call_name(op: &str) -> String {
    if op.matches('.').count() == 1 {
        format!("torch.ops.{op}.default")
    } else {
        format!("torch.ops.{op}")
    }
}

#[test]
fn host_ops_give_pytorchs_output_layouts() {
    let fixture = fixture();
    let cases = fixture["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let op = case["op"].as_str().unwrap();
        let args: Vec<Value<Tensor>> = case["args"].as_array().unwrap().iter().map(value).collect();
        let kwargs: IndexMap<String, Value<Tensor>> = case["kwargs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), value(v)))
            .collect();
        let mut host = HostBackend::default();
        let result = match host.call_extern(ExternCall::new(&call_name(op), &args, &kwargs)) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name} ({op}): {e}"));
                continue;
            }
        };
        let mut got = Vec::new();
        tensors(&result, &mut got);
        let want = case["outputs"].as_array().unwrap();
        if got.len() != want.len() {
            failures.push(format!(
                "{name} ({op}): {} tensors, PyTorch returns {}",
                got.len(),
                want.len()
            ));
            continue;
        }
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let (size, stride, dt) = (
                ints(&w["size"]),
                ints(&w["stride"]),
                dtype(w["dtype"].as_str().unwrap()),
            );
            if g.size() != size.as_slice() || g.stride() != stride.as_slice() || g.dtype() != dt {
                failures.push(format!(
                    "{name} ({op}) output {k}: {}{:?} strides {:?}, PyTorch gives {dt}{size:?} strides {stride:?}",
                    g.dtype(),
                    g.size(),
                    g.stride()
                ));
            }
        }
    }
    common::assert_no_failures(&failures);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
}

#[test]
fn every_host_op_has_a_layout_case_or_a_reason() {
    let fixture = fixture();
    let covered: Vec<String> = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| op_key(&call_name(c["op"].as_str().unwrap())))
        .collect();
    let exempt: Vec<String> = NOT_ALLOCATING.iter().map(|(op, _)| op_key(&call_name(op))).collect();
    let host = HostBackend::default();
    let mut missing = Vec::new();
    for op in host.op_names() {
        let key = op_key(&op);
        let in_exempt_namespace = NOT_ALLOCATING_NAMESPACES.iter().any(|(ns, _)| key.starts_with(ns));
        if !covered.contains(&key) && !exempt.contains(&key) && !in_exempt_namespace {
            missing.push(format!(
                "{op}: no case in op_layouts.json and no reason in NOT_ALLOCATING"
            ));
        }
    }
    for (op, _) in NOT_ALLOCATING {
        assert!(
            host.has_op(&call_name(op)),
            "{op} is exempt but the host does not implement it"
        );
    }
    common::assert_no_failures(&missing);
}
