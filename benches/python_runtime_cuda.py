"""The `wrapir` Python package against `torch._inductor.aoti_load_package`
on CUDA, on the same zoo models (`fixtures/inductor/models.py` at its
small, committed sizes): cold load in a fresh process and per-call host
time. Needs PyTorch 2.11+ with CUDA, a GPU, and the artifacts below; no
Rust toolchain and no network.

Artifacts, built on any Linux x86-64 machine with Rust (no GPU needed), into
one folder DIST that travels with the repository to the GPU machine:

    # the wheel: one abi3 wheel for CPython 3.10+, with the CUDA backend
    python3 -m venv /tmp/maturin && /tmp/maturin/bin/pip install 'maturin>=1.7,<2'
    /tmp/maturin/bin/maturin build --release --features cuda \
        -m bindings/python/Cargo.toml --out DIST
    # the packages of the committed bundles (wrapir's side of the comparison)
    cargo build --release --bin wrapir
    for m in resnet gpt2; do
      target/release/wrapir pack fixtures/inductor/bundles/$m -o DIST/$m.wirpkg
    done

On the GPU machine, from the repository's root (the models and the
exporter's case loader are read from it):

    python3 -m venv --system-site-packages /tmp/wrapir-venv
    /tmp/wrapir-venv/bin/pip install --no-index --no-deps DIST/wrapir-*.whl
    /tmp/wrapir-venv/bin/python benches/python_runtime_cuda.py --dist DIST \
        [--models resnet,gpt2] [--cold 5] [--calls 1000] [--keep-pt2 DIR]

For each model:

* AOTI's package is compiled here from the same module and inputs
  (`torch.export.export`, `aoti_compile_and_package`; minutes), unless
  `--keep-pt2 DIR` already holds `MODEL.pt2` (it is kept there otherwise).
* Cold start: `--cold` fresh processes per runner, timed from just before
  the process is started to its first output on the host (the child stamps
  the wall clock once the output is ready): `import torch`, the load, one
  call. The child also times the load and the first call alone. wrapir
  once more without `import torch` (NumPy in and out), where NumPy is
  installed.
* Per call: in one process, the median host time of one call over
  `--calls` calls after 50 untimed ones, each ended by
  `torch.cuda.synchronize()`. Both runners are timed both ways: device
  tensors in and out (wrapir reads CUDA tensors in place through DLPack and
  returns CUDA tensors), and host tensors in and out (wrapir copies inputs
  to the device and outputs back; AOTI through `x.cuda()`, `.cpu()`).

wrapir's outputs are compared with the bundle's `expected.safetensors`
(its tolerance), AOTI's with the eager module's. The summary table is
printed last.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
BUNDLES = REPO / "fixtures" / "inductor" / "bundles"
MODELS = REPO / "fixtures" / "inductor" / "models.py"
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "fixtures" / "inductor"))
sys.path.insert(0, str(REPO / "benches"))

from python_runtime import child, cold  # noqa: E402  (the CPU benchmark's child script and fresh-process timer)

# The children read their inputs first; `{inputs}`, `{npy}`, `{pkg}` and `{pt2}` are filled in.
CHILD_WRAPIR = child(
    imports="torch, wrapir", read="torch.load({inputs!r})", load='wrapir.load({pkg!r}, device="cuda")', call="m(*x)"
)
CHILD_WRAPIR_NUMPY = child(
    imports="numpy, wrapir", read="[numpy.load({npy!r})]", load='wrapir.load({pkg!r}, device="cuda")', call="m(*x)"
)
CHILD_AOTI = child(
    imports="torch",
    read="[t.cuda() for t in torch.load({inputs!r})]",
    load="torch._inductor.aoti_load_package({pt2!r})",
    call="[t.cpu() for t in (lambda y: y if isinstance(y, (list, tuple)) else [y])(m(*x))]",
)


def per_call(fn, args, calls):
    """Median seconds of one call of `fn(*args)`, synchronised."""
    import torch

    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def as_list(y):
    return list(y) if isinstance(y, (list, tuple)) else [y]


SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
                      "I64": "int64", "I32": "int32", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def load_file(path):
    """A safetensors file's tensors (host), read without the `safetensors` package."""
    import torch

    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    body = bytearray(data[8 + n :])
    out = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        dtype = getattr(torch, SAFETENSORS_DTYPES[entry["dtype"]])
        start, end = entry["data_offsets"]
        flat = torch.frombuffer(body, dtype=dtype, offset=start, count=(end - start) // dtype.itemsize) if end > start else torch.empty(0, dtype=dtype)
        out[key] = flat.reshape(entry["shape"]).clone()
    return out


def bundle_inputs_and_expected(name):
    """The bundle's user inputs (host tensors, in order) and expected outputs."""
    meta = json.loads((BUNDLES / name / "bundle.json").read_text())
    inputs = load_file(str(BUNDLES / name / "inputs.safetensors"))
    expected = load_file(str(BUNDLES / name / "expected.safetensors"))
    weights = set(meta.get("weights", []))
    user = [inputs[n] for n in meta["graph_inputs"] if n not in weights][: meta.get("user_inputs")]
    return user, [expected[n] for n in meta["expected"]], meta["tolerance"]


def aoti_package(name, keep):
    """AOTI's package of model `name` (compiled, or reused from `keep`), the
    eager module and its device inputs."""
    import torch

    from wrapir_export.cases import load_cases, unpack_case

    fn, make_inputs, _kw, options = unpack_case(load_cases(str(MODELS))[name])
    torch.manual_seed(0)
    module = fn() if options.get("lazy_module") else fn
    torch.manual_seed(0)
    inputs = tuple(make_inputs())
    pt2 = os.path.join(keep, f"{name}.pt2")
    compile_s = None
    if not os.path.exists(pt2):
        with torch.no_grad():
            exported = torch.export.export(module, inputs)
            t0 = time.perf_counter()
            pt2 = torch._inductor.aoti_compile_and_package(exported, package_path=pt2)
            compile_s = time.perf_counter() - t0
    return pt2, module, inputs, compile_s


def main():
    import torch

    import wrapir

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dist", required=True, help="the folder with the wheel's packages (MODEL.wirpkg)")
    parser.add_argument("--models", default="resnet,gpt2")
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--keep-pt2", help="where AOTI's packages are kept (reused when present)")
    parser.add_argument(
        "--no-aoti",
        action="store_true",
        help="wrapir's rows only (where AOTI's packages do not load: no compile, no AOTI rows)",
    )
    args = parser.parse_args()
    if not wrapir.CUDA:
        sys.exit("this wrapir wheel was built without the cuda feature (maturin build --features cuda)")
    if not torch.cuda.is_available():
        sys.exit("no CUDA device")
    try:
        import numpy  # noqa: F401

        have_numpy = True
    except ImportError:
        have_numpy = False
    device = torch.cuda.get_device_name()
    keep = args.keep_pt2 or tempfile.mkdtemp(prefix="aoti-pt2-")
    os.makedirs(keep, exist_ok=True)
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        import_torch = cold("import time, torch\nprint(time.time(), 0, 0)", args.cold)[0]
        for name in [m for m in args.models.split(",") if m]:
            pkg = os.path.join(args.dist, f"{name}.wirpkg")
            if not os.path.exists(pkg):
                summary.append((name, f"skipped: {pkg} missing (see the build steps at the top)"))
                continue
            if args.no_aoti:
                pt2, module, dev_inputs, compile_s = None, None, None, None
            else:
                try:
                    pt2, module, dev_inputs, compile_s = aoti_package(name, keep)
                except Exception as e:  # a model whose packages (torchvision, transformers) are missing
                    summary.append((name, f"skipped: AOTI package: {type(e).__name__}: {e}"[:200]))
                    continue
            if compile_s is not None:
                print(f"{name}: AOTI package compiled in {compile_s:.1f} s", flush=True)
            host_inputs, expected, tol = bundle_inputs_and_expected(name)
            inputs_file = os.path.join(tmp, f"{name}.inputs.pt")
            torch.save(host_inputs, inputs_file)
            paths = {"pkg": pkg, "pt2": pt2, "inputs": inputs_file}
            rows = {}
            rows["wrapir (.wirpkg)"] = cold(CHILD_WRAPIR.format(**paths), args.cold)
            if have_numpy and len(host_inputs) == 1:
                npy = os.path.join(tmp, f"{name}.npy")
                numpy.save(npy, host_inputs[0].numpy())
                rows["wrapir (.wirpkg), NumPy, no torch"] = cold(CHILD_WRAPIR_NUMPY.format(npy=npy, **paths), args.cold)
            # AOTI's loader has crashed a fresh process (SIGSEGV in
            # aoti_load_package): the row says so, and AOTI is then not loaded
            # in this process (it would take the benchmark down with it).
            aoti_failed = "not run (--no-aoti)" if args.no_aoti else None
            try:
                if not args.no_aoti:
                    rows["AOTI (.pt2)"] = cold(CHILD_AOTI.format(**paths), args.cold)
            except subprocess.CalledProcessError as e:
                how = f"signal {-e.returncode}" if e.returncode < 0 else f"exit {e.returncode}"
                aoti_failed = f"a fresh process loading AOTI's package died ({how}); stderr: {(e.stderr or '')[-300:]}"
                print(f"{name}: {aoti_failed}", flush=True)
            # Printed now as well: an in-process failure below must not lose them.
            for runner, (total, load, first) in rows.items():
                print(f"{name}: {runner}: exec to first output {total * 1e3:.0f} ms, load {load * 1e3:.1f} ms, first call {first * 1e3:.2f} ms", flush=True)

            # PyTorch's cuDNN first, as in a process that ran torch's own
            # convolutions before loading wrapir's package (cuDNN is then
            # loaded from PyTorch's directory, not found by wrapir).
            torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4, device="cuda"), torch.ones(1, 1, 3, 3, device="cuda"))
            torch.cuda.synchronize()
            ours = wrapir.load(pkg, device="cuda")
            aoti = None if aoti_failed else torch._inductor.aoti_load_package(pt2)
            with torch.no_grad():
                got = ours(*host_inputs)
                for g, e in zip(got, expected):
                    torch.testing.assert_close(g, e, rtol=tol["rtol"], atol=tol["atol"])
                ours_dev_inputs = [x.cuda() for x in host_inputs]
                got_dev = ours(*ours_dev_inputs)
                for g, h in zip(got_dev, got):
                    assert g.device.type == "cuda" and torch.equal(g.cpu(), h), "device tensors differ from host tensors"
                calls = {
                    "wrapir (device tensors in and out)": (lambda *a: ours(*a), ours_dev_inputs),
                    "wrapir (host tensors in and out)": (lambda *a: ours(*a), host_inputs),
                }
                if aoti is not None:
                    want = as_list(module(*dev_inputs))
                    for g, e in zip(as_list(aoti(*dev_inputs)), want):
                        torch.testing.assert_close(g, e, rtol=2e-3, atol=2e-3)
                    calls["AOTI (device tensors in and out)"] = (lambda *a: aoti(*a), dev_inputs)
                    calls["AOTI (host tensors in and out)"] = (
                        lambda *a: [t.cpu() for t in as_list(aoti(*[x.cuda() for x in a]))],
                        [x.cpu() for x in dev_inputs],
                    )
                per = {k: per_call(fn, a, args.calls) for k, (fn, a) in calls.items()}
            summary.append((name, (rows, per, aoti_failed)))
            del ours, aoti, module

    print(f"\n## wrapir (Python) against aoti_load_package on {device}")
    print(f"torch {torch.__version__}; `import torch` alone: {import_torch * 1e3:.0f} ms (median of {args.cold})")
    for name, result in summary:
        if isinstance(result, str):
            print(f"\n{name}: {result}")
            continue
        rows, per, aoti_failed = result
        print(f"\n{name}: cold start, median of {args.cold} fresh processes")
        print("| runner | exec to first output | load | first call |")
        print("|---|---:|---:|---:|")
        for runner, (total, load, first) in rows.items():
            print(f"| {runner} | {total * 1e3:.0f} ms | {load * 1e3:.1f} ms | {first * 1e3:.2f} ms |")
        if aoti_failed:
            print(f"\nAOTI: {aoti_failed}")
        else:
            aoti_load = rows["AOTI (.pt2)"][1]
            ours_load = rows["wrapir (.wirpkg)"][1]
            print(f"\nload: AOTI / wrapir = {aoti_load / ours_load:.1f}x")
        print(f"\n{name}: per call, median of {args.calls} synchronised calls after 50 untimed")
        print("| runner | per call |")
        print("|---|---:|")
        for runner, t in per.items():
            print(f"| {runner} | {t * 1e6:.1f} us |")


if __name__ == "__main__":
    main()
