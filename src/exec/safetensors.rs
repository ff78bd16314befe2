//! The safetensors format, from and to bytes (no I/O).
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
//! `F8_E4M3`, `F8_E5M2`, `F8_E4M3FNUZ` and `F8_E5M2FNUZ` are recognised but host
//! [`Tensor`]s cannot hold them, so they are reported as
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
    /// The header length exceeds what the format allows (100,000,000 bytes).
    #[error("header length {header_len} exceeds the format's limit of 100000000 bytes")]
    HeaderTooLarge {
        /// The declared header length.
        header_len: u64,
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
    #[error("tensor `{name}`: unknown dtype `{dtype}` (known: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, C64)")]
    UnknownDType {
        /// The tensor.
        name: String,
        /// The dtype string.
        dtype: String,
    },
    /// A safetensors dtype code wrapir has no dtype for (`U16`, `F4`, ...).
    #[error("tensor `{name}`: safetensors dtype `{dtype}` has no wrapir dtype")]
    UnsupportedCode {
        /// The tensor.
        name: String,
        /// The code.
        dtype: String,
    },
    /// A tensor larger than the allocation limit.
    #[error(transparent)]
    Limit(#[from] crate::LimitExceeded),
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
        DType::Float8E4m3fnuz => "F8_E4M3FNUZ",
        DType::Float8E5m2fnuz => "F8_E5M2FNUZ",
        DType::Complex32 | DType::Complex128 => return None,
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
        "F8_E4M3FNUZ" => DType::Float8E4m3fnuz,
        "F8_E5M2FNUZ" => DType::Float8E5m2fnuz,
        "C64" => DType::Complex64,
        _ => return None,
    })
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
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| diagnose(bytes, &e))?;
    // The crate keeps tensors in offset order only; the header's own order
    // (the writer's) comes from the header text, which it has just validated.
    let header = header_entries(bytes)?;
    let mut out = Safetensors::default();
    for (name, raw) in &header {
        if name == METADATA_KEY {
            let value: serde_json::Value =
                serde_json::from_str(raw.get()).map_err(|e| SafetensorsError::Header(e.to_string()))?;
            out.metadata = parse_metadata(&value)?;
            continue;
        }
        let view = file.tensor(name).map_err(|e| SafetensorsError::Entry {
            name: name.clone(),
            message: e.to_string(),
        })?;
        let tensor = decode_view(name, &view, limits)?;
        out.tensors.insert(name.clone(), tensor);
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

/// One stored tensor as the file holds it: dtype, sizes and its raw
/// little-endian bytes (a view into the file, nothing decoded or copied).
#[derive(Clone, Debug)]
pub struct RawTensor<'a> {
    /// Element type (a complex tensor stored as its real parts is reported as
    /// those parts; see [`parse_with_limits`] for the complex view).
    pub dtype: DType,
    /// Sizes.
    pub size: Vec<i64>,
    /// The bytes, row-major and dense.
    pub data: &'a [u8],
}

/// The tensors of the safetensors file `bytes` as raw views, by name, after
/// the same checks as [`parse_with_limits`] (bool bytes excepted: callers
/// that upload raw bytes take them as stored).
pub fn raw_tensors<'a>(
    bytes: &'a [u8],
    limits: &crate::Limits,
) -> Result<IndexMap<String, RawTensor<'a>>, SafetensorsError> {
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| diagnose(bytes, &e))?;
    let mut out = IndexMap::new();
    for (name, _) in &header_entries(bytes)? {
        if name == METADATA_KEY {
            continue;
        }
        let view = file.tensor(name).map_err(|e| SafetensorsError::Entry {
            name: name.clone(),
            message: e.to_string(),
        })?;
        // A size past i64 needs a zero dimension beside it, so the limit
        // (checked on the data's length) cannot fail with it.
        let raw = raw_view(name, &view)?;
        crate::Limits::check(
            crate::Limit::AllocBytes,
            raw.data.len() as u64,
            limits.max_alloc_bytes,
            format!("tensor `{name}` ({} {:?})", raw.dtype, view.shape()),
        )?;
        out.insert(name.clone(), raw);
    }
    Ok(out)
}

/// The header length field and the header text of a file whose length the
/// caller has checked (or that fails here with the crate's checks' errors).
fn header_text(bytes: &[u8]) -> Result<(&str, &[u8]), SafetensorsError> {
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
    Ok((header, data))
}

/// The header's entries in file order, values unparsed.
fn header_entries(bytes: &[u8]) -> Result<IndexMap<String, Box<serde_json::value::RawValue>>, SafetensorsError> {
    let (header, _) = header_text(bytes)?;
    serde_json::from_str(header).map_err(|e| SafetensorsError::Header(e.to_string()))
}

/// The error of a file the `safetensors` crate rejected with `e`, naming the
/// tensor where one is at fault: the header is read again entry by entry.
fn diagnose(bytes: &[u8], e: &safetensors::SafeTensorError) -> SafetensorsError {
    use safetensors::SafeTensorError as E;
    let header_len = bytes
        .first_chunk::<8>()
        .map(|b| u64::from_le_bytes(*b))
        .unwrap_or_default();
    match e {
        E::HeaderTooSmall => return SafetensorsError::TooShort { len: bytes.len() },
        E::HeaderTooLarge => return SafetensorsError::HeaderTooLarge { header_len },
        E::InvalidHeaderLength => {
            return SafetensorsError::HeaderLength {
                header_len,
                available: bytes.len().saturating_sub(8),
            }
        }
        _ => {}
    }
    let data_len = match header_text(bytes) {
        Ok((_, data)) => data.len(),
        Err(err) => return err,
    };
    let entries: IndexMap<String, serde_json::Value> = match header_text(bytes)
        .and_then(|(h, _)| serde_json::from_str(h).map_err(|e| SafetensorsError::Header(e.to_string())))
    {
        Ok(entries) => entries,
        Err(err) => return err,
    };
    match check_entries(&entries, data_len) {
        Err(err) => err,
        Ok(()) => SafetensorsError::Header(e.to_string()),
    }
}

/// The offsets of one header entry, checked against the data section.
struct EntryRange<'a> {
    name: &'a str,
    begin: u64,
    end: u64,
}

/// Checks every header entry (metadata, dtype, shape, offsets, byte count),
/// then that the tensors lie back to back and cover the data section, as
/// the format requires.
fn check_entries(entries: &IndexMap<String, serde_json::Value>, data_len: usize) -> Result<(), SafetensorsError> {
    let mut ranges = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        if name == METADATA_KEY {
            parse_metadata(entry)?;
        } else {
            ranges.push(check_entry(name, entry, data_len)?);
        }
    }
    ranges.sort_by_key(|r| (r.begin, r.end));
    let mut at = 0u64;
    for r in &ranges {
        if r.begin != at {
            return Err(SafetensorsError::Entry {
                name: r.name.to_string(),
                message: format!(
                    "data offsets [{}, {}] do not start where the tensors before end (byte {at}); safetensors stores tensors back to back",
                    r.begin, r.end
                ),
            });
        }
        at = r.end;
    }
    if at != data_len as u64 {
        return Err(SafetensorsError::Header(format!(
            "the tensors cover {at} of the {data_len} bytes of the data section"
        )));
    }
    Ok(())
}

fn check_entry<'a>(
    name: &'a str,
    entry: &serde_json::Value,
    data_len: usize,
) -> Result<EntryRange<'a>, SafetensorsError> {
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
    let code: safetensors::Dtype =
        serde_json::from_value(serde_json::Value::String(dtype_str.to_string())).map_err(|_| {
            SafetensorsError::UnknownDType {
                name: name.to_string(),
                dtype: dtype_str.to_string(),
            }
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
    if begin > end || end > data_len as u64 {
        return Err(SafetensorsError::OffsetsOutOfRange {
            name: name.to_string(),
            begin,
            end,
            data_len,
        });
    }
    let bits = shape
        .iter()
        .try_fold(1u64, |acc, d| acc.checked_mul(*d))
        .and_then(|n| n.checked_mul(code.bitsize() as u64));
    let expected = bits.filter(|b| b % 8 == 0).map(|b| b / 8);
    if expected != Some(end - begin) {
        let Some(dtype) = dtype_of(code) else {
            return Err(err(format!(
                "{dtype_str} of shape {shape:?} does not fill the {} bytes its data offsets span",
                end - begin
            )));
        };
        return Err(SafetensorsError::ByteCount {
            name: name.to_string(),
            dtype,
            shape,
            expected: expected.unwrap_or(u64::MAX),
            actual: end - begin,
        });
    }
    Ok(EntryRange { name, begin, end })
}

/// The wrapir dtype of a safetensors dtype code, if it has one.
fn dtype_of(code: safetensors::Dtype) -> Option<DType> {
    dtype_from_name(&code.to_string())
}

fn parse_metadata(v: &serde_json::Value) -> Result<IndexMap<String, String>, SafetensorsError> {
    let bad = || SafetensorsError::Header(format!("`{METADATA_KEY}` must be an object of strings"));
    let obj = v.as_object().ok_or_else(bad)?;
    obj.iter()
        .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(bad)?.to_string())))
        .collect()
}

/// A host tensor from a view the crate validated (its byte count matches
/// dtype and shape), within the allocation limit.
fn decode_view(
    name: &str,
    view: &safetensors::tensor::TensorView<'_>,
    limits: &crate::Limits,
) -> Result<Tensor, SafetensorsError> {
    decode_raw(name, &raw_view(name, view)?, limits)
}

/// A view the crate validated as a [`RawTensor`]: its dtype and sizes in
/// wrapir's terms.
fn raw_view<'a>(name: &str, view: &safetensors::tensor::TensorView<'a>) -> Result<RawTensor<'a>, SafetensorsError> {
    let code = view.dtype();
    let dtype = dtype_of(code).ok_or_else(|| SafetensorsError::UnsupportedCode {
        name: name.to_string(),
        dtype: code.to_string(),
    })?;
    let size = view
        .shape()
        .iter()
        .map(|d| {
            i64::try_from(*d).map_err(|_| SafetensorsError::Entry {
                name: name.to_string(),
                message: format!("shape entry {d} is too large"),
            })
        })
        .collect::<Result<Vec<i64>, _>>()?;
    Ok(RawTensor {
        dtype,
        size,
        data: view.data(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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
