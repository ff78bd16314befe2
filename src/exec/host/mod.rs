//! The host backend: real tensors in CPU memory.
//!
//! Kernels and extern ops come from a registry keyed by name. Extern ops are
//! looked up by the op string the program uses, then by its normalised key
//! (`torch.ops.aten.mm.default` and `extern_kernels.mm` -> `aten.mm`), so a
//! library user can register a Rust closure under either form. Kernels are
//! looked up by kernel name. `out=` variants are handled for every op: the
//! result is copied into `out`.

pub(crate) mod attention;
pub(crate) mod broadcast;
mod builtin;
pub(crate) mod complex;
pub(crate) mod conv;
mod detection;
mod gemm;
mod gemm_ops;
mod grouped_mm;
mod histc;
pub(crate) mod int_gemm;
pub(crate) mod jagged;
pub mod kernels;
pub(crate) mod layout;
pub(crate) mod ops;
pub(crate) mod pointwise;
mod random;
mod rnn;
mod scaled_mm;
pub(crate) mod segment;
pub(crate) mod sort;
pub(crate) mod tensor;

use crate::exec::op::{op_key, CATALOGUE};

use crate::exec::{
    Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, Tensor, TensorSpec, Value,
};
use builtin::{Args, BuiltinOptions};
use indexmap::IndexMap;
use jagged::Overflow;
use std::collections::BTreeMap;
use std::sync::Arc;
use tensor::MemCounter;

/// A user extern op: positional and keyword arguments in, a value out.
pub type ExternFn =
    Arc<dyn Fn(&[Value<Tensor>], &IndexMap<String, Value<Tensor>>) -> Result<Value<Tensor>, ExecError> + Send + Sync>;

/// A user kernel: mutates its tensor arguments in place.
pub type KernelFn = Arc<dyn Fn(&KernelLaunch<'_, Tensor>) -> Result<(), ExecError> + Send + Sync>;

/// Options of the host backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostOptions {
    /// `_padded_dense_to_jagged_forward` on rows longer than the padded width
    /// (or a `total_L` other than `offsets[-1]`): `false` (default) raises like
    /// ATen's CPU kernel; `true` writes 0 like the CUDA kernel and Inductor's lowering.
    pub jagged_zero_fill: bool,
    /// Skip the program's tensor asserts (sizes, strides, dtypes,
    /// alignments; [`Backend::checks_tensor_asserts`]). Default `false`.
    pub skip_tensor_asserts: bool,
}

/// Runs programs on the CPU.
pub struct HostBackend {
    options: HostOptions,
    ops: BTreeMap<String, ExternFn>,
    kernels: BTreeMap<String, KernelFn>,
    limits: crate::Limits,
    /// `limits.max_alloc_bytes`, shared with the built-in ops (their results).
    op_alloc_limit: Arc<std::sync::atomic::AtomicU64>,
    memory: Arc<MemCounter>,
    /// The CUDA generator state the host's `aten.randint` draws from.
    rng: Arc<std::sync::Mutex<crate::format::bundle_json::CudaRngState>>,
}

impl Default for HostBackend {
    fn default() -> Self {
        HostBackend::new(HostOptions::default())
    }
}

impl std::fmt::Debug for HostBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBackend")
            .field("options", &self.options)
            .field("ops", &self.ops.keys().collect::<Vec<_>>())
            .field("kernels", &self.kernels.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl HostBackend {
    /// A backend with the built-in ops.
    pub fn new(options: HostOptions) -> Self {
        let mut b = HostBackend {
            options,
            ops: BTreeMap::new(),
            kernels: BTreeMap::new(),
            limits: crate::Limits::default(),
            op_alloc_limit: Arc::new(std::sync::atomic::AtomicU64::new(
                crate::Limits::default().max_alloc_bytes,
            )),
            memory: Arc::default(),
            rng: Arc::default(),
        };
        let builtin_options = BuiltinOptions {
            rng: Arc::clone(&b.rng),
            jagged_overflow: if options.jagged_zero_fill {
                Overflow::ZeroFill
            } else {
                Overflow::Error
            },
            max_alloc_bytes: Arc::clone(&b.op_alloc_limit),
        };
        // The catalogue's ops the host has built in, and the stream ops
        // (which every backend runs in program order).
        let catalogue = CATALOGUE
            .iter()
            .filter_map(|entry| ops::builtin(&entry.op).map(|f| (entry.key, f)));
        let streams = crate::exec::op::stream::STREAM_OPS.map(|key| (key, ops::stream_op as ops::Builtin));
        for (key, f) in catalogue.chain(streams) {
            let key = key.to_string();
            let op_name = key.clone();
            let options = builtin_options.clone();
            b.ops.insert(
                key,
                Arc::new(
                    move |args: &[Value<Tensor>], kwargs: &IndexMap<String, Value<Tensor>>| {
                        f(
                            &Args {
                                op: &op_name,
                                args: &args.into(),
                                kwargs: &kwargs.into(),
                            },
                            &options,
                        )
                    },
                ),
            );
        }
        b
    }

    /// Runs within `limits` (memory, `while_loop` fuel) instead of [`crate::Limits::default`].
    pub fn with_limits(mut self, limits: crate::Limits) -> Self {
        self.limits = limits;
        self.op_alloc_limit
            .store(limits.max_alloc_bytes, std::sync::atomic::Ordering::Relaxed);
        self.memory = Arc::new(MemCounter::with_limits(&limits));
        self
    }

    /// The limits this backend runs within.
    pub fn limits(&self) -> crate::Limits {
        self.limits
    }

    /// Sets the CUDA generator state that `aten.randint` (Inductor's seed
    /// buffer) draws from: PyTorch's values at that state (see
    /// [`crate::exec::random`]). Default: PyTorch's default seed, offset 0.
    pub fn set_cuda_rng(&self, state: crate::format::bundle_json::CudaRngState) {
        if let Ok(mut s) = self.rng.lock() {
            *s = state;
        }
    }

    /// The generator state now (advanced by every `aten.randint` call).
    pub fn cuda_rng(&self) -> crate::format::bundle_json::CudaRngState {
        self.rng.lock().map(|s| *s).unwrap_or_default()
    }

    /// Registers (or replaces) an extern op under `name` (an op string or a key like `aten.foo`).
    pub fn register_op(&mut self, name: &str, f: ExternFn) {
        self.ops.insert(name.to_string(), f);
    }

    /// Registers (or replaces) a kernel by kernel name.
    pub fn register_kernel(&mut self, name: &str, f: KernelFn) {
        self.kernels.insert(name.to_string(), f);
    }

    /// Registered op names.
    pub fn op_names(&self) -> Vec<String> {
        self.ops.keys().cloned().collect()
    }

    /// Whether this backend runs `op`: registered under the op string, or
    /// under its key ([`op_key`]), as [`Backend::call_extern`] looks it up.
    pub fn has_op(&self, op: &str) -> bool {
        self.find_op(op).is_some()
    }

    /// The registered op `op` (by the op string, then by its key).
    fn find_op(&self, op: &str) -> Option<&ExternFn> {
        self.ops.get(op).or_else(|| self.ops.get(&op_key(op)))
    }

    /// The registered op of a call (by the op string, then by its key: for
    /// an op of the catalogue the key the plan resolved, with no string built).
    fn find_call_op(&self, call: &ExternCall<'_, Tensor>) -> Option<&ExternFn> {
        self.ops.get(call.op).or_else(|| match call.family.key() {
            Some(key) => self.ops.get(key),
            None => self.ops.get(&op_key(call.op)),
        })
    }

    /// Registered kernel names.
    pub fn kernel_names(&self) -> Vec<String> {
        self.kernels.keys().cloned().collect()
    }

    /// Checks, before any call, that this backend can run every kernel and
    /// extern op of `program` (each kernel registered, as a bundle's loaded
    /// host kernels are; each op registered or built in): the first that it
    /// cannot is an error naming it, its line, and for a GPU kernel the
    /// device it needs.
    pub fn check_runs(&self, program: &crate::ir::Program) -> Result<(), ExecError> {
        use crate::ir::KernelBackend;
        for def in program.kernels.values() {
            let name = def.name.as_str();
            if self.kernels.contains_key(name) {
                continue;
            }
            let gpu = match &def.backend {
                KernelBackend::Triton(_) | KernelBackend::CudaC => true,
                KernelBackend::Halide(m) => m.is_cuda(),
                KernelBackend::Cpp(_) | KernelBackend::Host => false,
            };
            if gpu {
                return Err(ExecError::Unsupported(format!(
                    "kernel `{name}` is a CUDA {} kernel: the host backend cannot run it (run the program on a CUDA device)",
                    def.backend.keyword()
                )));
            }
            return Err(ExecError::UnknownKernel {
                backend: "host",
                name: name.to_string(),
                supported: self.kernel_names(),
            });
        }
        match crate::exec::uses::extern_uses(program)
            .into_iter()
            .find(|u| !self.has_op(&u.op))
        {
            Some(u) => Err(ExecError::Unsupported(format!("{u}: the host backend has no such op"))),
            None => Ok(()),
        }
    }

    /// The registered kernels by name: what another backend registers to
    /// run the same compiled kernels (one load shared by many backends).
    pub fn kernels(&self) -> impl Iterator<Item = (&str, &KernelFn)> {
        self.kernels.iter().map(|(name, f)| (name.as_str(), f))
    }
}

impl Backend for HostBackend {
    type Tensor = Tensor;

    fn name(&self) -> &'static str {
        "host"
    }

    fn allocate(&mut self, spec: &TensorSpec) -> Result<Tensor, ExecError> {
        Tensor::allocate(spec, Some(Arc::clone(&self.memory)))
    }

    fn spec<'a>(&'a self, tensor: &'a Tensor) -> &'a TensorSpec {
        tensor.spec()
    }

    fn view(&mut self, base: &Tensor, size: &[i64], stride: &[i64], offset: i64) -> Result<Tensor, ExecError> {
        base.view(size, stride, offset)
    }

    fn launch(&mut self, launch: KernelLaunch<'_, Tensor>) -> Result<(), ExecError> {
        let name = launch.kernel.name.as_str();
        let f = self.kernels.get(name).ok_or_else(|| ExecError::UnknownKernel {
            backend: "host",
            name: name.to_string(),
            supported: self.kernel_names(),
        })?;
        f(&launch)
    }

    fn call_extern(&mut self, call: ExternCall<'_, Tensor>) -> Result<Value<Tensor>, ExecError> {
        let f = self.find_call_op(&call).ok_or_else(|| ExecError::UnknownOp {
            backend: "host",
            op: call.op.to_string(),
            supported: self.op_names(),
        })?;
        // Registered ops take an owned map without `out` (the result is
        // copied into it below).
        let kwargs: IndexMap<String, Value<Tensor>> = call
            .kwargs
            .iter()
            .filter(|(k, _)| *k != "out")
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let out = call.kwargs.get("out").cloned();
        let result = f(&call.args.to_vec(), &kwargs)?;
        match out {
            None | Some(Value::None) => Ok(result),
            Some(Value::Tensor(out)) => {
                let Value::Tensor(r) = &result else {
                    return Err(ExecError::op(
                        call.op,
                        format!("`out=` given but the op returned a {}", result.kind()),
                    ));
                };
                if r.size() != out.size() {
                    return Err(ExecError::op(
                        call.op,
                        format!(
                            "result of shape {:?} does not fit `out` of shape {:?}",
                            r.size(),
                            out.size()
                        ),
                    ));
                }
                out.copy_from(r)?;
                Ok(Value::None)
            }
            Some(other) => Err(ExecError::op(
                call.op,
                format!("`out` must be a tensor, got {}", other.kind()),
            )),
        }
    }

    fn read_scalar(&mut self, tensor: &Tensor, _request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        if tensor.numel() != 1 {
            return Err(ExecError::Type(format!(
                "item() of a tensor with {} elements",
                tensor.numel()
            )));
        }
        Ok(match tensor.dtype() {
            crate::ir::DType::Bool => ScalarValue::Bool(tensor.to_i64_vec()?[0] != 0),
            d if d.is_floating() => ScalarValue::Float(tensor.to_f64_vec()?[0]),
            _ => ScalarValue::Int(tensor.to_i64_vec()?[0]),
        })
    }

    fn copy_in(&mut self, tensor: &Tensor) -> Result<Tensor, ExecError> {
        Ok(tensor.clone())
    }

    /// The input itself when it has its declared layout already (a model's
    /// weights, placed once), else a copy laid out as declared.
    fn place(&mut self, host: &Tensor, spec: &TensorSpec) -> Result<Tensor, ExecError> {
        if host.spec() == spec {
            return Ok(host.clone());
        }
        let placed = self.allocate(spec)?;
        placed.copy_from(host)?;
        Ok(placed)
    }

    /// A host run works on the caller's tensors, as a PyTorch call does: an
    /// input already in its declared layout is the program's buffer itself,
    /// so what the program writes into it (a mutated input, such as a KV
    /// cache updated in place) lands there; an input that had to be laid out
    /// is a copy, copied back into the caller's tensor here.
    fn returns_inputs(&self) -> bool {
        true
    }

    fn return_input(&mut self, supplied: &Tensor, placed: &Tensor) -> Result<(), ExecError> {
        if supplied.spec() != placed.spec() {
            supplied.copy_from(placed)?;
        }
        Ok(())
    }

    fn copy_out(&mut self, tensor: &Tensor) -> Result<Tensor, ExecError> {
        Ok(tensor.clone())
    }

    fn check_alignment(&self, tensor: &Tensor, alignment: u32) -> Result<(), ExecError> {
        let addr = tensor.data_address();
        if alignment > 0 && addr % alignment as usize != 0 {
            return Err(ExecError::Assert(format!("data is not {alignment}-byte aligned")));
        }
        Ok(())
    }

    fn memory(&self) -> MemoryStats {
        self.memory.stats()
    }

    fn limits(&self) -> crate::Limits {
        self.limits
    }

    fn checks_tensor_asserts(&self) -> bool {
        !self.options.skip_tensor_asserts
    }
}
