"""APAR decoding (Liu et al., 2024): a tuned model forks its own generation into branches.

The model writes the skeleton of a structured answer and emits the fork token where a
detail belongs. The runtime then starts a child branch whose context is the prompt plus
the parent's tokens up to and including that fork token, followed by the forced child
token; the child writes the detail while the parent goes on after its fork token. The
child shares the parent's cached prefix (`PagedKVCache.fork`, copy-on-write of a shared
partly filled block); it never sees a sibling's text nor its parent's text after the fork.
Every branch ends at EOS (or its length limit); the request ends when all have.

The logit rules, every step and for every branch (as THUDM/APAR's runtime):
- the child token is never sampled (it is only ever forced);
- no fork right after a fork token or a child token;
- no fork at depth ≥ `max_depth` (the root is depth 1), nor while the request already has
  `max_branches` live branches;
- no fork without room for the parent's next token and the child's first (a branch may
  still emit fewer than 3 tokens).

Branches are sequences of the shared policy (`ContinuousBatching.fork`); this decoder runs
one step for every decoding branch of every request in one forward, like vanilla decoding,
with the rules applied per row. The engine (`real_backend/engine.py`) forks and records.

With a draft model (`speculative`), every branch speculates like any sequence: the draft
proposes a chain under the same rules, the target verifies it with the rules applied per
position, and a fork token ends the chain and the branch's emission, so the child starts
from exactly the parent's tokens up to its fork. A child's draft cache forks its parent's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.decoders.drafter import Drafter
from real_backend.decoders.speculative import SpeculativeDecoder
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.sampling import next_token, next_tokens, request_generator
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import AparDecoderConfig

MIN_ROOM_TO_FORK = 3  # the fork token itself, the parent's next token, the child's first
# Speculating branches' draft cache can need more blocks than their target cache: a child
# whose parent has no draft cache yet (the fork came from a prefill's token) copies the whole
# shared prefix into its own draft cache, a prefix its parent's target cache holds privately;
# so the draft blocks stay within the target's blocks held privately, twice the target's at
# most (peak measured: 1.57x, over 405 tight configurations).
DRAFT_BLOCKS_PER_TARGET_BLOCK = 2


@dataclass(frozen=True)
class ForkTokens:
    fork: int
    child: int


def fork_tokens(folder: Path, config: AparDecoderConfig) -> ForkTokens:
    """The ids of the fork and child tokens in the checkpoint's tokenizer.json."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise WorkbenchError(
            f"APAR needs the model's tokenizer.json to find {config.fork_token} and "
            f"{config.child_token}; {folder} has none",
            field="decoder.fork_token",
        )
    ids = added_token_ids(path)
    named = {"decoder.fork_token": config.fork_token, "decoder.child_token": config.child_token}
    missing = {field: token for field, token in named.items() if token not in ids}
    if missing:
        fields = AparDecoderConfig.model_fields
        defaults = {fields["fork_token"].default, fields["child_token"].default}
        untuned = set(missing.values()) <= defaults  # not an APAR model at all
        raise WorkbenchError(
            f"the model has no {' nor '.join(missing.values())} token: APAR needs a model "
            f"tuned with fork and child tokens (e.g. `workbench zoo build apar-tiny`)",
            source=str(path),
            field="decoder.kind" if untuned else next(iter(missing)),
        )
    return ForkTokens(ids[config.fork_token], ids[config.child_token])


def added_token_ids(path: Path) -> dict[str, int]:
    """A tokenizer.json's added tokens: content → id (an unreadable list: one line)."""
    try:
        added = json.loads(path.read_text(encoding="utf-8")).get("added_tokens", [])
        return {t["content"]: int(t["id"]) for t in added}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise WorkbenchError("unreadable added_tokens", source=str(path)) from None


def model_fork_tokens(folder: Path, config: AparDecoderConfig) -> ForkTokens | None:
    """The fork and child tokens when the checkpoint's tokenizer has both, else None (a
    model without them, or without a tokenizer.json); an unreadable tokenizer: one line."""
    path = folder / "tokenizer.json"
    ids = added_token_ids(path) if path.is_file() else {}
    if config.fork_token not in ids or config.child_token not in ids:
        return None
    return ForkTokens(ids[config.fork_token], ids[config.child_token])


@dataclass(frozen=True)
class ForkChunk:
    """A fork's prefill chunk, run in the decodes' forward."""

    sequence_id: int
    chunk: list[int]  # its new tokens (the fork and child tokens, unless chunked)
    context: list[int]  # its visible context, the child token last
    room: int  # tokens it may still emit
    generator: torch.Generator
    emits: bool  # the chunk completes its prefill: it emits its first token


@dataclass
class _Branch:
    owner: int  # the request
    depth: int  # 1 for the root


@dataclass
class ForkRules:
    """Which tokens a branch may not emit next."""

    tokens: ForkTokens
    max_depth: int
    max_branches: int
    branches: dict[int, _Branch] = field(default_factory=dict)  # sequence id → branch
    live: dict[int, int] = field(default_factory=dict)  # request → live branches

    def branch(self, sequence_id: int) -> _Branch:
        """A sequence never seen before is a request's root."""
        if sequence_id not in self.branches:
            self.branches[sequence_id] = _Branch(sequence_id, 1)
            self.live[sequence_id] = 1
        return self.branches[sequence_id]

    def banned(self, sequence_id: int, last_token: int, room: int) -> list[int]:
        branch = self.branch(sequence_id)
        fork, child = self.tokens.fork, self.tokens.child
        no_fork = (
            last_token in (fork, child)
            or branch.depth >= self.max_depth
            or self.live[branch.owner] >= self.max_branches
            or room < MIN_ROOM_TO_FORK
        )
        return [child, fork] if no_fork else [child]

    def forked(self, parent_id: int, child_id: int) -> None:
        parent = self.branch(parent_id)
        self.branches[child_id] = _Branch(parent.owner, parent.depth + 1)
        self.live[parent.owner] += 1

    def ended(self, sequence_id: int) -> None:
        self.live[self.branches[sequence_id].owner] -= 1

    def forget(self, request_id: int) -> None:
        """The request ended: drop its branches."""
        del self.live[request_id]
        for sid in [s for s, b in self.branches.items() if b.owner == request_id]:
            del self.branches[sid]


@dataclass(frozen=True)
class BranchRules:
    """The fork rules as emission rules for speculative decoding: positions within a step
    count against the branch's room; a fork ends the branch's emission."""

    rules: ForkRules

    def banned(self, request: DecodeRequest, previous: int, position: int) -> list[int]:
        return self.rules.banned(request.request_id, previous, request.max_new - position)

    def ends_emission(self, token: int) -> bool:
        return token == self.rules.tokens.fork


def branch_drafter(
    draft: Transformer, target_cache: PagedKVCache, config: AparDecoderConfig
) -> Drafter:
    """The draft's side for speculating branches, its cache sized for them."""
    speculative = config.speculative_config()
    assert speculative is not None, "a drafter goes with decoder.speculative"
    blocks = DRAFT_BLOCKS_PER_TARGET_BLOCK * target_cache.allocator.num_blocks
    return Drafter(draft, draft.new_cache(blocks, target_cache.block_size), speculative)


def masked(logits: torch.Tensor, banned: list[int]) -> torch.Tensor:
    """`logits` (V,) with the banned tokens impossible."""
    out = logits.clone()
    out[banned] = float("-inf")
    return out


class AparDecoder(Decoder):
    def __init__(
        self,
        model: Transformer,
        cache: PagedKVCache,
        config: AparDecoderConfig,
        tokens: ForkTokens,
        drafter: Drafter | None = None,  # with `config.speculative`: the draft's side
    ) -> None:
        self.model = model
        self.cache = cache
        self.config = config
        self.rules = ForkRules(tokens, config.max_depth, config.max_branches)
        self.speculation: SpeculativeDecoder | None = None
        speculative = config.speculative_config()
        if (speculative is None) != (drafter is None):
            raise ValueError("a drafter goes with decoder.speculative, and only with it")
        if drafter is not None:
            assert speculative is not None
            rules = BranchRules(self.rules)
            self.speculation = SpeculativeDecoder(model, cache, drafter, speculative, rules)
            self.lookahead_slots = self.speculation.lookahead_slots

    def draft_caches(self) -> list[tuple[Transformer, int]]:
        return [] if self.speculation is None else self.speculation.draft_caches()

    def note_draft_forwards(self) -> None:
        if self.speculation is not None:
            self.speculation.note_draft_forwards()

    def release(self, request_id: int) -> None:
        if self.speculation is not None:
            self.speculation.release(request_id)

    def share_draft_prefix(self, parent_id: int, child_id: int, shared_tokens: int) -> None:
        """A new branch's draft cache starts from its parent's (speculation only)."""
        if self.speculation is not None:
            self.speculation.drafter.fork(parent_id, child_id, shared_tokens)

    @property
    def fork_token(self) -> int:
        return self.rules.tokens.fork

    @property
    def child_token(self) -> int:
        return self.rules.tokens.child

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        return self.decode_with_forks(batch, [])[0]

    def decode_with_forks(
        self, batch: list[DecodeRequest], forks: list[ForkChunk]
    ) -> tuple[DecodeOutcome, dict[int, int]]:
        """One forward for the decoding branches and for new forks' chunks (their fork and
        child tokens over the shared prefix); returns the decodes' outcome and each fork's
        first token (when its chunk completes it)."""
        chunks = [SeqStep(f.sequence_id, f.chunk) for f in forks]
        if self.speculation is not None:
            outcome, fork_logits = self.speculation.decode_with(batch, chunks)
        else:
            outcome, fork_logits = self._decode_one_each(batch, chunks)
        firsts = {
            f.sequence_id: self.choose(f.sequence_id, f.context, row[-1], f.room, f.generator)
            for f, row in zip(forks, fork_logits, strict=True)
            if f.emits
        }
        return outcome, firsts

    def _decode_one_each(
        self, batch: list[DecodeRequest], chunks: list[SeqStep]
    ) -> tuple[DecodeOutcome, list[torch.Tensor]]:
        """One token per branch; returns the outcome and the chunks' last logits."""
        steps = [SeqStep(r.request_id, [r.tokens[-1]]) for r in batch] + chunks
        if not steps:
            return DecodeOutcome([], verified=0, accepted_per_request=[]), []
        logits = self.model.step_last(self.cache, steps)  # (B + chunks, V)
        banned = [self.rules.banned(r.request_id, r.tokens[-1], r.max_new) for r in batch]
        generators = [r.generator for r in batch]
        tokens = next_tokens(logits[: len(batch)], self.config, generators, banned)
        emitted = [[token] for token in tokens]
        outcome = DecodeOutcome(emitted, verified=len(batch), accepted_per_request=[0] * len(batch))
        return outcome, [logits[i : i + 1] for i in range(len(batch), len(steps))]  # (1, V) each

    def choose(
        self,
        sequence_id: int,
        tokens: list[int],
        logits: torch.Tensor,  # (V,)
        room: int,
        generator: torch.Generator,
    ) -> int:
        """The branch's next token under the rules (also for a prefill's emission)."""
        banned = self.rules.banned(sequence_id, tokens[-1], room)
        return next_token(masked(logits, banned), self.config, generator)


def branch_generator(seed: int, request_id: int, branch: int) -> torch.Generator:
    """Each branch samples from its own stream, fixed by its request and its index in the
    request's tree (never by scheduling); the root's is the request's own."""
    if branch == 0:
        return request_generator(seed, request_id)
    generator = torch.Generator()
    generator.manual_seed(((seed * 1_000_003 + request_id) * 7_919 + branch) % (2**63))
    return generator
