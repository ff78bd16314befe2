//! CUDA graph replay of prepared plans, and the raw launch floor.
//!
//! A [`Prepared`] recording is cut into segments at its device reads (the
//! points where the host must see a device value before it can go on:
//! unbacked symbols, `cond` predicates, `item()`). Each segment's launches and
//! GEMMs are captured once into a CUDA graph on the backend's stream; a replay
//! launches the graphs in order and performs the reads between them, stopping
//! with [`Replay::Diverged`] when a read differs from the recording (the
//! graphs after it were captured for other values; the caller records again).
//! The graphs use the recording's buffers (its arena and held inputs), so
//! their results are those of the direct replay, bit for bit.

use super::prepared::{launch, read_matches, Op, Prepared};
use super::{CudaBackend, Storage};
use super::{LaunchFloor, Replay};
use crate::exec::ExecError;
use cudarc::driver::sys;
use std::sync::Arc;
use std::time::Instant;

/// A checked driver call.
fn check(r: sys::CUresult, call: &str) -> Result<(), ExecError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(ExecError::op("cuda", format!("{call} failed: {r:?}")))
    }
}

/// One instantiated graph; destroyed on drop.
#[derive(Debug)]
struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles were created once by `capture_with` and are
        // destroyed once, here; the owner synchronises before dropping.
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec);
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

/// What a segment is on replay.
#[derive(Debug)]
enum Part {
    Graph(Graph),
    Read {
        ptr: sys::CUdeviceptr,
        bytes: usize,
        value: [u8; 8],
    },
}

/// The captured segments of one recording.
#[derive(Debug)]
pub(super) struct SegmentGraphs {
    parts: Vec<Part>,
}

impl SegmentGraphs {
    /// Graphs captured (segments with at least one launch).
    pub(super) fn graphs(&self) -> usize {
        self.parts.iter().filter(|p| matches!(p, Part::Graph(_))).count()
    }
}

/// Captures `ops` (launches, library calls and memsets) into one graph.
fn capture(backend: &CudaBackend, ops: &mut [Op]) -> Result<Graph, ExecError> {
    let stream = backend.device.stream.cu_stream();
    capture_with(stream, || {
        for op in ops.iter_mut() {
            match op {
                Op::Launch(l) => launch(l, stream),
                Op::Library(call) => call.run(backend),
                Op::Zero { ptr, bytes } => backend.device.zero(*ptr, *bytes).map_err(ExecError::from),
                Op::Read { .. } => Err(ExecError::op("cuda", "a device read inside a graph segment")),
            }?;
        }
        Ok(())
    })
}

/// Captures what `queue` puts on `stream` (the backend's, its context
/// bound) into one instantiated graph: the one capture of the backend. The
/// capture holds [`super::driver::capture_lock`] from its start to its end
/// only (the lock is not re-entrant) and is ended on every path; a graph
/// that is not returned is destroyed.
fn capture_with(stream: sys::CUstream, queue: impl FnOnce() -> Result<(), ExecError>) -> Result<Graph, ExecError> {
    let capturing = super::driver::capture_lock();
    check(
        // SAFETY: the stream belongs to the backend's bound context; the
        // capture is ended below on every path.
        unsafe { sys::cuStreamBeginCapture_v2(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) },
        "cuStreamBeginCapture",
    )?;
    let queued = queue();
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above on the same stream; `graph` is a
    // valid out-pointer.
    let ended = check(
        unsafe { sys::cuStreamEndCapture(stream, &mut graph) },
        "cuStreamEndCapture",
    );
    drop(capturing);
    let destroy = |graph: sys::CUgraph| {
        if !graph.is_null() {
            // SAFETY: the graph was created by the capture above and is not used again.
            unsafe {
                let _ = sys::cuGraphDestroy(graph);
            }
        }
    };
    if let Err(e) = queued.and(ended) {
        destroy(graph);
        return Err(e);
    }
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: `graph` is the complete graph just captured; `exec` is a valid out-pointer.
    let inst = check(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
        "cuGraphInstantiate",
    );
    if let Err(e) = inst {
        destroy(graph);
        return Err(e);
    }
    Ok(Graph { graph, exec })
}

/// Captures the segments of `prepared` (once) and replays them.
pub(super) fn replay(prepared: &mut Prepared, backend: &CudaBackend) -> Result<Replay, ExecError> {
    prepared.recorded_outputs = None;
    backend
        .device
        .ctx
        .bind_to_thread()
        .map_err(|e| ExecError::op("cuda", format!("cuCtxSetCurrent: {e}")))?;
    if prepared.graphs.is_none() {
        let mut parts = Vec::new();
        let mut start = 0usize;
        let n = prepared.ops.len();
        for i in 0..=n {
            let boundary = i == n || matches!(prepared.ops.get(i), Some(Op::Read { .. }));
            if !boundary {
                continue;
            }
            if i > start {
                parts.push(Part::Graph(capture(backend, &mut prepared.ops[start..i])?));
            }
            if let Some(Op::Read { ptr, bytes, value }) = prepared.ops.get(i) {
                parts.push(Part::Read {
                    ptr: *ptr,
                    bytes: *bytes,
                    value: *value,
                });
            }
            start = i + 1;
        }
        prepared.graphs = Some(SegmentGraphs { parts });
    }
    let stream = backend.device.stream.cu_stream();
    let mut read = 0usize;
    if let Some(g) = &prepared.graphs {
        for part in &g.parts {
            match part {
                // SAFETY: the graph was instantiated on this context and its
                // buffers (arena, held inputs) live as long as `prepared`.
                Part::Graph(graph) => check(unsafe { sys::cuGraphLaunch(graph.exec, stream) }, "cuGraphLaunch")?,
                Part::Read { ptr, bytes, value } => {
                    if !read_matches(backend, *ptr, *bytes, value)? {
                        return Ok(Replay::Diverged { read });
                    }
                    read += 1;
                }
            }
        }
    }
    Ok(Replay::Done)
}

impl Prepared {
    /// Replays the recording through CUDA graphs, one per segment between
    /// device reads, capturing them on the first call.
    pub fn replay_graphs(&mut self, backend: &CudaBackend) -> Result<Replay, ExecError> {
        replay(self, backend)
    }

    /// Graphs captured so far (0 before the first graph replay).
    pub fn captured_graphs(&self) -> usize {
        self.graphs.as_ref().map_or(0, SegmentGraphs::graphs)
    }
}

const EMPTY_KERNEL: &str = r#"extern "C" __global__ void empty_k(float* p, int n) { if (threadIdx.x == 0 && blockIdx.x == (1u << 30)) p[0] = n; }"#;

/// The same kernel, written as PTX (used when NVRTC cannot be loaded).
const EMPTY_PTX: &str = ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry empty_k(.param .u64 p, .param .u32 n)\n{\n ret;\n}\n";

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Measures the launch floor: `repeats` loops of `kernels` launches of an
/// empty kernel (grid 1, 128 threads, two arguments) and `repeats` replays of
/// one graph of `kernels` such launches, after warm-up, on the backend's
/// stream. Host time per launch of a loop is taken until its last launch is
/// queued (the loop is synchronised before the next).
pub fn launch_floor(backend: &mut CudaBackend, kernels: usize, repeats: usize) -> Result<LaunchFloor, ExecError> {
    let kernels = kernels.max(1);
    // SAFETY: a dlopen probe of the NVRTC library.
    let (image, compiler) = if super::driver::keep_loaded("nvrtc", &backend.device.paths.library_dirs)
        && unsafe { cudarc::nvrtc::sys::is_culib_present() }
    {
        match cudarc::nvrtc::compile_ptx(EMPTY_KERNEL) {
            Ok(ptx) => (ptx.to_src(), "nvrtc"),
            Err(_) => (EMPTY_PTX.to_string(), "ptx"),
        }
    } else {
        (EMPTY_PTX.to_string(), "ptx")
    };
    let module = backend.device.load_module(image.as_bytes()).map_err(ExecError::from)?;
    let function = module.function("empty_k").map_err(ExecError::from)?;
    let scratch: Arc<Storage> = backend.alloc_storage(4096)?;
    let mut ptr = scratch.ptr;
    let mut n: u32 = 0;
    let mut params = [
        (&mut ptr as *mut u64).cast::<std::ffi::c_void>(),
        (&mut n as *mut u32).cast(),
    ];
    let stream = backend.device.stream.cu_stream();
    backend
        .device
        .ctx
        .bind_to_thread()
        .map_err(|e| ExecError::op("cuda", format!("cuCtxSetCurrent: {e}")))?;
    let mut launch_loop = |count: usize| -> Result<(), ExecError> {
        for _ in 0..count {
            // SAFETY: `function` is in `module`, alive for this function;
            // the two parameters point at a u64 and a u32 that outlive the
            // call (the driver copies them at launch).
            unsafe { cudarc::driver::result::launch_kernel(function, (1, 1, 1), (128, 1, 1), 0, stream, &mut params) }
                .map_err(|e| ExecError::op("empty_k", format!("cuLaunchKernel: {e}")))?;
        }
        Ok(())
    };
    launch_loop(1000)?;
    backend.synchronize()?;
    let mut per_launch = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        launch_loop(kernels)?;
        per_launch.push(t0.elapsed().as_secs_f64() * 1e6 / kernels as f64);
        backend.synchronize()?;
    }
    // One graph of the same launches.
    let g = capture_with(stream, || launch_loop(kernels))?;
    // SAFETY: `g` was instantiated on this context; its launches use `scratch`, alive until the end.
    let replay_once = || check(unsafe { sys::cuGraphLaunch(g.exec, stream) }, "cuGraphLaunch");
    for _ in 0..20 {
        replay_once()?;
    }
    backend.synchronize()?;
    let mut per_graph_kernel = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        for _ in 0..10 {
            replay_once()?;
        }
        backend.synchronize()?;
        per_graph_kernel.push(t0.elapsed().as_secs_f64() * 1e6 / (10 * kernels) as f64);
    }
    drop(g);
    drop(module);
    let mut per_read = Vec::with_capacity(repeats);
    let mut word = [0u8; 8];
    for _ in 0..repeats.max(1) * 10 {
        let t0 = Instant::now();
        backend.device.download(&mut word, scratch.ptr)?;
        per_read.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(LaunchFloor {
        launch_us: median(per_launch),
        graph_us: median(per_graph_kernel),
        read_us: median(per_read),
        kernels,
        compiler,
    })
}
