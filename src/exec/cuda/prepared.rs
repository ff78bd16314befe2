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
//! again ([`PreparedCache`] does). A built-in op whose read-back differs
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
//! tensors to [`PreparedCache::run`] makes a new recording (keyed by the
//! tensors' storages, which the cache keeps alive while the entry lives).

use super::kernels::Traced;
use super::library::LibraryCall;
use super::{op_key, CudaBackend, CudaTensor, Storage};
use crate::exec::{
    Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, TensorSpec, Value,
};
use crate::fx::interp::Plan;
use crate::ir::{KernelBackend, SigType};
use crate::sym::Symbol;
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
}

/// The backend wrapper that records a run.
struct Recorder<'b> {
    inner: &'b mut CudaBackend,
    buffers: Vec<Buffer>,
    by_storage: HashMap<*const Storage, Place>,
    external: Vec<Arc<Storage>>,
    events: Vec<Event>,
    /// Why the run cannot be replayed, if it cannot.
    unreplayable: Option<String>,
    /// The first operation that may have written an input or constant in place.
    external_write: Option<String>,
}

impl Recorder<'_> {
    fn now(&self) -> usize {
        self.events.len()
    }

    fn new_buffer(&mut self, storage: &Arc<Storage>) -> Place {
        let place = Place::Buffer {
            index: self.buffers.len(),
            byte: 0,
        };
        self.buffers.push(Buffer {
            _storage: Some(Arc::downgrade(storage)),
            bytes: storage.bytes as u64,
            first: self.now(),
            last: self.now(),
        });
        self.by_storage.insert(Arc::as_ptr(storage), place);
        place
    }

    /// The place of a tensor's first element; a storage never seen before is
    /// an external buffer when `allocated_by_run` is false.
    fn place(&mut self, t: &CudaTensor, allocated_by_run: bool) -> Place {
        self.place_in(&t.storage, t.data_ptr() - t.storage.ptr, allocated_by_run)
    }

    /// The place `byte` bytes into `storage`, noting the use now.
    fn place_in(&mut self, storage: &Arc<Storage>, byte: u64, allocated_by_run: bool) -> Place {
        let base = match self.by_storage.get(&Arc::as_ptr(storage)) {
            Some(p) => *p,
            None if allocated_by_run => self.new_buffer(storage),
            None => {
                let p = Place::External {
                    index: self.external.len(),
                    byte: 0,
                };
                self.external.push(Arc::clone(storage));
                self.by_storage.insert(Arc::as_ptr(storage), p);
                p
            }
        };
        let now = self.now();
        match base {
            Place::Buffer { index, .. } => {
                if let Some(b) = self.buffers.get_mut(index) {
                    b.last = b.last.max(now);
                }
                Place::Buffer { index, byte }
            }
            Place::External { index, .. } => Place::External { index, byte },
        }
    }

    /// The place of a device address inside one of the `candidates` storages.
    fn place_of_address(&mut self, ptr: sys::CUdeviceptr, candidates: &[Arc<Storage>]) -> Option<Place> {
        let s = candidates
            .iter()
            .find(|s| ptr >= s.ptr && ptr < s.ptr + s.bytes.max(1) as u64)?;
        Some(self.place_in(s, ptr - s.ptr, false))
    }

    fn mark_unreplayable(&mut self, why: String) {
        self.unreplayable.get_or_insert(why);
    }

    /// Notes that an operation may have written an input or constant.
    fn note_external_write(&mut self, what: impl FnOnce() -> String) {
        if self.external_write.is_none() {
            self.external_write = Some(what());
        }
    }

    fn record_triton(&mut self, launch: &KernelLaunch<'_, CudaTensor>) -> Result<(), ExecError> {
        let KernelBackend::Triton(meta) = &launch.kernel.backend else {
            return Ok(()); // the inner backend reports the error
        };
        let name = launch.kernel.name.as_str();
        let Some(grid) = launch.grid else { return Ok(()) };
        let dim = |g: i64| u32::try_from(g).ok();
        let (Some(gx), Some(gy), Some(gz)) = (dim(grid[0]), dim(grid[1]), dim(grid[2])) else {
            return Ok(());
        };
        let Some(block) = meta.num_warps.checked_mul(32) else {
            return Ok(());
        };
        let function = self.inner.function(name, meta)?;
        let mut slots = Vec::new();
        let mut starts = Vec::new();
        for (param, ty) in meta.runtime_params() {
            starts.push(slots.len());
            let Some(value) = launch.kwargs.get(param) else {
                return Ok(());
            };
            slots.push(match (ty, value) {
                (SigType::Pointer(_), Value::Tensor(t)) => {
                    let place = self.place(t, false);
                    // Inductor names the parameters its kernels only read
                    // `in_ptr<k>`; a user-defined kernel may write any pointer.
                    if matches!(place, Place::External { .. }) && (meta.user_defined || !param.starts_with("in_ptr")) {
                        self.note_external_write(|| {
                            format!("kernel `{name}` may write an input or constant through `{param}`")
                        });
                    }
                    Slot::Address(place)
                }
                (SigType::Scalar(_), Value::Tensor(t)) => {
                    // A scalar read from a one-element tensor (a 0-d input
                    // Inductor passes as `t.item()`): recorded as a device
                    // read, so a replay reads it again and diverges when it
                    // changed, and the launch keeps the value it read.
                    let bytes = t.spec.dtype.size_bytes() as usize;
                    if bytes > 8 || t.spec.numel() != 1 {
                        self.mark_unreplayable(format!(
                            "kernel `{name}` takes parameter `{param}` from a tensor of {} elements",
                            t.spec.numel()
                        ));
                        return Ok(());
                    }
                    self.check_read_after_write();
                    let at = self.place(t, false);
                    let mut raw = [0u8; 8];
                    self.inner.device.download(&mut raw[..bytes], t.data_ptr())?;
                    self.events.push(Event::Read(ReadRecord { at, bytes, value: raw }));
                    Slot::Bytes(self.inner.marshal(name, param, ty, value)?)
                }
                _ => Slot::Bytes(self.inner.marshal(name, param, ty, value)?),
            });
        }
        if gx == 0 || gy == 0 || gz == 0 {
            return Ok(());
        }
        let blocks = u64::from(gx) * u64::from(gy) * u64::from(gz);
        for per_cta in [meta.global_scratch, meta.profile_scratch].into_iter().flatten() {
            starts.push(slots.len());
            if per_cta == 0 {
                slots.push(Slot::Bytes(0));
                continue;
            }
            let bytes = per_cta
                .checked_mul(blocks)
                .ok_or_else(|| ExecError::op(name, "scratch size overflows"))?;
            let index = self.buffers.len();
            self.buffers.push(Buffer {
                _storage: None,
                bytes,
                first: self.now(),
                last: self.now(),
            });
            slots.push(Slot::Address(Place::Buffer { index, byte: 0 }));
        }
        self.events.push(Event::Launch(LaunchRecord {
            kernel: name.to_string(),
            function,
            grid: (gx, gy, gz),
            block,
            shared_mem: meta.shared_mem,
            slots,
            starts,
        }));
        Ok(())
    }

    /// Runs an extern op on the inner backend with its device operations
    /// traced, and records them: allocations become arena buffers, launches
    /// prepared launches, library calls re-pointed library calls, host reads
    /// reads (segment boundaries that a replay checks), zeroing a memset. An
    /// op that goes to the host fallback, or passes an address outside its
    /// operands and allocations, makes the run unreplayable.
    fn record_extern(&mut self, call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
        let op = call.op.to_string();
        let mut operands = Vec::new();
        call.args
            .iter()
            .chain(call.kwargs.values())
            .for_each(|v| tensors_of(v, &mut operands));
        // In-place ops write their first argument, `out=` variants `out`.
        let mut written = Vec::new();
        if op_key(call.op).ends_with('_') {
            if let Some(v) = call.args.first() {
                tensors_of(v, &mut written);
            }
        }
        if let Some(v) = call.kwargs.get("out") {
            tensors_of(v, &mut written);
        }
        self.inner.trace = Some(Vec::new());
        let result = self.inner.call_extern(call);
        let trace = self.inner.trace.take().unwrap_or_default();
        let result = result?;
        let mut storages: Vec<Arc<Storage>> = operands.iter().map(|t| Arc::clone(&t.storage)).collect();
        for t in &operands {
            self.place(t, false);
        }
        for event in trace {
            match event {
                Traced::Alloc(s) => {
                    self.new_buffer(&s);
                    storages.push(s);
                }
                Traced::Launch {
                    name,
                    function,
                    grid,
                    block,
                    shared_mem,
                    params,
                } => {
                    let mut slots = Vec::new();
                    let mut starts = Vec::with_capacity(params.len());
                    for p in &params {
                        starts.push(slots.len());
                        for (i, &word) in p.words.iter().enumerate() {
                            if word == 0 || !p.pointers.contains(&i) {
                                slots.push(Slot::Bytes(word));
                                continue;
                            }
                            match self.place_of_address(word, &storages) {
                                Some(place) => slots.push(Slot::Address(place)),
                                None => {
                                    self.mark_unreplayable(format!(
                                        "built-in kernel `{name}` of `{op}` takes an address outside its operands"
                                    ));
                                    slots.push(Slot::Bytes(word));
                                }
                            }
                        }
                    }
                    self.events.push(Event::Launch(LaunchRecord {
                        kernel: name,
                        function,
                        grid,
                        block,
                        shared_mem,
                        slots,
                        starts,
                    }));
                }
                Traced::Zero { ptr, bytes } => match self.place_of_address(ptr, &storages) {
                    Some(at) => self.events.push(Event::Zero { at, bytes }),
                    None => self.mark_unreplayable(format!("`{op}` zeroes memory outside its operands")),
                },
                Traced::Read { ptr, bytes, value } => {
                    self.check_read_after_write();
                    match self.place_of_address(ptr, &storages) {
                        Some(at) => self.events.push(Event::Read(ReadRecord { at, bytes, value })),
                        None => self.mark_unreplayable(format!("`{op}` reads memory outside its operands")),
                    }
                }
                Traced::Library(call) => {
                    let mut places = Vec::new();
                    for a in call.addresses() {
                        match self.place_of_address(a.ptr, &storages) {
                            Some(place) => {
                                if a.writes && matches!(place, Place::External { .. }) {
                                    self.note_external_write(|| {
                                        format!("extern op `{op}` writes an input or constant")
                                    });
                                }
                                places.push(place);
                            }
                            None => {
                                self.mark_unreplayable(format!(
                                    "{} call of `{}` takes an address outside its operands",
                                    call.library(),
                                    call.op()
                                ));
                                break;
                            }
                        }
                    }
                    self.events.push(Event::Library(LibraryRecord { call, places }));
                }
                Traced::Host(host_op) => {
                    self.mark_unreplayable(format!("extern op `{host_op}` runs through the host fallback"))
                }
            }
        }
        for t in &written {
            if matches!(self.place(t, false), Place::External { .. }) {
                self.note_external_write(|| format!("extern op `{op}` writes an input or constant"));
            }
        }
        let mut results = Vec::new();
        tensors_of(&result, &mut results);
        for t in &results {
            self.place(t, true);
        }
        Ok(result)
    }

    /// A read after a possible write to an input cannot be replayed: a
    /// replay diverging there would re-run the start and repeat the write.
    fn check_read_after_write(&mut self) {
        if let Some(write) = &self.external_write {
            let why = format!("it reads a device value after {write} (a replay that read another value could not re-run the start without writing the input twice)");
            self.mark_unreplayable(why);
        }
    }
}

fn tensors_of(v: &Value<CudaTensor>, out: &mut Vec<CudaTensor>) {
    match v {
        Value::Tensor(t) => out.push(t.clone()),
        Value::List(items) => items.iter().for_each(|i| tensors_of(i, out)),
        Value::Dict(items) => items.values().for_each(|i| tensors_of(i, out)),
        _ => {}
    }
}

impl Backend for Recorder<'_> {
    type Tensor = CudaTensor;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn allocate(&mut self, spec: &TensorSpec) -> Result<CudaTensor, ExecError> {
        let t = self.inner.allocate(spec)?;
        self.new_buffer(&t.storage);
        Ok(t)
    }

    fn spec<'a>(&'a self, tensor: &'a CudaTensor) -> &'a TensorSpec {
        self.inner.spec(tensor)
    }

    fn view(&mut self, base: &CudaTensor, size: &[i64], stride: &[i64], offset: i64) -> Result<CudaTensor, ExecError> {
        self.inner.view(base, size, stride, offset)
    }

    fn launch(&mut self, launch: KernelLaunch<'_, CudaTensor>) -> Result<(), ExecError> {
        self.record_triton(&launch)?;
        self.inner.launch(launch)
    }

    fn call_extern(&mut self, call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
        self.record_extern(call)
    }

    fn read_scalar(&mut self, tensor: &CudaTensor, request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        self.check_read_after_write();
        let at = self.place(tensor, false);
        let bytes = tensor.spec.dtype.size_bytes() as usize;
        let value = self.inner.read_scalar(tensor, request)?;
        let mut raw = [0u8; 8];
        if bytes > raw.len() || tensor.spec.numel() != 1 {
            self.mark_unreplayable("a read of a value wider than 8 bytes".into());
        } else {
            self.inner.device.download(&mut raw[..bytes], tensor.data_ptr())?;
            self.events.push(Event::Read(ReadRecord { at, bytes, value: raw }));
        }
        Ok(value)
    }

    fn copy_in(&mut self, tensor: &crate::exec::Tensor) -> Result<CudaTensor, ExecError> {
        self.mark_unreplayable("a copy from the host during the run".into());
        self.inner.copy_in(tensor)
    }

    fn copy_out(&mut self, tensor: &CudaTensor) -> Result<crate::exec::Tensor, ExecError> {
        self.mark_unreplayable("a copy to the host during the run".into());
        self.inner.copy_out(tensor)
    }

    fn hint(&mut self, symbol: &Symbol, decl: Option<&crate::ir::SymbolDecl>) -> Option<i64> {
        self.inner.hint(symbol, decl)
    }

    fn check_alignment(&self, tensor: &CudaTensor, alignment: u32) -> Result<(), ExecError> {
        self.inner.check_alignment(tensor, alignment)
    }

    fn memory(&self) -> MemoryStats {
        self.inner.memory()
    }
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

/// How a replay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Every operation ran; the outputs hold this call's results.
    Done,
    /// The `read`-th device read returned another value than when recorded:
    /// the rest of the recording does not apply and the outputs are not valid.
    Diverged {
        /// Index of the read among the recording's reads.
        read: usize,
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
    pub(super) graphs: Option<super::graph::SegmentGraphs>,
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
/// get disjoint byte ranges (largest first, each at the lowest offset that
/// fits). Returns the offsets and the arena size.
fn pack(buffers: &[Buffer]) -> (Vec<u64>, u64) {
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
            .filter(|&&j| buffers[j].first <= b.last && b.first <= buffers[j].last)
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
        };
        let out = plan.run(&mut rec, inputs, constants)?;
        if let Some(why) = rec.unreplayable.take() {
            return Err(ExecError::Unsupported(format!("the run cannot be prepared: {why}")));
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
        let (offsets, arena_bytes) = pack(&rec.buffers);
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
        let prepared = Prepared {
            ops,
            external,
            _arena: arena,
            arena_bytes,
            outputs,
            recorded_outputs: Some(out.outputs.clone()),
            writes_inputs,
            graphs: None,
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

    /// Host µs per replay spent in the libraries alone: each of the
    /// recording's library calls is made on its own in loops of `calls` calls
    /// after warm-up (the stream drained between loops), and the medians per
    /// call are summed. This is the libraries' own launch cost, the floor for
    /// a replay's library calls as [`super::launch_floor`] is for its kernel
    /// launches. The calls write the same results into the arena again.
    pub fn library_floor_us(&self, backend: &CudaBackend, calls: usize, repeats: usize) -> Result<f64, ExecError> {
        let calls = calls.max(1);
        let mut total = 0.0;
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
            total += per_call[per_call.len() / 2];
        }
        Ok(total)
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
            .map_err(|e| ExecError::op("cuda", format!("cuCtxSetCurrent: {e}")))?;
        let stream = device.stream.cu_stream();
        let mut read = 0usize;
        for op in &mut self.ops {
            match op {
                Op::Launch(l) => launch(l, stream)?,
                Op::Library(call) => call.run(backend)?,
                Op::Zero { ptr, bytes } => device.zero(*ptr, *bytes)?,
                Op::Read { ptr, bytes, value } => {
                    if !read_matches(backend, *ptr, *bytes, value)? {
                        return Ok(Replay::Diverged { read });
                    }
                    read += 1;
                }
            }
        }
        Ok(Replay::Done)
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

/// Prepared recordings of one plan, keyed by the layouts and symbol values of
/// the inputs and by the device values each recording read (a small cache:
/// the oldest entry goes beyond the capacity, [`PreparedCache::CAPACITY`]
/// unless made [`PreparedCache::with_capacity`]).
#[derive(Debug, Default)]
pub struct PreparedCache {
    entries: Vec<(Vec<InputKey>, Prepared)>,
    /// Recordings made (first calls, new shapes, diverged reads).
    pub recordings: usize,
    /// Most recordings kept; 0 means [`PreparedCache::CAPACITY`].
    capacity: usize,
}

/// What of one input a recording depends on.
#[derive(Clone, Debug, PartialEq)]
enum InputKey {
    Tensor { storage: *const Storage, spec: TensorSpec },
    Int(i64),
    Other,
}

fn input_key(v: &Value<CudaTensor>) -> InputKey {
    match v {
        Value::Tensor(t) => InputKey::Tensor {
            storage: Arc::as_ptr(&t.storage),
            spec: t.spec.clone(),
        },
        Value::Int(i) => InputKey::Int(*i),
        _ => InputKey::Other,
    }
}

fn key_matches(key: &[InputKey], inputs: &[Value<CudaTensor>]) -> bool {
    key.len() == inputs.len()
        && key.iter().zip(inputs).all(|(k, v)| match (k, v) {
            (InputKey::Tensor { storage, spec }, Value::Tensor(t)) => {
                *storage == Arc::as_ptr(&t.storage) && *spec == t.spec
            }
            (InputKey::Int(a), Value::Int(b)) => a == b,
            (InputKey::Other, v) => !matches!(v, Value::Tensor(_) | Value::Int(_)),
            _ => false,
        })
}

impl PreparedCache {
    /// Most recordings kept by default.
    pub const CAPACITY: usize = 8;

    /// An empty cache keeping at most `capacity` recordings (at least one).
    pub fn with_capacity(capacity: usize) -> PreparedCache {
        PreparedCache {
            capacity: capacity.max(1),
            ..PreparedCache::default()
        }
    }

    /// Recordings held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when no recording is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Runs `plan` on `inputs`: replays a matching recording (directly, or
    /// through CUDA graphs when `graphs`), recording a new one when none
    /// matches or every match diverged. Returns the recording whose outputs
    /// hold the results. Each call runs the program's operations once, so
    /// writes to inputs happen once per call (a diverged replay stops before
    /// any such write; see the module documentation).
    ///
    /// Inputs are used in place: a recording matches only the same device
    /// tensors (by storage) with the same layouts and integer values. For new
    /// values, write them into the same tensors
    /// ([`super::CudaBackend::overwrite`]); other tensors make a new recording.
    pub fn run(
        &mut self,
        backend: &mut CudaBackend,
        plan: &Plan,
        inputs: &[Value<CudaTensor>],
        constants: &IndexMap<String, CudaTensor>,
        graphs: bool,
    ) -> Result<&Prepared, ExecError> {
        let mut hit = None;
        for (i, (key, prepared)) in self.entries.iter_mut().enumerate() {
            if !key_matches(key, inputs) {
                continue;
            }
            let r = if graphs {
                super::graph::replay(prepared, backend)?
            } else {
                prepared.replay(backend)?
            };
            if r == Replay::Done {
                hit = Some(i);
                break;
            }
        }
        let i = match hit {
            Some(i) => i,
            None => {
                // The recorded run computed this call's results; it is not
                // replayed now (that would apply writes to the inputs twice).
                // Graphs are captured on the next graph replay.
                let (prepared, _) = Prepared::record(backend, plan, inputs.to_vec(), constants)?;
                self.recordings += 1;
                let capacity = if self.capacity == 0 {
                    Self::CAPACITY
                } else {
                    self.capacity
                };
                if self.entries.len() >= capacity {
                    self.entries.remove(0);
                }
                self.entries.push((inputs.iter().map(input_key).collect(), prepared));
                self.entries.len() - 1
            }
        };
        // `i` indexes an entry that exists: found above or just pushed.
        self.entries
            .get(i)
            .map(|(_, p)| p)
            .ok_or_else(|| ExecError::op("cuda", "prepared cache entry vanished"))
    }
}
