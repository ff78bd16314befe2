//! C++ lowering, in two dialects.
//!
//! * [`Dialect::Aoti`] prints what Inductor's `cpp_wrapper=True` prints for CUDA
//!   (spec sections 3.x, 6.3, 7.3): helper functions (`loadKernel`,
//!   `launchKernel`), `CACHE_TORCH_DTYPE`/`CACHE_TORCH_DEVICE` declarations,
//!   one `call_<kernel>` launch wrapper per called Triton kernel, and
//!   `void inductor_entry_impl(AtenTensorHandle* input_handles, AtenTensorHandle* output_handles)`
//!   working on `RAIIAtenTensorHandle`s and the `aoti_torch_*` C shim. It
//!   compiles against libtorch's `torch/csrc/inductor/cpp_wrapper/cuda.h`.
//!   Deliberate differences from upstream: an unbacked size bound through a
//!   `DivideBy` key is checked for divisibility, and a reuse with a new
//!   layout keeps the new buffer's storage offset.
//! * [`Dialect::Standalone`] prints a wrapper that needs no libtorch, only the
//!   CUDA driver API (`cuda.h`, `-lcuda`), [`runtime_header`]
//!   (`wrapir_runtime.h`) and, for extern ops, wrapir's runtime library
//!   (`libwrapir_runtime`, the `wrapir-runtime` crate; its C ABI is
//!   [`RT_HEADER`]). The generated file defines
//!
//!   ```text
//!   extern "C" int wrapir_entry(const wrapir::Tensor* inputs, const int64_t* scalar_inputs,
//!                               wrapir::Tensor* outputs, CUstream stream) noexcept;
//!   extern "C" const char* wrapir_entry_last_error();
//!   ```
//!
//!   (the name is [`Options::entry_name`]). `inputs` holds the tensor graph
//!   inputs in order, then the program's constants in declaration order;
//!   `scalar_inputs` holds the symbol inputs in order; `outputs` receives one
//!   tensor per graph output (`None` outputs stay undefined, size outputs
//!   become one-element `int64` tensors). Everything runs on `stream`, whose
//!   context must be current (device guard lines make device N's primary
//!   context current). It returns 0 on success and 1 on failure, with the
//!   message in `<entry>_last_error()`. Tensors share reference-counted
//!   storage, so outputs stay valid after the call; input storage is never
//!   freed by the wrapper unless the caller handed over an owning tensor.
//!   Kernels are loaded from `<WRAPIR_CUBIN_DIR>/<cubin file>` (and host
//!   kernels from `<WRAPIR_CUBIN_DIR>/kernels/<kernel>.so`); the macro
//!   defaults to [`Options::cubin_dir`] and can be overridden with `-D`.
//!
//!   Extern (ATen) ops run in the runtime library, which runs them with the
//!   code of wrapir's CUDA backend: each call becomes
//!
//!   ```text
//!   wrapir::call_op(device, "extern_kernels.mm", args_, num_args, expected, results_, num_results, stream);
//!   ```
//!
//!   with the op named as the program names it and its arguments as the
//!   interpreter passes them (`wrapir::ExternArg`s: positional ones in
//!   order, keyword ones named; `out=` variants get the destination as the
//!   keyword argument `out`; index_put and scatter fallbacks are the
//!   in-place ops with the target first), `expected` the declared layout of
//!   a single result when the symbols it names are bound before the call,
//!   and `results_` the variables of the op's result elements. An op the
//!   runtime cannot run fails the call with a message naming it; `wrapir
//!   lower --package` refuses such a program up front. Extern ops on the
//!   CPU run in the runtime's host context (`device` -1, the host backend's
//!   ops); on devices other than CUDA and the CPU they are
//!   [`ErrorKind::NotSupported`]. A program that uses no CUDA device
//!   ([`host_only`]) defines `WRAPIR_HOST_ONLY` before the runtime header:
//!   no `cuda.h`, no driver, size outputs made in host memory.
//!   [`package::package`] writes a CMake project around the wrapper.
//!
//! Both dialects lower Triton kernel launches, allocations, frees, reuses,
//! views, extern calls, unbacked-symbol bindings, `item()` reads, runtime
//! asserts, size/stride and alignment asserts, device guards, comments,
//! conditionals (inline `if`/`else` blocks) and while loops (`while (1)`).
//!
//! * **Multi-outputs.** C++ receives the tensors of a multi-output value as
//!   separate variables, so the line producing the value declares every
//!   extracted element and `get` lines print nothing. Nested indices (and
//!   chains of `get`s through `multi` parts) address elements by index path;
//!   the elements are passed to the op flattened in path order, unextracted
//!   siblings as placeholder variables `<value>_<i>[_<j>]`. Empty indices on a
//!   multi value (`get buf2 = buf1`, the one output of `nonzero`/`index`) make
//!   `buf2` the op's output, as Inductor prints it; empty indices on a tensor
//!   make a new reference. Dict keys are not supported (no C++ form).
//! * **C++ kernels** (spec 3.6): `k((const float*)(arg0_1.data_ptr()), 16L);`
//!   with pointer casts from `CppMeta::arg_types`; they run on the host and
//!   their pointer arguments must be CPU buffers. Standalone: `k` is a
//!   function of the file calling the bundle's compiled image of the kernel
//!   (`kernels/<k>.so`, [`crate::ir::host_image_path`], the object the host
//!   backend runs), opened on first use from `WRAPIR_CUBIN_DIR` by the
//!   runtime header's `wrapir::host_kernel`, which checks the image's
//!   signature against `arg_types` and calls its `wrapir_kernel_argv`;
//!   AOTI: `extern "C" void k(<arg_types>);` is declared and the kernel is
//!   linked from its library.
//! * **Halide kernels** (seed A.4): each buffer argument becomes a
//!   `halide_buffer_t` built from its `HalideArg` shape/stride/offset (C
//!   expressions, evaluated with the scalar arguments bound under their
//!   parameter names) by the file's `wrapir_halide_buffer` helper; then
//!   `if (int status_ = halide_kernel_0(...)) throw ...`. Targets with
//!   `user_context` get the stream (CUDA) or `nullptr` (CPU) first. The
//!   function is declared `extern "C" int <kernel>(...)`: build each generator
//!   with `-f <kernel name>`; the standalone dialect defines CPU ones itself,
//!   calling `<kernel>_argv` in the bundle's compiled image as the host
//!   backend does. AOTI includes `HalideRuntime.h`
//!   (+`HalideRuntimeCuda.h`); the standalone runtime header declares the
//!   ABI-compatible structs itself unless `WRAPIR_USE_HALIDE_RUNTIME_H` is
//!   defined.
//! * **CUDA C kernels and host functions**: a call of an `extern "C" int`
//!   function the embedder links, declared from the arguments (tensors as
//!   `void*` data pointers, integers `int64_t`, floats `double`, booleans
//!   `bool`; CUDA C kernels get the stream as a trailing `void*`). A non-zero
//!   return fails the wrapper.
//! * **CPU buffers**: AOTI allocates them with `aoti_torch_empty_strided` on
//!   the CPU device; the standalone dialect with `wrapir::empty_strided_host`
//!   (host memory, 64-byte aligned). Host tensors passed to the standalone
//!   entry are made with `wrapir::Tensor::borrow_host`.
//! * **Communication buffers** (`comm_alloc`/`comm_free`): neither AOTI's C
//!   shim nor the runtime can allocate symmetric memory, so they are ordinary
//!   allocations with a comment naming the kind and group (collectives accept
//!   them, without the symmetric-memory fast path).
//! * **Triton calls** may name `constexpr`/`constants` parameters: they are
//!   baked into the cubin and dropped, after checking a literal against the
//!   compiled value (`constants`, else `config`). FixedGrid's
//!   `extra_launcher_args` (`_grid_0..2`) give the grid.
//!
//! Not lowered (an [`ErrorKind::NotSupported`] names the line): dict multi-output
//! indices; a subgraph output that is itself a multi-output value, an
//! element extracted together with a value inside it, a key path stopping
//! at such a part (a multi-output value is one variable per tensor); symbol
//! inputs of subgraphs; buffers on devices other than CPU and CUDA in the
//! standalone dialect; a C++ kernel without `arg_types` given arguments, a
//! CUDA C or host kernel given a value that is neither a tensor nor a
//! number or called with differing argument kinds (their C declarations are
//! written from them). A multi-output value passed whole as an extern
//! argument is [`ErrorKind::MultiOutputArgument`]. Ops outside the `aten` namespace map to
//! `aoti_torch_<device>_<namespace>_<op>` in AOTI, which libtorch does not
//! provide.
//!
//! In the standalone dialect `c10::div_floor_integer`/`c10::div_mod` of
//! printed size expressions become the runtime header's
//! `wrapir::div_floor_integer`/`wrapir::div_mod`, and `i64::MIN` (Inductor's
//! `(-1L << 63)`, undefined before C++20) becomes `INT64_MIN`.
//!
//! Symbolic expressions are printed by [`crate::sym::print::cpp`]; with
//! [`IntSuffix::LL`] every integer literal's `L` suffix becomes `LL`.
//!
//! Extern-op arguments are passed in the order the IR lists them (keyword
//! arguments after positional ones); the IR carries no op schemas, so an
//! AOTI shim whose parameter order differs needs the producer to list the
//! arguments in shim order. The exception are the ops whose calls pass
//! keyword-only optionals (`segment_reduce(data, "sum", offsets=...)`):
//! their shim schema is known here and every argument is passed in schema
//! order, absent optionals as `nullptr` and defaults spelled out, as
//! Inductor's C++ wrapper does.

mod lower;
pub mod package;

use crate::ir::{Location, ProgramInfo};
use crate::lower::launches::PrintedLaunch;
use std::fmt;

/// The C header of the runtime library's ABI (`wrapir_rt.h`), for C callers
/// of `libwrapir_runtime`; [`runtime_header`] starts with it.
pub const RT_HEADER: &str = include_str!("wrapir_rt.h");

/// The C++ runtime as stored: its `wrapir::DType` enumerators stand as
/// [`DTYPE_ENUMERATORS`], written from [`crate::ir::DType::ALL`].
const RUNTIME_SOURCE: &str = include_str!("wrapir_runtime.h");

/// Where [`RUNTIME_SOURCE`] lists the `wrapir::DType` enumerators.
const DTYPE_ENUMERATORS: &str =
    "  // wrapir::ir::DType::ALL in order, written here by wrapir::lower::cpp::runtime_header()\n";

/// The runtime header the standalone dialect includes (`wrapir_runtime.h`):
/// the C ABI of the runtime library ([`RT_HEADER`]) followed by the C++
/// runtime, whose `wrapir::DType` lists [`crate::ir::DType::ALL`] in order
/// (the dtype codes of the ABI). Write it next to the generated file as
/// `wrapir_runtime.h` (or set [`Options::inline_runtime`]).
pub fn runtime_header() -> &'static str {
    static HEADER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HEADER.get_or_init(|| {
        let enumerators = lower::runtime_dtype_enumerators();
        format!(
            "{RT_HEADER}\n{}",
            RUNTIME_SOURCE.replacen(DTYPE_ENUMERATORS, &enumerators, 1)
        )
    })
}

/// Whether `program` uses no CUDA device: no Triton, CUDA C or CUDA Halide
/// kernel, and every tensor (buffers of every graph, constants) off CUDA.
/// Its standalone wrapper defines `WRAPIR_HOST_ONLY` (no `cuda.h`, no
/// driver) and runs its extern ops on the runtime library's host context
/// (device `-1`).
pub fn host_only(program: &crate::ir::Program) -> bool {
    use crate::ir::{BufferKind, DeviceType, KernelBackend};
    let kernels = program.kernels.values().all(|k| match &k.backend {
        KernelBackend::Cpp(_) | KernelBackend::Host => true,
        KernelBackend::Halide(m) => !m.is_cuda(),
        KernelBackend::Triton(_) | KernelBackend::CudaC => false,
    });
    let graphs = std::iter::once(&program.main).chain(program.subgraphs.values());
    let buffers = graphs.flat_map(|g| g.buffers.values()).all(|b| match &b.kind {
        BufferKind::Tensor(l) => l.device.kind != DeviceType::Cuda,
        BufferKind::Multi => true,
    });
    kernels && buffers && program.constants.values().all(|l| l.device.kind != DeviceType::Cuda)
}

/// Which C++ to write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Inductor's JIT `cpp_wrapper` form over libtorch's AOTI C shim.
    #[default]
    Aoti,
    /// A libtorch-free wrapper over the CUDA driver API and `wrapir_runtime.h`.
    Standalone,
}

impl Dialect {
    /// `aoti dialect` / `standalone dialect`, as errors name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dialect::Aoti => "aoti dialect",
            Dialect::Standalone => "standalone dialect",
        }
    }

    /// The standalone dialect prints c10's integer helpers as the runtime
    /// header's and `i64::MIN` as `INT64_MIN`.
    fn rewrites_c10(self) -> bool {
        self == Dialect::Standalone
    }
}

/// The suffix of 64-bit integer literals: `L` on LP64 platforms (Linux),
/// `LL` where `long` is 32 bits (Windows) or to match macOS Inductor output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IntSuffix {
    /// `4L`
    #[default]
    L,
    /// `4LL`
    LL,
}

/// Lowering options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The dialect.
    pub dialect: Dialect,
    /// Integer literal suffix.
    pub int_suffix: IntSuffix,
    /// Directory of the compiled cubins. AOTI: joined in front of each
    /// kernel's cubin path when set. Standalone: the default of the
    /// `WRAPIR_CUBIN_DIR` macro (`"."` when unset), the directory the
    /// wrapper loads its cubins and host kernel images from.
    pub cubin_dir: Option<String>,
    /// Standalone: the entry point's name (default `wrapir_entry`).
    pub entry_name: Option<String>,
    /// Standalone: paste the runtime header into the output instead of
    /// `#include "wrapir_runtime.h"`.
    pub inline_runtime: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dialect: Dialect::Aoti,
            int_suffix: IntSuffix::L,
            cubin_dir: None,
            entry_name: None,
            inline_runtime: false,
        }
    }
}

impl Options {
    /// Default options for a dialect.
    pub fn for_dialect(dialect: Dialect) -> Self {
        Options {
            dialect,
            ..Options::default()
        }
    }

    /// The standalone entry point's name.
    pub fn entry(&self) -> &str {
        self.entry_name.as_deref().unwrap_or("wrapir_entry")
    }
}

pub use crate::lower::{Error, ErrorKind};

/// Writes validated programs as C++ into `W`.
pub type Writer<W> = super::Writer<W, Options>;

impl super::TextLowering for Options {
    type Error = Error;

    /// Lowers the program and appends the C++ text to `out`.
    fn write_to<W: fmt::Write>(&self, info: &ProgramInfo<'_>, out: &mut W) -> Result<(), Error> {
        check_inlining(info)?;
        lower::lower(info, self, out)
    }

    /// The C++ text, and for each call site the values it passes to the
    /// `kernel_args_` of its `call_<kernel>` wrapper (constants stripped),
    /// and the wrapper's `grid_0..2` and scratch sizes with its parameters
    /// bound to the call's values. Each is recorded from the value the text
    /// is printed from.
    fn write_recording_launches_to<W: fmt::Write>(
        &self,
        info: &ProgramInfo<'_>,
        out: &mut W,
    ) -> Result<Vec<PrintedLaunch>, Error> {
        check_inlining(info)?;
        lower::lower_recording_launches(info, self, out)
    }
}

/// The C++ wrappers inline a subgraph's code at every line that runs it:
/// the number of inlined bodies (counted once per subgraph, memoised) must
/// stay within [`crate::Limits::max_inlined_subgraphs`].
fn check_inlining(info: &ProgramInfo<'_>) -> Result<(), Error> {
    use crate::ir::{GraphName, Line};
    let program = info.program();
    let max = info.limits().max_inlined_subgraphs;
    // Bodies inlined into each graph, computed callee-first with an explicit
    // stack (validation guarantees there is no cycle).
    let mut inlined: std::collections::HashMap<&GraphName, u64> = std::collections::HashMap::new();
    fn callees(g: &crate::ir::Graph) -> Vec<&GraphName> {
        g.lines.iter().flat_map(Line::subgraphs).collect()
    }
    let count = |calls: &[&GraphName], inlined: &std::collections::HashMap<&GraphName, u64>| -> u64 {
        calls
            .iter()
            .map(|c| inlined.get(c).copied().unwrap_or(0).saturating_add(1))
            .fold(0u64, u64::saturating_add)
    };
    let mut stack: Vec<(&GraphName, bool)> = callees(&program.main).into_iter().map(|c| (c, false)).collect();
    while let Some((name, expanded)) = stack.pop() {
        if inlined.contains_key(name) {
            continue;
        }
        let graph = info.line_subgraph(name);
        let calls = callees(graph);
        if expanded {
            let n = count(&calls, &inlined);
            inlined.insert(name, n);
        } else {
            stack.push((name, true));
            stack.extend(
                calls
                    .into_iter()
                    .filter(|c| !inlined.contains_key(c))
                    .map(|c| (c, false)),
            );
        }
    }
    let total = count(&callees(&program.main), &inlined);
    crate::Limits::check(
        crate::Limit::InlinedSubgraphs,
        total,
        max as u64,
        "the C++ wrapper inlines a subgraph at every line that runs it: inlined subgraph bodies",
    )
    .map_err(|e| Error::new(Location::header(None), ErrorKind::Limit(e)))
}

/// Lowers a validated program to C++ text.
pub fn write_string(info: &ProgramInfo<'_>, options: &Options) -> Result<String, Error> {
    // What `Writer::write` into an empty string gives, built in place.
    check_inlining(info)?;
    lower::lower_to_string(info, options)
}

/// [`write_string`], and every Triton launch as printed
/// ([`super::Writer::write_recording_launches`]).
pub fn write_string_with_launches(
    info: &ProgramInfo<'_>,
    options: &Options,
) -> Result<(String, Vec<PrintedLaunch>), Error> {
    super::write_string_with_launches(info, options)
}
