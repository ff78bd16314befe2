//! Jagged <-> padded dense conversions (`aten._jagged_to_padded_dense_forward`,
//! `aten._padded_dense_to_jagged_forward`) and their backward ops.
//!
//! Terms: `B = offsets.numel() - 1`; row `b` is `values[offsets[b]..offsets[b+1]]`.
//! Offsets may be int32 or int64 and must be non-decreasing from a
//! non-negative start (and end within `values` for jagged inputs); anything
//! else is an error rather than an out-of-bounds read.

use super::tensor::{with_dtype, Element, Tensor};
use crate::exec::ExecError;
use crate::ir::DType;
use rayon::prelude::*;

/// Element count above which the conversions run in parallel.
const PARALLEL_ELEMENTS: usize = 1 << 15;

/// Reads and checks one offsets tensor.
fn read_offsets(op: &str, offsets: &[Tensor], values_len: Option<i64>) -> Result<Vec<i64>, ExecError> {
    let [offsets] = offsets else {
        return Err(ExecError::op(
            op,
            format!(
                "exactly one offsets tensor is supported (one jagged dimension), got {}",
                offsets.len()
            ),
        ));
    };
    if !matches!(offsets.dtype(), DType::Int32 | DType::Int64) || offsets.dim() != 1 {
        return Err(ExecError::op(
            op,
            format!(
                "offsets must be a 1-d int32 or int64 tensor, got {} of shape {:?}",
                offsets.dtype(),
                offsets.size()
            ),
        ));
    }
    let o = offsets.to_i64_vec()?;
    if o.is_empty() {
        return Err(ExecError::op(
            op,
            "offsets must have at least one element (B + 1 entries)",
        ));
    }
    if o[0] < 0 {
        return Err(ExecError::op(op, format!("offsets[0] = {} is negative", o[0])));
    }
    for (b, w) in o.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(ExecError::op(
                op,
                format!("offsets decrease at row {b}: {} > {}", w[0], w[1]),
            ));
        }
    }
    if let (Some(l), Some(last)) = (values_len, o.last()) {
        if *last > l {
            return Err(ExecError::op(
                op,
                format!("offsets end at {last} but values have {l} rows"),
            ));
        }
    }
    Ok(o)
}

/// `inv[j] = b` for the last row `b` with `offsets[b] <= j` (bucketize with
/// `right=True`, minus one): `[0,3,4,9,10]` -> `[0,0,0,1,2,2,2,2,2,3]`.
/// Positions before `offsets[0]` map to -1.
pub(crate) fn inverse_offsets(offsets: &[i64], total: usize) -> Vec<i64> {
    let row_of = |j: i64| offsets.partition_point(|o| *o <= j) as i64 - 1;
    if total >= PARALLEL_ELEMENTS {
        (0..total as i64).into_par_iter().map(row_of).collect()
    } else {
        (0..total as i64).map(row_of).collect()
    }
}

fn inner_size(op: &str, shape: &[i64]) -> Result<usize, ExecError> {
    shape
        .iter()
        .try_fold(1i64, |acc, s| acc.checked_mul(*s))
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| ExecError::op(op, format!("bad trailing shape {shape:?}")))
}

/// `values [L, *rest]` -> `[B, N, *rest]`; row `b` holds its first
/// `min(len_b, N)` values (longer rows are truncated), the rest is `padding`
/// (converted to the dtype: infinities saturate on integer dtypes). The
/// result may take at most `max_alloc_bytes` bytes.
pub(crate) fn jagged_to_padded(
    op: &str,
    values: &Tensor,
    offsets: &[Tensor],
    max_lengths: &[i64],
    padding: f64,
    max_alloc_bytes: u64,
) -> Result<Tensor, ExecError> {
    if values.dim() < 1 {
        return Err(ExecError::op(op, "values must have at least one dimension"));
    }
    let l = values.size()[0];
    let o = read_offsets(op, offsets, Some(l))?;
    let [n] = max_lengths else {
        return Err(ExecError::op(
            op,
            format!("expected one max length, got {}", max_lengths.len()),
        ));
    };
    if *n < 0 {
        return Err(ExecError::op(op, format!("max length {n} is negative")));
    }
    let b = o.len() - 1;
    let rest = &values.size()[1..];
    let d = inner_size(op, rest)?;
    let n = usize::try_from(*n).map_err(|_| ExecError::op(op, format!("max length {n} does not fit")))?;
    let mut shape = vec![b as i64, n as i64];
    shape.extend_from_slice(rest);
    let total = b
        .checked_mul(n)
        .and_then(|x| x.checked_mul(d))
        .filter(|t| i64::try_from(*t).is_ok())
        .ok_or_else(|| {
            ExecError::op(
                op,
                format!("the padded result {shape:?} has more elements than fit in 64 bits"),
            )
        })?;
    with_dtype!(values.dtype(), T => {
        let vals = values.to_vec::<T>()?;
        let pad = T::from_f64(padding);
        let mut out = super::tensor::filled(total, pad, max_alloc_bytes, &|| format!("op `{op}`: the padded result {shape:?}"))?;
        let fill = |(row, chunk): (usize, &mut [T])| {
            let begin = o[row] as usize;
            let len = (o[row + 1] - o[row]) as usize;
            let keep = len.min(n) * d;
            chunk[..keep].copy_from_slice(&vals[begin * d..begin * d + keep]);
        };
        if n * d > 0 {
            if out.len() >= PARALLEL_ELEMENTS {
                out.par_chunks_mut(n * d).enumerate().for_each(fill);
            } else {
                out.chunks_mut(n * d).enumerate().for_each(fill);
            }
        }
        Tensor::from_vec(out, &shape)
    }, Err(ExecError::op(op, format!("dtype {} is not supported", values.dtype()))))
}

/// How `padded_to_jagged` treats rows that do not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// ATen CPU: a row longer than the padded width, a batch larger than the
    /// dense batch, or a `total_L` other than `offsets[-1]` is an error.
    Error,
    /// CUDA / Inductor lowering: such positions produce 0.
    ZeroFill,
}

/// `dense [B, N, *rest]` -> `[total_L, *rest]` with
/// `out[offsets[b] + s] = dense[b, s]` for `s < len_b`.
/// `total_l` defaults to `offsets[-1]`.
pub(crate) fn padded_to_jagged(
    op: &str,
    dense: &Tensor,
    offsets: &[Tensor],
    total_l: Option<i64>,
    overflow: Overflow,
) -> Result<Tensor, ExecError> {
    if dense.dim() < 2 {
        return Err(ExecError::op(
            op,
            format!("dense must have at least 2 dimensions, got shape {:?}", dense.size()),
        ));
    }
    let o = read_offsets(op, offsets, None)?;
    let batch = o.len() - 1;
    let dense_batch = dense.size()[0] as usize;
    let n = dense.size()[1] as usize;
    let last = *o.last().unwrap_or(&0);
    let total = total_l.unwrap_or(last);
    if total < 0 {
        return Err(ExecError::op(op, format!("total_L = {total} is negative")));
    }
    if overflow == Overflow::Error {
        if total != last {
            return Err(ExecError::op(
                op,
                format!("final offset {last} should match total_L value {total}"),
            ));
        }
        if batch > dense_batch {
            return Err(ExecError::op(
                op,
                format!("offsets describe {batch} rows but dense has {dense_batch}"),
            ));
        }
        for (b, w) in o.windows(2).enumerate() {
            if (w[1] - w[0]) as usize > n {
                return Err(ExecError::op(
                    op,
                    format!(
                        "found batch item of length {} (row {b}) when max length is {n}",
                        w[1] - w[0]
                    ),
                ));
            }
        }
    }
    let rest = &dense.size()[2..];
    let d = inner_size(op, rest)?;
    let total = total as usize;
    let mut shape = vec![total as i64];
    shape.extend_from_slice(rest);
    let inv = inverse_offsets(&o, total);
    with_dtype!(dense.dtype(), T => {
        let src = dense.to_vec::<T>()?;
        let zero = T::from_i64(0);
        let mut out = vec![zero; total * d];
        let fill = |(j, chunk): (usize, &mut [T])| {
            let b = inv[j];
            if b < 0 || b as usize >= batch || b as usize >= dense_batch {
                return;
            }
            let b = b as usize;
            if j as i64 >= o[b + 1] {
                return;
            }
            let s = (j as i64 - o[b]) as usize;
            if s >= n {
                return;
            }
            let start = (b * n + s) * d;
            chunk.copy_from_slice(&src[start..start + d]);
        };
        if d > 0 {
            if out.len() >= PARALLEL_ELEMENTS {
                out.par_chunks_mut(d).enumerate().for_each(fill);
            } else {
                out.chunks_mut(d).enumerate().for_each(fill);
            }
        }
        Tensor::from_vec(out, &shape)
    }, Err(ExecError::op(op, format!("dtype {} is not supported", dense.dtype()))))
}

/// `inverse_offsets` as a tensor of the offsets' dtype.
pub(crate) fn inverse_offsets_tensor(op: &str, offsets: &Tensor, total: Option<i64>) -> Result<Tensor, ExecError> {
    let o = read_offsets(op, std::slice::from_ref(offsets), None)?;
    let total = total.unwrap_or(*o.last().unwrap_or(&0));
    let total = usize::try_from(total).map_err(|_| ExecError::op(op, "negative total"))?;
    let inv = inverse_offsets(&o, total);
    Tensor::from_i64(offsets.dtype(), &inv, &[total as i64])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_offsets_matches_the_lowering_example() {
        assert_eq!(
            inverse_offsets(&[0, 3, 4, 9, 10], 10),
            vec![0, 0, 0, 1, 2, 2, 2, 2, 2, 3]
        );
    }

    #[test]
    fn element_type_marker() {
        assert_eq!(<f32 as Element>::DTYPE, DType::Float32);
    }
}
