//! A user's custom op in a real Inductor program: `fixtures/inductor/cases_cpu_custom_ops.py`
//! exported with PyTorch 2.15 (`fixtures/inductor/bundles_cpu_2.15/custom_ops/`), where
//! Inductor calls the op's multi-output `.out` overload on outputs it allocated first
//! (`extern_multi_out buf1 = torch.ops.wrapir_test.pair.out(buf0, 2.0) outs(out0=buf2,
//! out1=buf3)`). The host backend runs it once the caller registers the op; without
//! that, the run names the op.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use wrapir::bundle::Bundle;
use wrapir::exec::host::kernels as host_kernels;
use wrapir::exec::host::HostBackend;
use wrapir::exec::run_program;
use wrapir::exec::{ExecError, Tensor, Value};
use wrapir::ir::Line;

const OP: &str = "torch.ops.wrapir_test.pair.out";

fn bundle_dir() -> PathBuf {
    common::root().join("fixtures/inductor/bundles_cpu_2.15/custom_ops/pair_multi_out")
}

/// The case file's `pair.out`: `out0 = x * scale`, `out1 = x + scale`, written in place.
fn pair_out(calls: Arc<Mutex<Vec<(usize, Vec<String>)>>>) -> wrapir::exec::host::ExternFn {
    Arc::new(move |args: &[Value<Tensor>], kwargs| {
        let (Some(Value::Tensor(x)), Some(Value::Float(scale))) = (args.first(), args.get(1)) else {
            return Err(ExecError::Type(format!(
                "pair.out: expected (tensor, float), got {args:?}"
            )));
        };
        let (Some(Value::Tensor(out0)), Some(Value::Tensor(out1))) = (kwargs.get("out0"), kwargs.get("out1")) else {
            return Err(ExecError::Type("pair.out: expected out0= and out1= tensors".into()));
        };
        let x = x.to_f64_vec()?;
        out0.write_f64(&x.iter().map(|v| v * scale).collect::<Vec<_>>())?;
        out1.write_f64(&x.iter().map(|v| v + scale).collect::<Vec<_>>())?;
        if let Ok(mut c) = calls.lock() {
            c.push((args.len(), kwargs.keys().cloned().collect()));
        }
        Ok(Value::List(vec![
            Value::Tensor(out0.clone()),
            Value::Tensor(out1.clone()),
        ]))
    })
}

#[test]
fn the_multi_output_out_call_is_typed() {
    let bundle = Bundle::open(&bundle_dir()).unwrap();
    let calls: Vec<_> = bundle
        .program()
        .main
        .lines
        .iter()
        .filter_map(|l| match l {
            Line::ExternKernelMultiOut(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{:#?}", bundle.program().main.lines);
    let m = calls[0];
    assert_eq!(m.call.op, OP);
    assert_eq!(m.outs.keys().map(String::as_str).collect::<Vec<_>>(), ["out0", "out1"]);
    // Both outputs are allocated before the call, as Inductor does.
    let lines = &bundle.program().main.lines;
    let call_at = lines
        .iter()
        .position(|l| matches!(l, Line::ExternKernelMultiOut(_)))
        .unwrap();
    for out in m.outs.values() {
        assert!(
            lines[..call_at]
                .iter()
                .any(|l| matches!(l, Line::Allocate { buffer } if buffer == out)),
            "{out} is not allocated before the call"
        );
    }
    // The Python wrapper prints Inductor 2.15's line: the outputs last, by keyword.
    let info = wrapir::ir::validate(bundle.program()).unwrap();
    let py = wrapir::lower::python::write_string(&info, &Default::default()).unwrap();
    let want = format!("= {OP}(buf0, 2.0, out0=");
    assert!(py.contains(&want), "{py}");
}

#[test]
fn the_host_runs_a_registered_custom_op_and_matches_eager() {
    let bundle = Bundle::open(&bundle_dir()).unwrap();
    let program = bundle.program().clone();
    let mut backend = HostBackend::default();
    host_kernels::load_kernels_from(&mut backend, &program, &bundle.kernel_images(), None).unwrap();
    let inputs = bundle.inputs().unwrap().expect("inputs.safetensors");

    // Not registered: the run stops at the op and names it.
    let err = run_program(&program, &mut backend, &inputs).unwrap_err().to_string();
    assert!(err.contains(OP), "{err}");

    let calls = Arc::new(Mutex::new(Vec::new()));
    backend.register_op(OP, pair_out(calls.clone()));
    let out = run_program(&program, &mut backend, &inputs).unwrap();
    let comparison = common::compare_with_bundle(&bundle, &out.outputs).unwrap();
    assert_eq!(comparison.first_error(), None);
    // The op saw its own two arguments and the outputs as keywords.
    let calls = calls.lock().unwrap();
    assert_eq!(calls.as_slice(), [(2, vec!["out0".to_string(), "out1".to_string()])]);
}
