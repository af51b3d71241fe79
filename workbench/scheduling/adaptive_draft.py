"""Adaptive draft length: each sequence drafts one token more than it recently accepted.

The one rule both backends run (the real speculative decoder and the simulator's stepper),
so a simulated twin drafts as the real engine does: k = `num_speculative_tokens` until a
sequence has a step behind it, then ceil(mean accepted over its last `window` steps) + 1,
within [min_tokens, k]. A sequence's history goes with its KV (a preemption, its end); an
APAR child starts without one.
"""

from __future__ import annotations

import math
from collections import deque

from workbench.scenario.decoders import AdaptiveKConfig


class AdaptiveDraftLength:
    def __init__(self, k: int, config: AdaptiveKConfig) -> None:
        self.k = k
        self.config = config
        self._recent: dict[int, deque[int]] = {}  # accepted drafts per sequence, newest last

    def length(self, sequence_id: int) -> int:
        """Tokens to draft for the sequence's next step (before any cap on its room)."""
        recent = self._recent.get(sequence_id)
        if not recent:
            return self.k
        mean_accepted = sum(recent) / len(recent)
        return max(self.config.min_tokens, min(self.k, math.ceil(mean_accepted) + 1))

    def has_history(self, sequence_id: int) -> bool:
        """Whether the sequence has a step behind it (else it drafts k)."""
        return bool(self._recent.get(sequence_id))

    def remember(self, sequence_id: int, accepted: int) -> None:
        """The drafted tokens the sequence's last step accepted."""
        window = self._recent.setdefault(sequence_id, deque(maxlen=self.config.window))
        window.append(accepted)

    def release(self, sequence_id: int) -> None:
        self._recent.pop(sequence_id, None)

    def __len__(self) -> int:
        """Sequences with a history held."""
        return len(self._recent)
