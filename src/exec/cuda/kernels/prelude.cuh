// What the built-in kernel sources share (prepended to builtin.cu and
// extra.cu, each compiled as its own module): a tensor is a data pointer
// (its element 0) and an `Nd` descriptor (sizes and strides in elements,
// the Rust side's `Nd`); linear indices run in row-major order. f16 and
// bf16 values are their bits (`unsigned short`), converted through float.

#define MAX_RANK 8

typedef long long i64;
typedef unsigned long long u64;

struct Nd {
    i64 size[MAX_RANK];
    i64 stride[MAX_RANK];
    i64 rank;
};

// Element offset of the row-major linear index `linear` in `d`.
__device__ __forceinline__ i64 nd_offset(const Nd& d, i64 linear) {
    i64 off = 0;
    for (int i = (int)d.rank - 1; i >= 0; --i) {
        i64 s = d.size[i];
        off += (linear % s) * d.stride[i];
        linear /= s;
    }
    return off;
}

__device__ __forceinline__ i64 grid_index() {
    return (i64)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ i64 grid_step() {
    return (i64)gridDim.x * blockDim.x;
}

// ---------------------------------------------------------------- half types
struct f16 { unsigned short bits; };
struct bf16 { unsigned short bits; };

__device__ __forceinline__ float f16_to_float(unsigned short h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short float_to_f16(float f) {
    unsigned short h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf16_to_float(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short float_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (unsigned short)(u >> 16);
}

