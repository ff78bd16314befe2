//! The lines of a wrapper graph: one variant per Wrapper IR line kind.

use super::scope::{DeviceStreams, Scope, ScopeKind};
use super::types::{BufName, DType, Device, GraphName, KernelName};
use crate::sym::{SymExpr, Symbol};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::fmt;

/// One step of the wrapper program.
///
/// Buffers named by a line must be declared in the graph's buffer table
/// ([`crate::ir::Graph::buffers`]); the line says *when* something happens to
/// them, the table says *what* they are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "line", rename_all = "snake_case")]
pub enum Line {
    /// Allocate an uninitialised buffer with its declared layout.
    Allocate {
        /// The new buffer.
        buffer: BufName,
    },
    /// Free an intermediate unless memory planning handed its storage on.
    FreeIfNotReused {
        /// The buffer.
        buffer: BufName,
        /// `true` when a later `Reuse` took the storage (nothing is freed).
        #[serde(default, skip_serializing_if = "is_false")]
        is_reused: bool,
    },
    /// Free a graph input or another never-reusable buffer.
    Free {
        /// The buffer.
        buffer: BufName,
    },
    /// `new` takes over the storage of `old`.
    Reuse {
        /// The buffer whose storage is taken.
        old: BufName,
        /// The buffer that now owns it (declared with its own layout).
        new: BufName,
        /// Whether `old` stops existing (`; del old`).
        #[serde(default = "yes")]
        delete_old: bool,
    },
    /// `alias` is a view of `base` (its declared layout gives size, stride, offset).
    Reinterpret {
        /// The viewed buffer.
        base: BufName,
        /// The view.
        alias: BufName,
    },
    /// Define a kernel (the definition itself is in [`crate::ir::Program::kernels`]).
    KernelDefinition {
        /// The kernel.
        kernel: KernelName,
    },
    /// Launch or call a defined kernel.
    KernelCall(KernelCall),
    /// Bind a named size expression before a kernel uses it (`ks0 = s0*s1`,
    /// `triton_poi_fused_add_0_xnumel = 4*s0`).
    SymbolicCallArg {
        /// The bound name.
        symbol: Symbol,
        /// Its value.
        expr: SymExpr,
    },
    /// Call an extern (ATen or fallback) op that returns a fresh result.
    ExternKernelAlloc(ExternCall),
    /// Call an `out=` variant of an op writing into a preallocated buffer.
    ExternKernelOut {
        /// The call, without the `out` argument.
        #[serde(flatten)]
        call: ExternCall,
        /// The destination.
        out: BufName,
    },
    /// Call the `.out` variant of a custom op with several results, each
    /// preallocated and passed by keyword (Inductor 2.15 and later,
    /// `ExternKernelMultiOutLine`: `buf3 = torch.ops.mylib.pair.out(arg0_1,
    /// out0=buf1, out1=buf2)`).
    ExternKernelMultiOut(ExternMultiOut),
    /// Extract an element of a multi-output result (`buf3 = buf2[0]`).
    MultiOutput(MultiOutput),
    /// `aten.index_put_(target, indices, values, accumulate)` fallback.
    IndexPutFallback(IndexPutFallback),
    /// `scatter_` / `scatter_reduce_` fallback.
    ScatterFallback(ScatterFallback),
    /// Bind a symbol from a one-element tensor's value (`u0 = buf0.item()`).
    DynamicScalar(DynamicScalar),
    /// Bind unbacked symbols from the output of an extern/fallback op.
    UnbackedSymbolDefs {
        /// The op's result (a tensor or a multi-output value).
        source: BufName,
        /// Symbol -> how to reach its value from `source`, in binding order.
        bindings: IndexMap<Symbol, KeyPath>,
    },
    /// `torch.cond`: run one of two subgraphs on a device predicate.
    Conditional(Conditional),
    /// `torch.cond` or `torch.switch` as Inductor 2.14 and later lower them
    /// (`ir.Switch`): run the subgraph a selector picks.
    Switch(Switch),
    /// `torch.while_loop` over a cond and a body subgraph.
    WhileLoop(WhileLoop),
    /// Enter a device guard.
    EnterDeviceContext {
        /// The device index.
        device_index: u32,
        /// The user streams the guarded lines may enter (Inductor 2.12 and
        /// later, `EnterDeviceContextManagerWithStreamInfoLine`); `None` for
        /// a plain guard.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        streams: Option<DeviceStreams>,
    },
    /// Leave the innermost device guard.
    ExitDeviceContext,
    /// Enter a scope: the lines up to the matching [`Line::ExitScope`] run on
    /// a side stream, allocate from a memory pool, or form a kernel-profile
    /// block.
    EnterScope(Scope),
    /// Leave the innermost scope, which must be of this kind.
    ExitScope {
        /// The kind of scope closed.
        scope: ScopeKind,
    },
    /// A comment, without its `#`/`//` prefix.
    Comment {
        /// The text (may be empty).
        text: String,
    },
    /// Check a tensor's sizes and strides (`assert_size_stride`), and its
    /// dtype where one is given (`assert_tensor_metadata`).
    AssertSizeStride(AssertSizeStride),
    /// Check several tensors' sizes and strides at once
    /// (`assert_size_stride_grouped`, Inductor 2.14 and later: the inputs a
    /// kernel is the first to use).
    AssertSizeStrideGrouped(AssertSizeStrideGrouped),
    /// Fail unless an integer divisor is non-zero (Inductor's C++ wrapper,
    /// 2.13 and later: `AOTI_TORCH_CHECK(d != 0, "Integer <op> by zero")`).
    AssertDivByZero {
        /// The divisor.
        divisor: SymExpr,
        /// The operation named in the message (`division`, `modulo`, ...).
        context: String,
    },
    /// Check a tensor's data pointer alignment (`assert_alignment`).
    AssertAlignment {
        /// The checked tensor.
        buffer: BufName,
        /// Alignment in bytes.
        alignment: u32,
        /// The op that produced it (for the message), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<String>,
    },
    /// Fail unless every element of a tensor is finite (Inductor's
    /// `config.nan_asserts`: `assert not buf.isnan().any().item()` and the
    /// same with `isinf`, for each graph input and each output).
    AssertFinite {
        /// The checked tensor.
        buffer: BufName,
    },
    /// Fail at run time unless `cond` holds.
    RuntimeAssert {
        /// The condition (a boolean expression).
        cond: SymExpr,
        /// The error message.
        message: String,
        /// The IR node's own name (printed as `<name> = None`), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<BufName>,
    },
    /// Allocate a symmetric-memory communication buffer.
    CommBufferAllocate {
        /// The buffer.
        buffer: BufName,
        /// Buffer kind (`symm_mem`).
        comm_kind: String,
        /// Process group name.
        group: String,
    },
    /// Free a communication buffer.
    CommBufferFree {
        /// The buffer.
        buffer: BufName,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn yes() -> bool {
    true
}

impl Line {
    /// The line kind's name (its keyword in the text form).
    pub fn kind(&self) -> &'static str {
        match self {
            Line::Allocate { .. } => "alloc",
            Line::FreeIfNotReused { .. } => "free_if_not_reused",
            Line::Free { .. } => "free",
            Line::Reuse { .. } => "reuse",
            Line::Reinterpret { .. } => "reinterpret",
            Line::KernelDefinition { .. } => "define",
            Line::KernelCall(_) => "call",
            Line::SymbolicCallArg { .. } => "let",
            Line::ExternKernelAlloc(_) => "extern",
            Line::ExternKernelOut { .. } => "extern_out",
            Line::ExternKernelMultiOut(_) => "extern_multi_out",
            Line::MultiOutput { .. } => "get",
            Line::IndexPutFallback { .. } => "index_put",
            Line::ScatterFallback(_) => "scatter",
            Line::DynamicScalar { .. } => "item",
            Line::UnbackedSymbolDefs { .. } => "bind",
            Line::Conditional(_) => "cond",
            Line::Switch(_) => "switch",
            Line::WhileLoop(_) => "while",
            Line::EnterDeviceContext { .. } => "device",
            Line::ExitDeviceContext => "end_device",
            Line::EnterScope(scope) => scope.keyword(),
            Line::ExitScope { scope } => scope.exit_keyword(),
            Line::Comment { .. } => "comment",
            Line::AssertSizeStride { .. } => "assert_size_stride",
            Line::AssertSizeStrideGrouped(_) => "assert_size_stride_grouped",
            Line::AssertDivByZero { .. } => "assert_div_by_zero",
            Line::AssertAlignment { .. } => "assert_alignment",
            Line::AssertFinite { .. } => "assert_finite",
            Line::RuntimeAssert { .. } => "assert",
            Line::CommBufferAllocate { .. } => "comm_alloc",
            Line::CommBufferFree { .. } => "comm_free",
        }
    }

    /// The buffers the line defines (a name comes into being): allocations,
    /// a reuse's or reinterpret's new name, an extern op's result, a
    /// multi-output element, a cond's or while loop's result. The one list
    /// the validator and the back ends share.
    pub fn defines(&self) -> Option<&BufName> {
        match self {
            Line::Allocate { buffer } | Line::CommBufferAllocate { buffer, .. } => Some(buffer),
            Line::Reuse { new, .. } => Some(new),
            Line::Reinterpret { alias, .. } => Some(alias),
            Line::ExternKernelAlloc(call)
            | Line::ExternKernelOut { call, .. }
            | Line::ExternKernelMultiOut(ExternMultiOut { call, .. }) => call.result.as_ref(),
            Line::MultiOutput(m) => Some(&m.result),
            Line::Conditional(c) => Some(&c.result),
            Line::Switch(s) => Some(&s.result),
            Line::WhileLoop(w) => Some(&w.result),
            _ => None,
        }
    }

    /// Every buffer the line names other than the one it defines
    /// ([`Line::defines`]), in the order the line names them: what it reads,
    /// writes, frees, views or passes on (each occurrence once per mention).
    pub fn uses(&self) -> SmallVec<[&BufName; 4]> {
        let mut out: SmallVec<[&BufName; 4]> = SmallVec::new();
        fn args<'l>(out: &mut SmallVec<[&'l BufName; 4]>, values: impl Iterator<Item = &'l ArgValue>) {
            for v in values {
                v.for_each_buffer(&mut |b| out.push(b));
            }
        }
        match self {
            Line::Allocate { .. }
            | Line::CommBufferAllocate { .. }
            | Line::KernelDefinition { .. }
            | Line::SymbolicCallArg { .. }
            | Line::EnterDeviceContext { .. }
            | Line::ExitDeviceContext
            | Line::EnterScope(_)
            | Line::ExitScope { .. }
            | Line::Comment { .. }
            | Line::RuntimeAssert { .. }
            | Line::AssertDivByZero { .. } => {}
            Line::FreeIfNotReused { buffer, .. }
            | Line::Free { buffer }
            | Line::CommBufferFree { buffer }
            | Line::AssertAlignment { buffer, .. }
            | Line::AssertFinite { buffer } => out.push(buffer),
            Line::AssertSizeStride(a) => out.push(&a.buffer),
            Line::AssertSizeStrideGrouped(g) => out.extend(g.asserts.iter().map(|a| &a.buffer)),
            Line::Reuse { old, .. } => out.push(old),
            Line::Reinterpret { base, .. } => out.push(base),
            Line::KernelCall(call) => args(&mut out, call.args.iter().map(|a| &a.value)),
            Line::ExternKernelAlloc(call) => args(&mut out, call.args.iter().chain(call.kwargs.values())),
            Line::ExternKernelOut { call, out: o } => {
                args(&mut out, call.args.iter().chain(call.kwargs.values()));
                out.push(o);
            }
            Line::ExternKernelMultiOut(m) => {
                args(&mut out, m.call.args.iter().chain(m.call.kwargs.values()));
                out.extend(m.outs.values());
            }
            Line::MultiOutput(MultiOutput { source, .. })
            | Line::DynamicScalar(DynamicScalar { source, .. })
            | Line::UnbackedSymbolDefs { source, .. } => out.push(source),
            Line::IndexPutFallback(p) => {
                out.push(&p.target);
                out.extend(p.indices.iter().flatten());
                out.push(&p.values);
            }
            Line::ScatterFallback(s) => {
                out.push(&s.target);
                out.push(&s.index);
                args(&mut out, std::iter::once(&s.src));
            }
            Line::Conditional(c) => {
                if let Predicate::Tensor(b) = &c.predicate {
                    out.push(b);
                }
                out.extend(&c.operands);
            }
            Line::Switch(s) => {
                if let Predicate::Tensor(b) = &s.selector {
                    out.push(b);
                }
                out.extend(&s.operands);
            }
            Line::WhileLoop(w) => out.extend(w.carried.iter().chain(&w.additional)),
        }
        out
    }

    /// The symbols the line itself binds: an unbacked binding's symbols, an
    /// `item()` read's, a `let` line's (not those of the subgraphs a cond or
    /// while loop runs: [`crate::ir::GraphInfo::binds`] has those).
    pub fn binds(&self) -> impl Iterator<Item = &Symbol> + '_ {
        let (many, one) = match self {
            Line::UnbackedSymbolDefs { bindings, .. } => (Some(bindings.keys()), None),
            Line::DynamicScalar(DynamicScalar { symbol, .. }) | Line::SymbolicCallArg { symbol, .. } => {
                (None, Some(symbol))
            }
            _ => (None, None),
        };
        many.into_iter().flatten().chain(one)
    }

    /// The subgraphs the line runs: a cond's branches (true, false), a
    /// switch's branches in selector order, a while loop's cond and body
    /// graphs; none for other lines.
    pub fn subgraphs(&self) -> impl Iterator<Item = &GraphName> + '_ {
        let pair = match self {
            Line::Conditional(c) => Some([&c.true_graph, &c.false_graph]),
            Line::WhileLoop(w) => Some([&w.cond_graph, &w.body_graph]),
            _ => None,
        };
        let branches = match self {
            Line::Switch(s) => s.branches.as_slice(),
            _ => &[],
        };
        pair.into_iter().flatten().chain(branches)
    }

    /// The extern op call of an `extern`, `extern_out` or
    /// `extern_multi_out` line (without its `out=` tensors).
    pub fn extern_call(&self) -> Option<&ExternCall> {
        match self {
            Line::ExternKernelAlloc(call)
            | Line::ExternKernelOut { call, .. }
            | Line::ExternKernelMultiOut(ExternMultiOut { call, .. }) => Some(call),
            _ => None,
        }
    }

    /// The kernel the line defines or calls.
    pub fn kernel(&self) -> Option<&KernelName> {
        match self {
            Line::KernelDefinition { kernel } => Some(kernel),
            Line::KernelCall(call) => Some(&call.kernel),
            _ => None,
        }
    }
}

/// A kernel launch or call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelCall {
    /// The called kernel.
    pub kernel: KernelName,
    /// Arguments in call order. For Triton kernels these are Inductor's
    /// `call_args`: the non-constexpr parameters in order (constants included as
    /// literals), then any extra launcher args. A named argument binds a
    /// parameter by name instead of position.
    pub args: Vec<CallArg>,
    /// The device the call runs on (its stream is `stream<index>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<Device>,
}

/// One kernel call argument.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallArg {
    /// The kernel parameter it binds, when the producer knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The value.
    pub value: ArgValue,
}

impl CallArg {
    /// A positional argument.
    pub fn positional(value: ArgValue) -> Self {
        CallArg { name: None, value }
    }
}

/// A value passed to a kernel or an extern op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ArgValue {
    /// A tensor.
    Buffer(BufName),
    /// A symbolic or literal integer.
    Expr(SymExpr),
    /// A float literal.
    Float(#[serde(with = "json_float")] f64),
    /// A boolean literal.
    Bool(bool),
    /// `None`.
    None,
    /// A string literal.
    Str(String),
    /// A dtype (`torch.float32`).
    #[serde(rename = "dtype")]
    DType(DType),
    /// A device.
    Device(Device),
    /// A list (printed `[a, b]`, kept nested: never flattened).
    List(Vec<ArgValue>),
}

impl ArgValue {
    /// Calls `f` on every value inside the value that is not a list, in
    /// order (the value itself when it is not a list).
    fn for_each_leaf<'s>(&'s self, f: &mut dyn FnMut(&'s ArgValue)) {
        // An explicit stack: nesting depth costs no call stack.
        let mut stack = vec![self];
        while let Some(v) = stack.pop() {
            match v {
                ArgValue::List(items) => stack.extend(items.iter().rev()),
                leaf => f(leaf),
            }
        }
    }

    /// Calls `f` on every buffer named inside the value.
    pub fn for_each_buffer<'s>(&'s self, f: &mut dyn FnMut(&'s BufName)) {
        self.for_each_leaf(&mut |v| {
            if let ArgValue::Buffer(b) = v {
                f(b)
            }
        });
    }

    /// How deeply lists nest in the value (0 for a scalar, 1 for a flat list).
    pub fn depth(&self) -> usize {
        let mut deepest = 0;
        let mut stack = vec![(self, 0usize)];
        while let Some((v, d)) = stack.pop() {
            if let ArgValue::List(items) = v {
                deepest = deepest.max(d + 1);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
        }
        deepest
    }

    /// Calls `f` on every expression inside the value.
    pub fn for_each_expr(&self, f: &mut dyn FnMut(&SymExpr)) {
        self.for_each_leaf(&mut |v| {
            if let ArgValue::Expr(e) = v {
                f(e)
            }
        });
    }
}

/// A call of an extern op (`torch.ops.aten.topk.default`, `extern_kernels.mm`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExternCall {
    /// The result's name; `None` for ops without a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<BufName>,
    /// The op, as Inductor's Python wrapper names it
    /// (`extern_kernels.addmm`, `torch.ops.aten.nonzero.default`, `aten._jagged_to_padded_dense_forward`).
    pub op: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<ArgValue>,
    /// Keyword arguments, in order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub kwargs: IndexMap<String, ArgValue>,
}

impl ExternCall {
    /// The ATen op name without namespace prefix and overload
    /// (`extern_kernels.addmm` -> `addmm`, `torch.ops.aten.topk.default` -> `topk`).
    pub fn base_name(&self) -> &str {
        let s = self.op.as_str();
        let s = s
            .strip_prefix("torch.ops.")
            .or_else(|| s.strip_prefix("extern_kernels."))
            .unwrap_or(s);
        let s = s.strip_prefix("aten.").unwrap_or(s);
        let mut parts = s.split('.');
        parts.next().unwrap_or(s)
    }
}

/// A custom op's multi-output `.out` call ([`Line::ExternKernelMultiOut`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExternMultiOut {
    /// The call without its outputs; `result` names what the op returns
    /// (Inductor assigns it, and nothing reads it but `get` lines).
    #[serde(flatten)]
    pub call: ExternCall,
    /// The preallocated outputs by keyword, in the op's schema order (passed
    /// after the call's own keyword arguments).
    pub outs: IndexMap<String, BufName>,
}

impl ExternMultiOut {
    /// The call as the op sees it: its arguments, then its keyword
    /// arguments with the outputs last (what the Python wrapper prints and
    /// every back end passes).
    pub fn call_with_outs(&self) -> ExternCall {
        let mut call = self.call.clone();
        for (k, b) in &self.outs {
            call.kwargs.insert(k.clone(), ArgValue::Buffer(b.clone()));
        }
        call
    }
}

/// One index level of a multi-output extraction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "index", rename_all = "snake_case")]
pub enum MultiIndex {
    /// `[i]` on a list.
    List(i64),
    /// `[i]` on a tuple.
    Tuple(i64),
    /// `['k']` on a dict.
    Dict(String),
}

/// Extract an element of a multi-output result (`buf3 = buf2[0]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MultiOutput {
    /// The extracted value's name.
    pub result: BufName,
    /// The multi-output value.
    pub source: BufName,
    /// Indices from outermost to innermost; empty means the whole value.
    #[serde(default, skip_serializing_if = "SmallVec::is_empty")]
    pub indices: SmallVec<[MultiIndex; 2]>,
}

/// `aten.index_put_(target, indices, values, accumulate)` fallback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexPutFallback {
    /// The tensor written in place.
    pub target: BufName,
    /// One index tensor per leading dimension, `None` for a full slice.
    pub indices: Vec<Option<BufName>>,
    /// The values.
    pub values: BufName,
    /// Add instead of overwrite.
    pub accumulate: bool,
}

impl IndexPutFallback {
    /// The op the line runs, as the interpreter and every back end that
    /// calls it as an extern op name it (`torch.ops.aten.index_put_.default`).
    pub fn op() -> String {
        super::op::target(super::op::key::INDEX_PUT, "default")
    }

    /// The line as the extern call of [`IndexPutFallback::op`] (target,
    /// indices with `None` for a full slice, values, accumulate), with no
    /// result: the op writes `target` in place.
    pub fn extern_call(&self) -> ExternCall {
        let indices = self
            .indices
            .iter()
            .map(|i| i.clone().map_or(ArgValue::None, ArgValue::Buffer));
        ExternCall {
            result: None,
            op: Self::op(),
            args: vec![
                ArgValue::Buffer(self.target.clone()),
                ArgValue::List(indices.collect()),
                ArgValue::Buffer(self.values.clone()),
                ArgValue::Bool(self.accumulate),
            ],
            kwargs: IndexMap::new(),
        }
    }
}

/// Bind a symbol from a one-element tensor's value (`u0 = buf0.item()`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DynamicScalar {
    /// The bound symbol.
    pub symbol: Symbol,
    /// The one-element tensor.
    pub source: BufName,
    /// Post-processing of the value: empty, `[ConvertInt]` or `[DivideBy(d)]`.
    #[serde(default, skip_serializing_if = "SmallVec::is_empty")]
    pub keypath: KeyPath,
    /// The IR node's own name (printed as `<name> = None`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<BufName>,
}

/// Check a tensor's sizes and strides (`assert_size_stride`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssertSizeStride {
    /// The checked tensor.
    pub buffer: BufName,
    /// Expected sizes.
    pub size: SmallVec<[SymExpr; 4]>,
    /// Expected strides.
    pub stride: SmallVec<[SymExpr; 4]>,
    /// The dtype it must have (Inductor 2.14+'s `assert_tensor_metadata` on
    /// an extern op's result), if checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DType>,
    /// The op that produced it (for the message; `input` for a graph
    /// input), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// `assert_size_stride_grouped((a, b), (sa, sb), (ta, tb), op)`: one
/// message context for several tensors' checks, each as
/// [`AssertSizeStride`] checks it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssertSizeStrideGrouped {
    /// The checks, in the order Inductor lists them.
    pub asserts: Vec<SizeStrideCheck>,
    /// The op that produced the tensors (`input` for graph inputs), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// One tensor's check in an [`AssertSizeStrideGrouped`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeStrideCheck {
    /// The checked tensor.
    pub buffer: BufName,
    /// Expected sizes.
    pub size: SmallVec<[SymExpr; 4]>,
    /// Expected strides.
    pub stride: SmallVec<[SymExpr; 4]>,
}

impl AssertSizeStrideGrouped {
    /// Each member as a stand-alone check with the group's context: what
    /// the group checks, one tensor at a time (Inductor's C++ wrapper
    /// writes a grouped assert this way).
    pub fn members(&self) -> impl Iterator<Item = AssertSizeStride> + '_ {
        self.asserts.iter().map(|a| AssertSizeStride {
            buffer: a.buffer.clone(),
            size: a.size.clone(),
            stride: a.stride.clone(),
            dtype: None,
            context: self.context.clone(),
        })
    }
}

/// `scatter_(target, dim, index, src, reduce=...)` / `scatter_reduce_`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScatterFallback {
    /// The op (`aten.scatter_.src`, `aten.scatter_.value`, `aten.scatter_reduce_.two`).
    pub op: String,
    /// The tensor written in place.
    pub target: BufName,
    /// The scatter dimension.
    pub dim: i64,
    /// The index tensor.
    pub index: BufName,
    /// The source: a tensor or a scalar.
    pub src: ArgValue,
    /// `reduce=` (`add`, `multiply`, `sum`, `prod`, `mean`, `amax`, `amin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce: Option<String>,
    /// `include_self=` of scatter_reduce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_self: Option<bool>,
}

impl ScatterFallback {
    /// The line as the extern call of its op as the interpreter makes it
    /// (target, dim, index, src; `reduce=` and `include_self=` when given),
    /// with no result: the op writes `target` in place.
    pub fn extern_call(&self) -> ExternCall {
        let mut kwargs = IndexMap::new();
        if let Some(r) = &self.reduce {
            kwargs.insert("reduce".to_string(), ArgValue::Str(r.clone()));
        }
        if let Some(i) = self.include_self {
            kwargs.insert("include_self".to_string(), ArgValue::Bool(i));
        }
        ExternCall {
            result: None,
            op: self.op.clone(),
            args: vec![
                ArgValue::Buffer(self.target.clone()),
                ArgValue::Expr(SymExpr::Int(self.dim)),
                ArgValue::Buffer(self.index.clone()),
                self.src.clone(),
            ],
            kwargs,
        }
    }
}

/// The predicate of a conditional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Predicate {
    /// A one-element boolean tensor, read back from the device.
    Tensor(BufName),
    /// A symbolic boolean.
    Expr(SymExpr),
}

/// `torch.cond(pred, true_fn, false_fn, operands)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conditional {
    /// The multi-output result (`buf2`; elements extracted by `MultiOutput` lines).
    pub result: BufName,
    /// The branch selector.
    pub predicate: Predicate,
    /// Subgraph run when the predicate holds.
    pub true_graph: GraphName,
    /// Subgraph run otherwise.
    pub false_graph: GraphName,
    /// Operands passed to the chosen subgraph, in its input order.
    pub operands: Vec<BufName>,
}

/// `ir.Switch`: how Inductor 2.14 and later lower `torch.cond` (two
/// branches, false first) and `torch.switch` (n branches).
///
/// The selector is read once as an integer (`int(pred.item())`; a boolean
/// is 0 or 1); selector `k` runs `branches[k]` for `k` below the last
/// index, and any other value runs the last branch (Inductor's wrapper
/// writes `if sel == 0: ... elif sel == k: ... else: ...`; `torch.switch`
/// clamps the index into range before it reaches Inductor).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Switch {
    /// The multi-output result (elements extracted by `MultiOutput` lines).
    pub result: BufName,
    /// The selector: a one-element integer or boolean tensor, or an expression.
    pub selector: Predicate,
    /// The branches in selector order (at least one).
    pub branches: Vec<GraphName>,
    /// Operands passed to the chosen branch, in its input order.
    pub operands: Vec<BufName>,
    /// Whether this is a `torch.cond` (two branches: false, then true).
    #[serde(default, skip_serializing_if = "is_false")]
    pub cond: bool,
}

impl Switch {
    /// The index of the branch selector value `value` runs
    /// ([`switch_branch`]).
    pub fn branch_index(&self, value: i64) -> usize {
        switch_branch(self.branches.len(), value)
    }
}

/// Which of `branches` branches a switch whose selector is `value` runs: the
/// one rule every back end and the interpreter share. `value` below the last
/// index runs that branch; any other value, negative ones included, the last
/// (Inductor's `if sel == 0: ... elif sel == k: ... else: ...`).
pub fn switch_branch(branches: usize, value: i64) -> usize {
    let last = branches.saturating_sub(1);
    usize::try_from(value).ok().filter(|k| *k < last).unwrap_or(last)
}

/// `torch.while_loop(cond_fn, body_fn, carried_inputs, additional_inputs)`.
///
/// The cond graph runs first; while its one output is true the body runs and
/// its outputs become the carried values, then the cond graph runs again. The
/// result holds the final carried values; when the condition is false from the
/// start they are the initial values (eager `while_loop` returns those; the
/// Python lowering copies them with `.clone()` as Inductor's Python wrapper
/// does, the C++ wrappers alias them as Inductor's C++ wrapper does).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhileLoop {
    /// The multi-output result holding the final carried values.
    pub result: BufName,
    /// Subgraph computing the loop condition (one boolean output).
    pub cond_graph: GraphName,
    /// Subgraph computing the next carried values.
    pub body_graph: GraphName,
    /// Loop-carried inputs (initial values).
    pub carried: Vec<BufName>,
    /// Inputs passed unchanged to both subgraphs after the carried ones: buffers,
    /// or symbols (`s77`) where the subgraphs' matching input is a symbol input.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional: Vec<BufName>,
}

/// How to reach an unbacked value from an op's output (`compute_unbacked_bindings`).
pub type KeyPath = SmallVec<[KeyEntry; 4]>;

/// One step of a [`KeyPath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum KeyEntry {
    /// `.size()`, `.stride()` or `.storage_offset()`; a following `Index` picks the dimension.
    CallMethod(TensorMethod),
    /// `[i]` into a tuple/list (or the dimension after a method).
    Index(i64),
    /// The value is `d * u`: divide by `d` (exact; checked at run time).
    DivideBy(i64),
    /// The value is a boolean `u == 1`: convert to 0/1.
    ConvertInt,
    /// An attribute of a tensor subclass (`values`, `offsets`).
    InnerTensor(String),
}

/// Tensor methods in key paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorMethod {
    /// `size`
    Size,
    /// `stride`
    Stride,
    /// `storage_offset`
    StorageOffset,
}

impl TensorMethod {
    /// The method name.
    pub fn as_str(self) -> &'static str {
        match self {
            TensorMethod::Size => "size",
            TensorMethod::Stride => "stride",
            TensorMethod::StorageOffset => "storage_offset",
        }
    }
}

/// Writes a key path in the text form: `.size()[0]`, `[1]`, `//2`, `.to_int()`, `.values`.
pub struct KeyPathText<'a>(pub &'a [KeyEntry]);

impl fmt::Display for KeyPathText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in self.0 {
            match e {
                KeyEntry::CallMethod(m) => write!(f, ".{}()", m.as_str())?,
                KeyEntry::Index(i) => write!(f, "[{i}]")?,
                KeyEntry::DivideBy(d) => write!(f, "//{d}")?,
                KeyEntry::ConvertInt => f.write_str(".to_int()")?,
                KeyEntry::InnerTensor(a) => write!(f, ".{a}")?,
            }
        }
        Ok(())
    }
}

/// Writes the indices of an `index_put` line as the text form and Python
/// both list them: buffer names and `None`, comma-separated (`x, None`).
pub struct IndexNames<'a>(pub &'a [Option<BufName>]);

impl fmt::Display for IndexNames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, index) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match index {
                Some(b) => write!(f, "{b}")?,
                None => f.write_str("None")?,
            }
        }
        Ok(())
    }
}

/// Writes a float so that it reads back as the same float and always looks like
/// a float (`1.0`, `1.5e-07`, `inf`, `-inf`, `nan`).
pub fn write_float(f: &mut dyn fmt::Write, v: f64) -> fmt::Result {
    if v.is_nan() {
        f.write_str("nan")
    } else if v.is_infinite() {
        f.write_str(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        let s = format!("{v:?}");
        f.write_str(&s)
    }
}

/// Writes a string as a Python single-quoted literal.
pub struct PyStr<'a>(pub &'a str);

impl fmt::Display for PyStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'")?;
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '\'' => f.write_str("\\'")?,
                '\n' => f.write_str("\\n")?,
                '\t' => f.write_str("\\t")?,
                '\r' => f.write_str("\\r")?,
                c if (c as u32) < 0x20 => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("'")
    }
}

/// Serde for floats that JSON cannot hold as numbers: finite values are
/// numbers; infinities and NaN are the strings `"inf"`, `"-inf"`, `"nan"`
/// (which is also how Python's `json` module spells them without `allow_nan`).
pub(crate) mod json_float {
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Num(f64),
            Text(String),
        }
        match Repr::deserialize(d)? {
            Repr::Num(v) => Ok(v),
            Repr::Text(t) => match t.as_str() {
                "inf" | "Infinity" => Ok(f64::INFINITY),
                "-inf" | "-Infinity" => Ok(f64::NEG_INFINITY),
                "nan" | "NaN" => Ok(f64::NAN),
                other => Err(de::Error::custom(format!(
                    "expected a float, `inf`, `-inf` or `nan`, found `{other}`"
                ))),
            },
        }
    }
}
