// Built-in kernels of wrapir's CUDA backend, compiled once with NVRTC.
//
// Tensors are passed as a data pointer (the view's element 0) and an `Nd`
// descriptor (sizes and strides in elements). Linear indices always run in
// row-major order over the descriptor's sizes, so compaction results come
// out in PyTorch's order. Kernels that only move bytes are instantiated per
// element width; kernels that compute are instantiated per dtype.

#define THREADS 256
#define PER_THREAD 4
#define TILE (THREADS * PER_THREAD)

// `i64`, `u64`, `Nd`, `nd_offset`, `grid_index`, `grid_step`, the half
// types: prelude.cuh, prepended.

// Same-size reinterpretation (no memcpy: NVRTC compiles without headers).
template <int N> struct BitsOf;
template <> struct BitsOf<1> { typedef unsigned char T; };
template <> struct BitsOf<2> { typedef unsigned short T; };
template <> struct BitsOf<4> { typedef unsigned int T; };
template <> struct BitsOf<8> { typedef unsigned long long T; };
template <typename To, typename From>
__device__ __forceinline__ To bitcast(From f) {
    union { From f; To t; } u;
    u.f = f;
    return u.t;
}

// ---------------------------------------------------------------- dtypes
// `f16`, `bf16` and their conversions: prelude.cuh.

// Values as double (exact for every dtype but i64 beyond 2^53, which only
// the float-typed paths use) and back.
template <typename T> struct Num;
#define NUM_INT(T, IS_BOOL)                                                          \
    template <> struct Num<T> {                                                      \
        static const bool is_float = false;                                          \
        static __device__ double to_double(T v) { return (double)v; }                \
        static __device__ T from_double(double v) { return IS_BOOL ? (T)(v != 0.0) : (T)v; } \
        static __device__ bool nonzero(T v) { return v != 0; }                       \
    };
NUM_INT(signed char, false)
NUM_INT(short, false)
NUM_INT(int, false)
NUM_INT(i64, false)
NUM_INT(unsigned char, false)
struct boolean { unsigned char v; };
template <> struct Num<boolean> {
    static const bool is_float = false;
    static __device__ double to_double(boolean v) { return v.v ? 1.0 : 0.0; }
    static __device__ boolean from_double(double v) { boolean b; b.v = v != 0.0; return b; }
    static __device__ bool nonzero(boolean v) { return v.v != 0; }
};
template <> struct Num<float> {
    static const bool is_float = true;
    static __device__ double to_double(float v) { return v; }
    static __device__ float from_double(double v) { return (float)v; }
    static __device__ bool nonzero(float v) { return v != 0.0f; }
};
template <> struct Num<double> {
    static const bool is_float = true;
    static __device__ double to_double(double v) { return v; }
    static __device__ double from_double(double v) { return v; }
    static __device__ bool nonzero(double v) { return v != 0.0; }
};
template <> struct Num<f16> {
    static const bool is_float = true;
    static __device__ double to_double(f16 v) { return f16_to_float(v.bits); }
    static __device__ f16 from_double(double v) { f16 r; r.bits = float_to_f16((float)v); return r; }
    static __device__ bool nonzero(f16 v) { return (v.bits & 0x7fff) != 0; }
};
template <> struct Num<bf16> {
    static const bool is_float = true;
    static __device__ double to_double(bf16 v) { return bf16_to_float(v.bits); }
    static __device__ bf16 from_double(double v) { bf16 r; r.bits = float_to_bf16((float)v); return r; }
    static __device__ bool nonzero(bf16 v) { return (v.bits & 0x7fff) != 0; }
};

// ------------------------------------------------------------ compaction
// Three passes over a mask of `n` elements laid out by `md`: per-tile
// counts, an exclusive scan of the counts (one block), and a pass that
// writes the row-major linear index of every non-zero element at its
// rank. Order is the mask's row-major order, as in PyTorch.

template <typename T>
__device__ int thread_flags(const T* mask, const Nd& md, i64 n, i64 first, bool flags[PER_THREAD]) {
    int count = 0;
    for (int k = 0; k < PER_THREAD; ++k) {
        i64 i = first + k;
        flags[k] = i < n && Num<T>::nonzero(mask[nd_offset(md, i)]);
        count += flags[k];
    }
    return count;
}

// Exclusive scan of one value per thread across the block; `*total` gets the sum.
__device__ i64 block_exclusive_scan(i64 v, i64* total) {
    __shared__ i64 buf[THREADS];
    int t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (int off = 1; off < THREADS; off <<= 1) {
        i64 add = t >= off ? buf[t - off] : 0;
        __syncthreads();
        buf[t] += add;
        __syncthreads();
    }
    i64 inclusive = buf[t];
    *total = buf[THREADS - 1];
    __syncthreads();
    return inclusive - v;
}

template <typename T>
__device__ void compact_count(const T* mask, Nd md, i64 n, i64* tile_counts) {
    bool flags[PER_THREAD];
    i64 first = (i64)blockIdx.x * TILE + (i64)threadIdx.x * PER_THREAD;
    i64 total;
    block_exclusive_scan(thread_flags(mask, md, n, first, flags), &total);
    if (threadIdx.x == 0) tile_counts[blockIdx.x] = total;
}

template <typename T>
__device__ void compact_write(const T* mask, Nd md, i64 n, const i64* tile_offsets, i64* hits) {
    bool flags[PER_THREAD];
    i64 first = (i64)blockIdx.x * TILE + (i64)threadIdx.x * PER_THREAD;
    i64 total;
    i64 at = tile_offsets[blockIdx.x] + block_exclusive_scan(thread_flags(mask, md, n, first, flags), &total);
    for (int k = 0; k < PER_THREAD; ++k) {
        if (flags[k]) hits[at++] = first + k;
    }
}

// In-place exclusive scan of `counts[0..tiles)` in one block; writes the
// total to `counts[tiles]`.
extern "C" __global__ void compact_scan(i64* counts, i64 tiles) {
    i64 carry = 0;
    for (i64 base = 0; base < tiles; base += THREADS) {
        i64 i = base + threadIdx.x;
        i64 v = i < tiles ? counts[i] : 0;
        i64 total;
        i64 excl = block_exclusive_scan(v, &total);
        if (i < tiles) counts[i] = carry + excl;
        carry += total;
    }
    if (threadIdx.x == 0) counts[tiles] = carry;
}

// out[h * inner + r] = src[lead(hits[h]) + rest(r)]: rows of `src` picked by
// the compaction (byte-width generic).
template <typename W>
__device__ void gather_hits(const W* src, Nd lead, Nd rest, const i64* hits, i64 nhits, i64 inner, W* out) {
    i64 total = nhits * inner;
    for (i64 i = grid_index(); i < total; i += grid_step()) {
        i64 h = i / inner, r = i % inner;
        out[i] = src[nd_offset(lead, hits[h]) + nd_offset(rest, r)];
    }
}

// nonzero's result: `[n, rank]` int64 with strides (1, n), coordinate d of
// hit h at d * n + h.
extern "C" __global__ void nonzero_coords(const i64* hits, i64 n, Nd shape, i64* out) {
    for (i64 h = grid_index(); h < n; h += grid_step()) {
        i64 linear = hits[h];
        for (int d = (int)shape.rank - 1; d >= 0; --d) {
            i64 s = shape.size[d];
            out[(i64)d * n + h] = linear % s;
            linear /= s;
        }
    }
}

// ---------------------------------------------------------------- jagged
// values [L, *rest] -> out [B, N, D] (contiguous): out[b, s, d] =
// values[offsets[b] + s, d] if s < len_b (and the row lies inside values),
// else the padding value's bits.
template <typename W, typename O>
__device__ void jagged_to_padded(const W* values, i64 L, i64 vstride0, Nd vrest, const O* offsets, i64 B, i64 N, i64 D,
                                 u64 pad_bits, W* out) {
    W pad = (W)pad_bits;  // W is the unsigned integer of the element's width
    i64 total = B * N * D;
    for (i64 i = grid_index(); i < total; i += grid_step()) {
        i64 d = i % D, s = (i / D) % N, b = i / (D * N);
        i64 begin = (i64)offsets[b], end = (i64)offsets[b + 1];
        i64 j = begin + s;
        out[i] = (j < end && j >= 0 && j < L) ? values[j * vstride0 + nd_offset(vrest, d)] : pad;
    }
}

// dense [Bd, N, *rest] -> out [total, D] (contiguous): out[j, d] =
// dense[b, j - offsets[b], d] for the last row b with offsets[b] <= j, and 0
// where that row is outside [0, min(B, Bd)), j is past its end, or the
// position is past the padded width N (CUDA's zero fill).
template <typename W, typename O>
__device__ void padded_to_jagged(const W* dense, i64 Bd, i64 N, i64 st0, i64 st1, Nd drest, const O* offsets, i64 B,
                                 i64 total, i64 D, W* out) {
    i64 n = total * D;
    for (i64 i = grid_index(); i < n; i += grid_step()) {
        i64 j = i / D, d = i % D;
        // upper_bound over offsets[0..=B], minus one
        i64 lo = 0, hi = B + 1;
        while (lo < hi) {
            i64 mid = (lo + hi) / 2;
            if ((i64)offsets[mid] <= j) lo = mid + 1; else hi = mid;
        }
        i64 b = lo - 1;
        W v = 0;
        if (b >= 0 && b < B && b < Bd && j < (i64)offsets[b + 1]) {
            i64 s = j - (i64)offsets[b];
            if (s < N) v = dense[b * st0 + s * st1 + nd_offset(drest, d)];
        }
        out[i] = v;
    }
}

// --------------------------------------------------------------- scatter
enum { MODE_ASSIGN = 0, MODE_SUM = 1, MODE_PROD = 2, MODE_AMAX = 3, MODE_AMIN = 4, MODE_IDENTITY = 8 };  // MODE_IDENTITY + m: write m's identity

template <typename T>
__device__ T combine(T old, T v, int mode) {
    if (mode == MODE_ASSIGN) return v;
    if (Num<T>::is_float) {
        double a = Num<T>::to_double(old), b = Num<T>::to_double(v), r;
        switch (mode) {
            case MODE_SUM: r = a + b; break;
            case MODE_PROD: r = a * b; break;
            case MODE_AMAX: r = (a != a || b != b) ? (a + b) : (a > b ? a : b); break;
            case MODE_AMIN: r = (a != a || b != b) ? (a + b) : (a < b ? a : b); break;
            default: r = b;
        }
        return Num<T>::from_double(r);
    }
    return v;
}

// Integer combine in the integer type itself (wrapping sums, as ATen).
template <typename T>
__device__ T combine_int(T old, T v, int mode) {
    switch (mode) {
        case MODE_SUM: return (T)((u64)old + (u64)v);
        case MODE_PROD: return (T)((u64)old * (u64)v);
        case MODE_AMAX: return old > v ? old : v;
        case MODE_AMIN: return old < v ? old : v;
        default: return v;
    }
}

template <typename T> __device__ T combine_any(T old, T v, int mode) { return combine(old, v, mode); }
template <> __device__ i64 combine_any<i64>(i64 old, i64 v, int mode) { return combine_int(old, v, mode); }
template <> __device__ int combine_any<int>(int old, int v, int mode) { return combine_int(old, v, mode); }

// The reduction's identity, written first where include_self is false.
template <typename T>
__device__ T identity(int mode) {
    if (Num<T>::is_float) {
        double inf = __longlong_as_double(0x7ff0000000000000ll);
        return Num<T>::from_double(mode == MODE_PROD ? 1.0 : mode == MODE_AMAX ? -inf : mode == MODE_AMIN ? inf : 0.0);
    }
    return Num<T>::from_double(mode == MODE_PROD ? 1.0 : 0.0);
}
template <> __device__ i64 identity<i64>(int mode) {
    return mode == MODE_PROD ? 1 : mode == MODE_AMAX ? (i64)0x8000000000000000ull : mode == MODE_AMIN ? 0x7fffffffffffffffll : 0;
}
template <> __device__ int identity<int>(int mode) {
    return mode == MODE_PROD ? 1 : mode == MODE_AMAX ? (int)0x80000000u : mode == MODE_AMIN ? 0x7fffffff : 0;
}

// Atomic read-modify-write through a compare-and-swap on the aligned word
// holding the element (4 or 8 bytes wide).
template <typename T>
__device__ void atomic_apply(T* p, T v, int mode) {
    typedef typename BitsOf<sizeof(T)>::T Bits;
    if (mode == MODE_ASSIGN) {
        *p = v;
        return;
    }
    if (mode >= MODE_IDENTITY) {
        *p = identity<T>(mode - MODE_IDENTITY);
        return;
    }
    if (sizeof(T) == 8) {
        u64* w = (u64*)p;
        u64 old = *w, assumed;
        do {
            assumed = old;
            T next = combine_any(bitcast<T>((Bits)assumed), v, mode);
            u64 bits = (u64)bitcast<Bits>(next);
            if (bits == assumed) return;
            old = atomicCAS(w, assumed, bits);
        } while (old != assumed);
    } else {
        size_t addr = (size_t)p;
        unsigned int* w = (unsigned int*)(addr & ~(size_t)3);
        unsigned int shift = (unsigned int)(addr & 3) * 8;
        unsigned int mask = sizeof(T) == 4 ? 0xffffffffu : (((1u << (sizeof(T) * 8)) - 1u) << shift);
        unsigned int old = *w, assumed;
        do {
            assumed = old;
            T cur = bitcast<T>((Bits)((assumed & mask) >> shift));
            T next = combine_any(cur, v, mode);
            unsigned int nb = (unsigned int)bitcast<Bits>(next);
            unsigned int bits = (assumed & ~mask) | ((nb << shift) & mask);
            if (bits == assumed) return;
            old = atomicCAS(w, assumed, bits);
        } while (old != assumed);
    }
}

// scatter / scatter_reduce: for every element k of `index` (shape `ind`),
// self[..., index[k] along dim, ...] (op)= src[k] (or `value`). Out-of-range
// indices set `*error` to 1 + the element's position and are skipped.
template <typename T>
__device__ void scatter(T* self, Nd sd, int dim, const i64* index, Nd ind, const T* src, Nd srcd, int has_src, double value,
                        int mode, i64 n, i64* error) {
    T scalar = Num<T>::from_double(value);
    for (i64 k = grid_index(); k < n; k += grid_step()) {
        i64 rem = k, pos = 0, idx_off = 0, src_off = 0;
        i64 c_dim = 0;
        for (int d = (int)ind.rank - 1; d >= 0; --d) {
            i64 c = rem % ind.size[d];
            rem /= ind.size[d];
            idx_off += c * ind.stride[d];
            src_off += c * srcd.stride[d];
            if (d != dim) pos += c * sd.stride[d];
        }
        c_dim = index[idx_off];
        i64 size = sd.size[dim];
        if (c_dim < 0) c_dim += size;
        if (c_dim < 0 || c_dim >= size) {
            atomicCAS((u64*)error, 0ull, (u64)(k + 1));
            continue;
        }
        pos += c_dim * sd.stride[dim];
        atomic_apply(self + pos, has_src ? src[src_off] : scalar, mode);
    }
}

// index_put_: `count` int64 index tensors (each laid out over the common
// index shape `ishape` with broadcast strides) select the leading dims of
// `self`; `tail` describes self's remaining dims. values are laid out over
// [*ishape, *tail] by `vd`.
struct Indices {
    const i64* ptr[4];
    i64 stride[4][MAX_RANK];
    i64 count;
};

template <typename T>
__device__ void index_put(T* self, Nd sd, Nd tail, Indices ix, Nd ishape, const T* values, Nd vd, int mode, i64 n,
                          i64* error) {
    i64 tail_n = 1;
    for (int d = 0; d < (int)tail.rank; ++d) tail_n *= tail.size[d];
    for (i64 e = grid_index(); e < n; e += grid_step()) {
        i64 p = e / tail_n, t = e % tail_n;
        i64 pos = nd_offset(tail, t);
        bool ok = true;
        for (int q = 0; q < (int)ix.count; ++q) {
            i64 rem = p, off = 0;
            for (int d = (int)ishape.rank - 1; d >= 0; --d) {
                off += (rem % ishape.size[d]) * ix.stride[q][d];
                rem /= ishape.size[d];
            }
            i64 c = ix.ptr[q][off];
            i64 size = sd.size[q];
            if (c < 0) c += size;
            if (c < 0 || c >= size) { ok = false; break; }
            pos += c * sd.stride[q];
        }
        if (!ok) {
            atomicCAS((u64*)error, 0ull, (u64)(p + 1));
            continue;
        }
        atomic_apply(self + pos, values[nd_offset(vd, e)], mode);
    }
}

// ------------------------------------------------------------------ topk
// One thread per row of a contiguous [outer, len, inner] tensor: the k
// largest (or smallest) values in order, ties by lower index, NaN largest;
// each step scans the row for the best element after the previous pick.
template <typename T>
__device__ bool topk_before(double a, i64 ia, double b, i64 ib, int largest) {
    bool an = a != a, bn = b != b;
    if (an || bn) {
        if (an && bn) return ia < ib;
        return largest ? an : bn;
    }
    if (a != b) return largest ? a > b : a < b;
    return ia < ib;
}

template <typename T>
__device__ void topk(const T* x, i64 outer, i64 len, i64 inner, i64 k, int largest, T* values, i64* indices) {
    i64 rows = outer * inner;
    for (i64 r = grid_index(); r < rows; r += grid_step()) {
        i64 o = r / inner, in = r % inner;
        const T* row = x + o * len * inner + in;
        double prev = 0.0;
        i64 prev_i = -1;
        for (i64 q = 0; q < k; ++q) {
            double best = 0.0;
            i64 best_i = -1;
            for (i64 j = 0; j < len; ++j) {
                double v = Num<T>::to_double(row[j * inner]);
                if (prev_i >= 0 && !topk_before<T>(prev, prev_i, v, j, largest)) continue;
                if (best_i < 0 || topk_before<T>(v, j, best, best_i, largest)) { best = v; best_i = j; }
            }
            i64 out = (o * k + q) * inner + in;
            values[out] = row[best_i * inner];
            indices[out] = best_i;
            prev = best;
            prev_i = best_i;
        }
    }
}

// ------------------------------------------------------- instantiations
#define FOR_EACH_DTYPE(X) \
    X(f32, float) X(f64, double) X(f16, f16) X(bf16, bf16) X(i64, i64) X(i32, int) X(i16, short) X(i8, signed char) \
    X(u8, unsigned char) X(bool, boolean)
#define FOR_EACH_WIDTH(X) X(1, unsigned char) X(2, unsigned short) X(4, unsigned int) X(8, u64)
#define FOR_EACH_REDUCIBLE(X) X(f32, float) X(f64, double) X(f16, f16) X(bf16, bf16) X(i64, i64) X(i32, int)

#define INST_COMPACT(NAME, T)                                                                              \
    extern "C" __global__ void compact_count_##NAME(const T* mask, Nd md, i64 n, i64* counts) {            \
        compact_count<T>(mask, md, n, counts);                                                             \
    }                                                                                                      \
    extern "C" __global__ void compact_write_##NAME(const T* mask, Nd md, i64 n, const i64* offs, i64* hits) { \
        compact_write<T>(mask, md, n, offs, hits);                                                         \
    }
FOR_EACH_DTYPE(INST_COMPACT)

#define INST_WIDTH(W, T)                                                                                         \
    extern "C" __global__ void gather_hits_w##W(const T* src, Nd lead, Nd rest, const i64* hits, i64 nhits, i64 inner, \
                                                T* out) {                                                        \
        gather_hits<T>(src, lead, rest, hits, nhits, inner, out);                                                \
    }                                                                                                            \
    extern "C" __global__ void jagged_to_padded_w##W##_o32(const T* v, i64 L, i64 vs0, Nd vr, const int* o, i64 B,    \
                                                           i64 N, i64 D, u64 pad, T* out) {                      \
        jagged_to_padded<T, int>(v, L, vs0, vr, o, B, N, D, pad, out);                                           \
    }                                                                                                            \
    extern "C" __global__ void jagged_to_padded_w##W##_o64(const T* v, i64 L, i64 vs0, Nd vr, const i64* o, i64 B,    \
                                                           i64 N, i64 D, u64 pad, T* out) {                      \
        jagged_to_padded<T, i64>(v, L, vs0, vr, o, B, N, D, pad, out);                                           \
    }                                                                                                            \
    extern "C" __global__ void padded_to_jagged_w##W##_o32(const T* dn, i64 Bd, i64 N, i64 s0, i64 s1, Nd dr,         \
                                                           const int* o, i64 B, i64 total, i64 D, T* out) {      \
        padded_to_jagged<T, int>(dn, Bd, N, s0, s1, dr, o, B, total, D, out);                                    \
    }                                                                                                            \
    extern "C" __global__ void padded_to_jagged_w##W##_o64(const T* dn, i64 Bd, i64 N, i64 s0, i64 s1, Nd dr,         \
                                                           const i64* o, i64 B, i64 total, i64 D, T* out) {      \
        padded_to_jagged<T, i64>(dn, Bd, N, s0, s1, dr, o, B, total, D, out);                                    \
    }
FOR_EACH_WIDTH(INST_WIDTH)

#define INST_REDUCE(NAME, T)                                                                                     \
    extern "C" __global__ void scatter_##NAME(T* self, Nd sd, int dim, const i64* index, Nd ind, const T* src, Nd srcd, \
                                              int has_src, double value, int mode, i64 n, i64* error) {          \
        scatter<T>(self, sd, dim, index, ind, src, srcd, has_src, value, mode, n, error);                        \
    }                                                                                                            \
    extern "C" __global__ void index_put_##NAME(T* self, Nd sd, Nd tail, Indices ix, Nd ishape, const T* values, Nd vd, \
                                                int mode, i64 n, i64* error) {                                   \
        index_put<T>(self, sd, tail, ix, ishape, values, vd, mode, n, error);                                    \
    }                                                                                                            \
    extern "C" __global__ void topk_##NAME(const T* x, i64 outer, i64 len, i64 inner, i64 k, int largest, T* values,  \
                                           i64* indices) {                                                       \
        topk<T>(x, outer, len, inner, k, largest, values, indices);                                              \
    }
FOR_EACH_REDUCIBLE(INST_REDUCE)

// ------------------------------------------------------ GEMM helpers
// dst[i] = src[i] over a shape: the bias of addmm / baddbmm broadcast into
// the result (stride 0 on broadcast dimensions), byte-width generic.
template <typename W>
__device__ void strided_copy(const W* src, Nd sd, W* dst, Nd dd, i64 n) {
    for (i64 i = grid_index(); i < n; i += grid_step()) dst[nd_offset(dd, i)] = src[nd_offset(sd, i)];
}
#define INST_STRIDED_COPY(W, T)                                                                  \
    extern "C" __global__ void strided_copy_w##W(const T* src, Nd sd, T* dst, Nd dd, i64 n) { \
        strided_copy<T>(src, sd, dst, dd, n);                                                    \
    }
FOR_EACH_WIDTH(INST_STRIDED_COPY)

// relu_ (clamp_min(0), NaN kept) or gelu_(approximate="tanh") in place, in
// float as ATen's CUDA kernels compute them for f32, f16 and bf16.
template <typename T>
__device__ void gemm_activation(T* x, Nd d, int gelu, i64 n) {
    const float kBeta = (float)(1.4142135623730951 * 1.1283791670955126 * 0.5);
    const float kKappa = 0.044715f;
    for (i64 i = grid_index(); i < n; i += grid_step()) {
        T* p = x + nd_offset(d, i);
        float v = (float)Num<T>::to_double(*p);
        float r;
        if (gelu) {
            float cube = v * v * v;
            float inner = kBeta * (v + kKappa * cube);
            r = 0.5f * v * (1.0f + tanhf(inner));
        } else {
            r = (v != v) ? v : (v > 0.0f ? v : 0.0f);
        }
        *p = Num<T>::from_double((double)r);
    }
}
#define INST_GEMM_ACTIVATION(NAME, T)                                                       \
    extern "C" __global__ void gemm_activation_##NAME(T* x, Nd d, int gelu, i64 n) {        \
        gemm_activation<T>(x, d, gelu, n);                                                  \
    }
INST_GEMM_ACTIVATION(f32, float)
INST_GEMM_ACTIVATION(f16, f16)
INST_GEMM_ACTIVATION(bf16, bf16)
