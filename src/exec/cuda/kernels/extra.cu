// Built-in kernels of wrapir's CUDA backend for complex pointwise ops,
// segment_reduce and randint (Inductor's seed buffer), compiled with NVRTC
// as their own module. Conventions as in builtin.cu: a tensor is a data
// pointer (its element 0) and an `Nd` descriptor (sizes and strides in
// elements); linear indices run in row-major order.

// `i64`, `u64`, `Nd`, `nd_offset`, `grid_index`, `grid_step`, the half
// types: prelude.cuh, prepended.

// ---------------------------------------------------------------- half types
// `f16`, `bf16` and their conversions: prelude.cuh.

// Values as double and back, rounding to the type (an f32 / f16 / bf16 sum
// computed in double and rounded equals the type's own sum).
template <typename T> struct Num;
template <> struct Num<float> {
    static __device__ double get(float v) { return v; }
    static __device__ float put(double v) { return (float)v; }
};
template <> struct Num<double> {
    static __device__ double get(double v) { return v; }
    static __device__ double put(double v) { return v; }
};
template <> struct Num<f16> {
    static __device__ double get(f16 v) { return f16_to_float(v.bits); }
    static __device__ f16 put(double v) { f16 r; r.bits = float_to_f16((float)v); return r; }
};
template <> struct Num<bf16> {
    static __device__ double get(bf16 v) { return bf16_to_float(v.bits); }
    static __device__ bf16 put(double v) { bf16 r; r.bits = float_to_bf16((float)v); return r; }
};
__device__ __forceinline__ double round_to(float*, double v) { return (double)(float)v; }
__device__ __forceinline__ double round_to(double*, double v) { return v; }
__device__ __forceinline__ double round_to(f16*, double v) { return f16_to_float(float_to_f16((float)v)); }
__device__ __forceinline__ double round_to(bf16*, double v) { return bf16_to_float(float_to_bf16((float)v)); }

// ------------------------------------------------------------ complex ops
// out = x OP y over the broadcast shape of `od` (contiguous complex output),
// P the part type. A complex operand's descriptor counts complex elements
// (its parts are at 2 * offset and 2 * offset + 1); a real operand
// (`x_complex` / `y_complex` 0) has imaginary part 0. OP: 0 add, 1 sub
// (y scaled by alpha), 2 mul, 3 div; written as c10::complex computes them.
#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
template <typename P>
__device__ void complex_binary(P* out, Nd od, const P* x, Nd xd, int x_complex, const P* y, Nd yd, int y_complex,
                               int op, double alpha, i64 n) {
    for (i64 i = grid_index(); i < n; i += grid_step()) {
        i64 xo = nd_offset(xd, i), yo = nd_offset(yd, i);
        P a = x_complex ? x[2 * xo] : x[xo];
        P b = x_complex ? x[2 * xo + 1] : (P)0;
        P c = y_complex ? y[2 * yo] : y[yo];
        P d = y_complex ? y[2 * yo + 1] : (P)0;
        P re, im;
        if (op == OP_ADD || op == OP_SUB) {
            P s = (P)alpha;
            if (op == OP_SUB) s = -s;
            re = a + s * c;
            im = b + s * d;
        } else if (op == OP_MUL) {
            re = a * c - b * d;
            im = a * d + b * c;
        } else {
            // Smith's algorithm, as c10::complex's operator/=.
            P abs_c = c < (P)0 ? -c : c;
            P abs_d = d < (P)0 ? -d : d;
            if (abs_c >= abs_d) {
                if (abs_c == (P)0 && abs_d == (P)0) {
                    re = a / abs_c;
                    im = b / abs_c;
                } else {
                    P rat = d / c;
                    P scl = (P)1.0 / (c + d * rat);
                    re = (a + b * rat) * scl;
                    im = (b - a * rat) * scl;
                }
            } else {
                P rat = c / d;
                P scl = (P)1.0 / (d + c * rat);
                re = (a * rat + b) * scl;
                im = (b * rat - a) * scl;
            }
        }
        i64 o = nd_offset(od, i);
        out[2 * o] = re;
        out[2 * o + 1] = im;
    }
}
extern "C" __global__ void complex_binary_c64(float* out, Nd od, const float* x, Nd xd, int xc, const float* y, Nd yd,
                                              int yc, int op, double alpha, i64 n) {
    complex_binary<float>(out, od, x, xd, xc, y, yd, yc, op, alpha, n);
}
extern "C" __global__ void complex_binary_c128(double* out, Nd od, const double* x, Nd xd, int xc, const double* y,
                                               Nd yd, int yc, int op, double alpha, i64 n) {
    complex_binary<double>(out, od, x, xd, xc, y, yd, yc, op, alpha, n);
}

// --------------------------------------------------------- segment_reduce
// One thread per output element (o, s, i) of the contiguous [outer, count,
// inner] result; data contiguous [outer, len, inner]; `segs` the contiguous
// lengths ([outer, count]) or offsets ([outer, count + 1]). The accumulator
// is T (every step rounds to it), as ATen's kernels compute. A segment
// outside the axis, a negative length, or (lengths, !unsafe) a row whose
// lengths do not sum to `len` sets *error to 1 and writes nothing there.
#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_MIN 3
#define RED_PROD 4
template <typename T, typename I>
__device__ void segment_reduce(const T* data, i64 outer, i64 len, i64 inner, const I* segs, int is_offsets,
                               i64 count, int check_sum, int red, int has_initial, double initial, T* out,
                               int* error) {
    i64 total = outer * count * inner;
    for (i64 e = grid_index(); e < total; e += grid_step()) {
        i64 i = e % inner;
        i64 s = (e / inner) % count;
        i64 o = e / (inner * count);
        i64 start, end;
        if (is_offsets) {
            const I* row = segs + o * (count + 1);
            start = (i64)row[s];
            end = (i64)row[s + 1];
        } else {
            const I* row = segs + o * count;
            start = 0;
            bool negative = false;
            for (i64 k = 0; k < s; ++k) {
                negative |= row[k] < 0;
                start += (i64)row[k];
            }
            end = start + (i64)row[s];
            negative |= row[s] < 0;
            if (negative && check_sum) {
                *error = 1;
                continue;
            }
            if (check_sum && s == count - 1 && i == 0) {
                if (end != len) *error = 1;
            }
        }
        if (start < 0 || end > len || start > end) {
            *error = 1;
            continue;
        }
        double acc;
        if (has_initial) acc = initial;
        else if (red == RED_MAX) acc = -__longlong_as_double(0x7ff0000000000000LL);
        else if (red == RED_MIN) acc = __longlong_as_double(0x7ff0000000000000LL);
        else if (red == RED_PROD) acc = 1.0;
        else acc = 0.0;
        acc = round_to((T*)0, acc);
        for (i64 j = start; j < end; ++j) {
            double v = Num<T>::get(data[(o * len + j) * inner + i]);
            if (red == RED_MAX) acc = (v != v) ? v : (acc < v ? v : acc);
            else if (red == RED_MIN) acc = (v != v) ? v : (v < acc ? v : acc);
            else if (red == RED_PROD) acc = round_to((T*)0, acc * v);
            else acc = round_to((T*)0, acc + v);
        }
        i64 n = end - start;
        if (red == RED_MEAN) {
            if (n == 0 && !has_initial) acc = __longlong_as_double(0x7ff8000000000000LL);
            else if (n > 0 && acc == acc) acc = round_to((T*)0, acc / (double)n);
        }
        out[e] = Num<T>::put(acc);
    }
}
// One kernel a value type T and segment-offset type O (`o64`: i64, `o32`: int).
#define INST_SEGMENT_OFFSETS(NAME, T, OSUFFIX, O)                                                               \
    extern "C" __global__ void segment_reduce_##NAME##_##OSUFFIX(const T* data, i64 outer, i64 len, i64 inner,   \
                                                                const O* segs, int is_offsets, i64 count,       \
                                                                int check_sum, int red, int has_initial,        \
                                                                double initial, T* out, int* error) {           \
        segment_reduce<T, O>(data, outer, len, inner, segs, is_offsets, count, check_sum, red, has_initial,     \
                             initial, out, error);                                                              \
    }
#define INST_SEGMENT(NAME, T) INST_SEGMENT_OFFSETS(NAME, T, o64, i64) INST_SEGMENT_OFFSETS(NAME, T, o32, int)
INST_SEGMENT(f32, float)
INST_SEGMENT(f64, double)
INST_SEGMENT(f16, f16)
INST_SEGMENT(bf16, bf16)

// ---------------------------------------------------------------- randint
// Philox4x32-10 as curand computes it (curand_Philox4x32_10): counter
// (position low, position high, subsequence low, subsequence high), key
// (seed low, seed high).
__device__ __forceinline__ void philox(unsigned int c[4], unsigned int k0, unsigned int k1) {
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned int lo0 = 0xD2511F53u * c[0], hi0 = __umulhi(0xD2511F53u, c[0]);
        unsigned int lo1 = 0xCD9E8D57u * c[2], hi1 = __umulhi(0xCD9E8D57u, c[2]);
        unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

// out[i] = low + rand % range for element i of ATen's grid-stride launch of
// `threads` threads: thread i % threads, its (i / (threads * unroll))-th
// curand4 call at Philox offset `offset`, lane (i % (threads * unroll)) /
// threads; two 64-bit values per call (unroll 2) or four 32-bit ones.
// `state` is the generator's {seed, offset} in device memory (the backend's,
// advanced by `rng_advance` after each draw, so replays draw new numbers).
extern "C" __global__ void randint_i64(i64* out, Nd od, i64 n, const u64* state, u64 range, i64 low,
                                       i64 unroll, i64 threads) {
    const u64 seed = state[0], offset = state[1];
    for (i64 i = grid_index(); i < n; i += grid_step()) {
        i64 per_round = threads * unroll;
        u64 call = (u64)(i / per_round);
        i64 lane = (i % per_round) / threads;
        u64 thread = (u64)(i % threads);
        u64 position = offset / 4 + call;
        unsigned int c[4] = {(unsigned int)position, (unsigned int)(position >> 32), (unsigned int)thread,
                             (unsigned int)(thread >> 32)};
        philox(c, (unsigned int)seed, (unsigned int)(seed >> 32));
        u64 rand;
        if (unroll == 2) {
            rand = lane == 0 ? (((u64)c[0] << 32) | c[1]) : (((u64)c[2] << 32) | c[3]);
        } else {
            rand = c[lane];
        }
        out[nd_offset(od, i)] = (i64)(rand % range + (u64)low);
    }
}

// Advances the generator's offset by what one draw consumed (ATen's
// `philox_cuda_state` increment), after the draw's kernel on the same stream.
extern "C" __global__ void rng_advance(u64* state, u64 increment) {
    if (blockIdx.x == 0 && threadIdx.x == 0) state[1] += increment;
}
