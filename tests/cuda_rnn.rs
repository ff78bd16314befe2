#![cfg(feature = "cuda")]
//! `aten._cudnn_rnn` on cuDNN's RNN API against references that do not
//! come from the op's own code: LSTM layers from the host backend's
//! `aten.mkldnn_rnn_layer` (one layer and direction per call, composed here
//! into layers and directions as PyTorch stacks them), GRU and tanh/ReLU
//! RNN layers from an f64 loop over `torch.nn.GRU`'s and `torch.nn.RNN`'s
//! documented equations; both in f64 on the same (dtype-exact) values.
//! Also: the results' sizes and strides (PyTorch's `_cudnn_rnn`: `output`
//! transposed for `batch_first`, an empty `cy` without `cx`, an empty
//! `uint8` reserve, the weight space as a 1-d buffer holding every weight
//! and bias), a second call on the returned `weight_buf` (cuDNN's packed
//! weights used as they are) giving the same bits, and the refusals.
//!
//! Tolerances, as the largest difference over the result's scale
//! (`max(1, max |reference|)`): f32 with TF32 off (cuDNN's FMA math) 2e-5
//! (f32 rounding over a few steps and layers; the reference is exact to
//! f64); f32 with TF32 on 5e-3 (TF32 keeps 10 mantissa bits of each
//! product's operands); f64 1e-10; f16 2e-2 and bf16 6e-2 (the states are
//! stored in the dtype between steps and layers).
//!
//! Compiled only with the `cuda` feature; on a machine with a GPU:
//! `cargo test --features cuda --test cuda_rnn`.

mod common;

use indexmap::IndexMap;
use wrapir::exec::cuda::{CudaBackend, CudaTensor};
use wrapir::exec::host::{HostBackend, HostOptions};
use wrapir::exec::{Backend, ExternCall, Tensor, Value};
use wrapir::format::bundle_json::MathModes;
use wrapir::ir::DType;

const OP: &str = "aten._cudnn_rnn.default";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Relu = 0,
    Tanh = 1,
    Lstm = 2,
    Gru = 3,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Relu | Cell::Tanh => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

#[derive(Clone, Debug)]
struct Case {
    name: &'static str,
    cell: Cell,
    layers: usize,
    bidirectional: bool,
    batch_first: bool,
    biases: bool,
    /// Random initial states (else zeros, as `nn.LSTM` passes without them).
    initial: bool,
    /// An LSTM given `cx` (without it cuDNN starts from a zero cell state
    /// and returns no `cy`).
    cx: bool,
    dtype: DType,
    tf32: bool,
    steps: usize,
    batch: usize,
    features: usize,
    hidden: usize,
}

fn case(name: &'static str, cell: Cell) -> Case {
    Case {
        name,
        cell,
        layers: 1,
        bidirectional: false,
        batch_first: false,
        biases: true,
        initial: true,
        cx: true,
        dtype: DType::Float32,
        tf32: false,
        steps: 5,
        batch: 3,
        features: 12,
        hidden: 16,
    }
}

impl Case {
    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    /// Random bits a value keeps, so that every value is exact in the dtype.
    fn bits(&self) -> u32 {
        match self.dtype {
            DType::Float16 => 11,
            DType::Bfloat16 => 8,
            _ => 24,
        }
    }

    /// `n` values in [-scale, scale), exact in the dtype (`scale` a power of two).
    fn values(&self, n: usize, seed: u64, scale: f64) -> Vec<f64> {
        common::uniform_values_bits(n, seed, self.bits())
            .into_iter()
            .map(|v| v * scale)
            .collect()
    }

    /// PyTorch's initialisation range, `1/sqrt(hidden)`, rounded to a power of two.
    fn weight_scale(&self) -> f64 {
        let k = 1.0 / (self.hidden as f64).sqrt();
        2f64.powi(k.log2().round() as i32)
    }
}

/// The weights of every layer and direction (layer-major): `w_ih`, `w_hh`,
/// then `b_ih`, `b_hh` when the case has biases, as row-major f64 values
/// with their sizes.
fn weights(c: &Case) -> Vec<(Vec<f64>, Vec<i64>)> {
    let (g, h) = (c.cell.gates(), c.hidden);
    let mut out = Vec::new();
    let mut seed = 100;
    for layer in 0..c.layers {
        let input = if layer == 0 { c.features } else { h * c.directions() };
        for _ in 0..c.directions() {
            let mut sizes = vec![vec![(g * h) as i64, input as i64], vec![(g * h) as i64, h as i64]];
            if c.biases {
                sizes.push(vec![(g * h) as i64]);
                sizes.push(vec![(g * h) as i64]);
            }
            for size in sizes {
                let n = size.iter().product::<i64>() as usize;
                seed += 1;
                out.push((c.values(n, seed, c.weight_scale()), size));
            }
        }
    }
    out
}

/// `[rows][n]` -> the sum `w x` for a row-major `w` of `rows x n`.
fn matvec(w: &[f64], x: &[f64], rows: usize) -> Vec<f64> {
    let n = x.len();
    (0..rows)
        .map(|r| w[r * n..(r + 1) * n].iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// One GRU or RNN layer in one direction, in f64, from the equations of
/// `torch.nn.GRU` / `torch.nn.RNN`: `x` `[T][N * in]`, `h0` `[N * H]`;
/// returns the outputs `[T][N * H]` (each at its step) and the last state.
fn simple_layer(c: &Case, x: &[Vec<f64>], w: &[&[f64]], h0: &[f64], reverse: bool) -> (Vec<Vec<f64>>, Vec<f64>) {
    let (hd, g) = (c.hidden, c.cell.gates());
    let input = x[0].len() / c.batch;
    let zero = vec![0.0; g * hd];
    let (b_ih, b_hh) = if c.biases { (w[2], w[3]) } else { (&zero[..], &zero[..]) };
    let mut h = h0.to_vec();
    let mut out = vec![vec![0.0; c.batch * hd]; x.len()];
    for s in 0..x.len() {
        let t = if reverse { x.len() - 1 - s } else { s };
        for n in 0..c.batch {
            let xi = &x[t][n * input..(n + 1) * input];
            let hp = h[n * hd..(n + 1) * hd].to_vec();
            let gi: Vec<f64> = matvec(w[0], xi, g * hd).iter().zip(b_ih).map(|(a, b)| a + b).collect();
            let gh: Vec<f64> = matvec(w[1], &hp, g * hd).iter().zip(b_hh).map(|(a, b)| a + b).collect();
            for j in 0..hd {
                let v = match c.cell {
                    Cell::Tanh => (gi[j] + gh[j]).tanh(),
                    Cell::Relu => (gi[j] + gh[j]).max(0.0),
                    Cell::Gru => {
                        let r = sigmoid(gi[j] + gh[j]);
                        let z = sigmoid(gi[hd + j] + gh[hd + j]);
                        let nn = (gi[2 * hd + j] + r * gh[2 * hd + j]).tanh();
                        (1.0 - z) * nn + z * hp[j]
                    }
                    Cell::Lstm => unreachable!("LSTM layers come from the host's mkldnn_rnn_layer"),
                };
                h[n * hd + j] = v;
                out[t][n * hd + j] = v;
            }
        }
    }
    (out, h)
}

fn host_f64(values: &[f64], size: &[i64]) -> Value<Tensor> {
    Value::Tensor(Tensor::from_f64(DType::Float64, values, size).unwrap())
}

/// One LSTM layer in one direction on the host backend's `aten.mkldnn_rnn_layer`.
fn lstm_layer(
    c: &Case,
    x: &[Vec<f64>],
    w: &[&[f64]],
    (h0, c0): (&[f64], &[f64]),
    reverse: bool,
) -> (Vec<Vec<f64>>, Vec<f64>, Vec<f64>) {
    let (t, n, hd) = (x.len(), c.batch, c.hidden);
    let input = x[0].len() / n;
    let g = (4 * hd) as i64;
    let zero = vec![0.0; 4 * hd];
    let flat: Vec<f64> = x.concat();
    let args = vec![
        host_f64(&flat, &[t as i64, n as i64, input as i64]),
        host_f64(w[0], &[g, input as i64]),
        host_f64(w[1], &[g, hd as i64]),
        host_f64(if c.biases { w[2] } else { &zero }, &[g]),
        host_f64(if c.biases { w[3] } else { &zero }, &[g]),
        host_f64(h0, &[1, n as i64, hd as i64]),
        host_f64(c0, &[1, n as i64, hd as i64]),
        Value::Bool(reverse),
        Value::List(vec![]),
        Value::Int(2),
        Value::Int(hd as i64),
        Value::Int(1),
        Value::Bool(c.biases),
        Value::Bool(false),
        Value::Bool(false),
        Value::Bool(false),
    ];
    let mut host = HostBackend::new(HostOptions::default());
    let got = host
        .call_extern(ExternCall::new(
            "aten.mkldnn_rnn_layer.default",
            &args,
            &IndexMap::new(),
        ))
        .expect("host mkldnn_rnn_layer");
    let Value::List(items) = got else {
        panic!("mkldnn_rnn_layer gave {}", got.kind())
    };
    let vals: Vec<Vec<f64>> = items
        .iter()
        .take(3)
        .map(|v| match v {
            Value::Tensor(t) => t.to_f64_vec().unwrap(),
            v => panic!("{}", v.kind()),
        })
        .collect();
    let out = vals[0].chunks(n * hd).map(<[f64]>::to_vec).collect();
    (out, vals[1].clone(), vals[2].clone())
}

/// The reference: `x` `[T][N * I]` (sequence-major), states `[L * D][N * H]`;
/// returns output `[T][N * D * H]`, hy and cy `[L * D][N * H]`.
#[allow(clippy::type_complexity)]
fn reference(
    c: &Case,
    x: &[Vec<f64>],
    w: &[(Vec<f64>, Vec<i64>)],
    h0: &[Vec<f64>],
    c0: &[Vec<f64>],
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let (d, hd, n) = (c.directions(), c.hidden, c.batch);
    let per = if c.biases { 4 } else { 2 };
    let (mut hy, mut cy) = (Vec::new(), Vec::new());
    let mut layer_in = x.to_vec();
    for layer in 0..c.layers {
        let mut outs = Vec::new();
        for dir in 0..d {
            let row = layer * d + dir;
            let ws: Vec<&[f64]> = w[row * per..(row + 1) * per].iter().map(|(v, _)| &v[..]).collect();
            if c.cell == Cell::Lstm {
                let (o, h, cc) = lstm_layer(c, &layer_in, &ws, (&h0[row], &c0[row]), dir == 1);
                outs.push(o);
                hy.push(h);
                cy.push(cc);
            } else {
                let (o, h) = simple_layer(c, &layer_in, &ws, &h0[row], dir == 1);
                outs.push(o);
                hy.push(h);
            }
        }
        // Each step's outputs of both directions side by side per sample.
        layer_in = (0..x.len())
            .map(|t| {
                (0..n)
                    .flat_map(|s| outs.iter().flat_map(move |o| o[t][s * hd..(s + 1) * hd].to_vec()))
                    .collect()
            })
            .collect();
    }
    (layer_in, hy, cy)
}

/// The largest difference over the scale `max(1, max |want|)`.
fn error(got: &[f64], want: &[f64]) -> f64 {
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(a, b)| {
            if a.is_nan() || b.is_nan() {
                f64::INFINITY
            } else {
                (a - b).abs() / scale
            }
        })
        .fold(0.0, f64::max)
}

fn tolerance(c: &Case) -> f64 {
    match c.dtype {
        DType::Float16 => 2e-2,
        DType::Bfloat16 => 6e-2,
        DType::Float64 => 1e-10,
        _ if c.tf32 => 5e-3,
        _ => 2e-5,
    }
}

/// A backend with cuDNN's TF32 allowed or not, and the log of the ops it
/// ran on the device.
fn backend_logged(tf32: bool) -> (CudaBackend, wrapir::exec::cuda::ExternOpLog) {
    common::device_only_backend(MathModes {
        cudnn_allow_tf32: tf32,
        ..MathModes::default()
    })
    .expect("a CUDA device")
}

fn backend(tf32: bool) -> CudaBackend {
    backend_logged(tf32).0
}

struct Inputs {
    x_seq: Vec<Vec<f64>>,
    h0: Vec<Vec<f64>>,
    c0: Vec<Vec<f64>>,
    weights: Vec<(Vec<f64>, Vec<i64>)>,
    args: Vec<Value<Tensor>>,
}

/// The case's values and the op's host arguments (tensors in the case's dtype).
fn inputs(c: &Case) -> Inputs {
    let (t, n, i, hd) = (c.steps, c.batch, c.features, c.hidden);
    let rows = c.layers * c.directions();
    let x_seq: Vec<Vec<f64>> = (0..t).map(|s| c.values(n * i, 10 + s as u64, 1.0)).collect();
    let state = |seed: u64| -> Vec<Vec<f64>> {
        (0..rows)
            .map(|r| {
                if c.initial {
                    c.values(n * hd, seed + r as u64, 1.0)
                } else {
                    vec![0.0; n * hd]
                }
            })
            .collect()
    };
    let h0 = state(50);
    let c0 = if c.cx { state(70) } else { vec![vec![0.0; n * hd]; rows] };
    let weights = weights(c);
    let dt = |v: &[f64], size: &[i64]| Value::Tensor(Tensor::from_f64(c.dtype, v, size).unwrap());
    // The input in the case's layout: [T, N, I] or [N, T, I], contiguous.
    let x = if c.batch_first {
        let v: Vec<f64> = (0..n)
            .flat_map(|s| {
                (0..t)
                    .flat_map(|st| x_seq[st][s * i..(s + 1) * i].to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        dt(&v, &[n as i64, t as i64, i as i64])
    } else {
        dt(&x_seq.concat(), &[t as i64, n as i64, i as i64])
    };
    let state_size = [rows as i64, n as i64, hd as i64];
    let rnn = common::CudnnRnn {
        mode: c.cell as i64,
        bias: c.biases,
        hidden: hd as i64,
        layers: c.layers as i64,
        batch_first: c.batch_first,
        bidirectional: c.bidirectional,
    };
    let args = rnn.args(
        x,
        weights.iter().map(|(v, s)| dt(v, s)).collect(),
        Value::None,
        dt(&h0.concat(), &state_size),
        if c.cell == Cell::Lstm && c.cx {
            dt(&c0.concat(), &state_size)
        } else {
            Value::None
        },
    );
    Inputs {
        x_seq,
        h0,
        c0,
        weights,
        args,
    }
}

fn run(b: &mut CudaBackend, args: &[Value<Tensor>]) -> Result<Vec<CudaTensor>, String> {
    let (dargs, dkwargs) = common::copy_call_in(b, args, &IndexMap::new());
    run_device(b, &dargs, &dkwargs)
}

fn run_device(
    b: &mut CudaBackend,
    args: &[Value<CudaTensor>],
    kwargs: &IndexMap<String, Value<CudaTensor>>,
) -> Result<Vec<CudaTensor>, String> {
    let got = b
        .call_extern(ExternCall::new(OP, args, kwargs))
        .map_err(|e| e.to_string())?;
    let Value::List(items) = got else {
        return Err(format!("a {}, not 5 results", got.kind()));
    };
    items
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) => Ok(t),
            v => Err(format!("a {} result", v.kind())),
        })
        .collect()
}

fn strides(size: &[i64]) -> Vec<i64> {
    wrapir::exec::contiguous_strides(size)
}

/// Runs one case; `Err` with what differs.
fn check(c: &Case) -> Result<(), String> {
    let inp = inputs(c);
    let (t, n, hd, d) = (c.steps as i64, c.batch as i64, c.hidden as i64, c.directions() as i64);
    let rows = c.layers as i64 * d;
    let (mut b, log) = backend_logged(c.tf32);
    let got = run(&mut b, &inp.args)?;
    if log.device_ops().is_empty() {
        return Err("did not run on the device".into());
    }
    if got.len() != 5 {
        return Err(format!("{} results, PyTorch returns 5", got.len()));
    }
    // Layouts, as PyTorch's `_cudnn_rnn` makes them.
    let dh = d * hd;
    let (out_size, out_stride) = if c.batch_first {
        (vec![n, t, dh], vec![dh, n * dh, 1])
    } else {
        (vec![t, n, dh], strides(&[t, n, dh]))
    };
    let state = vec![rows, n, hd];
    // cuDNN's weight space: every matrix and both biases of every layer and
    // direction (double-bias mode keeps the biases, zero, without them).
    let gh = (c.cell.gates() * c.hidden) as i64;
    let weight_numel: i64 = (0..c.layers as i64)
        .map(|layer| {
            let input = if layer == 0 { c.features as i64 } else { dh };
            d * (gh * input + gh * hd + 2 * gh)
        })
        .sum();
    let with_cy = c.cell == Cell::Lstm && c.cx;
    let cy_size = if with_cy { state.clone() } else { vec![0] };
    let want_layouts = [
        (out_size.clone(), out_stride, c.dtype),
        (state.clone(), strides(&state), c.dtype),
        (cy_size.clone(), strides(&cy_size), c.dtype),
        (vec![0], vec![1], DType::Uint8),
    ];
    for (i, (g, (size, stride, dtype))) in got.iter().zip(&want_layouts).enumerate() {
        let s = g.spec();
        if &s.size != size || &s.stride != stride || s.dtype != *dtype {
            return Err(format!(
                "result {i}: {}{:?} strides {:?}, PyTorch's {dtype}{size:?} strides {stride:?}",
                s.dtype, s.size, s.stride
            ));
        }
    }
    // The weight space: 1-d, of cuDNN's size (which may pad between
    // matrices, so at least every weight and both biases).
    let w = got[4].spec();
    if w.size.len() != 1 || w.stride != [1] || w.dtype != c.dtype || w.size[0] < weight_numel {
        return Err(format!(
            "weight_buf: {}{:?} strides {:?}, expected a 1-d {} buffer of at least {weight_numel} elements",
            w.dtype, w.size, w.stride, c.dtype
        ));
    }
    // Values.
    let (out, hy, cy) = reference(c, &inp.x_seq, &inp.weights, &inp.h0, &inp.c0);
    let want_out: Vec<f64> = if c.batch_first {
        (0..c.batch)
            .flat_map(|s| {
                (0..c.steps)
                    .flat_map(|st| out[st][s * c.hidden * c.directions()..(s + 1) * c.hidden * c.directions()].to_vec())
                    .collect::<Vec<_>>()
            })
            .collect()
    } else {
        out.concat()
    };
    let host = |b: &mut CudaBackend, t: &CudaTensor| {
        b.copy_out(t)
            .map_err(|e| e.to_string())?
            .to_f64_vec()
            .map_err(|e| e.to_string())
    };
    let mut checks = vec![
        ("output", host(&mut b, &got[0])?, want_out),
        ("hy", host(&mut b, &got[1])?, hy.concat()),
    ];
    if with_cy {
        checks.push(("cy", host(&mut b, &got[2])?, cy.concat()));
    }
    for (what, g, w) in checks {
        let e = error(&g, &w);
        // NaN fails too.
        if e.is_nan() || e > tolerance(c) {
            return Err(format!("{what}: error {e:.3e} over the tolerance {:.1e}", tolerance(c)));
        }
    }
    Ok(())
}

#[test]
fn lstm_gru_and_rnns_match_the_references_with_pytorchs_layouts() {
    let cases = [
        case("lstm", Cell::Lstm),
        Case {
            layers: 2,
            bidirectional: true,
            batch_first: true,
            initial: false,
            ..case("lstm 2 layers bidirectional batch_first, no initial state", Cell::Lstm)
        },
        Case {
            biases: false,
            hidden: 256,
            features: 32,
            steps: 3,
            batch: 2,
            tf32: true,
            ..case("lstm no biases, hidden 256 (standard algorithm), TF32", Cell::Lstm)
        },
        Case {
            cx: false,
            ..case("lstm without cx (zero cell state, no cy)", Cell::Lstm)
        },
        Case {
            layers: 2,
            bidirectional: true,
            dtype: DType::Float16,
            ..case("lstm f16 2 layers bidirectional", Cell::Lstm)
        },
        Case {
            layers: 2,
            bidirectional: true,
            batch_first: true,
            ..case("gru 2 layers bidirectional batch_first", Cell::Gru)
        },
        Case {
            biases: false,
            dtype: DType::Bfloat16,
            ..case("gru bf16 no biases", Cell::Gru)
        },
        Case {
            bidirectional: true,
            dtype: DType::Float64,
            ..case("rnn tanh f64 bidirectional", Cell::Tanh)
        },
        Case {
            layers: 2,
            batch_first: true,
            ..case("rnn relu 2 layers batch_first", Cell::Relu)
        },
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| check(c).err().map(|e| format!("{}: {e}", c.name)))
        .collect();
    common::assert_no_failures(&failures);
}

/// A second call given the returned `weight_buf` (cuDNN's packed weights,
/// which PyTorch passes for flattened module weights) uses it as is: the
/// same bits, and the buffer comes back as the fifth result.
#[test]
fn a_given_weight_buf_is_used_as_is() {
    let c = Case {
        layers: 2,
        bidirectional: true,
        ..case("lstm", Cell::Lstm)
    };
    let inp = inputs(&c);
    let mut b = backend(false);
    let (mut dargs, kwargs) = common::copy_call_in(&mut b, &inp.args, &IndexMap::new());
    let first = run_device(&mut b, &dargs, &kwargs).unwrap();
    dargs[3] = Value::Tensor(first[4].clone());
    let second = run_device(&mut b, &dargs, &kwargs).unwrap();
    for i in [0, 1, 2, 4] {
        let (x, y) = (b.copy_out(&first[i]).unwrap(), b.copy_out(&second[i]).unwrap());
        assert_eq!(common::element_bits(&x), common::element_bits(&y), "result {i}");
    }
    // A buffer of the wrong size is refused, naming it.
    dargs[3] = Value::Tensor(first[0].clone());
    let e = run_device(&mut b, &dargs, &kwargs).unwrap_err();
    common::assert_contains(&e, "weight_buf");
}

/// What the op does not support is an error naming the op and the argument.
#[test]
fn training_projections_packed_input_and_bad_states_are_refused() {
    let mut b = backend(false);
    let lstm = inputs(&case("lstm", Cell::Lstm)).args;
    let gru = inputs(&case("gru", Cell::Gru)).args;
    let with = |base: &[Value<Tensor>], i: usize, v: Value<Tensor>| {
        let mut a = base.to_vec();
        a[i] = v;
        a
    };
    let transposed_hx = {
        let Value::Tensor(h) = &lstm[4] else { unreachable!() };
        // [1, 3, 16] viewed with the batch and hidden strides swapped around a [1, 16, 3] base.
        let base = Tensor::from_f64(DType::Float32, &h.to_f64_vec().unwrap(), &[1, 16, 3]).unwrap();
        Value::Tensor(base.view(&[1, 3, 16], &[48, 1, 3], 0).unwrap())
    };
    let cases = [
        (with(&lstm, 12, Value::Bool(true)), "train"),
        (with(&lstm, 8, Value::Int(8)), "proj_size"),
        (
            with(&lstm, 14, Value::List(vec![Value::Int(3), Value::Int(2)])),
            "batch_sizes",
        ),
        (with(&gru, 5, lstm[5].clone()), "cx"),
        (with(&lstm, 4, transposed_hx), "hx"),
        (with(&lstm, 6, Value::Int(7)), "mode"),
    ];
    for (args, want) in cases {
        let e = run(&mut b, &args).expect_err(want);
        common::assert_contains(&e, OP.trim_end_matches(".default"));
        common::assert_contains(&e, want);
    }
}
