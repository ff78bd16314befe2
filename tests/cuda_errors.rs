#![cfg(feature = "cuda")]
//! Error paths of the CUDA backend end in errors that name the problem,
//! never in a signal: an op with no device implementation, a missing or
//! corrupt kernel image, a cubin for another GPU architecture, a kernel that
//! faults on the device, a device allocation larger
//! than the device (from the backend and from a program's buffer), a block
//! or a shared-memory request beyond the device's limits, a bundle whose
//! inputs do not fit its program, and the
//! `wrapir` process itself exiting with status 1 or 2 (not a signal) after
//! each of them.
//!
//! Compiled only with the `cuda` feature; on a machine with a GPU:
//! `cargo test --features cuda --test cuda_errors`.

mod common;
use common::root;
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use wrapir::exec::cuda::{CudaBackend, CudaOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, TensorSpec, Value};
use wrapir::ir::{DType, Device};

/// The `wrapir` binary next to this test binary (cargo puts both in `target/<profile>`),
/// or `WRAPIR_BIN`.
fn wrapir_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WRAPIR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().join("wrapir")
}

/// Copies bundle `name` into a fresh temporary directory.
fn copy_bundle(name: &str, tag: &str) -> PathBuf {
    let src = root().join("fixtures/inductor/bundles").join(name);
    let dst = std::env::temp_dir().join(format!("wrapir-cuda-errors-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    common::copy_dir(&src, &dst);
    dst
}

/// Runs `wrapir run BUNDLE --device cuda`: exit code (None for a signal) and stderr.
fn run_cli(bundle: &Path) -> (Option<i32>, String) {
    let out = Command::new(wrapir_bin())
        .args(["run", bundle.to_str().unwrap(), "--device", "cuda"])
        .output()
        .expect("the wrapir binary (build it with --features cuda, or set WRAPIR_BIN)");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn an_op_without_a_device_implementation_is_an_error_naming_it() {
    let mut backend = CudaBackend::new(CudaOptions::from_env()).unwrap();
    let x = backend
        .copy_in(&Tensor::from_f64(DType::Float32, &[1.0, 2.0], &[2]).unwrap())
        .unwrap();
    let args = vec![Value::Tensor(x)];
    let kwargs: IndexMap<String, Value<_>> = IndexMap::new();
    let e = backend
        .call_extern(ExternCall::new("torch.ops.aten.no_such_op.default", &args, &kwargs))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no_such_op"), "{e}");
}

#[test]
fn an_allocation_larger_than_the_device_is_an_error() {
    let mut backend = CudaBackend::new(CudaOptions::from_env()).unwrap();
    // 2^40 f32 elements: 4 TiB.
    let e = backend
        .allocate(&TensorSpec::contiguous(DType::Float32, Device::cuda(0), &[1 << 40]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cuMemAllocAsync") || e.to_lowercase().contains("memory"),
        "{e}"
    );
    // The backend still works afterwards.
    let t = backend
        .copy_in(&Tensor::from_f64(DType::Float32, &[3.0], &[1]).unwrap())
        .unwrap();
    assert_eq!(backend.copy_out(&t).unwrap().to_f64_vec().unwrap(), vec![3.0]);
}

#[test]
fn the_cli_exits_with_a_status_not_a_signal_on_every_error_path() {
    // Missing kernel image.
    let b = copy_bundle("softmax", "missing-cubin");
    for e in std::fs::read_dir(b.join("kernels")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "cubin") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (code, err) = run_cli(&b);
    assert_eq!(code, Some(2), "missing cubin: {err}");
    assert!(err.contains("cubin"), "missing cubin: {err}");
    // A corrupt kernel image.
    let b = copy_bundle("softmax", "corrupt-cubin");
    for e in std::fs::read_dir(b.join("kernels")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "cubin") {
            std::fs::write(p, b"not an ELF image").unwrap();
        }
    }
    let (code, err) = run_cli(&b);
    assert_eq!(code, Some(2), "corrupt cubin: {err}");
    assert!(
        err.contains("kernel `triton_per_fused__softmax_exp_prepare_softmax_online_sub_0`")
            && err.contains("neither a cubin"),
        "corrupt cubin: {err}"
    );
    // A cubin for another GPU architecture: named with the kernel and both
    // architectures before anything launches.
    let b = copy_bundle("softmax", "other-arch");
    for e in std::fs::read_dir(b.join("kernels")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "cubin") {
            let mut image = std::fs::read(&p).unwrap();
            // sm_50 in either e_flags layout (see `wrapir::bundle::cubin_arch`).
            let mut flags = u32::from_le_bytes(image[48..52].try_into().unwrap());
            flags = match image[8] {
                7 => (flags & !0xff & !0x800) | 50,
                _ => (flags & !0xff00 & !0x8) | (50 << 8),
            };
            image[48..52].copy_from_slice(&flags.to_le_bytes());
            std::fs::write(p, image).unwrap();
        }
    }
    let (code, err) = run_cli(&b);
    assert_eq!(code, Some(2), "other arch: {err}");
    assert!(
        err.contains("kernel `triton_per_fused__softmax_exp_prepare_softmax_online_sub_0`")
            && err.contains("compiled for sm_50 (runs on sm_50 to sm_59), not for NVIDIA")
            && !err.contains("CUDA_ERROR"),
        "other arch: {err}"
    );
    // `check --device cuda` compares the images with the GPU present.
    let check = |bundle: &Path| {
        let out = Command::new(wrapir_bin())
            .args([
                "check",
                bundle.to_str().unwrap(),
                "--device",
                "cuda",
                "--no-translation",
            ])
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = check(&b);
    assert!(
        code == Some(1) && out.contains("compiled for sm_50 (runs on sm_50 to sm_59), not for NVIDIA"),
        "check, other arch: {code:?} {out}"
    );
    let (code, out) = check(&root().join("fixtures/inductor/bundles/softmax"));
    assert!(
        code == Some(0) && out.contains("cuda: every kernel image loads on NVIDIA"),
        "check: {code:?} {out}"
    );
    // A kernel that faults on the device (`trap`): the launch or the next
    // synchronisation reports the fault; the process still exits with a status.
    let b = copy_bundle("pointwise", "kernel-fault");
    let name = "triton_poi_fused_add_mul_relu_0";
    let ptx = format!(".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry {name}()\n{{\n    trap;\n}}\n");
    std::fs::write(b.join("kernels").join(format!("{name}.cubin")), ptx).unwrap();
    let (code, err) = run_cli(&b);
    assert!(matches!(code, Some(1 | 2)), "kernel fault: {code:?} {err}");
    assert!(
        err.contains("CUDA_ERROR") || err.to_lowercase().contains("launch"),
        "kernel fault names the driver error: {err}"
    );
    // Inputs that do not fit the program (another bundle's inputs).
    let b = copy_bundle("softmax", "wrong-inputs");
    std::fs::copy(
        root().join("fixtures/inductor/bundles/cat_mm/inputs.safetensors"),
        b.join("inputs.safetensors"),
    )
    .unwrap();
    let (code, err) = run_cli(&b);
    assert!(matches!(code, Some(1 | 2)), "wrong inputs: {code:?} {err}");
    // A convolution model and an attention model run to the end (status 0).
    for name in ["resnet", "gpt2"] {
        let (code, err) = run_cli(&root().join("fixtures/inductor/bundles").join(name));
        assert_eq!(code, Some(0), "{name}: {err}");
    }
}

#[test]
fn a_missing_library_is_an_error_naming_it() {
    // Hide every Python prefix (where NVIDIA's wheels put cuDNN) but keep the
    // loader's paths (the driver); a machine with cuDNN installed system-wide
    // still finds it, and then the run must simply succeed.
    let out = Command::new(wrapir_bin())
        .args([
            "run",
            root().join("fixtures/inductor/bundles/resnet").to_str().unwrap(),
            "--device",
            "cuda",
        ])
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .env_remove("WRAPIR_CUDA_LIBRARY_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => eprintln!("cuDNN is installed outside Python's directories here; nothing to check"),
        Some(2) => assert!(
            err.contains("cannot load cuDNN") && err.contains("WRAPIR_CUDA_LIBRARY_PATH"),
            "{err}"
        ),
        other => panic!("exit {other:?} (a signal is None): {err}"),
    }
}

/// Copies bundle `name` and rewrites its `program.json` with `edit`.
fn edited_bundle(name: &str, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let b = copy_bundle(name, tag);
    let path = b.join("program.json");
    let mut program: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut program);
    std::fs::write(&path, serde_json::to_vec(&program).unwrap()).unwrap();
    b
}

#[test]
fn device_limits_and_exhausted_memory_are_errors_naming_the_buffer_or_kernel() {
    let kernel = "triton_poi_fused_add_mul_relu_0";
    // A 4 TiB buffer: the allocation fails on the device, named with its buffer.
    let b = edited_bundle("pointwise", "oom", |p| {
        p["main"]["buffers"]["buf0"]["layout"]["size"] = serde_json::json!([64, 1u64 << 34]);
        p["main"]["buffers"]["buf0"]["layout"]["stride"] = serde_json::json!([1u64 << 34, 1]);
    });
    let (code, err) = run_cli(&b);
    assert!(matches!(code, Some(1 | 2)), "oom: {code:?} {err}");
    assert!(
        err.contains("buf0") && err.to_lowercase().contains("memory"),
        "oom: {err}"
    );
    // 64 warps (2048 threads) a block: more than any NVIDIA GPU launches.
    let b = edited_bundle("pointwise", "block-too-large", |p| {
        p["kernels"][kernel]["backend"]["num_warps"] = serde_json::json!(64);
    });
    let (code, err) = run_cli(&b);
    assert!(matches!(code, Some(1 | 2)), "block too large: {code:?} {err}");
    assert!(
        err.contains(kernel) && err.contains("launches 2048 threads a block (num_warps 64)"),
        "block too large names the kernel and the limit: {err}"
    );
    // 1 MiB of dynamic shared memory a block: more than the device has.
    let b = edited_bundle("pointwise", "shared-too-large", |p| {
        p["kernels"][kernel]["backend"]["shared_mem"] = serde_json::json!(1 << 20);
    });
    let (code, err) = run_cli(&b);
    assert!(matches!(code, Some(1 | 2)), "shared memory too large: {code:?} {err}");
    assert!(
        err.contains(kernel) && err.contains("shared"),
        "shared memory too large names the kernel and the limit: {err}"
    );
    eprintln!("messages:\n{err}");
}
