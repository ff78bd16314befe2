//! Prepared plans: the direct launch path.
//!
//! A [`Prepared`] is made by running a compiled [`Plan`] once through the
//! interpreter on a recording wrapper of the [`CudaBackend`]. The recording
//! keeps, in order, every device operation of the run:
//!
//! * each Triton launch with its function, grid, block, shared memory and its
//!   argument slots, already marshalled (scalars as bytes, tensors as a place
//!   in memory);
//! * each cuBLAS GEMM with its operands;
//! * each extern op run on the built-in kernels, as the device operations the
//!   backend traced while it ran: its allocations (results and scratch), its
//!   launches (parameters as words, device addresses among them as places),
//!   the memory it zeroed and the values it read back (a compaction's count,
//!   an index check's error flag);
//! * each read of a device value by the host (`item()`, unbacked symbols,
//!   `cond` predicates) with the bytes it read.
//!
//! Every buffer the run allocated (and each launch's scratch) is then given an
//! offset in one arena, packed so that buffers whose lifetimes do not overlap
//! share memory; the arena holds as many bytes as the run needed at its peak,
//! rounded to the placement alignment. The buffers the run did not allocate
//! (inputs, constants) are held and used in place. Every argument buffer is
//! then final: replaying the recording ([`Prepared::replay`]) is a loop of
//! `cuLaunchKernel` calls over prepared parameter arrays, with no hashing,
//! allocation or string work, every launch's result checked.
//!
//! The recording is valid for the input layouts it was made with and the
//! device values it read: a replay reads the same values again and, when one
//! differs, stops and reports [`Replay::Diverged`], so that the caller records
//! again ([`PreparedCache`](super::PreparedCache) does). A built-in op whose read-back differs
//! (another nonzero count, an out-of-range index) diverges the same way: the
//! new recording then has the new sizes, or fails with the op's own error.
//! Programs whose run needs the host between launches for more than reading
//! a value (extern ops run by the host fallback) cannot be prepared;
//! [`Prepared::record`] says which op.
//!
//! # Programs that write their inputs
//!
//! Recording again after a diverged replay runs the program from its start,
//! so the launches before the diverging read run twice in that call. That is
//! harmless while they write only buffers the run allocated (the arena), and
//! wrong once one of them may have written an input or constant in place
//! (`index_put_`-style mutation, an Inductor `in_out_ptr`/`out_ptr` parameter
//! bound to a graph input, a user-defined Triton kernel given an input, a GEMM
//! into an input): the write would be applied twice. [`Prepared::record`]
//! therefore refuses a run that reads a device value after such a write (the
//! error says which kernel and parameter), and a recording never replays the
//! call it was made in (its outputs are that run's; see [`Prepared::outputs`]).
//! Every prepared call thus applies its writes to the inputs exactly once, as
//! the interpreter does. [`Prepared::writes_inputs`] says whether a recording
//! may write its inputs.
//!
//! # Inputs are used in place
//!
//! A recording holds the device buffers of its inputs and constants and bakes
//! their addresses into every launch: a replay reads (and may write) exactly
//! those tensors. To run on new input values, write them into the same device
//! tensors (e.g. [`super::CudaBackend::overwrite`]) and replay; passing other
//! tensors to [`PreparedCache::run`](super::PreparedCache::run) makes a new recording (keyed by the
//! tensors' storages, which the cache keeps alive while the entry lives).

pub(super) mod captured;
mod concurrent;
mod record;

pub(super) use concurrent::Concurrency;
use record::{tensors_of, Recorder};

use super::driver::PinnedWords;
use super::library::LibraryCall;
use super::{CudaBackend, CudaTensor, LibraryCost, Replay, Storage};
use crate::exec::interp::Plan;
use crate::exec::{ExecError, TensorSpec, Value};
use cudarc::driver::{result as drv, sys};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Weak};

/// Placement alignment of arena buffers, as `cudaMalloc` aligns allocations
/// (Triton kernels are specialised on 16-byte-aligned pointers).
const ARENA_ALIGN: u64 = 256;

/// Where a device address points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// A buffer the run did not allocate (an input or constant), by index in
    /// [`Prepared::external`].
    External { index: usize, byte: u64 },
    /// A buffer the run allocated, by index in the recording's buffer table.
    Buffer { index: usize, byte: u64 },
}

/// One kernel argument slot.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// Marshalled bytes (scalars, null pointers).
    Bytes(u64),
    /// A device address.
    Address(Place),
}

#[derive(Debug)]
struct LaunchRecord {
    kernel: String,
    function: sys::CUfunction,
    grid: (u32, u32, u32),
    block: u32,
    shared_mem: u32,
    /// The parameters' 8-byte words, in order.
    slots: Vec<Slot>,
    /// Where each parameter starts in `slots` (Triton parameters are one word
    /// each; a built-in kernel's struct parameters span several).
    starts: Vec<usize>,
}

#[derive(Debug)]
struct LibraryRecord {
    call: Box<dyn LibraryCall>,
    /// One place per address of the call, in its order.
    places: Vec<Place>,
}

#[derive(Debug)]
struct ReadRecord {
    at: Place,
    bytes: usize,
    value: [u8; 8],
}

#[derive(Debug)]
enum Event {
    Launch(LaunchRecord),
    Library(LibraryRecord),
    Read(ReadRecord),
    Zero { at: Place, bytes: usize },
}

/// A buffer allocated during the recording.
#[derive(Debug)]
struct Buffer {
    /// The storage (held weakly: the run frees it as usual, and the weak
    /// handle keeps its address unique among the run's storages).
    _storage: Option<Weak<Storage>>,
    bytes: u64,
    /// Event index at allocation.
    first: usize,
    /// Last event index that uses it (`usize::MAX`: an output).
    last: usize,
    /// The operations that use it, by top-level graph node: (node, first
    /// event, last event), in recording order (what the concurrent memory
    /// plan keeps apart, [`concurrent`]).
    uses: Vec<(usize, usize, usize)>,
}

/// A prepared launch: the parameter array points into `args`, both boxed so
/// that their addresses stay fixed.
#[derive(Debug)]
pub(super) struct PreparedLaunch {
    pub(super) kernel: String,
    pub(super) function: sys::CUfunction,
    pub(super) grid: (u32, u32, u32),
    pub(super) block: u32,
    pub(super) shared_mem: u32,
    _args: Box<[u64]>,
    pub(super) params: Box<[*mut c_void]>,
}

/// One step of a replay.
#[derive(Debug)]
pub(super) enum Op {
    Launch(PreparedLaunch),
    Library(Box<dyn LibraryCall>),
    Read {
        ptr: sys::CUdeviceptr,
        bytes: usize,
        value: [u8; 8],
    },
    Zero {
        ptr: sys::CUdeviceptr,
        bytes: usize,
    },
}

/// A recorded run, ready to replay (see the module documentation).
pub struct Prepared {
    pub(super) ops: Vec<Op>,
    external: Vec<Arc<Storage>>,
    _arena: Option<Arc<Storage>>,
    arena_bytes: u64,
    outputs: Vec<Value<CudaTensor>>,
    /// The recorded run's own outputs, until the first replay.
    pub(super) recorded_outputs: Option<Vec<Value<CudaTensor>>>,
    /// Why the recording may write its inputs or constants, if it may.
    writes_inputs: Option<String>,
    pub(super) graphs: Option<captured::SegmentGraphs>,
    /// Where a run of consecutive device reads is copied with one wait
    /// (made at recording when the recording has such a run).
    pub(super) read_words: Option<PinnedWords>,
    /// For concurrent graph replay ([`super::GraphStreams::Concurrent`],
    /// [`super::GraphStreams::Auto`]),
    /// each operation's dependencies (earlier operations) and library
    /// workspace lane; `None`: one chain.
    pub(super) concurrency: Option<concurrent::Concurrency>,
    /// The arena the single-stream plan would need.
    single_stream_arena_bytes: u64,
    /// Why a recording asked to replay concurrently replays on one stream.
    single_stream_why: Option<String>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("launches", &self.launches())
            .field("reads", &self.reads())
            .field("arena_bytes", &self.arena_bytes)
            .finish()
    }
}

/// Offsets for `buffers` in one arena: buffers whose event intervals overlap
/// get disjoint byte ranges. Returns the offsets and the arena size.
fn pack(buffers: &[Buffer]) -> (Vec<u64>, u64) {
    pack_apart(buffers, |x, y| x.first <= y.last && y.first <= x.last)
}

/// Offsets for `buffers` in one arena, buffers that `clash` at disjoint byte
/// ranges (largest first, each at the lowest offset that fits, every size
/// rounded to [`ARENA_ALIGN`]). Returns the offsets and the arena size.
fn pack_apart(buffers: &[Buffer], clash: impl Fn(&Buffer, &Buffer) -> bool) -> (Vec<u64>, u64) {
    let round = |b: u64| b.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(buffers[i].bytes), i));
    let mut offsets = vec![0u64; buffers.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0u64;
    for i in order {
        let b = &buffers[i];
        let size = round(b.bytes.max(1));
        let mut clashes: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&j| clash(b, &buffers[j]))
            .map(|&j| (offsets[j], offsets[j] + round(buffers[j].bytes.max(1))))
            .collect();
        clashes.sort_unstable();
        let mut at = 0u64;
        for (lo, hi) in clashes {
            if at + size <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        total = total.max(at + size);
        placed.push(i);
    }
    (offsets, total)
}

impl Prepared {
    /// Runs `plan` once on `backend` with `inputs` (placeholder order) and
    /// `constants`, recording it; returns the recording, ready to replay, and
    /// the outputs of the recorded run itself (also [`Prepared::outputs`]
    /// until the first replay: the call that records is not replayed, so
    /// writes to the inputs happen once). Errors when the run fails or cannot
    /// be replayed (the message names the op that needs the host, or the
    /// input write a diverging replay would repeat).
    ///
    /// The recording uses `inputs` and `constants` in place (see the module
    /// documentation): replays read and write those device tensors.
    pub fn record(
        backend: &mut CudaBackend,
        plan: &Plan,
        inputs: Vec<Value<CudaTensor>>,
        constants: &IndexMap<String, CudaTensor>,
    ) -> Result<(Prepared, Vec<Value<CudaTensor>>), ExecError> {
        let mut rec = Recorder {
            inner: backend,
            buffers: Vec::new(),
            by_storage: HashMap::new(),
            external: Vec::new(),
            events: Vec::new(),
            unreplayable: None,
            external_write: None,
            node: 0,
            event_nodes: Vec::new(),
            intra: Vec::new(),
            fork: None,
            joined: None,
        };
        let out = plan.run(&mut rec, inputs, constants)?;
        if let Some(why) = rec.unreplayable.take() {
            return Err(ExecError::Unpreparable(why.to_string()));
        }
        let mut out_tensors = Vec::new();
        out.outputs.iter().for_each(|v| tensors_of(v, &mut out_tensors));
        for t in &out_tensors {
            if let Place::Buffer { index, .. } = rec.place(t, false) {
                if let Some(b) = rec.buffers.get_mut(index) {
                    b.last = usize::MAX;
                }
            }
        }
        let (mut offsets, single_stream_arena_bytes) = pack(&rec.buffers);
        let mut arena_bytes = single_stream_arena_bytes;
        let (mut concurrency, mut single_stream_why) = (None, None);
        if rec.inner.options.graph_streams.plans_concurrency() {
            match plan.dag() {
                None => single_stream_why = Some("the plan has no dependency DAG".to_string()),
                Some(dag) => match concurrent::plan(
                    dag,
                    &rec.events,
                    &rec.event_nodes,
                    &rec.intra,
                    &rec.buffers,
                    rec.inner.options.graph_branches,
                ) {
                    Ok(mut c) => {
                        offsets = std::mem::take(&mut c.offsets);
                        arena_bytes = c.arena_bytes;
                        concurrency = Some(concurrent::Concurrency::new(&mut *rec.inner, c, &rec.events)?);
                    }
                    Err(why) => single_stream_why = Some(why),
                },
            }
        }
        let arena = if arena_bytes > 0 {
            Some(rec.inner.alloc_storage(arena_bytes as usize)?)
        } else {
            None
        };
        let arena_ptr = arena.as_ref().map_or(0, |a| a.ptr);
        let external = std::mem::take(&mut rec.external);
        let resolve = |p: Place| -> sys::CUdeviceptr {
            match p {
                // Indices come from the recorder's own tables, so they are in range.
                Place::Buffer { index, byte } => arena_ptr + offsets.get(index).copied().unwrap_or(0) + byte,
                Place::External { index, byte } => external.get(index).map_or(0, |s| s.ptr) + byte,
            }
        };
        let mut ops = Vec::with_capacity(rec.events.len());
        for ev in std::mem::take(&mut rec.events) {
            ops.push(match ev {
                Event::Launch(l) => {
                    let mut args: Box<[u64]> = l
                        .slots
                        .iter()
                        .map(|s| match s {
                            Slot::Bytes(b) => *b,
                            Slot::Address(p) => resolve(*p),
                        })
                        .collect();
                    let base = args.as_mut_ptr();
                    let params: Box<[*mut c_void]> = l
                        .starts
                        .iter()
                        .map(|&i| {
                            debug_assert!(i < args.len());
                            // SAFETY: every start indexes a word of `args` (it was the
                            // length of `slots` before that parameter's words were pushed).
                            unsafe { base.add(i) }.cast::<c_void>()
                        })
                        .collect();
                    Op::Launch(PreparedLaunch {
                        kernel: l.kernel,
                        function: l.function,
                        grid: l.grid,
                        block: l.block,
                        shared_mem: l.shared_mem,
                        _args: args,
                        params,
                    })
                }
                Event::Library(l) => {
                    let addresses: Vec<sys::CUdeviceptr> = l.places.iter().map(|p| resolve(*p)).collect();
                    Op::Library(l.call.rebased(&addresses))
                }
                Event::Read(r) => Op::Read {
                    ptr: resolve(r.at),
                    bytes: r.bytes,
                    value: r.value,
                },
                Event::Zero { at, bytes } => Op::Zero {
                    ptr: resolve(at),
                    bytes,
                },
            });
        }
        // Outputs as views of the arena (or of the external buffers).
        let mut outputs = Vec::with_capacity(out.outputs.len());
        for v in &out.outputs {
            outputs.push(rebase(&mut rec, v, arena.as_ref(), &offsets, &external)?);
        }
        let writes_inputs = rec.external_write.take();
        let longest_run = read_runs(&ops).map(|r| r.len()).max().unwrap_or(0);
        let read_words = match longest_run {
            0 | 1 => None,
            n => Some(PinnedWords::new(&rec.inner.device, n)?),
        };
        let prepared = Prepared {
            ops,
            external,
            _arena: arena,
            arena_bytes,
            outputs,
            recorded_outputs: Some(out.outputs.clone()),
            writes_inputs,
            graphs: None,
            read_words,
            concurrency,
            single_stream_arena_bytes,
            single_stream_why,
        };
        Ok((prepared, out.outputs))
    }

    /// Kernel launches and library calls (cuBLAS, cuBLASLt, cuDNN) per replay.
    pub fn launches(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| matches!(o, Op::Launch(_) | Op::Library(_)))
            .count()
    }

    /// Library calls (cuBLAS, cuBLASLt, cuDNN) per replay.
    pub fn library_calls(&self) -> usize {
        self.ops.iter().filter(|o| matches!(o, Op::Library(_))).count()
    }

    /// Host µs per replay spent in the libraries alone, by library and op:
    /// each of the recording's library calls is made on its own in loops of
    /// `calls` calls after warm-up (the stream drained between loops), and
    /// the medians per call are summed per kind, in the order each kind
    /// first appears. Their sum is the libraries' own launch cost, the floor
    /// for a replay's library calls as [`super::launch_floor`] is for its
    /// kernel launches. The calls write the same results into the arena
    /// again.
    pub fn library_costs(
        &self,
        backend: &CudaBackend,
        calls: usize,
        repeats: usize,
    ) -> Result<Vec<LibraryCost>, ExecError> {
        let calls = calls.max(1);
        let mut costs: Vec<LibraryCost> = Vec::new();
        for op in &self.ops {
            let Op::Library(call) = op else { continue };
            for _ in 0..calls {
                call.run(backend)?;
            }
            backend.synchronize()?;
            let mut per_call = Vec::with_capacity(repeats.max(1));
            for _ in 0..repeats.max(1) {
                let t0 = std::time::Instant::now();
                for _ in 0..calls {
                    call.run(backend)?;
                }
                per_call.push(t0.elapsed().as_secs_f64() * 1e6 / calls as f64);
                backend.synchronize()?;
            }
            per_call.sort_by(f64::total_cmp);
            let us = per_call[per_call.len() / 2];
            match costs
                .iter_mut()
                .find(|c| c.library == call.library() && c.op == call.op())
            {
                Some(c) => {
                    c.calls += 1;
                    c.us += us;
                }
                None => costs.push(LibraryCost {
                    library: call.library(),
                    op: call.op().to_string(),
                    calls: 1,
                    us,
                }),
            }
        }
        Ok(costs)
    }

    /// Host µs of this recording's kernel launches alone: the same
    /// `cuLaunchKernel` calls (functions, grids, parameter arrays) in a bare
    /// loop, without the replay's per-operation dispatch and error mapping,
    /// timed until the last is queued; median of `repeats` loops after
    /// warm-up, the stream drained between loops. GEMMs, memsets and reads are
    /// left out, so the kernels leave the arena (and any input the recording
    /// writes) as no whole call would: run it after the outputs were read.
    pub fn bare_launch_floor_us(&mut self, backend: &CudaBackend, repeats: usize) -> Result<f64, ExecError> {
        let stream = backend.device.stream.cu_stream();
        let bare = |ops: &mut [Op]| -> Result<(), ExecError> {
            for op in ops.iter_mut() {
                if let Op::Launch(l) = op {
                    // SAFETY: as in `launch`: a recorded function and its
                    // parameter array, which point into `_args`.
                    let r = unsafe {
                        sys::cuLaunchKernel(
                            l.function,
                            l.grid.0,
                            l.grid.1,
                            l.grid.2,
                            l.block,
                            1,
                            1,
                            l.shared_mem,
                            stream,
                            l.params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        )
                    };
                    if r != sys::CUresult::CUDA_SUCCESS {
                        return Err(ExecError::op(&l.kernel, format!("cuLaunchKernel: {r:?}")));
                    }
                }
            }
            Ok(())
        };
        bare(&mut self.ops)?;
        backend.synchronize()?;
        let mut per_loop = Vec::with_capacity(repeats.max(1));
        for _ in 0..repeats.max(1) {
            let t0 = std::time::Instant::now();
            bare(&mut self.ops)?;
            per_loop.push(t0.elapsed().as_secs_f64() * 1e6);
            backend.synchronize()?;
        }
        per_loop.sort_by(f64::total_cmp);
        Ok(per_loop[per_loop.len() / 2])
    }

    /// Device reads per replay (segment boundaries).
    pub fn reads(&self) -> usize {
        self.ops.iter().filter(|o| matches!(o, Op::Read { .. })).count()
    }

    /// Bytes of the arena holding every buffer the run allocates.
    pub fn arena_bytes(&self) -> u64 {
        self.arena_bytes
    }

    /// Bytes the arena would hold with the single-stream plan (buffers
    /// apart only where their recording intervals overlap): against
    /// [`Prepared::arena_bytes`], what concurrent replay costs in memory.
    pub fn single_stream_arena_bytes(&self) -> u64 {
        self.single_stream_arena_bytes
    }

    /// Whether graph replay orders the operations by the program's
    /// dependency DAG ([`super::GraphStreams::Concurrent`]) rather than as
    /// one chain.
    pub fn is_concurrent(&self) -> bool {
        self.concurrency.is_some()
    }

    /// Operations that a concurrent replay may start before the operation
    /// recorded just before them finishes (they do not depend on it): 0
    /// for a chain.
    pub fn concurrent_ops(&self) -> usize {
        self.concurrency.as_ref().map_or(0, |c| {
            c.deps
                .iter()
                .enumerate()
                .filter(|(i, d)| *i > 0 && !d.contains(&(i - 1)))
                .count()
        })
    }

    /// Why a recording made with [`super::GraphStreams::Concurrent`]
    /// replays as one chain (a plan without a DAG, a recording too large
    /// for the concurrent memory plan); `None` otherwise.
    pub fn single_stream_reason(&self) -> Option<&str> {
        self.single_stream_why.as_deref()
    }

    /// The outputs of the latest call: before the first replay, the recorded
    /// run's own outputs; after it, views of the arena (or inputs), valid
    /// until the next replay overwrites them.
    pub fn outputs(&self) -> &[Value<CudaTensor>] {
        self.recorded_outputs.as_deref().unwrap_or(&self.outputs)
    }

    /// Why replays may write the recording's inputs or constants in place
    /// (each replay applies the write once, as each interpreter run does);
    /// `None` when every launch writes only buffers the run allocated.
    pub fn writes_inputs(&self) -> Option<&str> {
        self.writes_inputs.as_deref()
    }

    /// Number of external buffers (inputs and constants) the recording uses in place.
    pub fn external_buffers(&self) -> usize {
        self.external.len()
    }

    /// Replays the recording with direct launches, on the input tensors it was
    /// recorded with. Nothing is allocated, hashed or formatted unless a call
    /// fails (the first replay frees the recorded run's outputs).
    ///
    /// [`Replay::Diverged`] is safe to follow by recording again: every
    /// operation before a device read writes only the arena (see the module
    /// documentation).
    pub fn replay(&mut self, backend: &CudaBackend) -> Result<Replay, ExecError> {
        self.recorded_outputs = None;
        let device = &backend.device;
        device
            .ctx
            .bind_to_thread()
            .map_err(|e| ExecError::Device(format!("cuCtxSetCurrent: {e}")))?;
        let stream = device.stream.cu_stream();
        let mut read = 0usize;
        let mut i = 0usize;
        while let Some(op) = self.ops.get_mut(i) {
            match op {
                Op::Launch(l) => launch(l, stream)?,
                Op::Library(call) => call.run(backend)?,
                Op::Zero { ptr, bytes } => device.zero(*ptr, *bytes)?,
                Op::Read { .. } => {
                    let run = self.ops[i..]
                        .iter()
                        .take_while(|o| matches!(o, Op::Read { .. }))
                        .count();
                    if let Some(k) = check_reads(backend, &self.ops[i..i + run], self.read_words.as_mut())? {
                        return Ok(Replay::Diverged { read: read + k });
                    }
                    read += run;
                    i += run;
                    continue;
                }
            }
            i += 1;
        }
        Ok(Replay::Done)
    }
}

/// The ranges of `ops` that are runs of consecutive device reads.
pub(super) fn read_runs(ops: &[Op]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let is_read = |o: &Op| matches!(o, Op::Read { .. });
    let mut i = 0usize;
    std::iter::from_fn(move || {
        let start = i + ops.get(i..)?.iter().position(is_read)?;
        let len = ops[start..].iter().take_while(|o| is_read(o)).count();
        i = start + len;
        Some(start..start + len)
    })
}

/// Checks the consecutive device reads `reads` against the recording: one
/// read alone, or all of them copied into `words` with one wait. Returns the
/// index (in `reads`) of the first that read another value.
pub(super) fn check_reads(
    backend: &CudaBackend,
    reads: &[Op],
    words: Option<&mut PinnedWords>,
) -> Result<Option<usize>, ExecError> {
    let recorded = |op: &Op| match op {
        Op::Read { ptr, bytes, value } => Some((*ptr, *bytes, *value)),
        _ => None,
    };
    if !reads.iter().all(|op| matches!(op, Op::Read { .. })) {
        return Err(ExecError::Device("a device read run holds another operation".into()));
    }
    match (reads, words) {
        ([one], _) => {
            let Some((ptr, bytes, value)) = recorded(one) else {
                return Err(ExecError::Device("a device read run holds another operation".into()));
            };
            Ok((!read_matches(backend, ptr, bytes, &value)?).then_some(0))
        }
        (_, Some(words)) if words.words() >= reads.len() => {
            let addresses = reads
                .iter()
                .map(|op| recorded(op).map_or((0, 0), |(ptr, bytes, _)| (ptr, bytes)));
            let got = words.read(&backend.device, addresses)?;
            Ok(reads.iter().zip(got).position(|(op, now)| match recorded(op) {
                Some((_, bytes, value)) => now[..bytes.min(8)] != value[..bytes.min(8)],
                None => true,
            }))
        }
        _ => {
            for (k, op) in reads.iter().enumerate() {
                let Some((ptr, bytes, value)) = recorded(op) else {
                    return Err(ExecError::Device("a device read run holds another operation".into()));
                };
                if !read_matches(backend, ptr, bytes, &value)? {
                    return Ok(Some(k));
                }
            }
            Ok(None)
        }
    }
}

/// One prepared `cuLaunchKernel`, checked.
pub(super) fn launch(l: &mut PreparedLaunch, stream: sys::CUstream) -> Result<(), ExecError> {
    // SAFETY: the function belongs to a module the backend keeps loaded for
    // its lifetime (the prepared plan borrows the backend to replay); every
    // parameter points into `_args`, which lives as long as `l`, one slot per
    // kernel parameter in signature order, as the recorded launch passed them;
    // device addresses point into the arena or the held external buffers.
    unsafe { drv::launch_kernel(l.function, l.grid, (l.block, 1, 1), l.shared_mem, stream, &mut l.params) }
        .map_err(|e| ExecError::op(&l.kernel, format!("cuLaunchKernel: {e}")))
}

pub(super) fn read_matches(
    backend: &CudaBackend,
    ptr: sys::CUdeviceptr,
    bytes: usize,
    value: &[u8; 8],
) -> Result<bool, ExecError> {
    let mut now = [0u8; 8];
    let n = bytes.min(now.len());
    backend.device.download(&mut now[..n], ptr)?;
    Ok(now[..n] == value[..n])
}

/// A recorded output re-pointed at its place in the arena.
fn rebase(
    rec: &mut Recorder<'_>,
    v: &Value<CudaTensor>,
    arena: Option<&Arc<Storage>>,
    offsets: &[u64],
    external: &[Arc<Storage>],
) -> Result<Value<CudaTensor>, ExecError> {
    Ok(match v {
        Value::Tensor(t) => {
            let elem = t.spec.dtype.size_bytes().max(1);
            let (storage, base_byte) = match rec.by_storage.get(&Arc::as_ptr(&t.storage)).copied() {
                Some(Place::Buffer { index, .. }) => match arena {
                    Some(a) => (Arc::clone(a), offsets.get(index).copied().unwrap_or(0)),
                    None => return Err(ExecError::Input("an output buffer outside the arena".into())),
                },
                Some(Place::External { index, .. }) => match external.get(index) {
                    Some(s) => (Arc::clone(s), 0),
                    None => return Err(ExecError::Input("an output of an unknown buffer".into())),
                },
                None => return Err(ExecError::Input("an output of an unknown buffer".into())),
            };
            // Arena offsets are multiples of ARENA_ALIGN, hence of the element size.
            let offset = t.spec.offset
                + i64::try_from(base_byte / elem).map_err(|_| ExecError::Input("arena too large".into()))?;
            Value::Tensor(CudaTensor {
                storage,
                spec: TensorSpec {
                    offset,
                    ..t.spec.clone()
                },
            })
        }
        Value::List(items) => Value::List(
            items
                .iter()
                .map(|i| rebase(rec, i, arena, offsets, external))
                .collect::<Result<_, _>>()?,
        ),
        Value::Dict(items) => Value::Dict(
            items
                .iter()
                .map(|(k, i)| Ok((k.clone(), rebase(rec, i, arena, offsets, external)?)))
                .collect::<Result<indexmap::IndexMap<_, _>, ExecError>>()?
                .into(),
        ),
        other => other.clone(),
    })
}
