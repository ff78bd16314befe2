//! Programs over the inputs every generated program takes: the sizes `s0`
//! and `s1` (hints 64 and 32, also graph inputs `arg0_1`, `arg1_1`), the
//! input `arg2_1: f32[s0, s1]` and the weight `arg3_1: f32[s1, s1]`. The
//! interpreter benchmark and the allocation test (`tests/alloc_free_loop.rs`,
//! which includes this file) run them.

use wrapir::ir::{BufName, DType, Device, GraphBuilder, Layout, Program, ProgramBuilder};
use wrapir::sym::{CmpOp, SymExpr, Symbol};

/// A contiguous `f32` layout on `cuda:0` sized by `sizes`.
pub fn cuda_f32(sizes: &[&Symbol]) -> Layout {
    Layout::contiguous(
        DType::Float32,
        Device::cuda(0),
        sizes.iter().map(|s| SymExpr::Sym((*s).clone())),
    )
}

/// The shared inputs, in `g`; returns the input and the weight.
pub fn matmul_inputs(g: &mut GraphBuilder<'_>, s0: &Symbol, s1: &Symbol) -> (BufName, BufName) {
    g.symbol_input("arg0_1", s0);
    g.symbol_input("arg1_1", s1);
    let input = g.tensor_input("arg2_1", cuda_f32(&[s0, s1]));
    let weight = g.tensor_input("arg3_1", cuda_f32(&[s1, s1]));
    (input, weight)
}

/// A program over the shared inputs returning the input and the weight:
/// `declare` adds to the program's tables (kernels, symbols) and `body`
/// writes the main graph's lines, given what `declare` returned, `s0`, `s1`
/// and the input.
pub fn family<T>(
    declare: impl FnOnce(&mut ProgramBuilder) -> T,
    body: impl FnOnce(&mut GraphBuilder<'_>, T, &Symbol, &Symbol, &BufName),
) -> Program {
    let mut p = ProgramBuilder::new();
    let s0 = p.backed_symbol("s0", Some(64));
    let s1 = p.backed_symbol("s1", Some(32));
    let declared = declare(&mut p);
    let mut g = p.main();
    let (x, w) = matmul_inputs(&mut g, &s0, &s1);
    body(&mut g, declared, &s0, &s1, &x);
    g.output(&x);
    g.output(&w);
    g.finish();
    p.finish()
}

/// `count` runtime asserts on `s0*s1 + i >= i`: integer arithmetic,
/// comparisons and `_assert_scalar` steps.
pub fn asserts(count: usize) -> Program {
    family(
        |_| (),
        |g, (), s0, s1, _| {
            for i in 0..count as i64 {
                let lhs = SymExpr::add(
                    SymExpr::mul(SymExpr::Sym(s0.clone()), SymExpr::Sym(s1.clone())),
                    SymExpr::Int(i),
                );
                g.runtime_assert(
                    SymExpr::cmp(CmpOp::Ge, lhs, SymExpr::Int(i)),
                    &format!("s0*s1 + {i} >= {i}"),
                );
            }
        },
    )
}
