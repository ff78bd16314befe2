"""Symbolic expressions as wrapir EXPRs: sympy expressions printed in the syntax wrapir's
expression parser reads, and expression text Inductor already printed (raw wrapper lines).

The text helpers are plain Python; `canon` / `plain_python` take sympy expressions
(sympy is imported when they are called).
"""

from __future__ import annotations

import re

from .errors import Unconvertible

# sympy node types whose Python printing by Inductor (`pexpr`) is exact and parseable by
# wrapir, so that the expression is exported exactly as Inductor's wrapper shows it.
PLAIN = {"Add", "Mul", "Symbol", "FloorDiv", "Min", "Max", "StrictLessThan", "LessThan",
         "StrictGreaterThan", "GreaterThan", "Equality", "Unequality"}

_TWO = {"FloorDiv": "FloorDiv", "CleanDiv": "CleanDiv", "Mod": "Mod", "PythonMod": "PythonMod"}
_REL = {"Equality": "Eq", "Unequality": "Ne", "StrictLessThan": "Lt", "LessThan": "Le",
        "StrictGreaterThan": "Gt", "GreaterThan": "Ge"}
_KEYWORDS = ("min", "max", "and", "or", "not", "True", "False")
_OUTSIDE = re.compile(r"math\.|\.\d|\d\.|\bsym_|\bfloat\(|\bint\(|\bif\b|/(?!/)")


def plain_python(e):
    """True when Inductor's Python printing of `e` is exact and parseable by wrapir."""
    import sympy

    for node in sympy.preorder_traversal(e):
        if node.is_Integer or node.is_Symbol:
            continue
        name = type(node).__name__
        if name == "Pow":
            if not (node.args[1].is_Integer and int(node.args[1]) >= 0):
                return False
            continue
        if name not in PLAIN:
            return False
    return True


def canon(e, top=False):
    """Prints a sympy expression in the syntax wrapir's expression parser reads."""
    import sympy

    name = type(e).__name__
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return e.name
    if e is sympy.true:
        return "True"
    if e is sympy.false:
        return "False"
    if isinstance(e, sympy.Add):
        terms = [canon(a) for a in sympy.Add.make_args(e)]
        return join_terms(terms, top)
    if isinstance(e, sympy.Mul):
        args = list(e.args)
        neg = False
        if args and args[0] == -1:
            neg, args = True, args[1:]
        s = "*".join(canon(a) for a in args)
        if neg:
            s = "-" + s
        return s if top and not neg else f"({s})" if not top else s
    if isinstance(e, sympy.Pow):
        b, n = e.args
        if n.is_Integer and int(n) >= 0:
            return f"Pow({canon(b, True)}, {int(n)})"
        raise Unconvertible(f"power with exponent {n} in `{e}`")
    if name in _TWO:
        a, b = e.args
        return f"{_TWO[name]}({canon(a, True)}, {canon(b, True)})"
    if name == "ModularIndexing":
        x, d, m = e.args
        return f"ModularIndexing({canon(x, True)}, {canon(d, True)}, {canon(m, True)})"
    if name in ("Min", "Max"):
        return f"{name.lower()}({', '.join(canon(a, True) for a in e.args)})"
    if name in _REL:
        a, b = e.args
        return f"{_REL[name]}({canon(a, True)}, {canon(b, True)})"
    if name in ("And", "Or"):
        return f"{name}({', '.join(canon(a, True) for a in e.args)})"
    if name == "Not":
        return f"Not({canon(e.args[0], True)})"
    raise Unconvertible(f"expression `{e}` uses `{name}`, which wrapir expressions cannot express")


def join_terms(terms, top):
    """The printed terms of a sum joined with ` + ` (or ` - ` for a negated term),
    parenthesised unless `top`."""
    s = terms[0]
    for t in terms[1:]:
        s += " - " + t[1:] if t.startswith("-") and not t.startswith("-(") else " + " + t
    return s if top else f"({s})"


def text_expr(text):
    """An expression Inductor already printed as Python text, checked against wrapir's
    expression syntax: returns (an int or the stripped text, the identifiers it names)."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text), []
    if _OUTSIDE.search(text.replace("//", "")):
        raise Unconvertible(f"expression text `{text}` is outside wrapir's expression syntax")
    idents = [i for i in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text) if i not in _KEYWORDS]
    return text, idents


def split_tuple_text(text):
    """The item texts of a printed shape tuple (`(s0, 4*s1, )`), stripped, parsed as Python
    so that nested parentheses (`1 + (((-1) + s69) // 2)`) stay inside their item."""
    import ast

    t = text.strip()
    try:
        tree = ast.parse(t, mode="eval").body
    except SyntaxError as e:
        raise Unconvertible(f"shape tuple text `{t}` does not parse: {e.msg}")
    if not (isinstance(tree, ast.Tuple) and t.startswith("(") and t.endswith(")")):
        raise Unconvertible(f"shape tuple text `{t}`")
    out = []
    for elt in tree.elts:
        it = ast.get_source_segment(t, elt)
        if "%" in it:
            raise Unconvertible(f"`%` in `{it}` is ambiguous (Mod or PythonMod) in printed text")
        out.append(it)
    return out


def call_text_args(text):
    """A raw wrapper line that is one call, `f(a, (b, c), 'x')`: (the function's name, the
    text of each positional argument). Parsed as Python, so nested parentheses and commas
    inside an argument stay in that argument; keyword arguments are refused."""
    import ast

    t = text.strip()
    try:
        tree = ast.parse(t, mode="eval").body
    except SyntaxError as e:
        raise Unconvertible(f"wrapper text `{t}` does not parse: {e.msg}")
    if not (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name)) or tree.keywords:
        raise Unconvertible(f"wrapper text `{t}` is not a call of a named function with positional arguments")
    return tree.func.id, [ast.get_source_segment(t, a) for a in tree.args]


def symbol_order(name):
    """Sort key of program symbols: backed (`s<k>`) first, then unbacked (`u<k>`), by
    number, then the rest."""
    m = re.fullmatch(r"([a-z]+)(\d+)", name)
    order = {"s": 0, "u": 1}
    if m:
        return (order.get(m.group(1), 2), m.group(1), int(m.group(2)), name)
    return (3, "", 0, name)


def symbol_kind(name):
    """`backed` for `s<k>`, `unbacked` for `u<k>`, `unbacked_float` for `zuf<k>` (a float
    read from a tensor), else `precomputed`."""
    if re.fullmatch(r"s\d+", name):
        return "backed"
    if re.fullmatch(r"u\d+", name):
        return "unbacked"
    if re.fullmatch(r"zuf\d+", name):
        return "unbacked_float"
    return "precomputed"
