//! The validator's state: the program-wide walk ([`Validator`]), one graph's buffers, storages and symbols ([`GraphState`]), and helpers on expressions and layouts.

use super::*;

/// What a caller needs to know about a subgraph it runs.
#[derive(Clone, Debug)]
pub(super) struct Summary {
    /// Symbols used but not bound inside, with the first using line (`None`:
    /// its input layouts).
    pub(super) external_symbols: FxIndexMap<Symbol, Option<usize>>,
    /// Kernels called but not defined inside, with the first calling line.
    pub(super) external_kernels: FxIndexMap<KernelName, usize>,
    /// Symbols its lines bind (visible at its end).
    pub(super) binds: FxIndexSet<Symbol>,
    /// Kernels its lines define.
    pub(super) defines: FxIndexSet<KernelName>,
    pub(super) info: GraphInfo,
}

impl Summary {
    /// Moves the graph's info out (into the validator's `infos`), leaving
    /// an empty one: a summary is cloned at every line that runs its
    /// graph, and the info (every buffer and line) is the graph's size.
    pub(super) fn take_info(&mut self) -> GraphInfo {
        let empty = GraphInfo {
            name: self.info.name.clone(),
            buffers: IndexMap::new(),
            line_binds: Vec::new(),
            outputs: IndexSet::new(),
            callers: Vec::new(),
        };
        std::mem::replace(&mut self.info, empty)
    }
}

#[derive(Clone, Debug)]
pub(super) enum SummaryState {
    InProgress,
    Done(Summary),
}

pub(super) struct Validator<'a> {
    pub(super) program: &'a Program,
    pub(super) errors: Vec<ValidationError>,
    pub(super) summaries: IndexMap<GraphName, SummaryState>,
    pub(super) infos: IndexMap<GraphName, GraphInfo>,
    pub(super) callers: IndexMap<GraphName, Vec<(GraphName, usize)>>,
    pub(super) stack: Vec<GraphName>,
    pub(super) bindings: IndexMap<Symbol, Vec<SymbolBinding>>,
    pub(super) kernel_definitions: IndexMap<KernelName, (GraphName, usize)>,
    /// Backed symbols already reported as never bound (their uses are not reported again).
    pub(super) unbound_backed: IndexSet<Symbol>,
    /// Symbol name -> its index in the program's symbol table.
    pub(super) symbol_index: FxHashMap<&'a str, usize>,
    /// Kernel name -> its index in the program's kernel table.
    pub(super) kernel_index: FxHashMap<&'a str, usize>,
    /// The call parameters of each kernel (by kernel table index), computed
    /// on first call: `Some(None)` when the backend's parameters are unknown.
    pub(super) call_params: Vec<Option<Option<Rc<[Param<'a>]>>>>,
    pub(super) limits: crate::Limits,
    /// Errors past `limits.max_diagnostics`, counted but not kept.
    pub(super) suppressed: usize,
}

/// What a buffer name refers to in a graph.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum BufRef {
    /// The graph buffer at this index of the graph's buffer table.
    Graph(usize),
    /// A program constant (not declared by the graph).
    Constant,
    /// Neither.
    Undeclared,
}

#[derive(Clone, Debug)]
pub(super) enum BufState {
    Live {
        storage: Option<usize>,
    },
    /// `FreeIfNotReused ... reused`: only a `Reuse` may take it now.
    Released {
        at: usize,
        storage: Option<usize>,
    },
    Ended {
        at: usize,
        how: Ending,
    },
}

#[derive(Clone, Debug)]
pub(super) struct Storage<'a> {
    /// The name that owns it now.
    pub(super) owner: BufName,
    /// The buffer whose definition created it.
    pub(super) root: BufName,
    /// The layout it was created with (its capacity).
    pub(super) capacity: Option<&'a Layout>,
    pub(super) freed_at: Option<usize>,
}

/// How a line uses a buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Tensor,
    Multi,
    Any,
}

/// Insertion-ordered maps with a fast hasher, for the checker's per-line
/// lookups (iteration order is insertion order, as with `IndexMap`).
pub(super) type FxIndexMap<K, V> = IndexMap<K, V, rustc_hash::FxBuildHasher>;
/// The set counterpart of [`FxIndexMap`].
pub(super) type FxIndexSet<K> = IndexSet<K, rustc_hash::FxBuildHasher>;

pub(super) struct GraphState<'a> {
    pub(super) name: GraphName,
    pub(super) graph: &'a Graph,
    pub(super) is_main: bool,
    /// Buffer name -> index in the graph's buffer table.
    pub(super) buffer_index: FxHashMap<&'a str, usize>,
    /// The last name [`GraphState::resolve`] looked up, and the answer.
    pub(super) last_resolved: std::cell::RefCell<Option<(BufName, BufRef)>>,
    /// The last line [`Validator::at`] quoted, and its text.
    pub(super) last_text: std::cell::RefCell<Option<(usize, String)>>,
    /// The state of each defined graph buffer (by buffer table index).
    pub(super) states: Vec<Option<BufState>>,
    /// Each graph buffer's index in `info.buffers` once defined.
    pub(super) info_index: Vec<Option<usize>>,
    /// Each graph buffer's layout symbols ([`layout_symbols`]).
    pub(super) layout_syms: Vec<Vec<Symbol>>,
    /// Graph buffers whose layout symbols are all known to be bound (symbols
    /// stay bound, so their layouts need no further checks).
    pub(super) layout_bound: Vec<bool>,
    pub(super) storages: Vec<Storage<'a>>,
    /// Where each declared symbol (by symbol table index) is bound.
    pub(super) bound: Vec<Option<Site>>,
    pub(super) line_bound: FxIndexSet<Symbol>,
    /// `later_*` are filled (by [`Validator::prescan`]) only when first needed.
    pub(super) prescanned: bool,
    pub(super) later_bindings: FxIndexMap<Symbol, usize>,
    /// The number of values each `cond`, `switch` and `while_loop` result
    /// holds (its subgraphs' outputs), which a `get` must index below.
    pub(super) multi_outputs: FxHashMap<BufName, usize>,
    pub(super) later_definitions: FxIndexMap<BufName, usize>,
    pub(super) later_kernels: FxIndexMap<KernelName, usize>,
    pub(super) external_symbols: FxIndexMap<Symbol, Option<usize>>,
    pub(super) external_kernels: FxIndexMap<KernelName, usize>,
    pub(super) defined_kernels: FxIndexMap<KernelName, (GraphName, usize)>,
    pub(super) own_definitions: FxIndexSet<KernelName>,
    pub(super) precomputed: FxIndexMap<Symbol, &'a SymExpr>,
    /// The open device guards and scopes, innermost last: the line each
    /// was opened by, and what it is.
    pub(super) blocks: Vec<(usize, OpenBlock)>,
    pub(super) reported: FxIndexSet<String>,
    pub(super) info: GraphInfo,
}

/// An open device guard or scope ([`GraphState::blocks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpenBlock {
    /// A device guard with this many side streams.
    Device {
        /// Side streams the guard names (`streams(...)`), 0 for a plain guard.
        side_streams: usize,
    },
    /// A scope of this kind.
    Scope(crate::ir::ScopeKind),
}

impl<'a> GraphState<'a> {
    pub(super) fn resolve(&self, program: &'a Program, name: &BufName) -> BufRef {
        // A line names the same buffer several times over: the last answer is
        // kept with the name, recognised by the address of its text (the kept
        // clone holds that text alive, so the address names it alone).
        if let Some((last, r)) = &*self.last_resolved.borrow() {
            if std::ptr::eq(last.as_str(), name.as_str()) {
                return *r;
            }
        }
        let r = match self.buffer_index.get(name.as_str()) {
            Some(&i) => BufRef::Graph(i),
            None if program.constants.contains_key(name) => BufRef::Constant,
            None => BufRef::Undeclared,
        };
        *self.last_resolved.borrow_mut() = Some((name.clone(), r));
        r
    }

    pub(super) fn layout_of(&self, program: &'a Program, name: &BufName, r: BufRef) -> Option<&'a Layout> {
        match r {
            BufRef::Graph(i) => match self.graph.buffers.get_index(i).map(|(_, d)| &d.kind) {
                Some(BufferKind::Tensor(l)) => Some(l),
                _ => None,
            },
            BufRef::Constant => program.constants.get(name),
            BufRef::Undeclared => None,
        }
    }

    pub(super) fn layout(&self, program: &'a Program, name: &BufName) -> Option<&'a Layout> {
        self.layout_of(program, name, self.resolve(program, name))
    }

    /// The buffer's entry in `info.buffers`, once defined.
    pub(super) fn info_mut(&mut self, name: &BufName, r: BufRef) -> Option<&mut BufferInfo> {
        match r {
            BufRef::Graph(i) => {
                let at = self.info_index[i]?;
                self.info.buffers.get_index_mut(at).map(|(_, b)| b)
            }
            _ => self.info.buffers.get_mut(name),
        }
    }

    /// Where the buffer is defined, when it is.
    pub(super) fn defined_site(&self, name: &BufName, r: BufRef) -> Option<Site> {
        match r {
            BufRef::Graph(i) => {
                let at = self.info_index[i]?;
                self.info.buffers.get_index(at).map(|(_, b)| b.defined)
            }
            _ => self.info.buffers.get(name).map(|b| b.defined),
        }
    }

    /// The state of a graph buffer (`None`: not defined yet, or not a graph buffer).
    pub(super) fn state(&self, r: BufRef) -> Option<&BufState> {
        match r {
            BufRef::Graph(i) => self.states[i].as_ref(),
            _ => None,
        }
    }

    /// Sets the state of a graph buffer (constants have none: nothing reads it).
    pub(super) fn set_state(&mut self, r: BufRef, state: BufState) {
        if let BufRef::Graph(i) = r {
            self.states[i] = Some(state);
        }
    }

    pub(super) fn touch(&mut self, name: &BufName, r: BufRef, at: usize) {
        if let Some(b) = self.info_mut(name, r) {
            b.last_use = Some(at);
        }
    }
}

pub(super) fn is_identifier(s: &str) -> bool {
    // Byte-wise: a non-ASCII character fails either test, as it would char-wise.
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && bytes.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Calls `f` on every symbol occurrence of `e`, parents first and children in
/// order (the order of [`SymExpr::free_symbols`]), without allocating.
pub(super) fn for_each_symbol<'e>(e: &'e SymExpr, f: &mut impl FnMut(&'e Symbol)) {
    match e {
        SymExpr::Int(_) | SymExpr::Bool(_) => {}
        SymExpr::Sym(s) => f(s),
        SymExpr::Add(v) | SymExpr::Mul(v) | SymExpr::Min(v) | SymExpr::Max(v) | SymExpr::And(v) | SymExpr::Or(v) => {
            for c in v {
                for_each_symbol(c, f);
            }
        }
        SymExpr::FloorDiv(a, b)
        | SymExpr::CleanDiv(a, b)
        | SymExpr::Mod(a, b)
        | SymExpr::PythonMod(a, b)
        | SymExpr::Cmp(_, a, b) => {
            for_each_symbol(a, f);
            for_each_symbol(b, f);
        }
        SymExpr::ModularIndexing(a, b, c) => {
            for_each_symbol(a, f);
            for_each_symbol(b, f);
            for_each_symbol(c, f);
        }
        SymExpr::Pow(a, _) | SymExpr::Not(a) => for_each_symbol(a, f),
    }
}

/// The distinct symbols of `e` in first-occurrence order ([`SymExpr::free_symbols`]).
pub(super) fn expr_symbols(e: &SymExpr) -> SmallVec<[&Symbol; 4]> {
    let mut out: SmallVec<[&Symbol; 4]> = SmallVec::new();
    for_each_symbol(e, &mut |s| {
        if !out.contains(&s) {
            out.push(s);
        }
    });
    out
}

pub(super) fn layout_symbols(l: &Layout) -> Vec<Symbol> {
    let mut out: Vec<Symbol> = Vec::new();
    let exprs = l
        .size
        .iter()
        .chain(l.stride.iter())
        .chain(std::iter::once(&l.offset))
        .chain(l.alloc_numel.iter());
    for e in exprs {
        for_each_symbol(e, &mut |s| {
            if !out.contains(s) {
                out.push(s.clone());
            }
        });
    }
    out
}

/// The parts of `l` that are negative constants: sizes, strides, the
/// storage offset and the allocation size, each with its value.
pub(super) fn negative_layout_parts(l: &Layout) -> Vec<(String, i64)> {
    let constant = |e: &SymExpr| crate::sym::eval::eval_int(e, &Bindings::new()).ok().filter(|v| *v < 0);
    let mut out = Vec::new();
    for (what, list) in [("size", &l.size), ("stride", &l.stride)] {
        for (d, e) in list.iter().enumerate() {
            if let Some(v) = constant(e) {
                out.push((format!("the {what} of dimension {d}"), v));
            }
        }
    }
    if let Some(v) = constant(&l.offset) {
        out.push(("the storage offset".to_string(), v));
    }
    if let Some(v) = l.alloc_numel.as_ref().and_then(constant) {
        out.push(("the allocation size".to_string(), v));
    }
    out
}

/// Storage elements a layout needs when that is a constant.
pub(super) fn const_storage(l: &Layout) -> Option<i64> {
    l.storage_numel_eval(&Bindings::new()).ok()
}

pub(super) fn describe_arg(v: &ArgValue) -> String {
    match v {
        ArgValue::Buffer(b) => format!("buffer {b}"),
        ArgValue::Expr(e) => format!("expression {e}"),
        ArgValue::Float(_) => "a float".into(),
        ArgValue::Bool(_) => "a boolean".into(),
        ArgValue::None => "None".into(),
        ArgValue::Str(_) => "a string".into(),
        ArgValue::DType(_) => "a dtype".into(),
        ArgValue::Device(_) => "a device".into(),
        ArgValue::List(_) => "a list".into(),
    }
}

/// Each name's position in a table, by name.
fn positions<'a, K: 'a>(
    keys: impl Iterator<Item = &'a K>,
    name: impl Fn(&'a K) -> &'a str,
) -> FxHashMap<&'a str, usize> {
    keys.enumerate().map(|(i, k)| (name(k), i)).collect()
}

impl<'a> Validator<'a> {
    pub(super) fn new(program: &'a Program) -> Self {
        let symbol_index = positions(program.symbols.keys(), |s| s.as_str());
        let kernel_index = positions(program.kernels.keys(), |k| k.as_str());
        Validator {
            program,
            errors: Vec::new(),
            summaries: IndexMap::new(),
            infos: IndexMap::new(),
            callers: IndexMap::new(),
            stack: Vec::new(),
            bindings: IndexMap::new(),
            kernel_definitions: IndexMap::new(),
            unbound_backed: IndexSet::new(),
            symbol_index,
            kernel_index,
            call_params: (0..program.kernels.len()).map(|_| None).collect(),
            limits: crate::Limits::default(),
            suppressed: 0,
        }
    }

    /// The symbol's index in the program's symbol table; `None` when undeclared.
    pub(super) fn symbol_index(&self, s: &Symbol) -> Option<usize> {
        self.symbol_index.get(s.as_str()).copied()
    }

    /// Where `s` is bound in `g`, if it is.
    pub(super) fn bound_site(&self, g: &GraphState<'a>, s: &Symbol) -> Option<Site> {
        self.symbol_index(s).and_then(|i| g.bound[i])
    }

    /// The graph that declares a buffer: main first, then subgraphs in table order.
    pub(super) fn buffer_owner(&self, name: &BufName) -> Option<GraphName> {
        if self.program.main.buffers.contains_key(name) {
            return Some(GraphName::new(MAIN_GRAPH));
        }
        self.program
            .subgraphs
            .iter()
            .find(|(_, graph)| graph.buffers.contains_key(name))
            .map(|(g, _)| g.clone())
    }

    pub(super) fn err(&mut self, location: Location, kind: ValidationErrorKind) {
        if self.errors.len() >= self.limits.max_diagnostics {
            self.suppressed += 1;
            return;
        }
        self.errors.push(ValidationError { location, kind });
    }

    /// An error at `location` unless `name` (a `what`: `buffer`, `symbol`,
    /// `kernel` or `graph`) is a Python identifier.
    pub(super) fn check_identifier(&mut self, location: &Location, what: &'static str, name: &str) {
        if !is_identifier(name) {
            self.err(
                location.clone(),
                ValidationErrorKind::InvalidName {
                    what,
                    name: name.to_string(),
                },
            );
        }
    }

    /// The one check of a validation limit: reports `which` exceeded at line
    /// `at` of `g` when `value` is over it (`what` says what exceeded it, and
    /// is only made then); whether it was.
    pub(super) fn over_limit(
        &mut self,
        g: &GraphState<'_>,
        at: usize,
        which: crate::Limit,
        value: usize,
        what: impl FnOnce() -> String,
    ) -> bool {
        let max = self.limits.max(which);
        if value as u64 <= max {
            return false;
        }
        if let Err(error) = crate::Limits::check(which, value as u64, max, what()) {
            self.err(Self::at(g, at), ValidationErrorKind::Limit(error));
        }
        true
    }

    /// Opens a device guard or scope at line `at`, within the nesting limit
    /// (the text form's depth limit: the two nest as blocks of one text).
    pub(super) fn open_block(&mut self, g: &mut GraphState<'_>, at: usize, block: OpenBlock) {
        let depth = g.blocks.len() + 1;
        self.over_limit(g, at, crate::Limit::TextDepth, depth, || {
            "device guards and scopes nested too deep".to_string()
        });
        g.blocks.push((at, block));
    }

    pub(super) fn at(g: &GraphState<'_>, index: usize) -> Location {
        // Several errors on one line quote it once (a long line is printed once).
        let mut cache = g.last_text.borrow_mut();
        let text = match &*cache {
            Some((i, t)) if *i == index => t.clone(),
            _ => {
                let t = g.graph.lines.get(index).map(line_text).unwrap_or_default();
                *cache = Some((index, t.clone()));
                t
            }
        };
        Location::Line {
            graph: g.name.clone(),
            index,
            text,
        }
    }

    pub(super) fn loc(g: &GraphState<'_>, index: Option<usize>) -> Location {
        match index {
            Some(i) => Self::at(g, i),
            None => Location::Graph { graph: g.name.clone() },
        }
    }

    // -- program-wide tables ------------------------------------------------
}
