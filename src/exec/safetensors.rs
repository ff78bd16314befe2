//! Host tensors from and to safetensors bytes (no I/O); the format itself
//! (header checks, raw views) is [`crate::format::safetensors`].
//!
//! A file is an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?:
//! {string: string}}`), then the raw little-endian element data; offsets are
//! relative to the end of the header and the tensors lie back to back,
//! covering the data section. Reading goes through the `safetensors` crate,
//! which validates all of that; [`parse`] then keeps the header's key order
//! (the order the writer used; the crate keeps only offset order), diagnoses a
//! rejected file again so that the error names the tensor at fault, holds every
//! tensor to the allocation limit ([`parse_with_limits`]) and decodes it into a
//! host [`Tensor`]. The input is any byte slice, so a memory-mapped file is
//! read in place (see `crate::bundle`).
//!
//! [`write()`] writes tensors in map order, contiguously, with the header padded
//! by spaces to a multiple of 8 bytes (the crate's writer reorders tensors by
//! dtype and name, which would lose the order references pair outputs by).
//!
//! `F8_E4M3` and `F8_E5M2` are read and written (host [`Tensor`]s hold
//! fp8 as its bits); `F8_E4M3FNUZ` and `F8_E5M2FNUZ` are recognised but host
//! tensors cannot hold them, so they are reported as
//! [`SafetensorsError::UnsupportedDType`]; codes wrapir has no dtype for
//! (`U16`, `U32`, `U64`, `F4`, `F6_*`, `F8_E8M0`) as
//! [`SafetensorsError::UnsupportedCode`].
//!
//! Complex tensors: safetensors defines `C64` (`complex64`, two `float32`
//! parts per element, real first), read and written as such. It has no code
//! for `complex32` or `complex128`; wrapir writes those as their
//! `view_as_real` (`F16` / `F64`, the shape with a last dimension of 2) and
//! marks them in the metadata map with [`COMPLEX_MARKER`]`<name>` =
//! `complex32` / `complex128`, so that [`parse_with_metadata`] gives the
//! complex tensor back and other readers see its real view.

use super::host::tensor::{with_dtype, Element};
use super::Tensor;
pub use crate::format::safetensors::SafetensorsError;
use crate::format::safetensors::{dtype_name, read_entries, Entry, RawTensor, COMPLEX_MARKER, METADATA_KEY};
use crate::ir::DType;
use half::{bf16, f16};
use indexmap::IndexMap;

/// A parsed file: tensors in header order, and the metadata map.
#[derive(Clone, Debug, Default)]
pub struct Safetensors {
    /// Tensors by name, in the header's order.
    pub tensors: IndexMap<String, Tensor>,
    /// The `__metadata__` map (empty when absent).
    pub metadata: IndexMap<String, String>,
}

/// Parses a file into its tensors (header order), within [`crate::Limits::default`].
pub fn parse(bytes: &[u8]) -> Result<IndexMap<String, Tensor>, SafetensorsError> {
    parse_with_metadata(bytes).map(|f| f.tensors)
}

/// Parses a file into its tensors and metadata, within [`crate::Limits::default`].
pub fn parse_with_metadata(bytes: &[u8]) -> Result<Safetensors, SafetensorsError> {
    parse_with_limits(bytes, &crate::Limits::default())
}

/// Parses a file into its tensors (header order) and metadata. The
/// `safetensors` crate validates the layout (header length, JSON, dtypes,
/// contiguous offsets covering the data section, byte counts); a file it
/// rejects is diagnosed again here so that the error names the tensor and
/// what is wrong with it. Each tensor's bytes are held to
/// `limits.max_alloc_bytes` before it is decoded.
pub fn parse_with_limits(bytes: &[u8], limits: &crate::Limits) -> Result<Safetensors, SafetensorsError> {
    let mut out = Safetensors::default();
    read_entries(bytes, |entry| {
        match entry {
            Entry::Metadata(metadata) => out.metadata = metadata,
            Entry::Tensor(name, raw) => {
                let tensor = decode_raw(name, &raw, limits)?;
                out.tensors.insert(name.to_string(), tensor);
            }
        }
        Ok(())
    })?;
    for (key, value) in &out.metadata {
        let Some(name) = key.strip_prefix(COMPLEX_MARKER) else {
            continue;
        };
        let bad = |message: String| SafetensorsError::Entry {
            name: name.to_string(),
            message,
        };
        let dtype: DType = value.parse().map_err(|e: String| bad(e))?;
        let tensor = out
            .tensors
            .get_mut(name)
            .ok_or_else(|| bad(format!("marked `{value}` in the metadata but absent")))?;
        let complex = tensor.view_as_complex().map_err(|e| bad(e.to_string()))?;
        if complex.dtype() != dtype {
            return Err(bad(format!(
                "marked `{value}` in the metadata but stored as {}",
                tensor.dtype()
            )));
        }
        *tensor = complex;
    }
    Ok(out)
}

/// Decodes one stored tensor (from [`raw_tensors`]) into a host tensor,
/// with the checks [`parse_with_limits`] makes (size against the allocation
/// limit, bool bytes 0 or 1; complex dtypes stored as their parts).
pub fn decode_raw(name: &str, raw: &RawTensor<'_>, limits: &crate::Limits) -> Result<Tensor, SafetensorsError> {
    let err = |message: String| SafetensorsError::Entry {
        name: name.to_string(),
        message,
    };
    let dtype = raw.dtype;
    crate::Limits::check(
        crate::Limit::AllocBytes,
        raw.data.len() as u64,
        limits.max_alloc_bytes,
        format!("tensor `{name}` ({dtype} {:?})", raw.size),
    )?;
    if dtype == DType::Bool {
        if let Some((index, value)) = raw.data.iter().enumerate().find(|(_, b)| **b > 1) {
            return Err(SafetensorsError::InvalidBool {
                name: name.to_string(),
                index,
                value: *value,
            });
        }
    }
    // A complex tensor is decoded as its parts (a last dimension of 2), then viewed.
    let (stored, size) = match dtype.complex_part() {
        Some(part) => (part, raw.size.iter().copied().chain([2]).collect()),
        None => (dtype, raw.size.clone()),
    };
    let tensor = with_dtype!(stored, T => decode::<T>(raw.data, &size), {
        return Err(SafetensorsError::UnsupportedDType { name: name.to_string(), dtype })
    });
    let tensor = tensor.map_err(|e| err(e.to_string()))?;
    if dtype.is_complex() {
        return tensor.view_as_complex().map_err(|e| err(e.to_string()));
    }
    Ok(tensor)
}

fn decode<T: LittleEndian>(raw: &[u8], size: &[i64]) -> Result<Tensor, super::ExecError> {
    let values: Vec<T> = raw.chunks_exact(T::SIZE).map(T::from_le).collect();
    Tensor::from_vec(values, size)
}

/// Writes tensors (in map order) without metadata.
pub fn write(tensors: &IndexMap<String, Tensor>) -> Result<Vec<u8>, SafetensorsError> {
    write_with_metadata(tensors, &IndexMap::new())
}

/// Writes tensors (in map order) and a metadata map (omitted when empty).
/// Each tensor is written row-major, whatever its strides.
pub fn write_with_metadata(
    tensors: &IndexMap<String, Tensor>,
    metadata: &IndexMap<String, String>,
) -> Result<Vec<u8>, SafetensorsError> {
    let mut header_order: Vec<(String, serde_json::Value)> = Vec::new();
    let mut metadata = metadata.clone();
    for (name, t) in tensors {
        if dtype_name(t.dtype()).is_none() && t.dtype().is_complex() {
            metadata.insert(format!("{COMPLEX_MARKER}{name}"), t.dtype().torch_name().to_string());
        }
    }
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = metadata
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        header_order.push((METADATA_KEY.to_string(), serde_json::Value::Object(m)));
    }
    let mut data = Vec::new();
    for (name, t) in tensors {
        let werr = |message: String| SafetensorsError::Write {
            name: name.clone(),
            message,
        };
        if name == METADATA_KEY {
            return Err(werr(format!("`{METADATA_KEY}` is reserved for metadata")));
        }
        // A complex tensor is written as its parts: `C64` with its own shape, or
        // (complex32 / complex128, marked above) its real view.
        let no_name = |d: DType| werr(format!("dtype {d} has no safetensors name"));
        let (t, shape, dtype_str) = match t.dtype().complex_part() {
            Some(part) => {
                let real = t.view_as_real().map_err(|e| werr(e.to_string()))?;
                let (shape, code) = match dtype_name(t.dtype()) {
                    Some(code) => (t.size().to_vec(), code),
                    None => (real.size().to_vec(), dtype_name(part).ok_or_else(|| no_name(part))?),
                };
                (std::borrow::Cow::Owned(real), shape, code)
            }
            None => (
                std::borrow::Cow::Borrowed(t),
                t.size().to_vec(),
                dtype_name(t.dtype()).ok_or_else(|| no_name(t.dtype()))?,
            ),
        };
        let begin = data.len();
        with_dtype!(t.dtype(), T => encode::<T>(&t, &mut data).map_err(|e| werr(e.to_string()))?, {
            return Err(werr(format!("dtype {} is not supported by host tensors", t.dtype())))
        });
        let entry = serde_json::json!({
            "dtype": dtype_str,
            "shape": shape,
            "data_offsets": [begin, data.len()],
        });
        header_order.push((name.clone(), entry));
    }
    Ok(crate::format::safetensors::assemble(header_order, &data))
}

fn encode<T: LittleEndian>(t: &Tensor, out: &mut Vec<u8>) -> Result<(), super::ExecError> {
    for v in t.to_vec::<T>()? {
        v.put_le(out);
    }
    Ok(())
}

/// Little-endian byte conversion of host element types: the one home of
/// it (safetensors files, and the CUDA backend's device copies).
pub(crate) trait LittleEndian: Element {
    const SIZE: usize;
    /// `bytes` has exactly `SIZE` bytes (from `chunks_exact`).
    fn from_le(bytes: &[u8]) -> Self;
    fn put_le(self, out: &mut Vec<u8>);
}

macro_rules! little_endian {
    ($($t:ty),*) => {$(
        impl LittleEndian for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                let mut buf = [0u8; std::mem::size_of::<$t>()];
                // `chunks_exact(SIZE)` hands out exactly SIZE bytes, so lengths match.
                buf.copy_from_slice(bytes);
                <$t>::from_le_bytes(buf)
            }
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

little_endian!(u8, i8, i16, i32, i64, f32, f64, f16, bf16);

/// fp8 elements: one byte, their bits.
macro_rules! fp8_little_endian {
    ($($t:ident),*) => {$(
        impl LittleEndian for crate::exec::host::tensor::$t {
            const SIZE: usize = 1;
            fn from_le(bytes: &[u8]) -> Self {
                // `chunks_exact(1)` hands out one byte.
                crate::exec::host::tensor::$t(bytes.first().copied().unwrap_or(0))
            }
            fn put_le(self, out: &mut Vec<u8>) {
                out.push(self.0);
            }
        }
    )*};
}

fp8_little_endian!(F8E4m3fn, F8E5m2);

impl LittleEndian for bool {
    const SIZE: usize = 1;
    fn from_le(bytes: &[u8]) -> Self {
        bytes.first().is_some_and(|b| *b != 0)
    }
    fn put_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fp8 tensors are read and written as their bits, and read as values.
    #[test]
    fn fp8_tensors_round_trip() {
        use crate::exec::host::tensor::{F8E4m3fn, F8E5m2};
        let mut m = IndexMap::new();
        let bits = [0x38u8, 0xc0, 0x7e, 0x7f, 0x80, 0x01];
        m.insert(
            "a".to_string(),
            Tensor::from_vec(bits.map(F8E4m3fn).to_vec(), &[2, 3]).unwrap(),
        );
        m.insert(
            "b".to_string(),
            Tensor::from_vec(bits.map(F8E5m2).to_vec(), &[6]).unwrap(),
        );
        let back = parse(&write(&m).unwrap()).unwrap();
        assert_eq!(back["a"].dtype(), crate::ir::DType::Float8E4m3fn);
        assert_eq!(back["b"].dtype(), crate::ir::DType::Float8E5m2);
        fn bytes<T: crate::exec::host::tensor::Element>(t: &Tensor, bits: fn(T) -> u8) -> Vec<u8> {
            t.to_vec::<T>().unwrap().into_iter().map(bits).collect()
        }
        assert_eq!(bytes(&back["a"], |x: F8E4m3fn| x.0), bits);
        assert_eq!(bytes(&back["b"], |x: F8E5m2| x.0), bits);
        let values = back["a"].to_f64_vec().unwrap();
        assert_eq!(&values[..3], &[1.0, -2.0, 448.0]);
        assert!(values[3].is_nan());
    }

    #[test]
    fn tensors_are_held_to_the_allocation_limit() {
        let mut m = IndexMap::new();
        m.insert("small".to_string(), Tensor::from_vec(vec![1.0f32; 4], &[4]).unwrap());
        m.insert("big".to_string(), Tensor::from_vec(vec![1.0f32; 64], &[64]).unwrap());
        let bytes = write(&m).unwrap();
        let limits = crate::Limits::default().with_memory(100);
        let e = parse_with_limits(&bytes, &limits).unwrap_err();
        assert!(matches!(e, SafetensorsError::Limit(_)), "{e:?}");
        assert!(
            e.to_string().contains("tensor `big`") && e.to_string().contains("--max-alloc-bytes"),
            "{e}"
        );
        let back = parse_with_limits(&bytes, &crate::Limits::default().with_memory(256)).unwrap();
        assert_eq!(back.tensors.keys().collect::<Vec<_>>(), ["small", "big"]);
    }
}
