//! torch.fx-style code for a [`Graph`].

use super::{Arg, Graph, NodeId, Op, SymOp};
use crate::ir::{write_float, PyStr};
use std::collections::HashMap;
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
    // keeps its operands alive.
    let position: HashMap<NodeId, usize> = g.order().iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut last_use: HashMap<NodeId, usize> = HashMap::new();
    let mut has_users: HashMap<NodeId, bool> = HashMap::new();
    for (i, id) in g.order().iter().enumerate() {
        let node = g.node(*id);
        let is_output = matches!(node.op, Op::Output { .. });
        node.for_each_input(&mut |used| {
            has_users.insert(used, true);
            if is_output {
                last_use.insert(used, usize::MAX);
            } else if last_use.get(&used).is_none_or(|&l| l != usize::MAX) {
                last_use.insert(used, i);
            }
        });
    }
    let mut dies_at: HashMap<usize, Vec<NodeId>> = HashMap::new();
    for id in g.order() {
        let pos = position.get(id).copied().unwrap_or(0);
        match last_use.get(id) {
            Some(&usize::MAX) => {}
            Some(&l) => dies_at.entry(l).or_default().push(*id),
            None if !has_users.contains_key(id) && !matches!(g.node(*id).op, Op::Output { .. }) => {
                dies_at.entry(pos).or_default().push(*id)
            }
            None => {}
        }
    }

    let mut body_lines = 0usize;
    for (i, id) in g.order().iter().enumerate() {
        let node = g.node(*id);
        if matches!(node.op, Op::Placeholder(_)) {
            continue;
        }
        let mut line = String::new();
        let _ = write_node(&mut line, g, *id);
        if let Some(dead) = dies_at.get(&i) {
            // FX lists the node's inputs in argument order, then the node itself.
            let mut names: Vec<&str> = Vec::new();
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
            if !names.is_empty() {
                let _ = write!(line, ";  {} = None", names.join(" = "));
            }
        }
        let _ = writeln!(out, "{pad}    {line}");
        body_lines += 1;
    }
    if body_lines == 0 {
        let _ = writeln!(out, "{pad}    pass");
    }
}

fn write_node(out: &mut String, g: &Graph, id: NodeId) -> std::fmt::Result {
    let node = g.node(id);
    let name = node.name.as_str();
    let a = |arg: &Arg| arg_text(g, arg);
    let list = |args: &[Arg]| format!("[{}]", args.iter().map(|x| arg_text(g, x)).collect::<Vec<_>>().join(", "));
    let n = |id: NodeId| g.node(id).name.clone();
    match &node.op {
        Op::Placeholder(_) => Ok(()),
        Op::Constant { name: c } | Op::Subgraph { name: c } => write!(out, "{name} = self.{c}"),
        Op::EmptyStrided { size, stride, dtype, device } => write!(
            out,
            "{name} = torch.empty_strided({}, {}, dtype=torch.{}, device='{}')",
            list(size),
            list(stride),
            dtype.torch_name(),
            device.as_str()
        ),
        Op::AsStrided { base, size, stride, offset } => {
            write!(out, "{name} = torch.as_strided({}, {}, {}, {})", n(*base), list(size), list(stride), a(offset))
        }
        Op::TritonKernel { kernel, grid, kwargs } => write!(
            out,
            "{name} = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel={}, grid=[({}, {}, {})], kwargs={})",
            PyStr(kernel.as_str()),
            a(&grid[0]),
            a(&grid[1]),
            a(&grid[2]),
            dict_text(g, kwargs)
        ),
        Op::KernelCall { kernel, args, kwargs } => {
            write!(out, "{name} = wrapir.call_kernel({}, {}", PyStr(kernel.as_str()), list(args))?;
            if !kwargs.is_empty() {
                write!(out, ", {}", dict_text(g, kwargs))?;
            }
            write!(out, ")")
        }
        Op::Extern { target, args, kwargs } => {
            let mut parts: Vec<String> = args.iter().map(a).collect();
            parts.extend(kwargs.iter().map(|(k, v)| format!("{k} = {}", a(v))));
            write!(out, "{name} = {}({})", target_text(target), parts.join(", "))
        }
        Op::SymSize { tensor, dim } => write!(out, "{name} = torch.ops.aten.sym_size.int({}, {dim})", n(*tensor)),
        Op::SymStride { tensor, dim } => write!(out, "{name} = torch.ops.aten.sym_stride.int({}, {dim})", n(*tensor)),
        Op::SymStorageOffset { tensor } => {
            write!(out, "{name} = torch.ops.aten.sym_storage_offset.default({})", n(*tensor))
        }
        Op::GetItem { source, index } => write!(out, "{name} = {}[{}]", n(*source), a(index)),
        Op::InnerTensor { source, attr } => write!(out, "{name} = {}.{attr}", n(*source)),
        Op::Item { tensor, .. } => write!(out, "{name} = torch.ops.aten.item.default({})", n(*tensor)),
        Op::Sym { op, args } => {
            let arg = |i: usize| args.get(i).map(a).unwrap_or_default();
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
            write!(out, "{name} = torch.ops.aten._assert_scalar.default({}, {})", a(cond), PyStr(message))
        }
        Op::AssertSizeStride { tensor, size, stride, context } => {
            write!(out, "{name} = assert_size_stride({}, {}, {}", n(*tensor), list(size), list(stride))?;
            if let Some(c) = context {
                write!(out, ", {}", PyStr(c))?;
            }
            write!(out, ")")
        }
        Op::AssertAlignment { tensor, alignment } => {
            write!(out, "{name} = assert_alignment({}, {alignment})", n(*tensor))
        }
        Op::Cond { pred, true_graph, false_graph, operands } => write!(
            out,
            "{name} = torch.ops.higher_order.cond({}, {}, {}, {})",
            a(pred),
            n(*true_graph),
            n(*false_graph),
            tuple_text(g, operands)
        ),
        Op::WhileLoop { cond_graph, body_graph, carried, additional } => write!(
            out,
            "{name} = torch.ops.higher_order.while_loop({}, {}, {}, {})",
            n(*cond_graph),
            n(*body_graph),
            tuple_text(g, carried),
            tuple_text(g, additional)
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

fn target_text(target: &str) -> String {
    if target.starts_with("torch.") || target.starts_with("extern_kernels.") || !target.contains('.') {
        target.to_string()
    } else {
        format!("torch.ops.{target}")
    }
}

fn tuple_text(g: &Graph, args: &[Arg]) -> String {
    match args.len() {
        0 => "()".to_string(),
        1 => format!("({},)", arg_text(g, &args[0])),
        _ => format!("({})", args.iter().map(|x| arg_text(g, x)).collect::<Vec<_>>().join(", ")),
    }
}

fn dict_text(g: &Graph, kwargs: &indexmap::IndexMap<String, Arg>) -> String {
    let items: Vec<String> = kwargs.iter().map(|(k, v)| format!("{}: {}", PyStr(k), arg_text(g, v))).collect();
    format!("{{{}}}", items.join(", "))
}

/// One argument in Python syntax.
pub(super) fn arg_text(g: &Graph, arg: &Arg) -> String {
    match arg {
        Arg::Node(id) => g.node(*id).name.clone(),
        Arg::Int(v) => v.to_string(),
        Arg::Float(v) => {
            let mut s = String::new();
            let _ = write_float(&mut s, *v);
            s
        }
        Arg::Bool(true) => "True".into(),
        Arg::Bool(false) => "False".into(),
        Arg::None => "None".into(),
        Arg::Str(s) => PyStr(s).to_string(),
        Arg::DType(d) => format!("torch.{}", d.torch_name()),
        Arg::Device(d) => match d.index {
            Some(i) => format!("device(type='{}', index={i})", d.kind.as_str()),
            None => format!("device(type='{}')", d.kind.as_str()),
        },
        Arg::List(items) => format!("[{}]", items.iter().map(|x| arg_text(g, x)).collect::<Vec<_>>().join(", ")),
    }
}
