#!/usr/bin/env python3
"""Compares freshly exported bundles with committed ones (plain Python, no torch).

    python3 python/tests/compare_bundles.py NEW_DIR OLD_DIR [--only a,b] [--strict]

For every case directory of NEW_DIR that OLD_DIR has too (or the `--only` ones):

* program.json must be equal after normalising what differs between machines and runs:
  hashes (hex strings of 16 and more digits, Inductor's `c<hash>` cache names) and
  `<cache>` paths in kernel sources and comments. Differences in what autotuning
  chose (a kernel's `config`, `num_warps`, `num_stages`, `shared_mem`, scratch sizes,
  `mangled_name`) are listed as `autotune` notes and fail only with `--strict`;
* inputs.safetensors, expected.safetensors, compiled.safetensors: the same tensor
  names, dtypes and shapes (and bit-equal inputs, else a note);
* bundle.json: the same graph inputs, user inputs, expected / compiled names, integer
  outputs, graph outputs, weights and weight names, compile arguments;
* kernels/: the same file names.

Prints `same <case>` or `DIFF <case>: <what>` (and notes), then a summary; exits 1
when any case differs or is missing from NEW_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from wrapir_export.safetensors import read_raw  # noqa: E402

HASH = re.compile(r"\b[0-9a-f]{16,}\b|\bc[a-z0-9]{20,}\b|<cache>[^\s'\"]*")
AUTOTUNE_KEYS = {"config", "num_warps", "num_stages", "shared_mem", "global_scratch", "profile_scratch",
                 "mangled_name"}
BUNDLE_KEYS = ["graph_inputs", "user_inputs", "expected", "compiled", "int_outputs", "graph_outputs", "weights",
               "weight_names", "compile_kwargs", "constants"]


def normalise(v):
    if isinstance(v, str):
        return HASH.sub("<hash>", v)
    if isinstance(v, list):
        return [normalise(x) for x in v]
    if isinstance(v, dict):
        return {k: normalise(x) for k, x in v.items()}
    return v


def diff(a, b, path, out, limit=20):
    """Appends (path, a, b) for each difference of two JSON values."""
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                out.append((f"{path}.{k}", a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                diff(a[k], b[k], f"{path}.{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((f"{path}[len]", len(a), len(b)))
        for k, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{k}]", out, limit)
    elif a != b:
        out.append((path, a, b))


def short(v):
    s = json.dumps(v) if not isinstance(v, str) else " ".join(v.split())
    return s if len(s) <= 80 else s[:77] + "..."


def tensors(path):
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        raw, _ = read_raw(f.read())
    return raw


def compare_case(new, old, strict):
    """(differences, notes) of one case."""
    diffs, notes = [], []
    pn = normalise(json.load(open(os.path.join(new, "program.json"))))
    po = normalise(json.load(open(os.path.join(old, "program.json"))))
    found = []
    diff(pn, po, "program", found, limit=200)
    for path, a, b in found:
        key = path.rsplit(".", 1)[-1].split("[")[0]
        in_backend = ".backend." in path or path.endswith(".backend")
        if in_backend and (key in AUTOTUNE_KEYS or ".config." in path or ".config[" in path):
            notes.append(f"autotune {path}: {short(a)} (was {short(b)})")
            if strict:
                diffs.append(f"{path}: {short(a)} != {short(b)}")
        else:
            diffs.append(f"{path}: {short(a)} != {short(b)}")
    for file in ("inputs.safetensors", "expected.safetensors", "compiled.safetensors"):
        tn, to = tensors(os.path.join(new, file)), tensors(os.path.join(old, file))
        if to is None:
            continue
        if tn is None:
            diffs.append(f"{file} missing")
            continue
        if list(tn) != list(to):
            diffs.append(f"{file}: names {list(tn)} != {list(to)}")
            continue
        for nm in tn:
            (dn, sn, bn), (do, so, bo) = tn[nm], to[nm]
            if (dn, sn) != (do, so):
                diffs.append(f"{file}: {nm} is {dn}{sn}, was {do}{so}")
            elif file == "inputs.safetensors" and bn != bo:
                notes.append(f"inputs.safetensors: {nm} has other values (same dtype and shape)")
    bn = json.load(open(os.path.join(new, "bundle.json")))
    bo = json.load(open(os.path.join(old, "bundle.json")))
    for k in BUNDLE_KEYS:
        if k in bo and bn.get(k) != bo.get(k):
            diffs.append(f"bundle.json {k}: {short(bn.get(k))} != {short(bo.get(k))}")
    for k in ("tolerance", "compiled_tolerance"):
        if k in bo and bn.get(k) != bo.get(k):
            notes.append(f"bundle.json {k}: {short(bn.get(k))} (was {short(bo.get(k))})")
    kn = set(os.listdir(os.path.join(new, "kernels"))) if os.path.isdir(os.path.join(new, "kernels")) else set()
    ko = set(os.listdir(os.path.join(old, "kernels"))) if os.path.isdir(os.path.join(old, "kernels")) else set()
    if kn != ko:
        diffs.append(f"kernels/: new has {sorted(kn - ko)}, lacks {sorted(ko - kn)}")
    return diffs, notes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new")
    ap.add_argument("old")
    ap.add_argument("--only", default=None, help="case names, separated by commas")
    ap.add_argument("--strict", action="store_true", help="autotuning differences fail too")
    args = ap.parse_args(argv)
    if args.only:
        cases = [c for c in args.only.split(",") if c]
    else:
        cases = sorted(c for c in os.listdir(args.new)
                       if os.path.isfile(os.path.join(args.new, c, "program.json"))
                       and os.path.isdir(os.path.join(args.old, c)))
    bad = 0
    for case in cases:
        new, old = os.path.join(args.new, case), os.path.join(args.old, case)
        if not os.path.isfile(os.path.join(new, "program.json")):
            bad += 1
            print(f"DIFF {case}: not exported (no program.json in {new})")
            continue
        if not os.path.isfile(os.path.join(old, "program.json")):
            bad += 1
            print(f"DIFF {case}: no committed bundle in {old}")
            continue
        diffs, notes = compare_case(new, old, args.strict)
        bad += bool(diffs)
        print(("DIFF " if diffs else "same ") + case + (": " + " | ".join(diffs[:8]) if diffs else ""))
        for n in notes[:8]:
            print(f"    note: {n}")
        if len(notes) > 8:
            print(f"    note: ... {len(notes) - 8} more")
    print(f"summary: {len(cases) - bad} same, {bad} differ, {len(cases)} cases")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
