//! The runtime's CUDA names in a build without the `cuda` feature: the few
//! that callers use in both builds (the CLI).
//! Nothing here runs: every entry point returns [`CudaError::NotBuilt`]
//! and no result is ever made up. See the real module (`runtime/cuda/`)
//! for what each does.

pub use crate::exec::cuda_paths::{CudaPaths, KERNEL_CACHE_VAR, LIBRARY_PATH_VAR};
pub use crate::exec::cuda_reports::{
    ChainStep, CriticalPath, GraphReads, GraphStreams, LaunchFloor, LibraryCost, LibraryVersion, LoadTimings, Replay,
    StreamChoice,
};
use crate::exec::model_source::{CudnnPlans, ModelError, ModelSource};
use crate::exec::ExecError;

/// Why the CUDA backend cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// This build has no CUDA backend.
    #[error("wrapir was built without the `cuda` feature (rebuild with `--features cuda`)")]
    NotBuilt,
}

impl From<CudaError> for ExecError {
    fn from(e: CudaError) -> Self {
        ExecError::Device(e.to_string())
    }
}

impl From<CudaError> for ModelError {
    fn from(e: CudaError) -> Self {
        ModelError::Exec(e.into())
    }
}

/// The GPU of device `ordinal`: [`CudaError::NotBuilt`].
pub fn device_arch(_ordinal: usize) -> Result<(String, u32), CudaError> {
    Err(CudaError::NotBuilt)
}

/// The CUDA libraries' versions: [`CudaError::NotBuilt`].
pub fn library_versions(_paths: &CudaPaths) -> Result<Vec<LibraryVersion>, CudaError> {
    Err(CudaError::NotBuilt)
}

/// Makes the convolution plans of `source` on a GPU: [`CudaError::NotBuilt`].
pub fn make_cudnn_plans(
    _source: &dyn ModelSource,
    _ordinal: usize,
    _paths: CudaPaths,
) -> Result<CudnnPlans, ModelError> {
    Err(CudaError::NotBuilt.into())
}
