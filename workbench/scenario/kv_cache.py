"""The paged KV budget of a replica, shared by every scheduler kind."""

from __future__ import annotations

from pydantic import Field

from workbench.scenario.base import StrictModel


class KVCacheConfig(StrictModel):
    block_size: int = Field(default=16, gt=0, description="Tokens per KV block.")
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Share of GPU memory the engine may use for weights, activations and KV "
        "(vLLM's default 0.9).",
    )
    num_blocks: int | None = Field(
        default=None,
        gt=0,
        description="Override the derived KV capacity (blocks per replica).",
    )
