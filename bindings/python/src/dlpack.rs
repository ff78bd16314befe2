//! DLPack, the tensor exchange of PyTorch and NumPy: a caller's CPU tensor
//! read into a wrapir host tensor (one copy, from the memory the producer
//! lends), and a wrapir output handed to PyTorch or NumPy without a copy
//! (the consumer owns the storage and frees it through the deleter).
//!
//! The structs are DLPack's C ABI (`dlpack.h`, version 0.8: the unversioned
//! `DLManagedTensor` in a capsule named `dltensor`, which every consumer
//! accepts).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::ffi::{c_void, CStr};
use wrapir::exec::{OwnedStorage, Tensor};
use wrapir::ir::DType;

/// `kDLCPU`.
pub const DEVICE_CPU: i32 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

const CAPSULE: &CStr = c"dltensor";
const USED_CAPSULE: &CStr = c"used_dltensor";

/// DLPack's type codes (`kDLInt`, `kDLUInt`, `kDLFloat`, `kDLBfloat`, `kDLComplex`, `kDLBool`).
const INT: u8 = 0;
const UINT: u8 = 1;
const FLOAT: u8 = 2;
const BFLOAT: u8 = 4;
const COMPLEX: u8 = 5;
const BOOL: u8 = 6;

/// The DLPack type of `dtype`, when DLPack has one and wrapir stores it.
fn dl_dtype(dtype: DType) -> Option<DLDataType> {
    let (code, bits) = match dtype {
        DType::Bool => (BOOL, 8),
        DType::Int8 => (INT, 8),
        DType::Int16 => (INT, 16),
        DType::Int32 => (INT, 32),
        DType::Int64 => (INT, 64),
        DType::Uint8 => (UINT, 8),
        DType::Float16 => (FLOAT, 16),
        DType::Bfloat16 => (BFLOAT, 16),
        DType::Float32 => (FLOAT, 32),
        DType::Float64 => (FLOAT, 64),
        DType::Complex64 => (COMPLEX, 64),
        DType::Complex128 => (COMPLEX, 128),
        _ => return None,
    };
    Some(DLDataType { code, bits, lanes: 1 })
}

/// The dtype of a DLPack type, when wrapir has one.
fn from_dl_dtype(t: DLDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    DType::ALL
        .into_iter()
        .find(|d| dl_dtype(*d).is_some_and(|x| x.code == t.code && x.bits == t.bits))
}

/// Reads the DLPack capsule `capsule` (from an object's `__dlpack__()`) into
/// a host tensor: a dense CPU tensor of a dtype wrapir stores, copied
/// (within `limits`); `name` names the input in errors. The capsule is
/// marked used and its producer's deleter called, as DLPack's consumer must.
pub fn tensor_from_capsule(name: &str, capsule: &Bound<'_, PyCapsule>, limits: &wrapir::Limits) -> PyResult<Tensor> {
    // SAFETY: a capsule named `dltensor` holds a `DLManagedTensor *` (the
    // DLPack protocol); `PyCapsule_GetPointer` checks the name and returns
    // null, with a Python error set, otherwise. The GIL is held (`capsule`
    // is a bound reference).
    let managed =
        unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr()) }.cast::<DLManagedTensor>();
    if managed.is_null() {
        return Err(PyErr::take(capsule.py()).unwrap_or_else(|| {
            PyTypeError::new_err(format!("input `{name}`: not a DLPack capsule of an unused tensor"))
        }));
    }
    // The producer's tensor is ours until its deleter runs: read it, then
    // hand it back whatever the reading gave.
    // SAFETY: `managed` is the producer's live `DLManagedTensor`.
    let read = unsafe { read_managed(name, &*managed, limits) };
    // SAFETY: renaming a live capsule (DLPack: a consumed capsule is
    // renamed `used_dltensor`, so its own destructor leaves it alone).
    unsafe { pyo3::ffi::PyCapsule_SetName(capsule.as_ptr(), USED_CAPSULE.as_ptr()) };
    // SAFETY: `managed` is still live (its deleter has not run).
    if let Some(deleter) = unsafe { (*managed).deleter } {
        // SAFETY: the consumer calls the deleter once, with the GIL held (a
        // NumPy deleter releases a Python reference); `managed` is not used after.
        unsafe { deleter(managed) };
    }
    read
}

/// Copies the tensor `m` describes (see [`tensor_from_capsule`]).
///
/// # Safety
/// `m` must be a live `DLManagedTensor` whose shape, strides and data are
/// valid as DLPack says.
unsafe fn read_managed(name: &str, m: &DLManagedTensor, limits: &wrapir::Limits) -> PyResult<Tensor> {
    let t = &m.dl_tensor;
    let error = |what: String| PyValueError::new_err(format!("input `{name}`: {what}"));
    if t.device.device_type != DEVICE_CPU {
        return Err(error(format!(
            "its memory is on DLPack device type {} (the model reads CPU memory: move it with `.cpu()`)",
            t.device.device_type
        )));
    }
    let dtype = from_dl_dtype(t.dtype).ok_or_else(|| {
        error(format!(
            "DLPack dtype (code {}, {} bits, {} lanes) is none wrapir runs",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    let ndim = usize::try_from(t.ndim).map_err(|_| error(format!("{} dimensions", t.ndim)))?;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: DLPack: `shape` holds `ndim` sizes.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    if shape.iter().any(|s| *s < 0) {
        return Err(error(format!("negative sizes {shape:?}")));
    }
    let contiguous = wrapir::exec::contiguous_strides(shape);
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: DLPack: non-null `strides` holds `ndim` strides.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let dense = shape
            .iter()
            .zip(strides.iter().zip(&contiguous))
            .all(|(n, (s, c))| *n <= 1 || s == c);
        if !dense {
            return Err(error(format!(
                "strides {strides:?} are not row-major for sizes {shape:?} (pass `.contiguous()`)"
            )));
        }
    }
    let numel = shape
        .iter()
        .try_fold(1u64, |acc, s| acc.checked_mul(*s as u64))
        .ok_or_else(|| error(format!("sizes {shape:?} overflow")))?;
    let bytes = numel
        .checked_mul(dtype.size_bytes())
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| error(format!("sizes {shape:?} overflow")))?;
    let data: &[u8] = if bytes == 0 {
        &[]
    } else {
        let offset = usize::try_from(t.byte_offset).map_err(|_| error("byte offset overflows".into()))?;
        // SAFETY: DLPack: `data + byte_offset` is element 0 of a dense
        // tensor of `numel` elements of `dtype`, live while `m` is.
        unsafe { std::slice::from_raw_parts(t.data.cast::<u8>().add(offset), bytes) }
    };
    let raw = wrapir::format::safetensors::RawTensor {
        dtype,
        size: shape.to_vec(),
        data,
    };
    wrapir::exec::safetensors::decode_raw(name, &raw, limits).map_err(|e| error(e.to_string()))
}

/// A wrapir output handed to a DLPack consumer: owns the storage, the
/// sizes and strides the `DLTensor` points into.
#[repr(C)]
struct Export {
    managed: DLManagedTensor,
    _storage: OwnedStorage,
    _shape: Vec<i64>,
    _strides: Vec<i64>,
}

unsafe extern "C" fn delete_export(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the first field of a boxed `Export` (repr(C)),
    // made by `capsule_of` and freed once: by the consumer through this
    // deleter, or by the capsule's destructor when never consumed.
    drop(unsafe { Box::from_raw(managed.cast::<Export>()) });
}

unsafe extern "C" fn destroy_capsule(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with the GIL held on our capsule. A capsule
    // still named `dltensor` was never consumed: its tensor is freed here;
    // a consumed one (renamed) belongs to its consumer.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE.as_ptr()).cast::<DLManagedTensor>();
            delete_export(managed);
        }
    }
}

/// A DLPack capsule of `tensor`, without a copy when no other handle shares
/// its storage (else of a copy of it).
pub fn capsule_of(py: Python<'_>, tensor: Tensor) -> PyResult<Bound<'_, PyAny>> {
    let storage = match tensor.into_owned_storage() {
        Ok(s) => s,
        Err(shared) => {
            let copy = shared
                .contiguous_copy()
                .map_err(|e| PyValueError::new_err(format!("copying an output: {e}")))?;
            copy.into_owned_storage()
                .map_err(|_| PyValueError::new_err("a fresh copy of an output is shared"))?
        }
    };
    let spec = storage.spec().clone();
    let dtype = dl_dtype(spec.dtype)
        .ok_or_else(|| PyTypeError::new_err(format!("an output of dtype {} has no DLPack type", spec.dtype)))?;
    let elem = spec.dtype.size_bytes() as usize;
    let offset = usize::try_from(spec.offset).map_err(|_| PyValueError::new_err("negative storage offset"))?;
    if offset > storage.len() {
        return Err(PyValueError::new_err("an output's offset lies past its storage"));
    }
    // SAFETY: `offset <= len`: within the storage or one past its end.
    let data = unsafe { storage.as_ptr().add(offset * elem) } as *mut c_void;
    let mut export = Box::new(Export {
        managed: DLManagedTensor {
            dl_tensor: DLTensor {
                data,
                device: DLDevice {
                    device_type: DEVICE_CPU,
                    device_id: 0,
                },
                ndim: i32::try_from(spec.size.len()).map_err(|_| PyValueError::new_err("too many dimensions"))?,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export),
        },
        _storage: storage,
        _shape: spec.size,
        _strides: spec.stride,
    });
    export.managed.dl_tensor.shape = export._shape.as_mut_ptr();
    export.managed.dl_tensor.strides = export._strides.as_mut_ptr();
    let raw = Box::into_raw(export);
    // SAFETY: `raw` points to a live `Export`, whose first field (repr(C))
    // is the `DLManagedTensor`; the capsule owns it until consumed (see
    // `destroy_capsule`).
    let capsule = unsafe { pyo3::ffi::PyCapsule_New(raw.cast::<c_void>(), CAPSULE.as_ptr(), Some(destroy_capsule)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so `raw` is still ours alone.
        drop(unsafe { Box::from_raw(raw) });
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `PyCapsule_New` returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}
