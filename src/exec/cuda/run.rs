//! Whole-program runs on the CUDA backend.

use super::{CudaBackend, CudaOptions, CudaTensor};
use crate::exec::interp::RunOutput;
use crate::exec::run::{compile_program, place_inputs as place_host_inputs, run_program as run};
use crate::exec::{Backend, ExecError, RunError, Tensor, Value};
use crate::format::bundle_json::BundleMeta;
use crate::format::images::KernelImageSource;
use crate::ir::Program;
use indexmap::IndexMap;

/// Runs `program` on a new [`CudaBackend`] with `options`
/// ([`crate::exec::run_program`]) and copies the outputs back to the host.
pub fn run_program(
    program: &Program,
    options: CudaOptions,
    inputs: &IndexMap<String, Tensor>,
) -> Result<RunOutput<Tensor>, RunError> {
    let mut backend = CudaBackend::new(options).map_err(ExecError::from)?;
    run_to_host(program, &mut backend, inputs)
}

/// Runs `program` on `backend` ([`crate::exec::run_program`]), copies the
/// outputs back to the host and waits for the backend's stream.
pub fn run_to_host(
    program: &Program,
    backend: &mut CudaBackend,
    inputs: &IndexMap<String, Tensor>,
) -> Result<RunOutput<Tensor>, RunError> {
    let out = run(program, backend, inputs)?;
    let outputs = out
        .outputs
        .iter()
        .map(|v| to_host(backend, v))
        .collect::<Result<Vec<_>, _>>()?;
    backend.synchronize().map_err(ExecError::from)?;
    Ok(RunOutput {
        outputs,
        symbols: out.symbols,
    })
}

/// Compiles `program` and places `inputs` on the device as
/// [`crate::exec::run_program`] does, without running it: returns the plan, the graph
/// inputs in placeholder order and the constants, ready for
/// [`Plan::run`](crate::exec::interp::Plan::run) or a prepared plan.
#[allow(clippy::type_complexity)]
pub fn place_inputs(
    program: &Program,
    backend: &mut CudaBackend,
    inputs: &IndexMap<String, Tensor>,
) -> Result<
    (
        crate::exec::interp::Plan,
        Vec<Value<CudaTensor>>,
        IndexMap<String, CudaTensor>,
    ),
    RunError,
> {
    // Concurrent graph replay orders operations by the program's DAG.
    let plan = if backend.options.graph_streams.plans_concurrency() {
        crate::exec::compile_program_with_dag(program, &backend.limits())?
    } else {
        compile_program(program)?
    };
    let (args, constants) = place_host_inputs(program, inputs, &mut |_, host, spec| backend.place(host, spec))?;
    Ok((plan, args, constants))
}

/// Copies every tensor of `v` to the host.
pub fn to_host(backend: &mut CudaBackend, v: &Value<CudaTensor>) -> Result<Value<Tensor>, ExecError> {
    v.try_map_tensors(&mut |t| backend.copy_out(t))
}

impl CudaOptions {
    /// Options for running a bundle whose `bundle.json` says `meta`, with
    /// kernel images from `kernels` (a bundle's `kernel_images()`, packages
    /// included, or any other [`KernelImageSource`]), the math modes the bundle was compiled under
    /// ([`BundleMeta::math`], PyTorch's defaults when it records none) and its
    /// generator state. Everything else is [`CudaOptions::default`], so the
    /// host fallback is off unless the caller turns it on.
    pub fn for_bundle(kernels: impl KernelImageSource + 'static, meta: &BundleMeta) -> CudaOptions {
        CudaOptions {
            kernels: std::sync::Arc::new(kernels),
            math: meta.math,
            cuda_rng: meta.cuda_rng.unwrap_or_default(),
            ..CudaOptions::default()
        }
    }
}
