//! The host backend's ops behind Inductor features that fall back to ATen:
//! complex tensors (`view_as_complex`, `view_as_real`, `view.dtype`, complex
//! `mul` / `add` / `sub` / `div`, safetensors `C64` and the complex32 /
//! complex128 marker), `segment_reduce` (every reduction, `lengths=` and
//! `offsets=`, `axis`, `unsafe`, `initial`, accumulation in the data's dtype)
//! `randint` (Inductor's seed buffer, PyTorch's CUDA Philox values), `sort`
//! / `sort.stable` / `topk` (NaN largest, ties in index order, integers
//! exact), `_int_mm` (int8 GEMM, int32 results) and `_cudnn_rnn` (cuDNN's
//! RNN, run on the host for CUDA programs).
//! Expected values are PyTorch's: the bundles' eager outputs where a bundle
//! has the op, else worked by hand from ATen's definitions (noted per case).

mod common;

use indexmap::IndexMap;
use std::sync::Arc;
use wrapir::exec::compare::compare;
use wrapir::exec::host::HostBackend;
use wrapir::exec::random::{philox_at, DeviceShape, RandintPlan};
use wrapir::exec::{safetensors, Backend, ExecError, ExternCall, KernelLaunch, Tensor, Value};
use wrapir::format::bundle_json::CudaRngState;
use wrapir::format::bundle_json::Tolerance;
use wrapir::ir::{DType, Program};

fn call_on(
    host: &mut HostBackend,
    op: &str,
    args: Vec<Value<Tensor>>,
    kwargs: &[(&str, Value<Tensor>)],
) -> Result<Value<Tensor>, String> {
    let kwargs: IndexMap<String, Value<Tensor>> = kwargs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    host.call_extern(ExternCall::new(op, &args, &kwargs))
        .map_err(|e| e.to_string())
}

fn call(op: &str, args: Vec<Value<Tensor>>, kwargs: &[(&str, Value<Tensor>)]) -> Result<Value<Tensor>, String> {
    call_on(&mut HostBackend::default(), op, args, kwargs)
}

fn tensor(v: Value<Tensor>) -> Tensor {
    match v {
        Value::Tensor(t) => t,
        other => panic!("expected a tensor, got {other:?}"),
    }
}

fn f32s(v: &[f64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_f64(DType::Float32, v, size).unwrap())
}

fn i64s(v: &[i64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_vec(v.to_vec(), size).unwrap())
}

fn c64(v: &[(f64, f64)], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_complex(DType::Complex64, v, size).unwrap())
}

/// Equal as f64 values, NaN equal to NaN.
fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
}

fn bundle(case: &str) -> std::path::PathBuf {
    common::root().join("fixtures/inductor/bundles").join(case)
}

fn read(path: &std::path::Path) -> IndexMap<String, Tensor> {
    safetensors::parse(&std::fs::read(path).unwrap()).unwrap()
}

// ------------------------------------------------------------- segment_reduce

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

#[test]
fn segment_reduce_bundle_matches_eager() {
    // feat_segment_reduce: torch.segment_reduce(data [10, 4], "sum", offsets=[0, 3, 3, 7, 10]).
    let dir = bundle("feat_segment_reduce");
    let inputs = read(&dir.join("inputs.safetensors"));
    let expected = read(&dir.join("expected.safetensors"));
    let got = tensor(
        call(
            "torch.ops.aten.segment_reduce.default",
            vec![Value::Tensor(inputs["arg0_1"].clone()), Value::Str("sum".into())],
            &[("offsets", Value::Tensor(inputs["arg1_1"].clone()))],
        )
        .unwrap(),
    );
    compare(&got, &expected["out0"], Some(Tolerance { rtol: 0.0, atol: 0.0 })).unwrap();
}

#[test]
fn segment_reduce_follows_aten() {
    // data [1, -2, 3, 4, 0.5, -1], segments of lengths [2, 0, 3, 1] (offsets [0, 2, 2, 5, 6]);
    // empty segments give the reduction's identity (mean: NaN) unless `initial` is given,
    // and `mean` divides a segment's reduction (initial included) by its length.
    let data = [1.0, -2.0, 3.0, 4.0, 0.5, -1.0];
    let cases: &[(&str, Option<f64>, &[f64])] = &[
        ("sum", None, &[-1.0, 0.0, 7.5, -1.0]),
        ("mean", None, &[-0.5, NAN, 2.5, -1.0]),
        ("max", None, &[1.0, -INF, 4.0, -1.0]),
        ("min", None, &[-2.0, INF, 0.5, -1.0]),
        ("prod", None, &[-2.0, 1.0, 6.0, -1.0]),
        ("sum", Some(1.0), &[0.0, 1.0, 8.5, 0.0]),
        ("mean", Some(2.0), &[0.5, 2.0, 9.5f32 as f64 / 3.0, 1.0]),
        ("max", Some(3.0), &[3.0, 3.0, 4.0, 3.0]),
        ("min", Some(0.0), &[-2.0, 0.0, 0.0, -1.0]),
        ("prod", Some(2.0), &[-4.0, 2.0, 12.0, -2.0]),
    ];
    for (reduce, initial, want) in cases {
        for (key, segs) in [
            ("lengths", i64s(&[2, 0, 3, 1], &[4])),
            ("offsets", i64s(&[0, 2, 2, 5, 6], &[5])),
        ] {
            let mut kwargs = vec![(key, segs)];
            if let Some(i) = initial {
                kwargs.push(("initial", Value::Float(*i)));
            }
            let got = tensor(
                call(
                    "aten.segment_reduce",
                    vec![f32s(&data, &[6]), Value::Str(reduce.to_string())],
                    &kwargs,
                )
                .unwrap(),
            );
            let want: Vec<f64> = want.iter().map(|v| *v as f32 as f64).collect();
            assert!(
                same(&got.to_f64_vec().unwrap(), &want),
                "{reduce} {initial:?} {key}: {:?}",
                got.to_f64_vec()
            );
            assert_eq!(got.size(), [4]);
        }
    }
    // NaN propagates through max and min.
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![f32s(&[1.0, NAN, 3.0], &[3]), Value::Str("max".into())],
            &[("lengths", i64s(&[3], &[1]))],
        )
        .unwrap(),
    );
    assert!(got.to_f64_vec().unwrap()[0].is_nan());
}

#[test]
fn segment_reduce_axes_and_dtypes() {
    // axis 0 of [4, 2]: rows 0 and 1..4.
    let data = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[4, 2]);
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![data, Value::Str("sum".into())],
            &[("lengths", i64s(&[1, 3], &[2]))],
        )
        .unwrap(),
    );
    assert_eq!(
        (got.size().to_vec(), got.to_f64_vec().unwrap()),
        (vec![2, 2], vec![1.0, 2.0, 15.0, 18.0])
    );
    // axis 1 of [3, 2], per-row lengths [3, 2] (axis = lengths.dim() - 1).
    let data = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let lengths = i64s(&[1, 1, 2, 0, 0, 2], &[3, 2]);
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![data.clone(), Value::Str("sum".into())],
            &[("lengths", lengths), ("axis", Value::Int(1))],
        )
        .unwrap(),
    );
    assert_eq!(
        (got.size().to_vec(), got.to_f64_vec().unwrap()),
        (vec![3, 2], vec![1.0, 2.0, 7.0, 0.0, 0.0, 11.0])
    );
    let offsets = i64s(&[0, 1, 2, 0, 2, 2, 0, 0, 2], &[3, 3]);
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![data, Value::Str("max".into())],
            &[("offsets", offsets), ("axis", Value::Int(-1))],
        )
        .unwrap(),
    );
    assert_eq!(got.to_f64_vec().unwrap(), vec![1.0, 2.0, 4.0, -INF, -INF, 6.0]);
    // The accumulator is the data's dtype: in f16, 2048 + 1 rounds to 2048 (spacing 2) at
    // each step, so the sum of [2048, 1, 1] is 2048 (the exact sum, 2050, is an f16 too).
    let h = Value::Tensor(Tensor::from_f64(DType::Float16, &[2048.0, 1.0, 1.0], &[3]).unwrap());
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![h, Value::Str("sum".into())],
            &[("lengths", i64s(&[3], &[1]))],
        )
        .unwrap(),
    );
    assert_eq!((got.dtype(), got.to_f64_vec().unwrap()), (DType::Float16, vec![2048.0]));
    // int32 offsets, f64 data.
    let d = Value::Tensor(Tensor::from_f64(DType::Float64, &[0.25, 0.5, 1.0], &[3]).unwrap());
    let o = Value::Tensor(Tensor::from_vec(vec![0i32, 1, 3], &[3]).unwrap());
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![d, Value::Str("mean".into())],
            &[("offsets", o)],
        )
        .unwrap(),
    );
    assert_eq!(
        (got.dtype(), got.to_f64_vec().unwrap()),
        (DType::Float64, vec![0.25, 0.75])
    );
}

#[test]
fn segment_reduce_rejects_what_aten_rejects() {
    let data = || f32s(&[1.0, 2.0, 3.0], &[3]);
    let sum = || Value::Str("sum".into());
    type Kwargs<'a> = Vec<(&'a str, Value<Tensor>)>;
    let cases: Vec<(Kwargs<'_>, &str)> = vec![
        (vec![("lengths", i64s(&[1, 1], &[2]))], "sum to data.size(0) = 3"),
        (vec![("lengths", i64s(&[-1, 4], &[2]))], "negative"),
        (vec![("offsets", i64s(&[0, 4], &[2]))], "outside the axis"),
        (vec![("offsets", i64s(&[2, 1], &[2]))], "outside the axis"),
        (vec![], "either `lengths` or `offsets`"),
        (
            vec![("indices", i64s(&[0], &[1])), ("lengths", i64s(&[3], &[1]))],
            "indices",
        ),
        (
            vec![("lengths", i64s(&[3], &[1])), ("axis", Value::Int(1))],
            "out of range",
        ),
    ];
    for (kwargs, want) in cases {
        let err = call("aten.segment_reduce", vec![data(), sum()], &kwargs).unwrap_err();
        assert!(err.contains(want), "{kwargs:?}: {err}");
    }
    let err = call(
        "aten.segment_reduce",
        vec![data(), Value::Str("avg".into())],
        &[("lengths", i64s(&[3], &[1]))],
    )
    .unwrap_err();
    assert!(err.contains("unsupported reduction `avg`"), "{err}");
    // `unsafe=True` skips the lengths checks (the rest of the axis is not reduced).
    let got = tensor(
        call(
            "aten.segment_reduce",
            vec![data(), sum()],
            &[("lengths", i64s(&[1, 1], &[2])), ("unsafe", Value::Bool(true))],
        )
        .unwrap(),
    );
    assert_eq!(got.to_f64_vec().unwrap(), vec![1.0, 2.0]);
}

// -------------------------------------------------------------------- complex

#[test]
fn complex_views_alias_their_input() {
    let real = tensor(f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]));
    let c = tensor(call("aten.view_as_complex.default", vec![Value::Tensor(real.clone())], &[]).unwrap());
    assert_eq!(
        (c.dtype(), c.size().to_vec(), c.stride().to_vec()),
        (DType::Complex64, vec![3], vec![1])
    );
    assert_eq!(c.to_complex_vec().unwrap(), vec![(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)]);
    let r = tensor(call("aten.view_as_real.default", vec![Value::Tensor(c.clone())], &[]).unwrap());
    assert_eq!(
        (r.dtype(), r.size().to_vec(), r.stride().to_vec()),
        (DType::Float32, vec![3, 2], vec![2, 1])
    );
    // A write through one view is seen through the others (they share storage, as in PyTorch).
    r.write_f64(&[9.0, 8.0, 7.0, 6.0, 5.0, 4.0]).unwrap();
    assert_eq!(real.to_f64_vec().unwrap(), vec![9.0, 8.0, 7.0, 6.0, 5.0, 4.0]);
    assert_eq!(c.to_complex_vec().unwrap()[1], (7.0, 6.0));
    // view(dtype): c64 [3] <-> f32 [6].
    let f = tensor(
        call(
            "aten.view.dtype",
            vec![Value::Tensor(c.clone()), Value::DType(DType::Float32)],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(
        (f.size().to_vec(), f.to_f64_vec().unwrap()[..2].to_vec()),
        (vec![6], vec![9.0, 8.0])
    );
    let back = tensor(
        call(
            "aten.view.dtype",
            vec![Value::Tensor(f), Value::DType(DType::Complex64)],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(back.to_complex_vec().unwrap(), c.to_complex_vec().unwrap());
    // What PyTorch refuses: an odd last dimension, a last stride that is not 1.
    let err = call("aten.view_as_complex.default", vec![f32s(&[1.0, 2.0, 3.0], &[3])], &[]).unwrap_err();
    assert!(err.contains("last dimension of size 2"), "{err}");
    let t = tensor(f32s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]))
        .view(&[2, 2], &[1, 2], 0)
        .unwrap();
    let err = call("aten.view_as_complex.default", vec![Value::Tensor(t)], &[]).unwrap_err();
    assert!(err.contains("stride 1"), "{err}");
    let err = call("aten.view_as_real.default", vec![f32s(&[1.0], &[1])], &[]).unwrap_err();
    assert!(err.contains("not complex"), "{err}");
    // A complex tensor has no real elements to read directly.
    assert!(c.to_f64_vec().unwrap_err().to_string().contains("view_as_real"));
}

#[test]
fn complex_arithmetic() {
    // (1 + 2i)(3 - i) = 5 + 5i; (5 + 5i) / (3 - i) = 1 + 2i; broadcasting [2, 1] x [2].
    let x = c64(&[(1.0, 2.0), (0.5, -1.0)], &[2, 1]);
    let y = c64(&[(3.0, -1.0), (2.0, 0.0)], &[2]);
    let got = tensor(call("aten.mul.Tensor", vec![x.clone(), y.clone()], &[]).unwrap());
    assert_eq!((got.dtype(), got.size().to_vec()), (DType::Complex64, vec![2, 2]));
    assert_eq!(
        got.to_complex_vec().unwrap(),
        vec![(5.0, 5.0), (2.0, 4.0), (0.5, -3.5), (1.0, -2.0)]
    );
    let q = tensor(
        call(
            "aten.div.Tensor",
            vec![c64(&[(5.0, 5.0)], &[1]), c64(&[(3.0, -1.0)], &[1])],
            &[],
        )
        .unwrap(),
    );
    let (re, im) = q.to_complex_vec().unwrap()[0];
    assert!((re - 1.0).abs() < 1e-6 && (im - 2.0).abs() < 1e-6, "{re} {im}");
    // A real tensor operand has imaginary part 0; add / sub take alpha.
    let got = tensor(
        call(
            "aten.mul.Tensor",
            vec![c64(&[(1.0, 2.0)], &[1]), f32s(&[2.0], &[1])],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(got.to_complex_vec().unwrap(), vec![(2.0, 4.0)]);
    let got = tensor(
        call(
            "aten.add.Tensor",
            vec![c64(&[(1.0, 2.0)], &[1]), c64(&[(1.0, 1.0)], &[1])],
            &[("alpha", Value::Float(2.0))],
        )
        .unwrap(),
    );
    assert_eq!(got.to_complex_vec().unwrap(), vec![(3.0, 4.0)]);
    let got = tensor(
        call(
            "aten.sub.Tensor",
            vec![c64(&[(1.0, 2.0)], &[1]), Value::Float(0.5)],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(got.to_complex_vec().unwrap(), vec![(0.5, 2.0)]);
    // complex64 with a float64 tensor promotes to complex128, as torch.result_type does.
    let d = Value::Tensor(Tensor::from_f64(DType::Float64, &[1.0], &[1]).unwrap());
    let got = tensor(call("aten.mul.Tensor", vec![c64(&[(1.0, 2.0)], &[1]), d], &[]).unwrap());
    assert_eq!(got.dtype(), DType::Complex128);
}

#[test]
fn complex_mul_bundle_matches_eager_on_the_host() {
    // feat_complex_mul: view_as_complex x2, complex mul, view_as_real as extern ops, then
    // one Triton kernel (permute(1, 0, 2).contiguous()), registered here on the host.
    let dir = bundle("feat_complex_mul");
    let program = Program::from_json(&std::fs::read_to_string(dir.join("program.json")).unwrap()).unwrap();
    let mut host = HostBackend::default();
    host.register_kernel(
        "triton_poi_fused_clone_permute_0",
        Arc::new(|l: &KernelLaunch<'_, Tensor>| {
            let (Some(Value::Tensor(src)), Some(Value::Tensor(dst))) =
                (l.kwargs.get("in_ptr0"), l.kwargs.get("out_ptr0"))
            else {
                return Err(ExecError::Type("expected in_ptr0 and out_ptr0".into()));
            };
            // src [4, 8, 2] -> dst [8, 4, 2].
            let v = src.to_f64_vec()?;
            let mut out = vec![0.0; v.len()];
            for i in 0..4 {
                for j in 0..8 {
                    for c in 0..2 {
                        out[(j * 4 + i) * 2 + c] = v[(i * 8 + j) * 2 + c];
                    }
                }
            }
            dst.write_f64(&out)
        }),
    );
    let inputs = read(&dir.join("inputs.safetensors"));
    let run = wrapir::exec::run_program(&program, &mut host, &inputs).unwrap();
    let Some(Value::Tensor(got)) = run.outputs.first() else {
        panic!("no output")
    };
    // Eager PyTorch's output, and Inductor's, within the compiled tolerance (the products
    // are rounded once here; CUDA may fuse them).
    for file in ["expected.safetensors", "compiled.safetensors"] {
        let want = read(&dir.join(file));
        compare(got, &want["out0"], Some(Tolerance { rtol: 1e-5, atol: 1e-5 })).unwrap();
    }
}

#[test]
fn complex_safetensors_round_trip() {
    let mut tensors = IndexMap::new();
    let c = tensor(c64(&[(1.0, -2.0), (0.5, 4.0)], &[2]));
    tensors.insert("c".to_string(), c.clone());
    let z = Tensor::from_complex(DType::Complex128, &[(1.0 / 3.0, 2.0)], &[1, 1]).unwrap();
    tensors.insert("z".to_string(), z.clone());
    let bytes = safetensors::write(&tensors).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    // complex64 is the format's C64 with its own shape; complex128, which has no code, is
    // its real view (F64, a last dimension of 2) marked in the metadata.
    assert_eq!(
        (header["c"]["dtype"].as_str(), header["c"]["shape"].to_string()),
        (Some("C64"), "[2]".to_string())
    );
    assert_eq!(
        (header["z"]["dtype"].as_str(), header["z"]["shape"].to_string()),
        (Some("F64"), "[1,1,2]".to_string())
    );
    assert_eq!(header["__metadata__"]["wrapir.complex.z"].as_str(), Some("complex128"));
    // C64 bytes are (real, imaginary) f32 pairs.
    let begin = 8 + len + header["c"]["data_offsets"][0].as_u64().unwrap() as usize;
    assert_eq!(bytes[begin..begin + 4], 1.0f32.to_le_bytes());
    assert_eq!(bytes[begin + 4..begin + 8], (-2.0f32).to_le_bytes());
    let back = safetensors::parse(&bytes).unwrap();
    assert_eq!(
        (back["c"].dtype(), back["c"].to_complex_vec().unwrap()),
        (DType::Complex64, c.to_complex_vec().unwrap())
    );
    assert_eq!(
        (back["z"].dtype(), back["z"].size().to_vec()),
        (DType::Complex128, vec![1, 1])
    );
    assert_eq!(back["z"].to_complex_vec().unwrap(), z.to_complex_vec().unwrap());
    // Comparing complex tensors looks at both parts.
    let other = tensor(c64(&[(1.0, -2.0), (0.5, 4.5)], &[2]));
    let err = compare(&other, &c, None).unwrap_err().to_string();
    assert!(
        err.contains("1 of 4 elements differ") && err.contains("[1, 1]"),
        "{err}"
    );
}

// --------------------------------------------------------------------- randint

/// `torch.cuda.manual_seed(seed)` then `torch.randint(-2**63, 2**63 - 1, [n], device="cuda")`
/// (Inductor's seed buffer) as ATen computes it: thread `i` of 256 draws `curand4` at
/// subsequence `i`, offset 0, and takes `(x << 32 | y) % (2**64 - 1) - 2**63`.
fn seeds_by_hand(seed: u64, n: u64) -> Vec<i64> {
    (0..n)
        .map(|i| {
            let r = philox_at(seed, i, 0);
            let v = (u64::from(r[0]) << 32) | u64::from(r[1]);
            (v % u64::MAX).wrapping_add(i64::MIN as u64) as i64
        })
        .collect()
}

#[test]
fn randint_fills_inductors_seed_buffer_as_pytorch() {
    let mut host = HostBackend::default();
    host.set_cuda_rng(CudaRngState { seed: 0, offset: 0 });
    let out = Tensor::from_vec(vec![0i64; 3], &[3]).unwrap();
    // `randint(low=i64::MIN, high=i64::MAX, size=[3], out=out)`.
    let draw = |host: &mut HostBackend| {
        let args = vec![
            Value::Int(i64::MIN),
            Value::Int(i64::MAX),
            Value::List(vec![Value::Int(3)]),
        ];
        call_on(
            host,
            "aten.randint.low_out",
            args,
            &[("out", Value::Tensor(out.clone()))],
        )
        .unwrap();
    };
    draw(&mut host);
    let first = out.to_i64_vec().unwrap();
    assert_eq!(first, seeds_by_hand(0, 3));
    // Philox4x32-10 of counter 0, key 0 is Random123's known answer (6627e8d5, e169c58d, ...).
    assert_eq!(first[0], (0x6627_e8d5_e169_c58d_u64.wrapping_add(1 << 63)) as i64);
    // The call advanced the offset by 4 (one curand4 per thread); the next draw differs.
    assert_eq!(host.cuda_rng(), CudaRngState { seed: 0, offset: 4 });
    draw(&mut host);
    assert_ne!(out.to_i64_vec().unwrap(), first);
    // Back to the recorded state: the same values.
    host.set_cuda_rng(CudaRngState { seed: 0, offset: 0 });
    draw(&mut host);
    assert_eq!(out.to_i64_vec().unwrap(), first);
}

#[test]
fn randint_small_ranges_take_four_values_per_draw() {
    // range < 2**28: four 32-bit values per curand4 call; element i of a 256-thread grid
    // is lane i / 256 of thread i % 256 (lanes beyond the first once n > 256).
    let state = CudaRngState { seed: 42, offset: 8 };
    let (plan, next) = RandintPlan::new(state, 5, 15, 600, DeviceShape::default()).unwrap();
    assert_eq!((plan.unroll, plan.threads, next.offset), (4, 768, 12));
    let values = plan.values();
    assert!(values.iter().all(|v| (5..15).contains(v)));
    for i in [0u64, 1, 255, 256, 599] {
        let r = philox_at(42, i % 768, 2 + i / (768 * 4));
        assert_eq!(
            values[i as usize],
            5 + i64::from(r[((i % (768 * 4)) / 768) as usize] % 10),
            "{i}"
        );
    }
    let mut host = HostBackend::default();
    host.set_cuda_rng(state);
    let got = tensor(
        call_on(
            &mut host,
            "aten.randint.low",
            vec![Value::Int(5), Value::Int(15), Value::List(vec![Value::Int(600)])],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(got.to_i64_vec().unwrap(), values);
    let err = call(
        "aten.randint.low",
        vec![Value::Int(3), Value::Int(3), Value::List(vec![Value::Int(1)])],
        &[],
    )
    .unwrap_err();
    assert!(err.contains("less than"), "{err}");
}

/// A program that only fills Inductor's seed buffer (`buf0 = randint.low_out(...)`) and returns it.
pub const SEEDS_PROGRAM: &str = r#"{"format_version": 1, "main": {"inputs": [],
 "buffers": {"buf0": {"kind": "tensor", "layout": {"dtype": "int64", "device": "cuda:0", "size": [3], "stride": [1]}}},
 "lines": [{"line": "allocate", "buffer": "buf0"},
  {"line": "extern_kernel_out", "op": "aten.randint.low_out", "args": [{"kind": "expr", "value": -9223372036854775808},
   {"kind": "expr", "value": 9223372036854775807}, {"kind": "list", "value": [{"kind": "expr", "value": 3}]}], "out": "buf0"}],
 "outputs": [{"kind": "buffer", "value": "buf0"}]}}"#;

#[test]
fn a_run_draws_from_the_generator_and_advances_it() {
    let program = Program::from_json(SEEDS_PROGRAM).unwrap();
    let mut host = HostBackend::default();
    host.set_cuda_rng(CudaRngState { seed: 0, offset: 0 });
    let mut runs = Vec::new();
    for _ in 0..2 {
        let out = wrapir::exec::run_program(&program, &mut host, &IndexMap::new()).unwrap();
        let Some(Value::Tensor(t)) = out.outputs.first() else {
            panic!("no output")
        };
        runs.push(t.to_i64_vec().unwrap());
    }
    // PyTorch: torch.cuda.manual_seed(0), then two calls of the compiled program.
    assert_eq!(
        runs[0],
        [-1862263915586927219, 307676209692372650, -8763487590234822823]
    );
    assert_eq!(runs[0], seeds_by_hand(0, 3));
    assert_ne!(runs[1], runs[0]);
    assert_eq!(host.cuda_rng(), CudaRngState { seed: 0, offset: 8 });
}

/// `aten.permute` (a complex64 permute reaches it as a fallback on the CPU,
/// upstream's `fallback_tuple_constant_arg`): a view with sizes and strides
/// reordered, as `torch.permute` gives (worked by hand: the transpose of a
/// row-major 2x3 tensor has strides [1, 3]); a list that is not a
/// permutation is refused.
#[test]
fn permute_is_a_reordering_view() {
    let x = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let ints = |v: &[i64]| Value::List(v.iter().map(|i| Value::Int(*i)).collect());
    let t = tensor(call("torch.ops.aten.permute.default", vec![x.clone(), ints(&[1, 0])], &[]).unwrap());
    assert_eq!((t.size(), t.stride()), (&[3, 2][..], &[1, 3][..]));
    assert_eq!(
        t.contiguous_copy().unwrap().to_f64_vec().unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    let same = tensor(call("torch.ops.aten.permute.default", vec![x.clone(), ints(&[-1, -2])], &[]).unwrap());
    assert_eq!(same.stride(), &[1, 3][..]);
    for bad in [&[0, 0][..], &[0][..], &[0, 2][..]] {
        let err = call("torch.ops.aten.permute.default", vec![x.clone(), ints(bad)], &[]).unwrap_err();
        assert!(err.contains("dims"), "{err}");
    }
}

fn pair(v: Value<Tensor>) -> (Tensor, Vec<i64>) {
    match v {
        Value::List(items) => match items.as_slice() {
            [Value::Tensor(values), Value::Tensor(indices)] => (values.clone(), indices.to_i64_vec().unwrap()),
            other => panic!("expected (values, indices), got {other:?}"),
        },
        other => panic!("expected a pair, got {other:?}"),
    }
}

#[test]
fn sort_orders_nan_last_keeps_ties_in_order_and_integers_exact() {
    // torch.sort(torch.tensor([3., nan, 1., 3., -inf]), stable=True)
    //   -> values [-inf, 1, 3, 3, nan], indices [4, 2, 0, 3, 1]
    let x = f32s(&[3.0, f64::NAN, 1.0, 3.0, f64::NEG_INFINITY], &[5]);
    let (values, idx) = pair(
        call(
            "torch.ops.aten.sort.stable",
            vec![x.clone()],
            &[("stable", Value::Bool(true))],
        )
        .unwrap(),
    );
    assert_eq!(idx, [4, 2, 0, 3, 1]);
    let v = values.to_f64_vec().unwrap();
    assert_eq!(&v[..4], &[f64::NEG_INFINITY, 1.0, 3.0, 3.0]);
    assert!(v[4].is_nan());
    // descending=True: nan first, ties still in index order -> indices [1, 0, 3, 2, 4]
    let (_, idx) = pair(
        call(
            "torch.ops.aten.sort.stable",
            vec![x],
            &[
                ("stable", Value::Bool(true)),
                ("dim", Value::Int(0)),
                ("descending", Value::Bool(true)),
            ],
        )
        .unwrap(),
    );
    assert_eq!(idx, [1, 0, 3, 2, 4]);
    // sort.default takes dim and descending positionally; rows of a matrix along dim 1.
    let m = f32s(&[2.0, 1.0, 0.0, 5.0, 5.0, 4.0], &[2, 3]);
    let (values, idx) = pair(
        call(
            "torch.ops.aten.sort.default",
            vec![m, Value::Int(1), Value::Bool(false)],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(values.to_f64_vec().unwrap(), [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]);
    assert_eq!(idx, [2, 1, 0, 2, 0, 1]);
    // int64 values beyond 2^53 are ordered exactly (an f64 round trip would tie them).
    let big = (1i64 << 60) + 1;
    let ints = Value::Tensor(Tensor::from_i64(DType::Int64, &[big, big - 1, big + 1], &[3]).unwrap());
    let (values, idx) = pair(
        call(
            "torch.ops.aten.sort.stable",
            vec![ints],
            &[("stable", Value::Bool(true))],
        )
        .unwrap(),
    );
    assert_eq!(values.to_i64_vec().unwrap(), [big - 1, big, big + 1]);
    assert_eq!(idx, [1, 0, 2]);
    // topk shares the ordering: torch.topk(tensor([1., 3., 3., 2.]), 2) -> ([3, 3], [1, 2])
    let (values, idx) = pair(
        call(
            "torch.ops.aten.topk.default",
            vec![f32s(&[1.0, 3.0, 3.0, 2.0], &[4]), Value::Int(2)],
            &[],
        )
        .unwrap(),
    );
    assert_eq!(values.to_f64_vec().unwrap(), [3.0, 3.0]);
    assert_eq!(idx, [1, 2]);
}

#[test]
fn int_mm_is_an_exact_int8_gemm_with_int32_results() {
    // torch._int_mm(a, b) for a = [[127, -128], [1, 2]], b = [[127, 1], [-128, 0]]:
    // [[127*127 + (-128)*(-128), 127], [1*127 + 2*(-128), 1]] = [[32513, 127], [-129, 1]]
    let a = Value::Tensor(Tensor::from_i64(DType::Int8, &[127, -128, 1, 2], &[2, 2]).unwrap());
    let b = Value::Tensor(Tensor::from_i64(DType::Int8, &[127, 1, -128, 0], &[2, 2]).unwrap());
    let out = tensor(call("extern_kernels._int_mm", vec![a.clone(), b.clone()], &[]).unwrap());
    assert_eq!(out.dtype(), DType::Int32);
    assert_eq!(out.to_i64_vec().unwrap(), [32513, 127, -129, 1]);
    // Non-int8 operands and mismatched inner sizes are errors naming the op.
    let err = call("extern_kernels._int_mm", vec![f32s(&[1.0], &[1, 1]), b], &[]).unwrap_err();
    assert!(err.contains("_int_mm") && err.contains("int8"), "{err}");
    let c = Value::Tensor(Tensor::from_i64(DType::Int8, &[1, 2, 3], &[3, 1]).unwrap());
    let err = call("extern_kernels._int_mm", vec![a, c], &[]).unwrap_err();
    assert!(err.contains("cannot multiply a 2x2 matrix by a 3x1 one"), "{err}");
}

/// `extern_kernels.bias_addmm` (Inductor's max-autotune wrapper): `addmm` of
/// `inp[0]` for a row-broadcast (stride 0) or one-row `inp`, else of `inp`,
/// with keyword `alpha` / `beta`; the same values as `addmm`.
#[test]
fn bias_addmm_is_addmm_of_the_first_row() {
    let row = Tensor::from_f64(DType::Float32, &[0.5, -1.0, 2.0], &[3]).unwrap();
    let expanded = row.view(&[2, 3], &[0, 1], 0).unwrap();
    let mat1 = f32s(&[1., 2., 3., 4.], &[2, 2]);
    let mat2 = f32s(&[1., 0., -1., 2., 1., 0.5], &[2, 3]);
    let kwargs = [("alpha", Value::Float(2.0)), ("beta", Value::Float(0.5))];
    // `op(inp, mat1, mat2, alpha=2, beta=0.5)`.
    let run = |op: &str, inp: Tensor| {
        tensor(call(op, vec![Value::Tensor(inp), mat1.clone(), mat2.clone()], &kwargs).unwrap())
    };
    let want = run("extern_kernels.addmm", row.clone());
    for inp in [expanded, row.view(&[1, 3], &[3, 1], 0).unwrap(), want.clone()] {
        let got = run("extern_kernels.bias_addmm", inp.clone());
        // A full-size `inp` is added as it is.
        let expected = if inp.size() == [2, 3] && inp.stride() != [0, 1] {
            run("extern_kernels.addmm", inp)
        } else {
            want.clone()
        };
        assert_eq!(got.to_f64_vec().unwrap(), expected.to_f64_vec().unwrap());
        assert_eq!(got.size(), &[2, 3]);
    }
}

// ------------------------------------------------------------- _cudnn_rnn

/// `aten._cudnn_rnn` on the host against eager PyTorch: the committed CPU
/// bundles of a two-layer bidirectional LSTM and a two-layer GRU (batch
/// first, `nn.LSTM` / `nn.GRU` with zero initial states) hold the modules'
/// weights in `_flat_weights` order and eager's outputs (`out`, the last
/// layer's final hidden state); the same weights through `_cudnn_rnn` give
/// them, with the output transposed as PyTorch's CUDA kernel returns it.
/// Eager ran in f32 (oneDNN, ATen's cells), the host in f64 rounded once:
/// within 1e-5.
#[test]
fn cudnn_rnn_on_the_host_matches_eager_lstm_and_gru() {
    let root = common::root().join("fixtures/inductor/bundles_cpu_2.15/ops");
    for (case, mode, bidirectional, weights) in [("lstm", 2, true, 16), ("gru", 3, false, 8)] {
        let inputs = read(&root.join(case).join("inputs.safetensors"));
        let expected = read(&root.join(case).join("expected.safetensors"));
        let x = inputs[&format!("arg{weights}_1")].clone();
        let (n, layers, d, h) = (x.size()[0], 2i64, if bidirectional { 2 } else { 1 }, 16i64);
        let zeros = || f32s(&vec![0.0; (layers * d * n * h) as usize], &[layers * d, n, h]);
        let rnn = common::CudnnRnn {
            mode,
            bias: true,
            hidden: h,
            layers,
            batch_first: true,
            bidirectional,
        };
        let args = rnn.args(
            Value::Tensor(x.clone()),
            (0..weights)
                .map(|i| Value::Tensor(inputs[&format!("arg{i}_1")].clone()))
                .collect(),
            // The host returns the buffer as it is (cuDNN's packed weights on a GPU).
            f32s(&[0.0; 4], &[4]),
            zeros(),
            if mode == 2 { zeros() } else { Value::None },
        );
        let Value::List(got) = call("aten._cudnn_rnn.default", args, &[]).unwrap() else {
            panic!("{case}: not a list")
        };
        let got: Vec<Tensor> = got.into_iter().map(tensor).collect();
        let f = d * h;
        let t = x.size()[1];
        assert_eq!(got[0].size(), [n, t, f], "{case}");
        assert_eq!(got[0].stride(), [f, n * f, 1], "{case}: PyTorch's transposed output");
        assert_eq!(got[1].size(), [layers * d, n, h], "{case}");
        let cy = if mode == 2 { vec![layers * d, n, h] } else { vec![0] };
        assert_eq!(got[2].size(), cy.as_slice(), "{case}");
        assert_eq!(
            (got[3].size(), got[3].dtype()),
            (&[0i64][..], wrapir::ir::DType::Uint8),
            "{case}"
        );
        assert_eq!(got[4].size(), [4], "{case}");
        let last_h = got[1].to_f64_vec().unwrap()[((layers * d - 1) * n * h) as usize..].to_vec();
        for (what, g, w) in [
            ("output", got[0].to_f64_vec().unwrap(), &expected["out0"]),
            ("h[-1]", last_h, &expected["out1"]),
        ] {
            let w = w.to_f64_vec().unwrap();
            let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(g.len() == w.len() && worst <= 1e-5, "{case} {what}: max error {worst}");
        }
    }
    // Without `weight_buf` the fifth result would be cuDNN's packing: refused.
    let tanh = common::CudnnRnn {
        mode: 1,
        bias: false,
        hidden: 4,
        layers: 1,
        batch_first: false,
        bidirectional: false,
    };
    let args = tanh.args(
        f32s(&[0.0; 6], &[1, 2, 3]),
        vec![f32s(&[0.0; 12], &[4, 3]), f32s(&[0.0; 16], &[4, 4])],
        Value::None,
        f32s(&[0.0; 8], &[1, 2, 4]),
        Value::None,
    );
    let e = call("aten._cudnn_rnn.default", args, &[]).unwrap_err();
    common::assert_contains(&e, "weight_buf");
}

// ------------------------------------------------------- kernels' vector ISA

/// A C++ kernel compiled for a vector ISA (its `isa` in program.json: the
/// exporter's `cpu_isa`) loads only on a CPU that has it, checked with
/// `cpuid` before the image is mapped: a copy of a committed CPU bundle whose
/// kernels claim an ISA this CPU lacks is refused by `wrapir run --device
/// cpu` naming the bundle's image, the ISA and the CPU's features, and
/// `wrapir check --device cpu` names the kernel too; one claiming an ISA no
/// wrapir knows is refused where program.json is read; a claim the CPU meets
/// runs (the images are the baseline's, which any CPU with the claimed ISA
/// runs).
#[test]
fn kernels_built_for_a_vector_isa_the_cpu_lacks_are_refused() {
    use wrapir::exec::host::kernels::isa;
    let dir = common::scratch("host_features", "isa");
    let source = common::root().join("fixtures/inductor/bundles_cpu_2.15/cpp/softmax");
    let claim = |name: &str, isa: &str| -> std::path::PathBuf {
        let b = dir.join(name);
        common::copy_dir(&source, &b);
        let path = b.join("program.json");
        let mut program: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut claimed = 0;
        for kernel in program["kernels"].as_object_mut().unwrap().values_mut() {
            if kernel["backend"]["kind"] == "cpp" {
                kernel["backend"]["isa"] = serde_json::json!(isa);
                claimed += 1;
            }
        }
        assert!(claimed > 0, "the softmax bundle has C++ kernels");
        std::fs::write(&path, serde_json::to_string(&program).unwrap()).unwrap();
        b
    };
    // An ISA this CPU lacks (AVX-512 on most machines; else a CPU with it runs
    // the AVX2 and AVX-512 claims and only the unknown one is refused).
    let isas = || wrapir::ir::VecIsa::ALL.into_iter();
    // An ISA no wrapir knows: refused where program.json is read, naming it.
    let unknown = claim("unknown", "avx10");
    for verb in ["run", "check"] {
        let out = common::wrapir(&[verb, unknown.to_str().unwrap(), "--device", "cpu"]);
        assert_ne!(out.code, 0, "{verb}: {}", out.stdout);
        assert!(
            out.stderr.contains("program.json") && out.stderr.contains("avx10") && out.stderr.contains("avx512"),
            "{verb}: {}",
            out.stderr
        );
    }
    if let Some(claimed) = isas().find(|i| isa::check_isa(*i).is_err()).map(|i| i.name()) {
        let name = "lacking";
        let b = claim(name, claimed);
        let bundle = b.to_str().unwrap();
        let run = common::wrapir(&["run", bundle, "--device", "cpu"]);
        assert_ne!(run.code, 0, "{name}: {}", run.stdout);
        assert!(
            run.stderr.contains(&format!("{bundle}/kernels/")) && run.stderr.contains(&format!("`{claimed}`")),
            "{name}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("its vector features"), "{}", run.stderr);
        let check = common::wrapir(&["check", bundle, "--device", "cpu"]);
        assert_ne!(check.code, 0, "{name}: {}", check.stdout);
        assert!(
            check.stdout.contains("cannot load kernel") && check.stdout.contains(&format!("`{claimed}`")),
            "{name}: {}",
            check.stdout
        );
    }
    for met in isas().filter(|i| isa::check_isa(*i).is_ok()).map(|i| i.name()) {
        let b = claim(&format!("met_{met}"), met);
        let run = common::wrapir(&["run", b.to_str().unwrap(), "--device", "cpu"]);
        assert_eq!(run.code, 0, "{met}: {}{}", run.stdout, run.stderr);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `aten._grouped_mm`'s refusals are PyTorch's: a bias, int64 offsets, a
/// 2-D operand without offsets, another output dtype; each names the op.
/// (Its values and layouts, every form, are `tests/op_layouts.rs`'s.)
#[test]
fn grouped_mm_refuses_what_pytorch_refuses() {
    let op = "torch.ops.aten._grouped_mm.default";
    let a = f32s(&[0.0; 8 * 4], &[8, 4]);
    let b = f32s(&[0.0; 2 * 4 * 4], &[2, 4, 4]);
    let offs = |dtype| Value::Tensor(Tensor::from_i64(dtype, &[4, 8], &[2]).unwrap());
    let cases: Vec<(Vec<Value<Tensor>>, Vec<(&str, Value<Tensor>)>, &str)> = vec![
        (
            vec![a.clone(), b.clone(), offs(DType::Int32)],
            vec![("bias", f32s(&[0.0; 8], &[2, 4]))],
            "bias is not supported",
        ),
        (vec![a.clone(), b.clone(), offs(DType::Int64)], vec![], "1-D int32"),
        (
            vec![a.clone(), f32s(&[0.0; 16], &[4, 4])],
            vec![],
            "ranks 2 and 2 without offs",
        ),
        (
            vec![a, b, offs(DType::Int32)],
            vec![("out_dtype", Value::DType(DType::Bfloat16))],
            "output dtype",
        ),
    ];
    for (args, kwargs, want) in cases {
        let e = call(op, args, &kwargs).unwrap_err();
        assert!(e.contains("_grouped_mm") && e.contains(want), "{e}");
    }
}
