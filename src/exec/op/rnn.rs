//! `aten._cudnn_rnn`'s arguments as every backend reads and checks them,
//! and the layouts of its results (PyTorch's `_cudnn_rnn` in
//! `aten/src/ATen/native/cudnn/RNN.cpp`).
//!
//! `_cudnn_rnn(input, weight, weight_stride0, weight_buf, hx, cx, mode,
//! hidden_size, proj_size, num_layers, batch_first, dropout, train,
//! bidirectional, batch_sizes, dropout_state) -> (output, hy, cy, reserve,
//! weight_buf)`: `mode` is cuDNN's (`0` ReLU RNN, `1` tanh RNN, `2` LSTM,
//! `3` GRU); `weight` lists, per layer and direction (layer-major), `w_ih`
//! `[G*H, in]`, `w_hh` `[G*H, H]` and, when `weight_stride0` is 4, `b_ih`,
//! `b_hh` `[G*H]` (`G` gates in PyTorch's order, which is cuDNN's: i, f, g,
//! o and r, z, n; `in` the input size for the first layer, `D*H` after).
//!
//! Refused with an error naming the argument: `train` (the training
//! forward, whose reserve space feeds the backward pass), `proj_size`
//! (LSTM projections), packed sequences (`batch_sizes`), `cx` outside an
//! LSTM, non-contiguous `hx`/`cx` (PyTorch refuses them too), operands of
//! another dtype or device than the input's, sizes that disagree.

use super::Args;
use crate::exec::{ExecError, TensorSpec};

/// An RNN cell kind, by cuDNN's `cudnnRNNMode_t` value (PyTorch's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cell {
    Relu,
    Tanh,
    Lstm,
    Gru,
}

impl Cell {
    fn of(mode: i64) -> Option<Cell> {
        Some(match mode {
            0 => Cell::Relu,
            1 => Cell::Tanh,
            2 => Cell::Lstm,
            3 => Cell::Gru,
            _ => return None,
        })
    }

    /// Gates per weight matrix (cuDNN's linear layers are twice this:
    /// input and recurrent).
    pub(crate) fn gates(self) -> i64 {
        match self {
            Cell::Relu | Cell::Tanh => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

/// A checked `_cudnn_rnn` call (`T` the backend's tensor type).
pub(crate) struct CudnnRnn<'c, T> {
    pub(crate) input: &'c T,
    /// Per layer and direction, `weight_stride0` tensors.
    pub(crate) weights: Vec<&'c T>,
    /// 4 (weights and biases) or 2 (weights).
    pub(crate) weight_stride0: usize,
    pub(crate) weight_buf: Option<&'c T>,
    pub(crate) hx: &'c T,
    pub(crate) cx: Option<&'c T>,
    pub(crate) cell: Cell,
    pub(crate) hidden: i64,
    pub(crate) layers: i64,
    /// 1 or 2.
    pub(crate) directions: i64,
    /// `layers * directions` (checked).
    pub(crate) rows: i64,
    pub(crate) batch_first: bool,
    /// Sequence length, batch and input features.
    pub(crate) steps: i64,
    pub(crate) batch: i64,
    pub(crate) features: i64,
    /// `hidden * directions` (checked): the output's last dimension.
    pub(crate) out_features: i64,
}

impl<T> CudnnRnn<'_, T> {
    /// The states' sizes, `[layers * directions, batch, hidden]`.
    pub(crate) fn state_size(&self) -> [i64; 3] {
        [self.rows, self.batch, self.hidden]
    }

    /// The input size of layer `row / directions`.
    pub(crate) fn layer_input(&self, row: usize) -> i64 {
        if (row as i64) < self.directions {
            self.features
        } else {
            self.out_features
        }
    }

    /// PyTorch's output layout: computed `[T, N, D*H]` contiguous and, with
    /// `batch_first`, returned transposed (`output.transpose_(0, 1)`):
    /// sizes `[N, T, D*H]`, strides `[D*H, N*D*H, 1]`.
    pub(crate) fn output_layout(&self) -> (Vec<i64>, Vec<i64>) {
        let (t, n, f) = (self.steps, self.batch, self.out_features);
        if self.batch_first {
            (vec![n, t, f], vec![f, n.saturating_mul(f), 1])
        } else {
            (vec![t, n, f], vec![n.saturating_mul(f), f, 1])
        }
    }

    /// The input's strides in sequence-major order (`[T, N, I]`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's input copy
    pub(crate) fn sequence_major_strides(&self, input: &TensorSpec) -> Vec<i64> {
        let st = &input.stride;
        if self.batch_first {
            vec![st[1], st[0], st[2]]
        } else {
            st.clone()
        }
    }
}

/// Reads and checks a `_cudnn_rnn` call; `spec` gives a tensor's layout.
pub(crate) fn parse<'c, T>(a: &Args<'c, T>, spec: impl Fn(&T) -> &TensorSpec) -> Result<CudnnRnn<'c, T>, ExecError> {
    let input = a.tensor(0, "input")?;
    let weights = a
        .list(1, "weight")?
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            crate::exec::Value::Tensor(t) => Ok(t),
            v => Err(a.err(format!("`weight[{i}]` must be a tensor, got {}", v.kind()))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let weight_stride0 = a.int(2, "weight_stride0", None)?;
    let weight_buf = a.opt_tensor(3, "weight_buf")?;
    let hx = a.tensor(4, "hx")?;
    let cx = a.opt_tensor(5, "cx")?;
    let mode = a.int(6, "mode", None)?;
    let hidden = a.int(7, "hidden_size", None)?;
    let proj = a.int(8, "proj_size", Some(0))?;
    let layers = a.int(9, "num_layers", None)?;
    let batch_first = a.boolean(10, "batch_first", false)?;
    let dropout = a.float(11, "dropout", 0.0)?;
    let train = a.boolean(12, "train", false)?;
    let bidirectional = a.boolean(13, "bidirectional", false)?;
    let batch_sizes = match a.get(14, "batch_sizes") {
        Some(_) => a.ints(14, "batch_sizes")?,
        None => Vec::new(),
    };
    let cell = Cell::of(mode).ok_or_else(|| {
        a.err(format!(
            "`mode` {mode} is not one of cuDNN's RNN modes (0 ReLU, 1 tanh, 2 LSTM, 3 GRU)"
        ))
    })?;
    if train {
        return Err(a.err(format!(
            "`train=True` (the training forward, whose reserve space feeds the backward pass{}) is not supported: inference only",
            if dropout > 0.0 { ", with dropout" } else { "" }
        )));
    }
    if proj != 0 {
        return Err(a.err(format!("`proj_size` {proj} (LSTM projections) is not supported")));
    }
    if !batch_sizes.is_empty() {
        return Err(a.err("packed sequences (`batch_sizes`) are not supported"));
    }
    if cx.is_some() && cell != Cell::Lstm {
        return Err(a.err("`cx` is given for a non-LSTM RNN (PyTorch: illegal defined cx)"));
    }
    if hidden <= 0 || layers <= 0 {
        return Err(a.err(format!(
            "`hidden_size` {hidden} and `num_layers` {layers} must be positive"
        )));
    }
    let x = spec(input);
    if x.size.len() != 3 || x.stride.len() != 3 {
        return Err(a.err(format!("`input` must have rank 3, got sizes {:?}", x.size)));
    }
    let s = &x.size;
    let (steps, batch, features) = if batch_first {
        (s[1], s[0], s[2])
    } else {
        (s[0], s[1], s[2])
    };
    if steps == 0 || batch == 0 || features == 0 {
        return Err(a.err(format!("`input` {s:?} is empty")));
    }
    let directions = if bidirectional { 2 } else { 1 };
    let rows = layers
        .checked_mul(directions)
        .ok_or_else(|| a.err(format!("`num_layers` {layers} is too large")))?;
    let out_features = hidden
        .checked_mul(directions)
        .ok_or_else(|| a.err(format!("`hidden_size` {hidden} is too large")))?;
    let stride0 = usize::try_from(weight_stride0)
        .ok()
        .filter(|s| matches!(s, 2 | 4))
        .ok_or_else(|| {
            a.err(format!(
                "`weight_stride0` {weight_stride0}: expected 4 (weights and biases) or 2 (weights), per layer and direction"
            ))
        })?;
    if usize::try_from(rows).ok().and_then(|r| r.checked_mul(stride0)) != Some(weights.len()) {
        return Err(a.err(format!(
            "`weight` has {} tensors, expected {rows} layers and directions x {stride0}",
            weights.len()
        )));
    }
    let (dtype, device) = (x.dtype, x.device);
    let operands = std::iter::once(("hx".to_string(), hx))
        .chain(cx.map(|c| ("cx".to_string(), c)))
        .chain(weight_buf.map(|w| ("weight_buf".to_string(), w)))
        .chain(weights.iter().enumerate().map(|(i, w)| (format!("weight[{i}]"), *w)));
    for (name, t) in operands {
        let t = spec(t);
        if t.dtype != dtype || t.device != device {
            return Err(a.err(format!(
                "`{name}` is {} on {}, `input` {dtype} on {device}: all operands must match",
                t.dtype, t.device
            )));
        }
    }
    let state = [rows, batch, hidden];
    for (name, t) in std::iter::once(("hx", hx)).chain(cx.map(|c| ("cx", c))) {
        let t = spec(t);
        if t.size != state {
            return Err(a.err(format!("`{name}` must have sizes {state:?}, got {:?}", t.size)));
        }
        if !t.is_contiguous() {
            return Err(a.err(format!("`{name}` is not contiguous (strides {:?})", t.stride)));
        }
    }
    let rnn = CudnnRnn {
        input,
        weights,
        weight_stride0: stride0,
        weight_buf,
        hx,
        cx,
        cell,
        hidden,
        layers,
        directions,
        rows,
        batch_first,
        steps,
        batch,
        features,
        out_features,
    };
    // Each weight's sizes, as PyTorch's module holds them.
    let gh = cell
        .gates()
        .checked_mul(hidden)
        .ok_or_else(|| a.err(format!("`hidden_size` {hidden} is too large")))?;
    for (index, w) in rnn.weights.iter().enumerate() {
        let (row, j) = (index / stride0, index % stride0);
        let want = match j {
            0 => vec![gh, rnn.layer_input(row)],
            1 => vec![gh, hidden],
            _ => vec![gh],
        };
        if spec(w).size != want {
            return Err(a.err(format!(
                "`weight[{index}]` must have sizes {want:?} (layer {}, direction {}), got {:?}",
                row / directions as usize,
                row % directions as usize,
                spec(w).size
            )));
        }
    }
    Ok(rnn)
}
