"""`export_ranks()`: one program per rank of a real `torch.distributed` run.

A tensor-parallel model calls collectives (`torch.ops._c10d_functional.*`): Inductor
compiles each rank's graph on its own, and each rank's wrapper holds its own
collective calls. `export_ranks` starts one process per rank (`torch.multiprocessing`,
the `spawn` start method), joins them in a process group (`gloo` on the CPU, `nccl` on
GPUs: rank `r` uses `cuda:r`, and `make_inputs`' tensors are moved there), and has
every rank run `export()` on its own inputs,
so each rank's bundle is checked against that rank's eager run. It then writes the
layout the ranks ran under:

    OUT/rank0/, OUT/rank1/, ...   one bundle per rank (program.json, kernels, inputs, ...)
    OUT/ranks.json                {"format_version": 1, "world_size": N, "backend": ...,
                                   "ranks": ["rank0", ...], "groups": {"0": [0, 1, ...]}}

`groups` maps each process group's name (the string the wrapper passes, `'0'` for the
default group) to its global ranks. `fn` and `make_inputs` must be importable by name
(module-level functions): the rank processes are spawned, not forked.
"""

from __future__ import annotations

import json
import os
import socket

FORMAT_VERSION = 1
RANKS_FILE = "ranks.json"


def rank_dir(rank):
    """The bundle directory of `rank` inside an `export_ranks` output."""
    return f"rank{rank}"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_groups(dist):
    """{group name: [global ranks]} of every process group this process knows."""
    from torch.distributed import distributed_c10d as c10d

    groups = {}
    for pg, name in c10d._world.pg_names.items():
        groups[str(name)] = [int(r) for r in dist.get_process_group_ranks(pg)]
    return dict(sorted(groups.items()))


def layout(world_size, backend, groups):
    """The content of `ranks.json`."""
    return {
        "format_version": FORMAT_VERSION,
        "world_size": int(world_size),
        "backend": backend,
        "ranks": [rank_dir(r) for r in range(world_size)],
        "groups": groups,
    }


def _rank_main(rank, world_size, backend, port, fn, make_inputs, out_dir, name, export_kwargs, results):
    import torch
    import torch.distributed as dist

    from .exporter import export

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        inputs = make_inputs(rank, world_size)
        if backend == "nccl":
            # NCCL collectives take CUDA tensors: each rank's inputs on its own GPU.
            inputs = tuple(x.to(f"cuda:{rank}") if isinstance(x, torch.Tensor) else x for x in inputs)
        r = export(fn, inputs, os.path.join(out_dir, rank_dir(rank)), name=f"{name}_{rank_dir(rank)}",
                   raise_on_error=False, **export_kwargs)
        groups = process_groups(dist)
        results.put((rank, r.errors, r.warnings, groups))
    except BaseException as e:  # reported by the parent, which names the rank
        results.put((rank, [f"{type(e).__name__}: {e}"], [], {}))
    finally:
        dist.destroy_process_group()


class RanksResult:
    """What `export_ranks()` wrote: `path`, `world_size`, `groups`, and per rank its
    `errors` and `warnings` (lists indexed by rank)."""

    def __init__(self, path, world_size, groups, errors, warnings):
        self.path = path
        self.world_size = world_size
        self.groups = groups
        self.errors = errors
        self.warnings = warnings

    @property
    def ok(self):
        return not any(self.errors)

    def __repr__(self):
        failed = [r for r, e in enumerate(self.errors) if e]
        state = "ok" if not failed else f"ranks {failed} failed"
        return f"RanksResult(path={self.path!r}, world_size={self.world_size}, {state})"


def export_ranks(fn, make_inputs, out_dir, *, world_size=2, backend=None, name=None, timeout=1800,
                 **export_kwargs):
    """Exports `fn` once per rank of a `world_size`-process group: `make_inputs(rank,
    world_size)` gives each rank's example inputs; `export_kwargs` go to `export()`
    (`dynamic`, `mode`, `options`, ...). `backend` defaults to `nccl` when CUDA has
    `world_size` GPUs, else `gloo`. Returns a `RanksResult`; raises `ExportError` when a
    rank failed (naming the rank and its errors) or the ranks disagree on the groups."""
    import torch.multiprocessing as mp

    from .errors import ExportError

    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if backend is None:
        import torch

        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"
    name = name or getattr(fn, "__name__", "program")
    os.makedirs(out_dir, exist_ok=True)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main,
                         args=(r, world_size, backend, port, fn, make_inputs, out_dir, name, export_kwargs, results))
             for r in range(world_size)]
    for p in procs:
        p.start()
    errors = [[] for _ in range(world_size)]
    warnings = [[] for _ in range(world_size)]
    groups_seen = {}
    got = 0
    import queue

    while got < world_size:
        try:
            rank, errs, warns, groups = results.get(timeout=timeout)
        except queue.Empty:
            break
        errors[rank] = list(errs)
        warnings[rank] = list(warns)
        groups_seen[rank] = groups
        got += 1
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
    for r, p in enumerate(procs):
        if r not in groups_seen:
            errors[r].append(f"the rank process ended without a result (exit code {p.exitcode})")
    failed = [(r, e) for r, e in enumerate(errors) if e]
    if failed:
        raise ExportError([f"{rank_dir(r)}: {err}" for r, e in failed for err in e], path=out_dir)
    distinct = {json.dumps(g, sort_keys=True) for g in groups_seen.values()}
    if len(distinct) != 1:
        raise ExportError([f"the ranks report different process groups: {sorted(distinct)}"], path=out_dir)
    groups = groups_seen[0]
    with open(os.path.join(out_dir, RANKS_FILE), "w") as f:
        json.dump(layout(world_size, backend, groups), f, indent=1)
        f.write("\n")
    return RanksResult(out_dir, world_size, groups, errors, warnings)
