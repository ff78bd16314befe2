"""The `wrapir` Python package on a GPU: CUDA tensors in and out without a
copy (DLPack, `kDLCUDA`), on committed CUDA bundles
(`fixtures/inductor/bundles`). Skipped where the package was built without
CUDA or no GPU is visible.

Each case is loaded with `device="cuda"` and called twice: with host
tensors (copied to the device and back) and with CUDA tensors (read in
place on the caller's current stream, outputs returned as CUDA tensors of
their own). The CUDA path's outputs must be CUDA tensors on the model's
device, equal bit for bit to the host path's, within the bundle's tolerance
of its expected outputs, in memory of their own (not the inputs', and not
reused by the next call). The calls are ordered on the caller's stream (an
input written there just before the call is what the call reads), a view
with a storage offset is read where it starts (copied first when not
aligned as the kernels assume), and bad inputs (another
device, other strides, a CPU model given CUDA tensors) are clear errors.
`test_per_call_host_time` prints the per-call host time of both paths.

Run from this directory on the GPU machine, with the CUDA wheel installed
(`maturin build --release --features cuda -m bindings/python/Cargo.toml`):
`python -m unittest -v test_cuda`.
"""

import json
import pathlib
import sys
import time
import unittest

import torch

import wrapir

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))

from wrapir_export.safetensors import load_safetensors  # noqa: E402
from wrapir_export.tolerances import compare_outputs  # noqa: E402

from threads import failures_on_threads  # noqa: E402

BUNDLES = REPO / "fixtures" / "inductor" / "bundles"
#: Convolutions with weights (cuDNN), a view as output, dynamic sizes, several inputs.
CASES = ["resnet", "view_output", "pointwise_dynamic", "layer_norm", "feat_reshape_output"]

ON_GPU = wrapir.CUDA and torch.cuda.is_available()


class Bundle:
    """A committed CUDA bundle's metadata, call inputs (host) and expected outputs."""

    def __init__(self, case):
        self.dir = BUNDLES / case
        self.meta = json.loads((self.dir / "bundle.json").read_text())
        stored = load_safetensors(self.dir / "inputs.safetensors")
        weights = set(self.meta.get("weights") or [])
        self.inputs = {k: v for k, v in stored.items() if k not in weights}
        self.expected = load_safetensors(self.dir / "expected.safetensors")

    def judge(self, test, outputs):
        ok, reason, _ = compare_outputs(torch, outputs, self.expected, self.meta["tolerance"])
        test.assertTrue(ok, f"{self.dir.name}: {reason}")


def resnet_on_device(**options):
    """The `resnet` bundle's model loaded on the GPU (with `options`) and its
    one stored input (host)."""
    bundle = Bundle("resnet")
    model = wrapir.load(bundle.dir, device="cuda", **options)
    (name,) = model.input_names
    return model, bundle.inputs[name]


def storage_range(t):
    """The device addresses [start, end) of `t`'s storage."""
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


@unittest.skipUnless(ON_GPU, "needs the CUDA build of wrapir and a CUDA device")
class CudaTensors(unittest.TestCase):
    def test_cuda_tensors_in_place_match_the_host_path(self):
        for case in CASES:
            with self.subTest(case=case):
                bundle = Bundle(case)
                model = wrapir.load(bundle.dir, device="cuda")
                self.assertEqual(model.device, "cuda:0")
                host_in = [bundle.inputs[n] for n in model.input_names]
                host_out = model(*host_in)
                dev_in = [x.cuda() for x in host_in]
                before = [x.clone() for x in dev_in]
                dev_out = model(*dev_in)
                torch.cuda.synchronize()
                self.assertEqual(len(dev_out), len(host_out))
                for d, h in zip(dev_out, host_out):
                    if not isinstance(h, torch.Tensor):
                        self.assertEqual(d, h)
                        continue
                    self.assertEqual(h.device.type, "cpu")
                    self.assertEqual(d.device, torch.device("cuda", 0))
                    self.assertEqual((d.shape, d.dtype), (h.shape, h.dtype))
                    # Bit for bit the host path's outputs.
                    self.assertTrue(torch.equal(d.cpu(), h), f"{case}: the CUDA path differs from the host path")
                    # Memory of its own: none of the inputs'.
                    lo, hi = storage_range(d)
                    for x in dev_in:
                        xlo, xhi = storage_range(x)
                        self.assertTrue(hi <= xlo or xhi <= lo, f"{case}: an output shares an input's memory")
                bundle.judge(self, dev_out)
                # The program writes none of these inputs: they are as given.
                for x, b in zip(dev_in, before):
                    self.assertTrue(torch.equal(x, b))
                # By name, the same.
                again = model(**{n: x for n, x in zip(model.input_names, dev_in)})
                for a, d in zip(again, dev_out):
                    if isinstance(d, torch.Tensor):
                        self.assertTrue(torch.equal(a, d))

    def test_outputs_outlive_later_calls(self):
        model, x = resnet_on_device(idle_sessions=1)
        x = x.cuda()
        (first,) = model(x)
        want = first.clone()
        # Later calls on the same (only) session, with other inputs, leave it as it was.
        for _ in range(3):
            (other,) = model(torch.randn_like(x))
            self.assertNotEqual(other.data_ptr(), first.data_ptr())
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(first, want))
        first.zero_()  # the caller's to write
        (second,) = model(x)
        self.assertTrue(torch.equal(second, want))

    def test_the_call_is_ordered_on_the_current_stream(self):
        model, real = resnet_on_device()
        real = real.cuda()
        (want,) = model(real)
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            x = torch.zeros_like(real)
            # Queued on `stream` behind a long wait: a call that did not wait
            # for the stream would read zeros.
            torch.cuda._sleep(50_000_000)
            x.copy_(real)
            (got,) = model(x)
            # `stream` waits for the output: this reads it complete.
            host = got.to("cpu", non_blocking=False)
        self.assertTrue(torch.equal(host, want.cpu()))

    def test_a_view_is_read_where_it_starts(self):
        model, real = resnet_on_device()
        (want,) = model(real)
        # The input at a storage offset inside a larger buffer: 4 floats in
        # (16 bytes: aligned, read in place), and 3 (not aligned as the
        # kernels assume: copied first, as Inductor does).
        for offset in (4, 3):
            big = torch.full((real.numel() + offset,), float("nan"), device="cuda")
            big[offset:] = real.cuda().reshape(-1)
            view = big[offset:].view(real.shape)
            self.assertEqual(view.storage_offset(), offset)
            (got,) = model(view)
            self.assertTrue(torch.equal(got.cpu(), want), f"offset {offset}")
        # The compiled part refuses a misaligned view outright.
        capsule = torch.utils.dlpack.to_dlpack(view)
        stream = torch.cuda.current_stream().cuda_stream
        with self.assertRaisesRegex(ValueError, "16-byte aligned"):
            model._model.call_device(stream, capsule)

    def test_mixed_cpu_and_cuda_inputs(self):
        bundle = Bundle("layer_norm")
        model = wrapir.load(bundle.dir, device="cuda")
        host_in = [bundle.inputs[n] for n in model.input_names]
        want = model(*host_in)
        mixed = [x.cuda() if i == 0 else x for i, x in enumerate(host_in)]
        got = model(*mixed)
        self.assertEqual(got[0].device.type, "cuda")
        self.assertTrue(torch.equal(got[0].cpu(), want[0]))

    def test_many_threads_on_streams_of_their_own(self):
        model, x = resnet_on_device()
        x = x.cuda()
        (want,) = model(x)
        torch.cuda.synchronize()

        def work():
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(20):
                    (y,) = model(x)
                    if not torch.equal(y, want):
                        raise AssertionError("an output differs")
            stream.synchronize()

        self.assertEqual(failures_on_threads(work, 4), [])

    def test_bad_inputs_are_clear_errors(self):
        model, x = resnet_on_device()
        x = x.cuda()
        # Strides other than the program's: named.
        strided = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        with self.assertRaisesRegex(ValueError, "strides"):
            model(strided)
        with self.assertRaisesRegex(TypeError, "int"):
            model(**{model.input_names[0]: x}, extra=3)  # an int in a call with CUDA tensors
        if torch.cuda.device_count() > 1:
            with self.assertRaisesRegex(ValueError, "cuda:1"):
                model(x.to("cuda:1"))
        # A CPU model given a CUDA tensor keeps its error.
        cpu_bundle = REPO / "fixtures" / "inductor" / "bundles_cpu" / "cpp" / "small_cnn"
        cpu_model = wrapir.load(cpu_bundle)
        (cpu_name,) = cpu_model.input_names
        cpu_x = load_safetensors(cpu_bundle / "inputs.safetensors")[cpu_name]
        with self.assertRaisesRegex(ValueError, r"\.cpu\(\)"):
            cpu_model(cpu_x.cuda())

    def test_per_call_host_time(self):
        """Prints the host time of one call, host tensors against CUDA tensors
        (no synchronisation between calls: what the caller's thread spends)."""
        model, host = resnet_on_device()
        dev = host.cuda()
        rows = {}
        for label, x in (("host tensors in and out", host), ("CUDA tensors in and out", dev)):
            for _ in range(50):
                model(x)
            torch.cuda.synchronize()
            times = []
            for _ in range(500):
                t0 = time.perf_counter()
                model(x)
                times.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            times.sort()
            rows[label] = times[len(times) // 2]
        print(f"\nresnet on {torch.cuda.get_device_name()}: median host time per call")
        for label, t in rows.items():
            print(f"  {label}: {t * 1e6:.1f} us")


if __name__ == "__main__":
    unittest.main()
