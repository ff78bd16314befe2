//! A model on the CPU: the host backend, with the bundle's compiled C++ and
//! Halide kernels loaded once and shared by every session.

use super::{LoadReport, ModelError, ModelOptions, ModelSource};
use crate::exec::host::kernels::{self as host_kernels, ScratchDir};
use crate::exec::host::{HostBackend, HostOptions, KernelFn};
use crate::exec::interp::Plan;
use crate::exec::safetensors::decode_raw;
use crate::exec::{Backend, ExecError, Tensor, Value};
use crate::format::bundle_json::CudaRngState;
use crate::format::images::SupplyError;
use crate::format::safetensors::raw_tensors;
use crate::ir::{GraphInput, Program};
use indexmap::IndexMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What every session shares.
struct Shared {
    program: Program,
    plan: Plan,
    /// The weights, laid out as the program declares them, by graph input name.
    weights: IndexMap<String, Tensor>,
    /// Graph inputs a call supplies (neither weights nor symbol inputs), in order.
    user_inputs: Vec<String>,
    /// The compiled kernels, loaded once.
    kernels: Vec<(String, KernelFn)>,
    /// The generator state each session starts from (`bundle.json`'s).
    rng: Option<CudaRngState>,
    limits: crate::Limits,
    idle_sessions: usize,
}

/// A model on the host backend.
pub(super) struct CpuModel {
    shared: Arc<Shared>,
    idle: Mutex<Vec<CpuSession>>,
}

/// The stored inputs' entry, as errors name it.
const INPUTS: &str = "inputs.safetensors";

/// The prefix of the private directory a package's kernels are written to.
const SCRATCH_PREFIX: &str = "wrapir-host-kernels";

impl CpuModel {
    /// Loads `source` for the host backend (see the module documentation).
    pub(super) fn load(
        source: &dyn ModelSource,
        options: &ModelOptions,
        started: Instant,
    ) -> Result<(CpuModel, LoadReport), ModelError> {
        let path = source.location();
        let bundle_err = |message: String| ModelError::Bundle {
            path: path.to_path_buf(),
            message,
        };
        let program = source.program().clone();
        let plan = crate::exec::run::compile_program_with_limits(&program, &options.limits)?;
        let mut loader = HostBackend::new(HostOptions::default()).with_limits(options.limits);
        let images = source.kernel_images();
        // A package's C++ kernels load from anonymous in-memory files; its
        // Halide kernels (or any, on a system without such files) are
        // written to a private scratch directory to be loaded (removed once
        // loaded; the loaded objects stay mapped), only where the caller says.
        let in_memory = images.directory().is_none();
        let scratch = match &options.scratch_dir {
            Some(parent) if in_memory && !host_kernels::host_kernel_names(&program).is_empty() => Some(
                ScratchDir::new_in(parent, SCRATCH_PREFIX)
                    .map_err(|e| bundle_err(format!("creating a scratch directory in {}: {e}", parent.display())))?,
            ),
            _ => None,
        };
        let scratch_images = scratch.as_ref().map(|s| s.path().join("images"));
        let kernels = host_kernels::load_kernels_from(&mut loader, &program, &*images, scratch_images.as_deref())
            .map_err(|e| {
                let hint = if in_memory && options.scratch_dir.is_none() && host_kernels::needs_scratch(&program) {
                    " (set `ModelOptions::scratch_dir` to a directory they may be written to)"
                } else {
                    ""
                };
                bundle_err(format!("{e}{hint}"))
            })?;
        drop(scratch);
        loader.check_runs(&program).map_err(|e| bundle_err(e.to_string()))?;
        let (weights, weight_bytes) = place_weights(source, &program, &mut loader, &options.limits)?;
        let user_inputs = super::call_inputs(&program, &weights);
        let shared = Arc::new(Shared {
            kernels: loader.kernels().map(|(n, f)| (n.to_string(), Arc::clone(f))).collect(),
            program,
            plan,
            user_inputs,
            rng: source.meta().cuda_rng,
            limits: options.limits,
            idle_sessions: options.idle_sessions.max(1),
            weights,
        });
        let report = LoadReport {
            device: "cpu".into(),
            kernels,
            weights: shared.weights.len(),
            weight_bytes,
            total: started.elapsed(),
        };
        let first = CpuSession::open(Arc::clone(&shared));
        Ok((
            CpuModel {
                shared,
                idle: Mutex::new(vec![first]),
            },
            report,
        ))
    }

    pub(super) fn input_names(&self) -> &[String] {
        &self.shared.user_inputs
    }

    pub(super) fn program(&self) -> &Program {
        &self.shared.program
    }

    /// An idle session, or a new one.
    pub(super) fn session(&self) -> CpuSession {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        idle.unwrap_or_else(|| CpuSession::open(Arc::clone(&self.shared)))
    }

    pub(super) fn run(&self, inputs: &IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, ModelError> {
        let mut session = self.session();
        let out = session.run(inputs);
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < self.shared.idle_sessions {
                idle.push(session);
            }
        }
        out
    }
}

/// Decodes the weights `source` stores and lays each out as the program
/// declares it (on `backend`, within `limits`); returns them with their
/// stored bytes.
fn place_weights(
    source: &dyn ModelSource,
    program: &Program,
    backend: &mut HostBackend,
    limits: &crate::Limits,
) -> Result<(IndexMap<String, Tensor>, u64), ModelError> {
    let path = source.location();
    let bundle_err = |message: String| ModelError::Bundle {
        path: path.to_path_buf(),
        message,
    };
    let names = source.weights();
    if names.is_empty() {
        return Ok((IndexMap::new(), 0));
    }
    let stored = source
        .stored_inputs()
        .map_err(|e: SupplyError| bundle_err(e.to_string()))?
        .ok_or_else(|| {
            bundle_err(format!(
                "bundle.json names {} weights but there is no {INPUTS}",
                names.len()
            ))
        })?;
    let stored: &[u8] = (*stored).as_ref();
    let raw = raw_tensors(stored, limits).map_err(|e| bundle_err(format!("{INPUTS}: {e}")))?;
    let mut weights = IndexMap::new();
    let mut bytes = 0u64;
    for name in names {
        let layout = program
            .main
            .inputs
            .iter()
            .any(|i| matches!(i, GraphInput::Tensor { name: n } if n.as_str() == name.as_str()))
            .then(|| program.main.layout(&crate::ir::BufName::new(name)))
            .flatten()
            .ok_or_else(|| {
                bundle_err(format!(
                    "bundle.json: weight `{name}` is not a tensor input of the program"
                ))
            })?;
        let raw = raw
            .get(name)
            .ok_or_else(|| bundle_err(format!("{INPUTS}: weight `{name}` is not stored")))?;
        bytes += raw.data.len() as u64;
        let stored = decode_raw(name, raw, limits).map_err(|e| bundle_err(format!("{INPUTS}: {e}")))?;
        let spec = crate::exec::run::concrete_layout(
            layout,
            &crate::sym::Bindings::new(),
            &format!("weight `{name}`"),
            &|s| format!("its layout names symbol `{s}`, which a weight cannot bind"),
        )?;
        if stored.dtype() != spec.dtype || stored.size() != spec.size.as_slice() {
            return Err(ExecError::Input(format!(
                "weight `{name}` is {}{:?}, the program declares {layout}",
                stored.dtype(),
                stored.size()
            ))
            .into());
        }
        let placed = if stored.spec() == &spec {
            stored
        } else {
            let placed = backend.allocate(&spec)?;
            placed.copy_from(&stored)?;
            placed
        };
        weights.insert(name.clone(), placed);
    }
    Ok((weights, bytes))
}

/// The calls of one thread: a host backend of its own with the model's
/// kernels registered.
pub(super) struct CpuSession {
    shared: Arc<Shared>,
    backend: HostBackend,
}

impl CpuSession {
    fn open(shared: Arc<Shared>) -> CpuSession {
        let mut backend = HostBackend::new(HostOptions::default()).with_limits(shared.limits);
        for (name, f) in &shared.kernels {
            backend.register_kernel(name, Arc::clone(f));
        }
        if let Some(state) = shared.rng {
            backend.set_cuda_rng(state);
        }
        CpuSession { shared, backend }
    }

    /// Runs one call on `inputs` (by graph input name) and the model's weights.
    pub(super) fn run(&mut self, inputs: &IndexMap<String, Tensor>) -> Result<Vec<Value<Tensor>>, ModelError> {
        let shared = &*self.shared;
        let mut all: IndexMap<String, &Tensor> = IndexMap::with_capacity(inputs.len() + shared.weights.len());
        for (name, t) in inputs {
            if shared.weights.contains_key(name) {
                return Err(ExecError::Input(format!(
                    "`{name}` is a weight of the model; it is not supplied per call"
                ))
                .into());
            }
            all.insert(name.clone(), t);
        }
        for (name, t) in &shared.weights {
            all.insert(name.clone(), t);
        }
        let out = crate::exec::run_plan(&shared.program, &shared.plan, &mut self.backend, &all)?;
        Ok(out.outputs)
    }
}
