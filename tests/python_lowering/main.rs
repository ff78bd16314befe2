//! Python lowering: exact lines per line kind, the module frame, errors, and
//! `python3 -m py_compile` over every program built here and every fixture.

#[path = "../common/mod.rs"]
mod common;

use indexmap::IndexMap;
use smallvec::smallvec;
use wrapir::ir::Location;
use wrapir::ir::{
    ArgValue, AssertSizeStride, CallArg, DType, Device, DynamicScalar, ExternCall, GraphBuilder, GridType, HalideArg,
    HalideMeta, KernelBackend, KernelCall, KeyEntry, KeyPath, Layout, Line, MultiIndex, Predicate, Program,
    ProgramBuilder, TensorMethod, TritonMeta,
};
use wrapir::lower::python::{write_string, CallForm, Error, ErrorKind, Options, StreamBinding};
use wrapir::sym::{CmpOp, SymExpr};

mod forms;
mod lines;

fn cuda() -> Device {
    Device::cuda(0)
}

fn f32(size: &[i64]) -> Layout {
    Layout::contiguous(DType::Float32, cuda(), size.iter().map(|&s| SymExpr::Int(s)))
}

fn sym(n: &str) -> SymExpr {
    SymExpr::sym(n)
}

fn buf(n: &str) -> ArgValue {
    ArgValue::Buffer(n.into())
}

fn triton_meta() -> TritonMeta {
    TritonMeta::new(
        common::pointwise_signature(),
        [("XBLOCK".to_string(), 128)].into_iter().collect(),
        GridType::Grid1D,
    )
}

/// A Halide kernel's arguments by name: `ks0`, `ks1`, ... scalar sizes
/// (`long`), every other name a `float*` buffer of 4 elements.
fn halide_args(names: &[&str]) -> Vec<HalideArg> {
    names
        .iter()
        .map(|&n| {
            let scalar = n.starts_with("ks");
            HalideArg {
                ctype: if scalar { "long" } else { "float*" }.into(),
                name: n.into(),
                shape: (!scalar).then(|| vec!["4L".into()]),
                stride: (!scalar).then(|| vec!["1L".into()]),
                offset: (!scalar).then(|| "0".into()),
                alias_of: None,
            }
        })
        .collect()
}

const TRITON_SRC: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    pass";

fn lower(p: &Program, options: &Options) -> Result<String, Error> {
    let info = wrapir::ir::validate(p).expect("test programs are valid");
    write_string(&info, options)
}

fn lower_ok(p: &Program) -> String {
    lower(p, &Options::default()).unwrap_or_else(|e| panic!("lowering failed: {e}"))
}

/// The body of `Runner.call`, each line without the two levels of indentation.
fn call_body(text: &str) -> Vec<String> {
    let start = text.find("    def call(self, args):\n").expect("call method") + "    def call(self, args):\n".len();
    let end = text.find("\nrunner = Runner(partitions=[])").expect("runner line");
    text[start..end]
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix("        ").unwrap_or(l).to_string())
        .collect()
}

/// Builds a one-graph program with an `f32[4]` input `arg0_1` on `cuda:0`, lets
/// `body` add lines, returns the program.
fn program(body: impl FnOnce(&mut GraphBuilder<'_>)) -> Program {
    let mut p = ProgramBuilder::new();
    p.unbacked_symbol("u0", Some(0), None);
    p.precomputed_symbol("ks0");
    let mut g = p.main();
    g.tensor_input("arg0_1", f32(&[4]));
    body(&mut g);
    g.finish();
    p.finish()
}

/// Lowers `p`, checks that `python3 -m py_compile` accepts it, and returns the
/// lines of `call` after the input preamble (`arg0_1, = args`, `args.clear()`,
/// the input assert).
fn lines_after_preamble(p: &Program) -> Vec<String> {
    let text = lower_ok(p);
    py_compile(&text);
    let body = call_body(&text);
    assert_eq!(
        body[..3],
        [
            "arg0_1, = args",
            "args.clear()",
            "assert_size_stride(arg0_1, (4, ), (1, ))"
        ]
    );
    body[3..].to_vec()
}

/// Each case's program lowers to exactly its lines after the preamble.
fn check_cases(cases: Vec<(&str, Program, Vec<&str>)>) {
    for (name, p, expect) in cases {
        let got = lines_after_preamble(&p);
        assert_eq!(got, expect, "case `{name}`");
    }
}

/// The symbols every program here declares, as [`program`] does, after the
/// `wrapir 1` header: what a case file's graph follows.
const CASE_PRELUDE: &str = "wrapir 1\n\nsymbol u0: unbacked [0, inf]\nsymbol ks0: precomputed\n\n";

/// Each case of a case file (`cases/*.txt`, [`common::text_cases`]): a
/// `main` graph with the `f32[4]` input `arg0_1`, after [`CASE_PRELUDE`],
/// lowers to exactly its lines after the preamble.
fn check_file(file: &str) {
    for case in common::text_cases(file) {
        let text = format!("{CASE_PRELUDE}{}", case.input);
        let p = wrapir::text::parse(&text).unwrap_or_else(|e| panic!("case `{}` does not parse: {e}", case.name));
        assert_eq!(lines_after_preamble(&p), case.expect, "case `{}`", case.name);
    }
}

fn py_compile(text: &str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("wrapir_py_{}_{n}.py", std::process::id()));
    std::fs::write(&path, text).expect("write temp module");
    let out = common::run_tool(
        std::process::Command::new("python3")
            .args(["-m", "py_compile"])
            .arg(&path),
        "python3",
        "checking the lowered module with py_compile",
    );
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "py_compile rejected the module:\n{}\n---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path(entries: &[KeyEntry]) -> KeyPath {
    entries.iter().cloned().collect()
}
