//! One line of a graph: the dispatch over [`Line`].

use super::*;

impl<'a> Validator<'a> {
    pub(super) fn check_line(&mut self, g: &mut GraphState<'a>, at: usize, line: &'a Line) {
        match line {
            Line::Allocate { buffer } | Line::CommBufferAllocate { buffer, .. } => {
                if self.may_define(g, at, buffer, Need::Tensor) {
                    let r = g.resolve(self.program, buffer);
                    self.require_layout_symbols(g, at, buffer, r);
                    self.define(g, buffer, Site::Line(at), Some(None));
                }
            }
            Line::FreeIfNotReused { buffer, is_reused } => self.end_buffer(g, at, buffer, *is_reused),
            Line::Free { buffer } | Line::CommBufferFree { buffer } => self.end_buffer(g, at, buffer, false),
            Line::Reuse { old, new, delete_old } => self.reuse(g, at, old, new, *delete_old),
            Line::Reinterpret { base, alias } => self.reinterpret(g, at, base, alias),
            Line::KernelDefinition { kernel } => {
                if !self.program.kernels.contains_key(kernel) {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::UnknownKernel { kernel: kernel.clone() },
                    );
                    return;
                }
                if !self.define_kernel(g, at, kernel, g.name.clone()) {
                    return;
                }
                g.own_definitions.insert(kernel.clone());
                self.kernel_definitions
                    .entry(kernel.clone())
                    .or_insert((g.name.clone(), at));
            }
            Line::KernelCall(call) => self.kernel_call(g, at, call),
            Line::SymbolicCallArg { symbol, expr } => {
                self.use_expr(g, Some(at), expr, at);
                if let Some(prev) = g.precomputed.get(symbol) {
                    if *prev == expr {
                        // Inductor re-emits the same assignment before each launch.
                        if let Some(v) = g.info.line_binds.get_mut(at) {
                            v.push(symbol.clone());
                        }
                        return;
                    }
                }
                self.bind_symbol(g, at, symbol, SymbolKind::Precomputed, "a let line");
                g.precomputed.entry(symbol.clone()).or_insert(expr);
            }
            Line::ExternKernelAlloc(call) => {
                for a in &call.args {
                    self.use_arg(g, at, a);
                }
                for a in call.kwargs.values() {
                    self.use_arg(g, at, a);
                }
                if let Some(r) = &call.result {
                    self.define_result(g, at, r, Need::Any);
                }
            }
            Line::ExternKernelOut { call, out } => {
                for a in &call.args {
                    self.use_arg(g, at, a);
                }
                for a in call.kwargs.values() {
                    self.use_arg(g, at, a);
                }
                self.use_buffer(g, at, out, Need::Tensor, true);
                if let Some(r) = &call.result {
                    self.define_result(g, at, r, Need::Any);
                }
            }
            Line::ExternKernelMultiOut(m) => {
                for a in m.call.args.iter().chain(m.call.kwargs.values()) {
                    self.use_arg(g, at, a);
                }
                for (keyword, out) in &m.outs {
                    if m.call.kwargs.contains_key(keyword) {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::OutKeywordTwice {
                                op: m.call.op.clone(),
                                keyword: keyword.clone(),
                            },
                        );
                    }
                    self.use_buffer(g, at, out, Need::Tensor, true);
                }
                if let Some(r) = &m.call.result {
                    self.define_result(g, at, r, Need::Any);
                }
            }
            Line::MultiOutput(MultiOutput {
                result,
                source,
                indices,
            }) => {
                let need = if indices.is_empty() { Need::Any } else { Need::Multi };
                self.use_buffer(g, at, source, need, false);
                for ix in indices {
                    if let MultiIndex::List(i) | MultiIndex::Tuple(i) = ix {
                        if *i >= 0 {
                            let outputs = usize::try_from(*i).unwrap_or(usize::MAX).saturating_add(1);
                            self.over_limit(g, at, crate::Limit::Outputs, outputs, || {
                                format!("`{source}` indexed at {i}: outputs of one value")
                            });
                        }
                        if *i < 0 {
                            self.err(
                                Self::at(g, at),
                                ValidationErrorKind::NegativeIndex {
                                    value: source.clone(),
                                    index: *i,
                                },
                            );
                        }
                    }
                }
                if let Some(MultiIndex::List(i) | MultiIndex::Tuple(i)) = indices.first() {
                    self.index_in_outputs(g, at, source, *i);
                }
                self.define_result(g, at, result, Need::Any);
            }
            Line::IndexPutFallback(IndexPutFallback {
                target,
                indices,
                values,
                ..
            }) => {
                self.use_buffer(g, at, target, Need::Tensor, true);
                for b in indices.iter().flatten() {
                    self.use_buffer(g, at, b, Need::Tensor, true);
                }
                self.use_buffer(g, at, values, Need::Tensor, true);
            }
            Line::ScatterFallback(s) => {
                self.use_buffer(g, at, &s.target, Need::Tensor, true);
                self.use_buffer(g, at, &s.index, Need::Tensor, true);
                self.use_arg(g, at, &s.src);
            }
            Line::DynamicScalar(DynamicScalar {
                symbol,
                source,
                keypath,
                ..
            }) => {
                self.use_buffer(g, at, source, Need::Tensor, false);
                let ok = matches!(
                    keypath.as_slice(),
                    [] | [KeyEntry::ConvertInt] | [KeyEntry::DivideBy(_)]
                );
                if !ok {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::BadKeyPath {
                            symbol: symbol.clone(),
                            path: KeyPathText(keypath).to_string(),
                            reason: "an item line takes no path, `.to_int()` or `//d`".into(),
                        },
                    );
                } else {
                    self.check_key_path(g, at, symbol, keypath, None);
                }
                // `zuf0 = buf0.item()` binds a float, `u0 = buf0.item()` an integer.
                let kind = match self.program.symbols.get(symbol).map(|d| &d.kind) {
                    Some(SymbolKind::UnbackedFloat) => SymbolKind::UnbackedFloat,
                    _ => SymbolKind::Unbacked,
                };
                self.bind_symbol(g, at, symbol, kind, "an item line");
            }
            Line::UnbackedSymbolDefs { source, bindings } => {
                self.use_buffer(g, at, source, Need::Any, false);
                let rank = g.layout(self.program, source).map(Layout::rank);
                for (s, path) in bindings {
                    if let Some(KeyEntry::Index(i)) = path.first() {
                        self.index_in_outputs(g, at, source, *i);
                    }
                    self.check_key_path(g, at, s, path, rank);
                    self.bind_symbol(g, at, s, SymbolKind::Unbacked, "a bind line");
                }
            }
            Line::Conditional(c) => self.conditional(g, at, c),
            Line::Switch(s) => self.switch(g, at, s),
            Line::WhileLoop(w) => self.while_loop(g, at, w),
            Line::EnterDeviceContext { streams, .. } => {
                let side_streams = streams.as_ref().map_or(0, |s| s.user_objects.len());
                self.open_block(g, at, OpenBlock::Device { side_streams });
            }
            Line::ExitDeviceContext => {
                let Some(k) = g
                    .blocks
                    .iter()
                    .rposition(|(_, b)| matches!(b, OpenBlock::Device { .. }))
                else {
                    self.err(Self::at(g, at), ValidationErrorKind::UnmatchedDeviceExit);
                    return;
                };
                // Scopes opened inside the guard must close before it.
                for (opened, block) in g.blocks.split_off(k + 1) {
                    if let OpenBlock::Scope(scope) = block {
                        self.err(Self::at(g, opened), ValidationErrorKind::UnclosedScope { scope });
                    }
                }
                g.blocks.pop();
            }
            Line::EnterScope(scope) => {
                if let Scope::Stream { stream } = scope {
                    if g.blocks.iter().any(|(_, b)| *b == OpenBlock::Scope(ScopeKind::Stream)) {
                        self.err(Self::at(g, at), ValidationErrorKind::NestedStream { stream: *stream });
                    }
                    let side_streams = g.blocks.iter().rev().find_map(|(_, b)| match b {
                        OpenBlock::Device { side_streams } => Some(*side_streams),
                        OpenBlock::Scope(_) => None,
                    });
                    if *stream > 0 && side_streams.unwrap_or(0) < *stream as usize {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::UnknownStream {
                                stream: *stream,
                                side_streams: side_streams.unwrap_or(0),
                            },
                        );
                    }
                }
                self.open_block(g, at, OpenBlock::Scope(scope.kind()));
            }
            Line::ExitScope { scope } => {
                if g.blocks.last().map(|(_, b)| *b) == Some(OpenBlock::Scope(*scope)) {
                    g.blocks.pop();
                } else {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::UnmatchedScopeExit { scope: *scope },
                    );
                }
            }
            Line::AssertFinite { buffer } => {
                self.use_buffer(g, at, buffer, Need::Tensor, true);
            }
            Line::Comment { .. } => {}
            Line::AssertSizeStride(a) => self.size_stride_check(g, at, (&a.buffer, &a.size, &a.stride), a.dtype),
            Line::AssertSizeStrideGrouped(group) => {
                for (k, a) in group.asserts.iter().enumerate() {
                    if group.asserts[..k].iter().any(|b| b.buffer == a.buffer) {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::GroupedAssertRepeats {
                                buffer: a.buffer.clone(),
                            },
                        );
                    }
                    self.size_stride_check(g, at, (&a.buffer, &a.size, &a.stride), None);
                }
            }
            Line::AssertDivByZero { divisor, .. } => {
                if divisor.is_boolean() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::NotInteger {
                            expr: divisor.to_string(),
                        },
                    );
                }
                self.use_expr(g, Some(at), divisor, at);
            }
            Line::AssertAlignment { buffer, alignment, .. } => {
                self.use_buffer(g, at, buffer, Need::Tensor, true);
                if !alignment.is_power_of_two() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::BadAlignment { alignment: *alignment },
                    );
                }
            }
            Line::RuntimeAssert { cond, .. } => {
                if !cond.is_boolean() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::NotBoolean { expr: cond.to_string() },
                    );
                }
                self.use_expr(g, Some(at), cond, at);
            }
        }
    }

    /// One tensor's size/stride (and dtype) check: the buffer is a live
    /// tensor, the expressions' symbols are bound, the lists match its rank
    /// and the dtype its declared one.
    fn size_stride_check(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        (buffer, size, stride): (&'a BufName, &'a [SymExpr], &'a [SymExpr]),
        dtype: Option<DType>,
    ) {
        self.use_buffer(g, at, buffer, Need::Tensor, true);
        for e in size.iter().chain(stride.iter()) {
            self.use_expr(g, Some(at), e, at);
        }
        let Some(l) = g.layout(self.program, buffer) else {
            return;
        };
        if size.len() != l.rank() || stride.len() != l.rank() {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::AssertRankMismatch {
                    buffer: buffer.clone(),
                    rank: l.rank(),
                    sizes: size.len(),
                    strides: stride.len(),
                },
            );
        }
        if let Some(expected) = dtype.filter(|d| *d != l.dtype) {
            let declared = l.dtype;
            self.err(
                Self::at(g, at),
                ValidationErrorKind::AssertDtypeMismatch {
                    buffer: buffer.clone(),
                    expected,
                    declared,
                },
            );
        }
    }

    // -- kernels ----------------------------------------------------------------
}

impl<'a> Validator<'a> {
    /// Index `i` of a `get` line or a key path into `source`: when `source`
    /// is a control-flow result, the index must name one of the values its
    /// subgraphs return.
    fn index_in_outputs(&mut self, g: &mut GraphState<'a>, at: usize, source: &BufName, i: i64) {
        if let Some(&outputs) = g.multi_outputs.get(source) {
            if usize::try_from(i).is_ok_and(|i| i >= outputs) {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::IndexPastOutputs {
                        value: source.clone(),
                        index: i,
                        outputs,
                    },
                );
            }
        }
    }
}
