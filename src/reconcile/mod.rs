//! Reconciliation of Triton kernel calls with their kernels, and translation
//! validation of what a lowering emits for them.
//!
//! A Triton call site says *what* it passes (named arguments bind a parameter by
//! name; positional ones fill [`crate::ir::TritonMeta::call_params`] in order);
//! the kernel's metadata says *how* it is launched (which parameters are baked
//! in through `constants` and the chosen `config`, the grid type, scratch
//! arguments). [`reconcile_call`] joins the two into one canonical
//! [`LaunchRecord`]: runtime arguments in kernel parameter order, the baked-in
//! values, trailing scratch pointers and the three grid expressions. It never
//! matches arguments to parameters by a positional zip over the whole
//! signature (the upstream misalignment of spec section 8, item 4).
//!
//! Wherever the call passes a value for a parameter that is baked in, the value
//! must equal the constant: [`crate::sym::prove_eq`] decides. A disproof is an
//! error naming the kernel, the parameter and the counterexample; an unknown
//! answer becomes a [`Guard`] that back ends and the interpreter check at run
//! time. Integer scalars are range-checked against their signature type the
//! same way (interval bounds from the symbols' ranges; a guard when they do not
//! settle it).
//!
//! [`insert_guards`] turns the guards of a [`CheckReport`] into `RuntimeAssert`
//! lines in front of their launches, which is how `wrapir lower` makes every
//! back end check them.
//!
//! [`check_program`] reconciles every Triton launch of a validated program in
//! parallel (proofs of identical pairs are shared through a cache) and returns a
//! [`CheckReport`] with one [`LaunchEntry`] per launch. [`check_program_against`]
//! additionally validates the launches a lowering emits ([`EmittedLaunch`],
//! reported through [`LaunchEmitter`]: [`PythonLaunches`], [`CppLaunches`]
//! (both dialects) and [`FxLaunches`]) with [`validate_emitted`].

mod cache;
mod check;
mod claims;
mod emitted;
mod evidence;
mod facts;
mod guards;
mod lowerings;
mod record;
mod shape;

pub use cache::ProofCache;
pub use check::{check_program, check_program_against, CheckReport, Failure, LaunchEntry, Totals, Verdict};
pub use emitted::{
    emitter, validate_emitted, CppLaunches, EmitError, EmittedLaunch, EmittedRange, EmittedScratch, EmittedValue,
    FxLaunches, LaunchEmitter, Mismatch, PythonLaunches, Validated,
};
pub use evidence::{Evidence, EvidenceVerdict, Guard};
pub use facts::program_facts;
pub use guards::{guarded, insert_guards, insert_guards_in, needs_guards, reconciled, GuardError};
pub use lowerings::{check_lowerings, LoweringVerdict, LoweringsReport};
pub use record::{
    reconcile_call, Baked, BakedSource, Error, ErrorKind, LaunchRecord, RuntimeArg, Scratch, ScratchKind,
};

use crate::sym::egraph::Limits;

/// Options of [`check_program`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Limits of each proof attempt (default: [`Limits::default`]; the CLI
    /// passes the `WRAPIR_PROVE_*` limits).
    pub limits: Limits,
    /// Reconcile launches on rayon's thread pool (default `true`); `false`
    /// runs them one after another (same results, same order).
    pub parallel: bool,
    /// Record how each claim was settled ([`LaunchRecord::evidence`],
    /// [`Validated::evidence`]: what `--explain` prints; default `true`).
    /// `false` records only verdicts and guards, which is much cheaper on
    /// large programs; the verdicts are the same.
    pub explain: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            limits: Limits::default(),
            parallel: true,
            explain: true,
        }
    }
}
