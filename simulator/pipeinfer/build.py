"""A scenario's pipeline, priced: stage costs from its cost model, the draft's from its
shape, the link from the decoder's emulated link, `hardware.stage_link` or the GPUs'
interconnect; and the policy and acceptance of its `pipeline` / `pipeinfer` decoder."""

from __future__ import annotations

import itertools

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.models import ModelSpec, dtype_bytes, resolve_model
from simulator.cost_models.base import CostModel, StepWork
from simulator.cost_models.factory import build_cost_model, shape_cost_model
from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.decoders.draft_cost import draft_model_spec
from simulator.pipeinfer.engine import Policy
from simulator.pipeinfer.timing import Link, PipelineTiming, even_layers
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import PipeInferDecoderConfig, PipelineDecoderConfig
from workbench.scenario.scenario import Scenario

PipelineDecoder = PipelineDecoderConfig | PipeInferDecoderConfig


def pipeline_policy(decoder: PipelineDecoder) -> Policy:
    if isinstance(decoder, PipelineDecoderConfig):
        return Policy("pipeline", False, 0, 1)
    return Policy(
        "pipeinfer",
        decoder.asynchronous,
        decoder.max_draft_tokens,
        decoder.max_runs_in_flight,
        continue_chain=decoder.after_commit == "continue",
    )


def pipeline_timing(scenario: Scenario, decoder: PipelineDecoder) -> PipelineTiming:
    model = resolve_model(scenario.model)
    stages = scenario.hardware.pipeline_parallel
    layers = stage_layers(model, stages, decoder.pipeline.layer_split)
    target = build_cost_model(scenario)
    extra_layer_s = decoder.pipeline.emulated_layer_ms / 1e3

    def stage_cost(stage: int, nodes: int, context: int) -> float:
        share = layers[stage] / model.num_layers
        return share * _run_s(target, nodes, context) + layers[stage] * extra_layer_s

    draft = _draft_cost(scenario, decoder)
    return PipelineTiming(
        stages, layers, stage_cost, draft, _link(scenario, decoder),
        model.hidden_size * dtype_bytes(scenario.model.dtype),
    )  # fmt: skip


def stage_layers(model: ModelSpec, stages: int, split: list[float] | None) -> tuple[int, ...]:
    """Layers per stage: as the real backend splits them (`pipeline.layer_split` shares,
    else as even as possible)."""
    if stages > model.num_layers:
        raise WorkbenchError(
            f"{stages} stages for {model.name}'s {model.num_layers} layers",
            field="hardware.pipeline_parallel",
        )
    if split is None:
        return even_layers(model.num_layers, stages)
    if len(split) != stages:
        raise WorkbenchError(
            f"{len(split)} layer_split shares for {stages} stages",
            field="decoder.pipeline.layer_split",
        )
    bounds = [round(model.num_layers * sum(split[:i]) / sum(split)) for i in range(stages + 1)]
    layers = tuple(b - a for a, b in itertools.pairwise(bounds))
    if min(layers) < 1:
        raise WorkbenchError("a stage gets no layer", field="decoder.pipeline.layer_split")
    return layers


def _run_s(cost: CostModel, nodes: int, context: int) -> float:
    """The whole model's time for one run: a decode for one token, a chunk otherwise."""
    if nodes == 1:
        return cost.step_time_s(StepWork(decode_batch_size=1, decode_context_sum=context + 1))
    return cost.step_time_s(
        StepWork(prefill_chunk_tokens=(nodes,), prefill_context_tokens=(context,))
    )


def _draft_cost(scenario: Scenario, decoder: PipelineDecoder):
    if isinstance(decoder, PipelineDecoderConfig):
        return lambda context: 0.0
    cost = shape_cost_model(scenario, draft_model_spec(decoder))
    return lambda context: _run_s(cost, 1, context)


def _link(scenario: Scenario, decoder: PipelineDecoder) -> Link:
    emulated = decoder.pipeline.emulated_link
    if emulated is not None:
        rate = None if emulated.bandwidth_gbps is None else emulated.bandwidth_gbps * 1e9 / 8
        return Link(emulated.latency_ms / 1e3, rate)
    stage_link = scenario.hardware.stage_link
    if stage_link is not None:
        return Link(stage_link.latency_us * 1e-6, stage_link.bandwidth_gb_s * 1e9)
    gpu = get_gpu(scenario.hardware.gpu)
    return Link(gpu.collective_latency_s, gpu.interconnect_bandwidth_bytes_s)


def pipeline_acceptance(decoder: PipelineDecoder) -> AcceptanceDistribution | None:
    """P(accepted drafts) of a run, from the decoder's `acceptance` (simulator only)."""
    if isinstance(decoder, PipelineDecoderConfig):
        return None
    return AcceptanceDistribution.from_config(decoder.acceptance, decoder.max_draft_tokens)
