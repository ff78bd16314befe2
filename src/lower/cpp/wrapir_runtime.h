// wrapir_runtime.h: the runtime of wrapir's standalone C++ wrappers.
//
// Needs only the CUDA driver API (<cuda.h>, link with -lcuda) and the C++17
// standard library; no libtorch.
//
// * wrapir::Tensor: a strided view of device or host memory. Storage is
//   reference counted (views and copies share it) and released when the last
//   reference goes away: device memory with cuMemFreeAsync on the stream it was
//   allocated on, host memory with std::free. Tensors made by
//   wrapir::Tensor::borrow() / borrow_host() never free their memory.
// * Device allocation is stream ordered (cuMemAllocAsync); host allocation
//   (wrapir::empty_strided_host, for CPU buffers and C++/Halide CPU kernels)
//   is 64-byte aligned std::aligned_alloc. data_ptr() is the address as an
//   integer for both.
// * Halide kernels take halide_buffer_t arguments. This header declares
//   ABI-compatible halide_type_t / halide_dimension_t / halide_buffer_t and
//   halide_cuda_device_interface(); define WRAPIR_USE_HALIDE_RUNTIME_H to use
//   Halide's own HalideRuntime.h and HalideRuntimeCuda.h instead.
// * Kernels are loaded from cubin files (cuModuleLoad + cuModuleGetFunction)
//   and launched with 32 * num_warps threads per block.
// * Compiled host kernels (a bundle's kernels/<kernel>.so, the objects
//   wrapir's host backend runs) are opened with dlopen, once per image
//   (wrapir::host_image), and called through their C ABI: C++ kernels'
//   `int wrapir_kernel_argv(void** args)` (wrapir::host_kernel), Halide
//   kernels' own `<kernel>` function (wrapir::host_symbol).
// * WRAPIR_HOST_ONLY (defined by wrappers of programs that use no CUDA
//   device): <cuda.h> is not included and nothing links the driver; the
//   driver calls below become stand-ins that fail with
//   CUDA_ERROR_NOT_SUPPORTED.
// * WRAPIR_PACKAGE_FROM_EXE (defined by a package's CMake project: the
//   package directory relative to the executable's, such as ".."): the
//   kernels and the package's files are read from that directory as found
//   at run time from the executable's own path (wrapir::dir_from_executable),
//   so a built package keeps working when its folder moves.
// * Every driver call is checked; a failure throws wrapir::Error naming the call.
// * Extern (ATen) ops run in wrapir's runtime library (libwrapir_runtime,
//   whose C ABI, wrapir_rt.h, is pasted in front of this header): the
//   generated wrapper calls wrapir::call_op with the op's name and its
//   arguments as wrapir::ExternArg values; link with -lwrapir_runtime.
//   Tensors the runtime returns are released through it with their last
//   reference.
#pragma once

#if !defined(WRAPIR_HOST_ONLY)
#include <cuda.h>
#else
// No CUDA: the driver API's types, and stand-ins for the calls this header
// makes, failing as a machine without a driver would.
#include <cstddef>
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUstream_st* CUstream;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef enum { CUDA_SUCCESS = 0, CUDA_ERROR_NOT_SUPPORTED = 801 } CUresult;
enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };
inline CUresult cuGetErrorName(CUresult, const char** name) {
  *name = "CUDA_ERROR_NOT_SUPPORTED";
  return CUDA_SUCCESS;
}
inline CUresult cuGetErrorString(CUresult, const char** text) {
  *text = "built with WRAPIR_HOST_ONLY: no CUDA device";
  return CUDA_SUCCESS;
}
inline CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuMemFreeAsync(CUdeviceptr, CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuMemcpyDtoHAsync(void*, CUdeviceptr, size_t, CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuStreamSynchronize(CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuDeviceGet(CUdevice*, int) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuCtxSetCurrent(CUcontext) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuModuleLoad(CUmodule*, const char*) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuFuncSetAttribute(CUfunction, int, int) { return CUDA_ERROR_NOT_SUPPORTED; }
inline CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                               unsigned int, unsigned int, CUstream, void**, void**) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
#endif

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// The 16-bit float element types Inductor's C++ kernels name in their
// signatures (`arg_types`), as incomplete types: the wrapper only passes
// pointers to them to the kernels' compiled images.
namespace at {
struct BFloat16;
struct Half;
}  // namespace at
namespace c10 {
struct BFloat16;
struct Half;
}  // namespace c10

namespace wrapir {

/// The directory of the running executable (read from /proc/self/exe) joined
/// with `relative` ("" or ".." or "../pkg"): where a relocatable package's
/// files are, wherever the package was moved. The first call's answer is
/// kept; "." (the working directory) when the executable's path cannot be read.
inline const char* dir_from_executable(const char* relative) {
  static const std::string dir = [relative] {
    std::string exe(4096, '\0');
    const ssize_t n = readlink("/proc/self/exe", &exe[0], exe.size());
    if (n <= 0 || static_cast<size_t>(n) >= exe.size()) return std::string(".");
    exe.resize(static_cast<size_t>(n));
    std::string out = exe.substr(0, exe.rfind('/'));
    if (out.empty()) out = "/";
    if (relative != nullptr && relative[0] != '\0') out += std::string("/") + relative;
    return out;
  }();
  return dir.c_str();
}

}  // namespace wrapir

#if defined(WRAPIR_PACKAGE_FROM_EXE)
#ifndef WRAPIR_CUBIN_DIR
#define WRAPIR_CUBIN_DIR (::wrapir::dir_from_executable(WRAPIR_PACKAGE_FROM_EXE))
#endif
#ifndef WRAPIR_PACKAGE_DIR
#define WRAPIR_PACKAGE_DIR (::wrapir::dir_from_executable(WRAPIR_PACKAGE_FROM_EXE))
#endif
#endif

namespace wrapir {

/// A failed driver call, failed check or failed extern hook.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

inline void check_driver(CUresult result, const char* call, const char* file, int line) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "unknown CUresult";
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS) text = "no description";
  throw Error(std::string("CUDA driver error ") + name + " (" + text + ") in `" + call + "` at " + file + ":" +
              std::to_string(line));
}

}  // namespace wrapir


/// Checks a CUDA driver call; throws wrapir::Error with the call's text on failure.
#define CU_CHECK(EXPR) ::wrapir::check_driver((EXPR), #EXPR, __FILE__, __LINE__)

namespace wrapir {

/// Python's floor division `a // b` (what c10::div_floor_integer computes);
/// size expressions of the standalone dialect call it.
inline int64_t div_floor_integer(int64_t a, int64_t b) {
  if (b == 0) throw Error("wrapir::div_floor_integer: division by zero in a size expression");
  int64_t q = a / b;
  if (a % b != 0 && ((a % b < 0) != (b < 0))) --q;
  return q;
}

/// Python's modulo `a % b`, with the sign of `b` (what c10::div_mod computes).
inline int64_t div_mod(int64_t a, int64_t b) {
  if (b == 0) throw Error("wrapir::div_mod: modulo by zero in a size expression");
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/// Element types (the same set as wrapir's DType).
enum class DType : int32_t {
  // wrapir::ir::DType::ALL in order, written here by wrapir::lower::cpp::runtime_header()
};

/// Bytes per element.
inline int64_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Int16:
    case DType::Float16:
    case DType::Bfloat16:
      return 2;
    case DType::Int32:
    case DType::Float32:
    case DType::Complex32:
      return 4;
    case DType::Int64:
    case DType::Float64:
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
    default:
      return 1;
  }
}

/// Elements a strided layout needs (0 when a size is 0).
inline int64_t storage_numel(int64_t ndim, const int64_t* sizes, const int64_t* strides) {
  int64_t extent = 1;
  for (int64_t i = 0; i < ndim; ++i) {
    if (sizes[i] == 0) return 0;
    extent += (sizes[i] - 1) * strides[i];
  }
  return extent;
}

/// Device memory, freed with cuMemFreeAsync on `stream` when `owned`, or host
/// memory (`host`), freed with std::free when `owned`, or a tensor of the
/// runtime library (`runtime`), released through it on `stream`. `bytes` is
/// the allocation's size.
struct Storage {
  CUdeviceptr ptr = 0;
  CUstream stream = nullptr;
  bool owned = false;
  bool host = false;
  uint64_t bytes = 0;
  WrapirRtTensor* runtime = nullptr;
  Storage() = default;
  Storage(CUdeviceptr p, CUstream s, bool o) : ptr(p), stream(s), owned(o) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (runtime != nullptr) {
      wrapir_rt_tensor_free(runtime, stream);
      return;
    }
    if (!owned || ptr == 0) return;
    if (host) {
      std::free(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)));
    } else {
      // A destructor must not throw: a failed free is ignored here.
      (void)cuMemFreeAsync(ptr, stream);
    }
  }
};

/// A strided tensor over (possibly shared) device storage.
class Tensor {
 public:
  Tensor() = default;

  /// A tensor over memory the caller owns; wrapir never frees it. The
  /// allocation is taken to end where the view does.
  static Tensor borrow(CUdeviceptr ptr, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                       int64_t storage_offset = 0) {
    Tensor t;
    t.storage_ = std::make_shared<Storage>(ptr, nullptr, false);
    t.dtype_ = dtype;
    t.sizes_ = std::move(sizes);
    t.strides_ = std::move(strides);
    t.offset_ = storage_offset;
    if (t.sizes_.size() != t.strides_.size()) throw Error("wrapir::Tensor::borrow: sizes and strides differ in rank");
    int64_t numel = storage_numel(t.dim(), t.sizes_.data(), t.strides_.data());
    t.storage_->bytes = static_cast<uint64_t>((numel == 0 ? 0 : storage_offset + numel) * element_size(dtype));
    return t;
  }

  /// Takes ownership of a tensor of the runtime library; it is released
  /// (after the work queued on `stream`) with the last reference.
  static Tensor adopt_runtime(WrapirRtTensor* handle, CUstream stream) {
    Tensor t;
    t.storage_ = std::make_shared<Storage>();
    t.storage_->runtime = handle;
    t.storage_->stream = stream;
    WrapirRtTensorDesc d;
    if (wrapir_rt_tensor_desc(handle, &d) != WRAPIR_RT_OK)
      throw Error(std::string("wrapir::Tensor::adopt_runtime: ") + wrapir_rt_last_error());
    t.storage_->ptr = static_cast<CUdeviceptr>(d.storage);
    t.storage_->bytes = d.storage_bytes;
    t.storage_->host = (d.flags & WRAPIR_RT_HOST) != 0;
    t.dtype_ = static_cast<DType>(d.layout.dtype);
    t.sizes_.assign(d.layout.sizes, d.layout.sizes + d.layout.ndim);
    t.strides_.assign(d.layout.strides, d.layout.strides + d.layout.ndim);
    t.offset_ = d.layout.offset;
    return t;
  }

  /// A view of `base`'s storage with any dtype and layout (offset in
  /// elements of `dtype`); it keeps the storage alive.
  static Tensor alias(const Tensor& base, DType dtype, int64_t ndim, const int64_t* sizes, const int64_t* strides,
                      int64_t storage_offset) {
    if (!base.storage_) throw Error("wrapir::Tensor::alias of an undefined tensor");
    Tensor t;
    t.storage_ = base.storage_;
    t.dtype_ = dtype;
    t.sizes_.assign(sizes, sizes + ndim);
    t.strides_.assign(strides, strides + ndim);
    t.offset_ = storage_offset;
    return t;
  }

  /// A tensor over host memory the caller owns; wrapir never frees it.
  static Tensor borrow_host(void* ptr, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int64_t storage_offset = 0) {
    Tensor t = borrow(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)), dtype, std::move(sizes),
                      std::move(strides), storage_offset);
    t.storage_->host = true;
    return t;
  }

  /// Adopts host memory from std::malloc / std::aligned_alloc; freed with the last reference.
  static Tensor adopt_host(void* ptr, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                           int64_t storage_offset = 0) {
    Tensor t = borrow_host(ptr, dtype, std::move(sizes), std::move(strides), storage_offset);
    t.storage_->owned = true;
    return t;
  }

  /// Adopts memory allocated with cuMemAllocAsync on `stream`; freed with the last reference.
  static Tensor adopt(CUdeviceptr ptr, CUstream stream, DType dtype, std::vector<int64_t> sizes,
                      std::vector<int64_t> strides, int64_t storage_offset = 0) {
    Tensor t = borrow(ptr, dtype, std::move(sizes), std::move(strides), storage_offset);
    t.storage_->stream = stream;
    t.storage_->owned = true;
    return t;
  }

  bool defined() const { return storage_ != nullptr; }
  /// True for host memory, false for device memory (and undefined tensors).
  bool is_host() const { return storage_ != nullptr && storage_->host; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t storage_offset() const { return offset_; }

  int64_t size(int64_t d) const { return sizes_.at(static_cast<size_t>(check_dim(d))); }
  int64_t stride(int64_t d) const { return strides_.at(static_cast<size_t>(check_dim(d))); }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes_) n *= s;
    return n;
  }

  /// Address of the allocation (element 0 of the storage).
  CUdeviceptr storage_ptr() const { return storage_ ? storage_->ptr : 0; }
  /// Bytes of the allocation.
  uint64_t storage_bytes() const { return storage_ ? storage_->bytes : 0; }

  /// The runtime library's descriptor of this tensor; its arrays point into
  /// this tensor (valid while it lives unchanged).
  WrapirRtTensorDesc desc() const {
    WrapirRtTensorDesc d;
    d.storage = static_cast<uint64_t>(storage_ptr());
    d.storage_bytes = storage_bytes();
    d.flags = is_host() ? WRAPIR_RT_HOST : 0u;
    d.layout.dtype = static_cast<int32_t>(dtype_);
    d.layout.ndim = static_cast<int32_t>(sizes_.size());
    d.layout.sizes = sizes_.data();
    d.layout.strides = strides_.data();
    d.layout.offset = offset_;
    return d;
  }

  /// Address of the first element (storage base + offset * element size).
  CUdeviceptr data_ptr() const {
    if (!storage_) return 0;
    return storage_->ptr + static_cast<CUdeviceptr>(offset_ * element_size(dtype_));
  }

  /// Records the allocation's size (allocations padded past the view).
  void set_storage_bytes(uint64_t bytes) {
    if (storage_) storage_->bytes = bytes;
  }

  /// Drops this reference (frees the storage when it was the last owner).
  void reset() {
    storage_.reset();
    sizes_.clear();
    strides_.clear();
    offset_ = 0;
  }

  /// A view of the same storage with another layout (offset in elements of `dtype`).
  Tensor reinterpret(int64_t ndim, const int64_t* sizes, const int64_t* strides, int64_t storage_offset,
                     DType dtype) const {
    if (!storage_) throw Error("wrapir::Tensor::reinterpret on an undefined tensor");
    if (element_size(dtype) != element_size(dtype_))
      throw Error("wrapir::Tensor::reinterpret: element sizes of the two dtypes differ");
    Tensor t;
    t.storage_ = storage_;
    t.dtype_ = dtype;
    t.sizes_.assign(sizes, sizes + ndim);
    t.strides_.assign(strides, strides + ndim);
    t.offset_ = storage_offset;
    return t;
  }

  /// A view of the same storage with another layout and the same dtype.
  Tensor reinterpret(int64_t ndim, const int64_t* sizes, const int64_t* strides, int64_t storage_offset) const {
    return reinterpret(ndim, sizes, strides, storage_offset, dtype_);
  }

 private:
  int64_t check_dim(int64_t d) const {
    if (d < 0 || d >= dim())
      throw Error("wrapir::Tensor: dimension " + std::to_string(d) + " out of range for a tensor of rank " +
                  std::to_string(dim()));
    return d;
  }

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::Float32;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
};

/// Allocates an uninitialised tensor on `stream`. `alloc_numel` < 0 means
/// "what the sizes and strides need"; otherwise that many elements (padding).
inline Tensor empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides, DType dtype,
                            int64_t alloc_numel, CUstream stream) {
  int64_t numel = alloc_numel < 0 ? storage_numel(ndim, sizes, strides) : alloc_numel;
  if (numel < 0) throw Error("wrapir::empty_strided: negative storage size");
  CUdeviceptr ptr = 0;
  size_t bytes = static_cast<size_t>(numel * element_size(dtype));
  // Zero-byte allocations are not allowed by the driver; keep a null pointer.
  if (bytes > 0) CU_CHECK(cuMemAllocAsync(&ptr, bytes, stream));
  Tensor t = Tensor::adopt(ptr, stream, dtype, std::vector<int64_t>(sizes, sizes + ndim),
                           std::vector<int64_t>(strides, strides + ndim));
  t.set_storage_bytes(bytes);
  return t;
}

/// Allocates an uninitialised tensor in host memory (64-byte aligned).
/// `alloc_numel` as for empty_strided.
inline Tensor empty_strided_host(int64_t ndim, const int64_t* sizes, const int64_t* strides, DType dtype,
                                 int64_t alloc_numel) {
  int64_t numel = alloc_numel < 0 ? storage_numel(ndim, sizes, strides) : alloc_numel;
  if (numel < 0) throw Error("wrapir::empty_strided_host: negative storage size");
  size_t bytes = static_cast<size_t>(numel * element_size(dtype));
  void* ptr = nullptr;
  if (bytes > 0) {
    // std::aligned_alloc needs a size that is a multiple of the alignment.
    ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (ptr == nullptr) throw Error("wrapir::empty_strided_host: out of host memory");
  }
  Tensor t = Tensor::adopt_host(ptr, dtype, std::vector<int64_t>(sizes, sizes + ndim),
                                std::vector<int64_t>(strides, strides + ndim));
  t.set_storage_bytes(bytes);
  return t;
}

/// A byte buffer (kernel scratch space).
inline Tensor empty_bytes(int64_t bytes, CUstream stream) {
  int64_t size[1] = {bytes};
  int64_t stride[1] = {1};
  return empty_strided(1, size, stride, DType::Uint8, -1, stream);
}

/// A one-element int64 tensor holding `value` (written on `stream`, no host memory involved).
inline Tensor scalar_to_tensor(int64_t value, CUstream stream) {
  Tensor t = empty_strided(0, nullptr, nullptr, DType::Int64, 1, stream);
  uint64_t bits = static_cast<uint64_t>(value);
  CU_CHECK(cuMemsetD32Async(t.data_ptr(), static_cast<unsigned int>(bits & 0xffffffffu), 1, stream));
  CU_CHECK(cuMemsetD32Async(t.data_ptr() + 4, static_cast<unsigned int>(bits >> 32), 1, stream));
  return t;
}

/// A one-element int64 tensor in host memory holding `value`.
inline Tensor scalar_to_tensor_host(int64_t value) {
  Tensor t = empty_strided_host(0, nullptr, nullptr, DType::Int64, 1);
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(t.data_ptr())), &value, sizeof value);
  return t;
}

/// Reads a tensor's first element to the host (waits for `stream`) as an int64.
inline int64_t item_int64(const Tensor& t, CUstream stream) {
  if (!t.defined()) throw Error("wrapir::item_int64 on an undefined tensor");
  unsigned char bytes[8] = {0};
  int64_t size = element_size(t.dtype());
  if (t.is_host()) {
    std::memcpy(bytes, reinterpret_cast<const void*>(static_cast<uintptr_t>(t.data_ptr())), static_cast<size_t>(size));
  } else {
    CU_CHECK(cuMemcpyDtoHAsync(bytes, t.data_ptr(), static_cast<size_t>(size), stream));
    CU_CHECK(cuStreamSynchronize(stream));
  }
  switch (t.dtype()) {
    case DType::Bool:
      return bytes[0] != 0 ? 1 : 0;
    case DType::Int8: {
      int8_t v;
      std::memcpy(&v, bytes, 1);
      return v;
    }
    case DType::Uint8:
      return bytes[0];
    case DType::Int16: {
      int16_t v;
      std::memcpy(&v, bytes, 2);
      return v;
    }
    case DType::Int32: {
      int32_t v;
      std::memcpy(&v, bytes, 4);
      return v;
    }
    case DType::Int64: {
      int64_t v;
      std::memcpy(&v, bytes, 8);
      return v;
    }
    default:
      throw Error("wrapir::item_int64: the tensor's dtype is not an integer or boolean type");
  }
}

/// Reads a tensor's first element to the host (waits for `stream`) as a truth value.
inline bool item_bool(const Tensor& t, CUstream stream) { return item_int64(t, stream) != 0; }

/// Reads a tensor's first element to the host (waits for `stream`) as a
/// double: a floating tensor's value (f16 and bf16 widened exactly), an
/// integer or boolean tensor's as `item_int64` reads it.
inline double item_double(const Tensor& t, CUstream stream) {
  if (!t.defined()) throw Error("wrapir::item_double on an undefined tensor");
  DType d = t.dtype();
  if (d != DType::Float16 && d != DType::Bfloat16 && d != DType::Float32 && d != DType::Float64) {
    return static_cast<double>(item_int64(t, stream));
  }
  unsigned char bytes[8] = {0};
  int64_t size = element_size(d);
  if (t.is_host()) {
    std::memcpy(bytes, reinterpret_cast<const void*>(static_cast<uintptr_t>(t.data_ptr())), static_cast<size_t>(size));
  } else {
    CU_CHECK(cuMemcpyDtoHAsync(bytes, t.data_ptr(), static_cast<size_t>(size), stream));
    CU_CHECK(cuStreamSynchronize(stream));
  }
  if (d == DType::Float64) {
    double v;
    std::memcpy(&v, bytes, 8);
    return v;
  }
  uint32_t bits = 0;
  if (d == DType::Float32) {
    std::memcpy(&bits, bytes, 4);
  } else if (d == DType::Bfloat16) {
    bits = static_cast<uint32_t>(bytes[0] | (bytes[1] << 8)) << 16;
  } else {
    // f16 -> f32: sign, exponent rebiased (15 -> 127), subnormals normalised.
    uint32_t h = static_cast<uint32_t>(bytes[0] | (bytes[1] << 8));
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) {
      bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
      bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man != 0) {
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
    } else {
      bits = sign;
    }
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Throws unless every element of `t` is finite (Inductor's `nan_asserts`,
/// `aoti_torch_check_inf_and_nan`); `name` names the tensor in the message.
/// A device tensor's storage span is read to the host (waits for `stream`).
/// Only floating tensors can hold NaN or Inf: others pass unread.
inline void check_finite(const Tensor& t, const char* name, CUstream stream) {
  if (!t.defined()) throw Error(std::string("wrapir::check_finite: ") + name + " is undefined");
  DType d = t.dtype();
  int64_t esize = element_size(d);
  if (d != DType::Float16 && d != DType::Bfloat16 && d != DType::Float32 && d != DType::Float64) return;
  int64_t numel = t.numel();
  if (numel == 0) return;
  // The elements' span (Inductor's strides are never negative).
  int64_t last = t.storage_offset();
  for (int64_t k = 0; k < t.dim(); ++k) last += (t.size(k) - 1) * t.stride(k);
  size_t span = static_cast<size_t>(last - t.storage_offset() + 1) * static_cast<size_t>(esize);
  CUdeviceptr first = t.storage_ptr() + static_cast<CUdeviceptr>(t.storage_offset() * esize);
  std::vector<unsigned char> host(span);
  if (t.is_host()) {
    std::memcpy(host.data(), reinterpret_cast<const void*>(static_cast<uintptr_t>(first)), span);
  } else {
    CU_CHECK(cuMemcpyDtoHAsync(host.data(), first, span, stream));
    CU_CHECK(cuStreamSynchronize(stream));
  }
  std::vector<int64_t> index(static_cast<size_t>(t.dim()), 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t at = 0;
    for (int64_t k = 0; k < t.dim(); ++k) at += index[static_cast<size_t>(k)] * t.stride(k);
    const unsigned char* e = host.data() + at * esize;
    bool finite;
    if (d == DType::Float64) {
      uint64_t bits;
      std::memcpy(&bits, e, 8);
      finite = ((bits >> 52) & 0x7ffu) != 0x7ffu;
    } else if (d == DType::Float32) {
      uint32_t bits;
      std::memcpy(&bits, e, 4);
      finite = ((bits >> 23) & 0xffu) != 0xffu;
    } else {
      uint32_t h = static_cast<uint32_t>(e[0] | (e[1] << 8));
      finite = d == DType::Float16 ? ((h >> 10) & 0x1fu) != 0x1fu : ((h >> 7) & 0xffu) != 0xffu;
    }
    if (!finite) throw Error(std::string("wrapir::check_finite: ") + name + " holds NaN or Inf");
    for (int64_t k = t.dim() - 1; k >= 0; --k) {
      if (++index[static_cast<size_t>(k)] < t.size(k)) break;
      index[static_cast<size_t>(k)] = 0;
    }
  }
}

/// Makes the primary context of `device` current on this thread.
inline void set_device(int device) {
  static std::map<int, CUcontext> contexts;
  auto found = contexts.find(device);
  CUcontext ctx = nullptr;
  if (found == contexts.end()) {
    CUdevice dev = 0;
    CU_CHECK(cuDeviceGet(&dev, device));
    CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    contexts.emplace(device, ctx);
  } else {
    ctx = found->second;
  }
  CU_CHECK(cuCtxSetCurrent(ctx));
}

/// Loads `mangled_name` from `<cubin_dir>/<cubin_file>` and allows `shared_bytes`
/// of dynamic shared memory (the attribute is needed above 48 KiB).
inline CUfunction load_kernel(const std::string& cubin_dir, const std::string& cubin_file,
                              const std::string& mangled_name, uint32_t shared_bytes) {
  std::string path = cubin_dir.empty() ? cubin_file : cubin_dir + "/" + cubin_file;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  CUresult loaded = cuModuleLoad(&module, path.c_str());
  if (loaded != CUDA_SUCCESS) {
    const char* name = nullptr;
    if (cuGetErrorName(loaded, &name) != CUDA_SUCCESS) name = "unknown CUresult";
    throw Error(std::string("CUDA driver error ") + name + " loading cubin `" + path + "`");
  }
  CU_CHECK(cuModuleGetFunction(&function, module, mangled_name.c_str()));
  if (shared_bytes > 48 * 1024) {
    CU_CHECK(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                static_cast<int>(shared_bytes)));
  }
  return function;
}

/// Launches `function` on a (grid_x, grid_y, grid_z) grid of 32 * num_warps threads.
inline void launch_kernel(CUfunction function, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z, uint32_t num_warps,
                          uint32_t shared_bytes, void** args, CUstream stream) {
  CU_CHECK(cuLaunchKernel(function, grid_x, grid_y, grid_z, 32 * num_warps, 1, 1, shared_bytes, stream, args,
                          nullptr));
}

/// The shared object `<dir>/<image>` (a compiled host kernel), opened on
/// first use with RTLD_LOCAL: one handle per image, since every C++ kernel
/// image exports the same symbol names. Kept open for the process.
inline void* host_image(const std::string& dir, const std::string& image) {
  static std::mutex lock;
  static std::map<std::string, void*> handles;
  std::string path = dir.empty() ? image : dir + "/" + image;
  std::lock_guard<std::mutex> guard(lock);
  auto found = handles.find(path);
  if (found != handles.end()) return found->second;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error("cannot load host kernel image `" + path + "`: " + (why != nullptr ? why : "unknown error"));
  }
  handles.emplace(path, handle);
  return handle;
}

/// The address of `symbol` in the host kernel image `<dir>/<image>`.
inline void* host_symbol(const std::string& dir, const std::string& image, const char* symbol) {
  void* handle = host_image(dir, image);
  dlerror();
  void* address = dlsym(handle, symbol);
  if (address == nullptr) throw Error("host kernel image `" + image + "` has no symbol `" + symbol + "`");
  return address;
}

/// A C++ kernel's image: `int wrapir_kernel_argv(void** args)`, where
/// `args[i]` is tensor argument i's data pointer or points at scalar
/// argument i (of its C type); non-zero is a failure.
class HostKernel {
 public:
  using Entry = int (*)(void**);
  HostKernel(std::string name, Entry entry) : name_(std::move(name)), entry_(entry) {}
  void call(void** args) const {
    int status = entry_(args);
    if (status != 0) throw Error("C++ kernel `" + name_ + "` returned " + std::to_string(status));
  }

 private:
  std::string name_;
  Entry entry_;
};

/// C++ kernel `kernel` from its image `<dir>/<image>`, whose
/// `wrapir_kernel_signature()` must be `signature` (the program's
/// `arg_types`, `;`-joined), as the host backend checks it.
inline HostKernel host_kernel(const std::string& dir, const std::string& image, const char* kernel,
                              const char* signature) {
  using Signature = const char* (*)();
  auto compiled = reinterpret_cast<Signature>(host_symbol(dir, image, "wrapir_kernel_signature"));
  if (std::strcmp(compiled(), signature) != 0)
    throw Error(std::string("C++ kernel `") + kernel + "`: the image was compiled for arguments `" + compiled() +
                "`, the program declares `" + signature + "`");
  return HostKernel(kernel, reinterpret_cast<HostKernel::Entry>(host_symbol(dir, image, "wrapir_kernel_argv")));
}

/// One argument of an extern op (wrapir::call_op): a tagged value, with its keyword name
/// (`nullptr` for positional arguments).
struct ExternArg {
  /// The C ABI's argument kinds (wrapir_rt.h), so that a kind passes to the
  /// runtime library as it is.
  enum class Kind : int32_t {
    None = WRAPIR_RT_ARG_NONE,
    Tensor = WRAPIR_RT_ARG_TENSOR,
    Int = WRAPIR_RT_ARG_INT,
    Float = WRAPIR_RT_ARG_FLOAT,
    Bool = WRAPIR_RT_ARG_BOOL,
    String = WRAPIR_RT_ARG_STRING,
    DType = WRAPIR_RT_ARG_DTYPE,
    Device = WRAPIR_RT_ARG_DEVICE,
    List = WRAPIR_RT_ARG_LIST,
  };
  Kind kind = Kind::None;
  const char* name = nullptr;
  const wrapir::Tensor* tensor = nullptr;
  int64_t int_value = 0;
  double float_value = 0.0;
  const char* string_value = nullptr;
  wrapir::DType dtype_value = wrapir::DType::Float32;
  const ExternArg* items = nullptr;
  int64_t num_items = 0;

  /// An argument of `kind` named `name` whose value the caller sets: the one
  /// place the tag and the name are filled in.
  static ExternArg tagged(Kind kind, const char* name) {
    ExternArg a;
    a.kind = kind;
    a.name = name;
    return a;
  }
  static ExternArg none(const char* name = nullptr) { return tagged(Kind::None, name); }
  /// An argument of `kind` named `name` whose one value, `value`, is in
  /// `field`.
  template <typename T>
  static ExternArg holding(Kind kind, T ExternArg::*field, T value, const char* name) {
    ExternArg a = tagged(kind, name);
    a.*field = value;
    return a;
  }
  static ExternArg of_tensor(const wrapir::Tensor& t, const char* name = nullptr) {
    return holding(Kind::Tensor, &ExternArg::tensor, &t, name);
  }
  static ExternArg of_int(int64_t v, const char* name = nullptr) {
    return holding(Kind::Int, &ExternArg::int_value, v, name);
  }
  static ExternArg of_float(double v, const char* name = nullptr) {
    return holding(Kind::Float, &ExternArg::float_value, v, name);
  }
  static ExternArg of_bool(bool v, const char* name = nullptr) {
    return holding(Kind::Bool, &ExternArg::int_value, int64_t{v ? 1 : 0}, name);
  }
  static ExternArg of_string(const char* v, const char* name = nullptr) {
    return holding(Kind::String, &ExternArg::string_value, v, name);
  }
  static ExternArg of_dtype(wrapir::DType v, const char* name = nullptr) {
    return holding(Kind::DType, &ExternArg::dtype_value, v, name);
  }
  /// A device: `index` -1 is the CPU, otherwise a CUDA device index.
  static ExternArg of_device(int64_t index, const char* name = nullptr) {
    return holding(Kind::Device, &ExternArg::int_value, index, name);
  }
  static ExternArg of_list(const ExternArg* items, int64_t n, const char* name = nullptr) {
    ExternArg a = tagged(Kind::List, name);
    a.items = items;
    a.num_items = n;
    return a;
  }
};

/// A WrapirRtLayout over `sizes` and `strides` (which must outlive it).
inline WrapirRtLayout layout(DType dtype, int64_t ndim, const int64_t* sizes, const int64_t* strides,
                             int64_t storage_offset) {
  WrapirRtLayout l;
  l.dtype = static_cast<int32_t>(dtype);
  l.ndim = static_cast<int32_t>(ndim);
  l.sizes = sizes;
  l.strides = strides;
  l.offset = storage_offset;
  return l;
}

namespace detail {

/// `args` as the runtime library's arguments; list items are kept in `lists`
/// and tensor descriptors in `descs` (whose addresses stay put).
inline void runtime_args(const ExternArg* args, int64_t n, std::vector<WrapirRtArg>& out,
                         std::vector<std::unique_ptr<std::vector<WrapirRtArg>>>& lists) {
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const ExternArg& a = args[i];
    WrapirRtArg r;
    std::memset(&r, 0, sizeof r);
    r.kind = static_cast<int32_t>(a.kind);  // Kind's values are the ABI's
    r.name = a.name;
    switch (a.kind) {
      case ExternArg::Kind::None:
        break;
      case ExternArg::Kind::Tensor:
        if (a.tensor == nullptr || !a.tensor->defined()) {
          r.kind = WRAPIR_RT_ARG_NONE;  // an undefined tensor is passed as None
        } else {
          r.tensor = a.tensor->desc();
        }
        break;
      case ExternArg::Kind::Int:
      case ExternArg::Kind::Bool:
      case ExternArg::Kind::Device:
        r.int_value = a.int_value;
        break;
      case ExternArg::Kind::Float:
        r.float_value = a.float_value;
        break;
      case ExternArg::Kind::String:
        r.string_value = a.string_value;
        break;
      case ExternArg::Kind::DType:
        r.dtype = static_cast<int32_t>(a.dtype_value);
        break;
      case ExternArg::Kind::List: {
        lists.push_back(std::make_unique<std::vector<WrapirRtArg>>());
        std::vector<WrapirRtArg>& items = *lists.back();
        runtime_args(a.items, a.num_items, items, lists);
        r.items = items.data();
        r.num_items = a.num_items;
        break;
      }
    }
    out.push_back(r);
  }
}

/// The tensor argument whose storage is at `storage` (searching lists), or nullptr.
inline const Tensor* argument_with_storage(const ExternArg* args, int64_t n, uint64_t storage) {
  for (int64_t i = 0; i < n; ++i) {
    const ExternArg& a = args[i];
    if (a.kind == ExternArg::Kind::Tensor && a.tensor != nullptr && a.tensor->defined() &&
        static_cast<uint64_t>(a.tensor->storage_ptr()) == storage)
      return a.tensor;
    if (a.kind == ExternArg::Kind::List) {
      if (const Tensor* t = argument_with_storage(a.items, a.num_items, storage)) return t;
    }
  }
  return nullptr;
}

}  // namespace detail

/// Runs extern op `op` (as the program names it) in the runtime library on
/// `device`, ordered on `stream`: `args` in call order (keyword arguments
/// named), `expected` the declared layout of a single result (or nullptr),
/// and `results` the variables receiving the op's result elements (none for
/// `out=` and in-place ops). A result that aliases an argument (a view op)
/// shares that argument's storage.
inline void call_op(int device, const char* op, const ExternArg* args, int64_t num_args,
                    const WrapirRtLayout* expected, Tensor* const* results, int64_t num_results, CUstream stream) {
  std::vector<WrapirRtArg> converted;
  std::vector<std::unique_ptr<std::vector<WrapirRtArg>>> lists;
  detail::runtime_args(args, num_args, converted, lists);
  std::vector<WrapirRtTensor*> handles(static_cast<size_t>(num_results), nullptr);
  int32_t status = wrapir_rt_call(device, op, converted.data(), num_args, expected, stream, handles.data(),
                                  num_results);
  if (status != WRAPIR_RT_OK) throw Error(std::string("extern op `") + op + "`: " + wrapir_rt_last_error());
  // Owned first, so that every handle is released if a later step throws.
  std::vector<Tensor> owned;
  owned.reserve(handles.size());
  for (WrapirRtTensor* h : handles) owned.push_back(h == nullptr ? Tensor() : Tensor::adopt_runtime(h, stream));
  for (int64_t i = 0; i < num_results; ++i) {
    WrapirRtTensor* h = handles[static_cast<size_t>(i)];
    Tensor& t = owned[static_cast<size_t>(i)];
    if (h != nullptr) {
      WrapirRtTensorDesc d;
      if (wrapir_rt_tensor_desc(h, &d) != WRAPIR_RT_OK)
        throw Error(std::string("extern op `") + op + "`: " + wrapir_rt_last_error());
      if (d.flags & WRAPIR_RT_BORROWED) {
        const Tensor* base = detail::argument_with_storage(args, num_args, d.storage);
        if (base == nullptr)
          throw Error(std::string("extern op `") + op + "`: result " + std::to_string(i) +
                      " aliases memory that is none of its tensor arguments");
        t = Tensor::alias(*base, static_cast<DType>(d.layout.dtype), d.layout.ndim, d.layout.sizes,
                          d.layout.strides, d.layout.offset);
      }
    }
    *results[i] = std::move(t);
  }
}

/// The message of the last failed wrapir_entry call on this thread.
inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

}  // namespace wrapir

#if defined(WRAPIR_USE_HALIDE_RUNTIME_H)
#include "HalideRuntime.h"
#include "HalideRuntimeCuda.h"
#elif !defined(HALIDE_HALIDERUNTIME_H)
// The parts of Halide's runtime ABI that calls of Halide kernels use, laid out
// as in HalideRuntime.h.
extern "C" {
struct halide_device_interface_t;
struct halide_type_t {
  uint8_t code;  // halide_type_code_t: 0 int, 1 uint, 2 float, 3 handle, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct halide_dimension_t {
  int32_t min, extent, stride;
  uint32_t flags;
};
struct halide_buffer_t {
  uint64_t device;
  const struct halide_device_interface_t* device_interface;
  uint8_t* host;
  uint64_t flags;
  struct halide_type_t type;
  int32_t dimensions;
  struct halide_dimension_t* dim;
  void* padding;
};
/// Halide's CUDA device interface (from the Halide runtime the embedder links).
const struct halide_device_interface_t* halide_cuda_device_interface();
}
#endif
