//! What validation returns: [`ProgramInfo`] and the per-graph and per-buffer facts in it.

use super::*;

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
    pub(super) name: GraphName,
    pub(super) buffers: IndexMap<BufName, BufferInfo>,
    pub(super) line_binds: Vec<Vec<Symbol>>,
    pub(super) outputs: IndexSet<BufName>,
    pub(super) callers: Vec<(GraphName, usize)>,
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
    pub(super) limits: crate::Limits,
    pub(super) program: &'a Program,
    pub(super) main: GraphInfo,
    pub(super) subgraphs: IndexMap<GraphName, GraphInfo>,
    pub(super) symbol_bindings: IndexMap<Symbol, Vec<SymbolBinding>>,
    pub(super) kernel_definitions: IndexMap<KernelName, (GraphName, usize)>,
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

    /// The kernel a line of the program names (`KernelCall`,
    /// `KernelDefinition`): validation checked that it is in the kernel
    /// table, so back ends need no error for a missing one.
    pub(crate) fn line_kernel(&self, name: &KernelName) -> &'a KernelDef {
        // Invariant: `validate` rejects every line naming a kernel outside the table.
        self.program
            .kernels
            .get(name)
            .expect("validated: every kernel a line names is in the kernel table")
    }

    /// The subgraph a `Conditional` or `WhileLoop` line names: validation
    /// checked that it exists.
    pub(crate) fn line_subgraph(&self, name: &GraphName) -> &'a crate::ir::Graph {
        // Invariant: `validate` rejects every line naming a missing subgraph.
        self.program
            .subgraphs
            .get(name)
            .expect("validated: every subgraph a line runs exists")
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
