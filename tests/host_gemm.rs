//! The host backend's GEMM-family ops (`mm`, `bmm`, `addmm`,
//! `_addmm_activation`, `baddbmm`, `addbmm`) against a plain f64 reference:
//! bias shapes and broadcasts, alpha / beta (positional and keyword),
//! transposed operands, `out=`, and f16 / bf16 rounded once.

use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::ir::DType;

fn host() -> HostBackend {
    HostBackend::new(HostOptions {
        jagged_zero_fill: true,
        ..Default::default()
    })
}

fn tensor(dtype: DType, size: &[i64], seed: u64) -> Tensor {
    let n: i64 = size.iter().product();
    // Small multiples of 1/8 keep f16/bf16 inputs exact.
    let v: Vec<f64> = (0..n)
        .map(|i| (((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 97) % 17) as f64 - 8.0) / 8.0)
        .collect();
    Tensor::from_f64(dtype, &v, size).unwrap()
}

fn call(op: &str, args: Vec<Value<Tensor>>, kwargs: IndexMap<String, Value<Tensor>>) -> Result<Value<Tensor>, String> {
    host()
        .call_extern(ExternCall::new(op, &args, &kwargs))
        .map_err(|e| e.to_string())
}

fn values(v: Value<Tensor>) -> (Vec<i64>, Vec<f64>, DType) {
    match v {
        Value::Tensor(t) => (t.size().to_vec(), t.to_f64_vec().unwrap(), t.dtype()),
        other => panic!("expected a tensor, got {other:?}"),
    }
}

/// `act(beta * bias + alpha * x @ y)` per batch, in f64, row-major.
fn reference(x: &Tensor, y: &Tensor, bias: Option<&Tensor>, beta: f64, alpha: f64, act: &str) -> Vec<f64> {
    let (xs, ys) = (x.size(), y.size());
    let (b, m, k, n) = if xs.len() == 3 {
        (xs[0], xs[1], xs[2], ys[2])
    } else {
        (1, xs[0], xs[1], ys[1])
    };
    let (xv, yv) = (x.to_f64_vec().unwrap(), y.to_f64_vec().unwrap());
    let shape: Vec<i64> = if xs.len() == 3 { vec![b, m, n] } else { vec![m, n] };
    let bv = bias.map(|t| {
        let mut out = Vec::new();
        let bs = t.size().to_vec();
        let lead = shape.len() - bs.len();
        let cv = t.to_f64_vec().unwrap();
        let cstr = wrapir::exec::contiguous_strides(&bs);
        for flat in 0..shape.iter().product::<i64>() {
            let mut rem = flat;
            let mut off = 0;
            for d in (0..shape.len()).rev() {
                let c = rem % shape[d];
                rem /= shape[d];
                if d >= lead && bs[d - lead] != 1 {
                    off += c * cstr[d - lead];
                }
            }
            out.push(cv[off as usize]);
        }
        out
    });
    let mut out = Vec::new();
    for bi in 0..b {
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    s += xv[(bi * m * k + i * k + p) as usize] * yv[(bi * k * n + p * n + j) as usize];
                }
                let idx = (bi * m * n + i * n + j) as usize;
                let mut v = alpha * s;
                if let (Some(bv), true) = (&bv, beta != 0.0) {
                    v += beta * bv[idx];
                }
                out.push(match act {
                    "relu" => v.max(0.0),
                    "gelu" => 0.5 * v * (1.0 + (0.7978845608028654 * (v + 0.044715 * v * v * v)).tanh()),
                    _ => v,
                });
            }
        }
    }
    out
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values, expected {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, expected {w} (tolerance {tol})"
        );
    }
}

fn f(v: f64) -> Value<Tensor> {
    Value::Float(v)
}

fn t(x: &Tensor) -> Value<Tensor> {
    Value::Tensor(x.clone())
}

#[test]
fn addmm_every_bias_shape_alpha_beta() {
    let (m, k, n) = (5, 7, 6);
    let x = tensor(DType::Float32, &[m, k], 1);
    let y = tensor(DType::Float32, &[k, n], 2);
    for bias_size in [vec![n], vec![1, n], vec![m, 1], vec![m, n], vec![1, 1]] {
        let bias = tensor(DType::Float32, &bias_size, 3);
        for (beta, alpha) in [(1.0, 1.0), (0.5, 2.0), (0.0, 1.0)] {
            let what = format!("addmm bias {bias_size:?} beta {beta} alpha {alpha}");
            let want = reference(&x, &y, Some(&bias), beta, alpha, "");
            // Keyword form.
            let kw: IndexMap<String, Value<Tensor>> =
                [("beta".to_string(), f(beta)), ("alpha".to_string(), f(alpha))].into();
            let (size, got, _) = values(call("extern_kernels.addmm", vec![t(&bias), t(&x), t(&y)], kw).unwrap());
            assert_eq!(size, vec![m, n], "{what}");
            close(&got, &want, 1e-6, &what);
            // Positional form.
            let args = vec![t(&bias), t(&x), t(&y), f(beta), f(alpha)];
            let (_, got, _) = values(call("torch.ops.aten.addmm.default", args, IndexMap::new()).unwrap());
            close(&got, &want, 1e-6, &format!("{what} (positional)"));
        }
    }
}

#[test]
fn beta_zero_ignores_a_nan_bias() {
    let x = tensor(DType::Float32, &[3, 4], 1);
    let y = tensor(DType::Float32, &[4, 2], 2);
    let bias = Tensor::from_f64(DType::Float32, &[f64::NAN, f64::NAN], &[2]).unwrap();
    let kw: IndexMap<String, Value<Tensor>> = [("beta".to_string(), f(0.0))].into();
    let (_, got, _) = values(call("extern_kernels.addmm", vec![t(&bias), t(&x), t(&y)], kw).unwrap());
    close(&got, &reference(&x, &y, None, 0.0, 1.0, ""), 1e-6, "addmm beta=0");
}

#[test]
fn transposed_operands_and_out() {
    let (m, k, n) = (4, 6, 5);
    let x = tensor(DType::Float32, &[m, k], 4);
    // w is [n, k]; its transposed view [k, n] with strides (1, k), as Inductor passes linear weights.
    let w = tensor(DType::Float32, &[n, k], 5);
    let wt = w.view(&[k, n], &[1, k], 0).unwrap();
    let bias = tensor(DType::Float32, &[n], 6);
    let want = reference(&x, &wt.contiguous_copy().unwrap(), Some(&bias), 1.0, 1.0, "");
    let out = Tensor::from_f64(DType::Float32, &vec![0.0; (m * n) as usize], &[m, n]).unwrap();
    let kw: IndexMap<String, Value<Tensor>> = [
        ("alpha".to_string(), Value::Int(1)),
        ("beta".to_string(), Value::Int(1)),
        ("out".to_string(), t(&out)),
    ]
    .into();
    let r = call("extern_kernels.addmm", vec![t(&bias), t(&x), t(&wt)], kw).unwrap();
    assert!(matches!(r, Value::None), "out= returns None, got {r:?}");
    close(
        &out.to_f64_vec().unwrap(),
        &want,
        1e-6,
        "addmm out= with a transposed weight",
    );
}

#[test]
fn addmm_activation_relu_and_gelu() {
    let (m, k, n) = (6, 5, 7);
    for dtype in [DType::Float32, DType::Float16, DType::Bfloat16] {
        let x = tensor(dtype, &[m, k], 7);
        let y = tensor(dtype, &[k, n], 8);
        let bias = tensor(dtype, &[n], 9);
        let tol = match dtype {
            DType::Float32 => 1e-6,
            DType::Float16 => 1e-3,
            _ => 8e-3,
        };
        for (gelu, act) in [(false, "relu"), (true, "gelu")] {
            let args = vec![t(&bias), t(&x), t(&y), f(1.0), f(1.0), Value::Bool(gelu)];
            let (size, got, got_dtype) =
                values(call("torch.ops.aten._addmm_activation.default", args, IndexMap::new()).unwrap());
            assert_eq!((size, got_dtype), (vec![m, n], dtype));
            close(
                &got,
                &reference(&x, &y, Some(&bias), 1.0, 1.0, act),
                tol,
                &format!("{dtype} {act}"),
            );
        }
    }
}

#[test]
fn half_results_are_rounded_once() {
    // 1 + 2^-11 + 2^-12 rounds to 1 + 2^-10 in f16 when rounded once; rounding
    // the product (1 + 2^-11, a tie, to 1) and then adding 2^-12 gives 1.
    let x = Tensor::from_f64(DType::Float16, &[1.0, 1.0], &[1, 2]).unwrap();
    let y = Tensor::from_f64(DType::Float16, &[1.0, 1.0 / 2048.0], &[2, 1]).unwrap();
    let bias = Tensor::from_f64(DType::Float16, &[1.0 / 4096.0], &[1]).unwrap();
    let (_, got, _) = values(call("extern_kernels.addmm", vec![t(&bias), t(&x), t(&y)], IndexMap::new()).unwrap());
    assert_eq!(got, vec![1.0 + 1.0 / 1024.0], "f16 addmm must round once");
}

#[test]
fn baddbmm_bmm_and_addbmm() {
    let (b, m, k, n) = (3, 4, 5, 2);
    let x = tensor(DType::Float32, &[b, m, k], 10);
    let y = tensor(DType::Float32, &[b, k, n], 11);
    for bias_size in [vec![n], vec![m, n], vec![b, 1, n], vec![b, m, n]] {
        let bias = tensor(DType::Float32, &bias_size, 12);
        let args = vec![t(&bias), t(&x), t(&y), f(0.5), f(2.0)];
        let (size, got, _) = values(call("extern_kernels.baddbmm", args, IndexMap::new()).unwrap());
        assert_eq!(size, vec![b, m, n]);
        close(
            &got,
            &reference(&x, &y, Some(&bias), 0.5, 2.0, ""),
            1e-6,
            &format!("baddbmm {bias_size:?}"),
        );
    }
    let (_, got, _) = values(call("extern_kernels.bmm", vec![t(&x), t(&y)], IndexMap::new()).unwrap());
    close(&got, &reference(&x, &y, None, 0.0, 1.0, ""), 1e-6, "bmm");
    // addbmm: the sum over batches.
    let bias = tensor(DType::Float32, &[n], 13);
    let per = reference(&x, &y, None, 0.0, 2.0, "");
    let bias_v = bias.to_f64_vec().unwrap();
    let want: Vec<f64> = (0..(m * n) as usize)
        .map(|i| (0..b as usize).map(|bi| per[bi * (m * n) as usize + i]).sum::<f64>() + 0.5 * bias_v[i % n as usize])
        .collect();
    let args = vec![t(&bias), t(&x), t(&y), f(0.5), f(2.0)];
    let (size, got, _) = values(call("torch.ops.aten.addbmm.default", args, IndexMap::new()).unwrap());
    assert_eq!(size, vec![m, n]);
    close(&got, &want, 1e-6, "addbmm");
}

#[test]
fn bad_shapes_are_errors() {
    let x = tensor(DType::Float32, &[3, 4], 1);
    let y = tensor(DType::Float32, &[5, 2], 2);
    let bias = tensor(DType::Float32, &[2], 3);
    let e = call("extern_kernels.addmm", vec![t(&bias), t(&x), t(&y)], IndexMap::new()).unwrap_err();
    assert!(e.contains("cannot be multiplied"), "{e}");
    let y = tensor(DType::Float32, &[4, 2], 2);
    let bias = tensor(DType::Float32, &[3], 3);
    let e = call("extern_kernels.addmm", vec![t(&bias), t(&x), t(&y)], IndexMap::new()).unwrap_err();
    assert!(e.contains("self"), "{e}");
}
