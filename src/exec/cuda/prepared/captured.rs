//! What graph replay (`graph/`, above `prepared/`) captured of a recording,
//! kept with the [`Prepared`](crate::exec::cuda::Prepared) recording it
//! replays: the instantiated graphs and their form.

use crate::exec::cuda::launch::LoadedKernel;
use crate::exec::cuda::{Storage, StreamChoice};
use crate::exec::ExecError;
use cudarc::driver::sys;
use std::sync::Arc;

/// A checked driver call.
pub(in crate::exec::cuda) fn check(r: sys::CUresult, call: &str) -> Result<(), ExecError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(ExecError::Device(format!("{call} failed: {r:?}")))
    }
}

/// One instantiated graph; destroyed on drop.
#[derive(Debug)]
pub(in crate::exec::cuda) struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles were created once by `Graph::instantiate` and
        // are destroyed once, here; the owner synchronises before dropping.
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec);
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

impl Graph {
    /// Instantiates the complete graph `graph`, taking it over (it is
    /// destroyed here when instantiation fails).
    pub(in crate::exec::cuda) fn instantiate(graph: sys::CUgraph) -> Result<Graph, ExecError> {
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is a complete graph of the bound context; `exec` is
        // a valid out-pointer.
        let result = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        let inst = check(result, "cuGraphInstantiate");
        if let Err(e) = inst {
            // SAFETY: the graph is ours (see above) and not used again.
            unsafe {
                let _ = sys::cuGraphDestroy(graph);
            }
            return Err(e);
        }
        Ok(Graph { graph, exec })
    }

    /// Queues one replay on `stream`.
    pub(in crate::exec::cuda) fn launch(&self, stream: sys::CUstream) -> Result<(), ExecError> {
        // SAFETY: the graph was instantiated on the stream's context and its
        // buffers (arena, held inputs) live as long as its owner.
        check(unsafe { sys::cuGraphLaunch(self.exec, stream) }, "cuGraphLaunch")
    }
}

/// What a segment is on replay.
#[derive(Debug)]
pub(in crate::exec::cuda) enum Part {
    Graph(Graph),
    /// A run of consecutive device reads: the recording's ops at these indices.
    Reads(std::ops::Range<usize>),
}

/// How a recording replays through graphs.
#[derive(Debug)]
pub(in crate::exec::cuda) enum Form {
    /// One graph (see `graph/guarded.rs`).
    Guarded(Guarded),
    /// Plain graphs between host reads, and why not one graph when the
    /// recording has reads.
    Segments { parts: Vec<Part>, why: Option<String> },
}

/// The captured graphs of one recording.
#[derive(Debug)]
pub(in crate::exec::cuda) struct SegmentGraphs {
    pub(in crate::exec::cuda) form: Form,
    /// What [`GraphStreams::Auto`](crate::exec::cuda::GraphStreams::Auto)
    /// measured and chose, per segment it chose for.
    pub(in crate::exec::cuda) choices: Vec<StreamChoice>,
}

impl SegmentGraphs {
    /// Graphs captured (segments with at least one launch).
    pub(in crate::exec::cuda) fn graphs(&self) -> usize {
        match &self.form {
            Form::Guarded(_) => 1,
            Form::Segments { parts, .. } => parts.iter().filter(|p| matches!(p, Part::Graph(_))).count(),
        }
    }
}

/// A recording's one graph and its status word.
#[derive(Debug)]
pub(in crate::exec::cuda) struct Guarded {
    pub(in crate::exec::cuda) graph: Graph,
    pub(in crate::exec::cuda) status: Arc<Storage>,
    /// Check nodes (groups of reads checked together).
    pub(in crate::exec::cuda) checks: usize,
    /// Whether operations are ordered by the program's DAG (else one chain).
    pub(in crate::exec::cuda) ordered_by_dag: bool,
    /// The checks' tables of reads, on the device.
    pub(in crate::exec::cuda) _tables: Vec<Arc<Storage>>,
    /// The check kernel's module, kept loaded while the graph lives.
    pub(in crate::exec::cuda) _kernel: LoadedKernel,
}
