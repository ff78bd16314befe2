//! The walk over a graph's lines: one C++ statement group per line.

use super::*;

impl<'a> Lowering<'a> {
    pub(super) fn graph_lines(&mut self, g: &GraphCtx<'a>) -> Result<(), Error> {
        for (i, line) in g.graph.lines.iter().enumerate() {
            let context = Cx {
                graph: g.name,
                index: i,
                line,
            };
            // Nested graphs (conditionals, loops) set their own indices; each
            // line sets its index again before it is lowered.
            self.line_index = i;
            self.line_(g, line, &context)?;
        }
        Ok(())
    }

    pub(super) fn line_(&mut self, g: &GraphCtx<'a>, line: &'a Line, cx: &Cx<'_>) -> Result<(), Error> {
        match line {
            Line::Allocate { buffer } => self.allocate(g, buffer, cx),
            Line::FreeIfNotReused { buffer, is_reused } => {
                if !*is_reused && !g.is_multi(buffer) {
                    let v = g.var(buffer);
                    emit!(self, "{v}.reset();");
                }
                Ok(())
            }
            Line::Free { buffer } => {
                if !g.is_multi(buffer) {
                    let v = g.var(buffer);
                    emit!(self, "{v}.reset();");
                }
                Ok(())
            }
            Line::Reuse { old, new, delete_old } => self.declare_view(g, (old, new), *delete_old, "reuse", cx),
            Line::Reinterpret { base, alias } => self.declare_view(g, (base, alias), false, "alias", cx),
            // Validation checked that the kernel is in the table; the launch
            // wrapper (or declaration) is written when a line calls it.
            Line::KernelDefinition { .. } => Ok(()),
            Line::KernelCall(call) => self.kernel_call(g, call, cx),
            Line::SymbolicCallArg { symbol, expr } => {
                let v = self.cx_expr(expr);
                if self.declared(symbol.as_str()) {
                    emit!(self, "{symbol} = {v};");
                } else {
                    emit!(self, "int64_t {symbol} = {v};");
                    self.declare(symbol.as_str());
                }
                Ok(())
            }
            Line::ExternKernelAlloc(call) => self.extern_call(g, call, None, cx),
            Line::ExternKernelOut { call, out } => self.extern_call(g, call, Some(out), cx),
            Line::ExternKernelMultiOut(m) => self.extern_call(g, &m.call_with_outs(), None, cx),
            // Elements were declared by the line that produced the multi-output
            // value; the whole of a tensor under a new name is a new reference.
            Line::MultiOutput(m) => {
                if let Some(first) = g.copies.get(&m.result) {
                    let (src, dst) = (g.local(first), g.local(&m.result));
                    self.share(&src, &dst);
                } else if g.multi_origin(&m.source).is_none() && !g.is_multi(&m.result) {
                    let (src, dst) = (g.local(&m.source), g.local(&m.result));
                    self.share(&src, &dst);
                }
                Ok(())
            }
            Line::IndexPutFallback(p) => {
                // No result variables: the op writes the target in place.
                let call = p.extern_call();
                let site = ExternSite {
                    g,
                    call: &call,
                    out: None,
                    results: &[],
                    cx,
                };
                let d = self.dialect;
                d.index_put(self, &site, p)
            }
            Line::ScatterFallback(s) => self.scatter(g, s, cx),
            Line::DynamicScalar(item) => {
                let layout = g.layout(&item.source);
                let raw = format!("{}_raw", item.symbol);
                let src = g.local(&item.source);
                let d = self.dialect;
                let float_symbol = self
                    .program
                    .symbols
                    .get(&item.symbol)
                    .is_some_and(|decl| decl.kind == SymbolKind::UnbackedFloat);
                if float_symbol {
                    // `zuf0 = buf0.item()`: a double, passed whole to kernels.
                    let Some(read) = d.item_arg(&src, layout.dtype) else {
                        return Err(self.unsupported(
                            cx,
                            format!(
                                "item() of `{}` ({}) cannot be read as a float",
                                item.source, layout.dtype
                            ),
                        ));
                    };
                    self.decl_line(item.symbol.as_str(), "double", &read);
                    return Ok(());
                }
                if !d.item_int(self, &src, layout.dtype, &raw) {
                    return Err(self.unsupported(
                        cx,
                        format!(
                            "item() of `{}` ({}) cannot bind the integer symbol `{}`",
                            item.source, layout.dtype, item.symbol
                        ),
                    ));
                }
                let described = format!("{}.item()", item.source);
                self.bind_symbol(&item.symbol, &raw, &item.keypath, &described, cx)
            }
            Line::UnbackedSymbolDefs { source, bindings } => {
                for (symbol, path) in bindings {
                    self.unbacked(g, source, symbol, path, cx)?;
                }
                Ok(())
            }
            Line::Conditional(c) => self.conditional(g, c, cx),
            Line::Switch(sw) => self.switch(g, sw, cx),
            Line::WhileLoop(w) => self.while_loop(g, w, cx),
            Line::EnterDeviceContext { device_index, .. } => {
                self.blank();
                let guarded = self.scopes.iter().any(|s| s.device_guard);
                let d = self.dialect;
                d.device_guard(self, *device_index, guarded);
                if let Some(s) = self.scopes.last_mut() {
                    s.device_guard = true;
                }
                Ok(())
            }
            Line::ExitDeviceContext => Ok(()),
            // The wrapper runs every line in program order on its one stream
            // (a schedule the program's events allow), allocates from its own
            // allocator, and declares its variables at function scope: a
            // scope leaves a comment where it opens.
            Line::EnterScope(scope) => {
                match scope {
                    crate::ir::Scope::Stream { stream } => {
                        self.line(format!(
                            "// stream {stream}: run in program order on the wrapper's stream"
                        ));
                    }
                    crate::ir::Scope::MemPool { pool, device_index } => self.line(format!(
                        "// memory pool {pool} of device {device_index}: allocations below use the wrapper's allocator"
                    )),
                    crate::ir::Scope::KernelProfile => {}
                }
                Ok(())
            }
            Line::ExitScope { .. } => Ok(()),
            Line::AssertFinite { buffer } => {
                let b = g.local(buffer);
                let check = self.dialect.check_finite(&b, buffer.as_str());
                self.line(check);
                Ok(())
            }
            Line::Comment { text } => {
                if text.is_empty() {
                    self.line("//");
                }
                for t in text.lines() {
                    // `// {t}` without trailing whitespace.
                    let t = t.trim_end();
                    if t.is_empty() {
                        self.line("//");
                    } else {
                        emit!(self, "// {t}");
                    }
                }
                Ok(())
            }
            Line::AssertSizeStride(a) => {
                self.size_stride_check(g, (&a.buffer, &a.size, &a.stride), a.dtype, a.context.as_deref());
                Ok(())
            }
            // Inductor's C++ wrapper writes a grouped assert as its members.
            Line::AssertSizeStrideGrouped(group) => {
                for a in &group.asserts {
                    self.size_stride_check(g, (&a.buffer, &a.size, &a.stride), None, group.context.as_deref());
                }
                Ok(())
            }
            Line::AssertDivByZero { divisor, context } => {
                let d = self.cx_expr(divisor);
                let m = CString(&format!("Integer {context} by zero"));
                emit!(self, "if (!(({d}) != 0)) {{ throw std::runtime_error({m}); }}");
                Ok(())
            }
            Line::AssertAlignment {
                buffer,
                alignment,
                context,
            } => {
                let b = g.local(buffer);
                let ptr = self.dialect.address(&b);
                let mut msg = format!("{buffer} is not aligned to {alignment} bytes");
                if let Some(c) = context {
                    let _ = write!(msg, " ({c})");
                }
                self.line(format!(
                    "if ({ptr} % {alignment} != 0) {{ throw std::runtime_error({}); }}",
                    c_string(&msg)
                ));
                Ok(())
            }
            Line::RuntimeAssert { cond, message, .. } => {
                let c = self.cx_expr(cond);
                let m = CString(message);
                emit!(self, "if (!({c})) {{ throw std::runtime_error({m}); }}");
                Ok(())
            }
            // Neither AOTI's C shim nor the standalone runtime can allocate
            // symmetric memory: a communication buffer becomes an ordinary
            // allocation, which collectives accept (without the symmetric-memory
            // fast path).
            Line::CommBufferAllocate {
                buffer,
                comm_kind,
                group,
            } => {
                self.line(format!(
                    "// {comm_kind} communication buffer {buffer} of group {}: allocated as an ordinary buffer",
                    c_string(group)
                ));
                self.allocate(g, buffer, cx)
            }
            Line::CommBufferFree { buffer } => {
                self.line(format!("{}.reset();  // communication buffer", g.local(buffer)));
                Ok(())
            }
        }
    }

    /// One tensor's size/stride check (and its dtype's, when given): a
    /// `std::runtime_error` naming the buffer, the expected values and the
    /// producing op. Strides are checked where the size is above 1, as
    /// PyTorch's `assert_size_stride` and the interpreter check them.
    fn size_stride_check(
        &mut self,
        g: &GraphCtx<'_>,
        (buffer, size, stride): (&BufName, &[SymExpr], &[SymExpr]),
        dtype: Option<DType>,
        context: Option<&str>,
    ) {
        let b = g.local(buffer);
        let mut conds = Vec::new();
        conds.extend(self.dialect.rank_check(&b, size.len()));
        for (d, e) in size.iter().enumerate() {
            conds.push(format!("{b}.size({d}) == {}", self.cexpr(e)));
        }
        // As PyTorch's `assert_size_stride`: a dimension of size 0 or 1 has
        // no stride to check (any value addresses the same elements).
        for (d, e) in stride.iter().enumerate() {
            let check = format!("{b}.stride({d}) == {}", self.cexpr(e));
            match size.get(d).and_then(SymExpr::as_int) {
                Some(n) if n <= 1 => {}
                Some(_) => conds.push(check),
                None => conds.push(format!("({b}.size({d}) <= 1 || {check})")),
            }
        }
        if let Some(dt) = dtype {
            let (actual, expected) = (self.dialect.dtype_of(&b), self.dtype_name(dt));
            conds.push(format!("{actual} == {expected}"));
        }
        let list = |v: &[SymExpr]| v.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
        let mut msg = format!(
            "assert_size_stride failed for {buffer}: expected size [{}] and stride [{}]",
            list(size),
            list(stride)
        );
        if let Some(dt) = dtype {
            let _ = write!(msg, " and dtype {}", dt.torch_name());
        }
        if let Some(c) = context {
            let _ = write!(msg, " ({c})");
        }
        let cond = if conds.is_empty() {
            "true".to_string()
        } else {
            conds.join(" && ")
        };
        self.line(format!(
            "if (!({cond})) {{ throw std::runtime_error({}); }}",
            c_string(&msg)
        ));
    }

    /// `type name = value;` on first declaration in scope, `name = value;` after.
    pub(super) fn decl_line(&mut self, name: &str, ctype: &str, value: &str) {
        if self.declared(name) {
            self.line(format!("{name} = {value};"));
        } else {
            self.line(format!("{ctype} {name} = {value};"));
            self.declare(name);
        }
    }

    /// Writes an `int64_t` array of expressions and returns its name.
    pub(super) fn int_array(&mut self, items: &[SymExpr]) -> String {
        self.int_array_name(items).to_string()
    }

    /// [`Lowering::int_array`], returning a value that prints the name.
    pub(super) fn int_array_name(&mut self, items: &[SymExpr]) -> ArrayName {
        let name = ArrayName(self.next_array);
        self.next_array += 1;
        if items.is_empty() {
            emit!(self, "const int64_t* {name} = nullptr;");
            return name;
        }
        let all_int = items.iter().all(|e| e.as_int().is_some());
        let style = self.cstyle();
        self.indent_body();
        let out = &mut self.body;
        // Writing into a String cannot fail.
        let _ = if all_int {
            write!(out, "static constexpr int64_t {name}[] = {{")
        } else {
            write!(out, "const int64_t {name}[] = {{")
        };
        // `{a, }` for one element, `{a, b}` otherwise ([`brace_list`]).
        for (i, e) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{}", CExpr { e, style });
        }
        out.push_str(if items.len() == 1 { ", };\n" } else { "};\n" });
        name
    }
}
