"""Inputs the compiled program writes: which ones, and their values after the call.

A program may write into its inputs (a KV-cache decode step's `index_copy_` on the
caches, `x.add_(1)`, a module buffer updated in place). Inductor records them on the
graph it lowers (`GraphLowering.mutated_inputs`, the graph input names); the capture
keeps that set and each input's value after the compiled call. The exporter then
stores, per mutated graph input, eager PyTorch's value after its own call, which is
part of the program's contract as much as the outputs are:

* `bundle.json`'s `mutated_inputs`: the mutated graph inputs, in graph input order
  (always written, `[]` when none, so that a reader knows they were recorded);
* `mutated.safetensors`: eager's value of each after the call, keyed by graph input.

Eager's value of a user input is the eager call's own input leaf after the call,
found through the user's name of the graph input (`input_names`); of a module buffer,
the buffer after the eager call. Module buffers are put back as they were before
every later run (compiled, rerun, float64 reference, C++ wrapper), so that each run
starts from the state the inputs were recorded in.
"""

from __future__ import annotations

FILE = "mutated.safetensors"


class ModuleState:
    """A module's buffers (by name) as they were when this was made; `restore()` copies
    them back in place (the tensors the module holds stay the same objects)."""

    def __init__(self, torch, fn, is_module):
        self.saved = {}
        if is_module:
            with torch.no_grad():
                for name, t in fn.named_buffers(remove_duplicate=True):
                    self.saved[name] = (t, t.detach().clone())

    def values(self):
        """name -> the buffer's current value (a clone)."""
        return {name: t.detach().clone() for name, (t, _) in self.saved.items()}

    def restore(self, torch):
        with torch.no_grad():
            for t, before in self.saved.values():
                t.copy_(before)


def user_leaves(torch, signature, inputs):
    """user leaf name (as `names.user_names` writes it) -> that tensor of `inputs`."""
    import torch.utils._pytree as pytree

    out = {}
    for arg_name, arg in zip(signature, inputs):
        for path, leaf in pytree.tree_flatten_with_path(arg)[0]:
            if isinstance(leaf, torch.Tensor):
                out[arg_name + pytree.keystr(path)] = leaf
    return out


def mutated_inputs(mod, input_names):
    """The graph inputs the compiled program writes, in graph input order (Inductor's
    `mutated_inputs` of the kept graph, recorded on its wrapper module)."""
    names = set(getattr(mod, "_wrapir_mutated_inputs", None) or ())
    return [g for g in input_names if g in names]


def eager_values(mutated, *, user_names, weight_names, eager_leaves, buffers_after, errors):
    """graph input -> eager's value after the call, for each mutated graph input;
    an error for one whose eager value cannot be found."""
    out = {}
    for g in mutated:
        if g in weight_names:
            value = buffers_after.get(weight_names[g])
            if value is None:
                errors.append(f"mutated input {g}: the compiled program writes the module's parameter "
                              f"`{weight_names[g]}`; only buffers are recorded after the call")
                continue
        elif g in user_names and user_names[g] in eager_leaves:
            value = eager_leaves[user_names[g]]
        else:
            errors.append(f"mutated input {g}: neither a user input nor a module buffer, so eager's value "
                          "after the call is unknown")
            continue
        out[g] = value.detach().clone()
    return out


def compiled_values(torch, mod, input_names, mutated, errors):
    """graph input -> the compiled call's value of it after the call (the capture's)."""
    after = getattr(mod, "_export_inputs_after", None)
    if after is None or len(after) != len(input_names):
        if mutated:
            errors.append("could not record the mutated inputs after the compiled call")
        return {}
    by_name = dict(zip(input_names, after))
    return {g: by_name[g] for g in mutated if isinstance(by_name[g], torch.Tensor)}
