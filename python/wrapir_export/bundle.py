"""Writing a bundle: program.json from the captures, the safetensors files, bundle.json
(versions, references, weights, tolerances), and Inductor's C++ wrapper text.

See `fixtures/inductor/README.md` for every file and field.
"""

from __future__ import annotations

import json
import os

from .capture import tensor_key
from .exprs import symbol_order
from .kernels import fill_kernels, merge_kernels, name_call_args, plain
from .redact import redact
from .errors import Unconvertible
from .safetensors import write_safetensors
from .tolerances import output_values

FORMAT_VERSION = 1


def cuda_rng_state(torch):
    """The default CUDA generator's seed and Philox offset (`torch.cuda.get_rng_state()`:
    16 bytes, the seed then the offset, both little-endian 64-bit), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    raw = bytes(torch.cuda.get_rng_state().tolist())
    return rng_state_from_bytes(raw)


def rng_state_from_bytes(raw):
    if len(raw) < 16:
        return None
    return {"seed": int.from_bytes(raw[0:8], "little"), "offset": int.from_bytes(raw[8:16], "little")}


def rng_state_bytes(state):
    return int(state["seed"]).to_bytes(8, "little") + int(state["offset"]).to_bytes(8, "little")


def set_cuda_rng_state(torch, state):
    """Restores the state `cuda_rng_state` returned."""
    torch.cuda.set_rng_state(torch.tensor(list(rng_state_bytes(state)), dtype=torch.uint8))


def module_tensors(fn):
    """(name, tensor) of a module's parameters, then buffers (tied ones repeated)."""
    return list(fn.named_parameters(remove_duplicate=False)) + list(fn.named_buffers(remove_duplicate=False))


def identify_weights(fn, input_names, input_keys, is_module, errors):
    """The graph inputs that are the module's parameters or buffers, and their names.

    Matched by where the data lives (`tensor_key`: device, data pointer, shape, strides,
    dtype) of each tensor Inductor's `call` received against `named_parameters()` and
    `named_buffers()` of the module that was called: Dynamo inlines the module and
    passes its parameters and buffers (or aliases of them, which share the data pointer)
    as graph inputs, so this does not depend on Dynamo's naming of sources. A tied
    parameter matches once, under its first name."""
    if not is_module:
        return [], {}
    if input_keys is None or len(input_keys) != len(input_names):
        errors.append("could not identify the weights: the compiled graph's inputs were not recorded")
        return [], {}
    by_key = {}
    for pname, t in module_tensors(fn):
        by_key.setdefault(tensor_key(t), pname)
    weights, names = [], {}
    for nm, key in zip(input_names, input_keys):
        if key is not None and key in by_key:
            weights.append(nm)
            names[nm] = by_key[key]
    return weights, names


def constant_sources(fn, constants, is_module):
    """constant name -> the module parameter or buffer whose data it holds (the tensor
    itself or a view of it, such as a transposed weight), or None (a value Inductor
    computed while folding constants)."""
    by_key, by_storage = {}, {}

    def storage(t):
        try:
            return (t.device.type, t.device.index, t.untyped_storage().data_ptr())
        except Exception:
            return None

    if is_module:
        for pname, t in module_tensors(fn):
            by_key.setdefault(tensor_key(t), pname)
            by_storage.setdefault(storage(t), pname)
    out = {}
    for name, t in constants.items():
        # The parameter itself, else a view of its data (a transposed weight).
        out[name] = by_key.get(tensor_key(t)) or by_storage.get(storage(t)) if hasattr(t, "data_ptr") else None
    return out


def triton_version():
    try:
        import triton

        return triton.__version__
    except Exception:
        return None


def device_name(torch):
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def cpp_wrapper_text(torch, fn, inputs, compile_kwargs, config_patch, mode):
    """Inductor's C++ wrapper (`cpp_wrapper=True`) for the same function: compiles again,
    keeping only the generated C++ text (the C++ is not built). Returns (text or None,
    error or None)."""
    from torch._inductor import config as icfg
    from torch._inductor.graph import GraphLowering

    try:
        torch._dynamo.reset()
        cpp_codes = []

        class _Stop(Exception):
            pass

        orig_save = GraphLowering.save_output_code

        def save_output_code(code):
            cpp_codes.append(code)
            raise _Stop()

        GraphLowering.save_output_code = staticmethod(save_output_code)
        try:
            with icfg.patch({"cpp_wrapper": True, **config_patch}), mode():
                try:
                    torch.compile(fn, **compile_kwargs)(*[x.clone() if isinstance(x, torch.Tensor) else x
                                                          for x in inputs])
                except Exception:
                    if not cpp_codes:
                        raise
        finally:
            GraphLowering.save_output_code = orig_save
        if cpp_codes:
            return cpp_codes[0], None
        return None, "no C++ wrapper produced"
    except Exception as e:
        return None, f"C++ wrapper: {type(e).__name__}: {str(e)[:300]}"
    finally:
        torch._dynamo.reset()


def assemble_program(caps, main, modules, bundle, errors):
    """program.json's value from the captures (writing the kernel binaries), and the
    conversion notes, and the kept constants' tensors by name."""
    kernels_all = merge_kernels(caps)
    symbols = {}
    constants = {}
    constant_values = {}
    for c in caps:
        if not c.inlined:  # a spliced region's symbols are its callers' (renamed where it binds them)
            symbols.update(c.symbol_info)
        constants.update(c.constants)
        constant_values.update(c.constant_values)
    kernels = fill_kernels(kernels_all, modules, os.path.join(bundle, "kernels"), errors)
    notes = []
    for c in caps:
        if c.graph is not None and not c.inlined:
            name_call_args(c.graph["lines"], kernels, notes)
    program = {"format_version": FORMAT_VERSION}
    if symbols:
        program["symbols"] = {k: symbols[k] for k in sorted(symbols, key=symbol_order)}
    if constants:
        program["constants"] = constants
    if kernels:
        program["kernels"] = kernels
    program["main"] = main.graph
    subs = {c.name: c.graph for c in caps if c.is_subgraph and c.graph is not None and not c.inlined}
    if subs:
        program["subgraphs"] = subs
    # The module's own attribute is the value its `call` reads; the capture's is the same.
    for name in list(constant_values):
        for mod in modules:
            v = getattr(mod, name, None)
            if v is not None and hasattr(v, "data_ptr"):
                constant_values[name] = v
                break
    return program, kernels, notes, constant_values


def write_program(bundle, program):
    with open(os.path.join(bundle, "program.json"), "w") as f:
        json.dump(program, f, indent=1)
        f.write("\n")


def write_tensors(torch, bundle, main, mod, constant_values, exp_values, exp_ints, got_values, errors, notes):
    """inputs / expected / compiled safetensors. Returns (input names, expected names,
    integer output names, compiled names); a note for each output the graph returns as
    another dtype or shape than the function."""
    graph_inputs = getattr(mod, "_export_inputs", None)
    input_names = [i["name"] for i in main.graph["inputs"]]
    tensors = {}
    if graph_inputs is None or len(graph_inputs) != len(input_names):
        errors.append("could not record the compiled graph's inputs")
    else:
        for nm, v in zip(input_names, graph_inputs):
            if isinstance(v, torch.Tensor):
                tensors[nm] = v
            else:
                tensors[nm] = torch.tensor(int(v), dtype=torch.int64)
    # Program constants (Inductor's folded / frozen tensors) by name, after the inputs.
    for nm, v in constant_values.items():
        tensors.setdefault(nm, v)
    try:
        write_safetensors(os.path.join(bundle, "inputs.safetensors"), tensors)
    except Unconvertible as e:
        errors.append(f"inputs.safetensors: {e}")
    exp_tensors = {f"out{k}": t for k, t in enumerate(exp_values)}
    int_outputs = [f"out{k}" for k in exp_ints]
    graph_outputs = getattr(mod, "_export_outputs", None) or []
    graph_values, graph_ints, graph_problems = output_values(torch, graph_outputs)
    errors += [f"graph: {p}" for p in graph_problems]
    # The graph's own outputs are the references where they are not the user's: another
    # count (AOTAutograd drops or adds outputs), or another dtype or shape at one position
    # (an output AOTAutograd rebuilds after the graph, such as `x[i]` at a data-dependent
    # 0-d index `i`: a view of the input `x`, which the graph returns as `i`'s storage).
    rebuilt = [k for k, (g, e) in enumerate(zip(graph_values, exp_values))
               if (g.dtype, tuple(g.shape)) != (e.dtype, tuple(e.shape))]
    for k in rebuilt:
        g, e = graph_values[k], exp_values[k]
        notes.append(f"output {k}: the compiled graph returns {g.dtype} {list(g.shape)} where the function "
                     f"returns {e.dtype} {list(e.shape)} (AOTAutograd rebuilds it after the graph); the bundle "
                     f"returns the graph's output and is judged against it (graph_out{k})")
    if len(graph_values) != len(exp_values) or graph_ints != exp_ints or rebuilt:
        for k, t in enumerate(graph_values):
            exp_tensors[f"graph_out{k}"] = t
        int_outputs += [f"graph_out{k}" for k in graph_ints]
    write_safetensors(os.path.join(bundle, "expected.safetensors"), exp_tensors)
    compiled_tensors = {f"out{k}": t for k, t in enumerate(got_values)}
    compiled_tensors.update({k: v for k, v in exp_tensors.items() if k.startswith("graph_out")})
    write_safetensors(os.path.join(bundle, "compiled.safetensors"), compiled_tensors)
    return input_names, list(exp_tensors.keys()), int_outputs, list(compiled_tensors.keys())


def bundle_info(torch, *, name, compile_kwargs, input_names, user_inputs, expected, graph_outputs,
                int_outputs, tolerance, tolerance_basis, compiled, ctol, math, module, weights,
                weight_names, notes, cuda_rng, constants):
    """bundle.json's value (field order as the fixtures README lists them)."""
    info = {
        "case": name,
        "torch": torch.__version__,
        "triton": triton_version(),
        "device": device_name(torch),
        "compile_kwargs": plain(compile_kwargs),
        "graph_inputs": input_names,
        "user_inputs": user_inputs,
        "expected": expected,
        "graph_outputs": graph_outputs,
        # The names in expected/compiled.safetensors that hold an integer output (a 0-d
        # int64 tensor), not a tensor output; always written, so that a reader knows
        # integer outputs are stored.
        "int_outputs": int_outputs,
        "tolerance": tolerance,
        "tolerance_basis": tolerance_basis,
        "compiled": compiled,
        "compiled_tolerance": {"atol": ctol["atol"], "rtol": ctol["rtol"]},
        "math": math,
        "module": module,
        "weights": weights,
        "notes": notes,
    }
    if cuda_rng is not None:
        info["cuda_rng"] = cuda_rng
    if weight_names:
        info["weight_names"] = weight_names
    if constants:
        info["constants"] = constants
    return info


def names_info(*, signature, input_names, input_tree, output_names, exp_names, output_tree):
    """bundle.json's naming fields (`names.py`): `signature`, `input_names`, `input_tree`,
    `output_names` (only when one name per stored output `out<k>`), `output_tree`; a
    field without a value is left out (every one is optional to readers)."""
    info = {"signature": list(signature)}
    if input_names:
        info["input_names"] = dict(input_names)
    if input_tree is not None:
        info["input_tree"] = input_tree
    stored = [n for n in exp_names if n.startswith("out")]
    if len(output_names) == len(stored):
        info["output_names"] = list(output_names)
    if output_tree is not None:
        info["output_tree"] = output_tree
    return info


# Namespaces of PyTorch's own ops: every other namespace an extern call names belongs to a
# library (a custom op), which a process must import before it can call the op.
TORCH_NAMESPACES = {"aten", "prims", "inductor", "_c10d_functional", "c10d_functional", "_dtensor", "streams",
                    "higher_order", "quantized", "_quantized", "mkldnn", "onednn", "mkl", "profiler"}


def op_libraries(program):
    """bundle.json's `op_libraries`: for each custom op the program calls
    (`torch.ops.<ns>.<name>...`, `<ns>` not PyTorch's own), the Python module whose import
    registers it (`torch.library.custom_op`'s function's module, e.g. transformers'
    `grouped_mm_fallback` -> `transformers.integrations.moe`), so that a process running a
    lowering of the program (`check_python.py`, `check_fx_module.py`) can import it first.
    An op of a C++ library (no `custom_op` definition) is listed under the Python package
    of its namespace's name when this process has imported it: torchvision's C++ ops
    (`torchvision::nms`) are registered by `import torchvision`. Other C++ ops are not
    listed."""
    import sys

    from torch._library import custom_ops

    ops = set()

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "op" and isinstance(v, str) and v.startswith("torch.ops."):
                    ops.add(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(program)
    out = {}
    for op in sorted(ops):
        parts = op.split(".")
        if len(parts) < 4 or parts[2] in TORCH_NAMESPACES:
            continue
        qualname = f"{parts[2]}::{parts[3]}"
        opdef = custom_ops.OPDEFS.get(qualname)
        module = getattr(getattr(opdef, "_init_fn", None), "__module__", None)
        if module is None and opdef is None and parts[2] in sys.modules:
            module = parts[2]
        if module:
            out[qualname] = module
    return out


def import_op_libraries(meta):
    """Imports the modules of bundle.json's `op_libraries` (the custom ops' definitions),
    so that `torch.ops.<ns>.<name>` resolves in this process."""
    import importlib

    for module in sorted(set((meta.get("op_libraries") or {}).values())):
        importlib.import_module(module)


def host_kernels_info(program):
    """bundle.json's `host_kernels`: how the C++ and Halide kernel images were built (None
    when the program has none)."""
    from . import host_kernels as H

    kinds = {k["backend"]["kind"] for k in (program.get("kernels") or {}).values()}
    if not kinds & {"cpp", "halide"}:
        return None
    info = {}
    if "cpp" in kinds:
        info["cpp"] = {"compiler": H.compiler_version(), "flags": H.CXXFLAGS + [H.cpp_std_flag()] + H.isa_flags(H.current_isa()),
                       "isa": H.current_isa(), "entry": "wrapir_kernel_argv"}
    if "halide" in kinds:
        import halide

        info["halide"] = {"version": getattr(halide, "__version__", None), "target": H.HALIDE_TARGET,
                          "runtime": f"kernels/{H.HALIDE_RUNTIME}", "entry": "<kernel>_argv"}
    return info


def write_text(bundle, file, text):
    with open(os.path.join(bundle, file), "w") as f:
        f.write(redact(text))


def write_info(bundle, info):
    with open(os.path.join(bundle, "bundle.json"), "w") as f:
        json.dump(info, f, indent=1)
