//! Build-time facts for the tests: which external tools are on this
//! machine (`tests/common/tools.rs`). A test that needs a missing tool is
//! compiled as `#[ignore = "needs ..."]`, so `cargo test` reports it as
//! ignored instead of passing without running. Re-run when `PATH` or the
//! CUDA variables change (a tool installed onto an unchanged `PATH` needs
//! `touch build.rs`).

#[path = "tests/common/tools.rs"]
#[allow(dead_code)]
mod tools;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(wrapir_has_cmake)");
    println!("cargo::rustc-check-cfg=cfg(wrapir_has_nvcc)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=tests/common/tools.rs");
    for var in ["PATH", "CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if tools::tool_on_path("cmake") {
        println!("cargo::rustc-cfg=wrapir_has_cmake");
    }
    if tools::find_nvcc().is_some() {
        println!("cargo::rustc-cfg=wrapir_has_nvcc");
    }
}
