"""Ctrl-C held back while a run is written, so that a run is stored whole or not at all.

DuckDB turns a KeyboardInterrupt raised inside a statement into a `RuntimeError` ("Query
interrupted") and may leave the transaction half-aborted; where the interrupt lands decides
whether the user reads "interrupted", a write error or a traceback, and whether the run was
stored. Held back, the write ends as it would have (committed, or rolled back on its own
error), and the signal is raised again right after it, for whatever handled it before.
A write takes well under a second for most runs; a process that must stop at once can
still be killed (the transaction keeps the database whole).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT back inside the block and raise it again after it if one came. Only the
    main thread receives signals, and an ignored (or foreign, C-level) handler is left as
    it is: there the block runs unchanged."""
    previous = signal.getsignal(signal.SIGINT)
    on_main = threading.current_thread() is threading.main_thread()
    if not on_main or previous in (signal.SIG_IGN, None):
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        signal.raise_signal(signal.SIGINT)  # to the handler before: KeyboardInterrupt by default
