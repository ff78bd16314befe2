//! Finding the CUDA libraries where a user has them, and keeping them loaded.
//!
//! cudarc opens each library by its bare file name (`libcudnn.so.9`, ...),
//! which finds what `LD_LIBRARY_PATH` and the system's loader paths hold.
//! Users of PyTorch usually have cuDNN, cuBLAS(Lt) and NVRTC only inside
//! NVIDIA's pip wheels next to their Python install (`site-packages/nvidia/
//! <package>/lib`), which no loader path names. [`keep_loaded`] therefore
//! tries the bare names first, then the same names in the directories the
//! caller names ([`CudaPaths::library_dirs`](crate::exec::cuda::CudaPaths),
//! which `CudaPaths::from_env` fills from the environment); a library opened
//! by its full path is found again by its name when cudarc opens it, because
//! the loader matches already-loaded libraries by soname.
//!
//! Libraries, once found, are kept loaded for the rest of the process:
//! cudarc probes a library by opening and closing it, then opens it again
//! at first use; when nothing else holds it, the close unmaps it and the
//! second open pays the whole load (relocations, static initialisers)
//! again. A later backend's directories therefore never replace a library
//! already found.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{LibraryVersion, LIBRARY_PATH_VAR};

/// Libraries opened by [`keep_loaded`] (by cudarc's name), never closed.
static KEPT_LOADED: Mutex<Vec<(&'static str, Vec<libloading::Library>)>> = Mutex::new(Vec::new());

/// Opens the CUDA driver library (`libcuda`) once and keeps it loaded for
/// the rest of the process; true when it was found. The driver comes with
/// the system's loader paths or not at all.
pub(super) fn keep_driver_loaded() -> bool {
    keep_loaded("cuda", &[])
}

/// Opens the CUDA library `name` (as cudarc names it: `cublas`,
/// `cublasLt`, `cudnn`, `nvrtc`, `nccl`) once and keeps it loaded for the
/// rest of the process, from the loader's paths or else from the first of
/// `dirs` that holds it; true when it was found (see the module
/// documentation).
pub(super) fn keep_loaded(name: &'static str, dirs: &[PathBuf]) -> bool {
    let Ok(mut kept) = KEPT_LOADED.lock() else {
        return false;
    };
    if kept.iter().any(|(n, _)| *n == name) {
        return true;
    }
    let candidates = cudarc::get_lib_name_candidates(name);
    for candidate in &candidates {
        // SAFETY: loading a CUDA library runs its initialisers, which cudarc
        // runs anyway when it opens the same library.
        if let Ok(lib) = unsafe { libloading::Library::new(candidate) } {
            // Found on the loader's paths, or already loaded by someone else
            // (PyTorch, in a Python process): its sub-libraries still come
            // from the directory it was loaded from.
            let mut libs = match loaded_from(candidate) {
                Some(dir) => siblings_first(name, &dir),
                None => Vec::new(),
            };
            libs.push(lib);
            kept.push((name, libs));
            return true;
        }
    }
    if name == "cuda" {
        // The driver comes with the system's loader paths or not at all.
        return false;
    }
    for dir in dirs {
        for candidate in &candidates {
            let path = dir.join(candidate);
            if !path.is_file() {
                continue;
            }
            let mut libs = siblings_first(name, dir);
            // SAFETY: as above.
            if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
                libs.push(lib);
                kept.push((name, libs));
                return true;
            }
        }
    }
    false
}

/// cuDNN 9 is a small front library that opens its sub-libraries
/// (`libcudnn_graph`, `libcudnn_cnn`, ...) by name at run time; they are
/// opened here by path first, from the directory the front library came
/// from (global, so that they resolve each other), in rounds until no
/// more open. Those that still fail are kept with the loader's reason
/// ([`sublibrary_failures`]) for the error cuDNN gives later.
fn siblings_first(name: &str, dir: &Path) -> Vec<libloading::Library> {
    let mut libs = Vec::new();
    if name != "cudnn" {
        return libs;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return libs;
    };
    let mut pending: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libcudnn_") && n.contains(".so"))
        })
        .collect();
    pending.sort();
    let mut failures = Vec::new();
    loop {
        let before = pending.len();
        failures.clear();
        pending.retain(|path| {
            // SAFETY: as in `keep_loaded`: cuDNN's own libraries, which it
            // would open itself at first use.
            match unsafe { open_global(path) } {
                Ok(lib) => {
                    libs.push(lib);
                    false
                }
                Err(e) => {
                    failures.push(format!("{}: {e}", path.display()));
                    true
                }
            }
        });
        if pending.is_empty() || pending.len() == before {
            if let Ok(mut kept) = SUBLIBRARY_FAILURES.lock() {
                kept.extend(failures);
            }
            return libs;
        }
    }
}

/// cuDNN sub-libraries that [`siblings_first`] could not open, with the
/// loader's reason: cuDNN itself says only `SUBLIBRARY_LOADING_FAILED`.
static SUBLIBRARY_FAILURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The loader's reasons for the cuDNN sub-libraries that would not open
/// (empty when all did, or none was tried).
pub(super) fn sublibrary_failures() -> Vec<String> {
    SUBLIBRARY_FAILURES.lock().map(|f| f.clone()).unwrap_or_default()
}

/// The directory the already-loaded library `file_name` (a soname such as
/// `libcudnn.so.9`) was mapped from, read from `/proc/self/maps`.
fn loaded_from(file_name: &str) -> Option<PathBuf> {
    mapped_dirs(file_name).into_iter().next()
}

/// Every directory a library named `file_name` (or `file_name.*`) is mapped
/// from in this process, in the order `/proc/self/maps` lists them, each once.
fn mapped_dirs(file_name: &str) -> Vec<PathBuf> {
    let Ok(maps) =
        crate::limits::files::read_to_string(Path::new("/proc/self/maps"), crate::Limits::DEFAULT_FILE_BYTES)
    else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5).map(Path::new) else {
            continue;
        };
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name == file_name || name.starts_with(&format!("{file_name}.")) {
            if let Some(dir) = path.parent().filter(|d| !dirs.iter().any(|x| x == d)) {
                dirs.push(dir.to_path_buf());
            }
        }
    }
    dirs
}

/// Why cuDNN could not open its sub-libraries when two cuDNN front
/// libraries are mapped in this process (a PyTorch process whose own cuDNN
/// was loaded before wrapir's was found under another name): a front
/// library opens its sub-libraries by soname, which the loader answers with
/// the copies already loaded, of the other version. `None` with one.
pub(super) fn second_cudnn() -> Option<String> {
    let dirs = mapped_dirs("libcudnn.so");
    (dirs.len() > 1).then(|| {
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!(
            "this process has two cuDNN libraries loaded (from {}), and cuDNN's sub-libraries come from \
             whichever was loaded first; wrapir opens cuDNN as `libcudnn.so` first, which here names another \
             copy than the one already loaded. Remove the unversioned `libcudnn.so` link of the copy not loaded \
             first, so that the name finds none and wrapir takes the loaded one as `libcudnn.so.9`",
            dirs.join(" and ")
        )
    })
}

/// Opens `path` with its symbols global and bound lazily.
///
/// # Safety
/// Runs the library's initialisers.
unsafe fn open_global(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_LAZY};
    // SAFETY: forwarded to the caller.
    unsafe { Library::open(Some(path), RTLD_LAZY | RTLD_GLOBAL) }.map(Into::into)
}

/// The message for a library that [`keep_loaded`] could not find in the
/// loader's paths nor in `dirs`.
pub(super) fn missing(library: &'static str, dirs: &[PathBuf]) -> String {
    let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    format!(
        "cannot load {library}: not on the loader's paths (LD_LIBRARY_PATH, the system's) nor in {}; \
         install it or name its directory in {LIBRARY_PATH_VAR}",
        if dirs.is_empty() {
            "any CUDA or Python directory".to_string()
        } else {
            dirs.join(", ")
        }
    )
}

/// Start-up work running on other threads (library loads, NVRTC
/// compilation), joined before a backend goes away.
static BACKGROUND: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());

/// Runs `work` on a new thread whose end [`join_background`] waits for.
pub(super) fn spawn_background(work: impl FnOnce() + Send + 'static) {
    let handle = std::thread::spawn(work);
    if let Ok(mut threads) = BACKGROUND.lock() {
        threads.push(handle);
    }
}

/// Waits for every thread [`spawn_background`] started. A process that
/// exits while one of them is inside the CUDA driver, NVRTC or a library's
/// initialisers races the libraries' own teardown (a crash after the run
/// has already failed cleanly), so every backend joins them when dropped.
pub(super) fn join_background() {
    let threads = match BACKGROUND.lock() {
        Ok(mut threads) => std::mem::take(&mut *threads),
        Err(_) => return,
    };
    for t in threads {
        let _ = t.join();
    }
}

/// The versions of the CUDA driver, cuBLAS, cuDNN and NCCL found on the
/// loader's paths or in `paths.library_dirs` (as the backend finds them),
/// each asked of the library through its version function, which needs no
/// GPU. A library not found has no version. Loads (and keeps loaded) each
/// library found.
pub fn library_versions(paths: &super::CudaPaths) -> Result<Vec<LibraryVersion>, super::CudaError> {
    let int_version = |name: &'static str, symbol: &[u8]| -> Option<i32> {
        with_kept(name, |lib| {
            // SAFETY: the symbol has C type `int f(int*)` in every version of
            // these libraries (cuDriverGetVersion, ncclGetVersion).
            let f = unsafe { lib.get::<unsafe extern "C" fn(*mut i32) -> i32>(symbol) }.ok()?;
            let mut v = 0i32;
            // SAFETY: an out-pointer to a live int; the library is loaded.
            (unsafe { f(&mut v) } == 0).then_some(v)
        })
    };
    let driver = keep_driver_loaded()
        .then(|| int_version("cuda", b"cuDriverGetVersion\0"))
        .flatten()
        .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
    let dirs = &paths.library_dirs;
    let cublas = keep_loaded("cublas", dirs)
        .then(|| {
            with_kept("cublas", |lib| {
                // SAFETY: `cublasStatus_t cublasGetProperty(libraryPropertyType, int*)`.
                let f =
                    unsafe { lib.get::<unsafe extern "C" fn(i32, *mut i32) -> i32>(b"cublasGetProperty\0") }.ok()?;
                let mut parts = [0i32; 3];
                for (kind, part) in parts.iter_mut().enumerate() {
                    // SAFETY: MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2; a live out-pointer.
                    if unsafe { f(kind as i32, part) } != 0 {
                        return None;
                    }
                }
                Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
            })
        })
        .flatten();
    let cudnn = keep_loaded("cudnn", dirs)
        .then(|| {
            with_kept("cudnn", |lib| {
                // SAFETY: `size_t cudnnGetVersion(void)`.
                let f = unsafe { lib.get::<unsafe extern "C" fn() -> usize>(b"cudnnGetVersion\0") }.ok()?;
                // SAFETY: a plain query of the loaded library.
                let v = unsafe { f() };
                // cuDNN 9: major * 10000 + minor * 100 + patch; cuDNN 8: major * 1000 + minor * 100 + patch.
                Some(if v >= 90000 {
                    format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
                } else {
                    format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
                })
            })
        })
        .flatten();
    let nccl = keep_loaded("nccl", dirs)
        .then(|| int_version("nccl", b"ncclGetVersion\0"))
        .flatten()
        .map(|v| {
            // NCCL >= 2.9: major * 10000 + minor * 100 + patch.
            let v = v.max(0);
            format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
        });
    Ok(vec![
        LibraryVersion {
            library: "CUDA driver",
            version: driver,
        },
        LibraryVersion {
            library: "cuBLAS",
            version: cublas,
        },
        LibraryVersion {
            library: "cuDNN",
            version: cudnn,
        },
        LibraryVersion {
            library: "NCCL",
            version: nccl,
        },
    ])
}

/// Calls `f` with the library [`keep_loaded`] kept for `name` (the last one
/// opened: the library itself, after cuDNN's sub-libraries).
fn with_kept<T>(name: &str, f: impl FnOnce(&libloading::Library) -> Option<T>) -> Option<T> {
    let kept = KEPT_LOADED.lock().ok()?;
    let (_, libs) = kept.iter().find(|(n, _)| *n == name)?;
    f(libs.last()?)
}
