//! `cond` and `while_loop`: subgraphs lowered once, lifted symbols, operands.

use super::*;
use std::sync::Arc;

/// Subgraphs lowered for one line, by name, and the symbols lifted into them.
pub(super) type LoweredSubgraphs = (Vec<(String, Arc<fx::Graph>)>, Vec<Symbol>);

impl<'p> GraphLowering<'p> {
    /// The two subgraphs of a `cond` or `while_loop` line (`names`: true
    /// and false, or cond and body) lowered and made nodes of this graph;
    /// the symbols lifted into them are appended to `operands`, the line's
    /// trailing operands.
    pub(super) fn subgraph_pair(&mut self, names: [&GraphName; 2], operands: &mut Vec<Arg>) -> Res<[NodeId; 2]> {
        match self.subgraph_list(&names, operands)?.as_slice() {
            [a, b] => Ok([*a, *b]),
            _ => Err(ErrorKind::Unsupported(
                "conditionals and loops take exactly two subgraphs".into(),
            )),
        }
    }

    /// The `Subgraph` nodes of the graphs one line runs, in `names` order (a
    /// graph named twice is one node), with the symbols they lift appended
    /// to `operands`.
    pub(super) fn subgraph_list(&mut self, names: &[&GraphName], operands: &mut Vec<Arg>) -> Res<Vec<NodeId>> {
        let mut distinct: Vec<&GraphName> = Vec::with_capacity(names.len());
        for n in names {
            if !distinct.contains(n) {
                distinct.push(n);
            }
        }
        let (graphs, lifted) = self.subgraphs(&distinct)?;
        for s in &lifted {
            operands.push(self.symbol(s)?);
        }
        let ids = self.subgraph_nodes(graphs);
        Ok(names
            .iter()
            .filter_map(|n| distinct.iter().position(|d| d == n).and_then(|k| ids.get(k).copied()))
            .collect())
    }

    /// The node of a `cond` or `while_loop` line, `op`, bound to its result
    /// buffer.
    pub(super) fn push_subgraph_result(&mut self, result: &BufName, op: Op) -> Res<()> {
        let val = Some(self.val_of(result));
        let id = self.out.push(result.as_str(), op, val);
        self.buffers.insert(result.clone(), id);
        Ok(())
    }

    /// Lowers subgraphs run by one line; lifted symbols become trailing
    /// placeholders, the same list in every one of them.
    fn subgraphs(&mut self, names: &[&GraphName]) -> Res<LoweredSubgraphs> {
        let mut lowered = Vec::new();
        let mut union: Vec<Symbol> = Vec::new();
        for n in names {
            let cached = self.memo.borrow().lowered.get(*n).cloned();
            let (g, lifted) = match cached {
                Some(hit) => hit,
                None => {
                    let (g, lifted) = GraphLowering::run(self.info, Some(n), self.options, self.memo)
                        .map_err(|e| ErrorKind::Unsupported(format!("in subgraph: {e}")))?;
                    let lowered = (Arc::new(g), lifted);
                    self.memo.borrow_mut().lowered.insert((*n).clone(), lowered.clone());
                    lowered
                }
            };
            for s in lifted {
                if !union.contains(&s) {
                    union.push(s);
                }
            }
            lowered.push((*n, g));
        }
        let mut out = Vec::with_capacity(lowered.len());
        for (n, mut g) in lowered {
            let key = (n.clone(), union.clone());
            let hit = self.memo.borrow().normalized.get(&key).cloned();
            let g = match hit {
                Some(hit) => hit,
                None => {
                    // Copies this graph's own nodes (its subgraphs stay shared) when the memo holds it too.
                    normalize_lifted(Arc::make_mut(&mut g), &union);
                    self.memo.borrow_mut().normalized.insert(key, g.clone());
                    g
                }
            };
            out.push((n.to_string(), g));
        }
        Ok((out, union))
    }

    fn subgraph_nodes(&mut self, graphs: Vec<(String, Arc<fx::Graph>)>) -> Vec<NodeId> {
        let mut ids = Vec::new();
        for (name, g) in graphs {
            let id = self.out.push(&name, Op::Subgraph { name: name.clone() }, None);
            self.out.subgraphs.insert(name, g);
            ids.push(id);
        }
        ids
    }
}

/// Puts a subgraph's lifted-symbol placeholders after its own inputs, in
/// `union` order, adding those it did not need.
pub(super) fn normalize_lifted(g: &mut fx::Graph, union: &[Symbol]) {
    let mut lifted_ids: Vec<NodeId> = Vec::new();
    for s in union {
        let existing = g
            .placeholders()
            .find(|(_, n)| n.name == s.as_str() && n.binds.contains(s))
            .map(|(id, _)| id);
        let id = match existing {
            Some(id) => id,
            None => {
                let id = g.push(s.as_str(), Op::Placeholder(Placeholder::Symbol(s.clone())), None);
                g.bind_symbol(id, s.clone());
                id
            }
        };
        lifted_ids.push(id);
    }
    let own: Vec<NodeId> = g
        .order()
        .iter()
        .copied()
        .filter(|id| matches!(g.node(*id).op, Op::Placeholder(_)) && !lifted_ids.contains(id))
        .collect();
    let rest: Vec<NodeId> = g
        .order()
        .iter()
        .copied()
        .filter(|id| !matches!(g.node(*id).op, Op::Placeholder(_)))
        .collect();
    let order: Vec<NodeId> = own.into_iter().chain(lifted_ids).chain(rest).collect();
    // A permutation of the existing order by construction.
    let _ = g.set_order(order);
}
