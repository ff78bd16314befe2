//! CUDA graph replay of prepared plans, and the raw launch floor.
//!
//! A [`Prepared`] recording replays as CUDA graphs captured once on the
//! backend's stream, in one of two forms:
//!
//! * **One graph** ([`guarded`]): where the recording reads device values
//!   (unbacked symbols, `cond` and `while_loop` predicates, `item()`), the
//!   reads are checked on the device and what depends on them runs under
//!   conditional IF nodes; a replay is one `cuGraphLaunch` and one read of a
//!   status word at its end. A recording without reads is one plain graph.
//! * **Segments**: without conditional nodes (a driver older than CUDA 12.4,
//!   [`super::CudaOptions::graph_reads`] asking for segments or a recording
//!   with fewer reads than one graph pays off for, or a segment the driver
//!   would not capture into a conditional body), the recording is cut into
//!   segments at its device reads; a replay launches the graphs in order and
//!   performs the reads between them on the host.
//!
//! A segment of a concurrent recording ([`super::GraphStreams::Concurrent`])
//! is built operation by operation, each captured into the graph after the
//! nodes of the operations it depends on (the program's dependency DAG), so
//! independent operations run at the same time; so are the levels of the
//! guarded form (see [`guarded`]).
//!
//! Either way a replay stops with [`Replay::Diverged`] when a read differs
//! from the recording (what follows was captured for other values; the caller
//! records again). The graphs use the recording's buffers (its arena and held
//! inputs), so their results are those of the direct replay, bit for bit.

mod guarded;
mod timing;

use super::prepared::captured::{check, Form, Graph, Part, SegmentGraphs};
use super::prepared::{check_reads, launch, read_runs, Concurrency, Op, Prepared};
use super::{CudaBackend, Storage};
use super::{GraphReads, GraphStreams, LaunchFloor, Replay, StreamChoice};
use crate::exec::ExecError;
use cudarc::driver::sys;
use std::sync::Arc;
use std::time::Instant;

/// Where a capture puts what it captures.
enum CaptureTarget<'a> {
    /// A new graph.
    New,
    /// An existing graph (a conditional body, or the graph being built),
    /// after the nodes `after`.
    Into {
        graph: sys::CUgraph,
        after: &'a [sys::CUgraphNode],
    },
}

/// Queues one operation of a graph segment on `stream` (a capture).
fn queue_op(backend: &CudaBackend, op: &mut Op, stream: sys::CUstream) -> Result<(), ExecError> {
    match op {
        Op::Launch(l) => launch(l, stream),
        Op::Library(call) => call.run(backend),
        Op::Zero { ptr, bytes } => backend.device.zero(*ptr, *bytes).map_err(ExecError::from),
        Op::Read { .. } => Err(ExecError::Device("a device read inside a graph segment".into())),
    }
}

/// Queues the recording's operation `index` (`op`) on `stream` (a
/// capture): a library call on its lane's workspace where `concurrency`
/// gives it a lane beyond the first.
fn queue_on_lane(
    backend: &CudaBackend,
    concurrency: Option<&Concurrency>,
    index: usize,
    op: &mut Op,
    stream: sys::CUstream,
) -> Result<(), ExecError> {
    let lane = concurrency
        .and_then(|c| c.lanes.get(index))
        .copied()
        .map_or(0, usize::from);
    match (op, lane.checked_sub(1)) {
        (Op::Library(call), Some(l)) => match concurrency.and_then(|c| c.workspaces.get(l)) {
            Some(ws) => call.run_in(backend, ws),
            None => Err(ExecError::op(call.op(), format!("no workspaces for lane {lane}"))),
        },
        (op, _) => queue_op(backend, op, stream),
    }
}

/// Captures `ops` (launches, library calls and memsets) into one graph.
fn capture(backend: &CudaBackend, ops: &mut [Op]) -> Result<Graph, ExecError> {
    let stream = backend.device.stream.cu_stream();
    capture_with(stream, || {
        ops.iter_mut().try_for_each(|op| queue_op(backend, op, stream))
    })
}

/// Captures the operations `range` of `ops` into one graph: as a chain, or,
/// with `concurrency` (each operation's dependencies among all of `ops` and
/// its library-workspace lane, see [`super::prepared`]'s concurrent plan),
/// each operation after only the nodes of those it depends on inside the
/// range (the segment boundaries order the rest), so that independent
/// operations run concurrently, each library call with its lane's workspace.
fn capture_segment(
    backend: &CudaBackend,
    ops: &mut [Op],
    range: std::ops::Range<usize>,
    concurrency: Option<&Concurrency>,
) -> Result<Graph, ExecError> {
    let start = range.start;
    let Some(deps) = concurrency.map(|c| &c.deps) else {
        return capture(backend, &mut ops[range]);
    };
    let queue =
        |k: usize, op: &mut Op, stream: sys::CUstream| queue_on_lane(backend, concurrency, start + k, op, stream);
    let stream = backend.device.stream.cu_stream();
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the backend's context is bound by the caller.
    check(unsafe { sys::cuGraphCreate(&mut graph, 0) }, "cuGraphCreate")?;
    let mut built = || -> Result<(), ExecError> {
        // The graph nodes each operation ended on.
        let mut exits: Vec<Vec<sys::CUgraphNode>> = Vec::with_capacity(range.len());
        for (k, op) in ops[range.clone()].iter_mut().enumerate() {
            let mut after: Vec<sys::CUgraphNode> = Vec::new();
            for &d in deps.get(start + k).map(Vec::as_slice).unwrap_or_default() {
                let Some(local) = d.checked_sub(start) else { continue };
                for node in exits.get(local).map(Vec::as_slice).unwrap_or_default() {
                    if !after.contains(node) {
                        after.push(*node);
                    }
                }
            }
            let target = CaptureTarget::Into { graph, after: &after };
            let leaves = capture_into(stream, target, || queue(k, op, stream))?;
            // An operation that captured nothing passes its dependencies on.
            exits.push(if leaves.is_empty() { after } else { leaves });
        }
        Ok(())
    };
    match built() {
        Ok(()) => Graph::instantiate(graph),
        Err(e) => {
            // SAFETY: the graph was created above and is not used again.
            unsafe {
                let _ = sys::cuGraphDestroy(graph);
            }
            Err(e)
        }
    }
}

/// Captures what `queue` puts on `stream` (the backend's, its context
/// bound) into one new instantiated graph.
fn capture_with(stream: sys::CUstream, queue: impl FnOnce() -> Result<(), ExecError>) -> Result<Graph, ExecError> {
    let (graph, _) = capture_raw(stream, CaptureTarget::New, queue)?;
    Graph::instantiate(graph)
}

/// Captures what `queue` puts on `stream` into an existing graph; returns
/// the nodes the capture ended on (what a node added next depends on).
fn capture_into(
    stream: sys::CUstream,
    target: CaptureTarget<'_>,
    queue: impl FnOnce() -> Result<(), ExecError>,
) -> Result<Vec<sys::CUgraphNode>, ExecError> {
    capture_raw(stream, target, queue).map(|(_, leaves)| leaves)
}

/// The one capture of the backend: begins a capture on `stream` into
/// `target`, runs `queue`, notes the capture's last nodes and ends it. The
/// capture holds [`super::driver::capture_lock`] from its start to its end
/// only (the lock is not re-entrant) and is ended on every path; a new graph
/// that is not returned is destroyed.
fn capture_raw(
    stream: sys::CUstream,
    target: CaptureTarget<'_>,
    queue: impl FnOnce() -> Result<(), ExecError>,
) -> Result<(sys::CUgraph, Vec<sys::CUgraphNode>), ExecError> {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    let capturing = super::driver::capture_lock();
    let new = matches!(target, CaptureTarget::New);
    let begun = match target {
        // SAFETY: the stream belongs to the backend's bound context; the
        // capture is ended below on every path.
        CaptureTarget::New => unsafe { sys::cuStreamBeginCapture_v2(stream, mode) },
        // SAFETY: as above; `graph` is a graph of the same context and
        // `after` are nodes of it.
        CaptureTarget::Into { graph, after } => unsafe {
            sys::cuStreamBeginCaptureToGraph(stream, graph, after.as_ptr(), std::ptr::null(), after.len(), mode)
        },
    };
    check(begun, "cuStreamBeginCapture")?;
    let queued = queue();
    let leaves = queued.as_ref().ok().map(|()| capture_leaves(stream));
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above on the same stream; `graph` is a
    // valid out-pointer.
    let result = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
    let ended = check(result, "cuStreamEndCapture");
    drop(capturing);
    let result = queued
        .and(ended)
        .and_then(|()| leaves.unwrap_or_else(|| Ok(Vec::new())));
    match result {
        Ok(leaves) => Ok((graph, leaves)),
        Err(e) => {
            if new && !graph.is_null() {
                // SAFETY: the graph was created by the capture above and is not used again.
                unsafe {
                    let _ = sys::cuGraphDestroy(graph);
                }
            }
            Err(e)
        }
    }
}

/// The nodes the capture on `stream` would make the next node depend on.
fn capture_leaves(stream: sys::CUstream) -> Result<Vec<sys::CUgraphNode>, ExecError> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    // SAFETY: the stream is capturing (begun by the caller); the out-pointers
    // are valid and the optional ones are null.
    let result = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut deps,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    check(result, "cuStreamGetCaptureInfo")?;
    if deps.is_null() || count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the driver returned `count` nodes at `deps`, valid until the
    // next call on the stream; they are copied out here.
    Ok(unsafe { std::slice::from_raw_parts(deps, count) }.to_vec())
}

/// Captures `prepared` as one guarded graph: ordered by the program's DAG
/// where the recording has a concurrent plan and writes no input (a
/// diverged replay is recorded again from the start, so every operation
/// after a read must wait for its check; see [`super::prepared`]), else as
/// one chain. [`GraphStreams::Auto`] captures both and keeps the faster by
/// device time; where the driver refuses the DAG-ordered graph, the chain.
fn capture_one_graph(prepared: &mut Prepared, backend: &CudaBackend) -> Result<SegmentGraphs, ExecError> {
    let writes_inputs = prepared.writes_inputs().is_some();
    let dag = prepared.concurrency.as_ref().filter(|_| !writes_inputs);
    let mut choices = Vec::new();
    let one = match dag.map(|c| guarded::capture_guarded(backend, &mut prepared.ops, Some(c))) {
        None | Some(Err(_)) => guarded::capture_guarded(backend, &mut prepared.ops, None)?,
        Some(Ok(ordered)) if backend.options.graph_streams == GraphStreams::Auto => {
            let chain = guarded::capture_guarded(backend, &mut prepared.ops, None)?;
            let choice = timing::choose(backend, chain.graph(), ordered.graph(), prepared.ops.len())?;
            choices.push(choice);
            if choice.concurrent {
                ordered
            } else {
                chain
            }
        }
        Some(Ok(ordered)) => ordered,
    };
    Ok(SegmentGraphs {
        form: Form::Guarded(one),
        choices,
    })
}

/// Captures the graphs of `prepared`: one guarded graph where the options
/// and driver allow, else segments.
fn capture_all(prepared: &mut Prepared, backend: &CudaBackend) -> Result<SegmentGraphs, ExecError> {
    let reads = prepared.reads();
    let mut why = None;
    if reads > 0 {
        why = match backend.options.graph_reads {
            GraphReads::Segments => Some("segments asked for (CudaOptions::graph_reads)".to_string()),
            GraphReads::Auto if reads < GraphReads::AUTO_MIN_READS => Some(format!(
                "fewer than {} reads: segments are faster (CudaOptions::graph_reads)",
                GraphReads::AUTO_MIN_READS
            )),
            GraphReads::Auto | GraphReads::OneGraph => guarded::unsupported(),
        };
        if why.is_none() {
            match capture_one_graph(prepared, backend) {
                Ok(one) => return Ok(one),
                // The driver refused the one graph (a library call it would not
                // capture into a conditional body): segments, saying why.
                Err(e) => why = Some(format!("one graph failed: {e}")),
            }
        }
    }
    let mut parts = Vec::new();
    let mut choices = Vec::new();
    let mut start = 0usize;
    let runs: Vec<_> = read_runs(&prepared.ops).collect();
    let deps = prepared.concurrency.as_ref();
    // Auto replays each segment to time it: only where a replay may repeat.
    let choose = backend.options.graph_streams == GraphStreams::Auto && prepared.writes_inputs().is_none();
    let mut segment = |range: std::ops::Range<usize>, ops: &mut [Op]| -> Result<Part, ExecError> {
        let concurrent = capture_segment(backend, ops, range.clone(), deps)?;
        if !(choose && deps.is_some()) {
            return Ok(Part::Graph(concurrent));
        }
        let single = capture_segment(backend, ops, range.clone(), None)?;
        let choice = timing::choose(backend, &single, &concurrent, range.len())?;
        choices.push(choice);
        Ok(Part::Graph(if choice.concurrent { concurrent } else { single }))
    };
    for run in runs {
        if run.start > start {
            parts.push(segment(start..run.start, &mut prepared.ops)?);
        }
        start = run.end;
        parts.push(Part::Reads(run));
    }
    let end = prepared.ops.len();
    if end > start {
        parts.push(segment(start..end, &mut prepared.ops)?);
    }
    Ok(SegmentGraphs {
        form: Form::Segments { parts, why },
        choices,
    })
}

/// Captures the graphs of `prepared` (once) and replays them.
pub(super) fn replay(prepared: &mut Prepared, backend: &CudaBackend) -> Result<Replay, ExecError> {
    prepared.recorded_outputs = None;
    backend
        .device
        .ctx
        .bind_to_thread()
        .map_err(|e| ExecError::Device(format!("cuCtxSetCurrent: {e}")))?;
    if prepared.graphs.is_none() {
        prepared.graphs = Some(capture_all(prepared, backend)?);
    }
    let stream = backend.device.stream.cu_stream();
    let mut read = 0usize;
    let Prepared {
        graphs,
        ops,
        read_words,
        ..
    } = prepared;
    match graphs.as_ref().map(|g| &g.form) {
        Some(Form::Guarded(g)) => return g.replay(backend),
        Some(Form::Segments { parts, .. }) => {
            for part in parts {
                match part {
                    Part::Graph(graph) => graph.launch(stream)?,
                    Part::Reads(run) => {
                        let reads = ops.get(run.clone()).unwrap_or_default();
                        if let Some(k) = check_reads(backend, reads, read_words.as_mut())? {
                            return Ok(Replay::Diverged { read: read + k });
                        }
                        read += reads.len();
                    }
                }
            }
        }
        None => {}
    }
    Ok(Replay::Done)
}

impl Prepared {
    /// Replays the recording through CUDA graphs (see the module
    /// documentation), capturing them on the first call.
    pub fn replay_graphs(&mut self, backend: &CudaBackend) -> Result<Replay, ExecError> {
        replay(self, backend)
    }

    /// Graphs captured so far (0 before the first graph replay).
    pub fn captured_graphs(&self) -> usize {
        self.graphs.as_ref().map_or(0, SegmentGraphs::graphs)
    }

    /// How graph replay runs this recording, once captured: `one graph`
    /// (with how many device-checked reads), or `N segments` with the
    /// host reads between them and why not one graph; `None` before the
    /// first graph replay.
    pub fn graph_form(&self) -> Option<String> {
        let reads = self.reads();
        let concurrent = match self.graphs.as_ref().map(|g| g.choices.as_slice()) {
            Some(choices) if !choices.is_empty() => auto_form(choices),
            _ if self.is_concurrent() => ", operations ordered by the program's DAG".to_string(),
            _ => String::new(),
        };
        self.graphs.as_ref().map(|g| match &g.form {
            Form::Guarded(one) => {
                let order = match (g.choices.is_empty(), one.ordered_by_dag) {
                    (false, _) => concurrent.clone(),
                    (true, true) => ", operations ordered by the program's DAG".to_string(),
                    (true, false) if self.is_concurrent() => ", one chain".to_string(),
                    (true, false) => String::new(),
                };
                format!(
                    "one graph, {reads} device-checked reads in {} checks under conditional IF nodes{order}",
                    one.checks
                )
            }
            Form::Segments { why: None, .. } => format!("one graph{concurrent}"),
            Form::Segments { parts, why: Some(why) } => format!(
                "{} segment graphs, {reads} host reads between them ({why}){concurrent}",
                parts.iter().filter(|p| matches!(p, Part::Graph(_))).count()
            ),
        })
    }
}

/// What [`GraphStreams::Auto`] chose, for [`Prepared::graph_form`]: per
/// segment, the order kept and both device times.
fn auto_form(choices: &[StreamChoice]) -> String {
    let each: Vec<String> = choices
        .iter()
        .map(|c| {
            let (kept, other, other_name) = if c.concurrent {
                ("ordered by the program's DAG", c.single_us, "as one chain")
            } else {
                ("one chain", c.concurrent_us, "ordered by the DAG")
            };
            let kept_us = if c.concurrent { c.concurrent_us } else { c.single_us };
            format!("{kept} ({kept_us:.2} us; {other:.2} us {other_name})")
        })
        .collect();
    format!(", measured (auto): {}", each.join("; "))
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
        .map_err(|e| ExecError::Device(format!("cuCtxSetCurrent: {e}")))?;
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
    // `g`'s launches use `scratch`, alive until the end.
    let replay_once = || g.launch(stream);
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
