//! AOTI shim calls of ops with keyword-only optional arguments: every schema
//! argument in schema order, as Inductor's C++ wrapper (the bundle's
//! `inductor.cpp.txt`) passes them.

mod common;

use wrapir::ir::Program;
use wrapir::lower::cpp::{Dialect, Options};

fn aoti(program: &Program) -> String {
    let info = wrapir::ir::validate(program).unwrap();
    wrapir::lower::cpp::write_string(&info, &Options::for_dialect(Dialect::Aoti)).unwrap()
}

/// The lines of `text` that call `shim(`, trimmed.
fn calls<'t>(text: &'t str, shim: &str) -> Vec<&'t str> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.contains(&format!("{shim}(")))
        .collect()
}

fn bundle_program(case: &str) -> (Program, String) {
    let dir = common::root().join("fixtures/inductor/bundles").join(case);
    let program = Program::from_json(&std::fs::read_to_string(dir.join("program.json")).unwrap()).unwrap();
    (program, std::fs::read_to_string(dir.join("inductor.cpp.txt")).unwrap())
}

#[test]
fn segment_reduce_with_offsets_is_inductors_call() {
    let (program, inductor) = bundle_program("feat_segment_reduce");
    let ours = aoti(&program);
    let shim = "aoti_torch_cuda_segment_reduce";
    assert_eq!(calls(&ours, shim), calls(&inductor, shim));
    assert_eq!(calls(&ours, shim).len(), 1);
}

#[test]
fn segment_reduce_spells_out_defaults_and_optional_scalars() {
    let (program, _) = bundle_program("feat_segment_reduce");
    let mut json: serde_json::Value = serde_json::from_str(&program.to_json()).unwrap();
    let lines = json["main"]["lines"].as_array_mut().unwrap();
    let call = lines
        .iter_mut()
        .find(|l| l["op"] == "torch.ops.aten.segment_reduce.default")
        .unwrap();
    // lengths= instead of offsets=, axis and initial given, unsafe positional-or-keyword.
    call["kwargs"] = serde_json::json!({
        "lengths": {"kind": "buffer", "value": "arg1_1"},
        "initial": {"kind": "float", "value": 1.5},
        "unsafe": {"kind": "bool", "value": true},
        "axis": {"kind": "expr", "value": 0},
    });
    let program = Program::from_json(&json.to_string()).unwrap();
    let ours = aoti(&program);
    assert!(ours.contains("double buf1_initial = 1.5;"), "{ours}");
    assert_eq!(
        calls(&ours, "aoti_torch_cuda_segment_reduce"),
        ["AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cuda_segment_reduce(arg0_1, \"sum\", &temporary_reference(arg1_1.get()), nullptr, nullptr, 0L, 1, &buf1_initial, &buf1_handle));"]
    );
    // An argument the schema does not have is an error naming it.
    call_with(
        &mut json,
        serde_json::json!({"offset": {"kind": "buffer", "value": "arg1_1"}}),
    );
    let program = Program::from_json(&json.to_string()).unwrap();
    let info = wrapir::ir::validate(&program).unwrap();
    let err = wrapir::lower::cpp::write_string(&info, &Options::for_dialect(Dialect::Aoti))
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no parameter `offset`"), "{err}");
}

fn call_with(json: &mut serde_json::Value, kwargs: serde_json::Value) {
    let lines = json["main"]["lines"].as_array_mut().unwrap();
    let call = lines
        .iter_mut()
        .find(|l| l["op"] == "torch.ops.aten.segment_reduce.default")
        .unwrap();
    call["kwargs"] = kwargs;
}

/// The first `shim` call of bundle `case`'s lowering equals Inductor's own
/// (in `inductor.cpp.txt`), out-handle names aside (`&buf12_1_handle` for a
/// result the program never extracts, where Inductor numbers a fresh buffer).
fn check_first_call(case: &str, shim: &str) {
    let (program, inductor) = bundle_program(case);
    let ours = aoti(&program);
    let normalize = |line: &str| {
        line.split(", ")
            .map(|arg| {
                if arg.starts_with("&buf") && arg.trim_end_matches([')', ';']).ends_with("_handle") {
                    "&<handle>".to_string() + &arg[arg.find("_handle").unwrap_or(arg.len()) + 7..]
                } else {
                    arg.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let first = |text: &str| calls(text, shim).first().map(|l| normalize(l));
    let want = first(&inductor).unwrap_or_else(|| panic!("{case}: Inductor's wrapper has no `{shim}` call"));
    assert_eq!(first(&ours).as_deref(), Some(want.as_str()), "{case}: `{shim}`");
}

#[test]
fn fallback_calls_match_inductors_in_schema_order() {
    for (case, shim) in [
        ("resnet", "aoti_torch_cuda_convolution"),
        ("convnext", "aoti_torch_cuda_convolution"),
        ("topk", "aoti_torch_cuda_topk"),
        ("cond_branches", "aoti_torch_cuda_index_Tensor"),
        ("vit", "aoti_torch_cuda__scaled_dot_product_efficient_attention"),
        ("vit_bf16", "aoti_torch_cuda__scaled_dot_product_cudnn_attention"),
    ] {
        check_first_call(case, shim);
    }
}
