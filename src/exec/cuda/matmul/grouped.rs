//! `transformers.grouped_mm_fallback(input, weight, offs)` on cuBLAS:
//! transformers' op (its definition and the groups of rows are in
//! [`crate::exec::op::grouped`]) is `torch.mm(input[start:end], weight[i],
//! out=output[start:end])` per group into a zeroed result, so it runs here
//! as those `mm`s do: one cuBLAS GEMM per non-empty group, laid out by
//! `cublasCommonArgs` ([`common`]) on the group's rows of the input, the
//! expert's `[K, N]` matrix and the result's rows. The offsets are read
//! back to the host first (traced reads, as eager's `offs.tolist()`
//! synchronises). Dtypes cuBLAS does not take, and operands PyTorch would
//! copy first, go to the host fallback (`Ok(None)`) before anything runs.
//! `aten._grouped_mm`'s mixture-of-experts form is the same loop.

use super::{common, data_type, submit_gemm, CallArgs, Mat};
use crate::exec::cuda::{CudaBackend, CudaTensor, DeviceResult};
use crate::exec::op::grouped::{check_operands, group_rows, grouped_mm_strides};
use crate::exec::{Backend, ExecError, ExternCall, TensorSpec, Value};
use crate::ir::DType;

/// The `offs` values, read element by element from the device.
fn read_offsets(backend: &mut CudaBackend, a: &CallArgs<'_>, offs: &CudaTensor) -> Result<Vec<i64>, ExecError> {
    let elem = offs.spec.dtype.size_bytes();
    let (len, stride) = (offs.spec.size[0], offs.spec.stride[0]);
    let mut values = Vec::new();
    for i in 0..len {
        let at = i
            .checked_mul(stride)
            .and_then(|e| u64::try_from(e).ok())
            .and_then(|e| e.checked_mul(elem))
            .ok_or_else(|| a.err(format!("offs[{i}] is outside the address space")))?;
        let bytes = backend.read_device(offs.data_ptr() + at, elem as usize)?;
        values.push(match offs.spec.dtype {
            DType::Int32 => i64::from(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            _ => i64::from_le_bytes(bytes),
        });
    }
    Ok(values)
}

/// `base` moved by `elements` elements of `elem` bytes.
fn advanced(a: &CallArgs<'_>, mut m: Mat, elements: i64, elem: u64) -> Result<Mat, ExecError> {
    let bytes = u64::try_from(elements)
        .ok()
        .and_then(|e| e.checked_mul(elem))
        .ok_or_else(|| a.err(format!("an offset of {elements} elements is out of range")))?;
    m.ptr += bytes;
    Ok(m)
}

pub(super) fn grouped_mm_fallback(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
) -> DeviceResult {
    let (input, weight, offs) = (a.tensor(0, "input")?, a.tensor(1, "weight")?, a.tensor(2, "offs")?);
    check_operands(&input.spec, &weight.spec, &offs.spec).map_err(|m| a.err(m))?;
    if data_type(input.spec.dtype).is_none() {
        return Ok(None);
    }
    let shape = [input.spec.size[0], weight.spec.size[2]];
    let spec = TensorSpec::contiguous(input.spec.dtype, backend.device_of(), &shape);
    rows_by_group(backend, call, a, input, weight, offs, spec)
}

/// `aten._grouped_mm(self, mat2, offs, bias=None, out_dtype=None)` with a 2-D
/// `self` and a 3-D `mat2` (the mixture-of-experts form: groups of rows of
/// `self` ended by the int32 `offs`), as PyTorch's fallback path runs it (a
/// `mm` per group, which PyTorch takes off sm_90 / sm_100 or for dtypes
/// other than bf16; there it calls CUTLASS's grouped kernel, whose
/// summation order differs), into PyTorch's layout (rows padded to 16
/// bytes); rows past the last offset are zero (PyTorch leaves them
/// uninitialised). The other forms go to the host fallback.
pub(super) fn grouped_mm(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
) -> DeviceResult {
    let (x, w) = (a.tensor(0, "self")?, a.tensor(1, "mat2")?);
    let (Some(offs), None) = (a.opt_tensor(2, "offs")?, a.opt_tensor(3, "bias")?) else {
        return Ok(None);
    };
    let same_dtype = a
        .get(4, "out_dtype")
        .is_none_or(|v| matches!(v, Value::DType(d) if *d == x.spec.dtype));
    if x.spec.size.len() != 2 || w.spec.size.len() != 3 || offs.spec.dtype != DType::Int32 || !same_dtype {
        return Ok(None);
    }
    check_operands(&x.spec, &w.spec, &offs.spec).map_err(|m| a.err(m))?;
    if data_type(x.spec.dtype).is_none() {
        return Ok(None);
    }
    let shape = [x.spec.size[0], w.spec.size[2]];
    let spec = TensorSpec {
        stride: grouped_mm_strides(&shape, x.spec.dtype.size_bytes()),
        ..TensorSpec::contiguous(x.spec.dtype, backend.device_of(), &shape)
    };
    rows_by_group(backend, call, a, x, w, offs, spec)
}

/// `out = zeros(spec)`, then `out[rows of group g] = input[those rows] @
/// weight[g]` for each group of `offs` (one cuBLAS GEMM each); `Ok(None)`
/// before anything runs when an operand is one PyTorch would copy first.
fn rows_by_group(
    backend: &mut CudaBackend,
    call: &ExternCall<'_, CudaTensor>,
    a: &CallArgs<'_>,
    input: &CudaTensor,
    weight: &CudaTensor,
    offs: &CudaTensor,
    spec: TensorSpec,
) -> DeviceResult {
    let dtype = input.spec.dtype;
    let (rows, k, n) = (input.spec.size[0], input.spec.size[1], weight.spec.size[2]);
    let elem = dtype.size_bytes();
    let groups = group_rows(&read_offsets(backend, a, offs)?, rows);
    let out = backend.allocate(&spec)?;
    let (is, ws, os) = (&input.spec.stride, &weight.spec.stride, &spec.stride);
    let mut plans = Vec::new();
    if k > 0 && n > 0 {
        for g in &groups {
            let count = g.to - g.from;
            let x = Mat {
                rows: count,
                cols: k,
                ..advanced(a, Mat::of(input), g.from.saturating_mul(is[0]), elem)?
            };
            // `g.group` < the expert count, an i64.
            let w = advanced(a, Mat::of(weight), (g.group as i64).saturating_mul(ws[0]), elem)?;
            let c = Mat {
                rows: count,
                ..advanced(a, Mat::of(&out), g.from.saturating_mul(os[0]), elem)?
            };
            match common(&x, &w, &c) {
                Some(cm) => plans.push(cm),
                None => return Ok(None),
            }
        }
    }
    // The storage `allocate` made for `spec`: zeroed whole (padding included).
    let bytes = out.storage.bytes;
    if bytes > 0 {
        backend.zero(out.storage.ptr, bytes)?;
    }
    // Each GEMM writes its own group's rows and reads the input and weights:
    // where the groups are disjoint (ascending offsets; a replay reads the
    // same offsets or diverges), concurrent replay may overlap them.
    let disjoint = groups.windows(2).all(|w| w[0].to <= w[1].from);
    if disjoint {
        backend.independent_operations(true);
    }
    for cm in &plans {
        submit_gemm(backend, call.op, cm, 1, 1.0, 0.0, dtype)?;
    }
    if disjoint {
        backend.independent_operations(false);
    }
    Ok(Some(Value::Tensor(out)))
}
