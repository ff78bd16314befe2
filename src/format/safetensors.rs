//! The safetensors format, from and to bytes (no I/O, no tensors): the
//! header's checks and raw views of the stored tensors.
//!
//! A file is an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?:
//! {string: string}}`), then the raw little-endian element data; offsets are
//! relative to the end of the header and the tensors lie back to back,
//! covering the data section. Reading goes through the `safetensors` crate,
//! which validates all of that; [`read_entries`] then keeps the header's key
//! order (the order the writer used; the crate keeps only offset order) and
//! diagnoses a rejected file again so that the error names the tensor at
//! fault. The input is any byte slice, so a memory-mapped file is read in
//! place (see `crate::bundle`). [`assemble`] writes a header in the order
//! given, padded by spaces to a multiple of 8 bytes.
//!
//! Host tensors are read from and written to these views by
//! `crate::exec::safetensors`.
//!
//! `F8_E4M3`, `F8_E5M2`, `F8_E4M3FNUZ` and `F8_E5M2FNUZ` are recognised; codes
//! wrapir has no dtype for (`U16`, `U32`, `U64`, `F4`, `F6_*`, `F8_E8M0`) are
//! [`SafetensorsError::UnsupportedCode`].
//!
//! Complex tensors: safetensors defines `C64` (`complex64`, two `float32`
//! parts per element, real first). It has no code for `complex32` or
//! `complex128`; wrapir writes those as their `view_as_real` (`F16` / `F64`,
//! the shape with a last dimension of 2) and marks them in the metadata map
//! with [`COMPLEX_MARKER`]`<name>` = `complex32` / `complex128`.

use crate::ir::DType;
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

/// One entry of a file's header, in file order: the metadata map, or a
/// tensor as a raw view.
#[derive(Clone, Debug)]
pub enum Entry<'a> {
    /// The `__metadata__` map.
    Metadata(IndexMap<String, String>),
    /// A tensor, by name.
    Tensor(&'a str, RawTensor<'a>),
}

/// Reads the file `bytes` and hands `each` its header's entries in file
/// order (the order the writer used; the `safetensors` crate keeps only
/// offset order), stopping at the first error. The crate validates the
/// layout (header length, JSON, dtypes, contiguous offsets covering the data
/// section, byte counts); a file it rejects is diagnosed again here so that
/// the error names the tensor and what is wrong with it.
pub fn read_entries<'a>(
    bytes: &'a [u8],
    mut each: impl FnMut(Entry<'_>) -> Result<(), SafetensorsError>,
) -> Result<(), SafetensorsError> {
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| diagnose(bytes, &e))?;
    for (name, raw) in &header_entries(bytes)? {
        if name == METADATA_KEY {
            let value: serde_json::Value =
                serde_json::from_str(raw.get()).map_err(|e| SafetensorsError::Header(e.to_string()))?;
            each(Entry::Metadata(parse_metadata(&value)?))?;
            continue;
        }
        let view = file.tensor(name).map_err(|e| SafetensorsError::Entry {
            name: name.clone(),
            message: e.to_string(),
        })?;
        each(Entry::Tensor(name, raw_view(name, &view)?))?;
    }
    Ok(())
}

/// The tensors of the safetensors file `bytes` as raw views, by name, after
/// the checks of [`read_entries`] and each tensor's bytes held to
/// `limits.max_alloc_bytes` (bool bytes are not checked: callers that upload
/// raw bytes take them as stored).
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

/// A file's bytes from its header entries (in the order given, kept: the
/// crate's writer reorders tensors by dtype and name) and its data section:
/// the header padded by spaces to a multiple of 8 bytes.
pub fn assemble(header: Vec<(String, serde_json::Value)>, data: &[u8]) -> Vec<u8> {
    // serde_json's Map may sort keys; write the object by hand to keep map order.
    let mut text = String::from("{");
    for (k, (key, value)) in header.into_iter().enumerate() {
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
    out.extend_from_slice(data);
    out
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
