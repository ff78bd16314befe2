//! Library calls (cuBLAS, cuBLASLt, cuDNN) as steps the prepared path and
//! CUDA graphs repeat.
//!
//! An extern op that calls a library describes the call as a
//! [`LibraryCall`]: everything the library needs (descriptors, the chosen
//! algorithm, scalars) plus the device addresses it passes. The op runs the
//! call through [`submit`], which also hands it to the backend's trace while
//! the prepared path records; the recorder re-points the addresses at the
//! arena ([`LibraryCall::rebased`]) and a replay (or a graph capture) calls
//! [`LibraryCall::run`] again with no planning, hashing or allocation.
//!
//! The trace a recording is made from ([`Traced`]) holds those calls with
//! the other device operations the backend queued (allocations, launches,
//! zeroing, host reads) while [`CudaBackend::trace`] is on.

use super::tensor::Storage;
use super::CudaBackend;
use crate::exec::ExecError;
use cudarc::driver::sys;
use std::sync::Arc;

/// A device address a library call passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Address {
    /// The address.
    pub(super) ptr: sys::CUdeviceptr,
    /// Whether the call may write through it.
    pub(super) writes: bool,
}

/// A call's addresses: `operands` in order, then those of `optional` that
/// are present (not null), each with whether the call may write through it.
pub(super) fn addresses(operands: &[(sys::CUdeviceptr, bool)], optional: &[(sys::CUdeviceptr, bool)]) -> Vec<Address> {
    operands
        .iter()
        .chain(optional.iter().filter(|(ptr, _)| *ptr != 0))
        .map(|&(ptr, writes)| Address { ptr, writes })
        .collect()
}

/// The handle of `library` a replay runs `op`'s call on: the backend's, which
/// the recorded run created (an error naming both when there is none).
pub(super) fn recorded_handle<'h, H>(handle: Option<&'h H>, op: &str, library: &str) -> Result<&'h H, ExecError> {
    handle.ok_or_else(|| ExecError::op(op, format!("no {library} handle (the recorded run created one)")))
}

/// One library call, ready to run again (see the module documentation).
pub(super) trait LibraryCall: std::fmt::Debug {
    /// The extern op that made the call (`aten.addmm`, ...), for errors and reports.
    fn op(&self) -> &str;
    /// The library it calls (`cuBLAS`, `cuBLASLt`, `cuDNN`).
    fn library(&self) -> &'static str;
    /// The device addresses it passes, in a fixed order; null addresses
    /// (absent operands) are left out.
    fn addresses(&self) -> Vec<Address>;
    /// The same call with `addresses` (one per entry of
    /// [`LibraryCall::addresses`], same order) in their place.
    fn rebased(&self, addresses: &[sys::CUdeviceptr]) -> Box<dyn LibraryCall>;
    /// Queues the call on the backend's stream (handles the backend keeps).
    fn run(&self, backend: &CudaBackend) -> Result<(), ExecError>;

    /// [`LibraryCall::run`] with `workspaces` instead of the handles' own
    /// workspaces (concurrent graph replay: calls that may overlap must not
    /// share one). By default the call uses no handle workspace (its
    /// workspace, if any, is an allocation of the run), and runs as is.
    fn run_in(&self, backend: &CudaBackend, workspaces: &LaneWorkspaces) -> Result<(), ExecError> {
        let _ = workspaces;
        self.run(backend)
    }
}

/// The workspaces of one concurrency lane for the libraries whose handles
/// hold one (cuBLAS's, cuBLASLt's): device allocations at least the size of
/// the handles' own. An address of 0: the lane has none for that library
/// (no call of it runs on the lane).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LaneWorkspaces {
    /// cuBLAS's workspace and its bytes.
    pub(super) blas: (sys::CUdeviceptr, usize),
    /// cuBLASLt's workspace ([`super::blaslt::WORKSPACE_BYTES`]).
    pub(super) lt: sys::CUdeviceptr,
}

/// Runs `call` on `backend` and, while the prepared path records, keeps it
/// in the trace.
pub(super) fn submit(backend: &mut CudaBackend, call: Box<dyn LibraryCall>) -> Result<(), ExecError> {
    call.run(backend)?;
    if let Some(trace) = backend.trace.as_mut() {
        trace.push(Traced::Library(call));
    }
    Ok(())
}

/// One parameter of a traced launch: its words (each parameter of the
/// built-in kernels is a whole number of 8-byte words) and which of them are
/// device addresses.
#[derive(Clone, Debug)]
pub(super) struct TracedParam {
    pub(super) words: Vec<u64>,
    pub(super) pointers: Vec<usize>,
}

/// A device operation of a built-in op, kept while the backend traces (see
/// [`CudaBackend::trace`]) so that the prepared path can replay the op.
#[derive(Debug)]
pub(super) enum Traced {
    /// A device allocation (result or scratch).
    Alloc(Arc<Storage>),
    /// A kernel launch.
    Launch {
        name: String,
        function: sys::CUfunction,
        grid: (u32, u32, u32),
        block: u32,
        shared_mem: u32,
        params: Vec<TracedParam>,
    },
    /// `bytes` bytes at `ptr` set to zero.
    Zero { ptr: sys::CUdeviceptr, bytes: usize },
    /// A read of `bytes` bytes at `ptr` by the host, and what it read.
    Read {
        ptr: sys::CUdeviceptr,
        bytes: usize,
        value: [u8; 8],
    },
    /// A library call (cuBLAS, cuBLASLt, cuDNN).
    Library(Box<dyn LibraryCall>),
    /// The op went to the host fallback.
    Host(String),
    /// The operations traced from here to the next [`Traced::Join`] each
    /// depend on what the op traced before this mark, not on each other:
    /// the op guarantees they touch disjoint bytes (a grouped GEMM's GEMMs,
    /// each into its own rows), so concurrent replay may overlap them.
    Fork,
    /// Ends a [`Traced::Fork`]: what follows depends on every operation since it.
    Join,
}

#[cfg(test)]
mod tests {
    /// A call's addresses: every operand in order, then the optional ones
    /// that are present, each with its write flag; absent ones (null) leave
    /// no gap, as `rebased` expects.
    #[test]
    fn addresses_list_operands_then_the_optional_ones_present() {
        let got = super::addresses(
            &[(10, false), (20, true)],
            &[(0, true), (30, false), (0, false), (40, true)],
        );
        let got: Vec<(u64, bool)> = got.iter().map(|a| (a.ptr, a.writes)).collect();
        assert_eq!(got, [(10, false), (20, true), (30, false), (40, true)]);
    }
}
