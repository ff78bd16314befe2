#![cfg(feature = "cuda")]
//! The GEMM family on the CUDA backend (cuBLAS / cuBLASLt) against the host
//! ops: `mm`, `bmm`, `addmm` (every bias shape, alpha / beta, `out=`),
//! `_addmm_activation` (relu, gelu), `baddbmm`, `addbmm`, with transposed
//! and strided operands, in f32, f16 and bf16; the int8 `_int_mm` on
//! cuBLASLt, exact; the fp8 `_scaled_mm` with tensor-wise scales on
//! cuBLASLt against exact sums; and prepared / CUDA-graph replays
//! bit-equal to the direct run.
//!
//! Needs a GPU: `cargo test --features cuda --test cuda_gemm`.

mod common;

use indexmap::IndexMap;
use wrapir::exec::cuda::{place_inputs, CudaBackend, CudaOptions, CudaTensor, Prepared, Replay};
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::format::bundle_json::MathModes;
use wrapir::ir::{ArgValue, DType, Device, Layout, ProgramBuilder};
use wrapir::sym::SymExpr;

/// Deterministic values in [-1, 1] (multiples of 1/64, exact in every dtype).
fn values(n: i64, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            (((i as u64)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503))
                % 129) as f64
                - 64.0)
                / 64.0
        })
        .collect()
}

/// A host tensor of `size` laid out by `stride` (a view of a larger storage when strided).
fn host_tensor(dtype: DType, size: &[i64], stride: Option<&[i64]>, seed: u64) -> Tensor {
    let Some(stride) = stride else {
        let n = size.iter().product();
        return Tensor::from_f64(dtype, &values(n, seed), size).unwrap();
    };
    let extent: i64 = 1 + size.iter().zip(stride).map(|(s, st)| (s - 1).max(0) * st).sum::<i64>();
    let base = Tensor::from_f64(dtype, &values(extent, seed), &[extent]).unwrap();
    base.view(size, stride, 0).unwrap()
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        // Integer GEMMs (`_int_mm`) are exact.
        DType::Int32 => 0.0,
        DType::Float32 => 1e-4,
        DType::Float16 => 4e-3,
        _ => 3e-2,
    }
}

#[derive(Clone, Debug)]
enum A {
    T(Tensor),
    F(f64),
    B(bool),
}

fn host_value(a: &A) -> Value<Tensor> {
    match a {
        A::T(t) => Value::Tensor(t.clone()),
        A::F(f) => Value::Float(*f),
        A::B(b) => Value::Bool(*b),
    }
}

fn describe(args: &[A], kwargs: &[(&str, A)]) -> String {
    let one = |a: &A| match a {
        A::T(t) => format!("{}{:?}/{:?}", t.dtype(), t.size(), t.stride()),
        A::F(f) => f.to_string(),
        A::B(b) => b.to_string(),
    };
    let mut parts: Vec<String> = args.iter().map(one).collect();
    parts.extend(kwargs.iter().map(|(k, v)| format!("{k}={}", one(v))));
    parts.join(", ")
}

/// Runs `op` on the device (no host fallback) and on the host, optionally
/// with `out=` laid out by `out_stride`; compares within the dtype's tolerance.
fn check(op: &str, args: &[A], kwargs: &[(&str, A)], out: Option<(&[i64], &[i64])>) -> Result<(), String> {
    let what = format!("{op}({})", describe(args, kwargs));
    let (mut backend, log) =
        common::device_only_backend(MathModes::default()).map_err(|e| format!("{what}: no GPU: {e}"))?;
    let host_args: Vec<Value<Tensor>> = args.iter().map(host_value).collect();
    let mut host_kwargs: IndexMap<String, Value<Tensor>> =
        kwargs.iter().map(|(k, v)| (k.to_string(), host_value(v))).collect();
    let (dev_args, mut dev_kwargs) = common::copy_call_in(&mut backend, &host_args, &host_kwargs);
    let want = HostBackend::new(HostOptions {
        jagged_zero_fill: true,
        ..Default::default()
    })
    .call_extern(ExternCall::new(op, &host_args, &host_kwargs))
    .map_err(|e| format!("{what}: host: {e}"))?;
    let Value::Tensor(want) = want else {
        return Err(format!("{what}: host returned {want:?}"));
    };
    let dev_out = match out {
        Some((size, stride)) => {
            let dtype = want.dtype();
            let zeros = host_tensor(dtype, size, Some(stride), 0);
            zeros.write_f64(&vec![f64::NAN; zeros.numel()]).unwrap();
            let t = backend.copy_in(&zeros).expect("copy in out");
            dev_kwargs.insert("out".into(), Value::Tensor(t.clone()));
            host_kwargs.insert("out".into(), Value::None);
            Some(t)
        }
        None => None,
    };
    let got = backend
        .call_extern(ExternCall::new(op, &dev_args, &dev_kwargs))
        .map_err(|e| format!("{what}: device: {e}"))?;
    if !log.host_ops().is_empty() {
        return Err(format!("{what}: ran on the host: {:?}", log.host_ops()));
    }
    let got = match (got, dev_out) {
        (Value::None, Some(o)) => o,
        (Value::Tensor(t), None) => t,
        (other, o) => return Err(format!("{what}: returned {other:?} (out= given: {})", o.is_some())),
    };
    let got = backend.copy_out(&got).map_err(|e| format!("{what}: copy out: {e}"))?;
    common::same_dtype_and_size(&what, &got, &want)?;
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let tol = tolerance(want.dtype());
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if !((a - b).abs() <= tol * scale) {
            return Err(format!(
                "{what}: element {i} (row-major): device {a}, host {b}, |diff| {} > {tol} * {scale}",
                (a - b).abs()
            ));
        }
    }
    Ok(())
}

const DTYPES: [DType; 3] = [DType::Float32, DType::Float16, DType::Bfloat16];

#[test]
fn addmm_bias_shapes_alpha_beta_layouts_and_out() {
    let (m, k, n) = (33, 40, 24);
    let mut failures = Vec::new();
    for dtype in DTYPES {
        let x = host_tensor(dtype, &[m, k], None, 1);
        // The linear weight [n, k] seen transposed as [k, n] (strides (1, k)), and a row-major [k, n].
        let weights = [
            host_tensor(dtype, &[k, n], Some(&[1, k]), 2),
            host_tensor(dtype, &[k, n], None, 3),
            host_tensor(dtype, &[k, n], Some(&[n + 8, 1]), 4),
        ];
        let biases = [
            host_tensor(dtype, &[n], None, 5),
            host_tensor(dtype, &[1, n], None, 6),
            host_tensor(dtype, &[m, 1], None, 7),
            host_tensor(dtype, &[m, n], None, 8),
            host_tensor(dtype, &[m, n], Some(&[0, 1]), 9),
        ];
        for w in &weights {
            for b in &biases {
                for (beta, alpha) in [(1.0, 1.0), (0.5, 2.0), (0.0, 1.0)] {
                    let args = [A::T(b.clone()), A::T(x.clone()), A::T(w.clone())];
                    let kw = [("beta", A::F(beta)), ("alpha", A::F(alpha))];
                    for out in [None, Some((&[m, n][..], &[n, 1][..])), Some((&[m, n][..], &[1, m][..]))] {
                        if let Err(e) = check("extern_kernels.addmm", &args, &kw, out) {
                            failures.push(e);
                        }
                    }
                }
            }
        }
        // Positional beta / alpha.
        let args = [
            A::T(biases[0].clone()),
            A::T(x.clone()),
            A::T(weights[0].clone()),
            A::F(0.25),
            A::F(3.0),
        ];
        if let Err(e) = check("torch.ops.aten.addmm.default", &args, &[], None) {
            failures.push(e);
        }
    }
    common::assert_no_failures(&failures);
}

#[test]
fn addmm_activation_relu_and_gelu() {
    let (m, k, n) = (20, 64, 48);
    let mut failures = Vec::new();
    for dtype in DTYPES {
        let x = host_tensor(dtype, &[m, k], None, 11);
        let w = host_tensor(dtype, &[k, n], Some(&[1, k]), 12);
        for bias in [
            host_tensor(dtype, &[n], None, 13),
            host_tensor(dtype, &[m, n], None, 14),
        ] {
            for gelu in [false, true] {
                let args = [A::T(bias.clone()), A::T(x.clone()), A::T(w.clone())];
                let kw = [("beta", A::F(1.0)), ("alpha", A::F(1.0)), ("use_gelu", A::B(gelu))];
                if let Err(e) = check("torch.ops.aten._addmm_activation.default", &args, &kw, None) {
                    failures.push(e);
                }
            }
        }
        // beta != 1 takes the cuBLAS path and the in-place activation kernels.
        let args = [
            A::T(host_tensor(dtype, &[n], None, 15)),
            A::T(x.clone()),
            A::T(w.clone()),
            A::F(0.5),
            A::F(1.0),
            A::B(true),
        ];
        if let Err(e) = check("torch.ops.aten._addmm_activation.default", &args, &[], None) {
            failures.push(e);
        }
    }
    common::assert_no_failures(&failures);
}

#[test]
fn mm_bmm_baddbmm_addbmm_strided() {
    let (b, m, k, n) = (3, 17, 24, 9);
    let mut failures = Vec::new();
    let mut run = |op: &str, args: Vec<A>, out: Option<(&[i64], &[i64])>| {
        if let Err(e) = check(op, &args, &[], out) {
            failures.push(e);
        }
    };
    for dtype in DTYPES {
        let x2 = host_tensor(dtype, &[m, k], None, 21);
        let x2t = host_tensor(dtype, &[m, k], Some(&[1, m]), 22);
        let y2 = host_tensor(dtype, &[k, n], Some(&[1, k]), 23);
        run("extern_kernels.mm", vec![A::T(x2.clone()), A::T(y2.clone())], None);
        run(
            "extern_kernels.mm",
            vec![A::T(x2t.clone()), A::T(y2.clone())],
            Some((&[m, n], &[n, 1])),
        );
        let x3 = host_tensor(dtype, &[b, m, k], None, 24);
        let y3t = host_tensor(dtype, &[b, k, n], Some(&[k * n, 1, k]), 25);
        let y3b = host_tensor(dtype, &[b, k, n], Some(&[0, n, 1]), 26);
        for y3 in [&y3t, &y3b] {
            run("extern_kernels.bmm", vec![A::T(x3.clone()), A::T(y3.clone())], None);
            for bias in [
                host_tensor(dtype, &[n], None, 27),
                host_tensor(dtype, &[b, 1, n], None, 28),
                host_tensor(dtype, &[b, m, n], None, 29),
            ] {
                let args = vec![A::T(bias), A::T(x3.clone()), A::T(y3.clone()), A::F(0.5), A::F(2.0)];
                run("extern_kernels.baddbmm", args.clone(), None);
                run("extern_kernels.baddbmm", args, Some((&[b, m, n], &[m * n, 1, m])));
            }
        }
        // A KV-cache decode step's query: one row per batch, its row
        // stride 0 (an expand), and a row expanded to `m` rows: no valid
        // leading dimension, so ATen (and the device) GEMM a contiguous copy.
        for (rows, seed) in [(1, 31), (m, 32)] {
            let q = host_tensor(dtype, &[b, rows, k], Some(&[k, 0, 1]), seed);
            run("extern_kernels.bmm", vec![A::T(q.clone()), A::T(y3t.clone())], None);
            run(
                "extern_kernels.bmm",
                vec![A::T(q), A::T(host_tensor(dtype, &[b, k, n], None, 33))],
                Some((&[b, rows, n], &[rows * n, n, 1])),
            );
        }
        let args = vec![
            A::T(host_tensor(dtype, &[m, n], None, 30)),
            A::T(x3.clone()),
            A::T(y3t.clone()),
            A::F(0.5),
            A::F(1.5),
        ];
        run("torch.ops.aten.addbmm.default", args, None);
    }
    common::assert_no_failures(&failures);
}

/// `extern_kernels.bias_addmm` (Inductor's max-autotune wrapper): a
/// row-broadcast bias's first row as the 1-D cuBLASLt epilogue bias, a
/// one-row bias, and a full bias, with keyword alpha / beta, equal to the
/// host's `addmm` within the dtype's tolerance.
#[test]
fn bias_addmm_takes_the_first_row_of_a_broadcast_bias() {
    let op = "extern_kernels.bias_addmm";
    let mut failures = Vec::new();
    for dtype in DTYPES {
        let (m, k, n) = (24, 40, 16);
        let mat1 = A::T(host_tensor(dtype, &[m, k], None, 1));
        let mat2 = A::T(host_tensor(dtype, &[k, n], None, 2));
        for (inp, beta) in [
            (host_tensor(dtype, &[m, n], Some(&[0, 1]), 3), 1.0),
            (host_tensor(dtype, &[1, n], None, 4), 1.0),
            (host_tensor(dtype, &[m, n], None, 5), 0.5),
        ] {
            let kwargs = [("alpha", A::F(0.75)), ("beta", A::F(beta))];
            if let Err(e) = check(op, &[A::T(inp), mat1.clone(), mat2.clone()], &kwargs, None) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `_int_mm` on cuBLASLt equals the host's exact int32 sums for row- and
/// column-major operands (the transposes `cublasCommonArgs` picks) and
/// `out=`; the sizes PyTorch's CUDA op refuses are errors naming the rule.
#[test]
fn int_mm_row_and_column_major_operands_and_out() {
    // int8 values over the whole range, laid out by `stride` in a storage of their extent.
    let int8 = |size: &[i64], stride: &[i64], seed: u64| -> A {
        let extent: i64 = 1 + size.iter().zip(stride).map(|(s, st)| (s - 1).max(0) * st).sum::<i64>();
        let v: Vec<i64> = (0..extent as u64)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) % 256) as i64 - 128)
            .collect();
        let base = Tensor::from_i64(DType::Int8, &v, &[extent]).unwrap();
        A::T(base.view(size, stride, 0).unwrap())
    };
    let op = "extern_kernels._int_mm";
    let (m, k, n) = (32, 64, 48);
    let row_x = || int8(&[m, k], &[k, 1], 1);
    let col_x = || int8(&[m, k], &[1, m], 1);
    let row_y = || int8(&[k, n], &[n, 1], 2);
    let col_y = || int8(&[k, n], &[1, k], 2);
    let mut failures = Vec::new();
    for (x, y, out) in [
        (row_x(), row_y(), None),
        (row_x(), col_y(), None),
        (col_x(), row_y(), None),
        (row_x(), col_y(), Some((&[m, n][..], &[n, 1][..]))),
    ] {
        if let Err(e) = check(op, &[x, y], &[], out) {
            failures.push(e);
        }
    }
    // Both column-major: cuBLASLt's int8 GEMM does not support it
    // (`CUBLAS_STATUS_NOT_SUPPORTED`); without the host fallback, a clear
    // error naming the op, not the library's status.
    match check(op, &[col_x(), col_y()], &[], None) {
        Err(e) if e.contains("_int_mm") && !e.contains("NOT_SUPPORTED") => {}
        other => failures.push(format!(
            "both column-major: expected an error naming the op, got {other:?}"
        )),
    }
    // PyTorch's CUDA `_int_mm` refuses 16 rows or fewer, and sizes not multiples of 8.
    let mut backend = CudaBackend::new(CudaOptions::from_env()).expect("a GPU");
    for (x, y, want) in [
        (int8(&[16, 64], &[64, 1], 1), row_y(), "more than 16"),
        (
            int8(&[32, 60], &[60, 1], 1),
            int8(&[60, 48], &[48, 1], 2),
            "multiple of 8",
        ),
        (row_x(), int8(&[64, 44], &[44, 1], 2), "multiple of 8"),
    ] {
        let host: Vec<Value<Tensor>> = [x, y].iter().map(host_value).collect();
        let (args, kwargs) = common::copy_call_in(&mut backend, &host, &IndexMap::new());
        match backend.call_extern(ExternCall::new(op, &args, &kwargs)) {
            Err(e) if e.to_string().contains(want) && e.to_string().contains("_int_mm") => {}
            other => failures.push(format!("expected an error containing `{want}`, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `_scaled_mm` with one f32 scale per operand on cuBLASLt (H100 or any
/// sm_89+ GPU): fp8 operands holding small integers (their products and
/// sums exact in every output dtype), `self` row-major, `mat2`
/// column-major, scales whose product is 1, with and without fast
/// accumulation, equal to the exact sums; what cuBLASLt or this backend does
/// not take is an error naming the rule.
#[test]
fn scaled_mm_tensorwise_fp8_equals_exact_sums() {
    use DType::*;
    let mut backend = CudaBackend::new(CudaOptions::from_env()).expect("a GPU");
    let (m, k, n) = (32usize, 64usize, 48usize);
    // float8_e4m3fn bits of -2, -1, 0, 1, 2.
    let code = |v: i64| [0xc0, 0xb8, 0x00, 0x38, 0x40][(v + 2) as usize];
    let ints = |count: usize, seed: u64| -> Vec<i64> {
        (0..count as u64)
            .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) % 5) as i64 - 2)
            .collect()
    };
    let (xv, yv) = (ints(m * k, 1), ints(k * n, 2)); // row-major [m, k] and [k, n]
    let x_bits: Vec<i64> = xv.iter().map(|v| code(*v)).collect();
    // `mat2` column-major: its storage is [n, k], element (p, j) at j * k + p.
    let y_bits: Vec<i64> = (0..n)
        .flat_map(|j| (0..k).map(move |p| (p, j)))
        .map(|(p, j)| code(yv[p * n + j]))
        .collect();
    let x_host = Tensor::from_i64(Uint8, &x_bits, &[m as i64, k as i64]).unwrap();
    let y_host = Tensor::from_i64(Uint8, &y_bits, &[n as i64, k as i64])
        .unwrap()
        .view(&[k as i64, n as i64], &[1, k as i64], 0)
        .unwrap();
    let no_kwargs = IndexMap::new();
    // The bytes read as fp8 (`view(dtype)` of the same width: a device view).
    let mut fp8 = |t: &Tensor, dtype: DType| -> CudaTensor {
        let d = backend.copy_in(t).unwrap();
        let args = vec![Value::Tensor(d), Value::DType(dtype)];
        match backend.call_extern(ExternCall::new("torch.ops.aten.view.dtype", &args, &no_kwargs)) {
            Ok(Value::Tensor(t)) => t,
            other => panic!("view(dtype): {other:?}"),
        }
    };
    let (x, y) = (fp8(&x_host, Float8E4m3fn), fp8(&y_host, Float8E4m3fn));
    let (x5, y5) = (fp8(&x_host, Float8E5m2), fp8(&y_host, Float8E5m2));
    let y_row = fp8(
        &Tensor::from_i64(
            Uint8,
            &yv.iter().map(|v| code(*v)).collect::<Vec<_>>(),
            &[k as i64, n as i64],
        )
        .unwrap(),
        Float8E4m3fn,
    );
    let mut scalar = |v: f64, size: &[i64]| {
        let count = size.iter().product::<i64>() as usize;
        backend
            .copy_in(&Tensor::from_f64(Float32, &vec![v; count], size).unwrap())
            .unwrap()
    };
    let (sa, sb) = (scalar(0.5, &[]), scalar(2.0, &[]));
    let row_scales = scalar(0.5, &[m as i64, 1]);
    let want: Vec<f64> = (0..m)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| (0..k).map(|p| (xv[i * k + p] * yv[p * n + j]) as f64).sum())
        .collect();
    let op = "extern_kernels._scaled_mm";
    let t = |c: &CudaTensor| Value::Tensor(c.clone());
    let mut failures = Vec::new();
    for out_dtype in [Float32, Bfloat16, Float16] {
        for fast in [false, true] {
            let args = vec![t(&x), t(&y), t(&sa), t(&sb)];
            let kwargs: IndexMap<String, Value<CudaTensor>> = [
                ("out_dtype".to_string(), Value::DType(out_dtype)),
                ("use_fast_accum".to_string(), Value::Bool(fast)),
            ]
            .into_iter()
            .collect();
            let what = format!("{out_dtype}, fast accumulation {fast}");
            match backend.call_extern(ExternCall::new(op, &args, &kwargs)) {
                Ok(Value::Tensor(r)) => {
                    let r = backend.copy_out(&r).unwrap();
                    let layout = (r.dtype(), r.size().to_vec(), r.stride().to_vec());
                    if layout != (out_dtype, vec![m as i64, n as i64], vec![n as i64, 1]) {
                        failures.push(format!("{what}: result {layout:?}"));
                    } else if r.to_f64_vec().unwrap() != want {
                        failures.push(format!("{what}: values differ from the exact sums"));
                    }
                }
                other => failures.push(format!("{what}: {other:?}")),
            }
        }
    }
    let bf16 = || -> IndexMap<String, Value<CudaTensor>> {
        [("out_dtype".to_string(), Value::DType(Bfloat16))]
            .into_iter()
            .collect()
    };
    for (args, want) in [
        (vec![t(&x), t(&y), t(&row_scales), t(&sb)], "tensor-wise"),
        (vec![t(&x), t(&y_row), t(&sa), t(&sb)], "row-major by column-major"),
        (vec![t(&x5), t(&y5), t(&sa), t(&sb)], "two float8_e5m2"),
    ] {
        match backend.call_extern(ExternCall::new(op, &args, &bf16())) {
            Err(e) if e.to_string().contains(want) => {}
            other => failures.push(format!("expected an error containing `{want}`, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn i(v: i64) -> SymExpr {
    SymExpr::Int(v)
}

fn layout(dtype: DType, size: &[i64], stride: Option<&[i64]>) -> Layout {
    let mut l = Layout::contiguous(dtype, Device::cuda(0), size.iter().map(|v| i(*v)));
    if let Some(st) = stride {
        l.stride = st.iter().map(|v| i(*v)).collect();
    }
    l
}

fn bits(backend: &mut CudaBackend, values: &[Value<CudaTensor>]) -> Vec<(Vec<i64>, Vec<u64>)> {
    values
        .iter()
        .filter_map(|v| match v {
            Value::Tensor(t) => Some(backend.copy_out(t).expect("copy out")),
            _ => None,
        })
        .map(|t| {
            let v = t
                .to_f64_vec()
                .expect("floating")
                .into_iter()
                .map(f64::to_bits)
                .collect();
            (t.size().to_vec(), v)
        })
        .collect()
}

/// A program of the shapes Inductor emits for `linear` + `gelu` + `bmm`:
/// `addmm(bias, x, reinterpret(w, transposed), out=buf0)`,
/// `_addmm_activation(bias, buf0, w2_t, use_gelu=True)`, `baddbmm` and `mm`.
fn program(dtype: DType) -> (wrapir::ir::Program, IndexMap<String, Tensor>) {
    let (m, k, n, b) = (32, 64, 48, 2);
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    let x = g.tensor_input("arg0_1", layout(dtype, &[m, k], None));
    let w = g.tensor_input("arg1_1", layout(dtype, &[n, k], None));
    let bias = g.tensor_input("arg2_1", layout(dtype, &[n], None));
    let w2 = g.tensor_input("arg3_1", layout(dtype, &[n, n], None));
    let bb = g.tensor_input("arg4_1", layout(dtype, &[b, m, k], None));
    let wt = g.reinterpret(&w, "reinterpret_tensor_0", layout(dtype, &[k, n], Some(&[1, k])));
    let w2t = g.reinterpret(&w2, "reinterpret_tensor_1", layout(dtype, &[n, n], Some(&[1, n])));
    let buf0 = g.allocate("buf0", layout(dtype, &[m, n], None));
    let arg = |b: &wrapir::ir::BufName| ArgValue::Buffer(b.clone());
    let kwargs: IndexMap<String, ArgValue> = [
        ("alpha".to_string(), ArgValue::Expr(i(1))),
        ("beta".to_string(), ArgValue::Expr(i(1))),
    ]
    .into();
    g.extern_out(
        &buf0,
        "extern_kernels.addmm",
        vec![arg(&bias), arg(&x), arg(&wt)],
        kwargs,
    );
    let buf1 = g.extern_alloc(
        "buf1",
        layout(dtype, &[m, n], None),
        "torch.ops.aten._addmm_activation.default",
        vec![
            arg(&bias),
            arg(&buf0),
            arg(&w2t),
            ArgValue::Float(1.0),
            ArgValue::Float(1.0),
            ArgValue::Bool(true),
        ],
    );
    let buf2 = g.extern_alloc(
        "buf2",
        layout(dtype, &[m, n], None),
        "extern_kernels.mm",
        vec![arg(&buf1), arg(&w2t)],
    );
    let bwt = g.reinterpret(&w, "reinterpret_tensor_2", layout(dtype, &[b, k, n], Some(&[0, 1, k])));
    let buf3 = g.extern_alloc(
        "buf3",
        layout(dtype, &[b, m, n], None),
        "extern_kernels.baddbmm",
        vec![
            arg(&bias),
            arg(&bb),
            arg(&bwt),
            ArgValue::Float(0.5),
            ArgValue::Float(2.0),
        ],
    );
    g.output(&buf0);
    g.output(&buf1);
    g.output(&buf2);
    g.output(&buf3);
    g.finish();
    let inputs: IndexMap<String, Tensor> = [
        ("arg0_1", vec![m, k]),
        ("arg1_1", vec![n, k]),
        ("arg2_1", vec![n]),
        ("arg3_1", vec![n, n]),
        ("arg4_1", vec![b, m, k]),
    ]
    .into_iter()
    .enumerate()
    .map(|(s, (name, size))| (name.to_string(), host_tensor(dtype, &size, None, 100 + s as u64)))
    .collect();
    (p.finish(), inputs)
}

#[test]
fn prepared_and_graph_replays_equal_the_direct_run() {
    for dtype in DTYPES {
        let (program, inputs) = program(dtype);
        let (mut backend, log) = common::device_only_backend(MathModes::default()).expect("GPU");
        let (plan, args, consts) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
        let direct = plan.run(&mut backend, args.clone(), &consts).expect("direct run");
        let want = bits(&mut backend, &direct.outputs);
        assert!(
            log.host_ops().is_empty(),
            "{dtype}: ran on the host: {:?}",
            log.host_ops()
        );
        let devices: Vec<String> = log.device_ops().into_iter().map(|(op, _)| op).collect();
        for op in [
            "extern_kernels.addmm",
            "torch.ops.aten._addmm_activation.default",
            "extern_kernels.baddbmm",
        ] {
            assert!(
                devices.iter().any(|d| d == op),
                "{dtype}: `{op}` did not run on the device: {devices:?}"
            );
        }
        let (mut prepared, recorded) = Prepared::record(&mut backend, &plan, args, &consts).expect("record");
        assert_eq!(
            bits(&mut backend, &recorded),
            want,
            "{dtype}: the recording run differs from the direct run"
        );
        assert!(
            prepared.library_calls() >= 4,
            "{dtype}: {} library calls recorded",
            prepared.library_calls()
        );
        for round in 0..2 {
            assert!(matches!(prepared.replay(&backend).expect("replay"), Replay::Done));
            let got = bits(&mut backend, prepared.outputs());
            assert_eq!(got, want, "{dtype}: direct replay {round} differs from the direct run");
            assert!(matches!(
                prepared.replay_graphs(&backend).expect("graph replay"),
                Replay::Done
            ));
            let got = bits(&mut backend, prepared.outputs());
            assert_eq!(got, want, "{dtype}: graph replay {round} differs from the direct run");
        }
    }
}
