"""Machine-specific paths in exported text (pure Python, no torch)."""

from __future__ import annotations

import re

# The exporting machine's cache directories: Inductor's (`/tmp/torchinductor_<user>`),
# Triton's (`~/.triton/cache`), other temporary directories, and the home directory.
MACHINE_PATH = re.compile(r"(/tmp/torchinductor_[^/\s'\"]*|/root/\.triton/cache|/tmp/[A-Za-z0-9_.-]+|/root)(?=/)")

# The installed Halide package (Inductor's Halide kernels load its autoscheduler plugin
# by absolute path): `<halide>/lib64/libautoschedule_adams2019.so`.
HALIDE_PATH = re.compile(r"/[^\s'\"]*/site-packages/halide(?=/)")

# An absolute path into this repository's case files.
CASE_FILE_PATH = re.compile(r"/[^\s'\":]*/(fixtures/inductor/[\w.]+)")


def redact(text):
    """Replaces the exporting machine's cache directories in text with `<cache>` (the
    Halide package's directory with `<halide>`) and makes paths into this repository
    relative."""
    text = HALIDE_PATH.sub("<halide>", text)
    return MACHINE_PATH.sub("<cache>", CASE_FILE_PATH.sub(r"\1", text))
