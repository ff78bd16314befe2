"""Kernel binaries and launch metadata: after the compiled program has run once (Triton
compiled and autotuned), each Triton kernel's chosen launcher gives its config, cubin,
PTX and Triton metadata; they are written under `kernels/` and become the kernel's
`backend` in program.json.

`grid_json`, `const_value`, `plain`, `name_call_args`, `triton_version`,
`launch_problems` and `launch_fields` work on plain data.

Triton 3.6 to 3.9 write the same launch fields (python/README.md, "Triton versions",
says what each release changed and what the exporter does about it): `launch_fields`
maps them onto the backend's `num_warps`, `num_stages`, `shared_mem`, `global_scratch`,
`profile_scratch` and `mangled_name`, and refuses (`Unconvertible`, naming the kernel,
the field and the Triton version) every launch feature wrapir's launcher does not do.
"""

from __future__ import annotations

import glob
import json
import os
import re

from .errors import Unconvertible
from .redact import redact


def read_file(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def write_file(path, data, mode="w"):
    with open(path, mode) as f:
        f.write(data)


def triton_cache_roots():
    roots = []
    env = os.environ.get("TRITON_CACHE_DIR")
    if env:
        roots.append(env)
    try:
        from torch._inductor.runtime.runtime_utils import triton_cache_dir

        roots.append(triton_cache_dir(0))
    except Exception:
        pass
    try:
        from torch._inductor.runtime.runtime_utils import cache_dir

        roots += glob.glob(os.path.join(cache_dir(), "triton", "*"))
    except Exception:
        pass
    roots.append(os.path.join(os.path.expanduser("~"), ".triton", "cache"))
    return [r for r in roots if os.path.isdir(r)]


def kernel_files(launcher, compile_result):
    """(metadata dict, cubin bytes, ptx text) of the launcher's compiled kernel."""
    kernel = getattr(compile_result, "kernel", None) if compile_result is not None else None
    meta, cubin, ptx = {}, None, None
    asm = getattr(kernel, "asm", None)
    if isinstance(asm, dict):
        cubin = asm.get("cubin")
        ptx = asm.get("ptx")
        md = getattr(kernel, "metadata", None)
        if md is not None:
            meta = md._asdict() if hasattr(md, "_asdict") else dict(vars(md))
    cubin_path = getattr(kernel, "cubin_path", None)
    cache_hash = getattr(launcher, "cache_hash", None)
    dirs = []
    if cubin_path:
        dirs.append(os.path.dirname(cubin_path))
    if cache_hash:
        for root in triton_cache_roots():
            d = os.path.join(root, cache_hash)
            if os.path.isdir(d):
                dirs.append(d)
    for d in dirs:
        for f in sorted(os.listdir(d)):
            p = os.path.join(d, f)
            if f.endswith(".cubin") and cubin is None:
                cubin = read_file(p, "rb")
            elif f.endswith(".ptx") and ptx is None:
                ptx = read_file(p)
            elif f.endswith(".json") and not f.startswith("__grp__") and not meta:
                try:
                    meta = json.loads(read_file(p))
                except Exception:
                    pass
    if not meta and kernel is not None:
        for attr in ("name", "num_warps", "shared", "num_stages"):
            if hasattr(kernel, attr):
                meta[attr] = getattr(kernel, attr)
        # A StaticallyLaunchedCudaKernel (torch/_inductor/runtime/static_triton_launcher.py)
        # keeps the scratch sizes from PyTorch 2.15 on (`global_scratch_size`,
        # `profile_scratch_size`); 2.11-2.14 keep only whether the kernel takes the
        # argument (`has_global_scratch`, `has_profile_scratch`) and refused a size above 0.
        for key, flag in (("global_scratch_size", "has_global_scratch"),
                          ("profile_scratch_size", "has_profile_scratch")):
            size = getattr(kernel, key, None)
            if size is None and getattr(kernel, flag, None) is True:
                size = 0
            if isinstance(size, int):
                meta[key] = size
    return meta, cubin, ptx


# The Triton releases whose CUDA launch metadata and launcher were read for this
# exporter (PyTorch 2.11: 3.6.0, 2.12 and 2.13: 3.7.1, 2.14: 3.8.0, 2.15: 3.9.0).
KNOWN_TRITON = ((3, 6), (3, 7), (3, 8), (3, 9))

# Triton 3.8+'s driver.c `_launch` adds the CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE
# launch attribute (sm_107's oversized shared memory) above this many bytes of dynamic
# shared memory (the shared memory of an sm_90 / sm_100 SM; a block opts in to 227 KiB).
MAX_PLAIN_SHARED = 228 * 1024

# Scratch alignment wrapir's allocations give (cuMemAlloc and the prepared arena: 256).
MAX_SCRATCH_ALIGN = 256


def parse_version(text):
    """(major, minor) of a version string such as `3.8.0` or `3.9.0+git1234`; None if
    it has none."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(text)) if text is not None else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def triton_version(meta, running=None):
    """(version tuple or None, text) of the Triton that compiled a kernel: the
    metadata's `triton_version` (3.6-3.9's `compile` writes it), else `running`
    (the exporting process's `triton.__version__`, for metadata rebuilt from a
    launcher object)."""
    text = meta.get("triton_version") if isinstance(meta, dict) else None
    if text is None and running is not None:
        text = f"{running} (the running Triton; the metadata has no triton_version)"
        return parse_version(running), text
    if text is None:
        return None, "of unknown version"
    return parse_version(text), str(text)


def instrumentation_modes(meta, version):
    """The sanitizers/instrumentation a kernel was compiled with. Triton 3.9 reads
    `instrumentation_mode` as a comma-separated list (`triton/_instrumentation.py`
    `is_enabled`); 3.6-3.8 test substrings (`"gsan" in mode`)."""
    mode = meta.get("instrumentation_mode") or ""
    if not isinstance(mode, str):
        return set()
    if version is not None and version >= (3, 9):
        return {m.strip() for m in mode.split(",") if m.strip()}
    return {m for m in ("consan", "iisan", "fpsan", "gsan") if m in mode}


def launch_problems(meta, signature=None, version=None):
    """[(field, why)] for every launch feature in Triton metadata `meta` (and kernel
    `signature`) that wrapir's launcher (a plain cuLaunchKernel of grid x 32*num_warps
    threads, `shared` bytes of dynamic shared memory, the kernel's arguments, then the
    global and profile scratch pointers) cannot honour. Empty when it can."""
    out = []
    if version is not None and version > KNOWN_TRITON[-1]:
        out.append(("triton_version", f"Triton {version[0]}.{version[1]} is newer than the releases whose launcher "
                                      f"this exporter was checked against (3.6-3.9); its launch arguments may differ"))
    if meta.get("launch_cooperative_grid"):
        out.append(("launch_cooperative_grid", "the kernel needs a cooperative launch "
                                               "(CU_LAUNCH_ATTRIBUTE_COOPERATIVE), which wrapir's launcher does not do"))
    if meta.get("launch_pdl"):
        out.append(("launch_pdl", "the kernel needs programmatic dependent launch "
                                  "(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), which wrapir's launcher "
                                  "does not do"))
    num_ctas = meta.get("num_ctas", 1)
    if num_ctas is not None and int(num_ctas) != 1:
        out.append(("num_ctas", f"num_ctas = {num_ctas} needs a thread-block-cluster launch "
                                f"(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION); wrapir's launcher launches 1 CTA per block"))
    cluster = meta.get("cluster_dims")
    if cluster is not None and any(int(c) != 1 for c in cluster):
        out.append(("cluster_dims", f"cluster_dims = {list(cluster)} needs a thread-block-cluster launch, "
                                    f"which wrapir's launcher does not do"))
    warp = meta.get("warp_size")
    if warp is not None and int(warp) != 32:
        out.append(("warp_size", f"warp_size = {warp}; wrapir's launcher launches 32 * num_warps threads"))
    if meta.get("tensordesc_meta"):
        out.append(("tensordesc_meta", "the kernel takes TMA tensor descriptors (CUtensorMap arguments the launcher "
                                       "must build per call), which wrapir's launcher cannot pass"))
    for p, t in (signature or {}).items():
        t = str(t)
        if t == "nvTmaDesc" or t.startswith("tensordesc"):
            out.append(("signature", f"parameter `{p}` has type {t} (a TMA tensor descriptor, which the launcher "
                                     f"expands into several arguments); wrapir's launcher cannot pass it"))
    shared = meta.get("shared")
    if shared is not None and int(shared) > MAX_PLAIN_SHARED:
        out.append(("shared", f"shared = {shared} bytes is over the {MAX_PLAIN_SHARED} a plain launch can have "
                              f"(Triton 3.8+ launches it with CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE)"))
    modes = instrumentation_modes(meta, version)
    if "gsan" in modes:
        extra = ("`_gsan_globals_ptr`, `_gsan_launch_table_ptr`, `_gsan_launch_index`"
                 if version is None or version >= (3, 9) else "`_gsan_globals_ptr`")
        out.append(("instrumentation_mode", f"instrumentation_mode {meta.get('instrumentation_mode')!r} (GSan): "
                                            f"Triton's launcher appends {extra} to the kernel's arguments and keeps "
                                            f"the sanitizer's device state, which wrapir's launcher does not"))
    for key in ("global_scratch_align", "profile_scratch_align"):
        align = meta.get(key)
        if align is not None and int(align) > MAX_SCRATCH_ALIGN:
            out.append((key, f"{key} = {align} is over the {MAX_SCRATCH_ALIGN}-byte alignment of wrapir's "
                             f"scratch allocations"))
    return out


def launch_fields(name, meta, defaults=None, signature=None, running=None):
    """The backend's launch fields from a kernel's Triton metadata: `num_warps`,
    `num_stages`, `shared_mem`, `global_scratch` and `profile_scratch` (bytes per CTA;
    present when the kernel takes the argument) and `mangled_name` (when known).
    `defaults` gives `num_warps`, `num_stages` and `shared` where the metadata lacks
    them (the launcher's config). Raises `Unconvertible` naming the kernel, the field
    and the Triton version for a launch feature wrapir cannot honour."""
    defaults = defaults or {}
    version, vtext = triton_version(meta, running)
    problems = launch_problems(meta, signature, version)
    # Triton 3.6-3.9's launchers always pass both scratch pointers after the kernel's
    # arguments (3.6: the generated C `params` list, 3.7+: driver.c `launchKernel`,
    # "+ 2 for global & profile scratch"), so their sizes must be known.
    always_scratch = version is not None and version >= (3, 6)
    if always_scratch:
        for key in ("global_scratch_size", "profile_scratch_size"):
            if key not in meta:
                problems.append((key, f"the metadata has no `{key}`; Triton {version[0]}.{version[1]}'s launcher "
                                      f"always passes this scratch pointer, and its size is unknown"))
    if problems:
        raise Unconvertible("; ".join(f"kernel {name}: `{field}` (Triton {vtext}): {why}"
                                      for field, why in problems))
    fields = {
        "num_warps": int(meta.get("num_warps", defaults.get("num_warps"))),
        "num_stages": int(meta.get("num_stages", defaults.get("num_stages"))),
        "shared_mem": int(meta.get("shared", defaults.get("shared", 0)) or 0),
    }
    for key, jkey in (("global_scratch_size", "global_scratch"), ("profile_scratch_size", "profile_scratch")):
        if meta.get(key) is not None:
            fields[jkey] = int(meta[key])
        elif always_scratch:
            # 3.6 and 3.7 read the size as `get_int_attr(...)`, None when the module has
            # no such attribute; 3.8 made it `... or 0`. Either way the argument exists.
            fields[jkey] = 0
    if meta.get("name"):
        fields["mangled_name"] = meta["name"]
    return fields


def running_triton_version():
    """The exporting process's `triton.__version__`, None without Triton."""
    try:
        import triton

        return getattr(triton, "__version__", None)
    except Exception:
        return None


def plain(v):
    """A value as plain JSON data (enum-like objects by their `value`, the rest by `str`)."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if hasattr(v, "value"):
        return plain(v.value)
    return str(v)


def const_value(v):
    v = plain(v)
    if isinstance(v, (list, dict)):
        raise Unconvertible(f"constant value {v!r} is not a scalar")
    return v


def grid_json(inductor_meta, launch_cfg=None):
    """The kernel's GRID JSON from its `inductor_meta`."""
    gt = inductor_meta.get("grid_type")
    if gt is None:
        raise Unconvertible("kernel has no grid_type in inductor_meta")
    if gt in ("Grid1D", "Grid2D", "Grid3D", "CooperativeReductionGrid", "SplitScanGrid", "FixedGrid"):
        return {"type": gt}
    if gt == "Grid2DWithYZOverflow":
        return {"type": gt, "max_y_grid": int(inductor_meta.get("max_y_grid", 65535))}
    if gt == "PrecomputedGrid":
        grids = []
        for entry in inductor_meta.get("precomputed_grids", []):
            py = entry.get("python")
            if py is None or len(py) != 3:
                raise Unconvertible(f"precomputed grid without three Python expressions: {entry!r}")
            grids.append({"config": {k: int(v) for k, v in entry.get("config", {}).items()},
                          "grid": [int(x) if re.fullmatch(r"-?\d+", str(x)) else str(x) for x in py]})
        return {"type": gt, "grids": grids}
    raise Unconvertible(f"grid type {gt}")


def merge_kernels(captures):
    """The kernels of every capture, by name: a kernel defined in one graph and called in
    another (a subgraph) gets both its source and its call's metadata."""
    kernels_all = {}
    for c in captures:
        for kn, kv in c.kernels.items():
            prev = kernels_all.get(kn)
            if prev is None:
                kernels_all[kn] = kv
            else:
                for key in ("_triton_meta", "_inductor_meta"):
                    if key in kv:
                        prev[key] = kv[key]
                if kv.get("source") and not prev.get("source"):
                    prev.update({k: v for k, v in kv.items() if k in ("source", "comments", "_kind")})
    return kernels_all


def fill_kernels(cap_kernels, modules, kdir_abs, errors):
    """Completes the kernel JSON from the compiled module's autotuners; writes binaries."""
    tuners = {}
    for mod in modules:
        for k, v in vars(mod).items():
            if hasattr(v, "launchers") and hasattr(v, "triton_meta"):
                tuners[k] = v
    out = {}
    for name, k in cap_kernels.items():
        kind = k.pop("_kind", "triton")
        tm = k.pop("_triton_meta", None)
        im = k.pop("_inductor_meta", None)
        if kind in ("cpp", "halide"):
            host = host_kernel(name, kind, k, kdir_abs, errors)
            if host is not None:
                out[name] = host
            continue
        if kind != "triton":
            errors.append(f"kernel {name}: {kind} kernels are not exported")
            continue
        tuner = tuners.get(name)
        if tuner is None:
            errors.append(f"kernel {name}: no compiled Triton kernel found in the wrapper module")
            continue
        try:
            tm = tuner.triton_meta or tm or {}
            im = tuner.inductor_meta or im or {}
            if not tuner.launchers:
                raise Unconvertible("the kernel never ran (no launcher)")
            launcher = tuner.launchers[0]
            cfg = launcher.config
            cr = None
            for c in getattr(tuner, "compile_results", []) or []:
                if c.config is cfg or repr(c.config) == repr(cfg):
                    cr = c
                    break
            meta, cubin, ptx = kernel_files(launcher, cr)
            backend = {
                "kind": "triton",
                "signature": {p: str(t) for p, t in tm.get("signature", {}).items()},
            }
            consts = {str(p): const_value(v) for p, v in (tm.get("constants") or {}).items()}
            if consts:
                backend["constants"] = consts
            kw = {str(a): int(b) for a, b in (cfg.kwargs or {}).items()}
            if kw:
                backend["config"] = kw
            backend["grid_type"] = grid_json(im, cfg)
            fields = launch_fields(
                name, meta, {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                             "shared": getattr(launcher, "shared", 0)},
                backend["signature"], None if "triton_version" in meta else running_triton_version())
            for key in ("num_warps", "num_stages", "shared_mem", "global_scratch", "profile_scratch"):
                if key in fields:
                    backend[key] = fields[key]
            extra = list(im.get("extra_launcher_args", []) or [])
            if extra:
                backend["extra_launcher_args"] = extra
            mangled = fields.get("mangled_name")
            if mangled:
                backend["mangled_name"] = mangled
            os.makedirs(kdir_abs, exist_ok=True)
            if cubin is not None:
                write_file(os.path.join(kdir_abs, f"{name}.cubin"), cubin, "wb")
                backend["cubin"] = f"kernels/{name}.cubin"
            else:
                errors.append(f"kernel {name}: cubin not found")
            if ptx is not None:
                write_file(os.path.join(kdir_abs, f"{name}.ptx"), redact(ptx))
            user = "user_autotune" in k.get("source", "") or "USER" in str(getattr(tuner, "heuristic_type", ""))
            if user:
                backend["user_defined"] = True
            k["backend"] = backend
            launch = {
                "kernel": name, "mangled_name": mangled, "num_warps": backend["num_warps"],
                "num_stages": backend["num_stages"], "shared_mem": backend["shared_mem"],
                "global_scratch": backend.get("global_scratch"), "profile_scratch": backend.get("profile_scratch"),
                "signature": backend["signature"], "constants": consts, "grid_type": backend["grid_type"],
                "config": kw, "extra_launcher_args": extra, "n_regs": getattr(launcher, "n_regs", None),
                "n_spills": getattr(launcher, "n_spills", None), "cubin": backend.get("cubin"),
                "ptx": f"kernels/{name}.ptx" if ptx is not None else None,
                "triton_metadata": json.loads(redact(json.dumps(plain(meta)))),
            }
            with open(os.path.join(kdir_abs, f"{name}.json"), "w") as f:
                json.dump(launch, f, indent=1)
            out[name] = {"name": name, "backend": backend, "source": k.get("source", ""),
                         **({"comments": k["comments"]} if k.get("comments") else {})}
        except Unconvertible as e:
            msg = str(e)
            errors.append(msg if msg.startswith(f"kernel {name}: ") else f"kernel {name}: {msg}")
        except Exception as e:
            errors.append(f"kernel {name}: exporter error {type(e).__name__}: {e}")
    return out


def host_kernel(name, kind, k, kdir_abs, errors):
    """program.json's entry of a C++ or Halide kernel, its host image compiled under
    `kdir_abs` (`host_kernels`); None (and an error) when it cannot be built."""
    from . import host_kernels as H

    body = k.pop("_body", "")
    try:
        if kind == "cpp":
            arg_types, source = H.parse_cpp_definition(body)
            H.build_cpp_kernel(name, source, arg_types, kdir_abs)
            backend = {"kind": "cpp", "arg_types": arg_types}
            if H.current_isa() != "baseline":
                backend["isa"] = H.current_isa()
        else:
            meta, source = H.parse_halide_definition(body)
            H.build_halide_kernel(name, meta, source, kdir_abs)
            backend = H.halide_backend_json(meta)
    except Unconvertible as e:
        errors.append(f"kernel {name}: {e}")
        return None
    except Exception as e:
        errors.append(f"kernel {name}: exporter error {type(e).__name__}: {e}")
        return None
    return {"name": name, "backend": backend, "source": redact(source.lstrip("\n")),
            **({"comments": k["comments"]} if k.get("comments") else {})}


def name_call_args(lines, kernels, notes):
    """Names each Triton call argument by its kernel parameter (Inductor's `call_args` order)."""
    for ln in lines:
        if ln.get("line") != "kernel_call" or ln["kernel"] not in kernels:
            continue
        be = kernels[ln["kernel"]]["backend"]
        if be.get("kind", "triton") != "triton":
            continue  # C++ and Halide kernels are called positionally
        sig = be["signature"]
        extra = be.get("extra_launcher_args", [])
        consts = be.get("constants", {})
        args = ln["args"]
        plain_params = [p for p, t in sig.items() if t != "constexpr"] + extra
        with_consts = [p for p, t in sig.items() if t != "constexpr" or p in consts] + extra
        if len(plain_params) == len(args):
            params = plain_params
        elif len(with_consts) == len(args):
            params = with_consts
            notes.append(f"{ln['kernel']}: call passes {len(args)} arguments; the signature has "
                         f"{len(plain_params)} non-constexpr parameters, the rest are constants typed constexpr")
        else:
            notes.append(f"{ln['kernel']}: call passes {len(args)} arguments for parameters {plain_params}")
            continue
        ln["args"] = [{"name": p, "value": a["value"]} for a, p in zip(args, params)]
