"""The paged KV budget of a replica, shared by every scheduler kind."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

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
    sizing: Literal["vllm", "vidur"] = Field(
        default="vllm",
        description="How the simulator derives the capacity when num_blocks is not given: "
        "`vllm` (memory less weights, an activation peak of one step's token budget and "
        "runtime overhead) or `vidur` (Vidur's memory planner: whole requests of "
        "`max_request_tokens`, transformer-layer weights only, no activation reserve).",
    )
    max_request_tokens: int | None = Field(
        default=None,
        gt=0,
        description="With sizing `vidur`: the tokens of one request slot (Vidur's max_tokens, "
        "the trace's prompt + output limit).",
    )
    swap_space_gib: float = Field(
        default=4.0,
        ge=0,
        description="Host memory per GPU for KV swapped out on preemption (vLLM's swap_space, "
        "default 4 GiB). Only a request with several live branches (APAR) is swapped, as vLLM "
        "swaps a group of several sequences; every other preemption recomputes, and so does "
        "one that finds the space full. With a draft model (APAR + speculative) nothing is "
        "swapped. 0: recompute always.",
    )

    @model_validator(mode="after")
    def _vidur_needs_slot_tokens(self) -> KVCacheConfig:
        if self.sizing == "vidur" and self.max_request_tokens is None:
            raise ValueError("sizing vidur needs max_request_tokens (Vidur's max_tokens)")
        return self
