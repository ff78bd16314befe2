//! Compiled host kernels: Inductor's C++ and Halide kernels as the shared
//! objects a CPU bundle carries (`kernels/<kernel>.so`, made by the
//! exporter's `wrapir_export.host_kernels` for the baseline x86-64 ISA), loaded
//! once with `libloading` and registered as [`HostBackend`] kernels.
//!
//! The images have a fixed C ABI, `int entry(void **args)`:
//!
//! * C++ (`KernelBackend::Cpp`): `wrapir_kernel_argv`, where `args[i]` is the
//!   data pointer of tensor argument `i` or points to the value of scalar
//!   argument `i` (of its C type), and `wrapir_kernel_signature()`, the
//!   argument types it was compiled with (`;`-joined), which must equal the
//!   program's `arg_types`;
//! * Halide (`KernelBackend::Halide`): Halide's own `<kernel>_argv`, where
//!   `args[i]` is a `halide_buffer_t *` for a buffer argument or points to a
//!   scalar, and `<kernel>_metadata()`, the pipeline's argument list (kinds,
//!   dimensions, types), which must agree with the program's `argtypes`. Each
//!   buffer is described from the kernel metadata's shape, stride and offset
//!   expressions, evaluated with the call's scalar arguments. The program's
//!   Halide kernels share one runtime, `kernels/halide_runtime.so`, which the
//!   kernel objects name in their `DT_NEEDED` (found through `$ORIGIN`).
//!
//! Every call is validated against the metadata first (arity, tensor or
//! scalar, dtypes, dimensions, and for Halide that each buffer lies inside
//! its tensor's storage); an error names the kernel and the argument.
//!
//! Loading a bundle's kernels runs its code (as loading its cubins does):
//! open only bundles you trust. This module and `exec::cuda` are the library's
//! exceptions to "no I/O": they open the shared objects a caller names.

use super::host::{HostBackend, KernelFn};
use super::tensor::RawView;
use super::{ExecError, KernelLaunch, Tensor, Value};
use crate::ir::{CppMeta, DType, HalideArg, HalideMeta, KernelBackend, Program};
use crate::sym::{Bindings, Symbol};
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The image of a C++ or Halide kernel in a bundle: `kernels/<kernel>.so`.
pub fn image_path(kernel: &str) -> String {
    format!("kernels/{kernel}.so")
}

/// The Halide runtime every Halide kernel of a bundle links against.
pub const HALIDE_RUNTIME: &str = "kernels/halide_runtime.so";

/// Why a bundle's host kernels could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum HostKernelError {
    /// The shared object could not be opened.
    #[error("kernel `{kernel}`: cannot load {}: {message}", path.display())]
    Load {
        /// The kernel.
        kernel: String,
        /// Its image.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The image does not match the program's kernel metadata.
    #[error("kernel `{kernel}` ({}): {message}", path.display())]
    Mismatch {
        /// The kernel.
        kernel: String,
        /// Its image.
        path: PathBuf,
        /// What disagrees.
        message: String,
    },
}

/// The C++ and Halide kernels of `program` that have host images.
pub fn host_kernel_names(program: &Program) -> Vec<&str> {
    program
        .kernels
        .values()
        .filter(|k| is_host_image_kernel(&k.backend))
        .map(|k| k.name.as_str())
        .collect()
}

fn is_host_image_kernel(backend: &KernelBackend) -> bool {
    match backend {
        KernelBackend::Cpp(_) => true,
        KernelBackend::Halide(m) => !m.is_cuda(),
        _ => false,
    }
}

/// [`load_program_kernels`] from where a bundle keeps its kernel images
/// (`Bundle::kernel_images`): a bundle directory or a program file's
/// directory. A package's images live in memory, where a shared object cannot
/// be loaded from: that is an error when the program has host kernels.
pub fn load_kernels_from(
    backend: &mut HostBackend,
    program: &Program,
    images: &crate::bundle::KernelImages,
) -> Result<usize, HostKernelError> {
    match images {
        crate::bundle::KernelImages::Directory(dir) => load_program_kernels(backend, program, dir),
        crate::bundle::KernelImages::InMemory(_) => match host_kernel_names(program).first() {
            None => Ok(0),
            Some(kernel) => Err(HostKernelError::Load {
                kernel: kernel.to_string(),
                path: PathBuf::from(image_path(kernel)),
                message: "host kernels are loaded from a bundle directory, not from a package's memory (run the bundle directory)".into(),
            }),
        },
    }
}

/// Loads every C++ and (CPU) Halide kernel of `program` from its image under
/// `dir` (a bundle directory: `dir/kernels/<kernel>.so`), checks each image
/// against the kernel's metadata, and registers it on `backend`. Returns how
/// many kernels were registered.
pub fn load_program_kernels(
    backend: &mut HostBackend,
    program: &Program,
    dir: &Path,
) -> Result<usize, HostKernelError> {
    let mut n = 0;
    for def in program.kernels.values() {
        let path = dir.join(image_path(def.name.as_str()));
        let kernel = def.name.as_str().to_string();
        let f: KernelFn = match &def.backend {
            KernelBackend::Cpp(meta) => Arc::new(CppKernel::load(&kernel, &path, meta)?.into_fn()),
            KernelBackend::Halide(meta) if !meta.is_cuda() => {
                Arc::new(HalideKernel::load(&kernel, &path, meta)?.into_fn())
            }
            _ => continue,
        };
        backend.register_kernel(&kernel, f);
        n += 1;
    }
    Ok(n)
}

type ArgvFn = unsafe extern "C" fn(*mut *mut c_void) -> i32;

fn open(kernel: &str, path: &Path) -> Result<libloading::Library, HostKernelError> {
    // SAFETY: loading runs the object's initialisers. The images are the
    // bundle's own kernels (see the module docs: open only trusted bundles);
    // the exporter builds them without libtorch or an OpenMP runtime, so no
    // initialiser depends on state this process lacks.
    unsafe { libloading::Library::new(path) }.map_err(|e| HostKernelError::Load {
        kernel: kernel.to_string(),
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn symbol<T: Copy>(lib: &libloading::Library, kernel: &str, path: &Path, name: &str) -> Result<T, HostKernelError> {
    // SAFETY: `T` is the C type the exporter gives this symbol (an
    // `int (*)(void **)` entry or a metadata accessor, see the module docs);
    // the pointer is only used while `lib` stays loaded (callers keep it in
    // an `Arc` next to the pointer).
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| HostKernelError::Mismatch {
            kernel: kernel.to_string(),
            path: path.to_path_buf(),
            message: format!("no symbol `{name}`: {e}"),
        })
}

/// A scalar argument's value as the kernel reads it: `bytes[..size]` of an
/// 8-byte slot (little-endian for integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScalarKind {
    Int { bits: u8, signed: bool },
    Float { bits: u8 },
    Bool,
}

impl ScalarKind {
    /// The slot's bits for `v`, or an error when it does not fit.
    fn encode(self, v: &Value<Tensor>) -> Result<u64, String> {
        match self {
            ScalarKind::Bool => v
                .as_int()
                .filter(|x| *x == 0 || *x == 1)
                .map(|x| x as u64)
                .ok_or_else(|| format!("expected a bool, got {}", describe(v))),
            ScalarKind::Int { bits, signed } => {
                let x = match v {
                    Value::Int(x) => *x,
                    Value::Bool(b) => i64::from(*b),
                    _ => return Err(format!("expected an integer, got {}", describe(v))),
                };
                let fits = match (bits, signed) {
                    (64, true) => true,
                    (64, false) => x >= 0,
                    (b, true) => x >= -(1i64 << (b - 1)) && x < (1i64 << (b - 1)),
                    (b, false) => x >= 0 && x < (1i64 << b),
                };
                if !fits {
                    return Err(format!(
                        "{x} does not fit a {}{bits}-bit integer",
                        if signed { "signed " } else { "unsigned " }
                    ));
                }
                let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
                Ok((x as u64) & mask)
            }
            ScalarKind::Float { bits } => {
                let x = v
                    .as_float()
                    .ok_or_else(|| format!("expected a number, got {}", describe(v)))?;
                Ok(if bits == 32 {
                    u64::from((x as f32).to_bits())
                } else {
                    x.to_bits()
                })
            }
        }
    }
}

fn describe(v: &Value<Tensor>) -> String {
    match v {
        Value::Tensor(t) => format!("a {} tensor", t.dtype()),
        Value::Int(x) => format!("the integer {x}"),
        Value::Float(x) => format!("the float {x}"),
        Value::Bool(b) => format!("the bool {b}"),
        other => format!("a {}", other.kind()),
    }
}

/// The dtype a C element type names (`float`, `const int64_t`, `at::BFloat16`, ...).
fn c_element_dtype(ty: &str) -> Option<DType> {
    let t = ty.replace("const", "");
    let t = t.trim();
    Some(match t {
        "float" => DType::Float32,
        "double" => DType::Float64,
        "bool" => DType::Bool,
        "int8_t" | "signed char" => DType::Int8,
        "uint8_t" | "unsigned char" => DType::Uint8,
        "int16_t" | "short" => DType::Int16,
        "int32_t" | "int" => DType::Int32,
        "int64_t" | "long" | "long long" => DType::Int64,
        "half" | "at::Half" | "c10::Half" => DType::Float16,
        "bfloat16" | "at::BFloat16" | "c10::BFloat16" => DType::Bfloat16,
        _ => return None,
    })
}

fn scalar_kind(ty: &str) -> Option<ScalarKind> {
    Some(match c_element_dtype(ty)? {
        DType::Bool => ScalarKind::Bool,
        DType::Float32 => ScalarKind::Float { bits: 32 },
        DType::Float64 => ScalarKind::Float { bits: 64 },
        DType::Int8 => ScalarKind::Int { bits: 8, signed: true },
        DType::Uint8 => ScalarKind::Int { bits: 8, signed: false },
        DType::Int16 => ScalarKind::Int { bits: 16, signed: true },
        DType::Int32 => ScalarKind::Int { bits: 32, signed: true },
        DType::Int64 => ScalarKind::Int { bits: 64, signed: true },
        _ => return None,
    })
}

/// What one argument of a compiled kernel is.
#[derive(Clone, Copy, Debug)]
enum ArgKind {
    Tensor(DType),
    Scalar(ScalarKind),
}

fn parse_arg_type(ty: &str) -> Option<ArgKind> {
    let t = ty.trim();
    match t.strip_suffix('*') {
        Some(elem) => c_element_dtype(elem).map(ArgKind::Tensor),
        None => scalar_kind(t).map(ArgKind::Scalar),
    }
}

fn arg_error(kernel: &str, i: usize, name: &str, message: impl std::fmt::Display) -> ExecError {
    ExecError::op(kernel, format!("argument {i} (`{name}`): {message}"))
}

/// Checks a tensor argument: on the CPU, of the expected dtype.
fn check_tensor<'a>(
    kernel: &str,
    i: usize,
    name: &str,
    v: &'a Value<Tensor>,
    dtype: DType,
) -> Result<&'a Tensor, ExecError> {
    let Value::Tensor(t) = v else {
        return Err(arg_error(
            kernel,
            i,
            name,
            format!("expected a {dtype} tensor, got {}", describe(v)),
        ));
    };
    if t.dtype() != dtype {
        return Err(arg_error(
            kernel,
            i,
            name,
            format!("expected a {dtype} tensor, got a {} tensor", t.dtype()),
        ));
    }
    if t.spec().device.kind != crate::ir::DeviceType::Cpu {
        return Err(arg_error(
            kernel,
            i,
            name,
            format!("the tensor is on {}, the kernel runs on the host", t.spec().device),
        ));
    }
    Ok(t)
}

/// A loaded C++ kernel.
struct CppKernel {
    name: String,
    args: Vec<ArgKind>,
    entry: ArgvFn,
    _lib: Arc<libloading::Library>,
}

impl CppKernel {
    fn load(kernel: &str, path: &Path, meta: &CppMeta) -> Result<CppKernel, HostKernelError> {
        let mismatch = |message: String| HostKernelError::Mismatch {
            kernel: kernel.to_string(),
            path: path.to_path_buf(),
            message,
        };
        let args = meta
            .arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| parse_arg_type(t).ok_or_else(|| mismatch(format!("argument {i}: unsupported C type `{t}`"))))
            .collect::<Result<Vec<_>, _>>()?;
        let lib = open(kernel, path)?;
        let signature: unsafe extern "C" fn() -> *const c_char = symbol(&lib, kernel, path, "wrapir_kernel_signature")?;
        // SAFETY: the exporter's `wrapir_kernel_signature` returns a pointer
        // to a NUL-terminated string literal in the image, valid while it is loaded.
        let compiled = unsafe { CStr::from_ptr(signature()) }.to_string_lossy().into_owned();
        let declared = meta.arg_types.iter().map(|t| t.trim()).collect::<Vec<_>>().join(";");
        if compiled != declared {
            return Err(mismatch(format!(
                "the image was compiled for arguments `{compiled}`, the program declares `{declared}`"
            )));
        }
        let entry: ArgvFn = symbol(&lib, kernel, path, "wrapir_kernel_argv")?;
        Ok(CppKernel {
            name: kernel.to_string(),
            args,
            entry,
            _lib: Arc::new(lib),
        })
    }

    fn into_fn(self) -> impl Fn(&KernelLaunch<'_, Tensor>) -> Result<(), ExecError> + Send + Sync {
        move |launch| self.call(launch)
    }

    fn call(&self, launch: &KernelLaunch<'_, Tensor>) -> Result<(), ExecError> {
        let kernel = self.name.as_str();
        if !launch.kwargs.is_empty() {
            return Err(ExecError::op(kernel, "C++ kernels take positional arguments only"));
        }
        if launch.args.len() != self.args.len() {
            return Err(ExecError::op(
                kernel,
                format!(
                    "takes {} arguments (`arg_types`) but got {}",
                    self.args.len(),
                    launch.args.len()
                ),
            ));
        }
        let mut tensors = Vec::new();
        let mut scalars = vec![0u64; self.args.len()];
        for (i, (kind, v)) in self.args.iter().zip(launch.args.iter()).enumerate() {
            let name = format!("arg{i}");
            match kind {
                ArgKind::Tensor(dtype) => tensors.push((i, check_tensor(kernel, i, &name, v, *dtype)?)),
                ArgKind::Scalar(s) => scalars[i] = s.encode(v).map_err(|m| arg_error(kernel, i, &name, m))?,
            }
        }
        let refs: Vec<&Tensor> = tensors.iter().map(|(_, t)| *t).collect();
        let rc = Tensor::with_raw_views(&refs, |views: &[RawView]| {
            let mut argv: Vec<*mut c_void> = scalars.iter_mut().map(|s| (s as *mut u64).cast::<c_void>()).collect();
            for ((i, _), view) in tensors.iter().zip(views) {
                argv[*i] = view.ptr.cast::<c_void>();
            }
            // SAFETY: `argv` has one entry per argument of the compiled
            // kernel (its signature was checked against `arg_types` when
            // loaded, and the call's arity and kinds against it above): a
            // data pointer of the declared element type into a storage locked
            // for this call, or a pointer to an 8-byte slot holding the
            // scalar in its C type. The kernel indexes the tensors as
            // Inductor compiled it for the layouts the program declares,
            // which the interpreter checked (`assert_size_stride`, allocations).
            unsafe { (self.entry)(argv.as_mut_ptr()) }
        })?;
        if rc != 0 {
            return Err(ExecError::op(kernel, format!("the compiled kernel returned {rc}")));
        }
        Ok(())
    }
}

// ---- Halide ----------------------------------------------------------------

/// `halide_type_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HalideType {
    code: u8,
    bits: u8,
    lanes: u16,
}

const HALIDE_INT: u8 = 0;
const HALIDE_UINT: u8 = 1;
const HALIDE_FLOAT: u8 = 2;
const HALIDE_BFLOAT: u8 = 4;

/// The Halide type of a dtype (`halide_type_of<T>()`; bool is a 1-bit uint).
fn halide_type(d: DType) -> Option<HalideType> {
    let (code, bits) = match d {
        DType::Bool => (HALIDE_UINT, 1),
        DType::Uint8 => (HALIDE_UINT, 8),
        DType::Int8 => (HALIDE_INT, 8),
        DType::Int16 => (HALIDE_INT, 16),
        DType::Int32 => (HALIDE_INT, 32),
        DType::Int64 => (HALIDE_INT, 64),
        DType::Float16 => (HALIDE_FLOAT, 16),
        DType::Bfloat16 => (HALIDE_BFLOAT, 16),
        DType::Float32 => (HALIDE_FLOAT, 32),
        DType::Float64 => (HALIDE_FLOAT, 64),
        _ => return None,
    };
    Some(HalideType { code, bits, lanes: 1 })
}

/// `halide_dimension_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct HalideDimension {
    min: i32,
    extent: i32,
    stride: i32,
    flags: u32,
}

/// `halide_buffer_t`.
#[repr(C)]
struct HalideBuffer {
    device: u64,
    device_interface: *const c_void,
    host: *mut u8,
    flags: u64,
    ty: HalideType,
    dimensions: i32,
    dim: *mut HalideDimension,
    padding: *mut c_void,
}

/// `halide_buffer_flag_host_dirty`.
const HALIDE_HOST_DIRTY: u64 = 1;

/// `halide_filter_argument_t`.
#[repr(C)]
struct FilterArgument {
    name: *const c_char,
    kind: i32,
    dimensions: i32,
    ty: HalideType,
    scalar_def: *const c_void,
    scalar_min: *const c_void,
    scalar_max: *const c_void,
    scalar_estimate: *const c_void,
    buffer_estimates: *const *const i64,
}

/// `halide_filter_metadata_t`.
#[repr(C)]
struct FilterMetadata {
    version: i32,
    num_arguments: i32,
    arguments: *const FilterArgument,
    target: *const c_char,
    name: *const c_char,
}

/// One argument of a loaded Halide pipeline, from the program's metadata and
/// checked against the image's.
#[derive(Debug)]
struct HalideParam {
    name: String,
    /// Buffer: element dtype and the shape/stride/offset expressions.
    buffer: Option<HalideBufferSpec>,
    /// Scalar: its type in the pipeline.
    scalar: Option<ScalarKind>,
}

#[derive(Debug)]
struct HalideBufferSpec {
    dtype: DType,
    ty: HalideType,
    shape: Vec<crate::sym::SymExpr>,
    stride: Vec<crate::sym::SymExpr>,
    offset: crate::sym::SymExpr,
    /// The call argument whose data this buffer uses (its own, or the one it aliases).
    data_from: String,
}

/// A buffer argument of one call, evaluated and checked.
struct PreparedBuffer<'a> {
    /// Its position among the pipeline's arguments.
    param: usize,
    /// Its tensor among the call's distinct tensors.
    tensor: usize,
    dims: Vec<HalideDimension>,
    /// Elements from the tensor's start to the buffer's host pointer.
    offset: usize,
    /// One past the last element the buffer reaches, from the tensor's start (0: empty).
    end: i64,
    spec: &'a HalideBufferSpec,
}

/// A loaded Halide kernel.
struct HalideKernel {
    name: String,
    params: Vec<HalideParam>,
    /// Names of the arguments the call passes (the non-aliases), in order.
    call_args: Vec<String>,
    entry: ArgvFn,
    _lib: Arc<libloading::Library>,
}

/// A Halide size expression (Inductor's C++ printing: `8L*ks0`) as a symbolic
/// expression over the kernel's scalar arguments.
fn parse_size_expr(text: &str) -> Result<crate::sym::SymExpr, String> {
    let mut plain = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        // Drop the `L` of integer literals (`128L`).
        let literal_suffix = *c == 'L'
            && i > 0
            && chars[i - 1].is_ascii_digit()
            && !chars.get(i + 1).is_some_and(|n| n.is_alphanumeric() || *n == '_')
            && {
                let mut j = i;
                while j > 0 && chars[j - 1].is_ascii_digit() {
                    j -= 1;
                }
                j == 0 || !(chars[j - 1].is_alphanumeric() || chars[j - 1] == '_')
            };
        if !literal_suffix {
            plain.push(*c);
        }
    }
    crate::sym::parse::parse(&plain).map_err(|e| format!("cannot read size expression `{text}`: {e}"))
}

impl HalideKernel {
    fn load(kernel: &str, path: &Path, meta: &HalideMeta) -> Result<HalideKernel, HostKernelError> {
        let mismatch = |message: String| HostKernelError::Mismatch {
            kernel: kernel.to_string(),
            path: path.to_path_buf(),
            message,
        };
        let lib = open(kernel, path)?;
        let metadata: unsafe extern "C" fn() -> *const FilterMetadata =
            symbol(&lib, kernel, path, &format!("{kernel}_metadata"))?;
        // SAFETY: Halide's `<name>_metadata()` returns a pointer to static
        // metadata in the image: `num_arguments` entries at `arguments`, each
        // name a NUL-terminated string, valid while the image is loaded.
        let image_args: Vec<(String, i32, i32, HalideType)> = unsafe {
            let m = &*metadata();
            let n = usize::try_from(m.num_arguments).map_err(|_| mismatch("negative argument count".into()))?;
            if m.arguments.is_null() && n > 0 {
                return Err(mismatch("no argument table".into()));
            }
            (0..n)
                .map(|i| {
                    let a = &*m.arguments.add(i);
                    let name = if a.name.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(a.name).to_string_lossy().into_owned()
                    };
                    (name, a.kind, a.dimensions, a.ty)
                })
                .collect()
        };
        if image_args.len() != meta.argtypes.len() {
            return Err(mismatch(format!(
                "the pipeline takes {} arguments, the program's metadata lists {}",
                image_args.len(),
                meta.argtypes.len()
            )));
        }
        let mut params = Vec::with_capacity(meta.argtypes.len());
        for (i, (arg, (iname, ikind, idims, ity))) in meta.argtypes.iter().zip(&image_args).enumerate() {
            let what = |m: String| mismatch(format!("argument {i} (`{}`): {m}", arg.name));
            if *iname != arg.name {
                return Err(what(format!("the pipeline's argument {i} is `{iname}`")));
            }
            params.push(Self::param(arg, *ikind, *idims, *ity).map_err(what)?);
        }
        let call_args = meta
            .argtypes
            .iter()
            .filter(|a| a.alias_of.is_none())
            .map(|a| a.name.clone())
            .collect();
        let entry: ArgvFn = symbol(&lib, kernel, path, &format!("{kernel}_argv"))?;
        Ok(HalideKernel {
            name: kernel.to_string(),
            params,
            call_args,
            entry,
            _lib: Arc::new(lib),
        })
    }

    /// One argument from the program's spec, checked against the image's
    /// (`kind`: 0 scalar, 1 input buffer, 2 output buffer).
    fn param(arg: &HalideArg, kind: i32, dims: i32, ty: HalideType) -> Result<HalideParam, String> {
        match (&arg.shape, &arg.stride) {
            (Some(shape), Some(stride)) => {
                if kind != 1 && kind != 2 {
                    return Err("a buffer in the program, a scalar in the pipeline".into());
                }
                if shape.len() != stride.len() {
                    return Err(format!("{} sizes but {} strides", shape.len(), stride.len()));
                }
                if usize::try_from(dims).ok() != Some(shape.len()) {
                    return Err(format!(
                        "{} dimensions in the program, {dims} in the pipeline",
                        shape.len()
                    ));
                }
                let elem = arg
                    .ctype
                    .trim()
                    .strip_suffix('*')
                    .ok_or_else(|| format!("buffer of non-pointer C type `{}`", arg.ctype))?;
                let dtype = c_element_dtype(elem).ok_or_else(|| format!("unsupported C type `{}`", arg.ctype))?;
                let want = halide_type(dtype).ok_or_else(|| format!("no Halide type for {dtype}"))?;
                if want != ty {
                    return Err(format!(
                        "element type {dtype} (Halide code {} bits {}), the pipeline has code {} bits {} lanes {}",
                        want.code, want.bits, ty.code, ty.bits, ty.lanes
                    ));
                }
                Ok(HalideParam {
                    name: arg.name.clone(),
                    buffer: Some(HalideBufferSpec {
                        dtype,
                        ty,
                        shape: shape.iter().map(|s| parse_size_expr(s)).collect::<Result<_, _>>()?,
                        stride: stride.iter().map(|s| parse_size_expr(s)).collect::<Result<_, _>>()?,
                        offset: parse_size_expr(arg.offset.as_deref().unwrap_or("0"))?,
                        data_from: arg.alias_of.clone().unwrap_or_else(|| arg.name.clone()),
                    }),
                    scalar: None,
                })
            }
            (None, None) => {
                if kind != 0 {
                    return Err("a scalar in the program, a buffer in the pipeline".into());
                }
                // The pipeline's own scalar type decides how the value is passed
                // (Inductor declares `long` sizes that a generator may take as int32).
                let scalar = match (ty.code, ty.bits, ty.lanes) {
                    (HALIDE_UINT, 1, 1) => ScalarKind::Bool,
                    (HALIDE_INT, b @ (8 | 16 | 32 | 64), 1) => ScalarKind::Int { bits: b, signed: true },
                    (HALIDE_UINT, b @ (8 | 16 | 32 | 64), 1) => ScalarKind::Int { bits: b, signed: false },
                    (HALIDE_FLOAT, b @ (32 | 64), 1) => ScalarKind::Float { bits: b },
                    _ => {
                        return Err(format!(
                            "unsupported scalar type (code {} bits {} lanes {})",
                            ty.code, ty.bits, ty.lanes
                        ))
                    }
                };
                Ok(HalideParam {
                    name: arg.name.clone(),
                    buffer: None,
                    scalar: Some(scalar),
                })
            }
            _ => Err("a shape without strides, or strides without a shape".into()),
        }
    }

    fn into_fn(self) -> impl Fn(&KernelLaunch<'_, Tensor>) -> Result<(), ExecError> + Send + Sync {
        move |launch| self.call(launch)
    }

    fn call(&self, launch: &KernelLaunch<'_, Tensor>) -> Result<(), ExecError> {
        let kernel = self.name.as_str();
        if !launch.kwargs.is_empty() {
            return Err(ExecError::op(kernel, "Halide kernels take positional arguments only"));
        }
        if launch.args.len() != self.call_args.len() {
            return Err(ExecError::op(
                kernel,
                format!(
                    "takes {} arguments ({}) but got {}",
                    self.call_args.len(),
                    self.call_args.join(", "),
                    launch.args.len()
                ),
            ));
        }
        let value_of = |name: &str| -> Option<(usize, &Value<Tensor>)> {
            let i = self.call_args.iter().position(|n| n == name)?;
            Some((i, launch.args.get(i)?))
        };
        // Scalars first: the buffers' expressions read them.
        let mut bindings = Bindings::default();
        let mut slots = vec![0u64; self.params.len()];
        for (p, slot) in self.params.iter().zip(slots.iter_mut()) {
            let Some(kind) = p.scalar else { continue };
            let (i, v) =
                value_of(&p.name).ok_or_else(|| ExecError::op(kernel, format!("no value for `{}`", p.name)))?;
            *slot = kind.encode(v).map_err(|m| arg_error(kernel, i, &p.name, m))?;
            if let Some(x) = v.as_int() {
                bindings.insert(Symbol::new(&p.name), x);
            }
        }
        let mut tensors: Vec<&Tensor> = Vec::new();
        let mut buffers: Vec<PreparedBuffer<'_>> = Vec::new();
        for (k, p) in self.params.iter().enumerate() {
            let Some(spec) = &p.buffer else { continue };
            let (i, v) = value_of(&spec.data_from)
                .ok_or_else(|| ExecError::op(kernel, format!("no value for `{}`", spec.data_from)))?;
            let t = check_tensor(kernel, i, &p.name, v, spec.dtype)?;
            let eval = |e: &crate::sym::SymExpr, what: &str| {
                crate::sym::eval::eval_int(e, &bindings)
                    .map_err(|err| arg_error(kernel, i, &p.name, format!("{what} `{e}`: {err}")))
            };
            let mut dims = Vec::with_capacity(spec.shape.len());
            // The last storage element the buffer reaches, from its offset.
            let mut reach: i64 = 0;
            let mut empty = false;
            for (d, (se, te)) in spec.shape.iter().zip(&spec.stride).enumerate() {
                let extent = eval(se, &format!("size {d}"))?;
                let stride = eval(te, &format!("stride {d}"))?;
                if extent < 0 || stride < 0 {
                    return Err(arg_error(
                        kernel,
                        i,
                        &p.name,
                        format!("size {extent} / stride {stride} in dimension {d}"),
                    ));
                }
                empty |= extent == 0;
                reach = (extent.max(1) - 1)
                    .checked_mul(stride)
                    .and_then(|x| x.checked_add(reach))
                    .ok_or_else(|| arg_error(kernel, i, &p.name, "the buffer's extent overflows"))?;
                let to_i32 = |x: i64, what: &str| {
                    i32::try_from(x).map_err(|_| {
                        arg_error(
                            kernel,
                            i,
                            &p.name,
                            format!("{what} {x} in dimension {d} exceeds Halide's 32-bit range"),
                        )
                    })
                };
                dims.push(HalideDimension {
                    min: 0,
                    extent: to_i32(extent, "size")?,
                    stride: to_i32(stride, "stride")?,
                    flags: 0,
                });
            }
            let offset = eval(&spec.offset, "offset")?;
            if offset < 0 {
                return Err(arg_error(kernel, i, &p.name, format!("negative offset {offset}")));
            }
            let end = offset
                .checked_add(reach)
                .and_then(|e| e.checked_add(1))
                .ok_or_else(|| arg_error(kernel, i, &p.name, "the buffer's extent overflows"))?;
            let index = match tensors.iter().position(|x| std::ptr::eq(*x, t)) {
                Some(j) => j,
                None => {
                    tensors.push(t);
                    tensors.len() - 1
                }
            };
            buffers.push(PreparedBuffer {
                param: k,
                tensor: index,
                dims,
                // Validated non-negative above.
                offset: usize::try_from(offset).unwrap_or(0),
                end: if empty { 0 } else { end },
                spec,
            });
        }
        let rc = Tensor::with_raw_views(&tensors, |views: &[RawView]| -> Result<i32, ExecError> {
            let mut dims_store: Vec<Vec<HalideDimension>> = Vec::with_capacity(buffers.len());
            let mut halide: Vec<(usize, HalideBuffer)> = Vec::with_capacity(buffers.len());
            for b in &buffers {
                let view = views[b.tensor];
                let p = &self.params[b.param];
                let end = u64::try_from(b.end).unwrap_or(u64::MAX);
                if end > view.elements_after as u64 {
                    return Err(ExecError::op(
                        kernel,
                        format!(
                            "buffer `{}` reaches element {} but its tensor's storage holds {} from the tensor's start",
                            p.name,
                            b.end - 1,
                            view.elements_after
                        ),
                    ));
                }
                let elem = b.spec.dtype.size_bytes() as usize;
                // Moving `dims_store`'s entries as it grows keeps each inner
                // vector's heap buffer where it is, so `dim` stays valid.
                dims_store.push(b.dims.clone());
                let dim_ptr = dims_store.last_mut().map_or(std::ptr::null_mut(), |d| d.as_mut_ptr());
                halide.push((
                    b.param,
                    HalideBuffer {
                        device: 0,
                        device_interface: std::ptr::null(),
                        // SAFETY: `offset` elements from the view's start lie
                        // within its storage (`offset < end <= elements_after`),
                        // or the buffer is empty and never read.
                        host: if b.end > 0 {
                            unsafe { view.ptr.add(b.offset * elem) }
                        } else {
                            view.ptr
                        },
                        flags: HALIDE_HOST_DIRTY,
                        ty: b.spec.ty,
                        // At most a handful of dimensions (checked against the pipeline's i32 count).
                        dimensions: b.dims.len() as i32,
                        dim: dim_ptr,
                        padding: std::ptr::null_mut(),
                    },
                ));
            }
            let mut argv: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast::<c_void>()).collect();
            for (k, b) in halide.iter_mut() {
                argv[*k] = (b as *mut HalideBuffer).cast::<c_void>();
            }
            // SAFETY: `argv` has one entry per pipeline argument, in the
            // pipeline's order (checked against `<kernel>_metadata()` when
            // loaded): a `halide_buffer_t` whose host pointer, dimensions and
            // type describe memory inside a storage locked for this call, or
            // a pointer to an 8-byte slot holding the scalar in the
            // pipeline's type. `dims_store` and `halide` outlive the call.
            Ok(unsafe { (self.entry)(argv.as_mut_ptr()) })
        })??;
        if rc != 0 {
            return Err(ExecError::op(
                kernel,
                format!("the Halide pipeline returned error {rc}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_expressions_drop_integer_suffixes_only() {
        let e = parse_size_expr("8L*ks0 + 1L").unwrap();
        let mut b = Bindings::default();
        b.insert(Symbol::new("ks0"), 3);
        assert_eq!(crate::sym::eval::eval_int(&e, &b).unwrap(), 25);
        // `L` inside a name is kept: `s1L` is a symbol, not `s1`.
        let e = parse_size_expr("s1L").unwrap();
        assert!(crate::sym::eval::eval_int(&e, &Bindings::default()).is_err());
        assert!(parse_size_expr("(").is_err());
    }

    #[test]
    fn scalars_are_checked_against_their_c_type() {
        let i32k = ScalarKind::Int { bits: 32, signed: true };
        assert_eq!(i32k.encode(&Value::Int(-1)).unwrap(), 0xffff_ffff);
        assert!(i32k.encode(&Value::Int(1 << 31)).unwrap_err().contains("does not fit"));
        let u8k = ScalarKind::Int { bits: 8, signed: false };
        assert!(u8k.encode(&Value::Int(-1)).is_err());
        assert_eq!(
            ScalarKind::Float { bits: 32 }.encode(&Value::Float(1.5)).unwrap(),
            u64::from(1.5f32.to_bits())
        );
        assert!(ScalarKind::Bool.encode(&Value::Int(2)).is_err());
        assert!(ScalarKind::Int { bits: 64, signed: true }
            .encode(&Value::Str("x".into()))
            .unwrap_err()
            .contains("expected an integer"));
    }

    #[test]
    fn c_types_name_dtypes() {
        assert!(matches!(
            parse_arg_type("const float*"),
            Some(ArgKind::Tensor(DType::Float32))
        ));
        assert!(matches!(
            parse_arg_type("at::BFloat16*"),
            Some(ArgKind::Tensor(DType::Bfloat16))
        ));
        assert!(matches!(
            parse_arg_type("const int64_t"),
            Some(ArgKind::Scalar(ScalarKind::Int { bits: 64, signed: true }))
        ));
        assert!(parse_arg_type("std::string").is_none());
        assert_eq!(
            halide_type(DType::Bfloat16),
            Some(HalideType {
                code: HALIDE_BFLOAT,
                bits: 16,
                lanes: 1
            })
        );
        assert_eq!(
            halide_type(DType::Bool).map(|t| (t.code, t.bits)),
            Some((HALIDE_UINT, 1))
        );
    }
}
