//! The serialized cuDNN plans a package carries (`cudnn-plans/<name>`
//! entries, made on a GPU by `wrapir pack --cudnn-plans`), so that a process
//! on the same GPU, cuDNN and driver restores its convolutions' plans
//! instead of compiling their engines.

use super::{Bundle, BundleError, SharedBytes, Store, CUDNN_PLANS};
use crate::exec::model_source::CudnnPlans;

impl Bundle {
    /// This bundle with `plans` in place of the cuDNN plans it stores: what
    /// [`Bundle::cudnn_plans`] returns and a package written from it carries.
    pub fn with_cudnn_plans(mut self, plans: CudnnPlans) -> Bundle {
        self.cudnn_plans = Some(plans);
        self
    }

    /// The serialized cuDNN plans of the program's convolutions: those
    /// given by [`Bundle::with_cudnn_plans`], else a package's
    /// `cudnn-plans/` entries, with the GPU and library versions its
    /// metadata says they were made for; none for other bundles.
    pub fn cudnn_plans(&self) -> Result<CudnnPlans, BundleError> {
        if let Some(plans) = &self.cudnn_plans {
            return Ok(plans.clone());
        }
        let Store::Package(p) = &self.store else {
            return Ok(CudnnPlans::default());
        };
        let entries = stored_plan_entries(p.entries().iter())
            .map(|(name, bytes)| (name.to_string(), bytes.to_vec()))
            .collect::<Vec<_>>();
        let made_for = p.manifest().metadata.cudnn_plans_for.clone();
        Ok(CudnnPlans::new(made_for.filter(|_| !entries.is_empty()), entries))
    }

    /// `entries` with the plans of [`Bundle::cudnn_plans`] in place of any
    /// stored ones, each as `cudnn-plans/<name>`.
    pub(super) fn with_plan_entries(
        &self,
        mut entries: Vec<(String, SharedBytes)>,
    ) -> Result<Vec<(String, SharedBytes)>, BundleError> {
        let plans = self.cudnn_plans()?;
        entries.retain(|(name, _)| plan_name(name).is_none());
        for (name, json) in plans.iter() {
            entries.push((format!("{CUDNN_PLANS}/{name}"), SharedBytes::from(json.to_vec())));
        }
        Ok(entries)
    }
}

/// The plan name of package entry `entry` (`cudnn-plans/<name>`).
fn plan_name(entry: &str) -> Option<&str> {
    entry
        .strip_prefix(CUDNN_PLANS)
        .and_then(|rest| rest.strip_prefix('/'))
        .filter(|name| !name.is_empty() && !name.contains('/'))
}

/// The plans among a package's entries, by plan name.
fn stored_plan_entries<'a>(
    entries: impl Iterator<Item = (&'a String, &'a SharedBytes)>,
) -> impl Iterator<Item = (&'a str, &'a SharedBytes)> {
    entries.filter_map(|(entry, bytes)| plan_name(entry).map(|name| (name, bytes)))
}
