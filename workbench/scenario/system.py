"""What runs the workload: model, hardware/cluster, cost model, scheduler, decoder, routing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from workbench.scenario.base import StrictModel


class ModelConfig(StrictModel):
    """The served model: a catalog name, or a Hugging Face `config.json` path."""

    name: str = Field(
        description="Catalog name (e.g. `llama-2-70b`, `llama-3-8b`, `mistral-7b`) or a label "
        "when `config_path` is given."
    )
    config_path: Path | None = Field(
        default=None,
        description="A Hugging Face checkpoint folder (or its config.json): its shape for the "
        "simulator, its weights for the real backend.",
    )
    zoo: str | None = Field(
        default=None,
        description="A model of the workbench's own zoo (e.g. `tiny`), built by "
        "`workbench zoo build NAME`; used instead of config_path.",
    )
    zoo_dir: str | None = Field(
        default=None, description="Zoo cache folder (default ~/.cache/decoding-workbench/zoo)."
    )
    dtype: Literal["fp16", "bf16", "fp32", "fp8"] = Field(
        default="fp16", description="Weight and KV-cache dtype (sets bytes per element)."
    )


class ClusterConfig(StrictModel):
    """Hardware: a catalog GPU, how many replicas, and the parallelism inside one."""

    gpu: str = Field(description="Hardware catalog name: a100-80gb, h100-sxm, h200, l40s, cpu.")
    replicas: int = Field(default=1, gt=0, description="Independent model replicas.")
    tensor_parallel: int = Field(default=1, gt=0, description="GPUs per replica (TP degree).")


class RooflineCostConfig(StrictModel):
    kind: Literal["roofline"] = Field(description="FLOPs/bytes roofline from the catalogs.")
    compute_efficiency: float = Field(
        default=0.6, gt=0, le=1, description="Achieved share of peak tensor FLOP/s (GEMMs)."
    )
    memory_efficiency: float = Field(
        default=0.8, gt=0, le=1, description="Achieved share of peak memory bandwidth."
    )
    interconnect_efficiency: float = Field(
        default=0.7, gt=0, le=1, description="Achieved share of the TP link bandwidth."
    )
    step_overhead_ms: float = Field(
        default=1.0, ge=0, description="Fixed CPU/launch overhead per engine step."
    )


class VidurProfileCostConfig(StrictModel):
    kind: Literal["vidur_profile"] = Field(
        description="Measured per-layer operator timings in Vidur's CSV format."
    )
    mlp_csv: Path = Field(description="compute/<sku>/<org>/<model>/mlp.csv (token-level ops).")
    attention_csv: Path = Field(description="attention.csv (prefill and decode attention).")
    all_reduce_csv: Path | None = Field(
        default=None, description="network/<node>/all_reduce.csv; required when TP > 1."
    )
    step_overhead_ms: float = Field(
        default=1.0, ge=0, description="Fixed CPU/scheduling overhead per engine step."
    )
    statistic: Literal["median", "mean", "min", "max"] = Field(
        default="median", description="Which timing statistic to use (Vidur trains on median)."
    )


CostModelConfig = Annotated[
    RooflineCostConfig | VidurProfileCostConfig, Field(discriminator="kind")
]


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


class ContinuousBatchingConfig(StrictModel):
    kind: Literal["continuous"] = Field(description="vLLM-style iteration-level batching.")
    max_batch_size: int = Field(default=256, gt=0, description="Most sequences per step.")
    max_batched_tokens: int = Field(
        default=8192, gt=0, description="Most tokens (prefill + decode) per step."
    )
    chunked_prefill: bool = Field(
        default=False,
        description="Sarathi-style: split prompts into chunks that share a step's token budget "
        "with decodes (decodes first).",
    )
    chunk_size: int = Field(
        default=512, gt=0, description="Token budget per step when chunked_prefill is on."
    )
    kv_cache: KVCacheConfig = Field(default_factory=KVCacheConfig, description="Paged KV budget.")


class StaticBatchingConfig(StrictModel):
    kind: Literal["static"] = Field(
        description="Batches formed in arrival order run until their longest member ends."
    )
    batch_size: int = Field(default=16, gt=0, description="Requests per batch.")
    max_wait_s: float = Field(
        default=0.0,
        ge=0,
        description="How long a partial batch waits for more arrivals before it starts.",
    )
    kv_cache: KVCacheConfig = Field(default_factory=KVCacheConfig, description="Paged KV budget.")


SchedulerConfig = Annotated[
    ContinuousBatchingConfig | StaticBatchingConfig, Field(discriminator="kind")
]


class VanillaDecoderConfig(StrictModel):
    kind: Literal["vanilla"] = Field(description="One token per sequence per step.")
    temperature: float = Field(
        default=0.0, ge=0, description="Sampling temperature of the real backend; 0 is greedy."
    )
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass (1: off).")
    top_k: int = Field(default=0, ge=0, description="Sample among the k likeliest (0: off).")


# Speculative, lookahead, APAR and PipeInfer decoders join this union in their issues.
DecoderConfig = Annotated[VanillaDecoderConfig, Field(discriminator="kind")]


class RoutingConfig(StrictModel):
    kind: Literal["round_robin", "least_outstanding"] = Field(
        default="round_robin", description="How arrivals are spread over replicas."
    )


class SLOConfig(StrictModel):
    ttft_ms: float | None = Field(default=None, gt=0, description="Time-to-first-token limit.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Time-per-output-token limit.")
    e2e_ms: float | None = Field(default=None, gt=0, description="End-to-end latency limit.")


class SimulatorConfig(StrictModel):
    bulk_steps: bool = Field(
        default=True,
        description="Advance decode spans between scheduling events in bulk (same results as "
        "step by step, much faster). Off: one simpy event per step.",
    )
