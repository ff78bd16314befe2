//! Where something is in a program: the one location type of the validator's
//! diagnostics and of every back end's errors.

use super::{GraphName, Line};
use std::fmt;

/// Where an error is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// The program-wide tables (symbols, kernels, constants, graph names).
    Program,
    /// A graph's header: inputs, buffer table, outputs, or the graph as a whole.
    Graph {
        /// The graph ([`super::MAIN_GRAPH`] for the main graph).
        graph: GraphName,
    },
    /// One line.
    Line {
        /// The graph ([`super::MAIN_GRAPH`] for the main graph).
        graph: GraphName,
        /// The line's index in [`crate::ir::Graph::lines`], from 0.
        index: usize,
        /// The line's text form ([`line_text`]).
        text: String,
    },
}

impl Location {
    /// Line `index` of `graph`, quoting `line`'s text form ([`line_text`]).
    pub fn line(graph: &GraphName, index: usize, line: &Line) -> Location {
        Location::Line {
            graph: graph.clone(),
            index,
            text: line_text(line),
        }
    }

    /// The header of `graph` (`None`: the main graph): its inputs, table or outputs.
    pub fn header(graph: Option<&GraphName>) -> Location {
        Location::Graph {
            graph: graph.cloned().unwrap_or_else(|| GraphName::new(super::MAIN_GRAPH)),
        }
    }

    /// Line `index` of `graph` in `program` (`None`: the main graph), quoting
    /// it when it exists; the graph itself when no (existing) line is named.
    pub fn in_program(program: &super::Program, graph: Option<&GraphName>, index: Option<usize>) -> Location {
        let line = index.and_then(|i| Some((i, program.graph(graph)?.lines.get(i)?)));
        match line {
            Some((index, line)) => LineAt { graph, index, line }.location(),
            None => Location::header(graph),
        }
    }

    /// The graph named, if any.
    pub fn graph(&self) -> Option<&GraphName> {
        match self {
            Location::Program => None,
            Location::Graph { graph } | Location::Line { graph, .. } => Some(graph),
        }
    }

    /// The line index, if a line is named.
    pub fn index(&self) -> Option<usize> {
        match self {
            Location::Line { index, .. } => Some(*index),
            _ => None,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Program => f.write_str("program"),
            Location::Graph { graph } => write!(f, "graph {graph}"),
            Location::Line { graph, index, text } => write!(f, "graph {graph}, line {index} `{text}`"),
        }
    }
}

/// A line of a graph, borrowed: what a back end holds while it lowers the
/// line, made into a [`Location`] (quoting the line) only when an error is.
#[derive(Clone, Copy, Debug)]
pub struct LineAt<'a> {
    /// The graph (`None`: the main graph).
    pub graph: Option<&'a GraphName>,
    /// The line's index in its graph.
    pub index: usize,
    /// The line.
    pub line: &'a Line,
}

impl LineAt<'_> {
    /// The owned location.
    pub fn location(&self) -> Location {
        Location::Line {
            graph: self.graph_name(),
            index: self.index,
            text: line_text(self.line),
        }
    }

    /// The graph's name ([`super::MAIN_GRAPH`] for the main graph).
    pub fn graph_name(&self) -> GraphName {
        self.graph.cloned().unwrap_or_else(|| GraphName::new(super::MAIN_GRAPH))
    }
}

impl From<LineAt<'_>> for Location {
    fn from(at: LineAt<'_>) -> Location {
        at.location()
    }
}

impl From<&LineAt<'_>> for Location {
    fn from(at: &LineAt<'_>) -> Location {
        at.location()
    }
}

/// The text form of a line, as diagnostics quote it.
/// Longer lines are cut (with `…`) so that diagnostics stay bounded.
pub fn line_text(line: &Line) -> String {
    const MAX: usize = 240;
    // `Line`'s Display is the text form (implemented by `crate::text`).
    let mut text = line.to_string();
    if text.len() > MAX {
        let mut cut = MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}
