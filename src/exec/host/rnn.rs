//! Recurrent layers on the host: `aten.mkldnn_rnn_layer` (one LSTM layer
//! and direction, the op Inductor's CPU decomposition of `nn.LSTM` calls)
//! and `aten._cudnn_rnn` (cuDNN's whole RNN, the op a CUDA program calls,
//! run here for `--device cpu` and the CUDA backend's host fallback). Both
//! run one layer and direction at a time through [`run_layer`], in `f64`,
//! each result rounded to its dtype once.
//!
//! `mkldnn_rnn_layer(input, weight0, weight1, weight2, weight3, hx_, cx_,
//! reverse, batch_sizes, mode, hidden_size, num_layers, has_biases,
//! bidirectional, batch_first, train) -> (output, hy, cy, workspace)`
//! (`torch._decomp.decompositions.mkldnn_one_layer_lstm`, inference):
//!
//! * `input` `[T, N, I]` (`[N, T, I]` when `batch_first`), `weight0` =
//!   `w_ih` `[4H, I]`, `weight1` = `w_hh` `[4H, H]`, `weight2` / `weight3` =
//!   `b_ih` / `b_hh` `[4H]` (ignored without `has_biases`), `hx_` / `cx_`
//!   `[1, N, H]`;
//! * results as the meta function lays them out: `output` `[T, N, H]`
//!   (`[N, T, H]` when `batch_first`) contiguous in the input's dtype, `hy`
//!   and `cy` contiguous with `hx_`'s / `cx_`'s sizes and dtypes, and an
//!   empty `uint8` workspace.
//!
//! Only the LSTM mode (`mode` 2, oneDNN's `rnn_kind::LSTM`), one layer, one
//! direction, no packed `batch_sizes` and inference (`train` false) are
//! what the decomposition passes; anything else is an error naming it.
//!
//! `_cudnn_rnn`: arguments, refusals and result layouts as
//! `exec::op::rnn` reads them (the CUDA backend's too): the output
//! transposed for `batch_first` as PyTorch's CUDA kernel returns it, `cy`
//! empty without `cx`, an empty reserve. Its fifth result is the given
//! `weight_buf` (PyTorch returns the buffer it ran on); without one it
//! would be a buffer in cuDNN's packed layout, which only cuDNN knows:
//! that is an error naming `weight_buf`.
//!
//! The cells, per step (PyTorch's gate order, `x` the step's input, `h` the
//! previous state): LSTM `i, f, g, o` from `w_ih x + w_hh h + b_ih + b_hh`,
//! `c = σ(f) c + σ(i) tanh(g)`, `h = σ(o) tanh(c)`; GRU `r, z` from
//! `σ(w_i x + b_i + w_h h + b_h)`, `n = tanh(w_in x + b_in + r (w_hn h +
//! b_hn))`, `h = (1 - z) n + z h`; RNNs `h = tanh` / `relu(w_ih x + b_ih +
//! w_hh h + b_hh)`. A reverse direction runs the steps from the last to
//! the first, each output staying at its step.

use super::builtin::{Args, BuiltinOptions};
use super::{ExecError, Tensor, TensorSpec, Value};
use crate::exec::op::rnn::{parse, Cell};
use crate::ir::DType;

/// oneDNN's `rnn_kind::LSTM`, the `mode` the decomposition passes.
const LSTM_MODE: i64 = 2;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub(super) fn mkldnn_rnn_layer(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let input = a.tensor(0, "input")?;
    let (w_ih, w_hh) = (a.tensor(1, "weight0")?, a.tensor(2, "weight1")?);
    let (b_ih, b_hh) = (a.tensor(3, "weight2")?, a.tensor(4, "weight3")?);
    let (hx, cx) = (a.tensor(5, "hx_")?, a.tensor(6, "cx_")?);
    let reverse = a.boolean(7, "reverse", false)?;
    let batch_sizes = a.ints(8, "batch_sizes")?;
    let mode = a.int(9, "mode", None)?;
    let hidden = a.int(10, "hidden_size", None)?;
    let num_layers = a.int(11, "num_layers", None)?;
    let has_biases = a.boolean(12, "has_biases", true)?;
    let bidirectional = a.boolean(13, "bidirectional", false)?;
    let batch_first = a.boolean(14, "batch_first", false)?;
    let train = a.boolean(15, "train", false)?;
    if mode != LSTM_MODE {
        return Err(a.err(format!(
            "`mode` {mode} is not oneDNN's LSTM ({LSTM_MODE}), the only mode supported"
        )));
    }
    if num_layers != 1 || bidirectional {
        return Err(a.err(format!(
            "one layer in one direction per call (the decomposition's), got num_layers={num_layers}, bidirectional={bidirectional}"
        )));
    }
    if !batch_sizes.is_empty() {
        return Err(a.err("packed sequences (`batch_sizes`) are not supported"));
    }
    if train {
        return Err(a.err("`train` must be false: only inference is supported"));
    }
    for (name, t) in [
        ("input", input),
        ("weight0", w_ih),
        ("weight1", w_hh),
        ("hx_", hx),
        ("cx_", cx),
    ] {
        if !t.dtype().is_floating() || t.dtype().is_complex() {
            return Err(a.err(format!("`{name}` must be a real floating tensor, got {}", t.dtype())));
        }
    }
    if input.dim() != 3 {
        return Err(a.err(format!("`input` must have rank 3, got {:?}", input.size())));
    }
    let (steps, batch, features) = if batch_first {
        (input.size()[1], input.size()[0], input.size()[2])
    } else {
        (input.size()[0], input.size()[1], input.size()[2])
    };
    let h = hidden;
    let gates = h
        .checked_mul(4)
        .ok_or_else(|| a.err(format!("`hidden_size` {h} is too large")))?;
    let expect = |name: &str, t: &Tensor, size: &[i64]| -> Result<(), ExecError> {
        if t.size() != size {
            return Err(a.err(format!("`{name}` must have sizes {size:?}, got {:?}", t.size())));
        }
        Ok(())
    };
    expect("weight0", w_ih, &[gates, features])?;
    expect("weight1", w_hh, &[gates, h])?;
    if has_biases {
        expect("weight2", b_ih, &[gates])?;
        expect("weight3", b_hh, &[gates])?;
    }
    expect("hx_", hx, &[1, batch, h])?;
    expect("cx_", cx, &[1, batch, h])?;
    let out_size = if batch_first {
        vec![batch, steps, h]
    } else {
        vec![steps, batch, h]
    };
    a.result_elements(&out_size, 8, o.max_alloc_bytes())?;
    // Sizes of tensors that exist: non-negative, and each fits in memory.
    let (t_n, n_n, i_n, h_n) = (steps as usize, batch as usize, features as usize, h as usize);
    let x = sequence_major(input.to_f64_vec()?, batch_first, (n_n, t_n, i_n));
    let zeros = || vec![0.0; 4 * h_n];
    let weights = LayerWeights {
        w_ih: w_ih.to_f64_vec()?,
        w_hh: w_hh.to_f64_vec()?,
        b_ih: if has_biases { b_ih.to_f64_vec()? } else { zeros() },
        b_hh: if has_biases { b_hh.to_f64_vec()? } else { zeros() },
    };
    let mut hs = hx.to_f64_vec()?;
    let mut cs = cx.to_f64_vec()?;
    let seq = run_layer(
        Cell::Lstm,
        &x,
        (t_n, n_n, i_n, h_n),
        &weights,
        &mut hs,
        &mut cs,
        reverse,
    );
    let out = if batch_first {
        sequence_major(seq, true, (t_n, n_n, h_n))
    } else {
        seq
    };
    let device = input.spec().device;
    let output = Tensor::from_f64(input.dtype(), &out, &out_size)?;
    let hy = Tensor::from_f64(hx.dtype(), &hs, hx.size())?;
    let cy = Tensor::from_f64(cx.dtype(), &cs, cx.size())?;
    results([output, hy, cy, empty_bytes(device)?])
}

/// The empty `uint8` tensor an RNN op returns for its workspace or reserve
/// (the host needs none).
fn empty_bytes(device: crate::ir::Device) -> Result<Tensor, ExecError> {
    Tensor::zeros_like_spec(&TensorSpec::contiguous(DType::Uint8, device, &[0]))
}

/// An op's tensor results, as the list value it returns.
fn results<const N: usize>(tensors: [Tensor; N]) -> Result<Value<Tensor>, ExecError> {
    Ok(Value::List(tensors.into_iter().map(Value::Tensor).collect()))
}

/// `values` of a `[A, B, F]` tensor laid out as `[B, A, F]` (row-major)
/// when `swap`, else as they are: a batch-first tensor's values in
/// sequence-major order, and back.
fn sequence_major(values: Vec<f64>, swap: bool, (a, b, f): (usize, usize, usize)) -> Vec<f64> {
    if !swap {
        return values;
    }
    let mut out = vec![0.0; values.len()];
    for i in 0..a {
        for j in 0..b {
            let (src, dst) = ((i * b + j) * f, (j * a + i) * f);
            out[dst..dst + f].copy_from_slice(&values[src..src + f]);
        }
    }
    out
}

/// One layer and direction's weights, row-major (`[G*H, in]`, `[G*H, H]`,
/// `[G*H]`, `[G*H]`; zero biases for a layer without them).
struct LayerWeights {
    w_ih: Vec<f64>,
    w_hh: Vec<f64>,
    b_ih: Vec<f64>,
    b_hh: Vec<f64>,
}

/// Runs one layer in one direction over the sequence-major input `x`
/// (`[T, N, in]`) from the states `h` (and `c`, LSTMs) `[N, H]`, which it
/// leaves at their final values; returns the outputs `[T, N, H]`.
fn run_layer(
    cell: Cell,
    x: &[f64],
    (t_n, n_n, i_n, h_n): (usize, usize, usize, usize),
    w: &LayerWeights,
    h: &mut [f64],
    c: &mut [f64],
    reverse: bool,
) -> Vec<f64> {
    let g_n = cell.gates() as usize * h_n;
    // LSTMs add both biases once (oneDNN's and cuDNN's sum); GRUs keep the
    // recurrent one apart (it is inside the reset gate's product).
    let bias: Vec<f64> = w.b_ih.iter().zip(&w.b_hh).map(|(p, q)| p + q).collect();
    let mut out = vec![0.0f64; t_n * n_n * h_n];
    let (mut gi, mut gh) = (vec![0.0f64; g_n], vec![0.0f64; g_n]);
    let dot = |row: &[f64], v: &[f64]| -> f64 { row.iter().zip(v).map(|(a, b)| a * b).sum() };
    for step in 0..t_n {
        let t = if reverse { t_n - 1 - step } else { step };
        for n in 0..n_n {
            let xt = &x[(t * n_n + n) * i_n..(t * n_n + n + 1) * i_n];
            let hp = &h[n * h_n..(n + 1) * h_n];
            for r in 0..g_n {
                gi[r] = dot(&w.w_ih[r * i_n..(r + 1) * i_n], xt);
                gh[r] = dot(&w.w_hh[r * h_n..(r + 1) * h_n], hp);
            }
            let o = (t * n_n + n) * h_n;
            for j in 0..h_n {
                let hv = match cell {
                    Cell::Lstm => {
                        let g = |k: usize| gi[k * h_n + j] + gh[k * h_n + j] + bias[k * h_n + j];
                        let cell_state = sigmoid(g(1)) * c[n * h_n + j] + sigmoid(g(0)) * g(2).tanh();
                        c[n * h_n + j] = cell_state;
                        sigmoid(g(3)) * cell_state.tanh()
                    }
                    Cell::Gru => {
                        let i = |k: usize| gi[k * h_n + j] + w.b_ih[k * h_n + j];
                        let r = |k: usize| gh[k * h_n + j] + w.b_hh[k * h_n + j];
                        let reset = sigmoid(i(0) + r(0));
                        let update = sigmoid(i(1) + r(1));
                        let new = (i(2) + reset * r(2)).tanh();
                        (1.0 - update) * new + update * h[n * h_n + j]
                    }
                    Cell::Tanh | Cell::Relu => {
                        let pre = gi[j] + w.b_ih[j] + gh[j] + w.b_hh[j];
                        if cell == Cell::Tanh {
                            pre.tanh()
                        } else {
                            pre.max(0.0)
                        }
                    }
                };
                out[o + j] = hv;
            }
            h[n * h_n..(n + 1) * h_n].copy_from_slice(&out[o..o + h_n]);
        }
    }
    out
}

pub(super) fn cudnn_rnn(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let r = parse(a, Tensor::spec)?;
    let dtype = r.input.dtype();
    if !dtype.is_floating() || dtype.is_complex() {
        return Err(a.err(format!("`input` must be a real floating tensor, got {dtype}")));
    }
    let Some(weight_buf) = r.weight_buf else {
        return Err(a.err(
            "no `weight_buf`: its fifth result would be cuDNN's packed weights, whose layout only cuDNN knows (run it on cuda)",
        ));
    };
    let (out_size, out_stride) = r.output_layout();
    a.result_elements(&out_size, 8, o.max_alloc_bytes())?;
    // Sizes of tensors that exist: non-negative, and each fits in memory.
    let (t_n, n_n, i_n, h_n) = (
        r.steps as usize,
        r.batch as usize,
        r.features as usize,
        r.hidden as usize,
    );
    let (d_n, f_n) = (r.directions as usize, r.out_features as usize);
    let state_n = r.rows as usize * n_n * h_n;
    let mut layer_in = sequence_major(r.input.to_f64_vec()?, r.batch_first, (n_n, t_n, i_n));
    let mut hy = r.hx.to_f64_vec()?;
    let mut cy = match r.cx {
        Some(c) => c.to_f64_vec()?,
        None => vec![0.0; state_n],
    };
    let g_n = r.cell.gates() as usize * h_n;
    for layer in 0..r.layers as usize {
        let input = if layer == 0 { i_n } else { f_n };
        let mut out = vec![0.0f64; t_n * n_n * f_n];
        for dir in 0..d_n {
            let row = layer * d_n + dir;
            let w = |j: usize| -> Result<Vec<f64>, ExecError> {
                match r.weights.get(row * r.weight_stride0 + j) {
                    Some(t) if j < r.weight_stride0 => t.to_f64_vec(),
                    _ => Ok(vec![0.0; g_n]),
                }
            };
            let weights = LayerWeights {
                w_ih: w(0)?,
                w_hh: w(1)?,
                b_ih: w(2)?,
                b_hh: w(3)?,
            };
            let states = row * n_n * h_n..(row + 1) * n_n * h_n;
            let seq = run_layer(
                r.cell,
                &layer_in,
                (t_n, n_n, input, h_n),
                &weights,
                &mut hy[states.clone()],
                &mut cy[states],
                dir == 1,
            );
            // Each step's outputs of the directions side by side per sample.
            for (k, chunk) in seq.chunks(h_n).enumerate() {
                out[k * f_n + dir * h_n..k * f_n + (dir + 1) * h_n].copy_from_slice(chunk);
            }
        }
        layer_in = out;
    }
    let device = r.input.spec().device;
    let seq_size = [r.steps, r.batch, r.out_features];
    let output = Tensor::from_f64(dtype, &layer_in, &seq_size)?.view(&out_size, &out_stride, 0)?;
    let state = r.state_size();
    let hy = Tensor::from_f64(r.hx.dtype(), &hy, &state)?;
    let cy = match r.cx {
        Some(c) => Tensor::from_f64(c.dtype(), &cy, &state)?,
        None => Tensor::zeros_like_spec(&TensorSpec::contiguous(r.hx.dtype(), device, &[0]))?,
    };
    results([output, hy, cy, empty_bytes(device)?, weight_buf.clone()])
}
