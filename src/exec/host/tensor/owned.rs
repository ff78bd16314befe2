//! A tensor's storage taken out of it, for a caller that hands the memory
//! on without copying (a DLPack export to PyTorch or NumPy).

use super::{data_len, data_ptr, lanes, Data, Storage, Tensor};
use crate::exec::TensorSpec;
use std::sync::Arc;

/// The storage of a tensor that no other handle shared, owned by the caller:
/// its elements stay where they are, unmoved and unshared, until it is
/// dropped. [`OwnedStorage::spec`] is the tensor's view of it.
#[derive(Debug)]
pub struct OwnedStorage {
    data: Data,
    spec: TensorSpec,
}

impl Tensor {
    /// Takes the storage out of this tensor when no other handle (a clone,
    /// another view, a model's weight) shares it; otherwise gives the tensor
    /// back unchanged. What a caller does with [`OwnedStorage::as_ptr`] then
    /// cannot be seen by any other tensor.
    pub fn into_owned_storage(self) -> Result<OwnedStorage, Tensor> {
        let Tensor { storage, spec } = self;
        match Arc::try_unwrap(storage) {
            Ok(Storage { data, _accounted }) => match data.into_inner() {
                // The memory leaves the run's accounting (`_accounted` drops here).
                Ok(data) => Ok(OwnedStorage { data, spec }),
                // A poisoned lock: a panic while it was held; not handed on.
                Err(poisoned) => Err(Tensor::with_storage(
                    poisoned.into_inner(),
                    _accounted.bytes,
                    None,
                    spec,
                )),
            },
            Err(storage) => Err(Tensor { storage, spec }),
        }
    }
}

impl OwnedStorage {
    /// The layout of the tensor's view: dtype, sizes, strides and storage
    /// offset, in elements of the dtype.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// The address of element 0 of the storage (not of the view: add
    /// [`TensorSpec::offset`] elements). Valid while `self` lives; the
    /// elements are little-endian values of the dtype, a complex element
    /// its (real, imaginary) parts.
    pub fn as_ptr(&self) -> *const u8 {
        data_ptr(&self.data) as *const u8
    }

    /// Elements of the dtype the storage holds (a complex element is one).
    pub fn len(&self) -> usize {
        data_len(&self.data) / lanes(self.spec.dtype)
    }

    /// Whether the storage holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unshared_storage_is_taken() {
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let view = t.view(&[2], &[2], 1).unwrap();
        // Shared with `t`: given back whole.
        let view = view.into_owned_storage().expect_err("shared with `t`");
        drop(t);
        let owned = view.into_owned_storage().expect("no other handle now");
        assert_eq!(owned.spec().size, vec![2]);
        assert_eq!(owned.spec().stride, vec![2]);
        assert_eq!(owned.spec().offset, 1);
        assert_eq!(owned.len(), 4);
        // SAFETY: `owned` holds four f32s at `as_ptr`, aligned as a Vec<f32>'s.
        let values = unsafe { std::slice::from_raw_parts(owned.as_ptr().cast::<f32>(), owned.len()) };
        assert_eq!(values, &[1.0, 2.0, 3.0, 4.0]);
    }
}
