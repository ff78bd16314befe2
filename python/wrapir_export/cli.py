"""Export real Inductor wrapper programs as wrapir bundles (JSON `format_version` 1).

    python -m wrapir_export --cases FILE --out DIR [--only NAME[,NAME...]] [--jobs N]
        [--sizes small|realistic] [--mode MODE] [--dynamic] [--option KEY=VALUE ...]
        [--export-program] [--quiet]
    python -m wrapir_export --cases FILE --case NAME --bundle DIR [--mode ...] [--dynamic] [--option ...]

The first form exports every case of the case file (or those `--only` names) into
`DIR/<case>/`, in `--jobs` processes; the second exports one case into the bundle
directory `DIR` itself. `--mode`, `--dynamic` and `--option` override the cases' own
`torch.compile` arguments (`--mode max-autotune`, `--option freezing=True`); `--export-program` compiles each case through
`torch.export.export` (an ExportedProgram) first. Every case
prints `ok <case>` or `FAIL <case>: <reasons>` (progress goes to stderr); the exit
status is 1 when any case failed.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys

DESCRIPTION = "Export real Inductor wrapper programs as wrapir bundles (JSON `format_version` 1)."


def parse_option(text):
    """`KEY=VALUE` -> (key, value); VALUE is a Python literal when it parses as one."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def parser(prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="case name, or several separated by commas")
    ap.add_argument("--jobs", type=int, default=1, help="export in this many processes")
    ap.add_argument("--sizes", choices=["small", "realistic"], default=None,
                    help="model sizes for case files that have two (sets WRAPIR_CASE_SIZES; models.py)")
    ap.add_argument("--case", default=None, help="export this one case into --bundle")
    ap.add_argument("--bundle", default=None, help="the bundle directory for --case")
    ap.add_argument("--mode", default=None, help="torch.compile mode for every case (e.g. max-autotune)")
    ap.add_argument("--dynamic", action="store_true", default=None, help="torch.compile(dynamic=True) for every case")
    ap.add_argument("--option", action="append", type=parse_option, default=[], metavar="KEY=VALUE",
                    help="a torch.compile option for every case (repeatable; e.g. freezing=True)")
    ap.add_argument("--export-program", action="store_true",
                    help="compile every case through torch.export.export(...) (an ExportedProgram)")
    ap.add_argument("--cpu-isa", default=None, choices=["baseline", "avx2", "avx512"],
                    help="vector ISA of every CPU case's C++ kernels (default: the case's, else baseline "
                         "x86-64); the bundle records it and wrapir refuses it on a CPU without it")
    ap.add_argument("--quiet", action="store_true", help="do not print each export stage to stderr")
    return ap


def overrides_of(args):
    return {"mode": args.mode, "dynamic": args.dynamic, "options": dict(args.option),
            "export_program": args.export_program, "cpu_isa": args.cpu_isa}


def passthrough_of(args):
    out = []
    if args.mode is not None:
        out += ["--mode", args.mode]
    if args.dynamic:
        out.append("--dynamic")
    for k, v in args.option:
        out += ["--option", f"{k}={v!r}"]
    if args.export_program:
        out.append("--export-program")
    if args.cpu_isa is not None:
        out += ["--cpu-isa", args.cpu_isa]
    if args.quiet:
        out.append("--quiet")
    return out


def main(argv=None, prog=None):
    from . import cases as C

    ap = parser(prog)
    args = ap.parse_args(argv)
    if args.sizes:
        os.environ["WRAPIR_CASE_SIZES"] = args.sizes
    overrides = overrides_of(args)
    if args.case is not None or args.bundle is not None:
        if args.case is None or args.bundle is None:
            ap.error("--case and --bundle go together")
        all_cases = C.load_cases(args.cases)
        if args.case not in all_cases:
            print(f"FAIL {args.case}: no such case", flush=True)
            sys.exit(1)
        failed = C.run_one(all_cases, args.case, os.path.dirname(os.path.abspath(args.bundle)), overrides,
                           quiet=args.quiet, bundle=args.bundle)
        sys.exit(1 if failed else 0)
    if args.out is None:
        ap.error("the following arguments are required: --out (or --case with --bundle)")
    os.makedirs(args.out, exist_ok=True)
    if args.jobs <= 1:
        failed = C.run_shard(args, overrides)
        sys.exit(1 if failed else 0)
    sys.exit(C.run_jobs(args, passthrough_of(args)))


if __name__ == "__main__":
    main()
