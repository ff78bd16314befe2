//! Programs whose dependency DAG (`wrapir check --dag`) once grew
//! quadratically, for the scale benchmark; each is `n` units long:
//!
//! - [`aliases`]: a chain of `n` custom ops, each on the previous result
//!   (an unknown op's result may alias every storage its arguments may:
//!   the footprints grew by one storage a link);
//! - [`symbol_turns`]: `n` times an `item` binding an unbacked symbol,
//!   then a `cond` (each `cond` is ordered against every binder: one edge
//!   per pair, n^2, before the runs between them carried the order);
//! - [`symbol_runs`]: `n` `item`s binding unbacked symbols, then `n`
//!   independent `cond`s, then `n` `item`s again (every `cond` follows every binder
//!   before it and precedes every one after it: one edge per pair, n^2,
//!   before a run of many joined at one of its binders);
//! - [`slices`]: `n` Triton launches, each writing its own slice of one
//!   buffer (every access compared with every earlier one of the buffer's).

use wrapir::ir::Program;

/// A Triton kernel of Inductor's (`in_ptr0` read, `out_ptr0` written).
pub const COPY_KERNEL: &str = "kernel k_copy: triton {\n  signature in_ptr0: *fp32, out_ptr0: *fp32, xnumel: i32, XBLOCK: constexpr\n  config XBLOCK: 16\n  grid Grid1D\n  num_warps 1\n  source\n\"\"\"\n@triton.jit\ndef k_copy(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n    pass\n\"\"\"\n}\n";

fn parse(text: &str) -> Program {
    wrapir::text::parse(text).unwrap_or_else(|e| panic!("a generated DAG program does not parse: {e}"))
}

/// `n` custom ops, each on the previous one's result.
pub fn aliases(n: usize) -> Program {
    let n = n.max(1);
    let mut s = format!(
        "wrapir 1\n\ngraph main(arg0_1: f32[4][1]@cuda:0) -> (buf{}) {{\n",
        n - 1
    );
    for k in 0..n {
        s += &format!("  buffer buf{k}: f32[4][1]@cuda:0\n");
    }
    for k in 0..n {
        let arg = if k == 0 {
            "arg0_1".to_string()
        } else {
            format!("buf{}", k - 1)
        };
        s += &format!("  extern buf{k} = torch.ops.mylib.foo.default({arg})\n");
    }
    parse(&(s + "}\n"))
}

/// `n` times: an `item` binding `u<k>`, then a `cond` on an input.
pub fn symbol_turns(n: usize) -> Program {
    let mut s = String::from("wrapir 1\n\n");
    for k in 0..n {
        s += &format!("symbol u{k}: unbacked [0, 50]\n");
    }
    s += "\ngraph main(arg0_1: i64[][]@cuda:0, arg1_1: b8[][]@cuda:0, arg2_1: f32[4][1]@cuda:0) -> (arg2_1) {\n";
    for k in 0..n {
        s += &format!("  buffer c{k}: multi\n");
    }
    for k in 0..n {
        s += &format!("  item u{k} = arg0_1 node b{k}\n  cond c{k} = if arg1_1 then t else t (arg2_1)\n");
    }
    s += "}\n\ngraph t(t_arg0: f32[4][1]@cuda:0) -> (t_arg0) {\n}\n";
    parse(&s)
}

/// `n` `item`s binding `u0`..`u<n-1>`, `n` `cond`s, each on a buffer of its
/// own (independent of each other), then `n` `item`s binding
/// `u<n>`..`u<2n-1>`.
pub fn symbol_runs(n: usize) -> Program {
    let mut s = String::from("wrapir 1\n\n");
    for k in 0..2 * n {
        s += &format!("symbol u{k}: unbacked [0, 50]\n");
    }
    s += "\ngraph main(arg0_1: i64[][]@cuda:0, arg1_1: b8[][]@cuda:0, arg2_1: f32[4][1]@cuda:0) -> (arg2_1) {\n";
    for k in 0..n {
        s += &format!("  buffer x{k}: f32[4][1]@cuda:0\n  buffer c{k}: multi\n");
    }
    for k in 0..n {
        s += &format!("  alloc x{k}\n");
    }
    for k in 0..n {
        s += &format!("  item u{k} = arg0_1 node b{k}\n");
    }
    for k in 0..n {
        s += &format!("  cond c{k} = if arg1_1 then t else t (x{k})\n");
    }
    for k in n..2 * n {
        s += &format!("  item u{k} = arg0_1 node b{k}\n");
    }
    s += "}\n\ngraph t(t_arg0: f32[4][1]@cuda:0) -> (t_arg0) {\n}\n";
    parse(&s)
}

/// `n` launches of an Inductor kernel, each into its own slice of one buffer.
pub fn slices(n: usize) -> Program {
    let n = n.max(1);
    let mut s = format!("wrapir 1\n\n{COPY_KERNEL}\n");
    s += &format!(
        "graph main(arg0_1: f32[4][1]@cuda:0) -> (buf0) {{\n  buffer buf0: f32[{}][1]@cuda:0\n",
        4 * n
    );
    for k in 0..n {
        s += &format!("  buffer v{k}: f32[4][1]+{}@cuda:0\n", 4 * k);
    }
    s += "  define k_copy\n  alloc buf0\n";
    for k in 0..n {
        s += &format!("  reinterpret buf0 -> v{k}\n  call k_copy(in_ptr0=arg0_1, out_ptr0=v{k}, xnumel=4) @cuda:0\n");
    }
    parse(&(s + "}\n"))
}
