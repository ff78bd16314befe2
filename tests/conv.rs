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
