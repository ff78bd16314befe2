//! torch.fx-style code for a [`Graph`].

use super::{Arg, Graph, Kwargs, NodeId, Op, SymOp};
use crate::ir::op::{key, primitive};
use crate::ir::{write_float, PyStr};
use rustc_hash::FxHashMap;
use std::fmt::Write;

/// The keys of each shared kwargs name list as printed in a dict
/// (`'k': `, then `, 'k2': `, ...), by the list's address: the launches of
/// one kernel share one list, so its keys are quoted once per printout.
type KeyText = FxHashMap<usize, Vec<String>>;

/// The output capacity reserved per node of the top graph (a lowering's
/// printout averages about 155 bytes a node: a smaller reserve grows, and
/// copies, the whole output once).
const OUT_BYTES_PER_NODE: usize = 160;

/// `PLAIN[b]`: byte `b` stands for itself in a Python string literal
/// between single quotes ([`PyStr`] escapes the others).
const PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b >= 0x20 && b != b'\\' as usize && b != b'\'' as usize;
        b += 1;
    }
    t
};

/// The names of a graph's nodes, by node id ([`NodeId::index`]).
struct Names<'g>(Vec<&'g str>);

impl Names<'_> {
    /// The name of node `id` (of this graph: a foreign id panics, as
    /// [`Graph::node`] does).
    #[inline]
    fn name(&self, id: NodeId) -> &str {
        self.0[id.index()]
    }
}

/// The whole graph: `def forward(...)` for the top graph, then one
/// `class <name>(torch.nn.Module):` block per subgraph.
pub(super) fn graph_code(g: &Graph) -> String {
    // One allocation instead of a doubling series of copies of a large output.
    let mut out = String::with_capacity(g.len().saturating_mul(OUT_BYTES_PER_NODE));
    let mut keys = KeyText::default();
    write_forward(&mut out, &mut keys, g, 0);
    write_subgraphs(&mut out, &mut keys, g, 0);
    out
}

fn write_subgraphs(out: &mut String, keys: &mut KeyText, g: &Graph, indent: usize) {
    for (name, sub) in &g.subgraphs {
        let pad = "    ".repeat(indent);
        let _ = writeln!(out);
        let _ = writeln!(out, "{pad}class {name}(torch.nn.Module):");
        write_forward(out, keys, sub, indent + 1);
        write_subgraphs(out, keys, sub, indent + 1);
    }
}

fn write_forward(out: &mut String, keys: &mut KeyText, g: &Graph, indent: usize) {
    let pad = "    ".repeat(indent);
    let params: Vec<&str> = g.placeholders().map(|(_, n)| n.name.as_str()).collect();
    let mut header = String::from("self");
    for p in &params {
        header.push_str(", ");
        header.push_str(p);
    }
    let _ = writeln!(out, "{pad}def forward({header}):");

    // The nodes whose value dies at each position (FX prints `x = None`
    // after their last use), in one backward walk: a node's input that no
    // later node uses dies at that node (in argument order, each once), a
    // node that nothing uses dies where it is defined; the output node keeps
    // its operands alive. Indexed by node id: ids are dense arena indices of
    // this graph, and every node of the arena is in the order.
    let order = g.order();
    let len = order.len();
    let is_output = |id: NodeId| matches!(g.node(id).op, Op::Output { .. });
    let mut used: Vec<bool> = vec![false; g.nodes.len()];
    for id in order.iter().copied().filter(|id| is_output(*id)) {
        if let Some(s) = used.get_mut(id.index()) {
            *s = true;
        }
        g.node(id).visit_inputs(&mut |u| {
            if let Some(s) = used.get_mut(u.index()) {
                *s = true;
            }
        });
    }
    let mut dies: Vec<NodeId> = Vec::with_capacity(len);
    // `dies[dies_at[i].0..dies_at[i].1]` die at position `i`. Each node dies
    // at most once (`used`), so `dies` never holds more entries than there
    // are nodes, whose ids are `u32`: the `as u32` below cannot truncate.
    let mut dies_at: Vec<(u32, u32)> = vec![(0, 0); len];
    for (i, id) in order.iter().enumerate().rev() {
        let start = dies.len() as u32;
        g.node(*id).visit_inputs(&mut |u| {
            if let Some(s) = used.get_mut(u.index()) {
                if !*s {
                    *s = true;
                    dies.push(u);
                }
            }
        });
        if let Some(s) = used.get_mut(id.index()) {
            if !*s {
                *s = true;
                dies.push(*id);
            }
        }
        dies_at[i] = (start, dies.len() as u32);
    }

    // Every node's name, by id: the printout names each node several times
    // (its line, its uses, its `= None`), read from one dense table.
    let mut names = Names(Vec::with_capacity(g.nodes.len()));
    for chunk in g.nodes.chunks() {
        names.0.extend(chunk.iter().map(|n| n.name.as_str()));
    }
    let mut body_lines = 0usize;
    for (i, id) in order.iter().enumerate() {
        let node = g.node(*id);
        if matches!(node.op, Op::Placeholder(_)) {
            continue;
        }
        out.push_str(&pad);
        out.push_str("    ");
        write_node(out, keys, g, &names, *id);
        let (start, end) = dies_at[i];
        for (k, d) in dies
            .get(start as usize..end as usize)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            out.push_str(if k == 0 { ";  " } else { " = " });
            out.push_str(names.name(*d));
        }
        if end > start {
            out.push_str(" = None");
        }
        out.push('\n');
        body_lines += 1;
    }
    if body_lines == 0 {
        let _ = writeln!(out, "{pad}    pass");
    }
}

/// Writes one node's line (without indentation and newline) straight into
/// the output: no `core::fmt` on the common paths.
fn write_node(out: &mut String, keys: &mut KeyText, g: &Graph, names: &Names<'_>, id: NodeId) {
    let node = g.node(id);
    let name = node.name.as_str();
    let n = |id: NodeId| names.name(id);
    if !matches!(node.op, Op::Placeholder(_) | Op::Output { .. }) {
        out.push_str(name);
        out.push_str(" = ");
    }
    match &node.op {
        Op::Placeholder(_) => {}
        Op::Constant { name: c } | Op::Subgraph { name: c } => {
            out.push_str("self.");
            out.push_str(c);
        }
        Op::EmptyStrided(e) => {
            out.push_str("torch.empty_strided(");
            push_size_stride(out, names, &e.size, &e.stride);
            out.push_str(", dtype=torch.");
            out.push_str(e.dtype.torch_name());
            out.push_str(", device='");
            out.push_str(e.device.as_str());
            out.push_str("')");
        }
        Op::AsStrided(a) => {
            push_call_head(out, "torch.as_strided", n(a.base));
            push_size_stride(out, names, &a.size, &a.stride);
            out.push_str(", ");
            push_arg(out, names, &a.offset);
            out.push(')');
        }
        Op::TritonKernel { kernel, grid, kwargs } => {
            out.push_str("torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel=");
            push_py_str(out, kernel.as_str());
            out.push_str(", grid=[(");
            push_arg(out, names, &grid[0]);
            out.push_str(", ");
            push_arg(out, names, &grid[1]);
            out.push_str(", ");
            push_arg(out, names, &grid[2]);
            out.push_str(")], kwargs=");
            push_dict(out, keys, names, kwargs);
            out.push(')');
        }
        Op::KernelCall { kernel, args, kwargs } => {
            out.push_str("wrapir.call_kernel(");
            push_py_str(out, kernel.as_str());
            out.push_str(", ");
            push_list(out, names, args);
            if !kwargs.is_empty() {
                out.push_str(", ");
                push_dict(out, keys, names, kwargs);
            }
            out.push(')');
        }
        Op::Extern { target, args, kwargs } => {
            write_target(out, target);
            out.push('(');
            let mut sep = "";
            for x in args {
                out.push_str(sep);
                push_arg(out, names, x);
                sep = ", ";
            }
            for (k, v) in kwargs {
                out.push_str(sep);
                out.push_str(k);
                out.push_str(" = ");
                push_arg(out, names, v);
                sep = ", ";
            }
            out.push(')');
        }
        Op::SymSize { tensor, dim } | Op::SymStride { tensor, dim } => {
            let op = if matches!(node.op, Op::SymSize { .. }) {
                primitive::SYM_SIZE
            } else {
                primitive::SYM_STRIDE
            };
            push_target(out, op, "int");
            out.push('(');
            out.push_str(n(*tensor));
            out.push_str(", ");
            push_int(out, *dim);
            out.push(')');
        }
        Op::SymStorageOffset { tensor } => {
            push_target(out, primitive::SYM_STORAGE_OFFSET, "default");
            out.push('(');
            out.push_str(n(*tensor));
            out.push(')');
        }
        Op::GetItem { source, index } => {
            out.push_str(n(*source));
            out.push('[');
            push_arg(out, names, index);
            out.push(']');
        }
        Op::InnerTensor { source, attr } => {
            out.push_str(n(*source));
            out.push('.');
            out.push_str(attr);
        }
        Op::Item { tensor, .. } => {
            push_target(out, key::ITEM, "default");
            out.push('(');
            out.push_str(n(*tensor));
            out.push(')');
        }
        Op::Sym { op, args } => {
            let arg = |out: &mut String, i: usize| {
                if let Some(a) = args.get(i) {
                    push_arg(out, names, a);
                }
            };
            let call = |out: &mut String, f: &str, k: usize| {
                out.push_str(f);
                out.push('(');
                for i in 0..k {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    arg(out, i);
                }
                out.push(')');
            };
            match op {
                SymOp::Sum => {
                    out.push_str("torch.sym_sum(");
                    push_list(out, names, args);
                    out.push(')');
                }
                SymOp::Min => call(out, "torch.sym_min", 2),
                SymOp::Max => call(out, "torch.sym_max", 2),
                SymOp::Not => call(out, "torch.sym_not", 1),
                SymOp::Ite => call(out, "torch.sym_ite", 3),
                SymOp::CMod => call(out, "wrapir.c_mod", 2),
                _ => {
                    arg(out, 0);
                    out.push(' ');
                    out.push_str(binary_token(*op));
                    out.push(' ');
                    arg(out, 1);
                }
            }
        }
        Op::AssertScalar { cond, message } => {
            push_target(out, primitive::ASSERT_SCALAR, "default");
            out.push('(');
            push_arg(out, names, cond);
            out.push_str(", ");
            push_py_str(out, message);
            out.push(')');
        }
        // Tensor asserts print as upstream's FX backend lowers them: one
        // `torch._check` per comparison (built by the FX builder into
        // `sym_size` / `eq` / `_check` nodes), a tuple when there are several.
        Op::AssertSizeStride(a) => push_size_stride_checks(out, names, a),
        Op::AssertAlignment { tensor, alignment } => {
            let t = n(*tensor);
            out.push_str("torch._check(");
            out.push_str(t);
            out.push_str(".data_ptr() % ");
            push_int(out, i64::from(*alignment));
            out.push_str(" == 0)");
        }
        Op::AssertFinite { tensor } => {
            let t = n(*tensor);
            for (k, op) in [primitive::ISNAN, primitive::ISINF].into_iter().enumerate() {
                out.push_str(if k == 0 { "(" } else { ", " });
                out.push_str("torch._check(not ");
                for op in [key::ITEM, primitive::ANY, op] {
                    push_target(out, op, "default");
                    out.push('(');
                }
                out.push_str(t);
                out.push_str("))))");
            }
            out.push(')');
        }
        Op::Cond(c) => {
            out.push_str("torch.ops.higher_order.cond(");
            push_arg(out, names, &c.pred);
            out.push_str(", ");
            out.push_str(n(c.true_graph));
            out.push_str(", ");
            out.push_str(n(c.false_graph));
            out.push_str(", ");
            push_tuple(out, names, &c.operands);
            out.push(')');
        }
        Op::Switch(sw) => {
            out.push_str("torch.ops.higher_order.switch(");
            push_arg(out, names, &sw.index);
            out.push_str(", [");
            for (k, b) in sw.branches.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                out.push_str(n(*b));
            }
            out.push_str("], ");
            push_tuple(out, names, &sw.operands);
            out.push(')');
        }
        Op::WhileLoop(w) => {
            push_call_head(out, "torch.ops.higher_order.while_loop", n(w.cond_graph));
            out.push_str(n(w.body_graph));
            out.push_str(", ");
            push_tuple(out, names, &w.carried);
            out.push_str(", ");
            push_tuple(out, names, &w.additional);
            out.push(')');
        }
        Op::Output { values, as_list } => {
            out.push_str("return ");
            match values.as_slice() {
                [single] if !as_list => push_arg(out, names, single),
                _ => push_list(out, names, values),
            }
        }
    }
}

fn binary_token(op: SymOp) -> &'static str {
    match op {
        SymOp::Mul => "*",
        SymOp::FloorDiv => "//",
        SymOp::PyMod => "%",
        SymOp::Pow => "**",
        SymOp::Cmp(c) => c.token(),
        SymOp::And => "&",
        SymOp::Or => "|",
        _ => "?",
    }
}

fn write_target(out: &mut String, target: &str) {
    if !(target.starts_with("torch.") || target.starts_with("extern_kernels.") || !target.contains('.')) {
        out.push_str("torch.ops.");
    }
    out.push_str(target);
}

/// Appends `v` in decimal (what `format!("{v}")` writes).
fn push_int(out: &mut String, v: i64) {
    if v < 0 {
        out.push('-');
    }
    push_decimal(out, v.unsigned_abs());
}

/// Appends `n` in decimal (what `format!("{n}")` writes).
fn push_decimal(out: &mut String, n: u64) {
    if n < 10 {
        // One digit.
        out.push(char::from(b'0' + n as u8));
        return;
    }
    let mut buf = [0u8; 20];
    // ASCII digits, pushed as characters: no UTF-8 check of the buffer
    // (up to 20 of them).
    for &d in super::name::decimal_digits(n, &mut buf) {
        out.push(char::from(d));
    }
}

/// `true` when every byte of `s` is [`PLAIN`]: eight bytes a step (no
/// byte below `0x20`, no backslash, no quote), the rest by table.
fn is_plain(s: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Some byte of `v` is zero (exact as a whole-word test).
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        // Eight bytes; a failed conversion (none) would only take the
        // escaping path, which writes the same literal.
        let x = u64::from_le_bytes(<[u8; 8]>::try_from(w).unwrap_or([0; 8]));
        // Some byte below 0x20 (exact as a whole-word test, as `zero`).
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        if control | zero(x ^ (ONES * u64::from(b'\\'))) | zero(x ^ (ONES * u64::from(b'\''))) != 0 {
            return false;
        }
    }
    words.remainder().iter().all(|&b| PLAIN[usize::from(b)])
}

/// A Python string literal ([`PyStr`]); strings with nothing to escape are
/// copied as they are.
fn push_py_str(out: &mut String, s: &str) {
    if is_plain(s.as_bytes()) {
        out.push('\'');
        out.push_str(s);
        out.push('\'');
    } else {
        let _ = write!(out, "{}", PyStr(s));
    }
}

/// Writes `items` separated by `, `.
/// `<callee>(<first>, `: a call up to its second argument.
fn push_call_head(out: &mut String, callee: &str, first: &str) {
    out.push_str(callee);
    out.push('(');
    out.push_str(first);
    out.push_str(", ");
}

fn push_joined(out: &mut String, g: &Names<'_>, items: &[Arg]) {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_arg(out, g, x);
    }
}

/// `[a, b, ...]`.
fn push_list(out: &mut String, g: &Names<'_>, items: &[Arg]) {
    out.push('[');
    push_joined(out, g, items);
    out.push(']');
}

/// `[size...], [stride...]`: the layout arguments of `empty_strided`,
/// `as_strided` and `assert_size_stride`.
fn push_size_stride(out: &mut String, g: &Names<'_>, size: &[Arg], stride: &[Arg]) {
    push_list(out, g, size);
    out.push_str(", ");
    push_list(out, g, stride);
}

/// An `assert_size_stride` as `torch._check`s, in a tuple: the rank, each
/// size, each stride where the size is not 1 (Inductor's rule: a stride of a
/// dimension of size 1 is not checked; where the size is symbolic the check
/// says so), and the dtype where the line checks it.
fn push_size_stride_checks(out: &mut String, g: &Names<'_>, a: &super::AssertSizeStride) {
    let t = g.name(a.tensor);
    let check = |out: &mut String, first: bool| {
        out.push_str(if first { "(torch._check(" } else { ", torch._check(" });
    };
    check(out, true);
    out.push_str(t);
    out.push_str(".dim() == ");
    push_decimal(out, a.size.len() as u64);
    out.push(')');
    let dim_call = |out: &mut String, what: &str, d: usize| {
        push_target(out, what, "int");
        out.push('(');
        out.push_str(t);
        out.push_str(", ");
        push_decimal(out, d as u64);
        out.push(')');
    };
    for (d, size) in a.size.iter().enumerate() {
        check(out, false);
        dim_call(out, primitive::SYM_SIZE, d);
        out.push_str(" == ");
        push_arg(out, g, size);
        out.push(')');
    }
    for (d, (size, stride)) in a.size.iter().zip(a.stride.iter()).enumerate() {
        match size {
            Arg::Int(1) => continue,
            Arg::Int(_) => {
                check(out, false);
                dim_call(out, primitive::SYM_STRIDE, d);
                out.push_str(" == ");
                push_arg(out, g, stride);
                out.push(')');
            }
            _ => {
                check(out, false);
                out.push('(');
                dim_call(out, primitive::SYM_SIZE, d);
                out.push_str(" == 1) | (");
                dim_call(out, primitive::SYM_STRIDE, d);
                out.push_str(" == ");
                push_arg(out, g, stride);
                out.push_str("))");
            }
        }
    }
    if let Some(dt) = a.dtype {
        check(out, false);
        out.push_str(t);
        out.push_str(".dtype == torch.");
        out.push_str(dt.torch_name());
        out.push(')');
    }
    out.push(')');
}

/// A Python tuple: `()`, `(a,)`, `(a, b)`.
fn push_tuple(out: &mut String, g: &Names<'_>, items: &[Arg]) {
    match items {
        [] => out.push_str("()"),
        [one] => {
            out.push('(');
            push_arg(out, g, one);
            out.push_str(",)");
        }
        many => {
            out.push('(');
            push_joined(out, g, many);
            out.push(')');
        }
    }
}

/// A Python dict of keyword arguments: `{'k': v, ...}`.
fn push_dict(out: &mut String, keys: &mut KeyText, g: &Names<'_>, kwargs: &Kwargs) {
    let names = kwargs.names();
    if !names.is_shared() {
        out.push('{');
        for (i, (k, v)) in kwargs.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            push_py_str(out, k);
            out.push_str(": ");
            push_arg(out, g, v);
        }
        out.push('}');
        return;
    }
    let text = keys.entry(names.addr()).or_insert_with(|| {
        names
            .as_slice()
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let mut t = String::new();
                if i > 0 {
                    t.push_str(", ");
                }
                push_py_str(&mut t, k);
                t.push_str(": ");
                t
            })
            .collect()
    });
    out.push('{');
    for (key, v) in text.iter().zip(kwargs.values()) {
        out.push_str(key);
        push_arg(out, g, v);
    }
    out.push('}');
}

/// An argument in Python syntax.
fn push_arg(out: &mut String, g: &Names<'_>, arg: &Arg) {
    match arg {
        Arg::Node(id) => out.push_str(g.name(*id)),
        Arg::Int(v) => push_int(out, *v),
        Arg::Float(v) => {
            let _ = write_float(out, *v);
        }
        Arg::Bool(true) => out.push_str("True"),
        Arg::Bool(false) => out.push_str("False"),
        Arg::None => out.push_str("None"),
        Arg::Str(s) => push_py_str(out, s),
        Arg::DType(d) => {
            out.push_str("torch.");
            out.push_str(d.torch_name());
        }
        Arg::Device(d) => {
            out.push_str("device(type='");
            out.push_str(d.kind.as_str());
            match d.index {
                Some(i) => {
                    out.push_str("', index=");
                    push_int(out, i64::from(i));
                    out.push(')');
                }
                None => out.push_str("')"),
            }
        }
        Arg::List(items) => push_list(out, g, items),
    }
}

#[cfg(test)]
mod tests {
    use super::{is_plain, PLAIN};

    #[test]
    fn word_test_matches_the_table() {
        for b in 0..=255u8 {
            for len in [1usize, 7, 8, 9, 16, 23] {
                for at in 0..len {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    assert_eq!(is_plain(&s), PLAIN[usize::from(b)], "byte {b:#x} at {at} of {len}");
                }
            }
        }
        assert!(is_plain(b""));
        assert!(is_plain("triton_poi_fused_add_0 ünï".as_bytes()));
        assert!(!is_plain(b"it's a kernel name"));
    }
}

/// `torch.ops.<key>.<overload>`: the op `key` names (an `ir::op` registry
/// key), as FX calls it.
fn push_target(out: &mut String, key: &str, overload: &str) {
    out.push_str("torch.ops.");
    out.push_str(key);
    out.push('.');
    out.push_str(overload);
}
