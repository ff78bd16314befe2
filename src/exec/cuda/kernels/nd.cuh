// What every built-in kernel source shares (prepended to builtin.cu and
// extra.cu, each compiled as its own module): a tensor is a data pointer
// (its element 0) and an `Nd` descriptor (sizes and strides in elements,
// the Rust side's `Nd`); linear indices run in row-major order.

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

