//! FX lowering: a validated program as an [`fx::Graph`], following Inductor's
//! `FxConverter` (`wrapper_fxir.py`) with its known bugs fixed:
//!
//! * unbacked-symbol key paths consume exactly the entries they use
//!   (`.size()[0]//2` emits the `floordiv`); `ConvertInt`, `InnerTensor` and
//!   `DivideBy` (also on `item()`) are supported;
//! * nested multi-output indices are followed to the end;
//! * float and `None` kernel arguments are accepted;
//! * Triton arguments are matched to parameters by name (named call args) or
//!   by position over [`TritonMeta::call_params`], never by a zip that can
//!   misalign; constexprs come from `constants` or the config by name;
//! * `while_loop` is lowered (upstream cannot) and symbols a subgraph needs
//!   from its parent are lifted into extra operands.

use crate::fx::{self, Arg, KwargNames, Kwargs, Name, NodeId, Op, Placeholder, SymOp, Val};
use crate::ir::{
    ArgValue, BufName, BufferKind, ConstValue, GraphInput, GraphName, GraphOutput, IndexPutFallback, KernelBackend,
    KernelCall, KernelDef, KernelName, KeyEntry, Layout, Line, Location, MultiIndex, Predicate, Program, ProgramInfo,
    TensorMethod, TritonMeta,
};
use crate::sym::{CmpOp, SymExpr, Symbol};
use indexmap::IndexMap;
use rustc_hash::FxHashMap as HashMap;
use std::borrow::Cow;
use std::cell::RefCell;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::Arc;

mod inputs;
mod kernels;
mod lines;
mod state;
mod subgraphs;
mod values;

use state::*;

/// Options of the FX lowering.
#[derive(Clone, Debug)]
pub struct Options {
    /// Emit an `assert_size_stride` node per tensor input after its sizes are
    /// bound (what the Python wrapper checks at entry). Default `true`.
    pub assert_inputs: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { assert_inputs: true }
    }
}

pub use crate::lower::{Error, ErrorKind};

/// Lowers the main graph (and, nested, every subgraph it runs).
pub fn lower(info: &ProgramInfo<'_>, options: &Options) -> Result<fx::Graph, Error> {
    let memo = SubgraphMemo::default();
    let (graph, lifted) = GraphLowering::run(info, None, options, &memo)?;
    if let Some(s) = lifted.first() {
        return Err(Error::new(
            Location::Graph {
                graph: GraphName::new(crate::ir::MAIN_GRAPH),
            },
            ErrorKind::UnboundSymbol(s.clone()),
        ));
    }
    Ok(graph)
}

/// Lowers and prints in torch.fx's readable style.
pub fn write_string(info: &ProgramInfo<'_>, options: &Options) -> Result<String, Error> {
    Ok(lower(info, options)?.to_code())
}
