//! DLPack, the tensor exchange of PyTorch and NumPy: a caller's CPU tensor
//! read into a wrapir host tensor (one copy, from the memory the producer
//! lends); a caller's CUDA tensor lent in place ([`cuda_input`]: its memory
//! is the model's input for the call, no copy); and a wrapir output, on the
//! host or the device, handed to PyTorch or NumPy without a copy (the
//! consumer owns the storage and frees it through the deleter).
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
/// `kDLCUDA`.
pub const DEVICE_CUDA: i32 = 2;

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

/// The DLPack type of `dtype` ([`DType::dlpack_type`]).
fn dl_dtype(dtype: DType) -> Option<DLDataType> {
    let (code, bits) = dtype.dlpack_type()?;
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

/// A producer's tensor a consumer took from its capsule: the producer's
/// deleter runs when this is dropped (with the GIL held: a NumPy deleter
/// releases a Python reference).
pub struct Lent {
    managed: *mut DLManagedTensor,
}

impl Lent {
    /// The tensor.
    fn tensor(&self) -> &DLTensor {
        // SAFETY: `managed` is the producer's live `DLManagedTensor` until
        // `drop` calls its deleter.
        unsafe { &(*self.managed).dl_tensor }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: `managed` is still live (its deleter has not run).
        if let Some(deleter) = unsafe { (*self.managed).deleter } {
            // SAFETY: the consumer calls the deleter once; `managed` is not used after.
            unsafe { deleter(self.managed) };
        }
    }
}

/// Takes the tensor of the DLPack capsule `capsule` (from an object's
/// `__dlpack__()`), as DLPack's consumer does: the capsule is marked used,
/// and the producer's deleter runs when the [`Lent`] is dropped. `name`
/// names the input in errors.
pub fn take_capsule(name: &str, capsule: &Bound<'_, PyCapsule>) -> PyResult<Lent> {
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
    // SAFETY: renaming a live capsule (DLPack: a consumed capsule is
    // renamed `used_dltensor`, so its own destructor leaves it alone).
    unsafe { pyo3::ffi::PyCapsule_SetName(capsule.as_ptr(), USED_CAPSULE.as_ptr()) };
    Ok(Lent { managed })
}

/// Reads the DLPack capsule `capsule` (from an object's `__dlpack__()`) into
/// a host tensor: a dense CPU tensor of a dtype wrapir stores, copied
/// (within `limits`); `name` names the input in errors. The capsule is
/// marked used and its producer's deleter called, as DLPack's consumer must.
pub fn tensor_from_capsule(name: &str, capsule: &Bound<'_, PyCapsule>, limits: &wrapir::Limits) -> PyResult<Tensor> {
    let lent = take_capsule(name, capsule)?;
    // The producer's tensor is ours until `lent` drops: read it, then hand
    // it back whatever the reading gave.
    // SAFETY: `lent` holds the producer's live `DLManagedTensor`.
    unsafe { read_managed(name, lent.tensor(), limits) }
}

/// The dtype and sizes of `t`, checked: a dtype wrapir has, no negative size.
///
/// # Safety
/// `t`'s `shape` must hold `ndim` sizes, as DLPack says.
unsafe fn dtype_and_sizes(t: &DLTensor) -> Result<(DType, Vec<i64>), String> {
    let dtype = from_dl_dtype(t.dtype).ok_or_else(|| {
        format!(
            "DLPack dtype (code {}, {} bits, {} lanes) is none wrapir runs",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        )
    })?;
    let ndim = usize::try_from(t.ndim).map_err(|_| format!("{} dimensions", t.ndim))?;
    let shape: Vec<i64> = if ndim == 0 {
        Vec::new()
    } else {
        // SAFETY: DLPack: `shape` holds `ndim` sizes (the caller's contract).
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }.to_vec()
    };
    if shape.iter().any(|s| *s < 0) {
        return Err(format!("negative sizes {shape:?}"));
    }
    Ok((dtype, shape))
}

/// A caller's CUDA tensor as a model input used in place: the view starts
/// at `ptr` (its element 0) and reaches `bytes` bytes from there.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct CudaView {
    /// The CUDA device ordinal (DLPack's `device_id`).
    pub device: usize,
    /// Device address of the view's element 0 (`data + byte_offset`).
    pub ptr: u64,
    /// Bytes the view reaches from `ptr`: from its sizes and strides.
    pub bytes: usize,
    /// The layout: storage offset 0 (from `ptr`), device `cuda:device`.
    pub spec: wrapir::exec::TensorSpec,
}

/// Reads the CUDA tensor `t` describes (see [`cuda_input`]): its device,
/// address, sizes, strides (in elements; row-major when absent) and dtype,
/// and the bytes its view reaches (checked arithmetic: sizes, strides and
/// offset that overflow, negative strides and a misaligned address are
/// errors).
///
/// # Safety
/// `t`'s `shape` must hold `ndim` sizes and its `strides` be null or hold
/// `ndim` strides, as DLPack says.
unsafe fn cuda_view(t: &DLTensor) -> Result<CudaView, String> {
    if t.device.device_type != DEVICE_CUDA {
        return Err(format!(
            "its memory is on DLPack device type {}, not CUDA ({DEVICE_CUDA})",
            t.device.device_type
        ));
    }
    let device = usize::try_from(t.device.device_id).map_err(|_| format!("CUDA device {}", t.device.device_id))?;
    // SAFETY: the caller's contract.
    let (dtype, size) = unsafe { dtype_and_sizes(t) }?;
    let stride: Vec<i64> = if t.strides.is_null() || size.is_empty() {
        wrapir::exec::contiguous_strides(&size)
    } else {
        // SAFETY: DLPack: non-null `strides` holds `ndim` strides (the caller's contract).
        unsafe { std::slice::from_raw_parts(t.strides, size.len()) }.to_vec()
    };
    if stride.iter().any(|s| *s < 0) {
        return Err(format!("negative strides {stride:?} (pass `.contiguous()`)"));
    }
    let ptr = (t.data as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| "its address plus byte offset overflows".to_string())?;
    let elem = dtype.size_bytes();
    if ptr % elem != 0 {
        return Err(format!(
            "its address {ptr:#x} is not aligned to its {elem}-byte elements"
        ));
    }
    let spec = wrapir::exec::TensorSpec {
        dtype,
        device: wrapir::ir::Device::cuda(u32::try_from(device).map_err(|_| format!("CUDA device {device}"))?),
        size,
        stride,
        offset: 0,
    };
    let bytes = spec
        .storage_numel()
        .and_then(|n| u64::try_from(n).ok())
        .and_then(|n| n.checked_mul(elem))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("sizes {:?} and strides {:?} overflow", spec.size, spec.stride))?;
    Ok(CudaView {
        device,
        ptr,
        bytes,
        spec,
    })
}

/// Takes the CUDA tensor of the DLPack capsule `capsule`, to be used in
/// place: its view, and the [`Lent`] tensor to keep (its memory stays the
/// producer's) until the call's work is queued. `name` names the input in
/// errors.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub fn cuda_input(name: &str, capsule: &Bound<'_, PyCapsule>) -> PyResult<(Lent, CudaView)> {
    let lent = take_capsule(name, capsule)?;
    // SAFETY: `lent` holds the producer's live `DLManagedTensor`.
    let view =
        unsafe { cuda_view(lent.tensor()) }.map_err(|e| PyValueError::new_err(format!("input `{name}`: {e}")))?;
    Ok((lent, view))
}

/// Copies the tensor `t` describes (see [`tensor_from_capsule`]).
///
/// # Safety
/// `t` must be a live `DLTensor` whose shape, strides and data are valid as
/// DLPack says.
unsafe fn read_managed(name: &str, t: &DLTensor, limits: &wrapir::Limits) -> PyResult<Tensor> {
    let error = |what: String| PyValueError::new_err(format!("input `{name}`: {what}"));
    if t.device.device_type != DEVICE_CPU {
        return Err(error(format!(
            "its memory is on DLPack device type {} (the model reads CPU memory: move it with `.cpu()`)",
            t.device.device_type
        )));
    }
    // SAFETY: the caller's contract.
    let (dtype, shape) = unsafe { dtype_and_sizes(t) }.map_err(error)?;
    let shape = shape.as_slice();
    let ndim = shape.len();
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

/// The memory an exported output owns.
enum Owned {
    Host(#[allow(dead_code)] OwnedStorage),
    /// Freed after the work queued on the call's stream (see `DeviceOutput`).
    #[cfg(feature = "cuda")]
    Device(#[allow(dead_code)] wrapir::runtime::cuda::DeviceOutput),
}

/// A wrapir output handed to a DLPack consumer: owns the storage, the
/// sizes and strides the `DLTensor` points into. Its deleter may run on any
/// thread, with or without the GIL: dropping either kind of storage needs
/// neither.
#[repr(C)]
struct Export {
    managed: DLManagedTensor,
    _storage: Owned,
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
    let elem = spec.dtype.size_bytes() as usize;
    let offset = usize::try_from(spec.offset).map_err(|_| PyValueError::new_err("negative storage offset"))?;
    if offset > storage.len() {
        return Err(PyValueError::new_err("an output's offset lies past its storage"));
    }
    // SAFETY: `offset <= len`: within the storage or one past its end.
    let data = unsafe { storage.as_ptr().add(offset * elem) } as *mut c_void;
    let device = DLDevice {
        device_type: DEVICE_CPU,
        device_id: 0,
    };
    export(py, data, device, spec, Owned::Host(storage))
}

/// A DLPack capsule of the device output `output` of the model on CUDA
/// device `ordinal`, without a copy: the consumer's deleter drops it (its
/// memory freed after the work queued on the call's stream).
#[cfg(feature = "cuda")]
pub fn device_capsule_of(
    py: Python<'_>,
    output: wrapir::runtime::cuda::DeviceOutput,
    ordinal: usize,
) -> PyResult<Bound<'_, PyAny>> {
    let spec = output.spec().clone();
    if spec.offset != 0 {
        return Err(PyValueError::new_err("a device output has a storage offset"));
    }
    let device = DLDevice {
        device_type: DEVICE_CUDA,
        device_id: i32::try_from(ordinal).map_err(|_| PyValueError::new_err(format!("CUDA device {ordinal}")))?,
    };
    let data = output.address() as *mut c_void;
    export(py, data, device, spec, Owned::Device(output))
}

/// A DLPack capsule of the tensor of layout `spec` (storage offset already
/// in `data`) on `device`, whose memory `owned` holds.
fn export(
    py: Python<'_>,
    data: *mut c_void,
    device: DLDevice,
    spec: wrapir::exec::TensorSpec,
    owned: Owned,
) -> PyResult<Bound<'_, PyAny>> {
    let dtype = dl_dtype(spec.dtype)
        .ok_or_else(|| PyTypeError::new_err(format!("an output of dtype {} has no DLPack type", spec.dtype)))?;
    let mut export = Box::new(Export {
        managed: DLManagedTensor {
            dl_tensor: DLTensor {
                data,
                device,
                ndim: i32::try_from(spec.size.len()).map_err(|_| PyValueError::new_err("too many dimensions"))?,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export),
        },
        _storage: owned,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fabricated CUDA `DLTensor` (the address is never dereferenced).
    fn tensor(dtype: DType, data: u64, shape: &mut [i64], strides: Option<&mut [i64]>, byte_offset: u64) -> DLTensor {
        DLTensor {
            data: data as *mut c_void,
            device: DLDevice {
                device_type: DEVICE_CUDA,
                device_id: 1,
            },
            ndim: shape.len() as i32,
            dtype: dl_dtype(dtype).expect("a DLPack dtype"),
            shape: shape.as_mut_ptr(),
            strides: strides.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset,
        }
    }

    fn view(t: &DLTensor) -> Result<CudaView, String> {
        // SAFETY: `t`'s shape and strides point at `ndim` values (made by `tensor`).
        unsafe { cuda_view(t) }
    }

    #[test]
    fn a_dense_view_reaches_its_elements_from_data_plus_offset() {
        let mut shape = [2, 3];
        let v = view(&tensor(DType::Float32, 0x1000, &mut shape, None, 16)).expect("reads");
        assert_eq!(v.device, 1);
        assert_eq!(v.ptr, 0x1010);
        assert_eq!(v.bytes, 24);
        assert_eq!(v.spec.size, vec![2, 3]);
        assert_eq!(v.spec.stride, vec![3, 1]);
        assert_eq!(v.spec.offset, 0);
        assert_eq!(v.spec.dtype, DType::Float32);
        assert_eq!(v.spec.device, wrapir::ir::Device::cuda(1));
    }

    #[test]
    fn strided_and_expanded_views_reach_their_extent_only() {
        // A transposed 2x3 half tensor: the last element is at 1*1 + 2*2.
        let (mut shape, mut strides) = ([2, 3], [1, 2]);
        let v = view(&tensor(DType::Float16, 0x2000, &mut shape, Some(&mut strides), 0)).expect("reads");
        assert_eq!((v.bytes, v.spec.stride.clone()), (12, vec![1, 2]));
        // A row expanded to 4 rows (stride 0) reaches one row.
        let (mut shape, mut strides) = ([4, 3], [0, 1]);
        let v = view(&tensor(DType::Int64, 0x2000, &mut shape, Some(&mut strides), 0)).expect("reads");
        assert_eq!(v.bytes, 24);
        // A scalar: one element; an empty tensor: none.
        let v = view(&tensor(DType::Float64, 0x2000, &mut [], None, 0)).expect("reads");
        assert_eq!(v.bytes, 8);
        let mut shape = [0, 5];
        let v = view(&tensor(DType::Float32, 0x2000, &mut shape, None, 0)).expect("reads");
        assert_eq!(v.bytes, 0);
    }

    #[test]
    fn bad_views_are_errors_that_say_why() {
        let (mut shape, mut strides) = ([i64::MAX / 2, 4], [4, 1]);
        let e = view(&tensor(DType::Float32, 0x1000, &mut shape, Some(&mut strides), 0)).unwrap_err();
        assert!(e.contains("overflow"), "{e}");
        let (mut shape, mut strides) = ([3], [-1]);
        let e = view(&tensor(DType::Float32, 0x1000, &mut shape, Some(&mut strides), 0)).unwrap_err();
        assert!(e.contains("negative strides"), "{e}");
        let mut shape = [-2];
        let e = view(&tensor(DType::Float32, 0x1000, &mut shape, None, 0)).unwrap_err();
        assert!(e.contains("negative sizes"), "{e}");
        let mut shape = [2];
        let e = view(&tensor(DType::Float32, 0x1000, &mut shape, None, 2)).unwrap_err();
        assert!(e.contains("not aligned"), "{e}");
        let e = view(&tensor(DType::Float32, u64::MAX - 3, &mut shape, None, 8)).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
        let mut cpu = tensor(DType::Float32, 0x1000, &mut shape, None, 0);
        cpu.device.device_type = DEVICE_CPU;
        let e = view(&cpu).unwrap_err();
        assert!(e.contains("device type 1"), "{e}");
        let mut vector = tensor(DType::Float32, 0x1000, &mut shape, None, 0);
        vector.dtype.lanes = 4;
        let e = view(&vector).unwrap_err();
        assert!(e.contains("4 lanes"), "{e}");
    }
}
