//! Checked 64-bit evaluation.
//!
//! Types are syntactic: `Bool`, comparisons, `and`, `or` and `not` are boolean,
//! everything else (including every symbol) is an integer. Semantics:
//!
//! * `Add` and `Mul` are exact: they fail with [`EvalError::Overflow`] only when
//!   the mathematical result does not fit in `i64`, whatever the order of the
//!   operands (so `a + b + c` and `a + (b + c)` agree wherever both are defined
//!   at the top level).
//! * `FloorDiv` rounds toward negative infinity, `PythonMod` takes the sign of
//!   the divisor; `Mod` is C's `%` (truncating, sign of the dividend);
//!   `CleanDiv` must divide exactly ([`EvalError::InexactDivision`]);
//!   `ModularIndexing(x, d, m)` is `PythonMod(FloorDiv(x, d), m)`.
//!   Division or remainder by zero is [`EvalError::DivisionByZero`];
//!   `i64::MIN // -1` is an overflow.
//! * `Pow` is checked exponentiation.
//! * `==`/`!=` compare two integers or two booleans; the orderings compare
//!   integers. `and`/`or` short-circuit left to right like Python, so
//!   `s0 != 0 and 10 // s0 > 1` is defined at `s0 = 0`.
//!
//! Evaluation recurses over the tree; trees from [`crate::sym::parse`] are
//! depth-limited.
use super::{CmpOp, SymExpr, Symbol};

/// Concrete symbol values.
pub type Bindings = indexmap::IndexMap<Symbol, i64>;

/// Why an expression could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A symbol without a value.
    #[error("symbol `{symbol}` is not bound")]
    Unbound {
        /// The symbol.
        symbol: Symbol,
    },
    /// 64-bit overflow.
    #[error("integer overflow evaluating `{expr}`")]
    Overflow {
        /// The expression.
        expr: String,
    },
    /// Division or modulo by zero.
    #[error("division by zero evaluating `{expr}`")]
    DivisionByZero {
        /// The expression.
        expr: String,
    },
    /// A boolean where an integer is needed or the reverse.
    #[error("type mismatch evaluating `{expr}`: expected {expected}")]
    TypeMismatch {
        /// The expression.
        expr: String,
        /// `integer` or `boolean`.
        expected: &'static str,
    },
    /// A `CleanDiv` whose operands do not divide exactly.
    #[error("`{expr}` is a CleanDiv but {dividend} is not divisible by {divisor}")]
    InexactDivision {
        /// The expression.
        expr: String,
        /// The dividend's value.
        dividend: i64,
        /// The divisor's value.
        divisor: i64,
    },
    /// A `min`/`max` without operands (only constructible by hand).
    #[error("`{expr}` has no operands")]
    NoOperands {
        /// The expression.
        expr: String,
    },
}

/// Where evaluation finds a symbol's value (`None`: unbound).
pub type Lookup<'l> = dyn FnMut(&Symbol) -> Option<i64> + 'l;

/// Evaluates an integer expression.
pub fn eval_int(e: &SymExpr, b: &Bindings) -> Result<i64, EvalError> {
    int(e, &mut |s| b.get(s).copied())
}

/// Evaluates a boolean expression.
pub fn eval_bool(e: &SymExpr, b: &Bindings) -> Result<bool, EvalError> {
    boolean(e, &mut |s| b.get(s).copied())
}

/// [`eval_int`] with symbol values from `lookup`; a symbol it has no value
/// for is [`EvalError::Unbound`]. The one SymExpr evaluator: the FX
/// interpreter evaluates layouts through it with its run's values.
pub fn eval_int_with(e: &SymExpr, lookup: &mut Lookup<'_>) -> Result<i64, EvalError> {
    int(e, lookup)
}

/// [`eval_bool`] with symbol values from `lookup`.
pub fn eval_bool_with(e: &SymExpr, lookup: &mut Lookup<'_>) -> Result<bool, EvalError> {
    boolean(e, lookup)
}

fn overflow(e: &SymExpr) -> EvalError {
    EvalError::Overflow { expr: e.to_string() }
}

fn div_zero(e: &SymExpr) -> EvalError {
    EvalError::DivisionByZero { expr: e.to_string() }
}

fn mismatch(e: &SymExpr, expected: &'static str) -> EvalError {
    EvalError::TypeMismatch {
        expr: e.to_string(),
        expected,
    }
}

/// Python's `//` on `i64`: rounds toward negative infinity. `None` on
/// division by zero and for `i64::MIN // -1` (which overflows). The one
/// definition of integer floor division: the evaluator, the prover's constant
/// folding, the FX interpreter and the reconciler use it.
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    let r = a.wrapping_rem(b);
    Some(if r != 0 && ((r < 0) != (b < 0)) { q - 1 } else { q })
}

/// Python's `%` on `i64`: the result has the divisor's sign. `None` only on
/// division by zero (`i64::MIN % -1` is 0). The one definition of Python
/// modulo, like [`floor_div`].
pub fn python_mod(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    // wrapping_rem only wraps for i64::MIN % -1, whose true remainder is 0.
    let r = a.wrapping_rem(b);
    Some(if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r })
}

/// C's `%` on `i64` (truncating: the result has the dividend's sign). `None`
/// only on division by zero (`i64::MIN % -1` is 0).
pub fn c_mod(a: i64, b: i64) -> Option<i64> {
    (b != 0).then(|| a.wrapping_rem(b))
}

/// The operands of the division `e` of `x` by `y`; a zero divisor is an error.
fn div_operands(e: &SymExpr, x: &SymExpr, y: &SymExpr, b: &mut Lookup<'_>) -> Result<(i64, i64), EvalError> {
    let (x, y) = (int(x, b)?, int(y, b)?);
    if y == 0 {
        return Err(div_zero(e));
    }
    Ok((x, y))
}

fn int(e: &SymExpr, b: &mut Lookup<'_>) -> Result<i64, EvalError> {
    use SymExpr as E;
    match e {
        E::Int(v) => Ok(*v),
        E::Sym(s) => b(s).ok_or_else(|| EvalError::Unbound { symbol: s.clone() }),
        E::Add(terms) => {
            let mut sum: i128 = 0;
            for t in terms {
                // At most 2^64 terms of magnitude 2^63 cannot overflow i128.
                sum += i128::from(int(t, b)?);
            }
            i64::try_from(sum).map_err(|_| overflow(e))
        }
        E::Mul(factors) => {
            let mut product: i128 = 1;
            let mut too_big = false;
            let mut zero = false;
            for f in factors {
                let v = int(f, b)?;
                zero |= v == 0;
                match product.checked_mul(i128::from(v)) {
                    Some(p) => product = p,
                    // Magnitude only grows unless a later factor is zero.
                    None => too_big = true,
                }
            }
            if zero {
                Ok(0)
            } else if too_big {
                Err(overflow(e))
            } else {
                i64::try_from(product).map_err(|_| overflow(e))
            }
        }
        E::FloorDiv(x, y) => {
            let (x, y) = div_operands(e, x, y, b)?;
            floor_div(x, y).ok_or_else(|| overflow(e))
        }
        E::CleanDiv(x, y) => {
            let (x, y) = div_operands(e, x, y, b)?;
            if x.wrapping_rem(y) != 0 {
                return Err(EvalError::InexactDivision {
                    expr: e.to_string(),
                    dividend: x,
                    divisor: y,
                });
            }
            x.checked_div(y).ok_or_else(|| overflow(e))
        }
        E::Mod(x, y) => {
            let (x, y) = div_operands(e, x, y, b)?;
            c_mod(x, y).ok_or_else(|| div_zero(e))
        }
        E::PythonMod(x, y) => {
            let (x, y) = div_operands(e, x, y, b)?;
            python_mod(x, y).ok_or_else(|| div_zero(e))
        }
        E::ModularIndexing(x, d, m) => {
            let (x, d, m) = (int(x, b)?, int(d, b)?, int(m, b)?);
            if d == 0 || m == 0 {
                return Err(div_zero(e));
            }
            let q = floor_div(x, d).ok_or_else(|| overflow(e))?;
            python_mod(q, m).ok_or_else(|| div_zero(e))
        }
        E::Min(args) | E::Max(args) => {
            let is_min = matches!(e, E::Min(_));
            let mut best: Option<i64> = None;
            for a in args {
                let v = int(a, b)?;
                best = Some(match best {
                    None => v,
                    Some(cur) if is_min => cur.min(v),
                    Some(cur) => cur.max(v),
                });
            }
            best.ok_or_else(|| EvalError::NoOperands { expr: e.to_string() })
        }
        E::Pow(base, n) => int(base, b)?.checked_pow(*n).ok_or_else(|| overflow(e)),
        E::Bool(_) | E::Cmp(..) | E::And(_) | E::Or(_) | E::Not(_) => Err(mismatch(e, "integer")),
    }
}

fn boolean(e: &SymExpr, b: &mut Lookup<'_>) -> Result<bool, EvalError> {
    use SymExpr as E;
    match e {
        E::Bool(v) => Ok(*v),
        E::Cmp(op, x, y) => {
            if matches!(op, CmpOp::Eq | CmpOp::Ne) && (x.is_boolean() || y.is_boolean()) {
                let (bx, by) = (boolean(x, b)?, boolean(y, b)?);
                return Ok((bx == by) == (*op == CmpOp::Eq));
            }
            Ok(op.holds(int(x, b)?, int(y, b)?))
        }
        E::And(items) => {
            for i in items {
                if !boolean(i, b)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        E::Or(items) => {
            for i in items {
                if boolean(i, b)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        E::Not(inner) => Ok(!boolean(inner, b)?),
        _ => Err(mismatch(e, "boolean")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_and_python_mod_match_python() {
        // (a, b, a // b, a % b) as Python computes them.
        let table = [
            (7, 2, 3, 1),
            (-7, 2, -4, 1),
            (7, -2, -4, -1),
            (-7, -2, 3, -1),
            (i64::MIN, -2, 1 << 62, 0),
            (i64::MIN, 3, -3074457345618258603, 1),
        ];
        for (a, b, q, r) in table {
            assert_eq!(floor_div(a, b), Some(q), "{a} // {b}");
            assert_eq!(python_mod(a, b), Some(r), "{a} % {b}");
        }
        assert_eq!(floor_div(i64::MIN, -1), None);
        assert_eq!(python_mod(i64::MIN, -1), Some(0));
        assert_eq!(c_mod(-7, 2), Some(-1));
        assert_eq!(c_mod(i64::MIN, -1), Some(0));
        assert_eq!((floor_div(1, 0), python_mod(1, 0), c_mod(1, 0)), (None, None, None));
    }
}
