#![cfg(feature = "cuda")]
//! Real Inductor bundles on the CUDA backend: every bundle runs on the GPU
//! (its cubins, the device op table for extern ops, no host fallback) under
//! the math modes its `bundle.json` records, and matches eager PyTorch within
//! the bundle's tolerance (and Inductor's compiled outputs within
//! `compiled_tolerance`, where the bundle has them).
//!
//! Compiled only with the `cuda` feature, so builds without a GPU skip it;
//! on a machine with one: `cargo test --features cuda --test cuda`.

mod common;

use common::read_tensors as tensors;
use indexmap::IndexMap;
use std::path::Path;
use wrapir::bundle::KernelImages;
use wrapir::exec::compare::{compare_leaves, output_leaves};
use wrapir::exec::cuda::{run_program, CudaBackend, CudaOptions, CudaPaths};
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, TensorSpec, Value};
use wrapir::format::bundle_json::{BundleMeta, MathModes, Tolerance};
use wrapir::ir::{DType, Device, Program};

/// Runs one bundle on the GPU (host fallback on, so that an op without a
/// device implementation is reported rather than aborting the run) and
/// compares with eager and, when the bundle has them, Inductor's compiled
/// outputs; `Ok` holds the extern ops that ran through the host fallback,
/// `Err` says why it did not match.
fn check_bundle(dir: &Path) -> Result<Vec<(String, usize)>, String> {
    let text = std::fs::read_to_string(dir.join("program.json")).map_err(|e| e.to_string())?;
    let program = Program::from_json(&text).map_err(|e| e.to_string())?;
    let meta = BundleMeta::from_json(&std::fs::read_to_string(dir.join(BundleMeta::FILE)).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let tolerance = meta.tolerance.unwrap_or(Tolerance { rtol: 2e-2, atol: 2e-2 });
    let inputs = tensors(&dir.join("inputs.safetensors"));
    let expected = tensors(&dir.join(BundleMeta::EXPECTED));
    let options = CudaOptions {
        host_fallback: true,
        paths: CudaPaths::from_env(),
        ..CudaOptions::for_bundle(KernelImages::from(dir), &meta)
    };
    let log = options.extern_ops.clone();
    let out = run_program(&program, options, &inputs).map_err(|e| e.to_string())?;
    // Tensors, and integer outputs where the bundle stores them.
    let got = output_leaves(&out.outputs);
    let ints = meta.int_outputs.as_deref();
    if let Some(e) = compare_leaves(&got, &expected, ints, Some(tolerance)).first_error() {
        return Err(e);
    }
    let compiled = dir.join(BundleMeta::COMPILED);
    if compiled.is_file() {
        let comparison = compare_leaves(&got, &tensors(&compiled), ints, meta.compiled_tolerance);
        if let Some(e) = comparison.first_error() {
            return Err(format!("against Inductor's compiled outputs: {e}"));
        }
    }
    Ok(log.host_ops())
}

/// Bundles known not to run on cuda, with a substring of the error. The
/// test fails when one of them starts to pass, so the list cannot rot.
/// (Empty: `cond_branches` and `masked_select` run on the built-in kernels.)
const KNOWN_FAILURES: &[(&str, &str)] = &[];

#[test]
fn every_bundle_matches_eager_on_cuda() {
    let mut failures = Vec::new();
    for dir in common::cuda_bundles() {
        let case = common::case_name(&dir);
        let known = KNOWN_FAILURES.iter().find(|(c, _)| *c == case).map(|(_, e)| *e);
        match (check_bundle(&dir), known) {
            (Ok(host_ops), None) if host_ops.is_empty() => {}
            (Ok(host_ops), None) => failures.push(format!("{case}: extern ops ran on the host: {host_ops:?}")),
            (Ok(_), Some(_)) => failures.push(format!("{case}: passes now; remove it from KNOWN_FAILURES")),
            (Err(e), Some(expected)) if e.contains(expected) => {}
            (Err(e), _) => failures.push(format!("{case}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Round trips through device memory keep values, strides and offsets.
#[test]
fn copies_round_trip_strided_views() {
    let (mut backend, _) = common::device_only_backend(MathModes::default()).unwrap();
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
        assert_eq!(
            backend.copy_out(&offset).unwrap().to_f64_vec().unwrap(),
            vec![values[1], values[4]],
            "{dtype}"
        );
    }
}

/// A view outside its allocation is an error, not an out-of-bounds pointer.
#[test]
fn views_are_bounds_checked() {
    let (mut backend, _) = common::device_only_backend(MathModes::default()).unwrap();
    let spec = TensorSpec::contiguous(DType::Float32, Device::cuda(0), &[4]);
    let t = backend.allocate(&spec).unwrap();
    let err = backend.view(&t, &[4], &[1], 1).unwrap_err();
    assert!(err.to_string().contains("needs 5 elements"), "{err}");
}

/// An extern-op argument of the kernel table (host tensors go to the device).
#[derive(Clone)]
enum Arg {
    T(Tensor),
    Ts(Vec<Tensor>),
    I(i64),
    Is(Vec<i64>),
    F(f64),
    B(bool),
    S(&'static str),
}

fn t(dtype: DType, values: &[f64], size: &[i64]) -> Arg {
    Arg::T(Tensor::from_f64(dtype, values, size).unwrap())
}

fn host_value(a: &Arg) -> Value<Tensor> {
    match a {
        Arg::T(t) => Value::Tensor(t.contiguous_copy().unwrap()),
        Arg::Ts(ts) => Value::List(ts.iter().map(|t| Value::Tensor(t.contiguous_copy().unwrap())).collect()),
        Arg::I(i) => Value::Int(*i),
        Arg::Is(is) => Value::List(is.iter().map(|i| Value::Int(*i)).collect()),
        Arg::F(f) => Value::Float(*f),
        Arg::B(b) => Value::Bool(*b),
        Arg::S(s) => Value::Str(s.to_string()),
    }
}

/// The tensors an op produced: its result's, then (in-place ops) its first argument.
fn result_tensors<T: Clone>(result: Value<T>, first: Option<&Value<T>>, in_place: bool) -> Vec<T> {
    let mut out = Vec::new();
    match result {
        Value::Tensor(t) if !in_place => out.push(t),
        Value::List(items) => {
            out.extend(
                items
                    .into_iter()
                    .filter_map(|v| if let Value::Tensor(t) = v { Some(t) } else { None }),
            )
        }
        _ => {}
    }
    if let (true, Some(Value::Tensor(t))) = (in_place, first) {
        out.push(t.clone());
    }
    out
}

/// A complex tensor's `view_as_real` (its parts compared as values), other tensors as they are.
fn parts(t: &Tensor) -> Tensor {
    if t.dtype().is_complex() {
        t.view_as_real().expect("complex parts")
    } else {
        t.clone()
    }
}

/// What an op must give: the host backend's answer, or explicit `(size, values)`.
enum Expect {
    Host,
    Values(Vec<(Vec<i64>, Vec<f64>)>),
    Error(&'static str),
}

/// Runs `op` on the CUDA backend (which must run it on a built-in kernel,
/// not the host fallback) and compares with `expect`, values bit-exact
/// (NaN equal to NaN) and sizes and strides equal to the host's.
fn check_op(op: &str, args: &[Arg], kwargs: &[(&str, Arg)], expect: Expect) -> Result<(), String> {
    let in_place = op.trim_end_matches(".default").trim_end_matches(".two").ends_with('_');
    // No host fallback: an op the device does not run is an error here.
    let (mut backend, log) = common::device_only_backend(MathModes::default()).unwrap();
    let host_args: Vec<Value<Tensor>> = args.iter().map(host_value).collect();
    let host_kwargs: IndexMap<String, Value<Tensor>> =
        kwargs.iter().map(|(k, v)| (k.to_string(), host_value(v))).collect();
    let (dev_args, dev_kwargs) = common::copy_call_in(&mut backend, &host_args, &host_kwargs);
    let first = dev_args.first().cloned();
    let got = backend.call_extern(ExternCall::new(op, &dev_args, &dev_kwargs));
    if !log.host_ops().is_empty() {
        return Err(format!("ran on the host fallback: {:?}", log.host_ops()));
    }
    let got = match (got, &expect) {
        (Err(e), Expect::Error(want)) if e.to_string().contains(want) => return Ok(()),
        (Err(e), _) => return Err(e.to_string()),
        (Ok(_), Expect::Error(want)) => return Err(format!("succeeded; expected an error containing `{want}`")),
        (Ok(v), _) => v,
    };
    let got: Vec<Tensor> = result_tensors(got, first.as_ref(), in_place)
        .iter()
        .map(|t| parts(&backend.copy_out(t).unwrap()))
        .collect();
    let want: Vec<(Vec<i64>, Option<Vec<i64>>, Vec<f64>)> = match expect {
        Expect::Host => {
            let mut host = HostBackend::new(HostOptions {
                jagged_zero_fill: true,
                ..Default::default()
            });
            let first = host_args.first().cloned();
            let r = host
                .call_extern(ExternCall::new(op, &host_args, &host_kwargs))
                .map_err(|e| format!("host: {e}"))?;
            result_tensors(r, first.as_ref(), in_place)
                .iter()
                .map(parts)
                .map(|t| (t.size().to_vec(), Some(t.stride().to_vec()), t.to_f64_vec().unwrap()))
                .collect()
        }
        Expect::Values(v) => v.into_iter().map(|(s, v)| (s, None, v)).collect(),
        Expect::Error(_) => unreachable!("handled above"),
    };
    if got.len() != want.len() {
        return Err(format!("{} result tensors, {} expected", got.len(), want.len()));
    }
    for (k, (g, (size, stride, values))) in got.iter().zip(&want).enumerate() {
        let gv = g.to_f64_vec().unwrap();
        let same = gv.len() == values.len()
            && gv
                .iter()
                .zip(values)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        if g.size() != size.as_slice() || stride.as_ref().is_some_and(|s| s.as_slice() != g.stride()) || !same {
            return Err(format!(
                "result {k}: got {:?} strides {:?} = {gv:?}; expected {size:?} strides {stride:?} = {values:?}",
                g.size(),
                g.stride()
            ));
        }
    }
    Ok(())
}

/// The built-in kernels against the host ops (or hand-written results for
/// ops the host does not implement), including edge cases the bundles miss.
#[test]
fn builtin_kernels_match_the_host_ops() {
    use DType::*;
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let long_mask: Vec<f64> = (0..3000)
        .map(|i| f64::from(u8::from(i % 7 == 0 || i % 13 == 0)))
        .collect();
    let ramp = |n: usize| (0..n).map(|i| i as f64).collect::<Vec<f64>>();
    let cases: Vec<(&str, &str, Vec<Arg>, Vec<(&str, Arg)>, Expect)> = vec![
        (
            "nonzero 2-d bool",
            "torch.ops.aten.nonzero.default",
            vec![t(Bool, &[1., 0., 1., 0., 1., 0.], &[2, 3])],
            vec![],
            Expect::Host,
        ),
        (
            "nonzero f32 with -0 and NaN",
            "aten.nonzero",
            vec![t(Float32, &[0., -0., nan, 2., 0.], &[5])],
            vec![],
            Expect::Host,
        ),
        (
            "nonzero across tiles",
            "aten.nonzero",
            vec![t(Bool, &long_mask, &[3, 1000])],
            vec![],
            Expect::Host,
        ),
        (
            "nonzero all zero",
            "aten.nonzero",
            vec![t(Int64, &[0., 0.], &[2])],
            vec![],
            Expect::Host,
        ),
        (
            "masked_select broadcast mask",
            "torch.ops.aten.masked_select.default",
            vec![
                t(Float32, &[1., 2., 3., 4., 5., 6.], &[2, 3]),
                t(Bool, &[1., 0., 1.], &[3]),
            ],
            vec![],
            Expect::Values(vec![(vec![4], vec![1., 3., 4., 6.])]),
        ),
        (
            "masked_select bf16 across tiles",
            "aten.masked_select",
            vec![t(Bfloat16, &ramp(3000), &[3000]), t(Bool, &long_mask, &[3000])],
            vec![],
            Expect::Values(vec![(
                vec![long_mask.iter().filter(|m| **m != 0.0).count() as i64],
                long_mask
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| **m != 0.0)
                    .map(|(i, _)| f64::from(half::bf16::from_f64(i as f64)))
                    .collect(),
            )]),
        ),
        (
            "index with a mask on the leading dim",
            "torch.ops.aten.index.Tensor",
            vec![
                t(Float32, &[1., 2., 3., 4., 5., 6.], &[3, 2]),
                Arg::Ts(vec![Tensor::from_f64(Bool, &[1., 0., 1.], &[3]).unwrap()]),
            ],
            vec![],
            Expect::Values(vec![(vec![2, 2], vec![1., 2., 5., 6.])]),
        ),
        (
            "index with an empty selection",
            "aten.index",
            vec![
                t(Int64, &[1., 2., 3.], &[3]),
                Arg::Ts(vec![Tensor::from_f64(Bool, &[0., 0., 0.], &[3]).unwrap()]),
            ],
            vec![],
            Expect::Values(vec![(vec![0], vec![])]),
        ),
        (
            "index with a mask of the wrong shape",
            "aten.index",
            vec![
                t(Float32, &[1., 2., 3.], &[3]),
                Arg::Ts(vec![Tensor::from_f64(Bool, &[1., 0.], &[2]).unwrap()]),
            ],
            vec![],
            Expect::Error("does not match the shape"),
        ),
        (
            "j2pd: truncation, empty row, -inf padding, int32 offsets",
            "torch.ops.aten._jagged_to_padded_dense_forward.default",
            vec![
                t(Float32, &ramp(12), &[6, 2]),
                Arg::Ts(vec![Tensor::from_f64(Int32, &[0., 3., 3., 6.], &[4]).unwrap()]),
                Arg::Is(vec![2]),
                Arg::F(-inf),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "j2pd: 1-d int64 values, -inf saturates",
            "aten._jagged_to_padded_dense_forward",
            vec![
                t(Int64, &[5., 6., 7.], &[3]),
                Arg::Ts(vec![Tensor::from_f64(Int64, &[0., 1., 3.], &[3]).unwrap()]),
                Arg::Is(vec![3]),
                Arg::F(-inf),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "j2pd: f16, wide padding",
            "aten._jagged_to_padded_dense_forward",
            vec![
                t(Float16, &ramp(8), &[4, 2]),
                Arg::Ts(vec![Tensor::from_f64(Int64, &[0., 1., 4.], &[3]).unwrap()]),
                Arg::Is(vec![4]),
                Arg::F(0.5),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "pd2j without total_L: rows longer than N are zero-filled",
            "torch.ops.aten._padded_dense_to_jagged_forward.default",
            vec![
                t(Float32, &ramp(12), &[3, 2, 2]),
                Arg::Ts(vec![Tensor::from_f64(Int64, &[0., 1., 4., 4.], &[4]).unwrap()]),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "pd2j with total_L past the offsets, int32 offsets",
            "aten._padded_dense_to_jagged_forward",
            vec![
                t(Bfloat16, &ramp(8), &[2, 4]),
                Arg::Ts(vec![Tensor::from_f64(Int32, &[0., 2., 3.], &[3]).unwrap()]),
                Arg::I(5),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "j2pd backward",
            "aten._jagged_to_padded_dense_backward",
            vec![
                t(Float32, &ramp(8), &[2, 2, 2]),
                Arg::Ts(vec![Tensor::from_f64(Int64, &[0., 3., 4.], &[3]).unwrap()]),
                Arg::I(4),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "pd2j backward",
            "aten._padded_dense_to_jagged_backward",
            vec![
                t(Float32, &ramp(8), &[4, 2]),
                Arg::Ts(vec![Tensor::from_f64(Int64, &[0., 3., 4.], &[3]).unwrap()]),
                Arg::Is(vec![2]),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "scatter_reduce_ amax without self",
            "aten.scatter_reduce_.two",
            vec![
                t(Float32, &[9., 9., 9., 9., 9., 9.], &[3, 2]),
                Arg::I(0),
                t(Int64, &[0., 2., 0., 0.], &[2, 2]),
                t(Float32, &[1., 2., 3., -4.], &[2, 2]),
            ],
            vec![("reduce", Arg::S("amax")), ("include_self", Arg::B(false))],
            Expect::Host,
        ),
        (
            "scatter_reduce_ sum bf16 with self",
            "aten.scatter_reduce_.two",
            vec![
                t(Bfloat16, &[1., 2., 3.], &[3]),
                Arg::I(0),
                t(Int64, &[2., 2., 0., -1.], &[4]),
                t(Bfloat16, &[0.5, 0.25, 4., 1.], &[4]),
            ],
            vec![("reduce", Arg::S("sum"))],
            Expect::Host,
        ),
        (
            "scatter_reduce_ amin int64 on dim 1",
            "aten.scatter_reduce_.two",
            vec![
                t(Int64, &[5., 5., 5., 5.], &[2, 2]),
                Arg::I(1),
                t(Int64, &[1., 1., 0., 0.], &[2, 2]),
                t(Int64, &[7., 3., -2., 8.], &[2, 2]),
            ],
            vec![("reduce", Arg::S("amin"))],
            Expect::Host,
        ),
        (
            "scatter_ with a scalar value",
            "aten.scatter_.value",
            vec![
                t(Float32, &[0., 0., 0., 0.], &[4]),
                Arg::I(0),
                t(Int64, &[3., 1.], &[2]),
                Arg::F(2.5),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "scatter_ index out of bounds",
            "aten.scatter_.src",
            vec![
                t(Float32, &[0., 0.], &[2]),
                Arg::I(0),
                t(Int64, &[2.], &[1]),
                t(Float32, &[1.], &[1]),
            ],
            vec![],
            Expect::Error("out of bounds"),
        ),
        (
            "index_put_ accumulate with duplicates",
            "torch.ops.aten.index_put_.default",
            vec![
                t(Float32, &[0.; 6], &[3, 2]),
                Arg::Ts(vec![Tensor::from_f64(Int64, &[0., 2., 0., -3.], &[4]).unwrap()]),
                t(Float32, &[1., 2.], &[2]),
                Arg::B(true),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "index_put_ with two broadcast index tensors",
            "aten.index_put_",
            vec![
                t(Int64, &[0.; 6], &[2, 3]),
                Arg::Ts(vec![
                    Tensor::from_f64(Int64, &[1., 0.], &[2]).unwrap(),
                    Tensor::from_f64(Int64, &[2.], &[1]).unwrap(),
                ]),
                t(Int64, &[7., 8.], &[2]),
                Arg::B(false),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "topk largest with ties and NaN",
            "torch.ops.aten.topk.default",
            vec![t(Float32, &[1., nan, 3., 3., 0., 5., 2., 2.], &[2, 4]), Arg::I(3)],
            vec![],
            Expect::Host,
        ),
        (
            "segment_reduce sum with offsets (feat_segment_reduce's call)",
            "torch.ops.aten.segment_reduce.default",
            vec![t(Float32, &ramp(40), &[10, 4]), Arg::S("sum")],
            vec![("offsets", t(Int64, &[0., 3., 3., 7., 10.], &[5]))],
            Expect::Host,
        ),
        (
            "segment_reduce mean, an empty segment, int32 lengths on axis 1",
            "aten.segment_reduce",
            vec![t(Float32, &ramp(12), &[2, 6]), Arg::S("mean")],
            vec![
                ("lengths", t(Int32, &[2., 0., 4., 6., 0., 0.], &[2, 3])),
                ("axis", Arg::I(1)),
            ],
            Expect::Host,
        ),
        (
            "segment_reduce max with initial, NaN propagating, f16",
            "aten.segment_reduce",
            vec![t(Float16, &[1., nan, 3., -4., 0.5, 2.], &[6]), Arg::S("max")],
            vec![("lengths", t(Int64, &[2., 0., 4.], &[3])), ("initial", Arg::F(1.5))],
            Expect::Host,
        ),
        (
            "segment_reduce prod with offsets, f64",
            "aten.segment_reduce",
            vec![t(Float64, &[1., -2., 3., 4., 0.5, -1.], &[6]), Arg::S("prod")],
            vec![("offsets", t(Int64, &[0., 2., 2., 5., 6.], &[5]))],
            Expect::Host,
        ),
        (
            "segment_reduce lengths that do not sum to the axis",
            "aten.segment_reduce",
            vec![t(Bfloat16, &[1., 2., 3.], &[3]), Arg::S("min")],
            vec![("lengths", t(Int64, &[1., 1.], &[2]))],
            Expect::Error("sum to the axis"),
        ),
        (
            "randint.low_out: Inductor's seed buffer at the default generator state",
            "aten.randint.low_out",
            vec![Arg::I(i64::MIN), Arg::I(i64::MAX), Arg::Is(vec![3])],
            vec![("out", t(Int64, &[0.; 3], &[3]))],
            Expect::Host,
        ),
        (
            "randint.low: a small range over several blocks (four values a draw)",
            "aten.randint.low",
            vec![Arg::I(-3), Arg::I(7), Arg::Is(vec![1000])],
            vec![],
            Expect::Host,
        ),
        (
            "complex mul with broadcasting (exact values)",
            "torch.ops.aten.mul.Tensor",
            vec![
                Arg::T(Tensor::from_complex(Complex64, &[(1., 2.), (0.5, -1.)], &[2, 1]).unwrap()),
                Arg::T(Tensor::from_complex(Complex64, &[(3., -1.), (2., 0.)], &[2]).unwrap()),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "complex add with alpha, a real operand",
            "aten.add.Tensor",
            vec![
                Arg::T(Tensor::from_complex(Complex64, &[(1., 2.), (0.5, -1.)], &[2]).unwrap()),
                t(Float32, &[2., 4.], &[2]),
            ],
            vec![("alpha", Arg::F(0.5))],
            Expect::Host,
        ),
        (
            "complex128 div (exact values)",
            "aten.div.Tensor",
            vec![
                Arg::T(Tensor::from_complex(Complex128, &[(6., 4.), (4., 2.)], &[2]).unwrap()),
                Arg::T(Tensor::from_complex(Complex128, &[(2., 2.), (2., 0.)], &[2]).unwrap()),
            ],
            vec![],
            Expect::Host,
        ),
        (
            "view_as_complex / view_as_real alias (no kernel)",
            "torch.ops.aten.view_as_complex.default",
            vec![t(Float32, &[1., 2., 3., 4.], &[2, 2])],
            vec![],
            Expect::Host,
        ),
        (
            "view_as_real of complex64",
            "torch.ops.aten.view_as_real.default",
            vec![Arg::T(
                Tensor::from_complex(Complex64, &[(1., 2.), (3., 4.)], &[2]).unwrap(),
            )],
            vec![],
            Expect::Host,
        ),
        (
            "topk smallest along dim 0",
            "aten.topk",
            vec![
                t(Float64, &[4., 1., 2., 3., 0., 9.], &[3, 2]),
                Arg::I(2),
                Arg::I(0),
                Arg::B(false),
            ],
            vec![],
            Expect::Host,
        ),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|(name, op, args, kwargs, expect)| {
            check_op(op, &args, &kwargs, expect)
                .err()
                .map(|e| format!("{name}: {e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Without the host fallback (the default) an op the device table lacks is
/// an error naming it; with it, the op runs on the host and is counted.
#[test]
fn host_fallback_is_off_by_default_and_names_the_op() {
    assert!(!CudaOptions::default().host_fallback);
    let host_ops = HostBackend::new(HostOptions::default()).op_names();
    let Some(op) = host_ops
        .iter()
        .find(|o| o.as_str() == "aten.relu" && !wrapir::exec::device_ops::runs_on_cuda(o))
    else {
        return; // the device runs it now
    };
    let spec = TensorSpec::contiguous(DType::Float32, Device::cuda(0), &[4]);
    let call = |backend: &mut CudaBackend| {
        let x = backend.copy_in(&Tensor::from_f64(DType::Float32, &[-1.0, 2.0, -3.0, 4.0], &[4]).unwrap());
        let args = vec![Value::Tensor(x.unwrap())];
        let kwargs = IndexMap::new();
        backend.call_extern(ExternCall::new("torch.ops.aten.relu.default", &args, &kwargs))
    };
    let mut backend = CudaBackend::new(CudaOptions::from_env()).unwrap();
    let err = call(&mut backend).unwrap_err().to_string();
    assert!(err.contains("torch.ops.aten.relu.default"), "{err}");
    let options = CudaOptions {
        host_fallback: true,
        ..CudaOptions::from_env()
    };
    let log = options.extern_ops.clone();
    let mut backend = CudaBackend::new(options).unwrap();
    let Value::Tensor(out) = call(&mut backend).unwrap() else {
        panic!("not a tensor")
    };
    assert_eq!(backend.spec(&out).size, spec.size);
    assert_eq!(
        backend.copy_out(&out).unwrap().to_f64_vec().unwrap(),
        vec![0.0, 2.0, 0.0, 4.0]
    );
    assert_eq!(log.host_ops(), vec![(format!("torch.ops.{op}.default"), 1)]);
}

/// The launch-floor measurement captures a graph and then unloads its
/// module: the capture's lock must be released as the capture ends, or the
/// unload waits for it forever.
#[test]
fn launch_floor_captures_and_unloads() {
    let mut backend = CudaBackend::new(CudaOptions::from_env()).expect("device");
    let floor = wrapir::exec::cuda::launch_floor(&mut backend, 20, 2).expect("launch floor");
    assert!(floor.launch_us > 0.0 && floor.graph_us > 0.0, "{floor:?}");
}

/// Inductor 2.12+'s user streams, memory pools and kernel-profile blocks
/// and its `nan_asserts`, on the GPU: the `torch.ops.streams.*` event ops
/// run in program order on the one stream, the outputs (cuBLAS GEMMs of
/// small integers, exact in any accumulation order) equal the host
/// backend's bit for bit, and a NaN input is refused by the finite check,
/// naming the buffer.
#[test]
fn stream_scopes_and_finite_checks_run_on_cuda() {
    let text = "wrapir 1

graph main(arg0_1: f32[4, 4][4, 1]@cuda:0, arg1_1: f32[4, 4][4, 1]@cuda:0) -> (buf2, buf3) {
  buffer buf0: f32[4, 4][4, 1]@cuda:0
  buffer buf1: f32[4, 4][4, 1]@cuda:0
  buffer buf2: f32[4, 4][4, 1]@cuda:0
  buffer buf3: f32[4, 4][4, 1]@cuda:0
  assert_finite arg0_1
  assert_finite arg1_1
  device 0 streams(3, 5) {
    stream 1 {
      alloc buf0
      extern_out buf0 = extern_kernels.mm(arg0_1, arg1_1)
      extern torch.ops.streams.record_event.default(7, 1)
    }
    stream 2 {
      alloc buf1
      extern_out buf1 = extern_kernels.mm(arg1_1, arg0_1)
      extern torch.ops.streams.record_event.default(8, 2)
    }
    extern torch.ops.streams.wait_event.default(7, 0)
    extern torch.ops.streams.wait_event.default(8, 0)
    mem_pool 4 device 0 {
      alloc buf2
      extern_out buf2 = extern_kernels.mm(buf0, buf1)
    }
    profile_scope {
      alloc buf3
      extern_out buf3 = extern_kernels.mm(buf2, arg0_1)
    }
  }
  assert_finite buf2
  assert_finite buf3
}
";
    let program = wrapir::text::parse(text).unwrap();
    let x: Vec<f64> = (0..16).map(|i| f64::from(i % 5 - 2)).collect();
    let y: Vec<f64> = (0..16).map(|i| f64::from((i * 3) % 5 - 2)).collect();
    let mut inputs = IndexMap::new();
    inputs.insert(
        "arg0_1".to_string(),
        Tensor::from_f64(DType::Float32, &x, &[4, 4]).unwrap(),
    );
    inputs.insert(
        "arg1_1".to_string(),
        Tensor::from_f64(DType::Float32, &y, &[4, 4]).unwrap(),
    );
    let host = wrapir::exec::run_program(&program, &mut HostBackend::new(HostOptions::default()), &inputs).unwrap();
    let cuda = run_program(&program, CudaOptions::from_env(), &inputs).unwrap();
    assert_eq!(host.outputs.len(), 2);
    for (i, (h, c)) in host.outputs.iter().zip(&cuda.outputs).enumerate() {
        let (Value::Tensor(h), Value::Tensor(c)) = (h, c) else {
            panic!("output {i} is not a tensor")
        };
        assert_eq!(h.to_f64_vec().unwrap(), c.to_f64_vec().unwrap(), "output {i}");
    }
    let mut nan = y.clone();
    nan[3] = f64::NAN;
    inputs.insert(
        "arg1_1".to_string(),
        Tensor::from_f64(DType::Float32, &nan, &[4, 4]).unwrap(),
    );
    let err = run_program(&program, CudaOptions::from_env(), &inputs)
        .unwrap_err()
        .to_string();
    assert!(err.contains("arg1_1"), "{err}");
}

/// `aten.sort` on the device against the host's (PyTorch's order: NaN
/// largest, ties by index, which PyTorch's CUDA sort gives for every line
/// Inductor leaves to it): values and indices bit for bit, with the
/// layouts ATen's sort meta function gives (the input's strides when dense,
/// `infer_dense_strides` otherwise), on strided inputs, lines that are no
/// power of two, an inner dimension, i64 keys beyond 2^53, and empty and 0-d
/// tensors.
#[test]
fn sort_matches_the_host_order_and_layouts() {
    use DType::*;
    let nan = f64::NAN;
    // Values with many ties (eight levels) and NaNs.
    let tied = |n: usize, seed: u64| -> Vec<f64> {
        common::uniform_values(n, seed)
            .into_iter()
            .enumerate()
            .map(|(i, v)| if i % 97 == 5 { nan } else { (v * 4.0).round() })
            .collect()
    };
    let strided = |dtype, values: &[f64], size: &[i64], stride: &[i64]| {
        let base = Tensor::from_f64(dtype, values, &[values.len() as i64]).unwrap();
        base.view(size, stride, 0).unwrap()
    };
    let big: Vec<i64> = (0..40).map(|i| (1i64 << 60) + (i * 7919) % 13 - 6).collect();
    type Case = (
        &'static str,
        &'static str,
        Tensor,
        Vec<(&'static str, Value<Tensor>)>,
        Vec<Value<Tensor>>,
    );
    let cases: Vec<Case> = vec![
        (
            "stable ascending, ties and NaN, 4 lines of 1000",
            "torch.ops.aten.sort.stable",
            Tensor::from_f64(Float32, &tied(4000, 1), &[4, 1000]).unwrap(),
            vec![("stable", Value::Bool(true)), ("dim", Value::Int(-1))],
            vec![],
        ),
        (
            "default descending (positional), ties and NaN",
            "torch.ops.aten.sort.default",
            Tensor::from_f64(Float16, &tied(1500, 2), &[3, 500]).unwrap(),
            vec![],
            vec![Value::Int(1), Value::Bool(true)],
        ),
        (
            "column-major input along dim 0: results column-major",
            "torch.ops.aten.sort.stable",
            strided(Float32, &tied(2100, 3), &[700, 3], &[1, 700]),
            vec![("stable", Value::Bool(false)), ("dim", Value::Int(0))],
            vec![],
        ),
        (
            "middle dimension of 33 with an inner dimension, bf16 descending",
            "torch.ops.aten.sort.stable",
            Tensor::from_f64(Bfloat16, &tied(2 * 33 * 5, 4), &[2, 33, 5]).unwrap(),
            vec![("dim", Value::Int(1)), ("descending", Value::Bool(true))],
            vec![],
        ),
        (
            "every other column (not dense): infer_dense_strides",
            "torch.ops.aten.sort.default",
            strided(Float64, &tied(600, 5), &[3, 100], &[200, 2]),
            vec![],
            vec![],
        ),
        (
            "i64 keys beyond 2^53",
            "torch.ops.aten.sort.default",
            Tensor::from_i64(Int64, &big, &[40]).unwrap(),
            vec![],
            vec![],
        ),
        (
            "bool",
            "torch.ops.aten.sort.stable",
            Tensor::from_f64(Bool, &[1., 0., 1., 1., 0., 0., 1.], &[7]).unwrap(),
            vec![("stable", Value::Bool(true))],
            vec![],
        ),
        (
            "int8, one element",
            "aten.sort",
            Tensor::from_f64(Int8, &[-3.], &[1]).unwrap(),
            vec![],
            vec![],
        ),
        (
            "0-d",
            "aten.sort",
            Tensor::from_f64(Float32, &[2.5], &[]).unwrap(),
            vec![],
            vec![],
        ),
        (
            "empty line",
            "aten.sort",
            Tensor::from_f64(Float32, &[], &[3, 0]).unwrap(),
            vec![],
            vec![],
        ),
    ];
    let mut failures = Vec::new();
    for (name, op, x, kwargs, rest) in cases {
        let result = (|| -> Result<(), String> {
            let mut args = vec![Value::Tensor(x.clone())];
            args.extend(rest);
            let kwargs: IndexMap<String, Value<Tensor>> = kwargs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let want = HostBackend::new(HostOptions::default())
                .call_extern(ExternCall::new(op, &args, &kwargs))
                .map_err(|e| format!("host: {e}"))?;
            let (mut backend, log) =
                common::device_only_backend(MathModes::default()).map_err(|e| format!("no GPU: {e}"))?;
            let (dev_args, dev_kwargs) = common::copy_call_in(&mut backend, &args, &kwargs);
            let got = backend
                .call_extern(ExternCall::new(op, &dev_args, &dev_kwargs))
                .map_err(|e| e.to_string())?;
            if !log.host_ops().is_empty() {
                return Err(format!("ran on the host fallback: {:?}", log.host_ops()));
            }
            let (Value::List(got), Value::List(want)) = (got, want) else {
                return Err("sort returned no (values, indices) pair".into());
            };
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let (Value::Tensor(g), Value::Tensor(w)) = (g, w) else {
                    return Err(format!("result {k} is not a tensor"));
                };
                let g = backend.copy_out(g).map_err(|e| e.to_string())?;
                let layout = |t: &Tensor| (t.dtype(), t.size().to_vec(), t.stride().to_vec());
                if layout(&g) != layout(w) {
                    return Err(format!(
                        "result {k}: layout {:?}, the host's {:?}",
                        layout(&g),
                        layout(w)
                    ));
                }
                if common::element_bits(&g) != common::element_bits(w) {
                    return Err(format!(
                        "result {k}: {:?}, the host's {:?}",
                        g.to_f64_vec().unwrap(),
                        w.to_f64_vec().unwrap()
                    ));
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
