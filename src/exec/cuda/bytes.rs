//! Host tensors as the little-endian bytes of device storage, and back
//! (the element encoding is [`LittleEndian`], shared with safetensors files).

use crate::exec::host::tensor::with_dtype;
use crate::exec::safetensors::LittleEndian;
use crate::exec::{ExecError, Tensor};
use crate::ir::DType;

pub(super) fn encode<T: LittleEndian>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(values));
    for v in values {
        v.put_le(&mut out);
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
            let width = <T as LittleEndian>::SIZE;
            // chunks_exact yields only whole elements of `width` bytes, the
            // size each `from_le` takes.
            let values: Vec<T> = bytes.chunks_exact(width).map(<T as LittleEndian>::from_le).collect();
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
