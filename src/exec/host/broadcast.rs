//! The one broadcasting rule (NumPy's), of shapes and of layouts, for the
//! host's and the CUDA backend's ops; below the op files that use it.

use crate::exec::op;
use crate::exec::ExecError;

/// The broadcast of `shapes` (NumPy's rules), or an error naming them and
/// the first dimension that differs: the one broadcast of shapes, for the
/// host's and the CUDA backend's ops.
pub(crate) fn broadcast_shape<T>(a: &op::Args<'_, T>, shapes: &[&[i64]]) -> Result<Vec<i64>, ExecError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for s in shapes {
        for (i, d) in s.iter().enumerate() {
            let dim = rank - s.len() + i;
            let o = &mut out[dim];
            if *o == 1 {
                *o = *d;
            } else if *d != 1 && *d != *o {
                let names: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
                return Err(a.err(format!(
                    "shapes {} do not broadcast (dimension {dim}: {} vs {d})",
                    names.join(" and "),
                    *o
                )));
            }
        }
    }
    Ok(out)
}

/// The strides of a tensor of `size` and `stride` broadcast to `shape` (0
/// on the dimensions it is broadcast along and on those of size 1), or
/// `None` when it does not broadcast to `shape`: the one broadcast of a
/// layout, for the host's and the CUDA backend's ops.
pub(crate) fn broadcast_strides(size: &[i64], stride: &[i64], shape: &[i64]) -> Option<Vec<i64>> {
    let lead = shape.len().checked_sub(size.len())?;
    let mut out = vec![0i64; shape.len()];
    for (d, (s, st)) in size.iter().zip(stride).enumerate() {
        if *s == shape[lead + d] {
            out[lead + d] = if *s == 1 { 0 } else { *st };
        } else if *s != 1 {
            return None;
        }
    }
    Some(out)
}
