//! Claims up to the names of their symbols: the proof cache's second key.
//!
//! Most launches of a large program make the same claims over their own
//! symbols (`(u7 + 1023) // 1024 == -(u7 // -1024)` with `u7` in
//! `[0, 16777216]`, then the same over `u8`), so a cache keyed by the
//! expressions themselves rarely hits. A [`Shape`] renames every symbol of
//! a claim and of its relevant facts (the symbols' ranges and definitions,
//! [`Facts::relevant_to`]) to a placeholder, in order of first appearance
//! (the sides, then the definitions reached): claims that differ only in
//! their symbols' names have one shape, and the prover runs once per shape.
//!
//! Sound because the renaming is a bijection that carries the facts along:
//! an assignment satisfies the original facts exactly when its renaming
//! satisfies the renamed ones, and gives the sides the same values. So the
//! renamed claim holds wherever its facts do exactly when the original
//! does; a counterexample of one, renamed back, is a counterexample of the
//! other. Claims under facts that are not all about the claim's own symbols
//! (equalities, conditions, an empty range elsewhere) get no shape.

use crate::sym::egraph::{Counterexample, Explanation};
use crate::sym::{Bindings, Facts, Outcome, SymExpr, Symbol};
use rustc_hash::FxHashMap;

/// A claim `a == b` with its symbols renamed to placeholders, and what the
/// facts say about each placeholder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ShapeKey {
    a: SymExpr,
    b: SymExpr,
    /// Per placeholder, in order: its range when the facts give one, and
    /// its definition (renamed).
    symbols: Vec<(Option<(Option<i64>, Option<i64>)>, Option<SymExpr>)>,
}

/// A claim's shape and the symbols its placeholders stand for.
#[derive(Debug)]
pub(super) struct Shape {
    /// The renamed claim and facts.
    pub(super) key: ShapeKey,
    /// Placeholder `i` stands for `originals[i]`.
    originals: Vec<Symbol>,
}

/// The name of placeholder `i` (delimited on both sides, so that one name
/// never occurs inside another in a prover's message).
fn placeholder(i: usize) -> Symbol {
    Symbol::new(format!("_{i}_"))
}

impl Shape {
    /// The shape of `a == b` under `facts`, or `None` when the relevant
    /// facts are not all ranges and definitions of the claim's symbols.
    pub(super) fn of(a: &SymExpr, b: &SymExpr, facts: &Facts) -> Option<Shape> {
        let relevant = facts.relevant_to(&[a, b]);
        if relevant.empty_range().is_some() || !relevant.equalities().is_empty() || !relevant.conditions().is_empty() {
            return None;
        }
        let mut originals: Vec<Symbol> = Vec::new();
        let mut index: FxHashMap<Symbol, usize> = FxHashMap::default();
        let mut add = |e: &SymExpr, originals: &mut Vec<Symbol>| {
            for s in e.free_symbols() {
                if !index.contains_key(&s) {
                    index.insert(s.clone(), originals.len());
                    originals.push(s);
                }
            }
        };
        add(a, &mut originals);
        add(b, &mut originals);
        let mut next = 0;
        while next < originals.len() {
            if let Some(def) = relevant.definitions().get(&originals[next]) {
                add(def, &mut originals);
            }
            next += 1;
        }
        let ranges: FxHashMap<&Symbol, (Option<i64>, Option<i64>)> = relevant.ranges().collect();
        // Every relevant fact is about the claim's symbols (what
        // `relevant_to` reaches from the sides); anything else: no shape.
        if ranges.keys().any(|s| !index.contains_key(*s))
            || relevant.definitions().keys().any(|s| !index.contains_key(s))
        {
            return None;
        }
        let rename = |e: &SymExpr| e.substitute(&|s: &Symbol| index.get(s).map(|&i| SymExpr::Sym(placeholder(i))));
        let symbols = originals
            .iter()
            .map(|s| (ranges.get(s).copied(), relevant.definitions().get(s).map(rename)))
            .collect();
        Some(Shape {
            key: ShapeKey {
                a: rename(a),
                b: rename(b),
                symbols,
            },
            originals,
        })
    }

    /// The renamed claim's sides.
    pub(super) fn sides(&self) -> (&SymExpr, &SymExpr) {
        (&self.key.a, &self.key.b)
    }

    /// The renamed claim's facts: each placeholder's range and definition.
    pub(super) fn facts(&self) -> Facts {
        let mut facts = Facts::new();
        for (i, (range, _)) in self.key.symbols.iter().enumerate() {
            if let Some((lo, hi)) = range {
                facts.restrict(placeholder(i), *lo, *hi);
            }
        }
        for (i, (_, def)) in self.key.symbols.iter().enumerate() {
            if let Some(d) = def {
                // The original definitions were accepted (no symbol defined
                // twice or by itself), so their renamings are too.
                facts.define(placeholder(i), d.clone());
            }
        }
        facts
    }

    /// The outcome of the renamed claim, for the original: counterexamples
    /// and reasons in the original names, and, with `explain`, the proof's
    /// steps too (else an empty proof: nobody reads it).
    pub(super) fn restore(&self, outcome: &Outcome, explain: bool) -> Outcome {
        let original = |s: &Symbol| -> Option<Symbol> {
            let name = s.as_str().strip_prefix('_')?.strip_suffix('_')?;
            self.originals.get(name.parse::<usize>().ok()?).cloned()
        };
        match outcome {
            Outcome::Proven(e) if explain => Outcome::Proven(e.rename_symbols(&original)),
            Outcome::Proven(_) => Outcome::Proven(Explanation::from_steps(Vec::new())),
            Outcome::Disproved(c) => {
                let mut assignment = Bindings::new();
                for (s, v) in &c.assignment {
                    assignment.insert(original(s).unwrap_or_else(|| s.clone()), *v);
                }
                Outcome::Disproved(Counterexample {
                    assignment,
                    lhs: c.lhs,
                    rhs: c.rhs,
                })
            }
            Outcome::Unknown(reason) => {
                // Longest placeholder first: `_1_` never occurs inside
                // `_12_`, but replace in a fixed order anyway.
                let mut text = reason.clone();
                for i in (0..self.originals.len()).rev() {
                    let p = format!("_{i}_");
                    if text.contains(&p) {
                        text = text.replace(&p, self.originals[i].as_str());
                    }
                }
                Outcome::Unknown(text)
            }
        }
    }
}
