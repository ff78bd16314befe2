//! Compiled images of the project's own CUDA sources (built-in ops,
//! attention): compiled by NVRTC straight to a cubin for the device's
//! compute capability, once per process, and kept in an on-disk cache so
//! that later processes load the cubin with no compilation at start-up.
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

/// The cubin of the CUDA source `source()` for compute capability
/// `major.minor`: from this process's cache, the disk cache in
/// `paths.kernel_cache` or NVRTC (loaded from `paths.library_dirs` when the
/// loader's paths lack it), under `id` (one id per distinct source); `what`
/// names the kernels in errors.
pub(in crate::exec::cuda) fn compiled_image(
    paths: &CudaPaths,
    what: &str,
    id: &str,
    source: &dyn Fn() -> String,
    major: i32,
    minor: i32,
) -> Result<Arc<[u8]>, ExecError> {
    static CACHE: OnceLock<Mutex<HashMap<(String, i32, i32), Arc<[u8]>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache
        .lock()
        .map_err(|_| ExecError::op(what, "kernel image cache poisoned by a panic"))?;
    let key = (id.to_string(), major, minor);
    if let Some(p) = cache.get(&key) {
        return Ok(Arc::clone(p));
    }
    let dirs = &paths.library_dirs;
    // SAFETY: only probes for the library (dlopen); checked first because
    // cudarc panics when it is missing.
    if !super::super::driver::keep_loaded("nvrtc", dirs) || !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(ExecError::op(
            what,
            super::super::libraries::missing("the NVRTC library (libnvrtc)", dirs),
        ));
    }
    let text = source();
    let options = [
        format!("--gpu-architecture=sm_{major}{minor}"),
        "--std=c++14".to_string(),
    ];
    let versions = toolkit_versions();
    let digest = [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142].map(|seed| {
        fnv(
            seed,
            &[text.as_bytes(), options.join(" ").as_bytes(), versions.as_bytes()],
        )
    });
    let file = paths.kernel_cache.as_ref().map(|d| {
        d.join(format!(
            "{id}-sm{major}{minor}-{:016x}{:016x}.cubin",
            digest[0], digest[1]
        ))
    });
    if let Some(bytes) = file
        .as_ref()
        .and_then(|f| std::fs::read(f).ok())
        .filter(|b| is_cubin(b))
    {
        let image: Arc<[u8]> = Arc::from(bytes);
        cache.insert(key, Arc::clone(&image));
        return Ok(image);
    }
    let image: Arc<[u8]> = Arc::from(nvrtc_cubin(what, &text, &options)?);
    if let Some(file) = &file {
        // A cache that cannot be written only costs the next process a compilation.
        let _ = store(file, &image);
    }
    cache.insert(key, Arc::clone(&image));
    Ok(image)
}

/// Writes `bytes` to `file` through a temporary file renamed into place.
fn store(file: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
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
    fn digests_separate_sources_and_options() {
        let a = fnv(1, &[b"ab", b"c"]);
        assert_ne!(a, fnv(1, &[b"a", b"bc"]));
        assert_ne!(a, fnv(2, &[b"ab", b"c"]));
        assert_eq!(a, fnv(1, &[b"ab", b"c"]));
    }

    #[test]
    fn only_elf64_images_count_as_cubins() {
        let mut elf = b"\x7fELF\x02\x01".to_vec();
        elf.resize(100, 0);
        assert!(is_cubin(&elf));
        assert!(!is_cubin(b"\x7fELF\x02\x01"));
        assert!(!is_cubin(&[b'.'; 100]));
    }
}
