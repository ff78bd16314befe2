"""Run a wrapir package or bundle from Python.

``wrapir.load(path_or_bytes, device="cpu")`` loads a bundle directory or a
``.wirpkg`` package (a path), or a package held in memory (``bytes``), and
returns a :class:`Model`. Calling it runs the model::

    import torch, wrapir

    model = wrapir.load("small_cnn.wirpkg")
    (y,) = model(torch.randn(2, 3, 16, 16))

Inputs are ``torch.Tensor``s (or NumPy arrays) on the CPU, positional in
``model.input_names`` order or by name, and ints for symbol inputs; they
are read through DLPack (one copy into the model's memory). Outputs are
returned as a list, tensors as ``torch.Tensor``s (NumPy arrays when PyTorch
is not installed) sharing the model's output memory without a copy.

On a model loaded with ``device="cuda"`` (``"cuda:N"``), a call with CUDA
tensors on the model's device is zero-copy: each input's memory is read in
place through DLPack (in the layout the program declares: a tensor of other
strides is an error naming them; ``.contiguous()`` lays it out), the work
is ordered on the caller's current stream
(``torch.cuda.current_stream(device)``: the model reads the inputs after the
work queued there and that stream waits for the outputs), and the outputs
come back as CUDA tensors of their own (each copied once on the device from
the model's working memory; freed, when PyTorch lets them go, after the work
queued on that stream). A program that writes its inputs (a KV-cache
update; ``bundle.json``'s ``mutated_inputs``) writes the caller's CUDA
tensors themselves. An input whose data is not 16-byte aligned, as the
kernels assume, is copied first (as Inductor does; a written one is copied
back after the call). CPU tensors in such a call are moved to the device
first; a call with only CPU tensors (or NumPy arrays) runs as on the CPU:
inputs copied to the device, outputs copied back to host tensors. A CUDA
tensor on another device is a ``ValueError``.

The model is thread-safe: several Python threads may call it at once, and
the GIL is released while it runs. A dynamic model takes any sizes inside
the ranges it was compiled for; sizes outside them, a wrong dtype or rank,
or a missing input raise ``ValueError`` naming the input. Loading and
running failures raise :class:`wrapir.Error`.

A package's compiled C++ kernels load from anonymous in-memory files (Linux),
so nothing is written anywhere. Halide kernels load only from files: for a
``.wirpkg`` or ``bytes`` whose program has them, pass ``scratch_dir``, a
directory where a private folder is made for them and removed once they are
loaded. Bundle directories load their kernels in place.
"""

from . import _wrapir
from ._wrapir import Error

__all__ = ["Error", "Model", "load", "CUDA"]

#: Whether this build runs models on CUDA devices.
CUDA = _wrapir.CUDA


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _plain(tensor):
    """``tensor`` detached, with a lazy conjugation or negation applied (a tensor
    with either bit set cannot be exported through DLPack)."""
    tensor = tensor.detach()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    return tensor


def _capsule(name, value):
    """A DLPack capsule of a dense CPU copy-free view of ``value`` (a tensor or array)."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(f"input `{name}` is on {value.device}; the model reads CPU tensors (use .cpu())")
        return _plain(value).contiguous().__dlpack__()
    if hasattr(value, "__array_interface__"):
        import numpy

        return numpy.ascontiguousarray(value).__dlpack__()
    if isinstance(value, (bool, float)):
        raise TypeError(f"input `{name}`: expected a tensor, an array or an int, not {type(value).__name__}")
    if isinstance(value, int):
        return value
    if hasattr(value, "__dlpack__"):
        return value.__dlpack__()
    raise TypeError(f"input `{name}`: expected a tensor, an array or an int, not {type(value).__name__}")


#: The alignment of a CUDA input's data the model's kernels assume (Inductor's).
_ALIGNMENT = 16


def _device_capsule(name, value, torch, device, stream, mutated, copy_back):
    """A DLPack capsule of CUDA tensor ``value`` on ``device`` (a CPU tensor
    or array moved there first), used in place by a device call on
    ``stream``. A tensor whose data is not aligned as the kernels assume is
    copied, as Inductor copies it; when the call writes it (``mutated``),
    ``(tensor, copy)`` goes to ``copy_back``."""
    if not isinstance(value, torch.Tensor):
        if hasattr(value, "__array_interface__"):
            import numpy

            value = torch.from_numpy(numpy.ascontiguousarray(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            raise TypeError(f"input `{name}`: a call with CUDA tensors takes tensors, not an int (pass a tensor)")
        else:
            raise TypeError(f"input `{name}`: expected a tensor or an array, not {type(value).__name__}")
    if value.device.type == "cpu":
        value = value.to(device)
    elif value.device != device:
        raise ValueError(f"input `{name}` is on {value.device}; the model runs on {device} (move it with .to({str(device)!r}))")
    value = _plain(value)
    if value.data_ptr() % _ALIGNMENT:
        aligned = value.clone()
        if name in mutated:
            copy_back.append((value, aligned))
        value = aligned
    # The model reads the memory on its own stream, ordered after `stream`;
    # recorded so that PyTorch's caching allocator does not hand it out
    # again before `stream` has passed the call (when it was made on another).
    value.record_stream(stream)
    return torch.utils.dlpack.to_dlpack(value)


class _Exported:
    """A DLPack capsule as an object with ``__dlpack__``, for ``from_dlpack``."""

    __slots__ = ("_capsule", "_device")

    def __init__(self, capsule, device):
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, *args, **kwargs):
        # A device output is already ordered on the call's stream (the
        # current one, which `from_dlpack` passes): nothing more to wait for.
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("this output was already taken")
        return capsule

    def __dlpack_device__(self):
        return self._device


def _output(value, device=(_wrapir.DEVICE_CPU, 0)):
    if isinstance(value, list):
        return [_output(v, device) for v in value]
    if type(value).__name__ != "PyCapsule":
        return value
    torch = _torch()
    if torch is not None:
        return torch.from_dlpack(_Exported(value, device))
    import numpy

    return numpy.from_dlpack(_Exported(value, device))


def _is_cuda_tensor(torch, value):
    return isinstance(value, torch.Tensor) and value.device.type == "cuda"


class Model:
    """A loaded model (see :func:`load`)."""

    __slots__ = ("_model", "_ordinal")

    def __init__(self, model):
        self._model = model
        device = model.device
        #: The CUDA device ordinal of a model on a GPU, else None.
        self._ordinal = int(device.split(":", 1)[1]) if device.startswith("cuda:") else None

    @property
    def input_names(self):
        """The names of the inputs each call takes, in order."""
        return self._model.input_names

    @property
    def device(self):
        """The device the model runs on: ``"cpu"`` or ``"cuda:N"``."""
        return self._model.device

    @property
    def load_seconds(self):
        """How long loading took, in seconds."""
        return self._model.load_seconds

    def __call__(self, *args, **kwargs):
        names = self._model.input_names
        if len(args) > len(names):
            raise TypeError(f"the model takes {len(names)} inputs ({', '.join(names)}), {len(args)} were given")
        if self._ordinal is not None:
            torch = _torch()
            if torch is not None and (
                any(_is_cuda_tensor(torch, v) for v in args) or any(_is_cuda_tensor(torch, v) for v in kwargs.values())
            ):
                return self._call_device(torch, names, args, kwargs)
        capsules = [_capsule(n, v) for n, v in zip(names, args)]
        named = {k: _capsule(k, v) for k, v in kwargs.items()}
        return [_output(v) for v in self._model.call(*capsules, **named)]

    def _call_device(self, torch, names, args, kwargs):
        """A call on CUDA tensors, in place (see the module documentation)."""
        device = torch.device("cuda", self._ordinal)
        stream = torch.cuda.current_stream(device)
        mutated, copy_back = self._model.mutated_inputs, []
        capsules = [_device_capsule(n, v, torch, device, stream, mutated, copy_back) for n, v in zip(names, args)]
        named = {k: _device_capsule(k, v, torch, device, stream, mutated, copy_back) for k, v in kwargs.items()}
        outputs = self._model.call_device(stream.cuda_stream, *capsules, **named)
        for tensor, copy in copy_back:
            tensor.copy_(copy)
        where = (_wrapir.DEVICE_CUDA, self._ordinal)
        return [_output(v, where) for v in outputs]

    def __repr__(self):
        return f"<wrapir.Model on {self.device} with inputs ({', '.join(self.input_names)})>"


def load(source, device="cpu", *, scratch_dir=None, idle_sessions=None):
    """Loads ``source``: a path to a bundle directory or ``.wirpkg`` package,
    or a package's ``bytes``.

    ``device`` is ``"cpu"`` or ``"cuda"`` / ``"cuda:N"`` (in a build with
    CUDA). ``scratch_dir``: where a package's compiled CPU kernels that
    cannot load from memory may be written to be loaded (see the module
    documentation). ``idle_sessions``:
    how many per-thread sessions to keep between calls (default: the
    machine's parallelism).
    """
    import os

    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if scratch_dir is not None:
        scratch_dir = os.fspath(scratch_dir)
    return Model(_wrapir.load(source, device, scratch_dir, idle_sessions))
