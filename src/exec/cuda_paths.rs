//! Where this machine keeps the CUDA libraries and wrapir's cache of
//! compiled built-in kernels: [`CudaPaths`], a field of
//! `exec::cuda::CudaOptions` in both builds (with the `cuda` feature and
//! in the stand-in), re-exported from `exec::cuda`.
//!
//! This is the library's one edge that reads the process environment:
//! [`CudaPaths::from_env`], which the CLI, the C ABI's `wrapir_rt_init` and
//! the examples call. The CUDA backend itself only takes the paths from its
//! options; [`CudaPaths::default`] searches nothing beyond the loader's own
//! paths and keeps no disk cache.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variable with extra directories (`:`-separated) searched
/// for the CUDA libraries before the built-in list.
pub const LIBRARY_PATH_VAR: &str = "WRAPIR_CUDA_LIBRARY_PATH";

/// Environment variable naming the kernel cache's directory (`off` or
/// empty: no disk cache).
pub const KERNEL_CACHE_VAR: &str = "WRAPIR_KERNEL_CACHE";

/// NVIDIA's pip wheel packages (`site-packages/nvidia/<package>/lib`) that
/// hold CUDA libraries, in the order they are searched: each library's own
/// package (cuDNN, cuBLAS and cuBLASLt, NVRTC, NCCL) before the CUDA 13 and
/// 12 bundles that hold several.
const WHEEL_PACKAGES: &[&str] = &["cudnn", "cublas", "cuda_nvrtc", "nccl", "cu13", "cu12"];

/// Where the CUDA backend finds the CUDA libraries that are not on the
/// loader's paths, and where it caches the cubins of its built-in kernels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaPaths {
    /// Directories searched, in order, for a CUDA library (cuBLAS,
    /// cuBLASLt, cuDNN, NVRTC) that the loader's own paths
    /// (`LD_LIBRARY_PATH`, the system's) do not hold. Default: none.
    pub library_dirs: Vec<PathBuf>,
    /// The directory of the on-disk cache of compiled kernels, so that
    /// later processes compile nothing: the built-in kernels' cubins (where
    /// no prebuilt image serves the GPU) and the JSON form of cuDNN
    /// convolution plans whose engine compiles its kernels at run time.
    /// Default `None`: no disk cache (each process compiles them once).
    pub kernel_cache: Option<PathBuf>,
}

impl CudaPaths {
    /// The paths this process's environment names (see
    /// [`CudaPaths::from_vars`]).
    pub fn from_env() -> CudaPaths {
        CudaPaths::from_vars(|name| std::env::var_os(name))
    }

    /// The paths the variables `var` looks up name.
    ///
    /// [`CudaPaths::library_dirs`]: the directories in
    /// [`LIBRARY_PATH_VAR`], the CUDA toolkit's (`$CUDA_HOME/lib64`, else
    /// `$CUDA_PATH/lib64`, then `/usr/local/cuda/lib64`), then NVIDIA's pip
    /// wheels (`lib/python3*/{site,dist}-packages/nvidia/<package>/lib`,
    /// newest Python first) under every Python prefix in sight: an active
    /// virtual or conda environment (`VIRTUAL_ENV`, `CONDA_PREFIX`), the
    /// prefix of every `python3` on `PATH`, the user's (`$HOME/.local`) and
    /// the system's (`/usr/local`, `/usr`, `/opt/conda`); only wheel
    /// directories that exist, each once.
    ///
    /// [`CudaPaths::kernel_cache`]: `$WRAPIR_KERNEL_CACHE` (`off` or empty:
    /// none), else `$XDG_CACHE_HOME/wrapir/kernels` (when absolute), else
    /// `$HOME/.cache/wrapir/kernels`.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> CudaPaths {
        CudaPaths {
            library_dirs: library_dirs(&var),
            kernel_cache: kernel_cache(&var),
        }
    }
}

fn library_dirs(var: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(extra) = var(LIBRARY_PATH_VAR) {
        dirs.extend(std::env::split_paths(&extra));
    }
    if let Some(cuda) = var("CUDA_HOME").or_else(|| var("CUDA_PATH")) {
        dirs.push(Path::new(&cuda).join("lib64"));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(|v| var(v).map(PathBuf::from))
        .collect();
    // The prefix of every Python on `PATH` (`<prefix>/bin/python3`).
    if let Some(path) = var("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("python3").is_file() {
                if let Some(prefix) = dir.parent() {
                    prefixes.push(prefix.to_path_buf());
                }
            }
        }
    }
    if let Some(home) = var("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    for prefix in prefixes {
        dirs.extend(wheel_dirs(&prefix));
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// The NVIDIA wheel library directories under the Python prefix `prefix`
/// that exist, newest Python first.
fn wheel_dirs(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    let mut pythons: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
        })
        .collect();
    pythons.sort();
    let mut dirs = Vec::new();
    for python in pythons.iter().rev() {
        for site in ["site-packages", "dist-packages"] {
            for package in WHEEL_PACKAGES {
                let dir = python.join(site).join("nvidia").join(package).join("lib");
                if dir.is_dir() {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs
}

fn kernel_cache(var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    match var(KERNEL_CACHE_VAR) {
        Some(v) if v == "off" || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|base| base.join("wrapir").join("kernels")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn the_kernel_cache_follows_its_variable_then_xdg_then_home() {
        let cache = |pairs: &[(&str, &str)]| CudaPaths::from_vars(vars(pairs)).kernel_cache;
        assert_eq!(
            cache(&[(KERNEL_CACHE_VAR, "/c"), ("HOME", "/h")]),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(cache(&[(KERNEL_CACHE_VAR, "off"), ("HOME", "/h")]), None);
        assert_eq!(cache(&[(KERNEL_CACHE_VAR, ""), ("HOME", "/h")]), None);
        assert_eq!(
            cache(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]),
            Some(PathBuf::from("/x/wrapir/kernels"))
        );
        assert_eq!(
            cache(&[("XDG_CACHE_HOME", "relative"), ("HOME", "/h")]),
            Some(PathBuf::from("/h/.cache/wrapir/kernels"))
        );
        assert_eq!(cache(&[]), None);
    }

    #[test]
    fn named_library_directories_come_first_in_order() {
        let dirs = CudaPaths::from_vars(vars(&[
            (LIBRARY_PATH_VAR, "/a:/b"),
            ("CUDA_HOME", "/cuda"),
            ("CUDA_PATH", "/ignored"),
            ("PATH", ""),
        ]))
        .library_dirs;
        let expected = ["/a", "/b", "/cuda/lib64", "/usr/local/cuda/lib64"].map(PathBuf::from);
        assert_eq!(dirs[..4], expected);
        assert!(!dirs.contains(&PathBuf::from("/ignored/lib64")));
        let unique: std::collections::HashSet<_> = dirs.iter().collect();
        assert_eq!(unique.len(), dirs.len());
    }

    #[test]
    fn the_defaults_search_and_cache_nothing() {
        let paths = CudaPaths::default();
        assert!(paths.library_dirs.is_empty());
        assert_eq!(paths.kernel_cache, None);
        assert_eq!(CudaPaths::from_vars(|_| None).kernel_cache, None);
    }
}
