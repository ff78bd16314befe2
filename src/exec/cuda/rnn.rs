//! `aten._cudnn_rnn` (the op eager PyTorch runs `nn.LSTM`, `nn.GRU` and
//! `nn.RNN` on for CUDA tensors, and an extern call of Inductor's fallback)
//! on cuDNN's RNN API, as PyTorch's cuDNN v8 path
//! (`aten/src/ATen/native/cudnn/RNN.cpp`, `_cudnn_rnn`) runs it in
//! inference.
//!
//! `_cudnn_rnn(input, weight, weight_stride0, weight_buf, hx, cx, mode,
//! hidden_size, proj_size, num_layers, batch_first, dropout, train,
//! bidirectional, batch_sizes, dropout_state) -> (output, hy, cy, reserve,
//! weight_buf)`:
//!
//! * `mode` is cuDNN's (`0` ReLU RNN, `1` tanh RNN, `2` LSTM, `3` GRU);
//!   `weight` lists, per layer and direction (layer-major), `w_ih`, `w_hh`
//!   and, when `weight_stride0` is 4, `b_ih`, `b_hh` (PyTorch's gate order,
//!   which is cuDNN's: i, f, g, o and r, z, n).
//! * The descriptor as PyTorch sets it: double bias (zero biases without
//!   them), linear input, padded I/O, the input's data type with f32 math
//!   for f16 and bf16, math type tensor-op for f16, FMA for the rest when
//!   `cudnn_allow_tf32` is off, else cuDNN's default, on GPUs of compute
//!   capability 7 and up; a dropout descriptor of probability 0; PyTorch's
//!   algorithm heuristic (`get_algo`: persistent-small-h kernels for
//!   hidden sizes up to 192 (LSTM, GRU) or 384 (RNNs), persistent static
//!   kernels for some f16 shapes, else the standard algorithm).
//! * Weights: a given `weight_buf` is cuDNN's packed weight space already
//!   (PyTorch's flattened weights) and is used as is; else a zeroed buffer
//!   of cuDNN's weight-space size gets each matrix and bias copied to the
//!   offset `cudnnGetRNNWeightParams` gives (PyTorch's `get_parameters` and
//!   `_copyParams`), and is returned as the fifth result.
//! * Results with PyTorch's sizes and strides: `output` computed
//!   `[T, N, D*H]` contiguous and, with `batch_first`, returned transposed
//!   (`[N, T, D*H]`, strides `[D*H, N*D*H, 1]`); `hy` `[L*D, N, H]` and
//!   `cy` (`cx`'s, or an empty `[0]` of `hx`'s dtype without `cx`: non-LSTM
//!   cells, or an LSTM given no `cx`, whose initial cell state is then zero)
//!   contiguous; `reserve` an empty `uint8` tensor (inference keeps none).
//!   The input is made sequence-major contiguous first, as PyTorch's
//!   `input.transpose(0, 1).contiguous()` does.
//!
//! Refused with an error naming the argument: `train` (the training
//! forward, whose reserve space feeds the backward pass), `proj_size`
//! (LSTM projections), packed sequences (`batch_sizes`), `cx` outside an
//! LSTM, non-contiguous `hx`/`cx` (PyTorch refuses them too), operands of
//! other dtypes or devices. The one cuDNN call ([`RnnCall`]) is a
//! [`LibraryCall`] that the prepared path and CUDA graphs replay; the
//! weight copies are the built-in strided-copy kernel.

use super::dnn::{check, DataType, DnnHandle, TensorDesc};
use super::library::{self, Address, LibraryCall};
use super::{kernels, CudaBackend, CudaTensor};
use crate::exec::host::conv::packed_as;
use crate::exec::op::{Args, ExternOp};
use crate::exec::{contiguous_strides, Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::cudnn::sys as dnn;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::rc::Rc;

/// The op this module runs (errors name it by its key).
const OP: &str = crate::exec::op::key::CUDNN_RNN;

/// cuDNN's `CUDNN_RNN_PADDED_IO_ENABLED` aux flag (a macro, not in the
/// bindings): PyTorch's flag for unpacked input.
const PADDED_IO_ENABLED: u32 = 1;

/// Whether this module runs `op` (the catalogue's `CudaRoute::Rnn`).
pub(crate) fn runs(op: ExternOp) -> bool {
    op == ExternOp::CudnnRnn
}

/// An RNN cell kind, by cuDNN's `cudnnRNNMode_t` value (PyTorch's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
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

    fn cudnn(self) -> dnn::cudnnRNNMode_t {
        match self {
            Cell::Relu => dnn::cudnnRNNMode_t::CUDNN_RNN_RELU,
            Cell::Tanh => dnn::cudnnRNNMode_t::CUDNN_RNN_TANH,
            Cell::Lstm => dnn::cudnnRNNMode_t::CUDNN_LSTM,
            Cell::Gru => dnn::cudnnRNNMode_t::CUDNN_GRU,
        }
    }

    /// Gates per matrix (cuDNN's linear layers are twice this: input and
    /// recurrent).
    fn gates(self) -> i64 {
        match self {
            Cell::Relu | Cell::Tanh => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

fn data_type(d: DType) -> Option<DataType> {
    match d {
        DType::Float32 => Some(DataType::CUDNN_DATA_FLOAT),
        DType::Float16 => Some(DataType::CUDNN_DATA_HALF),
        DType::Bfloat16 => Some(DataType::CUDNN_DATA_BFLOAT16),
        DType::Float64 => Some(DataType::CUDNN_DATA_DOUBLE),
        _ => None,
    }
}

/// A checked `_cudnn_rnn` call.
struct Rnn<'c> {
    input: &'c CudaTensor,
    weights: Vec<&'c CudaTensor>,
    weight_stride0: usize,
    weight_buf: Option<&'c CudaTensor>,
    hx: &'c CudaTensor,
    cx: Option<&'c CudaTensor>,
    cell: Cell,
    hidden: i64,
    layers: i64,
    directions: i64,
    /// `layers * directions` (checked).
    rows: i64,
    batch_first: bool,
    /// Sequence length, batch and input features.
    steps: i64,
    batch: i64,
    features: i64,
}

fn int(a: &Args<'_, CudaTensor>, v: i64, what: &str) -> Result<i32, ExecError> {
    i32::try_from(v).map_err(|_| a.err(format!("{what} {v} does not fit cuDNN's int")))
}

fn parse<'c>(a: &Args<'c, CudaTensor>) -> Result<Rnn<'c>, ExecError> {
    let input = a.tensor(0, "input")?;
    let weights = a
        .list(1, "weight")?
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Tensor(t) => Ok(t),
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
    if input.spec.size.len() != 3 {
        return Err(a.err(format!("`input` must have rank 3, got sizes {:?}", input.spec.size)));
    }
    let s = &input.spec.size;
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
    let dtype = input.spec.dtype;
    let device = input.spec.device;
    let operands = std::iter::once(("hx".to_string(), hx))
        .chain(cx.map(|c| ("cx".to_string(), c)))
        .chain(weight_buf.map(|w| ("weight_buf".to_string(), w)))
        .chain(weights.iter().enumerate().map(|(i, w)| (format!("weight[{i}]"), *w)));
    for (name, t) in operands {
        if t.spec.dtype != dtype || t.spec.device != device {
            return Err(a.err(format!(
                "`{name}` is {} on {}, `input` {dtype} on {device}: all operands must match",
                t.spec.dtype, t.spec.device
            )));
        }
    }
    let state = [rows, batch, hidden];
    for (name, t) in std::iter::once(("hx", hx)).chain(cx.map(|c| ("cx", c))) {
        if t.spec.size != state {
            return Err(a.err(format!("`{name}` must have sizes {state:?}, got {:?}", t.spec.size)));
        }
        if !packed_as(&t.spec.size, &t.spec.stride, &contiguous_strides(&t.spec.size)) {
            return Err(a.err(format!("`{name}` is not contiguous (strides {:?})", t.spec.stride)));
        }
    }
    Ok(Rnn {
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
    })
}

/// PyTorch's `get_algo` for the forward pass on a GPU of compute
/// capability `major.minor` with `sms` multiprocessors.
fn algorithm(r: &Rnn<'_>, dtype: DType, (major, minor, sms): (i32, i32, i32)) -> dnn::cudnnRNNAlgo_t {
    use dnn::cudnnRNNAlgo_t as A;
    let small_h = major >= 6
        && match r.cell {
            Cell::Relu | Cell::Tanh => r.hidden <= 384,
            Cell::Lstm | Cell::Gru => r.hidden <= 192,
        };
    if dtype != DType::Float64 && small_h {
        return A::CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
    }
    if dtype == DType::Float16 {
        let common =
            r.layers == 1 && r.hidden <= 1024 && r.directions == 1 && r.hidden % 128 == 0 && r.features % 128 == 0;
        let (b, t) = (r.batch, r.steps);
        let on_device = if major == 7 {
            minor != 5
                && ((b % 16 == 0 && b != 80 && b != 112) || b == 8)
                && ((t >= 40 && b <= 128) || (t >= 20 && b <= 96) || (t >= 10 && b <= 32))
        } else if major >= 8 && sms >= 98 && minor != 6 {
            match r.cell {
                Cell::Gru => false,
                Cell::Lstm => b % 8 == 0 && b <= 128,
                Cell::Relu | Cell::Tanh => b % 8 == 0 && b <= 128 && (b < 96 || r.hidden < 896),
            }
        } else {
            false
        };
        if common && on_device {
            return A::CUDNN_RNN_ALGO_PERSIST_STATIC;
        }
    }
    A::CUDNN_RNN_ALGO_STANDARD
}

/// A dropout descriptor of probability 0 (PyTorch's `set_no_dropout`).
#[derive(Debug)]
struct DropoutDesc(dnn::cudnnDropoutDescriptor_t);

impl DropoutDesc {
    fn none(handle: &DnnHandle) -> Result<DropoutDesc, ExecError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("cudnnCreateDropoutDescriptor", unsafe {
            dnn::cudnnCreateDropoutDescriptor(&mut raw)
        })?;
        let desc = DropoutDesc(raw);
        // SAFETY: live descriptor and handle; no state is needed at probability 0.
        check("cudnnSetDropoutDescriptor", unsafe {
            dnn::cudnnSetDropoutDescriptor(raw, handle.raw(), 0.0, std::ptr::null_mut(), 0, 0)
        })?;
        Ok(desc)
    }
}

impl Drop for DropoutDesc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnDestroyDropoutDescriptor(self.0) };
    }
}

/// An RNN descriptor.
#[derive(Debug)]
struct RnnDesc(dnn::cudnnRNNDescriptor_t);

impl Drop for RnnDesc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnDestroyRNNDescriptor(self.0) };
    }
}

/// A sequence data descriptor (sequence-major, unpacked, every sequence full length).
#[derive(Debug)]
struct DataDesc(dnn::cudnnRNNDataDescriptor_t);

impl DataDesc {
    fn new(dtype: DataType, steps: i32, batch: i32, vector: i32) -> Result<DataDesc, ExecError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("cudnnCreateRNNDataDescriptor", unsafe {
            dnn::cudnnCreateRNNDataDescriptor(&mut raw)
        })?;
        let desc = DataDesc(raw);
        let lengths = vec![steps; usize::try_from(batch).unwrap_or(0)];
        // SAFETY: live descriptor; `lengths` holds `batch` entries; no padding fill.
        check("cudnnSetRNNDataDescriptor", unsafe {
            dnn::cudnnSetRNNDataDescriptor(
                raw,
                dtype,
                dnn::cudnnRNNDataLayout_t::CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                steps,
                batch,
                vector,
                lengths.as_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(desc)
    }
}

impl Drop for DataDesc {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        let _ = unsafe { dnn::cudnnDestroyRNNDataDescriptor(self.0) };
    }
}

/// Everything one forward call describes; the RNN descriptor is dropped
/// before the dropout descriptor it refers to.
#[derive(Debug)]
struct Descriptors {
    rnn: RnnDesc,
    _dropout: DropoutDesc,
    x: DataDesc,
    y: DataDesc,
    h: TensorDesc,
    /// The cell state's (LSTMs only; PyTorch passes none for other cells).
    c: Option<TensorDesc>,
}

/// Runs `call` when it is an `_cudnn_rnn` cuDNN can take; `Ok(None)` for
/// dtypes cuDNN has no RNN for.
pub(super) fn call(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
) -> Result<Option<Value<CudaTensor>>, ExecError> {
    if !runs(call.family) {
        return Ok(None);
    }
    let a = Args::of(call);
    let r = parse(&a)?;
    let dtype = r.input.spec.dtype;
    let Some(dt) = data_type(dtype) else {
        return Ok(None);
    };
    let math_prec = match dt {
        DataType::CUDNN_DATA_HALF | DataType::CUDNN_DATA_BFLOAT16 => DataType::CUDNN_DATA_FLOAT,
        other => other,
    };
    use sys::CUdevice_attribute as At;
    let device = (
        backend
            .device
            .attribute(At::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        backend
            .device
            .attribute(At::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        backend.device.attribute(At::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
    );
    let math_type = {
        use dnn::cudnnMathType_t as M;
        if device.0 < 7 {
            M::CUDNN_DEFAULT_MATH
        } else if dt == DataType::CUDNN_DATA_HALF {
            M::CUDNN_TENSOR_OP_MATH
        } else if !backend.options.math.cudnn_allow_tf32 {
            M::CUDNN_FMA_MATH
        } else {
            M::CUDNN_DEFAULT_MATH
        }
    };
    let algo = algorithm(&r, dtype, device);
    let (steps, batch) = (int(&a, r.steps, "sequence length")?, int(&a, r.batch, "batch")?);
    let out_features = r
        .hidden
        .checked_mul(r.directions)
        .ok_or_else(|| a.err(format!("`hidden_size` {} is too large", r.hidden)))?;
    let rows = r.rows;
    if backend.dnn.is_none() {
        backend.dnn = Some(DnnHandle::new(&backend.device)?);
    }
    let handle = backend.dnn.as_ref().ok_or_else(|| a.err("no cuDNN handle"))?;
    let dropout = DropoutDesc::none(handle)?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer.
    check("cudnnCreateRNNDescriptor", unsafe {
        dnn::cudnnCreateRNNDescriptor(&mut raw)
    })?;
    let rnn = RnnDesc(raw);
    // SAFETY: live descriptors; every value is one of the enums' or a checked int.
    check("cudnnSetRNNDescriptor_v8", unsafe {
        dnn::cudnnSetRNNDescriptor_v8(
            raw,
            algo,
            r.cell.cudnn(),
            dnn::cudnnRNNBiasMode_t::CUDNN_RNN_DOUBLE_BIAS,
            if r.directions == 2 {
                dnn::cudnnDirectionMode_t::CUDNN_BIDIRECTIONAL
            } else {
                dnn::cudnnDirectionMode_t::CUDNN_UNIDIRECTIONAL
            },
            dnn::cudnnRNNInputMode_t::CUDNN_LINEAR_INPUT,
            dt,
            math_prec,
            math_type,
            int(&a, r.features, "input size")?,
            int(&a, r.hidden, "hidden size")?,
            int(&a, r.hidden, "hidden size")?,
            int(&a, r.layers, "num_layers")?,
            dropout.0,
            PADDED_IO_ENABLED,
        )
    })?;
    let state = [rows, r.batch, r.hidden];
    let descs = Rc::new(Descriptors {
        x: DataDesc::new(dt, steps, batch, int(&a, r.features, "input size")?)?,
        y: DataDesc::new(dt, steps, batch, int(&a, out_features, "output size")?)?,
        h: TensorDesc::new(dt, &state, &contiguous_strides(&state))?,
        c: match r.cell {
            Cell::Lstm => Some(TensorDesc::new(dt, &state, &contiguous_strides(&state))?),
            _ => None,
        },
        rnn,
        _dropout: dropout,
    });
    let elem = dtype.size_bytes() as usize;
    let mut weight_bytes = 0usize;
    // SAFETY: live handle and descriptor; an out-pointer to a live usize.
    check("cudnnGetRNNWeightSpaceSize", unsafe {
        dnn::cudnnGetRNNWeightSpaceSize(handle.raw(), descs.rnn.0, &mut weight_bytes)
    })?;
    let (mut work_bytes, mut reserve_bytes) = (0usize, 0usize);
    // SAFETY: as above; PyTorch asks the inference sizes the same way.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        dnn::cudnnGetRNNTempSpaceSizes(
            handle.raw(),
            descs.rnn.0,
            dnn::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
            descs.x.0,
            &mut work_bytes,
            &mut reserve_bytes,
        )
    })?;
    let device_of = r.input.spec.device;
    // The weight space: the given buffer, else the weights packed into a new one.
    let weight_buf = match r.weight_buf {
        Some(w) => {
            let bytes = usize::try_from(w.spec.numel())
                .ok()
                .and_then(|n| n.checked_mul(elem))
                .unwrap_or(0);
            if w.spec.size.len() != 1 || w.spec.stride.first().is_some_and(|&s| s != 1) || bytes < weight_bytes {
                return Err(a.err(format!(
                    "`weight_buf` ({:?}, strides {:?}) must be a dense 1-d buffer of cuDNN's weight space ({} elements)",
                    w.spec.size,
                    w.spec.stride,
                    weight_bytes / elem.max(1)
                )));
            }
            w.clone()
        }
        None => {
            let numel = i64::try_from(weight_bytes / elem.max(1)).map_err(|_| a.err("weight space too large"))?;
            let buf = backend.allocate(&TensorSpec::contiguous(dtype, device_of, &[numel]))?;
            backend.zero(buf.data_ptr(), weight_bytes)?;
            pack_weights(backend, &a, &r, &descs, &buf, weight_bytes)?;
            buf
        }
    };
    let weight_space = usize::try_from(weight_buf.spec.numel())
        .ok()
        .and_then(|n| n.checked_mul(elem))
        .unwrap_or(weight_bytes);
    // The input, sequence-major and contiguous.
    let seq_size = [r.steps, r.batch, r.features];
    let st = &r.input.spec.stride;
    let seq_stride = if r.batch_first {
        vec![st[1], st[0], st[2]]
    } else {
        st.clone()
    };
    let dense = contiguous_strides(&seq_size);
    let x = if packed_as(&seq_size, &seq_stride, &dense) {
        backend.view(r.input, &seq_size, &dense, r.input.spec.offset)?
    } else {
        let x = backend.allocate(&TensorSpec::contiguous(dtype, device_of, &seq_size))?;
        kernels::copy_strided(backend, r.input, &seq_stride, &x)?;
        x
    };
    let y = backend.allocate(&TensorSpec::contiguous(
        dtype,
        device_of,
        &[r.steps, r.batch, out_features],
    ))?;
    let hy = backend.allocate(&TensorSpec::contiguous(dtype, device_of, &state))?;
    let cy = match r.cx {
        Some(_) => backend.allocate(&TensorSpec::contiguous(dtype, device_of, &state))?,
        None => backend.allocate(&TensorSpec::contiguous(r.hx.spec.dtype, device_of, &[0]))?,
    };
    let reserve = backend.allocate(&TensorSpec::contiguous(DType::Uint8, device_of, &[0]))?;
    let workspace = backend.workspace(work_bytes)?;
    library::submit(
        backend,
        Box::new(RnnCall {
            descs: Rc::clone(&descs),
            x: x.data_ptr(),
            y: y.data_ptr(),
            hx: r.hx.data_ptr(),
            hy: hy.data_ptr(),
            weights: weight_buf.data_ptr(),
            weight_bytes: weight_space,
            cx: r.cx.map_or(0, |c| c.data_ptr()),
            cy: if r.cx.is_some() { cy.data_ptr() } else { 0 },
            workspace: workspace.as_ref().map_or(0, |s| s.ptr),
            workspace_bytes: work_bytes,
        }),
    )?;
    drop(workspace);
    let output = if r.batch_first {
        // PyTorch's `output.transpose_(0, 1)`.
        let (n, t) = (r.batch, r.steps);
        backend.view(
            &y,
            &[n, t, out_features],
            &[out_features, n.saturating_mul(out_features), 1],
            0,
        )?
    } else {
        y
    };
    Ok(Some(Value::List(vec![
        Value::Tensor(output),
        Value::Tensor(hy),
        Value::Tensor(cy),
        Value::Tensor(reserve),
        Value::Tensor(weight_buf),
    ])))
}

/// Copies the weights of `r` into the zeroed weight space `buf`
/// (`weight_bytes` bytes) at cuDNN's offsets: for each layer and direction,
/// the input and recurrent matrices (then biases) as cuDNN places their
/// gates, which must be consecutive in PyTorch's order (PyTorch's
/// `get_parameters` checks the same).
fn pack_weights(
    backend: &mut CudaBackend,
    a: &Args<'_, CudaTensor>,
    r: &Rnn<'_>,
    descs: &Descriptors,
    buf: &CudaTensor,
    weight_bytes: usize,
) -> Result<(), ExecError> {
    let elem = buf.spec.dtype.size_bytes();
    let gates = r.cell.gates();
    let base = buf.data_ptr();
    let rows = usize::try_from(r.rows).unwrap_or(0);
    for row in 0..rows {
        let layer_input = if row < usize::try_from(r.directions).unwrap_or(1) {
            r.features
        } else {
            r.hidden * r.directions
        };
        // (index in the row, first linear id, bias, PyTorch's sizes).
        let parts = [
            (0usize, 0i64, false, vec![gates * r.hidden, layer_input]),
            (1, gates, false, vec![gates * r.hidden, r.hidden]),
            (2, 0, true, vec![gates * r.hidden]),
            (3, gates, true, vec![gates * r.hidden]),
        ];
        for (j, first, bias, size) in parts {
            if j >= r.weight_stride0 {
                continue;
            }
            let index = row * r.weight_stride0 + j;
            let w = r.weights[index];
            if w.spec.size != size {
                return Err(a.err(format!(
                    "`weight[{index}]` must have sizes {size:?} (layer {}, direction {}), got {:?}",
                    row / r.directions as usize,
                    row % r.directions as usize,
                    w.spec.size
                )));
            }
            // Each gate's place in the weight space; consecutive, in order.
            let mut start = None;
            let mut next = None;
            for id in first..first + gates {
                let (ptr, numel) = weight_param(backend, descs, base, weight_bytes, row, id, bias)?;
                let offset = ptr.checked_sub(base).map(|b| b / elem);
                if next.is_some_and(|n| Some(n) != offset) || offset.is_none() {
                    return Err(a.err(format!(
                        "cuDNN does not place the gates of `weight[{index}]` consecutively (linear id {id}); cannot copy PyTorch's layout"
                    )));
                }
                start = start.or(offset);
                next = offset.and_then(|o| o.checked_add(numel));
            }
            let (Some(start), Some(end)) = (start, next) else {
                continue;
            };
            if i64::try_from(end - start).ok() != Some(w.spec.numel()) {
                return Err(a.err(format!(
                    "cuDNN's space for `weight[{index}]` holds {} elements, the tensor {}",
                    end - start,
                    w.spec.numel()
                )));
            }
            let offset = i64::try_from(start).map_err(|_| a.err("weight offset too large"))?;
            let dst = backend.view(buf, &w.spec.size, &contiguous_strides(&w.spec.size), offset)?;
            kernels::copy_strided(backend, w, &w.spec.stride, &dst)?;
        }
    }
    Ok(())
}

/// The address and element count cuDNN gives the matrix (or bias) of
/// linear id `id` of pseudo-layer `row` in the weight space at `base`.
fn weight_param(
    backend: &CudaBackend,
    descs: &Descriptors,
    base: sys::CUdeviceptr,
    weight_bytes: usize,
    row: usize,
    id: i64,
    bias: bool,
) -> Result<(u64, u64), ExecError> {
    let handle = library::recorded_handle(backend.dnn.as_ref(), OP, "cuDNN")?;
    let desc = TensorDesc::blank()?;
    let mut addr: *mut c_void = std::ptr::null_mut();
    let (row, id) = (
        i32::try_from(row).map_err(|_| ExecError::op(OP, "too many layers"))?,
        i32::try_from(id).map_err(|_| ExecError::op(OP, "linear id"))?,
    );
    let (m_desc, m_addr, b_desc, b_addr) = if bias {
        (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            desc.raw(),
            &mut addr as *mut *mut c_void,
        )
    } else {
        (
            desc.raw(),
            &mut addr as *mut *mut c_void,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    // SAFETY: live handle and descriptor; the weight space is `weight_bytes`
    // bytes at `base` (cuDNN computes addresses in it, it reads nothing);
    // the out-pointers are live or null where the other kind is asked.
    check("cudnnGetRNNWeightParams", unsafe {
        dnn::cudnnGetRNNWeightParams(
            handle.raw(),
            descs.rnn.0,
            row,
            weight_bytes,
            base as *const c_void,
            id,
            m_desc,
            m_addr,
            b_desc,
            b_addr,
        )
    })?;
    let numel = desc
        .sizes()?
        .iter()
        .try_fold(1u64, |n, &d| u64::try_from(d).ok().and_then(|d| n.checked_mul(d)));
    let numel = numel.ok_or_else(|| ExecError::op(OP, "cuDNN gave a weight of invalid sizes"))?;
    Ok((addr as u64, numel))
}

/// The `cudnnRNNForward` call (inference) of one `_cudnn_rnn`.
#[derive(Debug)]
struct RnnCall {
    descs: Rc<Descriptors>,
    x: sys::CUdeviceptr,
    y: sys::CUdeviceptr,
    hx: sys::CUdeviceptr,
    hy: sys::CUdeviceptr,
    weights: sys::CUdeviceptr,
    weight_bytes: usize,
    /// 0 without a cell state (non-LSTM cells).
    cx: sys::CUdeviceptr,
    cy: sys::CUdeviceptr,
    /// 0 when cuDNN needs none.
    workspace: sys::CUdeviceptr,
    workspace_bytes: usize,
}

impl LibraryCall for RnnCall {
    fn op(&self) -> &str {
        OP
    }

    fn library(&self) -> &'static str {
        "cuDNN"
    }

    fn addresses(&self) -> Vec<Address> {
        library::addresses(
            &[
                (self.x, false),
                (self.y, true),
                (self.hx, false),
                (self.hy, true),
                (self.weights, false),
            ],
            &[(self.cx, false), (self.cy, true), (self.workspace, true)],
        )
    }

    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let mut it = addresses.iter().copied();
        let mut next = |old: sys::CUdeviceptr| if old == 0 { 0 } else { it.next().unwrap_or(old) };
        Box::new(RnnCall {
            descs: Rc::clone(&self.descs),
            x: next(self.x),
            y: next(self.y),
            hx: next(self.hx),
            hy: next(self.hy),
            weights: next(self.weights),
            weight_bytes: self.weight_bytes,
            cx: next(self.cx),
            cy: next(self.cy),
            workspace: next(self.workspace),
            workspace_bytes: self.workspace_bytes,
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let h = library::recorded_handle(backend.dnn.as_ref(), OP, "cuDNN")?;
        backend.device.bind()?;
        let d = &self.descs;
        let ptr = |p: sys::CUdeviceptr| p as *mut c_void;
        // SAFETY: the descriptors are live and describe the buffers passed
        // with them (sequence-major x and y, [L*D, N, H] states, a weight
        // space of `weight_bytes`, a workspace of `workspace_bytes`); a null
        // cx/cy is a zero initial cell state / no cell output (an LSTM
        // without `cx`), and non-LSTM cells get no cell descriptor, as
        // PyTorch passes them; no reserve space in inference.
        check("cudnnRNNForward", unsafe {
            dnn::cudnnRNNForward(
                h.raw(),
                d.rnn.0,
                dnn::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
                std::ptr::null(),
                d.x.0,
                ptr(self.x),
                d.y.0,
                ptr(self.y),
                d.h.raw(),
                ptr(self.hx),
                ptr(self.hy),
                d.c.as_ref().map_or(std::ptr::null_mut(), TensorDesc::raw),
                ptr(self.cx),
                ptr(self.cy),
                self.weight_bytes,
                ptr(self.weights),
                self.workspace_bytes,
                ptr(self.workspace),
                0,
                std::ptr::null_mut(),
            )
        })
        .map_err(|e| ExecError::op(OP, e.to_string()))
    }
}
