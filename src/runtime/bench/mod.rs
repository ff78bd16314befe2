//! `wrapir bench`'s measurements of a bundle on a GPU: the interpreter,
//! the prepared direct launch path and CUDA graph replay, next to the raw
//! floors measured in the same process, timed with
//! [`crate::bench::Timing`]. Whether replays equal the interpreter bit for
//! bit is checked on the outputs. The caller prints the [`CudaBench`].
//!
//! The options and reports are plain data in every build; the measuring,
//! on the CUDA backend, is `bench/cuda.rs`. In a build without the `cuda`
//! feature [`bench_cuda`] returns [`BenchError::Open`] saying so.

#[cfg(feature = "cuda")]
mod cuda;

use super::cuda::{
    CriticalPath, CudaError, CudaPaths, GraphReads, GraphStreams, LaunchFloor, LibraryCost, LoadTimings,
};
use crate::bench::{Latency, Timing};
use crate::bundle::Bundle;
use crate::exec::{ExecError, RunError, Tensor};
use crate::ir::Program;
use indexmap::IndexMap;
use std::time::{Duration, Instant};

/// What `wrapir bench` measures, and how the GPU runs the bundle.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Calls, repeats and samples of each measure.
    pub timing: Timing,
    /// Also time CUDA graph replay.
    pub graphs: bool,
    /// Start the libraries and built-in kernels the program needs while the
    /// device opens (`CudaOptions::preload_for`).
    pub preload: bool,
    /// Where the CUDA libraries and the kernel cache are.
    pub paths: CudaPaths,
    /// Run the extern ops the device does not implement on the host.
    pub host_fallback: bool,
    /// How graph replay treats a recording's device reads.
    pub graph_reads: GraphReads,
    /// How graph replay orders a recording's operations.
    pub graph_streams: GraphStreams,
    /// The most branches a concurrent graph runs at once (0: no limit;
    /// `CudaOptions::graph_branches`).
    pub graph_branches: usize,
}

/// Why a benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The device could not be opened.
    #[error("opening the GPU: {0}")]
    Open(CudaError),
    /// The program could not be compiled or its inputs placed on the device.
    #[error("placing the inputs: {0}")]
    Place(RunError),
    /// The program failed on the interpreter.
    #[error("running: {0}")]
    Run(ExecError),
    /// The raw launch floor could not be measured.
    #[error("launch floor: {0}")]
    Floor(ExecError),
    /// A device call failed.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// Another operation failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// The measurements of [`bench_cuda`]; times are host µs per call (medians).
#[derive(Clone, Debug)]
pub struct CudaBench {
    /// The interpreter, calls queued back to back ([`Timing::queued_us`]).
    pub interp_us: f64,
    /// When the first run's outputs were back on the host.
    pub first_output: Instant,
    /// Extern ops the first run sent through the host fallback, with counts.
    pub host_ops: Vec<(String, usize)>,
    /// Device bytes the placed inputs take.
    pub input_bytes: u64,
    /// The interpreter's peak device bytes, inputs excluded.
    pub interp_peak_bytes: u64,
    /// The meta backend's plan peak for the symbol values of the first run,
    /// inputs excluded (`None` when the meta run failed).
    pub meta_peak_bytes: Option<u64>,
    /// Start-up work: the backend's own timings.
    pub load: LoadTimings,
    /// Placing the inputs on the device.
    pub place_inputs: Duration,
    /// The first (interpreted) run.
    pub first_run: Duration,
    /// Copying the first run's outputs to the host.
    pub copy_out: Duration,
    /// The prepared direct path, or why the run could not be prepared.
    pub direct: Result<Direct, String>,
    /// The raw launch floor for as many kernels as the direct path launches.
    pub floor: LaunchFloor,
}

/// The prepared direct launch path.
#[derive(Clone, Debug)]
pub struct Direct {
    /// Recorded operations that launch (kernels and library calls).
    pub kernels: usize,
    /// Kernel launches among them.
    pub launches: usize,
    /// Library calls among them.
    pub library_calls: usize,
    /// Device reads a replay makes.
    pub reads: usize,
    /// Bytes of the recording's arena.
    pub arena_bytes: u64,
    /// Bytes the arena would hold with the single-stream plan
    /// (`Prepared::single_stream_arena_bytes`).
    pub single_stream_arena_bytes: u64,
    /// Graph replay orders the operations by the program's dependency DAG
    /// (`Prepared::is_concurrent`).
    pub concurrent: bool,
    /// Why concurrent replay was asked for but the recording replays on
    /// one stream (`Prepared::single_stream_reason`).
    pub single_stream_reason: Option<String>,
    /// Why the program writes its inputs, when it does: each timed call
    /// applies that write again.
    pub writes_inputs: Option<String>,
    /// Calls queued back to back ([`Timing::queued_us`]).
    pub queued_us: f64,
    /// One call at a time ([`Timing::one_call_us`]).
    pub one_us: f64,
    /// With the device's work included.
    pub latency: Latency,
    /// Some replay read another value than when recorded.
    pub diverged: bool,
    /// A replay's outputs equal the interpreter's bit for bit.
    pub equals_interp: bool,
    /// CUDA graph replay when asked for: its times, or why it failed.
    pub graphs: Option<Result<Graphs, String>>,
    /// The recording's library calls alone (the sum of `library_costs`).
    pub library_floor_us: f64,
    /// The library calls' host cost by library and op (`Prepared::library_costs`).
    pub library_costs: Vec<LibraryCost>,
    /// The recording's kernel launches in a bare loop
    /// (`Prepared::bare_launch_floor_us`).
    pub bare_launches_us: f64,
}

/// CUDA graph replay of the prepared path.
#[derive(Clone, Debug)]
pub struct Graphs {
    /// Calls queued back to back.
    pub queued_us: f64,
    /// Graphs captured.
    pub graphs: usize,
    /// How the recording replays (`Prepared::graph_form`): one graph, or
    /// segments between host reads and why.
    pub form: String,
    /// The device floor: device µs of one replay, timed with events around
    /// the graph on an idle stream (median); `None` for segments.
    pub device_us: Option<f64>,
    /// Each operation's isolated device time, summed, and the longest
    /// chain of dependent operations at those times (the critical-path
    /// bound; `Prepared::critical_path`); `None` with device reads.
    pub critical_path: Option<CriticalPath>,
    /// Some replay read another value than when recorded.
    pub diverged: bool,
    /// A replay's outputs equal the direct path's bit for bit.
    pub equals_direct: bool,
    /// With the device's work included.
    pub latency: Latency,
}

/// One direct call next to the floor of its parts (see [`CudaBench::at_floor`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AtFloor {
    /// The raw cost of the call's launches, device reads and library calls.
    pub floor_us: f64,
    /// One direct call less `floor_us`: the path's own fixed cost.
    pub fixed_us: f64,
}

impl Direct {
    /// `us` per recorded kernel (NaN when there is none).
    pub fn per_kernel(&self, us: f64) -> f64 {
        if self.kernels > 0 {
            us / self.kernels as f64
        } else {
            f64::NAN
        }
    }
}

impl CudaBench {
    /// Everything of one direct call but its launches: the floor is the raw
    /// cost of its kernel launches and device reads ([`CudaBench::floor`])
    /// plus the libraries' own time; `None` without a direct path.
    pub fn at_floor(&self) -> Option<AtFloor> {
        let d = self.direct.as_ref().ok()?;
        let floor_us =
            d.launches as f64 * self.floor.launch_us + d.reads as f64 * self.floor.read_us + d.library_floor_us;
        Some(AtFloor {
            floor_us,
            fixed_us: d.one_us - floor_us,
        })
    }
}

/// Times `program` (of `bundle`, whose kernel images and `bundle.json` the
/// run uses) on a new CUDA backend on host `inputs` keyed as
/// [`crate::exec::run_program`] takes them: one interpreted run first (its
/// outputs are the reference), then the measures of [`CudaBench`]. Random
/// draws restart from the first run's generator state for the bit-for-bit
/// checks.
pub fn bench_cuda(
    bundle: &Bundle,
    program: &Program,
    inputs: &IndexMap<String, Tensor>,
    bench: &BenchOptions,
) -> Result<CudaBench, BenchError> {
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (bundle, program, inputs, bench);
        Err(BenchError::Open(CudaError::NotBuilt))
    }
    #[cfg(feature = "cuda")]
    cuda::measure(bundle, program, inputs, bench)
}
