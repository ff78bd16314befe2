// Sorting along one dimension (`aten.sort`, default and stable) for wrapir's
// CUDA backend, compiled with NVRTC as its own module. Conventions as in
// builtin.cu: a tensor is a data pointer (its element 0) and an `Nd`
// descriptor; linear indices run in row-major order.
//
// A tensor of shape [outer, len, inner] (the sort dimension in the middle)
// has rows = outer * inner lines of `len` elements. Each line's positions
// are sorted by a bitonic network over `p2` slots (the next power of two
// of len; the slots past len are padding, ordered last): one launch per
// step of the network, every line at once. Positions are compared by a
// total order (the value, NaN largest, reversed when descending; then the
// position), so the network's result is the stable order whatever its
// comparisons' order: the one `stable=True` asks for, and one of the orders
// an unstable sort may give.

// `i64`, `u64`, `Nd`, `nd_offset`, `grid_index`, `grid_step`, the half
// types: prelude.cuh, prepended.

struct boolean { unsigned char v; };

// A value as the key it is compared by: integers as themselves (exact for
// every i64), floats as float or double, f16 and bf16 through float.
template <typename T> __device__ __forceinline__ T sort_key(T v) { return v; }
__device__ __forceinline__ float sort_key(f16 v) { return f16_to_float(v.bits); }
__device__ __forceinline__ float sort_key(bf16 v) { return bf16_to_float(v.bits); }
__device__ __forceinline__ unsigned char sort_key(boolean v) { return v.v != 0; }

// `a` (at position p) goes before `b` (at position q): NaN is larger than
// every number (last ascending, first descending), equal keys keep their
// positions' order. `k != k` is false for the integer keys.
template <typename K>
__device__ __forceinline__ bool sort_before(K a, i64 p, K b, i64 q, int descending) {
    bool an = a != a, bn = b != b;
    if (an || bn) {
        if (an && bn) return p < q;
        return descending ? an : bn;
    }
    if (a < b) return !descending;
    if (b < a) return descending;
    return p < q;
}

// The linear index of element `j` of line `row` (see above).
__device__ __forceinline__ i64 sort_linear(i64 row, i64 j, i64 len, i64 inner) {
    return ((row / inner) * len + j) * inner + (row % inner);
}

// Position `p` of line `row` goes before position `q`: real positions
// before padding (p, q >= len), padding by position.
template <typename T>
__device__ __forceinline__ bool slot_before(const T* x, const Nd& xd, i64 row, i64 p, i64 q, i64 len, i64 inner,
                                            int descending) {
    if (p >= len) return q >= len && p < q;
    if (q >= len) return true;
    return sort_before(sort_key(x[nd_offset(xd, sort_linear(row, p, len, inner))]), p,
                       sort_key(x[nd_offset(xd, sort_linear(row, q, len, inner))]), q, descending);
}

// Every line's slots hold their own positions (0 .. p2 - 1).
extern "C" __global__ void sort_init(i64* slots, i64 total, i64 p2) {
    for (i64 t = grid_index(); t < total; t += grid_step()) slots[t] = t % p2;
}

// One step of the bitonic network: stage `k` (the size of the sequences
// being merged), distance `j`. Each thread takes one pair (lo, lo + j) of a
// line, lo with bit j clear; sequences whose `lo & k` is 0 are put in
// order, the others in reverse, so that stage 2k merges them.
template <typename T>
__device__ void sort_step(const T* x, Nd xd, i64* slots, i64 rows, i64 p2, i64 len, i64 inner, i64 j, i64 k,
                          int descending) {
    i64 half = p2 / 2, pairs = rows * half;
    for (i64 t = grid_index(); t < pairs; t += grid_step()) {
        i64 row = t / half, h = t % half;
        i64 lo = (h / j) * 2 * j + h % j, hi = lo + j;
        i64* line = slots + row * p2;
        i64 a = line[lo], b = line[hi];
        bool swap = slot_before(x, xd, row, b, a, len, inner, descending);
        if ((lo & k) != 0) swap = !swap;
        if (swap) {
            line[lo] = b;
            line[hi] = a;
        }
    }
}

// values[.., r, ..] = x[.., slots[r], ..] and indices[.., r, ..] = slots[r]
// for the first `len` slots of every line (each output by its descriptor).
template <typename T>
__device__ void sort_write(const T* x, Nd xd, const i64* slots, i64 rows, i64 p2, i64 len, i64 inner, T* values,
                           Nd vd, i64* indices, Nd id) {
    i64 n = rows * len;
    for (i64 t = grid_index(); t < n; t += grid_step()) {
        i64 row = t / len, r = t % len;
        i64 j = slots[row * p2 + r];
        i64 to = sort_linear(row, r, len, inner);
        values[nd_offset(vd, to)] = x[nd_offset(xd, sort_linear(row, j, len, inner))];
        indices[nd_offset(id, to)] = j;
    }
}

#define FOR_EACH_SORTABLE(X) \
    X(f32, float) X(f64, double) X(f16, f16) X(bf16, bf16) X(i64, i64) X(i32, int) X(i16, short) \
    X(i8, signed char) X(u8, unsigned char) X(bool, boolean)

#define INST_SORT(NAME, T)                                                                                   \
    extern "C" __global__ void sort_step_##NAME(const T* x, Nd xd, i64* slots, i64 rows, i64 p2, i64 len,     \
                                                i64 inner, i64 j, i64 k, int descending) {                    \
        sort_step<T>(x, xd, slots, rows, p2, len, inner, j, k, descending);                                  \
    }                                                                                                        \
    extern "C" __global__ void sort_write_##NAME(const T* x, Nd xd, const i64* slots, i64 rows, i64 p2,       \
                                                 i64 len, i64 inner, T* values, Nd vd, i64* indices, Nd id) { \
        sort_write<T>(x, xd, slots, rows, p2, len, inner, values, vd, indices, id);                          \
    }
FOR_EACH_SORTABLE(INST_SORT)
