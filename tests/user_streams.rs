//! Programs with user streams, memory pools, kernel-profile blocks and
//! `nan_asserts` (Inductor 2.12-2.15's `EnterCudaStreamContextLine`, device
//! guards with stream info, `torch.ops.streams.*` events,
//! `EnterCudaMemPoolContextLine`, `EnterKernelProfileScopeLine`, and the
//! NaN/Inf checks of inputs and outputs): run in program order on the host,
//! the finite checks failing on the tensor that holds a NaN or Inf (and
//! skipped with the tensor asserts), and each lowering writing what the
//! capturing Inductor writes. Expected values are the fixture's ATen ops
//! (sin, mul, add, neg) worked on the inputs given here.

mod common;

use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::run_program;
use wrapir::exec::{Tensor, Value};
use wrapir::ir::{DType, Program};

fn fixture() -> Program {
    common::load(&common::root().join("fixtures/user_streams.wir"))
}

fn inputs(x: &[f64], y: &[f64]) -> IndexMap<String, Tensor> {
    let mut m = IndexMap::new();
    m.insert("arg0_1".to_string(), Tensor::from_f64(DType::Float32, x, &[8]).unwrap());
    m.insert("arg1_1".to_string(), Tensor::from_f64(DType::Float32, y, &[8]).unwrap());
    m
}

fn values(v: &Value<Tensor>) -> Vec<f64> {
    match v {
        Value::Tensor(t) => t.to_f64_vec().unwrap(),
        other => panic!("expected a tensor, got {other:?}"),
    }
}

const X: [f64; 8] = [0.5, -1.0, 2.0, 0.0, 3.0, -0.25, 1.5, -2.0];
const Y: [f64; 8] = [1.0, 2.0, -3.0, 0.5, 0.0, 4.0, -1.0, 0.25];

#[test]
fn streams_run_in_program_order() {
    let out = run_program(&fixture(), &mut HostBackend::default(), &inputs(&X, &Y)).unwrap();
    // buf2 = sin(x) + y*y and buf3 = -buf2, each rounded to f32 as ATen does.
    let want: Vec<f64> = X
        .iter()
        .zip(&Y)
        .map(|(x, y)| ((*x as f32).sin() + (*y as f32) * (*y as f32)) as f64)
        .collect();
    assert_eq!(values(&out.outputs[0]), want);
    assert_eq!(values(&out.outputs[1]), want.iter().map(|v| -v).collect::<Vec<_>>());
}

#[test]
fn finite_checks_fail_on_nan_or_inf_and_skip_with_the_tensor_asserts() {
    let program = fixture();
    let mut x = X;
    x[3] = f64::NAN;
    let err = run_program(&program, &mut HostBackend::default(), &inputs(&x, &Y))
        .unwrap_err()
        .to_string();
    common::assert_contains(&err, "holds NaN (element 3 in row-major order");
    common::assert_contains(&err, "`arg0_1` holds NaN");
    // An Inf made by the program: y*y overflows f32.
    let mut y = Y;
    y[5] = 1e30;
    let err = run_program(&program, &mut HostBackend::default(), &inputs(&X, &y))
        .unwrap_err()
        .to_string();
    common::assert_contains(&err, "holds Inf (element 5 in row-major order");
    common::assert_contains(&err, "`buf2` holds Inf");
    let mut host = HostBackend::new(HostOptions {
        skip_tensor_asserts: true,
        ..Default::default()
    });
    let out = run_program(&program, &mut host, &inputs(&x, &Y)).unwrap();
    assert!(values(&out.outputs[0])[3].is_nan());
}

#[test]
fn stream_ops_take_indices_only() {
    let text = wrapir::text::print(&fixture()).replace("record_event.default(7, 1)", "record_event.default(7, -1)");
    let program = wrapir::text::parse(&text).unwrap();
    let err = run_program(&program, &mut HostBackend::default(), &inputs(&X, &Y))
        .unwrap_err()
        .to_string();
    common::assert_contains(&err, "argument 1 must be an event, stream or device index");
}

#[test]
fn lowerings_write_each_scope_as_inductor_does() {
    let program = fixture();
    let info = wrapir::ir::validate(&program).unwrap();
    let python = wrapir::lower::python::write_string(&info, &Default::default()).unwrap();
    for want in [
        "from torch._dynamo.variables.streams import _get_stream_by_index",
        "from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index",
        "default_stream = torch.cuda.current_stream()\n",
        "stream1 = _get_stream_by_index(3)\n",
        "stream2 = _get_stream_by_index(5)\n",
        "with stream1:\n",
        "with torch.cuda.use_mem_pool(get_external_object_by_index(4), device=0):\n",
        "assert not arg0_1.isnan().any().item()\n",
        "assert not buf3.isinf().any().item()\n",
        "torch.ops.streams.wait_event.default(7, 0)",
    ] {
        common::assert_contains(&python, want);
    }
    let aoti = wrapir::lower::Target::Cpp.write_string(&info).unwrap();
    common::assert_contains(
        &aoti,
        "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_check_inf_and_nan(\"arg0_1\", arg0_1));",
    );
    // Stream ops have no C shim: the AOTI wrapper, on one stream, comments them.
    common::assert_contains(
        &aoti,
        "// streams.wait_event(7, 0): satisfied by program order on the wrapper's stream",
    );
    assert!(!aoti.contains("aoti_torch_cuda_streams_"), "{aoti}");
    for (op, key) in [
        ("torch.ops.streams.record_event.default", Some("streams.record_event")),
        ("streams.wait_stream", Some("streams.wait_stream")),
        ("torch.ops.streams.sync.default", None),
        ("torch.ops.aten.record_event.default", None),
    ] {
        assert_eq!(wrapir::ir::stream_op(op), key, "{op}");
    }
    let standalone = wrapir::lower::Target::CppStandalone.write_string(&info).unwrap();
    common::assert_contains(&standalone, "wrapir::check_finite(buf2, \"buf2\", stream);");
    let fx = wrapir::lower::Target::Fx.write_string(&info).unwrap();
    common::assert_contains(&fx, "torch._check(not torch.ops.aten.item.default(torch.ops.aten.any.default(torch.ops.aten.isnan.default(arg0_1))))");
    // The text form round-trips, and a scope's exit prints bare where no block pairs it.
    assert_eq!(wrapir::text::parse(&wrapir::text::print(&program)).unwrap(), program);
    let mut crossed = program.clone();
    crossed
        .main
        .lines
        .retain(|l| !matches!(l, wrapir::ir::Line::ExitScope { .. }));
    crossed.main.lines.push(wrapir::ir::Line::ExitScope {
        scope: wrapir::ir::ScopeKind::Stream,
    });
    let text = wrapir::text::print(&crossed);
    common::assert_contains(&text, "enter_stream 1");
    common::assert_contains(&text, "exit_stream");
    assert_eq!(wrapir::text::parse(&text).unwrap(), crossed);
}

#[test]
fn old_json_device_guards_load_without_streams() {
    let line: wrapir::ir::Line =
        serde_json::from_str(r#"{"line": "enter_device_context", "device_index": 0}"#).unwrap();
    assert_eq!(
        line,
        wrapir::ir::Line::EnterDeviceContext {
            device_index: 0,
            streams: None
        }
    );
    let scope: wrapir::ir::Line =
        serde_json::from_str(r#"{"line": "enter_scope", "scope": "mem_pool", "pool": 4, "device_index": 0}"#).unwrap();
    assert_eq!(
        scope,
        wrapir::ir::Line::EnterScope(wrapir::ir::Scope::MemPool {
            pool: 4,
            device_index: 0
        })
    );
}
