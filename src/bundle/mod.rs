//! Opening what users give us: a program file (`.wir` or `.json`), a bundle
//! directory exported from Inductor, or a one-file package (`.wirpkg`), all
//! through [`Bundle::open`].
//!
//! A bundle directory (`fixtures/inductor/README.md`) holds
//!
//! | entry | what |
//! |---|---|
//! | `program.json` | the program |
//! | `kernels/*.cubin`, `*.ptx`, `*.json` | the kernel images and their launch metadata |
//! | `inputs.safetensors` | the graph inputs (weights included, see `bundle.json`'s `weights`) |
//! | `expected.safetensors` | eager PyTorch's outputs |
//! | `compiled.safetensors` | Inductor's compiled outputs |
//! | `mutated.safetensors` | eager PyTorch's values of the inputs the program writes, after the call (`bundle.json`'s `mutated_inputs`) |
//! | `bundle.json` | versions, tolerances, math modes, weights ([`BundleMeta`]) |
//!
//! A package holds the same entries under the same names in one file
//! ([`package`], `docs/PACKAGE_FORMAT.md`); [`Bundle::write_package`] writes one.
//! A program file is a bundle with only the program; its kernel images are
//! looked up relative to its directory. Files and package entries are read
//! memory-mapped ([`SharedBytes`]) and safetensors are decoded in place,
//! within the [`Limits`] the bundle was opened with.
//!
//! This module, `capi`, `exec::cuda` and `exec::host::kernels` are the
//! library's only file I/O (ARCHITECTURE.md says what each does).
//!
//! ```
//! # fn main() -> Result<(), wrapir::bundle::BundleError> {
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/inductor/bundles/cat_mm");
//! let bundle = wrapir::bundle::Bundle::open(std::path::Path::new(dir))?;
//! let inputs = bundle.inputs()?.expect("the bundle has inputs");
//! let mut host = wrapir::exec::host::HostBackend::default();
//! let out = wrapir::exec::run_program(bundle.program(), &mut host, &inputs).expect("runs on the host");
//! let expected = bundle.expected()?.expect("the bundle has eager outputs");
//! let got = wrapir::exec::compare::output_leaves(&out.outputs);
//! let meta = bundle.meta();
//! let comparison = wrapir::exec::compare::compare_leaves(&got, &expected, meta.int_outputs.as_deref(), meta.tolerance);
//! assert!(comparison.is_ok());
//! # Ok(())
//! # }
//! ```

mod bytes;
pub mod conventions;
mod error;
pub mod judge;
mod kernels;
pub(crate) mod model;
mod pack;
pub mod package;
mod plans;
pub mod ranks;
mod source;

pub use crate::format::images::{cubin_arch, image_arch, CubinArch, ImageArch};
pub use bytes::SharedBytes;
pub use error::BundleError;
pub use kernels::KernelImages;
pub use pack::PackSummary;
pub use ranks::RankSet;

use crate::exec::safetensors::Safetensors;
use crate::exec::Tensor;
use crate::format::bundle_json::BundleMeta;
use crate::ir::{KernelBackend, Program};
use crate::Limits;
use indexmap::IndexMap;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The entry holding a bundle's program as JSON.
pub const PROGRAM_JSON: &str = "program.json";
/// The entry holding a package's program in the text form (packed from a `.wir` file).
pub const PROGRAM_TEXT: &str = "program.wir";
/// The entry holding the graph inputs.
pub const INPUTS: &str = "inputs.safetensors";
/// The directory of kernel images.
pub const KERNELS: &str = "kernels";
/// The directory (or entry prefix) of serialized cuDNN plans
/// (`cudnn-plans/cudnn-conv-<digest>.json`; see [`Bundle::cudnn_plans`]).
pub const CUDNN_PLANS: &str = "cudnn-plans";

/// What [`Bundle::open`] opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleKind {
    /// A `.wir` or `.json` program file (or program text given directly).
    ProgramFile,
    /// A bundle directory.
    Directory,
    /// A `.wirpkg` package.
    Package,
}

#[derive(Clone, Debug)]
enum Store {
    /// A program file: kernel images relative to `dir`, no other entries.
    File { dir: PathBuf },
    /// A bundle directory.
    Directory(PathBuf),
    /// A package.
    Package(Box<package::Package>),
}

/// An opened program file, bundle directory or package: the program (its
/// source text and the parsed [`Program`]), `bundle.json`'s metadata, the
/// kernel images and the tensors it carries.
#[derive(Clone, Debug)]
pub struct Bundle {
    path: PathBuf,
    kind: BundleKind,
    store: Store,
    name: String,
    source: Arc<str>,
    program: Program,
    meta: BundleMeta,
    limits: Limits,
    /// Plans given by [`Bundle::with_cudnn_plans`], in place of stored ones.
    cudnn_plans: Option<crate::exec::model_source::CudnnPlans>,
}

impl Bundle {
    /// Opens `path` within [`Limits::default`] (see [`Bundle::open_with_limits`]).
    pub fn open(path: &Path) -> Result<Bundle, BundleError> {
        Bundle::open_with_limits(path, &Limits::default())
    }

    /// Opens `path`: a directory is a bundle directory (it must hold
    /// `program.json`); a file that starts with the package magic is a
    /// package (its format version is checked); any other file is a program,
    /// JSON when its text starts with `{`, else the text form. The program is
    /// parsed within `limits`, and `bundle.json` read where there is one;
    /// tensors and kernel images are read when asked for.
    pub fn open_with_limits(path: &Path, limits: &Limits) -> Result<Bundle, BundleError> {
        if path.is_dir() {
            let program_path = path.join(PROGRAM_JSON);
            if !program_path.is_file() {
                return Err(BundleError::NotABundle {
                    path: path.to_path_buf(),
                    reason: format!("a directory without `{PROGRAM_JSON}` is not a bundle"),
                });
            }
            let store = Store::Directory(path.to_path_buf());
            return Bundle::from_store(path, BundleKind::Directory, store, limits);
        }
        let bytes = SharedBytes::map_within(path, limits.max_file_bytes)?;
        let is_package =
            bytes.starts_with(&package::MAGIC) || path.extension().is_some_and(|e| e == package::EXTENSION);
        if is_package {
            let store = Store::Package(Box::new(package::Package::parse(path, bytes)?));
            return Bundle::from_store(path, BundleKind::Package, store, limits);
        }
        let name = path.display().to_string();
        let text = std::str::from_utf8(&bytes).map_err(|error| BundleError::NotText {
            name: name.clone(),
            error,
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Bundle::from_parts(
            path,
            BundleKind::ProgramFile,
            Store::File { dir },
            name,
            text.into(),
            limits,
        )
    }

    /// A package held in memory (`name` names it in errors, as a path would;
    /// nothing is read from or written to a file): the package's format is
    /// checked and its program parsed within `limits`, as
    /// [`Bundle::open_with_limits`] does for a package file. Its kernel
    /// images are in memory ([`KernelImages`] without a directory).
    pub fn from_package_bytes(
        name: impl Into<String>,
        bytes: impl Into<SharedBytes>,
        limits: &Limits,
    ) -> Result<Bundle, BundleError> {
        let path = PathBuf::from(name.into());
        let bytes: SharedBytes = bytes.into();
        crate::limits::files::check_size(&path, bytes.len() as u64, limits.max_file_bytes)?;
        let store = Store::Package(Box::new(package::Package::parse(&path, bytes)?));
        Bundle::from_store(&path, BundleKind::Package, store, limits)
    }

    /// A bundle of program text given directly (`name` names it in errors,
    /// such as `<stdin>`); kernel images are looked up in the current directory.
    pub fn from_text(
        name: impl Into<String>,
        text: impl Into<Arc<str>>,
        limits: &Limits,
    ) -> Result<Bundle, BundleError> {
        let name = name.into();
        let store = Store::File {
            dir: PathBuf::from("."),
        };
        Bundle::from_parts(
            Path::new(&name.clone()),
            BundleKind::ProgramFile,
            store,
            name,
            text.into(),
            limits,
        )
    }

    fn from_store(path: &Path, kind: BundleKind, store: Store, limits: &Limits) -> Result<Bundle, BundleError> {
        let entry = [PROGRAM_JSON, PROGRAM_TEXT]
            .into_iter()
            .find(|e| store.has(e))
            .ok_or_else(|| BundleError::MissingEntry {
                bundle: path.display().to_string(),
                entry: PROGRAM_JSON.into(),
            })?;
        let name = store.display(entry);
        let bytes = store
            .entry(entry, limits.max_file_bytes)?
            .ok_or_else(|| BundleError::MissingEntry {
                bundle: path.display().to_string(),
                entry: entry.to_string(),
            })?;
        let text = std::str::from_utf8(&bytes).map_err(|error| BundleError::NotText {
            name: name.clone(),
            error,
        })?;
        let mut bundle = Bundle::from_parts(path, kind, store, name, text.into(), limits)?;
        if let Some(json) = bundle.entry(BundleMeta::FILE)? {
            let name = bundle.display(BundleMeta::FILE);
            let text = std::str::from_utf8(&json).map_err(|error| BundleError::NotText {
                name: name.clone(),
                error,
            })?;
            let meta_error = |message: String| BundleError::Meta {
                name: name.clone(),
                message,
            };
            bundle.meta = BundleMeta::from_json(text).map_err(|e| meta_error(e.0))?;
            // A mutated input is one of the program's graph inputs.
            let inputs = &bundle.program.main.inputs;
            for m in bundle.meta.mutated_inputs.iter().flatten() {
                if !inputs.iter().any(|i| i.name().as_str() == m) {
                    return Err(meta_error(format!(
                        "`mutated_inputs` names `{m}`, which is not a graph input of the program"
                    )));
                }
            }
        }
        Ok(bundle)
    }

    fn from_parts(
        path: &Path,
        kind: BundleKind,
        store: Store,
        name: String,
        source: Arc<str>,
        limits: &Limits,
    ) -> Result<Bundle, BundleError> {
        let program = parse_program(&name, &source, limits)?;
        Ok(Bundle {
            path: path.to_path_buf(),
            kind,
            store,
            name,
            source,
            program,
            meta: BundleMeta::default(),
            limits: *limits,
            cudnn_plans: None,
        })
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What it is.
    pub fn kind(&self) -> BundleKind {
        self.kind
    }

    /// The program's file or entry as shown to users
    /// (`bundles/softmax/program.json`, `model.wirpkg:program.json`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program's source text (JSON or the text form).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// `bundle.json`: tolerances, math modes, integer outputs, generator
    /// state, provenance, weights and the user's names of inputs and outputs
    /// ([`BundleMeta::default`] when there is no `bundle.json`).
    pub fn meta(&self) -> &BundleMeta {
        &self.meta
    }

    /// The graph inputs that are the model's weights (`bundle.json`'s `weights`).
    pub fn weights(&self) -> &[String] {
        &self.meta.weights
    }

    /// The limits it was opened with (tensors are read within them).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A package's table of contents (`None` for other kinds).
    pub fn manifest(&self) -> Option<&package::Manifest> {
        match &self.store {
            Store::Package(p) => Some(p.manifest()),
            _ => None,
        }
    }

    /// For a package, its file's format version (`None` for other kinds).
    pub fn package_version(&self) -> Option<u32> {
        match &self.store {
            Store::Package(p) => Some(p.version()),
            _ => None,
        }
    }

    /// For a package, whether its entries were verified against their
    /// checksums when it was opened: `Some(false)` for a version-1 package,
    /// which records none (say so to the user); `None` for other kinds.
    pub fn package_verified(&self) -> Option<bool> {
        match &self.store {
            Store::Package(p) => Some(p.verified()),
            _ => None,
        }
    }

    /// How entry `entry` is shown to users: its file, or `PACKAGE:ENTRY`.
    pub fn display(&self, entry: &str) -> String {
        self.store.display(entry)
    }

    /// Whether the bundle has entry `entry` (a program file has none but its kernel images).
    pub fn has(&self, entry: &str) -> bool {
        self.store.has(entry)
    }

    /// The bytes of entry `entry` (mapped), `None` when the bundle has none.
    pub fn entry(&self, entry: &str) -> Result<Option<SharedBytes>, BundleError> {
        self.store.entry(entry, self.limits.max_file_bytes)
    }

    /// The tensors and metadata of the safetensors entry `entry`, `None`
    /// when the bundle has none; an error names the entry and the tensor.
    pub fn tensors(&self, entry: &str) -> Result<Option<Safetensors>, BundleError> {
        let Some(bytes) = self.entry(entry)? else {
            return Ok(None);
        };
        crate::exec::safetensors::parse_with_limits(&bytes, &self.limits)
            .map(Some)
            .map_err(|error| BundleError::Safetensors {
                name: self.display(entry),
                error,
            })
    }

    /// The graph inputs (`inputs.safetensors`), weights included.
    pub fn inputs(&self) -> Result<Option<IndexMap<String, Tensor>>, BundleError> {
        Ok(self.tensors(INPUTS)?.map(|f| f.tensors))
    }

    /// Eager PyTorch's outputs (`expected.safetensors`).
    pub fn expected(&self) -> Result<Option<IndexMap<String, Tensor>>, BundleError> {
        Ok(self.tensors(BundleMeta::EXPECTED)?.map(|f| f.tensors))
    }

    /// Eager PyTorch's values after the call of the graph inputs the
    /// program writes (`mutated.safetensors`, by graph input name; see
    /// [`BundleMeta::mutated_inputs`]).
    pub fn mutated(&self) -> Result<Option<IndexMap<String, Tensor>>, BundleError> {
        Ok(self.tensors(BundleMeta::MUTATED)?.map(|f| f.tensors))
    }

    /// Inductor's compiled outputs (`compiled.safetensors`).
    pub fn compiled(&self) -> Result<Option<IndexMap<String, Tensor>>, BundleError> {
        Ok(self.tensors(BundleMeta::COMPILED)?.map(|f| f.tensors))
    }

    /// Where the CUDA backend finds the kernel images
    /// (`CudaOptions::for_bundle(bundle.kernel_images(), bundle.meta())`).
    pub fn kernel_images(&self) -> KernelImages {
        match &self.store {
            Store::File { dir } | Store::Directory(dir) => KernelImages::Directory {
                dir: dir.clone(),
                max_file_bytes: self.limits.max_file_bytes,
            },
            Store::Package(p) => {
                let images: BTreeMap<String, SharedBytes> =
                    p.entries().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                KernelImages::InMemory(Arc::new(images))
            }
        }
    }

    /// The kernel image `path`: a path relative to the bundle as the
    /// program's kernel metadata names it (`kernels/k.cubin`), or a bare
    /// file name under `kernels/` (`k.cubin`).
    pub fn kernel_image(&self, path: &str) -> Result<SharedBytes, BundleError> {
        let images = self.kernel_images();
        match images.image(path) {
            Err(e) if !path.contains('/') => images.image(&format!("{KERNELS}/{path}")).map_err(|_| e),
            other => other,
        }
    }

    /// The `cubin` paths of the program's Triton kernels, distinct, in order.
    pub fn cubin_paths(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.program
            .kernels
            .values()
            .filter_map(|k| match &k.backend {
                KernelBackend::Triton(meta) => meta.cubin.as_deref(),
                _ => None,
            })
            .filter(|p| seen.insert(*p))
            .collect()
    }

    /// The architecture of every cubin the program loads, by path, from each
    /// image's ELF header; an error names the image.
    pub fn cubins(&self) -> Result<BTreeMap<String, CubinArch>, BundleError> {
        let images = self.kernel_images();
        let mut out = BTreeMap::new();
        for path in self.cubin_paths() {
            let image = images.image(path)?;
            let arch = cubin_arch(&image).map_err(|message| BundleError::Cubin {
                name: images.describe(path),
                message,
            })?;
            out.insert(path.to_string(), arch);
        }
        Ok(out)
    }

    /// Every kernel of the program's kernel table with the image the CUDA
    /// backend would load for it, read and checked
    /// ([`KernelImages::kernel_image`]), in table order: a Triton kernel
    /// whose image is absent, unreadable, not a cubin or PTX, or truncated,
    /// a Triton kernel without a `cubin`, and a kernel of another backend
    /// are each an error naming the kernel (and the image).
    pub fn kernel_image_archs(&self) -> Vec<(String, Result<ImageArch, BundleError>)> {
        let images = self.kernel_images();
        self.program
            .kernels
            .iter()
            .map(|(name, def)| {
                let no_image = |reason: String| BundleError::NoKernelImage {
                    kernel: name.to_string(),
                    reason,
                };
                let arch = match &def.backend {
                    KernelBackend::Triton(meta) => match meta.cubin.as_deref() {
                        Some(path) => images.kernel_image(name.as_str(), path).map(|(_, arch)| arch),
                        None => Err(no_image(
                            "its metadata names no `cubin`, and the cuda backend does not compile Triton source".into(),
                        )),
                    },
                    other => Err(no_image(format!(
                        "it is a {} kernel, and the cuda backend launches Triton kernels only",
                        other.keyword()
                    ))),
                };
                (name.to_string(), arch)
            })
            .collect()
    }

    /// The SM numbers of the cubins the program loads (90 for `sm_90`), so
    /// that a caller can check the present GPU can run them; empty when the
    /// program has none.
    pub fn cubin_arch(&self) -> Result<BTreeSet<u32>, BundleError> {
        Ok(self.cubins()?.values().map(|a| a.sm).collect())
    }
}

impl Store {
    fn display(&self, entry: &str) -> String {
        match self {
            Store::File { dir } | Store::Directory(dir) => dir.join(entry).display().to_string(),
            Store::Package(p) => format!("{}:{entry}", p.path().display()),
        }
    }

    fn has(&self, entry: &str) -> bool {
        match self {
            Store::File { .. } => false,
            Store::Directory(dir) => kernels::is_plain_relative(entry) && dir.join(entry).is_file(),
            Store::Package(p) => p.entry(entry).is_some(),
        }
    }

    /// The bytes of `entry`; a file holds at most `max_file_bytes`.
    fn entry(&self, entry: &str, max_file_bytes: u64) -> Result<Option<SharedBytes>, BundleError> {
        if !self.has(entry) {
            return Ok(None);
        }
        match self {
            Store::File { .. } => Ok(None),
            Store::Directory(dir) => SharedBytes::map_within(&dir.join(entry), max_file_bytes).map(Some),
            Store::Package(p) => Ok(p.entry(entry).cloned()),
        }
    }
}

/// Parses program text: JSON when it starts with `{` or its name ends in
/// `.json` (an empty `.json` file is a JSON error, not a missing `.wir`
/// header), else the text form within `limits`. A bundle's `bundle.json`
/// given as the program is an error that says so and names the directory
/// to give instead.
fn parse_program(name: &str, text: &Arc<str>, limits: &Limits) -> Result<Program, BundleError> {
    if crate::text::is_json_program(name, text) {
        Program::from_json(text).map_err(|error| {
            if let Some(reason) = bundle_metadata_given(name, text) {
                return BundleError::NotABundle {
                    path: PathBuf::from(name),
                    reason,
                };
            }
            BundleError::Json {
                name: name.to_string(),
                error,
            }
        })
    } else {
        crate::text::parse_with_limits(text, limits).map_err(|error| BundleError::Parse {
            name: name.to_string(),
            text: Arc::clone(text),
            error,
        })
    }
}

/// When a program that does not read is a bundle's metadata (a file named
/// `bundle.json`, or a JSON object without `format_version` holding
/// `bundle.json`'s fields): the sentence saying so.
fn bundle_metadata_given(name: &str, text: &str) -> Option<String> {
    let named = Path::new(name).file_name().is_some_and(|f| f == BundleMeta::FILE);
    let fields = || -> Option<bool> {
        let json: serde_json::Value = serde_json::from_str(text).ok()?;
        let obj = json.as_object()?;
        let meta_fields = ["graph_inputs", "tolerance", "torch", "expected", "graph_outputs"];
        Some(!obj.contains_key("format_version") && meta_fields.iter().any(|f| obj.contains_key(*f)))
    };
    if !named && fields() != Some(true) {
        return None;
    }
    let dir = Path::new(name)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| ".".to_string(), |d| d.display().to_string());
    Some(format!(
        "this is a bundle's metadata (`{}`), not a program: pass the bundle directory (`{dir}`) instead",
        BundleMeta::FILE
    ))
}

/// Reads a safetensors file (memory-mapped) within `limits`; an error names
/// the file and the tensor.
pub fn read_safetensors(path: &Path, limits: &Limits) -> Result<Safetensors, BundleError> {
    let bytes = SharedBytes::map_within(path, limits.max_file_bytes)?;
    crate::exec::safetensors::parse_with_limits(&bytes, limits).map_err(|error| BundleError::Safetensors {
        name: path.display().to_string(),
        error,
    })
}
