//! The host GEMMs' accumulation types ([`Acc`]: `matrixmultiply`'s
//! blocked GEMMs in f32 or f64) and a row-major product over them, shared
//! by the GEMM family (`ops.rs`) and the convolution (`conv.rs`).

/// Accumulation types of the host GEMMs: `f32` for f32, f16 and bf16
/// operands (PyTorch's CPU kernels multiply f32 in f32 and convert f16 / bf16
/// operands to f32, accumulate there and round the result once), `f64` for
/// the others.
pub(super) trait Acc:
    Copy + Send + Sync + PartialOrd + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    const ZERO: Self;
    fn of(v: f64) -> Self;
    fn get(self) -> f64;
    fn tanh(self) -> Self;
    fn is_nan(self) -> bool;
    /// `c = a @ b` for row-major `a: [m, k]`, `b: [k, n]`, `c: [m, n]`
    /// (lengths checked by the caller).
    fn gemm(m: usize, k: usize, n: usize, a: &[Self], b: &[Self], c: &mut [Self]);
}

/// Row strides of a row-major `[rows, cols]` matrix for `matrixmultiply`
/// (`cols` fits: the matrix exists in memory).
fn row_stride(cols: usize) -> isize {
    isize::try_from(cols).unwrap_or(isize::MAX)
}

/// Whether row-major `a` (`m x k`), `b` (`k x n`) and `c` (`m x n`) hold
/// their elements: the one guard of both `gemm`s' raw-pointer calls, with
/// checked products (a wrapped product would pass a short slice).
fn gemm_fits<T>(m: usize, k: usize, n: usize, a: &[T], b: &[T], c: &[T]) -> bool {
    let holds = |len: usize, r: usize, s: usize| r.checked_mul(s).is_some_and(|need| len >= need);
    holds(a.len(), m, k) && holds(b.len(), k, n) && holds(c.len(), m, n)
}

/// `Acc` for a float type, whose GEMM is `matrixmultiply`'s `$gemm`.
macro_rules! impl_acc {
    ($t:ty, $gemm:path) => {
        // For `f64` the conversions are the identity.
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        impl Acc for $t {
            const ZERO: Self = 0.0;
            fn of(v: f64) -> Self {
                v as $t
            }
            fn get(self) -> f64 {
                f64::from(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn gemm(m: usize, k: usize, n: usize, a: &[$t], b: &[$t], c: &mut [$t]) {
                if !gemm_fits(m, k, n, a, b, c) {
                    return;
                }
                // SAFETY: `a`, `b` and `c` hold at least `m*k`, `k*n` and
                // `m*n` elements (`gemm_fits`), row-major with the unit
                // column strides and row strides given, and `c` does not
                // overlap them (it is `&mut`).
                unsafe {
                    $gemm(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        row_stride(k),
                        1,
                        b.as_ptr(),
                        row_stride(n),
                        1,
                        0.0,
                        c.as_mut_ptr(),
                        row_stride(n),
                        1,
                    )
                }
            }
        }
    };
}

impl_acc!(f32, matrixmultiply::sgemm);
impl_acc!(f64, matrixmultiply::dgemm);

/// `[m, k] @ [k, n]` on row-major data, accumulated in `F` (the `matrixmultiply` crate's
/// blocked, vectorised GEMM).
pub(super) fn matmul<F: Acc>(a: &[F], b: &[F], m: usize, k: usize, n: usize) -> Vec<F> {
    // `gemm_op` checked that `m * n` (and the batch's result) fits and was allocatable.
    let mut out = vec![F::ZERO; m * n];
    if m > 0 && n > 0 {
        F::gemm(m, k, n, a, b, &mut out);
    }
    out
}
