//! Triton launches as the text lowerings print them.
//!
//! The Python and C++ writers can record, at the point where they print a
//! Triton launch, the values they print for it ([`PrintedLaunch`]).
//! Translation validation ([`crate::reconcile`]) proves those values equal to
//! the canonical launch. Recording is off unless asked for
//! (`write_string_with_launches` of each lowering); plain `write_string` does
//! no extra work.

use crate::ir::{ArgValue, GraphName, KernelName};
use crate::sym::SymExpr;

/// One Triton launch as a lowering printed it.
#[derive(Clone, Debug, PartialEq)]
pub struct PrintedLaunch {
    /// The launched kernel.
    pub kernel: KernelName,
    /// The graph of the call line it lowers ([`crate::ir::MAIN_GRAPH`] for main).
    pub graph: GraphName,
    /// The call line's index in that graph.
    pub line: usize,
    /// The printed arguments, in printed order.
    pub args: Vec<PrintedArg>,
    /// Grid x, y, z as printed, over the program's symbols; `None` when the
    /// lowering does not print the grid (Python: the launcher computes it).
    pub grid: Option<[SymExpr; 3]>,
    /// The trailing scratch pointers the lowering passes itself, in order;
    /// `None` when it leaves them to the launcher.
    pub scratch: Option<Vec<PrintedScratch>>,
    /// Ranges printed values must lie in for the printed text to compute what
    /// [`PrintedLaunch::grid`] and [`PrintedLaunch::scratch`] say (C++: a
    /// truncating `/` equals `//` on a non-negative numerator; `uint32_t`
    /// grid variables hold values up to 2^32 - 1).
    pub ranges: Vec<PrintedRange>,
}

/// One printed argument.
#[derive(Clone, Debug, PartialEq)]
pub struct PrintedArg {
    /// The parameter it is passed to: its name when the lowering passes it by
    /// name or knows the parameter (C++), `None` for a positional Python argument.
    pub param: Option<String>,
    /// The printed value (a buffer by its IR name).
    pub value: ArgValue,
}

/// Which scratch buffer a trailing pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchPointer {
    /// `global_scratch`.
    Global,
    /// `profile_scratch`.
    Profile,
}

/// A scratch pointer the lowering passes.
#[derive(Clone, Debug, PartialEq)]
pub struct PrintedScratch {
    /// Which scratch.
    pub pointer: ScratchPointer,
    /// Bytes allocated; `None` for a null pointer.
    pub bytes: Option<SymExpr>,
}

/// A printed integer value that must lie in `[lo, hi]`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrintedRange {
    /// What the value is (`grid[0]`, `numerator of grid[0]`).
    pub what: String,
    /// The value, over the program's symbols.
    pub value: SymExpr,
    /// Smallest allowed value.
    pub lo: i64,
    /// Largest allowed value.
    pub hi: i64,
}
