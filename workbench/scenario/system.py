"""What runs the workload: model, hardware/cluster, cost model, scheduler, decoder, routing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from workbench.scenario.admission import AdmissionConfig, FcfsAdmission
from workbench.scenario.base import MAX_SEED, StoredRef, StrictModel
from workbench.scenario.decoders import DecoderConfig as DecoderConfig
from workbench.scenario.decoders import VanillaDecoderConfig as VanillaDecoderConfig
from workbench.scenario.kv_cache import KVCacheConfig as KVCacheConfig
from workbench.scenario.seqsched import SequenceSchedulingConfig


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
    kernels: Literal["auto", "triton", "grouped", "reference"] = Field(
        default="auto",
        description="Real backend attention and KV-cache kernels: `auto` (Triton on CUDA, "
        "`grouped` elsewhere), `triton`, `grouped` (the PyTorch references, attention run per "
        "group of rows of like shape) or `reference` (the references as they are, every row "
        "padded to the step's longest query and widest block table) to force one.",
    )


class StageLinkConfig(StrictModel):
    """A link between pipeline stages: a fixed latency plus bytes over a bandwidth."""

    latency_us: float = Field(ge=0, description="One-way latency per hop, microseconds.")
    bandwidth_gb_s: float = Field(gt=0, description="Bandwidth per hop, gigabytes per second.")


class ClusterConfig(StrictModel):
    """Hardware: a catalog GPU, how many replicas, and the parallelism inside one."""

    gpu: str = Field(
        description="Hardware catalog name: a100-80gb, h100-sxm, h200, l40s, a40, rtx3090, cpu."
    )
    replicas: int = Field(default=1, gt=0, description="Independent model replicas.")
    tensor_parallel: int = Field(default=1, gt=0, description="GPUs per replica (TP degree).")
    pipeline_parallel: int = Field(
        default=1,
        gt=0,
        description="Pipeline stages per replica: contiguous layer ranges, one process each.",
    )
    stage_link: StageLinkConfig | None = Field(
        default=None,
        description="Simulator: the hop between pipeline stages (hidden states of a step's "
        "tokens); null: the GPUs' interconnect, as within one node.",
    )


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
        default=1.0,
        ge=0,
        description="Fixed CPU/scheduling overhead per engine step (Vidur's predictor: 0, "
        "its CPU overheads are off by default).",
    )
    statistic: Literal["median", "mean", "min", "max"] = Field(
        default="median", description="Which timing statistic to use (Vidur trains on median)."
    )
    gqa_batching_overhead: float = Field(
        default=0.0,
        ge=0,
        description="For a GQA model, decode attention of more than one sequence and prefill "
        "attention of several chunks cost this share more (Vidur's predictor: 0.1).",
    )
    all_reduce_launch_ms: float = Field(
        default=0.0,
        ge=0,
        description="CPU launch time added to every all-reduce (Vidur's predictor: 0.02 ms).",
    )
    embedding: bool = Field(
        default=True,
        description="Price the embedding lookup once per step (Vidur's predictor leaves it out).",
    )


class FixedStepCostConfig(StrictModel):
    kind: Literal["fixed_step"] = Field(
        description="Memory-bound idealisation: every engine step takes the same time, "
        "whatever its batch size, context or prefill."
    )
    step_ms: float = Field(gt=0, description="Duration of every step.")


class FittedCostConfig(StrictModel):
    kind: Literal["fitted"] = Field(
        description="Kernels priced by their shapes with the GPU's efficiencies fitted to "
        "measured GEMM, elementwise and attention kernels (hardware catalog, or `fit_path`)."
    )
    fit_path: Path | None = Field(
        default=None,
        description="A kernel fit JSON written by `workbench fit-cost-model` (your own "
        "measurements); default: the hardware catalog's fit for hardware.gpu.",
    )
    interconnect_efficiency: float = Field(
        default=0.7, gt=0, le=1, description="Achieved share of the TP link bandwidth."
    )
    step_overhead_ms: float = Field(
        default=1.0, ge=0, description="Fixed CPU/scheduling overhead per engine step."
    )
    layer_overhead_ms: float = Field(
        default=0.0,
        ge=0,
        description="Host time per transformer layer per forward, added to the kernels: an "
        "eager framework (Hugging Face without CUDA graphs) launches each layer's kernels from "
        "Python. 0 for an engine that hides it (CUDA graphs).",
    )


class CalibratedCostConfig(StrictModel):
    kind: Literal["calibrated"] = Field(
        description="Step costs fitted to a real engine's measured steps (`workbench "
        "calibrate`): the simulator prices a step as that engine spends it, on its device."
    )
    profile: StoredRef | None = Field(
        default=None,
        description="A calibration profile in the run's results database: its name (the "
        "latest of that name) or its id.",
    )
    profile_csv: Path | None = Field(
        default=None,
        description="A profile exported with `workbench calibrate --csv FILE`, instead of "
        "`profile`.",
    )
    allow_other_device: bool = Field(
        default=False,
        description="Price the scenario with a profile measured on another device or dtype "
        "than its own (a what-if). Off: such a profile is refused.",
    )
    draft_profile: StoredRef | None = Field(
        default=None,
        description="Speculative decoding: the draft model's calibration profile (`workbench "
        "calibrate --model DRAFT`), in the run's results database; its measured forwards price "
        "the draft's (a profile of the target says nothing of the draft). `--backend both` "
        "picks the latest of the draft's shape when left out.",
    )
    draft_profile_csv: Path | None = Field(
        default=None,
        description="The draft's profile exported with `workbench calibrate --csv FILE`, "
        "instead of `draft_profile`.",
    )
    draft_roofline: bool = Field(
        default=False,
        description="Price the draft by the scenario hardware's roofline instead of a profile "
        "(a what-if: the draft's own cost unmeasured, and on a CPU far too cheap).",
    )
    price_scale: float = Field(
        default=1.0,
        gt=0.0,
        le=100.0,
        description="Every step price times this: the machine's speed against its "
        "calibration's (above 1 a slower machine; `--backend both --speed-matched` sets it to "
        "a real run's summed step wall times over the twin's prices of those steps). 1 "
        "prices the machine as it was calibrated.",
    )
    draft_price_scale: float | None = Field(
        default=None,
        gt=0.0,
        le=100.0,
        description="The draft model's prices times this instead of `price_scale` (the "
        "draft's own speed against its calibration's: `--speed-matched` sets it from a real "
        "run's measured draft forwards). Unset: `price_scale`.",
    )

    @model_validator(mode="after")
    def _one_profile(self) -> CalibratedCostConfig:
        if (self.profile is None) == (self.profile_csv is None):
            raise ValueError("give exactly one of profile (in the database) or profile_csv")
        drafts = [self.draft_profile, self.draft_profile_csv, self.draft_roofline or None]
        if sum(d is not None for d in drafts) > 1:
            raise ValueError(
                "give at most one of draft_profile, draft_profile_csv or draft_roofline"
            )
        return self


CostModelConfig = Annotated[
    RooflineCostConfig
    | VidurProfileCostConfig
    | FixedStepCostConfig
    | FittedCostConfig
    | CalibratedCostConfig,
    Field(discriminator="kind"),
]


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
    admission: AdmissionConfig = Field(
        default_factory=lambda: FcfsAdmission(kind="fcfs"),
        description="Which waiting request is admitted next: FCFS or by predicted length.",
    )
    prompt_blocks: Literal["per_chunk", "whole_prompt"] = Field(
        default="per_chunk",
        description="KV blocks a chunked prompt takes: each chunk's as it is scheduled "
        "(vLLM V1), or the whole prompt's at admission (vLLM V0, Vidur's Sarathi), which "
        "admits fewer requests at once and preempts less.",
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
    ContinuousBatchingConfig | StaticBatchingConfig | SequenceSchedulingConfig,
    Field(discriminator="kind"),
]


class RoutingConfig(StrictModel):
    kind: Literal["round_robin", "least_outstanding", "least_waiting"] = Field(
        default="round_robin",
        description="How arrivals are spread over replicas: in turn; to the fewest queued + "
        "running requests; or to the fewest queued only (Vidur's `lor`).",
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
    draw_seed: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SEED,
        description="Seed of the simulator's own draws (a multi-token decoder's accepted "
        "tokens and candidates, APAR's parametric trees, PipeInfer's acceptance); none: the "
        "scenario's seed. Another value draws them again over the same request stream: the "
        "spread a simulated run (a real run's twin) carries from its own sampling.",
    )
