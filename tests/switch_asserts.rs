//! The line kinds Inductor 2.12-2.15 added, run on the host backend:
//! `torch.switch` and `torch.cond` in their `ir.Switch` form (every
//! selector value, in and out of range, tensor and symbolic selectors),
//! grouped size/stride asserts, dtype asserts and the divisor check, each
//! failing with a message that names what failed, and `skip_tensor_asserts`.
//! Expected values are worked from the branches' ATen ops (add, mul, sub;
//! neg, relu) on the inputs given here.

mod common;

use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::run_program;
use wrapir::exec::{Tensor, Value};
use wrapir::ir::{DType, Program};

fn fixture() -> Program {
    common::load(&common::root().join("fixtures/switch_asserts.wir"))
}

fn inputs(selector: i64, x: &[f64], y: &[f64]) -> IndexMap<String, Tensor> {
    let n = x.len() as i64;
    let mut m = IndexMap::new();
    m.insert("arg0_1".to_string(), Tensor::scalar(n));
    m.insert("arg1_1".to_string(), Tensor::scalar(selector));
    m.insert("arg2_1".to_string(), Tensor::from_f64(DType::Float32, x, &[n]).unwrap());
    m.insert("arg3_1".to_string(), Tensor::from_f64(DType::Float32, y, &[n]).unwrap());
    m
}

fn values(v: &Value<Tensor>) -> Vec<f64> {
    match v {
        Value::Tensor(t) => t.to_f64_vec().unwrap(),
        other => panic!("expected a tensor, got {other:?}"),
    }
}

fn zip(x: &[f64], y: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| f(*a, *b)).collect()
}

#[test]
fn switch_runs_the_selected_branch_and_the_last_for_any_other_value() {
    let program = fixture();
    let x = [1.0, -2.0, 3.0, 0.5, 4.0, -1.0];
    let y = [2.0, 2.0, -1.0, 4.0, 0.5, 3.0];
    let add = zip(&x, &y, |a, b| a + b);
    let mul = zip(&x, &y, |a, b| a * b);
    let sub = zip(&x, &y, |a, b| a - b);
    // Inductor's wrapper: `if sel == 0` / `elif sel == 1` / `else`.
    for (selector, want) in [(0, &add), (1, &mul), (2, &sub), (7, &sub), (-1, &sub)] {
        let out = run_program(&program, &mut HostBackend::default(), &inputs(selector, &x, &y)).unwrap();
        assert_eq!(values(&out.outputs[0]), *want, "selector {selector}");
    }
}

#[test]
fn cond_switch_runs_the_false_branch_first() {
    let program = fixture();
    // s0 = 6 > 4: the true branch (relu of y); s0 = 3: the false one (neg of x).
    let (x, y) = ([1.0, -2.0, 3.0, 0.5, 4.0, -1.0], [2.0, -2.0, -1.0, 4.0, 0.5, 3.0]);
    let out = run_program(&program, &mut HostBackend::default(), &inputs(0, &x, &y)).unwrap();
    assert_eq!(values(&out.outputs[1]), vec![2.0, 0.0, 0.0, 4.0, 0.5, 3.0]);
    let (x, y) = ([1.0, -2.0, 3.0], [2.0, -2.0, -1.0]);
    let out = run_program(&program, &mut HostBackend::default(), &inputs(0, &x, &y)).unwrap();
    assert_eq!(values(&out.outputs[1]), vec![-1.0, 2.0, -3.0]);
    assert_eq!(values(&out.outputs[2]), vec![0.5, 1.0, -3.0]);
}

#[test]
fn grouped_and_dtype_asserts_name_the_buffer_and_op() {
    let mut program = fixture();
    // A grouped member that no input can satisfy (stride 2 of a contiguous input).
    let text = wrapir::text::print(&program).replace("arg3_1 [s0] [1]", "arg3_1 [s0] [2]");
    program = wrapir::text::parse(&text).unwrap();
    let (x, y) = ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0]);
    let err = run_program(&program, &mut HostBackend::default(), &inputs(0, &x, &y))
        .unwrap_err()
        .to_string();
    common::assert_contains(&err, "stride of dim 0 is 1, expected 2");
    common::assert_contains(&err, "(input)");
    // The same program runs with tensor asserts off.
    let mut host = HostBackend::new(HostOptions {
        skip_tensor_asserts: true,
        ..Default::default()
    });
    let out = run_program(&program, &mut host, &inputs(0, &x, &y)).unwrap();
    assert_eq!(values(&out.outputs[0]), vec![2.0, 3.0, 4.0]);
}

#[test]
fn a_dtype_assert_that_can_never_pass_is_invalid() {
    let text = wrapir::text::print(&fixture()).replace("dtype i64", "dtype i32");
    let program = wrapir::text::parse(&text).unwrap();
    let err = wrapir::ir::validate(&program).unwrap_err().to_string();
    common::assert_contains(
        &err,
        "assert_size_stride on buf5 expects dtype i32 but the buffer is declared i64",
    );
}

#[test]
fn switch_shapes_are_validated() {
    let base = wrapir::text::print(&fixture());
    for (from, to, want) in [
        (
            "[false_graph_0, true_graph_0]",
            "[false_graph_0, true_graph_0, switch_branch_0]",
            "a cond switch has 3 branches; a cond has two (false, true)",
        ),
        (
            "[switch_branch_0, switch_branch_1, switch_branch_2]",
            "[]",
            "a switch has 0 branches",
        ),
        (
            "[switch_branch_0, switch_branch_1, switch_branch_2]",
            "[switch_branch_0, no_such_graph]",
            "no_such_graph",
        ),
        (
            "assert_div_by_zero s0",
            "assert_div_by_zero (s0 > 2)",
            "divisor s0 > 2 is a boolean expression",
        ),
    ] {
        let program = wrapir::text::parse(&base.replace(from, to)).unwrap();
        let err = wrapir::ir::validate(&program).unwrap_err().to_string();
        common::assert_contains(&err, want);
    }
}

#[test]
fn lowerings_write_each_versions_text() {
    let info_program = fixture();
    let info = wrapir::ir::validate(&info_program).unwrap();
    let python = wrapir::lower::python::write_string(&info, &Default::default()).unwrap();
    for want in [
        "assert_size_stride_grouped = torch._C._dynamo.guards.assert_size_stride_grouped",
        "from torch._inductor.runtime.runtime_utils import assert_tensor_metadata",
        "assert_size_stride_grouped((arg2_1, arg3_1), ((s0, ), (s0, )), ((1, ), (1, )), 'input')",
        "buf0_selector = int(arg1_1.item())",
        "elif buf0_selector == 1:",
        "buf3_selector = int(s0 > 4)",
        "assert_tensor_metadata(buf5, (u0, 1), (1, u0), torch.int64, 'torch.ops.aten.nonzero.default')",
    ] {
        common::assert_contains(&python, want);
    }
    let fx = wrapir::lower::Target::Fx.write_string(&info).unwrap();
    for want in [
        "torch.ops.higher_order.switch(arg1_1, [switch_branch_0, switch_branch_1, switch_branch_2], (arg2_1, arg3_1))",
        "torch.ops.higher_order.cond(gt, true_graph_0, false_graph_0, (arg2_1, arg3_1))",
        ".dtype == torch.int64)",
        "'Integer division by zero'",
    ] {
        common::assert_contains(&fx, want);
    }
}

/// torch.export's derived dimensions: input sizes `2*s0 + 1` and `s1 - 3`
/// bind their symbols, solved, on the host (sizes that no integer symbol
/// gives are refused by name), and in every lowering; expressions that
/// determine no symbol are refused in upstream's words.
#[test]
fn derived_input_dimensions_are_solved() {
    let program = common::load(&common::root().join("fixtures/derived_dims.wir"));
    let mut inputs = IndexMap::new();
    let x = [-1.0, 2.0, -3.0, 4.0, -5.0, 6.0, -7.0, 8.0, -9.0];
    inputs.insert(
        "arg0_1".to_string(),
        Tensor::from_f64(DType::Float32, &x, &[9]).unwrap(),
    );
    inputs.insert(
        "arg1_1".to_string(),
        Tensor::from_f64(DType::Float32, &[1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap(),
    );
    let out = run_program(&program, &mut HostBackend::default(), &inputs).unwrap();
    assert_eq!(values(&out.outputs[0]), x.map(|v: f64| v.max(0.0)));
    assert_eq!(values(&out.outputs[1]), vec![-1.0, -2.0, -3.0, -4.0]);
    assert!(matches!(out.outputs[2], Value::Int(4)), "{:?}", out.outputs[2]);
    assert!(matches!(out.outputs[3], Value::Int(5)), "{:?}", out.outputs[3]);
    inputs.insert(
        "arg0_1".to_string(),
        Tensor::from_f64(DType::Float32, &[0.0; 8], &[8]).unwrap(),
    );
    let err = run_program(&program, &mut HostBackend::default(), &inputs)
        .unwrap_err()
        .to_string();
    common::assert_contains(
        &err,
        "size 0 of `arg0_1` is 8, which `2*s0 + 1` equals for no integer `s0`",
    );
    let info = wrapir::ir::validate(&program).unwrap();
    for target in wrapir::lower::Target::ALL {
        let text = target
            .write_string(&info)
            .unwrap_or_else(|e| panic!("{}: {e}", target.name()));
        assert!(text.contains("s0") && text.contains("s1"), "{}", target.name());
    }
    let text = wrapir::text::print(&program);
    for (to, want) in [
        ("s0*s0", "Cannot solve input expression s0*s0 for s0"),
        (
            "s0 + s1",
            "Compound input s0 + s1 leaves these symbols undefined: [s0, s1]",
        ),
    ] {
        let bad = wrapir::text::parse(&text.replace("2*s0 + 1", to).replace("s1 + (-3)", to)).unwrap();
        let err = wrapir::ir::validate(&bad).unwrap_err().to_string();
        common::assert_contains(&err, want);
    }
}

/// Compound symbolic inputs (upstream's `compound_symint_graph_input`): a
/// branch closing over `2*s0 + 1` takes it as an integer input and solves
/// `s0` from it (FX, Python); main solves `s2` from its input `2*s2 + 1`
/// on the host and in every lowering; a value the expression takes for no
/// integer, and a non-affine expression, are refused by name.
#[test]
fn compound_symint_inputs_are_solved() {
    let program = common::load(&common::root().join("fixtures/compound_symint_input.wir"));
    let x = [1.0, -2.0, 3.0, -4.0];
    let run = |s0: i64, n: i64| {
        let mut inputs = IndexMap::new();
        inputs.insert(
            "arg0_1".to_string(),
            Tensor::from_i64(DType::Int64, &[s0], &[]).unwrap(),
        );
        inputs.insert(
            "arg1_1".to_string(),
            Tensor::from_f64(DType::Float32, &x, &[4]).unwrap(),
        );
        inputs.insert("arg2_1".to_string(), Tensor::from_i64(DType::Int64, &[n], &[]).unwrap());
        run_program(&program, &mut HostBackend::default(), &inputs)
    };
    let out = run(3, 11).unwrap();
    assert_eq!(values(&out.outputs[0]), vec![1.0, -2.0, 3.0]);
    assert!(matches!(out.outputs[1], Value::Int(5)), "{:?}", out.outputs[1]);
    let out = run(2, 1).unwrap();
    assert_eq!(values(&out.outputs[0]), vec![-1.0, 2.0]);
    assert!(matches!(out.outputs[1], Value::Int(0)), "{:?}", out.outputs[1]);
    let err = run(3, 10).unwrap_err().to_string();
    common::assert_contains(
        &err,
        "integer input `arg2_1` is 10, which `2*s2 + 1` equals for no integer `s2`",
    );
    let info = wrapir::ir::validate(&program).unwrap();
    let python = wrapir::lower::Target::Python.write_string(&info).unwrap();
    for want in ["s0 = (true_graph_0_arg1_1 + (-1)) // 2", "s2 = (arg2_1 + (-1)) // 2"] {
        common::assert_contains(&python, want);
    }
    for target in wrapir::lower::Target::ALL {
        let text = target
            .write_string(&info)
            .unwrap_or_else(|e| panic!("{}: {e}", target.name()));
        assert!(text.contains("s2"), "{}", target.name());
    }
    let fx = wrapir::lower::Target::Fx.write_string(&info).unwrap();
    common::assert_contains(&fx, "sym_sum = torch.sym_sum([true_graph_0_arg1_1, -1])");
    let text = wrapir::text::print(&program);
    let bad = wrapir::text::parse(&text.replace("sym 2*s2 + 1", "sym s2*s2")).unwrap();
    common::assert_contains(
        &wrapir::ir::validate(&bad).unwrap_err().to_string(),
        "Cannot solve input expression s2*s2 for s2",
    );
    // JSON keeps the input's expression.
    let json = serde_json::to_string(&program).unwrap();
    common::assert_contains(&json, r#"{"kind":"sym_expr","name":"arg2_1","expr":"2*s2 + 1"}"#);
    assert_eq!(serde_json::from_str::<Program>(&json).unwrap(), program);
}
