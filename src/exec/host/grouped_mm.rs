//! `transformers.grouped_mm_fallback(input, weight, offs)` on the host:
//! transformers' op of that name (its definition and the groups of rows are
//! in [`crate::exec::op::grouped`]), one host `mm` per non-empty group into
//! a zeroed, contiguous `[S, N]` result of the input's dtype.

use super::builtin::{Args, BuiltinOptions};
use super::ops::{gemm_op, Activation};
use crate::exec::op::grouped::{check_operands, group_rows};
use crate::exec::{ExecError, Tensor, Value};

pub(super) fn grouped_mm_fallback(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let (input, weight, offs) = (a.tensor(0, "input")?, a.tensor(1, "weight")?, a.tensor(2, "offs")?);
    check_operands(input.spec(), weight.spec(), offs.spec()).map_err(|m| a.err(m))?;
    let (rows, k, n) = (input.size()[0], input.size()[1], weight.size()[2]);
    let elements = a.result_elements(&[rows, n], 8, o.max_alloc_bytes())?;
    let mut out = vec![0.0f64; elements];
    // `n` is a size of a tensor that exists: it fits a usize.
    let row_len = n as usize;
    let (is, ws) = (input.stride(), weight.stride());
    for g in group_rows(&offs.to_i64_vec()?, rows) {
        let x = input.view(&[g.to - g.from, k], is, input.spec().offset + g.from * is[0])?;
        // `g.group` < the expert count, an i64.
        let expert = g.group as i64;
        let w = weight.view(&[k, n], &ws[1..], weight.spec().offset + expert * ws[0])?;
        let Value::Tensor(product) = gemm_op(a, o, &x, &w, None, 0.0, 1.0, Activation::None, false, false)? else {
            return Err(a.err("a group's mm returned no tensor"));
        };
        // Rows `from..to` of the result, `0 <= from < to <= rows`.
        let at = g.from as usize * row_len;
        let values = product.to_f64_vec()?;
        out.get_mut(at..at + values.len())
            .ok_or_else(|| {
                a.err(format!(
                    "group {} (rows {}..{}) is outside the result",
                    g.group, g.from, g.to
                ))
            })?
            .copy_from_slice(&values);
    }
    Ok(Value::Tensor(Tensor::from_f64(input.dtype(), &out, &[rows, n])?))
}
