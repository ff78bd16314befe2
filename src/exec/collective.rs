//! Collectives on the host: the ranks of a multi-rank program run as threads
//! of one process, and their `torch.ops._c10d_functional` calls meet in a
//! [`HostCommunicator`].
//!
//! Each rank's [`HostBackend`] gets the collective ops through
//! [`HostCommunicator::register`]; [`run_ranks`] runs every rank's program on
//! its own thread. A call completes when every rank of its process group has
//! made its matching call (the `k`-th call on a group meets the other ranks'
//! `k`-th call on it). The semantics are PyTorch's functional collectives:
//!
//! | op | result on each rank |
//! |---|---|
//! | `all_reduce`, `all_reduce_` | the elementwise reduction over the group (`_`: written into the input) |
//! | `all_gather_into_tensor` | the inputs concatenated along dim 0, in group order |
//! | `reduce_scatter_tensor` | the reduction, split along dim 0; group member `i` gets part `i` |
//! | `broadcast`, `broadcast_` | the tensor of global rank `src` |
//! | `wait_tensor` | its argument (host collectives complete synchronously) |
//!
//! Reductions combine the members' tensors in group order, rounding to the
//! element type after each step, as a ring or tree of `gloo` does with two
//! members (for more, the order of a real communicator's steps may differ in
//! the last bit). `sum`, `avg`, `product`, `min`, `max` on every real dtype;
//! `band`, `bor`, `bxor` on integers and bool.
//!
//! Nothing waits forever: a rank that reaches a collective the others never
//! reach fails after [`CollectiveOptions::timeout`] naming the op, the group
//! and the ranks that did not arrive; ranks whose calls disagree (op, reduce
//! op, dtype or sizes) fail naming both; a rank whose program fails aborts
//! the communicator so the others stop waiting.

use super::host::{ExternFn, HostBackend};
use super::{ExecError, Tensor, Value};
use crate::ir::DType;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The process groups of a multi-rank run: the world size and, for each group
/// name (the string the wrapper passes, `"0"` for the default group), its
/// global ranks in group order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessGroups {
    /// How many ranks run.
    pub world_size: usize,
    /// Group name -> global ranks.
    pub groups: IndexMap<String, Vec<usize>>,
}

impl ProcessGroups {
    /// One group, `"0"`, of every rank: what `torch.distributed`'s default
    /// group is.
    pub fn world(world_size: usize) -> ProcessGroups {
        ProcessGroups {
            world_size,
            groups: [("0".to_string(), (0..world_size).collect())].into_iter().collect(),
        }
    }

    /// Checks that every group is non-empty, lists distinct ranks below the
    /// world size, and that the world has at least one rank.
    pub fn check(&self) -> Result<(), String> {
        if self.world_size == 0 {
            return Err("the world size is 0".into());
        }
        for (name, ranks) in &self.groups {
            if ranks.is_empty() {
                return Err(format!("process group `{name}` has no ranks"));
            }
            let mut seen = vec![false; self.world_size];
            for &r in ranks {
                match seen.get_mut(r) {
                    None => {
                        return Err(format!(
                            "process group `{name}` names rank {r}, outside the world of {} ranks",
                            self.world_size
                        ))
                    }
                    Some(true) => return Err(format!("process group `{name}` names rank {r} twice")),
                    Some(s) => *s = true,
                }
            }
        }
        Ok(())
    }
}

/// Options of a [`HostCommunicator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectiveOptions {
    /// How long a rank waits at a collective for the rest of its group before
    /// the run fails. Default: 60 s.
    pub timeout: Duration,
    /// Most bytes one collective may stage to compute its results (every
    /// member's elements as 64-bit values). Default
    /// [`crate::Limits::max_alloc_bytes`]'s default.
    pub max_bytes: u64,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        CollectiveOptions {
            timeout: Duration::from_secs(60),
            max_bytes: crate::Limits::default().max_alloc_bytes,
        }
    }
}

/// What a call asks of its group (compared across the members).
#[derive(Clone, Debug, PartialEq)]
enum Request {
    AllReduce { reduce: String },
    AllGather,
    ReduceScatter { reduce: String },
    Broadcast { src: usize },
}

impl Request {
    fn describe(&self) -> String {
        match self {
            Request::AllReduce { reduce } => format!("all_reduce('{reduce}')"),
            Request::AllGather => "all_gather_into_tensor".into(),
            Request::ReduceScatter { reduce } => format!("reduce_scatter_tensor('{reduce}')"),
            Request::Broadcast { src } => format!("broadcast(src={src})"),
        }
    }
}

/// One collective call on one group, as the members arrive.
struct Meeting {
    request: Request,
    /// The op string of the first member's call (for messages).
    op: String,
    /// Each member's input, by position in the group.
    inputs: Vec<Option<Tensor>>,
    /// Each member's result, once the last member has computed them.
    results: Option<Vec<Option<Tensor>>>,
}

#[derive(Default)]
struct State {
    /// (group, call index) -> the meeting in progress.
    meetings: HashMap<(String, u64), Meeting>,
    /// (rank, group) -> how many calls this rank has made on the group.
    calls: HashMap<(usize, String), u64>,
    /// Set when a rank failed: every waiting and later call fails with it.
    aborted: Option<String>,
}

/// The meeting point of the ranks of one multi-rank run (shared by their
/// threads; see the module docs).
pub struct HostCommunicator {
    groups: ProcessGroups,
    options: CollectiveOptions,
    state: Mutex<State>,
    arrived: Condvar,
}

impl std::fmt::Debug for HostCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCommunicator")
            .field("groups", &self.groups)
            .field("options", &self.options)
            .finish()
    }
}

/// The collective ops [`HostCommunicator::register`] installs, by registry key.
pub const OPS: &[&str] = &[
    "_c10d_functional.all_reduce",
    "_c10d_functional.all_reduce_",
    "_c10d_functional.all_gather_into_tensor",
    "_c10d_functional.reduce_scatter_tensor",
    "_c10d_functional.broadcast",
    "_c10d_functional.broadcast_",
    "_c10d_functional.wait_tensor",
];

impl HostCommunicator {
    /// A communicator for `groups` (checked with [`ProcessGroups::check`]).
    pub fn new(groups: ProcessGroups, options: CollectiveOptions) -> Result<Arc<HostCommunicator>, ExecError> {
        groups
            .check()
            .map_err(|e| ExecError::Input(format!("process groups: {e}")))?;
        Ok(Arc::new(HostCommunicator {
            groups,
            options,
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
        }))
    }

    /// The process groups.
    pub fn groups(&self) -> &ProcessGroups {
        &self.groups
    }

    /// Fails every waiting and later collective with `message` (a rank's
    /// program failed: the others must not wait for it).
    pub fn abort(&self, message: &str) {
        let mut state = self.lock();
        if state.aborted.is_none() {
            state.aborted = Some(message.to_string());
        }
        drop(state);
        self.arrived.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves the maps consistent (every
        // update is a single insert or remove), so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the collective ops ([`OPS`]) on `backend` as global rank `rank`.
    pub fn register(self: &Arc<Self>, backend: &mut HostBackend, rank: usize) -> Result<(), ExecError> {
        if rank >= self.groups.world_size {
            return Err(ExecError::Input(format!(
                "rank {rank} is outside the world of {} ranks",
                self.groups.world_size
            )));
        }
        for &key in OPS {
            let comm = Arc::clone(self);
            let f: ExternFn = Arc::new(
                move |args: &[Value<Tensor>], kwargs: &IndexMap<String, Value<Tensor>>| {
                    comm.call(rank, key, args, kwargs)
                },
            );
            backend.register_op(key, f);
        }
        Ok(())
    }

    fn call(
        &self,
        rank: usize,
        key: &str,
        args: &[Value<Tensor>],
        kwargs: &IndexMap<String, Value<Tensor>>,
    ) -> Result<Value<Tensor>, ExecError> {
        let name = key.strip_prefix("_c10d_functional.").unwrap_or(key);
        let op = format!("torch.ops.{key}.default");
        let err = |m: String| ExecError::op(&op, m);
        let arg = |i: usize, kw: &str| args.get(i).or_else(|| kwargs.get(kw));
        let tensor = |i: usize, kw: &str| match arg(i, kw) {
            Some(Value::Tensor(t)) => Ok(t.clone()),
            other => Err(err(format!("argument `{kw}` must be a tensor, got {}", kind(other)))),
        };
        let text = |i: usize, kw: &str| match arg(i, kw) {
            Some(Value::Str(s)) => Ok(s.clone()),
            other => Err(err(format!("argument `{kw}` must be a string, got {}", kind(other)))),
        };
        let int = |i: usize, kw: &str| match arg(i, kw) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(err(format!("argument `{kw}` must be an int, got {}", kind(other)))),
        };
        let input = tensor(0, "input");
        let (request, group, in_place) = match name {
            "wait_tensor" => return Ok(Value::Tensor(tensor(0, "tensor")?)),
            "all_reduce" | "all_reduce_" => (
                Request::AllReduce {
                    reduce: text(1, "reduce_op")?,
                },
                text(2, "group_name")?,
                name.ends_with('_'),
            ),
            "all_gather_into_tensor" => {
                let group = text(2, "group_name")?;
                self.check_group_size(&group, int(1, "group_size")?, &err)?;
                (Request::AllGather, group, false)
            }
            "reduce_scatter_tensor" => {
                let group = text(3, "group_name")?;
                self.check_group_size(&group, int(2, "group_size")?, &err)?;
                (
                    Request::ReduceScatter {
                        reduce: text(1, "reduce_op")?,
                    },
                    group,
                    false,
                )
            }
            "broadcast" | "broadcast_" => {
                let src = int(1, "src")?;
                let src = usize::try_from(src)
                    .ok()
                    .filter(|s| *s < self.groups.world_size)
                    .ok_or_else(|| {
                        err(format!(
                            "source rank {src} is outside the world of {} ranks",
                            self.groups.world_size
                        ))
                    })?;
                (Request::Broadcast { src }, text(2, "group_name")?, name.ends_with('_'))
            }
            _ => return Err(err("not a collective this communicator runs".into())),
        };
        let input = input?;
        if let Request::AllReduce { reduce } | Request::ReduceScatter { reduce } = &request {
            check_reduce(reduce, input.dtype()).map_err(err)?;
        }
        let result = self.meet(rank, &op, &group, request, input.clone()).map_err(err)?;
        if in_place {
            input.copy_from(&result)?;
            return Ok(Value::Tensor(input));
        }
        Ok(Value::Tensor(result))
    }

    fn check_group_size(&self, group: &str, size: i64, err: &dyn Fn(String) -> ExecError) -> Result<(), ExecError> {
        let members = self.members(group).map_err(err)?;
        if usize::try_from(size).ok() != Some(members.len()) {
            return Err(err(format!(
                "group size {size}, but process group `{group}` has {} ranks",
                members.len()
            )));
        }
        Ok(())
    }

    fn members(&self, group: &str) -> Result<&[usize], String> {
        self.groups.groups.get(group).map(Vec::as_slice).ok_or_else(|| {
            let known: Vec<&str> = self.groups.groups.keys().map(String::as_str).collect();
            format!("unknown process group `{group}` (known: {})", known.join(", "))
        })
    }

    /// Deposits `input` for this rank's next call on `group`, waits for the
    /// rest of the group, and returns this rank's result.
    fn meet(&self, rank: usize, op: &str, group: &str, request: Request, input: Tensor) -> Result<Tensor, String> {
        let members = self.members(group)?;
        let position = members
            .iter()
            .position(|&r| r == rank)
            .ok_or_else(|| format!("rank {rank} is not in process group `{group}` (ranks {members:?})"))?;
        let mut state = self.lock();
        if let Some(m) = &state.aborted {
            return Err(format!("the run was aborted: {m}"));
        }
        let counter = state.calls.entry((rank, group.to_string())).or_insert(0);
        let index = *counter;
        *counter += 1;
        let key = (group.to_string(), index);
        let meeting = state.meetings.entry(key.clone()).or_insert_with(|| Meeting {
            request: request.clone(),
            op: op.to_string(),
            inputs: vec![None; members.len()],
            results: None,
        });
        if let Some(mismatch) = disagreement(meeting, &request, &input) {
            let first = meeting
                .inputs
                .iter()
                .position(Option::is_some)
                .map_or(rank, |p| members[p]);
            let message = format!(
                "rank {rank} and rank {first} disagree at call {} on process group `{group}`: {mismatch}",
                index + 1
            );
            state.aborted = Some(message.clone());
            drop(state);
            self.arrived.notify_all();
            return Err(message);
        }
        meeting.inputs[position] = Some(input);
        if meeting.inputs.iter().all(Option::is_some) {
            let inputs: Vec<Tensor> = meeting.inputs.iter().flatten().cloned().collect();
            let staged = inputs.iter().try_fold(0u64, |acc, t| {
                acc.checked_add(u64::try_from(t.numel()).ok()?.checked_mul(8)?)
            });
            let results = match (&meeting.request, staged) {
                (_, Some(bytes)) if bytes <= self.options.max_bytes => match &meeting.request {
                    Request::Broadcast { src } => match members.iter().position(|r| r == src) {
                        Some(p) => compute(&meeting.request, &inputs, Some(p)),
                        None => Err(format!(
                            "source rank {src} is not in process group `{group}` (ranks {members:?})"
                        )),
                    },
                    request => compute(request, &inputs, None),
                },
                _ => Err(format!(
                    "the group's inputs take more than the {} bytes one collective may stage (the allocation limit)",
                    self.options.max_bytes
                )),
            };
            match results {
                Ok(results) => meeting.results = Some(results.into_iter().map(Some).collect()),
                Err(m) => {
                    let message = format!("`{op}` (call {} on process group `{group}`): {m}", index + 1);
                    state.aborted = Some(message.clone());
                    drop(state);
                    self.arrived.notify_all();
                    return Err(message);
                }
            }
            self.arrived.notify_all();
        }
        let deadline = Instant::now() + self.options.timeout;
        loop {
            if let Some(m) = &state.aborted {
                return Err(format!("the run was aborted: {m}"));
            }
            let meeting = state
                .meetings
                .get_mut(&key)
                .ok_or_else(|| "internal: the meeting of this call is gone".to_string())?;
            if let Some(results) = &mut meeting.results {
                let mine = results[position]
                    .take()
                    .ok_or_else(|| "internal: result taken twice".to_string())?;
                if results.iter().all(Option::is_none) {
                    state.meetings.remove(&key);
                }
                return Ok(mine);
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = members
                    .iter()
                    .zip(&meeting.inputs)
                    .filter(|(_, i)| i.is_none())
                    .map(|(r, _)| *r)
                    .collect();
                let message = format!(
                    "rank {rank} waited {:?} at `{op}` (call {} on process group `{group}`) for ranks {missing:?}, which never made it",
                    self.options.timeout,
                    index + 1
                );
                state.aborted = Some(message.clone());
                drop(state);
                self.arrived.notify_all();
                return Err(message);
            }
            state = self
                .arrived
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

fn kind(v: Option<&Value<Tensor>>) -> &'static str {
    v.map_or("nothing", Value::kind)
}

fn is_integral(dtype: DType) -> bool {
    !dtype.is_floating() && !dtype.is_complex()
}

fn check_reduce(reduce: &str, dtype: DType) -> Result<(), String> {
    match reduce {
        "sum" | "avg" | "product" | "min" | "max" if !dtype.is_complex() => Ok(()),
        "band" | "bor" | "bxor" if is_integral(dtype) => Ok(()),
        "band" | "bor" | "bxor" => Err(format!(
            "reduce op `{reduce}` needs an integer or bool tensor, got {dtype}"
        )),
        "premul_sum" => Err("reduce op `premul_sum` is not supported by host collectives".into()),
        other => Err(format!(
            "reduce op `{other}` on a {dtype} tensor is not supported by host collectives"
        )),
    }
}

/// Why `input` does not match the meeting's call, if it does not.
fn disagreement(meeting: &Meeting, request: &Request, input: &Tensor) -> Option<String> {
    if &meeting.request != request {
        return Some(format!(
            "`{}` against `{}`",
            request.describe(),
            meeting.request.describe()
        ));
    }
    let first = meeting.inputs.iter().flatten().next()?;
    if first.dtype() != input.dtype() {
        return Some(format!(
            "`{}` on {} against {}",
            meeting.op,
            input.dtype(),
            first.dtype()
        ));
    }
    if first.size() != input.size() {
        return Some(format!(
            "`{}` on sizes {:?} against {:?}",
            meeting.op,
            input.size(),
            first.size()
        ));
    }
    None
}

/// Every member's result of `request` over `inputs` (in group order, of one
/// dtype and size); `src` is the broadcasting member's position.
fn compute(request: &Request, inputs: &[Tensor], src: Option<usize>) -> Result<Vec<Tensor>, String> {
    let n = inputs.len();
    let first = &inputs[0];
    let dtype = first.dtype();
    let size = first.size().to_vec();
    let e = |e: ExecError| e.to_string();
    let members = i64::try_from(n).map_err(|_| format!("a group of {n} members"))?;
    match request {
        Request::AllReduce { reduce } => {
            let r = reduce_all(reduce, inputs)?;
            (0..n).map(|_| r.contiguous_copy().map_err(e)).collect()
        }
        Request::ReduceScatter { reduce } => {
            let d0 = *size.first().ok_or("reduce_scatter_tensor of a 0-dimensional tensor")?;
            if d0 % members != 0 {
                return Err(format!("dim 0 of size {d0} does not split into {n} equal parts"));
            }
            let r = reduce_all(reduce, inputs)?;
            let part = d0 / members;
            let stride = r.stride().to_vec();
            (0..members)
                .map(|i| {
                    let mut s = size.clone();
                    s[0] = part;
                    let offset = i
                        .checked_mul(part)
                        .and_then(|o| o.checked_mul(stride[0]))
                        .ok_or("offset overflow")?;
                    r.view(&s, &stride, r.spec().offset + offset)
                        .and_then(|v| v.contiguous_copy())
                        .map_err(e)
                })
                .collect()
        }
        Request::AllGather => {
            let d0 = *size.first().ok_or("all_gather_into_tensor of a 0-dimensional tensor")?;
            let mut out = size.clone();
            out[0] = d0.checked_mul(members).ok_or("gathered size overflows")?;
            let gathered = if is_integral(dtype) {
                let mut data = Vec::new();
                for t in inputs {
                    data.extend(t.to_i64_vec().map_err(e)?);
                }
                Tensor::from_i64(dtype, &data, &out)
            } else {
                let mut data = Vec::new();
                for t in inputs {
                    data.extend(t.to_f64_vec().map_err(e)?);
                }
                Tensor::from_f64(dtype, &data, &out)
            }
            .map_err(e)?;
            (0..n).map(|_| gathered.contiguous_copy().map_err(e)).collect()
        }
        Request::Broadcast { .. } => {
            let src = src.ok_or("internal: broadcast without a source")?;
            (0..n).map(|_| inputs[src].contiguous_copy().map_err(e)).collect()
        }
    }
}

/// The elementwise `reduce` of `inputs` in order, rounded to their dtype
/// after each step.
fn reduce_all(reduce: &str, inputs: &[Tensor]) -> Result<Tensor, String> {
    let first = &inputs[0];
    let dtype = first.dtype();
    let size = first.size().to_vec();
    let e = |e: ExecError| e.to_string();
    if is_integral(dtype) {
        let mut acc = first.to_i64_vec().map_err(e)?;
        for t in &inputs[1..] {
            let v = t.to_i64_vec().map_err(e)?;
            for (a, b) in acc.iter_mut().zip(v) {
                *a = match reduce {
                    "sum" | "avg" => a.wrapping_add(b),
                    "product" => a.wrapping_mul(b),
                    "min" => (*a).min(b),
                    "max" => (*a).max(b),
                    "band" => *a & b,
                    "bor" => *a | b,
                    "bxor" => *a ^ b,
                    other => return Err(format!("reduce op `{other}` is not supported by host collectives")),
                };
            }
            // Round to the dtype (narrow integers wrap, bool saturates) as each step would.
            acc = Tensor::from_i64(dtype, &acc, &size)
                .and_then(|t| t.to_i64_vec())
                .map_err(e)?;
        }
        if reduce == "avg" {
            let n = i64::try_from(inputs.len()).map_err(|_| "a group too large to average".to_string())?;
            acc.iter_mut().for_each(|a| *a = a.div_euclid(n));
        }
        return Tensor::from_i64(dtype, &acc, &size).map_err(e);
    }
    let mut acc = first.to_f64_vec().map_err(e)?;
    for t in &inputs[1..] {
        let v = t.to_f64_vec().map_err(e)?;
        for (a, b) in acc.iter_mut().zip(v) {
            *a = match reduce {
                "sum" | "avg" => *a + b,
                "product" => *a * b,
                "min" => {
                    if b < *a || b.is_nan() {
                        b
                    } else {
                        *a
                    }
                }
                "max" => {
                    if b > *a || b.is_nan() {
                        b
                    } else {
                        *a
                    }
                }
                other => return Err(format!("reduce op `{other}` is not supported by host collectives")),
            };
        }
        acc = Tensor::from_f64(dtype, &acc, &size)
            .and_then(|t| t.to_f64_vec())
            .map_err(e)?;
    }
    if reduce == "avg" {
        let n = inputs.len() as f64;
        acc.iter_mut().for_each(|a| *a /= n);
    }
    Tensor::from_f64(dtype, &acc, &size).map_err(e)
}

/// One rank of a [`run_ranks`] run: its program, its backend (kernels
/// loaded, limits set) and its inputs.
pub struct RankJob<'a> {
    /// The rank's program.
    pub program: &'a crate::ir::Program,
    /// The backend it runs on; [`run_ranks`] registers the collectives on it.
    pub backend: HostBackend,
    /// Its inputs by graph input name.
    pub inputs: &'a IndexMap<String, Tensor>,
}

/// Runs every rank's program on its own thread, their collectives meeting in
/// one [`HostCommunicator`] over `groups`; `jobs[r]` is global rank `r`.
/// Returns each rank's outputs or error, in rank order. A rank that fails
/// aborts the others' collectives (they then fail naming it).
pub fn run_ranks(
    groups: ProcessGroups,
    jobs: Vec<RankJob<'_>>,
    options: CollectiveOptions,
) -> Result<Vec<Result<super::interp::RunOutput<Tensor>, super::RunError>>, ExecError> {
    if jobs.len() != groups.world_size {
        return Err(ExecError::Input(format!(
            "{} rank programs for a world of {} ranks",
            jobs.len(),
            groups.world_size
        )));
    }
    let comm = HostCommunicator::new(groups, options)?;
    let mut jobs = jobs;
    for (rank, job) in jobs.iter_mut().enumerate() {
        comm.register(&mut job.backend, rank)?;
    }
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(rank, mut job)| {
                let comm = Arc::clone(&comm);
                scope.spawn(move || {
                    let r = super::host::run_program_on(job.program, &mut job.backend, job.inputs);
                    if let Err(e) = &r {
                        comm.abort(&format!("rank {rank} failed: {e}"));
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| {
                h.join().unwrap_or_else(|_| {
                    comm.abort(&format!("rank {rank} panicked"));
                    Err(super::RunError::Exec(ExecError::Input(format!("rank {rank} panicked"))))
                })
            })
            .collect()
    });
    Ok(results)
}
