//! `aten.convolution`: the arguments and output size every backend shares,
//! and the host implementation (direct summation in f64, rounded once to
//! the dtype, in the memory format ATen picks: channels-last when the input or
//! the weight is; the reference the CUDA backend's cuDNN path is tested against).

use super::ops::{Args, BuiltinOptions};
use super::{contiguous_strides, ExecError, Tensor, TensorSpec, Value};

/// The non-tensor arguments of a convolution, each spatial list expanded
/// to one entry per spatial dimension (a single entry repeats, as in PyTorch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConvParams {
    pub(crate) stride: Vec<i64>,
    pub(crate) padding: Vec<i64>,
    pub(crate) dilation: Vec<i64>,
    pub(crate) transposed: bool,
    pub(crate) output_padding: Vec<i64>,
    pub(crate) groups: i64,
}

fn spatial_list<T>(a: &Args<'_, T>, i: usize, name: &str, spatial: usize, default: i64) -> Result<Vec<i64>, ExecError> {
    let v = match a.get(i, name) {
        None => vec![default],
        Some(Value::Int(n)) => vec![*n],
        Some(_) => a.ints(i, name)?,
    };
    match v.len() {
        1 => Ok(vec![v[0]; spatial]),
        n if n == spatial => Ok(v),
        n => Err(a.err(format!(
            "`{name}` has {n} entries, the convolution has {spatial} spatial dimensions"
        ))),
    }
}

impl ConvParams {
    /// Reads arguments 3.. of `convolution(input, weight, bias, stride,
    /// padding, dilation, transposed, output_padding, groups)` for a
    /// convolution with `spatial` spatial dimensions.
    pub(crate) fn parse<T>(a: &Args<'_, T>, spatial: usize) -> Result<ConvParams, ExecError> {
        Ok(ConvParams {
            stride: spatial_list(a, 3, "stride", spatial, 1)?,
            padding: spatial_list(a, 4, "padding", spatial, 0)?,
            dilation: spatial_list(a, 5, "dilation", spatial, 1)?,
            transposed: a.boolean(6, "transposed", false)?,
            output_padding: spatial_list(a, 7, "output_padding", spatial, 0)?,
            groups: a.int(8, "groups", Some(1))?,
        })
    }

    /// The output size for input `x` and weight `w` (sizes), checked: ranks
    /// 3 to 5, channels and groups agree, every size is positive and no
    /// arithmetic overflows.
    pub(crate) fn output_size(&self, op: &str, x: &[i64], w: &[i64]) -> Result<Vec<i64>, ExecError> {
        let err = |m: String| ExecError::op(op, m);
        if !(3..=5).contains(&x.len()) || w.len() != x.len() {
            return Err(err(format!(
                "input of rank {} and weight of rank {}: expected both of rank 3, 4 or 5",
                x.len(),
                w.len()
            )));
        }
        if x.iter().chain(w).any(|&n| n < 0) {
            return Err(err(format!("negative size in input {x:?} or weight {w:?}")));
        }
        if self.groups < 1 {
            return Err(err(format!("groups {} < 1", self.groups)));
        }
        if self.stride.iter().chain(&self.dilation).any(|&s| s < 1) {
            return Err(err(format!(
                "stride {:?} and dilation {:?} must be positive",
                self.stride, self.dilation
            )));
        }
        if self.padding.iter().chain(&self.output_padding).any(|&p| p < 0) {
            return Err(err(format!(
                "negative padding {:?} or output_padding {:?}",
                self.padding, self.output_padding
            )));
        }
        let overflow = || err("a size overflows".into());
        let grouped = w[1].checked_mul(self.groups).ok_or_else(overflow)?;
        let (in_channels, out_channels) = if self.transposed {
            (w[0], grouped)
        } else {
            (grouped, w[0])
        };
        if x[1] != in_channels || w[0] % self.groups != 0 {
            return Err(err(format!(
                "input {x:?} and weight {w:?} with groups {} do not match ({in_channels} input channels expected)",
                self.groups
            )));
        }
        let mut out = vec![x[0], out_channels];
        for d in 0..x.len() - 2 {
            let (n, k, s, p, dil, op) = (
                x[d + 2],
                w[d + 2],
                self.stride[d],
                self.padding[d],
                self.dilation[d],
                self.output_padding[d],
            );
            let span = dil.checked_mul(k.max(1) - 1).ok_or_else(overflow)?;
            let two_p = p.checked_mul(2).ok_or_else(overflow)?;
            let o = if self.transposed {
                (n - 1)
                    .checked_mul(s)
                    .and_then(|v| v.checked_sub(two_p))
                    .and_then(|v| v.checked_add(span))
                    .and_then(|v| v.checked_add(op))
                    .and_then(|v| v.checked_add(1))
            } else {
                n.checked_add(two_p)
                    .and_then(|v| v.checked_sub(span))
                    .and_then(|v| v.checked_sub(1))
                    .map(|v| v.div_euclid(s) + 1)
            }
            .ok_or_else(overflow)?;
            if o < 1 || k < 1 {
                return Err(err(format!(
                    "input {x:?}, weight {w:?}: spatial dimension {d} of the output would be {o}"
                )));
            }
            out.push(o);
        }
        Ok(out)
    }
}

/// Most multiply-adds the host convolution does (a runaway size is an error, not a hang).
const MAX_HOST_MACS: u128 = 1 << 34;

/// The host `aten.convolution`.
pub(super) fn convolution(a: &Args<'_>, _: &BuiltinOptions) -> Result<Value<Tensor>, ExecError> {
    let x = a.tensor(0, "input")?;
    let w = a.tensor(1, "weight")?;
    let bias = a.opt_tensor(2, "bias")?;
    let dtype = x.dtype();
    if w.dtype() != dtype || bias.is_some_and(|b| b.dtype() != dtype) || !dtype.is_floating() {
        return Err(a.err(format!(
            "expected floating operands of one dtype, got input {dtype}, weight {}",
            w.dtype()
        )));
    }
    let spatial = x.size().len().saturating_sub(2);
    let p = ConvParams::parse(a, spatial)?;
    let out_size = p.output_size(a.op, x.size(), w.size())?;
    if let Some(b) = bias {
        if b.size() != [out_size[1]] {
            return Err(a.err(format!("bias {:?} for {} output channels", b.size(), out_size[1])));
        }
    }
    let (xs, ws) = (x.size(), w.size());
    let out_numel: u128 = out_size.iter().map(|&n| n as u128).product();
    let kernel: u128 = ws.iter().skip(1).map(|&n| n as u128).product();
    if out_numel.saturating_mul(kernel) > MAX_HOST_MACS {
        return Err(a.err(format!(
            "{out_numel} outputs x {kernel} weights exceed the host convolution's limit of {MAX_HOST_MACS} multiply-adds"
        )));
    }
    let (xv, wv) = (x.to_f64_vec()?, w.to_f64_vec()?);
    let bv = bias.map(|b| b.to_f64_vec()).transpose()?;
    let g = p.groups as usize;
    let (n, cin, cout) = (xs[0] as usize, xs[1] as usize, out_size[1] as usize);
    let (cin_g, cout_g) = (cin / g, cout / g);
    let sp_in: Vec<usize> = xs[2..].iter().map(|&v| v as usize).collect();
    let sp_out: Vec<usize> = out_size[2..].iter().map(|&v| v as usize).collect();
    let sp_k: Vec<usize> = ws[2..].iter().map(|&v| v as usize).collect();
    let count = |v: &[usize]| v.iter().product::<usize>();
    let (in_plane, out_plane, k_plane) = (count(&sp_in), count(&sp_out), count(&sp_k));
    let mut out = vec![0f64; n * cout * out_plane];
    let mut kidx = vec![0usize; spatial];
    let mut oidx = vec![0usize; spatial];
    // Each (output position, kernel tap) pair maps to at most one input
    // position: o*s - p + k*d (forward) or (o + p - k*d) / s when divisible
    // (transposed).
    let input_at = |o: &[usize], k: &[usize]| -> Option<usize> {
        let mut flat = 0usize;
        for d in 0..spatial {
            let (o, k) = (o[d] as i64, k[d] as i64);
            let (s, pad, dil) = (p.stride[d], p.padding[d], p.dilation[d]);
            let i = if p.transposed {
                let t = o + pad - k * dil;
                if t < 0 || t % s != 0 {
                    return None;
                }
                t / s
            } else {
                o * s - pad + k * dil
            };
            if i < 0 || i >= sp_in[d] as i64 {
                return None;
            }
            flat = flat * sp_in[d] + i as usize;
        }
        Some(flat)
    };
    let advance = |idx: &mut [usize], dims: &[usize]| {
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                return;
            }
            idx[d] = 0;
        }
    };
    for b in 0..n {
        for oc in 0..cout {
            let grp = oc / cout_g;
            oidx.iter_mut().for_each(|v| *v = 0);
            for op in 0..out_plane {
                let mut acc = bv.as_ref().map_or(0.0, |bv| bv[oc]);
                for icg in 0..cin_g {
                    let ic = grp * cin_g + icg;
                    // weight [Cout, Cin/g, K] forward; [Cin, Cout/g, K] transposed
                    let wbase = if p.transposed {
                        (ic * cout_g + (oc % cout_g)) * k_plane
                    } else {
                        (oc * cin_g + icg) * k_plane
                    };
                    let xbase = (b * cin + ic) * in_plane;
                    kidx.iter_mut().for_each(|v| *v = 0);
                    for kp in 0..k_plane {
                        if let Some(i) = input_at(&oidx, &kidx) {
                            acc += xv[xbase + i] * wv[wbase + kp];
                        }
                        advance(&mut kidx, &sp_k);
                    }
                }
                out[(b * cout + oc) * out_plane + op] = acc;
                advance(&mut oidx, &sp_out);
            }
        }
    }
    let result = Tensor::from_f64(dtype, &out, &out_size)?;
    // The memory format ATen picks (`suggest_memory_format` of the input or
    // weight): channels-last when either is, else contiguous.
    let channels_last = x.size().len() == out_size.len()
        && (is_channels_last(x.size(), x.stride()) || is_channels_last(w.size(), w.stride()));
    if !channels_last {
        return Ok(Value::Tensor(result));
    }
    let spec = TensorSpec {
        dtype,
        device: x.spec().device,
        size: out_size.clone(),
        stride: format_strides(&out_size, true),
        offset: 0,
    };
    let packed = Tensor::zeros_like_spec(&spec)?;
    packed.copy_from(&result)?;
    Ok(Value::Tensor(packed))
}

/// Channels-last strides of a 4-D/5-D size (`N, C, *spatial` with C innermost).
pub(crate) fn channels_last_strides(size: &[i64]) -> Vec<i64> {
    let r = size.len();
    let mut stride = vec![0i64; r];
    let mut acc = 1i64;
    stride[1] = acc;
    acc = acc.saturating_mul(size[1].max(1));
    for d in (2..r).rev() {
        stride[d] = acc;
        acc = acc.saturating_mul(size[d].max(1));
    }
    stride[0] = acc;
    stride
}

/// Whether `stride` lays out `size` densely as `dense` does (dimensions of
/// size 1 may have any stride).
pub(crate) fn packed_as(size: &[i64], stride: &[i64], dense: &[i64]) -> bool {
    size.iter()
        .zip(stride.iter().zip(dense))
        .all(|(&n, (s, d))| n <= 1 || s == d)
}

/// Whether a 4-D/5-D layout is channels-last (and not also contiguous).
pub(crate) fn is_channels_last(size: &[i64], stride: &[i64]) -> bool {
    matches!(size.len(), 4 | 5)
        && packed_as(size, stride, &channels_last_strides(size))
        && !packed_as(size, stride, &contiguous_strides(size))
}

/// The dense strides of `size` in the chosen format.
pub(crate) fn format_strides(size: &[i64], channels_last: bool) -> Vec<i64> {
    if channels_last {
        channels_last_strides(size)
    } else {
        contiguous_strides(size)
    }
}
