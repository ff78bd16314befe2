//! The groups of rows of `transformers::grouped_mm_fallback` and
//! `aten._grouped_mm`, shared by every backend: which rows of the input (and
//! of the result) each group's `mm` covers, and the layout of
//! `_grouped_mm`'s result. ATen's fallback slices `offs[g - 1]..offs[g]`
//! (`at::slice`: the same bounds as the Python slices below).
//!
//! Transformers' op (`transformers/integrations/moe.py`,
//! `_grouped_mm_fallback`) is, in eager Python:
//!
//! ```text
//! output = torch.zeros(input.size(0), weight.size(2), dtype=input.dtype)
//! start = 0
//! for i, end in enumerate(offs.tolist()):
//!     if start == end:
//!         continue
//!     torch.mm(input[start:end], weight[i], out=output[start:end])
//!     start = end
//! ```
//!
//! so group `i` covers the Python slice `[start:end]` of the rows: bounds
//! below zero count from the end, both are clamped to `[0, rows]`, and an
//! end before its start is an empty slice (whose `mm` writes nothing, but
//! still moves `start`). Rows past the last offset stay zero.

/// One group's `mm`: expert `group` over rows `[from, to)` (`from <= to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GroupRows {
    pub(crate) group: usize,
    pub(crate) from: i64,
    pub(crate) to: i64,
}

/// A Python slice bound over `rows` rows: negative from the end, clamped.
fn slice_bound(v: i64, rows: i64) -> i64 {
    let v = if v < 0 { v.saturating_add(rows) } else { v };
    v.clamp(0, rows)
}

/// The non-empty `mm`s of `offs` (the cumulative row counts, one per
/// expert) over an input of `rows` rows, in call order.
pub(crate) fn group_rows(offs: &[i64], rows: i64) -> Vec<GroupRows> {
    let mut start = 0i64;
    let mut out = Vec::new();
    for (group, &end) in offs.iter().enumerate() {
        if start == end {
            continue;
        }
        let (from, to) = (slice_bound(start, rows), slice_bound(end, rows));
        if from < to {
            out.push(GroupRows { group, from, to });
        }
        start = end;
    }
    out
}

/// The checks of transformers' fake (meta) function, which the compiled
/// program passed: `input` `[S, K]`, `weight` `[E, K, N]`, `offs` `[E]` of
/// int32 or int64, and one dtype for `input` and `weight` (`torch.mm`'s).
pub(crate) fn check_operands(
    input: &crate::exec::TensorSpec,
    weight: &crate::exec::TensorSpec,
    offs: &crate::exec::TensorSpec,
) -> Result<(), String> {
    use crate::ir::DType;
    let (i, w, o) = (&input.size, &weight.size, &offs.size);
    if i.len() != 2 {
        return Err(format!("input must be 2-D (S, input_dim), got shape {i:?}"));
    }
    if w.len() != 3 {
        return Err(format!(
            "weight must be 3-D (num_experts, input_dim, output_dim), got shape {w:?}"
        ));
    }
    if o.len() != 1 {
        return Err(format!("offs must be 1-D (num_experts,), got shape {o:?}"));
    }
    if o[0] != w[0] {
        return Err(format!(
            "offs length {} must match the number of experts {}",
            o[0], w[0]
        ));
    }
    if i[1] != w[1] {
        return Err(format!("input_dim mismatch: input has {}, weight has {}", i[1], w[1]));
    }
    if !matches!(offs.dtype, DType::Int32 | DType::Int64) {
        return Err(format!(
            "offs must be an integer tensor (int32 or int64), got {}",
            offs.dtype
        ));
    }
    if input.dtype != weight.dtype {
        return Err(format!(
            "input and weight dtypes differ: {} and {}",
            input.dtype, weight.dtype
        ));
    }
    Ok(())
}

/// The strides PyTorch gives a grouped GEMM's result of `shape`
/// (`create_grouped_gemm_output_tensor`): row-major, the last dimension's
/// row length rounded up to 16 bytes.
pub(crate) fn grouped_mm_strides(shape: &[i64], element_bytes: u64) -> Vec<i64> {
    let align = i64::try_from((16 / element_bytes.max(1)).max(1)).unwrap_or(1);
    let mut strides = vec![1i64; shape.len()];
    let mut step = 1i64;
    for d in (0..shape.len()).rev() {
        strides[d] = step;
        let len = if d + 1 == shape.len() {
            shape[d].saturating_add(align - 1) / align * align
        } else {
            shape[d]
        };
        step = step.saturating_mul(len.max(1));
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(offs: &[i64], rows: i64) -> Vec<(usize, i64, i64)> {
        group_rows(offs, rows).iter().map(|g| (g.group, g.from, g.to)).collect()
    }

    #[test]
    fn grouped_results_pad_their_rows_to_16_bytes() {
        // torch._grouped_mm of bf16 [10, 16] by [3, 16, 20] (transposed): strides (24, 1);
        // a batch [3, 5, 20]: (120, 24, 1).
        assert_eq!(grouped_mm_strides(&[10, 20], 2), [24, 1]);
        assert_eq!(grouped_mm_strides(&[3, 5, 20], 2), [120, 24, 1]);
        assert_eq!(grouped_mm_strides(&[10, 24], 2), [24, 1]);
        assert_eq!(grouped_mm_strides(&[4, 6], 4), [8, 1]);
    }

    #[test]
    fn groups_are_python_slices_of_the_cumulative_counts() {
        // Experts 1 and 3 empty; rows past the last offset (8..10) untouched.
        assert_eq!(spans(&[3, 3, 8, 8], 10), [(0, 0, 3), (2, 3, 8)]);
        // An end past the rows is clamped; a decreasing end is an empty
        // slice that still moves the start back.
        assert_eq!(spans(&[4, 12, 2, 5], 6), [(0, 0, 4), (1, 4, 6), (3, 2, 5)]);
        // Negative bounds count from the end, as Python's slices do.
        assert_eq!(spans(&[-2, 6], 6), [(0, 0, 4), (1, 4, 6)]);
    }
}
