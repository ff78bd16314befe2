//! The validator: checks a [`Program`] and returns [`ProgramInfo`], the only
//! input the lowerings accept.
//!
//! [`validate`] walks every graph once, in program order (the main graph first;
//! a subgraph when the first `Conditional`/`WhileLoop` that runs it is reached;
//! subgraphs nothing runs afterwards), and checks the rules of the module
//! documentation of [`crate::ir`]:
//!
//! * **Buffers.** Every buffer a line names is declared in its graph's buffer
//!   table (or is a program constant), is defined before it is used, is not used
//!   after it ends, is defined at most once and ended at most once. Tensor
//!   inputs are defined at entry; `Allocate`, `Reinterpret`, `Reuse` (`new`),
//!   `ExternKernelAlloc`, `MultiOutput`, `Conditional`, `WhileLoop` and
//!   `CommBufferAllocate` define; `Free`, `FreeIfNotReused` (unless
//!   `is_reused`), `Reuse` with `delete_old` and `CommBufferFree` end.
//!   `FreeIfNotReused` with `is_reused` hands the storage to a later `Reuse`:
//!   the name may not be used afterwards except as that `Reuse`'s `old`.
//!   Constants can be read and written but never freed or reused.
//! * **Storage.** Each allocation (and each tensor input, extern result, and
//!   multi-output element) owns a storage. `Reuse` moves the storage to the new
//!   name; a view (`Reinterpret`) shares its base's storage and may not be used
//!   once that storage is freed. `Reuse` needs the same dtype and device and
//!   `storage(new) <= storage(old)`; `Reinterpret` needs the same device and
//!   `offset + extent` within the storage's allocation (in bytes).
//!   **Size proofs are partial:** a size comparison is decided only when both
//!   sides evaluate to integers without symbols, or when the two storage
//!   expressions are syntactically equal; any other symbolic comparison is
//!   *accepted* (a later prover pass will tighten this).
//! * **Symbols.** Every symbol an expression or layout mentions is declared.
//!   Backed symbols are bound at the main graph's entry by a symbol input or by
//!   the size, stride or offset of a tensor input that mentions them; a backed
//!   symbol nothing binds is an error. Unbacked symbols are bound by
//!   `UnbackedSymbolDefs`/`DynamicScalar`, precomputed ones by
//!   `SymbolicCallArg`, and may be used only afterwards, including in the layout
//!   of a buffer that is allocated, viewed or passed to a call. A symbol is bound
//!   at most once (re-binding a precomputed symbol to the syntactically same
//!   expression is accepted, because Inductor re-emits `xnumel` assignments).
//!   Value ranges must not be empty and hints must lie inside them.
//! * **Key paths.** `.size()`/`.stride()` are followed by an index, indexes are
//!   non-negative and within the rank when the source is a tensor, `DivideBy`
//!   divides by a positive number, and `DynamicScalar` paths are empty,
//!   `.to_int()` or `//d`.
//! * **Kernels.** A called kernel is in the kernel table and has been defined by
//!   a `KernelDefinition` line earlier in program order (a subgraph sees the
//!   kernels its caller defined before running it). Triton calls bind
//!   [`crate::ir::TritonMeta::call_params`]: without named arguments the
//!   positional count must equal it; named arguments must name signature
//!   parameters or extra launcher args, each parameter is bound once, and every
//!   non-constant call parameter is bound. Pointer parameters get buffers of the
//!   signature's dtype (`*fp32` wants an `f32` buffer); scalar parameters get no
//!   buffer (except a 0-d tensor, passed as its value). Halide calls pass one
//!   argument per `argtypes` entry, C++ calls one per `arg_types` entry when
//!   those are known; C pointer types (`float*`) get buffers.
//! * **Structure.** Device guards are balanced per graph. `Conditional` and
//!   `WhileLoop` name existing subgraphs, pass as many operands as the subgraphs
//!   take, both branches of a cond return the same number of values, a loop's
//!   cond graph returns one value and its body one value per carried input.
//!   Subgraphs cannot name their caller's buffers and cannot (directly or
//!   indirectly) run themselves. No subgraph may be called `main`.
//! * **Asserts and outputs.** Graph outputs are live at the end of the graph;
//!   `RuntimeAssert` conditions are boolean expressions; `AssertSizeStride`
//!   gives one size and one stride per dimension of its buffer; alignments are
//!   powers of two.
//! * **Names.** Buffer, symbol, kernel and graph names are identifiers, a name
//!   is not both a buffer and a symbol, and a constant is not redeclared as a
//!   graph buffer.
//!
//! All errors are collected ([`ValidationErrors`]); each one names the graph, the
//! line (its index in [`crate::ir::Graph::lines`], counted from 0, and its text
//! form) and the buffer, symbol or kernel involved.

use super::kernel::{KernelBackend, KernelDef, SigType};
use super::line::{ArgValue, KernelCall, KeyEntry, KeyPathText, Line, MultiIndex, Predicate, TensorMethod};
use super::program::{BufferKind, Graph, GraphInput, GraphOutput, Program, SymbolKind, ValueRange};
use super::types::{BufName, DType, Device, GraphName, KernelName, Layout};
use crate::sym::{Bindings, SymExpr, Symbol};
use indexmap::{IndexMap, IndexSet};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::fmt;
use std::rc::Rc;

/// The name diagnostics and [`ProgramInfo`] use for the main graph. No subgraph
/// may have this name.
pub const MAIN_GRAPH: &str = "main";

/// The text form of a line, as diagnostics quote it.
/// Longer lines are cut (with `…`) so that diagnostics stay bounded.
fn line_text(line: &Line) -> String {
    const MAX: usize = 240;
    let mut text = crate::text::print_line(line);
    if text.len() > MAX {
        let mut cut = MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

// ---------------------------------------------------------------------------
// Public results
// ---------------------------------------------------------------------------

/// Where a buffer is defined or a symbol is bound, inside one graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// The graph input at this index (in [`crate::ir::Graph::inputs`]).
    Input(usize),
    /// The line at this index (in [`crate::ir::Graph::lines`]).
    Line(usize),
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Site::Input(i) => write!(f, "input {i}"),
            Site::Line(i) => write!(f, "line {i}"),
        }
    }
}

/// A place in the program where a symbol is bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolBinding {
    /// The graph ([`MAIN_GRAPH`] for the main graph).
    pub graph: GraphName,
    /// The input or line that binds it.
    pub site: Site,
}

impl fmt::Display for SymbolBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of graph {}", self.site, self.graph)
    }
}

/// What the validator learned about one buffer of a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferInfo {
    /// Where the name is defined.
    pub defined: Site,
    /// The last line that reads or writes the buffer, not counting its
    /// definition and the line that ends it; `None` when nothing uses it.
    pub last_use: Option<usize>,
    /// The line that ends the name (`Free`, `FreeIfNotReused`, a deleting
    /// `Reuse`, `CommBufferFree`), or the `FreeIfNotReused ... reused` line that
    /// hands its storage on; `None` when it lives to the end of the graph.
    pub ended: Option<usize>,
    /// `true` when the graph returns it.
    pub is_output: bool,
    /// The buffer whose definition created the storage this buffer uses (itself
    /// for allocations, the base's storage owner for views, the original owner
    /// through reuse chains); `None` for multi-output values.
    pub storage_root: Option<BufName>,
}

/// What the validator learned about one graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphInfo {
    name: GraphName,
    buffers: IndexMap<BufName, BufferInfo>,
    line_binds: Vec<Vec<Symbol>>,
    outputs: IndexSet<BufName>,
    callers: Vec<(GraphName, usize)>,
}

impl GraphInfo {
    /// The graph's name ([`MAIN_GRAPH`] for the main graph).
    pub fn name(&self) -> &GraphName {
        &self.name
    }

    /// Every buffer defined in the graph (inputs first, then in definition
    /// order), with what is known about it.
    pub fn buffers(&self) -> &IndexMap<BufName, BufferInfo> {
        &self.buffers
    }

    /// What is known about one buffer; `None` when the graph never defines it.
    pub fn buffer(&self, name: &BufName) -> Option<&BufferInfo> {
        self.buffers.get(name)
    }

    /// `true` when the graph returns `name`.
    pub fn is_output(&self, name: &BufName) -> bool {
        self.outputs.contains(name)
    }

    /// The buffers the graph returns, in output order, without repeats.
    pub fn output_buffers(&self) -> impl Iterator<Item = &BufName> {
        self.outputs.iter()
    }

    /// The symbols line `index` binds (for a `Conditional`/`WhileLoop`, the
    /// symbols its subgraphs bind that stay visible after it). Empty for lines
    /// that bind nothing or indexes past the end.
    pub fn binds(&self, index: usize) -> &[Symbol] {
        self.line_binds.get(index).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The `Conditional`/`WhileLoop` lines (graph, line index) that run this
    /// graph; empty for the main graph and for subgraphs nothing runs.
    pub fn callers(&self) -> &[(GraphName, usize)] {
        &self.callers
    }
}

/// A validated program plus what the lowerings need to know about it.
///
/// Obtained only from [`validate`]; holding one means every rule of the
/// validator held for [`ProgramInfo::program`].
#[derive(Debug)]
pub struct ProgramInfo<'a> {
    limits: crate::Limits,
    program: &'a Program,
    main: GraphInfo,
    subgraphs: IndexMap<GraphName, GraphInfo>,
    symbol_bindings: IndexMap<Symbol, Vec<SymbolBinding>>,
    kernel_definitions: IndexMap<KernelName, (GraphName, usize)>,
}

impl<'a> ProgramInfo<'a> {
    /// The limits the program was validated within (and the lowerings keep).
    pub fn limits(&self) -> &crate::Limits {
        &self.limits
    }

    /// The validated program.
    pub fn program(&self) -> &'a Program {
        self.program
    }

    /// The main graph's information.
    pub fn main(&self) -> &GraphInfo {
        &self.main
    }

    /// A graph's information by name; `None` names the main graph (as in
    /// [`Program::graph`]).
    pub fn graph(&self, name: Option<&GraphName>) -> Option<&GraphInfo> {
        match name {
            None => Some(&self.main),
            Some(n) => self.subgraphs.get(n),
        }
    }

    /// Every graph's information: main first, then subgraphs in table order.
    pub fn graphs(&self) -> impl Iterator<Item = &GraphInfo> {
        std::iter::once(&self.main).chain(self.subgraphs.values())
    }

    /// Where `symbol` is first bound in program order (for backed symbols: the
    /// main graph input that binds it). `None` for symbols nothing binds
    /// (declared but unused ones).
    pub fn symbol_binding(&self, symbol: &Symbol) -> Option<&SymbolBinding> {
        self.symbol_bindings.get(symbol).and_then(|v| v.first())
    }

    /// Every place `symbol` is bound: one for most symbols; one per branch for
    /// symbols that both branches of a cond bind; subgraph symbol inputs count
    /// as bindings too.
    pub fn symbol_bindings(&self, symbol: &Symbol) -> &[SymbolBinding] {
        self.symbol_bindings.get(symbol).map(Vec::as_slice).unwrap_or(&[])
    }

    /// A kernel's definition by name.
    pub fn kernel(&self, name: &KernelName) -> Option<&'a KernelDef> {
        self.program.kernels.get(name)
    }

    /// The `KernelDefinition` line of a kernel: (graph, line index). `None` for
    /// kernels in the table that no line defines (they are never called).
    pub fn kernel_definition_site(&self, name: &KernelName) -> Option<(&GraphName, usize)> {
        self.kernel_definitions.get(name).map(|(g, i)| (g, *i))
    }

    /// The kernels some line defines, in program order.
    pub fn defined_kernels(&self) -> impl Iterator<Item = &'a KernelDef> + '_ {
        let program = self.program;
        self.kernel_definitions
            .keys()
            .filter_map(move |k| program.kernels.get(k))
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Where an error is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// The program-wide tables (symbols, kernels, constants, graph names).
    Program,
    /// A graph's header: inputs, buffer table, outputs, or the graph as a whole.
    Graph {
        /// The graph ([`MAIN_GRAPH`] for the main graph).
        graph: GraphName,
    },
    /// One line.
    Line {
        /// The graph ([`MAIN_GRAPH`] for the main graph).
        graph: GraphName,
        /// The line's index in [`crate::ir::Graph::lines`], from 0.
        index: usize,
        /// The line's text form.
        text: String,
    },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Program => f.write_str("program"),
            Location::Graph { graph } => write!(f, "graph {graph}"),
            Location::Line { graph, index, text } => write!(f, "graph {graph}, line {index} `{text}`"),
        }
    }
}

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

fn kind_name(kind: &SymbolKind) -> &'static str {
    match kind {
        SymbolKind::Backed => "backed",
        SymbolKind::Unbacked => "unbacked",
        SymbolKind::Precomputed => "precomputed",
    }
}

fn ending_text(buffer: &BufName, at: usize, how: &Ending) -> String {
    match how {
        Ending::Freed => format!("buffer {buffer} is used after it was freed at line {at}"),
        Ending::MarkedReused => {
            format!("buffer {buffer} is used after its storage was released for reuse at line {at}")
        }
        Ending::ReusedBy(new) => {
            format!("buffer {buffer} is used after its storage was handed to {new} at line {at}")
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
    /// A symbol used where it is not bound.
    #[error("symbol {symbol} is used before it is bound{}", match bound_at { Some(i) => format!(" (bound at line {i})"), None => " (nothing in this graph binds it)".to_string() })]
    SymbolNotBound {
        /// The symbol.
        symbol: Symbol,
        /// The later line of the same graph that binds it, if any.
        bound_at: Option<usize>,
    },
    /// A buffer whose layout mentions a symbol that is not bound yet.
    #[error("the layout of buffer {buffer} mentions symbol {symbol}, which is not bound here{}", match bound_at { Some(i) => format!(" (bound at line {i})"), None => String::new() })]
    LayoutSymbolNotBound {
        /// The buffer.
        buffer: BufName,
        /// The symbol.
        symbol: Symbol,
        /// The later line of the same graph that binds it, if any.
        bound_at: Option<usize>,
    },
    /// A symbol bound a second time.
    #[error("symbol {symbol} is bound twice (first bound at {first})")]
    SymbolBoundTwice {
        /// The symbol.
        symbol: Symbol,
        /// The first binding.
        first: SymbolBinding,
    },
    /// A symbol bound by a line (or input) that does not bind symbols of its kind.
    #[error("symbol {symbol} is declared {} but bound by {binder}", kind_name(kind))]
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
    #[error("buffer {buffer} is used before it is defined{}", match defined_at { Some(i) => format!(" (defined at line {i})"), None => " (no line defines it)".to_string() })]
    UsedBeforeDefinition {
        /// The buffer.
        buffer: BufName,
        /// The later defining line, if any.
        defined_at: Option<usize>,
    },
    /// A buffer used after it ended.
    #[error("{}", ending_text(buffer, *ended_at, how))]
    UseAfterEnd {
        /// The buffer.
        buffer: BufName,
        /// The line that ended it.
        ended_at: usize,
        /// How it ended.
        how: Ending,
    },
    /// A buffer freed twice.
    #[error("buffer {buffer} is freed twice (first freed at line {first_freed_at})")]
    DoubleFree {
        /// The buffer.
        buffer: BufName,
        /// The first free.
        first_freed_at: usize,
    },
    /// A buffer defined twice.
    #[error("buffer {buffer} is defined twice (first defined at {first})")]
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
    #[error("view {buffer} is used after the storage it views (owned by {owner}) was freed at line {freed_at}")]
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
    #[error("output {buffer} is not live at the end of the graph{}", match ended_at { Some(i) => format!(" (it ends at line {i})"), None => " (it is never defined)".to_string() })]
    OutputNotLive {
        /// The buffer.
        buffer: BufName,
        /// The line that ended it, if it was defined.
        ended_at: Option<usize>,
    },
    /// A kernel name missing from the kernel table.
    #[error("kernel {kernel} is not in the kernel table")]
    UnknownKernel {
        /// The kernel.
        kernel: KernelName,
    },
    /// A kernel called before its definition line.
    #[error("kernel {kernel} is called before it is defined{}", match defined_at { Some(i) => format!(" (defined at line {i})"), None => " (no line defines it)".to_string() })]
    KernelNotDefined {
        /// The kernel.
        kernel: KernelName,
        /// The later definition line of the same graph, if any.
        defined_at: Option<usize>,
    },
    /// A kernel defined twice.
    #[error("kernel {kernel} is defined twice (first defined at line {first} of graph {graph})")]
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
    #[error("subgraph {graph} uses symbol {symbol} ({}), which is not bound here", match used_at { Some(i) => format!("at its line {i}"), None => "in its inputs".to_string() })]
    SubgraphSymbolNotBound {
        /// The subgraph.
        graph: GraphName,
        /// The symbol.
        symbol: Symbol,
        /// The subgraph line that uses it; `None` for its input layouts.
        used_at: Option<usize>,
    },
    /// A subgraph calling a kernel not defined before it runs.
    #[error("subgraph {graph} calls kernel {kernel} (at its line {called_at}), which is not defined before this line")]
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

// ---------------------------------------------------------------------------
// The walk
// ---------------------------------------------------------------------------

/// Checks `program` and returns what the lowerings need, or every broken rule
/// (within [`crate::Limits::default`]).
pub fn validate(program: &Program) -> Result<ProgramInfo<'_>, ValidationErrors> {
    validate_with_limits(program, &crate::Limits::default())
}

/// [`validate`] within `limits`: list arguments nested deeper than
/// `max_text_depth`, `device` blocks nested deeper than `max_text_depth`,
/// subgraph chains longer than `max_subgraph_depth` and `get` indices at or
/// past `max_outputs` are errors naming the limit; at most `max_diagnostics`
/// errors are reported, then one that counts the rest.
pub fn validate_with_limits<'p>(
    program: &'p Program,
    limits: &crate::Limits,
) -> Result<ProgramInfo<'p>, ValidationErrors> {
    let mut v = Validator::new(program);
    v.limits = *limits;
    v.check_tables();
    let main_name = GraphName::new(MAIN_GRAPH);
    let main = v.check_graph(&main_name, &program.main, true).info;
    for (name, graph) in &program.subgraphs {
        if name.as_str() != MAIN_GRAPH && !v.summaries.contains_key(name) {
            v.stack.push(name.clone());
            v.summaries.insert(name.clone(), SummaryState::InProgress);
            let summary = v.check_graph(name, graph, false);
            v.stack.pop();
            v.infos.insert(name.clone(), summary.info.clone());
            v.summaries.insert(name.clone(), SummaryState::Done(summary));
        }
    }
    if v.suppressed > 0 {
        v.errors.push(ValidationError {
            location: Location::Program,
            kind: ValidationErrorKind::TooManyErrors {
                more: v.suppressed,
                limit: v.limits.max_diagnostics,
            },
        });
    }
    if !v.errors.is_empty() {
        return Err(ValidationErrors { errors: v.errors });
    }
    let mut subgraphs = IndexMap::new();
    for name in program.subgraphs.keys() {
        if let Some(mut info) = v.infos.shift_remove(name) {
            info.callers = v.callers.shift_remove(name).unwrap_or_default();
            subgraphs.insert(name.clone(), info);
        }
    }
    Ok(ProgramInfo {
        program,
        limits: *limits,
        main,
        subgraphs,
        symbol_bindings: v.bindings,
        kernel_definitions: v.kernel_definitions,
    })
}

/// What a caller needs to know about a subgraph it runs.
#[derive(Clone, Debug)]
struct Summary {
    /// Symbols used but not bound inside, with the first using line (`None`:
    /// its input layouts).
    external_symbols: FxIndexMap<Symbol, Option<usize>>,
    /// Kernels called but not defined inside, with the first calling line.
    external_kernels: FxIndexMap<KernelName, usize>,
    /// Symbols its lines bind (visible at its end).
    binds: FxIndexSet<Symbol>,
    /// Kernels its lines define.
    defines: FxIndexSet<KernelName>,
    info: GraphInfo,
}

#[derive(Clone, Debug)]
enum SummaryState {
    InProgress,
    Done(Summary),
}

struct Validator<'a> {
    program: &'a Program,
    errors: Vec<ValidationError>,
    summaries: IndexMap<GraphName, SummaryState>,
    infos: IndexMap<GraphName, GraphInfo>,
    callers: IndexMap<GraphName, Vec<(GraphName, usize)>>,
    stack: Vec<GraphName>,
    bindings: IndexMap<Symbol, Vec<SymbolBinding>>,
    kernel_definitions: IndexMap<KernelName, (GraphName, usize)>,
    /// Backed symbols already reported as never bound (their uses are not reported again).
    unbound_backed: IndexSet<Symbol>,
    /// Symbol name -> its index in the program's symbol table.
    symbol_index: FxHashMap<&'a str, usize>,
    /// Kernel name -> its index in the program's kernel table.
    kernel_index: FxHashMap<&'a str, usize>,
    /// The call parameters of each kernel (by kernel table index), computed
    /// on first call: `Some(None)` when the backend's parameters are unknown.
    call_params: Vec<Option<Option<Rc<[Param<'a>]>>>>,
    limits: crate::Limits,
    /// Errors past `limits.max_diagnostics`, counted but not kept.
    suppressed: usize,
}

/// What a buffer name refers to in a graph.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BufRef {
    /// The graph buffer at this index of the graph's buffer table.
    Graph(usize),
    /// A program constant (not declared by the graph).
    Constant,
    /// Neither.
    Undeclared,
}

#[derive(Clone, Debug)]
enum BufState {
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
struct Storage<'a> {
    /// The name that owns it now.
    owner: BufName,
    /// The buffer whose definition created it.
    root: BufName,
    /// The layout it was created with (its capacity).
    capacity: Option<&'a Layout>,
    freed_at: Option<usize>,
}

/// How a line uses a buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Tensor,
    Multi,
    Any,
}

/// Insertion-ordered maps with a fast hasher, for the checker's per-line
/// lookups (iteration order is insertion order, as with `IndexMap`).
type FxIndexMap<K, V> = IndexMap<K, V, rustc_hash::FxBuildHasher>;
/// The set counterpart of [`FxIndexMap`].
type FxIndexSet<K> = IndexSet<K, rustc_hash::FxBuildHasher>;

struct GraphState<'a> {
    name: GraphName,
    graph: &'a Graph,
    is_main: bool,
    /// Buffer name -> index in the graph's buffer table.
    buffer_index: FxHashMap<&'a str, usize>,
    /// The last name [`GraphState::resolve`] looked up, and the answer.
    last_resolved: std::cell::RefCell<Option<(BufName, BufRef)>>,
    /// The last line [`Validator::at`] quoted, and its text.
    last_text: std::cell::RefCell<Option<(usize, String)>>,
    /// The state of each defined graph buffer (by buffer table index).
    states: Vec<Option<BufState>>,
    /// Each graph buffer's index in `info.buffers` once defined.
    info_index: Vec<Option<usize>>,
    /// Each graph buffer's layout symbols ([`layout_symbols`]).
    layout_syms: Vec<Vec<Symbol>>,
    /// Graph buffers whose layout symbols are all known to be bound (symbols
    /// stay bound, so their layouts need no further checks).
    layout_bound: Vec<bool>,
    storages: Vec<Storage<'a>>,
    /// Where each declared symbol (by symbol table index) is bound.
    bound: Vec<Option<Site>>,
    line_bound: FxIndexSet<Symbol>,
    /// `later_*` are filled (by [`Validator::prescan`]) only when first needed.
    prescanned: bool,
    later_bindings: FxIndexMap<Symbol, usize>,
    later_definitions: FxIndexMap<BufName, usize>,
    later_kernels: FxIndexMap<KernelName, usize>,
    external_symbols: FxIndexMap<Symbol, Option<usize>>,
    external_kernels: FxIndexMap<KernelName, usize>,
    defined_kernels: FxIndexMap<KernelName, (GraphName, usize)>,
    own_definitions: FxIndexSet<KernelName>,
    precomputed: FxIndexMap<Symbol, &'a SymExpr>,
    device_stack: Vec<usize>,
    reported: FxIndexSet<String>,
    info: GraphInfo,
}

impl<'a> GraphState<'a> {
    fn resolve(&self, program: &'a Program, name: &BufName) -> BufRef {
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

    fn layout_of(&self, program: &'a Program, name: &BufName, r: BufRef) -> Option<&'a Layout> {
        match r {
            BufRef::Graph(i) => match self.graph.buffers.get_index(i).map(|(_, d)| &d.kind) {
                Some(BufferKind::Tensor(l)) => Some(l),
                _ => None,
            },
            BufRef::Constant => program.constants.get(name),
            BufRef::Undeclared => None,
        }
    }

    fn layout(&self, program: &'a Program, name: &BufName) -> Option<&'a Layout> {
        self.layout_of(program, name, self.resolve(program, name))
    }

    /// The buffer's entry in `info.buffers`, once defined.
    fn info_mut(&mut self, name: &BufName, r: BufRef) -> Option<&mut BufferInfo> {
        match r {
            BufRef::Graph(i) => {
                let at = self.info_index[i]?;
                self.info.buffers.get_index_mut(at).map(|(_, b)| b)
            }
            _ => self.info.buffers.get_mut(name),
        }
    }

    /// Where the buffer is defined, when it is.
    fn defined_site(&self, name: &BufName, r: BufRef) -> Option<Site> {
        match r {
            BufRef::Graph(i) => {
                let at = self.info_index[i]?;
                self.info.buffers.get_index(at).map(|(_, b)| b.defined)
            }
            _ => self.info.buffers.get(name).map(|b| b.defined),
        }
    }

    /// The state of a graph buffer (`None`: not defined yet, or not a graph buffer).
    fn state(&self, r: BufRef) -> Option<&BufState> {
        match r {
            BufRef::Graph(i) => self.states[i].as_ref(),
            _ => None,
        }
    }

    /// Sets the state of a graph buffer (constants have none: nothing reads it).
    fn set_state(&mut self, r: BufRef, state: BufState) {
        if let BufRef::Graph(i) = r {
            self.states[i] = Some(state);
        }
    }

    fn touch(&mut self, name: &BufName, r: BufRef, at: usize) {
        if let Some(b) = self.info_mut(name, r) {
            b.last_use = Some(at);
        }
    }
}

fn is_identifier(s: &str) -> bool {
    // Byte-wise: a non-ASCII character fails either test, as it would char-wise.
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && bytes.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Calls `f` on every symbol occurrence of `e`, parents first and children in
/// order (the order of [`SymExpr::free_symbols`]), without allocating.
fn for_each_symbol<'e>(e: &'e SymExpr, f: &mut impl FnMut(&'e Symbol)) {
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
fn expr_symbols(e: &SymExpr) -> SmallVec<[&Symbol; 4]> {
    let mut out: SmallVec<[&Symbol; 4]> = SmallVec::new();
    for_each_symbol(e, &mut |s| {
        if !out.contains(&s) {
            out.push(s);
        }
    });
    out
}

fn layout_symbols(l: &Layout) -> Vec<Symbol> {
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
fn negative_layout_parts(l: &Layout) -> Vec<(String, i64)> {
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
fn const_storage(l: &Layout) -> Option<i64> {
    l.storage_numel_eval(&Bindings::new()).ok()
}

fn describe_arg(v: &ArgValue) -> String {
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

/// A kernel parameter as the checker sees it.
struct Param<'a> {
    name: String,
    /// `Some(dtype)` for typed pointers, checked against the buffer.
    pointer: Option<Option<DType>>,
    /// The type, printed only for diagnostics.
    ty: ParamType<'a>,
    /// The parameter may be left out (fixed by `constants`).
    optional: bool,
}

/// Parameter -> value of one call; a handful of entries, searched linearly.
type Bound<'x> = SmallVec<[(&'x str, &'x ArgValue); 16]>;

/// Binds `name` (replacing an earlier value); `true` when it was bound already.
fn bound_insert<'x>(bound: &mut Bound<'x>, name: &'x str, value: &'x ArgValue) -> bool {
    match bound.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => {
            slot.1 = value;
            true
        }
        None => {
            bound.push((name, value));
            false
        }
    }
}

fn bound_get<'x>(bound: &Bound<'x>, name: &str) -> Option<&'x ArgValue> {
    bound.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// A parameter's type as diagnostics print it.
enum ParamType<'a> {
    /// A Triton signature type; `None` for launcher arguments.
    Triton(Option<&'a SigType>),
    /// A C type.
    C(&'a str),
}

impl ParamType<'_> {
    fn text(&self) -> String {
        match self {
            ParamType::Triton(Some(t)) => t.to_string(),
            ParamType::Triton(None) => "launcher argument".into(),
            ParamType::C(t) => (*t).to_string(),
        }
    }
}

impl<'a> Validator<'a> {
    fn new(program: &'a Program) -> Self {
        let symbol_index = program
            .symbols
            .keys()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        let kernel_index = program
            .kernels
            .keys()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
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
    fn symbol_index(&self, s: &Symbol) -> Option<usize> {
        self.symbol_index.get(s.as_str()).copied()
    }

    /// Where `s` is bound in `g`, if it is.
    fn bound_site(&self, g: &GraphState<'a>, s: &Symbol) -> Option<Site> {
        self.symbol_index(s).and_then(|i| g.bound[i])
    }

    /// The graph that declares a buffer: main first, then subgraphs in table order.
    fn buffer_owner(&self, name: &BufName) -> Option<GraphName> {
        if self.program.main.buffers.contains_key(name) {
            return Some(GraphName::new(MAIN_GRAPH));
        }
        self.program
            .subgraphs
            .iter()
            .find(|(_, graph)| graph.buffers.contains_key(name))
            .map(|(g, _)| g.clone())
    }

    fn err(&mut self, location: Location, kind: ValidationErrorKind) {
        if self.errors.len() >= self.limits.max_diagnostics {
            self.suppressed += 1;
            return;
        }
        self.errors.push(ValidationError { location, kind });
    }

    /// An error for a limit exceeded at `location`.
    fn limit(&mut self, location: Location, limit: crate::Limit, value: usize, max: usize, what: String) {
        if let Err(error) = crate::Limits::check(limit, value as u64, max as u64, what) {
            self.err(location, ValidationErrorKind::Limit(error));
        }
    }

    fn at(g: &GraphState<'_>, index: usize) -> Location {
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

    fn loc(g: &GraphState<'_>, index: Option<usize>) -> Location {
        match index {
            Some(i) => Self::at(g, i),
            None => Location::Graph { graph: g.name.clone() },
        }
    }

    // -- program-wide tables ------------------------------------------------

    fn check_tables(&mut self) {
        let p = self.program;
        for (sym, decl) in &p.symbols {
            if !is_identifier(sym.as_str()) {
                self.err(
                    Location::Program,
                    ValidationErrorKind::InvalidName {
                        what: "symbol",
                        name: sym.to_string(),
                    },
                );
            }
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
            if !is_identifier(key.as_str()) {
                self.err(
                    Location::Program,
                    ValidationErrorKind::InvalidName {
                        what: "kernel",
                        name: key.to_string(),
                    },
                );
            }
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
            if !is_identifier(name.as_str()) {
                self.err(
                    Location::Program,
                    ValidationErrorKind::InvalidName {
                        what: "buffer",
                        name: name.to_string(),
                    },
                );
            }
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
            } else if !is_identifier(name.as_str()) {
                self.err(
                    Location::Program,
                    ValidationErrorKind::InvalidName {
                        what: "graph",
                        name: name.to_string(),
                    },
                );
            }
        }
        // Backed symbols are bound at main's entry by what its inputs mention.
        let mut entry: FxIndexSet<Symbol> = FxIndexSet::default();
        for input in &p.main.inputs {
            match input {
                GraphInput::Symbol { symbol, .. } => {
                    entry.insert(symbol.clone());
                }
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

    fn check_graph(&mut self, name: &GraphName, graph: &'a Graph, is_main: bool) -> Summary {
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
            later_definitions: FxIndexMap::default(),
            later_kernels: FxIndexMap::default(),
            external_symbols: FxIndexMap::default(),
            external_kernels: FxIndexMap::default(),
            defined_kernels: FxIndexMap::default(),
            own_definitions: FxIndexSet::default(),
            precomputed: FxIndexMap::default(),
            device_stack: Vec::new(),
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
        for (i, line) in graph.lines.iter().enumerate() {
            self.check_line(&mut g, i, line);
        }
        for at in std::mem::take(&mut g.device_stack) {
            self.err(Self::at(&g, at), ValidationErrorKind::UnclosedDeviceGuard);
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
    fn prescan(g: &mut GraphState<'a>) {
        if g.prescanned {
            return;
        }
        g.prescanned = true;
        for (i, line) in g.graph.lines.iter().enumerate() {
            let mut def = |b: &BufName| {
                g.later_definitions.entry(b.clone()).or_insert(i);
            };
            match line {
                Line::Allocate { buffer } | Line::CommBufferAllocate { buffer, .. } => def(buffer),
                Line::Reuse { new, .. } => def(new),
                Line::Reinterpret { alias, .. } => def(alias),
                Line::ExternKernelAlloc(c) => {
                    if let Some(r) = &c.result {
                        def(r)
                    }
                }
                Line::MultiOutput { result, .. } => def(result),
                Line::Conditional(c) => def(&c.result),
                Line::WhileLoop(w) => def(&w.result),
                Line::SymbolicCallArg { symbol, .. } | Line::DynamicScalar { symbol, .. } => {
                    g.later_bindings.entry(symbol.clone()).or_insert(i);
                }
                Line::UnbackedSymbolDefs { bindings, .. } => {
                    for s in bindings.keys() {
                        g.later_bindings.entry(s.clone()).or_insert(i);
                    }
                }
                Line::KernelDefinition { kernel } => {
                    g.later_kernels.entry(kernel.clone()).or_insert(i);
                }
                _ => {}
            }
        }
    }

    fn check_buffer_table(&mut self, g: &mut GraphState<'a>) {
        let loc = Location::Graph { graph: g.name.clone() };
        for (index, (name, decl)) in g.graph.buffers.iter().enumerate() {
            if !is_identifier(name.as_str()) {
                self.err(
                    loc.clone(),
                    ValidationErrorKind::InvalidName {
                        what: "buffer",
                        name: name.to_string(),
                    },
                );
            }
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

    /// Reports every constant part of `l` that is negative (once each).
    fn check_layout_signs(&mut self, loc: Location, name: &BufName, l: &Layout) {
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
    }

    fn check_inputs(&mut self, g: &mut GraphState<'a>) {
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
        // Symbols tensor inputs mention: bound at main's entry, required from the
        // caller for subgraphs.
        for (i, input) in g.graph.inputs.iter().enumerate() {
            let GraphInput::Tensor { name } = input else { continue };
            let Some(l) = g.graph.layout(name) else { continue };
            for s in layout_symbols(l) {
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

    fn check_outputs(&mut self, g: &mut GraphState<'a>) {
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

    /// Requires every symbol of `e` to be declared and bound here. `line` is
    /// `None` for graph headers; `order` orders header uses after all lines.
    fn use_expr(&mut self, g: &mut GraphState<'a>, line: Option<usize>, e: &SymExpr, order: usize) {
        for s in expr_symbols(e) {
            self.require_symbol(g, line, s, None, order);
        }
    }

    /// Requires the symbols of a graph buffer's layout to be bound at line `at`
    /// ([`Validator::require_symbol`] for each, with the buffer named).
    fn require_layout_symbols(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, r: BufRef) {
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

    fn require_symbol(
        &mut self,
        g: &mut GraphState<'a>,
        line: Option<usize>,
        s: &Symbol,
        via_buffer: Option<&BufName>,
        order: usize,
    ) {
        let Some(index) = self.symbol_index(s) else {
            if g.reported.insert(format!("undeclared-symbol {s}")) {
                self.err(
                    Self::loc(g, line),
                    ValidationErrorKind::UndeclaredSymbol { symbol: s.clone() },
                );
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

    fn bind_symbol(
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

    fn check_key_path(
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

    /// Defines `name`. `storage`: `None` for multi-output values, `Some(None)`
    /// for a fresh storage, `Some(Some(id))` to use an existing one.
    fn define(&mut self, g: &mut GraphState<'a>, name: &BufName, site: Site, storage: Option<Option<usize>>) {
        let r = g.resolve(self.program, name);
        let storage = match storage {
            None => None,
            Some(Some(id)) => Some(id),
            Some(None) => {
                let capacity = g.layout_of(self.program, name, r);
                g.storages.push(Storage {
                    owner: name.clone(),
                    root: name.clone(),
                    capacity,
                    freed_at: None,
                });
                Some(g.storages.len() - 1)
            }
        };
        let storage_root = storage.and_then(|id| g.storages.get(id)).map(|s| s.root.clone());
        g.set_state(r, BufState::Live { storage });
        let (index, _) = g.info.buffers.insert_full(
            name.clone(),
            BufferInfo {
                defined: site,
                last_use: None,
                ended: None,
                is_output: false,
                storage_root,
            },
        );
        if let BufRef::Graph(i) = r {
            g.info_index[i] = Some(index);
        }
    }

    /// Checks that a line may define `name` with the given kind; returns
    /// `false` (after reporting) when it may not.
    fn may_define(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, need: Need) -> bool {
        let r = g.resolve(self.program, name);
        if !self.declared(g, at, name, r) {
            return false;
        }
        if !self.kind_ok(g, at, name, r, need) {
            return false;
        }
        if let Some(first) = g.defined_site(name, r) {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::DefinedTwice {
                    buffer: name.clone(),
                    first,
                },
            );
            return false;
        }
        true
    }

    /// Reports (once per name) a buffer missing from the table; constants count
    /// as declared.
    fn declared(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, r: BufRef) -> bool {
        if r != BufRef::Undeclared {
            return true;
        }
        if g.reported.insert(format!("undeclared-buffer {name}")) {
            let kind = match self.buffer_owner(name) {
                Some(owner) if owner != g.name => ValidationErrorKind::ForeignBuffer {
                    buffer: name.clone(),
                    owner,
                },
                _ => ValidationErrorKind::UndeclaredBuffer { buffer: name.clone() },
            };
            self.err(Self::at(g, at), kind);
        }
        false
    }

    fn kind_ok(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, r: BufRef, need: Need) -> bool {
        let is_tensor = match r {
            BufRef::Graph(i) => matches!(
                g.graph.buffers.get_index(i).map(|(_, d)| &d.kind),
                Some(BufferKind::Tensor(_))
            ),
            _ => true, // a constant
        };
        match (need, is_tensor) {
            (Need::Tensor, false) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::NotATensor { buffer: name.clone() },
                );
                false
            }
            (Need::Multi, true) => {
                self.err(Self::at(g, at), ValidationErrorKind::NotMulti { buffer: name.clone() });
                false
            }
            _ => true,
        }
    }

    /// A read or write of a live buffer. `layout_syms`: also require the
    /// symbols of its layout to be bound. Returns the buffer's storage id when
    /// the use is valid.
    fn use_buffer(
        &mut self,
        g: &mut GraphState<'a>,
        at: usize,
        name: &BufName,
        need: Need,
        layout_syms: bool,
    ) -> Option<Option<usize>> {
        let r = g.resolve(self.program, name);
        if !self.declared(g, at, name, r) || !self.kind_ok(g, at, name, r, need) {
            return None;
        }
        if r == BufRef::Constant {
            return Some(None);
        }
        let result = match g.state(r).cloned() {
            None => {
                Self::prescan(g);
                let defined_at = g.later_definitions.get(name).copied();
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UsedBeforeDefinition {
                        buffer: name.clone(),
                        defined_at,
                    },
                );
                return None;
            }
            Some(BufState::Released { at: ended_at, .. }) => {
                let how = Ending::MarkedReused;
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UseAfterEnd {
                        buffer: name.clone(),
                        ended_at,
                        how,
                    },
                );
                return None;
            }
            Some(BufState::Ended { at: ended_at, how }) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UseAfterEnd {
                        buffer: name.clone(),
                        ended_at,
                        how,
                    },
                );
                return None;
            }
            Some(BufState::Live { storage }) => {
                self.check_storage_alive(g, name, storage, Some(at));
                Some(storage)
            }
        };
        g.touch(name, r, at);
        if layout_syms {
            self.require_layout_symbols(g, at, name, r);
        }
        result
    }

    fn check_storage_alive(
        &mut self,
        g: &mut GraphState<'a>,
        name: &BufName,
        storage: Option<usize>,
        at: Option<usize>,
    ) {
        let Some(st) = storage.and_then(|id| g.storages.get(id)) else {
            return;
        };
        if let Some(freed_at) = st.freed_at {
            if st.owner != *name {
                let owner = st.owner.clone();
                self.err(
                    Self::loc(g, at),
                    ValidationErrorKind::ViewOutlivesStorage {
                        buffer: name.clone(),
                        owner,
                        freed_at,
                    },
                );
            }
        }
    }

    /// Ends `name` (free-like lines). `mark_reused`: `FreeIfNotReused ... reused`.
    fn end_buffer(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, mark_reused: bool) {
        let r = g.resolve(self.program, name);
        if !self.declared(g, at, name, r) {
            return;
        }
        if r == BufRef::Constant {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::ConstantEnded { buffer: name.clone() },
            );
            return;
        }
        match g.state(r).cloned() {
            None => {
                Self::prescan(g);
                let defined_at = g.later_definitions.get(name).copied();
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UsedBeforeDefinition {
                        buffer: name.clone(),
                        defined_at,
                    },
                );
            }
            Some(BufState::Ended {
                at: first,
                how: Ending::Freed | Ending::MarkedReused,
            })
            | Some(BufState::Released { at: first, .. }) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::DoubleFree {
                        buffer: name.clone(),
                        first_freed_at: first,
                    },
                );
            }
            Some(BufState::Ended { at: ended_at, how }) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UseAfterEnd {
                        buffer: name.clone(),
                        ended_at,
                        how,
                    },
                );
            }
            Some(BufState::Live { storage }) => {
                let owned = storage
                    .and_then(|id| g.storages.get(id))
                    .map(|s| (s.owner == *name, s.owner.clone()));
                if mark_reused {
                    if let Some((false, owner)) = owned {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::ReuseOfView {
                                buffer: name.clone(),
                                owner,
                            },
                        );
                    }
                    // The storage stays allocated; the name may only be `old` of a Reuse now.
                    g.set_state(r, BufState::Released { at, storage });
                } else {
                    if let (Some(id), Some((true, _))) = (storage, owned) {
                        if let Some(st) = g.storages.get_mut(id) {
                            st.freed_at = Some(at);
                        }
                    }
                    g.set_state(r, BufState::Ended { at, how: Ending::Freed });
                }
                if let Some(info) = g.info_mut(name, r) {
                    info.ended = Some(at);
                }
            }
        }
    }

    fn reuse(&mut self, g: &mut GraphState<'a>, at: usize, old: &BufName, new: &BufName, delete_old: bool) {
        let may_define = self.may_define(g, at, new, Need::Tensor);
        let r = g.resolve(self.program, old);
        if !self.declared(g, at, old, r) || !self.kind_ok(g, at, old, r, Need::Tensor) {
            return;
        }
        if r == BufRef::Constant {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::ConstantEnded { buffer: old.clone() },
            );
            return;
        }
        let storage = match g.state(r).cloned() {
            None => {
                Self::prescan(g);
                let defined_at = g.later_definitions.get(old).copied();
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UsedBeforeDefinition {
                        buffer: old.clone(),
                        defined_at,
                    },
                );
                return;
            }
            Some(BufState::Ended { at: ended_at, how }) => {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UseAfterEnd {
                        buffer: old.clone(),
                        ended_at,
                        how,
                    },
                );
                return;
            }
            Some(BufState::Released { storage, .. }) => storage,
            Some(BufState::Live { storage }) => {
                if !delete_old {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::ReuseOfLiveBuffer {
                            old: old.clone(),
                            new: new.clone(),
                        },
                    );
                }
                if let Some(info) = g.info_mut(old, r) {
                    info.ended = Some(at);
                }
                storage
            }
        };
        if let Some(st) = storage.and_then(|id| g.storages.get(id)) {
            if st.owner != *old {
                let owner = st.owner.clone();
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::ReuseOfView {
                        buffer: old.clone(),
                        owner,
                    },
                );
            }
        }
        g.touch(old, r, at);
        g.set_state(
            r,
            BufState::Ended {
                at,
                how: Ending::ReusedBy(new.clone()),
            },
        );
        let r_new = g.resolve(self.program, new);
        if let (Some(lo), Some(ln)) = (g.layout_of(self.program, old, r), g.layout_of(self.program, new, r_new)) {
            if lo.dtype != ln.dtype {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::ReuseDtypeMismatch {
                        old: old.clone(),
                        new: new.clone(),
                        old_dtype: lo.dtype,
                        new_dtype: ln.dtype,
                    },
                );
            }
            if lo.device != ln.device {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::DeviceMismatch {
                        old: old.clone(),
                        new: new.clone(),
                        old_device: lo.device,
                        new_device: ln.device,
                    },
                );
            }
            // Decided only for constant sizes; syntactically equal storage
            // expressions fit trivially; other symbolic comparisons are accepted.
            if lo.storage_numel_expr() != ln.storage_numel_expr() {
                if let (Some(o), Some(n)) = (const_storage(lo), const_storage(ln)) {
                    if n > o {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::ReuseTooSmall {
                                old: old.clone(),
                                new: new.clone(),
                                old_numel: o,
                                new_numel: n,
                            },
                        );
                    }
                }
            }
            if may_define {
                self.require_layout_symbols(g, at, new, r_new);
            }
        }
        if !may_define {
            return;
        }
        match storage {
            Some(id) => {
                if let Some(st) = g.storages.get_mut(id) {
                    st.owner = new.clone();
                }
                self.define(g, new, Site::Line(at), Some(Some(id)));
            }
            None => self.define(g, new, Site::Line(at), Some(None)),
        }
    }

    fn reinterpret(&mut self, g: &mut GraphState<'a>, at: usize, base: &BufName, alias: &BufName) {
        let storage = self.use_buffer(g, at, base, Need::Tensor, true);
        if !self.may_define(g, at, alias, Need::Tensor) {
            return;
        }
        let storage = storage.flatten();
        let r_alias = g.resolve(self.program, alias);
        if let Some(la) = g.layout_of(self.program, alias, r_alias) {
            self.require_layout_symbols(g, at, alias, r_alias);
            let st = storage.and_then(|id| g.storages.get(id)).cloned();
            let capacity = match &st {
                Some(s) => s.capacity,
                None => g.layout(self.program, base),
            };
            let owner = st.as_ref().map(|s| s.owner.clone()).unwrap_or_else(|| base.clone());
            if let Some(cap) = capacity {
                if cap.device != la.device {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::DeviceMismatch {
                            old: base.clone(),
                            new: alias.clone(),
                            old_device: cap.device,
                            new_device: la.device,
                        },
                    );
                }
                let bytes = |l: &Layout| const_storage(l).and_then(|n| n.checked_mul(l.dtype.size_bytes() as i64));
                if let (Some(needed), Some(available)) = (bytes(la), bytes(cap)) {
                    if needed > available {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::ViewOutOfBounds {
                                alias: alias.clone(),
                                owner,
                                needed,
                                available,
                            },
                        );
                    }
                }
            }
        }
        match storage {
            Some(id) => self.define(g, alias, Site::Line(at), Some(Some(id))),
            // The base is a constant or its storage is unknown: the view gets its own record.
            None => self.define(g, alias, Site::Line(at), Some(None)),
        }
    }

    /// Defines the result of an op (extern alloc, multi-output element, cond,
    /// loop): a fresh storage for tensors, none for multi-output values.
    fn define_result(&mut self, g: &mut GraphState<'a>, at: usize, name: &BufName, need: Need) {
        if !self.may_define(g, at, name, need) {
            return;
        }
        let storage = if g.layout(self.program, name).is_some() {
            Some(None)
        } else {
            None
        };
        self.define(g, name, Site::Line(at), storage);
    }

    fn use_arg(&mut self, g: &mut GraphState<'a>, at: usize, v: &ArgValue) {
        match v {
            ArgValue::Buffer(b) => {
                self.use_buffer(g, at, b, Need::Any, true);
                return;
            }
            ArgValue::Expr(e) => {
                self.use_expr(g, Some(at), e, at);
                return;
            }
            ArgValue::List(_) => {}
            _ => return,
        }
        let depth = v.depth();
        if depth > self.limits.max_text_depth {
            let max = self.limits.max_text_depth;
            self.limit(
                Self::at(g, at),
                crate::Limit::TextDepth,
                depth,
                max,
                "list argument nested too deep".to_string(),
            );
            return;
        }
        // Lists: every buffer, then every expression.
        let mut bufs = Vec::new();
        v.for_each_buffer(&mut |b| bufs.push(b.clone()));
        for b in bufs {
            self.use_buffer(g, at, &b, Need::Any, true);
        }
        let mut exprs = Vec::new();
        v.for_each_expr(&mut |e| exprs.push(e.clone()));
        for e in exprs {
            self.use_expr(g, Some(at), &e, at);
        }
    }

    // -- lines ------------------------------------------------------------------

    fn check_line(&mut self, g: &mut GraphState<'a>, at: usize, line: &'a Line) {
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
                if let Some((graph, first)) = g.defined_kernels.get(kernel).cloned() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::KernelDefinedTwice {
                            kernel: kernel.clone(),
                            graph,
                            first,
                        },
                    );
                    return;
                }
                g.defined_kernels.insert(kernel.clone(), (g.name.clone(), at));
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
            Line::MultiOutput {
                result,
                source,
                indices,
            } => {
                let need = if indices.is_empty() { Need::Any } else { Need::Multi };
                self.use_buffer(g, at, source, need, false);
                for ix in indices {
                    if let MultiIndex::List(i) | MultiIndex::Tuple(i) = ix {
                        if *i >= 0 && *i as u64 >= self.limits.max_outputs as u64 {
                            let max = self.limits.max_outputs;
                            self.limit(
                                Self::at(g, at),
                                crate::Limit::Outputs,
                                usize::try_from(*i).unwrap_or(usize::MAX).saturating_add(1),
                                max,
                                format!("`{source}` indexed at {i}: outputs of one value"),
                            );
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
                self.define_result(g, at, result, Need::Any);
            }
            Line::IndexPutFallback {
                target,
                indices,
                values,
                ..
            } => {
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
            Line::DynamicScalar {
                symbol,
                source,
                keypath,
                ..
            } => {
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
                self.bind_symbol(g, at, symbol, SymbolKind::Unbacked, "an item line");
            }
            Line::UnbackedSymbolDefs { source, bindings } => {
                self.use_buffer(g, at, source, Need::Any, false);
                let rank = g.layout(self.program, source).map(Layout::rank);
                for (s, path) in bindings {
                    self.check_key_path(g, at, s, path, rank);
                    self.bind_symbol(g, at, s, SymbolKind::Unbacked, "a bind line");
                }
            }
            Line::Conditional(c) => self.conditional(g, at, c),
            Line::WhileLoop(w) => self.while_loop(g, at, w),
            Line::EnterDeviceContext { .. } => {
                if g.device_stack.len() >= self.limits.max_text_depth {
                    let max = self.limits.max_text_depth;
                    self.limit(
                        Self::at(g, at),
                        crate::Limit::TextDepth,
                        g.device_stack.len() + 1,
                        max,
                        "device guards nested too deep".to_string(),
                    );
                }
                g.device_stack.push(at)
            }
            Line::ExitDeviceContext => {
                if g.device_stack.pop().is_none() {
                    self.err(Self::at(g, at), ValidationErrorKind::UnmatchedDeviceExit);
                }
            }
            Line::Comment { .. } => {}
            Line::AssertSizeStride {
                buffer, size, stride, ..
            } => {
                self.use_buffer(g, at, buffer, Need::Tensor, true);
                for e in size.iter().chain(stride.iter()) {
                    self.use_expr(g, Some(at), e, at);
                }
                if let Some(l) = g.layout(self.program, buffer) {
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
                }
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

    // -- kernels ----------------------------------------------------------------

    fn kernel_call(&mut self, g: &mut GraphState<'a>, at: usize, call: &'a KernelCall) {
        for a in &call.args {
            self.use_arg(g, at, &a.value);
        }
        let program = self.program;
        let Some((kernel_index, def)) = self
            .kernel_index
            .get(call.kernel.as_str())
            .and_then(|&i| program.kernels.get_index(i).map(|(_, d)| (i, d)))
        else {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::UnknownKernel {
                    kernel: call.kernel.clone(),
                },
            );
            return;
        };
        if !g.defined_kernels.contains_key(&call.kernel) {
            Self::prescan(g);
            let later = g.later_kernels.get(&call.kernel).copied().filter(|&i| i > at);
            if g.is_main || later.is_some() {
                if g.reported.insert(format!("undefined-kernel {}", call.kernel)) {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::KernelNotDefined {
                            kernel: call.kernel.clone(),
                            defined_at: later,
                        },
                    );
                }
            } else {
                g.external_kernels.entry(call.kernel.clone()).or_insert(at);
            }
        }
        let cached = match &self.call_params[kernel_index] {
            Some(p) => p.clone(),
            None => {
                let p = self
                    .kernel_params(def)
                    .map(|params| -> Rc<[Param<'a>]> { params.into_iter().filter(|p| !p.name.is_empty()).collect() });
                self.call_params[kernel_index] = Some(p.clone());
                p
            }
        };
        let Some(call_params) = cached else { return };
        let kernel = &call.kernel;
        let positional = call.args.iter().take_while(|a| a.name.is_none()).count();
        let any_named = positional < call.args.len();
        if call.args[positional..].iter().any(|a| a.name.is_none()) {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::PositionalAfterNamed { kernel: kernel.clone() },
            );
        }
        if (!any_named && positional != call_params.len()) || positional > call_params.len() {
            self.err(
                Self::at(g, at),
                ValidationErrorKind::ArityMismatch {
                    kernel: kernel.clone(),
                    expected: call_params.len(),
                    params: call_params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    found: positional,
                },
            );
        }
        // Parameter -> value; a handful of entries, searched linearly.
        let mut bound: Bound<'_> = SmallVec::new();
        for (p, a) in call_params.iter().zip(call.args.iter().take(positional)) {
            bound_insert(&mut bound, p.name.as_str(), &a.value);
        }
        // Each unknown or twice-bound name is reported once, however often it repeats.
        let mut reported: rustc_hash::FxHashSet<&str> = Default::default();
        for a in &call.args[positional..] {
            let Some(n) = &a.name else { continue };
            if !self.named_param_exists(def, n) {
                if !reported.insert(n.as_str()) {
                    continue;
                }
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::UnknownParameter {
                        kernel: kernel.clone(),
                        param: n.clone(),
                    },
                );
            } else if bound_insert(&mut bound, n.as_str(), &a.value) && reported.insert(n.as_str()) {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::ParameterBoundTwice {
                        kernel: kernel.clone(),
                        param: n.clone(),
                    },
                );
            }
        }
        if any_named {
            for p in call_params.iter() {
                if !p.optional && bound_get(&bound, p.name.as_str()).is_none() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::MissingArgument {
                            kernel: kernel.clone(),
                            param: p.name.clone(),
                        },
                    );
                }
            }
        }
        for p in call_params.iter() {
            let Some(value) = bound_get(&bound, p.name.as_str()) else {
                continue;
            };
            if p.optional {
                continue;
            }
            match (&p.pointer, value) {
                (Some(expected), ArgValue::Buffer(b)) => {
                    if let (Some(dt), Some(l)) = (expected, g.layout(self.program, b)) {
                        if l.dtype != *dt {
                            self.err(
                                Self::at(g, at),
                                ValidationErrorKind::PointerDtypeMismatch {
                                    kernel: kernel.clone(),
                                    param: p.name.clone(),
                                    expected: SigType::Pointer(*dt),
                                    buffer: b.clone(),
                                    found: l.dtype,
                                },
                            );
                        }
                    }
                }
                (Some(_), other) => self.err(
                    Self::at(g, at),
                    ValidationErrorKind::PointerArgNotBuffer {
                        kernel: kernel.clone(),
                        param: p.name.clone(),
                        expected: p.ty.text(),
                        found: describe_arg(other),
                    },
                ),
                (None, ArgValue::Buffer(b)) => {
                    // A 0-d tensor may stand for its value (Inductor's `.item()` args).
                    let is_scalar_tensor = g.layout(self.program, b).is_some_and(|l| l.rank() == 0);
                    if !is_scalar_tensor {
                        self.err(
                            Self::at(g, at),
                            ValidationErrorKind::BufferArgNotPointer {
                                kernel: kernel.clone(),
                                param: p.name.clone(),
                                expected: p.ty.text(),
                                buffer: b.clone(),
                            },
                        );
                    }
                }
                (None, _) => {}
            }
        }
    }

    /// The parameters a call site binds, or `None` when the backend's
    /// parameters are unknown (CUDA C, host, C++ without `arg_types`).
    fn kernel_params(&self, def: &'a KernelDef) -> Option<Vec<Param<'a>>> {
        match &def.backend {
            KernelBackend::Triton(meta) => Some(
                meta.call_params()
                    .into_iter()
                    .map(|name| {
                        let ty = meta.signature.get(name);
                        Param {
                            name: name.to_string(),
                            pointer: match ty {
                                Some(SigType::Pointer(d)) => Some(Some(*d)),
                                _ => None,
                            },
                            ty: ParamType::Triton(ty),
                            optional: meta.constants.contains_key(name),
                        }
                    })
                    .collect(),
            ),
            KernelBackend::Halide(meta) => Some(
                meta.argtypes
                    .iter()
                    .map(|a| Param {
                        name: a.name.clone(),
                        pointer: a.ctype.trim_end().ends_with('*').then_some(None),
                        ty: ParamType::C(&a.ctype),
                        optional: false,
                    })
                    .collect(),
            ),
            KernelBackend::Cpp(meta) if !meta.arg_types.is_empty() => Some(
                meta.arg_types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| Param {
                        name: format!("arg{i}"),
                        pointer: t.trim_end().ends_with('*').then_some(None),
                        ty: ParamType::C(t),
                        optional: false,
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    fn named_param_exists(&self, def: &KernelDef, name: &str) -> bool {
        match &def.backend {
            KernelBackend::Triton(meta) => {
                meta.signature.contains_key(name) || meta.extra_launcher_args.iter().any(|a| a == name)
            }
            KernelBackend::Halide(meta) => meta.argtypes.iter().any(|a| a.name == name),
            KernelBackend::Cpp(meta) => (0..meta.arg_types.len()).any(|i| format!("arg{i}") == name),
            _ => true,
        }
    }

    // -- subgraphs ----------------------------------------------------------------

    /// Checks `name` (once) and returns its summary; `None` when it does not
    /// exist or is part of a cycle (both reported here).
    fn subgraph(&mut self, g: &GraphState<'a>, at: usize, name: &GraphName) -> Option<Summary> {
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
        if self.stack.len() >= self.limits.max_subgraph_depth {
            let max = self.limits.max_subgraph_depth;
            self.limit(
                Self::at(g, at),
                crate::Limit::SubgraphDepth,
                self.stack.len() + 1,
                max,
                format!("subgraph `{name}` is called through a chain of subgraphs too long"),
            );
            return None;
        }
        self.summaries.insert(name.clone(), SummaryState::InProgress);
        self.stack.push(name.clone());
        let summary = self.check_graph(name, graph, false);
        self.stack.pop();
        self.infos.insert(name.clone(), summary.info.clone());
        self.summaries.insert(name.clone(), SummaryState::Done(summary.clone()));
        Some(summary)
    }

    /// Passes operands to a subgraph's inputs.
    fn pass_operands(&mut self, g: &mut GraphState<'a>, at: usize, sub: &GraphName, operands: &[&BufName]) {
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
            if let GraphInput::Symbol { .. } = input {
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

    fn use_operands(&mut self, g: &mut GraphState<'a>, at: usize, sub: Option<&GraphName>, operands: &[&BufName]) {
        let inputs = sub.and_then(|s| self.program.subgraphs.get(s)).map(|gr| &gr.inputs);
        for (i, op) in operands.iter().enumerate() {
            let is_symbol = matches!(inputs.and_then(|v| v.get(i)), Some(GraphInput::Symbol { .. }));
            if !is_symbol {
                self.use_buffer(g, at, op, Need::Tensor, true);
            }
        }
    }

    /// Applies what a subgraph needs and provides at the line that runs it.
    fn apply_summary(&mut self, g: &mut GraphState<'a>, at: usize, sub: &GraphName, s: &Summary) {
        for (sym, used_at) in &s.external_symbols {
            if self.bound_site(g, sym).is_some() || self.unbound_backed.contains(sym) {
                continue;
            }
            Self::prescan(g);
            if g.is_main || g.later_bindings.get(sym).is_some_and(|&i| i > at) {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::SubgraphSymbolNotBound {
                        graph: sub.clone(),
                        symbol: sym.clone(),
                        used_at: *used_at,
                    },
                );
            } else {
                g.external_symbols.entry(sym.clone()).or_insert(Some(at));
            }
        }
        for (k, called_at) in &s.external_kernels {
            if g.defined_kernels.contains_key(k) {
                continue;
            }
            Self::prescan(g);
            if g.is_main || g.later_kernels.get(k).is_some_and(|&i| i > at) {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::SubgraphKernelNotDefined {
                        graph: sub.clone(),
                        kernel: k.clone(),
                        called_at: *called_at,
                    },
                );
            } else {
                g.external_kernels.entry(k.clone()).or_insert(at);
            }
        }
        for sym in &s.binds {
            if let Some(first) = self.bound_site(g, sym) {
                let first = SymbolBinding {
                    graph: g.name.clone(),
                    site: first,
                };
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::SymbolBoundTwice {
                        symbol: sym.clone(),
                        first,
                    },
                );
            }
        }
        for k in &s.defines {
            if let Some((graph, first)) = g.defined_kernels.get(k).cloned() {
                self.err(
                    Self::at(g, at),
                    ValidationErrorKind::KernelDefinedTwice {
                        kernel: k.clone(),
                        graph,
                        first,
                    },
                );
            } else {
                g.defined_kernels.insert(k.clone(), (sub.clone(), at));
            }
        }
    }

    /// Makes `syms` (bound inside subgraphs) visible after line `at`.
    fn bind_after(&mut self, g: &mut GraphState<'a>, at: usize, syms: impl IntoIterator<Item = Symbol>) {
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

    fn conditional(&mut self, g: &mut GraphState<'a>, at: usize, c: &'a super::line::Conditional) {
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
        let t = self.subgraph(g, at, &c.true_graph);
        let f = if c.false_graph == c.true_graph {
            t.clone()
        } else {
            self.subgraph(g, at, &c.false_graph)
        };
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
        if let Some(s) = &t {
            self.apply_summary(g, at, &c.true_graph, s);
        }
        if let Some(s) = &f {
            if c.false_graph != c.true_graph {
                self.apply_summary(g, at, &c.false_graph, s);
            }
        }
        if let (Some(t), Some(f)) = (&t, &f) {
            let both: Vec<Symbol> = t.binds.iter().filter(|s| f.binds.contains(*s)).cloned().collect();
            self.bind_after(g, at, both);
        }
        self.define_result(g, at, &c.result, Need::Multi);
    }

    fn while_loop(&mut self, g: &mut GraphState<'a>, at: usize, w: &'a super::line::WhileLoop) {
        let operands: Vec<&BufName> = w.carried.iter().chain(w.additional.iter()).collect();
        self.use_operands(g, at, Some(&w.body_graph), &operands);
        let c = self.subgraph(g, at, &w.cond_graph);
        let b = if w.body_graph == w.cond_graph {
            c.clone()
        } else {
            self.subgraph(g, at, &w.body_graph)
        };
        if c.is_some() {
            self.pass_operands(g, at, &w.cond_graph, &operands);
            if let Some(cg) = self.program.subgraphs.get(&w.cond_graph) {
                if cg.outputs.len() != 1 {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::LoopOutputMismatch {
                            role: "cond",
                            graph: w.cond_graph.clone(),
                            expected: 1,
                            found: cg.outputs.len(),
                        },
                    );
                }
            }
        }
        if b.is_some() {
            self.pass_operands(g, at, &w.body_graph, &operands);
            if let Some(bg) = self.program.subgraphs.get(&w.body_graph) {
                if bg.outputs.len() != w.carried.len() {
                    self.err(
                        Self::at(g, at),
                        ValidationErrorKind::LoopOutputMismatch {
                            role: "body",
                            graph: w.body_graph.clone(),
                            expected: w.carried.len(),
                            found: bg.outputs.len(),
                        },
                    );
                }
            }
        }
        if let Some(s) = &c {
            self.apply_summary(g, at, &w.cond_graph, s);
        }
        if let Some(s) = &b {
            if w.body_graph != w.cond_graph {
                self.apply_summary(g, at, &w.body_graph, s);
            }
        }
        // The cond graph runs at least once; the body may not run at all.
        if let Some(s) = &c {
            let syms: Vec<Symbol> = s.binds.iter().cloned().collect();
            self.bind_after(g, at, syms);
        }
        self.define_result(g, at, &w.result, Need::Multi);
    }
}
