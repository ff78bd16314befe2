"""The user's names for a program's inputs and outputs, for bundle.json.

Inductor names the compiled graph's inputs `arg0_1`, `arg1_1`, ... and its outputs by
position. The exporter records what the user called them:

* `signature`: the positional parameter names of the function, or of the module's
  `forward` (`["input_ids", "attention_mask"]`); a `*args` parameter names the
  rest `args[0]`, `args[1]`, ...
* `input_names`: graph input -> the user's name of the input leaf it receives
  (`x`, `batch['ids']`, `pair[1]`), matched by where the tensor's data lives (as
  the weights are), so it does not depend on Dynamo's input order; weights and
  symbolic sizes have none.
* `output_names`: one per stored output (`out<k>`), the path of that leaf in what the
  function returned (`output`, `output[0]`, `output['logits']`).
* `input_tree` / `output_tree`: the pytree structure of the positional inputs (a
  tuple) and of the output, as `torch.utils._pytree.treespec_dumps` writes it (None
  when a leaf container has no serialization).

The helpers that need no torch are plain functions over names and keys; `user_names`
imports torch's pytree.
"""

from __future__ import annotations

import inspect


def positional_names(fn, count):
    """The names of the first `count` positional arguments of `fn` (a function, a bound
    method, or an `nn.Module`, whose `forward` is read). A `*args` parameter names the
    rest `args[0]`, `args[1]`, ...; without a signature, `args[i]` throughout."""
    target = getattr(fn, "forward", fn)
    names = []
    star = None
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            star = p.name
            break
    out = names[:count]
    rest = star or "args"
    out += [f"{rest}[{i}]" for i in range(count - len(out))]
    return out


def match_inputs(graph_inputs, graph_keys, user_leaves, skip=()):
    """graph input name -> user leaf name, for every graph input whose data key equals a
    user leaf's (`user_leaves`: (name, key) pairs, key None for a non-tensor leaf). A
    leaf names at most one graph input (the first); graph inputs in `skip` (the
    weights) and those without a key get no name."""
    if graph_keys is None or len(graph_keys) != len(graph_inputs):
        return {}
    by_key = {}
    for name, key in user_leaves:
        if key is not None:
            by_key.setdefault(key, name)
    used = set()
    out = {}
    for g, key in zip(graph_inputs, graph_keys):
        if g in skip or key is None:
            continue
        name = by_key.get(key)
        if name is not None and name not in used:
            out[g] = name
            used.add(name)
    return out


def user_names(torch, fn, inputs, output):
    """(signature, user input leaves as (name, key) pairs, input treespec, output leaf
    names, output treespec) of a call `fn(*inputs)` that returned `output`."""
    import torch.utils._pytree as pytree

    from .capture import tensor_key

    signature = positional_names(fn, len(inputs))
    leaves = []
    for arg_name, arg in zip(signature, inputs):
        for path, leaf in pytree.tree_flatten_with_path(arg)[0]:
            key = tensor_key(leaf) if isinstance(leaf, torch.Tensor) else None
            leaves.append((arg_name + pytree.keystr(path), key))
    output_names = ["output" + pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(output)[0]]

    def dumps(tree):
        try:
            return pytree.treespec_dumps(pytree.tree_structure(tree))
        except Exception:
            return None

    return signature, leaves, dumps(tuple(inputs)), output_names, dumps(output)
