//! Collectives on NCCL: the ranks of a multi-rank program run as threads of
//! one process, one GPU each (`collective::run_ranks` with the runtime's
//! `CudaRankJob`s, `runtime::cuda`), and their
//! `torch.ops._c10d_functional` calls are NCCL collectives on each rank's
//! stream.
//!
//! A run makes one [`NcclWorld`]: the process groups, one NCCL unique id per
//! group, and the [`Rendezvous`] the ranks' calls meet in. Each rank's
//! backend joins it ([`CudaBackend::join_world`]), creating a communicator
//! for every group it belongs to (`ncclCommInitRank`, groups in the order
//! the rank set lists them, so no two ranks wait on each other's groups).
//!
//! A collective is checked on the host before it is enqueued: the members'
//! calls must agree (op, reduce op, dtype, sizes), as with host collectives
//! (the same parsing and the same meeting, [`crate::exec::collective`]), so
//! a mismatch or a missing rank is an error naming them, never a kernel
//! waiting on a peer that will not come. The call itself is a
//! [`LibraryCall`] on the backend's stream: the prepared path replays it and
//! CUDA graphs capture it like a cuBLAS call. `wait_tensor` is its argument:
//! later work on the stream is ordered after the collective.
//!
//! NCCL is opened like the other CUDA libraries (see [`super::libraries`]):
//! by name, then in the first rank's `CudaOptions::paths` (which
//! `CudaPaths::from_env` fills with NVIDIA's `nvidia/nccl/lib` pip wheel,
//! among others).

use super::library::{self, Address, LibraryCall};
use super::{libraries, CudaBackend, CudaError, CudaTensor};
use crate::exec::collective::rendezvous::{Rendezvous, Signature};
use crate::exec::collective::{check_reduce, CollectiveCall, CollectiveOptions, ProcessGroups, Request, OPS};
use crate::exec::cuda::DeviceResult;
use crate::exec::op::op_key;
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;
use cudarc::driver::sys::CUdeviceptr;
use cudarc::nccl::sys as nccl;
use indexmap::IndexMap;
use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

/// The shared state of one multi-rank run on NCCL (see the module docs).
pub struct NcclWorld {
    /// The collectives' meeting (payloads and results carry nothing).
    calls: Rendezvous<(), ()>,
    /// Where the members of each group meet before creating its communicator.
    joins: Rendezvous<(), ()>,
    /// One NCCL unique id per process group.
    ids: IndexMap<String, nccl::ncclUniqueId>,
}

impl std::fmt::Debug for NcclWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclWorld")
            .field("groups", self.calls.groups())
            .finish()
    }
}

/// Loads NCCL (see [`libraries`]) from the loader's paths or `dirs`,
/// failing with where it was looked for.
fn load_nccl(dirs: &[std::path::PathBuf]) -> Result<(), CudaError> {
    // SAFETY: a dlopen probe, checked before cudarc would panic on a missing library.
    if !libraries::keep_loaded("nccl", dirs) || !unsafe { nccl::is_culib_present() } {
        return Err(CudaError::NotFound(libraries::missing("NCCL (libnccl.so.2)", dirs)));
    }
    Ok(())
}

/// The error of NCCL call `call` (with the communicator's last error, when
/// there is one).
fn nccl_error(call: &'static str, code: nccl::ncclResult_t, comm: Option<nccl::ncclComm_t>) -> CudaError {
    // SAFETY: NCCL returns static, NUL-terminated strings (or null) for any code.
    let name = unsafe { nccl::ncclGetErrorString(code) };
    let mut status = if name.is_null() {
        format!("{code:?}")
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    // SAFETY: `comm` is a live communicator (or null, which NCCL accepts).
    let last = unsafe { nccl::ncclGetLastError(comm.unwrap_or(std::ptr::null_mut())) };
    if !last.is_null() {
        // SAFETY: non-null and NUL-terminated, owned by NCCL.
        let last = unsafe { CStr::from_ptr(last) }.to_string_lossy();
        if !last.is_empty() {
            status.push_str(": ");
            status.push_str(&last);
        }
    }
    CudaError::Nccl { call, status }
}

fn check(call: &'static str, code: nccl::ncclResult_t, comm: Option<nccl::ncclComm_t>) -> Result<(), CudaError> {
    match code {
        nccl::ncclResult_t::ncclSuccess => Ok(()),
        code => Err(nccl_error(call, code, comm)),
    }
}

impl NcclWorld {
    /// The world of a run over `groups` (checked with
    /// [`ProcessGroups::check`]): loads NCCL (from the loader's paths or
    /// `paths.library_dirs`) and makes each group's unique id.
    pub fn new(
        groups: ProcessGroups,
        options: CollectiveOptions,
        paths: &super::CudaPaths,
    ) -> Result<Arc<NcclWorld>, ExecError> {
        groups
            .check()
            .map_err(|e| ExecError::Input(format!("process groups: {e}")))?;
        load_nccl(&paths.library_dirs)?;
        let mut ids = IndexMap::new();
        for name in groups.groups.keys() {
            let mut id = nccl::ncclUniqueId { internal: [0; 128] };
            // SAFETY: `id` is a valid out-pointer.
            check("ncclGetUniqueId", unsafe { nccl::ncclGetUniqueId(&mut id) }, None)?;
            ids.insert(name.clone(), id);
        }
        Ok(Arc::new(NcclWorld {
            calls: Rendezvous::new(groups.clone(), options.timeout),
            joins: Rendezvous::new(groups, options.timeout),
            ids,
        }))
    }

    /// The process groups.
    pub fn groups(&self) -> &ProcessGroups {
        self.calls.groups()
    }

    /// Fails every rank waiting to join or at a collective, and every later
    /// one, with `message` (a rank's program failed).
    pub fn abort(&self, message: &str) {
        self.joins.abort(message);
        self.calls.abort(message);
    }
}

/// One NCCL communicator: this rank's member of one process group.
#[derive(Debug)]
struct Comm {
    raw: nccl::ncclComm_t,
    /// The group's size.
    size: usize,
}

// SAFETY: an NCCL communicator may be used from any thread; each is used by
// one rank, whose backend issues its calls one at a time.
unsafe impl Send for Comm {}
// SAFETY: as above: shared references only reach `raw` through calls the
// owning rank makes in order.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by `ncclCommInitRank` and is destroyed
        // once; the backend holding it synchronised its stream first.
        unsafe {
            let _ = nccl::ncclCommDestroy(self.raw);
        }
    }
}

/// A backend's part in an [`NcclWorld`]: its global rank and its
/// communicators by group name.
#[derive(Debug)]
pub(crate) struct NcclRank {
    world: Arc<NcclWorld>,
    rank: usize,
    comms: IndexMap<String, Arc<Comm>>,
}

impl CudaBackend {
    /// Joins `world` as global rank `rank`: creates this rank's communicator
    /// of every group it belongs to, after every member of the group has
    /// come to create it (or fails naming who did not come). The
    /// collective ops then run on NCCL.
    pub fn join_world(&mut self, world: &Arc<NcclWorld>, rank: usize) -> Result<(), ExecError> {
        let world_size = world.groups().world_size;
        if rank >= world_size {
            return Err(ExecError::Input(format!(
                "rank {rank} is outside the world of {world_size} ranks"
            )));
        }
        self.bind()?;
        let mut comms = IndexMap::new();
        for (name, members) in &world.groups().groups {
            let Some(position) = members.iter().position(|&r| r == rank) else {
                continue;
            };
            let joining = Signature {
                request: Request::Join,
                dtype: DType::Uint8,
                size: Vec::new(),
            };
            world
                .joins
                .meet(rank, "ncclCommInitRank", name, joining, (), |_, m| {
                    Ok(vec![(); m.len()])
                })
                .map_err(|m| ExecError::Input(format!("creating the communicator of process group `{name}`: {m}")))?;
            let id = world
                .ids
                .get(name)
                .ok_or_else(|| ExecError::Input(format!("internal: no NCCL id for process group `{name}`")))?;
            let (size, pos) = match (c_int::try_from(members.len()), c_int::try_from(position)) {
                (Ok(s), Ok(p)) => (s, p),
                _ => {
                    return Err(ExecError::Input(format!(
                        "process group `{name}` has {} ranks, more than NCCL counts",
                        members.len()
                    )))
                }
            };
            let mut raw: nccl::ncclComm_t = std::ptr::null_mut();
            // Not under `driver::setup_lock`: the call waits for the group's
            // other members, whose own calls would need that lock.
            // SAFETY: `raw` is a valid out-pointer, `id` the group's unique
            // id; the backend's context is current on this thread.
            let result = unsafe { nccl::ncclCommInitRank(&mut raw, size, *id, pos) };
            check("ncclCommInitRank", result, None)?;
            comms.insert(
                name.clone(),
                Arc::new(Comm {
                    raw,
                    size: members.len(),
                }),
            );
        }
        self.collectives = Some(Arc::new(NcclRank {
            world: Arc::clone(world),
            rank,
            comms,
        }));
        Ok(())
    }
}

/// NCCL's type for `dtype`.
fn nccl_dtype(dtype: DType) -> Option<nccl::ncclDataType_t> {
    use nccl::ncclDataType_t as N;
    Some(match dtype {
        DType::Int8 => N::ncclInt8,
        DType::Uint8 | DType::Bool => N::ncclUint8,
        DType::Int32 => N::ncclInt32,
        DType::Int64 => N::ncclInt64,
        DType::Float16 => N::ncclFloat16,
        DType::Bfloat16 => N::ncclBfloat16,
        DType::Float32 => N::ncclFloat32,
        DType::Float64 => N::ncclFloat64,
        _ => return None,
    })
}

/// NCCL's reduction for `reduce` on `dtype` (checked by `check_reduce` first).
fn nccl_reduce(reduce: &str, dtype: DType) -> Result<nccl::ncclRedOp_t, String> {
    use nccl::ncclRedOp_t as R;
    Ok(match reduce {
        "sum" if dtype != DType::Bool => R::ncclSum,
        "product" if dtype != DType::Bool => R::ncclProd,
        "min" => R::ncclMin,
        "max" => R::ncclMax,
        "avg" if dtype.is_floating() => R::ncclAvg,
        other => {
            return Err(format!(
                "reduce op `{other}` on a {dtype} tensor is not supported by NCCL"
            ))
        }
    })
}

/// What an [`NcclCall`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    AllReduce(nccl::ncclRedOp_t),
    AllGather,
    ReduceScatter(nccl::ncclRedOp_t),
    /// The root's position in the group.
    Broadcast(c_int),
}

/// One NCCL collective, replayable (see [`LibraryCall`]).
#[derive(Debug)]
struct NcclCall {
    op: String,
    kind: Kind,
    send: CUdeviceptr,
    recv: CUdeviceptr,
    /// Elements sent (all-reduce, all-gather, broadcast) or received per
    /// member (reduce-scatter).
    count: usize,
    dtype: nccl::ncclDataType_t,
    comm: Arc<Comm>,
}

impl LibraryCall for NcclCall {
    fn op(&self) -> &str {
        &self.op
    }

    fn library(&self) -> &'static str {
        "NCCL"
    }

    fn addresses(&self) -> Vec<Address> {
        library::addresses(&[(self.send, false), (self.recv, true)], &[])
    }

    fn rebased(&self, addresses: &[CUdeviceptr]) -> Box<dyn LibraryCall> {
        let (send, recv) = match *addresses {
            [s, r] => (s, r),
            _ => (self.send, self.recv),
        };
        Box::new(NcclCall {
            op: self.op.clone(),
            send,
            recv,
            comm: Arc::clone(&self.comm),
            ..*self
        })
    }

    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError> {
        let stream = backend.device.cu_stream() as nccl::cudaStream_t;
        let (send, recv) = (self.send as *const c_void, self.recv as *mut c_void);
        let comm = self.comm.raw;
        // SAFETY: `send` and `recv` are device buffers of this backend's
        // context holding `count` elements (times the group size where the
        // collective gathers or scatters; checked when the call was made and
        // rebased only onto places of the same size); the communicator is
        // live (held by `self.comm`) and belongs to this rank's device.
        let (call, code) = unsafe {
            match self.kind {
                Kind::AllReduce(op) => (
                    "ncclAllReduce",
                    nccl::ncclAllReduce(send, recv, self.count, self.dtype, op, comm, stream),
                ),
                Kind::AllGather => (
                    "ncclAllGather",
                    nccl::ncclAllGather(send, recv, self.count, self.dtype, comm, stream),
                ),
                Kind::ReduceScatter(op) => (
                    "ncclReduceScatter",
                    nccl::ncclReduceScatter(send, recv, self.count, self.dtype, op, comm, stream),
                ),
                Kind::Broadcast(root) => (
                    "ncclBroadcast",
                    nccl::ncclBroadcast(send, recv, self.count, self.dtype, root, comm, stream),
                ),
            }
        };
        check(call, code, Some(comm)).map_err(|e| ExecError::op(&self.op, e.to_string()))
    }
}

/// Runs `call` when it is a collective: `Ok(None)` for any other op.
pub(super) fn call(backend: &mut CudaBackend, call: &ExternCall<'_, CudaTensor>) -> DeviceResult {
    let key = op_key(call.op);
    if !OPS.contains(&key.as_str()) {
        return Ok(None);
    }
    let Some(rank) = backend.collectives.clone() else {
        return Err(ExecError::op(
            call.op,
            "a collective runs only in a multi-rank run (`wrapir run RANKSET --device cuda`, `exec::collective::run_ranks` with `CudaRankJob`s)",
        ));
    };
    let arg = |i: usize, kw: &str| call.args.get(i).or_else(|| call.kwargs.get(kw));
    let c = match CollectiveCall::parse(rank.world.groups(), &key, &arg)? {
        CollectiveCall::Wait(t) => return Ok(Some(Value::Tensor(t.clone()))),
        CollectiveCall::Collective(c) => c,
    };
    let err = |m: String| ExecError::op(&c.op, m);
    let members = rank.world.groups().members(&c.group).map_err(err)?;
    let comm = rank.comms.get(&c.group).ok_or_else(|| {
        err(format!(
            "rank {} is not in process group `{}` (ranks {members:?})",
            rank.rank, c.group
        ))
    })?;
    let spec = c.input.spec.clone();
    let dtype = nccl_dtype(spec.dtype).ok_or_else(|| err(format!("NCCL has no {} type", spec.dtype)))?;
    let dense = crate::exec::contiguous_strides(&spec.size);
    if spec
        .size
        .iter()
        .zip(spec.stride.iter().zip(&dense))
        .any(|(s, (a, b))| *s > 1 && a != b)
    {
        return Err(err(format!(
            "the input has strides {:?}; NCCL takes dense row-major tensors ({dense:?})",
            spec.stride
        )));
    }
    let numel = usize::try_from(spec.numel()).map_err(|_| err("a negative element count".into()))?;
    let n = comm.size;
    let group_size = i64::try_from(n).map_err(|_| err(format!("a group of {n} ranks")))?;
    let mut out_size = spec.size.clone();
    let (kind, count) = match &c.request {
        Request::AllReduce { reduce } | Request::ReduceScatter { reduce } => {
            check_reduce(reduce, spec.dtype, "NCCL").map_err(err)?;
            let op = nccl_reduce(reduce, spec.dtype).map_err(err)?;
            if matches!(c.request, Request::AllReduce { .. }) {
                (Kind::AllReduce(op), numel)
            } else {
                let d0 = *spec
                    .size
                    .first()
                    .ok_or_else(|| err("reduce_scatter_tensor of a 0-dimensional tensor".into()))?;
                if d0 % group_size != 0 {
                    return Err(err(format!("dim 0 of size {d0} does not split into {n} equal parts")));
                }
                out_size[0] = d0 / group_size;
                (Kind::ReduceScatter(op), numel / n)
            }
        }
        Request::AllGather => {
            let d0 = *spec
                .size
                .first()
                .ok_or_else(|| err("all_gather_into_tensor of a 0-dimensional tensor".into()))?;
            out_size[0] = d0
                .checked_mul(group_size)
                .ok_or_else(|| err("the gathered size overflows".into()))?;
            (Kind::AllGather, numel)
        }
        Request::Broadcast { src } => {
            let root = members.iter().position(|r| r == src).ok_or_else(|| {
                err(format!(
                    "source rank {src} is not in process group `{}` (ranks {members:?})",
                    c.group
                ))
            })?;
            let root = c_int::try_from(root).map_err(|_| err(format!("a root at position {root}")))?;
            (Kind::Broadcast(root), numel)
        }
        Request::Join => return Err(err("internal: a join is not a call".into())),
    };
    let out = if c.in_place {
        c.input.clone()
    } else {
        backend.allocate(&TensorSpec::contiguous(spec.dtype, spec.device, &out_size))?
    };
    let signature = Signature {
        request: c.request,
        dtype: spec.dtype,
        size: spec.size.clone(),
    };
    rank.world
        .calls
        .meet(rank.rank, &c.op, &c.group, signature, (), |_, m| Ok(vec![(); m.len()]))
        .map_err(err)?;
    let collective = NcclCall {
        op: c.op.clone(),
        kind,
        send: c.input.data_ptr(),
        recv: out.data_ptr(),
        count,
        dtype,
        comm: Arc::clone(comm),
    };
    library::submit(backend, Box::new(collective))?;
    Ok(Some(Value::Tensor(out)))
}
