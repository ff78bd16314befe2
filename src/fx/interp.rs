//! The FX interpreter: compiles an [`fx::Graph`](super::Graph) into a flat
//! [`Plan`] (values in numbered slots, not name lookups; every slot freed
//! right after its last use) and runs the plan on a [`Backend`].

use super::{Arg, Graph, NodeId, Op, Placeholder, Scalar, SymOp, Val};
use crate::exec::{
    ArgList, Backend, ExecError, ExpectedLayout, ExternCall, KernelLaunch, Kwargs, ScalarRequest, ScalarValue,
    TensorSpec, Value,
};
use crate::ir::{DType, Device, DeviceType, KernelDef, KernelName, Layout, Program, SymbolDecl, ValueRange};
use crate::sym::{Bindings, SymExpr, Symbol};
use indexmap::IndexMap;
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Integers read for one step (sizes, strides, a grid): inline up to the
/// ranks that occur in practice, so reading them does not allocate.
type Ints = SmallVec<[i64; 8]>;

/// A literal operand.
#[derive(Clone, Debug, PartialEq)]
enum Lit {
    Int(i64),
    Float(f64),
    Bool(bool),
    None,
    Str(Box<str>),
    DType(DType),
    Device(Device),
}

/// Where a step reads a value.
#[derive(Clone, Debug, PartialEq)]
enum Operand {
    Slot(usize),
    Lit(Lit),
    List(Box<[Operand]>),
}

#[derive(Clone, Debug)]
enum StepKind {
    Input(usize),
    Constant(String),
    EmptyStrided {
        size: OperandList,
        stride: OperandList,
        dtype: DType,
        device: DeviceType,
    },
    // Variants with large operands are boxed, so a step stays small.
    AsStrided(Box<AsStridedStep>),
    Triton {
        t: Box<TritonStep>,
        /// What a launch reads, packed into plan tables (set by the last
        /// compile pass; `None` when an operand is a list): a launch then
        /// reads no heap block of its own.
        packed: Option<PackedLaunch>,
    },
    KernelCall {
        c: Box<CallStep>,
        /// As for `Triton` (no grid).
        packed: Option<PackedLaunch>,
    },
    Extern(Box<ExternStep>),
    SymSize {
        tensor: usize,
        dim: i64,
    },
    SymStride {
        tensor: usize,
        dim: i64,
    },
    SymStorageOffset {
        tensor: usize,
    },
    GetItem {
        source: usize,
        index: Operand,
    },
    InnerTensor {
        source: usize,
        attr: String,
    },
    Item {
        tensor: usize,
        symbol: Option<Symbol>,
        multiplier: i64,
    },
    /// Operands inline (most ops are binary): no heap read per step.
    Sym {
        op: SymOp,
        args: SmallVec<[Operand; 2]>,
    },
    AssertScalar {
        cond: Operand,
        message: Box<str>,
    },
    AssertSizeStride {
        tensor: usize,
        size: OperandList,
        stride: OperandList,
        context: Option<Box<str>>,
    },
    AssertAlignment {
        tensor: usize,
        alignment: u32,
    },
    Cond(Box<CondStep>),
    While(Box<WhileStep>),
}

/// Operands of a step: owned while the plan is compiled (the slot passes
/// renumber them), then packed into [`Plan::operands`], which a run reads in
/// step order instead of one heap block per step.
#[derive(Clone, Debug)]
enum OperandList {
    Owned(Box<[Operand]>),
    Packed(std::ops::Range<u32>),
}

impl OperandList {
    /// The operands while compiling (none once packed: packing is the last
    /// pass).
    fn owned(&self) -> &[Operand] {
        match self {
            OperandList::Owned(xs) => xs,
            OperandList::Packed(_) => &[],
        }
    }

    fn owned_mut(&mut self) -> &mut [Operand] {
        match self {
            OperandList::Owned(xs) => xs,
            OperandList::Packed(_) => &mut [],
        }
    }

    /// Moves owned operands to the end of `pool`; `None` when the pool
    /// outgrows `u32` indices.
    fn pack(&mut self, pool: &mut Vec<Operand>) -> Option<()> {
        if let OperandList::Owned(xs) = self {
            let start = u32::try_from(pool.len()).ok()?;
            pool.extend(std::mem::take(xs).into_vec());
            *self = OperandList::Packed(start..u32::try_from(pool.len()).ok()?);
        }
        Some(())
    }
}

#[derive(Clone, Debug)]
struct AsStridedStep {
    base: usize,
    size: Vec<Operand>,
    stride: Vec<Operand>,
    offset: Operand,
}

/// A launch packed into plan tables: `grid` is the first of three entries
/// of [`Plan::operands`] (Triton launches), `args..args_end` a range of
/// [`Plan::call_slots`] and [`Plan::call_names`]: `positional` arguments,
/// then keyword ones.
#[derive(Clone, Copy, Debug)]
struct PackedLaunch {
    /// Index in the program's kernel table (`u32::MAX`: not defined).
    kernel: u32,
    grid: u32,
    args: u32,
    positional: u32,
    args_end: u32,
}

#[derive(Clone, Debug)]
struct TritonStep {
    kernel: KernelRef,
    grid: [Operand; 3],
    kwargs: KwOperands,
}

#[derive(Clone, Debug)]
struct CallStep {
    kernel: KernelRef,
    args: Vec<Operand>,
    kwargs: KwOperands,
}

#[derive(Clone, Debug)]
struct ExternStep {
    target: String,
    args: Vec<Operand>,
    kwargs: KwOperands,
    /// The declared layout of a tensor result (here, not only in the
    /// step's [`StepInfo`], so a call does not read that cold table).
    layout: Option<Layout>,
}

#[derive(Clone, Debug)]
struct CondStep {
    pred: Operand,
    true_graph: String,
    false_graph: String,
    operands: Vec<Operand>,
}

#[derive(Clone, Debug)]
struct WhileStep {
    cond_graph: String,
    body_graph: String,
    carried: Vec<Operand>,
    additional: Vec<Operand>,
}

/// Keyword operands of a call: names and operands in parallel, in the
/// program's order (the names are handed to the backend as they are).
#[derive(Clone, Debug)]
struct KwOperands {
    names: Box<[String]>,
    values: Box<[Operand]>,
    /// When every operand of the call (positional, then these) reads a slot:
    /// the slots, so the call borrows its arguments straight from them.
    slots: Option<Box<[usize]>>,
}

/// A kernel as resolved at compile time: its index in the program's kernel
/// table, or `None` when the program does not define it (reported when the
/// step runs, as before compilation resolved names).
#[derive(Clone, Debug)]
struct KernelRef {
    name: KernelName,
    index: Option<usize>,
}

/// A symbol a step binds, with its declared value range (looked up once, at
/// compile time).
#[derive(Clone, Debug)]
struct Bind {
    symbol: Symbol,
    range: Option<ValueRange>,
}

/// What the run loop reads for every step. Kept small and free of
/// per-step heap data on the common path: the slots a step frees are a range
/// of [`Plan::frees`] (one vector in step order, read sequentially), and
/// what only some steps or errors need is in [`StepInfo`].
#[derive(Clone, Debug)]
struct Step {
    kind: StepKind,
    out: Option<usize>,
    /// The symbols the step binds: a range of [`Plan::binds`].
    binds: std::ops::Range<u32>,
    /// The slots the step frees after it runs: a range of [`Plan::frees`].
    frees: std::ops::Range<u32>,
}

/// The parts of a step the run loop rarely reads: the node's name (for
/// messages) and its declared value.
#[derive(Clone, Debug)]
struct StepInfo {
    node: String,
    val: Option<Val>,
}

/// A compiled graph, ready to run any number of times.
#[derive(Clone, Debug)]
pub struct Plan {
    graph: String,
    steps: Vec<Step>,
    /// `infos[i]` belongs to `steps[i]`.
    infos: Vec<StepInfo>,
    /// The slots each step frees after it runs (`Step::frees` indexes this).
    frees: Vec<usize>,
    /// The symbols each step binds, in step order (`Step::binds` indexes
    /// this).
    binds: Vec<Bind>,
    /// Packed operand lists ([`OperandList::Packed`] indexes this) and
    /// launch grids ([`PackedLaunch::grid`]).
    operands: Vec<Operand>,
    /// The slots packed launches read their arguments from, in order.
    call_slots: Vec<usize>,
    /// The parameter names of those arguments (parallel to `call_slots`).
    call_names: Vec<String>,
    slots: usize,
    inputs: Vec<(String, Placeholder)>,
    outputs: Vec<Operand>,
    subplans: HashMap<String, Plan>,
    symbols: Arc<IndexMap<Symbol, SymbolDecl>>,
    kernels: Arc<IndexMap<KernelName, KernelDef>>,
    /// Symbols bound by this plan's steps (capacity for the run's bindings).
    bind_count: usize,
    /// Literal call arguments: `lits[i]` is in slot `slots + i` for the
    /// whole run (see [`intern_call_literals`]).
    lits: Vec<Lit>,
}

/// What a run returns.
#[derive(Clone, Debug)]
pub struct RunOutput<T> {
    /// The graph's outputs.
    pub outputs: Vec<Value<T>>,
    /// Every symbol bound during the run (main graph), with its value.
    pub symbols: Bindings,
}

/// Compiles `graph` (lowered from `program`) into a plan.
pub fn compile(graph: &Graph, program: &Program) -> Result<Plan, ExecError> {
    let symbols = Arc::new(program.symbols.clone());
    let kernels = Arc::new(program.kernels.clone());
    compile_graph(graph, "main", &symbols, &kernels)
}

fn compile_graph(
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
    // Plan tables are indexed with `u32` ranges (keeps steps small).
    let too_large = || ExecError::Input(format!("graph `{name}` is too large to compile"));
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for (id, node) in graph.iter() {
        let slot = |n: NodeId| {
            slot_of
                .get(&n)
                .copied()
                .ok_or_else(|| err(&node.name, format!("operand `{}` has no value", graph.node(n).name)))
        };
        let operand = |a: &Arg| to_operand(a, &slot_of).ok_or_else(|| err(&node.name, "operand has no value".into()));
        let operands = |xs: &[Arg]| xs.iter().map(operand).collect::<Result<Vec<_>, _>>();
        let kwmap = |kw: &IndexMap<String, Arg>| -> Result<KwOperands, ExecError> {
            Ok(KwOperands {
                names: kw.keys().cloned().collect(),
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
                inputs.push((node.name.clone(), p.clone()));
                StepKind::Input(inputs.len() - 1)
            }
            Op::Constant { name } => StepKind::Constant(name.clone()),
            Op::EmptyStrided {
                size,
                stride,
                dtype,
                device,
            } => StepKind::EmptyStrided {
                size: OperandList::Owned(operands(size)?.into()),
                stride: OperandList::Owned(operands(stride)?.into()),
                dtype: *dtype,
                device: *device,
            },
            Op::AsStrided {
                base,
                size,
                stride,
                offset,
            } => StepKind::AsStrided(Box::new(AsStridedStep {
                base: slot(*base)?,
                size: operands(size)?,
                stride: operands(stride)?,
                offset: operand(offset)?,
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
                args: operands(args)?,
                kwargs: kwmap(kwargs)?,
                layout: match &node.val {
                    Some(Val::Tensor(layout)) => Some(layout.clone()),
                    _ => None,
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
            Op::AssertSizeStride {
                tensor,
                size,
                stride,
                context,
            } => StepKind::AssertSizeStride {
                tensor: slot(*tensor)?,
                size: OperandList::Owned(operands(size)?.into()),
                stride: OperandList::Owned(operands(stride)?.into()),
                context: context.as_deref().map(Box::from),
            },
            Op::AssertAlignment { tensor, alignment } => StepKind::AssertAlignment {
                tensor: slot(*tensor)?,
                alignment: *alignment,
            },
            Op::Cond {
                pred,
                true_graph,
                false_graph,
                operands: ops,
            } => StepKind::Cond(Box::new(CondStep {
                pred: operand(pred)?,
                true_graph: sub(*true_graph)?,
                false_graph: sub(*false_graph)?,
                operands: operands(ops)?,
            })),
            Op::WhileLoop {
                cond_graph,
                body_graph,
                carried,
                additional,
            } => StepKind::While(Box::new(WhileStep {
                cond_graph: sub(*cond_graph)?,
                body_graph: sub(*body_graph)?,
                carried: operands(carried)?,
                additional: operands(additional)?,
            })),
        };
        infos.push(StepInfo {
            node: node.name.clone(),
            val: node.val.clone(),
        });
        let first_bind = u32::try_from(binds.len()).map_err(|_| too_large())?;
        binds.extend(node.binds.iter().map(|s| Bind {
            symbol: s.clone(),
            range: symbols.get(s).map(|d| d.range),
        }));
        steps.push(Step {
            kind,
            out: slot_of.get(&id).copied(),
            binds: first_bind..u32::try_from(binds.len()).map_err(|_| too_large())?,
            frees: 0..0,
        });
    }
    let mut step_frees = plan_frees(&steps, &outputs, slot_of.len());
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
    let bind_count = binds.len();

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
        bind_count,
        lits,
    })
}

fn to_operand(a: &Arg, slots: &HashMap<NodeId, usize>) -> Option<Operand> {
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

fn for_each_slot(o: &Operand, f: &mut dyn FnMut(usize)) {
    match o {
        Operand::Slot(s) => f(*s),
        Operand::List(items) => items.iter().for_each(|i| for_each_slot(i, f)),
        Operand::Lit(_) => {}
    }
}

fn step_reads(kind: &StepKind, f: &mut dyn FnMut(usize)) {
    let many = |xs: &[Operand], f: &mut dyn FnMut(usize)| xs.iter().for_each(|x| for_each_slot(x, f));
    match kind {
        StepKind::Input(_) | StepKind::Constant(_) => {}
        StepKind::EmptyStrided { size, stride, .. } => {
            many(size.owned(), f);
            many(stride.owned(), f);
        }
        StepKind::AsStrided(a) => {
            let AsStridedStep {
                base,
                size,
                stride,
                offset,
            } = &**a;
            f(*base);
            many(size, f);
            many(stride, f);
            for_each_slot(offset, f);
        }
        StepKind::Triton { t, .. } => {
            many(&t.grid, f);
            many(&t.kwargs.values, f);
        }
        StepKind::KernelCall { c, .. } => {
            many(&c.args, f);
            many(&c.kwargs.values, f);
        }
        StepKind::Extern(c) => {
            many(&c.args, f);
            many(&c.kwargs.values, f);
        }
        StepKind::SymSize { tensor, .. }
        | StepKind::SymStride { tensor, .. }
        | StepKind::SymStorageOffset { tensor }
        | StepKind::Item { tensor, .. }
        | StepKind::AssertAlignment { tensor, .. } => f(*tensor),
        StepKind::GetItem { source, index } => {
            f(*source);
            for_each_slot(index, f);
        }
        StepKind::InnerTensor { source, .. } => f(*source),
        StepKind::Sym { args, .. } => many(args, f),
        StepKind::AssertScalar { cond, .. } => for_each_slot(cond, f),
        StepKind::AssertSizeStride {
            tensor, size, stride, ..
        } => {
            f(*tensor);
            many(size.owned(), f);
            many(stride.owned(), f);
        }
        StepKind::Cond(c) => {
            for_each_slot(&c.pred, f);
            many(&c.operands, f);
        }
        StepKind::While(w) => {
            many(&w.carried, f);
            many(&w.additional, f);
        }
    }
}

/// Liveness: each slot is freed after the step that reads it last (or right
/// after it is produced when nothing reads it); outputs are never freed.
/// Returns, for each step, the slots it frees.
fn plan_frees(steps: &[Step], outputs: &[Operand], slots: usize) -> Vec<Vec<usize>> {
    let mut last: Vec<Option<usize>> = vec![None; slots];
    for (i, s) in steps.iter().enumerate() {
        if let Some(o) = s.out {
            if let Some(l) = last.get_mut(o) {
                *l = Some(i);
            }
        }
        step_reads(&s.kind, &mut |slot| {
            if let Some(l) = last.get_mut(slot) {
                *l = Some(i);
            }
        });
    }
    let mut frees = vec![Vec::new(); steps.len()];
    let mut keep = vec![false; slots];
    for o in outputs {
        for_each_slot(o, &mut |s| {
            if let Some(k) = keep.get_mut(s) {
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

fn for_each_slot_mut(o: &mut Operand, f: &mut dyn FnMut(&mut usize)) {
    match o {
        Operand::Slot(s) => f(s),
        Operand::List(items) => items.iter_mut().for_each(|i| for_each_slot_mut(i, f)),
        Operand::Lit(_) => {}
    }
}

/// Calls `f` on every slot a step reads, mutably (for renumbering).
fn step_reads_mut(kind: &mut StepKind, f: &mut dyn FnMut(&mut usize)) {
    fn many(xs: &mut [Operand], f: &mut dyn FnMut(&mut usize)) {
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
        | StepKind::AssertAlignment { tensor, .. } => f(tensor),
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
        StepKind::Cond(c) => {
            for_each_slot_mut(&mut c.pred, f);
            many(&mut c.operands, f);
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
fn reuse_slots(steps: &mut [Step], frees: &mut [Vec<usize>], outputs: &mut [Operand], node_slots: usize) -> usize {
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

impl Plan {
    /// Number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// `true` when the plan has no steps.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Input names, in order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Runs the plan. `inputs` are in placeholder order (tensors for tensor
    /// inputs, `Value::Int` for symbol inputs); `constants` by name.
    pub fn run<B: Backend>(
        &self,
        backend: &mut B,
        inputs: Vec<Value<B::Tensor>>,
        constants: &IndexMap<String, B::Tensor>,
    ) -> Result<RunOutput<B::Tensor>, ExecError> {
        let mut env = Bindings::with_capacity(self.bind_count);
        let outputs = self.exec(backend, inputs, constants, &mut env)?;
        Ok(RunOutput { outputs, symbols: env })
    }

    fn exec<B: Backend>(
        &self,
        backend: &mut B,
        inputs: Vec<Value<B::Tensor>>,
        constants: &IndexMap<String, B::Tensor>,
        env: &mut Bindings,
    ) -> Result<Vec<Value<B::Tensor>>, ExecError> {
        if inputs.len() != self.inputs.len() {
            return Err(ExecError::Input(format!(
                "graph `{}` takes {} inputs ({}), got {}",
                self.graph,
                self.inputs.len(),
                self.input_names().join(", "),
                inputs.len()
            )));
        }
        let mut inputs: Vec<Option<Value<B::Tensor>>> = inputs.into_iter().map(Some).collect();
        let mut slots: Vec<Option<Value<B::Tensor>>> = vec![None; self.slots + self.lits.len()];
        for (slot, lit) in slots.iter_mut().skip(self.slots).zip(&self.lits) {
            *slot = Some(lit_value(lit));
        }
        // The layout `empty_strided` steps fill in (its vectors are reused:
        // no allocation per step).
        let mut layout = TensorSpec::contiguous(DType::Float32, Device::cpu(), &[]);
        // The declared layout of an extern call's result, evaluated (reused
        // likewise).
        let mut exp_buf = ExpectedLayout {
            dtype: DType::Float32,
            device: Device::cpu(),
            size: Vec::new(),
            stride: Vec::new(),
            offset: None,
        };
        for (step, info) in self.steps.iter().zip(&self.infos) {
            let value = self
                .step(
                    step,
                    info,
                    backend,
                    &mut inputs,
                    constants,
                    &slots,
                    &mut layout,
                    &mut exp_buf,
                    env,
                )
                .map_err(|e| ExecError::AtNode {
                    graph: self.graph.clone(),
                    node: info.node.clone(),
                    source: Box::new(e),
                })?;
            if let (Some(v), false) = (&value, step.binds.is_empty()) {
                let binds = self.binds.get(step.binds.start as usize..step.binds.end as usize);
                for bind in binds.unwrap_or_default() {
                    let x = match v.as_int() {
                        Some(x) if bind.range.is_none_or(|r| r.contains(x)) => x,
                        _ => return Err(self.bind_error(info, bind, v)),
                    };
                    env.insert(bind.symbol.clone(), x);
                }
            }
            if let (Some(o), Some(v)) = (step.out, value) {
                if let Some(slot) = slots.get_mut(o) {
                    // The slot is empty in a well-formed plan (its previous
                    // value was freed): test inline, drop only when it is not.
                    if let Some(old) = slot.replace(v) {
                        drop(old);
                    }
                }
            }
            for f in self
                .frees
                .get(step.frees.start as usize..step.frees.end as usize)
                .unwrap_or_default()
            {
                match slots.get_mut(*f).and_then(Option::take) {
                    Some(Value::Tensor(t)) => backend.free(t),
                    Some(v @ (Value::List(_) | Value::Dict(_))) => release(backend, v),
                    _ => {}
                }
            }
        }
        self.outputs.iter().map(|o| read(o, &slots)).collect()
    }

    // The run loop's state is passed piecewise (not bundled in a struct) so the
    // borrow of `slots` stays shared while `inputs` is taken from.
    #[allow(clippy::too_many_arguments)]
    fn step<B: Backend>(
        &self,
        step: &Step,
        info: &StepInfo,
        backend: &mut B,
        inputs: &mut [Option<Value<B::Tensor>>],
        constants: &IndexMap<String, B::Tensor>,
        slots: &[Option<Value<B::Tensor>>],
        layout: &mut TensorSpec,
        exp_buf: &mut ExpectedLayout,
        env: &mut Bindings,
    ) -> Result<Option<Value<B::Tensor>>, ExecError> {
        let rd = |o: &Operand| read(o, slots);
        let int = |o: &Operand| read_int(o, slots);
        let small_ints = |xs: &[Operand]| xs.iter().map(int).collect::<Result<Ints, _>>();
        let tensor = |s: usize| -> Result<&B::Tensor, ExecError> {
            match slot(s, slots)? {
                Value::Tensor(t) => Ok(t),
                other => Err(ExecError::Type(format!("expected a tensor, got {}", other.kind()))),
            }
        };
        Ok(Some(match &step.kind {
            StepKind::Input(i) => {
                let v = inputs
                    .get_mut(*i)
                    .and_then(Option::take)
                    .ok_or_else(|| ExecError::Input("input used twice".into()))?;
                if let (Some(Val::Tensor(layout)), Value::Tensor(t)) = (&info.val, &v) {
                    let spec = backend.spec(t);
                    if spec.dtype != layout.dtype || spec.size.len() != layout.size.len() {
                        return Err(ExecError::Input(format!(
                            "input `{}` is {}{:?}, the graph declares {layout}",
                            info.node, spec.dtype, spec.size
                        )));
                    }
                }
                v
            }
            StepKind::Constant(name) => Value::Tensor(
                constants
                    .get(name)
                    .cloned()
                    .ok_or_else(|| ExecError::Input(format!("constant `{name}` was not supplied")))?,
            ),
            StepKind::EmptyStrided {
                size,
                stride,
                dtype,
                device,
            } => {
                layout.dtype = *dtype;
                layout.device = Device {
                    kind: *device,
                    index: None,
                };
                layout.offset = 0;
                layout.size.clear();
                for o in self.list(size) {
                    layout.size.push(int(o)?);
                }
                layout.stride.clear();
                for o in self.list(stride) {
                    layout.stride.push(int(o)?);
                }
                Value::Tensor(backend.allocate(layout)?)
            }
            StepKind::AsStrided(a) => {
                let AsStridedStep {
                    base,
                    size,
                    stride,
                    offset,
                } = &**a;
                let b = tensor(*base)?;
                Value::Tensor(backend.view(b, &small_ints(size)?, &small_ints(stride)?, int(offset)?)?)
            }
            StepKind::Triton { packed: Some(p), t } => {
                let def = self.kernel_at(p, &t.kernel)?;
                let g = match self.operands.get(p.grid as usize..p.grid as usize + 3) {
                    Some([a, b, c]) => [int(a)?, int(b)?, int(c)?],
                    _ => return Err(unpacked()),
                };
                self.launch_packed(p, def, Some(g), backend, slots)?;
                Value::None
            }
            StepKind::KernelCall { packed: Some(p), c } => {
                let def = self.kernel_at(p, &c.kernel)?;
                self.launch_packed(p, def, None, backend, slots)?;
                Value::None
            }
            StepKind::Triton { t, packed: None } => {
                let TritonStep { kernel, grid, kwargs } = &**t;
                let def = self.kernel(kernel)?;
                let g = [int(&grid[0])?, int(&grid[1])?, int(&grid[2])?];
                with_call(&[], kwargs, slots, |args, kwargs| {
                    backend.launch(KernelLaunch {
                        kernel: def,
                        grid: Some(g),
                        args,
                        kwargs,
                    })
                })?;
                Value::None
            }
            StepKind::KernelCall { c, packed: None } => {
                let CallStep { kernel, args, kwargs } = &**c;
                let def = self.kernel(kernel)?;
                with_call(args, kwargs, slots, |args, kwargs| {
                    backend.launch(KernelLaunch {
                        kernel: def,
                        grid: None,
                        args,
                        kwargs,
                    })
                })?;
                Value::None
            }
            StepKind::Extern(c) => with_call(&c.args, &c.kwargs, slots, |args, kwargs| {
                let expected = match &c.layout {
                    Some(layout) => {
                        self.eval_layout_into(layout, backend, env, exp_buf)?;
                        Some(&*exp_buf)
                    }
                    _ => None,
                };
                let result = backend.call_extern(ExternCall {
                    op: &c.target,
                    args,
                    kwargs,
                    expected,
                })?;
                if let (Some(exp), Value::Tensor(t)) = (expected, &result) {
                    check_layout(backend.spec(t), exp)?;
                }
                Ok(result)
            })?,
            StepKind::SymSize { tensor: t, dim } => Value::Int(dim_of(&backend.spec(tensor(*t)?).size, *dim, "size")?),
            StepKind::SymStride { tensor: t, dim } => {
                Value::Int(dim_of(&backend.spec(tensor(*t)?).stride, *dim, "stride")?)
            }
            StepKind::SymStorageOffset { tensor: t } => Value::Int(backend.spec(tensor(*t)?).offset),
            StepKind::GetItem { source, index } => {
                let src = slot(*source, slots)?;
                let idx = read_ref(index, slots)?;
                match (src, idx.as_ref()) {
                    (Value::List(items), Value::Int(i)) => {
                        let n = items.len() as i64;
                        let k = if *i < 0 { i + n } else { *i };
                        items
                            .get(usize::try_from(k).unwrap_or(usize::MAX))
                            .cloned()
                            .ok_or_else(|| ExecError::Type(format!("index {i} is out of range for {n} outputs")))?
                    }
                    (Value::Dict(items), Value::Str(k)) => items
                        .get(k)
                        .cloned()
                        .ok_or_else(|| ExecError::Type(format!("no output named '{k}'")))?,
                    (Value::Opaque, _) => match &info.val {
                        Some(Val::Multi) => Value::Opaque,
                        Some(Val::Tensor(declared)) => {
                            // Evaluated into the reused buffers: no allocation
                            // here.
                            self.eval_layout_into(declared, backend, env, exp_buf)?;
                            let unknown =
                                || ExecError::NoValue("element layout depends on a symbol with no hint".into());
                            layout.dtype = exp_buf.dtype;
                            layout.device = exp_buf.device;
                            layout.size.clear();
                            for d in &exp_buf.size {
                                layout.size.push(d.ok_or_else(unknown)?);
                            }
                            layout.stride.clear();
                            for d in &exp_buf.stride {
                                layout.stride.push(d.ok_or_else(unknown)?);
                            }
                            layout.offset = exp_buf.offset.ok_or_else(unknown)?;
                            Value::Tensor(backend.allocate(layout)?)
                        }
                        _ => {
                            return Err(ExecError::NoValue(
                                "element of a multi-output value without a declared layout".into(),
                            ))
                        }
                    },
                    (s, i) => {
                        return Err(ExecError::Type(format!(
                            "cannot index a {} with a {}",
                            s.kind(),
                            i.kind()
                        )))
                    }
                }
            }
            StepKind::InnerTensor { source, attr } => match slot(*source, slots)? {
                Value::Dict(items) => items
                    .get(attr)
                    .cloned()
                    .ok_or_else(|| ExecError::Type(format!("value has no inner tensor `{attr}`")))?,
                other => {
                    return Err(ExecError::Unsupported(format!(
                        "inner tensor `.{attr}` of a {}: the {} backend has no tensor subclasses",
                        other.kind(),
                        backend.name()
                    )))
                }
            },
            StepKind::Item {
                tensor: t,
                symbol,
                multiplier,
            } => {
                let t = tensor(*t)?;
                let decl = symbol.as_ref().and_then(|s| self.symbols.get(s));
                let req = ScalarRequest {
                    symbol: symbol.as_ref(),
                    decl,
                    multiplier: *multiplier,
                };
                match backend.read_scalar(t, &req)? {
                    ScalarValue::Int(v) => Value::Int(v),
                    ScalarValue::Bool(b) => Value::Bool(b),
                    ScalarValue::Float(f) => Value::Float(f),
                }
            }
            StepKind::Sym { op, args } => {
                let mut vals: SmallVec<[Scalar; 4]> = SmallVec::new();
                for a in args {
                    vals.push(read_scalar(a, slots, *op)?);
                }
                match op.eval(&vals).map_err(|e| ExecError::Type(e.to_string()))? {
                    Scalar::Int(v) => Value::Int(v),
                    Scalar::Bool(b) => Value::Bool(b),
                }
            }
            StepKind::AssertScalar { cond, message } => {
                if !truthy(read_ref(cond, slots)?.as_ref())? {
                    return Err(ExecError::Assert(message.to_string()));
                }
                Value::None
            }
            StepKind::AssertSizeStride {
                tensor: t,
                size,
                stride,
                context,
            } => {
                let spec = backend.spec(tensor(*t)?);
                let (size, stride) = (small_ints(self.list(size))?, small_ints(self.list(stride))?);
                check_sizes_strides(
                    spec,
                    spec.dtype,
                    size.iter().copied().map(Some),
                    stride.iter().copied().map(Some),
                )
                .map_err(|e| match context {
                    Some(c) => ExecError::Assert(format!("{e} ({c})")),
                    None => e,
                })?;
                Value::None
            }
            StepKind::AssertAlignment { tensor: t, alignment } => {
                backend.check_alignment(tensor(*t)?, *alignment)?;
                Value::None
            }
            StepKind::Cond(c) => {
                let CondStep {
                    pred,
                    true_graph,
                    false_graph,
                    operands,
                } = &**c;
                let p = match rd(pred)? {
                    Value::Tensor(t) => scalar_truthy(backend.read_scalar(
                        &t,
                        &ScalarRequest {
                            symbol: None,
                            decl: None,
                            multiplier: 1,
                        },
                    )?),
                    other => truthy(&other)?,
                };
                let args = operands.iter().map(rd).collect::<Result<Vec<_>, _>>()?;
                let sub = self.subplan(if p { true_graph } else { false_graph })?;
                let mut sub_env = env.clone();
                Value::List(sub.exec(backend, args, constants, &mut sub_env)?)
            }
            StepKind::While(w) => {
                let WhileStep {
                    cond_graph,
                    body_graph,
                    carried,
                    additional,
                } = &**w;
                let mut state = carried.iter().map(rd).collect::<Result<Vec<_>, _>>()?;
                let extra = additional.iter().map(rd).collect::<Result<Vec<_>, _>>()?;
                let cond = self.subplan(cond_graph)?;
                let body = self.subplan(body_graph)?;
                let fuel = backend.limits().loop_fuel;
                let mut iterations: u64 = 0;
                loop {
                    if iterations >= fuel {
                        crate::Limits::check(
                            crate::Limit::LoopFuel,
                            iterations + 1,
                            fuel,
                            format!("while_loop `{cond_graph}`/`{body_graph}` iterations"),
                        )?;
                    }
                    iterations += 1;
                    let args: Vec<_> = state.iter().cloned().chain(extra.iter().cloned()).collect();
                    let mut sub_env = env.clone();
                    let c = cond.exec(backend, args.clone(), constants, &mut sub_env)?;
                    let go = match c.first() {
                        Some(Value::Tensor(t)) => scalar_truthy(backend.read_scalar(
                            t,
                            &ScalarRequest {
                                symbol: None,
                                decl: None,
                                multiplier: 1,
                            },
                        )?),
                        Some(other) => truthy(other)?,
                        None => {
                            return Err(ExecError::Type(format!(
                                "loop condition `{cond_graph}` returned nothing"
                            )))
                        }
                    };
                    if !go {
                        break;
                    }
                    let mut body_env = env.clone();
                    let next = body.exec(backend, args, constants, &mut body_env)?;
                    if next.len() != state.len() {
                        return Err(ExecError::Type(format!(
                            "loop body `{body_graph}` returned {} values for {} carried",
                            next.len(),
                            state.len()
                        )));
                    }
                    state = next;
                }
                Value::List(state)
            }
        }))
    }

    /// The kernel of a packed launch.
    #[inline(always)]
    fn kernel_at(&self, p: &PackedLaunch, kernel: &KernelRef) -> Result<&KernelDef, ExecError> {
        match self.kernels.get_index(p.kernel as usize) {
            Some((_, def)) => Ok(def),
            None => self.kernel(kernel),
        }
    }

    /// Launches a packed launch, its arguments borrowed from the slots.
    #[inline(always)]
    fn launch_packed<B: Backend>(
        &self,
        p: &PackedLaunch,
        kernel: &KernelDef,
        grid: Option<[i64; 3]>,
        backend: &mut B,
        slots: &[Option<Value<B::Tensor>>],
    ) -> Result<(), ExecError> {
        let range = p.args as usize..p.args_end as usize;
        let (Some(index), Some(names)) = (self.call_slots.get(range.clone()), self.call_names.get(range)) else {
            return Err(unpacked());
        };
        for s in index {
            slot(*s, slots)?;
        }
        let split = (p.positional as usize).min(index.len());
        let (pos, kw) = index.split_at(split);
        backend.launch(KernelLaunch {
            kernel,
            grid,
            args: ArgList::slots(pos, slots),
            kwargs: Kwargs::slots(names.get(split..).unwrap_or_default(), kw, slots),
        })
    }

    /// The operands of a list (packed ones from [`Plan::operands`]).
    #[inline(always)]
    fn list<'a>(&'a self, list: &'a OperandList) -> &'a [Operand] {
        match list {
            OperandList::Packed(r) => self.operands.get(r.start as usize..r.end as usize).unwrap_or_default(),
            OperandList::Owned(xs) => xs,
        }
    }

    /// Why `value` cannot bind `bind` (not an integer, or out of the
    /// symbol's range).
    #[cold]
    #[inline(never)]
    fn bind_error<T>(&self, info: &StepInfo, bind: &Bind, value: &Value<T>) -> ExecError {
        let source = match (value.as_int(), bind.range) {
            (None, _) => ExecError::Type(format!("symbol `{}` bound to a {}", bind.symbol, value.kind())),
            (Some(x), Some(range)) => ExecError::OutOfRange {
                symbol: bind.symbol.clone(),
                value: x,
                range,
            },
            (Some(x), None) => ExecError::Input(format!("symbol `{}` cannot be bound to {x}", bind.symbol)),
        };
        ExecError::AtNode {
            graph: self.graph.clone(),
            node: info.node.clone(),
            source: Box::new(source),
        }
    }

    fn kernel(&self, kernel: &KernelRef) -> Result<&KernelDef, ExecError> {
        kernel
            .index
            .and_then(|i| self.kernels.get_index(i))
            .map(|(_, def)| def)
            .ok_or_else(|| ExecError::Input(format!("kernel `{}` is not defined", kernel.name)))
    }

    fn subplan(&self, name: &str) -> Result<&Plan, ExecError> {
        self.subplans
            .get(name)
            .ok_or_else(|| ExecError::Input(format!("subgraph `{name}` is not defined")))
    }

    /// The declared layout of a result, evaluated into `out` (its vectors
    /// reused) with the bound symbols, and backend hints for unbound ones;
    /// still-unknown entries are `None`.
    fn eval_layout_into<B: Backend>(
        &self,
        layout: &Layout,
        backend: &mut B,
        env: &Bindings,
        out: &mut ExpectedLayout,
    ) -> Result<(), ExecError> {
        let symbols = &self.symbols;
        let mut lookup = |s: &Symbol| env.get(s).copied().or_else(|| backend.hint(s, symbols.get(s)));
        out.dtype = layout.dtype;
        out.device = layout.device;
        out.size.clear();
        for e in &layout.size {
            out.size.push(eval_dim(e, &mut lookup)?);
        }
        out.stride.clear();
        for e in &layout.stride {
            out.stride.push(eval_dim(e, &mut lookup)?);
        }
        out.offset = eval_dim(&layout.offset, &mut lookup)?;
        Ok(())
    }
}

/// One entry of a layout: a literal integer directly, anything else through
/// [`crate::sym::eval::eval_int_with`] (`None` when a symbol has no value).
#[inline]
fn eval_dim(e: &SymExpr, lookup: &mut dyn FnMut(&Symbol) -> Option<i64>) -> Result<Option<i64>, ExecError> {
    use crate::sym::EvalError;
    if let SymExpr::Int(v) = e {
        return Ok(Some(*v));
    }
    match crate::sym::eval::eval_int_with(e, lookup) {
        Ok(v) => Ok(Some(v)),
        Err(EvalError::Unbound { .. }) => Ok(None),
        Err(EvalError::TypeMismatch { .. }) if e.is_boolean() => {
            Err(ExecError::Type(format!("`{e}` is boolean, not a size")))
        }
        Err(err) => Err(ExecError::Type(format!("evaluating `{e}`: {err}"))),
    }
}

#[inline(always)]
fn slot<T>(s: usize, slots: &[Option<Value<T>>]) -> Result<&Value<T>, ExecError> {
    match slots.get(s) {
        Some(Some(v)) => Ok(v),
        _ => Err(empty_slot(s)),
    }
}

#[cold]
#[inline(never)]
fn empty_slot(s: usize) -> ExecError {
    ExecError::Input(format!("slot {s} is empty (freed too early)"))
}

/// The kind of a literal, as [`Value::kind`] names it.
fn lit_kind(l: &Lit) -> &'static str {
    match l {
        Lit::Int(_) => "int",
        Lit::Float(_) => "float",
        Lit::Bool(_) => "bool",
        Lit::None => "None",
        Lit::Str(_) => "str",
        Lit::DType(_) => "dtype",
        Lit::Device(_) => "device",
    }
}

/// The kind of value an operand reads, for messages.
fn operand_kind<T>(o: &Operand, slots: &[Option<Value<T>>]) -> Result<&'static str, ExecError> {
    Ok(match o {
        Operand::Slot(s) => slot(*s, slots)?.kind(),
        Operand::Lit(l) => lit_kind(l),
        Operand::List(_) => "list",
    })
}

/// Reads an integer operand (booleans count as 0/1) without copying a value.
#[inline(always)]
fn read_int<T>(o: &Operand, slots: &[Option<Value<T>>]) -> Result<i64, ExecError> {
    let v = match o {
        Operand::Slot(s) => slots.get(*s).and_then(Option::as_ref).and_then(Value::as_int),
        Operand::Lit(Lit::Int(v)) => Some(*v),
        Operand::Lit(Lit::Bool(b)) => Some(*b as i64),
        Operand::Lit(_) | Operand::List(_) => None,
    };
    match v {
        Some(v) => Ok(v),
        None => Err(not_an_int(o, slots)),
    }
}

/// The error of [`read_int`] (an empty slot, or a value of another kind).
#[cold]
#[inline(never)]
fn not_an_int<T>(o: &Operand, slots: &[Option<Value<T>>]) -> ExecError {
    match operand_kind(o, slots) {
        Ok(kind) => ExecError::Type(format!("expected an integer, got {kind}")),
        Err(e) => e,
    }
}

/// Reads an operand of a [`SymOp`].
fn read_scalar<T>(o: &Operand, slots: &[Option<Value<T>>], op: SymOp) -> Result<Scalar, ExecError> {
    let v = match o {
        Operand::Slot(s) => match slot(*s, slots)? {
            Value::Int(v) => Some(Scalar::Int(*v)),
            Value::Bool(b) => Some(Scalar::Bool(*b)),
            _ => None,
        },
        Operand::Lit(Lit::Int(v)) => Some(Scalar::Int(*v)),
        Operand::Lit(Lit::Bool(b)) => Some(Scalar::Bool(*b)),
        Operand::Lit(_) | Operand::List(_) => None,
    };
    match v {
        Some(v) => Ok(v),
        None => Err(ExecError::Type(format!(
            "`{}` of a {}",
            op.node_name(),
            operand_kind(o, slots)?
        ))),
    }
}

/// Reads an operand, borrowing it when it is a slot's value.
fn read_ref<'a, T: Clone>(o: &Operand, slots: &'a [Option<Value<T>>]) -> Result<Cow<'a, Value<T>>, ExecError> {
    match o {
        Operand::Slot(s) => slot(*s, slots).map(Cow::Borrowed),
        _ => read(o, slots).map(Cow::Owned),
    }
}

/// Calls `f` with a call's positional and keyword arguments, borrowed:
/// values in slots by reference (no clone), literal and list operands
/// materialised for the call (and dropped after it). Operands are read in
/// order, so the first one that cannot be read is the one reported.
#[inline(always)]
fn with_call<T: Clone, R>(
    args: &[Operand],
    kwargs: &KwOperands,
    slots: &[Option<Value<T>>],
    f: impl FnOnce(ArgList<'_, T>, Kwargs<'_, T>) -> Result<R, ExecError>,
) -> Result<R, ExecError> {
    // Literals were interned into slots at compile time, so unless an
    // operand is a list the call reads slots only.
    let Some(index) = &kwargs.slots else {
        return with_call_owned(args, kwargs, slots, f);
    };
    for s in index.iter() {
        slot(*s, slots)?;
    }
    let (a, kw) = index.split_at(args.len().min(index.len()));
    f(ArgList::slots(a, slots), Kwargs::slots(&kwargs.names, kw, slots))
}

/// [`with_call`] for calls with list operands.
#[inline(never)]
fn with_call_owned<T: Clone, R>(
    args: &[Operand],
    kwargs: &KwOperands,
    slots: &[Option<Value<T>>],
    f: impl FnOnce(ArgList<'_, T>, Kwargs<'_, T>) -> Result<R, ExecError>,
) -> Result<R, ExecError> {
    let operands = || args.iter().chain(kwargs.values.iter());
    let mut owned: SmallVec<[Value<T>; 4]> = SmallVec::new();
    for o in operands() {
        match o {
            Operand::Slot(s) => {
                slot(*s, slots)?;
            }
            _ => owned.push(read(o, slots)?),
        }
    }
    let mut refs: SmallVec<[&Value<T>; 32]> = SmallVec::new();
    let mut next_owned = owned.iter();
    for o in operands() {
        refs.push(match o {
            Operand::Slot(s) => slot(*s, slots)?,
            _ => next_owned
                .next()
                .ok_or_else(|| ExecError::Input("call operand was not read".into()))?,
        });
    }
    let (a, kw) = refs.split_at(args.len().min(refs.len()));
    f(ArgList::refs(a), Kwargs::new(&kwargs.names, kw))
}

fn read<T: Clone>(o: &Operand, slots: &[Option<Value<T>>]) -> Result<Value<T>, ExecError> {
    Ok(match o {
        Operand::Slot(s) => slot(*s, slots)?.clone(),
        Operand::Lit(l) => lit_value(l),
        Operand::List(items) => Value::List(items.iter().map(|i| read(i, slots)).collect::<Result<_, _>>()?),
    })
}

fn lit_value<T>(l: &Lit) -> Value<T> {
    match l {
        Lit::Int(v) => Value::Int(*v),
        Lit::Float(v) => Value::Float(*v),
        Lit::Bool(v) => Value::Bool(*v),
        Lit::None => Value::None,
        Lit::Str(s) => Value::Str(s.to_string()),
        Lit::DType(d) => Value::DType(*d),
        Lit::Device(d) => Value::Device(*d),
    }
}

/// A literal as a hashable key (floats by their bits), for interning.
#[derive(PartialEq, Eq, Hash)]
enum LitKey {
    Int(i64),
    Float(u64),
    Bool(bool),
    None,
    Str(String),
    DType(DType),
    Device(Device),
}

impl LitKey {
    fn of(l: &Lit) -> Self {
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
fn intern_call_literals(steps: &mut [Step], first: usize) -> Vec<Lit> {
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

/// A packed launch whose ranges are out of the plan's tables (a compile
/// bug).
#[cold]
#[inline(never)]
fn unpacked() -> ExecError {
    ExecError::Input("launch operands were not packed".into())
}

fn release<B: Backend>(backend: &mut B, v: Value<B::Tensor>) {
    match v {
        Value::Tensor(t) => backend.free(t),
        Value::List(items) => items.into_iter().for_each(|i| release(backend, i)),
        Value::Dict(items) => (*items).into_iter().for_each(|(_, i)| release(backend, i)),
        _ => {}
    }
}

fn truthy<T>(v: &Value<T>) -> Result<bool, ExecError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Int(i) => Ok(*i != 0),
        Value::Float(f) => Ok(*f != 0.0),
        other => Err(ExecError::Type(format!("a {} is not a condition", other.kind()))),
    }
}

fn scalar_truthy(v: ScalarValue) -> bool {
    match v {
        ScalarValue::Bool(b) => b,
        ScalarValue::Int(i) => i != 0,
        ScalarValue::Float(f) => f != 0.0,
    }
}

fn dim_of(xs: &[i64], dim: i64, what: &str) -> Result<i64, ExecError> {
    let n = xs.len() as i64;
    let d = if dim < 0 { dim + n } else { dim };
    usize::try_from(d)
        .ok()
        .and_then(|d| xs.get(d).copied())
        .ok_or_else(|| ExecError::Type(format!("{what} dimension {dim} out of range for rank {n}")))
}

/// Checks a tensor against a (partly known) declared layout: dtype, rank,
/// known sizes, and known strides of dimensions with more than one element.
fn check_layout(spec: &TensorSpec, exp: &ExpectedLayout) -> Result<(), ExecError> {
    check_sizes_strides(spec, exp.dtype, exp.size.iter().copied(), exp.stride.iter().copied())
}

/// [`check_layout`] on the parts of an expected layout, so callers with plain
/// integers need not build an [`ExpectedLayout`].
fn check_sizes_strides(
    spec: &TensorSpec,
    dtype: DType,
    size: impl ExactSizeIterator<Item = Option<i64>>,
    mut stride: impl Iterator<Item = Option<i64>>,
) -> Result<(), ExecError> {
    if spec.dtype != dtype {
        return Err(ExecError::Assert(format!(
            "dtype is {}, expected {}",
            spec.dtype, dtype
        )));
    }
    if spec.size.len() != size.len() {
        return Err(ExecError::Assert(format!(
            "rank is {} (sizes {:?}), expected {}",
            spec.size.len(),
            spec.size,
            size.len()
        )));
    }
    for (d, expected_size) in size.enumerate() {
        // `d` is below the rank, which was just checked equal to both lengths.
        let (actual_size, actual_stride) = (spec.size[d], spec.stride[d]);
        if let Some(s) = expected_size {
            if actual_size != s {
                return Err(ExecError::Assert(format!(
                    "size of dim {d} is {actual_size}, expected {s} (sizes {:?})",
                    spec.size
                )));
            }
        }
        if let Some(st) = stride.next().flatten() {
            if actual_size > 1 && actual_stride != st {
                return Err(ExecError::Assert(format!(
                    "stride of dim {d} is {actual_stride}, expected {st} (strides {:?})",
                    spec.stride
                )));
            }
        }
    }
    Ok(())
}
