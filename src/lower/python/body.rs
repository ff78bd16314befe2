//! The lines of one graph's function body.

use super::kernels::comment;
use super::{device_repr, shape_tuple, Code, Error, ErrorKind, Lowering, StreamBinding};
use crate::ir::op::key;
use crate::ir::LineAt;
use crate::ir::{
    write_float, ArgValue, BufName, CallArg, Conditional, DeviceType, ExternCall, Graph, GraphName, GraphOutput,
    IndexNames, KernelBackend, KernelCall, KeyEntry, KeyPathText, Layout, Line, MultiIndex, Predicate, PyStr,
    ScatterFallback, Scope, ScopeKind, Switch, TensorMethod, WhileLoop, MAIN_GRAPH,
};
use crate::lower::launches::{PrintedArg, PrintedLaunch};
use crate::sym::print::python as pexpr;
use crate::sym::{SymExpr, Symbol};
use indexmap::IndexSet;

/// An `assert_size_stride` the lowering adds for a tensor input no line checks.
pub(super) struct InputAssert {
    /// The input.
    pub(super) input: BufName,
    /// The line.
    pub(super) text: String,
}

/// Lowers the lines of one graph.
pub(super) struct GraphLowering<'l, 'a> {
    low: &'l Lowering<'a>,
    graph_name: Option<&'l GraphName>,
    graph: &'l Graph,
    /// Open device guards (device indices), innermost last.
    guards: Vec<u32>,
    /// Devices whose stream this graph has fetched (for [`StreamBinding::OncePerGraph`]).
    streams: IndexSet<u32>,
    /// The graph's returned buffers (never deleted by a reuse).
    outputs: IndexSet<&'l BufName>,
}

impl<'l, 'a> GraphLowering<'l, 'a> {
    pub(super) fn new(low: &'l Lowering<'a>, graph_name: Option<&'l GraphName>, graph: &'l Graph) -> Self {
        let outputs = graph
            .outputs
            .iter()
            .filter_map(|o| match o {
                GraphOutput::Buffer(b) => Some(b),
                _ => None,
            })
            .collect();
        GraphLowering {
            low,
            graph_name,
            graph,
            guards: Vec::new(),
            streams: IndexSet::new(),
            outputs,
        }
    }

    /// Writes the graph's lines. `input_asserts` (in input order) are merged into
    /// the graph's leading run of `AssertSizeStride` lines on inputs so that, as
    /// in Inductor's preamble, the input checks come out in input order.
    pub(super) fn lines(mut self, code: &mut Code, input_asserts: &[InputAssert]) -> Result<(), Error> {
        let base_indent = code.indent;
        let input_position = |b: &BufName| self.graph.inputs.iter().position(|i| i.name() == b);
        let mut pending = input_asserts.iter().map(|a| (input_position(&a.input), a)).peekable();
        let mut in_preamble = true;
        for (index, line) in self.graph.lines.iter().enumerate() {
            let preamble_input = match line {
                Line::AssertSizeStride(a) if in_preamble => input_position(&a.buffer),
                _ => None,
            };
            // Definitions print nothing here, so they do not end the preamble.
            let transparent = matches!(line, Line::KernelDefinition { .. });
            match preamble_input {
                None if transparent => {}
                Some(position) => {
                    while let Some((_, a)) = pending.next_if(|(p, _)| p.is_some_and(|p| p < position)) {
                        code.line(&a.text);
                    }
                }
                None if in_preamble => {
                    in_preamble = false;
                    for (_, a) in pending.by_ref() {
                        code.line(&a.text);
                    }
                }
                None => {}
            }
            let at = LineAt {
                graph: self.graph_name,
                index,
                line,
            };
            self.line(code, line, at)?;
        }
        for (_, a) in pending {
            code.line(&a.text);
        }
        // Invariant: `validate` rejects a graph that ends inside a device
        // guard (`UnclosedDeviceGuard`), so every guard opened here closed.
        code.indent = base_indent;
        Ok(())
    }

    /// The layout of `buffer`, a tensor: the lines that ask (allocations,
    /// reuses, views, communication buffers) name tensors (`Need::Tensor`).
    fn layout(&self, buffer: &BufName) -> &'l Layout {
        match self.graph.buffers.get(buffer).map(|d| &d.kind) {
            Some(crate::ir::BufferKind::Tensor(l)) => l,
            // Invariant: `validate` rejects a multi-output value where a line
            // needs a tensor (`NotATensor`) and a line naming a buffer that
            // is neither declared by its graph nor a program constant.
            _ => self
                .low
                .program
                .constants
                .get(buffer)
                .expect("validated: a line needing a layout names a tensor or a constant"),
        }
    }

    fn line(&mut self, code: &mut Code, line: &Line, at: LineAt<'_>) -> Result<(), Error> {
        match line {
            Line::Allocate { buffer } => {
                let layout = self.layout(buffer);
                code.line(&format!("{buffer} = {}", allocation(layout)));
            }
            Line::FreeIfNotReused { buffer, is_reused } => {
                if !is_reused {
                    code.line(&format!("del {buffer}"));
                }
            }
            Line::Free { buffer } => code.line(&format!("del {buffer}")),
            Line::Reuse { old, new, delete_old } => {
                // `validate` rejects a reuse between dtypes (`ReuseDtypeMismatch`).
                let old_layout = self.layout(old);
                let new_layout = self.layout(new);
                let del = if *delete_old && !self.outputs.contains(old) {
                    format!("; del {old}")
                } else {
                    ";".into()
                };
                let value = if old_layout.size == new_layout.size && old_layout.stride == new_layout.stride {
                    old.to_string()
                } else {
                    format!(
                        "reinterpret_tensor({old}, {}, {}, 0)",
                        shape_tuple(&new_layout.size),
                        shape_tuple(&new_layout.stride)
                    )
                };
                code.line(&format!("{new} = {value}{del}  # reuse"));
            }
            Line::Reinterpret { base, alias } => {
                let base_layout = self.layout(base);
                let layout = self.layout(alias);
                let same = base_layout.size == layout.size
                    && base_layout.stride == layout.stride
                    && base_layout.offset == layout.offset;
                let mut view = if same {
                    base.to_string()
                } else {
                    format!(
                        "reinterpret_tensor({base}, {}, {}, {})",
                        shape_tuple(&layout.size),
                        shape_tuple(&layout.stride),
                        pexpr(&layout.offset)
                    )
                };
                if base_layout.dtype != layout.dtype {
                    view = format!("{}.dtype({view}, torch.{})", key::VIEW, layout.dtype.torch_name());
                }
                code.line(&format!("{alias} = {view}  # alias"));
            }
            // Definitions live in the module header.
            Line::KernelDefinition { .. } => {}
            Line::KernelCall(call) => self.kernel_call(code, call, at)?,
            Line::SymbolicCallArg { symbol, expr } => code.line(&format!("{symbol} = {}", pexpr(expr))),
            Line::ExternKernelAlloc(call) => {
                let text = extern_call(call, None);
                match &call.result {
                    Some(r) => code.line(&format!("{r} = {text}")),
                    None => code.line(&text),
                }
            }
            Line::ExternKernelOut { call, out } => code.line(&extern_call(call, Some(out))),
            Line::ExternKernelMultiOut(m) => {
                let text = extern_call(&m.call_with_outs(), None);
                match &m.call.result {
                    Some(r) => code.line(&format!("{r} = {text}")),
                    None => code.line(&text),
                }
            }
            Line::MultiOutput(m) => {
                let mut text = format!("{} = {}", m.result, m.source);
                for i in &m.indices {
                    match i {
                        MultiIndex::List(i) | MultiIndex::Tuple(i) => text.push_str(&format!("[{i}]")),
                        MultiIndex::Dict(k) => text.push_str(&format!("[{}]", PyStr(k))),
                    }
                }
                code.line(&text);
            }
            Line::IndexPutFallback(p) => code.line(&format!(
                "{}({}, [{}], {}, {})",
                key::INDEX_PUT,
                p.target,
                IndexNames(&p.indices),
                p.values,
                py_bool(p.accumulate)
            )),
            Line::ScatterFallback(s) => code.line(&scatter(s)),
            Line::DynamicScalar(d) => {
                let (symbol, source, keypath) = (&d.symbol, &d.source, &d.keypath);
                match keypath.as_slice() {
                    [] => code.line(&format!("{symbol} = {source}.item()")),
                    [KeyEntry::ConvertInt] => code.line(&format!("{symbol} = 1 if {source}.item() else 0")),
                    [KeyEntry::DivideBy(d)] => {
                        check_divisor(symbol, keypath, *d, &at)?;
                        code.line(&format!("{symbol}_undivided = {source}.item()"));
                        code.line(&format!(
                            "assert {symbol}_undivided % {d} == 0, f'{{{symbol}_undivided}} not divisible by {d}'"
                        ));
                        code.line(&format!("{symbol} = {symbol}_undivided // {d}"));
                    }
                    _ => {
                        let reason = "an item() value takes no key, `.to_int()` or `//d` only";
                        return Err(unsupported_key_path(&at, symbol, keypath, reason));
                    }
                }
                if let Some(n) = &d.node {
                    code.line(&format!("{n} = None"));
                }
            }
            Line::UnbackedSymbolDefs { source, bindings } => {
                for (symbol, path) in bindings {
                    unbacked_binding(code, symbol, source, path, &at)?;
                }
            }
            Line::Conditional(c) => self.conditional(code, c)?,
            Line::Switch(sw) => self.switch(code, sw)?,
            Line::WhileLoop(w) => self.while_loop(code, w)?,
            Line::EnterDeviceContext { device_index, streams } => {
                let kind = self.low.gpu.as_str();
                code.line(&format!("with torch.{kind}._DeviceGuard({device_index}):"));
                code.indent += 1;
                code.line(&format!("torch.{kind}.set_device({device_index})"));
                // Inductor 2.12+'s `EnterDeviceContextManagerWithStreamInfoLine`.
                if let Some(streams) = streams {
                    if streams.reads_current_stream {
                        code.line(&format!("default_stream = torch.{kind}.current_stream()"));
                    }
                    for (k, object) in streams.user_objects.iter().enumerate() {
                        code.line(&format!("stream{} = _get_stream_by_index({object})", k + 1));
                    }
                }
                self.guards.push(*device_index);
            }
            Line::EnterScope(scope) => match scope {
                Scope::Stream { stream: 0 } => {
                    code.line("with default_stream:");
                    code.indent += 1;
                }
                Scope::Stream { stream } => {
                    code.line(&format!("with stream{stream}:"));
                    code.indent += 1;
                }
                Scope::MemPool { pool, device_index } => {
                    code.line(&format!(
                        "with torch.{}.use_mem_pool(get_external_object_by_index({pool}), device={device_index}):",
                        self.low.gpu.as_str()
                    ));
                    code.indent += 1;
                }
                // A C++ wrapper's block: the Python wrapper has none.
                Scope::KernelProfile => {}
            },
            Line::ExitScope { scope } => match scope {
                ScopeKind::Stream | ScopeKind::MemPool => code.indent = code.indent.saturating_sub(1),
                ScopeKind::KernelProfile => {}
            },
            // Inductor's `config.nan_asserts` checks.
            Line::AssertFinite { buffer } => {
                code.line(&format!("assert not {buffer}.isnan().any().item()"));
                code.line(&format!("assert not {buffer}.isinf().any().item()"));
            }
            Line::ExitDeviceContext => {
                // Invariant: `validate` rejects an exit without an open guard
                // (`UnmatchedDeviceExit`), so there is one to close.
                self.guards.pop();
                code.indent = code.indent.saturating_sub(1);
            }
            Line::Comment { text } => code.line(&comment(text)),
            Line::AssertSizeStride(a) => match a.dtype {
                None => code.line(&assert_size_stride(&a.buffer, &a.size, &a.stride, a.context.as_deref())),
                // Inductor 2.14+'s form for a checked dtype.
                Some(d) => code.line(&assert_call(
                    format!(
                        "assert_tensor_metadata({}, {}, {}, torch.{}",
                        a.buffer,
                        shape_tuple(&a.size),
                        shape_tuple(&a.stride),
                        d.torch_name()
                    ),
                    a.context.as_deref(),
                )),
            },
            Line::AssertSizeStrideGrouped(group) => {
                let tuple = |items: Vec<String>| format!("({})", items.join(", "));
                let names = tuple(group.asserts.iter().map(|a| a.buffer.to_string()).collect());
                let sizes = tuple(group.asserts.iter().map(|a| shape_tuple(&a.size)).collect());
                let strides = tuple(group.asserts.iter().map(|a| shape_tuple(&a.stride)).collect());
                code.line(&assert_call(
                    format!("assert_size_stride_grouped({names}, {sizes}, {strides}"),
                    group.context.as_deref(),
                ))
            }
            // Inductor's Python wrapper writes no check for this (Python
            // raises ZeroDivisionError itself); the C++ wrappers do.
            Line::AssertDivByZero { .. } => {}
            Line::AssertAlignment {
                buffer,
                alignment,
                context,
            } => code.line(&assert_call(
                format!("assert_alignment({buffer}, {alignment}"),
                context.as_deref(),
            )),
            Line::RuntimeAssert { cond, message, node } => {
                code.line(&format!("if not ({}):", pexpr(cond)));
                code.indent += 1;
                code.line(&format!("raise RuntimeError({})", PyStr(message)));
                code.indent -= 1;
                if let Some(n) = node {
                    code.line(&format!("{n} = None"));
                }
            }
            Line::CommBufferAllocate {
                buffer,
                comm_kind,
                group,
            } => {
                if comm_kind != "symm_mem" {
                    return Err(Error::new(
                        at.location(),
                        ErrorKind::UnsupportedCommBuffer {
                            buffer: buffer.clone(),
                            comm_kind: comm_kind.clone(),
                        },
                    ));
                }
                let layout = self.layout(buffer);
                let device_index = layout.device.index.unwrap_or(0);
                code.line(&format!(
                    "{buffer} = empty_strided_p2p({}, {}, torch.{}, torch.device(\"{}:{device_index}\"), group_name={}, alloc_id={})",
                    shape_tuple(&layout.size),
                    shape_tuple(&layout.stride),
                    layout.dtype.torch_name(),
                    layout.device.kind.as_str(),
                    py_double_quoted(group),
                    alloc_id(self.graph_name, buffer),
                ));
            }
            Line::CommBufferFree { buffer } => code.line(&format!("del {buffer} # symm_mem buffer free")),
        }
        Ok(())
    }

    /// `streamN = get_raw_stream(N)` when the stream binding says so; returns `streamN`.
    fn stream(&mut self, code: &mut Code, device_index: u32) -> String {
        let name = format!("stream{device_index}");
        let write = match self.low.options.stream_binding {
            StreamBinding::EveryCall => true,
            StreamBinding::OncePerGraph => self.streams.insert(device_index),
        };
        if write {
            code.line(&format!("{name} = get_raw_stream({device_index})"));
        }
        name
    }

    /// The GPU device index of a call: its own device, else the innermost guard.
    fn call_device(&self, call: &KernelCall, at: &LineAt<'_>) -> Result<u32, Error> {
        match call.device {
            Some(d) if matches!(d.kind, DeviceType::Cuda | DeviceType::Xpu | DeviceType::Mtia) => {
                match d.index.or_else(|| self.guards.last().copied()) {
                    Some(i) => Ok(i),
                    None => Ok(0),
                }
            }
            Some(_) => Err(Error::new(
                at.location(),
                ErrorKind::NoStreamDevice {
                    kernel: call.kernel.clone(),
                },
            )),
            None => self.guards.last().copied().ok_or_else(|| {
                Error::new(
                    at.location(),
                    ErrorKind::NoStreamDevice {
                        kernel: call.kernel.clone(),
                    },
                )
            }),
        }
    }

    fn kernel_call(&mut self, code: &mut Code, call: &KernelCall, at: LineAt<'_>) -> Result<(), Error> {
        let kernel = &call.kernel;
        // Validation checked that the kernel is in the table and that a
        // `KernelDefinition` line defines it before this call.
        let def = self.low.info.line_kernel(kernel);
        // Validation rejects a positional argument after a named one
        // (`PositionalAfterNamed`) and any named argument of a C++, CUDA C or
        // host kernel (`NamedArgument`); a Halide kernel on CUDA takes the
        // stream as a trailing positional argument, which Python rejects
        // after a named one.
        let trailing_stream = matches!(&def.backend, KernelBackend::Halide(meta) if meta.is_cuda());
        if trailing_stream && call.args.iter().any(|a| a.name.is_some()) {
            return Err(Error::new(
                at.location(),
                ErrorKind::PositionalAfterNamed { kernel: kernel.clone() },
            ));
        }
        let args = |wrap_pointers: bool| -> Vec<String> {
            call.args
                .iter()
                .map(|a| {
                    let value = match (&a.value, wrap_pointers) {
                        (ArgValue::Buffer(b), true) => format!("c_void_p({b}.data_ptr())"),
                        (v, _) => arg(v),
                    };
                    call_arg(a, value)
                })
                .collect()
        };
        match &def.backend {
            KernelBackend::Triton(_) => {
                let device = self.call_device(call, &at)?;
                let stream = self.stream(code, device);
                let mut items = Vec::with_capacity(call.args.len() + 1);
                let mut printed = self.low.launches.as_ref().map(|_| Vec::with_capacity(call.args.len()));
                for a in &call.args {
                    items.push(call_arg(a, arg(&a.value)));
                    if let Some(p) = printed.as_mut() {
                        p.push(PrintedArg {
                            param: a.name.clone(),
                            value: a.value.clone(),
                        });
                    }
                }
                items.push(format!("stream={stream}"));
                code.line(&format!("{kernel}.run({})", items.join(", ")));
                if let (Some(cell), Some(args)) = (&self.low.launches, printed) {
                    cell.borrow_mut().push(PrintedLaunch {
                        kernel: kernel.clone(),
                        graph: GraphName::new(self.graph_name.map_or(MAIN_GRAPH, |g| g.as_str())),
                        line: at.index,
                        args,
                        grid: None,
                        scratch: None,
                        ranges: Vec::new(),
                    });
                }
            }
            KernelBackend::Halide(meta) => {
                let mut items = args(false);
                if meta.is_cuda() {
                    let device = match meta.cuda_device {
                        Some(i) => i,
                        None => self.call_device(call, &at)?,
                    };
                    items.push(self.stream(code, device));
                }
                code.line(&format!("{kernel}({})", items.join(", ")));
            }
            KernelBackend::Cpp(_) => code.line(&format!("{kernel}({})", args(false).join(", "))),
            KernelBackend::CudaC => {
                let device = self.call_device(call, &at)?;
                let stream = self.stream(code, device);
                let mut items = args(true);
                items.push(format!("c_void_p({stream})"));
                code.line(&format!("{kernel}.{kernel}({})", items.join(", ")));
            }
            KernelBackend::Host => {
                return Err(Error::new(
                    at.location(),
                    ErrorKind::HostKernel { kernel: kernel.clone() },
                ))
            }
        }
        Ok(())
    }

    fn subgraph(&self, name: &GraphName) -> &'l Graph {
        self.low.info.line_subgraph(name)
    }

    /// Inductor 2.11's `cond` form.
    fn conditional(&mut self, code: &mut Code, c: &Conditional) -> Result<(), Error> {
        let true_graph = self.subgraph(&c.true_graph);
        self.subgraph(&c.false_graph);
        let result = &c.result;
        code.line(&format!("{result} = [None] * {}", true_graph.outputs.len()));
        match &c.predicate {
            Predicate::Tensor(b) => code.line(&format!("if {b}.item():")),
            Predicate::Expr(e) => code.line(&format!("if {}:", pexpr(e))),
        }
        let operands: Vec<String> = c.operands.iter().map(|o| o.to_string()).collect();
        for (i, g) in [&c.true_graph, &c.false_graph].into_iter().enumerate() {
            if i == 1 {
                code.line("else:");
            }
            branch_call(code, g, result, &operands);
        }
        Ok(())
    }

    /// Inductor 2.14's `codegen_switch` text (the form `torch.cond` and
    /// `torch.switch` take from 2.14 on): the selector read once as an
    /// integer, then `if sel == 0:` / `elif sel == k:` / `else:`.
    fn switch(&mut self, code: &mut Code, sw: &Switch) -> Result<(), Error> {
        let result = &sw.result;
        let selector = format!("{result}_selector");
        match &sw.selector {
            Predicate::Tensor(b) => code.line(&format!("{selector} = int({b}.item())")),
            Predicate::Expr(e) => code.line(&format!("{selector} = int({})", pexpr(e))),
        }
        let outputs = sw.branches.first().map_or(0, |b| self.subgraph(b).outputs.len());
        code.line(&format!("{result} = [None] * {outputs}"));
        let operands: Vec<String> = sw.operands.iter().map(|o| o.to_string()).collect();
        let last = sw.branches.len().saturating_sub(1);
        for (k, g) in sw.branches.iter().enumerate() {
            self.subgraph(g);
            match k {
                0 => code.line(&format!("if {selector} == 0:")),
                k if k < last => code.line(&format!("elif {selector} == {k}:")),
                _ => code.line("else:"),
            }
            branch_call(code, g, result, &operands);
        }
        Ok(())
    }

    /// Inductor 2.11's `codegen_while_loop` text (JIT, no stacked outputs): the
    /// condition is evaluated once before the loop and again at the end of every
    /// iteration; when it is false from the start the results are copies of the
    /// carried inputs (`.clone()`), as Inductor writes them.
    fn while_loop(&mut self, code: &mut Code, w: &WhileLoop) -> Result<(), Error> {
        self.subgraph(&w.cond_graph);
        self.subgraph(&w.body_graph);
        let result = &w.result;
        let n = w.carried.len();
        code.line(&format!("{result} = [None] * {n}"));
        for (i, c) in w.carried.iter().enumerate() {
            code.line(&format!("{result}[{i}] = {c}"));
        }
        let slots: Vec<String> = (0..n).map(|i| format!("{result}[{i}]")).collect();
        let mut inputs = slots.clone();
        inputs.extend(w.additional.iter().map(|a| a.to_string()));
        let inputs = args_list(&inputs);
        let cond_result = format!("{result}_cond_result");
        let call = |code: &mut Code, graph: &GraphName, outs: &[String]| {
            code.blank();
            code.line(&format!("# subgraph: {graph}"));
            code.line(&format!("{graph}_args = {inputs}"));
            let targets = if outs.len() == 1 {
                format!("({},)", outs.join(", "))
            } else {
                format!("({})", outs.join(", "))
            };
            code.line(&format!("{targets} = {graph}({graph}_args)"));
        };
        call(code, &w.cond_graph, std::slice::from_ref(&cond_result));
        code.line(&format!("should_loop = {cond_result}"));
        // Inductor writes this block even without carried values (an empty,
        // invalid block); there is nothing to copy then.
        if n > 0 {
            code.line("if not should_loop:");
            code.indent += 1;
            for (i, c) in w.carried.iter().enumerate() {
                code.line(&format!("{result}[{i}] = {c}.clone()"));
            }
            code.indent -= 1;
        }
        code.line("while should_loop:");
        code.indent += 1;
        call(code, &w.body_graph, &slots);
        call(code, &w.cond_graph, std::slice::from_ref(&cond_result));
        code.line(&format!("should_loop = {cond_result}"));
        code.indent -= 1;
        Ok(())
    }
}

/// `[a,]` for one element (Inductor's form), `[a, b]` otherwise.
fn args_list(items: &[String]) -> String {
    if items.len() == 1 {
        format!("[{},]", items[0])
    } else {
        format!("[{}]", items.join(", "))
    }
}

/// `empty_strided_cuda((s0, 4), (4, 1), torch.float32)`; padded or offset layouts
/// allocate their storage flat and `as_strided` it.
fn allocation(layout: &Layout) -> String {
    let dtype = format!("torch.{}", layout.dtype.torch_name());
    let alloc = |size: &str, stride: &str| match layout.device.kind {
        DeviceType::Cpu | DeviceType::Cuda | DeviceType::Xpu | DeviceType::Mtia => {
            format!(
                "empty_strided_{}({size}, {stride}, {dtype})",
                layout.device.kind.as_str()
            )
        }
        DeviceType::Meta => format!("empty_strided({size}, {stride}, device='meta', dtype={dtype})"),
    };
    let padded = layout.alloc_numel.is_some() || layout.offset != SymExpr::Int(0);
    if !padded {
        return alloc(&shape_tuple(&layout.size), &shape_tuple(&layout.stride));
    }
    let numel = shape_tuple(&[layout.storage_numel_expr()]);
    let mut text = format!(
        "{}.as_strided({}, {}",
        alloc(&numel, "(1, )"),
        shape_tuple(&layout.size),
        shape_tuple(&layout.stride)
    );
    if layout.offset != SymExpr::Int(0) {
        text.push_str(&format!(", {}", pexpr(&layout.offset)));
    }
    text.push(')');
    text
}

fn call_arg(a: &CallArg, value: String) -> String {
    match &a.name {
        Some(n) => format!("{n}={value}"),
        None => value,
    }
}

/// A value as Python source.
fn arg(v: &ArgValue) -> String {
    match v {
        ArgValue::Buffer(b) => b.to_string(),
        ArgValue::Expr(e) => pexpr(e),
        ArgValue::Float(f) => {
            let mut s = String::new();
            // Writing into a String cannot fail.
            let _ = write_float(&mut s, *f);
            s
        }
        ArgValue::Bool(b) => py_bool(*b).to_string(),
        ArgValue::None => "None".to_string(),
        ArgValue::Str(s) => PyStr(s).to_string(),
        ArgValue::DType(d) => format!("torch.{}", d.torch_name()),
        ArgValue::Device(d) => device_repr(*d),
        ArgValue::List(items) => format!("[{}]", items.iter().map(arg).collect::<Vec<_>>().join(", ")),
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// `op(args, k=v, out=buf0)`.
fn extern_call(call: &ExternCall, out: Option<&BufName>) -> String {
    let mut items: Vec<String> = call.args.iter().map(arg).collect();
    items.extend(call.kwargs.iter().map(|(k, v)| format!("{k}={}", arg(v))));
    if let Some(o) = out {
        items.push(format!("out={o}"));
    }
    format!("{}({})", call.op, items.join(", "))
}

/// Inductor's scatter line: inputs joined by `,` without spaces, then `reduce=`
/// (and for `scatter_reduce` every keyword).
fn scatter(s: &ScatterFallback) -> String {
    let inputs = [
        s.target.to_string(),
        s.dim.to_string(),
        s.index.to_string(),
        arg(&s.src),
    ];
    let mut line = format!("{}({}", s.op, inputs.join(","));
    // `aten.scatter_reduce_` and the out-of-place `aten.scatter_reduce.two`.
    if s.op.starts_with(key::SCATTER_REDUCE.trim_end_matches('_')) {
        if let Some(r) = &s.reduce {
            line.push_str(&format!(", reduce={}", PyStr(r)));
        }
        if let Some(i) = s.include_self {
            line.push_str(&format!(", include_self={}", py_bool(i)));
        }
    } else if let Some(r) = &s.reduce {
        line.push_str(&format!(", reduce={}", PyStr(r)));
    }
    line.push(')');
    line
}

/// `assert_size_stride(buffer, size, stride)`, with the producing op's name
/// last when known: what a line prints and what the lowering adds for the
/// tensor inputs no line checks.
pub(super) fn assert_size_stride(
    buffer: &BufName,
    size: &[SymExpr],
    stride: &[SymExpr],
    context: Option<&str>,
) -> String {
    let head = format!(
        "assert_size_stride({buffer}, {}, {}",
        shape_tuple(size),
        shape_tuple(stride)
    );
    assert_call(head, context)
}

/// One branch of a cond or switch, indented under its `if`/`else`: Inductor's
/// `codegen_subgraph` call of branch `g` on `operands` into `result`.
fn branch_call(code: &mut Code, g: &GraphName, result: &BufName, operands: &[String]) {
    code.indent += 1;
    code.blank();
    code.line(&format!("# subgraph: {g}"));
    code.line(&format!("{g}_args = {}", args_list(operands)));
    code.line(&format!("{result} = {g}({g}_args)"));
    code.indent -= 1;
}

/// An assert call opened as `head` (its name and arguments so far), closed
/// with the producing op's name, `context`, as its last argument when known.
fn assert_call(mut head: String, context: Option<&str>) -> String {
    if let Some(c) = context {
        head.push_str(&format!(", {}", PyStr(c)));
    }
    head.push(')');
    head
}

fn check_divisor(symbol: &Symbol, path: &[KeyEntry], d: i64, at: &LineAt<'_>) -> Result<(), Error> {
    if d <= 0 {
        return Err(unsupported_key_path(at, symbol, path, "the divisor must be positive"));
    }
    Ok(())
}

/// The error for the key path `path` of `symbol` that this lowering does not
/// write, and why.
fn unsupported_key_path(at: &LineAt<'_>, symbol: &Symbol, path: &[KeyEntry], reason: &'static str) -> Error {
    Error::new(
        at.location(),
        ErrorKind::UnsupportedKeyPath {
            symbol: symbol.clone(),
            path: KeyPathText(path).to_string(),
            reason,
        },
    )
}

/// One unbacked binding: `u0 = buf1.size(0)`, `u1 = buf1[1].stride(0)`,
/// `u2 = buf1.storage_offset()`, `u3 = buf1.values.size(0)`,
/// `u4 = 1 if buf1[0] else 0`; a trailing divide-by is checked at run time.
fn unbacked_binding(
    code: &mut Code,
    symbol: &Symbol,
    source: &BufName,
    path: &[KeyEntry],
    at: &LineAt<'_>,
) -> Result<(), Error> {
    let unsupported = |reason: &'static str| unsupported_key_path(at, symbol, path, reason);
    let mut expr = source.to_string();
    let mut i = 0;
    let mut last: Option<&KeyEntry> = None;
    while i < path.len() {
        let entry = &path[i];
        if i + 1 < path.len() && matches!(entry, KeyEntry::ConvertInt | KeyEntry::DivideBy(_)) {
            return Err(unsupported("`.to_int()` and `//d` may only end a key path"));
        }
        match entry {
            KeyEntry::CallMethod(TensorMethod::StorageOffset) => {
                if let Some(KeyEntry::Index(_)) = path.get(i + 1) {
                    return Err(unsupported("storage_offset() takes no dimension"));
                }
                expr.push_str(".storage_offset()");
            }
            KeyEntry::CallMethod(m) => {
                if let Some(KeyEntry::Index(d)) = path.get(i + 1) {
                    expr.push_str(&format!(".{}({d})", m.as_str()));
                    i += 1;
                } else {
                    expr.push_str(&format!(".{}()", m.as_str()));
                }
            }
            KeyEntry::Index(k) => expr.push_str(&format!("[{k}]")),
            KeyEntry::InnerTensor(attr) => expr.push_str(&format!(".{attr}")),
            KeyEntry::ConvertInt | KeyEntry::DivideBy(_) => {}
        }
        last = Some(entry);
        i += 1;
    }
    match last {
        Some(KeyEntry::ConvertInt) => code.line(&format!("{symbol} = 1 if {expr} else 0")),
        Some(KeyEntry::DivideBy(d)) => {
            check_divisor(symbol, path, *d, at)?;
            let undivided = format!("{symbol}_undivided");
            code.line(&format!("{undivided} = {expr}"));
            code.line(&format!("if {undivided} % {d} != 0:"));
            code.indent += 1;
            code.line(&format!(
                "raise RuntimeError(f'{symbol}: {{{undivided}}} ({}) is not divisible by {d}')",
                expr.replace('\'', "\\'").replace('{', "{{").replace('}', "}}")
            ));
            code.indent -= 1;
            code.line(&format!("{symbol} = {undivided} // {d}"));
        }
        _ => code.line(&format!("{symbol} = {expr}")),
    }
    Ok(())
}

fn py_double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A stable 64-bit id (FNV-1a of the graph and buffer names).
fn alloc_id(graph: Option<&GraphName>, buffer: &BufName) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let g = graph.map_or("main", |g| g.as_str());
    for b in g.bytes().chain([b'/']).chain(buffer.as_str().bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
