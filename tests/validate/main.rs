//! The validator: one invalid program per rule (`.wir` text in the case
//! files `cases/*.txt`) with the exact diagnostics it must produce, valid programs with what
//! `ProgramInfo` reports about them, and the `.wir` fixtures (valid ones
//! validate; the diagnostics of invalid ones are snapshots).

#[path = "../common/mod.rs"]
mod common;

use wrapir::ir::{
    validate, ArgValue, BufName, DType, Device, GraphBuilder, GraphName, GridType, KernelName, KeyEntry, Layout, Line,
    Predicate, ProgramBuilder, Site, TensorMethod, TritonMeta, ValidationErrors, MAIN_GRAPH,
};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

mod info;
mod rules;
mod valid;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn f32s(sizes: &[SymExpr]) -> Layout {
    Layout::contiguous(DType::Float32, Device::cuda(0), sizes.iter().cloned())
}

fn f32n(n: i64) -> Layout {
    f32s(&[SymExpr::Int(n)])
}

fn sym(name: &str) -> SymExpr {
    SymExpr::sym(name)
}

/// `in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr`.
fn pointwise_meta() -> TritonMeta {
    TritonMeta {
        num_warps: 1,
        ..TritonMeta::new(
            common::pointwise_signature(),
            [("XBLOCK".to_string(), 16)].into_iter().collect(),
            GridType::Grid1D,
        )
    }
}

fn add_kernel(p: &mut ProgramBuilder) -> KernelName {
    p.triton_kernel("triton_poi_fused_add_0", "", pointwise_meta())
}

/// `arg0_1: f32[8]` input.
fn input8(g: &mut GraphBuilder<'_>) -> BufName {
    g.tensor_input("arg0_1", f32n(8))
}

/// The pointwise kernel's arguments: `in_ptr0`, `out_ptr0` and `xnumel` 8.
fn add_args(input: BufName, output: BufName) -> [ArgValue; 3] {
    common::pointwise_args(input, output, 8)
}

/// One error per string, as a person reading the program's file sees it:
/// `LINE:COLUMN: message`, the file position of the offending line (a
/// graph's header, a table error's declaration) and the message with the
/// lines it mentions named by their file lines; `program: message` for an
/// error about no one place.
fn render_in_file(errors: &ValidationErrors, map: &wrapir::text::SourceMap) -> Vec<String> {
    let file_line = |g: &GraphName, index: usize| {
        let at = map.graphs.get(g.as_str())?.lines.get(index)?;
        Some(format!("line {}", at.line))
    };
    errors
        .iter()
        .map(|e| {
            let message = e.kind.naming_lines(e.graph(), &file_line);
            match map.error_position(e) {
                Some(at) => format!("{}:{}: {message}", at.line, at.column),
                None => format!("program: {message}"),
            }
        })
        .collect()
}

/// What a `{pointwise kernel}` line of a case's program stands for: the
/// pointwise kernel `triton_poi_fused_add_0` of [`add_kernel`], in text form.
const POINTWISE_KERNEL: &str = "kernel triton_poi_fused_add_0: triton {
  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr
  config XBLOCK: 16
  grid Grid1D
  num_warps 1
}";

/// A case's program as a `.wir` file whose lines are the case file's: the
/// `wrapir 1` header, blank lines down to the case's first line, its text (a
/// `{pointwise kernel}` line left blank) and [`POINTWISE_KERNEL`] after it
/// where the case asks for it (items may come in any order).
fn case_program_text(case: &common::TextCase) -> String {
    assert!(case.line >= 2, "case `{}` starts on line {}", case.name, case.line);
    let mut text = format!("wrapir 1{}", "\n".repeat(case.line - 1));
    let mut kernel = false;
    for line in case.input.lines() {
        if line.trim() == "{pointwise kernel}" {
            kernel = true;
        } else {
            text += line;
        }
        text.push('\n');
    }
    if kernel {
        text += POINTWISE_KERNEL;
        text.push('\n');
    }
    text
}

/// The limits a case validates under: the defaults, with those its
/// `; limits NAME = N, ...` line sets (`max_diagnostics`, `max_outputs`).
fn case_limits(case: &common::TextCase) -> wrapir::Limits {
    let mut limits = wrapir::Limits::default();
    for line in case.input.lines() {
        let Some(settings) = line.strip_prefix("; limits ") else {
            continue;
        };
        for setting in settings.split(',') {
            let (name, value) = setting
                .split_once('=')
                .unwrap_or_else(|| panic!("case `{}`: `{setting}` is not NAME = N", case.name));
            let value: usize = value
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("case `{}`: {e}", case.name));
            match name.trim() {
                "max_diagnostics" => limits.max_diagnostics = value,
                "max_outputs" => limits.max_outputs = value,
                other => panic!("case `{}`: no limit `{other}` here", case.name),
            }
        }
    }
    limits
}

/// Parses a case's program ([`case_program_text`]), validates it and compares
/// its diagnostics ([`render_in_file`], positions in the case file) with the
/// expected ones. Its JSON form's errors each name a JSON path where the
/// text's name a file position.
fn check(case: &common::TextCase, file: &str) -> Vec<String> {
    let name = &case.name;
    let text = case_program_text(case);
    let limits = case_limits(case);
    let (program, map) = wrapir::text::parse_with_source_map(&text, &limits)
        .unwrap_or_else(|e| panic!("{file}: case `{name}` does not parse: {e}\n{text}"));
    let (got, json_paths, kinds) = match wrapir::ir::validate_with_limits(&program, &limits) {
        Ok(_) => (vec![], 0, vec![]),
        Err(e) => {
            let json = program.to_json();
            let rendered = wrapir::text::render_validation_errors("p.json", &json, &e, &limits);
            let kinds = e.iter().map(|e| kind_name(&e.kind)).collect();
            (
                render_in_file(&e, &map),
                rendered.matches("\n  --> p.json: ").count(),
                kinds,
            )
        }
    };
    assert_eq!(got, case.expect, "{file}: case `{name}` (line {}):\n{text}", case.line);
    let positioned = got.iter().filter(|l| !l.starts_with("program: ")).count();
    assert_eq!(json_paths, positioned, "{file}: case `{name}`: JSON paths");
    kinds
}

/// The variant name of an error kind (`DoubleFree`), from its `Debug` form.
fn kind_name(kind: &wrapir::ir::ValidationErrorKind) -> String {
    let debug = format!("{kind:?}");
    debug
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Checks every case of a case file ([`common::text_cases`], [`check`]);
/// the kinds of error its cases gave.
fn check_file(file: &str, text: &str) -> Vec<String> {
    common::text_cases(text)
        .iter()
        .flat_map(|case| check(case, file))
        .collect()
}

/// The `{pointwise kernel}` of the case files is the kernel [`add_kernel`]
/// declares.
#[test]
fn pointwise_kernel_text_is_the_builders() {
    let mut p = ProgramBuilder::new();
    add_kernel(&mut p);
    let printed = wrapir::text::print(&p.finish());
    assert_eq!(
        printed,
        format!("wrapir 1\n\n{POINTWISE_KERNEL}\n\ngraph main() -> () {{\n}}\n")
    );
}
