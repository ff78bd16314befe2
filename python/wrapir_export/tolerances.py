"""Outputs, comparisons, tolerances and math modes.

The functions take the `torch` module as their first argument (the package imports
torch only when an export runs); the constants are plain data.
"""

from __future__ import annotations

import re

# The math-mode switches a case may set (`options["math"]`) and `bundle.json` records.
MATH_FLAGS = {
    "matmul_allow_tf32": ("cuda.matmul", "allow_tf32"),
    "cudnn_allow_tf32": ("cudnn", "allow_tf32"),
    "fp16_reduced_precision_reduction": ("cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    "bf16_reduced_precision_reduction": ("cuda.matmul", "allow_bf16_reduced_precision_reduction"),
}

# Eager comparison floor (the tolerance every bundle had before models); `same()`'s
# multiplier on eager's own error against float64 (torch._dynamo.utils.same: 2 for
# float32, 3 for float16/bfloat16); the compiled comparison's tolerance by dtype.
EAGER_FLOOR = 2e-2
FP64_MULTIPLIER = {"float16": 3.0, "bfloat16": 3.0}
COMPILED_TOLERANCE = {"float32": 1e-5, "float64": 1e-7, "float16": 1e-3, "bfloat16": 8e-3}
_PRECISION_ORDER = ["float64", "float32", "float16", "bfloat16"]


def sync(torch):
    """Waits for the GPU when CUDA is in use (a no-op without it)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def flatten_outputs(torch, out):
    import torch.utils._pytree as pytree

    leaves = pytree.tree_leaves(out)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def output_values(torch, out):
    """The outputs a bundle stores and compares, in output order: every tensor leaf, every
    integer leaf (a size returned next to a tensor: `x.shape[0]`, a Python int or bool) as
    a 0-d int64 tensor, and every float leaf (`x[1].item()`: Inductor returns the 0-d
    float64 tensor its kernel fills) as a 0-d float64 tensor. Returns (values, positions
    of the integers in values, problems): any other leaf (a string) is a problem naming
    its position."""
    import torch.utils._pytree as pytree

    values, ints, problems = [], [], []
    for k, x in enumerate(pytree.tree_leaves(out)):
        if isinstance(x, torch.Tensor):
            values.append(x)
        elif isinstance(x, int):
            ints.append(len(values))
            values.append(torch.tensor(int(x), dtype=torch.int64))
        elif isinstance(x, float):
            values.append(torch.tensor(x, dtype=torch.float64))
        else:
            problems.append(f"output leaf {k} is a {type(x).__name__} ({x!r}); bundles hold tensor "
                            "integer and float outputs only")
    return values, ints, problems


def _math_owner(torch, path):
    obj = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def math_modes(torch):
    return {k: bool(getattr(_math_owner(torch, o), a)) for k, (o, a) in MATH_FLAGS.items()}


def check_math(wanted):
    unknown = set(wanted or {}) - set(MATH_FLAGS)
    if unknown:
        raise ValueError(f"unknown math modes {sorted(unknown)} (known: {sorted(MATH_FLAGS)})")


class MathModes:
    """Sets a case's math modes for the whole export of the case, then restores them."""

    def __init__(self, torch, wanted):
        check_math(wanted)
        self.torch, self.wanted, self.saved = torch, dict(wanted or {}), None

    def __enter__(self):
        self.saved = math_modes(self.torch)
        for k, v in self.wanted.items():
            o, a = MATH_FLAGS[k]
            setattr(_math_owner(self.torch, o), a, bool(v))
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            o, a = MATH_FLAGS[k]
            setattr(_math_owner(self.torch, o), a, v)
        return False


def lowest_precision_name(dtype_names):
    """The least precise of floating dtype names (`float32`, ...), or None."""
    found = [d for d in dtype_names if d in _PRECISION_ORDER]
    return max(found, key=_PRECISION_ORDER.index) if found else None


def lowest_precision(torch, tensors):
    """The least precise floating dtype among tensors (as `torch.` less string), or None."""
    # A complex tensor counts as its parts' dtype (complex64: float32).
    parts = {torch.complex32: "float16", torch.complex64: "float32", torch.complex128: "float64"}
    return lowest_precision_name(
        [parts.get(t.dtype) or str(t.dtype).replace("torch.", "") for t in tensors
         if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())])


def max_errors(torch, got, want):
    """(max |got - want|, max |got - want| / |want| where |want| > 0) over floating outputs."""
    abs_err, rel_err = 0.0, 0.0
    for g, e in zip(got, want):
        if e.is_complex() and g.is_complex() and g.shape == e.shape:
            g, e = torch.view_as_real(g), torch.view_as_real(e)
        if not e.is_floating_point() or e.numel() == 0 or g.shape != e.shape:
            continue
        d = (g.double() - e.double()).abs()
        d = torch.where(g.isnan() & e.isnan(), torch.zeros_like(d), d).nan_to_num(nan=float("inf"))
        abs_err = max(abs_err, float(d.max()))
        nz = e.double().abs() > 0
        if bool(nz.any()):
            rel_err = max(rel_err, float((d[nz] / e.double().abs()[nz]).max()))
    return abs_err, rel_err


def reference_names(reference):
    """The names of a bundle's reference tensors (`expected.safetensors`,
    `compiled.safetensors`) in output order: `graph_out<k>` (the compiled graph's
    outputs) when present, else `out<k>`."""

    def ordered(prefix):
        keyed = []
        for name in reference:
            m = re.fullmatch(prefix + r"(\d+)", name)
            if m:
                keyed.append((int(m.group(1)), name))
        return [name for _, name in sorted(keyed)]

    return ordered("graph_out") or ordered("out")


def max_abs_error(torch, got, want):
    """max |got - want| of two non-empty tensors of one shape and dtype: floating ones
    in float64 (complex ones part by part; NaN against NaN is 0, NaN against a number
    inf), integers exactly, bools as the number of elements that differ."""
    if want.is_floating_point() or want.is_complex():
        a, b = (torch.view_as_real(got), torch.view_as_real(want)) if want.is_complex() else (got, want)
        d = (a.double() - b.double()).abs()
        d = torch.where(a.isnan() & b.isnan(), torch.zeros_like(d), d).nan_to_num(nan=float("inf"))
        return float(d.max())
    if want.dtype == torch.bool:
        return float((got != want).sum())
    return float((got.long() - want.long()).abs().max())


def close_failure(torch, got, want, tolerance):
    """Why `got` is not `want` (`torch.testing.assert_close`'s first three lines, joined),
    or None when it is: floating and complex tensors within `tolerance` (`rtol`, `atol`),
    other dtypes exactly; NaN matches NaN."""
    floating = want.is_floating_point() or want.is_complex()
    rtol, atol = (tolerance["rtol"], tolerance["atol"]) if floating else (0.0, 0.0)
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        return " ".join(line.strip() for line in str(e).splitlines()[:3] if line.strip())
    return None


def compare_outputs(torch, got, expected, tolerance, cast_int_scalars=False):
    """(ok, reason, max abs error) of a lowering's outputs `got` (tensors, or Python
    ints for sizes) against a bundle's reference tensors `expected` ([`reference_names`]
    order): floating outputs within `tolerance`, others exactly ([`close_failure`]).
    `cast_int_scalars`: a 0-d result compared with a 0-d non-floating reference of
    another dtype is cast to it (the FX module returns sizes as Python ints)."""
    names = reference_names(expected)
    if len(got) != len(names):
        return False, f"{len(got)} outputs, expected {len(names)} ({', '.join(names)})", None
    reasons = []
    max_error = None
    for i, (value, name) in enumerate(zip(got, names)):
        want = expected[name]
        if value is None:
            reasons.append(f"output {i} is None, expected {name} {tuple(want.shape)} {want.dtype}")
            continue
        if not isinstance(value, torch.Tensor):
            try:
                value = torch.tensor(int(value))
            except (TypeError, ValueError):
                reasons.append(f"output {i} is a {type(value).__name__}, not a tensor or int")
                continue
        value = value.detach().cpu()
        if tuple(value.shape) != tuple(want.shape):
            reasons.append(f"output {i}: shape {tuple(value.shape)}, expected {tuple(want.shape)}")
            continue
        if value.dtype != want.dtype:
            if not (cast_int_scalars and value.dim() == 0 and not want.is_floating_point()):
                reasons.append(f"output {i}: dtype {value.dtype}, expected {want.dtype}")
                continue
            value = value.to(want.dtype)
        if value.numel() > 0:
            err = max_abs_error(torch, value, want)
            max_error = err if max_error is None else max(max_error, err)
        failure = close_failure(torch, value, want, tolerance)
        if failure is not None:
            reasons.append(f"output {i} ({name}): {failure}")
    return not reasons, "; ".join(reasons), max_error


def float64_reference(torch, fn, inputs, is_module):
    """The case's outputs computed in float64 (module and floating inputs cast), or an
    error string when that cannot run."""
    import copy

    try:
        f64 = copy.deepcopy(fn).double() if is_module else fn
        args = [x.clone().double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                else (x.clone() if isinstance(x, torch.Tensor) else x) for x in inputs]
        with torch.no_grad():
            out = flatten_outputs(torch, f64(*args))
        sync(torch)
        del f64
        return out
    except Exception as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]


def tolerance_from_error(err, dtype, override=None):
    """(tolerance, basis) from eager's max abs error against float64 (None: no reference)."""
    tol = {"atol": EAGER_FLOOR, "rtol": EAGER_FLOOR}
    basis = {"floor": EAGER_FLOOR}
    if err is not None:
        mult = FP64_MULTIPLIER.get(dtype or "float32", 2.0)
        basis.update({"fp64_max_abs_error": err, "multiplier": mult})
        tol["atol"] = max(EAGER_FLOOR, float(f"{(1 + mult) * err:.3g}"))
    if override:
        tol.update({k: float(v) for k, v in override.items() if k in ("atol", "rtol")})
        basis["case_override"] = dict(override)
    return tol, basis


def eager_tolerance(torch, exp, ref64, override):
    """The tolerance for comparing a run of the compiled program with eager outputs.

    As in PyTorch's accuracy checks (`torch._dynamo.utils.same`, which the Dynamo
    benchmarks use with fp64 references), what a compiled result may differ by scales
    with how far eager itself is from a float64 run, which grows with the dtype's
    precision and the network's depth: atol = max(floor, (1 + multiplier) * max|eager
    - fp64|) (the compiled result may be `multiplier` times as far from fp64 as eager,
    on the other side), rtol = floor. Without a float64 reference the floor is used."""
    if isinstance(ref64, list) and len(ref64) == len(exp):
        err, _ = max_errors(torch, exp, ref64)
        tol, basis = tolerance_from_error(err, lowest_precision(torch, exp) or "float32", override)
    else:
        tol, basis = tolerance_from_error(None, None, None)
        if isinstance(ref64, str):
            basis["fp64_reference_error"] = ref64
        if override:
            tol.update({k: float(v) for k, v in override.items() if k in ("atol", "rtol")})
            basis["case_override"] = dict(override)
    return tol, basis


def compiled_tolerance_for(dtype):
    t = COMPILED_TOLERANCE.get(dtype or "float32", COMPILED_TOLERANCE["float32"])
    return {"atol": t, "rtol": t, "dtype": dtype or "float32"}


def compiled_tolerance(torch, tensors):
    return compiled_tolerance_for(lowest_precision(torch, tensors) or "float32")


def compare(torch, errors, what, got, exp, tol, label="output"):
    """Appends an error for each output of `got` not within `tol` of `exp` (`label`
    names each one in the message, with its position)."""
    if len(got) != len(exp):
        errors.append(f"{what}: {len(got)} tensors, expected {len(exp)}")
        return
    for k, (g, e) in enumerate(zip(got, exp)):
        if g.device != e.device:
            # An integer output (a host 0-d tensor) against a device tensor.
            g = g.to(e.device)
        if g.shape == e.shape and g.dtype == e.dtype and g.is_complex():
            # Complex outputs are compared part by part.
            g, e = torch.view_as_real(g), torch.view_as_real(e)
        if g.shape != e.shape or g.dtype != e.dtype:
            errors.append(f"{what}: {label} {k}: {tuple(g.shape)} {g.dtype}, expected {tuple(e.shape)} {e.dtype}")
        elif not torch.allclose(g.float(), e.float(), atol=tol["atol"], rtol=tol["rtol"], equal_nan=True):
            a, r = max_errors(torch, [g], [e])
            errors.append(f"{what}: {label} {k} differs beyond atol={tol['atol']:.3g} rtol={tol['rtol']:.3g}: "
                          f"max abs error {a:.3g}, max rel error {r:.3g}, max |expected| "
                          f"{float(e.float().abs().max()) if e.numel() else 0.0:.3g}")
