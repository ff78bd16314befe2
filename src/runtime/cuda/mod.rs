//! The runtime on a GPU (feature `cuda`): what a product built on the CUDA
//! backend ([`crate::exec::cuda`]) uses, above it.
//!
//! * [`Model`] and [`Session`]: a bundle loaded once on a GPU (weights on the
//!   device, kernels loaded, libraries prepared) and served from many
//!   threads, each session a backend with its own stream, arena and
//!   recordings ([`crate::runtime::Model`] wraps it with the CPU's);
//! * [`make_cudnn_plans`]: the convolution plans a package carries for its GPU;
//! * [`prebuild_kernels`]: the backend's own kernel images, compiled ahead
//!   for the images committed with the crate;
//! * [`CudaRankJob`]: the ranks of a multi-rank run, each on its own thread
//!   and GPU, their collectives on NCCL
//!   ([`crate::exec::collective::run_ranks`]);
//! * the device's and libraries' identity ([`device_arch`],
//!   [`library_versions`]) and the settings and reports those name.
//!
//! A build without the feature has a stand-in of the same public names that
//! its callers use in both builds (`runtime/cuda_standin.rs`): its entry
//! points return [`CudaError::NotBuilt`]; nothing else.

mod model;
mod ranks;
mod settings;

pub use crate::exec::cuda::conv::PlansAhead;
pub use crate::exec::cuda::kernels::{prebuild_kernels, PrebuiltImage};
pub use crate::exec::cuda::{
    device_arch, library_versions, ChainStep, CriticalPath, CudaError, CudaPaths, GraphReads, GraphStreams,
    LaunchFloor, LibraryCost, LibraryVersion, LoadTimings, Replay, StreamChoice, KERNEL_CACHE_VAR, LIBRARY_PATH_VAR,
};
pub use model::{make_cudnn_plans, DeviceInput, DeviceOutput, LoadReport, Model, ModelOptions, Session};
pub use ranks::CudaRankJob;
pub use settings::CudaSettings;

pub(crate) use settings::{load, report};

use crate::exec::model_source::{ModelError, ModelSource};
