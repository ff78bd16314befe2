//! The dialect layer: every statement whose C++ differs between the AOTI
//! shim and the standalone runtime, written once per dialect ([`super::aoti`],
//! [`super::standalone`]). The walk over lines (`lines.rs`, `tensors.rs`,
//! `externs.rs`, `control.rs`, `frame.rs`, the launch wrappers) calls these
//! and never asks which dialect it writes.

use super::*;

/// The tensor-handle operations of one dialect. Methods that write take the
/// lowering and append to its body (or to `out` for file-level text).
pub(super) trait DialectOps: Sync {
    /// A dtype as the dialect names it.
    fn dtype(&self, f: &mut fmt::Formatter<'_>, d: DType) -> fmt::Result;

    // ---- the entry function -------------------------------------------------

    /// Before the inputs are read (`total`: inputs plus constants).
    fn entry_start(&self, l: &mut Lowering<'_>, total: usize);
    /// A symbol input: `int64_t <name>` from input `handle` / scalar input `scalar`.
    fn symbol_input(&self, l: &mut Lowering<'_>, name: &str, scalar: usize, handle: usize);
    /// A tensor input (or constant) from input `handle` / tensor input `tensor`.
    fn tensor_input(&self, l: &mut Lowering<'_>, name: &str, tensor: usize, handle: usize);
    /// Before the first symbol bound from the sizes (`what` = `size`) or
    /// strides of `input`.
    fn input_dims(&self, l: &mut Lowering<'_>, input: &str, what: &str);
    /// `int64_t <symbol>` from dimension `d` of `input`'s sizes or strides.
    fn input_dim(&self, l: &mut Lowering<'_>, symbol: &str, input: &str, what: &str, d: usize);
    /// Output `i` is the same tensor as output `first`.
    fn output_again(&self, l: &mut Lowering<'_>, i: usize, first: usize);
    /// Output `i` is the tensor variable `name`.
    fn output_tensor(&self, l: &mut Lowering<'_>, i: usize, name: &str);
    /// Output `i` is the integer `value` as a one-element tensor.
    fn output_scalar(&self, l: &mut Lowering<'_>, i: usize, value: &str);
    /// Output `i` is `None`.
    fn output_none(&self, l: &mut Lowering<'_>, i: usize);
    /// The file up to the entry function's body.
    fn write_head(&self, l: &Lowering<'_>, out: &mut dyn fmt::Write, wrappers: &KernelWrappers) -> Result<(), Error>;
    /// The file after the entry function's body.
    fn write_tail(&self, l: &Lowering<'_>, out: &mut dyn fmt::Write) -> Result<(), Error>;

    // ---- tensors ------------------------------------------------------------

    /// The C++ type of a tensor variable.
    fn tensor_type(&self) -> &'static str;
    /// Declares `name` as a new tensor of `layout` (storage offset 0).
    fn allocate(&self, l: &mut Lowering<'_>, name: Var<'_>, layout: &Layout, cx: &Cx<'_>) -> Result<(), Error>;
    /// A view expression of `base` with `layout`; the element size is
    /// unchanged. `geometry`: the view's rank, sizes and strides (arrays
    /// already written) and storage offset, the arguments both runtimes'
    /// reinterpret calls take in this order.
    fn view(&self, l: &mut Lowering<'_>, base: &str, base_layout: &Layout, layout: &Layout, geometry: &str) -> String;
    /// Declares `dst` as a new reference to the tensor `src`.
    fn share(&self, l: &mut Lowering<'_>, src: &str, dst: &str);
    /// Declares `dst` holding the tensor `src` (a subgraph input, a loop's
    /// carried value).
    fn assign_new(&self, l: &mut Lowering<'_>, dst: &str, src: &str);
    /// Assigns the declared `dst` a new reference to `src`.
    fn assign_shared(&self, l: &mut Lowering<'_>, dst: &str, src: &str);
    /// The condition that `b` has `rank` dimensions, when the dialect checks it.
    fn rank_check(&self, b: &str, rank: usize) -> Option<String>;
    /// `b`'s data address as an integer.
    fn address(&self, b: &str) -> String;
    /// The statement that fails unless every element of the tensor `b`
    /// (the program's buffer `name`) is finite (Inductor's `nan_asserts`).
    fn check_finite(&self, b: &str, name: &str) -> String;
    /// `b`'s dtype, comparable with the dialect's dtype names
    /// ([`DialectOps::dtype`]).
    fn dtype_of(&self, b: &str) -> String;

    // ---- scalars read from tensors -----------------------------------------

    /// Declares `raw` holding the integer in the tensor `src` of `dtype`;
    /// false, writing nothing, when the dialect cannot read `dtype` so.
    fn item_int(&self, l: &mut Lowering<'_>, src: &str, dtype: DType, raw: &str) -> bool;
    /// Reads the boolean in `tensor` into the variable `scalar`.
    fn item_bool(&self, l: &mut Lowering<'_>, tensor: &str, scalar: &str);
    /// The expression reading a scalar kernel argument from the one-element
    /// tensor `var` of `dtype`; `None` when the dialect cannot read `dtype`.
    fn item_arg(&self, var: &str, dtype: DType) -> Option<String>;

    // ---- devices, streams, launches ----------------------------------------

    /// Enters device `index` (`guarded`: an enclosing scope entered one).
    fn device_guard(&self, l: &mut Lowering<'_>, index: u32, guarded: bool);
    /// The stream of device `device`, declared first when needed.
    fn stream(&self, l: &mut Lowering<'_>, device: u32) -> String;
    /// Before a `call_<kernel>(...)` line on `device`.
    fn before_launch(&self, l: &mut Lowering<'_>, device: u32);
    /// The end of a `call_<kernel>(...)` line, after its arguments.
    fn launch_tail(&self, l: &mut Lowering<'_>, device: u32);

    // ---- extern ops ---------------------------------------------------------

    /// An extern op.
    fn extern_call(&self, l: &mut Lowering<'_>, site: &ExternSite<'_>) -> Result<(), Error>;
    /// An `index_put` fallback, `site` its extern call
    /// ([`IndexPutFallback::extern_call`]); by default that call, as the
    /// interpreter runs it (`exec::uses::extern_uses`).
    fn index_put(&self, l: &mut Lowering<'_>, site: &ExternSite<'_>, _line: &IndexPutFallback) -> Result<(), Error> {
        self.extern_call(l, site)
    }
    /// The extern op a scatter fallback's `op` (`aten.scatter_.src`, ...)
    /// runs as, and whether its target is passed as the `out=` tensor.
    fn scatter_op(&self, op: &str) -> (String, bool);

    // ---- direct kernels -----------------------------------------------------

    /// C++ and CPU Halide kernels are called in their compiled images (the
    /// bundle's `kernels/<kernel>.so`, loaded at run time); else declared,
    /// for the embedder to link.
    fn host_kernel_images(&self) -> bool;
    /// Who defines a declared C++ kernel.
    fn cpp_kernel_owner(&self) -> &'static str;

    // ---- launch wrappers ----------------------------------------------------

    /// The line before `static inline void call_<kernel>(`, if any.
    fn wrapper_template(&self, pointers: &[&str]) -> Option<String>;
    /// The parameter declaration of pointer parameter `name`.
    fn wrapper_pointer_param(&self, name: &str) -> String;
    /// The wrapper's trailing parameters (device, stream, ...).
    fn wrapper_tail_params(&self) -> &'static [&'static str];
    /// The line loading the kernel on first use.
    fn load_kernel(&self, l: &Lowering<'_>, kernel: &KernelName, cubin: &str, mangled: &str, shared: u32) -> String;
    /// The `CUdeviceptr` of pointer parameter `name`.
    fn wrapper_pointer(&self, name: &str) -> String;
    /// The lines allocating `v` (`<v>_tensor`, then `CUdeviceptr v`) of
    /// `size` bytes per CTA.
    fn wrapper_scratch(&self, l: &mut Lowering<'_>, out: &mut String, v: &str, size: u64) -> fmt::Result;
    /// The launch function.
    fn launch_fn(&self) -> &'static str;
}

/// An extern op being lowered: its graph, the call, its `out=` buffer (for
/// the `out=` forms), its result variables (one tensor, or one per element
/// of a multi-output value) and its line.
pub(super) struct ExternSite<'s> {
    pub(super) g: &'s GraphCtx<'s>,
    pub(super) call: &'s ExternCall,
    pub(super) out: Option<&'s BufName>,
    pub(super) results: &'s [String],
    pub(super) cx: &'s Cx<'s>,
}

/// The operations of `dialect`.
pub(super) fn ops(dialect: Dialect) -> &'static dyn DialectOps {
    match dialect {
        Dialect::Aoti => &super::aoti::Aoti,
        Dialect::Standalone => &super::standalone::Standalone,
    }
}
