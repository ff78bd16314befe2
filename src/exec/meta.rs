//! The meta backend: shapes, strides and dtypes only.
//!
//! Extern results take their declared layouts; unbacked symbols that a
//! result's layout needs before they are bound are given, in this order, the
//! caller's hint ([`MetaBackend::with_hint`]), the program's hint, the upper
//! bound of the value range (the worst case for memory), or its lower bound.
//! Scalar read-backs (`item()`) answer the same way. Every allocation counts
//! towards [`Backend::memory`], so a run reports the plan's peak bytes.

use super::host::tensor::{check_bounds, Accounted, MemCounter};
use super::{
    Backend, ExecError, ExpectedLayout, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, Tensor,
    TensorSpec, Value,
};
use crate::ir::SymbolDecl;
use crate::sym::Symbol;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A tensor without data. The layout sits behind an `Arc`, so cloning a
/// handle copies no sizes or strides.
#[derive(Clone, Debug)]
pub struct MetaTensor {
    spec: Arc<TensorSpec>,
    storage: Arc<Accounted>,
    storage_numel: usize,
}

impl MetaTensor {
    /// The layout.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }
}

/// Runs programs on shapes only.
///
/// Meta tensors hold no data, so by default the memory limits are off (a
/// run reports the plan's peak however large); [`MetaBackend::with_limits`]
/// turns them on (the CLI passes the host's physical memory).
#[derive(Debug)]
pub struct MetaBackend {
    hints: FxHashMap<Symbol, i64>,
    /// Values of data-dependent predicates, read in turn (the last repeats).
    predicates: Vec<bool>,
    /// How many predicates have been read.
    predicates_read: usize,
    limits: crate::Limits,
    memory: Arc<MemCounter>,
    /// Layouts of freed tensors (sole handles), reused for new tensors and
    /// views with their vectors' capacity: a run in steady state allocates
    /// no layouts.
    spec_pool: Vec<Arc<TensorSpec>>,
    /// Storage records of freed tensors (sole handles, bytes already
    /// returned to `memory`), reused likewise.
    storage_pool: Vec<Arc<Accounted>>,
    /// Symbols that took a bound of their range for want of a hint, in the
    /// order they first did.
    defaulted: Vec<DefaultedSymbol>,
    /// The symbols of `defaulted`, for the membership test.
    defaulted_set: rustc_hash::FxHashSet<Symbol>,
    /// Extern calls kept for the caller ([`MetaBackend::log_externs`]).
    extern_log: Option<ExternLog>,
}

/// The extern calls a run made of the ops a filter selects.
#[derive(Debug)]
struct ExternLog {
    selects: fn(&str) -> bool,
    calls: Vec<LoggedExtern>,
}

/// An extern call as a shapes-only run saw it: the op and the layouts of its
/// tensor operands and result, for a device backend that prepares the call
/// before it runs (e.g. a convolution's cuDNN plan).
#[derive(Clone, Debug)]
pub struct LoggedExtern {
    /// The op as the program names it.
    pub op: String,
    /// Positional arguments, tensors as their layouts.
    pub args: Vec<Value<TensorSpec>>,
    /// Keyword arguments, likewise.
    pub kwargs: indexmap::IndexMap<String, Value<TensorSpec>>,
    /// The result, likewise (`Value::None` for out variants).
    pub result: Value<TensorSpec>,
}

/// A symbol the meta backend gave a bound of its value range because neither
/// the caller nor the program gave it a hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultedSymbol {
    /// The symbol.
    pub symbol: Symbol,
    /// The value it took.
    pub value: i64,
    /// `true`: the upper bound (the worst case for memory); `false`: the lower
    /// bound (the range has no upper one).
    pub upper: bool,
}

/// Most layouts and storage records [`MetaBackend`] keeps for reuse.
const POOL_LIMIT: usize = 64;

impl Default for MetaBackend {
    fn default() -> Self {
        let limits = crate::Limits::default().with_memory(u64::MAX);
        MetaBackend {
            hints: FxHashMap::default(),
            predicates: Vec::new(),
            predicates_read: 0,
            limits,
            memory: Arc::new(MemCounter::with_limits(&limits)),
            spec_pool: Vec::new(),
            storage_pool: Vec::new(),
            defaulted: Vec::new(),
            defaulted_set: Default::default(),
            extern_log: None,
        }
    }
}

impl MetaBackend {
    /// A backend without caller hints.
    pub fn new() -> Self {
        MetaBackend::default()
    }

    /// Uses `value` for `symbol` wherever the run needs it before it is bound.
    pub fn with_hint(mut self, symbol: impl Into<Symbol>, value: i64) -> Self {
        self.hints.insert(symbol.into(), value);
        self
    }

    /// The value of data-dependent predicates of `cond`/`while_loop` (which a
    /// shapes-only run cannot read); without it such a branch is an error.
    pub fn with_predicate(self, value: bool) -> Self {
        self.with_predicates(&[value])
    }

    /// Values of data-dependent predicates, read in turn, the last one
    /// repeating: `[true, true, false]` runs a `while_loop` body twice (its
    /// condition is read three times), `[true]` is [`MetaBackend::with_predicate`].
    pub fn with_predicates(mut self, values: &[bool]) -> Self {
        self.predicates = values.to_vec();
        self.predicates_read = 0;
        self
    }

    /// Runs within `limits` (memory, `while_loop` fuel) instead of [`crate::Limits::default`].
    pub fn with_limits(mut self, limits: crate::Limits) -> Self {
        self.limits = limits;
        self.memory = Arc::new(MemCounter::with_limits(&limits));
        self
    }

    /// Keeps every extern call whose op `selects` accepts, with its operands'
    /// layouts ([`MetaBackend::take_logged_externs`]).
    pub fn log_externs(mut self, selects: fn(&str) -> bool) -> Self {
        self.extern_log = Some(ExternLog {
            selects,
            calls: Vec::new(),
        });
        self
    }

    /// The calls [`MetaBackend::log_externs`] kept so far, in call order.
    pub fn take_logged_externs(&mut self) -> Vec<LoggedExtern> {
        self.extern_log
            .as_mut()
            .map(|l| std::mem::take(&mut l.calls))
            .unwrap_or_default()
    }

    /// An extern call's result: its declared layout, the first argument of
    /// an in-place op, or nothing.
    fn extern_result(&mut self, call: &ExternCall<'_, MetaTensor>) -> Result<Value<MetaTensor>, ExecError> {
        if call.kwargs.get("out").is_some_and(|v| !matches!(v, Value::None)) {
            return Ok(Value::None);
        }
        match call.expected {
            Some(layout) => {
                let tensor = self.allocate_expected(layout).ok_or_else(|| {
                    ExecError::NoValue(format!(
                        "op `{}`: its result layout depends on a symbol with no hint (give one with `--hint SYMBOL=N`)",
                        call.op
                    ))
                })??;
                Ok(Value::Tensor(tensor))
            }
            None if super::op::op_name(call.op).ends_with('_') => {
                // In-place ops return their first argument.
                Ok(call.args.first().cloned().unwrap_or(Value::None))
            }
            None => Ok(Value::Opaque),
        }
    }

    /// A meta tensor for `spec` (what a caller passes as an input).
    pub fn tensor(&mut self, spec: &TensorSpec) -> Result<MetaTensor, ExecError> {
        self.allocate(spec)
    }

    /// [`Backend::allocate`] for a declared layout; `None` when an entry is
    /// unknown. The layout handle is a pooled one when there is one.
    fn allocate_expected(&mut self, exp: &ExpectedLayout) -> Option<Result<MetaTensor, ExecError>> {
        let offset = exp.offset?;
        if exp.size.iter().chain(&exp.stride).any(Option::is_none) {
            return None;
        }
        let mut spec = self
            .spec_pool
            .pop()
            .unwrap_or_else(|| Arc::new(TensorSpec::contiguous(exp.dtype, exp.device, &[])));
        if Arc::get_mut(&mut spec).is_none() {
            spec = Arc::new(TensorSpec::contiguous(exp.dtype, exp.device, &[]));
        }
        // A sole handle: checked just above, or fresh.
        let s = Arc::get_mut(&mut spec)?;
        s.dtype = exp.dtype;
        s.device = exp.device;
        s.size.clear();
        s.size.extend(exp.size.iter().flatten());
        s.stride.clear();
        s.stride.extend(exp.stride.iter().flatten());
        s.offset = offset;
        Some(storage_of(&spec).and_then(|(n, bytes)| {
            let storage = self.storage(bytes, &spec)?;
            Ok(MetaTensor {
                spec,
                storage,
                storage_numel: n,
            })
        }))
    }

    /// A storage record of `bytes` for `spec`, counted in `memory` within the
    /// memory limits (a pooled one when there is one).
    fn storage(&mut self, bytes: u64, spec: &TensorSpec) -> Result<Arc<Accounted>, ExecError> {
        self.memory.reserve(bytes, &|| {
            format!("allocating {} {:?} strides {:?}", spec.dtype, spec.size, spec.stride)
        })?;
        if let Some(mut storage) = self.storage_pool.pop() {
            if let Some(acc) = Arc::get_mut(&mut storage) {
                acc.bytes = bytes;
                return Ok(storage);
            }
        }
        Ok(Arc::new(Accounted {
            bytes,
            counter: Some(Arc::clone(&self.memory)),
        }))
    }

    /// A layout handle holding these entries (a pooled one when there is one).
    #[inline]
    fn layout(&mut self, base: &TensorSpec, size: &[i64], stride: &[i64], offset: i64) -> Arc<TensorSpec> {
        if let Some(mut spec) = self.spec_pool.pop() {
            if let Some(s) = Arc::get_mut(&mut spec) {
                s.dtype = base.dtype;
                s.device = base.device;
                s.size.clear();
                s.size.extend_from_slice(size);
                s.stride.clear();
                s.stride.extend_from_slice(stride);
                s.offset = offset;
                return spec;
            }
        }
        Arc::new(TensorSpec {
            dtype: base.dtype,
            device: base.device,
            size: size.to_vec(),
            stride: stride.to_vec(),
            offset,
        })
    }

    fn resolve(&mut self, symbol: &Symbol, decl: Option<&SymbolDecl>) -> Option<i64> {
        if let Some(v) = self.hints.get(symbol).copied().or_else(|| decl.and_then(|d| d.hint)) {
            return Some(v);
        }
        let (value, upper) = match decl.map(|d| (d.range.hi, d.range.lo)) {
            Some((Some(hi), _)) => (hi, true),
            Some((None, Some(lo))) => (lo, false),
            _ => return None,
        };
        if self.defaulted_set.insert(symbol.clone()) {
            self.defaulted.push(DefaultedSymbol {
                symbol: symbol.clone(),
                value,
                upper,
            });
        }
        Some(value)
    }

    /// The symbols that took a bound of their range for want of a hint so
    /// far, in the order they first did.
    pub fn defaulted(&self) -> &[DefaultedSymbol] {
        &self.defaulted
    }
}

impl Backend for MetaBackend {
    type Tensor = MetaTensor;

    fn name(&self) -> &'static str {
        "meta"
    }

    fn allocate(&mut self, spec: &TensorSpec) -> Result<MetaTensor, ExecError> {
        let (n, bytes) = storage_of(spec)?;
        let storage = self.storage(bytes, spec)?;
        Ok(MetaTensor {
            spec: self.layout(spec, &spec.size, &spec.stride, spec.offset),
            storage,
            storage_numel: n,
        })
    }

    fn free(&mut self, tensor: MetaTensor) {
        let MetaTensor {
            mut spec, mut storage, ..
        } = tensor;
        if self.spec_pool.len() < POOL_LIMIT && Arc::get_mut(&mut spec).is_some() {
            self.spec_pool.push(spec);
        }
        if self.storage_pool.len() < POOL_LIMIT {
            if let Some(acc) = Arc::get_mut(&mut storage) {
                // Only records counted here are pooled; the bytes go back
                // now, as dropping the last handle would do.
                if acc.counter.as_ref().is_some_and(|c| Arc::ptr_eq(c, &self.memory)) {
                    self.memory.sub(acc.bytes);
                    acc.bytes = 0;
                    self.storage_pool.push(storage);
                }
            }
        }
    }

    fn spec<'a>(&'a self, tensor: &'a MetaTensor) -> &'a TensorSpec {
        &tensor.spec
    }

    fn view(&mut self, base: &MetaTensor, size: &[i64], stride: &[i64], offset: i64) -> Result<MetaTensor, ExecError> {
        let spec = self.layout(&base.spec, size, stride, offset);
        check_bounds(&spec, base.storage_numel)?;
        Ok(MetaTensor {
            spec,
            storage: Arc::clone(&base.storage),
            storage_numel: base.storage_numel,
        })
    }

    fn launch(&mut self, _launch: KernelLaunch<'_, MetaTensor>) -> Result<(), ExecError> {
        Ok(())
    }

    fn call_extern(&mut self, call: ExternCall<'_, MetaTensor>) -> Result<Value<MetaTensor>, ExecError> {
        let logged = self.extern_log.as_ref().is_some_and(|l| (l.selects)(call.op));
        if !logged {
            return self.extern_result(&call);
        }
        let result = self.extern_result(&call)?;
        let spec_of = |v: &Value<MetaTensor>| spec_value(v.clone());
        let entry = LoggedExtern {
            op: call.op.to_string(),
            args: call.args.iter().map(spec_of).collect(),
            kwargs: call.kwargs.iter().map(|(k, v)| (k.to_string(), spec_of(v))).collect(),
            result: spec_of(&result),
        };
        if let Some(log) = self.extern_log.as_mut() {
            log.calls.push(entry);
        }
        Ok(result)
    }

    fn read_scalar(&mut self, _tensor: &MetaTensor, request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        if request
            .decl
            .is_some_and(|d| d.kind == crate::ir::SymbolKind::UnbackedFloat)
        {
            // A float never sizes anything: the meta backend has no value for it.
            return Ok(ScalarValue::Float(f64::NAN));
        }
        match request.symbol {
            Some(s) => {
                let v = self.resolve(s, request.decl).ok_or_else(|| {
                    ExecError::NoValue(format!(
                        "symbol `{s}` has no hint and an unbounded range (give one with `--hint {s}=N`)"
                    ))
                })?;
                v.checked_mul(request.multiplier)
                    .map(ScalarValue::Int)
                    .ok_or_else(|| ExecError::NoValue(format!("hint of `{s}` overflows")))
            }
            None => {
                let at = self.predicates_read.min(self.predicates.len().saturating_sub(1));
                match self.predicates.get(at) {
                    Some(p) => {
                        self.predicates_read = self.predicates_read.saturating_add(1);
                        Ok(ScalarValue::Bool(*p))
                    }
                    None => Err(ExecError::NoValue(
                        "the meta backend cannot read tensor data: a data-dependent `cond` or `while_loop` predicate needs a value (`--predicate true|false`, or a list such as `true,false` read in turn)".into(),
                    )),
                }
            }
        }
    }

    fn copy_in(&mut self, tensor: &Tensor) -> Result<MetaTensor, ExecError> {
        self.allocate(tensor.spec())
    }

    fn copy_out(&mut self, _tensor: &MetaTensor) -> Result<Tensor, ExecError> {
        Err(ExecError::Unsupported("meta tensors hold no data to copy out".into()))
    }

    /// Meta tensors hold no values: nothing to check.
    fn check_finite(&mut self, _tensor: &MetaTensor) -> Result<(), ExecError> {
        Ok(())
    }

    fn hint(&mut self, symbol: &Symbol, decl: Option<&SymbolDecl>) -> Option<i64> {
        self.resolve(symbol, decl)
    }

    fn memory(&self) -> MemoryStats {
        self.memory.stats()
    }

    fn limits(&self) -> crate::Limits {
        self.limits
    }
}

/// Storage elements and bytes of a layout.
#[inline]
fn storage_of(spec: &TensorSpec) -> Result<(usize, u64), ExecError> {
    let n = super::host::tensor::storage_elements(spec)?;
    Ok((n, (n as u64).checked_mul(spec.dtype.size_bytes()).unwrap_or(u64::MAX)))
}

impl MetaBackend {
    /// The caller's hint for `symbol` (from [`MetaBackend::with_hint`]), if any.
    pub fn caller_hint(&self, symbol: &Symbol) -> Option<i64> {
        self.hints.get(symbol).copied()
    }
}

/// What a whole-program meta run reports.
#[derive(Clone, Debug)]
pub struct MetaReport {
    /// The main graph's outputs, tensors as their concrete layouts.
    pub outputs: Vec<Value<TensorSpec>>,
    /// Every symbol bound during the run (symbol inputs, sizes of inputs,
    /// unbacked symbols), with its value.
    pub symbols: crate::sym::Bindings,
    /// Bytes allocated through the backend, inputs included.
    pub memory: MemoryStats,
    /// Symbols that took a bound of their range for want of a hint
    /// ([`MetaBackend::defaulted`]).
    pub defaulted: Vec<DefaultedSymbol>,
}

/// Runs `program` on shapes only: validates it, lowers it to FX, compiles it,
/// builds meta inputs and constants from their declared layouts, and runs.
///
/// Symbols in input layouts and symbol inputs take the value in `hints`, else
/// the program's declared hint; a symbol with neither is an error naming it.
/// Unbacked symbols bound during the run use `hints`, then the rules of
/// [`MetaBackend`].
pub fn run_program(program: &crate::ir::Program, hints: &crate::sym::Bindings) -> Result<MetaReport, super::RunError> {
    let mut backend = MetaBackend::new();
    for (s, v) in hints {
        backend = backend.with_hint(s.clone(), *v);
    }
    run_program_on(program, &mut backend)
}

/// [`run_program`] on a configured backend (hints, predicate value).
pub fn run_program_on(program: &crate::ir::Program, backend: &mut MetaBackend) -> Result<MetaReport, super::RunError> {
    let plan = super::run::compile_program_with_limits(program, &backend.limits())?;
    run_plan_on(program, &plan, backend)
}

/// [`run_program_on`] with `program` already compiled as `plan`.
pub fn run_plan_on(
    program: &crate::ir::Program,
    plan: &super::interp::Plan,
    backend: &mut MetaBackend,
) -> Result<MetaReport, super::RunError> {
    use crate::ir::GraphInput;
    let mut env = crate::sym::Bindings::new();
    for (s, decl) in &program.symbols {
        if let Some(v) = backend.caller_hint(s).or(decl.hint) {
            env.insert(s.clone(), v);
        }
    }
    let unbound = |s: &Symbol| {
        if program.symbols.contains_key(s) {
            format!("symbol `{s}` has no value: give a hint (`--hint {s}=N`); the program declares none")
        } else {
            format!("symbol `{s}` is not declared")
        }
    };
    let mut inputs = Vec::new();
    for input in &program.main.inputs {
        match input {
            GraphInput::Tensor { name } => {
                let layout = program
                    .main
                    .layout(name)
                    .ok_or_else(|| ExecError::Input(format!("input `{name}` has no tensor layout")))?;
                let spec = super::run::concrete_layout(layout, &env, &format!("input `{name}`"), &unbound)?;
                inputs.push(Value::Tensor(backend.tensor(&spec)?));
            }
            GraphInput::Symbol { name, symbol } => {
                let v = env
                    .get(symbol)
                    .copied()
                    .ok_or_else(|| ExecError::Input(format!("input `{name}`: {}", unbound(symbol))))?;
                inputs.push(Value::Int(v));
            }
            GraphInput::SymExpr { name, expr } => {
                let v = crate::sym::eval::eval_int(expr, &env)
                    .map_err(|e| ExecError::Input(format!("input `{name}` (`{expr}`): {e}")))?;
                inputs.push(Value::Int(v));
            }
        }
    }
    let mut constants = indexmap::IndexMap::new();
    for (name, layout) in &program.constants {
        let spec = super::run::concrete_layout(layout, &env, &format!("constant `{name}`"), &unbound)?;
        constants.insert(name.to_string(), backend.tensor(&spec)?);
    }
    let out = plan.run(backend, inputs, &constants)?;
    drop(constants);
    Ok(MetaReport {
        outputs: out.outputs.into_iter().map(spec_value).collect(),
        symbols: out.symbols,
        memory: backend.memory(),
        defaulted: backend.defaulted.clone(),
    })
}

fn spec_value(v: Value<MetaTensor>) -> Value<TensorSpec> {
    match v {
        Value::Tensor(t) => Value::Tensor(Arc::try_unwrap(t.spec).unwrap_or_else(|shared| TensorSpec::clone(&shared))),
        Value::Int(i) => Value::Int(i),
        Value::Float(f) => Value::Float(f),
        Value::Bool(b) => Value::Bool(b),
        Value::None => Value::None,
        Value::Str(s) => Value::Str(s),
        Value::DType(d) => Value::DType(d),
        Value::Device(d) => Value::Device(d),
        Value::List(items) => Value::List(items.into_iter().map(spec_value).collect()),
        Value::Dict(items) => Value::Dict(Box::new(
            (*items).into_iter().map(|(k, v)| (k, spec_value(v))).collect(),
        )),
        Value::Opaque => Value::Opaque,
    }
}
