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

/// One error per string: `graph:line: message` (`-` for the line of header
/// errors, `program` for table errors).
fn render(errors: &ValidationErrors) -> Vec<String> {
    errors
        .iter()
        .map(|e| {
            let graph = e.graph().map(|g| g.to_string()).unwrap_or_else(|| "program".into());
            let line = e.line().map(|l| l.to_string()).unwrap_or_else(|| "-".into());
            format!("{graph}:{line}: {}", e.kind)
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

/// Parses a case's program (with the `wrapir 1` header and a
/// `{pointwise kernel}` line replaced by [`POINTWISE_KERNEL`]), validates
/// it and compares its diagnostics ([`render`]) with the expected ones.
fn check(case: &common::TextCase) {
    let common::TextCase { name, input, expect } = case;
    let text = format!("wrapir 1\n\n{}", input.replace("{pointwise kernel}", POINTWISE_KERNEL));
    let program = wrapir::text::parse(&text).unwrap_or_else(|e| panic!("case `{name}` does not parse: {e}\n{text}"));
    let got = match validate(&program) {
        Ok(_) => vec![],
        Err(e) => render(&e),
    };
    assert_eq!(&got, expect, "case `{name}`:\n{text}");
}

/// Checks every case of a case file ([`common::text_cases`], [`check`]).
fn check_file(file: &str) {
    for case in common::text_cases(file) {
        check(&case);
    }
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
