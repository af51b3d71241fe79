"""Ctrl-C held back while a run is written, so that a run is stored whole or not at all.

DuckDB turns a KeyboardInterrupt raised inside a statement into a `RuntimeError` ("Query
interrupted") and may leave the transaction half-aborted; where the interrupt lands decides
whether the user reads "interrupted", a write error or a traceback, and whether the run was
stored. Held back, the write ends as it would have (committed, or rolled back on its own
error), and the interrupt is raised right after it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT back inside the block and raise KeyboardInterrupt after it if one came.
    Only the main thread receives signals: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
