"""What stages say to each other. Every message is a small picklable object; hidden states
travel as raw bytes (`Payload`), never as pickled tensors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

# How a stage dealt with a run: computed it whole, stopped between layers when its cancel
# arrived, or skipped it (cancelled before it started, or nothing came to compute).
StageStatus = Literal["computed", "aborted", "skipped"]


@dataclass
class Payload:
    """A tensor as raw bytes, with its dtype and shape."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def of(cls, tensor: torch.Tensor) -> Payload:
        t = tensor.detach().contiguous().cpu()
        return cls(
            str(t.dtype).removeprefix("torch."),
            tuple(t.shape),
            t.view(torch.uint8).numpy().tobytes(),
        )

    def tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        raw = torch.frombuffer(bytearray(self.data), dtype=torch.uint8)
        return raw.view(getattr(torch, self.dtype)).reshape(self.shape).to(device)


@dataclass
class StageSetup:
    """Head → worker at the start of a session: which layers to load and how to run."""

    checkpoint: str  # a checkpoint folder every machine can read at this path
    first_layer: int
    end_layer: int  # exclusive
    last: bool  # holds the final norm and the LM head
    dtype: str  # a key of real_backend.model.loading.DTYPES
    kernels: str
    num_blocks: int
    block_size: int
    threads: int | None  # torch threads; None: leave the process's setting
    link_latency_s: float
    link_bytes_per_s: float | None
    layer_sleep_s: float  # emulated slower node
    heartbeat_s: float


@dataclass
class Ready:
    """Worker → head: the layers are loaded, the cache allocated."""

    rank: int


@dataclass
class Heartbeat:
    rank: int


@dataclass
class StageError:
    """Worker → head: the stage failed; the text says how."""

    rank: int
    text: str
    lost_peer: bool = False  # it stopped because a neighbour or the head went away


@dataclass
class LinkFailure:
    """The transport itself failed sending to or receiving from `peer`."""

    peer: int
    text: str


@dataclass
class KVOp:
    """A cache operation every stage applies in stream order: drop a sequence, or keep an
    accepted path of it (`PagedKVCache.keep`)."""

    kind: Literal["free", "keep"]
    seq: int
    start: int = 0
    offsets: tuple[int, ...] = ()


@dataclass
class StageTime:
    rank: int
    seconds: float
    status: StageStatus


@dataclass
class RunMessage:
    """A run travelling down the stages: its tree of new tokens, where its KV starts, the
    cache operations decided before it, and the hidden states of the previous stage."""

    run_id: int
    seq: int  # the sequence its KV is written under
    tokens: list[int]
    parents: list[int]  # -1: hangs off the context's last token
    fork: tuple[int, int] | None  # (parent sequence, tokens of it kept); None: a new sequence
    last_only: bool  # the head needs the greedy choice after the last token only
    ops: list[KVOp] = field(default_factory=list)
    hidden: Payload | None = None  # (n, dim); None once a stage skipped the run
    times: list[StageTime] = field(default_factory=list)


@dataclass
class RunResult:
    """Last stage → head: the target's greedy choice after each requested token (None when
    the run was not computed through), and what each stage spent on it."""

    run_id: int
    choices: list[int] | None
    times: list[StageTime]


@dataclass
class Cancel:
    """Head → last stage, then backwards stage by stage: drop these runs."""

    run_ids: list[int]


@dataclass
class EndSession:
    ops: list[KVOp]


@dataclass
class SessionClosed:
    """Worker → head after EndSession: blocks still in use (0 unless KV leaked)."""

    rank: int
    blocks_in_use: int


@dataclass
class Shutdown:
    pass


@dataclass
class Closed:
    """The last message a worker sends: the head's receiver can stop."""

    rank: int


@dataclass
class Release:
    """The head's last message, once every worker has closed: a worker may exit now (one
    that left earlier would look like a lost link to a neighbour still serving)."""
