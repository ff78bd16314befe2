"""wrapir_export: PyTorch Inductor's wrapper programs as wrapir bundles, and back.

* `export(fn_or_module, example_inputs, out_path, *, dynamic=False, mode=None,
  options=None, name=None, ...)` compiles a function, an `nn.Module` or a
  `torch.export` `ExportedProgram` with Inductor, captures the Wrapper IR of the
  wrapper Inductor keeps, and writes a bundle (program.json, kernels/, safetensors
  files, bundle.json); returns an `ExportResult`, raises `ExportError`.
* `fx_module(bundle_dir)` turns wrapir's FX lowering of a bundle into a
  `torch.fx.GraphModule` whose Triton kernels launch from the bundle's cubins.
* `export_ranks(fn, make_inputs, out_dir, world_size=2, ...)` exports one bundle per
  rank of a real `torch.distributed` run (one process per rank) plus `ranks.json`, the
  process-group layout; returns a `RanksResult`.
* `python -m wrapir_export --cases FILE --out DIR ...` exports a case file.

torch is imported only when one of these runs.
"""

from .errors import ExportError, Unconvertible

__version__ = "0.1.0"

__all__ = ["export", "export_ranks", "RanksResult", "fx_module", "load_inputs", "ExportResult", "ExportError", "Unconvertible", "__version__"]


def __getattr__(name):
    if name in ("export", "ExportResult"):
        from . import exporter

        return getattr(exporter, name)
    if name in ("export_ranks", "RanksResult"):
        from . import ranks

        return getattr(ranks, name)
    if name in ("fx_module", "load_inputs"):
        from . import fx

        return getattr(fx, name)
    raise AttributeError(f"module 'wrapir_export' has no attribute {name!r}")
