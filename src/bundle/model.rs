//! Opening a bundle for a model ([`open_for_model`], shared by
//! [`crate::runtime::Model::load`] and the CUDA `Model::load`), and the
//! CUDA `exec::cuda::Model::load`, which loads the model from it.

use super::Bundle;
use crate::exec::cuda::ModelError;
#[cfg(feature = "cuda")]
use crate::exec::cuda::{Model, ModelOptions};
use std::path::Path;

/// Opens the bundle directory or package at `path` within `limits` for a
/// model: a failure is the model's [`ModelError::Bundle`], naming the path.
pub(crate) fn open_for_model(path: &Path, limits: &crate::Limits) -> Result<Bundle, ModelError> {
    Bundle::open_with_limits(path, limits).map_err(|e| ModelError::Bundle {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(feature = "cuda")]
impl Model {
    /// Loads the bundle directory or package at `path` (what loading does:
    /// [`Model`]): opens it within [`ModelOptions::limits`] and checks that
    /// its cubins can run on the device. [`Model::from_source`] loads from
    /// anything else that supplies a program, weights and kernel images.
    pub fn load(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Model, ModelError> {
        let started = std::time::Instant::now();
        let bundle = open_for_model(path.as_ref(), &options.limits)?;
        Model::load_from(&bundle, options, started)
    }
}
