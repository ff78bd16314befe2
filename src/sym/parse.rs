//! Parser for Inductor's Python-printed expressions.
use super::SymExpr;

/// A syntax error in an expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse expression `{text}` at byte {offset}: {message}")]
pub struct ParseError {
    /// The whole input.
    pub text: String,
    /// Byte offset of the problem.
    pub offset: usize,
    /// What was expected or found.
    pub message: String,
}

/// Parses one expression.
pub fn parse(text: &str) -> Result<SymExpr, ParseError> {
    let t = text.trim();
    if let Ok(v) = t.parse::<i64>() {
        return Ok(SymExpr::Int(v));
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(SymExpr::sym(t));
    }
    Err(ParseError { text: text.into(), offset: 0, message: "unsupported (stub)".into() })
}
