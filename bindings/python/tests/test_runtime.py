"""The `wrapir` Python package on the committed CPU bundles
(`fixtures/inductor/bundles_cpu*`): each bundle loaded with `wrapir.load` and
called with its stored inputs as torch tensors, judged against its eager and
Inductor references by the exporter's one output comparison
(`wrapir_export.tolerances.compare_outputs`); NumPy inputs; a package from
bytes; many Python threads at once; dynamic sizes inside and outside their
ranges; bad inputs.

Run from this directory: `python -m unittest -q` (needs torch and the built
package: `pip install .`).
"""

import json
import pathlib
import sys
import unittest

import torch

import wrapir

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))

from wrapir_export.safetensors import load_safetensors  # noqa: E402
from wrapir_export.tolerances import compare_outputs  # noqa: E402

from threads import failures_on_threads  # noqa: E402

FIXTURES = REPO / "fixtures" / "inductor"
#: (set, case): C++ and Halide kernels, weights, dynamic sizes, several outputs.
CASES = [
    ("bundles_cpu/cpp", "small_cnn"),
    ("bundles_cpu/cpp", "transformer_block"),
    ("bundles_cpu/cpp", "pointwise_dynamic"),
    ("bundles_cpu/cpp", "nonzero"),
    ("bundles_cpu/cpp", "bf16_rmsnorm"),
    ("bundles_cpu/halide", "softmax"),
    ("bundles_cpu/halide", "layer_norm"),
    ("bundles_cpu_2.15/control", "cond_tensor_pred"),
]


class Bundle:
    """A committed bundle's metadata, call inputs and references."""

    def __init__(self, set_name, case):
        self.dir = FIXTURES / set_name / case
        self.meta = json.loads((self.dir / "bundle.json").read_text())
        stored = load_safetensors(self.dir / "inputs.safetensors")
        weights = set(self.meta.get("weights") or [])
        self.inputs = {k: v for k, v in stored.items() if k not in weights}
        self.expected = load_safetensors(self.dir / "expected.safetensors")
        self.compiled = load_safetensors(self.dir / "compiled.safetensors")

    def judge(self, test, outputs):
        for reference, tolerance in ((self.expected, "tolerance"), (self.compiled, "compiled_tolerance")):
            ok, reason, _ = compare_outputs(torch, outputs, reference, self.meta[tolerance])
            test.assertTrue(ok, f"{self.dir.name} against {tolerance}: {reason}")


class Models(unittest.TestCase):
    def test_every_case_matches_its_references(self):
        for set_name, case in CASES:
            with self.subTest(case=f"{set_name}/{case}"):
                bundle = Bundle(set_name, case)
                model = wrapir.load(bundle.dir)
                self.assertEqual(model.device, "cpu")
                # The call inputs: the stored ones less the symbol inputs, which sizes bind.
                self.assertLessEqual(set(model.input_names), set(bundle.inputs))
                outputs = model(*[bundle.inputs[n] for n in model.input_names])
                self.assertIsInstance(outputs, list)
                for out in outputs:
                    if isinstance(out, torch.Tensor):
                        self.assertEqual(out.device.type, "cpu")
                bundle.judge(self, outputs)
                # By name, the same.
                again = model(**{n: bundle.inputs[n] for n in model.input_names})
                for a, b in zip(outputs, again):
                    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)

    def test_numpy_arrays_are_inputs(self):
        bundle = Bundle("bundles_cpu/cpp", "small_cnn")
        model = wrapir.load(str(bundle.dir))
        (out,) = model(*[bundle.inputs[n].numpy() for n in model.input_names])
        bundle.judge(self, [out])

    def test_non_contiguous_inputs_are_laid_out(self):
        bundle = Bundle("bundles_cpu/cpp", "small_cnn")
        model = wrapir.load(bundle.dir)
        (name,) = model.input_names
        x = bundle.inputs[name]
        strided = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        self.assertFalse(strided.is_contiguous())
        bundle.judge(self, model(strided))

    def test_outputs_own_their_memory(self):
        bundle = Bundle("bundles_cpu/cpp", "small_cnn")
        model = wrapir.load(bundle.dir)
        (first,) = model(**bundle.inputs)
        want = first.clone()
        first.zero_()
        (second,) = model(**bundle.inputs)
        torch.testing.assert_close(second, want, rtol=0, atol=0)

    def test_a_package_loads_from_bytes(self):
        import tempfile

        bundle = Bundle("bundles_cpu/halide", "softmax")
        with tempfile.TemporaryDirectory() as tmp:
            package = pathlib.Path(tmp) / "softmax.wirpkg"
            wrapir_cli = _wrapir_binary()
            if wrapir_cli is None:
                self.skipTest("no wrapir binary to pack with (set WRAPIR)")
            import subprocess

            subprocess.run([wrapir_cli, "pack", str(bundle.dir), "-o", str(package)], check=True)
            data = package.read_bytes()
            with self.assertRaisesRegex(wrapir.Error, "scratch_dir"):  # Halide kernels load from files only
                wrapir.load(data)
            scratch = pathlib.Path(tmp) / "kernels"
            scratch.mkdir()
            for source in (data, package):
                model = wrapir.load(source, scratch_dir=scratch)
                bundle.judge(self, model(**bundle.inputs))
            self.assertEqual(list(scratch.iterdir()), [])

    def test_many_threads_call_one_model(self):
        bundle = Bundle("bundles_cpu/cpp", "transformer_block")
        model = wrapir.load(bundle.dir)
        args = [bundle.inputs[n] for n in model.input_names]
        want = model(*args)

        def worker():
            for _ in range(5):
                got = model(*args)
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, rtol=0, atol=0)

        self.assertEqual(failures_on_threads(worker, 6), [])

    def test_dynamic_sizes_inside_and_outside_their_ranges(self):
        bundle = Bundle("bundles_cpu/cpp", "pointwise_dynamic")
        model = wrapir.load(bundle.dir)
        names = model.input_names
        full = [bundle.inputs[n] for n in names]
        for n in (2, 17, full[0].shape[0]):
            short = [t[:n] for t in full]
            (out,) = model(*short)
            self.assertEqual(tuple(out.shape), (n,))
            torch.testing.assert_close(out, torch.sigmoid(short[0]) * short[1] + 1)
        with self.assertRaisesRegex(ValueError, rf"size 0 of `{names[0]}` is 1, which binds `s\d+` outside its range"):
            model(*[t[:1] for t in full])

    def test_bad_inputs_name_the_input(self):
        bundle = Bundle("bundles_cpu/cpp", "small_cnn")
        model = wrapir.load(bundle.dir)
        (name,) = model.input_names
        x = bundle.inputs[name]
        with self.assertRaisesRegex(ValueError, rf"`{name}` is f64\[2, 3, 16, 16\]"):
            model(x.double())
        with self.assertRaisesRegex(ValueError, rf"`{name}` was not supplied"):
            model()
        with self.assertRaisesRegex(TypeError, "takes 1 inputs"):
            model(x, x)
        with self.assertRaisesRegex(ValueError, "`nope` is neither a graph input nor a constant"):
            model(x, nope=x)
        with self.assertRaisesRegex(TypeError, rf"input `{name}`: expected a tensor"):
            model("x")
        with self.assertRaisesRegex(ValueError, "unknown device `gpu`"):
            wrapir.load(bundle.dir, device="gpu")
        with self.assertRaisesRegex(wrapir.Error, "no/such/bundle"):
            wrapir.load("no/such/bundle")
        with self.assertRaisesRegex(TypeError, "takes a path or the bytes of a package"):
            wrapir.load(3)
        if not wrapir.CUDA:
            with self.assertRaisesRegex(wrapir.Error, "built without the `cuda` feature"):
                wrapir.load(bundle.dir, device="cuda")


def _wrapir_binary():
    """The wrapir CLI: `$WRAPIR`, else the workspace's debug build."""
    import os

    path = os.environ.get("WRAPIR") or str(REPO / "target" / "debug" / "wrapir")
    return path if os.path.exists(path) else None


if __name__ == "__main__":
    unittest.main()
