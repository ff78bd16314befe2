//! The rewrite rules, one named rule per line, each with its justification.
//!
//! Soundness contract: every e-class holds terms that denote the same partial
//! function (undefined exactly where a division or modulo by zero occurs). A rule
//! may therefore drop a sub-term only when the analysis knows it is total, and
//! every rule holds for all integers (not just `i64`) satisfying its condition,
//! with floor semantics for `//`, `CleanDiv`, `PythonMod` and `ModularIndexing`
//! and truncating (C) semantics for `Mod`.

use super::analysis::{SymAnalysis, SymEGraph};
use super::lang::SymLang;
use egg::{rewrite as rw, Id, Rewrite, Subst, Var};

fn var(name: &str) -> Var {
    // Rule variables are literals of this file; they always parse.
    name.parse()
        .unwrap_or_else(|_| unreachable!("bad pattern variable {name}"))
}

/// `?v` is defined wherever the facts hold.
fn total(v: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| eg[s[v]].data.total
}

/// `?v` is defined and never zero.
fn nonzero(v: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| {
        let d = &eg[s[v]].data;
        d.total && !d.range.contains(0)
    }
}

/// `?v` is defined and `>= 1`.
fn positive(v: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| {
        let d = &eg[s[v]].data;
        d.total && d.range.lo >= super::analysis::Bound::Fin(1)
    }
}

/// `?v` is defined and `>= 0`.
fn nonneg(v: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| {
        let d = &eg[s[v]].data;
        d.total && d.range.lo >= super::analysis::Bound::Fin(0)
    }
}

/// Both defined and every value of `?a` is `< ?b` (strict) or `<= ?b`.
fn below(a: &str, b: &str, strict: bool) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let (a, b) = (var(a), var(b));
    move |eg, _, s| {
        let (da, db) = (&eg[s[a]].data, &eg[s[b]].data);
        if !(da.total && db.total) {
            return false;
        }
        match (da.range.hi, db.range.lo) {
            (super::analysis::Bound::Fin(h), super::analysis::Bound::Fin(l)) => {
                if strict {
                    h < l
                } else {
                    h <= l
                }
            }
            _ => false,
        }
    }
}

/// `?b` folds to a non-zero constant that divides every value of `?a`.
fn const_divides(b: &str, a: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let (a, b) = (var(a), var(b));
    move |eg, _, s| match eg[s[b]].data.int() {
        Some(d) if d != 0 => eg[s[a]].data.divisible_by(d),
        _ => false,
    }
}

/// `?c` folds to a constant `<= -1`.
fn negative_const(c: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let c = var(c);
    move |eg, _, s| eg[s[c]].data.int().is_some_and(|v| v <= -1)
}

/// `?a` and `?b` fold to non-zero constants and `?b` divides `?a`.
fn const_multiple(a: &str, b: &str) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    let (a, b) = (var(a), var(b));
    move |eg, _, s| match (eg[s[a]].data.int(), eg[s[b]].data.int()) {
        (Some(x), Some(y)) => x != 0 && y != 0 && x % y == 0,
        _ => false,
    }
}

fn both(
    f: impl Fn(&mut SymEGraph, Id, &Subst) -> bool,
    g: impl Fn(&mut SymEGraph, Id, &Subst) -> bool,
) -> impl Fn(&mut SymEGraph, Id, &Subst) -> bool {
    move |eg, id, s| f(eg, id, s) && g(eg, id, s)
}

/// The prover's rule table. Names are stable: explanations cite them.
pub fn rules() -> Vec<Rewrite<SymLang, SymAnalysis>> {
    vec![
        // ---- ring laws ----
        rw!("add-comm"; "(+ ?a ?b)" => "(+ ?b ?a)"), // + is commutative; both sides use the same operands
        rw!("add-assoc-l"; "(+ ?a (+ ?b ?c))" => "(+ (+ ?a ?b) ?c)"), // + is associative
        rw!("add-assoc-r"; "(+ (+ ?a ?b) ?c)" => "(+ ?a (+ ?b ?c))"), // + is associative
        rw!("mul-comm"; "(* ?a ?b)" => "(* ?b ?a)"), // * is commutative
        rw!("mul-assoc-l"; "(* ?a (* ?b ?c))" => "(* (* ?a ?b) ?c)"), // * is associative
        rw!("mul-assoc-r"; "(* (* ?a ?b) ?c)" => "(* ?a (* ?b ?c))"), // * is associative
        rw!("add-zero"; "(+ ?a 0)" => "?a"),         // 0 is the additive identity; ?a is kept
        rw!("mul-one"; "(* ?a 1)" => "?a"),          // 1 is the multiplicative identity; ?a is kept
        rw!("mul-zero"; "(* ?a 0)" => "0" if total("?a")), // a*0 = 0 when a is defined (a is dropped)
        rw!("add-self"; "(+ ?a ?a)" => "(* 2 ?a)"),  // a + a = 2a
        rw!("add-cancel"; "(+ ?a (* -1 ?a))" => "0" if total("?a")), // a - a = 0 when a is defined
        rw!("distribute"; "(* ?a (+ ?b ?c))" => "(+ (* ?a ?b) (* ?a ?c))"), // distributivity; same operands
        rw!("factor"; "(+ (* ?a ?b) (* ?a ?c))" => "(* ?a (+ ?b ?c))"), // distributivity read backwards
        rw!("factor-one"; "(+ (* ?a ?b) ?a)" => "(* ?a (+ ?b 1))"), // ab + a = a(b + 1)
        // ---- floor division ----
        rw!("floordiv-one"; "(// ?a 1)" => "?a"), // floor(a/1) = a
        rw!("floordiv-self"; "(// ?a ?a)" => "1" if nonzero("?a")), // a//a = 1 for a != 0
        rw!("floordiv-zero"; "(// 0 ?b)" => "0" if nonzero("?b")), // 0//b = 0 for b != 0
        rw!("floordiv-mul-cancel"; "(// (* ?a ?b) ?b)" => "?a" if nonzero("?b")), // (ab)//b = a exactly for b != 0
        rw!("floordiv-nested"; "(// (// ?x ?a) ?b)" => "(// ?x (* ?a ?b))" if both(positive("?a"), positive("?b"))), // floor(floor(x/a)/b) = floor(x/(ab)) for a, b > 0
        rw!("floordiv-split-mul"; "(// (+ (* ?a ?b) ?c) ?b)" => "(+ ?a (// ?c ?b))" if nonzero("?b")), // floor((ab + c)/b) = a + floor(c/b) for b != 0
        rw!("floordiv-split-const"; "(// (+ ?a ?c) ?b)" => "(+ (// ?a ?b) (// ?c ?b))" if const_divides("?b", "?a")), // a = kb exactly: floor((kb + c)/b) = k + floor(c/b), b != 0
        rw!("floordiv-small"; "(// ?a ?b)" => "0" if both(nonneg("?a"), below("?a", "?b", true))), // 0 <= a < b gives floor(a/b) = 0
        rw!("ceildiv-neg"; "(* -1 (// ?a (* -1 ?b)))" => "(// (+ ?a (+ ?b -1)) ?b)" if positive("?b")), // -(a // -b) = ceil(a/b) = (a + b - 1)//b for b >= 1
        rw!("ceildiv-neg-const"; "(* -1 (// ?a ?c))" => "(// (+ ?a (+ (* -1 ?c) -1)) (* -1 ?c))" if negative_const("?c")), // same with b = -c >= 1 a literal
        rw!("cleandiv-floordiv"; "(CleanDiv ?a ?b)" => "(// ?a ?b)" if const_divides("?b", "?a")), // exact (b | a), so CleanDiv is defined and equals floor division
        rw!("cleandiv-mul-cancel"; "(CleanDiv (* ?a ?b) ?b)" => "?a" if nonzero("?b")), // ab/b is exact and equals a for b != 0
        // ---- modulo ----
        rw!("mod-to-pythonmod"; "(Mod ?a ?b)" => "(PythonMod ?a ?b)" if both(nonneg("?a"), positive("?b"))), // truncating and floor remainders agree for a >= 0, b > 0
        rw!("mod-small"; "(Mod ?a ?b)" => "?a" if both(nonneg("?a"), below("?a", "?b", true))), // 0 <= a < b gives a % b = a (C)
        rw!("pythonmod-small"; "(PythonMod ?a ?b)" => "?a" if both(nonneg("?a"), below("?a", "?b", true))), // 0 <= a < b gives a % b = a (Python)
        rw!("mod-mul"; "(Mod (* ?a ?b) ?b)" => "0" if both(nonzero("?b"), total("?a"))), // exact multiples leave remainder 0 (C), b != 0
        rw!("pythonmod-mul"; "(PythonMod (* ?a ?b) ?b)" => "0" if both(nonzero("?b"), total("?a"))), // exact multiples leave remainder 0 (Python), b != 0
        rw!("pythonmod-one"; "(PythonMod ?a 1)" => "0" if total("?a")), // every integer is a multiple of 1
        rw!("pythonmod-split-mul"; "(PythonMod (+ (* ?a ?b) ?c) ?b)" => "(PythonMod ?c ?b)" if both(nonzero("?b"), total("?a"))), // floor remainder is b-periodic, b != 0
        rw!("pythonmod-split-const"; "(PythonMod (+ ?a ?c) ?b)" => "(PythonMod ?c ?b)" if both(const_divides("?b", "?a"), total("?a"))), // a = kb: (kb + c) mod b = c mod b
        rw!("pythonmod-nested"; "(PythonMod (PythonMod ?x ?a) ?b)" => "(PythonMod ?x ?b)" if const_multiple("?a", "?b")), // x mod a = x - a*q and b | a, so mod b is unchanged
        rw!("divmod"; "(+ (* ?b (// ?a ?b)) (PythonMod ?a ?b))" => "?a" if nonzero("?b")), // Python's division identity a = b*(a//b) + a%b, b != 0
        rw!("modindex-def"; "(ModularIndexing ?x ?d ?m)" => "(PythonMod (// ?x ?d) ?m)" if positive("?m")), // Inductor's definition, m > 0
        // ---- min / max ----
        rw!("min-comm"; "(Min ?a ?b)" => "(Min ?b ?a)"), // min is commutative
        rw!("max-comm"; "(Max ?a ?b)" => "(Max ?b ?a)"), // max is commutative
        rw!("min-self"; "(Min ?a ?a)" => "?a"),          // min(a, a) = a
        rw!("max-self"; "(Max ?a ?a)" => "?a"),          // max(a, a) = a
        rw!("min-known"; "(Min ?a ?b)" => "?a" if below("?a", "?b", false)), // a <= b everywhere (both defined) gives min = a
        rw!("max-known"; "(Max ?a ?b)" => "?a" if below("?b", "?a", false)), // b <= a everywhere (both defined) gives max = a
        // ---- powers ----
        rw!("pow-zero"; "(Pow ?a 0)" => "1" if total("?a")), // a**0 = 1 (also 0**0 in Python)
        rw!("pow-one"; "(Pow ?a 1)" => "?a"),                // a**1 = a
        rw!("pow-two"; "(Pow ?a 2)" => "(* ?a ?a)"),         // a**2 = a*a
        rw!("pow-three"; "(Pow ?a 3)" => "(* ?a (* ?a ?a))"), // a**3 = a*a*a
        // ---- comparisons and connectives ----
        rw!("gt-flip"; "(> ?a ?b)" => "(< ?b ?a)"),         // a > b iff b < a
        rw!("ge-flip"; "(>= ?a ?b)" => "(<= ?b ?a)"),       // a >= b iff b <= a
        rw!("eq-comm"; "(== ?a ?b)" => "(== ?b ?a)"),       // equality is symmetric
        rw!("ne-comm"; "(!= ?a ?b)" => "(!= ?b ?a)"),       // disequality is symmetric
        rw!("lt-to-le"; "(< ?a ?b)" => "(<= (+ ?a 1) ?b)"), // on integers a < b iff a + 1 <= b
        rw!("not-lt"; "(Not (< ?a ?b))" => "(<= ?b ?a)"),   // trichotomy
        rw!("not-le"; "(Not (<= ?a ?b))" => "(< ?b ?a)"),   // trichotomy
        rw!("not-eq"; "(Not (== ?a ?b))" => "(!= ?a ?b)"),  // definition of !=
        rw!("not-not"; "(Not (Not ?a))" => "?a"),           // double negation
        rw!("and-comm"; "(And ?a ?b)" => "(And ?b ?a)" if both(total("?a"), total("?b"))), // `and` short-circuits: commutes only when both sides are defined
        rw!("or-comm"; "(Or ?a ?b)" => "(Or ?b ?a)" if both(total("?a"), total("?b"))), // `or` short-circuits: commutes only when both sides are defined
        rw!("and-true"; "(And ?a true)" => "?a"), // `a and True` is a (undefined where a is)
        rw!("or-false"; "(Or ?a false)" => "?a"), // `a or False` is a (undefined where a is)
        rw!("and-false"; "(And ?a false)" => "false" if total("?a")), // absorbing element, a defined
        rw!("or-true"; "(Or ?a true)" => "true" if total("?a")), // absorbing element, a defined
        rw!("lt-known-true"; "(< ?a ?b)" => "true" if below("?a", "?b", true)), // every a < every b
        rw!("lt-known-false"; "(< ?a ?b)" => "false" if below("?b", "?a", false)), // every b <= every a
        rw!("le-known-true"; "(<= ?a ?b)" => "true" if below("?a", "?b", false)), // every a <= every b
        rw!("le-known-false"; "(<= ?a ?b)" => "false" if below("?b", "?a", true)), // every b < every a
        rw!("eq-refl"; "(== ?a ?a)" => "true" if total("?a")), // a defined value equals itself
    ]
}
