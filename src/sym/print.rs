//! Printers: Inductor's Python form (`pexpr`), Inductor's C++ form (`cexpr`),
//! and wrapir's canonical text form.
//!
//! # Precedence
//!
//! All three printers follow sympy's `StrPrinter` parenthesisation as Inductor
//! uses it (`ExprPrinter.stringify`): an operand is wrapped in `( )` when its
//! precedence is *at most* the level of the surrounding operator. Precedences
//! (sympy's values, with Inductor's overrides):
//!
//! | node | precedence |
//! |---|---|
//! | non-negative integer, symbol, boolean, `min`/`max` | 1000 (atom) |
//! | negative integer, `Add` | 40 |
//! | `Mul` | 40 when its first factor is a negative integer (sympy's "could extract minus sign") and none of its factors is one of Inductor's functions below, else 50 |
//! | `Pow` | 60 |
//! | `FloorDiv`, `CleanDiv`, `Mod`, `PythonMod`, `ModularIndexing` | 35 (Inductor sets `precedence = 35`) |
//! | `==`, `!=` | 50 (sympy's `Equality`/`Unequality`) |
//! | `<`, `<=`, `>`, `>=` | 35 |
//! | `and` / `or` / `not` | 30 / 20 / 100 |
//!
//! So `Add([s0, -1])` prints `s0 + (-1)`, `Mul([-1, s0])` prints `(-1)*s0`, and a
//! floor division inside a sum prints `1 + (s0 // 2)`, as Inductor writes them.
//! Terms are printed in the order stored; nothing is sorted.
//!
//! Two deliberate departures from upstream, both only reachable with trees that
//! mix booleans into arithmetic or comparisons: a comparison, `and`, `or` or `not`
//! used as an operand of arithmetic or of a comparison is always parenthesised
//! (sympy would print `not (a) == b` or `a == b < c`, which Python reads
//! differently).
//!
//! # Canonical form
//!
//! The Python form is lossy: `CleanDiv` prints like `FloorDiv` (`a // b`),
//! `PythonMod` like `Mod` (`a % b`), `ModularIndexing(x, d, m)` as
//! `((x // d) % m)`, and `Pow(x, 3)` as `x*x*x`. The canonical form
//! ([`write_canonical`], used by `SymExpr`'s `Display`, the `.wir` text form and
//! JSON) is the Python form except that it spells those four as
//! `CleanDiv(a, b)`, `PythonMod(a, b)`, `ModularIndexing(x, d, m)` and `x**3`,
//! and that it parenthesises a product used as a factor of a product, so that
//! [`crate::sym::parse`] gives back the same tree (see `parse` for the exact
//! statement).
use super::{CmpOp, SymExpr};
use std::fmt;

/// Which text form a printer writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    /// Inductor's `PythonPrinter`, exactly.
    Python,
    /// Python form with lossless spellings (round-trips through the parser).
    Canonical,
    /// Inductor's `CppPrinter` (Linux `L` suffix).
    Cpp,
}

const ATOM: u32 = 1000;
/// sympy's `PRECEDENCE["Atom"] - 0.5`: everything but atoms gets parentheses.
const BELOW_ATOM: u32 = 999;
const FUNC35: u32 = 35;
const REL: u32 = 35;
const ADD: u32 = 40;
const MUL: u32 = 50;
const POW: u32 = 60;
const AND: u32 = 30;
const OR: u32 = 20;
const NOT: u32 = 100;

/// Writes the Python form, exactly as Inductor's `pexpr` prints the same tree
/// (spec section 4.1). Used for Python wrapper lowering.
pub fn write_python(f: &mut dyn fmt::Write, e: &SymExpr) -> fmt::Result {
    write_expr(f, e, Style::Python)
}

/// The Python form as a string.
pub fn python(e: &SymExpr) -> String {
    to_string(e, Style::Python)
}

/// Writes the canonical form: the Python form with lossless spellings for
/// `CleanDiv`, `PythonMod`, `ModularIndexing` and `Pow` (see the module docs).
/// This is what `SymExpr`'s `Display`, the `.wir` text form and JSON use.
pub fn write_canonical(f: &mut dyn fmt::Write, e: &SymExpr) -> fmt::Result {
    write_expr(f, e, Style::Canonical)
}

/// The canonical form as a string.
pub fn canonical(e: &SymExpr) -> String {
    to_string(e, Style::Canonical)
}

/// Writes the C++ form, as Inductor's `cexpr` prints the same tree on Linux
/// (spec section 4.2): `4L`, `c10::div_floor_integer(...)`, `std::min(...)`,
/// `&&`, `||`, `!`, `true`, `false`.
pub fn write_cpp(f: &mut dyn fmt::Write, e: &SymExpr) -> fmt::Result {
    write_expr(f, e, Style::Cpp)
}

/// The C++ form as a string.
pub fn cpp(e: &SymExpr) -> String {
    to_string(e, Style::Cpp)
}

fn to_string(e: &SymExpr, style: Style) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = write_expr(&mut s, e, style);
    s
}

/// Inductor's functions that carry `precedence = 35`.
fn is_prec35_function(e: &SymExpr) -> bool {
    matches!(
        e,
        SymExpr::FloorDiv(..)
            | SymExpr::CleanDiv(..)
            | SymExpr::Mod(..)
            | SymExpr::PythonMod(..)
            | SymExpr::ModularIndexing(..)
    )
}

fn precedence(e: &SymExpr, style: Style) -> u32 {
    match e {
        SymExpr::Int(v) if *v < 0 => ADD,
        SymExpr::Int(_) | SymExpr::Bool(_) | SymExpr::Sym(_) | SymExpr::Min(_) | SymExpr::Max(_) => ATOM,
        SymExpr::Add(_) => ADD,
        SymExpr::Mul(factors) => {
            let negative_coefficient = matches!(factors.first(), Some(SymExpr::Int(v)) if *v < 0);
            if factors.iter().any(is_prec35_function) || !negative_coefficient {
                MUL
            } else {
                ADD
            }
        }
        SymExpr::Pow(..) => POW,
        SymExpr::FloorDiv(..) | SymExpr::Mod(..) => FUNC35,
        SymExpr::CleanDiv(..) | SymExpr::PythonMod(..) | SymExpr::ModularIndexing(..) => {
            if style == Style::Canonical {
                ATOM
            } else {
                FUNC35
            }
        }
        SymExpr::Cmp(CmpOp::Eq | CmpOp::Ne, ..) => MUL,
        SymExpr::Cmp(..) => REL,
        SymExpr::And(_) => AND,
        SymExpr::Or(_) => OR,
        SymExpr::Not(_) => NOT,
    }
}

/// Where an operand sits: in arithmetic/comparison operands booleans are
/// always parenthesised (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Arith,
    Logic,
}

/// Writes `e` parenthesised when its precedence is at most `level` (sympy's
/// `parenthesize(item, level, strict=False)`), plus the forced cases.
fn write_operand(f: &mut dyn fmt::Write, e: &SymExpr, style: Style, level: u32, ctx: Ctx, in_mul: bool) -> fmt::Result {
    let boolean_compound = matches!(e, SymExpr::Cmp(..) | SymExpr::And(_) | SymExpr::Or(_) | SymExpr::Not(_));
    let forced = (ctx == Ctx::Arith && boolean_compound)
        || (in_mul && style == Style::Canonical && matches!(e, SymExpr::Mul(_)));
    if forced || precedence(e, style) <= level {
        f.write_char('(')?;
        write_expr(f, e, style)?;
        f.write_char(')')
    } else {
        write_expr(f, e, style)
    }
}

/// sympy's `stringify(args, sep, level)`.
fn write_joined(
    f: &mut dyn fmt::Write,
    items: &[SymExpr],
    sep: &str,
    style: Style,
    level: u32,
    ctx: Ctx,
    in_mul: bool,
) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write_operand(f, item, style, level, ctx, in_mul)?;
    }
    Ok(())
}

fn write_int(f: &mut dyn fmt::Write, v: i64, style: Style) -> fmt::Result {
    match style {
        Style::Cpp if v == i64::MIN => f.write_str("(-1L << 63)"),
        Style::Cpp => write!(f, "{v}L"),
        Style::Python | Style::Canonical => write!(f, "{v}"),
    }
}

/// `static_cast<int64_t>(X)` around a bare C++ expression.
fn write_cast(f: &mut dyn fmt::Write, e: &SymExpr) -> fmt::Result {
    f.write_str("static_cast<int64_t>(")?;
    write_expr(f, e, Style::Cpp)?;
    f.write_char(')')
}

fn write_cpp_floor_div(f: &mut dyn fmt::Write, a: &SymExpr, b: &SymExpr) -> fmt::Result {
    f.write_str("c10::div_floor_integer(")?;
    write_cast(f, a)?;
    f.write_str(", ")?;
    write_cast(f, b)?;
    f.write_char(')')
}

fn write_call(f: &mut dyn fmt::Write, name: &str, args: &[&SymExpr], style: Style) -> fmt::Result {
    f.write_str(name)?;
    f.write_char('(')?;
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_expr(f, a, style)?;
    }
    f.write_char(')')
}

/// A degenerate n-ary node (fewer than two operands; the constructors never
/// make one): its identity when empty, its single operand otherwise.
fn write_degenerate(f: &mut dyn fmt::Write, items: &[SymExpr], identity: &SymExpr, style: Style) -> fmt::Result {
    match items.first() {
        Some(only) => write_expr(f, only, style),
        None => write_expr(f, identity, style),
    }
}

fn write_expr(f: &mut dyn fmt::Write, e: &SymExpr, style: Style) -> fmt::Result {
    use SymExpr as E;
    match e {
        E::Int(v) => write_int(f, *v, style),
        E::Bool(b) => f.write_str(match (style, b) {
            (Style::Cpp, true) => "true",
            (Style::Cpp, false) => "false",
            (_, true) => "True",
            (_, false) => "False",
        }),
        E::Sym(s) => f.write_str(s.as_str()),
        E::Add(terms) if terms.len() < 2 => write_degenerate(f, terms, &E::Int(0), style),
        E::Add(terms) => write_joined(f, terms, " + ", style, ADD, Ctx::Arith, false),
        E::Mul(factors) if factors.len() < 2 => write_degenerate(f, factors, &E::Int(1), style),
        E::Mul(factors) => write_joined(f, factors, "*", style, precedence(e, style), Ctx::Arith, true),
        E::Pow(base, n) => write_pow(f, base, *n, style),
        E::FloorDiv(a, b) => match style {
            Style::Cpp => write_cpp_floor_div(f, a, b),
            Style::Python | Style::Canonical => write_floor_div_infix(f, a, b, style),
        },
        E::CleanDiv(a, b) => match style {
            Style::Cpp => write_cpp_floor_div(f, a, b),
            Style::Python => write_floor_div_infix(f, a, b, style),
            Style::Canonical => write_call(f, "CleanDiv", &[a, b], style),
        },
        E::Mod(a, b) => {
            write_operand(f, a, style, BELOW_ATOM, Ctx::Arith, false)?;
            f.write_str(" % ")?;
            write_operand(f, b, style, BELOW_ATOM, Ctx::Arith, false)
        }
        E::PythonMod(a, b) => match style {
            Style::Cpp => write_call(f, "c10::div_mod", &[a, b], style),
            Style::Canonical => write_call(f, "PythonMod", &[a, b], style),
            Style::Python => {
                write_operand(f, a, style, BELOW_ATOM, Ctx::Arith, false)?;
                f.write_str(" % ")?;
                write_operand(f, b, style, BELOW_ATOM, Ctx::Arith, false)
            }
        },
        E::ModularIndexing(x, d, m) => write_modular_indexing(f, x, d, m, style),
        E::Min(args) => write_min_max(f, "min", args, style),
        E::Max(args) => write_min_max(f, "max", args, style),
        E::Cmp(op, a, b) => {
            let level = precedence(e, style);
            write_operand(f, a, style, level, Ctx::Arith, false)?;
            write!(f, " {} ", op.token())?;
            write_operand(f, b, style, level, Ctx::Arith, false)
        }
        E::And(items) if items.len() < 2 => write_degenerate(f, items, &E::Bool(true), style),
        E::And(items) => {
            let sep = if style == Style::Cpp { " && " } else { " and " };
            write_joined(f, items, sep, style, AND, Ctx::Logic, false)
        }
        E::Or(items) if items.len() < 2 => write_degenerate(f, items, &E::Bool(false), style),
        E::Or(items) => {
            let sep = if style == Style::Cpp { " || " } else { " or " };
            write_joined(f, items, sep, style, OR, Ctx::Logic, false)
        }
        E::Not(inner) => {
            f.write_str(if style == Style::Cpp { "!(" } else { "not (" })?;
            write_expr(f, inner, style)?;
            f.write_char(')')
        }
    }
}

/// Python `a // b`, both operands parenthesised unless atomic.
fn write_floor_div_infix(f: &mut dyn fmt::Write, a: &SymExpr, b: &SymExpr, style: Style) -> fmt::Result {
    write_operand(f, a, style, BELOW_ATOM, Ctx::Arith, false)?;
    f.write_str(" // ")?;
    write_operand(f, b, style, BELOW_ATOM, Ctx::Arith, false)
}

fn write_pow(f: &mut dyn fmt::Write, base: &SymExpr, n: u32, style: Style) -> fmt::Result {
    match style {
        Style::Canonical => {
            write_operand(f, base, style, POW, Ctx::Arith, false)?;
            write!(f, "**{n}")
        }
        Style::Python | Style::Cpp if n == 0 => write_int(f, 1, style),
        Style::Python | Style::Cpp => {
            // Inductor's `_print_Pow`: `stringify([base] * n, "*", PRECEDENCE["Mul"])`;
            // the C++ printer wraps an integer result in `static_cast<int64_t>`.
            if style == Style::Cpp {
                f.write_str("static_cast<int64_t>(")?;
            }
            for i in 0..n {
                if i > 0 {
                    f.write_char('*')?;
                }
                write_operand(f, base, style, MUL, Ctx::Arith, false)?;
            }
            if style == Style::Cpp {
                f.write_char(')')?;
            }
            Ok(())
        }
    }
}

fn write_modular_indexing(f: &mut dyn fmt::Write, x: &SymExpr, d: &SymExpr, m: &SymExpr, style: Style) -> fmt::Result {
    match style {
        Style::Canonical => write_call(f, "ModularIndexing", &[x, d, m], style),
        Style::Python => {
            // `_print_ModularIndexing`: operands parenthesised unless atomic;
            // the division is dropped when the divisor prints as `1`.
            f.write_char('(')?;
            if matches!(d, SymExpr::Int(1)) {
                write_operand(f, x, style, BELOW_ATOM, Ctx::Arith, false)?;
            } else {
                f.write_char('(')?;
                write_operand(f, x, style, BELOW_ATOM, Ctx::Arith, false)?;
                f.write_str(" // ")?;
                write_operand(f, d, style, BELOW_ATOM, Ctx::Arith, false)?;
                f.write_char(')')?;
            }
            f.write_str(" % ")?;
            write_operand(f, m, style, BELOW_ATOM, Ctx::Arith, false)?;
            f.write_char(')')
        }
        Style::Cpp => {
            f.write_str("(static_cast<int64_t>(")?;
            if matches!(d, SymExpr::Int(1)) {
                write_expr(f, x, style)?;
            } else {
                write_cpp_floor_div(f, x, d)?;
            }
            f.write_str(") % ")?;
            write_cast(f, m)?;
            f.write_char(')')
        }
    }
}

fn write_min_max(f: &mut dyn fmt::Write, name: &str, args: &[SymExpr], style: Style) -> fmt::Result {
    if style != Style::Cpp {
        let refs: Vec<&SymExpr> = args.iter().collect();
        return write_call(f, name, &refs, style);
    }
    if let [a, b] = args {
        write!(f, "std::{name}(")?;
        write_cast(f, a)?;
        f.write_str(", ")?;
        write_cast(f, b)?;
        f.write_char(')')
    } else {
        // Initializer-list overload for any other arity.
        write!(f, "std::{name}<int64_t>({{")?;
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write_expr(f, a, style)?;
        }
        f.write_str("})")
    }
}
