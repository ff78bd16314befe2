//! Subgraph-heavy programs for the scale benchmark, over the inputs every
//! generated program takes (`s0`, `s1`, `arg2_1: f32[s0, s1]`,
//! `arg3_1: f32[s1, s1]`, see [`super::families`]):
//!
//! - [`wide`]: many sibling subgraphs, each run once from the main graph:
//!   three `cond`s (a symbolic predicate on `s0`; each branch allocates,
//!   launches one or two Triton kernels on the operand and returns the
//!   result) for every `while_loop` (a cond graph that launches a kernel
//!   writing a one-element `b8` flag, a body graph that launches a kernel
//!   on the carried tensor);
//! - [`deep`]: chains of `cond`s nested as deep as the default
//!   `max_subgraph_depth` allows: each true branch launches a kernel, runs
//!   the next level's `cond` on its result, frees the intermediate and
//!   returns the element it got back; each false branch launches one kernel.
//!
//! Subgraph buffers and inputs carry their graph's name as a prefix, as
//! Inductor names them. Every predicate is symbolic except the while
//! loops' (a meta run reads those from `--predicate`).

use super::families::{cuda_f32, matmul_inputs};
use super::{cfg, kernel_meta, sig, triton_source, Family};
use wrapir::ir::{
    ArgValue, BufName, ConstValue, DType, Device, GraphBuilder, GridType, KernelName, Layout, MultiIndex, Predicate,
    Program, ProgramBuilder, TritonMeta,
};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

/// The kernels the subgraph programs launch.
struct Kernels {
    /// `(in_ptr0, out_ptr0, xnumel)`.
    pointwise: KernelName,
    /// `(in_out_ptr0, in_ptr0, xnumel)`.
    in_place: KernelName,
    /// `(in_ptr0, in_ptr1, out_ptr0, xnumel)`.
    binary: KernelName,
    /// `(in_ptr0: *fp32, out_ptr0: *i1, xnumel = 1)`: a while loop's flag.
    flag: KernelName,
}

fn declare_kernels(p: &mut ProgramBuilder) -> Kernels {
    let mut declare = |family: Family, i: usize| {
        let (name, meta) = kernel_meta(family, i);
        p.triton_kernel(&name, &triton_source(&name), meta)
    };
    let pointwise = declare(Family::Pointwise, 0);
    let in_place = declare(Family::InPlace, 1);
    let binary = declare(Family::Binary, 2);
    let mut flag_meta = TritonMeta::new(
        sig(&[
            ("in_ptr0", "*fp32"),
            ("out_ptr0", "*i1"),
            ("xnumel", "i32"),
            ("XBLOCK", "constexpr"),
        ]),
        cfg(&[("XBLOCK", 1)]),
        GridType::Grid1D,
    );
    flag_meta.constants.insert("xnumel".into(), ConstValue::Int(1));
    let flag_name = "triton_poi_fused_lt_3";
    let flag = p.triton_kernel(flag_name, &triton_source(flag_name), flag_meta);
    Kernels {
        pointwise,
        in_place,
        binary,
        flag,
    }
}

fn numel() -> ArgValue {
    ArgValue::Expr(SymExpr::mul(SymExpr::sym("s0"), SymExpr::sym("s1")))
}

fn buf(b: &BufName) -> ArgValue {
    ArgValue::Buffer(b.clone())
}

/// `s0 > threshold`.
fn s0_above(threshold: i64) -> Predicate {
    Predicate::Expr(SymExpr::cmp(CmpOp::Gt, SymExpr::sym("s0"), SymExpr::Int(threshold)))
}

/// A subgraph taking one `f32[s0, s1]` input: `body` writes its lines
/// (inside a device block) given the input and returns the output.
fn subgraph(p: &mut ProgramBuilder, name: &str, body: impl FnOnce(&mut GraphBuilder<'_>, &str, &BufName) -> BufName) {
    let mut g = p.subgraph(name);
    let x = g.tensor_input(&format!("{name}_arg0_1"), x_layout());
    g.line(wrapir::ir::Line::EnterDeviceContext {
        device_index: 0,
        streams: None,
    });
    let out = body(&mut g, name, &x);
    g.line(wrapir::ir::Line::ExitDeviceContext);
    g.output(&out);
    g.finish();
}

fn x_layout() -> Layout {
    cuda_f32(&[&Symbol::new("s0"), &Symbol::new("s1")])
}

/// The main graph's frame: inputs, kernel definitions, a device block;
/// `body` writes the rest given the input and returns the output.
fn main_graph(p: &mut ProgramBuilder, k: &Kernels, body: impl FnOnce(&mut GraphBuilder<'_>, BufName) -> BufName) {
    let (s0, s1) = (Symbol::new("s0"), Symbol::new("s1"));
    let mut g = p.main();
    let (input, _weight) = matmul_inputs(&mut g, &s0, &s1);
    for kernel in [&k.pointwise, &k.in_place, &k.binary, &k.flag] {
        g.define_kernel(kernel);
    }
    g.line(wrapir::ir::Line::EnterDeviceContext {
        device_index: 0,
        streams: None,
    });
    let out = body(&mut g, input);
    g.line(wrapir::ir::Line::ExitDeviceContext);
    g.output(&out);
    g.finish();
}

fn program_with_kernels() -> (ProgramBuilder, Kernels) {
    let mut p = ProgramBuilder::new();
    p.backed_symbol("s0", Some(64));
    p.backed_symbol("s1", Some(32));
    let k = declare_kernels(&mut p);
    (p, k)
}

/// Takes element 0 of the multi-output `result` into `name`, frees the
/// multi-output and, when the graph owns it, the tensor it replaces.
fn take_result(g: &mut GraphBuilder<'_>, name: &str, result: &BufName, replaced: Option<&BufName>) -> BufName {
    let b = g.multi_output(name, x_layout(), result, &[MultiIndex::List(0)]);
    g.free_if_not_reused(result);
    if let Some(old) = replaced {
        g.free(old);
    }
    b
}

/// A subgraph computing `x + x` (the `binary` kernel).
fn doubling_subgraph(p: &mut ProgramBuilder, k: &Kernels, name: &str) {
    subgraph(p, name, |g, gname, x| {
        let y = g.allocate(&format!("{gname}_buf0"), x_layout());
        g.call_kernel(&k.binary, [buf(x), buf(x), buf(&y), numel()]);
        y
    });
}

/// The main graph running `sites` subgraph sites one after another, each
/// on the previous one's result: `site(g, i, name, input)` writes site
/// `i`'s line, whose multi-output `name` (`buf{2i}`) it returns; element 0
/// becomes `buf{2i + 1}`, the next site's input (the site's own input freed
/// once the graph owns it).
fn main_chain(
    p: &mut ProgramBuilder,
    k: &Kernels,
    sites: usize,
    mut site: impl FnMut(&mut GraphBuilder<'_>, usize, &str, &BufName) -> BufName,
) {
    main_graph(p, k, |g, input| {
        let mut cur = input;
        for i in 0..sites {
            let result = site(g, i, &format!("buf{}", 2 * i), &cur);
            cur = take_result(g, &format!("buf{}", 2 * i + 1), &result, (i > 0).then_some(&cur));
        }
        cur
    });
}

/// `units` sibling subgraph sites in the main graph (one `while_loop` in
/// four, the rest `cond`s), each running its own two subgraphs.
pub fn wide(units: usize) -> Program {
    let (mut p, k) = program_with_kernels();
    for i in 0..units {
        if i % 4 == 3 {
            subgraph(&mut p, &format!("while_loop_cond_graph_{i}"), |g, name, x| {
                let flag = g.allocate(
                    &format!("{name}_buf0"),
                    Layout::contiguous(DType::Bool, Device::cuda(0), Vec::<SymExpr>::new()),
                );
                g.call_kernel(&k.flag, [buf(x), buf(&flag), ArgValue::Expr(SymExpr::Int(1))]);
                flag
            });
            subgraph(&mut p, &format!("while_loop_body_graph_{i}"), |g, name, x| {
                let y = g.allocate(&format!("{name}_buf0"), x_layout());
                g.call_kernel(&k.pointwise, [buf(x), buf(&y), numel()]);
                y
            });
        } else {
            subgraph(&mut p, &format!("true_graph_{i}"), |g, name, x| {
                let y = g.allocate(&format!("{name}_buf0"), x_layout());
                g.call_kernel(&k.pointwise, [buf(x), buf(&y), numel()]);
                g.call_kernel(&k.in_place, [buf(&y), buf(x), numel()]);
                y
            });
            doubling_subgraph(&mut p, &k, &format!("false_graph_{i}"));
        }
    }
    main_chain(&mut p, &k, units, |g, i, name, cur| {
        if i % 4 == 3 {
            let graphs = (
                &*format!("while_loop_cond_graph_{i}"),
                &*format!("while_loop_body_graph_{i}"),
            );
            g.while_loop(name, graphs, std::slice::from_ref(cur), &[])
        } else {
            let graphs = (&*format!("true_graph_{i}"), &*format!("false_graph_{i}"));
            // 64 (the hint of s0) > 32 and > 48, not > 64: both branches run.
            let predicate = s0_above([32, 48, 64][i % 4]);
            g.conditional(name, predicate, graphs, std::slice::from_ref(cur))
        }
    });
    p.finish()
}

/// `chains` chains of `cond`s in the main graph, each `depth` subgraphs
/// deep (the main graph runs level 1; level `depth` is the last).
pub fn deep(chains: usize, depth: usize) -> Program {
    let (mut p, k) = program_with_kernels();
    let name = |c: usize, branch: &str, d: usize| format!("chain{c}_{branch}{d}");
    for c in 0..chains {
        for d in 1..=depth {
            subgraph(&mut p, &name(c, "t", d), |g, gname, x| {
                let y = g.allocate(&format!("{gname}_buf0"), x_layout());
                g.call_kernel(&k.pointwise, [buf(x), buf(&y), numel()]);
                if d == depth {
                    return y;
                }
                let graphs = (&*name(c, "t", d + 1), &*name(c, "f", d + 1));
                let result = g.conditional(&format!("{gname}_buf1"), s0_above(16), graphs, std::slice::from_ref(&y));
                take_result(g, &format!("{gname}_buf2"), &result, Some(&y))
            });
            doubling_subgraph(&mut p, &k, &name(c, "f", d));
        }
    }
    main_chain(&mut p, &k, chains, |g, c, buffer, cur| {
        let graphs = (&*name(c, "t", 1), &*name(c, "f", 1));
        g.conditional(buffer, s0_above(16), graphs, std::slice::from_ref(cur))
    });
    p.finish()
}
