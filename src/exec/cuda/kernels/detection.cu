// torchvision's detection ops for wrapir's CUDA backend (`roi_align`
// forward and `nms`), compiled with NVRTC as their own module, computing
// what torchvision's CUDA kernels compute (`torchvision/csrc/ops/cuda/
// roi_align_kernel.cu`, `nms_kernel.cu`): the same expressions in the same
// types and order, so that the compiler contracts them alike. Conventions
// as in builtin.cu: a tensor is a data pointer (its element 0) and an `Nd`
// descriptor (sizes and strides in elements); torchvision makes its inputs
// contiguous first, these kernels read them through their strides.

// `i64`, `u64`, `Nd`, `grid_index`, `grid_step`: prelude.cuh, prepended.

// Bits per mask word: the boxes one column block of the IoU mask covers.
#define NMS_BLOCK 64

// What a `roi_align` region got wrong, in the error slot (see `roi_fail`).
#define ROI_BAD_BATCH 0
#define ROI_GRID_TOO_LARGE 1

// Records that region `n` of `regions` failed with `kind`: the slot keeps
// the first such region (the largest `regions - n`) and, for it, the
// larger kind. 0 means none failed.
__device__ __forceinline__ void roi_fail(u64* slot, i64 n, i64 regions, int kind) {
    atomicMax(slot, ((u64)(regions - n) << 1) | (u64)kind);
}

// `bilinear_interpolate`: the value at (y, x) of one channel's plane (rows
// `sh` apart, columns `sw` apart); 0 outside [-1, height] x [-1, width]
// (NaN included).
template <typename T>
__device__ T roi_bilinear(const T* plane, i64 sh, i64 sw, int height, int width, T y, T x) {
    if (!(y >= -1.0 && y <= height && x >= -1.0 && x <= width)) {
        return 0;
    }
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int y_low = (int)y;
    int x_low = (int)x;
    int y_high;
    int x_high;
    if (y_low >= height - 1) {
        y_high = y_low = height - 1;
        y = (T)y_low;
    } else {
        y_high = y_low + 1;
    }
    if (x_low >= width - 1) {
        x_high = x_low = width - 1;
        x = (T)x_low;
    } else {
        x_high = x_low + 1;
    }
    T ly = y - y_low;
    T lx = x - x_low;
    T hy = 1. - ly, hx = 1. - lx;
    T v1 = plane[y_low * sh + x_low * sw];
    T v2 = plane[y_low * sh + x_high * sw];
    T v3 = plane[y_high * sh + x_low * sw];
    T v4 = plane[y_high * sh + x_high * sw];
    T w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
    T val = (w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4);
    return val;
}

// `roi_align_forward_kernel_impl`: one thread per element (n, c, ph, pw) of
// the contiguous [K, C, PH, PW] `out` (`total` elements), `input` [N, C, H,
// W] laid out by `xd`, `rois` [K, 5] by `rd`. A region whose batch index is
// outside [0, N), or whose sampling grid has more than `max_points` points
// a bin, is recorded in `fail` and its bins left 0 (the caller reports it).
template <typename T>
__device__ void roi_align(const T* input, Nd xd, const T* rois, Nd rd, T spatial_scale, int pooled_height,
                          int pooled_width, int sampling_ratio, int aligned, i64 max_points, i64 total, T* out,
                          u64* fail) {
    const i64 batch = xd.size[0];
    const int channels = (int)xd.size[1], height = (int)xd.size[2], width = (int)xd.size[3];
    const i64 regions = rd.size[0];
    for (i64 index = grid_index(); index < total; index += grid_step()) {
        int pw = (int)(index % pooled_width);
        int ph = (int)((index / pooled_width) % pooled_height);
        int c = (int)((index / pooled_width / pooled_height) % channels);
        i64 n = index / pooled_width / pooled_height / channels;
        out[index] = 0;

        const T* offset_rois = rois + n * rd.stride[0];
        const i64 rs = rd.stride[1];
        int roi_batch_ind = offset_rois[0];
        if (roi_batch_ind < 0 || roi_batch_ind >= batch) {
            roi_fail(fail, n, regions, ROI_BAD_BATCH);
            continue;
        }

        T offset = aligned ? (T)0.5 : (T)0.0;
        T roi_start_w = offset_rois[1 * rs] * spatial_scale - offset;
        T roi_start_h = offset_rois[2 * rs] * spatial_scale - offset;
        T roi_end_w = offset_rois[3 * rs] * spatial_scale - offset;
        T roi_end_h = offset_rois[4 * rs] * spatial_scale - offset;

        T roi_width = roi_end_w - roi_start_w;
        T roi_height = roi_end_h - roi_start_h;
        if (!aligned) {
            // Malformed regions are forced to 1 x 1.
            roi_width = max(roi_width, (T)1.);
            roi_height = max(roi_height, (T)1.);
        }

        T bin_size_h = static_cast<T>(roi_height) / static_cast<T>(pooled_height);
        T bin_size_w = static_cast<T>(roi_width) / static_cast<T>(pooled_width);

        const T* plane = input + roi_batch_ind * xd.stride[0] + c * xd.stride[1];
        const i64 sh = xd.stride[2], sw = xd.stride[3];

        int roi_bin_grid_h = (sampling_ratio > 0) ? sampling_ratio : ceil(roi_height / pooled_height);
        int roi_bin_grid_w = (sampling_ratio > 0) ? sampling_ratio : ceil(roi_width / pooled_width);
        if (roi_bin_grid_h > 0 && roi_bin_grid_w > 0 && (i64)roi_bin_grid_h * roi_bin_grid_w > max_points) {
            roi_fail(fail, n, regions, ROI_GRID_TOO_LARGE);
            continue;
        }

        // An empty grid gives 0.
        const T count = max((i64)roi_bin_grid_h * roi_bin_grid_w, (i64)1);

        T output_val = 0.;
        for (int iy = 0; iy < roi_bin_grid_h; iy++) {
            const T y = roi_start_h + ph * bin_size_h +
                        static_cast<T>(iy + .5f) * bin_size_h / static_cast<T>(roi_bin_grid_h);
            for (int ix = 0; ix < roi_bin_grid_w; ix++) {
                const T x = roi_start_w + pw * bin_size_w +
                            static_cast<T>(ix + .5f) * bin_size_w / static_cast<T>(roi_bin_grid_w);
                T val = roi_bilinear(plane, sh, sw, height, width, y, x);
                output_val += val;
            }
        }
        output_val /= count;
        out[index] = output_val;
    }
}

// `dets.index_select(0, order).contiguous()`: the `n` boxes of `dets`
// (laid out by `dd`) in the order `order` gives, into contiguous `sorted`.
template <typename T>
__device__ void nms_gather(const T* dets, Nd dd, const i64* order, i64 n, T* sorted) {
    for (i64 i = grid_index(); i < n * 4; i += grid_step()) {
        i64 box = order[i / 4];
        sorted[i] = dets[box * dd.stride[0] + (i % 4) * dd.stride[1]];
    }
}

// `devIoU`: whether boxes `a` and `b` overlap by more than `threshold`.
template <typename T>
__device__ __forceinline__ bool nms_iou_above(const T* a, const T* b, float threshold) {
    T left = max(a[0], b[0]), right = min(a[2], b[2]);
    T top = max(a[1], b[1]), bottom = min(a[3], b[3]);
    T width = max(right - left, (T)0), height = max(bottom - top, (T)0);
    T interS = (T)width * height;
    T Sa = ((T)a[2] - a[0]) * (a[3] - a[1]);
    T Sb = ((T)b[2] - b[0]) * (b[3] - b[1]);
    return (interS / (Sa + Sb - interS)) > threshold;
}

// `nms_kernel_impl`'s mask, one word a thread: word `cb` of row `row` (of
// `col_blocks` a row) has bit i set when box `row` overlaps box
// `cb * 64 + i` by more than `threshold`, for the boxes after `row` only
// (words left of the row's own block are never read and not written).
template <typename T>
__device__ void nms_mask(const T* boxes, i64 n, i64 col_blocks, float threshold, u64* mask) {
    for (i64 item = grid_index(); item < n * col_blocks; item += grid_step()) {
        i64 row = item / col_blocks, cb = item % col_blocks;
        i64 row_block = row / NMS_BLOCK;
        if (cb < row_block) continue;
        i64 col_size = min(n - cb * NMS_BLOCK, (i64)NMS_BLOCK);
        i64 start = cb == row_block ? row % NMS_BLOCK + 1 : 0;
        const T* cur = boxes + row * 4;
        u64 t = 0;
        for (i64 i = start; i < col_size; i++) {
            if (nms_iou_above<T>(cur, boxes + (cb * NMS_BLOCK + i) * 4, threshold)) t |= 1ULL << i;
        }
        mask[item] = t;
    }
}

// `gather_keep_from_mask` and `order_t.masked_select(keep)` in one block:
// the boxes in score order, each kept unless an earlier kept box removed
// it; the kept boxes' original indices (`order`) go to `keep` in that
// order, their count to `count`. `removed` holds `col_blocks` zeroed words.
extern "C" __global__ void nms_keep(const u64* mask, i64 n, i64 col_blocks, volatile u64* removed, const i64* order,
                                    i64* keep, i64* count) {
    i64 kept = 0;
    for (i64 nb = 0; nb < col_blocks; nb++) {
        u64 removed_val = removed[nb];
        __syncthreads();
        for (int inblock = 0; inblock < NMS_BLOCK; inblock++) {
            const i64 i = nb * NMS_BLOCK + inblock;
            if (i >= n) break;
            if (!(removed_val & (1ULL << inblock))) {
                if (threadIdx.x == 0) keep[kept] = order[i];
                kept++;
                const u64* p = mask + i * col_blocks;
                for (i64 j = nb + threadIdx.x; j < col_blocks; j += blockDim.x) removed[j] |= p[j];
                __syncthreads();
                removed_val = removed[nb];
                __syncthreads();
            }
        }
    }
    if (threadIdx.x == 0) *count = kept;
}

#define FOR_EACH_DETECTION_TYPE(X) X(f32, float) X(f64, double)

#define INST_DETECTION(NAME, T)                                                                                \
    extern "C" __global__ void roi_align_##NAME(const T* input, Nd xd, const T* rois, Nd rd, T spatial_scale,  \
                                                int pooled_height, int pooled_width, int sampling_ratio,       \
                                                int aligned, i64 max_points, i64 total, T* out, u64* fail) {   \
        roi_align<T>(input, xd, rois, rd, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned, \
                     max_points, total, out, fail);                                                            \
    }                                                                                                          \
    extern "C" __global__ void nms_gather_##NAME(const T* dets, Nd dd, const i64* order, i64 n, T* sorted) {  \
        nms_gather<T>(dets, dd, order, n, sorted);                                                             \
    }                                                                                                          \
    extern "C" __global__ void nms_mask_##NAME(const T* boxes, i64 n, i64 col_blocks, float threshold,        \
                                               u64* mask) {                                                    \
        nms_mask<T>(boxes, n, col_blocks, threshold, mask);                                                    \
    }
FOR_EACH_DETECTION_TYPE(INST_DETECTION)
