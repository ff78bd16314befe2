//! How a reconciliation's claims were settled ([`Evidence`]) and the
//! run-time checks it leaves ([`Guard`]): what the claims (`claims.rs`)
//! produce and the launch records (`record.rs`) carry, below both.

use crate::sym::egraph::{Bound, Interval};
use crate::sym::SymExpr;

/// A condition the back ends and the interpreter must check before the launch,
/// because reconciliation could neither prove nor refute it.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    /// The parameter concerned.
    pub param: String,
    /// The boolean condition that must hold.
    pub cond: SymExpr,
    /// What it means (`xnumel: cannot prove s0 == 1`).
    pub message: String,
}

/// How one claim of a reconciliation was settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvidenceVerdict {
    /// Proven (by the prover or by ranges).
    Proven,
    /// Neither proven nor refuted: guarded at run time.
    Guarded,
}

/// One settled claim, for `--explain`-style output.
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    /// What was claimed (`xnumel: s0 == 1`, `n_elements: s0 fits i32`).
    pub claim: String,
    /// How it was settled.
    pub verdict: EvidenceVerdict,
    /// The proof (one step per line), the ranges used, or why it is unknown.
    pub detail: String,
}

/// An interval as the evidence prints it (`[0, inf]`).
pub(super) fn interval_text(i: Interval) -> String {
    let b = |x: Bound| match x {
        Bound::NegInf => "-inf".to_string(),
        Bound::PosInf => "inf".to_string(),
        Bound::Fin(v) => v.to_string(),
    };
    format!("[{}, {}]", b(i.lo), b(i.hi))
}
