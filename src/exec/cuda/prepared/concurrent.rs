//! Concurrent replay of a recording: each operation's dependencies from the
//! program's dependency DAG ([`crate::exec::dag`]) instead of a chain, and
//! the memory plan that keeps the buffers of operations that may run at
//! the same time apart.
//!
//! An operation belongs to the top-level graph node whose step made it
//! (the recorder notes [`crate::exec::Backend::begin_node`]). The
//! operations of one node stay a chain; the first depends on the last
//! operation of each node its node depends on (through nodes without
//! operations, such as allocations and views, to the operations before
//! them). Device reads are segment boundaries (see
//! [`crate::exec::cuda::graph`]), so nothing crosses them.
//!
//! Library workspaces: cuBLAS and cuBLASLt calls use their handle's
//! workspace, so two that may overlap must not share one. Each such call
//! gets a lane: lane 0 uses the handles' own workspaces, lanes 1 to
//! [`MAX_LANES`]` - 1` workspaces of their own (allocated with the
//! recording); a call takes the first lane whose last call happens before
//! it, and when every lane is busy it goes on lane 0 after that lane's last
//! call (a dependency added).
//!
//! Memory: two buffers may share arena bytes only when every operation
//! that uses one happens before every operation that uses the other (a
//! path in the DAG, or earlier in one node's chain); the recording's own
//! order no longer says that. Buffers are packed largest first at the
//! lowest offset clear of every buffer they interfere with, as the
//! single-stream plan packs by recording intervals.

use super::{Buffer, Event};
use crate::exec::cuda::library::LaneWorkspaces;
use crate::exec::cuda::{CudaBackend, Storage};
use crate::exec::dag::Dag;
use crate::exec::ExecError;
use std::sync::Arc;

/// The most (graph nodes x nodes that use buffers) bits of ancestry the
/// concurrent plan keeps (32 MiB); a larger recording replays on one stream.
const MAX_REACH_BITS: usize = 1 << 28;

/// The most buffers the concurrent plan packs (its packing is quadratic in
/// them); a recording with more replays on one stream.
const MAX_BUFFERS: usize = 20_000;

/// The most library-workspace lanes (each beyond the first holds its own
/// cuBLAS workspace, 32 MiB from compute capability 9.0).
pub(super) const MAX_LANES: usize = 4;

/// What a recording needs for concurrent replay.
#[derive(Debug)]
pub(super) struct ConcurrentPlan {
    /// For each operation, the earlier operations it depends on.
    pub(super) deps: Vec<Vec<usize>>,
    /// For each operation, its library-workspace lane (0 for all but
    /// cuBLAS and cuBLASLt calls).
    pub(super) lanes: Vec<u8>,
    /// The arena offset of each buffer.
    pub(super) offsets: Vec<u64>,
    /// The arena's bytes.
    pub(super) arena_bytes: u64,
}

/// A recording's concurrent replay: what graph capture follows.
#[derive(Debug)]
pub(in crate::exec::cuda) struct Concurrency {
    /// For each operation, the earlier operations it depends on.
    pub(in crate::exec::cuda) deps: Vec<Vec<usize>>,
    /// For each operation, its library-workspace lane.
    pub(in crate::exec::cuda) lanes: Vec<u8>,
    /// The workspaces of lanes 1 and up (`workspaces[l - 1]` is lane `l`'s).
    pub(in crate::exec::cuda) workspaces: Vec<LaneWorkspaces>,
    /// The allocations behind `workspaces`, held as long as the recording.
    _held: Vec<Arc<Storage>>,
}

impl Concurrency {
    /// Allocates the workspaces of the lanes `plan` uses beyond the first,
    /// for the libraries whose calls run on them.
    pub(super) fn new(
        backend: &mut CudaBackend,
        plan: ConcurrentPlan,
        events: &[Event],
    ) -> Result<Concurrency, ExecError> {
        let ConcurrentPlan { deps, lanes, .. } = plan;
        let count = lanes.iter().copied().max().map_or(0, usize::from);
        let (major, _) = backend.compute_capability()?;
        let blas_bytes = crate::exec::cuda::cublas::blas_workspace_bytes(major);
        let mut workspaces = vec![LaneWorkspaces::default(); count];
        let mut held = Vec::new();
        for (lane, ws) in workspaces.iter_mut().enumerate() {
            let on_lane = |library: &str| {
                events
                    .iter()
                    .zip(&lanes)
                    .any(|(e, l)| usize::from(*l) == lane + 1 && handle_workspace_library(e) == Some(library))
            };
            if on_lane("cuBLAS") {
                let s = backend.alloc_storage(blas_bytes)?;
                ws.blas = (s.ptr, blas_bytes);
                held.push(s);
            }
            if on_lane("cuBLASLt") {
                let s = backend.alloc_storage(crate::exec::cuda::blaslt::WORKSPACE_BYTES)?;
                ws.lt = s.ptr;
                held.push(s);
            }
        }
        Ok(Concurrency {
            deps,
            lanes,
            workspaces,
            _held: held,
        })
    }
}

/// The concurrent plan of a recording, or why it replays on one stream.
pub(super) fn plan(
    dag: &Dag,
    events: &[Event],
    event_nodes: &[usize],
    intra: &[Option<Vec<usize>>],
    buffers: &[Buffer],
    branches: usize,
) -> Result<ConcurrentPlan, String> {
    if event_nodes.len() != events.len() || intra.len() != events.len() || event_nodes.iter().any(|n| *n >= dag.len()) {
        return Err("the recording's operations do not match the program's DAG".into());
    }
    if buffers.len() > MAX_BUFFERS {
        return Err(format!(
            "{} buffers, more than the concurrent memory plan packs ({MAX_BUFFERS})",
            buffers.len()
        ));
    }
    if buffers.iter().flat_map(|b| &b.uses).any(|u| u.0 >= dag.len()) {
        return Err("a buffer's use is outside the program's DAG".into());
    }
    let within = within_node(event_nodes, intra);
    let mut deps = event_deps(dag, event_nodes, &within);
    let reach = Reach::new(dag, buffers)?;
    let lanes = assign_lanes(events, event_nodes, &within, &reach, &mut deps);
    reduce_transitively(&mut deps);
    if branches > 0 {
        limit_branches(&mut deps, branches);
        reduce_transitively(&mut deps);
    }
    let (offsets, arena_bytes) = pack(buffers, &reach);
    Ok(ConcurrentPlan {
        deps,
        lanes,
        offsets,
        arena_bytes,
    })
}

/// A call that uses its library handle's workspace, and which library.
pub(super) fn handle_workspace_library(event: &Event) -> Option<&'static str> {
    match event {
        Event::Library(l) => Some(l.call.library()).filter(|lib| matches!(*lib, "cuBLAS" | "cuBLASLt")),
        _ => None,
    }
}

/// Each operation's library-workspace lane (see the module
/// documentation); adds the dependencies that serialize a call when every
/// lane is busy.
fn assign_lanes(
    events: &[Event],
    event_nodes: &[usize],
    within: &[Vec<usize>],
    reach: &Reach,
    deps: &mut [Vec<usize>],
) -> Vec<u8> {
    let mut lanes = vec![0u8; events.len()];
    // The last call on each lane.
    let mut last_on: Vec<usize> = Vec::new();
    let happens_before = |f: usize, e: usize| {
        let (nf, ne) = (event_nodes[f], event_nodes[e]);
        if nf == ne {
            before_in_node(within, f, e)
        } else {
            reach.before(nf, ne)
        }
    };
    for (e, event) in events.iter().enumerate() {
        if handle_workspace_library(event).is_none() {
            continue;
        }
        let lane = match (0..last_on.len()).find(|&l| happens_before(last_on[l], e)) {
            Some(l) => l,
            None if last_on.len() < MAX_LANES => {
                last_on.push(e);
                last_on.len() - 1
            }
            None => {
                // Every lane busy: after lane 0's last call.
                if !deps[e].contains(&last_on[0]) {
                    deps[e].push(last_on[0]);
                }
                0
            }
        };
        last_on[lane] = e;
        // `lane < MAX_LANES`, which fits a byte.
        lanes[e] = lane as u8;
    }
    lanes
}

/// Each operation's dependencies among the earlier operations of its own
/// node: those `intra` gives (an op's fork, [`super::record`]), else the
/// node's operation just before it (one node's operations are a chain).
fn within_node(event_nodes: &[usize], intra: &[Option<Vec<usize>>]) -> Vec<Vec<usize>> {
    (0..event_nodes.len())
        .map(|e| match intra.get(e).and_then(Option::as_ref) {
            Some(d) => d
                .iter()
                .copied()
                .filter(|&x| x < e && event_nodes[x] == event_nodes[e])
                .collect(),
            None => e
                .checked_sub(1)
                .filter(|&p| event_nodes[p] == event_nodes[e])
                .into_iter()
                .collect(),
        })
        .collect()
}

/// Whether operation `f` comes before `e` of the same node (a path of
/// [`within_node`] dependencies).
fn before_in_node(within: &[Vec<usize>], f: usize, e: usize) -> bool {
    if f >= e {
        return false;
    }
    let mut stack = vec![e];
    let mut seen = vec![false; e - f + 1];
    while let Some(x) = stack.pop() {
        for &d in within.get(x).map(Vec::as_slice).unwrap_or_default() {
            if d == f {
                return true;
            }
            if d > f && !std::mem::replace(&mut seen[d - f], true) {
                stack.push(d);
            }
        }
    }
    false
}

/// Each operation's dependencies (see the module documentation): its
/// dependencies `within` its node, or, for an operation with none there,
/// the operations that end the nodes its node depends on.
fn event_deps(dag: &Dag, event_nodes: &[usize], within: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = dag.len();
    // The operations that end each node: those no later operation of the
    // node depends on.
    let mut depended = vec![false; event_nodes.len()];
    for d in within.iter().flatten() {
        if let Some(x) = depended.get_mut(*d) {
            *x = true;
        }
    }
    let mut leaves: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (e, &node) in event_nodes.iter().enumerate() {
        if !depended[e] {
            leaves[node].push(e);
        }
    }
    // The operations that end each node, or for a node without any, those
    // that end the nodes it depends on. Positions are a topological order.
    let mut exits: Vec<Vec<usize>> = Vec::with_capacity(n);
    for (i, own) in leaves.into_iter().enumerate() {
        let exit = if own.is_empty() {
            let mut all: Vec<usize> = dag
                .predecessors(i)
                .iter()
                .flat_map(|p| exits[*p].iter().copied())
                .collect();
            all.sort_unstable();
            all.dedup();
            all
        } else {
            own
        };
        exits.push(exit);
    }
    let mut deps = Vec::with_capacity(event_nodes.len());
    for (e, &node) in event_nodes.iter().enumerate() {
        let d: Vec<usize> = match within.get(e) {
            Some(w) if !w.is_empty() => w.clone(),
            _ => {
                let mut all: Vec<usize> = dag
                    .predecessors(node)
                    .iter()
                    .flat_map(|p| exits[*p].iter().copied())
                    .filter(|x| *x < e)
                    .collect();
                all.sort_unstable();
                all.dedup();
                all
            }
        };
        deps.push(d);
    }
    deps
}

/// Drops each dependency that another dependency of the same operation
/// already implies (a path from it through that other one): the order is
/// the same, with fewer graph edges, and each edge a graph node waits on
/// is a join the driver pays for at every replay. Operations are in a
/// topological order (each depends on earlier ones only). Past
/// [`MAX_REACH_BITS`] bits of ancestry the dependencies stay as they are.
fn reduce_transitively(deps: &mut [Vec<usize>]) {
    let n = deps.len();
    let words = n.div_ceil(64);
    if n.checked_mul(words.saturating_mul(64))
        .is_none_or(|bits| bits > MAX_REACH_BITS)
    {
        return;
    }
    // `ancestors[e * words..]`: every operation with a path to `e`.
    let mut ancestors = vec![0u64; n * words];
    for e in 0..n {
        let mut mine = vec![0u64; words];
        let mut kept = Vec::new();
        let mut direct = std::mem::take(&mut deps[e]);
        // Latest first: a dependency can only be implied by a later one.
        direct.sort_unstable_by(|a, b| b.cmp(a));
        direct.dedup();
        for d in direct {
            if d >= e {
                // Not an earlier operation: kept as it was, nothing inferred.
                kept.push(d);
                continue;
            }
            if mine[d / 64] >> (d % 64) & 1 == 1 {
                continue;
            }
            kept.push(d);
            mine[d / 64] |= 1 << (d % 64);
            for (m, a) in mine.iter_mut().zip(&ancestors[d * words..(d + 1) * words]) {
                *m |= a;
            }
        }
        kept.sort_unstable();
        ancestors[e * words..(e + 1) * words].copy_from_slice(&mine);
        deps[e] = kept;
    }
}

/// Lays the operations on at most `branches` chains, in order: an
/// operation continues the chain of its latest dependency that ends a
/// chain, else starts a free chain, else follows the chain that has ended
/// longest ago; it then depends on that chain's last operation. Only
/// dependencies are added, so every order the DAG requires stays.
fn limit_branches(deps: &mut [Vec<usize>], branches: usize) {
    let mut tails: Vec<Option<usize>> = vec![None; branches.max(1)];
    for e in 0..deps.len() {
        let mine = &mut deps[e];
        let continues = (0..tails.len())
            .filter(|c| tails[*c].is_some_and(|t| mine.contains(&t)))
            .max_by_key(|c| tails[*c]);
        let chain = continues
            .or_else(|| tails.iter().position(Option::is_none))
            .or_else(|| (0..tails.len()).min_by_key(|c| tails[*c]))
            .unwrap_or(0);
        if let Some(tail) = tails.get(chain).copied().flatten() {
            if !mine.contains(&tail) {
                mine.push(tail);
                mine.sort_unstable();
            }
        }
        if let Some(slot) = tails.get_mut(chain) {
            *slot = Some(e);
        }
    }
}

/// Which graph nodes that use buffers come before which: for every node,
/// the set of its strict ancestors among the nodes that use buffers.
struct Reach {
    /// The index of each graph node among those that use buffers.
    index: Vec<Option<usize>>,
    /// `words` words per graph node.
    bits: Vec<u64>,
    words: usize,
}

impl Reach {
    fn new(dag: &Dag, buffers: &[Buffer]) -> Result<Reach, String> {
        let n = dag.len();
        let mut index = vec![None; n];
        let mut k = 0usize;
        for b in buffers {
            for u in &b.uses {
                if index[u.0].is_none() {
                    index[u.0] = Some(k);
                    k += 1;
                }
            }
        }
        let words = k.div_ceil(64);
        if n.saturating_mul(words).saturating_mul(64) > MAX_REACH_BITS {
            return Err(format!(
                "{n} graph nodes by {k} nodes that use buffers, more than the concurrent memory plan tracks"
            ));
        }
        let mut bits = vec![0u64; n * words];
        for i in 0..n {
            for &p in dag.predecessors(i) {
                // Edges go forwards: `p < i`, so `p`'s row is final.
                let (before, after) = bits.split_at_mut(i * words);
                let row = &mut after[..words];
                row.iter_mut()
                    .zip(&before[p * words..(p + 1) * words])
                    .for_each(|(a, b)| *a |= b);
                if let Some(bit) = index[p] {
                    row[bit / 64] |= 1 << (bit % 64);
                }
            }
        }
        Ok(Reach { index, bits, words })
    }

    /// `a` is a strict ancestor of `b` (both nodes that use buffers).
    fn before(&self, a: usize, b: usize) -> bool {
        match self.index.get(a).copied().flatten() {
            Some(bit) => self
                .bits
                .get(b * self.words + bit / 64)
                .is_some_and(|w| w & (1 << (bit % 64)) != 0),
            None => false,
        }
    }
}

/// Every use of `x` happens before every use of `y`.
fn all_before(x: &Buffer, y: &Buffer, reach: &Reach) -> bool {
    if x.last == usize::MAX {
        // An output lives past every operation.
        return false;
    }
    x.uses.iter().all(|&(nx, _, lx)| {
        y.uses
            .iter()
            .all(|&(ny, fy, _)| if nx == ny { lx < fy } else { reach.before(nx, ny) })
    })
}

/// Two buffers may be live at the same time in some order the DAG allows.
fn interfere(x: &Buffer, y: &Buffer, reach: &Reach) -> bool {
    let unused_output = |b: &Buffer| b.last == usize::MAX && b.uses.is_empty();
    unused_output(x) || unused_output(y) || !(all_before(x, y, reach) || all_before(y, x, reach))
}

/// Offsets for `buffers` in one arena, interfering buffers apart. Returns
/// the offsets and the arena size.
fn pack(buffers: &[Buffer], reach: &Reach) -> (Vec<u64>, u64) {
    super::pack_apart(buffers, |x, y| interfere(x, y, reach))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two kernels that read one input and write a buffer each (nodes 3
    /// and 5), then an add of both (node 6): the DAG of
    /// `tests/cases/dag.txt`'s `two_independent_branches`.
    fn two_branches() -> Dag {
        let text = "wrapir 1
kernel k: cpp {
  arg_types 'const float*', 'float*'
}

graph main(arg0_1: f32[16][1]@cpu) -> (buf2) {
  buffer buf0: f32[16][1]@cpu
  buffer buf1: f32[16][1]@cpu
  buffer buf2: f32[16][1]@cpu
  define k
  alloc buf0
  call k(arg0_1, buf0) @cpu
  alloc buf1
  call k(arg0_1, buf1) @cpu
  extern buf2 = torch.ops.aten.add.Tensor(buf0, buf1)
  free buf0
  free buf1
}
";
        let program = crate::text::parse(text).expect("parses");
        let info = crate::ir::validate(&program).expect("valid");
        let graph = crate::lower::fx::lower(&info, &Default::default()).expect("lowers");
        let dag = Dag::build(&graph, &program.kernels).expect("a DAG");
        assert_eq!(dag.nodes()[3].what, "call k");
        assert_eq!(dag.nodes()[5].what, "call k");
        assert_eq!(dag.nodes()[6].what, "extern torch.ops.aten.add.Tensor");
        dag
    }

    fn buffer(bytes: u64, uses: &[(usize, usize)]) -> Buffer {
        Buffer {
            _storage: None,
            bytes,
            first: uses.first().map_or(0, |u| u.1),
            last: uses.last().map_or(0, |u| u.1),
            uses: uses.iter().map(|&(node, e)| (node, e, e)).collect(),
        }
    }

    /// The kernels of the two branches (events 0 and 1) depend on nothing
    /// the other does; the add (event 2) on both; a second operation of
    /// one node follows the first.
    #[test]
    fn operations_depend_only_on_what_the_dag_orders_them_after() {
        let dag = two_branches();
        let deps = |nodes: &[usize], intra: &[Option<Vec<usize>>]| event_deps(&dag, nodes, &within_node(nodes, intra));
        assert_eq!(deps(&[3, 5, 6], &[None, None, None]), [vec![], vec![], vec![0, 1]]);
        assert_eq!(
            deps(&[3, 5, 5, 6], &[None, None, None, None]),
            [vec![], vec![], vec![1], vec![0, 2]]
        );
    }

    /// An op's fork: node 5 zeroes (event 1), forks three GEMMs (2, 3, 4)
    /// that each depend on the zeroing only, joins, and a last operation (5)
    /// depends on all three; node 6's operation depends on node 3's and on
    /// node 5's last. Without the last operation, node 6 depends on every
    /// GEMM. Within the node, the GEMMs are unordered with each other.
    #[test]
    fn a_fork_leaves_its_operations_unordered_with_each_other() {
        let dag = two_branches();
        let fork = Some(vec![1]);
        let intra = [
            None,
            None,
            fork.clone(),
            fork.clone(),
            fork.clone(),
            Some(vec![2, 3, 4]),
            None,
        ];
        let nodes = [3, 5, 5, 5, 5, 5, 6];
        let within = within_node(&nodes, &intra);
        assert_eq!(
            event_deps(&dag, &nodes, &within),
            [vec![], vec![], vec![1], vec![1], vec![1], vec![2, 3, 4], vec![0, 5]]
        );
        assert!(before_in_node(&within, 1, 5) && before_in_node(&within, 2, 5));
        assert!(!before_in_node(&within, 2, 3) && !before_in_node(&within, 3, 4));
        let nodes = [3, 5, 5, 5, 5, 6];
        let intra = [None, None, fork.clone(), fork.clone(), fork, None];
        let within = within_node(&nodes, &intra);
        assert_eq!(event_deps(&dag, &nodes, &within)[5], [0, 2, 3, 4]);
        // A fork at a node's start: its operations take the node's own dependencies.
        let nodes = [3, 5, 6, 6];
        let intra = [None, None, Some(vec![]), Some(vec![])];
        assert_eq!(
            event_deps(&dag, &nodes, &within_node(&nodes, &intra)),
            [vec![], vec![], vec![0, 1], vec![0, 1]]
        );
    }

    /// A dependency another one implies is dropped; the order (every
    /// path) stays: 0 -> 1 -> 2 and 0 -> 2 keeps 1 -> 2 only; a diamond
    /// keeps both sides; 4 depends on 3 and, through it, on everything.
    #[test]
    fn implied_dependencies_are_dropped_and_paths_kept() {
        let mut deps = vec![vec![], vec![0], vec![0, 1], vec![1, 2, 0], vec![3, 0, 2], vec![1]];
        reduce_transitively(&mut deps);
        assert_eq!(deps, [vec![], vec![0], vec![1], vec![2], vec![3], vec![1]]);
        let mut diamond = vec![vec![], vec![0], vec![0], vec![1, 2, 0]];
        reduce_transitively(&mut diamond);
        assert_eq!(diamond, [vec![], vec![0], vec![0], vec![1, 2]]);
    }

    /// One branch is one chain; two keep the two independent operations of
    /// a diamond apart and join them, and a third independent operation
    /// follows the chain that ended longest ago.
    #[test]
    fn branches_are_limited_by_chaining() {
        let diamond = || vec![vec![], vec![0], vec![0], vec![1, 2]];
        let mut one = diamond();
        limit_branches(&mut one, 1);
        reduce_transitively(&mut one);
        assert_eq!(one, [vec![], vec![0], vec![1], vec![2]]);
        let mut two = diamond();
        limit_branches(&mut two, 2);
        reduce_transitively(&mut two);
        assert_eq!(two, [vec![], vec![0], vec![0], vec![1, 2]]);
        // Three independent operations on two chains: the third follows the first.
        let mut three = vec![vec![], vec![], vec![]];
        limit_branches(&mut three, 2);
        assert_eq!(three, [vec![], vec![], vec![0]]);
    }

    /// The branches' buffers, live at disjoint events in the recording,
    /// share memory in the single-stream plan but not in the concurrent
    /// one; the add's buffer, whose uses all follow the first branch's,
    /// may share the first branch's memory; an output shares nothing.
    #[test]
    fn buffers_of_independent_nodes_never_share_memory() {
        let dag = two_branches();
        let buffers = [
            buffer(1024, &[(3, 0), (6, 2)]),
            buffer(1024, &[(5, 1), (6, 2)]),
            buffer(1024, &[(6, 2)]),
        ];
        let reach = Reach::new(&dag, &buffers).expect("small");
        assert!(reach.before(3, 6) && reach.before(5, 6));
        assert!(!reach.before(3, 5) && !reach.before(5, 3) && !reach.before(6, 3));
        assert!(interfere(&buffers[0], &buffers[1], &reach));
        // Buffer 2 is used by node 6 alone, as are the others' last uses.
        assert!(interfere(&buffers[0], &buffers[2], &reach));

        let only_first = [
            buffer(1024, &[(3, 0)]),
            buffer(1024, &[(5, 1)]),
            buffer(1024, &[(6, 2)]),
        ];
        let reach = Reach::new(&dag, &only_first).expect("small");
        let (offsets, bytes) = pack(&only_first, &reach);
        assert_ne!(offsets[0], offsets[1], "concurrent branches apart");
        assert_eq!(offsets[2], offsets[0], "the add's buffer reuses the first branch's");
        assert_eq!(bytes, 2048);
        // The single-stream plan packs all three into one place.
        let (single, single_bytes) = super::super::pack(&only_first);
        assert_eq!((single, single_bytes), (vec![0, 0, 0], 1024));

        let mut output = buffer(1024, &[(3, 0)]);
        output.last = usize::MAX;
        let later = buffer(1024, &[(6, 2)]);
        assert!(interfere(&output, &later, &reach));
    }
}
