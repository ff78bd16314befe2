"""Inductor's CPU templates (FlexAttention, `codegen/cpp_flex_attention_template.py`) as
self-contained host kernel images.

A template's kernel is ordinary C++ of the kind `host_kernels` compiles, except that it
calls a few ATen entry points that live in libtorch:

* `at::parallel_for` (inline in ATen's headers) reads and sets ATen's thread id
  (`at::get_thread_num`, `at::internal::set_thread_num`) and marks the parallel region
  (`c10::ParallelGuard`). wrapir runs every kernel on one thread, so an image gets serial
  definitions of these (`ATEN_STAND_INS`): one thread (`at::get_num_threads`), whose id is
  0 unless the kernel sets it, and the guard keeps its thread-local flag as libc10's does.
  The template indexes its per-thread buffers by the thread id and sizes them by Inductor's
  `cpp.threads` (1 in an export), which a PyTorch process running it on more threads (the
  exporter's own run, the Python lowering) overruns; `host_templates` sizes them by
  `at::get_num_threads()` when the kernel runs. Each thread computes whole query blocks, so
  the values do not depend on the thread count.
* `at::getCPUAllocator()` for its scratch buffers: here an allocator of 64-byte aligned
  `posix_memalign` blocks, as c10's default CPU allocator (`c10::alloc_cpu`, without its
  optional zero or junk fill, which is off by default). The buffers are written before
  they are read, so their values do not depend on the allocator.
* `at::native::cpublas::brgemm` (oneDNN's micro-kernel, `ATen/native/CPUBlas.cpp`) for the
  `softmax(QK^T) @ V` GEMM of a float32 or bfloat16 program. oneDNN is not in an image, and
  which kernel it runs depends on the machine (its JIT picks by ISA). The template has its
  own vectorised micro-GEMM (`CppMicroGemmFP32Vec`, `cpp_micro_gemm.py`), which it already
  uses for that GEMM with half inputs ("Fallback Half brgemm is slower than micro gemm");
  `host_templates` makes it take that branch for every dtype. It patches Inductor's template
  text while the exporter compiles, so Inductor's compiled program, whose outputs the bundle
  records and the exporter compares with eager, runs the same code as the image: the values
  are the template's micro-GEMM's, not oneDNN's (both sum each dot product in float32; the
  order differs, so they differ in rounding). The bundle's notes say so.
  `at::native::cpublas::brgemm_release` then has nothing to release (no oneDNN hardware
  context was taken): its stand-in does nothing, as PyTorch's does for `is_vnni=false`.

Everything else the kernel needs must come from the headers or a system library
(`host_kernels.check_self_contained`): a template that reaches oneDNN another way (the
bfloat16 and half VNNI packing, `cpublas::could_pack` / `pack`) is refused at export,
naming the symbol.
"""

from __future__ import annotations

import contextlib
import re

from .errors import Unconvertible

# Serial definitions of the ATen entry points a template's kernel calls (see the module's
# docs), compiled into a separate object with `-fno-rtti` (the allocator's vtable must not
# reference c10::Allocator's typeinfo, which is in libc10) and linked into the image only
# when the kernel needs them.
ATEN_STAND_INS = r'''
// wrapir: serial stand-ins for ATen entry points of Inductor's CPU templates, so that the
// kernel image loads without libtorch (see wrapir_export.cpu_templates).
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <c10/core/Allocator.h>
#include <c10/util/ParallelGuard.h>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {
thread_local int wrapir_thread_num = 0;
thread_local bool wrapir_parallel_state = false;

void wrapir_free(void* p) { std::free(p); }

// c10's default CPU allocator: 64-byte aligned blocks (c10::alloc_cpu, gAlignment).
struct WrapirCpuAllocator final : c10::Allocator {
    c10::DataPtr allocate(size_t n) override {
        void* p = nullptr;
        if (n > 0 && posix_memalign(&p, 64, n) != 0) {
            throw std::bad_alloc();
        }
        return {p, p, &wrapir_free, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &wrapir_free; }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
        if (count > 0) {
            std::memcpy(dest, src, count);
        }
    }
    bool is_simple_data_ptr(const c10::DataPtr& data_ptr) const override {
        return data_ptr.get() == data_ptr.get_context();
    }
};
WrapirCpuAllocator wrapir_cpu_allocator;
}  // namespace

namespace at {
int get_num_threads() { return 1; }
int get_thread_num() { return wrapir_thread_num; }
namespace internal {
void set_thread_num(int id) { wrapir_thread_num = id; }
}  // namespace internal
Allocator* getCPUAllocator() { return &wrapir_cpu_allocator; }
namespace native::cpublas {
// No oneDNN hardware context is ever taken in an image: nothing to release.
void brgemm_release(bool) {}
}  // namespace native::cpublas
}  // namespace at

namespace c10 {
bool ParallelGuard::is_enabled() { return wrapir_parallel_state; }
ParallelGuard::ParallelGuard(bool state) : previous_state_(wrapir_parallel_state) {
    wrapir_parallel_state = state;
}
ParallelGuard::~ParallelGuard() { wrapir_parallel_state = previous_state_; }
}  // namespace c10
'''

# The template's choice between oneDNN's brgemm and its own micro-GEMM for `softmax(QK^T) @ V`
# (2.11 and 2.15: the attention template's `if`, 2.15's decoding template's `if constexpr`),
# and what it becomes.
BRGEMM_CONDITION = re.compile(r"if (?:constexpr )?\(!std::is_same_v<scalar_t, at::Half>\)")
MICRO_GEMM_CONDITION = ("if constexpr (false)  /* wrapir: the template's own micro-GEMM, not oneDNN's brgemm "
                        "(wrapir_export.cpu_templates) */")
# The thread count the template sizes its per-thread buffers by: Inductor's `cpp.threads` at
# compile time, which must be at least the number of ATen threads that run it (their ids index
# the buffers); read when the kernel runs instead.
THREAD_COUNT = re.compile(r"int64_t num_thread = \{\{num_thread\}\};")
RUNTIME_THREAD_COUNT = ("int64_t num_thread = at::get_num_threads();  /* wrapir: the threads that run it "
                        "(wrapir_export.cpu_templates) */")
# The template texts of Inductor's module (2.15 moved the declarations out of the attention
# template into INIT_PARAMS, 2.11 has no decoding template) and the patches, each with where
# it must match: the thread count in one of the texts, the brgemm branch in the attention
# template.
TEXTS = ("INIT_PARAMS", "FLEX_ATTENTION_TEMPLATE", "FLEX_DECODING_TEMPLATE")
PATCHES = ((THREAD_COUNT, RUNTIME_THREAD_COUNT, TEXTS), (BRGEMM_CONDITION, MICRO_GEMM_CONDITION,
                                                         ("FLEX_ATTENTION_TEMPLATE",)))
NOTE = ("FlexAttention's softmax(QK^T) @ V GEMM runs the template's own micro-GEMM (CppMicroGemmFP32Vec) "
        "instead of oneDNN's brgemm, and its per-thread buffers are sized by the threads that run it, in "
        "Inductor's compiled program (the recorded outputs) and in the kernel image alike "
        "(wrapir_export.cpu_templates)")


def patched_templates(module):
    """{attribute: text} of the FlexAttention template texts of Inductor's `module`, patched
    (`PATCHES`); an error naming the pattern and the texts when one does not match where it
    must (an Inductor whose template changed)."""
    out = {name: getattr(module, name) for name in TEXTS if isinstance(getattr(module, name, None), str)}
    for pattern, replacement, required_in in PATCHES:
        matched = []
        for name in out:
            out[name], n = pattern.subn(replacement, out[name])
            if n:
                matched.append(name)
        if not set(matched) & set(required_in):
            raise Unconvertible(f"Inductor's FlexAttention template ({', '.join(required_in)}) has no "
                                f"`{pattern.pattern}`: this PyTorch's CPU FlexAttention template is not supported "
                                "on the host")
    return out


@contextlib.contextmanager
def host_templates():
    """While compiling: Inductor's CPU FlexAttention template calls its own micro-GEMM
    where it would call oneDNN's brgemm and sizes its per-thread buffers when it runs (see
    the module's docs). A PyTorch without the template is left alone."""
    try:
        from torch._inductor.codegen import cpp_flex_attention_template as module
    except ImportError:
        yield
        return
    patched = patched_templates(module)
    saved = {name: getattr(module, name) for name in patched}
    for name, text in patched.items():
        setattr(module, name, text)
    try:
        yield
    finally:
        for name, text in saved.items():
            setattr(module, name, text)


def uses_host_templates(source):
    """Whether C++ source holds a template patched by `host_templates`."""
    return "(wrapir_export.cpu_templates) */" in source
