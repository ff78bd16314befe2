//! Device time of captured graphs, measured with events: the device floor
//! of a replay, the choice between one chain and concurrent replay
//! ([`super::super::GraphStreams::Auto`]), and the critical-path bound.
//!
//! Every figure is a median of event-timed replays on the backend's stream
//! with nothing else queued. Timing replays a graph: it writes what a replay
//! writes (the recording's arena), so it is only done where a replay may be
//! repeated (the recording does not write its inputs, or the caller asked
//! for a benchmark).

use super::{capture_with, check, median, queue_op, Form, Graph, Part};
use crate::exec::cuda::prepared::{Op, Prepared};
use crate::exec::cuda::{ChainStep, CriticalPath, CudaBackend, StreamChoice};
use crate::exec::ExecError;
use cudarc::driver::sys;

/// Replays of each graph timed before [`GraphStreams::Auto`] chooses
/// (after one untimed replay of each).
///
/// [`GraphStreams::Auto`]: crate::exec::cuda::GraphStreams::Auto
const CHOICE_SAMPLES: usize = 7;

/// Two timing events, destroyed on drop.
pub(super) struct Events {
    start: sys::CUevent,
    end: sys::CUevent,
}

impl Events {
    pub(super) fn new() -> Result<Events, ExecError> {
        let mut events = Events {
            start: std::ptr::null_mut(),
            end: std::ptr::null_mut(),
        };
        for e in [&mut events.start, &mut events.end] {
            // SAFETY: a valid out-pointer; the context is bound by the caller.
            check(unsafe { sys::cuEventCreate(e, 0) }, "cuEventCreate")?;
        }
        Ok(events)
    }

    /// Device µs between events recorded before and after `queue` on `stream`.
    pub(super) fn time(
        &self,
        stream: sys::CUstream,
        queue: impl FnOnce() -> Result<(), ExecError>,
    ) -> Result<f64, ExecError> {
        // SAFETY: both events belong to the stream's (bound) context.
        check(unsafe { sys::cuEventRecord(self.start, stream) }, "cuEventRecord")?;
        queue()?;
        // SAFETY: as above.
        check(unsafe { sys::cuEventRecord(self.end, stream) }, "cuEventRecord")?;
        // SAFETY: `end` was recorded above.
        check(unsafe { sys::cuEventSynchronize(self.end) }, "cuEventSynchronize")?;
        let mut ms = 0f32;
        // SAFETY: both events have completed; `ms` is a valid out-pointer.
        let result = unsafe { sys::cuEventElapsedTime_v2(&mut ms, self.start, self.end) };
        check(result, "cuEventElapsedTime")?;
        Ok(f64::from(ms) * 1e3)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        for e in [self.start, self.end] {
            if !e.is_null() {
                // SAFETY: created once in `new`, destroyed once here.
                unsafe {
                    let _ = sys::cuEventDestroy_v2(e);
                }
            }
        }
    }
}

/// Times `single` (one chain) and `concurrent` (the same operations
/// ordered by the DAG), alternating replays so that drift of the device's
/// clocks affects both alike, and says which to keep: the concurrent graph
/// only when its median is below [`StreamChoice::MARGIN`] of the chain's.
pub(super) fn choose(
    backend: &CudaBackend,
    single: &Graph,
    concurrent: &Graph,
    ops: usize,
) -> Result<StreamChoice, ExecError> {
    let stream = backend.device.stream.cu_stream();
    backend.synchronize()?;
    let events = Events::new()?;
    events.time(stream, || single.launch(stream))?;
    events.time(stream, || concurrent.launch(stream))?;
    let (mut s, mut c) = (Vec::with_capacity(CHOICE_SAMPLES), Vec::with_capacity(CHOICE_SAMPLES));
    for _ in 0..CHOICE_SAMPLES {
        s.push(events.time(stream, || single.launch(stream))?);
        c.push(events.time(stream, || concurrent.launch(stream))?);
    }
    let (single_us, concurrent_us) = (median(s), median(c));
    Ok(StreamChoice {
        ops,
        single_us,
        concurrent_us,
        concurrent: concurrent_us < single_us * StreamChoice::MARGIN,
    })
}

impl Prepared {
    /// Device µs of one replay of the captured graphs, timed with events
    /// around it on an idle stream (median of `samples`): the device floor
    /// of the recording's work. Only where the recording is one graph
    /// (`None` for segments, whose host reads sit between the graphs, and
    /// before the first graph replay).
    pub fn graph_device_us(&self, backend: &CudaBackend, samples: usize) -> Result<Option<f64>, ExecError> {
        let graph = match self.graphs.as_ref().map(|g| &g.form) {
            Some(Form::Guarded(g)) => g.graph(),
            Some(Form::Segments { parts, why: None }) if parts.len() == 1 => match parts.first() {
                Some(Part::Graph(g)) => g,
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let stream = backend.device.stream.cu_stream();
        backend.synchronize()?;
        let events = Events::new()?;
        let mut times = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            times.push(events.time(stream, || graph.launch(stream))?);
        }
        Ok(Some(median(times)))
    }

    /// What [`GraphStreams::Auto`] measured for each graph segment and
    /// chose, in replay order (empty before the first graph replay, and for
    /// recordings it did not choose for: other modes, one guarded graph,
    /// recordings that write their inputs).
    ///
    /// [`GraphStreams::Auto`]: crate::exec::cuda::GraphStreams::Auto
    pub fn stream_choices(&self) -> &[StreamChoice] {
        self.graphs.as_ref().map_or(&[], |g| g.choices.as_slice())
    }

    /// Each operation's device time and what those times give: their sum
    /// (what one stream needs at least), and the longest chain of
    /// dependent operations (the critical-path bound of concurrent
    /// replay). An operation is timed as a graph of
    /// [`CriticalPath::REPEATS`] copies of itself replayed back to back
    /// (median of `samples` replays, divided by the copies): its device
    /// time inside a graph, where the launch overhead of timing it alone
    /// does not count. `None` for a recording with device reads. The
    /// operations write what they write again, several times over.
    pub fn critical_path(&mut self, backend: &CudaBackend, samples: usize) -> Result<Option<CriticalPath>, ExecError> {
        if self.reads() > 0 {
            return Ok(None);
        }
        let stream = backend.device.stream.cu_stream();
        backend.synchronize()?;
        let events = Events::new()?;
        let mut times = Vec::with_capacity(self.ops.len());
        for op in self.ops.iter_mut() {
            if matches!(op, Op::Read { .. }) {
                return Ok(None);
            }
            let graph = capture_with(stream, || {
                (0..CriticalPath::REPEATS).try_for_each(|_| queue_op(backend, op, stream))
            })?;
            graph.launch(stream)?;
            let mut samples_us = Vec::with_capacity(samples.max(1));
            for _ in 0..samples.max(1) {
                samples_us.push(events.time(stream, || graph.launch(stream))?);
            }
            // Copies are at least 1: a constant above.
            times.push(median(samples_us) / CriticalPath::REPEATS as f64);
        }
        // Longest chain: operations are in a topological order of their
        // dependencies (each depends on earlier ones only). `before[i]`: the
        // dependency that finishes last, the chain's previous step.
        let mut finish = vec![0f64; times.len()];
        let mut before: Vec<Option<usize>> = vec![None; times.len()];
        for (i, t) in times.iter().enumerate() {
            let last = match self.concurrency.as_ref() {
                Some(c) => c.deps.get(i).and_then(|d| {
                    d.iter()
                        .filter(|j| **j < i)
                        .copied()
                        .max_by(|a, b| finish[*a].total_cmp(&finish[*b]))
                }),
                None => i.checked_sub(1),
            };
            before[i] = last;
            finish[i] = last.map_or(0.0, |j| finish[j]) + t;
        }
        let mut at = (0..finish.len()).max_by(|a, b| finish[*a].total_cmp(&finish[*b]));
        let mut chain = Vec::new();
        while let Some(i) = at {
            chain.push(ChainStep {
                op: i,
                what: describe(&self.ops[i]),
                us: times[i],
            });
            at = before[i];
        }
        chain.reverse();
        // The chain alone, as one graph in its order.
        let graph = capture_with(stream, || {
            chain
                .iter()
                .try_for_each(|step| queue_op(backend, &mut self.ops[step.op], stream))
        })?;
        graph.launch(stream)?;
        let mut samples_us = Vec::with_capacity(samples.max(1));
        for _ in 0..samples.max(1) {
            samples_us.push(events.time(stream, || graph.launch(stream))?);
        }
        Ok(Some(CriticalPath {
            sum_us: times.iter().sum(),
            critical_us: chain.iter().map(|s| s.us).sum(),
            ops: times.len(),
            chain,
            chain_replay_us: median(samples_us),
        }))
    }
}

/// What an operation is, for a profile: the kernel's name, the extern op
/// and its library, or a memset's size.
fn describe(op: &Op) -> String {
    match op {
        Op::Launch(l) => l.kernel.clone(),
        Op::Library(call) => format!("{} ({})", call.op(), call.library()),
        Op::Zero { bytes, .. } => format!("zero {bytes} bytes"),
        Op::Read { bytes, .. } => format!("read {bytes} bytes"),
    }
}
