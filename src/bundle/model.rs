//! [`Model::load`], which opens a [`Bundle`] and loads the model from it.

use super::Bundle;
use crate::exec::cuda::{Model, ModelError, ModelOptions};
use std::path::Path;
use std::time::Instant;

impl Model {
    /// Loads the bundle directory or package at `path` (what loading does:
    /// [`Model`]): opens it within [`ModelOptions::limits`] and checks that
    /// its cubins can run on the device. [`Model::from_source`] loads from
    /// anything else that supplies a program, weights and kernel images.
    pub fn load(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Model, ModelError> {
        let started = Instant::now();
        let path = path.as_ref();
        let bundle = Bundle::open_with_limits(path, &options.limits).map_err(|e| ModelError::Bundle {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Model::load_from(&bundle, options, started)
    }
}
