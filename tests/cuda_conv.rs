#![cfg(feature = "cuda")]
//! `aten.convolution` on cuDNN against the host backend's direct summation:
//! 1-D, 2-D, 3-D, stride, padding, dilation, groups (depthwise), transposed
//! with `output_padding`, bias, contiguous and channels-last operands, the
//! `out=` form, f32 (TF32 off and on), f16 and bf16.
//!
//! Compiled only with the `cuda` feature; on a machine with a GPU:
//! `cargo test --features cuda --test cuda_conv`.

mod common;

use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::format::bundle_json::MathModes;
use wrapir::ir::DType;

/// Deterministic values in [-1, 1), exact in `float32`.
fn values(n: usize, seed: u64) -> Vec<f64> {
    common::uniform_values_bits(n, seed, 24)
}

/// A host tensor of `size`, channels-last in memory when asked (4-D/5-D).
fn tensor(dtype: DType, size: &[i64], seed: u64, channels_last: bool) -> Tensor {
    let n: i64 = size.iter().product();
    let data = values(n as usize, seed);
    if !channels_last || size.len() < 4 {
        return Tensor::from_f64(dtype, &data, size).unwrap();
    }
    // Store as N, *spatial, C and view it as N, C, *spatial.
    let mut stored: Vec<i64> = vec![size[0]];
    stored.extend(&size[2..]);
    stored.push(size[1]);
    let base = Tensor::from_f64(dtype, &data, &stored).unwrap();
    let r = size.len();
    let mut stride = vec![0i64; r];
    stride[1] = 1;
    let mut acc = size[1];
    for d in (2..r).rev() {
        stride[d] = acc;
        acc *= size[d];
    }
    stride[0] = acc;
    base.view(size, &stride, 0).unwrap()
}

struct Case {
    name: &'static str,
    x: Vec<i64>,
    w: Vec<i64>,
    bias: bool,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    transposed: bool,
    output_padding: Vec<i64>,
    groups: i64,
    channels_last: bool,
    /// The input starts one element into its storage (alignment of one
    /// element), as a view at an odd offset does.
    misaligned: bool,
}

fn case(name: &'static str, x: &[i64], w: &[i64]) -> Case {
    let spatial = x.len() - 2;
    Case {
        name,
        x: x.to_vec(),
        w: w.to_vec(),
        bias: true,
        stride: vec![1; spatial],
        padding: vec![0; spatial],
        dilation: vec![1; spatial],
        transposed: false,
        output_padding: vec![0; spatial],
        groups: 1,
        channels_last: false,
        misaligned: false,
    }
}

/// `t`'s elements, contiguous, one element into a larger storage.
fn shifted(t: Tensor) -> Tensor {
    let mut data = vec![0.0];
    data.extend(t.to_f64_vec().unwrap());
    let n = data.len() as i64;
    let size = t.size().to_vec();
    let mut stride = vec![1i64; size.len()];
    for d in (0..size.len().saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * size[d + 1];
    }
    Tensor::from_f64(t.dtype(), &data, &[n])
        .unwrap()
        .view(&size, &stride, 1)
        .unwrap()
}

fn ints(v: &[i64]) -> Value<Tensor> {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

/// Runs one case on both backends; the max error relative to the output's scale.
fn run_case(c: &Case, dtype: DType, tf32: bool, use_out: bool) -> Result<f64, String> {
    let x = tensor(dtype, &c.x, 1, c.channels_last);
    let x = if c.misaligned { shifted(x) } else { x };
    let w = tensor(dtype, &c.w, 2, c.channels_last);
    let out_channels = if c.transposed { c.w[1] * c.groups } else { c.w[0] };
    let b = Tensor::from_f64(dtype, &values(out_channels as usize, 3), &[out_channels]).unwrap();
    let args: Vec<Value<Tensor>> = vec![
        Value::Tensor(x),
        Value::Tensor(w),
        if c.bias { Value::Tensor(b) } else { Value::None },
    ];
    let mut kwargs: IndexMap<String, Value<Tensor>> = IndexMap::new();
    kwargs.insert("stride".into(), ints(&c.stride));
    kwargs.insert("padding".into(), ints(&c.padding));
    kwargs.insert("dilation".into(), ints(&c.dilation));
    kwargs.insert("transposed".into(), Value::Bool(c.transposed));
    kwargs.insert("output_padding".into(), ints(&c.output_padding));
    kwargs.insert("groups".into(), Value::Int(c.groups));
    let op = "extern_kernels.convolution";
    let mut host = HostBackend::new(HostOptions::default());
    let want = host
        .call_extern(ExternCall::new(op, &args, &kwargs))
        .map_err(|e| format!("host: {e}"))?;
    let Value::Tensor(want) = want else {
        return Err("host gave no tensor".into());
    };
    let (mut backend, log) = common::device_only_backend(MathModes {
        cudnn_allow_tf32: tf32,
        ..MathModes::default()
    })?;
    let (dargs, mut dkwargs) = common::copy_call_in(&mut backend, &args, &kwargs);
    let out = if use_out {
        let o = backend
            .allocate(&wrapir::exec::TensorSpec::contiguous(
                dtype,
                wrapir::ir::Device::cuda(0),
                want.size(),
            ))
            .map_err(|e| e.to_string())?;
        dkwargs.insert("out".into(), Value::Tensor(o.clone()));
        Some(o)
    } else {
        None
    };
    let got = backend
        .call_extern(ExternCall::new(op, &dargs, &dkwargs))
        .map_err(|e| format!("cuda: {e}"))?;
    if log.device_ops().is_empty() {
        return Err("did not run on the device".into());
    }
    let got = match (got, out) {
        (Value::Tensor(t), None) => t,
        (Value::None, Some(o)) => o,
        (v, _) => return Err(format!("unexpected result {}", v.kind())),
    };
    let got = backend.copy_out(&got).map_err(|e| e.to_string())?;
    if got.size() != want.size() {
        return Err(format!("size {:?}, expected {:?}", got.size(), want.size()));
    }
    let (g, h) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let scale = h.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let (mut worst, mut at) = (0.0f64, 0usize);
    for (i, (a, b)) in g.iter().zip(&h).enumerate() {
        let e = (a - b).abs() / scale;
        if !(e <= worst) {
            worst = e;
            at = i;
        }
    }
    if worst.is_nan() {
        return Err(format!("NaN at {at}"));
    }
    Ok(worst)
}

#[test]
fn convolution_matches_the_host_on_cudnn() {
    let cases = vec![
        case("2-d 3x3", &[2, 3, 9, 9], &[4, 3, 3, 3]),
        Case {
            padding: vec![1, 1],
            stride: vec![2, 2],
            ..case("2-d stride 2 pad 1", &[2, 8, 16, 16], &[16, 8, 3, 3])
        },
        Case {
            dilation: vec![2, 2],
            padding: vec![2, 2],
            ..case("2-d dilated", &[1, 4, 12, 12], &[4, 4, 3, 3])
        },
        Case {
            groups: 2,
            ..case("2-d groups 2", &[2, 8, 10, 10], &[6, 4, 3, 3])
        },
        Case {
            groups: 16,
            padding: vec![3, 3],
            bias: true,
            ..case("depthwise 7x7", &[2, 16, 14, 14], &[16, 1, 7, 7])
        },
        Case {
            channels_last: true,
            padding: vec![1, 1],
            ..case("channels-last 3x3", &[2, 8, 10, 10], &[8, 8, 3, 3])
        },
        Case {
            channels_last: true,
            groups: 8,
            padding: vec![1, 1],
            ..case("channels-last depthwise", &[2, 8, 10, 10], &[8, 1, 3, 3])
        },
        case("1x1", &[4, 16, 7, 7], &[32, 16, 1, 1]),
        Case {
            bias: false,
            ..case("no bias", &[1, 3, 8, 8], &[2, 3, 3, 3])
        },
        Case {
            padding: vec![2],
            stride: vec![2],
            ..case("1-d", &[2, 4, 33], &[6, 4, 5])
        },
        Case {
            groups: 4,
            padding: vec![1],
            ..case("1-d depthwise", &[2, 4, 20], &[4, 1, 3])
        },
        Case {
            padding: vec![1, 1, 1],
            ..case("3-d", &[1, 2, 6, 7, 8], &[3, 2, 3, 3, 3])
        },
        Case {
            transposed: true,
            stride: vec![2, 2],
            padding: vec![1, 1],
            output_padding: vec![1, 1],
            ..case("transposed 2-d", &[2, 6, 5, 5], &[6, 4, 3, 3])
        },
        Case {
            transposed: true,
            stride: vec![2],
            groups: 2,
            ..case("transposed 1-d groups", &[1, 4, 9], &[4, 3, 4])
        },
        Case {
            stride: vec![16, 16],
            ..case("patch embedding", &[2, 3, 32, 32], &[8, 3, 16, 16])
        },
        Case {
            misaligned: true,
            padding: vec![1, 1],
            ..case("input at an odd offset", &[2, 8, 10, 10], &[8, 8, 3, 3])
        },
    ];
    let mut failures = Vec::new();
    for c in &cases {
        for (dtype, tf32, tol) in [
            (DType::Float32, false, 1e-5),
            (DType::Float32, true, 5e-3),
            (DType::Float16, false, 5e-3),
            (DType::Bfloat16, false, 3e-2),
        ] {
            for use_out in [false, true] {
                match run_case(c, dtype, tf32, use_out) {
                    Ok(e) if e <= tol => {}
                    Ok(e) => failures.push(format!(
                        "{} {dtype} tf32={tf32} out={use_out}: error {e:.3e} > {tol:.0e}",
                        c.name
                    )),
                    Err(e) => failures.push(format!("{} {dtype} tf32={tf32} out={use_out}: {e}", c.name)),
                }
            }
        }
    }
    common::assert_no_failures(&failures);
}

#[test]
fn convolution_errors_name_the_problem() {
    let c = Case {
        groups: 3,
        ..case("bad groups", &[1, 4, 8, 8], &[4, 2, 3, 3])
    };
    let e = run_case(&c, DType::Float32, false, false).unwrap_err();
    assert!(e.contains("groups"), "{e}");
}
