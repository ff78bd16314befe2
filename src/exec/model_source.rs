//! What a deployed model (`runtime::Model`, `runtime::cuda::Model`) is
//! loaded from and how loading fails, in every build: `bundle` (below the
//! runtime) supplies a [`ModelSource`], the runtime loads from it.

use crate::exec::{ExecError, RunError};
use crate::format::bundle_json::BundleMeta;
use crate::format::images::{ImageArch, KernelImageSource, SuppliedBytes, SupplyError};
use crate::ir::Program;
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Reading the bundle failed.
    #[error("{path}: {message}")]
    Bundle {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Validating, compiling or running the program failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A call's inputs do not match the program, or the device failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// What a `Model` is loaded from, supplied by the caller: a program, its
/// `bundle.json` metadata, its stored inputs (the weights among them) and its
/// kernel images. The library's bundles are one (`Model::load` opens a
/// bundle directory or package and loads from it).
pub trait ModelSource {
    /// Where it is, as errors name it (a bundle's path).
    fn location(&self) -> &Path;
    /// The program.
    fn program(&self) -> &Program;
    /// Its `bundle.json`.
    fn meta(&self) -> &BundleMeta;
    /// The names of the graph inputs that are weights, uploaded once.
    fn weights(&self) -> &[String];
    /// The stored graph inputs as the bytes of a safetensors file
    /// (`inputs.safetensors`), `None` when there are none.
    fn stored_inputs(&self) -> Result<Option<SuppliedBytes>, SupplyError>;
    /// Where the backends find the kernel images.
    fn kernel_images(&self) -> Arc<dyn KernelImageSource>;
    /// Every kernel of the program's kernel table with the architecture of
    /// the image the CUDA backend would load for it, in table order, or why
    /// it has none (checked before the weights upload).
    fn kernel_image_archs(&self) -> Vec<(String, Result<ImageArch, SupplyError>)>;
    /// Serialized cuDNN plans for the program's convolutions (a package's
    /// `cudnn-plans/` entries), restored instead of made; the default: none.
    fn cudnn_plans(&self) -> CudnnPlans {
        CudnnPlans::default()
    }
}

/// Serialized cuDNN execution plans a caller supplies (a package's
/// `cudnn-plans/` entries), by the name the CUDA backend gives a plan
/// (`cudnn-conv-<digest>.json`): a digest of the convolution (its shapes,
/// layouts, alignments and math mode) and of the cuDNN, driver and GPU it
/// was made for. A plan made for another GPU or library version has another
/// name and is never looked up, and one cuDNN refuses is made again with
/// the same engine choice: supplied plans change how long a convolution's
/// first call takes, never its numerics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CudnnPlans {
    /// The cuDNN, driver and GPU the plans were made for, as the backend
    /// names them (`cudnn 91400 driver 13000 NVIDIA H200 sm90 x132`), when known.
    pub made_for: Option<String>,
    entries: Arc<IndexMap<String, Arc<[u8]>>>,
}

impl CudnnPlans {
    /// The plans `entries` (name, JSON form) made for `made_for`.
    pub fn new(made_for: Option<String>, entries: impl IntoIterator<Item = (String, Vec<u8>)>) -> CudnnPlans {
        CudnnPlans {
            made_for,
            entries: Arc::new(entries.into_iter().map(|(n, b)| (n, Arc::from(b))).collect()),
        }
    }

    /// The plan named `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.entries.get(name).map(|b| &b[..])
    }

    /// How many plans there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The plans by name, in the order they were given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(n, b)| (n.as_str(), &b[..]))
    }
}
