"""Refusing early: the extern ops of an exported program that a device cannot run.

An export succeeds whatever ops the program calls; the first run on a device that lacks
one (`wrapir run --device cpu` on an LSTM without `aten.mkldnn_rnn_layer`) is where the
user would learn it. After writing the bundle, the exporter asks wrapir itself
(`wrapir check BUNDLE --device D --no-translation`, whose `error in ...: the D backend
cannot run op OP: ...` lines name every such call by graph and line) and reports each op
once per device, with the calls that need it: as warnings (`ExportResult.warnings`), or
as errors when the caller asks (`unrunnable="error"`).

wrapir is found as `fx_module` finds it: the `wrapir=` argument, `$WRAPIR`, or `wrapir`
on PATH; without one the check is skipped and a warning says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

# wrapir check --device's line for an extern op call the device cannot run:
# error in graph main, line 2 `extern buf0 = ...`: the cpu backend cannot run op `aten._fft_r2c` (`...`): ...
CANNOT_RUN = re.compile(r"^error in (?P<at>.+?): the (?P<device>\w+) backend cannot run op `?(?P<op>[^`\s:]+)`?")

MODES = ("warn", "error", "off")


def find_wrapir(wrapir=None):
    return wrapir or os.environ.get("WRAPIR") or shutil.which("wrapir")


def default_devices(info):
    """The device the program was compiled for: `cpu` for a CPU program (bundle.json's
    `device` is `cpu`), else `cuda`."""
    return ("cpu",) if (info or {}).get("device") == "cpu" else ("cuda",)


def parse_unrunnable(text):
    """op -> the places (`main: line 12`) of its calls, from `wrapir check --device`'s output."""
    ops = {}
    for line in text.splitlines():
        m = CANNOT_RUN.match(line.strip())
        if m:
            # The place without the line's text (`graph main, line 2`).
            at = m.group("at").split(" `", 1)[0]
            ops.setdefault(m.group("op"), []).append(at)
    return ops


def describe(device, op, places):
    shown = "; ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
    return (f"the {device} backend cannot run extern op {op} ({len(places)} "
            f"call{'s' if len(places) != 1 else ''}: {shown}); `wrapir ops --device {device}` lists the ops it runs")


def check_bundle(bundle, devices, wrapir=None, timeout=600):
    """(messages, problems): one message per op a device cannot run; `problems` says why
    the check could not run (no wrapir binary, wrapir failing otherwise)."""
    exe = find_wrapir(wrapir)
    if not exe:
        return [], ["extern ops not checked against the devices: no wrapir binary (pass wrapir=PATH, set "
                    "WRAPIR, or put wrapir on PATH)"]
    messages, problems = [], []
    for device in devices:
        try:
            r = subprocess.run([exe, "check", os.fspath(bundle), "--device", device, "--no-translation"],
                               capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            problems.append(f"extern ops not checked against {device}: running {exe}: {e}")
            continue
        ops = parse_unrunnable(r.stdout)
        messages += [describe(device, op, places) for op, places in ops.items()]
        if r.returncode not in (0, 1) or (r.returncode == 1 and not ops and "cannot run" not in r.stdout):
            # Exit 1 without an unrunnable op: something else failed (the kernels, the program).
            tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or [""]
            problems.append(f"wrapir check --device {device} exited {r.returncode}: {tail[0][:300]}")
    return messages, problems
