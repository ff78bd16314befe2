//! Topological orders of a [`Dag`], and a graph run in one of them.

use super::Dag;
use crate::exec::ExecError;
use crate::fx::Graph;

impl Dag {
    /// A topological order: each step, `pick` chooses which of the ready
    /// nodes (those whose predecessors are all placed; never empty) comes
    /// next, by index into the slice it is given.
    pub fn order_by(&self, mut pick: impl FnMut(&[usize]) -> usize) -> Vec<usize> {
        let n = self.len();
        let mut missing: Vec<usize> = (0..n).map(|i| self.predecessors(i).len()).collect();
        let mut ready: Vec<usize> = (0..n).filter(|i| missing[*i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while !ready.is_empty() {
            let k = pick(&ready).min(ready.len() - 1);
            let next = ready.swap_remove(k);
            order.push(next);
            for &s in self.successors(next) {
                missing[s] -= 1;
                if missing[s] == 0 {
                    ready.push(s);
                }
            }
        }
        // Every edge goes forwards in position, so the DAG has no cycle and
        // every node was placed.
        order
    }

    /// The order that runs the latest ready node first: as far from the
    /// graph's own order as the edges allow.
    pub fn latest_first_order(&self) -> Vec<usize> {
        self.order_by(|ready| {
            let mut best = 0;
            for (k, r) in ready.iter().enumerate() {
                if *r > ready[best] {
                    best = k;
                }
            }
            best
        })
    }

    /// A random topological order, the same for the same `seed`.
    pub fn seeded_order(&self, seed: u64) -> Vec<usize> {
        let mut state = seed;
        self.order_by(|ready| {
            // SplitMix64: small and good enough to pick among ready nodes.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z % ready.len() as u64) as usize
        })
    }

    /// `true` when `order` is a permutation of the nodes in which every
    /// edge goes forwards.
    pub fn is_topological(&self, order: &[usize]) -> bool {
        let n = self.len();
        if order.len() != n {
            return false;
        }
        let mut at = vec![usize::MAX; n];
        for (k, &i) in order.iter().enumerate() {
            match at.get_mut(i) {
                Some(slot) if *slot == usize::MAX => *slot = k,
                _ => return false,
            }
        }
        self.edges().iter().all(|e| at[e.from] < at[e.to])
    }
}

/// `graph` with its top-level nodes in `order` (positions in its current
/// order, a topological order of `dag`, the graph's DAG): what a run in
/// that order compiles ([`crate::exec::interp::compile`] plans slots and
/// frees for the order it is given). An error when `order` is not a
/// topological order of `dag` or `dag` is not `graph`'s.
pub fn reorder_graph(graph: &Graph, dag: &Dag, order: &[usize]) -> Result<Graph, ExecError> {
    let current = graph.order();
    if current.len() != dag.len() || current.iter().zip(dag.nodes()).any(|(id, n)| *id != n.id) {
        return Err(ExecError::Input("the DAG is not this graph's".into()));
    }
    if !dag.is_topological(order) {
        return Err(ExecError::Input(
            "the order is not a topological order of the graph's DAG".into(),
        ));
    }
    let mut out = graph.clone();
    let ids = order.iter().map(|i| current[*i]).collect();
    if !out.set_order(ids) {
        // `is_topological` checked that `order` is a permutation.
        return Err(ExecError::Input(
            "the order is not a permutation of the graph's nodes".into(),
        ));
    }
    Ok(out)
}
