//! Translation validation: what a lowering emits for each launch, proven equal
//! to the canonical [`LaunchRecord`].

use super::cache::ProofCache;
use super::claims::{self, Ledger};
use super::evidence::{Evidence, EvidenceVerdict, Guard};
use super::record::{describe, LaunchRecord, ScratchKind};
use crate::fx::{Arg, Op, Placeholder, SymOp, Val};
use crate::ir::{
    ArgValue, BufName, ConstValue, Graph, GraphName, KernelBackend, KernelName, Line, MultiOutput, ProgramInfo,
    MAIN_GRAPH,
};
use crate::lower::launches::{PrintedArg, PrintedLaunch, ScratchPointer};
use crate::sym::egraph::Counterexample;
use crate::sym::{CmpOp, SymExpr};

mod cpp;
mod fx;
mod python;

pub use cpp::CppLaunches;
pub use fx::FxLaunches;
pub use python::PythonLaunches;

/// A value a lowering passes for one kernel parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum EmittedValue {
    /// A tensor, by buffer name.
    Buffer(BufName),
    /// A symbolic or literal integer (or boolean) expression.
    Expr(SymExpr),
    /// Any other literal (`None`, floats, strings, booleans).
    Const(ConstValue),
}

/// One kernel launch as a lowering emits it.
#[derive(Clone, Debug, PartialEq)]
pub struct EmittedLaunch {
    /// The kernel.
    pub kernel: KernelName,
    /// The graph of the call it lowers ([`MAIN_GRAPH`] for the main graph).
    pub graph: GraphName,
    /// The call's line index in that graph.
    pub line: usize,
    /// Parameter name -> value, for every parameter the lowering passes.
    pub args: Vec<(String, EmittedValue)>,
    /// Grid x, y, z, when the lowering computes the grid itself.
    pub grid: Option<[SymExpr; 3]>,
    /// The trailing scratch pointers, when the lowering passes them itself
    /// (`None`: left to the launcher).
    pub scratch: Option<Vec<EmittedScratch>>,
    /// Ranges emitted values must lie in for the emitted code to compute what
    /// `grid` and `scratch` say (C's truncating `/`, `uint32_t` grid variables).
    pub ranges: Vec<EmittedRange>,
}

/// A scratch pointer a lowering passes.
#[derive(Clone, Debug, PartialEq)]
pub struct EmittedScratch {
    /// Global or profile scratch.
    pub kind: ScratchKind,
    /// Bytes allocated; `None` for a null pointer.
    pub bytes: Option<SymExpr>,
}

/// An emitted integer value that must lie in `[lo, hi]`.
#[derive(Clone, Debug, PartialEq)]
pub struct EmittedRange {
    /// What the value is (`uint32_t grid_0`).
    pub what: String,
    /// The value.
    pub value: SymExpr,
    /// Smallest allowed value.
    pub lo: i64,
    /// Largest allowed value.
    pub hi: i64,
}

/// A lowering that can report the launches it emits (`Sync`: `check`
/// works out several lowerings' launches at once).
pub trait LaunchEmitter: Sync {
    /// The lowering's name in reports (`fx`).
    fn name(&self) -> &str;
    /// Every Triton launch the lowering emits for the program, each naming the
    /// call (graph, line) it lowers.
    fn emitted_launches(&self, info: &ProgramInfo<'_>) -> Result<Vec<EmittedLaunch>, EmitError>;
}

/// The launch emitter of a back end: what `wrapir check` translation-validates
/// for each [`crate::lower::Target`].
pub fn emitter(target: crate::lower::Target) -> Box<dyn LaunchEmitter> {
    use crate::lower::Target;
    match target {
        Target::Python => Box::new(PythonLaunches::default()),
        Target::Cpp | Target::CppStandalone => Box::new(CppLaunches {
            dialect: target.cpp_dialect().unwrap_or_default(),
        }),
        Target::Fx => Box::new(FxLaunches::default()),
    }
}

/// The launches a text back end prints with `options`, each read back by
/// `launch`; `unsupported` says which of the back end's errors mean it does
/// not support the program ([`EmitError::unsupported`]).
fn printed_launches<O: crate::lower::TextLowering>(
    lowering: &str,
    info: &ProgramInfo<'_>,
    options: &O,
    unsupported: impl Fn(&O::Error) -> bool,
    launch: impl Fn(PrintedLaunch) -> Result<EmittedLaunch, String>,
) -> Result<Vec<EmittedLaunch>, EmitError>
where
    O::Error: std::fmt::Display,
{
    // Only the launches are wanted: the text goes nowhere (a 1M-line
    // program's C++ file is a few hundred megabytes, four lowerings at once).
    let printed = options
        .write_recording_launches_to(info, &mut Discard)
        .map_err(|e| EmitError::new(lowering, e.to_string(), unsupported(&e)))?;
    printed
        .into_iter()
        .map(|p| launch(p).map_err(|message| EmitError::new(lowering, message, false)))
        .collect()
}

/// A text sink that keeps nothing.
struct Discard;

impl std::fmt::Write for Discard {
    fn write_str(&mut self, _: &str) -> std::fmt::Result {
        Ok(())
    }
}

/// A lowering could not report its launches.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{lowering}: {message}")]
pub struct EmitError {
    /// The lowering.
    pub lowering: String,
    /// What went wrong.
    pub message: String,
    /// The lowering does not support something the (valid) program does: a
    /// limit of that back end, not a defect of the program (a C++ standalone
    /// wrapper of a CPU program's extern ops, a host kernel in Python).
    pub unsupported: bool,
}

impl EmitError {
    /// An error of `lowering`; `unsupported`: the lowering does not support
    /// the program (see [`EmitError::unsupported`]).
    pub(crate) fn new(lowering: &str, message: String, unsupported: bool) -> EmitError {
        EmitError {
            lowering: lowering.to_string(),
            message,
            unsupported,
        }
    }

    /// How `wrapir check` reports it: `unsupported <lowering>: ...` when the
    /// lowering does not support the program, else `error    <lowering>: ...`.
    pub fn report_line(&self) -> String {
        match self.unsupported {
            true => format!("unsupported {self}"),
            false => format!("error    {self}"),
        }
    }
}

/// An emitted launch that differs from the canonical one.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Mismatch {
    /// The lowering passes a parameter the kernel does not have.
    #[error("passes `{param}`, which is not a parameter of the launch")]
    UnknownParam {
        /// The parameter.
        param: String,
    },
    /// The lowering omits a runtime argument.
    #[error("omits runtime argument `{param}`")]
    Missing {
        /// The parameter.
        param: String,
    },
    /// A value differs.
    #[error(
        "passes {param} = {found} but the launch needs {expected}{}",
        counterexample.as_ref().map(|c| format!(" (counterexample: {c}: {} vs {})", c.rhs, c.lhs)).unwrap_or_default()
    )]
    Value {
        /// The parameter, or `grid[i]`.
        param: String,
        /// The canonical value.
        expected: String,
        /// The emitted value.
        found: String,
        /// Where they differ, when the prover found an assignment.
        counterexample: Option<Counterexample>,
    },
    /// The emitted scratch pointers differ from the kernel's.
    #[error("passes scratch pointers {found} but the kernel takes {expected}")]
    Scratch {
        /// The kernel's scratch pointers.
        expected: String,
        /// The emitted ones.
        found: String,
    },
    /// An emitted value always lies outside the range its emitted code needs.
    #[error("{what} = {value} lies in {range}, outside [{lo}, {hi}]")]
    OutOfRange {
        /// What the value is.
        what: String,
        /// The value.
        value: SymExpr,
        /// Its range under the program's facts.
        range: String,
        /// Smallest allowed value.
        lo: i64,
        /// Largest allowed value.
        hi: i64,
    },
    /// The emitted launch names another kernel than the call.
    #[error("launches `{found}` for a call of `{expected}`")]
    Kernel {
        /// The called kernel.
        expected: KernelName,
        /// The emitted kernel.
        found: KernelName,
    },
}

/// What [`validate_emitted`] established.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Validated {
    /// Emitted values shown equal to the canonical ones.
    pub values_proven: usize,
    /// `Some(true)` when all three grid expressions were proven equal,
    /// `Some(false)` when some are only guarded, `None` when none were emitted.
    pub grid_proven: Option<bool>,
    /// Equalities that could not be settled: checked at run time.
    pub guards: Vec<Guard>,
    /// How each claim was settled (empty when checked without
    /// [`super::Options::explain`]).
    pub evidence: Vec<Evidence>,
}

/// Proves every emitted argument and grid expression equal to the canonical
/// record's. Buffers match by name, or when both names share storage and
/// layout (a lowering may keep the old name of a reused buffer). Runtime
/// arguments must all be emitted; baked-in values may be left out (C++ strips
/// them), but when emitted they must match.
pub fn validate_emitted(
    info: &ProgramInfo<'_>,
    record: &LaunchRecord,
    emitted: &EmittedLaunch,
    cache: &ProofCache,
) -> Result<Validated, Mismatch> {
    let same = |a: &BufName, b: &BufName| {
        a == b
            || info
                .program()
                .graph(Some(&record.graph).filter(|g| g.as_str() != MAIN_GRAPH))
                .is_some_and(|g| SameTensors::of(g).same(a, b))
    };
    validate_emitted_with(record, emitted, cache, same, true)
}

/// [`validate_emitted`] with the rule for buffer names that denote one
/// tensor given ([`SameTensors::same`] of the record's graph); `explain`:
/// record [`Validated::evidence`].
pub(super) fn validate_emitted_with(
    record: &LaunchRecord,
    emitted: &EmittedLaunch,
    cache: &ProofCache,
    same_buffer: impl Fn(&BufName, &BufName) -> bool,
    explain: bool,
) -> Result<Validated, Mismatch> {
    if emitted.kernel != record.kernel {
        return Err(Mismatch::Kernel {
            expected: record.kernel.clone(),
            found: emitted.kernel.clone(),
        });
    }
    let mut out = Validated::default();
    for (param, value) in &emitted.args {
        let Some(canonical) = record.param_value_ref(param) else {
            return Err(Mismatch::UnknownParam { param: param.clone() });
        };
        let differs = |counterexample| Mismatch::Value {
            param: param.clone(),
            expected: describe(canonical.as_ref()),
            found: describe_emitted(value),
            counterexample,
        };
        match (canonical.as_ref(), value) {
            (ArgValue::Buffer(a), EmittedValue::Buffer(b)) => {
                if !same_buffer(a, b) {
                    return Err(differs(None));
                }
                out.values_proven += 1;
            }
            (ArgValue::Expr(a), EmittedValue::Expr(b)) => {
                if prove(cache, param, a, b, &mut out, explain)? {
                    out.values_proven += 1;
                }
            }
            (ArgValue::Bool(a), EmittedValue::Expr(SymExpr::Int(b))) if i64::from(*a) == *b => out.values_proven += 1,
            (ArgValue::Float(a), EmittedValue::Expr(SymExpr::Int(b))) if *a == *b as f64 => out.values_proven += 1,
            (c, EmittedValue::Const(k)) if const_matches(c, k) => out.values_proven += 1,
            _ => return Err(differs(None)),
        }
    }
    for a in &record.args {
        if !emitted.args.iter().any(|(p, _)| *p == a.param) {
            return Err(Mismatch::Missing { param: a.param.clone() });
        }
    }
    if let Some(grid) = &emitted.grid {
        let mut all = true;
        for (i, (want, got)) in record.grid.iter().zip(grid.iter()).enumerate() {
            all &= prove(cache, &format!("grid[{i}]"), want, got, &mut out, explain)?;
        }
        out.grid_proven = Some(all);
    }
    if let Some(scratch) = &emitted.scratch {
        let kinds = |k: &mut dyn Iterator<Item = ScratchKind>| k.map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
        let want = kinds(&mut record.scratch.iter().map(|s| s.kind));
        let got = kinds(&mut scratch.iter().map(|s| s.kind));
        let text = |s: String| {
            if s.is_empty() {
                "none".to_string()
            } else {
                format!("[{s}]")
            }
        };
        if want != got {
            return Err(Mismatch::Scratch {
                expected: text(want),
                found: text(got),
            });
        }
        for (canonical, e) in record.scratch.iter().zip(scratch) {
            let param = format!("{} scratch bytes", e.kind.as_str());
            match (&canonical.total_bytes, &e.bytes) {
                (None, None) => out.values_proven += 1,
                (Some(a), Some(b)) => {
                    if prove(cache, &param, a, b, &mut out, explain)? {
                        out.values_proven += 1;
                    }
                }
                (a, b) => {
                    let show = |x: &Option<SymExpr>| {
                        x.as_ref()
                            .map_or_else(|| "a null pointer".to_string(), |x| x.to_string())
                    };
                    return Err(Mismatch::Value {
                        param,
                        expected: show(a),
                        found: show(b),
                        counterexample: None,
                    });
                }
            }
        }
    }
    for r in &emitted.ranges {
        check_range(cache, r, &mut out, explain)?;
    }
    Ok(out)
}

/// Settles `lo <= value <= hi` by the value's range under the facts: proven,
/// refuted (a mismatch), or a guard.
fn check_range(cache: &ProofCache, r: &EmittedRange, out: &mut Validated, explain: bool) -> Result<(), Mismatch> {
    let claim = || format!("emitted {}: {} in [{}, {}]", r.what, r.value, r.lo, r.hi);
    let mut ledger = Ledger {
        guards: &mut out.guards,
        evidence: &mut out.evidence,
        explain,
    };
    let bounds = (i128::from(r.lo), i128::from(r.hi));
    claims::in_range(cache, &mut ledger, (claim, &r.what), &r.value, bounds, |range_text| {
        format!(
            "{}: cannot prove {} in [{}, {}] (range {range_text})",
            r.what, r.value, r.lo, r.hi
        )
    })
    .map_err(|range| Mismatch::OutOfRange {
        what: r.what.clone(),
        value: r.value.clone(),
        range,
        lo: r.lo,
        hi: r.hi,
    })
}

/// Proves `canonical == emitted`; `Ok(false)` when only guarded. An
/// emitted expression identical to the canonical one is the same
/// computation, whatever the facts: proven without the prover (most
/// emitted values are, each launch over its own symbols, so the proof
/// cache rarely has them).
fn prove(
    cache: &ProofCache,
    param: &str,
    canonical: &SymExpr,
    emitted: &SymExpr,
    out: &mut Validated,
    explain: bool,
) -> Result<bool, Mismatch> {
    let claim = || format!("emitted {param}: {emitted} == {canonical}");
    if canonical == emitted {
        if explain {
            out.evidence.push(Evidence {
                claim: claim(),
                verdict: EvidenceVerdict::Proven,
                detail: "the emitted expression is the canonical one".to_string(),
            });
        }
        return Ok(true);
    }
    let mut ledger = Ledger {
        guards: &mut out.guards,
        evidence: &mut out.evidence,
        explain,
    };
    claims::equal(cache, &mut ledger, (claim, param), (canonical, emitted), || {
        (
            SymExpr::cmp(CmpOp::Eq, emitted.clone(), canonical.clone()),
            format!("{param}: cannot prove emitted {emitted} == {canonical}"),
        )
    })
    .map_err(|c| Mismatch::Value {
        param: param.to_string(),
        expected: canonical.to_string(),
        found: emitted.to_string(),
        counterexample: Some(c),
    })
}

fn const_matches(canonical: &ArgValue, k: &ConstValue) -> bool {
    match (canonical, k) {
        (ArgValue::None, ConstValue::None) => true,
        (ArgValue::Bool(a), ConstValue::Bool(b)) => a == b,
        (ArgValue::Float(a), ConstValue::Float(b)) => a == b || (a.is_nan() && b.is_nan()),
        (ArgValue::Str(a), ConstValue::Str(b)) => a == b,
        (ArgValue::Expr(SymExpr::Int(a)), ConstValue::Int(b)) => a == b,
        (ArgValue::Expr(SymExpr::Int(a)), ConstValue::Float(b)) => *a as f64 == *b,
        _ => false,
    }
}

/// Which buffer names of one graph denote the same tensor: equal names, or
/// names a lowering may merge: `get b = a` without indices, and
/// `reuse a -> b` where both have the same layout (the new name is the old
/// tensor). Worked out in one pass over the graph, so that each question
/// costs a lookup (asking by scanning the graph made `check` quadratic in
/// the launches that keep an old name).
pub(crate) struct SameTensors<'p> {
    /// Each merged name's first name.
    root: rustc_hash::FxHashMap<&'p BufName, &'p BufName>,
}

impl<'p> SameTensors<'p> {
    /// The merged names of `graph` (a validated graph: a name is defined
    /// once, before it is used, so each root is final when it is recorded).
    pub(crate) fn of(graph: &'p Graph) -> SameTensors<'p> {
        let mut root: rustc_hash::FxHashMap<&'p BufName, &'p BufName> = Default::default();
        for line in &graph.lines {
            let (name, merged_with) = match line {
                Line::MultiOutput(MultiOutput {
                    result,
                    source,
                    indices,
                }) if indices.is_empty() => (result, source),
                Line::Reuse { old, new, .. }
                    if graph.layout(old).is_some() && graph.layout(old) == graph.layout(new) =>
                {
                    (new, old)
                }
                _ => continue,
            };
            let r = root.get(merged_with).copied().unwrap_or(merged_with);
            if r != name {
                root.insert(name, r);
            }
        }
        SameTensors { root }
    }

    /// `true` when `a` and `b` denote the same tensor.
    pub(crate) fn same(&self, a: &BufName, b: &BufName) -> bool {
        let root = |x| self.root.get(x).copied().unwrap_or(x);
        a == b || root(a) == root(b)
    }
}

fn describe_emitted(v: &EmittedValue) -> String {
    match v {
        EmittedValue::Buffer(b) => format!("buffer `{b}`"),
        EmittedValue::Expr(e) => e.to_string(),
        EmittedValue::Const(c) => c.to_string(),
    }
}

/// A printed value as an emitted kernel argument.
pub(super) fn emitted_value(v: ArgValue) -> Result<EmittedValue, String> {
    Ok(match v {
        ArgValue::Buffer(b) => EmittedValue::Buffer(b),
        ArgValue::Expr(e) => EmittedValue::Expr(e),
        ArgValue::Float(f) => EmittedValue::Const(ConstValue::Float(f)),
        ArgValue::Bool(b) => EmittedValue::Const(ConstValue::Bool(b)),
        ArgValue::None => EmittedValue::Const(ConstValue::None),
        ArgValue::Str(s) => EmittedValue::Const(ConstValue::Str(s)),
        other @ (ArgValue::DType(_) | ArgValue::Device(_) | ArgValue::List(_)) => {
            return Err(format!("{} is not a kernel argument value", describe(&other)))
        }
    })
}
