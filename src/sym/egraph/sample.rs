//! Counterexample search: concrete assignments within the facts' ranges.

use super::super::eval::{eval_bool, eval_int, Bindings};
use super::super::{SymExpr, Symbol};
use super::facts::Facts;
use std::fmt;

/// A concrete value of one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
        }
    }
}

/// An assignment that satisfies every fact about the symbols involved and under
/// which the two sides evaluate to different values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The symbol values (defined symbols computed from their definitions).
    pub assignment: Bindings,
    /// The left side's value.
    pub lhs: Value,
    /// The right side's value.
    pub rhs: Value,
}

impl fmt::Display for Counterexample {
    /// `s0=3, u0=0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.assignment.is_empty() {
            return write!(f, "no symbols, {} != {}", self.lhs, self.rhs);
        }
        for (i, (s, v)) in self.assignment.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}={v}")?;
        }
        Ok(())
    }
}

/// Evaluates an integer or boolean expression; `None` when it is undefined
/// (unbound symbol, overflow, division by zero) or ill-typed.
pub fn eval_value(e: &SymExpr, b: &Bindings) -> Option<Value> {
    if e.is_boolean() {
        holds(e, b).map(Value::Bool)
    } else {
        eval_int(e, b).ok().map(Value::Int)
    }
}

/// Evaluates a condition with [`eval_bool`]; `None` where it is undefined.
pub fn holds(e: &SymExpr, b: &Bindings) -> Option<bool> {
    eval_bool(e, b).ok()
}

/// A deterministic generator (splitmix64).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi]` (`lo <= hi`).
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (i128::from(hi) - i128::from(lo) + 1) as u128;
        let r = u128::from(self.next_u64()) % span;
        (i128::from(lo) + r as i128) as i64
    }
}

const WINDOW: i64 = 1 << 20;
const SPECIAL: [i64; 40] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 1000, 1023, 1024,
    1025, 4096, 65535, 65536, -1, -2, -3, -4, -7, -8, -128, -1000,
];

/// How to pick values for one sampled symbol.
struct Domain {
    lo: i64,
    hi: i64,
    special: Vec<i64>,
}

impl Domain {
    fn new(range: (Option<i64>, Option<i64>)) -> Option<Self> {
        let (lo, hi) = match range {
            (Some(l), Some(h)) => (l, h),
            (Some(l), None) => (l, l.max(0).saturating_add(WINDOW)),
            (None, Some(h)) => (h.min(0).saturating_sub(WINDOW), h),
            (None, None) => (-WINDOW, WINDOW),
        };
        if lo > hi {
            return None;
        }
        let mut special: Vec<i64> = Vec::new();
        // Small values first (readable counterexamples), range ends last.
        let ends = [hi.saturating_sub(2), hi.saturating_sub(1), hi];
        for v in [lo, lo.saturating_add(1), lo.saturating_add(2)]
            .into_iter()
            .chain(SPECIAL)
            .chain(ends)
        {
            if v >= lo && v <= hi && !special.contains(&v) {
                special.push(v);
            }
        }
        Some(Domain { lo, hi, special })
    }

    fn pick(&self, rng: &mut Rng) -> i64 {
        match rng.next_u64() % 10 {
            0..=4 => self.special[rng.range(0, self.special.len() as i64 - 1) as usize],
            5..=7 => rng.range(self.lo, self.hi.min(self.lo.saturating_add(64))),
            _ => rng.range(self.lo, self.hi),
        }
    }
}

/// The symbols a search must assign: those of the two sides plus, transitively,
/// those of every fact mentioning one of them.
fn involved_symbols(a: &SymExpr, b: &SymExpr, facts: &Facts) -> Vec<Symbol> {
    use std::collections::{HashMap, HashSet};
    // Symbols connected to the sides through facts, by a worklist over the
    // facts' symbol groups: linear in the facts' size (a chain of thousands
    // of assumptions costs no quadratic passes).
    let mut fact_syms: Vec<Vec<Symbol>> = Vec::new();
    for (s, e) in facts.definitions() {
        let mut v = e.free_symbols();
        v.push(s.clone());
        fact_syms.push(v);
    }
    for (x, y) in facts.equalities() {
        let mut v = x.free_symbols();
        v.extend(y.free_symbols());
        fact_syms.push(v);
    }
    for c in facts.conditions() {
        fact_syms.push(c.free_symbols());
    }
    let mut groups_of: HashMap<&Symbol, Vec<usize>> = HashMap::new();
    for (g, group) in fact_syms.iter().enumerate() {
        for s in group {
            groups_of.entry(s).or_default().push(g);
        }
    }
    let mut syms: Vec<Symbol> = Vec::new();
    let mut seen: HashSet<Symbol> = HashSet::new();
    let mut used = vec![false; fact_syms.len()];
    let mut queue: Vec<Symbol> = Vec::new();
    for s in a.free_symbols().into_iter().chain(b.free_symbols()) {
        if seen.insert(s.clone()) {
            syms.push(s.clone());
            queue.push(s);
        }
    }
    let mut next = 0;
    while next < queue.len() {
        let s = queue[next].clone();
        next += 1;
        for &g in groups_of.get(&s).map(Vec::as_slice).unwrap_or(&[]) {
            if std::mem::replace(&mut used[g], true) {
                continue;
            }
            for t in &fact_syms[g] {
                if seen.insert(t.clone()) {
                    syms.push(t.clone());
                    queue.push(t.clone());
                }
            }
        }
    }
    syms
}

/// The defined symbols in an order where each definition's symbols come
/// first (symbols on a cycle of definitions are left out: they stay unbound).
fn definition_order<'f>(defined: &[&'f Symbol], facts: &'f Facts) -> Vec<&'f Symbol> {
    use std::collections::HashMap;
    let index: HashMap<&Symbol, usize> = defined.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    // 0 unvisited, 1 on the stack, 2 done (ordered), 3 on or behind a cycle.
    let mut state = vec![0u8; defined.len()];
    let mut order = Vec::new();
    for start in 0..defined.len() {
        if state[start] != 0 {
            continue;
        }
        let deps = |i: usize| -> Vec<usize> {
            facts
                .definitions()
                .get(defined[i])
                .map(|e| e.free_symbols().iter().filter_map(|x| index.get(x).copied()).collect())
                .unwrap_or_default()
        };
        let mut stack: Vec<(usize, Vec<usize>)> = vec![(start, deps(start))];
        state[start] = 1;
        while let Some((node, pending)) = stack.last_mut() {
            let node = *node;
            match pending.pop() {
                Some(d) if state[d] == 0 => {
                    state[d] = 1;
                    let dd = deps(d);
                    stack.push((d, dd));
                }
                Some(d) if state[d] == 1 || state[d] == 3 => state[node] = 3,
                Some(_) => {}
                None => {
                    stack.pop();
                    if state[node] == 3 {
                        if let Some((parent, _)) = stack.last() {
                            state[*parent] = 3;
                        }
                    } else {
                        state[node] = 2;
                        order.push(defined[node]);
                    }
                }
            }
        }
    }
    order
}

/// The facts of one search with each fact's symbols listed once (a search
/// tries many assignments; listing them per assignment cost more than
/// evaluating).
struct PreparedFacts<'f> {
    facts: &'f Facts,
    definitions: Vec<(&'f Symbol, &'f SymExpr, Vec<Symbol>)>,
    equalities: Vec<(&'f SymExpr, &'f SymExpr, Vec<Symbol>)>,
    conditions: Vec<(&'f SymExpr, Vec<Symbol>)>,
}

impl<'f> PreparedFacts<'f> {
    fn new(facts: &'f Facts) -> Self {
        PreparedFacts {
            facts,
            definitions: facts
                .definitions()
                .iter()
                .map(|(s, e)| (s, e, e.free_symbols()))
                .collect(),
            equalities: facts
                .equalities()
                .iter()
                .map(|(x, y)| {
                    let mut syms = x.free_symbols();
                    syms.extend(y.free_symbols());
                    (x, y, syms)
                })
                .collect(),
            conditions: facts.conditions().iter().map(|c| (c, c.free_symbols())).collect(),
        }
    }

    /// `true` when every fact about the bound symbols holds under `b`.
    fn satisfied_by(&self, b: &Bindings) -> bool {
        for (s, v) in b {
            let (lo, hi) = self.facts.range(s);
            if lo.is_some_and(|l| *v < l) || hi.is_some_and(|h| *v > h) {
                return false;
            }
        }
        let bound = |syms: &[Symbol]| syms.iter().all(|s| b.contains_key(s));
        for (s, e, syms) in &self.definitions {
            if let Some(v) = b.get(*s) {
                if bound(syms) && eval_int(e, b).ok() != Some(*v) {
                    return false;
                }
            }
        }
        for (x, y, syms) in &self.equalities {
            if bound(syms) && (eval_value(x, b).is_none() || eval_value(x, b) != eval_value(y, b)) {
                return false;
            }
        }
        for (c, syms) in &self.conditions {
            if bound(syms) && holds(c, b) != Some(true) {
                return false;
            }
        }
        true
    }
}

/// Most symbol values one search assigns in all: an expression over very many
/// symbols gets fewer assignments (at least [`MIN_SAMPLES`]), so that one
/// search costs about the same at any size (a 12,000-term sum took 1.6 s of
/// the prover's 2 s in an optimised build).
const SAMPLE_WORK: usize = 1 << 20;
/// Fewest assignments a search tries within [`SAMPLE_WORK`].
const MIN_SAMPLES: usize = 8;

/// Tries `count` assignments (deterministic; fewer for expressions with more
/// than [`SAMPLE_WORK`]` / count` symbols); returns the first under which
/// both sides evaluate and differ.
/// Stops trying at `deadline`.
pub(crate) fn search_until(
    a: &SymExpr,
    b: &SymExpr,
    facts: &Facts,
    count: usize,
    seed: u64,
    deadline: Option<std::time::Instant>,
) -> Option<Counterexample> {
    if count == 0 || facts.empty_range().is_some() {
        return None;
    }
    let involved = involved_symbols(a, b, facts);
    let count = count.min((SAMPLE_WORK / involved.len().max(1)).max(MIN_SAMPLES));
    let defined: Vec<&Symbol> = involved
        .iter()
        .filter(|s| facts.definitions().contains_key(*s))
        .collect();
    let defined = definition_order(&defined, facts);
    let mut free: Vec<(Symbol, Domain)> = Vec::new();
    for s in involved.iter().filter(|s| !facts.definitions().contains_key(*s)) {
        free.push((s.clone(), Domain::new(facts.range(s))?));
    }
    let structured = free.iter().map(|(_, d)| d.special.len()).max().unwrap_or(1);
    let prepared = PreparedFacts::new(facts);
    // Each defined symbol's definition and the symbols it needs.
    let defined: Vec<(&Symbol, &SymExpr, Vec<Symbol>)> = defined
        .into_iter()
        .filter_map(|s| facts.definitions().get(s).map(|e| (s, e, e.free_symbols())))
        .collect();
    let mut rng = Rng::new(seed);
    for i in 0..count {
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return None;
        }
        let mut bindings = Bindings::new();
        for (j, (s, dom)) in free.iter().enumerate() {
            let v = if i < structured {
                // Structured phase: the same interesting value everywhere (or a
                // boundary of the symbol's range), shifted per symbol on odd rounds.
                let k = if i % 2 == 0 { i } else { i + j };
                dom.special[k % dom.special.len()]
            } else {
                dom.pick(&mut rng)
            };
            bindings.insert(s.clone(), v);
        }
        // Compute defined symbols in dependency order (cycles stay unbound;
        // a definition that fails to evaluate leaves the rest unbound).
        for (s, e, needs) in &defined {
            if !needs.iter().all(|x| bindings.contains_key(x)) {
                continue;
            }
            match eval_int(e, &bindings) {
                Ok(v) => {
                    bindings.insert((*s).clone(), v);
                }
                Err(_) => break,
            }
        }
        if involved.iter().any(|s| !bindings.contains_key(s)) || !prepared.satisfied_by(&bindings) {
            continue;
        }
        let (Some(x), Some(y)) = (eval_value(a, &bindings), eval_value(b, &bindings)) else {
            continue;
        };
        if x != y {
            let mut assignment = Bindings::new();
            for s in &involved {
                if let Some(v) = bindings.get(s) {
                    assignment.insert(s.clone(), *v);
                }
            }
            return Some(Counterexample {
                assignment,
                lhs: x,
                rhs: y,
            });
        }
    }
    None
}
