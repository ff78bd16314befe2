//! The e-graph language for [`SymExpr`] and the conversions both ways.
//!
//! N-ary `Add`, `Mul`, `Min`, `Max`, `And` and `Or` become left-nested binary
//! nodes; `Pow`'s natural exponent becomes a literal child.

use super::super::{CmpOp, SymExpr};
use egg::{define_language, Id, RecExpr};

define_language! {
    /// One e-node of a symbolic size expression.
    ///
    /// Semantics follow [`SymExpr`]: `//` and `PythonMod` round toward negative
    /// infinity, `Mod` truncates (C), `ModularIndexing(x, d, m)` is `(x // d) % m`
    /// with Python's `%`. Operators print as `+`, `*`, `//`, `CleanDiv`, `Mod`,
    /// `PythonMod`, `ModularIndexing`, `Min`, `Max`, `Pow` (exponent child always
    /// a non-negative literal), `==`, `!=`, `<`, `<=`, `>`, `>=`, `And`, `Or`,
    /// `Not`; leaves are integer literals, `true`/`false` and symbols.
    #[allow(missing_docs)]
    pub enum SymLang {
        "+" = Add([Id; 2]),
        "*" = Mul([Id; 2]),
        "//" = FloorDiv([Id; 2]),
        "CleanDiv" = CleanDiv([Id; 2]),
        "Mod" = Mod([Id; 2]),
        "PythonMod" = PythonMod([Id; 2]),
        "ModularIndexing" = ModularIndexing([Id; 3]),
        "Min" = Min([Id; 2]),
        "Max" = Max([Id; 2]),
        "Pow" = Pow([Id; 2]),
        "==" = Eq([Id; 2]),
        "!=" = Ne([Id; 2]),
        "<" = Lt([Id; 2]),
        "<=" = Le([Id; 2]),
        ">" = Gt([Id; 2]),
        ">=" = Ge([Id; 2]),
        "And" = And([Id; 2]),
        "Or" = Or([Id; 2]),
        "Not" = Not(Id),
        Num(i64),
        Bool(bool),
        Var(egg::Symbol),
    }
}

/// Why a [`SymExpr`] or [`RecExpr`] could not be converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// `Min`/`Max` without arguments has no value.
    #[error("`{op}` with no arguments has no value")]
    EmptyVariadic {
        /// `Min` or `Max`.
        op: &'static str,
    },
    /// An empty term.
    #[error("empty term")]
    Empty,
    /// A `Pow` node whose exponent child is not a literal in `0..=u32::MAX`.
    #[error("`Pow` exponent is not a natural literal")]
    BadExponent,
}

/// Converts a [`SymExpr`] into an e-graph term.
pub fn to_rec_expr(e: &SymExpr) -> Result<RecExpr<SymLang>, ConvertError> {
    // Built as a plain list: `RecExpr::add` checks its children against the
    // root in time linear in the term, which made large terms quadratic.
    let mut out = Nodes::default();
    add_expr(&mut out, e)?;
    Ok(RecExpr::from(out.0))
}

/// Nodes in order, each child before its parent.
#[derive(Default)]
struct Nodes(Vec<SymLang>);

impl Nodes {
    fn add(&mut self, node: SymLang) -> Id {
        self.0.push(node);
        Id::from(self.0.len() - 1)
    }
}

fn fold_binary(
    out: &mut Nodes,
    items: &[SymExpr],
    empty: Option<SymLang>,
    op_name: &'static str,
    make: fn([Id; 2]) -> SymLang,
) -> Result<Id, ConvertError> {
    let mut iter = items.iter();
    let mut acc = match iter.next() {
        Some(first) => add_expr(out, first)?,
        None => match empty {
            Some(unit) => return Ok(out.add(unit)),
            None => return Err(ConvertError::EmptyVariadic { op: op_name }),
        },
    };
    for item in iter {
        let rhs = add_expr(out, item)?;
        acc = out.add(make([acc, rhs]));
    }
    Ok(acc)
}

/// The node `make` of `a`'s and then `b`'s nodes.
fn binary(out: &mut Nodes, a: &SymExpr, b: &SymExpr, make: fn([Id; 2]) -> SymLang) -> Result<Id, ConvertError> {
    let a = add_expr(out, a)?;
    let b = add_expr(out, b)?;
    Ok(out.add(make([a, b])))
}

fn add_expr(out: &mut Nodes, e: &SymExpr) -> Result<Id, ConvertError> {
    Ok(match e {
        SymExpr::Int(v) => out.add(SymLang::Num(*v)),
        SymExpr::Bool(v) => out.add(SymLang::Bool(*v)),
        SymExpr::Sym(s) => out.add(SymLang::Var(egg::Symbol::from(s.as_str()))),
        SymExpr::Add(v) => fold_binary(out, v, Some(SymLang::Num(0)), "Add", SymLang::Add)?,
        SymExpr::Mul(v) => fold_binary(out, v, Some(SymLang::Num(1)), "Mul", SymLang::Mul)?,
        SymExpr::Min(v) => fold_binary(out, v, None, "Min", SymLang::Min)?,
        SymExpr::Max(v) => fold_binary(out, v, None, "Max", SymLang::Max)?,
        SymExpr::And(v) => fold_binary(out, v, Some(SymLang::Bool(true)), "And", SymLang::And)?,
        SymExpr::Or(v) => fold_binary(out, v, Some(SymLang::Bool(false)), "Or", SymLang::Or)?,
        SymExpr::FloorDiv(a, b) => binary(out, a, b, SymLang::FloorDiv)?,
        SymExpr::CleanDiv(a, b) => binary(out, a, b, SymLang::CleanDiv)?,
        SymExpr::Mod(a, b) => binary(out, a, b, SymLang::Mod)?,
        SymExpr::PythonMod(a, b) => binary(out, a, b, SymLang::PythonMod)?,
        SymExpr::ModularIndexing(x, d, m) => {
            let x = add_expr(out, x)?;
            let d = add_expr(out, d)?;
            let m = add_expr(out, m)?;
            out.add(SymLang::ModularIndexing([x, d, m]))
        }
        SymExpr::Pow(base, n) => {
            let base = add_expr(out, base)?;
            let n = out.add(SymLang::Num(i64::from(*n)));
            out.add(SymLang::Pow([base, n]))
        }
        SymExpr::Cmp(op, a, b) => {
            let make: fn([Id; 2]) -> SymLang = match op {
                CmpOp::Eq => SymLang::Eq,
                CmpOp::Ne => SymLang::Ne,
                CmpOp::Lt => SymLang::Lt,
                CmpOp::Le => SymLang::Le,
                CmpOp::Gt => SymLang::Gt,
                CmpOp::Ge => SymLang::Ge,
            };
            binary(out, a, b, make)?
        }
        SymExpr::Not(a) => {
            let a = add_expr(out, a)?;
            out.add(SymLang::Not(a))
        }
    })
}

/// Converts an e-graph term back into a [`SymExpr`] (binary nodes stay binary;
/// no folding, so the result evaluates exactly like the term).
pub fn from_rec_expr(e: &RecExpr<SymLang>) -> Result<SymExpr, ConvertError> {
    let nodes = e.as_ref();
    let mut built: Vec<SymExpr> = Vec::with_capacity(nodes.len());
    // RecExpr children always point at earlier entries, so `built[id]` exists.
    for node in nodes {
        let get = |id: &Id| built[usize::from(*id)].clone();
        let bx = |id: &Id| Box::new(built[usize::from(*id)].clone());
        let expr = match node {
            SymLang::Num(v) => SymExpr::Int(*v),
            SymLang::Bool(v) => SymExpr::Bool(*v),
            SymLang::Var(s) => SymExpr::sym(s.as_str()),
            SymLang::Add([a, b]) => SymExpr::Add(vec![get(a), get(b)]),
            SymLang::Mul([a, b]) => SymExpr::Mul(vec![get(a), get(b)]),
            SymLang::Min([a, b]) => SymExpr::Min(vec![get(a), get(b)]),
            SymLang::Max([a, b]) => SymExpr::Max(vec![get(a), get(b)]),
            SymLang::And([a, b]) => SymExpr::And(vec![get(a), get(b)]),
            SymLang::Or([a, b]) => SymExpr::Or(vec![get(a), get(b)]),
            SymLang::FloorDiv([a, b]) => SymExpr::FloorDiv(bx(a), bx(b)),
            SymLang::CleanDiv([a, b]) => SymExpr::CleanDiv(bx(a), bx(b)),
            SymLang::Mod([a, b]) => SymExpr::Mod(bx(a), bx(b)),
            SymLang::PythonMod([a, b]) => SymExpr::PythonMod(bx(a), bx(b)),
            SymLang::ModularIndexing([x, d, m]) => SymExpr::ModularIndexing(bx(x), bx(d), bx(m)),
            SymLang::Pow([a, n]) => match built[usize::from(*n)] {
                SymExpr::Int(v) => SymExpr::Pow(bx(a), u32::try_from(v).map_err(|_| ConvertError::BadExponent)?),
                _ => return Err(ConvertError::BadExponent),
            },
            SymLang::Eq([a, b]) => SymExpr::Cmp(CmpOp::Eq, bx(a), bx(b)),
            SymLang::Ne([a, b]) => SymExpr::Cmp(CmpOp::Ne, bx(a), bx(b)),
            SymLang::Lt([a, b]) => SymExpr::Cmp(CmpOp::Lt, bx(a), bx(b)),
            SymLang::Le([a, b]) => SymExpr::Cmp(CmpOp::Le, bx(a), bx(b)),
            SymLang::Gt([a, b]) => SymExpr::Cmp(CmpOp::Gt, bx(a), bx(b)),
            SymLang::Ge([a, b]) => SymExpr::Cmp(CmpOp::Ge, bx(a), bx(b)),
            SymLang::Not(a) => SymExpr::Not(bx(a)),
        };
        built.push(expr);
    }
    built.pop().ok_or(ConvertError::Empty)
}
