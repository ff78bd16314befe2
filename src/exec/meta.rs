//! The meta backend: shapes, strides and dtypes only.
//!
//! Extern results take their declared layouts; unbacked symbols that a
//! result's layout needs before they are bound are given, in this order, the
//! caller's hint ([`MetaBackend::with_hint`]), the program's hint, the upper
//! bound of the value range (the worst case for memory), or its lower bound.
//! Scalar read-backs (`item()`) answer the same way. Every allocation counts
//! towards [`Backend::memory`], so a run reports the plan's peak bytes.

use super::tensor::{check_bounds, Accounted, MemCounter};
use super::{Backend, ExecError, ExternCall, KernelLaunch, MemoryStats, ScalarRequest, ScalarValue, Tensor, TensorSpec, Value};
use crate::ir::SymbolDecl;
use crate::sym::Symbol;
use std::collections::HashMap;
use std::sync::Arc;

/// A tensor without data.
#[derive(Clone, Debug)]
pub struct MetaTensor {
    spec: TensorSpec,
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
#[derive(Debug, Default)]
pub struct MetaBackend {
    hints: HashMap<Symbol, i64>,
    predicate: Option<bool>,
    memory: Arc<MemCounter>,
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
    pub fn with_predicate(mut self, value: bool) -> Self {
        self.predicate = Some(value);
        self
    }

    /// A meta tensor for `spec` (what a caller passes as an input).
    pub fn tensor(&mut self, spec: &TensorSpec) -> Result<MetaTensor, ExecError> {
        self.allocate(spec)
    }

    fn resolve(&self, symbol: &Symbol, decl: Option<&SymbolDecl>) -> Option<i64> {
        self.hints
            .get(symbol)
            .copied()
            .or_else(|| decl.and_then(|d| d.hint))
            .or_else(|| decl.and_then(|d| d.range.hi))
            .or_else(|| decl.and_then(|d| d.range.lo))
    }
}

impl Backend for MetaBackend {
    type Tensor = MetaTensor;

    fn name(&self) -> &'static str {
        "meta"
    }

    fn allocate(&mut self, spec: &TensorSpec) -> Result<MetaTensor, ExecError> {
        let n = spec
            .storage_numel()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| ExecError::Input(format!("invalid layout: sizes {:?}, strides {:?}", spec.size, spec.stride)))?;
        let bytes = n as u64 * spec.dtype.size_bytes();
        self.memory.add(bytes);
        Ok(MetaTensor {
            spec: spec.clone(),
            storage: Arc::new(Accounted { bytes, counter: Some(Arc::clone(&self.memory)) }),
            storage_numel: n,
        })
    }

    fn spec(&self, tensor: &MetaTensor) -> TensorSpec {
        tensor.spec.clone()
    }

    fn view(&mut self, base: &MetaTensor, size: &[i64], stride: &[i64], offset: i64) -> Result<MetaTensor, ExecError> {
        let spec = TensorSpec { size: size.to_vec(), stride: stride.to_vec(), offset, ..base.spec.clone() };
        check_bounds(&spec, base.storage_numel)?;
        Ok(MetaTensor { spec, storage: Arc::clone(&base.storage), storage_numel: base.storage_numel })
    }

    fn launch(&mut self, _launch: KernelLaunch<'_, MetaTensor>) -> Result<(), ExecError> {
        Ok(())
    }

    fn call_extern(&mut self, call: ExternCall<'_, MetaTensor>) -> Result<Value<MetaTensor>, ExecError> {
        if call.kwargs.get("out").is_some_and(|v| !matches!(v, Value::None)) {
            return Ok(Value::None);
        }
        match &call.expected {
            Some(layout) => {
                let spec = layout.concrete().ok_or_else(|| {
                    ExecError::NoValue(format!("op `{}`: its result layout depends on a symbol with no hint", call.op))
                })?;
                Ok(Value::Tensor(self.allocate(&spec)?))
            }
            None if super::host::op_key(call.op).ends_with('_') => {
                // In-place ops return their first argument.
                Ok(call.args.into_iter().next().unwrap_or(Value::None))
            }
            None => Ok(Value::Opaque),
        }
    }

    fn read_scalar(&mut self, tensor: &MetaTensor, request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError> {
        match request.symbol {
            Some(s) => {
                let v = self
                    .resolve(s, request.decl)
                    .ok_or_else(|| ExecError::NoValue(format!("symbol `{s}` has no hint and an unbounded range")))?;
                v.checked_mul(request.multiplier)
                    .map(ScalarValue::Int)
                    .ok_or_else(|| ExecError::NoValue(format!("hint of `{s}` overflows")))
            }
            None => match (self.predicate, tensor.spec.dtype) {
                (Some(p), _) => Ok(ScalarValue::Bool(p)),
                (None, _) => Err(ExecError::NoValue(
                    "the meta backend cannot read tensor data; set a predicate value with `with_predicate`".into(),
                )),
            },
        }
    }

    fn copy_in(&mut self, tensor: &Tensor) -> Result<MetaTensor, ExecError> {
        self.allocate(tensor.spec())
    }

    fn copy_out(&mut self, _tensor: &MetaTensor) -> Result<Tensor, ExecError> {
        Err(ExecError::Unsupported("meta tensors hold no data to copy out".into()))
    }

    fn hint(&mut self, symbol: &Symbol, decl: Option<&SymbolDecl>) -> Option<i64> {
        self.resolve(symbol, decl)
    }

    fn memory(&self) -> MemoryStats {
        self.memory.stats()
    }
}
