//! Fused scaled-dot-product attention on the device: the memory-efficient,
//! flash and cuDNN attention ops (see [`crate::exec::host::attention`] for their
//! semantics and result layouts) on our own flash-attention kernels
//! (`kernels/attention.cu`, compiled with NVRTC once per process, compute
//! capability and head dim, separately from the other built-in kernels).
//!
//! f16 and bf16 run on tensor cores (`mma.sync` m16n8k16, compute
//! capability 8.0 and later), f32 as 3xTF32 on tensor cores (m16n8k8, the
//! fp32-accurate split PyTorch's memory-efficient attention uses; FMA before
//! compute capability 8.0); head dims 16, 32, 64, 80, 96 and 128
//! with value head dim equal to the query's, a smaller head dim run on the
//! next of those with its operands zero-padded. Larger head dims, unequal
//! ones or other dtypes (and
//! f16/bf16 before compute capability 8.0) go to the host fallback when it
//! is on and are an error naming what the kernels take when it is off.

use super::driver;
use super::kernels::{attention_source as source, ATTENTION_HEAD_DIMS as HEAD_DIMS};
use super::library::{Traced, TracedParam};
use super::{CudaBackend, CudaTensor, DEFAULT_SHARED_LIMIT};
use crate::exec::cuda::DeviceResult;
use crate::exec::host::attention::{self as sdpa, Item, Kind};
use crate::exec::op::ExternOp;
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::driver::sys;
use std::ffi::c_void;

/// The CUDA source of the attention kernels.
/// The module's name among the backend's separately compiled modules.
const MODULE: &str = "attention";
/// Threads per block of the f32 kernels (`NT` in the source).
const THREADS: u32 = 128;
/// Keys per tile of the tensor-core kernels (`MMA_BN`).
const MMA_BN: u32 = 64;
/// Whether the tensor-core kernels' fast path (16-byte `cp.async` copies of
/// contiguous, aligned rows) may be used; off, every layout takes the
/// general-stride kernels.
const MMA_FAST_PATH: bool = true;
/// Query rows per block of the f32 kernels (`F32_BM`).
const F32_BM: i64 = 32;
/// Keys per tile of the f32 kernels (`F32_BN`).
const F32_BN: u32 = 32;

/// The kernels' `AttnParams`: every field 8 bytes, in source order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct AttnParams {
    q: u64,
    k: u64,
    v: u64,
    bias: u64,
    out: u64,
    lse: u64,
    qs: [i64; 4],
    ks: [i64; 4],
    vs: [i64; 4],
    bs: [i64; 4],
    os: [i64; 4],
    ls: [i64; 3],
    heads: i64,
    group: i64,
    lq: i64,
    lk: i64,
    lse_len: i64,
    scale: f64,
    causal: i64,
    empty_mode: i64,
}

/// Words of [`AttnParams`] holding device addresses (the first six).
const POINTER_WORDS: usize = 6;

impl AttnParams {
    /// The struct as the 8-byte words the kernel reads.
    fn words(&self) -> Vec<u64> {
        let mut w = vec![self.q, self.k, self.v, self.bias, self.out, self.lse];
        for s in [&self.qs, &self.ks, &self.vs, &self.bs, &self.os] {
            w.extend(s.iter().map(|x| *x as u64));
        }
        w.extend(self.ls.iter().map(|x| *x as u64));
        w.extend([self.heads, self.group, self.lq, self.lk, self.lse_len].map(|x| x as u64));
        w.push(self.scale.to_bits());
        w.extend([self.causal, self.empty_mode].map(|x| x as u64));
        w
    }
}

/// The attention op `op` is, when it runs on the device (every kind but the
/// CPU flash op; the catalogue's `CudaRoute::Attention` ops): the one test
/// of both [`call`] and the backend's route check.
pub(super) fn device_kind(op: ExternOp) -> Option<Kind> {
    Kind::of(&op).filter(|k| *k != Kind::FlashCpu)
}

/// Runs the attention ops on the device; `Ok(None)` for other ops and for
/// operands the kernels do not take while the host fallback is on.
pub(super) fn call(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let Some(kind) = device_kind(call.family) else {
        return Ok(None);
    };
    let a = crate::exec::op::Args::of(call);
    let parsed = sdpa::parse(&a, kind, |t: &CudaTensor| &t.spec)?;
    let dims = parsed.dims;
    let dtype = parsed.q.spec.dtype;
    let refuse = |backend: &CudaBackend, why: String| {
        if backend.options.host_fallback {
            Ok(None)
        } else {
            Err(a.err(why))
        }
    };
    let suffix = match dtype {
        DType::Float32 => "f32",
        DType::Float16 => "f16",
        DType::Bfloat16 => "bf16",
        other => {
            return refuse(
                backend,
                format!("the attention kernels take f32, f16 and bf16, not {other}"),
            )
        }
    };
    // A head dim the kernels are not built for runs on the next one up,
    // its operands zero-padded (a zero column adds nothing to a dot
    // product, and the output's padding columns are dropped); the scale
    // stays the one of the real head dim.
    let Some(kernel_e) = HEAD_DIMS
        .iter()
        .copied()
        .find(|e| *e >= dims.e)
        .filter(|_| dims.ev == dims.e && dims.e > 0)
    else {
        return refuse(
            backend,
            format!(
                "the attention kernels take head dims up to {} with equal query and value head dims, \
                 got {} and {}",
                HEAD_DIMS[HEAD_DIMS.len() - 1],
                dims.e,
                dims.ev
            ),
        );
    };
    if kind == Kind::Cudnn && matches!(dtype, DType::Float16 | DType::Bfloat16) {
        let (out, lse) = allocate_results(backend, &parsed, dtype)?;
        if super::dnn_attention::run(backend, &parsed, &out, &lse)? {
            return results(backend, &parsed, dtype, out, lse).map(Some);
        }
    }
    let major = backend
        .device
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .map_err(|e| a.err(e.to_string()))?;
    let family = match dtype {
        DType::Float32 if major >= 8 => Family::F32TensorCores,
        DType::Float32 => Family::F32Fma,
        _ if major >= 8 => Family::Half,
        _ => {
            return refuse(
                backend,
                format!("the {dtype} attention kernels need compute capability 8.0 or later"),
            )
        }
    };
    let dims = sdpa::Dims {
        e: kernel_e,
        ev: kernel_e,
        ..dims
    };
    let (bm, _, _) = shared_layout(family, dims.e, 1);
    let grid_x = u32::try_from((dims.l + bm - 1) / bm)
        .ok()
        .filter(|x| *x < (1 << 31))
        .ok_or_else(|| a.err(format!("query length {} is too long", dims.l)))?;
    let grid_yz = |n: i64, what: &str| {
        u32::try_from(n)
            .ok()
            .filter(|x| *x <= 65535)
            .ok_or_else(|| a.err(format!("{what} {n} is above the kernels' 65535")))
    };
    let grid = (grid_x, grid_yz(dims.h, "heads")?, grid_yz(dims.b, "batch")?);
    let split = key_groups(backend, family, grid, &dims).map_err(|e| a.err(e.to_string()))?;
    let (_, threads, shared) = shared_layout(family, dims.e, split);

    let (out, lse) = allocate_results(backend, &parsed, dtype)?;
    let layout = sdpa::lse_layout(&parsed, dtype);
    let padded = if kernel_e == parsed.dims.e {
        None
    } else {
        Some([
            padded_head(backend, parsed.q, kernel_e, true)?,
            padded_head(backend, parsed.k, kernel_e, true)?,
            padded_head(backend, parsed.v, kernel_e, true)?,
            padded_head(backend, &out, kernel_e, false)?,
        ])
    };
    let [q_t, k_t, v_t, out_t] = match &padded {
        Some([q, k, v, o]) => [q, k, v, o],
        None => [parsed.q, parsed.k, parsed.v, &out],
    };
    let (q, k, v) = (&q_t.spec, &k_t.spec, &v_t.spec);
    let four = |s: &[i64]| [s[0], s[1], s[2], s[3]];
    let mut params = AttnParams {
        q: q_t.data_ptr(),
        k: k_t.data_ptr(),
        v: v_t.data_ptr(),
        bias: parsed.bias.map_or(0, |(t, _)| t.data_ptr()),
        out: out_t.data_ptr(),
        lse: if layout.len > 0 { lse.data_ptr() } else { 0 },
        qs: four(&q.stride),
        ks: four(&k.stride),
        vs: four(&v.stride),
        bs: parsed.bias.map_or([0; 4], |(_, s)| s),
        os: four(&out_t.spec.stride),
        ls: layout.rows,
        heads: dims.h,
        group: if dims.hk > 0 { dims.h / dims.hk } else { 1 },
        lq: dims.l,
        lk: dims.s,
        lse_len: layout.len,
        scale: parsed.scale,
        causal: i64::from(parsed.causal),
        empty_mode: i64::from(parsed.empty_rows_zero()),
    };
    if grid.0 > 0 && grid.1 > 0 && grid.2 > 0 {
        // 16-byte rows: 8 elements of 16 bits, 4 of fp32.
        let row_elems = if family == Family::Half { 8 } else { 4 };
        let fast = family != Family::F32Fma
            && MMA_FAST_PATH
            && [q, k, v]
                .iter()
                .zip([params.q, params.k, params.v])
                .all(|(spec, ptr)| rows_aligned(spec, ptr, row_elems, 16))
            && (family != Family::Half || rows_aligned(&out_t.spec, params.out, 2, 4));
        let kernel = match family {
            Family::F32TensorCores if split == 2 => "f32tc_s2",
            Family::F32TensorCores => "f32tc",
            _ => suffix,
        };
        let name = if fast {
            format!("attn_{kernel}_fast_e{}", dims.e)
        } else {
            format!("attn_{kernel}_e{}", dims.e)
        };
        launch(backend, &name, dims.e, grid, threads, shared, &mut params)?;
    }
    if let Some([.., padded_out]) = &padded {
        // The real head dim's columns of the padded output, in the op's layout.
        let columns = backend.view(padded_out, &out.spec.size, &padded_out.spec.stride, 0)?;
        super::kernels::copy_strided(backend, &columns, &columns.spec.stride, &out)?;
    }
    results(backend, &parsed, dtype, out, lse).map(Some)
}

/// A contiguous copy of the 4-D `t` with its last dimension widened to `e`
/// (an operand, `copy` true: `t` in the first columns, zeros after them), or
/// a contiguous tensor of that shape to write an output into (`copy` false).
fn padded_head(backend: &mut CudaBackend, t: &CudaTensor, e: i64, copy: bool) -> Result<CudaTensor, ExecError> {
    let mut size = t.spec.size.clone();
    if let Some(last) = size.last_mut() {
        *last = e;
    }
    let padded = backend.allocate(&TensorSpec::contiguous(t.spec.dtype, backend.device_of(), &size))?;
    if copy {
        let bytes = u64::try_from(padded.spec.numel())
            .ok()
            .and_then(|n| n.checked_mul(t.spec.dtype.size_bytes()))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| ExecError::op("attention", format!("padded operand {size:?} is too large")))?;
        backend.zero(padded.data_ptr(), bytes)?;
        let columns = backend.view(&padded, &t.spec.size, &padded.spec.stride, 0)?;
        super::kernels::copy_strided(backend, t, &t.spec.stride, &columns)?;
    }
    Ok(padded)
}

/// The output and log-sum-exp tensors of an attention op, in the layouts
/// PyTorch gives them.
fn allocate_results(
    backend: &mut CudaBackend,
    parsed: &sdpa::Call<'_, CudaTensor>,
    dtype: DType,
) -> Result<(CudaTensor, CudaTensor), ExecError> {
    let device = backend.device_of();
    let (osize, ostride) = sdpa::out_layout(parsed, &parsed.q.spec);
    let out = backend.allocate(&TensorSpec {
        dtype,
        device,
        size: osize,
        stride: ostride,
        offset: 0,
    })?;
    let layout = sdpa::lse_layout(parsed, dtype);
    let lse = backend.allocate(&TensorSpec {
        dtype: layout.dtype,
        device,
        size: layout.size,
        stride: layout.stride,
        offset: 0,
    })?;
    Ok((out, lse))
}

/// The op's result list around `out` and `lse`.
fn results(
    backend: &mut CudaBackend,
    parsed: &sdpa::Call<'_, CudaTensor>,
    dtype: DType,
    out: CudaTensor,
    lse: CudaTensor,
) -> Result<Value<CudaTensor>, ExecError> {
    let device = backend.device_of();
    let mut items = Vec::new();
    for item in sdpa::result_items(parsed, dtype) {
        items.push(match item {
            Item::Out => Value::Tensor(out.clone()),
            Item::Lse => Value::Tensor(lse.clone()),
            Item::Zeros(dtype, size) => {
                let t = backend.allocate(&TensorSpec::contiguous(dtype, device, &size))?;
                let bytes = CudaBackend::storage_bytes(&t.spec)?;
                if bytes > 0 {
                    backend.zero(t.data_ptr(), bytes)?;
                }
                Value::Tensor(t)
            }
            Item::Int(i) => Value::Int(i),
            Item::None => Value::None,
        });
    }
    Ok(Value::List(items))
}

/// Whether a 4-d tensor at `ptr` has a contiguous last dimension, a
/// `align`-byte aligned start and other strides that are multiples of
/// `stride_mult` elements (strides of dimensions of size 1 never matter):
/// every row then starts on an `align`-byte boundary.
fn rows_aligned(spec: &TensorSpec, ptr: u64, stride_mult: i64, align: u64) -> bool {
    spec.size.len() == 4
        && spec.stride.len() == 4
        && ptr % align == 0
        && (spec.size[3] <= 1 || spec.stride[3] == 1)
        && (0..3).all(|d| spec.size[d] <= 1 || spec.stride[d] % stride_mult == 0)
}

/// Which kernels run an attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// f16 / bf16 on tensor cores (`attn_mma`).
    Half,
    /// f32 as 3xTF32 on tensor cores (`attn_f32_tc`), compute capability 8.0+.
    F32TensorCores,
    /// f32 on FMA (`attn_f32`), before compute capability 8.0.
    F32Fma,
}

/// Query rows per block, threads per block and dynamic shared memory
/// (bytes) of a kernel family. `Half`: `MMA_WARPS` warps of 16 query rows
/// (8 for E <= 64, 4 above), the Q tile `[rows][E + 8]` and double-buffered
/// K and V tiles `[2][64][E + 8]`, 2-byte elements. `F32TensorCores`: 4
/// warps, the Q tile `[64][E + 4]`, K and V tiles `[BN][E + 4]`, 4-byte
/// elements, with BN = 64 keys up to E = 64 and 32 above (`TC_BN` in the
/// source); P stays in registers; with `split` key groups (see
/// [`key_groups`]) each group has its own K and V tiles. `split` is 1 for
/// the other families. `F32Fma`: the K and V tiles `[32][E]`.
fn shared_layout(family: Family, e: i64, split: u32) -> (i64, u32, u32) {
    // `e` is one of HEAD_DIMS, so the products are small.
    let e = e as u32;
    match family {
        Family::Half => {
            let warps: u32 = if e <= 64 { 8 } else { 4 };
            let bm = warps * 16;
            (i64::from(bm), warps * 32, (bm + 4 * MMA_BN) * (e + 8) * 2)
        }
        Family::F32TensorCores => {
            let bn: u32 = if e <= 64 { 64 } else { 32 };
            (64, 128 * split, (64 * (e + 4) + split * 2 * bn * (e + 4)) * 4)
        }
        Family::F32Fma => (F32_BM, THREADS, 2 * F32_BN * e * 4),
    }
}

/// Key groups per block of the f32 tensor-core kernel: 2 when the grid
/// fills at most half of the GPU's multiprocessors and there are at least
/// two key tiles to share (a block's groups then run the two halves of the
/// keys side by side), else 1.
fn key_groups(
    backend: &CudaBackend,
    family: Family,
    grid: (u32, u32, u32),
    dims: &sdpa::Dims,
) -> Result<u32, super::CudaError> {
    if family != Family::F32TensorCores {
        return Ok(1);
    }
    let bn = if dims.e <= 64 { 64 } else { 32 };
    let blocks = u64::from(grid.0) * u64::from(grid.1) * u64::from(grid.2);
    let sms = backend
        .device
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let sms = u64::try_from(sms).unwrap_or(0);
    Ok(if 2 * blocks <= sms && dims.s >= 2 * bn { 2 } else { 1 })
}

/// Launches attention kernel `name` with `threads` threads a block and
/// `shared` bytes of dynamic shared memory (raising the function's limit
/// above 48 KiB); traced for the prepared path like the built-in launches.
fn launch(
    backend: &mut CudaBackend,
    name: &str,
    e: i64,
    grid: (u32, u32, u32),
    threads: u32,
    shared: u32,
    params: &mut AttnParams,
) -> Result<(), ExecError> {
    let module = format!("{MODULE}_e{e}");
    let f = backend
        .builtins
        .extra_function(&backend.device, &module, &|| source(e), name)?;
    if shared > DEFAULT_SHARED_LIMIT {
        let optin = backend
            .device
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(|e| ExecError::op(name, e.to_string()))?;
        if i64::from(shared) > i64::from(optin) {
            return Err(ExecError::op(
                name,
                format!("needs {shared} bytes of shared memory; the device allows {optin} per block"),
            ));
        }
        driver::set_max_dynamic_shared(f, shared).map_err(|e| ExecError::op(name, e.to_string()))?;
    }
    if let Some(trace) = backend.trace.as_mut() {
        trace.push(Traced::Launch {
            name: name.to_string(),
            function: f,
            grid,
            block: threads,
            shared_mem: shared,
            params: vec![TracedParam {
                words: params.words(),
                pointers: (0..POINTER_WORDS).collect(),
            }],
        });
    }
    let mut ptrs: [*mut c_void; 1] = [(params as *mut AttnParams).cast::<c_void>()];
    backend
        .device
        .launch(f, grid, (threads, 1, 1), shared, &mut ptrs)
        .map_err(|e| ExecError::op(name, e.to_string()))
}
