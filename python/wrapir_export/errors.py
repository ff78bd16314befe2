"""The exporter's errors."""

from __future__ import annotations


class Unconvertible(Exception):
    """A Wrapper IR line or value that wrapir's JSON format cannot express."""


class ExportError(Exception):
    """An export that failed: `errors` lists every reason (a line or op that could not be
    expressed names it, as `<graph>: line <k> (<line>): <why>`); `path` is the bundle
    directory, where `errors.txt` holds the same list."""

    def __init__(self, errors, path=None):
        self.errors = list(errors)
        self.path = path
        first = self.errors[0].splitlines()[0] if self.errors else "unknown error"
        more = f" (and {len(self.errors) - 1} more; see errors.txt)" if len(self.errors) > 1 else ""
        super().__init__(first + more)
