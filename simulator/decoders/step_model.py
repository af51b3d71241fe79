"""A decoder's step model: per decoding sequence, tokens computed and tokens emitted.

`extra_tokens(caps)` says how many tokens the target computes for each sequence beyond the
one a vanilla step computes (drafted tokens to verify, a lookahead window), `drafted_tokens`
how many of them the records count as drafted (as the real decoders do: a draft's proposal,
lookahead's candidate n-grams but not its window), `draw` how many it emits beyond the
first. `caps` is each sequence's room: output tokens still to emit,
less the step's first; no sequence ever emits past its output length. A step model calibrated
from a lookahead run feeds, beside the window, the run's candidate n-grams for each sequence's
output position instead of a full pool's (`candidates`, `lookahead_candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.decoders.acceptance import (
    AcceptanceByPosition,
    AcceptanceDistribution,
    AcceptanceMixture,
)
from simulator.decoders.lookahead_candidates import CandidatesByPosition


@dataclass(frozen=True)
class StepModel:
    acceptance: AcceptanceDistribution
    # Target tokens beyond the first by room: entry min(cap, len − 1). A chain of k drafts
    # is 0, 1, …, k; a token tree its node count by depth; lookahead a constant.
    extra_by_room: np.ndarray  # (K + 1,) int64
    drafts_with_model: bool  # a draft model proposes (its forwards cost time too)
    tree: bool = False  # the draft is a token tree: one draft forward per level
    drafted_per_step: int | None = None  # recorded drafts per sequence; None: the extra tokens
    undrafted: int = 0  # with drafted_per_step None: extra tokens not counted as drafted
    host_s: float = 0.0  # the implementation's host work per step beyond the forward
    # Calibrated from a chain draft's run: request types, each sequence drawing from its own.
    acceptance_types: AcceptanceMixture | None = None
    # Calibrated from a lookahead run: its candidate n-grams by output position (the pool held
    # fewer than its capacity), fed beside the `undrafted` window; replaces `extra_by_room`,
    # which assumes a full pool.
    candidates: CandidatesByPosition | None = None
    # Calibrated from a lookahead run: its acceptance by the tokens a sequence has emitted.
    acceptance_by_position: AcceptanceByPosition | None = None

    def extra_tokens(
        self,
        caps: np.ndarray,
        rng: np.random.Generator | None = None,
        emitted: np.ndarray | None = None,
    ) -> np.ndarray:
        """(b,) target tokens computed beyond one per sequence. rng and emitted (b,), the tokens
        each sequence has emitted: the calibrated candidates' draw (needed with `candidates`
        only)."""
        if self.candidates is not None:
            if rng is None or emitted is None:
                raise ValueError("calibrated candidates are drawn by position with a generator")
            return self.undrafted + self.candidates.tokens(rng, caps, emitted)
        room = np.minimum(caps, len(self.extra_by_room) - 1)
        return self.extra_by_room[room]

    def drafted_tokens(self, caps: np.ndarray, extra: np.ndarray | None = None) -> np.ndarray:
        """(b,) tokens the records count as drafted per sequence; extra: the step's
        `extra_tokens` (needed with `candidates`: they were drawn)."""
        if self.drafted_per_step is not None:
            return np.full(len(caps), self.drafted_per_step, dtype=np.int64)
        computed = self.extra_tokens(caps) if extra is None else extra  # (b,)
        return computed - self.undrafted

    def draft_forwards(self, caps: np.ndarray) -> np.ndarray:
        """(b,) sequential draft-model forwards per sequence (a chain: one per drafted token;
        a tree: one per level)."""
        if not self.drafts_with_model:
            return np.zeros(len(caps), dtype=np.int64)
        if self.tree:
            return np.minimum(caps, self.acceptance.max_accepted).astype(np.int64)
        return self.extra_tokens(caps)

    def draw(
        self,
        rng: np.random.Generator,
        caps: np.ndarray,
        rows: np.ndarray | None = None,
        emitted: np.ndarray | None = None,
    ) -> np.ndarray:
        """(b,) tokens each sequence emits beyond the first. rows: (b,) each sequence's row
        of `acceptance_types` (its type, or the first step's) or its type of
        `acceptance_by_position`; emitted: (b,) tokens each has emitted (for the latter)."""
        if self.acceptance_types is not None:
            assert rows is not None
            return self.acceptance_types.sample(rng, caps, rows)
        if self.acceptance_by_position is not None:
            assert emitted is not None and rows is not None
            return self.acceptance_by_position.sample(rng, caps, emitted, rows)
        return self.acceptance.sample(rng, caps)
