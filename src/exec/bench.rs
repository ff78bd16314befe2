//! `wrapir bench`'s measurements of a program on the CUDA backend: the
//! interpreter, the prepared direct launch path and CUDA graph replay, next
//! to the raw floors measured in the same process, timed with
//! [`crate::bench::Timing`]. Whether replays equal the interpreter bit for
//! bit is checked on the outputs. The caller prints the [`CudaBench`].
//!
//! In a build without the `cuda` feature this compiles against the CUDA
//! stand-in, whose backend cannot open: [`bench_cuda`] returns
//! [`BenchError::Open`] saying so.

use super::cuda::{
    launch_floor, place_inputs, to_host, CudaBackend, CudaError, CudaOptions, CudaTensor, LaunchFloor, LibraryCost,
    LoadTimings, Prepared, Replay,
};
use super::{Backend, ExecError, RunError, Tensor, Value};
use crate::bench::{Latency, Timing, Workload};
use crate::ir::Program;
use crate::sym::Bindings;
use indexmap::IndexMap;
use std::time::{Duration, Instant};

/// What `wrapir bench` measures.
#[derive(Clone, Copy, Debug)]
pub struct BenchOptions {
    /// Calls, repeats and samples of each measure.
    pub timing: Timing,
    /// Also time CUDA graph replay.
    pub graphs: bool,
    /// Start the libraries and built-in kernels the program needs while the
    /// device opens ([`CudaOptions::preload_for`]).
    pub preload: bool,
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
    /// ([`Prepared::single_stream_arena_bytes`]).
    pub single_stream_arena_bytes: u64,
    /// Graph replay orders the operations by the program's dependency DAG
    /// ([`Prepared::is_concurrent`]).
    pub concurrent: bool,
    /// Why concurrent replay was asked for but the recording replays on
    /// one stream ([`Prepared::single_stream_reason`]).
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
    /// The library calls' host cost by library and op ([`Prepared::library_costs`]).
    pub library_costs: Vec<LibraryCost>,
    /// The recording's kernel launches in a bare loop
    /// ([`Prepared::bare_launch_floor_us`]).
    pub bare_launches_us: f64,
}

/// CUDA graph replay of the prepared path.
#[derive(Clone, Debug)]
pub struct Graphs {
    /// Calls queued back to back.
    pub queued_us: f64,
    /// Graphs captured.
    pub graphs: usize,
    /// How the recording replays ([`Prepared::graph_form`]): one graph, or
    /// segments between host reads and why.
    pub form: String,
    /// The device floor: device µs of one replay, timed with events around
    /// the graph on an idle stream (median); `None` for segments.
    pub device_us: Option<f64>,
    /// Each operation's isolated device time, summed, and the longest
    /// chain of dependent operations at those times (the critical-path
    /// bound; [`Prepared::critical_path`]); `None` with device reads.
    pub critical_path: Option<crate::exec::cuda::CriticalPath>,
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

/// Times `program` on a new CUDA backend with `options`, on host `inputs`
/// keyed as [`super::run_program`] takes them: one interpreted run
/// first (its outputs are the reference), then the measures of
/// [`CudaBench`]. Random draws restart from the first run's generator state
/// for the bit-for-bit checks.
pub fn bench_cuda(
    program: &Program,
    inputs: &IndexMap<String, Tensor>,
    options: CudaOptions,
    bench: &BenchOptions,
) -> Result<CudaBench, BenchError> {
    let timing = bench.timing;
    let extern_ops = options.extern_ops.clone();
    let options = if bench.preload {
        options.preload_for(program)
    } else {
        options
    };
    let mut backend = CudaBackend::new(options).map_err(BenchError::Open)?;
    let t = Instant::now();
    let (plan, args, constants) = place_inputs(program, &mut backend, inputs).map_err(BenchError::Place)?;
    let place_inputs = t.elapsed();
    let input_bytes = backend.memory().current_bytes;
    let rng0 = backend.cuda_rng()?;
    let t = Instant::now();
    let first = plan
        .run(&mut backend, args.clone(), &constants)
        .map_err(BenchError::Run)?;
    let first_run = t.elapsed();
    let host_ops = extern_ops.host_ops();
    let t = Instant::now();
    let first_host = first
        .outputs
        .iter()
        .map(|v| to_host(&mut backend, v))
        .collect::<Result<Vec<_>, _>>()?;
    let copy_out = t.elapsed();
    let first_output = Instant::now();
    let load = backend.load_timings();
    let interp_peak_bytes = backend.memory().peak_bytes.saturating_sub(input_bytes);
    let meta_peak_bytes = meta_peak(program, &first.symbols).map(|p| p.saturating_sub(input_bytes));
    drop(first);
    let sync = |b: &CudaBackend| b.synchronize().map_err(BenchError::Cuda);
    let interp_us = timing.queued_us(&mut Workload {
        state: &mut backend,
        call: &mut |b| plan.run(b, args.clone(), &constants).map(drop).map_err(BenchError::Run),
        drain: &sync,
    })?;
    let interp_bits = output_bits(&first_host)?;
    let direct = match Prepared::record(&mut backend, &plan, args.clone(), &constants) {
        Err(e) => Err(e.to_string()),
        Ok((mut prepared, _)) => Ok(direct(&mut backend, &mut prepared, bench, rng0, &interp_bits)?),
    };
    let kernels = direct.as_ref().map_or(0, |d| d.kernels);
    let floor = launch_floor(&mut backend, kernels.max(1), timing.repeats).map_err(BenchError::Floor)?;
    Ok(CudaBench {
        interp_us,
        first_output,
        host_ops,
        input_bytes,
        interp_peak_bytes,
        meta_peak_bytes,
        load,
        place_inputs,
        first_run,
        copy_out,
        direct,
        floor,
    })
}

/// The meta backend's peak for the same symbol values (unbacked sizes as
/// the device run read them).
fn meta_peak(program: &Program, symbols: &Bindings) -> Option<u64> {
    super::meta::run_program(program, symbols)
        .map(|r| r.memory.peak_bytes)
        .ok()
}

/// The direct path's and (with [`BenchOptions::graphs`]) graph replay's
/// measures of a recording.
fn direct(
    backend: &mut CudaBackend,
    prepared: &mut Prepared,
    bench: &BenchOptions,
    rng0: crate::format::bundle_json::CudaRngState,
    interp_bits: &[u64],
) -> Result<Direct, BenchError> {
    let timing = bench.timing;
    let sync = |b: &CudaBackend| b.synchronize().map_err(BenchError::Cuda);
    let kernels = prepared.launches();
    let writes_inputs = prepared.writes_inputs().map(str::to_string);
    let mut diverged = false;
    let mut replay = |b: &mut CudaBackend| -> Result<(), BenchError> {
        diverged |= prepared.replay(b)? != Replay::Done;
        Ok(())
    };
    let mut workload = Workload {
        state: &mut *backend,
        call: &mut replay,
        drain: &sync,
    };
    let queued_us = timing.queued_us(&mut workload)?;
    let one_us = timing.one_call_us(&mut workload)?;
    let latency = timing.latency_us(&mut workload)?;
    let launches = kernels - prepared.library_calls();
    backend.set_cuda_rng(rng0)?;
    diverged |= prepared.replay(backend)? != Replay::Done;
    let direct_bits = device_output_bits(backend, prepared.outputs())?;
    let graphs = match bench.graphs {
        true => Some(graphs(backend, prepared, &timing, rng0, &direct_bits)?),
        false => None,
    };
    // Last: it runs the GEMMs alone, leaving the arena as no full call would.
    let library_costs = prepared.library_costs(backend, timing.iters.clamp(1, 50), timing.repeats)?;
    let library_floor_us = library_costs.iter().map(|c| c.us).sum();
    let bare_launches_us = prepared.bare_launch_floor_us(backend, timing.samples)?;
    Ok(Direct {
        kernels,
        launches,
        library_calls: prepared.library_calls(),
        reads: prepared.reads(),
        arena_bytes: prepared.arena_bytes(),
        single_stream_arena_bytes: prepared.single_stream_arena_bytes(),
        concurrent: prepared.is_concurrent(),
        single_stream_reason: prepared.single_stream_reason().map(str::to_string),
        writes_inputs,
        queued_us,
        one_us,
        latency,
        diverged,
        equals_interp: direct_bits == interp_bits,
        graphs,
        library_floor_us,
        library_costs,
        bare_launches_us,
    })
}

/// Graph replay's measures; a failure of the first timing is reported in
/// the result rather than ending the benchmark.
fn graphs(
    backend: &mut CudaBackend,
    prepared: &mut Prepared,
    timing: &Timing,
    rng0: crate::format::bundle_json::CudaRngState,
    direct_bits: &[u64],
) -> Result<Result<Graphs, String>, BenchError> {
    let sync = |b: &CudaBackend| b.synchronize().map_err(BenchError::Cuda);
    let mut diverged = false;
    let timed = timing.queued_us(&mut Workload {
        state: &mut *backend,
        call: &mut |b| replay_graphs(prepared, b, &mut diverged),
        drain: &sync,
    });
    let queued_us = match timed {
        Ok(us) => us,
        Err(e) => return Ok(Err(e.to_string())),
    };
    backend.set_cuda_rng(rng0)?;
    replay_graphs(prepared, backend, &mut diverged)?;
    let graph_bits = device_output_bits(backend, prepared.outputs())?;
    let captured = prepared.captured_graphs();
    // Divergence in the latency loops is not reported: the verdict stands
    // for the timed calls and the checked replay.
    let mut later = diverged;
    let latency = timing.latency_us(&mut Workload {
        state: &mut *backend,
        call: &mut |b| replay_graphs(prepared, b, &mut later),
        drain: &sync,
    })?;
    let device_us = prepared.graph_device_us(backend, timing.samples)?;
    // Last: each operation alone, leaving the arena as no full call would.
    let critical_path = prepared.critical_path(backend, timing.samples)?;
    Ok(Ok(Graphs {
        queued_us,
        graphs: captured,
        form: prepared.graph_form().unwrap_or_default(),
        device_us,
        critical_path,
        diverged,
        equals_direct: graph_bits == direct_bits,
        latency,
    }))
}

/// One graph replay, noting whether it diverged.
fn replay_graphs(prepared: &mut Prepared, backend: &CudaBackend, diverged: &mut bool) -> Result<(), BenchError> {
    *diverged |= prepared.replay_graphs(backend)? != Replay::Done;
    Ok(())
}

/// The bits of the tensor outputs, in order: floating values as `f64` bits,
/// integers as their two's complement, a complex tensor's as its parts'.
fn output_bits(outputs: &[Value<Tensor>]) -> Result<Vec<u64>, ExecError> {
    let mut bits = Vec::new();
    for v in outputs {
        if let Value::Tensor(t) = v {
            tensor_bits(t, &mut bits)?;
        }
    }
    Ok(bits)
}

/// [`output_bits`] of device outputs, copied to the host.
fn device_output_bits(backend: &mut CudaBackend, outputs: &[Value<CudaTensor>]) -> Result<Vec<u64>, ExecError> {
    let mut bits = Vec::new();
    for v in outputs {
        if let Value::Tensor(t) = v {
            tensor_bits(&backend.copy_out(t)?, &mut bits)?;
        }
    }
    Ok(bits)
}

fn tensor_bits(t: &Tensor, bits: &mut Vec<u64>) -> Result<(), ExecError> {
    let t = if t.dtype().is_complex() {
        t.view_as_real()?
    } else {
        t.clone()
    };
    if t.dtype().is_floating() {
        bits.extend(t.to_f64_vec()?.into_iter().map(f64::to_bits));
    } else {
        bits.extend(t.to_i64_vec()?.into_iter().map(|i| i as u64));
    }
    Ok(())
}
