//! Host tensors as the little-endian bytes of device storage, and back.

use crate::exec::host::tensor::with_dtype;
use crate::exec::{ExecError, Tensor};
use crate::ir::DType;

/// Little-endian encoding of host element types.
pub(super) trait LeBytes: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
le_bytes!(u8, i8, i16, i32, i64, f32, f64, half::f16, half::bf16);

/// fp8 elements: one byte, their bits.
macro_rules! fp8_le_bytes {
    ($($t:ident),*) => {$(
        impl LeBytes for crate::exec::host::tensor::$t {
            fn put(&self, out: &mut Vec<u8>) {
                out.push(self.0);
            }
            fn get(bytes: &[u8]) -> Self {
                crate::exec::host::tensor::$t(bytes.first().copied().unwrap_or(0))
            }
        }
    )*};
}
fp8_le_bytes!(F8E4m3fn, F8E5m2);

impl LeBytes for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn get(bytes: &[u8]) -> Self {
        bytes.first().is_some_and(|b| *b != 0)
    }
}

pub(super) fn encode<T: LeBytes>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(values));
    for v in values {
        v.put(&mut out);
    }
    out
}

/// A 1-D host tensor of `n` elements of `dtype` decoded from `bytes`.
pub(crate) fn host_from_bytes(dtype: DType, bytes: &[u8], n: i64) -> Result<Tensor, ExecError> {
    if let Some(part) = dtype.complex_part() {
        let parts = n
            .checked_mul(2)
            .ok_or_else(|| ExecError::Input("tensor too large".into()))?;
        return host_from_bytes(part, bytes, parts)?
            .view(&[n, 2], &[2, 1], 0)?
            .view_as_complex();
    }
    with_dtype!(
        dtype,
        T => {
            let width = std::mem::size_of::<T>();
            // chunks_exact yields only whole elements, so `get` never reads past a chunk.
            let values: Vec<T> = bytes.chunks_exact(width).map(<T as LeBytes>::get).collect();
            Tensor::from_vec(values, &[n])
        },
        Err(ExecError::Unsupported(format!("host tensors do not store dtype {dtype}")))
    )
}

/// The whole storage of a 1-D host tensor made by [`host_from_bytes`], as bytes.
pub(super) fn host_storage_bytes(host: &Tensor) -> Result<Vec<u8>, ExecError> {
    if host.dtype().is_complex() {
        return host_storage_bytes(&host.view_as_real()?);
    }
    with_dtype!(
        host.dtype(),
        T => Ok(encode::<T>(&host.to_vec::<T>()?)),
        Err(ExecError::Unsupported(format!("host tensors do not store dtype {}", host.dtype())))
    )
}
