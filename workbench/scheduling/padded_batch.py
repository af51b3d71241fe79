"""The step arithmetic every padded static batch shares (static and sequence scheduling)."""

from __future__ import annotations

from collections.abc import Collection

from workbench.scheduling.sequence import Sequence


def advance_padded_batch(
    live: list[Sequence],
    padded_prompt: int,
    batch_steps: int,
    n_steps: int,
    stopped: Collection[int],
) -> tuple[list[Sequence], list[Sequence]]:
    """Advance the live members by `n_steps` (`batch_steps` counts them already, prefill
    included); return (members that finished, members still live). Every slot holds the
    padded prompt plus one key per step after the prefill."""
    for seq in live:
        seq.generated += n_steps
        seq.computed = padded_prompt + batch_steps - 1
    done = {s.request_id for s in live if s.generated >= s.output_tokens or s.request_id in stopped}
    return [s for s in live if s.request_id in done], [s for s in live if s.request_id not in done]
