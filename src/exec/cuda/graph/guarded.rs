//! One CUDA graph for a recording that reads device values: each read is
//! checked on the device, and the rest of the recording runs under a
//! conditional IF node that the check opens.
//!
//! A recording is a trace of one path: it holds, at each device read (an
//! unbacked size, a `cond` or `while_loop` predicate, `item()`), the value the
//! recorded run read, and what follows was recorded for that value. The
//! graph is a chain:
//!
//! ```text
//! reset status, segment 0 -> check 0 -> IF { segment 1 } -> check 1 -> IF { segment 2 } ...
//! ```
//!
//! `check k` (a one-thread kernel) compares the bytes at the read's address
//! with the recorded ones. While the status word says "no divergence" and the
//! bytes match, it opens its IF node (`cudaGraphSetConditional`); at the first
//! mismatch it writes `k` into the status word, and it and every later check
//! keep their IF nodes closed. The host launches the graph once and reads
//! the status word once, after the graph: "no divergence" means every
//! segment ran ([`Replay::Done`]); `k` means the recording's read `k` saw
//! another value ([`Replay::Diverged`]): as in segment replay, everything
//! before it wrote only the arena, and the caller records again.
//!
//! Reads with nothing between them are consecutive checks; only the last
//! one before a segment opens an IF node. Conditional nodes need a CUDA 12.4
//! driver; the caller falls back to segments without one, or when the
//! driver refuses to capture a segment into a conditional body.

use super::{capture_into, check, CaptureTarget, Graph};
use crate::exec::cuda::launch::LoadedKernel;
use crate::exec::cuda::prepared::captured::Guarded;
use crate::exec::cuda::prepared::Op;
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
const CHECK_KERNEL: &str = "wrapir_check_read";

/// The check kernel, as PTX (JIT-compiled by the driver for any GPU).
/// Parameters: the read's address, its byte count (1 to 8), the recorded
/// bytes (little-endian, zero-extended), the read's index, the status word,
/// the IF node's handle and whether there is one. `cudaGraphSetConditional`
/// is the device runtime's built-in that sets a conditional handle.
const GUARD_PTX: &str = r#".version 7.8
.target sm_70
.address_size 64
.extern .func cudaGraphSetConditional(.param .b64 handle, .param .b32 value);
.visible .entry wrapir_check_read(.param .u64 p_ptr, .param .u32 p_bytes, .param .u64 p_expected, .param .u32 p_index,
    .param .u64 p_status, .param .u64 p_handle, .param .u32 p_has_handle)
{
  .reg .pred %p<5>;
  .reg .b32 %r<10>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [p_ptr];
  ld.param.u32 %r1, [p_bytes];
  ld.param.u64 %rd2, [p_expected];
  ld.param.u32 %r2, [p_index];
  ld.param.u64 %rd3, [p_status];
  ld.param.u64 %rd4, [p_handle];
  ld.param.u32 %r8, [p_has_handle];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd3, %rd3;
  ld.volatile.global.u32 %r3, [%rd3];
  setp.ne.u32 %p1, %r3, 0xFFFFFFFF;
  @%p1 bra DONE;
  mov.u64 %rd5, 0;
  mov.u32 %r4, 0;
GATHER:
  setp.ge.u32 %p2, %r4, %r1;
  @%p2 bra COMPARE;
  cvt.u64.u32 %rd6, %r4;
  add.u64 %rd7, %rd1, %rd6;
  ld.volatile.global.u8 %r5, [%rd7];
  cvt.u64.u32 %rd8, %r5;
  shl.b32 %r6, %r4, 3;
  shl.b64 %rd8, %rd8, %r6;
  or.b64 %rd5, %rd5, %rd8;
  add.u32 %r4, %r4, 1;
  bra GATHER;
COMPARE:
  setp.eq.u64 %p3, %rd5, %rd2;
  @%p3 bra DONE;
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

/// Queues `ops` (no reads among them) on the backend's stream.
fn queue(backend: &CudaBackend, ops: &mut [Op]) -> Result<(), ExecError> {
    let stream = backend.device.stream.cu_stream();
    for op in ops.iter_mut() {
        match op {
            Op::Launch(l) => crate::exec::cuda::prepared::launch(l, stream),
            Op::Library(call) => call.run(backend),
            Op::Zero { ptr, bytes } => backend.device.zero(*ptr, *bytes).map_err(ExecError::from),
            Op::Read { .. } => Err(ExecError::Device("a device read inside a guarded segment".into())),
        }?;
    }
    Ok(())
}

/// Builds and instantiates the one graph of `ops` (see the module documentation).
pub(super) fn capture_guarded(backend: &CudaBackend, ops: &mut [Op]) -> Result<Guarded, ExecError> {
    let kernel = backend.check_kernel()?;
    let status = backend.untraced_storage(4)?;
    let stream = backend.device.stream.cu_stream();
    let ctx = backend.device.ctx.cu_ctx();
    let mut building = Building {
        graph: std::ptr::null_mut(),
    };
    // SAFETY: `building.graph` is a valid out-pointer; the context is bound
    // (the caller's `replay` bound it).
    check(unsafe { sys::cuGraphCreate(&mut building.graph, 0) }, "cuGraphCreate")?;
    let graph = building.graph;
    let is_read = |op: &Op| matches!(op, Op::Read { .. });
    let first = ops.iter().position(is_read).unwrap_or(ops.len());
    let (head, mut rest) = ops.split_at_mut(first);
    let status_ptr = status.ptr;
    let mut after = capture_into(stream, CaptureTarget::Into { graph, after: &[] }, || {
        // SAFETY: `status` holds 4 bytes of device memory on this stream's context.
        let result = unsafe { sys::cuMemsetD32Async(status_ptr, NO_DIVERGENCE, 1, stream) };
        check(result, "cuMemsetD32Async")?;
        queue(backend, head)
    })?;
    let mut index = 0u32;
    while let Some((read, tail)) = std::mem::take(&mut rest).split_first_mut() {
        let Op::Read { ptr, bytes, value } = read else {
            return Err(ExecError::Device("a guarded segment split at a launch".into()));
        };
        let next = tail.iter().position(is_read).unwrap_or(tail.len());
        let (segment, later) = tail.split_at_mut(next);
        let handle = if segment.is_empty() {
            None
        } else {
            let mut h: sys::CUgraphConditionalHandle = 0;
            // SAFETY: `graph` is the graph being built, `ctx` the bound context;
            // the handle is set by the check below before its node runs.
            let result = unsafe { sys::cuGraphConditionalHandleCreate(&mut h, graph, ctx, 0, 0) };
            check(result, "cuGraphConditionalHandleCreate")?;
            Some(h)
        };
        let mut expected = [0u8; 8];
        let n = (*bytes).min(8);
        expected[..n].copy_from_slice(&value[..n]);
        let checked = add_check(
            graph,
            &after,
            &kernel,
            *ptr,
            n,
            u64::from_le_bytes(expected),
            index,
            status_ptr,
            handle,
        )?;
        after = vec![checked];
        if let Some(h) = handle {
            let (node, body) = add_if(graph, checked, h, ctx)?;
            capture_into(
                stream,
                CaptureTarget::Into {
                    graph: body,
                    after: &[],
                },
                || queue(backend, segment),
            )?;
            after = vec![node];
        }
        rest = later;
        index = index
            .checked_add(1)
            .filter(|&i| i != NO_DIVERGENCE)
            .ok_or_else(|| ExecError::Device("too many device reads for one graph".into()))?;
    }
    let graph = Graph::instantiate(std::mem::replace(&mut building.graph, std::ptr::null_mut()))?;
    Ok(Guarded {
        graph,
        status,
        _kernel: kernel,
    })
}

/// Adds a check node after `after`.
#[allow(clippy::too_many_arguments)]
fn add_check(
    graph: sys::CUgraph,
    after: &[sys::CUgraphNode],
    kernel: &LoadedKernel,
    ptr: sys::CUdeviceptr,
    bytes: usize,
    expected: u64,
    index: u32,
    status: sys::CUdeviceptr,
    handle: Option<sys::CUgraphConditionalHandle>,
) -> Result<sys::CUgraphNode, ExecError> {
    let mut ptr = ptr;
    let mut bytes = u32::try_from(bytes.min(8)).unwrap_or(8);
    let mut expected = expected;
    let mut index = index;
    let mut status = status;
    let mut has_handle = u32::from(handle.is_some());
    let mut handle = handle.unwrap_or(0);
    let mut params: [*mut c_void; 7] = [
        (&mut ptr as *mut u64).cast(),
        (&mut bytes as *mut u32).cast(),
        (&mut expected as *mut u64).cast(),
        (&mut index as *mut u32).cast(),
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

/// Adds an IF node after `after`, opened by `handle`; returns it and its body graph.
fn add_if(
    graph: sys::CUgraph,
    after: sys::CUgraphNode,
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
    // SAFETY: `graph` is being built on the bound context and `after` is one
    // of its nodes; `params` describes one IF node of that context.
    let result = unsafe { sys::cuGraphAddNode_v2(&mut node, graph, &after, std::ptr::null(), 1, &mut params) };
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
