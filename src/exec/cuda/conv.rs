//! `aten.convolution` (Inductor's `extern_kernels.convolution`) on cuDNN, as
//! PyTorch's cuDNN backend runs it.
//!
//! * 1-D, 2-D and 3-D; stride, padding, dilation, groups (depthwise
//!   included); transposed convolutions (cuDNN's backward-data) with
//!   `output_padding`; optional bias; f32, f16, bf16.
//! * Memory format as PyTorch's `cudnn_conv_suggest_memory_format` picks
//!   it: channels-last when the input or the weight is channels-last (4-D
//!   and 5-D), else contiguous. An input or weight not packed in that format
//!   is copied into it first (`cudnnTransformTensor`, as PyTorch's
//!   `.contiguous(format)`); the result is computed packed in the format and
//!   written into the layout the program declares for it (or `out=`),
//!   through one more transform when the two differ. 1-D convolutions run as
//!   2-D ones of height 1, as in PyTorch.
//! * Numerics: accumulation in f32 (`CUDNN_DATA_FLOAT` compute type for
//!   all three dtypes); fp32 convolutions may use TF32 only when the
//!   program's math modes allow it (`MathModes::cudnn_allow_tf32`, PyTorch's
//!   default `true`), else `CUDNN_FMA_MATH`; the algorithm is the first
//!   working one cuDNN's heuristics return (PyTorch's choice with
//!   `cudnn.benchmark = False`), chosen once per shape and layout and
//!   cached. The bias is added afterwards (`cudnnAddTensor`), as PyTorch's
//!   `output.add_(bias)`. PyTorch runs fp32 NCHW depthwise convolutions on
//!   its own kernel rather than cuDNN; there the summation order differs.
//! * The workspace and any layout copies are allocations of the run, so the
//!   prepared path places them in its arena; every cuDNN call is a
//!   [`LibraryCall`] that replays and graph-captures.

use super::dnn::{self, ConvDesc, DataType, DnnHandle, FilterDesc, Format, MathType, TensorDesc};
use super::library::{self, Address, LibraryCall};
use super::{op_key, CudaBackend, CudaTensor};
use crate::exec::conv::{format_strides, is_channels_last, packed_as, ConvParams};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// The op's name in errors.
const OP: &str = "aten.convolution";

/// Convolution plans of one backend, by shape, layout and parameters.
#[derive(Default)]
pub(super) struct ConvCache {
    plans: HashMap<PlanKey, Rc<Plan>>,
}

/// What a plan depends on: the direction, dtype, the three packed layouts
/// and the convolution parameters, all after the 1-D to 2-D expansion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    transposed: bool,
    dtype: DType,
    channels_last: bool,
    x: Vec<i64>,
    w: Vec<i64>,
    y: Vec<i64>,
    params: Vec<i64>,
    tf32: bool,
}

/// Descriptors and the chosen algorithm of one convolution shape.
#[derive(Debug)]
struct Plan {
    x: TensorDesc,
    w: FilterDesc,
    y: TensorDesc,
    conv: ConvDesc,
    algo: Algo,
    workspace: usize,
}

#[derive(Clone, Copy, Debug)]
enum Algo {
    Forward(dnn::FwdAlgo),
    BackwardData(dnn::BwdDataAlgo),
}

fn data_type(d: DType) -> Option<DataType> {
    match d {
        DType::Float32 => Some(DataType::CUDNN_DATA_FLOAT),
        DType::Float16 => Some(DataType::CUDNN_DATA_HALF),
        DType::Bfloat16 => Some(DataType::CUDNN_DATA_BFLOAT16),
        _ => None,
    }
}

/// A parsed `aten.convolution` call.
struct Conv<'c> {
    input: &'c CudaTensor,
    weight: &'c CudaTensor,
    bias: Option<&'c CudaTensor>,
    params: ConvParams,
}

type Args<'c> = crate::exec::ops::Args<'c, CudaTensor>;

fn parse<'c>(a: &Args<'c>) -> Result<Conv<'c>, ExecError> {
    let input = a.tensor(0, "input")?;
    let weight = a.tensor(1, "weight")?;
    let bias = match a.get(2, "bias") {
        Some(Value::Tensor(t)) => Some(t),
        None => None,
        Some(v) => return Err(a.err(format!("`bias` must be a tensor or None, got {}", v.kind()))),
    };
    let spatial = input.spec.size.len().saturating_sub(2);
    Ok(Conv {
        input,
        weight,
        bias,
        params: ConvParams::parse(a, spatial)?,
    })
}

/// Inserts a height-1 dimension at index 2 (1-D convolutions run as 2-D).
fn expand_1d(size: &[i64], stride: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let mut s = size.to_vec();
    let mut st = stride.to_vec();
    s.insert(2, 1);
    st.insert(2, stride[2].saturating_mul(size[2].max(1)));
    (s, st)
}

/// Runs `call` when it is a convolution cuDNN can take; `Ok(None)` otherwise.
pub(super) fn call(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
) -> Result<Option<Value<CudaTensor>>, ExecError> {
    if !matches!(op_key(call.op).as_str(), "aten.convolution" | "aten._convolution") {
        return Ok(None);
    }
    let a = Args {
        op: call.op,
        args: &call.args,
        kwargs: &call.kwargs,
    };
    let conv = parse(&a)?;
    let dtype = conv.input.spec.dtype;
    if conv.weight.spec.dtype != dtype || conv.bias.is_some_and(|b| b.spec.dtype != dtype) {
        return Err(a.err(format!(
            "operand dtypes differ: input {dtype}, weight {}{}",
            conv.weight.spec.dtype,
            conv.bias
                .map(|b| format!(", bias {}", b.spec.dtype))
                .unwrap_or_default()
        )));
    }
    let Some(dt) = data_type(dtype) else {
        return Ok(None);
    };
    let out_size = conv
        .params
        .output_size(call.op, &conv.input.spec.size, &conv.weight.spec.size)?;
    if let Some(b) = conv.bias {
        if b.spec.size != [out_size[1]] {
            return Err(a.err(format!("bias {:?} for {} output channels", b.spec.size, out_size[1])));
        }
    }
    let declared = match call.kwargs.get("out") {
        Some(Value::Tensor(out)) => Some(out.clone()),
        _ => None,
    };
    if let Some(out) = &declared {
        if out.spec.size != out_size || out.spec.dtype != dtype {
            return Err(a.err(format!(
                "`out` is {}{:?}, the convolution gives {dtype}{out_size:?}",
                out.spec.dtype, out.spec.size
            )));
        }
    }
    let rank = out_size.len();
    let channels_last = (conv.input.spec.size.len() == rank)
        && (is_channels_last(&conv.input.spec.size, &conv.input.spec.stride)
            || is_channels_last(&conv.weight.spec.size, &conv.weight.spec.stride));
    // The result: the declared layout, else the format's.
    let result = match declared.clone() {
        Some(out) => out,
        None => {
            let spec = call
                .expected
                .and_then(|e| e.concrete())
                .filter(|s| s.size == out_size && s.dtype == dtype)
                .unwrap_or_else(|| TensorSpec {
                    dtype,
                    device: conv.input.spec.device,
                    stride: format_strides(&out_size, channels_last),
                    size: out_size.clone(),
                    offset: 0,
                });
            backend.allocate(&spec)?
        }
    };
    if out_size.contains(&0) || conv.input.spec.numel() == 0 {
        return Ok(Some(if declared.is_some() {
            Value::None
        } else {
            Value::Tensor(result)
        }));
    }
    if backend.dnn.is_none() {
        backend.dnn = Some(DnnHandle::new(&backend.device)?);
    }
    let input = packed(backend, conv.input, channels_last)?;
    let weight = packed(backend, conv.weight, channels_last)?;
    let y_strides = format_strides(&out_size, channels_last);
    let y = if packed_as(&result.spec.size, &result.spec.stride, &y_strides) {
        result.clone()
    } else {
        backend.allocate(&TensorSpec {
            stride: y_strides,
            offset: 0,
            ..result.spec.clone()
        })?
    };
    let one_d = rank == 3;
    let lift = |t: &CudaTensor| {
        if one_d {
            expand_1d(&t.spec.size, &t.spec.stride)
        } else {
            (t.spec.size.clone(), t.spec.stride.clone())
        }
    };
    let ((xs, xst), (ws, _), (ys, yst)) = (lift(&input), lift(&weight), lift(&y));
    let lift_param = |v: &[i64], fill: i64| {
        let mut v = v.to_vec();
        if one_d {
            v.insert(0, fill);
        }
        v
    };
    let (pad, stride, dil) = (
        lift_param(&conv.params.padding, 0),
        lift_param(&conv.params.stride, 1),
        lift_param(&conv.params.dilation, 1),
    );
    let tf32 = dtype == DType::Float32 && backend.options.math.cudnn_allow_tf32;
    let key = PlanKey {
        transposed: conv.params.transposed,
        dtype,
        channels_last,
        x: xs.iter().chain(&xst).copied().collect(),
        w: ws.clone(),
        y: ys.iter().chain(&yst).copied().collect(),
        params: pad
            .iter()
            .chain(&stride)
            .chain(&dil)
            .copied()
            .chain([conv.params.groups])
            .collect(),
        tf32,
    };
    let plan = match backend.conv.plans.get(&key) {
        Some(p) => Rc::clone(p),
        None => {
            // Algorithm search runs kernels and may load modules.
            let _setup = super::driver::setup_lock();
            let p = Rc::new(make_plan(
                backend,
                &key,
                dt,
                (&xs, &xst),
                &ws,
                (&ys, &yst),
                (&pad, &stride, &dil),
                conv.params.groups,
            )?);
            backend.conv.plans.insert(key, Rc::clone(&p));
            p
        }
    };
    let workspace = backend.workspace(plan.workspace)?;
    library::submit(
        backend,
        Box::new(ConvCall {
            plan: Rc::clone(&plan),
            x: input.data_ptr(),
            w: weight.data_ptr(),
            y: y.data_ptr(),
            workspace: workspace.as_ref().map_or(0, |s| s.ptr),
        }),
    )?;
    if let Some(b) = conv.bias {
        let mut size = vec![1i64; ys.len()];
        size[1] = out_size[1];
        let mut bstride = vec![0i64; ys.len()];
        bstride[1] = b.spec.stride[0];
        bstride[0] = b.spec.stride[0].saturating_mul(out_size[1]);
        for s in bstride.iter_mut().skip(2) {
            *s = 1;
        }
        let bias = Rc::new(TensorDesc::new(dt, &size, &bstride)?);
        library::submit(
            backend,
            Box::new(DnnCall::Add {
                a: bias,
                a_ptr: b.data_ptr(),
                c: Rc::new(TensorDesc::new(dt, &ys, &yst)?),
                c_ptr: y.data_ptr(),
            }),
        )?;
    }
    if !Arc::ptr_eq(&y.storage, &result.storage) {
        transform(backend, &y, &result, dt)?;
    }
    drop(workspace);
    Ok(Some(if declared.is_some() {
        Value::None
    } else {
        Value::Tensor(result)
    }))
}

#[allow(clippy::too_many_arguments)]
fn make_plan(
    backend: &CudaBackend,
    key: &PlanKey,
    dt: DataType,
    x: (&[i64], &[i64]),
    w: &[i64],
    y: (&[i64], &[i64]),
    (pad, stride, dil): (&[i64], &[i64], &[i64]),
    groups: i64,
) -> Result<Plan, ExecError> {
    let handle = backend
        .dnn
        .as_ref()
        .ok_or_else(|| ExecError::op(OP, "no cuDNN handle"))?;
    let format = if key.channels_last {
        Format::CUDNN_TENSOR_NHWC
    } else {
        Format::CUDNN_TENSOR_NCHW
    };
    let (xd, yd) = (TensorDesc::new(dt, x.0, x.1)?, TensorDesc::new(dt, y.0, y.1)?);
    let wd = FilterDesc::new(dt, format, w)?;
    // PyTorch's math types: fp32 FMA only unless TF32 is allowed; half
    // types on tensor cores; accumulation in f32 for all.
    let (math, keep) = match key.dtype {
        DType::Float32 if key.tf32 => (MathType::CUDNN_DEFAULT_MATH, None),
        DType::Float32 => (MathType::CUDNN_FMA_MATH, Some(MathType::CUDNN_FMA_MATH)),
        _ => (MathType::CUDNN_TENSOR_OP_MATH, None),
    };
    let cd = ConvDesc::new(pad, stride, dil, groups, DataType::CUDNN_DATA_FLOAT, math)?;
    let (algo, workspace) = if key.transposed {
        let c = handle.backward_data_algo(&wd, &xd, &cd, &yd, keep)?;
        (Algo::BackwardData(c.algo), c.workspace)
    } else {
        let c = handle.forward_algo(&xd, &wd, &cd, &yd, keep)?;
        (Algo::Forward(c.algo), c.workspace)
    };
    Ok(Plan {
        x: xd,
        w: wd,
        y: yd,
        conv: cd,
        algo,
        workspace,
    })
}

/// `t` itself when it is packed in the format, else a packed copy.
fn packed(backend: &mut CudaBackend, t: &CudaTensor, channels_last: bool) -> Result<CudaTensor, ExecError> {
    let dense = format_strides(&t.spec.size, channels_last && t.spec.size.len() >= 4);
    if packed_as(&t.spec.size, &t.spec.stride, &dense) {
        return Ok(t.clone());
    }
    let copy = backend.allocate(&TensorSpec {
        stride: dense,
        offset: 0,
        ..t.spec.clone()
    })?;
    let dt = data_type(t.spec.dtype).ok_or_else(|| ExecError::op(OP, format!("dtype {}", t.spec.dtype)))?;
    transform(backend, t, &copy, dt)?;
    Ok(copy)
}

/// Copies `src` into `dst` (same sizes, any layouts) with cuDNN.
fn transform(backend: &mut CudaBackend, src: &CudaTensor, dst: &CudaTensor, dt: DataType) -> Result<(), ExecError> {
    if backend.dnn.is_none() {
        backend.dnn = Some(DnnHandle::new(&backend.device)?);
    }
    // cuDNN descriptors need at least 4 dimensions: pad with leading ones.
    let pad = |t: &CudaTensor| {
        let (mut s, mut st) = (t.spec.size.clone(), t.spec.stride.clone());
        while s.len() < 4 {
            s.insert(0, 1);
            st.insert(
                0,
                st.first()
                    .copied()
                    .unwrap_or(1)
                    .saturating_mul(s.get(1).copied().unwrap_or(1).max(1)),
            );
        }
        (s, st)
    };
    let ((xs, xst), (ys, yst)) = (pad(src), pad(dst));
    library::submit(
        backend,
        Box::new(DnnCall::Transform {
            x: Rc::new(TensorDesc::new(dt, &xs, &xst)?),
            x_ptr: src.data_ptr(),
            y: Rc::new(TensorDesc::new(dt, &ys, &yst)?),
            y_ptr: dst.data_ptr(),
        }),
    )
}

/// The convolution itself as a replayable call.
#[derive(Debug)]
struct ConvCall {
    plan: Rc<Plan>,
    x: sys::CUdeviceptr,
    w: sys::CUdeviceptr,
    y: sys::CUdeviceptr,
    workspace: sys::CUdeviceptr,
}

impl LibraryCall for ConvCall {
    fn op(&self) -> &str {
        OP
    }

    fn library(&self) -> &'static str {
        "cuDNN"
    }

    fn addresses(&self) -> Vec<Address> {
        let mut v = vec![
            Address {
                ptr: self.x,
                writes: false,
            },
            Address {
                ptr: self.w,
                writes: false,
            },
            Address {
                ptr: self.y,
                writes: true,
            },
        ];
        if self.workspace != 0 {
            v.push(Address {
                ptr: self.workspace,
                writes: true,
            });
        }
        v
    }

    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let at = |i: usize, old: sys::CUdeviceptr| addresses.get(i).copied().unwrap_or(old);
        Box::new(ConvCall {
            plan: Rc::clone(&self.plan),
            x: at(0, self.x),
            w: at(1, self.w),
            y: at(2, self.y),
            workspace: if self.workspace != 0 { at(3, self.workspace) } else { 0 },
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let h = backend
            .dnn
            .as_ref()
            .ok_or_else(|| ExecError::op(OP, "no cuDNN handle (the recorded run created one)"))?;
        let p = &*self.plan;
        let ws = (self.workspace, p.workspace);
        match p.algo {
            Algo::Forward(algo) => h.forward((&p.x, self.x), (&p.w, self.w), &p.conv, algo, ws, (&p.y, self.y)),
            Algo::BackwardData(algo) => {
                h.backward_data((&p.w, self.w), (&p.x, self.x), &p.conv, algo, ws, (&p.y, self.y))
            }
        }
        .map_err(|e| ExecError::op(OP, e.to_string()))
    }
}

/// The other cuDNN calls of a convolution: layout copies and the bias add.
#[derive(Debug)]
enum DnnCall {
    Transform {
        x: Rc<TensorDesc>,
        x_ptr: sys::CUdeviceptr,
        y: Rc<TensorDesc>,
        y_ptr: sys::CUdeviceptr,
    },
    Add {
        a: Rc<TensorDesc>,
        a_ptr: sys::CUdeviceptr,
        c: Rc<TensorDesc>,
        c_ptr: sys::CUdeviceptr,
    },
}

impl LibraryCall for DnnCall {
    fn op(&self) -> &str {
        OP
    }

    fn library(&self) -> &'static str {
        "cuDNN"
    }

    fn addresses(&self) -> Vec<Address> {
        let (from, to) = match self {
            DnnCall::Transform { x_ptr, y_ptr, .. } => (*x_ptr, *y_ptr),
            DnnCall::Add { a_ptr, c_ptr, .. } => (*a_ptr, *c_ptr),
        };
        vec![
            Address {
                ptr: from,
                writes: false,
            },
            Address { ptr: to, writes: true },
        ]
    }

    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let at = |i: usize, old: sys::CUdeviceptr| addresses.get(i).copied().unwrap_or(old);
        Box::new(match self {
            DnnCall::Transform { x, x_ptr, y, y_ptr } => DnnCall::Transform {
                x: Rc::clone(x),
                x_ptr: at(0, *x_ptr),
                y: Rc::clone(y),
                y_ptr: at(1, *y_ptr),
            },
            DnnCall::Add { a, a_ptr, c, c_ptr } => DnnCall::Add {
                a: Rc::clone(a),
                a_ptr: at(0, *a_ptr),
                c: Rc::clone(c),
                c_ptr: at(1, *c_ptr),
            },
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let h = backend
            .dnn
            .as_ref()
            .ok_or_else(|| ExecError::op(OP, "no cuDNN handle (the recorded run created one)"))?;
        match self {
            DnnCall::Transform { x, x_ptr, y, y_ptr } => h.transform((x, *x_ptr), (y, *y_ptr)),
            DnnCall::Add { a, a_ptr, c, c_ptr } => h.add((a, *a_ptr), (c, *c_ptr)),
        }
        .map_err(|e| ExecError::op(OP, e.to_string()))
    }
}
