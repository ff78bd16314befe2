//! The parser of the `.wir` text form.

use super::cursor::{first_token, is_ident, strip_comment, Cursor};
use super::{GraphSource, ParseError, SourceMap, SourcePosition};
use crate::ir::{
    ArgValue, AssertSizeStride, AssertSizeStrideGrouped, BufName, BufferDecl, BufferKind, CallArg, Conditional,
    ConstValue, CppMeta, DType, Device, DeviceStreams, DynamicScalar, ExternCall, ExternMultiOut, Graph, GraphInput,
    GraphName, GraphOutput, GridType, HalideArg, HalideMeta, IndexPutFallback, KernelBackend, KernelCall, KernelDef,
    KernelName, KeyEntry, KeyPath, Layout, Line, MultiIndex, MultiOutput, PrecomputedGridEntry, Predicate, Program,
    ScatterFallback, Scope, ScopeKind, SigType, SizeStrideCheck, Switch, SymbolDecl, SymbolKind, TensorMethod,
    TritonMeta, ValueRange, WhileLoop, FORMAT_VERSION,
};
use crate::sym::{self, SymExpr, Symbol};
use indexmap::IndexMap;
use smallvec::SmallVec;
use std::fmt;

type Buffers = IndexMap<BufName, BufferDecl>;

/// Names that read as buffers in a graph: the program's constants and the
/// graph's buffer table (looked up in both rather than copied into one map).
struct Declared<'x> {
    constants: &'x IndexMap<BufName, Layout>,
    buffers: &'x Buffers,
    /// [`crate::Limits::max_text_depth`]: the deepest nesting of list arguments.
    max_depth: usize,
}

impl Declared<'_> {
    fn contains_key(&self, name: &str) -> bool {
        self.get_key(name).is_some()
    }

    /// The declared name equal to `name`.
    fn get_key(&self, name: &str) -> Option<&BufName> {
        match self.buffers.get_key_value(name) {
            Some((k, _)) => Some(k),
            None => self.constants.get_key_value(name).map(|(k, _)| k),
        }
    }
}

pub(super) fn program(text: &str, limits: &crate::Limits) -> Result<(Program, SourceMap), ParseError> {
    Parser {
        max_depth: limits.max_text_depth,
        lines: {
            // Sized up front: a large program has hundreds of thousands of lines.
            let mut lines = Vec::with_capacity(text.bytes().filter(|b| *b == b'\n').count() + 1);
            lines.extend(text.split('\n'));
            lines
        },
        next: 0,
        source_map: SourceMap::default(),
    }
    .program()
}

struct Parser<'a> {
    /// Raw lines (split on `\n` only, so a block string keeps any `\r`).
    lines: Vec<&'a str>,
    /// Index of the next unread raw line.
    next: usize,
    /// [`crate::Limits::max_text_depth`]: the deepest nesting of `device` blocks and list arguments.
    max_depth: usize,
    /// Where each graph and line was read.
    source_map: SourceMap,
}

/// A graph output before the buffer table is complete.
enum RawOutput {
    None,
    Ident(String),
    Expr(SymExpr),
}

fn parse_expr(c: &Cursor<'_>, pos: usize, text: &str, what: &dyn fmt::Display) -> Result<SymExpr, ParseError> {
    if text.is_empty() {
        return Err(c.error_at(pos, format!("expected an expression in {what}")));
    }
    sym::parse(text).map_err(|e| {
        let offset = pos + e.offset.min(text.len());
        c.error_at(offset, format!("invalid expression `{text}` in {what}: {}", e.message))
    })
}

fn is_int_literal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn is_float_literal(s: &str) -> bool {
    if matches!(s, "inf" | "-inf" | "nan") {
        return true;
    }
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|ch| ch.is_ascii_digit() || ch == '-' || ch == '.');
    first_ok && s.parse::<f64>().is_ok()
}

fn parse_float(c: &Cursor<'_>, pos: usize, s: &str) -> Result<f64, ParseError> {
    s.parse::<f64>()
        .map_err(|_| c.error_at(pos, format!("invalid float `{s}`")))
}

/// An integer, a symbol, or a parenthesised expression (the `ParenIfCompound` form).
fn expr_atom(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<SymExpr, ParseError> {
    match c.peek() {
        Some('(') => {
            c.eat("(");
            let (pos, inner) = c.balanced_until(&[')'], what)?;
            c.expect(")", || format!("expected `)` to close the expression in {what}"))?;
            parse_expr(c, pos, inner, what)
        }
        Some(ch) if ch == '-' || ch.is_ascii_digit() => {
            Ok(SymExpr::Int(c.integer(&format_args!("an integer in {what}"))?))
        }
        Some(ch) if ch.is_ascii_alphabetic() || ch == '_' => {
            let name = c.ident().unwrap_or_default();
            Ok(SymExpr::sym(name))
        }
        _ => {
            let found = first_token(c.rest()).to_string();
            if found.is_empty() {
                Err(c.error(format!("expected an expression in {what}, found end of line")))
            } else {
                Err(c.error(format!("expected an expression in {what}, found `{found}`")))
            }
        }
    }
}

/// Comma-separated items up to `close` (the opening bracket already read),
/// each read by `item`; `what` names the list in the error for a missing
/// `,` or `close`.
fn comma_list<'a, T, C: Default + Extend<T>>(
    c: &mut Cursor<'a>,
    close: &str,
    what: &dyn fmt::Display,
    mut item: impl FnMut(&mut Cursor<'a>) -> Result<T, ParseError>,
) -> Result<C, ParseError> {
    let mut out = C::default();
    if c.eat(close) {
        return Ok(out);
    }
    loop {
        out.extend(Some(item(c)?));
        if !c.eat(",") {
            c.expect(close, || format!("expected `,` or `{close}` in {what}"))?;
            return Ok(out);
        }
    }
}

/// Comma-separated expressions up to `close` (the opening bracket already read).
fn expr_list(c: &mut Cursor<'_>, close: char, what: &dyn fmt::Display) -> Result<SmallVec<[SymExpr; 4]>, ParseError> {
    comma_list(c, &close.to_string(), what, |c| {
        let (pos, text) = c.balanced_until(&[',', close], what)?;
        parse_expr(c, pos, text, what)
    })
}

/// A name that is an identifier or a string literal.
fn name_token(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<String, ParseError> {
    if c.peek() == Some('\'') {
        c.string(what)
    } else {
        c.expect_ident(|| format!("expected {what}")).map(str::to_string)
    }
}

/// A buffer name after the token `after`.
fn buf_after(c: &mut Cursor<'_>, after: &str) -> Result<BufName, ParseError> {
    buf_name(c, || format!("expected a buffer name after `{after}`"))
}

/// A buffer name after the token `after`, then `sep` (`=`, `->`, `:`, `[`).
fn buf_then(c: &mut Cursor<'_>, after: &str, sep: &str) -> Result<BufName, ParseError> {
    let b = buf_after(c, after)?;
    c.expect(sep, || format!("expected `{sep}` after buffer name `{b}`"))?;
    Ok(b)
}

/// The optional `node <buffer>` clause of a line: the FX node it came from.
fn node_clause(c: &mut Cursor<'_>) -> Result<Option<BufName>, ParseError> {
    Ok(if c.eat_keyword("node") {
        Some(buf_after(c, "node")?)
    } else {
        None
    })
}

/// The optional context string that ends an assertion line.
fn context_string(c: &mut Cursor<'_>) -> Result<Option<String>, ParseError> {
    Ok(if c.peek() == Some('\'') {
        Some(c.string(&"the context string")?)
    } else {
        None
    })
}

fn buf_name(c: &mut Cursor<'_>, what: impl FnOnce() -> String) -> Result<BufName, ParseError> {
    c.expect_ident(what).map(BufName::new)
}

fn layout(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<Layout, ParseError> {
    c.skip_ws();
    let dtype_pos = c.pos();
    let dtype_name = c.expect_ident(|| format!("expected a dtype in the layout of {what}"))?;
    let dtype: DType = dtype_name.parse().map_err(|_| {
        c.error_at(
            dtype_pos,
            format!("unknown dtype `{dtype_name}` in the layout of {what}"),
        )
    })?;
    c.expect("[", || {
        format!("expected `[` after dtype `{dtype_name}` in the layout of {what}")
    })?;
    let size = expr_list(c, ']', &format_args!("the sizes of {what}"))?;
    c.expect("[", || format!("expected `[` (strides) after the sizes of {what}"))?;
    let stride = expr_list(c, ']', &format_args!("the strides of {what}"))?;
    let offset = if c.eat("+") {
        expr_atom(c, &format_args!("the offset of {what}"))?
    } else {
        SymExpr::Int(0)
    };
    c.expect("@", || format!("expected `@DEVICE` in the layout of {what}"))?;
    c.skip_ws();
    let dev_pos = c.pos();
    let dev_text = c.take_while(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':');
    let device: Device = dev_text
        .parse()
        .map_err(|e: String| c.error_at(dev_pos, format!("{e} in the layout of {what}")))?;
    let alloc_numel = if c.eat_keyword("alloc") {
        Some(expr_atom(c, &format_args!("`alloc` of {what}"))?)
    } else {
        None
    };
    Ok(Layout {
        dtype,
        device,
        size,
        stride,
        offset,
        alloc_numel,
    })
}

fn const_value(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<ConstValue, ParseError> {
    if c.peek() == Some('\'') {
        return Ok(ConstValue::Str(c.string(what)?));
    }
    c.skip_ws();
    let pos = c.pos();
    let tok = c.take_while(|ch| !ch.is_whitespace() && ch != ',');
    Ok(match tok {
        "None" => ConstValue::None,
        "True" => ConstValue::Bool(true),
        "False" => ConstValue::Bool(false),
        "" => return Err(c.error_at(pos, format!("expected a value for {what}"))),
        t if is_int_literal(t) => ConstValue::Int(
            t.parse()
                .map_err(|_| c.error_at(pos, format!("integer `{t}` is out of range for {what}")))?,
        ),
        t if is_float_literal(t) => ConstValue::Float(parse_float(c, pos, t)?),
        t => {
            return Err(c.error_at(
                pos,
                format!("invalid value `{t}` for {what} (expected None, True, False, a number or a string)"),
            ))
        }
    })
}

/// `name: VALUE, ...` to the end of the line.
fn keyed_list<T>(
    c: &mut Cursor<'_>,
    what: &dyn fmt::Display,
    mut value: impl FnMut(&mut Cursor<'_>, &dyn fmt::Display) -> Result<T, ParseError>,
    stop_at: Option<&str>,
) -> Result<IndexMap<String, T>, ParseError> {
    let mut map = IndexMap::new();
    let at_stop = |c: &mut Cursor<'_>| c.at_end() || stop_at.is_some_and(|s| c.rest().starts_with(s));
    if at_stop(c) {
        return Ok(map);
    }
    loop {
        c.skip_ws();
        let pos = c.pos();
        let key = name_token(c, &format_args!("a name in {what}"))?;
        c.expect(":", || format!("expected `:` after `{key}` in {what}"))?;
        let v = value(c, &format_args!("`{key}` in {what}"))?;
        if map.insert(key.clone(), v).is_some() {
            return Err(c.error_at(pos, format!("`{key}` appears twice in {what}")));
        }
        if !c.eat(",") {
            return Ok(map);
        }
    }
}

fn string_list(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<Vec<String>, ParseError> {
    c.expect("[", || format!("expected `[` to start {what}"))?;
    comma_list(c, "]", what, |c| c.string(&format_args!("an element of {what}")))
}

/// `[sizes] [strides]` of a size/stride check on `buffer`.
fn size_stride(
    c: &mut Cursor<'_>,
    buffer: &BufName,
) -> Result<(SmallVec<[SymExpr; 4]>, SmallVec<[SymExpr; 4]>), ParseError> {
    c.expect("[", || format!("expected `[` (sizes) after buffer name `{buffer}`"))?;
    let size = expr_list(c, ']', &format_args!("the sizes of the check of `{buffer}`"))?;
    c.expect("[", || {
        format!("expected `[` (strides) after the sizes of the check of `{buffer}`")
    })?;
    let stride = expr_list(c, ']', &format_args!("the strides of the check of `{buffer}`"))?;
    Ok((size, stride))
}

/// `(a, b, ...)` of buffer names.
fn name_list(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<Vec<BufName>, ParseError> {
    c.expect("(", || format!("expected `(` to start {what}"))?;
    comma_list(c, ")", what, |c| {
        buf_name(c, || format!("expected a buffer name in {what}"))
    })
}

fn arg_value(c: &mut Cursor<'_>, declared: &Declared<'_>, what: &dyn fmt::Display) -> Result<ArgValue, ParseError> {
    arg_value_at(c, declared, what, 0)
}

/// [`arg_value`] inside `depth` enclosing lists (at most [`Declared::max_depth`]).
fn arg_value_at(
    c: &mut Cursor<'_>,
    declared: &Declared<'_>,
    what: &dyn fmt::Display,
    depth: usize,
) -> Result<ArgValue, ParseError> {
    match c.peek() {
        Some('\'') => return Ok(ArgValue::Str(c.string(&format_args!("a string argument of {what}"))?)),
        Some('[') => {
            if depth >= declared.max_depth {
                let e = crate::Limits::check(
                    crate::Limit::TextDepth,
                    depth as u64 + 1,
                    declared.max_depth as u64,
                    format!("list arguments of {what} nested too deep"),
                );
                return Err(c.error(e.err().map(|e| e.to_string()).unwrap_or_default()));
            }
            c.eat("[");
            let items = comma_list(c, "]", &format_args!("a list argument of {what}"), |c| {
                arg_value_at(c, declared, what, depth + 1)
            })?;
            return Ok(ArgValue::List(items));
        }
        // An expression that starts with a parenthesised term runs on to the
        // next `,` / `)` / `]` at its level like any other (`(1 + s77)*(1 + s27)`,
        // as Inductor prints call arguments); a parenthesised name (`(s0)`)
        // is always an expression, never a buffer.
        _ => {}
    }
    if c.eat("device(") {
        c.skip_ws();
        let pos = c.pos();
        let text = c.string(&format_args!("the device argument of {what}"))?;
        let device: Device = text.parse().map_err(|e: String| c.error_at(pos, e))?;
        c.expect(")", || format!("expected `)` after the device in {what}"))?;
        return Ok(ArgValue::Device(device));
    }
    if c.eat("torch.") {
        let pos = c.pos();
        let name = c.expect_ident(|| format!("expected a dtype after `torch.` in {what}"))?;
        return DType::ALL
            .into_iter()
            .find(|d| d.torch_name() == name)
            .map(ArgValue::DType)
            .ok_or_else(|| c.error_at(pos, format!("unknown dtype `torch.{name}` in {what}")));
    }
    let (pos, text) = c.balanced_until(&[',', ')', ']'], what)?;
    Ok(match text {
        "" => return Err(c.error_at(pos, format!("expected an argument in {what}"))),
        "None" => ArgValue::None,
        "True" => ArgValue::Bool(true),
        "False" => ArgValue::Bool(false),
        t if is_int_literal(t) => {
            ArgValue::Expr(SymExpr::Int(t.parse().map_err(|_| {
                c.error_at(pos, format!("integer `{t}` is out of range in {what}"))
            })?))
        }
        t if is_float_literal(t) => ArgValue::Float(parse_float(c, pos, t)?),
        t if is_ident(t) => {
            if let Some(b) = declared.get_key(t) {
                // The declaration's name, shared rather than allocated again.
                ArgValue::Buffer(b.clone())
            } else {
                ArgValue::Expr(SymExpr::sym(t))
            }
        }
        t => ArgValue::Expr(parse_expr(c, pos, t, what)?),
    })
}

/// `name=` if it comes next (not `==`).
fn kwarg_name(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<Option<String>, ParseError> {
    c.skip_ws();
    let save = c.pos();
    let is_name_start = c.peek() == Some('\'') || c.peek().is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_');
    if !is_name_start {
        return Ok(None);
    }
    let name = name_token(c, what)?;
    if c.eat("=") && c.peek_raw() != Some('=') {
        return Ok(Some(name));
    }
    c.set_pos(save);
    Ok(None)
}

/// Arguments up to `)` (the `(` already read), as (keyword, value) pairs.
fn call_args(
    c: &mut Cursor<'_>,
    declared: &Declared<'_>,
    what: &dyn fmt::Display,
) -> Result<Vec<(Option<String>, ArgValue)>, ParseError> {
    comma_list(c, ")", &format_args!("the arguments of {what}"), |c| {
        let name = kwarg_name(c, what)?;
        let value = arg_value(c, declared, what)?;
        Ok((name, value))
    })
}

fn key_path(c: &mut Cursor<'_>, what: &dyn fmt::Display) -> Result<KeyPath, ParseError> {
    let mut path = KeyPath::new();
    loop {
        let pos = c.pos();
        if c.eat_raw(".") {
            let name = c
                .peek_raw()
                .filter(|ch| ch.is_ascii_alphabetic() || *ch == '_')
                .and(c.ident());
            let Some(name) = name else {
                return Err(c.error_at(
                    pos,
                    format!("expected a method or attribute after `.` in the key path of {what}"),
                ));
            };
            if c.eat_raw("()") {
                path.push(match name {
                    "size" => KeyEntry::CallMethod(TensorMethod::Size),
                    "stride" => KeyEntry::CallMethod(TensorMethod::Stride),
                    "storage_offset" => KeyEntry::CallMethod(TensorMethod::StorageOffset),
                    "to_int" => KeyEntry::ConvertInt,
                    other => {
                        return Err(c.error_at(
                            pos,
                            format!(
                                "unknown method `.{other}()` in the key path of {what} \
                                 (expected `.size()`, `.stride()`, `.storage_offset()` or `.to_int()`)"
                            ),
                        ))
                    }
                });
            } else {
                path.push(KeyEntry::InnerTensor(name.to_string()));
            }
        } else if c.eat_raw("[") {
            path.push(KeyEntry::Index(
                c.integer(&format_args!("an index in the key path of {what}"))?,
            ));
            c.expect("]", || {
                format!("expected `]` after the index in the key path of {what}")
            })?;
        } else if c.eat_raw("//") {
            path.push(KeyEntry::DivideBy(
                c.integer(&format_args!("a divisor in the key path of {what}"))?,
            ));
        } else {
            return Ok(path);
        }
    }
}

impl<'a> Parser<'a> {
    /// The next line with code on it, skipping blank and comment-only lines.
    fn next_code_line(&mut self) -> Option<Cursor<'a>> {
        while let Some(raw) = self.lines.get(self.next) {
            self.next += 1;
            // Trailing blanks are already cut: only a blank line is empty.
            let code = strip_comment(raw);
            if !code.is_empty() {
                return Some(Cursor::new(code, self.next));
            }
        }
        None
    }

    /// How many `buffer` declarations come next (skipping blank and comment lines).
    fn buffer_decls_ahead(&self) -> usize {
        self.lines
            .get(self.next..)
            .unwrap_or_default()
            .iter()
            .map(|raw| strip_comment(raw).trim_start())
            .filter(|code| !code.is_empty())
            .take_while(|code| code.strip_prefix("buffer").is_some_and(|r| r.starts_with([' ', '\t'])))
            .count()
    }

    fn eof_error(&self, message: String) -> ParseError {
        let line = self.lines.len().max(1);
        let column = self.lines.last().map_or(0, |l| l.chars().count()) + 1;
        ParseError { line, column, message }
    }

    fn program(mut self) -> Result<(Program, SourceMap), ParseError> {
        let mut c = self.next_code_line().ok_or_else(|| ParseError {
            line: 1,
            column: 1,
            message: "empty input: expected `wrapir <version>` header".into(),
        })?;
        c.expect_keyword("wrapir", || "expected `wrapir <version>` header".into())?;
        c.skip_ws();
        let vpos = c.pos();
        let version: u32 = c.integer(&"a format version after `wrapir`")?;
        if version != FORMAT_VERSION {
            return Err(c.error_at(
                vpos,
                format!("unsupported format version {version} (this wrapir reads version {FORMAT_VERSION})"),
            ));
        }
        c.finish(&"the header")?;
        let mut program = Program::new();
        let mut main: Option<Graph> = None;
        while let Some(mut c) = self.next_code_line() {
            c.skip_ws();
            let pos = c.pos();
            match c.ident() {
                Some("symbol") => {
                    self.symbol(&mut c, &mut program)?;
                    if let Some((name, _)) = program.symbols.last() {
                        self.source_map
                            .declarations
                            .insert(("symbol", name.to_string()), c.position_at(pos));
                    }
                }
                Some("constant") => {
                    let name = buf_name(&mut c, || "expected a constant name after `constant`".into())?;
                    c.expect(":", || format!("expected `:` after constant name `{name}`"))?;
                    let l = layout(&mut c, &format_args!("constant `{name}`"))?;
                    c.finish(&format_args!("the layout of constant `{name}`"))?;
                    if program.constants.insert(name.clone(), l).is_some() {
                        return Err(c.error_at(pos, format!("constant `{name}` is declared twice")));
                    }
                    self.source_map
                        .declarations
                        .insert(("constant", name.to_string()), c.position_at(pos));
                }
                Some("kernel") => {
                    let k = self.kernel(&mut c)?;
                    if program.kernels.contains_key(&k.name) {
                        return Err(c.error_at(pos, format!("kernel `{}` is defined twice", k.name)));
                    }
                    self.source_map
                        .declarations
                        .insert(("kernel", k.name.to_string()), c.position_at(pos));
                    program.kernels.insert(k.name.clone(), k);
                }
                Some("graph") => {
                    c.skip_ws();
                    let gpos = c.pos();
                    let name = c
                        .expect_ident(|| "expected a graph name after `graph`".into())?
                        .to_string();
                    let mut source = GraphSource {
                        header: c.position_at(pos),
                        lines: Vec::new(),
                    };
                    let g = self.graph(&mut c, &name, &program.constants, &mut source.lines)?;
                    self.source_map.graphs.insert(name.clone(), source);
                    if main.is_none() {
                        if name != "main" {
                            return Err(c.error_at(gpos, format!("the first graph must be `main`, found `{name}`")));
                        }
                        main = Some(g);
                    } else if program.subgraphs.insert(GraphName::new(&name), g).is_some() {
                        return Err(c.error_at(gpos, format!("graph `{name}` is defined twice")));
                    }
                }
                Some(other) => {
                    return Err(c.error_at(
                        pos,
                        format!("unknown item `{other}` (expected `symbol`, `constant`, `kernel` or `graph`)"),
                    ))
                }
                None => {
                    let tok = first_token(c.rest()).to_string();
                    return Err(c.error_at(
                        pos,
                        format!("unexpected `{tok}` (expected `symbol`, `constant`, `kernel` or `graph`)"),
                    ));
                }
            }
        }
        program.main = main.ok_or_else(|| self.eof_error("missing `graph main`".into()))?;
        Ok((program, self.source_map))
    }

    fn symbol(&mut self, c: &mut Cursor<'a>, program: &mut Program) -> Result<(), ParseError> {
        c.skip_ws();
        let pos = c.pos();
        let name = c.expect_ident(|| "expected a symbol name after `symbol`".into())?;
        c.expect(":", || format!("expected `:` after symbol name `{name}`"))?;
        c.skip_ws();
        let kpos = c.pos();
        let word = c.ident();
        let Some(kind) = word.and_then(|w| SymbolKind::ALL.into_iter().find(|k| k.name() == w)) else {
            return Err(c.error_at(
                kpos,
                format!(
                    "unknown symbol kind `{}` for `{name}` (expected `backed`, `unbacked`, `precomputed` or `unbacked_float`)",
                    word.unwrap_or_else(|| first_token(c.rest_str()))
                ),
            ));
        };
        let mut range = ValueRange::default();
        if c.eat("[") {
            let what = format_args!("the range of symbol `{name}`");
            range.lo = if c.eat("-inf") {
                None
            } else {
                Some(c.integer(&format_args!("a lower bound in {what}"))?)
            };
            c.expect(",", || format!("expected `,` between the bounds of {what}"))?;
            range.hi = if c.eat_keyword("inf") {
                None
            } else {
                Some(c.integer(&format_args!("an upper bound in {what}"))?)
            };
            c.expect("]", || format!("expected `]` to close {what}"))?;
        }
        let hint = if c.eat_keyword("hint") {
            Some(c.integer(&format_args!("a hint for symbol `{name}`"))?)
        } else {
            None
        };
        c.finish(&format_args!("symbol `{name}`"))?;
        if program
            .symbols
            .insert(Symbol::new(name), SymbolDecl { kind, range, hint })
            .is_some()
        {
            return Err(c.error_at(pos, format!("symbol `{name}` is declared twice")));
        }
        Ok(())
    }

    /// Reads the lines of a `"""` block (the `source` line already read).
    fn block_string(&mut self, kernel: &str) -> Result<String, ParseError> {
        let open_line = self.next + 1;
        match self.lines.get(self.next) {
            Some(l) if *l == "\"\"\"" => self.next += 1,
            _ => {
                return Err(ParseError {
                    line: open_line,
                    column: 1,
                    message: format!("expected `\"\"\"` on the line after `source` in kernel `{kernel}`"),
                })
            }
        }
        let mut body: Vec<&str> = Vec::new();
        while let Some(l) = self.lines.get(self.next) {
            self.next += 1;
            if *l == "\"\"\"" {
                return Ok(body.join("\n"));
            }
            // One backslash was added in front of a line that is `"""` after backslashes.
            let unescaped = match l.strip_prefix('\\') {
                Some(rest) if rest.trim_start_matches('\\') == "\"\"\"" => rest,
                _ => l,
            };
            body.push(unescaped);
        }
        Err(ParseError {
            line: open_line,
            column: 1,
            message: format!("unterminated source block of kernel `{kernel}` (missing closing `\"\"\"`)"),
        })
    }

    fn kernel(&mut self, c: &mut Cursor<'a>) -> Result<KernelDef, ParseError> {
        let name = c
            .expect_ident(|| "expected a kernel name after `kernel`".into())?
            .to_string();
        c.expect(":", || format!("expected `:` after kernel name `{name}`"))?;
        c.skip_ws();
        let bpos = c.pos();
        let backend_kw = c.ident().unwrap_or_default();
        if !matches!(backend_kw, "triton" | "halide" | "cpp" | "cuda_c" | "host") {
            return Err(c.error_at(
                bpos,
                format!(
                    "unknown backend `{}` for kernel `{name}` (expected `triton`, `halide`, `cpp`, `cuda_c` or `host`)",
                    if backend_kw.is_empty() {
                        first_token(c.rest_str())
                    } else {
                        backend_kw
                    }
                ),
            ));
        }
        c.expect("{", || format!("expected `{{` after `kernel {name}: {backend_kw}`"))?;
        c.finish(&format_args!("`{{` of kernel `{name}`"))?;
        let header_line = self.next;

        let mut seen: Vec<String> = Vec::new();
        let mut comments = Vec::new();
        let mut source = String::new();
        // Triton fields.
        let mut signature: Option<IndexMap<String, SigType>> = None;
        let mut constants = IndexMap::new();
        let mut config = IndexMap::new();
        let mut grid_type: Option<GridType> = None;
        let mut num_warps: Option<u32> = None;
        let mut num_stages = 1;
        let mut shared_mem = 0;
        let mut global_scratch = None;
        let mut profile_scratch = None;
        let mut extra_launcher_args = Vec::new();
        let mut mangled_name = None;
        let mut cubin = None;
        let mut user_defined = false;
        // Halide fields.
        let mut target: Option<String> = None;
        let mut scheduler = None;
        let mut scheduler_flags = IndexMap::new();
        let mut cuda_device = None;
        let mut argtypes = Vec::new();
        // C++ fields.
        let mut arg_types = Vec::new();
        let mut isa = None;

        loop {
            let Some(mut c) = self.next_code_line() else {
                return Err(self.eof_error(format!("unexpected end of input in kernel `{name}` (missing `}}`)")));
            };
            if c.eat("}") {
                c.finish(&format_args!("the `}}` closing kernel `{name}`"))?;
                break;
            }
            c.skip_ws();
            let fpos = c.pos();
            let field = c.expect_ident(|| format!("expected a field name in kernel `{name}`"))?;
            let repeatable = matches!(field, "comment" | "arg" | "candidate");
            if !repeatable {
                if seen.iter().any(|s| s == field) {
                    return Err(c.error_at(fpos, format!("duplicate field `{field}` in kernel `{name}`")));
                }
                seen.push(field.to_string());
            }
            let what = format_args!("`{field}` of kernel `{name}`");
            match (backend_kw, field) {
                (_, "comment") => comments.push(c.string(&what)?),
                (_, "source") => {
                    c.finish(&what)?;
                    source = self.block_string(&name)?;
                    continue;
                }
                ("triton", "signature") => {
                    let mut sig = IndexMap::new();
                    let list = keyed_list(
                        &mut c,
                        &what,
                        |c, w| {
                            c.skip_ws();
                            let pos = c.pos();
                            let text = if c.peek() == Some('\'') {
                                c.string(w)?
                            } else {
                                c.take_while(|ch| !ch.is_whitespace() && ch != ',').to_string()
                            };
                            text.parse::<SigType>()
                                .map_err(|e| c.error_at(pos, format!("{e} ({w})")))
                        },
                        None,
                    )?;
                    sig.extend(list);
                    signature = Some(sig);
                }
                ("triton", "constants") => constants = keyed_list(&mut c, &what, const_value, None)?,
                ("triton", "config") => {
                    config = keyed_list(
                        &mut c,
                        &what,
                        |c, w| c.integer(&format_args!("an integer for {w}")),
                        None,
                    )?
                }
                ("triton", "grid") => {
                    c.skip_ws();
                    let gpos = c.pos();
                    let g = c.ident().unwrap_or_default();
                    grid_type = Some(match g {
                        "Grid1D" => GridType::Grid1D,
                        "Grid2D" => GridType::Grid2D,
                        "Grid3D" => GridType::Grid3D,
                        "Grid2DWithYZOverflow" => {
                            c.expect_keyword("max_y_grid", || {
                                format!("expected `max_y_grid N` after `Grid2DWithYZOverflow` in kernel `{name}`")
                            })?;
                            GridType::Grid2DWithYZOverflow {
                                max_y_grid: c.integer(&"an integer after `max_y_grid`")?,
                            }
                        }
                        "CooperativeReductionGrid" => GridType::CooperativeReductionGrid,
                        "SplitScanGrid" => GridType::SplitScanGrid,
                        "FixedGrid" => GridType::FixedGrid,
                        "PrecomputedGrid" => GridType::PrecomputedGrid { grids: Vec::new() },
                        _ => {
                            return Err(c.error_at(
                                gpos,
                                format!(
                                    "unknown grid type `{}` in kernel `{name}`",
                                    first_token(c.rest_str_from(gpos))
                                ),
                            ))
                        }
                    });
                }
                ("triton", "candidate") => {
                    let Some(GridType::PrecomputedGrid { grids }) = grid_type.as_mut() else {
                        return Err(c.error_at(
                            fpos,
                            format!("`candidate` line without a preceding `grid PrecomputedGrid` in kernel `{name}`"),
                        ));
                    };
                    let cfg = keyed_list(
                        &mut c,
                        &what,
                        |c, w| c.integer(&format_args!("an integer for {w}")),
                        Some("=>"),
                    )?;
                    c.expect("=>", || {
                        format!("expected `=>` before the grid of a candidate in kernel `{name}`")
                    })?;
                    c.expect("(", || {
                        format!("expected `(` to start the grid of a candidate in kernel `{name}`")
                    })?;
                    let gw = format!("a grid candidate of kernel `{name}`");
                    let exprs = expr_list(&mut c, ')', &gw)?;
                    let grid: [SymExpr; 3] = exprs.into_vec().try_into().map_err(|v: Vec<SymExpr>| {
                        c.error_at(fpos, format!("{gw} has {} expressions, expected 3", v.len()))
                    })?;
                    grids.push(PrecomputedGridEntry { config: cfg, grid });
                }
                ("triton", "num_warps") => num_warps = Some(c.integer(&format_args!("an integer for {what}"))?),
                ("triton", "num_stages") => num_stages = c.integer(&format_args!("an integer for {what}"))?,
                ("triton", "shared_mem") => shared_mem = c.integer(&format_args!("an integer for {what}"))?,
                ("triton", "global_scratch") => {
                    global_scratch = Some(c.integer(&format_args!("an integer for {what}"))?)
                }
                ("triton", "profile_scratch") => {
                    profile_scratch = Some(c.integer(&format_args!("an integer for {what}"))?)
                }
                ("triton", "extra_launcher_args") => loop {
                    extra_launcher_args.push(name_token(&mut c, &format_args!("a name in {what}"))?);
                    if !c.eat(",") {
                        break;
                    }
                },
                ("triton", "mangled_name") => mangled_name = Some(c.string(&what)?),
                ("triton", "cubin") => cubin = Some(c.string(&what)?),
                ("triton", "user_defined") => user_defined = true,
                ("halide", "target") => target = Some(c.string(&what)?),
                ("halide", "scheduler") => scheduler = Some(c.string(&what)?),
                ("halide", "scheduler_flags") => scheduler_flags = keyed_list(&mut c, &what, const_value, None)?,
                ("halide", "cuda_device") => cuda_device = Some(c.integer(&format_args!("an integer for {what}"))?),
                ("halide", "arg") => {
                    let arg_name = name_token(&mut c, &format_args!("an argument name in {what}"))?;
                    c.expect(":", || {
                        format!("expected `:` after Halide argument `{arg_name}` in kernel `{name}`")
                    })?;
                    let aw = format!("Halide argument `{arg_name}` of kernel `{name}`");
                    let ctype = c.string(&format_args!("the C type of {aw}"))?;
                    let mut arg = HalideArg {
                        ctype,
                        name: arg_name,
                        shape: None,
                        stride: None,
                        offset: None,
                        alias_of: None,
                    };
                    let mut arg_seen: Vec<&str> = Vec::new();
                    while !c.at_end() {
                        c.skip_ws();
                        let kpos = c.pos();
                        let key = c.ident().unwrap_or_default();
                        if arg_seen.contains(&key) {
                            return Err(c.error_at(kpos, format!("duplicate `{key}` in {aw}")));
                        }
                        match key {
                            "shape" => arg.shape = Some(string_list(&mut c, &format_args!("the shape of {aw}"))?),
                            "stride" => arg.stride = Some(string_list(&mut c, &format_args!("the stride of {aw}"))?),
                            "offset" => arg.offset = Some(c.string(&format_args!("the offset of {aw}"))?),
                            "alias_of" => arg.alias_of = Some(c.string(&format_args!("`alias_of` of {aw}"))?),
                            _ => {
                                return Err(c.error_at(
                                    kpos,
                                    format!(
                                        "unexpected `{}` in {aw} (expected `shape`, `stride`, `offset` or `alias_of`)",
                                        first_token(c.rest_str_from(kpos))
                                    ),
                                ))
                            }
                        }
                        arg_seen.push(key);
                    }
                    argtypes.push(arg);
                }
                ("cpp", "isa") => {
                    let pos = c.pos();
                    let text = c.string(&what)?;
                    isa = Some(text.parse().map_err(|e| c.error_at(pos, format!("{e} in {what}")))?);
                }
                ("cpp", "arg_types") => loop {
                    arg_types.push(c.string(&format_args!("a type in {what}"))?);
                    if !c.eat(",") {
                        break;
                    }
                },
                _ => {
                    return Err(c.error_at(fpos, format!("unknown field `{field}` in {backend_kw} kernel `{name}`")));
                }
            }
            c.finish(&what)?;
        }
        let missing = |field: &str| ParseError {
            line: header_line,
            column: 1,
            message: format!("{backend_kw} kernel `{name}` is missing `{field}`"),
        };
        let backend = match backend_kw {
            "triton" => KernelBackend::Triton(TritonMeta {
                signature: signature.ok_or_else(|| missing("signature"))?,
                constants,
                config,
                grid_type: grid_type.ok_or_else(|| missing("grid"))?,
                num_warps: num_warps.ok_or_else(|| missing("num_warps"))?,
                num_stages,
                shared_mem,
                global_scratch,
                profile_scratch,
                extra_launcher_args,
                mangled_name,
                cubin,
                user_defined,
            }),
            "halide" => KernelBackend::Halide(HalideMeta {
                argtypes,
                target: target.ok_or_else(|| missing("target"))?,
                scheduler,
                scheduler_flags,
                cuda_device,
            }),
            "cpp" => KernelBackend::Cpp(CppMeta { arg_types, isa }),
            "cuda_c" => KernelBackend::CudaC,
            _ => KernelBackend::Host,
        };
        Ok(KernelDef {
            name: KernelName::new(&name),
            backend,
            source,
            comments,
        })
    }

    fn graph(
        &mut self,
        c: &mut Cursor<'a>,
        name: &str,
        constants: &IndexMap<BufName, Layout>,
        positions: &mut Vec<SourcePosition>,
    ) -> Result<Graph, ParseError> {
        let mut g = Graph::default();
        // Names that read as buffers: program constants and this graph's buffer table.
        c.expect("(", || format!("expected `(` after graph name `{name}`"))?;
        if !c.eat(")") {
            loop {
                c.skip_ws();
                let ipos = c.pos();
                let input = buf_name(c, || format!("expected an input name in graph `{name}`"))?;
                let input_kind = if c.eat(":") {
                    if c.eat_keyword("sym") {
                        // A symbol (`sym s0`) or an expression of symbols
                        // (`sym 2*s0 + 1`), up to the next `,` or `)`.
                        c.skip_ws();
                        let what = format_args!("input `{input}`");
                        let (pos, text) = c.balanced_until(&[',', ')'], &what)?;
                        match parse_expr(c, pos, text.trim_end(), &what)? {
                            SymExpr::Sym(symbol) => GraphInput::Symbol {
                                name: input.clone(),
                                symbol,
                            },
                            expr => GraphInput::SymExpr {
                                name: input.clone(),
                                expr,
                            },
                        }
                    } else {
                        let kind = if c.eat_keyword("multi") {
                            BufferKind::Multi
                        } else {
                            BufferKind::Tensor(layout(c, &format_args!("input `{input}`"))?)
                        };
                        let decl = BufferDecl { kind };
                        match g.buffers.get(&input) {
                            Some(old) if *old != decl => {
                                return Err(c.error_at(ipos, format!("input `{input}` is declared twice differently")))
                            }
                            _ => {
                                g.buffers.insert(input.clone(), decl);
                            }
                        }
                        GraphInput::Tensor { name: input.clone() }
                    }
                } else {
                    GraphInput::Tensor { name: input.clone() }
                };
                g.inputs.push(input_kind);
                if c.eat(",") {
                    continue;
                }
                c.expect(")", || {
                    format!("expected `,` or `)` after input `{input}` of graph `{name}`")
                })?;
                break;
            }
        }
        c.expect("->", || format!("expected `->` after the inputs of graph `{name}`"))?;
        c.expect("(", || format!("expected `(` to start the outputs of graph `{name}`"))?;
        let what = format_args!("the outputs of graph `{name}`");
        let raw_outputs: Vec<RawOutput> = comma_list(c, ")", &what, |c| {
            let (pos, text) = c.balanced_until(&[',', ')'], &what)?;
            Ok(match text {
                "None" => RawOutput::None,
                t if is_ident(t) => RawOutput::Ident(t.to_string()),
                t if is_int_literal(t) => RawOutput::Expr(SymExpr::Int(
                    t.parse()
                        .map_err(|_| c.error_at(pos, format!("integer `{t}` is out of range in {what}")))?,
                )),
                t => RawOutput::Expr(parse_expr(c, pos, t, &what)?),
            })
        })?;
        c.expect("{", || format!("expected `{{` after the outputs of graph `{name}`"))?;
        c.finish(&format_args!("the `{{` of graph `{name}`"))?;

        // Sized up front (the tables of a large graph are large): the buffer
        // declarations that follow, and at most one line per raw line left.
        g.buffers.reserve(self.buffer_decls_ahead());
        g.lines.reserve(self.lines.len().saturating_sub(self.next));
        // The exit line each open block's `}` stands for, innermost last.
        let mut open_blocks: Vec<Line> = Vec::new();
        let mut in_lines = false;
        loop {
            let Some(mut c) = self.next_code_line() else {
                return Err(self.eof_error(format!(
                    "unexpected end of input: graph `{name}` is not closed (missing `}}`)"
                )));
            };
            c.skip_ws();
            let close = c.position_at(c.pos());
            if c.eat("}") {
                c.finish(&"`}`")?;
                if let Some(exit) = open_blocks.pop() {
                    g.lines.push(exit);
                    positions.push(close);
                    continue;
                }
                break;
            }
            c.skip_ws();
            let kpos = c.pos();
            let Some(kw) = c.ident() else {
                let tok = first_token(c.rest()).to_string();
                return Err(c.error_at(kpos, format!("expected a line kind in graph `{name}`, found `{tok}`")));
            };
            if kw == "buffer" {
                if in_lines {
                    return Err(c.error_at(
                        kpos,
                        format!("`buffer` declarations must come before the first line of graph `{name}`"),
                    ));
                }
                let b = buf_then(&mut c, "buffer", ":")?;
                let kind = if c.eat_keyword("multi") {
                    BufferKind::Multi
                } else {
                    BufferKind::Tensor(layout(&mut c, &format_args!("buffer `{b}`"))?)
                };
                c.finish(&format_args!("the declaration of buffer `{b}`"))?;
                if g.buffers.contains_key(&b) {
                    return Err(c.error_at(kpos, format!("buffer `{b}` is declared twice in graph `{name}`")));
                }
                g.buffers.insert(b, BufferDecl { kind });
                continue;
            }
            in_lines = true;
            // Names that read as buffers: program constants and this graph's buffer table.
            let declared = Declared {
                constants,
                buffers: &g.buffers,
                max_depth: self.max_depth,
            };
            let line = line(&mut c, kw, &declared)?;
            // The block forms (`device 0 {`, `stream 1 {`, ...); the bare
            // `enter_*` forms open no block.
            let block_exit = match &line {
                Line::EnterDeviceContext { .. } if kw == "device" => Some(Line::ExitDeviceContext),
                Line::EnterScope(scope) if kw == scope.keyword() => Some(Line::ExitScope { scope: scope.kind() }),
                _ => None,
            };
            if let Some(exit) = block_exit {
                if open_blocks.len() >= self.max_depth {
                    let e = crate::Limits::check(
                        crate::Limit::TextDepth,
                        open_blocks.len() as u64 + 1,
                        self.max_depth as u64,
                        format!("`{kw}` blocks in graph `{name}` nested too deep"),
                    );
                    return Err(c.error_at(kpos, e.err().map(|e| e.to_string()).unwrap_or_default()));
                }
                open_blocks.push(exit);
            }
            g.lines.push(line);
            positions.push(c.position_at(kpos));
        }
        let declared = Declared {
            constants,
            buffers: &g.buffers,
            max_depth: self.max_depth,
        };
        let outputs = raw_outputs
            .into_iter()
            .map(|o| match o {
                RawOutput::None => GraphOutput::None,
                RawOutput::Ident(n) if declared.contains_key(n.as_str()) => GraphOutput::Buffer(BufName::new(n)),
                RawOutput::Ident(n) => GraphOutput::Expr(SymExpr::sym(n)),
                RawOutput::Expr(e) => GraphOutput::Expr(e),
            })
            .collect();
        g.outputs = outputs;
        g.lines.shrink_to_fit();
        Ok(g)
    }
}

/// Parses one graph line whose keyword `kw` has been read.
/// A `cond` predicate or `switch` selector: a declared buffer written alone
/// (a tensor), else an expression atom.
fn predicate(c: &mut Cursor<'_>, declared: &Declared<'_>, what: &dyn fmt::Display) -> Result<Predicate, ParseError> {
    c.skip_ws();
    let pos = c.pos();
    Ok(match expr_atom(c, what)? {
        SymExpr::Sym(s) if declared.contains_key(s.as_str()) && c.pos() == pos + s.as_str().len() => {
            Predicate::Tensor(BufName::new(s.as_str()))
        }
        e => Predicate::Expr(e),
    })
}

fn line(c: &mut Cursor<'_>, kw: &str, declared: &Declared<'_>) -> Result<Line, ParseError> {
    let line = match kw {
        "alloc" => Line::Allocate {
            buffer: buf_after(c, kw)?,
        },
        "free_if_not_reused" => {
            let buffer = buf_after(c, kw)?;
            Line::FreeIfNotReused {
                buffer,
                is_reused: c.eat_keyword("reused"),
            }
        }
        "free" => Line::Free {
            buffer: buf_after(c, kw)?,
        },
        "reuse" => {
            let old = buf_then(c, kw, "->")?;
            let new = buf_after(c, "->")?;
            Line::Reuse {
                old,
                new,
                delete_old: !c.eat_keyword("keep_old"),
            }
        }
        "reinterpret" => {
            let base = buf_then(c, kw, "->")?;
            Line::Reinterpret {
                base,
                alias: buf_after(c, "->")?,
            }
        }
        "define" => Line::KernelDefinition {
            kernel: KernelName::new(c.expect_ident(|| "expected a kernel name after `define`".into())?),
        },
        "call" => {
            let kernel = KernelName::new(c.expect_ident(|| "expected a kernel name after `call`".into())?);
            c.expect("(", || format!("expected `(` after kernel name `{kernel}`"))?;
            let what = format_args!("the call of `{kernel}`");
            let args = call_args(c, declared, &what)?
                .into_iter()
                .map(|(name, value)| CallArg { name, value })
                .collect();
            let device = if c.eat("@") {
                c.skip_ws();
                let pos = c.pos();
                let text = c.take_while(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':');
                Some(
                    text.parse::<Device>()
                        .map_err(|e| c.error_at(pos, format!("{e} in {what}")))?,
                )
            } else {
                None
            };
            Line::KernelCall(KernelCall { kernel, args, device })
        }
        "let" => {
            let symbol = c.expect_ident(|| "expected a symbol name after `let`".into())?;
            c.expect("=", || format!("expected `=` after symbol `{symbol}`"))?;
            let what = format_args!("`let {symbol}`");
            let (pos, text) = c.balanced_until(&[], &what)?;
            Line::SymbolicCallArg {
                symbol: Symbol::new(symbol),
                expr: parse_expr(c, pos, text, &what)?,
            }
        }
        "extern" | "extern_out" | "extern_multi_out" => {
            c.skip_ws();
            let pos = c.pos();
            let first = c.take_while(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.');
            let (result, op) = if c.rest().starts_with('=') && !c.rest().starts_with("==") {
                c.eat("=");
                if !is_ident(first) {
                    return Err(c.error_at(
                        pos,
                        format!("expected a buffer name before `=` in `{kw}`, found `{first}`"),
                    ));
                }
                c.skip_ws();
                (
                    Some(BufName::new(first)),
                    c.take_while(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'),
                )
            } else {
                (None, first)
            };
            if op.is_empty() {
                return Err(c.error(format!("expected an op name in `{kw}`")));
            }
            c.expect("(", || format!("expected `(` after op `{op}`"))?;
            let what = format_args!("`{op}`");
            let mut args = Vec::new();
            let mut kwargs = IndexMap::new();
            for (name, value) in call_args(c, declared, &what)? {
                match name {
                    Some(n) => {
                        if kwargs.contains_key(&n) {
                            return Err(c.error(format!("keyword argument `{n}` given twice in {what}")));
                        }
                        kwargs.insert(n, value);
                    }
                    None if kwargs.is_empty() => args.push(value),
                    None => return Err(c.error(format!("positional argument after keyword arguments in {what}"))),
                }
            }
            if kw == "extern" {
                Line::ExternKernelAlloc(ExternCall {
                    result,
                    op: op.to_string(),
                    args,
                    kwargs,
                })
            } else if kw == "extern_multi_out" {
                if !c.eat_keyword("outs") || !c.eat("(") {
                    return Err(c.error(format!("expected `outs(NAME=BUFFER, ...)` after the call of {what}")));
                }
                let mut outs = IndexMap::new();
                for (name, value) in call_args(c, declared, &format_args!("the outputs of {what}"))? {
                    let (Some(n), ArgValue::Buffer(b)) = (name, value) else {
                        return Err(c.error(format!("the outputs of {what} are `NAME=BUFFER` pairs")));
                    };
                    if kwargs.contains_key(&n) || outs.contains_key(&n) {
                        return Err(c.error(format!("keyword argument `{n}` given twice in {what}")));
                    }
                    outs.insert(n, b);
                }
                Line::ExternKernelMultiOut(ExternMultiOut {
                    call: ExternCall {
                        result,
                        op: op.to_string(),
                        args,
                        kwargs,
                    },
                    outs,
                })
            } else {
                let Some(out) = result else {
                    return Err(c.error_at(pos, format!("expected `OUT = ` before op `{op}` in `extern_out`")));
                };
                let result = if c.eat_keyword("result") {
                    Some(buf_name(c, || "expected a buffer name after `result`".into())?)
                } else {
                    None
                };
                Line::ExternKernelOut {
                    call: ExternCall {
                        result,
                        op: op.to_string(),
                        args,
                        kwargs,
                    },
                    out,
                }
            }
        }
        "get" => {
            let result = buf_then(c, kw, "=")?;
            let source = buf_after(c, "=")?;
            let mut indices = SmallVec::new();
            while c.eat("[") {
                c.skip_ws();
                let pos = c.pos();
                let what = format_args!("an index of `get {result}`");
                indices.push(match c.ident() {
                    Some("tuple") => MultiIndex::Tuple(c.integer(&what)?),
                    Some("list") => MultiIndex::List(c.integer(&what)?),
                    Some("dict") => MultiIndex::Dict(c.string(&what)?),
                    _ => {
                        return Err(c.error_at(pos, format!("expected `tuple`, `list` or `dict` in {what}")));
                    }
                });
                c.expect("]", || format!("expected `]` to close {what}"))?;
            }
            Line::MultiOutput(MultiOutput {
                result,
                source,
                indices,
            })
        }
        "index_put" => {
            let target = buf_then(c, kw, "[")?;
            let indices = comma_list(c, "]", &format_args!("the indices of `{target}`"), |c| {
                let i = c.expect_ident(|| format!("expected a buffer name or `None` in the indices of `{target}`"))?;
                Ok(if i == "None" { None } else { Some(BufName::new(i)) })
            })?;
            c.expect("=", || format!("expected `=` after the indices of `{target}`"))?;
            let values = buf_after(c, "=")?;
            Line::IndexPutFallback(IndexPutFallback {
                target,
                indices,
                values,
                accumulate: c.eat_keyword("accumulate"),
            })
        }
        "scatter" => {
            c.skip_ws();
            let op = c
                .take_while(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.')
                .to_string();
            if op.is_empty() {
                return Err(c.error("expected an op name after `scatter`"));
            }
            let what = format_args!("`scatter {op}`");
            c.expect("(", || format!("expected `(` after op `{op}`"))?;
            let target = buf_name(c, || format!("expected the target buffer in {what}"))?;
            c.expect(",", || format!("expected `,` after the target in {what}"))?;
            let dim = c.integer(&format_args!("the dimension in {what}"))?;
            c.expect(",", || format!("expected `,` after the dimension in {what}"))?;
            let index = buf_name(c, || format!("expected the index buffer in {what}"))?;
            c.expect(",", || format!("expected `,` after the index in {what}"))?;
            let src = arg_value(c, declared, &what)?;
            c.expect(")", || format!("expected `)` after the source in {what}"))?;
            let reduce = if c.eat_keyword("reduce") {
                Some(c.string(&format_args!("`reduce` of {what}"))?)
            } else {
                None
            };
            let include_self = if c.eat_keyword("include_self") {
                if c.eat_keyword("True") {
                    Some(true)
                } else if c.eat_keyword("False") {
                    Some(false)
                } else {
                    return Err(c.error(format!("expected `True` or `False` after `include_self` in {what}")));
                }
            } else {
                None
            };
            Line::ScatterFallback(ScatterFallback {
                op,
                target,
                dim,
                index,
                src,
                reduce,
                include_self,
            })
        }
        "item" => {
            let symbol = c.expect_ident(|| "expected a symbol name after `item`".into())?;
            c.expect("=", || format!("expected `=` after symbol `{symbol}`"))?;
            let source = buf_after(c, "=")?;
            let keypath = key_path(c, &format_args!("`item {symbol}`"))?;
            let node = node_clause(c)?;
            Line::DynamicScalar(DynamicScalar {
                symbol: Symbol::new(symbol),
                source,
                keypath,
                node,
            })
        }
        "bind" => {
            let source = buf_then(c, kw, ":")?;
            let mut bindings = IndexMap::new();
            if !c.at_end() {
                loop {
                    c.skip_ws();
                    let pos = c.pos();
                    let s = c.expect_ident(|| format!("expected a symbol in `bind {source}`"))?;
                    let path = if c.eat("=") {
                        c.skip_ws();
                        key_path(c, &format_args!("`{s}` in `bind {source}`"))?
                    } else {
                        KeyPath::new()
                    };
                    if bindings.insert(Symbol::new(s), path).is_some() {
                        return Err(c.error_at(pos, format!("symbol `{s}` is bound twice in `bind {source}`")));
                    }
                    if !c.eat(",") {
                        break;
                    }
                }
            }
            Line::UnbackedSymbolDefs { source, bindings }
        }
        "cond" => {
            let result = buf_then(c, kw, "=")?;
            c.expect_keyword("if", || format!("expected `if` in `cond {result}`"))?;
            let what = format_args!("the predicate of `cond {result}`");
            let predicate = predicate(c, declared, &what)?;
            c.expect_keyword("then", || format!("expected `then` after {what}"))?;
            let true_graph =
                GraphName::new(c.expect_ident(|| format!("expected a graph name after `then` in `cond {result}`"))?);
            c.expect_keyword("else", || format!("expected `else` after `then {true_graph}`"))?;
            let false_graph =
                GraphName::new(c.expect_ident(|| format!("expected a graph name after `else` in `cond {result}`"))?);
            let operands = name_list(c, &format_args!("the operands of `cond {result}`"))?;
            Line::Conditional(Conditional {
                result,
                predicate,
                true_graph,
                false_graph,
                operands,
            })
        }
        "switch" => {
            let result = buf_then(c, kw, "=")?;
            let cond = c.eat_keyword("cond");
            c.expect_keyword("on", || format!("expected `on` in `switch {result}`"))?;
            let what = format_args!("the selector of `switch {result}`");
            let selector = predicate(c, declared, &what)?;
            c.expect("[", || format!("expected `[` (branches) after {what}"))?;
            let branches = comma_list(c, "]", &format_args!("the branches of `switch {result}`"), |c| {
                c.expect_ident(|| format!("expected a graph name in the branches of `switch {result}`"))
                    .map(GraphName::new)
            })?;
            let operands = name_list(c, &format_args!("the operands of `switch {result}`"))?;
            Line::Switch(Switch {
                result,
                selector,
                branches,
                operands,
                cond,
            })
        }
        "while" => {
            let result = buf_then(c, kw, "=")?;
            let cond_graph =
                GraphName::new(c.expect_ident(|| format!("expected a condition graph in `while {result}`"))?);
            c.expect_keyword("do", || format!("expected `do` after `{cond_graph}`"))?;
            let body_graph =
                GraphName::new(c.expect_ident(|| format!("expected a body graph after `do` in `while {result}`"))?);
            let carried = name_list(c, &format_args!("the carried inputs of `while {result}`"))?;
            let additional = if c.eat_keyword("additional") {
                name_list(c, &format_args!("the additional inputs of `while {result}`"))?
            } else {
                Vec::new()
            };
            Line::WhileLoop(WhileLoop {
                result,
                cond_graph,
                body_graph,
                carried,
                additional,
            })
        }
        "device" => {
            let device_index = c.integer(&"a device index after `device`")?;
            let streams = device_streams(c)?;
            c.expect("{", || {
                "expected `{` after `device N` (use `enter_device N` for an unmatched guard)".into()
            })?;
            Line::EnterDeviceContext { device_index, streams }
        }
        "enter_device" => {
            let device_index = c.integer(&"a device index after `enter_device`")?;
            let streams = device_streams(c)?;
            Line::EnterDeviceContext { device_index, streams }
        }
        "exit_device" => Line::ExitDeviceContext,
        "stream" | "mem_pool" | "profile_scope" => {
            let scope = scope_operands(c, kw)?;
            c.expect("{", || {
                format!("expected `{{` after `{kw}` (use `enter_{kw}` for an unmatched scope)")
            })?;
            Line::EnterScope(scope)
        }
        "enter_stream" | "enter_mem_pool" | "enter_profile_scope" => {
            Line::EnterScope(scope_operands(c, &kw["enter_".len()..])?)
        }
        "exit_stream" => Line::ExitScope {
            scope: ScopeKind::Stream,
        },
        "exit_mem_pool" => Line::ExitScope {
            scope: ScopeKind::MemPool,
        },
        "exit_profile_scope" => Line::ExitScope {
            scope: ScopeKind::KernelProfile,
        },
        "assert_finite" => Line::AssertFinite {
            buffer: buf_after(c, kw)?,
        },
        "comment" => Line::Comment {
            text: c.string(&"the text of `comment`")?,
        },
        "assert_size_stride" => {
            let buffer = buf_after(c, kw)?;
            let (size, stride) = size_stride(c, &buffer)?;
            let dtype = if c.eat_keyword("dtype") {
                c.skip_ws();
                let pos = c.pos();
                let name =
                    c.expect_ident(|| format!("expected a dtype after `dtype` in `assert_size_stride {buffer}`"))?;
                Some(
                    name.parse::<DType>()
                        .map_err(|_| c.error_at(pos, format!("unknown dtype `{name}`")))?,
                )
            } else {
                None
            };
            let context = context_string(c)?;
            Line::AssertSizeStride(AssertSizeStride {
                buffer,
                size,
                stride,
                dtype,
                context,
            })
        }
        "assert_size_stride_grouped" => {
            let what = format_args!("the checks of `assert_size_stride_grouped`");
            c.expect("(", || format!("expected `(` to start {what}"))?;
            let asserts = comma_list(c, ")", &what, |c| {
                let buffer = buf_name(c, || format!("expected a buffer name in {what}"))?;
                let (size, stride) = size_stride(c, &buffer)?;
                Ok(SizeStrideCheck { buffer, size, stride })
            })?;
            let context = context_string(c)?;
            Line::AssertSizeStrideGrouped(AssertSizeStrideGrouped { asserts, context })
        }
        "assert_div_by_zero" => {
            let divisor = expr_atom(c, &"the divisor of `assert_div_by_zero`")?;
            let context = c.string(&"the context of `assert_div_by_zero`")?;
            Line::AssertDivByZero { divisor, context }
        }
        "assert_alignment" => {
            let buffer = buf_after(c, kw)?;
            let alignment = c.integer(&format_args!("an alignment after buffer name `{buffer}`"))?;
            let context = context_string(c)?;
            Line::AssertAlignment {
                buffer,
                alignment,
                context,
            }
        }
        "assert" => {
            let cond = expr_atom(c, &"`assert`")?;
            let message = c.string(&"the message of `assert`")?;
            let node = node_clause(c)?;
            Line::RuntimeAssert { cond, message, node }
        }
        "comm_alloc" => {
            let buffer = buf_after(c, kw)?;
            let comm_kind = c.string(&format_args!("the kind of `comm_alloc {buffer}`"))?;
            let group = c.string(&format_args!("the group of `comm_alloc {buffer}`"))?;
            Line::CommBufferAllocate {
                buffer,
                comm_kind,
                group,
            }
        }
        "comm_free" => Line::CommBufferFree {
            buffer: buf_after(c, kw)?,
        },
        other => {
            return Err(c.error_at(
                c.pos().saturating_sub(other.len()),
                format!("unknown line kind `{other}`"),
            ))
        }
    };
    c.finish(&format_args!("`{kw}` line"))?;
    Ok(line)
}

/// A device guard's optional ` streams(3, 5)` and ` reuse_stream_cache`.
fn device_streams(c: &mut Cursor<'_>) -> Result<Option<DeviceStreams>, ParseError> {
    if !c.eat_keyword("streams") {
        return Ok(None);
    }
    c.expect("(", || "expected `(` after `streams`".into())?;
    let mut user_objects = Vec::new();
    c.skip_ws();
    if !c.eat(")") {
        loop {
            user_objects.push(c.integer(&"a stream's user-object index in `streams(...)`")?);
            c.skip_ws();
            if c.eat(")") {
                break;
            }
            c.expect(",", || "expected `,` or `)` in `streams(...)`".into())?;
        }
    }
    let reads_current_stream = !c.eat_keyword("reuse_stream_cache");
    Ok(Some(DeviceStreams {
        user_objects,
        reads_current_stream,
    }))
}

/// A scope's operands after its keyword (`stream`, `mem_pool`, `profile_scope`).
fn scope_operands(c: &mut Cursor<'_>, keyword: &str) -> Result<Scope, ParseError> {
    Ok(match keyword {
        "stream" => Scope::Stream {
            stream: c.integer(&"a stream index after `stream`")?,
        },
        "mem_pool" => {
            let pool = c.integer(&"a pool's user-object index after `mem_pool`")?;
            if !c.eat_keyword("device") {
                c.skip_ws();
                return Err(c.error_at(c.pos(), "expected `device N` after `mem_pool P`".to_string()));
            }
            Scope::MemPool {
                pool,
                device_index: c.integer(&"a device index after `mem_pool P device`")?,
            }
        }
        _ => Scope::KernelProfile,
    })
}
