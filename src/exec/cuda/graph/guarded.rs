//! One CUDA graph for a recording that reads device values: the reads are
//! checked on the device, and what depends on them runs under conditional
//! IF nodes that the checks open.
//!
//! A recording is a trace of one path: it holds, at each device read (an
//! unbacked size, a `cond` or `while_loop` predicate, `item()`), the value the
//! recorded run read, and what follows was recorded for that value. Each
//! operation gets a *level*: 0 when it depends (through the recording's
//! dependencies) on no read; otherwise the *check group* of the latest reads
//! it depends on. A read's group is one past the level of the operations
//! whose results it reads (reads chained to each other share a group). The
//! graph is:
//!
//! ```text
//! reset status ──> check 1 -> IF { level 1 } -> check 2 -> IF { level 2 } ...
//! level 0 ───────┘ (each check after the operations its reads read)
//! ```
//!
//! `check g` (a one-thread kernel) compares the bytes at each of its reads'
//! addresses with the recorded ones. While the status word says "no
//! divergence" and every read matches, it opens its IF node
//! (`cudaGraphSetConditional`); at the first mismatch it writes that read's
//! index into the status word, and it and every later check keep their IF
//! nodes closed. The host launches the graph once and reads the status word
//! once, after the graph: "no divergence" means every level ran
//! ([`Replay::Done`]); `k` means the recording's read `k` saw another value
//! ([`Replay::Diverged`]) and the caller records again.
//!
//! The dependencies are the program's DAG where the recording has a
//! concurrent plan ([`Concurrency`]) and writes none of its inputs: level 0
//! and each IF body are then captured operation by operation, each after
//! only what it depends on, and the checks of a mixture of experts' token
//! counts (all read from the router's output) are one check before one IF
//! node holding every expert, side by side. Otherwise each operation
//! depends on the one before (one chain: each run of reads is one group,
//! and everything after it waits for its check). A recording that writes
//! its inputs keeps the chain: recording again after a divergence runs the
//! program from its start, so no operation after a read in recording order
//! may have run unchecked.
//!
//! Conditional nodes need a CUDA 12.4 driver; the caller falls back to
//! segments without one, or when the driver refuses to capture an operation
//! into a conditional body.

use super::{capture_into, check, queue_on_lane, CaptureTarget, Graph};
use crate::exec::cuda::launch::LoadedKernel;
use crate::exec::cuda::prepared::captured::Guarded;
use crate::exec::cuda::prepared::{Concurrency, Op};
use crate::exec::cuda::{CudaBackend, Replay};
use crate::exec::ExecError;
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

/// The status word's value while no read diverged.
const NO_DIVERGENCE: u32 = u32::MAX;

/// The oldest driver with conditional IF nodes whose bodies may be captured
/// (`cuStreamBeginCaptureToGraph`) and set from a kernel.
const CONDITIONAL_DRIVER: i32 = 12040;

/// Name of the check kernel in [`GUARD_PTX`].
const CHECK_KERNEL: &str = "wrapir_check_reads";

/// Bytes of one entry of a check's table: the read's address (u64), the
/// recorded bytes (u64, little-endian, zero-extended), the byte count (u32,
/// 1 to 8) and the read's index among the recording's reads (u32).
const ENTRY_BYTES: usize = 24;

/// The check kernel, as PTX (JIT-compiled by the driver for any GPU).
/// Parameters: the table of the reads it checks (entries of
/// [`ENTRY_BYTES`], in recording order), their count, the status word, the
/// IF node's handle and whether there is one. One thread compares each
/// read's bytes with the recorded ones until the first mismatch, whose
/// index it writes into the status word. `cudaGraphSetConditional` is the
/// device runtime's built-in that sets a conditional handle.
const GUARD_PTX: &str = r#".version 7.8
.target sm_70
.address_size 64
.extern .func cudaGraphSetConditional(.param .b64 handle, .param .b32 value);
.visible .entry wrapir_check_reads(.param .u64 p_table, .param .u32 p_count, .param .u64 p_status,
    .param .u64 p_handle, .param .u32 p_has_handle)
{
  .reg .pred %p<6>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<14>;
  ld.param.u64 %rd1, [p_table];
  ld.param.u32 %r1, [p_count];
  ld.param.u64 %rd3, [p_status];
  ld.param.u64 %rd4, [p_handle];
  ld.param.u32 %r8, [p_has_handle];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd3, %rd3;
  ld.volatile.global.u32 %r3, [%rd3];
  setp.ne.u32 %p1, %r3, 0xFFFFFFFF;
  @%p1 bra DONE;
  mov.u32 %r9, 0;
ENTRY:
  setp.ge.u32 %p5, %r9, %r1;
  @%p5 bra DONE;
  mul.wide.u32 %rd9, %r9, 24;
  add.u64 %rd10, %rd1, %rd9;
  ld.global.u64 %rd11, [%rd10];
  ld.global.u64 %rd2, [%rd10+8];
  ld.global.u32 %r10, [%rd10+16];
  ld.global.u32 %r2, [%rd10+20];
  cvta.to.global.u64 %rd11, %rd11;
  mov.u64 %rd5, 0;
  mov.u32 %r4, 0;
GATHER:
  setp.ge.u32 %p2, %r4, %r10;
  @%p2 bra COMPARE;
  cvt.u64.u32 %rd6, %r4;
  add.u64 %rd7, %rd11, %rd6;
  ld.volatile.global.u8 %r5, [%rd7];
  cvt.u64.u32 %rd8, %r5;
  shl.b32 %r6, %r4, 3;
  shl.b64 %rd8, %rd8, %r6;
  or.b64 %rd5, %rd5, %rd8;
  add.u32 %r4, %r4, 1;
  bra GATHER;
COMPARE:
  add.u32 %r9, %r9, 1;
  setp.eq.u64 %p3, %rd5, %rd2;
  @%p3 bra ENTRY;
  st.volatile.global.u32 [%rd3], %r2;
  mov.u32 %r3, %r2;
DONE:
  setp.eq.u32 %p4, %r8, 0;
  @%p4 bra END;
  setp.eq.u32 %p1, %r3, 0xFFFFFFFF;
  selp.u32 %r7, 1, 0, %p1;
  {
    .param .b64 handle;
    .param .b32 value;
    st.param.b64 [handle], %rd4;
    st.param.b32 [value], %r7;
    call.uni cudaGraphSetConditional, (handle, value);
  }
END:
  ret;
}
"#;

/// Why this driver cannot replay a recording with reads as one graph, if it cannot.
pub(super) fn unsupported() -> Option<String> {
    let mut version = 0i32;
    // SAFETY: `version` is a valid out-pointer; the call needs no context.
    let r = unsafe { sys::cuDriverGetVersion(&mut version) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Some(format!("cuDriverGetVersion failed: {r:?}"));
    }
    (version < CONDITIONAL_DRIVER).then(|| {
        format!(
            "the driver (CUDA {}.{}) has no conditional graph nodes (CUDA 12.4 or newer)",
            version / 1000,
            version % 1000 / 10
        )
    })
}

impl CudaBackend {
    /// The check kernel, loaded at its first use by this backend.
    fn check_kernel(&self) -> Result<LoadedKernel, ExecError> {
        if let Some(k) = self.guard_kernel.get() {
            return Ok(k.clone());
        }
        let module = Arc::new(self.device.load_module(GUARD_PTX.as_bytes()).map_err(ExecError::from)?);
        let function = module.function(CHECK_KERNEL).map_err(ExecError::from)?;
        let kernel = LoadedKernel {
            function,
            _module: module,
        };
        Ok(self.guard_kernel.get_or_init(|| kernel).clone())
    }
}

/// The graph's nodes so far: owns the graph until it is instantiated.
struct Building {
    graph: sys::CUgraph,
}

impl Drop for Building {
    fn drop(&mut self) {
        if !self.graph.is_null() {
            // SAFETY: created by `cuGraphCreate` in `capture_guarded` and not
            // handed on (instantiation takes it out of `self`).
            unsafe {
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

/// Each operation's level (see the module documentation): for an
/// operation, the highest check group among the reads it depends on (0 for
/// none); for a read, its check group: one past the level of the operations
/// it depends on, and at least that of the reads it depends on (a read
/// chained to another is checked with it). `deps[i]` are the operations
/// `i` depends on; dependencies on later operations are ignored.
pub(super) fn levels(is_read: &[bool], deps: &[Vec<usize>]) -> Vec<usize> {
    let mut level = vec![0usize; is_read.len()];
    for i in 0..is_read.len() {
        let read = is_read[i];
        let mut l = usize::from(read);
        for &d in deps.get(i).map(Vec::as_slice).unwrap_or_default() {
            if d >= i {
                continue;
            }
            let need = if read && !is_read[d] {
                level[d].saturating_add(1)
            } else {
                level[d]
            };
            l = l.max(need);
        }
        level[i] = l;
    }
    level
}

/// Operations with their dependencies among the operations of the same graph.
type Placed = Vec<(usize, Vec<usize>)>;

/// What the one graph holds, by operation index (see the module documentation).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// The operations of level 0 (reads aside), in recording order.
    pub(super) top: Placed,
    /// Check group `g + 1` at `groups[g]`.
    pub(super) groups: Vec<GroupLayout>,
}

/// One check group: its check node and the IF node it opens.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct GroupLayout {
    /// The reads it checks, in recording order.
    pub(super) reads: Vec<usize>,
    /// The level-0 operations the check waits for (besides the check or
    /// IF node before it).
    pub(super) check_after: Vec<usize>,
    /// The IF body's operations (none: no IF node), in recording order.
    pub(super) body: Placed,
    /// The level-0 operations the IF node waits for (besides its check).
    pub(super) if_after: Vec<usize>,
}

/// The [`Layout`] of operations given which are reads and their
/// dependencies (as [`levels`] takes them).
pub(super) fn layout(is_read: &[bool], deps: &[Vec<usize>]) -> Layout {
    let level = levels(is_read, deps);
    let groups = level
        .iter()
        .zip(is_read)
        .filter(|(_, r)| **r)
        .map(|(l, _)| *l)
        .max()
        .unwrap_or(0);
    let mut top = Vec::new();
    let mut out: Vec<GroupLayout> = (0..groups)
        .map(|_| GroupLayout {
            reads: Vec::new(),
            check_after: Vec::new(),
            body: Vec::new(),
            if_after: Vec::new(),
        })
        .collect();
    let at_level_zero = |d: usize| level[d] == 0 && !is_read[d];
    for i in 0..is_read.len() {
        let d = deps.get(i).map(Vec::as_slice).unwrap_or_default();
        let earlier = d.iter().copied().filter(|&x| x < i);
        let l = level[i];
        let Some(group) = l.checked_sub(1).and_then(|g| out.get_mut(g)) else {
            top.push((i, earlier.filter(|&x| at_level_zero(x)).collect()));
            continue;
        };
        let waits_on = if is_read[i] {
            &mut group.check_after
        } else {
            &mut group.if_after
        };
        for x in earlier.clone().filter(|&x| at_level_zero(x)) {
            if !waits_on.contains(&x) {
                waits_on.push(x);
            }
        }
        if is_read[i] {
            group.reads.push(i);
        } else {
            let same: Vec<usize> = earlier.filter(|&x| level[x] == l && !is_read[x]).collect();
            group.body.push((i, same));
        }
    }
    Layout { top, groups: out }
}

/// The dependencies of a recording's operations: the program's DAG where
/// `concurrency` gives it, else each operation after the one before (one chain).
fn dependencies(ops: &[Op], concurrency: Option<&Concurrency>) -> Vec<Vec<usize>> {
    match concurrency {
        Some(c) => (0..ops.len())
            .map(|i| c.deps.get(i).cloned().unwrap_or_default())
            .collect(),
        None => (0..ops.len()).map(|i| i.checked_sub(1).into_iter().collect()).collect(),
    }
}

/// The union of the graph nodes `exits` of the operations `deps`, without repeats.
fn exit_nodes(deps: &[usize], exits: &[Vec<sys::CUgraphNode>]) -> Vec<sys::CUgraphNode> {
    let mut nodes: Vec<sys::CUgraphNode> = Vec::new();
    for &d in deps {
        for node in exits.get(d).map(Vec::as_slice).unwrap_or_default() {
            if !nodes.contains(node) {
                nodes.push(*node);
            }
        }
    }
    nodes
}

/// Builds and instantiates the one graph of `ops` (see the module
/// documentation): ordered by the program's DAG with `concurrency`, as one
/// chain without.
pub(super) fn capture_guarded(
    backend: &CudaBackend,
    ops: &mut [Op],
    concurrency: Option<&Concurrency>,
) -> Result<Guarded, ExecError> {
    let kernel = backend.check_kernel()?;
    let status = backend.untraced_storage(4)?;
    let stream = backend.device.stream.cu_stream();
    let ctx = backend.device.ctx.cu_ctx();
    let is_read: Vec<bool> = ops.iter().map(|op| matches!(op, Op::Read { .. })).collect();
    let plan = layout(&is_read, &dependencies(ops, concurrency));
    // Each group's table of reads, on the device; a read's index is its
    // position among the recording's reads.
    let mut read_index = vec![0u32; ops.len()];
    let mut index = 0u32;
    for (i, op) in ops.iter().enumerate() {
        if matches!(op, Op::Read { .. }) {
            read_index[i] = index;
            index = index
                .checked_add(1)
                .filter(|&i| i != NO_DIVERGENCE)
                .ok_or_else(|| ExecError::Device("too many device reads for one graph".into()))?;
        }
    }
    let mut tables = Vec::with_capacity(plan.groups.len());
    for group in &plan.groups {
        let mut table = Vec::with_capacity(group.reads.len() * ENTRY_BYTES);
        for &r in &group.reads {
            let Some(Op::Read { ptr, bytes, value }) = ops.get(r) else {
                return Err(ExecError::Device(
                    "a check group holds an operation that is not a read".into(),
                ));
            };
            let n = (*bytes).min(8);
            let mut expected = [0u8; 8];
            expected[..n].copy_from_slice(&value[..n]);
            table.extend_from_slice(&ptr.to_le_bytes());
            table.extend_from_slice(&expected);
            // `n <= 8`.
            table.extend_from_slice(&(n as u32).to_le_bytes());
            table.extend_from_slice(&read_index[r].to_le_bytes());
        }
        let storage = backend.untraced_storage(table.len().max(ENTRY_BYTES))?;
        if !table.is_empty() {
            backend.device.upload(storage.ptr, &table)?;
        }
        tables.push((storage, group.reads.len()));
    }
    let mut building = Building {
        graph: std::ptr::null_mut(),
    };
    // SAFETY: `building.graph` is a valid out-pointer; the context is bound
    // (the caller's `replay` bound it).
    check(unsafe { sys::cuGraphCreate(&mut building.graph, 0) }, "cuGraphCreate")?;
    let graph = building.graph;
    let status_ptr = status.ptr;
    let reset = capture_into(stream, CaptureTarget::Into { graph, after: &[] }, || {
        // SAFETY: `status` holds 4 bytes of device memory on this stream's context.
        let result = unsafe { sys::cuMemsetD32Async(status_ptr, NO_DIVERGENCE, 1, stream) };
        check(result, "cuMemsetD32Async")
    })?;
    // The graph nodes each operation ended on (in the graph of its level).
    let mut exits: Vec<Vec<sys::CUgraphNode>> = vec![Vec::new(); ops.len()];
    let mut capture_ops = |into: sys::CUgraph, placed: &Placed, exits: &mut Vec<Vec<sys::CUgraphNode>>| {
        for (i, deps) in placed {
            let after = exit_nodes(deps, exits);
            let target = CaptureTarget::Into {
                graph: into,
                after: &after,
            };
            let op = ops
                .get_mut(*i)
                .ok_or_else(|| ExecError::Device("a graph level holds an operation past the recording".into()))?;
            let leaves = capture_into(stream, target, || queue_on_lane(backend, concurrency, *i, op, stream))?;
            // An operation that captured nothing passes its dependencies on.
            exits[*i] = if leaves.is_empty() { after } else { leaves };
        }
        Ok::<(), ExecError>(())
    };
    capture_ops(graph, &plan.top, &mut exits)?;
    let mut prev = reset;
    for (group, (table, count)) in plan.groups.iter().zip(&tables) {
        let mut after_check = prev.clone();
        for node in exit_nodes(&group.check_after, &exits) {
            if !after_check.contains(&node) {
                after_check.push(node);
            }
        }
        let handle = if group.body.is_empty() {
            None
        } else {
            let mut h: sys::CUgraphConditionalHandle = 0;
            // SAFETY: `graph` is the graph being built, `ctx` the bound context;
            // the handle is set by the check below before its node runs.
            let result = unsafe { sys::cuGraphConditionalHandleCreate(&mut h, graph, ctx, 0, 0) };
            check(result, "cuGraphConditionalHandleCreate")?;
            Some(h)
        };
        let checked = add_check(graph, &after_check, &kernel, table.ptr, *count, status_ptr, handle)?;
        prev = vec![checked];
        if let Some(h) = handle {
            let mut after_if = vec![checked];
            after_if.extend(exit_nodes(&group.if_after, &exits));
            let (node, body) = add_if(graph, &after_if, h, ctx)?;
            capture_ops(body, &group.body, &mut exits)?;
            prev = vec![node];
        }
    }
    let graph = Graph::instantiate(std::mem::replace(&mut building.graph, std::ptr::null_mut()))?;
    Ok(Guarded {
        graph,
        status,
        checks: plan.groups.len(),
        ordered_by_dag: concurrency.is_some(),
        _tables: tables.into_iter().map(|(storage, _)| storage).collect(),
        _kernel: kernel,
    })
}

/// Adds a check node after `after`: it checks the `count` reads of `table`.
fn add_check(
    graph: sys::CUgraph,
    after: &[sys::CUgraphNode],
    kernel: &LoadedKernel,
    table: sys::CUdeviceptr,
    count: usize,
    status: sys::CUdeviceptr,
    handle: Option<sys::CUgraphConditionalHandle>,
) -> Result<sys::CUgraphNode, ExecError> {
    let mut table = table;
    let mut count =
        u32::try_from(count).map_err(|_| ExecError::Device("too many device reads for one check".into()))?;
    let mut status = status;
    let mut has_handle = u32::from(handle.is_some());
    let mut handle = handle.unwrap_or(0);
    let mut params: [*mut c_void; 5] = [
        (&mut table as *mut u64).cast(),
        (&mut count as *mut u32).cast(),
        (&mut status as *mut u64).cast(),
        (&mut handle as *mut u64).cast(),
        (&mut has_handle as *mut u32).cast(),
    ];
    // SAFETY: a plain C struct of integers and pointers, for which all zeroes
    // (null pointers, no extra arguments) is valid.
    let mut node_params: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    node_params.func = kernel.function;
    (node_params.gridDimX, node_params.gridDimY, node_params.gridDimZ) = (1, 1, 1);
    (node_params.blockDimX, node_params.blockDimY, node_params.blockDimZ) = (1, 1, 1);
    node_params.kernelParams = params.as_mut_ptr();
    let mut node: sys::CUgraphNode = std::ptr::null_mut();
    // SAFETY: `graph` is being built on the bound context; `after` are its
    // nodes; the parameters point at locals matching the kernel's signature
    // in order, which the driver copies before returning.
    let result = unsafe { sys::cuGraphAddKernelNode_v2(&mut node, graph, after.as_ptr(), after.len(), &node_params) };
    check(result, "cuGraphAddKernelNode")?;
    Ok(node)
}

/// Adds an IF node after the nodes `after`, opened by `handle`; returns it and its body graph.
fn add_if(
    graph: sys::CUgraph,
    after: &[sys::CUgraphNode],
    handle: sys::CUgraphConditionalHandle,
    ctx: sys::CUcontext,
) -> Result<(sys::CUgraphNode, sys::CUgraph), ExecError> {
    // SAFETY: a plain C struct (a tagged union of C structs) for which all
    // zeroes is valid; the conditional member is set below.
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
        size: 1,
        phGraph_out: std::ptr::null_mut(),
        ctx,
    };
    let mut node: sys::CUgraphNode = std::ptr::null_mut();
    // SAFETY: `graph` is being built on the bound context and `after` are
    // its nodes; `params` describes one IF node of that context.
    let result = unsafe {
        sys::cuGraphAddNode_v2(
            &mut node,
            graph,
            after.as_ptr(),
            std::ptr::null(),
            after.len(),
            &mut params,
        )
    };
    check(result, "cuGraphAddNode (conditional)")?;
    // SAFETY: the node was added with the conditional member set, and the
    // driver filled `phGraph_out` with its one body graph, valid while the
    // node lives.
    let body = unsafe {
        let out = params.__bindgen_anon_1.conditional.phGraph_out;
        if out.is_null() {
            std::ptr::null_mut()
        } else {
            *out
        }
    };
    if body.is_null() {
        return Err(ExecError::op(
            "cuda",
            "cuGraphAddNode gave a conditional node without a body",
        ));
    }
    Ok((node, body))
}

impl Guarded {
    /// Launches the graph and waits for its status word.
    pub(super) fn replay(&self, backend: &CudaBackend) -> Result<Replay, ExecError> {
        let stream = backend.device.stream.cu_stream();
        self.graph.launch(stream)?;
        let mut word = [0u8; 4];
        backend.device.download(&mut word, self.status.ptr)?;
        Ok(match u32::from_le_bytes(word) {
            NO_DIVERGENCE => Replay::Done,
            read => Replay::Diverged {
                read: usize::try_from(read).unwrap_or(usize::MAX),
            },
        })
    }

    /// The instantiated graph (for timing its device work).
    pub(super) fn graph(&self) -> &Graph {
        &self.graph
    }
}

#[cfg(test)]
mod tests {
    use super::{layout, levels, GroupLayout, Layout};

    /// `(is_read, deps)` per operation -> levels.
    fn check(ops: &[(bool, &[usize])], want: &[usize]) {
        let is_read: Vec<bool> = ops.iter().map(|(r, _)| *r).collect();
        let deps: Vec<Vec<usize>> = ops.iter().map(|(_, d)| d.to_vec()).collect();
        assert_eq!(levels(&is_read, &deps), want);
    }

    #[test]
    fn a_chain_puts_each_run_of_reads_in_its_own_group() {
        // A B R R C D R E, each after the one before.
        let chain: Vec<(bool, Vec<usize>)> = [false, false, true, true, false, false, true, false]
            .iter()
            .enumerate()
            .map(|(i, r)| (*r, i.checked_sub(1).into_iter().collect()))
            .collect();
        let ops: Vec<(bool, &[usize])> = chain.iter().map(|(r, d)| (*r, d.as_slice())).collect();
        check(&ops, &[0, 0, 1, 1, 1, 1, 2, 2]);
    }

    #[test]
    fn independent_experts_share_one_check_and_work_not_after_a_read_stays_ungated() {
        // Router 0; expert e: count launch, read, work (x4); a reduction of
        // the router's output that no read orders; the sum of the experts.
        let ops: &[(bool, &[usize])] = &[
            (false, &[]),
            (false, &[0]),
            (true, &[1]),
            (false, &[2]),
            (false, &[0]),
            (true, &[4]),
            (false, &[5, 3]),
            (false, &[0]),
            (false, &[6]),
        ];
        check(ops, &[0, 0, 1, 1, 0, 1, 1, 0, 1]);
    }

    #[test]
    fn a_read_of_gated_work_opens_the_next_group_and_chained_reads_share_one() {
        let ops: &[(bool, &[usize])] = &[
            (false, &[]),
            (true, &[0]),
            (true, &[1]),
            (false, &[2]),
            (true, &[3]),
            (false, &[4, 0]),
            (true, &[]),
            // A later dependency is ignored.
            (false, &[9]),
        ];
        check(ops, &[0, 1, 1, 1, 2, 2, 1, 0]);
    }

    fn group(reads: &[usize], check_after: &[usize], body: &[(usize, &[usize])], if_after: &[usize]) -> GroupLayout {
        GroupLayout {
            reads: reads.to_vec(),
            check_after: check_after.to_vec(),
            body: body.iter().map(|(i, d)| (*i, d.to_vec())).collect(),
            if_after: if_after.to_vec(),
        }
    }

    /// The experts of `independent_experts_...`: level 0 is the router, the
    /// two count launches and the unordered reduction; one check of both
    /// counts waits for the count launches; one IF node holds both experts'
    /// work and their sum, each after what it depends on inside the body.
    #[test]
    fn experts_lay_out_as_one_check_and_one_body() {
        let deps: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![1],
            vec![2],
            vec![0],
            vec![4],
            vec![5, 3],
            vec![0],
            vec![6],
        ];
        let is_read = [false, false, true, false, false, true, false, false, false];
        assert_eq!(
            layout(&is_read, &deps),
            Layout {
                top: vec![(0, vec![]), (1, vec![0]), (4, vec![0]), (7, vec![0])],
                groups: vec![group(&[2, 5], &[1, 4], &[(3, &[]), (6, &[3]), (8, &[6])], &[])],
            }
        );
    }

    /// A gated operation that also needs level-0 work makes its IF node wait
    /// for it; a read of gated work is the next group's, checked after the
    /// IF node before it; a group without work opens no IF node.
    #[test]
    fn later_groups_wait_for_their_level_zero_operands() {
        let deps: Vec<Vec<usize>> = vec![vec![], vec![0], vec![1], vec![2, 0], vec![3], vec![0]];
        let is_read = [false, false, true, false, true, false];
        assert_eq!(
            layout(&is_read, &deps),
            Layout {
                top: vec![(0, vec![]), (1, vec![0]), (5, vec![0])],
                groups: vec![group(&[2], &[1], &[(3, &[])], &[0]), group(&[4], &[], &[], &[])],
            }
        );
    }
}
