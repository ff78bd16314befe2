"""`export()`: one function, `nn.Module` or `torch.export` `ExportedProgram` -> one bundle.

Stages (each printed as it starts): inputs and the eager reference run, tracing
(Dynamo), compiling (Inductor), capturing (the Wrapper IR of the kept graph), running
the compiled program and checking it, Inductor's C++ wrapper, writing.

An `ExportedProgram` is compiled through `ep.module()` with `torch.compile` (the same
Python wrapper code generator, so the same capture): its parameters and buffers reach
Inductor's `call` as graph inputs, as a module's do, and become the bundle's weights
(`options={"freezing": True}` folds them into program constants instead, stored by
name in `inputs.safetensors`). AOTInductor's own route (`aoti_compile_and_package`)
generates the C++ wrapper only, which this capture does not see.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys

from . import bundle as B
from . import cpu_templates as CT
from . import device_check as D
from . import mutations as M
from . import names as N
from . import upstream_fixes as UF
from .capture import SESSION, install
from .errors import ExportError
from .tolerances import (MathModes, check_math, compare, compiled_tolerance, eager_tolerance, flatten_outputs,
                         float64_reference, math_modes, output_values, sync)


# Inductor settings of every export that make its CPU kernels portable host images
# (`host_kernels`): no C++ vectorisation (its ISA would be the exporting machine's) unless the
# export names a vector ISA (`cpu_isa`, which then sets `cpp.simdlen`), one thread (no OpenMP
# runtime to load), Halide kernels for the baseline x86-64 target. They do not touch CUDA
# programs.
HOST_CONFIG = {"cpp.simdlen": 0, "cpp.threads": 1, "halide.cpu_target": "x86-64-linux"}


class ExportResult:
    """What `export()` wrote: `path` (the bundle directory), `name`, `kernels` (how many
    Triton kernels program.json defines), `warnings` (conversion notes, wrappers not
    kept), `errors` (empty unless `raise_on_error=False` and the export failed), and
    `info` (bundle.json's content, None when it was not written)."""

    def __init__(self, path, name, kernels, warnings, errors, info):
        self.path = path
        self.name = name
        self.kernels = kernels
        self.warnings = list(warnings)
        self.errors = list(errors)
        self.info = info

    @property
    def ok(self):
        return not self.errors

    def __repr__(self):
        state = "ok" if self.ok else f"{len(self.errors)} errors"
        return (f"ExportResult(path={self.path!r}, kernels={self.kernels}, warnings={len(self.warnings)}, "
                f"{state})")


def stderr_progress(name):
    def progress(stage, detail=""):
        print(f"wrapir_export: {name}: {stage}" + (f" ({detail})" if detail else ""), file=sys.stderr, flush=True)

    return progress


def compile_kwargs_for(dynamic=False, mode=None, options=None, compile_kwargs=None):
    """torch.compile's keyword arguments: `compile_kwargs` plus `dynamic` (only when not
    False, so that a default export compiles as `torch.compile(fn)` does), `mode`,
    `options`."""
    kw = dict(compile_kwargs or {})
    if dynamic is not False:
        kw["dynamic"] = dynamic
    if mode is not None:
        kw["mode"] = mode
    if options:
        kw["options"] = dict(options)
    if kw.get("mode") is not None and kw.get("options"):
        raise ValueError("torch.compile takes `mode` or `options`, not both")
    backend = kw.get("backend", "inductor")
    if backend != "inductor":
        raise ValueError(f"the exporter captures Inductor's wrapper; backend={backend!r} is not Inductor")
    return kw


def uses_cudagraphs(torch, compile_kwargs):
    """Whether this compile runs with Inductor's CUDA graphs (`mode="max-autotune"`,
    `"reduce-overhead"`, or `triton.cudagraphs` in `options`)."""
    from torch._inductor import config as icfg

    cg = bool(icfg.triton.cudagraphs)
    mode = compile_kwargs.get("mode")
    if mode is not None:
        from torch._inductor import list_mode_options

        cg = bool(list_mode_options(mode, compile_kwargs.get("dynamic")).get("triton.cudagraphs", cg))
    opts = compile_kwargs.get("options") or {}
    if "triton.cudagraphs" in opts:
        cg = bool(opts["triton.cudagraphs"])
    return cg


def without_cudagraphs(torch, compile_kwargs):
    """`compile_kwargs` with Inductor's CUDA graphs turned off and everything else the
    same: `mode="max-autotune"` becomes that mode's options with `triton.cudagraphs`
    False. CUDA graphs wrap the compiled call at run time (wrapir replays its own);
    the kernels, autotuning and wrapper lines do not depend on them, and recording
    them during the export's capture fails ("tensors in the cudagraph pool not tracked
    as outputs")."""
    kw = dict(compile_kwargs)
    mode = kw.pop("mode", None)
    opts = {}
    if mode is not None:
        from torch._inductor import list_mode_options

        opts.update(list_mode_options(mode, kw.get("dynamic")))
    opts.update(kw.get("options") or {})
    opts["triton.cudagraphs"] = False
    kw["options"] = opts
    return kw


def as_module(torch, fn):
    """(callable, is_module, module class name): an ExportedProgram becomes `ep.module()`."""
    if isinstance(fn, torch.export.ExportedProgram):
        return fn.module(), True, "ExportedProgram"
    if isinstance(fn, torch.nn.Module):
        return fn, True, type(fn).__name__
    return fn, False, None


def set_eval(module):
    try:
        module.eval()
    except (NotImplementedError, RuntimeError):
        # An ExportedProgram's module refuses train()/eval(); it is exported as traced.
        pass


def export(fn_or_module, example_inputs, out_path, *, dynamic=False, mode=None, options=None, name=None,
           compile_kwargs=None, math=None, tolerance=None, progress=True, raise_on_error=True,
           capture_devices=("cuda", "cpu"), unrunnable="warn", devices=None, wrapir=None, cpu_isa="baseline"):
    """Exports `fn_or_module` compiled by Inductor as a wrapir bundle in `out_path`.

    `fn_or_module`: a function, an `nn.Module` (run in inference mode: `eval()`,
    `torch.no_grad()`; its parameters and buffers become the bundle's weights) or a
    `torch.export.ExportedProgram` (compiled through `ep.module()`).
    `example_inputs`: the positional inputs (a sequence of tensors and ints), or a
    function returning them (called after `torch.manual_seed(0)`); None for an
    ExportedProgram uses its own example inputs.
    `dynamic`, `mode`, `options`: as `torch.compile`'s (e.g. `mode="max-autotune"`,
    `options={"freezing": True}`); `compile_kwargs` adds others.
    `math`: math modes to set while exporting (`matmul_allow_tf32`, ...);
    `tolerance`: `{"atol", "rtol"}` replacing the computed eager tolerance.
    `cpu_isa`: the vector ISA of a CPU program's C++ kernels (`"baseline"`: x86-64 without
    vectorisation, runs on any x86-64 CPU; `"avx2"`, `"avx512"`: Inductor vectorises for it,
    program.json records it, and wrapir refuses to load the kernels on a CPU without it).
    `progress`: print each stage to stderr (or a callable(stage, detail)).
    `unrunnable`: what an extern op a device cannot run is (`device_check.py`): `"warn"`
    (a warning naming the op and its calls), `"error"` (the export fails), or `"off"`;
    `devices`: the devices checked (default: the one the program was compiled for,
    `cpu` or `cuda`); `wrapir`: the wrapir binary that checks (else $WRAPIR or PATH).

    Returns an ExportResult; raises ExportError (naming every line or op that could not
    be expressed) when the export fails, unless `raise_on_error=False`.
    """
    import torch

    kw = compile_kwargs_for(dynamic, mode, options, compile_kwargs)
    check_math(math)
    out_path = os.fspath(out_path)
    name = name or os.path.basename(os.path.normpath(out_path))
    fn, is_module, module_name = as_module(torch, fn_or_module)
    if example_inputs is None:
        if not isinstance(fn_or_module, torch.export.ExportedProgram):
            raise ValueError("example_inputs is required (only an ExportedProgram has its own)")
        args, kwargs = fn_or_module.example_inputs
        if kwargs:
            raise ValueError("the ExportedProgram's example inputs have keyword arguments; pass example_inputs")
        example_inputs = list(args)
    make_inputs = example_inputs if callable(example_inputs) else (lambda: list(example_inputs))
    if progress is True:
        progress = stderr_progress(name)
    elif progress is False:
        progress = None
    if unrunnable not in D.MODES:
        raise ValueError(f"unrunnable={unrunnable!r}: expected one of {', '.join(D.MODES)}")
    case_options = {"math": math or {}, "tolerance": tolerance, "cpu_isa": cpu_isa}
    outcome = export_bundle(torch, name, fn, make_inputs, kw, out_path, case_options, is_module=is_module,
                            module_name=module_name, progress=progress, capture_devices=capture_devices)
    if not outcome.errors and unrunnable != "off":
        if progress is not None:
            progress("checking ops", "the extern ops each device runs (wrapir check --device)")
        messages, problems = D.check_bundle(out_path, devices or D.default_devices(outcome.info), wrapir)
        outcome.warnings += problems
        if unrunnable == "error":
            outcome.errors += messages
        else:
            outcome.warnings += messages
    if outcome.errors:
        write_errors(out_path, outcome.errors)
        if raise_on_error:
            raise ExportError(outcome.errors, out_path)
    return outcome


def write_errors(bundle, errors, tb=None):
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "errors.txt"), "w") as f:
        f.write("\n".join(errors) + "\n")
    if tb:
        with open(os.path.join(bundle, "error.txt"), "w") as f:
            f.write(tb)


def export_bundle(torch, name, fn, make_inputs, compile_kwargs, bundle, options, *, is_module, module_name,
                  progress=None, capture_devices=("cuda", "cpu")):
    """The export of one case (`options`: `math`, `tolerance`, `cpu_isa`); returns an
    ExportResult whose `errors` list every failure (empty: the bundle is complete)."""
    from . import host_kernels as H

    install(capture_devices)
    with MathModes(torch, options.get("math")), H.target_isa(options.get("cpu_isa") or "baseline"):
        if is_module:
            set_eval(fn)
        try:
            return _export(torch, name, fn, make_inputs, compile_kwargs, bundle, options, is_module,
                           module_name, progress)
        finally:
            if is_module and torch.cuda.is_available():
                torch.cuda.empty_cache()


def _clone_all(torch, xs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def _own(torch, out):
    """A compiled call's outputs copied out of whatever memory they live in (CUDA graph
    outputs are overwritten by the next replay and their pool is released on reset)."""
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, out)


def _graph_breaks(torch):
    """Dynamo's count of graph breaks by reason (its `counters["graph_break"]`), cleared
    before the export's compile so that it holds this export's breaks only."""
    from torch._dynamo.utils import counters

    return counters["graph_break"]


def _break_summary(msg):
    """One graph-break reason of Dynamo's, short: its first line and where in the user's
    code it broke (Dynamo's "Caused by:" line, else the last frame of its user stack)."""
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    head = lines[0][:240] if lines else "?"
    where = next((ln[len("Caused by:"):].strip() for ln in lines if ln.startswith("Caused by:")), None)
    if where is None:
        frames = [ln for ln in lines if ln.startswith("File \"")]
        where = frames[-1] if frames else None
    return f"{head} [at {where[:240]}]" if where else head


def _one_graph_error(torch, graphs):
    """Why a function Dynamo compiled into several graphs cannot be one bundle, with the
    reasons Dynamo gave for its breaks, the same reason at the same place counted once
    (a bundle is one graph: the Python between graphs is not Inductor's output, so
    wrapir has nothing to run it from)."""
    import collections

    reasons = collections.Counter()
    for msg, n in _graph_breaks(torch).items():
        reasons[_break_summary(msg)] += n
    if reasons:
        shown = "; ".join(f"{r} (x{n})" for r, n in reasons.most_common(3))
        more = f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
        why = f" Dynamo's graph breaks: {shown}{more}."
    else:
        why = " Dynamo recorded no graph-break reason (a recompilation, or a second call site?)."
    return (f"expected one compiled graph, got {graphs}: a bundle holds one graph, and the Python "
            f"Dynamo runs between graphs is not part of Inductor's output.{why} Remove the breaks "
            "(`torch.compile(..., fullgraph=True)` stops at the first one and says where), e.g. "
            "a loop over a data-dependent number of items written as one batched operation.")


def _export(torch, name, fn, make_inputs, compile_kwargs, bundle, options, is_module, module_name, progress):
    from torch._inductor import config as icfg

    def stage(s, detail=""):
        if progress is not None:
            progress(s, detail)

    # Modules run in inference mode; plain functions as before (grad mode unchanged).
    mode = torch.no_grad if is_module else contextlib.nullcontext
    if os.path.exists(bundle):
        shutil.rmtree(bundle)
    os.makedirs(bundle)
    stage("inputs and eager reference")
    torch.manual_seed(0)
    inputs = list(make_inputs())
    eager_inputs = _clone_all(torch, inputs)
    # A module's buffers as the call starts: put back before each later run, so that a
    # program that writes them (a cache kept as a buffer) starts every run the same.
    state = M.ModuleState(torch, fn, is_module)
    with mode():
        expected = fn(*eager_inputs)
    sync(torch)
    buffers_after = state.values()
    state.restore(torch)
    math = math_modes(torch)

    # Compile options of the export: no FX graph cache (the wrapper must be generated,
    # so that it is captured), one compile thread; with CUDA graphs, no graph partitions
    # (Inductor would move the cudagraph-safe parts of `call` into partition functions;
    # the same kernels and lines stay in `call` without them).
    from . import host_kernels as H

    config_patch = {"fx_graph_cache": False, "compile_threads": 1, **HOST_CONFIG,
                    **H.inductor_config(H.current_isa())}
    notes_extra = []
    # The upstream fixes applied (each run of the program notes them again: kept once).
    fixes = []
    if "freezing" in (compile_kwargs.get("options") or {}):
        # Dynamo reads Inductor's `freezing` while tracing (parameters become constants
        # only when it is set then), before torch.compile's options apply.
        config_patch["freezing"] = bool(compile_kwargs["options"]["freezing"])
    run_kwargs = compile_kwargs

    def run_mode():
        # Inductor compiles and runs the program: inference mode for modules, and its CPU
        # FlexAttention template as the kernel images run it (`cpu_templates`).
        stack = contextlib.ExitStack()
        stack.enter_context(mode())
        stack.enter_context(CT.host_templates())
        stack.enter_context(UF.applied(torch, fixes))
        return stack

    if uses_cudagraphs(torch, compile_kwargs):
        config_patch["graph_partition"] = False
        run_kwargs = without_cudagraphs(torch, compile_kwargs)
        notes_extra.append("asked for CUDA graphs: exported with the same options and Inductor's CUDA graphs "
                           "off (graph partitions off too, so every line is in `call`); wrapir replays its own")

    SESSION.reset(progress)
    SESSION.enabled = True
    try:
        torch._dynamo.reset()
        _graph_breaks(torch).clear()
        compiled = torch.compile(fn, **run_kwargs)
        run_inputs = _clone_all(torch, inputs)
        # The CUDA generator's state as the compiled call starts: Inductor's seed buffer
        # (`aten.randint.low_out`) is drawn from it, and wrapir replays the same draw.
        cuda_rng = B.cuda_rng_state(torch)
        stage("tracing", f"torch.compile({', '.join(f'{k}={v!r}' for k, v in compile_kwargs.items())})")
        with icfg.patch(config_patch), run_mode():
            result = _own(torch, compiled(*run_inputs))
        sync(torch)
    finally:
        SESSION.enabled = False
    stage("checking", "a second run, and both against eager")
    # A second run of the same compiled program: wrapir is compared with the first one,
    # so run-to-run differences (atomics) must stay within the compiled tolerance. It
    # starts from the same CUDA generator state, so in-graph random numbers repeat.
    if cuda_rng is not None:
        B.set_cuda_rng_state(torch, cuda_rng)
    state.restore(torch)
    with icfg.patch(config_patch), run_mode():
        rerun = _own(torch, compiled(*_clone_all(torch, inputs)))
    sync(torch)
    caps = list(SESSION.captures)
    modules = list(SESSION.modules)
    codes = list(SESSION.codes)
    dropped = list(SESSION.dropped)
    errors = []
    for c in caps:
        errors += c.errors
    mains = [c for c in caps if not c.is_subgraph]
    if len(mains) != 1:
        errors.append(_one_graph_error(torch, len(mains)))
    if len(modules) != 1:
        errors.append(f"expected one wrapper module, got {len(modules)}")
    try:
        H.check_picked_isa(H.current_isa())
    except Exception as e:  # the kernels would need another ISA than the one recorded
        errors.append(str(e))
    if dropped:
        notes_extra.append(f"{len(dropped)} wrappers of graphs Inductor compiled only to benchmark them were "
                           "not captured")

    # Compare with eager, within a tolerance scaled by eager's own error against float64
    # (modules; plain functions keep the floor), and the rerun with the first run.
    exp = flatten_outputs(torch, expected)
    # Tensors and integers (0-d int64 tensors), in output order: what the bundle stores.
    got_values, _, problems = output_values(torch, result)
    exp_values, exp_ints, exp_problems = output_values(torch, expected)
    errors += [f"compiled: {p}" for p in problems] + [f"eager: {p}" for p in exp_problems]
    state.restore(torch)
    ref64 = float64_reference(torch, fn, inputs, is_module) if is_module else None
    tolerance, tolerance_basis = eager_tolerance(torch, exp, ref64, options.get("tolerance"))
    compare(torch, errors, "compiled vs eager", got_values, exp_values, tolerance)
    mod = modules[0] if modules else None
    graph_inputs = getattr(mod, "_export_inputs", None) or []
    ctol = compiled_tolerance(torch, exp + [t for t in graph_inputs if isinstance(t, torch.Tensor)])
    compare(torch, errors, "compiled rerun vs first run", output_values(torch, rerun)[0], got_values, ctol)

    if any(CT.uses_host_templates(c) for c in codes):
        notes_extra.append(CT.NOTE)
    # Inductor's own wrappers.
    if codes:
        B.write_text(bundle, "inductor.py.txt", codes[0])
    stage("C++ wrapper", "compiling again with cpp_wrapper=True (text only)")
    state.restore(torch)
    cpp, cpp_error = B.cpp_wrapper_text(torch, fn, inputs, run_kwargs, config_patch, run_mode)
    if cpp is not None:
        B.write_text(bundle, "inductor.cpp.txt", cpp)
    elif all(t.device.type == "cpu" for t in inputs if isinstance(t, torch.Tensor)):
        # A CPU program runs from its host kernel images; Inductor's C++ wrapper text is
        # informational there (and Inductor cannot always make it, e.g. for Halide kernels
        # with dynamic shapes).
        notes_extra.append(f"no inductor.cpp.txt: {cpp_error}")
    else:
        errors.append(cpp_error)

    info = None
    kernels = {}
    notes = []
    if len(mains) == 1:
        stage("writing", bundle)
        main = mains[0]
        program, kernels, notes, constant_values = B.assemble_program(caps, main, modules, bundle, errors)
        notes += list(dict.fromkeys(fixes)) + notes_extra
        B.write_program(bundle, program)
        input_names, exp_names, int_outputs, compiled_names = B.write_tensors(
            torch, bundle, main, mod, constant_values, exp_values, exp_ints, got_values, errors, notes)
        input_keys = getattr(mod, "_export_input_keys", None)
        weights, weight_names = B.identify_weights(fn, input_names, input_keys, is_module, errors)
        # The user's names: matched against the tensors the compiled call received.
        signature, leaves, input_tree, output_names, output_tree = N.user_names(torch, fn, run_inputs, expected)
        info = B.bundle_info(
            torch, name=name, compile_kwargs=compile_kwargs, input_names=input_names, user_inputs=len(inputs),
            expected=exp_names, graph_outputs=len(main.graph["outputs"]), int_outputs=int_outputs,
            tolerance=tolerance, tolerance_basis=tolerance_basis, compiled=compiled_names, ctol=ctol, math=math,
            module=module_name, weights=weights, weight_names=weight_names, notes=notes, cuda_rng=cuda_rng,
            constants=B.constant_sources(fn, constant_values, is_module))
        info.update(B.names_info(signature=signature,
                                 input_names=N.match_inputs(input_names, input_keys, leaves, skip=set(weights)),
                                 input_tree=input_tree, output_names=output_names, exp_names=exp_names,
                                 output_tree=output_tree))
        info["mutated_inputs"] = record_mutations(
            torch, bundle, mod, fn, input_names, weight_names, info.get("input_names", {}), eager_inputs,
            buffers_after, tolerance, errors)
        host = B.host_kernels_info(program)
        if host:
            info["host_kernels"] = host
        libraries = B.op_libraries(program)
        if libraries:
            info["op_libraries"] = libraries
        B.write_info(bundle, info)
    state.restore(torch)
    stage("done" if not errors else "failed", f"{len(kernels)} kernels, {len(errors)} errors")
    return ExportResult(bundle, name, len(kernels), notes + [f"not captured: {d}" for d in dropped],
                        errors, info)


def record_mutations(torch, bundle, mod, fn, input_names, weight_names, user_names, eager_inputs, buffers_after,
                     tolerance, errors):
    """The graph inputs the compiled program writes (`mutations.py`): checks the compiled
    call's value of each after the call against eager's, writes eager's to
    `mutated.safetensors` and returns their names for bundle.json's `mutated_inputs`."""
    from .safetensors import write_safetensors

    mutated = M.mutated_inputs(mod, input_names)
    signature = N.positional_names(fn, len(eager_inputs))
    eager = M.eager_values(mutated, user_names=user_names, weight_names=weight_names,
                           eager_leaves=M.user_leaves(torch, signature, eager_inputs), buffers_after=buffers_after,
                           errors=errors)
    compiled = M.compiled_values(torch, mod, input_names, mutated, errors)
    for g in mutated:
        if g in eager and g in compiled:
            who = user_names.get(g) or weight_names.get(g) or g
            compare(torch, errors, f"mutated input {g} (`{who}`) after the call, compiled vs eager", [compiled[g]],
                    [eager[g]], tolerance, label="value")
    if eager:
        write_safetensors(os.path.join(bundle, M.FILE), eager)
    return mutated
