//! The C ABI's files: a bundle's graph inputs onto the device (placed as
//! `wrapir run` places them), and tensors out as safetensors.

use super::args::{borrow, count, spec_of};
use super::WRAPIR_RT_HOST;
use super::{
    boundary, c_str, release, with_runtime, Failure, RtTensor, WrapirRtTensor, WrapirRtTensorDesc, WRAPIR_RT_ERR_FILE,
    WRAPIR_RT_HOST_DEVICE,
};
use crate::bundle::Bundle;
use crate::exec::{Backend, Tensor, Value};
use indexmap::IndexMap;
use std::ffi::{c_char, c_void, CString};
use std::path::Path;

/// Graph inputs loaded by [`wrapir_rt_load_inputs`].
pub struct WrapirRtInputs {
    /// Tensor graph inputs in order, then constants; `None` once taken.
    tensors: Vec<(CString, Option<RtTensor>)>,
    /// Symbol inputs' values, in order.
    scalars: Vec<i64>,
}

/// Opens the bundle directory, package or program file at `path`.
pub(super) fn open_bundle(path: &str) -> Result<Bundle, Failure> {
    Bundle::open(Path::new(path)).map_err(|e| Failure::new(WRAPIR_RT_ERR_FILE, e.to_string()))
}

/// Loads the graph inputs of the program at `bundle` from `path` (null: the
/// bundle's inputs); see `wrapir_rt.h`.
///
/// # Safety
/// `bundle` must be a NUL-terminated string, `path` null or one; `stream`
/// null or a stream of `device`'s primary context; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_load_inputs(
    device: i32,
    bundle: *const c_char,
    path: *const c_char,
    stream: *mut c_void,
    out: *mut *mut WrapirRtInputs,
) -> i32 {
    boundary(|| {
        if out.is_null() {
            return Err(Failure::argument("wrapir_rt_load_inputs: `out` is a null pointer"));
        }
        // SAFETY: writable by the caller's contract.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: NUL-terminated by the caller's contract.
        let bundle_path = unsafe { c_str(bundle, "wrapir_rt_load_inputs: `bundle`") }?;
        let opened = open_bundle(bundle_path)?;
        let file_err = |e: crate::bundle::BundleError| Failure::new(WRAPIR_RT_ERR_FILE, e.to_string());
        let (tensors, source) = if path.is_null() {
            let stored = opened.inputs().map_err(file_err)?.ok_or_else(|| {
                Failure::new(
                    WRAPIR_RT_ERR_FILE,
                    format!("{} has no {}", bundle_path, crate::bundle::INPUTS),
                )
            })?;
            (stored, opened.display(crate::bundle::INPUTS))
        } else {
            // SAFETY: a non-null `path` is NUL-terminated (the caller's contract).
            let file = unsafe { c_str(path, "wrapir_rt_load_inputs: `path`") }?;
            let read = crate::bundle::read_safetensors(Path::new(file), opened.limits()).map_err(file_err)?;
            (read.tensors, file.to_string())
        };
        let program = opened.program();
        if device == WRAPIR_RT_HOST_DEVICE {
            let placed = crate::exec::run::place_inputs(program, &tensors, &mut |_, host: &Tensor, spec| {
                if host.spec() == spec {
                    return Ok(host.clone());
                }
                let laid_out = Tensor::zeros_like_spec(spec)?;
                laid_out.copy_from(host)?;
                Ok(laid_out)
            });
            let (args, constants) = placed.map_err(|e| placement_failure(e, &source))?;
            let loaded = inputs_of(program, args, constants, &mut |t| {
                Ok(RtTensor::Host(super::host::HostTensor::owned(&t)?))
            })?;
            // SAFETY: writable by the caller's contract.
            unsafe { *out = Box::into_raw(Box::new(loaded)) };
            return Ok(());
        }
        let loaded = with_runtime(device, |rt| {
            let backend = &mut rt.backend;
            let placed = crate::exec::run::place_inputs(program, &tensors, &mut |_, host: &Tensor, spec| {
                if host.stride() == spec.stride.as_slice() && host.spec().offset == spec.offset {
                    return backend.copy_in(host);
                }
                let laid_out = Tensor::zeros_like_spec(spec)?;
                laid_out.copy_from(host)?;
                backend.copy_in(&laid_out)
            });
            let (args, constants) = placed.map_err(|e| placement_failure(e, &source))?;
            // Uploads are synchronous; the caller's stream needs no ordering after them.
            let _ = stream;
            inputs_of(program, args, constants, &mut |t| Ok(RtTensor::Device(t)))
        })?;
        // SAFETY: writable by the caller's contract.
        unsafe { *out = Box::into_raw(Box::new(loaded)) };
        Ok(())
    })
}

/// A placement's failure, naming the inputs' file.
fn placement_failure(e: crate::exec::RunError, source: &str) -> Failure {
    let mut f = match e {
        crate::exec::RunError::Exec(e) => Failure::from(e),
        other => Failure::argument(other.to_string()),
    };
    f.message = format!("{source}: {}", f.message);
    f
}

/// The placed graph inputs (`args`, in the main graph's input order) and
/// constants as [`WrapirRtInputs`], each tensor made a runtime tensor by `wrap`.
fn inputs_of<T>(
    program: &crate::ir::Program,
    args: Vec<Value<T>>,
    constants: IndexMap<String, T>,
    wrap: &mut dyn FnMut(T) -> Result<RtTensor, Failure>,
) -> Result<WrapirRtInputs, Failure> {
    let mut inputs = WrapirRtInputs {
        tensors: Vec::new(),
        scalars: Vec::new(),
    };
    let names = program.main.inputs.iter().map(|i| i.name().to_string());
    for (name, value) in names.zip(args) {
        match value {
            Value::Tensor(t) => inputs.tensors.push((name_of(&name)?, Some(wrap(t)?))),
            Value::Int(v) => inputs.scalars.push(v),
            other => {
                return Err(Failure::argument(format!(
                    "graph input `{name}` was placed as a {}",
                    other.kind()
                )))
            }
        }
    }
    for (name, t) in constants {
        inputs.tensors.push((name_of(&name)?, Some(wrap(t)?)));
    }
    Ok(inputs)
}

fn name_of(name: &str) -> Result<CString, Failure> {
    CString::new(name).map_err(|_| Failure::argument(format!("input name `{name}` holds a NUL byte")))
}

/// Tensors in `inputs`.
///
/// # Safety
/// `inputs` must be null or live inputs from [`wrapir_rt_load_inputs`].
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_inputs_num_tensors(inputs: *const WrapirRtInputs) -> i64 {
    // SAFETY: null or live by the caller's contract.
    unsafe { inputs.as_ref() }.map_or(0, |i| i.tensors.len() as i64)
}

/// The name of tensor `index` (null when out of range).
///
/// # Safety
/// `inputs` must be null or live inputs from [`wrapir_rt_load_inputs`].
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_inputs_name(inputs: *const WrapirRtInputs, index: i64) -> *const c_char {
    // SAFETY: null or live by the caller's contract.
    let Some(inputs) = (unsafe { inputs.as_ref() }) else {
        return std::ptr::null();
    };
    usize::try_from(index)
        .ok()
        .and_then(|i| inputs.tensors.get(i))
        .map_or(std::ptr::null(), |(name, _)| name.as_ptr())
}

/// Moves tensor `index` out of `inputs` into `*out`.
///
/// # Safety
/// `inputs` must be null or live inputs from [`wrapir_rt_load_inputs`], not
/// used by another thread during the call; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_inputs_take(
    inputs: *mut WrapirRtInputs,
    index: i64,
    out: *mut *mut WrapirRtTensor,
) -> i32 {
    boundary(|| {
        if out.is_null() {
            return Err(Failure::argument("wrapir_rt_inputs_take: `out` is a null pointer"));
        }
        // SAFETY: null or live, used by this thread only (the caller's contract).
        let inputs = unsafe { inputs.as_mut() }
            .ok_or_else(|| Failure::argument("wrapir_rt_inputs_take: `inputs` is a null pointer"))?;
        let n = inputs.tensors.len();
        let slot = usize::try_from(index)
            .ok()
            .and_then(|i| inputs.tensors.get_mut(i))
            .ok_or_else(|| Failure::argument(format!("wrapir_rt_inputs_take: index {index} is outside 0..{n}")))?;
        let tensor = slot.1.take().ok_or_else(|| {
            Failure::argument(format!(
                "wrapir_rt_inputs_take: input {index} (`{}`) was taken already",
                slot.0.to_string_lossy()
            ))
        })?;
        // SAFETY: writable by the caller's contract.
        unsafe { *out = Box::into_raw(Box::new(WrapirRtTensor { tensor })) };
        Ok(())
    })
}

/// Symbol inputs in `inputs`.
///
/// # Safety
/// `inputs` must be null or live inputs from [`wrapir_rt_load_inputs`].
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_inputs_num_scalars(inputs: *const WrapirRtInputs) -> i64 {
    // SAFETY: null or live by the caller's contract.
    unsafe { inputs.as_ref() }.map_or(0, |i| i.scalars.len() as i64)
}

/// The symbol inputs' values (null when there are none).
///
/// # Safety
/// `inputs` must be null or live inputs from [`wrapir_rt_load_inputs`].
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_inputs_scalars(inputs: *const WrapirRtInputs) -> *const i64 {
    // SAFETY: null or live by the caller's contract.
    match unsafe { inputs.as_ref() } {
        Some(i) if !i.scalars.is_empty() => i.scalars.as_ptr(),
        _ => std::ptr::null(),
    }
}

/// Releases `inputs` and the tensors not taken, after `stream`'s work.
///
/// # Safety
/// `inputs` must be null or inputs from [`wrapir_rt_load_inputs`] not
/// released before; `stream` null or a stream of their device's context.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_inputs_free(inputs: *mut WrapirRtInputs, stream: *mut c_void) {
    if inputs.is_null() {
        return;
    }
    // SAFETY: from `Box::into_raw`, released once (the caller's contract).
    let owned = unsafe { Box::from_raw(inputs) };
    let _ = boundary(|| {
        for t in owned.tensors.into_iter().filter_map(|(_, t)| t) {
            release(t, stream)?;
        }
        Ok(())
    });
}

/// Writes tensors as a safetensors file; see `wrapir_rt.h`.
///
/// # Safety
/// `path` must be a NUL-terminated string; `names` and `tensors` must point
/// at `num` entries (names NUL-terminated, tensors null or descriptors of
/// live memory: device memory of `device`, or host memory flagged
/// `WRAPIR_RT_HOST`, holding `storage_bytes` bytes); `stream` null or a
/// stream of `device`'s primary context.
#[no_mangle]
pub unsafe extern "C" fn wrapir_rt_save_safetensors(
    device: i32,
    path: *const c_char,
    names: *const *const c_char,
    tensors: *const *const WrapirRtTensorDesc,
    num: i64,
    stream: *mut c_void,
) -> i32 {
    boundary(|| {
        // SAFETY: NUL-terminated by the caller's contract.
        let path = unsafe { c_str(path, "wrapir_rt_save_safetensors: `path`") }?;
        let n = count(
            num,
            names.is_null() || tensors.is_null(),
            "wrapir_rt_save_safetensors: `num`",
        )?;
        let mut host: IndexMap<String, Tensor> = IndexMap::new();
        let mut on_device: Vec<(String, WrapirRtTensorDesc)> = Vec::new();
        for i in 0..n {
            // SAFETY: `n` entries each (the caller's contract; non-null checked by `count`).
            let (name, desc) = unsafe { (*names.add(i), *tensors.add(i)) };
            // SAFETY: NUL-terminated by the caller's contract.
            let name = unsafe { c_str(name, &format!("wrapir_rt_save_safetensors: name {i}")) }?.to_string();
            // SAFETY: null or a descriptor (the caller's contract).
            let Some(desc) = (unsafe { desc.as_ref() }) else {
                continue;
            };
            if host.contains_key(&name) || on_device.iter().any(|(n, _)| *n == name) {
                return Err(Failure::argument(format!(
                    "wrapir_rt_save_safetensors: `{name}` is given twice"
                )));
            }
            if desc.flags & WRAPIR_RT_HOST != 0 {
                // SAFETY: host memory of `storage_bytes` bytes (the caller's contract).
                let t = unsafe { host_tensor(desc, &name) }?;
                host.insert(name, t);
            } else {
                on_device.push((name, *desc));
            }
        }
        if !on_device.is_empty() {
            let copied = with_runtime(device, |rt| {
                rt.backend.wait_for_stream(stream as u64)?;
                let mut out = Vec::new();
                for (name, desc) in &on_device {
                    let what = format!("tensor `{name}`");
                    // SAFETY: the caller's contract on device descriptors.
                    let t = unsafe { borrow(&rt.backend, desc, &what) }?;
                    out.push((name.clone(), rt.backend.copy_out(&t)?));
                }
                Ok(out)
            })?;
            host.extend(copied);
        }
        // The caller's order.
        let mut ordered = IndexMap::new();
        for i in 0..n {
            // SAFETY: as above.
            let name = unsafe { c_str(*names.add(i), "name") }?;
            if let Some((k, t)) = host.swap_remove_entry(name) {
                ordered.insert(k, t);
            }
        }
        let bytes = crate::exec::safetensors::write(&ordered)
            .map_err(|e| Failure::new(WRAPIR_RT_ERR_FILE, format!("writing {path}: {e}")))?;
        std::fs::write(path, bytes).map_err(|e| Failure::new(WRAPIR_RT_ERR_FILE, format!("writing {path}: {e}")))
    })
}

/// A host tensor over a copy of the caller's host memory.
///
/// # Safety
/// `desc.storage` must point at `desc.storage_bytes` readable bytes.
unsafe fn host_tensor(desc: &WrapirRtTensorDesc, name: &str) -> Result<Tensor, Failure> {
    let what = format!("tensor `{name}`");
    // SAFETY: the layout arrays hold `ndim` elements (the caller's contract).
    let spec = unsafe { spec_of(&desc.layout, crate::ir::Device::cpu(), &what) }?;
    let bytes = usize::try_from(desc.storage_bytes)
        .map_err(|_| Failure::argument(format!("{what}: storage of {} bytes", desc.storage_bytes)))?;
    let need = crate::exec::host::tensor::storage_elements(&spec)
        .ok()
        .and_then(|n| n.checked_mul(spec.dtype.size_bytes() as usize))
        .ok_or_else(|| Failure::argument(format!("{what}: its layout's extent overflows")))?;
    if need > bytes {
        return Err(Failure::argument(format!(
            "{what}: the view needs {need} bytes, the storage holds {bytes}"
        )));
    }
    if need > 0 && desc.storage == 0 {
        return Err(Failure::argument(format!("{what}: a null storage")));
    }
    let data: &[u8] = if need == 0 {
        &[]
    } else {
        // SAFETY: `need <= storage_bytes` readable bytes at `storage` (the caller's contract).
        unsafe { std::slice::from_raw_parts(desc.storage as usize as *const u8, need) }
    };
    let elem = spec.dtype.size_bytes().max(1) as usize;
    let n = i64::try_from(need / elem).map_err(|_| Failure::argument(format!("{what}: too large")))?;
    let storage = crate::exec::cuda::host_from_bytes(spec.dtype, data, n)?;
    Ok(storage.view(&spec.size, &spec.stride, spec.offset)?)
}
