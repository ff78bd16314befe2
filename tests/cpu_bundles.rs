//! Real Inductor CPU programs (`fixtures/inductor/bundles_cpu/{cpp,halide}/<case>/`,
//! exported from `fixtures/inductor/cases_cpu.py` with PyTorch 2.11, and
//! `fixtures/inductor/bundles_cpu_2.15/{cpp,halide,control}/` with PyTorch
//! 2.15, `control` from `cases_cpu_control.py`, `ops` from `cases_cpu_ops.py`;
//! `families/` in both from `families.py`):
//! the host backend loads
//! each bundle's compiled C++ or Halide kernels, runs the program on its
//! inputs and matches eager PyTorch's outputs (within the bundle's tolerance)
//! and Inductor's compiled outputs (within the tight compiled tolerance) —
//! with no PyTorch or Python on the machine. Also: `wrapir run --device cpu`
//! on them, and clear errors when an image and the program disagree.

mod common;

use std::path::{Path, PathBuf};
use wrapir::bundle::Bundle;
use wrapir::exec::host::kernels as host_kernels;
use wrapir::exec::host::HostBackend;
use wrapir::exec::run_program;
use wrapir::ir::{KernelBackend, Program};

/// One committed set of CPU bundles: its directory under `fixtures/inductor`,
/// the kernel backend of its kernels, the PyTorch version that exported it
/// (as `bundle.json` records it) and the cases it must hold.
struct BundleSet {
    dir: &'static str,
    backend: &'static str,
    torch: &'static str,
    cases: &'static [&'static str],
}

/// The control-flow cases (`cases_cpu_control.py`) of PyTorch 2.15, where
/// `torch.cond` is a `switch` line and `torch.switch` exists, and a nested
/// compile region called twice (spliced in at each call by the exporter).
const CONTROL_CASES: &[&str] = &[
    "cond_tensor_pred",
    "cond_sym_pred",
    "while_tensor_carries",
    "switch_three",
    "nested_region",
];

/// Every committed set: the oldest and the newest PyTorch the exporter supports.
const SETS: &[BundleSet] = &[
    BundleSet {
        dir: "bundles_cpu/cpp",
        backend: "cpp",
        torch: "2.11.",
        cases: CASES,
    },
    BundleSet {
        dir: "bundles_cpu/halide",
        backend: "halide",
        torch: "2.11.",
        cases: CASES,
    },
    BundleSet {
        dir: "bundles_cpu_2.15/cpp",
        backend: "cpp",
        torch: "2.15.",
        cases: CASES,
    },
    BundleSet {
        dir: "bundles_cpu_2.15/halide",
        backend: "halide",
        torch: "2.15.",
        cases: CASES,
    },
    BundleSet {
        dir: "bundles_cpu_2.15/control",
        backend: "cpp",
        torch: "2.15.",
        cases: CONTROL_CASES,
    },
    BundleSet {
        dir: "bundles_cpu_2.15/ops",
        backend: "cpp",
        torch: "2.15.",
        cases: OPS_CASES,
    },
    BundleSet {
        dir: "bundles_cpu_2.15/features",
        backend: "cpp",
        torch: "2.15.",
        cases: FEATURE_CASES,
    },
    BundleSet {
        dir: "bundles_cpu/families",
        backend: "cpp",
        torch: "2.11.",
        cases: FAMILY_CASES,
    },
    BundleSet {
        dir: "bundles_cpu_2.15/families",
        backend: "cpp",
        torch: "2.15.",
        cases: FAMILY_CASES,
    },
];

/// Model families outside the zoo (`families.py`, the model-family sweep
/// `sweep.py`), small with random weights: timm's ViT, ConvNeXt-V2,
/// EfficientNet-V2, MLP-Mixer and MobileViT, torchaudio's wav2vec2 and
/// Conformer (a key padding mask), an LSTM and a GRU, our own top-k mixture
/// of experts (`nonzero` dispatch: unbacked sizes), a nested jagged tensor, a
/// KV-cache decode step (mutated inputs), int8 and fp8 GEMMs, torchvision's
/// LR-ASPP segmentation, a CNN and a transformer block compiled with
/// `dynamic=True`, and Hugging Face's Mixtral with transformers' default
/// `grouped_mm` experts (`aten.histc` counts the tokens per expert,
/// transformers' own `grouped_mm_fallback` op multiplies them), and
/// FlexAttention (Inductor's vectorised CPU template, its images built for
/// AVX2 with serial stand-ins for ATen's thread ids and allocator and the
/// template's own micro-GEMM: `wrapir_export.cpu_templates`), and object
/// detection: Faster R-CNN's second stage (`torchvision.roi_align`) and its
/// post-processing (a boolean mask index, `torchvision.nms`: unbacked
/// sizes), torchvision's CPU kernels on the host. The sweep's
/// other case does not run on the CPU: with its eager experts loop Dynamo
/// breaks Mixtral into 11 graphs.
const FAMILY_CASES: &[&str] = &[
    "timm_vit",
    "timm_convnextv2",
    "timm_efficientnetv2",
    "timm_mixer",
    "timm_mobilevit",
    "wav2vec2",
    "conformer",
    "lstm",
    "gru",
    "moe_topk",
    "hf_mixtral",
    "jagged_mlp",
    "kv_cache_decode",
    "int8_linear",
    "fp8_linear",
    "segmentation_lraspp",
    "flex_attention",
    "cnn_dynamic",
    "transformer_dynamic",
    "roi_heads",
    "box_postprocess",
];

/// Feature cases of upstream's FX backend tests (`features.py`, its
/// `test_item` with a float input): `x[1].item()` returned, an
/// `unbacked_float` symbol `zuf0` that a C++ kernel writes into a 0-d
/// float64 tensor (eager's Python float is stored as that tensor), static
/// and dynamic.
const FEATURE_CASES: &[&str] = &["feat_item_float", "feat_item_float_dynamic"];

/// Extern ops of model families outside the zoo (`cases_cpu_ops.py`): a
/// mixture-of-experts router's `aten.sort.stable` and `aten.topk`, and an
/// int8 GEMM (`extern_kernels._int_mm`), an fp8 GEMM with tensor-wise
/// scales (`extern_kernels._scaled_mm`, fp8 inputs), a KV-cache decode step that
/// writes its caches in place (`index_copy_` on inputs: judged after the call
/// against eager's caches, `mutated.safetensors`), a two-layer bidirectional
/// LSTM (`aten.mkldnn_rnn_layer` per layer and direction) and a GRU (its
/// cell's GEMMs and kernels: no RNN op).
const OPS_CASES: &[&str] = &[
    "moe_router_sort",
    "int8_linear",
    "fp8_linear",
    "kv_cache_decode",
    "lstm",
    "gru",
];

/// Cases every backend must have (the exporter's case list, `cases_cpu.py`).
const CASES: &[&str] = &[
    "pointwise",
    "pointwise_dynamic",
    "reduction_sum",
    "reduction_dynamic",
    "softmax",
    "layer_norm",
    "mm_gelu",
    "addmm_relu",
    "bmm_epilogue",
    "cumsum",
    "bf16_rmsnorm",
    "bf16_pointwise",
    "nonzero",
    "masked_select",
    "jagged_to_padded",
    "small_cnn",
    "transformer_block",
];

fn bundles(set: &BundleSet) -> Vec<PathBuf> {
    common::bundle_dirs(&format!("fixtures/inductor/{}", set.dir))
}

/// The outcome of one bundle: its comparisons with eager and with Inductor's
/// compiled outputs, or the error that stopped the run.
struct Outcome {
    comparison: common::BundleComparison,
    /// The mutated inputs after the run against eager's, when the bundle records any.
    mutated: Option<wrapir::exec::compare::MutationComparison>,
    kernels: usize,
}

/// Opens `dir`, loads its host kernels, runs it on the host backend and
/// compares the outputs with `expected.safetensors` and `compiled.safetensors`.
fn check(dir: &Path) -> Result<Outcome, String> {
    let bundle = Bundle::open(dir).map_err(|e| e.to_string())?;
    let program = bundle.program().clone();
    let mut backend = HostBackend::default();
    let kernels = host_kernels::load_kernels_from(&mut backend, &program, &bundle.kernel_images(), None)
        .map_err(|e| e.to_string())?;
    let inputs = bundle
        .inputs()
        .map_err(|e| e.to_string())?
        .ok_or("no inputs.safetensors")?;
    let out = run_program(&program, &mut backend, &inputs).map_err(|e| e.to_string())?;
    let comparison = common::compare_with_bundle(&bundle, &out.outputs)?;
    // The run left what the program wrote in the input tensors.
    let mutated = common::compare_mutated_with_bundle(&bundle, &inputs)?;
    Ok(Outcome {
        comparison,
        mutated,
        kernels,
    })
}

/// The vector ISA a C++ kernel of the bundle in `dir` was built for that this
/// CPU lacks (FlexAttention's AVX2 images), if any.
fn isa_this_cpu_lacks(dir: &Path) -> Option<String> {
    let bundle = Bundle::open(dir).ok()?;
    bundle.program().kernels.values().find_map(|k| match &k.backend {
        KernelBackend::Cpp(meta) => meta
            .isa
            .filter(|isa| host_kernels::isa::check_isa(*isa).is_err())
            .map(|isa| isa.to_string()),
        _ => None,
    })
}

#[test]
fn every_cpu_bundle_matches_eager_on_the_host() {
    let mut failures = Vec::new();
    let mut table = String::from("set                       case                   kernels  max abs err (eager)\n");
    for set in SETS {
        let dirs = bundles(set);
        // Host kernels loaded over the set's bundles (cumsum, for one,
        // is an extern `aten.cumsum` call on the CPU, with no kernel).
        let mut kernels = 0;
        let names: Vec<String> = dirs.iter().map(|d| common::case_name(d)).collect();
        for want in set.cases {
            if !names.iter().any(|n| n == want) {
                failures.push(format!("{}/{want}: no bundle", set.dir));
            }
        }
        for dir in dirs {
            let name = format!("{}/{}", set.dir, common::case_name(&dir));
            let exported_by = Bundle::open(&dir).ok().and_then(|b| b.meta().provenance.torch.clone());
            if !exported_by.as_deref().is_some_and(|t| t.starts_with(set.torch)) {
                failures.push(format!(
                    "{name}: exported by PyTorch {exported_by:?}, not {}x",
                    set.torch
                ));
            }
            if let Some(isa) = isa_this_cpu_lacks(&dir) {
                // Its images cannot run here: loading them must be refused, naming the ISA.
                match check(&dir) {
                    Err(e) if e.contains(&format!("`{isa}` vector ISA")) => {
                        println!("{name}: not run, this CPU lacks {isa} (refused: {e})");
                    }
                    other => failures.push(format!(
                        "{name}: needs {isa}, which this CPU lacks, but was not refused for it: {:?}",
                        other.err()
                    )),
                }
                continue;
            }
            match check(&dir) {
                Err(e) => failures.push(format!("{name}: {e}")),
                Ok(o) => {
                    if let Some(e) = o.comparison.first_error() {
                        failures.push(format!("{name}: {e}"));
                    }
                    if let Some(e) = o.mutated.as_ref().and_then(|m| m.first_error()) {
                        failures.push(format!("{name}: against eager: {e}"));
                    }
                    kernels += o.kernels;
                    let err = o
                        .comparison
                        .eager
                        .max_errors()
                        .map_or("-".to_string(), |(a, _)| format!("{a:.3e}"));
                    table += &format!(
                        "{:<25} {:<22} {:>7}  {err}\n",
                        set.dir,
                        common::case_name(&dir),
                        o.kernels
                    );
                }
            }
        }
        if kernels < set.cases.len() {
            failures.push(format!("{}: only {kernels} host kernels loaded in all", set.dir));
        }
    }
    println!("{table}");
    common::assert_no_failures(&failures);
}

#[test]
fn every_kernel_of_a_cpu_bundle_is_of_its_backend() {
    for set in SETS {
        for dir in bundles(set) {
            let bundle = Bundle::open(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for k in bundle.program().kernels.values() {
                let kind = k.backend.keyword();
                assert_eq!(
                    kind,
                    set.backend,
                    "{}: kernel {} is a {kind} kernel",
                    dir.display(),
                    k.name
                );
                assert!(
                    dir.join(host_kernels::image_path(k.name.as_str())).is_file(),
                    "{}: no image for {}",
                    dir.display(),
                    k.name
                );
            }
        }
    }
}

/// The KV-cache decode step writes both caches (`index_copy_` at the
/// position): the bundle records them, the host run leaves eager's caches in
/// the input tensors, and a comparison of the caches as they were before the
/// call fails (the check is not vacuous). `wrapir run` reports each one.
#[test]
fn mutated_inputs_are_judged_after_the_call() {
    let dir = common::root().join("fixtures/inductor/bundles_cpu_2.15/ops/kv_cache_decode");
    let bundle = Bundle::open(&dir).unwrap();
    let mutated = bundle.meta().mutated_inputs.clone().expect("recorded");
    let users: Vec<&str> = mutated
        .iter()
        .map(|g| bundle.meta().input_names[g.as_str()].as_str())
        .collect();
    assert_eq!(users, ["k_cache", "v_cache"]);
    let o = check(&dir).unwrap();
    let m = o.mutated.expect("the bundle records mutated inputs");
    assert_eq!(m.inputs.len(), 2);
    assert!(m.is_ok(), "{:?}", m.first_error());
    let before = bundle.inputs().unwrap().unwrap();
    let stale = common::compare_mutated_with_bundle(&bundle, &before).unwrap().unwrap();
    assert!(
        stale.inputs.iter().all(|i| i.mismatch.is_some()),
        "the caches before the call must differ from eager's after it: {stale:?}"
    );
    // A bundle without the record (exported before mutations were recorded) has none.
    let old = Bundle::open(&common::root().join("fixtures/inductor/bundles_cpu/cpp/softmax")).unwrap();
    assert_eq!(old.meta().mutated_inputs, None);

    let run = common::wrapir(&["run", dir.to_str().unwrap(), "--device", "cpu"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("mutated inputs against eager: 2 match"),
        "{}",
        run.stdout
    );
    for (g, user) in mutated.iter().zip(&users) {
        common::assert_contains(&run.stdout, &format!("  input `{g}` (`{user}`) after the call: "));
    }
}

#[test]
fn wrapir_run_on_cpu_matches_eager() {
    for bundle in [
        "fixtures/inductor/bundles_cpu/cpp/softmax",
        "fixtures/inductor/bundles_cpu/halide/layer_norm",
    ] {
        let run = common::wrapir(&["run", bundle, "--device", "cpu"]);
        assert_eq!(run.code, 0, "{bundle}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.starts_with("device: cpu\n"), "{}", run.stdout);
        assert!(run.stdout.contains("against eager: 1 outputs match"), "{}", run.stdout);
    }
}

/// FlexAttention's C++ kernels were generated for AVX2: the Python lowering
/// compiles them under Inductor's `cpp.simdlen` of that ISA (Inductor would
/// otherwise build the AVX2 source with this CPU's widest vectors), and a
/// kernel of an ISA no `cpp.simdlen` selects is refused when the program is read.
#[test]
fn python_lowering_compiles_vector_isa_kernels_for_their_isa() {
    for set in ["bundles_cpu", "bundles_cpu_2.15"] {
        let dir = common::root()
            .join("fixtures/inductor")
            .join(set)
            .join("families/flex_attention");
        let program = Bundle::open(&dir).unwrap().program().clone();
        let info = wrapir::ir::validate(&program).unwrap();
        let py = wrapir::lower::python::write_string(&info, &Default::default()).unwrap();
        let cpp_kernels = program
            .kernels
            .values()
            .filter(|k| matches!(k.backend, KernelBackend::Cpp(_)))
            .count();
        assert_eq!(
            py.matches("with torch._inductor.config.patch({'cpp.simdlen': 256}):  # its image's ISA, avx2\n    cpp_")
                .count(),
            cpp_kernels,
            "{set}:\n{py}"
        );
        // An ISA no `cpp.simdlen` selects never reaches a lowering: reading
        // the program refuses it, naming it and the known ones.
        let json = program.to_json().replacen("\"isa\": \"avx2\"", "\"isa\": \"neon\"", 1);
        assert!(json.contains("\"isa\": \"neon\""), "the program names no ISA");
        let e = Program::from_json(&json).unwrap_err();
        common::assert_contains(&e.to_string(), "neon");
        common::assert_contains(&e.to_string(), "avx512");
    }
}

/// A copy of `case`'s bundle whose program is changed by `edit`.
fn edited(test: &str, case: &str, edit: impl FnOnce(&mut Program)) -> PathBuf {
    let src = common::root().join("fixtures/inductor/bundles_cpu").join(case);
    let dst = common::scratch("cpu_bundles", test);
    common::copy_dir(&src, &dst);
    let bundle = Bundle::open(&dst).unwrap();
    let mut program = bundle.program().clone();
    edit(&mut program);
    std::fs::write(dst.join("program.json"), program.to_json()).unwrap();
    dst
}

#[test]
fn a_cpp_image_compiled_for_other_arguments_is_refused() {
    let dir = edited("cpp_signature", "cpp/pointwise", |p| {
        for k in p.kernels.values_mut() {
            if let KernelBackend::Cpp(m) = &mut k.backend {
                m.arg_types[0] = "const double*".into();
            }
        }
    });
    let err = check(&dir).err().expect("a mismatching image must be refused");
    assert!(
        err.contains("cpp_fused") && err.contains("compiled for arguments"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_halide_image_with_other_dimensions_is_refused() {
    let dir = edited("halide_dims", "halide/pointwise", |p| {
        for k in p.kernels.values_mut() {
            if let KernelBackend::Halide(m) = &mut k.backend {
                let a = &mut m.argtypes[0];
                a.shape.as_mut().unwrap().push("1".into());
                a.stride.as_mut().unwrap().push("1".into());
            }
        }
    });
    let err = check(&dir).err().expect("a mismatching image must be refused");
    assert!(err.contains("halide_kernel_0") && err.contains("dimensions"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_image_names_the_kernel_and_file() {
    let src = common::root().join("fixtures/inductor/bundles_cpu/halide/softmax");
    let dst = common::scratch("cpu_bundles", "missing_image");
    common::copy_dir(&src, &dst);
    let bundle = Bundle::open(&dst).unwrap();
    let first = host_kernels::host_kernel_names(bundle.program())[0].to_string();
    std::fs::remove_file(dst.join(host_kernels::image_path(&first))).unwrap();
    let err = check(&dst).err().expect("a missing image must be an error");
    assert!(err.contains(&first) && err.contains(".so"), "{err}");
    let _ = std::fs::remove_dir_all(&dst);
}

#[test]
fn a_packed_cpu_bundle_runs_its_kernels() {
    let dir = common::scratch("cpu_bundles", "package");
    for (case, file) in [("cpp/mm_gelu", "cpp.wirpkg"), ("halide/small_cnn", "halide.wirpkg")] {
        let package = dir.join(file);
        let bundle = format!("fixtures/inductor/bundles_cpu/{case}");
        let pack = common::wrapir(&["pack", &bundle, "-o", package.to_str().unwrap()]);
        assert_eq!(pack.code, 0, "{}{}", pack.stdout, pack.stderr);
        let run = common::wrapir(&["run", package.to_str().unwrap(), "--device", "cpu"]);
        assert_eq!(run.code, 0, "{case}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("against eager: 1 outputs match"), "{}", run.stdout);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A package's host kernels are loaded from anonymous in-memory files (C++
/// kernels on Linux) or written into a private scratch directory of
/// unpredictable name (Halide kernels, which find their runtime through a
/// directory): symlinks planted in the temporary directory (directory and
/// file symlinks, under the names the images and scratch directories once
/// had, the process ids the run may get included, and others) lead nowhere,
/// nothing outside the scratch directory changes, nothing is left behind,
/// and the runs succeed.
#[test]
fn a_package_run_writes_only_into_its_own_private_scratch_directory() {
    let dir = common::scratch("cpu_bundles", "planted_symlinks");
    let tmp = dir.join("tmp");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let victim = elsewhere.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    // The old scratch directories were `<prefix>-<pid>`: plant them for the
    // next process ids (the runs below take some of them), pointing elsewhere.
    let last_pid: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(std::process::id());
    let mut dir_links: Vec<String> = vec!["wrapir-host-kernels".into(), "wrapir-rank-kernels".into()];
    // File symlinks under the names of images, scratch folders and partial packages.
    let mut file_links: Vec<String> = [
        "kernels",
        "images",
        "halide_runtime.so",
        "cpp_fused_gelu_0.so",
        "halide_kernel_0.so",
    ]
    .map(String::from)
    .to_vec();
    for pid in last_pid..last_pid + 200 {
        dir_links.push(format!("wrapir-host-kernels-{pid}"));
        dir_links.push(format!("wrapir-rank-kernels-{pid}"));
        // `pack` wrote `.<package>.partial-<pid>` beside the package.
        file_links.push(format!(".cpp.wirpkg.partial-{pid}"));
        file_links.push(format!(".halide.wirpkg.partial-{pid}"));
    }
    for name in &dir_links {
        std::os::unix::fs::symlink(&elsewhere, tmp.join(name)).unwrap();
    }
    for name in &file_links {
        std::os::unix::fs::symlink(&victim, tmp.join(name)).unwrap();
    }
    let mut expected = common::listing(&tmp);
    for (case, file) in [("cpp/mm_gelu", "cpp.wirpkg"), ("halide/small_cnn", "halide.wirpkg")] {
        // The package is written into the shared directory too.
        let package = tmp.join(file);
        let bundle = format!("fixtures/inductor/bundles_cpu/{case}");
        let pack = common::wrapir(&["pack", &bundle, "-o", package.to_str().unwrap()]);
        assert_eq!(pack.code, 0, "{}{}", pack.stdout, pack.stderr);
        expected.push(file.to_string());
        expected.sort();
        let run = common::wrapir_with_env(
            &["run", package.to_str().unwrap(), "--device", "cpu"],
            &[("TMPDIR", &tmp)],
        );
        assert_eq!(run.code, 0, "{case}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stdout.contains("against eager: 1 outputs match"),
            "{case}: {}",
            run.stdout
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "{case}");
        assert_eq!(common::listing(&tmp), expected, "{case}: pack or run left files behind");
        for name in &dir_links {
            assert_eq!(std::fs::read_link(tmp.join(name)).unwrap(), elsewhere, "{case}: {name}");
        }
        for name in &file_links {
            assert_eq!(std::fs::read_link(tmp.join(name)).unwrap(), victim, "{case}: {name}");
        }
        assert_eq!(
            common::listing(&elsewhere),
            ["victim"],
            "{case}: the run wrote outside its scratch directory"
        );
    }
    // On Linux a C++ package's kernels load with no scratch directory at all.
    let cpp = Bundle::open(&tmp.join("cpp.wirpkg")).unwrap();
    let loaded =
        host_kernels::load_kernels_from(&mut HostBackend::default(), cpp.program(), &cpp.kernel_images(), None);
    if cfg!(target_os = "linux") {
        assert_eq!(loaded.unwrap(), host_kernels::host_kernel_names(cpp.program()).len());
    } else {
        common::assert_contains(&loaded.unwrap_err().to_string(), "give a scratch directory");
    }
    // The library refuses a scratch path that exists already (here a planted
    // directory symlink) rather than writing through it.
    let opened = Bundle::open(&tmp.join("halide.wirpkg")).unwrap();
    let planted = tmp.join("planted");
    std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
    let err = host_kernels::load_kernels_from(
        &mut HostBackend::default(),
        opened.program(),
        &opened.kernel_images(),
        Some(&planted),
    )
    .unwrap_err()
    .to_string();
    common::assert_contains(&err, "cannot create the private scratch directory");
    assert_eq!(
        common::listing(&elsewhere),
        ["victim"],
        "the library wrote through a symlink"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host image that is cut short, is not ELF, or was built for another
/// machine is refused before the dynamic loader maps it (a truncated
/// shared object used to kill the process with SIGBUS there), naming the
/// kernel, the file and what is wrong; the Halide runtime is checked too.
#[test]
fn corrupt_and_foreign_host_images_are_errors_not_signals() {
    let image_of = |dir: &Path| {
        let bundle = Bundle::open(dir).unwrap();
        let first = host_kernels::host_kernel_names(bundle.program())[0].to_string();
        (first.clone(), dir.join(host_kernels::image_path(&first)))
    };
    type Edit = fn(Vec<u8>) -> Vec<u8>;
    let edits: &[(&str, &str, Edit, &str)] = &[
        (
            "cpp/pointwise",
            "truncated",
            |b| b[..3000].to_vec(),
            "past its 3000 bytes",
        ),
        (
            "cpp/pointwise",
            "garbage",
            |_| b"garbage".to_vec(),
            "too short for an ELF64 header",
        ),
        (
            "cpp/pointwise",
            "aarch64",
            |mut b| {
                b[18..20].copy_from_slice(&183u16.to_le_bytes());
                b
            },
            "compiled for ELF machine 183",
        ),
        (
            "halide/pointwise",
            "truncated_halide",
            |b| b[..b.len() / 2].to_vec(),
            "past its",
        ),
    ];
    for (case, test, edit, want) in edits {
        let dir = common::scratch("cpu_bundles", test);
        common::copy_dir(&common::root().join("fixtures/inductor/bundles_cpu").join(case), &dir);
        let (kernel, path) = image_of(&dir);
        std::fs::write(&path, edit(std::fs::read(&path).unwrap())).unwrap();
        let err = check(&dir)
            .err()
            .unwrap_or_else(|| panic!("{test}: a bad image must be refused"));
        assert!(
            err.contains(&kernel) && err.contains(".so") && err.contains(want),
            "{test}: {err}"
        );
        let run = common::wrapir(&["run", dir.to_str().unwrap(), "--device", "cpu"]);
        assert_eq!(run.code, 2, "{test}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(want), "{test}: {}", run.stderr);
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The Halide runtime cut short.
    let dir = common::scratch("cpu_bundles", "truncated_runtime");
    common::copy_dir(
        &common::root().join("fixtures/inductor/bundles_cpu/halide/pointwise"),
        &dir,
    );
    let runtime = dir.join(host_kernels::HALIDE_RUNTIME);
    let bytes = std::fs::read(&runtime).unwrap();
    std::fs::write(&runtime, &bytes[..bytes.len() / 3]).unwrap();
    let err = check(&dir).err().expect("a truncated runtime must be refused");
    assert!(err.contains("halide_runtime.so") && err.contains("past its"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `wrapir check` of a CPU bundle: every lowering supports it (the
/// standalone C++ wrapper too, its extern ops on the runtime's host
/// context). A lowering that does not support a program (the standalone
/// wrapper of an extern op on an XPU) is reported as unsupported and fails
/// the check only when it was asked for by name.
#[test]
fn check_reports_unsupported_lowerings_and_fails_only_when_named() {
    let bundle = "fixtures/inductor/bundles_cpu/cpp/addmm_relu";
    let r = common::wrapir(&["check", bundle, "--lowering", "cpp-standalone"]);
    r.assert_exit(0);
    assert!(!r.stdout.contains("unsupported"), "{}", r.stdout);
    let dir = common::scratch("cpu_bundles", "unsupported");
    let program = common::write_one_op_program(&dir, "xpu_relu.wir", "torch.ops.aten.relu.default", "xpu:0");
    let program = program.to_string_lossy().into_owned();
    let r = common::wrapir(&["check", &program]);
    r.assert_exit(0);
    common::assert_contains(
        &r.stdout,
        "unsupported cpp-standalone: graph main, line 0 `extern buf0 = torch.ops.aten.relu.default(",
    );
    common::assert_contains(
        &r.stdout,
        "on xpu:0: the runtime runs extern ops on CUDA devices and the host",
    );
    assert!(!r.stdout.contains("error "), "{}", r.stdout);
    let r = common::wrapir(&["check", &program, "--lowering", "cpp-standalone"]);
    r.assert_exit(1);
    common::assert_contains(&r.stdout, "unsupported cpp-standalone:");
    let r = common::wrapir(&["check", &program, "--lowering", "python", "--lowering", "fx"]);
    r.assert_exit(0);
    let _ = std::fs::remove_dir_all(&dir);
}
