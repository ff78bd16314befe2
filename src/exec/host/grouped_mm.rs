//! `transformers.grouped_mm_fallback(input, weight, offs)` on the host:
//! transformers' op of that name (its definition and the groups of rows are
//! in [`crate::exec::op::grouped`]), one host `mm` per non-empty group into
//! a zeroed, contiguous `[S, N]` result of the input's dtype.

use super::builtin::{Args, BuiltinOptions};
use super::gemm_ops::{gemm_op, Activation};
use crate::exec::op::grouped::{check_operands, group_rows, grouped_mm_strides};
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

/// `aten._grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None)` on
/// the host, as PyTorch's fallback (`_grouped_mm_fallback`, a `mm` per
/// group) computes it: `self` 2-D and `mat2` 3-D (groups of rows of `self`,
/// ended by the int32 `offs`; rows past the last offset are left as zeros,
/// which PyTorch leaves uninitialised), 3-D and 3-D (a batch, no `offs`),
/// 2-D and 2-D (groups of the inner dimension: a `[G, M, N]` result) or 3-D
/// and 2-D (groups of `mat2`'s columns: an `[M, N]` result). Groups are
/// slices as `at::slice` takes them (`exec::op::grouped`). The result has
/// PyTorch's layout: row-major with rows padded to 16 bytes.
pub(super) fn grouped_mm(a: &Args<'_>, o: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let (x, w) = (a.tensor(0, "self")?, a.tensor(1, "mat2")?);
    let offs = a.opt_tensor(2, "offs")?;
    if a.opt_tensor(3, "bias")?.is_some() {
        return Err(a.err("bias is not supported (as in PyTorch)"));
    }
    if let Some(v) = a.get(4, "out_dtype") {
        if !matches!(v, Value::DType(d) if *d == x.dtype()) {
            return Err(a.err("the output dtype must be `self`'s (as in PyTorch)"));
        }
    }
    if x.dtype() != w.dtype() {
        return Err(a.err(format!(
            "`self` and `mat2` dtypes differ: {} and {}",
            x.dtype(),
            w.dtype()
        )));
    }
    let offsets = match offs {
        Some(t) if t.dtype() != crate::ir::DType::Int32 || t.dim() != 1 => {
            return Err(a.err(format!(
                "offsets must be a 1-D int32 tensor, got {}{:?}",
                t.dtype(),
                t.size()
            )))
        }
        Some(t) => Some(t.to_i64_vec()?),
        None => None,
    };
    let (xs, ws) = (x.size().to_vec(), w.size().to_vec());
    let (xo, wo) = (x.spec().offset, w.spec().offset);
    let (xst, wst) = (x.stride().to_vec(), w.stride().to_vec());
    let inner_mismatch = || a.err(format!("cannot multiply {xs:?} by {ws:?}"));
    // (result shape, each group's (x view, w view, result rows offset, result cols offset, batch)).
    type Part = (Tensor, Tensor, i64, i64, i64);
    let mut parts: Vec<Part> = Vec::new();
    let shape: Vec<i64> = match (xs.len(), ws.len(), &offsets) {
        (2, 3, Some(offs)) => {
            if xs[1] != ws[1] || offs.len() as i64 != ws[0] {
                return Err(inner_mismatch());
            }
            for g in group_rows(offs, xs[0]) {
                let xv = x.view(&[g.to - g.from, xs[1]], &xst, xo + g.from * xst[0])?;
                let wv = w.view(&ws[1..], &wst[1..], wo + g.group as i64 * wst[0])?;
                parts.push((xv, wv, g.from, 0, 0));
            }
            vec![xs[0], ws[2]]
        }
        (3, 3, None) => {
            if xs[0] != ws[0] || xs[2] != ws[1] {
                return Err(inner_mismatch());
            }
            for g in 0..xs[0] {
                let xv = x.view(&xs[1..], &xst[1..], xo + g * xst[0])?;
                let wv = w.view(&ws[1..], &wst[1..], wo + g * wst[0])?;
                parts.push((xv, wv, 0, 0, g));
            }
            vec![xs[0], xs[1], ws[2]]
        }
        (2, 2, Some(offs)) => {
            if xs[1] != ws[0] {
                return Err(inner_mismatch());
            }
            for g in group_rows(offs, xs[1]) {
                let xv = x.view(&[xs[0], g.to - g.from], &xst, xo + g.from * xst[1])?;
                let wv = w.view(&[g.to - g.from, ws[1]], &wst, wo + g.from * wst[0])?;
                parts.push((xv, wv, 0, 0, g.group as i64));
            }
            vec![offs.len() as i64, xs[0], ws[1]]
        }
        (3, 2, Some(offs)) => {
            if xs[2] != ws[0] || offs.len() as i64 != xs[0] {
                return Err(inner_mismatch());
            }
            for g in group_rows(offs, ws[1]) {
                let xv = x.view(&xs[1..], &xst[1..], xo + g.group as i64 * xst[0])?;
                let wv = w.view(&[ws[0], g.to - g.from], &wst, wo + g.from * wst[1])?;
                parts.push((xv, wv, 0, g.from, 0));
            }
            vec![xs[1], ws[1]]
        }
        (r1, r2, offs) => {
            return Err(a.err(format!(
                "takes 2-D or 3-D operands, `offs` exactly when one is 2-D; got ranks {r1} and {r2} {} offs",
                if offs.is_some() { "with" } else { "without" }
            )))
        }
    };
    let elements = a.result_elements(&shape, 8, o.max_alloc_bytes())?;
    let mut out = vec![0.0f64; elements];
    // Sizes of the result, which fit in memory: the logical row-major index
    // of (batch, row, col).
    let (rows, cols) = (shape[shape.len() - 2] as usize, shape[shape.len() - 1] as usize);
    for (xv, wv, row0, col0, batch) in parts {
        let Value::Tensor(p) = gemm_op(a, o, &xv, &wv, None, 0.0, 1.0, Activation::None, false, false)? else {
            return Err(a.err("a group's mm returned no tensor"));
        };
        let (pr, pc) = (p.size()[0] as usize, p.size()[1] as usize);
        let values = p.to_f64_vec()?;
        for r in 0..pr {
            let at = (batch as usize * rows + row0 as usize + r) * cols + col0 as usize;
            let dst = out
                .get_mut(at..at + pc)
                .ok_or_else(|| a.err("a group's rows are outside the result"))?;
            dst.copy_from_slice(&values[r * pc..(r + 1) * pc]);
        }
    }
    let dense = Tensor::from_f64(x.dtype(), &out, &shape)?;
    let strides = grouped_mm_strides(&shape, x.dtype().size_bytes());
    Ok(Value::Tensor(super::layout::with_strides(dense, strides)?))
}
