//! A package's C++ kernel images loaded from anonymous in-memory files
//! (Linux's `memfd_create`), so that nothing is written to a file system
//! where another user could interfere: each image is copied into a file
//! that has no name in any directory, sealed against any further change,
//! checked, and opened by the dynamic loader as `/proc/self/fd/N`.
//!
//! Where the system has no anonymous files (`memfd_create` missing or
//! refused, no `/proc`), [`MemoryImage::new`] returns `None` and the caller
//! writes the images into its private scratch directory instead. Halide
//! kernels always take that path: they find their shared runtime through
//! `DT_NEEDED` and the `$ORIGIN` run path, which needs a directory.

use super::{CppKernel, HostKernelError, KernelFn};
use crate::exec::host::HostBackend;
use crate::exec::{KernelLaunch, Tensor};
use crate::format::images::KernelImageSource;
use crate::ir::{KernelBackend, Program};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One image in an anonymous, sealed in-memory file; closed on drop (an
/// object the loader mapped from it stays mapped). Kept open for as long as
/// the object loaded from it: the loader knows an object by the name it was
/// opened under, `/proc/self/fd/N`, and hands back the object already
/// loaded under that name when asked for it again, so a closed number
/// reused by the next image (of this program or of a later one) would load
/// the earlier kernel in its place.
struct MemoryImage {
    _file: File,
    path: PathBuf,
}

impl MemoryImage {
    /// The image `bytes` in a new anonymous file, sealed (no write, grow or
    /// shrink from now on); `None` where the system offers no anonymous
    /// files that the loader can open.
    fn new(bytes: &[u8]) -> io::Result<Option<MemoryImage>> {
        let fds = Path::new("/proc/self/fd");
        if !fds.is_dir() {
            return Ok(None);
        }
        // SAFETY: `memfd_create` takes a NUL-terminated name (a literal
        // here) and flags; it returns a new descriptor or -1.
        let fd = unsafe {
            libc::memfd_create(
                c"wrapir-host-kernel".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            // No such call (an old kernel) or refused by a sandbox: fall back.
            return match e.raw_os_error() {
                Some(libc::ENOSYS | libc::EPERM | libc::EACCES | libc::EINVAL) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: `fd` was just returned by `memfd_create`: an open
        // descriptor that nothing else owns; the `File` closes it.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(bytes)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: `fcntl(F_ADD_SEALS)` on the descriptor `file` owns, with
        // an integer argument; it changes no memory of this process.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = fds.join(file.as_raw_fd().to_string());
        Ok(Some(MemoryImage { _file: file, path }))
    }
}

/// Loads every host kernel of `program` (C++ only: the caller sends
/// programs with Halide kernels to the scratch directory) from anonymous
/// in-memory files and registers them on `backend`; `Ok(None)`, with
/// nothing registered, where the system has no anonymous files. Errors name
/// the kernel and its image in the bundle (`kernels/k.so (in memory)`).
pub(super) fn load_kernels_in_memory(
    backend: &mut HostBackend,
    program: &Program,
    images: &dyn KernelImageSource,
) -> Result<Option<usize>, HostKernelError> {
    let mut loaded: Vec<(String, KernelFn)> = Vec::new();
    for def in program.kernels.values() {
        let KernelBackend::Cpp(meta) = &def.backend else {
            continue;
        };
        let kernel = def.name.as_str();
        super::check_image_name(kernel)?;
        let file = super::image_path(kernel);
        let shown = PathBuf::from(format!("{file} (in memory)"));
        let load_error = |message: String| HostKernelError::Load {
            kernel: kernel.to_string(),
            path: shown.clone(),
            message,
        };
        let bytes = images.image(&file).map_err(|e| load_error(e.to_string()))?;
        let Some(image) = MemoryImage::new((*bytes).as_ref())
            .map_err(|e| load_error(format!("cannot make an in-memory file: {e}")))?
        else {
            return Ok(None);
        };
        let f = CppKernel::load(kernel, &image.path, meta)
            .map_err(|e| e.at(&shown))?
            .into_fn();
        // The file lives as long as the kernel (see `MemoryImage`).
        let kernel_fn: KernelFn = Arc::new(move |launch: &KernelLaunch<'_, Tensor>| {
            let _open = &image;
            f(launch)
        });
        loaded.push((kernel.to_string(), kernel_fn));
    }
    let n = loaded.len();
    for (kernel, f) in loaded {
        backend.register_kernel(&kernel, f);
    }
    Ok(Some(n))
}
