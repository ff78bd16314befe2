//! Checked 64-bit evaluation.
use super::{SymExpr, Symbol};

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
}

/// Evaluates an integer expression.
pub fn eval_int(e: &SymExpr, b: &Bindings) -> Result<i64, EvalError> {
    match e {
        SymExpr::Int(v) => Ok(*v),
        SymExpr::Sym(s) => b.get(s).copied().ok_or_else(|| EvalError::Unbound { symbol: s.clone() }),
        _ => Err(EvalError::TypeMismatch { expr: e.to_string(), expected: "integer" }),
    }
}

/// Evaluates a boolean expression.
pub fn eval_bool(e: &SymExpr, _b: &Bindings) -> Result<bool, EvalError> {
    match e {
        SymExpr::Bool(v) => Ok(*v),
        _ => Err(EvalError::TypeMismatch { expr: e.to_string(), expected: "boolean" }),
    }
}
