"""Symbols Inductor computes with Python statements of its own: the length of a slice whose
bounds or input size are unbacked (`ir.DynamicSliceSize`) and the storage offset of a
`select` at an unbacked index (`ir.DynamicSelectStorageOffset`).

Inductor's wrapper writes them as text, not as typed Wrapper IR lines::

    u1_start = 0 if 0 >= 0 else max(0, u0)
    u1_end = max(0, min(10, u0)) if 10 >= 0 else max(0, u0)
    u1 = max(0, u1_end - u1_start)

    u2 = 0 + 1 * (u1 + 8 if u1 < 0 else u1)

The capturing wrapper (`capture.py`) puts a `SymbolStatement` marker holding the IR node
before that text. The converter reads the node's fields (sympy expressions), not the text:
each statement becomes one `symbolic_call_arg` line binding the symbol to a size
expression, with every `x if c else y` decided from what Inductor's size variables know
(`c` on constants, or on symbols whose ranges decide it). A condition they do not decide
(a slice bound of unknown sign) has no size expression: that statement is refused, naming
the symbol. The text lines that follow the marker are then skipped by name.
"""

from __future__ import annotations

from .errors import Unconvertible


class SymbolStatement:
    """A marker in the captured lines: `node` is Inductor's `DynamicSliceSize` (`kind`
    `"slice_size"`) or `DynamicSelectStorageOffset` (`"select_offset"`, with `clamp`)."""

    def __init__(self, kind, node, clamp=False):
        self.kind = kind
        self.node = node
        self.clamp = bool(clamp)

    def symbol(self):
        n = self.node
        return str(n.unbacked_size_symbol if self.kind == "slice_size" else n.unbacked_offset_symbol)

    def text_names(self):
        """The names the statements Inductor writes after the marker assign, in order."""
        s = self.symbol()
        return [f"{s}_start", f"{s}_end", s] if self.kind == "slice_size" else [s]


def _sign(x, sizevars, sympy):
    """`True` when `x >= 0` is known, `False` when `x < 0` is known, else `None`."""
    if isinstance(x, int) or getattr(x, "is_Integer", False):
        return int(x) >= 0
    known = getattr(sizevars, "statically_known_true", None)
    if known is None:
        return None
    if known(sympy.Ge(x, 0)):
        return True
    if known(sympy.Lt(x, 0)):
        return False
    return None


def symbol_value(stmt, sizevars, sympy):
    """The size expression the statements bind `stmt.symbol()` to (a sympy expression), as
    Inductor's `codegen_dynamic_slice_size` / `codegen_dynamic_select_index` compute it."""
    from torch.utils._sympy.functions import FloorDiv

    n, sym = stmt.node, stmt.symbol()

    def decided(x, what):
        sign = _sign(x, sizevars, sympy)
        if sign is None:
            raise Unconvertible(
                f"`{sym}`: the sign of {what} `{x}` is not known when the program is compiled, so "
                f"Inductor's `... if {x} >= 0 else ...` has no size expression (wrapir binds "
                f"symbols to size expressions)")
        return sign

    if stmt.kind == "slice_size":
        size = n.size

        def clamp(x, what):
            # Python slicing: a negative bound counts from the end; both clamp to [0, size].
            if decided(x, what):
                return sympy.Max(0, sympy.Min(x, size))
            return sympy.Max(0, sympy.Min(x + size, size))

        start, end, step = clamp(n.start, "the slice's start"), clamp(n.end, "the slice's end"), n.step
        if step == 1:
            return sympy.Max(0, end - start)
        if not (isinstance(step, int) or getattr(step, "is_Integer", False)) or int(step) < 1:
            raise Unconvertible(f"`{sym}`: slice step `{step}` is not a positive integer constant")
        return sympy.Max(0, FloorDiv(end - start + step - 1, step))
    index = n.index if decided(n.index, "the select index") else n.index + n.size
    if stmt.clamp:
        index = sympy.Max(0, sympy.Min(n.size, index))
    return n.base_offset + n.base_dim_stride * index
