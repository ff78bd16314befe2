//! The FX interpreter: compiles an [`fx::Graph`](crate::fx::Graph) into a flat
//! [`Plan`] (values in numbered slots, not name lookups; every slot freed
//! right after its last use) and runs the plan on a [`Backend`].

use crate::exec::{
    ArgList, Backend, ExecError, ExpectedLayout, ExternCall, KernelLaunch, Kwargs, ScalarRequest, ScalarValue,
    TensorSpec, Value,
};
use crate::fx::{Arg, Graph, NodeId, Op, Placeholder, Scalar, SymOp, Val};
use crate::ir::{DType, Device, DeviceType, KernelDef, KernelName, Layout, Program, SymbolDecl, ValueRange};
use crate::sym::{Bindings, SymExpr, Symbol};
use indexmap::IndexMap;
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

mod compile;
mod run;
mod values;

use compile::*;
use values::*;

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
        /// The symbol's index in [`Plan::symbols`] (looked up at compile time).
        decl: Option<u32>,
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
        dtype: Option<DType>,
        context: Option<Box<str>>,
    },
    AssertAlignment {
        tensor: usize,
        alignment: u32,
    },
    AssertFinite {
        tensor: usize,
        /// The checked tensor's node, for the message.
        name: Box<str>,
    },
    Branch(Box<BranchStep>),
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
    /// `target`'s family in the extern-op catalogue, resolved once here.
    family: crate::exec::op::ExternOp,
    args: Vec<Operand>,
    kwargs: KwOperands,
    /// The declared layout of a tensor result (here, not only in the
    /// step's [`StepInfo`], so a call does not read that cold table).
    layout: Option<Layout>,
    /// The symbols of `layout`, resolved at compile time.
    syms: Box<[LayoutSym]>,
}

/// A symbol of a declared layout as resolved at compile time: where a run
/// finds its value without hashing its name.
#[derive(Clone, Debug)]
struct LayoutSym {
    symbol: Symbol,
    /// Its index in [`Plan::bound`] when a step before this one binds it.
    id: Option<u32>,
    /// Its index in [`Plan::symbols`] (its declaration), if declared.
    decl: Option<u32>,
}

/// `higher_order.cond` and `higher_order.switch`: the branch the selector
/// picks runs on the operands. `branches[k]` for index `k` below the last,
/// the last for any other (`ir::switch_branch`); a cond's branches are
/// `[false, true]`, picked by the selector's truth.
#[derive(Clone, Debug)]
struct BranchStep {
    selector: Operand,
    branches: Vec<String>,
    operands: Vec<Operand>,
    /// Pick by truth (a cond) rather than by integer value (a switch).
    truthy: bool,
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
    /// Its index in [`Plan::bound`].
    id: u32,
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
    /// The node's position in the graph's order (what
    /// [`crate::exec::dag::Dag`] numbers nodes by).
    position: u32,
    node: String,
    val: Option<Val>,
    /// How many of [`Plan::bound`]'s symbols steps before this one bind
    /// (a prefix: they are in first-bind order).
    bound_before: u32,
    /// The symbols of a `getitem`'s declared element layout, resolved.
    syms: Box<[LayoutSym]>,
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
    /// The symbols this plan's steps bind, in first-bind order, each with
    /// the value 0: a run's bindings start as a copy and each bind writes its
    /// value by index (no hashing, no symbol clone per bind). Every step of
    /// a successful run runs, so every symbol here is bound by its end.
    bound: Bindings,
    /// Literal call arguments: `lits[i]` is in slot `slots + i` for the
    /// whole run (see [`intern_call_literals`]).
    lits: Vec<Lit>,
    /// The dependency DAG of the graph the plan was compiled from, where
    /// the caller attached it ([`Plan::with_dag`]): what concurrent CUDA
    /// graph replay orders the recorded operations by.
    dag: Option<Arc<crate::exec::dag::Dag>>,
}

/// What a run returns.
#[derive(Clone, Debug)]
pub struct RunOutput<T> {
    /// The graph's outputs.
    pub outputs: Vec<Value<T>>,
    /// Every symbol bound during the run (main graph), with its value.
    pub symbols: Bindings,
}

impl Plan {
    /// The plan with `dag`, the DAG of the graph it was compiled from
    /// (built from that graph in the same order: its positions are the
    /// plan's), attached.
    pub fn with_dag(mut self, dag: Arc<crate::exec::dag::Dag>) -> Plan {
        self.dag = Some(dag);
        self
    }

    /// The dependency DAG attached with [`Plan::with_dag`], if any.
    pub fn dag(&self) -> Option<&crate::exec::dag::Dag> {
        self.dag.as_deref()
    }
}

/// Compiles `graph` (lowered from `program`) into a plan.
pub fn compile(graph: &Graph, program: &Program) -> Result<Plan, ExecError> {
    let symbols = Arc::new(program.symbols.clone());
    let kernels = Arc::new(program.kernels.clone());
    compile_graph(graph, "main", &symbols, &kernels)
}
