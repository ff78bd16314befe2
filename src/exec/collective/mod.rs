//! Collectives: the ranks of a multi-rank program run as threads of one
//! process, and their `torch.ops._c10d_functional` calls meet.
//!
//! The semantics are PyTorch's functional collectives:
//!
//! | op | result on each rank |
//! |---|---|
//! | `all_reduce`, `all_reduce_` | the elementwise reduction over the group (`_`: written into the input) |
//! | `all_gather_into_tensor` | the inputs concatenated along dim 0, in group order |
//! | `reduce_scatter_tensor` | the reduction, split along dim 0; group member `i` gets part `i` |
//! | `broadcast`, `broadcast_` | the tensor of global rank `src` |
//! | `wait_tensor` | its argument (collectives are ordered on the rank's stream, or complete synchronously on the host) |
//!
//! Two executors share this module: [`HostCommunicator`] computes the
//! results on the host (the ranks' tensors meet in memory), and the CUDA
//! backend's NCCL communicators (feature `cuda`) enqueue them on each
//! rank's stream; [`run_ranks`] runs the ranks on either ([`RankBackend`]). Both parse a call with
//! [`CollectiveCall::parse`] and make every member of a group agree before
//! anything runs ([`rendezvous::Rendezvous`]):
//!
//! Nothing waits forever: a rank that reaches a collective the others never
//! reach fails after [`CollectiveOptions::timeout`] naming the op, the group
//! and the ranks that did not arrive; ranks whose calls disagree (op, reduce
//! op, dtype or sizes) fail naming both; a rank whose program fails aborts
//! the others so they stop waiting.

mod host;
pub(crate) mod rendezvous;

pub use host::HostCommunicator;

use super::interp::RunOutput;
use super::{ExecError, RunError, Tensor, Value};
use crate::ir::{DType, Device, Program};
use indexmap::IndexMap;
use std::time::Duration;

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

    /// The global ranks of `group`, in group order.
    pub fn members(&self, group: &str) -> Result<&[usize], String> {
        self.groups.get(group).map(Vec::as_slice).ok_or_else(|| {
            let known: Vec<&str> = self.groups.keys().map(String::as_str).collect();
            format!("unknown process group `{group}` (known: {})", known.join(", "))
        })
    }
}

/// Options of a multi-rank run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollectiveOptions {
    /// How long a rank waits at a collective for the rest of its group before
    /// the run fails. Default: 60 s.
    pub timeout: Duration,
    /// Most bytes one host collective may stage to compute its results (every
    /// member's elements as 64-bit values). Default
    /// [`crate::Limits::max_alloc_bytes`]'s default.
    pub max_bytes: u64,
    /// Stack of each rank's thread, whose run walks nested subgraphs
    /// recursively: [`crate::Limits::stack_bytes`] of the limits the ranks
    /// run within. Default: that of [`crate::Limits::default`].
    pub stack_bytes: usize,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        CollectiveOptions {
            timeout: Duration::from_secs(60),
            max_bytes: crate::Limits::default().max_alloc_bytes,
            // The default limits are within their ceilings; the base is the fallback all the same.
            stack_bytes: crate::Limits::default()
                .stack_bytes()
                .unwrap_or(crate::Limits::BASE_STACK_BYTES as usize),
        }
    }
}

/// The collective ops, by registry key.
pub const OPS: &[&str] = &[
    "_c10d_functional.all_reduce",
    "_c10d_functional.all_reduce_",
    "_c10d_functional.all_gather_into_tensor",
    "_c10d_functional.reduce_scatter_tensor",
    "_c10d_functional.broadcast",
    "_c10d_functional.broadcast_",
    "_c10d_functional.wait_tensor",
];

/// What a call asks of its group (compared across the members).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Request {
    AllReduce {
        reduce: String,
    },
    AllGather,
    ReduceScatter {
        reduce: String,
    },
    /// `src` is a global rank.
    Broadcast {
        src: usize,
    },
    /// Joining the group's communicator (NCCL), before any call.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Join,
}

impl Request {
    pub(crate) fn describe(&self) -> String {
        match self {
            Request::AllReduce { reduce } => format!("all_reduce('{reduce}')"),
            Request::AllGather => "all_gather_into_tensor".into(),
            Request::ReduceScatter { reduce } => format!("reduce_scatter_tensor('{reduce}')"),
            Request::Broadcast { src } => format!("broadcast(src={src})"),
            Request::Join => "joining the communicator".into(),
        }
    }
}

/// One collective call, parsed from an extern call's arguments.
pub(crate) enum CollectiveCall<'a, T> {
    /// `wait_tensor(tensor)`: its argument.
    Wait(&'a T),
    /// A collective on a group.
    Collective(Collective<'a, T>),
}

/// A collective on `group`.
pub(crate) struct Collective<'a, T> {
    /// The op string (`torch.ops._c10d_functional.<name>.default`).
    pub(crate) op: String,
    pub(crate) request: Request,
    pub(crate) group: String,
    /// `all_reduce_`, `broadcast_`: the result is written into `input`.
    pub(crate) in_place: bool,
    pub(crate) input: &'a T,
}

impl<'a, T> CollectiveCall<'a, T> {
    /// Parses the call of the collective whose registry key is `key` (one of
    /// [`OPS`]), checking group sizes and source ranks against `groups`.
    /// `arg(i, name)` is the argument at position `i`, or else the keyword
    /// argument `name`.
    pub(crate) fn parse(
        groups: &ProcessGroups,
        key: &str,
        arg: &dyn Fn(usize, &str) -> Option<&'a Value<T>>,
    ) -> Result<CollectiveCall<'a, T>, ExecError> {
        let name = key.strip_prefix("_c10d_functional.").unwrap_or(key);
        let op = format!("torch.ops.{key}.default");
        let err = |m: String| ExecError::op(&op, m);
        let tensor = |i: usize, kw: &str| match arg(i, kw) {
            Some(Value::Tensor(t)) => Ok(t),
            other => Err(err(format!(
                "argument `{kw}` must be a tensor, got {}",
                other.map_or("nothing", Value::kind)
            ))),
        };
        let text = |i: usize, kw: &str| match arg(i, kw) {
            Some(Value::Str(s)) => Ok(s.clone()),
            other => Err(err(format!(
                "argument `{kw}` must be a string, got {}",
                other.map_or("nothing", Value::kind)
            ))),
        };
        let int = |i: usize, kw: &str| match arg(i, kw) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(err(format!(
                "argument `{kw}` must be an int, got {}",
                other.map_or("nothing", Value::kind)
            ))),
        };
        let group_size = |group: &str, size: i64| -> Result<(), ExecError> {
            let members = groups.members(group).map_err(err)?;
            if usize::try_from(size).ok() != Some(members.len()) {
                return Err(err(format!(
                    "group size {size}, but process group `{group}` has {} ranks",
                    members.len()
                )));
            }
            Ok(())
        };
        let (request, group, in_place) = match name {
            "wait_tensor" => return Ok(CollectiveCall::Wait(tensor(0, "tensor")?)),
            "all_reduce" | "all_reduce_" => (
                Request::AllReduce {
                    reduce: text(1, "reduce_op")?,
                },
                text(2, "group_name")?,
                name.ends_with('_'),
            ),
            "all_gather_into_tensor" => {
                let group = text(2, "group_name")?;
                group_size(&group, int(1, "group_size")?)?;
                (Request::AllGather, group, false)
            }
            "reduce_scatter_tensor" => {
                let group = text(3, "group_name")?;
                group_size(&group, int(2, "group_size")?)?;
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
                    .filter(|s| *s < groups.world_size)
                    .ok_or_else(|| {
                        err(format!(
                            "source rank {src} is outside the world of {} ranks",
                            groups.world_size
                        ))
                    })?;
                (Request::Broadcast { src }, text(2, "group_name")?, name.ends_with('_'))
            }
            _ => return Err(err("not a collective".into())),
        };
        let input = tensor(0, "input")?;
        Ok(CollectiveCall::Collective(Collective {
            op,
            request,
            group,
            in_place,
            input,
        }))
    }
}

/// One rank of a [`run_ranks`] run: its program, what it runs on and its
/// inputs.
pub struct RankJob<'a, B> {
    /// The rank's program.
    pub program: &'a Program,
    /// What it runs on ([`RankBackend`]): a host backend (kernels loaded,
    /// limits set; [`run_ranks`] registers the collectives on it), or with
    /// feature `cuda` the `CudaOptions` the rank builds its CUDA backend from,
    /// on its own thread and GPU (`CudaOptions::ordinal`).
    pub backend: B,
    /// Its inputs by graph input name.
    pub inputs: &'a IndexMap<String, Tensor>,
}

/// Each rank's outputs (on the host) or error, in rank order.
pub type RankResults = Vec<Result<RunOutput<Tensor>, RunError>>;

/// What the ranks of a [`run_ranks`] run run on, and the world their
/// collectives meet in: [`HostBackend`](crate::exec::host::HostBackend)
/// (one [`HostCommunicator`]) and, with feature `cuda`, `CudaOptions`
/// (an `NcclWorld`, one GPU per rank).
pub trait RankBackend: Sized + Send {
    /// The shared state of one run, which every rank's thread sees.
    type World: Sync;
    /// The world of a run over `groups` (checked); `first` is rank 0's
    /// backend (where the CUDA world loads NCCL from).
    fn world(groups: ProcessGroups, options: CollectiveOptions, first: &Self) -> Result<Self::World, ExecError>;
    /// The device the rank holds alone (its GPU), if any: no two ranks of a
    /// run may share one.
    fn device(&self) -> Option<Device> {
        None
    }
    /// Fails every waiting and later collective of `world` with `message` (a
    /// rank's program failed: the others must not wait for it).
    fn abort(world: &Self::World, message: &str);
    /// Joins `job` to `world` as global rank `rank` and runs it, on the
    /// calling thread (the rank's own).
    fn run_rank(world: &Self::World, rank: usize, job: RankJob<'_, Self>) -> Result<RunOutput<Tensor>, RunError>;
}

/// Runs every rank's program on its own thread, their collectives meeting in
/// one world over `groups` ([`RankBackend`]); `jobs[r]` is global rank `r`.
/// Returns each rank's outputs or error, in rank order. A rank that fails
/// aborts the others' collectives (they then fail naming it).
pub fn run_ranks<B: RankBackend>(
    groups: ProcessGroups,
    jobs: Vec<RankJob<'_, B>>,
    options: CollectiveOptions,
) -> Result<RankResults, ExecError> {
    if jobs.len() != groups.world_size {
        return Err(ExecError::Input(format!(
            "{} rank programs for a world of {} ranks",
            jobs.len(),
            groups.world_size
        )));
    }
    groups
        .check()
        .map_err(|e| ExecError::Input(format!("process groups: {e}")))?;
    for (i, job) in jobs.iter().enumerate() {
        let Some(device) = job.backend.device() else { continue };
        if let Some(j) = jobs[..i]
            .iter()
            .position(|other| other.backend.device() == Some(device))
        {
            return Err(ExecError::Input(format!(
                "ranks {j} and {i} are both on {device}; each rank runs on a device of its own"
            )));
        }
    }
    let Some(first) = jobs.first() else {
        return Err(ExecError::Input("a world of no ranks".into()));
    };
    let stack_bytes = options.stack_bytes;
    let world = B::world(groups, options, &first.backend)?;
    Ok(on_rank_threads(
        jobs,
        stack_bytes,
        &|m| B::abort(&world, m),
        &|rank, job| B::run_rank(&world, rank, job),
    ))
}

/// Runs `run(rank, job)` for every job (`jobs[r]` is global rank `r`) on its
/// own thread (of `stack_bytes` of stack) and returns the results in rank
/// order. A rank that fails, panics or cannot start calls `abort` with why,
/// so that the others stop waiting for it.
fn on_rank_threads<J: Send, T: Send>(
    jobs: Vec<J>,
    stack_bytes: usize,
    abort: &(dyn Fn(&str) + Sync),
    run: &(dyn Fn(usize, J) -> Result<T, RunError> + Sync),
) -> Vec<Result<T, RunError>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(rank, job)| {
                std::thread::Builder::new()
                    .name(format!("rank {rank}"))
                    .stack_size(stack_bytes)
                    .spawn_scoped(scope, move || {
                        let r = run(rank, job);
                        if let Err(e) = &r {
                            abort(&format!("rank {rank} failed: {e}"));
                        }
                        r
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| {
                let h = match h {
                    Ok(h) => h,
                    Err(e) => {
                        let message =
                            format!("rank {rank}: cannot start its thread ({stack_bytes} bytes of stack): {e}");
                        abort(&message);
                        return Err(RunError::Exec(ExecError::Input(message)));
                    }
                };
                h.join().unwrap_or_else(|_| {
                    abort(&format!("rank {rank} panicked"));
                    Err(RunError::Exec(ExecError::Input(format!("rank {rank} panicked"))))
                })
            })
            .collect()
    })
}

pub(crate) fn is_integral(dtype: DType) -> bool {
    !dtype.is_floating() && !dtype.is_complex()
}

/// Checks that `reduce` applies to `dtype` (`executor` names who refuses).
pub(crate) fn check_reduce(reduce: &str, dtype: DType, executor: &str) -> Result<(), String> {
    match reduce {
        "sum" | "avg" | "product" | "min" | "max" if !dtype.is_complex() => Ok(()),
        "band" | "bor" | "bxor" if is_integral(dtype) => Ok(()),
        "band" | "bor" | "bxor" => Err(format!(
            "reduce op `{reduce}` needs an integer or bool tensor, got {dtype}"
        )),
        "premul_sum" => Err(format!("reduce op `premul_sum` is not supported by {executor}")),
        other => Err(format!(
            "reduce op `{other}` on a {dtype} tensor is not supported by {executor}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that holds a device and runs nothing.
    struct OnDevice(u32);

    impl RankBackend for OnDevice {
        type World = ();

        fn world(_groups: ProcessGroups, _options: CollectiveOptions, _first: &Self) -> Result<(), ExecError> {
            Ok(())
        }

        fn device(&self) -> Option<Device> {
            Some(Device::cuda(self.0))
        }

        fn abort(_world: &(), _message: &str) {}

        fn run_rank(_world: &(), rank: usize, _job: RankJob<'_, Self>) -> Result<RunOutput<Tensor>, RunError> {
            Ok(RunOutput {
                outputs: vec![Value::Int(i64::try_from(rank).expect("a rank fits i64"))],
                symbols: Default::default(),
            })
        }
    }

    fn run(devices: &[u32], world_size: usize) -> Result<RankResults, ExecError> {
        let (program, inputs) = (Program::default(), IndexMap::new());
        let jobs = devices
            .iter()
            .map(|&d| RankJob {
                program: &program,
                backend: OnDevice(d),
                inputs: &inputs,
            })
            .collect();
        run_ranks(ProcessGroups::world(world_size), jobs, CollectiveOptions::default())
    }

    #[test]
    fn run_ranks_checks_jobs_groups_and_devices_before_any_rank_runs() {
        let ranks: Vec<i64> = run(&[0, 1, 2], 3)
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().outputs[0].as_int().unwrap())
            .collect();
        assert_eq!(ranks, [0, 1, 2]);
        let e = run(&[0, 1, 1], 3).unwrap_err().to_string();
        assert!(e.contains("ranks 1 and 2 are both on cuda:1"), "{e}");
        let e = run(&[0, 1], 3).unwrap_err().to_string();
        assert!(e.contains("2 rank programs for a world of 3 ranks"), "{e}");
        let e = run(&[], 0).unwrap_err().to_string();
        assert!(e.contains("process groups:"), "{e}");
    }
}
