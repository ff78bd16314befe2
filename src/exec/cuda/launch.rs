//! Triton kernels on the device: each kernel's image loaded once (checked
//! for this GPU first), its function looked up once, its arguments
//! marshalled by their signature types, and its launch.

use super::driver::{self, Module};
use super::{CudaBackend, CudaTensor, DEFAULT_SHARED_LIMIT};
use crate::exec::{Backend, ExecError, KernelLaunch, ScalarRequest, ScalarValue, Value};
use crate::ir::{ConstValue, ScalarType, SigType, TritonMeta};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// A loaded kernel: its function, and the module that keeps it loaded.
#[derive(Clone)]
pub(super) struct LoadedKernel {
    pub(super) function: sys::CUfunction,
    pub(super) _module: Arc<Module>,
}

impl std::fmt::Debug for LoadedKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedKernel")
            .field("function", &self.function)
            .finish()
    }
}

/// Kernels one backend loaded, for other backends of the same device to use
/// without loading the images again (see [`CudaBackend::adopt_kernels`]).
#[derive(Clone, Default)]
pub(crate) struct SharedKernels {
    pub(super) kernels: HashMap<String, LoadedKernel>,
}

// SAFETY: a CUfunction and its CUmodule are handles of the device's primary
// context, valid in every thread that binds it; they are not mutated after
// loading (launches and attribute reads are thread-safe driver calls), and
// the module is unloaded only when the last `Arc` goes.
unsafe impl Send for SharedKernels {}
// SAFETY: as for `Send`: shared references only read the handles.
unsafe impl Sync for SharedKernels {}

impl CudaBackend {
    /// Loads the image of every Triton kernel `program` defines that has a
    /// cubin, so that no run loads one later; returns how many are loaded.
    /// Each image is checked before it loads: present, a cubin or PTX, and
    /// for this GPU's architecture; an error names the kernel, the image
    /// and both architectures, before anything launched.
    pub fn preload_kernels(&mut self, program: &crate::ir::Program) -> Result<usize, ExecError> {
        for (name, def) in &program.kernels {
            if let crate::ir::KernelBackend::Triton(meta) = &def.backend {
                if meta.cubin.is_some() {
                    self.function(name.as_str(), meta)?;
                }
            }
        }
        Ok(self.kernels.len())
    }

    /// The kernels this backend has loaded, for [`CudaBackend::adopt_kernels`].
    pub(crate) fn shared_kernels(&self) -> SharedKernels {
        SharedKernels {
            kernels: self.kernels.clone(),
        }
    }

    /// Uses kernels another backend of the same device loaded (its primary
    /// context is this backend's) instead of loading their images again.
    pub(crate) fn adopt_kernels(&mut self, shared: &SharedKernels) {
        for (name, k) in &shared.kernels {
            self.kernels.entry(name.clone()).or_insert_with(|| k.clone());
        }
    }

    pub(super) fn function(&mut self, name: &str, meta: &TritonMeta) -> Result<sys::CUfunction, ExecError> {
        if let Some(k) = self.kernels.get(name) {
            return Ok(k.function);
        }
        let cubin = meta.cubin.as_ref().ok_or_else(|| {
            ExecError::Unsupported(format!(
                "kernel `{name}` has no compiled cubin; the cuda backend does not compile Triton source"
            ))
        })?;
        let loading = std::time::Instant::now();
        let module = match self.modules.get(cubin) {
            Some(m) => Arc::clone(m),
            None => {
                let (image, arch) = self
                    .options
                    .kernels
                    .kernel_image(name, cubin)
                    .map_err(|e| ExecError::Input(e.to_string()))?;
                let (major, minor) = self.compute_capability()?;
                let device_sm = u32::try_from(major * 10 + minor).unwrap_or(0);
                let device = self
                    .device_name()
                    .unwrap_or_else(|_| format!("cuda:{}", self.ordinal()));
                arch.check_runs_on(device_sm, &device).map_err(|e| {
                    ExecError::Input(format!(
                        "kernel `{name}`: {} is {e}",
                        self.options.kernels.describe(cubin)
                    ))
                })?;
                let m = Arc::new(
                    self.device
                        .load_module((*image).as_ref())
                        .map_err(|e| ExecError::op(name, e.to_string()))?,
                );
                self.modules.insert(cubin.clone(), Arc::clone(&m));
                self.timings.modules += 1;
                m
            }
        };
        let symbol = meta.mangled_name.as_deref().unwrap_or(name);
        let function = module
            .function(symbol)
            .map_err(|e| ExecError::op(name, e.to_string()))?;
        let threads_limit = driver::max_threads_per_block(function).map_err(|e| ExecError::op(name, e.to_string()))?;
        if u64::from(meta.num_warps) * 32 > u64::try_from(threads_limit).unwrap_or(0) {
            return Err(ExecError::op(
                name,
                format!(
                    "launches {} threads a block (num_warps {}); the kernel allows at most {threads_limit}",
                    u64::from(meta.num_warps) * 32,
                    meta.num_warps
                ),
            ));
        }
        if meta.shared_mem > DEFAULT_SHARED_LIMIT {
            let optin = self
                .device
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                .map_err(|e| ExecError::op(name, e.to_string()))?;
            if i64::from(meta.shared_mem) > i64::from(optin) {
                return Err(ExecError::op(
                    name,
                    format!(
                        "needs {} bytes of shared memory; the device allows {optin} per block",
                        meta.shared_mem
                    ),
                ));
            }
            driver::set_max_dynamic_shared(function, meta.shared_mem)
                .map_err(|e| ExecError::op(name, e.to_string()))?;
        }
        self.kernels.insert(
            name.to_string(),
            LoadedKernel {
                function,
                _module: module,
            },
        );
        self.timings.module_load += loading.elapsed();
        Ok(function)
    }

    /// One kernel argument as the bytes of a u64 slot (little-endian, so the
    /// driver reads the parameter's width from the start of the slot).
    pub(super) fn marshal(
        &mut self,
        kernel: &str,
        param: &str,
        ty: &SigType,
        value: &Value<CudaTensor>,
    ) -> Result<u64, ExecError> {
        let err = |msg: String| ExecError::op(kernel, format!("parameter `{param}` ({ty}): {msg}"));
        match ty {
            SigType::Pointer(dtype) => match value {
                Value::Tensor(t) => {
                    if t.spec.dtype.size_bytes() != dtype.size_bytes() {
                        return Err(err(format!("given a {} tensor", t.spec.dtype)));
                    }
                    Ok(t.data_ptr())
                }
                Value::None => Ok(0),
                other => Err(err(format!("given a {}", other.kind()))),
            },
            SigType::Scalar(s) => {
                let scalar = match value {
                    Value::Int(v) => ScalarValue::Int(*v),
                    Value::Bool(b) => ScalarValue::Bool(*b),
                    Value::Float(f) => ScalarValue::Float(*f),
                    Value::Tensor(t) => self.read_scalar(
                        t,
                        &ScalarRequest {
                            symbol: None,
                            decl: None,
                            multiplier: 1,
                        },
                    )?,
                    other => return Err(err(format!("given a {}", other.kind()))),
                };
                encode_scalar(*s, scalar).map_err(err)
            }
            SigType::Constexpr | SigType::Other(_) => Err(err("cannot be passed at launch".into())),
        }
    }

    pub(super) fn launch_triton(
        &mut self,
        launch: &KernelLaunch<'_, CudaTensor>,
        meta: &TritonMeta,
    ) -> Result<(), ExecError> {
        let name = launch.kernel.name.as_str();
        let grid = launch
            .grid
            .ok_or_else(|| ExecError::op(name, "a Triton launch without a grid"))?;
        for (param, c) in &meta.constants {
            if let (ConstValue::Int(baked), Some(Value::Int(passed))) = (c, launch.kwargs.get(param.as_str())) {
                if baked != passed {
                    return Err(ExecError::op(
                        name,
                        format!("`{param}` = {passed}, but the kernel was compiled for {baked}"),
                    ));
                }
            }
        }
        let dim = |g: i64, axis: &str| {
            u32::try_from(g).map_err(|_| ExecError::op(name, format!("grid {axis} = {g} is outside 0..=2^32-1")))
        };
        let grid = (dim(grid[0], "x")?, dim(grid[1], "y")?, dim(grid[2], "z")?);
        let threads = meta
            .num_warps
            .checked_mul(32)
            .ok_or_else(|| ExecError::op(name, format!("num_warps {} is too large", meta.num_warps)))?;
        let function = self.function(name, meta)?;
        let mut slots: Vec<u64> = Vec::new();
        for (param, ty) in meta.runtime_params() {
            let value = launch
                .kwargs
                .get(param)
                .ok_or_else(|| ExecError::op(name, format!("no value for parameter `{param}`")))?;
            slots.push(self.marshal(name, param, ty, value)?);
        }
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let blocks = u64::from(grid.0) * u64::from(grid.1) * u64::from(grid.2);
        // Scratch buffers live until the launch is queued; their frees are
        // ordered after it on the same stream.
        let mut scratch = Vec::new();
        for per_cta in [meta.global_scratch, meta.profile_scratch].into_iter().flatten() {
            if per_cta == 0 {
                slots.push(0);
                continue;
            }
            let bytes = per_cta
                .checked_mul(blocks)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| ExecError::op(name, "scratch size overflows"))?;
            let s = self.alloc_storage(bytes)?;
            slots.push(s.ptr);
            scratch.push(s);
        }
        let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast::<c_void>()).collect();
        self.device
            .launch(function, grid, (threads, 1, 1), meta.shared_mem, &mut params)
            .map_err(|e| ExecError::op(name, e.to_string()))?;
        drop(scratch);
        Ok(())
    }
}

/// A scalar kernel argument at its signature width, in the low bytes of a u64.
fn encode_scalar(ty: ScalarType, v: ScalarValue) -> Result<u64, String> {
    let as_int = |v: ScalarValue| match v {
        ScalarValue::Int(i) => Ok(i),
        ScalarValue::Bool(b) => Ok(i64::from(b)),
        ScalarValue::Float(f) => Err(format!("given the float {f}")),
    };
    let as_float = |v: ScalarValue| match v {
        ScalarValue::Int(i) => i as f64,
        ScalarValue::Bool(b) => f64::from(u8::from(b)),
        ScalarValue::Float(f) => f,
    };
    let fit = |i: i64, lo: i64, hi: i64| {
        if (lo..=hi).contains(&i) {
            Ok(i as u64)
        } else {
            Err(format!("{i} does not fit {ty:?}"))
        }
    };
    Ok(match ty {
        ScalarType::I1 => fit(as_int(v)?, 0, 1)?,
        ScalarType::I8 => fit(as_int(v)?, i8::MIN.into(), i8::MAX.into())? & 0xff,
        ScalarType::I16 => fit(as_int(v)?, i16::MIN.into(), i16::MAX.into())? & 0xffff,
        ScalarType::I32 => fit(as_int(v)?, i32::MIN.into(), i32::MAX.into())? & 0xffff_ffff,
        ScalarType::I64 => as_int(v)? as u64,
        ScalarType::U8 => fit(as_int(v)?, 0, u8::MAX.into())?,
        ScalarType::U16 => fit(as_int(v)?, 0, u16::MAX.into())?,
        ScalarType::U32 => fit(as_int(v)?, 0, u32::MAX.into())?,
        ScalarType::U64 => {
            let i = as_int(v)?;
            u64::try_from(i).map_err(|_| format!("{i} does not fit u64"))?
        }
        ScalarType::Fp16 => u64::from(half::f16::from_f64(as_float(v)).to_bits()),
        ScalarType::Bf16 => u64::from(half::bf16::from_f64(as_float(v)).to_bits()),
        ScalarType::Fp32 => u64::from((as_float(v) as f32).to_bits()),
        ScalarType::Fp64 => as_float(v).to_bits(),
    })
}
