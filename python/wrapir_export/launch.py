"""Launching a bundle's Triton kernels from their cubins, the way Inductor's own
generated Python does when it loads a kernel from a cubin: through PyTorch's static
CUDA launcher (`torch._C._StaticCudaLauncher`, what
`torch._inductor.runtime.static_cuda_launcher.StaticallyLaunchedCudaKernel` wraps):
`_load_kernel(cubin path, mangled name, shared memory bytes, device)` loads the
module, `_launch_kernel(function, grid x, y, z, num_warps, shared, arg types, args,
stream)` launches it. No Triton compile and no C compiler is involved.

The arguments follow the bundle's kernel metadata (`program.json` `backend`): every
signature parameter that is not `constexpr` and not a baked constant, in signature
order, then Triton's scratch pointers (global, profile) when the kernel has them: a
null pointer for a size of 0, else a fresh buffer of size x CTAs. `arg_types` and
`encode_scalar` are plain Python.
"""

from __future__ import annotations

import os
import struct

from .kernels import launch_problems, triton_version

# Triton signature type -> the static launcher's argument code (PyTorch's table,
# except 16-bit floats: passed as their bits, `H`, which is what the kernel reads;
# PyTorch 2.11-2.14's table says `f` for them, 2.15's the new codes `e` / `y`, and
# every one of them has `H` for u16).
TYPE_CODES = {
    "i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l",
    "u1": "I", "u8": "B", "u16": "H", "u32": "I", "u64": "K",
    "fp16": "H", "bf16": "H", "fp32": "f", "f32": "f", "fp64": "d",
}

_INT_RANGES = {
    "i1": (0, 1), "i8": (-2 ** 7, 2 ** 7 - 1), "i16": (-2 ** 15, 2 ** 15 - 1), "i32": (-2 ** 31, 2 ** 31 - 1),
    "i64": (-2 ** 63, 2 ** 63 - 1), "u1": (0, 1), "u8": (0, 2 ** 8 - 1), "u16": (0, 2 ** 16 - 1),
    "u32": (0, 2 ** 32 - 1), "u64": (0, 2 ** 64 - 1),
}


class LaunchError(Exception):
    """A kernel that cannot be launched from its cubin, or a call that does not fit it."""


def runtime_params(backend):
    """(name, signature type) of the parameters a launch passes, in signature order."""
    consts = backend.get("constants") or {}
    return [(p, t) for p, t in backend["signature"].items() if t != "constexpr" and p not in consts]


def arg_types(backend):
    """The static launcher's type string for the runtime parameters (without scratch)."""
    codes = []
    for p, t in runtime_params(backend):
        if t.startswith("*"):
            codes.append("O")
        elif t in TYPE_CODES:
            codes.append(TYPE_CODES[t])
        else:
            raise LaunchError(f"parameter `{p}` has type {t}, which the cubin launcher cannot pass")
    return "".join(codes)


def _bf16_bits(v):
    bits = struct.unpack("<I", struct.pack("<f", float(v)))[0]
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x007FFFFF:
        return 0x7FC0  # NaN
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def encode_scalar(ty, v, what="value"):
    """A scalar argument as the Python value the launcher's code for `ty` takes."""
    if isinstance(v, bool):
        v = int(v)
    if ty in _INT_RANGES:
        if isinstance(v, float):
            raise LaunchError(f"{what}: the float {v} for an integer parameter ({ty})")
        v = int(v)
        lo, hi = _INT_RANGES[ty]
        if not lo <= v <= hi:
            raise LaunchError(f"{what}: {v} does not fit {ty}")
        return v
    if ty == "fp16":
        return struct.unpack("<H", struct.pack("<e", float(v)))[0]
    if ty == "bf16":
        return _bf16_bits(v)
    if ty in ("fp32", "f32", "fp64"):
        return float(v)
    raise LaunchError(f"{what}: parameter type {ty}")


class TritonKernel:
    """One bundle kernel, callable as `kernel(grid, kwargs)`: `grid` is `[(x, y, z)]` (as
    FX's `triton_kernel_wrapper_mutation` takes it), `kwargs` every parameter by name.
    The cubin is loaded on first use on each device."""

    def __init__(self, name, backend, bundle_dir, triton_metadata=None):
        self.__name__ = name
        self.__qualname__ = name
        self.name = name
        self.backend = backend
        if backend.get("kind") != "triton":
            raise LaunchError(f"kernel {name} is not a Triton kernel")
        if not backend.get("cubin"):
            raise LaunchError(f"kernel {name} has no cubin in the bundle")
        self.cubin = os.path.join(os.fspath(bundle_dir), backend["cubin"])
        self.mangled = backend.get("mangled_name") or name
        self.num_warps = int(backend["num_warps"])
        self.shared = int(backend.get("shared_mem", 0))
        self.params = runtime_params(backend)
        self.types = arg_types(backend)
        # Triton's scratch parameters, present when its metadata has their sizes.
        self.scratch = [backend.get(k) for k in ("global_scratch", "profile_scratch")]
        self.scratch = [s for s in self.scratch if s is not None]
        # Launch features of the Triton metadata (any Triton 3.6-3.9 layout; see
        # `kernels.launch_problems`) that a plain launch cannot honour.
        meta = triton_metadata or {}
        version, vtext = triton_version(meta)
        problems = launch_problems(meta, None, version)
        if problems:
            raise LaunchError("; ".join(f"kernel {name}: `{field}` (Triton {vtext}): {why}"
                                        for field, why in problems))
        self.functions = {}

    def __repr__(self):
        return f"TritonKernel({self.name})"

    def function(self, device_index):
        f = self.functions.get(device_index)
        if f is None:
            import torch

            launcher = getattr(torch._C, "_StaticCudaLauncher", None)
            if launcher is None:
                raise LaunchError("this PyTorch has no torch._C._StaticCudaLauncher (a CUDA build is needed)")
            try:
                loaded = launcher._load_kernel(self.cubin, self.mangled, self.shared, device_index)
            except TypeError:
                # Older PyTorch: (path, name, shared), on the current device.
                loaded = launcher._load_kernel(self.cubin, self.mangled, self.shared)
            # (function, n_regs, n_spills), or (module, function, n_regs, n_spills).
            f = loaded[1] if len(loaded) == 4 else loaded[0]
            self.functions[device_index] = f
        return f

    def __call__(self, grid, kwargs):
        import torch

        if isinstance(grid, (list, tuple)) and len(grid) == 1 and isinstance(grid[0], (list, tuple)):
            grid = grid[0]
        gx, gy, gz = (int(g) for g in grid)
        for p, baked in (self.backend.get("constants") or {}).items():
            passed = kwargs.get(p)
            if isinstance(baked, int) and not isinstance(baked, bool) and isinstance(passed, int) \
                    and passed != baked:
                raise LaunchError(f"{self.name}: `{p}` = {passed}, but the kernel was compiled for {baked}")
        device = None
        args = []
        for (p, ty), code in zip(self.params, self.types):
            if p not in kwargs:
                raise LaunchError(f"{self.name}: no value for parameter `{p}`")
            v = kwargs[p]
            if code == "O":
                if isinstance(v, torch.Tensor):
                    if device is None and v.is_cuda:
                        device = v.device
                elif v is not None:
                    raise LaunchError(f"{self.name}: pointer parameter `{p}` given a {type(v).__name__}")
                args.append(v)
            else:
                if isinstance(v, torch.Tensor):
                    v = v.item()
                args.append(encode_scalar(ty, v, f"{self.name}: `{p}`"))
        if gx <= 0 or gy <= 0 or gz <= 0:
            return None
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        index = device.index if device.index is not None else torch.cuda.current_device()
        keep = []
        types = self.types
        for per_cta in self.scratch:
            types += "O"
            if per_cta == 0:
                args.append(None)
            else:
                buf = torch.empty(per_cta * gx * gy * gz, dtype=torch.uint8, device=device)
                keep.append(buf)
                args.append(buf)
        with torch.cuda.device(index):
            stream = torch.cuda.current_stream(index).cuda_stream
            torch._C._StaticCudaLauncher._launch_kernel(
                self.function(index), gx, gy, gz, self.num_warps, self.shared, types, tuple(args), stream)
        del keep  # freed in stream order after the launch
        return None
