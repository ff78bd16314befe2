//! Valid programs.

use super::*;

const VALID_CASES: &[Case] = &[
    (
        "pointwise kernel",
        |p| {
            let (mut g, k, x, b) = kernel_main(p, 8);
            g.call_kernel(&k, add_args(x.clone(), b.clone()));
            g.free(&x);
            g.output(&b);
            g.finish();
        },
        &[],
    ),
    (
        "released storage reused by a smaller buffer",
        |p| {
            let mut g = p.main();
            let b = g.allocate("buf0", f32n(8));
            g.line(Line::FreeIfNotReused {
                buffer: b.clone(),
                is_reused: true,
            });
            let n = g.reuse(&b, "buf1", f32s(&[SymExpr::Int(2), SymExpr::Int(3)]));
            g.output(&n);
            g.finish();
        },
        &[],
    ),
    (
        "symbolic reuse of equal storage, view within storage",
        |p| {
            p.backed_symbol("s0", Some(4));
            let mut g = p.main();
            g.tensor_input("arg0_1", f32s(&[sym("s0")]));
            let b = g.allocate("buf0", f32s(&[sym("s0")]));
            let n = g.reuse(&b, "buf1", f32s(&[sym("s0")]));
            let v = g.reinterpret(&n, "buf2", f32n(1));
            g.output(&v);
            g.output(&n);
            g.finish();
        },
        &[],
    ),
    (
        "named Triton arguments",
        |p| {
            let (mut g, k, x, b) = kernel_main(p, 8);
            g.line(raw_call(
                &k,
                vec![
                    named("in_ptr0", ArgValue::Buffer(x)),
                    named("out_ptr0", ArgValue::Buffer(b.clone())),
                    named("xnumel", ArgValue::Expr(SymExpr::Int(8))),
                    named("XBLOCK", ArgValue::Expr(SymExpr::Int(16))),
                ],
            ));
            g.output(&b);
            g.finish();
        },
        &[],
    ),
    (
        "same precomputed assignment twice",
        |p| {
            p.backed_symbol("s0", None);
            let ks0 = p.precomputed_symbol("ks0");
            let mut g = p.main();
            g.tensor_input("arg0_1", f32s(&[sym("s0")]));
            g.let_symbol(&ks0, SymExpr::mul(SymExpr::Int(2), sym("s0")));
            g.let_symbol(&ks0, SymExpr::mul(SymExpr::Int(2), sym("s0")));
            g.output_expr(sym("ks0"));
            g.finish();
        },
        &[],
    ),
];

#[test]
fn valid_programs() {
    for (name, build, expect) in VALID_CASES {
        check(name, *build, expect);
    }
}
