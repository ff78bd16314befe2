//! The recording wrapper: a [`CudaBackend`] that runs the plan once while
//! keeping every device operation, with its arguments as places in memory
//! (see the module documentation of [`super`]).

use super::{Buffer, Event, LaunchRecord, LibraryRecord, Place, ReadRecord, Slot};
use crate::exec::cuda::library::Traced;
use crate::exec::cuda::{op_key, CudaBackend, CudaTensor, Storage};
use crate::exec::{
    Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, TensorSpec, Value,
};
use crate::ir::{KernelBackend, SigType};
use crate::sym::Symbol;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::sync::Arc;

/// The backend wrapper that records a run.
pub(super) struct Recorder<'b> {
    pub(super) inner: &'b mut CudaBackend,
    pub(super) buffers: Vec<Buffer>,
    pub(super) by_storage: HashMap<*const Storage, Place>,
    pub(super) external: Vec<Arc<Storage>>,
    pub(super) events: Vec<Event>,
    /// Why the run cannot be replayed, if it cannot.
    pub(super) unreplayable: Option<String>,
    /// The first operation that may have written an input or constant in place.
    pub(super) external_write: Option<String>,
    /// The top-level graph node whose step runs now (its position in the
    /// graph's order, [`Backend::begin_node`]).
    pub(super) node: usize,
    /// The node of each event (`event_nodes[i]` belongs to `events[i]`).
    pub(super) event_nodes: Vec<usize>,
    /// Each event's dependencies among its node's earlier events where an
    /// op's [`Traced::Fork`] says so; `None`: the node's event before it.
    pub(super) intra: Vec<Option<Vec<usize>>>,
    /// The op's open fork, if any.
    pub(super) fork: Option<Fork>,
    /// What the next event depends on after a fork was joined.
    pub(super) joined: Option<Vec<usize>>,
}

/// Operations of one op that depend on what came before the fork only.
pub(super) struct Fork {
    /// What each operation of the fork depends on (empty: the node's own
    /// dependencies, for a fork at the node's start).
    base: Vec<usize>,
    /// The fork's events so far.
    events: Vec<usize>,
}

impl Recorder<'_> {
    pub(super) fn now(&self) -> usize {
        self.events.len()
    }

    /// Records `event` as the current node's.
    pub(super) fn push_event(&mut self, event: Event) {
        let e = self.events.len();
        let intra = match self.fork.as_mut() {
            Some(fork) => {
                fork.events.push(e);
                Some(fork.base.clone())
            }
            None => self.joined.take(),
        };
        self.events.push(event);
        self.event_nodes.push(self.node);
        self.intra.push(intra);
    }

    /// Opens a fork ([`Traced::Fork`]): the events until [`Self::join`]
    /// depend on what the next event would have depended on.
    fn fork(&mut self) {
        self.join();
        let previous_in_node = self
            .event_nodes
            .last()
            .filter(|n| **n == self.node)
            .map(|_| self.events.len() - 1);
        let base = self
            .joined
            .take()
            .unwrap_or_else(|| previous_in_node.into_iter().collect());
        self.fork = Some(Fork {
            base,
            events: Vec::new(),
        });
    }

    /// Closes the open fork, if any: the next event depends on all of its
    /// events, and every buffer the node used during it counts as used
    /// throughout it (its events may run in any order).
    fn join(&mut self) {
        let Some(fork) = self.fork.take() else { return };
        let (Some(&first), Some(&last)) = (fork.events.first(), fork.events.last()) else {
            self.joined = Some(fork.base).filter(|b| !b.is_empty());
            return;
        };
        let node = self.node;
        for b in &mut self.buffers {
            if let Some(u) = b.uses.last_mut().filter(|u| u.0 == node && u.2 >= first) {
                u.1 = u.1.min(first);
                u.2 = u.2.max(last);
                b.last = b.last.max(last);
            }
        }
        self.joined = Some(fork.events);
    }

    /// Notes that the current node uses buffer `index` at event `now`.
    fn note_use(&mut self, index: usize, now: usize) {
        let node = self.node;
        if let Some(b) = self.buffers.get_mut(index) {
            b.last = b.last.max(now);
            match b.uses.last_mut() {
                Some(u) if u.0 == node => u.2 = u.2.max(now),
                _ => b.uses.push((node, now, now)),
            }
        }
    }

    pub(super) fn new_buffer(&mut self, storage: &Arc<Storage>) -> Place {
        let place = Place::Buffer {
            index: self.buffers.len(),
            byte: 0,
        };
        self.buffers.push(Buffer {
            _storage: Some(Arc::downgrade(storage)),
            bytes: storage.bytes as u64,
            first: self.now(),
            last: self.now(),
            uses: Vec::new(),
        });
        self.by_storage.insert(Arc::as_ptr(storage), place);
        place
    }

    /// The place of a tensor's first element; a storage never seen before is
    /// an external buffer when `allocated_by_run` is false.
    pub(super) fn place(&mut self, t: &CudaTensor, allocated_by_run: bool) -> Place {
        self.place_in(&t.storage, t.data_ptr() - t.storage.ptr, allocated_by_run)
    }

    /// The place `byte` bytes into `storage`, noting the use now.
    pub(super) fn place_in(&mut self, storage: &Arc<Storage>, byte: u64, allocated_by_run: bool) -> Place {
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
                self.note_use(index, now);
                Place::Buffer { index, byte }
            }
            Place::External { index, .. } => Place::External { index, byte },
        }
    }

    /// The place of a device address inside one of the `candidates` storages.
    pub(super) fn place_of_address(&mut self, ptr: sys::CUdeviceptr, candidates: &[Arc<Storage>]) -> Option<Place> {
        let s = candidates
            .iter()
            .find(|s| ptr >= s.ptr && ptr < s.ptr + s.bytes.max(1) as u64)?;
        Some(self.place_in(s, ptr - s.ptr, false))
    }

    pub(super) fn mark_unreplayable(&mut self, why: String) {
        self.unreplayable.get_or_insert(why);
    }

    /// Notes that an operation may have written an input or constant.
    pub(super) fn note_external_write(&mut self, what: impl FnOnce() -> String) {
        if self.external_write.is_none() {
            self.external_write = Some(what());
        }
    }

    pub(super) fn record_triton(&mut self, launch: &KernelLaunch<'_, CudaTensor>) -> Result<(), ExecError> {
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
                    self.push_event(Event::Read(ReadRecord { at, bytes, value: raw }));
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
                uses: vec![(self.node, self.now(), self.now())],
            });
            slots.push(Slot::Address(Place::Buffer { index, byte: 0 }));
        }
        self.push_event(Event::Launch(LaunchRecord {
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
    pub(super) fn record_extern(&mut self, call: ExternCall<'_, CudaTensor>) -> Result<Value<CudaTensor>, ExecError> {
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
                    self.push_event(Event::Launch(LaunchRecord {
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
                    Some(at) => self.push_event(Event::Zero { at, bytes }),
                    None => self.mark_unreplayable(format!("`{op}` zeroes memory outside its operands")),
                },
                Traced::Read { ptr, bytes, value } => {
                    self.check_read_after_write();
                    match self.place_of_address(ptr, &storages) {
                        Some(at) => self.push_event(Event::Read(ReadRecord { at, bytes, value })),
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
                    self.push_event(Event::Library(LibraryRecord { call, places }));
                }
                Traced::Host(host_op) => {
                    self.mark_unreplayable(format!("extern op `{host_op}` runs through the host fallback"))
                }
                Traced::Fork => self.fork(),
                Traced::Join => self.join(),
            }
        }
        self.join();
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
    pub(super) fn check_read_after_write(&mut self) {
        if let Some(write) = &self.external_write {
            let why = format!("it reads a device value after {write} (a replay that read another value could not re-run the start without writing the input twice)");
            self.mark_unreplayable(why);
        }
    }
}

pub(super) fn tensors_of(v: &Value<CudaTensor>, out: &mut Vec<CudaTensor>) {
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
            self.push_event(Event::Read(ReadRecord { at, bytes, value: raw }));
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

    fn begin_node(&mut self, position: usize) {
        self.join();
        self.joined = None;
        self.node = position;
    }
}
