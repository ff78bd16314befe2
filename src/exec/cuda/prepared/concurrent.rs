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
//! them). The cuBLAS and cuBLASLt calls stay ordered among themselves: they
//! share the handle's workspace. Device reads are segment boundaries (see
//! [`crate::exec::cuda::graph`]), so nothing crosses them.
//!
//! Memory: two buffers may share arena bytes only when every operation
//! that uses one happens before every operation that uses the other (a
//! path in the DAG, or earlier in one node's chain); the recording's own
//! order no longer says that. Buffers are packed largest first at the
//! lowest offset clear of every buffer they interfere with, as the
//! single-stream plan packs by recording intervals.

use super::{Buffer, Event, ARENA_ALIGN};
use crate::exec::dag::Dag;

/// The most (graph nodes x nodes that use buffers) bits of ancestry the
/// concurrent plan keeps (32 MiB); a larger recording replays on one stream.
const MAX_REACH_BITS: usize = 1 << 28;

/// The most buffers the concurrent plan packs (its packing is quadratic in
/// them); a recording with more replays on one stream.
const MAX_BUFFERS: usize = 20_000;

/// What a recording needs for concurrent replay.
#[derive(Debug)]
pub(super) struct ConcurrentPlan {
    /// For each operation, the earlier operations it depends on.
    pub(super) deps: Vec<Vec<usize>>,
    /// The arena offset of each buffer.
    pub(super) offsets: Vec<u64>,
    /// The arena's bytes.
    pub(super) arena_bytes: u64,
}

/// The concurrent plan of a recording, or why it replays on one stream.
pub(super) fn plan(
    dag: &Dag,
    events: &[Event],
    event_nodes: &[usize],
    buffers: &[Buffer],
) -> Result<ConcurrentPlan, String> {
    if event_nodes.len() != events.len() || event_nodes.iter().any(|n| *n >= dag.len()) {
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
    let deps = event_deps(dag, events, event_nodes);
    let reach = Reach::new(dag, buffers)?;
    let (offsets, arena_bytes) = pack(buffers, &reach);
    Ok(ConcurrentPlan {
        deps,
        offsets,
        arena_bytes,
    })
}

/// Each operation's dependencies (see the module documentation).
fn event_deps(dag: &Dag, events: &[Event], event_nodes: &[usize]) -> Vec<Vec<usize>> {
    let n = dag.len();
    let mut last_event: Vec<Option<usize>> = vec![None; n];
    for (e, &node) in event_nodes.iter().enumerate() {
        last_event[node] = Some(e);
    }
    // The operations that end each node, or for a node without any, those
    // that end the nodes it depends on. Positions are a topological order.
    let mut exits: Vec<Vec<usize>> = Vec::with_capacity(n);
    for i in 0..n {
        let exit = match last_event[i] {
            Some(e) => vec![e],
            None => {
                let mut all: Vec<usize> = dag
                    .predecessors(i)
                    .iter()
                    .flat_map(|p| exits[*p].iter().copied())
                    .collect();
                all.sort_unstable();
                all.dedup();
                all
            }
        };
        exits.push(exit);
    }
    let shares_blas_workspace = |e: &Event| match e {
        Event::Library(l) => matches!(l.call.library(), "cuBLAS" | "cuBLASLt"),
        _ => false,
    };
    let mut last_blas: Option<usize> = None;
    let mut deps = Vec::with_capacity(events.len());
    for (e, event) in events.iter().enumerate() {
        let node = event_nodes[e];
        let mut d: Vec<usize> = if e > 0 && event_nodes[e - 1] == node {
            vec![e - 1]
        } else {
            let mut all: Vec<usize> = dag
                .predecessors(node)
                .iter()
                .flat_map(|p| exits[*p].iter().copied())
                .filter(|x| *x < e)
                .collect();
            all.sort_unstable();
            all.dedup();
            all
        };
        if shares_blas_workspace(event) {
            if let Some(b) = last_blas {
                if !d.contains(&b) {
                    d.push(b);
                }
            }
            last_blas = Some(e);
        }
        deps.push(d);
    }
    deps
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

/// Offsets for `buffers` in one arena, interfering buffers apart (largest
/// first, each at the lowest offset that fits). Returns the offsets and the
/// arena size.
fn pack(buffers: &[Buffer], reach: &Reach) -> (Vec<u64>, u64) {
    let round = |b: u64| b.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].bytes), i));
    let mut offsets = vec![0u64; buffers.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0u64;
    for i in order {
        let b = &buffers[i];
        let size = round(b.bytes.max(1));
        let mut clashes: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| interfere(b, &buffers[j], reach))
            .map(|&j| (offsets[j], offsets[j] + round(buffers[j].bytes.max(1))))
            .collect();
        clashes.sort_unstable();
        let mut at = 0u64;
        for (lo, hi) in clashes {
            if at + size <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        total = total.max(at + size);
        placed.push(i);
    }
    (offsets, total)
}
