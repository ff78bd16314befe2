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

    def test_redact_halide_plugin_path(self):
        text = "hl.load_plugin('/opt/venv/lib/python3.11/site-packages/halide/lib64/libautoschedule_adams2019.so')"
        self.assertEqual(redact.redact(text), "hl.load_plugin('<halide>/lib64/libautoschedule_adams2019.so')")


if __name__ == "__main__":
    unittest.main()
