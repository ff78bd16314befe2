//! The layouts PyTorch gives the tensors its ops allocate, for the host's
//! extern ops (and the CUDA backend's, which share their result layouts):
//! an extern op's output layout is part of its contract, since Inductor
//! asserts it and indexes the buffer with it (`tests/op_layouts.rs` checks
//! the host's against PyTorch's).
//!
//! * [`infer_dense_strides`]: ATen's `infer_dense_strides`, what
//!   `empty_like` (and `clone`, `sort`, flash attention's output) give;
//! * [`iterator_strides`]: a `TensorIterator` op's output (pointwise ops):
//!   dense in the order its operands' strides agree on.

use super::{ExecError, Tensor, TensorSpec};

/// Dense strides for `size` with its dimensions ordered by `should_swap`
/// (ATen's insertion sort, which tolerates ambiguous comparisons): the
/// innermost dimension first, starting from the reversed order.
fn dense_in_order(size: &[i64], should_swap: impl Fn(usize, usize) -> i32) -> Vec<i64> {
    let n = size.len();
    let mut perm: Vec<usize> = (0..n).rev().collect();
    for i in 1..n {
        let mut d1 = i;
        for d0 in (0..i).rev() {
            match should_swap(perm[d0], perm[d1]) {
                c if c > 0 => {
                    perm.swap(d0, d1);
                    d1 = d0;
                }
                c if c < 0 => break,
                _ => {}
            }
        }
    }
    let mut out = vec![0i64; n];
    let mut cur = 1i64;
    for &d in &perm {
        out[d] = cur;
        if size[d] > 1 {
            cur = cur.saturating_mul(size[d]);
        }
    }
    out
}

/// One operand's say on whether dimension `d0` goes outside `d1`: `Some(1)`
/// swap, `Some(-1)` keep, `None` no opinion (a stride 0, or equal strides
/// and sizes that do not decide).
fn operand_order(size: &[i64], stride: &[i64], d0: usize, d1: usize) -> Option<i32> {
    let (s0, s1) = (stride[d0], stride[d1]);
    if s0 == 0 || s1 == 0 {
        None
    } else if s0 < s1 {
        Some(-1)
    } else if s0 > s1 || size[d0] > size[d1] {
        // Equal strides: the larger dimension goes outward.
        Some(1)
    } else {
        None
    }
}

/// Dense strides for `size` that keep the order of `stride` (ATen's
/// `infer_dense_strides`, which `empty_like` uses for a tensor that is not
/// non-overlapping and dense; for one that is, it gives its strides).
pub(crate) fn infer_dense_strides(size: &[i64], stride: &[i64]) -> Vec<i64> {
    dense_in_order(size, |d0, d1| operand_order(size, stride, d0, d1).unwrap_or(0))
}

/// The output strides of a `TensorIterator` op of result sizes `shape` over
/// operands of the given sizes and strides (each broadcastable to `shape`):
/// ATen's `reorder_dimensions` asks the operands in order, the first with
/// an opinion deciding, a broadcast dimension (stride 0 there) having none;
/// the output is dense in that order. Operands that agree in a dense layout
/// thus give it to the output (a transposed input, a transposed output),
/// and contiguous ones a contiguous output.
pub(crate) fn iterator_strides(shape: &[i64], operands: &[(&[i64], &[i64])]) -> Vec<i64> {
    // Each operand's strides in `shape`'s dimensions: 0 where it is
    // broadcast (a missing or size-1 dimension of a larger one).
    let strides: Vec<Vec<i64>> = operands
        .iter()
        .map(|(size, stride)| {
            let lead = shape.len().saturating_sub(size.len());
            (0..shape.len())
                .map(|d| match d.checked_sub(lead) {
                    Some(k) if !(size[k] == 1 && shape[d] != 1) => stride[k],
                    _ => 0,
                })
                .collect()
        })
        .collect();
    dense_in_order(shape, |d0, d1| {
        strides
            .iter()
            .find_map(|s| operand_order(shape, s, d0, d1))
            .unwrap_or(0)
    })
}

/// `t` laid out with `stride` (a copy when its strides differ).
pub(crate) fn with_strides(t: Tensor, stride: Vec<i64>) -> Result<Tensor, ExecError> {
    if t.stride() == stride.as_slice() {
        return Ok(t);
    }
    let placed = Tensor::zeros_like_spec(&TensorSpec {
        stride,
        offset: 0,
        ..t.spec().clone()
    })?;
    placed.copy_from(&t)?;
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_orders_follow_the_operands() {
        // A dense layout is kept, a transposed one too; a gap is closed.
        assert_eq!(infer_dense_strides(&[4, 5], &[5, 1]), [5, 1]);
        assert_eq!(infer_dense_strides(&[4, 5], &[1, 4]), [1, 4]);
        assert_eq!(infer_dense_strides(&[4, 5], &[1, 8]), [1, 4]);
        // A sequence-first query seen as [B, H, L, E] (B = 1): the size-1 batch dimension
        // ties with L and goes inside it.
        assert_eq!(infer_dense_strides(&[1, 4, 5, 16], &[64, 16, 64, 1]), [64, 16, 64, 1]);
        // The first operand with an opinion decides; a broadcast one has none.
        let t: (&[i64], &[i64]) = (&[4, 5], &[1, 4]);
        let c: (&[i64], &[i64]) = (&[4, 5], &[5, 1]);
        let row: (&[i64], &[i64]) = (&[5], &[1]);
        assert_eq!(iterator_strides(&[4, 5], &[t, c]), [1, 4]);
        assert_eq!(iterator_strides(&[4, 5], &[c, t]), [5, 1]);
        assert_eq!(iterator_strides(&[4, 5], &[row, t]), [1, 4]);
        assert_eq!(iterator_strides(&[4, 5], &[c, row]), [5, 1]);
    }
}
