//! Writing a bundle as a one-file package ([`Bundle::write_package`]).

use super::package::{self, PackageMetadata, ToleranceRecord};
use super::{Bundle, BundleError, SharedBytes, Store, INPUTS, KERNELS, PROGRAM_JSON, PROGRAM_TEXT};
use crate::format::bundle_json::{BundleMeta, Tolerance};
use std::collections::BTreeSet;
use std::path::Path;

/// What [`Bundle::write_package`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct PackSummary {
    /// Bytes of the package.
    pub bytes: u64,
    /// The entries, in file order.
    pub entries: Vec<String>,
    /// The metadata in its table of contents.
    pub metadata: PackageMetadata,
}

impl Bundle {
    /// The entries a package of this bundle holds, in the order it stores
    /// them: the program, `bundle.json`, the safetensors files, then the
    /// kernel directory's files (sorted), any other kernel image the
    /// program loads, and the cuDNN plans ([`Bundle::cudnn_plans`]) as
    /// `cudnn-plans/<name>`. A package gives its own entries; a program file
    /// gives its program (`program.json` or `program.wir`) and the kernel
    /// images it names that exist next to it.
    pub fn package_entries(&self) -> Result<Vec<(String, SharedBytes)>, BundleError> {
        let mut out: Vec<(String, SharedBytes)> = Vec::new();
        match &self.store {
            Store::Package(p) => {
                return self.with_plan_entries(p.entries().iter().map(|(k, v)| (k.clone(), v.clone())).collect());
            }
            Store::File { .. } => {
                let entry = if self.source.trim_start().starts_with('{') {
                    PROGRAM_JSON
                } else {
                    PROGRAM_TEXT
                };
                out.push((entry.to_string(), SharedBytes::from(self.source.as_bytes().to_vec())));
            }
            Store::Directory(dir) => {
                for entry in [
                    PROGRAM_JSON,
                    BundleMeta::FILE,
                    INPUTS,
                    BundleMeta::EXPECTED,
                    BundleMeta::COMPILED,
                    BundleMeta::MUTATED,
                ] {
                    if let Some(bytes) = self.entry(entry)? {
                        out.push((entry.to_string(), bytes));
                    }
                }
                let kernels = dir.join(KERNELS);
                if kernels.is_dir() {
                    let mut names = Vec::new();
                    let listing = std::fs::read_dir(&kernels).map_err(|e| BundleError::io("listing", &kernels, e))?;
                    for item in listing {
                        let item = item.map_err(|e| BundleError::io("listing", &kernels, e))?;
                        let is_file = item
                            .file_type()
                            .map_err(|e| BundleError::io("listing", item.path(), e))?
                            .is_file();
                        if let (true, Some(name)) = (is_file, item.file_name().to_str()) {
                            names.push(format!("{KERNELS}/{name}"));
                        }
                    }
                    names.sort();
                    for name in names {
                        if let Some(bytes) = self.entry(&name)? {
                            out.push((name, bytes));
                        }
                    }
                }
            }
        }
        let images = self.kernel_images();
        for path in self.cubin_paths() {
            let path = super::kernels::normalize(path)?;
            if out.iter().any(|(name, _)| name == path) {
                continue;
            }
            match images.image(path) {
                Ok(bytes) => out.push((path.to_string(), bytes)),
                // A program file may name images it does not ship (it runs on meta and cpu).
                Err(BundleError::Io { .. }) if matches!(self.store, Store::File { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.with_plan_entries(out)
    }

    /// The table of contents' metadata for a package of this bundle: its
    /// versions and tolerances from `bundle.json`, its weights, and the
    /// architecture of every cubin the program loads that the package holds.
    pub fn package_metadata(&self, entries: &[(String, SharedBytes)]) -> Result<PackageMetadata, BundleError> {
        let record = |t: Option<Tolerance>| {
            t.map(|t| ToleranceRecord {
                rtol: t.rtol,
                atol: t.atol,
            })
        };
        let mut cubins = std::collections::BTreeMap::new();
        let mut sms = BTreeSet::new();
        for path in self.cubin_paths() {
            let path = super::kernels::normalize(path)?;
            let Some((_, image)) = entries.iter().find(|(name, _)| name == path) else {
                continue;
            };
            let arch = super::cubin_arch(image).map_err(|message| BundleError::Cubin {
                name: self.display(path),
                message,
            })?;
            sms.insert(arch.sm);
            cubins.insert(path.to_string(), arch.to_string());
        }
        let info = &self.meta;
        Ok(PackageMetadata {
            provenance: info.provenance.clone(),
            tolerance: record(self.meta.tolerance),
            compiled_tolerance: record(self.meta.compiled_tolerance),
            cubin_arch: sms.into_iter().collect(),
            cubins,
            weights: info.weights.clone(),
            cudnn_plans_for: Some(self.cudnn_plans()?)
                .filter(|plans| !plans.is_empty())
                .and_then(|plans| plans.made_for),
        })
    }

    /// Writes this bundle as a package to `out` (see [`package`]).
    pub fn write_package_to(&self, out: &mut dyn std::io::Write) -> Result<PackSummary, BundleError> {
        let entries = self.package_entries()?;
        let metadata = self.package_metadata(&entries)?;
        let bytes = package::write(out, &entries, &metadata).map_err(|message| BundleError::Package {
            path: self.path.clone(),
            message: format!("cannot write a package of it: {message}"),
        })?;
        Ok(PackSummary {
            bytes,
            entries: entries.into_iter().map(|(name, _)| name).collect(),
            metadata,
        })
    }

    /// Writes this bundle as a package to the file `path`: to a new file in
    /// a private directory beside it (0700, an unpredictable name, created
    /// exclusively: nothing is written where another user could have put a
    /// symlink), renamed over `path` when complete, so that a reader never
    /// sees a partial package and mappings of an older file stay intact.
    pub fn write_package(&self, path: &Path) -> Result<PackSummary, BundleError> {
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "package".into());
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // Removed on drop, with the partial file when writing fails.
        let staging = crate::exec::host::kernels::ScratchDir::new_in(parent, &format!(".{file_name}.partial"))
            .map_err(|e| BundleError::io("creating a private directory in", parent, e))?;
        let partial = staging.path().join(&file_name);
        let write = || -> Result<PackSummary, BundleError> {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&partial)
                .map_err(|e| BundleError::io("creating", &partial, e))?;
            let mut out = std::io::BufWriter::new(file);
            let summary = self.write_package_to(&mut out)?;
            let file = out
                .into_inner()
                .map_err(|e| BundleError::io("writing", &partial, e.into_error()))?;
            file.sync_all().map_err(|e| BundleError::io("writing", &partial, e))?;
            std::fs::rename(&partial, path).map_err(|e| BundleError::io("renaming into place", path, e))?;
            Ok(summary)
        };
        let result = write();
        drop(staging);
        result
    }
}
