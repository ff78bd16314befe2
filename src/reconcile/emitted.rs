//! Translation validation: what a lowering emits for each launch, proven equal
//! to the canonical [`LaunchRecord`].

use super::record::{describe, Evidence, EvidenceVerdict, Guard, LaunchRecord, ProofCache};
use crate::fx::{self, Arg, Op, Placeholder, SymOp, Val};
use crate::ir::{ArgValue, BufName, ConstValue, GraphName, KernelBackend, KernelName, Line, ProgramInfo, MAIN_GRAPH};
use crate::sym::egraph::Counterexample;
use crate::sym::{CmpOp, Outcome, SymExpr};

/// A value a lowering passes for one kernel parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum EmittedValue {
    /// A tensor, by buffer name.
    Buffer(BufName),
    /// A symbolic or literal integer (or boolean) expression.
    Expr(SymExpr),
    /// Any other literal (`None`, floats, strings, booleans).
    Const(ConstValue),
}

/// One kernel launch as a lowering emits it.
#[derive(Clone, Debug, PartialEq)]
pub struct EmittedLaunch {
    /// The kernel.
    pub kernel: KernelName,
    /// The graph of the call it lowers ([`MAIN_GRAPH`] for the main graph).
    pub graph: GraphName,
    /// The call's line index in that graph.
    pub line: usize,
    /// Parameter name -> value, for every parameter the lowering passes.
    pub args: Vec<(String, EmittedValue)>,
    /// Grid x, y, z, when the lowering computes the grid itself.
    pub grid: Option<[SymExpr; 3]>,
}

/// A lowering that can report the launches it emits.
pub trait LaunchEmitter {
    /// The lowering's name in reports (`fx`).
    fn name(&self) -> &str;
    /// Every Triton launch the lowering emits for the program, each naming the
    /// call (graph, line) it lowers.
    fn emitted_launches(&self, info: &ProgramInfo<'_>) -> Result<Vec<EmittedLaunch>, EmitError>;
}

/// A lowering could not report its launches.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{lowering}: {message}")]
pub struct EmitError {
    /// The lowering.
    pub lowering: String,
    /// What went wrong.
    pub message: String,
}

/// An emitted launch that differs from the canonical one.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Mismatch {
    /// The lowering passes a parameter the kernel does not have.
    #[error("passes `{param}`, which is not a parameter of the launch")]
    UnknownParam {
        /// The parameter.
        param: String,
    },
    /// The lowering omits a runtime argument.
    #[error("omits runtime argument `{param}`")]
    Missing {
        /// The parameter.
        param: String,
    },
    /// A value differs.
    #[error(
        "passes {param} = {found} but the launch needs {expected}{}",
        counterexample.as_ref().map(|c| format!(" (counterexample: {c}: {} vs {})", c.rhs, c.lhs)).unwrap_or_default()
    )]
    Value {
        /// The parameter, or `grid[i]`.
        param: String,
        /// The canonical value.
        expected: String,
        /// The emitted value.
        found: String,
        /// Where they differ, when the prover found an assignment.
        counterexample: Option<Counterexample>,
    },
    /// The emitted launch names another kernel than the call.
    #[error("launches `{found}` for a call of `{expected}`")]
    Kernel {
        /// The called kernel.
        expected: KernelName,
        /// The emitted kernel.
        found: KernelName,
    },
}

/// What [`validate_emitted`] established.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Validated {
    /// Emitted values shown equal to the canonical ones.
    pub values_proven: usize,
    /// `Some(true)` when all three grid expressions were proven equal,
    /// `Some(false)` when some are only guarded, `None` when none were emitted.
    pub grid_proven: Option<bool>,
    /// Equalities that could not be settled: checked at run time.
    pub guards: Vec<Guard>,
    /// How each claim was settled.
    pub evidence: Vec<Evidence>,
}

/// Proves every emitted argument and grid expression equal to the canonical
/// record's. Buffers match by name, or when both names share storage and
/// layout (a lowering may keep the old name of a reused buffer). Runtime
/// arguments must all be emitted; baked-in values may be left out (C++ strips
/// them), but when emitted they must match.
pub fn validate_emitted(
    info: &ProgramInfo<'_>,
    record: &LaunchRecord,
    emitted: &EmittedLaunch,
    cache: &ProofCache,
) -> Result<Validated, Mismatch> {
    if emitted.kernel != record.kernel {
        return Err(Mismatch::Kernel { expected: record.kernel.clone(), found: emitted.kernel.clone() });
    }
    let mut out = Validated::default();
    for (param, value) in &emitted.args {
        let Some(canonical) = record.param_value(param) else {
            return Err(Mismatch::UnknownParam { param: param.clone() });
        };
        let differs = |counterexample| Mismatch::Value {
            param: param.clone(),
            expected: describe(&canonical),
            found: describe_emitted(value),
            counterexample,
        };
        match (&canonical, value) {
            (ArgValue::Buffer(a), EmittedValue::Buffer(b)) => {
                if !same_buffer(info, &record.graph, a, b) {
                    return Err(differs(None));
                }
                out.values_proven += 1;
            }
            (ArgValue::Expr(a), EmittedValue::Expr(b)) => {
                if prove(cache, param, a, b, &mut out)? {
                    out.values_proven += 1;
                }
            }
            (ArgValue::Bool(a), EmittedValue::Expr(SymExpr::Int(b))) if i64::from(*a) == *b => out.values_proven += 1,
            (ArgValue::Float(a), EmittedValue::Expr(SymExpr::Int(b))) if *a == *b as f64 => out.values_proven += 1,
            (c, EmittedValue::Const(k)) if const_matches(c, k) => out.values_proven += 1,
            _ => return Err(differs(None)),
        }
    }
    for a in &record.args {
        if !emitted.args.iter().any(|(p, _)| *p == a.param) {
            return Err(Mismatch::Missing { param: a.param.clone() });
        }
    }
    if let Some(grid) = &emitted.grid {
        let mut all = true;
        for (i, (want, got)) in record.grid.iter().zip(grid.iter()).enumerate() {
            all &= prove(cache, &format!("grid[{i}]"), want, got, &mut out)?;
        }
        out.grid_proven = Some(all);
    }
    Ok(out)
}

/// Proves `canonical == emitted`; `Ok(false)` when only guarded.
fn prove(cache: &ProofCache, param: &str, canonical: &SymExpr, emitted: &SymExpr, out: &mut Validated) -> Result<bool, Mismatch> {
    let claim = format!("emitted {param}: {emitted} == {canonical}");
    match cache.prove(canonical, emitted) {
        Outcome::Proven(e) => {
            out.evidence.push(Evidence { claim, verdict: EvidenceVerdict::Proven, detail: e.flat_string().to_string() });
            Ok(true)
        }
        Outcome::Disproved(c) => Err(Mismatch::Value {
            param: param.to_string(),
            expected: canonical.to_string(),
            found: emitted.to_string(),
            counterexample: Some(c),
        }),
        Outcome::Unknown(reason) => {
            out.guards.push(Guard {
                param: param.to_string(),
                cond: SymExpr::cmp(CmpOp::Eq, emitted.clone(), canonical.clone()),
                message: format!("{param}: cannot prove emitted {emitted} == {canonical}"),
            });
            out.evidence.push(Evidence { claim, verdict: EvidenceVerdict::Guarded, detail: reason });
            Ok(false)
        }
    }
}

fn const_matches(canonical: &ArgValue, k: &ConstValue) -> bool {
    match (canonical, k) {
        (ArgValue::None, ConstValue::None) => true,
        (ArgValue::Bool(a), ConstValue::Bool(b)) => a == b,
        (ArgValue::Float(a), ConstValue::Float(b)) => a == b || (a.is_nan() && b.is_nan()),
        (ArgValue::Str(a), ConstValue::Str(b)) => a == b,
        (ArgValue::Expr(SymExpr::Int(a)), ConstValue::Int(b)) => a == b,
        (ArgValue::Expr(SymExpr::Int(a)), ConstValue::Float(b)) => *a as f64 == *b,
        _ => false,
    }
}

/// `true` when two names denote the same tensor: equal names, or names a
/// lowering may merge: `get b = a` without indices, and `reuse a -> b` where
/// both have the same layout (the new name is the old tensor).
fn same_buffer(info: &ProgramInfo<'_>, graph: &GraphName, a: &BufName, b: &BufName) -> bool {
    if a == b {
        return true;
    }
    let program = info.program();
    let g = if graph.as_str() == MAIN_GRAPH { Some(&program.main) } else { program.subgraphs.get(graph) };
    let Some(g) = g else { return false };
    let mut parent: std::collections::HashMap<&BufName, &BufName> = std::collections::HashMap::new();
    for line in &g.lines {
        match line {
            Line::MultiOutput { result, source, indices } if indices.is_empty() => {
                parent.insert(result, source);
            }
            Line::Reuse { old, new, .. } if g.layout(old).is_some() && g.layout(old) == g.layout(new) => {
                parent.insert(new, old);
            }
            _ => {}
        }
    }
    let root = |start: &BufName| {
        let mut x = start.clone();
        // Each name is defined once, so the chain has no cycle; the bound
        // guards against malformed input anyway.
        for _ in 0..=parent.len() {
            match parent.get(&x) {
                Some(p) => x = (*p).clone(),
                None => break,
            }
        }
        x
    };
    root(a) == root(b)
}

fn describe_emitted(v: &EmittedValue) -> String {
    match v {
        EmittedValue::Buffer(b) => format!("buffer `{b}`"),
        EmittedValue::Expr(e) => e.to_string(),
        EmittedValue::Const(c) => c.to_string(),
    }
}

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
        let err = |message: String| EmitError { lowering: "fx".into(), message };
        let graph = crate::lower::fx::lower(info, &self.options).map_err(|e| err(e.to_string()))?;
        let mut out = Vec::new();
        collect_fx(info, &graph, &GraphName::new(MAIN_GRAPH), &mut out).map_err(err)?;
        Ok(out)
    }
}

/// Collects the Triton launches of one FX graph (and its subgraphs), pairing
/// the n-th launch node with the n-th Triton call line of the IR graph.
fn collect_fx(info: &ProgramInfo<'_>, g: &fx::Graph, name: &GraphName, out: &mut Vec<EmittedLaunch>) -> Result<(), String> {
    let program = info.program();
    let ir = if name.as_str() == MAIN_GRAPH { Some(&program.main) } else { program.subgraphs.get(name) };
    let ir = ir.ok_or_else(|| format!("FX subgraph `{name}` has no IR graph"))?;
    let calls: Vec<(usize, &KernelName)> = ir
        .lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match l {
            Line::KernelCall(c)
                if matches!(program.kernels.get(&c.kernel).map(|d| &d.backend), Some(KernelBackend::Triton(_))) =>
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
                args.push((p.clone(), fx_value(g, a).map_err(|m| format!("kernel `{kernel}`, `{p}`: {m}"))?));
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
        out.push(EmittedLaunch { kernel, graph: name.clone(), line, args, grid: Some(grid) });
    }
    for (sub, sg) in &g.subgraphs {
        collect_fx(info, sg, &GraphName::new(sub), out)?;
    }
    Ok(())
}

fn is_tensor(node: &fx::Node) -> bool {
    matches!(node.val, Some(Val::Tensor(_)))
        || matches!(
            node.op,
            Op::Placeholder(Placeholder::Tensor(_)) | Op::Constant { .. } | Op::EmptyStrided { .. } | Op::AsStrided { .. }
        )
}

fn fx_value(g: &fx::Graph, a: &Arg) -> Result<EmittedValue, String> {
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
fn fx_expr(g: &fx::Graph, a: &Arg) -> Result<SymExpr, String> {
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
    let layout_of = |t: fx::NodeId| match &g.node(t).val {
        Some(Val::Tensor(l)) => Ok(l),
        _ => Err(format!("node `{}` has no declared layout", g.node(t).name)),
    };
    let dim = |v: &[SymExpr], d: i64, t: fx::NodeId| {
        usize::try_from(d)
            .ok()
            .and_then(|d| v.get(d).cloned())
            .ok_or_else(|| format!("dimension {d} is out of range for `{}`", g.node(t).name))
    };
    match &node.op {
        Op::Placeholder(Placeholder::Symbol(s)) => Ok(SymExpr::Sym(s.clone())),
        Op::SymSize { tensor, dim: d } => dim(&layout_of(*tensor)?.size, *d, *tensor),
        Op::SymStride { tensor, dim: d } => dim(&layout_of(*tensor)?.stride, *d, *tensor),
        Op::SymStorageOffset { tensor } => Ok(layout_of(*tensor)?.offset.clone()),
        Op::Item { symbol: Some(s), multiplier, .. } => Ok(SymExpr::mul(SymExpr::Int(*multiplier), SymExpr::Sym(s.clone()))),
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
            let cmp = |op: CmpOp, xs: Vec<SymExpr>| two(xs).map(|(a, b)| SymExpr::Cmp(op, a, b));
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
                SymOp::Eq => cmp(CmpOp::Eq, xs),
                SymOp::Ne => cmp(CmpOp::Ne, xs),
                SymOp::Lt => cmp(CmpOp::Lt, xs),
                SymOp::Le => cmp(CmpOp::Le, xs),
                SymOp::Gt => cmp(CmpOp::Gt, xs),
                SymOp::Ge => cmp(CmpOp::Ge, xs),
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
