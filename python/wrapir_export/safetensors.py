"""A safetensors writer and reader (the format: u64 little-endian header length, a JSON
header, then the raw little-endian bytes of every tensor).

`pack` / `read_header` are plain Python; `write_safetensors` / `load_safetensors` take
torch tensors (torch is imported when they are called).
"""

from __future__ import annotations

import ctypes
import json
import struct

from .errors import Unconvertible

# safetensors has no code for complex32 / complex128: such a tensor is written as its
# view_as_real (F16 / F64, a last dimension of 2) and marked in the metadata under
# COMPLEX_MARKER + name (wrapir's reader turns it back into the complex tensor).
COMPLEX_MARKER = "wrapir.complex."

# safetensors dtype code -> torch dtype name.
CODES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
    "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64", "C64": "complex64",
    # fp8 (`torch._scaled_mm` operands): one byte an element, the codes wrapir's reader takes.
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
_BY_NAME = {v: k for k, v in CODES.items()}


def dtype_code(dtype_name):
    """The safetensors code of a dtype given by name (`float32`, `torch.float32`)."""
    name = str(dtype_name).replace("torch.", "")
    if name not in _BY_NAME:
        raise Unconvertible(f"dtype {dtype_name} has no safetensors code")
    return _BY_NAME[name]


def pack(entries, metadata=None):
    """The bytes of a safetensors file holding `entries`, a list of
    (name, dtype code, shape, raw bytes), in that order, and `metadata` (a str -> str dict)."""
    header = {}
    offset = 0
    for name, code, shape, raw in entries:
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return b"".join([struct.pack("<Q", len(text)), text] + [raw for _, _, _, raw in entries])


def tensor_entries(tensors, metadata=None):
    """(entries for `pack`, metadata) of a name -> torch tensor dict."""
    import torch

    entries = []
    metadata = dict(metadata or {})
    for name, t in tensors.items():
        if getattr(t, "is_mkldnn", False) or t.layout != torch.strided:
            raise Unconvertible(f"tensor `{name}` ({'mkldnn' if t.is_mkldnn else t.layout}) has no strided data to store")
        t = t.detach().to("cpu").contiguous()
        shape = list(t.shape)
        if t.is_complex():
            if t.dtype == torch.complex64:
                code = "C64"
            else:
                code = dtype_code(torch.float16 if t.dtype == torch.complex32 else torch.float64)
                metadata[COMPLEX_MARKER + name] = str(t.dtype).replace("torch.", "")
                shape = shape + [2]
            # The parts, real first, element by element (the layout of C64).
            t = torch.view_as_real(t).contiguous()
        else:
            code = dtype_code(t.dtype)
        # The bytes without NumPy (not a dependency): `t` is a dense host tensor.
        flat = t.reshape(-1).view(torch.uint8)
        raw = ctypes.string_at(flat.data_ptr(), flat.numel()) if flat.numel() else b""
        entries.append((name, code, shape, raw))
    return entries, metadata


def write_safetensors(path, tensors, metadata=None):
    """Writes a name -> torch tensor dict (the tensors are copied to the host)."""
    entries, metadata = tensor_entries(tensors, metadata)
    with open(path, "wb") as f:
        f.write(pack(entries, metadata))


def read_header(data):
    """(header dict without `__metadata__`, metadata dict, offset of the data) of a
    safetensors file's bytes."""
    if len(data) < 8:
        raise ValueError("not a safetensors file: shorter than its header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"not a safetensors file: header length {n} exceeds the file")
    header = json.loads(data[8:8 + n].decode())
    metadata = header.pop("__metadata__", None) or {}
    return header, metadata, 8 + n


def read_raw(data):
    """name -> (dtype name, shape, raw bytes) of a safetensors file's bytes, in file order,
    and the metadata."""
    header, metadata, base = read_header(data)
    out = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        code = entry["dtype"]
        if code not in CODES:
            raise ValueError(f"tensor {name}: unknown safetensors dtype {code}")
        out[name] = (CODES[code], list(entry["shape"]), data[base + start:base + end])
    return out, metadata


def load_safetensors(path):
    """name -> torch tensor (on the host) of a safetensors file; complex tensors marked
    under COMPLEX_MARKER become complex again."""
    import torch

    with open(path, "rb") as f:
        data = f.read()
    raw, metadata = read_raw(data)
    out = {}
    for name, (dtype, shape, blob) in raw.items():
        dt = getattr(torch, dtype)
        if blob:
            t = torch.frombuffer(bytearray(blob), dtype=torch.uint8).view(dt).reshape(shape).clone()
        else:
            t = torch.empty(shape, dtype=dt)
        marker = metadata.get(COMPLEX_MARKER + name)
        if marker:
            t = torch.view_as_complex(t.float() if marker == "complex32" else t)
            if marker == "complex32":
                t = t.to(torch.complex32)
        out[name] = t
    return out
