//! Where a package's host-kernel images are written before they are loaded
//! when they cannot be loaded from memory (see `memfd`): a shared object
//! loads only from a file.
//!
//! Threat model: another local user may create files, directories and
//! symlinks in the shared temporary directory, and may guess names there;
//! they cannot write inside a directory this process created with mode
//! 0700. So a scratch directory is created by this process alone: its name
//! is unpredictable (keyed by the process's random hasher seed, the
//! process id, the time and a counter), it is made with one `mkdir` that
//! fails when anything (a symlink included) already has the name, with
//! mode 0700; every file in it is created with `O_CREAT | O_EXCL`
//! (`create_new`), which never follows a symlink; and it is removed when
//! dropped (`remove_dir_all` does not follow symlinks either).

use std::fs::{DirBuilder, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A private directory of this process, removed on drop.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates a fresh private directory `<prefix>-<random>` under `parent`
    /// (the caller's temporary directory: the library reads no environment).
    /// A name that exists already (planted or not) is never reused: another
    /// name is tried, a few times.
    pub fn new_in(parent: &Path, prefix: &str) -> io::Result<ScratchDir> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut last = None;
        for _ in 0..16 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            h.write_u128(nanos);
            let path = parent.join(format!("{prefix}-{:016x}", h.finish()));
            match create_private_dir(&path) {
                Ok(()) => return Ok(ScratchDir { path }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no fresh scratch directory name")))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Creates `path` as a directory only this user can use (0700), failing if
/// anything already has the name (a planted symlink included).
pub(super) fn create_private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(0o700).create(path)
}

/// Writes `bytes` to a new file `path` (0600): an error if anything already
/// has the name, so a planted symlink is never followed.
pub(crate) fn write_new_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(bytes)?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_fresh_private_and_removed() {
        let a = ScratchDir::new_in(Path::new("/tmp"), "wrapir-test").unwrap();
        let b = ScratchDir::new_in(Path::new("/tmp"), "wrapir-test").unwrap();
        assert_ne!(a.path(), b.path());
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(a.path()).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o700);
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists());
    }

    #[test]
    fn a_planted_symlink_is_never_written_through() {
        let dir = ScratchDir::new_in(Path::new("/tmp"), "wrapir-test").unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"precious").unwrap();
        let link = dir.path().join("image.so");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = write_new_file(&link, b"ELF").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let dir_link = dir.path().join("kernels");
        std::os::unix::fs::symlink(dir.path(), &dir_link).unwrap();
        assert_eq!(
            create_private_dir(&dir_link).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
    }
}
