#![cfg(feature = "cuda")]
//! Real Inductor bundles on the CUDA backend: every bundle runs on the GPU
//! (its cubins, cuBLAS for matmuls, the host fallback for other extern ops)
//! and matches eager PyTorch within the bundle's tolerance.
//!
//! Compiled only with the `cuda` feature, so builds without a GPU skip it;
//! on a machine with one: `cargo test --features cuda --test cuda`.

use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use wrapir::exec::compare::{compare, Tolerance};
use wrapir::exec::cuda::{run_program, CudaBackend, CudaOptions};
use wrapir::exec::{safetensors, Backend, Tensor, TensorSpec, Value};
use wrapir::ir::{DType, Device, Program};

/// The crate root: `CARGO_MANIFEST_DIR` at run time (cargo sets it; set it
/// when running the test binary elsewhere), else where it was built.
fn root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn bundles() -> Vec<PathBuf> {
    let dir = root().join("fixtures/inductor/bundles");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("program.json").is_file())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no bundles in {}", dir.display());
    v
}

fn tensors(path: &Path) -> IndexMap<String, Tensor> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    safetensors::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The expected tensors of the graph outputs: `graph_out<k>` when the
/// exporter wrote any, else all in file order.
fn expected_outputs(expected: &IndexMap<String, Tensor>) -> Vec<(&String, &Tensor)> {
    let graph: Vec<_> = expected.iter().filter(|(k, _)| k.starts_with("graph_out")).collect();
    if graph.is_empty() {
        expected.iter().collect()
    } else {
        graph
    }
}

/// Runs one bundle on the GPU and compares with eager; `Err` says why not.
fn check_bundle(dir: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.join("program.json")).map_err(|e| e.to_string())?;
    let program = Program::from_json(&text).map_err(|e| e.to_string())?;
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("bundle.json")).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let tolerance = Tolerance {
        rtol: json["tolerance"]["rtol"].as_f64().unwrap_or(2e-2),
        atol: json["tolerance"]["atol"].as_f64().unwrap_or(2e-2),
    };
    let inputs = tensors(&dir.join("inputs.safetensors"));
    let expected = tensors(&dir.join("expected.safetensors"));
    let options = CudaOptions { kernel_dir: dir.to_path_buf(), ..Default::default() };
    let out = run_program(&program, options, &inputs).map_err(|e| e.to_string())?;
    let got: Vec<_> = out.outputs.iter().filter_map(|v| if let Value::Tensor(t) = v { Some(t) } else { None }).collect();
    let expected = expected_outputs(&expected);
    if got.len() != expected.len() {
        return Err(format!("{} tensor outputs, {} expected", got.len(), expected.len()));
    }
    for (k, (g, (key, e))) in got.iter().zip(&expected).enumerate() {
        compare(g, e, Some(tolerance)).map_err(|m| format!("output {k} vs `{key}`: {m}"))?;
    }
    Ok(())
}

/// Bundles known not to run on cuda, with a substring of the error: extern
/// ops neither the GPU path nor the host fallback implements. The test fails
/// when one of them starts to pass, so the list cannot rot.
const KNOWN_FAILURES: &[(&str, &str)] = &[
    ("cond_branches", "does not implement op `torch.ops.aten.index.Tensor`"),
    ("masked_select", "does not implement op `torch.ops.aten.masked_select.default`"),
];

#[test]
fn every_bundle_matches_eager_on_cuda() {
    let mut failures = Vec::new();
    for dir in bundles() {
        let case = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let known = KNOWN_FAILURES.iter().find(|(c, _)| *c == case).map(|(_, e)| *e);
        match (check_bundle(&dir), known) {
            (Ok(()), None) => {}
            (Ok(()), Some(_)) => failures.push(format!("{case}: passes now; remove it from KNOWN_FAILURES")),
            (Err(e), Some(expected)) if e.contains(expected) => {}
            (Err(e), _) => failures.push(format!("{case}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Round trips through device memory keep values, strides and offsets.
#[test]
fn copies_round_trip_strided_views() {
    let mut backend = CudaBackend::new(CudaOptions::default()).unwrap();
    let cases: [(DType, &[f64]); 4] = [
        (DType::Float32, &[1.5, -2.0, 3.25, 0.0, 7.0, 8.0]),
        (DType::Bfloat16, &[1.0, 2.0, -3.0, 4.0, 0.5, 6.0]),
        (DType::Int64, &[1.0, -2.0, 3.0, 1e12, 5.0, 6.0]),
        (DType::Bool, &[1.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
    ];
    for (dtype, values) in cases {
        let host = Tensor::from_f64(dtype, values, &[2, 3]).unwrap();
        let transposed = host.view(&[3, 2], &[1, 3], 0).unwrap();
        let device = backend.copy_in(&transposed).unwrap();
        assert_eq!(backend.spec(&device).stride, vec![1, 3], "{dtype}");
        let back = backend.copy_out(&device).unwrap();
        assert_eq!(back.to_f64_vec().unwrap(), transposed.to_f64_vec().unwrap(), "{dtype}");
        let offset = backend.view(&device, &[2], &[3], 1).unwrap();
        assert_eq!(backend.copy_out(&offset).unwrap().to_f64_vec().unwrap(), vec![values[1], values[4]], "{dtype}");
    }
}

/// A view outside its allocation is an error, not an out-of-bounds pointer.
#[test]
fn views_are_bounds_checked() {
    let mut backend = CudaBackend::new(CudaOptions::default()).unwrap();
    let spec = TensorSpec::contiguous(DType::Float32, Device::cuda(0), &[4]);
    let t = backend.allocate(&spec).unwrap();
    let err = backend.view(&t, &[4], &[1], 1).unwrap_err();
    assert!(err.to_string().contains("needs 5 elements"), "{err}");
}
