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
        text = f"{prefix}: {self.detail}" if prefix else self.detail
        return " ".join(line.strip() for line in text.splitlines() if line.strip())

    def with_source(self, source: str) -> WorkbenchError:
        """Name the file the bad input came from, when the raiser did not know it."""
        if self.source is None:
            self.source = source
            self.args = (self.one_line(),)
        return self


REAL_EXTRA = ("torch", "transformers", "safetensors")  # the `real` extra's packages
REAL_EXTRA_INSTALL = "pip install -e '.[real]' -c constraints.txt"


def missing_real_extra(exc: ImportError, what: str, *, field: str | None = None) -> WorkbenchError:
    """The one-line error for `what` (e.g. "calibration runs the real backend") on a machine
    installed without the `real` extra (torch, transformers, safetensors)."""
    missing = exc.name or "a module"
    return WorkbenchError(
        f"{what}: that needs the `real` extra ({missing} is missing): {REAL_EXTRA_INSTALL}",
        field=field,
    )
