//! Opening a bundle for a model ([`open_for_model`], shared by
//! `runtime::Model::load` and the CUDA `runtime::cuda::Model::load`).

use super::Bundle;
use crate::exec::model_source::ModelError;
use std::path::Path;

/// Opens the bundle directory or package at `path` within `limits` for a
/// model: a failure is the model's [`ModelError::Bundle`], naming the path.
pub(crate) fn open_for_model(path: &Path, limits: &crate::Limits) -> Result<Bundle, ModelError> {
    Bundle::open_with_limits(path, limits).map_err(|e| ModelError::Bundle {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
