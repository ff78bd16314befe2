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

use super::{common, data_type, submit_gemm, CallArgs, Mat};
use crate::exec::cuda::{CudaBackend, CudaTensor, DeviceResult};
use crate::exec::op::grouped::{check_operands, group_rows};
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
    let dtype = input.spec.dtype;
    if data_type(dtype).is_none() {
        return Ok(None);
    }
    let (rows, k, n) = (input.spec.size[0], input.spec.size[1], weight.spec.size[2]);
    let elem = dtype.size_bytes();
    let groups = group_rows(&read_offsets(backend, a, offs)?, rows);
    let spec = TensorSpec::contiguous(dtype, backend.device_of(), &[rows, n]);
    let out = backend.allocate(&spec)?;
    let (is, ws) = (&input.spec.stride, &weight.spec.stride);
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
            let w = Mat {
                rows: k,
                cols: n,
                rs: ws[1],
                cs: ws[2],
                ..advanced(a, Mat::of(weight), (g.group as i64).saturating_mul(ws[0]), elem)?
            };
            let c = Mat {
                rows: count,
                ..advanced(a, Mat::of(&out), g.from.saturating_mul(n), elem)?
            };
            match common(&x, &w, &c) {
                Some(cm) => plans.push(cm),
                None => return Ok(None),
            }
        }
    }
    // `out` was allocated with this many bytes.
    let bytes = usize::try_from(spec.numel().max(0)).unwrap_or(0) * elem as usize;
    if bytes > 0 {
        backend.zero(out.data_ptr(), bytes)?;
    }
    for cm in &plans {
        submit_gemm(backend, call.op, cm, 1, 1.0, 0.0, dtype)?;
    }
    Ok(Some(Value::Tensor(out)))
}
