//! The dependency DAG of a program: which nodes of its FX graph (the graph
//! every backend runs, lowered from the validated program) must stay
//! ordered, and why.
//!
//! A node depends on an earlier one when
//!
//! * it reads the earlier node's value (a tensor, a size, a symbol);
//! * both touch one storage and at least one writes it (read after write,
//!   write after read, write after write). Storage is what a value may
//!   alias ([`effects`]): an allocation is a storage of its own, a view
//!   (`as_strided`, a reinterpret, a reuse of a freed buffer's memory, a
//!   view op) shares its base's, the graph's inputs and constants are one
//!   storage (they may alias each other), an extern op's result is fresh
//!   unless the op returns a view or works in place. Accesses to a node's
//!   storage (not to the inputs' and constants') are by bytes where known:
//!   a view with literal sizes, strides and offset spans a range of bytes,
//!   and a block of every row (a column block, some channels) where its
//!   innermost elements are one contiguous run and its other strides a
//!   multiple of a pitch ([`effects`]); Inductor's own kernels, C++ and
//!   Halide kernels and the catalogue's ops touch only the views they are
//!   given, so slices of one buffer written by different nodes (a
//!   concatenation) are independent where their bytes are apart. Other
//!   kernels and unknown ops touch whole storages;
//! * they touch the random state (ops that draw random numbers), or one is
//!   a barrier: an op the catalogue does not know (custom ops, collectives,
//!   stream events, in-place overloads), or a `cond`/`switch`/`while_loop`
//!   whose subgraphs run one, is ordered against every node that does
//!   device work;
//! * one binds a symbol that the other's declared layout or subgraphs read
//!   (the interpreter checks extern results and multi-output elements
//!   against their declared layouts with the symbols bound before them); a
//!   `cond`/`switch`/`while_loop` is ordered against every binding;
//! * both are graph inputs (their order is the call's argument order).
//!
//! A `cond`, `switch` or `while_loop` is one node over the union of its
//! subgraphs' effects: it reads and writes every storage its operands
//! reach. Every rule errs towards an edge: a missing edge would let a
//! reordering (or concurrent replay) change results; an extra one only
//! costs concurrency. Two nodes with no path between them touch disjoint
//! storages or only read shared ones.
//!
//! Allocation and freeing are not nodes with effects: an `empty_strided`
//! node precedes its users through their reads of its value, and a run of
//! any order frees each value after its last use in that order
//! ([`crate::exec::interp::compile`] plans liveness from the order). A
//! buffer whose memory a later buffer reuses (Inductor's `reuse`) is the
//! same storage as the later one, so every use of the old buffer precedes
//! the new one's first write.

mod accesses;
mod effects;
mod order;
mod print;

pub use order::reorder_graph;

use crate::exec::ExecError;
use crate::fx::{Graph, NodeId, Op, Val};
use crate::ir::{KernelDef, KernelName};
use crate::sym::Symbol;
use indexmap::IndexMap;
use rustc_hash::FxHashMap as HashMap;

/// A storage the DAG tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    /// The graph's inputs and constants (one storage: they may alias each
    /// other).
    External,
    /// The random number generator's state.
    Random,
    /// Everything an unknown op may touch: what orders barriers.
    World,
    /// The storage a node (by position in the order) created: an
    /// allocation, an extern op's fresh result, a `cond`'s or loop's result.
    Node(usize),
}

/// Which access order an edge keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read after write.
    Raw,
    /// Write after read.
    War,
    /// Write after write.
    Waw,
}

/// Why an edge exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The later node reads the earlier node's value.
    Value,
    /// Both touch `storage`, at least one writing it; `via` is the node
    /// (an argument of the later node) through which it is reached, when
    /// there is one.
    Storage {
        /// Which order is kept.
        access: Access,
        /// The storage.
        storage: Storage,
        /// The argument (by position) through which the later node reaches it.
        via: Option<usize>,
    },
    /// One binds the symbol, the other reads the bindings.
    Symbol(Symbol),
    /// Both bind symbols, in one long run of binders next to a long run of
    /// `cond`/`switch`/`while_loop` nodes (which are ordered against every
    /// binder): the later node is the binder through which the run's order
    /// against that control flow passes (the run's last binder, or the
    /// first after the control flow), so that n binders and n `cond`s take
    /// 2n edges rather than one per pair. The symbol is the earlier node's.
    Join(Symbol),
    /// Both are graph inputs.
    InputOrder,
}

/// A dependency: `from` must run before `to` (positions in the graph's order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The earlier node.
    pub from: usize,
    /// The later node.
    pub to: usize,
    /// Why (the first reason found).
    pub reason: Reason,
}

/// One node of the DAG.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DagNode {
    /// The FX node.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// What it is (`extern aten.mm`, `triton triton_poi_fused_0`, `alloc`).
    pub what: String,
    /// It does device work (a launch, an extern call, a device read, a
    /// `cond`/`while_loop`): what the critical path and width count.
    pub work: bool,
}

/// The dependency DAG of one graph (its top-level nodes).
#[derive(Clone, Debug)]
pub struct Dag {
    nodes: Vec<DagNode>,
    edges: Vec<Edge>,
    preds: Vec<Vec<usize>>,
    succs: Vec<Vec<usize>>,
}

/// The DAG's size and shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Nodes (every top-level FX node).
    pub nodes: usize,
    /// Nodes that do device work.
    pub work: usize,
    /// Edges (one per ordered pair).
    pub edges: usize,
    /// The longest chain of dependent work nodes.
    pub critical_path: usize,
    /// The most work nodes at one depth of the DAG (depth: work nodes on
    /// the longest chain ending there): nodes of one depth are pairwise
    /// independent, so this is a lower bound of the widest antichain.
    pub width: usize,
}

impl Dag {
    /// The DAG of `graph`'s top-level nodes, in its order. `kernels` is the
    /// program's kernel table (parameters' read-only metadata). An error
    /// when a node reads a value defined after it (not a graph the
    /// lowering makes).
    pub fn build(graph: &Graph, kernels: &IndexMap<KernelName, KernelDef>) -> Result<Dag, ExecError> {
        let order = graph.order();
        let mut position: HashMap<NodeId, usize> = HashMap::default();
        for (i, id) in order.iter().enumerate() {
            position.insert(*id, i);
        }
        let mut b = Builder {
            edges: Vec::new(),
            seen: HashMap::default(),
        };
        let mut nodes = Vec::with_capacity(order.len());
        let mut footprints = effects::Footprints::new(order.iter().map(|i| i.index() + 1).max().unwrap_or(0));
        let mut tracks: HashMap<Storage, Track> = HashMap::default();
        let mut sliced: HashMap<Storage, Since> = HashMap::default();
        let mut binders: IndexMap<Symbol, Vec<usize>> = IndexMap::new();
        let mut last_input: Option<usize> = None;
        for (i, id) in order.iter().enumerate() {
            let node = graph.node(*id);
            // Values read.
            let mut bad = None;
            node.for_each_input(&mut |n| match position.get(&n) {
                Some(&p) if p < i => b.add(p, i, Reason::Value),
                _ => bad = Some(n),
            });
            if let Some(n) = bad {
                return Err(ExecError::Input(format!(
                    "graph node `{}` reads `{}`, which is not defined before it",
                    node.name,
                    graph.node(n).name
                )));
            }
            if matches!(node.op, Op::Placeholder(_)) {
                if let Some(p) = last_input {
                    b.add(p, i, Reason::InputOrder);
                }
                last_input = Some(i);
            }
            let mut e = effects::node_effects(graph, *id, i, kernels, &mut footprints);
            // Storages merged into one alias class: their accesses so far
            // count against the class (the smaller list appended to the
            // larger), and this node's touches reach the classes.
            for (member, rep) in footprints.take_merges() {
                let Some(mut from) = sliced.remove(&Storage::Node(member)) else {
                    continue;
                };
                let into = sliced.entry(Storage::Node(rep)).or_default();
                if from.writes.len() + from.reads.len() > into.writes.len() + into.reads.len() {
                    std::mem::swap(&mut from, into);
                }
                into.writes.append(&mut from.writes);
                into.reads.append(&mut from.reads);
                into.whole_writer = into.whole_writer.or(from.whole_writer);
            }
            for t in e.reads.iter_mut().chain(e.writes.iter_mut()) {
                t.0 = footprints.resolve(t.0);
            }
            // Every node that does device work is ordered against the barriers.
            if e.work && !e.writes.iter().any(|(s, _, _)| *s == Storage::World) {
                e.reads.push((Storage::World, None, None));
            }
            let via = |n: Option<NodeId>| n.and_then(|n| position.get(&n).copied());
            // Shared storages (inputs and constants, the random state, the
            // barriers' world): the last writer and the readers since.
            let shared = |s: &Storage| !matches!(s, Storage::Node(_));
            for (s, _, through) in e.reads.iter().filter(|t| shared(&t.0)) {
                if let Some(w) = tracks.get(s).and_then(|t| t.writer) {
                    b.add(w, i, storage_reason(Access::Raw, *s, via(*through)));
                }
            }
            for (s, _, through) in e.writes.iter().filter(|t| shared(&t.0)) {
                let t = tracks.entry(*s).or_default();
                if let Some(w) = t.writer {
                    b.add(w, i, storage_reason(Access::Waw, *s, via(*through)));
                }
                for r in std::mem::take(&mut t.readers) {
                    b.add(r, i, storage_reason(Access::War, *s, via(*through)));
                }
                t.writer = Some(i);
            }
            for (s, _, _) in e.reads.iter().filter(|t| shared(&t.0)) {
                let t = tracks.entry(*s).or_default();
                if t.readers.last() != Some(&i) {
                    t.readers.push(i);
                }
            }
            // A node's storage (an allocation's, a fresh result's): every
            // access since its last whole write, with the bytes touched
            // (writes and reads apart: a read need only look at writes);
            // two conflict where the bytes overlap and one writes.
            let touches = || {
                let reads = e.reads.iter().map(|t| (t, false));
                reads
                    .chain(e.writes.iter().map(|t| (t, true)))
                    .filter(|((s, _, _), _)| !shared(s))
            };
            for ((s, extent, through), write) in touches() {
                let Some(since) = sliced.get(s) else { continue };
                let access = if write { Access::Waw } else { Access::Raw };
                since.writes.overlapping(*extent, |m| {
                    b.add(m, i, storage_reason(access, *s, via(*through)));
                });
                if write {
                    since.reads.overlapping(*extent, |m| {
                        b.add(m, i, storage_reason(Access::War, *s, via(*through)));
                    });
                }
            }
            for ((s, extent, _), write) in touches() {
                let since = sliced.entry(*s).or_default();
                if write && extent.is_none() {
                    // A whole write: every later conflicting access follows it.
                    since.writes.clear();
                    since.reads.clear();
                    since.writes.push(i, None);
                    since.whole_writer = Some(i);
                } else if since.whole_writer != Some(i) {
                    // (Whatever else this node touches, its whole write covers.)
                    let list = if write { &mut since.writes } else { &mut since.reads };
                    list.push(i, *extent);
                }
            }
            for s in &node.binds {
                binders.entry(s.clone()).or_default().push(i);
            }
            nodes.push(DagNode {
                id: *id,
                name: node.name.to_string(),
                what: describe(&node.op),
                work: e.work,
            });
        }
        // Symbols: the readers of bindings against every binder of what they
        // read. A `cond`/`switch`/`while_loop` is ordered against every
        // binder: in the order, the binders and these nodes form runs of
        // one kind (binders; control flow; a node of both kinds is a run of
        // its own), and each node of a run follows every node of the run
        // before. Every binder and control-flow node in different runs are
        // then ordered through the runs between them, as if each pair had
        // its edge, with edges between neighbouring runs only (a binder
        // and a `cond` in turn, n times, give 2n edges, not n^2). Where
        // both runs are long, a binder joins them ([`Reason::Join`]): the
        // last binder of a long run of binders follows the others and the
        // control flow after the run follows it; the first binder after a
        // long run of control flow follows the run and the binders after it
        // follow it (n binders, then n `cond`s, give 2n edges, not n^2; the
        // `cond`s stay independent of each other).
        let mut previous_run: Vec<usize> = Vec::new();
        let mut run: Vec<usize> = Vec::new();
        let mut run_kind = (false, false);
        // The binder the current run is joined through, when one is.
        let mut join: Option<usize> = None;
        let symbol_of = |p: usize| graph.node(order[p]).binds.first().cloned();
        for (i, id) in order.iter().enumerate() {
            let node = graph.node(*id);
            let reads_all = matches!(node.op, Op::Cond(_) | Op::Switch(_) | Op::WhileLoop(_));
            let reads_layout = matches!(node.op, Op::Extern { .. } | Op::GetItem { .. });
            let kind = (!node.binds.is_empty(), reads_all);
            if kind != (false, false) {
                if kind != run_kind || kind == (true, true) {
                    previous_run = std::mem::take(&mut run);
                    join = None;
                    if previous_run.len() > FULL_JOIN_MAX && run_kind == (true, false) {
                        // A long run of binders before control flow: its last
                        // binder follows the others.
                        if let Some((&last, others)) = previous_run.split_last() {
                            for &p in others {
                                if let Some(s) = symbol_of(p) {
                                    b.add(p, last, Reason::Join(s));
                                }
                            }
                            join = Some(last);
                        }
                    }
                    run_kind = kind;
                }
                match join {
                    Some(j) if j < i => {
                        // A node of a run joined through the binder `j` (the
                        // last of the run before, or the first of this one).
                        let reason = match symbol_of(j) {
                            Some(s) if kind.0 && !kind.1 && run.first() == Some(&j) => Some(Reason::Join(s)),
                            s => s.map(Reason::Symbol),
                        };
                        if let Some(reason) = reason {
                            b.add(j, i, reason);
                        }
                    }
                    _ => {
                        for &p in &previous_run {
                            // The symbol a binder of the pair binds.
                            let binder = if graph.node(order[p]).binds.is_empty() { i } else { p };
                            if let Some(s) = symbol_of(binder) {
                                b.add(p, i, Reason::Symbol(s));
                            }
                        }
                        if run.is_empty() && kind == (true, false) && previous_run.len() > FULL_JOIN_MAX {
                            // The first binder after a long run of control
                            // flow: the binders after it follow it.
                            join = Some(i);
                        }
                    }
                }
                run.push(i);
            }
            if reads_layout {
                if let Some(Val::Tensor(layout)) = &node.val {
                    let exprs = layout.size.iter().chain(layout.stride.iter()).chain([&layout.offset]);
                    for s in exprs.flat_map(|e| e.free_symbols()) {
                        for &p in binders.get(&s).map(Vec::as_slice).unwrap_or_default() {
                            b.add_between(p, i, Reason::Symbol(s.clone()));
                        }
                    }
                }
            }
        }
        let n = nodes.len();
        let mut preds = vec![Vec::new(); n];
        let mut succs = vec![Vec::new(); n];
        b.edges.sort_by_key(|e| (e.to, e.from));
        for e in &b.edges {
            preds[e.to].push(e.from);
            succs[e.from].push(e.to);
        }
        Ok(Dag {
            nodes,
            edges: b.edges,
            preds,
            succs,
        })
    }

    /// The nodes, in the graph's order.
    pub fn nodes(&self) -> &[DagNode] {
        &self.nodes
    }

    /// The edges, by later node, then earlier.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// The nodes `i` depends on directly.
    pub fn predecessors(&self, i: usize) -> &[usize] {
        self.preds.get(i).map(Vec::as_slice).unwrap_or_default()
    }

    /// The nodes that depend on `i` directly.
    pub fn successors(&self, i: usize) -> &[usize] {
        self.succs.get(i).map(Vec::as_slice).unwrap_or_default()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// `true` for a graph without nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Each node's depth: the work nodes on the longest chain ending at it
    /// (itself included).
    pub fn depths(&self) -> Vec<usize> {
        let mut depth = vec![0usize; self.nodes.len()];
        // Positions are a topological order: every edge goes forwards.
        for i in 0..self.nodes.len() {
            let before = self.predecessors(i).iter().map(|p| depth[*p]).max().unwrap_or(0);
            depth[i] = before + usize::from(self.nodes[i].work);
        }
        depth
    }

    /// Size, critical path and width.
    pub fn summary(&self) -> Summary {
        let depth = self.depths();
        let mut at_depth: HashMap<usize, usize> = HashMap::default();
        for (i, d) in depth.iter().enumerate() {
            if self.nodes[i].work {
                *at_depth.entry(*d).or_default() += 1;
            }
        }
        Summary {
            nodes: self.nodes.len(),
            work: self.nodes.iter().filter(|n| n.work).count(),
            edges: self.edges.len(),
            critical_path: depth.iter().copied().max().unwrap_or(0),
            width: at_depth.values().copied().max().unwrap_or(0),
        }
    }
}

/// The longest run of binders or control flow whose nodes each get an edge
/// from every node of the next run; a longer one is joined through one
/// binder ([`Reason::Join`]), so that the symbol edges stay under
/// `FULL_JOIN_MAX` per node.
const FULL_JOIN_MAX: usize = 16;

/// A storage's accesses so far: its last writer and the readers since.
#[derive(Default)]
struct Track {
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// A node's storage's accesses since its last whole write, by bytes.
#[derive(Default)]
struct Since {
    writes: accesses::Accesses,
    reads: accesses::Accesses,
    /// The node whose whole write began these lists (what else it touches
    /// there, its whole write covers).
    whole_writer: Option<usize>,
}

/// The edges found so far, one per ordered pair.
struct Builder {
    edges: Vec<Edge>,
    seen: HashMap<(usize, usize), ()>,
}

impl Builder {
    fn add(&mut self, from: usize, to: usize, reason: Reason) {
        if from == to {
            return;
        }
        if self.seen.insert((from, to), ()).is_none() {
            self.edges.push(Edge { from, to, reason });
        }
    }

    /// An edge between two nodes in their order.
    fn add_between(&mut self, a: usize, b: usize, reason: Reason) {
        self.add(a.min(b), a.max(b), reason)
    }
}

fn storage_reason(access: Access, storage: Storage, via: Option<usize>) -> Reason {
    Reason::Storage { access, storage, via }
}

/// What a node is, in a few words.
fn describe(op: &Op) -> String {
    match op {
        Op::Placeholder(_) => "input".into(),
        Op::Constant { name } => format!("constant {name}"),
        Op::Subgraph { name } => format!("subgraph {name}"),
        Op::EmptyStrided(_) => "alloc".into(),
        Op::AsStrided(_) => "view".into(),
        Op::TritonKernel { kernel, .. } => format!("triton {kernel}"),
        Op::KernelCall { kernel, .. } => format!("call {kernel}"),
        Op::Extern { target, .. } => format!("extern {target}"),
        Op::SymSize { .. } | Op::SymStride { .. } | Op::SymStorageOffset { .. } | Op::Sym { .. } => "sym".into(),
        Op::GetItem { .. } => "getitem".into(),
        Op::InnerTensor { attr, .. } => format!("inner {attr}"),
        Op::Item { .. } => "item".into(),
        Op::AssertScalar { .. } | Op::AssertSizeStride(_) | Op::AssertAlignment { .. } => "assert".into(),
        Op::AssertFinite { .. } => "assert_finite".into(),
        Op::Cond(_) => "cond".into(),
        Op::Switch(_) => "switch".into(),
        Op::WhileLoop(_) => "while_loop".into(),
        Op::Output { .. } => "output".into(),
    }
}
