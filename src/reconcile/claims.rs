//! The one policy for a claim a launch must satisfy, shared by the
//! reconciliation of canonical records ([`super::record`]) and the check of a
//! lowering's emitted launches ([`super::emitted`]): a proven claim is
//! evidence; a refuted one is the caller's error; one that can be neither
//! proven nor refuted becomes guarded evidence and a run-time [`Guard`].

use super::cache::ProofCache;
use super::evidence::{interval_text, Evidence, EvidenceVerdict, Guard};
use crate::sym::egraph::{Bound, Counterexample, Interval};
use crate::sym::{CmpOp, Outcome, SymExpr};

/// Where the policy writes: the evidence of every claim and the guards of
/// those that hold only when checked at run time.
pub(super) struct Ledger<'l> {
    /// The guards.
    pub(super) guards: &'l mut Vec<Guard>,
    /// The evidence.
    pub(super) evidence: &'l mut Vec<Evidence>,
    /// Record evidence (its claim and detail text). Without it only guards
    /// are written: the text of every claim costs more than most proofs.
    pub(super) explain: bool,
}

impl Ledger<'_> {
    fn push(&mut self, claim: impl FnOnce() -> String, verdict: EvidenceVerdict, detail: impl FnOnce() -> String) {
        if self.explain {
            self.evidence.push(Evidence {
                claim: claim(),
                verdict,
                detail: detail(),
            });
        }
    }
}

/// The claim `sides.0 == sides.1` (`claim()` describes it; the prover is
/// asked in that order). Proven: evidence, `Ok(true)`. Undecided: guarded
/// evidence with the prover's reason, and the guard `guard()` (its
/// condition and message) for `param`, `Ok(false)`. Refuted: the
/// counterexample.
pub(super) fn equal(
    cache: &ProofCache,
    ledger: &mut Ledger<'_>,
    (claim, param): (impl FnOnce() -> String, &str),
    sides: (&SymExpr, &SymExpr),
    guard: impl FnOnce() -> (SymExpr, String),
) -> Result<bool, Counterexample> {
    match &*cache.prove_shared(sides.0, sides.1) {
        Outcome::Proven(e) => {
            ledger.push(claim, EvidenceVerdict::Proven, || e.flat_string().to_string());
            Ok(true)
        }
        Outcome::Disproved(c) => Err(c.clone()),
        Outcome::Unknown(reason) => {
            let (cond, message) = guard();
            ledger.guards.push(Guard {
                param: param.to_string(),
                cond,
                message,
            });
            ledger.push(claim, EvidenceVerdict::Guarded, || reason.clone());
            Ok(false)
        }
    }
}

/// The claim `lo <= value <= hi` (`claim()` describes it), settled by the
/// value's bounds, which are those of an `i64` at most (evaluation is
/// checked 64-bit). Within them: evidence. Outside them entirely: `Err`
/// with the bounds as text. Else: guarded evidence and a guard for `param`
/// on the sides that may fail, its message `message(bounds text)`.
pub(super) fn in_range(
    cache: &ProofCache,
    ledger: &mut Ledger<'_>,
    (claim, param): (impl FnOnce() -> String, &str),
    value: &SymExpr,
    (lo, hi): (i128, i128),
    message: impl FnOnce(&str) -> String,
) -> Result<(), String> {
    let raw = cache.bounds(value);
    // The text only where it is shown: evidence, errors and guards.
    let range_text = || interval_text(raw);
    let range = Interval {
        lo: raw.lo.max(Bound::Fin(i64::MIN.into())),
        hi: raw.hi.min(Bound::Fin(i64::MAX.into())),
    };
    let lo_ok = range.lo >= Bound::Fin(lo);
    let hi_ok = range.hi <= Bound::Fin(hi);
    if lo_ok && hi_ok {
        ledger.push(claim, EvidenceVerdict::Proven, || {
            format!("{value} in {}", range_text())
        });
        return Ok(());
    }
    if range.hi < Bound::Fin(lo) || range.lo > Bound::Fin(hi) {
        return Err(range_text());
    }
    // A side that may fail has its bound inside the i64 range the value is
    // clamped to, so it converts (u64's maximum is never exceeded).
    let mut conds = Vec::new();
    if !lo_ok {
        if let Ok(l) = i64::try_from(lo) {
            conds.push(SymExpr::cmp(CmpOp::Ge, value.clone(), SymExpr::Int(l)));
        }
    }
    if !hi_ok {
        if let Ok(h) = i64::try_from(hi) {
            conds.push(SymExpr::cmp(CmpOp::Le, value.clone(), SymExpr::Int(h)));
        }
    }
    let cond = match conds.len() {
        0 => return Ok(()),
        1 => conds.remove(0),
        _ => SymExpr::And(conds),
    };
    let range_text = range_text();
    ledger.push(claim, EvidenceVerdict::Guarded, || {
        format!("{value} in {range_text}; guard `{cond}`")
    });
    ledger.guards.push(Guard {
        param: param.to_string(),
        message: message(&range_text),
        cond,
    });
    Ok(())
}
