//! Validation errors: what rule is broken ([`ValidationErrorKind`]) and where ([`Location`], shared with the back ends).

use super::*;

/// How a buffer name ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `Free`, `FreeIfNotReused` or `CommBufferFree`.
    Freed,
    /// `FreeIfNotReused ... reused`: its storage waits for a `Reuse`.
    MarkedReused,
    /// A `Reuse` handed its storage to this buffer.
    ReusedBy(BufName),
}

/// Which side of a name clash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRole {
    /// A graph buffer.
    Buffer,
    /// A declared symbol.
    Symbol,
    /// A program constant.
    Constant,
}

impl fmt::Display for NameRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameRole::Buffer => "buffer",
            NameRole::Symbol => "symbol",
            NameRole::Constant => "constant",
        })
    }
}

fn ending_text(buffer: &BufName, at: &str, how: &Ending) -> String {
    match how {
        Ending::Freed => format!("buffer {buffer} is used after it was freed at {at}"),
        Ending::MarkedReused => {
            format!("buffer {buffer} is used after its storage was released for reuse at {at}")
        }
        Ending::ReusedBy(new) => {
            format!("buffer {buffer} is used after its storage was handed to {new} at {at}")
        }
    }
}

/// How a message names a line it mentions: given the line's graph and its
/// index there, the words for it (`line 61` of a file, `main.lines[9]` of
/// JSON); `None` keeps the graph's own numbering (`line 9`).
pub type LineNamer<'n> = &'n dyn Fn(&GraphName, usize) -> Option<String>;

impl ValidationErrorKind {
    /// The message, with every line it mentions named by `lines` (its
    /// `Display` is this with the graph's own numbering). `graph` is the
    /// graph the error is in: the lines a message mentions without naming a
    /// graph are its lines.
    pub fn naming_lines(&self, graph: Option<&GraphName>, lines: LineNamer<'_>) -> String {
        use ValidationErrorKind as K;
        let here = |i: usize| graph.and_then(|g| lines(g, i)).unwrap_or_else(|| format!("line {i}"));
        let site = |s: &Site| match s {
            Site::Line(i) => here(*i),
            Site::Input(_) => s.to_string(),
        };
        // ` (WHAT at LINE)` where there is a line, else `otherwise`.
        let line_note = |what: &str, at: &Option<usize>, otherwise: &str| match at {
            Some(i) => format!(" ({what} at {})", here(*i)),
            None => otherwise.to_string(),
        };
        match self {
            K::SymbolNotBound { symbol, bound_at } => format!(
                "symbol {symbol} is used before it is bound{}",
                line_note("bound", bound_at, " (nothing in this graph binds it)")
            ),
            K::LayoutSymbolNotBound {
                buffer,
                symbol,
                bound_at,
            } => format!(
                "the layout of buffer {buffer} mentions symbol {symbol}, which is not bound here{}",
                line_note("bound", bound_at, "")
            ),
            K::SymbolBoundTwice { symbol, first } => {
                let first = match first.site {
                    Site::Line(i) => lines(&first.graph, i).unwrap_or_else(|| first.to_string()),
                    Site::Input(_) => first.to_string(),
                };
                format!("symbol {symbol} is bound twice (first bound at {first})")
            }
            K::UsedBeforeDefinition { buffer, defined_at } => format!(
                "buffer {buffer} is used before it is defined{}",
                line_note("defined", defined_at, " (no line defines it)")
            ),
            K::UseAfterEnd { buffer, ended_at, how } => ending_text(buffer, &here(*ended_at), how),
            K::DoubleFree { buffer, first_freed_at } => {
                format!(
                    "buffer {buffer} is freed twice (first freed at {})",
                    here(*first_freed_at)
                )
            }
            K::DefinedTwice { buffer, first } => {
                format!("buffer {buffer} is defined twice (first defined at {})", site(first))
            }
            K::ViewOutlivesStorage {
                buffer,
                owner,
                freed_at,
            } => format!(
                "view {buffer} is used after the storage it views (owned by {owner}) was freed at {}",
                here(*freed_at)
            ),
            K::OutputNotLive { buffer, ended_at } => format!(
                "output {buffer} is not live at the end of the graph{}",
                line_note("it ends", ended_at, " (it is never defined)")
            ),
            K::KernelNotDefined { kernel, defined_at } => format!(
                "kernel {kernel} is called before it is defined{}",
                line_note("defined", defined_at, " (no line defines it)")
            ),
            K::KernelDefinedTwice {
                kernel,
                graph: first_graph,
                first,
            } => format!(
                "kernel {kernel} is defined twice (first defined at {})",
                lines(first_graph, *first).unwrap_or_else(|| format!("line {first} of graph {first_graph}"))
            ),
            K::SubgraphSymbolNotBound {
                graph: subgraph,
                symbol,
                used_at,
            } => format!(
                "subgraph {subgraph} uses symbol {symbol} ({}), which is not bound here",
                match used_at {
                    Some(i) => format!("at {}", lines(subgraph, *i).unwrap_or_else(|| format!("its line {i}"))),
                    None => "in its inputs".to_string(),
                }
            ),
            K::SubgraphKernelNotDefined {
                graph: subgraph,
                kernel,
                called_at,
            } => format!(
                "subgraph {subgraph} calls kernel {kernel} (at {}), which is not defined before this line",
                lines(subgraph, *called_at).unwrap_or_else(|| format!("its line {called_at}"))
            ),
            other => other.to_string(),
        }
    }

    /// The program-table entry an error of the program's tables is about,
    /// as (`symbol`, `kernel`, `constant` or `graph`, its name): what a
    /// file position is looked up by when the error has no graph. `None`
    /// for kinds not about one entry.
    pub fn table_entry(&self) -> Option<(&'static str, &str)> {
        use ValidationErrorKind as K;
        match self {
            K::EmptyValueRange { symbol, .. }
            | K::HintOutsideRange { symbol, .. }
            | K::BackedSymbolNeverBound { symbol } => Some(("symbol", symbol.as_str())),
            K::KernelImagePath { kernel, .. } => Some(("kernel", kernel.as_str())),
            K::KernelNameMismatch { key, .. } => Some(("kernel", key.as_str())),
            // A name clash found in the tables is a constant's.
            K::NameClash { name, .. } => Some(("constant", name.as_str())),
            K::NegativeLayout { buffer, .. } => Some(("constant", buffer.as_str())),
            K::InvalidName { what, name } => Some((if *what == "buffer" { "constant" } else { *what }, name.as_str())),
            _ => None,
        }
    }
}

/// What rule an error breaks, with the names involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValidationErrorKind {
    /// A limit of [`crate::Limits`] was exceeded.
    #[error("{0}")]
    Limit(crate::LimitExceeded),
    /// More errors than [`crate::Limits::max_diagnostics`]: the rest are counted here.
    #[error("{more} more errors not shown (max_diagnostics = {limit}; raise it with --max-diagnostics)")]
    TooManyErrors {
        /// Errors not shown.
        more: usize,
        /// The limit.
        limit: usize,
    },
    /// A name is not an identifier.
    #[error("{what} name `{name}` is not an identifier")]
    InvalidName {
        /// `buffer`, `symbol`, `kernel` or `graph`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A subgraph uses the reserved name of the main graph.
    #[error("a subgraph may not be called `{MAIN_GRAPH}`")]
    ReservedGraphName,
    /// One name plays two roles.
    #[error("{name} is both a {first} and a {second}")]
    NameClash {
        /// The name.
        name: String,
        /// Its first role.
        first: NameRole,
        /// Its second role.
        second: NameRole,
    },
    /// A kernel table key differs from the definition's own name.
    #[error("kernel table entry {key} holds a definition named {name}")]
    KernelNameMismatch {
        /// The table key.
        key: KernelName,
        /// `KernelDef::name`.
        name: KernelName,
    },
    /// A value range holds no value.
    #[error("symbol {symbol} has an empty value range {range}")]
    EmptyValueRange {
        /// The symbol.
        symbol: Symbol,
        /// Its range.
        range: ValueRange,
    },
    /// A hint outside the symbol's range.
    #[error("symbol {symbol} has hint {hint} outside its value range {range}")]
    HintOutsideRange {
        /// The symbol.
        symbol: Symbol,
        /// The hint.
        hint: i64,
        /// The range.
        range: ValueRange,
    },
    /// A backed symbol that no main-graph input binds.
    #[error("symbol {symbol} is never bound (no symbol input and no input size, stride or offset of graph main mentions it)")]
    BackedSymbolNeverBound {
        /// The symbol.
        symbol: Symbol,
    },
    /// A symbol that is not in the symbol table.
    #[error("symbol {symbol} is not declared")]
    UndeclaredSymbol {
        /// The symbol.
        symbol: Symbol,
    },
    /// A name in a line's expression that is neither a declared symbol nor
    /// a buffer of the graph (the text form reads a name missing from the
    /// buffer table as a symbol, so an undeclared buffer arrives here).
    #[error("`{name}` is neither a declared symbol (no `symbol {name}: ...`) nor a buffer of this graph (no `buffer {name}: ...`)")]
    UnknownName {
        /// The name.
        name: Symbol,
    },
    /// A symbol used where it is not bound.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    SymbolNotBound {
        /// The symbol.
        symbol: Symbol,
        /// The later line of the same graph that binds it, if any.
        bound_at: Option<usize>,
    },
    /// A buffer whose layout mentions a symbol that is not bound yet.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    LayoutSymbolNotBound {
        /// The buffer.
        buffer: BufName,
        /// The symbol.
        symbol: Symbol,
        /// The later line of the same graph that binds it, if any.
        bound_at: Option<usize>,
    },
    /// A symbol bound a second time.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    SymbolBoundTwice {
        /// The symbol.
        symbol: Symbol,
        /// The first binding.
        first: SymbolBinding,
    },
    /// A symbol bound by a line (or input) that does not bind symbols of its kind.
    #[error("symbol {symbol} is declared {} but bound by {binder}", kind.name())]
    WrongSymbolKind {
        /// The symbol.
        symbol: Symbol,
        /// Its declared kind.
        kind: SymbolKind,
        /// What binds it (`a symbol input`, `an item line`, ...).
        binder: &'static str,
    },
    /// A runtime assert or predicate that is not boolean.
    #[error("condition {expr} is not a boolean expression")]
    NotBoolean {
        /// The expression, printed.
        expr: String,
    },
    /// A main-graph input dimension that is not affine in the one symbol it
    /// leaves unbound (upstream's FX backend's message).
    #[error("Cannot solve input expression {expr} for {symbol}")]
    UnsolvableInput {
        /// The dimension's expression, printed.
        expr: String,
        /// The symbol nothing else binds.
        symbol: Symbol,
    },
    /// A main-graph input dimension that leaves several symbols unbound
    /// (upstream's FX backend's message).
    #[error("Compound input {expr} leaves these symbols undefined: [{}]", symbols.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))]
    UnderdeterminedInput {
        /// The dimension's expression, printed.
        expr: String,
        /// The symbols nothing else binds.
        symbols: Vec<Symbol>,
    },
    /// An allocation size smaller than the elements its own view reaches.
    #[error("buffer {buffer} allocates {alloc} elements but its view reaches {needed}")]
    AllocationTooSmall {
        /// The buffer.
        buffer: BufName,
        /// Its `alloc` size.
        alloc: i64,
        /// The elements its sizes, strides and offset reach.
        needed: i64,
    },
    /// An expression that divides by a constant zero.
    #[error("{expr} divides by zero")]
    DivisionByZero {
        /// The expression, printed.
        expr: String,
    },
    /// A divisor that is a boolean expression, not an integer.
    #[error("divisor {expr} is a boolean expression, not an integer")]
    NotInteger {
        /// The expression, printed.
        expr: String,
    },
    /// A malformed key path.
    #[error("key path `{path}` of symbol {symbol} is malformed: {reason}")]
    BadKeyPath {
        /// The bound symbol.
        symbol: Symbol,
        /// The path, printed.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A name missing from the graph's buffer table.
    #[error("buffer {buffer} is not declared in the buffer table of this graph")]
    UndeclaredBuffer {
        /// The buffer.
        buffer: BufName,
    },
    /// A subgraph naming its caller's buffer.
    #[error("buffer {buffer} belongs to graph {owner}; a subgraph sees only its own inputs and buffers")]
    ForeignBuffer {
        /// The buffer.
        buffer: BufName,
        /// The graph that declares it.
        owner: GraphName,
    },
    /// A multi-output value where a tensor is needed.
    #[error("buffer {buffer} is a multi-output value where a tensor is needed")]
    NotATensor {
        /// The buffer.
        buffer: BufName,
    },
    /// A tensor where a multi-output value is needed.
    #[error("buffer {buffer} is a tensor where a multi-output value is needed")]
    NotMulti {
        /// The buffer.
        buffer: BufName,
    },
    /// A buffer used before its definition.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    UsedBeforeDefinition {
        /// The buffer.
        buffer: BufName,
        /// The later defining line, if any.
        defined_at: Option<usize>,
    },
    /// A buffer used after it ended.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    UseAfterEnd {
        /// The buffer.
        buffer: BufName,
        /// The line that ended it.
        ended_at: usize,
        /// How it ended.
        how: Ending,
    },
    /// A buffer freed twice.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    DoubleFree {
        /// The buffer.
        buffer: BufName,
        /// The first free.
        first_freed_at: usize,
    },
    /// A buffer defined twice.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    DefinedTwice {
        /// The buffer.
        buffer: BufName,
        /// The first definition.
        first: Site,
    },
    /// A constant freed or reused.
    #[error("constant {buffer} cannot be freed or reused")]
    ConstantEnded {
        /// The constant.
        buffer: BufName,
    },
    /// A view used after its storage was freed.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    ViewOutlivesStorage {
        /// The view.
        buffer: BufName,
        /// The storage owner that was freed.
        owner: BufName,
        /// The free.
        freed_at: usize,
    },
    /// `Reuse` of a buffer that neither dies at the reuse nor was released before.
    #[error("buffer {new} reuses the storage of {old}, but {old} stays live (the reuse keeps it and no `free_if_not_reused {old} reused` precedes it)")]
    ReuseOfLiveBuffer {
        /// The old buffer.
        old: BufName,
        /// The new buffer.
        new: BufName,
    },
    /// Reuse of (or release for reuse of) a view.
    #[error("buffer {buffer} is a view of {owner}'s storage and has no storage of its own to hand on")]
    ReuseOfView {
        /// The view.
        buffer: BufName,
        /// The storage owner.
        owner: BufName,
    },
    /// `Reuse` across dtypes.
    #[error("buffer {new} ({new_dtype}) cannot reuse the storage of {old} ({old_dtype}): dtypes differ")]
    ReuseDtypeMismatch {
        /// The old buffer.
        old: BufName,
        /// The new buffer.
        new: BufName,
        /// The old dtype.
        old_dtype: DType,
        /// The new dtype.
        new_dtype: DType,
    },
    /// `Reuse` or `Reinterpret` across devices.
    #[error("buffer {new} (on {new_device}) cannot use the storage of {old} (on {old_device}): devices differ")]
    DeviceMismatch {
        /// The buffer whose storage is used.
        old: BufName,
        /// The buffer that uses it.
        new: BufName,
        /// The old device.
        old_device: Device,
        /// The new device.
        new_device: Device,
    },
    /// `Reuse` into too small a storage.
    #[error("buffer {new} needs storage for {new_numel} elements but {old} holds {old_numel}")]
    ReuseTooSmall {
        /// The old buffer.
        old: BufName,
        /// The new buffer.
        new: BufName,
        /// Elements the old layout covers.
        old_numel: i64,
        /// Elements the new layout needs.
        new_numel: i64,
    },
    /// A view that reaches past its storage.
    #[error("view {alias} needs {needed} bytes of storage but the storage of {owner} holds {available}")]
    ViewOutOfBounds {
        /// The view.
        alias: BufName,
        /// The storage owner.
        owner: BufName,
        /// Bytes the view reaches (offset + extent).
        needed: i64,
        /// Bytes the storage holds.
        available: i64,
    },
    /// A layout whose size and stride lists differ in length.
    #[error("buffer {buffer} has {sizes} sizes but {strides} strides")]
    LayoutRankMismatch {
        /// The buffer.
        buffer: BufName,
        /// Number of sizes.
        sizes: usize,
        /// Number of strides.
        strides: usize,
    },
    /// A graph output that is not live at the end.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    OutputNotLive {
        /// The buffer.
        buffer: BufName,
        /// The line that ended it, if it was defined.
        ended_at: Option<usize>,
    },
    /// A kernel image path that leaves the program's bundle.
    #[error("kernel {kernel}: image path `{path}` leaves the bundle (a plain relative path is needed)")]
    KernelImagePath {
        /// The kernel.
        kernel: KernelName,
        /// Its image path.
        path: String,
    },
    /// A kernel name missing from the kernel table.
    #[error("kernel {kernel} is not in the kernel table")]
    UnknownKernel {
        /// The kernel.
        kernel: KernelName,
    },
    /// A kernel called before its definition line.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    KernelNotDefined {
        /// The kernel.
        kernel: KernelName,
        /// The later definition line of the same graph, if any.
        defined_at: Option<usize>,
    },
    /// A kernel defined twice.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    KernelDefinedTwice {
        /// The kernel.
        kernel: KernelName,
        /// The graph of the first definition.
        graph: GraphName,
        /// Its line.
        first: usize,
    },
    /// A wrong number of kernel arguments.
    #[error("kernel {kernel} takes {expected} arguments ({params}) but the call passes {found}")]
    ArityMismatch {
        /// The kernel.
        kernel: KernelName,
        /// Expected count.
        expected: usize,
        /// The parameters, comma-separated.
        params: String,
        /// Passed count.
        found: usize,
    },
    /// A named argument that names no parameter.
    #[error("kernel {kernel} has no parameter {param}")]
    UnknownParameter {
        /// The kernel.
        kernel: KernelName,
        /// The name.
        param: String,
    },
    /// A parameter bound twice.
    #[error("parameter {param} of kernel {kernel} is bound twice")]
    ParameterBoundTwice {
        /// The kernel.
        kernel: KernelName,
        /// The parameter.
        param: String,
    },
    /// A named argument of a kernel called by position (C++, CUDA C, host).
    #[error("kernel {kernel} is a {backend} kernel, called with positional arguments only, but gets `{param}=`")]
    NamedArgument {
        /// The kernel.
        kernel: KernelName,
        /// Its backend.
        backend: &'static str,
        /// The name given.
        param: String,
    },
    /// A tensor argument of a C++ kernel (it runs on the host) on another device.
    #[error("kernel {kernel} is a C++ kernel, which runs on the host, but its argument {buffer} is on {device}")]
    HostKernelDevice {
        /// The kernel.
        kernel: KernelName,
        /// The argument.
        buffer: BufName,
        /// Its device.
        device: Device,
    },
    /// A positional argument after a named one.
    #[error("a positional argument of kernel {kernel} follows a named one")]
    PositionalAfterNamed {
        /// The kernel.
        kernel: KernelName,
    },
    /// A call parameter no argument binds.
    #[error("parameter {param} of kernel {kernel} is not passed")]
    MissingArgument {
        /// The kernel.
        kernel: KernelName,
        /// The parameter.
        param: String,
    },
    /// A pointer parameter given something other than a buffer.
    #[error("parameter {param} of kernel {kernel} has pointer type {expected} but is passed {found}")]
    PointerArgNotBuffer {
        /// The kernel.
        kernel: KernelName,
        /// The parameter.
        param: String,
        /// The parameter type, printed.
        expected: String,
        /// What was passed, described.
        found: String,
    },
    /// A buffer passed to a scalar parameter.
    #[error("parameter {param} of kernel {kernel} has scalar type {expected} but is passed buffer {buffer}")]
    BufferArgNotPointer {
        /// The kernel.
        kernel: KernelName,
        /// The parameter.
        param: String,
        /// The parameter type, printed.
        expected: String,
        /// The buffer.
        buffer: BufName,
    },
    /// A buffer of the wrong dtype for a pointer parameter.
    #[error("parameter {param} of kernel {kernel} has type {expected} but buffer {buffer} is {found}")]
    PointerDtypeMismatch {
        /// The kernel.
        kernel: KernelName,
        /// The parameter.
        param: String,
        /// The signature type.
        expected: SigType,
        /// The buffer.
        buffer: BufName,
        /// The buffer's dtype.
        found: DType,
    },
    /// An exit without an enter.
    #[error("device guard exit without a matching enter")]
    UnmatchedDeviceExit,
    /// An enter without an exit.
    #[error("device guard entered here is never exited")]
    UnclosedDeviceGuard,
    /// A float symbol (`zuf0`) inside an integer expression or a layout.
    #[error("float symbol {symbol} is used in {place}; a float read from a tensor is only passed whole to kernels and extern ops, or returned")]
    FloatSymbolMisused {
        /// The symbol.
        symbol: Symbol,
        /// Where (`the expression ...`, `the layout of buffer ...`).
        place: String,
    },
    /// A scope opened here is not closed where it must be: before the end
    /// of its graph, or before the device guard around it.
    #[error("{scope} scope entered here is never exited (it must close before the end of its graph and before the device guard around it)")]
    UnclosedScope {
        /// The scope's kind.
        scope: ScopeKind,
    },
    /// A scope exit that does not close the innermost open block.
    #[error("{scope} scope exit does not close the innermost open device guard or scope")]
    UnmatchedScopeExit {
        /// The kind the exit closes.
        scope: ScopeKind,
    },
    /// A stream scope inside another (Inductor refuses them: "Nested stream
    /// context switching").
    #[error("stream {stream} is entered inside another stream scope")]
    NestedStream {
        /// The inner scope's stream.
        stream: u32,
    },
    /// A stream scope whose stream the enclosing device guard does not name.
    #[error("stream {stream} is not one of the {side_streams} side streams of the enclosing device guard")]
    UnknownStream {
        /// The scope's stream.
        stream: u32,
        /// Side streams of the innermost enclosing device guard (0 without one).
        side_streams: usize,
    },
    /// A subgraph name that is not in the subgraph table.
    #[error("subgraph {graph} does not exist")]
    UnknownSubgraph {
        /// The name.
        graph: GraphName,
    },
    /// Operand count differs from the subgraph's input count.
    #[error("subgraph {graph} takes {expected} inputs but is passed {found}")]
    OperandCountMismatch {
        /// The subgraph.
        graph: GraphName,
        /// Its input count.
        expected: usize,
        /// Operands passed.
        found: usize,
    },
    /// An operand passed to a symbol input that is not a symbol.
    #[error("operand {operand} is passed to symbol input {index} of subgraph {graph} but is not a declared symbol")]
    OperandNotSymbol {
        /// The subgraph.
        graph: GraphName,
        /// The input index.
        index: usize,
        /// The operand.
        operand: BufName,
    },
    /// Cond branches returning different numbers of values.
    #[error("branches return different numbers of values: {true_graph} returns {true_outputs}, {false_graph} returns {false_outputs}")]
    BranchOutputMismatch {
        /// The true branch.
        true_graph: GraphName,
        /// Its output count.
        true_outputs: usize,
        /// The false branch.
        false_graph: GraphName,
        /// Its output count.
        false_outputs: usize,
    },
    /// A switch without branches, or a cond switch without exactly two.
    #[error("{} has {found} branches{}", if *cond { "a cond switch" } else { "a switch" }, if *cond { "; a cond has two (false, true)" } else { "; a switch needs at least one" })]
    SwitchBranchCount {
        /// Whether the switch is a `torch.cond`.
        cond: bool,
        /// The branches given.
        found: usize,
    },
    /// Switch branches returning different numbers of values.
    #[error("switch branches return different numbers of values: {first} returns {first_outputs}, {graph} returns {outputs}")]
    SwitchOutputMismatch {
        /// The first branch.
        first: GraphName,
        /// Its output count.
        first_outputs: usize,
        /// A branch that disagrees.
        graph: GraphName,
        /// Its output count.
        outputs: usize,
    },
    /// A loop subgraph returning the wrong number of values.
    #[error("{role} graph {graph} returns {found} values but the loop needs {expected}")]
    LoopOutputMismatch {
        /// `cond` or `body`.
        role: &'static str,
        /// The subgraph.
        graph: GraphName,
        /// Needed count.
        expected: usize,
        /// Returned count.
        found: usize,
    },
    /// A subgraph that runs itself.
    #[error("subgraph {graph} runs itself (through {})", cycle.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(" -> "))]
    Recursion {
        /// The subgraph.
        graph: GraphName,
        /// The call chain back to it.
        cycle: Vec<GraphName>,
    },
    /// A subgraph needing a symbol that is not bound at its call.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    SubgraphSymbolNotBound {
        /// The subgraph.
        graph: GraphName,
        /// The symbol.
        symbol: Symbol,
        /// The subgraph line that uses it; `None` for its input layouts.
        used_at: Option<usize>,
    },
    /// A subgraph calling a kernel not defined before it runs.
    #[error("{}", self.naming_lines(None, &|_, _| None))]
    SubgraphKernelNotDefined {
        /// The subgraph.
        graph: GraphName,
        /// The kernel.
        kernel: KernelName,
        /// The subgraph line that calls it.
        called_at: usize,
    },
    /// An `AssertSizeStride` whose lists do not match the buffer's rank.
    #[error("assert_size_stride on {buffer} gives {sizes} sizes and {strides} strides but the buffer has rank {rank}")]
    AssertRankMismatch {
        /// The buffer.
        buffer: BufName,
        /// The buffer's rank.
        rank: usize,
        /// Sizes given.
        sizes: usize,
        /// Strides given.
        strides: usize,
    },
    /// A dtype check (`assert_tensor_metadata`) that the buffer's declared
    /// dtype can never pass.
    #[error("assert_size_stride on {buffer} expects dtype {expected} but the buffer is declared {declared}")]
    AssertDtypeMismatch {
        /// The buffer.
        buffer: BufName,
        /// The dtype the check expects.
        expected: DType,
        /// The buffer's declared dtype.
        declared: DType,
    },
    /// A size/stride check listed twice in one grouped assert.
    #[error("grouped assert_size_stride checks {buffer} twice")]
    GroupedAssertRepeats {
        /// The buffer.
        buffer: BufName,
    },
    /// A multi-output `.out` call passing an output under a keyword its
    /// other keyword arguments already use.
    #[error("`{op}` passes keyword `{keyword}` both as an argument and as an output")]
    OutKeywordTwice {
        /// The op.
        op: String,
        /// The keyword.
        keyword: String,
    },
    /// An alignment that is not a power of two.
    #[error("alignment {alignment} is not a power of two")]
    BadAlignment {
        /// The alignment.
        alignment: u32,
    },
    /// A layout with a negative size, stride, storage offset or allocation
    /// size (a constant): PyTorch has none, and storage extents assume none.
    #[error("buffer {buffer}: {part} is {value}; sizes, strides and storage offsets must be non-negative (PyTorch tensors have no negative strides)")]
    NegativeLayout {
        /// The buffer (or constant).
        buffer: BufName,
        /// Which part: `the stride of dimension 0`, `the storage offset`.
        part: String,
        /// Its value.
        value: i64,
    },
    /// A negative multi-output index.
    #[error("index {index} into {value} is negative")]
    NegativeIndex {
        /// The multi-output value.
        value: BufName,
        /// The index.
        index: i64,
    },
    /// A line whose result is a program constant's name.
    #[error("{buffer} is a program constant: no line may define it (a line's result needs a buffer of its graph)")]
    DefinesConstant {
        /// The constant.
        buffer: BufName,
    },
    /// An index past the values a `cond`, `switch` or `while_loop` result
    /// holds (its subgraphs' outputs).
    #[error("index {index} into {value} is past its {outputs} value(s) (the outputs of the subgraphs that made it)")]
    IndexPastOutputs {
        /// The control-flow result.
        value: BufName,
        /// The index.
        index: i64,
        /// How many values it holds.
        outputs: usize,
    },
}

/// One broken rule, with where it is broken.
///
/// Its `Display` is one line:
/// ``error in graph main, line 7 `free buf0`: buffer buf0 is freed twice (first freed at line 5)``.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("error in {location}: {kind}")]
pub struct ValidationError {
    /// Where.
    pub location: Location,
    /// What.
    pub kind: ValidationErrorKind,
}

impl ValidationError {
    /// The graph the error is in (`None` for program-wide tables).
    pub fn graph(&self) -> Option<&GraphName> {
        match &self.location {
            Location::Program => None,
            Location::Graph { graph } | Location::Line { graph, .. } => Some(graph),
        }
    }

    /// The index of the offending line, when a line is at fault.
    pub fn line(&self) -> Option<usize> {
        match &self.location {
            Location::Line { index, .. } => Some(*index),
            _ => None,
        }
    }
}

/// Every error of an invalid program, in discovery order (program tables, then
/// graphs in the order the validator walks them, lines in order).
///
/// Its `Display` writes one error per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationErrors {
    /// The errors; never empty when returned by [`validate`].
    pub errors: Vec<ValidationError>,
}

impl ValidationErrors {
    /// The errors.
    pub fn iter(&self) -> std::slice::Iter<'_, ValidationError> {
        self.errors.iter()
    }

    /// Number of errors.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// `true` when there are none.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

impl<'e> IntoIterator for &'e ValidationErrors {
    type Item = &'e ValidationError;
    type IntoIter = std::slice::Iter<'e, ValidationError>;
    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}

impl IntoIterator for ValidationErrors {
    type Item = ValidationError;
    type IntoIter = std::vec::IntoIter<ValidationError>;
    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}
