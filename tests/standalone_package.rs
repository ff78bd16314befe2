//! The standalone C++ package (`wrapir lower --target cpp-standalone
//! --package DIR`, `wrapir::lower::cpp::package`) and `wrapir compare`:
//!
//! * every committed bundle's package: the wrapper and `main.cpp` compile
//!   (`g++ -fsyntax-only` against NVIDIA's `cuda.h`, as `cpp_lowering.rs`
//!   finds it) with the shipped runtime header;
//! * the CLI writes a complete package (program, `bundle.json`, kernel
//!   images at their relative paths) and refuses programs whose ops the
//!   runtime lacks, naming the calls;
//! * the package's CMake project configures (`cmake -S DIR -B build`) where
//!   cmake and the CUDA toolkit are installed, and stops with the documented
//!   message when the runtime library is missing; elsewhere the test says
//!   which tool it did not find and passes;
//! * `wrapir compare` applies `wrapir run`'s comparison to outputs written
//!   elsewhere.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use wrapir::exec::Tensor;
use wrapir::lower::cpp::package::{package, target_name};

fn program_of(bundle: &Path) -> wrapir::ir::Program {
    wrapir::ir::Program::from_json(&std::fs::read_to_string(bundle.join("program.json")).unwrap()).unwrap()
}

#[test]
fn every_bundle_package_compiles_against_cuda_h() {
    let include = common::cuda_include();
    let dir = common::scratch("standalone_package", "compiles");
    std::fs::write(dir.join("wrapir_runtime.h"), wrapir::lower::cpp::runtime_header()).unwrap();
    // A precompiled runtime header: each file below then parses only itself.
    // (Without -Werror: g++ warns about `#pragma once` in the header it compiles.
    // A precompiled header g++ cannot use is ignored, and the header parsed.)
    let pch = common::run_tool(
        Command::new("g++")
            .args(common::GXX_WARNINGS.iter().filter(|f| **f != "-Werror"))
            .args(["-x", "c++-header"])
            .arg("-I")
            .arg(&include)
            .arg(dir.join("wrapir_runtime.h"))
            .arg("-o")
            .arg(dir.join("wrapir_runtime.h.gch")),
        "g++",
        "precompiling the runtime header",
    );
    assert!(
        pch.status.success(),
        "wrapir_runtime.h does not compile:\n{}",
        String::from_utf8_lossy(&pch.stderr)
    );
    let mut sources = Vec::new();
    for bundle in common::cuda_bundles() {
        let program = program_of(&bundle);
        let info = wrapir::ir::validate(&program).unwrap();
        let name = common::case_name(&bundle);
        let files = package(&info, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let target = target_name(&name);
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                format!("{target}.cpp").as_str(),
                "wrapir_runtime.h",
                "main.cpp",
                "CMakeLists.txt"
            ]
        );
        // `main.cpp` is one template (counts and names filled in): checked for the first bundle.
        let check_main = sources.is_empty();
        for f in files
            .iter()
            .filter(|f| f.path == format!("{target}.cpp") || (check_main && f.path == "main.cpp"))
        {
            let path = dir.join(format!("{name}__{}", f.path));
            std::fs::write(&path, &f.contents).unwrap();
            sources.push(path);
        }
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunks: Vec<Vec<PathBuf>> = sources
        .chunks(sources.len().div_ceil(threads))
        .map(<[PathBuf]>::to_vec)
        .collect();
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                let (include, dir) = (&include, &dir);
                s.spawn(move || {
                    let mut failed = Vec::new();
                    for src in chunk {
                        let out = common::run_tool(
                            Command::new("g++")
                                .args(common::GXX_WARNINGS)
                                .arg("-fsyntax-only")
                                .arg("-I")
                                .arg(dir)
                                .arg("-I")
                                .arg(include)
                                .arg(src),
                            "g++",
                            "compiling the package sources",
                        );
                        if !out.status.success() {
                            failed.push(format!("{}:\n{}", src.display(), String::from_utf8_lossy(&out.stderr)));
                        }
                    }
                    failed
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(
        failures.is_empty(),
        "{} file(s) do not compile:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn main_cpp_and_cmake_lists_name_the_target_and_outputs() {
    let bundle = common::root().join("fixtures/inductor/bundles/feat_sym_output");
    let program = program_of(&bundle);
    let info = wrapir::ir::validate(&program).unwrap();
    let files = package(&info, "feat-sym output").unwrap();
    let text = |p: &str| files.iter().find(|f| f.path == p).map(|f| f.contents.clone()).unwrap();
    let main = text("main.cpp");
    let cmake = text("CMakeLists.txt");
    let outputs = program.main.outputs.len();
    for (file, text, expect) in [
        ("main.cpp", &main, format!("constexpr size_t kNumOutputs = {outputs};")),
        ("main.cpp", &main, "//   out1: size (a 0-d int64 tensor)".to_string()),
        (
            "main.cpp",
            &main,
            "wrapir_rt_init(kDevice, WRAPIR_PACKAGE_DIR)".to_string(),
        ),
        (
            "CMakeLists.txt",
            &cmake,
            "project(feat_sym_output LANGUAGES CXX)".to_string(),
        ),
        (
            "CMakeLists.txt",
            &cmake,
            "add_executable(feat_sym_output main.cpp feat_sym_output.cpp)".to_string(),
        ),
        (
            "CMakeLists.txt",
            &cmake,
            "find_package(CUDAToolkit REQUIRED)".to_string(),
        ),
        ("CMakeLists.txt", &cmake, "CUDA::cuda_driver".to_string()),
        (
            "CMakeLists.txt",
            &cmake,
            "set(WRAPIR_RUNTIME_DIR \"${CMAKE_CURRENT_SOURCE_DIR}/lib\" CACHE PATH".to_string(),
        ),
    ] {
        assert!(text.contains(&expect), "{file} lacks {expect:?}:\n{text}");
    }
    for (name, want) in [("cat_mm", "cat_mm"), ("3d-conv", "model_3d_conv"), ("", "model_")] {
        assert_eq!(target_name(name), want);
    }
}

#[test]
fn cli_writes_a_complete_package_and_refuses_missing_ops() {
    let dir = common::scratch("standalone_package", "cli");
    // In a directory that does not exist yet: its parents are made.
    let pkg = dir.join("new_parent/softmax_pkg");
    let run = common::lower_package(Path::new("fixtures/inductor/bundles/softmax"), &pkg);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("build: cmake -B build"), "{}", run.stdout);
    let bundle = common::root().join("fixtures/inductor/bundles/softmax");
    for f in [
        "softmax.cpp",
        "main.cpp",
        "wrapir_runtime.h",
        "CMakeLists.txt",
        "program.json",
        "bundle.json",
    ] {
        assert!(pkg.join(f).is_file(), "the package lacks {f}");
    }
    // The kernel images at the paths the program names, byte for byte.
    let program = program_of(&bundle);
    let images: Vec<String> = program
        .kernels
        .values()
        .filter_map(|k| match &k.backend {
            wrapir::ir::KernelBackend::Triton(m) => m.cubin.clone(),
            _ => None,
        })
        .collect();
    assert!(!images.is_empty());
    for image in &images {
        assert_eq!(
            std::fs::read(pkg.join(image)).unwrap(),
            std::fs::read(bundle.join(image)).unwrap(),
            "{image}"
        );
    }
    // The package is a bundle the runtime opens: the same program.
    let opened = wrapir::bundle::Bundle::open(&pkg).unwrap();
    assert_eq!(opened.program().kernels.len(), program.kernels.len());

    // Each failure names what is wrong (exit 2).
    let divide_by = dir.join("divide_by");
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "lower",
                "fixtures/divide_by.wir",
                "--target",
                "cpp-standalone",
                "--package",
                divide_by.to_str().unwrap(),
            ],
            "op `torch.ops.mylib.pairs_above.default`",
        ),
        (
            &[
                "lower",
                "fixtures/nonzero.wir",
                "--target",
                "python",
                "--package",
                divide_by.to_str().unwrap(),
            ],
            "--package needs --target cpp-standalone",
        ),
        (
            &[
                "lower",
                "fixtures/nonzero.wir",
                "--target",
                "cpp-standalone",
                "--package",
                "x",
                "-o",
                "y.cpp",
            ],
            "--package writes its own files",
        ),
    ];
    for (args, expect) in cases {
        let run = common::wrapir(args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(expect), "{args:?}: {}", run.stderr);
    }
    assert!(!divide_by.exists(), "a refused package writes nothing");
    // Without --package the wrapper is written, with a warning naming the call.
    let run = common::wrapir(&["lower", "fixtures/divide_by.wir", "--target", "cpp-standalone"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("wrapir::call_op(0, \"torch.ops.mylib.pairs_above.default\""),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("warning: the runtime library has no device implementation of 1 extern op call(s)")
            && run.stderr.contains("graph main, line 4"),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg_attr(
    not(all(wrapir_has_cmake, wrapir_has_nvcc)),
    ignore = "needs cmake and the CUDA toolkit (nvcc)"
)]
fn cmake_project_configures() {
    let dir = common::scratch("standalone_package", "cmake");
    let pkg = dir.join("pkg");
    let run = common::lower_package(Path::new("fixtures/inductor/bundles/cat_mm"), &pkg);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Configure only looks the runtime library up (the GPU tests link it):
    // absent, the configure step stops with the documented message ...
    let empty = dir.join("no_runtime");
    std::fs::create_dir_all(&empty).unwrap();
    let configure = |runtime: &Path, build: &str| {
        Command::new("cmake")
            .arg("-S")
            .arg(&pkg)
            .arg("-B")
            .arg(dir.join(build))
            .arg(format!("-DWRAPIR_RUNTIME_DIR={}", runtime.display()))
            .output()
            .expect("cmake runs")
    };
    let out = configure(&empty, "build_without");
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "configured without the runtime library:\n{log}");
    // CMake wraps messages: compare with the whitespace collapsed.
    let flat = log.split_whitespace().collect::<Vec<_>>().join(" ");
    for expect in [
        "libwrapir_runtime not found in WRAPIR_RUNTIME_DIR=",
        "cargo build --release -p wrapir-runtime",
    ] {
        assert!(flat.contains(expect), "expected {expect:?} in:\n{log}");
    }
    // ... and with a library file in place it configures.
    let with = dir.join("runtime");
    std::fs::create_dir_all(&with).unwrap();
    std::fs::write(with.join("libwrapir_runtime.so"), b"").unwrap();
    let out = configure(&with, "build");
    assert!(
        out.status.success(),
        "cmake -S {} does not configure:\n{}{}",
        pkg.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `wrapir compare` on `outputs` for `bundle`: (exit code, stdout + stderr).
fn compare(bundle: &str, outputs: &[(&str, Tensor)], dir: &Path) -> (i32, String) {
    let map: indexmap::IndexMap<String, Tensor> = outputs.iter().map(|(k, t)| (k.to_string(), t.clone())).collect();
    let path = dir.join("outputs.safetensors");
    std::fs::write(&path, wrapir::exec::safetensors::write(&map).unwrap()).unwrap();
    let run = common::wrapir(&["compare", bundle, path.to_str().unwrap()]);
    (run.code, run.stdout + &run.stderr)
}

#[test]
fn compare_applies_run_s_rules_to_written_outputs() {
    let dir = common::scratch("standalone_package", "compare");
    let bundle = "fixtures/inductor/bundles/feat_sym_output";
    let expected = wrapir::bundle::Bundle::open(&common::root().join(bundle))
        .unwrap()
        .expected()
        .unwrap()
        .unwrap();
    let out0 = expected["out0"].clone();
    let size = expected["out1"].clone();
    let perturbed = Tensor::from_vec(
        out0.to_f64_vec()
            .unwrap()
            .iter()
            .map(|v| (*v + 1.0) as f32)
            .collect::<Vec<f32>>(),
        out0.size(),
    )
    .unwrap();
    let wrong_size = Tensor::from_i64(size.dtype(), &[size.to_i64_vec().unwrap()[0] + 1], size.size()).unwrap();
    // (outputs written, exit code, text expected in the report)
    type Case<'a> = (Vec<(&'a str, Tensor)>, i32, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            vec![("out0", out0.clone()), ("out1", size.clone())],
            0,
            "against eager: 2 outputs match",
        ),
        (vec![("out0", perturbed), ("out1", size.clone())], 1, "MISMATCH"),
        (vec![("out0", out0.clone()), ("out1", wrong_size)], 1, "MISMATCH"),
        (vec![("out1", size.clone())], 2, "no tensor `out0` for output 0"),
        (
            vec![("out0", out0.clone()), ("out1", out0)],
            2,
            "must be a one-element integer tensor",
        ),
    ];
    for (outputs, code, expect) in &cases {
        let (got, text) = compare(bundle, outputs, &dir);
        assert_eq!(got, *code, "{expect}: {text}");
        assert!(text.contains(expect), "expected {expect:?} in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
