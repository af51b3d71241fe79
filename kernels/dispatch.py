"""Which implementation of the kernels runs: Triton on CUDA, the PyTorch references on CPU.

``select_kernels(choice, device)`` with ``choice``:

* ``"auto"``: Triton on a CUDA device, the grouped references elsewhere. On CUDA without
  Triton it raises rather than quietly running the (slower) references, which would change
  what is measured.
* ``"triton"``: the Triton kernels; raises ``KernelUnavailable`` unless Triton is installed and
  the device is CUDA or Triton's interpreter is on (``TRITON_INTERPRET=1`` before Triton is
  first imported; that is how the tests run them on CPU).
* ``"grouped"``: the PyTorch references, attention run per group of rows of like shape
  (``kernels.grouped_attention``: a step's long rows no longer pad its short ones), anywhere.
* ``"reference"``: the PyTorch references as they are, anywhere.

Triton is imported only when a Triton set is selected, so CPU users and the light path never
need it. This module imports nothing from the project.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from kernels import grouped_attention, paged_attention, verification
from kernels.errors import KernelUnavailable

__all__ = [
    "KernelChoice",
    "KernelSet",
    "KernelUnavailable",
    "grouped_kernels",
    "reference_kernels",
    "select_kernels",
    "triton_kernels",
]

KernelChoice = Literal["auto", "triton", "grouped", "reference"]
CHOICES: tuple[KernelChoice, ...] = ("auto", "triton", "grouped", "reference")


class WriteKV(Protocol):
    def __call__(
        self,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None: ...


class CopyBlocks(Protocol):
    def __call__(
        self, k_cache: torch.Tensor, v_cache: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> None: ...


class PagedTreeAttention(Protocol):
    def __call__(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        new_lens: torch.Tensor,
        tree_mask: torch.Tensor | None,
        scale: float,
    ) -> torch.Tensor: ...


class GreedyVerify(Protocol):
    def __call__(
        self,
        logits: torch.Tensor,
        draft_tokens: torch.Tensor,
        draft_lens: torch.Tensor,
        parents: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


@dataclass(frozen=True)
class KernelSet:
    """One implementation of every kernel, all with the references' signatures."""

    name: Literal["triton", "grouped", "reference"]
    write_kv: WriteKV
    copy_blocks: CopyBlocks
    paged_tree_attention: PagedTreeAttention
    greedy_verify: GreedyVerify
    max_tree_nodes: int | None  # most nodes (root included) greedy_verify takes as a tree
    # Attention reads every sequence's KV as long as the batch's widest block table (the
    # reference gathers whole tables); the Triton kernel reads each sequence's own blocks, the
    # grouped references their group's: counted as exact, the closer of the two prices (a
    # decode batch of 10-16 mixed contexts ran 1.2-1.4x its equal-context twin, not 2-4x).
    pads_attention: bool
    # Padded products (query-key pairs x heads x head_dim) under which the attention computes
    # a step in one call padded to its longest row: a call's overhead (the grouped references).
    one_call_products: int = 0

    def one_call_padding(self, width: int) -> float:
        """The same in padded query-keys, for heads x head_dim = `width` (0: never)."""
        return self.one_call_products / width


def reference_kernels() -> KernelSet:
    return KernelSet(
        name="reference",
        write_kv=paged_attention.write_kv,
        copy_blocks=paged_attention.copy_blocks,
        paged_tree_attention=paged_attention.paged_tree_attention,
        greedy_verify=verification.greedy_verify,
        max_tree_nodes=None,
        pads_attention=True,
    )


def grouped_kernels() -> KernelSet:
    """The references, attention run per group of like rows (the CPU default)."""
    return dataclasses.replace(
        reference_kernels(),
        name="grouped",
        paged_tree_attention=grouped_attention.paged_tree_attention,
        pads_attention=False,
        one_call_products=grouped_attention.CALL_COST,
    )


@functools.cache
def triton_kernels() -> KernelSet:
    """The Triton set (imports Triton); raises KernelUnavailable without Triton."""
    if importlib.util.find_spec("triton") is None:
        raise KernelUnavailable(
            "the Triton kernels need the `triton` package (pip install '.[kernels]'); "
            "or choose the reference kernels"
        )
    from kernels import triton_attention, triton_cache, triton_verification

    return KernelSet(
        name="triton",
        write_kv=triton_cache.write_kv,
        copy_blocks=triton_cache.copy_blocks,
        paged_tree_attention=triton_attention.paged_tree_attention,
        greedy_verify=triton_verification.greedy_verify,
        max_tree_nodes=triton_verification.MAX_TREE_NODES,
        pads_attention=False,
    )


def _triton_runs_on(device: torch.device) -> bool:
    from kernels.triton_runtime import INTERPRETED

    return device.type == "cuda" or INTERPRETED


def select_kernels(choice: KernelChoice, device: torch.device | str) -> KernelSet:
    """The kernel set for ``choice`` on ``device`` (see the module docstring)."""
    device = torch.device(device)
    if choice not in CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "reference":
        return reference_kernels()
    if choice == "grouped" or (choice == "auto" and device.type != "cuda"):
        return grouped_kernels()
    kernels = triton_kernels()
    if not _triton_runs_on(device):
        raise KernelUnavailable(
            f"the Triton kernels run on CUDA, not on {device.type}, unless Triton's interpreter "
            "is on (TRITON_INTERPRET=1 before triton is imported); or choose the reference "
            "kernels"
        )
    return kernels
