//! Programs, graphs, and their declaration tables.

use super::kernel::KernelDef;
use super::line::{AssertSizeStride, Line};
use super::types::{BufName, GraphName, KernelName, Layout};
use crate::sym::{SymExpr, Symbol};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// The JSON format version this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// A whole wrapper program: the top-level `call` graph, its subgraphs, and the
/// tables every graph shares (symbols, kernels, constants).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// Always [`FORMAT_VERSION`] when written by this crate.
    pub format_version: u32,
    /// Every symbol the program mentions, in declaration order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub symbols: IndexMap<Symbol, SymbolDecl>,
    /// Constants (parameters, buffers) the wrapper reads by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub constants: IndexMap<BufName, Layout>,
    /// Kernel definitions, in definition order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub kernels: IndexMap<KernelName, KernelDef>,
    /// The top-level graph (Inductor's `call`).
    pub main: Graph,
    /// Subgraphs of conditionals and loops, by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub subgraphs: IndexMap<GraphName, Graph>,
}

impl Program {
    /// An empty program.
    pub fn new() -> Self {
        Program {
            format_version: FORMAT_VERSION,
            symbols: IndexMap::new(),
            constants: IndexMap::new(),
            kernels: IndexMap::new(),
            main: Graph::default(),
            subgraphs: IndexMap::new(),
        }
    }

    /// Reads the JSON form.
    pub fn from_json(text: &str) -> Result<Program, FormatError> {
        #[derive(Deserialize)]
        struct Probe {
            format_version: Option<u32>,
        }
        let probe: Probe = serde_json::from_str(text).map_err(|e| FormatError::Json(e.to_string()))?;
        match probe.format_version {
            Some(FORMAT_VERSION) => {}
            Some(v) => {
                return Err(FormatError::Version {
                    found: v,
                    supported: FORMAT_VERSION,
                })
            }
            None => return Err(FormatError::Json("missing field `format_version`".into())),
        }
        serde_json::from_str(text).map_err(|e| FormatError::Json(e.to_string()))
    }

    /// Writes the JSON form (pretty-printed).
    pub fn to_json(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Looks up a graph by name; `None` names the main graph.
    pub fn graph(&self, name: Option<&GraphName>) -> Option<&Graph> {
        match name {
            None => Some(&self.main),
            Some(n) => self.subgraphs.get(n),
        }
    }
}

impl Default for Program {
    fn default() -> Self {
        Program::new()
    }
}

/// Errors reading a serialized program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Malformed JSON or a field of the wrong shape.
    #[error("invalid program JSON: {0}")]
    Json(String),
    /// A `format_version` this crate does not read.
    #[error("unsupported format_version {found} (this wrapir reads version {supported})")]
    Version {
        /// The version in the file.
        found: u32,
        /// The version this crate reads.
        supported: u32,
    },
}

/// One function of the wrapper: inputs, buffer table, lines, outputs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    /// Inputs in call order.
    #[serde(default)]
    pub inputs: Vec<GraphInput>,
    /// Every buffer the graph's lines name (inputs included), with its layout.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub buffers: IndexMap<BufName, BufferDecl>,
    /// The program, in order.
    #[serde(default)]
    pub lines: Vec<Line>,
    /// Returned values, in order.
    #[serde(default)]
    pub outputs: Vec<GraphOutput>,
}

impl Graph {
    /// The names of the tensor inputs, in call order.
    pub fn tensor_inputs(&self) -> impl Iterator<Item = &BufName> {
        self.inputs.iter().filter_map(|i| match i {
            GraphInput::Tensor { name } => Some(name),
            GraphInput::Symbol { .. } | GraphInput::SymExpr { .. } => None,
        })
    }

    /// The buffers the graph's own `assert_size_stride` lines (single or
    /// grouped) check, in order.
    pub fn asserted_buffers(&self) -> impl Iterator<Item = &BufName> {
        self.lines.iter().flat_map(|l| {
            let (one, group) = match l {
                Line::AssertSizeStride(AssertSizeStride { buffer, .. }) => (Some(buffer), &[][..]),
                Line::AssertSizeStrideGrouped(g) => (None, g.asserts.as_slice()),
                _ => (None, &[][..]),
            };
            one.into_iter().chain(group.iter().map(|a| &a.buffer))
        })
    }

    /// The layout of a tensor buffer, if it is declared as a tensor.
    pub fn layout(&self, name: &BufName) -> Option<&Layout> {
        match self.buffers.get(name).map(|d| &d.kind) {
            Some(BufferKind::Tensor(l)) => Some(l),
            _ => None,
        }
    }
}

/// A graph input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GraphInput {
    /// A tensor; its layout is in the buffer table under `name`.
    Tensor {
        /// The input's name (`arg0_1`).
        name: BufName,
    },
    /// A symbolic integer input (`s0` passed as a Python int).
    Symbol {
        /// The input's name in the argument list (often the symbol itself).
        name: BufName,
        /// The symbol it binds.
        symbol: Symbol,
    },
    /// An integer input whose value is an expression of symbols
    /// (`2*s0 + 1`): Inductor's compound graph input, a branch closing over a
    /// size expression. In a subgraph its symbols come from the caller, as a
    /// tensor input's do; in `main` it binds the one symbol no other input
    /// determines by solving, as a tensor input's compound dimension does
    /// (affine only: "Cannot solve input expression ..." otherwise).
    SymExpr {
        /// The input's name in the argument list.
        name: BufName,
        /// Its value.
        expr: SymExpr,
    },
}

impl GraphInput {
    /// The input's name in the argument list.
    pub fn name(&self) -> &BufName {
        match self {
            GraphInput::Tensor { name } | GraphInput::Symbol { name, .. } | GraphInput::SymExpr { name, .. } => name,
        }
    }

    /// Whether the input is an integer (a symbol or an expression of
    /// symbols), which a caller passes as a symbol.
    pub fn is_integer(&self) -> bool {
        !matches!(self, GraphInput::Tensor { .. })
    }
}

/// A returned value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum GraphOutput {
    /// A buffer.
    Buffer(BufName),
    /// A size returned as a value (`ShapeAsConstantBuffer`).
    Expr(SymExpr),
    /// `None`.
    None,
}

/// A declared buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BufferDecl {
    /// What the name holds.
    #[serde(flatten)]
    pub kind: BufferKind,
}

/// What a buffer name holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "layout", rename_all = "snake_case")]
pub enum BufferKind {
    /// A strided tensor.
    Tensor(Layout),
    /// A multi-output value (tuple/list/dict of tensors) of an extern op or a
    /// conditional; its elements are extracted by `MultiOutput` lines.
    Multi,
}

/// A declared symbol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolDecl {
    /// Where its value comes from.
    pub kind: SymbolKind,
    /// Known inclusive bounds (`None` = unbounded on that side).
    #[serde(default, skip_serializing_if = "ValueRange::is_unbounded")]
    pub range: ValueRange,
    /// A representative value (size hint) for planning and the meta backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<i64>,
}

/// Where a symbol's value comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymbolKind {
    /// A size of a graph input (`s0`); bound from the inputs.
    Backed,
    /// A data-dependent size (`u0`); bound by `UnbackedSymbolDefs` or `DynamicScalar`.
    Unbacked,
    /// A named expression (`ps0`, `ks0`, `*_xnumel`); bound by `SymbolicCallArg`.
    Precomputed,
    /// A float read from a floating tensor (`zuf0 = buf0.item()`, Inductor's
    /// `zuf<k>`); bound by `DynamicScalar`. Never part of a size or another
    /// expression: it is passed whole to kernels and extern ops, or returned.
    /// Its `range` and `hint` are unused.
    UnbackedFloat,
}

impl SymbolKind {
    /// Every kind, in declaration order.
    pub const ALL: [SymbolKind; 4] = [
        SymbolKind::Backed,
        SymbolKind::Unbacked,
        SymbolKind::Precomputed,
        SymbolKind::UnbackedFloat,
    ];

    /// Its name in program files and messages (`backed`, `unbacked_float`),
    /// as `program.json` spells it too.
    pub fn name(&self) -> &'static str {
        match self {
            SymbolKind::Backed => "backed",
            SymbolKind::Unbacked => "unbacked",
            SymbolKind::Precomputed => "precomputed",
            SymbolKind::UnbackedFloat => "unbacked_float",
        }
    }
}

/// Inclusive bounds on a symbol's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRange {
    /// Lower bound; `None` for -infinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<i64>,
    /// Upper bound; `None` for +infinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<i64>,
}

impl ValueRange {
    /// `[lo, hi]`.
    pub fn new(lo: Option<i64>, hi: Option<i64>) -> Self {
        ValueRange { lo, hi }
    }

    /// No bounds.
    pub fn is_unbounded(&self) -> bool {
        self.lo.is_none() && self.hi.is_none()
    }

    /// `true` when `v` lies within the bounds.
    pub fn contains(&self, v: i64) -> bool {
        self.lo.is_none_or(|lo| v >= lo) && self.hi.is_none_or(|hi| v <= hi)
    }

    /// `true` when the range holds no value.
    pub fn is_empty(&self) -> bool {
        matches!((self.lo, self.hi), (Some(lo), Some(hi)) if lo > hi)
    }
}

impl std::fmt::Display for ValueRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.lo {
            Some(v) => write!(f, "[{v}, ")?,
            None => f.write_str("[-inf, ")?,
        }
        match self.hi {
            Some(v) => write!(f, "{v}]"),
            None => f.write_str("inf]"),
        }
    }
}
