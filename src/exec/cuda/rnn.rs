//! `aten._cudnn_rnn` (the op eager PyTorch runs `nn.LSTM`, `nn.GRU` and
//! `nn.RNN` on for CUDA tensors, and an extern call of Inductor's fallback)
//! on cuDNN's RNN API, as PyTorch's cuDNN v8 path
//! (`aten/src/ATen/native/cudnn/RNN.cpp`, `_cudnn_rnn`) runs it in
//! inference.
//!
//! The call's arguments are read and checked by `exec::op::rnn` (what it
//! takes and refuses is documented there); this module makes the cuDNN
//! call:
//!
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
//! The one cuDNN call ([`RnnCall`]) is a [`LibraryCall`] that the prepared
//! path and CUDA graphs replay; the weight copies are the built-in
//! strided-copy kernel.

use super::dnn::{check, cudnn_descriptor, DataType, DnnHandle, TensorDesc};
use super::library::{self, Address, LibraryCall};
use super::{kernels, CudaBackend, CudaTensor};
use crate::exec::host::conv::packed_as;
use crate::exec::op::rnn::{parse, Cell, CudnnRnn};
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

/// cuDNN's mode of a cell kind.
fn mode(cell: Cell) -> dnn::cudnnRNNMode_t {
    match cell {
        Cell::Relu => dnn::cudnnRNNMode_t::CUDNN_RNN_RELU,
        Cell::Tanh => dnn::cudnnRNNMode_t::CUDNN_RNN_TANH,
        Cell::Lstm => dnn::cudnnRNNMode_t::CUDNN_LSTM,
        Cell::Gru => dnn::cudnnRNNMode_t::CUDNN_GRU,
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

type Rnn<'c> = CudnnRnn<'c, CudaTensor>;

fn int(a: &Args<'_, CudaTensor>, v: i64, what: &str) -> Result<i32, ExecError> {
    i32::try_from(v).map_err(|_| a.err(format!("{what} {v} does not fit cuDNN's int")))
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

cudnn_descriptor! {
    /// A dropout descriptor of probability 0 (PyTorch's `set_no_dropout`).
    struct DropoutDesc(dnn::cudnnDropoutDescriptor_t),
    cudnnCreateDropoutDescriptor,
    cudnnDestroyDropoutDescriptor
}

impl DropoutDesc {
    fn none(handle: &DnnHandle) -> Result<DropoutDesc, ExecError> {
        let desc = DropoutDesc::create()?;
        // SAFETY: live descriptor and handle; no state is needed at probability 0.
        check("cudnnSetDropoutDescriptor", unsafe {
            dnn::cudnnSetDropoutDescriptor(desc.0, handle.raw(), 0.0, std::ptr::null_mut(), 0, 0)
        })?;
        Ok(desc)
    }
}

cudnn_descriptor! {
    /// An RNN descriptor.
    struct RnnDesc(dnn::cudnnRNNDescriptor_t),
    cudnnCreateRNNDescriptor,
    cudnnDestroyRNNDescriptor
}

cudnn_descriptor! {
    /// A sequence data descriptor (sequence-major, unpacked, every sequence full length).
    struct DataDesc(dnn::cudnnRNNDataDescriptor_t),
    cudnnCreateRNNDataDescriptor,
    cudnnDestroyRNNDataDescriptor
}

impl DataDesc {
    fn new(dtype: DataType, steps: i32, batch: i32, vector: i32) -> Result<DataDesc, ExecError> {
        let desc = DataDesc::create()?;
        let raw = desc.0;
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
    let r = parse(&a, |t: &CudaTensor| &t.spec)?;
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
    let out_features = r.out_features;
    if backend.dnn.is_none() {
        backend.dnn = Some(DnnHandle::new(&backend.device)?);
    }
    let handle = backend.dnn.as_ref().ok_or_else(|| a.err("no cuDNN handle"))?;
    let dropout = DropoutDesc::none(handle)?;
    let rnn = RnnDesc::create()?;
    // SAFETY: live descriptors; every value is one of the enums' or a checked int.
    check("cudnnSetRNNDescriptor_v8", unsafe {
        dnn::cudnnSetRNNDescriptor_v8(
            rnn.0,
            algo,
            mode(r.cell),
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
    let state = r.state_size();
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
    let seq_stride = r.sequence_major_strides(&r.input.spec);
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
    // PyTorch's layout (transposed for `batch_first`).
    let (size, stride) = r.output_layout();
    let output = backend.view(&y, &size, &stride, 0)?;
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
        // (index in the row, first linear id, bias); the sizes were checked
        // by `parse`.
        let parts = [(0usize, 0i64, false), (1, gates, false), (2, 0, true), (3, gates, true)];
        for (j, first, bias) in parts {
            if j >= r.weight_stride0 {
                continue;
            }
            let index = row * r.weight_stride0 + j;
            let w = r.weights[index];
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
