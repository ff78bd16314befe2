#![cfg(feature = "cuda")]
//! The extern ops a Hugging Face mixture-of-experts layer leaves to the
//! backend (transformers' `grouped_mm` experts under `torch.compile`:
//! `aten.histc` counts the tokens per expert, `transformers.grouped_mm_fallback`
//! multiplies each expert's rows, or `aten._grouped_mm` for bf16 weights) on
//! the CUDA backend, with no host
//! fallback: PyTorch's recorded outputs (`fixtures/inductor/op_layouts.json`,
//! the same cases `tests/op_layouts.rs` holds the host to), the integer
//! inputs and range rules of PyTorch's CUDA `histc` (`SummaryOps.cu`), and
//! agreement with the host on larger inputs.
//!
//! Needs a GPU: `cargo test --features cuda --test cuda_moe`.

mod common;
#[path = "common/op_cases.rs"]
mod op_cases;

use indexmap::IndexMap;
use wrapir::exec::host::HostBackend;
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::ir::DType;

fn on_host(op: &str, args: &[Value<Tensor>], kwargs: &IndexMap<String, Value<Tensor>>) -> Vec<Tensor> {
    let result = HostBackend::default()
        .call_extern(ExternCall::new(op, args, kwargs))
        .unwrap_or_else(|e| panic!("host {op}: {e}"));
    common::tensors_of(&result)
}

fn t(dtype: DType, values: &[f64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_f64(dtype, values, size).unwrap())
}

/// Every `aten.histc`, `transformers.grouped_mm_fallback` and 2-D x 3-D
/// `aten._grouped_mm` case PyTorch recorded: the same layouts (the padded
/// rows of `_grouped_mm`'s bf16 result included) and values on the device.
/// Histograms are exact (float32 bins by the same arithmetic on both of
/// PyTorch's devices when the range is the data's or given); the grouped
/// GEMMs within 1e-4, bf16 within its recorded 0.13 (cuBLAS's summation
/// order against PyTorch's CPU BLAS).
#[test]
fn recorded_histc_and_grouped_mm_cases_match_pytorch() {
    let fixture = op_cases::fixture();
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in fixture["cases"].as_array().unwrap() {
        let op = case["op"].as_str().unwrap();
        let name = case["name"].as_str().unwrap();
        // `_grouped_mm` runs on the device in its 2-D x 3-D (mixture-of-experts) form.
        let on_gpu = op == "aten.histc"
            || op == "transformers.grouped_mm_fallback"
            || (op == "aten._grouped_mm" && name.starts_with("grouped_mm_2d3d"));
        if !on_gpu {
            continue;
        }
        ran += 1;
        let (call, args, kwargs) = op_cases::call(case);
        match common::extern_on_device(&call, &args, &kwargs) {
            Ok(got) => {
                let want = case["outputs"].as_array().unwrap();
                if got.len() != want.len() {
                    failures.push(format!("{name}: {} results, PyTorch returns {}", got.len(), want.len()));
                    continue;
                }
                for (g, w) in got.iter().zip(want) {
                    let mut w = w.clone();
                    if w["atol"].as_f64().is_some_and(|a| a > 0.0 && a < 1e-4) {
                        w["atol"] = serde_json::json!(1e-4);
                    }
                    failures.extend(op_cases::differences(g, &w).into_iter().map(|d| format!("{name}: {d}")));
                }
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(ran >= 11, "only {ran} cases");
    common::assert_no_failures(&failures);
}

/// PyTorch's CUDA `histc` on what its CPU kernel refuses or treats
/// otherwise: integer inputs (transformers bins `expert_ids.int()` on CUDA)
/// binned in int64 arithmetic, the data's range of an integer tensor, an
/// empty range widened in the input's type, NaN and infinities outside a
/// given range; an empty input; a NaN in the data's range and an unsupported
/// dtype are errors naming the op.
#[test]
fn histc_takes_integers_and_pytorchs_cuda_range_rules() {
    use DType::*;
    let none = IndexMap::new();
    let op = "torch.ops.aten.histc.default";
    let int = Value::Int;
    // (what, input, bins, min, max, expected counts in the input's dtype)
    let cases: Vec<(&str, Value<Tensor>, i64, i64, i64, Vec<f64>)> = vec![
        (
            // bin = v * 4 / 3 in int64: 0, 1, 2, 4 -> the last bin; 4 is past max.
            "int32 expert ids with a sentinel",
            t(Int32, &[0., 1., 1., 3., 2., 3., 3., 0., 4.], &[9]),
            4,
            0,
            3,
            vec![2., 2., 1., 3.],
        ),
        (
            // The data's range [5, 9]: bin = (v - 5) * 2 / 4.
            "int64, the data's range",
            t(Int64, &[5., 7., 7., 9.], &[4]),
            2,
            0,
            0,
            vec![1., 3.],
        ),
        (
            // The data's range [5, 5] widened to [4, 6]: bin = 1 * 4 / 2.
            "uint8, one value",
            t(Uint8, &[5., 5., 5.], &[3]),
            4,
            0,
            0,
            vec![0., 0., 3., 0.],
        ),
        (
            "float32, NaN and infinities outside [0, 1]",
            t(
                Float32,
                &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5, 1.0, 0.0],
                &[6],
            ),
            2,
            0,
            1,
            vec![1., 2.],
        ),
        ("empty", t(Float32, &[], &[0]), 3, 0, 1, vec![0., 0., 0.]),
    ];
    let mut failures = Vec::new();
    for (what, x, bins, min, max, want) in cases {
        let dtype = match &x {
            Value::Tensor(x) => x.dtype(),
            _ => unreachable!(),
        };
        match common::extern_on_device(op, &[x, int(bins), int(min), int(max)], &none) {
            Ok(got) => {
                let g = &got[0];
                if g.dtype() != dtype || g.size() != [bins] || g.stride() != [1] {
                    failures.push(format!("{what}: {}{:?} strides {:?}", g.dtype(), g.size(), g.stride()));
                }
                if g.to_f64_vec().unwrap() != want {
                    failures.push(format!("{what}: {:?}, expected {want:?}", g.to_f64_vec().unwrap()));
                }
            }
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    common::assert_no_failures(&failures);
    let nan = t(Float32, &[1.0, f64::NAN, 2.0], &[3]);
    let e = common::extern_on_device(op, &[nan, int(4), int(0), int(0)], &none).unwrap_err();
    assert!(e.contains("histc") && e.contains("not finite"), "{e}");
    let half = t(Float16, &[1.0, 2.0], &[2]);
    let e = common::extern_on_device(op, &[half, int(4), int(0), int(3)], &none).unwrap_err();
    assert!(e.contains("histc"), "{e}");
}

/// Larger inputs against the host: a float32 histogram of 100,000 values
/// (exact: the same arithmetic), and a float16 grouped GEMM with 64 rows over
/// 8 experts, a strided expert weight and empty experts (within 4e-3).
#[test]
fn larger_inputs_agree_with_the_host() {
    let none = IndexMap::new();
    let n = 100_000;
    let values: Vec<f64> = common::uniform_values(n, 7).iter().map(|v| v * 3.0 - 1.0).collect();
    let args = [
        t(DType::Float32, &values, &[n as i64]),
        Value::Int(100),
        Value::Float(-0.5),
        Value::Float(1.5),
    ];
    let got = common::extern_on_device("torch.ops.aten.histc.default", &args, &none).unwrap();
    let want = on_host("torch.ops.aten.histc.default", &args, &none);
    assert_eq!(got[0].to_f64_vec().unwrap(), want[0].to_f64_vec().unwrap());

    let (rows, k, n_out, experts) = (64i64, 32i64, 48i64, 8i64);
    let input = t(
        DType::Float16,
        &common::uniform_values((rows * k) as usize, 1),
        &[rows, k],
    );
    // [experts, n, k] transposed to [experts, k, n], as Mixtral passes its weights.
    let base = Tensor::from_f64(
        DType::Float16,
        &common::uniform_values((experts * n_out * k) as usize, 2),
        &[experts, n_out, k],
    )
    .unwrap();
    let weight = Value::Tensor(base.view(&[experts, k, n_out], &[n_out * k, 1, k], 0).unwrap());
    let offs = Value::Tensor(Tensor::from_i64(DType::Int32, &[5, 5, 20, 33, 33, 50, 60, 60], &[8]).unwrap());
    let args = [input, weight, offs];
    let op = "torch.ops.transformers.grouped_mm_fallback.default";
    let got = common::extern_on_device(op, &args, &none).unwrap();
    let want = on_host(op, &args, &none);
    assert_eq!((got[0].size(), got[0].stride()), (want[0].size(), want[0].stride()));
    let (g, w) = (got[0].to_f64_vec().unwrap(), want[0].to_f64_vec().unwrap());
    let worst = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
        .fold(0.0, f64::max);
    assert!(worst <= 4e-3, "relative error {worst}");
    // Rows 60..64 are past the last offset: zero.
    assert!(g[(60 * n_out) as usize..].iter().all(|v| *v == 0.0));
}
