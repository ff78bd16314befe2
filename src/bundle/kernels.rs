//! [`KernelImages`]: where the CUDA backend finds a kernel's compiled image,
//! by the `cubin` path the program's kernel metadata names: the bundle's
//! [`KernelImageSource`].

use super::{image_arch, BundleError, ImageArch, SharedBytes};
use crate::format::images::{KernelImageSource, SuppliedBytes, SupplyError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The kernel images of a program, looked up by the `cubin` path in its
/// kernel metadata (relative to the bundle: `kernels/<kernel>.cubin`).
#[derive(Clone, Debug)]
pub enum KernelImages {
    /// Files under a directory (a bundle directory, or the directory of a
    /// program file), read (memory-mapped) when a kernel is first loaded,
    /// each at most `max_file_bytes` ([`crate::Limits::max_file_bytes`]).
    Directory {
        /// The directory.
        dir: PathBuf,
        /// Most bytes one image file may hold.
        max_file_bytes: u64,
    },
    /// Images held in memory by path (a package's entries, mapped with it).
    InMemory(Arc<BTreeMap<String, SharedBytes>>),
}

impl Default for KernelImages {
    /// The current directory.
    fn default() -> Self {
        KernelImages::directory(PathBuf::from("."))
    }
}

impl KernelImages {
    /// The files under `dir`, within [`crate::Limits::default`]'s
    /// [`max_file_bytes`](crate::Limits::max_file_bytes).
    pub fn directory(dir: impl Into<PathBuf>) -> Self {
        KernelImages::Directory {
            dir: dir.into(),
            max_file_bytes: crate::Limits::default().max_file_bytes,
        }
    }

    /// The image at `path` (as the program names it: a relative path without
    /// `..`). An error names the path and why it cannot be read.
    pub fn image(&self, path: &str) -> Result<SharedBytes, BundleError> {
        let path = normalize(path)?;
        match self {
            KernelImages::Directory { dir, max_file_bytes } => {
                SharedBytes::map_within(&dir.join(path), *max_file_bytes)
            }
            KernelImages::InMemory(images) => images.get(path).cloned().ok_or_else(|| BundleError::MissingEntry {
                bundle: "the package".into(),
                entry: path.to_string(),
            }),
        }
    }

    /// The image of kernel `kernel` at `path`, read and checked to be a
    /// cubin (its ELF header and section tables within the file) or PTX
    /// ([`image_arch`]); an error names the kernel and the image: absent,
    /// unreadable, not an image, or truncated.
    pub fn kernel_image(&self, kernel: &str, path: &str) -> Result<(SharedBytes, ImageArch), BundleError> {
        let in_kernel = |error: BundleError| BundleError::Kernel {
            kernel: kernel.to_string(),
            error: Box::new(error),
        };
        let missing = || BundleError::MissingKernelImage {
            kernel: kernel.to_string(),
            image: self.describe(path),
            path: path.to_string(),
        };
        let image = match self.image(path) {
            Ok(image) => image,
            Err(BundleError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(BundleError::MissingEntry { .. }) => return Err(missing()),
            Err(e) => return Err(in_kernel(e)),
        };
        let arch = image_arch(&image).map_err(|message| {
            in_kernel(BundleError::Cubin {
                name: self.describe(path),
                message,
            })
        })?;
        Ok((image, arch))
    }

    /// How the image at `path` is shown to users: its file, or its entry.
    pub fn describe(&self, path: &str) -> String {
        match self {
            KernelImages::Directory { dir, .. } => dir.join(path).display().to_string(),
            KernelImages::InMemory(_) => format!("package entry `{path}`"),
        }
    }
}

/// `path` without a leading `./`, checked to be a plain relative path: no
/// root, no `..`, `.` or empty components, no backslashes or NUL bytes.
pub(crate) fn normalize(path: &str) -> Result<&str, BundleError> {
    let path = path.strip_prefix("./").unwrap_or(path);
    if is_plain_relative(path) {
        Ok(path)
    } else {
        Err(BundleError::KernelPath { path: path.to_string() })
    }
}

/// Whether `path` is a plain relative path (see [`normalize`]).
pub(crate) fn is_plain_relative(path: &str) -> bool {
    crate::ir::is_plain_relative_path(path)
}

/// The images the backends load (`CudaOptions::kernels`, host kernels),
/// with the messages of [`KernelImages::kernel_image`].
impl KernelImageSource for KernelImages {
    fn image(&self, path: &str) -> Result<SuppliedBytes, SupplyError> {
        Ok(Box::new(KernelImages::image(self, path)?))
    }

    fn kernel_image(&self, kernel: &str, path: &str) -> Result<(SuppliedBytes, ImageArch), SupplyError> {
        let (image, arch) = KernelImages::kernel_image(self, kernel, path)?;
        Ok((Box::new(image), arch))
    }

    fn describe(&self, path: &str) -> String {
        KernelImages::describe(self, path)
    }

    fn directory(&self) -> Option<&Path> {
        match self {
            KernelImages::Directory { dir, .. } => Some(dir),
            KernelImages::InMemory(_) => None,
        }
    }
}

impl From<PathBuf> for KernelImages {
    fn from(dir: PathBuf) -> Self {
        KernelImages::directory(dir)
    }
}

impl From<&Path> for KernelImages {
    fn from(dir: &Path) -> Self {
        KernelImages::directory(dir)
    }
}

impl From<&PathBuf> for KernelImages {
    fn from(dir: &PathBuf) -> Self {
        KernelImages::directory(dir.clone())
    }
}

impl From<&str> for KernelImages {
    fn from(dir: &str) -> Self {
        KernelImages::directory(dir)
    }
}

impl From<String> for KernelImages {
    fn from(dir: String) -> Self {
        KernelImages::directory(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths() {
        for ok in ["kernels/k.cubin", "k.cubin", "./kernels/a/b.cubin"] {
            assert!(normalize(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../k.cubin",
            "kernels/../../k",
            "a//b",
            "a/./b",
            "a\\b",
            "k\0",
        ] {
            assert!(normalize(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn in_memory_lookup() {
        let mut m = BTreeMap::new();
        m.insert("kernels/k.cubin".to_string(), SharedBytes::from(vec![1u8, 2, 3]));
        let images = KernelImages::InMemory(Arc::new(m));
        assert_eq!(&*images.image("./kernels/k.cubin").unwrap(), &[1, 2, 3]);
        assert!(images
            .image("kernels/other.cubin")
            .unwrap_err()
            .to_string()
            .contains("kernels/other.cubin"));
    }
}
