//! Halide kernels: `halide_buffer_t`s built from the program's metadata, the
//! pipeline's own metadata checked against it, calls through `<kernel>_argv`.

use super::{
    arg_error, c_element_dtype, check_positional, check_tensor, open, symbol, ArgvFn, HostKernelError, ScalarKind,
};
use crate::exec::host::tensor::RawView;
use crate::exec::{ExecError, KernelLaunch, Tensor, Value};
use crate::ir::{DType, HalideArg, HalideMeta};
use crate::sym::{Bindings, Symbol};
use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::sync::Arc;

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

/// The Halide type of a dtype ([`DType::halide_type`]).
fn halide_type(d: DType) -> Option<HalideType> {
    let (code, bits) = d.halide_type()?;
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
pub(super) struct HalideKernel {
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
    pub(super) fn load(kernel: &str, path: &Path, meta: &HalideMeta) -> Result<HalideKernel, HostKernelError> {
        let mismatch = |message: String| HostKernelError::Mismatch {
            kernel: kernel.to_string(),
            path: path.to_path_buf(),
            message,
        };
        // The runtime the image names in DT_NEEDED (found through $ORIGIN)
        // is mapped by the loader too: check it first.
        let runtime = path.with_file_name(super::HALIDE_RUNTIME.rsplit('/').next().unwrap_or_default());
        if runtime.is_file() {
            super::check_image_file(kernel, &runtime)?;
        }
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

    pub(super) fn into_fn(self) -> impl Fn(&KernelLaunch<'_, Tensor>) -> Result<(), ExecError> + Send + Sync {
        move |launch| self.call(launch)
    }

    fn call(&self, launch: &KernelLaunch<'_, Tensor>) -> Result<(), ExecError> {
        let kernel = self.name.as_str();
        check_positional(kernel, "Halide", launch, self.call_args.len(), || {
            self.call_args.join(", ")
        })?;
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
                        // An empty buffer is never read: it keeps the view's start.
                        host: if b.end > 0 {
                            // SAFETY: `offset` elements from the view's start lie
                            // within its storage (`offset < end <= elements_after`).
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
    fn dtypes_have_halide_type_codes() {
        assert_eq!(
            halide_type(DType::Bfloat16),
            Some(HalideType {
                code: 4, // halide_type_bfloat
                bits: 16,
                lanes: 1
            })
        );
        assert_eq!(
            halide_type(DType::Bool).map(|t| (t.code, t.bits)),
            Some((HALIDE_UINT, 1))
        );
        assert_eq!(halide_type(DType::Complex64), None);
    }

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
}
