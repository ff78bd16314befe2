"""Host (CPU) kernels as shared objects that wrapir's host backend loads without PyTorch or
Python: Inductor's C++ kernels (`async_compile.cpp_pybinding`) and its Halide kernels
(`async_compile.halide`), compiled when a CPU program is exported.

Every image is built for the baseline x86-64 ISA (no `-march=native`; Inductor's C++
vectorisation is turned off while exporting, see `exporter.HOST_CONFIG`) so that it runs on
any x86-64 Linux machine, unless the export names a vector ISA (`target_isa`, the exporter's
`cpu_isa`): then Inductor vectorises for it and its C++ kernels are compiled with that ISA's
macros and flags (Inductor's own, `cpu_vec_isa.py`), and program.json's `isa` names it, which
wrapir's host backend checks the running CPU has before it loads the image:

* a C++ kernel `<kernel>` becomes `kernels/<kernel>.so`: Inductor's source (which includes
  `torch/csrc/inductor/cpp_prefix.h`, compiled here against the installed PyTorch's headers;
  those parts are header-only, so the object needs no libtorch or libc10, which is checked
  with the ELF dynamic section) plus two C functions: `wrapir_kernel_argv(void **args)`
  calls `kernel(...)` with `args[i]` the data pointer of tensor argument `i` and a pointer
  to the value of scalar argument `i`, and `wrapir_kernel_signature()` returns the argument
  types it was compiled with, joined by `;`, for the loader to check against the program;
* a Halide kernel `<kernel>` becomes `kernels/<kernel>.so` exporting Halide's own
  `<kernel>_argv(void **args)` and `<kernel>_metadata()`, ahead-of-time compiled for
  `halide.cpu_target` without a runtime; one `kernels/halide_runtime.so` (Halide's
  standalone runtime for the same target) serves every Halide kernel of the program, found
  through the kernel's `DT_NEEDED` and its `$ORIGIN` run path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from .errors import Unconvertible

# The baseline x86-64 ISA and Inductor's own numerics flags for its C++ kernels (strict IEEE
# arithmetic: no fast-math, no contraction into FMAs). `-Bsymbolic`: the entry point calls
# this object's own `kernel`, never another object's of the same name.
CXXFLAGS = ["-O2", "-DNDEBUG", "-march=x86-64", "-mtune=generic", "-fPIC", "-shared",
            "-fno-strict-aliasing", "-fno-finite-math-only", "-fno-unsafe-math-optimizations",
            "-ffp-contract=off", "-Wl,-Bsymbolic", "-w"]
HALIDE_TARGET = "x86-64-linux"

# The vector ISAs an export may build its C++ kernels for: Inductor's `cpp.simdlen` and the
# `cpu_vec_isa` class it must pick for it (`None`: the baseline, no vectorisation). wrapir's
# loader knows the same names (`exec::host::kernels::isa`).
CPU_ISAS = {"baseline": (0, None), "avx2": (256, "VecAVX2"), "avx512": (512, "VecAVX512")}
_TARGET = {"isa": "baseline"}


def check_cpu_isa(name):
    """`name` if it is one of `CPU_ISAS` that this machine can build and run (its kernels
    are run while exporting), else ValueError naming what this machine has."""
    if name not in CPU_ISAS:
        raise ValueError(f"cpu_isa={name!r}: expected one of {', '.join(CPU_ISAS)}")
    cls = CPU_ISAS[name][1]
    if cls is not None:
        from torch._inductor import cpu_vec_isa

        have = [type(i).__name__ for i in cpu_vec_isa.valid_vec_isa_list()]
        if cls not in have:
            raise ValueError(f"cpu_isa={name!r}: this machine's CPU (or compiler) cannot build {cls}; "
                             f"Inductor finds {', '.join(have) or 'no vector ISA'}")
    return name


def inductor_config(name):
    """Inductor's settings for kernels of ISA `name`: `cpp.simdlen`."""
    return {"cpp.simdlen": CPU_ISAS[check_cpu_isa(name)][0]}


class target_isa:
    """A context in which C++ kernels are compiled for ISA `name` (`CPU_ISAS`)."""

    def __init__(self, name):
        self.name = check_cpu_isa(name)

    def __enter__(self):
        self.saved = _TARGET["isa"]
        _TARGET["isa"] = self.name
        return self

    def __exit__(self, *exc):
        _TARGET["isa"] = self.saved
        return False


def current_isa():
    """The ISA C++ kernels are compiled for now (`baseline` outside `target_isa`)."""
    return _TARGET["isa"]


def isa_flags(name):
    """The compiler flags of ISA `name`: Inductor's arch flags and `-D` of its macros."""
    cls = CPU_ISAS[name][1]
    if cls is None:
        return []
    from torch._inductor import cpu_vec_isa

    isa = getattr(cpu_vec_isa, cls)()
    return isa.build_arch_flags().split() + [f"-D{m}" for m in isa.build_macro()]


def check_picked_isa(name):
    """After compiling: Inductor vectorised for `name`'s class (with a `cpp.simdlen` two
    classes share, such as 512 for AVX-512 and AMX, it may pick another), else an error."""
    cls = CPU_ISAS[name][1]
    if cls is None:
        return
    from torch._inductor import config, cpu_vec_isa

    with config.patch(inductor_config(name)):
        picked = type(cpu_vec_isa.pick_vec_isa()).__name__
    if picked != cls:
        raise Unconvertible(f"cpu_isa={name!r}: Inductor vectorised for {picked}, not {cls}; "
                            f"its kernels would need that ISA")
HALIDE_RUNTIME = "halide_runtime.so"
# Shared objects a host kernel image must not need (it must load without PyTorch).
FORBIDDEN_NEEDED = ("libtorch", "libc10", "libpython", "libgomp", "libiomp", "libomp")

RE_CPP_DEF = re.compile(r"async_compile\.cpp_pybinding\(\s*(\[[^\]]*\])\s*,\s*r?'''(.*)'''", re.S)
RE_HALIDE_DEF = re.compile(r"async_compile\.halide\(\s*(HalideMeta\(.*?\))\s*,\s*r?'''(.*)'''", re.S)


def cxx():
    return os.environ.get("CXX", "g++")


def compiler_version():
    """The first line of `$CXX --version`."""
    return _run([cxx(), "--version"], "the C++ compiler").splitlines()[0].strip()


def parse_cpp_definition(body):
    """(argument types, source) of `async_compile.cpp_pybinding([...], r'''...''')`."""
    import ast

    m = RE_CPP_DEF.search(body)
    if not m:
        raise Unconvertible("C++ kernel definition not in the form `async_compile.cpp_pybinding([...], r'''...''')`")
    types = ast.literal_eval(m.group(1))
    if not all(isinstance(t, str) for t in types):
        raise Unconvertible(f"C++ kernel argument types {types!r} are not strings")
    return [t.strip() for t in types], m.group(2)


def parse_halide_definition(body):
    """(HalideMeta as program.json's `halide` backend, source) of
    `async_compile.halide(HalideMeta(...), '''...''')`."""
    from torch._inductor.runtime.hints import HalideInputSpec, HalideMeta

    m = RE_HALIDE_DEF.search(body)
    if not m:
        raise Unconvertible("Halide kernel definition not in the form `async_compile.halide(HalideMeta(...), '''...''')`")
    # The metadata is Inductor's own repr of a HalideMeta: evaluated with only its two classes.
    meta = eval(m.group(1), {"__builtins__": {}}, {"HalideMeta": HalideMeta, "HalideInputSpec": HalideInputSpec})
    return meta, m.group(2)


def halide_backend_json(meta):
    args = []
    for a in meta.argtypes:
        d = {"ctype": a.ctype, "name": a.name}
        if a.shape is not None:
            d["shape"] = [str(x) for x in a.shape]
            d["stride"] = [str(x) for x in a.stride]
            d["offset"] = str(a.offset)
        if a.alias_of is not None:
            d["alias_of"] = a.alias_of
        args.append(d)
    out = {"kind": "halide", "argtypes": args, "target": meta.target}
    if meta.scheduler:
        out["scheduler"] = meta.scheduler
    if meta.scheduler_flags:
        out["scheduler_flags"] = {str(k): v for k, v in meta.scheduler_flags.items()}
    if meta.cuda_device is not None:
        out["cuda_device"] = int(meta.cuda_device)
    return out


def _run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise Unconvertible(f"{what} failed ({p.returncode}): {' '.join(cmd[:3])} ...\n{p.stdout[-3000:]}")
    return p.stdout


def needed_libraries(path):
    """The `DT_NEEDED` entries of a shared object (`readelf -d`)."""
    out = _run(["readelf", "-d", path], f"readelf of {os.path.basename(path)}")
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def check_needed(path):
    bad = [n for n in needed_libraries(path) if n.startswith(FORBIDDEN_NEEDED)]
    if bad:
        raise Unconvertible(f"{os.path.basename(path)} needs {', '.join(bad)}: it would not load without PyTorch")


def unresolved_symbols(path):
    """The undefined, non-weak dynamic symbols of a shared object that no versioned
    system library provides: the symbols of the C and C++ runtimes carry a version
    (`expf@GLIBC_2.27`, `_Znam@GLIBCXX_3.4`); an unversioned one (PyTorch 2.15's headers
    call `c10::detail::torchCheckFail`) would be looked up in libc10 and fail to bind."""
    out = _run(["nm", "-D", "--undefined-only", path], f"nm of {os.path.basename(path)}")
    bad = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "U" and "@" not in parts[-1]:
            bad.append(parts[-1])
    return bad


def check_self_contained(path):
    """`check_needed`, and every symbol the image needs is provided by a library it names."""
    check_needed(path)
    bad = unresolved_symbols(path)
    if bad:
        raise Unconvertible(f"{os.path.basename(path)} needs symbols no system library provides "
                            f"({', '.join(bad[:5])}): it would not load without PyTorch")


def c_scalar_type(t):
    """The C value type of a scalar argument type (`const int64_t` -> `int64_t`)."""
    t = re.sub(r"\bconst\b", "", t).strip()
    return " ".join(t.split())


# PyTorch's headers call `c10::detail::torchCheckFail` when a `TORCH_CHECK` in a kernel fails
# (2.15's scalar kernels with a C string, 2.11's vectorised ones with a `std::string`); libc10
# defines both, and an image must load without libc10. These definitions throw instead, and the entry point turns the exception into a non-zero
# return and a message (`wrapir_kernel_error`), so a failed check is an error naming the
# kernel, never an unbound symbol or an exception crossing the C ABI.
CPP_CHECK_SUPPORT = r'''
// wrapir: a failed TORCH_CHECK in the kernel, without libc10 (see wrapir_export.host_kernels).
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
namespace c10 {
namespace detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, uint32_t line, const char* msg) {
    throw std::runtime_error(std::string(msg) + " (" + func + " at " + file + ":" + std::to_string(line) + ")");
}
[[noreturn]] void torchCheckFail(const char* func, const char* file, uint32_t line, const std::string& msg) {
    torchCheckFail(func, file, line, msg.c_str());
}
}  // namespace detail
}  // namespace c10
static thread_local char wrapir_kernel_error_text[512];
extern "C" const char *wrapir_kernel_error(void) { return wrapir_kernel_error_text; }
'''


def cpp_entry_source(arg_types):
    """`wrapir_kernel_argv`, `wrapir_kernel_signature` and `wrapir_kernel_error` for a
    kernel taking `arg_types`."""
    args = []
    for i, t in enumerate(arg_types):
        if t.endswith("*"):
            args.append(f"static_cast<{t}>(args[{i}])")
        else:
            args.append(f"*static_cast<const {c_scalar_type(t)}*>(args[{i}])")
    sig = ";".join(arg_types).replace("\\", "\\\\").replace('"', '\\"')
    joined = (",\n            ").join(args)
    return (
        CPP_CHECK_SUPPORT
        + "\n// wrapir: one entry point of a fixed C ABI for every kernel (see wrapir_export.host_kernels).\n"
        'extern "C" int wrapir_kernel_argv(void **args) {\n'
        "    try {\n"
        f"        kernel({joined});\n"
        "    } catch (const std::exception& e) {\n"
        '        std::snprintf(wrapir_kernel_error_text, sizeof wrapir_kernel_error_text, "%s", e.what());\n'
        "        return 1;\n"
        "    } catch (...) {\n"
        '        std::snprintf(wrapir_kernel_error_text, sizeof wrapir_kernel_error_text, "%s", "unknown C++ exception");\n'
        "        return 1;\n"
        "    }\n"
        "    return 0;\n"
        "}\n"
        f'extern "C" const char *wrapir_kernel_signature(void) {{ return "{sig}"; }}\n'
    )


def torch_include_dirs():
    from torch.utils.cpp_extension import include_paths

    return include_paths()


def path_maps(prefixes):
    """`-ffile-prefix-map` flags that write each directory of `prefixes` ({directory: name})
    into an image under its fixed name: `__FILE__` in PyTorch's headers (assertion
    messages) would otherwise put this machine's paths into every kernel image."""
    return [f"-ffile-prefix-map={d}={n}" for d, n in prefixes.items()]


def cpp_std_flag():
    """The C++ standard Inductor compiles its kernels with (2.11: C++17, 2.15: C++20, whose
    ATen headers need it), as a `-std=` flag."""
    try:
        from torch._inductor.cpp_builder import _get_cpp_std_cflag

        return f"-{_get_cpp_std_cflag()[0]}"
    except (ImportError, AttributeError, IndexError):
        return "-std=c++17"


def build_cpp_kernel(name, source, arg_types, kdir):
    """Compiles C++ kernel `name` into `kdir/<name>.so`; returns its path relative to the
    bundle. A kernel that calls the ATen entry points of Inductor's CPU templates gets
    `cpu_templates.ATEN_STAND_INS` linked in; any other symbol no system library provides
    is an error naming it."""
    from . import cpu_templates

    os.makedirs(kdir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wrapir-cpp-") as tmp:
        src = os.path.join(tmp, f"{name}.cpp")
        with open(src, "w") as f:
            f.write(source)
            f.write(cpp_entry_source(arg_types))
        out = os.path.join(kdir, f"{name}.so")
        includes = [f"-I{d}" for d in torch_include_dirs()]
        import torch

        maps = path_maps({tmp: ".", os.path.dirname(torch.__file__): "torch"})
        flags = [cxx(), *CXXFLAGS, cpp_std_flag(), *isa_flags(current_isa()), *maps, *includes]
        obj = os.path.join(tmp, f"{name}.o")
        _run([*flags, "-c", "-o", obj, src], f"compiling C++ kernel {name}")
        _run([*flags, "-o", out, obj, "-s"], f"linking C++ kernel {name}")
        if unresolved_symbols(out):
            stand_ins = os.path.join(tmp, "aten_stand_ins.cpp")
            with open(stand_ins, "w") as f:
                f.write(cpu_templates.ATEN_STAND_INS)
            stand_ins_obj = os.path.join(tmp, "aten_stand_ins.o")
            _run([*flags, "-fno-rtti", "-c", "-o", stand_ins_obj, stand_ins], f"compiling ATen stand-ins for {name}")
            _run([*flags, "-o", out, obj, stand_ins_obj, "-s"], f"linking C++ kernel {name} with ATen stand-ins")
    check_self_contained(out)
    return f"kernels/{name}.so"


def build_halide_runtime(kdir, target=HALIDE_TARGET):
    """Halide's standalone runtime for `target` as `kdir/halide_runtime.so` (once per bundle)."""
    out = os.path.join(kdir, HALIDE_RUNTIME)
    if os.path.exists(out):
        return out
    import halide as hl

    os.makedirs(kdir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wrapir-halide-rt-") as tmp:
        obj = os.path.join(tmp, "runtime.o")
        hl.compile_standalone_runtime(obj, hl.Target(target))
        _run([cxx(), "-shared", "-fPIC", "-o", out, obj, "-lpthread", "-ldl", "-s"], "linking the Halide runtime")
    check_needed(out)
    return out


def halide_autoscheduler(name):
    """The autoscheduler plugin Inductor itself would load."""
    from torch._inductor.codecache import HalideCodeCache

    return HalideCodeCache.find_libautoschedule(name)


def build_halide_kernel(name, meta, source, kdir):
    """Runs kernel `name`'s Halide generator ahead of time for its target (Inductor's
    `halide.cpu_target`, which the export sets to the baseline) and links the object into
    `kdir/<name>.so` against the bundle's one Halide runtime; returns its path relative to
    the bundle."""
    if meta.is_cuda():
        raise Unconvertible(f"Halide kernel {name} targets CUDA; only CPU Halide kernels are compiled to host images")
    if "no_runtime" not in meta.target:
        raise Unconvertible(f"Halide kernel {name}: target `{meta.target}` embeds a runtime (expected no_runtime)")
    base = meta.target.split("-")
    if base[0] == "host":
        raise Unconvertible(f"Halide kernel {name}: target `{meta.target}` is the exporting machine's CPU; "
                            f"export with halide.cpu_target={HALIDE_TARGET!r}")
    build_halide_runtime(kdir)
    os.makedirs(kdir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wrapir-halide-") as tmp:
        gen = os.path.join(tmp, "generate_kernel.py")
        with open(gen, "w") as f:
            f.write(source)
        cmd = [sys.executable, gen, "-g", "kernel", "-o", tmp, "-f", name, "-e", "object,h"]
        if meta.scheduler:
            cmd += ["-p", halide_autoscheduler(meta.scheduler)]
        cmd += meta.args()
        _run(cmd, f"Halide generator of {name}")
        obj = os.path.join(tmp, f"{name}.o")
        if not os.path.exists(obj):
            raise Unconvertible(f"Halide generator of {name} wrote no {name}.o")
        out = os.path.join(kdir, f"{name}.so")
        _run([cxx(), "-shared", "-fPIC", "-o", out, obj, f"-L{kdir}", f"-l:{HALIDE_RUNTIME}",
              "-Wl,-rpath,$ORIGIN", "-s"], f"linking Halide kernel {name}")
    check_needed(out)
    return f"kernels/{name}.so"
