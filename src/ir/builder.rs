//! Building programs line by line from Rust.

use super::kernel::{KernelBackend, KernelDef};
use super::line::{
    ArgValue, CallArg, Conditional, ExternCall, KernelCall, KeyEntry, KeyPath, Line, MultiIndex, MultiOutput,
    Predicate, TensorMethod, WhileLoop,
};
use super::program::{BufferDecl, BufferKind, GraphInput, GraphOutput, Program, SymbolDecl, SymbolKind, ValueRange};
use super::types::{BufName, Device, GraphName, KernelName, Layout};
use crate::sym::{SymExpr, Symbol};
use indexmap::IndexMap;

/// Builds a [`Program`]: declare symbols and kernels on the builder, then write
/// the main graph (and any subgraphs) through [`GraphBuilder`]s.
///
/// The builder records what you say; [`crate::ir::validate`] checks it.
///
/// ```
/// use wrapir::ir::{ProgramBuilder, Layout, DType, Device, TritonMeta, GridType, SigType, ArgValue};
/// use wrapir::sym::SymExpr;
///
/// let mut p = ProgramBuilder::new();
/// let s0 = p.backed_symbol("s0", Some(8));
/// let mut sig = indexmap::IndexMap::new();
/// sig.insert("in_ptr0".to_string(), SigType::Pointer(DType::Float32));
/// sig.insert("out_ptr0".to_string(), SigType::Pointer(DType::Float32));
/// sig.insert("xnumel".to_string(), "i32".parse().unwrap());
/// sig.insert("XBLOCK".to_string(), SigType::Constexpr);
/// let config = [("XBLOCK".to_string(), 128)].into_iter().collect();
/// let add = p.triton_kernel("triton_poi_fused_add_0", "# triton source", TritonMeta::new(sig, config, GridType::Grid1D));
///
/// let layout = Layout::contiguous(DType::Float32, Device::cuda(0), [SymExpr::Sym(s0.clone())]);
/// let mut g = p.main();
/// let x = g.tensor_input("arg0_1", layout.clone());
/// g.define_kernel(&add);
/// let buf0 = g.allocate("buf0", layout);
/// g.call_kernel(&add, [ArgValue::Buffer(x.clone()), ArgValue::Buffer(buf0.clone()), ArgValue::Expr(SymExpr::Sym(s0))]);
/// g.free(&x);
/// g.output(&buf0);
/// g.finish();
///
/// let program = p.finish();
/// let info = wrapir::ir::validate(&program).expect("valid program");
/// let python = wrapir::lower::python::write_string(&info, &Default::default()).unwrap();
/// assert!(python.contains("triton_poi_fused_add_0.run(arg0_1, buf0, s0, stream=stream0)"));
/// ```
#[derive(Debug, Default)]
pub struct ProgramBuilder {
    program: Program,
}

impl ProgramBuilder {
    /// An empty program.
    pub fn new() -> Self {
        ProgramBuilder {
            program: Program::new(),
        }
    }

    /// Declares a symbol.
    pub fn symbol(&mut self, name: &str, kind: SymbolKind, range: ValueRange, hint: Option<i64>) -> Symbol {
        let sym = Symbol::new(name);
        self.program
            .symbols
            .insert(sym.clone(), SymbolDecl { kind, range, hint });
        sym
    }

    /// Declares a backed size symbol (`s0`), non-negative.
    pub fn backed_symbol(&mut self, name: &str, hint: Option<i64>) -> Symbol {
        self.symbol(name, SymbolKind::Backed, ValueRange::new(Some(0), None), hint)
    }

    /// Declares an unbacked symbol (`u0`) with its value range.
    pub fn unbacked_symbol(&mut self, name: &str, lo: Option<i64>, hi: Option<i64>) -> Symbol {
        self.symbol(name, SymbolKind::Unbacked, ValueRange::new(lo, hi), None)
    }

    /// Declares a precomputed symbol (`ps0`, `ks0`, `<kernel>_xnumel`).
    pub fn precomputed_symbol(&mut self, name: &str) -> Symbol {
        self.symbol(name, SymbolKind::Precomputed, ValueRange::default(), None)
    }

    /// Declares a constant tensor.
    pub fn constant(&mut self, name: &str, layout: Layout) -> BufName {
        let n = BufName::new(name);
        self.program.constants.insert(n.clone(), layout);
        n
    }

    /// Declares a kernel of any backend.
    pub fn kernel(&mut self, name: &str, backend: KernelBackend, source: &str) -> KernelName {
        let k = KernelName::new(name);
        self.program.kernels.insert(
            k.clone(),
            KernelDef {
                name: k.clone(),
                backend,
                source: source.to_string(),
                comments: vec![],
            },
        );
        k
    }

    /// Declares a Triton kernel.
    pub fn triton_kernel(&mut self, name: &str, source: &str, meta: super::kernel::TritonMeta) -> KernelName {
        self.kernel(name, KernelBackend::Triton(meta), source)
    }

    /// Starts writing the main graph.
    pub fn main(&mut self) -> GraphBuilder<'_> {
        GraphBuilder {
            program: &mut self.program,
            graph: None,
            lines: Vec::new(),
            pending: Default::default(),
        }
    }

    /// Starts writing a subgraph.
    pub fn subgraph(&mut self, name: &str) -> GraphBuilder<'_> {
        let g = GraphName::new(name);
        self.program.subgraphs.entry(g.clone()).or_default();
        GraphBuilder {
            program: &mut self.program,
            graph: Some(g),
            lines: Vec::new(),
            pending: Default::default(),
        }
    }

    /// The program built so far.
    pub fn finish(self) -> Program {
        self.program
    }
}

/// Writes one graph's inputs, buffers, lines and outputs.
#[derive(Debug)]
pub struct GraphBuilder<'p> {
    program: &'p mut Program,
    graph: Option<GraphName>,
    lines: Vec<Line>,
    pending: PendingGraph,
}

#[derive(Debug, Default)]
struct PendingGraph {
    inputs: Vec<GraphInput>,
    buffers: IndexMap<BufName, BufferDecl>,
    outputs: Vec<GraphOutput>,
}

impl GraphBuilder<'_> {
    fn declare(&mut self, name: &str, kind: BufferKind) -> BufName {
        let n = BufName::new(name);
        self.pending.buffers.insert(n.clone(), BufferDecl { kind });
        n
    }

    /// Declares a tensor buffer without a line (for views created by other means).
    pub fn declare_tensor(&mut self, name: &str, layout: Layout) -> BufName {
        self.declare(name, BufferKind::Tensor(layout))
    }

    /// Declares a multi-output value name.
    pub fn declare_multi(&mut self, name: &str) -> BufName {
        self.declare(name, BufferKind::Multi)
    }

    /// Adds a tensor input.
    pub fn tensor_input(&mut self, name: &str, layout: Layout) -> BufName {
        let n = self.declare_tensor(name, layout);
        self.pending.inputs.push(GraphInput::Tensor { name: n.clone() });
        n
    }

    /// Adds a symbolic integer input.
    pub fn symbol_input(&mut self, name: &str, symbol: &Symbol) {
        self.pending.inputs.push(GraphInput::Symbol {
            name: BufName::new(name),
            symbol: symbol.clone(),
        });
    }

    /// Appends any line.
    pub fn line(&mut self, line: Line) -> &mut Self {
        self.lines.push(line);
        self
    }

    /// `KernelDefinition`.
    pub fn define_kernel(&mut self, kernel: &KernelName) {
        self.lines.push(Line::KernelDefinition { kernel: kernel.clone() });
    }

    /// Declares and allocates a tensor buffer.
    pub fn allocate(&mut self, name: &str, layout: Layout) -> BufName {
        let n = self.declare_tensor(name, layout);
        self.lines.push(Line::Allocate { buffer: n.clone() });
        n
    }

    /// `Free` (graph inputs).
    pub fn free(&mut self, buffer: &BufName) {
        self.lines.push(Line::Free { buffer: buffer.clone() });
    }

    /// `FreeIfNotReused` (intermediates).
    pub fn free_if_not_reused(&mut self, buffer: &BufName) {
        self.lines.push(Line::FreeIfNotReused {
            buffer: buffer.clone(),
            is_reused: false,
        });
    }

    /// Declares `new` and makes it take over `old`'s storage.
    pub fn reuse(&mut self, old: &BufName, new: &str, layout: Layout) -> BufName {
        let n = self.declare_tensor(new, layout);
        self.lines.push(Line::Reuse {
            old: old.clone(),
            new: n.clone(),
            delete_old: true,
        });
        n
    }

    /// Declares `alias` as a view of `base`.
    pub fn reinterpret(&mut self, base: &BufName, alias: &str, layout: Layout) -> BufName {
        let n = self.declare_tensor(alias, layout);
        self.lines.push(Line::Reinterpret {
            base: base.clone(),
            alias: n.clone(),
        });
        n
    }

    /// Calls a kernel with positional arguments on `cuda:0`.
    pub fn call_kernel(&mut self, kernel: &KernelName, args: impl IntoIterator<Item = ArgValue>) {
        self.lines.push(Line::KernelCall(KernelCall {
            kernel: kernel.clone(),
            args: args.into_iter().map(CallArg::positional).collect(),
            device: Some(Device::cuda(0)),
        }));
    }

    /// `SymbolicCallArg`.
    pub fn let_symbol(&mut self, symbol: &Symbol, expr: SymExpr) {
        self.lines.push(Line::SymbolicCallArg {
            symbol: symbol.clone(),
            expr,
        });
    }

    /// An extern op producing a tensor result with a declared layout.
    pub fn extern_alloc(&mut self, result: &str, layout: Layout, op: &str, args: Vec<ArgValue>) -> BufName {
        let n = self.declare_tensor(result, layout);
        self.push_extern_alloc(n, op, args)
    }

    /// An extern op producing a multi-output value.
    pub fn extern_alloc_multi(&mut self, result: &str, op: &str, args: Vec<ArgValue>) -> BufName {
        let n = self.declare_multi(result);
        self.push_extern_alloc(n, op, args)
    }

    /// The extern op `op(args)` allocating the declared `result`; returns it.
    fn push_extern_alloc(&mut self, result: BufName, op: &str, args: Vec<ArgValue>) -> BufName {
        self.lines.push(Line::ExternKernelAlloc(ExternCall {
            result: Some(result.clone()),
            op: op.to_string(),
            args,
            kwargs: IndexMap::new(),
        }));
        result
    }

    /// An `out=` extern op.
    pub fn extern_out(&mut self, out: &BufName, op: &str, args: Vec<ArgValue>, kwargs: IndexMap<String, ArgValue>) {
        self.lines.push(Line::ExternKernelOut {
            call: ExternCall {
                result: None,
                op: op.to_string(),
                args,
                kwargs,
            },
            out: out.clone(),
        });
    }

    /// Extracts an element of a multi-output value into a declared tensor.
    pub fn multi_output(&mut self, result: &str, layout: Layout, source: &BufName, indices: &[MultiIndex]) -> BufName {
        let n = self.declare_tensor(result, layout);
        self.lines.push(Line::MultiOutput(MultiOutput {
            result: n.clone(),
            source: source.clone(),
            indices: indices.iter().cloned().collect(),
        }));
        n
    }

    /// A `torch.cond` line: declares the multi-output `result` and runs
    /// `branches` (true graph, false graph) on `operands` by `predicate`.
    pub fn conditional(
        &mut self,
        result: &str,
        predicate: Predicate,
        (true_graph, false_graph): (&str, &str),
        operands: &[BufName],
    ) -> BufName {
        let n = self.declare_multi(result);
        self.lines.push(Line::Conditional(Conditional {
            result: n.clone(),
            predicate,
            true_graph: GraphName::new(true_graph),
            false_graph: GraphName::new(false_graph),
            operands: operands.to_vec(),
        }));
        n
    }

    /// A `torch.while_loop` line: declares the multi-output `result` and runs
    /// `graphs` (cond graph, body graph) over `carried`, passing `additional`
    /// unchanged.
    pub fn while_loop(
        &mut self,
        result: &str,
        (cond_graph, body_graph): (&str, &str),
        carried: &[BufName],
        additional: &[BufName],
    ) -> BufName {
        let n = self.declare_multi(result);
        self.lines.push(Line::WhileLoop(WhileLoop {
            result: n.clone(),
            cond_graph: GraphName::new(cond_graph),
            body_graph: GraphName::new(body_graph),
            carried: carried.to_vec(),
            additional: additional.to_vec(),
        }));
        n
    }

    /// `UnbackedSymbolDefs` for one symbol.
    pub fn bind_unbacked(&mut self, source: &BufName, symbol: &Symbol, path: KeyPath) {
        let mut bindings = IndexMap::new();
        bindings.insert(symbol.clone(), path);
        self.lines.push(Line::UnbackedSymbolDefs {
            source: source.clone(),
            bindings,
        });
    }

    /// `UnbackedSymbolDefs` binding `symbol` to `source.size()[dim]` (what
    /// `nonzero` and other data-dependent ops bind).
    pub fn bind_size(&mut self, source: &BufName, symbol: &Symbol, dim: i64) {
        let path = [KeyEntry::CallMethod(TensorMethod::Size), KeyEntry::Index(dim)];
        self.bind_unbacked(source, symbol, path.into_iter().collect());
    }

    /// `RuntimeAssert`.
    pub fn runtime_assert(&mut self, cond: SymExpr, message: &str) {
        self.lines.push(Line::RuntimeAssert {
            cond,
            message: message.to_string(),
            node: None,
        });
    }

    /// `Comment`.
    pub fn comment(&mut self, text: &str) {
        self.lines.push(Line::Comment { text: text.to_string() });
    }

    /// Returns a buffer.
    pub fn output(&mut self, buffer: &BufName) {
        self.pending.outputs.push(GraphOutput::Buffer(buffer.clone()));
    }

    /// Returns an expression.
    pub fn output_expr(&mut self, expr: SymExpr) {
        self.pending.outputs.push(GraphOutput::Expr(expr));
    }

    /// Stores the graph in the program.
    pub fn finish(self) {
        let GraphBuilder {
            program,
            graph,
            lines,
            pending,
        } = self;
        let target = match graph {
            None => &mut program.main,
            Some(g) => program.subgraphs.entry(g).or_default(),
        };
        target.inputs.extend(pending.inputs);
        target.buffers.extend(pending.buffers);
        target.lines.extend(lines);
        target.outputs.extend(pending.outputs);
    }
}
