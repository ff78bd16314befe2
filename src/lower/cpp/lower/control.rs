//! Conditionals and while loops: subgraphs inlined at the line that runs them.

use super::*;

impl<'a> Lowering<'a> {
    /// The subgraph a line runs (validation checked that it exists).
    pub(super) fn subgraph(&self, name: &GraphName) -> &'a Graph {
        self.info.line_subgraph(name)
    }

    /// The C++ values of operands `offset..` of `sub`: a buffer's variable, or
    /// the symbol itself where `sub` takes a symbol input.
    pub(super) fn operand_vars(g: &GraphCtx<'_>, sub: &Graph, offset: usize, operands: &[BufName]) -> Vec<String> {
        operands
            .iter()
            .enumerate()
            .map(|(i, o)| match sub.inputs.get(offset + i) {
                Some(GraphInput::Symbol { .. } | GraphInput::SymExpr { .. }) => o.to_string(),
                _ => g.local(o),
            })
            .collect()
    }

    /// Runs a subgraph inline: copies operand handles into its inputs, writes
    /// its lines, and moves its outputs into `targets` (`None` = dropped).
    pub(super) fn inline_subgraph(
        &mut self,
        name: &'a GraphName,
        operands: &[String],
        targets: &[Option<String>],
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let graph = self.subgraph(name);
        let ctx = GraphCtx::new(graph, Some(name), &self.info.program().constants)?;
        self.line(format!("// subgraph: {name}"));
        // Validation checked the operand count (`OperandCountMismatch`).
        for (input, operand) in graph.inputs.iter().zip(operands) {
            match input {
                GraphInput::Tensor { name: n } => {
                    let local = ctx.local(n);
                    let d = self.dialect;
                    d.assign_new(self, &local, operand);
                    self.declare(&local);
                }
                // Symbols are C++ variables of the whole function and subgraphs
                // are inlined, so a symbol passed as itself (what Inductor does:
                // `true_graph_0_args = [arg3_1, s27, s77]`) is already in scope.
                GraphInput::Symbol { name: n, symbol } if operand.as_str() != symbol.as_str() => {
                    return Err(self.unsupported(
                        cx,
                        format!(
                            "symbol input `{n}` of subgraph `{name}` binds `{symbol}` but is passed `{operand}` (the inlined subgraph sees the caller's symbols, so a symbol must be passed as itself)"
                        ),
                    ))
                }
                GraphInput::Symbol { .. } => {}
                // Its symbols are the caller's, in scope already; the value
                // passed is theirs by construction (validation requires the
                // operand to be a symbol of the caller).
                GraphInput::SymExpr { name: n, .. } => {
                    self.line(format!("// integer input `{n}` of subgraph `{name}`: `{operand}`"));
                }
            }
        }
        self.graph_lines(&ctx)?;
        // Validation: a subgraph returns as many values as its line needs
        // (`BranchOutputMismatch`, `SwitchOutputMismatch`,
        // `LoopOutputMismatch`), and every extracted index is one of them
        // (`IndexPastOutputs`), so `targets` is never longer.
        let mut moved: HashMap<String, String> = HashMap::default();
        for (out, target) in graph.outputs.iter().zip(targets) {
            let Some(target) = target else { continue };
            let GraphOutput::Buffer(b) = out else {
                return Err(self.unsupported(cx, format!("a non-tensor output of subgraph `{name}`")));
            };
            if ctx.is_multi(b) {
                return Err(self.unsupported(
                    cx,
                    format!("output `{b}` of subgraph `{name}` is a multi-output value, not one tensor"),
                ));
            }
            let local = ctx.local(b);
            self.line(format!("{target}.reset();"));
            match moved.get(&local) {
                // A constant stays the whole function's: the target shares it.
                None if ctx.is_constant(b) => {
                    let d = self.dialect;
                    d.assign_shared(self, target, &local);
                }
                None => {
                    self.line(format!("{target} = std::move({local});"));
                    moved.insert(local, target.clone());
                }
                Some(first) => {
                    let d = self.dialect;
                    d.assign_shared(self, target, first);
                }
            }
        }
        Ok(())
    }

    /// A C++ boolean from a one-element tensor.
    pub(super) fn scalarize(&mut self, tensor: &str) -> String {
        let scalar = format!("{tensor}_scalar");
        let d = self.dialect;
        d.item_bool(self, tensor, &scalar);
        scalar
    }

    /// The variables a cond's or switch's branches all write, `result`'s
    /// elements, declared before the branches; and the symbols every branch
    /// binds, declared so they stay visible after the line (what validation
    /// records as the line's bindings, `GraphInfo::binds`).
    fn branch_results(&mut self, g: &GraphCtx<'_>, result: &BufName, cx: &Cx<'_>) -> Result<Vec<String>, Error> {
        let results = g.flat_vars(result, 0, cx)?;
        let ty = self.dialect.tensor_type();
        for r in &results {
            self.line(format!("{ty} {r};"));
            self.declare(r);
        }
        let info = self.info;
        let visible = info.graph(g.name).map_or(&[][..], |gi| gi.binds(self.line_index));
        for s in visible {
            if !self.declared(s.as_str()) {
                self.line(format!("int64_t {s} = 0;"));
                self.declare(s.as_str());
            }
        }
        Ok(results)
    }

    pub(super) fn conditional(&mut self, g: &GraphCtx<'_>, c: &'a Conditional, cx: &Cx<'_>) -> Result<(), Error> {
        // Validation checked that both branches return as many values
        // (`BranchOutputMismatch`): the true branch's outputs stand for both.
        let t = self.subgraph(&c.true_graph);
        let results = self.branch_results(g, &c.result, cx)?;
        let pred = match &c.predicate {
            Predicate::Tensor(b) => {
                let name = g.local(b);
                self.scalarize(&name)
            }
            Predicate::Expr(e) => self.cexpr(e),
        };
        let operands = Self::operand_vars(g, t, 0, &c.operands);
        let mut targets: Vec<Option<String>> = results.iter().cloned().map(Some).collect();
        targets.resize(t.outputs.len(), None);
        self.open(format!("if ({pred}) {{"));
        self.inline_subgraph(&c.true_graph, &operands, &targets, cx)?;
        self.close("} else {");
        // `close` popped the true branch's scope; open the false branch's.
        self.indent += 1;
        self.scopes.push(Scope::default());
        self.inline_subgraph(&c.false_graph, &operands, &targets, cx)?;
        self.close("}");
        Ok(())
    }

    /// Inductor's C++ `codegen_switch`: the selector read once as an
    /// integer, then `if (sel == 0) {...} else if (sel == k) {...} else {...}`
    /// with every branch inlined into the same result variables.
    pub(super) fn switch(&mut self, g: &GraphCtx<'_>, sw: &'a Switch, cx: &Cx<'_>) -> Result<(), Error> {
        // Invariant: validation checked that the switch has branches and that
        // they all return as many values as the first (`SwitchOutputMismatch`).
        let first = sw.branches.first().expect("validated: a switch has branches");
        let first = self.subgraph(first);
        let results = self.branch_results(g, &sw.result, cx)?;
        let selector = match &sw.selector {
            Predicate::Tensor(b) => {
                let layout = g.layout(b);
                let name = g.local(b);
                let scalar = format!("{name}_scalar");
                let d = self.dialect;
                if !d.item_int(self, &name, layout.dtype, &scalar) {
                    return Err(self.unsupported(
                        cx,
                        format!(
                            "the selector `{b}` of switch `{}` is {}, not an integer tensor",
                            sw.result, layout.dtype
                        ),
                    ));
                }
                scalar
            }
            Predicate::Expr(e) => format!("static_cast<int64_t>({})", self.cexpr(e)),
        };
        let operands = Self::operand_vars(g, first, 0, &sw.operands);
        let mut targets: Vec<Option<String>> = results.iter().cloned().map(Some).collect();
        targets.resize(first.outputs.len(), None);
        let last = sw.branches.len() - 1;
        for (k, branch) in sw.branches.iter().enumerate() {
            let head = match k {
                _ if k == last && k > 0 => "} else {".to_string(),
                0 => format!("if ({selector} == 0) {{"),
                _ => format!("}} else if ({selector} == {k}) {{"),
            };
            if k == 0 {
                // A single branch runs unconditionally.
                self.open(if last == 0 { "{".to_string() } else { head });
            } else {
                self.close(&head);
                // `close` popped the previous branch's scope; open this one's.
                self.indent += 1;
                self.scopes.push(Scope::default());
            }
            self.inline_subgraph(branch, &operands, &targets, cx)?;
        }
        self.close("}");
        Ok(())
    }

    pub(super) fn while_loop(&mut self, g: &GraphCtx<'_>, w: &'a WhileLoop, cx: &Cx<'_>) -> Result<(), Error> {
        let carried: Vec<String> = w.carried.iter().map(|b| g.local(b)).collect();
        let body = self.subgraph(&w.body_graph);
        let additional = Self::operand_vars(g, body, w.carried.len(), &w.additional);
        // Validation: every index into the result is below the carried
        // count (`IndexPastOutputs`), so there is one result per carried value.
        let results = g.flat_vars(&w.result, carried.len(), cx)?;
        // The results hold the carried values from the start.
        for (r, c) in results.iter().zip(&carried) {
            let d = self.dialect;
            d.assign_new(self, r, c);
            self.declare(r);
        }
        let cond_result = format!("{}_cond_result", g.local(&w.result));
        let ty = self.dialect.tensor_type();
        self.line(format!("{ty} {cond_result};"));
        self.declare(&cond_result);
        let inputs: Vec<String> = results.iter().chain(&additional).cloned().collect();
        self.open("while (1) {");
        self.inline_subgraph(&w.cond_graph, &inputs, &[Some(cond_result.clone())], cx)?;
        let scalar = self.scalarize(&cond_result);
        self.line(format!("if (!{scalar}) break;"));
        let targets: Vec<Option<String>> = results.iter().cloned().map(Some).collect();
        self.inline_subgraph(&w.body_graph, &inputs, &targets, cx)?;
        self.close("}");
        Ok(())
    }
}
