"""`python -m wrapir_export`: the case-file exporter (see `wrapir_export.cli`)."""

from .cli import main

main(prog="python -m wrapir_export")
