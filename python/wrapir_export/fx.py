"""wrapir's FX lowering of a bundle, back in PyTorch as a `torch.fx.GraphModule`.

`fx_module(bundle_dir)` runs `wrapir lower <bundle> --target fx` (or takes the printout
as `code=`), parses the torch.fx-style module it prints (`def forward(self, ...)` for
the top graph, one `class <name>(torch.nn.Module)` per subgraph) and builds a
`torch.fx.Graph` node for node:

* `torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel=K, grid=..., kwargs=...)`
  calls a `launch.TritonKernel` for `K`, which launches the bundle's cubin;
* `wrapir.call_kernel(K, [args])` (a CPU bundle's kernel; upstream's FX backend calls
  these through `compiled_kernel_wrapper_mutation`) calls the bundle's host image
  `kernels/K.so`, loaded with ctypes when the module is built and kept alive by it
  (`gm.host_kernels`): a C++ kernel (`CppKernel`) has its `wrapir_kernel_signature()`
  checked against the program's `arg_types` and runs `wrapir_kernel_argv` with the
  tensors' data pointers and pointers to the scalars' values in their C types; a CPU
  Halide kernel (`HalideKernel`) has its `K_metadata()` checked against the program's
  HalideMeta `argtypes` and runs `K_argv` with a `halide_buffer_t` per buffer (shape,
  stride and offset from the metadata, evaluated with the call's scalars). Every call
  checks its arguments first (CPU tensors of the declared dtypes; scalars that fit;
  Halide buffers inside their tensors' storage), as wrapir's host backend does;
* extern ops (`extern_kernels.mm`, `torch.ops.aten.*`) call the ATen ops themselves,
  `torch.empty_strided` / `torch.as_strided` / `torch.sym_*` the torch functions;
* `torch.ops.higher_order.cond` / `switch` / `while_loop` call `cond` / `switch` /
  `while_loop` below, which
  run the subgraph modules (submodules of the result);
* `self.<constant>` reads a program constant (a buffer of the module, from
  `inputs.safetensors`); the tensor asserts are `torch._check`s over `sym_size` /
  `sym_stride`, `t.dim()`, `t.dtype`, `t.data_ptr()` and `isnan` / `isinf`, as upstream's
  FX backend lowers them; arithmetic on sizes uses `operator`.

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


# Methods a printout calls on a tensor: the operands of the tensor asserts' `torch._check`s.
TENSOR_METHODS = ("dim", "data_ptr")


def c_mod(a, b):
    """Remainder with C (truncating) semantics: Inductor's `Mod`."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r


# ---- host (CPU) kernels: the bundle's C++ and Halide images ----------------------------------

# C element / scalar types of Inductor's C++ kernels (`host_kernels.c_scalar_type` of an
# `arg_types` entry, `const` dropped) -> (torch dtype name, ctypes type name, kind). The
# kind says which Python values a scalar of that type takes; the ctypes type has the C
# width (`int64_t` 8 bytes, `int32_t` 4, `float` 4, `double` 8, `bool` 1, ...).
C_TYPES = {
    "float": ("float32", "c_float", "float"),
    "double": ("float64", "c_double", "float"),
    "bool": ("bool", "c_bool", "bool"),
    "int8_t": ("int8", "c_int8", "int"), "signed char": ("int8", "c_int8", "int"),
    "uint8_t": ("uint8", "c_uint8", "int"), "unsigned char": ("uint8", "c_uint8", "int"),
    "int16_t": ("int16", "c_int16", "int"), "short": ("int16", "c_int16", "int"),
    "uint16_t": ("uint16", "c_uint16", "int"),
    "int32_t": ("int32", "c_int32", "int"), "int": ("int32", "c_int32", "int"),
    "uint32_t": ("uint32", "c_uint32", "int"),
    "int64_t": ("int64", "c_int64", "int"), "long": ("int64", "c_int64", "int"),
    "long long": ("int64", "c_int64", "int"),
    "uint64_t": ("uint64", "c_uint64", "int"),
    "half": ("float16", None, None), "at::Half": ("float16", None, None), "c10::Half": ("float16", None, None),
    "bfloat16": ("bfloat16", None, None), "at::BFloat16": ("bfloat16", None, None),
    "c10::BFloat16": ("bfloat16", None, None),
}


def c_type_name(t):
    """`const int64_t` -> `int64_t` (as `host_kernels.c_scalar_type`)."""
    import re

    return " ".join(re.sub(r"\bconst\b", "", t).split())


def host_image_name_ok(kernel):
    """A kernel name that can name its image file (letters, digits, `_`: stays inside `kernels/`)."""
    return bool(kernel) and all(c.isascii() and (c.isalnum() or c == "_") for c in kernel)


class HostKernel:
    """What a C++ and a Halide kernel of a CPU bundle share: the name (one that can name
    its image file), the image `kernels/<name>.so` opened with ctypes, the entry point
    taking a `void**` of arguments, and the check that a call passes one list of
    arguments of the expected length. `KIND` names the kernel's kind in errors."""

    KIND = ""

    def __init__(self, name, bundle_dir):
        self.__name__ = name
        self.__qualname__ = name
        self.name = name
        if not host_image_name_ok(name):
            raise FxError(f"{self.KIND} kernel {name!r}: a host kernel's name must be letters, digits and `_`")
        self.path = os.path.join(os.fspath(bundle_dir), "kernels", f"{name}.so")
        if not os.path.isfile(self.path):
            raise FxError(f"{self.KIND} kernel {name}: its image kernels/{name}.so is not in the bundle")

    def open_image(self):
        """The image, bound lazily as wrapir's host backend loads it (dlopen RTLD_LAZY): a
        PyTorch 2.15 image references c10's `torchCheckFail` (a failed TORCH_CHECK in the
        headers), which nothing in this process exports; only that path needs it."""
        import ctypes

        try:
            return ctypes.CDLL(os.path.abspath(self.path), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
        except OSError as e:
            raise FxError(f"{self.KIND} kernel {self.name}: kernels/{self.name}.so does not load: {e}") from None

    def set_entry(self, entry):
        """`entry(void** args) -> int` is the kernel's call."""
        import ctypes

        entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        entry.restype = ctypes.c_int
        self.entry = entry

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"

    def check_arguments(self, args, rest, count, which):
        """A call passes one list of `count` arguments (`which` describes them)."""
        if rest or not isinstance(args, (list, tuple)):
            raise FxError(f"{self.KIND} kernel {self.name}: takes one list of arguments")
        if len(args) != count:
            raise FxError(f"{self.KIND} kernel {self.name}: takes {count} arguments ({which}) but got {len(args)}")


class CppKernel(HostKernel):
    """One C++ kernel of a CPU bundle, callable as `kernel(args)` (the FX printout's
    `wrapir.call_kernel(name, [args])`): `kernels/<name>.so` loaded with ctypes when the
    module is built, its `wrapir_kernel_signature()` checked against the program's
    `arg_types`, and each call's arguments checked (a CPU tensor of the dtype its pointer
    type names; a scalar that fits its C type) before `wrapir_kernel_argv(args)` runs with
    the tensors' data pointers and pointers to the scalars' values."""

    KIND = "C++"

    def __init__(self, name, backend, bundle_dir):
        import ctypes

        super().__init__(name, bundle_dir)
        self.arg_types = [str(t).strip() for t in backend.get("arg_types") or []]
        self.args = []  # per argument: ("tensor", dtype) or ("scalar", ctypes type, kind, C type)
        for i, t in enumerate(self.arg_types):
            pointer = t.endswith("*")
            elem = c_type_name(t[:-1] if pointer else t)
            info = C_TYPES.get(elem)
            dtype = getattr(_torch(), info[0], None) if info else None
            if info is None or dtype is None or (not pointer and info[1] is None):
                raise FxError(f"C++ kernel {name}: argument {i}: unsupported C type `{t}`")
            if pointer:
                self.args.append(("tensor", dtype))
            else:
                self.args.append(("scalar", getattr(ctypes, info[1]), info[2], elem))
        self.lib = self.open_image()
        try:
            sig = self.lib.wrapir_kernel_signature
            entry = self.lib.wrapir_kernel_argv
        except AttributeError as e:
            raise FxError(f"C++ kernel {name}: kernels/{name}.so: {e}") from None
        sig.argtypes = []
        sig.restype = ctypes.c_char_p
        compiled = (sig() or b"").decode("utf-8", "replace")
        declared = ";".join(self.arg_types)
        if compiled != declared:
            raise FxError(f"C++ kernel {name}: kernels/{name}.so was compiled for arguments `{compiled}`, "
                          f"the program declares `{declared}`")
        self.set_entry(entry)

    def __call__(self, args, *rest):
        import ctypes

        torch = _torch()
        self.check_arguments(args, rest, len(self.args), "`arg_types`")
        argv = (ctypes.c_void_p * max(len(args), 1))()
        keep = []  # the scalars' C values, alive for the call
        for i, (spec, v) in enumerate(zip(self.args, args)):
            where = f"C++ kernel {self.name}: argument {i} (`{self.arg_types[i]}`)"
            if spec[0] == "tensor":
                dtype = spec[1]
                if not isinstance(v, torch.Tensor):
                    raise FxError(f"{where}: expected a {dtype} tensor, got {describe(v)}")
                if v.dtype != dtype:
                    raise FxError(f"{where}: expected a {dtype} tensor, got a {v.dtype} tensor")
                if v.device.type != "cpu":
                    raise FxError(f"{where}: the tensor is on {v.device}, the kernel runs on the host")
                argv[i] = v.data_ptr()
            else:
                _, ctype, kind, elem = spec
                c = ctypes.pointer(ctype(scalar_value(v, kind, ctype, elem, where)))
                keep.append(c)
                argv[i] = ctypes.cast(c, ctypes.c_void_p)
        rc = self.entry(argv)
        if rc != 0:
            raise FxError(f"C++ kernel {self.name}: the compiled kernel returned {rc}")
        return None


# Halide's C structures (HalideRuntime.h), built when a Halide kernel is first loaded.
HALIDE_INT, HALIDE_UINT, HALIDE_FLOAT, HALIDE_BFLOAT = 0, 1, 2, 4
HALIDE_HOST_DIRTY = 1
HALIDE_TYPES = {"bool": (HALIDE_UINT, 1), "uint8": (HALIDE_UINT, 8), "int8": (HALIDE_INT, 8),
                "int16": (HALIDE_INT, 16), "int32": (HALIDE_INT, 32), "int64": (HALIDE_INT, 64),
                "float16": (HALIDE_FLOAT, 16), "bfloat16": (HALIDE_BFLOAT, 16), "float32": (HALIDE_FLOAT, 32),
                "float64": (HALIDE_FLOAT, 64)}
_HALIDE_STRUCTS = None


def halide_structs():
    """(halide_type_t, halide_dimension_t, halide_buffer_t, halide_filter_metadata_t) as ctypes."""
    global _HALIDE_STRUCTS
    if _HALIDE_STRUCTS is None:
        import ctypes as c

        class HType(c.Structure):
            _fields_ = [("code", c.c_uint8), ("bits", c.c_uint8), ("lanes", c.c_uint16)]

        class HDim(c.Structure):
            _fields_ = [("min", c.c_int32), ("extent", c.c_int32), ("stride", c.c_int32), ("flags", c.c_uint32)]

        class HBuffer(c.Structure):
            _fields_ = [("device", c.c_uint64), ("device_interface", c.c_void_p), ("host", c.c_void_p),
                        ("flags", c.c_uint64), ("type", HType), ("dimensions", c.c_int32),
                        ("dim", c.POINTER(HDim)), ("padding", c.c_void_p)]

        class HArgument(c.Structure):
            _fields_ = [("name", c.c_char_p), ("kind", c.c_int32), ("dimensions", c.c_int32), ("type", HType),
                        ("scalar_def", c.c_void_p), ("scalar_min", c.c_void_p), ("scalar_max", c.c_void_p),
                        ("scalar_estimate", c.c_void_p), ("buffer_estimates", c.c_void_p)]

        class HMetadata(c.Structure):
            _fields_ = [("version", c.c_int32), ("num_arguments", c.c_int32),
                        ("arguments", c.POINTER(HArgument)), ("target", c.c_char_p), ("name", c.c_char_p)]

        _HALIDE_STRUCTS = (HType, HDim, HBuffer, HMetadata)
    return _HALIDE_STRUCTS


def size_expr(text):
    """A HalideMeta size / stride / offset expression (`128L`, `ks0`, `2*ks0 + 1`) as a
    parsed Python expression (`L` suffixes of integer literals dropped)."""
    import re

    plain = re.sub(r"(?<![\w.])(\d+)L\b", r"\1", str(text))
    try:
        return ast.parse(plain, mode="eval").body
    except SyntaxError:
        raise FxError(f"cannot read size expression `{text}`") from None


def eval_size(e, env, text):
    """The integer value of a `size_expr` with the kernel's scalar arguments bound."""
    if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, ast.Name):
        if e.id not in env:
            raise FxError(f"size expression `{text}`: no value for `{e.id}`")
        return env[e.id]
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return -eval_size(e.operand, env, text)
    if isinstance(e, ast.BinOp) and type(e.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
        a, b = eval_size(e.left, env, text), eval_size(e.right, env, text)
        if isinstance(e.op, ast.FloorDiv) and b == 0:
            raise FxError(f"size expression `{text}` divides by zero")
        return BINARY[type(e.op)](a, b)
    raise FxError(f"size expression `{text}`: unsupported form")


class HalideKernel(HostKernel):
    """One Halide kernel of a CPU bundle, callable as `kernel(args)` (the FX printout's
    `wrapir.call_kernel(name, [args])`, its HalideMeta arguments that alias no other, in
    order): `kernels/<name>.so` (Halide's `<name>_argv`, with the bundle's
    `kernels/halide_runtime.so`) loaded when the module is built and its
    `<name>_metadata()` checked against the program's `argtypes` (names, kinds,
    dimensions, element types). Each call describes every buffer argument as a
    `halide_buffer_t` from the metadata's shape, stride and offset expressions evaluated
    with the call's scalar arguments, after checking that the tensor is a CPU tensor of
    the argument's dtype and that the buffer lies inside its storage (as wrapir's host
    backend does)."""

    KIND = "Halide"

    def __init__(self, name, backend, bundle_dir):
        import ctypes

        torch = _torch()
        HType, _, _, HMetadata = halide_structs()
        super().__init__(name, bundle_dir)
        argtypes = backend.get("argtypes") or []
        self.lib = self.open_image()
        try:
            meta_fn = getattr(self.lib, f"{name}_metadata")
            entry = getattr(self.lib, f"{name}_argv")
        except AttributeError as e:
            raise FxError(f"Halide kernel {name}: kernels/{name}.so: {e}") from None
        meta_fn.argtypes = []
        meta_fn.restype = ctypes.POINTER(HMetadata)
        m = meta_fn().contents
        image = [m.arguments[i] for i in range(m.num_arguments)]
        if len(image) != len(argtypes):
            raise FxError(f"Halide kernel {name}: the pipeline takes {len(image)} arguments, the program's "
                          f"metadata lists {len(argtypes)}")
        self.params = []  # per pipeline argument: dict
        for i, (a, im) in enumerate(zip(argtypes, image)):
            aname = a.get("name")
            where = f"Halide kernel {name}: argument {i} (`{aname}`)"
            iname = (im.name or b"").decode()
            if iname != aname:
                raise FxError(f"{where}: the pipeline's argument {i} is `{iname}`")
            ity = (im.type.code, im.type.bits, im.type.lanes)
            ctype = str(a.get("ctype", "")).strip()
            if a.get("shape") is not None:
                if im.kind not in (1, 2):
                    raise FxError(f"{where}: a buffer in the program, a scalar in the pipeline")
                shape, stride = a["shape"], a.get("stride") or []
                if len(shape) != len(stride) or im.dimensions != len(shape):
                    raise FxError(f"{where}: {len(shape)} sizes, {len(stride)} strides, {im.dimensions} "
                                  "dimensions in the pipeline")
                info = C_TYPES.get(c_type_name(ctype[:-1])) if ctype.endswith("*") else None
                dtype = getattr(torch, info[0], None) if info else None
                want = HALIDE_TYPES.get(info[0]) if info else None
                if dtype is None or want is None:
                    raise FxError(f"{where}: unsupported C type `{ctype}`")
                if want + (1,) != ity:
                    raise FxError(f"{where}: element type {dtype} (Halide code {want[0]} bits {want[1]}), the "
                                  f"pipeline has code {ity[0]} bits {ity[1]} lanes {ity[2]}")
                self.params.append({"name": aname, "buffer": True, "dtype": dtype, "type": ity,
                                    "shape": [(str(x), size_expr(x)) for x in shape],
                                    "stride": [(str(x), size_expr(x)) for x in stride],
                                    "offset": (str(a.get("offset", "0")), size_expr(a.get("offset", "0"))),
                                    "data_from": a.get("alias_of") or aname})
            else:
                if im.kind != 0:
                    raise FxError(f"{where}: a scalar in the program, a buffer in the pipeline")
                code, bits, lanes = ity
                ct = {(HALIDE_UINT, 1): ctypes.c_bool, (HALIDE_INT, 8): ctypes.c_int8,
                      (HALIDE_INT, 16): ctypes.c_int16, (HALIDE_INT, 32): ctypes.c_int32,
                      (HALIDE_INT, 64): ctypes.c_int64, (HALIDE_UINT, 8): ctypes.c_uint8,
                      (HALIDE_UINT, 16): ctypes.c_uint16, (HALIDE_UINT, 32): ctypes.c_uint32,
                      (HALIDE_UINT, 64): ctypes.c_uint64, (HALIDE_FLOAT, 32): ctypes.c_float,
                      (HALIDE_FLOAT, 64): ctypes.c_double}.get((code, bits)) if lanes == 1 else None
                if ct is None:
                    raise FxError(f"{where}: unsupported scalar type (code {code} bits {bits} lanes {lanes})")
                kind = "bool" if ct is ctypes.c_bool else "float" if code == HALIDE_FLOAT else "int"
                self.params.append({"name": aname, "buffer": False, "ctype": ct, "kind": kind,
                                    "c": ctype})
        self.call_args = [a.get("name") for a in argtypes if a.get("alias_of") is None]
        self.set_entry(entry)

    def __call__(self, args, *rest):
        import ctypes

        torch = _torch()
        _, HDim, HBuffer, _ = halide_structs()
        self.check_arguments(args, rest, len(self.call_args), ", ".join(self.call_args))
        by_name = dict(zip(self.call_args, args))
        index = {n: i for i, n in enumerate(self.call_args)}
        argv = (ctypes.c_void_p * max(len(self.params), 1))()
        keep = []
        env = {}
        for k, p in enumerate(self.params):
            if p["buffer"]:
                continue
            if p["name"] not in by_name:
                raise FxError(f"Halide kernel {self.name}: no value for `{p['name']}`")
            where = f"Halide kernel {self.name}: argument {index[p['name']]} (`{p['name']}`)"
            v = scalar_value(by_name[p["name"]], p["kind"], p["ctype"], p["c"], where)
            if p["kind"] == "int":
                env[p["name"]] = v
            c = ctypes.pointer(p["ctype"](v))
            keep.append(c)
            argv[k] = ctypes.cast(c, ctypes.c_void_p)
        for k, p in enumerate(self.params):
            if not p["buffer"]:
                continue
            src = p["data_from"]
            if src not in by_name:
                raise FxError(f"Halide kernel {self.name}: no value for `{src}`")
            where = f"Halide kernel {self.name}: argument {index[src]} (`{p['name']}`)"
            t = by_name[src]
            if not isinstance(t, torch.Tensor):
                raise FxError(f"{where}: expected a {p['dtype']} tensor, got {describe(t)}")
            if t.dtype != p["dtype"]:
                raise FxError(f"{where}: expected a {p['dtype']} tensor, got a {t.dtype} tensor")
            if t.device.type != "cpu":
                raise FxError(f"{where}: the tensor is on {t.device}, the kernel runs on the host")
            ndim = len(p["shape"])
            dims = (HDim * max(ndim, 1))()
            reach, empty = 0, False
            for d, ((stext, se), (ttext, te)) in enumerate(zip(p["shape"], p["stride"])):
                extent, stride = eval_size(se, env, stext), eval_size(te, env, ttext)
                if extent < 0 or stride < 0:
                    raise FxError(f"{where}: size {extent} / stride {stride} in dimension {d}")
                if extent >= 2 ** 31 or stride >= 2 ** 31:
                    raise FxError(f"{where}: size {extent} / stride {stride} in dimension {d} exceeds "
                                  "Halide's 32-bit range")
                empty |= extent == 0
                reach += (max(extent, 1) - 1) * stride
                dims[d].min, dims[d].extent, dims[d].stride, dims[d].flags = 0, extent, stride, 0
            offset = eval_size(p["offset"][1], env, p["offset"][0])
            if offset < 0:
                raise FxError(f"{where}: negative offset {offset}")
            elem = t.element_size()
            available = t.untyped_storage().nbytes() // elem - t.storage_offset()
            end = 0 if empty else offset + reach + 1
            if end > available:
                raise FxError(f"Halide kernel {self.name}: buffer `{p['name']}` reaches element {end - 1} but "
                              f"its tensor's storage holds {available} from the tensor's start")
            buf = HBuffer()
            buf.device, buf.device_interface, buf.flags = 0, None, HALIDE_HOST_DIRTY
            buf.host = t.data_ptr() + (offset * elem if end > 0 else 0)
            buf.type.code, buf.type.bits, buf.type.lanes = p["type"]
            buf.dimensions, buf.dim, buf.padding = ndim, dims, None
            keep.append((dims, buf))
            argv[k] = ctypes.cast(ctypes.pointer(buf), ctypes.c_void_p)
        rc = self.entry(argv)
        if rc != 0:
            raise FxError(f"Halide kernel {self.name}: the pipeline returned {rc}")
        return None


def describe(v):
    torch = _torch()
    if isinstance(v, torch.Tensor):
        return f"a {v.dtype} tensor"
    return f"{type(v).__name__} {v!r}"


def scalar_value(v, kind, ctype, elem, where):
    """The Python value of scalar argument `v` for a C `elem` (`kind` int, float or bool),
    checked to fit (integers: the C type's range)."""
    import ctypes

    torch = _torch()
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise FxError(f"{where}: expected a {elem}, got {describe(v)}")
        v = v.item()
    if hasattr(v, "node") and type(v).__name__ in ("SymInt", "SymFloat", "SymBool"):
        v = {"SymInt": int, "SymFloat": float, "SymBool": bool}[type(v).__name__](v)
    if kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise FxError(f"{where}: expected a number, got {describe(v)}")
        return float(v)
    if isinstance(v, float) or not isinstance(v, int):
        raise FxError(f"{where}: expected {'a bool' if kind == 'bool' else 'an integer'}, got {describe(v)}")
    x = int(v)
    if kind == "bool":
        if x not in (0, 1):
            raise FxError(f"{where}: expected a bool, got {x}")
        return bool(x)
    bits = ctypes.sizeof(ctype) * 8
    signed = ctype(-1).value < 0
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= x <= hi:
        raise FxError(f"{where}: {x} does not fit a {'signed' if signed else 'unsigned'} {bits}-bit integer")
    return x


def _torch():
    import torch

    return torch


# ---- building the GraphModule --------------------------------------------------------------------

class Builder:
    """Turns one Forward into a GraphModule (subgraphs first, as submodules)."""

    def __init__(self, torch, kernels, constants, host_kernels=None):
        self.torch = torch
        self.kernels = kernels        # name -> TritonKernel
        self.constants = constants    # name -> tensor
        # name -> CppKernel, or (for a host kernel fx_module does not run) the reason
        self.host_kernels = host_kernels if host_kernels is not None else {}

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
        if len(chain) == 2 and chain[0] in env and chain[1] in TENSOR_METHODS:
            # `t.dim()`, `t.data_ptr()`: the tensor asserts' `torch._check` operands.
            return graph.create_node("call_method", chain[1], (env[chain[0]], *args), kwargs, name=name)
        if dotted == "device":
            return self.torch.device(*args, **kwargs)
        if dotted == "wrapir.c_mod":
            return self.call(graph, c_mod, args, kwargs, name)
        if dotted == "wrapir.call_kernel":
            kernel = args[0] if args else kwargs.get("kernel")
            host = self.host_kernels.get(kernel) if isinstance(kernel, str) else None
            if host is None:
                raise FxError(f"kernel {kernel!r} is not a C++ or Halide kernel of the bundle")
            if isinstance(host, str):
                raise FxError(host)
            if len(args) != 2 or kwargs or not isinstance(args[1], list):
                raise FxError(f"kernel {kernel}: expected `wrapir.call_kernel({kernel!r}, [args])`")
            return self.call(graph, host, (args[1],), {}, name)
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


def bundle_host_kernels(bundle_dir, program):
    """name -> CppKernel / HalideKernel for every C++ and CPU Halide kernel of the program
    (each image loaded and checked against the program now), and name -> the reason for a
    host kernel that is not run (a CUDA Halide kernel)."""
    out = {}
    for name, k in (program.get("kernels") or {}).items():
        be = k.get("backend") or {}
        kind = be.get("kind")
        if kind == "cpp":
            out[name] = CppKernel(name, be, bundle_dir)
        elif kind == "halide":
            if be.get("cuda_device") is not None or "cuda" in str(be.get("target", "")).split("-"):
                out[name] = f"Halide kernel {name}: a CUDA Halide kernel (target `{be.get('target')}`) is not run"
            else:
                out[name] = HalideKernel(name, be, bundle_dir)
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
    launch from the bundle's cubins, C++ and CPU Halide kernels run from its host images
    (`kernels/<kernel>.so`), extern ops are ATen calls. `code`: the FX printout
    (`wrapir lower BUNDLE --target fx`), else wrapir is run (`wrapir`, $WRAPIR or PATH).
    Call it with the bundle's inputs: `gm(*load_inputs(bundle_dir))`."""
    import torch
    import torch.fx  # noqa: F401

    program = read_json(bundle_dir, "program.json")
    if code is None:
        code = lower_fx(bundle_dir, wrapir)
    fwd = parse_printout(code)
    host_kernels = bundle_host_kernels(bundle_dir, program)
    builder = Builder(torch, bundle_kernels(bundle_dir, program), load_constants(bundle_dir, program, device),
                      host_kernels)
    gm = builder.build(fwd)
    gm.bundle_dir = os.fspath(bundle_dir)
    # The loaded C++ images (the graph's nodes call them too): alive as long as the module.
    gm.host_kernels = {k: v for k, v in host_kernels.items() if not isinstance(v, str)}
    return gm
