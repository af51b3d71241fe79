"""A request as the scheduler sees it: lengths, progress, and where its emissions went."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Sequence:
    """One request inside a replica's scheduler, or one branch of a request (APAR).

    `computed` counts tokens whose KV is cached; `generated` counts tokens emitted. A fresh
    request prefills its prompt; one preempted by recompute prefills prompt + generated
    tokens again (vLLM's recompute preemption) and then emits the next token.

    A branch forked from a running sequence (`ContinuousBatching.fork`) has its own
    `request_id` (unique among the replica's sequences) and its request's id as `owner`;
    records use the owner. Its `generated` counts the tokens of its visible context after
    the prompt (the parent's tokens up to its fork token, then the child token, then its
    own), so `prefill_target` is its visible context as for any sequence.
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
    # Branches (APAR). owner: the request this sequence belongs to (-1: itself).
    owner: int = -1
    parent_id: int = -1  # a waiting fork: the sequence whose cached prefix it shares
    shared_blocks: int = 0  # full prefix blocks it shares, charged to the parent
    branch_start: int = 0  # `generated` when the branch started (its own tokens after it)

    def __post_init__(self) -> None:
        if self.owner < 0:
            self.owner = self.request_id

    @property
    def prefill_target(self) -> int:
        """Tokens to (re)compute before the next emission: the prompt plus emitted tokens."""
        return self.prompt_tokens + self.generated

    @property
    def prefill_remaining(self) -> int:
        return self.prefill_target - self.computed

    @property
    def is_branch(self) -> bool:
        """A sequence forked from another one of its request (not the request's root)."""
        return self.owner != self.request_id
