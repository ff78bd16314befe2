//! An extern op's output layout is part of its contract: Inductor asserts the
//! sizes and strides PyTorch gives (`assert_size_stride`) and indexes the
//! buffer with them. `fixtures/inductor/op_layouts.json` (written by
//! `fixtures/inductor/op_layouts.py` with PyTorch on the CPU) holds, per
//! case, an op's inputs (sizes, strides, storage offset, dtype, values) and
//! the sizes, strides and dtype of every tensor eager PyTorch returned; each
//! case runs on the host backend with inputs laid out the same way and must
//! give the same layouts; where the case records PyTorch's output values
//! (`values=` in the script: histograms, transformers' grouped GEMM) the host's
//! must equal them within the case's `atol` (0: exactly). Every extern op the
//! host backend implements has a
//! case, or is listed in `NOT_ALLOCATING` (or its namespace in
//! `NOT_ALLOCATING_NAMESPACES`) with the reason its output layout is not its
//! own choice.

use wrapir::exec::host::HostBackend;
use wrapir::exec::op::op_key;
use wrapir::exec::{Backend, ExternCall};

mod common;
#[path = "common/op_cases.rs"]
mod op_cases;

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

#[test]
fn host_ops_give_pytorchs_output_layouts() {
    let fixture = op_cases::fixture();
    let cases = fixture["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let op = case["op"].as_str().unwrap();
        let (call, args, kwargs) = op_cases::call(case);
        let mut host = HostBackend::default();
        let result = match host.call_extern(ExternCall::new(&call, &args, &kwargs)) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name} ({op}): {e}"));
                continue;
            }
        };
        let mut got = Vec::new();
        op_cases::tensors(&result, &mut got);
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
            failures.extend(
                op_cases::differences(g, w)
                    .into_iter()
                    .map(|d| format!("{name} ({op}) output {k}: {d}")),
            );
        }
    }
    common::assert_no_failures(&failures);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let with_values = cases
        .iter()
        .filter(|c| {
            c["outputs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o.get("values").is_some())
        })
        .count();
    assert!(with_values >= 8, "only {with_values} cases record values");
}

#[test]
fn every_host_op_has_a_layout_case_or_a_reason() {
    let fixture = op_cases::fixture();
    let covered: Vec<String> = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| op_key(&op_cases::call_name(c["op"].as_str().unwrap())))
        .collect();
    let exempt: Vec<String> = NOT_ALLOCATING
        .iter()
        .map(|(op, _)| op_key(&op_cases::call_name(op)))
        .collect();
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
            host.has_op(&op_cases::call_name(op)),
            "{op} is exempt but the host does not implement it"
        );
    }
    common::assert_no_failures(&missing);
}
