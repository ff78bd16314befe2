"""`wrapir_export.host_kernels` without PyTorch: parsing Inductor's C++ kernel definitions,
the fixed-ABI entry point added to each kernel, and the redaction of Halide's plugin path."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from wrapir_export import host_kernels, redact  # noqa: E402
from wrapir_export.errors import Unconvertible  # noqa: E402

Q = "'" * 3
BODY = (f"async_compile.cpp_pybinding(['float*', 'const float*', 'const int64_t'], r{Q}\n"
        "#include <torch/csrc/inductor/cpp_prefix.h>\n"
        'extern "C" void kernel(float* out_ptr0, const float* in_ptr0, const int64_t ks0) { out_ptr0[0] = ks0; }\n'
        f"{Q})")


class HostKernels(unittest.TestCase):
    def test_parse_cpp_definition(self):
        types, source = host_kernels.parse_cpp_definition(BODY)
        self.assertEqual(types, ["float*", "const float*", "const int64_t"])
        self.assertIn('extern "C" void kernel(', source)
        with self.assertRaises(Unconvertible):
            host_kernels.parse_cpp_definition(f"async_compile.triton('k', {Q}x{Q})")

    def test_entry_point_compiles_and_calls_the_kernel(self):
        types, source = host_kernels.parse_cpp_definition(BODY)
        entry = host_kernels.cpp_entry_source(types)
        self.assertIn("static_cast<float*>(args[0])", entry)
        self.assertIn("*static_cast<const int64_t*>(args[2])", entry)
        self.assertIn('return "float*;const float*;const int64_t";', entry)
        src = source.replace("#include <torch/csrc/inductor/cpp_prefix.h>", "#include <cstdint>") + entry
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cpp")
            with open(path, "w") as f:
                f.write(src)
            r = subprocess.run([host_kernels.cxx(), "-std=c++17", "-fsyntax-only", path], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)

    def _build(self, tmp, kernel_source, arg_types):
        """Compiles `kernel_source` + the entry point with the exporter's flags into a .so."""
        src = os.path.join(tmp, "k.cpp")
        with open(src, "w") as f:
            f.write(kernel_source + host_kernels.cpp_entry_source(arg_types))
        out = os.path.join(tmp, "k.so")
        r = subprocess.run([host_kernels.cxx(), *host_kernels.CXXFLAGS, "-o", out, src], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out

    def test_images_hold_no_paths_of_the_exporting_machine(self):
        # A header's __FILE__ (PyTorch's assertion messages) names the directory it was
        # included from: the exporter maps its directories to fixed names.
        with tempfile.TemporaryDirectory() as tmp:
            inc = os.path.join(tmp, "site", "torch", "include")
            os.makedirs(inc)
            with open(os.path.join(inc, "where.h"), "w") as f:
                f.write('inline const char* where() { return __FILE__; }\n')
            src = os.path.join(tmp, "k.cpp")
            with open(src, "w") as f:
                f.write('#include "where.h"\nextern "C" const char* kernel_where() { return where(); }\n'
                        'extern "C" const char* kernel_file() { return __FILE__; }\n')
            out = os.path.join(tmp, "k.so")
            maps = host_kernels.path_maps({tmp: ".", os.path.join(tmp, "site", "torch"): "torch"})
            r = subprocess.run([host_kernels.cxx(), *host_kernels.CXXFLAGS, *maps, f"-I{inc}", "-o", out, src],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out, "rb") as f:
                image = f.read()
            self.assertNotIn(tmp.encode(), image)
            self.assertIn(b"torch/include/where.h", image)

    def test_a_failed_check_is_an_error_not_an_unbound_symbol(self):
        # PyTorch 2.15's headers call c10::detail::torchCheckFail from a failed TORCH_CHECK:
        # the image defines it (no libc10), the entry returns 1 and names the failure.
        import ctypes

        kernel = ('#include <cstdint>\n'
                  'namespace c10 { namespace detail { [[noreturn]] void torchCheckFail('
                  'const char*, const char*, uint32_t, const char*); } }\n'
                  'extern "C" void kernel(float* out, const int64_t n) {\n'
                  '    if (n < 0) c10::detail::torchCheckFail("kernel", "k.cpp", 3, "n must be >= 0");\n'
                  '    out[0] = n;\n}\n')
        with tempfile.TemporaryDirectory() as tmp:
            so = self._build(tmp, kernel, ["float*", "const int64_t"])
            self.assertEqual(host_kernels.unresolved_symbols(so), [])
            host_kernels.check_self_contained(so)
            lib = ctypes.CDLL(so, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            lib.wrapir_kernel_error.restype = ctypes.c_char_p
            out = ctypes.c_float(0)
            for n, rc in ((7, 0), (-1, 1)):
                value = ctypes.c_int64(n)
                argv = (ctypes.c_void_p * 2)(ctypes.addressof(out), ctypes.addressof(value))
                self.assertEqual(lib.wrapir_kernel_argv(argv), rc)
            self.assertEqual(out.value, 7.0)
            self.assertEqual(lib.wrapir_kernel_error(), b"n must be >= 0 (kernel at k.cpp:3)")

    def test_an_image_needing_an_unprovided_symbol_is_refused(self):
        kernel = ('extern "C" float from_libtorch(float);\n'
                  'extern "C" void kernel(float* out) { out[0] = from_libtorch(out[0]); }\n')
        with tempfile.TemporaryDirectory() as tmp:
            so = self._build(tmp, kernel, ["float*"])
            self.assertEqual(host_kernels.unresolved_symbols(so), ["from_libtorch"])
            with self.assertRaisesRegex(Unconvertible, "from_libtorch"):
                host_kernels.check_self_contained(so)

    def test_cpu_isa_names_are_checked_and_scoped(self):
        # The baseline needs no PyTorch: no flags, simdlen 0, outside any context.
        self.assertEqual(host_kernels.current_isa(), "baseline")
        self.assertEqual(host_kernels.isa_flags("baseline"), [])
        self.assertEqual(host_kernels.inductor_config("baseline"), {"cpp.simdlen": 0})
        with host_kernels.target_isa("baseline"):
            self.assertEqual(host_kernels.current_isa(), "baseline")
        # An ISA wrapir's loader does not know is refused before anything is compiled.
        with self.assertRaises(ValueError) as e:
            host_kernels.target_isa("avx10")
        self.assertIn("baseline, avx2, avx512", str(e.exception))
        # The names are the loader's (`exec::host::kernels::isa::ISAS` in Rust).
        self.assertEqual(sorted(host_kernels.CPU_ISAS), ["avx2", "avx512", "baseline"])

    def test_redact_halide_plugin_path(self):
        text = "hl.load_plugin('/opt/venv/lib/python3.11/site-packages/halide/lib64/libautoschedule_adams2019.so')"
        self.assertEqual(redact.redact(text), "hl.load_plugin('<halide>/lib64/libautoschedule_adams2019.so')")


if __name__ == "__main__":
    unittest.main()
