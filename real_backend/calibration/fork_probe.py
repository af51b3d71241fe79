"""An APAR decoder that forks on cue, to time the steps that compute forks.

An APAR model forks where its text calls for a detail, which a calibration's synthetic
prompts never do. This probe is the APAR decoder itself (the same forward, the same logit
rules, the same sampling), except for which tokens it keeps: it never keeps a fork the model
chose, and it puts the fork token in place of a root branch's token on cue (every `every`
tokens it may still emit, offset by the request's index over `together`: that many roots
fork in the same step, the next ones a step later), where the rules allow a fork.
The engine then forks as it does when serving (`RealEngine._fork`: the policy's fork, the
cache's shared blocks and copy-on-write, the child's chunk in the next decode forward), so
a probe step with forks costs what a served one does. Changing a token after sampling costs
nothing the probe would time.
"""

from __future__ import annotations

from real_backend.decoders.apar import AparDecoder, ForkChunk, ForkRules, ForkTokens
from real_backend.decoders.base import DecodeOutcome, DecodeRequest
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import Transformer
from workbench.scenario.decoders import AparDecoderConfig

MAX_DEPTH = 2  # roots fork, children do not: the released APAR's default


class CuedForkRules(ForkRules):
    """The APAR rules, with the fork token banned everywhere: forks come only on cue."""

    def banned(self, sequence_id: int, last_token: int, room: int) -> list[int]:
        self.branch(sequence_id)  # a root is known from its first step, cued or not
        return [self.tokens.child, self.tokens.fork]

    def may_fork(self, sequence_id: int, last_token: int, room: int) -> bool:
        """Whether the APAR rules would let this branch fork now."""
        return self.tokens.fork not in super().banned(sequence_id, last_token, room)


class CuedForkProbe(AparDecoder):
    """APAR decoding whose roots fork every `every` tokens, `together` of them a step."""

    rules: CuedForkRules

    def __init__(
        self,
        model: Transformer,
        cache: PagedKVCache,
        tokens: ForkTokens,
        every: int,
        max_branches: int,
        together: int,
    ) -> None:
        config = AparDecoderConfig(kind="apar", max_depth=MAX_DEPTH, max_branches=max_branches)
        super().__init__(model, cache, config, tokens)
        self.rules = CuedForkRules(tokens, MAX_DEPTH, max_branches)
        self.every = every
        self.together = together

    def decode_with_forks(
        self, batch: list[DecodeRequest], forks: list[ForkChunk]
    ) -> tuple[DecodeOutcome, dict[int, int]]:
        outcome, firsts = super().decode_with_forks(batch, forks)
        for request, tokens in zip(batch, outcome.emitted, strict=True):
            if self._cued(request):
                tokens[-1] = self.fork_token
        return outcome, firsts

    def _cued(self, request: DecodeRequest) -> bool:
        offset = request.request_id // self.together
        if (request.max_new + offset) % self.every:
            return False
        return self.rules.may_fork(request.request_id, request.tokens[-1], request.max_new)
