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


def _capsule(name, value):
    """A DLPack capsule of a dense CPU copy-free view of ``value`` (a tensor or array)."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(f"input `{name}` is on {value.device}; the model reads CPU tensors (use .cpu())")
        value = value.detach()
        if value.is_conj():
            value = value.resolve_conj()
        if value.is_neg():
            value = value.resolve_neg()
        return value.contiguous().__dlpack__()
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


class _Exported:
    """A DLPack capsule as an object with ``__dlpack__``, for ``from_dlpack``."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, *args, **kwargs):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("this output was already taken")
        return capsule

    def __dlpack_device__(self):
        return (_wrapir.DEVICE_CPU, 0)


def _output(value):
    if isinstance(value, list):
        return [_output(v) for v in value]
    if type(value).__name__ != "PyCapsule":
        return value
    torch = _torch()
    if torch is not None:
        return torch.from_dlpack(_Exported(value))
    import numpy

    return numpy.from_dlpack(_Exported(value))


class Model:
    """A loaded model (see :func:`load`)."""

    __slots__ = ("_model",)

    def __init__(self, model):
        self._model = model

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
        capsules = [_capsule(n, v) for n, v in zip(names, args)]
        named = {k: _capsule(k, v) for k, v in kwargs.items()}
        return [_output(v) for v in self._model.call(*capsules, **named)]

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
