//! Calls on the caller's device tensors whose outputs outlive the session
//! ([`Model::run_device`]): the outputs copied, device to device, into
//! allocations of the caller's own ([`DeviceOutput`]).

use super::{DeviceInput, Model, Session};
use crate::exec::cuda::CudaTensor;
use crate::exec::model_source::ModelError;
use crate::exec::{ExecError, TensorSpec, Value};
use indexmap::IndexMap;

impl Model {
    /// Runs one call on the caller's device tensors, used in place, on an
    /// idle session (or a new one), as [`Session::run_device`] does, and
    /// returns the outputs as device tensors of the caller's own
    /// ([`DeviceOutput`]): each output's view copied once, device to device,
    /// on the session's stream, so they outlive the session's next call.
    /// `stream` (a `CUstream` of the device's primary context; 0: the legacy
    /// default stream) waits for the outputs before its later work; the
    /// inputs are read after the work queued on it so far. Safe to call from
    /// several threads at once.
    ///
    /// Mutated inputs (the bundle's `mutated_inputs`, a KV cache): the
    /// program writes into the caller's tensors themselves, as the PyTorch
    /// call would.
    ///
    /// # Safety
    /// As for [`Session::run_device`]: each input's memory must be a live
    /// allocation of this device holding `bytes` bytes, not freed or
    /// written by others until `stream` has passed this call. `stream` must
    /// stay a valid stream until every returned [`DeviceOutput`] is dropped
    /// (each is freed after the work queued on it by then).
    pub unsafe fn run_device(
        &self,
        inputs: &IndexMap<String, DeviceInput>,
        stream: u64,
    ) -> Result<Vec<Value<DeviceOutput>>, ModelError> {
        let mut session = self.session()?;
        // SAFETY: the caller's contract, passed on.
        let out = unsafe { session.run_device_owned(inputs, stream) };
        self.give_back(session);
        out
    }
}

impl Session {
    /// [`Session::run_device`], with the outputs copied into device tensors
    /// of the caller's own (see [`Model::run_device`]).
    ///
    /// # Safety
    /// As for [`Model::run_device`].
    pub unsafe fn run_device_owned(
        &mut self,
        inputs: &IndexMap<String, DeviceInput>,
        stream: u64,
    ) -> Result<Vec<Value<DeviceOutput>>, ModelError> {
        let may_rerun = self.shared.mutated_inputs.is_empty();
        // SAFETY: the caller's contract, passed on.
        match unsafe { self.run_device(inputs, stream) }.map(|_| ()) {
            // The recording ran the call but cannot be replayed: this session
            // interprets from now on. Run the call again that way, unless the
            // program writes its inputs (a second run would apply the writes
            // twice: the error is returned, and the next call interprets).
            Err(ModelError::Exec(ExecError::Unpreparable(_))) if may_rerun => {
                // SAFETY: as above.
                unsafe { self.run_device(inputs, stream) }?;
            }
            r => {
                r?;
            }
        }
        let outputs = std::mem::take(&mut self.outputs);
        // The copies are queued on the session's stream after the call's
        // work; its next call's work comes after them on the same stream.
        let copied: Result<Vec<Value<CudaTensor>>, ExecError> = outputs
            .iter()
            .map(|v| v.try_map_tensors(&mut |t| self.backend.copy_view(t)))
            .collect();
        self.outputs = outputs;
        let copied = copied?;
        // The caller's stream waits for the copies (and the allocations).
        self.backend.signal_stream(stream)?;
        Ok(copied
            .iter()
            .map(|v| {
                v.try_map_tensors(&mut |t| {
                    Ok::<_, std::convert::Infallible>(DeviceOutput {
                        tensor: std::mem::ManuallyDrop::new(t.clone()),
                        stream,
                    })
                })
                .unwrap_or_else(|never| match never {})
            })
            .collect())
    }
}

/// A device tensor of the caller's own, returned by [`Model::run_device`]:
/// an allocation holding just the elements its view reaches (storage offset
/// 0). Dropping it, from any thread, frees the memory after the work queued
/// on the call's stream by then (stream-ordered; a failure to order it is
/// kept for the session's next synchronisation).
pub struct DeviceOutput {
    /// Taken only by `drop`.
    tensor: std::mem::ManuallyDrop<CudaTensor>,
    /// The call's `CUstream`, which the free waits for.
    stream: u64,
}

// A `DeviceOutput` goes wherever its owner does (a Python object, another thread).
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<DeviceOutput>();
};

impl DeviceOutput {
    /// The layout: dtype, sizes, strides in elements, storage offset (0)
    /// and device.
    pub fn spec(&self) -> &TensorSpec {
        self.tensor.spec()
    }

    /// Device address of the allocation, element 0 of the view (0 when it
    /// holds no bytes).
    pub fn address(&self) -> u64 {
        self.tensor.storage_address()
    }

    /// Bytes of the allocation.
    pub fn bytes(&self) -> usize {
        self.tensor.storage_bytes()
    }
}

impl std::fmt::Debug for DeviceOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceOutput")
            .field("address", &self.address())
            .field("spec", self.spec())
            .finish()
    }
}

impl Drop for DeviceOutput {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.tensor` is not used after.
        let tensor = unsafe { std::mem::ManuallyDrop::take(&mut self.tensor) };
        // Only when the context cannot be bound or the streams ordered (a
        // failing driver) is the memory freed without waiting for `stream`.
        let _ = tensor.release_after(self.stream);
    }
}
