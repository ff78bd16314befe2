//! Graph lines to C++ statements, and the whole-file frame: the shared
//! lowering state ([`Lowering`]) and the entry points. The walk is written
//! once; what differs between the dialects goes through [`DialectOps`]
//! (`dialect.rs`), implemented once per dialect (`aoti.rs`, `standalone.rs`).

use super::{Dialect, Error, ErrorKind, IntSuffix, Options};
use crate::ir::MAIN_GRAPH;
use crate::ir::{
    ArgValue, BufName, BufferKind, Conditional, DType, Device, DeviceType, ExternCall, Graph, GraphInput, GraphName,
    GraphOutput, IndexPutFallback, KernelBackend, KernelCall, KernelName, KeyEntry, KeyPathText, Layout, Line, LineAt,
    Location, MultiIndex, MultiOutput, Predicate, Program, ProgramInfo, ScatterFallback, Switch, SymbolKind,
    TensorMethod, WhileLoop,
};
use crate::lower::launches::{PrintedArg, PrintedLaunch, PrintedRange, PrintedScratch};
use crate::sym::{SymExpr, Symbol};
use indexmap::{IndexMap, IndexSet};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::rc::Rc;

/// Writes one line of the body (indented) straight from format arguments.
macro_rules! emit {
    ($l:ident, $($arg:tt)*) => {{
        $l.indent_body();
        // Writing into a String cannot fail.
        let _ = write!($l.body, $($arg)*);
        $l.body.push('\n');
    }};
}

mod aoti;
mod control;
mod dialect;
mod direct;
mod externs;
mod frame;
mod graph;
mod kernels;
mod launch;
mod lines;
mod python_op;
mod record;
mod shim;
mod standalone;
mod symbols;
mod tensors;
mod text;

use dialect::{DialectOps, ExternSite};
use graph::*;
use launch::KernelWrappers;
use record::*;
pub(super) use text::runtime_dtype_enumerators;
use text::*;

/// Where an error is: a line of a graph, made into a [`Location`] only when
/// an error is.
type Cx<'c> = LineAt<'c>;

/// Lowers a whole program and appends the text to `out`.
pub(super) fn lower(info: &ProgramInfo<'_>, options: &Options, out: &mut dyn fmt::Write) -> Result<(), Error> {
    lower_program(Lowering::new(info, options), out).map(|_| ())
}

/// Lowers a whole program and returns every Triton launch as printed: the
/// values each call site passes to the `kernel_args_` of its `call_<kernel>`
/// wrapper, and the wrapper's grid and scratch sizes with the wrapper's
/// parameters replaced by those values.
pub(super) fn lower_recording_launches(
    info: &ProgramInfo<'_>,
    options: &Options,
    out: &mut dyn fmt::Write,
) -> Result<Vec<PrintedLaunch>, Error> {
    let program = info.program();
    let mut l = Lowering::new(info, options);
    l.recorded = Some(Recorded::default());
    let recorded = lower_program(l, out)?;
    let recorded = recorded.unwrap_or_default();
    let mut launches = Vec::with_capacity(recorded.calls.len());
    for call in recorded.calls {
        // Internal: a wrapper is written for every kernel a recorded call launches.
        let wrapper = recorded.wrappers.get(&call.kernel).ok_or_else(|| {
            Error::invalid(
                call.location(program),
                format!("no launch wrapper was written for kernel `{}`", call.kernel),
            )
        })?;
        launches.push(call.compose(wrapper, program)?);
    }
    Ok(launches)
}

/// Lowers the program and appends the whole file to `out` (nothing is written
/// when the lowering fails before the file is assembled).
fn lower_program(mut l: Lowering<'_>, out: &mut dyn fmt::Write) -> Result<Option<Recorded>, Error> {
    let (body, wrappers) = lower_body(&mut l)?;
    l.assemble(out, &body, &wrappers)?;
    Ok(l.recorded)
}

/// Lowers a whole program to a new string: [`lower`], with the file built
/// around the body in place (the body is the bulk of the text).
pub(super) fn lower_to_string(info: &ProgramInfo<'_>, options: &Options) -> Result<String, Error> {
    let mut l = Lowering::new(info, options);
    let (mut body, wrappers) = lower_body(&mut l)?;
    let mut head = String::new();
    l.write_head(&mut head, &wrappers)?;
    l.write_tail(&mut body)?;
    body.insert_str(0, &head);
    Ok(body)
}

/// The entry's body and the launch wrappers.
fn lower_body(l: &mut Lowering<'_>) -> Result<(String, KernelWrappers), Error> {
    let program = l.program;
    l.indent = 1;
    l.entry_prologue()?;
    let main = GraphCtx::new(&program.main, None, &program.constants)?;
    l.graph_lines(&main)?;
    l.entry_outputs(&main)?;
    let body = std::mem::take(&mut l.body);
    let called: Vec<KernelName> = l.called_kernels.iter().cloned().collect();
    let wrappers = launch::kernel_wrappers(l, &called)?;
    Ok((body, wrappers))
}

/// Per-scope declarations (C++ blocks).
#[derive(Default)]
struct Scope {
    names: HashSet<String>,
    streams: HashSet<u32>,
    device_guard: bool,
}

/// Shared lowering state.
struct Lowering<'a> {
    /// What validation established: kernel and subgraph lookups need no
    /// error of their own.
    info: &'a ProgramInfo<'a>,
    program: &'a Program,
    options: &'a Options,
    /// What the dialect writes differently.
    dialect: &'static dyn DialectOps,
    body: String,
    indent: usize,
    dtypes: IndexSet<DType>,
    devices: IndexSet<DeviceType>,
    next_array: usize,
    next_tmp: usize,
    /// Kernels called anywhere, in first-call order.
    called_kernels: IndexSet<KernelName>,
    /// File-level text of directly called kernels (sources or declarations), by kernel.
    direct_decls: IndexMap<KernelName, String>,
    /// Halide kernels are called (the buffer helper is needed); on CUDA too.
    halide: Option<direct::HalideUse>,
    scopes: Vec<Scope>,
    /// Index of the line being lowered in its graph.
    line_index: usize,
    /// Triton launches as printed, when recording.
    recorded: Option<Recorded>,
    /// Each called Triton kernel's metadata and launch plan.
    call_plans: HashMap<KernelName, (&'a crate::ir::TritonMeta, Rc<launch::CallPlan>)>,
}

impl<'a> Lowering<'a> {
    fn new(info: &'a ProgramInfo<'a>, options: &'a Options) -> Self {
        let program = info.program();
        Lowering {
            info,
            program,
            options,
            dialect: dialect::ops(options.dialect),
            // Large enough for the usual ~100-130 bytes per line; pages never
            // written cost nothing.
            body: String::with_capacity(program.main.lines.len().saturating_mul(160)),
            indent: 0,
            dtypes: IndexSet::new(),
            devices: IndexSet::new(),
            next_array: 0,
            next_tmp: 0,
            called_kernels: IndexSet::new(),
            direct_decls: IndexMap::new(),
            halide: None,
            // The entry's scope declares about one variable per main-graph buffer.
            scopes: vec![Scope {
                names: HashSet::with_capacity_and_hasher(program.main.buffers.len(), Default::default()),
                ..Scope::default()
            }],
            line_index: 0,
            recorded: None,
            call_plans: HashMap::default(),
        }
    }

    /// The dialect's operations ([`DialectOps`]).
    fn dialect(&self) -> &'static dyn DialectOps {
        self.dialect
    }

    fn line(&mut self, text: impl AsRef<str>) {
        self.indent_body();
        self.body.push_str(text.as_ref());
        self.body.push('\n');
    }

    /// Starts a body line: its indentation.
    fn indent_body(&mut self) {
        for _ in 0..self.indent {
            self.body.push_str("    ");
        }
    }

    fn cstyle(&self) -> CStyle {
        CStyle {
            rewrite_c10: self.options.dialect.rewrites_c10(),
            int_suffix: self.options.int_suffix,
        }
    }

    /// [`Lowering::cexpr`] as a value that prints it.
    fn cx_expr<'e>(&self, e: &'e SymExpr) -> CExpr<'e> {
        CExpr {
            e,
            style: self.cstyle(),
        }
    }

    /// [`Lowering::use_dtype`] as a value that prints it.
    fn dtype_name(&mut self, d: DType) -> DTypeName {
        self.dtypes.insert(d);
        DTypeName {
            dtype: d,
            dialect: self.dialect,
        }
    }

    fn blank(&mut self) {
        self.body.push('\n');
    }

    fn open(&mut self, text: impl AsRef<str>) {
        self.line(text);
        self.indent += 1;
        self.scopes.push(Scope::default());
    }

    fn close(&mut self, text: impl AsRef<str>) {
        self.indent = self.indent.saturating_sub(1);
        self.scopes.pop();
        self.line(text);
    }

    fn declared(&self, name: &str) -> bool {
        self.scopes.iter().any(|s| s.names.contains(name))
    }

    fn declare(&mut self, name: &str) {
        if let Some(s) = self.scopes.last_mut() {
            s.names.insert(name.to_string());
        }
    }

    /// [`Lowering::declare`] of a buffer's variable.
    fn declare_var(&mut self, name: Var<'_>) {
        if let Some(s) = self.scopes.last_mut() {
            s.names.insert(name.to_string());
        }
    }

    fn tmp(&mut self, stem: &str) -> String {
        let n = self.next_tmp;
        self.next_tmp += 1;
        format!("{stem}_{n}")
    }

    /// An expression in C++ form with the configured literal suffix.
    fn cexpr(&self, e: &SymExpr) -> String {
        cexpr_text(e, self.cstyle())
    }

    fn use_dtype(&mut self, d: DType) -> String {
        self.dtype_name(d).to_string()
    }

    fn use_device(&mut self, d: DeviceType) {
        self.devices.insert(d);
    }

    fn unsupported(&self, at: impl Into<Location>, what: impl Into<String>) -> Error {
        {
            Error::new(
                at.into(),
                ErrorKind::NotSupported {
                    dialect: self.options.dialect.name(),
                    what: what.into(),
                },
            )
        }
    }
}
