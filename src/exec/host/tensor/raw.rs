//! Raw views of host tensors for compiled kernels: element addresses inside
//! storages locked for the duration of a call.

use super::{check_bounds, with_data, Data, Storage, Tensor};
use crate::exec::ExecError;
use std::sync::Arc;

/// The mutable start and element count of a storage.
fn data_raw(d: &mut Data) -> (*mut u8, usize) {
    fn raw<T>(v: &mut [T]) -> (*mut u8, usize) {
        (v.as_mut_ptr().cast::<u8>(), v.len())
    }
    with_data!(d, v => raw(v))
}

/// Where a tensor's elements are, for a compiled kernel: the address of its
/// first element (storage offset applied) and how many elements of its
/// storage lie from there on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawView {
    /// Address of element 0 of the view.
    pub ptr: *mut u8,
    /// Storage elements from `ptr` to the end of the storage.
    pub elements_after: usize,
}

impl Tensor {
    /// Calls `f` with a [`RawView`] of each of `tensors`, every storage
    /// locked for writing (once, however many of the tensors share it) for
    /// the whole call, so no other handle reads or writes it meanwhile. Each
    /// view is checked to lie within its storage first; complex tensors are
    /// refused (their storage holds parts, not elements).
    pub(crate) fn with_raw_views<R>(tensors: &[&Tensor], f: impl FnOnce(&[RawView]) -> R) -> Result<R, ExecError> {
        let mut storages: Vec<&Arc<Storage>> = Vec::new();
        let mut which = Vec::with_capacity(tensors.len());
        for t in tensors {
            if t.spec.dtype.is_complex() {
                return Err(ExecError::Type(format!(
                    "a {} tensor cannot be passed to a compiled host kernel",
                    t.spec.dtype
                )));
            }
            let k = match storages.iter().position(|s| Arc::ptr_eq(s, &t.storage)) {
                Some(k) => k,
                None => {
                    storages.push(&t.storage);
                    storages.len() - 1
                }
            };
            which.push(k);
        }
        let mut guards = Vec::with_capacity(storages.len());
        for s in &storages {
            guards.push(
                s.data
                    .write()
                    .map_err(|_| ExecError::Input("tensor storage poisoned by a panic".into()))?,
            );
        }
        let bases: Vec<(*mut u8, usize)> = guards.iter_mut().map(|g| data_raw(g)).collect();
        let mut views = Vec::with_capacity(tensors.len());
        for (t, k) in tensors.iter().zip(which) {
            let (base, len) = bases[k];
            check_bounds(&t.spec, len)?;
            // `check_bounds` proved 0 <= offset and that the view fits `len`
            // (an empty view may sit at `len`).
            let offset = usize::try_from(t.spec.offset)
                .ok()
                .filter(|o| *o <= len)
                .ok_or_else(|| ExecError::Input(format!("offset {} outside a storage of {len}", t.spec.offset)))?;
            let elem = t.spec.dtype.size_bytes() as usize;
            views.push(RawView {
                // SAFETY: `offset <= len`, so the address is within the
                // storage's allocation or one past its end.
                ptr: unsafe { base.add(offset * elem) },
                elements_after: len - offset,
            });
        }
        let out = f(&views);
        drop(guards);
        Ok(out)
    }
}
