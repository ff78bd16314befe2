//! `wrapir check --dag`: the dependency DAG of a validated program's main
//! graph (`wrapir::exec::dag`), printed with each edge's reason.

use super::*;

/// Lowers the validated program to FX, builds its DAG and prints it.
pub(super) fn print_dag(info: &ir::ProgramInfo<'_>) -> Result<ExitCode> {
    let graph = wrapir::lower::fx::lower(info, &Default::default()).context("lowering to FX for the DAG")?;
    let dag = wrapir::exec::dag::Dag::build(&graph, &info.program().kernels).context("building the DAG")?;
    write_output(None, &dag.to_string())?;
    Ok(ExitCode::SUCCESS)
}
