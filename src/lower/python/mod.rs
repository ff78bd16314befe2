//! Python lowering: the module Inductor 2.11's Python wrapper prints.
//!
//! The output has the shape of Inductor's `PythonWrapperCodegen` module:
//!
//! 1. the import block and the helper aliases (`empty_strided_cuda = ...`), plus
//!    `import triton` & co. when the program defines Triton kernels;
//! 2. constants (`name = None  # ...`), kernel definitions in program order
//!    (`async_compile.triton(...)`, `async_compile.halide(...)`,
//!    `async_compile.cpp_pybinding(...)`, `async_compile.cuda(...)`), with the
//!    functions of subgraphs (`def true_graph_0(args):`) placed where the
//!    conditional or loop that runs them is reached;
//! 3. `async_compile.wait(globals())`, then `call` (inside 2.11's `Runner` class
//!    or as a plain function, see [`CallForm`]);
//! 4. optionally the benchmark harness (`get_args`, `benchmark_compiled_module`,
//!    `if __name__ == "__main__":`).
//!
//! Where Inductor has known bugs this lowering does not copy them: an unbacked
//! symbol bound through a divide-by key path is divided with a run-time
//! divisibility check instead of the unchecked `__floordiv__`.
//!
//! While loops are printed as Inductor 2.11's `codegen_while_loop` prints them
//! (`buf0 = [None] * n`, the initial values, the condition before the loop,
//! `.clone()`s of the carried inputs when it is false from the start,
//! `while should_loop:` with the body and the condition again).
//!
//! Forms Inductor 2.11 does not print and this module defines:
//!
//! * **CUDA C kernels**: `name = async_compile.cuda(r'''<source>''', 'so', aot_compile=False)`,
//!   called as `name.name(c_void_p(buf0.data_ptr()), 16, c_void_p(stream0))` (tensor
//!   arguments as data pointers, the form of Inductor's CUDA template kernels).
//! * **Communication buffers**: `buf0 = empty_strided_p2p((size), (stride), dtype,
//!   torch.device("cuda:0"), group_name="g", alloc_id=N)`, where `N` is a stable
//!   64-bit hash of the graph and buffer names (Inductor uses a random id).

mod body;
mod kernels;

use crate::ir::{
    BufName, BufferKind, Device, DeviceType, Graph, GraphInput, GraphName, KernelBackend, KernelName, Line, LineAt,
    Program, ProgramInfo,
};
use crate::lower::launches::PrintedLaunch;
use crate::sym::{EvalError, SymExpr, Symbol};
use indexmap::{IndexMap, IndexSet};
use std::cell::RefCell;
use std::fmt;

/// How `call` is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallForm {
    /// Inductor 2.11: `class Runner:` with `def call(self, args):`, then
    /// `runner = Runner(partitions=[])` / `call = runner.call`.
    #[default]
    Runner,
    /// A plain module-level `def call(args):` (Inductor before graph partitions).
    Function,
}

/// When `streamN = get_raw_stream(N)` is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StreamBinding {
    /// Before every call that needs the stream (what Inductor 2.11 prints).
    #[default]
    EveryCall,
    /// Once per device and graph, before the first call that needs it.
    OncePerGraph,
}

/// Options of the Python lowering. The defaults print what Inductor 2.11 prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The `call` form.
    pub call_form: CallForm,
    /// Write `get_args`, `benchmark_compiled_module` and the `__main__` block
    /// (inputs from `rand_strided` with the input layouts at the symbols' hints).
    pub benchmark_harness: bool,
    /// When stream handles are fetched.
    pub stream_binding: StreamBinding,
    /// Write `assert_size_stride` after the symbol binds for every tensor input
    /// of every graph that no `AssertSizeStride` line of that graph checks
    /// (skipped for inputs with a literal zero dimension, as Inductor does). They
    /// are merged into the graph's leading `AssertSizeStride` lines on inputs, so
    /// all input checks come out in input order.
    pub input_size_asserts: bool,
    /// The AOT graph name for the first line (`# AOT ID: ['0_inference']`); no
    /// such line when `None`.
    pub aot_id: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            call_form: CallForm::Runner,
            benchmark_harness: true,
            stream_binding: StreamBinding::EveryCall,
            input_size_asserts: true,
            aot_id: None,
        }
    }
}

pub use crate::lower::{Error, ErrorKind};

/// Writes validated programs as Inductor-style Python wrapper code into a
/// [`fmt::Write`] sink.
pub type Writer<W> = super::Writer<W, Options>;

impl super::TextLowering for Options {
    type Error = Error;

    /// Lowers `info`'s program and writes the module. Nothing is written when
    /// lowering fails.
    fn write_to<W: fmt::Write>(&self, info: &ProgramInfo<'_>, out: &mut W) -> Result<(), Error> {
        let text = Lowering::new(info, self).module()?;
        out.write_str(&text)?;
        Ok(())
    }

    /// The module, and the `kernel.run(...)` arguments, recorded from the
    /// values the call is printed from (the launcher computes the grid, so
    /// none is recorded).
    fn write_recording_launches_to<W: fmt::Write>(
        &self,
        info: &ProgramInfo<'_>,
        out: &mut W,
    ) -> Result<Vec<PrintedLaunch>, Error> {
        let mut lowering = Lowering::new(info, self);
        lowering.launches = Some(RefCell::new(Vec::new()));
        let (text, launches) = lowering.module_and_launches()?;
        out.write_str(&text)?;
        Ok(launches)
    }
}

/// Lowers a validated program to a Python module.
pub fn write_string(info: &ProgramInfo<'_>, options: &Options) -> Result<String, Error> {
    Lowering::new(info, options).module()
}

/// [`write_string`], and every Triton launch as printed
/// ([`super::Writer::write_recording_launches`]).
pub fn write_string_with_launches(
    info: &ProgramInfo<'_>,
    options: &Options,
) -> Result<(String, Vec<PrintedLaunch>), Error> {
    super::write_string_with_launches(info, options)
}

/// Text with indentation (four spaces per level).
#[derive(Default)]
struct Code {
    text: String,
    indent: usize,
}

impl Code {
    fn line(&mut self, s: &str) {
        if !s.is_empty() {
            for _ in 0..self.indent {
                self.text.push_str("    ");
            }
            self.text.push_str(s);
        }
        self.text.push('\n');
    }

    fn blank(&mut self) {
        self.text.push('\n');
    }
}

/// Shared state of one lowering.
struct Lowering<'a> {
    /// What validation established (kernel definitions, table lookups).
    info: &'a ProgramInfo<'a>,
    program: &'a Program,
    options: &'a Options,
    /// The GPU device type guards and stream imports are written for.
    gpu: DeviceType,
    /// Kernels already written in the header.
    defined: IndexSet<KernelName>,
    /// Subgraphs already written (or being written).
    graphs_written: IndexSet<GraphName>,
    /// Device type of each kernel's first call.
    kernel_device: IndexMap<KernelName, DeviceType>,
    halide_import_written: bool,
    /// Whether any graph has a grouped size/stride assert, a dtype assert
    /// (their helpers are imported only then, as Inductor 2.14 / 2.15 do).
    uses_grouped_asserts: bool,
    uses_metadata_asserts: bool,
    /// Whether a device guard names user streams, and whether a memory-pool
    /// scope exists (their lookups are imported only then, as Inductor does).
    uses_user_streams: bool,
    uses_mem_pools: bool,
    /// Triton launches as printed, when recording (graph bodies hold a shared
    /// reference to the lowering, hence the cell).
    launches: Option<RefCell<Vec<PrintedLaunch>>>,
}

impl<'a> Lowering<'a> {
    fn new(info: &'a ProgramInfo<'a>, options: &'a Options) -> Self {
        let program = info.program();
        let mut kernel_device = IndexMap::new();
        let mut gpu = None;
        let (mut uses_grouped_asserts, mut uses_metadata_asserts) = (false, false);
        let (mut uses_user_streams, mut uses_mem_pools) = (false, false);
        for graph in std::iter::once(&program.main).chain(program.subgraphs.values()) {
            for line in &graph.lines {
                match line {
                    Line::KernelCall(call) => {
                        if let Some(d) = call.device {
                            kernel_device.entry(call.kernel.clone()).or_insert(d.kind);
                        }
                    }
                    Line::AssertSizeStrideGrouped(_) => uses_grouped_asserts = true,
                    Line::AssertSizeStride(a) if a.dtype.is_some() => uses_metadata_asserts = true,
                    Line::EnterDeviceContext {
                        streams: Some(streams), ..
                    } if !streams.user_objects.is_empty() => uses_user_streams = true,
                    Line::EnterScope(crate::ir::Scope::MemPool { .. }) => uses_mem_pools = true,
                    _ => {}
                }
            }
            for decl in graph.buffers.values() {
                if let BufferKind::Tensor(l) = &decl.kind {
                    if gpu.is_none() && is_gpu(l.device) {
                        gpu = Some(l.device.kind);
                    }
                }
            }
        }
        for (_, kind) in &kernel_device {
            if gpu.is_none() && matches!(kind, DeviceType::Cuda | DeviceType::Xpu | DeviceType::Mtia) {
                gpu = Some(*kind);
            }
        }
        Lowering {
            info,
            program,
            options,
            gpu: gpu.unwrap_or(DeviceType::Cuda),
            defined: IndexSet::new(),
            graphs_written: IndexSet::new(),
            kernel_device,
            halide_import_written: false,
            uses_grouped_asserts,
            uses_metadata_asserts,
            uses_user_streams,
            uses_mem_pools,
            launches: None,
        }
    }

    /// [`Lowering::module`], and the launches recorded while writing it.
    fn module_and_launches(self) -> Result<(String, Vec<PrintedLaunch>), Error> {
        let (text, launches) = self.module_inner()?;
        Ok((text, launches.unwrap_or_default()))
    }

    fn module(self) -> Result<String, Error> {
        self.module_inner().map(|(text, _)| text)
    }

    fn module_inner(mut self) -> Result<(String, Option<Vec<PrintedLaunch>>), Error> {
        let mut code = Code::default();
        self.imports(&mut code);
        self.aliases(&mut code);
        self.constants(&mut code);
        self.definitions(&mut code, None, &self.program.main)?;
        // Subgraphs no conditional or loop reaches are still defined, in table order.
        for (name, graph) in &self.program.subgraphs {
            if !self.graphs_written.contains(name) {
                self.subgraph_function(&mut code, name, graph)?;
            }
        }
        code.blank();
        code.blank();
        code.line("async_compile.wait(globals())");
        code.line("del async_compile");
        code.blank();
        match self.options.call_form {
            CallForm::Runner => {
                for l in [
                    "class Runner:",
                    "    def __init__(self, partitions):",
                    "        self.partitions = partitions",
                    "",
                    "    def recursively_apply_fns(self, fns):",
                    "        new_callables = []",
                    "        for fn, c in zip(fns, self.partitions):",
                    "            new_callables.append(fn(c))",
                    "        self.partitions = new_callables",
                    "",
                    "    def call(self, args):",
                ] {
                    code.line(l);
                }
                code.indent = 2;
                self.graph_function_body(&mut code, None, &self.program.main)?;
                code.indent = 0;
                code.blank();
                code.line("runner = Runner(partitions=[])");
                code.line("call = runner.call");
                code.line("recursively_apply_fns = runner.recursively_apply_fns");
            }
            CallForm::Function => {
                code.line("def call(args):");
                code.indent = 1;
                self.graph_function_body(&mut code, None, &self.program.main)?;
                code.indent = 0;
            }
        }
        if self.options.benchmark_harness {
            self.harness(&mut code)?;
        }
        Ok((code.text, self.launches.map(RefCell::into_inner)))
    }

    fn imports(&self, code: &mut Code) {
        if let Some(id) = &self.options.aot_id {
            code.line(&format!("# AOT ID: [{}]", crate::ir::PyStr(id)));
        }
        for l in [
            "from ctypes import c_void_p, c_long, c_int",
            "import torch",
            "import math",
            "import random",
            "import os",
            "import tempfile",
            "from math import inf, nan",
            "from cmath import nanj",
            "from torch._inductor.hooks import run_intermediate_hooks",
            "from torch._inductor.utils import maybe_profile",
            "from torch._inductor.codegen.memory_planning import _align as align",
            "from torch import device, empty_strided",
            "from torch._inductor.async_compile import AsyncCompile",
            "from torch._inductor.select_algorithm import extern_kernels",
        ] {
            code.line(l);
        }
        if self.uses_metadata_asserts {
            code.line("from torch._inductor.runtime.runtime_utils import assert_tensor_metadata");
        }
        if self.uses_user_streams {
            code.line("from torch._dynamo.variables.streams import _get_stream_by_index");
        }
        if self.uses_mem_pools {
            code.line("from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index");
        }
        let any_triton = self
            .info
            .defined_kernels()
            .any(|d| matches!(d.backend, KernelBackend::Triton(_)));
        if any_triton {
            code.line("import triton");
            code.line("import triton.language as tl");
            code.line("from torch._inductor.runtime.triton_heuristics import start_graph, end_graph");
        }
        if any_triton || self.program_uses_stream() {
            code.line(&self.stream_import());
        }
        code.blank();
    }

    fn stream_import(&self) -> String {
        format!(
            "from torch._C import _{}_getCurrentRawStream as get_raw_stream",
            self.gpu.as_str()
        )
    }

    fn aliases(&self, code: &mut Code) {
        for l in [
            "aten = torch.ops.aten",
            "inductor_ops = torch.ops.inductor",
            "_quantized = torch.ops._quantized",
            "assert_size_stride = torch._C._dynamo.guards.assert_size_stride",
            "assert_alignment = torch._C._dynamo.guards.assert_alignment",
            "empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu",
            "empty_strided_cpu_pinned = torch._C._dynamo.guards._empty_strided_cpu_pinned",
            "empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda",
            "empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu",
            "empty_strided_mtia = torch._C._dynamo.guards._empty_strided_mtia",
            "reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor",
            "alloc_from_pool = torch.ops.inductor._alloc_from_pool",
            "async_compile = AsyncCompile()",
            "empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p",
        ] {
            code.line(l);
            if l.starts_with("assert_size_stride =") && self.uses_grouped_asserts {
                // Inductor 2.14's alias, written by this module only where used.
                code.line("assert_size_stride_grouped = torch._C._dynamo.guards.assert_size_stride_grouped");
            }
        }
    }

    /// `name = None  # device(type='cuda', index=0) torch.float32 (4,) (1,)`: the
    /// harness (or the caller) assigns the tensor before `call` runs.
    fn constants(&self, code: &mut Code) {
        for (name, layout) in &self.program.constants {
            code.line(&format!(
                "{name} = None  # {} torch.{} {} {}",
                device_repr(layout.device),
                layout.dtype.torch_name(),
                python_tuple_repr(&layout.size),
                python_tuple_repr(&layout.stride),
            ));
        }
    }

    /// `true` when some call anywhere fetches a GPU stream.
    fn program_uses_stream(&self) -> bool {
        std::iter::once(&self.program.main)
            .chain(self.program.subgraphs.values())
            .any(|g| self.graph_uses_stream(g))
    }

    fn graph_uses_stream(&self, graph: &Graph) -> bool {
        graph.lines.iter().any(|l| match l {
            Line::KernelCall(call) => match &self.info.line_kernel(&call.kernel).backend {
                KernelBackend::Triton(_) | KernelBackend::CudaC => call.device.map_or(true, is_gpu),
                KernelBackend::Halide(meta) => meta.is_cuda(),
                _ => false,
            },
            _ => false,
        })
    }

    /// Writes the header entries a graph's lines reach, in line order: kernel
    /// definitions, and the functions of the subgraphs its conditionals and loops run.
    fn definitions(&mut self, code: &mut Code, graph_name: Option<&GraphName>, graph: &Graph) -> Result<(), Error> {
        for (index, line) in graph.lines.iter().enumerate() {
            let at = || LineAt {
                graph: graph_name,
                index,
                line,
            };
            match line {
                Line::KernelDefinition { kernel } => {
                    if self.defined.contains(kernel) {
                        continue;
                    }
                    let def = self.info.line_kernel(kernel);
                    self.defined.insert(kernel.clone());
                    if matches!(def.backend, KernelBackend::Halide(_)) && !self.halide_import_written {
                        code.line("from torch._inductor.runtime.hints import HalideMeta, HalideInputSpec");
                        self.halide_import_written = true;
                    }
                    let device = self.kernel_device.get(kernel).copied().unwrap_or(self.gpu);
                    kernels::definition(code, def, device, at())?;
                }
                _ => {
                    for g in line.subgraphs() {
                        self.reach_subgraph(code, g)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn reach_subgraph(&mut self, code: &mut Code, name: &GraphName) -> Result<(), Error> {
        if self.graphs_written.contains(name) {
            return Ok(());
        }
        let graph = self.info.line_subgraph(name);
        self.subgraph_function(code, name, graph)
    }

    /// A subgraph's kernels, then `def <name>(args):`. Like Inductor 2.11, a
    /// subgraph that fetches streams repeats the `get_raw_stream` import first.
    fn subgraph_function(&mut self, code: &mut Code, name: &GraphName, graph: &Graph) -> Result<(), Error> {
        self.graphs_written.insert(name.clone());
        if self.graph_uses_stream(graph) {
            code.line(&self.stream_import());
            code.blank();
        }
        self.definitions(code, Some(name), graph)?;
        code.blank();
        code.line(&format!("def {name}(args):"));
        code.indent = 1;
        let escaping = self.escaping_symbols(name, graph);
        if !escaping.is_empty() {
            code.line(&format!("global {}", escaping.join(", ")));
        }
        self.graph_function_body(code, Some(name), graph)?;
        code.indent = 0;
        Ok(())
    }

    /// The symbols subgraph `name`'s own lines bind that stay visible after
    /// a line running it (validation's `GraphInfo::binds`: a symbol both
    /// branches of a `cond` bind, one a while loop's cond graph binds). A
    /// Python function's assignments are its locals, so these are module
    /// globals, read by the caller after the call.
    fn escaping_symbols<'g>(&self, name: &GraphName, graph: &'g Graph) -> Vec<&'g str> {
        let callers = self.info.graph(Some(name)).map_or(&[][..], |gi| gi.callers());
        let visible: IndexSet<&Symbol> = callers
            .iter()
            .filter_map(|(caller, line)| {
                let caller = (caller.as_str() != crate::ir::MAIN_GRAPH).then_some(caller);
                self.info.graph(caller).map(|gi| gi.binds(*line))
            })
            .flatten()
            .collect();
        let own: IndexSet<&Symbol> = graph.lines.iter().flat_map(Line::binds).collect();
        own.into_iter()
            .filter(|s| visible.contains(s))
            .map(|s| s.as_str())
            .collect()
    }

    /// Argument unpacking, symbol binds, input asserts, the lines, the return.
    fn graph_function_body(&self, code: &mut Code, graph_name: Option<&GraphName>, graph: &Graph) -> Result<(), Error> {
        let names: Vec<&str> = graph.inputs.iter().map(|i| i.name().as_str()).collect();
        if !names.is_empty() {
            let mut lhs = names.join(", ");
            if names.len() == 1 {
                lhs.push(',');
            }
            code.line(&format!("{lhs} = args"));
            code.line("args.clear()");
        }
        self.input_symbol_binds(code, graph);
        let mut input_asserts = Vec::new();
        if self.options.input_size_asserts {
            let asserted: IndexSet<&BufName> = graph.asserted_buffers().collect();
            for name in graph.tensor_inputs() {
                if asserted.contains(name) {
                    continue;
                }
                // Invariant: validation declares a tensor input a tensor of
                // its graph's table (`UndeclaredBuffer`, `NotATensor`).
                let layout = graph.layout(name).expect("validated: a tensor input is a tensor");
                if layout.size.contains(&SymExpr::Int(0)) {
                    continue;
                }
                input_asserts.push(body::InputAssert {
                    input: name.clone(),
                    text: body::assert_size_stride(name, &layout.size, &layout.stride, None),
                });
            }
        }
        body::GraphLowering::new(self, graph_name, graph).lines(code, &input_asserts)?;
        let outputs: Vec<String> = graph
            .outputs
            .iter()
            .map(|o| match o {
                crate::ir::GraphOutput::Buffer(b) => b.to_string(),
                crate::ir::GraphOutput::Expr(e) => crate::sym::print::python(e),
                crate::ir::GraphOutput::None => "None".to_string(),
            })
            .collect();
        if outputs.is_empty() {
            code.line("return ()");
        } else {
            code.line(&format!("return ({}, )", outputs.join(", ")));
        }
        Ok(())
    }

    /// `s0 = arg0_1` for symbol inputs; then, for tensor inputs whose sizes or
    /// strides are bare backed symbols not bound yet, `arg0_1_size =
    /// arg0_1.size()` then `s0 = arg0_1_size[0]` (and the same with
    /// `_stride`). Symbol inputs come first, as in Inductor's `codegen_inputs`:
    /// a branch of a `cond` under `dynamic=True` takes its sizes as symbol
    /// inputs after its tensors and binds them from those (`s27 =
    /// true_graph_0_arg1_1`), not from the tensors' sizes.
    fn input_symbol_binds(&self, code: &mut Code, graph: &Graph) {
        let mut bound: IndexSet<Symbol> = IndexSet::new();
        let mut headers: IndexSet<(&str, &str)> = IndexSet::new();
        for input in &graph.inputs {
            if let GraphInput::Symbol { name, symbol } = input {
                if bound.insert(symbol.clone()) && name.as_str() != symbol.as_str() {
                    code.line(&format!("{symbol} = {name}"));
                }
            }
        }
        for input in &graph.inputs {
            match input {
                GraphInput::Symbol { .. } | GraphInput::SymExpr { .. } => {}
                GraphInput::Tensor { name } => {
                    let Some(layout) = graph.layout(name) else { continue };
                    for (what, dims) in [("size", &layout.size), ("stride", &layout.stride)] {
                        for (dim, e) in dims.iter().enumerate() {
                            let SymExpr::Sym(s) = e else { continue };
                            if bound.contains(s) || !self.symbol_known_backed(s) {
                                continue;
                            }
                            if headers.insert((name.as_str(), what)) {
                                code.line(&format!("{name}_{what} = {name}.{what}()"));
                            }
                            code.line(&format!("{s} = {name}_{what}[{dim}]"));
                            bound.insert(s.clone());
                        }
                    }
                }
            }
        }
        // Sizes and strides that are expressions (`2*s0 + 1`, a torch.export
        // derived dimension) bind the one backed symbol they leave unbound,
        // solved (`sym::solve`), until none binds another. Inductor's wrapper
        // leaves such a symbol to be found elsewhere; this binds it.
        let mut progress = true;
        while progress {
            progress = false;
            for name in graph.tensor_inputs() {
                let Some(layout) = graph.layout(name) else { continue };
                for (what, dims) in [("size", &layout.size), ("stride", &layout.stride)] {
                    for (dim, e) in dims.iter().enumerate() {
                        if matches!(e, SymExpr::Sym(_)) {
                            continue;
                        }
                        let free = e.free_symbols();
                        let unbound: Vec<&Symbol> = free.iter().filter(|s| !bound.contains(*s)).collect();
                        let [s] = unbound.as_slice() else { continue };
                        if !self.symbol_known_backed(s) {
                            continue;
                        }
                        let Some(affine) = crate::sym::solve::affine_in(e, s) else {
                            continue;
                        };
                        if headers.insert((name.as_str(), what)) {
                            code.line(&format!("{name}_{what} = {name}.{what}()"));
                        }
                        let value = SymExpr::sym(format!("{name}_{what}[{dim}]"));
                        code.line(&format!("{s} = {}", crate::sym::print::python(&affine.solution(value))));
                        bound.insert((*s).clone());
                        progress = true;
                    }
                }
            }
            // Integer inputs that are expressions (a branch closing over
            // `2*s0 + 1`) likewise, from the input's value.
            for input in &graph.inputs {
                let GraphInput::SymExpr { name, expr } = input else {
                    continue;
                };
                let free = expr.free_symbols();
                let unbound: Vec<&Symbol> = free.iter().filter(|s| !bound.contains(*s)).collect();
                let [s] = unbound.as_slice() else { continue };
                let Some(affine) = crate::sym::solve::affine_in(expr, s) else {
                    continue;
                };
                let value = SymExpr::sym(name.as_str());
                code.line(&format!("{s} = {}", crate::sym::print::python(&affine.solution(value))));
                bound.insert((*s).clone());
                progress = true;
            }
        }
    }

    /// Backed symbols are bound from inputs; undeclared symbols with an `s` prefix
    /// count as backed too.
    fn symbol_known_backed(&self, s: &Symbol) -> bool {
        match self.program.symbols.get(s) {
            Some(d) => d.kind == crate::ir::SymbolKind::Backed,
            None => s.prefix_kind() == crate::sym::SymbolPrefix::Backed,
        }
    }

    fn harness(&self, code: &mut Code) -> Result<(), Error> {
        let mut hints = crate::sym::Bindings::new();
        for (s, d) in &self.program.symbols {
            if let Some(h) = d.hint {
                hints.insert(s.clone(), h);
            }
        }
        let main = &self.program.main;
        code.blank();
        code.blank();
        code.line("def get_args():");
        code.indent = 1;
        code.line("from torch._dynamo.testing import rand_strided");
        for (name, layout) in &self.program.constants {
            code.line(&format!("global {name}"));
            code.line(&format!("{name} = {}", rand_strided(name, layout, &hints)?));
        }
        let mut names = Vec::new();
        for input in &main.inputs {
            match input {
                GraphInput::Symbol { name, symbol } => {
                    let v = hints.get(symbol).ok_or_else(|| {
                        Error::of(ErrorKind::MissingHint {
                            symbol: symbol.clone(),
                            input: name.clone(),
                        })
                    })?;
                    code.line(&format!("{name} = {v}"));
                }
                GraphInput::SymExpr { name, expr } => {
                    let v = crate::sym::eval::eval_int(expr, &hints).map_err(|_| {
                        let symbol = expr
                            .free_symbols()
                            .into_iter()
                            .find(|s| !hints.contains_key(s))
                            .unwrap_or_else(|| Symbol::new(name.as_str()));
                        Error::of(ErrorKind::MissingHint {
                            symbol,
                            input: name.clone(),
                        })
                    })?;
                    code.line(&format!("{name} = {v}"));
                }
                GraphInput::Tensor { name } => {
                    // Invariant: validation declares a tensor input a tensor of main's table.
                    let layout = main.layout(name).expect("validated: a tensor input is a tensor");
                    code.line(&format!("{name} = {}", rand_strided(name, layout, &hints)?));
                }
            }
            names.push(input.name().to_string());
        }
        code.line(&format!("return [{}]", names.join(", ")));
        code.indent = 0;
        for l in [
            "",
            "",
            "def benchmark_compiled_module(args, times=10, repeat=10):",
            "    from torch._inductor.utils import print_performance",
            "    fn = lambda: call(list(args))",
            "    return print_performance(fn, times=times, repeat=repeat)",
            "",
            "",
            "if __name__ == \"__main__\":",
            "    from torch._inductor.wrapper_benchmark import compiled_module_main",
            "    args = get_args()",
            "    compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))",
        ] {
            code.line(l);
        }
        Ok(())
    }
}

fn is_gpu(d: Device) -> bool {
    matches!(d.kind, DeviceType::Cuda | DeviceType::Xpu | DeviceType::Mtia)
}

/// `rand_strided((33, 77), (77, 1), device='cuda:0', dtype=torch.float32)` at the hints.
fn rand_strided(input: &BufName, layout: &crate::ir::Layout, hints: &crate::sym::Bindings) -> Result<String, Error> {
    let eval = |e: &SymExpr| -> Result<String, Error> {
        match crate::sym::eval::eval_int(e, hints) {
            Ok(v) => Ok(v.to_string()),
            Err(EvalError::Unbound { symbol }) => Err(Error::of(ErrorKind::MissingHint {
                symbol,
                input: input.clone(),
            })),
            Err(source) => Err(Error::of(ErrorKind::HarnessEval {
                input: input.clone(),
                source,
            })),
        }
    };
    let size: Vec<String> = layout.size.iter().map(eval).collect::<Result<_, _>>()?;
    let stride: Vec<String> = layout.stride.iter().map(eval).collect::<Result<_, _>>()?;
    Ok(format!(
        "rand_strided({}, {}, device={}, dtype=torch.{})",
        tuple_of(&size),
        tuple_of(&stride),
        crate::ir::PyStr(&layout.device.to_string()),
        layout.dtype.torch_name()
    ))
}

/// Inductor's `codegen_python_shape_tuple`: `()`, `(x, )`, `(a, b)`.
pub(crate) fn shape_tuple(dims: &[SymExpr]) -> String {
    let items: Vec<String> = dims.iter().map(crate::sym::print::python).collect();
    tuple_of(&items)
}

fn tuple_of(items: &[String]) -> String {
    match items.len() {
        0 => "()".to_string(),
        1 => format!("({}, )", items[0]),
        _ => format!("({})", items.join(", ")),
    }
}

/// Python's `repr` of a tuple: `()`, `(4,)`, `(4, 1)`.
fn python_tuple_repr(dims: &[SymExpr]) -> String {
    let items: Vec<String> = dims.iter().map(crate::sym::print::python).collect();
    match items.len() {
        1 => format!("({},)", items[0]),
        _ => format!("({})", items.join(", ")),
    }
}

/// `device(type='cuda', index=0)`, as `repr(torch.device)` prints it.
pub(crate) fn device_repr(d: Device) -> String {
    match d.index {
        Some(i) => format!("device(type='{}', index={i})", d.kind.as_str()),
        None => format!("device(type='{}')", d.kind.as_str()),
    }
}
