//! The CUDA backend's stand-in in a build without the `cuda` feature: the
//! same public names as [`exec::cuda`](self) with the feature on, so that
//! callers (the CLI, [`crate::exec::bench`]) compile the same way in both
//! builds. Nothing here runs: [`CudaBackend::new`], [`run_program`] and
//! [`device_arch`] return [`CudaError::NotBuilt`], and the backend, its
//! tensors and recordings cannot be made, so their methods are never
//! reached. No result is ever made up.
//!
//! Only the names callers outside the backend use are here; see the real
//! module's documentation for what each does.

pub use super::cuda_paths::{CudaPaths, KERNEL_CACHE_VAR, LIBRARY_PATH_VAR};
pub use super::cuda_reports::{
    CriticalPath, GraphReads, GraphStreams, LaunchFloor, LibraryCost, LibraryVersion, LoadTimings, Replay,
};
pub use super::model_source::{CudnnPlans, ModelError, ModelSource};
use super::{
    Backend, ExecError, ExternCall, KernelLaunch, RunError, ScalarRequest, ScalarValue, Tensor, TensorSpec, Value,
};
use crate::exec::interp::{Plan, RunOutput};
use crate::format::bundle_json::BundleMeta;
use crate::format::bundle_json::CudaRngState;
use crate::ir::Program;
use indexmap::IndexMap;
use std::convert::Infallible;

/// Why the CUDA backend cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// This build has no CUDA backend.
    #[error("wrapir was built without the `cuda` feature (rebuild with `--features cuda`)")]
    NotBuilt,
}

impl From<CudaError> for ExecError {
    fn from(e: CudaError) -> Self {
        ExecError::Op {
            op: "cuda".into(),
            message: e.to_string(),
        }
    }
}

/// Options of the CUDA backend (the fields callers set in either build).
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// The device ordinal.
    pub ordinal: usize,
    /// Where kernel images are found by their `cubin` path, supplied by the caller.
    pub kernels: std::sync::Arc<dyn crate::format::images::KernelImageSource>,
    /// Where the CUDA libraries and the kernel cache are.
    pub paths: CudaPaths,
    /// Run extern ops the GPU path does not implement on the host.
    pub host_fallback: bool,
    /// Counts of the extern ops run on the device and through the host fallback.
    pub extern_ops: ExternOpLog,
    /// How graph replay treats a recording's device reads.
    pub graph_reads: GraphReads,
    /// How graph replay orders a recording's operations.
    pub graph_streams: GraphStreams,
    /// Serialized cuDNN plans supplied by the caller.
    pub cudnn_plans: CudnnPlans,
    /// Options of the host ops the fallback runs (and the tensor-assert
    /// switch both backends of a run share).
    pub host: super::host::HostOptions,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            ordinal: 0,
            kernels: std::sync::Arc::new(crate::format::images::NoKernelImages),
            paths: CudaPaths::default(),
            host_fallback: false,
            extern_ops: ExternOpLog,
            graph_reads: GraphReads::Auto,
            graph_streams: GraphStreams::Single,
            host: super::host::HostOptions {
                jagged_zero_fill: true,
                ..Default::default()
            },
            cudnn_plans: CudnnPlans::default(),
        }
    }
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

    /// Options for running a bundle, with kernel images from `kernels`.
    pub fn for_bundle(
        kernels: impl crate::format::images::KernelImageSource + 'static,
        _meta: &BundleMeta,
    ) -> CudaOptions {
        CudaOptions {
            kernels: std::sync::Arc::new(kernels),
            ..CudaOptions::default()
        }
    }

    /// These options unchanged: there is no start-up work to begin early.
    pub fn preload_for(self, _program: &Program) -> Self {
        self
    }
}

/// Counts of extern ops by where they ran: always empty, as nothing runs.
#[derive(Clone, Debug, Default)]
pub struct ExternOpLog;

impl ExternOpLog {
    /// Ops that ran on the device: none.
    pub fn device_ops(&self) -> Vec<(String, usize)> {
        Vec::new()
    }

    /// Ops that ran through the host fallback: none.
    pub fn host_ops(&self) -> Vec<(String, usize)> {
        Vec::new()
    }
}

/// A CUDA backend: cannot be made in this build ([`CudaBackend::new`] fails).
#[derive(Debug)]
pub struct CudaBackend {
    never: Infallible,
}

/// A device tensor: cannot be made in this build.
#[derive(Clone, Debug)]
pub struct CudaTensor {
    never: Infallible,
}

/// A recorded run: cannot be made in this build.
#[derive(Debug)]
pub struct Prepared {
    never: Infallible,
}

/// The GPU of device `ordinal`: [`CudaError::NotBuilt`].
pub fn device_arch(_ordinal: usize) -> Result<(String, u32), CudaError> {
    Err(CudaError::NotBuilt)
}

/// The CUDA libraries' versions: [`CudaError::NotBuilt`].
pub fn library_versions(_paths: &CudaPaths) -> Result<Vec<LibraryVersion>, CudaError> {
    Err(CudaError::NotBuilt)
}

impl From<CudaError> for ModelError {
    fn from(e: CudaError) -> Self {
        ModelError::Exec(e.into())
    }
}

/// Makes the convolution plans of `source` on a GPU: [`CudaError::NotBuilt`].
pub fn make_cudnn_plans(
    _source: &dyn ModelSource,
    _ordinal: usize,
    _paths: CudaPaths,
) -> Result<CudnnPlans, ModelError> {
    Err(CudaError::NotBuilt.into())
}

/// Runs `program` on a new backend: [`CudaError::NotBuilt`].
pub fn run_program(
    _program: &Program,
    _options: CudaOptions,
    _inputs: &IndexMap<String, Tensor>,
) -> Result<RunOutput<Tensor>, RunError> {
    Err(ExecError::from(CudaError::NotBuilt).into())
}

/// The device inputs of `program` (never reached: there is no backend).
#[allow(clippy::type_complexity)]
pub fn place_inputs(
    _program: &Program,
    backend: &mut CudaBackend,
    _inputs: &IndexMap<String, Tensor>,
) -> Result<(Plan, Vec<Value<CudaTensor>>, IndexMap<String, CudaTensor>), RunError> {
    match backend.never {}
}

/// Copies every tensor of `v` to the host (never reached).
pub fn to_host(backend: &mut CudaBackend, _v: &Value<CudaTensor>) -> Result<Value<Tensor>, ExecError> {
    match backend.never {}
}

/// The raw launch floor (never reached).
pub fn launch_floor(backend: &mut CudaBackend, _kernels: usize, _repeats: usize) -> Result<LaunchFloor, ExecError> {
    match backend.never {}
}

impl CudaBackend {
    /// Opens the device: [`CudaError::NotBuilt`].
    pub fn new(_options: CudaOptions) -> Result<Self, CudaError> {
        Err(CudaError::NotBuilt)
    }

    /// Loads the kernel images of `program`.
    pub fn preload_kernels(&mut self, _program: &Program) -> Result<usize, ExecError> {
        match self.never {}
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        match self.never {}
    }

    /// The device's name.
    pub fn device_name(&self) -> Result<String, CudaError> {
        match self.never {}
    }

    /// Bytes of the GPU's memory in use, by every process.
    pub fn device_memory_in_use(&self) -> Result<u64, CudaError> {
        match self.never {}
    }

    /// Where start-up work went.
    pub fn load_timings(&self) -> LoadTimings {
        match self.never {}
    }

    /// Sets the generator state.
    pub fn set_cuda_rng(&mut self, _state: CudaRngState) -> Result<(), ExecError> {
        match self.never {}
    }

    /// The generator state.
    pub fn cuda_rng(&self) -> Result<CudaRngState, ExecError> {
        match self.never {}
    }

    /// Waits for the backend's stream.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        match self.never {}
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn allocate(&mut self, _spec: &TensorSpec) -> Result<CudaTensor, ExecError> {
        match self.never {}
    }

    fn spec<'a>(&'a self, tensor: &'a CudaTensor) -> &'a TensorSpec {
        match tensor.never {}
    }

    fn view(
        &mut self,
        _base: &CudaTensor,
        _size: &[i64],
        _stride: &[i64],
        _offset: i64,
    ) -> Result<CudaTensor, ExecError> {
        match self.never {}
    }

    fn launch(&mut self, _launch: KernelLaunch<'_, CudaTensor>) -> Result<(), ExecError> {
        match self.never {}
    }

    fn call_extern(&mut self, _call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
        match self.never {}
    }

    fn read_scalar(&mut self, _tensor: &CudaTensor, _request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        match self.never {}
    }

    fn copy_in(&mut self, _tensor: &Tensor) -> Result<CudaTensor, ExecError> {
        match self.never {}
    }

    fn copy_out(&mut self, _tensor: &CudaTensor) -> Result<Tensor, ExecError> {
        match self.never {}
    }
}

impl Prepared {
    /// Records a run of `plan` (never reached: there is no backend).
    pub fn record(
        backend: &mut CudaBackend,
        _plan: &Plan,
        _inputs: Vec<Value<CudaTensor>>,
        _constants: &IndexMap<String, CudaTensor>,
    ) -> Result<(Prepared, Vec<Value<CudaTensor>>), ExecError> {
        match backend.never {}
    }

    /// Recorded operations that launch.
    pub fn launches(&self) -> usize {
        match self.never {}
    }

    /// Library calls among them.
    pub fn library_calls(&self) -> usize {
        match self.never {}
    }

    /// Device reads a replay makes.
    pub fn reads(&self) -> usize {
        match self.never {}
    }

    /// Bytes of the arena.
    pub fn arena_bytes(&self) -> u64 {
        match self.never {}
    }

    /// Bytes of the single-stream plan's arena.
    pub fn single_stream_arena_bytes(&self) -> u64 {
        match self.never {}
    }

    /// Whether graph replay follows the program's dependency DAG.
    pub fn is_concurrent(&self) -> bool {
        match self.never {}
    }

    /// Why a recording asked to replay concurrently replays on one stream.
    pub fn single_stream_reason(&self) -> Option<&str> {
        match self.never {}
    }

    /// The outputs of the last replay.
    pub fn outputs(&self) -> &[Value<CudaTensor>] {
        match self.never {}
    }

    /// Why the program writes its inputs, when it does.
    pub fn writes_inputs(&self) -> Option<&str> {
        match self.never {}
    }

    /// Replays the recording.
    pub fn replay(&mut self, _backend: &CudaBackend) -> Result<Replay, ExecError> {
        match self.never {}
    }

    /// Replays the recording as CUDA graphs.
    pub fn replay_graphs(&mut self, _backend: &CudaBackend) -> Result<Replay, ExecError> {
        match self.never {}
    }

    /// Graphs captured.
    pub fn captured_graphs(&self) -> usize {
        match self.never {}
    }

    /// How graph replay runs the recording.
    pub fn graph_form(&self) -> Option<String> {
        match self.never {}
    }

    /// Device µs of one graph replay.
    pub fn graph_device_us(&self, _backend: &CudaBackend, _samples: usize) -> Result<Option<f64>, ExecError> {
        match self.never {}
    }

    /// Each operation's isolated device time and the critical-path bound.
    pub fn critical_path(
        &mut self,
        _backend: &CudaBackend,
        _samples: usize,
    ) -> Result<Option<CriticalPath>, ExecError> {
        match self.never {}
    }

    /// Host µs per replay spent in the libraries alone, by kind of call.
    pub fn library_costs(
        &self,
        _backend: &CudaBackend,
        _calls: usize,
        _repeats: usize,
    ) -> Result<Vec<LibraryCost>, ExecError> {
        match self.never {}
    }

    /// Host µs of the recording's kernel launches alone.
    pub fn bare_launch_floor_us(&mut self, _backend: &CudaBackend, _repeats: usize) -> Result<f64, ExecError> {
        match self.never {}
    }
}

/// One rank of a multi-rank run on GPUs (see the real module).
pub type CudaRankJob<'a> = super::collective::RankJob<'a, CudaOptions>;

/// Ranks on GPUs: the world is never made ([`CudaError::NotBuilt`]).
impl super::collective::RankBackend for CudaOptions {
    type World = std::convert::Infallible;

    fn world(
        _groups: super::collective::ProcessGroups,
        _options: super::collective::CollectiveOptions,
        _first: &Self,
    ) -> Result<Self::World, ExecError> {
        Err(CudaError::NotBuilt.into())
    }

    fn abort(world: &Self::World, _message: &str) {
        match *world {}
    }

    fn run_rank(world: &Self::World, _rank: usize, _job: CudaRankJob<'_>) -> Result<RunOutput<Tensor>, RunError> {
        match *world {}
    }
}
