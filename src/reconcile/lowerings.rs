//! Every Triton launch checked against several lowerings
//! ([`check_lowerings`]): the canonical reconciliation (`check.rs`), then
//! each lowering's emitted launches validated against those records
//! (`emitted/`), and how each lowering fared on each launch
//! ([`LoweringsReport`]); above both.

use super::check::{CheckReport, Failure, Verdict};
use super::emitted::LaunchEmitter;
use super::evidence::EvidenceVerdict;
use crate::ir::ProgramInfo;
use rayon::prelude::*;

/// Every Triton launch checked against several lowerings: the canonical
/// reconciliation, then one [`CheckReport`] per lowering.
#[derive(Clone, Debug)]
pub struct LoweringsReport {
    /// Reconciliation alone ([`super::check_program`]).
    pub base: CheckReport,
    /// One report per lowering, in the order the emitters were given.
    pub lowerings: Vec<CheckReport>,
}

/// How one lowering fared on one launch.
#[derive(Clone, Debug, PartialEq)]
pub enum LoweringVerdict {
    /// Every emitted value proven.
    Proven,
    /// Valid if these run-time guards hold.
    Guarded(Vec<String>),
    /// The lowering emits something else, or nothing, for the call.
    Failed(String),
    /// Not checked: the call itself does not reconcile, or the lowering
    /// could not report its launches.
    Unchecked,
}

/// Reconciles every Triton launch and validates the launches of each emitter.
/// Each launch is reconciled once; every lowering's launches are validated
/// against those records (so the lowerings' reports carry no records of
/// their own: an entry's record is the base report's entry at the same
/// index).
pub fn check_lowerings(
    info: &ProgramInfo<'_>,
    options: &super::Options,
    emitters: &[&dyn LaunchEmitter],
) -> LoweringsReport {
    let (base, lowerings) = super::check::check_lowerings(info, options, emitters);
    LoweringsReport { base, lowerings }
}

impl LoweringsReport {
    /// `true` when every launch reconciles and every lowering reported its
    /// launches and none differs from the canonical one.
    pub fn is_ok(&self) -> bool {
        self.base.is_ok()
            && self
                .lowerings
                .iter()
                .all(|r| r.is_ok() && r.entries.iter().all(|e| !e.validations.is_empty()))
    }

    /// [`LoweringsReport::is_ok`], except that lowerings which do not support
    /// the program ([`EmitError::unsupported`]) do not count against it:
    /// what `wrapir check` asks when no lowering is named.
    pub fn is_ok_where_supported(&self) -> bool {
        self.base.is_ok()
            && self.lowerings.iter().all(|r| match &r.emit_error {
                Some(e) => e.unsupported,
                None => r.is_ok() && r.entries.iter().all(|e| !e.validations.is_empty()),
            })
    }

    /// How lowering `lowering` (an index into [`LoweringsReport::lowerings`])
    /// fared on launch `entry` (an index into the base report's entries).
    pub fn verdict(&self, lowering: usize, entry: usize) -> LoweringVerdict {
        let Some(report) = self.lowerings.get(lowering) else {
            return LoweringVerdict::Unchecked;
        };
        let Some(e) = report.entries.get(entry) else {
            return LoweringVerdict::Unchecked;
        };
        if report.emit_error.is_some() {
            return LoweringVerdict::Unchecked;
        }
        match &e.verdict {
            Verdict::Failed(Failure::Emitted { mismatch, .. }) => return LoweringVerdict::Failed(mismatch.to_string()),
            Verdict::Failed(Failure::Reconcile(_)) => return LoweringVerdict::Unchecked,
            _ => {}
        }
        if e.validations.is_empty() {
            return LoweringVerdict::Failed("emits no launch for this call".into());
        }
        let guards: Vec<String> = e
            .validations
            .iter()
            .flat_map(|v| v.guards.iter().map(|g| g.message.clone()))
            .collect();
        if guards.is_empty() {
            LoweringVerdict::Proven
        } else {
            LoweringVerdict::Guarded(guards)
        }
    }

    /// One line per launch with its reconciliation verdict, then one line per
    /// lowering (`proven`, `guarded: <guards>`, `failed: <mismatch>`), then
    /// the totals; lowerings that could not report their launches come first:
    ///
    /// ```text
    /// proven   main:5 triton_poi_fused_add_0 (3 args)
    ///     python          proven (3 values, grid)
    ///     cpp             guarded: uint32_t grid_0: cannot prove (s0 + 127) // 128 in [0, 4294967295] (range [1, inf])
    ///     fx              proven (4 values, grid)
    /// 1 launch: 0 proven, 1 guarded, 0 failed (python, cpp, fx)
    /// ```
    ///
    /// A launch counts as proven when it reconciles without guards and every
    /// lowering is proven. With `explain`, each lowering's evidence follows it.
    pub fn render(&self, explain: bool) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for e in self.lowerings.iter().filter_map(|r| r.emit_error.as_ref()) {
            let _ = writeln!(out, "{}", e.report_line());
        }
        // Launches in chunks on rayon's threads, joined in order (the same
        // text as one pass: each launch's lines depend on it alone).
        const CHUNK: usize = 4096;
        let n = self.base.entries.len();
        let chunks: Vec<(String, [usize; 3])> = (0..n.div_ceil(CHUNK))
            .into_par_iter()
            .map(|c| {
                let mut text = String::new();
                let mut counts = [0usize; 3];
                for i in c * CHUNK..n.min((c + 1) * CHUNK) {
                    counts[self.render_launch(i, explain, &mut text)] += 1;
                }
                (text, counts)
            })
            .collect();
        out.reserve(chunks.iter().map(|(t, _)| t.len()).sum::<usize>() + 128);
        let [mut proven, mut guarded, mut failed] = [0usize; 3];
        for (text, [p, g, f]) in chunks {
            out.push_str(&text);
            proven += p;
            guarded += g;
            failed += f;
        }
        let names: Vec<&str> = self
            .lowerings
            .iter()
            .map(|r| r.lowering.as_deref().unwrap_or("?"))
            .collect();
        let _ = writeln!(
            out,
            "{n} launch{}: {proven} proven, {guarded} guarded, {failed} failed ({})",
            if n == 1 { "" } else { "es" },
            if names.is_empty() {
                "no lowerings".to_string()
            } else {
                names.join(", ")
            }
        );
        out
    }

    /// Appends launch `i`'s lines (its verdict, then one line per lowering,
    /// with `explain` each lowering's evidence) to `out`; returns 0, 1 or 2
    /// for a launch proven, guarded or failed overall.
    fn render_launch(&self, i: usize, explain: bool, out: &mut String) -> usize {
        use std::fmt::Write as _;
        let entry = &self.base.entries[i];
        let at = format!("{}:{} {}", entry.graph, entry.line, entry.kernel);
        let mut worst = match &entry.verdict {
            Verdict::Proven => 0,
            Verdict::Guarded(_) => 1,
            Verdict::Failed(_) => 2,
        };
        match &entry.verdict {
            Verdict::Proven => {
                let n = entry.record.as_ref().map_or(0, |r| r.args.len());
                let _ = writeln!(out, "proven   {at} ({n} arg{})", if n == 1 { "" } else { "s" });
            }
            Verdict::Guarded(reasons) => {
                let _ = writeln!(out, "guarded  {at}: {}", reasons.join("; "));
            }
            Verdict::Failed(f) => {
                let _ = writeln!(out, "failed   {at}: {f}");
            }
        }
        for (l, report) in self.lowerings.iter().enumerate() {
            let name = report.lowering.as_deref().unwrap_or("?");
            let verdict = self.verdict(l, i);
            let _ = write!(out, "    {name:<15} ");
            match &verdict {
                LoweringVerdict::Proven => {
                    let vs = report
                        .entries
                        .get(i)
                        .map(|e| e.validations.as_slice())
                        .unwrap_or_default();
                    let values: usize = vs.iter().map(|v| v.values_proven).sum();
                    let grid = if vs.iter().all(|v| v.grid_proven == Some(true)) {
                        ", grid"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        out,
                        "proven ({values} value{}{grid})",
                        if values == 1 { "" } else { "s" }
                    );
                }
                LoweringVerdict::Guarded(g) => {
                    out.push_str("guarded: ");
                    for (k, reason) in g.iter().enumerate() {
                        if k > 0 {
                            out.push_str("; ");
                        }
                        out.push_str(reason);
                    }
                    out.push('\n');
                }
                LoweringVerdict::Failed(m) => {
                    let _ = writeln!(out, "failed: {m}");
                }
                LoweringVerdict::Unchecked => out.push_str("not checked\n"),
            }
            worst = worst.max(match verdict {
                LoweringVerdict::Proven | LoweringVerdict::Unchecked => 0,
                LoweringVerdict::Guarded(_) => 1,
                LoweringVerdict::Failed(_) => 2,
            });
            if explain {
                if let Some(e) = report.entries.get(i) {
                    for ev in e.validations.iter().flat_map(|v| v.evidence.iter()) {
                        let word = match ev.verdict {
                            EvidenceVerdict::Proven => "proven",
                            EvidenceVerdict::Guarded => "unknown",
                        };
                        let _ = writeln!(out, "        {word} {}", ev.claim);
                        for line in ev.detail.lines() {
                            let _ = writeln!(out, "          {line}");
                        }
                    }
                }
            }
        }
        worst
    }
}
