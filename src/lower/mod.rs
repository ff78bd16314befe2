//! Back ends. Each takes a validated [`crate::ir::ProgramInfo`] and has the same
//! surface: `Options`, a `Writer` over `fmt::Write` (the text back ends' is
//! this module's [`Writer`] with their options), and a `write_string` entry
//! point; all fail with the one [`Error`] (where, and an [`ErrorKind`]).

pub mod cpp;
mod error;
pub mod fx;
pub mod launches;
pub mod python;
pub mod target;

pub use error::{Error, ErrorKind};
pub use target::Target;

use crate::ir::ProgramInfo;
use launches::PrintedLaunch;
use std::fmt;

/// What a text back end's [`Writer`] runs: implemented by the back end's
/// options ([`cpp::Options`], [`python::Options`]).
pub trait TextLowering: Clone {
    /// The back end's error.
    type Error: From<fmt::Error>;
    /// Lowers `info`'s program and appends its text to `out`.
    fn write_to<W: fmt::Write>(&self, info: &ProgramInfo<'_>, out: &mut W) -> Result<(), Self::Error>;
    /// [`TextLowering::write_to`], and returns every Triton launch as printed.
    fn write_recording_launches_to<W: fmt::Write>(
        &self,
        info: &ProgramInfo<'_>,
        out: &mut W,
    ) -> Result<Vec<PrintedLaunch>, Self::Error>;
}

/// Writes validated programs as a text back end's code into `W`, with that
/// back end's options `O` (`cpp::Writer<W>`, `python::Writer<W>`).
#[derive(Debug)]
pub struct Writer<W, O> {
    out: W,
    options: O,
}

impl<W: fmt::Write, O: TextLowering> Writer<W, O> {
    /// A writer into `out`.
    pub fn new(out: W, options: O) -> Self {
        Writer { out, options }
    }

    /// Lowers `info`'s program and appends its text to the output
    /// ([`TextLowering::write_to`]).
    pub fn write(&mut self, info: &ProgramInfo<'_>) -> Result<(), O::Error> {
        self.options.write_to(info, &mut self.out)
    }

    /// [`Writer::write`], and returns every Triton launch as printed
    /// ([`TextLowering::write_recording_launches_to`]: what each back end
    /// records).
    pub fn write_recording_launches(&mut self, info: &ProgramInfo<'_>) -> Result<Vec<PrintedLaunch>, O::Error> {
        self.options.write_recording_launches_to(info, &mut self.out)
    }

    /// The output.
    pub fn finish(self) -> W {
        self.out
    }
}

/// A back end's text of `info`'s program and every Triton launch as printed
/// ([`Writer::write_recording_launches`] into a new string).
fn write_string_with_launches<O: TextLowering>(
    info: &ProgramInfo<'_>,
    options: &O,
) -> Result<(String, Vec<PrintedLaunch>), O::Error> {
    let mut text = String::new();
    let launches = options.write_recording_launches_to(info, &mut text)?;
    Ok((text, launches))
}
