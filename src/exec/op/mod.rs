//! What every backend's extern ops share: the catalogue of what runs each
//! op family ([`CATALOGUE`]; the families themselves, [`ExternOp`], are
//! named in `ir::op`), an op call's arguments read by position or
//! keyword ([`Args`]), and the registry key of an op string ([`op_key`]).

mod catalogue;
pub(crate) mod detection;
pub(crate) mod grouped;
pub(crate) mod rnn;
pub(crate) mod stream;

pub use crate::ir::op::{key, op_key, op_name, target, ExternOp};
pub use catalogue::{CudaRoute, Entry, OnCuda, CATALOGUE, OWN_ATTENTION, VIEW};

use super::{ArgList, ExecError, Kwargs, Value};

/// Arguments of one op call, read by position or keyword; shared by every
/// backend's built-in ops (`T` is the backend's tensor type).
pub(crate) struct Args<'a, T> {
    pub(crate) op: &'a str,
    pub(crate) args: &'a ArgList<'a, T>,
    pub(crate) kwargs: &'a Kwargs<'a, T>,
}

impl<'a, T> Args<'a, T> {
    /// The arguments of `call`, named by its op.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA backend's ops read them
    pub(crate) fn of(call: &'a super::ExternCall<'a, T>) -> Self {
        Args {
            op: call.op,
            args: &call.args,
            kwargs: &call.kwargs,
        }
    }

    pub(crate) fn get(&self, i: usize, name: &str) -> Option<&'a Value<T>> {
        self.args
            .get(i)
            .or_else(|| self.kwargs.get(name))
            .filter(|v| !matches!(v, Value::None))
    }

    pub(crate) fn err(&self, message: impl Into<String>) -> ExecError {
        ExecError::op(self.op, message)
    }

    /// The elements of this op's result of `shape`, whose host buffers take
    /// `bytes_per_element` bytes an element, within the one-allocation
    /// limit `max_alloc`: the one check of a host op's result size.
    pub(crate) fn result_elements(
        &self,
        shape: &[i64],
        bytes_per_element: u64,
        max_alloc: u64,
    ) -> Result<usize, ExecError> {
        let n = super::checked_numel(shape)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.err(format!("the result {shape:?} has more elements than fit in 64 bits")))?;
        crate::Limits::check(
            crate::Limit::AllocBytes,
            (n as u64).saturating_mul(bytes_per_element),
            max_alloc,
            format!("op `{}`: the result {shape:?}", self.op),
        )?;
        Ok(n)
    }

    pub(crate) fn tensor(&self, i: usize, name: &str) -> Result<&'a T, ExecError> {
        match self.get(i, name) {
            Some(Value::Tensor(t)) => Ok(t),
            Some(v) => Err(self.err(format!("argument `{name}` must be a tensor, got {}", v.kind()))),
            None => Err(self.err(format!("missing tensor argument `{name}`"))),
        }
    }

    /// An optional tensor argument (absent or `None`: `Ok(None)`).
    pub(crate) fn opt_tensor(&self, i: usize, name: &str) -> Result<Option<&'a T>, ExecError> {
        match self.get(i, name) {
            Some(Value::Tensor(t)) => Ok(Some(t)),
            None => Ok(None),
            Some(v) => Err(self.err(format!("`{name}` must be a tensor or None, got {}", v.kind()))),
        }
    }

    pub(crate) fn int(&self, i: usize, name: &str, default: Option<i64>) -> Result<i64, ExecError> {
        match self.get(i, name) {
            Some(v) => v
                .as_int()
                .ok_or_else(|| self.err(format!("argument `{name}` must be an int, got {}", v.kind()))),
            None => default.ok_or_else(|| self.err(format!("missing int argument `{name}`"))),
        }
    }

    pub(crate) fn opt_int(&self, i: usize, name: &str) -> Result<Option<i64>, ExecError> {
        match self.get(i, name) {
            Some(v) => {
                Ok(Some(v.as_int().ok_or_else(|| {
                    self.err(format!("argument `{name}` must be an int"))
                })?))
            }
            None => Ok(None),
        }
    }

    pub(crate) fn float(&self, i: usize, name: &str, default: f64) -> Result<f64, ExecError> {
        match self.get(i, name) {
            Some(v) => v
                .as_float()
                .ok_or_else(|| self.err(format!("argument `{name}` must be a number, got {}", v.kind()))),
            None => Ok(default),
        }
    }

    pub(crate) fn boolean(&self, i: usize, name: &str, default: bool) -> Result<bool, ExecError> {
        match self.get(i, name) {
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => v
                .as_int()
                .map(|x| x != 0)
                .ok_or_else(|| self.err(format!("argument `{name}` must be a bool"))),
            None => Ok(default),
        }
    }

    pub(crate) fn string(&self, i: usize, name: &str) -> Result<Option<&'a str>, ExecError> {
        match self.get(i, name) {
            Some(Value::Str(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.err(format!("argument `{name}` must be a string, got {}", v.kind()))),
            None => Ok(None),
        }
    }

    pub(crate) fn ints(&self, i: usize, name: &str) -> Result<Vec<i64>, ExecError> {
        match self.get(i, name) {
            Some(Value::List(items)) => items
                .iter()
                .map(|v| {
                    v.as_int()
                        .ok_or_else(|| self.err(format!("`{name}` must be a list of ints")))
                })
                .collect(),
            Some(v) => Ok(vec![v
                .as_int()
                .ok_or_else(|| self.err(format!("`{name}` must be a list of ints")))?]),
            None => Err(self.err(format!("missing int-list argument `{name}`"))),
        }
    }

    /// A list argument's items (`None` items kept as `Value::None`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // used by the CUDA built-ins
    pub(crate) fn list(&self, i: usize, name: &str) -> Result<&'a [Value<T>], ExecError> {
        match self.args.get(i).or_else(|| self.kwargs.get(name)) {
            Some(Value::List(items)) => Ok(items),
            Some(v) => Err(self.err(format!("argument `{name}` must be a list, got {}", v.kind()))),
            None => Err(self.err(format!("missing list argument `{name}`"))),
        }
    }
}
