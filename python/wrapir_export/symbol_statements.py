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
expression. Each `x if c else y` (`c` is the sign of an integer bound or index) is the
branch Inductor's size variables decide (constants, or symbols whose ranges decide it);
where they do not (a bound read from a tensor, `n = p.item(); x[n:]`), it is the exact
integer form `x + min(1, max(0, -b)) * (y - x)` of the bound `b`. The text lines that
follow the marker are then skipped by name.
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

    def by_sign(x, if_nonneg, if_neg):
        """`if_nonneg if x >= 0 else if_neg` for an integer `x`: the branch where the size
        variables decide the sign, else both, selected by `min(1, max(0, -x))` (1 exactly
        when `x < 0`)."""
        sign = _sign(x, sizevars, sympy)
        if sign is not None:
            return if_nonneg if sign else if_neg
        return if_nonneg + sympy.Min(1, sympy.Max(0, -x)) * (if_neg - if_nonneg)

    if stmt.kind == "slice_size":
        size = n.size

        def clamp(x):
            # Python slicing: a negative bound counts from the end; both clamp to [0, size].
            return by_sign(x, sympy.Max(0, sympy.Min(x, size)), sympy.Max(0, sympy.Min(x + size, size)))

        start, end, step = clamp(n.start), clamp(n.end), n.step
        if step == 1:
            return sympy.Max(0, end - start)
        if not (isinstance(step, int) or getattr(step, "is_Integer", False)) or int(step) < 1:
            raise Unconvertible(f"`{sym}`: slice step `{step}` is not a positive integer constant")
        return sympy.Max(0, FloorDiv(end - start + step - 1, step))
    index = by_sign(n.index, n.index, n.index + n.size)
    if stmt.clamp:
        index = sympy.Max(0, sympy.Min(n.size, index))
    return n.base_offset + n.base_dim_stride * index
