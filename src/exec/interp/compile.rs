//! Compiling a graph into a [`Plan`]: slots, steps, frees and slot reuse, literal interning.

use super::*;

pub(super) fn compile_graph(
    graph: &Graph,
    name: &str,
    symbols: &Arc<IndexMap<Symbol, SymbolDecl>>,
    kernels: &Arc<IndexMap<KernelName, KernelDef>>,
) -> Result<Plan, ExecError> {
    let mut slot_of: HashMap<NodeId, usize> = HashMap::new();
    let mut subgraph_of: HashMap<NodeId, String> = HashMap::new();
    for (id, node) in graph.iter() {
        match &node.op {
            Op::Subgraph { name } => {
                subgraph_of.insert(id, name.clone());
            }
            Op::Output { .. } => {}
            _ => {
                let n = slot_of.len();
                slot_of.insert(id, n);
            }
        }
    }
    let err = |node: &str, msg: String| ExecError::AtNode {
        graph: name.to_string(),
        node: node.to_string(),
        source: Box::new(ExecError::Input(msg)),
    };
    let mut steps = Vec::new();
    let mut infos = Vec::new();
    let mut binds: Vec<Bind> = Vec::new();
    // The symbols bound so far, in first-bind order (`Plan::bound`).
    let mut bound = Bindings::new();
    // Plan tables are indexed with `u32` ranges (keeps steps small).
    let too_large = || ExecError::Input(format!("graph `{name}` is too large to compile"));
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for (position, (id, node)) in graph.iter().enumerate() {
        let slot = |n: NodeId| {
            slot_of
                .get(&n)
                .copied()
                .ok_or_else(|| err(&node.name, format!("operand `{}` has no value", graph.node(n).name)))
        };
        let operand = |a: &Arg| to_operand(a, &slot_of).ok_or_else(|| err(&node.name, "operand has no value".into()));
        let operands = |xs: &[Arg]| xs.iter().map(operand).collect::<Result<Vec<_>, _>>();
        let kwmap = |kw: &crate::fx::Kwargs| -> Result<KwOperands, ExecError> {
            Ok(KwOperands {
                names: kw.keys().map(|k| k.to_string()).collect(),
                values: kw.values().map(operand).collect::<Result<_, _>>()?,
                slots: None,
            })
        };
        let sub = |n: NodeId| {
            subgraph_of
                .get(&n)
                .cloned()
                .ok_or_else(|| err(&node.name, "operand is not a subgraph".into()))
        };
        let kind = match &node.op {
            Op::Subgraph { .. } => continue,
            Op::Output { values, .. } => {
                outputs = operands(values)?;
                continue;
            }
            Op::Placeholder(p) => {
                inputs.push((node.name.to_string(), p.clone()));
                StepKind::Input(inputs.len() - 1)
            }
            Op::Constant { name } => StepKind::Constant(name.clone()),
            Op::EmptyStrided(e) => StepKind::EmptyStrided {
                size: OperandList::Owned(operands(&e.size)?.into()),
                stride: OperandList::Owned(operands(&e.stride)?.into()),
                dtype: e.dtype,
                device: e.device,
            },
            Op::AsStrided(a) => StepKind::AsStrided(Box::new(AsStridedStep {
                base: slot(a.base)?,
                size: operands(&a.size)?,
                stride: operands(&a.stride)?,
                offset: operand(&a.offset)?,
            })),
            Op::TritonKernel { kernel, grid, kwargs } => StepKind::Triton {
                t: Box::new(TritonStep {
                    kernel: KernelRef {
                        name: kernel.clone(),
                        index: kernels.get_index_of(kernel),
                    },
                    grid: [operand(&grid[0])?, operand(&grid[1])?, operand(&grid[2])?],
                    kwargs: kwmap(kwargs)?,
                }),
                packed: None,
            },
            Op::KernelCall { kernel, args, kwargs } => StepKind::KernelCall {
                c: Box::new(CallStep {
                    kernel: KernelRef {
                        name: kernel.clone(),
                        index: kernels.get_index_of(kernel),
                    },
                    args: operands(args)?,
                    kwargs: kwmap(kwargs)?,
                }),
                packed: None,
            },
            Op::Extern { target, args, kwargs } => StepKind::Extern(Box::new(ExternStep {
                target: target.clone(),
                family: crate::exec::op::ExternOp::of(target),
                args: operands(args)?,
                kwargs: kwmap(kwargs)?,
                layout: match &node.val {
                    Some(Val::Tensor(layout)) => Some(Layout::clone(layout)),
                    _ => None,
                },
                syms: match &node.val {
                    Some(Val::Tensor(layout)) => layout_syms(layout, &bound, symbols),
                    _ => Box::default(),
                },
            })),
            Op::SymSize { tensor, dim } => StepKind::SymSize {
                tensor: slot(*tensor)?,
                dim: *dim,
            },
            Op::SymStride { tensor, dim } => StepKind::SymStride {
                tensor: slot(*tensor)?,
                dim: *dim,
            },
            Op::SymStorageOffset { tensor } => StepKind::SymStorageOffset { tensor: slot(*tensor)? },
            Op::GetItem { source, index } => StepKind::GetItem {
                source: slot(*source)?,
                index: operand(index)?,
            },
            Op::InnerTensor { source, attr } => StepKind::InnerTensor {
                source: slot(*source)?,
                attr: attr.clone(),
            },
            Op::Item {
                tensor,
                symbol,
                multiplier,
            } => StepKind::Item {
                tensor: slot(*tensor)?,
                symbol: symbol.clone(),
                decl: symbol.as_ref().and_then(|s| decl_index(s, symbols)),
                multiplier: *multiplier,
            },
            Op::Sym { op, args } => StepKind::Sym {
                op: *op,
                args: operands(args)?.into_iter().collect(),
            },
            Op::AssertScalar { cond, message } => StepKind::AssertScalar {
                cond: operand(cond)?,
                message: message.as_str().into(),
            },
            Op::AssertSizeStride(a) => StepKind::AssertSizeStride {
                tensor: slot(a.tensor)?,
                size: OperandList::Owned(operands(&a.size)?.into()),
                stride: OperandList::Owned(operands(&a.stride)?.into()),
                dtype: a.dtype,
                context: a.context.as_deref().map(Box::from),
            },
            Op::AssertAlignment { tensor, alignment } => StepKind::AssertAlignment {
                tensor: slot(*tensor)?,
                alignment: *alignment,
            },
            Op::AssertFinite { tensor } => StepKind::AssertFinite {
                tensor: slot(*tensor)?,
                name: graph.node(*tensor).name.as_ref().into(),
            },
            Op::Cond(c) => StepKind::Branch(Box::new(BranchStep {
                selector: operand(&c.pred)?,
                branches: vec![sub(c.false_graph)?, sub(c.true_graph)?],
                operands: operands(&c.operands)?,
                truthy: true,
            })),
            Op::Switch(sw) => StepKind::Branch(Box::new(BranchStep {
                selector: operand(&sw.index)?,
                branches: sw.branches.iter().map(|b| sub(*b)).collect::<Result<_, _>>()?,
                operands: operands(&sw.operands)?,
                truthy: false,
            })),
            Op::WhileLoop(w) => StepKind::While(Box::new(WhileStep {
                cond_graph: sub(w.cond_graph)?,
                body_graph: sub(w.body_graph)?,
                carried: operands(&w.carried)?,
                additional: operands(&w.additional)?,
            })),
        };
        infos.push(StepInfo {
            position: u32::try_from(position).map_err(|_| too_large())?,
            node: node.name.to_string(),
            val: node.val.clone(),
            bound_before: u32::try_from(bound.len()).map_err(|_| too_large())?,
            syms: match (&kind, &node.val) {
                (StepKind::GetItem { .. }, Some(Val::Tensor(layout))) => layout_syms(layout, &bound, symbols),
                _ => Box::default(),
            },
        });
        let first_bind = u32::try_from(binds.len()).map_err(|_| too_large())?;
        for s in &node.binds {
            // A float read from a tensor (`zuf0`) is the node's value, used
            // whole; it binds no integer.
            if symbols
                .get(s)
                .is_some_and(|d| d.kind == crate::ir::SymbolKind::UnbackedFloat)
            {
                continue;
            }
            let id = u32::try_from(bound.insert_full(s.clone(), 0).0).map_err(|_| too_large())?;
            binds.push(Bind {
                symbol: s.clone(),
                range: symbols.get(s).map(|d| d.range),
                id,
            });
        }
        steps.push(Step {
            kind,
            out: slot_of.get(&id).copied(),
            binds: first_bind..u32::try_from(binds.len()).map_err(|_| too_large())?,
            frees: 0..0,
        });
    }
    let mut step_frees = plan_frees(&mut steps, &mut outputs, slot_of.len());
    let slots = reuse_slots(&mut steps, &mut step_frees, &mut outputs, slot_of.len());
    let lits = intern_call_literals(&mut steps, slots);
    let mut operands = Vec::new();
    let (mut call_slots, mut call_names) = (Vec::new(), Vec::new());
    for step in &mut steps {
        match &mut step.kind {
            StepKind::EmptyStrided { size, stride, .. } | StepKind::AssertSizeStride { size, stride, .. } => {
                size.pack(&mut operands).ok_or_else(too_large)?;
                stride.pack(&mut operands).ok_or_else(too_large)?;
            }
            StepKind::Triton { t, packed } => {
                let Some(index) = t.kwargs.slots.take() else {
                    continue;
                };
                let len = |n: usize| u32::try_from(n).map_err(|_| too_large());
                let grid = len(operands.len())?;
                operands.extend(t.grid.iter().cloned());
                let args = len(call_slots.len())?;
                call_slots.extend_from_slice(&index);
                call_names.extend(std::mem::take(&mut t.kwargs.names).into_vec());
                *packed = Some(PackedLaunch {
                    kernel: t.kernel.index.map_or(Ok(u32::MAX), len)?,
                    grid,
                    args,
                    positional: 0,
                    args_end: len(call_slots.len())?,
                });
                len(operands.len())?;
            }
            StepKind::KernelCall { c, packed } => {
                let Some(index) = c.kwargs.slots.take() else {
                    continue;
                };
                let len = |n: usize| u32::try_from(n).map_err(|_| too_large());
                let args = len(call_slots.len())?;
                call_slots.extend_from_slice(&index);
                // Names parallel to the slots: none for positional arguments.
                call_names.extend(std::iter::repeat_with(String::new).take(c.args.len()));
                call_names.extend(std::mem::take(&mut c.kwargs.names).into_vec());
                *packed = Some(PackedLaunch {
                    kernel: c.kernel.index.map_or(Ok(u32::MAX), len)?,
                    grid: u32::MAX,
                    args,
                    positional: len(c.args.len())?,
                    args_end: len(call_slots.len())?,
                });
                if call_names.len() != call_slots.len() {
                    return Err(ExecError::Input(format!(
                        "graph `{name}`: kernel call operands do not match their names"
                    )));
                }
            }
            _ => {}
        }
    }
    let mut frees = Vec::with_capacity(step_frees.iter().map(Vec::len).sum());
    for (step, list) in steps.iter_mut().zip(&step_frees) {
        let start = u32::try_from(frees.len()).map_err(|_| too_large())?;
        frees.extend_from_slice(list);
        step.frees = start..u32::try_from(frees.len()).map_err(|_| too_large())?;
    }

    let mut subplans = HashMap::new();
    for (sub_name, sub) in &graph.subgraphs {
        subplans.insert(sub_name.clone(), compile_graph(sub, sub_name, symbols, kernels)?);
    }
    Ok(Plan {
        graph: name.to_string(),
        steps,
        infos,
        frees,
        binds,
        operands,
        call_slots,
        call_names,
        slots,
        inputs,
        outputs,
        subplans,
        symbols: Arc::clone(symbols),
        kernels: Arc::clone(kernels),
        bound,
        lits,
        dag: None,
    })
}

/// The symbols of `layout`, each with its index in `bound` (the symbols
/// steps before this one bind) and in `symbols`.
fn layout_syms(layout: &Layout, bound: &Bindings, symbols: &IndexMap<Symbol, SymbolDecl>) -> Box<[LayoutSym]> {
    let mut out: Vec<LayoutSym> = Vec::new();
    for e in layout
        .size
        .iter()
        .chain(&layout.stride)
        .chain(std::iter::once(&layout.offset))
    {
        if matches!(e, SymExpr::Int(_)) {
            continue;
        }
        for symbol in e.free_symbols() {
            if out.iter().any(|l| l.symbol == symbol) {
                continue;
            }
            out.push(LayoutSym {
                id: bound.get_index_of(&symbol).and_then(|i| u32::try_from(i).ok()),
                decl: decl_index(&symbol, symbols),
                symbol,
            });
        }
    }
    out.into_boxed_slice()
}

/// The index of `symbol`'s declaration in `symbols`.
fn decl_index(symbol: &Symbol, symbols: &IndexMap<Symbol, SymbolDecl>) -> Option<u32> {
    symbols.get_index_of(symbol).and_then(|i| u32::try_from(i).ok())
}

pub(super) fn to_operand(a: &Arg, slots: &HashMap<NodeId, usize>) -> Option<Operand> {
    Some(match a {
        Arg::Node(n) => Operand::Slot(*slots.get(n)?),
        Arg::Int(v) => Operand::Lit(Lit::Int(*v)),
        Arg::Float(v) => Operand::Lit(Lit::Float(*v)),
        Arg::Bool(v) => Operand::Lit(Lit::Bool(*v)),
        Arg::None => Operand::Lit(Lit::None),
        Arg::Str(s) => Operand::Lit(Lit::Str(s.as_str().into())),
        Arg::DType(d) => Operand::Lit(Lit::DType(*d)),
        Arg::Device(d) => Operand::Lit(Lit::Device(*d)),
        Arg::List(items) => Operand::List(items.iter().map(|i| to_operand(i, slots)).collect::<Option<_>>()?),
    })
}

/// Liveness: each slot is freed after the step that reads it last (or right
/// after it is produced when nothing reads it); outputs are never freed.
/// Returns, for each step, the slots it frees.
/// (Takes the steps mutably only to share [`step_reads_mut`], the one slot
/// walker; it changes nothing.)
pub(super) fn plan_frees(steps: &mut [Step], outputs: &mut [Operand], slots: usize) -> Vec<Vec<usize>> {
    let mut last: Vec<Option<usize>> = vec![None; slots];
    for (i, s) in steps.iter_mut().enumerate() {
        if let Some(o) = s.out {
            if let Some(l) = last.get_mut(o) {
                *l = Some(i);
            }
        }
        step_reads_mut(&mut s.kind, &mut |slot| {
            if let Some(l) = last.get_mut(*slot) {
                *l = Some(i);
            }
        });
    }
    let mut frees = vec![Vec::new(); steps.len()];
    let mut keep = vec![false; slots];
    for o in outputs {
        for_each_slot_mut(o, &mut |s| {
            if let Some(k) = keep.get_mut(*s) {
                *k = true;
            }
        });
    }
    for (slot, l) in last.iter().enumerate() {
        if let (Some(i), false) = (l, keep.get(slot).copied().unwrap_or(true)) {
            if let Some(list) = frees.get_mut(*i) {
                list.push(slot);
            }
        }
    }
    frees
}

pub(super) fn for_each_slot_mut(o: &mut Operand, f: &mut dyn FnMut(&mut usize)) {
    match o {
        Operand::Slot(s) => f(s),
        Operand::List(items) => items.iter_mut().for_each(|i| for_each_slot_mut(i, f)),
        Operand::Lit(_) => {}
    }
}

/// Calls `f` on every slot a step reads, mutably: the one slot walker
/// (liveness reads through it, renumbering writes).
pub(super) fn step_reads_mut(kind: &mut StepKind, f: &mut dyn FnMut(&mut usize)) {
    pub(super) fn many(xs: &mut [Operand], f: &mut dyn FnMut(&mut usize)) {
        xs.iter_mut().for_each(|x| for_each_slot_mut(x, f))
    }
    match kind {
        StepKind::Input(_) | StepKind::Constant(_) => {}
        StepKind::EmptyStrided { size, stride, .. } => {
            many(size.owned_mut(), f);
            many(stride.owned_mut(), f);
        }
        StepKind::AsStrided(a) => {
            let AsStridedStep {
                base,
                size,
                stride,
                offset,
            } = &mut **a;
            f(base);
            many(size, f);
            many(stride, f);
            for_each_slot_mut(offset, f);
        }
        StepKind::Triton { t, .. } => {
            many(&mut t.grid, f);
            many(&mut t.kwargs.values, f);
        }
        StepKind::KernelCall { c, .. } => {
            many(&mut c.args, f);
            many(&mut c.kwargs.values, f);
        }
        StepKind::Extern(c) => {
            many(&mut c.args, f);
            many(&mut c.kwargs.values, f);
        }
        StepKind::SymSize { tensor, .. }
        | StepKind::SymStride { tensor, .. }
        | StepKind::SymStorageOffset { tensor }
        | StepKind::Item { tensor, .. }
        | StepKind::AssertAlignment { tensor, .. }
        | StepKind::AssertFinite { tensor, .. } => f(tensor),
        StepKind::GetItem { source, index } => {
            f(source);
            for_each_slot_mut(index, f);
        }
        StepKind::InnerTensor { source, .. } => f(source),
        StepKind::Sym { args, .. } => many(args, f),
        StepKind::AssertScalar { cond, .. } => for_each_slot_mut(cond, f),
        StepKind::AssertSizeStride {
            tensor, size, stride, ..
        } => {
            f(tensor);
            many(size.owned_mut(), f);
            many(stride.owned_mut(), f);
        }
        StepKind::Branch(b) => {
            for_each_slot_mut(&mut b.selector, f);
            many(&mut b.operands, f);
        }
        StepKind::While(w) => {
            many(&mut w.carried, f);
            many(&mut w.additional, f);
        }
    }
}

/// Renumbers slots so that a slot freed by one step is reused by a later
/// step's result: a run then needs as many slots as values are live at once,
/// not one per node. Runs after [`plan_frees`] (which numbers one slot per
/// node); returns the number of slots. A step's result never takes a slot
/// freed by that same step, since its frees run after its result is stored.
pub(super) fn reuse_slots(
    steps: &mut [Step],
    frees: &mut [Vec<usize>],
    outputs: &mut [Operand],
    node_slots: usize,
) -> usize {
    const UNASSIGNED: usize = usize::MAX;
    let mut physical = vec![UNASSIGNED; node_slots];
    let mut free: Vec<usize> = Vec::new();
    let mut count = 0usize;
    // A slot read before any step produced it (impossible in a topologically
    // ordered graph) keeps an out-of-range number, so the run reports it as
    // empty instead of reading another value.
    let map = |s: &mut usize, physical: &[usize]| {
        *s = physical
            .get(*s)
            .copied()
            .filter(|p| *p != UNASSIGNED)
            .unwrap_or(UNASSIGNED);
    };
    for (step, step_frees) in steps.iter_mut().zip(frees.iter_mut()) {
        step_reads_mut(&mut step.kind, &mut |s| map(s, &physical));
        if let Some(o) = step.out.as_mut() {
            let p = free.pop().unwrap_or_else(|| {
                count += 1;
                count - 1
            });
            if let Some(slot) = physical.get_mut(*o) {
                *slot = p;
            }
            *o = p;
        }
        for f in step_frees.iter_mut() {
            map(f, &physical);
            if *f != UNASSIGNED {
                free.push(*f);
            }
        }
    }
    for o in outputs.iter_mut() {
        for_each_slot_mut(o, &mut |s| map(s, &physical));
    }
    count
}

/// A literal as a hashable key (floats by their bits), for interning.
#[derive(PartialEq, Eq, Hash)]
pub(super) enum LitKey {
    Int(i64),
    Float(u64),
    Bool(bool),
    None,
    Str(String),
    DType(DType),
    Device(Device),
}

impl LitKey {
    pub(super) fn of(l: &Lit) -> Self {
        match l {
            Lit::Int(v) => LitKey::Int(*v),
            Lit::Float(v) => LitKey::Float(v.to_bits()),
            Lit::Bool(v) => LitKey::Bool(*v),
            Lit::None => LitKey::None,
            Lit::Str(s) => LitKey::Str(s.to_string()),
            Lit::DType(d) => LitKey::DType(*d),
            Lit::Device(d) => LitKey::Device(*d),
        }
    }
}

/// Turns the literal arguments of calls and launches into reads of slots
/// numbered from `first` on, one per distinct literal, which a run fills
/// once before its first step and never frees: a call then borrows every
/// argument from a slot. Returns the literals, in slot order.
pub(super) fn intern_call_literals(steps: &mut [Step], first: usize) -> Vec<Lit> {
    let mut lits = Vec::new();
    let mut index: HashMap<LitKey, usize> = HashMap::new();
    for step in steps {
        let (args, kwargs): (&mut [Operand], &mut KwOperands) = match &mut step.kind {
            StepKind::Triton { t, .. } => (&mut [], &mut t.kwargs),
            StepKind::KernelCall { c, .. } => (&mut c.args, &mut c.kwargs),
            StepKind::Extern(c) => (&mut c.args, &mut c.kwargs),
            _ => continue,
        };
        for o in args.iter_mut().chain(kwargs.values.iter_mut()) {
            if let Operand::Lit(l) = o {
                let i = *index.entry(LitKey::of(l)).or_insert_with(|| {
                    lits.push(l.clone());
                    lits.len() - 1
                });
                *o = Operand::Slot(first + i);
            }
        }
        kwargs.slots = args
            .iter()
            .chain(kwargs.values.iter())
            .map(|o| match o {
                Operand::Slot(s) => Some(*s),
                _ => None,
            })
            .collect();
    }
    lits
}
