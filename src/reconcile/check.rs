//! Whole-program checking: every Triton launch reconciled, in parallel.

use super::cache::ProofCache;
use super::emitted::{
    validate_emitted_with, EmitError, EmittedLaunch, LaunchEmitter, Mismatch, SameTensors, Validated,
};
use super::evidence::EvidenceVerdict;
use super::facts::program_facts;
use super::record::{describe, reconcile_call_with, Error, ErrorKind, LaunchRecord};
use super::Options;
use crate::ir::{GraphName, KernelBackend, KernelCall, KernelName, Line, ProgramInfo};
use rayon::prelude::*;
use std::fmt::Write as _;

/// The outcome of one launch.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Everything proven: no run-time guard needed.
    Proven,
    /// Valid if the guards hold at run time; their messages.
    Guarded(Vec<String>),
    /// The call cannot be launched as written (or the lowering emits something else).
    Failed(Failure),
}

/// Why a launch failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Failure {
    /// Reconciling the call with its kernel failed.
    #[error("{}", .0.kind)]
    Reconcile(Error),
    /// The lowering's emitted launch differs from the canonical one.
    #[error("{lowering} {mismatch}")]
    Emitted {
        /// The lowering.
        lowering: String,
        /// How it differs.
        mismatch: Mismatch,
    },
}

/// One Triton launch of the program.
#[derive(Clone, Debug)]
pub struct LaunchEntry {
    /// The graph of the call.
    pub graph: GraphName,
    /// The call's line index, from 0.
    pub line: usize,
    /// The kernel.
    pub kernel: KernelName,
    /// The canonical launch, when reconciliation succeeded.
    pub record: Option<LaunchRecord>,
    /// What validating the lowering's emitted launches established, if any
    /// were given (one per emitted launch of this call).
    pub validations: Vec<Validated>,
    /// The verdict.
    pub verdict: Verdict,
}

/// Counts over a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Triton launches checked.
    pub launches: usize,
    /// Launches proven.
    pub proven: usize,
    /// Launches valid under run-time guards.
    pub guarded: usize,
    /// Launches that failed.
    pub failed: usize,
    /// Proofs computed.
    pub proofs: usize,
    /// Proofs answered from the cache.
    pub cached: usize,
}

/// The result of [`check_program`]: one entry per Triton launch, in program
/// order (main graph first, then subgraphs in table order).
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// One entry per launch.
    pub entries: Vec<LaunchEntry>,
    /// Counts.
    pub totals: Totals,
    /// The lowering whose emitted launches were validated, if any.
    pub lowering: Option<String>,
    /// Set when that lowering could not report its launches (nothing of it was validated).
    pub emit_error: Option<EmitError>,
}

impl CheckReport {
    /// `true` when no launch failed.
    pub fn is_ok(&self) -> bool {
        self.totals.failed == 0 && self.emit_error.is_none()
    }

    /// One line per launch, then the totals:
    ///
    /// ```text
    /// proven   main:5 triton_poi_fused_add_0 (3 args, grid (((s0 + 1023) // 1024), 1, 1))
    /// guarded  main:7 add_kernel_0: n_elements: cannot prove s0 fits i32 (range [2, inf])
    /// failed   main:9 k: constant BLOCK_SIZE = 16 but the call passes 32
    /// 3 launches: 1 proven, 1 guarded, 1 failed; 4 proofs (1 from cache)
    /// ```
    ///
    /// With `explain`, each launch is followed by its arguments, baked-in
    /// values, grid, and every claim with its proof, ranges or reason.
    pub fn render(&self, explain: bool) -> String {
        let mut out = String::new();
        if let Some(e) = &self.emit_error {
            let _ = writeln!(out, "{}", e.report_line());
        }
        for entry in &self.entries {
            let at = format!("{}:{} {}", entry.graph, entry.line, entry.kernel);
            match &entry.verdict {
                Verdict::Proven => {
                    let _ = writeln!(out, "proven   {at} ({})", summary(entry));
                }
                Verdict::Guarded(reasons) => {
                    let _ = writeln!(out, "guarded  {at}: {}", reasons.join("; "));
                }
                Verdict::Failed(f) => {
                    let _ = writeln!(out, "failed   {at}: {f}");
                }
            }
            if explain {
                explain_entry(&mut out, entry);
            }
        }
        let t = &self.totals;
        let _ = writeln!(
            out,
            "{} launch{}: {} proven, {} guarded, {} failed; {} proof{} ({} from cache)",
            t.launches,
            if t.launches == 1 { "" } else { "es" },
            t.proven,
            t.guarded,
            t.failed,
            t.proofs + t.cached,
            if t.proofs + t.cached == 1 { "" } else { "s" },
            t.cached
        );
        out
    }
}

fn summary(entry: &LaunchEntry) -> String {
    let Some(r) = &entry.record else { return String::new() };
    let n = r.args.len();
    let mut s = format!("{n} arg{}", if n == 1 { "" } else { "s" });
    if !entry.validations.is_empty() {
        let values: usize = entry.validations.iter().map(|v| v.values_proven).sum();
        let _ = write!(
            s,
            ", {values} emitted value{} proven",
            if values == 1 { "" } else { "s" }
        );
        if entry.validations.iter().all(|v| v.grid_proven == Some(true)) {
            s.push_str(", grid proven");
        }
    } else {
        let _ = write!(s, ", grid ({}, {}, {})", r.grid[0], r.grid[1], r.grid[2]);
    }
    s
}

fn explain_entry(out: &mut String, entry: &LaunchEntry) {
    let indent = |out: &mut String, text: &str, pad: &str| {
        for l in text.lines() {
            let _ = writeln!(out, "{pad}{l}");
        }
    };
    if let Some(r) = &entry.record {
        let args: Vec<String> = r
            .args
            .iter()
            .map(|a| format!("{}: {} = {}", a.param, a.ty, describe(&a.value)))
            .collect();
        let _ = writeln!(
            out,
            "    args: {}",
            if args.is_empty() {
                "none".to_string()
            } else {
                args.join(", ")
            }
        );
        if !r.baked.is_empty() {
            let baked: Vec<String> = r.baked.iter().map(|b| format!("{} = {}", b.param, b.value)).collect();
            let _ = writeln!(out, "    baked: {}", baked.join(", "));
        }
        for s in &r.scratch {
            match &s.total_bytes {
                Some(t) => {
                    let _ = writeln!(
                        out,
                        "    {} scratch: {} bytes per CTA, {t} bytes",
                        s.kind.as_str(),
                        s.bytes_per_cta
                    );
                }
                None => {
                    let _ = writeln!(out, "    {} scratch: null pointer", s.kind.as_str());
                }
            }
        }
        let _ = writeln!(out, "    grid: ({}, {}, {})", r.grid[0], r.grid[1], r.grid[2]);
        for g in &r.guards {
            let _ = writeln!(out, "    guard: {} ({})", g.cond, g.message);
        }
        let evidence = r
            .evidence
            .iter()
            .chain(entry.validations.iter().flat_map(|v| v.evidence.iter()));
        for e in evidence {
            let word = match e.verdict {
                EvidenceVerdict::Proven => "proven",
                EvidenceVerdict::Guarded => "unknown",
            };
            let _ = writeln!(out, "    {word} {}", e.claim);
            indent(out, &e.detail, "      ");
        }
        for v in &entry.validations {
            for g in &v.guards {
                let _ = writeln!(out, "    guard: {} ({})", g.cond, g.message);
            }
        }
    }
    if let Verdict::Failed(f) = &entry.verdict {
        let cx = match f {
            Failure::Reconcile(Error {
                kind:
                    ErrorKind::ConstantMismatch {
                        counterexample: Some(c),
                        passed,
                        constant,
                        ..
                    },
                ..
            }) if !c.assignment.is_empty() => Some(format!(
                "where {c}: the call passes {} = {}, the constant is {constant}",
                passed, c.lhs
            )),
            Failure::Emitted {
                mismatch:
                    Mismatch::Value {
                        counterexample: Some(c),
                        expected,
                        found,
                        ..
                    },
                ..
            } if !c.assignment.is_empty() => Some(format!(
                "where {c}: emitted {found} = {}, canonical {expected} = {}",
                c.rhs, c.lhs
            )),
            _ => None,
        };
        if let Some(cx) = cx {
            let _ = writeln!(out, "    counterexample {cx}");
        }
    }
}

/// Reconciles every Triton launch of the program (see the module docs).
pub fn check_program(info: &ProgramInfo<'_>, options: &Options) -> CheckReport {
    let cache = ProofCache::new(program_facts(info.program()), options.limits.clone()).explaining(options.explain);
    let entries = reconcile_all(info, &triton_calls(info), &cache, options);
    report(entries, &cache, (0, 0), None, None)
}

/// [`check_program`], and validates the launches `emitter` emits against
/// the canonical records ([`super::validate_emitted`]).
pub fn check_program_against(info: &ProgramInfo<'_>, options: &Options, emitter: &dyn LaunchEmitter) -> CheckReport {
    let cache = ProofCache::new(program_facts(info.program()), options.limits.clone()).explaining(options.explain);
    let mut base = reconcile_all(info, &triton_calls(info), &cache, options);
    let emitted = emitter.emitted_launches(info);
    let (mut entries, emit_error) = validate_all(info, &base, emitter.name(), emitted, &cache, options);
    // This report is the only one: each entry keeps its canonical record.
    for (entry, b) in entries.iter_mut().zip(base.iter_mut()) {
        entry.record = b.record.take();
    }
    report(entries, &cache, (0, 0), Some(emitter.name()), emit_error)
}

/// Every Triton launch reconciled once, then each emitter's launches
/// validated against those records (what [`super::check_lowerings`]
/// returns: the base report and one per emitter). The lowerings' launches
/// are worked out while the calls reconcile; all reports share one proof
/// cache.
pub(super) fn check_lowerings(
    info: &ProgramInfo<'_>,
    options: &Options,
    emitters: &[&dyn LaunchEmitter],
) -> (CheckReport, Vec<CheckReport>) {
    let cache = ProofCache::new(program_facts(info.program()), options.limits.clone()).explaining(options.explain);
    let calls = triton_calls(info);
    let emit = || -> Vec<Result<Vec<EmittedLaunch>, EmitError>> {
        if options.parallel {
            emitters.par_iter().map(|e| e.emitted_launches(info)).collect()
        } else {
            emitters.iter().map(|e| e.emitted_launches(info)).collect()
        }
    };
    let (base, emitted) = if options.parallel {
        rayon::join(|| reconcile_all(info, &calls, &cache, options), emit)
    } else {
        (reconcile_all(info, &calls, &cache, options), emit())
    };
    drop(calls);
    let base = report(base, &cache, (0, 0), None, None);
    let mut lowerings = Vec::with_capacity(emitters.len());
    for (e, launches) in emitters.iter().zip(emitted) {
        let before = (cache.misses(), cache.hits());
        let (entries, emit_error) = validate_all(info, &base.entries, e.name(), launches, &cache, options);
        lowerings.push(report(entries, &cache, before, Some(e.name()), emit_error));
    }
    (base, lowerings)
}

/// A report of `entries`; its proof counts are the cache's since `before`
/// (misses, hits).
fn report(
    entries: Vec<LaunchEntry>,
    cache: &ProofCache,
    before: (usize, usize),
    lowering: Option<&str>,
    emit_error: Option<EmitError>,
) -> CheckReport {
    let mut totals = Totals {
        launches: entries.len(),
        proofs: cache.misses().saturating_sub(before.0),
        cached: cache.hits().saturating_sub(before.1),
        ..Totals::default()
    };
    for e in &entries {
        match e.verdict {
            Verdict::Proven => totals.proven += 1,
            Verdict::Guarded(_) => totals.guarded += 1,
            Verdict::Failed(_) => totals.failed += 1,
        }
    }
    CheckReport {
        entries,
        totals,
        lowering: lowering.map(str::to_string),
        emit_error,
    }
}

/// The Triton calls of the program (graph, line index, call): the main
/// graph first, then subgraphs in table order.
fn triton_calls<'p>(info: &ProgramInfo<'p>) -> Vec<(GraphName, usize, &'p KernelCall)> {
    let program = info.program();
    let mut calls: Vec<(GraphName, usize, &KernelCall)> = Vec::new();
    for gi in info.graphs() {
        let name = gi.name();
        let graph = if name.as_str() == crate::ir::MAIN_GRAPH {
            Some(&program.main)
        } else {
            program.subgraphs.get(name)
        };
        let Some(graph) = graph else { continue };
        for (i, line) in graph.lines.iter().enumerate() {
            if let Line::KernelCall(c) = line {
                if matches!(
                    program.kernels.get(&c.kernel).map(|d| &d.backend),
                    Some(KernelBackend::Triton(_))
                ) {
                    calls.push((name.clone(), i, c));
                }
            }
        }
    }
    calls
}

/// Each call reconciled: an entry with its canonical record (guarded by the
/// record's guards), or failed.
fn reconcile_all(
    info: &ProgramInfo<'_>,
    calls: &[(GraphName, usize, &KernelCall)],
    cache: &ProofCache,
    options: &Options,
) -> Vec<LaunchEntry> {
    let one = |(graph, line, call): &(GraphName, usize, &KernelCall)| -> LaunchEntry {
        let mut entry = LaunchEntry {
            graph: graph.clone(),
            line: *line,
            kernel: call.kernel.clone(),
            record: None,
            validations: Vec::new(),
            verdict: Verdict::Proven,
        };
        match reconcile_call_with(info.program(), graph, *line, call, cache, options.explain) {
            Ok(record) => {
                if !record.guards.is_empty() {
                    entry.verdict = Verdict::Guarded(record.guards.iter().map(|g| g.message.clone()).collect());
                }
                entry.record = Some(record);
            }
            Err(e) => entry.verdict = Verdict::Failed(Failure::Reconcile(e)),
        }
        entry
    };
    if options.parallel {
        calls.par_iter().map(one).collect()
    } else {
        calls.iter().map(one).collect()
    }
}

/// One lowering's entries: each launch of `base` (reconciled entries, in
/// order) validated against the launches lowering `lowering` emits for its
/// call. The entries carry no record (the canonical record is `base`'s
/// entry at the same index); where the launches could not be worked out,
/// the error, and entries with the reconciliation's verdicts.
fn validate_all(
    info: &ProgramInfo<'_>,
    base: &[LaunchEntry],
    lowering: &str,
    emitted: Result<Vec<EmittedLaunch>, EmitError>,
    cache: &ProofCache,
    options: &Options,
) -> (Vec<LaunchEntry>, Option<EmitError>) {
    let program = info.program();
    let (emitted, emit_error) = match emitted {
        Ok(v) => (v, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    // The emitted launches of each call, found in one pass (a scan of every
    // emitted launch per call made `check` quadratic in the launches).
    let mut by_call: rustc_hash::FxHashMap<(&GraphName, usize), Vec<&EmittedLaunch>> = rustc_hash::FxHashMap::default();
    for e in &emitted {
        by_call.entry((&e.graph, e.line)).or_default().push(e);
    }
    // Which names denote one tensor, per graph with emitted launches.
    let mut same_tensors: rustc_hash::FxHashMap<&GraphName, SameTensors<'_>> = rustc_hash::FxHashMap::default();
    for (graph, _) in by_call.keys() {
        if !same_tensors.contains_key(graph) {
            let g = program.graph(Some(*graph).filter(|g| g.as_str() != crate::ir::MAIN_GRAPH));
            if let Some(g) = g {
                same_tensors.insert(graph, SameTensors::of(g));
            }
        }
    }
    let one = |b: &LaunchEntry| -> LaunchEntry {
        let mut entry = LaunchEntry {
            graph: b.graph.clone(),
            line: b.line,
            kernel: b.kernel.clone(),
            record: None,
            validations: Vec::new(),
            verdict: b.verdict.clone(),
        };
        let Some(record) = &b.record else { return entry };
        if emit_error.is_some() {
            return entry;
        }
        let same_tensors = same_tensors.get(&b.graph);
        let same =
            |a: &crate::ir::BufName, x: &crate::ir::BufName| a == x || same_tensors.is_some_and(|t| t.same(a, x));
        let mine = by_call.get(&(&b.graph, b.line)).map_or(&[][..], Vec::as_slice);
        let mut reasons: Vec<String> = Vec::new();
        for e in mine {
            match validate_emitted_with(record, e, cache, same, options.explain) {
                Ok(v) => {
                    reasons.extend(v.guards.iter().map(|g| format!("{lowering} {}", g.message)));
                    entry.validations.push(v);
                }
                Err(mismatch) => {
                    entry.verdict = Verdict::Failed(Failure::Emitted {
                        lowering: lowering.to_string(),
                        mismatch,
                    });
                    return entry;
                }
            }
        }
        if !reasons.is_empty() {
            let mut all: Vec<String> = record.guards.iter().map(|g| g.message.clone()).collect();
            all.extend(reasons);
            entry.verdict = Verdict::Guarded(all);
        }
        entry
    };
    let entries = if options.parallel {
        base.par_iter().map(one).collect()
    } else {
        base.iter().map(one).collect()
    };
    drop((by_call, same_tensors));
    // Freed on rayon's threads: one launch at a time, a million-line
    // program's emitted launches take a second to free.
    if options.parallel {
        emitted.into_par_iter().for_each(drop);
    }
    (entries, emit_error)
}
