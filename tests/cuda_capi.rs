#![cfg(feature = "cuda")]
//! The runtime library's C ABI (`wrapir::capi`, `wrapir_rt.h`)
//! on a GPU: a bundle's inputs loaded as `wrapir run` places them, extern
//! ops through `wrapir_rt_call` equal to the host backend's, runtime-owned
//! results (`nonzero`'s data-dependent size), outputs written as
//! safetensors, every bad argument a status and a message, and a C program
//! linked against `libwrapir_runtime.so`.
//!
//! `cargo build -p wrapir-runtime && cargo test --features cuda --test cuda_capi`
//! on a machine with a GPU (the link test finds the library next to the
//! test's target directory, or in `WRAPIR_RUNTIME_DIR`; it also passes
//! without a GPU, where every call must fail with the device status).

mod common;

use common::root;
use indexmap::IndexMap;
use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::process::Command;
use wrapir::capi::*;
use wrapir::exec::host::HostBackend;
use wrapir::exec::{safetensors, Backend, ExternCall, Tensor, Value};

/// The checkout: `CARGO_MANIFEST_DIR` at run time (a test binary copied to a
/// GPU machine runs in another checkout), else where it was built.

fn bundle(name: &str) -> CString {
    CString::new(
        root()
            .join("fixtures/inductor/bundles")
            .join(name)
            .to_string_lossy()
            .as_bytes(),
    )
    .unwrap()
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string owned by the runtime's thread-local slot.
    unsafe { CStr::from_ptr(wrapir_rt_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn ok(status: i32, what: &str) {
    assert_eq!(status, WRAPIR_RT_OK, "{what}: status {status}: {}", last_error());
}

/// A bundle's graph inputs on the device, by name.
struct Loaded {
    tensors: Vec<(String, *mut WrapirRtTensor)>,
}

impl Loaded {
    fn new(name: &str) -> Loaded {
        let mut inputs: *mut WrapirRtInputs = std::ptr::null_mut();
        // SAFETY: valid strings and out-pointer; the default stream.
        ok(
            unsafe {
                wrapir_rt_load_inputs(
                    0,
                    bundle(name).as_ptr(),
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    &mut inputs,
                )
            },
            "wrapir_rt_load_inputs",
        );
        let mut tensors = Vec::new();
        // SAFETY: `inputs` is live until freed below.
        unsafe {
            for i in 0..wrapir_rt_inputs_num_tensors(inputs) {
                let name = CStr::from_ptr(wrapir_rt_inputs_name(inputs, i))
                    .to_string_lossy()
                    .into_owned();
                let mut t = std::ptr::null_mut();
                ok(wrapir_rt_inputs_take(inputs, i, &mut t), "wrapir_rt_inputs_take");
                tensors.push((name, t));
            }
            wrapir_rt_inputs_free(inputs, std::ptr::null_mut());
        }
        Loaded { tensors }
    }

    fn desc(&self, i: usize) -> WrapirRtTensorDesc {
        let mut d = std::mem::MaybeUninit::<WrapirRtTensorDesc>::uninit();
        // SAFETY: a live runtime tensor and a writable descriptor.
        ok(
            unsafe { wrapir_rt_tensor_desc(self.tensors[i].1, d.as_mut_ptr()) },
            "wrapir_rt_tensor_desc",
        );
        // SAFETY: written on success.
        unsafe { d.assume_init() }
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        for (_, t) in &self.tensors {
            // SAFETY: each taken tensor is released once.
            unsafe { wrapir_rt_tensor_free(*t, std::ptr::null_mut()) };
        }
    }
}

fn tensor_arg(desc: WrapirRtTensorDesc) -> WrapirRtArg {
    WrapirRtArg {
        kind: WRAPIR_RT_ARG_TENSOR,
        dtype: 0,
        name: std::ptr::null(),
        tensor: desc,
        int_value: 0,
        float_value: 0.0,
        string_value: std::ptr::null(),
        items: std::ptr::null(),
        num_items: 0,
    }
}

/// Writes `tensors` through the ABI and reads the file back.
fn saved(tensors: &[(&str, WrapirRtTensorDesc)]) -> IndexMap<String, Tensor> {
    let path = std::env::temp_dir().join(format!(
        "wrapir_cuda_capi_{}_{}.safetensors",
        std::process::id(),
        tensors.len()
    ));
    let c_path = CString::new(path.to_string_lossy().as_bytes()).unwrap();
    let names: Vec<CString> = tensors.iter().map(|(n, _)| CString::new(*n).unwrap()).collect();
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let descs: Vec<*const WrapirRtTensorDesc> = tensors.iter().map(|(_, d)| d as *const _).collect();
    // SAFETY: `tensors.len()` valid names and descriptors of live runtime tensors.
    ok(
        unsafe {
            wrapir_rt_save_safetensors(
                0,
                c_path.as_ptr(),
                name_ptrs.as_ptr(),
                descs.as_ptr(),
                tensors.len() as i64,
                std::ptr::null_mut(),
            )
        },
        "wrapir_rt_save_safetensors",
    );
    let read = safetensors::parse(&std::fs::read(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    read
}

fn stored_inputs(name: &str) -> IndexMap<String, Tensor> {
    let path = root()
        .join("fixtures/inductor/bundles")
        .join(name)
        .join("inputs.safetensors");
    safetensors::parse(&std::fs::read(path).unwrap()).unwrap()
}

fn host_call(op: &str, args: &[Value<Tensor>]) -> Value<Tensor> {
    let mut host = HostBackend::default();
    let kwargs = IndexMap::new();
    host.call_extern(ExternCall::new(op, args, &kwargs)).unwrap()
}

#[test]
fn inputs_load_as_stored_and_save_back() {
    let loaded = Loaded::new("feat_extern_addmm");
    let stored = stored_inputs("feat_extern_addmm");
    let descs: Vec<(String, WrapirRtTensorDesc)> = (0..loaded.tensors.len())
        .map(|i| (loaded.tensors[i].0.clone(), loaded.desc(i)))
        .collect();
    let named: Vec<(&str, WrapirRtTensorDesc)> = descs.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let back = saved(&named);
    assert_eq!(back.len(), stored.len());
    for (name, t) in &stored {
        assert_eq!(
            back[name].to_f64_vec().unwrap(),
            t.to_f64_vec().unwrap(),
            "input `{name}`"
        );
    }
}

/// `wrapir_rt_call` of `op` on `args` into `slots`, on the default stream,
/// with no expected layouts: its status.
fn raw_call(op: &CStr, args: &[WrapirRtArg], slots: &mut [*mut WrapirRtTensor]) -> i32 {
    // SAFETY: `args` and `slots` are as long as passed; their contents are
    // what the callers test.
    unsafe {
        wrapir_rt_call(
            0,
            op.as_ptr(),
            args.as_ptr(),
            args.len() as i64,
            std::ptr::null(),
            std::ptr::null_mut(),
            slots.as_mut_ptr(),
            slots.len() as i64,
        )
    }
}

/// Calls `op` through the ABI on the default stream with one result slot:
/// the result (the caller frees it) and its descriptor.
fn call_one(op: &str, args: &[WrapirRtArg]) -> (*mut WrapirRtTensor, WrapirRtTensorDesc) {
    let mut slot = [std::ptr::null_mut::<WrapirRtTensor>()];
    ok(raw_call(&CString::new(op).unwrap(), args, &mut slot), op);
    let [result] = slot;
    let mut d = std::mem::MaybeUninit::<WrapirRtTensorDesc>::uninit();
    // SAFETY: a live result and a writable descriptor.
    ok(unsafe { wrapir_rt_tensor_desc(result, d.as_mut_ptr()) }, "desc");
    // SAFETY: written on success.
    (result, unsafe { d.assume_init() })
}

#[test]
fn mm_through_the_abi_equals_the_host() {
    let loaded = Loaded::new("feat_extern_addmm");
    // arg0_1 is [129, 129], arg1_1 [129, 1].
    let args = [tensor_arg(loaded.desc(0)), tensor_arg(loaded.desc(1))];
    let (result, d) = call_one("extern_kernels.mm", &args);
    assert_eq!(d.flags & WRAPIR_RT_BORROWED, 0, "a fresh result is the runtime's");
    let got = saved(&[("out", d)]).swap_remove("out").unwrap();
    let stored = stored_inputs("feat_extern_addmm");
    let want = host_call(
        "extern_kernels.mm",
        &[
            Value::Tensor(stored["arg0_1"].clone()),
            Value::Tensor(stored["arg1_1"].clone()),
        ],
    );
    let Value::Tensor(want) = want else {
        panic!("mm returns a tensor")
    };
    assert_eq!(got.size(), want.size());
    wrapir::exec::compare::compare(
        &got,
        &want,
        Some(wrapir::format::bundle_json::Tolerance { rtol: 1e-4, atol: 1e-4 }),
    )
    .unwrap_or_else(|m| panic!("mm through the ABI differs from the host's: {m}"));
    // SAFETY: released once.
    unsafe { wrapir_rt_tensor_free(result, std::ptr::null_mut()) };
}

#[test]
fn nonzero_returns_a_runtime_tensor_of_data_dependent_size() {
    let loaded = Loaded::new("nonzero");
    let args = [tensor_arg(loaded.desc(0))];
    let (result, d) = call_one("torch.ops.aten.nonzero.default", &args);
    let got = saved(&[("out", d)]).swap_remove("out").unwrap();
    let stored = stored_inputs("nonzero");
    let Value::Tensor(want) = host_call(
        "torch.ops.aten.nonzero.default",
        &[Value::Tensor(stored["arg0_1"].clone())],
    ) else {
        panic!("nonzero returns a tensor")
    };
    assert_eq!(got.size(), want.size());
    assert_eq!(got.to_i64_vec().unwrap(), want.to_i64_vec().unwrap());
    // SAFETY: released once.
    unsafe { wrapir_rt_tensor_free(result, std::ptr::null_mut()) };
}

/// A call that must fail with `status` and a message containing `expect`.
fn check_error(op: &str, args: &[WrapirRtArg], results: i64, status: i32, expect: &str) {
    let op = CString::new(op).unwrap();
    let mut slots = vec![std::ptr::null_mut::<WrapirRtTensor>(); results as usize];
    let got = raw_call(&op, args, &mut slots);
    let message = last_error();
    assert_eq!(got, status, "status for {op:?}: {message}");
    assert!(
        message.contains(expect),
        "message for {op:?}: {message}\n(expected it to contain {expect:?})"
    );
    assert!(slots.iter().all(|s| s.is_null()), "no result on failure");
}

#[test]
fn bad_calls_are_statuses_with_messages() {
    let loaded = Loaded::new("feat_extern_addmm");
    let a = loaded.desc(0);
    let mut bad_dtype = a;
    bad_dtype.layout.dtype = 99;
    let mut too_small = a;
    too_small.storage_bytes = 8;
    let mut host = a;
    host.flags = WRAPIR_RT_HOST;
    let mut negative = a;
    let sizes = [129i64, -1];
    negative.layout.sizes = sizes.as_ptr();
    let cases: Vec<(&str, Vec<WrapirRtArg>, i64, i32, &str)> = vec![
        (
            "extern_kernels.no_such_op",
            vec![tensor_arg(a)],
            1,
            WRAPIR_RT_ERR_OP,
            "no_such_op",
        ),
        (
            "extern_kernels.mm",
            vec![tensor_arg(a), tensor_arg(a)],
            3,
            WRAPIR_RT_ERR_OP,
            "the caller takes 3",
        ),
    ];
    for (op, args, results, status, expect) in &cases {
        check_error(op, args, *results, *status, expect);
    }
    // `mm` with a bad first argument, and what the message says.
    let bad_first = [
        (tensor_arg(bad_dtype), "dtype code 99"),
        (tensor_arg(too_small), "argument 0"),
        (tensor_arg(host), "host memory"),
        (tensor_arg(negative), "negative"),
        (
            WrapirRtArg {
                kind: 42,
                ..tensor_arg(a)
            },
            "unknown argument kind 42",
        ),
    ];
    for (first, expect) in bad_first {
        check_error(
            "extern_kernels.mm",
            &[first, tensor_arg(a)],
            1,
            WRAPIR_RT_ERR_ARGUMENT,
            expect,
        );
    }
    // Null pointers where arrays are promised.
    // SAFETY: the null pointers are what is tested.
    let status = unsafe {
        wrapir_rt_call(
            0,
            std::ptr::null(),
            std::ptr::null(),
            0,
            std::ptr::null(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(status, WRAPIR_RT_ERR_ARGUMENT, "{}", last_error());
    let op = CString::new("extern_kernels.mm").unwrap();
    // SAFETY: as above.
    let status = unsafe {
        wrapir_rt_call(
            0,
            op.as_ptr(),
            std::ptr::null(),
            2,
            std::ptr::null(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(status, WRAPIR_RT_ERR_ARGUMENT);
    assert!(last_error().contains("null pointer"), "{}", last_error());
    // A runtime that exists cannot be configured again.
    // SAFETY: a null bundle is allowed.
    assert_eq!(unsafe { wrapir_rt_init(0, std::ptr::null()) }, WRAPIR_RT_ERR_STATE);
    assert!(
        last_error().contains("before the device's first call"),
        "{}",
        last_error()
    );
}

/// The directory of `libwrapir_runtime.so`: `WRAPIR_RUNTIME_DIR`, else the
/// profile directory this test was built into (`target/<profile>`).
fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WRAPIR_RUNTIME_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/cuda_capi-<hash>
    exe.parent().and_then(|p| p.parent()).map(PathBuf::from).unwrap()
}

#[test]
fn a_c_program_links_and_calls_the_library() {
    let dir = runtime_dir();
    let lib = dir.join("libwrapir_runtime.so");
    assert!(
        lib.is_file(),
        "{} not found: build it first with `cargo build -p wrapir-runtime` (the same profile as this test), or set WRAPIR_RUNTIME_DIR",
        lib.display()
    );
    let work = std::env::temp_dir().join(format!("wrapir_cuda_capi_link_{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("wrapir_rt.h"), wrapir::lower::cpp::RT_HEADER).unwrap();
    let program = r#"#include "wrapir_rt.h"
#include <stdio.h>
#include <string.h>
int main(void) {
  /* An op the runtime lacks: a status and a message naming it, no crash
     (without a GPU or driver: the device status and a message saying so). */
  WrapirRtTensor* out = NULL;
  int32_t status = wrapir_rt_call(0, "extern_kernels.no_such_op", NULL, 0, NULL, NULL, &out, 1);
  const char* message = wrapir_rt_last_error();
  printf("status %d: %s\n", status, message);
  if (status != WRAPIR_RT_ERR_OP && status != WRAPIR_RT_ERR_DEVICE) return 1;
  if (strstr(message, "no_such_op") == NULL || out != NULL) return 1;
  /* A null op name. */
  if (wrapir_rt_call(0, NULL, NULL, 0, NULL, NULL, NULL, 0) != WRAPIR_RT_ERR_ARGUMENT) return 2;
  return 0;
}
"#;
    std::fs::write(work.join("probe.c"), program).unwrap();
    let exe = work.join("probe");
    let out = Command::new("cc")
        .arg("-std=c99")
        .arg("-I")
        .arg(&work)
        .arg(work.join("probe.c"))
        .arg("-L")
        .arg(&dir)
        .arg("-lwrapir_runtime")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc runs");
    common::assert_tool_ok(&out, format_args!("linking failed"));
    let run = Command::new(&exe).output().expect("the probe runs");
    let _ = std::fs::remove_dir_all(&work);
    assert!(
        run.status.success(),
        "the probe failed ({:?}):\n{}{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Whole programs through the runtime library: each bundle's package
/// (`wrapir lower --package`, compiled here with g++ against the driver and
/// `libwrapir_runtime.so`) runs on the bundle's inputs, twice, and its
/// outputs match the bundle's references (`wrapir compare`, `wrapir run`'s rules).
#[test]
fn standalone_packages_match_the_references() {
    let lib = runtime_dir();
    assert!(
        lib.join("libwrapir_runtime.so").is_file(),
        "{} has no libwrapir_runtime.so: build it first with `cargo build -p wrapir-runtime` (the same profile as this test), or set WRAPIR_RUNTIME_DIR",
        lib.display()
    );
    let include = common::cuda_include();
    let work = std::env::temp_dir().join(format!("wrapir_cuda_capi_packages_{}", std::process::id()));
    let wrapir = std::env::var("WRAPIR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_wrapir").to_string());
    let wrapir = wrapir.as_str();
    // Matrix products, a convolution net, data-dependent sizes, two outputs,
    // a size output, in-place scatter, attention, complex views.
    let cases = [
        "cat_mm",
        "softmax",
        "nonzero",
        "masked_select",
        "topk",
        "feat_topk_two_outputs",
        "feat_sym_output",
        "scatter_reduce_amax",
        "feat_complex_mul",
        "resnet",
        "gpt2",
    ];
    let mut failures = Vec::new();
    for case in cases {
        let bundle = root().join("fixtures/inductor/bundles").join(case);
        let pkg = work.join(case);
        let run = |cmd: &mut Command| {
            let out = cmd.output().unwrap_or_else(|e| panic!("{case}: {cmd:?}: {e}"));
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
            )
        };
        let (ok, log) = run(Command::new(wrapir).args([
            "lower",
            bundle.to_str().unwrap(),
            "--target",
            "cpp-standalone",
            "--package",
            pkg.to_str().unwrap(),
        ]));
        if !ok {
            failures.push(format!("{case}: lower: {log}"));
            continue;
        }
        let exe = pkg.join(case);
        let (ok, log) = run(Command::new("g++")
            .args(["-std=c++17", "-O1", "-I"])
            .arg(&include)
            .arg("-I")
            .arg(&pkg)
            .arg(format!("-DWRAPIR_CUBIN_DIR=\"{}\"", pkg.display()))
            .arg(format!("-DWRAPIR_PACKAGE_DIR=\"{}\"", pkg.display()))
            .arg(pkg.join("main.cpp"))
            .arg(pkg.join(format!("{case}.cpp")))
            .arg("-L")
            .arg(&lib)
            .arg("-lwrapir_runtime")
            .arg("-l:libcuda.so.1")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-o")
            .arg(&exe));
        if !ok {
            failures.push(format!("{case}: g++: {log}"));
            continue;
        }
        let outputs = pkg.join("outputs.safetensors");
        let (ok, log) = run(Command::new(&exe)
            .arg(bundle.join("inputs.safetensors"))
            .arg(&outputs)
            .arg("2"));
        if !ok {
            failures.push(format!("{case}: run: {log}"));
            continue;
        }
        let (ok, log) =
            run(Command::new(wrapir).args(["compare", bundle.to_str().unwrap(), outputs.to_str().unwrap()]));
        println!("{case}:\n{log}");
        if !ok {
            failures.push(format!("{case}: compare: {log}"));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(
        failures.is_empty(),
        "{} of {} packages failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
