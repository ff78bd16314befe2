//! The typed Wrapper IR.
//!
//! A [`Program`] is what Inductor's wrapper codegen holds as `wrapper.lines`
//! after memory planning, with every raw-text line turned into a typed one.
//!
//! # Definitions apart from order
//!
//! Each [`Graph`] keeps a *buffer table* (`buffers`: name -> layout or
//! multi-output) apart from its *lines* (what happens, in order). Symbols,
//! kernels and constants are program-wide tables. A line names buffers,
//! symbols and kernels; the tables say what they are. This is cranelift's split
//! of the data-flow graph from the layout: a pass can reorder lines without
//! touching declarations, and a printer can show a layout without searching
//! for the line that created the buffer.
//!
//! # When things take effect
//!
//! * A tensor input is live from the start of its graph until a `Free`.
//! * `Allocate`, `Reinterpret`, `Reuse` (for `new`), `ExternKernelAlloc` (for its
//!   result), `MultiOutput` (for its result) and `Conditional`/`WhileLoop` (for
//!   their result) *define* a buffer name. A name is defined at most once per graph.
//! * `FreeIfNotReused` (unless `is_reused`), `Free`, and `Reuse` with
//!   `delete_old` end a name. Storage is owned by the buffer that allocated it;
//!   `Reuse` moves ownership to the new name; views (`Reinterpret`) never own
//!   storage and must not outlive their base's storage.
//! * Backed symbols (`s*`) are bound when the graph starts, from input sizes and
//!   symbol inputs. Unbacked symbols (`u*`) are bound by the `UnbackedSymbolDefs`
//!   or `DynamicScalar` line that names them and may only be used after it.
//!   Precomputed symbols (`ps*`, `ks*`, `*_xnumel`) are bound by
//!   `SymbolicCallArg`.
//! * Subgraphs see only their own inputs, buffers, and the program-wide symbols
//!   bound so far; the symbols a subgraph binds are visible after the
//!   `Conditional`/`WhileLoop` that runs it when both branches bind them.
//!
//! [`validate`] checks all of this and returns a [`ProgramInfo`], which is the
//! only way into the lowerings.

mod builder;
pub mod collectives;
mod kernel;
mod line;
mod line_op;
mod location;
pub mod op;
mod program;
mod scope;
mod types;
pub mod validate;
mod vec_isa;

pub use builder::{GraphBuilder, ProgramBuilder};
pub use kernel::{
    bind_call_args, ceil_div, ceil_div_expr, host_image_path, is_plain_relative_path, ArgBindError, BoundArgs,
    ConstValue, CppMeta, GridAlgebra, GridError, GridForm, GridType, HalideArg, HalideMeta, KernelBackend, KernelDef,
    PrecomputedGridEntry, ScalarType, SigType, TritonMeta,
};
pub use line::{
    switch_branch, write_float, ArgValue, AssertSizeStride, AssertSizeStrideGrouped, CallArg, Conditional,
    DynamicScalar, ExternCall, ExternMultiOut, IndexNames, IndexPutFallback, KernelCall, KeyEntry, KeyPath,
    KeyPathText, Line, MultiIndex, MultiOutput, Predicate, PyStr, ScatterFallback, SizeStrideCheck, Switch,
    TensorMethod, WhileLoop,
};
pub use line_op::LineOp;
pub use location::{line_text, LineAt, Location};
pub use program::{
    BufferDecl, BufferKind, FormatError, Graph, GraphInput, GraphOutput, Program, SymbolDecl, SymbolKind, ValueRange,
    FORMAT_VERSION,
};
pub use scope::{stream_op, DeviceStreams, Scope, ScopeKind, STREAM_OPS};
pub use types::{BufName, DType, Device, DeviceType, Dims, GraphName, KernelName, Layout, ParenIfCompound};
pub use validate::{
    validate, validate_with_limits, BufferInfo, Ending, GraphInfo, LineNamer, NameRole, ProgramInfo, Site,
    SymbolBinding, ValidationError, ValidationErrorKind, ValidationErrors, MAIN_GRAPH,
};
pub use vec_isa::VecIsa;
