//! A [`Bundle`] as what a deployed [`Model`] loads from, and
//! [`Model::load`], which opens one.

use super::{Bundle, INPUTS};
use crate::exec::compare::BundleMeta;
use crate::exec::cuda::{Model, ModelError, ModelOptions, ModelSource};
use crate::exec::images::{ImageArch, KernelImageSource, SuppliedBytes, SupplyError};
use crate::ir::Program;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A bundle directory or package supplies the program, `bundle.json`, the
/// stored inputs (`inputs.safetensors`) and the kernel images.
impl ModelSource for Bundle {
    fn location(&self) -> &Path {
        self.path()
    }

    fn program(&self) -> &Program {
        Bundle::program(self)
    }

    fn meta(&self) -> &BundleMeta {
        Bundle::meta(self)
    }

    fn weights(&self) -> &[String] {
        Bundle::weights(self)
    }

    fn stored_inputs(&self) -> Result<Option<SuppliedBytes>, SupplyError> {
        Ok(self.entry(INPUTS)?.map(|bytes| Box::new(bytes) as SuppliedBytes))
    }

    fn kernel_images(&self) -> Arc<dyn KernelImageSource> {
        Arc::new(Bundle::kernel_images(self))
    }

    fn kernel_image_archs(&self) -> Vec<(String, Result<ImageArch, SupplyError>)> {
        Bundle::kernel_image_archs(self)
            .into_iter()
            .map(|(kernel, arch)| (kernel, arch.map_err(SupplyError::from)))
            .collect()
    }
}

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
