"""Case files and the driver that exports them (in one process, or sharded over several).

A case file defines `CASES = {name: (fn, make_inputs, compile_kwargs[, options])}`;
`options` (see `unpack_case`) may hold `lazy_module`, `math`, `tolerance` and `cpu_isa`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import traceback

CASE_OPTIONS = {"lazy_module", "math", "tolerance", "cpu_isa"}


def unpack_case(entry):
    """`(fn, make_inputs, compile_kwargs[, options])` -> the four, options defaulting to `{}`.

    Options: `"lazy_module": True` (`fn()` builds the module when the case is exported);
    `"math": {flag: bool}` (math modes of `MATH_FLAGS`, set for the whole export of the
    case); `"tolerance": {"atol": x, "rtol": y}` (overrides the eager tolerance);
    `"cpu_isa": "avx2"` (the vector ISA of its CPU kernels, `host_kernels.CPU_ISAS`: for
    programs Inductor generates only vectorised, such as FlexAttention's CPU template)."""
    if len(entry) == 3:
        fn, make_inputs, kw = entry
        return fn, make_inputs, kw, {}
    fn, make_inputs, kw, options = entry
    unknown = set(options) - CASE_OPTIONS
    if unknown:
        raise ValueError(f"unknown case options {sorted(unknown)} (known: {sorted(CASE_OPTIONS)})")
    return fn, make_inputs, kw, dict(options)


def load_cases(path):
    spec = importlib.util.spec_from_file_location("wrapir_inductor_cases", path)
    mod = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would: Dynamo looks up the module of the
    # functions it traces by name (FlexAttention's score_mod, traced even in eager).
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.CASES


def apply_overrides(kw, overrides):
    """A case's compile kwargs with the command line's `--mode` / `--dynamic` / `--option`
    overrides (`overrides`: a dict with `mode`, `dynamic`, `options`, each optional)."""
    kw = dict(kw or {})
    if not overrides:
        return kw
    if overrides.get("dynamic") is not None:
        kw["dynamic"] = overrides["dynamic"]
    if overrides.get("mode") is not None:
        kw["mode"] = overrides["mode"]
        kw.pop("options", None)
    if overrides.get("options"):
        opts = dict(kw.get("options") or {})
        opts.update(overrides["options"])
        kw["options"] = opts
        kw.pop("mode", None)
    return kw


def as_exported_program(torch, fn, make_inputs):
    """`torch.export.export` of a case (a function is wrapped in a module), on the
    inputs `make_inputs()` gives after `torch.manual_seed(0)` (as the export's own)."""
    if not isinstance(fn, torch.nn.Module):
        inner = fn

        class Function(torch.nn.Module):
            def forward(self, *args):
                return inner(*args)

        fn = Function()
    torch.manual_seed(0)
    inputs = tuple(make_inputs())
    with torch.no_grad():
        return torch.export.export(fn, inputs)


def export_case(name, fn, make_inputs, compile_kwargs, out_dir, options=None, progress=None, bundle=None,
                export_program=False):
    """Exports one case into `bundle` (default `out_dir/name`); returns its errors.
    `export_program`: compile the case through `torch.export.export(...)` first."""
    import torch

    from .exporter import as_module, export_bundle
    from .tolerances import MathModes

    options = dict(options or {})
    if options.get("lazy_module"):
        with MathModes(torch, options.get("math")):
            fn = fn()
    if export_program:
        if progress is not None:
            progress("torch.export", "the case as an ExportedProgram")
        with MathModes(torch, options.get("math")):
            fn = as_exported_program(torch, fn, make_inputs)
    fn, is_module, module_name = as_module(torch, fn)
    try:
        result = export_bundle(torch, name, fn, make_inputs, compile_kwargs, bundle or os.path.join(out_dir, name),
                               options, is_module=is_module, module_name=module_name, progress=progress)
        return result.errors
    finally:
        del fn


def _progress(name, quiet):
    if quiet:
        return None
    from .exporter import stderr_progress

    return stderr_progress(name)


def _record_failure(bundle, errors, tb=None):
    os.makedirs(bundle, exist_ok=True)
    if tb is not None:
        with open(os.path.join(bundle, "error.txt"), "w") as f:
            f.write(tb)
    with open(os.path.join(bundle, "errors.txt"), "w") as f:
        f.write("\n".join(errors) + "\n")


def run_one(cases, name, out_dir, overrides=None, quiet=False, bundle=None):
    """Exports one case; prints `ok <name>` or `FAIL <name>: <reasons>`; returns whether it failed."""
    bundle = bundle or os.path.join(out_dir, name)
    tb = None
    try:
        fn, make_inputs, kw, options = unpack_case(cases[name])
        if (overrides or {}).get("cpu_isa") is not None:
            options["cpu_isa"] = overrides["cpu_isa"]
        errors = export_case(name, fn, make_inputs, apply_overrides(kw, overrides), out_dir, options,
                             progress=_progress(name, quiet), bundle=bundle,
                             export_program=bool((overrides or {}).get("export_program")))
    except Exception as e:
        errors = [f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"]
        tb = traceback.format_exc()
    if errors:
        _record_failure(bundle, errors, tb)
        print(f"FAIL {name}: " + " | ".join(e.splitlines()[0][:300] for e in errors), flush=True)
        return True
    print(f"ok {name}", flush=True)
    return False


def run_shard(args, overrides=None):
    """Exports the cases of `args.cases` (all, or `args.only`) into `args.out`; returns
    how many failed."""
    cases = load_cases(args.cases)
    names = list(cases)
    if args.only:
        wanted = [n for n in args.only.split(",") if n]
        unknown = [n for n in wanted if n not in cases]
        for n in unknown:
            print(f"FAIL {n}: no such case", flush=True)
        names = [n for n in names if n in wanted]
    else:
        unknown = []
    failed = len(unknown)
    for name in names:
        failed += run_one(cases, name, args.out, overrides, quiet=getattr(args, "quiet", False))
    return failed


def case_names(args):
    cases = load_cases(args.cases)
    names = list(cases)
    if args.only:
        wanted = [n for n in args.only.split(",") if n]
        names = [n for n in names if n in wanted] + [n for n in wanted if n not in cases]
    return names


def package_parent():
    """The directory holding the `wrapir_export` package (for the shards' PYTHONPATH)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_jobs(args, passthrough):
    """Shards the cases over `args.jobs` processes (`python -m wrapir_export`, each with one
    compile thread); prints their `ok` / `FAIL` lines in case order, then a summary;
    returns the exit code. `passthrough`: extra command line arguments for every shard."""
    names = case_names(args)
    shards = [names[k::args.jobs] for k in range(args.jobs)]
    env = dict(os.environ)
    parent = package_parent()
    env["PYTHONPATH"] = parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    procs = []
    for shard in shards:
        if not shard:
            continue
        cmd = [sys.executable, "-m", "wrapir_export", "--cases", args.cases, "--out", args.out,
               "--only", ",".join(shard), *passthrough]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    lines = []
    for k, (p, shard) in enumerate(zip(procs, [s for s in shards if s])):
        out, err = p.communicate()
        got = [ln for ln in out.splitlines() if ln.startswith(("ok ", "FAIL "))]
        lines += got
        seen = {ln.split()[1].rstrip(":") for ln in got}
        for n in shard:
            if n not in seen:
                lines.append(f"FAIL {n}: exporter process died: {err.strip().splitlines()[-1] if err.strip() else p.returncode}")
        with open(os.path.join(args.out, f"shard{k}.log"), "w") as f:
            f.write(out + "\n--- stderr ---\n" + err)
    order = {n: k for k, n in enumerate(names)}
    lines.sort(key=lambda ln: order.get(ln.split()[1].rstrip(":"), 10 ** 6))
    for ln in lines:
        print(ln)
    ok = sum(ln.startswith("ok ") for ln in lines)
    print(f"summary: {ok} ok, {len(lines) - ok} failed, {len(lines)} cases")
    return 0 if ok == len(lines) else 1
