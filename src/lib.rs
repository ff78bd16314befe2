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
//! (Without the feature the same code compiles, and `run_program` returns
//! an error saying the feature is missing.)
//!
//! A bundle (`fixtures/inductor/README.md`) holds `program.json`, the kernels'
//! cubins, `inputs.safetensors`, eager PyTorch's `expected.safetensors` and
//! `bundle.json` (tolerances, the math modes of the compile). Extern ops the
//! device does not implement are errors unless `host_fallback` is on:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use wrapir::bundle::Bundle;
//! use wrapir::exec::compare::{compare_leaves, output_leaves};
//! use wrapir::exec::cuda;
//!
//! // A bundle directory or a `.wirpkg` package made by `wrapir pack`.
//! let bundle = Bundle::open(std::path::Path::new("fixtures/inductor/bundles/softmax"))?;
//! let program = bundle.program();
//! let inputs = bundle.inputs()?.unwrap_or_default();
//! let expected = bundle.expected()?.unwrap_or_default();
//! let meta = bundle.meta();
//! let options = cuda::CudaOptions {
//!     host_fallback: false, // the default: an op with no device implementation is an error naming it
//!     // the CUDA libraries and the kernel cache where the environment says (as the CLI)
//!     paths: cuda::CudaPaths::from_env(),
//!     // kernel images from the bundle, math modes from bundle.json
//!     ..cuda::CudaOptions::for_bundle(bundle.kernel_images(), meta)
//! };
//! let out = cuda::run_program(program, options, &inputs)?;   // validates, lowers to FX, runs
//! // Tensors, and integer outputs where the bundle stores them (`int_outputs`).
//! let got = output_leaves(&out.outputs);
//! let comparison = compare_leaves(&got, &expected, meta.int_outputs.as_deref(), meta.tolerance);
//! assert!(comparison.is_ok(), "{:?}", comparison.first_error());
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
