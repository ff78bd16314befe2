//! The `.wir` text form: [`print`] and [`parse`] round-trip. Grammar: `docs/TEXT_FORMAT.md`.
//!
//! `parse(&print(p)) == p` for every program whose names are identifiers and
//! whose expressions are in canonical form (what [`crate::sym::parse`] returns
//! for their printed text), and `print(&parse(t)?) == t` for canonical text.
use crate::ir::{Line, Location, Program};

mod cursor;
mod diagnostics;
mod parse;
mod print;

pub use diagnostics::{is_json_program, render_validation_errors};

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
    parse::program(text, &crate::Limits::default()).map(|(program, _)| program)
}

/// Parses the text form; nesting deeper than [`crate::Limits::max_text_depth`]
/// (list arguments, `device` blocks) is an error naming the limit.
pub fn parse_with_limits(text: &str, limits: &crate::Limits) -> Result<Program, ParseError> {
    parse::program(text, limits).map(|(program, _)| program)
}

/// [`parse_with_limits`], with where in `text` each graph and line was read,
/// so that errors found later (validation, runs) can point at the file.
pub fn parse_with_source_map(text: &str, limits: &crate::Limits) -> Result<(Program, SourceMap), ParseError> {
    parse::program(text, limits)
}

/// A 1-based line and character column of a `.wir` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourcePosition {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
}

/// Where one graph of a `.wir` file was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphSource {
    /// The `graph` keyword of its header.
    pub header: SourcePosition,
    /// Each of [`crate::ir::Graph::lines`], by index: the line's keyword (a
    /// `}` that closes a `device` block for its `ExitDeviceContext`).
    pub lines: Vec<SourcePosition>,
}

impl Default for SourcePosition {
    fn default() -> Self {
        SourcePosition { line: 1, column: 1 }
    }
}

/// Where the graphs and lines of a parsed `.wir` file are
/// ([`parse_with_source_map`]): what turns a [`Location`] into a file position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    /// By graph name (`main` first).
    pub graphs: indexmap::IndexMap<String, GraphSource>,
    /// The keyword of each `symbol`, `constant` and `kernel` declaration, by
    /// (that keyword, the declared name).
    pub declarations: indexmap::IndexMap<(&'static str, String), SourcePosition>,
}

impl SourceMap {
    /// The file position of `location`: a line's keyword, a graph's header;
    /// `None` for the program-wide tables and for graphs or lines not in the file.
    pub fn position(&self, location: &Location) -> Option<SourcePosition> {
        match location {
            Location::Program => None,
            Location::Graph { graph } => self.graphs.get(graph.as_str()).map(|g| g.header),
            Location::Line { graph, index, .. } => self.graphs.get(graph.as_str())?.lines.get(*index).copied(),
        }
    }

    /// The file position of a validation error: its line or graph header;
    /// for an error in the program's tables, the declaration it is about
    /// (a subgraph's name: its header).
    pub fn error_position(&self, error: &crate::ir::ValidationError) -> Option<SourcePosition> {
        if !matches!(error.location, Location::Program) {
            return self.position(&error.location);
        }
        let (table, name) = error.kind.table_entry()?;
        if table == "graph" {
            return self.graphs.get(name).map(|g| g.header);
        }
        self.declarations.get(&(table, name.to_string())).copied()
    }
}
