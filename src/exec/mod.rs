//! Execution back ends for the FX interpreter, [`interp`].
//!
//! A [`Backend`] allocates, frees and views tensors, launches kernels, calls
//! extern ops, reads scalars back and copies tensors in and out. Two ship
//! with the crate:
//!
//! * [`meta::MetaBackend`]: shapes, strides and dtypes only; binds unbacked
//!   symbols from hints and reports the peak memory of a run;
//! * [`host::HostBackend`]: real tensors ([`Tensor`]) in CPU memory, with a
//!   registry of kernels and extern ops keyed by name (built-ins include the
//!   jagged <-> padded dense conversions).

mod args;
pub mod collective;
pub mod compare;
pub mod coverage;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
// The CUDA backend's settings and reports, plain data in every build (the
// runtime's stand-in for builds without the feature names them too).
pub(crate) mod cuda_paths;
pub(crate) mod cuda_reports;
pub mod dag;
pub mod device_ops;
pub mod host;
pub mod interp;
pub mod meta;
pub(crate) mod model_source;
pub mod op;
pub mod random;
pub(crate) mod run;
pub mod safetensors;
pub mod uses;

pub use args::{ArgIter, ArgList, Kwargs, KwargsIter};
pub use host::tensor::{Element, OwnedStorage, Tensor};
pub use run::{
    check_inputs, compile_program, compile_program_with_dag, input_symbols, run_plan, run_program, RunError,
};

use crate::ir::{DType, Device, KernelDef, SymbolDecl};
use crate::sym::Symbol;
use indexmap::IndexMap;

/// A concrete tensor layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Element type.
    pub dtype: DType,
    /// Device.
    pub device: Device,
    /// Sizes.
    pub size: Vec<i64>,
    /// Strides in elements.
    pub stride: Vec<i64>,
    /// Storage offset in elements.
    pub offset: i64,
}

impl TensorSpec {
    /// `torch.view_as_real`'s layout of a complex layout: the part dtype, a
    /// last dimension of 2 with stride 1, every other stride and the offset
    /// doubled (in part elements). An error for a dtype that is not complex.
    pub fn as_real(&self) -> Result<TensorSpec, ExecError> {
        let part = self
            .dtype
            .complex_part()
            .ok_or_else(|| ExecError::Type(format!("view_as_real of a {} tensor (not complex)", self.dtype)))?;
        let twice = |v: i64| {
            v.checked_mul(2)
                .ok_or_else(|| ExecError::Input("view_as_real: stride overflows".into()))
        };
        let mut stride = self.stride.iter().map(|s| twice(*s)).collect::<Result<Vec<_>, _>>()?;
        stride.push(1);
        let mut size = self.size.clone();
        size.push(2);
        Ok(TensorSpec {
            dtype: part,
            device: self.device,
            size,
            stride,
            offset: twice(self.offset)?,
        })
    }

    /// `torch.view_as_complex`'s layout of a `float16` / `float32` /
    /// `float64` layout with a last dimension of 2 and stride 1 (every other
    /// stride and the offset even): the complex dtype, strides and offset
    /// halved.
    pub fn as_complex(&self) -> Result<TensorSpec, ExecError> {
        let complex = self
            .dtype
            .complex_of()
            .ok_or_else(|| ExecError::Type(format!("view_as_complex of a {} tensor", self.dtype)))?;
        let (Some(2), Some(1)) = (self.size.last(), self.stride.last()) else {
            return Err(ExecError::Type(format!(
                "view_as_complex needs a last dimension of size 2 and stride 1, got sizes {:?} strides {:?}",
                self.size, self.stride
            )));
        };
        let rank = self.size.len() - 1;
        if self.stride[..rank].iter().any(|s| s % 2 != 0) || self.offset % 2 != 0 {
            return Err(ExecError::Type(format!(
                "view_as_complex needs even strides and offset, got strides {:?} offset {}",
                self.stride, self.offset
            )));
        }
        Ok(TensorSpec {
            dtype: complex,
            device: self.device,
            size: self.size[..rank].to_vec(),
            stride: self.stride[..rank].iter().map(|s| s / 2).collect(),
            offset: self.offset / 2,
        })
    }

    /// A contiguous layout.
    pub fn contiguous(dtype: DType, device: Device, size: &[i64]) -> Self {
        TensorSpec {
            dtype,
            device,
            size: size.to_vec(),
            stride: contiguous_strides(size),
            offset: 0,
        }
    }

    /// Number of elements (saturated at `i64::MAX` on overflow; 0 when a
    /// size is negative). [`TensorSpec::checked_numel`] tells these apart.
    pub fn numel(&self) -> i64 {
        match self.checked_numel() {
            Some(n) => n,
            None if self.size.iter().any(|s| *s < 0) => 0,
            None => i64::MAX,
        }
    }

    /// Row-major and dense, as PyTorch's `is_contiguous` (dimensions of
    /// size 1 may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let dense = contiguous_strides(&self.size);
        self.size
            .iter()
            .zip(self.stride.iter().zip(&dense))
            .all(|(s, (a, b))| *s <= 1 || a == b)
    }

    /// Number of elements, or `None` on a negative size or overflow.
    pub fn checked_numel(&self) -> Option<i64> {
        checked_numel(&self.size)
    }

    /// Storage elements the layout reaches (0 when any size is 0), or `None`
    /// on overflow, a negative size, or a negative stride or offset.
    #[inline]
    pub fn storage_numel(&self) -> Option<i64> {
        if self.offset < 0 {
            return None;
        }
        if self.size.len() == self.stride.len() {
            // As many sizes as strides (every layout a program declares):
            // one pass without early exits, the same sums in the same order
            // as below, so the same answer.
            let (mut end, mut overflow) = match self.offset.checked_add(1) {
                Some(e) => (e, false),
                None => (0, true),
            };
            let (mut negative, mut empty) = (false, false);
            for (&s, &st) in self.size.iter().zip(&self.stride) {
                negative |= (s | st) < 0;
                empty |= s == 0;
                let (term, o1) = s.wrapping_sub(1).overflowing_mul(st);
                let (e, o2) = end.overflowing_add(term);
                overflow |= o1 | o2;
                end = e;
            }
            return match (negative, empty, overflow) {
                (true, _, _) => None,
                (false, true, _) => Some(0),
                (false, false, true) => None,
                (false, false, false) => Some(end),
            };
        }
        if self.stride.iter().any(|s| *s < 0) {
            return None;
        }
        // One pass: a negative size wins, then a zero size, then overflow.
        let mut end = self.offset.checked_add(1);
        let mut empty = false;
        for (d, &s) in self.size.iter().enumerate() {
            if s < 0 {
                return None;
            }
            empty |= s == 0;
            if let (Some(e), Some(st)) = (end, self.stride.get(d)) {
                end = (s - 1).checked_mul(*st).and_then(|x| e.checked_add(x));
            }
        }
        if empty {
            Some(0)
        } else {
            end
        }
    }
}

/// Row-major strides for `size`.
pub fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut stride = vec![1i64; size.len()];
    let mut running = 1i64;
    for i in (0..size.len()).rev() {
        stride[i] = running;
        running = running.saturating_mul(size[i].max(1));
    }
    stride
}

/// Elements of the storage `spec` needs; an error naming the layout when it
/// has no valid storage (a negative size or stride, or an overflow).
#[inline]
pub(crate) fn storage_elements(spec: &TensorSpec) -> Result<usize, ExecError> {
    match spec.storage_numel().and_then(|n| usize::try_from(n).ok()) {
        Some(n) => Ok(n),
        None => Err(invalid_layout(spec)),
    }
}

/// The error of a layout without a storage size (out of line: the meta
/// backend's allocation path inlines [`storage_elements`]).
#[cold]
#[inline(never)]
fn invalid_layout(spec: &TensorSpec) -> ExecError {
    ExecError::Input(format!(
        "invalid layout: sizes {:?}, strides {:?}, offset {} (a negative size, stride or offset, or more elements than fit in 64 bits)",
        spec.size, spec.stride, spec.offset
    ))
}

/// The product of `size`, or `None` on a negative size or overflow.
pub(crate) fn checked_numel(size: &[i64]) -> Option<i64> {
    size.iter()
        .try_fold(1i64, |acc, &s| if s < 0 { None } else { acc.checked_mul(s) })
}

/// A value in the interpreter: a backend tensor, a scalar, or a container.
#[derive(Clone, Debug)]
pub enum Value<T> {
    /// A tensor.
    Tensor(T),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// `None`.
    None,
    /// A string.
    Str(String),
    /// A dtype.
    DType(DType),
    /// A device.
    Device(Device),
    /// A tuple or list.
    List(Vec<Value<T>>),
    /// A dict (dict-valued multi-outputs, tensor-subclass attributes); boxed,
    /// which keeps every value small to move.
    Dict(Box<IndexMap<String, Value<T>>>),
    /// A multi-output value whose elements the backend does not hold
    /// (the meta backend's results of multi-output ops).
    Opaque,
}

impl<T> Value<T> {
    /// The same value with every tensor replaced by `f`'s result (through
    /// lists and dicts); the first error stops the walk. The one mapping of
    /// values between backends (uploads, downloads, host staging).
    pub fn try_map_tensors<U, E>(&self, f: &mut dyn FnMut(&T) -> Result<U, E>) -> Result<Value<U>, E> {
        Ok(match self {
            Value::Tensor(t) => Value::Tensor(f(t)?),
            Value::Int(i) => Value::Int(*i),
            Value::Float(x) => Value::Float(*x),
            Value::Bool(b) => Value::Bool(*b),
            Value::None => Value::None,
            Value::Str(s) => Value::Str(s.clone()),
            Value::DType(d) => Value::DType(*d),
            Value::Device(d) => Value::Device(*d),
            Value::List(items) => Value::List(items.iter().map(|v| v.try_map_tensors(f)).collect::<Result<_, _>>()?),
            Value::Dict(items) => Value::Dict(Box::new(
                items
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), v.try_map_tensors(f)?)))
                    .collect::<Result<IndexMap<_, _>, E>>()?,
            )),
            Value::Opaque => Value::Opaque,
        })
    }

    /// The kind of value, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
            Value::None => "None",
            Value::Str(_) => "str",
            Value::DType(_) => "dtype",
            Value::Device(_) => "device",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Opaque => "multi-output",
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&T> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// An integer (booleans count as 0/1).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// A float (integers convert).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(v) => Some(*v),
            Value::Int(v) => Some(*v as f64),
            Value::Bool(b) => Some(*b as i64 as f64),
            _ => None,
        }
    }
}

/// A scalar read back from a tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarValue {
    /// From an integer tensor.
    Int(i64),
    /// From a floating tensor.
    Float(f64),
    /// From a boolean tensor.
    Bool(bool),
}

/// What a scalar read-back is for, so a shapes-only backend can answer it.
#[derive(Clone, Debug)]
pub struct ScalarRequest<'a> {
    /// The symbol the value defines, if any (its hint times `multiplier` is a
    /// plausible value).
    pub symbol: Option<&'a Symbol>,
    /// Its declaration.
    pub decl: Option<&'a SymbolDecl>,
    /// The value is `multiplier * symbol`.
    pub multiplier: i64,
}

/// A kernel launch or call. Borrows its arguments: backends read them in
/// place (clone a value to keep it).
#[derive(Debug)]
pub struct KernelLaunch<'a, T> {
    /// The kernel's definition.
    pub kernel: &'a KernelDef,
    /// The grid (Triton launches only).
    pub grid: Option<[i64; 3]>,
    /// Positional arguments (direct calls).
    pub args: ArgList<'a, T>,
    /// Arguments by parameter name (every parameter for Triton launches).
    pub kwargs: Kwargs<'a, T>,
}

/// An extern op call. Borrows its arguments, like [`KernelLaunch`].
#[derive(Debug)]
pub struct ExternCall<'a, T> {
    /// The op as the program names it.
    pub op: &'a str,
    /// Its family in the extern-op catalogue ([`op::ExternOp::of`] of
    /// `op`, resolved once when the plan is compiled).
    pub family: op::ExternOp,
    /// Positional arguments.
    pub args: ArgList<'a, T>,
    /// Keyword arguments (`out` included for out variants).
    pub kwargs: Kwargs<'a, T>,
    /// The declared result layout as far as it is known before the call
    /// (entries with unbound symbols are `None`); `None` for multi-output or
    /// undeclared results.
    pub expected: Option<&'a ExpectedLayout>,
}

impl<'a, T> ExternCall<'a, T> {
    /// A call of `op` with no declared result layout (`expected: None`), as
    /// a caller outside a program makes one.
    pub fn new(op: &'a str, args: impl Into<ArgList<'a, T>>, kwargs: impl Into<Kwargs<'a, T>>) -> Self {
        ExternCall {
            op,
            family: op::ExternOp::of(op),
            args: args.into(),
            kwargs: kwargs.into(),
            expected: None,
        }
    }
}

args::copy_views!(KernelLaunch, ExternCall);

/// A declared result layout, partly evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedLayout {
    /// Element type.
    pub dtype: DType,
    /// Device.
    pub device: Device,
    /// Sizes (`None` where a symbol is not bound yet).
    pub size: Vec<Option<i64>>,
    /// Strides.
    pub stride: Vec<Option<i64>>,
    /// Storage offset.
    pub offset: Option<i64>,
}

impl ExpectedLayout {
    /// The concrete layout when every entry is known.
    pub fn concrete(&self) -> Option<TensorSpec> {
        Some(TensorSpec {
            dtype: self.dtype,
            device: self.device,
            size: self.size.iter().copied().collect::<Option<_>>()?,
            stride: self.stride.iter().copied().collect::<Option<_>>()?,
            offset: self.offset?,
        })
    }
}

/// Bytes allocated through a backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes live now.
    pub current_bytes: u64,
    /// Most bytes live at once.
    pub peak_bytes: u64,
}

/// Errors while executing.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// No kernel of this name is registered.
    #[error("backend `{backend}` has no kernel `{name}` (registered: {})", list_or_none(.supported))]
    UnknownKernel {
        /// The backend.
        backend: &'static str,
        /// The kernel.
        name: String,
        /// What it supports.
        supported: Vec<String>,
    },
    /// No extern op of this name is registered.
    #[error("backend `{backend}` does not implement op `{op}` (supported: {})", list_or_none(.supported))]
    UnknownOp {
        /// The backend.
        backend: &'static str,
        /// The op.
        op: String,
        /// What it supports.
        supported: Vec<String>,
    },
    /// An op rejected its arguments or failed.
    #[error("op `{op}`: {message}")]
    Op {
        /// The op or kernel.
        op: String,
        /// What went wrong.
        message: String,
    },
    /// A runtime assertion failed.
    #[error("assertion failed: {0}")]
    Assert(String),
    /// A value of the wrong kind.
    #[error("{0}")]
    Type(String),
    /// A symbol's value lies outside its declared range.
    #[error("symbol `{symbol}` = {value} is outside its value range {range}")]
    OutOfRange {
        /// The symbol.
        symbol: Symbol,
        /// Its value.
        value: i64,
        /// The declared range.
        range: crate::ir::ValueRange,
    },
    /// A shapes-only backend needed a value it cannot know.
    #[error("{0}")]
    NoValue(String),
    /// Inputs that do not match the graph.
    #[error("{0}")]
    Input(String),
    /// Something the backend cannot do.
    #[error("{0}")]
    Unsupported(String),
    /// The device failed or refused (a driver call, a device the build or
    /// machine lacks): what the C ABI reports as a device error.
    #[error("op `cuda`: {0}")]
    Device(String),
    /// A CUDA run that cannot be recorded for replay (it reads values on
    /// the host mid-run, e.g. extern ops on the host fallback): the caller
    /// runs the interpreter instead.
    #[error("the run cannot be prepared: {0}")]
    Unpreparable(String),
    /// A limit of [`crate::Limits`] was exceeded.
    #[error(transparent)]
    Limit(#[from] crate::LimitExceeded),
    /// An error at a node, with where it happened.
    #[error("graph `{graph}`, node `{node}`: {source}")]
    AtNode {
        /// The graph.
        graph: String,
        /// The node.
        node: String,
        /// The error.
        source: Box<ExecError>,
    },
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

impl ExecError {
    pub(crate) fn op(op: &str, message: impl Into<String>) -> Self {
        ExecError::Op {
            op: op.to_string(),
            message: message.into(),
        }
    }
}

/// What the interpreter needs from a device.
pub trait Backend {
    /// The backend's tensor handle. Cloning a handle shares the storage.
    type Tensor: Clone + std::fmt::Debug;

    /// The backend's name, for messages.
    fn name(&self) -> &'static str;

    /// Allocates an uninitialised (host: zeroed) tensor.
    fn allocate(&mut self, spec: &TensorSpec) -> Result<Self::Tensor, ExecError>;

    /// Releases a handle; storage goes when its last handle does.
    fn free(&mut self, tensor: Self::Tensor) {
        drop(tensor);
    }

    /// The concrete layout of a tensor.
    fn spec<'a>(&'a self, tensor: &'a Self::Tensor) -> &'a TensorSpec;

    /// A view of `base`'s storage (`as_strided`, absolute offset).
    fn view(
        &mut self,
        base: &Self::Tensor,
        size: &[i64],
        stride: &[i64],
        offset: i64,
    ) -> Result<Self::Tensor, ExecError>;

    /// Launches or calls a kernel.
    fn launch(&mut self, launch: KernelLaunch<'_, Self::Tensor>) -> Result<(), ExecError>;

    /// Calls an extern op.
    fn call_extern(&mut self, call: ExternCall<'_, Self::Tensor>) -> Result<Value<Self::Tensor>, ExecError>;

    /// Reads a one-element tensor.
    fn read_scalar(&mut self, tensor: &Self::Tensor, request: &ScalarRequest<'_>) -> Result<ScalarValue, ExecError>;

    /// Copies a host tensor onto the backend.
    fn copy_in(&mut self, tensor: &Tensor) -> Result<Self::Tensor, ExecError>;

    /// A host input laid out as `spec` (its declared strides, storage offset
    /// and device) on the backend: how a whole-program run
    /// ([`run::run_program`]) puts its inputs in place. By default the host
    /// tensor is copied in, through a host tensor of the declared layout
    /// when its strides or offset differ.
    fn place(&mut self, host: &Tensor, spec: &TensorSpec) -> Result<Self::Tensor, ExecError> {
        if host.stride() == spec.stride.as_slice() && host.spec().offset == spec.offset {
            return self.copy_in(host);
        }
        let laid_out = Tensor::zeros_like_spec(spec)?;
        laid_out.copy_from(host)?;
        self.copy_in(&laid_out)
    }

    /// Whether a whole-program run hands its inputs back after the run
    /// ([`Backend::return_input`]); by default not.
    fn returns_inputs(&self) -> bool {
        false
    }

    /// After a whole-program run, what the program left in an input that
    /// [`Backend::place`] put in place as `placed`, handed back to the
    /// caller's host tensor `supplied` where the backend runs on the caller's
    /// tensors (the host backend: a mutated input lands where PyTorch's
    /// would). Called only where [`Backend::returns_inputs`].
    fn return_input(&mut self, _supplied: &Tensor, _placed: &Self::Tensor) -> Result<(), ExecError> {
        Ok(())
    }

    /// Copies a backend tensor to the host.
    fn copy_out(&mut self, tensor: &Self::Tensor) -> Result<Tensor, ExecError>;

    /// Called before each step of the top-level graph runs, with the
    /// position of its node in the graph's order (how [`dag::Dag`] numbers
    /// nodes), so that a backend recording the run can tell which node each
    /// device operation belongs to (the steps of a `cond`'s or loop's
    /// subgraphs belong to the `cond` or loop). By default nothing.
    #[inline]
    fn begin_node(&mut self, _position: usize) {}

    /// A value for an unbound symbol, where the backend may substitute one
    /// (the meta backend's hints); `None` otherwise.
    fn hint(&mut self, _symbol: &Symbol, _decl: Option<&SymbolDecl>) -> Option<i64> {
        None
    }

    /// Checks a tensor's data alignment.
    fn check_alignment(&self, _tensor: &Self::Tensor, _alignment: u32) -> Result<(), ExecError> {
        Ok(())
    }

    /// Checks that every element of a tensor is finite (Inductor's
    /// `nan_asserts`). By default the tensor is copied to the host and
    /// checked there ([`check_finite_host`]); the meta backend, which holds
    /// no data, has nothing to check.
    fn check_finite(&mut self, tensor: &Self::Tensor) -> Result<(), ExecError> {
        check_finite_host(&self.copy_out(tensor)?)
    }

    /// Whether a run checks the program's tensor asserts: sizes, strides,
    /// dtypes (`assert_size_stride`, grouped or not), alignments and
    /// finiteness (`nan_asserts`). They
    /// guard against inputs that differ from what Inductor compiled for;
    /// a caller that already guarantees its inputs may turn them off, as
    /// Inductor users do where they cost time per step. Symbolic runtime
    /// asserts (`torch._check`) are always checked. Default `true`.
    fn checks_tensor_asserts(&self) -> bool {
        true
    }

    /// Bytes allocated through this backend.
    fn memory(&self) -> MemoryStats {
        MemoryStats::default()
    }

    /// The limits a run on this backend stays within (`while_loop` fuel,
    /// nesting); [`crate::Limits::default`] unless the backend is given others.
    fn limits(&self) -> crate::Limits {
        crate::Limits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `storage_numel` as it was computed before the one-pass form: early
    /// exits, checked sums from `offset + 1`.
    fn reference(spec: &TensorSpec) -> Option<i64> {
        if spec.offset < 0 || spec.stride.iter().any(|s| *s < 0) || spec.size.iter().any(|s| *s < 0) {
            return None;
        }
        let mut end = spec.offset.checked_add(1);
        for (d, &s) in spec.size.iter().enumerate() {
            if let (Some(e), Some(st)) = (end, spec.stride.get(d)) {
                end = (s - 1).checked_mul(*st).and_then(|x| e.checked_add(x));
            }
        }
        if spec.size.contains(&0) {
            Some(0)
        } else {
            end
        }
    }

    #[test]
    fn storage_numel_matches_the_checked_sums() {
        let values = [i64::MIN, -3, -1, 0, 1, 2, 7, i64::MAX / 2, i64::MAX - 1, i64::MAX];
        for &offset in &values {
            for &a in &values {
                for &b in &values {
                    for &c in &values {
                        let spec = |size: Vec<i64>, stride: Vec<i64>| TensorSpec {
                            dtype: DType::Float32,
                            device: Device::cpu(),
                            size,
                            stride,
                            offset,
                        };
                        for s in [
                            spec(vec![a, b], vec![c, 1]),
                            spec(vec![a], vec![b, c]),
                            spec(vec![a, c], vec![b]),
                        ] {
                            assert_eq!(s.storage_numel(), reference(&s), "{s:?}");
                        }
                    }
                }
            }
        }
    }
}

/// Fails unless every element of a host tensor is finite (Inductor's
/// `nan_asserts`: `assert not t.isnan().any().item()`, and `isinf`). Only
/// floating and complex tensors can hold NaN or Inf; others pass.
pub fn check_finite_host(tensor: &Tensor) -> Result<(), ExecError> {
    let dtype = tensor.dtype();
    let values: Vec<f64> = if dtype.is_complex() {
        tensor
            .to_complex_vec()?
            .into_iter()
            .flat_map(|(re, im)| [re, im])
            .collect()
    } else if dtype.is_floating() {
        tensor.to_f64_vec()?
    } else {
        return Ok(());
    };
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(k) => {
            let at = if dtype.is_complex() { k / 2 } else { k };
            Err(ExecError::Assert(format!(
                "holds {} (element {at} in row-major order; Inductor's nan_asserts)",
                if values[k].is_nan() { "NaN" } else { "Inf" }
            )))
        }
    }
}
