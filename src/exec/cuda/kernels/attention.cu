// Fused scaled-dot-product attention (forward, inference): one pass over the
// keys per tile of queries with an online softmax (running row max and sum),
// fp32 accumulation, nothing of size L x S ever written to memory.
//
// Compiled with NVRTC at first use, separately from builtin.cu. Kernels:
//   attn_f16_e<E>, attn_bf16_e<E>  tensor cores (mma.sync m16n8k16, sm_80+)
//   attn_f32_e<E>                  FMA
// for head dims E in {16, 32, 64, 80, 96, 128}, one head dim per NVRTC
// compilation (ATTN_E, defined by the host), so a model pays for the head
// dims it uses only.
//
// Layout: grid (ceil(L / rows per block), H, B), 128 threads, dynamic shared
// memory as `attn_shared_bytes` in attention.rs computes it. Every tensor is
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
// f16 / bf16: tensor cores.
//
// 4 warps, 16 query rows each (64 rows a block), key tiles of 64. A block
// loads its Q tile through shared memory into registers (A fragments), then
// per key tile: K tile to shared memory row-major ([key][e], rows padded by 8
// elements so fragment loads hit distinct banks), V tile transposed
// ([e][key], rows padded by 2); S = Q K^T on mma.sync (fp32 accumulators),
// scale / bias / masks and the online softmax on the accumulators, P
// rounded to the input type and reused in registers as the A operand of
// O += P V. Shared memory: (64 * (E + 8) + E * 66) * 2 bytes (the Q tile
// reuses the K tile's space): 34 KiB at E = 128.
// ---------------------------------------------------------------------------

#define MMA_BM 64
#define MMA_BN 64

#if __CUDA_ARCH__ >= 800
template <bool BF16>
__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], const unsigned b[2]);

template <>
__device__ __forceinline__ void mma16816<false>(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma16816<true>(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

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
#endif

__device__ __forceinline__ unsigned ld32(const u16* p) { return *reinterpret_cast<const unsigned*>(p); }

template <bool BF16, int E>
__device__ void attn_mma(const AttnParams& p) {
#if __CUDA_ARCH__ >= 800
    constexpr int KP = E + 8;       // row pitch of the Q / K tiles (elements)
    constexpr int VP = MMA_BN + 2;  // row pitch of the transposed V tile
    constexpr int KT = E / 16;      // k-steps of Q K^T
    constexpr int NS = MMA_BN / 8;  // n-tiles of S
    constexpr int NO = E / 8;       // n-tiles of O
    extern __shared__ __align__(16) unsigned char smem_raw[];
    u16* Ks = reinterpret_cast<u16*>(smem_raw);
    u16* Vt = Ks + MMA_BN * KP;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const i64 b = blockIdx.z, h = blockIdx.y, q0 = (i64)blockIdx.x * MMA_BM;
    const i64 hk = h / p.group;
    const u16* Q = reinterpret_cast<const u16*>(p.q) + b * p.qs[0] + h * p.qs[1];
    const u16* K = reinterpret_cast<const u16*>(p.k) + b * p.ks[0] + hk * p.ks[1];
    const u16* V = reinterpret_cast<const u16*>(p.v) + b * p.vs[0] + hk * p.vs[1];
    const u16* Bias = p.bias ? reinterpret_cast<const u16*>(p.bias) + b * p.bs[0] + h * p.bs[1] : 0;

    for (int i = tid; i < MMA_BM * E; i += NT) {
        const int r = i / E, c = i % E;
        const i64 row = q0 + r;
        Ks[r * KP + c] = row < p.lq ? Q[row * p.qs[2] + c * p.qs[3]] : (u16)0;
    }
    __syncthreads();
    const int wr = warp * 16;
    unsigned qf[KT][4];
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        qf[kk][0] = ld32(&Ks[(wr + g) * KP + kk * 16 + t4 * 2]);
        qf[kk][1] = ld32(&Ks[(wr + g + 8) * KP + kk * 16 + t4 * 2]);
        qf[kk][2] = ld32(&Ks[(wr + g) * KP + kk * 16 + t4 * 2 + 8]);
        qf[kk][3] = ld32(&Ks[(wr + g + 8) * KP + kk * 16 + t4 * 2 + 8]);
    }
    __syncthreads();

    float o[NO][4];
#pragma unroll
    for (int d = 0; d < NO; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m[2] = {(-ATTN_INF), (-ATTN_INF)};
    float l[2] = {0.f, 0.f};
    const i64 rows[2] = {q0 + wr + g, q0 + wr + g + 8};
    const float sl2 = (float)p.scale * LOG2E;
    i64 kv_end = p.lk;
    if (p.causal && q0 + MMA_BM < kv_end) kv_end = q0 + MMA_BM;

    for (i64 kv0 = 0; kv0 < kv_end; kv0 += MMA_BN) {
        for (int i = tid; i < MMA_BN * E; i += NT) {
            const int n = i / E, c = i % E;
            const i64 key = kv0 + n;
            const bool ok = key < p.lk;
            Ks[n * KP + c] = ok ? K[key * p.ks[2] + c * p.ks[3]] : (u16)0;
            Vt[c * VP + n] = ok ? V[key * p.vs[2] + c * p.vs[3]] : (u16)0;
        }
        __syncthreads();

        float s[NS][4];
#pragma unroll
        for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
            for (int j = 0; j < NS; ++j) {
                unsigned bf[2];
                bf[0] = ld32(&Ks[(j * 8 + g) * KP + kk * 16 + t4 * 2]);
                bf[1] = ld32(&Ks[(j * 8 + g) * KP + kk * 16 + t4 * 2 + 8]);
                mma16816<BF16>(s[j], qf[kk], bf);
            }
        }

        float mx[2] = {(-ATTN_INF), (-ATTN_INF)};
#pragma unroll
        for (int j = 0; j < NS; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const i64 row = rows[c >> 1];
                const i64 col = kv0 + j * 8 + t4 * 2 + (c & 1);
                const bool ok = col < p.lk && (!p.causal || col <= row);
                float x = s[j][c] * sl2;
                if (ok && Bias && row < p.lq)
                    x += Half<BF16>::to_float(Bias[row * p.bs[2] + col * p.bs[3]]) * LOG2E;
                s[j][c] = ok ? x : (-ATTN_INF);
                mx[c >> 1] = fmaxf(mx[c >> 1], s[j][c]);
            }
        }
        float mu[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float mnew = fmaxf(m[r], mx[r]);
            mu[r] = mnew == (-ATTN_INF) ? 0.f : mnew;  // no exp(-inf - -inf)
            const float alpha = exp2f(m[r] - mu[r]);
            m[r] = mnew;
            l[r] *= alpha;
#pragma unroll
            for (int d = 0; d < NO; ++d) {
                o[d][2 * r] *= alpha;
                o[d][2 * r + 1] *= alpha;
            }
        }
#pragma unroll
        for (int j = 0; j < NS; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float e = exp2f(s[j][c] - mu[c >> 1]);
                s[j][c] = e;
                l[c >> 1] += e;
            }
        }
#pragma unroll
        for (int kk = 0; kk < MMA_BN / 16; ++kk) {
            unsigned a[4];
            a[0] = pack2<BF16>(s[2 * kk][0], s[2 * kk][1]);
            a[1] = pack2<BF16>(s[2 * kk][2], s[2 * kk][3]);
            a[2] = pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int d = 0; d < NO; ++d) {
                unsigned bf[2];
                bf[0] = ld32(&Vt[(d * 8 + g) * VP + kk * 16 + t4 * 2]);
                bf[1] = ld32(&Vt[(d * 8 + g) * VP + kk * 16 + t4 * 2 + 8]);
                mma16816<BF16>(o[d], a, bf);
            }
        }
        __syncthreads();
    }

    u16* Out = reinterpret_cast<u16*>(p.out) + b * p.os[0] + h * p.os[1];
    float* Lse = p.lse ? reinterpret_cast<float*>(p.lse) + b * p.ls[0] + h * p.ls[1] : 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const i64 row = rows[r];
        if (row >= p.lq) continue;
        const bool empty = m[r] == (-ATTN_INF);
        const float fill = (empty && p.lk > 0 && p.empty_mode == 0) ? __int_as_float(0x7fc00000) : 0.f;
        const float inv = empty ? 0.f : 1.f / l[r];
#pragma unroll
        for (int d = 0; d < NO; ++d) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int e = d * 8 + t4 * 2 + c;
                const float val = empty ? fill : o[d][2 * r + c] * inv;
                Out[row * p.os[2] + e * p.os[3]] = Half<BF16>::from_float(val);
            }
        }
        if (Lse && t4 == 0) {
            Lse[row * p.ls[2]] = empty ? (p.empty_mode == 0 ? (-ATTN_INF) : ATTN_INF) : (m[r] + log2f(l[r])) * LN2;
        }
    }
    if (Lse) {
        for (int r = tid; r < MMA_BM; r += NT) {
            const i64 row = q0 + r;
            if (row >= p.lq && row < p.lse_len) Lse[row * p.ls[2]] = ATTN_INF;
        }
    }
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
    const i64 hk = h / p.group;
    const i64 row = q0 + r;
    const float* Q = reinterpret_cast<const float*>(p.q) + b * p.qs[0] + h * p.qs[1];
    const float* K = reinterpret_cast<const float*>(p.k) + b * p.ks[0] + hk * p.ks[1];
    const float* V = reinterpret_cast<const float*>(p.v) + b * p.vs[0] + hk * p.vs[1];
    const float* Bias = p.bias ? reinterpret_cast<const float*>(p.bias) + b * p.bs[0] + h * p.bs[1] : 0;

    float q[EP], o[EP];
#pragma unroll
    for (int i = 0; i < EP; ++i) {
        q[i] = row < p.lq ? Q[row * p.qs[2] + (i64)(t4 + F32_TPR * i) * p.qs[3]] : 0.f;
        o[i] = 0.f;
    }
    float m = (-ATTN_INF), l = 0.f;
    const float sl2 = (float)p.scale * LOG2E;
    i64 kv_end = p.lk;
    if (p.causal && q0 + F32_BM < kv_end) kv_end = q0 + F32_BM;

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
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            const i64 key = kv0 + n;
            const bool ok = key < p.lk && (!p.causal || key <= row);
            float x = acc * sl2;
            if (ok && Bias && row < p.lq) x += Bias[row * p.bs[2] + key * p.bs[3]] * LOG2E;
            s[n] = ok ? x : (-ATTN_INF);
            mx = fmaxf(mx, s[n]);
        }
        const float mnew = fmaxf(m, mx);
        const float mu = mnew == (-ATTN_INF) ? 0.f : mnew;
        const float alpha = exp2f(m - mu);
        m = mnew;
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

    float* Out = reinterpret_cast<float*>(p.out) + b * p.os[0] + h * p.os[1];
    float* Lse = p.lse ? reinterpret_cast<float*>(p.lse) + b * p.ls[0] + h * p.ls[1] : 0;
    if (row < p.lq) {
        const bool empty = m == (-ATTN_INF);
        const float fill = (empty && p.lk > 0 && p.empty_mode == 0) ? __int_as_float(0x7fc00000) : 0.f;
        const float inv = empty ? 0.f : 1.f / l;
#pragma unroll
        for (int i = 0; i < EP; ++i) Out[row * p.os[2] + (i64)(t4 + F32_TPR * i) * p.os[3]] = empty ? fill : o[i] * inv;
        if (Lse && t4 == 0)
            Lse[row * p.ls[2]] = empty ? (p.empty_mode == 0 ? (-ATTN_INF) : ATTN_INF) : (m + log2f(l)) * LN2;
    } else if (Lse && t4 == 0 && row < p.lse_len) {
        Lse[row * p.ls[2]] = ATTN_INF;
    }
}

#define ATTN_INSTANCES(E)                                                                                       \
    extern "C" __global__ void __launch_bounds__(NT) attn_f32_e##E(AttnParams p) { attn_f32<E>(p); }           \
    extern "C" __global__ void __launch_bounds__(NT) attn_f16_e##E(AttnParams p) { attn_mma<false, E>(p); }    \
    extern "C" __global__ void __launch_bounds__(NT) attn_bf16_e##E(AttnParams p) { attn_mma<true, E>(p); }

// One head dim per compilation: the host prepends `#define ATTN_E <E>`.
#define ATTN_INSTANCES_FOR(E) ATTN_INSTANCES(E)
ATTN_INSTANCES_FOR(ATTN_E)
