//! FX lowering: a validated program as an [`fx::Graph`], following Inductor's
//! `FxConverter` (`wrapper_fxir.py`) with its known bugs fixed:
//!
//! * unbacked-symbol key paths consume exactly the entries they use
//!   (`.size()[0]//2` emits the `floordiv`); `ConvertInt`, `InnerTensor` and
//!   `DivideBy` (also on `item()`) are supported;
//! * nested multi-output indices are followed to the end;
//! * float and `None` kernel arguments are accepted;
//! * Triton arguments are matched to parameters by name (named call args) or
//!   by position over [`TritonMeta::call_params`], never by a zip that can
//!   misalign; constexprs come from `constants` or the config by name;
//! * `while_loop` is lowered (upstream cannot) and symbols a subgraph needs
//!   from its parent are lifted into extra operands.

use crate::fx::{self, Arg, NodeId, Op, Placeholder, SymOp, Val};
use crate::ir::{
    ArgValue, BufName, BufferKind, CallArg, ConstValue, GraphInput, GraphName, GraphOutput, KernelBackend, KernelCall,
    KernelDef, KernelName, KeyEntry, Layout, Line, MultiIndex, Predicate, Program, ProgramInfo, TensorMethod,
    TritonMeta,
};
use crate::sym::{SymExpr, Symbol};
use indexmap::IndexMap;
use rustc_hash::FxHashMap as HashMap;
use std::borrow::Cow;
use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

/// The allocator of symmetric-memory (communication) buffers, as Inductor's Python wrapper calls it.
pub const COMM_ALLOCATOR: &str = "torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p";

/// Options of the FX lowering.
#[derive(Clone, Debug)]
pub struct Options {
    /// Emit an `assert_size_stride` node per tensor input after its sizes are
    /// bound (what the Python wrapper checks at entry). Default `true`.
    pub assert_inputs: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { assert_inputs: true }
    }
}

/// Why a program could not be lowered to FX. Names the graph and line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("graph `{graph}`{}: {kind}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
pub struct Error {
    /// The graph (`main` or a subgraph name).
    pub graph: String,
    /// Index of the line in its graph, when a line is at fault.
    pub line: Option<usize>,
    /// What went wrong.
    pub kind: ErrorKind,
}

/// The kinds of FX lowering errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// A buffer name with no live value at this point.
    #[error("buffer `{0}` has no value here (never defined, or already freed)")]
    UnknownBuffer(BufName),
    /// A symbol used before any line binds it.
    #[error("symbol `{0}` is used before it is bound")]
    UnboundSymbol(Symbol),
    /// A kernel or subgraph missing from the program tables.
    #[error("{what} `{name}` is not defined in the program")]
    Undefined {
        /// `kernel`, `subgraph` or `buffer declaration`.
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// Arguments of a kernel call that do not match its parameters.
    #[error("call of kernel `{kernel}`: {message}")]
    KernelArgs {
        /// The kernel.
        kernel: String,
        /// What does not match.
        message: String,
    },
    /// A key path that cannot be followed.
    #[error("key path of symbol `{symbol}`: {message}")]
    KeyPath {
        /// The symbol being bound.
        symbol: Symbol,
        /// What is wrong.
        message: String,
    },
    /// A graph input whose size expression cannot be solved for its symbol.
    #[error("input `{input}`: {message}")]
    Input {
        /// The input.
        input: BufName,
        /// What is wrong.
        message: String,
    },
    /// A line kind FX cannot express.
    #[error("{0}")]
    Unsupported(String),
    /// Constant folding failed (overflow, division by zero).
    #[error("evaluating `{expr}`: {message}")]
    Fold {
        /// The expression.
        expr: String,
        /// Why.
        message: String,
    },
}

/// Lowers the main graph (and, nested, every subgraph it runs).
pub fn lower(info: &ProgramInfo<'_>, options: &Options) -> Result<fx::Graph, Error> {
    let program = info.program();
    let memo = SubgraphMemo::default();
    let (graph, lifted) = GraphLowering::run(program, None, options, &memo)?;
    if let Some(s) = lifted.first() {
        return Err(Error {
            graph: "main".into(),
            line: None,
            kind: ErrorKind::UnboundSymbol(s.clone()),
        });
    }
    Ok(graph)
}

/// Lowers and prints in torch.fx's readable style.
pub fn write_string(info: &ProgramInfo<'_>, options: &Options) -> Result<String, Error> {
    Ok(lower(info, options)?.to_code())
}

/// Each subgraph lowered once, by name, however many lines run it (lowering
/// a subgraph depends only on the program and the options): nested
/// conditionals sharing a branch cost linear, not exponential, time.
type SubgraphMemo = RefCell<HashMap<GraphName, (fx::Graph, Vec<Symbol>)>>;

struct GraphLowering<'p> {
    program: &'p Program,
    memo: &'p SubgraphMemo,
    ir: &'p crate::ir::Graph,
    name: String,
    is_subgraph: bool,
    options: &'p Options,
    out: fx::Graph,
    buffers: HashMap<BufName, NodeId>,
    symbols: HashMap<Symbol, Arg>,
    exprs: HashMap<SymExpr, Arg>,
    getitems: HashMap<(NodeId, IndexKey), NodeId>,
    lifted: Vec<Symbol>,
    line: Option<usize>,
    /// What is fixed about a Triton kernel's launches, by kernel (keyed by
    /// the metadata's address).
    triton_plans: HashMap<usize, Rc<TritonPlan<'p>>>,
    /// Lowered grids by kernel and the values of the parameters the grid
    /// reads (see [`GridMemo`]).
    grids: GridMemo,
    /// The graph's buffer declarations by name (a faster hash than the
    /// program's maps, looked up for every allocation and view).
    decls: HashMap<&'p str, &'p BufferKind>,
    /// Kernel definitions looked up so far, by name.
    kernels: HashMap<KernelName, &'p KernelDef>,
}

/// What every launch of one Triton kernel shares.
struct TritonPlan<'p> {
    /// [`TritonMeta::call_params`].
    params: Rc<[&'p str]>,
    /// The kwargs every launch starts from; `None` when the kernel's
    /// metadata is inconsistent (the general path reports why).
    kwargs: Option<KwargsPlan<'p>>,
    /// The parameters the grid reads, in the order it reads them; set by the
    /// first launch whose grid lowers.
    grid_params: std::cell::RefCell<Option<Rc<[String]>>>,
}

/// The kwargs of a Triton launch as a template: constants and config
/// constexprs filled in, each runtime parameter a slot.
struct KwargsPlan<'p> {
    template: IndexMap<String, Arg>,
    /// Per-launch work in signature order: (kwargs index, what to do).
    slots: Vec<(usize, Slot<'p>)>,
}

enum Slot<'p> {
    /// A runtime parameter: the argument bound to this name.
    Runtime(&'p str),
    /// An integer constant: an integer literal bound to this name must equal it.
    CheckInt(&'p str, i64),
}

/// Lowered grids: hash of (kernel key, parameter values) -> entries.
type GridMemo = HashMap<u64, Vec<(usize, Vec<Option<SymExpr>>, [Arg; 3])>>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum IndexKey {
    Int(i64),
    Str(String),
}

type Res<T> = Result<T, ErrorKind>;

impl<'p> GraphLowering<'p> {
    fn run(
        program: &'p Program,
        name: Option<&GraphName>,
        options: &'p Options,
        memo: &'p SubgraphMemo,
    ) -> Result<(fx::Graph, Vec<Symbol>), Error> {
        let gname = name.map(|n| n.to_string()).unwrap_or_else(|| "main".to_string());
        let ir = program.graph(name).ok_or_else(|| Error {
            graph: gname.clone(),
            line: None,
            kind: ErrorKind::Undefined {
                what: "subgraph",
                name: gname.clone(),
            },
        })?;
        let mut l = GraphLowering {
            program,
            memo,
            ir,
            name: gname,
            is_subgraph: name.is_some(),
            options,
            out: fx::Graph::new(),
            buffers: HashMap::default(),
            symbols: HashMap::default(),
            exprs: HashMap::default(),
            getitems: HashMap::default(),
            lifted: Vec::new(),
            line: None,
            triton_plans: HashMap::default(),
            grids: HashMap::default(),
            decls: ir.buffers.iter().map(|(n, d)| (n.as_str(), &d.kind)).collect(),
            kernels: HashMap::default(),
        };
        l.lower_all().map_err(|kind| Error {
            graph: l.name.clone(),
            line: l.line,
            kind,
        })?;
        Ok((l.out, l.lifted))
    }

    fn lower_all(&mut self) -> Res<()> {
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

    // ---- inputs -------------------------------------------------------------

    fn inputs(&mut self) -> Res<()> {
        let mut tensor_inputs = Vec::new();
        for input in &self.ir.inputs {
            match input {
                GraphInput::Tensor { name } => {
                    let layout = self.layout_of(name)?.clone();
                    let id = self.out.push(
                        name.as_str(),
                        Op::Placeholder(Placeholder::Tensor(layout.clone())),
                        Some(Val::Tensor(layout.clone())),
                    );
                    self.buffers.insert(name.clone(), id);
                    tensor_inputs.push((name.clone(), id, layout));
                }
                GraphInput::Symbol { symbol, .. } => {
                    let id = self.out.push(
                        symbol.as_str(),
                        Op::Placeholder(Placeholder::Symbol(symbol.clone())),
                        None,
                    );
                    self.out.bind_symbol(id, symbol.clone());
                    self.symbols.insert(symbol.clone(), Arg::Node(id));
                }
            }
        }
        // Constants are `self.<name>` attributes, created up front like FX's get_attr.
        if !self.is_subgraph {
            for name in self.program.constants.keys() {
                let layout = self.program.constants.get(name).cloned();
                let id = self.out.push(
                    name.as_str(),
                    Op::Constant { name: name.to_string() },
                    layout.map(Val::Tensor),
                );
                self.buffers.insert(name.clone(), id);
            }
        }
        // Bind symbols from input sizes, strides and offsets.
        for (name, id, layout) in &tensor_inputs {
            let entries = layout
                .size
                .iter()
                .enumerate()
                .map(|(d, e)| (TensorMethod::Size, d as i64, e))
                .chain(
                    layout
                        .stride
                        .iter()
                        .enumerate()
                        .map(|(d, e)| (TensorMethod::Stride, d as i64, e)),
                )
                .chain(std::iter::once((TensorMethod::StorageOffset, 0, &layout.offset)));
            for (method, dim, e) in entries {
                let unknown: Vec<Symbol> = e
                    .free_symbols()
                    .into_iter()
                    .filter(|s| !self.symbols.contains_key(s))
                    .collect();
                match unknown.as_slice() {
                    [] => {}
                    [s] => {
                        let read = self.read_dim(*id, method, dim);
                        let value = self.solve(e, s, read).map_err(|message| ErrorKind::Input {
                            input: name.clone(),
                            message,
                        })?;
                        if let Arg::Node(n) = value {
                            self.out.try_rename(n, s.as_str());
                            self.out.bind_symbol(n, s.clone());
                        }
                        self.symbols.insert(s.clone(), value);
                    }
                    many => {
                        return Err(ErrorKind::Input {
                            input: name.clone(),
                            message: format!(
                                "underdetermined input expression `{e}`: symbols {} are all unbound",
                                many.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                            ),
                        })
                    }
                }
            }
        }
        if self.options.assert_inputs {
            // Inputs the program already checks with its own `assert_size_stride` line are not checked twice.
            let checked: Vec<&BufName> = self
                .ir
                .lines
                .iter()
                .filter_map(|l| match l {
                    Line::AssertSizeStride { buffer, .. } => Some(buffer),
                    _ => None,
                })
                .collect();
            for (name, id, layout) in &tensor_inputs {
                if checked.iter().any(|b| b.as_str() == name.as_str()) {
                    continue;
                }
                let size = self.exprs_of(&layout.size)?;
                let stride = self.exprs_of(&layout.stride)?;
                self.out.push(
                    "assert_size_stride",
                    Op::AssertSizeStride {
                        tensor: *id,
                        size,
                        stride,
                        context: None,
                    },
                    None,
                );
            }
        }
        Ok(())
    }

    fn read_dim(&mut self, tensor: NodeId, method: TensorMethod, dim: i64) -> NodeId {
        match method {
            TensorMethod::Size => self.out.push("sym_size_int", Op::SymSize { tensor, dim }, None),
            TensorMethod::Stride => self.out.push("sym_stride_int", Op::SymStride { tensor, dim }, None),
            TensorMethod::StorageOffset => self
                .out
                .push("sym_storage_offset", Op::SymStorageOffset { tensor }, None),
        }
    }

    /// Solves `e == value` for `s`, the one unbound symbol of `e`, when `e` is
    /// `a*s + rest` with a non-zero integer `a` (the affine case Inductor's
    /// `try_solve` handles for sizes). Emits a divisibility check when `a != 1`.
    fn solve(&mut self, e: &SymExpr, s: &Symbol, value: NodeId) -> Result<Arg, String> {
        let (a, rest) = affine_in(e, s).ok_or_else(|| format!("cannot solve input expression `{e}` for `{s}`"))?;
        if a == 0 {
            return Err(format!("cannot solve input expression `{e}` for `{s}`"));
        }
        if a == 1 && rest == SymExpr::Int(0) {
            return Ok(Arg::Node(value));
        }
        let rest = self.expr(&rest).map_err(|k| k.to_string())?;
        let neg = self
            .sym(SymOp::Mul, vec![Arg::Int(-1), rest])
            .map_err(|k| k.to_string())?;
        let diff = self
            .sym(SymOp::Sum, vec![Arg::Node(value), neg])
            .map_err(|k| k.to_string())?;
        if a != 1 {
            let m = self
                .sym(SymOp::PyMod, vec![diff.clone(), Arg::Int(a)])
                .map_err(|k| k.to_string())?;
            let ok = self.sym(SymOp::Eq, vec![m, Arg::Int(0)]).map_err(|k| k.to_string())?;
            self.out.push(
                "_assert_scalar",
                Op::AssertScalar {
                    cond: ok,
                    message: format!("`{e}` is not divisible by {a} when solving for `{s}`"),
                },
                None,
            );
        }
        self.sym(SymOp::FloorDiv, vec![diff, Arg::Int(a)])
            .map_err(|k| k.to_string())
    }

    // ---- lines --------------------------------------------------------------

    fn lower_line(&mut self, line: &Line) -> Res<()> {
        match line {
            Line::Allocate { buffer } => {
                let layout = self.layout_of(buffer)?;
                let id = self.allocate(buffer.as_str(), layout)?;
                self.buffers.insert(buffer.clone(), id);
            }
            // A free whose storage a later `reuse` takes over keeps the name alive until then.
            Line::FreeIfNotReused { is_reused: true, .. } => {}
            Line::FreeIfNotReused { buffer, .. } | Line::Free { buffer } => {
                // FX frees are liveness, not ops: forget the name.
                if !self.is_output(buffer) {
                    self.buffers.remove(buffer);
                }
            }
            Line::Reuse { old, new, delete_old } => {
                let old_id = self.buffer(old)?;
                let new_layout = self.layout_of(new)?;
                let same = match self.out.node(old_id).val.as_ref() {
                    Some(Val::Tensor(l)) => {
                        l.size == new_layout.size
                            && l.stride == new_layout.stride
                            && l.offset == new_layout.offset
                            && l.dtype == new_layout.dtype
                    }
                    _ => false,
                };
                let id = if same {
                    old_id
                } else {
                    self.as_strided(new.as_str(), old_id, new_layout)?
                };
                self.buffers.insert(new.clone(), id);
                if *delete_old && !same && !self.is_output(old) {
                    self.buffers.remove(old);
                }
            }
            Line::Reinterpret { base, alias } => {
                let base_id = self.buffer(base)?;
                let layout = self.layout_of(alias)?;
                let base_dtype = match self.out.node(base_id).val.as_ref() {
                    Some(Val::Tensor(l)) => Some(l.dtype),
                    _ => None,
                };
                let id = match base_dtype {
                    Some(d) if d != layout.dtype => {
                        let view_name = format!("{alias}_view");
                        let mut view_layout = layout.clone();
                        view_layout.dtype = d;
                        let view = self.as_strided(&view_name, base_id, &view_layout)?;
                        self.out.push(
                            alias.as_str(),
                            Op::Extern {
                                target: "torch.ops.aten.view.dtype".into(),
                                args: vec![Arg::Node(view), Arg::DType(layout.dtype)],
                                kwargs: IndexMap::new(),
                            },
                            Some(Val::Tensor(layout.clone())),
                        )
                    }
                    _ => self.as_strided(alias.as_str(), base_id, layout)?,
                };
                self.buffers.insert(alias.clone(), id);
            }
            Line::KernelDefinition { kernel } => {
                if !self.program.kernels.contains_key(kernel) {
                    return Err(ErrorKind::Undefined {
                        what: "kernel",
                        name: kernel.to_string(),
                    });
                }
            }
            Line::KernelCall(call) => self.kernel_call(call)?,
            Line::SymbolicCallArg { symbol, expr } => {
                let v = self.expr(expr)?;
                if let Arg::Node(n) = v {
                    self.out.bind_symbol(n, symbol.clone());
                }
                self.symbols.insert(symbol.clone(), v);
            }
            Line::ExternKernelAlloc(call) => {
                let (args, kwargs) = self.call_args(&call.args, &call.kwargs)?;
                let (name, val) = match &call.result {
                    Some(r) => (r.to_string(), self.val_of(r)?),
                    None => (extern_node_name(&call.op), None),
                };
                let id = self.out.push(
                    &name,
                    Op::Extern {
                        target: call.op.clone(),
                        args,
                        kwargs,
                    },
                    val,
                );
                if let Some(r) = &call.result {
                    self.buffers.insert(r.clone(), id);
                }
            }
            Line::ExternKernelOut { call, out } => {
                let (args, mut kwargs) = self.call_args(&call.args, &call.kwargs)?;
                kwargs.insert("out".into(), Arg::Node(self.buffer(out)?));
                self.out.push(
                    &extern_node_name(&call.op),
                    Op::Extern {
                        target: call.op.clone(),
                        args,
                        kwargs,
                    },
                    None,
                );
            }
            Line::MultiOutput {
                result,
                source,
                indices,
            } => {
                let src = self.buffer(source)?;
                let val = self.val_of(result)?;
                if indices.is_empty() {
                    // An alias; a multi-output op that really returns one tensor gets its layout.
                    if matches!(self.out.node(src).val, Some(Val::Multi) | None) {
                        self.out.set_val(src, val);
                    }
                    self.buffers.insert(result.clone(), src);
                } else {
                    let mut cur = src;
                    for (i, index) in indices.iter().enumerate() {
                        let last = i + 1 == indices.len();
                        let key = match index {
                            MultiIndex::List(k) | MultiIndex::Tuple(k) => IndexKey::Int(*k),
                            MultiIndex::Dict(k) => IndexKey::Str(k.clone()),
                        };
                        cur = self.getitem(cur, key, if last { Some(result.as_str()) } else { None });
                        if last {
                            self.out.set_val(cur, val.clone());
                        } else if self.out.node(cur).val.is_none() {
                            self.out.set_val(cur, Some(Val::Multi));
                        }
                    }
                    self.buffers.insert(result.clone(), cur);
                }
            }
            Line::IndexPutFallback {
                target,
                indices,
                values,
                accumulate,
            } => {
                let t = self.buffer(target)?;
                let mut idx = Vec::new();
                for i in indices {
                    idx.push(match i {
                        Some(b) => Arg::Node(self.buffer(b)?),
                        None => Arg::None,
                    });
                }
                let v = self.buffer(values)?;
                self.out.push(
                    "index_put_",
                    Op::Extern {
                        target: "torch.ops.aten.index_put_.default".into(),
                        args: vec![Arg::Node(t), Arg::List(idx), Arg::Node(v), Arg::Bool(*accumulate)],
                        kwargs: IndexMap::new(),
                    },
                    None,
                );
            }
            Line::ScatterFallback(s) => {
                let t = self.buffer(&s.target)?;
                let index = self.buffer(&s.index)?;
                let src = self.arg(&s.src)?;
                let mut kwargs = IndexMap::new();
                if let Some(r) = &s.reduce {
                    kwargs.insert("reduce".to_string(), Arg::Str(r.clone()));
                }
                if let Some(b) = s.include_self {
                    kwargs.insert("include_self".to_string(), Arg::Bool(b));
                }
                self.out.push(
                    &extern_node_name(&s.op),
                    Op::Extern {
                        target: s.op.clone(),
                        args: vec![Arg::Node(t), Arg::Int(s.dim), Arg::Node(index), src],
                        kwargs,
                    },
                    None,
                );
            }
            Line::DynamicScalar {
                symbol,
                source,
                keypath,
                ..
            } => self.dynamic_scalar(symbol, source, keypath)?,
            Line::UnbackedSymbolDefs { source, bindings } => {
                if bindings.is_empty() {
                    return Ok(());
                }
                let root = self.buffer(source)?;
                for (symbol, path) in bindings {
                    if self.symbols.contains_key(symbol) {
                        continue;
                    }
                    let value = self.follow_path(root, path, symbol)?;
                    if let Arg::Node(n) = value {
                        self.out.try_rename(n, symbol.as_str());
                        self.out.bind_symbol(n, symbol.clone());
                    }
                    self.symbols.insert(symbol.clone(), value);
                }
            }
            Line::Conditional(c) => {
                let pred = match &c.predicate {
                    Predicate::Tensor(b) => Arg::Node(self.buffer(b)?),
                    Predicate::Expr(e) => self.expr(e)?,
                };
                let mut operands = Vec::new();
                for (i, b) in c.operands.iter().enumerate() {
                    operands.push(self.operand(&c.true_graph, i, b)?);
                }
                let (graphs, lifted) = self.subgraphs(&[&c.true_graph, &c.false_graph])?;
                for s in &lifted {
                    operands.push(self.symbol(s)?);
                }
                let [t, f] = self.subgraph_nodes(graphs)?;
                let val = self.val_of(&c.result)?;
                let id = self.out.push(
                    c.result.as_str(),
                    Op::Cond {
                        pred,
                        true_graph: t,
                        false_graph: f,
                        operands,
                    },
                    val,
                );
                self.buffers.insert(c.result.clone(), id);
            }
            Line::WhileLoop(w) => {
                let mut carried = Vec::new();
                for (i, b) in w.carried.iter().enumerate() {
                    carried.push(self.operand(&w.body_graph, i, b)?);
                }
                let mut additional = Vec::new();
                for (i, b) in w.additional.iter().enumerate() {
                    additional.push(self.operand(&w.body_graph, w.carried.len() + i, b)?);
                }
                let (graphs, lifted) = self.subgraphs(&[&w.cond_graph, &w.body_graph])?;
                for s in &lifted {
                    additional.push(self.symbol(s)?);
                }
                let [c, b] = self.subgraph_nodes(graphs)?;
                let val = self.val_of(&w.result)?;
                let id = self.out.push(
                    w.result.as_str(),
                    Op::WhileLoop {
                        cond_graph: c,
                        body_graph: b,
                        carried,
                        additional,
                    },
                    val,
                );
                self.buffers.insert(w.result.clone(), id);
            }
            Line::EnterDeviceContext { .. } | Line::ExitDeviceContext | Line::Comment { .. } => {}
            Line::AssertSizeStride {
                buffer,
                size,
                stride,
                context,
            } => {
                let t = self.buffer(buffer)?;
                let size = self.exprs_of(size)?;
                let stride = self.exprs_of(stride)?;
                self.out.push(
                    "assert_size_stride",
                    Op::AssertSizeStride {
                        tensor: t,
                        size,
                        stride,
                        context: context.clone(),
                    },
                    None,
                );
            }
            Line::AssertAlignment { buffer, alignment, .. } => {
                let t = self.buffer(buffer)?;
                self.out.push(
                    "assert_alignment",
                    Op::AssertAlignment {
                        tensor: t,
                        alignment: *alignment,
                    },
                    None,
                );
            }
            Line::RuntimeAssert { cond, message, .. } => {
                let c = self.expr(cond)?;
                self.out.push(
                    "_assert_scalar",
                    Op::AssertScalar {
                        cond: c,
                        message: message.clone(),
                    },
                    None,
                );
            }
            // Upstream's FX converter rejects symmetric-memory buffers; here they are an
            // explicit allocator call (the same one Inductor's Python wrapper uses), so
            // the graph stays complete and a backend without the allocator says so.
            Line::CommBufferAllocate {
                buffer,
                comm_kind,
                group,
            } => {
                let layout = self.layout_of(buffer)?.clone();
                let size = self.exprs_of(&layout.size)?;
                let stride = self.exprs_of(&layout.stride)?;
                let mut kwargs = IndexMap::new();
                kwargs.insert("dtype".to_string(), Arg::DType(layout.dtype));
                kwargs.insert("device".to_string(), Arg::Device(layout.device));
                kwargs.insert("group_name".to_string(), Arg::Str(group.clone()));
                kwargs.insert("comm_kind".to_string(), Arg::Str(comm_kind.clone()));
                let id = self.out.push(
                    buffer.as_str(),
                    Op::Extern {
                        target: COMM_ALLOCATOR.to_string(),
                        args: vec![Arg::List(size), Arg::List(stride)],
                        kwargs,
                    },
                    Some(Val::Tensor(layout)),
                );
                self.buffers.insert(buffer.clone(), id);
            }
            Line::CommBufferFree { buffer } => {
                if !self.is_output(buffer) {
                    self.buffers.remove(buffer);
                }
            }
        }
        Ok(())
    }

    fn allocate(&mut self, name: &str, layout: &Layout) -> Res<NodeId> {
        let needs_view = layout.alloc_numel.is_some() || layout.offset != SymExpr::Int(0);
        if !needs_view {
            let size = self.exprs_of(&layout.size)?;
            let stride = self.exprs_of(&layout.stride)?;
            return Ok(self.out.push(
                name,
                Op::EmptyStrided {
                    size,
                    stride,
                    dtype: layout.dtype,
                    device: layout.device.kind,
                },
                Some(Val::Tensor(layout.clone())),
            ));
        }
        // Padded or offset allocation: a flat storage, then the strided view.
        let numel = self.expr(&layout.storage_numel_expr())?;
        let flat = self.out.push(
            "empty_strided",
            Op::EmptyStrided {
                size: vec![numel],
                stride: vec![Arg::Int(1)],
                dtype: layout.dtype,
                device: layout.device.kind,
            },
            None,
        );
        self.as_strided(name, flat, layout)
    }

    fn as_strided(&mut self, name: &str, base: NodeId, layout: &Layout) -> Res<NodeId> {
        let size = self.exprs_of(&layout.size)?;
        let stride = self.exprs_of(&layout.stride)?;
        let offset = self.expr(&layout.offset)?;
        Ok(self.out.push(
            name,
            Op::AsStrided {
                base,
                size,
                stride,
                offset,
            },
            Some(Val::Tensor(layout.clone())),
        ))
    }

    fn getitem(&mut self, source: NodeId, key: IndexKey, name: Option<&str>) -> NodeId {
        if let Some(id) = self.getitems.get(&(source, key.clone())) {
            if let Some(n) = name {
                self.out.try_rename(*id, n);
            }
            return *id;
        }
        let index = match &key {
            IndexKey::Int(i) => Arg::Int(*i),
            IndexKey::Str(s) => Arg::Str(s.clone()),
        };
        let id = self
            .out
            .push(name.unwrap_or("getitem"), Op::GetItem { source, index }, None);
        self.getitems.insert((source, key), id);
        id
    }

    fn dynamic_scalar(&mut self, symbol: &Symbol, source: &BufName, keypath: &[KeyEntry]) -> Res<()> {
        let t = self.buffer(source)?;
        let value = match keypath {
            [] => {
                let id = self.out.push(
                    symbol.as_str(),
                    Op::Item {
                        tensor: t,
                        symbol: Some(symbol.clone()),
                        multiplier: 1,
                    },
                    None,
                );
                Arg::Node(id)
            }
            [KeyEntry::ConvertInt] => {
                let as_int = self.out.push(
                    "where",
                    Op::Extern {
                        target: "torch.ops.aten.where.Scalar".into(),
                        args: vec![Arg::Node(t), Arg::Int(1), Arg::Int(0)],
                        kwargs: IndexMap::new(),
                    },
                    self.int64_like(t),
                );
                Arg::Node(self.out.push(
                    symbol.as_str(),
                    Op::Item {
                        tensor: as_int,
                        symbol: Some(symbol.clone()),
                        multiplier: 1,
                    },
                    None,
                ))
            }
            [KeyEntry::DivideBy(d)] => {
                let raw = self.out.push(
                    &format!("{symbol}_undivided"),
                    Op::Item {
                        tensor: t,
                        symbol: Some(symbol.clone()),
                        multiplier: *d,
                    },
                    None,
                );
                let q = self.exact_div(Arg::Node(raw), *d, symbol)?;
                if let Arg::Node(n) = q {
                    self.out.try_rename(n, symbol.as_str());
                }
                q
            }
            other => {
                return Err(ErrorKind::KeyPath {
                    symbol: symbol.clone(),
                    message: format!(
                        "`item()` takes an empty key path, `.to_int()` or `//d`, not `{}`",
                        crate::ir::KeyPathText(other)
                    ),
                })
            }
        };
        if let Arg::Node(n) = value {
            self.out.bind_symbol(n, symbol.clone());
        }
        self.symbols.insert(symbol.clone(), value);
        Ok(())
    }

    /// `value // d` after checking at run time that `d` divides `value`.
    fn exact_div(&mut self, value: Arg, d: i64, symbol: &Symbol) -> Res<Arg> {
        if d == 0 {
            return Err(ErrorKind::KeyPath {
                symbol: symbol.clone(),
                message: "division by 0".into(),
            });
        }
        let m = self.sym(SymOp::PyMod, vec![value.clone(), Arg::Int(d)])?;
        let ok = self.sym(SymOp::Eq, vec![m, Arg::Int(0)])?;
        self.out.push(
            "_assert_scalar",
            Op::AssertScalar {
                cond: ok,
                message: format!("{symbol}: value is not a multiple of {d}"),
            },
            None,
        );
        self.sym(SymOp::FloorDiv, vec![value, Arg::Int(d)])
    }

    fn int64_like(&self, t: NodeId) -> Option<Val> {
        match &self.out.node(t).val {
            Some(Val::Tensor(l)) => {
                let mut l = l.clone();
                l.dtype = crate::ir::DType::Int64;
                Some(Val::Tensor(Layout::contiguous(
                    l.dtype,
                    l.device,
                    l.size.iter().cloned(),
                )))
            }
            _ => None,
        }
    }

    /// Follows a key path from an op's output. Each step consumes exactly the
    /// entries it uses: a `.size()`/`.stride()` with its index (two), a lone
    /// `.storage_offset()` (one), an index, a division, a conversion or an
    /// inner-tensor attribute (one each).
    fn follow_path(&mut self, root: NodeId, path: &[KeyEntry], symbol: &Symbol) -> Res<Arg> {
        let err = |message: String| ErrorKind::KeyPath {
            symbol: symbol.clone(),
            message,
        };
        let mut cur = Arg::Node(root);
        let mut i = 0;
        while i < path.len() {
            let node = |cur: &Arg| match cur {
                Arg::Node(n) => Ok(*n),
                _ => Err(err(format!(
                    "step {} `{}` applies to an integer",
                    i,
                    crate::ir::KeyPathText(&path[i..=i])
                ))),
            };
            match &path[i] {
                KeyEntry::CallMethod(m @ (TensorMethod::Size | TensorMethod::Stride)) => {
                    let dim = match path.get(i + 1) {
                        Some(KeyEntry::Index(d)) => *d,
                        _ => {
                            return Err(err(format!(
                                "`.{}()` must be followed by a dimension index",
                                m.as_str()
                            )))
                        }
                    };
                    let t = node(&cur)?;
                    cur = Arg::Node(self.read_dim(t, *m, dim));
                    i += 2;
                }
                KeyEntry::CallMethod(TensorMethod::StorageOffset) => {
                    let t = node(&cur)?;
                    cur = Arg::Node(self.read_dim(t, TensorMethod::StorageOffset, 0));
                    i += 1;
                }
                KeyEntry::Index(k) => {
                    let s = node(&cur)?;
                    cur = Arg::Node(self.getitem(s, IndexKey::Int(*k), None));
                    i += 1;
                }
                KeyEntry::DivideBy(d) => {
                    cur = self.exact_div(cur, *d, symbol)?;
                    i += 1;
                }
                KeyEntry::ConvertInt => {
                    cur = self.sym(SymOp::Ite, vec![cur, Arg::Int(1), Arg::Int(0)])?;
                    i += 1;
                }
                KeyEntry::InnerTensor(attr) => {
                    let s = node(&cur)?;
                    cur = Arg::Node(self.out.push(
                        attr,
                        Op::InnerTensor {
                            source: s,
                            attr: attr.clone(),
                        },
                        None,
                    ));
                    i += 1;
                }
            }
        }
        Ok(cur)
    }

    // ---- kernels ------------------------------------------------------------

    fn kernel_call(&mut self, call: &KernelCall) -> Res<()> {
        let def = match self.kernels.get(&call.kernel) {
            Some(def) => *def,
            None => {
                let def = self
                    .program
                    .kernels
                    .get(&call.kernel)
                    .ok_or_else(|| ErrorKind::Undefined {
                        what: "kernel",
                        name: call.kernel.to_string(),
                    })?;
                self.kernels.insert(call.kernel.clone(), def);
                def
            }
        };
        match &def.backend {
            KernelBackend::Triton(meta) => self.triton_call(call, meta),
            _ => {
                let mut args = Vec::new();
                let mut kwargs = IndexMap::new();
                for a in &call.args {
                    let v = self.arg(&a.value)?;
                    match &a.name {
                        Some(n) => {
                            if kwargs.insert(n.clone(), v).is_some() {
                                return Err(ErrorKind::KernelArgs {
                                    kernel: call.kernel.to_string(),
                                    message: format!("parameter `{n}` is given twice"),
                                });
                            }
                        }
                        None if !kwargs.is_empty() => {
                            return Err(ErrorKind::KernelArgs {
                                kernel: call.kernel.to_string(),
                                message: "positional argument after a named one".into(),
                            })
                        }
                        None => args.push(v),
                    }
                }
                self.out.push(
                    "call_kernel",
                    Op::KernelCall {
                        kernel: call.kernel.clone(),
                        args,
                        kwargs,
                    },
                    None,
                );
                Ok(())
            }
        }
    }

    fn triton_call(&mut self, call: &KernelCall, meta: &'p TritonMeta) -> Res<()> {
        let err = |message: String| ErrorKind::KernelArgs {
            kernel: call.kernel.to_string(),
            message,
        };
        let plan = self.triton_plan(meta);
        let params = &plan.params;
        let Some(bound) = bind_args(meta, params, &call.args) else {
            // The fast binder only says that binding fails; the kernel
            // metadata's binder says why.
            return Err(match meta.bind_args(&call.args) {
                Err(e) => err(e.to_string()),
                Ok(_) => err("arguments do not bind to the kernel's parameters".into()),
            });
        };
        let get = |name: &str| bound.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        // A named argument for a baked-in parameter must repeat the baked value
        // when both are literals (anything symbolic is reconciliation's to prove).
        for (name, value) in &bound {
            if params.contains(name) || !meta.is_baked(name) {
                continue;
            }
            match (meta.baked_value(name), value) {
                (Some(ConstValue::Int(c)), ArgValue::Expr(SymExpr::Int(v))) if c != *v => {
                    return Err(err(format!(
                        "named argument `{name}` passes {v} but the kernel is compiled with {name} = {c}"
                    )))
                }
                (Some(ConstValue::Bool(c)), ArgValue::Bool(v)) if c != *v => {
                    return Err(err(format!(
                        "named argument `{name}` passes {v} but the kernel is compiled with {name} = {c}"
                    )))
                }
                (None, _) => {
                    return Err(err(format!(
                        "named argument `{name}` is a constexpr without a value in `constants` or the config"
                    )))
                }
                _ => {}
            }
        }
        let kwargs = match &plan.kwargs {
            Some(kp) => match self.planned_kwargs(kp, &get)? {
                Some(kwargs) => kwargs,
                None => self.triton_kwargs(meta, &get, &err)?,
            },
            None => self.triton_kwargs(meta, &get, &err)?,
        };
        for extra in &meta.extra_launcher_args {
            let Some(given) = get(extra) else {
                return Err(err(format!("missing launcher argument `{extra}`")));
            };
            if !matches!(given, ArgValue::Expr(_)) {
                return Err(err(format!(
                    "launcher argument `{extra}` must be an integer, got {given:?}"
                )));
            }
        }
        // The expression each parameter stands for (for the grid): an extra
        // launcher argument, else a signature entry (an integer constant, a
        // config constexpr, or the expression passed), else a config kwarg.
        let param_expr = |n: &str| -> Option<Cow<'_, SymExpr>> {
            if meta.extra_launcher_args.iter().any(|x| x == n) {
                if let Some(ArgValue::Expr(e)) = get(n) {
                    return Some(Cow::Borrowed(e));
                }
            }
            let from_signature = match meta.signature.get(n) {
                Some(ty) => match meta.constants.get(n) {
                    Some(ConstValue::Int(v)) => Some(Cow::Owned(SymExpr::Int(*v))),
                    Some(_) => None,
                    None if *ty == crate::ir::SigType::Constexpr => {
                        meta.config.get(n).map(|v| Cow::Owned(SymExpr::Int(*v)))
                    }
                    None => match get(n) {
                        Some(ArgValue::Expr(e)) => Some(Cow::Borrowed(e)),
                        _ => None,
                    },
                },
                None => None,
            };
            from_signature.or_else(|| meta.config.get(n).map(|v| Cow::Owned(SymExpr::Int(*v))))
        };
        let key = meta as *const TritonMeta as usize;
        // A grid is a function of the parameter values it reads (in order):
        // the same values give the same lowered grid.
        let known = plan.grid_params.borrow().clone();
        let memo = known.as_ref().map(|names| {
            let values: Vec<Option<Cow<'_, SymExpr>>> = names.iter().map(|n| param_expr(n)).collect();
            let mut h = rustc_hash::FxHasher::default();
            key.hash(&mut h);
            values.hash(&mut h);
            (h.finish(), values)
        });
        if let Some((h, values)) = &memo {
            let hit = self.grids.get(h).and_then(|entries| {
                entries.iter().find(|(k, vs, _)| {
                    *k == key
                        && vs.len() == values.len()
                        && vs.iter().zip(values).all(|(a, b)| a.as_ref() == b.as_deref())
                })
            });
            if let Some((_, _, grid)) = hit {
                let grid = grid.clone();
                return self.push_triton(call, grid, kwargs);
            }
        }
        let read = std::cell::RefCell::new(Vec::new());
        let grid = meta
            .grid(&|n: &str| {
                read.borrow_mut().push(n.to_string());
                param_expr(n).map(Cow::into_owned)
            })
            .map_err(|e| err(e.to_string()))?;
        let lowered = [self.expr(&grid[0])?, self.expr(&grid[1])?, self.expr(&grid[2])?];
        // A lone symbol is looked up afresh each time (not hash-consed): not memoized.
        if !grid.iter().any(|e| matches!(e, SymExpr::Sym(_))) {
            let read = read.into_inner();
            match (&memo, &known) {
                (Some((h, values)), Some(names)) if **names == *read => {
                    let values = values.iter().map(|v| v.as_ref().map(|v| v.as_ref().clone())).collect();
                    self.grids.entry(*h).or_default().push((key, values, lowered.clone()));
                }
                (_, None) => *plan.grid_params.borrow_mut() = Some(read.into()),
                _ => {}
            }
        }
        self.push_triton(call, lowered, kwargs)
    }

    fn push_triton(&mut self, call: &KernelCall, grid: [Arg; 3], kwargs: IndexMap<String, Arg>) -> Res<()> {
        self.out.push(
            "triton_kernel_wrapper_mutation",
            Op::TritonKernel {
                kernel: call.kernel.clone(),
                grid,
                kwargs,
            },
            None,
        );
        Ok(())
    }

    /// The [`TritonPlan`] of a kernel, computed once per lowering.
    fn triton_plan(&mut self, meta: &'p TritonMeta) -> Rc<TritonPlan<'p>> {
        let key = meta as *const TritonMeta as usize;
        self.triton_plans
            .entry(key)
            .or_insert_with(|| {
                Rc::new(TritonPlan {
                    params: meta.call_params().into(),
                    kwargs: kwargs_plan(meta),
                    grid_params: std::cell::RefCell::new(None),
                })
            })
            .clone()
    }

    /// A launch's kwargs from the kernel's template; `None` when an argument
    /// is missing or conflicts (the general path reports it).
    fn planned_kwargs<'a>(
        &mut self,
        plan: &KwargsPlan<'p>,
        get: &dyn Fn(&str) -> Option<&'a ArgValue>,
    ) -> Res<Option<IndexMap<String, Arg>>> {
        let mut kwargs = plan.template.clone();
        for (i, slot) in &plan.slots {
            match slot {
                Slot::CheckInt(name, c) => {
                    if let Some(ArgValue::Expr(SymExpr::Int(v))) = get(name) {
                        if v != c {
                            return Ok(None);
                        }
                    }
                }
                Slot::Runtime(name) => {
                    let Some(given) = get(name) else {
                        return Ok(None);
                    };
                    let value = self.arg(given)?;
                    // The template has an entry for every slot.
                    if let Some((_, v)) = kwargs.get_index_mut(*i) {
                        *v = value;
                    }
                }
            }
        }
        Ok(Some(kwargs))
    }

    /// A launch's kwargs, checked entry by entry: every signature parameter
    /// (constants, config constexprs, arguments), then the other config keys.
    fn triton_kwargs<'a>(
        &mut self,
        meta: &'p TritonMeta,
        get: &dyn Fn(&str) -> Option<&'a ArgValue>,
        err: &dyn Fn(String) -> ErrorKind,
    ) -> Res<IndexMap<String, Arg>> {
        let mut kwargs: IndexMap<String, Arg> = IndexMap::with_capacity(meta.signature.len() + meta.config.len());
        for (name, ty) in &meta.signature {
            let value = if let Some(c) = meta.constants.get(name) {
                if let (Some(given), ConstValue::Int(cv)) = (get(name), c) {
                    if let ArgValue::Expr(SymExpr::Int(v)) = given {
                        if v != cv {
                            return Err(err(format!(
                                "argument `{name}` = {v} conflicts with its constant value {cv}"
                            )));
                        }
                    }
                }
                const_arg(c)
            } else if *ty == crate::ir::SigType::Constexpr {
                if let Some(v) = meta.config.get(name) {
                    Arg::Int(*v)
                } else {
                    return Err(err(format!(
                        "constexpr parameter `{name}` has no value in `constants` or the config"
                    )));
                }
            } else {
                let Some(given) = get(name) else {
                    return Err(err(format!("missing argument for parameter `{name}`")));
                };
                self.arg(given)?
            };
            kwargs.insert(name.clone(), value);
        }
        for (k, v) in &meta.config {
            if meta
                .signature
                .get(k)
                .is_some_and(|t| *t != crate::ir::SigType::Constexpr)
            {
                return Err(err(format!("config key `{k}` names a runtime parameter")));
            }
            if !kwargs.contains_key(k) {
                kwargs.insert(k.clone(), Arg::Int(*v));
            }
        }
        Ok(kwargs)
    }

    // ---- subgraphs ----------------------------------------------------------

    /// Lowers subgraphs run by one line; lifted symbols become trailing
    /// placeholders, the same list in every one of them.
    fn subgraphs(&mut self, names: &[&GraphName]) -> Res<(Vec<(String, fx::Graph)>, Vec<Symbol>)> {
        let mut lowered = Vec::new();
        let mut union: Vec<Symbol> = Vec::new();
        for n in names {
            if !self.program.subgraphs.contains_key(*n) {
                return Err(ErrorKind::Undefined {
                    what: "subgraph",
                    name: n.to_string(),
                });
            }
            let cached = self.memo.borrow().get(*n).cloned();
            let (g, lifted) = match cached {
                Some(hit) => hit,
                None => {
                    let lowered = GraphLowering::run(self.program, Some(n), self.options, self.memo)
                        .map_err(|e| ErrorKind::Unsupported(format!("in subgraph: {e}")))?;
                    self.memo.borrow_mut().insert((*n).clone(), lowered.clone());
                    lowered
                }
            };
            for s in lifted {
                if !union.contains(&s) {
                    union.push(s);
                }
            }
            lowered.push((n.to_string(), g));
        }
        for (_, g) in &mut lowered {
            normalize_lifted(g, &union);
        }
        Ok((lowered, union))
    }

    fn subgraph_nodes(&mut self, graphs: Vec<(String, fx::Graph)>) -> Res<[NodeId; 2]> {
        let mut ids = Vec::new();
        for (name, g) in graphs {
            let id = self.out.push(&name, Op::Subgraph { name: name.clone() }, None);
            self.out.subgraphs.insert(name, g);
            ids.push(id);
        }
        match ids.as_slice() {
            [a, b] => Ok([*a, *b]),
            _ => Err(ErrorKind::Unsupported(
                "conditionals and loops take exactly two subgraphs".into(),
            )),
        }
    }

    // ---- values -------------------------------------------------------------

    /// Operand `index` passed to subgraph `sub`: a symbol where the subgraph
    /// takes a symbol input (the validator checks the operand names a declared
    /// symbol; under `dynamic=True` Inductor passes sizes such as `s27`), else a
    /// buffer.
    fn operand(&mut self, sub: &GraphName, index: usize, b: &BufName) -> Res<Arg> {
        let takes_symbol = self
            .program
            .subgraphs
            .get(sub)
            .and_then(|g| g.inputs.get(index))
            .is_some_and(|i| matches!(i, GraphInput::Symbol { .. }));
        if takes_symbol {
            self.symbol(&Symbol::new(b.as_str()))
        } else {
            Ok(Arg::Node(self.buffer(b)?))
        }
    }

    fn is_output(&self, b: &BufName) -> bool {
        self.ir
            .outputs
            .iter()
            .any(|o| matches!(o, GraphOutput::Buffer(x) if x == b))
    }

    fn buffer(&self, b: &BufName) -> Res<NodeId> {
        self.buffers
            .get(b)
            .copied()
            .ok_or_else(|| ErrorKind::UnknownBuffer(b.clone()))
    }

    fn layout_of(&self, b: &BufName) -> Res<&'p Layout> {
        match self.decls.get(b.as_str()).copied() {
            Some(BufferKind::Tensor(l)) => Ok(l),
            _ => match self.program.constants.get(b) {
                Some(l) => Ok(l),
                None => Err(ErrorKind::Undefined {
                    what: "tensor buffer declaration",
                    name: b.to_string(),
                }),
            },
        }
    }

    fn val_of(&self, b: &BufName) -> Res<Option<Val>> {
        Ok(match self.decls.get(b.as_str()).copied() {
            Some(BufferKind::Tensor(l)) => Some(Val::Tensor(l.clone())),
            Some(BufferKind::Multi) => Some(Val::Multi),
            None => {
                return Err(ErrorKind::Undefined {
                    what: "buffer declaration",
                    name: b.to_string(),
                })
            }
        })
    }

    fn symbol(&mut self, s: &Symbol) -> Res<Arg> {
        if let Some(a) = self.symbols.get(s) {
            return Ok(a.clone());
        }
        if !self.is_subgraph {
            return Err(ErrorKind::UnboundSymbol(s.clone()));
        }
        // A subgraph reads a parent symbol: lift it into a trailing placeholder.
        let id = self
            .out
            .push(s.as_str(), Op::Placeholder(Placeholder::Symbol(s.clone())), None);
        self.out.bind_symbol(id, s.clone());
        self.lifted.push(s.clone());
        self.symbols.insert(s.clone(), Arg::Node(id));
        Ok(Arg::Node(id))
    }

    fn exprs_of(&mut self, es: &[SymExpr]) -> Res<Vec<Arg>> {
        es.iter().map(|e| self.expr(e)).collect()
    }

    /// A symbolic expression as an argument: literals stay literals, symbols
    /// give their node, anything else becomes arithmetic nodes, hash-consed
    /// (the same expression gives the same node).
    fn expr(&mut self, e: &SymExpr) -> Res<Arg> {
        match e {
            SymExpr::Int(v) => return Ok(Arg::Int(*v)),
            SymExpr::Bool(b) => return Ok(Arg::Bool(*b)),
            SymExpr::Sym(s) => return self.symbol(s),
            _ => {}
        }
        if let Some(a) = self.exprs.get(e) {
            return Ok(a.clone());
        }
        let a = match e {
            SymExpr::Add(ts) => {
                let args = self.exprs_of(ts)?;
                self.sym(SymOp::Sum, args)?
            }
            SymExpr::Mul(fs) => self.chain(SymOp::Mul, fs)?,
            SymExpr::Min(xs) => self.chain(SymOp::Min, xs)?,
            SymExpr::Max(xs) => self.chain(SymOp::Max, xs)?,
            SymExpr::And(xs) => self.chain(SymOp::And, xs)?,
            SymExpr::Or(xs) => self.chain(SymOp::Or, xs)?,
            SymExpr::FloorDiv(a, b) | SymExpr::CleanDiv(a, b) => self.binary(SymOp::FloorDiv, a, b)?,
            SymExpr::Mod(a, b) => self.binary(SymOp::CMod, a, b)?,
            SymExpr::PythonMod(a, b) => self.binary(SymOp::PyMod, a, b)?,
            SymExpr::ModularIndexing(x, d, m) => {
                let q = if **d == SymExpr::Int(1) {
                    self.expr(x)?
                } else {
                    self.binary(SymOp::FloorDiv, x, d)?
                };
                let m = self.expr(m)?;
                self.sym(SymOp::PyMod, vec![q, m])?
            }
            SymExpr::Pow(b, n) => {
                let b = self.expr(b)?;
                self.sym(SymOp::Pow, vec![b, Arg::Int(*n as i64)])?
            }
            SymExpr::Cmp(op, a, b) => {
                use crate::sym::CmpOp;
                let op = match op {
                    CmpOp::Eq => SymOp::Eq,
                    CmpOp::Ne => SymOp::Ne,
                    CmpOp::Lt => SymOp::Lt,
                    CmpOp::Le => SymOp::Le,
                    CmpOp::Gt => SymOp::Gt,
                    CmpOp::Ge => SymOp::Ge,
                };
                self.binary(op, a, b)?
            }
            SymExpr::Not(a) => {
                let a = self.expr(a)?;
                self.sym(SymOp::Not, vec![a])?
            }
            SymExpr::Int(_) | SymExpr::Bool(_) | SymExpr::Sym(_) => return Err(ErrorKind::Unsupported("atom".into())),
        };
        self.exprs.insert(e.clone(), a.clone());
        Ok(a)
    }

    fn binary(&mut self, op: SymOp, a: &SymExpr, b: &SymExpr) -> Res<Arg> {
        let a = self.expr(a)?;
        let b = self.expr(b)?;
        self.sym(op, vec![a, b])
    }

    fn chain(&mut self, op: SymOp, xs: &[SymExpr]) -> Res<Arg> {
        let mut it = xs.iter();
        let Some(first) = it.next() else {
            return Err(ErrorKind::Unsupported(format!("empty `{}`", op.node_name())));
        };
        let mut acc = self.expr(first)?;
        for x in it {
            let v = self.expr(x)?;
            acc = self.sym(op, vec![acc, v])?;
        }
        Ok(acc)
    }

    /// An arithmetic node, or its value when every operand is a literal.
    fn sym(&mut self, op: SymOp, args: Vec<Arg>) -> Res<Arg> {
        let literals: Option<Vec<fx::Scalar>> = args
            .iter()
            .map(|a| match a {
                Arg::Int(v) => Some(fx::Scalar::Int(*v)),
                Arg::Bool(b) => Some(fx::Scalar::Bool(*b)),
                _ => None,
            })
            .collect();
        if let Some(l) = literals {
            return match op.eval(&l) {
                Ok(fx::Scalar::Int(v)) => Ok(Arg::Int(v)),
                Ok(fx::Scalar::Bool(b)) => Ok(Arg::Bool(b)),
                Err(e) => Err(ErrorKind::Fold {
                    expr: op.node_name().into(),
                    message: e.to_string(),
                }),
            };
        }
        Ok(Arg::Node(self.out.push(op.node_name(), Op::Sym { op, args }, None)))
    }

    fn arg(&mut self, v: &ArgValue) -> Res<Arg> {
        Ok(match v {
            ArgValue::Buffer(b) => Arg::Node(self.buffer(b)?),
            ArgValue::Expr(e) => self.expr(e)?,
            ArgValue::Float(f) => Arg::Float(*f),
            ArgValue::Bool(b) => Arg::Bool(*b),
            ArgValue::None => Arg::None,
            ArgValue::Str(s) => Arg::Str(s.clone()),
            ArgValue::DType(d) => Arg::DType(*d),
            ArgValue::Device(d) => Arg::Device(*d),
            ArgValue::List(items) => Arg::List(items.iter().map(|i| self.arg(i)).collect::<Res<_>>()?),
        })
    }

    fn call_args(
        &mut self,
        args: &[ArgValue],
        kwargs: &IndexMap<String, ArgValue>,
    ) -> Res<(Vec<Arg>, IndexMap<String, Arg>)> {
        let a = args.iter().map(|x| self.arg(x)).collect::<Res<Vec<_>>>()?;
        let mut k = IndexMap::new();
        for (n, v) in kwargs {
            k.insert(n.clone(), self.arg(v)?);
        }
        Ok((a, k))
    }
}

/// Puts a subgraph's lifted-symbol placeholders after its own inputs, in
/// `union` order, adding those it did not need.
fn normalize_lifted(g: &mut fx::Graph, union: &[Symbol]) {
    let mut lifted_ids: Vec<NodeId> = Vec::new();
    for s in union {
        let existing = g
            .placeholders()
            .find(|(_, n)| n.name == s.as_str() && n.binds.contains(s))
            .map(|(id, _)| id);
        let id = match existing {
            Some(id) => id,
            None => {
                let id = g.push(s.as_str(), Op::Placeholder(Placeholder::Symbol(s.clone())), None);
                g.bind_symbol(id, s.clone());
                id
            }
        };
        lifted_ids.push(id);
    }
    let own: Vec<NodeId> = g
        .order()
        .iter()
        .copied()
        .filter(|id| matches!(g.node(*id).op, Op::Placeholder(_)) && !lifted_ids.contains(id))
        .collect();
    let rest: Vec<NodeId> = g
        .order()
        .iter()
        .copied()
        .filter(|id| !matches!(g.node(*id).op, Op::Placeholder(_)))
        .collect();
    let order: Vec<NodeId> = own.into_iter().chain(lifted_ids).chain(rest).collect();
    // A permutation of the existing order by construction.
    let _ = g.set_order(order);
}

/// The kwargs template of a Triton kernel: the same entries, in the same
/// order, as [`GraphLowering::triton_kwargs`] gives; `None` when that would
/// fail whatever the arguments.
fn kwargs_plan(meta: &TritonMeta) -> Option<KwargsPlan<'_>> {
    let mut template: IndexMap<String, Arg> = IndexMap::with_capacity(meta.signature.len() + meta.config.len());
    let mut slots = Vec::new();
    for (name, ty) in &meta.signature {
        let i = template.len();
        let value = if let Some(c) = meta.constants.get(name) {
            if let ConstValue::Int(cv) = c {
                slots.push((i, Slot::CheckInt(name.as_str(), *cv)));
            }
            const_arg(c)
        } else if *ty == crate::ir::SigType::Constexpr {
            Arg::Int(*meta.config.get(name)?)
        } else {
            slots.push((i, Slot::Runtime(name.as_str())));
            Arg::None
        };
        template.insert(name.clone(), value);
    }
    for (k, v) in &meta.config {
        if meta
            .signature
            .get(k)
            .is_some_and(|t| *t != crate::ir::SigType::Constexpr)
        {
            return None;
        }
        if !template.contains_key(k) {
            template.insert(k.clone(), Arg::Int(*v));
        }
    }
    Some(KwargsPlan { template, slots })
}

fn const_arg(c: &ConstValue) -> Arg {
    match c {
        ConstValue::None => Arg::None,
        ConstValue::Bool(b) => Arg::Bool(*b),
        ConstValue::Int(v) => Arg::Int(*v),
        ConstValue::Float(f) => Arg::Float(*f),
        ConstValue::Str(s) => Arg::Str(s.clone()),
    }
}

fn extern_node_name(op: &str) -> String {
    let s = op.strip_prefix("torch.ops.").unwrap_or(op);
    let s = s.strip_prefix("extern_kernels.").unwrap_or(s);
    let s = s.strip_prefix("aten.").unwrap_or(s);
    s.split('.')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or("extern")
        .to_string()
}

/// `a` and `rest` with `e == a*s + rest` and `s` not in `rest`.
fn affine_in(e: &SymExpr, s: &Symbol) -> Option<(i64, SymExpr)> {
    match e {
        SymExpr::Sym(x) if x == s => Some((1, SymExpr::Int(0))),
        SymExpr::Mul(fs) => {
            let mut coeff: i64 = 1;
            let mut seen = false;
            for f in fs {
                match f {
                    SymExpr::Int(v) => coeff = coeff.checked_mul(*v)?,
                    SymExpr::Sym(x) if x == s && !seen => seen = true,
                    other if !other.free_symbols().contains(s) => return None,
                    _ => return None,
                }
            }
            seen.then_some((coeff, SymExpr::Int(0)))
        }
        SymExpr::Add(ts) => {
            let mut a = 0i64;
            let mut rest = SymExpr::Int(0);
            for t in ts {
                if t.free_symbols().contains(s) {
                    let (c, r) = affine_in(t, s)?;
                    a = a.checked_add(c)?;
                    rest = SymExpr::add(rest, r);
                } else {
                    rest = SymExpr::add(rest, t.clone());
                }
            }
            Some((a, rest))
        }
        other if !other.free_symbols().contains(s) => Some((0, other.clone())),
        _ => None,
    }
}

/// Binds a Triton launch's arguments to parameter names like
/// [`TritonMeta::bind_args`] (`params` is its [`TritonMeta::call_params`]),
/// without allocating a name per argument. `None` when binding fails; the
/// caller asks [`TritonMeta::bind_args`] for the error.
fn bind_args<'a>(meta: &TritonMeta, params: &[&'a str], args: &'a [CallArg]) -> Option<Bound<'a>> {
    let mut bound = Bound::with_capacity(args.len());
    let mut positional = 0usize;
    let mut seen_named = false;
    for a in args {
        let name: &str = match &a.name {
            None if seen_named => return None,
            None => {
                let p = params.get(positional)?;
                positional += 1;
                p
            }
            Some(n) => {
                seen_named = true;
                if !(meta.signature.contains_key(n.as_str()) || meta.extra_launcher_args.iter().any(|x| x == n)) {
                    return None;
                }
                n
            }
        };
        if bound.iter().any(|(n, _)| *n == name) {
            return None;
        }
        bound.push((name, &a.value));
    }
    Some(bound)
}

/// Arguments of one launch by parameter name, in argument order.
type Bound<'a> = Vec<(&'a str, &'a ArgValue)>;
