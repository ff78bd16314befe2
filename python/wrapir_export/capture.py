"""The wrapper code generator hook that records Wrapper IR lines, and the hooks that find
the one wrapper that is kept.

`install()` registers, for `cuda`, a subclass of Inductor's `PythonWrapperCodegen` (and
of `SubgraphPythonWrapperCodegen` for `torch.cond` / `while_loop` branches) whose
`run_wrapper_ir_passes` converts `self.lines` right after memory planning, while
`V.graph` is still the graph being generated. Its `codegen_conditional` (PyTorch <= 2.13),
`codegen_switch` (2.14+) and `codegen_while_loop` bracket the text Inductor writes for
control flow with `ControlMarker`s (`control.py`).

Which wrapper is kept: Inductor generates wrappers for more graphs than the one it
returns. With `max-autotune`, `select_algorithm` compiles benchmark graphs (a
`GraphLowering` named `benchmark_<choice>`, created and compiled while the main graph is
being lowered, `V.graph` being the main graph) and loads benchmark kernel modules that
have a `call` function of their own. A `GraphLowering` created while another one is
active (`V.graph` set) is such a nested compile: `install()` marks each graph as it is
created, and only a graph created at the top level, and the `SubgraphLowering`s whose
parent chain leads to it, are captured. The wrapper module kept is the one
`GraphLowering.compile_to_module` returns for that top-level graph (not every module
`PyCodeCache` loads): its `call` is wrapped to record the inputs and outputs of its first
call, and its file is Inductor's Python wrapper text.
"""

from __future__ import annotations

import dataclasses
import traceback

from .control import ControlMarker
from .convert import Capture, GraphConverter
from .regions import InvokeSubgraphMarker
from .symbol_statements import SymbolStatement


class Session:
    """What one export records (`SESSION`; hooks record only while `enabled`)."""

    def __init__(self):
        self.enabled = False
        self.reset()

    def reset(self, progress=None):
        self.captures = []     # Captures of the kept graphs, in completion order
        self.modules = []      # wrapper modules of kept top-level graphs
        self.codes = []        # their Python wrapper text
        self.dropped = []      # wrappers generated for nested (benchmark) compiles, not kept
        self.progress = progress
        self.compiling_reported = False

    def stage(self, stage, detail=""):
        if self.progress is not None:
            self.progress(stage, detail)


SESSION = Session()

_INSTALLED = {"devices": set(), "graph_hooks": False}


def is_graph(obj):
    from torch._inductor.graph import GraphLowering

    return isinstance(obj, GraphLowering)


def kept_root(g):
    """The top-level graph whose wrapper `g`'s wrapper belongs to, or None when `g` is, or
    is inside, a graph compiled while another graph was being lowered (a benchmark)."""
    from torch._inductor.graph import SubgraphLowering

    seen = 0
    while isinstance(g, SubgraphLowering) and seen < 1000:
        g = g.parent
        seen += 1
    if not is_graph(g):
        return None
    if getattr(g, "_wrapir_outer", None) is not None:
        return None
    return g


def _current_graph():
    from torch._inductor.virtualized import V

    g = V.graph
    return g if is_graph(g) else None


def make_wrapper_classes():
    from torch._inductor.codegen import wrapper as W

    class MarkerLine(W.WrapperLine):
        def __init__(self, marker):
            self.marker = marker

        def codegen(self, code):
            pass

    class CaptureMixin:
        def run_wrapper_ir_passes(self, is_inference):
            super().run_wrapper_ir_passes(is_inference)
            if not SESSION.enabled:
                return
            name = getattr(self, "subgraph_name", None) or "main"
            graph = _current_graph()
            if graph is not None and kept_root(graph) is None:
                SESSION.dropped.append(f"{name} of {getattr(graph, 'name', None) or 'a nested graph'}")
                return
            cap = Capture(name, is_subgraph=name != "main")
            lines = [ln.marker if isinstance(ln, MarkerLine) else ln for ln in self.lines]
            cap.line_count = len(lines)
            try:
                conv = GraphConverter(self, cap)
                conv.earlier_kernels = {k: v for c in SESSION.captures for k, v in c.kernels.items()}
                conv.convert(lines)
                conv.finish()
            except Exception as e:
                cap.errors.append(f"{name}: exporter error {type(e).__name__}: {e}\n{traceback.format_exc()}")
            SESSION.captures.append(cap)
            SESSION.stage("capturing", f"{name}: {len(lines)} Wrapper IR lines, {len(cap.errors)} not expressible")

        def codegen_dynamic_slice_size(self, node, *args, **kwargs):
            self.writeline(MarkerLine(SymbolStatement("slice_size", node)))
            super().codegen_dynamic_slice_size(node, *args, **kwargs)

        def codegen_dynamic_select_index(self, node, *args, **kwargs):
            clamp = args[0] if args else kwargs.get("clamp", getattr(node, "clamp", False))
            self.writeline(MarkerLine(SymbolStatement("select_offset", node, clamp)))
            super().codegen_dynamic_select_index(node, *args, **kwargs)

        def codegen_invoke_subgraph(self, invoke_subgraph, *args, **kwargs):
            # `torch.compiler.nested_compile_region`: the converter splices the region's
            # graph in at each call (`regions.py`). Its capture is the latest one of its
            # name: the first call generates (and captures) the region's function.
            start = InvokeSubgraphMarker(invoke_subgraph)
            self.writeline(MarkerLine(start))
            super().codegen_invoke_subgraph(invoke_subgraph, *args, **kwargs)
            name = invoke_subgraph.subgraph.graph.name
            start.capture = next((c for c in reversed(SESSION.captures) if c.name == name), None)
            self.writeline(MarkerLine(InvokeSubgraphMarker(invoke_subgraph, end=True)))

        def codegen_conditional(self, conditional):
            self.writeline(MarkerLine(ControlMarker("cond", conditional)))
            super().codegen_conditional(conditional)
            self.writeline(MarkerLine(ControlMarker("cond", conditional, end=True)))

        def codegen_switch(self, node, *args, **kwargs):
            # PyTorch 2.14+: `torch.cond` (and 2.15's `torch.switch`) lower through `ir.Switch`.
            self.writeline(MarkerLine(ControlMarker("switch", node)))
            super().codegen_switch(node, *args, **kwargs)
            self.writeline(MarkerLine(ControlMarker("switch", node, end=True)))

        def codegen_while_loop(self, while_loop, *args, **kwargs):
            # `stack_output` is positional in Inductor 2.11 (a keyword with a default in others).
            stack = args[0] if args else kwargs.get("stack_output", getattr(while_loop, "stack_output", False))
            self.writeline(MarkerLine(ControlMarker("while", while_loop, stack_output=bool(stack))))
            super().codegen_while_loop(while_loop, *args, **kwargs)
            self.writeline(MarkerLine(ControlMarker("while", while_loop, end=True)))

    class CapturingSubgraphWrapper(CaptureMixin, W.SubgraphPythonWrapperCodegen):
        pass

    class CapturingWrapper(CaptureMixin, W.PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return CapturingSubgraphWrapper(subgraph_name, parent_wrapper, partition_signatures)
            return CapturingWrapper()

    return CapturingWrapper


def install_wrapper(devices=("cuda",)):
    """Registers the capturing wrapper code generator for `devices` (once each)."""
    from torch._inductor.codegen import common

    common.init_backend_registration()
    for device in devices:
        if device in _INSTALLED["devices"]:
            continue
        orig = common.device_codegens[device]
        cls = make_wrapper_classes()
        if dataclasses.is_dataclass(orig):
            common.device_codegens[device] = dataclasses.replace(orig, wrapper_codegen=cls)
        else:
            common.device_codegens[device] = orig._replace(wrapper_codegen=cls)
        _INSTALLED["devices"].add(device)


def tensor_key(t):
    """Where a tensor's data lives: equal for a parameter and any alias Dynamo or
    AOTAutograd passes on for it (a detached tensor, a same-layout view)."""
    return (t.device.type, t.device.index, t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype))


def record_calls(mod):
    """Wraps `mod.call` to record the inputs (cloned, before and after) and outputs of its
    first call while the session records (later calls, such as a CUDA graph recording,
    only run)."""
    if getattr(mod, "_wrapir_recording", False):
        return
    call = mod.call

    def recording_call(args, _call=call, _mod=mod):
        import torch

        if SESSION.enabled and not hasattr(_mod, "_export_inputs"):
            _mod._export_inputs = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
            _mod._export_input_keys = [tensor_key(a) if isinstance(a, torch.Tensor) else None for a in args]
            # `call` empties `args` (to free the inputs early): hold them to read them after.
            held = list(args)
            out = _call(args)
            # The inputs as the call left them: those it writes (`_wrapir_mutated_inputs`)
            # hold its results there.
            _mod._export_inputs_after = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in held]
            del held
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            _mod._export_outputs = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs]
            return out
        return _call(args)

    mod.call = recording_call
    mod._wrapir_recording = True


def install_graph_hooks():
    """Marks each GraphLowering with the graph active when it was created, and records the
    wrapper module of each kept top-level graph (once)."""
    if _INSTALLED["graph_hooks"]:
        return
    from torch._inductor.graph import GraphLowering, SubgraphLowering

    orig_init = GraphLowering.__init__
    orig_compile = GraphLowering.compile_to_module

    def __init__(self, *args, **kwargs):
        outer = _current_graph()
        self._wrapir_outer = outer
        if SESSION.enabled and outer is None and not SESSION.compiling_reported:
            SESSION.compiling_reported = True
            SESSION.stage("compiling", "Inductor lowers the traced graph")
        orig_init(self, *args, **kwargs)

    def compile_to_module(self, *args, **kwargs):
        mod = orig_compile(self, *args, **kwargs)
        if SESSION.enabled and not isinstance(self, SubgraphLowering) and kept_root(self) is self \
                and hasattr(mod, "call"):
            if mod not in SESSION.modules:
                for attr in ("_export_inputs", "_export_input_keys", "_export_outputs", "_export_inputs_after"):
                    if hasattr(mod, attr):
                        delattr(mod, attr)
                # The graph inputs the program writes (Inductor's own record, by graph input name).
                mod._wrapir_mutated_inputs = list(getattr(self, "mutated_inputs", None) or ())
                record_calls(mod)
                SESSION.modules.append(mod)
                try:
                    with open(mod.__file__) as f:
                        SESSION.codes.append(f.read())
                except Exception:
                    pass
        return mod

    GraphLowering.__init__ = __init__
    GraphLowering.compile_to_module = compile_to_module
    _INSTALLED["graph_hooks"] = True


def install(devices=("cuda",)):
    """Installs every hook (idempotent). `devices`: the device types whose wrapper code
    generator captures (CUDA; the CPU only for smoke tests: its C++ kernels are not
    exportable)."""
    install_graph_hooks()
    install_wrapper(devices)
