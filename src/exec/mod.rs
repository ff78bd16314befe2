//! Execution back ends for [`crate::fx::interp`].
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

pub mod compare;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod host;
mod jagged;
pub mod meta;
mod ops;
mod run;
pub mod safetensors;
mod tensor;

pub use run::RunError;
pub use tensor::{Element, Tensor};

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

    /// Number of elements.
    pub fn numel(&self) -> i64 {
        self.size.iter().product()
    }

    /// Storage elements the layout reaches (0 when any size is 0), or `None`
    /// on overflow or a negative size.
    pub fn storage_numel(&self) -> Option<i64> {
        if self.size.iter().any(|s| *s < 0) {
            return None;
        }
        if self.size.contains(&0) {
            return Some(0);
        }
        let mut end = self.offset.checked_add(1)?;
        for (s, st) in self.size.iter().zip(&self.stride) {
            end = end.checked_add((s - 1).checked_mul(*st)?)?;
        }
        Some(end)
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
    /// A dict (dict-valued multi-outputs, tensor-subclass attributes).
    Dict(IndexMap<String, Value<T>>),
    /// A multi-output value whose elements the backend does not hold
    /// (the meta backend's results of multi-output ops).
    Opaque,
}

impl<T> Value<T> {
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

/// A kernel launch or call.
#[derive(Debug)]
pub struct KernelLaunch<'a, T> {
    /// The kernel's definition.
    pub kernel: &'a KernelDef,
    /// The grid (Triton launches only).
    pub grid: Option<[i64; 3]>,
    /// Positional arguments (direct calls).
    pub args: Vec<Value<T>>,
    /// Arguments by parameter name (every parameter for Triton launches).
    pub kwargs: IndexMap<String, Value<T>>,
}

/// An extern op call.
#[derive(Debug)]
pub struct ExternCall<'a, T> {
    /// The op as the program names it.
    pub op: &'a str,
    /// Positional arguments.
    pub args: Vec<Value<T>>,
    /// Keyword arguments (`out` included for out variants).
    pub kwargs: IndexMap<String, Value<T>>,
    /// The declared result layout as far as it is known before the call
    /// (entries with unbound symbols are `None`); `None` for multi-output or
    /// undeclared results.
    pub expected: Option<ExpectedLayout>,
}

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
    fn spec(&self, tensor: &Self::Tensor) -> TensorSpec;

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

    /// Copies a backend tensor to the host.
    fn copy_out(&mut self, tensor: &Self::Tensor) -> Result<Tensor, ExecError>;

    /// A value for an unbound symbol, where the backend may substitute one
    /// (the meta backend's hints); `None` otherwise.
    fn hint(&mut self, _symbol: &Symbol, _decl: Option<&SymbolDecl>) -> Option<i64> {
        None
    }

    /// Checks a tensor's data alignment.
    fn check_alignment(&self, _tensor: &Self::Tensor, _alignment: u32) -> Result<(), ExecError> {
        Ok(())
    }

    /// Bytes allocated through this backend.
    fn memory(&self) -> MemoryStats {
        MemoryStats::default()
    }
}
