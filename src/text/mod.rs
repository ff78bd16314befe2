//! The `.wir` text form: [`print`] and [`parse`] round-trip. Grammar: `docs/TEXT_FORMAT.md`.
//!
//! `parse(&print(p)) == p` for every program whose names are identifiers and
//! whose expressions are in canonical form (what [`crate::sym::parse`] returns
//! for their printed text), and `print(&parse(t)?) == t` for canonical text.
use crate::ir::{Line, Program};

mod cursor;
mod parse;
mod print;

/// A syntax error in a `.wir` file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What was expected or found.
    pub message: String,
}

/// Prints the canonical text form. Never fails: unbalanced device guards are
/// written in their bare forms (`enter_device N`, `exit_device`).
pub fn print(program: &Program) -> String {
    print::program(program)
}

/// The one-line text form of a single line, without indentation
/// (`EnterDeviceContext` is `device 0 {`, `ExitDeviceContext` is `}`).
/// Bare identifiers are not checked against a buffer table.
pub fn print_line(line: &Line) -> String {
    print::line_text(line, None)
}

/// A line's text form ([`print_line`]): what diagnostics quote. Implemented
/// here, where the text form lives, so that `ir` needs no import of `text`.
impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&print_line(self))
    }
}

/// Parses the text form (within [`crate::Limits::default`]).
pub fn parse(text: &str) -> Result<Program, ParseError> {
    parse::program(text, &crate::Limits::default())
}

/// Parses the text form; nesting deeper than [`crate::Limits::max_text_depth`]
/// (list arguments, `device` blocks) is an error naming the limit.
pub fn parse_with_limits(text: &str, limits: &crate::Limits) -> Result<Program, ParseError> {
    parse::program(text, limits)
}
