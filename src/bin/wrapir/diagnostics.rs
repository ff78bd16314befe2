//! Validation errors for the terminal: each points at the file it came
//! from. A `.wir` program's errors carry the file line and column of the
//! offending line (or graph header) and show that line; a JSON program's
//! carry the JSON path of the line (`main.lines[9]`,
//! `subgraphs.body.lines[2]`).

use wrapir::bundle::Bundle;
use wrapir::ir::{Location, ValidationErrors};
use wrapir::text::{SourceMap, SourcePosition};

/// Where the program's text came from, for pointing at it.
enum Source<'a> {
    /// The text form, with the position of every graph and line.
    Text { text: &'a str, map: SourceMap },
    /// JSON: positions are JSON paths.
    Json,
}

/// Most source lines shown under errors (later errors name their position only).
const MAX_SNIPPETS: usize = 50;

/// `errors` of `bundle`'s program, one per paragraph: the validator's line
/// (`error in graph main, line 9 ...`), then where it is in the file. An
/// error at the same place as the one before it adds nothing (the place was
/// just shown), so many errors on one line cost one snippet.
pub(crate) fn render_validation_errors(bundle: &Bundle, errors: &ValidationErrors) -> String {
    let text = bundle.source();
    let source = if text.trim_start().starts_with('{') || bundle.name().ends_with(".json") {
        Source::Json
    } else {
        // The text parsed when the bundle opened, so it parses again; the
        // map is only for pointing, so a failure just leaves the errors bare.
        match wrapir::text::parse_with_source_map(text, bundle.limits()) {
            Ok((_, map)) => Source::Text { text, map },
            Err(_) => return errors.to_string(),
        }
    };
    let name = bundle.name();
    let mut out = String::new();
    let mut snippets = 0usize;
    let mut previous: Option<&Location> = None;
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out += &e.to_string();
        let repeated = previous == Some(&e.location);
        previous = Some(&e.location);
        if repeated {
            continue;
        }
        match &source {
            Source::Text { text, map } => {
                if let Some(at) = map.position(&e.location) {
                    if snippets < MAX_SNIPPETS {
                        snippets += 1;
                        out += &snippet(name, text, at);
                    } else {
                        out += &format!("\n  --> {name}:{}:{}", at.line, at.column);
                    }
                }
            }
            Source::Json => {
                if let Some(path) = json_path(&e.location) {
                    out += &format!("\n  --> {name}: {path}");
                }
            }
        }
    }
    out
}

/// The JSON path of a location in a program's JSON form (`None` for the
/// program-wide tables).
fn json_path(location: &Location) -> Option<String> {
    let graph = |g: &wrapir::ir::GraphName| {
        if g.as_str() == wrapir::ir::MAIN_GRAPH {
            "main".to_string()
        } else {
            format!("subgraphs.{g}")
        }
    };
    match location {
        Location::Program => None,
        Location::Graph { graph: g } => Some(graph(g)),
        Location::Line { graph: g, index, .. } => Some(format!("{}.lines[{index}]", graph(g))),
    }
}

/// Longest source line shown whole under an error.
const MAX_SHOWN_COLUMNS: usize = 200;

/// `--> FILE:LINE:COLUMN` and the line with a caret under the column, as
/// compilers show them.
fn snippet(name: &str, text: &str, at: SourcePosition) -> String {
    let mut out = format!("\n  --> {name}:{}:{}", at.line, at.column);
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

    #[test]
    fn snippets_point_at_the_column() {
        let text = "wrapir 1\n\ngraph main() -> () {\n  free buf0\n}\n";
        let s = snippet("p.wir", text, SourcePosition { line: 4, column: 3 });
        assert_eq!(s, "\n  --> p.wir:4:3\n   |\n 4 |   free buf0\n   |   ^");
    }

    #[test]
    fn json_paths_name_the_graph_and_line() {
        let main = wrapir::ir::GraphName::new("main");
        let body = wrapir::ir::GraphName::new("body");
        let line = |graph: &wrapir::ir::GraphName, index| Location::Line {
            graph: graph.clone(),
            index,
            text: String::new(),
        };
        assert_eq!(json_path(&line(&main, 9)).as_deref(), Some("main.lines[9]"));
        assert_eq!(json_path(&line(&body, 2)).as_deref(), Some("subgraphs.body.lines[2]"));
        assert_eq!(json_path(&Location::Program), None);
    }
}
