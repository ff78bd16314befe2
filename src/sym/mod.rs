//! Symbolic sizes: the expressions Inductor writes for shapes, strides, offsets,
//! kernel size arguments, grids and runtime asserts.
//!
//! [`SymExpr`] is wrapir's own small tree, independent of any e-graph library.
//! It mirrors the subset of sympy (plus Inductor's own functions) that appears in
//! wrapper code:
//!
//! * integers, booleans and [`Symbol`]s (`s0` backed, `u0` unbacked, `ps0`/`ks0`
//!   precomputed, `<kernel>_xnumel` per-kernel numels);
//! * n-ary `Add` and `Mul` (subtraction is `a + -1*b`, as in sympy);
//! * `FloorDiv` (floor semantics), `CleanDiv` (exact division), `Mod` (C semantics,
//!   Inductor's `Mod`), `PythonMod` (floor semantics), `ModularIndexing(x, d, m)`
//!   = `(x // d) % m`;
//! * n-ary `Min`/`Max`, natural powers;
//! * comparisons and boolean connectives for runtime asserts.
//!
//! Text forms: [`parse`] reads what Inductor's Python printer writes (and the
//! canonical form); [`print::python`] writes Inductor's Python form exactly
//! (section 4.1 of the spec); [`SymExpr`]'s `Display` writes the canonical form
//! ([`print::canonical`]), the Python form with lossless spellings that
//! round-trips through [`parse`]; [`print::cpp`] writes Inductor's C++ form
//! (section 4.2). [`eval`] evaluates with checked 64-bit arithmetic: overflow,
//! division by zero and inexact `CleanDiv` are errors.

pub mod egraph;
pub mod eval;
pub mod parse;
pub mod print;
pub mod solve;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

pub use egraph::{prove_eq, Facts, Outcome};
pub use eval::{Bindings, EvalError};
pub use parse::{parse, ParseError};

/// A named size variable.
///
/// Its `Display` is its token in every text form (`s0`, `u3`, `ks0`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Symbol(Arc<str>);

impl Symbol {
    /// Makes a symbol from its name. The name is not checked here; the parser
    /// and the validator check that it is an identifier.
    pub fn new(name: impl AsRef<str>) -> Self {
        Symbol(Arc::from(name.as_ref()))
    }

    /// The symbol's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What the name says about the symbol, following Inductor's prefixes.
    pub fn prefix_kind(&self) -> SymbolPrefix {
        let name = self.as_str();
        let digits_after = |p: &str| {
            name.strip_prefix(p)
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        };
        if digits_after("s") {
            SymbolPrefix::Backed
        } else if digits_after("u") {
            SymbolPrefix::Unbacked
        } else if digits_after("ps") {
            SymbolPrefix::Precomputed
        } else if digits_after("ks") {
            SymbolPrefix::KernelSize
        } else {
            SymbolPrefix::Other
        }
    }
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Symbol {
    fn from(s: &str) -> Self {
        Symbol::new(s)
    }
}

/// What a symbol's name prefix says about it (Inductor's naming, spec 4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolPrefix {
    /// `s<N>`: a size backed by a graph input.
    Backed,
    /// `u<N>`: a data-dependent size, bound at run time.
    Unbacked,
    /// `ps<N>`: a precomputed size expression.
    Precomputed,
    /// `ks<N>`: a kernel-side size argument.
    KernelSize,
    /// Anything else (`triton_poi_fused_add_0_xnumel`, ...).
    Other,
}

/// Comparison operators of runtime asserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The operator's token (the same in Python and C++).
    pub fn token(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The operator's name in Python's `operator` module (`eq`, `lt`, ...),
    /// which FX names its nodes after.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// Whether `a <op> b` holds for two integers.
    #[inline]
    pub fn holds(self, a: i64, b: i64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// A symbolic integer or boolean expression.
///
/// Structural equality (`==`) is syntactic; semantic equality is the prover's
/// business. Constructors such as [`SymExpr::add`] fold constants and flatten
/// nested sums and products the way sympy does, so printed forms stay close to
/// Inductor's.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum SymExpr {
    /// An integer literal.
    Int(i64),
    /// `True` / `False`.
    Bool(bool),
    /// A size variable.
    Sym(Symbol),
    /// Sum of two or more terms.
    Add(Vec<SymExpr>),
    /// Product of two or more factors.
    Mul(Vec<SymExpr>),
    /// `a // b`, rounding toward negative infinity.
    FloorDiv(Box<SymExpr>, Box<SymExpr>),
    /// `a / b` known to divide exactly (Inductor's `CleanDiv`; printed `a // b`).
    CleanDiv(Box<SymExpr>, Box<SymExpr>),
    /// `a % b` with C semantics (Inductor's `Mod`, used on non-negative values).
    Mod(Box<SymExpr>, Box<SymExpr>),
    /// `a % b` with Python (floor) semantics.
    PythonMod(Box<SymExpr>, Box<SymExpr>),
    /// `ModularIndexing(x, d, m)` = `(x // d) % m`.
    ModularIndexing(Box<SymExpr>, Box<SymExpr>, Box<SymExpr>),
    /// `min(a, b, ...)`.
    Min(Vec<SymExpr>),
    /// `max(a, b, ...)`.
    Max(Vec<SymExpr>),
    /// `base ** exp` with a natural exponent.
    Pow(Box<SymExpr>, u32),
    /// A comparison.
    Cmp(CmpOp, Box<SymExpr>, Box<SymExpr>),
    /// Conjunction of two or more conditions.
    And(Vec<SymExpr>),
    /// Disjunction of two or more conditions.
    Or(Vec<SymExpr>),
    /// Negation of a condition.
    Not(Box<SymExpr>),
}

impl SymExpr {
    /// An integer literal.
    pub fn int(v: i64) -> Self {
        SymExpr::Int(v)
    }

    /// A symbol reference.
    pub fn sym(name: impl AsRef<str>) -> Self {
        SymExpr::Sym(Symbol::new(name))
    }

    /// `true` when the expression is an integer literal.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            SymExpr::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// `true` when the expression is a boolean-valued node (comparison or connective).
    pub fn is_boolean(&self) -> bool {
        matches!(
            self,
            SymExpr::Bool(_) | SymExpr::Cmp(..) | SymExpr::And(_) | SymExpr::Or(_) | SymExpr::Not(_)
        )
    }

    /// Sum with constant folding and flattening (`a + 0` is `a`).
    #[allow(clippy::should_implement_trait)] // also `Add` below; this form reads better in constructors
    pub fn add(a: SymExpr, b: SymExpr) -> SymExpr {
        let mut terms = Vec::new();
        let mut constant: i64 = 0;
        for e in [a, b] {
            match e {
                SymExpr::Add(ts) => {
                    for t in ts {
                        if let SymExpr::Int(v) = t {
                            match constant.checked_add(v) {
                                Some(c) => constant = c,
                                None => terms.push(SymExpr::Int(v)),
                            }
                        } else {
                            terms.push(t);
                        }
                    }
                }
                SymExpr::Int(v) => match constant.checked_add(v) {
                    Some(c) => constant = c,
                    None => terms.push(SymExpr::Int(v)),
                },
                other => terms.push(other),
            }
        }
        if constant != 0 {
            terms.push(SymExpr::Int(constant));
        }
        match terms.len() {
            0 => SymExpr::Int(0),
            1 => terms.pop().unwrap_or(SymExpr::Int(0)),
            _ => SymExpr::Add(terms),
        }
    }

    /// Product with constant folding and flattening (`1*a` is `a`, `0*a` is `0`).
    #[allow(clippy::should_implement_trait)] // also `Mul` below; this form reads better in constructors
    pub fn mul(a: SymExpr, b: SymExpr) -> SymExpr {
        let mut factors = Vec::new();
        let mut constant: i64 = 1;
        for e in [a, b] {
            let items = match e {
                SymExpr::Mul(fs) => fs,
                other => vec![other],
            };
            for f in items {
                match f {
                    SymExpr::Int(v) => match constant.checked_mul(v) {
                        Some(c) => constant = c,
                        None => factors.push(SymExpr::Int(v)),
                    },
                    other => factors.push(other),
                }
            }
        }
        if constant == 0 {
            return SymExpr::Int(0);
        }
        if constant != 1 {
            factors.insert(0, SymExpr::Int(constant));
        }
        match factors.len() {
            0 => SymExpr::Int(1),
            1 => factors.pop().unwrap_or(SymExpr::Int(1)),
            _ => SymExpr::Mul(factors),
        }
    }

    /// `-a`, as `-1*a` (sympy's form); folds literals.
    #[allow(clippy::should_implement_trait)] // also `Neg` below; this form reads better in constructors
    pub fn neg(a: SymExpr) -> SymExpr {
        match a {
            SymExpr::Int(v) if v != i64::MIN => SymExpr::Int(-v),
            other => SymExpr::mul(SymExpr::Int(-1), other),
        }
    }

    /// `a - b`.
    #[allow(clippy::should_implement_trait)] // also `Sub` below; this form reads better in constructors
    pub fn sub(a: SymExpr, b: SymExpr) -> SymExpr {
        SymExpr::add(a, SymExpr::neg(b))
    }

    /// `a // b`.
    pub fn floor_div(a: SymExpr, b: SymExpr) -> SymExpr {
        SymExpr::FloorDiv(Box::new(a), Box::new(b))
    }

    /// A comparison.
    pub fn cmp(op: CmpOp, a: SymExpr, b: SymExpr) -> SymExpr {
        SymExpr::Cmp(op, Box::new(a), Box::new(b))
    }

    /// Every symbol the expression mentions, in first-seen order, without repeats.
    pub fn free_symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = Vec::new();
        // A set beside the list: linear in the expression's size (a list
        // search made a 12,000-term sum quadratic).
        let mut seen: rustc_hash::FxHashSet<Symbol> = rustc_hash::FxHashSet::default();
        self.visit(&mut |e| {
            if let SymExpr::Sym(s) = e {
                if seen.insert(s.clone()) {
                    out.push(s.clone());
                }
            }
        });
        out
    }

    /// Calls `f` on this node and every node below it, parents first.
    pub fn visit(&self, f: &mut dyn FnMut(&SymExpr)) {
        f(self);
        for c in self.children() {
            c.visit(f);
        }
    }

    /// The direct sub-expressions.
    pub fn children(&self) -> Vec<&SymExpr> {
        match self {
            SymExpr::Int(_) | SymExpr::Bool(_) | SymExpr::Sym(_) => vec![],
            SymExpr::Add(v)
            | SymExpr::Mul(v)
            | SymExpr::Min(v)
            | SymExpr::Max(v)
            | SymExpr::And(v)
            | SymExpr::Or(v) => v.iter().collect(),
            SymExpr::FloorDiv(a, b)
            | SymExpr::CleanDiv(a, b)
            | SymExpr::Mod(a, b)
            | SymExpr::PythonMod(a, b)
            | SymExpr::Cmp(_, a, b) => vec![a, b],
            SymExpr::ModularIndexing(a, b, c) => vec![a, b, c],
            SymExpr::Pow(a, _) | SymExpr::Not(a) => vec![a],
        }
    }

    /// Replaces every symbol for which `f` returns `Some`.
    pub fn substitute(&self, f: &dyn Fn(&Symbol) -> Option<SymExpr>) -> SymExpr {
        let rec = |e: &SymExpr| e.substitute(f);
        let bx = |e: &SymExpr| Box::new(e.substitute(f));
        match self {
            SymExpr::Sym(s) => f(s).unwrap_or_else(|| self.clone()),
            SymExpr::Int(_) | SymExpr::Bool(_) => self.clone(),
            SymExpr::Add(v) => SymExpr::Add(v.iter().map(rec).collect()),
            SymExpr::Mul(v) => SymExpr::Mul(v.iter().map(rec).collect()),
            SymExpr::Min(v) => SymExpr::Min(v.iter().map(rec).collect()),
            SymExpr::Max(v) => SymExpr::Max(v.iter().map(rec).collect()),
            SymExpr::And(v) => SymExpr::And(v.iter().map(rec).collect()),
            SymExpr::Or(v) => SymExpr::Or(v.iter().map(rec).collect()),
            SymExpr::FloorDiv(a, b) => SymExpr::FloorDiv(bx(a), bx(b)),
            SymExpr::CleanDiv(a, b) => SymExpr::CleanDiv(bx(a), bx(b)),
            SymExpr::Mod(a, b) => SymExpr::Mod(bx(a), bx(b)),
            SymExpr::PythonMod(a, b) => SymExpr::PythonMod(bx(a), bx(b)),
            SymExpr::Cmp(op, a, b) => SymExpr::Cmp(*op, bx(a), bx(b)),
            SymExpr::ModularIndexing(a, b, c) => SymExpr::ModularIndexing(bx(a), bx(b), bx(c)),
            SymExpr::Pow(a, n) => SymExpr::Pow(bx(a), *n),
            SymExpr::Not(a) => SymExpr::Not(bx(a)),
        }
    }
}

impl From<i64> for SymExpr {
    fn from(v: i64) -> Self {
        SymExpr::Int(v)
    }
}

impl From<Symbol> for SymExpr {
    fn from(s: Symbol) -> Self {
        SymExpr::Sym(s)
    }
}

/// The canonical form ([`print::write_canonical`]): Inductor's Python form
/// with lossless spellings for `CleanDiv`, `PythonMod`, `ModularIndexing` and
/// `Pow`, so that [`parse`] reads it back as the same tree. It is the form of
/// wrapir's text and JSON formats; use [`print::python`] for Inductor-exact text.
impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        print::write_canonical(f, self)
    }
}

impl fmt::Debug for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{self}`")
    }
}

/// In JSON a `SymExpr` is a string in the canonical form (Inductor's Python
/// syntax, see `Display`), so an exporter can write `pexpr`-style text; bare
/// integers are accepted too.
impl Serialize for SymExpr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SymExpr::Int(v) => s.serialize_i64(*v),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for SymExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Int(i64),
            Bool(bool),
            Text(String),
        }
        match Repr::deserialize(d)? {
            Repr::Int(v) => Ok(SymExpr::Int(v)),
            Repr::Bool(b) => Ok(SymExpr::Bool(b)),
            Repr::Text(t) => parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// `+`, `-` and `*` on expressions: the constructors of the same names.
macro_rules! binary_ops {
    ($($op:ident $method:ident),*) => {
        $(
            impl std::ops::$op for SymExpr {
                type Output = SymExpr;
                fn $method(self, rhs: SymExpr) -> SymExpr {
                    SymExpr::$method(self, rhs)
                }
            }
        )*
    };
}

binary_ops!(Add add, Sub sub, Mul mul);

impl std::ops::Neg for SymExpr {
    type Output = SymExpr;
    fn neg(self) -> SymExpr {
        SymExpr::neg(self)
    }
}
