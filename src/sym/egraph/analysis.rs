//! The e-class analysis: constant folding (checked `i64`), integer ranges,
//! definedness and known divisors. Rule side conditions read these facts.
//!
//! Every member of an e-class denotes the same partial function of the symbols
//! (division by zero is "undefined" and propagates). So facts about one member
//! hold for the class: ranges intersect, divisors combine by lcm, and a class is
//! total (never undefined under the facts) when any member is.

use super::lang::SymLang;
use crate::sym::eval::{floor_div, python_mod};
use egg::{Analysis, DidMerge, EGraph, ENodeOrVar, Id, Language, PatternAst, RecExpr};
use std::collections::HashMap;

/// An extended integer bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bound {
    /// Minus infinity.
    NegInf,
    /// A finite bound.
    Fin(i128),
    /// Plus infinity.
    PosInf,
}

impl Bound {
    fn fin(self) -> Option<i128> {
        match self {
            Bound::Fin(v) => Some(v),
            _ => None,
        }
    }
}

/// Inclusive integer interval `[lo, hi]`; `lo > hi` means empty (contradiction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Interval {
    /// Lower bound.
    pub lo: Bound,
    /// Upper bound.
    pub hi: Bound,
}

impl Interval {
    /// All integers.
    pub const TOP: Interval = Interval {
        lo: Bound::NegInf,
        hi: Bound::PosInf,
    };

    /// `[v, v]`.
    pub fn point(v: i64) -> Self {
        Interval {
            lo: Bound::Fin(v.into()),
            hi: Bound::Fin(v.into()),
        }
    }

    /// From optional `i64` bounds.
    pub fn from_opt(lo: Option<i64>, hi: Option<i64>) -> Self {
        Interval {
            lo: lo.map_or(Bound::NegInf, |v| Bound::Fin(v.into())),
            hi: hi.map_or(Bound::PosInf, |v| Bound::Fin(v.into())),
        }
    }

    fn intersect(self, other: Interval) -> Interval {
        Interval {
            lo: self.lo.max(other.lo),
            hi: self.hi.min(other.hi),
        }
    }

    /// `true` when no value fits.
    pub fn is_empty(self) -> bool {
        self.lo > self.hi
    }

    /// `true` when `v` may be a value.
    pub fn contains(self, v: i128) -> bool {
        self.lo <= Bound::Fin(v) && Bound::Fin(v) <= self.hi
    }

    fn lo_at_least(self, v: i128) -> bool {
        self.lo >= Bound::Fin(v)
    }

    fn add(self, o: Interval) -> Interval {
        let lo = match (self.lo, o.lo) {
            (Bound::Fin(a), Bound::Fin(b)) => a.checked_add(b).map_or(Bound::NegInf, Bound::Fin),
            _ => Bound::NegInf,
        };
        let hi = match (self.hi, o.hi) {
            (Bound::Fin(a), Bound::Fin(b)) => a.checked_add(b).map_or(Bound::PosInf, Bound::Fin),
            _ => Bound::PosInf,
        };
        Interval { lo, hi }
    }

    fn mul(self, o: Interval) -> Interval {
        // Corner products of closed intervals of finite values, with 0 * inf = 0.
        fn corner(a: Bound, b: Bound) -> Option<Bound> {
            let sign = |x: Bound| match x {
                Bound::NegInf => -1,
                Bound::PosInf => 1,
                Bound::Fin(v) => v.signum() as i32,
            };
            match (a, b) {
                (Bound::Fin(x), Bound::Fin(y)) => x.checked_mul(y).map(Bound::Fin),
                _ => Some(match sign(a) * sign(b) {
                    0 => Bound::Fin(0),
                    1 => Bound::PosInf,
                    _ => Bound::NegInf,
                }),
            }
        }
        let mut corners = Vec::with_capacity(4);
        for a in [self.lo, self.hi] {
            for b in [o.lo, o.hi] {
                match corner(a, b) {
                    Some(c) => corners.push(c),
                    None => return Interval::TOP,
                }
            }
        }
        let lo = corners.iter().copied().min().unwrap_or(Bound::NegInf);
        let hi = corners.iter().copied().max().unwrap_or(Bound::PosInf);
        Interval { lo, hi }
    }

    /// Floor division by a divisor whose values are all >= 1.
    fn floor_div(self, d: Interval) -> Interval {
        let (Some(dlo), dhi) = (d.lo.fin(), d.hi) else {
            return Interval::TOP;
        };
        // An empty divisor range (contradictory facts: `dhi < dlo`, possibly
        // 0) says nothing to divide by; the fuzzer found `dhi == 0` here.
        if dlo < 1 || d.is_empty() {
            return Interval::TOP;
        }
        let lo = match self.lo {
            Bound::NegInf => Bound::NegInf,
            Bound::PosInf => return Interval::TOP,
            Bound::Fin(n) if n >= 0 => match dhi {
                Bound::Fin(dh) => Bound::Fin(n.div_euclid(dh)),
                _ => Bound::Fin(0),
            },
            Bound::Fin(n) => Bound::Fin(n.div_euclid(dlo)),
        };
        let hi = match self.hi {
            Bound::PosInf => Bound::PosInf,
            Bound::NegInf => return Interval::TOP,
            Bound::Fin(n) if n >= 0 => Bound::Fin(n.div_euclid(dlo)),
            Bound::Fin(n) => match dhi {
                Bound::Fin(dh) => Bound::Fin(n.div_euclid(dh)),
                _ => Bound::Fin(-1),
            },
        };
        Interval { lo, hi }
    }

    /// Python (floor) modulo by a divisor whose values are all >= 1: `[0, d-1]`,
    /// and `[0, n]` when `0 <= n`.
    fn python_mod(self, d: Interval) -> Interval {
        if !d.lo_at_least(1) {
            return Interval::TOP;
        }
        let mut hi = match d.hi {
            Bound::Fin(v) => Bound::Fin(v - 1),
            other => other,
        };
        if self.lo_at_least(0) {
            hi = hi.min(self.hi);
        }
        Interval { lo: Bound::Fin(0), hi }
    }

    /// C (truncating) modulo by a divisor whose values are all >= 1: the sign
    /// follows the dividend and `|r| < d`.
    fn c_mod(self, d: Interval) -> Interval {
        if !d.lo_at_least(1) {
            return Interval::TOP;
        }
        let (neg_lim, pos_lim) = match d.hi {
            Bound::Fin(v) => (Bound::Fin(1 - v), Bound::Fin(v - 1)),
            _ => (Bound::NegInf, Bound::PosInf),
        };
        if self.lo_at_least(0) {
            Interval {
                lo: Bound::Fin(0),
                hi: pos_lim.min(self.hi),
            }
        } else if self.hi <= Bound::Fin(0) {
            Interval {
                lo: neg_lim.max(self.lo),
                hi: Bound::Fin(0),
            }
        } else {
            Interval {
                lo: neg_lim.max(self.lo),
                hi: pos_lim.min(self.hi),
            }
        }
    }

    fn min(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.min(o.lo),
            hi: self.hi.min(o.hi),
        }
    }

    fn max(self, o: Interval) -> Interval {
        Interval {
            lo: self.lo.max(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    fn pow(self, n: u32) -> Interval {
        if n == 0 {
            return Interval::point(1);
        }
        if self.lo_at_least(0) {
            let lo = self.lo.fin().and_then(|v| v.checked_pow(n));
            let hi = match self.hi {
                Bound::Fin(v) => v.checked_pow(n).map_or(Bound::PosInf, Bound::Fin),
                other => other,
            };
            return Interval {
                lo: lo.map_or(Bound::Fin(0), Bound::Fin),
                hi,
            };
        }
        if n % 2 == 0 {
            return Interval {
                lo: Bound::Fin(0),
                hi: Bound::PosInf,
            };
        }
        Interval::TOP
    }
}

/// A folded constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Const {
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

/// Facts about one e-class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassData {
    /// The value when every member with constant children folds (checked `i64`),
    /// with the folded node as a pattern for the explanation.
    pub constant: Option<(Const, PatternAst<SymLang>)>,
    /// Values the class can take where it is defined.
    pub range: Interval,
    /// The class is defined (no division by zero) under the facts.
    pub total: bool,
    /// A non-negative integer that divides every value; 0 means the value is 0.
    pub multiple_of: u64,
    /// Two members disagree (contradictory facts, or a bug): no verdict may be drawn.
    pub conflict: bool,
    /// Times merges have narrowed `range` (at most [`NARROWINGS`]).
    pub narrowed: u16,
}

/// Most times one e-class's range narrows. Interval propagation around a
/// cycle of e-classes need not converge: under the fact `u == u + 1` the
/// class of `u` holds `u + 1`, so each pass raises its lower bound by one,
/// 2^127 passes before the range is empty, all inside egg's `rebuild`, which
/// no time limit reaches. A range that stops narrowing stays a sound
/// over-approximation (the class's values lie in it), and every other datum
/// changes a bounded number of times (a constant and definedness once, the
/// divisor by at least doubling, the conflict flag once), so every
/// `rebuild` ends.
pub const NARROWINGS: u16 = 64;

impl ClassData {
    /// The folded integer, if any.
    pub fn int(&self) -> Option<i64> {
        match self.constant {
            Some((Const::Int(v), _)) => Some(v),
            _ => None,
        }
    }

    /// `true` when `d` (non-zero) is known to divide every value.
    pub fn divisible_by(&self, d: i64) -> bool {
        d != 0 && (self.multiple_of == 0 || self.multiple_of % d.unsigned_abs() == 0)
    }
}

/// The analysis: symbol ranges from the facts.
#[derive(Clone, Debug, Default)]
pub struct SymAnalysis {
    /// Known ranges of symbols.
    pub ranges: HashMap<egg::Symbol, Interval>,
}

/// The e-graph type the prover uses.
pub type SymEGraph = EGraph<SymLang, SymAnalysis>;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

fn lcm(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 {
        return 0;
    }
    (a / gcd(a, b)).checked_mul(b).unwrap_or(a.max(b))
}

/// Folds one node whose children are constants.
fn fold(node: &SymLang, c: &dyn Fn(Id) -> Option<Const>) -> Option<Const> {
    let int = |id: Id| match c(id)? {
        Const::Int(v) => Some(v),
        Const::Bool(_) => None,
    };
    let boolean = |id: Id| match c(id)? {
        Const::Bool(v) => Some(v),
        Const::Int(_) => None,
    };
    use Const::{Bool as B, Int as I};
    Some(match node {
        SymLang::Num(v) => I(*v),
        SymLang::Bool(v) => B(*v),
        SymLang::Var(_) => return None,
        SymLang::Add([a, b]) => I(int(*a)?.checked_add(int(*b)?)?),
        SymLang::Mul([a, b]) => I(int(*a)?.checked_mul(int(*b)?)?),
        SymLang::FloorDiv([a, b]) => I(floor_div(int(*a)?, int(*b)?)?),
        // CleanDiv is undefined unless the division is exact.
        SymLang::CleanDiv([a, b]) => {
            let (x, y) = (int(*a)?, int(*b)?);
            if x.checked_rem(y)? != 0 {
                return None;
            }
            I(floor_div(x, y)?)
        }
        SymLang::Mod([a, b]) => I(crate::sym::eval::c_mod(int(*a)?, int(*b)?)?),
        SymLang::PythonMod([a, b]) => I(python_mod(int(*a)?, int(*b)?)?),
        SymLang::ModularIndexing([x, d, m]) => I(python_mod(floor_div(int(*x)?, int(*d)?)?, int(*m)?)?),
        SymLang::Min([a, b]) => I(int(*a)?.min(int(*b)?)),
        SymLang::Max([a, b]) => I(int(*a)?.max(int(*b)?)),
        SymLang::Pow([a, n]) => I(int(*a)?.checked_pow(u32::try_from(int(*n)?).ok()?)?),
        SymLang::Eq([a, b]) => B(int(*a)? == int(*b)?),
        SymLang::Ne([a, b]) => B(int(*a)? != int(*b)?),
        SymLang::Lt([a, b]) => B(int(*a)? < int(*b)?),
        SymLang::Le([a, b]) => B(int(*a)? <= int(*b)?),
        SymLang::Gt([a, b]) => B(int(*a)? > int(*b)?),
        SymLang::Ge([a, b]) => B(int(*a)? >= int(*b)?),
        SymLang::And([a, b]) => B(boolean(*a)? && boolean(*b)?),
        SymLang::Or([a, b]) => B(boolean(*a)? || boolean(*b)?),
        SymLang::Not(a) => B(!boolean(*a)?),
    })
}

fn const_node(c: Const) -> SymLang {
    match c {
        Const::Int(v) => SymLang::Num(v),
        Const::Bool(v) => SymLang::Bool(v),
    }
}

/// What [`SymAnalysis`] derives for one node from its children's data,
/// without the folded node's pattern: the e-graph's `make`, and
/// [`super::bounds`], which walks an expression bottom-up without building
/// an e-graph (no rewrite runs there, and merging a folded class with its
/// literal changes neither's data, so the result is the e-graph's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Derived {
    /// The folded value.
    pub(super) constant: Option<Const>,
    /// [`ClassData::range`].
    pub(super) range: Interval,
    /// [`ClassData::total`].
    pub(super) total: bool,
    /// [`ClassData::multiple_of`].
    pub(super) multiple_of: u64,
}

impl Derived {
    fn int(&self) -> Option<i64> {
        match self.constant {
            Some(Const::Int(v)) => Some(v),
            _ => None,
        }
    }

    fn divisible_by(&self, d: i64) -> bool {
        d != 0 && (self.multiple_of == 0 || self.multiple_of % d.unsigned_abs() == 0)
    }
}

/// [`Derived`] data of `enode`, its children's from `child`, symbols'
/// ranges from `ranges`.
pub(super) fn derive(
    enode: &SymLang,
    child: &dyn Fn(Id) -> Derived,
    ranges: &HashMap<egg::Symbol, Interval>,
) -> Derived {
    let folded = fold(enode, &|id| child(id).constant);
    let all_total = enode.children().iter().all(|c| child(*c).total);
    let nonzero = |id: &Id| !child(*id).range.contains(0);
    let (range, total, multiple_of) = match enode {
        SymLang::Num(v) => (Interval::point(*v), true, v.unsigned_abs()),
        SymLang::Bool(_) => (Interval::TOP, true, 1),
        SymLang::Var(s) => (ranges.get(s).copied().unwrap_or(Interval::TOP), true, 1),
        SymLang::Add([a, b]) => (
            child(*a).range.add(child(*b).range),
            all_total,
            gcd(child(*a).multiple_of, child(*b).multiple_of),
        ),
        SymLang::Mul([a, b]) => {
            let (ma, mb) = (child(*a).multiple_of, child(*b).multiple_of);
            (
                child(*a).range.mul(child(*b).range),
                all_total,
                ma.checked_mul(mb).unwrap_or(ma.max(mb)),
            )
        }
        SymLang::FloorDiv([a, b]) => (child(*a).range.floor_div(child(*b).range), all_total && nonzero(b), 1),
        SymLang::CleanDiv([a, b]) => {
            // Defined only where exact: total when a literal divisor is known to divide.
            let exact = child(*b).int().is_some_and(|v| child(*a).divisible_by(v));
            (
                child(*a).range.floor_div(child(*b).range),
                all_total && nonzero(b) && exact,
                1,
            )
        }
        SymLang::Mod([a, b]) => (child(*a).range.c_mod(child(*b).range), all_total && nonzero(b), 1),
        SymLang::PythonMod([a, b]) => (child(*a).range.python_mod(child(*b).range), all_total && nonzero(b), 1),
        SymLang::ModularIndexing([x, dd, m]) => (
            child(*x).range.floor_div(child(*dd).range).python_mod(child(*m).range),
            all_total && nonzero(dd) && nonzero(m),
            1,
        ),
        SymLang::Min([a, b]) => (
            child(*a).range.min(child(*b).range),
            all_total,
            gcd(child(*a).multiple_of, child(*b).multiple_of),
        ),
        SymLang::Max([a, b]) => (
            child(*a).range.max(child(*b).range),
            all_total,
            gcd(child(*a).multiple_of, child(*b).multiple_of),
        ),
        SymLang::Pow([a, n]) => {
            let range = match child(*n).int().and_then(|v| u32::try_from(v).ok()) {
                Some(k) => child(*a).range.pow(k),
                None => Interval::TOP,
            };
            (range, all_total, 1)
        }
        SymLang::Eq(_)
        | SymLang::Ne(_)
        | SymLang::Lt(_)
        | SymLang::Le(_)
        | SymLang::Gt(_)
        | SymLang::Ge(_)
        | SymLang::And(_)
        | SymLang::Or(_)
        | SymLang::Not(_) => (Interval::TOP, all_total, 1),
    };
    let range = match folded {
        Some(Const::Int(v)) => range.intersect(Interval::point(v)),
        _ => range,
    };
    let multiple_of = match folded {
        Some(Const::Int(v)) => v.unsigned_abs(),
        _ => multiple_of,
    };
    let total = total || folded.is_some();
    Derived {
        constant: folded,
        range,
        total,
        multiple_of,
    }
}

impl Analysis<SymLang> for SymAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut SymEGraph, enode: &SymLang, _id: Id) -> ClassData {
        let d = |id: &Id| &egraph[*id].data;
        let konst = |id: Id| egraph[id].data.constant.as_ref().map(|(c, _)| *c);
        let folded = fold(enode, &konst);
        let constant = folded.map(|c| {
            // The folded node with literal children, so explanations name it.
            let mut pat: RecExpr<ENodeOrVar<SymLang>> = RecExpr::default();
            let mut child_ids = Vec::new();
            for child in enode.children() {
                // `fold` succeeded, so every child has a constant.
                let cc = konst(*child).map_or(SymLang::Num(0), const_node);
                child_ids.push(pat.add(ENodeOrVar::ENode(cc)));
            }
            let mut i = 0;
            let node = enode.clone().map_children(|_| {
                let id = child_ids[i];
                i += 1;
                id
            });
            pat.add(ENodeOrVar::ENode(node));
            (c, pat)
        });
        let derived = derive(
            enode,
            &|id: Id| {
                let data = d(&id);
                Derived {
                    constant: data.constant.as_ref().map(|(c, _)| *c),
                    range: data.range,
                    total: data.total,
                    multiple_of: data.multiple_of,
                }
            },
            &egraph.analysis.ranges,
        );
        let (range, total, multiple_of) = (derived.range, derived.total, derived.multiple_of);
        ClassData {
            constant,
            range,
            total,
            multiple_of,
            conflict: range.is_empty(),
            narrowed: 0,
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        // A contradictory class stays as it is: the prover only reports the
        // contradiction, and refining its data further need not converge
        // (constant folding kept re-merging `0` and `1` for the facts
        // `x**0 == 0, 2 < 1`, so `rebuild` never returned).
        if a.conflict || b.conflict {
            let a_changed = !a.conflict;
            a.conflict = true;
            return DidMerge(a_changed, !b.conflict);
        }
        let before_a = a.clone();
        let mut conflict = a.conflict || b.conflict;
        let constant = match (a.constant.take(), b.constant.clone()) {
            (Some(x), Some(y)) => {
                if x.0 != y.0 {
                    conflict = true;
                }
                Some(x)
            }
            (x, y) => x.or(y),
        };
        let mut range = a.range.intersect(b.range);
        if range.is_empty() {
            conflict = true;
        }
        // Narrowing stops after NARROWINGS times: `a`'s range is still sound
        // for the merged class (its members equal `b`'s).
        let mut narrowed = a.narrowed;
        if range != a.range {
            if a.narrowed >= NARROWINGS {
                range = a.range;
            } else {
                narrowed += 1;
            }
        }
        let merged = ClassData {
            constant,
            range,
            total: a.total || b.total,
            multiple_of: lcm(a.multiple_of, b.multiple_of),
            conflict,
            narrowed,
        };
        let a_changed = merged != before_a;
        let b_changed = merged.constant.as_ref().map(|c| c.0) != b.constant.as_ref().map(|c| c.0)
            || merged.range != b.range
            || merged.total != b.total
            || merged.multiple_of != b.multiple_of
            || merged.conflict != b.conflict;
        *a = merged;
        DidMerge(a_changed, b_changed)
    }

    fn modify(egraph: &mut SymEGraph, id: Id) {
        if egraph[id].data.conflict {
            return;
        }
        let Some((c, pat)) = egraph[id].data.constant.clone() else {
            return;
        };
        if pat.as_ref().len() <= 1 {
            return;
        }
        let mut lit: RecExpr<ENodeOrVar<SymLang>> = RecExpr::default();
        lit.add(ENodeOrVar::ENode(const_node(c)));
        egraph.union_instantiations(&pat, &lit, &Default::default(), "constant-fold");
    }
}
