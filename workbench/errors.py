"""The one error type users see: a single line naming the file, the field and what was expected."""

from __future__ import annotations


class WorkbenchError(Exception):
    """Bad input: printed as one line by the CLI, which then exits with status 2."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.detail = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.detail}" if prefix else self.detail
