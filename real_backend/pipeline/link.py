"""An emulated interconnect hop: one-way latency plus serialisation at a bandwidth.

This is emulation on one machine, not a network model: the sender holds each message back
until the time a link of that latency and bandwidth would have delivered it. Messages on a
hop queue behind each other (a message starts serialising when the previous one is done),
so delivery times never decrease and message order is kept.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EmulatedLink:
    latency_s: float
    bytes_per_s: float | None  # None: no bandwidth limit
    _free_at: float = 0.0  # when the hop finishes serialising what it was given

    def delivery_time(self, enqueued_s: float, nbytes: int) -> float:
        """When a message of `nbytes` handed over at `enqueued_s` arrives at the far end."""
        start = max(enqueued_s, self._free_at)
        self._free_at = start + (0.0 if self.bytes_per_s is None else nbytes / self.bytes_per_s)
        return self._free_at + self.latency_s
