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
//! * Numerics as PyTorch's cuDNN v8 path (`Conv_v8.cpp`) runs them: one
//!   convolution node of cuDNN's graph API with f32 compute for all three
//!   dtypes, tensors declared with the byte alignment of their addresses
//!   (up to 32, PyTorch's `getAlignment`), and the first engine that
//!   cuDNN's heuristics (mode INSTANT, then the fallback list) rank and that
//!   makes a plan, after PyTorch's filter: no engine that down-converts
//!   inputs, and for fp32 no tensor-core (TF32) engine unless the program's
//!   math modes allow TF32 (`MathModes::cudnn_allow_tf32`, PyTorch's
//!   default `true`). PyTorch's choice with `cudnn.benchmark = False` and
//!   `cudnn.deterministic = False`. The plan is made once per shape, layout
//!   and alignment and cached; a call costs one `cudnnBackendExecute`. The
//!   bias is added afterwards (`cudnnAddTensor`), as PyTorch's
//!   `output.add_(bias)`. PyTorch runs fp32 NCHW depthwise convolutions on
//!   its own kernel rather than cuDNN; there the summation order differs.
//! * The workspace and any layout copies are allocations of the run, so the
//!   prepared path places them in its arena; every cuDNN call is a
//!   [`LibraryCall`] that replays and graph-captures.

use super::dnn::{DataType, DnnHandle, Scaled, TensorDesc};
use super::dnn_graph::{self, EngineFilter, HeurMode, Role};
use super::library::{self, Address, LibraryCall};
use super::{CudaBackend, CudaTensor, CudnnPlans};
use crate::exec::cuda::DeviceResult;
use crate::exec::host::conv::{format_strides, is_channels_last, packed_as, ConvParams};
use crate::exec::op::ExternOp;
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::driver::sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// The op's name in errors.
/// The op this module runs (errors name it by its key).
const OP: &str = crate::exec::op::key::CONVOLUTION;
/// The op of a convolution's layout copy, as its library call names it.
static LAYOUT_COPY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("{} (layout copy)", OP));
/// The op of a convolution's bias add, as its library call names it.
static BIAS_ADD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| format!("{} (bias add)", OP));

/// Convolution plans of one backend, by shape, layout and parameters.
#[derive(Default)]
pub(super) struct ConvCache {
    plans: HashMap<PlanKey, Rc<Plan>>,
    /// The handles that made plans ahead ([`make_ahead`]), dropped after them.
    handles: Vec<DnnHandle>,
    /// Plans made by calls (not ahead).
    made_in_calls: usize,
}

impl ConvCache {
    /// Plans made by calls rather than ahead.
    pub(crate) fn made_in_calls(&self) -> usize {
        self.made_in_calls
    }
}

/// What a plan depends on: the direction, dtype, the three packed layouts
/// and their byte alignments, and the convolution parameters, all after the
/// 1-D to 2-D expansion.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    transposed: bool,
    dtype: DType,
    /// Sizes then strides of the input, the weight and the result.
    x: Vec<i64>,
    w: Vec<i64>,
    y: Vec<i64>,
    /// Padding, stride and dilation, one entry per spatial dimension each.
    params: Vec<i64>,
    tf32: bool,
    /// Byte alignments of the input, weight and result addresses.
    alignment: [i64; 3],
}

/// What a convolution's plan follows from, before the 1-D lift.
struct ConvShape<'a> {
    dtype: DType,
    input: &'a [i64],
    weight: &'a [i64],
    output: &'a [i64],
    params: &'a ConvParams,
    /// Computed channels-last (PyTorch's suggested memory format).
    channels_last: bool,
}

impl PlanKey {
    /// The key of `shape` with TF32 allowed or not and the three addresses'
    /// byte alignments: the operands packed in the format (size-1
    /// dimensions with the format's strides, PyTorch's
    /// `fixSizeOneDimStride`), 1-D convolutions lifted to 2-D.
    fn new(shape: &ConvShape<'_>, tf32: bool, alignment: [i64; 3]) -> PlanKey {
        let one_d = shape.output.len() == 3;
        let packed = |size: &[i64]| {
            let mut size = size.to_vec();
            if one_d {
                size.insert(2, 1);
            }
            let strides = format_strides(&size, shape.channels_last);
            size.extend(strides);
            size
        };
        let lift = |v: &[i64], fill: i64| {
            let mut v = v.to_vec();
            if one_d {
                v.insert(0, fill);
            }
            v
        };
        let p = shape.params;
        PlanKey {
            transposed: p.transposed,
            dtype: shape.dtype,
            x: packed(shape.input),
            w: packed(shape.weight),
            y: packed(shape.output),
            params: [lift(&p.padding, 0), lift(&p.stride, 1), lift(&p.dilation, 1)].concat(),
            tf32,
            alignment,
        }
    }

    /// The result's sizes (after the 1-D lift).
    fn y_size(&self) -> &[i64] {
        &self.y[..self.y.len() / 2]
    }
}

/// A cuDNN execution plan of one convolution shape.
#[derive(Debug)]
struct Plan {
    key: PlanKey,
    exec: dnn_graph::Plan,
}

/// Variant-pack ids of the input, weight and result (PyTorch's).
const UIDS: [i64; 3] = [b'x' as i64, b'w' as i64, b'y' as i64];

/// The byte alignment PyTorch declares for a tensor at `ptr` (at most 32).
fn alignment(ptr: sys::CUdeviceptr) -> i64 {
    1i64 << ptr.trailing_zeros().min(5)
}

fn data_type(d: DType) -> Option<DataType> {
    match d {
        DType::Float32 => Some(DataType::CUDNN_DATA_FLOAT),
        DType::Float16 => Some(DataType::CUDNN_DATA_HALF),
        DType::Bfloat16 => Some(DataType::CUDNN_DATA_BFLOAT16),
        _ => None,
    }
}

/// A tensor operand whose layout a convolution reads: a device tensor
/// when it runs, a layout when its plan is made ahead.
trait Operand {
    fn layout(&self) -> &TensorSpec;
}

impl Operand for CudaTensor {
    fn layout(&self) -> &TensorSpec {
        &self.spec
    }
}

impl Operand for TensorSpec {
    fn layout(&self) -> &TensorSpec {
        self
    }
}

/// A parsed `aten.convolution` call.
struct Conv<'c, T> {
    input: &'c T,
    weight: &'c T,
    bias: Option<&'c T>,
    params: ConvParams,
    dtype: DType,
    /// The result's sizes.
    out_size: Vec<i64>,
    /// Computed channels-last (PyTorch's `cudnn_conv_suggest_memory_format`).
    channels_last: bool,
}

/// Whether `op` is a convolution this module runs.
fn is_convolution(op: &str) -> bool {
    runs(ExternOp::of(op))
}

/// Parses and checks a call (operand dtypes, bias size) and derives its
/// result size and memory format.
fn parse<'c, T: Operand>(a: &crate::exec::op::Args<'c, T>) -> Result<Conv<'c, T>, ExecError> {
    let input = a.tensor(0, "input")?;
    let weight = a.tensor(1, "weight")?;
    let bias = a.opt_tensor(2, "bias")?;
    let (x, w) = (input.layout(), weight.layout());
    let spatial = x.size.len().saturating_sub(2);
    let params = ConvParams::parse(a, spatial)?;
    let dtype = x.dtype;
    if w.dtype != dtype || bias.is_some_and(|b| b.layout().dtype != dtype) {
        return Err(a.err(format!(
            "operand dtypes differ: input {dtype}, weight {}{}",
            w.dtype,
            bias.map(|b| format!(", bias {}", b.layout().dtype)).unwrap_or_default()
        )));
    }
    let out_size = params.output_size(a.op, &x.size, &w.size)?;
    if let Some(b) = bias {
        if b.layout().size != [out_size[1]] {
            return Err(a.err(format!(
                "bias {:?} for {} output channels",
                b.layout().size,
                out_size[1]
            )));
        }
    }
    let channels_last = x.size.len() == out_size.len()
        && (is_channels_last(&x.size, &x.stride) || is_channels_last(&w.size, &w.stride));
    Ok(Conv {
        input,
        weight,
        bias,
        params,
        dtype,
        out_size,
        channels_last,
    })
}

impl<T: Operand> Conv<'_, T> {
    fn shape(&self) -> ConvShape<'_> {
        ConvShape {
            dtype: self.dtype,
            input: &self.input.layout().size,
            weight: &self.weight.layout().size,
            output: &self.out_size,
            params: &self.params,
            channels_last: self.channels_last,
        }
    }
}

/// Whether this module runs `op`: `aten.convolution` (the catalogue's
/// `CudaRoute::Conv`) and `aten._convolution`, which the catalogue routes
/// nowhere (its cuDNN plans are made ahead as for `aten.convolution`).
pub(crate) fn runs(op: ExternOp) -> bool {
    matches!(op, ExternOp::Convolution | ExternOp::ConvolutionInternal)
}

/// Runs `call` when it is a convolution cuDNN can take; `Ok(None)` otherwise.
pub(super) fn call(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    if !runs(call.family) {
        return Ok(None);
    }
    let a = crate::exec::op::Args::of(call);
    let conv = parse(&a)?;
    let (dtype, channels_last) = (conv.dtype, conv.channels_last);
    let Some(dt) = data_type(dtype) else {
        return Ok(None);
    };
    let out_size = conv.out_size.clone();
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
    let tf32 = dtype == DType::Float32 && backend.options.math.cudnn_allow_tf32;
    let key = PlanKey::new(
        &conv.shape(),
        tf32,
        [input.data_ptr(), weight.data_ptr(), y.data_ptr()].map(alignment),
    );
    let ys = key.y_size().to_vec();
    let yst = format_strides(&ys, channels_last);
    let handle = backend
        .dnn
        .as_ref()
        .ok_or_else(|| ExecError::op(OP, "no cuDNN handle"))?;
    let plan = match backend.conv.plans.get(&key) {
        Some(p) => Rc::clone(p),
        None => {
            let p = Rc::new(make_plan(handle, key.clone(), &backend.options.cudnn_plans)?);
            backend.conv.plans.insert(key, Rc::clone(&p));
            backend.conv.made_in_calls += 1;
            p
        }
    };
    let workspace = backend.workspace(plan.exec.workspace)?;
    library::submit(
        backend,
        Box::new(ConvCall {
            plan: Rc::clone(&plan),
            x: input.data_ptr(),
            w: weight.data_ptr(),
            y: y.data_ptr(),
            workspace: workspace.as_ref().map_or(0, |s| s.ptr),
            workspace_bytes: plan.exec.workspace,
            realigned: RefCell::new(None),
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
            Box::new(DnnCall {
                op: Scaled::Add,
                x: bias,
                x_ptr: b.data_ptr(),
                y: Rc::new(TensorDesc::new(dt, &ys, &yst)?),
                y_ptr: y.data_ptr(),
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

/// The name the plan of `key` made on `handle` has in the kernel cache and
/// among supplied plans ([`CudnnPlans`]): a digest of the key and the
/// handle's [`DnnHandle::identity`] (cuDNN, driver, GPU).
fn plan_name(handle: &DnnHandle, key: &PlanKey) -> Result<String, ExecError> {
    let identity = handle.identity()?;
    let d = super::kernels::digest(&[format!("{key:?}").as_bytes(), identity.as_bytes()]);
    Ok(format!("cudnn-conv-{:016x}{:016x}.json", d[0], d[1]))
}

/// The plan of `key`: restored from `supplied` or the kernel cache when
/// either has it (an earlier process stored it there), else made
/// ([`choose_plan`]) and, when its engine compiled kernels at run time,
/// stored in the kernel cache for later processes. A missing, unreadable or
/// refused entry only means the plan is made again, with the same engine
/// choice.
fn make_plan(handle: &DnnHandle, key: PlanKey, supplied: &CudnnPlans) -> Result<Plan, ExecError> {
    let name = plan_name(handle, &key).ok();
    let entry = handle
        .device()
        .paths
        .kernel_cache
        .as_ref()
        .zip(name.as_ref())
        .map(|(dir, name)| dir.join(name));
    let stored = name.as_deref().and_then(|n| supplied.get(n)).map(<[u8]>::to_vec);
    for json in stored.into_iter().chain(
        entry
            .as_ref()
            .and_then(|f| crate::limits::files::read(f, crate::Limits::default().max_file_bytes).ok()),
    ) {
        let _setup = super::driver::setup_lock();
        if let Ok(exec) = dnn_graph::Plan::from_json(handle, &json) {
            return Ok(Plan { key, exec });
        }
    }
    let plan = choose_plan(handle, key)?;
    if let (Some(file), true) = (&entry, plan.exec.cost.runtime_compiled) {
        // A cache that cannot be written only costs the next process the compilation.
        if let Ok(json) = plan.exec.json() {
            let _ = super::kernels::store(file, &json);
        }
    }
    Ok(plan)
}

/// The JSON form of every plan `backend` holds whose engine compiles its
/// kernels at run time (the plans worth shipping; cuDNN serializes only
/// those), by [`plan_name`], with the identity they were made for.
pub(crate) fn plan_entries(backend: &CudaBackend) -> Result<CudnnPlans, ExecError> {
    let Some(handle) = backend.dnn.as_ref().or(backend.conv.handles.first()) else {
        return Ok(CudnnPlans::default());
    };
    let mut entries = Vec::new();
    for plan in backend.conv.plans.values().filter(|p| p.exec.cost.runtime_compiled) {
        entries.push((plan_name(handle, &plan.key)?, plan.exec.json()?));
    }
    entries.sort();
    Ok(CudnnPlans::new(Some(handle.identity()?), entries))
}

/// The graph of one convolution node and its plan, chosen as PyTorch's
/// `get_configs_from_heuristics` and `try_configs` choose it.
fn choose_plan(handle: &DnnHandle, key: PlanKey) -> Result<Plan, ExecError> {
    let dt = data_type(key.dtype).ok_or_else(|| ExecError::op(OP, format!("dtype {}", key.dtype)))?;
    let mut g = dnn_graph::Graph::default();
    let mut tensor = |uid: i64, dims_strides: &[i64], alignment: i64| {
        let (dims, strides) = dims_strides.split_at(dims_strides.len() / 2);
        g.tensor(uid, dt, dims, strides, Role::MemoryAligned(alignment))
    };
    let x = tensor(UIDS[0], &key.x, key.alignment[0])?;
    let w = tensor(UIDS[1], &key.w, key.alignment[1])?;
    let y = tensor(UIDS[2], &key.y, key.alignment[2])?;
    let n = key.params.len() / 3;
    let (pad, rest) = key.params.split_at(n);
    let (stride, dil) = rest.split_at(n);
    g.convolution(key.transposed, [x, w, y], [pad, stride, dil])?;
    let filter = EngineFilter {
        no_down_convert: true,
        no_tensor_core: key.dtype == DType::Float32 && !key.tf32,
    };
    // Plan making may load kernels: never alongside a capture.
    let _setup = super::driver::setup_lock();
    let exec = g
        .plan_with(
            handle,
            &[HeurMode::CUDNN_HEUR_MODE_INSTANT, HeurMode::CUDNN_HEUR_MODE_FALLBACK],
            filter,
        )
        .map_err(|e| ExecError::op(OP, format!("no cuDNN engine for this convolution: {e}")))?;
    Ok(Plan { key, exec })
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
        Box::new(DnnCall {
            op: Scaled::Transform,
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
    /// Bytes at `workspace`.
    workspace_bytes: usize,
    /// A plan for addresses less aligned than `plan` was made for (a replay
    /// rebased onto other memory), made at its first run.
    realigned: RefCell<Option<Rc<Plan>>>,
}

impl LibraryCall for ConvCall {
    fn op(&self) -> &str {
        OP
    }

    fn library(&self) -> &'static str {
        "cuDNN"
    }

    fn addresses(&self) -> Vec<Address> {
        library::addresses(
            &[(self.x, false), (self.w, false), (self.y, true)],
            &[(self.workspace, true)],
        )
    }

    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let at = |i: usize, old: sys::CUdeviceptr| addresses.get(i).copied().unwrap_or(old);
        Box::new(ConvCall {
            plan: Rc::clone(&self.plan),
            x: at(0, self.x),
            w: at(1, self.w),
            y: at(2, self.y),
            workspace: if self.workspace != 0 { at(3, self.workspace) } else { 0 },
            workspace_bytes: self.workspace_bytes,
            realigned: RefCell::new(None),
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let h = library::recorded_handle(backend.dnn.as_ref(), OP, "cuDNN")?;
        let pointers = [self.x, self.w, self.y];
        let have = pointers.map(alignment);
        let plan = if have.iter().zip(&self.plan.key.alignment).all(|(h, want)| h >= want) {
            Rc::clone(&self.plan)
        } else {
            let cached = self.realigned.borrow().clone();
            match cached {
                Some(p) if p.key.alignment == have => p,
                _ => {
                    let p = Rc::new(make_plan(
                        h,
                        PlanKey {
                            alignment: have,
                            ..self.plan.key.clone()
                        },
                        &backend.options.cudnn_plans,
                    )?);
                    *self.realigned.borrow_mut() = Some(Rc::clone(&p));
                    p
                }
            }
        };
        if plan.exec.workspace > self.workspace_bytes {
            return Err(ExecError::op(
                OP,
                format!(
                    "the plan for these addresses needs {} bytes of workspace, the recording has {}",
                    plan.exec.workspace, self.workspace_bytes
                ),
            ));
        }
        let pointers = pointers.map(|p| p as *mut std::ffi::c_void);
        // SAFETY: the three tensors are live device memory of the layouts
        // the plan declares, and the workspace holds at least the plan's
        // bytes; all are ordered on the handle's stream.
        unsafe {
            plan.exec
                .execute(h, &UIDS, &pointers, self.workspace as *mut std::ffi::c_void)
        }
        .map_err(|e| ExecError::op(OP, e.to_string()))
    }
}

/// The other cuDNN calls of a convolution: layout copies and the bias add.
#[derive(Debug)]
struct DnnCall {
    op: Scaled,
    x: Rc<TensorDesc>,
    x_ptr: sys::CUdeviceptr,
    y: Rc<TensorDesc>,
    y_ptr: sys::CUdeviceptr,
}

impl LibraryCall for DnnCall {
    fn op(&self) -> &str {
        match self.op {
            Scaled::Transform => &LAYOUT_COPY,
            Scaled::Add => &BIAS_ADD,
        }
    }

    fn library(&self) -> &'static str {
        "cuDNN"
    }

    fn addresses(&self) -> Vec<Address> {
        library::addresses(&[(self.x_ptr, false), (self.y_ptr, true)], &[])
    }

    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let at = |i: usize, old: sys::CUdeviceptr| addresses.get(i).copied().unwrap_or(old);
        Box::new(DnnCall {
            op: self.op,
            x: Rc::clone(&self.x),
            x_ptr: at(0, self.x_ptr),
            y: Rc::clone(&self.y),
            y_ptr: at(1, self.y_ptr),
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let h = library::recorded_handle(backend.dnn.as_ref(), OP, "cuDNN")?;
        h.scaled(self.op, (&self.x, self.x_ptr), (&self.y, self.y_ptr))
            .map_err(|e| ExecError::op(OP, e.to_string()))
    }
}

/// Runs one tiny f32 convolution on `handle`'s stream (a plan made and
/// executed, then the stream drained), so that cuDNN's one-time start-up
/// (its sub-libraries and engine tables) is paid here rather than in a
/// model's first call; `x`, `w` and `y` are device buffers of at least 64,
/// 36 and 16 bytes.
pub(super) fn prime(
    handle: &DnnHandle,
    device: &super::driver::Device,
    [x, w, y]: [sys::CUdeviceptr; 3],
) -> Result<(), ExecError> {
    let (xs, ws, ys) = ([1i64, 1, 4, 4], [1i64, 1, 3, 3], [1i64, 1, 2, 2]);
    let packed = |s: &[i64]| s.iter().chain(&format_strides(s, false)).copied().collect::<Vec<i64>>();
    let key = PlanKey {
        transposed: false,
        dtype: DType::Float32,
        x: packed(&xs),
        w: packed(&ws),
        y: packed(&ys),
        params: vec![0, 0, 1, 1, 1, 1],
        tf32: false,
        alignment: [x, w, y].map(alignment),
    };
    let plan = make_plan(handle, key, &CudnnPlans::default())?;
    if plan.exec.workspace > 0 {
        // A plan that wants workspace still primed the library when it was made.
        return Ok(());
    }
    let pointers = [x, w, y].map(|p| p as *mut std::ffi::c_void);
    // SAFETY: the caller's buffers hold the three tensors' 16, 9 and 4 f32
    // elements; no workspace; all on the handle's stream, drained below.
    unsafe { plan.exec.execute(handle, &UIDS, &pointers, std::ptr::null_mut()) }
        .map_err(|e| ExecError::op(OP, e.to_string()))?;
    device.synchronize().map_err(ExecError::from)
}

/// The convolution plans a program's first call would make, found before
/// it runs ([`keys_ahead`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct PlanKeys(Vec<PlanKey>);

impl PlanKeys {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// The convolution plans `program` (compiled as `plan`) makes in its first
/// call with TF32 allowed or not, from a shapes-only run of it (declared
/// input layouts, the program's hints for unbacked sizes); why not, where
/// that run fails (e.g. a data-dependent branch).
pub(crate) fn program_keys(
    program: &crate::ir::Program,
    plan: &crate::exec::interp::Plan,
    tf32: bool,
) -> Result<PlanKeys, String> {
    let mut meta = crate::exec::meta::MetaBackend::new().log_externs(is_convolution);
    crate::exec::meta::run_plan_on(program, plan, &mut meta).map_err(|e| e.to_string())?;
    Ok(keys_ahead(&meta.take_logged_externs(), tf32))
}

/// The plan keys of the convolutions a shapes-only run logged (see
/// [`crate::exec::meta::MetaBackend::log_externs`] with [`is_convolution`]),
/// each once. Addresses are taken as the arena places them (256-byte
/// aligned storage, so a tensor's alignment follows from its offset); a
/// call whose real addresses differ makes its own plan, as without this.
/// Calls this module would not run on cuDNN, or that do not parse, are left
/// to the run to report.
fn keys_ahead(calls: &[crate::exec::meta::LoggedExtern], tf32: bool) -> PlanKeys {
    let mut keys = Vec::new();
    for call in calls.iter().filter(|c| is_convolution(&c.op)) {
        let kwargs: crate::exec::Kwargs<'_, TensorSpec> = (&call.kwargs).into();
        let args: crate::exec::ArgList<'_, TensorSpec> = call.args.as_slice().into();
        let a = crate::exec::op::Args {
            op: &call.op,
            args: &args,
            kwargs: &kwargs,
        };
        let Ok(conv) = parse(&a) else { continue };
        if data_type(conv.dtype).is_none() || conv.out_size.contains(&0) || conv.input.numel() == 0 {
            continue;
        }
        let result = match (call.kwargs.get("out"), &call.result) {
            (Some(Value::Tensor(out)), _) | (_, Value::Tensor(out)) => out,
            _ => continue,
        };
        // Where a packed copy is made, it starts a fresh allocation.
        let at = |t: &TensorSpec, strides: Vec<i64>| {
            if packed_as(&t.size, &t.stride, &strides) {
                (t.offset.max(0) as u64).saturating_mul(t.dtype.size_bytes())
            } else {
                0
            }
        };
        let dense = |t: &TensorSpec| format_strides(&t.size, conv.channels_last && t.size.len() >= 4);
        let alignment = [
            at(conv.input, dense(conv.input)),
            at(conv.weight, dense(conv.weight)),
            at(result, format_strides(&conv.out_size, conv.channels_last)),
        ]
        .map(alignment);
        let key = PlanKey::new(&conv.shape(), conv.dtype == DType::Float32 && tf32, alignment);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    PlanKeys(keys)
}

/// Plans made on a worker thread, with the handle that made them.
pub(crate) struct MadePlans {
    /// Kept for as long as its plans (their engines' compiled kernels may be
    /// the handle's).
    handle: DnnHandle,
    plans: Vec<Plan>,
    failed: Vec<String>,
}

// SAFETY: a worker makes these with a handle and descriptors of its own and
// hands them over once, finished; the receiving backend then uses them from
// one thread at a time. cuDNN handles and descriptors may move between
// threads when not used concurrently (PyTorch's thread-local plan caches
// guard against concurrent use only).
unsafe impl Send for MadePlans {}

/// How making plans ahead went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlansAhead {
    /// Plans made.
    pub made: usize,
    /// Plans that failed, with why (the call that needs one makes it again
    /// and reports the error).
    pub failed: Vec<String>,
    /// Worker threads used.
    pub threads: usize,
    /// Plans the load's warm-up call still made itself (`None`: no warm-up
    /// ran): calls the shapes-only run did not foresee, e.g. an operand at
    /// an address less aligned than the arena's.
    pub made_by_warm_up: Option<usize>,
    /// Wall time of the whole.
    pub time: std::time::Duration,
    /// Summed over the plans made: finalizing their graphs and querying
    /// cuDNN's heuristics.
    pub heuristics: std::time::Duration,
    /// Summed likewise: finalizing execution plans, where engines compile
    /// their kernels.
    pub finalize: std::time::Duration,
    /// Plans whose engine compiles its kernels at run time.
    pub runtime_compiled: usize,
    /// Of those, the ones restored from the kernel cache
    /// ([`super::CudaPaths::kernel_cache`]) instead of compiled.
    pub restored: usize,
}

/// Makes the plans of `keys` (restoring those `supplied` has) on up to
/// `threads` worker threads, each with its own stream and cuDNN handle in
/// device `ordinal`'s primary context.
pub(crate) fn make_ahead(
    ordinal: usize,
    paths: &Arc<super::CudaPaths>,
    keys: &PlanKeys,
    threads: usize,
    supplied: &CudnnPlans,
) -> (Vec<MadePlans>, PlansAhead) {
    let started = std::time::Instant::now();
    let threads = threads.min(keys.0.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut report = PlansAhead {
        threads,
        ..PlansAhead::default()
    };
    let made: Vec<Result<MadePlans, String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let next = &next;
                scope.spawn(move || -> Result<MadePlans, String> {
                    let device = super::driver::Device::open(ordinal, Arc::clone(paths)).map_err(|e| e.to_string())?;
                    let handle = DnnHandle::new(&device).map_err(|e| e.to_string())?;
                    let (mut plans, mut failed) = (Vec::new(), Vec::new());
                    while let Some(key) = keys.0.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        match make_plan(&handle, key.clone(), supplied) {
                            Ok(p) => plans.push(p),
                            Err(e) => failed.push(e.to_string()),
                        }
                    }
                    Ok(MadePlans { handle, plans, failed })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a plan-making thread panicked".into())))
            .collect()
    });
    let mut out = Vec::new();
    for m in made {
        match m {
            Ok(m) => {
                report.made += m.plans.len();
                for p in &m.plans {
                    report.heuristics += p.exec.cost.heuristics;
                    report.finalize += p.exec.cost.finalize;
                    report.runtime_compiled += usize::from(p.exec.cost.runtime_compiled);
                    report.restored += usize::from(p.exec.cost.restored);
                }
                report.failed.extend(m.failed.iter().cloned());
                out.push(m);
            }
            Err(e) => report.failed.push(e),
        }
    }
    report.time = started.elapsed();
    (out, report)
}

/// Gives `backend` the plans made ahead (a plan it already has stays).
pub(crate) fn adopt_ahead(backend: &mut CudaBackend, made: Vec<MadePlans>) {
    for m in made {
        for plan in m.plans {
            backend
                .conv
                .plans
                .entry(plan.key.clone())
                .or_insert_with(|| Rc::new(plan));
        }
        backend.conv.handles.push(m.handle);
    }
}
