//! Device memory: one allocation ([`Storage`], freed stream-ordered when
//! its last view goes) and the strided views of it ([`CudaTensor`]).

use super::driver::Device;
use super::CudaError;
use crate::exec::host::tensor::Accounted;
use crate::exec::TensorSpec;
use cudarc::driver::sys;
use std::sync::Arc;

/// One device allocation; freed (stream-ordered) when dropped.
#[derive(Debug)]
pub(super) struct Storage {
    /// Device address; 0 for an empty allocation.
    pub(super) ptr: sys::CUdeviceptr,
    /// Bytes allocated.
    pub(super) bytes: usize,
    /// The device that owns it (and frees it, on its stream).
    pub(super) device: Arc<Device>,
    pub(super) _accounted: Accounted,
    /// The caller's memory (a device tensor passed in): never freed here.
    pub(super) borrowed: bool,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if self.ptr != 0 && !self.borrowed {
            self.device.defer(self.device.free(self.ptr));
        }
    }
}

/// A strided tensor in device memory. Clones share the allocation.
#[derive(Clone, Debug)]
pub struct CudaTensor {
    pub(super) storage: Arc<Storage>,
    pub(super) spec: TensorSpec,
}

impl CudaTensor {
    /// The layout.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// Drops the tensor once the work queued so far on the caller's `stream`
    /// (a `CUstream` of its device's context; 0: the legacy default stream)
    /// is done: the free is queued on the backend's stream, ordered after
    /// the caller's.
    pub(crate) fn release_after(self, stream: u64) -> Result<(), CudaError> {
        let device = Arc::clone(&self.storage.device);
        device.bind()?;
        device.order_streams(device.cu_stream(), stream as sys::CUstream)?;
        drop(self);
        Ok(())
    }

    /// Device address of the allocation (its element 0, before the view's offset).
    pub(crate) fn storage_address(&self) -> u64 {
        self.storage.ptr
    }

    /// Bytes of the allocation.
    pub(crate) fn storage_bytes(&self) -> usize {
        self.storage.bytes
    }

    /// Whether the allocation is the caller's memory (borrowed, never freed here).
    pub(crate) fn is_borrowed(&self) -> bool {
        self.storage.borrowed
    }

    /// Elements the allocation holds.
    pub(super) fn storage_numel(&self) -> usize {
        let elem = self.spec.dtype.size_bytes().max(1) as usize;
        self.storage.bytes / elem
    }

    /// Device address of element 0 of the view.
    pub(super) fn data_ptr(&self) -> sys::CUdeviceptr {
        // Views are bounds-checked at creation, so the offset lies inside the
        // allocation and the sum cannot overflow.
        self.storage.ptr + self.spec.offset.max(0) as u64 * self.spec.dtype.size_bytes()
    }
}

impl super::CudaBackend {
    /// A copy of `t`'s view in an allocation of its own that holds just the
    /// elements the view reaches (the same sizes and strides, storage offset
    /// 0), queued on the backend's stream after the work before it: what a
    /// caller keeps of a session's output, whose memory the session's next
    /// call reuses.
    pub(crate) fn copy_view(&mut self, t: &CudaTensor) -> Result<CudaTensor, crate::exec::ExecError> {
        let spec = TensorSpec {
            offset: 0,
            ..t.spec.clone()
        };
        let out = crate::exec::Backend::allocate(self, &spec)?;
        let bytes = out.storage.bytes;
        if bytes > 0 {
            self.device.bind()?;
            // SAFETY: `out` was just allocated on this stream with `bytes`
            // bytes; the source view reaches `bytes` bytes from its element 0
            // (the same sizes and strides; strides are non-negative, as
            // `storage_numel` requires), inside its allocation (views are
            // bounds-checked when made), alive while `t` is, and read on this
            // stream in order with its other uses.
            unsafe { sys::cuMemcpyDtoDAsync_v2(out.storage.ptr, t.data_ptr(), bytes, self.device.cu_stream()) }
                .result()
                .map_err(|e| CudaError::Driver {
                    call: "cuMemcpyDtoDAsync",
                    message: e.to_string(),
                })?;
        }
        Ok(out)
    }
}
