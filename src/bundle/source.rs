//! A [`Bundle`] as what a deployed model (`runtime::Model`, `runtime::cuda::Model`) loads from.

use super::{Bundle, INPUTS};
use crate::exec::model_source::{CudnnPlans, ModelSource};
use crate::format::bundle_json::BundleMeta;
use crate::format::images::{ImageArch, KernelImageSource, SuppliedBytes, SupplyError};
use crate::ir::Program;
use std::path::Path;
use std::sync::Arc;

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

    /// The plans [`Bundle::cudnn_plans`] reads; unreadable ones are left
    /// out (a plan not found is only made again).
    fn cudnn_plans(&self) -> CudnnPlans {
        Bundle::cudnn_plans(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_supplies_what_a_model_loads() {
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/inductor/bundles/softmax"
        ));
        let bundle = Bundle::open(dir).expect("the fixture opens");
        let source: &dyn ModelSource = &bundle;
        assert_eq!(source.location(), dir);
        assert_eq!(source.program(), bundle.program());
        assert_eq!(source.weights(), bundle.weights());
        let stored = source
            .stored_inputs()
            .expect("readable")
            .expect("the bundle stores inputs");
        assert_eq!((*stored).as_ref(), &bundle.entry(INPUTS).unwrap().unwrap()[..]);
        let archs = source.kernel_image_archs();
        assert!(!archs.is_empty());
        assert!(archs.iter().all(|(_, arch)| arch.is_ok()), "{archs:?}");
        let images = source.kernel_images();
        assert_eq!(images.directory(), Some(dir));
        let (kernel, path) = bundle
            .program()
            .kernels
            .iter()
            .find_map(|(name, def)| match &def.backend {
                crate::ir::KernelBackend::Triton(meta) => meta.cubin.clone().map(|c| (name.to_string(), c)),
                _ => None,
            })
            .expect("a Triton kernel with a cubin");
        let (image, _) = images.kernel_image(&kernel, &path).expect("the image reads");
        assert!((*image).as_ref().starts_with(b"\x7fELF"));
        let missing = images
            .kernel_image(&kernel, "kernels/absent.cubin")
            .err()
            .expect("no such image");
        assert!(missing.to_string().contains("absent.cubin"), "{missing}");
    }
}
