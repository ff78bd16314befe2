//! The safetensors format, from and to bytes (no I/O).
//!
//! A file is an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?:
//! {string: string}}`), then the raw little-endian element data; offsets are
//! relative to the end of the header. [`parse`] keeps the header's key order
//! (the order the writer used); [`write()`] writes tensors in map order,
//! contiguously, with the header padded by spaces to a multiple of 8 bytes.
//!
//! `F8_E4M3` and `F8_E5M2` are recognised but host [`Tensor`]s cannot hold
//! them, so they are reported as [`SafetensorsError::UnsupportedDType`].
//!
//! Complex tensors: safetensors defines `C64` (`complex64`, two `float32`
//! parts per element, real first), read and written as such. It has no code
//! for `complex32` or `complex128`; wrapir writes those as their
//! `view_as_real` (`F16` / `F64`, the shape with a last dimension of 2) and
//! marks them in the metadata map with [`COMPLEX_MARKER`]`<name>` =
//! `complex32` / `complex128`, so that [`parse_with_metadata`] gives the
//! complex tensor back and other readers see its real view.

use super::tensor::{with_dtype, Element};
use super::Tensor;
use crate::ir::DType;
use half::{bf16, f16};
use indexmap::IndexMap;

/// The key of the optional string-to-string metadata map.
pub const METADATA_KEY: &str = "__metadata__";

/// The metadata key prefix that marks a tensor stored as the real view of a
/// `complex32` / `complex128` tensor (the format has no code for them).
pub const COMPLEX_MARKER: &str = "wrapir.complex.";

/// Why bytes are not a valid safetensors file, or tensors cannot be written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SafetensorsError {
    /// Fewer than the 8 bytes of the header length.
    #[error("file is {len} bytes, too short for the 8-byte header length")]
    TooShort {
        /// The file's length.
        len: usize,
    },
    /// The header length points past the end of the file.
    #[error("header length {header_len} exceeds the {available} bytes after the length field")]
    HeaderLength {
        /// The declared header length.
        header_len: u64,
        /// Bytes after the length field.
        available: usize,
    },
    /// The header is not a JSON object of the expected shape.
    #[error("invalid header: {0}")]
    Header(String),
    /// A tensor entry lacks a field or has one of the wrong type.
    #[error("tensor `{name}`: {message}")]
    Entry {
        /// The tensor.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A dtype name safetensors does not define (or wrapir does not know).
    #[error("tensor `{name}`: unknown dtype `{dtype}` (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, C64)")]
    UnknownDType {
        /// The tensor.
        name: String,
        /// The dtype string.
        dtype: String,
    },
    /// A dtype host tensors cannot hold.
    #[error("tensor `{name}`: dtype {dtype} is not supported by host tensors")]
    UnsupportedDType {
        /// The tensor.
        name: String,
        /// The dtype.
        dtype: DType,
    },
    /// Data offsets outside the data section (or reversed).
    #[error("tensor `{name}`: data offsets [{begin}, {end}] are outside the {data_len}-byte data section")]
    OffsetsOutOfRange {
        /// The tensor.
        name: String,
        /// First byte.
        begin: u64,
        /// One past the last byte.
        end: u64,
        /// Size of the data section.
        data_len: usize,
    },
    /// The byte count does not match dtype and shape.
    #[error("tensor `{name}`: {dtype} of shape {shape:?} needs {expected} bytes, but its data offsets span {actual}")]
    ByteCount {
        /// The tensor.
        name: String,
        /// The dtype.
        dtype: DType,
        /// The shape.
        shape: Vec<u64>,
        /// Bytes dtype and shape need.
        expected: u64,
        /// Bytes the offsets span.
        actual: u64,
    },
    /// A byte that is not 0 or 1 in a `BOOL` tensor.
    #[error("tensor `{name}`: byte {value} at element {index} is not a boolean (0 or 1)")]
    InvalidBool {
        /// The tensor.
        name: String,
        /// Element index.
        index: usize,
        /// The byte.
        value: u8,
    },
    /// A tensor that cannot be written (reserved name, unreadable data).
    #[error("cannot write tensor `{name}`: {message}")]
    Write {
        /// The tensor.
        name: String,
        /// Why.
        message: String,
    },
}

/// A parsed file: tensors in header order, and the metadata map.
#[derive(Clone, Debug, Default)]
pub struct Safetensors {
    /// Tensors by name, in the header's order.
    pub tensors: IndexMap<String, Tensor>,
    /// The `__metadata__` map (empty when absent).
    pub metadata: IndexMap<String, String>,
}

/// The safetensors dtype name of `dtype`, if the format has one.
pub fn dtype_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Float64 => "F64",
        DType::Float32 => "F32",
        DType::Float16 => "F16",
        DType::Bfloat16 => "BF16",
        DType::Int64 => "I64",
        DType::Int32 => "I32",
        DType::Int16 => "I16",
        DType::Int8 => "I8",
        DType::Uint8 => "U8",
        DType::Bool => "BOOL",
        DType::Float8E4m3fn => "F8_E4M3",
        DType::Float8E5m2 => "F8_E5M2",
        DType::Complex64 => "C64",
        DType::Float8E4m3fnuz | DType::Float8E5m2fnuz | DType::Complex32 | DType::Complex128 => return None,
    })
}

/// The dtype of a safetensors dtype name.
pub fn dtype_from_name(name: &str) -> Option<DType> {
    Some(match name {
        "F64" => DType::Float64,
        "F32" => DType::Float32,
        "F16" => DType::Float16,
        "BF16" => DType::Bfloat16,
        "I64" => DType::Int64,
        "I32" => DType::Int32,
        "I16" => DType::Int16,
        "I8" => DType::Int8,
        "U8" => DType::Uint8,
        "BOOL" => DType::Bool,
        "F8_E4M3" => DType::Float8E4m3fn,
        "F8_E5M2" => DType::Float8E5m2,
        "C64" => DType::Complex64,
        _ => return None,
    })
}

/// Parses a file into its tensors (header order).
pub fn parse(bytes: &[u8]) -> Result<IndexMap<String, Tensor>, SafetensorsError> {
    parse_with_metadata(bytes).map(|f| f.tensors)
}

/// Parses a file into its tensors and metadata.
pub fn parse_with_metadata(bytes: &[u8]) -> Result<Safetensors, SafetensorsError> {
    let (len_field, rest) = bytes
        .split_first_chunk::<8>()
        .ok_or(SafetensorsError::TooShort { len: bytes.len() })?;
    let header_len = u64::from_le_bytes(*len_field);
    let header_end =
        usize::try_from(header_len)
            .ok()
            .filter(|n| *n <= rest.len())
            .ok_or(SafetensorsError::HeaderLength {
                header_len,
                available: rest.len(),
            })?;
    let (header, data) = rest.split_at(header_end);
    let header = std::str::from_utf8(header).map_err(|e| SafetensorsError::Header(format!("not UTF-8: {e}")))?;
    // IndexMap keeps the keys in file order.
    let entries: IndexMap<String, serde_json::Value> =
        serde_json::from_str(header).map_err(|e| SafetensorsError::Header(e.to_string()))?;
    let mut out = Safetensors::default();
    for (name, entry) in entries {
        if name == METADATA_KEY {
            out.metadata = parse_metadata(&entry)?;
            continue;
        }
        let tensor = parse_entry(&name, &entry, data)?;
        out.tensors.insert(name, tensor);
    }
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

fn parse_metadata(v: &serde_json::Value) -> Result<IndexMap<String, String>, SafetensorsError> {
    let bad = || SafetensorsError::Header(format!("`{METADATA_KEY}` must be an object of strings"));
    let obj = v.as_object().ok_or_else(bad)?;
    obj.iter()
        .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(bad)?.to_string())))
        .collect()
}

fn parse_entry(name: &str, entry: &serde_json::Value, data: &[u8]) -> Result<Tensor, SafetensorsError> {
    let err = |message: String| SafetensorsError::Entry {
        name: name.to_string(),
        message,
    };
    let obj = entry.as_object().ok_or_else(|| err("entry is not an object".into()))?;
    let dtype_str = obj
        .get("dtype")
        .ok_or_else(|| err("missing `dtype`".into()))?
        .as_str()
        .ok_or_else(|| err("`dtype` is not a string".into()))?;
    let dtype = dtype_from_name(dtype_str).ok_or_else(|| SafetensorsError::UnknownDType {
        name: name.to_string(),
        dtype: dtype_str.to_string(),
    })?;
    let shape = obj
        .get("shape")
        .ok_or_else(|| err("missing `shape`".into()))?
        .as_array()
        .ok_or_else(|| err("`shape` is not an array".into()))?
        .iter()
        .map(|d| {
            d.as_u64()
                .ok_or_else(|| err(format!("shape entry {d} is not a non-negative integer")))
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let offsets = obj
        .get("data_offsets")
        .ok_or_else(|| err("missing `data_offsets`".into()))?
        .as_array()
        .ok_or_else(|| err("`data_offsets` is not an array".into()))?;
    let [begin, end] = offsets.as_slice() else {
        return Err(err(format!("`data_offsets` has {} entries, not 2", offsets.len())));
    };
    let (begin, end) = match (begin.as_u64(), end.as_u64()) {
        (Some(b), Some(e)) => (b, e),
        _ => return Err(err("`data_offsets` entries must be non-negative integers".into())),
    };
    let out_of_range = || SafetensorsError::OffsetsOutOfRange {
        name: name.to_string(),
        begin,
        end,
        data_len: data.len(),
    };
    if begin > end || end > data.len() as u64 {
        return Err(out_of_range());
    }
    // In range of `data`, so both fit in usize.
    let raw = data.get(begin as usize..end as usize).ok_or_else(out_of_range)?;
    let numel = shape.iter().try_fold(1u64, |acc, d| acc.checked_mul(*d));
    let expected = numel.and_then(|n| n.checked_mul(dtype.size_bytes()));
    if expected != Some(raw.len() as u64) {
        return Err(SafetensorsError::ByteCount {
            name: name.to_string(),
            dtype,
            shape,
            expected: expected.unwrap_or(u64::MAX),
            actual: raw.len() as u64,
        });
    }
    let size = shape
        .iter()
        .map(|d| i64::try_from(*d).map_err(|_| err(format!("shape entry {d} is too large"))))
        .collect::<Result<Vec<i64>, _>>()?;
    if dtype == DType::Bool {
        if let Some((index, value)) = raw.iter().enumerate().find(|(_, b)| **b > 1) {
            return Err(SafetensorsError::InvalidBool {
                name: name.to_string(),
                index,
                value: *value,
            });
        }
    }
    // A complex tensor is decoded as its parts (a last dimension of 2), then viewed.
    let (stored, size) = match dtype.complex_part() {
        Some(part) => (part, size.iter().copied().chain([2]).collect()),
        None => (dtype, size),
    };
    let tensor = with_dtype!(stored, T => decode::<T>(raw, &size), {
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
    // serde_json's Map may sort keys; write the object by hand to keep map order.
    let mut text = String::from("{");
    for (k, (key, value)) in header_order.into_iter().enumerate() {
        if k > 0 {
            text.push(',');
        }
        text.push_str(&serde_json::Value::String(key).to_string());
        text.push(':');
        text.push_str(&value.to_string());
    }
    text.push('}');
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    let mut out = Vec::with_capacity(8 + text.len() + data.len());
    out.extend_from_slice(&(text.len() as u64).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&data);
    Ok(out)
}

fn encode<T: LittleEndian>(t: &Tensor, out: &mut Vec<u8>) -> Result<(), super::ExecError> {
    for v in t.to_vec::<T>()? {
        v.put_le(out);
    }
    Ok(())
}

/// Little-endian byte conversion of host element types.
trait LittleEndian: Element {
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

impl LittleEndian for bool {
    const SIZE: usize = 1;
    fn from_le(bytes: &[u8]) -> Self {
        bytes.first().is_some_and(|b| *b != 0)
    }
    fn put_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
}
