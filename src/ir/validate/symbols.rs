//! Symbols: uses, bindings, key paths.

use super::*;

impl<'a> Validator<'a> {
    /// Requires every symbol of `e` to be declared and bound here. `line` is
    /// `None` for graph headers; `order` orders header uses after all lines.
    pub(super) fn use_expr(&mut self, g: &mut GraphState<'a>, line: Option<usize>, e: &SymExpr, order: usize) {
        for s in expr_symbols(e) {
            self.require_symbol(g, line, s, None, order);
            // A float symbol is passed whole; inside an integer expression it
            // has no meaning (Inductor never writes one there).
            if !matches!(e, SymExpr::Sym(_)) && self.is_float_symbol(s) {
                self.err(
                    Self::loc(g, line),
                    ValidationErrorKind::FloatSymbolMisused {
                        symbol: s.clone(),
                        place: format!("the expression `{e}`"),
                    },
                );
            }
        }
        // A division or modulo by a constant zero fails wherever it is
        // evaluated (Python raises ZeroDivisionError, C++ is undefined).
        let mut zero_divisor = false;
        e.visit(&mut |x| {
            let divisor = match x {
                SymExpr::FloorDiv(_, d) | SymExpr::CleanDiv(_, d) | SymExpr::Mod(_, d) | SymExpr::PythonMod(_, d) => d,
                SymExpr::ModularIndexing(_, d, _) => d,
                _ => return,
            };
            zero_divisor |= crate::sym::eval::eval_int(divisor, &crate::sym::Bindings::new()) == Ok(0);
        });
        if zero_divisor {
            let loc = match line {
                Some(at) => Self::at(g, at),
                None => Location::Graph { graph: g.name.clone() },
            };
            self.err(loc, ValidationErrorKind::DivisionByZero { expr: e.to_string() });
        }
    }

    /// Requires the symbols of a graph buffer's layout to be bound at line `at`
    /// ([`Validator::require_symbol`] for each, with the buffer named).
    pub(super) fn require_layout_symbols(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, r: BufRef) {
        match r {
            BufRef::Graph(i) => {
                if g.layout_bound[i] {
                    return;
                }
                let syms = std::mem::take(&mut g.layout_syms[i]);
                for s in &syms {
                    self.require_symbol(g, Some(at), s, Some(name), at);
                }
                g.layout_bound[i] = syms.iter().all(|s| self.bound_site(g, s).is_some());
                g.layout_syms[i] = syms;
            }
            BufRef::Constant => {
                if let Some(l) = g.layout_of(self.program, name, r) {
                    for s in layout_symbols(l) {
                        self.require_symbol(g, Some(at), &s, Some(name), at);
                    }
                }
            }
            BufRef::Undeclared => {}
        }
    }

    /// Whether `s` is declared an [`SymbolKind::UnbackedFloat`].
    pub(super) fn is_float_symbol(&self, s: &Symbol) -> bool {
        self.program
            .symbols
            .get(s)
            .is_some_and(|d| d.kind == SymbolKind::UnbackedFloat)
    }

    pub(super) fn require_symbol(
        &mut self,
        g: &mut GraphState<'a>,
        line: Option<usize>,
        s: &Symbol,
        via_buffer: Option<&BufName>,
        order: usize,
    ) {
        if let (Some(b), true) = (via_buffer, self.is_float_symbol(s)) {
            if g.reported.insert(format!("float-size {s} {b}")) {
                self.err(
                    Self::loc(g, line),
                    ValidationErrorKind::FloatSymbolMisused {
                        symbol: s.clone(),
                        place: format!("the layout of buffer {b}"),
                    },
                );
            }
        }
        let Some(index) = self.symbol_index(s) else {
            if g.reported.insert(format!("undeclared-symbol {s}")) {
                // In a line's own expression (not a layout), the name may as
                // well be a buffer the graph does not declare.
                let kind = match (line, via_buffer) {
                    (Some(_), None) => ValidationErrorKind::UnknownName { name: s.clone() },
                    _ => ValidationErrorKind::UndeclaredSymbol { symbol: s.clone() },
                };
                self.err(Self::loc(g, line), kind);
            }
            return;
        };
        if g.bound[index].is_some() || self.unbound_backed.contains(s) {
            return;
        }
        Self::prescan(g);
        let bound_later = g.later_bindings.get(s).copied().filter(|&i| i >= order);
        if !g.is_main && bound_later.is_none() {
            // Bound by whoever runs this subgraph; checked at the call.
            let at = line;
            g.external_symbols.entry(s.clone()).or_insert(at);
            return;
        }
        if !g.reported.insert(format!("unbound {s}")) {
            return;
        }
        let kind = match via_buffer {
            Some(b) => ValidationErrorKind::LayoutSymbolNotBound {
                buffer: b.clone(),
                symbol: s.clone(),
                bound_at: bound_later,
            },
            None => ValidationErrorKind::SymbolNotBound {
                symbol: s.clone(),
                bound_at: bound_later,
            },
        };
        self.err(Self::loc(g, line), kind);
    }

    /// Line `at` binds `s`, which `first` in this graph bound already.
    pub(super) fn bound_twice(&mut self, g: &GraphState<'a>, at: usize, s: &Symbol, first: Site) {
        let first = SymbolBinding {
            graph: g.name.clone(),
            site: first,
        };
        self.err(
            Self::at(g, at),
            ValidationErrorKind::SymbolBoundTwice {
                symbol: s.clone(),
                first,
            },
        );
    }

    pub(super) fn bind_symbol(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        s: &Symbol,
        expected: SymbolKind,
        binder: &'static str,
    ) {
        let Some((index, _, decl)) = self.program.symbols.get_full(s) else {
            if g.reported.insert(format!("undeclared-symbol {s}")) {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UndeclaredSymbol { symbol: s.clone() },
                );
            }
            return;
        };
        if decl.kind != expected {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::WrongSymbolKind {
                    symbol: s.clone(),
                    kind: decl.kind.clone(),
                    binder,
                },
            );
        }
        if let Some(first) = g.bound[index] {
            self.bound_twice(g, at, s, first);
            return;
        }
        g.bound[index] = Some(Site::Line(at));
        g.line_bound.insert(s.clone());
        if let Some(v) = g.info.line_binds.get_mut(at) {
            v.push(s.clone());
        }
        self.bindings.entry(s.clone()).or_default().push(SymbolBinding {
            graph: g.name.clone(),
            site: Site::Line(at),
        });
    }

    pub(super) fn check_key_path(
        &mut self,
        g: &GraphState<'a>,
        at: usize,
        symbol: &Symbol,
        path: &[KeyEntry],
        source_rank: Option<usize>,
    ) {
        let mut reason: Option<String> = None;
        let mut i = 0;
        let mut at_source = true;
        while i < path.len() && reason.is_none() {
            match &path[i] {
                KeyEntry::CallMethod(m) => {
                    let next = path.get(i + 1);
                    match (m, next) {
                        (TensorMethod::Size | TensorMethod::Stride, Some(KeyEntry::Index(d))) => {
                            if *d < 0 {
                                reason = Some(format!("dimension {d} is negative"));
                            } else if let (true, Some(rank)) = (at_source, source_rank) {
                                if *d as u64 >= rank as u64 {
                                    reason = Some(format!("dimension {d} is out of range for a tensor of rank {rank}"));
                                }
                            }
                            i += 2;
                        }
                        (TensorMethod::Size | TensorMethod::Stride, _) => {
                            reason = Some(format!(".{}() must be followed by a dimension index", m.as_str()));
                        }
                        (TensorMethod::StorageOffset, _) => i += 1,
                    }
                    at_source = false;
                }
                KeyEntry::Index(n) => {
                    if *n < 0 {
                        reason = Some(format!("index {n} is negative"));
                    } else {
                        // An element of a multi-output value: held to the
                        // outputs limit as a `get` line's index is (the C++
                        // lowerings declare one variable per output).
                        let outputs = usize::try_from(*n).unwrap_or(usize::MAX).saturating_add(1);
                        self.over_limit(g, at, crate::Limit::Outputs, outputs, || {
                            format!("key path of `{symbol}` indexed at {n}: outputs of one value")
                        });
                    }
                    at_source = false;
                    i += 1;
                }
                KeyEntry::DivideBy(d) => {
                    if *d <= 0 {
                        reason = Some(format!("divisor {d} is not positive"));
                    }
                    i += 1;
                }
                KeyEntry::ConvertInt | KeyEntry::InnerTensor(_) => {
                    at_source = false;
                    i += 1;
                }
            }
        }
        if let Some(reason) = reason {
            let loc = Self::at(g, at);
            self.err(
                loc,
                ValidationErrorKind::BadKeyPath {
                    symbol: symbol.clone(),
                    path: KeyPathText(path).to_string(),
                    reason,
                },
            );
        }
    }

    // -- buffers --------------------------------------------------------------
}
