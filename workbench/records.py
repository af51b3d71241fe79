"""One record format for both backends: requests, steps, and emission spans.

Emissions are stored as *spans*: a row says that a request emitted `tokens_per_step` tokens
at the end of each of the consecutive steps `first_step..last_step` of one replica. Vanilla
decoding then needs one row per uninterrupted decode stretch instead of one per token (a
million-request run stays practical); a decoder that emits a varying number of tokens per
step writes one row per step. An emission's time is its step's `start_s + duration_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from workbench.apar_records import BranchRecords
    from workbench.store.profiles import ProfilePoint

REQUEST_STATUSES = ("finished", "unfinished")


@dataclass
class RequestRecords:
    request_id: np.ndarray  # (n,) int64
    replica: np.ndarray  # (n,) int32
    arrival_s: np.ndarray  # (n,) float64
    first_token_s: np.ndarray  # (n,) float64, NaN if no token was emitted
    finish_s: np.ndarray  # (n,) float64, NaN if unfinished
    prompt_tokens: np.ndarray  # (n,) int64
    output_tokens: np.ndarray  # (n,) int64: tokens actually emitted
    preemptions: np.ndarray  # (n,) int32
    status: np.ndarray  # (n,) object: one of REQUEST_STATUSES
    # (n,) object: each prompt's category (`workload.prompts`), None for synthetic prompts.
    # Left out, it becomes an array of None: after construction it is always an array.
    category: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.category is None:
            self.category = np.full(len(self.request_id), None, dtype=object)


@dataclass
class StepRecords:
    replica: np.ndarray  # (s,) int32
    step: np.ndarray  # (s,) int64: per-replica step index, from 0
    start_s: np.ndarray  # (s,) float64
    duration_s: np.ndarray  # (s,) float64
    batch_size: np.ndarray  # (s,) int32: sequences in the step
    prefill_tokens: np.ndarray  # (s,) int64
    decode_tokens: np.ndarray  # (s,) int64
    kv_blocks_used: np.ndarray  # (s,) int64: after the step's allocation
    emitted_tokens: np.ndarray  # (s,) int64: tokens emitted at the end of the step
    drafted_tokens: np.ndarray  # (s,) int64: speculative decoders; 0 for vanilla
    accepted_tokens: np.ndarray  # (s,) int64: speculative decoders; 0 for vanilla
    verified_tokens: np.ndarray  # (s,) int64: tokens the target computed for decodes (one
    # each, plus drafts, lookahead windows and candidates); = decode_tokens for vanilla
    # (s,) float64: seconds of the step spent in the draft model's forwards (a speculative
    # decoder's proposals, inside the step's duration); 0 where no draft runs in the step,
    # NaN where unrecorded (runs stored before schema 11). Left out, it becomes zeros.
    draft_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.draft_s is None:
            self.draft_s = np.zeros(len(self.step))


@dataclass
class EmissionSpans:
    request_id: np.ndarray  # (e,) int64
    replica: np.ndarray  # (e,) int32
    first_step: np.ndarray  # (e,) int64
    last_step: np.ndarray  # (e,) int64 (inclusive)
    tokens_per_step: np.ndarray  # (e,) int32


@dataclass
class OutputRecords:
    """What a real run answered, per request: its emitted token ids, and their text decoded
    with the model's tokenizer (None without one). APAR requests: the reassembled answer."""

    request_id: np.ndarray  # (n,) int64
    token_ids: list[list[int]]  # (n,) emitted tokens, in order
    text: list[str | None]  # (n,)


# One draft forward: per sequence in it, (new tokens, tokens its draft cache held before).
DraftForward = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DraftForwards:
    """A served step's draft forwards, in order, and their measured time (`draft_s`)."""

    forwards: tuple[DraftForward, ...]
    draft_s: float


@dataclass
class RunRecords:
    """Everything a backend returns; the store writes it in one transaction."""

    requests: RequestRecords
    steps: StepRecords
    emissions: EmissionSpans
    info: dict[str, str] = field(default_factory=dict)  # backend facts: device, versions...
    branches: BranchRecords | None = None  # APAR runs: every request's branch tree
    outputs: OutputRecords | None = None  # real runs: what the model answered
    # A real run served with `measure_steps`: its steps as calibration points (work and wall
    # time), for the twin's price of each; not stored.
    served_steps: list[ProfilePoint] | None = None
    # A measured speculative run's draft forwards, step by step (`DraftForwards`), as the
    # drafter ran them: what a twin's draft price is checked against. Not stored either.
    served_drafts: list[DraftForwards] | None = None


@dataclass
class RunMeta:
    """One row of the `runs` table."""

    run_id: str
    scenario_name: str
    scenario_hash: str  # Scenario.config_hash() of the effective (point) scenario
    config_json: str  # Scenario.config_json(): the full effective config
    backend: str  # "sim" | "real"
    decoder: str  # decoder kind
    scheduler: str  # scheduler kind
    seed: int
    versions: dict[str, str]  # package versions (workbench, numpy, simpy, duckdb, torch...)
    git_sha: str | None
    started_at: float  # unix time, seconds
    finished_at: float  # unix time, seconds
    sweep_point: str | None = None  # JSON {dotted.path: value} when part of a sweep
