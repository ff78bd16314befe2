// Fused scaled-dot-product attention (forward, inference): one pass over the
// keys per tile of queries with an online softmax (running row max and sum),
// fp32 accumulation, nothing of size L x S ever written to memory.
//
// Compiled with NVRTC at first use, separately from builtin.cu. Kernels:
//   attn_f16_e<E>, attn_bf16_e<E>  tensor cores (mma.sync m16n8k16, sm_80+)
//   attn_f32tc_e<E>                3xTF32 on tensor cores (sm_80+); _s2: two key
//                                  groups a block, for grids below half the GPU
//   attn_f32_e<E>                  FMA (before sm_80)
// for head dims E in {16, 32, 64, 80, 96, 128}, one head dim per NVRTC
// compilation (ATTN_E, defined by the host), so a model pays for the head
// dims it uses only.
//
// Layout: grid (ceil(L / rows per block), H, B), 128 threads (256 for _s2),
// dynamic shared memory as `shared_layout` in attention.rs computes it. Every tensor is
// addressed through its strides ([B, H, L, E] for q and the output,
// [B, Hkv, S, E] for k and v, [B, H, L, S] broadcast strides for the bias,
// [B, H, L] for the log-sum-exp), so permuted and expanded views need no copy.
//
// Semantics (PyTorch's): scores = q.k * scale + bias; with `causal`, key j
// is masked for query i when j > i (upper-left aligned, tril(ones(L, S)));
// query head h reads key/value head h / group. A row whose scores are all
// -inf gives NaN and log-sum-exp -inf (`empty_mode` 0: memory-efficient and
// cuDNN attention), or 0 and log-sum-exp +inf (`empty_mode` 1: flash
// attention's convention); with no keys at all the output is 0. Log-sum-exp
// positions in [L, lse_len) (memory-efficient attention's padding to 32)
// are +inf.

typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

#define NT 128
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
// +inf (NVRTC has no math.h macros).
#define ATTN_INF __int_as_float(0x7f800000)

// Every field is 8 bytes (the host marshals it as 8-byte words).
struct AttnParams {
    u64 q, k, v, bias, out, lse;  // device addresses (bias, lse: 0 when absent)
    i64 qs[4], ks[4], vs[4], bs[4], os[4], ls[3];
    i64 heads;    // H (query heads); blockIdx.y < H
    i64 group;    // H / Hkv
    i64 lq, lk;   // L, S
    i64 lse_len;  // positions of the log-sum-exp's last dimension
    double scale;
    i64 causal;
    i64 empty_mode;
};

__device__ __forceinline__ float f16_to_float(u16 h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 float_to_f16(float f) {
    u16 h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_float(u16 b) { return __uint_as_float(((unsigned)b) << 16); }

__device__ __forceinline__ u16 float_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                        // round to nearest even
    return (u16)(u >> 16);
}

template <bool BF16> struct Half;
template <> struct Half<false> {
    static __device__ __forceinline__ float to_float(u16 x) { return f16_to_float(x); }
    static __device__ __forceinline__ u16 from_float(float x) { return float_to_f16(x); }
};
template <> struct Half<true> {
    static __device__ __forceinline__ float to_float(u16 x) { return bf16_to_float(x); }
    static __device__ __forceinline__ u16 from_float(float x) { return float_to_bf16(x); }
};

// ---------------------------------------------------------------------------
// Shared by every kernel: the head's tensors, the online softmax's running
// max, and how a finished row is written.
// ---------------------------------------------------------------------------

// The q, k, v and bias (0 when absent) of batch b and query head h, which
// reads key / value head h / group; T is the element type.
template <typename T>
__device__ __forceinline__ void head_inputs(const AttnParams& p, i64 b, i64 h, const T*& Q, const T*& K, const T*& V,
                                            const T*& Bias) {
    const i64 hk = h / p.group;
    Q = reinterpret_cast<const T*>(p.q) + b * p.qs[0] + h * p.qs[1];
    K = reinterpret_cast<const T*>(p.k) + b * p.ks[0] + hk * p.ks[1];
    V = reinterpret_cast<const T*>(p.v) + b * p.vs[0] + hk * p.vs[1];
    Bias = p.bias ? reinterpret_cast<const T*>(p.bias) + b * p.bs[0] + h * p.bs[1] : 0;
}

// The output (element type T) and log-sum-exp (0 when absent) of batch b, head h.
template <typename T>
__device__ __forceinline__ void head_outputs(const AttnParams& p, i64 b, i64 h, T*& Out, float*& Lse) {
    Out = reinterpret_cast<T*>(p.out) + b * p.os[0] + h * p.os[1];
    Lse = p.lse ? reinterpret_cast<float*>(p.lse) + b * p.ls[0] + h * p.ls[1] : 0;
}

// x reduced over the 4 lanes of a quad (lanes 4 g .. 4 g + 3).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Raises the running max m (log2 units) to include mx; sets mu, the max the
// new exponents subtract (0 while every score is -inf: no exp(-inf - -inf)),
// and returns the factor exp2(m_old - mu) that rescales what was summed so far.
__device__ __forceinline__ float raise_max(float& m, float mx, float& mu) {
    const float mnew = fmaxf(m, mx);
    mu = mnew == (-ATTN_INF) ? 0.f : mnew;
    const float alpha = exp2f(m - mu);
    m = mnew;
    return alpha;
}

// How a finished row (running max m, sum l) is written: a row whose scores
// were all -inf is `fill` (NaN with `empty_mode` 0 and keys present, else 0);
// any other is O * inv.
struct RowEnd {
    bool empty;
    float fill, inv;
};

__device__ __forceinline__ RowEnd row_end(const AttnParams& p, float m, float l) {
    RowEnd e;
    e.empty = m == (-ATTN_INF);
    e.fill = (e.empty && p.lk > 0 && p.empty_mode == 0) ? __int_as_float(0x7fc00000) : 0.f;
    e.inv = e.empty ? 0.f : 1.f / l;
    return e;
}

// The row's log-sum-exp (natural log).
__device__ __forceinline__ float row_lse(const AttnParams& p, const RowEnd& e, float m, float l) {
    return e.empty ? (p.empty_mode == 0 ? (-ATTN_INF) : ATTN_INF) : (m + log2f(l)) * LN2;
}

// Log-sum-exp positions [lq, lse_len) among a block's BM rows from q0: +inf.
template <int BM, int NTH>
__device__ __forceinline__ void pad_lse(const AttnParams& p, float* Lse, i64 q0, int tid) {
    for (int r = tid; r < BM; r += NTH) {
        const i64 row = q0 + r;
        if (row >= p.lq && row < p.lse_len) Lse[row * p.ls[2]] = ATTN_INF;
    }
}

// The end of the keys that a block of BM query rows from q0 reads: every
// key, or with `causal` none past the block's last row.
template <int BM>
__device__ __forceinline__ i64 kv_limit(const AttnParams& p, i64 q0) {
    i64 kv_end = p.lk;
    if (p.causal && q0 + BM < kv_end) kv_end = q0 + BM;
    return kv_end;
}

// The tensor-core kernels' accumulator layout: each thread holds two rows
// (g and g + 8 of its warp's 16), the 4 threads of a quad share them.

// Folds a tile's row maxima mx into the running max m and rescales the
// running sums l and the output accumulators o (NO n-tiles of 8 columns).
template <int NO>
__device__ __forceinline__ void rescale_rows(float (&mx)[2], float (&m)[2], float (&l)[2], float (&o)[NO][4],
                                             float (&mu)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = quad_max(mx[r]);
        const float alpha = raise_max(m[r], mx[r], mu[r]);
        l[r] *= alpha;
#pragma unroll
        for (int d = 0; d < NO; ++d) {
            o[d][2 * r] *= alpha;
            o[d][2 * r + 1] *= alpha;
        }
    }
}

// Scores s (NS n-tiles, log2 units) to exp2(s - mu), added to the row sums l.
template <int NS>
__device__ __forceinline__ void exp_scores(float (&s)[NS][4], const float (&mu)[2], float (&l)[2]) {
#pragma unroll
    for (int j = 0; j < NS; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            s[j][c] = exp2f(s[j][c] - mu[c >> 1]);
            l[c >> 1] += s[j][c];
        }
    }
}

// The thread's two rows before the first key tile: accumulators o zero,
// running maxima -inf, sums 0.
template <int NO>
__device__ __forceinline__ void start_rows(float (&o)[NO][4], float (&m)[2], float (&l)[2]) {
#pragma unroll
    for (int d = 0; d < NO; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    m[0] = m[1] = (-ATTN_INF);
    l[0] = l[1] = 0.f;
}

// A key tile's scores s (keys from kv0, NS n-tiles) in log2 units: scaled
// by sl2, plus the bias (elements of T, read as floats by Conv::to_float),
// and -inf for masked keys (past lk; with `causal`, past the row); with
// `need_mask` false the caller knows no key of the tile is masked. Raises
// the row maxima mx to the tile's.
template <typename Conv, int NS, typename T>
__device__ __forceinline__ void mask_scores(float (&s)[NS][4], float (&mx)[2], const AttnParams& p, const T* Bias,
                                            const i64 (&rows)[2], i64 kv0, int t4, float sl2, bool need_mask) {
#pragma unroll
    for (int j = 0; j < NS; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const i64 row = rows[c >> 1];
            const i64 col = kv0 + j * 8 + t4 * 2 + (c & 1);
            const bool ok = !need_mask || (col < p.lk && (!p.causal || col <= row));
            float x = s[j][c] * sl2;
            if (ok && Bias && row < p.lq) x += Conv::to_float(Bias[row * p.bs[2] + col * p.bs[3]]) * LOG2E;
            s[j][c] = ok ? x : (-ATTN_INF);
            mx[c >> 1] = fmaxf(mx[c >> 1], s[j][c]);
        }
    }
}

// f32 bias elements, for `mask_scores`.
struct F32 {
    static __device__ __forceinline__ float to_float(float x) { return x; }
};

// Writes the thread's two finished rows of the block (BM rows from q0, NTH
// threads) of batch b, head h: the output (elements of T, columns e and
// e + 1 written by `store(row pointer, e, v0, v1)`), the log-sum-exp and
// its padding. REDUCE: the sums l are still per thread (summed over the
// quad here).
template <typename T, int BM, int NTH, bool REDUCE, int NO, typename Store>
__device__ __forceinline__ void finish_rows(const AttnParams& p, i64 b, i64 h, i64 q0, int tid, int t4,
                                            const i64 (&rows)[2], const float (&o)[NO][4], const float (&m)[2],
                                            float (&l)[2], Store store) {
    T* Out;
    float* Lse;
    head_outputs(p, b, h, Out, Lse);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (REDUCE) l[r] = quad_sum(l[r]);
        const i64 row = rows[r];
        if (row >= p.lq) continue;
        const RowEnd end = row_end(p, m[r], l[r]);
        T* orow = Out + row * p.os[2];
#pragma unroll
        for (int d = 0; d < NO; ++d) {
            const int e = d * 8 + t4 * 2;
            store(orow, e, end.empty ? end.fill : o[d][2 * r] * end.inv, end.empty ? end.fill : o[d][2 * r + 1] * end.inv);
        }
        if (Lse && t4 == 0) Lse[row * p.ls[2]] = row_lse(p, end, m[r], l[r]);
    }
    if (Lse) pad_lse<BM, NTH>(p, Lse, q0, tid);
}

// ---------------------------------------------------------------------------
// f16 / bf16: tensor cores.
//
// MMA_WARPS warps (8 for E <= 64, 4 above), 16 query rows each (MMA_BM =
// 16 * MMA_WARPS rows a block), key tiles of MMA_BN = 64. Shared memory
// holds three row-major tiles of 16-bit elements, every row padded to a
// pitch of E + 8 elements (16-byte aligned rows; the 8 rows an ldmatrix
// phase reads fall on distinct 16-byte bank groups for every E used here):
//   Qs [MMA_BM][E + 8], Ks [2][MMA_BN][E + 8], Vs [2][MMA_BN][E + 8]
// ((MMA_BM + 4 * MMA_BN) * (E + 8) * 2 bytes; `shared_layout` in
// attention.rs). The K / V tiles are double-buffered: while a tile is
// consumed the next one is being loaded, with 16-byte cp.async copies
// (zero-filled past the end) on the fast path (`FAST`: the host checked
// that the last dimension of q, k, v is contiguous and that base and row
// strides are multiples of 16 bytes, and that out's last dimension is
// contiguous with even strides), element by element through the strides
// otherwise. Q fragments stay in registers; S = Q K^T on mma.sync with fp32
// accumulators, scale / bias / masks and the online softmax (exp2f) on the
// accumulators, P rounded to the input type and reused in registers as the
// A operand of O += P V.
//
// Lane mappings relied on (lane = 4 g + t4, g = lane >> 2, t4 = lane & 3):
//  mma.m16n8k16 A (16x16 row-major): a0 = A[g][2t4..2t4+1], a1 = A[g+8][2t4..],
//    a2 = A[g][8+2t4..], a3 = A[g+8][8+2t4..] (low half = lower column).
//  B (16x8, "col", B[k][n]): b0 = B[2t4..2t4+1][g], b1 = B[8+2t4..8+2t4+1][g].
//  C (16x8): c0, c1 = C[g][2t4, 2t4+1]; c2, c3 = C[g+8][2t4, 2t4+1].
//  ldmatrix.m8n8.x4: lanes 8i..8i+7 give the addresses of rows 0..7 of
//    matrix i (16 bytes each); register i of lane l gets M_i[l>>2][2(l&3)..+1],
//    with .trans M_i[2(l&3)][l>>2] and M_i[2(l&3)+1][l>>2].
//  Q (A of S): matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15),
//    (8-15, 8-15) of the 16x16 block -> lane l addresses row l & 15, col
//    8 (l >> 4); registers = a0..a3.
//  K (B of S, B[k=e][n=key] = K[key][e], so K rows non-transposed): for key
//    tiles 2jp, 2jp+1 of k-step kk, matrices (keys 16jp+0-7, e 16kk+0-7),
//    (16jp+0-7, 16kk+8-15), (16jp+8-15, 16kk+0-7), (16jp+8-15, 16kk+8-15)
//    -> lane l addresses key 16jp + 8 (l >> 4) + (l & 7), e 16kk + 8 ((l >> 3) & 1);
//    registers = b0, b1 of tile 2jp, b0, b1 of tile 2jp+1.
//  V (B of O, B[k=key][n=e] = V[key][e], transposed load): for e tiles 2dp,
//    2dp+1 of k-step kk, matrices (keys 16kk+0-7, e 16dp+0-7), (16kk+8-15,
//    16dp+0-7), (16kk+0-7, 16dp+8-15), (16kk+8-15, 16dp+8-15) -> lane l
//    addresses key 16kk + (l & 15), e 16dp + 8 (l >> 4); registers = b0, b1
//    of tile 2dp, b0, b1 of tile 2dp+1.
// ---------------------------------------------------------------------------

#define MMA_BN 64
#define MMA_WARPS (ATTN_E <= 64 ? 8 : 4)
#define MMA_NT (MMA_WARPS * 32)
#define MMA_BM (MMA_WARPS * 16)

#if __CUDA_ARCH__ >= 800
// C += A B on mma.sync m16n8k16 with f32 accumulators; TYPE: the PTX name
// of A's and B's 16-bit element type.
#define MMA16816(TYPE)                                                                         \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, " \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                    \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))

template <bool BF16>
__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    if (BF16) {
        MMA16816("bf16");
    } else {
        MMA16816("f16");
    }
}
#undef MMA16816

// Two floats as a packed pair of the 16-bit type: `lo` in the low half.
template <bool BF16> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<false>(float lo, float hi) {
    unsigned r;
    asm("{ cvt.rn.f16x2.f32 %0, %1, %2; }" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ unsigned pack2<true>(float lo, float hi) {
    unsigned r;
    asm("{ cvt.rn.bf16x2.f32 %0, %1, %2; }" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    u64 a;
    asm("{ cvta.to.shared.u64 %0, %1; }" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

__device__ __forceinline__ void ldsm_x4(unsigned r[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned r[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// 16-byte global -> shared copy; bytes past `src_bytes` (0 or 16) are zero.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most one committed group is still in flight.
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// The first query row (q0: the query block times BM rows), batch and head
// of this block. Blocks start in linear order (x fastest); with `causal` the
// query block varies slowest and the last ones, which have the most keys,
// start first.
template <int BM>
__device__ __forceinline__ i64 block_coords(bool causal, i64& b, i64& h) {
    i64 qb;
    if (!causal) {
        qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    } else {
        const i64 heads = gridDim.y, batch_heads = (i64)gridDim.y * gridDim.z;
        const i64 lin = blockIdx.x + (i64)gridDim.x * (blockIdx.y + (i64)gridDim.y * blockIdx.z);
        qb = gridDim.x - 1 - lin / batch_heads;
        const i64 rest = lin % batch_heads;
        h = rest % heads, b = rest / heads;
    }
    return qb * BM;
}

// Rows [r0, r0 + NROWS) of a [rows][E] matrix of T (row stride rs, element
// stride cs) into a shared tile of pitch PITCH; rows at or past `rend` are
// zero. FAST: cs == 1 and 16-byte aligned rows (cp.async, asynchronous until
// the next cp_async_wait_all).
template <typename T, int E, int NROWS, int PITCH, int NTH, bool FAST>
__device__ __forceinline__ void load_rows(T* dst, const T* src, i64 r0, i64 rend, i64 rs, i64 cs, int tid) {
    if (FAST) {
        constexpr int PER = 16 / sizeof(T);  // elements a 16-byte chunk
        constexpr int CPR = E / PER;         // chunks a row
        for (int i = tid; i < NROWS * CPR; i += NTH) {
            const int r = i / CPR, c = (i % CPR) * PER;
            const i64 row = r0 + r;
            const bool ok = row < rend;
            cp_async16(smem_addr(dst + r * PITCH + c), ok ? (const void*)(src + row * rs + c) : (const void*)src,
                       ok ? 16 : 0);
        }
    } else {
        for (int i = tid; i < NROWS * E; i += NTH) {
            const int r = i / E, c = i % E;
            const i64 row = r0 + r;
            dst[r * PITCH + c] = row < rend ? src[row * rs + c * cs] : (T)0;
        }
    }
}

// 16-bit rows into a tile of pitch E + 8.
template <int E, int NROWS, int NTH, bool FAST>
__device__ __forceinline__ void load_tile(u16* dst, const u16* src, i64 r0, i64 rend, i64 rs, i64 cs, int tid) {
    load_rows<u16, E, NROWS, E + 8, NTH, FAST>(dst, src, r0, rend, rs, cs, tid);
}
#endif

template <bool BF16, int E, bool FAST>
__device__ void attn_mma(const AttnParams& p) {
#if __CUDA_ARCH__ >= 800
    constexpr int P = E + 8;          // row pitch of the shared tiles (elements)
    constexpr int KT = E / 16;        // k-steps of Q K^T
    constexpr int NS = MMA_BN / 8;    // n-tiles of S
    constexpr int NO = E / 8;         // n-tiles of O (even for every E used)
    constexpr int TILE = MMA_BN * P;  // elements of one K or V buffer
    extern __shared__ __align__(16) unsigned char smem_raw[];
    u16* Qs = reinterpret_cast<u16*>(smem_raw);
    u16* Ks = Qs + MMA_BM * P;
    u16* Vs = Ks + 2 * TILE;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    i64 b, h;
    const i64 q0 = block_coords<MMA_BM>(p.causal, b, h);
    const u16 *Q, *K, *V, *Bias;
    head_inputs(p, b, h, Q, K, V, Bias);
    const i64 kv_end = kv_limit<MMA_BM>(p, q0);

    load_tile<E, MMA_BM, MMA_NT, FAST>(Qs, Q, q0, p.lq, p.qs[2], p.qs[3], tid);
    if (kv_end > 0) {
        load_tile<E, MMA_BN, MMA_NT, FAST>(Ks, K, 0, p.lk, p.ks[2], p.ks[3], tid);
        load_tile<E, MMA_BN, MMA_NT, FAST>(Vs, V, 0, p.lk, p.vs[2], p.vs[3], tid);
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    const int wr = warp * 16;
    unsigned qf[KT][4];
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) ldsm_x4(qf[kk], smem_addr(Qs + (wr + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8));

    float o[NO][4], m[2], l[2];
    start_rows(o, m, l);
    const i64 rows[2] = {q0 + wr + g, q0 + wr + g + 8};
    const float sl2 = (float)p.scale * LOG2E;
    // Per-lane shared offsets (elements) of the ldmatrix rows, tile-relative.
    const int k_off = ((lane >> 4) * 8 + (lane & 7)) * P + ((lane >> 3) & 1) * 8;
    const int v_off = (lane & 15) * P + (lane >> 4) * 8;

    int buf = 0;
    for (i64 kv0 = 0; kv0 < kv_end; kv0 += MMA_BN, buf ^= 1) {
        const i64 next = kv0 + MMA_BN;
        if (next < kv_end) {
            load_tile<E, MMA_BN, MMA_NT, FAST>(Ks + (buf ^ 1) * TILE, K, next, p.lk, p.ks[2], p.ks[3], tid);
            load_tile<E, MMA_BN, MMA_NT, FAST>(Vs + (buf ^ 1) * TILE, V, next, p.lk, p.vs[2], p.vs[3], tid);
        }
        cp_async_commit();
        // With `causal`, a tile whose first key lies past the warp's last
        // row is masked for all of its rows: nothing to do.
        const bool active = !(p.causal && kv0 > q0 + wr + 15);
        if (active) {
            const unsigned kb = smem_addr(Ks + buf * TILE + k_off);
            const unsigned vb = smem_addr(Vs + buf * TILE + v_off);
            float s[NS][4];
#pragma unroll
            for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
                for (int jp = 0; jp < NS / 2; ++jp) {
                    unsigned r[4];
                    ldsm_x4(r, kb + (unsigned)((jp * 16 * P + kk * 16) * 2));
                    mma16816<BF16>(s[2 * jp], qf[kk], r[0], r[1]);
                    mma16816<BF16>(s[2 * jp + 1], qf[kk], r[2], r[3]);
                }
            }

            float mx[2] = {(-ATTN_INF), (-ATTN_INF)};
            const bool need_mask = kv0 + MMA_BN > p.lk || (p.causal && kv0 + MMA_BN - 1 > q0 + wr);
            if (need_mask || Bias) {
                mask_scores<Half<BF16>>(s, mx, p, Bias, rows, kv0, t4, sl2, true);
            } else {
#pragma unroll
                for (int j = 0; j < NS; ++j) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        s[j][c] *= sl2;
                        mx[c >> 1] = fmaxf(mx[c >> 1], s[j][c]);
                    }
                }
            }
            float mu[2];
            rescale_rows(mx, m, l, o, mu);
            exp_scores(s, mu, l);
#pragma unroll
            for (int kk = 0; kk < MMA_BN / 16; ++kk) {
                unsigned a[4];
                a[0] = pack2<BF16>(s[2 * kk][0], s[2 * kk][1]);
                a[1] = pack2<BF16>(s[2 * kk][2], s[2 * kk][3]);
                a[2] = pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int dp = 0; dp < NO / 2; ++dp) {
                    unsigned r[4];
                    ldsm_x4_trans(r, vb + (unsigned)((kk * 16 * P + dp * 16) * 2));
                    mma16816<BF16>(o[2 * dp], a, r[0], r[1]);
                    mma16816<BF16>(o[2 * dp + 1], a, r[2], r[3]);
                }
            }
        }
        cp_async_wait_all();
        __syncthreads();
    }

    finish_rows<u16, MMA_BM, MMA_NT, true>(p, b, h, q0, tid, t4, rows, o, m, l,
                                           [&](u16* orow, int e, float v0, float v1) {
                                               if (FAST) {
                                                   // out's last dimension is contiguous and its strides even.
                                                   *reinterpret_cast<unsigned*>(orow + e) = pack2<BF16>(v0, v1);
                                               } else {
                                                   orow[e * p.os[3]] = Half<BF16>::from_float(v0);
                                                   orow[(e + 1) * p.os[3]] = Half<BF16>::from_float(v1);
                                               }
                                           });
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------
// f32: FMA.
//
// 4 threads per query row (each holds E / 4 of the row's q and output,
// dimensions t4, t4 + 4, ...), 32 rows a block, key tiles of 32 in shared
// memory ([key][e], 2 * 32 * E * 4 bytes: 32 KiB at E = 128). A tile's
// scores are reduced across the 4 threads (shuffles), so each of them holds
// the whole row of 32 scores and runs the same online softmax.
// ---------------------------------------------------------------------------

#define F32_TPR 4
#define F32_BM (NT / F32_TPR)
#define F32_BN 32

template <int E>
__device__ void attn_f32(const AttnParams& p) {
    constexpr int EP = E / F32_TPR;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* Ks = reinterpret_cast<float*>(smem_raw);
    float* Vs = Ks + F32_BN * E;

    const int tid = threadIdx.x, r = tid / F32_TPR, t4 = tid % F32_TPR;
    const i64 b = blockIdx.z, h = blockIdx.y, q0 = (i64)blockIdx.x * F32_BM;
    const i64 row = q0 + r;
    const float *Q, *K, *V, *Bias;
    head_inputs(p, b, h, Q, K, V, Bias);

    float q[EP], o[EP];
#pragma unroll
    for (int i = 0; i < EP; ++i) {
        q[i] = row < p.lq ? Q[row * p.qs[2] + (i64)(t4 + F32_TPR * i) * p.qs[3]] : 0.f;
        o[i] = 0.f;
    }
    float m = (-ATTN_INF), l = 0.f;
    const float sl2 = (float)p.scale * LOG2E;
    const i64 kv_end = kv_limit<F32_BM>(p, q0);

    for (i64 kv0 = 0; kv0 < kv_end; kv0 += F32_BN) {
        for (int i = tid; i < F32_BN * E; i += NT) {
            const int n = i / E, c = i % E;
            const i64 key = kv0 + n;
            const bool ok = key < p.lk;
            Ks[i] = ok ? K[key * p.ks[2] + c * p.ks[3]] : 0.f;
            Vs[i] = ok ? V[key * p.vs[2] + c * p.vs[3]] : 0.f;
        }
        __syncthreads();
        float s[F32_BN];
        float mx = (-ATTN_INF);
#pragma unroll
        for (int n = 0; n < F32_BN; ++n) {
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < EP; ++i) acc = fmaf(q[i], Ks[n * E + t4 + F32_TPR * i], acc);
            acc = quad_sum(acc);
            const i64 key = kv0 + n;
            const bool ok = key < p.lk && (!p.causal || key <= row);
            float x = acc * sl2;
            if (ok && Bias && row < p.lq) x += Bias[row * p.bs[2] + key * p.bs[3]] * LOG2E;
            s[n] = ok ? x : (-ATTN_INF);
            mx = fmaxf(mx, s[n]);
        }
        float mu;
        const float alpha = raise_max(m, mx, mu);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < EP; ++i) o[i] *= alpha;
#pragma unroll
        for (int n = 0; n < F32_BN; ++n) {
            const float e = exp2f(s[n] - mu);
            l += e;
#pragma unroll
            for (int i = 0; i < EP; ++i) o[i] = fmaf(e, Vs[n * E + t4 + F32_TPR * i], o[i]);
        }
        __syncthreads();
    }

    float *Out, *Lse;
    head_outputs(p, b, h, Out, Lse);
    if (row < p.lq) {
        const RowEnd end = row_end(p, m, l);
#pragma unroll
        for (int i = 0; i < EP; ++i)
            Out[row * p.os[2] + (i64)(t4 + F32_TPR * i) * p.os[3]] = end.empty ? end.fill : o[i] * end.inv;
        if (Lse && t4 == 0) Lse[row * p.ls[2]] = row_lse(p, end, m, l);
    } else if (Lse && t4 == 0 && row < p.lse_len) {
        Lse[row * p.ls[2]] = ATTN_INF;
    }
}


// ---------------------------------------------------------------------------
// f32 on tensor cores: 3xTF32 (as PyTorch's memory-efficient attention does
// for fp32, CUTLASS's OpMultiplyAddFastF32): every product a * b is
// big(a) big(b) + big(a) small(b) + small(a) big(b) (`split_tf32`), on
// mma.sync m16n8k8 with fp32 accumulators, which keeps fp32 accuracy.
//
// TC_WARPS = 4 warps of 16 query rows (64 rows a block), key tiles of
// BN = TC_BN(E). Shared memory (fp32): Qs [64][E + 4], Ks [BN][E + 4] (read
// with ldmatrix: a pitch of E + 4 floats puts the 8 rows of an ldmatrix phase
// on distinct 16-byte bank groups), Vs [BN][E + 4] (read element-wise, rows
// 2 t4 and 2 t4 + 1: a pitch of 4 mod 32 banks keeps the 32 lanes' reads
// conflict-free). P stays in registers; `shared_layout` in attention.rs
// computes the total.
//
// m16n8k8 tf32 fragments (lane = 4 g + t4):
//  A (16x8 row): a0 = A[g][t4], a1 = A[g+8][t4], a2 = A[g][t4+4], a3 = A[g+8][t4+4].
//  B (8x8 col, B[k][n]): b0 = B[t4][g], b1 = B[t4+4][g].
//  C (16x8): c0, c1 = C[g][2t4, 2t4+1]; c2, c3 = C[g+8][2t4, 2t4+1].
//  ldmatrix.x4 on 32-bit elements: register i of lane l is element
//    [l >> 2][l & 3] of the 8x4 block whose rows lanes 8i..8i+7 address.
//  A from Qs: blocks (rows 0-7, cols 0-3), (8-15, 0-3), (0-7, 4-7),
//    (8-15, 4-7) -> lane l addresses row (l & 7) + 8 ((l >> 3) & 1), col 4 (l >> 4).
//  B of S from Ks (B[e][key] = K[key][e]): for key tiles 2jp, 2jp+1, blocks
//    (keys 16jp+0-7, e 0-3), (16jp+0-7, e 4-7), (16jp+8-15, e 0-3),
//    (16jp+8-15, e 4-7) -> lane l addresses key 16jp + 8 (l >> 4) + (l & 7),
//    e 4 ((l >> 3) & 1); registers b0, b1 of tile 2jp, b0, b1 of tile 2jp+1.
//  B of O from Vs (B[key][e] = V[key][e]): b0 = V[t4][g], b1 = V[t4+4][g].
// ---------------------------------------------------------------------------

#define TC_WARPS 4
#define TC_NT (TC_WARPS * 32)
#define TC_BM (TC_WARPS * 16)
#define TC_BN(E) ((E) <= 64 ? 64 : 32)

#if __CUDA_ARCH__ >= 800
// x as big + small TF32 parts, as CUTLASS's FastF32 (PyTorch's fp32
// memory-efficient attention) splits them: big = x truncated to TF32, small =
// x - big (exact) plus half a TF32 ulp in its bits; the tensor core
// truncates each operand to TF32, so small enters rounded half away from
// zero. Integer and fp32 ops only (cvt.rna.tf32 issues at a quarter rate).
__device__ __forceinline__ void split_tf32(float x, unsigned& big, unsigned& small) {
    big = __float_as_uint(x) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big)) + 0x1000u;
}

__device__ __forceinline__ void mma1688(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A operand (raw fp32 bits) as big and small TF32 parts, split once and
// reused by every n-tile of a k-step.
struct SplitA {
    unsigned big[4], small[4];
};

__device__ __forceinline__ SplitA split_a(const unsigned a[4]) {
    SplitA r;
#pragma unroll
    for (int i = 0; i < 4; ++i) split_tf32(__uint_as_float(a[i]), r.big[i], r.small[i]);
    return r;
}

// c += a b in 3xTF32 (b given as raw fp32 bits).
__device__ __forceinline__ void mma3xtf32(float c[4], const SplitA& a, unsigned b0, unsigned b1) {
    unsigned bb0, bs0, bb1, bs1;
    split_tf32(__uint_as_float(b0), bb0, bs0);
    split_tf32(__uint_as_float(b1), bb1, bs1);
    mma1688(c, a.small, bb0, bb1);
    mma1688(c, a.big, bs0, bs1);
    mma1688(c, a.big, bb0, bb1);
}

// fp32 rows into a tile of pitch PITCH.
template <int E, int NROWS, int PITCH, bool FAST, int NTH = TC_NT>
__device__ __forceinline__ void load_tile_f32(float* dst, const float* src, i64 r0, i64 rend, i64 rs, i64 cs,
                                              int tid) {
    load_rows<float, E, NROWS, PITCH, NTH, FAST>(dst, src, r0, rend, rs, cs, tid);
}

// The barrier of one key group (TC_NT threads): named barrier 1 + group,
// or the whole block when there is one group.
template <int SPLIT>
__device__ __forceinline__ void group_sync(int group) {
    if (SPLIT == 1) {
        __syncthreads();
    } else {
        asm volatile("bar.sync %0, %1;\n" ::"r"(group + 1), "n"(TC_NT) : "memory");
    }
}
#endif

// SPLIT key groups of TC_WARPS warps share a block's 64 query rows: group
// g runs the g-th part of the key tiles with its own K and V tiles, and
// group 0 merges the others' partial (O, m, l) at the end (for grids too
// small to fill the GPU).
template <int E, bool FAST, int SPLIT>
__device__ void attn_f32_tc(const AttnParams& p) {
#if __CUDA_ARCH__ >= 800
    constexpr int QP = E + 4, VP = E + 4;
    // Keys per tile: 32 above E = 64, so that three blocks fit on an SM.
    constexpr int BN = TC_BN(E);
    constexpr int NS = BN / 8;  // n-tiles of S
    constexpr int NO = E / 8;      // n-tiles of O
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int group = threadIdx.x / TC_NT;
    const int tid = threadIdx.x % TC_NT, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    float* Qs = reinterpret_cast<float*>(smem_raw);
    float* Ks = Qs + TC_BM * QP + group * 2 * BN * QP;
    float* Vs = Ks + BN * QP;

    i64 b, h;
    const i64 q0 = block_coords<TC_BM>(p.causal, b, h);
    const float *Q, *K, *V, *Bias;
    head_inputs(p, b, h, Q, K, V, Bias);
    i64 kv_end = kv_limit<TC_BM>(p, q0);
    // This group's key tiles.
    const i64 tiles = (kv_end + BN - 1) / BN;
    const i64 kv_begin = tiles * group / SPLIT * BN;
    if (SPLIT > 1) kv_end = min(kv_end, tiles * (group + 1) / SPLIT * BN);

    load_tile_f32<E, TC_BM, QP, FAST, TC_NT * SPLIT>(Qs, Q, q0, p.lq, p.qs[2], p.qs[3], threadIdx.x);

    const int wr = warp * 16;
    float o[NO][4], m[2], l[2];
    start_rows(o, m, l);
    const i64 rows[2] = {q0 + wr + g, q0 + wr + g + 8};
    const float sl2 = (float)p.scale * LOG2E;
    const int a_off = ((lane & 7) + 8 * ((lane >> 3) & 1)) * QP + 4 * (lane >> 4);
    const int k_off = (8 * (lane >> 4) + (lane & 7)) * QP + 4 * ((lane >> 3) & 1);

    // Copies overlap compute: V of a tile loads while S = Q K^T is computed,
    // and K of the next tile while O += P V is. Q and the first K are one group.
    if (kv_begin < kv_end) load_tile_f32<E, BN, QP, FAST>(Ks, K, kv_begin, p.lk, p.ks[2], p.ks[3], tid);
    cp_async_commit();
    if (SPLIT > 1) {
        // Every group reads the whole Q tile, which all groups load.
        cp_async_wait_all();
        __syncthreads();
    }
    for (i64 kv0 = kv_begin; kv0 < kv_end; kv0 += BN) {
        load_tile_f32<E, BN, VP, FAST>(Vs, V, kv0, p.lk, p.vs[2], p.vs[3], tid);
        cp_async_commit();
        cp_async_wait_one();  // Q and this tile's K
        group_sync<SPLIT>(group);
        const bool active = !(p.causal && kv0 > q0 + wr + 15);
        float s[NS][4];  // S, then P (kept in registers for O += P V)
        if (active) {
#pragma unroll
            for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < E / 8; ++kk) {
                unsigned raw[4];
                ldsm_x4(raw, smem_addr(Qs + wr * QP + kk * 8 + a_off));
                const SplitA a = split_a(raw);
#pragma unroll
                for (int jp = 0; jp < NS / 2; ++jp) {
                    unsigned r[4];
                    ldsm_x4(r, smem_addr(Ks + jp * 16 * QP + kk * 8 + k_off));
                    mma3xtf32(s[2 * jp], a, r[0], r[1]);
                    mma3xtf32(s[2 * jp + 1], a, r[2], r[3]);
                }
            }
            float mx[2] = {(-ATTN_INF), (-ATTN_INF)};
            const bool need_mask = kv0 + BN > p.lk || (p.causal && kv0 + BN - 1 > q0 + wr);
            mask_scores<F32>(s, mx, p, Bias, rows, kv0, t4, sl2, need_mask);
            float mu[2];
            rescale_rows(mx, m, l, o, mu);
            exp_scores(s, mu, l);
        }
        group_sync<SPLIT>(group);  // every warp is done with Ks
        if (kv0 + BN < kv_end) {
            load_tile_f32<E, BN, QP, FAST>(Ks, K, kv0 + BN, p.lk, p.ks[2], p.ks[3], tid);
        }
        cp_async_commit();
        cp_async_wait_one();  // this tile's V
        group_sync<SPLIT>(group);
        if (active) {
            // P's accumulator fragment is the A operand of O += P V once the
            // keys of each 8-key step are taken in the order 0 2 4 6 1 3 5 7:
            // A[g][t4] = S[g][2 t4] (c0), A[g + 8][t4] = c2, A[g][t4 + 4] =
            // S[g][2 t4 + 1] (c1), A[g + 8][t4 + 4] = c3; B's rows follow
            // (b0 = V[2 t4][g], b1 = V[2 t4 + 1][g]).
#pragma unroll
            for (int kk = 0; kk < NS; ++kk) {
                const unsigned raw[4] = {__float_as_uint(s[kk][0]), __float_as_uint(s[kk][2]),
                                         __float_as_uint(s[kk][1]), __float_as_uint(s[kk][3])};
                const SplitA a = split_a(raw);
                const float* v0 = Vs + (kk * 8 + 2 * t4) * VP + g;
#pragma unroll
                for (int d = 0; d < NO; ++d) {
                    mma3xtf32(o[d], a, __float_as_uint(v0[d * 8]), __float_as_uint(v0[VP + d * 8]));
                }
            }
        }
        group_sync<SPLIT>(group);
    }

    if (SPLIT > 1) {
        // Groups 1.. leave (O, m, l) in their own K / V tiles and the Q tile
        // (fragment order, so the thread of group 0 with the same index reads
        // its own elements); group 0 rescales and adds them.
        cp_async_wait_all();
        for (int r = 0; r < 2; ++r) l[r] = quad_sum(l[r]);
        __syncthreads();  // every group is done with Q and its tiles
        float* ml = Qs + (group - 1) * 4 * TC_NT;
        if (group > 0) {
#pragma unroll
            for (int d = 0; d < NO; ++d)
#pragma unroll
                for (int c = 0; c < 4; ++c) Ks[(d * 4 + c) * TC_NT + tid] = o[d][c];
            ml[tid] = m[0], ml[TC_NT + tid] = m[1], ml[2 * TC_NT + tid] = l[0], ml[3 * TC_NT + tid] = l[1];
        }
        __syncthreads();
        if (group > 0) return;
#pragma unroll
        for (int other = 1; other < SPLIT; ++other) {
            const float* os = Qs + TC_BM * QP + other * 2 * BN * QP;
            const float* mo = Qs + (other - 1) * 4 * TC_NT;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float m1 = mo[r * TC_NT + tid], l1 = mo[(2 + r) * TC_NT + tid];
                float mu;
                const float a0 = raise_max(m[r], m1, mu), a1 = exp2f(m1 - mu);
                l[r] = l[r] * a0 + l1 * a1;
#pragma unroll
                for (int d = 0; d < NO; ++d) {
                    o[d][2 * r] = o[d][2 * r] * a0 + os[(d * 4 + 2 * r) * TC_NT + tid] * a1;
                    o[d][2 * r + 1] = o[d][2 * r + 1] * a0 + os[(d * 4 + 2 * r + 1) * TC_NT + tid] * a1;
                }
            }
        }
    }

    finish_rows<float, TC_BM, TC_NT, SPLIT == 1>(p, b, h, q0, tid, t4, rows, o, m, l,
                                                 [&](float* orow, int e, float v0, float v1) {
                                                     orow[e * p.os[3]] = v0;
                                                     orow[(e + 1) * p.os[3]] = v1;
                                                 });
#else
    __trap();
#endif
}

// One kernel entry point: NAME, at most NTH threads a block, running BODY.
#define ATTN_KERNEL(NAME, NTH, BODY) \
    extern "C" __global__ void __launch_bounds__(NTH) NAME(AttnParams p) { BODY(p); }

#define ATTN_INSTANCES(E)                                                  \
    ATTN_KERNEL(attn_f32_e##E, NT, attn_f32<E>)                            \
    ATTN_KERNEL(attn_f16_e##E, MMA_NT, (attn_mma<false, E, false>))        \
    ATTN_KERNEL(attn_bf16_e##E, MMA_NT, (attn_mma<true, E, false>))        \
    ATTN_KERNEL(attn_f16_fast_e##E, MMA_NT, (attn_mma<false, E, true>))    \
    ATTN_KERNEL(attn_bf16_fast_e##E, MMA_NT, (attn_mma<true, E, true>))    \
    ATTN_KERNEL(attn_f32tc_e##E, TC_NT, (attn_f32_tc<E, false, 1>))        \
    ATTN_KERNEL(attn_f32tc_fast_e##E, TC_NT, (attn_f32_tc<E, true, 1>))    \
    ATTN_KERNEL(attn_f32tc_s2_e##E, 2 * TC_NT, (attn_f32_tc<E, false, 2>)) \
    ATTN_KERNEL(attn_f32tc_s2_fast_e##E, 2 * TC_NT, (attn_f32_tc<E, true, 2>))

// One head dim per compilation: the host prepends `#define ATTN_E <E>`.
#define ATTN_INSTANCES_FOR(E) ATTN_INSTANCES(E)
ATTN_INSTANCES_FOR(ATTN_E)
