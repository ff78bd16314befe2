#!/usr/bin/env python3
"""Runs `wrapir_export.fx_module` on bundles and compares with their references (GPU machine).

    python3 python/tests/check_fx_module.py [--wrapir BIN | --lowered DIR] BUNDLE...

For each bundle directory the FX lowering (`wrapir lower BUNDLE --target fx`, run with
`--wrapir BIN` / $WRAPIR / `wrapir` on PATH, or read from `DIR/<case>.fx.py` with
`--lowered`) becomes a torch.fx.GraphModule (Triton kernels launched from the bundle's
cubins, extern ops as ATen calls), which is called on the bundle's inputs. Its outputs
are compared with `expected.safetensors` (eager) within the bundle's `tolerance`
(integers and other non-floating outputs exactly); a bundle with a `cuda_rng` state
(in-graph random numbers) starts from that state and may match `compiled.safetensors`
(Inductor's outputs) within `compiled_tolerance` instead.

Prints `ok <case>` or `FAIL <case>: <reason>` per bundle, then a summary; exits 1 when
any bundle failed. Needs PyTorch with CUDA; not wrapir itself when `--lowered` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from wrapir_export.tolerances import compare_outputs  # noqa: E402


def check(bundle, args):
    import torch

    from wrapir_export import fx_module, load_inputs
    from wrapir_export.bundle import set_cuda_rng_state
    from wrapir_export.safetensors import load_safetensors

    case = os.path.basename(os.path.normpath(bundle))
    meta = json.load(open(os.path.join(bundle, "bundle.json")))
    code = None
    if args.lowered:
        path = os.path.join(args.lowered, f"{case}.fx.py")
        if not os.path.exists(path):
            return "FAIL", f"no {path}", None
        code = open(path).read()
    stage = "build"
    try:
        from wrapir_export.bundle import import_op_libraries

        # The libraries that define the program's custom ops (bundle.json's `op_libraries`).
        import_op_libraries(meta)
        gm = fx_module(bundle, wrapir=args.wrapir, code=code)
        stage = "inputs"
        inputs = load_inputs(bundle)
        if meta.get("cuda_rng"):
            set_cuda_rng_state(torch, meta["cuda_rng"])
        stage = "call"
        with torch.no_grad():
            out = gm(*inputs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as e:  # any failure is the finding
        first = (str(e).strip().splitlines() or [""])[0]
        if args.verbose:
            traceback.print_exc()
        return "FAIL", f"{stage}: {type(e).__name__}: {first}"[:400], None
    got = list(out) if isinstance(out, (list, tuple)) else [out]
    tol = meta.get("tolerance") or {"atol": 2e-2, "rtol": 2e-2}
    expected = load_safetensors(os.path.join(bundle, "expected.safetensors"))
    ok, reason, err = compare_outputs(torch, got, expected, tol, cast_int_scalars=True)
    compiled_path = os.path.join(bundle, "compiled.safetensors")
    if not ok and meta.get("cuda_rng") and os.path.exists(compiled_path):
        ctol = meta.get("compiled_tolerance") or tol
        ok2, reason2, err2 = compare_outputs(torch, got, load_safetensors(compiled_path), ctol, cast_int_scalars=True)
        if ok2:
            return "ok", "matches compiled.safetensors (in-graph random numbers)", err2
        reason += f"; against compiled.safetensors: {reason2}"
    return ("ok" if ok else "FAIL"), reason, err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+")
    ap.add_argument("--wrapir", help="the wrapir binary (default: $WRAPIR, else wrapir on PATH)")
    ap.add_argument("--lowered", help="directory of <case>.fx.py printouts (wrapir lower --target fx)")
    ap.add_argument("--verbose", action="store_true", help="print tracebacks")
    args = ap.parse_args(argv)
    failed = 0
    for b in args.bundles:
        status, reason, err = check(b, args)
        case = os.path.basename(os.path.normpath(b))
        failed += status != "ok"
        line = f"{status} {case}" + (f" (max abs error {err:.3g})" if err is not None else "")
        print(line + (f": {reason}" if reason else ""), flush=True)
    print(f"summary: {len(args.bundles) - failed} ok, {failed} failed, {len(args.bundles)} bundles")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
