//! Program tables, one graph's walk, its buffer table, inputs and outputs.

use super::*;

impl<'a> Validator<'a> {
    pub(super) fn check_tables(&mut self) {
        let p = self.program;
        // A kernel image path names a file of the program's bundle: it must
        // stay inside it (`pack` refused such a path; `check` let it pass).
        for (name, def) in &p.kernels {
            if let KernelBackend::Triton(m) = &def.backend {
                if let Some(path) = m.cubin.as_deref() {
                    let plain = path.strip_prefix("./").unwrap_or(path);
                    if !crate::ir::is_plain_relative_path(plain) {
                        self.err(
                            Location::Program,
                            ValidationErrorKind::KernelImagePath {
                                kernel: name.clone(),
                                path: path.to_string(),
                            },
                        );
                    }
                }
            }
        }
        for (sym, decl) in &p.symbols {
            self.check_identifier(&Location::Program, "symbol", sym.as_str());
            if decl.range.is_empty() {
                self.err(
                    Location::Program,
                    ValidationErrorKind::EmptyValueRange {
                        symbol: sym.clone(),
                        range: decl.range,
                    },
                );
            } else if let Some(h) = decl.hint {
                if !decl.range.contains(h) {
                    self.err(
                        Location::Program,
                        ValidationErrorKind::HintOutsideRange {
                            symbol: sym.clone(),
                            hint: h,
                            range: decl.range,
                        },
                    );
                }
            }
        }
        for (key, def) in &p.kernels {
            self.check_identifier(&Location::Program, "kernel", key.as_str());
            if *key != def.name {
                self.err(
                    Location::Program,
                    ValidationErrorKind::KernelNameMismatch {
                        key: key.clone(),
                        name: def.name.clone(),
                    },
                );
            }
        }
        for (name, layout) in &p.constants {
            self.check_layout_signs(Location::Program, name, layout);
            self.check_identifier(&Location::Program, "buffer", name.as_str());
            if self.symbol_index.contains_key(name.as_str()) {
                self.err(
                    Location::Program,
                    ValidationErrorKind::NameClash {
                        name: name.to_string(),
                        first: NameRole::Constant,
                        second: NameRole::Symbol,
                    },
                );
            }
        }
        for name in p.subgraphs.keys() {
            if name.as_str() == MAIN_GRAPH {
                self.err(
                    Location::Graph { graph: name.clone() },
                    ValidationErrorKind::ReservedGraphName,
                );
            } else {
                self.check_identifier(&Location::Program, "graph", name.as_str());
            }
        }
        // Backed symbols are bound at main's entry by what its inputs mention.
        let mut entry: FxIndexSet<Symbol> = FxIndexSet::default();
        for input in &p.main.inputs {
            match input {
                GraphInput::Symbol { symbol, .. } => {
                    entry.insert(symbol.clone());
                }
                GraphInput::SymExpr { expr, .. } => entry.extend(expr.free_symbols()),
                GraphInput::Tensor { name } => {
                    if let Some(l) = p.main.layout(name) {
                        entry.extend(layout_symbols(l));
                    }
                }
            }
        }
        for (sym, decl) in &p.symbols {
            if decl.kind == SymbolKind::Backed && !entry.contains(sym) {
                self.err(
                    Location::Program,
                    ValidationErrorKind::BackedSymbolNeverBound { symbol: sym.clone() },
                );
                self.unbound_backed.insert(sym.clone());
            }
        }
    }

    // -- one graph ----------------------------------------------------------

    pub(super) fn check_graph(&mut self, name: &GraphName, graph: &'a Graph, is_main: bool) -> Summary {
        let n = graph.buffers.len();
        let mut g = GraphState {
            name: name.clone(),
            graph,
            is_main,
            buffer_index: {
                let mut m = FxHashMap::with_capacity_and_hasher(n, Default::default());
                for (i, b) in graph.buffers.keys().enumerate() {
                    // The table's keys are distinct: the first index is the only one.
                    m.entry(b.as_str()).or_insert(i);
                }
                m
            },
            last_resolved: std::cell::RefCell::new(None),
            last_text: std::cell::RefCell::new(None),
            states: vec![None; n],
            info_index: vec![None; n],
            layout_syms: vec![Vec::new(); n],
            layout_bound: vec![false; n],
            storages: Vec::with_capacity(n),
            bound: vec![None; self.program.symbols.len()],
            line_bound: FxIndexSet::default(),
            prescanned: false,
            later_bindings: FxIndexMap::default(),
            multi_outputs: FxHashMap::default(),
            later_definitions: FxIndexMap::default(),
            later_kernels: FxIndexMap::default(),
            external_symbols: FxIndexMap::default(),
            external_kernels: FxIndexMap::default(),
            defined_kernels: FxIndexMap::default(),
            own_definitions: FxIndexSet::default(),
            precomputed: FxIndexMap::default(),
            blocks: Vec::new(),
            reported: FxIndexSet::default(),
            info: GraphInfo {
                name: name.clone(),
                buffers: IndexMap::with_capacity(n),
                line_binds: vec![Vec::new(); graph.lines.len()],
                outputs: IndexSet::new(),
                callers: Vec::new(),
            },
        };
        self.check_buffer_table(&mut g);
        self.check_inputs(&mut g);
        self.check_input_expressions(&g);
        for (i, line) in graph.lines.iter().enumerate() {
            self.check_line(&mut g, i, line);
        }
        for (at, block) in std::mem::take(&mut g.blocks) {
            let kind = match block {
                OpenBlock::Device { .. } => ValidationErrorKind::UnclosedDeviceGuard,
                OpenBlock::Scope(scope) => ValidationErrorKind::UnclosedScope { scope },
            };
            self.err(Self::at(&g, at), kind);
        }
        self.check_outputs(&mut g);
        Summary {
            external_symbols: g.external_symbols,
            external_kernels: g.external_kernels,
            binds: g.line_bound,
            defines: g.own_definitions,
            info: g.info,
        }
    }

    /// Records where each symbol, buffer and kernel is first bound/defined in
    /// this graph, so that "used before" errors can say where. Runs once, when
    /// one of the `later_*` tables is first needed.
    pub(super) fn prescan(g: &mut GraphState<'a>) {
        if g.prescanned {
            return;
        }
        g.prescanned = true;
        for (i, line) in g.graph.lines.iter().enumerate() {
            if let Some(b) = line.defines() {
                g.later_definitions.entry(b.clone()).or_insert(i);
            }
            for s in line.binds() {
                g.later_bindings.entry(s.clone()).or_insert(i);
            }
            if let Line::KernelDefinition { kernel } = line {
                g.later_kernels.entry(kernel.clone()).or_insert(i);
            }
        }
    }

    pub(super) fn check_buffer_table(&mut self, g: &mut GraphState<'a>) {
        let loc = Location::Graph { graph: g.name.clone() };
        for (index, (name, decl)) in g.graph.buffers.iter().enumerate() {
            self.check_identifier(&loc, "buffer", name.as_str());
            if self.symbol_index.contains_key(name.as_str()) {
                self.err(
                    loc.clone(),
                    ValidationErrorKind::NameClash {
                        name: name.to_string(),
                        first: NameRole::Buffer,
                        second: NameRole::Symbol,
                    },
                );
            }
            if self.program.constants.contains_key(name) {
                self.err(
                    loc.clone(),
                    ValidationErrorKind::NameClash {
                        name: name.to_string(),
                        first: NameRole::Constant,
                        second: NameRole::Buffer,
                    },
                );
            }
            if let BufferKind::Tensor(l) = &decl.kind {
                self.check_layout_signs(loc.clone(), name, l);
                if l.size.len() != l.stride.len() {
                    self.err(
                        loc.clone(),
                        ValidationErrorKind::LayoutRankMismatch {
                            buffer: name.clone(),
                            sizes: l.size.len(),
                            strides: l.stride.len(),
                        },
                    );
                }
                let syms = layout_symbols(l);
                for s in &syms {
                    if self.symbol_index(s).is_none() && g.reported.insert(format!("undeclared-symbol {s}")) {
                        self.err(loc.clone(), ValidationErrorKind::UndeclaredSymbol { symbol: s.clone() });
                    }
                }
                g.layout_syms[index] = syms;
            }
        }
    }

    /// Reports every constant part of `l` that is negative (once each), and
    /// an allocation size (`alloc N`) smaller than the elements the view
    /// reaches, when both are constants.
    pub(super) fn check_layout_signs(&mut self, loc: Location, name: &BufName, l: &Layout) {
        for (part, value) in negative_layout_parts(l) {
            self.err(
                loc.clone(),
                ValidationErrorKind::NegativeLayout {
                    buffer: name.clone(),
                    part,
                    value,
                },
            );
        }
        if let Some(alloc) = l.alloc_numel.as_ref().and_then(|n| n.as_int()) {
            let view = Layout {
                alloc_numel: None,
                ..l.clone()
            };
            if let Some(needed) = const_storage(&view).filter(|needed| *needed > alloc && alloc >= 0) {
                self.err(
                    loc,
                    ValidationErrorKind::AllocationTooSmall {
                        buffer: name.clone(),
                        alloc,
                        needed,
                    },
                );
            }
        }
    }

    pub(super) fn check_inputs(&mut self, g: &mut GraphState<'a>) {
        let loc = Location::Graph { graph: g.name.clone() };
        for (i, input) in g.graph.inputs.iter().enumerate() {
            match input {
                GraphInput::Symbol { symbol, .. } => {
                    let Some((sym_index, _, decl)) = self.program.symbols.get_full(symbol) else {
                        if g.reported.insert(format!("undeclared-symbol {symbol}")) {
                            self.err(
                                loc.clone(),
                                ValidationErrorKind::UndeclaredSymbol { symbol: symbol.clone() },
                            );
                        }
                        continue;
                    };
                    if g.is_main && decl.kind != SymbolKind::Backed {
                        self.err(
                            loc.clone(),
                            ValidationErrorKind::WrongSymbolKind {
                                symbol: symbol.clone(),
                                kind: decl.kind.clone(),
                                binder: "a symbol input of graph main",
                            },
                        );
                    }
                    // The same symbol passed twice (two inputs of equal size
                    // that Dynamo gave one symbol): the values agree by
                    // construction in a subgraph, and a run checks it for main.
                    let repeated_input = matches!(g.bound[sym_index], Some(Site::Input(j))
                        if matches!(g.graph.inputs.get(j), Some(GraphInput::Symbol { symbol: s, .. }) if s == symbol));
                    if repeated_input {
                        continue;
                    }
                    if let Some(first) = g.bound[sym_index] {
                        let first = SymbolBinding {
                            graph: g.name.clone(),
                            site: first,
                        };
                        self.err(
                            loc.clone(),
                            ValidationErrorKind::SymbolBoundTwice {
                                symbol: symbol.clone(),
                                first,
                            },
                        );
                    } else {
                        g.bound[sym_index] = Some(Site::Input(i));
                        self.bindings.entry(symbol.clone()).or_default().push(SymbolBinding {
                            graph: g.name.clone(),
                            site: Site::Input(i),
                        });
                    }
                }
                // Its symbols: solved at main's entry (`check_input_expressions`),
                // required from the caller in a subgraph (below).
                GraphInput::SymExpr { expr, .. } => {
                    for s in expr.free_symbols() {
                        if !self.program.symbols.contains_key(&s) && g.reported.insert(format!("undeclared-symbol {s}"))
                        {
                            self.err(loc.clone(), ValidationErrorKind::UndeclaredSymbol { symbol: s });
                        }
                    }
                }
                GraphInput::Tensor { name } => {
                    let kind = g.graph.buffers.get(name).map(|d| d.kind.clone());
                    match kind {
                        None => {
                            self.err(
                                loc.clone(),
                                ValidationErrorKind::UndeclaredBuffer { buffer: name.clone() },
                            );
                            continue;
                        }
                        Some(BufferKind::Multi) => {
                            self.err(loc.clone(), ValidationErrorKind::NotATensor { buffer: name.clone() });
                            continue;
                        }
                        Some(BufferKind::Tensor(_)) => {}
                    }
                    if let Some(BufferInfo { defined, .. }) = g.info.buffers.get(name) {
                        let first = *defined;
                        self.err(
                            loc.clone(),
                            ValidationErrorKind::DefinedTwice {
                                buffer: name.clone(),
                                first,
                            },
                        );
                        continue;
                    }
                    self.define(g, name, Site::Input(i), Some(None));
                }
            }
        }
        // Symbols tensor inputs and integer expression inputs mention: bound
        // at main's entry, required from the caller for subgraphs.
        for (i, input) in g.graph.inputs.iter().enumerate() {
            let (name, symbols) = match input {
                GraphInput::Tensor { name } => {
                    let Some(l) = g.graph.layout(name) else { continue };
                    (name, layout_symbols(l))
                }
                GraphInput::SymExpr { name, expr } => (name, expr.free_symbols().into_iter().collect()),
                GraphInput::Symbol { .. } => continue,
            };
            for s in symbols {
                let Some((sym_index, _, decl)) = self.program.symbols.get_full(&s) else {
                    continue;
                };
                if g.bound[sym_index].is_some() {
                    continue;
                }
                if g.is_main {
                    if decl.kind == SymbolKind::Backed {
                        g.bound[sym_index] = Some(Site::Input(i));
                        self.bindings.entry(s.clone()).or_default().push(SymbolBinding {
                            graph: g.name.clone(),
                            site: Site::Input(i),
                        });
                    } else if g.reported.insert(format!("unbound {s}")) {
                        self.err(
                            loc.clone(),
                            ValidationErrorKind::LayoutSymbolNotBound {
                                buffer: name.clone(),
                                symbol: s,
                                bound_at: None,
                            },
                        );
                    }
                } else {
                    g.external_symbols.entry(s).or_insert(None);
                }
            }
        }
    }

    /// The main graph's entry binds each backed symbol of its tensor inputs'
    /// sizes, strides and offsets and of its integer expression inputs from a
    /// symbol input, a dimension that is the symbol itself, or a dimension or
    /// integer input that is an affine expression of it and symbols bound
    /// before (`2*s0 + 1`, solved by every back end:
    /// `sym::solve`). A dimension that determines no symbol this way is an
    /// error in upstream's words: "Cannot solve input expression ..." when one
    /// symbol is left but the expression is not affine in it, "Compound input
    /// ... leaves these symbols undefined" when several are.
    pub(super) fn check_input_expressions(&mut self, g: &GraphState<'a>) {
        if !g.is_main {
            return;
        }
        let backed = |s: &Symbol| {
            self.program
                .symbols
                .get(s)
                .is_some_and(|d| d.kind == SymbolKind::Backed)
        };
        let mut known: FxIndexSet<Symbol> = FxIndexSet::default();
        let mut compound: Vec<&SymExpr> = Vec::new();
        for input in &g.graph.inputs {
            match input {
                GraphInput::Symbol { symbol, .. } => {
                    known.insert(symbol.clone());
                }
                GraphInput::SymExpr { expr, .. } => match expr {
                    SymExpr::Sym(s) => {
                        known.insert(s.clone());
                    }
                    e if e.as_int().is_none() => compound.push(e),
                    _ => {}
                },
                GraphInput::Tensor { name } => {
                    let Some(l) = g.graph.layout(name) else { continue };
                    for e in l.size.iter().chain(l.stride.iter()).chain(std::iter::once(&l.offset)) {
                        match e {
                            SymExpr::Sym(s) => {
                                known.insert(s.clone());
                            }
                            e if e.as_int().is_none() => compound.push(e),
                            _ => {}
                        }
                    }
                }
            }
        }
        let unknown_of = |known: &FxIndexSet<Symbol>, e: &SymExpr| -> Vec<Symbol> {
            e.free_symbols()
                .into_iter()
                .filter(|s| !known.contains(s) && backed(s))
                .collect()
        };
        let mut progress = true;
        while progress {
            progress = false;
            for e in &compound {
                if let [s] = unknown_of(&known, e).as_slice() {
                    if crate::sym::solve::affine_in(e, s).is_some() {
                        known.insert(s.clone());
                        progress = true;
                    }
                }
            }
        }
        let loc = Location::Graph { graph: g.name.clone() };
        let mut reported: Vec<&SymExpr> = Vec::new();
        for e in compound {
            let unknown = unknown_of(&known, e);
            if unknown.is_empty() || reported.contains(&e) {
                continue;
            }
            reported.push(e);
            let kind = match unknown.as_slice() {
                [s] => ValidationErrorKind::UnsolvableInput {
                    expr: e.to_string(),
                    symbol: s.clone(),
                },
                _ => ValidationErrorKind::UnderdeterminedInput {
                    expr: e.to_string(),
                    symbols: unknown,
                },
            };
            self.err(loc.clone(), kind);
        }
    }

    pub(super) fn check_outputs(&mut self, g: &mut GraphState<'a>) {
        let loc = Location::Graph { graph: g.name.clone() };
        let end = g.graph.lines.len();
        for out in &g.graph.outputs {
            match out {
                GraphOutput::Buffer(b) => {
                    g.info.outputs.insert(b.clone());
                    if let Some(info) = g.info.buffers.get_mut(b) {
                        info.is_output = true;
                    }
                    if !g.graph.buffers.contains_key(b) {
                        if !self.program.constants.contains_key(b) {
                            self.err(loc.clone(), ValidationErrorKind::UndeclaredBuffer { buffer: b.clone() });
                        }
                        continue;
                    }
                    let r = g.resolve(self.program, b);
                    match g.state(r).cloned() {
                        None => self.err(
                            loc.clone(),
                            ValidationErrorKind::OutputNotLive {
                                buffer: b.clone(),
                                ended_at: None,
                            },
                        ),
                        Some(BufState::Ended { at, .. }) => self.err(
                            loc.clone(),
                            ValidationErrorKind::OutputNotLive {
                                buffer: b.clone(),
                                ended_at: Some(at),
                            },
                        ),
                        Some(BufState::Released { at, .. }) => self.err(
                            loc.clone(),
                            ValidationErrorKind::OutputNotLive {
                                buffer: b.clone(),
                                ended_at: Some(at),
                            },
                        ),
                        Some(BufState::Live { storage }) => self.check_storage_alive(g, b, storage, None),
                    }
                }
                GraphOutput::Expr(e) => self.use_expr(g, None, e, end),
                GraphOutput::None => {}
            }
        }
    }

    // -- symbols --------------------------------------------------------------
}
