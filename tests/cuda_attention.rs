#![cfg(feature = "cuda")]
//! The CUDA attention kernels (`_scaled_dot_product_efficient_attention`,
//! `_flash_attention`, `_cudnn_attention` on the device) against the host
//! ops over a grid of shapes: every output's sizes and strides equal, values
//! within per-dtype tolerances (NaN where the host has NaN, infinities
//! equal), and a prepared replay bit-equal to the direct run.
//!
//! On a machine with a GPU: `cargo test --features cuda --test cuda_attention`.

mod common;

use common::uniform_values as values;
use indexmap::IndexMap;
use wrapir::exec::cuda::{place_inputs, run_program, CudaBackend, CudaOptions, Prepared, Replay};
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::ir::{ArgValue, DType, Device, Layout, MultiIndex, Program, ProgramBuilder};
use wrapir::sym::SymExpr;

const EFFICIENT: &str = "torch.ops.aten._scaled_dot_product_efficient_attention.default";
const FLASH: &str = "torch.ops.aten._scaled_dot_product_flash_attention.default";
const CUDNN: &str = "torch.ops.aten._scaled_dot_product_cudnn_attention.default";

/// How q/k/v are laid out.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Qkv {
    /// Contiguous `[B, H, L, E]` each.
    Contiguous,
    /// Permuted views of one `[B, L, 3, H, E]` buffer (L == S, H == Hkv).
    Packed,
    /// K/V with one head expanded to H (head stride 0).
    Expanded,
}

/// One case of the grid.
#[derive(Clone, Debug)]
struct Case {
    op: &'static str,
    dtype: DType,
    b: i64,
    h: i64,
    hk: i64,
    l: i64,
    s: i64,
    e: i64,
    causal: bool,
    /// Bias sizes (broadcast to `[B, H, L, S]`), or none.
    bias: Option<Vec<i64>>,
    qkv: Qkv,
    scale: Option<f64>,
}

/// Host tensors of a case: positional args and kwargs.
fn host_args(c: &Case) -> (Vec<Value<Tensor>>, IndexMap<String, Value<Tensor>>) {
    let mk = |data: Vec<f64>, size: &[i64]| Tensor::from_f64(c.dtype, &data, size).expect("tensor");
    let n = |dims: &[i64]| dims.iter().product::<i64>() as usize;
    let (q, k, v) = match c.qkv {
        Qkv::Contiguous => (
            mk(values(n(&[c.b, c.h, c.l, c.e]), 1), &[c.b, c.h, c.l, c.e]),
            mk(values(n(&[c.b, c.hk, c.s, c.e]), 2), &[c.b, c.hk, c.s, c.e]),
            mk(values(n(&[c.b, c.hk, c.s, c.e]), 3), &[c.b, c.hk, c.s, c.e]),
        ),
        Qkv::Packed => {
            let base = mk(values(n(&[c.b, c.l, 3, c.h, c.e]), 4), &[c.b, c.l, 3, c.h, c.e]);
            let stride = [c.l * 3 * c.h * c.e, c.e, 3 * c.h * c.e, 1];
            let view = |i: i64| base.view(&[c.b, c.h, c.l, c.e], &stride, i * c.h * c.e).expect("view");
            (view(0), view(1), view(2))
        }
        Qkv::Expanded => {
            let one = |seed| mk(values(n(&[c.b, 1, c.s, c.e]), seed), &[c.b, 1, c.s, c.e]);
            let expand = |t: Tensor| {
                t.view(&[c.b, c.h, c.s, c.e], &[c.s * c.e, 0, c.e, 1], 0)
                    .expect("expanded view")
            };
            (
                mk(values(n(&[c.b, c.h, c.l, c.e]), 5), &[c.b, c.h, c.l, c.e]),
                expand(one(6)),
                expand(one(7)),
            )
        }
    };
    let bias = c.bias.as_ref().map(|size| {
        // Some -inf entries (not whole rows) exercise masking.
        let data: Vec<f64> = values(n(size), 8)
            .into_iter()
            .map(|x| if x > 0.9 { f64::NEG_INFINITY } else { x })
            .collect();
        mk(data, size)
    });
    let t = |x: Tensor| Value::Tensor(x);
    let bias_v = bias.map_or(Value::None, t);
    let mut args = vec![t(q), t(k), t(v)];
    match c.op {
        EFFICIENT => args.extend([bias_v, Value::Bool(true), Value::Float(0.0), Value::Bool(c.causal)]),
        FLASH => args.extend([Value::Float(0.0), Value::Bool(c.causal), Value::Bool(false)]),
        _ => args.extend([
            bias_v,
            Value::Bool(true),
            Value::Float(0.0),
            Value::Bool(c.causal),
            Value::Bool(false),
        ]),
    }
    let mut kwargs = IndexMap::new();
    if let Some(s) = c.scale {
        kwargs.insert("scale".to_string(), Value::Float(s));
    }
    (args, kwargs)
}

/// Absolute and relative tolerance of the output by dtype (log-sum-exp is f32 throughout).
fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::Float32 => (2e-5, 2e-5),
        DType::Float16 => (4e-3, 4e-3),
        _ => (2.5e-2, 2e-2),
    }
}

/// Compares `got` with `want`: `Err` says where and by how much they differ.
fn compare(what: &str, got: &Tensor, want: &Tensor, atol: f64, rtol: f64) -> Result<(), String> {
    common::same_dtype_and_size(what, got, want)?;
    let dims_above_one = |t: &Tensor| -> Vec<(usize, i64)> {
        t.size()
            .iter()
            .zip(t.stride())
            .enumerate()
            .filter(|(_, (s, _))| **s > 1)
            .map(|(d, (_, st))| (d, *st))
            .collect()
    };
    if dims_above_one(got) != dims_above_one(want) {
        return Err(format!(
            "{what}: strides {:?}, expected {:?} (sizes {:?})",
            got.stride(),
            want.stride(),
            got.size()
        ));
    }
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let index = |mut i: usize| {
        let mut idx = vec![0usize; got.size().len()];
        for d in (0..idx.len()).rev() {
            let s = got.size()[d].max(1) as usize;
            idx[d] = i % s;
            i /= s;
        }
        idx
    };
    let mut worst: Option<(f64, usize)> = None;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if b.is_nan() || a.is_nan() || b.is_infinite() || a.is_infinite() {
            if !(a.is_nan() && b.is_nan()) && a != b {
                return Err(format!("{what}: at {:?} got {a}, expected {b}", index(i)));
            }
            continue;
        }
        let err = (a - b).abs();
        if err > atol + rtol * b.abs() && worst.is_none_or(|(e, _)| err > e) {
            worst = Some((err, i));
        }
    }
    match worst {
        None => Ok(()),
        Some((err, i)) => Err(format!(
            "{what}: max abs error {err:e} at {:?} (got {}, expected {}; tolerance {atol:e} + {rtol:e} * |expected|)",
            index(i),
            g[i],
            w[i]
        )),
    }
}

/// Runs one case on the device (which must not use the host fallback) and on the host.
fn check(backend: &mut CudaBackend, log: &wrapir::exec::cuda::ExternOpLog, c: &Case) -> Result<(), String> {
    let (args, kwargs) = host_args(c);
    let mut host = HostBackend::new(HostOptions::default());
    let want = host
        .call_extern(ExternCall::new(c.op, &args, &kwargs))
        .map_err(|e| format!("host: {e}"))?;
    let (dev_args, dev_kwargs) = common::copy_call_in(backend, &args, &kwargs);
    let before = log.host_ops();
    let got = backend
        .call_extern(ExternCall::new(c.op, &dev_args, &dev_kwargs))
        .map_err(|e| format!("device: {e}"))?;
    if log.host_ops() != before {
        return Err(format!("ran on the host fallback: {:?}", log.host_ops()));
    }
    let (Value::List(got), Value::List(want)) = (got, want) else {
        return Err("results are not tuples".into());
    };
    if got.len() != want.len() {
        return Err(format!("{} results, {} expected", got.len(), want.len()));
    }
    let (atol, rtol) = tolerance(c.dtype);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        match (g, w) {
            (Value::Tensor(g), Value::Tensor(w)) => {
                let g = backend.copy_out(g).map_err(|e| e.to_string())?;
                let (what, atol, rtol) = match i {
                    0 => ("output", atol, rtol),
                    1 => ("logsumexp", 2e-4, 2e-5),
                    _ => ("result", 0.0, 0.0),
                };
                compare(&format!("result {i} ({what})"), &g, w, atol, rtol)?;
            }
            (Value::Int(a), Value::Int(b)) if a == b => {}
            (Value::None, Value::None) => {}
            (g, w) => return Err(format!("result {i}: got a {}, expected a {}", g.kind(), w.kind())),
        }
    }
    Ok(())
}

/// The grid: lengths 1..1000 (including non-multiples of the 32- and
/// 64-row tiles), head dims 64 and 128, causal, bias shapes, GQA, packed
/// and expanded q/k/v, all three ops and dtypes.
fn grid() -> Vec<Case> {
    let mut cases = Vec::new();
    let base = |op, dtype| Case {
        op,
        dtype,
        b: 2,
        h: 2,
        hk: 2,
        l: 1,
        s: 1,
        e: 64,
        causal: false,
        bias: None,
        qkv: Qkv::Contiguous,
        scale: None,
    };
    for dtype in [DType::Float32, DType::Float16, DType::Bfloat16] {
        for e in [64i64, 128] {
            for (l, s) in [
                (1i64, 1i64),
                (1, 77),
                (17, 17),
                (63, 65),
                (64, 64),
                (100, 37),
                (129, 200),
                (1000, 1000),
            ] {
                for causal in [false, true] {
                    cases.push(Case {
                        l,
                        s,
                        e,
                        causal,
                        ..base(FLASH, dtype)
                    });
                    let bias = Some(if l % 2 == 0 { vec![2, 1, l, s] } else { vec![s] });
                    cases.push(Case {
                        l,
                        s,
                        e,
                        causal,
                        bias: bias.clone(),
                        ..base(EFFICIENT, dtype)
                    });
                    cases.push(Case {
                        l,
                        s,
                        e,
                        causal,
                        bias,
                        h: 4,
                        hk: 2,
                        ..base(CUDNN, dtype)
                    });
                }
            }
            for l in [5i64, 64, 333] {
                cases.push(Case {
                    l,
                    s: l,
                    e,
                    causal: true,
                    qkv: Qkv::Packed,
                    ..base(FLASH, dtype)
                });
                cases.push(Case {
                    l,
                    s: l,
                    e,
                    bias: Some(vec![2, 1, 1, l]),
                    qkv: Qkv::Packed,
                    scale: Some(0.2),
                    ..base(EFFICIENT, dtype)
                });
                cases.push(Case {
                    l,
                    s: l + 3,
                    e,
                    h: 4,
                    hk: 4,
                    qkv: Qkv::Expanded,
                    ..base(CUDNN, dtype)
                });
            }
        }
        // The other head dims, once each; those the kernels are not built
        // for (4, 8, 12, 40) run zero-padded on the next one up.
        for e in [4i64, 8, 12, 16, 32, 40, 80, 96] {
            cases.push(Case {
                l: 70,
                s: 90,
                e,
                causal: true,
                bias: Some(vec![70, 90]),
                ..base(EFFICIENT, dtype)
            });
        }
        // A small head dim from one packed qkv buffer (as a MobileViT or
        // Conformer block computes it), padded per operand.
        cases.push(Case {
            l: 33,
            s: 33,
            e: 8,
            qkv: Qkv::Packed,
            ..base(EFFICIENT, dtype)
        });
    }
    cases
}

#[test]
fn attention_kernels_match_the_host_ops() {
    let options = CudaOptions::from_env();
    let log = options.extern_ops.clone();
    let mut backend = CudaBackend::new(options).expect("GPU");
    let mut failures = Vec::new();
    let cases = grid();
    for c in &cases {
        if let Err(e) = check(&mut backend, &log, c) {
            failures.push(format!("{c:?}\n    {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn fully_masked_rows_follow_pytorch() {
    let options = CudaOptions::from_env();
    let log = options.extern_ops.clone();
    let mut backend = CudaBackend::new(options).expect("GPU");
    for dtype in [DType::Float32, DType::Float16, DType::Bfloat16] {
        // Row 1 of every head sees only -inf: NaN output, -inf log-sum-exp (on host and device).
        let (l, s, e) = (3i64, 70i64, 64i64);
        let mut bias = values((l * s) as usize, 9);
        bias[s as usize..2 * s as usize]
            .iter_mut()
            .for_each(|x| *x = f64::NEG_INFINITY);
        let case = Case {
            op: EFFICIENT,
            dtype,
            b: 1,
            h: 2,
            hk: 2,
            l,
            s,
            e,
            causal: false,
            bias: Some(vec![l, s]),
            qkv: Qkv::Contiguous,
            scale: None,
        };
        let (mut args, kwargs) = host_args(&case);
        args[3] = Value::Tensor(Tensor::from_f64(dtype, &bias, &[l, s]).unwrap());
        let mut host = HostBackend::new(HostOptions::default());
        let want = host
            .call_extern(ExternCall::new(EFFICIENT, &args, &kwargs))
            .expect("host");
        let (dev_args, dev_kwargs) = common::copy_call_in(&mut backend, &args, &kwargs);
        let got = backend
            .call_extern(ExternCall::new(EFFICIENT, &dev_args, &dev_kwargs))
            .expect("device");
        assert!(log.host_ops().is_empty(), "ran on the host: {:?}", log.host_ops());
        let (Value::List(got), Value::List(want)) = (got, want) else {
            panic!("not tuples")
        };
        for i in 0..2 {
            let g = backend.copy_out(got[i].as_tensor().unwrap()).unwrap();
            let w = want[i].as_tensor().unwrap();
            let (atol, rtol) = if i == 0 { tolerance(dtype) } else { (2e-4, 2e-5) };
            compare(&format!("{dtype} result {i}"), &g, w, atol, rtol).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// A program: inputs q, k, v (`dtype[B, H, L, E]`), one attention op, its
/// output and log-sum-exp as graph outputs.
fn attention_program(op: &str, dtype: DType, dims: [i64; 4], causal: bool) -> Program {
    let [b, h, l, e] = dims;
    let ints = |v: &[i64]| v.iter().map(|x| SymExpr::Int(*x)).collect();
    let layout = |dtype, size: &[i64], stride: &[i64]| Layout {
        dtype,
        device: Device::cuda(0),
        size: ints(size),
        stride: ints(stride),
        offset: SymExpr::Int(0),
        alloc_numel: None,
    };
    let mut p = ProgramBuilder::new();
    let mut g = p.main();
    let contiguous = [h * l * e, l * e, e, 1];
    let q = g.tensor_input("arg0_1", layout(dtype, &dims, &contiguous));
    let k = g.tensor_input("arg1_1", layout(dtype, &dims, &contiguous));
    let v = g.tensor_input("arg2_1", layout(dtype, &dims, &contiguous));
    let mut args = vec![ArgValue::Buffer(q), ArgValue::Buffer(k), ArgValue::Buffer(v)];
    let (out_stride, lse_size, lse_stride) = if op == EFFICIENT {
        args.extend([
            ArgValue::None,
            ArgValue::Bool(true),
            ArgValue::Float(0.0),
            ArgValue::Bool(causal),
        ]);
        let padded = (l + 31) / 32 * 32;
        (
            vec![l * h * e, e, h * e, 1],
            vec![b, h, padded],
            vec![h * padded, padded, 1],
        )
    } else {
        args.extend([ArgValue::Float(0.0), ArgValue::Bool(causal)]);
        (contiguous.to_vec(), vec![b, h, l], vec![h * l, l, 1])
    };
    let multi = g.extern_alloc_multi("buf0", op, args);
    let out = g.multi_output(
        "buf1",
        layout(dtype, &dims, &out_stride),
        &multi,
        &[MultiIndex::Tuple(0)],
    );
    let lse = g.multi_output(
        "buf2",
        layout(DType::Float32, &lse_size, &lse_stride),
        &multi,
        &[MultiIndex::Tuple(1)],
    );
    g.output(&out);
    g.output(&lse);
    g.finish();
    p.finish()
}

#[test]
fn prepared_replay_is_bit_equal_to_the_direct_run() {
    for (op, dtype, causal) in [
        (EFFICIENT, DType::Float32, false),
        (EFFICIENT, DType::Bfloat16, true),
        (FLASH, DType::Float16, true),
        (FLASH, DType::Float32, false),
    ] {
        let dims = [2i64, 3, 100, 64];
        let program = attention_program(op, dtype, dims, causal);
        let n = dims.iter().product::<i64>() as usize;
        let inputs: IndexMap<String, Tensor> = (0..3)
            .map(|i| {
                let t = Tensor::from_f64(dtype, &values(n, 20 + i), &dims).unwrap();
                (format!("arg{i}_1"), t)
            })
            .collect();
        let direct = run_program(&program, CudaOptions::from_env(), &inputs)
            .unwrap_or_else(|e| panic!("{op} {dtype}: direct run: {e}"));
        let mut backend = CudaBackend::new(CudaOptions::from_env()).expect("GPU");
        let (plan, args, constants) = place_inputs(&program, &mut backend, &inputs).expect("inputs");
        let (mut prepared, _) = Prepared::record(&mut backend, &plan, args, &constants).expect("records");
        assert_eq!(
            prepared.replay(&backend).expect("replays"),
            Replay::Done,
            "{op} {dtype}: replay diverged"
        );
        let replayed: Vec<Tensor> = prepared
            .outputs()
            .to_vec()
            .iter()
            .map(|v| {
                backend
                    .copy_out(v.as_tensor().expect("tensor output"))
                    .expect("copy out")
            })
            .collect();
        assert_eq!(replayed.len(), direct.outputs.len());
        for (i, (r, d)) in replayed.iter().zip(&direct.outputs).enumerate() {
            let d = d.as_tensor().expect("tensor output");
            let (rv, dv) = (r.to_f64_vec().unwrap(), d.to_f64_vec().unwrap());
            let first = rv
                .iter()
                .zip(&dv)
                .position(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()));
            assert!(
                r.size() == d.size() && r.stride() == d.stride() && first.is_none(),
                "{op} {dtype} output {i}: replay differs from the direct run (sizes {:?} / {:?}, strides {:?} / {:?}, first differing element {first:?})",
                r.size(),
                d.size(),
                r.stride(),
                d.stride()
            );
        }
    }
}
