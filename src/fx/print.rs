//! torch.fx-style code for a [`Graph`].

use super::{Arg, Graph, NodeId, Op, SymOp};
use crate::ir::{write_float, PyStr};
use std::fmt::Write;

/// The whole graph: `def forward(...)` for the top graph, then one
/// `class <name>(torch.nn.Module):` block per subgraph.
pub(super) fn graph_code(g: &Graph) -> String {
    let mut out = String::new();
    write_forward(&mut out, g, 0);
    write_subgraphs(&mut out, g, 0);
    out
}

fn write_subgraphs(out: &mut String, g: &Graph, indent: usize) {
    for (name, sub) in &g.subgraphs {
        let pad = "    ".repeat(indent);
        let _ = writeln!(out);
        let _ = writeln!(out, "{pad}class {name}(torch.nn.Module):");
        write_forward(out, sub, indent + 1);
        write_subgraphs(out, sub, indent + 1);
    }
}

fn write_forward(out: &mut String, g: &Graph, indent: usize) {
    let pad = "    ".repeat(indent);
    let params: Vec<&str> = g.placeholders().map(|(_, n)| n.name.as_str()).collect();
    let mut header = String::from("self");
    for p in &params {
        header.push_str(", ");
        header.push_str(p);
    }
    let _ = writeln!(out, "{pad}def forward({header}):");

    // Last use of every node (FX prints `x = None` after it); the output node
    // keeps its operands alive. Indexed by node id: ids are dense arena
    // indices of this graph.
    const KEPT: usize = usize::MAX;
    let slots = g.nodes.len();
    let mut last_use: Vec<Option<usize>> = vec![None; slots];
    for (i, id) in g.order().iter().enumerate() {
        let node = g.node(*id);
        let is_output = matches!(node.op, Op::Output { .. });
        node.for_each_input(&mut |used| {
            if let Some(l) = last_use.get_mut(used.index()) {
                if is_output {
                    *l = Some(KEPT);
                } else if *l != Some(KEPT) {
                    *l = Some(i);
                }
            }
        });
    }
    // For each position, the nodes whose value dies there (in order).
    let mut dies_at: Vec<Vec<NodeId>> = vec![Vec::new(); g.order().len()];
    for (pos, id) in g.order().iter().enumerate() {
        let at = match last_use.get(id.index()).copied().flatten() {
            Some(KEPT) => None,
            Some(l) => Some(l),
            None if !matches!(g.node(*id).op, Op::Output { .. }) => Some(pos),
            None => None,
        };
        if let Some(list) = at.and_then(|l| dies_at.get_mut(l)) {
            list.push(*id);
        }
    }

    let mut body_lines = 0usize;
    let mut names: Vec<&str> = Vec::new();
    for (i, id) in g.order().iter().enumerate() {
        let node = g.node(*id);
        if matches!(node.op, Op::Placeholder(_)) {
            continue;
        }
        out.push_str(&pad);
        out.push_str("    ");
        let _ = write_node(out, g, *id);
        if let Some(dead) = dies_at.get(i).filter(|d| !d.is_empty()) {
            // FX lists the node's inputs in argument order, then the node itself.
            names.clear();
            node.for_each_input(&mut |u| {
                if dead.contains(&u) {
                    let n = g.node(u).name.as_str();
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            });
            if dead.contains(id) {
                names.push(node.name.as_str());
            }
            for (k, n) in names.iter().enumerate() {
                out.push_str(if k == 0 { ";  " } else { " = " });
                out.push_str(n);
            }
            if !names.is_empty() {
                out.push_str(" = None");
            }
        }
        out.push('\n');
        body_lines += 1;
    }
    if body_lines == 0 {
        let _ = writeln!(out, "{pad}    pass");
    }
}

fn write_node<'g>(out: &mut String, g: &'g Graph, id: NodeId) -> std::fmt::Result {
    let node = g.node(id);
    let name = node.name.as_str();
    let a = |arg: &'g Arg| ArgText(g, arg);
    let list = |args: &'g [Arg]| ListText(g, args);
    let n = |id: NodeId| g.node(id).name.as_str();
    match &node.op {
        Op::Placeholder(_) => Ok(()),
        Op::Constant { name: c } | Op::Subgraph { name: c } => write!(out, "{name} = self.{c}"),
        Op::EmptyStrided {
            size,
            stride,
            dtype,
            device,
        } => write!(
            out,
            "{name} = torch.empty_strided({}, {}, dtype=torch.{}, device='{}')",
            list(size),
            list(stride),
            dtype.torch_name(),
            device.as_str()
        ),
        Op::AsStrided {
            base,
            size,
            stride,
            offset,
        } => {
            write!(
                out,
                "{name} = torch.as_strided({}, {}, {}, {})",
                n(*base),
                list(size),
                list(stride),
                a(offset)
            )
        }
        Op::TritonKernel { kernel, grid, kwargs } => write!(
            out,
            "{name} = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel={}, grid=[({}, {}, {})], kwargs={})",
            PyStr(kernel.as_str()),
            a(&grid[0]),
            a(&grid[1]),
            a(&grid[2]),
            DictText(g, kwargs)
        ),
        Op::KernelCall { kernel, args, kwargs } => {
            write!(
                out,
                "{name} = wrapir.call_kernel({}, {}",
                PyStr(kernel.as_str()),
                list(args)
            )?;
            if !kwargs.is_empty() {
                write!(out, ", {}", DictText(g, kwargs))?;
            }
            write!(out, ")")
        }
        Op::Extern { target, args, kwargs } => {
            write!(out, "{name} = ")?;
            write_target(out, target)?;
            out.push('(');
            let mut sep = "";
            for x in args {
                write!(out, "{sep}{}", a(x))?;
                sep = ", ";
            }
            for (k, v) in kwargs {
                write!(out, "{sep}{k} = {}", a(v))?;
                sep = ", ";
            }
            out.push(')');
            Ok(())
        }
        Op::SymSize { tensor, dim } => write!(out, "{name} = torch.ops.aten.sym_size.int({}, {dim})", n(*tensor)),
        Op::SymStride { tensor, dim } => write!(out, "{name} = torch.ops.aten.sym_stride.int({}, {dim})", n(*tensor)),
        Op::SymStorageOffset { tensor } => {
            write!(
                out,
                "{name} = torch.ops.aten.sym_storage_offset.default({})",
                n(*tensor)
            )
        }
        Op::GetItem { source, index } => write!(out, "{name} = {}[{}]", n(*source), a(index)),
        Op::InnerTensor { source, attr } => write!(out, "{name} = {}.{attr}", n(*source)),
        Op::Item { tensor, .. } => write!(out, "{name} = torch.ops.aten.item.default({})", n(*tensor)),
        Op::Sym { op, args } => {
            let arg = |i: usize| OptArgText(g, args.get(i));
            match op {
                SymOp::Sum => write!(out, "{name} = torch.sym_sum({})", list(args)),
                SymOp::Min => write!(out, "{name} = torch.sym_min({}, {})", arg(0), arg(1)),
                SymOp::Max => write!(out, "{name} = torch.sym_max({}, {})", arg(0), arg(1)),
                SymOp::Not => write!(out, "{name} = torch.sym_not({})", arg(0)),
                SymOp::Ite => write!(out, "{name} = torch.sym_ite({}, {}, {})", arg(0), arg(1), arg(2)),
                SymOp::CMod => write!(out, "{name} = wrapir.c_mod({}, {})", arg(0), arg(1)),
                _ => write!(out, "{name} = {} {} {}", arg(0), binary_token(*op), arg(1)),
            }
        }
        Op::AssertScalar { cond, message } => {
            write!(
                out,
                "{name} = torch.ops.aten._assert_scalar.default({}, {})",
                a(cond),
                PyStr(message)
            )
        }
        Op::AssertSizeStride {
            tensor,
            size,
            stride,
            context,
        } => {
            write!(
                out,
                "{name} = assert_size_stride({}, {}, {}",
                n(*tensor),
                list(size),
                list(stride)
            )?;
            if let Some(c) = context {
                write!(out, ", {}", PyStr(c))?;
            }
            write!(out, ")")
        }
        Op::AssertAlignment { tensor, alignment } => {
            write!(out, "{name} = assert_alignment({}, {alignment})", n(*tensor))
        }
        Op::Cond {
            pred,
            true_graph,
            false_graph,
            operands,
        } => write!(
            out,
            "{name} = torch.ops.higher_order.cond({}, {}, {}, {})",
            a(pred),
            n(*true_graph),
            n(*false_graph),
            TupleText(g, operands)
        ),
        Op::WhileLoop {
            cond_graph,
            body_graph,
            carried,
            additional,
        } => write!(
            out,
            "{name} = torch.ops.higher_order.while_loop({}, {}, {}, {})",
            n(*cond_graph),
            n(*body_graph),
            TupleText(g, carried),
            TupleText(g, additional)
        ),
        Op::Output { values, as_list } => match values.as_slice() {
            [single] if !as_list => write!(out, "return {}", a(single)),
            _ => write!(out, "return {}", list(values)),
        },
    }
}

fn binary_token(op: SymOp) -> &'static str {
    match op {
        SymOp::Mul => "*",
        SymOp::FloorDiv => "//",
        SymOp::PyMod => "%",
        SymOp::Pow => "**",
        SymOp::Eq => "==",
        SymOp::Ne => "!=",
        SymOp::Lt => "<",
        SymOp::Le => "<=",
        SymOp::Gt => ">",
        SymOp::Ge => ">=",
        SymOp::And => "&",
        SymOp::Or => "|",
        _ => "?",
    }
}

fn write_target(out: &mut String, target: &str) -> std::fmt::Result {
    if target.starts_with("torch.") || target.starts_with("extern_kernels.") || !target.contains('.') {
        out.push_str(target);
        Ok(())
    } else {
        write!(out, "torch.ops.{target}")
    }
}

/// Writes `items` separated by `, `.
fn write_joined(f: &mut std::fmt::Formatter<'_>, g: &Graph, items: &[Arg]) -> std::fmt::Result {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_arg(f, g, x)?;
    }
    Ok(())
}

/// An argument in Python syntax, written in place.
struct ArgText<'g>(&'g Graph, &'g Arg);

impl std::fmt::Display for ArgText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_arg(f, self.0, self.1)
    }
}

/// An argument that may be missing (written as nothing).
struct OptArgText<'g>(&'g Graph, Option<&'g Arg>);

impl std::fmt::Display for OptArgText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(arg) => write_arg(f, self.0, arg),
            None => Ok(()),
        }
    }
}

/// `[a, b, ...]`.
struct ListText<'g>(&'g Graph, &'g [Arg]);

impl std::fmt::Display for ListText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        write_joined(f, self.0, self.1)?;
        f.write_str("]")
    }
}

/// A Python tuple: `()`, `(a,)`, `(a, b)`.
struct TupleText<'g>(&'g Graph, &'g [Arg]);

impl std::fmt::Display for TupleText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            [] => f.write_str("()"),
            [one] => {
                f.write_str("(")?;
                write_arg(f, self.0, one)?;
                f.write_str(",)")
            }
            many => {
                f.write_str("(")?;
                write_joined(f, self.0, many)?;
                f.write_str(")")
            }
        }
    }
}

/// A Python dict of keyword arguments: `{'k': v, ...}`.
struct DictText<'g>(&'g Graph, &'g indexmap::IndexMap<String, Arg>);

impl std::fmt::Display for DictText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.1.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: ", PyStr(k))?;
            write_arg(f, self.0, v)?;
        }
        f.write_str("}")
    }
}

fn write_arg(f: &mut std::fmt::Formatter<'_>, g: &Graph, arg: &Arg) -> std::fmt::Result {
    match arg {
        Arg::Node(id) => f.write_str(&g.node(*id).name),
        Arg::Int(v) => write!(f, "{v}"),
        Arg::Float(v) => write_float(f, *v),
        Arg::Bool(true) => f.write_str("True"),
        Arg::Bool(false) => f.write_str("False"),
        Arg::None => f.write_str("None"),
        Arg::Str(s) => write!(f, "{}", PyStr(s)),
        Arg::DType(d) => write!(f, "torch.{}", d.torch_name()),
        Arg::Device(d) => match d.index {
            Some(i) => write!(f, "device(type='{}', index={i})", d.kind.as_str()),
            None => write!(f, "device(type='{}')", d.kind.as_str()),
        },
        Arg::List(items) => {
            f.write_str("[")?;
            write_joined(f, g, items)?;
            f.write_str("]")
        }
    }
}
