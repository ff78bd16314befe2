//! The FX lowering's launches: `triton_kernel_wrapper_mutation` nodes read back into expressions.

use super::*;

/// The launches of the FX lowering ([`crate::lower::fx`]): each
/// `triton_kernel_wrapper_mutation` node's kwargs and grid, read back into
/// expressions over the program's symbols.
#[derive(Clone, Debug, Default)]
pub struct FxLaunches {
    /// Options of the FX lowering.
    pub options: crate::lower::fx::Options,
}

impl LaunchEmitter for FxLaunches {
    fn name(&self) -> &str {
        "fx"
    }

    fn emitted_launches(&self, info: &ProgramInfo<'_>) -> Result<Vec<EmittedLaunch>, EmitError> {
        let err = |message: String| EmitError::new(self.name(), message, false);
        let graph = crate::lower::fx::lower(info, &self.options).map_err(|e| {
            let unsupported = matches!(e.kind, crate::lower::fx::ErrorKind::Unsupported(_));
            EmitError::new(self.name(), e.to_string(), unsupported)
        })?;
        let mut out = Vec::new();
        collect_fx(info, &graph, &GraphName::new(MAIN_GRAPH), &mut out).map_err(err)?;
        Ok(out)
    }
}

/// Collects the Triton launches of one FX graph (and its subgraphs), pairing
/// the n-th launch node with the n-th Triton call line of the IR graph.
pub(super) fn collect_fx(
    info: &ProgramInfo<'_>,
    g: &crate::fx::Graph,
    name: &GraphName,
    out: &mut Vec<EmittedLaunch>,
) -> Result<(), String> {
    let program = info.program();
    let ir = if name.as_str() == MAIN_GRAPH {
        Some(&program.main)
    } else {
        program.subgraphs.get(name)
    };
    let ir = ir.ok_or_else(|| format!("FX subgraph `{name}` has no IR graph"))?;
    let calls: Vec<(usize, &KernelName)> = ir
        .lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match l {
            Line::KernelCall(c)
                if matches!(
                    program.kernels.get(&c.kernel).map(|d| &d.backend),
                    Some(KernelBackend::Triton(_))
                ) =>
            {
                Some((i, &c.kernel))
            }
            _ => None,
        })
        .collect();
    let mut launches = Vec::new();
    for (_, node) in g.iter() {
        if let Op::TritonKernel { kernel, grid, kwargs } = &node.op {
            let mut args = Vec::new();
            for (p, a) in kwargs {
                args.push((
                    p.to_string(),
                    fx_value(g, a).map_err(|m| format!("kernel `{kernel}`, `{p}`: {m}"))?,
                ));
            }
            let mut dims = Vec::new();
            for a in grid {
                dims.push(fx_expr(g, a).map_err(|m| format!("kernel `{kernel}`, grid: {m}"))?);
            }
            let grid = match <[SymExpr; 3]>::try_from(dims) {
                Ok(d) => d,
                Err(_) => return Err(format!("kernel `{kernel}`: the grid does not have three dimensions")),
            };
            launches.push((kernel.clone(), args, grid));
        }
    }
    if launches.len() != calls.len() {
        return Err(format!(
            "graph `{name}` has {} Triton calls but the FX graph has {} launches",
            calls.len(),
            launches.len()
        ));
    }
    for ((line, _), (kernel, args, grid)) in calls.into_iter().zip(launches) {
        out.push(EmittedLaunch {
            kernel,
            graph: name.clone(),
            line,
            args,
            grid: Some(grid),
            scratch: None,
            ranges: Vec::new(),
        });
    }
    for (sub, sg) in &g.subgraphs {
        collect_fx(info, sg, &GraphName::new(sub), out)?;
    }
    Ok(())
}

pub(super) fn is_tensor(node: &crate::fx::Node) -> bool {
    matches!(node.val, Some(Val::Tensor(_)))
        || matches!(
            node.op,
            Op::Placeholder(Placeholder::Tensor(_))
                | Op::Constant { .. }
                | Op::EmptyStrided { .. }
                | Op::AsStrided { .. }
        )
}

pub(super) fn fx_value(g: &crate::fx::Graph, a: &Arg) -> Result<EmittedValue, String> {
    Ok(match a {
        Arg::Node(id) if is_tensor(g.node(*id)) => EmittedValue::Buffer(BufName::new(&g.node(*id).name)),
        Arg::Node(_) | Arg::Int(_) => EmittedValue::Expr(fx_expr(g, a)?),
        Arg::Bool(b) => EmittedValue::Const(ConstValue::Bool(*b)),
        Arg::Float(f) => EmittedValue::Const(ConstValue::Float(*f)),
        Arg::None => EmittedValue::Const(ConstValue::None),
        Arg::Str(s) => EmittedValue::Const(ConstValue::Str(s.clone())),
        Arg::DType(_) | Arg::Device(_) | Arg::List(_) => return Err("not a kernel argument value".into()),
    })
}

/// An FX argument as an expression over program symbols: nodes that bind a
/// symbol are that symbol, arithmetic nodes are rebuilt, size reads are the
/// declared sizes.
pub(super) fn fx_expr(g: &crate::fx::Graph, a: &Arg) -> Result<SymExpr, String> {
    let id = match a {
        Arg::Int(v) => return Ok(SymExpr::Int(*v)),
        Arg::Bool(b) => return Ok(SymExpr::Bool(*b)),
        Arg::Node(id) => *id,
        other => return Err(format!("{other:?} is not an integer")),
    };
    let node = g.node(id);
    if let Some(s) = node.binds.first() {
        return Ok(SymExpr::Sym(s.clone()));
    }
    let layout_of = |t: crate::fx::NodeId| match &g.node(t).val {
        Some(Val::Tensor(l)) => Ok(l),
        _ => Err(format!("node `{}` has no declared layout", g.node(t).name)),
    };
    let dim = |v: &[SymExpr], d: i64, t: crate::fx::NodeId| {
        usize::try_from(d)
            .ok()
            .and_then(|d| v.get(d).cloned())
            .ok_or_else(|| format!("dimension {d} is out of range for `{}`", g.node(t).name))
    };
    match &node.op {
        Op::Placeholder(Placeholder::Symbol(s)) => Ok(SymExpr::Sym(s.clone())),
        Op::Placeholder(Placeholder::Integer(e)) => Ok(e.clone()),
        Op::SymSize { tensor, dim: d } => dim(&layout_of(*tensor)?.size, *d, *tensor),
        Op::SymStride { tensor, dim: d } => dim(&layout_of(*tensor)?.stride, *d, *tensor),
        Op::SymStorageOffset { tensor } => Ok(layout_of(*tensor)?.offset.clone()),
        Op::Item {
            symbol: Some(s),
            multiplier,
            ..
        } => Ok(SymExpr::mul(SymExpr::Int(*multiplier), SymExpr::Sym(s.clone()))),
        Op::Sym { op, args } => {
            let xs = args.iter().map(|x| fx_expr(g, x)).collect::<Result<Vec<_>, _>>()?;
            let two = |xs: Vec<SymExpr>| -> Result<(Box<SymExpr>, Box<SymExpr>), String> {
                match <[SymExpr; 2]>::try_from(xs) {
                    Ok([a, b]) => Ok((Box::new(a), Box::new(b))),
                    Err(v) => Err(format!("`{}` takes two operands, got {}", node.name, v.len())),
                }
            };
            let nary = |xs: Vec<SymExpr>, f: fn(Vec<SymExpr>) -> SymExpr| match xs.len() {
                0 => Err(format!("`{}` has no operands", node.name)),
                1 => Ok(xs.into_iter().next().unwrap_or(SymExpr::Int(0))),
                _ => Ok(f(xs)),
            };
            match op {
                SymOp::Sum => nary(xs, SymExpr::Add),
                SymOp::Mul => nary(xs, SymExpr::Mul),
                SymOp::Min => nary(xs, SymExpr::Min),
                SymOp::Max => nary(xs, SymExpr::Max),
                SymOp::And => nary(xs, SymExpr::And),
                SymOp::Or => nary(xs, SymExpr::Or),
                SymOp::FloorDiv => two(xs).map(|(a, b)| SymExpr::FloorDiv(a, b)),
                SymOp::PyMod => two(xs).map(|(a, b)| SymExpr::PythonMod(a, b)),
                SymOp::CMod => two(xs).map(|(a, b)| SymExpr::Mod(a, b)),
                SymOp::Pow => {
                    let (b, n) = two(xs)?;
                    match *n {
                        SymExpr::Int(k) => u32::try_from(k)
                            .map(|k| SymExpr::Pow(b, k))
                            .map_err(|_| format!("`{}` has a non-natural exponent {k}", node.name)),
                        other => Err(format!("`{}` has a symbolic exponent `{other}`", node.name)),
                    }
                }
                SymOp::Cmp(c) => two(xs).map(|(a, b)| SymExpr::Cmp(*c, a, b)),
                SymOp::Not => match <[SymExpr; 1]>::try_from(xs) {
                    Ok([x]) => Ok(SymExpr::Not(Box::new(x))),
                    Err(_) => Err(format!("`{}` takes one operand", node.name)),
                },
                SymOp::Ite => Err(format!("`{}` (sym_ite) has no expression form", node.name)),
            }
        }
        _ => Err(format!("node `{}` is not a symbolic integer", node.name)),
    }
}
