"""The one error type users see: a single line naming the file, the field and what was expected."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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

    def for_field(self, field: str) -> WorkbenchError:
        """The same error named against `field` (a shared reader's caller knows which)."""
        return WorkbenchError(self.detail, source=self.source, field=field)

    def with_source(self, source: str) -> WorkbenchError:
        """Name the file the bad input came from, when the raiser did not know it."""
        if self.source is None:
            self.source = source
            self.args = (self.one_line(),)
        return self


REAL_EXTRA = ("torch", "transformers", "safetensors")  # the `real` extra's packages
REAL_EXTRA_INSTALL = "pip install -e '.[real]' -c constraints.txt"


@contextmanager
def needs_real_extra(what: str, *, field: str | None = None) -> Iterator[None]:
    """Turn a missing package of the `real` extra (torch, transformers, safetensors) inside
    the block into the one-line error for `what` (e.g. "calibration runs the real backend");
    any other missing module is a bug, not a machine's install, and propagates."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in REAL_EXTRA:
            raise
        raise WorkbenchError(
            f"{what}: that needs the `real` extra ({missing} is missing): {REAL_EXTRA_INSTALL}",
            field=field,
        ) from None


def check_output_file(path: Path, field: str | None = None) -> Path:
    """A file a command will write: not a folder, in a folder that exists. Checked before
    the work that fills it, so a mistyped path costs nothing."""
    if path.is_dir():
        raise WorkbenchError(
            "a folder, not a file: expected the path of a file to write",
            source=str(path),
            field=field,
        )
    if not path.parent.is_dir():
        raise WorkbenchError("folder does not exist", source=str(path.parent), field=field)
    return path


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    return (str(error).splitlines() or [type(error).__name__])[0]
