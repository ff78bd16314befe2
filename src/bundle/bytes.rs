//! [`SharedBytes`]: a cheaply cloned view of bytes that live in a
//! memory-mapped file or a buffer, so that a package's entries and a bundle
//! directory's files are read in place.

use super::BundleError;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// Read-only bytes shared by reference count: all of a memory-mapped file or
/// a buffer, or a range of one. Cloning copies no bytes.
#[derive(Clone)]
pub struct SharedBytes {
    backing: Arc<Backing>,
    range: Range<usize>,
}

enum Backing {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

impl SharedBytes {
    /// Maps the file at `path` read-only, within [`crate::Limits::default`]'s
    /// [`max_file_bytes`](crate::Limits::max_file_bytes) (see [`SharedBytes::map_within`]).
    pub fn map(path: &Path) -> Result<SharedBytes, BundleError> {
        SharedBytes::map_within(path, crate::Limits::default().max_file_bytes)
    }

    /// Maps the file at `path` read-only; an error when it holds more than
    /// `max_bytes` ([`crate::Limits::max_file_bytes`]), checked before mapping.
    ///
    /// The mapping reflects the file as it is on disk: wrapir never writes
    /// to a file it maps, and [`super::Bundle::write_package`] replaces a
    /// package by renaming a new file over it (which leaves existing mappings
    /// of the old one intact). A file that another process truncates while it
    /// is mapped is outside what any reader can guard against.
    ///
    /// What cannot be mapped because it is not a regular file (a pipe, such
    /// as a shell's `<(...)`, or a device such as `/dev/zero`) is read into
    /// memory instead, at most `max_bytes + 1` bytes of it.
    pub fn map_within(path: &Path, max_bytes: u64) -> Result<SharedBytes, BundleError> {
        let (file, regular) = crate::limits::files::open(path, max_bytes)?;
        if !regular {
            let bytes = crate::limits::files::read_capped(&file, path, max_bytes)?;
            return Ok(SharedBytes::from(bytes));
        }
        // SAFETY: a read-only private mapping; see the function docs for the
        // one hazard (another process truncating the file) that mapping brings.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| BundleError::io("mapping", path, e))?;
        let len = map.len();
        // The file may have grown since its size was checked.
        crate::limits::files::check_size(path, len as u64, max_bytes)?;
        Ok(SharedBytes {
            backing: Arc::new(Backing::Mapped(map)),
            range: 0..len,
        })
    }

    /// `len` bytes from `start` within these bytes, or `None` when that runs
    /// past their end.
    pub fn slice(&self, start: usize, len: usize) -> Option<SharedBytes> {
        let end = start.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        Some(SharedBytes {
            backing: Arc::clone(&self.backing),
            range: self.range.start + start..self.range.start + end,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // The range was checked against the backing's length when it was made.
        self.backing.bytes().get(self.range.clone()).unwrap_or_default()
    }
}

impl From<Vec<u8>> for SharedBytes {
    fn from(v: Vec<u8>) -> Self {
        let len = v.len();
        SharedBytes {
            backing: Arc::new(Backing::Owned(v)),
            range: 0..len,
        }
    }
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match *self.backing {
            Backing::Mapped(_) => "mapped",
            Backing::Owned(_) => "owned",
        };
        write!(f, "SharedBytes({} bytes, {how})", self.range.len())
    }
}
