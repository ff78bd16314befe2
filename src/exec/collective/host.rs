//! Host collectives: the ranks' calls meet in a [`HostCommunicator`], which
//! computes every member's result on the host (see the module docs of
//! [`super`] for the semantics).
//!
//! Reductions combine the members' tensors in group order, rounding to the
//! element type after each step, as a ring or tree of `gloo` does with two
//! members (for more, the order of a real communicator's steps may differ in
//! the last bit). `sum`, `avg`, `product`, `min`, `max` on every real dtype;
//! `band`, `bor`, `bxor` on integers and bool.

use super::rendezvous::{Rendezvous, Signature};
use super::{
    check_reduce, is_integral, CollectiveCall, CollectiveOptions, ProcessGroups, RankBackend, RankJob, Request, OPS,
};
use crate::exec::host::{ExternFn, HostBackend};
use crate::exec::interp::RunOutput;
use crate::exec::{ExecError, RunError, Tensor, Value};
use indexmap::IndexMap;
use std::sync::Arc;

/// The meeting point of the ranks of one multi-rank run on the host (shared
/// by their threads; see the module docs).
pub struct HostCommunicator {
    options: CollectiveOptions,
    rendezvous: Rendezvous<Tensor, Tensor>,
}

impl std::fmt::Debug for HostCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCommunicator")
            .field("groups", self.rendezvous.groups())
            .field("options", &self.options)
            .finish()
    }
}

impl HostCommunicator {
    /// A communicator for `groups` (checked with [`ProcessGroups::check`]).
    pub fn new(groups: ProcessGroups, options: CollectiveOptions) -> Result<Arc<HostCommunicator>, ExecError> {
        groups
            .check()
            .map_err(|e| ExecError::Input(format!("process groups: {e}")))?;
        Ok(Arc::new(HostCommunicator {
            options,
            rendezvous: Rendezvous::new(groups, options.timeout),
        }))
    }

    /// The process groups.
    pub fn groups(&self) -> &ProcessGroups {
        self.rendezvous.groups()
    }

    /// Fails every waiting and later collective with `message` (a rank's
    /// program failed: the others must not wait for it).
    pub fn abort(&self, message: &str) {
        self.rendezvous.abort(message);
    }

    /// Registers the collective ops ([`OPS`]) on `backend` as global rank `rank`.
    pub fn register(self: &Arc<Self>, backend: &mut HostBackend, rank: usize) -> Result<(), ExecError> {
        let world_size = self.groups().world_size;
        if rank >= world_size {
            return Err(ExecError::Input(format!(
                "rank {rank} is outside the world of {world_size} ranks"
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
        let arg = |i: usize, kw: &str| args.get(i).or_else(|| kwargs.get(kw));
        let c = match CollectiveCall::parse(self.groups(), key, &arg)? {
            CollectiveCall::Wait(t) => return Ok(Value::Tensor(t.clone())),
            CollectiveCall::Collective(c) => c,
        };
        let err = |m: String| ExecError::op(&c.op, m);
        if let Request::AllReduce { reduce } | Request::ReduceScatter { reduce } = &c.request {
            check_reduce(reduce, c.input.dtype(), "host collectives").map_err(err)?;
        }
        let signature = Signature {
            request: c.request.clone(),
            dtype: c.input.dtype(),
            size: c.input.size().to_vec(),
        };
        let max_bytes = self.options.max_bytes;
        let result = self
            .rendezvous
            .meet(rank, &c.op, &c.group, signature, c.input.clone(), |inputs, members| {
                let staged = inputs.iter().try_fold(0u64, |acc, t| {
                    acc.checked_add(u64::try_from(t.numel()).ok()?.checked_mul(8)?)
                });
                if !staged.is_some_and(|bytes| bytes <= max_bytes) {
                    return Err(format!(
                        "the group's inputs take more than the {max_bytes} bytes one collective may stage (the allocation limit)"
                    ));
                }
                match &c.request {
                    Request::Broadcast { src } => match members.iter().position(|r| r == src) {
                        Some(p) => compute(&c.request, inputs, Some(p)),
                        None => Err(format!(
                            "source rank {src} is not in process group `{}` (ranks {members:?})",
                            c.group
                        )),
                    },
                    request => compute(request, inputs, None),
                }
            })
            .map_err(err)?;
        if c.in_place {
            c.input.copy_from(&result)?;
            return Ok(Value::Tensor(c.input.clone()));
        }
        Ok(Value::Tensor(result))
    }
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
        Request::Join => Err("internal: a join is not a host collective".into()),
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

impl RankBackend for HostBackend {
    type World = Arc<HostCommunicator>;

    fn world(groups: ProcessGroups, options: CollectiveOptions, _first: &Self) -> Result<Self::World, ExecError> {
        HostCommunicator::new(groups, options)
    }

    fn abort(world: &Self::World, message: &str) {
        world.abort(message);
    }

    fn run_rank(world: &Self::World, rank: usize, mut job: RankJob<'_, Self>) -> Result<RunOutput<Tensor>, RunError> {
        world.register(&mut job.backend, rank)?;
        crate::exec::run_program(job.program, &mut job.backend, job.inputs)
    }
}
