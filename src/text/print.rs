//! The canonical printer of the `.wir` text form.

use super::cursor::is_ident;
use crate::ir::{
    write_float, ArgValue, BufName, BufferDecl, BufferKind, ConstValue, DeviceStreams, Graph, GraphInput, GraphOutput,
    GridType, IndexNames, KernelBackend, KernelDef, KernelName, KeyPathText, Line, MultiIndex, ParenIfCompound,
    Predicate, Program, PyStr, Scope, ScopeKind,
};
use crate::sym::SymExpr;
use indexmap::IndexMap;
use std::fmt::Write;

/// Words that read back as something other than a symbol when written bare in
/// an argument position.
const RESERVED_IN_ARGS: [&str; 5] = ["None", "True", "False", "inf", "nan"];

/// The buffers a graph declares; bare identifiers naming one read back as buffers.
type Declared<'a> = Option<&'a IndexMap<BufName, BufferDecl>>;

pub(super) fn program(p: &Program) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; the `let _` below and in helpers rely on it.
    let _ = write_program(&mut out, p);
    out
}

fn write_program(out: &mut String, p: &Program) -> std::fmt::Result {
    writeln!(out, "wrapir {}", p.format_version)?;
    if !p.symbols.is_empty() {
        out.push('\n');
        for (name, decl) in &p.symbols {
            write!(out, "symbol {name}: {}", decl.kind.name())?;
            if !decl.range.is_unbounded() {
                write!(out, " {}", decl.range)?;
            }
            if let Some(h) = decl.hint {
                write!(out, " hint {h}")?;
            }
            out.push('\n');
        }
    }
    if !p.constants.is_empty() {
        out.push('\n');
        for (name, layout) in &p.constants {
            writeln!(out, "constant {name}: {layout}")?;
        }
    }
    for (name, kernel) in &p.kernels {
        out.push('\n');
        write_kernel(out, name, kernel)?;
    }
    out.push('\n');
    write_graph(out, "main", &p.main)?;
    for (name, graph) in &p.subgraphs {
        out.push('\n');
        write_graph(out, name.as_str(), graph)?;
    }
    Ok(())
}

/// An identifier bare, anything else as a string literal.
fn name_token(s: &str) -> String {
    if is_ident(s) {
        s.to_string()
    } else {
        PyStr(s).to_string()
    }
}

fn const_map(map: &IndexMap<String, ConstValue>) -> String {
    map.iter()
        .map(|(k, v)| format!("{}: {v}", name_token(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn int_map(map: &IndexMap<String, i64>) -> String {
    map.iter()
        .map(|(k, v)| format!("{}: {v}", name_token(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn str_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| PyStr(s).to_string()).collect();
    format!("[{}]", inner.join(", "))
}

/// A signature type bare when it is a plain token, quoted otherwise.
fn sig_token(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '*' | '.' | '<' | '>'));
    if plain {
        s.to_string()
    } else {
        PyStr(s).to_string()
    }
}

fn write_kernel(out: &mut String, name: &KernelName, k: &KernelDef) -> std::fmt::Result {
    writeln!(out, "kernel {name}: {} {{", k.backend.keyword())?;
    match &k.backend {
        KernelBackend::Triton(m) => {
            let sig: Vec<String> = m
                .signature
                .iter()
                .map(|(n, t)| format!("{}: {}", name_token(n), sig_token(&t.to_string())))
                .collect();
            if sig.is_empty() {
                out.push_str("  signature\n");
            } else {
                writeln!(out, "  signature {}", sig.join(", "))?;
            }
            if !m.constants.is_empty() {
                writeln!(out, "  constants {}", const_map(&m.constants))?;
            }
            if !m.config.is_empty() {
                writeln!(out, "  config {}", int_map(&m.config))?;
            }
            write!(out, "  grid {}", m.grid_type.name())?;
            match &m.grid_type {
                GridType::Grid2DWithYZOverflow { max_y_grid } => writeln!(out, " max_y_grid {max_y_grid}")?,
                GridType::PrecomputedGrid { grids } => {
                    out.push('\n');
                    for g in grids {
                        out.push_str("    candidate ");
                        if !g.config.is_empty() {
                            write!(out, "{} ", int_map(&g.config))?;
                        }
                        writeln!(out, "=> ({}, {}, {})", g.grid[0], g.grid[1], g.grid[2])?;
                    }
                }
                _ => out.push('\n'),
            }
            writeln!(out, "  num_warps {}", m.num_warps)?;
            if m.num_stages != 1 {
                writeln!(out, "  num_stages {}", m.num_stages)?;
            }
            if m.shared_mem != 0 {
                writeln!(out, "  shared_mem {}", m.shared_mem)?;
            }
            if let Some(v) = m.global_scratch {
                writeln!(out, "  global_scratch {v}")?;
            }
            if let Some(v) = m.profile_scratch {
                writeln!(out, "  profile_scratch {v}")?;
            }
            if !m.extra_launcher_args.is_empty() {
                let args: Vec<String> = m.extra_launcher_args.iter().map(|a| name_token(a)).collect();
                writeln!(out, "  extra_launcher_args {}", args.join(", "))?;
            }
            if let Some(s) = &m.mangled_name {
                writeln!(out, "  mangled_name {}", PyStr(s))?;
            }
            if let Some(s) = &m.cubin {
                writeln!(out, "  cubin {}", PyStr(s))?;
            }
            if m.user_defined {
                out.push_str("  user_defined\n");
            }
        }
        KernelBackend::Halide(m) => {
            writeln!(out, "  target {}", PyStr(&m.target))?;
            if let Some(s) = &m.scheduler {
                writeln!(out, "  scheduler {}", PyStr(s))?;
            }
            if !m.scheduler_flags.is_empty() {
                writeln!(out, "  scheduler_flags {}", const_map(&m.scheduler_flags))?;
            }
            if let Some(d) = m.cuda_device {
                writeln!(out, "  cuda_device {d}")?;
            }
            for a in &m.argtypes {
                write!(out, "  arg {}: {}", name_token(&a.name), PyStr(&a.ctype))?;
                if let Some(s) = &a.shape {
                    write!(out, " shape {}", str_list(s))?;
                }
                if let Some(s) = &a.stride {
                    write!(out, " stride {}", str_list(s))?;
                }
                if let Some(s) = &a.offset {
                    write!(out, " offset {}", PyStr(s))?;
                }
                if let Some(s) = &a.alias_of {
                    write!(out, " alias_of {}", PyStr(s))?;
                }
                out.push('\n');
            }
        }
        KernelBackend::Cpp(m) => {
            if !m.arg_types.is_empty() {
                let types: Vec<String> = m.arg_types.iter().map(|t| PyStr(t).to_string()).collect();
                writeln!(out, "  arg_types {}", types.join(", "))?;
            }
            if let Some(isa) = &m.isa {
                writeln!(out, "  isa {}", PyStr(isa.name()))?;
            }
        }
        KernelBackend::CudaC | KernelBackend::Host => {}
    }
    for c in &k.comments {
        writeln!(out, "  comment {}", PyStr(c))?;
    }
    if !k.source.is_empty() {
        out.push_str("  source\n\"\"\"\n");
        for (i, line) in k.source.split('\n').enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&escape_block_line(line));
        }
        out.push_str("\n\"\"\"\n");
    }
    out.push_str("}\n");
    Ok(())
}

/// A source line that is `"""` preceded by zero or more backslashes gets one
/// more backslash, so that it cannot end the block.
pub(super) fn escape_block_line(line: &str) -> String {
    if line.trim_start_matches('\\') == "\"\"\"" {
        format!("\\{line}")
    } else {
        line.to_string()
    }
}

fn write_graph(out: &mut String, name: &str, g: &Graph) -> std::fmt::Result {
    let declared = Some(&g.buffers);
    let inputs: Vec<String> = g
        .inputs
        .iter()
        .map(|i| match i {
            GraphInput::Tensor { name } => match g.buffers.get(name).map(|d| &d.kind) {
                Some(BufferKind::Tensor(l)) => format!("{name}: {l}"),
                Some(BufferKind::Multi) => format!("{name}: multi"),
                None => name.to_string(),
            },
            GraphInput::Symbol { name, symbol } => format!("{name}: sym {symbol}"),
            GraphInput::SymExpr { name, expr } => format!("{name}: sym {expr}"),
        })
        .collect();
    let outputs: Vec<String> = g
        .outputs
        .iter()
        .map(|o| match o {
            GraphOutput::Buffer(b) => b.to_string(),
            GraphOutput::Expr(e) => expr_arg(e, declared),
            GraphOutput::None => "None".to_string(),
        })
        .collect();
    writeln!(
        out,
        "graph {name}({}) -> ({}) {{",
        inputs.join(", "),
        outputs.join(", ")
    )?;
    let tensor_inputs: Vec<&BufName> = g.tensor_inputs().collect();
    for (name, decl) in &g.buffers {
        if tensor_inputs.contains(&name) {
            continue;
        }
        match &decl.kind {
            BufferKind::Tensor(l) => writeln!(out, "  buffer {name}: {l}")?,
            BufferKind::Multi => writeln!(out, "  buffer {name}: multi")?,
        }
    }
    let braces = match_device_guards(&g.lines);
    let mut depth = 1usize;
    for (line, brace) in g.lines.iter().zip(braces) {
        if matches!(brace, Brace::Close) {
            depth = depth.saturating_sub(1);
        }
        for _ in 0..depth {
            out.push_str("  ");
        }
        let text = match (line, brace) {
            (Line::EnterDeviceContext { device_index, streams }, Brace::None) => {
                format!("enter_device {device_index}{}", device_streams(streams))
            }
            (Line::ExitDeviceContext, Brace::None) => "exit_device".to_string(),
            (Line::EnterScope(scope), Brace::None) => format!("enter_{}", scope_head(scope)),
            (Line::ExitScope { scope }, Brace::None) => scope.exit_keyword().to_string(),
            _ => line_text(line, declared),
        };
        out.push_str(&text);
        out.push('\n');
        if matches!(brace, Brace::Open) {
            depth += 1;
        }
    }
    out.push_str("}\n");
    Ok(())
}

#[derive(Clone, Copy)]
enum Brace {
    Open,
    Close,
    None,
}

/// What a block of the text form is: a device guard or a scope of one kind.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Device,
    Scope(ScopeKind),
}

/// Pairs each block-opening line (`EnterDeviceContext`, `EnterScope`) with
/// the exit of its kind that closes it, innermost first; an exit whose kind
/// is not the innermost open block's, and an opening that nothing closes,
/// get `Brace::None` (printed in their bare forms). The pairs nest, so the
/// parser's `}` (which closes the innermost block it opened) reads back the
/// same lines.
fn match_device_guards(lines: &[Line]) -> Vec<Brace> {
    let mut braces = vec![Brace::None; lines.len()];
    let mut open: Vec<(usize, BlockKind)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let exit = match line {
            Line::EnterDeviceContext { .. } => {
                open.push((i, BlockKind::Device));
                continue;
            }
            Line::EnterScope(scope) => {
                open.push((i, BlockKind::Scope(scope.kind())));
                continue;
            }
            Line::ExitDeviceContext => BlockKind::Device,
            Line::ExitScope { scope } => BlockKind::Scope(*scope),
            _ => continue,
        };
        if let Some(&(j, kind)) = open.last() {
            if kind == exit {
                open.pop();
                braces[j] = Brace::Open;
                braces[i] = Brace::Close;
            }
        }
    }
    braces
}

/// ` streams(3, 5)` (and ` reuse_stream_cache`) after a device guard's index;
/// empty for a plain guard.
fn device_streams(streams: &Option<DeviceStreams>) -> String {
    let Some(st) = streams else {
        return String::new();
    };
    let objects: Vec<String> = st.user_objects.iter().map(u32::to_string).collect();
    let mut s = format!(" streams({})", objects.join(", "));
    if !st.reads_current_stream {
        s.push_str(" reuse_stream_cache");
    }
    s
}

/// A scope's keyword and operands (`stream 1`, `mem_pool 3 device 0`,
/// `profile_scope`), without the block's `{`.
fn scope_head(scope: &Scope) -> String {
    match scope {
        Scope::Stream { stream } => format!("stream {stream}"),
        Scope::MemPool { pool, device_index } => format!("mem_pool {pool} device {device_index}"),
        Scope::KernelProfile => "profile_scope".to_string(),
    }
}

/// An expression in an argument or output position: integers and plain
/// symbols bare, everything else parenthesised.
fn expr_arg(e: &SymExpr, declared: Declared<'_>) -> String {
    match e {
        SymExpr::Int(v) => v.to_string(),
        SymExpr::Sym(s)
            if is_ident(s.as_str())
                && !RESERVED_IN_ARGS.contains(&s.as_str())
                && !declared.is_some_and(|d| d.contains_key(s.as_str())) =>
        {
            s.to_string()
        }
        other => format!("({other})"),
    }
}

/// An expression followed by more syntax: `ParenIfCompound`, except that a
/// symbol that names a declared buffer is parenthesised too.
fn expr_atom(e: &SymExpr, declared: Declared<'_>) -> String {
    match e {
        SymExpr::Sym(s) if declared.is_some_and(|d| d.contains_key(s.as_str())) => format!("({e})"),
        _ => ParenIfCompound(e).to_string(),
    }
}

fn arg_value(v: &ArgValue, declared: Declared<'_>) -> String {
    match v {
        ArgValue::Buffer(b) => b.to_string(),
        ArgValue::Expr(e) => expr_arg(e, declared),
        ArgValue::Float(f) => {
            let mut s = String::new();
            let _ = write_float(&mut s, *f);
            s
        }
        ArgValue::Bool(true) => "True".into(),
        ArgValue::Bool(false) => "False".into(),
        ArgValue::None => "None".into(),
        ArgValue::Str(s) => PyStr(s).to_string(),
        ArgValue::DType(d) => format!("torch.{}", d.torch_name()),
        ArgValue::Device(d) => format!("device('{d}')"),
        ArgValue::List(items) => {
            let inner: Vec<String> = items.iter().map(|i| arg_value(i, declared)).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

/// An assert line's text `s`, then the producing op's name (quoted) when known.
fn with_context(mut s: String, context: &Option<String>) -> String {
    if let Some(c) = context {
        let _ = write!(s, " {}", PyStr(c));
    }
    s
}

fn expr_list(items: &[SymExpr]) -> String {
    let inner: Vec<String> = items.iter().map(|e| e.to_string()).collect();
    format!("[{}]", inner.join(", "))
}

fn extern_args(args: &[ArgValue], kwargs: &IndexMap<String, ArgValue>, declared: Declared<'_>) -> String {
    let mut parts: Vec<String> = args.iter().map(|a| arg_value(a, declared)).collect();
    parts.extend(
        kwargs
            .iter()
            .map(|(k, v)| format!("{}={}", name_token(k), arg_value(v, declared))),
    );
    parts.join(", ")
}

/// One line's text, without indentation, resolving bare identifiers against
/// `declared` (the enclosing graph's buffers, when known).
pub(super) fn line_text(line: &Line, declared: Declared<'_>) -> String {
    match line {
        Line::Allocate { buffer } => format!("alloc {buffer}"),
        Line::FreeIfNotReused { buffer, is_reused } => {
            format!("free_if_not_reused {buffer}{}", if *is_reused { " reused" } else { "" })
        }
        Line::Free { buffer } => format!("free {buffer}"),
        Line::Reuse { old, new, delete_old } => {
            format!("reuse {old} -> {new}{}", if *delete_old { "" } else { " keep_old" })
        }
        Line::Reinterpret { base, alias } => format!("reinterpret {base} -> {alias}"),
        Line::KernelDefinition { kernel } => format!("define {kernel}"),
        Line::KernelCall(c) => {
            let args: Vec<String> = c
                .args
                .iter()
                .map(|a| match &a.name {
                    Some(n) => format!("{}={}", name_token(n), arg_value(&a.value, declared)),
                    None => arg_value(&a.value, declared),
                })
                .collect();
            let mut s = format!("call {}({})", c.kernel, args.join(", "));
            if let Some(d) = &c.device {
                let _ = write!(s, " @{d}");
            }
            s
        }
        Line::SymbolicCallArg { symbol, expr } => format!("let {symbol} = {expr}"),
        Line::ExternKernelAlloc(c) => match &c.result {
            Some(r) => format!("extern {r} = {}({})", c.op, extern_args(&c.args, &c.kwargs, declared)),
            None => format!("extern {}({})", c.op, extern_args(&c.args, &c.kwargs, declared)),
        },
        Line::ExternKernelOut { call, out } => {
            let mut s = format!(
                "extern_out {out} = {}({})",
                call.op,
                extern_args(&call.args, &call.kwargs, declared)
            );
            // An out= call normally has no result of its own; keep one if present.
            if let Some(r) = &call.result {
                let _ = write!(s, " result {r}");
            }
            s
        }
        Line::ExternKernelMultiOut(m) => {
            let call = &m.call;
            let outs: Vec<String> = m.outs.iter().map(|(k, b)| format!("{}={b}", name_token(k))).collect();
            let args = extern_args(&call.args, &call.kwargs, declared);
            match &call.result {
                Some(r) => format!("extern_multi_out {r} = {}({args}) outs({})", call.op, outs.join(", ")),
                None => format!("extern_multi_out {}({args}) outs({})", call.op, outs.join(", ")),
            }
        }
        Line::MultiOutput(m) => {
            let mut s = format!("get {} = {}", m.result, m.source);
            for i in &m.indices {
                match i {
                    MultiIndex::Tuple(v) => {
                        let _ = write!(s, "[tuple {v}]");
                    }
                    MultiIndex::List(v) => {
                        let _ = write!(s, "[list {v}]");
                    }
                    MultiIndex::Dict(k) => {
                        let _ = write!(s, "[dict {}]", PyStr(k));
                    }
                }
            }
            s
        }
        Line::IndexPutFallback(p) => format!(
            "index_put {}[{}] = {}{}",
            p.target,
            IndexNames(&p.indices),
            p.values,
            if p.accumulate { " accumulate" } else { "" }
        ),
        Line::ScatterFallback(s) => {
            let mut t = format!(
                "scatter {}({}, {}, {}, {})",
                s.op,
                s.target,
                s.dim,
                s.index,
                arg_value(&s.src, declared)
            );
            if let Some(r) = &s.reduce {
                let _ = write!(t, " reduce {}", PyStr(r));
            }
            if let Some(b) = s.include_self {
                t.push_str(if b { " include_self True" } else { " include_self False" });
            }
            t
        }
        Line::DynamicScalar(d) => {
            let mut s = format!("item {} = {}{}", d.symbol, d.source, KeyPathText(&d.keypath));
            if let Some(n) = &d.node {
                let _ = write!(s, " node {n}");
            }
            s
        }
        Line::UnbackedSymbolDefs { source, bindings } => {
            let parts: Vec<String> = bindings
                .iter()
                .map(|(sym, path)| {
                    if path.is_empty() {
                        sym.to_string()
                    } else {
                        format!("{sym} = {}", KeyPathText(path))
                    }
                })
                .collect();
            if parts.is_empty() {
                format!("bind {source}:")
            } else {
                format!("bind {source}: {}", parts.join(", "))
            }
        }
        Line::Conditional(c) => {
            let pred = match &c.predicate {
                Predicate::Tensor(b) => b.to_string(),
                Predicate::Expr(e) => expr_atom(e, declared),
            };
            format!(
                "cond {} = if {pred} then {} else {} ({})",
                c.result,
                c.true_graph,
                c.false_graph,
                join_names(&c.operands)
            )
        }
        Line::Switch(sw) => {
            let selector = match &sw.selector {
                Predicate::Tensor(b) => b.to_string(),
                Predicate::Expr(e) => expr_atom(e, declared),
            };
            let branches: Vec<&str> = sw.branches.iter().map(|b| b.as_str()).collect();
            format!(
                "switch {} = {}on {selector} [{}] ({})",
                sw.result,
                if sw.cond { "cond " } else { "" },
                branches.join(", "),
                join_names(&sw.operands)
            )
        }
        Line::WhileLoop(w) => {
            let mut s = format!(
                "while {} = {} do {} ({})",
                w.result,
                w.cond_graph,
                w.body_graph,
                join_names(&w.carried)
            );
            if !w.additional.is_empty() {
                let _ = write!(s, " additional ({})", join_names(&w.additional));
            }
            s
        }
        Line::EnterDeviceContext { device_index, streams } => {
            format!("device {device_index}{} {{", device_streams(streams))
        }
        Line::ExitDeviceContext | Line::ExitScope { .. } => "}".to_string(),
        Line::EnterScope(scope) => format!("{} {{", scope_head(scope)),
        Line::Comment { text } => format!("comment {}", PyStr(text)),
        Line::AssertSizeStride(a) => {
            let mut s = format!(
                "assert_size_stride {} {} {}",
                a.buffer,
                expr_list(&a.size),
                expr_list(&a.stride)
            );
            if let Some(d) = a.dtype {
                let _ = write!(s, " dtype {d}");
            }
            with_context(s, &a.context)
        }
        Line::AssertSizeStrideGrouped(group) => {
            let members: Vec<String> = group
                .asserts
                .iter()
                .map(|a| format!("{} {} {}", a.buffer, expr_list(&a.size), expr_list(&a.stride)))
                .collect();
            with_context(
                format!("assert_size_stride_grouped ({})", members.join(", ")),
                &group.context,
            )
        }
        Line::AssertDivByZero { divisor, context } => {
            format!("assert_div_by_zero {} {}", expr_atom(divisor, declared), PyStr(context))
        }
        Line::AssertAlignment {
            buffer,
            alignment,
            context,
        } => with_context(format!("assert_alignment {buffer} {alignment}"), context),
        Line::AssertFinite { buffer } => format!("assert_finite {buffer}"),
        Line::RuntimeAssert { cond, message, node } => {
            let mut s = format!("assert {} {}", ParenIfCompound(cond), PyStr(message));
            if let Some(n) = node {
                let _ = write!(s, " node {n}");
            }
            s
        }
        Line::CommBufferAllocate {
            buffer,
            comm_kind,
            group,
        } => {
            format!("comm_alloc {buffer} {} {}", PyStr(comm_kind), PyStr(group))
        }
        Line::CommBufferFree { buffer } => format!("comm_free {buffer}"),
    }
}

fn join_names(names: &[BufName]) -> String {
    names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
}
