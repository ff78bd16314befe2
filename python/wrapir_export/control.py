"""`torch.cond`, `torch.switch` and `torch.while_loop` in the Python wrapper: Inductor
writes them as raw text around subgraph calls. The capturing wrapper brackets that text
with `ControlMarker`s (its `codegen_conditional` / `codegen_switch` /
`codegen_while_loop`); this module turns one bracket into one `conditional` (PyTorch
2.11-2.13's `torch.cond`), `switch` (2.14+: `ir.Switch`, for `torch.cond` and
`torch.switch`) or `while_loop` line and accepts only the text Inductor writes for it,
so a change in Inductor's text is an error rather than a dropped line.
"""

from __future__ import annotations

import re

from .errors import Unconvertible


class ControlMarker:
    """Brackets the lines Inductor writes for one conditional / while loop (emits nothing)."""

    def __init__(self, kind, node, end=False, stack_output=False):
        self.kind = kind
        self.node = node
        self.end = end
        self.stack_output = stack_output


CONTROL_TEXT = [
    re.compile(r"^\w+ = \[None\] \* \d+$"),
    re.compile(r"^if .*:$"),
    re.compile(r"^else:$"),
    re.compile(r"^$"),
    re.compile(r"^# subgraph: \w+$"),
    re.compile(r"^\w+_args = \[.*\]$"),
    re.compile(r"^\w+ = \w+\(\w+_args\)$"),
]


def describe(line):
    """A short description of a Wrapper IR line for error messages."""
    if isinstance(line, str):
        return repr(line)
    t = type(line).__name__
    for attr in ("kernel_name", "line", "name"):
        v = getattr(line, attr, None)
        if isinstance(v, str):
            return f"{t} {v[:80]!r}"
    node = getattr(line, "node", None)
    if node is not None and hasattr(node, "get_name"):
        try:
            return f"{t} {node.get_name()}"
        except Exception:
            pass
    return t


def line_text(line):
    """The text of a raw text line (a str or a DeferredLine), else None."""
    from torch._inductor.codegen.common import DeferredLine

    if isinstance(line, str):
        return line
    if isinstance(line, DeferredLine):
        return line.line
    return None


def is_control_text_str(t, texts=None):
    """Whether stripped text `t` is Inductor's text for a conditional / loop: exactly one
    of `texts` when given (or empty), else a match of CONTROL_TEXT."""
    if texts is not None:
        return t == "" or t in texts
    return any(p.match(t) for p in CONTROL_TEXT)


def is_control_text(line, W, texts=None):
    """Whether `line` is part of Inductor's text for a conditional / loop: scope lines,
    comments, and text matching CONTROL_TEXT or, when given, exactly one of `texts`."""
    if isinstance(line, (W.EnterSubgraphLine, W.ExitSubgraphLine)):
        return True
    if isinstance(line, W.CommentLine):
        return True
    t = line_text(line)
    if t is None:
        from torch._inductor.utils import LineContext

        return isinstance(line, LineContext)
    return is_control_text_str(t.strip(), texts)


def subgraph_name(sub):
    g = getattr(sub, "graph", None)
    return getattr(g, "name", None) or sub.name


def while_texts_for(name, carried, additional, subgraphs):
    """Every text line Inductor's `codegen_while_loop` (Python, JIT, no stacking) writes
    for loop `name`, stripped: the carried-value list and its initial values, the
    `.clone()`s for a loop that never runs, `should_loop`, `while should_loop:`, and the
    argument lists and calls of the cond and body subgraphs
    (`codegen_subgraph_call_with_flattened_outputs`). `carried` / `additional` are the
    operands' references; `subgraphs` is ((cond IR name, cond graph name), (body IR
    name, body graph name))."""

    def seq(xs):
        return ", ".join(xs) + ("," if len(xs) == 1 else "")

    slots = [f"{name}[{k}]" for k in range(len(carried))]
    inputs = seq(slots + list(additional))
    texts = {f"{name} = [None] * {len(carried)}", f"should_loop = {name}_cond_result",
             "if not should_loop:", "while should_loop:"}
    for k, ref in enumerate(carried):
        texts.add(f"{name}[{k}] = {ref}")
        texts.add(f"{name}[{k}] = {ref}.clone()")
    (cond_ir, cond_g), (body_ir, body_g) = subgraphs
    for ir_name, g, outs in ((cond_ir, cond_g, [f"{name}_cond_result"]), (body_ir, body_g, slots)):
        texts.add(f"# subgraph: {ir_name}")
        texts.add(f"{g}_args = [{inputs}]")
        texts.add(f"({seq(outs)}) = {g}({g}_args)")
    return texts


def switch_texts_for(name, selector, selector_is_tensor, operands, branches, outputs):
    """Every text line Inductor's `codegen_switch` (Python, JIT; PyTorch 2.14+) writes for
    switch `name`, stripped: the selector (`int(pred.item())` for a tensor, `int(expr)` for
    a size expression), the result list, `if` / `elif` / `else` on the selector, and each
    branch's subgraph comment, argument list and call (`codegen_subgraph_call`).
    `operands` are the operands' references; `branches` is ((IR name, graph name), ...)
    in `node.branches` order; `outputs` the number of results."""
    sel = f"{name}_selector"
    inputs = ", ".join(operands) + ("," if len(operands) == 1 else "")
    texts = {f"{sel} = int({selector}.item())" if selector_is_tensor else f"{sel} = int({selector})",
             f"{name} = [None] * {outputs}"}
    for k, (ir_name, g) in enumerate(branches):
        if k == 0:
            texts.add(f"if {sel} == 0:")
        elif k < len(branches) - 1:
            texts.add(f"elif {sel} == {k}:")
        else:
            texts.add("else:")
        texts.add(f"# subgraph: {ir_name}")
        texts.add(f"{g}_args = [{inputs}]")
        texts.add(f"{name} = {g}({g}_args)")
    return texts


class ControlFlowMixin:
    """`GraphConverter`'s handling of one bracketed conditional / while loop."""

    def convert_control(self, lines, i):
        start = lines[i]
        W = self.W
        if start.end:
            raise Unconvertible(f"end of a {start.kind} lowering without its start")
        texts = None
        if start.kind == "switch":
            texts = self.switch_texts(start.node)
        if start.kind == "while":
            if start.stack_output:
                raise Unconvertible(
                    "while_loop with stack_output=True (every iteration's carried values stacked, "
                    "as training needs) has no wrapir counterpart")
            texts = self.while_texts(start.node)
        j = i + 1
        depth = 1
        frees = []
        while j < len(lines):
            ln = lines[j]
            if isinstance(ln, ControlMarker):
                depth += 1 if not ln.end else -1
                if depth == 0:
                    break
            elif isinstance(ln, (W.FreeLine, W.FreeIfNotReusedLine)):
                frees.append(ln)
            elif isinstance(ln, W.NullLine) or is_control_text(ln, W, texts):
                pass
            else:
                raise Unconvertible(f"unexpected line inside {start.kind} lowering: {describe(ln)}")
            j += 1
        if depth != 0:
            raise Unconvertible(f"{start.kind} lowering without its end")
        node = start.node
        if start.kind == "cond":
            pred = node.predicate
            if isinstance(pred, self.ir.ShapeAsConstantBuffer):
                predicate = {"kind": "expr", "value": self.expr(pred.expr)}
            else:
                predicate = {"kind": "tensor", "value": self.ref(pred)["value"]}
            operands = [self.loop_operand(x, f"operand {k} of cond {node.get_name()}")
                        for k, x in enumerate(node.operands)]
            res = node.get_name()
            self.buffers[res] = {"kind": "multi"}
            self.emit({"line": "conditional", "result": res, "predicate": predicate,
                       "true_graph": subgraph_name(node.true_subgraph),
                       "false_graph": subgraph_name(node.false_subgraph),
                       "operands": operands})
        elif start.kind == "switch":
            self.emit_switch(node)
        else:
            name = node.get_name()
            carried = []
            for k, x in enumerate(node.carried_inputs):
                r = self.ref(x)
                if r["kind"] != "buffer":
                    raise Unconvertible(
                        f"carried input {k} of while_loop {name} is `{x}`, not a tensor "
                        "(wrapir's while_loop carries tensors; symbolic carries are not supported)")
                carried.append(r["value"])
            additional = [self.loop_operand(x, f"additional input {k} of while_loop {name}")
                          for k, x in enumerate(node.additional_inputs)]
            res = name
            self.buffers[res] = {"kind": "multi"}
            d = {"line": "while_loop", "result": res, "cond_graph": subgraph_name(node.cond_subgraph),
                 "body_graph": subgraph_name(node.body_subgraph), "carried": carried}
            if additional:
                d["additional"] = additional
            self.emit(d)
        for f in frees:
            self.convert_one([f], 0)
        return j + 1

    def emit_switch(self, node):
        """One `switch` line for an `ir.Switch` (`torch.cond` on PyTorch 2.14+, where
        `branches` is [false, true], or an n-way `torch.switch`)."""
        name = node.get_name()
        sel = node.selector
        if isinstance(sel, self.ir.ShapeAsConstantBuffer):
            selector = {"kind": "expr", "value": self.expr(sel.expr)}
        else:
            r = self.ref(sel)
            if r["kind"] != "buffer":
                raise Unconvertible(f"selector of switch {name} is `{sel}`, neither a tensor nor an expression")
            selector = {"kind": "tensor", "value": r["value"]}
        operands = [self.loop_operand(x, f"operand {k} of switch {name}") for k, x in enumerate(node.operands)]
        self.buffers[name] = {"kind": "multi"}
        d = {"line": "switch", "result": name, "selector": selector,
             "branches": [subgraph_name(b) for b in node.branches], "operands": operands}
        if getattr(node, "is_cond", False):
            d["cond"] = True
        self.emit(d)

    def switch_texts(self, node):
        """`switch_texts_for` this switch's IR node."""
        sel = node.selector
        return switch_texts_for(
            node.get_name(), sel.codegen_reference(), not isinstance(sel, self.ir.ShapeAsConstantBuffer),
            [b.codegen_reference() for b in node.operands],
            [(b.name, subgraph_name(b)) for b in node.branches], len(node.outputs))

    def loop_operand(self, x, what):
        """A subgraph operand: a buffer name, or the name of a symbol Inductor passes as
        it is (`s77`: the subgraph's matching input is a symbol input)."""
        r = self.ref(x)
        if r["kind"] == "buffer":
            return r["value"]
        e = x.expr if isinstance(x, self.ir.ShapeAsConstantBuffer) else x
        if r["kind"] == "expr" and isinstance(e, self.sympy.Symbol):
            self.cap.symbols.add(e.name)
            return e.name
        if r["kind"] == "expr" and isinstance(e, self.sympy.Expr) and e.is_integer is True:
            # A size expression (`2*s0 + 1`): named by a precomputed symbol bound
            # just before the call, which the operand passes.
            return self.operand_symbol(e)
        raise Unconvertible(f"{what} is `{x}`, neither a buffer nor an integer expression")

    def operand_symbol(self, e):
        """A fresh precomputed symbol (`wrapir_operand0`) bound to `e` by a
        `symbolic_call_arg` line here: the name a subgraph operand passes."""
        taken = self.cap.symbols
        k = 0
        while f"wrapir_operand{k}" in taken:
            k += 1
        name = f"wrapir_operand{k}"
        self.cap.symbols.add(name)
        self.bound_precomputed.add(name)
        self.emit({"line": "symbolic_call_arg", "symbol": name, "expr": self.expr(e)})
        return name

    def while_texts(self, node):
        """`while_texts_for` this loop's IR node."""
        return while_texts_for(
            node.get_name(),
            [b.codegen_reference() for b in node.carried_inputs],
            [b.codegen_reference() for b in node.additional_inputs],
            ((node.cond_subgraph.name, subgraph_name(node.cond_subgraph)),
             (node.body_subgraph.name, subgraph_name(node.body_subgraph))))
