//! A [`crate::runtime::Model`] on a GPU: the CUDA [`Model`], loaded with
//! the options [`ModelOptions`] and [`CudaSettings`] give it.

use super::{CudaPaths, GraphStreams, Model, ModelError, ModelSource};
use crate::runtime::{LoadReport, ModelOptions};
use std::time::Instant;

/// The CUDA settings of a [`crate::runtime::Model`] on a GPU (each as
/// [`super::ModelOptions`] documents it).
#[derive(Clone, Debug)]
pub struct CudaSettings {
    /// Replay recordings through CUDA graphs (default `true`).
    pub graphs: bool,
    /// Shape buckets each session keeps recorded (default 8).
    pub shape_cache: usize,
    /// Run one call on the bundle's stored inputs while loading (default `true`).
    pub warm_up: bool,
    /// Where the CUDA libraries and the kernel cache are (default: the
    /// loader's paths only, no disk cache; [`CudaPaths::from_env`] reads
    /// them from the environment).
    pub paths: CudaPaths,
    /// Threads that make the convolution plans ahead (default: the machine's
    /// parallelism, at most 8; 0 leaves each to its first call).
    pub plan_threads: usize,
    /// How graph replay orders a recording's operations (default `Auto`:
    /// independent kernels at once where measured faster; `Single` forces
    /// one stream; see [`super::ModelOptions::graph_streams`]).
    pub graph_streams: GraphStreams,
}

impl Default for CudaSettings {
    fn default() -> Self {
        let cuda = super::ModelOptions::default();
        CudaSettings {
            graphs: cuda.graphs,
            shape_cache: cuda.shape_cache,
            warm_up: cuda.warm_up,
            paths: cuda.paths,
            plan_threads: cuda.plan_threads,
            graph_streams: cuda.graph_streams,
        }
    }
}

/// Loads `source` on CUDA device `ordinal`.
pub(crate) fn load(
    source: &dyn ModelSource,
    options: &ModelOptions,
    ordinal: usize,
    started: Instant,
) -> Result<Model, ModelError> {
    let settings = &options.cuda;
    let cuda = super::ModelOptions {
        device: ordinal,
        graphs: settings.graphs,
        shape_cache: settings.shape_cache,
        idle_sessions: options.idle_sessions,
        limits: options.limits,
        warm_up: settings.warm_up,
        paths: settings.paths.clone(),
        plan_threads: settings.plan_threads,
        graph_streams: settings.graph_streams,
    };
    Model::load_from(source, &cuda, started)
}

/// The device-generic part of `model`'s load report.
pub(crate) fn report(model: &Model) -> LoadReport {
    let r = model.load_report();
    LoadReport {
        device: r.device.clone(),
        kernels: r.kernels,
        weights: r.weights,
        weight_bytes: r.weight_bytes,
        total: r.total,
    }
}
