//! Compiled host kernels: Inductor's C++ and Halide kernels as the shared
//! objects a CPU bundle carries (`kernels/<kernel>.so`, made by the
//! exporter's `wrapir_export.host_kernels` for the baseline x86-64 ISA, or
//! for the vector ISA a C++ kernel's metadata names, which [`isa`] checks
//! this CPU has before the image is loaded), loaded once with `libloading`
//! and registered as [`HostBackend`] kernels.
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
//! exceptions to "no I/O": they open the shared objects a caller names. A
//! package's images are loaded from anonymous in-memory files where the
//! system has them (`memfd`, Linux; C++ kernels), else written into the
//! scratch directory the caller names (a shared object loads only from a
//! file; Halide kernels find their runtime through a directory).

mod halide;
pub mod isa;
#[cfg(target_os = "linux")]
mod memfd;
mod scratch;

#[cfg(feature = "cuda")]
pub(crate) use scratch::write_new_file;
pub use scratch::ScratchDir;

use super::tensor::RawView;
use super::{ExecError, KernelLaunch, Tensor, Value};
use super::{HostBackend, KernelFn};
use crate::exec::uses::is_host_image_kernel;
use crate::format::images::KernelImageSource;
use crate::ir::{CppMeta, DType, KernelBackend, Program};
use halide::HalideKernel;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The image of a C++ or Halide kernel in a bundle: `kernels/<kernel>.so`.
pub fn image_path(kernel: &str) -> String {
    crate::ir::host_image_path(kernel)
}

/// Checks that a kernel's name can name its image file: letters, digits and
/// `_` only (no path separators or `..`, so the image stays inside the
/// bundle, or the scratch directory a package's images are written to).
fn check_image_name(kernel: &str) -> Result<(), HostKernelError> {
    if !kernel.is_empty() && kernel.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Ok(());
    }
    Err(HostKernelError::Load {
        kernel: kernel.to_string(),
        path: PathBuf::from(image_path(kernel)),
        message: "a host kernel's name must be letters, digits and `_` to name its image file".into(),
    })
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

impl HostKernelError {
    /// The same error, naming the image as `path` (an image loaded from an
    /// in-memory file is named by its entry, not its `/proc` path).
    fn at(self, path: &Path) -> HostKernelError {
        match self {
            HostKernelError::Load { kernel, message, .. } => HostKernelError::Load {
                kernel,
                path: path.to_path_buf(),
                message,
            },
            HostKernelError::Mismatch { kernel, message, .. } => HostKernelError::Mismatch {
                kernel,
                path: path.to_path_buf(),
                message,
            },
        }
    }
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

/// [`load_program_kernels`] from where the caller keeps the kernel images
/// (a bundle's `kernel_images()`): images that are files under a directory
/// ([`KernelImageSource::directory`]: a bundle directory or a program file's
/// directory) load from there. Images held elsewhere (a package's, in
/// memory) load, on Linux and for C++ kernels, from anonymous in-memory
/// files (`memfd_create`: nothing is written to any file system). Where
/// that is not possible (another system, no anonymous files, or a Halide
/// kernel, whose objects find their runtime through a directory): with
/// `scratch`, a path that must not exist yet (in a directory only this user
/// can write, such as a [`ScratchDir`]; the caller removes it afterwards),
/// the directory is created private (0700) and exclusively, the program's
/// host images and the Halide runtime are written into `scratch/kernels/` as
/// new files (never through a symlink: see [`ScratchDir`] for the threat
/// model) and loaded from there; without it, such a program is an error.
pub fn load_kernels_from(
    backend: &mut HostBackend,
    program: &Program,
    images: &dyn KernelImageSource,
    scratch: Option<&Path>,
) -> Result<usize, HostKernelError> {
    let names = host_kernel_names(program);
    #[cfg(target_os = "linux")]
    if images.directory().is_none() && !names.is_empty() && !has_cpu_halide(program) {
        if let Some(n) = memfd::load_kernels_in_memory(backend, program, images)? {
            return Ok(n);
        }
    }
    match (images.directory(), scratch) {
        (Some(dir), _) => load_program_kernels(backend, program, dir),
        (None, _) if names.is_empty() => Ok(0),
        (None, None) => Err(HostKernelError::Load {
            kernel: names[0].to_string(),
            path: PathBuf::from(image_path(names[0])),
            message: "a package's host kernels are loaded from files: give a scratch directory to write them to".into(),
        }),
        (None, Some(dir)) => {
            let halide = has_cpu_halide(program);
            let mut files: Vec<(String, String)> = names.iter().map(|k| (k.to_string(), image_path(k))).collect();
            if halide {
                files.push(("the Halide runtime".into(), HALIDE_RUNTIME.to_string()));
            }
            for name in &names {
                check_image_name(name)?;
            }
            let dir_error = |path: &Path, e: std::io::Error| HostKernelError::Load {
                kernel: names[0].to_string(),
                path: path.to_path_buf(),
                message: format!("cannot create the private scratch directory: {e}"),
            };
            scratch::create_private_dir(dir).map_err(|e| dir_error(dir, e))?;
            let kernels_dir = dir.join("kernels");
            scratch::create_private_dir(&kernels_dir).map_err(|e| dir_error(&kernels_dir, e))?;
            for (kernel, file) in files {
                let load_error = |path: PathBuf, message: String| HostKernelError::Load {
                    kernel: kernel.clone(),
                    path,
                    message,
                };
                let bytes = images
                    .image(&file)
                    .map_err(|e| load_error(PathBuf::from(&file), e.to_string()))?;
                let path = dir.join(&file);
                scratch::write_new_file(&path, (*bytes).as_ref())
                    .map_err(|e| load_error(path.clone(), e.to_string()))?;
            }
            load_program_kernels(backend, program, dir)
        }
    }
}

/// Whether `program` has a CPU Halide kernel (whose image needs the Halide
/// runtime beside it in a directory).
/// Whether `program`'s host kernels, when their images are held in memory
/// (a package's), can only load from files written to a scratch
/// directory: where the program has CPU Halide kernels (which find their
/// runtime through `$ORIGIN`), or the system has no anonymous in-memory
/// files (not Linux). Programs without host kernels need none.
pub fn needs_scratch(program: &Program) -> bool {
    !host_kernel_names(program).is_empty() && (has_cpu_halide(program) || !cfg!(target_os = "linux"))
}

fn has_cpu_halide(program: &Program) -> bool {
    program
        .kernels
        .values()
        .any(|k| matches!(&k.backend, KernelBackend::Halide(m) if !m.is_cuda()))
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
        if !is_host_image_kernel(&def.backend) {
            continue;
        }
        check_image_name(def.name.as_str())?;
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

/// Checks the shared object at `path` before the dynamic loader maps it
/// (a truncated image would fault the process there): whole, and built for
/// this machine.
fn check_image_file(kernel: &str, path: &Path) -> Result<(), HostKernelError> {
    let load_error = |message: String| HostKernelError::Load {
        kernel: kernel.to_string(),
        path: path.to_path_buf(),
        message,
    };
    // Within the default file size limit (a symlink to `/dev/zero` is refused, not read forever).
    let bytes = crate::limits::files::read(path, crate::Limits::default().max_file_bytes)
        .map_err(|e| load_error(e.to_string()))?;
    crate::format::images::check_host_image(&bytes)
        .map_err(|e| load_error(format!("not a loadable shared object: {e}")))
}

fn open(kernel: &str, path: &Path) -> Result<libloading::Library, HostKernelError> {
    check_image_file(kernel, path)?;
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading runs the object's initialisers. The images are the
    // bundle's own kernels (see the module docs: open only trusted bundles);
    // the exporter builds them without libtorch or an OpenMP runtime, so no
    // initialiser depends on state this process lacks. `RTLD_NOW` binds every
    // symbol here: one no loaded library provides (a libc10 function, say) is
    // this load's error naming it, never a failure in the middle of a call.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map(libloading::Library::from)
        .map_err(|e| HostKernelError::Load {
            kernel: kernel.to_string(),
            path: path.to_path_buf(),
            // The loader's own words (`undefined symbol: ...`) are the source.
            message: match std::error::Error::source(&e) {
                Some(source) => format!("{e}: {source}"),
                None => e.to_string(),
            },
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

/// Checks that a launch of `kernel` (a `what` kernel) passes `want`
/// arguments (`params` names them, for the error), all positional.
fn check_positional(
    kernel: &str,
    what: &str,
    launch: &KernelLaunch<'_, Tensor>,
    want: usize,
    params: impl FnOnce() -> String,
) -> Result<(), ExecError> {
    if !launch.kwargs.is_empty() {
        return Err(ExecError::op(
            kernel,
            format!("{what} kernels take positional arguments only"),
        ));
    }
    if launch.args.len() != want {
        let (params, got) = (params(), launch.args.len());
        return Err(ExecError::op(
            kernel,
            format!("takes {want} arguments ({params}) but got {got}"),
        ));
    }
    Ok(())
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
    /// `wrapir_kernel_error`, where the image has it: the message of the
    /// exception (a failed `TORCH_CHECK`) that made the entry return 1.
    error: Option<unsafe extern "C" fn() -> *const c_char>,
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
        // Before the image is mapped: its initialisers may run the ISA's instructions.
        if let Some(required) = &meta.isa {
            isa::check_isa(*required).map_err(|message| HostKernelError::Load {
                kernel: kernel.to_string(),
                path: path.to_path_buf(),
                message,
            })?;
        }
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
        // Images exported before the exporter added it have no error accessor.
        let error = symbol(&lib, kernel, path, "wrapir_kernel_error").ok();
        Ok(CppKernel {
            name: kernel.to_string(),
            args,
            entry,
            error,
            _lib: Arc::new(lib),
        })
    }

    fn into_fn(self) -> impl Fn(&KernelLaunch<'_, Tensor>) -> Result<(), ExecError> + Send + Sync {
        move |launch| self.call(launch)
    }

    fn call(&self, launch: &KernelLaunch<'_, Tensor>) -> Result<(), ExecError> {
        let kernel = self.name.as_str();
        check_positional(kernel, "C++", launch, self.args.len(), || "`arg_types`".into())?;
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
            let message = match self.error {
                // SAFETY: `wrapir_kernel_error` returns a pointer to the
                // image's NUL-terminated thread-local message buffer, which
                // the failed call on this thread just wrote; it is read
                // before anything else runs the kernel on this thread.
                Some(error) => unsafe { CStr::from_ptr(error()) }.to_string_lossy().into_owned(),
                None => String::new(),
            };
            return Err(ExecError::op(
                kernel,
                if message.is_empty() {
                    format!("the compiled kernel returned {rc}")
                } else {
                    format!("the compiled kernel failed: {message}")
                },
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_stay_inside_the_bundle() {
        assert!(check_image_name("cpp_fused_add_0").is_ok());
        for bad in ["", "../x", "a/b", "k.so", "k\0"] {
            let e = check_image_name(bad).unwrap_err().to_string();
            assert!(e.contains("letters, digits"), "{bad}: {e}");
        }
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
    }
}
