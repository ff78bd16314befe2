#!/usr/bin/env python3
"""The `wrapir_export.export` API on a CUDA machine, one line per way of compiling.

    python3 python/tests/gpu_api_smoke.py OUT_DIR [--case llama_bf16] [--fx --wrapir BIN]

Builds the case (default `llama_bf16`, a bf16 Llama-style model of `models.py`) and
exports it with the default compile, `mode="max-autotune"`, `"max-autotune-no-cudagraphs"`,
`options={"freezing": True}`, `dynamic=True`, and as a `torch.export` ExportedProgram;
a plain function (`x @ w + b`, relu) too. Prints `ok <how>: <kernels> kernels,
<warnings>` or `FAIL <how>: <error>`; with `--fx`, also runs `fx_module` on each bundle
(`check_fx_module.py`). Exits 1 when any failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--case", default="llama_bf16")
    ap.add_argument("--cases", default=os.path.join(REPO, "fixtures", "inductor", "models.py"))
    ap.add_argument("--fx", action="store_true", help="also check fx_module on every bundle")
    ap.add_argument("--wrapir", default=None)
    args = ap.parse_args(argv)

    import torch

    import wrapir_export
    from wrapir_export.cases import as_exported_program, load_cases, unpack_case

    build, make_inputs, kw, options = unpack_case(load_cases(args.cases)[args.case])

    def module():
        return build() if options.get("lazy_module") else build

    def fn(x, w, b):
        return torch.relu(x @ w + b)

    def fn_inputs():
        return [torch.randn(64, 32, device="cuda"), torch.randn(32, 48, device="cuda"),
                torch.randn(48, device="cuda")]

    runs = [
        ("function", lambda: (fn, fn_inputs, {})),
        ("function_max_autotune", lambda: (fn, fn_inputs, {"mode": "max-autotune"})),
        ("default", lambda: (module(), make_inputs, {})),
        ("max_autotune", lambda: (module(), make_inputs, {"mode": "max-autotune"})),
        ("max_autotune_no_cudagraphs", lambda: (module(), make_inputs, {"mode": "max-autotune-no-cudagraphs"})),
        ("freezing", lambda: (module(), make_inputs, {"options": {"freezing": True}})),
        ("dynamic", lambda: (module(), make_inputs, {"dynamic": True})),
        ("exported_program", lambda: (as_exported_program(torch, module(), make_inputs), None, {})),
        ("exported_program_max_autotune",
         lambda: (as_exported_program(torch, module(), make_inputs), None, {"mode": "max-autotune"})),
    ]
    failed = 0
    bundles = []
    for how, make in runs:
        path = os.path.join(args.out, f"{args.case}_{how}" if not how.startswith("function") else how)
        try:
            target, inputs, kwargs = make()
            r = wrapir_export.export(target, inputs, path, math=options.get("math"),
                                     tolerance=options.get("tolerance"), **kwargs)
            print(f"ok {how}: {r.kernels} kernels" + (f"; {'; '.join(r.warnings)}" if r.warnings else ""), flush=True)
            bundles.append(path)
        except wrapir_export.ExportError as e:
            failed += 1
            print(f"FAIL {how}: " + " | ".join(x.splitlines()[0][:300] for x in e.errors), flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {how}: {type(e).__name__}: {str(e).strip()[:300]}", flush=True)
            traceback.print_exc()
        finally:
            torch.cuda.empty_cache()
    print(f"summary: {len(runs) - failed} ok, {failed} failed exports")
    fx_failed = 0
    if args.fx and bundles:
        import check_fx_module

        fx_failed = check_fx_module.main(bundles + (["--wrapir", args.wrapir] if args.wrapir else []))
    return 1 if failed or fx_failed else 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
