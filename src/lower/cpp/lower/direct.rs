//! Direct calls of kernels that are not Triton launches: C++ kernels (spec
//! 3.6), Halide kernels (seed A.4), CUDA C kernels and embedder host
//! functions. The forms are described in the module documentation of
//! [`crate::lower::cpp`].

use super::{c_float, c_string, device_index, Cx, GraphCtx, Lowering};
use crate::ir::{
    ArgValue, CallArg, CppMeta, DeviceType, HalideArg, HalideMeta, KernelBackend, KernelCall, KernelDef, KernelName,
};
use crate::lower::cpp::Error;
use std::fmt::Write as _;

/// Which Halide support the file needs.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct HalideUse {
    /// A CUDA Halide kernel is called (`halide_cuda_device_interface()`).
    pub(super) cuda: bool,
}

/// The buffer helper written into files that call Halide kernels. It works
/// with Halide's own `HalideRuntime.h` and with the minimal ABI-compatible
/// declarations of `wrapir_runtime.h`.
pub(super) const HALIDE_HELPER: &str = r#"// Describes a strided tensor to a Halide kernel: on the device when
// `device_interface` is set, else in host memory (Inductor's Halide glue).
static inline halide_buffer_t wrapir_halide_buffer(uint64_t address, int64_t offset, int64_t element_size,
                                                   const struct halide_device_interface_t* device_interface,
                                                   int type_code, int type_bits, int32_t dimensions,
                                                   halide_dimension_t* dim) {
    halide_buffer_t b = {};
    uint64_t start = address + static_cast<uint64_t>(offset * element_size);
    if (device_interface != nullptr) {
        b.device = start;
        b.device_interface = device_interface;
        b.flags = 2;  // halide_buffer_flag_device_dirty
    } else {
        b.host = reinterpret_cast<uint8_t*>(start);
        b.flags = 1;  // halide_buffer_flag_host_dirty
    }
    b.type.code = static_cast<decltype(b.type.code)>(type_code);
    b.type.bits = static_cast<uint8_t>(type_bits);
    b.type.lanes = 1;
    b.dimensions = dimensions;
    b.dim = dim;
    return b;
}
"#;

/// The standalone dialect's definition of C++ kernel `kernel`: a function
/// with the kernel's signature (`types`, the program's `arg_types`) that
/// calls the bundle's compiled image of it (`kernels/<kernel>.so`, the
/// object the host backend runs) through its `wrapir_kernel_argv` entry,
/// loaded on first use from `WRAPIR_CUBIN_DIR`.
fn host_image_forwarder(kernel: &KernelName, types: &[&str]) -> String {
    let params: Vec<String> = types.iter().enumerate().map(|(i, t)| format!("{t} a{i}")).collect();
    let argv: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let value = if t.ends_with('*') {
                format!("a{i}")
            } else {
                format!("&a{i}")
            };
            format!("const_cast<void*>(static_cast<const void*>({value}))")
        })
        .collect();
    let mut out = String::new();
    let what = format!("C++ kernel `{kernel}`");
    let image = forwarder_head(&mut out, &what, "void", kernel, &params.join(", "));
    let _ = writeln!(
        out,
        "    static const wrapir::HostKernel image_ = wrapir::host_kernel(WRAPIR_CUBIN_DIR, {image}, {}, {});",
        c_string(kernel.as_str()),
        c_string(&types.join(";"))
    );
    forwarder_tail(&mut out, &argv, "image_.call(args_);");
    out
}

/// The opening of a forwarder to `kernel`'s compiled image: a comment
/// naming it (`what`) and its image, then `static <ret> <kernel>(<params>) {`.
/// Returns the image's path as a C++ string literal, for the line loading it.
fn forwarder_head(out: &mut String, what: &str, ret: &str, kernel: &KernelName, params: &str) -> String {
    let image = crate::ir::host_image_path(kernel.as_str());
    let _ = writeln!(out, "// {what}: its compiled image {image}, loaded on first use.");
    let _ = writeln!(out, "static {ret} {kernel}({params}) {{");
    c_string(&image)
}

/// The end of a forwarder: the `args_` array it passes to its image's
/// entry (`nullptr` where there are no arguments: C++ has no empty
/// arrays), the statement `call` passing it, and the closing brace.
fn forwarder_tail(out: &mut String, argv: &[String], call: &str) {
    if argv.is_empty() {
        out.push_str("    void** args_ = nullptr;\n");
    } else {
        let _ = writeln!(out, "    void* args_[] = {{{}}};", argv.join(", "));
    }
    let _ = writeln!(out, "    {call}");
    out.push_str("}\n");
}

/// One parameter of a Halide kernel's C declaration: its declaration, its
/// name and, for a scalar, its C type.
struct HalideParamDecl {
    decl: String,
    name: String,
    scalar: Option<String>,
}

/// The standalone dialect's definition of CPU Halide kernel `kernel`: a
/// function of the kernel's declared signature calling the pipeline's
/// `<kernel>_argv` entry in the bundle's compiled image
/// (`kernels/<kernel>.so`, which links `kernels/halide_runtime.so`), loaded
/// on first use from `WRAPIR_CUBIN_DIR`, with the host backend's argument
/// convention: a `halide_buffer_t*` per buffer, a pointer to an 8-byte slot
/// per integer scalar (little-endian, so the pipeline's narrower integer
/// types read their value from it), to a `float`/`double` per float scalar;
/// no user context.
fn halide_image_forwarder(kernel: &KernelName, target: &str, params: &[HalideParamDecl]) -> String {
    let decls: Vec<&str> = params.iter().map(|p| p.decl.as_str()).collect();
    let mut out = String::new();
    let what = format!("Halide kernel `{kernel}` (target {target})");
    let image = forwarder_head(&mut out, &what, "int", kernel, &decls.join(", "));
    let _ = writeln!(
        out,
        "    static const auto entry_ = reinterpret_cast<int (*)(void**)>(wrapir::host_symbol(WRAPIR_CUBIN_DIR, {image}, {}));",
        c_string(&format!("{kernel}_argv"))
    );
    let mut argv = Vec::new();
    for p in params {
        let n = &p.name;
        match &p.scalar {
            None if n == "user_context" => {
                let _ = writeln!(out, "    (void){n};");
            }
            None => argv.push(n.clone()),
            Some(ctype) => {
                let slot = match ctype.replace("const", "").trim() {
                    "float" => "float",
                    "double" => "double",
                    _ => "int64_t",
                };
                let _ = writeln!(out, "    {slot} {n}_slot_ = static_cast<{slot}>({n});");
                argv.push(format!("&{n}_slot_"));
            }
        }
    }
    forwarder_tail(&mut out, &argv, "return entry_(args_);");
    out
}

impl<'a> Lowering<'a> {
    /// A call of a non-Triton kernel.
    pub(super) fn direct_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &KernelCall,
        def: &'a KernelDef,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        match &def.backend {
            KernelBackend::Cpp(meta) => self.cpp_kernel_call(g, call, meta, cx),
            KernelBackend::Halide(meta) => self.halide_call(g, call, meta, cx),
            KernelBackend::CudaC => self.extern_function_call(g, call, true, cx),
            KernelBackend::Host => self.extern_function_call(g, call, false, cx),
            // The caller (`kernel_call`) launches Triton kernels itself.
            KernelBackend::Triton(_) => unreachable!("Triton kernel `{}` is launched, not called", call.kernel),
        }
    }

    /// A scalar argument in C++ form.
    pub(super) fn scalar_arg(
        &self,
        kernel: &KernelName,
        index: usize,
        value: &ArgValue,
        cx: &Cx<'_>,
    ) -> Result<String, Error> {
        match value {
            ArgValue::Expr(e) => Ok(self.cexpr(e)),
            ArgValue::Float(v) => Ok(c_float(*v)),
            ArgValue::Bool(b) => Ok(b.to_string()),
            // Reachable: validation lets any value that is not a tensor
            // stand for a scalar parameter (a string, `None`, a list).
            _ => Err(kernel_args(cx, kernel, format!("argument {index} is not a number"))),
        }
    }

    /// Records a kernel's file-level text; a second, different text is an error.
    pub(super) fn declare_direct(&mut self, kernel: &KernelName, text: String, cx: &Cx<'_>) -> Result<(), Error> {
        match self.direct_decls.get(kernel) {
            // A CUDA C or host kernel's declaration is written from its
            // arguments (validation knows no parameters of theirs).
            Some(existing) if *existing != text => Err(self.unsupported(
                cx,
                format!("kernel `{kernel}` is called with argument types that differ from an earlier call (one C declaration)"),
            )),
            Some(_) => Ok(()),
            None => {
                self.direct_decls.insert(kernel.clone(), text);
                Ok(())
            }
        }
    }

    /// `cpp_fused_add_0((const float*)(arg0_1.data_ptr()), (float*)(buf0.data_ptr()), 16L);`
    pub(super) fn cpp_kernel_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &KernelCall,
        meta: &CppMeta,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let kernel = &call.kernel;
        // Validation: a C++ kernel takes positional arguments only
        // (`NamedArgument`), as many as its `arg_types` when it has them
        // (`ArityMismatch`), a tensor on the CPU for each pointer
        // (`PointerArgNotBuffer`, `HostKernelDevice`).
        if meta.arg_types.is_empty() && !call.args.is_empty() {
            return Err(self.unsupported(
                cx,
                format!("C++ kernel `{kernel}` has no `arg_types`, which its C++ declaration is written from"),
            ));
        }
        let args = call.args.iter().map(|a| &a.value);
        let mut printed = Vec::with_capacity(meta.arg_types.len());
        for (i, (ty, value)) in meta.arg_types.iter().zip(args).enumerate() {
            let ty = ty.trim();
            if let (true, ArgValue::Buffer(b)) = (ty.ends_with('*'), value) {
                printed.push(format!("({ty})({}.data_ptr())", g.local(b)));
            } else if let ArgValue::Buffer(b) = value {
                // A 0-d tensor for a scalar parameter (validation allows no
                // other tensor there): its value, read at the call.
                let layout = g.layout(b);
                match self.dialect.item_arg(&g.local(b), layout.dtype) {
                    Some(read) => printed.push(format!("static_cast<{ty}>({read})")),
                    None => {
                        return Err(self.unsupported(
                            cx,
                            format!(
                                "argument {i} of C++ kernel `{kernel}`: a 0-d tensor `{b}` of dtype {} for a scalar parameter",
                                layout.dtype
                            ),
                        ))
                    }
                }
            } else {
                printed.push(self.scalar_arg(kernel, i, value, cx)?);
            }
        }
        let types: Vec<&str> = meta.arg_types.iter().map(|t| t.trim()).collect();
        let decl = if self.dialect.host_kernel_images() {
            host_image_forwarder(kernel, &types)
        } else {
            let who = self.dialect.cpp_kernel_owner();
            format!(
                "// C++ kernel `{kernel}`, defined by {who}.\nextern \"C\" void {kernel}({});\n",
                types.join(", ")
            )
        };
        self.declare_direct(kernel, decl, cx)?;
        self.line(format!("{kernel}({});", printed.join(", ")));
        Ok(())
    }

    /// A Halide kernel: one `halide_buffer_t` per buffer argument, built from
    /// the argument's shape/stride/offset, then a direct call.
    pub(super) fn halide_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &KernelCall,
        meta: &HalideMeta,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let kernel = &call.kernel;
        // Reachable: validation binds a call against every argument of
        // `argtypes`, aliases included, and checks no sizes against strides
        // nor devices; the lowering binds the arguments that are not aliases.
        let invalid = |message: String| kernel_args(cx, kernel, message);
        // Call arguments bind the arguments that are not aliases, in order or by name.
        let outer: Vec<&HalideArg> = meta.argtypes.iter().filter(|a| a.alias_of.is_none()).collect();
        let mut bound: Vec<Option<&ArgValue>> = vec![None; outer.len()];
        let mut next = 0usize;
        for CallArg { name, value } in &call.args {
            let slot = match name {
                None => {
                    next += 1;
                    next - 1
                }
                Some(n) => outer
                    .iter()
                    .position(|a| a.name == *n)
                    .ok_or_else(|| invalid(format!("the Halide kernel has no argument `{n}`")))?,
            };
            let entry = bound.get_mut(slot).ok_or_else(|| {
                invalid(format!(
                    "the Halide kernel takes {} arguments but gets more",
                    outer.len()
                ))
            })?;
            if entry.replace(value).is_some() {
                return Err(invalid(format!("argument `{}` is given twice", outer[slot].name)));
            }
        }
        let value_of = |name: &str| -> Result<&ArgValue, Error> {
            outer
                .iter()
                .position(|a| a.name == name)
                .and_then(|i| bound[i])
                .ok_or_else(|| invalid(format!("argument `{name}` is missing")))
        };
        let device_index = meta.cuda_device;
        let cuda = meta.is_cuda();
        let user_context = meta.target.split('-').any(|f| f == "user_context");
        self.open("{");
        // Values first: the parameter-named declarations below may shadow wrapper names.
        let mut params = Vec::new();
        let mut named_scalars = Vec::new();
        let mut lines_after = Vec::new();
        for arg in &meta.argtypes {
            let value = value_of(arg.alias_of.as_deref().unwrap_or(&arg.name))?;
            let Some(shape) = &arg.shape else {
                if matches!(value, ArgValue::Buffer(_)) {
                    return Err(invalid(format!("Halide scalar argument `{}` gets a tensor", arg.name)));
                }
                let v = self.scalar_arg(kernel, params.len(), value, cx)?;
                self.line(format!("const {} {}_value_ = {v};", arg.ctype, arg.name));
                named_scalars.push(format!("const {} {} = {}_value_;", arg.ctype, arg.name, arg.name));
                params.push((
                    HalideParamDecl {
                        decl: format!("{} {}", arg.ctype, arg.name),
                        name: arg.name.clone(),
                        scalar: Some(arg.ctype.clone()),
                    },
                    arg.name.clone(),
                ));
                continue;
            };
            let ArgValue::Buffer(b) = value else {
                return Err(invalid(format!(
                    "Halide buffer argument `{}` gets a value that is not a tensor",
                    arg.name
                )));
            };
            let layout = g.layout(b);
            match (cuda, layout.device.kind) {
                (true, DeviceType::Cuda) | (false, DeviceType::Cpu) => {}
                _ => {
                    return Err(invalid(format!(
                        "the Halide kernel runs on {}, but its argument `{b}` is on {}",
                        if cuda { "CUDA" } else { "the host" },
                        layout.device
                    )))
                }
            }
            let (code, bits) = layout
                .dtype
                .halide_type()
                .ok_or_else(|| self.unsupported(cx, format!("Halide buffer `{b}` of dtype {}", layout.dtype)))?;
            let stride = arg.stride.clone().unwrap_or_default();
            if stride.len() != shape.len() {
                return Err(invalid(format!(
                    "Halide argument `{}` has {} sizes but {} strides",
                    arg.name,
                    shape.len(),
                    stride.len()
                )));
            }
            let n = &arg.name;
            self.line(format!(
                "const uint64_t {n}_address_ = (uint64_t)({}.data_ptr());",
                g.local(b)
            ));
            let dims: Vec<String> = shape
                .iter()
                .zip(&stride)
                .map(|(e, s)| format!("{{0, static_cast<int32_t>({e}), static_cast<int32_t>({s}), 0}}"))
                .collect();
            let offset = arg.offset.as_deref().unwrap_or("0");
            let iface = if cuda {
                "halide_cuda_device_interface()"
            } else {
                "nullptr"
            };
            if dims.is_empty() {
                lines_after.push(format!("halide_dimension_t* {n}_dim_ = nullptr;"));
            } else {
                lines_after.push(format!("halide_dimension_t {n}_dim_[] = {{{}}};", dims.join(", ")));
            }
            lines_after.push(format!(
                "halide_buffer_t {n}_buffer_ = wrapir_halide_buffer({n}_address_, static_cast<int64_t>({offset}), {}, {iface}, {code}, {bits}, {}, {n}_dim_);",
                layout.dtype.size_bytes(),
                shape.len()
            ));
            params.push((
                HalideParamDecl {
                    decl: format!("halide_buffer_t* {n}"),
                    name: n.clone(),
                    scalar: None,
                },
                format!("&{n}_buffer_"),
            ));
        }
        let mut call_args: Vec<String> = Vec::new();
        let mut decl_params: Vec<HalideParamDecl> = Vec::new();
        if user_context {
            // Inductor's CUDA glue passes the stream as the user context.
            let stream = match cuda {
                false => "nullptr".to_string(),
                true => {
                    let d = self.dialect;
                    d.stream(self, device_index.unwrap_or(0))
                }
            };
            call_args.push(stream);
            decl_params.push(HalideParamDecl {
                decl: "const void* user_context".to_string(),
                name: "user_context".to_string(),
                scalar: None,
            });
        }
        for l in named_scalars.into_iter().chain(lines_after) {
            self.line(l);
        }
        for (decl, arg) in params {
            call_args.push(arg);
            decl_params.push(decl);
        }
        let msg = format!("Halide kernel `{kernel}` failed with status ");
        self.line(format!(
            "if (int status_ = {kernel}({})) {{ throw std::runtime_error({} + std::to_string(status_)); }}",
            call_args.join(", "),
            c_string(&msg)
        ));
        self.close("}");
        let decl = if !cuda && self.dialect.host_kernel_images() {
            halide_image_forwarder(kernel, &meta.target, &decl_params)
        } else {
            let decls: Vec<&str> = decl_params.iter().map(|p| p.decl.as_str()).collect();
            format!(
                "// Halide kernel `{kernel}` (target {}), built with `-f {kernel}`.\nextern \"C\" int {kernel}({});\n",
                meta.target,
                decls.join(", ")
            )
        };
        self.declare_direct(kernel, decl, cx)?;
        let used = self.halide.get_or_insert_with(HalideUse::default);
        used.cuda |= cuda;
        Ok(())
    }

    /// A CUDA C kernel or host function the embedder links: pointers as
    /// `void*`, integers as `int64_t`, floats as `double`, booleans as `bool`,
    /// then (CUDA C) the stream; a non-zero return fails the wrapper.
    pub(super) fn extern_function_call(
        &mut self,
        g: &GraphCtx<'_>,
        call: &KernelCall,
        cuda: bool,
        cx: &Cx<'_>,
    ) -> Result<(), Error> {
        let kernel = &call.kernel;
        let what = if cuda { "CUDA C" } else { "host" };
        // Validation: these kernels take positional arguments only (`NamedArgument`).
        let args: Vec<&ArgValue> = call.args.iter().map(|a| &a.value).collect();
        let mut types = Vec::with_capacity(args.len() + 1);
        let mut printed = Vec::with_capacity(args.len() + 1);
        for (i, value) in args.iter().enumerate() {
            match value {
                ArgValue::Buffer(b) => {
                    types.push("void*");
                    printed.push(format!("(void*)({}.data_ptr())", g.local(b)));
                }
                ArgValue::Expr(_) => {
                    types.push("int64_t");
                    printed.push(self.scalar_arg(kernel, i, value, cx)?);
                }
                ArgValue::Float(_) => {
                    types.push("double");
                    printed.push(self.scalar_arg(kernel, i, value, cx)?);
                }
                ArgValue::Bool(_) => {
                    types.push("bool");
                    printed.push(self.scalar_arg(kernel, i, value, cx)?);
                }
                // Its C declaration is written from the arguments.
                _ => {
                    return Err(self.unsupported(
                        cx,
                        format!("argument {i} of {what} kernel `{kernel}` is neither a tensor nor a number"),
                    ))
                }
            }
        }
        if cuda {
            types.push("void* stream");
            let device = call.device.map_or(0, |d| device_index(&d));
            let d = self.dialect;
            let stream = d.stream(self, device);
            printed.push(stream);
        }
        let mut decl = String::new();
        let _ = writeln!(decl, "// {what} kernel `{kernel}`, linked by the embedder.");
        let _ = writeln!(decl, "extern \"C\" int {kernel}({});", types.join(", "));
        self.declare_direct(kernel, decl, cx)?;
        let msg = format!("{what} kernel `{kernel}` failed with status ");
        self.line(format!(
            "if (int status_ = {kernel}({})) {{ throw std::runtime_error({} + std::to_string(status_)); }}",
            printed.join(", "),
            c_string(&msg)
        ));
        Ok(())
    }
}

/// [`ErrorKind::KernelArgs`]: a call's arguments that do not match what
/// `kernel` takes.
pub(super) fn kernel_args(cx: &Cx<'_>, kernel: &KernelName, message: String) -> Error {
    Error::new(
        cx,
        crate::lower::ErrorKind::KernelArgs {
            kernel: kernel.to_string(),
            message,
        },
    )
}
