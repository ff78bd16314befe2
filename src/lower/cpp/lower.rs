//! Graph lines to C++ statements, and the whole-file frame.

use super::launch::{self, KernelWrappers};

mod direct;
mod python_op;
mod shim;
use super::{Dialect, Error, IntSuffix, Options};
use crate::ir::MAIN_GRAPH;
use crate::ir::{
    ArgValue, BufName, BufferKind, Conditional, DType, Device, DeviceType, ExternCall, Graph, GraphInput, GraphName,
    GraphOutput, KernelBackend, KernelCall, KernelName, KeyEntry, KeyPathText, Layout, Line, MultiIndex, Predicate,
    Program, ScatterFallback, SymbolKind, TensorMethod, WhileLoop,
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

/// A buffer's C++ variable ([`GraphCtx::local`]) without building the string.
#[derive(Clone, Copy)]
struct Var<'x> {
    prefix: &'x str,
    name: &'x str,
}

impl fmt::Display for Var<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.prefix.is_empty() && !self.name.starts_with(self.prefix) {
            f.write_str(self.prefix)?;
        }
        f.write_str(self.name)
    }
}

/// How [`Lowering::cexpr`] prints.
#[derive(Clone, Copy)]
pub(super) struct CStyle {
    standalone: bool,
    int_suffix: IntSuffix,
}

/// An expression printed as [`Lowering::cexpr`] prints it, without building
/// the string when no rewriting is needed.
#[derive(Clone, Copy)]
pub(super) struct CExpr<'e> {
    e: &'e SymExpr,
    style: CStyle,
}

impl fmt::Display for CExpr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.style.int_suffix == IntSuffix::L && !(self.style.standalone && has_c10_helper(self.e)) {
            return crate::sym::print::write_cpp(f, self.e);
        }
        f.write_str(&cexpr_text(self.e, self.style))
    }
}

/// `true` when the standalone dialect rewrites the C++ form of `e`: it calls
/// `c10::div_floor_integer` or `c10::div_mod`, or holds `i64::MIN`, which
/// Inductor prints `(-1L << 63)` (a shift of a negative value, undefined
/// before C++20; the standalone dialect prints `INT64_MIN`).
fn has_c10_helper(e: &SymExpr) -> bool {
    match e {
        SymExpr::Int(v) => *v == i64::MIN,
        SymExpr::Bool(_) | SymExpr::Sym(_) => false,
        SymExpr::FloorDiv(..) | SymExpr::CleanDiv(..) | SymExpr::PythonMod(..) => true,
        SymExpr::Add(v) | SymExpr::Mul(v) | SymExpr::Min(v) | SymExpr::Max(v) | SymExpr::And(v) | SymExpr::Or(v) => {
            v.iter().any(has_c10_helper)
        }
        SymExpr::Mod(a, b) | SymExpr::Cmp(_, a, b) => has_c10_helper(a) || has_c10_helper(b),
        SymExpr::ModularIndexing(a, b, c) => has_c10_helper(a) || has_c10_helper(b) || has_c10_helper(c),
        SymExpr::Pow(a, _) | SymExpr::Not(a) => has_c10_helper(a),
    }
}

/// An expression in C++ form with the configured literal suffix.
fn cexpr_text(e: &SymExpr, style: CStyle) -> String {
    let mut text = crate::sym::print::cpp(e);
    if style.standalone {
        // The runtime header provides c10's integer helpers without libtorch.
        text = text
            .replace("c10::div_floor_integer(", "wrapir::div_floor_integer(")
            .replace("c10::div_mod(", "wrapir::div_mod(")
            .replace("(-1L << 63)", "INT64_MIN");
    }
    match style.int_suffix {
        IntSuffix::L => text,
        IntSuffix::LL => widen_suffix(&text),
    }
}

/// The name of the `n`th `int_array_<n>`.
#[derive(Clone, Copy)]
struct ArrayName(usize);

impl fmt::Display for ArrayName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "int_array_{}", self.0)
    }
}

/// A dtype as the dialect names it ([`Lowering::use_dtype`]).
#[derive(Clone, Copy)]
struct DTypeName {
    dtype: DType,
    standalone: bool,
}

impl fmt::Display for DTypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.standalone {
            write!(f, "wrapir::DType::{}", runtime_dtype(self.dtype))
        } else {
            write!(f, "cached_torch_dtype_{}", self.dtype.torch_name())
        }
    }
}

/// Where an error is: a line of a graph. Printed only when an error is made.
#[derive(Clone, Copy)]
pub(super) enum Cx<'c> {
    /// `graph `<graph>`, line <index> (`<kind>`)`.
    Line {
        graph: &'c str,
        index: usize,
        line: &'c Line,
    },
    /// `graph `<graph>`, line <index> (`get`)`: a multi-output line read ahead.
    Get { graph: &'c str, index: usize },
}

impl fmt::Display for Cx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cx::Line { graph, index, line } => write!(f, "graph `{graph}`, line {index} (`{}`)", line.kind()),
            Cx::Get { graph, index } => write!(f, "graph `{graph}`, line {index} (`get`)"),
        }
    }
}

impl From<&Cx<'_>> for String {
    fn from(cx: &Cx<'_>) -> String {
        cx.to_string()
    }
}

/// Lowers a whole program and appends the text to `out`.
pub(super) fn lower(program: &Program, options: &Options, out: &mut dyn fmt::Write) -> Result<(), Error> {
    lower_program(Lowering::new(program, options), out).map(|_| ())
}

/// Lowers a whole program and returns every Triton launch as printed: the
/// values each call site passes to the `kernel_args_` of its `call_<kernel>`
/// wrapper, and the wrapper's grid and scratch sizes with the wrapper's
/// parameters replaced by those values.
pub(super) fn lower_recording_launches(
    program: &Program,
    options: &Options,
    out: &mut dyn fmt::Write,
) -> Result<Vec<PrintedLaunch>, Error> {
    let mut l = Lowering::new(program, options);
    l.recorded = Some(Recorded::default());
    let recorded = lower_program(l, out)?;
    let recorded = recorded.unwrap_or_default();
    let mut launches = Vec::with_capacity(recorded.calls.len());
    for call in recorded.calls {
        let wrapper = recorded.wrappers.get(&call.kernel).ok_or_else(|| Error::Invalid {
            context: format!("graph `{}`, line {}", call.graph, call.line),
            message: format!("no launch wrapper was written for kernel `{}`", call.kernel),
        })?;
        launches.push(call.compose(wrapper)?);
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
pub(super) fn lower_to_string(program: &Program, options: &Options) -> Result<String, Error> {
    let mut l = Lowering::new(program, options);
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
    let main = GraphCtx::new(&program.main, None, program, "main")?;
    l.graph_lines(&main)?;
    l.entry_outputs(&main)?;
    let body = std::mem::take(&mut l.body);
    let called: Vec<KernelName> = l.called_kernels.iter().cloned().collect();
    let wrappers = launch::kernel_wrappers(l, &called)?;
    Ok((body, wrappers))
}

/// Launches recorded while lowering (see [`lower_recording_launches`]).
#[derive(Debug, Default)]
pub(super) struct Recorded {
    /// Each Triton call site, in lowering order.
    calls: Vec<RecordedCall>,
    /// What each kernel's launch wrapper launches.
    pub(super) wrappers: HashMap<KernelName, launch::WrapperLaunch>,
}

/// One `call_<kernel>(...)` as printed.
#[derive(Debug)]
struct RecordedCall {
    kernel: KernelName,
    graph: GraphName,
    line: usize,
    /// Wrapper parameter -> the value printed for it.
    args: Vec<(String, ArgValue)>,
}

impl RecordedCall {
    /// The launch: the wrapper's `kernel_args_`, grid and scratch with its
    /// parameters bound to the values this call passes.
    fn compose(self, w: &launch::WrapperLaunch) -> Result<PrintedLaunch, Error> {
        let value = |name: &str| self.args.iter().find(|(p, _)| p == name).map(|(_, v)| v);
        let bound: HashMap<&str, SymExpr> = self
            .args
            .iter()
            .filter_map(|(p, v)| match v {
                ArgValue::Expr(e) => Some((p.as_str(), e.clone())),
                ArgValue::Bool(b) => Some((p.as_str(), SymExpr::Int(i64::from(*b)))),
                _ => None,
            })
            .collect();
        let subst = |e: &SymExpr| e.substitute(&|s: &Symbol| bound.get(s.as_str()).cloned());
        let mut args = Vec::with_capacity(w.kernel_args.len());
        for p in &w.kernel_args {
            let v = value(p).ok_or_else(|| Error::Invalid {
                context: format!("graph `{}`, line {}", self.graph, self.line),
                message: format!("call of `{}` passes nothing for wrapper parameter `{p}`", self.kernel),
            })?;
            args.push(PrintedArg {
                param: Some(p.clone()),
                value: v.clone(),
            });
        }
        let [g0, g1, g2] = &w.grid;
        Ok(PrintedLaunch {
            kernel: self.kernel.clone(),
            graph: self.graph.clone(),
            line: self.line,
            args,
            grid: Some([subst(g0), subst(g1), subst(g2)]),
            scratch: Some(
                w.scratch
                    .iter()
                    .map(|s| PrintedScratch {
                        pointer: s.pointer,
                        bytes: s.bytes.as_ref().map(subst),
                    })
                    .collect(),
            ),
            ranges: w
                .ranges
                .iter()
                .map(|r| PrintedRange {
                    what: r.what.clone(),
                    value: subst(&r.value),
                    lo: r.lo,
                    hi: r.hi,
                })
                .collect(),
        })
    }
}

/// Per-scope declarations (C++ blocks).
#[derive(Default)]
struct Scope {
    names: HashSet<String>,
    streams: HashSet<u32>,
    device_guard: bool,
}

/// Shared lowering state.
pub(super) struct Lowering<'a> {
    pub(super) program: &'a Program,
    pub(super) options: &'a Options,
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
    pub(super) recorded: Option<Recorded>,
    /// Each called Triton kernel's metadata and launch plan.
    call_plans: HashMap<KernelName, (&'a crate::ir::TritonMeta, Rc<launch::CallPlan>)>,
}

/// One graph being lowered: its table, local-name prefix and multi-output map.
///
/// C++ receives the tensors of a multi-output value as separate variables
/// (upstream passes one out-handle per `MultiOutput`), so every extracted
/// element is declared by the line that produces the value, and a `get` line
/// prints nothing. Elements are addressed by *paths* of list/tuple indices
/// from the produced value (the *root*): `get buf3 = buf1[0][1]` is path
/// `[0, 1]`, a chain `get buf2 = buf1[0]; get buf3 = buf2[1]` (with `buf2`
/// declared `multi`) is the same path, and `get buf2 = buf1` (empty indices,
/// the whole value of a single-output op such as `nonzero`) is path `[]`: the
/// op's one output is written straight into `buf2`, as Inductor prints it.
struct GraphCtx<'a> {
    graph: &'a Graph,
    /// `None` for main.
    name: Option<&'a GraphName>,
    prefix: String,
    /// Root -> element path -> extracted buffer (`None`: not extracted, but
    /// reached by an unbacked binding; it gets a placeholder variable).
    elements: HashMap<BufName, BTreeMap<Vec<usize>, Option<BufName>>>,
    /// Tensors defined by a `MultiOutput` line -> (root, path).
    extracted: HashMap<BufName, (BufName, Vec<usize>)>,
    /// Multi-valued `MultiOutput` results -> (root, path) of the part they name.
    parts: HashMap<BufName, (BufName, Vec<usize>)>,
    /// The graph's multi-output buffers (usually few or none).
    multi: HashSet<&'a str>,
}

/// `[0][1]` for a path (`` for the whole value).
fn path_text(path: &[usize]) -> String {
    path.iter().map(|i| format!("[{i}]")).collect()
}

/// Leading `Index` keys of a key path as element indices (stops at a negative one).
fn index_prefix(path: &[KeyEntry]) -> Vec<usize> {
    path.iter()
        .map_while(|k| match k {
            KeyEntry::Index(i) => usize::try_from(*i).ok(),
            _ => None,
        })
        .collect()
}

impl<'a> GraphCtx<'a> {
    fn new(graph: &'a Graph, name: Option<&'a GraphName>, _program: &Program, label: &str) -> Result<Self, Error> {
        let prefix = name.map(|n| format!("{n}_")).unwrap_or_default();
        let mut ctx = GraphCtx {
            graph,
            name,
            prefix,
            elements: HashMap::default(),
            extracted: HashMap::default(),
            parts: HashMap::default(),
            multi: graph
                .buffers
                .iter()
                .filter(|(_, d)| matches!(d.kind, BufferKind::Multi))
                .map(|(b, _)| b.as_str())
                .collect(),
        };
        for (i, line) in graph.lines.iter().enumerate() {
            let Line::MultiOutput {
                result,
                source,
                indices,
            } = line
            else {
                continue;
            };
            let cx = Cx::Get { graph: label, index: i };
            let mut steps = Vec::with_capacity(indices.len());
            for index in indices {
                match index {
                    MultiIndex::List(k) | MultiIndex::Tuple(k) => {
                        steps.push(usize::try_from(*k).map_err(|_| Error::Invalid {
                            context: cx.to_string(),
                            message: format!(
                                "negative multi-output index {k} extracting `{result}` from `{source}`"
                            ),
                        })?)
                    }
                    MultiIndex::Dict(key) => {
                        return Err(Error::Unsupported {
                            context: cx.to_string(),
                            dialect: "both dialects",
                            what: format!(
                                "extracting `{result}` from `{source}` by the dict key {}: C++ receives multi-outputs as a flat list of handles",
                                c_string(key)
                            ),
                        })
                    }
                }
            }
            let (root, mut path) = match ctx.parts.get(source) {
                Some((r, p)) => (r.clone(), p.clone()),
                None if ctx.is_multi(source) => (source.clone(), Vec::new()),
                // A whole tensor under a new name: an alias, printed at the line.
                None if steps.is_empty() => continue,
                None => {
                    return Err(Error::Invalid {
                        context: cx.to_string(),
                        message: format!("indexing into `{source}`, which is not a multi-output value"),
                    })
                }
            };
            path.extend(steps);
            if ctx.is_multi(result) {
                ctx.parts.insert(result.clone(), (root, path));
                continue;
            }
            ctx.add_element(&root, path.clone(), Some(result.clone()), &cx)?;
            ctx.extracted.insert(result.clone(), (root, path));
        }
        // Elements reached only by unbacked bindings still need a variable; a
        // path conflicting with the extracted ones is reported when lowered.
        for line in &graph.lines {
            let Line::UnbackedSymbolDefs { source, bindings } = line else {
                continue;
            };
            let Some((root, base)) = ctx.multi_origin(source) else {
                continue;
            };
            for path in bindings.values() {
                let mut full = base.clone();
                full.extend(index_prefix(path));
                let tree = ctx.elements.entry(root.clone()).or_default();
                if !tree.keys().any(|k| k.starts_with(&full) || full.starts_with(k)) {
                    tree.insert(full, None);
                }
            }
        }
        Ok(ctx)
    }

    /// Records element `path` of `root`; a path may not be extracted twice nor
    /// be both a tensor and a list.
    fn add_element(
        &mut self,
        root: &BufName,
        path: Vec<usize>,
        buffer: Option<BufName>,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let tree = self.elements.entry(root.clone()).or_default();
        let describe = |b: &Option<BufName>| b.as_ref().map_or("a binding".to_string(), |b| format!("`{b}`"));
        if let Some(existing) = tree.get(&path) {
            return Err(Error::Invalid {
                context: cx.to_string(),
                message: format!(
                    "element `{root}{}` is extracted twice ({} and {})",
                    path_text(&path),
                    describe(existing),
                    describe(&buffer)
                ),
            });
        }
        if let Some((other, b)) = tree.iter().find(|(k, _)| k.starts_with(&path) || path.starts_with(k)) {
            return Err(Error::Invalid {
                context: cx.to_string(),
                message: format!(
                    "`{root}{}` ({}) and `{root}{}` ({}) cannot both be tensors: one is inside the other",
                    path_text(&path),
                    describe(&buffer),
                    path_text(other),
                    describe(b)
                ),
            });
        }
        tree.insert(path, buffer);
        Ok(())
    }

    fn label(&self) -> String {
        match self.name {
            Some(n) => n.to_string(),
            None => "main".to_string(),
        }
    }

    /// The C++ variable of a buffer: subgraph buffers get the graph's name in front.
    fn local(&self, b: &BufName) -> String {
        if self.prefix.is_empty() || b.as_str().starts_with(&self.prefix) {
            b.to_string()
        } else {
            format!("{}{}", self.prefix, b)
        }
    }

    /// [`GraphCtx::local`] as a value that prints it.
    fn var<'x>(&'x self, b: &'x BufName) -> Var<'x> {
        Var {
            prefix: &self.prefix,
            name: b.as_str(),
        }
    }

    fn layout(&self, b: &BufName, context: &(impl fmt::Display + ?Sized)) -> Result<&'a Layout, Error> {
        self.graph.layout(b).ok_or_else(|| Error::Invalid {
            context: context.to_string(),
            message: format!("`{b}` is not declared as a tensor in graph `{}`", self.label()),
        })
    }

    fn is_multi(&self, b: &BufName) -> bool {
        !self.multi.is_empty() && self.multi.contains(b.as_str())
    }

    /// The variable of element `path` of `root`: the extracted buffer, or a
    /// placeholder `<root>_<i>_<j>` (released with the scope).
    fn element_var(&self, root: &BufName, path: &[usize]) -> String {
        match self.elements.get(root).and_then(|t| t.get(path)) {
            Some(Some(b)) => self.local(b),
            _ => {
                let mut name = self.local(root);
                for i in path {
                    let _ = write!(name, "_{i}");
                }
                name
            }
        }
    }

    /// Every tensor of a multi-output value, flattened in path order, with
    /// placeholders for the unextracted siblings of extracted elements (each
    /// assumed to be one tensor, as upstream passes one handle per output).
    fn leaf_vars(&self, root: &BufName) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(tree) = self.elements.get(root) {
            self.collect_leaves(root, tree, &mut Vec::new(), &mut out);
        }
        out
    }

    fn collect_leaves(
        &self,
        root: &BufName,
        tree: &BTreeMap<Vec<usize>, Option<BufName>>,
        prefix: &mut Vec<usize>,
        out: &mut Vec<String>,
    ) {
        if tree.contains_key(prefix.as_slice()) {
            out.push(self.element_var(root, prefix));
            return;
        }
        let children = tree
            .keys()
            .filter(|k| k.len() > prefix.len() && k.starts_with(prefix))
            .filter_map(|k| k.get(prefix.len()).copied())
            .max();
        let Some(last) = children else {
            out.push(self.element_var(root, prefix));
            return;
        };
        for i in 0..=last {
            prefix.push(i);
            self.collect_leaves(root, tree, prefix, out);
            prefix.pop();
        }
    }

    /// Variables receiving the outputs of a conditional or while loop: one per
    /// subgraph output (at least `count`); missing ones get `<root>_<i>` names.
    fn flat_vars(&self, root: &BufName, count: usize, cx: &Cx<'_>) -> Result<Vec<String>, Error> {
        let tree = self.elements.get(root);
        let mut len = count;
        for path in tree.into_iter().flat_map(|t| t.keys()) {
            match path.as_slice() {
                [i] => len = len.max(i + 1),
                _ => {
                    return Err(Error::Invalid {
                        context: cx.to_string(),
                        message: format!(
                            "`{root}{}` is not one output of the subgraph: `{root}` is a flat list of tensors",
                            path_text(path)
                        ),
                    })
                }
            }
        }
        Ok((0..len).map(|i| self.element_var(root, &[i])).collect())
    }

    /// Root and path of a multi-output value or a part of one.
    fn multi_origin(&self, b: &BufName) -> Option<(BufName, Vec<usize>)> {
        match self.parts.get(b) {
            Some(origin) => Some(origin.clone()),
            None if self.is_multi(b) => Some((b.clone(), Vec::new())),
            None => None,
        }
    }
}

impl<'a> Lowering<'a> {
    fn new(program: &'a Program, options: &'a Options) -> Self {
        Lowering {
            program,
            options,
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

    pub(super) fn standalone(&self) -> bool {
        self.options.dialect == Dialect::Standalone
    }

    pub(super) fn dialect_name(&self) -> &'static str {
        match self.options.dialect {
            Dialect::Aoti => "aoti dialect",
            Dialect::Standalone => "standalone dialect",
        }
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

    pub(super) fn cstyle(&self) -> CStyle {
        CStyle {
            standalone: self.standalone(),
            int_suffix: self.options.int_suffix,
        }
    }

    /// [`Lowering::cexpr`] as a value that prints it.
    pub(super) fn cx_expr<'e>(&self, e: &'e SymExpr) -> CExpr<'e> {
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
            standalone: self.standalone(),
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
    pub(super) fn cexpr(&self, e: &SymExpr) -> String {
        cexpr_text(e, self.cstyle())
    }

    pub(super) fn use_dtype(&mut self, d: DType) -> String {
        self.dtypes.insert(d);
        if self.standalone() {
            format!("wrapir::DType::{}", runtime_dtype(d))
        } else {
            format!("cached_torch_dtype_{}", d.torch_name())
        }
    }

    pub(super) fn use_device(&mut self, d: DeviceType) {
        self.devices.insert(d);
    }

    fn unsupported(&self, context: &(impl fmt::Display + ?Sized), what: impl Into<String>) -> Error {
        Error::Unsupported {
            context: context.to_string(),
            dialect: self.dialect_name(),
            what: what.into(),
        }
    }

    // ---- frame -------------------------------------------------------------

    fn entry_prologue(&mut self) -> Result<(), Error> {
        let program = self.program;
        let main = &program.main;
        let tensor_inputs: Vec<&BufName> = main
            .inputs
            .iter()
            .filter_map(|i| match i {
                GraphInput::Tensor { name } => Some(name),
                GraphInput::Symbol { .. } => None,
            })
            .chain(program.constants.keys())
            .collect();
        let total = main.inputs.len() + program.constants.len();
        if !self.standalone() {
            self.line("py::gil_scoped_release_simple release;");
            self.blank();
            self.line(format!(
                "auto inputs = steal_from_raw_handles_to_raii_handles(input_handles, {total});"
            ));
        }
        let mut symbol_binds = Vec::new();
        let mut tensor_index = 0usize;
        let mut scalar_index = 0usize;
        let mut handle_index = 0usize;
        let inputs = main
            .inputs
            .iter()
            .map(Some)
            .chain(program.constants.keys().map(|_| None));
        let constant_names: Vec<&BufName> = program.constants.keys().collect();
        let mut constant_iter = constant_names.into_iter();
        for input in inputs {
            match input {
                Some(GraphInput::Symbol { name, symbol }) => {
                    if self.standalone() {
                        self.line(format!("int64_t {name} = scalar_inputs[{scalar_index}];"));
                    } else {
                        self.line(format!("int64_t {name};"));
                        self.line(format!(
                            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(inputs[{handle_index}], &{name}));"
                        ));
                    }
                    self.declare(name.as_str());
                    scalar_index += 1;
                    if name.as_str() != symbol.as_str() {
                        symbol_binds.push((symbol.clone(), name.to_string()));
                    } else {
                        self.declare(symbol.as_str());
                    }
                }
                other => {
                    let name = match other {
                        Some(GraphInput::Tensor { name }) => name,
                        _ => match constant_iter.next() {
                            Some(c) => c,
                            None => break,
                        },
                    };
                    if self.standalone() {
                        self.line(format!("wrapir::Tensor {name} = inputs[{tensor_index}];"));
                    } else {
                        self.line(format!("auto {name} = std::move(inputs[{handle_index}]);"));
                    }
                    tensor_index += 1;
                }
            }
            handle_index += 1;
        }
        for (symbol, name) in symbol_binds {
            self.line(format!("int64_t {symbol} = {name};"));
            self.declare(symbol.as_str());
        }
        // Backed symbols that are plain sizes or strides of a tensor input.
        for input in &tensor_inputs {
            let layout = if let Some(l) = main.layout(input) {
                l
            } else if let Some(l) = program.constants.get(*input) {
                l
            } else {
                return Err(Error::Invalid {
                    context: "graph `main`, inputs".into(),
                    message: format!("tensor input `{input}` has no tensor layout in the buffer table"),
                });
            };
            for (what, dims) in [("size", &layout.size), ("stride", &layout.stride)] {
                let mut header = false;
                for (d, e) in dims.iter().enumerate() {
                    let SymExpr::Sym(s) = e else { continue };
                    if self.declared(s.as_str()) {
                        continue;
                    }
                    if !header {
                        if self.standalone() {
                            header = true;
                        } else {
                            self.line(format!("auto {input}_{what} = {input}.{what}s();"));
                            header = true;
                        }
                    }
                    if self.standalone() {
                        self.line(format!("int64_t {s} = {input}.{what}({d});"));
                    } else {
                        self.line(format!("int64_t {s} = {input}_{what}[{d}];"));
                    }
                    self.declare(s.as_str());
                }
            }
        }
        for (s, decl) in &program.symbols {
            if decl.kind == SymbolKind::Backed && !self.declared(s.as_str()) {
                return Err(Error::Invalid {
                    context: "graph `main`, inputs".into(),
                    message: format!(
                        "cannot bind backed symbol `{s}`: it is neither a symbol input nor a plain size or stride of a tensor input"
                    ),
                });
            }
        }
        Ok(())
    }

    fn entry_outputs(&mut self, main: &GraphCtx<'_>) -> Result<(), Error> {
        let mut released: HashMap<String, usize> = HashMap::default();
        let target = if self.standalone() { "outputs" } else { "output_handles" };
        for (i, out) in main.graph.outputs.iter().enumerate() {
            match out {
                GraphOutput::Buffer(b) => {
                    let name = main.local(b);
                    if let Some(first) = released.get(&name) {
                        if self.standalone() {
                            self.line(format!("outputs[{i}] = outputs[{first}];"));
                        } else {
                            self.line(format!(
                                "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(output_handles[{first}], &output_handles[{i}]));"
                            ));
                        }
                    } else {
                        if self.standalone() {
                            self.line(format!("outputs[{i}] = std::move({name});"));
                        } else {
                            self.line(format!("output_handles[{i}] = {name}.release();"));
                        }
                        released.insert(name, i);
                    }
                }
                GraphOutput::Expr(e) => {
                    let v = self.cexpr(e);
                    if self.standalone() {
                        self.line(format!("outputs[{i}] = wrapir::scalar_to_tensor({v}, stream);"));
                    } else {
                        // A named RAII handle, released into the array: the
                        // temporary's destructor would free the handle it returns.
                        self.line(format!(
                            "RAIIAtenTensorHandle scalar_to_tensor_{i} = scalar_to_tensor_handle({v});"
                        ));
                        self.line(format!("{target}[{i}] = scalar_to_tensor_{i}.release();"));
                    }
                }
                GraphOutput::None => {
                    if self.standalone() {
                        self.line(format!("outputs[{i}] = wrapir::Tensor();"));
                    } else {
                        self.line(format!("output_handles[{i}] = nullptr;"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the whole file around `body`.
    fn assemble(&mut self, out: &mut dyn fmt::Write, body: &str, wrappers: &KernelWrappers) -> Result<(), Error> {
        self.write_head(out, wrappers)?;
        out.write_str(body)?;
        self.write_tail(out)
    }

    /// The file up to the entry function's body.
    fn write_head(&mut self, out: &mut dyn fmt::Write, wrappers: &KernelWrappers) -> Result<(), Error> {
        if self.standalone() {
            let entry = self.options.entry().to_string();
            out.write_str("// Generated by wrapir: a standalone wrapper over the CUDA driver API.\n")?;
            if self.options.inline_runtime {
                // `#pragma once` is only meaningful in a header file.
                out.write_str(&super::RUNTIME_HEADER.replacen("#pragma once\n", "", 1))?;
                out.write_char('\n')?;
            } else {
                out.write_str("#include \"wrapir_runtime.h\"\n")?;
            }
            out.write_char('\n')?;
            let dir = self.options.cubin_dir.as_deref().unwrap_or(".");
            writeln!(
                out,
                "#ifndef WRAPIR_CUBIN_DIR\n#define WRAPIR_CUBIN_DIR {}\n#endif",
                c_string(dir)
            )?;
            self.direct_text(out)?;
            out.write_char('\n')?;
            out.write_str(&wrappers.text)?;
            writeln!(
                out,
                "\nstatic void {entry}_impl(const wrapir::Tensor* inputs, const int64_t* scalar_inputs, wrapir::Tensor* outputs, CUstream stream) {{"
            )?;
            writeln!(
                out,
                "    (void)inputs;\n    (void)scalar_inputs;\n    (void)outputs;\n    (void)stream;"
            )?;
        } else {
            out.write_str(AOTI_PRELUDE)?;
            for d in &self.dtypes {
                writeln!(out, "CACHE_TORCH_DTYPE({});", d.torch_name())?;
            }
            for d in &self.devices {
                writeln!(out, "CACHE_TORCH_DEVICE({});", d.as_str())?;
            }
            if let Some(h) = self.halide {
                out.write_str("\n#include \"HalideRuntime.h\"\n")?;
                if h.cuda {
                    out.write_str("#include \"HalideRuntimeCuda.h\"\n")?;
                }
            }
            self.direct_text(out)?;
            out.write_char('\n')?;
            out.write_str(&wrappers.text)?;
            out.write_str("\nvoid inductor_entry_impl(\n")?;
            out.write_str("    AtenTensorHandle* input_handles,  // handles are stolen; the array is borrowed\n")?;
            out.write_str(
                "    AtenTensorHandle* output_handles  // handles are stolen by the caller; the array is borrowed\n",
            )?;
            out.write_str(") {\n")?;
        }
        Ok(())
    }

    /// The file after the entry function's body.
    fn write_tail(&self, out: &mut dyn fmt::Write) -> Result<(), Error> {
        if self.standalone() {
            let entry = self.options.entry().to_string();
            writeln!(out, "}}\n")?;
            writeln!(
                out,
                "extern \"C\" int {entry}(const wrapir::Tensor* inputs, const int64_t* scalar_inputs, wrapir::Tensor* outputs, CUstream stream) noexcept {{"
            )?;
            out.write_str("    try {\n")?;
            writeln!(out, "        {entry}_impl(inputs, scalar_inputs, outputs, stream);")?;
            out.write_str("        return 0;\n    } catch (const std::exception& e) {\n")?;
            out.write_str("        wrapir::last_error() = e.what();\n        return 1;\n    }\n}\n\n")?;
            writeln!(
                out,
                "extern \"C\" const char* {entry}_last_error() {{ return wrapir::last_error().c_str(); }}"
            )?;
        } else {
            out.write_str("} // inductor_entry_impl\n")?;
        }
        Ok(())
    }

    /// The Halide helper and the sources/declarations of directly called kernels.
    fn direct_text(&self, out: &mut dyn fmt::Write) -> Result<(), Error> {
        if self.halide.is_some() {
            out.write_char('\n')?;
            out.write_str(direct::HALIDE_HELPER)?;
        }
        for text in self.direct_decls.values() {
            out.write_char('\n')?;
            out.write_str(text)?;
        }
        Ok(())
    }

    // ---- lines -------------------------------------------------------------

    fn graph_lines(&mut self, g: &GraphCtx<'a>) -> Result<(), Error> {
        let label = g.name.map_or("main", |n| n.as_str());
        for (i, line) in g.graph.lines.iter().enumerate() {
            let context = Cx::Line {
                graph: label,
                index: i,
                line,
            };
            // Nested graphs (conditionals, loops) set their own indices; each
            // line sets its index again before it is lowered.
            self.line_index = i;
            self.line_(g, line, &context)?;
        }
        Ok(())
    }

    fn line_(&mut self, g: &GraphCtx<'a>, line: &'a Line, cx: &Cx<'_>) -> Result<(), Error> {
        match line {
            Line::Allocate { buffer } => self.allocate(g, buffer, cx),
            Line::FreeIfNotReused { buffer, is_reused } => {
                if !*is_reused && !g.is_multi(buffer) {
                    let v = g.var(buffer);
                    emit!(self, "{v}.reset();");
                }
                Ok(())
            }
            Line::Free { buffer } => {
                if !g.is_multi(buffer) {
                    let v = g.var(buffer);
                    emit!(self, "{v}.reset();");
                }
                Ok(())
            }
            Line::Reuse { old, new, delete_old } => self.reuse(g, old, new, *delete_old, cx),
            Line::Reinterpret { base, alias } => self.reinterpret(g, base, alias, cx),
            Line::KernelDefinition { kernel } => {
                if !self.program.kernels.contains_key(kernel) {
                    return Err(Error::Invalid {
                        context: cx.into(),
                        message: format!("kernel `{kernel}` is not defined"),
                    });
                }
                Ok(())
            }
            Line::KernelCall(call) => self.kernel_call(g, call, cx),
            Line::SymbolicCallArg { symbol, expr } => {
                let v = self.cx_expr(expr);
                if self.declared(symbol.as_str()) {
                    emit!(self, "{symbol} = {v};");
                } else {
                    emit!(self, "int64_t {symbol} = {v};");
                    self.declare(symbol.as_str());
                }
                Ok(())
            }
            Line::ExternKernelAlloc(call) => self.extern_call(g, call, None, cx),
            Line::ExternKernelOut { call, out } => self.extern_call(g, call, Some(out), cx),
            // Elements were declared by the line that produced the multi-output
            // value; the whole of a tensor under a new name is a new reference.
            Line::MultiOutput { result, source, .. } => {
                if g.multi_origin(source).is_none() && !g.is_multi(result) {
                    let (src, dst) = (g.local(source), g.local(result));
                    self.share(&src, &dst);
                }
                Ok(())
            }
            Line::IndexPutFallback {
                target,
                indices,
                values,
                accumulate,
            } => {
                let op = ExternCall {
                    result: None,
                    // As the interpreter calls it (`exec::device_ops::extern_uses`).
                    op: "torch.ops.aten.index_put_.default".into(),
                    args: vec![
                        ArgValue::Buffer(target.clone()),
                        ArgValue::List(
                            indices
                                .iter()
                                .map(|i| i.clone().map_or(ArgValue::None, ArgValue::Buffer))
                                .collect(),
                        ),
                        ArgValue::Buffer(values.clone()),
                        ArgValue::Bool(*accumulate),
                    ],
                    kwargs: IndexMap::new(),
                };
                if self.standalone() {
                    self.extern_call(g, &op, None, cx)
                } else {
                    self.device_of(g, target, cx)?;
                    // Handles, `nullptr` for a `None` index (not the `Tensor?[]` form).
                    let handles: Vec<String> = indices
                        .iter()
                        .map(|i| {
                            i.as_ref()
                                .map_or("nullptr".to_string(), |b| format!("{}.get()", g.local(b)))
                        })
                        .collect();
                    let idx = format!(
                        "std::array<AtenTensorHandle, {n}>{{{}}}.cbegin(), {n}",
                        handles.join(", "),
                        n = handles.len()
                    );
                    // `index_put_out` is one shim for every device (shim.h), as
                    // Inductor's IndexPutFallback calls it.
                    self.line(format!(
                        "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_index_put_out({t}, {t}, {idx}, {}, {}));",
                        g.local(values),
                        accumulate,
                        t = g.local(target),
                    ));
                    Ok(())
                }
            }
            Line::ScatterFallback(s) => self.scatter(g, s, cx),
            Line::DynamicScalar {
                symbol,
                source,
                keypath,
                ..
            } => {
                let layout = g.layout(source, cx)?;
                let raw = format!("{symbol}_raw");
                let src = g.local(source);
                if self.standalone() {
                    if layout.dtype.is_floating() {
                        return Err(
                            self.unsupported(cx, format!("item() of floating tensor `{source}` binding `{symbol}`"))
                        );
                    }
                    self.decl_line(&raw, "int64_t", &format!("wrapir::item_int64({src}, stream)"));
                } else {
                    let (ctype, shim) = match layout.dtype {
                        DType::Bool => ("bool", "bool"),
                        DType::Int8 => ("int8_t", "int8"),
                        DType::Int16 => ("int16_t", "int16"),
                        DType::Int32 => ("int32_t", "int32"),
                        DType::Int64 => ("int64_t", "int64"),
                        DType::Uint8 => ("uint8_t", "uint8"),
                        other => {
                            return Err(self.unsupported(
                                cx,
                                format!("item() of `{source}` ({other}) cannot bind the integer symbol `{symbol}`"),
                            ))
                        }
                    };
                    if !self.declared(&raw) {
                        self.line(format!("{ctype} {raw};"));
                        self.declare(&raw);
                    }
                    self.line(format!(
                        "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_{shim}({src}, &{raw}));"
                    ));
                }
                let described = format!("{source}.item()");
                self.bind_symbol(symbol, &raw, keypath, &described, cx)
            }
            Line::UnbackedSymbolDefs { source, bindings } => {
                for (symbol, path) in bindings {
                    self.unbacked(g, source, symbol, path, cx)?;
                }
                Ok(())
            }
            Line::Conditional(c) => self.conditional(g, c, cx),
            Line::WhileLoop(w) => self.while_loop(g, w, cx),
            Line::EnterDeviceContext { device_index } => {
                self.blank();
                let guarded = self.scopes.iter().any(|s| s.device_guard);
                if self.standalone() {
                    self.line(format!("wrapir::set_device({device_index});"));
                } else if guarded {
                    self.line(format!("device_guard.set_index({device_index});"));
                } else {
                    self.line(format!("AOTICudaGuard device_guard({device_index});"));
                }
                if let Some(s) = self.scopes.last_mut() {
                    s.device_guard = true;
                }
                Ok(())
            }
            Line::ExitDeviceContext => Ok(()),
            Line::Comment { text } => {
                if text.is_empty() {
                    self.line("//");
                }
                for t in text.lines() {
                    // `// {t}` without trailing whitespace.
                    let t = t.trim_end();
                    if t.is_empty() {
                        self.line("//");
                    } else {
                        emit!(self, "// {t}");
                    }
                }
                Ok(())
            }
            Line::AssertSizeStride {
                buffer,
                size,
                stride,
                context,
            } => {
                let b = g.local(buffer);
                let mut conds = Vec::new();
                if self.standalone() {
                    conds.push(format!("{b}.dim() == {}", size.len()));
                }
                for (d, e) in size.iter().enumerate() {
                    conds.push(format!("{b}.size({d}) == {}", self.cexpr(e)));
                }
                for (d, e) in stride.iter().enumerate() {
                    conds.push(format!("{b}.stride({d}) == {}", self.cexpr(e)));
                }
                let list = |v: &[SymExpr]| v.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
                let mut msg = format!(
                    "assert_size_stride failed for {buffer}: expected size [{}] and stride [{}]",
                    list(size),
                    list(stride)
                );
                if let Some(c) = context {
                    let _ = write!(msg, " ({c})");
                }
                let cond = if conds.is_empty() {
                    "true".to_string()
                } else {
                    conds.join(" && ")
                };
                self.line(format!(
                    "if (!({cond})) {{ throw std::runtime_error({}); }}",
                    c_string(&msg)
                ));
                Ok(())
            }
            Line::AssertAlignment {
                buffer,
                alignment,
                context,
            } => {
                let b = g.local(buffer);
                let ptr = if self.standalone() {
                    format!("{b}.data_ptr()")
                } else {
                    format!("reinterpret_cast<uintptr_t>({b}.data_ptr())")
                };
                let mut msg = format!("{buffer} is not aligned to {alignment} bytes");
                if let Some(c) = context {
                    let _ = write!(msg, " ({c})");
                }
                self.line(format!(
                    "if ({ptr} % {alignment} != 0) {{ throw std::runtime_error({}); }}",
                    c_string(&msg)
                ));
                Ok(())
            }
            Line::RuntimeAssert { cond, message, .. } => {
                let c = self.cx_expr(cond);
                let m = CString(message);
                emit!(self, "if (!({c})) {{ throw std::runtime_error({m}); }}");
                Ok(())
            }
            // Neither AOTI's C shim nor the standalone runtime can allocate
            // symmetric memory: a communication buffer becomes an ordinary
            // allocation, which collectives accept (without the symmetric-memory
            // fast path).
            Line::CommBufferAllocate {
                buffer,
                comm_kind,
                group,
            } => {
                self.line(format!(
                    "// {comm_kind} communication buffer {buffer} of group {}: allocated as an ordinary buffer",
                    c_string(group)
                ));
                self.allocate(g, buffer, cx)
            }
            Line::CommBufferFree { buffer } => {
                self.line(format!("{}.reset();  // communication buffer", g.local(buffer)));
                Ok(())
            }
        }
    }

    /// `type name = value;` on first declaration in scope, `name = value;` after.
    fn decl_line(&mut self, name: &str, ctype: &str, value: &str) {
        if self.declared(name) {
            self.line(format!("{name} = {value};"));
        } else {
            self.line(format!("{ctype} {name} = {value};"));
            self.declare(name);
        }
    }

    /// Writes an `int64_t` array of expressions and returns its name.
    fn int_array(&mut self, items: &[SymExpr]) -> String {
        self.int_array_name(items).to_string()
    }

    /// [`Lowering::int_array`], returning a value that prints the name.
    fn int_array_name(&mut self, items: &[SymExpr]) -> ArrayName {
        let name = ArrayName(self.next_array);
        self.next_array += 1;
        if items.is_empty() {
            emit!(self, "const int64_t* {name} = nullptr;");
            return name;
        }
        let all_int = items.iter().all(|e| e.as_int().is_some());
        let style = self.cstyle();
        self.indent_body();
        let out = &mut self.body;
        // Writing into a String cannot fail.
        let _ = if all_int {
            write!(out, "static constexpr int64_t {name}[] = {{")
        } else {
            write!(out, "const int64_t {name}[] = {{")
        };
        // `{a, }` for one element, `{a, b}` otherwise ([`brace_list`]).
        for (i, e) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{}", CExpr { e, style });
        }
        out.push_str(if items.len() == 1 { ", };\n" } else { "};\n" });
        name
    }

    fn device_index(d: &Device) -> u32 {
        d.index.unwrap_or(0)
    }

    fn allocate(&mut self, g: &GraphCtx<'_>, buffer: &BufName, cx: &Cx<'_>) -> Result<(), Error> {
        let layout = g.layout(buffer, cx)?;
        if layout.offset != SymExpr::Int(0) {
            return Err(self.unsupported(cx, format!("allocating `{buffer}` with a storage offset")));
        }
        let name = g.var(buffer);
        let rank = layout.rank();
        if self.standalone() && !matches!(layout.device.kind, DeviceType::Cuda | DeviceType::Cpu) {
            // Checked before anything is written for the line (as when the
            // arrays were written first, the lowering fails).
            return Err(self.unsupported(cx, format!("allocating `{buffer}` on {}", layout.device)));
        }
        let sizes = self.int_array_name(&layout.size);
        let strides = self.int_array_name(&layout.stride);
        let dtype = self.dtype_name(layout.dtype);
        if self.standalone() {
            let numel = layout.alloc_numel.as_ref().map(|n| self.cx_expr(n));
            let numel: &dyn fmt::Display = match &numel {
                Some(n) => n,
                None => &"-1",
            };
            if layout.device.kind == DeviceType::Cuda {
                emit!(
                    self,
                    "wrapir::Tensor {name} = wrapir::empty_strided({rank}, {sizes}, {strides}, {dtype}, {numel}, stream);"
                );
            } else {
                emit!(
                    self,
                    "wrapir::Tensor {name} = wrapir::empty_strided_host({rank}, {sizes}, {strides}, {dtype}, {numel});"
                );
            }
            self.declare_var(name);
            return Ok(());
        }
        self.devices.insert(layout.device.kind);
        let device_kind = layout.device.kind.as_str();
        let device_index = Self::device_index(&layout.device);
        match &layout.alloc_numel {
            None => {
                emit!(self, "AtenTensorHandle {name}_handle;");
                emit!(
                    self,
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided({rank}, {sizes}, {strides}, {dtype}, cached_torch_device_type_{device_kind},  {device_index}, &{name}_handle));"
                );
                emit!(self, "RAIIAtenTensorHandle {name}({name}_handle);");
            }
            Some(n) => {
                let alloc_size = self.int_array_name(std::slice::from_ref(n));
                let alloc_stride = self.int_array_name(&[SymExpr::Int(1)]);
                emit!(self, "AtenTensorHandle {name}_handle;");
                emit!(
                    self,
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, {alloc_size}, {alloc_stride}, {dtype}, cached_torch_device_type_{device_kind},  {device_index}, &{name}_handle));"
                );
                emit!(self, "AtenTensorHandle {name}_handle_restrided;");
                emit!(
                    self,
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_as_strided({name}_handle, {sizes}, {strides}, &{name}_handle_restrided));"
                );
                emit!(self, "wrap_with_raii_handle_if_needed({name}_handle);");
                emit!(self, "RAIIAtenTensorHandle {name}({name}_handle_restrided);");
            }
        }
        self.declare_var(name);
        Ok(())
    }

    /// A view expression of `base` with `layout` (AOTI: an RAII handle expression).
    fn view_expr(&mut self, base: &str, base_layout: &Layout, layout: &Layout, cx: &Cx<'_>) -> Result<String, Error> {
        if base_layout.dtype.size_bytes() != layout.dtype.size_bytes() {
            return Err(self.unsupported(
                cx,
                format!(
                    "a view of `{base}` changing the element size ({} to {})",
                    base_layout.dtype, layout.dtype
                ),
            ));
        }
        let sizes = self.int_array(&layout.size);
        let strides = self.int_array(&layout.stride);
        let offset = self.cexpr(&layout.offset);
        let rank = layout.rank();
        if self.standalone() {
            let dtype = self.use_dtype(layout.dtype);
            return Ok(format!(
                "{base}.reinterpret({rank}, {sizes}, {strides}, {offset}, {dtype})"
            ));
        }
        let view = format!(
            "wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper({base}, {rank}, {sizes}, {strides}, {offset}))"
        );
        if base_layout.dtype == layout.dtype {
            return Ok(view);
        }
        let tmp = self.tmp(&format!("{base}_view"));
        self.line(format!("auto {tmp} = {view};"));
        let dtype = self.use_dtype(layout.dtype);
        self.line(format!("AtenTensorHandle {tmp}_handle;"));
        self.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_{}_view_dtype({tmp}, {dtype}, &{tmp}_handle));",
            layout.device.kind.as_str()
        ));
        Ok(format!("RAIIAtenTensorHandle({tmp}_handle)"))
    }

    /// A new reference to the same tensor (AOTI: a new handle).
    fn share(&mut self, src: &str, dst: &str) {
        if self.standalone() {
            self.line(format!("wrapir::Tensor {dst} = {src};"));
        } else {
            self.line(format!("AtenTensorHandle {dst}_handle;"));
            self.line(format!(
                "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle({src}, &{dst}_handle));"
            ));
            self.line(format!("RAIIAtenTensorHandle {dst}({dst}_handle);"));
        }
        self.declare(dst);
    }

    fn same_layout(a: &Layout, b: &Layout) -> bool {
        a.size == b.size && a.stride == b.stride && a.offset == b.offset && a.dtype == b.dtype
    }

    fn reuse(
        &mut self,
        g: &GraphCtx<'_>,
        old: &BufName,
        new: &BufName,
        delete_old: bool,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let old_layout = g.layout(old, cx)?;
        let new_layout = g.layout(new, cx)?;
        let (o, n) = (g.local(old), g.local(new));
        if Self::same_layout(old_layout, new_layout) {
            if delete_old {
                self.line(format!("auto {n} = std::move({o});  // reuse"));
                self.declare(&n);
            } else {
                self.share(&o, &n);
            }
            return Ok(());
        }
        let view = self.view_expr(&o, old_layout, new_layout, cx)?;
        if delete_old {
            self.line(format!("auto {n} = {view}; {o}.reset();  // reuse"));
        } else {
            self.line(format!("auto {n} = {view};  // reuse"));
        }
        self.declare(&n);
        Ok(())
    }

    fn reinterpret(&mut self, g: &GraphCtx<'_>, base: &BufName, alias: &BufName, cx: &Cx<'_>) -> Result<(), Error> {
        let base_layout = g.layout(base, cx)?;
        let alias_layout = g.layout(alias, cx)?;
        let (b, a) = (g.local(base), g.local(alias));
        if Self::same_layout(base_layout, alias_layout) {
            self.share(&b, &a);
            return Ok(());
        }
        let view = self.view_expr(&b, base_layout, alias_layout, cx)?;
        self.line(format!("auto {a} = {view};  // alias"));
        self.declare(&a);
        Ok(())
    }

    fn kernel_call(&mut self, g: &GraphCtx<'_>, call: &KernelCall, cx: &Cx<'_>) -> Result<(), Error> {
        let (meta, plan) = match self.call_plans.get(&call.kernel) {
            Some((meta, plan)) => (*meta, plan.clone()),
            None => {
                let program = self.program;
                let kernel = program.kernels.get(&call.kernel).ok_or_else(|| Error::Invalid {
                    context: cx.into(),
                    message: format!("kernel `{}` is not defined", call.kernel),
                })?;
                let meta = match &kernel.backend {
                    KernelBackend::Triton(m) => m,
                    _ => return self.direct_call(g, call, kernel, &cx.to_string()),
                };
                let plan = Rc::new(launch::CallPlan::new(&call.kernel, meta)?);
                self.call_plans.insert(call.kernel.clone(), (meta, plan.clone()));
                self.called_kernels.insert(call.kernel.clone());
                (meta, plan)
            }
        };
        let args = plan.bind(&call.kernel, meta, call, cx)?;
        if let Some(r) = self.recorded.as_mut() {
            let args = args
                .iter()
                .map(|&(i, value)| (plan.params[i].name.clone(), value.clone()))
                .collect();
            r.calls.push(RecordedCall {
                kernel: call.kernel.clone(),
                graph: GraphName::new(g.name.map_or(MAIN_GRAPH, |n| n.as_str())),
                line: self.line_index,
                args,
            });
        }
        let device = call.device.map_or(0, |d| Self::device_index(&d));
        // AOTI: the stream variable is declared (if needed) before the call line.
        let standalone = self.standalone();
        if !standalone {
            self.aoti_stream_declared(device);
        }
        let style = self.cstyle();
        self.indent_body();
        let _ = write!(self.body, "call_{}(", call.kernel);
        for &(i, value) in &args {
            self.kernel_arg(g, &call.kernel, &plan.params[i], value, style, cx)?;
            self.body.push_str(", ");
        }
        if standalone {
            self.body.push_str("stream);\n");
        } else {
            let _ = writeln!(self.body, "{device}, stream{device});");
        }
        Ok(())
    }

    /// AOTI: the variable holding device `device`'s current stream, declared
    /// on first use in the scope.
    fn aoti_stream(&mut self, device: u32) -> String {
        self.aoti_stream_declared(device);
        format!("stream{device}")
    }

    /// [`Lowering::aoti_stream`] without the name: declares `stream<device>`
    /// unless a scope has it.
    fn aoti_stream_declared(&mut self, device: u32) {
        let has_stream = self.scopes.iter().any(|s| s.streams.contains(&device));
        if !has_stream {
            self.line(format!("cudaStream_t stream{device};"));
            self.line(format!(
                "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream({device}, (void**)&stream{device}));"
            ));
            if let Some(s) = self.scopes.last_mut() {
                s.streams.insert(device);
            }
        }
    }

    fn kernel_arg(
        &mut self,
        g: &GraphCtx<'_>,
        kernel: &KernelName,
        param: &launch::Param,
        value: &ArgValue,
        style: CStyle,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let bad = |what: &str| Error::Invalid {
            context: cx.into(),
            message: format!(
                "kernel `{kernel}` parameter `{}` ({}) gets {what}",
                param.name,
                param.kind_text()
            ),
        };
        // Writes the argument at the end of the body.
        let out = &mut self.body;
        match (param.is_pointer(), value) {
            (true, ArgValue::Buffer(b)) => Ok(write!(out, "{}", g.var(b))?),
            (false, ArgValue::Expr(e)) => Ok(write!(out, "{}", CExpr { e, style })?),
            (false, ArgValue::Float(v)) => {
                out.push_str(&c_float(*v));
                Ok(())
            }
            (false, ArgValue::Bool(b)) => Ok(write!(out, "{b}")?),
            (true, _) => Err(bad("a non-tensor value")),
            // A one-element tensor for a scalar parameter: its value, read
            // at the call (Inductor's `t.item()` / `aoti_torch_item_*`).
            (false, ArgValue::Buffer(b)) => {
                let layout = g.layout(b, cx)?;
                if layout.size.iter().any(|s| s.as_int() != Some(1)) {
                    return Err(bad(&format!("tensor `{b}` with more than one element")));
                }
                let var = g.var(b);
                if self.standalone() {
                    Ok(write!(self.body, "wrapir::item_double({var}, stream)")?)
                } else {
                    let shim = match layout.dtype {
                        DType::Float64 => ("double", "float64"),
                        DType::Float32 => ("float", "float32"),
                        DType::Int64 => ("int64_t", "int64"),
                        DType::Int32 => ("int32_t", "int32"),
                        DType::Bool => ("bool", "bool"),
                        other => return Err(bad(&format!("tensor `{b}` of dtype {other}"))),
                    };
                    Ok(write!(
                        self.body,
                        "[&] {{ {} v_; AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_{}({var}, &v_)); return v_; }}()",
                        shim.0, shim.1
                    )?)
                }
            }
            (false, _) => Err(bad("a value that is not a number")),
        }
    }

    // ---- extern ops --------------------------------------------------------

    fn device_of(&self, g: &GraphCtx<'_>, b: &BufName, cx: &Cx<'_>) -> Result<Device, Error> {
        Ok(g.layout(b, cx)?.device)
    }

    /// The device an extern call runs on: its result's, its output's or its first tensor's.
    fn extern_device(&self, g: &GraphCtx<'_>, call: &ExternCall, out: Option<&BufName>) -> Device {
        let mut candidates: Vec<BufName> = Vec::new();
        candidates.extend(out.cloned());
        candidates.extend(call.result.clone());
        for a in call.args.iter().chain(call.kwargs.values()) {
            a.for_each_buffer(&mut |b| candidates.push(b.clone()));
        }
        candidates
            .iter()
            .find_map(|b| g.graph.layout(b).map(|l| l.device))
            .unwrap_or(Device::cuda(0))
    }

    fn extern_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &ExternCall,
        out: Option<&BufName>,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let (name, overload) = split_op(&call.op);
        let suffix = op_suffix(&name, overload, out.is_some());
        // Result variables: one tensor, or one per element of a multi-output value.
        let results: Vec<String> = match &call.result {
            None => vec![],
            Some(r) if g.is_multi(r) => g.leaf_vars(r),
            Some(r) => {
                g.layout(r, cx)?;
                vec![g.local(r)]
            }
        };
        if self.standalone() {
            return self.runtime_call(g, call, out, &results, cx);
        }
        if python_op::without_c_shim(&name) {
            return match (results.as_slice(), out) {
                ([result], None) => {
                    let result = result.clone();
                    self.python_op_call(g, call, &result, cx)
                }
                _ => Err(self.unsupported(
                    cx,
                    format!(
                        "`{}` (no C shim, so it runs through Python) with {} results{}",
                        call.op,
                        results.len(),
                        if out.is_some() { " and an out= tensor" } else { "" }
                    ),
                )),
            };
        }
        let shim = if name.starts_with("aoti_torch_") {
            name.to_string()
        } else if name == "_mm_plus_mm" {
            format!("aoti_torch_{suffix}")
        } else {
            format!("aoti_torch_{}_{suffix}", self.extern_device(g, call, out).kind.as_str())
        };
        let mut args = Vec::new();
        if let Some(o) = out {
            args.push(g.local(o));
        }
        let local = results.first().cloned().unwrap_or_else(|| sanitize(&suffix));
        match self.schema_args(g, call, &name, overload, &local, cx)? {
            Some(in_order) => args.extend(in_order),
            None => {
                for a in call.args.iter().chain(call.kwargs.values()) {
                    args.push(self.shim_arg(g, a, cx)?);
                }
            }
        }
        // One out-pointer per schema result where the op's schema is known
        // (extracted or not), else one per extracted tensor.
        let outs: Vec<(String, shim::Out)> = match (shim::schema_results(&name, overload), &call.result) {
            (Some(schema), Some(r)) if g.is_multi(r) => schema
                .iter()
                .enumerate()
                .map(|(i, o)| (g.element_var(r, &[i]), *o))
                .collect(),
            _ => results.iter().map(|r| (r.clone(), shim::Out::Tensor)).collect(),
        };
        for (r, kind) in &outs {
            match kind {
                shim::Out::Tensor => {
                    self.line(format!("AtenTensorHandle {r}_handle;"));
                    args.push(format!("&{r}_handle"));
                }
                shim::Out::Int => {
                    self.line(format!("int64_t {r};"));
                    self.declare(r);
                    args.push(format!("&{r}"));
                }
                shim::Out::Absent => args.push("nullptr".into()),
            }
        }
        self.line(format!("AOTI_TORCH_ERROR_CODE_CHECK({shim}({}));", args.join(", ")));
        for (r, kind) in &outs {
            if *kind == shim::Out::Tensor {
                self.line(format!("RAIIAtenTensorHandle {r}({r}_handle);"));
                self.declare(r);
            }
        }
        Ok(())
    }

    /// Standalone: the op runs in wrapir's runtime library, named as the
    /// program names it, with its arguments as the interpreter passes them
    /// (positional ones in order, then keyword ones; `out=` variants get the
    /// destination as the keyword argument `out` and return nothing), and
    /// the declared layout of a single result when it can be computed
    /// before the call (every symbol it names is bound).
    fn runtime_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &ExternCall,
        out: Option<&BufName>,
        results: &[String],
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let device = self.extern_device(g, call, out);
        if device.kind != DeviceType::Cuda {
            return Err(self.unsupported(
                cx,
                format!(
                    "extern op `{}` on {device}: the runtime runs extern ops on CUDA devices",
                    call.op
                ),
            ));
        }
        let mut items = Vec::new();
        if let Some(o) = out {
            items.push(format!("wrapir::ExternArg::of_tensor({}, \"out\")", g.local(o)));
        }
        for a in &call.args {
            items.push(self.runtime_arg(g, a, None, cx)?);
        }
        for (k, a) in &call.kwargs {
            items.push(self.runtime_arg(g, a, Some(k), cx)?);
        }
        for r in results {
            self.line(format!("wrapir::Tensor {r};"));
            self.declare(r);
        }
        self.open("{");
        if items.is_empty() {
            self.line("const wrapir::ExternArg* args_ = nullptr;");
        } else {
            self.line(format!("const wrapir::ExternArg args_[] = {{{}}};", items.join(", ")));
        }
        if results.is_empty() {
            self.line("wrapir::Tensor* const* results_ = nullptr;");
        } else {
            let ptrs: Vec<String> = results.iter().map(|r| format!("&{r}")).collect();
            self.line(format!("wrapir::Tensor* const results_[] = {{{}}};", ptrs.join(", ")));
        }
        let expected = match call.result.as_ref().filter(|r| !g.is_multi(r)) {
            Some(r) => self.expected_layout(g, r, cx)?,
            None => "nullptr".to_string(),
        };
        self.line(format!(
            "wrapir::call_op({}, {}, args_, {}, {expected}, results_, {}, stream);",
            Self::device_index(&device),
            c_string(&call.op),
            items.len(),
            results.len(),
        ));
        self.close("}");
        Ok(())
    }

    /// A pointer to `buffer`'s declared layout as a `WrapirRtLayout`, or
    /// `nullptr` when it names a symbol not bound yet (an unbacked size the
    /// op itself determines).
    fn expected_layout(&mut self, g: &GraphCtx<'_>, buffer: &BufName, cx: &Cx<'_>) -> Result<String, Error> {
        let layout = g.layout(buffer, cx)?;
        let exprs = layout
            .size
            .iter()
            .chain(&layout.stride)
            .chain(std::iter::once(&layout.offset));
        let symbols: Vec<_> = exprs.flat_map(|e| e.free_symbols()).collect();
        if symbols.iter().any(|s| !self.declared(s.as_str())) {
            return Ok("nullptr".to_string());
        }
        let sizes = self.int_array_name(&layout.size);
        let strides = self.int_array_name(&layout.stride);
        let dtype = self.dtype_name(layout.dtype);
        let offset = self.cexpr(&layout.offset);
        let name = format!("{}_expected_", g.local(buffer));
        self.line(format!(
            "const WrapirRtLayout {name} = wrapir::layout({dtype}, {}, {sizes}, {strides}, {offset});",
            layout.rank()
        ));
        Ok(format!("&{name}"))
    }

    fn shim_arg(&mut self, g: &GraphCtx<'_>, a: &ArgValue, cx: &Cx<'_>) -> Result<String, Error> {
        Ok(match a {
            ArgValue::Buffer(b) => {
                if g.is_multi(b) {
                    return Err(Error::Invalid {
                        context: cx.into(),
                        message: format!("multi-output value `{b}` passed as an extern argument"),
                    });
                }
                g.local(b)
            }
            ArgValue::Expr(e) => self.cexpr(e),
            ArgValue::Float(v) => c_float(*v),
            ArgValue::Bool(b) => b.to_string(),
            ArgValue::None => "nullptr".into(),
            ArgValue::Str(s) => c_string(s),
            ArgValue::DType(d) => self.use_dtype(*d),
            ArgValue::Device(d) => {
                self.devices.insert(d.kind);
                format!(
                    "cached_torch_device_type_{}, {}",
                    d.kind.as_str(),
                    Self::device_index(d)
                )
            }
            ArgValue::List(_) => self.list_arg(g, a, cx)?,
        })
    }

    /// A list argument of an AOTI shim: a pointer and a length.
    fn list_arg(&mut self, g: &GraphCtx<'_>, a: &ArgValue, cx: &Cx<'_>) -> Result<String, Error> {
        let ArgValue::List(items) = a else {
            return self.shim_arg(g, a, cx);
        };
        let n = items.len();
        let all_tensors = items.iter().all(|i| matches!(i, ArgValue::Buffer(_)));
        let tensors_or_none = items.iter().all(|i| matches!(i, ArgValue::Buffer(_) | ArgValue::None));
        if n > 0 && all_tensors {
            let v: Vec<String> = items
                .iter()
                .filter_map(|i| {
                    if let ArgValue::Buffer(b) = i {
                        Some(format!("{}.get()", g.local(b)))
                    } else {
                        None
                    }
                })
                .collect();
            return Ok(format!(
                "std::array<AtenTensorHandle, {n}>{{{}}}.cbegin(), {n}",
                v.join(", ")
            ));
        }
        if n > 0 && tensors_or_none {
            let v: Vec<String> = items
                .iter()
                .map(|i| match i {
                    ArgValue::Buffer(b) => format!("&temporary_reference({}.get())", g.local(b)),
                    _ => "nullptr".to_string(),
                })
                .collect();
            return Ok(format!(
                "std::array<const AtenTensorHandle*, {n}>{{{}}}.data(), {n}",
                v.join(", ")
            ));
        }
        let mut v = Vec::new();
        for i in items {
            match i {
                ArgValue::Expr(e) => v.push(self.cexpr(e)),
                ArgValue::Bool(b) => v.push(if *b { "1L".into() } else { "0L".into() }),
                ArgValue::Float(_) => {
                    let f: Vec<String> = items
                        .iter()
                        .map(|i| match i {
                            ArgValue::Float(x) => Ok(c_float(*x)),
                            ArgValue::Expr(SymExpr::Int(x)) => Ok(format!("{x}.0")),
                            _ => Err(self.unsupported(cx, "a list mixing floats with other values")),
                        })
                        .collect::<Result<_, _>>()?;
                    return Ok(format!("std::array<double, {n}>{{{}}}.cbegin(), {n}", f.join(", ")));
                }
                _ => return Err(self.unsupported(cx, "a list argument that is not all tensors, integers or floats")),
            }
        }
        if n == 0 {
            return Ok("nullptr, 0".into());
        }
        Ok(format!("std::array<int64_t, {n}>{{{}}}.cbegin(), {n}", v.join(", ")))
    }

    /// One `wrapir::ExternArg` (lists get their items in a named array first).
    fn runtime_arg(
        &mut self,
        g: &GraphCtx<'_>,
        a: &ArgValue,
        name: Option<&String>,
        cx: &Cx<'_>,
    ) -> Result<String, Error> {
        let n = name.map_or(String::new(), |k| format!(", {}", c_string(k)));
        Ok(match a {
            ArgValue::Buffer(b) => {
                if g.is_multi(b) {
                    return Err(Error::Invalid {
                        context: cx.into(),
                        message: format!("multi-output value `{b}` passed as an extern argument"),
                    });
                }
                format!("wrapir::ExternArg::of_tensor({}{n})", g.local(b))
            }
            ArgValue::Expr(e) => format!("wrapir::ExternArg::of_int({}{n})", self.cexpr(e)),
            ArgValue::Float(v) => format!("wrapir::ExternArg::of_float({}{n})", c_float(*v)),
            ArgValue::Bool(b) => format!("wrapir::ExternArg::of_bool({b}{n})"),
            ArgValue::None => format!(
                "wrapir::ExternArg::none({})",
                name.map_or("nullptr".into(), |k| c_string(k))
            ),
            ArgValue::Str(s) => format!("wrapir::ExternArg::of_string({}{n})", c_string(s)),
            ArgValue::DType(d) => format!("wrapir::ExternArg::of_dtype({}{n})", self.use_dtype(*d)),
            ArgValue::Device(d) => {
                let index = match d.kind {
                    DeviceType::Cpu => -1,
                    DeviceType::Cuda => i64::from(Self::device_index(d)),
                    _ => return Err(self.unsupported(cx, format!("device argument `{d}`"))),
                };
                format!("wrapir::ExternArg::of_device({index}{n})")
            }
            ArgValue::List(items) => {
                let mut parts = Vec::new();
                for i in items {
                    parts.push(self.runtime_arg(g, i, None, cx)?);
                }
                let arr = self.tmp("list");
                if parts.is_empty() {
                    return Ok(format!("wrapir::ExternArg::of_list(nullptr, 0{n})"));
                }
                self.line(format!("const wrapir::ExternArg {arr}[] = {{{}}};", parts.join(", ")));
                format!("wrapir::ExternArg::of_list({arr}, {}{n})", items.len())
            }
        })
    }

    fn scatter(&mut self, g: &GraphCtx<'_>, s: &ScatterFallback, cx: &Cx<'_>) -> Result<(), Error> {
        let mut args = vec![ArgValue::Buffer(s.target.clone()), ArgValue::Expr(SymExpr::Int(s.dim))];
        args.push(ArgValue::Buffer(s.index.clone()));
        args.push(s.src.clone());
        let mut kwargs = IndexMap::new();
        if let Some(r) = &s.reduce {
            kwargs.insert("reduce".to_string(), ArgValue::Str(r.clone()));
        }
        if let Some(i) = s.include_self {
            kwargs.insert("include_self".to_string(), ArgValue::Bool(i));
        }
        if self.standalone() {
            // The runtime takes the in-place op as the interpreter calls it:
            // the target first, no result.
            let call = ExternCall {
                result: None,
                op: s.op.clone(),
                args,
                kwargs,
            };
            return self.runtime_call(g, &call, None, &[], cx);
        }
        let (name, overload) = split_op(&s.op);
        let base = name.trim_end_matches('_');
        let op = match overload {
            Some(o) if o != "default" => format!("{base}.{o}"),
            _ => base.to_string(),
        };
        // The `_out` form writes into the target, passed first; AOTI's shim
        // then takes the target again as `self`, as Inductor's ScatterFallback passes it.
        let args = if self.standalone() { args.split_off(1) } else { args };
        let call = ExternCall {
            result: None,
            op,
            args,
            kwargs,
        };
        self.extern_call(g, &call, Some(&s.target), cx)
    }

    // ---- unbacked symbols --------------------------------------------------

    /// Binds `symbol` from the C++ value `raw` post-processed by `tail`
    /// (`[]`, `[DivideBy(d)]` or `[ConvertInt]`).
    fn bind_symbol(
        &mut self,
        symbol: &Symbol,
        raw: &str,
        tail: &[KeyEntry],
        described: &str,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let s = symbol.as_str();
        match tail {
            [] => {
                if self.declared(s) {
                    self.line(format!("{s} = {raw};"));
                } else {
                    self.line(format!("auto {s} = {raw};"));
                    self.declare(s);
                }
            }
            [KeyEntry::ConvertInt] => self.decl_line(s, "int64_t", &format!("{raw} ? 1 : 0")),
            [KeyEntry::DivideBy(d)] => {
                if *d == 0 {
                    return Err(Error::Invalid {
                        context: cx.into(),
                        message: format!("`{s}` is bound through a division by 0"),
                    });
                }
                let msg = format!("{s}: {described} = ");
                let tail_msg = format!(" is not divisible by {d}");
                self.line(format!(
                    "if ({raw} % {d} != 0) {{ throw std::runtime_error({} + std::to_string({raw}) + {}); }}",
                    c_string(&msg),
                    c_string(&tail_msg)
                ));
                self.decl_line(s, "int64_t", &format!("{raw} / {d}"));
            }
            other => {
                return Err(self.unsupported(
                    cx,
                    format!("binding `{s}` through the key path suffix `{}`", KeyPathText(other)),
                ))
            }
        }
        Ok(())
    }

    fn unbacked(
        &mut self,
        g: &GraphCtx<'_>,
        source: &BufName,
        symbol: &Symbol,
        path: &[KeyEntry],
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        // Resolve the top level: C++ holds multi-output elements as separate
        // variables, so leading indices are walked key by key to one of them.
        let (base, rest): (String, &[KeyEntry]) = if let Some((root, mut at)) = g.multi_origin(source) {
            let tree = g.elements.get(&root);
            let is_leaf = |p: &[usize]| tree.is_some_and(|t| t.contains_key(p));
            let is_list = |p: &[usize]| tree.is_some_and(|t| t.keys().any(|k| k.len() > p.len() && k.starts_with(p)));
            let mut rest = path;
            loop {
                if is_leaf(&at) {
                    break;
                }
                match rest.split_first() {
                    Some((KeyEntry::Index(i), tail)) if is_list(&at) => {
                        let i = usize::try_from(*i).map_err(|_| Error::Invalid {
                            context: cx.into(),
                            message: format!("negative index {i} in the key path of `{symbol}`"),
                        })?;
                        at.push(i);
                        rest = tail;
                    }
                    _ => {
                        return Err(Error::Invalid {
                            context: cx.into(),
                            message: format!(
                                "the key path `{}` of `{symbol}` does not lead to a tensor of multi-output `{root}` (stops at `{root}{}`)",
                                KeyPathText(path),
                                path_text(&at)
                            ),
                        })
                    }
                }
            }
            (g.element_var(&root, &at), rest)
        } else {
            match g.extracted.get(source) {
                // Bindings computed on the op's output, attached to one extracted
                // element: drop the element's own indices.
                Some((_, at)) if !at.is_empty() && index_prefix(path).starts_with(at) => {
                    (g.local(source), &path[at.len()..])
                }
                _ => (g.local(source), path),
            }
        };
        let (value, tail) = match rest {
            [KeyEntry::CallMethod(m @ (TensorMethod::Size | TensorMethod::Stride)), KeyEntry::Index(d), tail @ ..] => {
                (format!("{base}.{}({d})", m.as_str()), tail)
            }
            [KeyEntry::CallMethod(TensorMethod::StorageOffset), tail @ ..] => (format!("{base}.storage_offset()"), tail),
            _ => {
                return Err(self.unsupported(
                    cx,
                    format!(
                        "binding `{symbol}` from `{source}` through the key path `{}` (needs .size()[i], .stride()[i] or .storage_offset())",
                        KeyPathText(path)
                    ),
                ))
            }
        };
        let described = format!("{source}{}", KeyPathText(&path[..path.len() - tail.len()]));
        if tail.is_empty() {
            return self.bind_symbol(symbol, &value, tail, &described, cx);
        }
        let raw = format!("{symbol}_undivided");
        if matches!(tail, [KeyEntry::ConvertInt]) {
            return self.bind_symbol(symbol, &value, tail, &described, cx);
        }
        self.decl_line(&raw, "int64_t", &value);
        self.bind_symbol(symbol, &raw, tail, &described, cx)
    }

    // ---- control flow ------------------------------------------------------

    fn subgraph(&self, name: &GraphName, cx: &Cx<'_>) -> Result<&'a Graph, Error> {
        self.program.subgraphs.get(name).ok_or_else(|| Error::Invalid {
            context: cx.into(),
            message: format!("subgraph `{name}` does not exist"),
        })
    }

    /// Symbols a graph's own lines bind.
    fn bound_symbols(graph: &Graph) -> Vec<Symbol> {
        let mut out = Vec::new();
        for l in &graph.lines {
            match l {
                Line::UnbackedSymbolDefs { bindings, .. } => out.extend(bindings.keys().cloned()),
                Line::DynamicScalar { symbol, .. } | Line::SymbolicCallArg { symbol, .. } => out.push(symbol.clone()),
                _ => {}
            }
        }
        out
    }

    /// The C++ values of operands `offset..` of `sub`: a buffer's variable, or
    /// the symbol itself where `sub` takes a symbol input.
    fn operand_vars(g: &GraphCtx<'_>, sub: &Graph, offset: usize, operands: &[BufName]) -> Vec<String> {
        operands
            .iter()
            .enumerate()
            .map(|(i, o)| match sub.inputs.get(offset + i) {
                Some(GraphInput::Symbol { .. }) => o.to_string(),
                _ => g.local(o),
            })
            .collect()
    }

    /// Runs a subgraph inline: copies operand handles into its inputs, writes
    /// its lines, and moves its outputs into `targets` (`None` = dropped).
    fn inline_subgraph(
        &mut self,
        name: &'a GraphName,
        operands: &[String],
        targets: &[Option<String>],
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let graph = self.subgraph(name, cx)?;
        let ctx = GraphCtx::new(graph, Some(name), self.program, name.as_str())?;
        self.line(format!("// subgraph: {name}"));
        if graph.inputs.len() != operands.len() {
            return Err(Error::Invalid {
                context: cx.into(),
                message: format!(
                    "subgraph `{name}` takes {} inputs but gets {}",
                    graph.inputs.len(),
                    operands.len()
                ),
            });
        }
        for (input, operand) in graph.inputs.iter().zip(operands) {
            match input {
                GraphInput::Tensor { name: n } => {
                    let local = ctx.local(n);
                    if self.standalone() {
                        self.line(format!("wrapir::Tensor {local} = {operand};"));
                    } else {
                        self.line(format!("AtenTensorHandle {local}_handle;"));
                        self.line(format!(
                            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out({operand}, &{local}_handle));"
                        ));
                        self.line(format!("RAIIAtenTensorHandle {local}({local}_handle);"));
                    }
                    self.declare(&local);
                }
                // Symbols are C++ variables of the whole function and subgraphs
                // are inlined, so a symbol passed as itself (what Inductor does:
                // `true_graph_0_args = [arg3_1, s27, s77]`) is already in scope.
                GraphInput::Symbol { name: n, symbol } if operand.as_str() != symbol.as_str() => {
                    return Err(self.unsupported(
                        cx,
                        format!(
                            "symbol input `{n}` of subgraph `{name}` binds `{symbol}` but is passed `{operand}` (the inlined subgraph sees the caller's symbols, so a symbol must be passed as itself)"
                        ),
                    ))
                }
                GraphInput::Symbol { .. } => {}
            }
        }
        self.graph_lines(&ctx)?;
        if graph.outputs.len() < targets.len() {
            return Err(Error::Invalid {
                context: cx.into(),
                message: format!(
                    "subgraph `{name}` returns {} values, {} are needed",
                    graph.outputs.len(),
                    targets.len()
                ),
            });
        }
        let mut moved: HashMap<String, String> = HashMap::default();
        for (out, target) in graph.outputs.iter().zip(targets) {
            let Some(target) = target else { continue };
            let GraphOutput::Buffer(b) = out else {
                return Err(self.unsupported(cx, format!("a non-tensor output of subgraph `{name}`")));
            };
            let local = ctx.local(b);
            self.line(format!("{target}.reset();"));
            match moved.get(&local) {
                None => {
                    self.line(format!("{target} = std::move({local});"));
                    moved.insert(local, target.clone());
                }
                Some(first) => {
                    if self.standalone() {
                        self.line(format!("{target} = {first};"));
                    } else {
                        let h = self.tmp(&format!("{target}_handle"));
                        self.line(format!("AtenTensorHandle {h};"));
                        self.line(format!(
                            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle({first}, &{h}));"
                        ));
                        self.line(format!("{target} = RAIIAtenTensorHandle({h});"));
                    }
                }
            }
        }
        Ok(())
    }

    fn tensor_type(&self) -> &'static str {
        if self.standalone() {
            "wrapir::Tensor"
        } else {
            "RAIIAtenTensorHandle"
        }
    }

    /// A C++ boolean from a one-element tensor.
    fn scalarize(&mut self, tensor: &str) -> String {
        let scalar = format!("{tensor}_scalar");
        if self.standalone() {
            self.decl_line(&scalar, "bool", &format!("wrapir::item_bool({tensor}, stream)"));
        } else {
            if !self.declared(&scalar) {
                self.line(format!("bool {scalar};"));
                self.declare(&scalar);
            }
            self.line(format!(
                "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_bool({tensor}, &{scalar}));"
            ));
        }
        scalar
    }

    fn conditional(&mut self, g: &GraphCtx<'_>, c: &'a Conditional, cx: &Cx<'_>) -> Result<(), Error> {
        let t = self.subgraph(&c.true_graph, cx)?;
        let f = self.subgraph(&c.false_graph, cx)?;
        if t.outputs.len() != f.outputs.len() {
            return Err(Error::Invalid {
                context: cx.into(),
                message: format!(
                    "branches `{}` and `{}` return {} and {} values",
                    c.true_graph,
                    c.false_graph,
                    t.outputs.len(),
                    f.outputs.len()
                ),
            });
        }
        let results = g.flat_vars(&c.result, 0, cx)?;
        let ty = self.tensor_type();
        for r in &results {
            self.line(format!("{ty} {r};"));
            self.declare(r);
        }
        // Symbols both branches bind stay visible after the conditional.
        let tb = Self::bound_symbols(t);
        let fb: HashSet<Symbol> = Self::bound_symbols(f).into_iter().collect();
        for s in tb.iter().filter(|s| fb.contains(*s)) {
            if !self.declared(s.as_str()) {
                self.line(format!("int64_t {s} = 0;"));
                self.declare(s.as_str());
            }
        }
        let pred = match &c.predicate {
            Predicate::Tensor(b) => {
                let name = g.local(b);
                self.scalarize(&name)
            }
            Predicate::Expr(e) => self.cexpr(e),
        };
        let operands = Self::operand_vars(g, t, 0, &c.operands);
        let mut targets: Vec<Option<String>> = results.iter().cloned().map(Some).collect();
        targets.resize(t.outputs.len(), None);
        self.open(format!("if ({pred}) {{"));
        self.inline_subgraph(&c.true_graph, &operands, &targets, cx)?;
        self.close("} else {");
        // `close` popped the true branch's scope; open the false branch's.
        self.indent += 1;
        self.scopes.push(Scope::default());
        self.inline_subgraph(&c.false_graph, &operands, &targets, cx)?;
        self.close("}");
        Ok(())
    }

    fn while_loop(&mut self, g: &GraphCtx<'_>, w: &'a WhileLoop, cx: &Cx<'_>) -> Result<(), Error> {
        let carried: Vec<String> = w.carried.iter().map(|b| g.local(b)).collect();
        let body = self.subgraph(&w.body_graph, cx)?;
        let additional = Self::operand_vars(g, body, w.carried.len(), &w.additional);
        let results = g.flat_vars(&w.result, carried.len(), cx)?;
        if results.len() != carried.len() {
            return Err(Error::Invalid {
                context: cx.into(),
                message: format!(
                    "`{}` has {} carried values but {} are extracted",
                    w.result,
                    carried.len(),
                    results.len()
                ),
            });
        }
        // The results hold the carried values from the start.
        for (r, c) in results.iter().zip(&carried) {
            if self.standalone() {
                self.line(format!("wrapir::Tensor {r} = {c};"));
            } else {
                self.line(format!("AtenTensorHandle {r}_handle;"));
                self.line(format!(
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out({c}, &{r}_handle));"
                ));
                self.line(format!("RAIIAtenTensorHandle {r}({r}_handle);"));
            }
            self.declare(r);
        }
        let cond_result = format!("{}_cond_result", g.local(&w.result));
        let ty = self.tensor_type();
        self.line(format!("{ty} {cond_result};"));
        self.declare(&cond_result);
        let inputs: Vec<String> = results.iter().chain(&additional).cloned().collect();
        self.open("while (1) {");
        self.inline_subgraph(&w.cond_graph, &inputs, &[Some(cond_result.clone())], cx)?;
        let scalar = self.scalarize(&cond_result);
        self.line(format!("if (!{scalar}) break;"));
        let targets: Vec<Option<String>> = results.iter().cloned().map(Some).collect();
        self.inline_subgraph(&w.body_graph, &inputs, &targets, cx)?;
        self.close("}");
        Ok(())
    }
}

const AOTI_PRELUDE: &str = r#"#include <torch/csrc/inductor/cpp_wrapper/cuda.h>

#define CUDA_DRIVER_CHECK(EXPR)                                                    \
    do {                                                                           \
        CUresult code = EXPR;                                                      \
        if (code != CUDA_SUCCESS) {                                                \
            const char* msg = nullptr;                                             \
            if (cuGetErrorString(code, &msg) != CUDA_SUCCESS) msg = "unknown error"; \
            throw std::runtime_error(std::string("CUDA driver error: ") + msg + " in " #EXPR); \
        }                                                                          \
    } while (0)

static inline CUfunction loadKernel(
        std::string filePath,
        const std::string& funcName,
        uint32_t sharedMemBytes,
        const std::optional<std::string>& cubinDir = std::nullopt) {
    if (cubinDir) {
        filePath = (std::filesystem::path(*cubinDir) / std::filesystem::path(filePath).filename()).string();
    }
    CUmodule mod;
    CUfunction func;
    CUDA_DRIVER_CHECK(cuModuleLoad(&mod, filePath.c_str()));
    CUDA_DRIVER_CHECK(cuModuleGetFunction(&func, mod, funcName.c_str()));
    if (sharedMemBytes > 0) {
        CUDA_DRIVER_CHECK(cuFuncSetAttribute(func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sharedMemBytes));
    }
    return func;
}

static inline void launchKernel(
        CUfunction func,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        cudaStream_t stream) {
    CUDA_DRIVER_CHECK(cuLaunchKernel(func, gridX, gridY, gridZ, 32 * numWarps, 1, 1, sharedMemBytes, stream, args, nullptr));
}
"#;

/// `(name, overload)` of an op as the Python wrapper names it: `aten` ops by
/// their own name (`torch.ops.aten.topk.default` -> `topk`), ops of other
/// namespaces with the namespace in front (`torch.ops.mylib.pairs.default` ->
/// `mylib_pairs`), so the name is a C++ identifier stem.
pub(super) fn split_op(op: &str) -> (String, Option<&str>) {
    fn name_and_overload(s: &str) -> (String, Option<&str>) {
        match s.split_once('.') {
            Some((n, o)) => (n.to_string(), Some(o)),
            None => (s.to_string(), None),
        }
    }
    if let Some(rest) = op.strip_prefix("extern_kernels.") {
        return name_and_overload(rest);
    }
    let s = op.strip_prefix("torch.ops.").unwrap_or(op);
    if let Some(rest) = s.strip_prefix("aten.") {
        return name_and_overload(rest);
    }
    match s.split_once('.') {
        Some((namespace, rest)) if op.starts_with("torch.ops.") => {
            let (name, overload) = name_and_overload(rest);
            (format!("{namespace}_{name}"), overload)
        }
        _ => name_and_overload(s),
    }
}

/// The shim suffix: `nonzero`, `index_Tensor`, `mm_out`, `randint_low_out`.
fn op_suffix(name: &str, overload: Option<&str>, out_variant: bool) -> String {
    let overload = overload.filter(|o| *o != "default");
    match (overload, out_variant) {
        (Some(o), true) if o == "out" || o.ends_with("_out") => format!("{name}_{o}"),
        (Some(o), true) => format!("{name}_{o}_out"),
        (None, true) => format!("{name}_out"),
        (Some(o), false) => format!("{name}_{o}"),
        (None, false) => name.to_string(),
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect()
}

/// The runtime header's `wrapir::DType` enumerator.
pub(super) fn runtime_dtype(d: DType) -> &'static str {
    match d {
        DType::Bool => "Bool",
        DType::Int8 => "Int8",
        DType::Int16 => "Int16",
        DType::Int32 => "Int32",
        DType::Int64 => "Int64",
        DType::Uint8 => "Uint8",
        DType::Float16 => "Float16",
        DType::Bfloat16 => "Bfloat16",
        DType::Float32 => "Float32",
        DType::Float64 => "Float64",
        DType::Float8E4m3fn => "Float8E4m3fn",
        DType::Float8E5m2 => "Float8E5m2",
        DType::Float8E4m3fnuz => "Float8E4m3fnuz",
        DType::Float8E5m2fnuz => "Float8E5m2fnuz",
        DType::Complex32 => "Complex32",
        DType::Complex64 => "Complex64",
        DType::Complex128 => "Complex128",
    }
}

/// A C++ string literal.
pub(super) fn c_string(s: &str) -> String {
    CString(s).to_string()
}

/// A C++ string literal ([`c_string`]) as a value that prints it.
#[derive(Clone, Copy)]
pub(super) struct CString<'s>(pub(super) &'s str);

impl fmt::Display for CString<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        f.write_char('"')?;
        // Runs of characters that need no escape are written whole.
        let mut start = 0;
        for (i, c) in s.char_indices() {
            let escape = matches!(c, '"' | '\\' | '\n' | '\t' | '\r') || (c as u32) < 0x20 || c as u32 == 0x7f;
            if !escape {
                continue;
            }
            f.write_str(&s[start..i])?;
            start = i + c.len_utf8();
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\t' => f.write_str("\\t")?,
                '\r' => f.write_str("\\r")?,
                // Octal escapes are at most three digits, so a following digit cannot extend them.
                c => write!(f, "\\{:03o}", c as u32)?,
            }
        }
        f.write_str(&s[start..])?;
        f.write_char('"')
    }
}

/// A C++ double literal.
pub(super) fn c_float(v: f64) -> String {
    if v.is_nan() {
        "std::numeric_limits<double>::quiet_NaN()".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "std::numeric_limits<double>::infinity()".into()
        } else {
            "-std::numeric_limits<double>::infinity()".into()
        }
    } else {
        let mut s = String::new();
        let _ = crate::ir::write_float(&mut s, v);
        s
    }
}

/// Rewrites integer literals `123L` to `123LL`.
pub(super) fn widen_suffix(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 8);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let starts_literal = c.is_ascii_digit() && (i == 0 || !is_ident_byte(bytes[i - 1]));
        if starts_literal {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            out.push_str(&text[start..i]);
            let suffix_l = i < bytes.len() && bytes[i] == b'L';
            let ends = i + 1 >= bytes.len() || !is_ident_byte(bytes[i + 1]);
            if suffix_l && ends {
                out.push_str("LL");
                i += 1;
            }
            continue;
        }
        // Copy one whole UTF-8 character.
        let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + ch_len]);
        i += ch_len;
    }
    out
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
