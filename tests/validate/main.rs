//! The validator: one invalid program per rule (built in Rust) with the exact
//! diagnostics it must produce, valid programs with what `ProgramInfo` reports
//! about them, and the `.wir` fixtures (valid ones validate; the diagnostics of
//! invalid ones are snapshots).

#[path = "../common/mod.rs"]
mod common;

use wrapir::ir::{
    validate, ArgValue, AssertSizeStride, BufName, CallArg, Conditional, DType, Device, DynamicScalar, GraphBuilder,
    GraphName, GridType, KernelCall, KernelName, KeyEntry, Layout, Line, Predicate, ProgramBuilder, Site, SymbolKind,
    TensorMethod, TritonMeta, ValidationErrors, ValueRange, MAIN_GRAPH,
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

/// `main` with input `arg0_1: f32[8]`, the pointwise kernel defined and
/// `buf0: f32[n]` allocated: the graph, the kernel, the input and `buf0`.
fn kernel_main(p: &mut ProgramBuilder, n: i64) -> (GraphBuilder<'_>, KernelName, BufName, BufName) {
    let k = add_kernel(p);
    let mut g = p.main();
    let x = input8(&mut g);
    g.define_kernel(&k);
    let b = g.allocate("buf0", f32n(n));
    (g, k, x, b)
}

/// The pointwise kernel's arguments: `in_ptr0`, `out_ptr0` and `xnumel` 8.
fn add_args(input: BufName, output: BufName) -> [ArgValue; 3] {
    common::pointwise_args(input, output, 8)
}

fn named(name: &str, value: ArgValue) -> CallArg {
    CallArg {
        name: Some(name.to_string()),
        value,
    }
}

fn raw_call(kernel: &KernelName, args: Vec<CallArg>) -> Line {
    Line::KernelCall(KernelCall {
        kernel: kernel.clone(),
        args,
        device: Some(Device::cuda(0)),
    })
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

fn check(name: &str, build: fn(&mut ProgramBuilder), expect: &[&str]) {
    let mut p = ProgramBuilder::new();
    build(&mut p);
    let program = p.finish();
    let got = match validate(&program) {
        Ok(_) => vec![],
        Err(e) => render(&e),
    };
    assert_eq!(got, expect, "case `{name}`");
}

type Case = (&'static str, fn(&mut ProgramBuilder), &'static [&'static str]);
