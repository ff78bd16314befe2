//! # wrapir
//!
//! PyTorch Inductor's *wrapper code* as typed Rust data.
//!
//! ```text
//!   .json / .wir ─parse─▶ ir::Program ─validate─▶ ir::ProgramInfo ─┬─▶ lower::{python, cpp, fx}
//!                                                                  ├─▶ reconcile (launch proofs)
//!                                                                  └─▶ exec::interp over exec::{meta, host, cuda}
//! ```
//!
//! * [`ir`]: the typed Wrapper IR, its builder and validator.
//! * [`sym`]: symbolic size expressions: parser, Python and C++ printers, checked
//!   evaluation, and the equality-saturation prover ([`sym::egraph`]).
//! * [`text`]: the `.wir` text form (printer and parser that round-trip).
//! * [`lower`]: back ends that turn a validated program into wrapper code.
//! * [`reconcile`]: Triton launches matched to their kernels by name, proved, and
//!   the lowerings' emitted launches validated against them.
//! * [`fx`]: the FX graph: its nodes, names and torch.fx-style printer.
//! * [`exec`]: the FX interpreter ([`exec::interp`]) and the execution backends.
//! * [`bundle`]: opening a program file, a bundle directory exported from
//!   Inductor or a one-file `.wirpkg` package ([`bundle::Bundle::open`]), and
//!   writing packages.
//! * `capi` (feature `cuda`): the runtime library's C ABI (`wrapir_rt.h`).
//!
//! ## Lowering a program
//!
//! ```
//! let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/nonzero.wir")).unwrap();
//! let program = wrapir::text::parse(&text).unwrap();
//! let info = wrapir::ir::validate(&program).unwrap();
//! let python = wrapir::lower::python::write_string(&info, &Default::default()).unwrap();
//! assert!(python.contains("u0 = buf1.size(0)"));
//! let report = wrapir::reconcile::check_program(&info, &Default::default());
//! assert_eq!(report.totals.failed, 0);
//! ```
//!
//! ## Running an exported Inductor bundle on a GPU (feature `cuda`)
//!
//! (Without the feature the same code compiles, and loading on a GPU
//! returns an error saying the feature is missing.)
//!
//! A bundle (`fixtures/inductor/README.md`) holds `program.json`, the kernels'
//! cubins, `inputs.safetensors`, eager PyTorch's `expected.safetensors` and
//! `bundle.json` (tolerances, the math modes of the compile):
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use wrapir::bundle::judge::{judge_run, After, JudgeOptions, References};
//! use wrapir::bundle::Bundle;
//! use wrapir::runtime::{Device, Model, ModelOptions};
//!
//! // A bundle directory or a `.wirpkg` package made by `wrapir pack`.
//! let path = std::path::Path::new("fixtures/inductor/bundles/softmax");
//! let bundle = Bundle::open(path)?;
//! let model = Model::load(path, &ModelOptions { device: Device::Cuda(0), ..ModelOptions::default() })?;
//! // The inputs each call supplies (the weights are the model's own).
//! let stored = bundle.inputs()?.unwrap_or_default();
//! let inputs = model.input_names().iter().filter_map(|n| Some((n.clone(), stored.get(n)?.clone()))).collect();
//! let outputs = model.run(&inputs)?;
//! // Against eager PyTorch's and Inductor's outputs, at the bundle's
//! // tolerances (integer outputs too, where the bundle stores them).
//! let references = References::of(&bundle, &JudgeOptions { on_cuda: true, ..JudgeOptions::default() })?;
//! let judgement = judge_run(&bundle, &references, &outputs, After::Device)?;
//! assert!(judgement.first_error().is_none(), "{:?}", judgement.first_error());
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
// docs.rs (and `RUSTDOCFLAGS="--cfg docsrs"` on nightly) marks what needs a feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Every `unsafe` block says why it is sound (also set in Cargo.toml's `[lints]`).
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod bench;
pub mod bundle;
#[cfg(feature = "cuda")]
pub mod capi;
pub mod exec;
pub mod format;
pub mod fx;
pub mod ir;
pub mod limits;
pub mod lower;
pub mod reconcile;
pub mod runtime;
#[cfg(feature = "insta")]
pub mod snapshot;
pub mod sym;
pub mod text;

pub use limits::{Limit, LimitExceeded, Limits};

/// The crate features this build has (`cli`, `cuda`, `insta`), in that order.
pub const FEATURES: &[&str] = &[
    #[cfg(feature = "cli")]
    "cli",
    #[cfg(feature = "cuda")]
    "cuda",
    #[cfg(feature = "insta")]
    "insta",
];
