// `aten.histc` for wrapir's CUDA backend, compiled with NVRTC as its own
// module, binning as PyTorch's CUDA kernel does (`SummaryOps.cu`,
// `kernelHistogram1D` and `getBin`): an element v with lo <= v <= hi goes
// to bin (int)((v - lo) * nbins / (hi - lo)), the last bin holding hi; the
// arithmetic is the input's accumulate type on CUDA (float for float,
// double for double, int64 for the integer types). Conventions as in
// builtin.cu: a tensor is a data pointer (its element 0) and an `Nd`
// descriptor; linear indices run in row-major order.
//
// Counts go to 64-bit integer slots by atomic adds (the order of the adds
// cannot change an integer sum), then `histc_write` converts each to the
// result's dtype: integers wrap as PyTorch's own integer atomics do, floats
// are exact while a bin holds fewer than 2^24 (float) elements.

// `i64`, `u64`, `Nd`, `nd_offset`, `grid_index`, `grid_step`: prelude.cuh, prepended.

#define MINMAX_THREADS 256

// The accumulate type of each input type (`at::acc_type<T, true>`).
template <typename T> struct Acc { typedef i64 type; };
template <> struct Acc<float> { typedef float type; };
template <> struct Acc<double> { typedef double type; };

template <typename T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }

// `self.min()` and `self.max()` of the elements that are not NaN, and
// whether any is NaN (then both are NaN in PyTorch), as three 8-byte slots
// of `out`: doubles for float inputs, int64 for integer ones. One block of
// MINMAX_THREADS threads; `n` > 0.
template <typename T, typename W>
__device__ void histc_minmax(const T* x, Nd xd, i64 n, W* out) {
    __shared__ W lo_s[MINMAX_THREADS];
    __shared__ W hi_s[MINMAX_THREADS];
    __shared__ int nan_s[MINMAX_THREADS];
    W lo = (W)x[nd_offset(xd, 0)], hi = lo;
    int nan = 0;
    // NaN fails every comparison: the first element, if NaN, is replaced by
    // the first number after it (the flag says a NaN was seen).
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        W v = (W)x[nd_offset(xd, i)];
        if (is_nan(v)) nan = 1;
        if (v < lo || is_nan(lo)) lo = v;
        if (v > hi || is_nan(hi)) hi = v;
    }
    lo_s[threadIdx.x] = lo;
    hi_s[threadIdx.x] = hi;
    nan_s[threadIdx.x] = nan;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int t = 1; t < (int)blockDim.x; ++t) {
            if (lo_s[t] < lo || is_nan(lo)) lo = lo_s[t];
            if (hi_s[t] > hi || is_nan(hi)) hi = hi_s[t];
            nan |= nan_s[t];
        }
        out[0] = lo;
        out[1] = hi;
        out[2] = (W)nan;
    }
}

// The bin counts of `x` over [lo, hi] into `counts` (nbins slots, zeroed).
template <typename T>
__device__ void histc_count(const T* x, Nd xd, i64 n, typename Acc<T>::type lo, typename Acc<T>::type hi,
                            i64 nbins, unsigned long long* counts) {
    typedef typename Acc<T>::type A;
    for (i64 i = grid_index(); i < n; i += grid_step()) {
        T v = x[nd_offset(xd, i)];
        if (v >= lo && v <= hi) {
            i64 bin = (int)(((v - lo)) * nbins / (hi - lo));
            if (bin == nbins) bin -= 1;
            // PyTorch's bins are in range for every input whose (v - lo) *
            // nbins does not overflow; others are not counted here.
            if (bin >= 0 && bin < nbins) atomicAdd(&counts[bin], 1ull);
        }
    }
}

// out[i] = counts[i] in the result's dtype (contiguous, nbins elements).
template <typename T>
__device__ void histc_write(const unsigned long long* counts, i64 nbins, T* out) {
    for (i64 i = grid_index(); i < nbins; i += grid_step()) out[i] = (T)counts[i];
}

#define FOR_EACH_HISTC_FLOAT(X) X(f32, float) X(f64, double)
#define FOR_EACH_HISTC_INT(X) X(i64, i64) X(i32, int) X(i16, short) X(i8, signed char) X(u8, unsigned char)

#define INST_HISTC(NAME, T, W)                                                                              \
    extern "C" __global__ void histc_minmax_##NAME(const T* x, Nd xd, i64 n, W* out) {                    \
        histc_minmax<T, W>(x, xd, n, out);                                                                 \
    }                                                                                                      \
    extern "C" __global__ void histc_count_##NAME(const T* x, Nd xd, i64 n, Acc<T>::type lo,               \
                                                  Acc<T>::type hi, i64 nbins, unsigned long long* counts) { \
        histc_count<T>(x, xd, n, lo, hi, nbins, counts);                                                   \
    }                                                                                                      \
    extern "C" __global__ void histc_write_##NAME(const unsigned long long* counts, i64 nbins, T* out) {   \
        histc_write<T>(counts, nbins, out);                                                                \
    }
#define INST_HISTC_FLOAT(NAME, T) INST_HISTC(NAME, T, double)
#define INST_HISTC_INT(NAME, T) INST_HISTC(NAME, T, i64)
FOR_EACH_HISTC_FLOAT(INST_HISTC_FLOAT)
FOR_EACH_HISTC_INT(INST_HISTC_INT)
