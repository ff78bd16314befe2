//! `_scaled_dot_product_cudnn_attention` in f16 / bf16 on cuDNN's fused
//! attention, through the graph API with the graph PyTorch's cuDNN attention
//! builds (cuDNN frontend's composite SDPA node): `S = Q K^T` (fp32), `S *=
//! scale`, `+ bias`, the causal mask (`row >= col`, top-left aligned), the
//! softmax as max / sub / exp / sum / div (the log-sum-exp `max + log(sum)`
//! when the program asks for it), `P` rounded to the input type, `O = P V`.
//! cuDNN's heuristics (mode A) pick the engine, so on the same device and
//! library the results are PyTorch's.
//!
//! Plans are made once per shape and layout. A shape cuDNN has no engine
//! for is remembered as such and runs on the project's own flash kernel
//! (`attention.rs`), which the op log names.

use super::dnn::DnnHandle;
use super::dnn_graph::{DataType, Graph, Plan, Pointwise, Reduce, Role};
use super::driver::CudaError;
use super::library::{self, Address, LibraryCall};
use super::{CudaBackend, CudaTensor};
use crate::exec::host::attention::Call;
use crate::exec::op::{key, target};
use crate::exec::ExecError;
use crate::ir::DType;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::rc::Rc;

/// The op as errors name it (`torch.ops.aten._scaled_dot_product_cudnn_attention.default`).
static OP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| target(key::SDPA_CUDNN, "default"));

const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const STATS: i64 = 5;
const BIAS: i64 = 6;
const SCALE: i64 = 7;
const NEG_INF: i64 = 8;

/// What a plan depends on: dtype, sizes and strides of every tensor, the mask.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    bf16: bool,
    q: [i64; 8],
    k: [i64; 8],
    v: [i64; 8],
    o: [i64; 8],
    bias: Option<[i64; 8]>,
    stats: Option<[i64; 8]>,
    causal: bool,
}

/// Plans by shape; `None` where cuDNN offered no engine.
#[derive(Debug, Default)]
pub(super) struct SdpaCache {
    plans: HashMap<Key, Option<Rc<Plan>>>,
}

/// `size ++ stride` of a 4-d tensor, size-1 dimensions with stride 0 given
/// the stride of a packed layout (PyTorch's `fixSizeOneDimStrideSDPA`).
fn layout(size: &[i64], stride: &[i64]) -> [i64; 8] {
    let mut out = [0i64; 8];
    for d in 0..4 {
        out[d] = size[d];
        out[4 + d] = stride[d];
    }
    for d in 0..4 {
        if out[d] == 1 && out[4 + d] == 0 {
            out[4 + d] = (d + 1..4).map(|j| out[4 + j].max(1)).product::<i64>().max(1);
        }
    }
    out
}

/// The bias as cuDNN takes it: broadcast batch and head dimensions (stride
/// 0) become size 1.
fn bias_layout(dims: [i64; 4], strides: [i64; 4]) -> [i64; 8] {
    let mut size = dims;
    for d in 0..4 {
        if strides[d] == 0 {
            size[d] = 1;
        }
    }
    layout(&size, &strides)
}

/// Runs the op on cuDNN; `Ok(false)` when cuDNN has no engine for the
/// shape (the caller runs its own kernel).
pub(super) fn run(
    backend: &mut CudaBackend,
    call: &Call<'_, CudaTensor>,
    out: &CudaTensor,
    lse: &CudaTensor,
) -> Result<bool, ExecError> {
    let bf16 = match call.q.spec.dtype {
        DType::Bfloat16 => true,
        DType::Float16 => false,
        _ => return Ok(false),
    };
    let d = call.dims;
    if d.b == 0 || d.h == 0 || d.l == 0 || d.s == 0 || d.hk == 0 || d.h % d.hk != 0 {
        return Ok(false);
    }
    let key = Key {
        bf16,
        q: layout(&call.q.spec.size, &call.q.spec.stride),
        k: layout(&call.k.spec.size, &call.k.spec.stride),
        v: layout(&call.v.spec.size, &call.v.spec.stride),
        o: layout(&out.spec.size, &out.spec.stride),
        bias: call.bias.map(|(_, strides)| bias_layout([d.b, d.h, d.l, d.s], strides)),
        stats: call.compute_lse.then(|| {
            let mut size = lse.spec.size.clone();
            let mut stride = lse.spec.stride.clone();
            size.resize(4, 1);
            stride.resize(4, 1);
            layout(&size, &stride)
        }),
        causal: call.causal,
    };
    if backend.dnn.is_none() {
        backend.dnn = Some(DnnHandle::new(&backend.device)?);
    }
    let plan = match backend.sdpa.plans.get(&key) {
        Some(p) => p.clone(),
        None => {
            let handle = backend
                .dnn
                .as_ref()
                .ok_or_else(|| ExecError::op(&OP, "no cuDNN handle"))?;
            let built = {
                let _setup = super::driver::setup_lock();
                build(&key, handle)
            };
            let p = match built {
                Ok(p) => Some(Rc::new(p)),
                Err(CudaError::Dnn { .. }) => None,
                Err(e) => return Err(ExecError::op(&OP, e.to_string())),
            };
            backend.sdpa.plans.insert(key.clone(), p.clone());
            p
        }
    };
    let Some(plan) = plan else {
        return Ok(false);
    };
    let workspace = backend.workspace(plan.workspace)?;
    library::submit(
        backend,
        Box::new(SdpaCall {
            plan: Rc::clone(&plan),
            q: call.q.data_ptr(),
            k: call.k.data_ptr(),
            v: call.v.data_ptr(),
            o: out.data_ptr(),
            stats: if key.stats.is_some() { lse.data_ptr() } else { 0 },
            bias: call.bias.map_or(0, |(t, _)| t.data_ptr()),
            workspace: workspace.as_ref().map_or(0, |s| s.ptr),
            scale: call.scale as f32,
            causal: key.causal,
        }),
    )?;
    drop(workspace);
    Ok(true)
}

/// Builds and plans the graph for `key`.
fn build(key: &Key, handle: &DnnHandle) -> Result<Plan, CudaError> {
    let io = if key.bf16 {
        DataType::CUDNN_DATA_BFLOAT16
    } else {
        DataType::CUDNN_DATA_HALF
    };
    let f32_ = DataType::CUDNN_DATA_FLOAT;
    let split = |l: &[i64; 8]| (l[..4].to_vec(), l[4..].to_vec());
    let mut g = Graph::default();
    let (qs, qt) = split(&key.q);
    let q = g.tensor(Q, io, &qs, &qt, Role::Memory)?;
    // K enters Q K^T transposed: [b, hk, e, s].
    let (mut ks, mut kt) = split(&key.k);
    ks.swap(2, 3);
    kt.swap(2, 3);
    let k = g.tensor(K, io, &ks, &kt, Role::Memory)?;
    let (vs, vt) = split(&key.v);
    let v = g.tensor(V, io, &vs, &vt, Role::Memory)?;
    let (b, h, l, s) = (qs[0], qs[1], qs[2], ks[3]);
    let score_dims = [b, h, l, s];
    let too_big = || CudaError::Range(format!("attention scores [{b}, {h}, {l}, {s}] overflow i64 strides"));
    let ls = l.checked_mul(s).ok_or_else(too_big)?;
    let hls = h.checked_mul(ls).ok_or_else(too_big)?;
    b.checked_mul(hls).ok_or_else(too_big)?;
    let score_strides = [hls, ls, s, 1];
    let virt = |g: &mut Graph, dtype| g.tensor(0, dtype, &score_dims, &score_strides, Role::Virtual);
    let row_dims = [b, h, l, 1];
    let row_strides = [h.checked_mul(l).ok_or_else(too_big)?, l, 1, 1];

    let s0 = virt(&mut g, f32_)?;
    g.matmul(q, k, s0)?;
    let scale = g.scalar(SCALE)?;
    let mut last = virt(&mut g, f32_)?;
    g.pointwise(Pointwise::CUDNN_POINTWISE_MUL, f32_, None, &[s0, scale], last)?;
    if let Some(bl) = &key.bias {
        let (bs, bt) = split(bl);
        let bias = g.tensor(BIAS, io, &bs, &bt, Role::Memory)?;
        let next = virt(&mut g, f32_)?;
        g.pointwise(Pointwise::CUDNN_POINTWISE_ADD, f32_, None, &[last, bias], next)?;
        last = next;
    }
    if key.causal {
        let int32 = DataType::CUDNN_DATA_INT32;
        let boolean = DataType::CUDNN_DATA_BOOLEAN;
        let row = virt(&mut g, int32)?;
        g.pointwise(Pointwise::CUDNN_POINTWISE_GEN_INDEX, int32, Some(2), &[last], row)?;
        let col = virt(&mut g, int32)?;
        g.pointwise(Pointwise::CUDNN_POINTWISE_GEN_INDEX, int32, Some(3), &[last], col)?;
        let keep = virt(&mut g, boolean)?;
        g.pointwise(Pointwise::CUDNN_POINTWISE_CMP_GE, boolean, None, &[row, col], keep)?;
        let neg_inf = g.scalar(NEG_INF)?;
        let next = virt(&mut g, f32_)?;
        g.pointwise(
            Pointwise::CUDNN_POINTWISE_BINARY_SELECT,
            f32_,
            None,
            &[last, neg_inf, keep],
            next,
        )?;
        last = next;
    }
    // Softmax.
    let max = g.tensor(0, f32_, &row_dims, &row_strides, Role::Virtual)?;
    g.reduction(Reduce::CUDNN_REDUCE_TENSOR_MAX, last, max)?;
    let sub = virt(&mut g, f32_)?;
    g.pointwise(Pointwise::CUDNN_POINTWISE_SUB, f32_, None, &[last, max], sub)?;
    let exp = virt(&mut g, f32_)?;
    g.pointwise(Pointwise::CUDNN_POINTWISE_EXP, f32_, None, &[sub], exp)?;
    let sum = g.tensor(0, f32_, &row_dims, &row_strides, Role::Virtual)?;
    g.reduction(Reduce::CUDNN_REDUCE_TENSOR_ADD, exp, sum)?;
    // The log-sum-exp is part of the pattern cuDNN's fused engines match
    // even when nothing reads it (a virtual tensor then), as in the frontend.
    let log = g.tensor(0, f32_, &row_dims, &row_strides, Role::Virtual)?;
    g.pointwise(Pointwise::CUDNN_POINTWISE_LOG, f32_, None, &[sum], log)?;
    let stats = match &key.stats {
        Some(sl) => {
            let (ss, st) = split(sl);
            g.tensor(STATS, f32_, &ss, &st, Role::Memory)?
        }
        None => g.tensor(0, f32_, &row_dims, &row_strides, Role::Virtual)?,
    };
    g.pointwise(Pointwise::CUDNN_POINTWISE_ADD, f32_, None, &[max, log], stats)?;
    // P in the input type: the A operand of the second matmul.
    let p = virt(&mut g, io)?;
    g.pointwise(Pointwise::CUDNN_POINTWISE_DIV, f32_, None, &[exp, sum], p)?;
    let (os, ot) = split(&key.o);
    let o = g.tensor(O, io, &os, &ot, Role::Memory)?;
    g.matmul(p, v, o)?;
    g.plan(handle)
}

/// One fused attention as a replayable call.
#[derive(Debug)]
struct SdpaCall {
    plan: Rc<Plan>,
    q: sys::CUdeviceptr,
    k: sys::CUdeviceptr,
    v: sys::CUdeviceptr,
    o: sys::CUdeviceptr,
    stats: sys::CUdeviceptr,
    bias: sys::CUdeviceptr,
    workspace: sys::CUdeviceptr,
    scale: f32,
    /// Whether the graph has the causal mask (and its by-value `-inf`).
    causal: bool,
}

impl LibraryCall for SdpaCall {
    fn op(&self) -> &str {
        &OP
    }

    fn library(&self) -> &'static str {
        "cuDNN"
    }

    fn addresses(&self) -> Vec<Address> {
        library::addresses(
            &[(self.q, false), (self.k, false), (self.v, false), (self.o, true)],
            &[(self.stats, true), (self.bias, false), (self.workspace, true)],
        )
    }

    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall> {
        let mut it = addresses.iter().copied();
        let mut next = |old: sys::CUdeviceptr| if old == 0 { 0 } else { it.next().unwrap_or(old) };
        let (q, k, v, o) = (next(self.q), next(self.k), next(self.v), next(self.o));
        let (stats, bias, workspace) = (next(self.stats), next(self.bias), next(self.workspace));
        Box::new(SdpaCall {
            plan: Rc::clone(&self.plan),
            q,
            k,
            v,
            o,
            stats,
            bias,
            workspace,
            scale: self.scale,
            causal: self.causal,
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let handle = library::recorded_handle(backend.dnn.as_ref(), &OP, "cuDNN")?;
        let neg_inf = f32::NEG_INFINITY;
        let mut uids = vec![Q, K, V, O, SCALE];
        let dev = |p: sys::CUdeviceptr| p as *mut c_void;
        let mut ptrs = vec![
            dev(self.q),
            dev(self.k),
            dev(self.v),
            dev(self.o),
            (&self.scale as *const f32).cast_mut().cast::<c_void>(),
        ];
        if self.stats != 0 {
            uids.push(STATS);
            ptrs.push(dev(self.stats));
        }
        if self.bias != 0 {
            uids.push(BIAS);
            ptrs.push(dev(self.bias));
        }
        if self.causal {
            uids.push(NEG_INF);
            ptrs.push((&neg_inf as *const f32).cast_mut().cast::<c_void>());
        }
        // SAFETY: q, k, v, o (and stats, bias, workspace when present) are
        // live device allocations of the layouts the plan was made for,
        // ordered on the handle's stream; the by-value scalars live on this
        // frame until `execute` returns, and cuDNN reads them before then.
        unsafe { self.plan.execute(handle, &uids, &ptrs, dev(self.workspace)) }
            .map_err(|e| ExecError::op(&OP, e.to_string()))
    }
}
