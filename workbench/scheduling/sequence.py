"""A request as the scheduler sees it: lengths, progress, and where its emissions went."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Sequence:
    """One request inside a replica's scheduler.

    `computed` counts tokens whose KV is cached; `generated` counts tokens emitted. A fresh
    request prefills its prompt; one preempted by recompute prefills prompt + generated
    tokens again (vLLM's recompute preemption) and then emits the next token.
    """

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # tokens to generate before the request ends (length stop)
    predicted_tokens: int | None = None  # a length predictor's guess (length-aware policies)
    generated: int = 0
    computed: int = 0
    blocks: int = 0  # KV blocks held (kept exact only while outside the decode set)
    preemptions: int = 0
    first_emit_step: int = -1  # step that opened the current emission span
    # Decode-set bookkeeping: while decoding, computed/generated advance implicitly with
    # the replica's step counter; these hold the values at entry.
    entry_step: int = -1
    entry_computed: int = 0
    entry_generated: int = 0

    @property
    def prefill_target(self) -> int:
        """Tokens to (re)compute before the next emission: the prompt plus emitted tokens."""
        return self.prompt_tokens + self.generated

    @property
    def prefill_remaining(self) -> int:
        return self.prefill_target - self.computed
