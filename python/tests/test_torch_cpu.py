"""Smoke tests with PyTorch on the CPU (skipped without torch; no GPU needed).

Inductor's CPU wrapper uses the same Python wrapper code generator as CUDA, so with the
capture registered for `cpu` too, programs without kernels (extern calls only) export
end to end: the capture hooks, the kept-module selection, ExportedProgram,
`dynamic=True`, freezing, the CLI, C++ kernels compiled into host images, and errors
naming a line that cannot be expressed. The FX builder is checked on the FX snapshots of the fixtures (built,
and run where no kernel is launched).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

try:
    import torch
except ImportError:  # the pure tests still run
    torch = None

CPU = {"capture_devices": ("cuda", "cpu"), "progress": False}


def torch_version():
    """(major, minor) of the installed PyTorch, e.g. (2, 15) for `2.15.0+cu132`."""
    import re

    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2)))


TORCH_VERSION = torch_version() if torch else None


def mm(a, b):
    return a @ b


class Linear(torch.nn.Module if torch else object):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)

    def forward(self, x):
        return torch.mm(x, self.lin.weight.t())


@unittest.skipIf(torch is None, "torch is not installed")
class CpuExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def export(self, fn, inputs, name, **kw):
        import wrapir_export as we

        return we.export(fn, inputs, os.path.join(self.dir, name), **CPU, **kw)

    def wrapir_succeeds(self, *args):
        """Runs the wrapir binary with `args`, where there is one, and asserts it exits 0."""
        wrapir = wrapir_binary()
        if wrapir:
            run = subprocess.run([wrapir, *args], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def program(self, r):
        with open(os.path.join(r.path, "program.json")) as f:
            return json.load(f)

    def test_function(self):
        r = self.export(mm, [torch.randn(8, 4), torch.randn(4, 6)], "mm")
        self.assertTrue(r.ok)
        self.assertEqual(r.kernels, 0)
        p = self.program(r)
        lines = [ln for ln in p["main"]["lines"] if ln["line"] != "comment"]
        # The graph inputs' size asserts: in the wrapper's prefix (not a line) through 2.11,
        # typed lines just before the first use from 2.12 (without a context in 2.12,
        # `input` from 2.13), grouped from 2.14.
        sizes = [{"buffer": "arg0_1", "size": [8, 4], "stride": [4, 1]},
                 {"buffer": "arg1_1", "size": [4, 6], "stride": [6, 1]}]
        if TORCH_VERSION < (2, 12):
            asserts = []
        elif TORCH_VERSION < (2, 13):
            asserts = [{"line": "assert_size_stride", **s} for s in sizes]
        elif TORCH_VERSION < (2, 14):
            asserts = [{"line": "assert_size_stride", **s, "context": "input"} for s in sizes]
        else:
            asserts = [{"line": "assert_size_stride_grouped", "asserts": sizes, "context": "input"}]
        self.assertEqual(lines[:len(asserts)], asserts)
        self.assertEqual([ln["line"] for ln in lines[len(asserts):]], ["allocate", "extern_kernel_out", "free", "free"])
        for f in ("program.json", "inputs.safetensors", "expected.safetensors", "compiled.safetensors",
                  "inductor.py.txt", "inductor.cpp.txt", "bundle.json"):
            self.assertTrue(os.path.exists(os.path.join(r.path, f)), f)
        self.assertEqual(r.info["graph_inputs"], ["arg0_1", "arg1_1"])
        self.assertEqual(r.info["compile_kwargs"], {})

    def test_module_weights(self):
        torch.manual_seed(1)
        r = self.export(Linear(), [torch.randn(8, 4)], "module")
        self.assertEqual(r.info["module"], "Linear")
        self.assertEqual(list(r.info["weight_names"].values()), ["lin.weight"])
        # The user's names: `forward(self, x)`, the weight unnamed, one output.
        self.assertEqual(r.info["signature"], ["x"])
        weight = r.info["weights"][0]
        user = [g for g in r.info["graph_inputs"] if g != weight]
        self.assertEqual(r.info["input_names"], {user[0]: "x"})
        self.assertEqual(r.info["output_names"], ["output"])

    def test_mutated_inputs_are_recorded_with_eager_values(self):
        from wrapir_export.safetensors import load_safetensors

        def step(x, cache, pos):
            cache.index_copy_(0, pos, x * 2)
            return cache.sum(0)

        cache = torch.randn(6, 4)
        r = self.export(step, [torch.randn(1, 4), cache, torch.tensor([3])], "mutated_fn")
        self.assertTrue(r.ok, r.errors)
        by_user = {u: g for g, u in r.info["input_names"].items()}
        self.assertEqual(r.info["mutated_inputs"], [by_user["cache"]])
        inputs = load_safetensors(os.path.join(r.path, "inputs.safetensors"))
        after = load_safetensors(os.path.join(r.path, "mutated.safetensors"))
        g = by_user["cache"]
        # The stored input is the cache before the call; eager's after it differs in row 3 only.
        self.assertTrue(torch.equal(inputs[g], cache))
        changed = (after[g] != inputs[g]).any(dim=1).nonzero().flatten().tolist()
        self.assertEqual(changed, [3])
        self.assertTrue(torch.equal(after[g][3], inputs[by_user["x"]][0] * 2))

        # A program that writes no input records none (and writes no file).
        r = self.export(mm, [torch.randn(2, 3), torch.randn(3, 2)], "unmutated")
        self.assertEqual(r.info["mutated_inputs"], [])
        self.assertFalse(os.path.exists(os.path.join(r.path, "mutated.safetensors")))

    def test_mutated_module_buffer_is_recorded_and_restored(self):
        from wrapir_export.safetensors import load_safetensors

        class Counter(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("total", torch.zeros(3))

            def forward(self, x):
                self.total.add_(x)
                return self.total * 2

        m = Counter()
        x = torch.randn(3)
        r = self.export(m, [x], "mutated_buffer")
        self.assertTrue(r.ok, r.errors)
        [g] = r.info["mutated_inputs"]
        self.assertEqual(r.info["weight_names"][g], "total")
        # Eager's buffer after one call; every export run started from zeros (the
        # compiled run would otherwise see the eager call's sum and add x again).
        after = load_safetensors(os.path.join(r.path, "mutated.safetensors"))
        self.assertTrue(torch.allclose(after[g], x))
        self.assertTrue(torch.equal(m.total, torch.zeros(3)))

    @unittest.skipUnless(os.environ.get("WRAPIR"), "WRAPIR (the wrapir binary) is not set")
    def test_ops_a_device_cannot_run_are_named_at_export(self):
        import wrapir_export as we

        def spectrum(x):
            # aten._fft_r2c: an extern op Inductor leaves to ATen, which the host does not run.
            return torch.fft.rfft(x).abs() + 1

        x = torch.randn(4, 16)
        r = self.export(spectrum, [x], "fft_warn")
        self.assertTrue(r.ok, r.errors)
        ffts = [w for w in r.warnings if "cannot run extern op aten._fft_r2c" in w]
        self.assertEqual(len(ffts), 1, r.warnings)
        self.assertIn("the cpu backend", ffts[0])
        with self.assertRaises(we.ExportError) as e:
            self.export(spectrum, [x], "fft_error", unrunnable="error")
        self.assertIn("aten._fft_r2c", str(e.exception))
        # A program whose ops the device runs has no such warning.
        r = self.export(mm, [torch.randn(2, 3), torch.randn(3, 2)], "mm_checked")
        self.assertFalse([w for w in r.warnings if "cannot run" in w], r.warnings)

    def test_names_of_nested_inputs_and_outputs(self):
        def pair_sum(pair, scale):
            return {"sum": pair[0] + pair[1] * scale, "diff": pair[0] - pair[1]}

        r = self.export(pair_sum, [(torch.randn(4), torch.randn(4)), torch.randn(4)], "names")
        self.assertTrue(r.ok)
        self.assertEqual(r.info["signature"], ["pair", "scale"])
        self.assertEqual(sorted(r.info["input_names"].values()), ["pair[0]", "pair[1]", "scale"])
        # In the output's own order (a dict keeps its insertion order).
        self.assertEqual(r.info["output_names"], ["output['sum']", "output['diff']"])
        import torch.utils._pytree as pytree

        spec = pytree.treespec_loads(r.info["output_tree"])
        out = pytree.tree_unflatten([1, 2], spec)
        self.assertEqual(out, {"sum": 1, "diff": 2})
        self.assertEqual(pytree.treespec_loads(r.info["input_tree"]).num_leaves, 3)

    def test_exported_program(self):
        torch.manual_seed(1)
        ep = torch.export.export(Linear(), (torch.randn(8, 4),))
        r = self.export(ep, None, "ep")
        self.assertEqual(r.info["module"], "ExportedProgram")
        self.assertEqual(list(r.info["weight_names"].values()), ["lin.weight"])

    def test_freezing_makes_constants(self):
        torch.manual_seed(1)
        r = self.export(Linear(), [torch.randn(8, 4)], "frozen",
                        options={"freezing": True, "cpp.weight_prepack": False})
        p = self.program(r)
        self.assertTrue(p.get("constants"), "frozen weights are program constants")
        from wrapir_export.safetensors import load_safetensors

        stored = load_safetensors(os.path.join(r.path, "inputs.safetensors"))
        for name in p["constants"]:
            self.assertIn(name, stored)
        self.assertEqual(set(r.info["constants"]), set(p["constants"]))
        self.assertEqual(r.info["weights"], [])

    def test_dynamic(self):
        r = self.export(mm, [torch.randn(8, 4), torch.randn(4, 6)], "dyn", dynamic=True)
        p = self.program(r)
        self.assertTrue(any(i["kind"] == "symbol" for i in p["main"]["inputs"]))
        self.assertTrue(all(v["kind"] == "backed" for v in p["symbols"].values()))
        self.assertEqual(r.info["compile_kwargs"], {"dynamic": True})

    def test_dynamic_cnn_keeps_every_assert(self):
        # torch.compile(cnn, dynamic=True): Inductor checks each convolution's result with
        # sizes such as `1 + (((-1) + s69) // 2)` (nested parentheses); the exporter parses
        # every one (Python's own grammar) and keeps it, as it keeps the static ones.
        import re

        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
        with torch.no_grad():
            r = self.export(net, [torch.randn(2, 3, 17, 15)], "dyn_cnn", dynamic=True)
        self.assertTrue(r.ok, r.errors)
        with open(os.path.join(r.path, "inductor.py.txt")) as f:
            text = f.read()
        # The corpus: every result assert of Inductor's wrapper (`assert_size_stride` up to
        # 2.14, `assert_tensor_metadata` with the dtype from 2.15).
        checks = ("assert_size_stride", "assert_tensor_metadata")
        corpus = re.findall(r"^\s*(?:%s)\((buf\w+), (.*)$" % "|".join(checks), text, re.M)
        nested = [args for _, args in corpus if "(((-1) + s" in args]
        self.assertTrue(nested, "no nested-parenthesis size: the case no longer covers what it tests\n" + text)
        kept = [line for line in self.program(r)["main"]["lines"]
                if line.get("line") in checks and line["buffer"].startswith("buf")]
        self.assertEqual(sorted(b for b, _ in corpus), sorted(line["buffer"] for line in kept),
                         json.dumps(self.program(r)["main"]["lines"], indent=1))
        # Each kept assert names its symbolic sizes as text the IR parses (no unparsed tails).
        for line in kept:
            for e in line["size"] + line["stride"]:
                self.assertNotIn(")(", str(e))
        self.assertFalse([w for w in r.warnings if "assert" in w], r.warnings)

    def test_fp8_tensors_round_trip_through_safetensors(self):
        # `_scaled_mm` programs take fp8 inputs: written under F8_E4M3 / F8_E5M2, read back
        # bit for bit.
        from wrapir_export.safetensors import load_safetensors, write_safetensors

        x = torch.randn(4, 8)
        tensors = {"a": x.to(torch.float8_e4m3fn), "b": x.to(torch.float8_e5m2)}
        path = os.path.join(self.dir, "fp8.safetensors")
        write_safetensors(path, tensors)
        back = load_safetensors(path)
        for name, t in tensors.items():
            self.assertEqual(back[name].dtype, t.dtype)
            self.assertTrue(torch.equal(back[name].view(torch.uint8), t.view(torch.uint8)), name)

    def test_max_autotune_modes(self):
        for mode in ("max-autotune", "max-autotune-no-cudagraphs"):
            r = self.export(mm, [torch.randn(8, 4), torch.randn(4, 6)], mode, mode=mode)
            self.assertTrue(r.ok, r.errors)
            self.assertEqual(r.info["compile_kwargs"], {"mode": mode})

    def test_nested_benchmark_graph_is_not_captured(self):
        # What max-autotune's select_algorithm does for a subgraph choice: a GraphLowering
        # created, lowered and compiled while the main graph is active (V.graph set).
        from torch._inductor.graph import GraphLowering
        from torch._inductor.virtualized import V
        from torch.fx.experimental.proxy_tensor import make_fx

        orig = GraphLowering.codegen
        nested = []

        def codegen(graph, *a, **k):
            if not nested and getattr(graph, "_wrapir_outer", "unset") is None:
                x, y = torch.randn(4, 4), torch.randn(4, 4)
                gm = make_fx(lambda a, b: torch.mm(a, b))(x, y)
                g = GraphLowering(gm, example_inputs=[x, y], shape_env=V.graph._shape_env, name="benchmark_mm")
                with V.set_graph_handler(g):
                    g.run(x, y)
                    nested.append(g.compile_to_module())
            return orig(graph, *a, **k)

        GraphLowering.codegen = codegen
        try:
            r = self.export(mm, [torch.randn(8, 4), torch.randn(4, 6)], "nested")
        finally:
            GraphLowering.codegen = orig
        self.assertEqual(len(nested), 1, "the nested graph was compiled")
        self.assertTrue(r.ok, r.errors)
        self.assertIn("not captured: main of benchmark_mm", r.warnings)

    def test_cpp_kernel_becomes_a_host_image(self):
        r = self.export(lambda a: a.sin(), [torch.randn(8)], "cpp_kernel")
        self.assertTrue(r.ok, r.errors)
        (kernel,) = self.program(r)["kernels"].values()
        self.assertEqual(kernel["backend"]["kind"], "cpp")
        self.assertTrue(os.path.exists(os.path.join(r.path, "kernels", kernel["name"] + ".so")))
        with open(os.path.join(r.path, "bundle.json")) as f:
            self.assertIn("cpp", json.load(f)["host_kernels"])

    def test_vector_isa_kernels_record_their_isa(self):
        # `cpu_isa="avx2"`: Inductor vectorises for AVX2, every C++ kernel's metadata and
        # bundle.json say so (the loader checks the CPU), and the bundle runs where it can.
        from torch._inductor import cpu_vec_isa

        if "VecAVX2" not in [type(i).__name__ for i in cpu_vec_isa.valid_vec_isa_list()]:
            self.skipTest("this CPU has no AVX2")

        def f(x, w):  # a layer norm: vectorised code without Sleef's transcendental functions
            return torch.nn.functional.layer_norm(x, (16,), w)

        r = self.export(f, [torch.randn(8, 16), torch.randn(16)], "avx2", cpu_isa="avx2")
        self.assertTrue(r.ok, r.errors)
        kernels = list(self.program(r)["kernels"].values())
        self.assertTrue(kernels)
        self.assertTrue(all(k["backend"].get("isa") == "avx2" for k in kernels), kernels)
        self.assertTrue(any("Vectorized" in k["source"] for k in kernels))
        with open(os.path.join(r.path, "bundle.json")) as f:
            cpp = json.load(f)["host_kernels"]["cpp"]
        self.assertEqual(cpp["isa"], "avx2")
        self.assertIn("-mavx2", cpp["flags"])
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_python_custom_ops_record_their_library(self):
        # An op of `torch.library.custom_op` is named in bundle.json's `op_libraries` with
        # the module that defines it, for the lowerings' harnesses to import.
        @torch.library.custom_op("wrapir_lib::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        twice.register_fake(lambda x: torch.empty_like(x))

        r = self.export(lambda x: torch.ops.wrapir_lib.twice(x.sin()).cos(), [torch.randn(8)], "custom_lib")
        self.assertTrue(r.ok, r.errors)
        with open(os.path.join(r.path, "bundle.json")) as f:
            self.assertEqual(json.load(f).get("op_libraries"), {"wrapir_lib::twice": __name__})

    def region_calls(self, p, op):
        """The lines of `p`'s main graph that call `op` (a kernel or an extern op), and the
        buffers each names."""
        calls = [ln for ln in p["main"]["lines"] if ln.get("kernel") == op and ln["line"] == "kernel_call"
                 or ln.get("op") == op]
        return calls, [set(re.findall(r'"value": "(\w+)"', json.dumps(c))) for c in calls]

    def test_nested_compile_region_called_twice_is_spliced_at_each_call(self):
        # `torch.compiler.nested_compile_region` (Inductor's invoke_subgraph: one function,
        # called at each use): the region's lines run in place at each call, its kernel
        # defined once and launched once per call, each call with buffers of its own.
        @torch.compiler.nested_compile_region
        def block(x):
            return torch.sin(x) @ x.t()

        def f(x):
            return block(x) + block(x + 1)

        r = self.export(f, [torch.rand(8, 8)], "nested_region")
        self.assertTrue(r.ok, r.errors)
        p = self.program(r)
        self.assertNotIn("subgraphs", p)
        lines = p["main"]["lines"]
        sin = [k for k in p["kernels"] if "sin" in k]
        self.assertEqual(len(sin), 1, list(p["kernels"]))
        defs = [ln for ln in lines if ln == {"line": "kernel_definition", "kernel": sin[0]}]
        self.assertEqual(len(defs), 1)
        launches, named = self.region_calls(p, sin[0])
        self.assertEqual(len(launches), 2)
        mms, mm_named = self.region_calls(p, "extern_kernels.mm")
        self.assertEqual(len(mms), 2)
        # The two calls share no buffer: the first reads the input, the second `x + 1`.
        self.assertFalse(named[0] & named[1], named)
        self.assertFalse(mm_named[0] & mm_named[1], mm_named)
        # What the region leaves live (`sin(x)`) dies at the end of each call.
        freed = {ln["buffer"] for ln in lines if ln["line"] == "free"}
        sines = [call["args"][1]["value"]["value"] for call in launches]
        self.assertTrue(set(sines) <= freed, (sines, freed))
        self.wrapir_succeeds("check", r.path)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_nested_compile_region_with_two_outputs_feeding_a_matmul(self):
        # A region returning two tensors, called on the graph's input and then on its own
        # outputs, weights passed in; the second call's outputs feed a matmul.
        @torch.compiler.nested_compile_region
        def pair(x, w):
            h = torch.nn.functional.gelu(x @ w)
            return h.sin(), h * x.sum()

        def f(x, w1, w2, v):
            a, b = pair(x, w1)
            c, d = pair(a + b, w2)
            return (c - d) @ v

        inputs = [torch.randn(4, 8), torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 3)]
        r = self.export(f, inputs, "nested_region_pair")
        self.assertTrue(r.ok, r.errors)
        p = self.program(r)
        self.assertNotIn("subgraphs", p)
        mms, named = self.region_calls(p, "extern_kernels.mm")
        self.assertEqual(len(mms), 3)  # one per call, then `(c - d) @ v`
        self.assertFalse(named[0] & named[1], named)
        self.wrapir_succeeds("check", r.path)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_nested_compile_region_with_dynamic_shapes(self):
        # Under dynamic=True the region takes the sizes as symbol inputs: the caller's own.
        @torch.compiler.nested_compile_region
        def normalized(x):
            return x / x.norm(dim=-1, keepdim=True)

        r = self.export(lambda x: normalized(x) + normalized(x * 2), [torch.randn(5, 8)], "nested_region_dyn",
                        dynamic=True)
        self.assertTrue(r.ok, r.errors)
        p = self.program(r)
        self.assertNotIn("subgraphs", p)
        self.assertTrue(any(k["kind"] == "backed" for k in p["symbols"].values()), p["symbols"])
        self.wrapir_succeeds("check", r.path)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_nested_compile_region_binding_a_data_dependent_size_called_twice(self):
        # `nonzero` binds an unbacked size in the region, the slice `[:4]` a size computed from
        # it (a let line); each call binds its own (the unbacked one from the second call on
        # under a fresh `u<k>` with the region's range): wrapir's symbols are bound once.
        @torch.compiler.nested_compile_region
        def positive_sum(x):
            return x[torch.nonzero(x > 0).squeeze(1)[:4]].sum() * 2

        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            r = self.export(lambda x: positive_sum(x) + positive_sum(x * 2 - 1), [torch.randn(16)],
                            "nested_region_unbacked")
        self.assertTrue(r.ok, r.errors)
        p = self.program(r)
        bound = [s for ln in p["main"]["lines"] if ln["line"] == "unbacked_symbol_defs" for s in ln["bindings"]]
        self.assertEqual(len(bound), 2)
        self.assertEqual(len(set(bound)), 2, bound)
        self.assertEqual([p["symbols"][s]["range"] for s in bound], [{"lo": 0, "hi": 16}] * 2)
        # The slice's length: a statement Inductor 2.11 writes in the region (a let line per
        # call, each binding a name of its own); 2.15 folds it into the sizes.
        lets = [ln["symbol"] for ln in p["main"]["lines"] if ln["line"] == "symbolic_call_arg"]
        self.assertEqual(len(set(lets)), len(lets), lets)
        self.assertEqual([p["symbols"][s]["kind"] for s in lets], ["precomputed"] * len(lets))
        if TORCH_VERSION <= (2, 11):
            self.assertEqual(len(lets), 2)
        self.wrapir_succeeds("check", r.path)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_unconvertible_names_the_line(self):
        import wrapir_export as we
        from wrapir_export import convert
        from wrapir_export.errors import Unconvertible

        def refuse(self, line):
            raise Unconvertible(f"kernel call `{line.kernel_name}` (refused by the test)")

        orig = convert.GraphConverter.host_kernel_call
        convert.GraphConverter.host_kernel_call = refuse
        try:
            with self.assertRaises(we.ExportError) as ctx:
                self.export(lambda a: a.sin(), [torch.randn(8)], "refused")
            self.assertIn("line", str(ctx.exception))
            self.assertIn("refused by the test", str(ctx.exception))
            self.assertTrue(os.path.exists(os.path.join(self.dir, "refused", "errors.txt")))
            r = self.export(lambda a: a.sin(), [torch.randn(8)], "refused2", raise_on_error=False)
            self.assertFalse(r.ok)
        finally:
            convert.GraphConverter.host_kernel_call = orig

    def test_graph_breaks_are_refused_with_dynamo_reasons(self):
        # A data-dependent loop (as transformers' eager experts run) splits the function
        # into several graphs: the export names why, from Dynamo's own break reasons.
        def f(x):
            y = x.sin()
            for i in torch.nonzero(x > 0).flatten().tolist():
                y = y + i
            return y.cos()

        r = self.export(f, [torch.randn(6)], "breaks", raise_on_error=False)
        self.assertFalse(r.ok)
        msg = " ".join(r.errors)
        self.assertIn("expected one compiled graph, got", msg)
        self.assertIn("Dynamo's graph breaks:", msg)
        self.assertIn("fullgraph=True", msg)

    def test_unknown_line_class_names_it_and_the_torch_version(self):
        import wrapir_export as we
        from torch._inductor.codegen import wrapper as W
        from wrapir_export import convert

        class FutureLine(W.WrapperLine):
            """A Wrapper IR line class of a later PyTorch."""

        orig = convert.GraphConverter.convert

        extra = [FutureLine()]

        def convert_with_a_future_line(self, lines):
            return orig(self, list(lines) + extra)

        convert.GraphConverter.convert = convert_with_a_future_line
        try:
            r = self.export(mm, [torch.randn(2, 2), torch.randn(2, 2)], "future", raise_on_error=False)
        finally:
            convert.GraphConverter.convert = orig
        self.assertFalse(r.ok)
        text = "\n".join(r.errors)
        self.assertIn("FutureLine has no wrapir counterpart", text)
        self.assertIn(f"(PyTorch {torch.__version__})", text)

    def test_extern_output_asserts_keep_their_op(self):
        # nonzero's result: size assert (with its dtype from 2.14: assert_tensor_metadata)
        # and alignment assert (raw text through 2.14, typed from 2.15), both naming the op.
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            r = self.export(lambda x: torch.nonzero(x > 0).float(), [torch.randn(20)], "nonzero")
        lines = self.program(r)["main"]["lines"]
        op = "torch.ops.aten.nonzero.default"
        size = [ln for ln in lines if ln["line"] == "assert_size_stride" and ln.get("context") == op]
        self.assertEqual(len(size), 1, lines)
        self.assertEqual(size[0]["size"], ["u0", 1])
        self.assertEqual(size[0]["stride"], [1, "u0"])
        if TORCH_VERSION >= (2, 14):
            self.assertEqual(size[0]["dtype"], "int64")
        else:
            self.assertNotIn("dtype", size[0])
        align = [ln for ln in lines if ln["line"] == "assert_alignment"]
        self.assertEqual(align, [{"line": "assert_alignment", "buffer": size[0]["buffer"], "alignment": 16,
                                  "context": op}])

    def test_an_unbacked_symbol_inductor_binds_again_is_bound_once(self):
        # Three `x[mask]` of one mask: Inductor binds u0 after each (`u0 = buf1.size(0)`, then
        # `u0 = buf4.size(0)`, ...). The bundle binds it once; the later outputs' size
        # asserts check them against it, and wrapir runs the program.
        def f(a, b, c):
            keep = a > 0
            return a[keep], b[keep], c[keep] * 2

        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            r = self.export(f, [torch.randn(16), torch.randn(16, 4), torch.randn(16)], "rebound")
        self.assertTrue(r.ok, r.errors)
        lines = self.program(r)["main"]["lines"]
        defs = [ln for ln in lines if ln["line"] == "unbacked_symbol_defs"]
        self.assertEqual([list(d["bindings"]) for d in defs], [["u0"]], defs)
        sizes = [ln["size"][0] for ln in lines if ln["line"] == "assert_size_stride"
                 and ln.get("context") == "torch.ops.aten.index.Tensor"]
        self.assertEqual(sizes, ["u0"] * 3, lines)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_slices_and_selects_of_unbacked_sizes_bind_their_symbols(self):
        # Inductor writes the length of a slice of an unbacked size (`keep[:3]`,
        # `keep[-2:]`, `keep[::2]`) and the offset of a select at a negative index of one
        # (`keep[-1]`) as Python statements of its own (`u1_start = 0 if 0 >= 0 else
        # max(0, u0)` ...). Each becomes one let line of a size expression, and wrapir runs
        # the program against eager.
        def f(x):
            keep = torch.nonzero(x > 0.5).squeeze(1)
            return x[keep[:3]] * 2, x[keep[-2:]], x[keep[::2]] + 1, keep[-1] * 3

        x = torch.rand(32)
        x[5] = 0.9  # keep[-1] exists
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            r = self.export(f, [x], "unbacked_slices")
        self.assertTrue(r.ok, r.errors)
        lines = self.program(r)["main"]["lines"]
        lets = {ln["symbol"] for ln in lines if ln["line"] == "symbolic_call_arg" and ln["symbol"].startswith("u")}
        with open(os.path.join(r.path, "inductor.py.txt")) as f:
            text = f.read()
        statements = set(re.findall(r"^\s*(u\d+)_start = ", text, re.M))
        statements |= set(re.findall(r"^\s*(u\d+) = \S+ \+ \S+ \* \(", text, re.M))
        self.assertEqual(lets, statements, lines)
        if TORCH_VERSION < (2, 12):
            # 2.15 sizes these slices without statements (`min(3, u0)` in the layouts).
            self.assertEqual(len(statements), 3, text)
        self.wrapir_succeeds("check", r.path)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_slice_bounds_of_unknown_sign_select_their_branch_when_run(self):
        # `x[n:]` and `x[:n]` with `n` read from a tensor: Inductor's statements branch on
        # `n >= 0` at run time; the let line selects the branch with the exact integer form,
        # and the program matches eager with a negative and with a positive `n`.
        def f(x, p):
            n = p.item()
            return x[n:] * 2, x[:n] + 1

        for n in (-5, 5):
            with torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
                r = self.export(f, [torch.rand(16), torch.tensor(n)], f"unknown_sign_{n + 5}")
            self.assertTrue(r.ok, r.errors)
            self.wrapir_succeeds("run", r.path, "--device", "cpu")

    def test_an_output_rebuilt_after_the_graph_is_judged_by_the_graphs_own(self):
        # `x[i]` at a 0-d index tensor `i` computed in the graph is `x.select(0, i.item())`:
        # a view of the input at a data-dependent offset, which AOTAutograd rebuilds after
        # Inductor's `call` (the graph returns `i`'s storage, int64). The program's output
        # is judged against the graph's own (`graph_out<k>`), not eager's float.
        def f(x):
            keep = torch.nonzero(x > 0.5).squeeze(1)
            return x * 2, x[keep[-1]]

        x = torch.rand(16)
        x[3] = 0.9
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            r = self.export(f, [x], "rebuilt_output")
        self.assertTrue(r.ok, r.errors)
        self.assertIn("graph_out1", r.info["expected"])
        self.assertTrue([w for w in r.warnings if w.startswith("output 1: the compiled graph returns torch.int64 []")],
                        r.warnings)
        self.wrapir_succeeds("run", r.path, "--device", "cpu")

    @unittest.skipIf(torch is None or TORCH_VERSION < (2, 15), "ExternKernelMultiOutLine is PyTorch 2.15+")
    def test_custom_op_multi_out_variant(self):
        # A custom op with a multi-output `.out` overload (tagged `out`) is called as
        # `buf1 = op.out(x, 2.0, out0=buf2, out1=buf3)` on outputs allocated before.
        lib = torch.library.Library("wrapir_multi_out", "FRAGMENT")
        lib.define("pair(Tensor x, float scale) -> (Tensor, Tensor)")
        lib.define("pair.out(Tensor x, float scale, *, Tensor(a!) out0, Tensor(b!) out1) "
                   "-> (Tensor(a!), Tensor(b!))", tags=(torch.Tag.out,))

        def pair_out(x, scale, *, out0, out1):
            out0.copy_(x * scale)
            out1.copy_(x + scale)
            return out0, out1

        lib.impl("pair", lambda x, scale: (x * scale, x + scale), "CompositeExplicitAutograd")
        lib.impl("pair.out", pair_out, "CompositeExplicitAutograd")
        lib._register_fake("pair", lambda x, scale: (torch.empty_like(x), torch.empty_like(x)))

        def f(x):
            a, b = torch.ops.wrapir_multi_out.pair(x.sin(), 2.0)
            return a.cos() + b

        r = self.export(f, [torch.randn(8, 4)], "multi_out")
        self.assertTrue(r.ok, r.errors)
        lines = self.program(r)["main"]["lines"]
        (call,) = [ln for ln in lines if ln["line"] == "extern_kernel_multi_out"]
        self.assertEqual(call["op"], "torch.ops.wrapir_multi_out.pair.out")
        self.assertEqual(call["args"][1], {"kind": "float", "value": 2.0})
        self.assertEqual(list(call["outs"]), ["out0", "out1"])
        allocated = [ln["buffer"] for ln in lines if ln["line"] == "allocate"]
        for out in call["outs"].values():
            self.assertIn(out, allocated)
        wrapir = wrapir_binary()
        if wrapir:
            check = subprocess.run([wrapir, "check", r.path], capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            py = subprocess.run([wrapir, "lower", r.path, "--target", "python"], capture_output=True, text=True)
            self.assertIn("= torch.ops.wrapir_multi_out.pair.out(", py.stdout, py.stderr)
            self.assertIn(", 2.0, out0=", py.stdout)

    def test_nan_asserts_are_typed_lines(self):
        # `config.nan_asserts`: Inductor checks each tensor input (prefix) and output
        # (before `return`) for NaN/Inf in text outside its lines; the exporter types them.
        from torch._inductor import config as icfg

        with icfg.patch(nan_asserts=True):
            r = self.export(lambda x, y: (x.sin() + y, y.cos()), [torch.randn(8), torch.randn(8)], "nan_asserts")
        self.assertTrue(r.ok, r.errors)
        p = self.program(r)
        lines = p["main"]["lines"]
        checks = [ln["buffer"] for ln in lines if ln["line"] == "assert_finite"]
        inputs = [i["name"] for i in p["main"]["inputs"] if i["kind"] == "tensor"]
        outputs = [o["value"] for o in p["main"]["outputs"] if o["kind"] == "buffer"]
        self.assertEqual(checks, inputs + outputs)
        self.assertEqual([ln["line"] for ln in lines[:len(inputs)]], ["assert_finite"] * len(inputs))
        wrapir = wrapir_binary()
        if wrapir:
            check = subprocess.run([wrapir, "check", r.path], capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
            py = subprocess.run([wrapir, "lower", r.path, "--target", "python"], capture_output=True, text=True)
            self.assertIn(f"assert not {inputs[0]}.isnan().any().item()", py.stdout, py.stderr)
            run = subprocess.run([wrapir, "run", r.path, "--device", "cpu"], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_cond_capture(self):
        # torch.cond: a `conditional` line through 2.13, a `switch` (false branch first) from 2.14.
        def f(x):
            return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))

        r = self.export(f, [torch.randn(4)], "cond")
        p = self.program(r)
        (line,) = [ln for ln in p["main"]["lines"] if ln["line"] in ("conditional", "switch")]
        if TORCH_VERSION < (2, 14):
            self.assertEqual(line["line"], "conditional")
            branches = [line["false_graph"], line["true_graph"]]
        else:
            self.assertEqual(line["line"], "switch")
            self.assertIs(line["cond"], True)
            self.assertEqual(line["selector"]["kind"], "tensor")
            branches = line["branches"]
        self.assertEqual(line["operands"], ["arg0_1"])
        self.assertEqual([b.split("_")[0] for b in branches], ["false", "true"])
        self.assertEqual(set(branches), set(p["subgraphs"]))

    @unittest.skipIf(torch is None or TORCH_VERSION < (2, 14), "ir.Switch lowering is PyTorch 2.14+")
    def test_switch_text_change_is_an_error(self):
        # Text inside the bracket that is not exactly Inductor's (here: one expected text
        # missing) is refused by name, never dropped.
        from wrapir_export import control

        def f(x):
            return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))

        orig = control.switch_texts_for

        def without_selector(*args):
            return {t for t in orig(*args) if "_selector = " not in t}

        control.switch_texts_for = without_selector
        try:
            r = self.export(f, [torch.randn(4)], "switch_changed", raise_on_error=False)
        finally:
            control.switch_texts_for = orig
        self.assertFalse(r.ok)
        self.assertIn("unexpected line inside switch lowering", "\n".join(r.errors))

    def test_progress_stages(self):
        import wrapir_export as we

        seen = []
        we.export(mm, [torch.randn(2, 2), torch.randn(2, 2)], os.path.join(self.dir, "stages"),
                  capture_devices=("cuda", "cpu"), progress=lambda s, d="": seen.append(s))
        for s in ("tracing", "compiling", "capturing", "writing"):
            self.assertIn(s, seen)

    def test_case_file_cli(self):
        cases = os.path.join(self.dir, "cases.py")
        with open(cases, "w") as f:
            f.write("import torch\nCASES = {'mm': (lambda a, b: a @ b, lambda: [torch.randn(4, 4), "
                    "torch.randn(4, 4)], {})}\n")
        code = (f"import sys; sys.path.insert(0, {PYTHON_DIR!r})\n"
                "from wrapir_export import capture; capture.install(('cuda', 'cpu'))\n"
                "from wrapir_export.cli import main; main()")
        out = subprocess.run([sys.executable, "-c", code, "--cases", cases, "--case", "mm", "--bundle",
                              os.path.join(self.dir, "one"), "--quiet"], capture_output=True, text=True)
        self.assertEqual(out.stdout.strip(), "ok mm", out.stderr[-2000:])
        self.assertTrue(os.path.exists(os.path.join(self.dir, "one", "program.json")))
        out = subprocess.run([sys.executable, "-c", code, "--cases", cases, "--out", os.path.join(self.dir, "ep_cli"),
                              "--export-program", "--dynamic", "--quiet"], capture_output=True, text=True)
        self.assertEqual(out.stdout.strip(), "ok mm", out.stderr[-2000:])
        with open(os.path.join(self.dir, "ep_cli", "mm", "bundle.json")) as f:
            info = json.load(f)
        self.assertEqual(info["module"], "ExportedProgram")
        self.assertEqual(info["compile_kwargs"], {"dynamic": True})


def wrapir_binary():
    """$WRAPIR, else a built wrapir of this repository, else None."""
    for cand in (os.environ.get("WRAPIR"), os.path.join(REPO, "target", "release", "wrapir"),
                 os.path.join(REPO, "target", "debug", "wrapir")):
        if cand and os.path.exists(cand):
            return cand
    return None


@unittest.skipIf(torch is None or wrapir_binary() is None, "needs torch and a wrapir binary ($WRAPIR or target/)")
class FxModuleEndToEnd(unittest.TestCase):
    def test_every_committed_bundle_builds(self):
        import wrapir_export as we

        for b in sorted(glob.glob(os.path.join(REPO, "fixtures", "inductor", "bundles", "*", ""))):
            gm = we.fx_module(b, wrapir=wrapir_binary())
            self.assertTrue(gm.code, b)

    def test_cpu_bundles_run_and_match(self):
        import wrapir_export as we
        from wrapir_export.safetensors import load_safetensors

        with tempfile.TemporaryDirectory() as d:
            torch.manual_seed(1)
            bundles = [
                we.export(mm, [torch.randn(8, 4), torch.randn(4, 6)], os.path.join(d, "mm"), dynamic=True, **CPU),
                we.export(Linear(), [torch.randn(8, 4)], os.path.join(d, "frozen"),
                          options={"freezing": True, "cpp.weight_prepack": False}, **CPU),
                we.export(lambda x: torch.topk(x, 3), [torch.randn(4, 10)], os.path.join(d, "topk"), **CPU),
            ]
            for r in bundles:
                gm = we.fx_module(r.path, wrapir=wrapir_binary())
                out = gm(*we.load_inputs(r.path))
                out = list(out) if isinstance(out, (list, tuple)) else [out]
                want = load_safetensors(os.path.join(r.path, "expected.safetensors"))
                for k, o in enumerate(out):
                    torch.testing.assert_close(o, want[f"out{k}"], rtol=1e-5, atol=1e-5)


class _Kernel:
    def __init__(self, name):
        self.__name__ = name

    def __call__(self, grid, kwargs):
        return None


class _AnyKernels(dict):
    def __contains__(self, k):
        return True

    def __getitem__(self, k):
        return self.setdefault(k, _Kernel(k))


@unittest.skipIf(torch is None, "torch is not installed")
class FxBuilder(unittest.TestCase):
    def printout(self, name, device="cuda"):
        with open(os.path.join(REPO, "snapshots", f"fx@{name}.snap")) as f:
            return f.read().split("---\n", 2)[2].replace("'cuda'", f"'{device}'")

    def build(self, text):
        from wrapir_export import fx

        class Consts(dict):
            def __contains__(self, k):
                return True

            def __getitem__(self, k):
                return torch.zeros(2)

        return fx.Builder(torch, _AnyKernels(), Consts()).build(fx.parse_printout(text))

    def test_builds_fx_snapshots(self):
        from wrapir_export import fx

        unsupported = {"cpp_kernel_cpu", "halide_kernel", "divide_by", "tuple_output_unbacked"}
        built = 0
        for p in glob.glob(os.path.join(REPO, "snapshots", "fx@*.snap")):
            name = os.path.basename(p)[3:-5]
            try:
                gm = self.build(self.printout(name))
                self.assertTrue(gm.code)
                built += 1
            except fx.FxError as e:
                self.assertIn(name, unsupported, str(e))
        self.assertGreaterEqual(built, 20)

    def test_runs_extern_graphs_on_cpu(self):
        gm = self.build(self.printout("topk_multi_output", "cpu"))
        x = torch.randn(8, 100)
        top, idx = gm(x)
        want = torch.topk(x, 5)
        self.assertTrue(torch.equal(top, want.values))
        self.assertTrue(torch.equal(idx, want.indices))

    def test_subgraph_modules(self):
        gm = self.build(self.printout("while_loop", "cpu"))
        self.assertTrue(hasattr(gm, "while_loop_cond_graph_0"))
        self.assertIsInstance(gm.while_loop_body_graph_0, torch.fx.GraphModule)

    def test_load_inputs_of_a_committed_bundle(self):
        from wrapir_export import load_inputs

        bundle = os.path.join(REPO, "fixtures", "inductor", "bundles", "feat_dynamic_add")
        args = load_inputs(bundle, device="cpu")
        with open(os.path.join(bundle, "program.json")) as f:
            inputs = json.load(f)["main"]["inputs"]
        self.assertEqual(len(args), len(inputs))
        for a, i in zip(args, inputs):
            self.assertEqual(isinstance(a, int), i["kind"] == "symbol")



@unittest.skipIf(torch is None, "torch is not installed")
class CompareOutputs(unittest.TestCase):
    def test_rules(self):
        from wrapir_export.tolerances import compare_outputs

        tol = {"atol": 1e-3, "rtol": 1e-3}
        expected = {"graph_out1": torch.tensor(3, dtype=torch.int32), "graph_out0": torch.ones(2)}
        ok, reason, err = compare_outputs(torch, [torch.ones(2) + 1e-4, torch.tensor(3, dtype=torch.int32)],
                                          expected, tol)
        self.assertTrue(ok, reason)
        self.assertAlmostEqual(err, 1e-4, places=6)
        # A size returned as a Python int: int64, so cast only where asked.
        ok, reason, _ = compare_outputs(torch, [torch.ones(2), 3], expected, tol)
        self.assertFalse(ok)
        self.assertEqual(reason, "output 1: dtype torch.int64, expected torch.int32")
        self.assertTrue(compare_outputs(torch, [torch.ones(2), 3], expected, tol, cast_int_scalars=True)[0])
        self.assertFalse(compare_outputs(torch, [torch.ones(2), 4], expected, tol, cast_int_scalars=True)[0])
        # Never cast to a floating reference.
        floating = {"graph_out0": torch.ones(2), "graph_out1": torch.tensor(3.0)}
        ok, reason, _ = compare_outputs(torch, [torch.ones(2), 3], floating, tol, cast_int_scalars=True)
        self.assertEqual(reason, "output 1: dtype torch.int64, expected torch.float32")
        ok, reason, _ = compare_outputs(torch, [None, "x"], expected, tol)
        self.assertEqual(reason, "output 0 is None, expected graph_out0 (2,) torch.float32; "
                                 "output 1 is a str, not a tensor or int")
        ok, reason, _ = compare_outputs(torch, [torch.ones(3), 3], expected, tol, cast_int_scalars=True)
        self.assertEqual(reason, "output 0: shape (3,), expected (2,)")
        ok, reason, _ = compare_outputs(torch, [torch.ones(2) * 2, 3], expected, tol, cast_int_scalars=True)
        self.assertTrue(reason.startswith("output 0 (graph_out0): Tensor-likes are not close!"), reason)
        self.assertEqual(compare_outputs(torch, [], expected, tol)[1], "0 outputs, expected 2 (graph_out0, graph_out1)")


def cpu_bundles(*patterns):
    """The committed CPU bundle directories matching `patterns` (under fixtures/inductor)."""
    out = []
    for p in patterns:
        out += sorted(glob.glob(os.path.join(REPO, "fixtures", "inductor", p, "")))
    return out


@unittest.skipIf(torch is None or wrapir_binary() is None, "needs torch and a wrapir binary ($WRAPIR or target/)")
class FxHostKernels(unittest.TestCase):
    """`fx_module` runs CPU bundles: C++ kernels (`wrapir.call_kernel`) through their
    `kernels/<kernel>.so` images, Halide kernels through `<kernel>_argv` with
    `halide_buffer_t`s; each run matches the bundle's eager and Inductor outputs."""

    CPP = ("bundles_cpu/cpp/*", "bundles_cpu_2.15/cpp/*", "bundles_cpu_2.15/control/*")
    HALIDE = ("bundles_cpu/halide/*", "bundles_cpu_2.15/halide/*")

    def run_and_compare(self, bundles):
        import wrapir_export as we
        from wrapir_export.safetensors import load_safetensors
        from wrapir_export.tolerances import compare_outputs

        with_kernels = 0
        for b in bundles:
            with self.subTest(bundle=os.path.relpath(b, REPO)):
                with open(os.path.join(b, "bundle.json")) as f:
                    info = json.load(f)
                code = we.fx.lower_fx(b, wrapir_binary())
                gm = we.fx_module(b, code=code)
                if "wrapir.call_kernel(" in code:
                    with_kernels += 1
                    self.assertTrue(gm.host_kernels)
                out = gm(*we.load_inputs(b))
                out = list(out) if isinstance(out, (list, tuple)) else [out]
                compared = 0
                for stem, tol in (("expected", "tolerance"), ("compiled", "compiled_tolerance")):
                    path = os.path.join(b, f"{stem}.safetensors")
                    if not os.path.exists(path):
                        continue
                    ok, reason, _ = compare_outputs(torch, out, load_safetensors(path), info.get(tol))
                    self.assertTrue(ok, f"{stem}: {reason}")
                    compared += 1
                self.assertGreater(compared, 0)
        return with_kernels

    def test_cpp_bundles_run_and_match(self):
        bundles = cpu_bundles(*self.CPP)
        self.assertGreaterEqual(len(bundles), 17 * 2 + 4)
        self.assertGreaterEqual(self.run_and_compare(bundles), 16 * 2 + 4)

    def test_halide_bundles_run_and_match(self):
        bundles = cpu_bundles(*self.HALIDE)
        self.assertGreaterEqual(len(bundles), 17)
        self.assertGreaterEqual(self.run_and_compare(bundles), 16)

    def edited_copy(self, d, bundle, edit):
        import shutil

        dst = os.path.join(d, os.path.basename(os.path.normpath(bundle)))
        shutil.copytree(bundle, dst)
        path = os.path.join(dst, "program.json")
        with open(path) as f:
            program = json.load(f)
        edit(program)
        with open(path, "w") as f:
            json.dump(program, f)
        return dst

    def test_signature_mismatch_is_refused_by_name(self):
        import wrapir_export as we

        kernel = "cpp_fused_add_mul_relu_0"

        def edit(program):
            program["kernels"][kernel]["backend"]["arg_types"][0] = "const double*"

        with tempfile.TemporaryDirectory() as d:
            b = self.edited_copy(d, os.path.join(REPO, "fixtures", "inductor", "bundles_cpu", "cpp", "pointwise"), edit)
            with self.assertRaises(we.fx.FxError) as cm:
                we.fx_module(b, wrapir=wrapir_binary())
        self.assertEqual(str(cm.exception),
                         f"C++ kernel {kernel}: kernels/{kernel}.so was compiled for arguments "
                         "`const float*;const float*;float*`, the program declares "
                         "`const double*;const float*;float*`")

    def test_halide_metadata_mismatch_is_refused_by_name(self):
        import wrapir_export as we

        def edit(program):
            program["kernels"]["halide_kernel_0"]["backend"]["argtypes"][0]["ctype"] = "double*"

        with tempfile.TemporaryDirectory() as d:
            b = self.edited_copy(d, os.path.join(REPO, "fixtures", "inductor", "bundles_cpu", "halide", "pointwise"),
                                 edit)
            with self.assertRaises(we.fx.FxError) as cm:
                we.fx_module(b, wrapir=wrapir_binary())
        self.assertIn("Halide kernel halide_kernel_0: argument 0 (`in_ptr0`): element type torch.float64", str(cm.exception))

    def test_arguments_are_checked(self):
        import wrapir_export as we
        from wrapir_export import fx

        b = os.path.join(REPO, "fixtures", "inductor", "bundles_cpu", "cpp", "pointwise_dynamic")
        gm = we.fx_module(b, wrapir=wrapir_binary())
        (name, k), = gm.host_kernels.items()
        self.assertEqual(k.arg_types, ["const float*", "const float*", "float*", "const int64_t"])
        x, y, out = torch.randn(5), torch.randn(5), torch.empty(5)
        k([x, y, out, 5])
        for args, msg in (
            ([x.double(), y, out, 5], "argument 0 (`const float*`): expected a torch.float32 tensor, got a "
                                      "torch.float64 tensor"),
            ([x, 1.0, out, 5], "argument 1 (`const float*`): expected a torch.float32 tensor, got float 1.0"),
            ([x, y, out, 2.5], "argument 3 (`const int64_t`): expected an integer, got float 2.5"),
            ([x, y, out, 1 << 63], f"argument 3 (`const int64_t`): {1 << 63} does not fit a signed 64-bit integer"),
            ([x, y, out], "takes 4 arguments (`arg_types`) but got 3"),
        ):
            with self.assertRaises(fx.FxError) as cm:
                k(args)
            self.assertEqual(str(cm.exception), f"C++ kernel {name}: {msg}")
        # A scalar of the C width: int32_t 4 bytes, double 8, bool 1 (as `c_scalar_type`).
        import ctypes

        self.assertIs(fx.scalar_value(7, "int", ctypes.c_int32, "int32_t", "w"), 7)
        with self.assertRaises(fx.FxError):
            fx.scalar_value(1 << 31, "int", ctypes.c_int32, "int32_t", "w")
        self.assertEqual(fx.scalar_value(torch.tensor(2), "float", ctypes.c_double, "double", "w"), 2.0)
        with self.assertRaises(fx.FxError):
            fx.scalar_value(2, "bool", ctypes.c_bool, "bool", "w")

    def test_switch_runs_each_branch(self):
        import wrapir_export as we

        b = os.path.join(REPO, "fixtures", "inductor", "bundles_cpu_2.15", "control", "switch_three")
        code = we.fx.lower_fx(b, wrapir_binary())
        self.assertIn("torch.ops.higher_order.switch(buf0, [branch0_graph_0, branch1_graph_0, branch2_graph_0], "
                      "(arg0_1,))", code)
        gm = we.fx_module(b, code=code)
        x = we.load_inputs(b)[0]
        branches = [lambda x: x.sin(), lambda x: x.cos() * 2, lambda x: x.exp() - 1]
        # The selector is clamped to [0, 2] by the program's first kernel (Inductor's lowering).
        for i, want in ((0, 0), (1, 1), (2, 2), (7, 2), (-3, 0)):
            with self.subTest(index=i):
                got = gm(x, torch.tensor(i))
                torch.testing.assert_close(got, branches[want](x), rtol=1e-5, atol=1e-5)

    def test_assert_size_stride_with_dtype(self):
        import wrapir_export as we
        from wrapir_export import fx

        b = os.path.join(REPO, "fixtures", "inductor", "bundles_cpu_2.15", "control", "while_tensor_carries")
        code = we.fx.lower_fx(b, wrapir_binary())
        self.assertIn("(torch._check(buf1.dim() == 0), torch._check(buf1.dtype == torch.int64))", code)
        i, x = we.load_inputs(b)
        n, y = we.fx_module(b, code=code)(i, x)
        self.assertEqual(int(n), 5)
        want = x
        for _ in range(5):
            want = want * 2 + 1
        torch.testing.assert_close(y, want)

    def test_tensor_asserts_are_torch_checks(self):
        from wrapir_export import fx

        # The printout's form of assert_size_stride (with a dtype), assert_alignment and
        # assert_finite, built into upstream's node chains and run.
        printout = ("def forward(self, x, s0):\n"
                    "    a = (torch._check(x.dim() == 2), torch._check(torch.ops.aten.sym_size.int(x, 0) == 2), "
                    "torch._check(torch.ops.aten.sym_size.int(x, 1) == s0), "
                    "torch._check(torch.ops.aten.sym_stride.int(x, 0) == s0), "
                    "torch._check((torch.ops.aten.sym_size.int(x, 1) == 1) | (torch.ops.aten.sym_stride.int(x, 1) == 1)), "
                    "torch._check(x.dtype == torch.float32));  a = None\n"
                    "    b = torch._check(x.data_ptr() % 16 == 0);  b = None\n"
                    "    c = (torch._check(not torch.ops.aten.item.default(torch.ops.aten.any.default("
                    "torch.ops.aten.isnan.default(x)))), torch._check(not torch.ops.aten.item.default("
                    "torch.ops.aten.any.default(torch.ops.aten.isinf.default(x)))));  c = None\n"
                    "    return x\n")
        gm = fx.Builder(torch, {}, {}).build(fx.parse_printout(printout))
        targets = [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
        self.assertEqual(targets.count(torch._check), 9)
        self.assertIn(torch.ops.aten.sym_size.int, targets)
        self.assertIn("data_ptr", targets)
        gm(torch.zeros(2, 3), 3)
        for bad, why in ((torch.zeros(2, 4), "size"), (torch.zeros(3, 2).t(), "stride"),
                         (torch.zeros(2, 3, dtype=torch.float64), "dtype"),
                         (torch.tensor([[0.0, float("nan"), 1.0], [0, 0, 0]]), "nan"),
                         (torch.tensor([[0.0, float("inf"), 1.0], [0, 0, 0]]), "inf"),
                         (torch.zeros(7)[1:].view(2, 3), "alignment")):
            with self.subTest(why=why), self.assertRaises(RuntimeError):
                gm(bad, 3)

if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(torch, "PyTorch is not installed")
class UpstreamFixes(unittest.TestCase):
    def test_lstm_decomposition_states_take_eager_shapes(self):
        # `aten.lstm.input`'s decomposition is what Inductor compiles for non-CPU devices; on
        # `meta` tensors it takes that path. With the fix applied its final states have the
        # shapes (and on the CPU the values) of eager's LSTM, bidirectional and two layers.
        from torch._decomp import decomposition_table
        from wrapir_export import upstream_fixes as UF
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
        x = torch.randn(3, 4, 6)
        h0 = torch.zeros(4, 3, 5)
        eager_out, (eager_h, eager_c) = lstm(x, (h0, h0))
        dec = decomposition_table[torch.ops.aten.lstm.input]

        def run(device):
            with torch.no_grad():
                weights = [w.detach().to(device) for w in lstm._flat_weights]
                args = (x.to(device), [h0.to(device), h0.to(device)], weights, True, 2, 0.0, False, True, True)
                return dec(*args)

        broken = UF.lstm_states_have_extra_dim(torch)
        notes = []
        with UF.applied(torch, notes):
            out, h, c = run("meta")
        self.assertEqual(notes, [UF.LSTM_NOTE] if broken else [])
        self.assertEqual((tuple(out.shape), tuple(h.shape), tuple(c.shape)),
                         (tuple(eager_out.shape), tuple(eager_h.shape), tuple(eager_c.shape)))
        if broken:
            _, h_unfixed, _ = run("meta")
            self.assertEqual(h_unfixed.dim(), 4, "the probe found a bug the decomposition does not have")
        # Values: one layer, one direction, on the CPU, against eager's LSTM of the same weights.
        from torch._decomp import decompositions as D
        one = torch.nn.LSTM(6, 5)
        seq_first = x.transpose(0, 1).contiguous()
        with torch.no_grad():
            _, (want_h, want_c) = one(seq_first)
            with UF.applied(torch, []):
                zeros = torch.zeros(3, 5)
                _, (got_h, got_c) = D.one_layer_lstm(seq_first, (zeros, zeros), list(one._flat_weights), True)
        self.assertEqual(tuple(got_h.shape), (3, 5))
        torch.testing.assert_close(got_h, want_h[0])
        torch.testing.assert_close(got_c, want_c[0])


@unittest.skipIf(torch is None, "torch is not installed")
class ScopeLines(unittest.TestCase):
    """Inductor's stream, memory-pool and kernel-profile lines (CUDA-only or C++-wrapper-only,
    so no CPU capture reaches them): the installed PyTorch's own line objects, converted."""

    def converter(self):
        from torch._inductor.codegen import wrapper as W
        from wrapir_export.convert import GraphConverter

        conv = GraphConverter.__new__(GraphConverter)  # no graph: only the line methods run
        conv.W, conv.torch, conv.lines = W, torch, []
        return conv, W

    def test_compound_operand_is_a_precomputed_symbol(self):
        # A subgraph operand that is a size expression (a branch closing over
        # `2*s0 + 1`) is passed as a fresh precomputed symbol bound just before.
        import sympy
        from torch._inductor import ir
        from wrapir_export.convert import Capture

        conv, _ = self.converter()
        conv.sympy, conv.ir, conv.bound_precomputed = sympy, ir, set()
        conv.graph = type("Graph", (), {"sizevars": None})()  # no precomputed sizes
        conv.cap = Capture("g", False)
        conv.cap.symbols.add("wrapir_operand0")
        s0 = sympy.Symbol("s0", integer=True, positive=True)
        name = conv.loop_operand(ir.ShapeAsConstantBuffer(expr=2 * s0 + 1), "operand 1 of cond buf0")
        self.assertEqual(name, "wrapir_operand1")
        self.assertEqual(conv.lines, [{"line": "symbolic_call_arg", "symbol": "wrapir_operand1",
                                       "expr": "1 + 2*s0"}])
        self.assertEqual(conv.loop_operand(ir.ShapeAsConstantBuffer(expr=s0), "operand"), "s0")

    def test_names_exist_in_the_pytorch_that_has_them(self):
        from torch._inductor.codegen import wrapper as W
        from wrapir_export.convert import SCOPE_LINES

        by_version = {"EnterCudaStreamContextLine": (2, 12), "ExitCudaStreamContextLine": (2, 12),
                      "EnterCudaMemPoolContextLine": (2, 14), "ExitCudaMemPoolContextLine": (2, 14),
                      "EnterKernelProfileScopeLine": (2, 15), "ExitKernelProfileScopeLine": (2, 15)}
        self.assertEqual(set(by_version), set(SCOPE_LINES))
        for name, since in by_version.items():
            if TORCH_VERSION >= since:
                self.assertTrue(hasattr(W, name), f"{name} is gone from PyTorch {torch.__version__}")

    @unittest.skipUnless(TORCH_VERSION and TORCH_VERSION >= (2, 15), "the scope lines are PyTorch 2.15's")
    def test_scope_lines_convert(self):
        conv, W = self.converter()

        class Wrapper:  # what the kernel-profile lines' __post_init__ touches
            computed_sizes = set()

            def push_computed_sizes(self, sizes):
                pass

            def pop_computed_sizes(self):
                return set()

        for line in (W.EnterCudaStreamContextLine(stream_idx=1), W.ExitCudaStreamContextLine(),
                     W.EnterCudaMemPoolContextLine(4, 0), W.ExitCudaMemPoolContextLine(),
                     W.EnterKernelProfileScopeLine(Wrapper()), W.ExitKernelProfileScopeLine(Wrapper())):
            conv.scope(line)
        self.assertEqual(conv.lines, [
            {"line": "enter_scope", "scope": "stream", "stream": 1},
            {"line": "exit_scope", "scope": "stream"},
            {"line": "enter_scope", "scope": "mem_pool", "pool": 4, "device_index": 0},
            {"line": "exit_scope", "scope": "mem_pool"},
            {"line": "enter_scope", "scope": "kernel_profile"},
            {"line": "exit_scope", "scope": "kernel_profile"},
        ])
        guard = W.EnterDeviceContextManagerWithStreamInfoLine(0, None, 3, {1: 3, 2: 5}, setup_stream_cache=False)
        self.assertEqual(conv.device_streams(guard), {"user_objects": [3, 5], "reads_current_stream": False})
        with self.assertRaises(Exception):
            conv.device_streams(W.EnterDeviceContextManagerWithStreamInfoLine(0, None, 3, {1: 3}))
