"""`torch.compiler.nested_compile_region` (Inductor's `invoke_subgraph`): the region's
graph spliced into its caller at each call.

Inductor's Python wrapper lowers a region to a function, generated once
(`codegen_subgraph_common`) and called at each use (`codegen_invoke_subgraph`)::

    buf0 = [None] * 1
    # subgraph: repeated_subgraph0
    repeated_subgraph0_args = [arg0_1,]
    buf0 = repeated_subgraph0(repeated_subgraph0_args)
    buf1 = buf0[0]

wrapir has no call line: as Inductor's AOT wrapper does (`codegen_subgraph_by_inlining`),
each call runs the region's lines in place. The capturing wrapper (`capture.py`)
brackets the call's text with `InvokeSubgraphMarker`s and hands the region's `Capture`
(its graph converted when Inductor generated the function) to the start marker; the
converter checks the text between the markers against what Inductor writes, and
splices a copy of the region's converted lines in its place:

- the region's tensor inputs become the caller's operands (a size input must be the
  caller's own value for it: the region shares the caller's shape environment);
- every buffer the region declares gets a name of its own for this call (a region's
  output takes the name of the caller's `MultiOutput` for it, whose line is then
  dropped; an output that is one of the region's inputs, or a buffer returned twice,
  is a `reinterpret` alias of it under that name), so two calls never share a buffer;
- the symbols the region binds for its own use (precomputed sizes, a kernel's numel)
  get a name of their own for this call, and so does an unbacked symbol it binds that
  an earlier call bound (the next free `u<k>`, with the range of the region's symbol);
- the region's `free` of its own inputs is dropped (in Inductor's function that
  deletes a local name; the caller frees its buffers after the call, as it does);
- a kernel the graph already defines is not defined again;
- the buffers the region leaves live (its function's locals, which die when it
  returns) are freed after its lines, except the storage its outputs hold.

The caller's lines for the call (the result list, its `free`, the `MultiOutput`s) are
dropped; the region's graph is left out of the program's subgraphs (`Capture.inlined`).
"""

from __future__ import annotations

import copy
import re

from .control import describe, is_control_text
from .errors import Unconvertible
from .exprs import symbol_kind

REGION = "a `torch.compiler.nested_compile_region`"


class InvokeSubgraphMarker:
    """A marker in the captured lines: the start (or `end`) of Inductor's text for one call
    of an `ir.InvokeSubgraph`. The start marker holds the region's `Capture` (`capture`),
    set once Inductor has generated the region's function."""

    def __init__(self, node, end=False):
        self.node = node
        self.end = end
        self.capture = None


def region_texts(call, operands, comment_name, function, outputs):
    """Every text line Inductor's `codegen_invoke_subgraph` (Python, JIT) writes for call
    `call`, stripped: the result list, the `# subgraph:` comment, the argument list and the
    call of the region's function `function`."""
    args = ", ".join(operands) + ("," if len(operands) == 1 else "")
    return {f"{call} = [None] * {outputs}", f"# subgraph: {comment_name}",
            f"{function}_args = [{args}]", f"{call} = {function}({function}_args)"}


def binding_symbols(line):
    """The symbols a converted line binds."""
    kind = line.get("line")
    if kind in ("symbolic_call_arg", "dynamic_scalar"):
        return [line["symbol"]]
    if kind == "unbacked_symbol_defs":
        return list(line["bindings"])
    return []


def renamed(value, names, symbols):
    """`value` (converted JSON) with each string equal to a key of `names` replaced by its
    value, and each symbol of `symbols` (a name -> name map) renamed inside expressions."""
    pattern = None
    if symbols:
        alternatives = "|".join(re.escape(s) for s in sorted(symbols, key=len, reverse=True))
        pattern = re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?![A-Za-z0-9_])")

    def go(x):
        if isinstance(x, str):
            if x in names:
                return names[x]
            if pattern is not None:
                return pattern.sub(lambda m: symbols[m.group(0)], x)
            return x
        if isinstance(x, list):
            return [go(v) for v in x]
        if isinstance(x, dict):
            if x.get("line") == "comment":
                return dict(x)
            return {(go(k) if isinstance(k, str) and k in symbols else k): go(v) for k, v in x.items()}
        return x

    return go(value)


def left_live(lines, buffers, kept):
    """The tensor buffers that own a storage which `lines` define and no line of theirs
    ends, in definition order, less those whose storage a name of `kept` holds (the
    name, or a view of it)."""
    owners, views, ended = [], {}, set()
    for ln in lines:
        kind = ln.get("line")
        if kind == "allocate":
            owners.append(ln["buffer"])
        elif kind == "reuse":
            owners.append(ln["new"])
            ended.add(ln["old"])
        elif kind in ("extern_kernel_alloc", "extern_kernel_multi_out", "multi_output") and "result" in ln:
            owners.append(ln["result"])
        elif kind == "reinterpret":
            views[ln["alias"]] = ln["base"]
        elif kind in ("free", "free_if_not_reused"):
            ended.add(ln["buffer"])
    held = set()
    for name in kept:
        seen = 0
        while name in views and seen <= len(views):
            name, seen = views[name], seen + 1
        held.add(name)
    return [b for b in owners
            if b not in ended and b not in held and buffers.get(b, {}).get("kind") == "tensor"]


class RegionMixin:
    """`GraphConverter`'s handling of the calls of nested compile regions."""

    def convert_region(self, lines, i):
        """Converts the bracketed call starting at `lines[i]`; returns the index after it."""
        start = lines[i]
        W = self.W
        node = start.node
        call = node.get_name()
        region = getattr(node.subgraph, "name", None) or "a subgraph"
        if start.end:
            raise Unconvertible(f"end of the call `{call}` of {REGION} without its start")
        g = node.subgraph.graph
        texts = region_texts(call, [b.codegen_reference() for b in node.inputs], region,
                             g.name, len(node.outputs))
        j = i + 1
        frees = []
        while j < len(lines):
            ln = lines[j]
            if isinstance(ln, InvokeSubgraphMarker):
                if ln.end and ln.node is node:
                    break
                raise Unconvertible(f"call `{call}` of {REGION} ({region}) interleaved with another call")
            if isinstance(ln, (W.FreeLine, W.FreeIfNotReusedLine)):
                frees.append(ln)
            elif not (isinstance(ln, W.NullLine) or is_control_text(ln, W, texts)):
                raise Unconvertible(f"unexpected line inside the call `{call}` of {REGION} ({region}): {describe(ln)}")
            j += 1
        if j == len(lines):
            raise Unconvertible(f"call `{call}` of {REGION} ({region}) without its end")
        try:
            self.splice_region(node, call, region, start.capture)
        except Unconvertible as e:
            # One error for the call: its `MultiOutput` and `free` lines are dropped.
            self.cap.errors.append(f"{self.cap.name}: line {i} ({describe(start)}): {e}")
            self.region_calls[call] = None
        # The operands the caller frees once they are in the argument list: after the call.
        for f in frees:
            self.convert_one([f], 0)
        return j + 1

    def splice_region(self, node, call, region, cap):
        """Emits the region's converted lines for call `call` (see the module's docs)."""
        sympy, ir = self.sympy, self.ir
        what = f"`{call}` calls {region}, {REGION}"
        if cap is None or cap.graph is None:
            raise Unconvertible(f"{what} whose graph was not converted (its own errors say why)")
        cap.inlined = True
        graph = cap.graph
        inner_inputs = list(node.subgraph.graph.graph_inputs.items())
        if len(inner_inputs) != len(node.inputs):
            raise Unconvertible(f"{what} with {len(node.inputs)} operands for {len(inner_inputs)} inputs")
        names = {}  # the region's buffer name -> this call's
        for k, ((inner, value), operand) in enumerate(zip(inner_inputs, node.inputs)):
            if isinstance(value, sympy.Expr):
                outer = operand.expr if isinstance(operand, ir.ShapeAsConstantBuffer) else operand
                if not isinstance(outer, sympy.Expr) or sympy.simplify(outer - value) != 0:
                    raise Unconvertible(f"{what}: operand {k} is `{outer}` where the region's input {inner} "
                                        f"is `{value}`")
                continue
            outer = self.loop_operand(operand, f"operand {k} of {what}")
            mine, theirs = graph["buffers"].get(inner, {}).get("layout"), self.buffers.get(outer, {}).get("layout")
            fields = ("dtype", "device", "size", "stride")
            if mine is None or theirs is None or any(mine.get(f) != theirs.get(f) for f in fields):
                raise Unconvertible(f"{what}: operand {k} `{outer}` has the layout {theirs}, the region's input "
                                    f"{inner} {mine}")
            names[inner] = outer
        inputs = set(names)

        outputs = list(node.outputs)
        if len(outputs) != len(graph["outputs"]):
            raise Unconvertible(f"{what} returning {len(graph['outputs'])} values to {len(outputs)} outputs")
        aliases = []   # (caller's output node, the region's buffer it is)
        results = {}   # output index -> the caller's name for it
        for k, (out, outer) in enumerate(zip(graph["outputs"], outputs)):
            if out["kind"] != "buffer":
                continue  # a size or None: the caller uses the value itself
            if not isinstance(outer, ir.MultiOutput):
                raise Unconvertible(f"{what}: output {k} is a tensor the caller takes as {type(outer).__name__}")
            results[k] = outer.get_name()
            inner = out["value"]
            if inner in graph["buffers"] and inner not in names:
                names[inner] = outer.get_name()
            else:
                aliases.append((outer, inner))
        taken = set(self.buffers) | set(names.values())
        for inner in graph["buffers"]:
            if inner not in names:
                fresh, k = f"{call}_{inner}", 0
                while fresh in taken:
                    k += 1
                    fresh = f"{call}_{inner}_{k}"
                names[inner] = fresh
                taken.add(fresh)
        for inner, mine in names.items():
            if inner not in inputs and mine in self.buffers:
                raise Unconvertible(f"{what}: the name `{mine}` for its `{inner}` is already a buffer of the caller")

        bound = {s for ln in self.lines for s in binding_symbols(ln)}
        symbols = {}  # the region's own symbols -> this call's
        for ln in graph["lines"]:
            for s in binding_symbols(ln):
                # The kind the region's graph gave it: a slice's length bound by a let line
                # is precomputed whatever its name (`u2 = max(0, min(10, u1))`).
                if cap.symbol_info.get(s, {}).get("kind", symbol_kind(s)) == "precomputed":
                    fresh, k = f"{s}_{call}", 0
                    while fresh in self.cap.symbols or fresh in symbols.values():
                        k += 1
                        fresh = f"{s}_{call}_{k}"
                    symbols[s] = fresh
                elif s in bound:
                    # An unbacked symbol an earlier call bound: this call's value may differ.
                    symbols[s] = self.fresh_unbacked(s, set(symbols.values()) | cap.symbols)
                    self.symbol_origins[symbols[s]] = s

        defined = {ln["kernel"] for ln in self.lines if ln.get("line") == "kernel_definition"}
        self.emit({"line": "comment", "text": f"{region} (nested_compile_region) inlined: call {call}"})
        for inner, decl in graph["buffers"].items():
            if inner not in inputs:
                self.buffers[names[inner]] = renamed(decl, names, symbols)
        spliced = []
        for ln in graph["lines"]:
            if ln.get("line") == "kernel_definition" and ln["kernel"] in defined:
                continue
            if ln.get("line") in ("free", "free_if_not_reused") and ln["buffer"] in inputs:
                continue
            spliced.append(renamed(ln, names, symbols))
        for outer, inner in aliases:
            alias = self.declare_node(outer)
            spliced.append({"line": "reinterpret", "base": names.get(inner, inner), "alias": alias})
        # Inductor's function returns here, and its locals die: the buffers it did not free.
        kept = set(results.values())
        spliced += [{"line": "free", "buffer": b} for b in left_live(spliced, self.buffers, kept)]
        for ln in spliced:
            self.emit(ln)
        for s in cap.symbols:
            self.cap.symbols.add(symbols.get(s, s))
        self.bound_precomputed.update(symbols.values())
        self.unbacked_bound.update(s for ln in graph["lines"] for s in binding_symbols(ln) if s not in symbols)
        self.region_calls[call] = results

    def fresh_unbacked(self, s, taken):
        """A name for another binding of the unbacked symbol `s` (`u3`, `zuf1`): the next
        index of its kind after every symbol the shape environment, this graph and `taken`
        have."""
        prefix = "zuf" if s.startswith("zuf") else "u"
        names = {str(v) for v in self.graph.sizevars.shape_env.var_to_range} | self.cap.symbols | taken
        used = [int(n[len(prefix):]) for n in names if re.fullmatch(rf"{prefix}\d+", n)]
        return f"{prefix}{max(used, default=-1) + 1}"

    def region_call_remnant(self, line):
        """Whether `line` is the caller's line for a spliced call's result (its
        `MultiOutput`, its `free`), which the splice replaces."""
        W = self.W
        if isinstance(line, W.MultiOutputLine) and line.arg_name in self.region_calls:
            results = self.region_calls[line.arg_name]
            if results is None:  # the call was not spliced (its error is reported)
                return True
            idx = [(getattr(ty, "__name__", str(ty)), k) for ty, k in line.indices]
            if len(idx) != 1 or idx[0][0] not in ("list", "tuple") or results.get(int(idx[0][1])) != line.result_name:
                raise Unconvertible(f"`{line.result_name}` = `{line.arg_name}`{idx}: not an output the call of "
                                    f"{REGION} was spliced with")
            return True
        if isinstance(line, (W.FreeLine, W.FreeIfNotReusedLine)):
            return line.node.get_name() in self.region_calls
        if isinstance(line, W.UnbackedSymbolDefsLine) and line.output_name in self.region_calls:
            raise Unconvertible(f"unbacked symbols bound from the outputs of the call `{line.output_name}` of "
                                f"{REGION}: not supported")
        return False
