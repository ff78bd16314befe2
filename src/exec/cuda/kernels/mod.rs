//! Built-in CUDA kernels for the extern ops that Inductor leaves to ATen and
//! that cuBLAS does not cover: boolean-mask compaction (`nonzero`,
//! `masked_select`, `index.Tensor` with a mask), the jagged <-> padded dense
//! conversions and their backward ops, `scatter_` / `scatter_reduce_` /
//! `scatter_add_`, `index_put_` and `topk`; `sort`, `histc` and
//! torchvision's detection ops have modules of their own (`sort.rs`,
//! `sort.cu`; `histc.rs`, `histc.cu`; `detection.rs`, `detection.cu`).
//!
//! The CUDA source (`builtin.cu`, templates instantiated per dtype or per
//! element width) is compiled to a cubin with NVRTC once per compute
//! capability and kept in an on-disk cache ([`image`]); each backend loads
//! the cubin once and looks each function up once. [`run`] answers `Ok(None)` for calls these kernels do not cover
//! (another dtype, a layout they do not take, an `out=` variant), which the
//! backend then sends to its host fallback.
//!
//! Semantics follow ATen's CUDA kernels:
//! * compaction keeps row-major order; the result size is read back (one
//!   synchronisation), as ATen does for these unbacked sizes;
//! * jagged conversions never read outside their inputs: positions past a
//!   row's end, past the padded width, or in rows outside the batch are
//!   padding (dense) or 0 (jagged), as in the CUDA kernels; offsets are not
//!   otherwise checked, as on the GPU in PyTorch;
//! * reductions into duplicate indices (`index_put_` with `accumulate`,
//!   `scatter_reduce_`) use atomic read-modify-write, so floating sums are
//!   not deterministic in their rounding order (as in PyTorch's default mode);
//!   out-of-range indices are an error after the kernel.

mod detection;
mod extra;
mod histc;
mod image;
mod ops;
mod sort;

pub(super) use image::{digest, load_module, store, KernelSource};
pub use image::{prebuild_kernels, PrebuiltImage};

/// Helper kernels of the GEMM ops (bias broadcast, activations).
pub(super) use ops::{copy_strided, gemm_activation};

use super::driver::Module;
use super::library::{Traced, TracedParam};
use super::{CudaBackend, CudaPaths, CudaTensor, Storage};
use crate::exec::cuda::DeviceResult;
use crate::exec::{ExecError, ExternCall};
use crate::ir::DType;
use cudarc::driver::sys;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// The CUDA source of the built-in kernels, after the definitions every
/// built-in source shares (`prelude.cuh`).
const SOURCE: &str = concat!(include_str!("prelude.cuh"), include_str!("builtin.cu"));

/// Most dimensions a tensor passed to a built-in kernel may have.
const MAX_RANK: usize = 8;
/// Threads per block of every built-in kernel (`THREADS` in the source).
pub(super) const THREADS: u32 = 256;
/// Mask elements one compaction block covers (`TILE` in the source).
const TILE: i64 = 1024;
/// Most blocks of a grid-stride launch.
const MAX_BLOCKS: i64 = 1 << 16;

/// Counts of the extern ops a backend ran, by op name: on the GPU (cuBLAS
/// or a built-in kernel) and through the host fallback. Clones share the
/// counts, so a caller can keep one and read it after a run.
#[derive(Clone, Debug, Default)]
pub struct ExternOpLog {
    counts: Arc<Mutex<OpCounts>>,
}

#[derive(Debug, Default)]
struct OpCounts {
    device: BTreeMap<String, usize>,
    host: BTreeMap<String, usize>,
}

impl ExternOpLog {
    /// Records one call of `op` that ran on the device.
    pub fn record_device(&self, op: &str) {
        if let Ok(mut c) = self.counts.lock() {
            *c.device.entry(op.to_string()).or_default() += 1;
        }
    }

    /// Records one call of `op` that ran through the host fallback.
    pub fn record_host(&self, op: &str) {
        if let Ok(mut c) = self.counts.lock() {
            *c.host.entry(op.to_string()).or_default() += 1;
        }
    }

    /// Ops that ran on the device, with their call counts, by name.
    pub fn device_ops(&self) -> Vec<(String, usize)> {
        self.counts
            .lock()
            .map(|c| c.device.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }

    /// Ops that ran through the host fallback, with their call counts, by name.
    pub fn host_ops(&self) -> Vec<(String, usize)> {
        self.counts
            .lock()
            .map(|c| c.host.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }
}

/// The loaded built-in module of one backend and the functions looked up in it.
#[derive(Default)]
pub(super) struct Builtins {
    module: Option<Rc<Module>>,
    functions: HashMap<String, sys::CUfunction>,
    /// Separately compiled modules (their own CUDA source, e.g. attention)
    /// by module name, with the functions looked up in each.
    extra: HashMap<String, (Rc<Module>, HashMap<String, sys::CUfunction>)>,
    /// Wall time spent compiling (NVRTC) and loading the module.
    pub(super) load_time: std::time::Duration,
}

/// Runs a call the catalogue routes to the index, scatter, jagged and top-k
/// kernels (`CudaRoute::Kernel`); `Ok(None)` when no kernel takes its operands.
pub(super) fn run_indexing(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    ops::run(backend, call)
}

/// Whether the index, scatter, jagged, top-k and sort kernels run `op`.
pub(super) fn runs_indexing(op: crate::exec::op::ExternOp) -> bool {
    ops::op_fn(op).is_some()
}

/// Whether [`extra`] runs `op`.
pub(super) fn runs_extra(op: crate::exec::op::ExternOp) -> bool {
    extra::op_fn(op).is_some()
}

/// Runs a call the catalogue routes to [`extra`] (`CudaRoute::Extra`).
pub(super) fn run_extra(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    extra::run(backend, call)
}

/// The built-in kernels' source (see [`image`]).
fn builtin_source() -> KernelSource {
    KernelSource {
        id: "builtin".into(),
        what: "cuda built-in kernels",
        text: SOURCE.to_string(),
    }
}

/// A module of built-in kernels compiled on its own (NVRTC), apart from
/// the built-in module: `extra.cu`, `sort.cu`, `histc.cu`, `detection.cu`.
pub(super) struct OwnModule {
    /// The module's name among the backend's separately compiled modules
    /// (and its source's id).
    name: &'static str,
    /// The kernels' name in errors.
    what: &'static str,
    /// The complete source text.
    source: &'static str,
}

impl OwnModule {
    /// The module's source (see [`image`]).
    fn source(&self) -> KernelSource {
        KernelSource {
            id: self.name.into(),
            what: self.what,
            text: self.source.to_string(),
        }
    }

    /// Launches the module's function `name` (loading the module first) as
    /// [`launch_function`] does.
    fn launch(&self, backend: &mut CudaBackend, name: &str, blocks: u32, args: Vec<Arg>) -> Result<(), ExecError> {
        let f = backend
            .builtins
            .extra_function(&backend.device, self.name, &|| self.source(), name)?;
        launch_function(backend, f, name, blocks, args)
    }
}

/// The flash-attention kernels' source (`exec::cuda::attention` launches them).
const ATTENTION_SOURCE: &str = include_str!("attention.cu");

/// Head dims the attention kernels are instantiated for.
pub(in crate::exec::cuda) const ATTENTION_HEAD_DIMS: [i64; 6] = [16, 32, 64, 80, 96, 128];

/// The attention kernels for head dim `e`: one module per head dim.
pub(in crate::exec::cuda) fn attention_source(e: i64) -> KernelSource {
    KernelSource {
        id: format!("attention_e{e}"),
        what: "cuda attention kernels",
        text: format!("#define ATTN_E {e}\n{ATTENTION_SOURCE}"),
    }
}

/// Compiles the built-in kernels for device `ordinal` on a new thread, so
/// that the NVRTC compilation overlaps with the caller's context creation
/// (the first built-in op then finds the cubin compiled, or waits for it). A
/// failure here is left for that first op to report.
pub(super) fn precompile_in_background(ordinal: usize, paths: Arc<CudaPaths>) {
    super::libraries::spawn_background(move || {
        if !super::driver::keep_driver_loaded() {
            return;
        }
        // cuInit is thread-safe and idempotent; reading the compute capability needs no context.
        let Ok(ordinal) = i32::try_from(ordinal) else { return };
        let Ok(device) = cudarc::driver::result::init().and_then(|()| cudarc::driver::result::device::get(ordinal))
        else {
            return;
        };
        let cc = |a| {
            // SAFETY: `device` was returned by `device::get` above.
            unsafe { cudarc::driver::result::device::get_attribute(device, a) }
        };
        if let (Ok(major), Ok(minor)) = (
            cc(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            cc(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ) {
            let _ = image::compiled_image(
                &paths,
                &builtin_source(),
                major,
                minor,
                image::ImageOrigin::PrebuiltFirst,
            );
        }
    });
}

impl Builtins {
    /// The function `name` of the built-in module, loading the module first.
    fn function(&mut self, device: &super::driver::Device, name: &str) -> Result<sys::CUfunction, ExecError> {
        if let Some(f) = self.functions.get(name) {
            return Ok(*f);
        }
        let module = match &self.module {
            Some(m) => Rc::clone(m),
            None => {
                let loading = std::time::Instant::now();
                let m = Rc::new(load_module(device, &builtin_source)?);
                self.module = Some(Rc::clone(&m));
                self.load_time += loading.elapsed();
                m
            }
        };
        let f = module.function(name).map_err(|e| ExecError::op(name, e.to_string()))?;
        self.functions.insert(name.to_string(), f);
        Ok(f)
    }

    /// The function `name` of the separately compiled module `module`, loading
    /// it first from the source `source` gives (see [`load_module`]).
    pub(super) fn extra_function(
        &mut self,
        device: &super::driver::Device,
        module: &str,
        source: &dyn Fn() -> KernelSource,
        name: &str,
    ) -> Result<sys::CUfunction, ExecError> {
        if let Some(f) = self.extra.get(module).and_then(|(_, fs)| fs.get(name)) {
            return Ok(*f);
        }
        if !self.extra.contains_key(module) {
            let loading = std::time::Instant::now();
            let m = load_module(device, source)?;
            self.extra.insert(module.to_string(), (Rc::new(m), HashMap::new()));
            self.load_time += loading.elapsed();
        }
        let (m, functions) = self
            .extra
            .get_mut(module)
            .ok_or_else(|| ExecError::op(name, format!("module `{module}` is not loaded")))?;
        let f = m.function(name).map_err(|e| ExecError::op(name, e.to_string()))?;
        functions.insert(name.to_string(), f);
        Ok(f)
    }
}

/// A tensor's sizes and strides as the kernels' `Nd` struct.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Nd {
    size: [i64; MAX_RANK],
    stride: [i64; MAX_RANK],
    rank: i64,
}

impl Nd {
    /// `None` when there are more than [`MAX_RANK`] dimensions.
    fn new(size: &[i64], stride: &[i64]) -> Option<Nd> {
        if size.len() > MAX_RANK || size.len() != stride.len() {
            return None;
        }
        let mut nd = Nd {
            size: [1; MAX_RANK],
            stride: [0; MAX_RANK],
            rank: size.len() as i64,
        };
        nd.size[..size.len()].copy_from_slice(size);
        nd.stride[..stride.len()].copy_from_slice(stride);
        Some(nd)
    }
}

/// The kernels' `Indices` struct: up to four int64 index tensors.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Indices {
    ptr: [u64; 4],
    stride: [[i64; MAX_RANK]; 4],
    count: i64,
}

/// One kernel argument, kept alive until the launch is queued.
enum Arg {
    /// A device address (recorded by the prepared path as a place in memory).
    Ptr(u64),
    /// 64 raw bits (e.g. a padding value's bit pattern).
    Bits(u64),
    I64(i64),
    I32(i32),
    F64(f64),
    Nd(Nd),
    Indices(Box<Indices>),
}

impl Arg {
    fn ptr(&mut self) -> *mut c_void {
        match self {
            Arg::Ptr(v) | Arg::Bits(v) => (v as *mut u64).cast(),
            Arg::I64(v) => (v as *mut i64).cast(),
            Arg::I32(v) => (v as *mut i32).cast(),
            Arg::F64(v) => (v as *mut f64).cast(),
            Arg::Nd(v) => (v as *mut Nd).cast(),
            Arg::Indices(v) => (&mut **v as *mut Indices).cast(),
        }
    }
}

impl Arg {
    /// The argument as the 8-byte words the kernel reads, with the indices
    /// of the words that hold device addresses.
    fn traced(&self) -> TracedParam {
        let (words, pointers): (Vec<u64>, Vec<usize>) = match self {
            Arg::Ptr(v) => (vec![*v], vec![0]),
            Arg::Bits(v) => (vec![*v], vec![]),
            Arg::I64(v) => (vec![*v as u64], vec![]),
            // The kernel reads the low 4 bytes (little endian).
            Arg::I32(v) => (vec![u64::from(*v as u32)], vec![]),
            Arg::F64(v) => (vec![v.to_bits()], vec![]),
            Arg::Nd(nd) => (nd_words(nd), vec![]),
            Arg::Indices(ix) => {
                let mut words: Vec<u64> = ix.ptr.to_vec();
                ix.stride.iter().for_each(|s| words.extend(nd_i64_words(s)));
                words.push(ix.count as u64);
                (words, (0..ix.ptr.len()).collect())
            }
        };
        TracedParam { words, pointers }
    }
}

fn nd_i64_words(v: &[i64]) -> impl Iterator<Item = u64> + '_ {
    v.iter().map(|x| *x as u64)
}

/// `Nd`'s fields in `repr(C)` order.
fn nd_words(nd: &Nd) -> Vec<u64> {
    nd_i64_words(&nd.size)
        .chain(nd_i64_words(&nd.stride))
        .chain([nd.rank as u64])
        .collect()
}

/// The kernel-name suffix of a dtype.
fn dtype_suffix(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Float32 => "f32",
        DType::Float64 => "f64",
        DType::Float16 => "f16",
        DType::Bfloat16 => "bf16",
        DType::Int64 => "i64",
        DType::Int32 => "i32",
        DType::Int16 => "i16",
        DType::Int8 => "i8",
        DType::Uint8 => "u8",
        DType::Bool => "bool",
        _ => return None,
    })
}

/// Dtypes the scatter, index_put and topk kernels are instantiated for.
fn reducible(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Float32 | DType::Float64 | DType::Float16 | DType::Bfloat16 | DType::Int64 | DType::Int32
    )
}

/// Launches built-in `name` with `blocks` blocks of [`THREADS`] threads.
fn launch(backend: &mut CudaBackend, name: &str, blocks: u32, args: Vec<Arg>) -> Result<(), ExecError> {
    let f = backend.builtins.function(&backend.device, name)?;
    launch_function(backend, f, name, blocks, args)
}

/// Launches function `f` (named `name`) with `blocks` blocks of [`THREADS`]
/// threads; traced for the prepared path.
fn launch_function(
    backend: &mut CudaBackend,
    f: sys::CUfunction,
    name: &str,
    blocks: u32,
    mut args: Vec<Arg>,
) -> Result<(), ExecError> {
    if let Some(trace) = backend.trace.as_mut() {
        trace.push(Traced::Launch {
            name: name.to_string(),
            function: f,
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_mem: 0,
            params: args.iter().map(Arg::traced).collect(),
        });
    }
    let mut params: Vec<*mut c_void> = args.iter_mut().map(Arg::ptr).collect();
    backend
        .device
        .launch(f, (blocks, 1, 1), (THREADS, 1, 1), 0, &mut params)
        .map_err(|e| ExecError::op(name, e.to_string()))
}

/// Blocks of a grid-stride launch over `n` items.
fn blocks_for(n: i64) -> u32 {
    // Clamped to 1..=MAX_BLOCKS, which fits u32.
    (n.max(1) + i64::from(THREADS) - 1)
        .div_euclid(i64::from(THREADS))
        .clamp(1, MAX_BLOCKS) as u32
}

/// A scratch allocation of `bytes` bytes.
fn scratch(backend: &mut CudaBackend, bytes: i64) -> Result<Arc<Storage>, ExecError> {
    let bytes =
        usize::try_from(bytes).map_err(|_| ExecError::Input(format!("scratch size {bytes} is out of range")))?;
    backend.alloc_storage(bytes)
}

/// Reads the `i64` at element `index` of the allocation at `ptr`.
fn read_i64(backend: &mut CudaBackend, ptr: sys::CUdeviceptr, index: i64) -> Result<i64, ExecError> {
    let bytes = backend.read_device(ptr + (index as u64) * 8, 8)?;
    Ok(i64::from_le_bytes(bytes))
}
