//! The host `aten.convolution` against hand-computed results.

use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::ir::DType;

fn t(values: &[f64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_f64(DType::Float32, values, size).unwrap())
}

fn ints(v: &[i64]) -> Value<Tensor> {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

/// Runs `convolution(x, w, bias, **kwargs)` on the host: the result's size and values, or the error.
fn conv(
    x: Value<Tensor>,
    w: Value<Tensor>,
    bias: Value<Tensor>,
    kwargs: &[(&str, Value<Tensor>)],
) -> Result<(Vec<i64>, Vec<f64>), String> {
    let args = vec![x, w, bias];
    let kwargs: IndexMap<String, Value<Tensor>> = kwargs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let mut host = HostBackend::new(HostOptions::default());
    match host.call_extern(ExternCall::new("extern_kernels.convolution", &args, &kwargs)) {
        Ok(Value::Tensor(r)) => Ok((r.size().to_vec(), r.to_f64_vec().unwrap())),
        Ok(v) => Err(format!("not a tensor: {}", v.kind())),
        Err(e) => Err(e.to_string()),
    }
}

fn check(got: Result<(Vec<i64>, Vec<f64>), String>, size: &[i64], values: &[f64]) {
    let (s, v) = got.unwrap();
    assert_eq!((s.as_slice(), v.as_slice()), (size, values));
}

#[test]
fn one_d_with_padding_stride_dilation_and_bias() {
    let x = || t(&[1., 2., 3., 4., 5.], &[1, 1, 5]);
    check(
        conv(x(), t(&[1., 1.], &[1, 1, 2]), Value::None, &[]),
        &[1, 1, 4],
        &[3., 5., 7., 9.],
    );
    check(
        conv(
            x(),
            t(&[1., 1.], &[1, 1, 2]),
            t(&[10.], &[1]),
            &[("padding", ints(&[1])), ("stride", ints(&[2]))],
        ),
        &[1, 1, 3],
        &[11., 15., 19.],
    );
    check(
        conv(x(), t(&[1., -1.], &[1, 1, 2]), Value::None, &[("dilation", ints(&[2]))]),
        &[1, 1, 3],
        &[-2., -2., -2.],
    );
}

#[test]
fn two_d_groups_and_depthwise() {
    // Two channels, depthwise 1x1 weights 2 and 3.
    let x = t(&[1., 2., 3., 4., 5., 6., 7., 8.], &[1, 2, 2, 2]);
    check(
        conv(
            x,
            t(&[2., 3.], &[2, 1, 1, 1]),
            Value::None,
            &[("groups", Value::Int(2))],
        ),
        &[1, 2, 2, 2],
        &[2., 4., 6., 8., 15., 18., 21., 24.],
    );
    // A 2x2 box filter over a 3x3 ramp.
    let x = t(&[0., 1., 2., 3., 4., 5., 6., 7., 8.], &[1, 1, 3, 3]);
    check(
        conv(x, t(&[1., 1., 1., 1.], &[1, 1, 2, 2]), Value::None, &[]),
        &[1, 1, 2, 2],
        &[8., 12., 20., 24.],
    );
}

/// A 2-d grouped convolution with stride, padding, dilation and bias on a
/// batch of two, summed here element by element: the host's result (its
/// GEMMs) matches, for a contiguous input and for the same input
/// channels-last (whose result is channels-last, as ATen's is).
#[test]
fn grouped_strided_dilated_batches_match_a_direct_sum_in_either_memory_format() {
    let (n, c, h, w) = (2usize, 4usize, 7usize, 6usize);
    let (oc, groups, kh, kw) = (6usize, 2usize, 3usize, 2usize);
    let (stride, padding, dilation) = ([2usize, 1], [1usize, 0], [1usize, 2]);
    let (cg, ocg) = (c / groups, oc / groups);
    let xv: Vec<f64> = (0..n * c * h * w).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
    let wv: Vec<f64> = (0..oc * cg * kh * kw).map(|i| ((i * 5) % 7) as f64 - 3.0).collect();
    let bias: Vec<f64> = (0..oc).map(|i| i as f64 * 0.5).collect();
    let oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
    let ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
    let mut want = vec![0f64; n * oc * oh * ow];
    for b in 0..n {
        for o in 0..oc {
            for y in 0..oh {
                for xo in 0..ow {
                    let mut acc = bias[o];
                    for ic in 0..cg {
                        let channel = (o / ocg) * cg + ic;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (y * stride[0] + ky * dilation[0]) as i64 - padding[0] as i64;
                                let ix = (xo * stride[1] + kx * dilation[1]) as i64 - padding[1] as i64;
                                if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                                    continue;
                                }
                                let xi = ((b * c + channel) * h + iy as usize) * w + ix as usize;
                                acc += xv[xi] * wv[((o * cg + ic) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    want[((b * oc + o) * oh + y) * ow + xo] = acc;
                }
            }
        }
    }
    let size = [n as i64, c as i64, h as i64, w as i64];
    let contiguous = Tensor::from_f64(DType::Float32, &xv, &size).unwrap();
    // The same values laid out channels innermost.
    let mut nhwc = vec![0f64; xv.len()];
    for b in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    nhwc[((b * h + y) * w + x) * c + ch] = xv[((b * c + ch) * h + y) * w + x];
                }
            }
        }
    }
    let cl_stride = [(h * w * c) as i64, 1, (w * c) as i64, c as i64];
    let channels_last = Tensor::from_f64(DType::Float32, &nhwc, &[n as i64, h as i64, w as i64, c as i64])
        .unwrap()
        .view(&size, &cl_stride, 0)
        .unwrap();
    let kwargs = [
        ("stride", ints(&[2, 1])),
        ("padding", ints(&[1, 0])),
        ("dilation", ints(&[1, 2])),
        ("groups", Value::Int(2)),
    ];
    for (input, out_stride) in [
        (contiguous, vec![(oc * oh * ow) as i64, (oh * ow) as i64, ow as i64, 1]),
        (
            channels_last,
            vec![(oh * ow * oc) as i64, 1, (ow * oc) as i64, oc as i64],
        ),
    ] {
        let args = vec![
            Value::Tensor(input),
            t(&wv, &[oc as i64, cg as i64, kh as i64, kw as i64]),
            t(&bias, &[oc as i64]),
        ];
        let kwargs: IndexMap<String, Value<Tensor>> = kwargs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let mut host = HostBackend::new(HostOptions::default());
        let Ok(Value::Tensor(r)) = host.call_extern(ExternCall::new("extern_kernels.convolution", &args, &kwargs))
        else {
            panic!("the convolution failed");
        };
        assert_eq!(r.size(), &[n as i64, oc as i64, oh as i64, ow as i64]);
        assert_eq!(r.stride(), out_stride.as_slice());
        // Integer-valued operands: every sum is exact in f32.
        assert_eq!(r.to_f64_vec().unwrap(), want);
    }
}

#[test]
fn transposed_with_stride_and_output_padding() {
    let x = t(&[1., 2.], &[1, 1, 2]);
    check(
        conv(
            x.clone(),
            t(&[1., 1.], &[1, 1, 2]),
            Value::None,
            &[("transposed", Value::Bool(true)), ("stride", ints(&[2]))],
        ),
        &[1, 1, 4],
        &[1., 1., 2., 2.],
    );
    check(
        conv(
            x,
            t(&[1., 10.], &[1, 1, 2]),
            Value::None,
            &[
                ("transposed", Value::Bool(true)),
                ("stride", ints(&[2])),
                ("output_padding", ints(&[1])),
            ],
        ),
        &[1, 1, 5],
        &[1., 10., 2., 20., 0.],
    );
}

#[test]
fn bad_convolutions_are_errors_naming_the_problem() {
    let x = || t(&[0.; 16], &[1, 4, 2, 2]);
    let e = conv(
        x(),
        t(&[0.; 8], &[4, 2, 1, 1]),
        Value::None,
        &[("groups", Value::Int(3))],
    )
    .unwrap_err();
    assert!(e.contains("groups 3"), "{e}");
    let e = conv(x(), t(&[0.; 36], &[1, 4, 3, 3]), Value::None, &[]).unwrap_err();
    assert!(e.contains("would be 0"), "{e}");
    let e = conv(x(), t(&[0.; 4], &[1, 4, 1, 1]), t(&[0., 0.], &[2]), &[]).unwrap_err();
    assert!(e.contains("bias"), "{e}");
    let e = conv(
        x(),
        t(&[0.; 4], &[1, 4, 1, 1]),
        Value::None,
        &[("stride", ints(&[0, 1]))],
    )
    .unwrap_err();
    assert!(e.contains("positive"), "{e}");
}
