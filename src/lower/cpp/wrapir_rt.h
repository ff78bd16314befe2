/* wrapir_rt.h: the C ABI of wrapir's runtime library (libwrapir_runtime).
 *
 * The runtime runs the extern (ATen) ops of wrapir's standalone C++ wrappers
 * with the same Rust code as wrapir's CUDA backend (cuBLAS, cuBLASLt, cuDNN,
 * wrapir's built-in kernels: `wrapir ops --device cuda` lists them) or, on
 * device WRAPIR_RT_HOST_DEVICE, as wrapir's host backend (`wrapir ops
 * --device cpu`), and reads and writes safetensors files. Build it with
 *
 *     cargo build --release -p wrapir-runtime
 *
 * which writes target/release/libwrapir_runtime.so and libwrapir_runtime.a.
 * The declarations below are checked against the Rust definitions
 * (src/capi/) by wrapir's tests.
 *
 * Conventions:
 * - Every function that can fail returns a status (WRAPIR_RT_OK, 0, on
 *   success); the message of the last failure on the calling thread is
 *   wrapir_rt_last_error(). No function unwinds or aborts on bad input.
 * - Ops run on device `device`'s primary context (the one the standalone
 *   wrapper's wrapir::set_device makes current) on a stream of the runtime,
 *   ordered after the work queued so far on the caller's `stream`; the
 *   caller's `stream` waits for the op before its later work. `stream` is a
 *   CUstream of that context (NULL: the legacy default stream).
 * - Tensors the caller passes (WrapirRtTensorDesc) are borrowed for the call.
 *   Tensors the runtime returns (WrapirRtTensor) are owned by the caller and
 *   released with wrapir_rt_tensor_free.
 * - Calls on one device are serialised (one runtime per device and process).
 */
#ifndef WRAPIR_RT_H
#define WRAPIR_RT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define WRAPIR_RT_OK 0
/* A null pointer, a bad descriptor, dtype code or argument kind. */
#define WRAPIR_RT_ERR_ARGUMENT 1
/* The op rejected its operands, or the runtime has no device implementation of it. */
#define WRAPIR_RT_ERR_OP 2
/* The CUDA driver or a CUDA library failed, or none is installed. */
#define WRAPIR_RT_ERR_DEVICE 3
/* A file could not be read or written, or is malformed. */
#define WRAPIR_RT_ERR_FILE 4
/* The runtime is in the wrong state for the call (wrapir_rt_init after the first op). */
#define WRAPIR_RT_ERR_STATE 5
/* An internal error (a bug in wrapir), caught at the boundary. */
#define WRAPIR_RT_ERR_INTERNAL 6

/* WrapirRtArg kinds. */
#define WRAPIR_RT_ARG_NONE 0
#define WRAPIR_RT_ARG_TENSOR 1
#define WRAPIR_RT_ARG_INT 2
#define WRAPIR_RT_ARG_FLOAT 3
#define WRAPIR_RT_ARG_BOOL 4
#define WRAPIR_RT_ARG_STRING 5
#define WRAPIR_RT_ARG_DTYPE 6
#define WRAPIR_RT_ARG_DEVICE 7
#define WRAPIR_RT_ARG_LIST 8

/* The device number of the host context: ops on host memory (the extern ops
 * of CPU programs), run by wrapir's host backend. Its calls take and return
 * host tensors (flagged WRAPIR_RT_HOST); `stream` is ignored. */
#define WRAPIR_RT_HOST_DEVICE -1

/* WrapirRtTensorDesc flags. */
/* The memory is host memory (the host context's tensors, and
 * wrapir_rt_save_safetensors on any device). */
#define WRAPIR_RT_HOST 1u
/* A returned tensor aliases memory the caller passed (a view op's result). */
#define WRAPIR_RT_BORROWED 2u

/* Dtype codes are wrapir::DType's enumerators in order: Bool 0, Int8 1,
 * Int16 2, Int32 3, Int64 4, Uint8 5, Float16 6, Bfloat16 7, Float32 8,
 * Float64 9, Float8E4m3fn 10, Float8E5m2 11, Float8E4m3fnuz 12,
 * Float8E5m2fnuz 13, Complex32 14, Complex64 15, Complex128 16. */

/* A strided layout: `ndim` sizes and strides (in elements), storage offset
 * (in elements). */
typedef struct WrapirRtLayout {
  int32_t dtype;
  int32_t ndim;
  const int64_t* sizes;
  const int64_t* strides;
  int64_t offset;
} WrapirRtLayout;

/* A tensor: `storage` is the address of its allocation (element 0 of the
 * storage, not of the view) holding `storage_bytes` bytes. */
typedef struct WrapirRtTensorDesc {
  uint64_t storage;
  uint64_t storage_bytes;
  uint32_t flags;
  WrapirRtLayout layout;
} WrapirRtTensorDesc;

/* One op argument: `kind` says which field holds the value; `name` is the
 * keyword (NULL for positional arguments). INT and BOOL use int_value,
 * DEVICE too (-1: the CPU, else a CUDA index); LIST has num_items items. */
typedef struct WrapirRtArg {
  int32_t kind;
  int32_t dtype;
  const char* name;
  WrapirRtTensorDesc tensor;
  int64_t int_value;
  double float_value;
  const char* string_value;
  const struct WrapirRtArg* items;
  int64_t num_items;
} WrapirRtArg;

/* A tensor the runtime allocated (an op's result, a loaded input). */
typedef struct WrapirRtTensor WrapirRtTensor;

/* Graph inputs loaded from a safetensors file (wrapir_rt_load_inputs). */
typedef struct WrapirRtInputs WrapirRtInputs;

/* The message of the last failed call on this thread ("" when none); valid
 * until the next failing call on this thread. */
const char* wrapir_rt_last_error(void);

/* Creates device `device`'s runtime with the options of the bundle (a
 * directory or program file) at `bundle`: its bundle.json's math modes
 * (TF32, reduced-precision reductions) and CUDA generator state. NULL:
 * PyTorch's defaults. Must come before the device's first op
 * (WRAPIR_RT_ERR_STATE otherwise); without it the first op creates the
 * runtime with the defaults. On WRAPIR_RT_HOST_DEVICE it creates the host
 * context (the bundle, when given, is only opened). */
int32_t wrapir_rt_init(int32_t device, const char* bundle);

/* Runs extern op `op` (as the program names it: "extern_kernels.mm",
 * "torch.ops.aten.nonzero.default") on `args`. `expected` is the declared
 * layout of a single result, or NULL. `results` receives the first
 * `num_results` leaves of the op's result, flattened in order (NULL for None
 * elements; integers become 0-d tensors); the others are released, and
 * fewer leaves than `num_results` is an error. With num_results 0 the result
 * is dropped (out= and in-place ops). On WRAPIR_RT_HOST_DEVICE the op runs
 * on copies of its host tensors' storages, written back after it; a result
 * viewing an argument is flagged WRAPIR_RT_BORROWED. */
int32_t wrapir_rt_call(int32_t device, const char* op, const WrapirRtArg* args, int64_t num_args,
                       const WrapirRtLayout* expected, void* stream, WrapirRtTensor** results,
                       int64_t num_results);

/* Describes a runtime tensor; the size and stride arrays live as long as it. */
int32_t wrapir_rt_tensor_desc(const WrapirRtTensor* tensor, WrapirRtTensorDesc* out);

/* Releases a runtime tensor after the work queued on `stream` so far. NULL is ignored. */
void wrapir_rt_tensor_free(WrapirRtTensor* tensor, void* stream);

/* Reads the graph inputs of the program at `bundle` (a directory or program
 * file) from the safetensors file `path` (NULL: the bundle's
 * inputs.safetensors) onto device `device` (into host memory for
 * WRAPIR_RT_HOST_DEVICE), laid out as the program
 * declares them, as `wrapir run` places them: the tensor graph inputs in
 * order, then the program's constants, and the symbol inputs' values. */
int32_t wrapir_rt_load_inputs(int32_t device, const char* bundle, const char* path, void* stream,
                              WrapirRtInputs** out);

/* Tensors in `inputs` (graph inputs in order, then constants). */
int64_t wrapir_rt_inputs_num_tensors(const WrapirRtInputs* inputs);

/* The name of tensor `index` (NULL when out of range); valid as long as `inputs`. */
const char* wrapir_rt_inputs_name(const WrapirRtInputs* inputs, int64_t index);

/* Moves tensor `index` out of `inputs` into `*out` (owned by the caller). */
int32_t wrapir_rt_inputs_take(WrapirRtInputs* inputs, int64_t index, WrapirRtTensor** out);

/* Symbol inputs in `inputs`, and their values (valid as long as `inputs`). */
int64_t wrapir_rt_inputs_num_scalars(const WrapirRtInputs* inputs);
const int64_t* wrapir_rt_inputs_scalars(const WrapirRtInputs* inputs);

/* Releases `inputs` and the tensors not taken, after the work queued on `stream`. */
void wrapir_rt_inputs_free(WrapirRtInputs* inputs, void* stream);

/* Writes `num` tensors (device memory of device `device`, or host memory
 * flagged WRAPIR_RT_HOST) as the safetensors file `path`, named `names`,
 * row-major, after the work queued on `stream`. A NULL entry of `tensors`
 * (an undefined output) is left out. */
int32_t wrapir_rt_save_safetensors(int32_t device, const char* path, const char* const* names,
                                   const WrapirRtTensorDesc* const* tensors, int64_t num, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* WRAPIR_RT_H */
