//! Subgraphs: `Conditional`, `Switch` and `WhileLoop`, operands, summaries.

use super::*;

impl<'a> Validator<'a> {
    /// Checks `name` (once) and returns its summary; `None` when it does not
    /// exist or is part of a cycle (both reported here).
    pub(super) fn subgraph(&mut self, g: &GraphState<'a>, at: usize, name: &GraphName) -> Option<Summary> {
        let Some(graph) = self.program.subgraphs.get(name).filter(|_| name.as_str() != MAIN_GRAPH) else {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::UnknownSubgraph { graph: name.clone() },
            );
            return None;
        };
        self.callers.entry(name.clone()).or_default().push((g.name.clone(), at));
        match self.summaries.get(name) {
            Some(SummaryState::Done(s)) => return Some(s.clone()),
            Some(SummaryState::InProgress) => {
                let start = self.stack.iter().position(|n| n == name).unwrap_or(0);
                let mut cycle: Vec<GraphName> = self.stack[start..].to_vec();
                cycle.push(name.clone());
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::Recursion {
                        graph: name.clone(),
                        cycle,
                    },
                );
                return None;
            }
            None => {}
        }
        let depth = self.stack.len() + 1;
        if self.over_limit(g, at, crate::Limit::SubgraphDepth, depth, || {
            format!("subgraph `{name}` is called through a chain of subgraphs too long")
        }) {
            return None;
        }
        self.summaries.insert(name.clone(), SummaryState::InProgress);
        self.stack.push(name.clone());
        let mut summary = self.check_graph(name, graph, false);
        self.stack.pop();
        self.infos.insert(name.clone(), summary.take_info());
        self.summaries.insert(name.clone(), SummaryState::Done(summary.clone()));
        Some(summary)
    }

    /// Passes operands to a subgraph's inputs.
    pub(super) fn pass_operands(&mut self, g: &mut GraphState<'a>, at: usize, sub: &GraphName, operands: &[&BufName]) {
        let Some(graph) = self.program.subgraphs.get(sub) else {
            return;
        };
        if graph.inputs.len() != operands.len() {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::OperandCountMismatch {
                    graph: sub.clone(),
                    expected: graph.inputs.len(),
                    found: operands.len(),
                },
            );
        }
        for (i, (input, op)) in graph.inputs.iter().zip(operands).enumerate() {
            if input.is_integer() {
                let sym = Symbol::new(op.as_str());
                if self.program.symbols.contains_key(&sym) {
                    self.require_symbol(g, Some(at), &sym, None, at);
                } else {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::OperandNotSymbol {
                            graph: sub.clone(),
                            index: i,
                            operand: (*op).clone(),
                        },
                    );
                }
            }
        }
    }

    pub(super) fn use_operands(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        sub: Option<&GraphName>,
        operands: &[&BufName],
    ) {
        let inputs = sub.and_then(|s| self.program.subgraphs.get(s)).map(|gr| &gr.inputs);
        for (i, op) in operands.iter().enumerate() {
            let is_symbol = inputs.and_then(|v| v.get(i)).is_some_and(GraphInput::is_integer);
            if !is_symbol {
                self.use_buffer(g, at, op, Need::Tensor, true);
            }
        }
    }

    /// The one rule of a need (a symbol bound, a kernel defined) of the
    /// subgraph run at line `at` that `g` has not met there: it goes unmet
    /// (reported as `unmet`; returns false) in the main graph, which has no
    /// caller to pass it to, and where `g` meets it only after `at` (`later`:
    /// the line where `g` first meets it, from [`Self::prescan`]); otherwise
    /// it becomes `g`'s own need (returns true).
    fn pass_need(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        later: impl FnOnce(&GraphState<'a>) -> Option<usize>,
        unmet: impl FnOnce() -> ValidationErrorKind,
    ) -> bool {
        Self::prescan(g);
        if g.is_main || later(g).is_some_and(|i| i > at) {
            self.err(Self::at(g, at), unmet());
            return false;
        }
        true
    }

    /// Applies what a subgraph needs and provides at the line that runs it.
    pub(super) fn apply_summary(&mut self, g: &mut GraphState<'a>, at: usize, sub: &GraphName, s: &Summary) {
        for (sym, used_at) in &s.external_symbols {
            if self.bound_site(g, sym).is_some() || self.unbound_backed.contains(sym) {
                continue;
            }
            let unmet = || ValidationErrorKind::SubgraphSymbolNotBound {
                graph: sub.clone(),
                symbol: sym.clone(),
                used_at: *used_at,
            };
            if self.pass_need(g, at, |g| g.later_bindings.get(sym).copied(), unmet) {
                g.external_symbols.entry(sym.clone()).or_insert(Some(at));
            }
        }
        for (k, called_at) in &s.external_kernels {
            if g.defined_kernels.contains_key(k) {
                continue;
            }
            let unmet = || ValidationErrorKind::SubgraphKernelNotDefined {
                graph: sub.clone(),
                kernel: k.clone(),
                called_at: *called_at,
            };
            if self.pass_need(g, at, |g| g.later_kernels.get(k).copied(), unmet) {
                g.external_kernels.entry(k.clone()).or_insert(at);
            }
        }
        for sym in &s.binds {
            if let Some(first) = self.bound_site(g, sym) {
                self.bound_twice(g, at, sym, first);
            }
        }
        for k in &s.defines {
            self.define_kernel(g, at, k, sub.clone());
        }
    }

    /// Makes `syms` (bound inside subgraphs) visible after line `at`.
    pub(super) fn bind_after(&mut self, g: &mut GraphState<'a>, at: usize, syms: impl IntoIterator<Item = Symbol>) {
        for s in syms {
            // Subgraphs bind only declared symbols.
            let Some(index) = self.symbol_index(&s) else { continue };
            if g.bound[index].is_some() {
                continue;
            }
            g.bound[index] = Some(Site::Line(at));
            g.line_bound.insert(s.clone());
            if let Some(v) = g.info.line_binds.get_mut(at) {
                v.push(s);
            }
        }
    }

    /// The summaries of the two subgraphs a cond or while loop line runs
    /// (`None` for one that is missing or recursive): a graph that is both
    /// is checked once.
    fn summaries_of(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        (a, b): (&GraphName, &GraphName),
    ) -> (Option<Summary>, Option<Summary>) {
        let first = self.subgraph(g, at, a);
        let second = if b == a { first.clone() } else { self.subgraph(g, at, b) };
        (first, second)
    }

    /// Applies the summaries of the two subgraphs a line runs
    /// ([`Self::summaries_of`]): a graph that is both is applied once.
    fn apply_summaries(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        (a, b): (&GraphName, &GraphName),
        summaries: (&Option<Summary>, &Option<Summary>),
    ) {
        if let Some(s) = summaries.0 {
            self.apply_summary(g, at, a, s);
        }
        if let Some(s) = summaries.1.as_ref().filter(|_| b != a) {
            self.apply_summary(g, at, b, s);
        }
    }

    /// Passes a while loop's operands to its graph `graph` (run as `role`,
    /// `cond` or `body`) and checks that it returns `expected` values.
    fn loop_graph(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        (role, graph): (&'static str, &GraphName),
        expected: usize,
        operands: &[&BufName],
    ) {
        self.pass_operands(g, at, graph, operands);
        if let Some(found) = self.program.subgraphs.get(graph).map(|sg| sg.outputs.len()) {
            if found != expected {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::LoopOutputMismatch {
                        role,
                        graph: graph.clone(),
                        expected,
                        found,
                    },
                );
            }
        }
    }

    pub(super) fn conditional(&mut self, g: &mut GraphState<'a>, at: usize, c: &'a crate::ir::line::Conditional) {
        match &c.predicate {
            Predicate::Tensor(b) => {
                self.use_buffer(g, at, b, Need::Tensor, true);
            }
            Predicate::Expr(e) => {
                if !e.is_boolean() {
                    self.err(Self::at(g, at), ValidationErrorKind::NotBoolean { expr: e.to_string() });
                }
                self.use_expr(g, Some(at), e, at);
            }
        }
        let operands: Vec<&BufName> = c.operands.iter().collect();
        self.use_operands(g, at, Some(&c.true_graph), &operands);
        let graphs = (&c.true_graph, &c.false_graph);
        let (t, f) = self.summaries_of(g, at, graphs);
        if t.is_some() {
            self.pass_operands(g, at, &c.true_graph, &operands);
        }
        if f.is_some() {
            self.pass_operands(g, at, &c.false_graph, &operands);
        }
        if let (Some(tg), Some(fg)) = (
            self.program.subgraphs.get(&c.true_graph),
            self.program.subgraphs.get(&c.false_graph),
        ) {
            if t.is_some() && f.is_some() && tg.outputs.len() != fg.outputs.len() {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::BranchOutputMismatch {
                        true_graph: c.true_graph.clone(),
                        true_outputs: tg.outputs.len(),
                        false_graph: c.false_graph.clone(),
                        false_outputs: fg.outputs.len(),
                    },
                );
            }
        }
        self.apply_summaries(g, at, graphs, (&t, &f));
        if let (Some(t), Some(f)) = (&t, &f) {
            let both: Vec<Symbol> = t.binds.iter().filter(|s| f.binds.contains(*s)).cloned().collect();
            self.bind_after(g, at, both);
        }
        if let Some(tg) = self.program.subgraphs.get(&c.true_graph) {
            g.multi_outputs.insert(c.result.clone(), tg.outputs.len());
        }
        self.define_result(g, at, &c.result, Need::Multi);
    }

    /// A switch: its selector, its operands passed to every branch (each
    /// checked once, however often it is listed), the branches' output
    /// counts agreeing with the first branch's, and the symbols every branch
    /// binds visible after the line.
    pub(super) fn switch(&mut self, g: &mut GraphState<'a>, at: usize, s: &'a crate::ir::line::Switch) {
        match &s.selector {
            Predicate::Tensor(b) => {
                self.use_buffer(g, at, b, Need::Tensor, true);
            }
            Predicate::Expr(e) => self.use_expr(g, Some(at), e, at),
        }
        if s.branches.is_empty() || (s.cond && s.branches.len() != 2) {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::SwitchBranchCount {
                    cond: s.cond,
                    found: s.branches.len(),
                },
            );
        }
        let operands: Vec<&BufName> = s.operands.iter().collect();
        self.use_operands(g, at, s.branches.first(), &operands);
        let mut distinct: Vec<&GraphName> = Vec::with_capacity(s.branches.len());
        for b in &s.branches {
            if !distinct.contains(&b) {
                distinct.push(b);
            }
        }
        let summaries: Vec<Option<Summary>> = distinct.iter().map(|b| self.subgraph(g, at, b)).collect();
        for (b, summary) in distinct.iter().zip(&summaries) {
            if summary.is_some() {
                self.pass_operands(g, at, b, &operands);
            }
        }
        let outputs = |name: &GraphName| self.program.subgraphs.get(name).map(|sg| sg.outputs.len());
        if let (Some(first), Some(first_outputs)) = (distinct.first(), distinct.first().and_then(|b| outputs(b))) {
            g.multi_outputs.insert(s.result.clone(), first_outputs);
            for (b, summary) in distinct.iter().zip(&summaries).skip(1) {
                match outputs(b) {
                    Some(n) if summary.is_some() && n != first_outputs => self.err(
                        Self::at(g, at),
                        ValidationErrorKind::SwitchOutputMismatch {
                            first: (*first).clone(),
                            first_outputs,
                            graph: (*b).clone(),
                            outputs: n,
                        },
                    ),
                    _ => {}
                }
            }
        }
        for (b, summary) in distinct.iter().zip(&summaries) {
            if let Some(summary) = summary {
                self.apply_summary(g, at, b, summary);
            }
        }
        if summaries.iter().all(Option::is_some) {
            let mut all = summaries.iter().flatten();
            if let Some(first) = all.next() {
                let rest: Vec<&Summary> = all.collect();
                let common: Vec<Symbol> = first
                    .binds
                    .iter()
                    .filter(|sym| rest.iter().all(|r| r.binds.contains(*sym)))
                    .cloned()
                    .collect();
                self.bind_after(g, at, common);
            }
        }
        self.define_result(g, at, &s.result, Need::Multi);
    }

    pub(super) fn while_loop(&mut self, g: &mut GraphState<'a>, at: usize, w: &'a crate::ir::line::WhileLoop) {
        let operands: Vec<&BufName> = w.carried.iter().chain(w.additional.iter()).collect();
        self.use_operands(g, at, Some(&w.body_graph), &operands);
        let graphs = (&w.cond_graph, &w.body_graph);
        let (c, b) = self.summaries_of(g, at, graphs);
        if c.is_some() {
            self.loop_graph(g, at, ("cond", &w.cond_graph), 1, &operands);
        }
        if b.is_some() {
            self.loop_graph(g, at, ("body", &w.body_graph), w.carried.len(), &operands);
        }
        self.apply_summaries(g, at, graphs, (&c, &b));
        // The cond graph runs at least once; the body may not run at all.
        if let Some(s) = &c {
            let syms: Vec<Symbol> = s.binds.iter().cloned().collect();
            self.bind_after(g, at, syms);
        }
        g.multi_outputs.insert(w.result.clone(), w.carried.len());
        self.define_result(g, at, &w.result, Need::Multi);
    }
}
