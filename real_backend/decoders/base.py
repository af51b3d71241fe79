"""What every decoder takes and returns for one decode step of a batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from real_backend.model.transformer import Transformer
    from workbench.records import DraftForward


@dataclass
class DecodeRequest:
    """One running sequence in a decode step."""

    request_id: int
    tokens: list[int]  # prompt + emitted; the last emitted token is not in the KV cache yet
    max_new: int  # tokens it may still emit (>= 1)
    generator: torch.Generator  # the request's own sampling stream


@dataclass
class DecodeOutcome:
    """Per request, the tokens emitted (at least one); step totals for the records."""

    emitted: list[list[int]]
    drafted: int = 0  # tokens proposed beyond the first, summed over the batch
    accepted: int = 0  # of which accepted (the engine records those emitted, after stops)
    verified: int = 0  # tokens the target computed, summed over the batch
    draft_s: float = 0.0  # wall time of the draft model's forwards (its proposals)
    draft_forwards: list[DraftForward] = field(default_factory=list)  # when noted (profiling)
    accepted_per_request: list[int] = field(default_factory=list)


class EmissionRules(Protocol):
    """Constraints a decoder applies to every emitted (and drafted) token of a sequence."""

    def banned(self, request: DecodeRequest, previous: int, position: int) -> list[int]:
        """Tokens `request` may not emit after `previous`, its `position`-th token this step."""
        ...

    def ends_emission(self, token: int) -> bool:
        """Whether `token` must be the last a sequence emits in a step."""
        ...


class Decoder(ABC):
    """Runs the decode part of a step for a batch of running sequences.

    The target's cache holds every sequence's tokens except the last emitted one. A decoder
    may write more (drafted tokens) but must roll the cache back to exactly the tokens it
    emits minus the newest, and never write more than `lookahead_slots` beyond the first.
    """

    lookahead_slots: int = 0

    @abstractmethod
    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        """One decode step for `batch`."""

    def release(self, request_id: int) -> None:  # noqa: B027 (optional hook)
        """Forget a finished or preempted request's decoder state."""

    def note_draft_forwards(self) -> None:
        """From now on, each outcome lists its draft forwards' shapes (a measured run, whose
        twin prices them); a decoder without a draft model has none."""
        return None

    def draft_caches(self) -> list[tuple[Transformer, int]]:
        """The models this decoder runs besides the target, each with its cache's block size
        (the engine warms their kernels up too)."""
        return []
