//! `aten.convolution`: the arguments and output size every backend shares,
//! and the host implementation (accumulated in f64 and rounded once to the
//! dtype: the forward convolution as im2col GEMMs, the transposed one by
//! direct summation; in the memory format ATen picks: channels-last when the
//! input or the weight is; the reference the CUDA backend's cuDNN path is
//! tested against).

use super::builtin::{Args, BuiltinOptions};
use super::gemm::Acc;
use crate::exec::op;
use crate::exec::{contiguous_strides, ExecError, Tensor, TensorSpec, Value};

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

fn spatial_list<T>(
    a: &op::Args<'_, T>,
    i: usize,
    name: &str,
    spatial: usize,
    default: i64,
) -> Result<Vec<i64>, ExecError> {
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
    pub(crate) fn parse<T>(a: &op::Args<'_, T>, spatial: usize) -> Result<ConvParams, ExecError> {
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
    // `output_size` refused negative sizes of the input, the weight and the
    // output, and groups below 1: each `as u128` converts a non-negative i64.
    let out_numel: u128 = out_size.iter().map(|&n| n as u128).product();
    let kernel: u128 = ws.iter().skip(1).map(|&n| n as u128).product();
    if out_numel.saturating_mul(kernel) > MAX_HOST_MACS {
        return Err(a.err(format!(
            "{out_numel} outputs x {kernel} weights exceed the host convolution's limit of {MAX_HOST_MACS} multiply-adds"
        )));
    }
    let (xv, wv) = (x.to_f64_vec()?, w.to_f64_vec()?);
    let bv = bias.map(|b| b.to_f64_vec()).transpose()?;
    // Non-negative (above); a size this host's `usize` cannot hold is an error.
    let index = |v: i64| usize::try_from(v).map_err(|_| a.err(format!("size {v} does not fit this host's usize")));
    let indices = |vs: &[i64]| vs.iter().map(|&v| index(v)).collect::<Result<Vec<usize>, ExecError>>();
    let g = index(p.groups)?;
    let (n, cin, cout) = (index(xs[0])?, index(xs[1])?, index(out_size[1])?);
    let shape = Shape {
        n,
        groups: g,
        cin,
        cout,
        cin_g: cin / g,
        cout_g: cout / g,
        sp_in: indices(&xs[2..])?,
        sp_out: indices(&out_size[2..])?,
        sp_k: indices(&ws[2..])?,
    };
    // The memory format ATen picks (`suggest_memory_format` of the input or
    // weight): channels-last when either is, else contiguous.
    let channels_last = x.size().len() == out_size.len()
        && (is_channels_last(x.size(), x.stride()) || is_channels_last(w.size(), w.stride()));
    if !p.transposed {
        let out = im2col_gemm(&p, &shape, &xv, &wv, bv.as_deref(), channels_last);
        if !channels_last {
            return Ok(Value::Tensor(Tensor::from_f64(dtype, &out, &out_size)?));
        }
        // Written channels innermost: `[N, *spatial, C]`, viewed as `[N, C, *spatial]`.
        let mut packed_size = vec![out_size[0]];
        packed_size.extend_from_slice(&out_size[2..]);
        packed_size.push(out_size[1]);
        let packed = Tensor::from_f64(dtype, &out, &packed_size)?;
        return Ok(Value::Tensor(packed.view(
            &out_size,
            &channels_last_strides(&out_size),
            0,
        )?));
    }
    let result = Tensor::from_f64(dtype, &direct(&p, &shape, &xv, &wv, bv.as_deref()), &out_size)?;
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

/// The sizes of one convolution, as element counts.
struct Shape {
    n: usize,
    groups: usize,
    cin: usize,
    cout: usize,
    /// Input and output channels per group.
    cin_g: usize,
    cout_g: usize,
    /// Spatial sizes of the input, output and kernel.
    sp_in: Vec<usize>,
    sp_out: Vec<usize>,
    sp_k: Vec<usize>,
}

impl Shape {
    fn planes(&self) -> (usize, usize, usize) {
        let count = |v: &[usize]| v.iter().product::<usize>();
        (count(&self.sp_in), count(&self.sp_out), count(&self.sp_k))
    }
}

/// Steps a row-major multi-index `idx` within `dims` to the next position.
fn advance(idx: &mut [usize], dims: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < dims[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// The flat input position that output position `o` reads through kernel
/// tap `k`, if inside the input: `o*s - p + k*d` (forward) or `(o + p -
/// k*d) / s` when divisible (transposed); [`direct`]'s.
fn input_at(p: &ConvParams, sp_in: &[usize], o: &[usize], k: &[usize]) -> Option<usize> {
    let mut flat = 0usize;
    for d in 0..sp_in.len() {
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
}

/// Direct summation (the transposed convolution): each output is its bias
/// plus the sum over its input channels and kernel taps, in f64.
fn direct(p: &ConvParams, s: &Shape, xv: &[f64], wv: &[f64], bv: Option<&[f64]>) -> Vec<f64> {
    let (in_plane, out_plane, k_plane) = s.planes();
    let spatial = s.sp_in.len();
    let mut out = vec![0f64; s.n * s.cout * out_plane];
    let mut kidx = vec![0usize; spatial];
    let mut oidx = vec![0usize; spatial];
    for b in 0..s.n {
        for oc in 0..s.cout {
            let grp = oc / s.cout_g;
            oidx.iter_mut().for_each(|v| *v = 0);
            for op in 0..out_plane {
                let mut acc = bv.map_or(0.0, |bv| bv[oc]);
                for icg in 0..s.cin_g {
                    let ic = grp * s.cin_g + icg;
                    // weight [Cout, Cin/g, K] forward; [Cin, Cout/g, K] transposed
                    let wbase = if p.transposed {
                        (ic * s.cout_g + (oc % s.cout_g)) * k_plane
                    } else {
                        (oc * s.cin_g + icg) * k_plane
                    };
                    let xbase = (b * s.cin + ic) * in_plane;
                    kidx.iter_mut().for_each(|v| *v = 0);
                    for kp in 0..k_plane {
                        if let Some(i) = input_at(p, &s.sp_in, &oidx, &kidx) {
                            acc += xv[xbase + i] * wv[wbase + kp];
                        }
                        advance(&mut kidx, &s.sp_k);
                    }
                }
                out[(b * s.cout + oc) * out_plane + op] = acc;
                advance(&mut oidx, &s.sp_out);
            }
        }
    }
    out
}

/// Per spatial dimension `d`, the input index that output index `o` reads
/// through kernel tap `k` (`o*stride - padding + k*dilation`), at
/// `[k * out_d + o]`; -1 where that falls in the padding.
fn forward_taps(p: &ConvParams, s: &Shape) -> Vec<Vec<i64>> {
    (0..s.sp_in.len())
        .map(|d| {
            // Sizes that came from non-negative i64s (`convolution`): back without loss.
            let (out_d, in_d) = (s.sp_out[d], s.sp_in[d] as i64);
            let mut table = Vec::with_capacity(s.sp_k[d] * out_d);
            for k in 0..s.sp_k[d] as i64 {
                for o in 0..out_d as i64 {
                    let i = o * p.stride[d] - p.padding[d] + k * p.dilation[d];
                    table.push(if (0..in_d).contains(&i) { i } else { -1 });
                }
            }
            table
        })
        .collect()
}

/// Most elements of one im2col tile (8 MiB of f64): the output positions
/// of a group are taken in tiles of at most this many column elements.
const COL_TILE_ELEMENTS: usize = 1 << 20;

/// Least multiply-adds of one image worth running the batch's images on
/// several threads.
const PARALLEL_MACS: usize = 1 << 20;

/// The forward convolution as GEMMs (im2col): per image and group, the
/// weights `[Cout/g, Cin/g * K]` times the columns `[Cin/g * K, positions]`
/// gathered from the input (zeros where a tap falls in the padding),
/// accumulated in f64 by `matrixmultiply`'s blocked GEMM, plus the bias.
/// The result is `[N, Cout, *spatial]`, or `[N, *spatial, Cout]` when
/// `channels_last`. Images run on rayon's threads when each is large enough.
fn im2col_gemm(p: &ConvParams, s: &Shape, xv: &[f64], wv: &[f64], bv: Option<&[f64]>, channels_last: bool) -> Vec<f64> {
    let (in_plane, out_plane, k_plane) = s.planes();
    let image_out = s.cout * out_plane;
    let mut out = vec![0f64; s.n * image_out];
    if image_out == 0 {
        return out;
    }
    let rows = s.cin_g * k_plane;
    let tile = (COL_TILE_ELEMENTS / rows.max(1)).clamp(1, out_plane.max(1));
    let taps = forward_taps(p, s);
    let spatial = s.sp_in.len();
    let image = |b: usize, out: &mut [f64]| {
        let mut offsets = vec![usize::MAX; k_plane * tile];
        let mut col = vec![0f64; rows * tile];
        let mut product = vec![0f64; s.cout_g * tile];
        let (mut oidx, mut kidx) = (vec![0usize; spatial], vec![0usize; spatial]);
        let mut t0 = 0;
        while t0 < out_plane {
            let width = tile.min(out_plane - t0);
            // Where each (tap, position) of this tile reads the input plane.
            kidx.iter_mut().for_each(|v| *v = 0);
            for kp in 0..k_plane {
                let mut rest = t0;
                for d in (0..spatial).rev() {
                    oidx[d] = rest % s.sp_out[d];
                    rest /= s.sp_out[d];
                }
                for j in 0..width {
                    let mut flat = 0usize;
                    let mut inside = true;
                    for d in 0..spatial {
                        let i = taps[d][kidx[d] * s.sp_out[d] + oidx[d]];
                        if i < 0 {
                            inside = false;
                            break;
                        }
                        flat = flat * s.sp_in[d] + i as usize;
                    }
                    offsets[kp * tile + j] = if inside { flat } else { usize::MAX };
                    advance(&mut oidx, &s.sp_out);
                }
                advance(&mut kidx, &s.sp_k);
            }
            for grp in 0..s.groups {
                for icg in 0..s.cin_g {
                    let plane = &xv[(b * s.cin + grp * s.cin_g + icg) * in_plane..][..in_plane];
                    for kp in 0..k_plane {
                        let row = &mut col[(icg * k_plane + kp) * width..][..width];
                        let offs = &offsets[kp * tile..][..width];
                        for (c, &o) in row.iter_mut().zip(offs) {
                            *c = if o == usize::MAX { 0.0 } else { plane[o] };
                        }
                    }
                }
                let weights = &wv[grp * s.cout_g * rows..][..s.cout_g * rows];
                let product = &mut product[..s.cout_g * width];
                if rows == 0 {
                    product.fill(0.0);
                } else {
                    <f64 as Acc>::gemm(s.cout_g, rows, width, weights, &col[..rows * width], product);
                }
                for ocg in 0..s.cout_g {
                    let oc = grp * s.cout_g + ocg;
                    let bias = bv.map_or(0.0, |bv| bv[oc]);
                    let values = &product[ocg * width..][..width];
                    if channels_last {
                        for (j, v) in values.iter().enumerate() {
                            out[(t0 + j) * s.cout + oc] = v + bias;
                        }
                    } else {
                        for (d, v) in out[oc * out_plane + t0..][..width].iter_mut().zip(values) {
                            *d = v + bias;
                        }
                    }
                }
            }
            t0 += width;
        }
    };
    let image_macs = image_out.saturating_mul(rows);
    if s.n > 1 && image_macs >= PARALLEL_MACS {
        use rayon::prelude::*;
        out.par_chunks_mut(image_out).enumerate().for_each(|(b, o)| image(b, o));
    } else {
        out.chunks_mut(image_out).enumerate().for_each(|(b, o)| image(b, o));
    }
    out
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
