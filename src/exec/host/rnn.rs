//! `aten.mkldnn_rnn_layer`: one layer and one direction of an LSTM, the op
//! Inductor's CPU decomposition of `nn.LSTM` calls per layer and direction
//! (`torch._decomp.decompositions.mkldnn_one_layer_lstm`, inference), as
//! eager PyTorch runs it through oneDNN.
//!
//! `mkldnn_rnn_layer(input, weight0, weight1, weight2, weight3, hx_, cx_,
//! reverse, batch_sizes, mode, hidden_size, num_layers, has_biases,
//! bidirectional, batch_first, train) -> (output, hy, cy, workspace)`:
//!
//! * `input` `[T, N, I]` (`[N, T, I]` when `batch_first`), `weight0` =
//!   `w_ih` `[4H, I]`, `weight1` = `w_hh` `[4H, H]`, `weight2` / `weight3` =
//!   `b_ih` / `b_hh` `[4H]` (ignored without `has_biases`), `hx_` / `cx_`
//!   `[1, N, H]`;
//! * per step, `gates = x_t w_ih^T + b_ih + h w_hh^T + b_hh`, split into
//!   input, forget, cell and output gates in that order (PyTorch's):
//!   `c = σ(f) c + σ(i) tanh(g)`, `h = σ(o) tanh(c)`; `reverse` runs the
//!   steps from the last to the first, each output staying at its step;
//! * results as the meta function lays them out: `output` `[T, N, H]`
//!   (`[N, T, H]` when `batch_first`) contiguous in the input's dtype, `hy`
//!   and `cy` contiguous with `hx_`'s / `cx_`'s sizes and dtypes, and an
//!   empty `uint8` workspace.
//!
//! Only the LSTM mode (`mode` 2, oneDNN's `rnn_kind::LSTM`), one layer, one
//! direction, no packed `batch_sizes` and inference (`train` false) are
//! what the decomposition passes; anything else is an error naming it.
//! Computed in `f64`, each result rounded to its dtype once.

use super::builtin::{Args, BuiltinOptions};
use super::{ExecError, Tensor, TensorSpec, Value};
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
    let elements = a.result_elements(&out_size, 8, o.max_alloc_bytes())?;
    // Sizes of tensors that exist: non-negative, and each fits in memory.
    let (t_n, n_n, i_n, h_n) = (steps as usize, batch as usize, features as usize, h as usize);
    let x = input.to_f64_vec()?;
    let (wi, wh) = (w_ih.to_f64_vec()?, w_hh.to_f64_vec()?);
    // b_ih + b_hh, once: both are added to every step's gates.
    let bias: Vec<f64> = if has_biases {
        b_ih.to_f64_vec()?
            .iter()
            .zip(b_hh.to_f64_vec()?)
            .map(|(p, q)| p + q)
            .collect()
    } else {
        vec![0.0; 4 * h_n]
    };
    let mut hs = hx.to_f64_vec()?;
    let mut cs = cx.to_f64_vec()?;
    let mut out = vec![0.0f64; elements];
    // Row-major offsets of step `t`, sample `n` in the input and output.
    let at = |t: usize, n: usize, width: usize| {
        if batch_first {
            (n * t_n + t) * width
        } else {
            (t * n_n + n) * width
        }
    };
    let mut g = vec![0.0f64; 4 * h_n];
    for step in 0..t_n {
        let t = if reverse { t_n - 1 - step } else { step };
        for n in 0..n_n {
            let xt = &x[at(t, n, i_n)..at(t, n, i_n) + i_n];
            let hp = &hs[n * h_n..(n + 1) * h_n];
            for (r, gr) in g.iter_mut().enumerate() {
                let wx: f64 = wi[r * i_n..(r + 1) * i_n].iter().zip(xt).map(|(w, v)| w * v).sum();
                let wr: f64 = wh[r * h_n..(r + 1) * h_n].iter().zip(hp).map(|(w, v)| w * v).sum();
                *gr = wx + wr + bias[r];
            }
            for j in 0..h_n {
                let (i, f, c, og) = (g[j], g[h_n + j], g[2 * h_n + j], g[3 * h_n + j]);
                let cell = sigmoid(f) * cs[n * h_n + j] + sigmoid(i) * c.tanh();
                cs[n * h_n + j] = cell;
                let hv = sigmoid(og) * cell.tanh();
                out[at(t, n, h_n) + j] = hv;
            }
            hs[n * h_n..(n + 1) * h_n].copy_from_slice(&out[at(t, n, h_n)..at(t, n, h_n) + h_n]);
        }
    }
    let device = input.spec().device;
    let output = Tensor::from_f64(input.dtype(), &out, &out_size)?;
    let hy = Tensor::from_f64(hx.dtype(), &hs, hx.size())?;
    let cy = Tensor::from_f64(cx.dtype(), &cs, cx.size())?;
    let workspace = Tensor::zeros_like_spec(&TensorSpec::contiguous(DType::Uint8, device, &[0]))?;
    Ok(Value::List(vec![
        Value::Tensor(output),
        Value::Tensor(hy),
        Value::Tensor(cy),
        Value::Tensor(workspace),
    ]))
}
