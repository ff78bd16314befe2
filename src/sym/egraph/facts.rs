//! What the prover may assume: symbol ranges, definitions and other conditions.

use super::super::{parse, CmpOp, ParseError, SymExpr, Symbol};
use indexmap::IndexMap;

/// Why an assumption could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FactError {
    /// A side of the assumption is not a valid expression.
    #[error("cannot parse assumption `{text}`: {source}")]
    Parse {
        /// The whole assumption.
        text: String,
        /// The parser's error.
        source: ParseError,
    },
    /// The assumption is an integer expression, not a condition.
    #[error("assumption `{text}` is not a condition (expected e.g. `s0 >= 1` or `ks0 == s0*s1`)")]
    NotACondition {
        /// The whole assumption.
        text: String,
    },
}

/// Facts the prover may assume about the symbols.
///
/// * ranges: inclusive bounds per symbol (sizes `s<N>` declared by a program are
///   non-negative);
/// * definitions: `ks0 == s0*s1`, used as e-graph equalities and to compute the
///   defined symbol when sampling;
/// * equalities between other expressions, used the same way;
/// * other conditions (`s0 >= s1`, `s0 != 3`): not used in proofs, but every
///   counterexample must satisfy them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    ranges: IndexMap<Symbol, (Option<i64>, Option<i64>)>,
    definitions: IndexMap<Symbol, SymExpr>,
    equalities: Vec<(SymExpr, SymExpr)>,
    conditions: Vec<SymExpr>,
}

impl Facts {
    /// No facts: every symbol is an arbitrary integer.
    pub fn new() -> Self {
        Facts::default()
    }

    /// Parses assumptions such as `s0 >= 1`, `u0 <= 100`, `ks0 == s0*s1`.
    pub fn parse<S: AsRef<str>>(assumptions: &[S]) -> Result<Self, FactError> {
        let mut facts = Facts::new();
        for a in assumptions {
            facts.assume(a.as_ref())?;
        }
        Ok(facts)
    }

    /// Adds one assumption written as text.
    pub fn assume(&mut self, text: &str) -> Result<(), FactError> {
        let cond = parse_condition(text)?;
        self.add_condition(cond);
        Ok(())
    }

    /// Adds a boolean fact. Bounds of a symbol against a literal become ranges,
    /// `sym == expr` (with `sym` not in `expr`) a definition, other equalities
    /// e-graph equalities; conjunctions are split; anything else only constrains
    /// counterexamples.
    pub fn add_condition(&mut self, cond: SymExpr) {
        match cond {
            SymExpr::Bool(true) => {}
            SymExpr::And(parts) => {
                for p in parts {
                    self.add_condition(p);
                }
            }
            SymExpr::Cmp(op, a, b) => match (*a, *b) {
                (SymExpr::Sym(s), SymExpr::Int(c)) => self.bound(s, op, c),
                (SymExpr::Int(c), SymExpr::Sym(s)) => self.bound(s, flip(op), c),
                (a, b) if op == CmpOp::Eq => match (a, b) {
                    (SymExpr::Sym(s), e) | (e, SymExpr::Sym(s))
                        if !self.definitions.contains_key(&s) && !e.free_symbols().contains(&s) =>
                    {
                        self.definitions.insert(s, e);
                    }
                    (a, b) => self.equalities.push((a, b)),
                },
                (a, b) => self.conditions.push(SymExpr::Cmp(op, Box::new(a), Box::new(b))),
            },
            other => self.conditions.push(other),
        }
    }

    fn bound(&mut self, s: Symbol, op: CmpOp, c: i64) {
        match op {
            CmpOp::Ge => self.restrict(s, Some(c), None),
            CmpOp::Le => self.restrict(s, None, Some(c)),
            CmpOp::Gt => match c.checked_add(1) {
                Some(v) => self.restrict(s, Some(v), None),
                None => self.restrict(s, Some(1), Some(0)),
            },
            CmpOp::Lt => match c.checked_sub(1) {
                Some(v) => self.restrict(s, None, Some(v)),
                None => self.restrict(s, Some(1), Some(0)),
            },
            CmpOp::Eq => {
                self.restrict(s.clone(), Some(c), Some(c));
                if !self.definitions.contains_key(&s) {
                    self.definitions.insert(s, SymExpr::Int(c));
                } else {
                    self.equalities.push((SymExpr::Sym(s), SymExpr::Int(c)));
                }
            }
            CmpOp::Ne => self
                .conditions
                .push(SymExpr::cmp(CmpOp::Ne, SymExpr::Sym(s), SymExpr::Int(c))),
        }
    }

    /// Intersects a symbol's range with `[lo, hi]` (`None` = unbounded).
    pub fn restrict(&mut self, sym: Symbol, lo: Option<i64>, hi: Option<i64>) {
        let entry = self.ranges.entry(sym).or_insert((None, None));
        if let Some(l) = lo {
            entry.0 = Some(entry.0.map_or(l, |old| old.max(l)));
        }
        if let Some(h) = hi {
            entry.1 = Some(entry.1.map_or(h, |old| old.min(h)));
        }
    }

    /// Records `sym == expr`. Returns `false` (and records nothing) when `sym`
    /// already has a definition or occurs in `expr`.
    pub fn define(&mut self, sym: Symbol, expr: SymExpr) -> bool {
        if self.definitions.contains_key(&sym) || expr.free_symbols().contains(&sym) {
            return false;
        }
        self.definitions.insert(sym, expr);
        true
    }

    /// A symbol's known bounds.
    pub fn range(&self, sym: &Symbol) -> (Option<i64>, Option<i64>) {
        self.ranges.get(sym).copied().unwrap_or((None, None))
    }

    /// Every symbol with a known range.
    pub fn ranges(&self) -> impl Iterator<Item = (&Symbol, (Option<i64>, Option<i64>))> {
        self.ranges.iter().map(|(s, r)| (s, *r))
    }

    /// The definitions, in the order they were given.
    pub fn definitions(&self) -> &IndexMap<Symbol, SymExpr> {
        &self.definitions
    }

    /// Equalities between expressions other than definitions.
    pub fn equalities(&self) -> &[(SymExpr, SymExpr)] {
        &self.equalities
    }

    /// Conditions that only constrain counterexamples.
    pub fn conditions(&self) -> &[SymExpr] {
        &self.conditions
    }

    /// A symbol whose range is empty, if any (the facts are contradictory).
    pub fn empty_range(&self) -> Option<&Symbol> {
        self.ranges
            .iter()
            .find(|(_, (lo, hi))| matches!((lo, hi), (Some(l), Some(h)) if l > h))
            .map(|(s, _)| s)
    }
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
}

/// Parses a condition. Uses the expression parser; when that does not return a
/// condition, splits at the first top-level comparison operator and parses the
/// two sides.
fn parse_condition(text: &str) -> Result<SymExpr, FactError> {
    if let Ok(e) = parse(text) {
        if e.is_boolean() {
            return Ok(e);
        }
        return Err(FactError::NotACondition { text: text.to_string() });
    }
    let Some((pos, op, len)) = find_comparison(text) else {
        return parse(text)
            .map_err(|source| FactError::Parse {
                text: text.to_string(),
                source,
            })
            .and_then(|_| Err(FactError::NotACondition { text: text.to_string() }));
    };
    let side = |s: &str| {
        parse(s).map_err(|source| FactError::Parse {
            text: text.to_string(),
            source,
        })
    };
    let lhs = side(&text[..pos])?;
    let rhs = side(&text[pos + len..])?;
    Ok(SymExpr::cmp(op, lhs, rhs))
}

fn find_comparison(text: &str) -> Option<(usize, CmpOp, usize)> {
    let bytes = text.as_bytes();
    let mut depth = 0i32;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            _ if depth == 0 => {
                let two = text.get(i..i + 2);
                let found = match two {
                    Some(">=") => Some((CmpOp::Ge, 2)),
                    Some("<=") => Some((CmpOp::Le, 2)),
                    Some("==") => Some((CmpOp::Eq, 2)),
                    Some("!=") => Some((CmpOp::Ne, 2)),
                    _ => match bytes[i] {
                        b'>' => Some((CmpOp::Gt, 1)),
                        b'<' => Some((CmpOp::Lt, 1)),
                        _ => None,
                    },
                };
                if let Some((op, len)) = found {
                    return Some((i, op, len));
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}
