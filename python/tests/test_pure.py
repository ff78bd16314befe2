"""Tests of the exporter's parts that need no torch (run: `python3 -m unittest` in python/).

They also check that importing the package and its modules does not import torch.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
BUNDLES = os.path.join(REPO, "fixtures", "inductor", "bundles")
SNAPSHOTS = os.path.join(REPO, "snapshots")
sys.path.insert(0, PYTHON_DIR)

from wrapir_export import control, exprs, kernels, launch, redact, safetensors  # noqa: E402
from wrapir_export import bundle as B  # noqa: E402
from wrapir_export import cases, cli, exporter, fx, names, ranks, regions, tolerances  # noqa: E402
from wrapir_export.errors import ExportError, Unconvertible  # noqa: E402

MODULES = ["wrapir_export", "wrapir_export.errors", "wrapir_export.redact", "wrapir_export.safetensors",
           "wrapir_export.exprs", "wrapir_export.control", "wrapir_export.convert", "wrapir_export.capture",
           "wrapir_export.kernels", "wrapir_export.tolerances", "wrapir_export.bundle", "wrapir_export.exporter",
           "wrapir_export.cases", "wrapir_export.cli", "wrapir_export.launch", "wrapir_export.fx",
           "wrapir_export.ranks", "wrapir_export.names", "wrapir_export.mutations", "wrapir_export.device_check",
           "wrapir_export.regions"]


class LazyTorch(unittest.TestCase):
    def test_importing_every_module_leaves_torch_unimported(self):
        code = ("import sys; sys.path.insert(0, %r)\n" % PYTHON_DIR
                + "".join(f"import {m}\n" for m in MODULES)
                + "print('torch' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False")

    def test_cli_help_runs_without_torch(self):
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        out = subprocess.run([sys.executable, "-m", "wrapir_export", "--help"], capture_output=True, text=True,
                             env=env, check=True)
        self.assertIn("--cases", out.stdout)
        self.assertIn("--bundle", out.stdout)

    def test_export_py_help_keeps_its_command_line(self):
        out = subprocess.run([sys.executable, os.path.join(REPO, "fixtures", "inductor", "export.py"), "--help"],
                             capture_output=True, text=True, check=True)
        for flag in ("--cases", "--out", "--only", "--jobs", "--sizes"):
            self.assertIn(flag, out.stdout)


class DeviceCopies(unittest.TestCase):
    def test_a_copy_between_devices_is_refused_by_name(self):
        # The text Inductor 2.11-2.15 writes for an `ir.DeviceCopy` (`codegen_device_copy`)
        # and 2.15's wait for a device-to-host copy (`sync_d2h_copy`).
        from wrapir_export.convert import GraphConverter
        from wrapir_export.errors import Unconvertible

        conv = GraphConverter.__new__(GraphConverter)  # no graph: only the text method runs
        for text in ["buf1.copy_(arg0_1, False)", "buf3.copy_(buf2, True)", "_d2h_event_buf4 = torch.Event()",
                     "_d2h_event_buf4.record()", "_d2h_event_buf4.synchronize()"]:
            with self.assertRaises(Unconvertible) as ctx:
                conv.convert_text([text], 0, text)
            message = str(ctx.exception)
            self.assertIn("a copy between devices", message)
            self.assertIn(text, message)


class Names(unittest.TestCase):
    def test_positional_names(self):
        def f(x, y, *rest, scale=1):
            return x

        class M:
            def forward(self, input_ids, mask=None):
                return input_ids

        self.assertEqual(names.positional_names(f, 2), ["x", "y"])
        self.assertEqual(names.positional_names(f, 4), ["x", "y", "rest[0]", "rest[1]"])
        self.assertEqual(names.positional_names(M(), 2), ["input_ids", "mask"])
        self.assertEqual(names.positional_names(len, 1), ["obj"])
        self.assertEqual(names.positional_names(object(), 2), ["args[0]", "args[1]"])

    def test_match_inputs_by_data_key(self):
        leaves = [("x", "kx"), ("pair[0]", "k0"), ("n", None), ("pair[1]", "k1")]
        # Dynamo's order need not be the user's; the weight and the size are unnamed.
        got = names.match_inputs(["arg0_1", "arg1_1", "arg2_1", "arg3_1", "s0"], ["kw", "k1", "kx", "k0", None],
                                  leaves, skip={"arg0_1"})
        self.assertEqual(got, {"arg1_1": "pair[1]", "arg2_1": "x", "arg3_1": "pair[0]"})
        # One leaf names one graph input; unrecorded keys name nothing.
        self.assertEqual(names.match_inputs(["a", "b"], ["kx", "kx"], leaves), {"a": "x"})
        self.assertEqual(names.match_inputs(["a"], None, leaves), {})

    def test_names_info_fields_are_optional(self):
        info = B.names_info(signature=["x"], input_names={}, input_tree=None, output_names=["output"],
                            exp_names=["out0"], output_tree=None)
        self.assertEqual(info, {"signature": ["x"], "output_names": ["output"]})
        # Names that do not line up with the stored outputs are left out.
        info = B.names_info(signature=[], input_names={"arg0_1": "x"}, input_tree="t", output_names=["a", "b"],
                            exp_names=["out0", "graph_out0"], output_tree="o")
        self.assertEqual(info, {"signature": [], "input_names": {"arg0_1": "x"}, "input_tree": "t",
                                "output_tree": "o"})


class DeviceCheck(unittest.TestCase):
    def test_unrunnable_ops_are_read_from_check_output(self):
        from wrapir_export import device_check as D

        out = ("0 launches: 0 proven, 0 guarded, 0 failed; 0 proofs (0 from cache)\n"
               "error in graph main, line 2 `extern buf0 = torch.ops.aten._fft_r2c.default(arg0_1, [1], 0, True)`: "
               "the cpu backend cannot run op `aten._fft_r2c` (`torch.ops.aten._fft_r2c.default`): it is not in the "
               "host op registry (see `wrapir ops --device cpu`)\n"
               "error in graph main, line 5 `extern buf2 = torch.ops.aten._fft_r2c.default(buf1, [1], 0, True)`: "
               "the cpu backend cannot run op `aten._fft_r2c` (`torch.ops.aten._fft_r2c.default`): it is not in the "
               "host op registry (see `wrapir ops --device cpu`)\n"
               "error in graph true_graph_0, line 3 `extern buf0 = torch.ops.aten.foo.default(x)`: "
               "the cpu backend cannot run op `aten.foo` (`torch.ops.aten.foo.default`): x\n"
               "cpu: 3 of 4 calls to extern ops cannot run\n")
        ops = D.parse_unrunnable(out)
        self.assertEqual(ops, {"aten._fft_r2c": ["graph main, line 2", "graph main, line 5"],
                               "aten.foo": ["graph true_graph_0, line 3"]})
        self.assertEqual(D.describe("cpu", "aten._fft_r2c", ops["aten._fft_r2c"]),
                         "the cpu backend cannot run extern op aten._fft_r2c (2 calls: graph main, line 2; graph main, "
                         "line 5); `wrapir ops --device cpu` lists the ops it runs")
        self.assertEqual(D.default_devices({"device": "cpu"}), ("cpu",))
        self.assertEqual(D.default_devices({"device": "NVIDIA H100"}), ("cuda",))

    def test_without_wrapir_the_check_says_so(self):
        from wrapir_export import device_check as D

        old = os.environ.pop("WRAPIR", None)
        old_path = os.environ.get("PATH", "")
        os.environ["PATH"] = ""
        try:
            messages, problems = D.check_bundle(os.path.join(BUNDLES, "cat_mm"), ("cpu",))
        finally:
            os.environ["PATH"] = old_path
            if old is not None:
                os.environ["WRAPIR"] = old
        self.assertEqual(messages, [])
        self.assertIn("no wrapir binary", problems[0])


class Ranks(unittest.TestCase):
    def test_layout(self):
        got = ranks.layout(2, "gloo", {"0": [0, 1]})
        self.assertEqual(got, {"format_version": 1, "world_size": 2, "backend": "gloo",
                               "ranks": ["rank0", "rank1"], "groups": {"0": [0, 1]}})

    def test_committed_rank_sets_match_their_layout(self):
        root = os.path.join(REPO, "fixtures", "inductor", "bundles_ranks")
        cases = sorted(os.listdir(root))
        self.assertEqual(cases, ["sp_mlp", "tp_attention", "tp_mlp"])
        for case in cases:
            with open(os.path.join(root, case, ranks.RANKS_FILE)) as f:
                got = json.load(f)
            self.assertEqual(got, ranks.layout(got["world_size"], got["backend"], got["groups"]))
            for r in got["ranks"]:
                self.assertTrue(os.path.isfile(os.path.join(root, case, r, "program.json")), (case, r))


class Safetensors(unittest.TestCase):
    def test_pack_layout(self):
        raw = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
        data = safetensors.pack([("a", "F32", [2, 2], raw), ("n", "I64", [], struct.pack("<q", 7))],
                                {"k": 1})
        (n,) = struct.unpack("<Q", data[:8])
        self.assertEqual(n % 8, 0, "header padded to 8 bytes")
        header = json.loads(data[8:8 + n])
        self.assertEqual(header["a"], {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]})
        self.assertEqual(header["n"], {"dtype": "I64", "shape": [], "data_offsets": [16, 24]})
        self.assertEqual(header["__metadata__"], {"k": "1"})
        self.assertEqual(list(header), ["a", "n", "__metadata__"])
        self.assertEqual(data[8 + n:], raw + struct.pack("<q", 7))
        # The exporter's header text: compact JSON, padded with spaces.
        self.assertTrue(data[8:8 + n].rstrip(b" ").endswith(b"}"))
        self.assertNotIn(b": ", data[8:8 + n])

    def test_roundtrip_and_metadata(self):
        data = safetensors.pack([("x", "BF16", [3], b"\x00\x01" * 3), ("e", "U8", [0], b"")],
                                {safetensors.COMPLEX_MARKER + "x": "complex32"})
        raw, meta = safetensors.read_raw(data)
        self.assertEqual(raw["x"], ("bfloat16", [3], b"\x00\x01" * 3))
        self.assertEqual(raw["e"], ("uint8", [0], b""))
        self.assertEqual(meta, {"wrapir.complex.x": "complex32"})

    def test_dtype_codes(self):
        self.assertEqual(safetensors.dtype_code("torch.float32"), "F32")
        self.assertEqual(safetensors.dtype_code("complex64"), "C64")
        # fp8 under the codes wrapir's reader takes (`format::safetensors::dtype_from_name`).
        self.assertEqual(safetensors.dtype_code("torch.float8_e4m3fn"), "F8_E4M3")
        self.assertEqual(safetensors.dtype_code("float8_e5m2"), "F8_E5M2")
        with self.assertRaises(Unconvertible):
            safetensors.dtype_code("float4_e2m1fn_x2")

    def test_reads_every_committed_bundle(self):
        files = glob.glob(os.path.join(BUNDLES, "*", "*.safetensors"))
        self.assertGreater(len(files), 50)
        for f in files:
            with open(f, "rb") as fh:
                data = fh.read()
            raw, meta = safetensors.read_raw(data)
            entries = [(k, safetensors.dtype_code(d), s, b) for k, (d, s, b) in raw.items()]
            # What the writer makes of the same tensors is the committed file, byte for byte.
            self.assertEqual(safetensors.pack(entries, meta), data, f)


class Redact(unittest.TestCase):
    def test_cache_paths(self):
        self.assertEqual(redact.redact("# kernel path: /tmp/torchinductor_root/ab/cab.py"),
                         "# kernel path: <cache>/ab/cab.py")
        self.assertEqual(redact.redact(".file 1 \"/root/.triton/cache/x/k.py\""), ".file 1 \"<cache>/x/k.py\"")
        self.assertEqual(redact.redact("/tmp/tmpab12/x"), "<cache>/x")
        self.assertEqual(redact.redact("/home/me/src/wrapir/fixtures/inductor/cases.py:12"),
                         "fixtures/inductor/cases.py:12")
        self.assertEqual(redact.redact("no paths"), "no paths")


class Regions(unittest.TestCase):
    def test_renamed_replaces_buffer_names_and_symbols_in_expressions(self):
        line = {"line": "kernel_call", "kernel": "buf0", "args": [
            {"value": {"kind": "buffer", "value": "buf0"}}, {"value": {"kind": "expr", "value": "2*ps0 + ps01"}}]}
        out = regions.renamed(line, {"buf0": "buf7_buf0"}, {"ps0": "ps0_buf7"})
        self.assertEqual(out["args"][0]["value"]["value"], "buf7_buf0")
        # Whole names only: `ps01` is another symbol.
        self.assertEqual(out["args"][1]["value"]["value"], "2*ps0_buf7 + ps01")
        self.assertEqual(line["args"][0]["value"]["value"], "buf0")  # a copy, the region's lines unchanged
        comment = {"line": "comment", "text": "buf0"}
        self.assertEqual(regions.renamed(comment, {"buf0": "x"}, {}), comment)

    def test_left_live_frees_what_the_region_does_not_and_its_outputs_do_not_hold(self):
        tensor = {"kind": "tensor", "layout": {}}
        lines = [{"line": "allocate", "buffer": "a"}, {"line": "allocate", "buffer": "b"},
                 {"line": "allocate", "buffer": "c"}, {"line": "reinterpret", "base": "c", "alias": "c_view"},
                 {"line": "free", "buffer": "a"}, {"line": "allocate", "buffer": "d"},
                 {"line": "reuse", "old": "d", "new": "e", "delete_old": True}]
        buffers = {n: tensor for n in ("a", "b", "c", "c_view", "d", "e")}
        # `b` is an output, `c_view` too (it holds `c`'s storage); `a` is freed, `d` reused as `e`.
        self.assertEqual(regions.left_live(lines, buffers, {"b", "c_view"}), ["e"])

    def test_region_texts_are_inductors(self):
        self.assertEqual(regions.region_texts("buf0", ["arg0_1"], "repeated_subgraph0", "repeated_subgraph0", 1), {
            "buf0 = [None] * 1", "# subgraph: repeated_subgraph0",
            "repeated_subgraph0_args = [arg0_1,]", "buf0 = repeated_subgraph0(repeated_subgraph0_args)"})


class Exprs(unittest.TestCase):
    def test_text_expr(self):
        self.assertEqual(exprs.text_expr(" 12 "), (12, []))
        self.assertEqual(exprs.text_expr("-3"), (-3, []))
        self.assertEqual(exprs.text_expr("s0*s1 + 4"), ("s0*s1 + 4", ["s0", "s1"]))
        self.assertEqual(exprs.text_expr("max(s0, 2) // 8"), ("max(s0, 2) // 8", ["s0"]))
        for bad in ("math.floor(s0)", "s0 / 2", "1.5", "sym_max(s0, 1)", "a if b else c", "float(s0)"):
            with self.assertRaises(Unconvertible, msg=bad):
                exprs.text_expr(bad)

    def test_split_tuple_text(self):
        self.assertEqual(exprs.split_tuple_text("(s0, 4*s1, )"), ["s0", "4*s1"])
        self.assertEqual(exprs.split_tuple_text("(max(s0, 1), 2)"), ["max(s0, 1)", "2"])
        self.assertEqual(exprs.split_tuple_text("(16, )"), ["16"])
        self.assertEqual(exprs.split_tuple_text("()"), [])
        for bad in ("(s0 % 4, )", "s0, s1", "(s0)", "(s0, (s1, )", "(s0, s1))"):
            with self.assertRaises(Unconvertible, msg=bad):
                exprs.split_tuple_text(bad)

    def test_split_tuple_text_nested_parentheses(self):
        # Issue 39: a dynamic CNN's pooled sizes, whose items hold parentheses of their own.
        text = ("(3, 64, 1 + (((-1) + s69) // 2), 1 + (((-1) + s70) // 2))")
        items = exprs.split_tuple_text(text)
        self.assertEqual(items, ["3", "64", "1 + (((-1) + s69) // 2)", "1 + (((-1) + s70) // 2)"])
        self.assertEqual([exprs.text_expr(it)[0] for it in items[:2]], [3, 64])
        self.assertEqual(exprs.text_expr(items[2]), ("1 + (((-1) + s69) // 2)", ["s69"]))
        stride = "(64*(1 + (((-1) + s69) // 2))*(1 + (((-1) + s70) // 2)), 1, 64*(1 + (((-1) + s70) // 2)), 64)"
        self.assertEqual(len(exprs.split_tuple_text(stride)), 4)

    def test_call_text_args(self):
        t = ("assert_size_stride(buf3, (3, 64, 1 + (((-1) + s69) // 2), (1 + s70) // 2), "
             "((1 + s70) // 2, 1, 64, 8), 'torch.ops.aten.max_pool2d_with_indices.default')")
        name, args = exprs.call_text_args(t)
        self.assertEqual(name, "assert_size_stride")
        self.assertEqual(args, ["buf3", "(3, 64, 1 + (((-1) + s69) // 2), (1 + s70) // 2)",
                                "((1 + s70) // 2, 1, 64, 8)", "'torch.ops.aten.max_pool2d_with_indices.default'"])
        self.assertEqual(exprs.split_tuple_text(args[1])[3], "(1 + s70) // 2")
        # PyTorch 2.11's text for small_cnn under dynamic=True: the old regex ended the size at
        # its first `)`-`, (` and took `(8 + 8*(((-1) + s53) // 2)` for the stride.
        t = ("assert_size_stride(buf5, (s77, 8, 1 + (((-1) + s53) // 2), 1 + (((-1) + s53) // 2)), "
             "(8 + 8*(((-1) + s53) // 2)*(((-1) + s53) // 2) + 16*(((-1) + s53) // 2), 1, 8 + 8*(((-1) + s53) // 2), 8), "
             "'torch.ops.aten.convolution.default')")
        _, (buf, size, stride, ctx) = exprs.call_text_args(t)
        self.assertEqual(exprs.split_tuple_text(size), ["s77", "8", "1 + (((-1) + s53) // 2)", "1 + (((-1) + s53) // 2)"])
        self.assertEqual(exprs.split_tuple_text(stride), [
            "8 + 8*(((-1) + s53) // 2)*(((-1) + s53) // 2) + 16*(((-1) + s53) // 2)", "1", "8 + 8*(((-1) + s53) // 2)", "8"])
        for bad in ("assert_size_stride(buf0, (1, ), (1, )", "x = f(1)", "f(a, k=1)", "a.b(1)"):
            with self.assertRaises(Unconvertible, msg=bad):
                exprs.call_text_args(bad)

    def test_join_terms(self):
        self.assertEqual(exprs.join_terms(["s0", "-s1", "3"], True), "s0 - s1 + 3")
        self.assertEqual(exprs.join_terms(["s0", "-(s1*2)"], False), "(s0 + -(s1*2))")

    def test_symbols(self):
        self.assertEqual(sorted(["u1", "s10", "ps0", "s2", "u0"], key=exprs.symbol_order),
                         ["s2", "s10", "u0", "u1", "ps0"])
        self.assertEqual([exprs.symbol_kind(s) for s in ("s3", "u0", "ps0")], ["backed", "unbacked", "precomputed"])

    def test_canon_with_sympy(self):
        try:
            import sympy
        except ImportError:
            self.skipTest("sympy is not installed")
        s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
        self.assertEqual(exprs.canon(s0 + 2 * s1, top=True), "s0 + (2*s1)")
        self.assertEqual(exprs.canon(sympy.Max(s0, s1), top=True), "max(s0, s1)")
        self.assertTrue(exprs.plain_python(s0 * s1 + 1))
        with self.assertRaises(Unconvertible):
            exprs.canon(sympy.sin(s0), top=True)


class Kernels(unittest.TestCase):
    def test_grid_json(self):
        self.assertEqual(kernels.grid_json({"grid_type": "Grid1D"}), {"type": "Grid1D"})
        self.assertEqual(kernels.grid_json({"grid_type": "Grid2DWithYZOverflow"}),
                         {"type": "Grid2DWithYZOverflow", "max_y_grid": 65535})
        pre = kernels.grid_json({"grid_type": "PrecomputedGrid", "precomputed_grids": [
            {"config": {"XBLOCK": 64}, "python": ["(s0 + 63) // 64", "1", "1"]}]})
        self.assertEqual(pre, {"type": "PrecomputedGrid",
                               "grids": [{"config": {"XBLOCK": 64}, "grid": ["(s0 + 63) // 64", 1, 1]}]})
        for bad in ({}, {"grid_type": "Weird"}, {"grid_type": "PrecomputedGrid",
                                                  "precomputed_grids": [{"python": ["1"]}]}):
            with self.assertRaises(Unconvertible):
                kernels.grid_json(bad)

    def test_plain_and_const_value(self):
        class Enum:
            value = 3
        self.assertEqual(kernels.plain({"a": (1, Enum()), 2: None}), {"a": [1, 3], "2": None})
        self.assertEqual(kernels.const_value(Enum()), 3)
        with self.assertRaises(Unconvertible):
            kernels.const_value([1, 2])

    def test_name_call_args(self):
        ks = {"k": {"backend": {"signature": {"in_ptr0": "*fp32", "xnumel": "constexpr", "XBLOCK": "constexpr"},
                                "constants": {"xnumel": 1}}}}
        lines = [{"line": "kernel_call", "kernel": "k", "args": [{"value": {"kind": "buffer", "value": "a"}},
                                                                 {"value": {"kind": "expr", "value": 1}}]}]
        notes = []
        kernels.name_call_args(lines, ks, notes)
        self.assertEqual([a["name"] for a in lines[0]["args"]], ["in_ptr0", "xnumel"])
        self.assertEqual(len(notes), 1)
        lines = [{"line": "kernel_call", "kernel": "k", "args": [{"value": 1}] * 3}]
        kernels.name_call_args(lines, ks, notes)
        self.assertNotIn("name", lines[0]["args"][0])

    def test_merge_kernels(self):
        class C:
            def __init__(self, ks):
                self.kernels = ks
        main = C({"k": {"name": "k", "source": "src", "comments": [], "_kind": "triton"}})
        sub = C({"k": {"name": "k", "source": "", "comments": [], "_kind": "triton", "_triton_meta": {"a": 1}}})
        merged = kernels.merge_kernels([main, sub])
        self.assertEqual(merged["k"]["source"], "src")
        self.assertEqual(merged["k"]["_triton_meta"], {"a": 1})


class CallArgRebinding(unittest.TestCase):
    def test_a_numel_symbol_assigned_again_gets_a_fresh_name(self):
        # Inductor assigns `triton_..._xnumel` before each launch of the kernel (a mixture
        # of experts launches one kernel per expert with its own data-dependent size);
        # wrapir binds a symbol once, so later bindings are renamed and later uses follow.
        from types import SimpleNamespace
        from wrapir_export.convert import GraphConverter
        conv = SimpleNamespace(call_arg_names={}, cap=SimpleNamespace(symbols=set()))
        arg = SimpleNamespace(inner="k_xnumel")
        names = []
        for _ in range(3):
            names.append(GraphConverter.rebind_call_arg(conv, "k_xnumel"))
            conv.cap.symbols.add(names[-1])
            self.assertEqual(GraphConverter.call_arg_name(conv, arg), names[-1])
        self.assertEqual(names, ["k_xnumel", "k_xnumel_1", "k_xnumel_2"])
        # A fresh name skips one another symbol already has.
        conv.cap.symbols.add("k_xnumel_3")
        self.assertEqual(GraphConverter.rebind_call_arg(conv, "k_xnumel"), "k_xnumel_4")
        # A symbol never bound by a call-argument line keeps its own name.
        self.assertEqual(GraphConverter.call_arg_name(conv, SimpleNamespace(inner="s0")), "s0")


class Control(unittest.TestCase):
    def test_while_texts(self):
        texts = control.while_texts_for("buf0", ["arg0_1"], ["s77"], (("cond_sub", "while_loop_cond_graph_0"),
                                                                      ("body_sub", "while_loop_body_graph_0")))
        for t in ("buf0 = [None] * 1", "buf0[0] = arg0_1", "buf0[0] = arg0_1.clone()",
                  "should_loop = buf0_cond_result", "while should_loop:", "# subgraph: cond_sub",
                  "while_loop_cond_graph_0_args = [buf0[0], s77]",
                  "(buf0_cond_result,) = while_loop_cond_graph_0(while_loop_cond_graph_0_args)",
                  "(buf0[0],) = while_loop_body_graph_0(while_loop_body_graph_0_args)"):
            self.assertIn(t, texts)
        self.assertTrue(control.is_control_text_str("", texts))
        self.assertFalse(control.is_control_text_str("buf1 = buf0", texts))

    def test_switch_texts(self):
        # torch.cond on PyTorch 2.14+: branches in `node.branches` order, false first.
        texts = control.switch_texts_for("buf0", "arg0_1", True, ["arg1_1"],
                                         (("false_graph_0", "false_graph_0"), ("true_graph_0", "true_graph_0")), 1)
        self.assertEqual(texts, {
            "buf0_selector = int(arg0_1.item())", "buf0 = [None] * 1", "if buf0_selector == 0:", "else:",
            "# subgraph: false_graph_0", "false_graph_0_args = [arg1_1,]", "buf0 = false_graph_0(false_graph_0_args)",
            "# subgraph: true_graph_0", "true_graph_0_args = [arg1_1,]", "buf0 = true_graph_0(true_graph_0_args)"})
        # Three branches, a size expression as the selector, two operands.
        texts = control.switch_texts_for("buf1", "s0 > 5", False, ["s0", "arg1_1"],
                                         (("b0", "g0"), ("b1", "g1"), ("b2", "g2")), 2)
        for t in ("buf1_selector = int(s0 > 5)", "buf1 = [None] * 2", "if buf1_selector == 0:",
                  "elif buf1_selector == 1:", "else:", "g2_args = [s0, arg1_1]", "buf1 = g1(g1_args)"):
            self.assertIn(t, texts)
        self.assertNotIn("elif buf1_selector == 2:", texts)
        self.assertFalse(control.is_control_text_str("buf1_selector = int(arg0_1)", texts))

    def test_cond_text_patterns(self):
        for t in ("buf2 = [None] * 1", "if arg0_1.item():", "else:", "# subgraph: true_graph_0",
                  "true_graph_0_args = [arg1_1]", "buf2 = true_graph_0(true_graph_0_args)"):
            self.assertTrue(control.is_control_text_str(t), t)
        self.assertFalse(control.is_control_text_str("del buf1"))


class Launch(unittest.TestCase):
    BACKEND = {"kind": "triton", "cubin": "kernels/k.cubin", "num_warps": 4, "shared_mem": 0,
               "signature": {"in_ptr0": "*fp32", "out_ptr0": "*bf16", "ks0": "i64", "scale": "fp32",
                             "h": "fp16", "xnumel": "constexpr", "XBLOCK": "constexpr", "r": "i32"},
               "constants": {"xnumel": 1, "r": 5}, "config": {"XBLOCK": 128},
               "global_scratch": 0, "profile_scratch": 0}

    def test_params_and_types(self):
        self.assertEqual([p for p, _ in launch.runtime_params(self.BACKEND)],
                         ["in_ptr0", "out_ptr0", "ks0", "scale", "h"])
        self.assertEqual(launch.arg_types(self.BACKEND), "OOlfH")
        with self.assertRaises(launch.LaunchError):
            launch.arg_types({"signature": {"d": "nvTmaDesc"}})

    def test_encode_scalar(self):
        self.assertEqual(launch.encode_scalar("i32", 7), 7)
        self.assertEqual(launch.encode_scalar("i1", True), 1)
        self.assertEqual(launch.encode_scalar("fp16", 1.0), 0x3C00)
        self.assertEqual(launch.encode_scalar("bf16", 1.0), 0x3F80)
        self.assertEqual(launch.encode_scalar("bf16", -2.0), 0xC000)
        self.assertEqual(launch.encode_scalar("fp32", 2), 2.0)
        with self.assertRaises(launch.LaunchError):
            launch.encode_scalar("i32", 2 ** 31)
        with self.assertRaises(launch.LaunchError):
            launch.encode_scalar("i64", 1.5)

    def test_kernel_object(self):
        k = launch.TritonKernel("k", self.BACKEND, "/b", {"num_ctas": 1})
        self.assertEqual(k.cubin, os.path.join("/b", "kernels/k.cubin"))
        self.assertEqual(k.scratch, [0, 0])
        self.assertEqual(k.__name__, "k")
        with self.assertRaises(launch.LaunchError):
            launch.TritonKernel("k", self.BACKEND, "/b", {"launch_cooperative_grid": True})


class FxPrintout(unittest.TestCase):
    def test_parses_every_fx_snapshot(self):
        snaps = glob.glob(os.path.join(SNAPSHOTS, "fx@*.snap"))
        self.assertGreater(len(snaps), 20)
        for p in snaps:
            with open(p) as f:
                text = f.read().split("---\n", 2)[2]
            fwd = fx.parse_printout(text)
            self.assertTrue(fwd.body, p)
            if "class " in text:
                self.assertTrue(fwd.subgraphs, p)

    def test_structure(self):
        text = ("def forward(self, arg0_1, s0):\n    buf0 = torch.empty_strided([s0], [1], dtype=torch.float32, "
                "device='cuda')\n    return buf0\n\nclass sub_0(torch.nn.Module):\n    def forward(self, a):\n"
                "        return [a]\n")
        fwd = fx.parse_printout(text)
        self.assertEqual(fwd.params, ["arg0_1", "s0"])
        self.assertEqual(list(fwd.subgraphs), ["sub_0"])
        self.assertEqual(fwd.subgraphs["sub_0"].params, ["a"])
        with self.assertRaises(fx.FxError):
            fx.parse_printout("x = 1\n")

    def test_runtime_helpers(self):
        self.assertEqual(fx.c_mod(-7, 3), -1)
        self.assertEqual(fx.c_mod(7, -3), 1)
        self.assertEqual(fx.cond(True, lambda x: [x + 1], lambda x: [x - 1], (1,)), [2])
        self.assertEqual(fx.cond(0, lambda x: [x + 1], lambda x: [x - 1], (1,)), [0])
        out = fx.while_loop(lambda i, n: [i < n], lambda i, n: [i + 1], (0,), (5,))
        self.assertEqual(out, [5])


class Driver(unittest.TestCase):
    def test_unpack_case(self):
        f = object()
        self.assertEqual(cases.unpack_case((f, f, {})), (f, f, {}, {}))
        self.assertEqual(cases.unpack_case((f, f, {}, {"lazy_module": True}))[3], {"lazy_module": True})
        with self.assertRaises(ValueError):
            cases.unpack_case((f, f, {}, {"nope": 1}))

    def test_overrides(self):
        self.assertEqual(cases.apply_overrides({"dynamic": True}, {"mode": "max-autotune"}),
                         {"dynamic": True, "mode": "max-autotune"})
        self.assertEqual(cases.apply_overrides({"mode": "max-autotune"}, {"options": {"freezing": True}}),
                         {"options": {"freezing": True}})
        self.assertEqual(cases.apply_overrides({"options": {"a": 1}}, {"options": {"b": 2}}),
                         {"options": {"a": 1, "b": 2}})
        self.assertEqual(cases.apply_overrides({"x": 1}, None), {"x": 1})

    def test_compile_kwargs(self):
        self.assertEqual(exporter.compile_kwargs_for(), {})
        self.assertEqual(exporter.compile_kwargs_for(True, "max-autotune"), {"dynamic": True, "mode": "max-autotune"})
        self.assertEqual(exporter.compile_kwargs_for(options={"freezing": True}), {"options": {"freezing": True}})
        with self.assertRaises(ValueError):
            exporter.compile_kwargs_for(mode="max-autotune", options={"freezing": True})
        with self.assertRaises(ValueError):
            exporter.compile_kwargs_for(compile_kwargs={"backend": "eager"})

    def test_cli(self):
        self.assertEqual(cli.parse_option("freezing=True"), ("freezing", True))
        self.assertEqual(cli.parse_option("triton.max_tiles=3"), ("triton.max_tiles", 3))
        self.assertEqual(cli.parse_option("x=abc"), ("x", "abc"))
        args = cli.parser().parse_args(["--cases", "c.py", "--out", "o", "--mode", "max-autotune", "--dynamic",
                                        "--option", "freezing=True"])
        self.assertEqual(cli.overrides_of(args), {"mode": "max-autotune", "dynamic": True,
                                                  "options": {"freezing": True}, "export_program": False,
                                                  "cpu_isa": None})
        self.assertEqual(cli.passthrough_of(args), ["--mode", "max-autotune", "--dynamic", "--option",
                                                    "freezing=True"])
        # The vector ISA of the CPU kernels reaches the shards.
        args = cli.parser().parse_args(["--cases", "c.py", "--cpu-isa", "avx2"])
        self.assertEqual(cli.overrides_of(args)["cpu_isa"], "avx2")
        self.assertEqual(cli.passthrough_of(args), ["--cpu-isa", "avx2"])

    def test_missing_case_file_case(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.py")
            with open(path, "w") as f:
                f.write("CASES = {}\n")
            env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
            out = subprocess.run([sys.executable, "-m", "wrapir_export", "--cases", path, "--out", d,
                                  "--only", "nope"], capture_output=True, text=True, env=env)
            self.assertEqual(out.returncode, 1)
            self.assertIn("FAIL nope: no such case", out.stdout)


class Tolerances(unittest.TestCase):
    def test_eager_tolerance_from_error(self):
        tol, basis = tolerances.tolerance_from_error(0.01, "bfloat16")
        self.assertEqual(tol, {"atol": 0.04, "rtol": 0.02})
        self.assertEqual(basis, {"floor": 0.02, "fp64_max_abs_error": 0.01, "multiplier": 3.0})
        tol, _ = tolerances.tolerance_from_error(1e-6, "float32")
        self.assertEqual(tol, {"atol": 0.02, "rtol": 0.02})
        tol, basis = tolerances.tolerance_from_error(None, None, {"atol": 0.5})
        self.assertEqual(tol["atol"], 0.5)
        self.assertEqual(basis["case_override"], {"atol": 0.5})

    def test_compiled_tolerance(self):
        self.assertEqual(tolerances.lowest_precision_name(["float32", "bfloat16", "int64"]), "bfloat16")
        self.assertIsNone(tolerances.lowest_precision_name(["int64"]))
        self.assertEqual(tolerances.compiled_tolerance_for("float16"), {"atol": 1e-3, "rtol": 1e-3,
                                                                        "dtype": "float16"})
        self.assertEqual(tolerances.compiled_tolerance_for(None)["atol"], 1e-5)
        with self.assertRaises(ValueError):
            tolerances.check_math({"tf32": True})

    def test_reference_names_in_output_order(self):
        self.assertEqual(tolerances.reference_names({"out10": 0, "out2": 0, "out0": 0, "x": 0}),
                         ["out0", "out2", "out10"])
        self.assertEqual(tolerances.reference_names({"out0": 0, "graph_out1": 0, "graph_out0": 0}),
                         ["graph_out0", "graph_out1"])
        self.assertEqual(tolerances.reference_names({}), [])


class BundleParts(unittest.TestCase):
    def test_rng_state_bytes(self):
        raw = (123).to_bytes(8, "little") + (456).to_bytes(8, "little")
        state = B.rng_state_from_bytes(raw)
        self.assertEqual(state, {"seed": 123, "offset": 456})
        self.assertEqual(B.rng_state_bytes(state), raw)
        self.assertIsNone(B.rng_state_from_bytes(b"\x00" * 8))

    def test_export_error_names_the_line(self):
        e = ExportError(["main: line 3 (KernelCallLine 'k'): non-Triton kernel call `k`", "other"], "/b")
        self.assertIn("line 3", str(e))
        self.assertIn("1 more", str(e))

    def test_compare_script_on_committed_bundles(self):
        script = os.path.join(HERE, "compare_bundles.py")
        out = subprocess.run([sys.executable, script, BUNDLES, BUNDLES, "--only", "feat_add,addmm_relu,llama"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("summary: 3 same, 0 differ", out.stdout)


if __name__ == "__main__":
    unittest.main()


class InductorExternOps(unittest.TestCase):
    def test_the_committed_table_is_the_merge_of_the_committed_lists(self):
        # src/exec/inductor_ops.tsv (behind `wrapir ops --all`) is generated from the
        # per-version lists that fixtures/inductor/inductor_fallbacks.py read from Inductor.
        import importlib.util

        fixtures = os.path.join(REPO, "fixtures", "inductor")
        spec = importlib.util.spec_from_file_location(
            "inductor_fallbacks", os.path.join(fixtures, "inductor_fallbacks.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        lists = sorted(glob.glob(os.path.join(fixtures, "inductor_fallbacks_*.json")))
        self.assertGreaterEqual(len(lists), 2)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "ops.tsv")
            module.merge(lists, out)
            with open(out) as f, open(os.path.join(REPO, "src", "exec", "inductor_ops.tsv")) as g:
                self.assertEqual(f.read(), g.read(), "regenerate src/exec/inductor_ops.tsv with "
                                 "inductor_fallbacks.py --merge (fixtures/inductor/README.md)")
