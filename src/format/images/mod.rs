//! Kernel images supplied by the caller: the compiled cubins (or PTX) of a
//! program's Triton kernels and the shared objects of its host kernels,
//! looked up by the path the program's kernel metadata names
//! (`kernels/<kernel>.cubin`).
//!
//! The backends do not find images themselves: a [`KernelImageSource`]
//! hands them over. `bundle::KernelImages` (a bundle directory's files, or
//! a package's entries in memory) is the library's own source; a caller that
//! keeps images elsewhere implements the trait. [`arch`] reads an image's GPU
//! architecture, the one rule of which GPU loads which image.

pub mod arch;
mod elf;

pub use arch::{cubin_arch, image_arch, CubinArch, ImageArch};
pub use elf::check_host_image;

use std::fmt;
use std::path::Path;

/// Bytes a caller hands over (a kernel image, a safetensors file), kept
/// where the caller keeps them (a memory-mapped file, a package entry, a
/// buffer): no copy is made to pass them.
pub type SuppliedBytes = Box<dyn AsRef<[u8]> + Send + Sync>;

/// Why a caller could not supply what was asked for; its message names the
/// image (or entry) and the reason.
pub type SupplyError = Box<dyn std::error::Error + Send + Sync>;

/// Where the backends find the kernel images of a program, by the path its
/// kernel metadata names.
pub trait KernelImageSource: fmt::Debug + Send + Sync {
    /// The image at `path` (as the program names it: a relative path). An
    /// error names the path and why it cannot be read.
    fn image(&self, path: &str) -> Result<SuppliedBytes, SupplyError>;

    /// The image of kernel `kernel` at `path`, checked to be a cubin (its
    /// ELF header and section tables within the image) or PTX
    /// ([`image_arch`]), with its architecture; an error names the kernel
    /// and the image. The default reads [`KernelImageSource::image`].
    fn kernel_image(&self, kernel: &str, path: &str) -> Result<(SuppliedBytes, ImageArch), SupplyError> {
        let image = self.image(path).map_err(|e| format!("kernel `{kernel}`: {e}"))?;
        let arch = image_arch((*image).as_ref())
            .map_err(|message| format!("kernel `{kernel}`: {}: {message}", self.describe(path)))?;
        Ok((image, arch))
    }

    /// How the image at `path` is shown to users (its file, or its entry).
    fn describe(&self, path: &str) -> String {
        format!("kernel image `{path}`")
    }

    /// The directory the images are files under, when they are: shared
    /// objects (the host kernels) are loaded from files. `None` (the
    /// default) for images held elsewhere.
    fn directory(&self) -> Option<&Path> {
        None
    }
}

/// No kernel images: every lookup is an error saying none were supplied.
/// What a backend has until its caller supplies a source (a program with
/// no compiled kernels needs none).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKernelImages;

impl KernelImageSource for NoKernelImages {
    fn image(&self, path: &str) -> Result<SuppliedBytes, SupplyError> {
        Err(format!("no kernel images were supplied, so `{path}` cannot be loaded").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct One(Vec<u8>);

    impl KernelImageSource for One {
        fn image(&self, path: &str) -> Result<SuppliedBytes, SupplyError> {
            match path {
                "kernels/k.ptx" => Ok(Box::new(self.0.clone())),
                _ => Err(format!("no image `{path}`").into()),
            }
        }
    }

    #[test]
    fn the_default_kernel_image_reads_and_checks_the_image() {
        let source = One(b".version 8.0\n.target sm_80\n".to_vec());
        let (_, arch) = source.kernel_image("k", "kernels/k.ptx").unwrap();
        assert!(arch.runs_on(90));
        let missing = source
            .kernel_image("k", "kernels/other.ptx")
            .err()
            .expect("no such image")
            .to_string();
        assert!(
            missing.contains("kernel `k`") && missing.contains("kernels/other.ptx"),
            "{missing}"
        );
        let bad = One(b"not an image".to_vec())
            .kernel_image("k", "kernels/k.ptx")
            .err()
            .expect("not an image");
        assert!(bad.to_string().contains("kernel image `kernels/k.ptx`"), "{bad}");
        let none = NoKernelImages
            .image("kernels/k.cubin")
            .err()
            .expect("no images")
            .to_string();
        assert!(none.contains("no kernel images were supplied"), "{none}");
    }
}
