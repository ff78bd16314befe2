//! Solving an input's size expression for the one symbol it leaves unbound:
//! a tensor input declared `f32[2*s0 + 1]` binds `s0` from its actual size.
//! The affine case, `a*s + rest` with a non-zero integer `a`, is the one
//! Inductor's `try_solve` handles for sizes and the one every back end and
//! the interpreter solve (exactly: a size that `a` does not divide is an error
//! there, and the input's size check fails on it anyway).

use super::{SymExpr, Symbol};

/// `e == coeff*s + rest`, `s` not in `rest`, `coeff != 0`.
#[derive(Clone, Debug, PartialEq)]
pub struct Affine {
    /// The coefficient of the symbol (non-zero).
    pub coeff: i64,
    /// Everything else (free of the symbol).
    pub rest: SymExpr,
}

/// `e` as an affine function of `s`, or `None` when it is not one (a product
/// of `s` with another symbol or with itself, `s` under a division, a
/// min/max, ...) or does not mention `s`.
pub fn affine_in(e: &SymExpr, s: &Symbol) -> Option<Affine> {
    let (coeff, rest) = affine_parts(e, s)?;
    (coeff != 0).then_some(Affine { coeff, rest })
}

fn affine_parts(e: &SymExpr, s: &Symbol) -> Option<(i64, SymExpr)> {
    match e {
        SymExpr::Sym(x) if x == s => Some((1, SymExpr::Int(0))),
        SymExpr::Mul(fs) => {
            let mut coeff: i64 = 1;
            let mut seen = false;
            for f in fs {
                match f {
                    SymExpr::Int(v) => coeff = coeff.checked_mul(*v)?,
                    SymExpr::Sym(x) if x == s && !seen => seen = true,
                    other if !other.free_symbols().contains(s) && !seen => return mul_free_of(e, s),
                    _ => return None,
                }
            }
            if seen {
                Some((coeff, SymExpr::Int(0)))
            } else {
                Some((0, e.clone()))
            }
        }
        SymExpr::Add(ts) => {
            let mut a = 0i64;
            let mut rest = SymExpr::Int(0);
            for t in ts {
                if t.free_symbols().contains(s) {
                    let (c, r) = affine_parts(t, s)?;
                    a = a.checked_add(c)?;
                    rest = SymExpr::add(rest, r);
                } else {
                    rest = SymExpr::add(rest, t.clone());
                }
            }
            Some((a, rest))
        }
        other if !other.free_symbols().contains(s) => Some((0, other.clone())),
        _ => None,
    }
}

/// A product with a factor that is neither an integer nor `s`: affine (with
/// coefficient 0) only when the product does not mention `s` at all.
fn mul_free_of(e: &SymExpr, s: &Symbol) -> Option<(i64, SymExpr)> {
    (!e.free_symbols().contains(s)).then(|| (0, e.clone()))
}

impl Affine {
    /// The symbol's value when the expression equals `value`:
    /// `(value - rest) // coeff` (with the signs of both flipped for a
    /// negative coefficient, so the division is by a positive number).
    pub fn solution(&self, value: SymExpr) -> SymExpr {
        let (num, den) = if self.coeff > 0 {
            (SymExpr::add(value, SymExpr::neg(self.rest.clone())), self.coeff)
        } else {
            (
                SymExpr::add(self.rest.clone(), SymExpr::neg(value)),
                self.coeff.saturating_neg(),
            )
        };
        if den == 1 {
            num
        } else {
            SymExpr::FloorDiv(Box::new(num), Box::new(SymExpr::Int(den)))
        }
    }

    /// The symbol's value when the expression equals `value`, with `rest`
    /// evaluated to `rest`: `None` when `coeff` does not divide
    /// `value - rest` or the arithmetic overflows.
    pub fn solve(&self, value: i64, rest: i64) -> Option<i64> {
        let num = value.checked_sub(rest)?;
        (num.checked_rem(self.coeff)? == 0).then(|| num / self.coeff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sym::parse::parse;

    fn affine(e: &str) -> Option<(i64, String)> {
        affine_in(&parse(e).unwrap(), &Symbol::new("s0")).map(|a| (a.coeff, a.rest.to_string()))
    }

    #[test]
    fn affine_forms_and_the_rest() {
        assert_eq!(affine("2*s0 + 1"), Some((2, "1".into())));
        assert_eq!(affine("s0 - 3"), Some((1, "-3".into())));
        assert_eq!(affine("s1 + 4*s0"), Some((4, "s1".into())));
        assert_eq!(affine("s0*s1"), None);
        assert_eq!(affine("s0*s0"), None);
        assert_eq!(affine("s0 // 2"), None);
        assert_eq!(affine("s1 + 2"), None);
        assert_eq!(affine("s0 - s0"), None);
    }

    #[test]
    fn solutions_are_exact() {
        let at = |e: SymExpr, v: i64| {
            let mut b = crate::sym::Bindings::new();
            b.insert(Symbol::new("v"), v);
            crate::sym::eval::eval_int(&e, &b).unwrap()
        };
        let a = affine_in(&parse("2*s0 + 1").unwrap(), &Symbol::new("s0")).unwrap();
        assert_eq!(a.solve(9, 1), Some(4));
        assert_eq!(a.solve(8, 1), None);
        assert_eq!(at(a.solution(SymExpr::sym("v")), 9), 4);
        let b = affine_in(&parse("7 - s0").unwrap(), &Symbol::new("s0")).unwrap();
        assert_eq!(b.solve(3, 7), Some(4));
        assert_eq!(at(b.solution(SymExpr::sym("v")), 3), 4);
        assert_eq!(a.solve(i64::MIN, 1), None);
    }
}
