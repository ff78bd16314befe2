//! The CUDA backend's options: the device, where kernel images come from,
//! where the CUDA libraries and the kernel cache are, the host fallback,
//! start-up preloads, math modes and the generator state.

use super::kernels::ExternOpLog;
use super::CudaPaths;
use crate::exec::host::HostOptions;
use crate::format::bundle_json::MathModes;
use crate::format::images::{KernelImageSource, NoKernelImages};
use std::sync::Arc;

/// Options of the CUDA backend.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// The device ordinal.
    pub ordinal: usize,
    /// Where kernel images are found by their `cubin` path, supplied by the
    /// caller (a bundle's `KernelImages`: its directory's files or a
    /// package's entries). Default [`NoKernelImages`]: a program that
    /// launches a compiled kernel needs a source.
    pub kernels: Arc<dyn KernelImageSource>,
    /// Where the CUDA libraries not on the loader's paths and the cache of
    /// compiled built-in kernels are. Default [`CudaPaths::default`]: the
    /// loader's paths only, no disk cache; [`CudaOptions::from_env`] (what
    /// the CLI and the runtime library use) reads them from the environment.
    pub paths: CudaPaths,
    /// Run extern ops the GPU path does not implement (no row of
    /// [`crate::exec::device_ops::cuda_ops`], or operands the row refuses) on
    /// the host backend's ops, copying data through host memory, and count
    /// them in [`CudaOptions::extern_ops`]. Default `false`: such an op is an
    /// error naming it, so a run never leaves the device silently (the CLI's
    /// `--allow-host-fallback` turns this on).
    pub host_fallback: bool,
    /// Options of the host ops used by the fallback. The default follows
    /// ATen's CUDA kernels: `jagged_zero_fill` is on (rows longer than the
    /// padded width are written as 0 rather than raising, as on the CPU).
    pub host: HostOptions,
    /// Counts of the extern ops run on the device and through the host fallback.
    pub extern_ops: ExternOpLog,
    /// Load the cuBLAS library on a background thread while [`CudaBackend::new`](super::CudaBackend::new)
    /// opens the device, so that the first matmul does not pay the library
    /// load after `cuInit` (default `false`; [`CudaOptions::preload_for`] sets
    /// it for programs with matmuls).
    pub preload_blas: bool,
    /// Compile the built-in kernels (NVRTC) on a background thread while
    /// [`CudaBackend::new`](super::CudaBackend::new) creates the context (default `false`;
    /// [`CudaOptions::preload_for`] sets it for programs with other extern ops).
    pub preload_builtins: bool,
    /// Load cuDNN (and its sub-libraries) on a background thread while
    /// [`CudaBackend::new`](super::CudaBackend::new) creates the context (default `false`;
    /// [`CudaOptions::preload_for`] sets it for programs with convolutions).
    pub preload_dnn: bool,
    /// The math modes the program was compiled under (PyTorch's defaults
    /// unless the bundle records others).
    pub math: MathModes,
    /// The CUDA generator state `aten.randint` (Inductor's seed buffer)
    /// starts from (a bundle's `cuda_rng`; default PyTorch's default seed at
    /// offset 0); each call advances it as PyTorch's generator advances
    /// (see [`crate::exec::random`]).
    pub cuda_rng: crate::format::bundle_json::CudaRngState,
    /// How graph replay treats a recording's device reads: one graph with
    /// the reads checked on the device under conditional nodes, or segments
    /// with host reads between them (default [`GraphReads::Auto`]).
    pub graph_reads: super::GraphReads,
    /// How graph replay orders a recording's operations: one chain, or
    /// by the program's dependency DAG where the plan has one
    /// ([`crate::exec::interp::Plan::dag`]; default
    /// [`super::GraphStreams::Single`]).
    pub graph_streams: super::GraphStreams,
    /// The most branches a concurrent graph replay runs at once (see
    /// [`super::GraphStreams::Concurrent`]): the operations are laid on at
    /// most this many chains, each following its own predecessor, which
    /// costs concurrency where the DAG is wider and saves the joins between
    /// chains; 1 is one chain captured operation by operation (default 0:
    /// as many as the DAG allows).
    pub graph_branches: usize,
    /// Serialized cuDNN plans for the program's convolutions, supplied by
    /// the caller (a package's `cudnn-plans/` entries), restored instead of
    /// made when one has a plan's name (default: none).
    pub cudnn_plans: super::CudnnPlans,
}

impl CudaOptions {
    /// The default options with [`CudaOptions::paths`] read from the
    /// process environment ([`CudaPaths::from_env`]).
    pub fn from_env() -> Self {
        CudaOptions {
            paths: CudaPaths::from_env(),
            ..CudaOptions::default()
        }
    }

    /// These options with the start-up work `program` needs started early,
    /// by what runs its extern ops ([`crate::exec::device_ops::cuda_ops`]):
    /// [`CudaOptions::preload_blas`] for cuBLAS / cuBLASLt ops,
    /// [`CudaOptions::preload_dnn`] for cuDNN ops and
    /// [`CudaOptions::preload_builtins`] for ops on the built-in kernels.
    pub fn preload_for(mut self, program: &crate::ir::Program) -> Self {
        let calls = std::iter::once(&program.main)
            .chain(program.subgraphs.values())
            .flat_map(|g| &g.lines)
            .filter_map(crate::ir::Line::extern_call);
        for call in calls {
            match crate::exec::device_ops::cuda_op(&call.op).map(|row| row.via) {
                Some("cuBLAS" | "cuBLASLt") => self.preload_blas = true,
                Some("cuDNN") => self.preload_dnn = true,
                // The attention kernels are their own module, compiled per head dim.
                Some(crate::exec::op::OWN_ATTENTION) => {}
                Some(_) => self.preload_builtins = true,
                None => {}
            }
        }
        self
    }
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            ordinal: 0,
            kernels: Arc::new(NoKernelImages),
            paths: CudaPaths::default(),
            host_fallback: false,
            host: HostOptions {
                jagged_zero_fill: true,
                ..Default::default()
            },
            extern_ops: ExternOpLog::default(),
            preload_blas: false,
            preload_builtins: false,
            preload_dnn: false,
            math: MathModes::default(),
            cuda_rng: crate::format::bundle_json::CudaRngState::default(),
            graph_reads: super::GraphReads::Auto,
            graph_streams: super::GraphStreams::Single,
            graph_branches: 0,
            cudnn_plans: super::CudnnPlans::default(),
        }
    }
}
