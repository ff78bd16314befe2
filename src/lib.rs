//! # wrapir
//!
//! PyTorch Inductor's *wrapper code* as typed Rust data.
//!
//! ```text
//!   .json / .wir ─parse─▶ ir::Program ─validate─▶ ir::ProgramInfo ─┬─▶ lower::{python, cpp, fx}
//!                                                                  ├─▶ reconcile (launch proofs)
//!                                                                  └─▶ fx::interp over exec::{meta, host, cuda}
//! ```
//!
//! * [`ir`]: the typed Wrapper IR, its builder and validator.
//! * [`sym`]: symbolic size expressions: parser, Python and C++ printers, checked
//!   evaluation, and the equality-saturation prover ([`sym::egraph`]).
//! * [`text`]: the `.wir` text form (printer and parser that round-trip).
//! * [`lower`]: back ends that turn a validated program into wrapper code.
//! * [`reconcile`]: Triton launches matched to their kernels by name, proved, and
//!   the lowerings' emitted launches validated against them.
//! * [`fx`] and [`exec`]: the FX graph, its interpreter and the execution backends.
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
//! A bundle (`fixtures/inductor/README.md`) holds `program.json`, the kernels'
//! cubins, `inputs.safetensors`, eager PyTorch's `expected.safetensors` and
//! `bundle.json` (tolerances, the math modes of the compile). Extern ops the
//! device does not implement are errors unless `host_fallback` is on:
//!
//! ```no_run
//! # #[cfg(feature = "cuda")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use wrapir::exec::compare::{compare_leaves, output_leaves, BundleMeta};
//! use wrapir::exec::{cuda, safetensors};
//!
//! let dir = std::path::Path::new("fixtures/inductor/bundles/softmax");
//! let program = wrapir::ir::Program::from_json(&std::fs::read_to_string(dir.join("program.json"))?)?;
//! let inputs = safetensors::parse(&std::fs::read(dir.join("inputs.safetensors"))?)?;
//! let expected = safetensors::parse(&std::fs::read(dir.join(BundleMeta::EXPECTED))?)?;
//! let meta = BundleMeta::from_json(&std::fs::read_to_string(dir.join(BundleMeta::FILE))?)?;
//! let options = cuda::CudaOptions {
//!     host_fallback: false, // the default: an op with no device implementation is an error naming it
//!     ..cuda::CudaOptions::for_bundle(dir, &meta) // kernels from `dir`, math modes from bundle.json
//! };
//! let out = cuda::run_program(&program, options, &inputs)?;   // validates, lowers to FX, runs
//! // Tensors, and integer outputs where the bundle stores them (`int_outputs`).
//! let got = output_leaves(&out.outputs);
//! let comparison = compare_leaves(&got, &expected, meta.int_outputs.as_deref(), meta.tolerance);
//! assert!(comparison.is_ok(), "{:?}", comparison.first_error());
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "cuda"))]
//! # fn main() {}
//! ```
#![warn(missing_docs)]

pub mod exec;
pub mod fx;
pub mod ir;
pub mod limits;
pub mod lower;
pub mod reconcile;
#[cfg(feature = "insta")]
pub mod snapshot;
pub mod sym;
pub mod text;

pub use limits::{Limit, LimitExceeded, Limits};
