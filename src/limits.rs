//! Explicit resource limits: what bad input may cost before it becomes an error.
//!
//! Every parser, checker, lowering and backend that walks user data bounds its
//! work by a [`Limits`] the caller passes (the plain entry points use
//! [`Limits::default`]). Exceeding one is an error ([`LimitExceeded`]) that
//! names the limit, the value that exceeded it, and the `wrapir` flag that
//! raises it. The library reads no system state: the CLI reads the host's
//! physical memory and passes it in as the memory limits.

use std::fmt;
use std::path::PathBuf;

/// Resource limits of one parse, check, lowering or run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes one tensor allocation (a buffer, an op's result, a placed
    /// input) may take on the host and meta backends. Default
    /// [`Limits::DEFAULT_MEMORY_BYTES`]; the CLI uses the host's physical memory.
    pub max_alloc_bytes: u64,
    /// Most bytes a whole run may hold at once (live tensors of the host and
    /// meta backends). Default [`Limits::DEFAULT_MEMORY_BYTES`]; the CLI uses the
    /// host's physical memory.
    pub max_run_bytes: u64,
    /// Deepest nesting of the text form and of values in the IR: nested list
    /// arguments, nested `device` blocks. Default 256, at most
    /// [`Limits::TEXT_DEPTH_CEILING`] (see [`Limits::stack_bytes`]).
    pub max_text_depth: usize,
    /// Longest chain of subgraphs calling subgraphs (`cond`/`while_loop`
    /// branches and bodies). Default 64, at most
    /// [`Limits::SUBGRAPH_DEPTH_CEILING`] (see [`Limits::stack_bytes`]).
    pub max_subgraph_depth: usize,
    /// Most iterations one `while_loop` may run before the run stops with an
    /// error. Default 100,000.
    pub loop_fuel: u64,
    /// Most diagnostics one validation reports; the rest are counted in one
    /// final diagnostic. Default 1,000.
    pub max_diagnostics: usize,
    /// Most outputs one multi-output value may have: a `get` index at or past
    /// it is an error (the C++ lowerings declare one handle per output).
    /// Default 65,536.
    pub max_outputs: usize,
    /// Most subgraph bodies the C++ lowerings may inline: they write a
    /// subgraph's code at every line that runs it, so nested conditionals
    /// sharing a branch grow exponentially. Default 4,096.
    pub max_inlined_subgraphs: usize,
    /// Most bytes one file may hold when wrapir reads it: a program file,
    /// stdin, `bundle.json`, a safetensors file, a kernel image, a package, a
    /// rank set. Checked before reading (the file's size) and while reading
    /// (pipes, devices such as `/dev/zero` and files that grow have no
    /// trustworthy size). Default [`Limits::DEFAULT_FILE_BYTES`].
    pub max_file_bytes: u64,
    /// The prover's limits (e-nodes, iterations, time), which also bound the
    /// preprocessing of its facts and every phase of a proof attempt.
    pub prover: crate::sym::egraph::Limits,
}

impl Limits {
    /// The default memory limits of the library: 16 GiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 16 << 30;

    /// The default file size limit: 4 GiB (a file that is not a regular
    /// file is read into memory, so this is also what reading `/dev/zero`
    /// may cost before it is refused).
    pub const DEFAULT_FILE_BYTES: u64 = 4 << 30;

    /// The most [`Limits::max_subgraph_depth`] may be. The parsers,
    /// validation, reconciliation, the lowerings and the backends walk
    /// nested subgraphs and nested values recursively; a thread running them
    /// needs [`Limits::stack_bytes`] of stack, which grows with both depth
    /// limits, and these ceilings keep it within what a thread can be given.
    /// Real programs nest a few levels.
    pub const SUBGRAPH_DEPTH_CEILING: usize = 10_000;
    /// The most [`Limits::max_text_depth`] may be (see
    /// [`Limits::SUBGRAPH_DEPTH_CEILING`]).
    pub const TEXT_DEPTH_CEILING: usize = 20_000;
    /// Stack one level of subgraph nesting may take in the deepest recursive
    /// walk: 256 KiB. Measured in an unoptimised build (the deepest, `run
    /// --device meta` of a chain of `cond`s, took about 40 KiB a level;
    /// `check` and the lowerings less), with a margin of six.
    pub const STACK_BYTES_PER_SUBGRAPH_LEVEL: u64 = 256 << 10;
    /// Stack one level of text or value nesting may take (a nested list
    /// argument): 32 KiB (measured about 4 KiB a level, unoptimised, in the
    /// parser, the deepest walk).
    pub const STACK_BYTES_PER_TEXT_LEVEL: u64 = 32 << 10;
    /// Stack for everything that does not grow with nesting: 16 MiB.
    pub const BASE_STACK_BYTES: u64 = 16 << 20;

    /// The stack a thread needs to parse, check, lower or run a program
    /// within these limits: [`Limits::BASE_STACK_BYTES`] plus the per-level
    /// bytes times each depth limit (about 40 MiB with the defaults, 3.2 GiB
    /// of address space, touched only as deep as a program goes, at both
    /// ceilings). Run the library's entry points on a thread of at least
    /// this much stack (`std::thread::Builder::stack_size`, and rayon's
    /// `ThreadPoolBuilder::stack_size` for its workers), as the CLI does;
    /// then no program within the limits can overflow it. An error names a
    /// depth limit above its ceiling.
    pub fn stack_bytes(&self) -> Result<usize, AboveCeiling> {
        let levels = [
            (
                Limit::SubgraphDepth,
                self.max_subgraph_depth,
                Self::SUBGRAPH_DEPTH_CEILING,
                Self::STACK_BYTES_PER_SUBGRAPH_LEVEL,
            ),
            (
                Limit::TextDepth,
                self.max_text_depth,
                Self::TEXT_DEPTH_CEILING,
                Self::STACK_BYTES_PER_TEXT_LEVEL,
            ),
        ];
        let mut total = Self::BASE_STACK_BYTES;
        for (limit, value, ceiling, per_level) in levels {
            let above = || AboveCeiling {
                limit,
                value: value as u64,
                ceiling: ceiling as u64,
                per_level,
            };
            if value > ceiling {
                return Err(above());
            }
            // Within the ceilings these cannot overflow; checked all the same.
            total = (value as u64)
                .checked_mul(per_level)
                .and_then(|bytes| total.checked_add(bytes))
                .ok_or_else(above)?;
        }
        usize::try_from(total).map_err(|_| AboveCeiling {
            limit: Limit::SubgraphDepth,
            value: self.max_subgraph_depth as u64,
            ceiling: Self::SUBGRAPH_DEPTH_CEILING as u64,
            per_level: Self::STACK_BYTES_PER_SUBGRAPH_LEVEL,
        })
    }

    /// Both memory limits set to `bytes`.
    pub fn with_memory(self, bytes: u64) -> Self {
        Limits {
            max_alloc_bytes: bytes,
            max_run_bytes: bytes,
            ..self
        }
    }

    /// The value of limit `which` (sizes as `u64`).
    pub fn max(&self, which: Limit) -> u64 {
        match which {
            Limit::AllocBytes => self.max_alloc_bytes,
            Limit::RunBytes => self.max_run_bytes,
            Limit::TextDepth => self.max_text_depth as u64,
            Limit::SubgraphDepth => self.max_subgraph_depth as u64,
            Limit::LoopFuel => self.loop_fuel,
            Limit::Diagnostics => self.max_diagnostics as u64,
            Limit::Outputs => self.max_outputs as u64,
            Limit::InlinedSubgraphs => self.max_inlined_subgraphs as u64,
            Limit::FileBytes => self.max_file_bytes,
        }
    }

    /// An error when `value` exceeds `limit` of kind `which`.
    pub fn check(which: Limit, value: u64, limit: u64, what: impl Into<String>) -> Result<(), LimitExceeded> {
        if value > limit {
            Err(LimitExceeded {
                limit: which,
                value,
                max: limit,
                what: what.into(),
            })
        } else {
            Ok(())
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_alloc_bytes: Self::DEFAULT_MEMORY_BYTES,
            max_run_bytes: Self::DEFAULT_MEMORY_BYTES,
            max_text_depth: 256,
            max_subgraph_depth: 64,
            loop_fuel: 100_000,
            max_diagnostics: 1_000,
            max_outputs: 65_536,
            max_inlined_subgraphs: 4_096,
            max_file_bytes: Self::DEFAULT_FILE_BYTES,
            prover: crate::sym::egraph::Limits::default(),
        }
    }
}

/// Which limit of [`Limits`] was exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// [`Limits::max_alloc_bytes`].
    AllocBytes,
    /// [`Limits::max_run_bytes`].
    RunBytes,
    /// [`Limits::max_text_depth`].
    TextDepth,
    /// [`Limits::max_subgraph_depth`].
    SubgraphDepth,
    /// [`Limits::loop_fuel`].
    LoopFuel,
    /// [`Limits::max_diagnostics`].
    Diagnostics,
    /// [`Limits::max_outputs`].
    Outputs,
    /// [`Limits::max_inlined_subgraphs`].
    InlinedSubgraphs,
    /// [`Limits::max_file_bytes`].
    FileBytes,
}

impl Limit {
    /// The field of [`Limits`].
    pub fn name(self) -> &'static str {
        match self {
            Limit::AllocBytes => "max_alloc_bytes",
            Limit::RunBytes => "max_run_bytes",
            Limit::TextDepth => "max_text_depth",
            Limit::SubgraphDepth => "max_subgraph_depth",
            Limit::LoopFuel => "loop_fuel",
            Limit::Diagnostics => "max_diagnostics",
            Limit::Outputs => "max_outputs",
            Limit::InlinedSubgraphs => "max_inlined_subgraphs",
            Limit::FileBytes => "max_file_bytes",
        }
    }

    /// The `wrapir` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Limit::AllocBytes => "--max-alloc-bytes",
            Limit::RunBytes => "--max-run-bytes",
            Limit::TextDepth => "--max-depth",
            Limit::SubgraphDepth => "--max-subgraph-depth",
            Limit::LoopFuel => "--loop-fuel",
            Limit::Diagnostics => "--max-diagnostics",
            Limit::Outputs => "--max-outputs",
            Limit::InlinedSubgraphs => "--max-inlined-subgraphs",
            Limit::FileBytes => "--max-file-bytes",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit was exceeded: `what` needs `value`, the limit is `max`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {value} exceeds the limit {limit} = {max} (raise it with {})", limit.flag())]
pub struct LimitExceeded {
    /// The limit.
    pub limit: Limit,
    /// The value that exceeded it (saturated at `u64::MAX`).
    pub value: u64,
    /// The limit's value.
    pub max: u64,
    /// What needed it (`allocating buf0 f32[1099511627776][1]`).
    pub what: String,
}

/// A depth limit set above its ceiling ([`Limits::stack_bytes`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{limit} = {value} is above its ceiling {ceiling}: {} may be at most {ceiling} (each level of nesting may take {per_level} bytes of stack in the recursive walks)",
    limit.flag()
)]
pub struct AboveCeiling {
    /// The limit.
    pub limit: Limit,
    /// Its value.
    pub value: u64,
    /// The most it may be.
    pub ceiling: u64,
    /// Stack bytes one level of its nesting may take.
    pub per_level: u64,
}

/// Why a file could not be read: the operating system's error, or the file
/// holds more than [`Limits::max_file_bytes`].
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Opening or reading failed.
    #[error("{what} {}: {error}", path.display())]
    Io {
        /// What was being done (`opening`, `reading`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The file is larger than the limit (by its size, or by what reading it gave).
    #[error(transparent)]
    TooLarge(#[from] LimitExceeded),
}

impl From<FileError> for std::io::Error {
    /// The operating system's error as it was; a file over the limit as an
    /// [`std::io::ErrorKind::FileTooLarge`] error with the limit's message.
    fn from(e: FileError) -> Self {
        match e {
            FileError::Io { error, .. } => error,
            FileError::TooLarge(limit) => std::io::Error::new(std::io::ErrorKind::FileTooLarge, limit),
        }
    }
}

/// Every file wrapir reads goes through these: the size is checked before
/// reading (the file's metadata) and while reading (at most `max_bytes + 1`
/// bytes are ever read, so a file whose size lies, such as `/dev/zero`, a
/// pipe or a file that grows, costs no more).
pub mod files {
    use super::{FileError, Limit, LimitExceeded, Limits};
    use std::fs::File;
    use std::io::Read;
    use std::path::Path;

    /// Opens `path` for reading; an error when it is a regular file larger
    /// than `max_bytes`. Returns the file and whether it is a regular file
    /// (whose size the metadata gives; others must be read with [`read_capped`]).
    pub fn open(path: &Path, max_bytes: u64) -> Result<(File, bool), FileError> {
        let io = |what, error| FileError::Io {
            what,
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(|e| io("opening", e))?;
        let meta = file.metadata().map_err(|e| io("opening", e))?;
        let regular = meta.is_file();
        if regular {
            check_size(path, meta.len(), max_bytes)?;
        }
        Ok((file, regular))
    }

    /// An error when a file of `len` bytes at `path` exceeds `max_bytes`.
    pub fn check_size(path: &Path, len: u64, max_bytes: u64) -> Result<(), FileError> {
        Limits::check(
            Limit::FileBytes,
            len,
            max_bytes,
            format!("the file {} (bytes)", path.display()),
        )
        .map_err(FileError::from)
    }

    /// Reads all of `reader` (the file at `path`, for errors), at most
    /// `max_bytes`: reading stops at `max_bytes + 1` bytes with an error.
    pub fn read_capped(reader: impl Read, path: &Path, max_bytes: u64) -> Result<Vec<u8>, FileError> {
        let mut bytes = Vec::new();
        reader
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|error| FileError::Io {
                what: "reading",
                path: path.to_path_buf(),
                error,
            })?;
        if bytes.len() as u64 > max_bytes {
            return Err(FileError::TooLarge(LimitExceeded {
                limit: Limit::FileBytes,
                value: bytes.len() as u64,
                max: max_bytes,
                what: format!("reading {} (bytes read before stopping)", path.display()),
            }));
        }
        Ok(bytes)
    }

    /// The bytes of the file at `path`, at most `max_bytes` of them.
    pub fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FileError> {
        let (file, _) = open(path, max_bytes)?;
        read_capped(file, path, max_bytes)
    }

    /// The text of the file at `path` (UTF-8), at most `max_bytes` of it.
    pub fn read_to_string(path: &Path, max_bytes: u64) -> Result<String, FileError> {
        let bytes = read(path, max_bytes)?;
        String::from_utf8(bytes).map_err(|e| FileError::Io {
            what: "reading",
            path: path.to_path_buf(),
            error: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        })
    }
}
