//! What the prover may assume: symbol ranges, definitions and other conditions.

use super::super::{parse, CmpOp, ParseError, SymExpr, Symbol};
use indexmap::IndexMap;
use std::sync::OnceLock;

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
///
/// A program's facts grow with the program (a range per symbol, a
/// definition per precomputed size) while one proof needs only those about
/// its own symbols: [`Facts::relevant_to`] picks them out through an index
/// built on first use (and dropped by every change), so a proof costs what
/// its own facts cost, not what the whole program's do.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    ranges: IndexMap<Symbol, (Option<i64>, Option<i64>)>,
    definitions: IndexMap<Symbol, SymExpr>,
    equalities: Vec<(SymExpr, SymExpr)>,
    conditions: Vec<SymExpr>,
    /// Built by [`Facts::relevant_to`]; reset by every change.
    index: OnceLock<FactIndex>,
}

impl PartialEq for Facts {
    fn eq(&self, other: &Self) -> bool {
        // The index is derived from the rest.
        self.ranges == other.ranges
            && self.definitions == other.definitions
            && self.equalities == other.equalities
            && self.conditions == other.conditions
    }
}

/// Where [`Facts::relevant_to`] starts and what it follows.
#[derive(Clone, Debug, Default)]
struct FactIndex {
    /// The free symbols of each definition's expression, by definition index.
    definition_symbols: Vec<Vec<Symbol>>,
    /// The symbols every claim reaches: those of every equality and
    /// condition, and every defined symbol with a bound.
    always: Vec<Symbol>,
    /// The first symbol whose range is empty, if any.
    empty_range: Option<Symbol>,
}

impl FactIndex {
    fn new(facts: &Facts) -> FactIndex {
        let definition_symbols = facts.definitions.values().map(SymExpr::free_symbols).collect();
        let mut always: Vec<Symbol> = Vec::new();
        for (x, y) in &facts.equalities {
            always.extend(x.free_symbols());
            always.extend(y.free_symbols());
        }
        for c in &facts.conditions {
            always.extend(c.free_symbols());
        }
        // A declared symbol without bounds has the range (None, None): nothing to contradict.
        let bounded = |s: &&Symbol| facts.range(s) != (None, None);
        always.extend(facts.definitions.keys().filter(bounded).cloned());
        FactIndex {
            definition_symbols,
            always,
            empty_range: facts.scan_empty_range().cloned(),
        }
    }
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
        self.index.take();
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
        self.index.take();
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
        self.index.take();
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
        self.index.take();
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
        match self.index.get() {
            Some(index) => index.empty_range.as_ref(),
            None => self.scan_empty_range(),
        }
    }

    fn scan_empty_range(&self) -> Option<&Symbol> {
        self.ranges
            .iter()
            .find(|(_, (lo, hi))| matches!((lo, hi), (Some(l), Some(h)) if l > h))
            .map(|(s, _)| s)
    }

    /// The facts a claim about `exprs` may depend on: every equality and
    /// condition; the definitions of the symbols reached from the
    /// expressions' and those facts' symbols (through definitions, in
    /// turn) and of every symbol with a bound; the ranges of the symbols
    /// reached and any empty range. Order is kept.
    ///
    /// What is left out cannot change whether the claim holds: a definition
    /// of a symbol nothing reaches, with no bound to contradict, defines a
    /// fresh name (`ks7 == s0*s1` says nothing about `s0` or `s1`), and the
    /// range of a symbol nothing reaches constrains nothing else. A
    /// program's facts are ranges and definitions, which grow with the
    /// program; a claim's own are few. Costs what the facts kept cost (the
    /// index is built once, on first use, linear in the facts).
    pub fn relevant_to(&self, exprs: &[&SymExpr]) -> Facts {
        let index = self.index.get_or_init(|| FactIndex::new(self));
        let mut reached: Vec<Symbol> = Vec::new();
        let mut seen: rustc_hash::FxHashSet<Symbol> = Default::default();
        let seeds = exprs
            .iter()
            .flat_map(|e| e.free_symbols())
            .chain(index.always.iter().cloned());
        for s in seeds {
            if seen.insert(s.clone()) {
                reached.push(s);
            }
        }
        let mut definitions: Vec<usize> = Vec::new();
        let mut next = 0;
        while next < reached.len() {
            let s = reached[next].clone();
            next += 1;
            let Some(i) = self.definitions.get_index_of(&s) else {
                continue;
            };
            definitions.push(i);
            for t in &index.definition_symbols[i] {
                if seen.insert(t.clone()) {
                    reached.push(t.clone());
                }
            }
        }
        let mut ranges: Vec<usize> = reached.iter().filter_map(|s| self.ranges.get_index_of(s)).collect();
        if let Some(i) = index.empty_range.as_ref().and_then(|s| self.ranges.get_index_of(s)) {
            ranges.push(i);
        }
        ranges.sort_unstable();
        ranges.dedup();
        definitions.sort_unstable();
        Facts {
            ranges: ranges
                .into_iter()
                .filter_map(|i| self.ranges.get_index(i).map(|(s, r)| (s.clone(), *r)))
                .collect(),
            definitions: definitions
                .into_iter()
                .filter_map(|i| self.definitions.get_index(i).map(|(s, e)| (s.clone(), e.clone())))
                .collect(),
            equalities: self.equalities.clone(),
            conditions: self.conditions.clone(),
            index: OnceLock::new(),
        }
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
