"""One multi-token decode step on a simulated replica: draws, target work, duration.

The replica plans such steps one at a time (a policy with lookahead slots never repeats a
step). Before the step runs, the stepper reads each decoding sequence's exact progress,
draws the tokens it will emit beyond the first (capped by its room), and prices the step:
the target's forward (prefill chunks, plus 1 + extra tokens per decoding sequence, each
extra token attending to its sequence's KV and the step's earlier tokens), the decoder
implementation's own host work if the scenario gives it (the decoder's `host_overhead_ms`)
and, for speculative decoding, the draft model's forwards before it. APAR's speculating
branches also stop at their next fork (`limit`). With an adaptive draft length each
sequence drafts what the real decoder's rule gives it (`AdaptiveDraftLength`, shared with
the real backend), fed with the accepted counts drawn here; a step model calibrated from
such a run draws each sequence's tokens from its request type's distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.cost_models.base import CostModel, StepWork, extra_keys
from simulator.decoders.draft_cost import DraftCache
from simulator.decoders.step_model import StepModel
from workbench.scheduling.adaptive_draft import AdaptiveDraftLength
from workbench.scheduling.plan import StepPlan
from workbench.scheduling.sequence import Sequence


@dataclass
class StepDraw:
    """What a planned multi-token step will do, drawn before it runs."""

    sequences: list[Sequence]  # the step's decoding sequences
    accepted: np.ndarray  # (b,) tokens each emits beyond the first
    drafted: int  # drafted tokens (as the records count them), summed
    verified: int  # tokens the target computes for the decodes: 1 + extra each, summed
    duration_s: float
    draft_s: float  # of which the draft model's forwards

    @property
    def accepted_total(self) -> int:
        return int(self.accepted.sum())


def decode_progress(seqs: list[Sequence], step: int) -> tuple[np.ndarray, np.ndarray]:
    """(generated, computed) of decode-set members at counter `step`: (b,) each.

    Members advance lazily (DecodeSet): progress = entry value + steps since entry; extra
    tokens of earlier multi-token steps are already folded into the entry values."""
    since = np.array([step - s.entry_step for s in seqs], dtype=np.int64)
    generated = np.array([s.entry_generated for s in seqs], dtype=np.int64) + since
    computed = np.array([s.entry_computed for s in seqs], dtype=np.int64) + since
    return generated, computed


class MultiTokenStepper:
    def __init__(
        self,
        model: StepModel,
        rng: np.random.Generator,
        draft: DraftCache | None = None,
        limit: Callable[[list[Sequence]], np.ndarray] | None = None,
        adaptive: AdaptiveDraftLength | None = None,
    ) -> None:
        """limit: (b,) most tokens beyond the first each sequence may emit in a step, besides
        its room (APAR: up to its next fork); None: the room alone. adaptive: each sequence's
        draft length by its recent acceptance; None: the step model's full draft."""
        self.model = model
        self.rng = rng
        self.draft = draft
        self.limit = limit
        self.adaptive = adaptive
        self.types: dict[int, int] = {}  # each decoding sequence's request type, drawn once

    def release(self, request_id: int) -> None:
        if self.draft is not None:
            self.draft.release(request_id)
        if self.adaptive is not None:
            self.adaptive.release(request_id)
        self.types.pop(request_id, None)

    def fork(self, parent_id: int, child_id: int, shared_tokens: int) -> None:
        """An APAR child's draft state starts from its parent's."""
        if self.draft is not None:
            self.draft.fork(parent_id, child_id, shared_tokens)

    def plan_step(self, plan: StepPlan, seqs: list[Sequence], target: CostModel) -> StepDraw:
        generated, computed = decode_progress(seqs, plan.step)
        output = np.array([s.output_tokens for s in seqs], dtype=np.int64)
        caps = output - generated - 1  # (b,) room beyond the step's first token
        if self.limit is not None:
            caps = np.minimum(caps, self.limit(seqs))
        if self.adaptive is not None:
            caps = np.minimum(caps, self._draft_lengths(seqs))
        extra = self.model.extra_tokens(caps, self.rng, generated)  # (b,)
        accepted = self.model.draw(self.rng, caps, self._request_types(seqs), generated)
        if self.adaptive is not None:
            for seq, count in zip(seqs, accepted.tolist(), strict=True):
                self.adaptive.remember(seq.request_id, count)
        context = computed + 1  # (b,) KV incl. the step's first token
        keys = extra_keys(extra, context)
        work = StepWork.of_plan(plan, extra_tokens=int(extra.sum()), extra_context_sum=keys)
        draft_s = 0.0 if self.draft is None else self._draft_s(seqs, generated, caps, accepted)
        duration_s = target.step_time_s(work) + self.model.host_s + draft_s
        drafted = int(self.model.drafted_tokens(caps, extra).sum())
        verified = plan.decode_batch_size + work.decode_extra_tokens
        return StepDraw(seqs, accepted, drafted, verified, duration_s, draft_s)

    def _draft_lengths(self, seqs: list[Sequence]) -> np.ndarray:
        """(b,) tokens each sequence drafts this step, as the adaptive rule gives them."""
        assert self.adaptive is not None
        return np.array([self.adaptive.length(s.request_id) for s in seqs], dtype=np.int64)

    def _request_types(self, seqs: list[Sequence]) -> np.ndarray | None:
        """(b,) each sequence's row of the step model's request types: its type, drawn at
        its first decode step, which takes the first step's row (by output position: its
        type throughout); None without types."""
        if self.model.acceptance_by_position is not None:
            return self._position_types(seqs)
        mixture = self.model.acceptance_types
        if mixture is None:
            return None
        ids = [s.request_id for s in seqs]
        first = [i not in self.types for i in ids]
        new = [i for i, is_first in zip(ids, first, strict=True) if is_first]
        self.types.update(zip(new, mixture.draw_types(self.rng, len(new)).tolist(), strict=True))
        rows = [mixture.first_row if f else self.types[i] for i, f in zip(ids, first, strict=True)]
        return np.array(rows, dtype=np.int64)

    def _position_types(self, seqs: list[Sequence]) -> np.ndarray:
        """(b,) each sequence's type of `acceptance_by_position`, drawn when first seen."""
        by_position = self.model.acceptance_by_position
        assert by_position is not None
        ids = [s.request_id for s in seqs]
        new = [i for i in ids if i not in self.types]
        drawn = by_position.draw_types(self.rng, len(new)).tolist()
        self.types.update(zip(new, drawn, strict=True))
        return np.array([self.types[i] for i in ids], dtype=np.int64)

    def _draft_s(
        self, seqs: list[Sequence], generated: np.ndarray, caps: np.ndarray, accepted: np.ndarray
    ) -> float:
        assert self.draft is not None
        ids = [s.request_id for s in seqs]
        tokens = np.array([s.prompt_tokens for s in seqs], dtype=np.int64) + generated
        forwards = self.model.draft_forwards(caps)
        tree = self.model.extra_by_room if self.model.tree else None
        time_s = self.draft.step_s(ids, tokens, forwards, tree)
        self.draft.update(ids, tokens, forwards, accepted, self.model.tree)
        return time_s
