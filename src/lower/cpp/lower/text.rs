//! C++ text of values: expressions, literals, dtypes and op names.

use super::*;

/// A buffer's C++ variable ([`GraphCtx::local`]) without building the string.
#[derive(Clone, Copy)]
pub(super) struct Var<'x> {
    pub(super) prefix: &'x str,
    pub(super) name: &'x str,
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
    pub(super) rewrite_c10: bool,
    pub(super) int_suffix: IntSuffix,
}

/// An expression printed as [`Lowering::cexpr`] prints it, without building
/// the string when no rewriting is needed.
#[derive(Clone, Copy)]
pub(super) struct CExpr<'e> {
    pub(super) e: &'e SymExpr,
    pub(super) style: CStyle,
}

impl fmt::Display for CExpr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.style.int_suffix == IntSuffix::L && !(self.style.rewrite_c10 && has_c10_helper(self.e)) {
            return crate::sym::print::write_cpp(f, self.e);
        }
        f.write_str(&cexpr_text(self.e, self.style))
    }
}

/// `true` when the standalone dialect rewrites the C++ form of `e`: it calls
/// `c10::div_floor_integer` or `c10::div_mod`, or holds `i64::MIN`, which
/// Inductor prints `(-1L << 63)` (a shift of a negative value, undefined
/// before C++20; the standalone dialect prints `INT64_MIN`).
pub(super) fn has_c10_helper(e: &SymExpr) -> bool {
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
pub(super) fn cexpr_text(e: &SymExpr, style: CStyle) -> String {
    let mut text = crate::sym::print::cpp(e);
    if style.rewrite_c10 {
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
pub(super) struct ArrayName(pub(super) usize);

impl fmt::Display for ArrayName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "int_array_{}", self.0)
    }
}

/// A dtype as the dialect names it ([`Lowering::use_dtype`]).
#[derive(Clone, Copy)]
pub(super) struct DTypeName {
    pub(super) dtype: DType,
    pub(super) dialect: &'static dyn DialectOps,
}

impl fmt::Display for DTypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.dialect.dtype(f, self.dtype)
    }
}

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
pub(super) fn op_suffix(name: &str, overload: Option<&str>, out_variant: bool) -> String {
    let overload = overload.filter(|o| *o != "default");
    match (overload, out_variant) {
        (Some(o), true) if o == "out" || o.ends_with("_out") => format!("{name}_{o}"),
        (Some(o), true) => format!("{name}_{o}_out"),
        (None, true) => format!("{name}_out"),
        (Some(o), false) => format!("{name}_{o}"),
        (None, false) => name.to_string(),
    }
}

pub(super) fn sanitize(s: &str) -> String {
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

/// The runtime header's `wrapir::DType` enumerators, one line each in
/// [`DType::ALL`] order: an enumerator's value is its dtype's code in the
/// runtime library's C ABI.
pub(in crate::lower::cpp) fn runtime_dtype_enumerators() -> String {
    DType::ALL
        .iter()
        .map(|&d| format!("  {},\n", runtime_dtype(d)))
        .collect()
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

pub(super) fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The index of a device (0 when it has none).
pub(super) fn device_index(d: &Device) -> u32 {
    d.index.unwrap_or(0)
}
