//! The text form's parser on inputs that are not printer output: malformed
//! programs (each error's position and message), floats that JSON cannot
//! write, and call arguments as Inductor prints them.

use wrapir::ir::*;
use wrapir::text::{parse, print};

// ---------------------------------------------------------------- errors

/// `wrapir 1` + a main graph with `body` inside.
fn in_main(body: &str) -> String {
    format!("wrapir 1\ngraph main(arg0_1: f32[4][1]@cuda:0) -> () {{\n  buffer buf0: f32[4][1]@cuda:0\n{body}\n}}\n")
}

#[test]
fn malformed_inputs() {
    let cases: Vec<(String, &str)> = vec![
        ("".into(), "line 1, column 1: empty input: expected `wrapir <version>` header"),
        ("wrapper 1\n".into(), "line 1, column 1: expected `wrapir <version>` header"),
        ("wrapir 2\n".into(), "line 1, column 8: unsupported format version 2 (this wrapir reads version 1)"),
        ("wrapir 1\n".into(), "line 2, column 1: missing `graph main`"),
        ("wrapir 1 x\n".into(), "line 1, column 10: unexpected `x` after the header"),
        ("wrapir 1\nfunction f\n".into(), "line 2, column 1: unknown item `function` (expected `symbol`, `constant`, `kernel` or `graph`)"),
        ("wrapir 1\ngraph g() -> () {\n}\n".into(), "line 2, column 7: the first graph must be `main`, found `g`"),
        ("wrapir 1\ngraph main() -> () {\n".into(), "line 3, column 1: unexpected end of input: graph `main` is not closed (missing `}`)"),
        ("wrapir 1\ngraph main() {\n}\n".into(), "line 2, column 14: expected `->` after the inputs of graph `main`"),
        ("wrapir 1\ngraph main(x: f33[4][1]@cpu) -> () {\n}\n".into(), "line 2, column 15: unknown dtype `f33` in the layout of input `x`"),
        ("wrapir 1\ngraph main(x: f32[4][1]@gpu) -> () {\n}\n".into(), "line 2, column 25: unknown device `gpu` in the layout of input `x`"),
        ("wrapir 1\ngraph main(x: f32[4, 1]) -> () {\n}\n".into(), "line 2, column 24: expected `[` (strides) after the sizes of input `x`"),
        ("wrapir 1\ngraph main(x: f32[4, (s0][1]@cpu) -> () {\n}\n".into(), "line 2, column 25: unbalanced `]` in the sizes of input `x`"),
        ("wrapir 1\nsymbol s0: sized\ngraph main() -> () {\n}\n".into(), "line 2, column 12: unknown symbol kind `sized` for `s0` (expected `backed`, `unbacked`, `precomputed` or `unbacked_float`)"),
        ("wrapir 1\nsymbol s0: backed\nsymbol s0: backed\ngraph main() -> () {\n}\n".into(), "line 3, column 8: symbol `s0` is declared twice"),
        ("wrapir 1\nsymbol s0: backed [0 inf]\ngraph main() -> () {\n}\n".into(), "line 2, column 22: expected `,` between the bounds of the range of symbol `s0`"),
        ("wrapir 1\ngraph main(x: f32[4, (s0 + 1][1]@cpu) -> () {\n}\n".into(), "line 2, column 29: unbalanced `]` in the sizes of input `x`"),
        (in_main("  let ks0 = (s0 + 1"), "line 4, column 13: unclosed `(` in `let ks0`"),
        (in_main("  let ks0 = s0 +* 2"), "line 4, column 17: invalid expression `s0 +* 2` in `let ks0`: expected an expression, found `*`"),
        (in_main("  alloca buf0"), "line 4, column 3: unknown line kind `alloca`"),
        (in_main("  reuse buf0 buf1"), "line 4, column 14: expected `->` after buffer name `buf0`"),
        (in_main("  alloc"), "line 4, column 8: expected a buffer name after `alloc`"),
        (in_main("  alloc buf0 buf1"), "line 4, column 14: unexpected `buf1` after `alloc` line"),
        (in_main("  alloc buf0\n  buffer buf1: multi"), "line 5, column 3: `buffer` declarations must come before the first line of graph `main`"),
        (in_main("  buffer buf0: multi"), "line 4, column 3: buffer `buf0` is declared twice in graph `main`"),
        (in_main("  comment 'abc"), "line 4, column 11: unterminated string in the text of `comment`"),
        (in_main("  comment 'a\\qb'"), "line 4, column 13: unknown escape `\\q` in string"),
        (in_main("  call k(buf0, (s0) @cuda:0"), "line 4, column 21: invalid expression `(s0) @cuda:0` in the call of `k`: unexpected character `@`"),
        (in_main("  call k(buf0,, 1)"), "line 4, column 15: expected an argument in the call of `k`"),
        (in_main("  call k(torch.float99)"), "line 4, column 16: unknown dtype `torch.float99` in the call of `k`"),
        (in_main("  let ks0 ="), "line 4, column 12: expected an expression in `let ks0`"),
        (in_main("  let ks0 s0"), "line 4, column 11: expected `=` after symbol `ks0`"),
        (in_main("  get buf1 = buf0[set 1]"), "line 4, column 19: expected `tuple`, `list` or `dict` in an index of `get buf1`"),
        (in_main("  item u0 = buf0.item()"), "line 4, column 17: unknown method `.item()` in the key path of `item u0` (expected `.size()`, `.stride()`, `.storage_offset()` or `.to_int()`)"),
        (in_main("  bind buf0: u0 = .size()[0], u0"), "line 4, column 31: symbol `u0` is bound twice in `bind buf0`"),
        (in_main("  cond buf1 = if buf0 than g1 else g2 ()"), "line 4, column 23: expected `then` after the predicate of `cond buf1`"),
        (in_main("  while buf1 = c do b"), "line 4, column 22: expected `(` to start the carried inputs of `while buf1`"),
        (in_main("  device 0"), "line 4, column 11: expected `{` after `device N` (use `enter_device N` for an unmatched guard)"),
        (in_main("  device 0 {"), "line 6, column 1: unexpected end of input: graph `main` is not closed (missing `}`)"),
        (in_main("  scatter aten.scatter_.src(buf0, x, buf0, 1)"), "line 4, column 35: expected the dimension in `scatter aten.scatter_.src`"),
        (in_main("  extern_out extern_kernels.mm(buf0)"), "line 4, column 14: expected `OUT = ` before op `extern_kernels.mm` in `extern_out`"),
        (in_main("  extern buf1 = op(a=1, 2)"), "line 4, column 27: positional argument after keyword arguments in `op`"),
        (in_main("  assert_alignment buf0 -1"), "line 4, column 25: an alignment after buffer name `buf0` `-1` is out of range"),
        ("wrapir 1\nkernel k: cuda {\n}\n".into(), "line 2, column 11: unknown backend `cuda` for kernel `k` (expected `triton`, `halide`, `cpp`, `cuda_c` or `host`)"),
        ("wrapir 1\nkernel k: triton {\n  signature a: *fp33\n}\n".into(), "line 3, column 16: unknown pointer element type `fp33` in signature type `*fp33` (`a` in `signature` of kernel `k`)"),
        ("wrapir 1\nkernel k: triton {\n  signature\n  grid Grid1D\n}\n".into(), "line 2, column 1: triton kernel `k` is missing `num_warps`"),
        ("wrapir 1\nkernel k: triton {\n  num_warps 4\n  num_warps 4\n}\n".into(), "line 4, column 3: duplicate field `num_warps` in kernel `k`"),
        ("wrapir 1\nkernel k: triton {\n  grid Grid1D\n  candidate => (1, 1, 1)\n}\n".into(), "line 4, column 3: `candidate` line without a preceding `grid PrecomputedGrid` in kernel `k`"),
        ("wrapir 1\nkernel k: triton {\n  grid PrecomputedGrid\n  candidate => (1, 1)\n}\n".into(), "line 4, column 3: a grid candidate of kernel `k` has 2 expressions, expected 3"),
        ("wrapir 1\nkernel k: triton {\n  grid Grid4D\n}\n".into(), "line 3, column 8: unknown grid type `Grid4D` in kernel `k`"),
        ("wrapir 1\nkernel k: cpp {\n  target 'x'\n}\n".into(), "line 3, column 3: unknown field `target` in cpp kernel `k`"),
        ("wrapir 1\nkernel k: host {\n  source\nx = 1\n}\n".into(), "line 4, column 1: expected `\"\"\"` on the line after `source` in kernel `k`"),
        ("wrapir 1\nkernel k: host {\n  source\n\"\"\"\nx = 1\n}\n".into(), "line 4, column 1: unterminated source block of kernel `k` (missing closing `\"\"\"`)"),
        ("wrapir 1\nkernel k: halide {\n  arg x: 'int' size ['1']\n}\n".into(), "line 3, column 16: unexpected `size` in Halide argument `x` of kernel `k` (expected `shape`, `stride`, `offset` or `alias_of`)"),
        ("wrapir 1\nkernel k: halide {\n}\n".into(), "line 2, column 1: halide kernel `k` is missing `target`"),
    ];
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|(input, expect)| match parse(input) {
            Ok(_) => Some(format!("no error for:\n{input}\n  expected: {expect}")),
            Err(e) if e.to_string() != *expect => {
                Some(format!("input:\n{input}\n  expected: {expect}\n  actual:   {e}"))
            }
            Err(_) => None,
        })
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n\n"));
}

/// Non-finite floats survive JSON (as the strings `inf`, `-inf`, `nan`).
#[test]
fn json_keeps_non_finite_floats() {
    let text = "wrapir 1\n\ngraph main(arg0_1: f32[4][1]@cuda:0, arg1_1: i64[3][1]@cuda:0) -> (buf0) {\n  buffer buf0: f32[2, 2][2, 1]@cuda:0\n  extern buf0 = torch.ops.aten._jagged_to_padded_dense_forward.default(arg0_1, [arg1_1], [2], -inf)\n}\n";
    let program = wrapir::text::parse(text).expect("parses");
    let json = program.to_json();
    assert!(json.contains("\"-inf\""), "{json}");
    let back = wrapir::ir::Program::from_json(&json).expect("reads back");
    assert_eq!(back, program);
    assert_eq!(wrapir::text::print(&back), text);
}

/// Call arguments as Inductor prints them, starting with a parenthesised
/// term followed by an operator (issue 35: `(1 + s77)*(1 + s27)` did not
/// parse), and a parenthesised name that is also a buffer's: an expression.
#[test]
fn arguments_that_start_with_a_parenthesised_term() {
    let text = in_main("  extern buf0 = torch.ops.aten.foo.default(arg0_1, (1 + s77)*(1 + s27), (s27 * 2) // 2, (buf0), ((s27 * 2) // 2))");
    let program = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let Line::ExternKernelAlloc(call) = &program.main.lines[0] else {
        panic!("{:?}", program.main.lines[0])
    };
    let exprs: Vec<String> = call.args[1..]
        .iter()
        .map(|a| match a {
            ArgValue::Expr(e) => e.to_string(),
            other => panic!("{other:?} is not an expression"),
        })
        .collect();
    let want = |s: &str| wrapir::sym::parse(s).unwrap().to_string();
    assert_eq!(
        exprs,
        [
            want("(1 + s77)*(1 + s27)"),
            want("(s27 * 2) // 2"),
            want("buf0"),
            want("(s27 * 2) // 2")
        ]
    );
    assert_eq!(parse(&print(&program)).unwrap(), program);
}
