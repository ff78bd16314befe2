//! Which external tools this machine has, for the tests that need one:
//! decided when the tests are built (`build.rs` sets `wrapir_has_cmake` and
//! `wrapir_has_nvcc`), so that a test without its tool is marked
//! `#[ignore = "needs ..."]` and the test summary counts it as ignored
//! rather than passed. `build.rs` includes this file, and so can a test.

use std::path::PathBuf;
use std::process::Command;

/// `name --version` runs and succeeds.
pub fn tool_on_path(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The CUDA toolkit's `nvcc`, where CMake's FindCUDAToolkit looks for it:
/// `PATH`, then `$CUDAToolkit_ROOT`, `$CUDA_PATH`, `$CUDA_HOME`, then
/// `/usr/local/cuda`.
pub fn find_nvcc() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("nvcc")).collect::<Vec<_>>())
        .unwrap_or_default();
    let roots = ["CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|r| PathBuf::from(r).join("bin/nvcc"));
    on_path
        .into_iter()
        .chain(roots)
        .chain(std::iter::once(PathBuf::from("/usr/local/cuda/bin/nvcc")))
        .find(|p| p.is_file())
}
