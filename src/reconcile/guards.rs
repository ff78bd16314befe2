//! Run-time guards: what reconciliation could not prove becomes a
//! `RuntimeAssert` line in front of the launch, so every back end (Python,
//! C++, FX) and the interpreter check it when the program runs.

use super::check::CheckReport;
use crate::ir::{GraphName, Line, Program, MAIN_GRAPH};
use std::collections::BTreeMap;

/// Returns `program` with one `RuntimeAssert` inserted right before each
/// Triton launch for every [`super::Guard`] its reconciliation produced (in
/// `report`, which must come from this program). Identical guards of one
/// launch are inserted once. The result is a new program; validate it again
/// before lowering (the inserted asserts only use values the launch itself uses,
/// so a valid program stays valid).
pub fn insert_guards(program: &Program, report: &CheckReport) -> Program {
    // graph -> line index -> asserts to insert before that line
    let mut inserts: BTreeMap<GraphName, BTreeMap<usize, Vec<Line>>> = BTreeMap::new();
    for entry in &report.entries {
        let Some(record) = &entry.record else { continue };
        let at = inserts
            .entry(entry.graph.clone())
            .or_default()
            .entry(entry.line)
            .or_default();
        for guard in &record.guards {
            let line = Line::RuntimeAssert {
                cond: guard.cond.clone(),
                message: format!("{}: {}", entry.kernel, guard.message),
                node: None,
            };
            if !at.contains(&line) {
                at.push(line);
            }
        }
    }
    let mut out = program.clone();
    for (graph, by_line) in inserts {
        let target = if graph.as_str() == MAIN_GRAPH && !out.subgraphs.contains_key(&graph) {
            &mut out.main
        } else {
            match out.subgraphs.get_mut(&graph) {
                Some(g) => g,
                None => continue,
            }
        };
        // From the last line back, so earlier indices stay valid.
        for (index, asserts) in by_line.into_iter().rev() {
            let index = index.min(target.lines.len());
            target.lines.splice(index..index, asserts);
        }
    }
    out
}

/// Why [`guarded`] could not guard a program.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The program is invalid.
    #[error("the program is invalid:\n{0}")]
    Invalid(crate::ir::ValidationErrors),
    /// A launch does not reconcile with its kernel (the report, rendered).
    #[error("launch reconciliation failed:\n{0}")]
    Reconcile(String),
}

/// `program` with the run-time guards its launches need: validated within
/// `limits`, every Triton launch reconciled under `options`, then
/// [`insert_guards`]. The policy `wrapir lower`, `run` and `bench` apply
/// unless told not to.
pub fn guarded(program: Program, limits: &crate::Limits, options: &super::Options) -> Result<Program, GuardError> {
    let info = crate::ir::validate_with_limits(&program, limits).map_err(GuardError::Invalid)?;
    // Only verdicts and guards are used: no claim text.
    let options = super::Options {
        explain: false,
        ..options.clone()
    };
    let report = super::check_program(&info, &options);
    if report.totals.failed > 0 {
        return Err(GuardError::Reconcile(report.render(false)));
    }
    Ok(insert_guards(&program, &report))
}
