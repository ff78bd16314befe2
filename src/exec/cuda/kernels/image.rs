//! Compiled images of the project's own CUDA sources (built-in ops,
//! attention). Cubins for sm_80 (which also run on sm_86/87/89) and sm_90
//! are committed under `prebuilt/` (deflated: about a quarter of their
//! size) and embedded in the binary, inflated when a module first loads, each
//! with the digest of the source it came from, so a process on those GPUs compiles
//! nothing and needs no NVRTC; the `prebuild_kernels` example regenerates
//! them, and a unit test fails while one is stale. For other GPUs, for a
//! source whose image is stale, and when the driver refuses a prebuilt image,
//! NVRTC compiles the source straight to a cubin for the device's compute
//! capability, once per process, kept in an on-disk cache so that later
//! processes load the cubin with no compilation at start-up.
//!
//! The cache lives in the directory the caller names
//! ([`CudaPaths::kernel_cache`]; `None`, the default, keeps none:
//! `CudaPaths::from_env` reads `$WRAPIR_KERNEL_CACHE`, `off` turning it off,
//! else `$XDG_CACHE_HOME/wrapir/kernels`, else `$HOME/.cache/wrapir/kernels`).
//! An entry's name is a hash of everything that decides the image: the
//! source text, the NVRTC options, the compute capability, and the NVRTC and
//! driver versions; a source edit or a new toolkit makes a new entry. Entries
//! are written to a temporary file and renamed into place, so concurrent
//! processes never read half a file; an entry that is not a cubin is
//! compiled again and replaced.

use crate::exec::cuda::CudaPaths;
use crate::exec::ExecError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

#[path = "prebuilt/index.rs"]
mod prebuilt;

/// 64-bit FNV-1a of `parts` from `seed` (each part followed by a separator).
fn fnv(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = seed;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The versions that decide what NVRTC and the driver make of a source.
fn toolkit_versions() -> String {
    let mut nvrtc = (0, 0);
    // SAFETY: out-pointers to two live ints; the library is loaded (checked by the caller).
    let _ = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut nvrtc.0, &mut nvrtc.1) };
    let mut driver = 0;
    // SAFETY: an out-pointer to a live int; the driver library is loaded by the backend.
    let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) };
    format!("nvrtc {}.{} driver {driver}", nvrtc.0, nvrtc.1)
}

/// `true` for a 64-bit little-endian ELF image (what NVRTC's cubins are).
fn is_cubin(bytes: &[u8]) -> bool {
    bytes.len() > 64 && bytes.starts_with(b"\x7fELF\x02\x01")
}

/// A committed image (the table in `prebuilt/index.rs`, which the
/// `prebuild_kernels` example writes).
struct Prebuilt {
    id: &'static str,
    major: i32,
    minor: i32,
    digest: [u64; 2],
    /// The cubin's length.
    size: usize,
    /// The cubin, deflated (raw DEFLATE).
    deflated: &'static [u8],
}

/// One of the project's own CUDA sources: what NVRTC compiles into one module.
pub(in crate::exec::cuda) struct KernelSource {
    /// The module's id: one per distinct source text (names cache entries
    /// and prebuilt images).
    pub id: String,
    /// The kernels' name in errors.
    pub what: &'static str,
    /// The complete source text.
    pub text: String,
}

/// Every source the backend may compile: the built-in ops, `extra.cu`,
/// `sort.cu`, `histc.cu`, `detection.cu`, and the attention kernels for each head dim they take.
pub(in crate::exec::cuda) fn all_sources() -> Vec<KernelSource> {
    let mut all = vec![
        super::builtin_source(),
        super::extra::MODULE.source(),
        super::sort::MODULE.source(),
        super::histc::MODULE.source(),
        super::detection::MODULE.source(),
    ];
    all.extend(super::ATTENTION_HEAD_DIMS.iter().map(|&e| super::attention_source(e)));
    all
}

/// The NVRTC options for compute capability `major.minor`.
fn nvrtc_options(major: i32, minor: i32) -> [String; 2] {
    [
        format!("--gpu-architecture=sm_{major}{minor}"),
        "--std=c++14".to_string(),
    ]
}

/// The digest of a source and its options (what decides a prebuilt image).
fn source_digest(text: &str, options: &[String]) -> [u64; 2] {
    digest(&[text.as_bytes(), options.join(" ").as_bytes()])
}

/// A 128-bit digest of `parts` (two FNV-1a seeds).
pub(in crate::exec::cuda) fn digest(parts: &[&[u8]]) -> [u64; 2] {
    [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142].map(|seed| fnv(seed, parts))
}

/// The committed image of `source` that a device of compute capability
/// `major.minor` runs: one compiled from the same text for the same major
/// architecture and a minor one no newer than the device's (cubins run on
/// later minor revisions of their architecture), the newest such.
/// `None` also when the image does not inflate to a cubin of its recorded
/// length (then NVRTC compiles the same source).
fn prebuilt_image(source: &KernelSource, major: i32, minor: i32) -> Option<Vec<u8>> {
    let p = prebuilt::IMAGES
        .iter()
        .filter(|p| p.id == source.id && p.major == major && p.minor <= minor)
        .filter(|p| p.digest == source_digest(&source.text, &nvrtc_options(p.major, p.minor)))
        .max_by_key(|p| p.minor)?;
    miniz_oxide::inflate::decompress_to_vec_with_limit(p.deflated, p.size)
        .ok()
        .filter(|image| image.len() == p.size && is_cubin(image))
}

/// Where a module's image comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::exec::cuda) enum ImageOrigin {
    /// A committed image, when one was compiled from the same source for
    /// the device's architecture; NVRTC otherwise.
    PrebuiltFirst,
    /// This process's cache, the disk cache or NVRTC (after the driver
    /// refused a prebuilt image).
    Compiled,
}

/// Loads the module of `source` on `device`: its prebuilt image when there
/// is one for the device's compute capability, else (or when the driver
/// refuses that image, as an older driver refuses a newer toolkit's cubin)
/// the image [`compiled_image`] gives.
pub(in crate::exec::cuda) fn load_module(
    device: &crate::exec::cuda::driver::Device,
    source: &dyn Fn() -> KernelSource,
) -> Result<crate::exec::cuda::driver::Module, ExecError> {
    let source = source();
    let cc = |a| {
        device
            .attribute(a)
            .map_err(|e| ExecError::op(source.what, e.to_string()))
    };
    let major = cc(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = cc(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let refused = match compiled_image(&device.paths, &source, major, minor, ImageOrigin::PrebuiltFirst) {
        Ok((image, origin)) => match device.load_module(&image) {
            Ok(m) => return Ok(m),
            Err(e) if origin == ImageOrigin::PrebuiltFirst => e,
            Err(e) => return Err(ExecError::op(source.what, e.to_string())),
        },
        Err(e) => return Err(e),
    };
    let (image, _) = compiled_image(&device.paths, &source, major, minor, ImageOrigin::Compiled).map_err(|e| {
        ExecError::op(
            source.what,
            format!("the driver refused the prebuilt image ({refused}), and compiling it failed: {e}"),
        )
    })?;
    device
        .load_module(&image)
        .map_err(|e| ExecError::op(source.what, e.to_string()))
}

/// The cubin of `source` for compute capability `major.minor`, and where it
/// came from: with [`ImageOrigin::PrebuiltFirst`], the committed image when
/// one matches; else this process's cache, the disk cache in
/// `paths.kernel_cache` or NVRTC (loaded from `paths.library_dirs` when the
/// loader's paths lack it).
pub(in crate::exec::cuda) fn compiled_image(
    paths: &CudaPaths,
    source: &KernelSource,
    major: i32,
    minor: i32,
    origin: ImageOrigin,
) -> Result<(Arc<[u8]>, ImageOrigin), ExecError> {
    if origin == ImageOrigin::PrebuiltFirst {
        // Inflated once per process (the built-ins' background preload
        // inflates them while the context is created; a load then finds them).
        static INFLATED: OnceLock<Mutex<HashMap<(String, i32, i32), Arc<[u8]>>>> = OnceLock::new();
        let mut inflated = INFLATED
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| ExecError::op(source.what, "prebuilt image cache poisoned by a panic"))?;
        let key = (source.id.clone(), major, minor);
        if let Some(image) = inflated.get(&key) {
            return Ok((Arc::clone(image), ImageOrigin::PrebuiltFirst));
        }
        if let Some(image) = prebuilt_image(source, major, minor) {
            let image: Arc<[u8]> = Arc::from(image);
            inflated.insert(key, Arc::clone(&image));
            return Ok((image, ImageOrigin::PrebuiltFirst));
        }
    }
    let what = source.what;
    let id = source.id.as_str();
    static CACHE: OnceLock<Mutex<HashMap<(String, i32, i32), Arc<[u8]>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache
        .lock()
        .map_err(|_| ExecError::op(what, "kernel image cache poisoned by a panic"))?;
    let key = (id.to_string(), major, minor);
    if let Some(p) = cache.get(&key) {
        return Ok((Arc::clone(p), ImageOrigin::Compiled));
    }
    require_nvrtc(paths, what)?;
    let options = nvrtc_options(major, minor);
    let versions = toolkit_versions();
    let digest = digest(&[
        source.text.as_bytes(),
        options.join(" ").as_bytes(),
        versions.as_bytes(),
    ]);
    let file = paths.kernel_cache.as_ref().map(|d| {
        d.join(format!(
            "{id}-sm{major}{minor}-{:016x}{:016x}.cubin",
            digest[0], digest[1]
        ))
    });
    if let Some(bytes) = file
        .as_ref()
        .and_then(|f| crate::limits::files::read(f, crate::Limits::default().max_file_bytes).ok())
        .filter(|b| is_cubin(b))
    {
        let image: Arc<[u8]> = Arc::from(bytes);
        cache.insert(key, Arc::clone(&image));
        return Ok((image, ImageOrigin::Compiled));
    }
    let image: Arc<[u8]> = Arc::from(nvrtc_cubin(what, &source.text, &options)?);
    if let Some(file) = &file {
        // A cache that cannot be written only costs the next process a compilation.
        let _ = store(file, &image);
    }
    cache.insert(key, Arc::clone(&image));
    Ok((image, ImageOrigin::Compiled))
}

/// An error naming the NVRTC library when it cannot be loaded from the
/// loader's paths or `paths.library_dirs`.
fn require_nvrtc(paths: &CudaPaths, what: &str) -> Result<(), ExecError> {
    let dirs = &paths.library_dirs;
    // SAFETY: only probes for the library (dlopen); checked first because
    // cudarc panics when it is missing.
    if !super::super::driver::keep_loaded("nvrtc", dirs) || !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(ExecError::op(
            what,
            super::super::libraries::missing("the NVRTC library (libnvrtc)", dirs),
        ));
    }
    Ok(())
}

/// One image compiled by [`prebuild_kernels`].
#[derive(Clone, Debug)]
pub struct PrebuiltImage {
    /// The module's id (`builtin`, `extra`, `attention_e64`, ...).
    pub id: String,
    /// The compute capability it was compiled for.
    pub major: i32,
    /// See `major`.
    pub minor: i32,
    /// The digest of its source text and NVRTC options, which the backend
    /// compares before using the image.
    pub digest: [u64; 2],
    /// The cubin.
    pub image: Vec<u8>,
}

impl PrebuiltImage {
    /// The image's file name among the committed images.
    pub fn file_name(&self) -> String {
        format!("{}-sm{}{}.cubin.deflate", self.id, self.major, self.minor)
    }

    /// The committed file's bytes: the cubin, deflated (raw DEFLATE at the
    /// best compression), as the backend inflates it.
    pub fn file_bytes(&self) -> Vec<u8> {
        miniz_oxide::deflate::compress_to_vec(&self.image, 10)
    }
}

/// Compiles every one of the backend's own CUDA sources for each compute
/// capability in `archs` with NVRTC (loaded as [`CudaPaths::library_dirs`]
/// says; no GPU or driver needed), for regenerating the images committed
/// under `src/exec/cuda/kernels/prebuilt/` (the `prebuild_kernels`
/// example writes them). Returns the images and NVRTC's version.
pub fn prebuild_kernels(
    paths: &CudaPaths,
    archs: &[(i32, i32)],
) -> Result<(Vec<PrebuiltImage>, (i32, i32)), ExecError> {
    require_nvrtc(paths, "prebuild_kernels")?;
    let mut version = (0, 0);
    // SAFETY: out-pointers to two live ints; the library is loaded (checked above).
    let _ = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut version.0, &mut version.1) };
    let sources = all_sources();
    let jobs: Vec<(&KernelSource, i32, i32)> = archs
        .iter()
        .flat_map(|&(major, minor)| sources.iter().map(move |s| (s, major, minor)))
        .collect();
    use rayon::prelude::*;
    let images = jobs
        .into_par_iter()
        .map(|(source, major, minor)| {
            let options = nvrtc_options(major, minor);
            Ok(PrebuiltImage {
                id: source.id.clone(),
                major,
                minor,
                digest: source_digest(&source.text, &options),
                image: nvrtc_cubin(source.what, &source.text, &options)?,
            })
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    Ok((images, version))
}

/// Writes `bytes` to `file` through a file in a private scratch directory
/// beside it (a fresh 0700 directory, the file created with `create_new`,
/// so nothing planted under a guessable name is followed or overwritten),
/// renamed into place; the scratch directory is removed afterwards.
pub(in crate::exec::cuda) fn store(file: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use crate::exec::host::kernels::{write_new_file, ScratchDir};
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", file.display())))?;
    let staging = ScratchDir::new_in(dir, &format!(".{}.partial", name.to_string_lossy()))?;
    let partial = staging.path().join(name);
    write_new_file(&partial, bytes)?;
    std::fs::rename(&partial, file)
}

/// Compiles `source` with NVRTC and returns its cubin.
fn nvrtc_cubin(what: &str, source: &str, options: &[String]) -> Result<Vec<u8>, ExecError> {
    use cudarc::nvrtc::{result, sys};
    let fail = |step: &str, detail: String| ExecError::op(what, format!("NVRTC {step} failed: {detail}"));
    let src =
        std::ffi::CString::new(source).map_err(|_| fail("compilation", "the source contains a NUL byte".into()))?;
    let prog = result::create_program(&src, None).map_err(|e| fail("program creation", format!("{e:?}")))?;
    // SAFETY: `prog` was created above and is destroyed once, at the end.
    let compiled = unsafe { result::compile_program(prog, options) };
    let out = match compiled {
        Err(e) => {
            // SAFETY: `prog` is live.
            let log = unsafe { result::get_program_log(prog) }
                .map(|l| l.iter().map(|&c| c as u8 as char).collect::<String>())
                .unwrap_or_default();
            Err(fail("compilation", format!("{e:?}: {}", log.trim_end_matches('\0'))))
        }
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` is compiled; `size` is a valid out-pointer.
            let sized = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }.result();
            match sized {
                Err(e) => Err(fail("cubin size", format!("{e:?}"))),
                Ok(()) => {
                    let mut bytes = vec![0u8; size];
                    // SAFETY: `bytes` holds the `size` bytes NVRTC reported.
                    unsafe { sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast()) }
                        .result()
                        .map(|()| bytes)
                        .map_err(|e| fail("cubin", format!("{e:?}")))
                }
            }
        }
    };
    // SAFETY: created above, destroyed once.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_files_inflate_to_their_images() {
        let mut cubin = b"\x7fELF\x02\x01".to_vec();
        cubin.extend((0..5000u32).map(|i| (i % 251) as u8));
        let image = PrebuiltImage {
            id: "x".into(),
            major: 9,
            minor: 0,
            digest: [0, 0],
            image: cubin.clone(),
        };
        let file = image.file_bytes();
        assert!(file.len() < cubin.len());
        assert_eq!(
            miniz_oxide::inflate::decompress_to_vec_with_limit(&file, cubin.len()).unwrap(),
            cubin
        );
        assert_eq!(image.file_name(), "x-sm90.cubin.deflate");
    }

    #[test]
    fn digests_separate_sources_and_options() {
        let a = fnv(1, &[b"ab", b"c"]);
        assert_ne!(a, fnv(1, &[b"a", b"bc"]));
        assert_ne!(a, fnv(2, &[b"ab", b"c"]));
        assert_eq!(a, fnv(1, &[b"ab", b"c"]));
    }

    /// Every source has a current image for sm_80 and sm_90; fails after a
    /// kernel source edit until the images are regenerated with
    /// `cargo run --release --features cuda --example prebuild_kernels`.
    #[test]
    fn prebuilt_images_match_their_sources() {
        for source in all_sources() {
            for (major, minor) in [(8, 0), (9, 0)] {
                let image = prebuilt_image(&source, major, minor);
                assert!(
                    image.as_deref().is_some_and(is_cubin),
                    "no current prebuilt image of `{}` for sm_{major}{minor}: regenerate them with \
                     `cargo run --release --features cuda --example prebuild_kernels`",
                    source.id
                );
            }
        }
        // A later minor revision runs its architecture's image; another major one does not.
        let builtin = super::super::builtin_source();
        assert!(prebuilt_image(&builtin, 8, 9).is_some());
        assert!(prebuilt_image(&builtin, 10, 0).is_none());
        let edited = KernelSource {
            text: format!("{} ", builtin.text),
            ..builtin
        };
        assert!(prebuilt_image(&edited, 9, 0).is_none());
    }

    #[test]
    fn only_elf64_images_count_as_cubins() {
        let mut elf = b"\x7fELF\x02\x01".to_vec();
        elf.resize(100, 0);
        assert!(is_cubin(&elf));
        assert!(!is_cubin(b"\x7fELF\x02\x01"));
        assert!(!is_cubin(&[b'.'; 100]));
    }

    #[test]
    fn store_writes_through_no_planted_name_and_leaves_nothing_behind() {
        let dir = crate::exec::host::kernels::ScratchDir::new_in(std::path::Path::new("/tmp"), "wrapir-test").unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let file = dir.path().join("cache").join("k-sm90.cubin");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        // The name the cache used to write through first.
        let planted = file.with_extension(format!("tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        store(&file, b"image").unwrap();
        let read = |p: &std::path::Path| crate::limits::files::read(p, 1 << 20).unwrap();
        assert_eq!(read(&file), b"image");
        assert_eq!(read(&victim), b"precious");
        let mut left: Vec<String> = std::fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let planted_name = planted.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(left, ["k-sm90.cubin".to_string(), planted_name]);
        // Replacing an existing entry works too.
        store(&file, b"image 2").unwrap();
        assert_eq!(read(&file), b"image 2");
    }
}
