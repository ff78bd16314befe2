//! # wrapir
//!
//! PyTorch Inductor's *wrapper code* as typed Rust data.
//!
//! ```text
//!   .json / .wir ──parse──▶ ir::Program ──validate──▶ ir::ProgramInfo ──lower──▶ Python text
//! ```
//!
//! * [`ir`]: the typed Wrapper IR, its builder and validator.
//! * [`sym`]: symbolic size expressions: parser, Python and C++ printers, checked evaluation.
//! * [`text`]: the `.wir` text form (printer and parser that round-trip).
//! * [`lower`]: back ends that turn a validated program into wrapper code.
#![warn(missing_docs)]

pub mod exec;
pub mod fx;
pub mod ir;
pub mod lower;
pub mod reconcile;
#[cfg(feature = "insta")]
pub mod snapshot;
pub mod sym;
pub mod text;
