//! Python lowering: the module Inductor 2.11's Python wrapper prints.
use crate::ir::ProgramInfo;

/// Options.
#[derive(Clone, Debug, Default)]
pub struct Options {}

/// Errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

/// Lowers to a string.
pub fn write_string(_info: &ProgramInfo<'_>, _options: &Options) -> Result<String, Error> {
    Err(Error("stub".into()))
}
