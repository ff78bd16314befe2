//! The one error type of every lowering (Python, C++ and FX): where
//! ([`Error::at`], an [`ir::Location`](crate::ir::Location)) and what
//! ([`ErrorKind`]). A kind is something a validated program may still hold
//! that the back end cannot write: what validation rules out is not a kind
//! here (back ends take it from `ProgramInfo` infallibly), so a lowering
//! fails only on input it genuinely cannot express.

use crate::ir::{BufName, KernelName, Location};
use crate::sym::{EvalError, Symbol};
use std::fmt;

/// Why a back end could not lower a program: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Where: the line (graph, index, text), a graph's header or the
    /// program; `None` where the kind names its place itself (a kernel's
    /// source, the benchmark harness) or has none (the output sink).
    pub at: Option<Location>,
    /// What went wrong.
    pub kind: ErrorKind,
}

impl Error {
    /// An error of `kind` at `at`.
    pub fn new(at: impl Into<Location>, kind: ErrorKind) -> Error {
        Error {
            at: Some(at.into()),
            kind,
        }
    }

    /// An error of `kind` that names its place itself.
    pub fn of(kind: ErrorKind) -> Error {
        Error { at: None, kind }
    }

    /// [`ErrorKind::Invalid`] at `at`.
    pub fn invalid(at: impl Into<Location>, message: impl Into<String>) -> Error {
        Error::new(at, ErrorKind::Invalid(message.into()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "{at}: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

/// No `source`: every kind's message includes its cause's (a source too
/// would print it twice in a chain of causes, as `wrapir` prints errors).
impl std::error::Error for Error {}

impl From<fmt::Error> for Error {
    fn from(_: fmt::Error) -> Self {
        Error::of(ErrorKind::Format)
    }
}

/// What a lowering could not do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// Python: host kernels are supplied by an embedder and have no Python form.
    #[error("kernel `{kernel}` is a host kernel, which has no Python wrapper form")]
    HostKernel {
        /// The kernel.
        kernel: KernelName,
    },
    /// Python: the kernel source would end the `'''` string literal it is printed in.
    #[error("kernel `{kernel}`: its source contains `'''`, which would end the Python string literal around it")]
    SourceContainsTripleQuote {
        /// The kernel.
        kernel: KernelName,
    },
    /// Python: a GPU kernel call has no device to take a stream from.
    #[error("call of kernel `{kernel}` needs a GPU stream, but neither the call nor an enclosing device guard names a GPU device")]
    NoStreamDevice {
        /// The kernel.
        kernel: KernelName,
    },
    /// Python: a call of a Halide kernel on CUDA with a named argument: the
    /// stream it takes last is positional, which Python rejects after a
    /// named one.
    #[error("call of kernel `{kernel}` has a positional argument after a named one, which Python rejects")]
    PositionalAfterNamed {
        /// The kernel.
        kernel: KernelName,
    },
    /// Python: a key path that has no Python form.
    #[error("key path `{path}` binding `{symbol}` is not supported: {reason}")]
    UnsupportedKeyPath {
        /// The bound symbol.
        symbol: Symbol,
        /// The key path in text form.
        path: String,
        /// Why.
        reason: &'static str,
    },
    /// Python: a communication buffer kind other than `symm_mem`.
    #[error("communication buffer `{buffer}` has kind `{comm_kind}`; only `symm_mem` has a Python form")]
    UnsupportedCommBuffer {
        /// The buffer.
        buffer: BufName,
        /// Its kind.
        comm_kind: String,
    },
    /// Python: the benchmark harness needs a concrete size for an input.
    #[error("benchmark harness: input `{input}` needs a value for symbol `{symbol}`, which has no hint (declare a hint or set `benchmark_harness: false`)")]
    MissingHint {
        /// The symbol.
        symbol: Symbol,
        /// The input.
        input: BufName,
    },
    /// Python: the benchmark harness could not evaluate an input's layout at the hints.
    #[error("benchmark harness: cannot evaluate the layout of input `{input}` at the symbols' hints: {source}")]
    HarnessEval {
        /// The input.
        input: BufName,
        /// The evaluation error.
        source: EvalError,
    },
    /// C++: a multi-output value passed whole as an extern op's argument.
    /// The C++ lowerings hold a multi-output value's tensors as separate
    /// variables, one per output (as Inductor's C++ wrapper receives them),
    /// and have no variable for the value itself; Inductor never passes one
    /// (its consumers name the extracted elements), while the Python and FX
    /// lowerings can pass the tuple.
    #[error("multi-output value `{buffer}` is passed whole as an extern argument, which the C++ lowerings cannot express (they hold its outputs as separate tensors, not the value)")]
    MultiOutputArgument {
        /// The multi-output value.
        buffer: BufName,
    },
    /// C++: the program uses something the C++ lowering does not support.
    #[error("not supported by the C++ lowering ({dialect}): {what}")]
    NotSupported {
        /// The dialect.
        dialect: &'static str,
        /// What is not supported.
        what: String,
    },
    /// C++: the program is inconsistent in a way the lowering cannot write.
    #[error("{0}")]
    Invalid(String),
    /// FX: a buffer name with no live value at this point.
    #[error("buffer `{0}` has no value here (never defined, or already freed)")]
    UnknownBuffer(BufName),
    /// FX: a symbol used before any line binds it.
    #[error("symbol `{0}` is used before it is bound")]
    UnboundSymbol(Symbol),
    /// FX and C++: arguments of a kernel call that do not match its
    /// parameters in a way validation does not check (a value for a
    /// parameter `constants` fixes, a Halide call against its arguments
    /// without aliases, a scalar parameter given no number).
    #[error("call of kernel `{kernel}`: {message}")]
    KernelArgs {
        /// The kernel.
        kernel: String,
        /// What does not match.
        message: String,
    },
    /// FX: a key path that cannot be followed.
    #[error("key path of symbol `{symbol}`: {message}")]
    KeyPath {
        /// The symbol being bound.
        symbol: Symbol,
        /// What is wrong.
        message: String,
    },
    /// FX: a graph input whose size expression cannot be solved for its symbol.
    #[error("input `{input}`: {message}")]
    Input {
        /// The input.
        input: BufName,
        /// What is wrong.
        message: String,
    },
    /// FX: a line kind FX cannot express.
    #[error("{0}")]
    Unsupported(String),
    /// FX: constant folding failed (overflow, division by zero).
    #[error("evaluating `{expr}`: {message}")]
    Fold {
        /// The expression.
        expr: String,
        /// Why.
        message: String,
    },
    /// A limit was exceeded (the C++ lowerings' inlined subgraph bodies,
    /// `Limit::InlinedSubgraphs`).
    #[error("{0}")]
    Limit(crate::LimitExceeded),
    /// The output sink failed.
    #[error("the output sink failed")]
    Format,
}
