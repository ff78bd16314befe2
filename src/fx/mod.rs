//! An FX-style graph: what [`crate::lower::fx`] produces and what
//! `exec::interp` runs.
//!
//! A [`Graph`] keeps its nodes in an arena indexed by [`NodeId`] and their
//! execution order in a separate vector, the way torch.fx keeps a node list
//! apart from its `Graph` object. Subgraphs of `cond` and `while_loop` are
//! nested [`Graph`]s referenced by name. Node kinds follow Inductor's FX
//! converter (`wrapper_fxir.py`): placeholders, `empty_strided`, `as_strided`,
//! one `triton_kernel_wrapper_mutation` per Triton launch, extern op calls,
//! `sym_size`/`getitem`/`item` nodes binding unbacked symbols, arithmetic nodes
//! for symbolic expressions, `cond`/`while_loop`, and one output node.
//!
//! The printer ([`Graph::to_code`]) writes torch.fx's readable style
//! (`def forward(self, arg0_1, s0):` ...), including FX's `x = None` after a
//! value's last use.

mod arena;
mod index;
mod kwargs;
mod name;
pub mod names;
mod print;

pub use kwargs::{KwargNames, Kwargs};
pub use name::Name;

use crate::ir::{DType, Device, DeviceType, KernelName, Layout};
use crate::sym::{SymExpr, Symbol};
use arena::Arena;
use index::NameIndex;
use indexmap::IndexMap;
use std::fmt;
use std::sync::Arc;

/// Index of a node in its graph's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An argument of a node: another node's value or a literal.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// The value of a node.
    Node(NodeId),
    /// An integer literal.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// A boolean literal.
    Bool(bool),
    /// `None`.
    None,
    /// A string literal.
    Str(String),
    /// A dtype (`torch.float32`).
    DType(DType),
    /// A device.
    Device(Device),
    /// A list, kept nested.
    List(Vec<Arg>),
}

/// [`Arg::for_each_node`], generic over the closure.
fn arg_nodes<F: FnMut(NodeId) + ?Sized>(a: &Arg, f: &mut F) {
    match a {
        Arg::Node(n) => f(*n),
        Arg::List(items) => items.iter().for_each(|a| arg_nodes(a, f)),
        _ => {}
    }
}

impl Arg {
    /// Calls `f` on every node the argument refers to.
    pub fn for_each_node(&self, f: &mut dyn FnMut(NodeId)) {
        match self {
            Arg::Node(n) => f(*n),
            Arg::List(items) => items.iter().for_each(|a| a.for_each_node(f)),
            _ => {}
        }
    }
}

/// A node's list of layout arguments (sizes or strides): shared, so the
/// nodes of one layout hold one list and cloning a list copies a pointer.
pub type Args = Arc<[Arg]>;

/// The operands of an [`Op::Sym`]: nearly always one to three, kept inline
/// up to two.
pub type SymArgs = smallvec::SmallVec<[Arg; 2]>;

/// Arithmetic and logic on symbolic integers (the FX targets of Inductor's
/// `_sympy_interp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SymOp {
    /// `torch.sym_sum([a, b, ...])`.
    Sum,
    /// `a * b`.
    Mul,
    /// `a // b` (floor).
    FloorDiv,
    /// `a % b` (floor, Python semantics).
    PyMod,
    /// Remainder with C (truncating) semantics: Inductor's `Mod`.
    CMod,
    /// `torch.sym_min(a, b)`.
    Min,
    /// `torch.sym_max(a, b)`.
    Max,
    /// `a ** b` with a natural exponent.
    Pow,
    /// A comparison (`a == b`, `a < b`, ...).
    Cmp(crate::sym::CmpOp),
    /// `a & b` on booleans.
    And,
    /// `a | b` on booleans.
    Or,
    /// `torch.sym_not(a)`.
    Not,
    /// `torch.sym_ite(c, a, b)`.
    Ite,
}

/// Symbolic metadata of a node's value (FX's `meta["val"]`): the layout the
/// program declares for it, in terms of program symbols.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// A strided tensor. Shared: nodes of one layout may hold one `Arc`.
    Tensor(Arc<Layout>),
    /// A tuple/list/dict of values whose elements are described by the
    /// `getitem` nodes that extract them.
    Multi,
}

/// What a placeholder receives.
#[derive(Clone, Debug, PartialEq)]
pub enum Placeholder {
    /// A tensor input with its declared layout (shared, as in [`Val::Tensor`]).
    Tensor(Arc<Layout>),
    /// A symbolic integer input binding a symbol.
    Symbol(Symbol),
    /// An integer input equal to an expression of symbols (a compound graph
    /// input, `2*s0 + 1`).
    Integer(SymExpr),
}

/// What a node does.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input.
    Placeholder(Placeholder),
    /// A program constant (`self.<name>`).
    Constant {
        /// The constant's name.
        name: String,
    },
    /// A subgraph (`self.<name>`), used by `cond` / `while_loop`.
    Subgraph {
        /// The subgraph's name in [`Graph::subgraphs`].
        name: String,
    },
    /// `torch.empty_strided(size, stride, dtype=, device=)`.
    EmptyStrided(EmptyStrided),
    /// `torch.as_strided(base, size, stride, offset)`.
    AsStrided(AsStrided),
    /// One Triton launch (`triton_kernel_wrapper_mutation`); mutates its tensor kwargs.
    TritonKernel {
        /// The kernel.
        kernel: KernelName,
        /// Grid x, y, z.
        grid: [Arg; 3],
        /// Every kernel parameter by name (runtime args, constants, config constexprs).
        kwargs: Kwargs,
    },
    /// A direct call of a Halide, C++, CUDA C or host kernel.
    KernelCall {
        /// The kernel.
        kernel: KernelName,
        /// Positional arguments.
        args: Vec<Arg>,
        /// Arguments given by parameter name.
        kwargs: Kwargs,
    },
    /// An extern (ATen or fallback) op, with list arguments kept nested.
    Extern {
        /// The op as the program names it (`torch.ops.aten.nonzero.default`).
        target: String,
        /// Positional arguments.
        args: Vec<Arg>,
        /// Keyword arguments (`out=` included for out variants).
        kwargs: Kwargs,
    },
    /// `aten.sym_size.int(t, dim)`.
    SymSize {
        /// The tensor.
        tensor: NodeId,
        /// The dimension.
        dim: i64,
    },
    /// `aten.sym_stride.int(t, dim)`.
    SymStride {
        /// The tensor.
        tensor: NodeId,
        /// The dimension.
        dim: i64,
    },
    /// `aten.sym_storage_offset.default(t)`.
    SymStorageOffset {
        /// The tensor.
        tensor: NodeId,
    },
    /// `source[index]` on a tuple, list or dict.
    GetItem {
        /// The multi-output value.
        source: NodeId,
        /// The index: an integer or a dict key.
        index: Arg,
    },
    /// `source.<attr>`: an inner tensor of a tensor subclass.
    InnerTensor {
        /// The subclass value.
        source: NodeId,
        /// The attribute (`values`, `offsets`).
        attr: String,
    },
    /// `aten.item.default(t)`: read a one-element tensor back to the host.
    Item {
        /// The tensor.
        tensor: NodeId,
        /// The unbacked symbol this value defines (possibly after a division),
        /// so a shapes-only backend can substitute its hint.
        symbol: Option<Symbol>,
        /// The value is `multiplier * symbol` (1 unless a `DivideBy` follows).
        multiplier: i64,
    },
    /// Arithmetic or logic on symbolic integers.
    Sym {
        /// The operation.
        op: SymOp,
        /// Operands (two or fewer inline).
        args: SymArgs,
    },
    /// `aten._assert_scalar.default(cond, message)`.
    AssertScalar {
        /// The checked condition.
        cond: Arg,
        /// The message on failure.
        message: String,
    },
    /// Inductor's `assert_size_stride(t, size, stride)`: printed as
    /// upstream's FX backend lowers it, one `torch._check` per comparison
    /// (rank, sizes, strides, dtype).
    AssertSizeStride(AssertSizeStride),
    /// Inductor's `assert_alignment(t, alignment)`: printed as
    /// `torch._check(t.data_ptr() % alignment == 0)`.
    AssertAlignment {
        /// The checked tensor.
        tensor: NodeId,
        /// Alignment in bytes.
        alignment: u32,
    },
    /// Every element of `t` is finite (Inductor's `nan_asserts`): printed as
    /// two `torch._check`s over `isnan` / `isinf` (`any`, `item`, `not`).
    AssertFinite {
        /// The checked tensor.
        tensor: NodeId,
    },
    /// `higher_order.cond(pred, true_graph, false_graph, operands)`.
    Cond(Cond),
    /// `higher_order.switch(index, [branch, ...], operands)`.
    Switch(Switch),
    /// `higher_order.while_loop(cond_graph, body_graph, carried, additional)`.
    WhileLoop(WhileLoop),
    /// The graph's result.
    Output {
        /// Returned values.
        values: Vec<Arg>,
        /// Return a list even for one value (subgraphs always return lists).
        as_list: bool,
    },
}

/// `torch.empty_strided(size, stride, dtype=, device=)`.
#[derive(Clone, Debug, PartialEq)]
pub struct EmptyStrided {
    /// Sizes (shared: nodes of one layout may hold one list).
    pub size: Args,
    /// Strides (shared likewise).
    pub stride: Args,
    /// Element type.
    pub dtype: DType,
    /// Device type (FX drops the index).
    pub device: DeviceType,
}

/// `torch.as_strided(base, size, stride, offset)`.
#[derive(Clone, Debug, PartialEq)]
pub struct AsStrided {
    /// The viewed tensor.
    pub base: NodeId,
    /// Sizes (shared, as in [`Op::EmptyStrided`]).
    pub size: Args,
    /// Strides (shared likewise).
    pub stride: Args,
    /// Storage offset in elements.
    pub offset: Arg,
}

/// Inductor's `assert_size_stride(t, size, stride)`.
#[derive(Clone, Debug, PartialEq)]
pub struct AssertSizeStride {
    /// The checked tensor.
    pub tensor: NodeId,
    /// Expected sizes (shared, as in [`Op::EmptyStrided`]).
    pub size: Args,
    /// Expected strides (shared likewise).
    pub stride: Args,
    /// The dtype it must have, when checked (Inductor 2.14+'s
    /// `assert_tensor_metadata`).
    pub dtype: Option<DType>,
    /// The op that produced the tensor, for the message.
    pub context: Option<String>,
}

/// `higher_order.cond(pred, true_graph, false_graph, operands)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    /// A one-element boolean tensor or a symbolic boolean.
    pub pred: Arg,
    /// The `Subgraph` node of the true branch.
    pub true_graph: NodeId,
    /// The `Subgraph` node of the false branch.
    pub false_graph: NodeId,
    /// Operands (tensors, then lifted symbols).
    pub operands: Vec<Arg>,
}

/// `higher_order.switch(index, [branch, ...], operands)`: index `k` runs
/// `branches[k]` below the last index, any other value the last branch
/// ([`crate::ir::Switch`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Switch {
    /// A one-element integer (or boolean) tensor, or a symbolic integer.
    pub index: Arg,
    /// The `Subgraph` nodes of the branches, in index order.
    pub branches: Vec<NodeId>,
    /// Operands (tensors, then lifted symbols).
    pub operands: Vec<Arg>,
}

/// `higher_order.while_loop(cond_graph, body_graph, carried, additional)`.
#[derive(Clone, Debug, PartialEq)]
pub struct WhileLoop {
    /// The `Subgraph` node computing the condition.
    pub cond_graph: NodeId,
    /// The `Subgraph` node computing the next carried values.
    pub body_graph: NodeId,
    /// Initial carried values.
    pub carried: Vec<Arg>,
    /// Values passed unchanged to both subgraphs (lifted symbols included).
    pub additional: Vec<Arg>,
}

/// One node: a name unique in its graph, what it does, and its declared value.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The node's name (buffer names for buffers, FX-style auto names otherwise).
    pub name: Name,
    /// What it does.
    pub op: Op,
    /// The declared value, when the program declares one.
    pub val: Option<Val>,
    /// Symbols whose value this node is (bound when it runs).
    pub binds: Vec<Symbol>,
}

impl Node {
    /// Calls `f` on every node this node reads.
    pub fn for_each_input(&self, f: &mut dyn FnMut(NodeId)) {
        self.visit_inputs(f)
    }

    /// [`Node::for_each_input`] for a closure known at compile time (the
    /// printer's liveness walk: no call through a pointer per input).
    pub(crate) fn visit_inputs<F: FnMut(NodeId) + ?Sized>(&self, f: &mut F) {
        fn each<F: FnMut(NodeId) + ?Sized>(args: &[Arg], f: &mut F) {
            args.iter().for_each(|a| arg_nodes(a, f));
        }
        match &self.op {
            Op::Placeholder(_) | Op::Constant { .. } | Op::Subgraph { .. } => {}
            Op::EmptyStrided(e) => {
                each(&e.size, f);
                each(&e.stride, f);
            }
            Op::AsStrided(a) => {
                f(a.base);
                each(&a.size, f);
                each(&a.stride, f);
                arg_nodes(&a.offset, f);
            }
            Op::TritonKernel { grid, kwargs, .. } => {
                each(grid, f);
                kwargs.values().for_each(|a| arg_nodes(a, f));
            }
            Op::KernelCall { args, kwargs, .. } | Op::Extern { args, kwargs, .. } => {
                each(args, f);
                kwargs.values().for_each(|a| arg_nodes(a, f));
            }
            Op::SymSize { tensor, .. } | Op::SymStride { tensor, .. } | Op::SymStorageOffset { tensor } => f(*tensor),
            Op::GetItem { source, index } => {
                f(*source);
                arg_nodes(index, f);
            }
            Op::InnerTensor { source, .. } => f(*source),
            Op::Item { tensor, .. } => f(*tensor),
            Op::Sym { args, .. } => each(args, f),
            Op::AssertScalar { cond, .. } => arg_nodes(cond, f),
            Op::AssertSizeStride(a) => {
                f(a.tensor);
                each(&a.size, f);
                each(&a.stride, f);
            }
            Op::AssertAlignment { tensor, .. } | Op::AssertFinite { tensor } => f(*tensor),
            Op::Cond(c) => {
                arg_nodes(&c.pred, f);
                f(c.true_graph);
                f(c.false_graph);
                each(&c.operands, f);
            }
            Op::Switch(sw) => {
                arg_nodes(&sw.index, f);
                sw.branches.iter().for_each(|b| f(*b));
                each(&sw.operands, f);
            }
            Op::WhileLoop(w) => {
                f(w.cond_graph);
                f(w.body_graph);
                each(&w.carried, f);
                each(&w.additional, f);
            }
            Op::Output { values, .. } => each(values, f),
        }
    }
}

/// An FX graph: nodes in an arena, their order, and named subgraphs.
#[derive(Clone, Default)]
pub struct Graph {
    /// The node arena, indexed by [`NodeId`].
    nodes: Arena,
    order: Vec<NodeId>,
    /// Subgraphs referenced by `Subgraph` nodes, by name. Shared: a graph
    /// holds its nested subgraphs, and a lowering that reuses one (or keeps
    /// it in a memo) clones a pointer, not the subtree (cloning subtrees
    /// made a chain of `n` nested subgraphs cost O(n^2) time and memory).
    pub subgraphs: IndexMap<String, std::sync::Arc<Graph>>,
    /// Lookup structures that make naming O(1); not part of the graph's value.
    names: NameIndex,
}

/// Below this many symbols, [`Graph::bind_symbol`] scans [`Node::binds`].
const BIND_SET_MIN: usize = 8;

/// Names the printout uses as bare global callables (`device(...)`): never
/// node names ([`names::is_reserved`]), or the printed `forward` would bind
/// them as locals.
pub const PRINTED_GLOBALS: &[&str] = &["device"];

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes && self.order == other.order && self.subgraphs == other.subgraphs
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.nodes)
            .field("order", &self.order)
            .field("subgraphs", &self.subgraphs)
            .finish()
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Graph::default()
    }

    /// An empty graph with room for `nodes` nodes (order and name index
    /// sized once; the arena grows by fixed-size chunks).
    pub fn with_capacity(nodes: usize) -> Self {
        Graph {
            nodes: Arena::with_capacity(nodes),
            order: Vec::with_capacity(nodes),
            subgraphs: IndexMap::new(),
            // Suffixed auto names take no entry of their own (suffix sets):
            // the lowering benchmark's 77,000 nodes take about 31,000 entries.
            names: NameIndex::with_capacity(nodes / 2),
        }
    }

    /// The node with this id.
    ///
    /// Ids come from this graph's [`Graph::push`]/[`Graph::insert`], so they are
    /// always in range; a foreign id is a caller bug and panics.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// The nodes in execution order.
    pub fn order(&self) -> &[NodeId] {
        &self.order
    }

    /// Every node with its id, in execution order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.order.iter().map(move |id| (*id, self.node(*id)))
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// `true` when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Appends a node at the end of the order. The name is made unique.
    #[inline]
    pub fn push(&mut self, name: &str, op: Op, val: Option<Val>) -> NodeId {
        let pos = self.order.len();
        self.insert(pos, name, op, val)
    }

    /// [`Graph::push`] for a name fixed in the program's text (an op's auto
    /// name such as `triton_kernel_wrapper_mutation`): the same node and
    /// name, with the name's tests done once per text.
    #[inline]
    pub fn push_static(&mut self, name: &'static str, op: Op, val: Option<Val>) -> NodeId {
        self.reindex_touched();
        let name = match self.is_plain_static(name) {
            Some(prefix) => self.claim_plain(name, prefix),
            None => self.claim_name(name),
        };
        let pos = self.order.len();
        self.insert_named(pos, name, op, val)
    }

    /// Inserts a node at position `pos` of the order (clamped to the end).
    pub fn insert(&mut self, pos: usize, name: &str, op: Op, val: Option<Val>) -> NodeId {
        self.reindex_touched();
        let name = self.claim_name(name);
        self.insert_named(pos, name, op, val)
    }

    /// Inserts a node under `name`, already claimed in the name index.
    fn insert_named(&mut self, pos: usize, name: Name, op: Op, val: Option<Val>) -> NodeId {
        // Node ids are `u32`: a graph holds fewer than 2^32 nodes (a
        // lowering makes about one per program line).
        let id = NodeId(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX));
        self.nodes.push(Node {
            name,
            op,
            val,
            binds: Vec::new(),
        });
        if pos >= self.order.len() {
            self.order.push(id);
        } else {
            self.order.insert(pos, id);
        }
        id
    }

    /// Sets a node's declared value (unlike [`Graph::node_mut`], without
    /// marking the node for a possible rename).
    pub fn set_val(&mut self, id: NodeId, val: Option<Val>) {
        self.nodes[id.index()].val = val;
    }

    /// Records that node `id` is the value of `symbol`.
    pub fn bind_symbol(&mut self, id: NodeId, symbol: crate::sym::Symbol) {
        // Sets of nodes handed out by `node_mut` may be stale: drop them.
        self.reindex_touched();
        let binds = &mut self.nodes[id.index()].binds;
        if binds.len() < BIND_SET_MIN {
            if !binds.contains(&symbol) {
                binds.push(symbol);
            }
            return;
        }
        let set = self
            .names
            .bind_sets
            .entry(id)
            .or_insert_with(|| binds.iter().cloned().collect());
        if set.insert(symbol.clone()) {
            binds.push(symbol);
        }
    }

    /// The placeholders, in input order.
    pub fn placeholders(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.iter().filter(|(_, n)| matches!(n.op, Op::Placeholder(_)))
    }

    /// The output node, if the graph has one.
    pub fn output(&self) -> Option<(NodeId, &Node)> {
        self.iter().find(|(_, n)| matches!(n.op, Op::Output { .. }))
    }

    /// The graph in torch.fx's readable style.
    pub fn to_code(&self) -> String {
        print::graph_code(self)
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_code())
    }
}

impl Graph {
    /// Mutable access to a node (same id contract as [`Graph::node`]).
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        // The caller may rename the node: remember its name for reindexing.
        self.touch(id);
        &mut self.nodes[id.index()]
    }

    /// Replaces the execution order. Returns `false` (and changes nothing)
    /// unless `order` is a permutation of the current order.
    pub fn set_order(&mut self, order: Vec<NodeId>) -> bool {
        let mut a = order.clone();
        let mut b = self.order.clone();
        a.sort();
        b.sort();
        if a != b {
            return false;
        }
        self.order = order;
        true
    }
}

/// A symbolic scalar: what [`SymOp`]s compute on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

/// Why a [`SymOp`] could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SymEvalError {
    /// 64-bit overflow.
    #[error("integer overflow in `{0}`")]
    Overflow(String),
    /// Division or modulo by zero.
    #[error("division by zero in `{0}`")]
    DivisionByZero(String),
    /// Wrong operand count or kind.
    #[error("bad operands for `{0}`")]
    BadOperands(String),
}

impl From<crate::sym::CmpOp> for SymOp {
    /// The FX operator of a comparison.
    fn from(op: crate::sym::CmpOp) -> Self {
        SymOp::Cmp(op)
    }
}

impl SymOp {
    /// FX's auto name for nodes of this op.
    pub fn node_name(self) -> &'static str {
        match self {
            SymOp::Sum => "sym_sum",
            SymOp::Mul => "mul",
            SymOp::FloorDiv => "floordiv",
            SymOp::PyMod => "mod",
            SymOp::CMod => "c_mod",
            SymOp::Min => "sym_min",
            SymOp::Max => "sym_max",
            SymOp::Pow => "pow_1",
            SymOp::Cmp(c) => c.name(),
            SymOp::And => "and_",
            SymOp::Or => "or_",
            SymOp::Not => "sym_not",
            SymOp::Ite => "sym_ite",
        }
    }

    /// [`SymOp::eval`] of two integers for the ops that take two (`Sum`
    /// of two included), without building an operand list; `None` where
    /// `eval` would fail (overflow, division by zero) or the op is another
    /// (call `eval` then, for the result or the error).
    #[inline]
    pub fn eval_ints(self, a: i64, b: i64) -> Option<Scalar> {
        Some(match self {
            SymOp::Sum => Scalar::Int(a.checked_add(b)?),
            SymOp::Mul => Scalar::Int(a.checked_mul(b)?),
            SymOp::Min => Scalar::Int(a.min(b)),
            SymOp::Max => Scalar::Int(a.max(b)),
            SymOp::FloorDiv if b != 0 => Scalar::Int(crate::sym::eval::floor_div(a, b)?),
            SymOp::Cmp(c) => Scalar::Bool(c.holds(a, b)),
            _ => return None,
        })
    }

    /// Applies the op with checked 64-bit arithmetic. Booleans count as 0/1
    /// where an integer is needed (as in Python).
    pub fn eval(self, args: &[Scalar]) -> Result<Scalar, SymEvalError> {
        let name = self.node_name();
        let bad = || SymEvalError::BadOperands(name.to_string());
        let int = |s: &Scalar| match s {
            Scalar::Int(v) => *v,
            Scalar::Bool(b) => *b as i64,
        };
        let boolean = |s: &Scalar| match s {
            Scalar::Int(v) => *v != 0,
            Scalar::Bool(b) => *b,
        };
        let ovf = || SymEvalError::Overflow(name.to_string());
        let two = || -> Result<(i64, i64), SymEvalError> {
            match args {
                [a, b] => Ok((int(a), int(b))),
                _ => Err(bad()),
            }
        };
        Ok(match self {
            SymOp::Sum => {
                let mut acc: i64 = 0;
                for a in args {
                    acc = acc.checked_add(int(a)).ok_or_else(ovf)?;
                }
                Scalar::Int(acc)
            }
            SymOp::Mul => {
                let (a, b) = two()?;
                Scalar::Int(a.checked_mul(b).ok_or_else(ovf)?)
            }
            SymOp::FloorDiv | SymOp::PyMod | SymOp::CMod => {
                let (a, b) = two()?;
                if b == 0 {
                    return Err(SymEvalError::DivisionByZero(name.into()));
                }
                let rule = match self {
                    SymOp::FloorDiv => crate::sym::eval::floor_div,
                    SymOp::PyMod => crate::sym::eval::python_mod,
                    _ => crate::sym::eval::c_mod,
                };
                Scalar::Int(rule(a, b).ok_or_else(ovf)?)
            }
            SymOp::Min => {
                let (a, b) = two()?;
                Scalar::Int(a.min(b))
            }
            SymOp::Max => {
                let (a, b) = two()?;
                Scalar::Int(a.max(b))
            }
            SymOp::Pow => {
                let (a, b) = two()?;
                let e = u32::try_from(b).map_err(|_| bad())?;
                Scalar::Int(a.checked_pow(e).ok_or_else(ovf)?)
            }
            SymOp::Cmp(c) => {
                let (a, b) = two()?;
                Scalar::Bool(c.holds(a, b))
            }
            SymOp::And => Scalar::Bool(args.iter().all(boolean)),
            SymOp::Or => Scalar::Bool(args.iter().any(boolean)),
            SymOp::Not => match args {
                [a] => Scalar::Bool(!boolean(a)),
                _ => return Err(bad()),
            },
            SymOp::Ite => match args {
                [c, a, b] => {
                    if boolean(c) {
                        *a
                    } else {
                        *b
                    }
                }
                _ => return Err(bad()),
            },
        })
    }
}
