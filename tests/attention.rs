//! The host's fused attention ops (`_scaled_dot_product_efficient_attention`,
//! `_flash_attention`, `_cudnn_attention`, `_flash_attention_for_cpu`)
//! against a naive formula (`softmax(q k^T * scale + bias) v`, the score
//! matrix materialised), and their result layouts against PyTorch's.

mod common;

use common::uniform_values as values;
use indexmap::IndexMap;
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::ir::DType;

const EFFICIENT: &str = "torch.ops.aten._scaled_dot_product_efficient_attention.default";
const FLASH: &str = "torch.ops.aten._scaled_dot_product_flash_attention.default";
const CUDNN: &str = "torch.ops.aten._scaled_dot_product_cudnn_attention.default";
const FLASH_CPU: &str = "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default";

fn tensor(dtype: DType, data: &[f64], size: &[i64]) -> Tensor {
    Tensor::from_f64(dtype, data, size).expect("tensor")
}

/// Calls `op` on the host backend.
fn call(op: &str, args: Vec<Value<Tensor>>, kwargs: Vec<(&str, Value<Tensor>)>) -> Result<Vec<Value<Tensor>>, String> {
    let kwargs: IndexMap<String, Value<Tensor>> = kwargs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let mut host = HostBackend::new(HostOptions::default());
    match host.call_extern(ExternCall::new(op, &args, &kwargs)) {
        Ok(Value::List(items)) => Ok(items),
        Ok(other) => Err(format!("returned a {}, not a tuple", other.kind())),
        Err(e) => Err(e.to_string()),
    }
}

/// Call arguments: `tensors`, then `rest`.
fn args<const N: usize>(tensors: &[&Tensor], rest: [Value<Tensor>; N]) -> Vec<Value<Tensor>> {
    tensors
        .iter()
        .map(|t| Value::Tensor((*t).clone()))
        .chain(rest)
        .collect()
}

fn t(v: &Value<Tensor>) -> &Tensor {
    v.as_tensor()
        .unwrap_or_else(|| panic!("expected a tensor, got {}", v.kind()))
}

/// Row-major values and sizes of a 4-d tensor.
struct Dense {
    v: Vec<f64>,
    s: [usize; 4],
}

impl Dense {
    fn of(t: &Tensor) -> Dense {
        let s = t.size();
        Dense {
            v: t.to_f64_vec().expect("values"),
            s: [s[0] as usize, s[1] as usize, s[2] as usize, s[3] as usize],
        }
    }
    fn at(&self, i: [usize; 4]) -> f64 {
        self.v[((i[0] * self.s[1] + i[1]) * self.s[2] + i[2]) * self.s[3] + i[3]]
    }
}

/// The naive attention: `[B, H, L, Ev]` output and `[B, H, L]` log-sum-exp.
/// `bias` is already `[B, H, L, S]` (expanded); GQA by `h / (H / Hkv)`.
fn naive(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>, causal: bool, scale: f64) -> (Vec<f64>, Vec<f64>) {
    let (q, k, v) = (Dense::of(q), Dense::of(k), Dense::of(v));
    let bias = bias.map(Dense::of);
    let [b, h, l, e] = q.s;
    let (hk, s, ev) = (k.s[1], k.s[2], v.s[3]);
    let group = h / hk;
    let mut out = Vec::new();
    let mut lse = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / group;
            for i in 0..l {
                let scores: Vec<f64> = (0..s)
                    .map(|j| {
                        if causal && j > i {
                            return f64::NEG_INFINITY;
                        }
                        let dot: f64 = (0..e).map(|d| q.at([bi, hi, i, d]) * k.at([bi, kh, j, d])).sum();
                        dot * scale + bias.as_ref().map_or(0.0, |m| m.at([bi, hi, i, j]))
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = weights.iter().sum();
                lse.push(max + sum.ln());
                for d in 0..ev {
                    out.push((0..s).map(|j| weights[j] * v.at([bi, kh, j, d])).sum::<f64>() / sum);
                }
            }
        }
    }
    (out, lse)
}

/// Largest |a - b| and its index; NaN only where both are NaN, infinities equal.
fn max_diff(got: &[f64], want: &[f64]) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!("{} values, {} expected", got.len(), want.len()));
    }
    let mut worst = (0.0f64, 0usize);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
            if !(a.is_nan() && b.is_nan()) && a != b {
                return Err(format!("element {i}: got {a}, expected {b}"));
            }
            continue;
        }
        if (a - b).abs() > worst.0 {
            worst = ((a - b).abs(), i);
        }
    }
    Ok(worst.0)
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    match max_diff(got, want) {
        Ok(d) if d <= tol => {}
        Ok(d) => panic!("{what}: max abs error {d} > {tol}"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// `q, k, v` as permuted views of one `[B, L, 3, H, E]` buffer (what
/// Inductor passes after a fused QKV projection).
fn packed_qkv(dtype: DType, b: i64, l: i64, h: i64, e: i64, seed: u64) -> (Tensor, Tensor, Tensor) {
    let n = (b * l * 3 * h * e) as usize;
    let base = tensor(dtype, &values(n, seed), &[b, l, 3, h, e]);
    let stride = [l * 3 * h * e, e, 3 * h * e, 1];
    let view = |i: i64| base.view(&[b, h, l, e], &stride, i * h * e).expect("view");
    (view(0), view(1), view(2))
}

#[test]
fn hand_computed_two_by_two() {
    // q = k = identity rows, v = [[1, 2], [3, 4]], scale 1:
    // row 0 weights (e, 1) / (e + 1), row 1 weights (1, e) / (e + 1).
    let q = tensor(DType::Float64, &[1.0, 0.0, 0.0, 1.0], &[1, 1, 2, 2]);
    let v = tensor(DType::Float64, &[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
    let r = call(FLASH_CPU, args(&[&q, &q, &v], []), vec![("scale", Value::Float(1.0))]).expect("runs");
    let e = std::f64::consts::E;
    let want = [
        (e + 3.0) / (e + 1.0),
        (2.0 * e + 4.0) / (e + 1.0),
        (1.0 + 3.0 * e) / (e + 1.0),
        (2.0 + 4.0 * e) / (e + 1.0),
    ];
    assert_close("output", &t(&r[0]).to_f64_vec().unwrap(), &want, 1e-12);
    let lse = (e + 1.0).ln();
    assert_close("logsumexp", &t(&r[1]).to_f64_vec().unwrap(), &[lse, lse], 1e-12);
    assert_eq!(t(&r[1]).dtype(), DType::Float64);
}

#[test]
fn efficient_matches_naive_with_causal_bias_gqa_and_odd_lengths() {
    let (b, h, hk, l, s, e) = (2i64, 4i64, 2i64, 5i64, 7i64, 8i64);
    for causal in [false, true] {
        let q = tensor(DType::Float32, &values((b * h * l * e) as usize, 1), &[b, h, l, e]);
        let k = tensor(DType::Float32, &values((b * hk * s * e) as usize, 2), &[b, hk, s, e]);
        let v = tensor(DType::Float32, &values((b * hk * s * e) as usize, 3), &[b, hk, s, e]);
        // A bias broadcast over batch and heads: [L, S] with stride-0 views of [1, 1, L, S].
        let bias = tensor(DType::Float32, &values((l * s) as usize, 4), &[1, 1, l, s]);
        let r = call(
            EFFICIENT,
            args(
                &[&q, &k, &v, &bias],
                [Value::Bool(true), Value::Float(0.0), Value::Bool(causal)],
            ),
            vec![],
        )
        .expect("runs");
        assert_eq!(r.len(), 4);
        let full = bias.view(&[b, h, l, s], &[0, 0, s, 1], 0).unwrap();
        let (want, want_lse) = naive(&q, &k, &v, Some(&full), causal, 1.0 / (e as f64).sqrt());
        let out = t(&r[0]);
        assert_eq!(out.size(), &[b, h, l, e]);
        assert_eq!(out.stride(), &[l * h * e, e, h * e, 1], "output is [B, L, H, E] memory");
        assert_close("output", &out.to_f64_vec().unwrap(), &want, 1e-6);
        let lse = t(&r[1]);
        assert_eq!(lse.size(), &[b, h, 32], "log-sum-exp padded to 32");
        assert_eq!(lse.dtype(), DType::Float32);
        let lv = lse.to_f64_vec().unwrap();
        let got: Vec<f64> = lv.chunks(32).flat_map(|c| c[..l as usize].to_vec()).collect();
        assert_close("logsumexp", &got, &want_lse, 1e-5);
        assert!(
            lv.chunks(32)
                .all(|c| c[l as usize..].iter().all(|x| *x == f64::INFINITY)),
            "padding is +inf"
        );
        for seed in &r[2..] {
            assert_eq!((t(seed).dtype(), t(seed).size()), (DType::Int64, &[][..]));
        }
    }
}

#[test]
fn efficient_without_logsumexp_and_a_scale() {
    let q = tensor(DType::Float32, &values(2 * 3 * 4, 5), &[1, 2, 3, 4]);
    let r = call(
        EFFICIENT,
        args(&[&q, &q, &q], [Value::None, Value::Bool(false)]),
        vec![("scale", Value::Float(0.3))],
    )
    .expect("runs");
    assert_eq!(t(&r[1]).size(), &[1, 2, 0]);
    let (want, _) = naive(&q, &q, &q, None, false, 0.3);
    assert_close("output", &t(&r[0]).to_f64_vec().unwrap(), &want, 1e-6);
}

#[test]
fn flash_on_packed_qkv_keeps_the_query_layout() {
    let (b, l, h, e) = (2i64, 9i64, 3i64, 16i64);
    for dtype in [DType::Float32, DType::Bfloat16, DType::Float16] {
        let (q, k, v) = packed_qkv(dtype, b, l, h, e, 7);
        let r = call(
            FLASH,
            args(&[&q, &k, &v], [Value::Float(0.0), Value::Bool(true)]),
            vec![],
        )
        .expect("runs");
        assert_eq!(r.len(), 9);
        let out = t(&r[0]);
        assert_eq!(out.dtype(), dtype);
        // empty_like(query) of a non-dense view: dense strides in the query's order.
        assert_eq!(out.stride(), &[l * h * e, e, h * e, 1]);
        let (want, want_lse) = naive(&q, &k, &v, None, true, 1.0 / (e as f64).sqrt());
        let tol = match dtype {
            DType::Float32 => 1e-6,
            DType::Float16 => 1e-3,
            _ => 8e-3,
        };
        assert_close(&format!("{dtype} output"), &t(&r[0]).to_f64_vec().unwrap(), &want, tol);
        assert_eq!(t(&r[1]).size(), &[b, h, l]);
        assert_close("logsumexp", &t(&r[1]).to_f64_vec().unwrap(), &want_lse, 1e-5);
        assert!(matches!(r[2], Value::None) && matches!(r[3], Value::None));
        assert!(matches!(r[4], Value::Int(x) if x == l) && matches!(r[5], Value::Int(x) if x == l));
        assert_eq!(t(&r[6]).size(), &[2]);
        assert_eq!((t(&r[8]).size(), t(&r[8]).dtype()), (&[0][..], dtype));
    }
    // A contiguous query: the output has its strides.
    let q = tensor(DType::Float32, &values(2 * 3 * 4 * 8, 8), &[2, 3, 4, 8]);
    let r = call(FLASH, args(&[&q, &q, &q], []), vec![]).expect("runs");
    assert_eq!(t(&r[0]).stride(), q.stride());
}

#[test]
fn cudnn_layouts_and_values() {
    let (b, l, h, e) = (1i64, 6i64, 2i64, 8i64);
    let (q, k, v) = packed_qkv(DType::Float32, b, l, h, e, 11);
    // A [B, 1, 1, S] padding-style bias.
    let bias = tensor(DType::Float32, &values(l as usize, 12), &[b, 1, 1, l]);
    let r = call(
        CUDNN,
        args(
            &[&q, &k, &v, &bias],
            [
                Value::Bool(true),
                Value::Float(0.0),
                Value::Bool(false),
                Value::Bool(false),
            ],
        ),
        vec![],
    )
    .expect("runs");
    assert_eq!(r.len(), 9);
    let out = t(&r[0]);
    assert_eq!(
        out.stride(),
        &[l * h * e, e, h * e, 1],
        "dense in the query's stride order"
    );
    assert_eq!(t(&r[1]).size(), &[b, h, l, 1]);
    let full = bias.view(&[b, h, l, l], &[0, 0, 0, 1], 0).unwrap();
    let (want, want_lse) = naive(&q, &k, &v, Some(&full), false, 1.0 / (e as f64).sqrt());
    assert_close("output", &out.to_f64_vec().unwrap(), &want, 1e-6);
    assert_close("logsumexp", &t(&r[1]).to_f64_vec().unwrap(), &want_lse, 1e-5);
    assert!(matches!(r[8], Value::None));
}

#[test]
fn fully_masked_rows_and_no_keys() {
    let q = tensor(DType::Float32, &values(2 * 4, 13), &[1, 1, 2, 4]);
    // Row 1 sees only -inf.
    let ninf = f64::NEG_INFINITY;
    let bias = tensor(DType::Float32, &[0.0, 0.0, ninf, ninf], &[1, 1, 2, 2]);
    let r = call(EFFICIENT, args(&[&q, &q, &q, &bias], [Value::Bool(true)]), vec![]).expect("runs");
    let out = t(&r[0]).to_f64_vec().unwrap();
    assert!(out[..4].iter().all(|x| x.is_finite()) && out[4..].iter().all(|x| x.is_nan()));
    let lse = t(&r[1]).to_f64_vec().unwrap();
    assert!(lse[0].is_finite() && lse[1] == ninf);
    // Flash with no keys: output 0, log-sum-exp +inf.
    let empty = tensor(DType::Float32, &[], &[1, 1, 0, 4]);
    let r = call(FLASH, args(&[&q, &empty, &empty], []), vec![]).expect("runs");
    assert!(t(&r[0]).to_f64_vec().unwrap().iter().all(|x| *x == 0.0));
    assert!(t(&r[1]).to_f64_vec().unwrap().iter().all(|x| *x == f64::INFINITY));
}

#[test]
fn flash_for_cpu_takes_a_boolean_mask() {
    let (l, e) = (3i64, 4i64);
    let q = tensor(DType::Float32, &values((l * e) as usize, 14), &[1, 1, l, e]);
    let mask = Tensor::from_vec(vec![true, false, true, true, true, false, false, true, true], &[l, l]).unwrap();
    let r = call(
        FLASH_CPU,
        args(&[&q, &q, &q], []),
        vec![("attn_mask", Value::Tensor(mask.clone()))],
    )
    .expect("runs");
    let additive: Vec<f64> = mask
        .to_i64_vec()
        .unwrap()
        .iter()
        .map(|m| if *m != 0 { 0.0 } else { f64::NEG_INFINITY })
        .collect();
    let full = tensor(DType::Float64, &additive, &[1, 1, l, l]);
    let (want, want_lse) = naive(&q, &q, &q, Some(&full), false, 1.0 / (e as f64).sqrt());
    assert_close("output", &t(&r[0]).to_f64_vec().unwrap(), &want, 1e-6);
    assert_close("logsumexp", &t(&r[1]).to_f64_vec().unwrap(), &want_lse, 1e-5);
    // PyTorch's layouts: the output is `empty_like(query)` (a contiguous query's
    // strides), the log-sum-exp `[B, L, H]` memory seen as `[B, H, L]`.
    assert_eq!(t(&r[0]).stride(), q.stride());
    assert_eq!(t(&r[1]).stride(), &[l, 1, 1]);
}

#[test]
fn expanded_kv_heads() {
    // K/V with head stride 0 (an expanded view) equal a repeated copy.
    let (h, l, e) = (4i64, 5i64, 8i64);
    let q = tensor(DType::Float32, &values((h * l * e) as usize, 15), &[1, h, l, e]);
    let kv = tensor(DType::Float32, &values((l * e) as usize, 16), &[1, 1, l, e]);
    let expanded = kv.view(&[1, h, l, e], &[l * e, 0, e, 1], 0).unwrap();
    let one_head = call(FLASH, args(&[&q, &kv, &kv], []), vec![]).expect("GQA");
    let views = call(FLASH, args(&[&q, &expanded, &expanded], []), vec![]).expect("expanded");
    assert_eq!(
        t(&one_head[0]).to_f64_vec().unwrap(),
        t(&views[0]).to_f64_vec().unwrap()
    );
}

#[test]
fn bad_arguments_are_errors() {
    let q = tensor(DType::Float32, &values(3 * 2 * 4, 17), &[1, 3, 2, 4]);
    let k = tensor(DType::Float32, &values(2 * 2 * 4, 18), &[1, 2, 2, 4]);
    let qv = || Value::Tensor(q.clone());
    let cases: Vec<(&str, Vec<Value<Tensor>>, &str)> = vec![
        (FLASH, vec![qv(), qv(), qv(), Value::Float(0.1)], "dropout_p"),
        (
            FLASH,
            vec![qv(), Value::Tensor(k.clone()), Value::Tensor(k.clone())],
            "multiple",
        ),
        (
            EFFICIENT,
            vec![
                qv(),
                qv(),
                qv(),
                Value::Tensor(tensor(DType::Float64, &[0.0; 4], &[2, 2])),
                Value::Bool(true),
            ],
            "dtype",
        ),
        (
            EFFICIENT,
            vec![
                qv(),
                qv(),
                qv(),
                Value::Tensor(tensor(DType::Float32, &[0.0; 3], &[3])),
                Value::Bool(true),
            ],
            "broadcast",
        ),
        (
            FLASH,
            vec![
                qv(),
                qv(),
                qv(),
                Value::Float(0.0),
                Value::Bool(false),
                Value::Bool(true),
            ],
            "debug",
        ),
        (
            FLASH,
            vec![Value::Tensor(tensor(DType::Float32, &[0.0; 4], &[2, 2])), qv(), qv()],
            "4-d",
        ),
    ];
    for (op, args, want) in cases {
        match call(op, args, vec![]) {
            Err(e) => assert!(e.contains(want), "{op}: error `{e}` does not mention `{want}`"),
            Ok(_) => panic!("{op}: succeeded; expected an error mentioning `{want}`"),
        }
    }
}
