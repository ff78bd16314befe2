//! Back ends. Each takes a validated [`crate::ir::ProgramInfo`] and has the same
//! surface: `Options`, an `Error` type, a `Writer` over `fmt::Write`, and a
//! `write_string` entry point.

pub mod cpp;
pub mod fx;
pub mod launches;
pub mod python;
pub mod target;

pub use target::Target;
