//! What one FX node does to memory: the storages it reads and writes, and
//! the storages its value may alias (its footprint). The one place where an
//! op's or a kernel parameter's access is decided; every rule errs towards
//! more access (a missing write is a missing edge, a wrong result; an extra
//! one only costs concurrency).

use super::Storage;
use crate::exec::op::ExternOp;
use crate::fx::{Arg, Graph, Kwargs, NodeId, Op};
use crate::ir::{KernelBackend, KernelDef, KernelName};
use indexmap::IndexMap;
use smallvec::SmallVec;

/// Storages, a few inline.
pub(super) type Storages = SmallVec<[Storage; 2]>;

/// What a node reads and writes, and why (for the edges' reasons).
#[derive(Clone, Debug, Default)]
pub(super) struct Effects {
    /// Storages read, each with the argument (node) it was read through.
    pub(super) reads: Vec<(Storage, Option<NodeId>)>,
    /// Storages written, likewise.
    pub(super) writes: Vec<(Storage, Option<NodeId>)>,
    /// The node does device work (a launch, a library or extern call, a
    /// device read): what the summary's critical path and width count.
    pub(super) work: bool,
}

impl Effects {
    fn read(&mut self, footprint: &[Storage], via: Option<NodeId>) {
        self.reads.extend(footprint.iter().map(|s| (*s, via)));
    }

    fn write(&mut self, footprint: &[Storage], via: Option<NodeId>) {
        self.writes.extend(footprint.iter().map(|s| (*s, via)));
    }

    /// Reads and writes every storage `arg` reaches.
    fn read_write_arg(&mut self, arg: &Arg, footprints: &Footprints) {
        arg.for_each_node(&mut |n| {
            let f = footprints.of(n);
            self.read(f, Some(n));
            self.write(f, Some(n));
        });
    }

    fn read_arg(&mut self, arg: &Arg, footprints: &Footprints) {
        arg.for_each_node(&mut |n| self.read(footprints.of(n), Some(n)));
    }
}

/// The footprint of each node's value: the storages it may alias (empty for
/// integers, symbols and nodes without a value).
pub(super) struct Footprints {
    by_node: Vec<Storages>,
}

impl Footprints {
    pub(super) fn new(arena_len: usize) -> Self {
        Footprints {
            by_node: vec![Storages::new(); arena_len],
        }
    }

    pub(super) fn of(&self, n: NodeId) -> &[Storage] {
        self.by_node.get(n.index()).map(|s| s.as_slice()).unwrap_or(&[])
    }

    fn set(&mut self, n: NodeId, storages: Storages) {
        if let Some(slot) = self.by_node.get_mut(n.index()) {
            *slot = storages;
        }
    }

    /// The union of the footprints of every node `args` reach.
    fn union<'a>(&self, args: impl IntoIterator<Item = &'a Arg>) -> Storages {
        let mut out = Storages::new();
        for a in args {
            a.for_each_node(&mut |n| {
                for s in self.of(n) {
                    if !out.contains(s) {
                        out.push(*s);
                    }
                }
            });
        }
        out
    }
}

/// How an extern op touches its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExternAccess {
    /// Computes a fresh result from its arguments: reads the positional
    /// tensors, writes its result and every tensor keyword argument
    /// (`out=`, `values=`/`indices=` of `.values`/`.out` overloads).
    Fresh,
    /// A view: no device work, the result aliases its tensor arguments.
    View,
    /// In place on its first argument (`scatter_`, `index_put_`, `copy_`),
    /// which the result aliases; reads the others.
    InPlace,
    /// Draws from the random state (and writes its result).
    Random,
    /// Unknown to the catalogue (custom ops, collectives, stream events,
    /// in-place overloads such as `aten.add_`): may read and write every
    /// argument and any state of the process, and return a view of any
    /// argument. A barrier.
    Unknown,
}

/// The access of an extern op, by its catalogue family and op string.
fn extern_access(target: &str) -> ExternAccess {
    use ExternOp::*;
    match ExternOp::of(target) {
        View | ViewAsComplex | ViewAsReal | Permute => ExternAccess::View,
        Scatter | ScatterAdd | ScatterReduce | IndexPut | Copy => ExternAccess::InPlace,
        Randint => ExternAccess::Random,
        Mm
        | Bmm
        | Addmm
        | AddmmActivation
        | Baddbmm
        | Addbmm
        | Convolution
        | Nonzero
        | MaskedSelect
        | Index
        | JaggedToPaddedDenseForward
        | JaggedToPaddedDenseBackward
        | PaddedDenseToJaggedForward
        | PaddedDenseToJaggedBackward
        | Topk
        | SegmentReduce
        | Mul
        | Add
        | Sub
        | Div
        | SdpaEfficient
        | SdpaFlash
        | SdpaCudnn
        | SdpaFlashCpu
        | InverseOffsets
        | Item
        | Cumsum
        | Sort
        | IntMm
        | MkldnnRnnLayer
        | Clone
        | Neg
        | Relu
        | Exp
        | Sin
        | Where => ExternAccess::Fresh,
        // Named so that cuDNN plans are made for it; neither backend runs it.
        ConvolutionInternal | Other => ExternAccess::Unknown,
    }
}

/// Whether a kernel only reads the parameter at position `position` (a
/// positional argument) or named `name` (a keyword argument): `false`
/// unless the kernel's metadata says so. Inductor's own Triton kernels read
/// `in_ptr<N>` and write `out_ptr<N>` / `in_out_ptr<N>`; its C++ kernels
/// take `const T*` for what they read; its Halide kernels name inputs
/// `in_ptr<N>`. User-defined Triton kernels, CUDA C and host kernels may
/// write any pointer they get.
fn kernel_reads_only(def: Option<&KernelDef>, position: Option<usize>, name: Option<&str>) -> bool {
    let inductor_input = |n: &str| {
        n.strip_prefix("in_ptr")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    match def.map(|d| &d.backend) {
        Some(KernelBackend::Triton(meta)) => !meta.user_defined && name.is_some_and(inductor_input),
        Some(KernelBackend::Cpp(meta)) => position
            .and_then(|i| meta.arg_types.get(i))
            .is_some_and(|t| t.trim_start().starts_with("const ") && t.trim_end().ends_with('*')),
        Some(KernelBackend::Halide(meta)) => {
            let arg = match (position, name) {
                (Some(i), _) => meta.argtypes.get(i),
                (None, Some(n)) => meta.argtypes.iter().find(|a| a.name == n),
                _ => None,
            };
            // An input another argument aliases is written through that one,
            // which the storage it shares already records.
            arg.is_some_and(|a| inductor_input(&a.name))
        }
        Some(KernelBackend::CudaC) | Some(KernelBackend::Host) | None => false,
    }
}

/// What a subgraph run by a `cond`, `switch` or `while_loop` may do beyond
/// its operands, over all its nodes and nested subgraphs.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Beyond {
    /// Something unknown runs (a barrier).
    pub(super) unknown: bool,
    /// The random state is drawn from.
    pub(super) random: bool,
    /// A constant (the model's weights, held outside the run) is used.
    pub(super) external: bool,
}

/// [`Beyond`] of `graph` and every graph nested in it (each subgraph
/// looked at once, however many nodes run it).
pub(super) fn beyond(graph: &Graph, kernels: &IndexMap<KernelName, KernelDef>) -> Beyond {
    let mut out = Beyond::default();
    for (_, node) in graph.iter() {
        match &node.op {
            Op::Constant { .. } => out.external = true,
            Op::Extern { target, .. } => match extern_access(target) {
                ExternAccess::Unknown => out.unknown = true,
                ExternAccess::Random => out.random = true,
                _ => {}
            },
            // A kernel writes only its arguments (operands or the
            // subgraph's own buffers), which the operands' storages cover.
            _ => {}
        }
    }
    for sub in graph.subgraphs.values() {
        let b = beyond(sub, kernels);
        out.unknown |= b.unknown;
        out.random |= b.random;
        out.external |= b.external;
    }
    out
}

/// The effects of `node` (`id`, at position `position` of the order), its
/// footprint recorded into `footprints`.
pub(super) fn node_effects(
    graph: &Graph,
    id: NodeId,
    position: usize,
    kernels: &IndexMap<KernelName, KernelDef>,
    footprints: &mut Footprints,
) -> Effects {
    let node = graph.node(id);
    let fresh = || -> Storages { smallvec::smallvec![Storage::Node(position)] };
    let mut e = Effects::default();
    let footprint: Storages = match &node.op {
        Op::Placeholder(crate::fx::Placeholder::Tensor(_)) | Op::Constant { .. } => {
            smallvec::smallvec![Storage::External]
        }
        // A symbol or integer input is an integer: no storage.
        Op::Placeholder(crate::fx::Placeholder::Symbol(_) | crate::fx::Placeholder::Integer(_)) => Storages::new(),
        Op::Subgraph { .. } | Op::Output { .. } => Storages::new(),
        Op::EmptyStrided(_) => fresh(),
        Op::AsStrided(a) => footprints.of(a.base).into(),
        Op::TritonKernel { kernel, kwargs, .. } => {
            let def = kernels.get(kernel);
            e.work = true;
            for (name, arg) in kwargs.iter() {
                if kernel_reads_only(def, None, Some(name.as_str())) {
                    e.read_arg(arg, footprints);
                } else {
                    e.read_write_arg(arg, footprints);
                }
            }
            Storages::new()
        }
        Op::KernelCall { kernel, args, kwargs } => {
            let def = kernels.get(kernel);
            e.work = true;
            for (i, arg) in args.iter().enumerate() {
                if kernel_reads_only(def, Some(i), None) {
                    e.read_arg(arg, footprints);
                } else {
                    e.read_write_arg(arg, footprints);
                }
            }
            for (name, arg) in kwargs.iter() {
                if kernel_reads_only(def, None, Some(name.as_str())) {
                    e.read_arg(arg, footprints);
                } else {
                    e.read_write_arg(arg, footprints);
                }
            }
            Storages::new()
        }
        Op::Extern { target, args, kwargs } => extern_effects(target, args, kwargs, position, footprints, &mut e),
        Op::SymSize { .. } | Op::SymStride { .. } | Op::SymStorageOffset { .. } | Op::Sym { .. } => Storages::new(),
        Op::AssertScalar { .. } | Op::AssertSizeStride(_) | Op::AssertAlignment { .. } => Storages::new(),
        // An element of a multi-output value aliases what the value holds.
        Op::GetItem { source, .. } | Op::InnerTensor { source, .. } => footprints.of(*source).into(),
        Op::Item { tensor, .. } | Op::AssertFinite { tensor } => {
            e.work = true;
            e.read(footprints.of(*tensor), Some(*tensor));
            Storages::new()
        }
        Op::Cond(c) => {
            control_effects(
                graph,
                kernels,
                [&c.pred],
                &[c.true_graph, c.false_graph],
                &c.operands,
                footprints,
                &mut e,
            );
            let mut f = footprints.union(&c.operands);
            f.push(Storage::Node(position));
            f
        }
        Op::Switch(sw) => {
            control_effects(
                graph,
                kernels,
                [&sw.index],
                &sw.branches,
                &sw.operands,
                footprints,
                &mut e,
            );
            let mut f = footprints.union(&sw.operands);
            f.push(Storage::Node(position));
            f
        }
        Op::WhileLoop(w) => {
            let operands: Vec<Arg> = w.carried.iter().chain(&w.additional).cloned().collect();
            control_effects(
                graph,
                kernels,
                [],
                &[w.cond_graph, w.body_graph],
                &operands,
                footprints,
                &mut e,
            );
            let mut f = footprints.union(&operands);
            f.push(Storage::Node(position));
            f
        }
    };
    footprints.set(id, footprint);
    e
}

/// An extern call's effects; returns its result's footprint.
fn extern_effects(
    target: &str,
    args: &[Arg],
    kwargs: &Kwargs,
    position: usize,
    footprints: &Footprints,
    e: &mut Effects,
) -> Storages {
    let access = extern_access(target);
    e.work = access != ExternAccess::View;
    let mut result: Storages = smallvec::smallvec![Storage::Node(position)];
    match access {
        ExternAccess::Fresh | ExternAccess::Random => {
            args.iter().for_each(|a| e.read_arg(a, footprints));
            kwargs.values().for_each(|a| e.read_write_arg(a, footprints));
            if access == ExternAccess::Random {
                e.reads.push((Storage::Random, None));
                e.writes.push((Storage::Random, None));
            }
        }
        ExternAccess::View => {
            // No bytes touched; later accesses through the result reach the
            // arguments' storages.
            result = footprints.union(args.iter().chain(kwargs.values()));
        }
        ExternAccess::InPlace => {
            let mut rest = args.iter();
            if let Some(first) = rest.next() {
                e.read_write_arg(first, footprints);
                result = footprints.union([first]);
            }
            rest.for_each(|a| e.read_arg(a, footprints));
            kwargs.values().for_each(|a| e.read_write_arg(a, footprints));
        }
        ExternAccess::Unknown => {
            args.iter().chain(kwargs.values()).for_each(|a| {
                e.read_write_arg(a, footprints);
            });
            for s in footprints.union(args.iter().chain(kwargs.values())) {
                if !result.contains(&s) {
                    result.push(s);
                }
            }
            e.writes.push((Storage::World, None));
        }
    }
    // A view's result is written by nobody here.
    if access != ExternAccess::View {
        e.write(&[Storage::Node(position)], None);
    }
    result
}

/// A `cond`, `switch` or `while_loop`: reads its predicate, reads and writes
/// every operand's storages (its subgraphs may write them, and its result
/// may alias them), and whatever its subgraphs do beyond them.
fn control_effects<'a>(
    graph: &Graph,
    kernels: &IndexMap<KernelName, KernelDef>,
    predicates: impl IntoIterator<Item = &'a Arg>,
    subgraph_nodes: &[NodeId],
    operands: &[Arg],
    footprints: &Footprints,
    e: &mut Effects,
) {
    e.work = true;
    predicates.into_iter().for_each(|p| e.read_arg(p, footprints));
    operands.iter().for_each(|a| e.read_write_arg(a, footprints));
    let mut all = Beyond::default();
    for n in subgraph_nodes {
        let sub = match &graph.node(*n).op {
            Op::Subgraph { name } => graph.subgraphs.get(name),
            _ => None,
        };
        match sub {
            Some(g) => {
                let b = beyond(g, kernels);
                all.unknown |= b.unknown;
                all.random |= b.random;
                all.external |= b.external;
            }
            // A subgraph not found here: anything.
            None => all.unknown = true,
        }
    }
    if all.external {
        e.reads.push((Storage::External, None));
        e.writes.push((Storage::External, None));
    }
    if all.random {
        e.reads.push((Storage::Random, None));
        e.writes.push((Storage::Random, None));
    }
    if all.unknown {
        e.writes.push((Storage::World, None));
    }
}
