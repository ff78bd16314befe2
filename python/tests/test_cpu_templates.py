"""Inductor's CPU FlexAttention template as self-contained host images
(`wrapir_export.cpu_templates`): the template patches, refused when the template text
changes, and an export whose image needs no libtorch, runs on wrapir's host backend and
equals Inductor's compiled outputs. The export needs torch and an AVX2 CPU (skipped
otherwise); the patch checks need only torch's Inductor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path.insert(0, PYTHON_DIR)

try:
    import torch
except ImportError:
    torch = None

from wrapir_export import cpu_templates as CT  # noqa: E402
from wrapir_export.errors import Unconvertible  # noqa: E402


def wrapir_binary():
    path = os.environ.get("WRAPIR")
    return path if path and os.path.exists(path) else None


class TemplatePatches(unittest.TestCase):
    """The patches on a stand-in of Inductor's template module (no torch needed)."""

    def module(self, attention):
        return types.SimpleNamespace(
            INIT_PARAMS="  int64_t num_thread = {{num_thread}};\n",
            FLEX_ATTENTION_TEMPLATE=attention,
        )

    def test_brgemm_branch_becomes_the_micro_gemm_and_threads_are_read_at_run_time(self):
        attention = ("if (!std::is_same_v<scalar_t, at::Half>) {\n  at::native::cpublas::brgemm(a);\n"
                     "} else {\n  micro_gemm(a);\n}\n")
        out = CT.patched_templates(self.module(attention))
        self.assertIn("int64_t num_thread = at::get_num_threads();", out["INIT_PARAMS"])
        self.assertNotIn("{{num_thread}}", out["INIT_PARAMS"])
        self.assertTrue(out["FLEX_ATTENTION_TEMPLATE"].startswith("if constexpr (false)"))
        self.assertNotIn("is_same_v<scalar_t, at::Half>", out["FLEX_ATTENTION_TEMPLATE"])
        self.assertTrue(CT.uses_host_templates(out["FLEX_ATTENTION_TEMPLATE"]))
        self.assertFalse(CT.uses_host_templates(attention))

    def test_a_changed_template_is_refused_by_name(self):
        with self.assertRaises(Unconvertible) as cm:
            CT.patched_templates(self.module("at::native::cpublas::brgemm(a);\n"))
        self.assertIn("FLEX_ATTENTION_TEMPLATE", str(cm.exception))
        module = self.module("if (!std::is_same_v<scalar_t, at::Half>) {}")
        module.INIT_PARAMS = "int64_t num_thread = 4;"
        with self.assertRaises(Unconvertible) as cm:
            CT.patched_templates(module)
        self.assertIn("num_thread", str(cm.exception))

    def test_2_11_declares_the_thread_count_in_the_attention_template(self):
        module = types.SimpleNamespace(FLEX_ATTENTION_TEMPLATE=(
            "int64_t num_thread = {{num_thread}};\nif (!std::is_same_v<scalar_t, at::Half>) {}"))
        out = CT.patched_templates(module)
        self.assertEqual(list(out), ["FLEX_ATTENTION_TEMPLATE"])
        self.assertIn("int64_t num_thread = at::get_num_threads();", out["FLEX_ATTENTION_TEMPLATE"])
        self.assertIn("if constexpr (false)", out["FLEX_ATTENTION_TEMPLATE"])


def has_avx2():
    from torch._inductor import cpu_vec_isa

    return "VecAVX2" in [type(i).__name__ for i in cpu_vec_isa.valid_vec_isa_list()]


def flex(q, k, v):
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score - 0.1 * (q_idx - kv_idx).float(), -float("inf"))

    return flex_attention(q, k, v, score_mod=score_mod)


@unittest.skipIf(torch is None, "torch is not installed")
class InstalledInductor(unittest.TestCase):
    def test_installed_templates_are_patched_and_restored(self):
        from torch._inductor.codegen import cpp_flex_attention_template as module

        before = module.FLEX_ATTENTION_TEMPLATE
        with CT.host_templates():
            self.assertNotIn("is_same_v<scalar_t, at::Half>", module.FLEX_ATTENTION_TEMPLATE)
            self.assertTrue(CT.uses_host_templates(module.FLEX_ATTENTION_TEMPLATE))
            # 2.15 declares the thread count in INIT_PARAMS, 2.11 in the attention template.
            declarations = getattr(module, "INIT_PARAMS", module.FLEX_ATTENTION_TEMPLATE)
            self.assertIn("int64_t num_thread = at::get_num_threads();", declarations)
        self.assertEqual(module.FLEX_ATTENTION_TEMPLATE, before)

    def test_flex_attention_exports_a_self_contained_image(self):
        if not has_avx2():
            self.skipTest("this CPU has no AVX2")
        import wrapir_export as we
        from wrapir_export import host_kernels as H

        torch.manual_seed(0)
        inputs = [torch.randn(1, 2, 128, 16) for _ in range(3)]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "flex")
            r = we.export(flex, inputs, path, capture_devices=("cuda", "cpu"), progress=False, cpu_isa="avx2")
            self.assertTrue(r.ok, r.errors)
            with open(os.path.join(path, "program.json")) as f:
                kernels = list(json.load(f)["kernels"].values())
            with open(os.path.join(path, "bundle.json")) as f:
                info = json.load(f)
            self.assertIn(CT.NOTE, info["notes"])
            (template,) = [k for k in kernels if "flex_attention" in k["name"]]
            self.assertTrue(CT.uses_host_templates(template["source"]))
            image = os.path.join(path, "kernels", template["name"] + ".so")
            self.assertEqual(H.unresolved_symbols(image), [])
            defined = subprocess.run(["nm", "-D", "--defined-only", image], capture_output=True, text=True).stdout
            for symbol in ("_ZN2at14get_thread_numEv", "_ZN2at15getCPUAllocatorEv", "_ZN2at15get_num_threadsEv"):
                self.assertIn(symbol, defined)
            self.assertNotIn("brgemmE", defined.replace("brgemm_releaseE", ""))
            wrapir = wrapir_binary()
            if wrapir:
                run = subprocess.run([wrapir, "run", path, "--device", "cpu"], capture_output=True, text=True)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                self.assertIn("against inductor: 1 outputs match", run.stdout)


@unittest.skipIf(torch is None, "torch is not installed")
class CommittedBundles(unittest.TestCase):
    """The committed FlexAttention bundles (2.11 and 2.15) through `fx_module`: its images
    loaded with ctypes into this PyTorch process run the template serially on their own
    stand-ins and equal Inductor's compiled outputs."""

    def test_fx_module_runs_the_committed_flex_attention_bundles(self):
        if not has_avx2():
            self.skipTest("this CPU has no AVX2")
        wrapir = wrapir_binary()
        if not wrapir:
            self.skipTest("WRAPIR is not set")
        import wrapir_export as we
        from wrapir_export.safetensors import load_safetensors
        from wrapir_export.tolerances import compare_outputs

        root = os.path.join(os.path.dirname(PYTHON_DIR), "fixtures", "inductor")
        for rel in ("bundles_cpu/families/flex_attention", "bundles_cpu_2.15/families/flex_attention"):
            with self.subTest(bundle=rel):
                b = os.path.join(root, rel)
                with open(os.path.join(b, "bundle.json")) as f:
                    info = json.load(f)
                gm = we.fx_module(b, code=we.fx.lower_fx(b, wrapir))
                self.assertTrue(gm.host_kernels)
                out = gm(*we.load_inputs(b))
                out = list(out) if isinstance(out, (list, tuple)) else [out]
                expected = load_safetensors(os.path.join(b, "compiled.safetensors"))
                ok, reason, _ = compare_outputs(torch, out, expected, info["compiled_tolerance"])
                self.assertTrue(ok, reason)


if __name__ == "__main__":
    unittest.main()
