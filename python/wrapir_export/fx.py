"""wrapir's FX lowering of a bundle, back in PyTorch as a `torch.fx.GraphModule`.

`fx_module(bundle_dir)` runs `wrapir lower <bundle> --target fx` (or takes the printout
as `code=`), parses the torch.fx-style module it prints (`def forward(self, ...)` for
the top graph, one `class <name>(torch.nn.Module)` per subgraph) and builds a
`torch.fx.Graph` node for node:

* `torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel=K, grid=..., kwargs=...)`
  calls a `launch.TritonKernel` for `K`, which launches the bundle's cubin;
* extern ops (`extern_kernels.mm`, `torch.ops.aten.*`) call the ATen ops themselves,
  `torch.empty_strided` / `torch.as_strided` / `torch.sym_*` the torch functions;
* `torch.ops.higher_order.cond` / `switch` / `while_loop` call `cond` / `switch` /
  `while_loop` below, which
  run the subgraph modules (submodules of the result);
* `self.<constant>` reads a program constant (a buffer of the module, from
  `inputs.safetensors`); `assert_size_stride` / `assert_alignment` check as Inductor's
  wrapper does; arithmetic on sizes uses `operator`.

The module's `forward` takes the bundle's graph inputs in order (tensors, and Python
ints for symbol inputs): `gm(*load_inputs(bundle_dir))`. Parsing needs no torch
until the graph is built; only the parser (`parse_printout`) is plain Python.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import shutil
import subprocess

from .launch import TritonKernel

BINARY = {ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
          ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.Add: operator.add, ast.Sub: operator.sub,
          ast.BitXor: operator.xor}
COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}


class FxError(Exception):
    """An FX printout this module cannot turn into a GraphModule (names the line)."""


# ---- plain-Python parsing of the printout ------------------------------------------------------

class Forward:
    """One `forward` of the printout: its parameters, its statements, and the subgraph
    classes defined next to it (name -> Forward)."""

    def __init__(self, name, params, body, subgraphs):
        self.name = name
        self.params = params
        self.body = body
        self.subgraphs = subgraphs


def _forward_of(stmts, name):
    fwd = None
    subs = {}
    for st in stmts:
        if isinstance(st, ast.FunctionDef) and st.name == "forward":
            fwd = st
        elif isinstance(st, ast.ClassDef):
            subs[st.name] = _forward_of(st.body, st.name)
        elif isinstance(st, (ast.Import, ast.ImportFrom)) or (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)):
            continue
        else:
            raise FxError(f"line {st.lineno}: unexpected statement at class level in {name}")
    if fwd is None:
        raise FxError(f"{name} has no forward")
    params = [a.arg for a in fwd.args.args]
    if not params or params[0] != "self":
        raise FxError(f"{name}.forward does not take self first")
    return Forward(name, params[1:], fwd.body, subs)


def parse_printout(code):
    """The printout's top-level Forward (subgraph Forwards inside)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise FxError(f"the FX printout does not parse: {e}") from None
    return _forward_of(tree.body, "forward")


def attr_chain(node):
    """`a.b.c` -> ["a", "b", "c"], or None when `node` is not a plain attribute chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


# ---- runtime helpers the graph calls -------------------------------------------------------------

def cond(pred, true_graph, false_graph, operands):
    """`torch.cond` as the FX printout calls it: runs one branch on the operands."""
    p = pred.item() if hasattr(pred, "item") else pred
    return (true_graph if bool(p) else false_graph)(*operands)


def switch(index, branches, operands):
    """`torch.switch` as the FX printout calls it: index `k` runs `branches[k]` below the
    last index, any other value the last branch (Inductor's wrapper: `if i == 0: ...
    elif i == k: ... else: ...`)."""
    k = int(index.item() if hasattr(index, "item") else index)
    last = len(branches) - 1
    return branches[k if 0 <= k < last else last](*operands)


def while_loop(cond_graph, body_graph, carried, additional):
    """`torch.while_loop` as the FX printout calls it: the body's outputs are the next
    carried values while the cond graph's (one-element) output is true; returns the
    carried values (copies of the inputs when the body never runs, as Inductor's
    wrapper returns)."""
    values = list(carried)
    ran = False
    while True:
        c = cond_graph(*values, *additional)
        c = c[0] if isinstance(c, (list, tuple)) else c
        if not bool(c.item() if hasattr(c, "item") else c):
            return values if ran else [v.clone() if hasattr(v, "clone") else v for v in values]
        values = list(body_graph(*values, *additional))
        ran = True


def c_mod(a, b):
    """Remainder with C (truncating) semantics: Inductor's `Mod`."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def assert_size_stride(t, size, stride, context=None, dtype=None):
    """Inductor's `assert_size_stride` (sizes exactly; strides where the size is not 1),
    and with `dtype` its `assert_tensor_metadata` (Inductor 2.15)."""
    if dtype is not None and t.dtype != dtype:
        where = f" ({context})" if context else ""
        raise AssertionError(f"expected dtype {dtype}, got {t.dtype}{where}")
    got_size, got_stride = tuple(t.size()), tuple(t.stride())
    bad = len(got_size) != len(size) or any(
        int(g) != int(e) or (int(gs) != int(es) and int(g) > 1)
        for g, e, gs, es in zip(got_size, size, got_stride, stride))
    if bad:
        where = f" ({context})" if context else ""
        raise AssertionError(f"expected size {tuple(size)} stride {tuple(stride)}, got size {got_size} "
                             f"stride {got_stride}{where}")


def assert_alignment(t, alignment, context=None):
    """Inductor's `assert_alignment`: the data pointer is a multiple of `alignment` bytes."""
    if t.data_ptr() % int(alignment):
        where = f" ({context})" if context else ""
        raise AssertionError(f"expected alignment {alignment}, got data pointer {t.data_ptr():#x}{where}")


def call_kernel(kernel, *args, **kwargs):
    raise FxError(f"kernel {kernel} is not a Triton kernel; only Triton kernels launch from a bundle")


# ---- building the GraphModule --------------------------------------------------------------------

class Builder:
    """Turns one Forward into a GraphModule (subgraphs first, as submodules)."""

    def __init__(self, torch, kernels, constants):
        self.torch = torch
        self.kernels = kernels        # name -> TritonKernel
        self.constants = constants    # name -> tensor

    def build(self, fwd):
        torch = self.torch
        root = torch.nn.Module()
        subs = {name: self.build(sub) for name, sub in fwd.subgraphs.items()}
        for name, gm in subs.items():
            root.add_module(name, gm)
        graph = torch.fx.Graph()
        env = {}
        for p in fwd.params:
            env[p] = graph.placeholder(p)
        returned = False
        for st in fwd.body:
            where = f"{fwd.name}, line {getattr(st, 'lineno', '?')}"
            try:
                if isinstance(st, ast.Pass):
                    continue
                if isinstance(st, ast.Assign):
                    if isinstance(st.value, ast.Constant) and st.value.value is None:
                        continue  # `x = None`: FX's end of a value's life
                    if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
                        raise FxError("an assignment to something other than one name")
                    target = st.targets[0].id
                    env[target] = self.node(graph, env, root, st.value, target)
                    continue
                if isinstance(st, ast.Return):
                    graph.output(self.value(graph, env, root, st.value))
                    returned = True
                    continue
                raise FxError(f"statement {type(st).__name__}")
            except FxError as e:
                raise FxError(f"{where}: {e}: `{ast.unparse(st) if hasattr(ast, 'unparse') else ''}`") from None
        if not returned:
            graph.output(None)
        gm = torch.fx.GraphModule(root, graph, class_name=fwd.name)
        return gm

    def node(self, graph, env, root, expr, name):
        """The node (or, for a literal, the value) that `name = expr` binds."""
        return self.value(graph, env, root, expr, name)

    def value(self, graph, env, root, e, name=None):
        """An FX argument (a Node or a literal) for an expression of the printout."""
        torch = self.torch
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            if e.id in env:
                return env[e.id]
            if e.id in ("inf", "nan"):
                return float(e.id)
            raise FxError(f"unknown name `{e.id}`")
        if isinstance(e, ast.List):
            return [self.value(graph, env, root, x) for x in e.elts]
        if isinstance(e, ast.Tuple):
            return tuple(self.value(graph, env, root, x) for x in e.elts)
        if isinstance(e, ast.Dict):
            return {self.value(graph, env, root, k): self.value(graph, env, root, v) for k, v in zip(e.keys, e.values)}
        if isinstance(e, ast.UnaryOp):
            x = self.value(graph, env, root, e.operand)
            if isinstance(e.op, ast.USub):
                return -x if not isinstance(x, torch.fx.Node) else self.call(graph, operator.neg, (x,), {}, name)
            if isinstance(e.op, ast.UAdd):
                return x
            if isinstance(e.op, ast.Not):
                return self.call(graph, operator.not_, (x,), {}, name)
            raise FxError(f"unary operator {type(e.op).__name__}")
        if isinstance(e, ast.BinOp):
            op = BINARY.get(type(e.op))
            if op is None:
                raise FxError(f"binary operator {type(e.op).__name__}")
            return self.call(graph, op, (self.value(graph, env, root, e.left), self.value(graph, env, root, e.right)),
                             {}, name)
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1:
                raise FxError("a chained comparison")
            op = COMPARE.get(type(e.ops[0]))
            if op is None:
                raise FxError(f"comparison {type(e.ops[0]).__name__}")
            return self.call(graph, op, (self.value(graph, env, root, e.left),
                                         self.value(graph, env, root, e.comparators[0])), {}, name)
        if isinstance(e, ast.Subscript):
            index = e.slice.value if type(e.slice).__name__ == "Index" else e.slice  # Python 3.8
            return self.call(graph, operator.getitem, (self.value(graph, env, root, e.value),
                                                       self.value(graph, env, root, index)), {}, name)
        if isinstance(e, ast.Attribute):
            chain = attr_chain(e)
            if chain and chain[0] == "self" and len(chain) == 2:
                return self.get_attr(graph, root, chain[1], name)
            if chain and chain[0] in env:
                obj = env[chain[0]]
                for a in chain[1:]:
                    obj = self.call(graph, getattr, (obj, a), {}, name)
                return obj
            if chain and chain[0] == "torch":
                return self.resolve(chain)  # a dtype, layout, ...
            raise FxError(f"attribute `{'.'.join(chain or ['?'])}`")
        if isinstance(e, ast.Call):
            return self.call_expr(graph, env, root, e, name)
        raise FxError(f"expression {type(e).__name__}")

    def resolve(self, chain):
        obj = self.torch
        for a in chain[1:]:
            try:
                obj = getattr(obj, a)
            except AttributeError:
                raise FxError(f"`{'.'.join(chain)}` is not in this PyTorch") from None
        return obj

    def get_attr(self, graph, root, attr, name):
        if not hasattr(root, attr):
            if attr not in self.constants:
                raise FxError(f"`self.{attr}` is neither a subgraph nor a program constant of the bundle")
            root.register_buffer(attr, self.constants[attr])
        return graph.create_node("get_attr", attr, name=name or attr)

    def call(self, graph, target, args, kwargs, name):
        return graph.create_node("call_function", target, tuple(args), dict(kwargs), name=name)

    def call_expr(self, graph, env, root, e, name):
        chain = attr_chain(e.func)
        if chain is None:
            raise FxError("a call of something other than a named function")
        args = [self.value(graph, env, root, a) for a in e.args]
        kwargs = {k.arg: self.value(graph, env, root, k.value) for k in e.keywords}
        dotted = ".".join(chain)
        if dotted == "torch.ops.higher_order.triton_kernel_wrapper_mutation":
            kernel = kwargs.get("kernel")
            if kernel not in self.kernels:
                raise FxError(f"kernel {kernel!r} is not a Triton kernel of the bundle")
            return self.call(graph, self.kernels[kernel], (), {"grid": kwargs.get("grid"),
                                                                "kwargs": kwargs.get("kwargs", {})}, name)
        if dotted == "torch.ops.higher_order.cond":
            return self.call(graph, cond, args, kwargs, name)
        if dotted == "torch.ops.higher_order.switch":
            return self.call(graph, switch, args, kwargs, name)
        if dotted == "torch.ops.higher_order.while_loop":
            return self.call(graph, while_loop, args, kwargs, name)
        if dotted == "assert_size_stride":
            return self.call(graph, assert_size_stride, args, kwargs, name)
        if dotted == "assert_alignment":
            return self.call(graph, assert_alignment, args, kwargs, name)
        if dotted == "device":
            return self.torch.device(*args, **kwargs)
        if dotted == "wrapir.c_mod":
            return self.call(graph, c_mod, args, kwargs, name)
        if dotted == "wrapir.call_kernel":
            raise FxError(f"kernel {args[0] if args else '?'!r} is not a Triton kernel; only Triton kernels "
                          "launch from a bundle")
        if chain[0] == "extern_kernels":
            from torch._inductor.select_algorithm import extern_kernels

            if not hasattr(extern_kernels, chain[1]):
                import torch._inductor.lowering  # noqa: F401  (registers the kernel choices)
            target = getattr(extern_kernels, ".".join(chain[1:]), None)
            if target is None:
                raise FxError(f"`{dotted}` is not one of Inductor's extern kernels in this PyTorch")
            return self.call(graph, target, args, kwargs, name)
        if chain[0] == "torch":
            return self.call(graph, self.resolve(chain), args, kwargs, name)
        raise FxError(f"call of `{dotted}`")


# ---- bundles -------------------------------------------------------------------------------------

def find_wrapir(wrapir=None):
    """The wrapir binary: `wrapir`, else $WRAPIR, else `wrapir` on PATH."""
    cand = wrapir or os.environ.get("WRAPIR") or shutil.which("wrapir")
    if not cand:
        raise FxError("no wrapir binary: pass wrapir=PATH, set WRAPIR, or put wrapir on PATH "
                      "(or pass the FX printout as code=)")
    return cand


def lower_fx(bundle_dir, wrapir=None):
    """`wrapir lower <bundle> --target fx`: the FX printout of a bundle."""
    proc = subprocess.run([find_wrapir(wrapir), "lower", os.fspath(bundle_dir), "--target", "fx"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise FxError(f"wrapir lower --target fx failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def read_json(bundle_dir, name):
    with open(os.path.join(os.fspath(bundle_dir), name)) as f:
        return json.load(f)


def bundle_kernels(bundle_dir, program):
    """name -> TritonKernel for every Triton kernel of the program."""
    out = {}
    for name, k in (program.get("kernels") or {}).items():
        be = k.get("backend") or {}
        if be.get("kind") != "triton":
            continue
        meta = None
        path = os.path.join(os.fspath(bundle_dir), "kernels", f"{name}.json")
        if os.path.exists(path):
            with open(path) as f:
                meta = json.load(f).get("triton_metadata")
        out[name] = TritonKernel(name, be, bundle_dir, meta)
    return out


def load_inputs(bundle_dir, device=None):
    """The bundle's graph inputs in `call` order: tensors (from inputs.safetensors, on
    their declared device, or `device`) and Python ints for symbol inputs."""
    from .safetensors import load_safetensors

    program = read_json(bundle_dir, "program.json")
    stored = load_safetensors(os.path.join(os.fspath(bundle_dir), "inputs.safetensors"))
    main = program["main"]
    args = []
    for inp in main["inputs"]:
        nm = inp["name"]
        if nm not in stored:
            raise FxError(f"input {nm} is not in inputs.safetensors")
        if inp["kind"] == "symbol":
            args.append(int(stored[nm].item()))
        else:
            dev = device or main["buffers"][nm]["layout"]["device"]
            args.append(stored[nm].to(dev))
    return args


def load_constants(bundle_dir, program, device=None):
    from .safetensors import load_safetensors

    consts = program.get("constants") or {}
    if not consts:
        return {}
    stored = load_safetensors(os.path.join(os.fspath(bundle_dir), "inputs.safetensors"))
    out = {}
    for nm, layout in consts.items():
        if nm not in stored:
            raise FxError(f"constant {nm} is not in inputs.safetensors")
        t = stored[nm].to(device or layout["device"])
        size, stride = layout["size"], layout["stride"]
        if all(isinstance(x, int) for x in size + stride) and list(t.stride()) != list(stride):
            # The declared layout (a frozen weight may be stored transposed).
            import torch

            t = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)
        out[nm] = t
    return out


def fx_module(bundle_dir, *, wrapir=None, code=None, device=None):
    """A `torch.fx.GraphModule` running wrapir's FX lowering of the bundle: Triton kernels
    launch from the bundle's cubins, extern ops are ATen calls. `code`: the FX printout
    (`wrapir lower BUNDLE --target fx`), else wrapir is run (`wrapir`, $WRAPIR or PATH).
    Call it with the bundle's inputs: `gm(*load_inputs(bundle_dir))`."""
    import torch
    import torch.fx  # noqa: F401

    program = read_json(bundle_dir, "program.json")
    if code is None:
        code = lower_fx(bundle_dir, wrapir)
    fwd = parse_printout(code)
    builder = Builder(torch, bundle_kernels(bundle_dir, program), load_constants(bundle_dir, program, device))
    gm = builder.build(fwd)
    gm.bundle_dir = os.fspath(bundle_dir)
    return gm
