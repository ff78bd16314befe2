//! The standalone C++ wrapper deploys every committed CPU bundle
//! (`fixtures/inductor/bundles_cpu/{cpp,halide}/<case>/`) with no PyTorch:
//! `wrapir lower --target cpp-standalone --package DIR` writes the package
//! (the wrapper calls the bundle's compiled C++ or Halide kernel objects,
//! the very images the host backend runs; its extern ops run in the runtime
//! library's host context), `g++` builds it against `libwrapir_runtime`, its
//! `main` runs on the bundle's inputs and writes safetensors, and those
//! outputs match eager PyTorch's and Inductor's within the bundle's
//! tolerances (`common::compare_with_bundle`, the rule of the host
//! backend's runs in `cpu_bundles.rs`).
//!
//! Needs `g++` and the runtime library: `cargo build -p wrapir-runtime` in
//! the same profile as this test (CI's `.ci/run` builds it first), or
//! `WRAPIR_RUNTIME_DIR` naming its directory.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use wrapir::bundle::{conventions, Bundle};
use wrapir::lower::cpp::package::target_name;

/// Bundles whose package `wrapir lower --package` refuses, with a word of
/// the refusal (the op or kernel it names). None today.
const REFUSED: &[(&str, &str)] = &[];

/// How one bundle's package did.
enum Outcome {
    /// Built, ran and compared: the largest absolute error against eager.
    Passed(String),
    /// `wrapir lower --package` refused the program (its message).
    Refused(String),
}

/// Packages, builds and runs the bundle at `dir` in `work`, linking the
/// runtime library in `runtime` (with `build`), and compares its outputs.
fn check(dir: &Path, work: &Path, runtime: &Path, build: Build) -> Result<Outcome, String> {
    let case = common::case_name(dir);
    let package = work.join(&case);
    let lowered = common::lower_package(dir, &package);
    if lowered.code != 0 {
        return Ok(Outcome::Refused(lowered.stderr));
    }
    let target = target_name(&case);
    let exe = match build {
        Build::Gxx => build_with_gxx(&package, &target, runtime)?,
        Build::Cmake => build_with_cmake(&package, &target, Some(runtime))?,
    };
    let err = run_and_compare(dir, &package, &exe)?;
    // A passing package is not kept (each holds a copy of the runtime
    // library when it lies next to the wrapir binary); a failing one is,
    // for a look.
    let _ = std::fs::remove_dir_all(&package);
    Ok(Outcome::Passed(err))
}

/// Runs the package's executable `exe` on the bundle's inputs, writing
/// `PACKAGE/outputs.safetensors`, and compares them with the bundle's
/// references: the largest absolute error against eager.
fn run_and_compare(dir: &Path, package: &Path, exe: &Path) -> Result<String, String> {
    let outputs = package.join("outputs.safetensors");
    let ran = Command::new(&exe)
        .arg(dir.join(wrapir::bundle::INPUTS))
        .arg(&outputs)
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !ran.status.success() {
        return Err(format!(
            "{} exited with {}: {}{}",
            exe.display(),
            ran.status,
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        ));
    }
    let bundle = Bundle::open(dir).map_err(|e| e.to_string())?;
    let stored = common::read_tensors(&outputs);
    let values = conventions::runner_outputs(bundle.program(), &stored).map_err(|e| e.to_string())?;
    let comparison = common::compare_with_bundle(&bundle, &values)?;
    if let Some(e) = comparison.first_error() {
        return Err(e);
    }
    Ok(comparison
        .eager
        .max_errors()
        .map_or("-".to_string(), |(a, _)| format!("{a:.3e}")))
}

/// How a test builds a package.
#[derive(Clone, Copy)]
enum Build {
    /// `g++` on the package's two sources, as the package's CMake project
    /// would (fast: one compiler call).
    Gxx,
    /// The package's own CMake project: `cmake -S PACKAGE -B PACKAGE/build
    /// -DWRAPIR_RUNTIME_DIR=RUNTIME`, then `cmake --build`, as the README
    /// tells users to.
    Cmake,
}

/// Builds the package's executable `target` with `g++`: its path.
fn build_with_gxx(package: &Path, target: &str, runtime: &Path) -> Result<PathBuf, String> {
    let exe = package.join(target);
    let quoted = |p: &Path| format!("\"{}\"", p.display());
    let built = common::run_tool(
        Command::new("g++")
            .args(common::GXX_WARNINGS)
            // No optimisation: the kernels are compiled already.
            .arg("-O0")
            .arg(format!("-DWRAPIR_CUBIN_DIR={}", quoted(&package)))
            .arg(format!("-DWRAPIR_PACKAGE_DIR={}", quoted(&package)))
            .arg("-I")
            .arg(&package)
            .arg(package.join("main.cpp"))
            .arg(package.join(format!("{target}.cpp")))
            .arg("-L")
            .arg(runtime)
            .arg("-lwrapir_runtime")
            .arg(format!("-Wl,-rpath,{}", runtime.display()))
            .arg("-ldl")
            .arg("-o")
            .arg(&exe),
        "g++",
        "building the standalone package of a CPU bundle",
    );
    if !built.status.success() {
        return Err(format!("g++: {}", String::from_utf8_lossy(&built.stderr)));
    }
    Ok(exe)
}

/// Configures and builds the package's CMake project in `PACKAGE/build`
/// (with `runtime` as `WRAPIR_RUNTIME_DIR`, else the package's own `lib/`):
/// the executable's path.
fn build_with_cmake(package: &Path, target: &str, runtime: Option<&Path>) -> Result<PathBuf, String> {
    let build = package.join("build");
    let mut configure: Vec<std::ffi::OsString> = vec!["-S".into(), package.into(), "-B".into(), build.clone().into()];
    if let Some(runtime) = runtime {
        configure.push(format!("-DWRAPIR_RUNTIME_DIR={}", runtime.display()).into());
    }
    let steps: [(&str, Vec<std::ffi::OsString>); 2] = [
        ("configure", configure),
        ("build", vec!["--build".into(), build.clone().into()]),
    ];
    for (step, args) in steps {
        let out = common::run_tool(
            Command::new("cmake").args(&args),
            "cmake",
            "building a package's CMake project",
        );
        if !out.status.success() {
            return Err(format!(
                "cmake {step}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(build.join(target))
}

#[test]
fn every_cpu_bundle_runs_as_a_standalone_package_without_pytorch() {
    let runtime = common::runtime_dir();
    assert!(
        runtime.join("libwrapir_runtime.so").is_file(),
        "{} has no libwrapir_runtime.so: build it first with `cargo build -p wrapir-runtime` (the same profile as this test), or set WRAPIR_RUNTIME_DIR",
        runtime.display()
    );
    let work = common::scratch("cpu_standalone", "packages");
    let mut failures = Vec::new();
    let mut table = String::from("backend  case                   max abs err (eager)\n");
    let (mut passed, mut total) = (0, 0);
    for backend in ["cpp", "halide"] {
        let dirs = common::bundle_dirs(&format!("fixtures/inductor/bundles_cpu/{backend}"));
        assert!(!dirs.is_empty(), "no {backend} CPU bundles");
        let backend_work = work.join(backend);
        std::fs::create_dir_all(&backend_work).unwrap();
        for dir in dirs {
            total += 1;
            let case = common::case_name(&dir);
            let name = format!("{backend}/{case}");
            let refusal = REFUSED.iter().find(|(c, _)| *c == name).map(|(_, why)| *why);
            match (check(&dir, &backend_work, &runtime, Build::Gxx), refusal) {
                (Ok(Outcome::Passed(err)), None) => {
                    passed += 1;
                    table += &format!("{backend:<8} {case:<22} {err}\n");
                }
                (Ok(Outcome::Passed(_)), Some(_)) => failures.push(format!("{name}: passes; take it off REFUSED")),
                (Ok(Outcome::Refused(message)), Some(why)) if message.contains(why) => {
                    table += &format!("{backend:<8} {case:<22} refused: {}\n", message.trim());
                }
                (Ok(Outcome::Refused(message)), _) => failures.push(format!("{name}: refused: {message}")),
                (Err(e), _) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    println!("{table}{passed} of {total} CPU bundles pass");
    common::assert_no_failures(&failures);
    assert_eq!(passed + REFUSED.len(), total);
    let _ = std::fs::remove_dir_all(&work);
}

/// A host-only program calling an op the host backend lacks: `lower
/// --package` refuses it up front, naming the call, the op and where the
/// host context's ops are listed, and writes no package.
#[test]
fn a_package_calling_an_op_the_host_context_lacks_is_refused() {
    let dir = common::scratch("cpu_standalone", "refused");
    let program = common::write_one_op_program(&dir, "no_such_op.wir", "torch.ops.aten.no_such_op.default", "cpu");
    let package = dir.join("pkg");
    let r = common::lower_package(&program, &package);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    for want in [
        "the runtime library has no host implementation of 1 extern op call(s)",
        "`wrapir ops --device cpu`",
        "graph main, line 0 `extern buf0 = torch.ops.aten.no_such_op.default(arg0_1)`",
    ] {
        assert!(r.stderr.contains(want), "missing `{want}` in:\n{}", r.stderr);
    }
    assert!(!package.exists(), "a refused program must not leave a package");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host-only package builds with its own CMake project, as the README
/// tells users to (`cmake -S PACKAGE -B build && cmake --build build`, no
/// CUDA toolkit), for one bundle of each CPU kernel backend, and its
/// outputs match eager's. Without `cmake` on PATH (when the tests were
/// built) the test is ignored, and the summary counts it so (CI's `.ci/run`
/// installs cmake).
#[test]
#[cfg_attr(not(wrapir_has_cmake), ignore = "needs cmake on PATH")]
fn host_only_packages_build_with_their_cmake_project() {
    let runtime = common::runtime_dir();
    let work = common::scratch("cpu_standalone", "cmake");
    let mut failures = Vec::new();
    for case in ["cpp/small_cnn", "halide/addmm_relu"] {
        let dir = common::root().join("fixtures/inductor/bundles_cpu").join(case);
        let backend_work = work.join(case.split('/').next().unwrap_or(case));
        std::fs::create_dir_all(&backend_work).unwrap();
        match check(&dir, &backend_work, &runtime, Build::Cmake) {
            Ok(Outcome::Passed(err)) => println!("{case}: built with cmake, max abs err against eager {err}"),
            Ok(Outcome::Refused(message)) => failures.push(format!("{case}: refused: {message}")),
            Err(e) => failures.push(format!("{case}: {e}")),
        }
    }
    common::assert_no_failures(&failures);
    let _ = std::fs::remove_dir_all(&work);
}

/// A package built with its CMake project inside its folder keeps working
/// when the folder moves: the executable finds the runtime library through
/// an RPATH relative to itself (`$ORIGIN`, the copy in the package's `lib/`)
/// and its kernels and program from its own path, nothing absolute. The
/// folder is moved to a new parent and the old path no longer exists.
#[test]
#[cfg_attr(not(wrapir_has_cmake), ignore = "needs cmake on PATH")]
fn a_cmake_built_package_runs_after_its_folder_moves() {
    let work = common::scratch("cpu_standalone", "relocate");
    let dir = common::root().join("fixtures/inductor/bundles_cpu/cpp/small_cnn");
    let package = work.join("built").join("small_cnn");
    std::fs::create_dir_all(package.parent().unwrap()).unwrap();
    let lowered = common::lower_package(&dir, &package);
    assert_eq!(lowered.code, 0, "{}", lowered.stderr);
    assert!(
        package.join("lib/libwrapir_runtime.so").is_file(),
        "`lower --package` did not copy libwrapir_runtime.so into the package (build it first with `cargo build -p wrapir-runtime`, the same profile as this test)"
    );
    let target = target_name("small_cnn");
    build_with_cmake(&package, &target, None).unwrap();
    let moved = work.join("moved").join("elsewhere");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&package, &moved).unwrap();
    assert!(!package.exists());
    let err = run_and_compare(&dir, &moved, &moved.join("build").join(&target)).unwrap();
    println!("small_cnn: ran after its folder moved, max abs err against eager {err}");
    let _ = std::fs::remove_dir_all(&work);
}
