//! Invalid programs, one per rule, with the exact diagnostics: the case
//! files `cases/*.txt`, one per kind of rule.

use super::*;

/// One test per case file: `test_name => "cases/<file>.txt"`.
macro_rules! case_file_tests {
    ($($name:ident => $file:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check_file($file, include_str!($file));
            }
        )*
    };
}

case_file_tests! {
    buffer_rules => "cases/buffers.txt",
    storage_rules => "cases/storage.txt",
    symbol_rules => "cases/symbols.txt",
    kernel_rules => "cases/kernels.txt",
    structure_rules => "cases/structure.txt",
}

/// The case files, for [`every_error_kind_has_a_case`].
const CASE_FILES: &[(&str, &str)] = &[
    ("cases/buffers.txt", include_str!("cases/buffers.txt")),
    ("cases/storage.txt", include_str!("cases/storage.txt")),
    ("cases/symbols.txt", include_str!("cases/symbols.txt")),
    ("cases/kernels.txt", include_str!("cases/kernels.txt")),
    ("cases/structure.txt", include_str!("cases/structure.txt")),
];

/// The valid program the JSON cases edit: a kernel and a multi-output
/// `.out` call.
const JSON_BASE: &str = "wrapir 1

{pointwise kernel}

graph main(arg0_1: f32[8][1]@cpu) -> () {
  buffer buf0: multi
  buffer buf1: f32[8][1]@cpu
  buffer buf2: f32[8][1]@cpu
  alloc buf1
  alloc buf2
  extern_multi_out buf0 = torch.ops.mylib.pair.out(arg0_1, out0=arg0_1) outs(out1=buf1, out2=buf2)
}
";

/// An edit of [`JSON_BASE`]'s JSON form.
type JsonEdit = fn(&mut serde_json::Value);

/// The kinds of validation error no `.wir` text gives (the parser refuses
/// such text first), each from [`JSON_BASE`]'s JSON form edited: the edit
/// and what `wrapir check` shows for the JSON program (`p.json`).
const JSON_CASES: &[(&str, JsonEdit, &str)] = &[
    (
        "a buffer name that is not an identifier",
        |p| {
            let buffers = p["main"]["buffers"].as_object_mut().expect("buffers");
            let decl = buffers["buf1"].clone();
            buffers.insert("9x".into(), decl);
        },
        "error in graph main: buffer name `9x` is not an identifier\n  --> p.json: main",
    ),
    (
        "a kernel table key that is not its definition's name",
        |p| {
            let kernels = p["kernels"].as_object_mut().expect("kernels");
            let def = kernels.remove("triton_poi_fused_add_0").expect("the kernel");
            kernels.insert("k2".into(), def);
        },
        "error in program: kernel table entry k2 holds a definition named triton_poi_fused_add_0\n  --> p.json: kernels.k2",
    ),
    (
        "an output keyword also passed as an argument",
        |p| {
            let lines = p["main"]["lines"].as_array_mut().expect("lines");
            let call = lines.last_mut().expect("the call");
            call["outs"] = serde_json::json!({"out0": "buf1", "out2": "buf2"});
        },
        "error in graph main: `torch.ops.mylib.pair.out` passes keyword `out0` both as an argument and as an output\n  --> p.json: main.lines[2]",
    ),
];

/// Runs [`JSON_CASES`]; the kinds of error they gave.
fn check_json_cases() -> Vec<String> {
    let base =
        wrapir::text::parse(&JSON_BASE.replace("{pointwise kernel}", POINTWISE_KERNEL)).expect("JSON_BASE parses");
    assert!(validate(&base).is_ok(), "JSON_BASE is valid");
    let mut kinds = Vec::new();
    for (name, edit, want) in JSON_CASES {
        let mut json: serde_json::Value = serde_json::from_str(&base.to_json()).expect("JSON");
        edit(&mut json);
        let text = json.to_string();
        let program = wrapir::ir::Program::from_json(&text).unwrap_or_else(|e| panic!("case `{name}`: {e}"));
        let errors = validate(&program).expect_err(name);
        let got = wrapir::text::render_validation_errors("p.json", &text, &errors, &wrapir::Limits::default());
        assert_eq!(got, *want, "case `{name}`");
        kinds.extend(errors.iter().map(|e| kind_name(&e.kind)));
    }
    kinds
}

#[test]
fn json_only_kinds() {
    check_json_cases();
}

/// Every kind of validation error has a case: in the case files (its
/// message and file position checked), or, where no `.wir` text gives it, in
/// [`JSON_CASES`] (its message and JSON path).
#[test]
fn every_error_kind_has_a_case() {
    let source = include_str!("../../src/ir/validate/errors.rs");
    let body = source
        .split("pub enum ValidationErrorKind {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("ValidationErrorKind in src/ir/validate/errors.rs");
    let variants: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| l.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default())
        .collect();
    assert!(variants.len() > 50, "{variants:?}");
    let mut seen: std::collections::BTreeSet<String> = CASE_FILES
        .iter()
        .flat_map(|(file, text)| check_file(file, text))
        .collect();
    seen.extend(check_json_cases());
    let missing: Vec<&&str> = variants.iter().filter(|v| !seen.contains(**v)).collect();
    assert!(
        missing.is_empty(),
        "kinds of validation error without a case: {missing:?}"
    );
}
