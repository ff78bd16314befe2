//! The lowering of one graph: its state, the memos shared across launches, and the walk over lines.

use super::*;

/// Each subgraph lowered once, by name, however many lines run it (lowering
/// a subgraph depends only on the program and the options): nested
/// conditionals sharing a branch cost linear, not exponential, time.
pub(super) type SubgraphMemo = RefCell<SubgraphMemos>;

/// The lowered subgraphs ([`SubgraphMemo`]).
#[derive(Default)]
pub(super) struct SubgraphMemos {
    /// Each subgraph as lowered, with the symbols it lifts.
    pub(super) lowered: HashMap<GraphName, (std::sync::Arc<fx::Graph>, Vec<Symbol>)>,
    /// Each subgraph with its lifted-symbol placeholders in the order of a
    /// list of lifted symbols (`normalize_lifted`): shared by the lines
    /// that run it with that list (a copy each made n lines running one
    /// subgraph of m lines cost n * m).
    pub(super) normalized: HashMap<(GraphName, Vec<Symbol>), std::sync::Arc<fx::Graph>>,
}

pub(super) struct GraphLowering<'p> {
    /// What validation established (kernel and subgraph lookups).
    pub(super) info: &'p ProgramInfo<'p>,
    pub(super) program: &'p Program,
    pub(super) memo: &'p SubgraphMemo,
    pub(super) ir: &'p crate::ir::Graph,
    /// What validation established about this graph (the symbols each
    /// line binds).
    pub(super) graph_info: Option<&'p crate::ir::GraphInfo>,
    pub(super) is_subgraph: bool,
    pub(super) options: &'p Options,
    pub(super) out: fx::Graph,
    pub(super) buffers: HashMap<BufName, NodeId>,
    pub(super) symbols: HashMap<Symbol, Arg>,
    /// Hash-consed expressions, by their hash (computed once per lookup and
    /// kept, so the table grows without hashing the expressions again).
    pub(super) exprs: HashMap<u64, smallvec::SmallVec<[(SymExpr, Arg); 1]>>,
    pub(super) getitems: HashMap<(NodeId, IndexKey), NodeId>,
    pub(super) lifted: Vec<Symbol>,
    pub(super) line: Option<usize>,
    /// What is fixed about a Triton kernel's launches, by kernel (keyed by
    /// the metadata's address).
    pub(super) triton_plans: HashMap<usize, Rc<TritonPlan<'p>>>,
    /// Lowered grids by kernel and the values of the parameters the grid
    /// reads (see [`GridMemo`]).
    pub(super) grids: GridMemo,
    /// The graph's buffer declarations by name (a faster hash than the
    /// program's maps, looked up for every allocation and view).
    pub(super) decls: HashMap<&'p str, &'p BufferKind>,
    /// Kernel definitions looked up so far, by name.
    pub(super) kernels: HashMap<KernelName, &'p KernelDef>,
    /// The graph's layouts, each shared by the nodes that have it (by
    /// value), by [`layout_key`](super::values::layout_key).
    pub(super) layouts: HashMap<u64, smallvec::SmallVec<[Arc<Layout>; 1]>>,
    /// Each layout handle's sizes and strides as node arguments, by the
    /// handle's address (see [`GraphLowering::layout_args`]).
    pub(super) layout_args: HashMap<usize, (Arc<Layout>, fx::Args, fx::Args)>,
}

/// What every launch of one Triton kernel shares.
pub(super) struct TritonPlan<'p> {
    /// [`TritonMeta::call_params`].
    pub(super) params: Rc<[&'p str]>,
    /// No name repeats in `params`.
    pub(super) distinct: bool,
    /// The index in `params` of each of the metadata's extra launcher arguments.
    pub(super) extra_index: Vec<Option<usize>>,
    /// The kwargs every launch starts from; `None` when the kernel's
    /// metadata is inconsistent (the general path reports why).
    pub(super) kwargs: Option<KwargsPlan<'p>>,
    /// The parameters the grid reads, in the order it reads them; set by the
    /// first launch whose grid lowers.
    pub(super) grid_params: std::cell::RefCell<Option<Rc<[GridParam]>>>,
}

/// A parameter the grid reads, with where its value comes from (worked out
/// once per kernel from the metadata, so a launch looks nothing up by name
/// in the kernel's maps).
pub(super) struct GridParam {
    pub(super) name: String,
    /// Its index in [`TritonPlan::params`].
    pub(super) index: Option<usize>,
    /// An extra launcher argument: the expression passed, when one is.
    pub(super) extra: bool,
    /// Its signature entry.
    pub(super) signature: ParamSource,
    /// Its config value, the fallback.
    pub(super) config: Option<i64>,
}

/// Where a signature parameter's value comes from.
pub(super) enum ParamSource {
    /// Not in the signature.
    Absent,
    /// Baked in: an integer constant or config constexpr, or `None` (a
    /// constant of another kind, a constexpr without a config value).
    Fixed(Option<i64>),
    /// A runtime argument: the expression passed.
    Runtime,
}

/// The kwargs of a Triton launch as a template: constants and config
/// constexprs filled in, each runtime parameter a slot.
pub(super) struct KwargsPlan<'p> {
    pub(super) names: KwargNames,
    /// The value of each name: runtime parameters (slots) are `None`.
    pub(super) template: Vec<Arg>,
    /// Per-launch work in signature order: (kwargs index, what to do, the
    /// name's index in [`TritonPlan::params`]).
    pub(super) slots: Vec<(usize, Slot<'p>, Option<usize>)>,
}

pub(super) enum Slot<'p> {
    /// A runtime parameter: the argument bound to this name.
    Runtime(&'p str),
    /// An integer constant: an integer literal bound to this name must equal it.
    CheckInt(&'p str, i64),
}

/// Lowered grids: hash of (kernel key, parameter values) -> entries.
pub(super) type GridMemo = HashMap<u64, Vec<(usize, Vec<Option<SymExpr>>, [Arg; 3])>>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum IndexKey {
    Int(i64),
    Str(String),
}

pub(super) type Res<T> = Result<T, ErrorKind>;

impl<'p> GraphLowering<'p> {
    pub(super) fn run(
        info: &'p ProgramInfo<'p>,
        name: Option<&GraphName>,
        options: &'p Options,
        memo: &'p SubgraphMemo,
    ) -> Result<(fx::Graph, Vec<Symbol>), Error> {
        let program = info.program();
        // Validation checked that every subgraph a line runs exists.
        let ir = match name {
            Some(n) => info.line_subgraph(n),
            None => &program.main,
        };
        let mut l = GraphLowering {
            info,
            program,
            memo,
            ir,
            graph_info: info.graph(name),
            is_subgraph: name.is_some(),
            options,
            // About one node per line, and a few per input.
            out: fx::Graph::with_capacity(ir.lines.len().saturating_add(ir.inputs.len().saturating_mul(4))),
            // Sized once: every buffer name is one the graph declares, every
            // symbol one the program declares (a graph binds about one per
            // line or input at most, so a small subgraph gets a small table).
            buffers: HashMap::with_capacity_and_hasher(ir.buffers.len(), Default::default()),
            symbols: HashMap::with_capacity_and_hasher(
                program
                    .symbols
                    .len()
                    .min(ir.lines.len().saturating_add(ir.inputs.len())),
                Default::default(),
            ),
            exprs: HashMap::default(),
            getitems: HashMap::default(),
            lifted: Vec::new(),
            line: None,
            triton_plans: HashMap::default(),
            grids: HashMap::default(),
            decls: ir.buffers.iter().map(|(n, d)| (n.as_str(), &d.kind)).collect(),
            kernels: HashMap::default(),
            layouts: HashMap::default(),
            layout_args: HashMap::default(),
        };
        l.lower_all()
            .map_err(|kind| Error::new(Location::in_program(program, name, l.line), kind))?;
        Ok((l.out, l.lifted))
    }

    pub(super) fn lower_all(&mut self) -> Res<()> {
        self.inputs()?;
        for (i, line) in self.ir.lines.iter().enumerate() {
            self.line = Some(i);
            self.lower_line(line)?;
        }
        self.line = None;
        let mut values = Vec::new();
        for o in &self.ir.outputs {
            values.push(match o {
                GraphOutput::Buffer(b) => Arg::Node(self.buffer(b)?),
                GraphOutput::Expr(e) => self.expr(e)?,
                GraphOutput::None => Arg::None,
            });
        }
        let as_list = self.is_subgraph || values.len() != 1;
        self.out.push("output", Op::Output { values, as_list }, None);
        Ok(())
    }
}
