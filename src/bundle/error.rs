//! [`BundleError`]: why a program file, bundle directory or package cannot be
//! opened or read. Every message names the file, and the entry or tensor
//! within it where there is one.

use std::path::PathBuf;
use std::sync::Arc;

/// Why a bundle (a program file, a bundle directory or a `.wirpkg` package)
/// cannot be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file could not be read, mapped or written.
    #[error("{what} {}: {error}", path.display())]
    Io {
        /// What was being done (`reading`, `writing`, `mapping`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A path that is neither a program file, a bundle directory nor a package.
    #[error("{}: {reason}", path.display())]
    NotABundle {
        /// The path.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// A program in the text form that does not parse. `text`
    /// holds the source so that a caller can show the offending line.
    #[error("cannot parse {name} (line {}, column {}): {}", error.line, error.column, error.message)]
    Parse {
        /// The program file or entry, as shown to users.
        name: String,
        /// The program text.
        text: Arc<str>,
        /// Where and why.
        error: crate::text::ParseError,
    },
    /// A program in JSON that does not read.
    #[error("in {name}: {error}")]
    Json {
        /// The program file or entry.
        name: String,
        /// Why.
        error: crate::ir::FormatError,
    },
    /// A file or entry that must be UTF-8 text and is not.
    #[error("{name} is not UTF-8 text: {error}")]
    NotText {
        /// The file or entry.
        name: String,
        /// Where the bytes stop being UTF-8.
        error: std::str::Utf8Error,
    },
    /// A `bundle.json` that cannot be read.
    #[error("in {name}: {message}")]
    Meta {
        /// The file or entry.
        name: String,
        /// The field and what is wrong with it.
        message: String,
    },
    /// A safetensors file or entry that cannot be read.
    #[error("in {name}: {error}")]
    Safetensors {
        /// The file or entry.
        name: String,
        /// Why (naming the tensor).
        error: crate::format::safetensors::SafetensorsError,
    },
    /// A file that is not a wrapir package (its first bytes are not the magic).
    #[error("{}: not a wrapir package (the file does not start with the `.wirpkg` magic bytes)", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// A package of a format version this wrapir does not read.
    #[error("{}: package format version {found} is not supported (this wrapir reads versions {oldest} to {supported}; re-pack the bundle with this wrapir)", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The oldest version this wrapir reads.
        oldest: u32,
        /// The version this wrapir writes (the newest it reads).
        supported: u32,
    },
    /// A package entry whose bytes do not hash to the checksum its table of
    /// contents records: the file was corrupted after it was written.
    #[error("{}: entry `{entry}` is corrupted: its bytes hash to {found}, the table of contents records {recorded} (pack the bundle again, or copy the package again)", path.display())]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// The entry.
        entry: String,
        /// The checksum the table of contents records (`xxh3-64:...`).
        recorded: String,
        /// The checksum of the entry's bytes.
        found: String,
    },
    /// A malformed, truncated or hostile package: its header, table of
    /// contents or an entry's offsets are wrong.
    #[error("{}: invalid package: {message}", path.display())]
    Package {
        /// The file.
        path: PathBuf,
        /// What is wrong (naming the entry where there is one).
        message: String,
    },
    /// An entry the caller asked for is not in the bundle.
    #[error("{bundle} has no `{entry}`")]
    MissingEntry {
        /// The bundle, as shown to users.
        bundle: String,
        /// The entry (`kernels/k.cubin`, `inputs.safetensors`).
        entry: String,
    },
    /// A kernel image path that is not a plain relative path inside the bundle.
    #[error("kernel image path `{path}` must be relative to the bundle, without `..`, `.` or empty components")]
    KernelPath {
        /// The path as the program names it.
        path: String,
    },
    /// A kernel whose image the program's metadata names but the bundle lacks.
    #[error("kernel `{kernel}`: its image {image} is absent from the bundle (the kernel metadata names `{path}`)")]
    MissingKernelImage {
        /// The kernel.
        kernel: String,
        /// The image, as shown to users (its file, or the package entry).
        image: String,
        /// The `cubin` path in the kernel metadata.
        path: String,
    },
    /// A kernel the CUDA backend cannot launch from an image: a Triton kernel
    /// whose metadata names no `cubin`, or a kernel of another backend.
    #[error("kernel `{kernel}` has no kernel image the cuda backend can load: {reason}")]
    NoKernelImage {
        /// The kernel.
        kernel: String,
        /// Why.
        reason: String,
    },
    /// A kernel's image that cannot be read or is not a valid image.
    #[error("kernel `{kernel}`: {error}")]
    Kernel {
        /// The kernel.
        kernel: String,
        /// What is wrong with its image (naming the file).
        error: Box<BundleError>,
    },
    /// A kernel image that is not a CUDA ELF cubin this wrapir understands.
    #[error("kernel image {name}: {message}")]
    Cubin {
        /// The image, as shown to users.
        name: String,
        /// What is wrong with its ELF header.
        message: String,
    },
    /// A file larger than [`crate::Limits::max_file_bytes`] (the message
    /// names the file, the limit and the flag that raises it).
    #[error(transparent)]
    Limit(#[from] crate::LimitExceeded),
}

impl From<crate::limits::FileError> for BundleError {
    fn from(e: crate::limits::FileError) -> Self {
        match e {
            crate::limits::FileError::Io { what, path, error } => BundleError::Io { what, path, error },
            crate::limits::FileError::TooLarge(limit) => BundleError::Limit(limit),
        }
    }
}

impl BundleError {
    /// An [`BundleError::Io`] error.
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BundleError::Io {
            what,
            path: path.into(),
            error: source,
        }
    }
}
