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
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;

/// Most node storages one footprint lists. A value that may alias more (an
/// unknown op's or a `cond`'s result aliases every operand's storages, so a
/// chain of them aliases every storage before it) has their storages merged
/// into one alias class ([`Footprints`]), which accesses then treat as one
/// storage: more edges, never fewer, and footprints (and the accesses
/// through them) stay bounded instead of growing with the chain.
const MAX_FOOTPRINT: usize = 64;

/// The bytes of a storage a view spans; `None`: anywhere in it (unknown,
/// or an access that is not confined to its view).
pub(super) type Extent = Option<Span>;

/// Bytes of a storage: within `[start, end)` and, with a `pitch`
/// `(p, lo, hi)`, only bytes `b` with `lo <= b % p < hi` (a slice of the
/// rows of a buffer: a column block of a matrix, some channels of a
/// channels-last image, one input's channels of a concatenation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Span {
    start: u64,
    end: u64,
    pitch: Option<(u64, u64, u64)>,
}

impl Span {
    /// The first byte.
    pub(super) fn start(&self) -> u64 {
        self.start
    }

    /// One past the last byte.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// Whether two spans of one storage may share a byte.
    pub(super) fn overlaps(&self, other: &Span) -> bool {
        if !(self.start < other.end && other.start < self.end) {
            return false;
        }
        match (self.pitch, other.pitch) {
            (Some((p, lo, hi)), Some((q, lo2, hi2))) if p == q => lo < hi2 && lo2 < hi,
            _ => true,
        }
    }
}

/// Where a value may lie: storages, each with the bytes of it the value
/// spans; a few inline.
pub(super) type Storages = SmallVec<[(Storage, Extent); 2]>;

/// One storage access: the storage, the bytes touched, and the argument
/// (node) it goes through, if any.
pub(super) type Touch = (Storage, Extent, Option<NodeId>);

/// What a node reads and writes, and why (for the edges' reasons).
#[derive(Clone, Debug, Default)]
pub(super) struct Effects {
    /// Storages read.
    pub(super) reads: Vec<Touch>,
    /// Storages written.
    pub(super) writes: Vec<Touch>,
    /// The node does device work (a launch, a library or extern call, a
    /// device read): what the summary's critical path and width count.
    pub(super) work: bool,
}

/// `footprint`'s places; with `exact` false (an access that may reach past
/// its view), each whole storage.
fn places(footprint: &[(Storage, Extent)], exact: bool) -> impl Iterator<Item = (Storage, Extent)> + '_ {
    footprint.iter().map(move |(s, x)| (*s, if exact { *x } else { None }))
}

impl Effects {
    fn read(&mut self, footprint: &[(Storage, Extent)], exact: bool, via: Option<NodeId>) {
        self.reads.extend(places(footprint, exact).map(|(s, x)| (s, x, via)));
    }

    fn write(&mut self, footprint: &[(Storage, Extent)], exact: bool, via: Option<NodeId>) {
        self.writes.extend(places(footprint, exact).map(|(s, x)| (s, x, via)));
    }

    /// Reads and writes every storage `arg` reaches.
    fn read_write_arg(&mut self, arg: &Arg, footprints: &Footprints, exact: bool) {
        arg.for_each_node(&mut |n| {
            let f = footprints.of(n);
            self.read(f, exact, Some(n));
            self.write(f, exact, Some(n));
        });
    }

    fn read_arg(&mut self, arg: &Arg, footprints: &Footprints, exact: bool) {
        arg.for_each_node(&mut |n| self.read(footprints.of(n), exact, Some(n)));
    }

    /// A kernel's argument at `position` or named `name`: read, or read
    /// and written unless the kernel only reads it ([`kernel_reads_only`]).
    fn kernel_arg(
        &mut self,
        def: Option<&KernelDef>,
        at: (Option<usize>, Option<&str>),
        arg: &Arg,
        footprints: &Footprints,
    ) {
        let exact = stays_in_its_views(def);
        if kernel_reads_only(def, at.0, at.1) {
            self.read_arg(arg, footprints, exact);
        } else {
            self.read_write_arg(arg, footprints, exact);
        }
    }
}

/// The footprint of each node's value: where it may lie (empty for
/// integers, symbols and nodes without a value), and the alias classes of
/// node storages: a footprint of more than [`MAX_FOOTPRINT`] node storages
/// merges them into one class, named by one of them (its representative).
/// Footprints list storages as they were when recorded; [`Self::resolve`]
/// gives the class a storage is in now.
pub(super) struct Footprints {
    by_node: Vec<Storages>,
    /// A merged node storage's class (by position): the storage it was
    /// merged into (a representative, or one that was merged further).
    merged_into: HashMap<usize, usize>,
    /// Merges since [`Self::take_merges`]: (storage, its representative).
    merges: Vec<(usize, usize)>,
    /// Each subgraph's [`Beyond`], by address ([`beyond`]): a subgraph run
    /// by n nodes is looked at once, not n times.
    beyond: HashMap<usize, Beyond>,
}

impl Footprints {
    pub(super) fn new(arena_len: usize) -> Self {
        Footprints {
            by_node: vec![Storages::new(); arena_len],
            merged_into: HashMap::default(),
            merges: Vec::new(),
            beyond: HashMap::default(),
        }
    }

    pub(super) fn of(&self, n: NodeId) -> &[(Storage, Extent)] {
        self.by_node.get(n.index()).map(|s| s.as_slice()).unwrap_or(&[])
    }

    /// The storage that stands for `s`'s alias class (`s` unless merged).
    pub(super) fn resolve(&mut self, s: Storage) -> Storage {
        let Storage::Node(mut p) = s else { return s };
        let start = p;
        while let Some(&next) = self.merged_into.get(&p) {
            p = next;
        }
        // Path compression: the chain walked points at the representative.
        let mut q = start;
        while let Some(next) = self.merged_into.get(&q).copied() {
            if next != p {
                self.merged_into.insert(q, p);
            }
            q = next;
        }
        Storage::Node(p)
    }

    /// The merges since the last call: (storage, the representative its
    /// accesses now count against).
    pub(super) fn take_merges(&mut self) -> Vec<(usize, usize)> {
        std::mem::take(&mut self.merges)
    }

    fn set(&mut self, n: NodeId, storages: Storages) {
        let storages = self.bounded(storages);
        if let Some(slot) = self.by_node.get_mut(n.index()) {
            *slot = storages;
        }
    }

    /// `storages` with its node storages (as classes) merged into one
    /// whole class when there are more than [`MAX_FOOTPRINT`].
    fn bounded(&mut self, storages: Storages) -> Storages {
        let nodes = storages.iter().filter(|(s, _)| matches!(s, Storage::Node(_))).count();
        if nodes <= MAX_FOOTPRINT {
            return storages;
        }
        let mut out = Storages::new();
        let mut rep = None;
        for (s, x) in storages {
            match self.resolve(s) {
                Storage::Node(p) => match rep {
                    None => rep = Some(p),
                    Some(r) if r != p => {
                        self.merged_into.insert(p, r);
                        self.merges.push((p, r));
                    }
                    Some(_) => {}
                },
                other => {
                    if !out.contains(&(other, x)) {
                        out.push((other, x));
                    }
                }
            }
        }
        if let Some(r) = rep {
            out.push((Storage::Node(r), None));
        }
        out
    }

    /// The union of the footprints of every node `args` reach (with
    /// `exact` false, whole storages), each storage as its class.
    fn union<'a>(&mut self, args: impl IntoIterator<Item = &'a Arg>, exact: bool) -> Storages {
        let mut nodes = Vec::new();
        for a in args {
            a.for_each_node(&mut |n| nodes.push(n));
        }
        let mut out = Storages::new();
        let mut seen: HashSet<(Storage, Extent)> = HashSet::default();
        for n in nodes {
            for k in 0..self.of(n).len() {
                let (s, x) = self.of(n)[k];
                let p = (self.resolve(s), if exact { x } else { None });
                if seen.insert(p) {
                    out.push(p);
                }
            }
        }
        out
    }
}

/// The bytes an `as_strided` view with literal sizes, strides and offset
/// spans (`as_strided`'s offset is absolute in the storage, in elements of
/// the view's dtype); `None` when one is not a literal, a size or stride is
/// negative, or the arithmetic overflows. An empty view spans no bytes.
fn strided_extent(a: &crate::fx::AsStrided, element_bytes: u64) -> Extent {
    let int = |x: &Arg| match x {
        Arg::Int(v) => u64::try_from(*v).ok(),
        _ => None,
    };
    let offset = int(&a.offset)?;
    if a.size.len() != a.stride.len() {
        return None;
    }
    let mut dims = Vec::with_capacity(a.size.len());
    for (size, stride) in a.size.iter().zip(a.stride.iter()) {
        let (size, stride) = (int(size)?, int(stride)?);
        if size == 0 {
            return Some(Span {
                start: 0,
                end: 0,
                pitch: None,
            });
        }
        if size > 1 {
            dims.push((size, stride));
        }
    }
    let mut last = 0u64;
    for (size, stride) in &dims {
        last = last.checked_add((size - 1).checked_mul(*stride)?)?;
    }
    let start = offset.checked_mul(element_bytes)?;
    let end = offset.checked_add(last)?.checked_add(1)?.checked_mul(element_bytes)?;
    Some(Span {
        start,
        end,
        pitch: row_pitch(&mut dims, offset).and_then(|(p, lo, hi)| {
            Some((
                p.checked_mul(element_bytes)?,
                lo.checked_mul(element_bytes)?,
                hi.checked_mul(element_bytes)?,
            ))
        }),
    })
}

/// For a view whose innermost dimensions (merged where contiguous) are one
/// contiguous run of `w` elements and whose other strides are multiples of
/// a pitch `p`: `(p, lo, lo + w)` with `lo = offset % p`, when the run does
/// not wrap (every element `e` of the view has `lo <= e % p < lo + w`).
/// `dims` are (size, stride) pairs of sizes above 1.
fn row_pitch(dims: &mut [(u64, u64)], offset: u64) -> Option<(u64, u64, u64)> {
    dims.sort_by_key(|d| d.1);
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(dims.len());
    for &(size, stride) in dims.iter() {
        match merged.last_mut() {
            Some(inner) if Some(stride) == inner.1.checked_mul(inner.0) => inner.0 = inner.0.checked_mul(size)?,
            _ => merged.push((size, stride)),
        }
    }
    let (&(w, 1), outer) = merged.split_first()? else {
        return None;
    };
    let p = outer.iter().map(|d| d.1).reduce(gcd)?;
    if p == 0 {
        return None;
    }
    let lo = offset % p;
    (lo.checked_add(w)? <= p).then_some((p, lo, lo + w))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
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
        | BiasAddmm
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
        | Histc
        | GroupedMmFallback
        | GroupedMm
        | Sort
        | IntMm
        | ScaledMm
        | MkldnnRnnLayer
        | Clone
        | Neg
        | Relu
        | Exp
        | Sin
        | Where
        | RoiAlign
        | Nms => ExternAccess::Fresh,
        // Named so that cuDNN plans are made for it; neither backend runs it.
        ConvolutionInternal | Other => ExternAccess::Unknown,
        // Its fifth result is its `weight_buf` argument when one is given
        // (PyTorch returns the buffer it ran on): an alias `Fresh` does not
        // describe, so it orders as an unknown op.
        CudnnRnn => ExternAccess::Unknown,
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

/// Whether a kernel touches only the elements of the views it is given
/// (Inductor's own Triton, C++ and Halide kernels index their arguments by
/// their layouts); a user-defined Triton kernel, CUDA C or host kernel may
/// compute any address in the storages it gets.
fn stays_in_its_views(def: Option<&KernelDef>) -> bool {
    match def.map(|d| &d.backend) {
        Some(KernelBackend::Triton(meta)) => !meta.user_defined,
        Some(KernelBackend::Cpp(_)) | Some(KernelBackend::Halide(_)) => true,
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
/// looked at once, however many nodes run it: `memo` holds each graph's,
/// by address, for as long as the graphs are borrowed).
pub(super) fn beyond(graph: &Graph, memo: &mut HashMap<usize, Beyond>) -> Beyond {
    let key = graph as *const Graph as usize;
    if let Some(b) = memo.get(&key) {
        return *b;
    }
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
        let b = beyond(sub, memo);
        out.unknown |= b.unknown;
        out.random |= b.random;
        out.external |= b.external;
    }
    memo.insert(key, out);
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
    let fresh = || -> Storages { smallvec::smallvec![(Storage::Node(position), None)] };
    let mut e = Effects::default();
    let footprint: Storages = match &node.op {
        Op::Placeholder(crate::fx::Placeholder::Tensor(_)) | Op::Constant { .. } => {
            smallvec::smallvec![(Storage::External, None)]
        }
        // A symbol or integer input is an integer: no storage.
        Op::Placeholder(crate::fx::Placeholder::Symbol(_) | crate::fx::Placeholder::Integer(_)) => Storages::new(),
        Op::Subgraph { .. } | Op::Output { .. } => Storages::new(),
        Op::EmptyStrided(_) => fresh(),
        Op::AsStrided(a) => {
            // The view's bytes where its layout is literal; anywhere in the
            // base's storages otherwise (`as_strided` is not confined to
            // its base's view).
            // Only where the view and its base declare one dtype: the
            // backends' `as_strided` keeps the base's (a reuse that changes
            // the dtype would touch the base's elements).
            let dtype = |v: &Option<crate::fx::Val>| match v {
                Some(crate::fx::Val::Tensor(layout)) => Some(layout.dtype),
                _ => None,
            };
            let element_bytes = match (dtype(&node.val), dtype(&graph.node(a.base).val)) {
                (Some(d), Some(base)) if d == base => Some(d.size_bytes()),
                _ => None,
            };
            let extent = element_bytes.and_then(|b| strided_extent(a, b));
            footprints
                .of(a.base)
                .iter()
                .map(|(s, _)| match s {
                    Storage::Node(_) => (*s, extent),
                    _ => (*s, None),
                })
                .collect()
        }
        Op::TritonKernel { kernel, kwargs, .. } => {
            let def = kernels.get(kernel);
            e.work = true;
            for (name, arg) in kwargs.iter() {
                e.kernel_arg(def, (None, Some(name.as_str())), arg, footprints);
            }
            Storages::new()
        }
        Op::KernelCall { kernel, args, kwargs } => {
            let def = kernels.get(kernel);
            e.work = true;
            for (i, arg) in args.iter().enumerate() {
                e.kernel_arg(def, (Some(i), None), arg, footprints);
            }
            for (name, arg) in kwargs.iter() {
                e.kernel_arg(def, (None, Some(name.as_str())), arg, footprints);
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
            e.read(footprints.of(*tensor), true, Some(*tensor));
            Storages::new()
        }
        Op::Cond(c) => {
            control_effects(
                graph,
                [&c.pred],
                &[c.true_graph, c.false_graph],
                &c.operands,
                footprints,
                &mut e,
            );
            let mut f = footprints.union(&c.operands, false);
            f.push((Storage::Node(position), None));
            f
        }
        Op::Switch(sw) => {
            control_effects(graph, [&sw.index], &sw.branches, &sw.operands, footprints, &mut e);
            let mut f = footprints.union(&sw.operands, false);
            f.push((Storage::Node(position), None));
            f
        }
        Op::WhileLoop(w) => {
            let operands: Vec<Arg> = w.carried.iter().chain(&w.additional).cloned().collect();
            control_effects(graph, [], &[w.cond_graph, w.body_graph], &operands, footprints, &mut e);
            let mut f = footprints.union(&operands, false);
            f.push((Storage::Node(position), None));
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
    footprints: &mut Footprints,
    e: &mut Effects,
) -> Storages {
    let access = extern_access(target);
    e.work = access != ExternAccess::View;
    // A known op touches the elements of its tensors' views only.
    let exact = access != ExternAccess::Unknown;
    let mut result: Storages = smallvec::smallvec![(Storage::Node(position), None)];
    match access {
        ExternAccess::Fresh | ExternAccess::Random => {
            args.iter().for_each(|a| e.read_arg(a, footprints, exact));
            kwargs.values().for_each(|a| e.read_write_arg(a, footprints, exact));
            if access == ExternAccess::Random {
                e.reads.push((Storage::Random, None, None));
                e.writes.push((Storage::Random, None, None));
            }
        }
        ExternAccess::View => {
            // No bytes touched; later accesses through the result reach the
            // arguments' bytes (a view of a view spans the same bytes).
            result = footprints.union(args.iter().chain(kwargs.values()), true);
        }
        ExternAccess::InPlace => {
            let mut rest = args.iter();
            if let Some(first) = rest.next() {
                e.read_write_arg(first, footprints, exact);
                result = footprints.union([first], true);
            }
            rest.for_each(|a| e.read_arg(a, footprints, exact));
            kwargs.values().for_each(|a| e.read_write_arg(a, footprints, exact));
        }
        ExternAccess::Unknown => {
            args.iter().chain(kwargs.values()).for_each(|a| {
                e.read_write_arg(a, footprints, exact);
            });
            // The union holds no storage of this node's (not defined yet).
            result.extend(footprints.union(args.iter().chain(kwargs.values()), false));
            e.writes.push((Storage::World, None, None));
        }
    }
    // A view's result is written by nobody here.
    if access != ExternAccess::View {
        e.write(&[(Storage::Node(position), None)], true, None);
    }
    result
}

/// A `cond`, `switch` or `while_loop`: reads its predicate, reads and writes
/// every operand's storages (its subgraphs may write them, and its result
/// may alias them), and whatever its subgraphs do beyond them.
fn control_effects<'a>(
    graph: &Graph,
    predicates: impl IntoIterator<Item = &'a Arg>,
    subgraph_nodes: &[NodeId],
    operands: &[Arg],
    footprints: &mut Footprints,
    e: &mut Effects,
) {
    e.work = true;
    predicates.into_iter().for_each(|p| e.read_arg(p, footprints, false));
    operands.iter().for_each(|a| e.read_write_arg(a, footprints, false));
    let mut all = Beyond::default();
    for n in subgraph_nodes {
        let sub = match &graph.node(*n).op {
            Op::Subgraph { name } => graph.subgraphs.get(name),
            _ => None,
        };
        match sub {
            Some(g) => {
                let b = beyond(g, &mut footprints.beyond);
                all.unknown |= b.unknown;
                all.random |= b.random;
                all.external |= b.external;
            }
            // A subgraph not found here: anything.
            None => all.unknown = true,
        }
    }
    if all.external {
        e.reads.push((Storage::External, None, None));
        e.writes.push((Storage::External, None, None));
    }
    if all.random {
        e.reads.push((Storage::Random, None, None));
        e.writes.push((Storage::Random, None, None));
    }
    if all.unknown {
        e.writes.push((Storage::World, None, None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn view(size: &[i64], stride: &[i64], offset: i64) -> crate::fx::AsStrided {
        crate::fx::AsStrided {
            base: crate::fx::Graph::new().push(
                "x",
                Op::Output {
                    values: vec![],
                    as_list: false,
                },
                None,
            ),
            size: size.iter().map(|v| Arg::Int(*v)).collect(),
            stride: stride.iter().map(|v| Arg::Int(*v)).collect(),
            offset: Arg::Int(offset),
        }
    }

    /// Every byte of every element a view reaches.
    fn bytes(size: &[i64], stride: &[i64], offset: i64, element: u64) -> BTreeSet<u64> {
        let mut out = BTreeSet::new();
        let total: i64 = size.iter().product();
        for mut flat in 0..total {
            let mut e = offset;
            for (s, st) in size.iter().zip(stride).rev() {
                e += (flat % s) * st;
                flat /= s;
            }
            for b in 0..element {
                out.insert(e as u64 * element + b);
            }
        }
        out
    }

    /// The spans of small views of every shape (up to 3 dimensions, sizes
    /// and strides 0 to 4, offsets 0 to 7, elements of 1 and 4 bytes) are
    /// sound: whenever two views share a byte, their spans overlap.
    #[test]
    fn spans_overlap_wherever_views_share_a_byte() {
        let mut views = Vec::new();
        for rank in 1..=3usize {
            let choices = 5i64.pow(2 * rank as u32);
            for code in 0..choices {
                let (mut size, mut stride, mut c) = (Vec::new(), Vec::new(), code);
                for _ in 0..rank {
                    size.push(c % 5);
                    c /= 5;
                    stride.push(c % 5);
                    c /= 5;
                }
                for offset in [0, 1, 3, 6] {
                    views.push((size.clone(), stride.clone(), offset));
                }
            }
        }
        // A deterministic sample of pairs (every 97th view against every 89th).
        let mut checked = 0;
        for element in [1u64, 4] {
            // Only the views the pairs below use.
            let spans: Vec<Option<(Extent, BTreeSet<u64>)>> = views
                .iter()
                .enumerate()
                .map(|(k, (s, st, o))| {
                    (k % 97 == 0 || k % 89 == 0)
                        .then(|| (strided_extent(&view(s, st, *o), element), bytes(s, st, *o, element)))
                })
                .collect();
            for i in (0..spans.len()).step_by(97) {
                for j in (0..spans.len()).step_by(89) {
                    let (Some((a, ba)), Some((b, bb))) = (&spans[i], &spans[j]) else {
                        continue;
                    };
                    let shared = ba.intersection(bb).next().is_some();
                    let said = match (a, b) {
                        (Some(x), Some(y)) => x.overlaps(y),
                        _ => true,
                    };
                    assert!(
                        !shared || said,
                        "{:?} and {:?}: share a byte, spans {a:?} {b:?}",
                        views[i],
                        views[j]
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    /// Column blocks of a matrix and channel blocks of a channels-last
    /// image are apart; blocks that share columns, or a block that wraps
    /// past a row, are not.
    #[test]
    fn column_and_channel_blocks_are_apart() {
        let span = |size: &[i64], stride: &[i64], offset: i64| strided_extent(&view(size, stride, offset), 4).unwrap();
        // cat along dim 1 of a [16, 32] buffer: [16, 12] at column 0, [16, 20] at 12.
        assert!(!span(&[16, 12], &[32, 1], 0).overlaps(&span(&[16, 20], &[32, 1], 12)));
        assert!(span(&[16, 13], &[32, 1], 0).overlaps(&span(&[16, 20], &[32, 1], 12)));
        // NHWC [2, 4, 4, 8] concatenation of 3 + 5 channels.
        let (a, b) = (
            span(&[2, 4, 4, 3], &[128, 32, 8, 1], 0),
            span(&[2, 4, 4, 5], &[128, 32, 8, 1], 3),
        );
        assert!(!a.overlaps(&b));
        // NCHW [2, 8, 4, 4] concatenation of 3 + 5 channels: contiguous per image.
        let (a, b) = (
            span(&[2, 3, 4, 4], &[128, 16, 4, 1], 0),
            span(&[2, 5, 4, 4], &[128, 16, 4, 1], 48),
        );
        assert!(!a.overlaps(&b));
        // A run wrapping past its row has no pitch.
        assert_eq!(span(&[4, 6], &[8, 1], 5).pitch, None);
    }
}
