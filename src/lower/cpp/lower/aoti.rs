//! The AOTI dialect: `RAIIAtenTensorHandle`s and libtorch's `aoti_torch_*`
//! C shim, as Inductor's `cpp_wrapper=True` prints them.

use super::*;

/// The AOTI dialect's [`DialectOps`].
pub(super) struct Aoti;

impl DialectOps for Aoti {
    fn dtype(&self, f: &mut fmt::Formatter<'_>, d: DType) -> fmt::Result {
        write!(f, "cached_torch_dtype_{}", d.torch_name())
    }

    fn entry_start(&self, l: &mut Lowering<'_>, total: usize) {
        l.line("py::gil_scoped_release_simple release;");
        l.blank();
        l.line(format!(
            "auto inputs = steal_from_raw_handles_to_raii_handles(input_handles, {total});"
        ));
    }

    fn symbol_input(&self, l: &mut Lowering<'_>, name: &str, _scalar: usize, handle: usize) {
        l.line(format!("int64_t {name};"));
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(inputs[{handle}], &{name}));"
        ));
    }

    fn tensor_input(&self, l: &mut Lowering<'_>, name: &str, _tensor: usize, handle: usize) {
        l.line(format!("auto {name} = std::move(inputs[{handle}]);"));
    }

    fn input_dims(&self, l: &mut Lowering<'_>, input: &str, what: &str) {
        l.line(format!("auto {input}_{what} = {input}.{what}s();"));
    }

    fn input_dim(&self, l: &mut Lowering<'_>, symbol: &str, input: &str, what: &str, d: usize) {
        l.line(format!("int64_t {symbol} = {input}_{what}[{d}];"));
    }

    fn output_again(&self, l: &mut Lowering<'_>, i: usize, first: usize) {
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(output_handles[{first}], &output_handles[{i}]));"
        ));
    }

    fn output_tensor(&self, l: &mut Lowering<'_>, i: usize, name: &str) {
        l.line(format!("output_handles[{i}] = {name}.release();"));
    }

    fn output_scalar(&self, l: &mut Lowering<'_>, i: usize, value: &str) {
        // A named RAII handle, released into the array: the temporary's
        // destructor would free the handle it returns.
        l.line(format!(
            "RAIIAtenTensorHandle scalar_to_tensor_{i} = scalar_to_tensor_handle({value});"
        ));
        l.line(format!("output_handles[{i}] = scalar_to_tensor_{i}.release();"));
    }

    fn output_none(&self, l: &mut Lowering<'_>, i: usize) {
        l.line(format!("output_handles[{i}] = nullptr;"));
    }

    fn write_head(&self, l: &Lowering<'_>, out: &mut dyn fmt::Write, wrappers: &KernelWrappers) -> Result<(), Error> {
        out.write_str(AOTI_PRELUDE)?;
        for d in &l.dtypes {
            writeln!(out, "CACHE_TORCH_DTYPE({});", d.torch_name())?;
        }
        for d in &l.devices {
            writeln!(out, "CACHE_TORCH_DEVICE({});", d.as_str())?;
        }
        if let Some(h) = l.halide {
            out.write_str("\n#include \"HalideRuntime.h\"\n")?;
            if h.cuda {
                out.write_str("#include \"HalideRuntimeCuda.h\"\n")?;
            }
        }
        l.direct_text(out)?;
        out.write_char('\n')?;
        out.write_str(&wrappers.text)?;
        out.write_str("\nvoid inductor_entry_impl(\n")?;
        out.write_str("    AtenTensorHandle* input_handles,  // handles are stolen; the array is borrowed\n")?;
        out.write_str(
            "    AtenTensorHandle* output_handles  // handles are stolen by the caller; the array is borrowed\n",
        )?;
        out.write_str(") {\n")?;
        Ok(())
    }

    fn write_tail(&self, _l: &Lowering<'_>, out: &mut dyn fmt::Write) -> Result<(), Error> {
        out.write_str("} // inductor_entry_impl\n")?;
        Ok(())
    }

    fn tensor_type(&self) -> &'static str {
        "RAIIAtenTensorHandle"
    }

    fn allocate(&self, l: &mut Lowering<'_>, name: Var<'_>, layout: &Layout, _cx: &Cx<'_>) -> Result<(), Error> {
        let rank = layout.rank();
        let sizes = l.int_array_name(&layout.size);
        let strides = l.int_array_name(&layout.stride);
        let dtype = l.dtype_name(layout.dtype);
        l.devices.insert(layout.device.kind);
        let device_kind = layout.device.kind.as_str();
        let device_index = device_index(&layout.device);
        match &layout.alloc_numel {
            None => {
                emit!(l, "AtenTensorHandle {name}_handle;");
                emit!(
                    l,
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided({rank}, {sizes}, {strides}, {dtype}, cached_torch_device_type_{device_kind},  {device_index}, &{name}_handle));"
                );
                emit!(l, "RAIIAtenTensorHandle {name}({name}_handle);");
            }
            Some(n) => {
                let alloc_size = l.int_array_name(std::slice::from_ref(n));
                let alloc_stride = l.int_array_name(&[SymExpr::Int(1)]);
                emit!(l, "AtenTensorHandle {name}_handle;");
                emit!(
                    l,
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, {alloc_size}, {alloc_stride}, {dtype}, cached_torch_device_type_{device_kind},  {device_index}, &{name}_handle));"
                );
                emit!(l, "AtenTensorHandle {name}_handle_restrided;");
                emit!(
                    l,
                    "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_as_strided({name}_handle, {sizes}, {strides}, &{name}_handle_restrided));"
                );
                emit!(l, "wrap_with_raii_handle_if_needed({name}_handle);");
                emit!(l, "RAIIAtenTensorHandle {name}({name}_handle_restrided);");
            }
        }
        l.declare_var(name);
        Ok(())
    }

    fn view(&self, l: &mut Lowering<'_>, base: &str, base_layout: &Layout, layout: &Layout, geometry: &str) -> String {
        let view = format!("wrap_with_raii_handle_if_needed(reinterpret_tensor_wrapper({base}, {geometry}))");
        if base_layout.dtype == layout.dtype {
            return view;
        }
        let tmp = l.tmp(&format!("{base}_view"));
        l.line(format!("auto {tmp} = {view};"));
        let dtype = l.use_dtype(layout.dtype);
        l.line(format!("AtenTensorHandle {tmp}_handle;"));
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_{}_view_dtype({tmp}, {dtype}, &{tmp}_handle));",
            layout.device.kind.as_str()
        ));
        format!("RAIIAtenTensorHandle({tmp}_handle)")
    }

    fn share(&self, l: &mut Lowering<'_>, src: &str, dst: &str) {
        l.line(format!("AtenTensorHandle {dst}_handle;"));
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle({src}, &{dst}_handle));"
        ));
        l.line(format!("RAIIAtenTensorHandle {dst}({dst}_handle);"));
        l.declare(dst);
    }

    fn assign_new(&self, l: &mut Lowering<'_>, dst: &str, src: &str) {
        l.line(format!("AtenTensorHandle {dst}_handle;"));
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_assign_tensors_out({src}, &{dst}_handle));"
        ));
        l.line(format!("RAIIAtenTensorHandle {dst}({dst}_handle);"));
    }

    fn assign_shared(&self, l: &mut Lowering<'_>, dst: &str, src: &str) {
        let h = l.tmp(&format!("{dst}_handle"));
        l.line(format!("AtenTensorHandle {h};"));
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle({src}, &{h}));"
        ));
        l.line(format!("{dst} = RAIIAtenTensorHandle({h});"));
    }

    fn rank_check(&self, _b: &str, _rank: usize) -> Option<String> {
        None
    }

    fn address(&self, b: &str) -> String {
        format!("reinterpret_cast<uintptr_t>({b}.data_ptr())")
    }

    /// AOTInductor's own check (`codegen_input_nan_asserts`).
    fn check_finite(&self, b: &str, name: &str) -> String {
        format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_check_inf_and_nan({}, {b}));",
            c_string(name)
        )
    }

    fn dtype_of(&self, b: &str) -> String {
        format!("[&] {{ int32_t dtype_; AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype({b}, &dtype_)); return dtype_; }}()")
    }

    fn item_int(&self, l: &mut Lowering<'_>, src: &str, dtype: DType, raw: &str) -> bool {
        match item_ctype(dtype) {
            Some(ctype) if !dtype.is_floating() => {
                read_item(l, src, raw, ctype, dtype);
                true
            }
            _ => false,
        }
    }

    fn item_bool(&self, l: &mut Lowering<'_>, tensor: &str, scalar: &str) {
        read_item(l, tensor, scalar, "bool", DType::Bool);
    }

    fn item_arg(&self, var: &str, dtype: DType) -> Option<String> {
        // A scalar kernel argument is a 64- or 32-bit number or a bool.
        if !matches!(
            dtype,
            DType::Float64 | DType::Float32 | DType::Int64 | DType::Int32 | DType::Bool
        ) {
            return None;
        }
        let (ctype, shim) = (item_ctype(dtype)?, dtype.torch_name());
        Some(format!(
            "[&] {{ {ctype} v_; AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_{shim}({var}, &v_)); return v_; }}()"
        ))
    }

    fn device_guard(&self, l: &mut Lowering<'_>, index: u32, guarded: bool) {
        if guarded {
            l.line(format!("device_guard.set_index({index});"));
        } else {
            l.line(format!("AOTICudaGuard device_guard({index});"));
        }
    }

    fn stream(&self, l: &mut Lowering<'_>, device: u32) -> String {
        self.before_launch(l, device);
        format!("stream{device}")
    }

    /// Declares `stream<device>` unless a scope has it.
    fn before_launch(&self, l: &mut Lowering<'_>, device: u32) {
        let has_stream = l.scopes.iter().any(|s| s.streams.contains(&device));
        if !has_stream {
            l.line(format!("cudaStream_t stream{device};"));
            l.line(format!(
                "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream({device}, (void**)&stream{device}));"
            ));
            if let Some(s) = l.scopes.last_mut() {
                s.streams.insert(device);
            }
        }
    }

    fn launch_tail(&self, l: &mut Lowering<'_>, device: u32) {
        let _ = writeln!(l.body, "{device}, stream{device});");
    }

    fn extern_call(&self, l: &mut Lowering<'_>, site: &ExternSite<'_>) -> Result<(), Error> {
        let (g, call, out, results, cx) = (site.g, site.call, site.out, site.results, site.cx);
        if let Some(key) = crate::ir::stream_op(&call.op) {
            return stream_op_comment(l, site, key);
        }
        let (name, overload) = split_op(&call.op);
        let suffix = op_suffix(&name, overload, out.is_some());
        if python_op::without_c_shim(&name) {
            return match (results, out) {
                ([result], None) => l.python_op_call(g, call, result, cx),
                _ => Err(l.unsupported(
                    cx,
                    format!(
                        "`{}` (no C shim, so it runs through Python) with {} results{}",
                        call.op,
                        results.len(),
                        if out.is_some() { " and an out= tensor" } else { "" }
                    ),
                )),
            };
        }
        let shim = if name.starts_with("aoti_torch_") {
            name.to_string()
        } else if name == "_mm_plus_mm" {
            format!("aoti_torch_{suffix}")
        } else {
            format!("aoti_torch_{}_{suffix}", l.extern_device(g, call, out).kind.as_str())
        };
        let mut args = Vec::new();
        if let Some(o) = out {
            args.push(g.local(o));
        }
        let local = results.first().cloned().unwrap_or_else(|| sanitize(&suffix));
        match l.schema_args(g, call, &name, overload, &local, cx)? {
            Some(in_order) => args.extend(in_order),
            None => {
                for a in call.args.iter().chain(call.kwargs.values()) {
                    args.push(l.shim_arg(g, a, cx)?);
                }
            }
        }
        // One out-pointer per schema result where the op's schema is known
        // (extracted or not), else one per extracted tensor.
        let outs: Vec<(String, shim::Out)> = match (shim::schema_results(&name, overload), &call.result) {
            (Some(schema), Some(r)) if g.is_multi(r) => schema
                .iter()
                .enumerate()
                .map(|(i, o)| (g.element_var(r, &[i]), *o))
                .collect(),
            _ => results.iter().map(|r| (r.clone(), shim::Out::Tensor)).collect(),
        };
        for (r, kind) in &outs {
            match kind {
                shim::Out::Tensor => {
                    l.line(format!("AtenTensorHandle {r}_handle;"));
                    args.push(format!("&{r}_handle"));
                }
                shim::Out::Int => {
                    l.line(format!("int64_t {r};"));
                    l.declare(r);
                    args.push(format!("&{r}"));
                }
                shim::Out::Absent => args.push("nullptr".into()),
            }
        }
        l.line(format!("AOTI_TORCH_ERROR_CODE_CHECK({shim}({}));", args.join(", ")));
        for (r, kind) in &outs {
            if *kind == shim::Out::Tensor {
                l.line(format!("RAIIAtenTensorHandle {r}({r}_handle);"));
                l.declare(r);
            }
        }
        Ok(())
    }

    fn index_put(&self, l: &mut Lowering<'_>, site: &ExternSite<'_>, p: &IndexPutFallback) -> Result<(), Error> {
        let g = site.g;
        // Handles, `nullptr` for a `None` index (not the `Tensor?[]` form).
        let handles: Vec<String> = p
            .indices
            .iter()
            .map(|i| {
                i.as_ref()
                    .map_or("nullptr".to_string(), |b| format!("{}.get()", g.local(b)))
            })
            .collect();
        let idx = format!(
            "std::array<AtenTensorHandle, {n}>{{{}}}.cbegin(), {n}",
            handles.join(", "),
            n = handles.len()
        );
        // `index_put_out` is one shim for every device (shim.h), as
        // Inductor's IndexPutFallback calls it.
        l.line(format!(
            "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_index_put_out({t}, {t}, {idx}, {}, {}));",
            g.local(&p.values),
            p.accumulate,
            t = g.local(&p.target),
        ));
        Ok(())
    }

    /// The `_out` form, which writes into the target, passed first; AOTI's
    /// shim then takes the target again as `self`, as Inductor's
    /// ScatterFallback passes it.
    fn scatter_op(&self, op: &str) -> (String, bool) {
        let (name, overload) = split_op(op);
        let base = name.trim_end_matches('_');
        let op = match overload {
            Some(o) if o != "default" => format!("{base}.{o}"),
            _ => base.to_string(),
        };
        (op, true)
    }

    fn host_kernel_images(&self) -> bool {
        false
    }

    fn cpp_kernel_owner(&self) -> &'static str {
        "the kernel library"
    }

    fn wrapper_template(&self, pointers: &[&str]) -> Option<String> {
        if pointers.is_empty() {
            return None;
        }
        let t: Vec<String> = pointers.iter().map(|p| format!("typename {p}_type_")).collect();
        Some(format!("template <{}>", t.join(", ")))
    }

    fn wrapper_pointer_param(&self, name: &str) -> String {
        format!("const {name}_type_& {name}")
    }

    fn wrapper_tail_params(&self) -> &'static [&'static str] {
        &[
            "int32_t device_idx_",
            "cudaStream_t stream_",
            "const std::optional<std::string>& cubin_dir_ = std::nullopt",
        ]
    }

    fn load_kernel(&self, l: &Lowering<'_>, kernel: &KernelName, cubin: &str, mangled: &str, shared: u32) -> String {
        let path = match &l.options.cubin_dir {
            Some(dir) => format!("{}/{}", dir.trim_end_matches('/'), cubin),
            None => cubin.to_string(),
        };
        format!(
            "        {kernel} = loadKernel({}, {}, {shared}, cubin_dir_);",
            c_string(&path),
            c_string(mangled),
        )
    }

    fn wrapper_pointer(&self, name: &str) -> String {
        format!("reinterpret_cast<CUdeviceptr>({name}.data_ptr())")
    }

    fn wrapper_scratch(&self, l: &mut Lowering<'_>, out: &mut String, v: &str, size: u64) -> fmt::Result {
        let dtype = l.use_dtype(DType::Uint8);
        l.use_device(DeviceType::Cuda);
        writeln!(
            out,
            "    const int64_t {v}_size[] = {{static_cast<int64_t>({size}) * grid_0 * grid_1 * grid_2}};"
        )?;
        writeln!(out, "    static constexpr int64_t {v}_stride[] = {{1}};")?;
        writeln!(out, "    AtenTensorHandle {v}_handle;")?;
        writeln!(
            out,
            "    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, {v}_size, {v}_stride, {dtype}, cached_torch_device_type_cuda, device_idx_, &{v}_handle));"
        )?;
        writeln!(out, "    RAIIAtenTensorHandle {v}_tensor({v}_handle);")?;
        writeln!(
            out,
            "    CUdeviceptr {v} = reinterpret_cast<CUdeviceptr>({v}_tensor.data_ptr());"
        )
    }

    fn launch_fn(&self) -> &'static str {
        "launchKernel"
    }
}

/// The C type the shim's `aoti_torch_item_<dtype>` (named by
/// [`DType::torch_name`]) reads an element of `dtype` into, for the dtypes
/// the wrapper reads.
fn item_ctype(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "bool",
        DType::Int8 => "int8_t",
        DType::Int16 => "int16_t",
        DType::Int32 => "int32_t",
        DType::Int64 => "int64_t",
        DType::Uint8 => "uint8_t",
        DType::Float32 => "float",
        DType::Float64 => "double",
        _ => return None,
    })
}

/// Reads the scalar in `tensor` (of `dtype`) into `var` (declared
/// `<ctype> <var>;` first unless it is in scope) through the shim's
/// `aoti_torch_item_<dtype>`.
fn read_item(l: &mut Lowering<'_>, tensor: &str, var: &str, ctype: &str, dtype: DType) {
    let shim = dtype.torch_name();
    if !l.declared(var) {
        l.line(format!("{ctype} {var};"));
        l.declare(var);
    }
    l.line(format!(
        "AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_item_{shim}({tensor}, &{var}));"
    ));
}

/// What the AOTI dialect's file starts with: libtorch's C++ wrapper header
/// and the kernel loading and launching helpers.
/// A `torch.ops.streams.*` op: a comment. The wrapper runs every line in
/// program order on its one stream (stream scopes are comments too), which
/// satisfies every event the op records, waits for or synchronises; the op
/// has no C shim (Inductor's JIT C++ wrapper refuses programs with user
/// streams, and its AOT one calls the CUDA event API on side streams this
/// wrapper does not have). Its arguments must be literal indices, and it
/// has no result, as the host and CUDA executors check at run time.
fn stream_op_comment(l: &mut Lowering<'_>, site: &ExternSite<'_>, key: &str) -> Result<(), Error> {
    let (call, cx) = (site.call, site.cx);
    let mut args = Vec::with_capacity(call.args.len());
    for (k, a) in call.args.iter().enumerate() {
        match a {
            crate::ir::ArgValue::Expr(e) if e.as_int().is_some_and(|i| i >= 0) => args.push(e.to_string()),
            _ => {
                return Err(l.unsupported(
                    cx,
                    format!(
                        "`{}`: argument {k} is not a literal event, stream or device index",
                        call.op
                    ),
                ))
            }
        }
    }
    if !site.results.is_empty() || site.out.is_some() || !call.kwargs.is_empty() {
        return Err(l.unsupported(
            cx,
            format!("`{}` with a result, an out= tensor or keyword arguments", call.op),
        ));
    }
    l.line(format!(
        "// {key}({}): satisfied by program order on the wrapper's stream",
        args.join(", ")
    ));
    Ok(())
}

const AOTI_PRELUDE: &str = r#"#include <torch/csrc/inductor/cpp_wrapper/cuda.h>

#define CUDA_DRIVER_CHECK(EXPR)                                                    \
    do {                                                                           \
        CUresult code = EXPR;                                                      \
        if (code != CUDA_SUCCESS) {                                                \
            const char* msg = nullptr;                                             \
            if (cuGetErrorString(code, &msg) != CUDA_SUCCESS) msg = "unknown error"; \
            throw std::runtime_error(std::string("CUDA driver error: ") + msg + " in " #EXPR); \
        }                                                                          \
    } while (0)

static inline CUfunction loadKernel(
        std::string filePath,
        const std::string& funcName,
        uint32_t sharedMemBytes,
        const std::optional<std::string>& cubinDir = std::nullopt) {
    if (cubinDir) {
        filePath = (std::filesystem::path(*cubinDir) / std::filesystem::path(filePath).filename()).string();
    }
    CUmodule mod;
    CUfunction func;
    CUDA_DRIVER_CHECK(cuModuleLoad(&mod, filePath.c_str()));
    CUDA_DRIVER_CHECK(cuModuleGetFunction(&func, mod, funcName.c_str()));
    if (sharedMemBytes > 0) {
        CUDA_DRIVER_CHECK(cuFuncSetAttribute(func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, sharedMemBytes));
    }
    return func;
}

static inline void launchKernel(
        CUfunction func,
        uint32_t gridX,
        uint32_t gridY,
        uint32_t gridZ,
        uint32_t numWarps,
        uint32_t sharedMemBytes,
        void* args[],
        cudaStream_t stream) {
    CUDA_DRIVER_CHECK(cuLaunchKernel(func, gridX, gridY, gridZ, 32 * numWarps, 1, 1, sharedMemBytes, stream, args, nullptr));
}
"#;
