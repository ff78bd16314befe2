"""Wrapper IR line -> wrapir JSON line: converts the lines of the graph being generated
(`V.graph`) after Inductor's memory planning.

Typed Wrapper IR lines are converted by their fields, the raw text lines Inductor still
emits (`assert_size_stride(...)`, `assert_alignment(...)`, `if not (...): raise
RuntimeError(...)`) by parsing; any line that cannot be expressed is an error naming
the line, never dropped. torch is imported when a converter is made.
"""

from __future__ import annotations

import ast
import re

from . import exprs
from .control import ControlFlowMixin, ControlMarker, describe, line_text
from .errors import Unconvertible
from .redact import redact
from .regions import InvokeSubgraphMarker, RegionMixin
from .symbol_statements import SymbolStatement, symbol_value


class Capture:
    """Everything recorded for one compiled graph (top level or subgraph)."""

    def __init__(self, name, is_subgraph):
        self.name = name
        self.is_subgraph = is_subgraph
        self.graph = None          # the JSON graph
        self.kernels = {}          # kernel name -> partial kernel JSON
        self.symbols = set()       # symbol names used
        self.symbol_info = {}      # name -> {"kind", "range", "hint"}
        self.constants = {}        # name -> layout
        self.constant_values = {}  # name -> the constant tensor (`V.graph.constants`)
        self.errors = []           # conversion errors (strings)
        self.line_count = 0        # Wrapper IR lines seen
        self.inlined = False       # a nested compile region's graph, spliced into its callers


class BufRef:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


class Passthrough:
    def __init__(self, value):
        self.value = value


def op_name(node):
    """The op an extern IR node calls, as Inductor's Python wrapper names it."""
    name = getattr(node, "python_kernel_name", None)
    if not name:
        try:
            name = node.get_kernel_name()
        except Exception:
            name = None
    if not name:
        k = getattr(node, "op_overload", None)
        name = str(k) if k is not None else None
    if not name:
        raise Unconvertible(f"extern node {node.get_name()} has no kernel name")
    return name


def comment_texts(text):
    """The `comment` line texts of a comment (one per line, `# ` removed)."""
    out = []
    for part in str(text).split("\n"):
        t = part.strip()
        if t.startswith("#"):
            t = t[1:]
            if t.startswith(" "):
                t = t[1:]
        out.append(t)
    return out


RE_SIZE = re.compile(r"^assert_size_stride\(.*\)$")
RE_ALIGN = re.compile(r"^assert_alignment\((\w+), (\d+)(?:, (.+))?\)$")
# Scope lines of newer Inductors, by class name (absent from older ones): a user stream
# (2.12+), a user memory pool (2.14+), a C++ wrapper's kernel-profile block (2.15+).
SCOPE_LINES = {
    "EnterCudaStreamContextLine": "enter", "ExitCudaStreamContextLine": "stream",
    "EnterCudaMemPoolContextLine": "enter", "ExitCudaMemPoolContextLine": "mem_pool",
    "EnterKernelProfileScopeLine": "enter", "ExitKernelProfileScopeLine": "kernel_profile",
}
RE_IFNOT = re.compile(r"^if not \((.*)\):$")
RE_RAISE = re.compile(r"^raise RuntimeError\((.*)\)$")
RE_NONE = re.compile(r"^(\w+) = None$")
# Inductor's copy of a tensor to another device (`codegen_device_copy`, an `ir.DeviceCopy`),
# and 2.15's wait for a device-to-host copy (`sync_d2h_copy`).
RE_DEVICE_COPY = re.compile(r"^(\w+)\.copy_\((\w+), (True|False|\w+)\)$")
RE_D2H_EVENT = re.compile(r"^_d2h_event_(\w+)(?: = torch\.Event\(\)|\.record\(\)|\.synchronize\(\))$")
DEVICE_COPY_REFUSAL = ("a copy between devices (Inductor's DeviceCopy, `{text}`): wrapir has no line kind for "
                       "it yet; move the tensors to the program's device before the compiled call, or return "
                       "them and move them after it")


class GraphConverter(ControlFlowMixin, RegionMixin):
    """Converts the lines of the graph being generated (`V.graph`) to wrapir JSON."""

    def __init__(self, wrapper, capture):
        import sympy
        import torch
        from torch._inductor import ir
        from torch._inductor.codegen import wrapper as W
        from torch._inductor.virtualized import V

        self.sympy, self.torch, self.ir, self.W, self.V = sympy, torch, ir, W, V
        self.wrapper = wrapper
        self.cap = capture
        self.graph = V.graph
        self.buffers = {}          # name -> buffer decl JSON
        self.lines = []
        self.view_count = 0
        self.bound_precomputed = set()
        # A kernel's numel symbol (`triton_..._xnumel`) is assigned again before each launch of
        # that kernel (a Python rebinding; AOTI assigns the declared int64_t again); wrapir's
        # symbols are bound once, so each later binding gets a fresh name: sym -> current name.
        self.call_arg_names = {}
        # Unbacked symbols an `unbacked_symbol_defs` line has bound (see `unbacked_defs`).
        self.unbacked_bound = set()
        # The kernels of the graphs converted before this one (`capture.py` sets them): a
        # kernel Inductor defined for one of them may be called here without a definition.
        self.earlier_kernels = {}
        # Spliced calls of nested compile regions (`regions.py`): call -> {output index: name}.
        self.region_calls = {}
        # Another binding's name for an unbacked symbol a region binds -> the symbol.
        self.symbol_origins = {}
        # Wrapper IR line classes that one method converts whole (no class here is a
        # subclass of another, so the order does not matter).
        self.line_handlers = (
            (W.KernelDefinitionLine, self.kernel_definition),
            (W.KernelCallLine, self.kernel_call),
            (W.ExternKernelOutLine, lambda line: self.extern_call(line.node, out=True)),
            (W.ExternKernelAllocLine, lambda line: self.extern_call(line.node, out=False)),
            (W.MultiOutputLine, self.multi_output),
            (W.UnbackedSymbolDefsLine, self.unbacked_defs),
            (W.CommentLine, lambda line: self.comment(line.line)),
        )
        if hasattr(W, "ExternKernelMultiOutLine"):  # 2.15+: a custom op's multi-output .out variant
            self.line_handlers += ((W.ExternKernelMultiOutLine, self.extern_multi_out),)
        # Typed asserts of newer Inductors, by class name (absent from older ones):
        # AssertSizeStrideLine 2.12+, AssertDivByZeroLine 2.13+ (C++ wrappers only),
        # GroupedAssertSizeStrideLine 2.14+, AssertAlignmentLine 2.15+.
        self.assert_handlers = (
            ("AssertSizeStrideLine", self.assert_size_stride),
            ("GroupedAssertSizeStrideLine", self.assert_size_stride_grouped),
            ("AssertAlignmentLine", self.assert_alignment),
            ("AssertDivByZeroLine", self.assert_div_by_zero),
        )

    # ---- expressions ---------------------------------------------------------------------

    def expr(self, e):
        """A sympy expression (or int) as a wrapir EXPR: an int or a string."""
        sympy = self.sympy
        if isinstance(e, bool):
            raise Unconvertible(f"boolean {e!r} where an integer expression was expected")
        if isinstance(e, int):
            return e
        if isinstance(e, self.W.SymbolicCallArg):
            name = self.call_arg_name(e)
            self.note_symbol(name)
            return name
        if isinstance(e, str):
            return self.text_expr(e)
        if not isinstance(e, sympy.Basic):
            raise Unconvertible(f"value {e!r} of type {type(e).__name__} is not an expression")
        if e.is_Integer:
            return int(e)
        if e is sympy.true:
            return "True"
        if e is sympy.false:
            return "False"
        for s in e.free_symbols:
            self.note_symbol(s.name)
        if exprs.plain_python(e):
            # Inductor's own printing, exactly as its wrapper shows it.
            return self.W.pexpr(e)
        return exprs.canon(e, top=True)

    def text_expr(self, text):
        """An expression Inductor already printed as Python text (a raw wrapper line)."""
        value, idents = exprs.text_expr(text)
        for ident in idents:
            self.note_symbol(ident)
        return value

    def call_arg_name(self, arg):
        """The name a `SymbolicCallArg` stands for now (its latest binding)."""
        return self.call_arg_names.get(str(arg.inner), str(arg.inner))

    def rebind_call_arg(self, sym):
        """The name for a new binding of the call argument `sym`: `sym` itself the first time,
        then `sym_1`, `sym_2`, ... (a name no other symbol has), which later uses then read."""
        if sym not in self.call_arg_names:
            self.call_arg_names[sym] = sym
            return sym
        k = 1
        while f"{sym}_{k}" in self.cap.symbols:
            k += 1
        self.call_arg_names[sym] = f"{sym}_{k}"
        return self.call_arg_names[sym]

    def note_symbol(self, name):
        self.cap.symbols.add(name)
        pre = getattr(self.graph.sizevars, "inv_precomputed_replacements", {})
        for sym, value in list(pre.items()):
            if sym.name == name and name not in self.bound_precomputed:
                # Inductor binds precomputed sizes in the function prologue, outside the
                # line list; make that binding explicit at the top of the graph.
                self.bound_precomputed.add(name)
                self.lines.insert(0, {"line": "symbolic_call_arg", "symbol": name, "expr": self.expr(value)})

    # ---- layouts and buffers ---------------------------------------------------------------

    def dtype(self, dt):
        return str(dt).replace("torch.", "")

    def device(self, dev):
        dev = self.torch.device(dev)
        if dev.type == "cuda" and dev.index is None:
            return "cuda:0"
        return str(dev)

    def layout_json(self, layout, offset=None):
        lj = {
            "dtype": self.dtype(layout.dtype),
            "device": self.device(layout.device),
            "size": [self.expr(s) for s in layout.size],
            "stride": [self.expr(s) for s in layout.stride],
        }
        off = layout.offset if offset is None else offset
        off = self.expr(off)
        if off != 0:
            lj["offset"] = off
        return lj

    def declare_node(self, node):
        """Declares a buffer-like IR node (Buffer, WorkspaceArg, MultiOutput...) and returns its name."""
        ir = self.ir
        name = node.get_name()
        if name in self.buffers:
            return name
        layout = node.get_output_spec() if hasattr(node, "get_output_spec") else getattr(node, "layout", None)
        if isinstance(layout, ir.MultiOutputLayout):
            self.buffers[name] = {"kind": "multi"}
            return name
        if isinstance(layout, ir.NoneLayout):
            raise Unconvertible(f"buffer {name} has no layout (NoneLayout)")
        if layout is None and hasattr(node, "count"):  # WorkspaceArg
            lj = {"dtype": self.dtype(node.dtype), "device": self.device(node.device),
                  "size": [self.expr(node.count)], "stride": [1]}
            self.buffers[name] = {"kind": "tensor", "layout": lj}
            return name
        if isinstance(layout, ir.NonOwningLayout):
            view = layout.view
            lj = self.layout_json(layout, offset=view.get_layout().offset)
        else:
            lj = self.layout_json(layout)
        try:
            alloc = self.graph.get_allocation_storage_size(node)
            natural = layout.storage_size()
            if self.sympy.simplify(alloc - natural) != 0:
                lj["alloc_numel"] = self.expr(alloc)
        except Exception:
            pass
        self.buffers[name] = {"kind": "tensor", "layout": lj}
        return name

    def declare_name(self, name):
        """Declares a buffer known only by name (graph inputs, constants, earlier buffers)."""
        if name in self.buffers:
            return name
        g = self.graph
        if name in g.graph_inputs:
            node = g.graph_inputs[name]
            self.buffers[name] = {"kind": "tensor", "layout": self.layout_json(node.get_layout())}
            return name
        if name in getattr(g, "constants", {}):
            t = g.constants[name]
            lj = {"dtype": self.dtype(t.dtype), "device": self.device(t.device),
                  "size": list(t.shape), "stride": list(t.stride())}
            if t.storage_offset():
                lj["offset"] = t.storage_offset()
            self.buffers[name] = {"kind": "tensor", "layout": lj}
            self.cap.constants[name] = lj
            self.cap.constant_values[name] = t
            return name
        try:
            buf = g.get_buffer(name)
        except Exception:
            buf = None
        if buf is not None:
            return self.declare_node(buf)
        raise Unconvertible(f"unknown buffer `{name}`")

    def ref(self, node):
        """An IR value used as an argument: returns an ARG JSON, emitting alias lines for views."""
        ir, sympy = self.ir, self.sympy
        if isinstance(node, BufRef):
            return {"kind": "buffer", "value": node.name}
        if isinstance(node, ir.ShapeAsConstantBuffer):
            return {"kind": "expr", "value": self.expr(node.expr)}
        if isinstance(node, ir.NoneAsConstantBuffer):
            return {"kind": "none"}
        if isinstance(node, ir.ReinterpretView):
            return {"kind": "buffer", "value": self.view_alias(node)}
        if isinstance(node, (ir.TensorBox, ir.StorageBox)):
            return self.ref(node.data)
        if isinstance(node, ir.BaseView) and not isinstance(node, ir.ReinterpretView):
            try:
                return self.ref(node.unwrap_view()) if node.is_storage_and_layout else self.ref(node.data)
            except Exception:
                raise Unconvertible(f"view value {type(node).__name__} is not a plain buffer or ReinterpretView")
        if isinstance(node, (ir.Buffer, ir.IRNode)) and hasattr(node, "get_name"):
            name = node.get_name()
            if name in self.graph.graph_inputs or name in getattr(self.graph, "constants", {}):
                return {"kind": "buffer", "value": self.declare_name(name)}
            return {"kind": "buffer", "value": self.declare_node(node)}
        if isinstance(node, sympy.Basic):
            return {"kind": "expr", "value": self.expr(node)}
        return self.const(node)

    def view_alias(self, view):
        """Emits `reinterpret` for a ReinterpretView argument and returns the alias name."""
        base = view.data
        while isinstance(base, (self.ir.TensorBox, self.ir.StorageBox)):
            base = base.data
        if isinstance(base, self.ir.ReinterpretView):
            base_name = self.view_alias(base)
        else:
            base_name = self.declare_name(base.get_name()) if base.get_name() in self.graph.graph_inputs \
                else self.declare_node(base)
        lay = view.get_layout()
        base_lay = self.buffers.get(base_name, {}).get("layout")
        if base_lay is not None and base_lay == self.layout_json(lay):
            return base_name
        alias = f"{base_name}_view{self.view_count}"
        self.view_count += 1
        self.buffers[alias] = {"kind": "tensor", "layout": self.layout_json(lay)}
        self.lines.append({"line": "reinterpret", "base": base_name, "alias": alias})
        return alias

    def const(self, v):
        torch, sympy = self.torch, self.sympy
        if v is None:
            return {"kind": "none"}
        if isinstance(v, bool):
            return {"kind": "bool", "value": v}
        if isinstance(v, int):
            return {"kind": "expr", "value": v}
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise Unconvertible(f"float constant {v!r} has no JSON form")
            return {"kind": "float", "value": v}
        if isinstance(v, str):
            return {"kind": "str", "value": v}
        if isinstance(v, torch.dtype):
            return {"kind": "dtype", "value": self.dtype(v)}
        if isinstance(v, torch.device):
            return {"kind": "device", "value": self.device(v)}
        if isinstance(v, (list, tuple)):
            return {"kind": "list", "value": [self.ref(x) for x in v]}
        if isinstance(v, torch.SymInt):
            return {"kind": "expr", "value": self.expr(v.node.expr)}
        if isinstance(v, sympy.Basic):
            return {"kind": "expr", "value": self.expr(v)}
        if isinstance(v, torch.layout) or isinstance(v, torch.memory_format):
            raise Unconvertible(f"argument {v!r} ({type(v).__name__}) has no wrapir argument kind")
        raise Unconvertible(f"argument {v!r} of type {type(v).__name__} has no wrapir argument kind")

    # ---- lines -------------------------------------------------------------------------------

    def emit(self, line):
        self.lines.append(line)

    def convert(self, lines):
        i = 0
        n = len(lines)
        while i < n:
            line = lines[i]
            try:
                i = self.convert_one(lines, i)
            except Unconvertible as e:
                self.cap.errors.append(f"{self.cap.name}: line {i} ({describe(line)}): {e}")
                i += 1
            except Exception as e:  # a bug here is reported, not hidden
                self.cap.errors.append(
                    f"{self.cap.name}: line {i} ({describe(line)}): exporter error {type(e).__name__}: {e}")
                i += 1

    def convert_one(self, lines, i):
        W = self.W
        from torch._inductor.utils import LineContext

        line = lines[i]
        if isinstance(line, LineContext):
            return i + 1
        if isinstance(line, ControlMarker):
            return self.convert_control(lines, i)
        if isinstance(line, SymbolStatement):
            return self.symbol_statement(lines, i)
        if isinstance(line, InvokeSubgraphMarker):
            return self.convert_region(lines, i)
        if self.region_call_remnant(line):
            return i + 1
        if isinstance(line, W.NullLine):
            return i + 1
        if isinstance(line, W.AllocateLine):
            name = self.declare_node(line.node)
            if getattr(line, "comm_buffer", False):
                layout = line.node.get_output_spec()
                self.emit({"line": "comm_buffer_allocate", "buffer": name,
                           "comm_kind": str(getattr(layout, "comm_buffer_type", "symm_mem")).split(".")[-1].lower(),
                           "group": str(getattr(layout, "group_name", ""))})
            else:
                self.emit({"line": "allocate", "buffer": name})
            return i + 1
        if isinstance(line, W.FreeIfNotReusedLine):
            name = self.declare_node(line.node)
            if getattr(line, "comm_buffer", False):
                if not line.is_reused:
                    self.emit({"line": "comm_buffer_free", "buffer": name})
                return i + 1
            d = {"line": "free_if_not_reused", "buffer": name}
            if line.is_reused:
                d["is_reused"] = True
            self.emit(d)
            return i + 1
        if isinstance(line, W.FreeLine):
            node = line.node
            name = node.get_name()
            if name in self.graph.graph_inputs:
                self.declare_name(name)
            else:
                self.declare_node(node)
            self.emit({"line": "free", "buffer": name})
            return i + 1
        if isinstance(line, W.ReuseLine):
            old = self.declare_node(line.node)
            new = self.declare_node(line.reused_as)
            self.emit({"line": "reuse", "old": old, "new": new, "delete_old": bool(line.delete_old)})
            return i + 1
        if isinstance(line, W.ReinterpretLine):
            base = line.node.get_name()
            if base in self.graph.graph_inputs:
                self.declare_name(base)
            else:
                self.declare_node(line.node)
            alias = line.reused_as.get_name()
            layout = line.layout
            off = layout.view.get_layout().offset if hasattr(layout, "view") else layout.offset
            self.buffers[alias] = {"kind": "tensor", "layout": self.layout_json(layout, offset=off)}
            self.emit({"line": "reinterpret", "base": base, "alias": alias})
            return i + 1
        for cls, handle in self.line_handlers:
            if isinstance(line, cls):
                handle(line)
                return i + 1
        if isinstance(line, W.SymbolicCallArgLine):
            sym = self.rebind_call_arg(str(line.arg.inner))
            self.cap.symbols.add(sym)
            self.bound_precomputed.add(sym)
            self.emit({"line": "symbolic_call_arg", "symbol": sym, "expr": self.expr(line.arg.inner_expr)})
            return i + 1
        if isinstance(line, W.IndexPutFallbackLine):
            node = line.node
            x, values = node.inputs[0], node.inputs[1]
            idx = [None if t is None else self.ref(t)["value"] for t in line.indices]
            accumulate = node.constant_args[-1] if node.constant_args else False
            self.emit({"line": "index_put_fallback", "target": self.ref(x)["value"], "indices": idx,
                       "values": self.ref(values)["value"], "accumulate": bool(accumulate)})
            return i + 1
        if isinstance(line, W.ScatterFallbackLine):
            node = line.node
            inputs = list(node.inputs)
            dim = node.constant_args[0]
            src = self.ref(inputs[2]) if node.src_is_tensor else self.const(node.constant_args[1])
            d = {"line": "scatter_fallback", "op": op_name(node), "target": self.ref(inputs[0])["value"],
                 "dim": int(dim), "index": self.ref(inputs[1])["value"], "src": src}
            kw = getattr(node, "kwargs", {}) or {}
            if kw.get("reduce") is not None:
                d["reduce"] = kw["reduce"]
            if kw.get("include_self") is not None:
                d["include_self"] = bool(kw["include_self"])
            self.emit(d)
            return i + 1
        if isinstance(line, W.DynamicScalarLine):
            node = line.node
            self.cap.symbols.add(node.sym.name)
            d = {"line": "dynamic_scalar", "symbol": node.sym.name, "source": self.ref(node.inputs[0])["value"],
                 "keypath": self.keypath(node.keypath)}
            try:
                d["node"] = node.get_name()
            except Exception:
                pass
            self.emit(d)
            return i + 1
        if type(line).__name__ in SCOPE_LINES:
            self.scope(line)
            return i + 1
        if isinstance(line, W.EnterDeviceContextManagerLine):
            d = {"line": "enter_device_context", "device_index": int(line.device_idx)}
            if type(line).__name__ == "EnterDeviceContextManagerWithStreamInfoLine":
                # 2.12+: a device context for a program with user streams (a subclass of
                # the plain one): side stream k is the user object it names.
                d["streams"] = self.device_streams(line)
            self.emit(d)
            return i + 1
        if isinstance(line, W.ExitDeviceContextManagerLine):
            self.emit({"line": "exit_device_context"})
            return i + 1
        if isinstance(line, (W.EnterSubgraphLine, W.ExitSubgraphLine)):
            raise Unconvertible("subgraph scope outside a conditional or while loop")
        for cls_name, handle in self.assert_handlers:
            cls = getattr(W, cls_name, None)
            if cls is not None and isinstance(line, cls):
                handle(line)
                return i + 1
        # Text Inductor writes as-is.
        from torch._inductor.codegen.common import DeferredLine

        if isinstance(line, DeferredLine):
            if line.name in self.graph.removed_buffers:
                return i + 1  # Inductor drops it too: the buffer it names was removed
            return self.convert_text(lines, i, line.line)
        if hasattr(line, "line") and type(line).__name__ in ("DelayReplaceLine",):
            raise Unconvertible(f"delayed-replacement text line `{line.line}`")
        if isinstance(line, str):
            return self.convert_text(lines, i, line)
        if isinstance(line, W.WrapperLine):
            raise Unconvertible(f"Wrapper IR line type {type(line).__name__} has no wrapir counterpart "
                                f"(PyTorch {self.torch.__version__})")
        raise Unconvertible(f"unknown line object {type(line).__name__} (PyTorch {self.torch.__version__})")

    def device_streams(self, line):
        """The `streams` of a device context with stream info: each side stream's user-object
        index, in stream order (`stream1 = _get_stream_by_index(3)`)."""
        n = getattr(line, "num_streams", 1)
        table = getattr(line, "stream_idx_to_user_obj_idx", None) or {}
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise Unconvertible(f"device context with {n!r} streams")
        objects = []
        for k in range(1, n):
            obj = table.get(k)
            if isinstance(obj, bool) or not isinstance(obj, int) or obj < 0:
                raise Unconvertible(f"device context: stream {k} has user object {obj!r}, not an index")
            objects.append(obj)
        d = {"user_objects": objects}
        if not getattr(line, "setup_stream_cache", True):
            d["reads_current_stream"] = False
        return d

    def scope(self, line):
        """A stream, memory-pool or kernel-profile scope line."""
        cls = type(line).__name__
        kind = SCOPE_LINES[cls]
        if kind != "enter":
            self.emit({"line": "exit_scope", "scope": kind})
            return

        def index(name):
            v = getattr(line, name, None)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise Unconvertible(f"{cls}: `{name}` is {v!r}, not an index")
            return v

        if cls == "EnterCudaStreamContextLine":
            self.emit({"line": "enter_scope", "scope": "stream", "stream": index("stream_idx")})
        elif cls == "EnterCudaMemPoolContextLine":
            self.emit({"line": "enter_scope", "scope": "mem_pool", "pool": index("mempool_index"),
                       "device_index": index("device_index")})
        else:
            self.emit({"line": "enter_scope", "scope": "kernel_profile"})

    def emit_with_context(self, d, ctx):
        """Emits line `d` with the context text of Inductor's assertion (a Python literal)
        when it has one."""
        if ctx:
            d["context"] = ast.literal_eval(ctx)
        self.emit(d)

    # ---- typed asserts (PyTorch 2.12+) ---------------------------------------------------------

    def size_stride(self, name, size, stride):
        """`buffer` / `size` / `stride` of one size assert; `size` and `stride` are the tuple
        texts Inductor printed (`codegen_shape_tuple`)."""
        if not isinstance(name, str) or not re.fullmatch(r"\w+", name):
            raise Unconvertible(f"size assert on `{name}`, not a buffer name")
        self.declare_name(name)
        return {"buffer": name, "size": self.tuple_text(size), "stride": self.tuple_text(stride)}

    def with_context(self, d, line):
        """`d` with the assert's `op_name` as `context` (`input` for graph inputs). 2.12's
        AssertSizeStrideLine (graph inputs only) has no `op_name` and prints none:
        `assert_size_stride(arg0_1, (16, 32), (32, 1))`, so neither has the line."""
        if not hasattr(line, "op_name"):
            return d
        ctx = line.op_name
        if not isinstance(ctx, str):
            raise Unconvertible(f"assert context {ctx!r} is not a string")
        d["context"] = ctx
        return d

    def assert_size_stride(self, line):
        """`assert_size_stride(buf, size, stride, op)`, or with a dtype (2.15)
        `assert_tensor_metadata(buf, size, stride, dtype, op)`."""
        d = {"line": "assert_size_stride", **self.size_stride(line.name, line.size, line.stride)}
        dtype = getattr(line, "dtype", None)
        if dtype is not None:
            d["dtype"] = self.dtype(dtype)
        self.emit(self.with_context(d, line))

    def assert_size_stride_grouped(self, line):
        """`assert_size_stride_grouped((a, b), (size_a, size_b), (stride_a, stride_b), op)`: one line."""
        members = []
        for k, entry in enumerate(line.asserts):
            if not isinstance(entry, (tuple, list)) or len(entry) != 3:
                raise Unconvertible(f"grouped size assert entry {k} is {entry!r}, not (name, size, stride)")
            members.append(self.size_stride(*entry))
        if not members:
            raise Unconvertible("grouped size assert without members")
        self.emit(self.with_context({"line": "assert_size_stride_grouped", "asserts": members}, line))

    def assert_alignment(self, line):
        name = line.name
        if not isinstance(name, str) or not re.fullmatch(r"\w+", name):
            raise Unconvertible(f"alignment assert on `{name}`, not a buffer name")
        align = line.alignment
        if isinstance(align, bool) or not isinstance(align, int):
            raise Unconvertible(f"alignment {align!r} is not an integer")
        self.declare_name(name)
        self.emit(self.with_context({"line": "assert_alignment", "buffer": name, "alignment": align}, line))

    def assert_div_by_zero(self, line):
        # Only C++ wrappers emit it; the divisor is C++ text, read with the same checks.
        self.emit(self.with_context({"line": "assert_div_by_zero", "divisor": self.text_expr(str(line.divisor))},
                                    line))

    def comment(self, text):
        for t in comment_texts(text):
            self.emit({"line": "comment", "text": t})

    # ---- text lines --------------------------------------------------------------------------

    def symbol_statement(self, lines, i):
        """A symbol Inductor computes with statements of its own (`symbol_statements.py`):
        one `symbolic_call_arg` line, then the statements' text skipped."""
        stmt = lines[i]
        sym = stmt.symbol()
        value = symbol_value(stmt, self.graph.sizevars, self.sympy)
        self.cap.symbols.add(sym)
        self.cap.symbol_info[sym] = {"kind": "precomputed"}
        self.bound_precomputed.add(sym)
        self.emit({"line": "symbolic_call_arg", "symbol": sym, "expr": self.expr(value)})
        j = i + 1
        for name in stmt.text_names():
            text = line_text(lines[j]) if j < len(lines) else None
            if not isinstance(text, str) or not text.strip().startswith(f"{name} = "):
                raise Unconvertible(f"`{sym}`: expected Inductor's statement `{name} = ...` here, found "
                                    f"{describe(lines[j]) if j < len(lines) else 'the end'}")
            j += 1
        return j

    def convert_text(self, lines, i, text):
        t = text.strip()
        if t == "":
            return i + 1
        if t.startswith("#"):
            self.comment(t)
            return i + 1
        if RE_SIZE.match(t):
            # Parsed as Python: a shape item may hold parentheses and commas of its own.
            _, args = exprs.call_text_args(t)
            if len(args) not in (3, 4) or not re.fullmatch(r"\w+", args[0]):
                raise Unconvertible(f"raw wrapper text `{t}`")
            name, size, stride = args[:3]
            self.declare_name(name)
            self.emit_with_context({"line": "assert_size_stride", "buffer": name, "size": self.tuple_text(size),
                                    "stride": self.tuple_text(stride)}, args[3] if len(args) == 4 else None)
            return i + 1
        m = RE_ALIGN.match(t)
        if m:
            name, align, ctx = m.groups()
            self.declare_name(name)
            self.emit_with_context({"line": "assert_alignment", "buffer": name, "alignment": int(align)}, ctx)
            return i + 1
        m = RE_IFNOT.match(t)
        if m:
            nxt = line_text(lines[i + 1]) if i + 1 < len(lines) else None
            m2 = RE_RAISE.match(nxt.strip()) if isinstance(nxt, str) else None
            if not m2:
                raise Unconvertible(f"`{t}` is not followed by `raise RuntimeError(...)`")
            d = {"line": "runtime_assert", "cond": self.text_expr(m.group(1)),
                 "message": ast.literal_eval(m2.group(1))}
            j = i + 2
            nxt2 = line_text(lines[j]) if j < len(lines) else None
            m3 = RE_NONE.match(nxt2.strip()) if isinstance(nxt2, str) else None
            if m3:
                d["node"] = m3.group(1)
                j += 1
            self.emit(d)
            return j
        if RE_DEVICE_COPY.match(t) or RE_D2H_EVENT.match(t):
            raise Unconvertible(DEVICE_COPY_REFUSAL.format(text=t))
        m = RE_NONE.match(t)
        if m and self.lines and self.lines[-1].get("line") in ("runtime_assert", "dynamic_scalar") \
                and "node" not in self.lines[-1]:
            self.lines[-1]["node"] = m.group(1)
            return i + 1
        raise Unconvertible(f"raw wrapper text `{t}`")

    def tuple_text(self, text):
        return [self.text_expr(it) for it in exprs.split_tuple_text(text)]

    # ---- kernels -----------------------------------------------------------------------------

    def kernel_definition(self, line):
        name = line.kernel_name
        body = line.kernel_body or ""
        m = re.search(r"'''(.*)'''", body, re.S)
        source = redact(m.group(1).lstrip("\n") if m else body)
        comments = []
        for part in (line.metadata or "").split("\n"):
            p = part.strip()
            if p.startswith("#"):
                comments.append(redact(p[1:].lstrip(" ") if p.startswith("# ") else p[1:]))
        gpu = getattr(line, "gpu", True)
        if "async_compile.triton(" in body:
            kind = "triton"
        elif "async_compile.halide(" in body:
            kind = "halide"
        elif "async_compile.cpp_pybinding(" in body:
            kind = "cpp"
        else:
            kind = "cpp" if not gpu else "unknown"
        self.cap.kernels[name] = {"name": name, "source": source, "comments": comments, "_kind": kind}
        if kind in ("cpp", "halide"):
            # Parsed (and compiled into a host image) by `host_kernels` when the kernels are filled in.
            self.cap.kernels[name]["_body"] = body
        self.emit({"line": "kernel_definition", "kernel": name})

    def kernel_call(self, line):
        name = line.kernel_name
        if not line.triton:
            return self.host_kernel_call(line)
        meta = line.triton_meta or {}
        inductor_meta = getattr(line, "inductor_meta", None) or {}
        raw_args = line.raw_args if line.raw_args is not None else [None] * len(line.call_args)
        args = []
        for k, a in enumerate(line.call_args):
            ty = line.arg_types[k] if line.arg_types and k < len(line.arg_types) else None
            raw = raw_args[k] if k < len(raw_args) else None
            args.append(self.kernel_arg(a, ty, raw))
        # Parameter names are attached once the kernel's final metadata is known (name_call_args).
        d = {"line": "kernel_call", "kernel": name, "args": [{"value": v} for v in args]}
        dev = getattr(line, "device", None)
        if dev is not None:
            d["device"] = self.device(dev)
        self.cap.kernels.setdefault(name, {"name": name, "source": "", "comments": [], "_kind": "triton"})
        self.cap.kernels[name]["_triton_meta"] = meta
        self.cap.kernels[name]["_inductor_meta"] = inductor_meta
        self.emit(d)

    def host_kernel_call(self, line):
        """A direct call of a C++ or Halide kernel: positional arguments in the kernel's order."""
        name = line.kernel_name
        kind = (self.cap.kernels.get(name) or self.earlier_kernels.get(name) or {}).get("_kind")
        if kind not in ("cpp", "halide"):
            raise Unconvertible(f"non-Triton kernel call `{name}` of a {kind or 'undefined'} kernel")
        raw_args = line.raw_args if line.raw_args is not None else [None] * len(line.call_args)
        args = []
        for k, a in enumerate(line.call_args):
            ty = line.arg_types[k] if line.arg_types and k < len(line.arg_types) else None
            raw = raw_args[k] if k < len(raw_args) else None
            args.append({"value": self.kernel_arg(a, ty, raw)})
        d = {"line": "kernel_call", "kernel": name, "args": args}
        dev = getattr(line, "device", None)
        if dev is not None:
            d["device"] = self.device(dev)
        self.emit(d)

    def kernel_arg(self, a, ty, raw):
        torch, sympy, W = self.torch, self.sympy, self.W
        if isinstance(a, W.SymbolicCallArg):
            name = self.call_arg_name(a)
            self.cap.symbols.add(name)
            return {"kind": "expr", "value": name}
        if isinstance(a, str):
            if raw is not None and isinstance(raw, self.ir.IRNode) and not re.fullmatch(r"\w+", a):
                return self.ref(raw)
            if re.fullmatch(r"\w+", a) and not re.fullmatch(r"-?\d+", a):
                if isinstance(ty, torch.dtype) or self._is_buffer(a):
                    return {"kind": "buffer", "value": self.declare_name(a)}
                return {"kind": "expr", "value": self.text_expr(a)}
            if re.fullmatch(r"-?\d+", a):
                return {"kind": "expr", "value": int(a)}
            m = re.fullmatch(r"(\w+)\.item\(\)", a)
            if m:
                raise Unconvertible(f"kernel argument `{a}` (a 0-d tensor read on the host)")
            raise Unconvertible(f"kernel argument text `{a}`")
        if isinstance(a, bool):
            return {"kind": "bool", "value": a}
        if isinstance(a, int):
            return {"kind": "expr", "value": a}
        if isinstance(a, float):
            return self.const(a)
        if isinstance(a, sympy.Basic):
            return {"kind": "expr", "value": self.expr(self.graph.sizevars.simplify(a))}
        if a is None:
            return {"kind": "none"}
        raise Unconvertible(f"kernel argument {a!r} of type {type(a).__name__}")

    def _is_buffer(self, name):
        if name in self.buffers or name in self.graph.graph_inputs:
            return True
        try:
            return self.graph.get_buffer(name) is not None
        except Exception:
            return False

    # ---- extern calls ------------------------------------------------------------------------

    def extern_call(self, node, out, emit=True):
        ir = self.ir
        op = op_name(node)
        tensor_refs = [self.ref(x) for x in node.inputs]
        placeholders = [BufRef(r["value"]) if r["kind"] == "buffer" else Passthrough(r) for r in tensor_refs]
        if callable(getattr(node, "unflatten_args", None)):
            args, kwargs_from_args = node.unflatten_args(placeholders, node.constant_args)
        else:
            args, kwargs_from_args = list(placeholders) + list(node.constant_args), {}
        kwargs = dict(kwargs_from_args or {})
        for k, v in (getattr(node, "kwargs", None) or {}).items():
            kwargs[k] = v
        kwargs.pop("out", None)
        d = {"line": "extern_kernel_out" if out else "extern_kernel_alloc", "op": op,
             "args": [self.arg(a) for a in args]}
        kw = {k: self.arg(v) for k, v in kwargs.items()}
        if kw:
            d["kwargs"] = kw
        if out:
            target = getattr(node, "output_view", None) or node
            d["out"] = self.ref(target)["value"]
        else:
            layout = node.get_output_spec() if hasattr(node, "get_output_spec") else node.layout
            if not isinstance(layout, ir.NoneLayout):
                d["result"] = self.declare_node(node)
        if emit:
            self.emit(d)
        return d

    def extern_multi_out(self, line):
        """`buf1 = op.out(x, ..., out0=buf2, out1=buf3)`: the outputs, allocated before, by keyword."""
        node = line.node
        d = self.extern_call(node, out=False, emit=False)
        d["line"] = "extern_kernel_multi_out"
        outs = {}
        for name, out_node in zip(node.out_arg_names, node.out_variant_output_nodes):
            if name in d.get("kwargs", {}) or name in outs:
                raise Unconvertible(f"`{d['op']}`: output keyword `{name}` given twice")
            outs[str(name)] = self.declare_node(out_node)
        d["outs"] = outs
        self.emit(d)

    def arg(self, v):
        if isinstance(v, BufRef):
            return {"kind": "buffer", "value": v.name}
        if isinstance(v, Passthrough):
            return v.value
        if isinstance(v, (list, tuple)):
            return {"kind": "list", "value": [self.arg(x) for x in v]}
        if isinstance(v, self.ir.IRNode):
            return self.ref(v)
        return self.const(v)

    def multi_output(self, line):
        res = line.result_name
        try:
            node = self.graph.get_buffer(res)
        except Exception:
            node = None
        if node is not None:
            self.declare_node(node)
        elif res not in self.buffers:
            raise Unconvertible(f"multi-output result `{res}` has no buffer")
        src = line.arg_name
        if src not in self.buffers:
            self.declare_name(src)
        idx = []
        for ty, k in line.indices:
            tname = ty.__name__ if isinstance(ty, type) else str(ty)
            if tname not in ("list", "tuple", "dict"):
                raise Unconvertible(f"multi-output index kind {tname}")
            idx.append({"kind": tname, "index": k if tname == "dict" else int(k)})
        d = {"line": "multi_output", "result": res, "source": src}
        if idx:
            d["indices"] = idx
        self.emit(d)

    def keypath(self, path):
        from torch.fx.experimental import symbolic_shapes as S
        from torch.utils._pytree import SequenceKey

        out = []
        for k in path:
            if isinstance(k, S.CallMethodKey):
                out.append({"kind": "call_method", "value": k.name})
            elif isinstance(k, SequenceKey):
                out.append({"kind": "index", "value": int(k.idx)})
            elif isinstance(k, S.DivideByKey):
                out.append({"kind": "divide_by", "value": int(k.divisor)})
            elif isinstance(k, S.ConvertIntKey):
                out.append({"kind": "convert_int"})
            elif type(k).__name__ == "InnerTensorKey":
                out.append({"kind": "inner_tensor", "value": k.inner_name})
            else:
                raise Unconvertible(f"key path entry {k!r}")
        return out

    def unbacked_defs(self, line):
        from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings

        b = resolve_unbacked_bindings(self.graph.sizevars.shape_env, line.unbacked_bindings)
        if not b:
            return
        src = line.output_name
        if src not in self.buffers:
            self.declare_name(src)
        bindings = {}
        for sym, path in b.items():
            if sym.name in self.unbacked_bound:
                # Inductor binds an unbacked symbol again where another op's output has the
                # same data-dependent size (three `x[mask]` of one mask: `u0 = buf4.size(0)`
                # after `u0 = buf1.size(0)`), in Python a rebinding to the same value.
                # wrapir's symbols are bound once: the first binding stands, and the size
                # assert Inductor writes after the op checks the later output against it.
                continue
            self.unbacked_bound.add(sym.name)
            self.cap.symbols.add(sym.name)
            bindings[sym.name] = self.keypath(path)
        if bindings:
            self.emit({"line": "unbacked_symbol_defs", "source": src, "bindings": bindings})

    # ---- whole graph --------------------------------------------------------------------------

    def finish(self):
        g = self.graph
        from torch._inductor import config as icfg

        inputs = []
        for name, value in g.graph_inputs.items():
            if isinstance(value, self.sympy.Expr):
                if not value.is_Symbol:
                    # A compound input (`2*s0 + 1`: a branch closing over a size
                    # expression): its value is the expression, whose symbols the
                    # graph solves (main) or takes from its caller (a subgraph).
                    if value.is_integer is not True:
                        self.cap.errors.append(
                            f"{self.cap.name}: input {name} is the non-integer expression `{value}`")
                        continue
                    inputs.append({"kind": "sym_expr", "name": name, "expr": self.expr(value)})
                    continue
                self.cap.symbols.add(value.name)
                inputs.append({"kind": "symbol", "name": name, "symbol": value.name})
            else:
                self.declare_name(name)
                inputs.append({"kind": "tensor", "name": name})
        outputs = []
        for out in g.graph_outputs:
            try:
                r = self.ref(out)
            except Unconvertible as e:
                self.cap.errors.append(f"{self.cap.name}: output: {e}")
                continue
            if r["kind"] == "buffer":
                outputs.append({"kind": "buffer", "value": r["value"]})
            elif r["kind"] == "expr":
                outputs.append({"kind": "expr", "value": r["value"]})
            elif r["kind"] == "none":
                outputs.append({"kind": "none"})
            else:
                self.cap.errors.append(f"{self.cap.name}: output of kind {r['kind']}")
        if getattr(icfg, "nan_asserts", False):
            # Inductor checks each tensor input for NaN/Inf in the prefix
            # (`codegen_input_nan_asserts`) and each tensor output before `return`
            # (`generate_return`), in text outside the lines: typed here.
            first = [{"line": "assert_finite", "buffer": inp["name"]} for inp in inputs if inp["kind"] == "tensor"]
            self.lines[:0] = first
            self.lines.extend({"line": "assert_finite", "buffer": o["value"]} for o in outputs if o["kind"] == "buffer")
        # Input declarations first, in input order, for readability. Program constants
        # (Inductor's folded / frozen tensors) are declared once, in program.json's
        # `constants`, not as buffers of the graph.
        ordered = {}
        for inp in inputs:
            if inp["kind"] == "tensor":
                ordered[inp["name"]] = self.buffers[inp["name"]]
        for k, v in self.buffers.items():
            if k not in self.cap.constants:
                ordered.setdefault(k, v)
        self.cap.graph = {"inputs": inputs, "buffers": ordered, "lines": self.lines, "outputs": outputs}
        self.symbol_table()

    def symbol_table(self):
        shape_env = self.graph.sizevars.shape_env
        for name in sorted(self.cap.symbols):
            if name in self.cap.symbol_info:
                continue
            kind = exprs.symbol_kind(name)
            info = {"kind": kind}
            sym = None
            origin = self.symbol_origins.get(name, name)
            for s in list(shape_env.var_to_range.keys()):
                if s.name == origin:
                    sym = s
                    break
            if sym is not None and kind not in ("precomputed", "unbacked_float"):
                vr = shape_env.var_to_range[sym]
                rng = {}
                for key, v in (("lo", vr.lower), ("hi", vr.upper)):
                    try:
                        if v.is_Integer or isinstance(v, int):
                            rng[key] = int(v)
                    except Exception:
                        pass
                if rng:
                    info["range"] = rng
                hints = getattr(shape_env, "backed_var_to_val", None)
                if hints is None:  # before torch renamed it
                    hints = shape_env.var_to_val
                hint = hints.get(sym)
                if hint is not None:
                    try:
                        info["hint"] = int(hint)
                    except Exception:
                        pass
            self.cap.symbol_info[name] = info
