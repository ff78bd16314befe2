"""The `wrapir` Python package against `torch._inductor.aoti_load_package`
on the CPU, on the same model (`small_cnn` of fixtures/inductor/cases_cpu.py,
in eval mode, input 2x3x16x16 f32; wrapir runs its committed bundle
`fixtures/inductor/bundles_cpu/cpp/small_cnn`, exported from PyTorch 2.11).

    python benches/python_runtime.py [--cold N] [--calls N] [--pt2 PATH]

needs torch, the `wrapir` package (`pip install ./bindings/python`) and the
wrapir binary (`WRAPIR`, else target/debug/wrapir, to pack the bundle).

* Cold load: N fresh processes each (default 5), timed from just before the
  process is started to its first output (the child stamps the wall clock
  when the output is ready): `import torch`, the load, one call. Also the
  load and first call alone, as the child times them.
* Per call: in one process, the median host time of one call (inputs ready
  on the CPU, outputs back) over --calls calls (default 2000) after 50
  untimed ones, for eager PyTorch, `torch.compile` (Inductor's default and
  max-autotune-no-cudagraphs modes), the AOTI package and wrapir.

Prints one table; medians, not means.
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
BUNDLE = REPO / "fixtures" / "inductor" / "bundles_cpu" / "cpp" / "small_cnn"
sys.path.insert(0, str(REPO / "fixtures" / "inductor"))


def child(imports, load, call, read=None):
    """A child's script: after `import time, <imports>` (and `x = <read>`
    when given), it times `load` (the model, `m`) and the first `call`, and
    prints the wall-clock time after it, the load's seconds and the call's
    (what `cold` reads)."""
    x = "" if read is None else f"x = {read}\n"
    return f"""
import time, {imports}
{x}t0 = time.perf_counter()
m = {load}
t1 = time.perf_counter()
y = {call}
stamp = time.time()
print(stamp, t1 - t0, time.perf_counter() - t1)
"""


#: Each runtime's child script; `{path}`, `{pkg}` and `{pt2}` are filled in.
CHILD = {
    "wrapir (bundle directory)": child("torch, wrapir", "wrapir.load({path!r})", "m(torch.randn(2, 3, 16, 16))[0]"),
    "wrapir (.wirpkg)": child(
        "torch, wrapir, tempfile",
        "wrapir.load({pkg!r}, scratch_dir=tempfile.gettempdir())",
        "m(torch.randn(2, 3, 16, 16))[0]",
    ),
    "AOTI (.pt2)": child("torch", "torch._inductor.aoti_load_package({pt2!r})", "m(torch.randn(2, 3, 16, 16))"),
}


def model():
    import cases_cpu

    return cases_cpu.small_cnn().eval()


def cold(snippet, runs):
    """(median exec-to-first-output, median load, median first call) in seconds."""
    totals, loads, firsts = [], [], []
    for _ in range(runs):
        start = time.time()
        out = subprocess.run([sys.executable, "-c", snippet], check=True, capture_output=True, text=True)
        stamp, load, first = (float(v) for v in out.stdout.split()[-3:])
        totals.append(stamp - start)
        loads.append(load)
        firsts.append(first)
    return statistics.median(totals), statistics.median(loads), statistics.median(firsts)


def per_call(fn, x, calls):
    """Median seconds of one call of `fn(x)`."""
    for _ in range(50):
        fn(x)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    import torch

    import wrapir

    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pt2", help="the AOTI package: reused where it exists, else compiled and kept there")
    args = parser.parse_args()
    wrapir_cli = os.environ.get("WRAPIR") or str(REPO / "target" / "debug" / "wrapir")
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "small_cnn.wirpkg")
        subprocess.run([wrapir_cli, "pack", str(BUNDLE), "-o", pkg], check=True, capture_output=True)
        m = model()
        pt2 = args.pt2 or os.path.join(tmp, "small_cnn.pt2")
        if not os.path.exists(pt2):
            with torch.no_grad():
                exported = torch.export.export(m, (x,))
                t0 = time.perf_counter()
                pt2 = torch._inductor.aoti_compile_and_package(exported, package_path=pt2)
                compile_s = time.perf_counter() - t0
            print(f"AOTI package compiled in {compile_s:.1f} s")
        paths = {"path": str(BUNDLE), "pkg": pkg, "pt2": pt2}
        rows = []
        for name, snippet in CHILD.items():
            total, load, first = cold(snippet.format(**paths), args.cold)
            rows.append((name, total, load, first))
        import_torch = cold("import time, torch\nprint(time.time(), 0, 0)", args.cold)[0]
        print(f"\ncold start, median of {args.cold} fresh processes (`import torch` alone: {import_torch * 1e3:.0f} ms)")
        print(f"{'runner':28} {'exec to first output':>21} {'load':>10} {'first call':>11}")
        for name, total, load, first in rows:
            print(f"{name:28} {total * 1e3:18.0f} ms {load * 1e3:7.1f} ms {first * 1e3:8.2f} ms")

        aoti = torch._inductor.aoti_load_package(pt2)
        ours = wrapir.load(BUNDLE)
        with torch.no_grad():
            want = m(x)
            torch.testing.assert_close(ours(x)[0], want, rtol=2e-5, atol=2e-5)
            torch.testing.assert_close(aoti(x), want, rtol=2e-5, atol=2e-5)
            default = torch.compile(model())
            autotuned = torch.compile(model(), mode="max-autotune-no-cudagraphs")
            calls = [
                ("eager PyTorch", lambda t: m(t)),
                ("torch.compile (default)", lambda t: default(t)),
                ("torch.compile (max-autotune-no-cudagraphs)", lambda t: autotuned(t)),
                ("AOTI (aoti_load_package)", lambda t: aoti(t)),
                ("wrapir", lambda t: ours(t)),
            ]
            print(f"\nper call, median of {args.calls} calls after 50 untimed (one thread, torch threads {torch.get_num_threads()})")
            for name, fn in calls:
                print(f"{name:44} {per_call(fn, x, args.calls) * 1e6:9.1f} us")


if __name__ == "__main__":
    main()
