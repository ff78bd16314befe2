"""Tests of the model-family sweep's parts that need no torch (`fixtures/inductor/sweep.py`):
how it reads the reports of `wrapir check`, `wrapir run` and the lowering checkers, and
the case loader it shares with the exporter."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

from wrapir_export import cases  # noqa: E402

_spec = importlib.util.spec_from_file_location("wrapir_sweep", os.path.join(REPO, "fixtures", "inductor", "sweep.py"))
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

# `wrapir run --device cpu`'s report (src/bin/wrapir/run.rs): the per-output lines are
# indented under the reference they were compared with.
RUN_REPORT = """\
ran on cpu: 3 launches
against eager: 1 of 2 outputs differ from expected.safetensors (atol 0.02, rtol 0.02)
  output 0 (`out0`): max abs error 3.5e-3, max rel error 1.0e-2; match
  output 1 (`out1`): max abs error 0.25, max rel error 4.0e-1; MISMATCH: 12 of 80 elements
against inductor: 2 outputs match compiled.safetensors (atol 1e-5, rtol 1e-5)
  output 0 (`out0`): max abs error 7.0, max rel error 1.0; match
mutated inputs against eager: 2 match mutated.safetensors (atol 0.02, rtol 0.02)
  input arg1_1: max abs error 9.0, max rel error 0; match
"""

CHECK_REPORT = """\
error in graph main, line 4 `extern buf3 = aten.sort.stable(...)`: the cpu backend cannot run op `aten.sort.stable` (`aten.sort.stable(buf2, stable=True)`): it is not in the host op registry (see `wrapir ops --device cpu`)
error in graph main, line 9 `extern buf7 = extern_kernels._int_mm(...)`: the cpu backend cannot run op extern_kernels._int_mm: it is not in the host op registry (see `wrapir ops --device cpu`)
error in graph main, line 12: the cpu backend cannot run op `aten.sort.stable` (`...`): it is not in the host op registry
"""


class RunReport(unittest.TestCase):
    def test_the_largest_error_is_read_from_the_eager_section_only(self):
        self.assertEqual(sweep.max_eager_error(RUN_REPORT), 0.25)

    def test_no_comparison_means_no_error(self):
        self.assertIsNone(sweep.max_eager_error("against eager: absent (no expected.safetensors), not compared\n"))

    def test_non_finite_errors_are_kept(self):
        report = "against eager: 1 of 1 outputs differ\n  output 0 (`out0`): max abs error nan, max rel error nan; x\n"
        self.assertNotEqual(sweep.max_eager_error(report), sweep.max_eager_error(report))


class CheckReport(unittest.TestCase):
    def test_every_unrunnable_op_is_named_once(self):
        self.assertEqual(sweep.unrunnable_ops(CHECK_REPORT), ["aten.sort.stable", "extern_kernels._int_mm"])

    def test_the_exporters_device_warnings_name_the_op(self):
        warning = ("warning: the cpu backend cannot run extern op aten.histc (1 call: graph main, line 40); "
                   "`wrapir ops --device cpu` lists the ops it runs")
        self.assertEqual(sweep.unrunnable_ops(warning), ["aten.histc"])

    def test_the_first_error_line_is_the_reason(self):
        self.assertTrue(sweep.first_error("note: x\n" + CHECK_REPORT).startswith("error in graph main, line 4"))
        self.assertEqual(sweep.first_error("a\nlast words\n"), "last words")
        self.assertEqual(sweep.first_error(""), "no output")


class CheckerLines(unittest.TestCase):
    PYTHON = r"^(ok|FAIL|n/a)\s+{} \[python\]"
    OTHER = r"^(ok|FAIL|n/a)\s+{}\b"

    def check(self, status, out, pattern, expect):
        """The checker's verdict for `out` (exit `status`) on the line `pattern` matches is `expect`."""
        self.assertEqual(sweep.Sweep.checker_result(status, out, pattern), expect)

    def test_check_python_lines(self):
        self.check(0, "ok   lstm [python] max error 1.2e-06\n\nsummary\n", self.PYTHON.format("lstm"), ("ok", None))
        self.check(1, "FAIL gru [python] max error 3: call: RuntimeError: boom\n", self.PYTHON.format("gru"),
                   ("FAIL", "call: RuntimeError: boom"))

    def test_check_fx_module_and_standalone_lines(self):
        self.check(1, "FAIL moe_topk: build: no op\nsummary: 0 ok, 1 failed, 1 bundles\n",
                   self.OTHER.format("moe_topk"), ("FAIL", "build: no op"))
        # A case whose name is a prefix of another's is not confused with it.
        self.check(0, "ok   lstm_big builds yes\n", self.OTHER.format("lstm"), ("ok", None))
        self.check(0, "n/a  int8_linear builds no: the runtime has no device implementation of _int_mm\n",
                   self.OTHER.format("int8_linear"), ("n/a", "the runtime has no device implementation of _int_mm"))

    def test_a_checker_without_a_line_is_judged_by_its_exit(self):
        self.check(None, "x\ntimed out after 5 s", "^(ok) c", ("FAIL", "timed out after 5 s"))
        self.check(2, "usage: error: bad\n", "^(ok) c", ("FAIL", "usage: error: bad"))


class Tables(unittest.TestCase):
    ROW = {"case": "conformer", "export": "ok", "check": "ok", "run": "FAIL", "python": "-", "fx": "-",
           "standalone": "skip", "size": 123456, "max_error": 0.5, "mutated": False, "wall_s": 12.0,
           "reasons": {"run": "mismatch | against `expected`"}}

    def test_markdown_rows_escape_pipes(self):
        table = sweep.markdown_table([self.ROW]).splitlines()
        self.assertEqual(len(table), 3)
        self.assertEqual(table[2].count(" | "), 8)
        self.assertIn("FAIL (0.5)", table[2])
        self.assertIn("123 kB", table[2])


class CaseLoader(unittest.TestCase):
    def test_a_case_file_is_importable_by_its_module_name_while_it_runs(self):
        # Dynamo imports the module of a function it traces by name (FlexAttention's
        # score_mod): the case file must be in sys.modules as it runs and after.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.py")
            with open(path, "w") as f:
                f.write("import sys\nCASES = {'me': sys.modules[__name__]}\n")
            loaded = cases.load_cases(path)
        self.assertIs(loaded["me"], sys.modules["wrapir_inductor_cases"])


if __name__ == "__main__":
    unittest.main()
