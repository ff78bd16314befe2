//! Validation errors that point at the file a program was read from. A
//! `.wir` program's errors carry the file line and column of the offending
//! line (a graph's header, a `symbol`/`constant`/`kernel` declaration) and
//! show that line, and the lines their messages mention are file lines; a
//! JSON program's carry JSON paths (`main.lines[9]`,
//! `subgraphs.body.lines[2]`, `symbols.s0`).

use super::{SourceMap, SourcePosition};
use crate::ir::{GraphName, Location, ValidationError, ValidationErrors, MAIN_GRAPH};

/// Where a program's text came from, for pointing at it.
enum Source<'a> {
    /// The text form, with the position of every graph, line and declaration.
    Text { text: &'a str, map: SourceMap },
    /// JSON: positions are JSON paths.
    Json,
}

/// Most source lines shown under errors (later errors name their position only).
const MAX_SNIPPETS: usize = 50;

/// Longest source line shown whole under an error.
const MAX_SHOWN_COLUMNS: usize = 200;

/// `true` when `text` (read from `file`) is a program's JSON form rather than
/// its text form.
pub fn is_json_program(file: &str, text: &str) -> bool {
    text.trim_start().starts_with('{') || file.ends_with(".json")
}

/// `errors` of the program read from `file` (whose content is `text`), one
/// per paragraph: `error in graph main: MESSAGE`, then `--> FILE:LINE:COLUMN`
/// and the line with a caret under the column (`.wir`) or `--> FILE: PATH`
/// (JSON). Lines a message mentions are named the same way (`freed at line
/// 61`, `` freed at `main.lines[9]` ``). An error at the same place as the one
/// before it names the place without showing it again, and at most
/// [`MAX_SNIPPETS`] lines are shown, so many errors stay bounded. A `.wir`
/// text that no longer parses (within `limits`) gives the errors' own
/// `Display`.
pub fn render_validation_errors(file: &str, text: &str, errors: &ValidationErrors, limits: &crate::Limits) -> String {
    let source = if is_json_program(file, text) {
        Source::Json
    } else {
        match super::parse_with_source_map(text, limits) {
            Ok((_, map)) => Source::Text { text, map },
            Err(_) => return errors.to_string(),
        }
    };
    let mut out = String::new();
    let mut snippets = 0usize;
    let mut previous: Option<&Location> = None;
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let repeated = previous == Some(&e.location) && !matches!(e.location, Location::Program);
        previous = Some(&e.location);
        out += &format!("error in {}: ", place(e));
        match &source {
            Source::Text { text, map } => {
                let file_line = |g: &GraphName, index: usize| {
                    let at = map.graphs.get(g.as_str())?.lines.get(index)?;
                    Some(format!("line {}", at.line))
                };
                out += &e.kind.naming_lines(e.graph(), &file_line);
                match map.error_position(e) {
                    Some(at) if !repeated && snippets < MAX_SNIPPETS => {
                        snippets += 1;
                        out += &snippet(file, text, at);
                    }
                    Some(at) => out += &format!("\n  --> {file}:{}:{}", at.line, at.column),
                    None => {}
                }
            }
            Source::Json => {
                let path = |g: &GraphName, index: usize| Some(format!("`{}`", line_path(g, index)));
                out += &e.kind.naming_lines(e.graph(), &path);
                if let Some(path) = json_path(e) {
                    out += &format!("\n  --> {file}: {path}");
                }
            }
        }
    }
    out
}

/// What an error is in, without the line (its position follows):
/// `graph main`, `program`.
fn place(e: &ValidationError) -> String {
    match e.graph() {
        Some(g) => format!("graph {g}"),
        None => "program".to_string(),
    }
}

/// A graph's JSON path: `main`, `subgraphs.NAME`.
fn graph_path(g: &GraphName) -> String {
    if g.as_str() == MAIN_GRAPH {
        "main".to_string()
    } else {
        format!("subgraphs.{g}")
    }
}

/// A line's JSON path: `main.lines[9]`.
fn line_path(g: &GraphName, index: usize) -> String {
    format!("{}.lines[{index}]", graph_path(g))
}

/// The JSON path of an error: its line or graph; for an error in the
/// program's tables, the entry it is about (`symbols.s0`, `kernels.k`,
/// `constants.c`, `subgraphs.g`). `None` for errors about no one place.
fn json_path(e: &ValidationError) -> Option<String> {
    match &e.location {
        Location::Line { graph, index, .. } => Some(line_path(graph, *index)),
        Location::Graph { graph } => Some(graph_path(graph)),
        Location::Program => {
            let (table, name) = e.kind.table_entry()?;
            let table = match table {
                "symbol" => "symbols",
                "kernel" => "kernels",
                "constant" => "constants",
                _ => "subgraphs",
            };
            Some(format!("{table}.{name}"))
        }
    }
}

/// `--> FILE:LINE:COLUMN` and the line with a caret under the column, as
/// compilers show them.
fn snippet(file: &str, text: &str, at: SourcePosition) -> String {
    let mut out = format!("\n  --> {file}:{}:{}", at.line, at.column);
    let Some(line) = text.split('\n').nth(at.line.saturating_sub(1)) else {
        return out;
    };
    let line = line.trim_end();
    let shown: String = line.chars().take(MAX_SHOWN_COLUMNS).collect();
    let more = if line.chars().count() > MAX_SHOWN_COLUMNS {
        " ..."
    } else {
        ""
    };
    let number = at.line.to_string();
    let pad = " ".repeat(number.len());
    // Tabs keep their width in the caret line.
    let lead: String = line
        .chars()
        .take(at.column.saturating_sub(1).min(MAX_SHOWN_COLUMNS))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    out += &format!("\n {pad} |\n {number} | {shown}{more}\n {pad} | {lead}^");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ValidationErrorKind;

    #[test]
    fn snippets_point_at_the_column() {
        let text = "wrapir 1\n\ngraph main() -> () {\n  free buf0\n}\n";
        let s = snippet("p.wir", text, SourcePosition { line: 4, column: 3 });
        assert_eq!(s, "\n  --> p.wir:4:3\n   |\n 4 |   free buf0\n   |   ^");
    }

    #[test]
    fn json_paths_name_the_graph_line_and_table_entry() {
        let main = GraphName::new("main");
        let body = GraphName::new("body");
        let at = |location| ValidationError {
            location,
            kind: ValidationErrorKind::ReservedGraphName,
        };
        let line = |graph: &GraphName, index| Location::Line {
            graph: graph.clone(),
            index,
            text: String::new(),
        };
        assert_eq!(json_path(&at(line(&main, 9))).as_deref(), Some("main.lines[9]"));
        assert_eq!(
            json_path(&at(line(&body, 2))).as_deref(),
            Some("subgraphs.body.lines[2]")
        );
        assert_eq!(json_path(&at(Location::Program)), None);
        let symbol = ValidationError {
            location: Location::Program,
            kind: ValidationErrorKind::BackedSymbolNeverBound {
                symbol: crate::sym::Symbol::new("s0"),
            },
        };
        assert_eq!(json_path(&symbol).as_deref(), Some("symbols.s0"));
    }
}
