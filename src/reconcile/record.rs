//! The canonical launch record of one Triton call, and how it is derived.

use super::cache::ProofCache;
use super::claims::{self, Ledger};
use super::evidence::{Evidence, Guard};
use crate::ir::{
    ArgValue, BufName, BufferKind, ConstValue, DType, GraphName, KernelBackend, KernelCall, KernelName, Program,
    SigType, TritonMeta, MAIN_GRAPH,
};
use crate::sym::egraph::Counterexample;
use crate::sym::{CmpOp, SymExpr};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::fmt;

/// A runtime argument of the launch, in kernel parameter order.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeArg {
    /// The kernel parameter.
    pub param: String,
    /// Its signature type.
    pub ty: SigType,
    /// The value the call passes (a buffer for pointers; an expression, float
    /// or boolean for scalars; a 0-d buffer may stand for its value).
    pub value: ArgValue,
}

/// Where a baked-in value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BakedSource {
    /// `triton_meta["constants"]` (equal-to-1 sizes, None args, explicit constexprs).
    Constants,
    /// The chosen config's kwargs (`XBLOCK`, `R0_BLOCK`, ...).
    Config,
    /// A constexpr parameter neither of those fixes, passed by the call as a literal.
    Call,
}

/// A value compiled into the kernel rather than passed at launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Baked {
    /// The parameter (or config key).
    pub param: String,
    /// The value.
    pub value: ConstValue,
    /// Where it comes from.
    pub source: BakedSource,
    /// What the call site passed for it, if anything (checked equal to `value`).
    pub passed: Option<ArgValue>,
}

/// Which scratch buffer a trailing pointer argument is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchKind {
    /// `global_scratch`.
    Global,
    /// `profile_scratch`.
    Profile,
}

impl ScratchKind {
    /// `global` or `profile`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScratchKind::Global => "global",
            ScratchKind::Profile => "profile",
        }
    }
}

/// A trailing scratch pointer argument (after every real argument).
#[derive(Clone, Debug, PartialEq)]
pub struct Scratch {
    /// Global or profile scratch.
    pub kind: ScratchKind,
    /// Bytes per CTA, as the kernel metadata says.
    pub bytes_per_cta: u64,
    /// Bytes to allocate (`bytes_per_cta * grid_x * grid_y * grid_z`); `None`
    /// when `bytes_per_cta` is 0 and a null pointer is passed.
    pub total_bytes: Option<SymExpr>,
}

/// The canonical launch of one Triton call.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRecord {
    /// The kernel.
    pub kernel: KernelName,
    /// The graph of the call ([`MAIN_GRAPH`] for the main graph).
    pub graph: GraphName,
    /// The call's index in the graph's lines, from 0.
    pub line: usize,
    /// Runtime arguments in kernel parameter order
    /// ([`TritonMeta::runtime_params`]).
    pub args: Vec<RuntimeArg>,
    /// Baked-in values: signature parameters in order, then config keys and
    /// constants that the signature does not list.
    pub baked: Vec<Baked>,
    /// Extra launcher argument values (FixedGrid: `_grid_0.._grid_2`), in order.
    pub launcher_args: Vec<(String, SymExpr)>,
    /// Trailing scratch pointers: global, then profile, each when the kernel takes it.
    pub scratch: Vec<Scratch>,
    /// Grid x, y, z.
    pub grid: [SymExpr; 3],
    /// Warps per block.
    pub num_warps: u32,
    /// Dynamic shared memory in bytes.
    pub shared_mem: u32,
    /// Conditions to check at run time before launching.
    pub guards: Vec<Guard>,
    /// How each claim was settled (empty when checked without
    /// [`super::Options::explain`]).
    pub evidence: Vec<Evidence>,
}

impl LaunchRecord {
    /// The canonical value of a parameter: a runtime argument, a baked-in value
    /// (as an argument value) or an extra launcher argument.
    pub fn param_value(&self, param: &str) -> Option<ArgValue> {
        self.param_value_ref(param).map(std::borrow::Cow::into_owned)
    }

    /// [`LaunchRecord::param_value`], borrowing a runtime argument's value
    /// (translation validation asks for every emitted parameter).
    pub(super) fn param_value_ref(&self, param: &str) -> Option<std::borrow::Cow<'_, ArgValue>> {
        if let Some(a) = self.args.iter().find(|a| a.param == param) {
            return Some(std::borrow::Cow::Borrowed(&a.value));
        }
        if let Some(b) = self.baked.iter().find(|b| b.param == param) {
            return Some(std::borrow::Cow::Owned(const_to_arg(&b.value)));
        }
        self.launcher_args
            .iter()
            .find(|(n, _)| n == param)
            .map(|(_, e)| std::borrow::Cow::Owned(ArgValue::Expr(e.clone())))
    }
}

/// Why a call could not be reconciled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("graph {graph}, line {line}: kernel `{kernel}`: {kind}")]
pub struct Error {
    /// The kernel.
    pub kernel: KernelName,
    /// The graph of the call.
    pub graph: GraphName,
    /// The call's line index.
    pub line: usize,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// What is wrong with a call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ErrorKind {
    /// The kernel is not in the kernel table.
    #[error("kernel is not defined in the program")]
    UnknownKernel,
    /// The kernel is not a Triton kernel.
    #[error("not a Triton kernel ({backend})")]
    NotTriton {
        /// The backend keyword.
        backend: &'static str,
    },
    /// The call's arguments do not bind to the kernel's parameters
    /// (`TritonMeta::bind_args`, the one binding walk).
    #[error(transparent)]
    Args(#[from] crate::ir::ArgBindError),
    /// A runtime parameter or launcher argument the call does not bind.
    #[error("no argument for parameter `{param}`")]
    MissingArgument {
        /// The parameter.
        param: String,
    },
    /// A pointer parameter given something other than a tensor buffer.
    #[error("parameter `{param}: {expected}` needs a tensor buffer but the call passes {found}")]
    PointerNotBuffer {
        /// The parameter.
        param: String,
        /// Its type.
        expected: SigType,
        /// What was passed.
        found: String,
    },
    /// A buffer the graph does not declare.
    #[error("parameter `{param}`: buffer `{buffer}` is not declared in the graph or as a constant")]
    UnknownBuffer {
        /// The parameter.
        param: String,
        /// The buffer.
        buffer: BufName,
    },
    /// A pointer whose element type differs from the signature's.
    #[error("parameter `{param}: {expected}` but buffer `{buffer}` holds {found}")]
    PointerDtype {
        /// The parameter.
        param: String,
        /// Its type.
        expected: SigType,
        /// The buffer.
        buffer: BufName,
        /// The buffer's dtype.
        found: DType,
    },
    /// A scalar parameter given a value of the wrong kind.
    #[error("parameter `{param}: {expected}` cannot take {found}")]
    ScalarKind {
        /// The parameter.
        param: String,
        /// Its type.
        expected: SigType,
        /// What was passed.
        found: String,
    },
    /// An integer argument that never fits its type.
    #[error("parameter `{param}: {ty}` = {value} lies in {range}, outside [{lo}, {hi}]")]
    OutOfRange {
        /// The parameter.
        param: String,
        /// Its type.
        ty: SigType,
        /// The value.
        value: SymExpr,
        /// The value's range.
        range: String,
        /// The type's minimum.
        lo: i128,
        /// The type's maximum.
        hi: i128,
    },
    /// The call passes a value for a baked-in parameter that differs from it.
    #[error(
        "{} {param} = {constant} but the call passes {passed}{}",
        source_word(*origin),
        counterexample.as_ref().filter(|c| !c.assignment.is_empty()).map(|c| format!(" (counterexample: {c}, where it is {})", c.lhs)).unwrap_or_default()
    )]
    ConstantMismatch {
        /// The parameter.
        param: String,
        /// The baked-in value.
        constant: ConstValue,
        /// Where the baked-in value comes from.
        origin: BakedSource,
        /// What the call passes.
        passed: String,
        /// An assignment under which they differ, when the prover found one.
        counterexample: Option<Counterexample>,
    },
    /// `constants` and the config fix a parameter to different values.
    #[error("constant {param} = {constant} but the config sets {config}")]
    ConstantConfigConflict {
        /// The parameter.
        param: String,
        /// The constant.
        constant: ConstValue,
        /// The config value.
        config: i64,
    },
    /// The config names a runtime parameter.
    #[error("config key `{param}` names a runtime parameter")]
    ConfigNamesRuntimeParam {
        /// The parameter.
        param: String,
    },
    /// A constexpr parameter with no value anywhere.
    #[error("constexpr `{param}` has no value in `constants`, the config or the call")]
    MissingConstexpr {
        /// The parameter.
        param: String,
    },
    /// A constexpr parameter passed a value that is not a compile-time literal.
    #[error("constexpr `{param}` is passed {passed}, which is not a compile-time constant")]
    ConstexprNotConstant {
        /// The parameter.
        param: String,
        /// What was passed.
        passed: String,
    },
    /// An extra launcher argument that is not an integer.
    #[error("launcher argument `{param}` must be an integer, got {found}")]
    LauncherArgNotInteger {
        /// The argument.
        param: String,
        /// What was passed.
        found: String,
    },
    /// The grid type needs a parameter the launch lacks (or has as a non-integer).
    #[error("grid {grid} needs an integer value for `{param}`")]
    GridParam {
        /// The grid type.
        grid: &'static str,
        /// The parameter.
        param: String,
    },
    /// A block size that is not a positive integer constant.
    #[error("grid {grid} needs block size `{param}` as a positive constant, got {found}")]
    BlockSize {
        /// The grid type.
        grid: &'static str,
        /// The block-size parameter.
        param: String,
        /// What it is.
        found: String,
    },
    /// No precomputed grid candidate matches the chosen config.
    #[error("no PrecomputedGrid candidate matches the chosen config ({config})")]
    NoPrecomputedGrid {
        /// The chosen config.
        config: String,
    },
    /// A PrecomputedGrid candidate names a setting the metadata does not record.
    #[error("PrecomputedGrid candidate {index} matches on `{key}`, which the kernel's metadata does not record: the candidate the launcher takes cannot be decided")]
    UndecidablePrecomputedGrid {
        /// The candidate's position.
        index: usize,
        /// The unknown key.
        key: String,
    },
}

fn source_word(s: BakedSource) -> &'static str {
    match s {
        BakedSource::Constants => "constant",
        BakedSource::Config => "config value",
        BakedSource::Call => "constexpr",
    }
}

/// Reconciles one Triton call (line `line` of graph `graph`) with its kernel
/// and returns the canonical launch. Proofs go through `cache`.
pub fn reconcile_call(
    program: &Program,
    graph: &GraphName,
    line: usize,
    call: &KernelCall,
    cache: &ProofCache,
) -> Result<LaunchRecord, Error> {
    reconcile_call_with(program, graph, line, call, cache, true)
}

/// [`reconcile_call`]; `explain`: record [`LaunchRecord::evidence`] (else
/// it stays empty; guards are recorded either way).
pub(super) fn reconcile_call_with(
    program: &Program,
    graph: &GraphName,
    line: usize,
    call: &KernelCall,
    cache: &ProofCache,
    explain: bool,
) -> Result<LaunchRecord, Error> {
    let fail = |kind: ErrorKind| Error {
        kernel: call.kernel.clone(),
        graph: graph.clone(),
        line,
        kind,
    };
    let def = program
        .kernels
        .get(&call.kernel)
        .ok_or_else(|| fail(ErrorKind::UnknownKernel))?;
    let KernelBackend::Triton(meta) = &def.backend else {
        return Err(fail(ErrorKind::NotTriton {
            backend: def.backend.keyword(),
        }));
    };
    let mut r = Reconciler {
        program,
        graph,
        meta,
        cache,
        explain,
        guards: Vec::new(),
        evidence: Vec::new(),
    };
    let bound = r.bind(call).map_err(fail)?;
    let args = r.runtime_args(&bound).map_err(fail)?;
    let baked = r.baked(&bound).map_err(fail)?;
    let mut launcher_args = Vec::new();
    for name in &meta.extra_launcher_args {
        match bound.get(name.as_str()) {
            Some(ArgValue::Expr(e)) => launcher_args.push((name.clone(), e.clone())),
            Some(other) => {
                return Err(fail(ErrorKind::LauncherArgNotInteger {
                    param: name.clone(),
                    found: describe(other),
                }))
            }
            None => return Err(fail(ErrorKind::MissingArgument { param: name.clone() })),
        }
    }
    let mut values: HashMap<&str, SymExpr> = HashMap::new();
    for a in &args {
        if let ArgValue::Expr(e) = &a.value {
            values.insert(a.param.as_str(), e.clone());
        }
    }
    for b in &baked {
        match &b.value {
            ConstValue::Int(v) => {
                values.insert(b.param.as_str(), SymExpr::Int(*v));
            }
            ConstValue::Bool(v) => {
                values.insert(b.param.as_str(), SymExpr::Int(i64::from(*v)));
            }
            _ => {}
        }
    }
    for (n, e) in &launcher_args {
        values.insert(n.as_str(), e.clone());
    }
    let grid = grid_exprs(meta, &values).map_err(fail)?;
    let mut scratch = Vec::new();
    for (kind, bytes) in [
        (ScratchKind::Global, meta.global_scratch),
        (ScratchKind::Profile, meta.profile_scratch),
    ] {
        let Some(bytes) = bytes else { continue };
        let total_bytes = (bytes > 0).then(|| {
            let per_cta = i64::try_from(bytes)
                .map(SymExpr::Int)
                .unwrap_or_else(|_| SymExpr::Int(i64::MAX));
            grid.iter().cloned().fold(per_cta, SymExpr::mul)
        });
        scratch.push(Scratch {
            kind,
            bytes_per_cta: bytes,
            total_bytes,
        });
    }
    Ok(LaunchRecord {
        kernel: call.kernel.clone(),
        graph: graph.clone(),
        line,
        args,
        baked,
        launcher_args,
        scratch,
        grid,
        num_warps: meta.num_warps,
        shared_mem: meta.shared_mem,
        guards: r.guards,
        evidence: r.evidence,
    })
}

struct Reconciler<'a> {
    program: &'a Program,
    graph: &'a GraphName,
    meta: &'a TritonMeta,
    cache: &'a ProofCache,
    /// Record evidence ([`LaunchRecord::evidence`]).
    explain: bool,
    guards: Vec<Guard>,
    evidence: Vec<Evidence>,
}

/// `Ok` unless the launch config gives `param`, whose value `constant` is
/// compiled in, another value.
#[allow(clippy::result_large_err)] // `ErrorKind`, as every check of the reconciler returns.
fn config_agrees(meta: &TritonMeta, param: &str, constant: &ConstValue) -> Result<(), ErrorKind> {
    match meta.config.get(param) {
        Some(cfg) if *constant != ConstValue::Int(*cfg) => Err(ErrorKind::ConstantConfigConflict {
            param: param.to_string(),
            constant: constant.clone(),
            config: *cfg,
        }),
        _ => Ok(()),
    }
}

impl<'a> Reconciler<'a> {
    /// Parameter name -> value: named arguments by name, positional ones over
    /// [`TritonMeta::call_params`] in order.
    fn bind<'c>(&self, call: &'c KernelCall) -> Result<IndexMap<String, &'c ArgValue>, ErrorKind> {
        Ok(self.meta.bind_args(&call.args)?)
    }

    fn dtype_of(&self, buffer: &BufName) -> Option<Option<DType>> {
        let graph = if self.graph.as_str() == MAIN_GRAPH && !self.program.subgraphs.contains_key(self.graph) {
            Some(&self.program.main)
        } else {
            self.program.subgraphs.get(self.graph)
        };
        match graph.and_then(|g| g.buffers.get(buffer)).map(|d| &d.kind) {
            Some(BufferKind::Tensor(l)) => Some(Some(l.dtype)),
            Some(BufferKind::Multi) => Some(None),
            None => self.program.constants.get(buffer).map(|l| Some(l.dtype)),
        }
    }

    fn is_scalar_tensor(&self, buffer: &BufName) -> bool {
        let graph = if self.graph.as_str() == MAIN_GRAPH {
            Some(&self.program.main)
        } else {
            self.program.subgraphs.get(self.graph)
        };
        graph
            .and_then(|g| g.layout(buffer))
            .or_else(|| self.program.constants.get(buffer))
            .is_some_and(|l| l.rank() == 0)
    }

    fn runtime_args(&mut self, bound: &IndexMap<String, &ArgValue>) -> Result<Vec<RuntimeArg>, ErrorKind> {
        let mut out = Vec::new();
        for (name, ty) in self.meta.runtime_params() {
            let Some(value) = bound.get(name) else {
                return Err(ErrorKind::MissingArgument {
                    param: name.to_string(),
                });
            };
            let param = name.to_string();
            match (ty, value) {
                (SigType::Pointer(dt), ArgValue::Buffer(b)) => match self.dtype_of(b) {
                    None => {
                        return Err(ErrorKind::UnknownBuffer {
                            param,
                            buffer: b.clone(),
                        })
                    }
                    Some(None) => {
                        return Err(ErrorKind::PointerNotBuffer {
                            param,
                            expected: ty.clone(),
                            found: format!("the multi-output value `{b}`"),
                        })
                    }
                    Some(Some(found)) if found != *dt => {
                        return Err(ErrorKind::PointerDtype {
                            param,
                            expected: ty.clone(),
                            buffer: b.clone(),
                            found,
                        })
                    }
                    Some(Some(_)) => {}
                },
                (SigType::Pointer(_), other) => {
                    return Err(ErrorKind::PointerNotBuffer {
                        param,
                        expected: ty.clone(),
                        found: describe(other),
                    })
                }
                (SigType::Scalar(st), v) => {
                    let ok = match v {
                        ArgValue::Buffer(b) => self.is_scalar_tensor(b),
                        ArgValue::Expr(e) if st.is_integer() => {
                            self.range_check(name, ty, e)?;
                            true
                        }
                        ArgValue::Expr(_) | ArgValue::Float(_) => !st.is_integer(),
                        ArgValue::Bool(_) => st.is_integer(),
                        _ => false,
                    };
                    if !ok {
                        return Err(ErrorKind::ScalarKind {
                            param,
                            expected: ty.clone(),
                            found: describe(v),
                        });
                    }
                }
                // TMA descriptors and other opaque types are passed through.
                _ => {}
            }
            out.push(RuntimeArg {
                param: name.to_string(),
                ty: ty.clone(),
                value: (*value).clone(),
            });
        }
        Ok(out)
    }

    /// Checks that an integer argument fits its signature type: proven by
    /// ranges, refuted when its whole range is outside, else guarded.
    fn range_check(&mut self, param: &str, ty: &SigType, e: &SymExpr) -> Result<(), ErrorKind> {
        let SigType::Scalar(st) = ty else { return Ok(()) };
        let Some((lo, hi)) = st.int_range() else { return Ok(()) };
        let claim = || format!("{param}: {e} fits {ty}");
        let mut ledger = Ledger {
            guards: &mut self.guards,
            evidence: &mut self.evidence,
            explain: self.explain,
        };
        claims::in_range(self.cache, &mut ledger, (claim, param), e, (lo, hi), |range_text| {
            format!("{param}: cannot prove {e} fits {ty} (range {range_text})")
        })
        .map_err(|range| ErrorKind::OutOfRange {
            param: param.to_string(),
            ty: ty.clone(),
            value: e.clone(),
            range,
            lo,
            hi,
        })
    }

    fn baked(&mut self, bound: &IndexMap<String, &ArgValue>) -> Result<Vec<Baked>, ErrorKind> {
        let meta = self.meta;
        let mut out = Vec::new();
        for (name, ty) in &meta.signature {
            let passed = bound.get(name.as_str()).copied();
            if let Some(c) = meta.constants.get(name) {
                config_agrees(meta, name, c)?;
                if let Some(v) = passed {
                    self.check_constant(name, c, BakedSource::Constants, v)?;
                }
                out.push(Baked {
                    param: name.clone(),
                    value: c.clone(),
                    source: BakedSource::Constants,
                    passed: passed.cloned(),
                });
            } else if *ty == SigType::Constexpr {
                if let Some(cfg) = meta.config.get(name) {
                    let c = ConstValue::Int(*cfg);
                    if let Some(v) = passed {
                        self.check_constant(name, &c, BakedSource::Config, v)?;
                    }
                    out.push(Baked {
                        param: name.clone(),
                        value: c,
                        source: BakedSource::Config,
                        passed: passed.cloned(),
                    });
                } else if let Some(v) = passed {
                    let value = literal(v).ok_or_else(|| ErrorKind::ConstexprNotConstant {
                        param: name.clone(),
                        passed: describe(v),
                    })?;
                    out.push(Baked {
                        param: name.clone(),
                        value,
                        source: BakedSource::Call,
                        passed: Some(v.clone()),
                    });
                } else {
                    return Err(ErrorKind::MissingConstexpr { param: name.clone() });
                }
            } else if meta.config.contains_key(name) {
                return Err(ErrorKind::ConfigNamesRuntimeParam { param: name.clone() });
            }
        }
        // Older Triton signatures omit constexprs: config keys and constants the
        // signature does not list are still compiled in.
        for (name, v) in &meta.config {
            if !meta.signature.contains_key(name) && !meta.constants.contains_key(name) {
                out.push(Baked {
                    param: name.clone(),
                    value: ConstValue::Int(*v),
                    source: BakedSource::Config,
                    passed: None,
                });
            }
        }
        for (name, c) in &meta.constants {
            if !meta.signature.contains_key(name) {
                config_agrees(meta, name, c)?;
                out.push(Baked {
                    param: name.clone(),
                    value: c.clone(),
                    source: BakedSource::Constants,
                    passed: None,
                });
            }
        }
        Ok(out)
    }

    /// Checks that the value a call passes for a baked-in parameter equals it.
    fn check_constant(
        &mut self,
        param: &str,
        constant: &ConstValue,
        source: BakedSource,
        passed: &ArgValue,
    ) -> Result<(), ErrorKind> {
        let mismatch = |counterexample: Option<Counterexample>| ErrorKind::ConstantMismatch {
            param: param.to_string(),
            constant: constant.clone(),
            origin: source,
            passed: describe(passed),
            counterexample,
        };
        let target = match (constant, passed) {
            (ConstValue::Int(k), ArgValue::Expr(e)) => Some((e, SymExpr::Int(*k))),
            (ConstValue::Bool(b), ArgValue::Expr(e)) => Some((e, SymExpr::Int(i64::from(*b)))),
            (ConstValue::Bool(b), ArgValue::Bool(x)) => return if b == x { Ok(()) } else { Err(mismatch(None)) },
            // Inductor passes user kernels' None args as `-1` placeholders.
            (ConstValue::None, ArgValue::None) | (ConstValue::None, ArgValue::Expr(SymExpr::Int(-1))) => return Ok(()),
            (ConstValue::Float(f), ArgValue::Float(x)) => {
                return if f == x || (f.is_nan() && x.is_nan()) {
                    Ok(())
                } else {
                    Err(mismatch(None))
                }
            }
            (ConstValue::Float(f), ArgValue::Expr(SymExpr::Int(i))) => {
                return if *i as f64 == *f { Ok(()) } else { Err(mismatch(None)) }
            }
            (ConstValue::Str(s), ArgValue::Str(x)) => return if s == x { Ok(()) } else { Err(mismatch(None)) },
            _ => None,
        };
        let Some((e, k)) = target else {
            return Err(mismatch(None));
        };
        let claim = || format!("{param}: {e} == {k}");
        let mut ledger = Ledger {
            guards: &mut self.guards,
            evidence: &mut self.evidence,
            explain: self.explain,
        };
        claims::equal(self.cache, &mut ledger, (claim, param), (e, &k), || {
            (
                SymExpr::cmp(CmpOp::Eq, e.clone(), k.clone()),
                format!("{param}: cannot prove {e} == {k}"),
            )
        })
        .map(|_| ())
        .map_err(|c| mismatch(Some(c)))
    }
}

/// The compile-time literal an argument is, if it is one.
fn literal(v: &ArgValue) -> Option<ConstValue> {
    Some(match v {
        ArgValue::Expr(SymExpr::Int(i)) => ConstValue::Int(*i),
        ArgValue::Expr(SymExpr::Bool(b)) | ArgValue::Bool(b) => ConstValue::Bool(*b),
        ArgValue::Float(f) => ConstValue::Float(*f),
        ArgValue::None => ConstValue::None,
        ArgValue::Str(s) => ConstValue::Str(s.clone()),
        _ => return None,
    })
}

pub(super) fn const_to_arg(c: &ConstValue) -> ArgValue {
    match c {
        ConstValue::None => ArgValue::None,
        ConstValue::Bool(b) => ArgValue::Bool(*b),
        ConstValue::Int(v) => ArgValue::Expr(SymExpr::Int(*v)),
        ConstValue::Float(f) => ArgValue::Float(*f),
        ConstValue::Str(s) => ArgValue::Str(s.clone()),
    }
}

/// A short description of an argument for messages.
pub(super) fn describe(v: &ArgValue) -> String {
    struct Text<'a>(&'a ArgValue);
    impl fmt::Display for Text<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.0 {
                ArgValue::Buffer(b) => write!(f, "{b}"),
                ArgValue::Expr(e) => write!(f, "{e}"),
                ArgValue::Float(x) => crate::ir::write_float(f, *x),
                ArgValue::Bool(true) => f.write_str("True"),
                ArgValue::Bool(false) => f.write_str("False"),
                ArgValue::None => f.write_str("None"),
                ArgValue::Str(s) => write!(f, "{}", crate::ir::PyStr(s)),
                ArgValue::DType(d) => write!(f, "{}", d.torch_name()),
                ArgValue::Device(d) => write!(f, "device('{d}')"),
                ArgValue::List(items) => {
                    f.write_str("[")?;
                    for (i, x) in items.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{}", Text(x))?;
                    }
                    f.write_str("]")
                }
            }
        }
    }
    match v {
        ArgValue::Buffer(b) => format!("buffer `{b}`"),
        other => Text(other).to_string(),
    }
}

/// The launch grid from the grid type, the chosen config and the parameter values.
fn grid_exprs(meta: &TritonMeta, values: &HashMap<&str, SymExpr>) -> Result<[SymExpr; 3], ErrorKind> {
    meta.grid(&|n| values.get(n).cloned()).map_err(|e| match e {
        crate::ir::GridError::MissingParam { grid, param } => ErrorKind::GridParam { grid, param },
        crate::ir::GridError::BlockSize { grid, param, found } => ErrorKind::BlockSize { grid, param, found },
        crate::ir::GridError::NoPrecomputedGrid { config } => ErrorKind::NoPrecomputedGrid { config },
        crate::ir::GridError::UndecidablePrecomputedGrid { index, key } => {
            ErrorKind::UndecidablePrecomputedGrid { index, key }
        }
    })
}
