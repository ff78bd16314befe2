//! The runtime's host context, device [`WRAPIR_RT_HOST_DEVICE`] (-1): the
//! extern ops of host-only standalone wrappers (CPU programs), run by the
//! same [`HostBackend`] dispatch as `wrapir run --device cpu`.
//!
//! The host backend's tensors own their storage, so a call works on copies:
//! each distinct storage among the caller's tensors (by address and dtype)
//! is copied in whole, its views made of the copy (views of one storage
//! stay views of one copy), and after the op every copy is written back
//! (`out=` and in-place ops write the caller's memory). A result that is a
//! view of an argument's copy is returned as a view of the caller's storage
//! ([`WRAPIR_RT_BORROWED`]); other results are runtime tensors holding
//! their own 64-byte aligned memory, which the wrapper reads and writes in
//! place (its C++ and Halide kernels take their addresses). Two results
//! that view one new storage of the op's get a copy each (no host op of
//! the CPU bundles returns such a pair).

use super::args::{self, spec_of};
use super::{Failure, RtTensor, WrapirRtArg, WrapirRtLayout, WrapirRtTensorDesc, WRAPIR_RT_BORROWED, WRAPIR_RT_HOST};
use super::{WRAPIR_RT_ERR_STATE, WRAPIR_RT_HOST_DEVICE};
use crate::exec::host::HostBackend;
use crate::exec::{Backend, ExternCall, Tensor, TensorSpec};
use crate::ir::Device;
use std::sync::{Mutex, OnceLock};

/// 64 bytes of a host tensor's memory (the alignment of
/// `wrapir::empty_strided_host`).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

/// A tensor of the host context: its own memory, or a view of the caller's.
pub(crate) struct HostTensor {
    /// The memory (empty for a view of the caller's), owned here; never
    /// resized, so `base` stays its address.
    _data: Vec<Block>,
    /// `data`'s start, taken mutably: the caller writes through it.
    base: *mut Block,
    /// The caller's storage this view lies in, for a borrowed result.
    borrowed: Option<u64>,
    /// Bytes of the storage.
    bytes: u64,
    spec: TensorSpec,
}

impl HostTensor {
    /// A runtime tensor over a copy of `t`'s whole storage, with `t`'s view.
    pub(super) fn owned(t: &Tensor) -> Result<HostTensor, Failure> {
        let copied = t.with_storage_bytes(|bytes| {
            let mut data = vec![Block([0; 64]); bytes.len().div_ceil(64)];
            // SAFETY: `data` holds at least `bytes.len()` bytes (whole
            // blocks of 64), and a fresh vector does not overlap `bytes`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.as_mut_ptr().cast::<u8>(), bytes.len()) };
            (data, bytes.len() as u64)
        })?;
        let (mut data, bytes) =
            copied.ok_or_else(|| Failure::argument("the host context needs a little-endian host"))?;
        let base = data.as_mut_ptr();
        Ok(HostTensor {
            _data: data,
            base,
            borrowed: None,
            bytes,
            spec: t.spec().clone(),
        })
    }

    /// The descriptor of this tensor (its arrays point into it).
    pub(super) fn desc(&self) -> Result<WrapirRtTensorDesc, Failure> {
        let ndim = i32::try_from(self.spec.size.len()).map_err(|_| Failure::argument("rank does not fit int32"))?;
        let (storage, flags) = match self.borrowed {
            Some(address) => (address, WRAPIR_RT_HOST | WRAPIR_RT_BORROWED),
            None => (self.base as usize as u64, WRAPIR_RT_HOST),
        };
        Ok(WrapirRtTensorDesc {
            storage,
            storage_bytes: self.bytes,
            flags,
            layout: WrapirRtLayout {
                dtype: args::dtype_code(self.spec.dtype),
                ndim,
                sizes: self.spec.size.as_ptr(),
                strides: self.spec.stride.as_ptr(),
                offset: self.spec.offset,
            },
        })
    }
}

/// The host context's backend, made by [`init`] or the first call.
fn backend() -> &'static Mutex<Option<HostBackend>> {
    static BACKEND: OnceLock<Mutex<Option<HostBackend>>> = OnceLock::new();
    BACKEND.get_or_init(|| Mutex::new(None))
}

/// Creates the host context (`wrapir_rt_init(-1, ...)`).
pub(super) fn init() -> Result<(), Failure> {
    // A panic while the lock was held leaves at most an unset slot.
    let mut slot = backend().lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() {
        return Err(Failure::new(
            WRAPIR_RT_ERR_STATE,
            format!("wrapir_rt_init: the runtime of device {WRAPIR_RT_HOST_DEVICE} (the host) exists already (wrapir_rt_init must come before its first call)"),
        ));
    }
    *slot = Some(HostBackend::default());
    Ok(())
}

/// One storage of the caller's, copied in for a call.
struct Copied {
    /// The caller's address and bytes (whole elements).
    address: u64,
    bytes: usize,
    /// The copy: a 1-d tensor of the whole storage.
    tensor: Tensor,
}

/// The caller's host tensor `desc` as a view of the copy of its storage
/// (made on first use and kept in `copies`).
///
/// # Safety
/// `desc` follows `wrapir_rt.h`: its layout arrays hold `ndim` elements,
/// and `storage` points at `storage_bytes` readable bytes.
unsafe fn copy_in(copies: &mut Vec<Copied>, desc: &WrapirRtTensorDesc, what: &str) -> Result<Tensor, Failure> {
    if desc.flags & WRAPIR_RT_HOST == 0 {
        return Err(Failure::argument(format!(
            "{what} is in device memory; the host context (device {WRAPIR_RT_HOST_DEVICE}) runs ops on host memory"
        )));
    }
    // SAFETY: the caller's contract on the layout arrays.
    let spec = unsafe { spec_of(&desc.layout, Device::cpu(), what) }?;
    if spec.dtype.is_complex() {
        return Err(Failure::argument(format!(
            "{what}: {} tensors are not passed to the host context",
            spec.dtype
        )));
    }
    let bytes = usize::try_from(desc.storage_bytes)
        .map_err(|_| Failure::argument(format!("{what}: storage of {} bytes", desc.storage_bytes)))?;
    if desc.storage == 0 && bytes > 0 {
        return Err(Failure::argument(format!("{what}: a null storage of {bytes} bytes")));
    }
    let found = copies
        .iter()
        .find(|c| c.address == desc.storage && c.tensor.dtype() == spec.dtype);
    let storage = match found {
        Some(c) => c.tensor.clone(),
        None => {
            let elem = usize::try_from(spec.dtype.size_bytes().max(1)).unwrap_or(1);
            let n = bytes / elem;
            let whole = n * elem;
            let data: &[u8] = if whole == 0 {
                &[]
            } else {
                // SAFETY: `whole <= storage_bytes` readable bytes at `storage` (the caller's contract).
                unsafe { std::slice::from_raw_parts(desc.storage as usize as *const u8, whole) }
            };
            let count = i64::try_from(n).map_err(|_| Failure::argument(format!("{what}: too large")))?;
            let tensor = crate::exec::cuda::host_from_bytes(spec.dtype, data, count)?;
            copies.push(Copied {
                address: desc.storage,
                bytes: whole,
                tensor: tensor.clone(),
            });
            tensor
        }
    };
    storage
        .view(&spec.size, &spec.stride, spec.offset)
        .map_err(|e| Failure::argument(format!("{what}: {e}")))
}

/// Writes a copy back into the caller's storage.
///
/// # Safety
/// `c.address` points at `c.bytes` writable bytes (the caller's tensor,
/// live for the call).
unsafe fn copy_back(c: &Copied) -> Result<(), Failure> {
    let written = c.tensor.with_storage_bytes(|bytes| {
        let n = bytes.len().min(c.bytes);
        if n > 0 {
            // SAFETY: `n <= c.bytes` writable bytes at `c.address` (the
            // caller's contract); the copy is our own memory, apart from it.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), c.address as usize as *mut u8, n) };
        }
    })?;
    written.ok_or_else(|| Failure::argument("the host context needs a little-endian host"))
}

/// Runs extern op `op` on the host context (`wrapir_rt_call(-1, ...)`) and
/// returns its first `num_results` result elements.
///
/// # Safety
/// As for `wrapir_rt_call`: `args` points at `num_args` arguments following
/// `wrapir_rt.h` whose tensors are host memory (flagged
/// [`WRAPIR_RT_HOST`]) live for the call, `expected` null or a layout.
pub(super) unsafe fn call(
    op: &str,
    args: *const WrapirRtArg,
    num_args: i64,
    expected: *const WrapirRtLayout,
    num_results: usize,
) -> Result<Vec<Option<RtTensor>>, Failure> {
    let mut copies = Vec::new();
    let converted = {
        // SAFETY: the descriptors follow `wrapir_rt.h` (the caller's contract).
        let mut take = |desc: &WrapirRtTensorDesc, what: &str| unsafe { copy_in(&mut copies, desc, what) };
        // SAFETY: the caller's contract, passed on.
        unsafe { args::convert(&mut take, Device::cpu(), op, args, num_args, expected) }?
    };
    // A panic inside an op leaves the backend as a failed call does.
    let mut slot = backend().lock().unwrap_or_else(|e| e.into_inner());
    let backend = slot.get_or_insert_with(HostBackend::default);
    let value = backend
        .call_extern(ExternCall {
            op,
            family: crate::exec::op::ExternOp::of(op),
            args: (&converted.args).into(),
            kwargs: (&converted.kwargs).into(),
            expected: converted.expected.as_ref(),
        })
        .map_err(Failure::from)?;
    for c in &copies {
        // SAFETY: the caller's tensors are live and writable for the call.
        unsafe { copy_back(c) }?;
    }
    if num_results == 0 {
        return Ok(Vec::new());
    }
    let leaves = args::flatten_result(backend, op, value, num_results)?;
    leaves
        .into_iter()
        .map(|leaf| leaf.map(|t| result(&t, &copies).map(RtTensor::Host)).transpose())
        .collect()
}

/// A result: a view of the caller's storage when it is a view of a copy.
fn result(t: &Tensor, copies: &[Copied]) -> Result<HostTensor, Failure> {
    match copies.iter().find(|c| c.tensor.same_storage(t)) {
        Some(c) => Ok(HostTensor {
            _data: Vec::new(),
            base: std::ptr::null_mut(),
            borrowed: Some(c.address),
            bytes: c.bytes as u64,
            spec: t.spec().clone(),
        }),
        None => HostTensor::owned(t),
    }
}
