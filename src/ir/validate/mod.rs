//! The validator: checks a [`Program`] and returns [`ProgramInfo`], the only
//! input the lowerings accept.
//!
//! [`validate`] walks every graph once, in program order (the main graph first;
//! a subgraph when the first `Conditional`/`WhileLoop` that runs it is reached;
//! subgraphs nothing runs afterwards), and checks the rules of the module
//! documentation of [`crate::ir`]:
//!
//! * **Buffers.** Every buffer a line names is declared in its graph's buffer
//!   table (or is a program constant), is defined before it is used, is not used
//!   after it ends, is defined at most once and ended at most once. Tensor
//!   inputs are defined at entry; `Allocate`, `Reinterpret`, `Reuse` (`new`),
//!   `ExternKernelAlloc`, `MultiOutput`, `Conditional`, `WhileLoop` and
//!   `CommBufferAllocate` define; `Free`, `FreeIfNotReused` (unless
//!   `is_reused`), `Reuse` with `delete_old` and `CommBufferFree` end.
//!   `FreeIfNotReused` with `is_reused` hands the storage to a later `Reuse`:
//!   the name may not be used afterwards except as that `Reuse`'s `old`.
//!   Constants can be read and written but never freed or reused.
//! * **Storage.** Each allocation (and each tensor input, extern result, and
//!   multi-output element) owns a storage. `Reuse` moves the storage to the new
//!   name; a view (`Reinterpret`) shares its base's storage and may not be used
//!   once that storage is freed. `Reuse` needs the same dtype and device and
//!   `storage(new) <= storage(old)`; `Reinterpret` needs the same device and
//!   `offset + extent` within the storage's allocation (in bytes).
//!   **Size proofs are partial:** a size comparison is decided only when both
//!   sides evaluate to integers without symbols, or when the two storage
//!   expressions are syntactically equal; any other symbolic comparison is
//!   *accepted* (a later prover pass will tighten this).
//! * **Symbols.** Every symbol an expression or layout mentions is declared.
//!   Backed symbols are bound at the main graph's entry by a symbol input or by
//!   the size, stride or offset of a tensor input that mentions them; a backed
//!   symbol nothing binds is an error. Unbacked symbols are bound by
//!   `UnbackedSymbolDefs`/`DynamicScalar`, precomputed ones by
//!   `SymbolicCallArg`, and may be used only afterwards, including in the layout
//!   of a buffer that is allocated, viewed or passed to a call. A symbol is bound
//!   at most once (re-binding a precomputed symbol to the syntactically same
//!   expression is accepted, because Inductor re-emits `xnumel` assignments).
//!   Value ranges must not be empty and hints must lie inside them.
//! * **Key paths.** `.size()`/`.stride()` are followed by an index, indexes are
//!   non-negative and within the rank when the source is a tensor, `DivideBy`
//!   divides by a positive number, and `DynamicScalar` paths are empty,
//!   `.to_int()` or `//d`.
//! * **Kernels.** A called kernel is in the kernel table and has been defined by
//!   a `KernelDefinition` line earlier in program order (a subgraph sees the
//!   kernels its caller defined before running it). Triton calls bind
//!   [`crate::ir::TritonMeta::call_params`]: without named arguments the
//!   positional count must equal it; named arguments must name signature
//!   parameters or extra launcher args, each parameter is bound once, and every
//!   non-constant call parameter is bound. Pointer parameters get buffers of the
//!   signature's dtype (`*fp32` wants an `f32` buffer); scalar parameters get no
//!   buffer (except a 0-d tensor, passed as its value). Halide calls pass one
//!   argument per `argtypes` entry, C++ calls one per `arg_types` entry when
//!   those are known; C pointer types (`float*`) get buffers.
//! * **Structure.** Device guards are balanced per graph. `Conditional` and
//!   `WhileLoop` name existing subgraphs, pass as many operands as the subgraphs
//!   take, both branches of a cond return the same number of values, a loop's
//!   cond graph returns one value and its body one value per carried input.
//!   Subgraphs cannot name their caller's buffers and cannot (directly or
//!   indirectly) run themselves. No subgraph may be called `main`.
//! * **Asserts and outputs.** Graph outputs are live at the end of the graph;
//!   `RuntimeAssert` conditions are boolean expressions; `AssertSizeStride`
//!   gives one size and one stride per dimension of its buffer; alignments are
//!   powers of two.
//! * **Names.** Buffer, symbol, kernel and graph names are identifiers, a name
//!   is not both a buffer and a symbol, and a constant is not redeclared as a
//!   graph buffer.
//!
//! All errors are collected ([`ValidationErrors`]); each one names the graph, the
//! line (its index in [`crate::ir::Graph::lines`], counted from 0, and its text
//! form) and the buffer, symbol or kernel involved.

use super::kernel::{KernelBackend, KernelDef, SigType};
use super::line::{
    ArgValue, DynamicScalar, IndexPutFallback, KernelCall, KeyEntry, KeyPathText, Line, MultiIndex, MultiOutput,
    Predicate, TensorMethod,
};
use super::location::line_text;
pub use super::location::Location;
use super::program::{BufferKind, Graph, GraphInput, GraphOutput, Program, SymbolKind, ValueRange};
use super::scope::{Scope, ScopeKind};
use super::types::{BufName, DType, Device, GraphName, KernelName, Layout};
use crate::sym::{Bindings, SymExpr, Symbol};
use indexmap::{IndexMap, IndexSet};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::fmt;
use std::rc::Rc;

/// The name diagnostics and [`ProgramInfo`] use for the main graph. No subgraph
/// may have this name.
pub const MAIN_GRAPH: &str = "main";

mod buffers;
mod calls;
mod errors;
mod graph;
mod info;
mod lines;
mod state;
mod subgraphs;
mod symbols;

use calls::Param;
pub use errors::{Ending, LineNamer, NameRole, ValidationError, ValidationErrorKind, ValidationErrors};
pub use info::{BufferInfo, GraphInfo, ProgramInfo, Site, SymbolBinding};
use state::*;

/// Checks `program` and returns what the lowerings need, or every broken rule
/// (within [`crate::Limits::default`]).
pub fn validate(program: &Program) -> Result<ProgramInfo<'_>, ValidationErrors> {
    validate_with_limits(program, &crate::Limits::default())
}

/// [`validate`] within `limits`: list arguments nested deeper than
/// `max_text_depth`, `device` blocks nested deeper than `max_text_depth`,
/// subgraph chains longer than `max_subgraph_depth` and `get` indices at or
/// past `max_outputs` are errors naming the limit; at most `max_diagnostics`
/// errors are reported, then one that counts the rest.
pub fn validate_with_limits<'p>(
    program: &'p Program,
    limits: &crate::Limits,
) -> Result<ProgramInfo<'p>, ValidationErrors> {
    let mut v = Validator::new(program);
    v.limits = *limits;
    v.check_tables();
    let main_name = GraphName::new(MAIN_GRAPH);
    let main = v.check_graph(&main_name, &program.main, true).info;
    for (name, graph) in &program.subgraphs {
        if name.as_str() != MAIN_GRAPH && !v.summaries.contains_key(name) {
            v.stack.push(name.clone());
            v.summaries.insert(name.clone(), SummaryState::InProgress);
            let mut summary = v.check_graph(name, graph, false);
            v.stack.pop();
            v.infos.insert(name.clone(), summary.take_info());
            v.summaries.insert(name.clone(), SummaryState::Done(summary));
        }
    }
    if v.suppressed > 0 {
        v.errors.push(ValidationError {
            location: Location::Program,
            kind: ValidationErrorKind::TooManyErrors {
                more: v.suppressed,
                limit: v.limits.max_diagnostics,
            },
        });
    }
    if !v.errors.is_empty() {
        return Err(ValidationErrors { errors: v.errors });
    }
    // In the program's order; `swap_remove` (constant time: `shift_remove`
    // made this quadratic in the number of subgraphs) since the order of
    // what is left behind does not matter.
    let mut subgraphs = IndexMap::new();
    for name in program.subgraphs.keys() {
        if let Some(mut info) = v.infos.swap_remove(name) {
            info.callers = v.callers.swap_remove(name).unwrap_or_default();
            subgraphs.insert(name.clone(), info);
        }
    }
    Ok(ProgramInfo {
        program,
        limits: *limits,
        main,
        subgraphs,
        symbol_bindings: v.bindings,
        kernel_definitions: v.kernel_definitions,
    })
}
