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
/// so a valid program stays valid). [`insert_guards_in`] does the same in place.
pub fn insert_guards(program: &Program, report: &CheckReport) -> Program {
    let mut out = program.clone();
    insert_guards_in(&mut out, report);
    out
}

/// Whether [`insert_guards`] would change the program: some launch of
/// `report` has a guard.
pub fn needs_guards(report: &CheckReport) -> bool {
    report
        .entries
        .iter()
        .any(|e| e.record.as_ref().is_some_and(|r| !r.guards.is_empty()))
}

/// [`insert_guards`] on `program` itself: each graph that gets guards is
/// rebuilt once, so the work is linear in the program's lines (splicing
/// each launch's guards in one by one moved every later line each time).
pub fn insert_guards_in(program: &mut Program, report: &CheckReport) {
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
    for (graph, by_line) in inserts {
        let target = if graph.as_str() == MAIN_GRAPH && !program.subgraphs.contains_key(&graph) {
            &mut program.main
        } else {
            match program.subgraphs.get_mut(&graph) {
                Some(g) => g,
                None => continue,
            }
        };
        let added: usize = by_line.values().map(Vec::len).sum();
        if added == 0 {
            continue;
        }
        let old = std::mem::take(&mut target.lines);
        let mut lines = Vec::with_capacity(old.len() + added);
        let mut pending = by_line.into_iter().peekable();
        for (index, line) in old.into_iter().enumerate() {
            while let Some((_, asserts)) = pending.next_if(|(at, _)| *at <= index) {
                lines.extend(asserts);
            }
            lines.push(line);
        }
        // Indices past the end go last, as before the first line past it.
        for (_, asserts) in pending {
            lines.extend(asserts);
        }
        target.lines = lines;
    }
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
    let report = reconciled(&program, limits, options)?;
    let mut program = program;
    insert_guards_in(&mut program, &report);
    Ok(program)
}

/// The reconciliation [`guarded`] acts on: `program` validated within
/// `limits` and every Triton launch reconciled under `options` (verdicts
/// and guards only, no claim text); an error when the program is invalid
/// or a launch fails. With [`needs_guards`] and [`insert_guards_in`], a
/// caller that holds the program elsewhere copies it only when some launch
/// needs a guard.
pub fn reconciled(
    program: &Program,
    limits: &crate::Limits,
    options: &super::Options,
) -> Result<CheckReport, GuardError> {
    let info = crate::ir::validate_with_limits(program, limits).map_err(GuardError::Invalid)?;
    // Only verdicts and guards are used: no claim text.
    let options = super::Options {
        explain: false,
        ..options.clone()
    };
    let report = super::check_program(&info, &options);
    if report.totals.failed > 0 {
        return Err(GuardError::Reconcile(report.render(false)));
    }
    Ok(report)
}
