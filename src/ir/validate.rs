//! The validator: checks a [`Program`] and returns [`ProgramInfo`], the only
//! input the lowerings accept.
//!
//! (Skeleton: the full rule set is being written.)

use super::program::Program;
use super::types::GraphName;

/// A validated program plus what the lowerings need to know about it.
#[derive(Debug)]
pub struct ProgramInfo<'a> {
    program: &'a Program,
}

impl<'a> ProgramInfo<'a> {
    /// The validated program.
    pub fn program(&self) -> &'a Program {
        self.program
    }
}

/// Why a program is invalid. Names the graph, the line (index and text form)
/// and the buffer, symbol or kernel involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    /// The graph (`None` = main).
    pub graph: Option<GraphName>,
    /// Index of the offending line in its graph, if a line is at fault.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Checks `program`.
pub fn validate(program: &Program) -> Result<ProgramInfo<'_>, ValidationError> {
    Ok(ProgramInfo { program })
}
