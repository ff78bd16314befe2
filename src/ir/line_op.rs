//! The extern op a line calls when it runs ([`Line::runtime_op`]): the one
//! rule for which lines become op calls and which op each calls. The FX
//! lowering, whose graph the interpreter runs, takes its op calls from it,
//! and so does `exec::uses::extern_uses`, which names those calls with their
//! lines before a run (an FX node carries no source line, and the FX
//! lowering refuses some valid programs that `check --device` still reports
//! on).

use super::op::{key, target, COMM_ALLOCATOR};
use super::{BufName, DType, IndexPutFallback, KeyEntry, Line};

/// The extern op a line calls when it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineOp {
    /// The op as the run calls it (`extern_kernels.mm`,
    /// `torch.ops.aten.index_put_.default`).
    pub op: String,
    /// The line is an op call in every lowering (extern lines, index_put
    /// and scatter fallbacks: the calls a standalone C++ wrapper makes in
    /// wrapir's runtime library); `false` for the calls only the FX
    /// lowering makes (a dtype-changing reinterpret, `ConvertInt`,
    /// communication buffers), which the C++ wrappers do themselves.
    pub named: bool,
}

impl Line {
    /// The extern op running this line calls, `None` for a line that calls
    /// none: the op an extern line or a scatter fallback names,
    /// [`IndexPutFallback::op`] for an index_put fallback, `aten.view.dtype`
    /// for a `Reinterpret` whose alias has another dtype than its base,
    /// `aten.where.Scalar` for a `DynamicScalar` that converts a boolean to
    /// an int (`ConvertInt`) and [`COMM_ALLOCATOR`] for a
    /// `CommBufferAllocate`. `dtype(b)`: the dtype buffer `b` is declared
    /// with (the graph's buffer table, else the program's constants; `None`
    /// for a buffer that is not a tensor).
    pub fn runtime_op(&self, dtype: impl Fn(&BufName) -> Option<DType>) -> Option<LineOp> {
        let named = |op| Some(LineOp { op, named: true });
        let fx_only = |op| Some(LineOp { op, named: false });
        if let Some(call) = self.extern_call() {
            return named(call.op.clone());
        }
        match self {
            Line::IndexPutFallback(_) => named(IndexPutFallback::op()),
            Line::ScatterFallback(s) => named(s.op.clone()),
            Line::Reinterpret { base, alias } => match (dtype(base), dtype(alias)) {
                (Some(from), Some(to)) if from != to => fx_only(target(key::VIEW, "dtype")),
                _ => None,
            },
            Line::DynamicScalar(d) if d.keypath.as_slice() == [KeyEntry::ConvertInt] => {
                fx_only(target(key::WHERE, "Scalar"))
            }
            Line::CommBufferAllocate { .. } => fx_only(COMM_ALLOCATOR.to_string()),
            _ => None,
        }
    }
}
